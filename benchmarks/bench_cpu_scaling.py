"""CPU-bound scaling: speedup of 8 pure-Python tasks on 2 workers over running them serially.

The task is ``_work.spin(n)``, a loop summing i*i, with n calibrated so one
task takes ~0.2 s here. A batch is 8 tasks; its wall time is measured from
the first submit to the last result, on warm workers.

Contenders, each in its own process:
  serial               the 8 tasks one after another in one plain process (the baseline)
  2 plain processes    the anchor: two ``python -c ...`` processes started with
                       subprocess.Popen, each doing 4 tasks; they start up first, then
                       get "go" together; the wall time ends when both are done
  aiosubinterp         ``asyncio.gather`` of 8 ``pool.submit(spin, n)``, InterpreterPool(size=2)
  procpool-fork        8 ``loop.run_in_executor`` on ProcessPoolExecutor(2, fork)
  to_thread            8 ``asyncio.to_thread`` on 2 threads (GIL-bound: expect ~1x;
                       ~2x on a free-threaded build)
  threadpool           8 ``loop.run_in_executor`` on ThreadPoolExecutor(2) (by default on
                       free-threaded builds only)

speedup = serial batch time / the contender's batch time (medians).
Target: aiosubinterp's speedup >= 0.9 x the speedup that the 2 plain
processes reach on the same machine in the same run; on a free-threaded build
(3.13t), also >= 0.95 x to_thread's speedup.

Run: ``python benchmarks/bench_cpu_scaling.py [--quick] [--json] [--loop uvloop]``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats
import _timing
import _work

PLAIN = "2 plain processes"
POOLS = ["aiosubinterp", "procpool-fork", "to_thread", "threadpool"]
NAMES = ["serial", PLAIN, *POOLS]

# The anchor's worker: start up, say "ready", wait for "go", run k tasks, report.
PLAIN_CHILD = r"""
import sys, time
import _work
n, k = int(sys.argv[1]), int(sys.argv[2])
_work.spin(1000)
print("ready", flush=True)
sys.stdin.readline()
c0 = time.process_time()
ok = all(_work.spin(n) == _work.expected_spin(n) for _ in range(k))
print(time.process_time() - c0, ok, flush=True)
"""


def run_plain(params: dict[str, Any], loop: str) -> dict[str, Any]:
    n, tasks, workers = params["n"], params["tasks"], _contenders.WORKERS
    per = tasks // workers
    meters = []
    for _ in range(params["batches"]):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", PLAIN_CHILD, str(n), str(per)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(workers)
        ]
        try:
            for p in procs:
                line = p.stdout.readline().strip()  # type: ignore[union-attr]
                if line != "ready":
                    raise RuntimeError(f"plain process did not start: {line!r}")
            with _machine.Meter() as meter:
                for p in procs:
                    p.stdin.write("go\n")  # type: ignore[union-attr]
                    p.stdin.flush()  # type: ignore[union-attr]
                outs = [p.stdout.readline().split() for p in procs]  # type: ignore[union-attr]
        finally:
            for p in procs:
                p.stdin.close()  # type: ignore[union-attr]
                p.wait()
        if not all(len(o) == 2 and o[1] == "True" for o in outs):
            raise AssertionError(f"plain processes reported {outs!r}")
        meters.append(meter)
    return _timing.batch_result(
        meters,
        tasks,
        f"{workers} x `python -c` (Popen), {per} tasks each, timed from 'go' to both done",
    )


def pool_contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        n, tasks = params["n"], params["tasks"]

        async def body() -> dict[str, Any]:
            async with _contenders.open_runner(kind, loop) as runner:
                submit = runner.submit
                await asyncio.gather(
                    *(submit(_work.spin, n // 10) for _ in range(_contenders.WORKERS))
                )
                meters = await _timing.time_batches_async(
                    params["batches"],
                    lambda: asyncio.gather(*(submit(_work.spin, n) for _ in range(tasks))),
                    _timing.check_spin(n),
                )
                return _timing.batch_result(meters, tasks, runner.info)

        return _contenders.run_async(body, loop)

    return run


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    table = _report.Table(
        [
            "contender",
            "batch s (median)",
            "min",
            "max",
            "speedup vs serial",
            "vs plain processes",
            *_report.LOAD_HEADERS,
        ]
    )
    med: dict[str, float] = {}
    for name, good in table.each(results):
        walls = _stats.collect(good, "wall")
        med[name] = _stats.median(walls)
        table.add(name, *_report.rate_cells(walls, 3), "", "", *_report.load_cells(good))
    serial = med.get("serial")
    plain_speedup = _stats.ratio(serial, med.get(PLAIN))
    speedups = {name: _stats.ratio(serial, m) for name, m in med.items()}
    for name, speedup in speedups.items():
        table.set(name, 4, _report.fmt_ratio(speedup))
        table.set(name, 5, _report.fmt_ratio(_stats.ratio(speedup, plain_speedup)))
    ours = speedups.get("aiosubinterp")
    targets = [
        _report.Target(
            "speedup / 2 plain processes' speedup",
            _stats.ratio(ours, plain_speedup),
            ">=",
            0.9,
            note=f"{PLAIN}: speedup {_report.fmt_ratio(plain_speedup)}",
        ),
        _report.Target(
            "(info) speedup / ProcessPoolExecutor's",
            _stats.ratio(ours, speedups.get("procpool-fork")),
            ">=",
            1.0,
            note="informational, no target",
        ),
    ]
    if _contenders.FREE_THREADED:
        targets += [
            _report.Target(
                "speedup / to_thread's speedup",
                _stats.ratio(ours, speedups.get("to_thread")),
                ">=",
                0.95,
                note="free-threaded build: threads scale too",
            ),
            _report.Target(
                "(info) speedup / ThreadPoolExecutor's",
                _stats.ratio(ours, speedups.get("threadpool")),
                ">=",
                0.95,
                note="free-threaded build",
            ),
        ]
    notes = [
        f"Task: spin(n={params['n']:,}), calibrated to ~{params['task_seconds']} s in the parent "
        f"process; batch = {params['tasks']} tasks on {_contenders.WORKERS} workers; "
        f"{params['batches']} batches per round x {params['rounds']} rounds on warm workers.",
        "CPU/wall near 2.0 means both cores worked for the contender; with other load > 0 the "
        "parallel contenders lose cores to the rest of the machine, the serial baseline less so.",
        _report.LOAD_NOTE,
        *table.infos,
    ]
    return _report.Report(
        [table.section()],
        targets,
        notes,
        {"median_batch_s": med, "speedup": speedups, "plain_speedup": plain_speedup},
    )


if __name__ == "__main__":
    contenders = {
        "serial": _timing.serial_spin("one plain process, no event loop"),
        PLAIN: run_plain,
    }
    contenders.update({k: pool_contender(k) for k in POOLS})
    sys.exit(
        _harness.main(
            doc=__doc__,
            title="bench_cpu_scaling: 8 CPU-bound pure-Python tasks on 2 workers",
            contenders=contenders,
            full={"tasks": 8, "task_seconds": 0.2, "batches": 3, "rounds": 3},
            quick={"tasks": 8, "task_seconds": 0.03, "batches": 1, "rounds": 1},
            report=report,
            prepare=_timing.calibrate_spin,
        )
    )
