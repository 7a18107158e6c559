"""Coroutines in workers: I/O-bound tasks with a CPU part, several per worker at once.

Each task is ``_work.io_then_spin(delay, n)``: ``await asyncio.sleep(delay)``
(standing in for a network call), then ``spin(n)`` (pure-Python CPU work).
All tasks are submitted at once and gathered; tasks/s = tasks / wall time.
With one task per worker at a time the waits add up; with several per
worker they overlap, and the CPU parts still use both cores.

Contenders, each in its own process, 2 workers each:
  main loop only          ``asyncio.gather`` of the coroutines on the main loop (waits
                          overlap, CPU parts run one at a time on one core)
  aiosubinterp c=1        InterpreterPool(2), ``pool.submit(io_then_spin, ...)``, one
                          coroutine per interpreter at a time
  aiosubinterp c=N        InterpreterPool(2, concurrency_per_interpreter=N)
  aiomultiprocess c=N     aiomultiprocess.Pool(2, childconcurrency=N) (spawn), ``pool.apply``

aiomultiprocess's childconcurrency is the model for this feature; there is no
figure to reach, the table compares. Coroutines in interpreters need
CPython 3.13 (on 3.12 the aiosubinterp rows show the refusal).

Run: ``python benchmarks/bench_async_io.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
import _work

MAIN = "main loop only"
C1 = "aiosubinterp c=1"
CN = "aiosubinterp c=N"
AMP = "aiomultiprocess c=N"
NAMES = [MAIN, C1, CN, AMP]


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        tasks, delay, n, conc = params["tasks"], params["delay"], params["spin"], params["conc"]
        expected = _work.spin(n)

        async def timed(submit) -> dict[str, Any]:
            await asyncio.gather(*(submit(_work.io_then_spin, 0.0, n) for _ in range(4)))
            with _machine.Meter() as meter:
                results = await asyncio.gather(
                    *(submit(_work.io_then_spin, delay, n) for _ in range(tasks))
                )
            if results != [expected] * tasks:
                raise AssertionError("io_then_spin returned wrong results")
            return {"rate": tasks / meter.wall, **meter.result()}

        async def body() -> dict[str, Any]:
            if kind == MAIN:
                out = await timed(lambda fn, *args: fn(*args))
                out["info"] = "coroutines gathered on the main loop"
                return out
            if kind in (C1, CN):
                import aiosubinterp

                c = 1 if kind == C1 else conc
                async with aiosubinterp.InterpreterPool(
                    _contenders.WORKERS, concurrency_per_interpreter=c
                ) as pool:
                    out = await timed(pool.submit)
                out["info"] = (
                    f"InterpreterPool({_contenders.WORKERS}, concurrency_per_interpreter={c})"
                )
                return out
            import aiomultiprocess

            init = None
            if loop == "uvloop":
                import uvloop

                init = uvloop.new_event_loop
            async with aiomultiprocess.Pool(
                processes=_contenders.WORKERS, childconcurrency=conc, loop_initializer=init
            ) as pool:
                out = await timed(lambda fn, *args: pool.apply(fn, args))
            out["info"] = (
                f"aiomultiprocess.Pool({_contenders.WORKERS}, childconcurrency={conc}) (spawn)"
            )
            return out

        return _contenders.run_async(body, loop)

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        ["contender", "median tasks/s", "min", "max", "c=N vs it", *_report.LOAD_HEADERS]
    )
    med: dict[str, float] = {}
    for name, good in table.each(results):
        rates = _stats.collect(good, "rate")
        med[name] = _stats.median(rates)
        table.add(name, *_report.rate_cells(rates), "", *_report.load_cells(good))
    ours = med.get(CN)
    if ours:
        for name, rate in med.items():
            table.set(name, 4, _report.fmt_ratio(ours / rate))
    targets = [
        _report.Target(
            "(info) c=N tasks/s / aiomultiprocess c=N",
            _stats.ratio(ours, med.get(AMP)),
            ">=",
            1.0,
            note="the same childconcurrency, 2 workers each",
        ),
        _report.Target(
            "(info) c=N tasks/s / c=1",
            _stats.ratio(ours, med.get(C1)),
            ">=",
            1.0,
            note="what concurrency_per_interpreter buys",
        ),
    ]
    notes = [
        f"Per round: {params['tasks']} tasks of io_then_spin({params['delay']}, "
        f"{params['spin']:,}) "
        f"submitted at once, N = {params['conc']}; rates are medians over {params['rounds']} "
        "rounds.",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report([table.section()], targets, notes, {"median_tasks_per_s": med})


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_async_io: I/O-bound coroutines with a CPU part, several per worker",
            contenders={name: contender(name) for name in NAMES},
            full={"tasks": 300, "delay": 0.02, "spin": 100_000, "conc": 16, "rounds": 3},
            quick={"tasks": 100, "delay": 0.02, "spin": 100_000, "conc": 16, "rounds": 1},
            report=report,
        )
    )
