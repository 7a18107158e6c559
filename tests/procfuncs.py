"""Functions the backend-parity and process-pool tests run in workers (interpreters or processes).

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

import os


def whoami():
    """(process id, interpreter id): which worker ran this."""
    from aiosubinterp import _core

    return os.getpid(), _core.current_interpreter_id()


def read_close(fd, n=1):
    """Block until the test writes to the pipe; the fd was handed over (FileDescriptor)."""
    try:
        return os.read(fd, n)
    finally:
        os.close(fd)


def write_close(fd, data):
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def write_then_read(wfd, rfd):
    """Rendezvous: only completes if the peer task runs at the same time."""
    try:
        os.write(wfd, b"x")
        return os.read(rfd, 1)
    finally:
        os.close(wfd)
        os.close(rfd)


def read_ignoring_interrupts(fd, started):
    """Say b"s" on started, then block reading fd, swallowing every KeyboardInterrupt."""
    told = False
    try:
        while True:
            try:
                if not told:
                    os.write(started, b"s")
                    told = True
                return os.read(fd, 1)
            except KeyboardInterrupt:
                continue
    finally:
        os.close(fd)
        os.close(started)


def exit_now(code):
    os._exit(code)


def kill_self(signum):
    import signal

    os.kill(os.getpid(), signal.Signals(signum))


def numpy_total(n):
    """numpy refuses subinterpreters: this fails in an interpreter, works in a process."""
    import numpy as np

    return int(np.arange(n, dtype=np.int64).sum())


def pid():
    return os.getpid()


def nbytes(data):
    return len(data), bytes(data[:4]), bytes(data[-4:])


def make_bytes(n):
    return b"\x01" * n


def socket_echo(sock):
    """Read a line from a handed-over socket, send it back upper-cased, close it."""
    with sock:
        data = sock.recv(100)
        sock.sendall(data.upper())
        return type(sock).__name__


async def async_wait_forever(wfd):
    """Write b"s" once running, wait forever; on cancellation write b"c", close, re-raise."""
    import asyncio

    os.write(wfd, b"s")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        os.write(wfd, b"c")
        raise
    finally:
        os.close(wfd)


async def async_add(a, b):
    import asyncio

    await asyncio.sleep(0)
    return a + b


def keep_end(end):
    """Keep a channel end in module state past the task."""
    KEPT.append(end)
    return True


def close_kept():
    while KEPT:
        KEPT.pop().close()
    return True


KEPT: list = []


def kept_stats():
    """(open senders, open receivers) as the first kept end sees them."""
    stats = KEPT[0].statistics()
    return stats.open_send_channels, stats.open_receive_channels


def send_then_return(send, items):
    """Send items and return without closing: the end dies with the task."""
    for item in items:
        send.send_sync(item, timeout=30)
    return len(items)


def send_end_back(send):
    """Return the end itself: the caller gets a usable end of the same channel."""
    return send


def channel_stats(recv):
    stats = recv.statistics()
    return stats.open_send_channels, stats.open_receive_channels, recv.closed


def clone_and_send(send, value):
    other = send.clone()
    send.close()
    other.send_sync(value, timeout=30)
    other.close()
    return send.closed, other.closed


def end_protocol(send, recv):
    """What every end does the same way, here (an interpreter's end or a process's proxy):
    repr, clone, `with`, close, iteration; [open repr, closed repr, clone refused, items]."""
    import re

    import aiosubinterp

    out: list[object] = [re.search(r"SendChannel channel=\d+ open>$", repr(send)) is not None]
    with send.clone() as extra:
        extra.send_sync("a", timeout=30)
    send.send_sync("b", timeout=30)
    send.close()  # the last send end: recv ends after the items
    out.append(repr(send).endswith(" closed>"))
    try:
        send.clone()
    except aiosubinterp.ChannelClosedError:
        out.append("clone refused")
    out.append(list(recv))
    return out


async def drain_async(recv):
    """`async with` and `async for` over a receive end in a worker's coroutine."""
    async with recv:
        items = [x async for x in recv]
    return items, recv.closed


def open_local_channel():
    import aiosubinterp

    send, _recv = aiosubinterp.open_channel(1)
    return send


def log_from_process(text: str) -> int:
    """Log a warning (logger logtest.proc) from the worker process; its pid."""
    import logging

    logging.getLogger("logtest.proc").warning(text)
    return os.getpid()
