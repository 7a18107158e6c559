"""Load: 200,000 tasks and 1,000,000 channel items; nothing lost, nothing duplicated, no growth.

The big runs use the asyncio loop only (asyncio.run in a plain test): the
loop-agnostic paths are covered on uvloop by the rest of the suite.
"""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
import stressfuncs
from stresshelp import fd_count, report, rss, thread_count, threads_back_to

import aiosubinterp as asi

pytestmark = pytest.mark.slow

N_TASKS = 200_000
N_ITEMS = 1_000_000
MiB = 1 << 20


def test_200k_tasks_through_a_two_interpreter_pool():
    fds0, threads0 = fd_count(), thread_count()

    async def main():
        async with asi.InterpreterPool(2) as pool:
            # Warm-up: interpreters, caches, allocator arenas, the hub.
            warm = [r async for r in pool.map(stressfuncs.inc, range(20_000))]
            assert warm == list(range(1, 20_001))
            del warm
            gc.collect()
            rss0 = rss()

            t0 = time.perf_counter()
            expected = 1
            async for r in pool.map(stressfuncs.inc, range(N_TASKS), ordered=True):
                if r != expected:
                    raise AssertionError(f"ordered map: got {r}, expected {expected}")
                expected += 1
            ordered_s = time.perf_counter() - t0
            assert expected == N_TASKS + 1

            # Unordered, and through submit(): each result exactly once.
            seen = bytearray(N_TASKS // 4)
            async for r in pool.map(stressfuncs.ident, range(N_TASKS // 4), ordered=False):
                seen[r] += 1
            assert seen.count(1) == len(seen)
            t0 = time.perf_counter()
            for lo in range(0, N_TASKS // 4, 5_000):
                batch = await asyncio.gather(
                    *(pool.submit(stressfuncs.ident, i) for i in range(lo, lo + 5_000))
                )
                assert batch == list(range(lo, lo + 5_000))
            gather_s = time.perf_counter() - t0
            stats = pool.statistics()
            assert stats["busy"] == 0 and stats["queued"] == 0 and stats["replaced"] == 0
            gc.collect()
            growth = rss() - rss0
        return ordered_s, gather_s, growth, stats

    ordered_s, gather_s, growth, stats = asyncio.run(main())
    report(
        "200k tasks",
        ordered_tasks_per_s=round(N_TASKS / ordered_s),
        ordered_seconds=round(ordered_s, 2),
        gather_tasks_per_s=round(N_TASKS // 4 / gather_s),
        rss_growth_mib=round(growth / MiB, 2),
        submitted=stats["submitted"],
    )
    assert growth < 20 * MiB, f"RSS grew by {growth / MiB:.1f} MiB after warm-up"
    assert fd_count() == fds0
    assert threads_back_to(threads0), f"{thread_count()} threads > {threads0}"


def test_a_million_channel_items():
    fds0, threads0 = fd_count(), thread_count()

    async def main():
        async with asi.InterpreterPool(2) as pool:
            # Warm-up: one interpreter streams to the loop.
            send, recv = asi.open_channel(256)
            task = pool.submit(stressfuncs.produce_range, send, 0, 50_000)  # closes `send`
            assert [x async for x in recv] == list(range(50_000))
            assert await task == 50_000
            recv.close()
            gc.collect()
            rss0 = rss()

            # 1M items interp -> loop: two producers (clones) fan in; each
            # producer's items must arrive in its order, each exactly once.
            half = N_ITEMS // 2
            send, recv = asi.open_channel(1024)
            t0 = time.perf_counter()
            producers = [
                pool.submit(stressfuncs.produce_range, send.clone(), 0, half),
                pool.submit(stressfuncs.produce_range, send.clone(), half, N_ITEMS),
            ]
            send.close()
            nxt = [0, half]
            async for x in recv:
                k = 0 if x < half else 1
                if x != nxt[k]:
                    raise AssertionError(f"channel item {x}, expected {nxt[k]}")
                nxt[k] += 1
            in_s = time.perf_counter() - t0
            assert nxt == [half, N_ITEMS]
            assert await asyncio.gather(*producers) == [half, half]
            recv.close()

            # Loop -> interp, 200k items: the worker sees them all, in order.
            send, recv = asi.open_channel(1024)
            consumer = pool.submit(stressfuncs.collect_count_sum, recv)
            t0 = time.perf_counter()
            for i in range(200_000):
                await send.send(i)
            send.close()
            assert await consumer == (200_000, sum(range(200_000)))
            out_s = time.perf_counter() - t0
            gc.collect()
            growth = rss() - rss0
        return in_s, out_s, growth

    in_s, out_s, growth = asyncio.run(main())
    report(
        "1M channel items",
        interp_to_loop_items_per_s=round(N_ITEMS / in_s),
        interp_to_loop_seconds=round(in_s, 2),
        loop_to_interp_items_per_s=round(200_000 / out_s),
        rss_growth_mib=round(growth / MiB, 2),
    )
    assert growth < 20 * MiB, f"RSS grew by {growth / MiB:.1f} MiB after warm-up"
    assert fd_count() == fds0
    assert threads_back_to(threads0), f"{thread_count()} threads > {threads0}"
