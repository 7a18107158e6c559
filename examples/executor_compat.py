"""InterpreterPoolExecutor where code expects a concurrent.futures executor.

Code written for ThreadPoolExecutor or ProcessPoolExecutor keeps working:
submit/map/as_completed, ``loop.run_in_executor``, and a loop's default
executor (which ``asyncio.to_thread`` uses). The functions run in
interpreters with their own GIL, in parallel on every core.

Run: ``python examples/executor_compat.py``
"""

from __future__ import annotations

import asyncio
import concurrent.futures

import aiosubinterp


def collatz_steps(n: int) -> int:
    """Pure-Python CPU work: steps of the Collatz sequence from n to 1."""
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def longest(start: int, stop: int) -> tuple[int, int]:
    return max((collatz_steps(n), n) for n in range(start, stop))


async def with_asyncio(executor: concurrent.futures.Executor) -> int:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(executor)
    a = loop.run_in_executor(executor, collatz_steps, 27)
    b = asyncio.to_thread(collatz_steps, 97)  # the default executor: an interpreter
    return sum(await asyncio.gather(a, b))


def main() -> None:
    with aiosubinterp.InterpreterPoolExecutor() as executor:
        # The familiar executor API: submit, as_completed, map (with chunksize).
        futures = [executor.submit(longest, lo, lo + 25_000) for lo in range(1, 100_001, 25_000)]
        best = max(f.result() for f in concurrent.futures.as_completed(futures))
        print(f"longest Collatz chain below 100,001: {best[1]} ({best[0]} steps)")
        steps = list(executor.map(collatz_steps, range(1, 1001), chunksize=100))
        print(f"total steps for 1..1000: {sum(steps)}")
        # Last use: asyncio.run() shuts its loop's default executor down when it returns.
        assert asyncio.run(with_asyncio(executor)) == 111 + 118
    print("ok")


if __name__ == "__main__":  # worker interpreters import this file to find its functions
    main()
