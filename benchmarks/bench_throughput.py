"""Small-task throughput: trivial tasks per second when many are submitted at once.

Each contender gets 2 workers, runs a warm-up batch, then submits 20,000
``_work.noop(i)`` calls at once and awaits them all with ``asyncio.gather``;
tasks/s = tasks / wall time from the first submit to the last result.
anyio.to_interpreter and aiomultiprocess get 2,000 tasks (they are several
times slower per task; the rate is what is compared, so this only shortens
the run).

Contenders, each in its own process:
  aiosubinterp          ``pool.submit(noop, i)`` (an asyncio.Future) on InterpreterPool(size=2)
  aiosubinterp-executor ``loop.run_in_executor(InterpreterPoolExecutor(2), noop, i)``
  to_thread             ``asyncio.to_thread(noop, i)``, default executor of 2 threads
  threadpool            ``loop.run_in_executor(ThreadPoolExecutor(2), noop, i)``
                        (run by default on free-threaded builds only)
  procpool-fork         ``loop.run_in_executor(ProcessPoolExecutor(2, fork), noop, i)``
  procpool-forkserver   the same with the forkserver start method
  anyio.to_interpreter  ``anyio.to_interpreter.run_sync(noop, i)`` (limiter of 2) inside
                        ``anyio.run(backend="asyncio")``, at most 2 calls in flight
                        (asyncio.Semaphore), else anyio makes an interpreter per call
  anyio.to_interpreter-ungated  the same, all calls at once (100 tasks, one batch)
  aiomultiprocess       ``aiomultiprocess.Pool(2).apply(anoop, (i,))``
  pep734-executor       ``loop.run_in_executor(InterpreterPoolExecutor(2), noop, i)`` with the
                        executor of interpreters-pep-734 (CPython 3.14's, backported; 3.13
                        only), where that package is installed (else its row shows the error)
  stdlib-executor       ``loop.run_in_executor(concurrent.futures.InterpreterPoolExecutor(2),
                        noop, i)`` (3.14+)
  stdlib-interpreters   ``loop.run_in_executor(ThreadPoolExecutor(2), ...)``, each thread owning
                        one ``concurrent.interpreters.create()``, ``interp.call(noop, i)`` (3.14+)
  aiointerpreters       ``runner.run(noop, i)``, ``aiointerpreters.Runner(workers=2)`` (PyPI,
                        3.14+; 2,000 tasks)

Contenders this Python does not have are skipped, with the reason printed.

On a free-threaded build (3.13t) the target against to_thread is 2x.

Target: >= 3 x asyncio.to_thread's tasks/s and >= 10 x the process
pool's (the faster of fork and forkserver is the anchor). The target
for the executor, through run_in_executor: >= 5 x the process pool's and
>= 5 x interpreters-pep-734's executor. On 3.14+: >= 10 x the standard
library's InterpreterPoolExecutor's (through run_in_executor).

Run: ``python benchmarks/bench_throughput.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import _contenders
import _harness
import _report
import _stats
import _timing
import _work

NAMES = list(_contenders.POOL_KINDS)  # every pool kind _contenders makes
# Per-task cost 10-1000x ours: run fewer tasks (the rate is compared).
SLOW = ("anyio.to_interpreter", "aiomultiprocess", "aiointerpreters")
EXECUTOR = "aiosubinterp-executor"
# anyio without a gate creates one interpreter per call in flight (~20 ms each,
# on the loop thread): a short single batch shows it.
UNGATED = "anyio.to_interpreter-ungated"


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        n = params["n_slow"] if kind in SLOW else params["n"]
        batches = params["batches"]
        warmup = params["warmup"]
        if kind == UNGATED:
            n, batches, warmup = params["n_ungated"], 1, 0

        def check(results: list[Any]) -> None:
            if results != list(range(n)):
                raise AssertionError(f"gather of {n} noop(i) returned wrong results")

        async def body() -> dict[str, Any]:
            async with _contenders.open_runner(kind, loop) as runner:
                submit = runner.submit
                await asyncio.gather(*(submit(_work.noop, i) for i in range(warmup)))
                meters = await _timing.time_batches_async(
                    batches,
                    lambda: asyncio.gather(*(submit(_work.noop, i) for i in range(n))),
                    check,
                )
                info = runner.info
                if kind == UNGATED:
                    import _interpreters  # 3.13's private module, as anyio uses it

                    alive = len(_interpreters.list_all()) - 1
                    info += f"; interpreters alive after the batch: {alive}"
                return _timing.batch_result(meters, n, info)

        return _contenders.run_async(body, loop, anyio_runner=_contenders.needs_anyio_runner(kind))

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        [
            "contender",
            "tasks/batch",
            "median tasks/s",
            "min",
            "max",
            "ours vs it",
            "executor vs it",
            *_report.LOAD_HEADERS,
        ],
        error_col=2,
    )
    med: dict[str, float] = {}
    for name, good in table.each(results):
        rates = _stats.collect(good, "rate")
        med[name] = _stats.median(rates)
        table.add(
            name,
            f"{good[0]['tasks']:,}",
            *_report.rate_cells(rates),
            "",
            "",
            *_report.load_cells(good),
        )
    ours = med.get("aiosubinterp")
    executor = med.get(EXECUTOR)
    for name, rate in med.items():
        if ours:
            table.set(name, 5, _report.fmt_ratio(ours / rate))
        if executor:
            table.set(name, 6, _report.fmt_ratio(executor / rate))
    pools = [n for n in ("procpool-fork", "procpool-forkserver") if n in med]
    best_pool = max(pools, key=lambda n: med[n]) if pools else None
    targets = [
        _report.Target(
            "tasks/s / to_thread's",
            _stats.ratio(ours, med.get("to_thread")),
            ">=",
            2 if _contenders.FREE_THREADED else 3,
            note="asyncio.to_thread, 2 threads"
            + (" (free-threaded build)" if _contenders.FREE_THREADED else ""),
        ),
        _report.Target(
            "(info) tasks/s / ThreadPoolExecutor's",
            _stats.ratio(ours, med.get("threadpool")),
            ">=",
            1,
            note="run_in_executor; free-threaded builds",
        ),
        _report.Target(
            "tasks/s / process pool's",
            _stats.ratio(ours, med.get(best_pool) if best_pool else None),
            ">=",
            10,
            note=f"{best_pool or 'process pool'} (the faster pool)",
        ),
        _report.Target(
            "tasks/s / stdlib InterpreterPoolExecutor's",
            _stats.ratio(ours, med.get("stdlib-executor")),
            ">=",
            10,
            note="3.14+: concurrent.futures, run_in_executor",
        ),
        _report.Target(
            "(info) tasks/s / stdlib concurrent.interpreters'",
            _stats.ratio(ours, med.get("stdlib-interpreters")),
            ">=",
            1,
            note="3.14+: interp.call on 2 threads",
        ),
        _report.Target(
            "(info) executor tasks/s / stdlib executor's",
            _stats.ratio(executor, med.get("stdlib-executor")),
            ">=",
            1,
            note="3.14+: both via run_in_executor",
        ),
        _report.Target(
            "tasks/s / anyio.to_interpreter's",
            _stats.ratio(ours, med.get("anyio.to_interpreter")),
            ">=",
            1,
            note="an anchor, no figure",
        ),
        _report.Target(
            "executor tasks/s / process pool's",
            _stats.ratio(executor, med.get(best_pool) if best_pool else None),
            ">=",
            5,
            note=f"both via run_in_executor; {best_pool or 'process pool'}",
        ),
        _report.Target(
            "executor tasks/s / pep734 executor's",
            _stats.ratio(executor, med.get("pep734-executor")),
            ">=",
            5,
            note="both via run_in_executor; interpreters-pep-734",
        ),
    ]
    notes = [
        f"Per round: {params['warmup']} warm-up tasks, then {params['batches']} batch(es) of "
        f"{params['n']:,} tasks submitted at once and gathered ({', '.join(SLOW)}: "
        f"{params['n_slow']:,} tasks per batch; {UNGATED}: one batch of {params['n_ungated']} "
        "without warm-up). Rates: median/min/max over rounds x batches.",
        "anyio.to_interpreter.run_sync() makes a new interpreter, on the event-loop thread, "
        "for every call that finds no idle one (its CapacityLimiter bounds only the threads), "
        "so a gather of N calls creates N interpreters: the -ungated row. The anyio.to_interpreter "
        "row gates calls with an asyncio.Semaphore(2), as a user would, and keeps 2 interpreters.",
        "executor vs it: aiosubinterp's InterpreterPoolExecutor through loop.run_in_executor. "
        "run_in_executor adds asyncio's own cost to every call of every executor (wrap_future, a "
        "call_soon_threadsafe from the thread that completes the future, the copy of its state "
        "on the loop), which is why the executor row is below the pool's.",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report([table.section()], targets, notes, {"median_tasks_per_s": med})


if __name__ == "__main__":
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_throughput: trivial tasks per second, all submitted at once, 2 workers",
            contenders={name: contender(name) for name in NAMES},
            full={
                "n": 20_000,
                "n_slow": 2_000,
                "n_ungated": 100,
                "warmup": 200,
                "batches": 2,
                "rounds": 3,
            },
            quick={
                "n": 2_000,
                "n_slow": 300,
                "n_ungated": 30,
                "warmup": 50,
                "batches": 1,
                "rounds": 1,
            },
            report=report,
        )
    )
