"""``python -m aiosubinterp serve`` against ``uvicorn --workers``: requests/s, p99 and memory (wrk).

The same plain ASGI application (``benchmarks/_serveapp.py``: ``/plaintext``,
``/json``, and ``/cpu``, ~1 ms of pure-Python CPU per request) is served by
each contender with 2 workers (``--workers``), access log off, on a
loopback port, in a process of its own started for the round:

  aiosubinterp serve        ``python -m aiosubinterp serve``: 2 interpreters
                            of one process (h11 on asyncio in each)
  uvicorn h11 asyncio       ``uvicorn --workers 2 --http h11 --loop asyncio``:
                            2 worker processes, the same HTTP parser and loop
                            as ours (the like-for-like anchor)
  uvicorn httptools uvloop  ``uvicorn --workers 2`` with its fastest stack
                            (httptools and uvloop; skipped if not installed)

gunicorn is not a contender (not installed by the project's extras).

Per contender and route, after a 1 s warm-up: one ``wrk`` (2 threads,
``connections`` keep-alive connections) for ``seconds`` s. Reported:
requests/s, p50 and p99 latency (exact, from wrk's histogram through
``_wrk_report.lua``), socket errors and non-2xx answers. Memory: the PSS
(proportional set size: shared pages divided among the processes that share
them) summed over the server's process and all its descendants, read after
the load (warm servers); uvicorn's supervisor process counts.

Targets (one run, same machine; against the like-for-like uvicorn):
  /plaintext requests/s >= 0.9 x uvicorn's (h11, asyncio);
  PSS <= 0.5 x uvicorn's (h11, asyncio).

wrk runs on the same cores as the server: on 2 cores the load generator takes
a share of the CPU from every contender alike. ``wrk`` must be on PATH (see
bench_http.py, which this script borrows its wrk helpers from).

Run: ``python benchmarks/bench_serve.py [--quick] [--json] [--only NAME,...]``.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

import _common
from bench_http import LUA, find_wrk, run_wrks

HERE = os.path.dirname(os.path.abspath(__file__))
ROUTES = ("plaintext", "json", "cpu")
WORKERS = 2


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_cmd(kind: str, port: int) -> list[str]:
    if kind == "aiosubinterp serve":
        return [
            sys.executable,
            "-m",
            "aiosubinterp",
            "serve",
            "_serveapp:app",
            "--app-dir",
            HERE,
            "--workers",
            str(WORKERS),
            "--port",
            str(port),
            "--no-access-log",
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
        str(WORKERS),
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


def _server_pss_kib(pid: int) -> int:
    return sum(_common.pss_kib(p) for p in [pid, *_common.descendants(pid)])


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        wrk = find_wrk(install=False)
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            _server_cmd(kind, port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([_common.REPO, HERE])},
        )
        try:
            _wait_ready(f"{base}/plaintext", proc)
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
            pss = _server_pss_kib(proc.pid)
            processes = 1 + len(_common.descendants(proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
        if proc.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"the server exited with {proc.returncode}: {err[-400:]}")
        return {
            "routes": routes,
            "pss_mib": pss / 1024,
            "processes": processes,
            "info": " ".join(_server_cmd(kind, port)[1:]).replace(HERE, "benchmarks"),
        }

    return run


def _stack_missing() -> str | None:
    missing = [m for m in ("httptools", "uvloop") if importlib.util.find_spec(m) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def _uvicorn_missing() -> str | None:
    return None if importlib.util.find_spec("uvicorn") else "uvicorn not installed"


CONTENDERS = {
    name: contender(name)
    for name in ("aiosubinterp serve", "uvicorn h11 asyncio", "uvicorn httptools uvloop")
}
_common.AVAILABILITY["uvicorn h11 asyncio"] = _uvicorn_missing
_common.AVAILABILITY["uvicorn httptools uvloop"] = lambda: _uvicorn_missing() or _stack_missing()
_common.AVAILABILITY["aiosubinterp serve"] = lambda: (
    "needs CPython 3.13+"
    if sys.version_info < (3, 13)
    else None
    if importlib.util.find_spec("h11")
    else "h11 not installed"
)


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _common.Report:
    tables = []
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for route in ROUTES:
        table = _common.Table(
            ["contender", "requests/s", "min", "max", "p50 ms", "p99 ms", "errors"],
            heading=f"/{route}",
        )
        for name, good in table.each(results):
            rps = [r["routes"][route]["requests_per_s"] for r in good]
            p50 = _common.median([r["routes"][route]["p50_ms"] for r in good])
            p99 = _common.median([r["routes"][route]["p99_ms"] for r in good])
            errors = sum(r["routes"][route]["errors"] for r in good)
            medians.setdefault(name, {})[route] = _common.median(rps)
            medians[name][f"{route}_p99_ms"] = p99
            table.add(
                name,
                *_common.rate_cells(rps),
                _common.fmt(p50, 2),
                _common.fmt(p99, 2),
                str(errors),
            )
        tables.append(table.section())
    memory = _common.Table(
        ["contender", "PSS MiB (all processes)", "processes"], heading="memory after the load"
    )
    pss: dict[str, float] = {}
    for name, good in memory.each(results):
        pss[name] = _common.median([r["pss_mib"] for r in good])
        memory.add(name, _common.fmt(pss[name], 1), str(good[0]["processes"]))
    tables.append(memory.section())
    ours, anchor = "aiosubinterp serve", "uvicorn h11 asyncio"
    targets = [
        _common.Target(
            "/plaintext requests/s / uvicorn (h11, asyncio)'s",
            _common.ratio(
                medians.get(ours, {}).get("plaintext"), medians.get(anchor, {}).get("plaintext")
            ),
            ">=",
            0.9,
            note="uvicorn --workers 2",
        ),
        _common.Target(
            "PSS / uvicorn (h11, asyncio)'s",
            _common.ratio(pss.get(ours), pss.get(anchor)),
            "<=",
            0.5,
            note="uvicorn --workers 2",
        ),
    ]
    notes = [
        f"{WORKERS} workers each; wrk -t2 -c{params['connections']}, "
        f"{params['seconds']} s per route after a 1 s warm-up, on the same machine"
    ]
    summary = {
        "requests_per_s": {n: m.get("plaintext", float("nan")) for n, m in medians.items()},
        "routes": medians,
        "pss_mib": pss,
    }
    return _common.Report(tables, targets, notes, summary)


def main() -> int:
    return _common.main(
        doc=__doc__ or "",
        title="bench_serve",
        contenders=CONTENDERS,
        full={"seconds": 5, "connections": 64, "rounds": 3},
        quick={"seconds": 1, "connections": 32, "rounds": 1},
        report=report,
        child_timeout=(300.0, 120.0),
    )


if __name__ == "__main__":
    sys.exit(main())
