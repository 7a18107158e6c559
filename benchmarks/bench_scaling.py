"""Scaling with workers: tiny tasks/s and channel items/s on 1..N workers, and the efficiency.

For each worker count w in 1, 2, 4, ... up to N, and N itself (N = the
machine's CPUs, or ``--max-workers N``), each contender starts w workers,
warms them, and times batches:

  aiosubinterp          ``asyncio.gather`` of 2,000 x w ``pool.submit(noop, i)`` on
                        InterpreterPool(size=w): the tiny task of bench_throughput
  to_thread             the same through ``asyncio.to_thread``, a default executor of
                        w threads (the anchor that shares one GIL)
  procpool-fork         the same through ``loop.run_in_executor`` on
                        ProcessPoolExecutor(w, fork) (the anchor with no shared lock)
  aiosubinterp-stream   w workers each stream 20,000 small items (ints and short
                        strings) through its own ``open_channel(1024)`` to the event
                        loop, which drains all w channels at once
  aiosubinterp-pairs    w // 2 pairs of workers (w >= 2): in each, one worker streams
                        20,000 small items through its own channel to the other

Each contender runs in its own process, sweeping every count (a new pool per
count). Reported per count: the median rate over rounds x batches (tasks/s or
items/s), the rate per worker, and the scaling efficiency: the rate per worker
over the rate per worker at the smallest count (1 worker; 2 for pairs). Every
channel of every interpreter shares one process-wide mutex, and each pool one
job-queue mutex: the efficiency at many workers shows what they cost.

A debug build (``AIOSUBINTERP_DEBUG=1``) counts, per lock rank, acquisitions,
contended acquisitions and nanoseconds waited and held
(``aiosubinterp._core._lock_stats()``): the report then adds them for each
aiosubinterp contender at the largest count. A release build has no counters
and that table is absent. (A debug build is -O0: read its counts and ratios,
not its rates.)

Target: at N workers, the pool's tiny tasks/s >= 3 x to_thread's (as in
bench_throughput); (info) the scaling efficiency at N workers of tasks,
streams and pairs >= 0.5.

Run: ``python benchmarks/bench_scaling.py [--quick] [--json] [--loop uvloop]
[--max-workers N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from typing import Any

import _chanwork
import _contenders
import _harness
import _machine
import _report
import _stats
import _timing
import _work

TASKS = ["aiosubinterp", "to_thread", "procpool-fork"]
STREAM = "aiosubinterp-stream"
PAIRS = "aiosubinterp-pairs"
NAMES = [*TASKS, STREAM, PAIRS]
OURS = ("aiosubinterp", STREAM, PAIRS)
UNIT = {STREAM: "items/s", PAIRS: "items/s"}


def worker_counts(limit: int) -> list[int]:
    """1, 2, 4, ... below `limit`, then `limit` itself."""
    if limit < 1:
        raise ValueError(f"--max-workers must be >= 1, not {limit}")
    counts = []
    w = 1
    while w < limit:
        counts.append(w)
        w *= 2
    return [*counts, limit]


def _lock_stats_module() -> Any:
    """aiosubinterp._core when its build counts lock waits (a debug build), else None."""
    from aiosubinterp import _core

    return _core if _core.LOCK_ORDER_CHECKED else None


def _drain_counter() -> Any:
    async def drain(recv: Any) -> int:
        n = 0
        async for _ in recv:
            n += 1
        return n

    return drain


async def _one_count(kind: str, loop: str, w: int, params: dict[str, Any]) -> dict[str, Any]:
    """Time params["batches"] batches on w workers of contender `kind`."""
    batches = params["batches"]
    core = _lock_stats_module() if kind in OURS else None
    if kind in TASKS:
        n = params["tasks_per_worker"] * w

        def check(results: list[Any]) -> None:
            if results != list(range(n)):
                raise AssertionError(f"gather of {n} noop(i) returned wrong results")

        async with _contenders.open_runner(kind, loop, workers=w) as runner:
            submit = runner.submit
            await asyncio.gather(*(submit(_work.noop, i) for i in range(params["warmup"] * w)))
            if core is not None:
                core._lock_stats_reset()
            meters = await _timing.time_batches_async(
                batches, lambda: asyncio.gather(*(submit(_work.noop, i) for i in range(n))), check
            )
            locks = core._lock_stats() if core is not None else None
            return _timing.batch_result(meters, n, runner.info, locks=locks)

    import aiosubinterp

    items = params["items"]
    streams = w if kind == STREAM else w // 2
    drain = _drain_counter()
    async with aiosubinterp.InterpreterPool(size=w) as pool:
        await asyncio.gather(*(pool.submit(_work.nap, 0.05) for _ in range(w)))

        async def batch() -> list[Any]:
            if kind == STREAM:
                chans = [aiosubinterp.open_channel(1024) for _ in range(streams)]
                jobs = [pool.submit(_chanwork.chan_produce_small, s, items) for s, _ in chans]
                got = await asyncio.gather(*(drain(r) for _, r in chans))
                await asyncio.gather(*jobs)
                return got
            chans = [aiosubinterp.open_channel(1024) for _ in range(streams)]
            jobs = [pool.submit(_chanwork.chan_consume, r) for _, r in chans]
            jobs += [pool.submit(_chanwork.chan_produce_small, s, items) for s, _ in chans]
            done = await asyncio.gather(*jobs)
            return [got for got, _ in done[:streams]]

        def check(results: list[Any]) -> None:
            if results != [items] * streams:
                raise AssertionError(f"{streams} streams of {items} items delivered {results}")

        await batch()  # warm-up: the channel module and the task functions, imported
        if core is not None:
            core._lock_stats_reset()
        meters = await _timing.time_batches_async(batches, batch, check)
        locks = core._lock_stats() if core is not None else None
        what = "w streams to the loop" if kind == STREAM else "w // 2 worker-to-worker pairs"
        return _timing.batch_result(
            meters,
            streams * items,
            f"InterpreterPool(size=w), {what}, open_channel(1024)",
            locks=locks,
            streams=streams,
        )


def contender(kind: str):
    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        async def body() -> dict[str, Any]:
            per: dict[str, Any] = {}
            info = ""
            for w in params["counts"]:
                if kind == PAIRS and w < 2:
                    continue
                res = await _one_count(kind, loop, w, params)
                info = res.pop("info")
                per[str(w)] = res
            return {"counts": per, "info": info}

        return _contenders.run_async(body, loop)

    return run


def _rates(good: list[dict[str, Any]], w: str) -> list[float]:
    return [x for r in good for x in r["counts"].get(w, {}).get("rate", [])]


def _locks_table(
    name: str, w: str, good: list[dict[str, Any]]
) -> tuple[str, list[str], list[list[str]]] | None:
    """Per lock rank at w workers, summed over the rounds that have counters, or None."""
    found = [r["counts"][w] for r in good if (r["counts"].get(w) or {}).get("locks")]
    if not found:
        return None
    ops = sum(res["tasks"] * len(res["wall"]) for res in found)
    wall_ns = sum(sum(res["wall"]) for res in found) * 1e9
    locks: dict[str, dict[str, int]] = {}
    for res in found:
        for rank, counts in res["locks"].items():
            total = locks.setdefault(rank, dict.fromkeys(counts, 0))
            for key, value in counts.items():
                total[key] = value if key == "rank" else total[key] + value
    unit = "item" if name in (STREAM, PAIRS) else "task"
    rows = []
    for rank, s in sorted(locks.items(), key=lambda kv: kv[1]["rank"]):
        if not s["acquired"]:
            continue
        acq, cont = s["acquired"], s["contended"]
        rows.append(
            [
                rank,
                str(s["rank"]),
                f"{acq / ops:.2f}",
                f"{cont:,} ({100 * cont / acq:.2f}%)",
                _report.fmt(s["wait_ns"] / cont if cont else math.nan, 0),
                _report.fmt(s["hold_ns"] / acq, 0),
                f"{100 * s['hold_ns'] / wall_ns:.1f}%",
                f"{100 * s['wait_ns'] / wall_ns:.1f}%",
            ]
        )
    heading = (
        f"Lock ranks, {name}, {w} workers: {ops:,} {unit}s over {len(found)} round(s) "
        "(a build that checks the lock order: its times include that bookkeeping)"
    )
    return (
        heading,
        [
            "lock rank",
            "rank",
            f"acquired per {unit}",
            "contended",
            "mean wait ns",
            "mean hold ns",
            "held / wall",
            "waited / wall",
        ],
        rows,
    )


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    counts = [str(w) for w in params["counts"]]
    top = counts[-1]
    headers = [
        "contender",
        "workers",
        "median rate",
        "min",
        "max",
        "per worker",
        "efficiency vs fewest",
        *_report.LOAD_HEADERS,
    ]
    rows: list[list[str]] = []
    scaling: dict[str, dict[str, dict[str, float]]] = {}
    infos = []
    lock_tables = []
    for name, rounds in results.items():
        good, error = _stats.ok_rounds(rounds)
        if not good:
            rows.append([name, "", _report.error_cell(error or "no result"), *[""] * 6])
            continue
        infos.append(f"{name}: {good[0]['info']}")
        failed = len(rounds) - len(good)
        label = name + (f" ({failed}/{len(rounds)} rounds failed)" if failed else "")
        unit = UNIT.get(name, "tasks/s")
        base = None
        scaling[name] = {}
        for w in counts:
            rates = _rates(good, w)
            if not rates:
                continue
            med = _stats.median(rates)
            per_worker = med / int(w)
            if base is None:
                base = per_worker
            eff = _stats.ratio(per_worker, base)
            scaling[name][w] = {"rate": med, "per_worker": per_worker, "efficiency": eff}
            load = [r["counts"][w] for r in good if w in r["counts"]]
            rows.append(
                [
                    label,
                    w,
                    *_report.rate_cells(rates),
                    _report.fmt(per_worker, 0),
                    _report.fmt_ratio(eff),
                    *_report.load_cells(load),
                ]
            )
            label = ""
        if rows and scaling[name]:
            rows[-len(scaling[name])][2] += f" {unit}"
        table = _locks_table(name, top, good)
        if table is not None:
            lock_tables.append(table)

    def at_top(name: str, key: str) -> float:
        return scaling.get(name, {}).get(top, {}).get(key, math.nan)

    targets = [
        _report.Target(
            f"tasks/s at {top} workers / to_thread's",
            _stats.ratio(at_top("aiosubinterp", "rate"), at_top("to_thread", "rate")),
            ">=",
            3,
            note=f"asyncio.to_thread, {top} threads",
        ),
        _report.Target(
            f"(info) tasks/s at {top} workers / process pool's",
            _stats.ratio(at_top("aiosubinterp", "rate"), at_top("procpool-fork", "rate")),
            ">=",
            1,
            note="ProcessPoolExecutor, fork",
        ),
        _report.Target(
            f"(info) efficiency at {top} workers, tiny tasks",
            at_top("aiosubinterp", "efficiency"),
            ">=",
            0.5,
            note="per-worker tasks/s vs 1 worker",
        ),
        _report.Target(
            f"(info) efficiency at {top} workers, streams to the loop",
            at_top(STREAM, "efficiency"),
            ">=",
            0.5,
            note="per-worker items/s vs 1 worker",
        ),
        _report.Target(
            f"(info) efficiency at {top} workers, worker pairs",
            at_top(PAIRS, "efficiency"),
            ">=",
            0.5,
            note="per-worker items/s vs 2 workers (1 pair)",
        ),
    ]
    notes = [
        f"Per round and count w: {params['warmup']} x w warm-up tasks (a warm-up batch for the "
        f"channel rows), then {params['batches']} batch(es): {params['tasks_per_worker']:,} x w "
        f"tasks gathered, or {params['items']:,} items per stream. Rates: median/min/max over "
        "rounds x batches; per worker = median / w (for pairs: / w, both ends counted); "
        "efficiency = per worker / per worker at the fewest workers of that row.",
        f"Worker counts: {', '.join(counts)} (--max-workers sets the largest; default: the "
        f"{_machine.ncpu()} CPUs). The event loop's own thread is one more busy core: at w = "
        "CPUs the workers and the loop share the machine.",
        _report.LOAD_NOTE,
        *infos,
    ]
    if not lock_tables and any(n in results for n in OURS):
        notes.append(
            "Lock ranks: not counted by this build (a release build); a debug build "
            "(AIOSUBINTERP_DEBUG=1) adds them."
        )
    med = {n: at_top(n, "rate") for n in TASKS if n in scaling}
    summary = {
        "median_tasks_per_s": med,
        "counts": counts,
        "scaling": scaling,
        "locks": {t[0]: t[2] for t in lock_tables},
    }
    tables = [("", headers, rows), *lock_tables]
    return _report.Report(tables, targets, notes, summary)


def _max_workers_option() -> int | None:
    """--max-workers N, removed from sys.argv before _harness parses it (children get none)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--max-workers", type=int, default=None)
    known, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    if known.max_workers is not None and known.max_workers < 1:
        parser.error(f"--max-workers must be >= 1, not {known.max_workers}")
    return known.max_workers


def main() -> int:
    limit = _max_workers_option()

    def prepare(params: dict[str, Any]) -> dict[str, Any]:
        top = limit or (min(2, _machine.ncpu()) if params["quick"] else _machine.ncpu())
        return {**params, "counts": worker_counts(top)}

    return _harness.main(
        doc=__doc__,
        title="bench_scaling: tiny tasks/s and channel items/s from 1 to N workers",
        contenders={name: contender(name) for name in NAMES},
        full={"tasks_per_worker": 2_000, "items": 20_000, "warmup": 50, "batches": 2, "rounds": 3},
        quick={"tasks_per_worker": 300, "items": 2_000, "warmup": 20, "batches": 1, "rounds": 1},
        prepare=prepare,
        report=report,
        child_timeout=(600.0, 60.0),
    )


if __name__ == "__main__":
    sys.exit(main())
