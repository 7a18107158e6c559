"""Worker-side functions for tests/test_crossing_edge_cases.py.

Importable in a worker: no asyncio at module level.
"""

from __future__ import annotations

import os

from aiosubinterp import _core


def fd_info(fd):
    """(inheritable, fd) of an fd received as a task argument; closes it (the worker owns it)."""
    try:
        return os.get_inheritable(fd), fd
    finally:
        os.close(fd)


def sock_info(sock):
    """(inheritable, fd) of a socket received as a task argument; closes it."""
    with sock:
        return os.get_inheritable(sock.fileno()), sock.fileno()


def give_fd(fd):
    """fd (a number valid in the whole process) as a FileDescriptor: main gets a duplicate."""
    return _core.FileDescriptor(fd)


def send_own_receiver_sync(tx, rx):
    """tx.send_sync() of an item holding rx, an end of tx's own channel: the
    name of what it raised and its message, or "sent"."""
    from aiosubinterp import NotShareableError

    try:
        tx.send_sync(("item", rx), timeout=30)
    except NotShareableError as exc:
        return type(exc).__name__, str(exc)
    return "sent"


class Holder:
    """A picklable object around a value (a channel end inside a pickle crosses natively)."""

    def __init__(self, value):
        self.value = value


def runner_handle():
    """The C handle of the worker running this call (found on its Runner's frame)."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        runner = frame.f_locals.get("self")
        if runner is not None and type(runner).__name__ == "Runner":
            return runner._handle
        frame = frame.f_back
    raise LookupError("no Runner on the stack")


def own_concurrency():
    """_worker_concurrency() with this worker's own handle, on its own thread: allowed."""
    return _core._worker_concurrency(runner_handle())


def live_shares():
    """Share records alive in the process (after releasing what came back here)."""
    return _core.share_stats()[0]
