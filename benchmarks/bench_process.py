"""The process backend: aiosubinterp.ProcessPool against ProcessPoolExecutor.

Each contender gets 2 worker processes and, after warm-up, measures
  round trip  ``await call(noop, i)`` one after another, each timed (p50, p99);
  throughput  ``asyncio.gather`` of a batch of noop calls, calls per second.

Contenders, each in its own process:
  aiosubinterp-processes  ``await pool.run(noop, i)`` on ProcessPool(size=2) (spawned workers)
  procpool-fork           ``await loop.run_in_executor(ProcessPoolExecutor(2, fork), noop, i)``
  procpool-forkserver     the same with the forkserver start method
  procpool-spawn          the same with the spawn start method
  aiosubinterp            InterpreterPool(size=2), for scale

Target: ProcessPool's p50 round trip within 1.5 x ProcessPoolExecutor's
(the fastest of its start methods is the anchor); it is a fallback, but it
must not be slow.

Run: ``python benchmarks/bench_process.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
import _timing
import _work

NAMES = [
    "aiosubinterp-processes",
    "procpool-fork",
    "procpool-forkserver",
    "procpool-spawn",
    "aiosubinterp",
]
POOLS = ("procpool-fork", "procpool-forkserver", "procpool-spawn")


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        warmup, n, batch = params["warmup"], params["n"], params["batch"]

        async def body() -> dict[str, Any]:
            async with _contenders.open_runner(kind, loop) as runner:
                call = runner.run
                await _timing.time_calls(call, warmup, 0)  # warm-up, dropped
                with _machine.Meter() as meter:  # the round trips and the batch
                    us, _ = await _timing.time_calls(call, n, 0)
                    t0 = time.perf_counter()
                    got = await asyncio.gather(*(call(_work.noop, i) for i in range(batch)))
                    elapsed = time.perf_counter() - t0
                if got != list(range(batch)):
                    raise AssertionError("a batched call returned a wrong result")
                return {"us": us, "per_s": batch / elapsed, "info": runner.info, **meter.result()}

        return _contenders.run_async(body, loop)

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        [
            "contender",
            "p50 µs",
            "p99 µs",
            "p50 vs ours",
            "calls/s (batch)",
            "calls/s vs ours",
            *_report.LOAD_HEADERS,
        ]
    )
    stats: dict[str, dict[str, float]] = {}
    for name, good in table.each(results):
        s = stats[name] = _stats.summarize(_stats.collect(good, "us"))
        s["per_s"] = _stats.median(_stats.collect(good, "per_s"))
        table.add(
            name,
            *_report.latency_cells(s),
            "",
            _report.fmt(s["per_s"], 0),
            "",
            *_report.load_cells(good),
        )
    ours = stats.get("aiosubinterp-processes", {})
    if ours:
        for name, s in stats.items():
            table.set(name, 3, _report.fmt_ratio(s["p50"] / ours["p50"]))
            table.set(name, 5, _report.fmt_ratio(s["per_s"] / ours["per_s"]))
    pools = [n for n in POOLS if n in stats]
    best = min(pools, key=lambda n: stats[n]["p50"]) if pools else None
    best_tp = max(pools, key=lambda n: stats[n]["per_s"]) if pools else None
    targets = [
        _report.Target(
            "ProcessPool p50 round trip / ProcessPoolExecutor's",
            _stats.ratio(ours.get("p50"), stats[best]["p50"] if best else None),
            "<=",
            1.5,
            note=f"{best or 'process pool'} (the fastest start method)",
        ),
        _report.Target(
            "(info) ProcessPool throughput / ProcessPoolExecutor's",
            _stats.ratio(ours.get("per_s"), stats[best_tp]["per_s"] if best_tp else None),
            ">=",
            1.0,
            note=f"{best_tp or 'process pool'}; not an issue target",
        ),
    ]
    notes = [
        f"{params['n']} sequential awaits of noop(i) per round after {params['warmup']} warm-up "
        f"calls, then one gather of {params['batch']} calls; p50/p99 over all rounds' samples, "
        "calls/s the median of the rounds.",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report([table.section()], targets, notes, {"stats": stats})


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_process: the process backend vs ProcessPoolExecutor, 2 workers",
            contenders={name: contender(name) for name in NAMES},
            full={"n": 2000, "warmup": 200, "batch": 5000, "rounds": 3},
            quick={"n": 300, "warmup": 50, "batch": 1000, "rounds": 1},
            report=report,
        )
    )
