"""The bench command's charts stand alone, its report keeps its tables, its progress degrades."""

from __future__ import annotations

import json
import math
import pathlib

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
    return {"benchmark": f"{name}.py", "title": f"{name}: what it measures",
            "meta": {"python": "CPython 3.13.0", "date": "2026-12-04"}, "params": {"quick": True},
            "summary": summary, "targets": targets}


def _target(what, measured, op, limit, unit="x"):
    ok = {"<=": measured <= limit, "<": measured < limit, ">=": measured >= limit}[op]
    return {"what": what, "measured": measured, "op": op, "limit": limit, "unit": unit,
            "verdict": "n/a" if math.isnan(measured) else ("PASS" if ok else "MISS"),
            "note": "3.14+"}


def test_chart_has_title_contenders_and_targets(tmp_path):
    doc = _doc({"median_tasks_per_s": {"aiosubinterp": 120_000.0, "to_thread": 22_000.0,
                                       "procpool-fork": 7_000.0}},
               [_target("tasks/s / to_thread's", 5.5, ">=", 3),
                _target("tasks/s / process pool's", 8.0, ">=", 10),
                _target("tasks/s / stdlib executor's", math.nan, ">=", 10)])
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
    bench.chart(str(path), _doc({"median_tasks_per_s": {"dask threads": 30.0,
                                                        "dask interpreters": 60.0}}, [],
                                "bench_dask"))
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


@pytest.mark.parametrize(("summary", "name", "expected"), [
    ({"median_tasks_per_s": {"a": 1.0}}, "bench_throughput", ("tasks/s", "higher", {"a": 1.0})),
    ({"speedup": {"serial": 1.0, "b": 1.7}}, "bench_cpu_scaling", ("x", "higher", None)),
    ({"lag_ms": {"a": {"p50": 0.1, "p99": 0.9}}}, "bench_loop_lag", ("ms", "lower", {"a": 0.9})),
    ({"medians": {"a": {"small_i2l": 5.0}}}, "bench_channel", ("items/s", "higher", {"a": 5.0})),
    ({"stats": {"a": {"p50": 15.0}}}, "bench_roundtrip", ("µs", "lower", {"a": 15.0})),
    ({"stats": {"a 64MiB-echo": {"p50": 19.0}, "a 1MiB-len": {"p50": 2.0}}}, "bench_buffer",
     ("µs", "lower", {"a": 19.0})),
    ({"a": {"first_result_ms": {"p50": 50.0}}, "b": 3}, "bench_startup",
     ("ms", "lower", {"a": 50.0})),
])
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
    doc = _doc({"median_tasks_per_s": {"aiosubinterp": 1000.0, "to_thread": 200.0}},
               [_target("tasks/s / to_thread's", 5.0, ">=", 3)])
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
        keys = [k for k in ("median_tasks_per_s", "speedup", "lag_ms", "medians", "stats",
                            "first_result_ms") if f'"{k}"' in source]
        assert keys, f"{script.name}: no summary key the bench command charts"
    json.dumps(_doc({}, []))  # the fixture itself is JSON, as the CLI reads it
