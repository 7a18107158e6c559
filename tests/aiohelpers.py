"""Helpers for async tests (loop side only)."""

from __future__ import annotations

import asyncio
import os
import time


async def read_byte(fd: int, timeout: float = 30) -> bytes:
    """Wait (on the loop, no thread) until fd is readable, then read one byte."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(os.read(fd, 1))

    loop.add_reader(fd, ready)
    try:
        return await asyncio.wait_for(fut, timeout)
    finally:
        loop.remove_reader(fd)


async def until(check, timeout: float = 30.0) -> None:
    """Wait on the loop until check() is true; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def collect_until(check, timeout: float = 30.0) -> None:
    """Collect garbage until check() is true (an object's finalizer ran).

    A pool's helper threads hold it for a moment after its last result can
    arrive (the one that started the workers, until it returns; a process
    worker's reader, while it hands over a message): on a free-threaded
    build truly in parallel with the test.
    """
    import gc

    deadline = time.monotonic() + timeout
    gc.collect()
    while not check():
        assert time.monotonic() < deadline, f"not collected within {timeout} s"
        time.sleep(0.01)
        gc.collect()
