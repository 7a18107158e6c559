"""Coroutine functions the tests run on a worker interpreter's own event loop.

What belongs here: async functions a pool runs (and the plain function that
returns a coroutine): results, errors and exits raised from a coroutine,
cancellation, how many run at once (probes, rendezvous) and async
initializers. They import asyncio inside the function only: a worker gets
its event loop, and asyncio, when it first runs a coroutine.

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

import os

from workfuncs import STATE, CustomError, fd_readable, interp_id


async def async_add(a, b=0):
    import asyncio

    await asyncio.sleep(0)
    return a + b


async def async_gather_squares(n):
    import asyncio

    async def one(i):
        await asyncio.sleep(0)
        return i * i

    return sum(await asyncio.gather(*(one(i) for i in range(n))))


async def async_raise(msg):
    import asyncio

    await asyncio.sleep(0)
    raise CustomError(msg)


async def async_loop_facts():
    import asyncio

    loop = asyncio.get_running_loop()
    return id(loop), type(loop).__module__, interp_id()


async def async_wait_forever(wfd):
    """Write b"s" once running, wait forever; on cancellation write b"c" and re-raise."""
    import asyncio

    os.write(wfd, b"s")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        os.write(wfd, b"c")
        raise


def returns_coroutine(a, b):
    return async_add(a, b)


_probe_active: dict[str, int] = {}
_probe_peak: dict[str, int] = {}


async def async_probe(key, hold):
    """Count how many probes with this key run at once in this interpreter; return the peak."""
    import asyncio

    _probe_active[key] = _probe_active.get(key, 0) + 1
    _probe_peak[key] = max(_probe_peak.get(key, 0), _probe_active[key])
    try:
        await asyncio.sleep(hold)
    finally:
        _probe_active[key] -= 1
    return _probe_peak[key], interp_id()


async def async_probe_until_readable(key, fd):
    """As async_probe, holding until fd is readable (the test says so) instead of a while."""
    import asyncio

    _probe_active[key] = _probe_active.get(key, 0) + 1
    _probe_peak[key] = max(_probe_peak.get(key, 0), _probe_active[key])
    try:
        while not fd_readable(fd):
            await asyncio.sleep(0.001)
    finally:
        _probe_active[key] -= 1
    return _probe_peak[key], interp_id()


async def async_rendezvous(key, n, limit=20.0):
    """Wait until n coroutines with this key are inside at once (they must run together)."""
    import asyncio
    import time

    _probe_active[key] = _probe_active.get(key, 0) + 1
    deadline = time.monotonic() + limit
    while _probe_active[key] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {_probe_active[key]} of {n} arrived")
        await asyncio.sleep(0.001)
    return interp_id()


async def async_add_when_readable(fd, a, b=0):
    """Wait on this worker's event loop until fd is readable (the test says so), then a + b."""
    import asyncio

    while not fd_readable(fd):
        await asyncio.sleep(0.001)
    return a + b


async def async_sleep_add(a, b, delay):
    import asyncio

    await asyncio.sleep(delay)
    return a + b


async def async_raise_exit(code):
    import asyncio

    await asyncio.sleep(0)
    raise SystemExit(code)


async def async_initializer(value):
    """An async initializer: what it sets is there for every task of the worker."""
    import asyncio

    await asyncio.sleep(0)
    STATE["initialized"] = value
