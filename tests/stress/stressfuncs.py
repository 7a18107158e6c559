"""Functions the stress tests run inside worker interpreters.

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

import os
import sys


def ident(x):
    return x


def inc(x):
    return x + 1


def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total


def produce_range(send, start, stop, close=True):
    """Send start..stop-1 with the blocking API (used for the 1M-item run)."""
    send_sync = send.send_sync
    for i in range(start, stop):
        send_sync(i)
    if close:
        send.close()
    return stop - start


def produce_batches(send, n, batch):
    """Send 0..n-1 as tuples of `batch` consecutive ints, then close."""
    send_sync = send.send_sync
    for lo in range(0, n, batch):
        send_sync(tuple(range(lo, min(n, lo + batch))))
    send.close()
    return n


def collect(recv):
    """Receive until the channel ends; return everything, in order."""
    return [x for x in recv]


def collect_count_sum(recv):
    n = s = 0
    for x in recv:
        n += 1
        s += x
    return n, s


def swallow_interrupts():
    """Never returns: catches the KeyboardInterrupt a cancellation injects, again and again."""
    while True:
        try:
            while True:
                pass
        except KeyboardInterrupt:
            continue


def raise_kind(kind):
    if kind == "SystemExit":
        raise SystemExit(3)
    if kind == "KeyboardInterrupt":
        raise KeyboardInterrupt("from the task")
    if kind == "RecursionError":

        def down(n):
            return down(n + 1) + 1

        return down(0)
    if kind == "MemoryError":
        return bytearray(1 << 60)  # a huge allocation: fails, does not take the machine down
    if kind == "GeneratorExit":
        raise GeneratorExit("gen")
    if kind == "StopIteration":
        raise StopIteration(7)
    if kind == "StopAsyncIteration":
        raise StopAsyncIteration
    if kind == "ExceptionGroup":
        raise ExceptionGroup("many", [ValueError("a"), TypeError("b")])
    if kind == "BaseExceptionGroup":
        raise BaseExceptionGroup("base", [KeyboardInterrupt(), ValueError("c")])
    if kind == "ZeroDivisionError":
        return 1 / 0
    if kind == "OSError":
        return os.open("/nonexistent/aiosubinterp", os.O_RDONLY)
    if kind == "UnicodeDecodeError":
        return b"\xff".decode("utf-8")
    if kind == "AssertionError":
        assert False, "asserted"  # noqa: B011
    if kind == "unpicklable":
        raise UnpicklableError()
    if kind == "bad_str":
        raise BadStrError()
    if kind == "chained":
        try:
            raise KeyError("inner")
        except KeyError as exc:
            raise RuntimeError("outer") from exc
    raise ValueError(kind)


class UnpicklableError(Exception):
    def __init__(self):
        super().__init__("cannot be pickled")
        self.lock = __import__("threading").Lock()


class BadStrError(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


def recursion_limit():
    return sys.getrecursionlimit()


def exit_process(code):
    os._exit(code)


def crash_process():
    """Simulates a C-level crash (a segfault) inside a worker interpreter."""
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


def fail_initializer():
    raise SystemExit("initializer gave up")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tagged(i, n):
    spin(n)
    return i


def produce_tagged(send, k, n):
    """Send (k, 0) .. (k, n-1), then close this clone."""
    for s in range(n):
        send.send_sync((k, s))
    send.close()
    return n


def swallow_until(fd):
    """Ignores every interruption until the test writes to fd (a task that will not stop)."""
    os.set_blocking(fd, False)
    while True:
        try:
            while True:
                try:
                    os.read(fd, 1)
                    return "released"
                except BlockingIOError:
                    pass
        except KeyboardInterrupt:
            continue


def swallow_interrupts_not():
    """Spins in Python forever (stops when interrupted)."""
    while True:
        pass
