"""General functions the tests run inside workers, interpreters and processes alike.

What belongs here: the plain building blocks most tests share (echo, add,
square, spin, blocking on a pipe), the classes and errors that cross
(Point, CustomError), raising, per-worker state and initializers,
introspection (which interpreter, which thread), and the functions a test
interrupts. Coroutines run on a worker's event loop are in asyncfuncs.py,
the stdlib matrix's exercises in stdlibfuncs.py; a test file's own helpers
in its `<topic>funcs.py`.

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

import os
import sys

STATE: dict[str, object] = {}


def echo(*args, **kwargs):
    if kwargs:
        return args, kwargs
    return args[0] if len(args) == 1 else args


def add(a, b=0, *, c=0):
    return a + b + c


def square(x):
    return x * x


def interp_id():
    from aiosubinterp import _core

    return _core.current_interpreter_id()


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def spin_forever():
    while True:
        pass


def fd_readable(fd):
    """Whether fd has something to read (or its write end is closed), without waiting."""
    import select

    return bool(select.select([fd], [], [], 0)[0])


def busy_until_readable(fd, fn, *args):
    """Compute (in bytecode, holding this worker's CPU) until fd is readable, then fn(*args).

    The test makes fd readable (writes to the pipe, or closes its write end)
    once it has seen what must happen while the work is still in flight.
    """
    while not fd_readable(fd):
        spin(10_000)
    return fn(*args)


def read_fd(fd, n=1):
    """Block in C (os.read) until the test writes to the pipe."""
    return os.read(fd, n)


def write_then_read(wfd, rfd):
    """Rendezvous: only completes if the peer task runs at the same time."""
    os.write(wfd, b"x")
    return os.read(rfd, 1)


def write_fd(fd, data):
    return os.write(fd, data)


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def norm2(self):
        return self.x * self.x + self.y * self.y


class CustomError(Exception):
    pass


class NeedsTwoArgs(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def raise_custom(msg):
    raise CustomError(msg)


def raise_needs_two():
    raise NeedsTwoArgs(1, 2)


def raise_exit(code):
    raise SystemExit(code)


def raise_keyboard():
    raise KeyboardInterrupt


def make_generator():
    return (i for i in range(3))


def set_state(key, value):
    STATE[key] = value


def get_state(key):
    return STATE.get(key)


def fail_init():
    raise RuntimeError("initializer says no")


def init_after_read(fd):
    """An initializer that waits for one byte on the pipe; b"f" makes it fail.

    Each byte the test writes lets one interpreter's start go on: the test
    decides which starts are over, and how.
    """
    if os.read(fd, 1) == b"f":
        raise RuntimeError("initializer says no, this one")


def fail_init_after_read(fd):
    """An initializer that fails once the test writes to the pipe."""
    os.read(fd, 1)
    raise RuntimeError("initializer says no, late")


def main_var(name):
    return getattr(sys.modules["__main__"], name, None)


def imported(name):
    return name in sys.modules


def import_module(name):
    import importlib

    importlib.import_module(name)
    return name


def refusal_origin(name):
    """(the module the ImportError names, the file of the innermost frame that raised it)."""
    import importlib
    import traceback

    try:
        importlib.import_module(name)
    except ImportError as exc:
        return exc.name, traceback.extract_tb(exc.__traceback__)[-1].filename
    return None


def datetime_roundtrip():
    import datetime

    stamp = datetime.datetime(2026, 12, 3, 7, 30, tzinfo=datetime.UTC)
    return stamp.isoformat(), datetime.datetime.__module__


def raise_import_error(name):
    raise ImportError("nope", name=name)


def format_tb():
    import traceback

    try:
        raise ValueError("x")
    except ValueError as exc:
        return "".join(traceback.format_exception(exc))


def pickle_exc():
    import pickle

    try:
        raise ValueError("x")
    except ValueError as exc:
        return len(pickle.dumps(exc, protocol=5))


def describe_only():
    from aiosubinterp._inside.worker import describe_exception

    try:
        raise ValueError("x")
    except ValueError as exc:
        return describe_exception(exc)[0]


def pickle_value(kind):
    import pickle

    value = {
        "point": Point(1, 2),
        "list": [1, 2],
        "exc_type": ValueError,
        "exc": ValueError("x"),
        "dict": {"a": 1},
        "set": {1},
    }[kind]
    return len(pickle.dumps(value, protocol=5))


def run_asyncio():
    import asyncio

    async def main():
        await asyncio.sleep(0)
        return "ran"

    return asyncio.run(main())


def make_pool():
    import aiosubinterp

    return aiosubinterp.InterpreterPool(1)


# -- introspection --------------------------------------------------------------


def current_info():
    import aiosubinterp

    return aiosubinterp.get_current()


def all_ids():
    import aiosubinterp

    return [info.id for info in aiosubinterp.list_all()], aiosubinterp.active_count()


def thread_ident():
    import threading

    return threading.get_ident()


def native_thread_id():
    import threading

    return threading.get_native_id()


# -- interrupting a worker, module state ---------------------------------------


def signal_then_spin(wfd):
    """Write b"s", then spin in bytecode until interrupted; write b"k" on the way out.

    The write is inside the try: an interruption sent as soon as b"s" is read
    may fire right as os.write returns, before the loop starts.
    """
    try:
        os.write(wfd, b"s")
        while True:
            pass
    except KeyboardInterrupt:
        os.write(wfd, b"k")
        raise


def swallow_once_then_spin():
    """Catches the first KeyboardInterrupt (as CPython does when one lands in an
    importlib callback during an import), then spins until interrupted again."""
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass
    while True:
        pass


class _WritesWhenFreed:
    def __init__(self, fd):
        self.fd = fd

    def __del__(self, _write=os.write):
        _write(self.fd, b"x")


def keep_in_module_state(fd):
    """Keep an object in this module's globals; it writes one byte to fd when freed."""
    global KEPT
    KEPT = _WritesWhenFreed(fd)


def gil_enabled():
    """sys._is_gil_enabled() in this interpreter (3.13+; True before)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else check()
