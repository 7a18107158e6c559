"""The bench command's charts stand alone, its report keeps its tables, its progress degrades."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import pathlib
import sys
import sysconfig
import threading

# numpy, which matplotlib imports, starts its BLAS threads at import: import it
# here, before the leak check's thread count, not in the first test.
import matplotlib.figure  # noqa: F401
import pytest
from PIL import Image

from aiosubinterp.demo import bench

# Matplotlib's tab:green, tab:red, tab:blue, tab:gray.
GREEN, RED, BLUE, GRAY = (44, 160, 44), (214, 39, 40), (31, 119, 180), (127, 127, 127)


@pytest.fixture(autouse=True, scope="module")
def _fonts_loaded(tmp_path_factory):
    # matplotlib keeps the font files it drew with open (a cache for the
    # process): draw once before the leak check's fd snapshot.
    bench.chart(str(tmp_path_factory.mktemp("warm") / "c.png"), _doc({}, [_target("t", 1, "<", 2)]))


def _doc(summary, targets, name="bench_throughput"):
    return {
        "benchmark": f"{name}.py",
        "title": f"{name}: what it measures",
        "meta": {"python": "CPython 3.13.0", "date": "2026-12-04"},
        "params": {"quick": True},
        "summary": summary,
        "targets": targets,
    }


def _target(what, measured, op, limit, unit="x"):
    ok = {"<=": measured <= limit, "<": measured < limit, ">=": measured >= limit}[op]
    return {
        "what": what,
        "measured": measured,
        "op": op,
        "limit": limit,
        "unit": unit,
        "verdict": "n/a" if math.isnan(measured) else ("PASS" if ok else "MISS"),
        "note": "3.14+",
    }


def test_chart_has_title_contenders_and_targets(tmp_path):
    doc = _doc(
        {
            "median_tasks_per_s": {
                "aiosubinterp": 120_000.0,
                "to_thread": 22_000.0,
                "procpool-fork": 7_000.0,
            }
        },
        [
            _target("tasks/s / to_thread's", 5.5, ">=", 3),
            _target("tasks/s / process pool's", 8.0, ">=", 10),
            _target("tasks/s / stdlib executor's", math.nan, ">=", 10),
        ],
    )
    path = tmp_path / "c.png"
    bench.chart(str(path), doc)
    with Image.open(path) as png:
        assert png.format == "PNG"
        assert png.text["Title"] == "bench_throughput: what it measures"
        width, height = png.size
        assert width == 1100 and 600 <= height <= 900
        colours = {rgb for _, rgb in png.convert("RGB").getcolors(maxcolors=1 << 20)}
    # ours in blue, the others in grey; one PASS (green) and one MISS (red) target
    assert {BLUE, GRAY, GREEN, RED} <= colours


def test_chart_colours_the_dask_plugin_as_ours(tmp_path):
    path = tmp_path / "c.png"
    bench.chart(
        str(path),
        _doc(
            {"median_tasks_per_s": {"dask threads": 30.0, "dask interpreters": 60.0}},
            [],
            "bench_dask",
        ),
    )
    with Image.open(path) as png:
        colours = {rgb for _, rgb in png.convert("RGB").getcolors(maxcolors=1 << 20)}
    assert {BLUE, GRAY} <= colours


def test_chart_without_contenders_or_targets(tmp_path):
    path = tmp_path / "c.png"
    bench.chart(str(path), _doc({"unknown": 1}, [_target("lag p99", 0.9, "<", 2.0, "ms")]))
    with Image.open(path) as png:
        assert png.text["Title"].startswith("bench_throughput")
        assert png.size[1] < 500  # one panel
    bench.chart(str(path), _doc({}, []))
    with Image.open(path) as png:
        assert png.size == (1100, 300)


@pytest.mark.parametrize(
    ("summary", "name", "expected"),
    [
        ({"median_tasks_per_s": {"a": 1.0}}, "bench_throughput", ("tasks/s", "higher", {"a": 1.0})),
        ({"speedup": {"serial": 1.0, "b": 1.7}}, "bench_cpu_scaling", ("x", "higher", None)),
        (
            {"lag_ms": {"a": {"p50": 0.1, "p99": 0.9}}},
            "bench_loop_lag",
            ("ms", "lower", {"a": 0.9}),
        ),
        (
            {"medians": {"a": {"small_i2l": 5.0}}},
            "bench_channel",
            ("items/s", "higher", {"a": 5.0}),
        ),
        (
            {"http": {"a": {"light_p99_ms": 2.5, "heavy_rps": 90.0}}},
            "bench_http",
            ("ms", "lower", {"a": 2.5}),
        ),
        ({"stats": {"a": {"p50": 15.0}}}, "bench_roundtrip", ("µs", "lower", {"a": 15.0})),
        (
            {"stats": {"a 64MiB-echo": {"p50": 19.0}, "a 1MiB-len": {"p50": 2.0}}},
            "bench_buffer",
            ("µs", "lower", {"a": 19.0}),
        ),
        (
            {"records_per_s": {"a": 9.0}, "dropped_records_per_s": {"a": 90.0}},
            "bench_logging",
            ("records/s", "higher", {"a": 9.0}),
        ),
        (
            {"a": {"first_result_ms": {"p50": 50.0}}, "b": 3},
            "bench_startup",
            ("ms", "lower", {"a": 50.0}),
        ),
    ],
)
def test_headline_reads_every_benchmarks_summary(summary, name, expected):
    _, unit, better, values = bench.headline(_doc(summary, [], name))
    assert (unit, better) == expected[:2]
    if expected[2] is not None:
        assert values == expected[2]


def test_headline_of_an_unknown_or_broken_summary_is_none():
    assert bench.headline(_doc({"other": 1}, [])) is None
    assert bench.headline(_doc({"stats": {"a": 3}}, [], "bench_roundtrip")) is None


def test_progress_off_a_terminal_prints_plain_lines(capsys, monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):  # would make rich call it a terminal
        monkeypatch.delenv(name, raising=False)
    with bench._progress(2) as advance:
        advance(0, "bench_a.py")
        advance(1, "bench_b.py")
        advance(2, "done")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[0] for line in lines] == ["[0/2]", "[1/2]", "[2/2]"]
    assert lines[1].endswith("bench_b.py") and "\x1b[" not in "".join(lines)


def test_report_section_has_both_tables():
    doc = _doc(
        {"median_tasks_per_s": {"aiosubinterp": 1000.0, "to_thread": 200.0}},
        [_target("tasks/s / to_thread's", 5.0, ">=", 3)],
    )
    doc["meta"]["loadavg_start"] = "0.1"
    text = bench._report_section("bench_throughput.py", doc, ["py", "x", "--json"], "c.png")
    assert "| contender | median tasks per second, tasks/s (higher is better) |" in text
    assert "| aiosubinterp | 1,000 |" in text
    assert "| 1 | tasks/s / to_thread's | 5x | >= 3x | PASS |" in text
    assert "![bench_throughput: what it measures](c.png)" in text


def test_the_real_benchmarks_json_still_has_a_headline(tmp_path):
    # Every benchmark's summary keys, as its report() writes them: a renamed key
    # would silently drop the contender panel.
    root = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
    for script in sorted(root.glob("bench_*.py")):
        source = script.read_text()
        keys = [
            k
            for k in (
                "median_tasks_per_s",
                "speedup",
                "lag_ms",
                "medians",
                "stats",
                "first_result_ms",
                "http",
                "records_per_s",
                "requests_per_s",
            )
            if f'"{k}"' in source
        ]
        assert keys, f"{script.name}: no summary key the bench command charts"
    json.dumps(_doc({}, []))  # the fixture itself is JSON, as the CLI reads it


# -- benchmarks/bench_http.py's pure helpers (no wrk needed) ----------------------------

BENCHMARKS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"

# wrk 4.1.0's report of a paced /ping run with --latency and _wrk_report.lua.
WRK_PING = """\
Running 1s test @ http://127.0.0.1:18093/ping
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   849.13us    1.48ms   9.78ms   86.67%
    Req/Sec     6.31k     2.96k   11.41k    60.00%
  Latency Distribution
     50%   61.00us
     75%    1.10ms
     90%    2.84ms
     99%    7.12ms
  6298 requests in 1.01s, 0.94MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
Requests/sec:   6229.68
Transfer/sec:      0.93MB
@@wrk {"requests":6298,"bytes":985600,"duration_us":1010000,"errors":{"connect":0,"read":1,\
"write":0,"status":0,"timeout":2},"latency_us":{"min":41,"max":9780,"mean":849.1,\
"stdev":1480.0,"percentiles":{"50":61,"90":2840,"99":7120,"99.9":9100}}}
"""

WRK_STREAM = """\
Running 1s test @ http://127.0.0.1:18093/stream?count=64&size=1048576
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   174.23ms   53.06ms 235.43ms   50.00%
    Req/Sec     5.83      2.93    10.00     66.67%
  6 requests in 1.14s, 429.01MB read
  Non-2xx or 3xx responses: 3
Requests/sec:      5.28
Transfer/sec:    377.49MB
"""


def _import_benchmarks(*names):
    """Import modules of benchmarks/ by name (the folder on sys.path only meanwhile)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return tuple(importlib.import_module(name) for name in names)
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture(scope="module")
def bench_http():
    return _import_benchmarks("bench_http")[0]


def test_wrk_units(bench_http):
    assert bench_http.parse_duration("850.00us") == pytest.approx(850e-6)
    assert bench_http.parse_duration("1.23ms") == pytest.approx(1.23e-3)
    assert bench_http.parse_duration("2.00s") == 2.0
    assert bench_http.parse_duration("1.50m") == 90.0
    assert bench_http.parse_size("512.00B") == 512
    assert bench_http.parse_size("1.50KB") == 1536
    assert bench_http.parse_size("377.49MB") == pytest.approx(377.49 * 2**20)
    for bad in ("fast", "12", "1.2 parsecs"):
        with pytest.raises(ValueError, match="not a wrk"):
            bench_http.parse_duration(bad)
    with pytest.raises(ValueError, match="not a wrk size"):
        bench_http.parse_size("12 bytes")


def test_wrk_text_report(bench_http):
    ping = bench_http.parse_wrk_text(WRK_PING)
    assert ping["requests_per_s"] == 6229.68 and ping["requests"] == 6298
    assert ping["duration_s"] == pytest.approx(1.01)
    assert ping["bytes_per_s"] == pytest.approx(0.93 * 2**20)
    lat = ping["latency"]
    assert lat["p50"] == pytest.approx(61e-6) and lat["p99"] == pytest.approx(7.12e-3)
    assert set(lat) == {"avg", "stdev", "max", "p50", "p75", "p90", "p99"}
    assert lat["max"] == pytest.approx(9.78e-3)
    assert ping["errors"] == {"connect": 0, "read": 1, "write": 0, "timeout": 2}
    stream = bench_http.parse_wrk_text(WRK_STREAM)
    assert stream["bytes_per_s"] == pytest.approx(377.49 * 2**20)
    assert stream["bytes"] == pytest.approx(429.01 * 2**20)
    assert stream["errors"] == {"status": 3}
    assert "p50" not in stream["latency"]  # no --latency: no distribution


def test_wrk_lua_report(bench_http):
    rep = bench_http.parse_wrk_report(WRK_PING)
    assert rep["requests_per_s"] == pytest.approx(6298 / 1.01)
    assert rep["bytes_per_s"] == pytest.approx(985600 / 1.01)
    assert rep["latency_ms"] == pytest.approx(
        {
            "p50": 0.061,
            "p90": 2.84,
            "p99": 7.12,
            "p99.9": 9.1,
            "min": 0.041,
            "max": 9.78,
            "mean": 0.8491,
        }
    )
    assert rep["errors_total"] == 3
    with pytest.raises(ValueError, match="no '@@wrk' line"):
        bench_http.parse_wrk_report(WRK_STREAM)


def test_wrk_lua_report_without_answers_has_no_latency(bench_http):
    line = (
        '@@wrk {"requests":0,"bytes":0,"duration_us":2000000,"errors":{"connect":0,'
        '"read":0,"write":0,"status":0,"timeout":0},"latency_us":{"min":0,"max":0,'
        '"mean":0,"stdev":0,"percentiles":{"50":0,"90":0,"99":0,"99.9":0}}}'
    )
    rep = bench_http.parse_wrk_report(line)
    assert rep["requests_per_s"] == 0
    assert all(math.isnan(v) for v in rep["latency_ms"].values())


def test_http_contender_names(bench_http):
    both = bench_http.contender_names()
    assert both[:4] == [
        "aiohttp/inline",
        "aiohttp/to_thread",
        "aiohttp/aiosubinterp-processes",
        "aiohttp/aiosubinterp",
    ]
    assert both[4:] == [n.replace("aiohttp/", "starlette/") for n in both[:4]]
    assert bench_http.contender_names("both") == both
    assert bench_http.contender_names("starlette") == both[4:]
    assert bench_http.contender_names("aiohttp") == both[:4]
    fastapi = bench_http.contender_names("fastapi")
    assert fastapi == [n.replace("aiohttp/", "fastapi/") for n in both[:4]]
    assert bench_http.contender_names("all") == both + fastapi
    with pytest.raises(ValueError, match="unknown app 'django'"):
        bench_http.contender_names("django")
    assert bench_http.split_name("fastapi/aiosubinterp") == ("fastapi", "aiosubinterp")
    assert bench_http.split_name("starlette/aiosubinterp") == ("starlette", "aiosubinterp")
    for bad in ("aiosubinterp", "flask/to_thread", "aiohttp/threads"):
        with pytest.raises(ValueError, match="not a bench_http contender"):
            bench_http.split_name(bad)
    assert bench_http.apps_in(["starlette/inline", "aiohttp/to_thread"]) == ["aiohttp", "starlette"]
    assert bench_http.apps_in(["starlette/inline"]) == ["starlette"]
    # Every kind of contender is one of the apps' --mode.
    assert set(bench_http.MODES.values()) == {"interpreters", "processes", "to_thread", "inline"}


def test_http_app_option(bench_http, monkeypatch):
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench_http.py", "--quick", "--app", "starlette", "--only", "starlette/to_thread"],
    )
    assert bench_http._app_option() == "starlette"
    assert sys.argv == ["bench_http.py", "--quick", "--only", "starlette/to_thread"]
    assert bench_http._app_option() == "both"  # the default; a child gets no --app
    monkeypatch.setattr(sys, "argv", ["bench_http.py", "--app", "all"])
    assert bench_http._app_option() == "all"


def test_http_fastapi_posts_a_calibrated_body(bench_http, tmp_path):
    body = json.loads(bench_http.score_body(1234))
    assert body["id"] == 1234 and len(body["items"]) == bench_http.SCORE_ITEMS
    assert {item["n"] for item in body["items"]} == {1234}
    cmd = bench_http._wrk_cmd("wrk", "http://h/score", 2, 8, body_file=str(tmp_path / "b"))
    assert cmd[-3:] == ["--", "0", str(tmp_path / "b")]  # the Lua script POSTs that file
    assert bench_http._wrk_cmd("wrk", "http://h/ping", 2, 1, delay_ms=5)[-2:] == ["--", "5"]
    lua = pathlib.Path(bench_http.LUA).read_text()
    assert 'wrk.method = "POST"' in lua and "application/json" in lua


def test_http_targets(bench_http):
    summary = {
        "aiohttp/to_thread": {"light_p99_ms": 40.0, "heavy_rps": 80.0},
        "aiohttp/aiosubinterp": {"light_p99_ms": 2.0, "heavy_rps": 150.0, "stream_mib_s": 650.0},
    }
    light, heavy, stream = bench_http.targets_of(summary)
    assert light.what.startswith("aiohttp: /ping p99")
    assert (light.measured, light.verdict) == (0.05, "PASS")
    assert (heavy.measured, heavy.verdict) == (1.875, "PASS")
    assert (stream.measured, stream.unit, stream.verdict) == (650.0, "MiB/s", "PASS")
    # Starlette's are against Starlette's own to_thread.
    summary.update(
        {
            "starlette/to_thread": {"light_p99_ms": 10.0, "heavy_rps": 100.0},
            "starlette/aiosubinterp": {
                "light_p99_ms": 2.0,
                "heavy_rps": 120.0,
                "stream_mib_s": 250.0,
            },
        }
    )
    light, heavy, stream = bench_http.targets_of(summary, "starlette")
    assert light.what.startswith("starlette: /ping p99")
    assert (light.measured, light.verdict) == (0.2, "MISS")
    assert (heavy.measured, heavy.verdict) == (1.2, "MISS")
    assert (stream.measured, stream.verdict) == (250.0, "PASS")
    assert [t.verdict for t in bench_http.targets_of(summary, "aiohttp")] == ["PASS"] * 3
    summary["aiohttp/aiosubinterp"].update(light_p99_ms=8.0, heavy_rps=100.0, stream_mib_s=150.0)
    assert [t.verdict for t in bench_http.targets_of(summary)] == ["MISS"] * 3
    # A contender that did not run: no verdict rather than a wrong one.
    only_ours = {"aiohttp/aiosubinterp": summary["aiohttp/aiosubinterp"]}
    assert [t.verdict for t in bench_http.targets_of(only_ours)] == ["n/a", "n/a", "MISS"]
    assert [t.verdict for t in bench_http.targets_of(only_ours, "starlette")] == ["n/a"] * 3
    assert [t.verdict for t in bench_http.targets_of({})] == ["n/a"] * 3
    # FastAPI's heavy endpoint is POST /score, and it has no /stream: two targets.
    summary.update(
        {
            "fastapi/to_thread": {"light_p99_ms": 40.0, "heavy_rps": 80.0},
            "fastapi/aiosubinterp": {"light_p99_ms": 2.0, "heavy_rps": 150.0},
        }
    )
    light, heavy = bench_http.targets_of(summary, "fastapi")
    assert light.what == "fastapi: /ping p99 while /score is loaded / to_thread's"
    assert heavy.what == "fastapi: /score req/s under load / to_thread's"
    assert (light.verdict, heavy.verdict) == ("PASS", "PASS")


def _http_summary(app):
    streams = {} if app == "fastapi" else {"stream_mib_s": 650.0}
    return {
        f"{app}/inline": {"light_p99_ms": math.nan, "heavy_rps": 40.0},
        f"{app}/to_thread": {"light_p99_ms": 40.0, "heavy_rps": 80.0},
        f"{app}/aiosubinterp-processes": {"light_p99_ms": 3.0, "heavy_rps": 140.0},
        f"{app}/aiosubinterp": {"light_p99_ms": 2.0, "heavy_rps": 100.0, **streams},
    }


@pytest.mark.parametrize(
    "apps",
    [
        ["aiohttp"],
        ["starlette"],
        ["aiohttp", "starlette"],
        ["fastapi"],
        ["aiohttp", "starlette", "fastapi"],
    ],
    ids=["aiohttp", "starlette", "both", "fastapi", "all"],
)
def test_http_chart_stands_alone(bench_http, tmp_path, apps):
    summary = {k: v for app in apps for k, v in _http_summary(app).items()}
    targets = [t for app in apps for t in bench_http.targets_of(summary, app)]
    path = tmp_path / "http.png"
    bench_http.draw_chart(str(path), summary, targets, "a test")
    with Image.open(path) as png:
        assert png.text["Title"].startswith("bench_http")
        assert png.size[0] == 1100 * len(apps)  # a column of panels per app
        colours = {rgb for _, rgb in png.convert("RGB").getcolors(maxcolors=1 << 20)}
    # ours in blue, the others in grey; PASS (green) and MISS (red) verdicts
    assert {BLUE, GRAY, GREEN, RED} <= colours


def test_wrk_missing_without_root_says_how_to_install(bench_http, monkeypatch):
    monkeypatch.setattr(bench_http.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match=r"wrk .* is not on PATH.*apt-get install wrk"):
        bench_http.find_wrk()
    monkeypatch.setattr(
        bench_http.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None
    )
    with pytest.raises(SystemExit, match="installing is off"):
        bench_http.find_wrk(install=False)


# -- benchmarks/_contenders.py: the free-threaded build's thread contenders ----------


@pytest.fixture(scope="module")
def bench_contenders():
    return _import_benchmarks("_contenders", "_work")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_threadpool_contender_runs_calls_on_its_own_threads(bench_contenders, loop):
    contenders, work = bench_contenders

    async def body():
        async with contenders.open_runner("threadpool", loop, workers=2) as runner:
            results = await asyncio.gather(*(runner.submit(work.noop, i) for i in range(20)))
            idents = {await runner.run(threading.get_ident) for _ in range(10)}
            return runner.info, results, idents

    info, results, idents = contenders.run_async(body, loop)
    assert info == "concurrent.futures.ThreadPoolExecutor(2), loop.run_in_executor"
    assert results == list(range(20))
    assert threading.get_ident() not in idents and 1 <= len(idents) <= 2


def test_thread_contenders_run_by_default_exactly_on_free_threaded_builds(bench_contenders):
    contenders, _ = bench_contenders
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert contenders.FREE_THREADED is free_threaded
    names = ["aiosubinterp", "threadpool", "to_thread"]
    assert contenders.default_selection(names) == (
        names if free_threaded else ["aiosubinterp", "to_thread"]
    )
    assert "threadpool" in contenders.POOL_KINDS


# -- benchmarks/bench_scaling.py's worker counts, option and report -----------------------


@pytest.fixture(scope="module")
def bench_scaling():
    return _import_benchmarks("bench_scaling")[0]


def test_scaling_worker_counts_double_up_to_the_limit(bench_scaling):
    assert bench_scaling.worker_counts(1) == [1]
    assert bench_scaling.worker_counts(2) == [1, 2]
    assert bench_scaling.worker_counts(6) == [1, 2, 4, 6]
    assert bench_scaling.worker_counts(64) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(ValueError, match="--max-workers must be >= 1, not 0"):
        bench_scaling.worker_counts(0)


def test_scaling_max_workers_option(bench_scaling, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_scaling.py", "--quick", "--max-workers", "16"])
    assert bench_scaling._max_workers_option() == 16
    assert sys.argv == ["bench_scaling.py", "--quick"]
    assert bench_scaling._max_workers_option() is None  # the default: the machine's CPUs
    monkeypatch.setattr(sys, "argv", ["bench_scaling.py", "--max-workers", "0"])
    with pytest.raises(SystemExit):
        bench_scaling._max_workers_option()
    assert "--max-workers must be >= 1, not 0" in capsys.readouterr().err


def _scaling_round(rates, locks=None):
    counts = {}
    for w, rate in rates.items():
        counts[str(w)] = {
            "wall": [1.0],
            "rate": [rate],
            "tasks": int(rate),
            "cpu_per_wall": 1.0,
            "other_cores": 0.0,
            "locks": locks if w == max(rates) else None,
        }
    return {"counts": counts, "info": "InterpreterPool(size=w)"}


def test_scaling_report_efficiency_and_lock_ranks(bench_scaling):
    chan = {
        "rank": 10,
        "acquired": 8_000,
        "contended": 80,
        "wait_ns": 800_000,
        "hold_ns": 400_000_000,
    }
    idle = {"rank": 30, "acquired": 0, "contended": 0, "wait_ns": 0, "hold_ns": 0}
    results = {
        "aiosubinterp": [_scaling_round({1: 100.0, 2: 150.0, 4: 200.0})],
        "to_thread": [_scaling_round({1: 50.0, 2: 50.0, 4: 50.0})],
        "aiosubinterp-pairs": [
            _scaling_round({2: 4_000.0, 4: 4_000.0}, {"chan": chan, "queue": idle})
        ],
        "procpool-fork": [{"error": "RuntimeError: no fork here"}],
    }
    params = {"counts": [1, 2, 4], "warmup": 1, "batches": 1, "tasks_per_worker": 10, "items": 10}
    rep = bench_scaling.report(results, params)
    scaling = rep.summary["scaling"]
    assert scaling["aiosubinterp"]["4"] == {"rate": 200.0, "per_worker": 50.0, "efficiency": 0.5}
    assert scaling["aiosubinterp-pairs"]["4"]["efficiency"] == 0.5  # vs 2 workers, its fewest
    assert "1" not in scaling["aiosubinterp-pairs"]
    assert rep.summary["median_tasks_per_s"] == {"aiosubinterp": 200.0, "to_thread": 50.0}
    _, headers, rows = rep.tables[0]
    assert headers[:7] == [
        "contender",
        "workers",
        "median rate",
        "min",
        "max",
        "per worker",
        "efficiency vs fewest",
    ]
    assert rows[0][:7] == ["aiosubinterp", "1", "100 tasks/s", "100", "100", "100", "1.00x"]
    assert rows[2][:7] == ["", "4", "200", "200", "200", "50", "0.500x"]
    assert rows[6][:3] == ["aiosubinterp-pairs", "2", "4,000 items/s"]
    assert rows[8][0] == "procpool-fork" and rows[8][2].startswith("error: RuntimeError")
    # the lock table: ranks acquired only, per item and as a share of the wall time
    heading, _, rows = rep.tables[1]
    assert heading.startswith("Lock ranks, aiosubinterp-pairs, 4 workers: 4,000 items")
    assert rows == [["chan", "10", "2.00", "80 (1.00%)", "10,000", "50,000", "40.0%", "0.1%"]]
    verdicts = {t.what: t.verdict for t in rep.targets}
    assert verdicts["tasks/s at 4 workers / to_thread's"] == "PASS"  # 4x
    assert verdicts["(info) efficiency at 4 workers, tiny tasks"] == "PASS"  # 0.5x
    assert verdicts["(info) efficiency at 4 workers, streams to the loop"] == "n/a"


# -- benchmarks/bench_serve.py's options and report (no wrk, no server) -------------------


@pytest.fixture(scope="module")
def bench_serve():
    return _import_benchmarks("bench_serve")[0]


def test_serve_workers_and_chart_options(bench_serve, monkeypatch):
    argv = ["bench_serve.py", "--quick", "--workers", "2,4,8", "--chart", "c.png"]
    monkeypatch.setattr(sys, "argv", argv)
    assert bench_serve._options() == ([2, 4, 8], "c.png")
    assert sys.argv == ["bench_serve.py", "--quick"]
    assert bench_serve._options() == ([2, 4], None)  # the defaults
    for bad in ("0", "two", ","):
        monkeypatch.setattr(sys, "argv", ["bench_serve.py", "--workers", bad])
        with pytest.raises(SystemExit, match="expected worker counts >= 1"):
            bench_serve._options()


def _serve_round(rps, pss):
    return {
        "by_workers": {
            n: {
                "routes": {
                    route: {"requests_per_s": r, "p50_ms": 1.0, "p99_ms": 9.0, "errors": 0}
                    for route, r in zip(("plaintext", "json", "cpu"), rps[n], strict=True)
                },
                "pss_mib": pss[n],
                "uss_mib": pss[n] - 2,
                "processes": 1,
            }
            for n in rps
        },
        "info": "serve",
    }


def test_serve_report_has_a_row_per_worker_count_and_targets_per_anchor(bench_serve):
    results = {
        "aiosubinterp serve": [
            _serve_round({"2": (900, 1000, 50), "4": (1800, 2000, 90)}, {"2": 30, "4": 50})
        ],
        "uvicorn h11 asyncio": [
            _serve_round({"2": (1000, 1000, 100), "4": (2000, 2000, 100)}, {"2": 60, "4": 90})
        ],
        "gunicorn uvicorn h11": [{"error": "gunicorn not installed"}],
    }
    rep = bench_serve.report(results, {"workers": [2, 4], "connections": 64, "seconds": 5})
    plaintext = rep.tables[0][2]
    assert [row[:3] for row in plaintext[:2]] == [
        ["aiosubinterp serve", "2", "900"],
        ["aiosubinterp serve", "4", "1,800"],
    ]
    assert plaintext[-1][2].startswith("error: gunicorn not installed")
    targets = {t.what: t for t in rep.targets}
    worst = targets["requests/s, worst route / uvicorn h11 asyncio's, 2 workers"]
    assert worst.measured == pytest.approx(0.5) and worst.verdict == "MISS"  # /cpu: 50 / 100
    assert targets["PSS / uvicorn h11 asyncio's, 4 workers"].measured == pytest.approx(50 / 90)
    assert targets["PSS / gunicorn uvicorn h11's, 2 workers"].verdict == "n/a"
    assert rep.summary["requests_per_s"]["aiosubinterp serve, 4 workers"] == 1800
