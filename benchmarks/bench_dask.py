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

Target (issue #8): the interpreter executor reaches >= 1.7x the thread
executor's throughput in the same run, on 2 cores.

Run: ``python benchmarks/bench_dask.py [--quick] [--json]``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import _common
import _work

NAMES = ["serial", "dask threads", "dask interpreters"]


def calibrate(params: dict[str, Any]) -> dict[str, Any]:
    """Pick n so that spin(n) takes params['task_seconds'] in a plain process here."""
    probe = 200_000
    best = min(_timed(probe) for _ in range(3))
    params["n"] = max(1000, int(probe * params["task_seconds"] / best))
    return params


def _timed(n: int) -> float:
    t0 = time.perf_counter()
    _work.spin(n)
    return time.perf_counter() - t0


def _check(results: list[int], n: int) -> None:
    want = _work.expected_spin(n)
    bad = sum(1 for r in results if r != want)
    if bad:
        raise AssertionError(f"{bad} of {len(results)} spin({n}) results are wrong")


def _result(walls: list[float], meters: list[dict[str, float]], tasks: int,
            info: str) -> dict[str, Any]:
    return {"wall": walls, "throughput": [tasks / w for w in walls], "info": info,
            "cpu_per_wall": _common.median([m["cpu_per_wall"] for m in meters]),
            "other_cores": _common.median([m["other_cores"] for m in meters])}


def run_serial(params: dict[str, Any], loop: str) -> dict[str, Any]:
    n, tasks = params["n"], params["tasks"]
    _work.spin(n // 10)
    walls, meters = [], []
    for _ in range(params["batches"]):
        with _common.Meter() as meter:
            results = [_work.spin(n) for _ in range(tasks)]
        _check(results, n)
        walls.append(meter.wall)
        meters.append(meter.result())
    return _result(walls, meters, tasks, "one plain process, no Dask")


def dask_contender(interpreters: bool):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        import contextlib

        import dask
        from distributed import Client, LocalCluster

        import aiosubinterp

        logging.getLogger("distributed").setLevel(logging.ERROR)
        n, tasks, workers = params["n"], params["tasks"], _common.WORKERS
        with LocalCluster(n_workers=1, threads_per_worker=workers, processes=True,
                          host="127.0.0.1", protocol="tcp", dashboard_address=None) as cluster, \
                Client(cluster) as client:
            annotate: Any = contextlib.nullcontext()
            if interpreters:
                client.register_plugin(aiosubinterp.DaskInterpreterPlugin())
                annotate = dask.annotate(executor="interpreters")
            with annotate:
                # Warm-up: starts the interpreters (or threads), imports _work everywhere.
                client.gather(client.map(_work.spin, [n // 10] * (2 * workers), pure=False))
                walls, meters = [], []
                for _ in range(params["batches"]):
                    with _common.Meter() as meter:
                        results = client.gather(client.map(_work.spin, [n] * tasks, pure=False))
                    _check(results, n)
                    walls.append(meter.wall)
                    meters.append(meter.result())
        kind = ("DaskInterpreterPlugin, tasks annotated executor='interpreters'" if interpreters
                else "the worker's default ThreadPoolExecutor")
        return _result(walls, meters, tasks,
                       f"LocalCluster(n_workers=1, threads_per_worker={workers}, processes=True); "
                       f"{kind}")

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _common.Report:
    med: dict[str, float] = {}
    rows = []
    infos = []
    for name, rounds in results.items():
        good, error = _common.ok_rounds(rounds)
        if not good:
            rows.append([name, _common.error_cell(error or "no result"), "", "", "", "", ""])
            continue
        rates = _common.collect(good, "throughput")
        med[name] = _common.median(rates)
        failed = f" ({len(rounds) - len(good)}/{len(rounds)} rounds failed)" if error else ""
        rows.append([name + failed, _common.fmt(med[name], 2), _common.fmt(min(rates), 2),
                     _common.fmt(max(rates), 2), "", *_common.load_cells(good)])
        infos.append(f"{name}: {good[0]['info']}")
    threads = med.get("dask threads")
    for row in rows:
        if row[0] in med:
            row[4] = _common.fmt_ratio(_common.ratio(med[row[0]], threads))
    headers = ["contender", "tasks/s (median)", "min", "max", "vs dask threads",
               *_common.LOAD_HEADERS]
    speedup = _common.ratio(med.get("dask interpreters"), threads)
    targets = [
        _common.Target("Dask worker: interpreter executor / thread executor throughput",
                       speedup, ">=", 1.7, note="issue #8; 1 worker, 2 threads, 2 cores"),
    ]
    notes = [
        f"Task: spin(n={params['n']:,}), calibrated to ~{params['task_seconds']} s in the parent "
        f"process; batch = {params['tasks']} tasks (client.map + gather); "
        f"{params['batches']} batches per round x {params['rounds']} rounds on a warm worker.",
        "Each Dask contender starts its own LocalCluster (one worker process, loopback TCP); "
        "its start-up is not timed.",
        _common.LOAD_NOTE,
        *infos,
    ]
    return _common.Report([("", headers, rows)], targets, notes,
                          {"median_tasks_per_s": med, "interpreters_vs_threads": speedup})


if __name__ == "__main__":
    contenders = {"serial": run_serial, "dask threads": dask_contender(False),
                  "dask interpreters": dask_contender(True)}
    sys.exit(_common.main(
        doc=__doc__,
        title="bench_dask: pure-Python CPU tasks on a 1-worker, 2-thread Dask LocalCluster",
        contenders=contenders,
        full={"tasks": 40, "task_seconds": 0.05, "batches": 3, "rounds": 3},
        quick={"tasks": 16, "task_seconds": 0.02, "batches": 1, "rounds": 1},
        report=report,
        prepare=calibrate,
    ))
