"""Dask worker throughput on pure-Python CPU tasks: thread executor vs aiosubinterp interpreters.

One ``distributed.LocalCluster`` per contender: one worker process
(``n_workers=1, threads_per_worker=2``, real processes, loopback TCP, no
dashboard). The client maps ``_work.spin(n)`` over a batch of tasks
(``pure=False``) and gathers the results; n is calibrated so one task takes
~0.05 s here. Throughput = tasks / batch wall time, on a warm worker.

Contenders, each in its own process (with its own cluster):
  serial                  the tasks one after another in one plain process (reference)
  dask threads            the worker's default executor: 2 threads sharing one GIL
  dask interpreters       the same worker with aiosubinterp.DaskInterpreterPlugin
                          (2 interpreters, each with its own GIL); the tasks are
                          annotated with dask.annotate(executor="interpreters")

Target: the interpreter executor reaches >= 1.7x the thread
executor's throughput in the same run, on 2 cores.

Run: ``python benchmarks/bench_dask.py [--quick] [--json]``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import _contenders
import _harness
import _report
import _stats
import _timing
import _work

NAMES = ["serial", "dask threads", "dask interpreters"]


def dask_contender(interpreters: bool):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        import contextlib

        import dask
        from distributed import Client, LocalCluster

        import aiosubinterp

        logging.getLogger("distributed").setLevel(logging.ERROR)
        n, tasks, workers = params["n"], params["tasks"], _contenders.WORKERS
        with (
            LocalCluster(
                n_workers=1,
                threads_per_worker=workers,
                processes=True,
                host="127.0.0.1",
                protocol="tcp",
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            annotate: Any = contextlib.nullcontext()
            if interpreters:
                client.register_plugin(aiosubinterp.DaskInterpreterPlugin())
                annotate = dask.annotate(executor="interpreters")
            with annotate:
                # Warm-up: starts the interpreters (or threads), imports _work everywhere.
                client.gather(client.map(_work.spin, [n // 10] * (2 * workers), pure=False))
                meters = _timing.time_batches(
                    params["batches"],
                    lambda: client.gather(client.map(_work.spin, [n] * tasks, pure=False)),
                    _timing.check_spin(n),
                )
        kind = (
            "DaskInterpreterPlugin, tasks annotated executor='interpreters'"
            if interpreters
            else "the worker's default ThreadPoolExecutor"
        )
        return _timing.batch_result(
            meters,
            tasks,
            f"LocalCluster(n_workers=1, threads_per_worker={workers}, processes=True); {kind}",
        )

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        ["contender", "tasks/s (median)", "min", "max", "vs dask threads", *_report.LOAD_HEADERS]
    )
    med: dict[str, float] = {}
    for name, good in table.each(results):
        rates = _stats.collect(good, "rate")
        med[name] = _stats.median(rates)
        table.add(name, *_report.rate_cells(rates, 2), "", *_report.load_cells(good))
    threads = med.get("dask threads")
    for name, rate in med.items():
        table.set(name, 4, _report.fmt_ratio(_stats.ratio(rate, threads)))
    speedup = _stats.ratio(med.get("dask interpreters"), threads)
    targets = [
        _report.Target(
            "Dask worker: interpreter executor / thread executor throughput",
            speedup,
            ">=",
            1.7,
            note="1 worker, 2 threads, 2 cores",
        ),
    ]
    notes = [
        f"Task: spin(n={params['n']:,}), calibrated to ~{params['task_seconds']} s in the parent "
        f"process; batch = {params['tasks']} tasks (client.map + gather); "
        f"{params['batches']} batches per round x {params['rounds']} rounds on a warm worker.",
        "Each Dask contender starts its own LocalCluster (one worker process, loopback TCP); "
        "its start-up is not timed.",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report(
        [table.section()],
        targets,
        notes,
        {"median_tasks_per_s": med, "interpreters_vs_threads": speedup},
    )


if __name__ == "__main__":
    contenders = {
        "serial": _timing.serial_spin("one plain process, no Dask"),
        "dask threads": dask_contender(False),
        "dask interpreters": dask_contender(True),
    }
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_dask: pure-Python CPU tasks on a 1-worker, 2-thread Dask LocalCluster",
            contenders=contenders,
            full={"tasks": 40, "task_seconds": 0.05, "batches": 3, "rounds": 3},
            quick={"tasks": 16, "task_seconds": 0.02, "batches": 1, "rounds": 1},
            report=report,
            prepare=_timing.calibrate_spin,
        )
    )
