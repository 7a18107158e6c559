"""Cancellation and timeouts: queued tasks are withdrawn, running ones interrupted."""

from __future__ import annotations

import asyncio
import os

import pytest
import workfuncs

import aiosubinterp as asi


async def test_a_swallowed_interruption_is_repeated_and_close_does_not_hang():
    # The first KeyboardInterrupt is lost (seen under load: it landed in an
    # importlib callback while the task's module was imported, and CPython
    # printed "Exception ignored"); the task then spins. Its worker is
    # replaced after the grace period, and the interruption is repeated until
    # the task ends: closing the pool used to wait for it forever.
    pool = asi.InterpreterPool(1, cancel_grace=0.2)
    await pool.start()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(workfuncs.swallow_once_then_spin), 0.3)
        assert await asyncio.wait_for(pool.run(workfuncs.square, 7), 30) == 49
        assert pool.statistics()["replaced"] == 1
    finally:
        await asyncio.wait_for(pool.aclose(), 30)


async def test_stuck_task_gets_its_worker_replaced(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1, cancel_grace=0.2) as pool:
        try:
            stuck_id = await pool.run(workfuncs.interp_id)
            task = pool.submit(workfuncs.read_fd, r)  # blocked in C: ignores the interrupt
            while pool.statistics()["busy"] == 0:
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # A fresh interpreter took the slot while the old one is still blocked.
            new_id = await asyncio.wait_for(pool.run(workfuncs.interp_id), 30)
            assert new_id != stuck_id
            assert pool.statistics()["replaced"] == 1
        finally:
            os.write(w, b"x")  # let the abandoned worker finish so close() can join it


async def test_outer_task_cancellation_reaches_the_interpreter():
    async with asi.InterpreterPool(1) as pool:
        outer = asyncio.ensure_future(pool.run(workfuncs.spin_forever))
        while pool.statistics()["busy"] == 0:
            await asyncio.sleep(0.005)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert await asyncio.wait_for(pool.run(workfuncs.square, 3), 30) == 9
