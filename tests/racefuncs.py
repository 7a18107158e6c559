"""Worker-side functions for tests/test_worker_races.py.

Importable in a worker: no asyncio at module level.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import os
import sys

from aiosubinterp import _core


def hold_gil(flag, wfd):
    """Write b"s" to wfd, set flag[1] = 1, then hold this interpreter's GIL
    until flag[0] == 1.

    Everything after the write runs in C (deque consuming iterators that
    set and then read the shared bytes): no bytecode, so the worker never
    yields its GIL and an injected exception cannot fire, like a long C
    call. flag[1] is set once the GIL is back after the write (os.write
    releases it): from then on the worker holds it.
    """
    mv = memoryview(flag)
    collections.deque(
        itertools.chain(
            map(os.write, [wfd], [b"s"]),
            map(operator.setitem, [mv], [1], [1]),
            iter(functools.partial(operator.getitem, mv, 0), 1),
        ),
        maxlen=0,
    )
    return "released"


def hold_gil_then_spin(flag, wfd):
    """hold_gil(), then spin in bytecode (where an injected exception fires)."""
    hold_gil(flag, wfd)
    while True:
        pass


def sum_forever(wfd):
    """Write b"s" to wfd, then sum(range(10**11)) in C: hours, never yielding the GIL."""
    return sum(itertools.chain(map(os.write, [wfd], [b"s"]), range(10**11)))


def hold_gil_then_sleep(flag, wfd):
    """hold_gil(), then return a coroutine that sleeps until cancelled.

    The switch interval is raised first, so that between the C call and the
    loop's epoll this interpreter never yields its GIL on request: a pending
    interruption gets the GIL exactly while the loop sleeps in epoll.
    """
    sys.setswitchinterval(1000.0)
    hold_gil(flag, wfd)
    return _sleep_until_cancelled(wfd)


async def _sleep_until_cancelled(wfd):
    import asyncio

    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        os.write(wfd, b"c")
        raise
    finally:
        sys.setswitchinterval(0.005)


async def async_interp_id():
    return _core.current_interpreter_id()


async def async_sleep_marked(wfd):
    """Sleep 100 s; on cancellation write b"c" and re-raise."""
    import asyncio

    try:
        await asyncio.sleep(100)
    except asyncio.CancelledError:
        os.write(wfd, b"c")
        raise


def wait_then_return_carriers(sfd, rfd):
    """Write b"s" to sfd, wait for a byte on rfd (an interruption meanwhile is
    ignored), then return what holds resources while it crosses: an fd
    duplicate and a zero-copy share."""
    os.write(sfd, b"s")
    try:
        os.read(rfd, 1)
    except KeyboardInterrupt:
        pass
    return _core.FileDescriptor(rfd), bytes(_core.SHARE_THRESHOLD)


class RefusedInWorkers:
    """A sys.path entry that pickles in main and cannot be rebuilt in a worker."""

    def __reduce__(self):
        return _rebuild_refused, ()


def _rebuild_refused():
    if not _core.is_main_interpreter():
        raise LookupError("RefusedInWorkers cannot be rebuilt in a worker")
    return RefusedInWorkers()


class _BufferThatWaits:
    """Exports a small buffer; its second export (the one encode_share takes)
    writes b"b" to wfd and waits for lock: the GIL is released meanwhile."""

    def __init__(self, lock, wfd):
        self.lock = lock
        self.wfd = wfd
        self.exports = 0
        self.data = bytearray(b"0123456789")

    def __buffer__(self, flags):
        self.exports += 1
        if self.exports == 2:
            os.write(self.wfd, b"b")
            self.lock.acquire()
            self.lock.release()
        return memoryview(self.data)


def share_from_a_thread(lock, wfd):
    """Start a thread that shares a buffer whose export waits for lock (held by
    main); the thread writes b"ok" or b"refused" to wfd. Returns at once."""
    import threading

    def body():
        try:
            _core.dumps(_core.share(_BufferThatWaits(lock, wfd)))
            out = b"ok"
        except ValueError:
            out = b"refused"
        os.write(wfd, out)

    threading.Thread(target=body).start()
