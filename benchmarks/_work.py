"""Functions the benchmarks run in workers: interpreters, threads and processes.

Functions cross to an interpreter by reference (module and qualified name),
so they live here, at module level, in a module every worker can import.
This module is imported *inside* subinterpreters: it must not import asyncio
or uvloop (nor anything that pulls in ``_datetime``); stdlib only. The
``async def`` twins exist for aiomultiprocess, whose pool only runs
coroutine functions; defining them needs no asyncio import.

The first task of a cold start imports this module in the worker: it
imports only ``time`` (a builtin module) at the top, and ``os`` and
``threading`` where they are used, so that bench_coldstart and bench_startup
time the pool's start-up, not this module's imports.
"""

import time

__all__ = [
    "anap",
    "anoop",
    "aspin",
    "expected_spin",
    "first_task",
    "io_then_spin",
    "nap",
    "noop",
    "spin",
    "spin_for",
    "warm_task",
]

# Input of first_task(): enough text that the regex and the Counter do work.
FIRST_TASK_TEXT = "the quick brown fox jumps over the lazy dog " * 50


def noop(x):
    """The trivial task: return the argument."""
    return x


async def anoop(x):
    return x


def spin(n):
    """CPU-bound pure Python: sum of i*i for i < n (holds the GIL throughout)."""
    total = 0
    for i in range(n):
        total += i * i
    return total


async def aspin(n):
    return spin(n)


def expected_spin(n):
    """What spin(n) returns, in closed form (to check results)."""
    return (n - 1) * n * (2 * n - 1) // 6


def spin_for(seconds):
    """Busy-loop on pure-Python arithmetic for `seconds` of wall time.

    Returns the number of 1000-iteration chunks done: under a shared GIL the
    same wall time buys less work, which shows in that count.
    """
    deadline = time.perf_counter() + seconds
    chunks = 0
    total = 0
    while time.perf_counter() < deadline:
        for i in range(1000):
            total += i * i
        chunks += 1
    return chunks


def nap(seconds):
    """Sleep (GIL released) and say where we ran: (pid, thread id)."""
    import os
    import threading

    time.sleep(seconds)
    return (os.getpid(), threading.get_ident())


async def anap(seconds):
    return nap(seconds)


def first_task(text):
    """A small task that needs json, re and collections (what preload= can import ahead)."""
    import collections
    import json
    import re

    words = re.findall(r"\w+", text)
    return json.dumps(collections.Counter(words).most_common(3))


def warm_task(seconds, text):
    """first_task() then a nap, so that N concurrent calls land on N different workers."""
    import os
    import threading

    out = first_task(text)
    time.sleep(seconds)
    return (os.getpid(), threading.get_ident(), out)


async def io_then_spin(delay, n):
    """An I/O-bound task with a CPU part: wait `delay` seconds, then spin(n)."""
    import asyncio  # inside: this module is imported in interpreters that never run a loop

    await asyncio.sleep(delay)
    return spin(n)
