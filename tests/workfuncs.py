"""Functions the tests run inside worker interpreters.

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


def main_var(name):
    return getattr(sys.modules["__main__"], name, None)


def imported(name):
    return name in sys.modules


def import_module(name):
    import importlib

    importlib.import_module(name)
    return name


def datetime_roundtrip():
    import datetime

    stamp = datetime.datetime(2026, 12, 3, 7, 30, tzinfo=datetime.timezone.utc)
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
    from aiosubinterp._worker import describe_exception

    try:
        raise ValueError("x")
    except ValueError as exc:
        return describe_exception(exc)[0]


def pickle_value(kind):
    import pickle

    value = {"point": Point(1, 2), "list": [1, 2], "exc_type": ValueError,
             "exc": ValueError("x"), "dict": {"a": 1}, "set": {1}}[kind]
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


# -- introspection and coroutines (asyncio imported inside the functions only) --


def current_info():
    import aiosubinterp

    return aiosubinterp.get_current()


def all_ids():
    import aiosubinterp

    return [info.id for info in aiosubinterp.list_all()], aiosubinterp.active_count()


def thread_ident():
    import threading

    return threading.get_ident()


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


async def async_sleep_add(a, b, delay):
    import asyncio

    await asyncio.sleep(delay)
    return a + b


def signal_then_spin(wfd):
    """Write b"s", then spin in bytecode until interrupted; write b"k" on the way out."""
    os.write(wfd, b"s")
    try:
        while True:
            pass
    except KeyboardInterrupt:
        os.write(wfd, b"k")
        raise


async def async_raise_exit(code):
    import asyncio

    await asyncio.sleep(0)
    raise SystemExit(code)
