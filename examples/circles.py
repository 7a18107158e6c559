"""Bouncing circles on every core: one canvas strip per interpreter, borders over channels.

The canvas is cut into vertical strips, one per worker interpreter. Each
frame, a worker moves its circles, sends its neighbours the circles that
crossed into their strip plus copies of those near the border, receives
theirs, and resolves collisions (aiosubinterp.demo.circles has the physics,
shared by every contender of ``python -m aiosubinterp demo``). Neighbours
talk through channels directly; the main interpreter only hands out the
strips and collects the result, which must equal the single-threaded run.

Run: ``python examples/circles.py [circles] [frames]``; the whole zoo
(threads, processes, pictures) is ``python -m aiosubinterp demo``.
"""

import asyncio
import os
import sys
import time

import aiosubinterp
from aiosubinterp.demo import circles as physics


async def simulate(circles, params, frames, workers):
    strips = physics.split(circles, params, workers)
    rightward = [aiosubinterp.open_channel(maxsize=2) for _ in range(workers - 1)]
    leftward = [aiosubinterp.open_channel(maxsize=2) for _ in range(workers - 1)]
    preload = ("aiosubinterp.demo.circles",)  # imported by every worker before the clock starts
    async with aiosubinterp.InterpreterPool(workers, preload=preload) as pool:
        t0 = time.perf_counter()
        tasks = []
        for k, (lo, hi, owned) in enumerate(strips):
            left = (leftward[k - 1][0], rightward[k - 1][1]) if k > 0 else (None, None)
            right = (rightward[k][0], leftward[k][1]) if k < workers - 1 else (None, None)
            # The channel ends cross to the worker as arguments.
            tasks.append(
                pool.submit(physics.channel_region, owned, lo, hi, params, frames, *left, *right)
            )
        # A channel end passed to a worker is the same end: each worker closes
        # its ends when it finishes (closing them here would close them there).
        del rightward, leftward, left, right
        parts = await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return sorted(c for part in parts for c in part), wall


async def main(n, frames):
    workers = os.cpu_count() or 2
    params, circles = physics.initial_state(n, seed=0)
    t0 = time.perf_counter()
    reference = sorted(physics.step_frames(circles, params, frames))
    single = time.perf_counter() - t0
    result, wall = await simulate(circles, params, frames, workers)
    print(
        f"{n} circles, {frames} frames: single thread {frames / single:.0f} fps, "
        f"{workers} interpreters {frames / wall:.0f} fps ({single / wall:.2f}x)"
    )
    print("same positions as single-threaded:", result == reference)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    frames = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    asyncio.run(main(n, frames))
