"""``python -m aiosubinterp serve`` against uvicorn and gunicorn: requests/s, p99, memory (wrk).

The same plain ASGI application (``benchmarks/_serveapp.py``: ``/plaintext``,
``/json``, and ``/cpu``, ~1 ms of pure-Python CPU per request) is served by
each contender with N workers (``--workers 2,4``: each count in turn),
access log off, on a loopback port, in a process of its own started for the
count:

  aiosubinterp serve        ``python -m aiosubinterp serve``: N interpreters
                            of one process (h11 on asyncio in each)
  uvicorn h11 asyncio       ``uvicorn --workers N --http h11 --loop asyncio``:
                            N worker processes, the same HTTP parser and loop
                            as ours (a like-for-like anchor)
  gunicorn uvicorn h11      ``gunicorn -w N -k _serveworker.H11AsyncioWorker``:
                            N worker processes of uvicorn's worker class
                            (``uvicorn-worker``) on h11 and asyncio (the other
                            like-for-like anchor)
  uvicorn httptools uvloop  ``uvicorn --workers N`` with its fastest stack
                            (httptools and uvloop; skipped if not installed)

Per contender, worker count and route, after a 1 s warm-up: one ``wrk`` (2
threads, ``connections`` keep-alive connections) for ``seconds`` s.
Reported: requests/s, p50 and p99 latency (exact, from wrk's histogram
through ``_wrk_report.lua``), socket errors and non-2xx answers. Memory: the
PSS (proportional set size: shared pages divided among the processes that
share them) and the USS (pages no other process maps) summed over the
server's process and all its descendants, read after the load (warm
servers); the supervisor processes (uvicorn's, gunicorn's arbiter) count.
The .pyc files of aiosubinterp and of the app are compiled first, as a
wheel's install does (an editable install with PYTHONDONTWRITEBYTECODE would
compile them again in every interpreter).

Targets (one run, same machine), against each like-for-like anchor at each
worker count:
  requests/s >= 0.9 x the anchor's, on the worst of the three routes;
  PSS <= 0.5 x the anchor's.

wrk runs on the same cores as the server: on 2 cores the load generator takes
a share of the CPU from every contender alike. ``wrk`` must be on PATH (see
bench_http.py, which this script borrows its wrk helpers from).

Run: ``python benchmarks/bench_serve.py [--quick] [--json] [--only NAME,...]
[--workers 2,4] [--chart PATH]`` (``--chart``: a PNG of the run, as
``python -m aiosubinterp bench`` draws it; the README's is
``--chart docs/serve_bench.png``).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
from bench_http import LUA, find_wrk, run_wrks

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = ("plaintext", "json", "cpu")
OURS = "aiosubinterp serve"
ANCHORS = ("uvicorn h11 asyncio", "gunicorn uvicorn h11")
TITLE = "bench_serve: python -m aiosubinterp serve against uvicorn and gunicorn --workers (wrk)"
_REPORTED: dict[str, Any] = {}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_cmd(kind: str, port: int, workers: int) -> list[str]:
    if kind == OURS:
        return [
            sys.executable,
            "-m",
            "aiosubinterp",
            "serve",
            "_serveapp:app",
            "--app-dir",
            HERE,
            "--workers",
            str(workers),
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    if kind == "gunicorn uvicorn h11":
        # gunicorn's access log is off unless --access-logfile is given.
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "_serveapp:app",
            "--chdir",
            HERE,
            "--workers",
            str(workers),
            "--worker-class",
            "_serveworker.H11AsyncioWorker",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ]
    stack = (
        ["--http", "h11", "--loop", "asyncio"]
        if kind == "uvicorn h11 asyncio"
        else ["--http", "httptools", "--loop", "uvloop"]
    )
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "_serveapp:app",
        "--app-dir",
        HERE,
        "--workers",
        str(workers),
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
        "--lifespan",
        "off",
        *stack,
    ]


def _wait_ready(url: str, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before answering")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer {url} within {timeout} s")
        time.sleep(0.1)


def _server_memory_kib(pid: int) -> tuple[int, int, int]:
    """PSS and USS summed over the server's process tree, and its process count."""
    pids = [pid, *_machine.descendants(pid)]
    return (
        sum(_machine.pss_kib(p) for p in pids),
        sum(_machine.uss_kib(p) for p in pids),
        len(pids),
    )


def _wait_workers(pid: int, kind: str, workers: int, timeout: float = 30.0) -> None:
    """Until a process server has all its workers (the first answer may come from one alone)."""
    if kind == OURS:
        return  # one process; serve answers once its interpreters started
    # uvicorn: supervisor, workers and multiprocessing's resource tracker;
    # gunicorn: arbiter and workers.
    deadline = time.monotonic() + timeout
    while len(_machine.descendants(pid)) < workers and time.monotonic() < deadline:
        time.sleep(0.1)


def _serve_once(kind: str, workers: int, params: dict[str, Any], wrk: str) -> dict[str, Any]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        _server_cmd(kind, port, workers),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([_harness.REPO, HERE])},
    )
    try:
        _wait_ready(f"{base}/plaintext", proc)
        _wait_workers(proc.pid, kind, workers)
        routes = {}
        for route in ROUTES:
            cmd = [
                wrk,
                "-t2",
                f"-c{params['connections']}",
                "--timeout",
                "10s",
                "--latency",
                "-s",
                LUA,
            ]
            run_wrks([[*cmd, "-d1s", f"{base}/{route}", "--", "0"]], 1)  # warm-up
            rep = run_wrks(
                [[*cmd, f"-d{params['seconds']}s", f"{base}/{route}", "--", "0"]],
                params["seconds"],
            )[0]
            routes[route] = {
                "requests_per_s": rep["requests_per_s"],
                "p50_ms": rep["latency_ms"]["p50"],
                "p99_ms": rep["latency_ms"]["p99"],
                "errors": rep["errors_total"],
            }
        pss, uss, processes = _server_memory_kib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if proc.returncode not in (0, -signal.SIGTERM):
        raise RuntimeError(f"the server exited with {proc.returncode}: {err[-400:]}")
    return {"routes": routes, "pss_mib": pss / 1024, "uss_mib": uss / 1024, "processes": processes}


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        wrk = find_wrk(install=False)
        by_workers = {str(n): _serve_once(kind, n, params, wrk) for n in params["workers"]}
        cmd = _server_cmd(kind, 0, params["workers"][0])[1:]
        info = " ".join(cmd).replace(HERE, "benchmarks").replace("--port 0", "--port PORT")
        info = info.replace("127.0.0.1:0", "127.0.0.1:PORT")
        return {"by_workers": by_workers, "info": info.replace(sys.executable, "python")}

    return run


def _stack_missing() -> str | None:
    missing = [m for m in ("httptools", "uvloop") if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def _missing(*modules: str) -> str | None:
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(gone)} not installed (the `bench` extra)" if gone else None


def _gunicorn_missing() -> str | None:
    worker = (
        None
        if importlib.util.find_spec("uvicorn_worker") or importlib.util.find_spec("uvicorn")
        else "uvicorn-worker not installed (the `bench` extra)"
    )
    return _missing("gunicorn") or worker


CONTENDERS = {
    name: contender(name)
    for name in (OURS, "uvicorn h11 asyncio", "gunicorn uvicorn h11", "uvicorn httptools uvloop")
}
_AVAILABILITY = _contenders.AVAILABILITY
_AVAILABILITY["uvicorn h11 asyncio"] = lambda: _missing("uvicorn")
_AVAILABILITY["gunicorn uvicorn h11"] = _gunicorn_missing
_AVAILABILITY["uvicorn httptools uvloop"] = lambda: _missing("uvicorn") or _stack_missing()
_AVAILABILITY[OURS] = lambda: (
    "needs CPython 3.13+" if sys.version_info < (3, 13) else _missing("h11")
)


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    tables = []
    counts = [str(n) for n in params["workers"]]
    # medians[name][workers][route] requests/s, [route + "_p99_ms"], ["pss"], ["uss"]
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for route in ROUTES:
        table = _report.Table(
            ["contender", "workers", "requests/s", "min", "max", "p50 ms", "p99 ms", "errors"],
            heading=f"/{route}",
            error_col=2,
        )
        for name, good in table.each(results):
            for n in counts:
                runs = [r["by_workers"][n]["routes"][route] for r in good]
                rps = [r["requests_per_s"] for r in runs]
                p50 = _stats.median([r["p50_ms"] for r in runs])
                p99 = _stats.median([r["p99_ms"] for r in runs])
                at = medians.setdefault(name, {}).setdefault(n, {})
                at[route] = _stats.median(rps)
                at[f"{route}_p99_ms"] = p99
                table.add(
                    name,
                    n,
                    *_report.rate_cells(rps),
                    _report.fmt(p50, 2),
                    _report.fmt(p99, 2),
                    str(sum(r["errors"] for r in runs)),
                    key=f"{name} {n}",
                )
        tables.append(table.section())
    memory = _report.Table(
        ["contender", "workers", "PSS MiB", "USS MiB", "processes"],
        heading="memory after the load (all processes of the server)",
        error_col=2,
    )
    for name, good in memory.each(results):
        for n in counts:
            runs = [r["by_workers"][n] for r in good]
            at = medians.setdefault(name, {}).setdefault(n, {})
            at["pss_mib"] = _stats.median([r["pss_mib"] for r in runs])
            at["uss_mib"] = _stats.median([r["uss_mib"] for r in runs])
            memory.add(
                name,
                n,
                _report.fmt(at["pss_mib"], 1),
                _report.fmt(at["uss_mib"], 1),
                str(runs[0]["processes"]),
                key=f"{name} {n}",
            )
    tables.append(memory.section())
    targets = []
    ours = medians.get(OURS, {})
    for n in counts:
        for anchor in ANCHORS:
            theirs = medians.get(anchor, {}).get(n, {})
            mine = ours.get(n, {})
            ratios = [_stats.ratio(mine.get(route), theirs.get(route)) for route in ROUTES]
            worst = min((r for r in ratios if not math.isnan(r)), default=math.nan)
            targets.append(
                _report.Target(
                    f"requests/s, worst route / {anchor}'s, {n} workers",
                    worst,
                    ">=",
                    0.9,
                    note=f"{anchor}, --workers {n}",
                )
            )
            targets.append(
                _report.Target(
                    f"PSS / {anchor}'s, {n} workers",
                    _stats.ratio(mine.get("pss_mib"), theirs.get("pss_mib")),
                    "<=",
                    0.5,
                    note=f"{anchor}, --workers {n}",
                )
            )
    notes = [
        f"--workers {', '.join(counts)}; wrk -t2 -c{params['connections']}, "
        f"{params['seconds']} s per route after a 1 s warm-up, on the same machine; "
        "requests/s worst route: the lowest of the three routes' ratios; "
        "aiosubinterp's and the app's .pyc compiled first",
        *memory.infos,
    ]
    summary = {
        # the chart's panel: /plaintext requests/s per contender and worker count
        "requests_per_s": {
            f"{name}, {n} workers": m.get("plaintext", float("nan"))
            for name, per in medians.items()
            for n, m in per.items()
        },
        "by_workers": medians,
    }
    _REPORTED.update(summary=summary, targets=[t.as_dict() for t in targets], params=params)
    return _report.Report(tables, targets, notes, summary)


def _options() -> tuple[list[int], str | None]:
    """--workers and --chart, removed from sys.argv before _harness parses it."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--chart", default=None)
    known, rest = parser.parse_known_args()
    try:
        workers = [int(n) for n in known.workers.split(",") if n.strip()]
    except ValueError:
        workers = []
    if not workers or min(workers) < 1:
        raise SystemExit(
            f"bench_serve: --workers {known.workers!r}: expected worker counts >= 1, e.g. 2,4"
        )
    sys.argv[1:] = rest
    return workers, known.chart


def _chart(path: str, load: str) -> None:
    """The PNG `python -m aiosubinterp bench` would draw of this run; `load`: the load averages."""
    import datetime
    import platform

    from aiosubinterp.demo import bench

    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    doc = {
        "benchmark": "bench_serve.py",
        "title": TITLE,
        # the subtitle says "Python {python}, {date}": the load goes with the date
        "meta": {"python": platform.python_version(), "date": f"{date}, load average {load}"},
        **_REPORTED,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    bench.chart(path, doc)
    print(f"bench_serve: chart written to {path}", file=sys.stderr)


def prepare(params: dict[str, Any]) -> dict[str, Any]:
    """Compile aiosubinterp's and the app's .pyc files, as installing a wheel does.

    An editable install on a machine with PYTHONDONTWRITEBYTECODE set would
    compile them from source in every interpreter: ~1 MiB more each, which
    uvicorn and gunicorn (their .pyc written by pip) do not pay.
    """
    import compileall

    spec = importlib.util.find_spec("aiosubinterp")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in [*folders, HERE]:
        compileall.compile_dir(folder, quiet=2)
    return params


def main() -> int:
    workers, chart = _options()
    load = _machine.loadavg().split()[0]
    code = _harness.main(
        doc=__doc__ or "",
        title=TITLE,
        contenders=CONTENDERS,
        full={"seconds": 5, "connections": 64, "rounds": 3, "workers": workers},
        quick={"seconds": 1, "connections": 32, "rounds": 1, "workers": workers},
        report=report,
        prepare=prepare,
        child_timeout=(120.0 * len(workers), 60.0 * len(workers)),
    )
    if chart and _REPORTED:
        try:
            _chart(chart, f"{load} to {_machine.loadavg().split()[0]}")
        except ImportError as exc:
            print(f"bench_serve: no chart ({exc}; the `bench` extra)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
