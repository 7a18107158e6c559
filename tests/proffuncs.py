"""Worker functions for test_profiling: small call trees with known call counts."""

from __future__ import annotations


def leaf(n):
    return sum(i * i for i in range(n))


def branch(n):
    """Calls leaf twice; returns this interpreter's id (the test counts per interpreter)."""
    from aiosubinterp import _core

    leaf(n)
    leaf(n // 2)
    return _core.current_interpreter_id()


def other(n):
    return leaf(n)


def fails(n):
    leaf(n)
    raise ValueError(f"fails({n})")


def profiles_itself(n):
    """Enables a cProfile of its own (ValueError while the interpreter is profiled)."""
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        return leaf(n)
    finally:
        profiler.disable()


_own = None


def own_profiler(on):
    """Keep a cProfile of this interpreter's own on between tasks (on=True), or stop it."""
    global _own
    import cProfile

    if on:
        _own = cProfile.Profile()
        _own.enable()
    else:
        _own.disable()
        _own.create_stats()
        calls = [v[1] for k, v in _own.stats.items() if k[2] == "leaf"]
        _own = None
        return sum(calls)


async def awaits_then_leaf(n):
    import asyncio

    await asyncio.sleep(0)
    return leaf(n)


def signal_then_spin(wfd):
    """Write a byte to wfd (it runs now), then compute until cancelled."""
    import os

    os.write(wfd, b"x")
    while True:
        leaf(10)


class _CountsLookups(type):
    """Counts the lookups of ``work`` on its classes (in each interpreter: its own copy)."""

    lookups = 0

    def __getattribute__(cls, name):
        if name == "work":
            _CountsLookups.lookups += 1
        return super().__getattribute__(name)


class Looked(metaclass=_CountsLookups):
    @staticmethod
    def work(n):
        return n


def lookups():
    """How often this interpreter looked Looked.work up (a worker resolving it included)."""
    return _CountsLookups.lookups
