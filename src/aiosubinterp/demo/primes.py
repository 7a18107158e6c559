"""``python -m aiosubinterp demo --kind primes``: primes on one thread, threads, interpreters."""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Awaitable, Callable

__all__ = ["run_primes"]


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


async def _timed(
    label: str, coro_fn: Callable[[], Awaitable[int]]
) -> tuple[str, float, float, int]:
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    result = await coro_fn()
    wall = time.perf_counter() - t0
    return label, wall, (_cpu_seconds() - cpu0) / wall, result


async def run_primes(workers: int, tasks: int, span: int) -> int:
    """``demo --kind primes``: the table; returns 1 if the contenders disagree."""
    import aiosubinterp as asi
    from aiosubinterp.demo.work import count_primes

    chunks = [(i * span, (i + 1) * span) for i in range(tasks)]

    async def serial() -> int:
        return sum(count_primes(a, b) for a, b in chunks)

    async def threads() -> int:
        parts: list[int] = []
        for k in range(0, len(chunks), workers):  # at most `workers` threads at once
            batch = chunks[k : k + workers]
            parts += await asyncio.gather(
                *(asyncio.to_thread(count_primes, a, b) for a, b in batch)
            )
        return sum(parts)

    async with asi.InterpreterPool(workers) as pool:
        await pool.wait_ready()  # every interpreter started, not just the first
        await pool.run(count_primes, 0, 10)  # warm: the function's module is imported

        async def interpreters() -> int:
            return sum(await asyncio.gather(*(pool.run(count_primes, a, b) for a, b in chunks)))

        rows = [
            await _timed("one thread (plain Python)", serial),
            await _timed(f"asyncio.to_thread, {workers} threads", threads),
            await _timed(f"aiosubinterp, {workers} interpreters", interpreters),
        ]

    results = {row[3] for row in rows}
    base = rows[0][1]
    print(
        f"\nCounting primes below {tasks * span:,} in {tasks} tasks on {os.cpu_count()} CPUs "
        f"(Python {platform.python_version()}):\n"
    )
    print(f"  {'how':<36} {'seconds':>8} {'speedup':>8} {'CPU/wall':>9}")
    for label, wall, cpu_ratio, _ in rows:
        print(f"  {label:<36} {wall:8.2f} {base / wall:7.2f}x {cpu_ratio:9.2f}")
    print(
        f"\n  every contender found {rows[0][3]:,} primes"
        if len(results) == 1
        else f"\n  MISMATCH: {sorted(results)}"
    )
    print(
        "  CPU/wall near the worker count means the work really ran on that many cores;\n"
        "  threads stay near 1.0 because they share the main interpreter's GIL."
    )
    return 0 if len(results) == 1 else 1
