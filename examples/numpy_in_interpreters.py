"""numpy running *inside* interpreters (``fallback="copy"``), beside ProcessPool and to_thread.

numpy refuses to load in a subinterpreter with its own GIL. With
``InterpreterPool(fallback="copy")`` each interpreter loads a private copy of
numpy's extension modules (its C state is then its own), so the same numpy
code runs in interpreters of this process, in parallel, and arrays cross
without a copy. The same work then runs on a ``ProcessPool`` (worker
processes, arrays pickled) and on threads (``asyncio.to_thread``: one GIL).
``examples/numpy_fallback.py`` shows ``fallback="process"`` instead (numpy on
worker processes, found by the pool itself); ``benchmarks/bench_numpy.py``
measures all of them.

Run: ``python examples/numpy_in_interpreters.py``
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import numpy as np

import aiosubinterp


def features(seed: int) -> tuple[float, int]:
    """Plain numpy, a Python loop over small windows between vectorised steps (~10 ms):
    nothing here knows where it runs. Returns a summary and the process it ran in."""
    rng = np.random.default_rng(seed)
    signal = np.cumsum(rng.standard_normal(160 * 128))
    taper = np.hanning(128)
    rows = []
    for w in signal.reshape(160, 128):
        w = (w - w.mean()) * taper
        spectrum = np.abs(np.fft.rfft(w))
        rows.append((w.std(), spectrum.argmax(), np.percentile(w, 90)))
    table = np.array(rows)
    z = (table - table.mean(axis=0)) / table.std(axis=0)
    return round(float(np.linalg.eigvalsh(z.T @ z).max()), 6), os.getpid()


def scaled(a: np.ndarray) -> np.ndarray:
    return a * 2


async def compare(
    label: str, call, expected: list[float], array: np.ndarray, double=scaled
) -> None:
    """The same work through `call` (pool.run or asyncio.to_thread): tasks/s, where it ran,
    and a 16 MiB array in and out."""
    await asyncio.gather(call(features, 0), call(features, 1))  # each worker imports numpy
    started = time.perf_counter()
    results = await asyncio.gather(*(call(features, seed) for seed in range(len(expected))))
    rate = len(expected) / (time.perf_counter() - started)
    same = [value for value, _ in results] == expected
    here = all(pid == os.getpid() for _, pid in results)
    await call(double, array)
    started = time.perf_counter()
    doubled = await call(double, array)
    ms = (time.perf_counter() - started) * 1000
    print(
        f"{label}: {rate:.0f} tasks/s, same results: {same}, in this process: {here}, "
        f"16 MiB array * 2: {ms:.1f} ms, correct: {bool((doubled == 2).all())}"
    )


async def main() -> None:
    try:
        pool = aiosubinterp.InterpreterPool(2, fallback="copy")
    except ValueError as exc:  # CPython 3.12 and free-threaded builds: says why
        sys.exit(f"{exc}\nexamples/numpy_fallback.py runs numpy on processes instead.")
    expected = [features(seed)[0] for seed in range(40)]
    array = np.ones(2 * 1024 * 1024)  # 16 MiB of float64
    async with pool:
        # Arrays cross zero-copy both ways; a result is a read-only view of
        # the array the interpreter made.
        await compare('interpreters (fallback="copy")', pool.run, expected, array)
        stats = pool.statistics()
        print(
            f"private copies: {stats['copies']} files, "
            f"{stats['copies_bytes'] / 2**20:.0f} MiB on disk"
        )
    async with aiosubinterp.ProcessPool(2) as processes:
        await compare("processes (ProcessPool)", processes.run, expected, array)
    await compare("threads (asyncio.to_thread)", asyncio.to_thread, expected, array)


if __name__ == "__main__":
    asyncio.run(main())
