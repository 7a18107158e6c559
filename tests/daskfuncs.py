"""Functions the Dask tests run as Dask tasks (in worker threads or in interpreters).

Imported inside interpreters: no asyncio, no dask, no distributed.
"""

from __future__ import annotations

import os


class Oops(Exception):
    """A user exception type: it must come back as itself."""


def where(_=None):
    """(process id, interpreter id) of the code running this task."""
    from aiosubinterp import _core

    return os.getpid(), _core.current_interpreter_id()


def add(a, b=0, *, c=0):
    return a + b + c


def total(values):
    return sum(values)


def pairs(mapping):
    return sorted(mapping.items())


def fail(message):
    raise Oops(message)


def spin(n):
    t = 0
    for i in range(n):
        t += i * i
    return t


def rendezvous(wfd, rfd):
    """Completes only if the peer task runs at the same time (two interpreters at once)."""
    os.write(wfd, b"x")
    return os.read(rfd, 1), where()[1]


def read_fd(fd):
    """Block until the test writes to the pipe."""
    return os.read(fd, 1)


def kwargs_of(**kwargs):
    return sorted(kwargs.items())


def meet(mine, theirs, timeout=30.0):
    """Create the file `mine`, wait for `theirs`: True only if the peer task runs meanwhile.

    For tasks in another process (no shared pipe); polls, bounded by timeout.
    """
    import time

    with open(mine, "w"):
        pass
    deadline = time.monotonic() + timeout
    while not os.path.exists(theirs):
        if time.monotonic() > deadline:
            return False, where()
        time.sleep(0.005)
    return True, where()
