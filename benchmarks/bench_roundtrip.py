"""Await round trip of a trivial task: how long one `await` of a worker call takes.

Each contender gets 2 workers, does 200 warm-up calls, then 2000 sequential
``await``s of ``_work.noop(i)`` (returns its argument), each timed on its
own; we report the median (p50) and p99 of those round trips.

Contenders, each in its own process:
  aiosubinterp          ``await pool.run(noop, i)`` on InterpreterPool(size=2)
  to_thread             ``await asyncio.to_thread(noop, i)``, default executor of 2 threads
  threadpool            ``await loop.run_in_executor(ThreadPoolExecutor(2), noop, i)``
                        (run by default on free-threaded builds only)
  procpool-fork         ``await loop.run_in_executor(ProcessPoolExecutor(2, fork), noop, i)``
  procpool-forkserver   the same with the forkserver start method
  anyio.to_interpreter  ``await anyio.to_interpreter.run_sync(noop, i)`` (limiter of 2),
                        inside ``anyio.run(backend="asyncio")``
  aiomultiprocess       ``await aiomultiprocess.Pool(2).apply(anoop, (i,))``
  stdlib-executor       ``await loop.run_in_executor(concurrent.futures.InterpreterPoolExecutor(2),
                        noop, i)`` (3.14+)
  stdlib-interpreters   ``await loop.run_in_executor(ThreadPoolExecutor(2), ...)`` where each
                        thread owns one ``concurrent.interpreters.create()`` and runs
                        ``interp.call(noop, i)`` (3.14+)
  aiointerpreters       ``await runner.run(noop, i)``, ``aiointerpreters.Runner(workers=2)``
                        (PyPI, 3.14+)

Contenders this Python does not have are skipped, with the reason printed.

On a free-threaded build (3.13t) the target against to_thread is 0.3x.

Target: p50 round trip <= 0.5 x asyncio.to_thread's and <= 0.1 x the
process pool's (the faster of fork and forkserver is the anchor); on 3.14+,
<= 0.2 x the standard library's InterpreterPoolExecutor's.

Run: ``python benchmarks/bench_roundtrip.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import sys
from typing import Any

import _contenders
import _harness
import _report
import _stats
import _timing

NAMES = [
    "aiosubinterp",
    "to_thread",
    "threadpool",
    "procpool-fork",
    "procpool-forkserver",
    "anyio.to_interpreter",
    "aiomultiprocess",
    "stdlib-executor",
    "stdlib-interpreters",
    "aiointerpreters",
]


# aiomultiprocess's round trip is ~10 ms (its queues are polled): fewer calls
# keep the run short; the p50 is as stable with them.
SLOW = ("aiomultiprocess", "aiointerpreters")


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        warmup, n = params["warmup"], params["n"]
        if kind in SLOW:
            warmup, n = params["warmup_slow"], params["n_slow"]

        async def body() -> dict[str, Any]:
            async with _contenders.open_runner(kind, loop) as runner:
                us, meter = await _timing.time_calls(runner.run, n, warmup)
                return {"us": us, "info": runner.info, **meter.result()}

        return _contenders.run_async(body, loop, anyio_runner=_contenders.needs_anyio_runner(kind))

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        ["contender", "p50 µs", "p99 µs", "mean µs", "p50 vs ours", *_report.LOAD_HEADERS]
    )
    stats: dict[str, dict[str, float]] = {}
    for name, good in table.each(results):
        s = stats[name] = _stats.summarize(_stats.collect(good, "us"))
        table.add(
            name, *_report.latency_cells(s), _report.fmt(s["mean"]), "", *_report.load_cells(good)
        )
    ours = stats.get("aiosubinterp", {}).get("p50")
    if ours:
        for name, s in stats.items():
            table.set(name, 4, _report.fmt_ratio(s["p50"] / ours))

    def p50(name: str) -> float | None:
        return stats.get(name, {}).get("p50")

    pools = [n for n in ("procpool-fork", "procpool-forkserver") if p50(n) is not None]
    best_pool = min(pools, key=lambda n: p50(n)) if pools else None  # type: ignore[arg-type,return-value]
    targets = [
        _report.Target(
            "p50 round trip / to_thread's",
            _stats.ratio(ours, p50("to_thread")),
            "<=",
            0.3 if _contenders.FREE_THREADED else 0.5,
            note="asyncio.to_thread, 2 threads"
            + (" (free-threaded build)" if _contenders.FREE_THREADED else ""),
        ),
        _report.Target(
            "(info) p50 / ThreadPoolExecutor's",
            _stats.ratio(ours, p50("threadpool")),
            "<=",
            1.0,
            note="run_in_executor; free-threaded builds",
        ),
        _report.Target(
            "p50 round trip / process pool's",
            _stats.ratio(ours, p50(best_pool) if best_pool else None),
            "<=",
            0.1,
            note=f"{best_pool or 'process pool'} (the faster pool)",
        ),
        _report.Target(
            "p50 round trip / stdlib InterpreterPoolExecutor's",
            _stats.ratio(ours, p50("stdlib-executor")),
            "<=",
            0.2,
            note="3.14+: concurrent.futures, run_in_executor",
        ),
        _report.Target(
            "(info) p50 / stdlib concurrent.interpreters'",
            _stats.ratio(ours, p50("stdlib-interpreters")),
            "<=",
            1.0,
            note="3.14+: interp.call on 2 threads",
        ),
        _report.Target(
            "(info) p50 / anyio.to_interpreter's",
            _stats.ratio(ours, p50("anyio.to_interpreter")),
            "<=",
            1.0,
            note="informational, no target",
        ),
    ]
    n = params["n"]
    notes = [
        f"{n} sequential awaits of noop(i) per round after {params['warmup']} warm-up calls; "
        f"p50/p99/mean over all {params['rounds']} rounds' samples ({params['rounds'] * n} "
        f"per contender); {', '.join(SLOW)}: {params['n_slow']} awaits after "
        f"{params['warmup_slow']} warm-up calls per round (~10 ms each; fewer keep the run short).",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report([table.section()], targets, notes, {"stats": stats})


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_roundtrip: await round trip of a trivial task, 2 workers",
            contenders={name: contender(name) for name in NAMES},
            full={"n": 2000, "warmup": 200, "n_slow": 200, "warmup_slow": 20, "rounds": 5},
            quick={"n": 300, "warmup": 50, "n_slow": 50, "warmup_slow": 10, "rounds": 1},
            report=report,
        )
    )
