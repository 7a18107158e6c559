"""numpy inside interpreters (``fallback="copy"``) against numpy on processes and threads.

The same numpy code on every contender, N workers (``--workers``, default 2),
each contender in a fresh process of its own whose main interpreter imported
numpy before anything is measured (as an app that uses numpy has; the
fork-based pool then inherits it):

  cold start   pool creation to the first result of a small numpy call
               (``_numpywork.first_result``), the first thing the fresh process does;
  memory       PSS (``/proc/PID/smaps_rollup``) summed over the contender's process and
               every descendant (worker processes, forkserver, resource tracker) once
               every worker imported numpy and ran the task, minus the same sum before
               the pool was made; again after the throughput batches (info);
  throughput   tasks/s of batches of ``_numpywork.window_features(seed)`` (~6 ms of CPU: a
               Python loop of small-array numpy calls between vectorised parts; its
               docstring says why) submitted at once and gathered; results checked;
  16 MiB       p50/p99 of one ``await`` of ``double(a)`` with a 16 MiB float64 array
               ``a``: the task returns ``a * 2``, a new array of the same size (the
               target's figure); ``echo(a)`` returns ``a`` itself (the transport alone).

Contenders, each in its own process:
  aiosubinterp-copy       InterpreterPool(N, fallback="copy"): numpy runs in the interpreters,
                          each from a private copy of its extension modules; arrays cross
                          zero-copy (pickle-5 out-of-band buffers; results arrive read-only)
  aiosubinterp-processes  aiosubinterp.ProcessPool(N) (spawned workers import numpy)
  procpool-fork           concurrent.futures.ProcessPoolExecutor(N, fork) via run_in_executor
  procpool-forkserver     the same with forkserver (3.14's default start method)
  to_thread               asyncio.to_thread, default executor ThreadPoolExecutor(N)

Native thread pools: ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` and the like are set to 1
(unless set already) before numpy loads, in every contender alike: N workers each running
a BLAS pool sized for every core oversubscribe the machine, and with ``fallback="copy"``
the one OpenBLAS of the process is shared by all the copies anyway.

Targets (against ProcessPool, ours, the user's other choice for numpy):
throughput >= 0.9x; memory added <= 0.6x; 16 MiB ``a * 2`` round trip >= 10x faster.

Run: ``python benchmarks/bench_numpy.py [--quick] [--json] [--workers N] [--loop uvloop]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
import _timing

# Before numpy loads anywhere (this process, the children, their workers).
NATIVE_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
for _name in NATIVE_THREAD_VARIABLES:
    os.environ.setdefault(_name, "1")

import _numpywork  # noqa: E402 - numpy loads here, after the variables above
import numpy as np  # noqa: E402

NAMES = [
    "aiosubinterp-copy",
    "aiosubinterp-processes",
    "procpool-fork",
    "procpool-forkserver",
    "to_thread",
]
ANCHOR = "aiosubinterp-processes"
PROCESS_POOLS = ("procpool-fork", "procpool-forkserver")
SEEDS = 8  # task i computes window_features(i % SEEDS)
MIB = 1024 * 1024
ARRAY_ITEMS = 16 * MIB // 8  # float64


@contextlib.asynccontextmanager
async def _start(kind: str, loop: str, workers: int) -> AsyncIterator[_contenders.Runner]:
    """A contender's pool, not warmed (the cold start is measured on it)."""
    if kind == "aiosubinterp-copy":
        import aiosubinterp

        async with aiosubinterp.InterpreterPool(workers, fallback="copy") as pool:
            yield _contenders.Runner(
                kind, pool.run, pool.submit, f'InterpreterPool({workers}, fallback="copy")'
            )
    else:
        async with _contenders.open_runner(kind, loop, workers=workers, warm=False) as runner:
            yield runner


async def _warm_every_worker(runner: _contenders.Runner, workers: int) -> int:
    """Submit `workers` tasks at once until each worker ran one (numpy imported, task run)."""
    seen: set[str] = set()
    for attempt in range(20):
        got = await asyncio.gather(
            *(runner.submit(_numpywork.warm, i, 0.05 * (attempt + 1)) for i in range(workers))
        )
        seen.update(got)
        if len(seen) >= workers:
            return len(seen)
    raise AssertionError(f"only {len(seen)} of {workers} workers ran a warm-up task")


def _tree_memory_kib() -> tuple[int, int]:
    """(PSS, RSS) in KiB summed over this process and all its descendants."""
    gc.collect()
    mem = _machine.tree_memory()
    return mem["pss_self"] + mem["pss_children"], mem["rss_self"] + mem["rss_children"]


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        workers, tasks = params["workers"], params["tasks"]
        batches: list[list[Any]] = []  # checked once the pool is gone (main computes the answers)

        async def body() -> dict[str, Any]:
            before_pss, before_rss = _tree_memory_kib()
            t0 = time.perf_counter()
            async with _start(kind, loop, workers) as runner:
                first = await runner.run(_numpywork.first_result, 1000)
                cold_ms = (time.perf_counter() - t0) * 1000
                if first != 499500:
                    raise AssertionError(f"first_result(1000) returned {first!r}")
                distinct = await _warm_every_worker(runner, workers)
                warm_pss, warm_rss = _tree_memory_kib()
                children = len(_machine.descendants())

                async def batch() -> list[Any]:
                    return await asyncio.gather(
                        *(
                            runner.submit(_numpywork.window_features, i % SEEDS)
                            for i in range(tasks)
                        )
                    )

                meters = await _timing.time_batches_async(params["batches"], batch, batches.append)
                after_pss, _ = _tree_memory_kib()

                a = np.random.default_rng(0).random(ARRAY_ITEMS)
                arrays: dict[str, list[float]] = {}
                array_errors: dict[str, str] = {}
                for op, fn, factor in (
                    ("double", _numpywork.double, 2.0),
                    ("echo", _numpywork.echo, 1.0),
                ):
                    samples = []
                    try:
                        for i in range(params["array_warmup"] + params["array_calls"]):
                            c0 = time.perf_counter_ns()
                            r = await runner.run(fn, a)
                            ns = time.perf_counter_ns() - c0
                            if (
                                r.shape != a.shape
                                or r.dtype != a.dtype
                                or r[0] != a[0] * factor
                                or r[-1] != a[-1] * factor
                            ):
                                raise AssertionError(f"{op}: a wrong array came back")
                            del r
                            if i >= params["array_warmup"]:
                                samples.append(ns / 1e6)
                    except Exception as exc:  # noqa: BLE001 - shown in the table; the rest stands
                        array_errors[op] = f"{type(exc).__name__}: {exc}"
                    arrays[op] = samples
                info = runner.info
            expected = [_numpywork.window_features(s) for s in range(SEEDS)]
            for results in batches:
                bad = sum(1 for i, r in enumerate(results) if r != expected[i % SEEDS])
                if bad:
                    raise AssertionError(
                        f"{bad} of {len(results)} window_features results "
                        "differ from the main interpreter's"
                    )
            return _timing.batch_result(
                meters,
                tasks,
                info,
                cpu_ms_per_task=[m.cpu / tasks * 1000 for m in meters],
                cold_ms=cold_ms,
                workers_seen=distinct,
                children=children,
                warm_added_kib=warm_pss - before_pss,
                warm_rss_added_kib=warm_rss - before_rss,
                after_added_kib=after_pss - before_pss,
                double_ms=arrays["double"],
                echo_ms=arrays["echo"],
                array_errors=array_errors,
            )

        return _contenders.run_async(body, loop)

    return run


def prepare(params: dict[str, Any]) -> dict[str, Any]:
    """The task's time in this process (one core), for the table's heading."""
    walls, cpus = [], []
    for i in range(5 if params["quick"] else 20):
        t0, c0 = time.perf_counter(), time.thread_time()
        _numpywork.window_features(i % SEEDS)
        cpus.append((time.thread_time() - c0) * 1000)
        walls.append((time.perf_counter() - t0) * 1000)
    # CPU time says what the task costs; wall time also says how busy the machine was.
    params["task_ms_serial"] = round(_stats.median(cpus), 2)
    params["task_wall_ms_serial"] = round(_stats.median(walls), 2)
    params["native_threads"] = os.environ["OPENBLAS_NUM_THREADS"]
    return params


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        [
            "contender",
            "tasks/s",
            "min",
            "max",
            "vs ProcessPool",
            "CPU ms/task",
            "PSS added MiB (warm)",
            "vs ProcessPool",
            "PSS after run",
            "RSS added MiB (warm)",
            "processes",
            *_report.LOAD_HEADERS,
        ],
        heading=f"Throughput of window_features (~{params['task_ms_serial']} ms of CPU each) "
        "and memory added",
    )
    table2 = _report.Table(
        [
            "contender",
            "16 MiB a*2 p50 ms",
            "p99 ms",
            "ProcessPool / this",
            "16 MiB echo p50 ms",
            "p99 ms",
            "cold start p50 ms",
            "p25",
            "p75",
        ],
        heading="A 16 MiB float64 array in and out; pool creation to the first numpy result",
    )
    stats: dict[str, dict[str, float]] = {}
    array_notes: list[str] = []
    for name, good in table.each(results, also=(table2,)):
        rates = _stats.collect(good, "rate")
        warm = [k / 1024 for k in _stats.collect(good, "warm_added_kib")]
        after = [k / 1024 for k in _stats.collect(good, "after_added_kib")]
        rss = [k / 1024 for k in _stats.collect(good, "warm_rss_added_kib")]
        double = _stats.summarize(_stats.collect(good, "double_ms"))
        echo = _stats.summarize(_stats.collect(good, "echo_ms"))
        cold = _stats.collect(good, "cold_ms")
        stats[name] = {
            "tasks_per_s": _stats.median(rates),
            "warm_mib": _stats.median(warm),
            "after_mib": _stats.median(after),
            "rss_mib": _stats.median(rss),
            "double_p50_ms": double["p50"],
            "double_p99_ms": double["p99"],
            "echo_p50_ms": echo["p50"],
            "echo_p99_ms": echo["p99"],
            "cold_ms": _stats.median(cold),
        }
        stats[name]["cpu_ms_per_task"] = _stats.median(_stats.collect(good, "cpu_ms_per_task"))
        table.add(
            name,
            *_report.rate_cells(rates, 1),
            "",
            _report.fmt(stats[name]["cpu_ms_per_task"], 2),
            _report.fmt(stats[name]["warm_mib"]),
            "",
            _report.fmt(stats[name]["after_mib"]),
            _report.fmt(stats[name]["rss_mib"]),
            str(1 + int(_stats.median(_stats.collect(good, "children")))),
            *_report.load_cells(good),
        )
        table2.add(
            name,
            *_report.latency_cells(double, 2),
            "",
            *_report.latency_cells(echo, 2),
            *_report.quartile_cells(cold, 1),
        )
        for op, column in (("double", 1), ("echo", 4)):
            failed = [r["array_errors"][op] for r in good if op in r.get("array_errors", {})]
            if failed:
                table2.set(name, column, "error (see notes)")
                array_notes.append(
                    f"{name}: 16 MiB {op} failed in {len(failed)} round(s): "
                    f"{_report.error_cell(failed[0], 300)[7:]}"
                )
    anchor = stats.get(ANCHOR, {})
    for name, s in stats.items():
        table.set(
            name, 4, _report.fmt_ratio(_stats.ratio(s["tasks_per_s"], anchor.get("tasks_per_s")))
        )
        table.set(name, 7, _report.fmt_ratio(_stats.ratio(s["warm_mib"], anchor.get("warm_mib"))))
        table2.set(
            name,
            3,
            _report.fmt_ratio(_stats.ratio(anchor.get("double_p50_ms"), s["double_p50_ms"])),
        )
    ours = stats.get("aiosubinterp-copy", {})
    pools = [n for n in PROCESS_POOLS if n in stats]
    best_tp = max(pools, key=lambda n: stats[n]["tasks_per_s"]) if pools else None
    least_mem = min(pools, key=lambda n: stats[n]["warm_mib"]) if pools else None

    def of(name: str | None, key: str) -> float | None:
        return stats[name][key] if name in stats else None

    targets = [
        _report.Target(
            "copy: tasks/s / ProcessPool's",
            _stats.ratio(ours.get("tasks_per_s"), anchor.get("tasks_per_s")),
            ">=",
            0.9,
            note="aiosubinterp.ProcessPool",
        ),
        _report.Target(
            "copy: PSS added (warm) / ProcessPool's",
            _stats.ratio(ours.get("warm_mib"), anchor.get("warm_mib")),
            "<=",
            0.6,
            note="aiosubinterp.ProcessPool",
        ),
        _report.Target(
            "16 MiB a*2: ProcessPool's p50 / copy's",
            _stats.ratio(anchor.get("double_p50_ms"), ours.get("double_p50_ms")),
            ">=",
            10,
            note="aiosubinterp.ProcessPool",
        ),
        _report.Target(
            "(info) copy: tasks/s / ProcessPoolExecutor's",
            _stats.ratio(ours.get("tasks_per_s"), of(best_tp, "tasks_per_s")),
            ">=",
            0.9,
            note=f"{best_tp or 'process pool'} (the faster start method)",
        ),
        _report.Target(
            "(info) copy: PSS added / ProcessPoolExecutor's",
            _stats.ratio(ours.get("warm_mib"), of(least_mem, "warm_mib")),
            "<=",
            0.6,
            note=f"{least_mem or 'process pool'} (the smaller)",
        ),
        _report.Target(
            "(info) 16 MiB echo: ProcessPool's p50 / copy's",
            _stats.ratio(anchor.get("echo_p50_ms"), ours.get("echo_p50_ms")),
            ">=",
            10,
            note="transport alone",
        ),
        _report.Target(
            "(info) cold start: copy / ProcessPool",
            _stats.ratio(ours.get("cold_ms"), anchor.get("cold_ms")),
            "<=",
            1,
            note="informational, no target",
        ),
        _report.Target(
            "(info) copy: tasks/s / to_thread's",
            _stats.ratio(ours.get("tasks_per_s"), of("to_thread", "tasks_per_s")),
            ">=",
            1,
            note="asyncio.to_thread",
        ),
    ]
    notes = [
        f"N = {params['workers']} workers; window_features took {params['task_ms_serial']} ms "
        f"of CPU ({params['task_wall_ms_serial']} ms wall; medians) in the parent process, "
        "one thread, before the contenders ran.",
        f"throughput: {params['batches']} batch(es) of {params['tasks']} tasks per round, "
        f"{params['rounds']} round(s); tasks/s is the median over batches (min/max beside it); "
        "every result is checked against the main interpreter's. CPU ms/task: CPU time of the "
        "contender's process tree during a batch per task (median over batches): how much "
        "work a task costs there whatever share of the machine the contender got.",
        "memory: PSS summed over the contender's process and all its descendants; 'warm' = "
        "after every worker imported numpy and ran the task, minus the sum before the pool "
        "was made (the process had imported numpy already, in every contender); 'after run' = "
        "the same after the throughput batches; RSS added (info): the same with RSS, which "
        "counts a page shared by several processes in each of them (the figure earlier "
        "experiments reported). processes = the contender's process plus "
        "its descendants when warm. Medians over rounds.",
        f"16 MiB: {params['array_calls']} timed awaits per op and round after "
        f"{params['array_warmup']} warm-up; a*2 returns a new array (what the target uses), "
        "echo returns the argument. With aiosubinterp-copy both directions are zero-copy and "
        "the result is a read-only view of the worker's array.",
        "cold start: one sample per round (each a fresh process): pool creation to the first "
        "result of first_result(1000), whose worker imports numpy (a private copy for "
        "aiosubinterp-copy: its files are copied then). p25/p75 over rounds.",
        f"native thread pools: OPENBLAS_NUM_THREADS (and OMP, MKL, ...) = "
        f"{params['native_threads']} in every contender, set before numpy loads.",
        *array_notes,
        _report.LOAD_NOTE,
        *table.infos,
    ]
    summary = {
        "median_tasks_per_s": {n: s["tasks_per_s"] for n, s in stats.items()},
        "numpy": stats,
        "task_ms_serial": params["task_ms_serial"],
    }
    return _report.Report([table.section(), table2.section()], targets, notes, summary)


def _workers_option() -> int:
    """--workers N, removed from sys.argv before _harness parses it (children get it in params)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--workers", type=int, default=_contenders.WORKERS)
    known, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    if known.workers < 1:
        sys.exit("bench_numpy.py: --workers must be >= 1")
    return int(known.workers)


if __name__ == "__main__":
    workers = _workers_option()
    sys.exit(
        _harness.main(
            doc=__doc__,
            title=f'bench_numpy: numpy in interpreters (fallback="copy") vs processes and threads, '
            f"{workers} workers",
            contenders={name: contender(name) for name in NAMES},
            full={
                "workers": workers,
                "tasks": 60,
                "batches": 3,
                "array_calls": 10,
                "array_warmup": 2,
                "rounds": 3,
            },
            quick={
                "workers": workers,
                "tasks": 12,
                "batches": 1,
                "array_calls": 5,
                "array_warmup": 3,
                "rounds": 1,
            },
            prepare=prepare,
            report=report,
            child_timeout=(300.0, 120.0),
        )
    )
