"""Timing helpers for the contenders' bodies, which run in the child processes.

What belongs here: timed batches (time_batches, time_batches_async) and the
result a child reports for them (batch_result); sequential round trips of
noop(i), the warm-up dropped (time_calls); and the calibrated CPU-bound
spin(n) batches of bench_cpu_scaling and bench_dask.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import _work
from _machine import Meter
from _stats import median


def time_batches(
    count: int, batch: Callable[[], list[Any]], check: Callable[[list[Any]], None]
) -> list[Meter]:
    """Run batch() `count` times, each under a Meter; check() its results outside the timing."""
    meters = []
    for _ in range(count):
        with Meter() as meter:
            results = batch()
        check(results)
        meters.append(meter)
    return meters


async def time_batches_async(
    count: int, batch: Callable[[], Awaitable[list[Any]]], check: Callable[[list[Any]], None]
) -> list[Meter]:
    """time_batches() for a batch that is awaited (a gather of submitted tasks)."""
    meters = []
    for _ in range(count):
        with Meter() as meter:
            results = await batch()
        check(results)
        meters.append(meter)
    return meters


def batch_result(meters: list[Meter], tasks: int, info: str, **extra: Any) -> dict[str, Any]:
    """A child's result for timed batches of `tasks` tasks: wall times, rates, load."""
    return {
        "wall": [m.wall for m in meters],
        "rate": [tasks / m.wall for m in meters],
        "tasks": tasks,
        "info": info,
        "cpu_per_wall": median([m.cpu_per_wall for m in meters]),
        "other_cores": median([m.other_cores for m in meters]),
        **extra,
    }


async def time_calls(
    call: Callable[..., Awaitable[Any]], n: int, warmup: int
) -> tuple[list[float], Meter]:
    """`warmup` untimed awaits of call(noop, i), then `n` awaits each timed: (µs, Meter).

    The loop is kept bare (local names, integer clock) since its own cost is
    part of every sample.
    """
    noop = _work.noop
    for i in range(warmup):
        await call(noop, i)
    samples = [0] * n
    wrong = 0
    clock = time.perf_counter_ns
    with Meter() as meter:
        for i in range(n):
            t0 = clock()
            r = await call(noop, i)
            samples[i] = clock() - t0
            if r != i:
                wrong += 1
    if wrong:
        raise AssertionError(f"{wrong} of {n} calls of noop(i) returned a wrong result")
    return [s / 1000 for s in samples], meter


# CPU-bound batches of _work.spin(n) (bench_cpu_scaling, bench_dask).


def calibrate_spin(params: dict[str, Any]) -> dict[str, Any]:
    """Set params['n'] so that spin(n) takes params['task_seconds'] in this process."""
    probe = 200_000
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        _work.spin(probe)
        best = min(best, time.perf_counter() - t0)
    params["n"] = max(1000, int(probe * params["task_seconds"] / best))
    return params


def check_spin(n: int) -> Callable[[list[Any]], None]:
    """A check for time_batches(): every result is spin(n)'s."""
    want = _work.expected_spin(n)

    def check(results: list[Any]) -> None:
        bad = sum(1 for r in results if r != want)
        if bad:
            raise AssertionError(f"{bad} of {len(results)} spin({n}) results are wrong")

    return check


def serial_spin(info: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """The serial baseline: params['batches'] batches of params['tasks'] spin(n) in one process."""

    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        n, tasks = params["n"], params["tasks"]
        _work.spin(n // 10)
        meters = time_batches(
            params["batches"], lambda: [_work.spin(n) for _ in range(tasks)], check_spin(n)
        )
        return batch_result(meters, tasks, info)

    return run
