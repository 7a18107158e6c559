"""Harness shared by the ``benchmarks/bench_*.py`` scripts (not a benchmark itself).

Every benchmark script is its own parent and its own children: the parent
runs ``python bench_x.py --contender NAME --params JSON`` once per contender
and round, in a fresh process each time, and reads back one JSON line that
starts with ``RESULT_MARK``. Rounds visit the contenders in a rotated order,
so a burst of outside load does not always hit the same one.

What lives here: the command line, spawning and reading children, statistics
(medians, p99), CPU accounting of the process tree and of the whole machine
(to tell how noisy a run was), memory probes, the event-loop choice, a
uniform "runner" over the contenders (aiosubinterp's pool and executor,
to_thread, process pools, anyio.to_interpreter, aiomultiprocess, the
interpreters-pep-734 executor, and on 3.14+ the standard library's
InterpreterPoolExecutor and concurrent.interpreters, and aiointerpreters),
the skipping of contenders a Python does not have, and the markdown table
printer.

Worker code is in ``_work.py``; this module imports asyncio and is never
imported inside an interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import sysconfig
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import _work

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULT_MARK = "@@bench-result "
LOOPS = ("asyncio", "uvloop")
WORKERS = 2

# --------------------------------------------------------------------- statistics
#
# One vocabulary for every table: the median (p50) as the value, and a spread
# beside it: p99 for latencies (many samples), min/max for rates (one per
# batch or round), p25/p75 where samples are few fresh processes. Warm-up
# calls never reach these functions: each contender runs and drops them first.


def percentile(values: Sequence[float], q: int) -> float:
    """The q-th percentile (q in 0..100), interpolating between closest ranks (numpy's "linear")."""
    if not values:
        return math.nan
    if len(values) == 1 or q <= 0:  # statistics.quantiles needs two points before 3.13
        return float(min(values))
    if q >= 100:
        return float(max(values))
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarize(values: Sequence[float]) -> dict[str, float]:
    """p50, p99, mean, stdev, min and max of a contender's samples (NaN when there are none)."""
    if not values:
        return {"n": 0, "p50": math.nan, "p99": math.nan, "mean": math.nan,
                "stdev": math.nan, "min": math.nan, "max": math.nan}
    return {
        "n": len(values),
        "p50": median(values),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b


# ------------------------------------------------------------- CPU and memory

_TICK = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime+stime, cutime+cstime) of a process in clock ticks; (0, 0) if it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return 0, 0
    fields = text[text.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def descendants(pid: int | None = None) -> list[int]:
    """All live descendants of pid (default: this process), via /proc/<pid>/task/*/children."""
    root = os.getpid() if pid is None else pid
    found: list[int] = []
    todo = [root]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{p}/task/{tid}/children") or ""
            for child in text.split():
                c = int(child)
                if c not in found:
                    found.append(c)
                    todo.append(c)
    return found


def tree_cpu() -> float:
    """CPU seconds used by this process (all threads), its reaped children, and live descendants."""
    _, reaped = _cpu_ticks(os.getpid())
    total = time.process_time() + reaped / _TICK
    for pid in descendants():
        own, theirs = _cpu_ticks(pid)
        total += (own + theirs) / _TICK
    return total


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot, from /proc/stat."""
    text = _read("/proc/stat") or "cpu 0 0 0 0"
    values = [int(v) for v in text.splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def ncpu() -> int:
    return os.cpu_count() or 1


class Meter:
    """Wall time, CPU time of our process tree, and what the rest of the machine used.

    ``other_cores`` is the number of cores kept busy by processes outside our
    tree during the window (/proc/stat busy time minus ours): the noise from
    whatever else runs on the machine.
    """

    def __enter__(self) -> Meter:
        self._m0 = _machine_ticks()
        self._c0 = tree_cpu()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        self.cpu = tree_cpu() - self._c0
        m1 = _machine_ticks()
        busy, total = m1[0] - self._m0[0], m1[1] - self._m0[1]
        machine_cores = ncpu() * busy / total if total > 0 else math.nan
        self.cpu_per_wall = self.cpu / self.wall if self.wall > 0 else math.nan
        self.other_cores = max(0.0, machine_cores - self.cpu_per_wall)

    def result(self) -> dict[str, float]:
        return {"wall": self.wall, "cpu": self.cpu, "cpu_per_wall": self.cpu_per_wall,
                "other_cores": self.other_cores}


def _status_kib(pid: int | str, key: str, name: str = "status") -> int:
    text = _read(f"/proc/{pid}/{name}") or ""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size (VmRSS) in KiB."""
    return _status_kib(pid, "VmRSS")


def peak_rss_kib(pid: int | str = "self") -> int:
    """Peak resident set size (VmHWM) in KiB, since start or clear_peak_rss()."""
    return _status_kib(pid, "VmHWM")


def clear_peak_rss() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux 4.0+); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def pss_kib(pid: int | str = "self") -> int:
    """Proportional set size (shared pages divided among sharers) in KiB."""
    return _status_kib(pid, "Pss", "smaps_rollup")


def tree_memory() -> dict[str, int]:
    """RSS and PSS (KiB) of this process and, separately, of all its live descendants."""
    kids = descendants()
    return {
        "rss_self": rss_kib(),
        "pss_self": pss_kib(),
        "rss_children": sum(rss_kib(p) for p in kids),
        "pss_children": sum(pss_kib(p) for p in kids),
        "children": len(kids),
    }


# ---------------------------------------------------------------- event loops


def run_async(main: Callable[[], Awaitable[Any]], loop: str, *, anyio_runner: bool = False) -> Any:
    """Run main() on a fresh event loop of the chosen kind (asyncio.run, or anyio.run)."""
    if anyio_runner:
        import anyio

        options = {"use_uvloop": True} if loop == "uvloop" else {}
        return anyio.run(main, backend="asyncio", backend_options=options)
    factory = None
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    return asyncio.run(main(), loop_factory=factory)  # type: ignore[arg-type]


# -------------------------------------------------------------------- runners

POOL_KINDS = (
    "aiosubinterp",
    "aiosubinterp-executor",
    "to_thread",
    "threadpool",
    "procpool-fork",
    "procpool-forkserver",
    "anyio.to_interpreter",
    "anyio.to_interpreter-ungated",
    "aiomultiprocess",
    "pep734-executor",
    "stdlib-executor",
    "stdlib-interpreters",
    "aiointerpreters",
)

# A free-threaded build (PEP 703, "3.13t"): threads run Python code in
# parallel, so the thread contenders are the ones to beat there.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
# Run by default only on such a build (with a GIL, threadpool is to_thread);
# --only runs them anywhere.
FREE_THREADED_ONLY = ("threadpool",)


def default_selection(names: Sequence[str]) -> list[str]:
    """The contenders run without --only: `names`, less those of free-threaded builds
    when this is not one."""
    return [n for n in names if FREE_THREADED or n not in FREE_THREADED_ONLY]


# Contenders that exist only on some Pythons: kind -> a function returning why
# it cannot run here (None when it can). The parent skips those, with the reason.


def _needs_stdlib_module(module: str, attr: str | None = None) -> Callable[[], str | None]:
    def reason() -> str | None:
        import importlib

        what = f"{module}.{attr}" if attr else module
        try:
            mod = importlib.import_module(module)
        except ImportError:
            mod = None
        if mod is None or (attr is not None and not hasattr(mod, attr)):
            return (f"{what} is not in the standard library of Python "
                    f"{platform.python_version()} (it is new in 3.14)")
        return None

    return reason


def _needs_aiointerpreters() -> str | None:
    import importlib.util

    if sys.version_info < (3, 14):
        return (f"aiointerpreters needs Python 3.14+ (concurrent.interpreters); this is "
                f"{platform.python_version()}")
    if importlib.util.find_spec("aiointerpreters") is None:
        return (f"aiointerpreters is not installed for {sys.executable} "
                "(pip install -e '.[bench]' installs it on 3.14+)")
    return None


def _needs_pep734_backport() -> str | None:
    import importlib.util

    if sys.version_info >= (3, 14):
        return ("interpreters-pep-734 backports 3.14's executor to 3.13 and fails on "
                f"{platform.python_version()}; the stdlib-executor row is 3.14's own")
    if importlib.util.find_spec("interpreters_backport") is None:
        return (f"interpreters-pep-734 is not installed for {sys.executable} "
                "(pip install -e '.[bench]' installs it on 3.13)")
    return None


AVAILABILITY: dict[str, Callable[[], str | None]] = {
    "pep734-executor": _needs_pep734_backport,
    "stdlib-executor": _needs_stdlib_module("concurrent.futures", "InterpreterPoolExecutor"),
    "stdlib-interpreters": _needs_stdlib_module("concurrent.interpreters"),
    "aiointerpreters": _needs_aiointerpreters,
}


def unavailable(kind: str) -> str | None:
    """Why contender `kind` cannot run on this Python, or None if it can."""
    check = AVAILABILITY.get(kind)
    return check() if check is not None else None


@dataclasses.dataclass
class Runner:
    """One contender's way of running fn(*args) on a worker, seen from the event loop.

    ``run(fn, *args)`` is what a user awaits for one call; ``submit(fn, *args)``
    returns an awaitable suited to ``asyncio.gather`` of many calls.
    """

    kind: str
    run: Callable[..., Awaitable[Any]]
    submit: Callable[..., Awaitable[Any]]
    info: str = ""


def needs_anyio_runner(kind: str) -> bool:
    return kind.startswith("anyio")


@contextlib.asynccontextmanager
async def open_runner(kind: str, loop: str, *, workers: int = WORKERS,
                      preload: Sequence[str] = (), warm: bool = True) -> AsyncIterator[Runner]:
    """Start `workers` workers of the given kind; with warm=True, make each run one task first."""
    async with _start(kind, loop, workers, tuple(preload)) as runner:
        if warm:
            await _warm(runner, workers)
        yield runner


def _executor(kind: str, workers: int, preload: tuple[str, ...]
              ) -> tuple[Any, Callable[..., Any] | None, str, Callable[[], None]]:
    """A concurrent.futures contender: (executor, wrapper of each call or None, info, cleanup)."""
    import concurrent.futures

    if kind == "aiosubinterp-executor":
        import aiosubinterp

        executor = aiosubinterp.InterpreterPoolExecutor(max_workers=workers, preload=preload)
        return executor, None, f"InterpreterPoolExecutor({workers})", lambda: None
    if kind == "threadpool":
        # Plain threads, the free-threaded build's own answer.
        return (concurrent.futures.ThreadPoolExecutor(max_workers=workers), None,
                f"concurrent.futures.ThreadPoolExecutor({workers})", lambda: None)
    if kind == "pep734-executor":
        # interpreters-pep-734 (PyPI), the backport of CPython 3.14's
        # InterpreterPoolExecutor: threads that each drive an interpreter.
        from interpreters_backport.concurrent.futures import InterpreterPoolExecutor

        return (InterpreterPoolExecutor(max_workers=workers), None,
                f"interpreters-pep-734 {_package_version('interpreters-pep-734')} "
                f"InterpreterPoolExecutor({workers})", lambda: None)
    if kind == "stdlib-executor":
        # CPython 3.14's own, awaited as the asyncio documentation shows.
        return (concurrent.futures.InterpreterPoolExecutor(max_workers=workers), None,
                f"concurrent.futures.InterpreterPoolExecutor({workers}) "
                f"(Python {platform.python_version()})", lambda: None)
    if kind == "stdlib-interpreters":
        # concurrent.interpreters (3.14+) by hand: a ThreadPoolExecutor whose
        # every thread creates one interpreter (on first use) and runs each of
        # its calls there with interp.call(fn, *args).
        import concurrent.interpreters
        import threading

        local = threading.local()
        made: list[Any] = []
        made_lock = threading.Lock()

        def in_interp(fn: Callable[..., Any], *args: Any) -> Any:
            interp = getattr(local, "interp", None)
            if interp is None:
                interp = local.interp = concurrent.interpreters.create()
                with made_lock:
                    made.append(interp)
            return interp.call(fn, *args)

        def close() -> None:
            for interp in made:
                interp.close()

        return (concurrent.futures.ThreadPoolExecutor(max_workers=workers), in_interp,
                f"concurrent.interpreters: ThreadPoolExecutor({workers}), one interpreter per "
                "thread made on its first call, interp.call(fn, *args)", close)
    if kind.startswith("procpool-"):
        import multiprocessing

        method = kind.split("-", 1)[1]
        executor = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context(method))
        return executor, None, f"ProcessPoolExecutor({workers}, {method})", lambda: None
    raise ValueError(f"unknown contender kind {kind!r}")


@contextlib.asynccontextmanager
async def _start(kind: str, loop: str, workers: int,
                 preload: tuple[str, ...]) -> AsyncIterator[Runner]:
    """The contenders, one branch each (the concurrent.futures executors in _executor)."""
    if kind == "aiosubinterp":
        import aiosubinterp

        async with aiosubinterp.InterpreterPool(size=workers, preload=preload) as pool:
            await pool.wait_ready()  # async with returns once the first one is ready
            yield Runner(kind, pool.run, pool.submit, f"InterpreterPool(size={workers})")
    elif kind == "aiosubinterp-processes":
        import aiosubinterp

        async with aiosubinterp.ProcessPool(size=workers, preload=preload) as ppool:
            await ppool.wait_ready()  # async with returns once the first one is ready
            yield Runner(kind, ppool.run, ppool.submit, f"ProcessPool(size={workers})")
    elif kind == "to_thread":
        import concurrent.futures

        ev = asyncio.get_running_loop()
        ev.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=workers))
        yield Runner(kind, asyncio.to_thread, asyncio.to_thread,
                     f"default executor = ThreadPoolExecutor({workers})")
    elif kind == "aiointerpreters":
        # aiointerpreters (PyPI, 3.14+): Runner(workers=N).start() makes N
        # threads that each create an interpreter and serve a shared queue.
        from aiointerpreters.runner import Runner as AioRunner

        with AioRunner(workers=workers).start() as aio:
            yield Runner(kind, aio.run, aio.run,
                         f"aiointerpreters {_package_version('aiointerpreters')} "
                         f"Runner(workers={workers}).start(), await runner.run(fn, *args)")
    elif kind in ("anyio.to_interpreter", "anyio.to_interpreter-ungated"):
        import anyio
        import anyio.to_interpreter

        limiter = anyio.CapacityLimiter(workers)

        def call(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
            return anyio.to_interpreter.run_sync(fn, *args, limiter=limiter)

        # run_sync() creates a new interpreter (on the loop thread) for every
        # call that finds no idle one; its limiter only bounds the threads. So
        # N calls in flight make N interpreters. A user keeps it to `workers`
        # interpreters by gating the calls, as done here (not in -ungated).
        gate = asyncio.Semaphore(workers)

        async def gated(fn: Callable[..., Any], *args: Any) -> Any:
            async with gate:
                return await anyio.to_interpreter.run_sync(fn, *args, limiter=limiter)

        ungated = kind.endswith("-ungated")
        yield Runner(kind, call, call if ungated else gated,
                     f"anyio {_package_version('anyio')} to_interpreter.run_sync, "
                     f"CapacityLimiter({workers}), anyio.run(backend='asyncio')"
                     + ("" if ungated else ", concurrent calls gated by a "
                                           f"Semaphore({workers})"))
    elif kind == "aiomultiprocess":
        import aiomultiprocess

        init = None
        if loop == "uvloop":
            import uvloop

            init = uvloop.new_event_loop
        async with aiomultiprocess.Pool(processes=workers, loop_initializer=init) as mpool:

            def apply(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
                # aiomultiprocess runs coroutine functions only: use fn's async twin.
                return mpool.apply(getattr(_work, "a" + fn.__name__), args)

            yield Runner(kind, apply, apply, f"aiomultiprocess.Pool({workers}) (spawn), "
                         "async twins of the functions")
    else:
        # A concurrent.futures executor awaited through loop.run_in_executor,
        # as a user of the executor API would.
        executor, wrapper, info, cleanup = _executor(kind, workers, preload)
        ev = asyncio.get_running_loop()
        if wrapper is None:
            def in_executor(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
                return ev.run_in_executor(executor, fn, *args)
        else:
            def in_executor(fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
                return ev.run_in_executor(executor, wrapper, fn, *args)
        try:
            yield Runner(kind, in_executor, in_executor, info + ", loop.run_in_executor")
        finally:
            executor.shutdown(wait=True)
            cleanup()


async def _warm(runner: Runner, workers: int) -> None:
    """Make every worker run a task (start-up and imports are then out of the way)."""
    await asyncio.gather(*(runner.submit(_work.nap, 0.05) for _ in range(workers)))


def pool_module() -> Any:
    """aiosubinterp's private pool module, which bench_coldstart instruments.

    The one import of a private module of the package in benchmarks/: a
    rename of the module changes this line only.
    """
    from aiosubinterp._engine import pool as _pool

    return _pool


# ------------------------------------------------------------------ measuring


def time_batches(count: int, batch: Callable[[], list[Any]],
                 check: Callable[[list[Any]], None]) -> list[Meter]:
    """Run batch() `count` times, each under a Meter; check() its results outside the timing."""
    meters = []
    for _ in range(count):
        with Meter() as meter:
            results = batch()
        check(results)
        meters.append(meter)
    return meters


async def time_batches_async(count: int, batch: Callable[[], Awaitable[list[Any]]],
                             check: Callable[[list[Any]], None]) -> list[Meter]:
    """time_batches() for a batch that is awaited (a gather of submitted tasks)."""
    meters = []
    for _ in range(count):
        with Meter() as meter:
            results = await batch()
        check(results)
        meters.append(meter)
    return meters


def batch_result(meters: list[Meter], tasks: int, info: str, **extra: Any) -> dict[str, Any]:
    """A child's result for timed batches of `tasks` tasks: wall times, rates, load."""
    return {"wall": [m.wall for m in meters], "rate": [tasks / m.wall for m in meters],
            "tasks": tasks, "info": info,
            "cpu_per_wall": median([m.cpu_per_wall for m in meters]),
            "other_cores": median([m.other_cores for m in meters]), **extra}


async def time_calls(call: Callable[..., Awaitable[Any]], n: int,
                     warmup: int) -> tuple[list[float], Meter]:
    """`warmup` untimed awaits of call(noop, i), then `n` awaits each timed: (µs, Meter).

    The loop is kept bare (local names, integer clock) since its own cost is
    part of every sample.
    """
    noop = _work.noop
    for i in range(warmup):
        await call(noop, i)
    samples = [0] * n
    wrong = 0
    clock = time.perf_counter_ns
    with Meter() as meter:
        for i in range(n):
            t0 = clock()
            r = await call(noop, i)
            samples[i] = clock() - t0
            if r != i:
                wrong += 1
    if wrong:
        raise AssertionError(f"{wrong} of {n} calls of noop(i) returned a wrong result")
    return [s / 1000 for s in samples], meter


# CPU-bound batches of _work.spin(n) (bench_cpu_scaling, bench_dask).


def calibrate_spin(params: dict[str, Any]) -> dict[str, Any]:
    """Set params['n'] so that spin(n) takes params['task_seconds'] in this process."""
    probe = 200_000
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        _work.spin(probe)
        best = min(best, time.perf_counter() - t0)
    params["n"] = max(1000, int(probe * params["task_seconds"] / best))
    return params


def check_spin(n: int) -> Callable[[list[Any]], None]:
    """A check for time_batches(): every result is spin(n)'s."""
    want = _work.expected_spin(n)

    def check(results: list[Any]) -> None:
        bad = sum(1 for r in results if r != want)
        if bad:
            raise AssertionError(f"{bad} of {len(results)} spin({n}) results are wrong")

    return check


def serial_spin(info: str) -> Callable[[dict[str, Any], str], dict[str, Any]]:
    """The serial baseline: params['batches'] batches of params['tasks'] spin(n) in one process."""

    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        n, tasks = params["n"], params["tasks"]
        _work.spin(n // 10)
        meters = time_batches(params["batches"], lambda: [_work.spin(n) for _ in range(tasks)],
                              check_spin(n))
        return batch_result(meters, tasks, info)

    return run


# ------------------------------------------------------------------ reporting


@dataclasses.dataclass
class Target:
    """One target, measured: ``measured op limit`` passes."""

    what: str
    measured: float
    op: str  # "<=", "<" or ">="
    limit: float
    unit: str = "x"
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None or math.isnan(self.measured):
            return "n/a"
        ok = {"<=": self.measured <= self.limit, "<": self.measured < self.limit,
              ">=": self.measured >= self.limit}[self.op]
        return "PASS" if ok else "MISS"

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "measured": self.measured, "op": self.op,
                "limit": self.limit, "unit": self.unit, "verdict": self.verdict,
                "note": self.note}


@dataclasses.dataclass
class Report:
    """What a benchmark's report() returns: tables, targets, notes, a JSON summary."""

    tables: list[tuple[str, list[str], list[list[str]]]]
    targets: list[Target]
    notes: list[str]
    summary: dict[str, Any]


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value != 0 and abs(value) < 10 ** -digits * 5:
        return f"{value:.2g}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def fmt_ratio(value: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    if value < 1:  # 3 decimals: a 0.102x that misses a 0.1x target must not print as 0.10x
        return f"{value:.3f}x"
    return f"{value:.2f}x"


def markdown_table(headers: list[str], rows: list[list[str]], left: Sequence[int] = (0,)) -> str:
    """A GitHub markdown table; columns whose index is in `left` are left-aligned, others right."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    right = [i not in left for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.rjust(widths[i]) if right[i] else cell.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if right[i] else ("-" * (w + 2))
                         for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def targets_table(targets: list[Target]) -> str:
    rows = []
    for t in targets:
        measured = fmt_ratio(t.measured) if t.unit == "x" else fmt(t.measured, 2, " " + t.unit)
        limit = f"{t.op} {t.limit:g}{'x' if t.unit == 'x' else ' ' + t.unit}"
        rows.append([t.what, measured, limit, t.verdict, t.note])
    return markdown_table(["target", "measured", "target", "verdict", "anchor"], rows,
                          left=(0, 3, 4))


def ok_rounds(rounds: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The successful rounds of a contender, and the first error message if any round failed."""
    good = [r for r in rounds if "error" not in r]
    errors = [r["error"] for r in rounds if "error" in r]
    return good, (errors[0] if errors else None)


def error_cell(message: str, limit: int = 90) -> str:
    message = " ".join(message.split()).replace("|", "/")
    return "error: " + (message if len(message) <= limit else message[: limit - 1] + "…")


def collect(rounds: list[dict[str, Any]], key: str) -> list[float]:
    """Per-round scalar `key`, or the concatenation of per-round lists `key`."""
    out: list[float] = []
    for r in rounds:
        value = r.get(key)
        if isinstance(value, list):
            out.extend(value)
        elif value is not None:
            out.append(value)
    return out


class Table:
    """One markdown table with a row per contender, in the order the contenders ran.

    ``for name, good in table.each(results)`` visits the contenders with at
    least one good round; the others get their error row, and every visited
    contender's ``info`` goes to ``table.infos``. A visited contender's row is
    ``table.add(name, *cells)`` (the name cell is added, with the count of
    failed rounds if any); ``table.set`` fills a column afterwards.
    """

    def __init__(self, headers: list[str], heading: str = "", error_col: int = 1) -> None:
        self.headers = headers
        self.heading = heading
        self.error_col = error_col
        self.rows: dict[str, list[str]] = {}
        self.infos: list[str] = []
        self._labels: dict[str, str] = {}

    def each(self, results: dict[str, list[dict[str, Any]]], also: Sequence[Table] = ()
             ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Visit the contenders that have good rounds; `also`: more tables with a row each."""
        tables = (self, *also)
        for name, rounds in results.items():
            good, error = ok_rounds(rounds)
            if not good:
                for t in tables:
                    row = [name] + [""] * (len(t.headers) - 1)
                    row[t.error_col] = error_cell(error or "no result")
                    t.rows[name] = row
                continue
            failed = len(rounds) - len(good)
            for t in tables:
                t._labels[name] = name + (f" ({failed}/{len(rounds)} rounds failed)"
                                          if failed else "")
            if "info" in good[0]:
                self.infos.append(f"{name}: {good[0]['info']}")
            yield name, good

    def add(self, name: str, *cells: str) -> None:
        row = [self._labels.get(name, name), *cells]
        self.rows[name] = row + [""] * (len(self.headers) - len(row))

    def set(self, name: str, column: int, text: str) -> None:
        if name in self._labels:  # not on error rows
            self.rows[name][column] = text

    def section(self) -> tuple[str, list[str], list[list[str]]]:
        """The (heading, headers, rows) that Report.tables holds."""
        return self.heading, self.headers, list(self.rows.values())


def latency_cells(s: dict[str, float], digits: int = 1) -> list[str]:
    """p50 and p99 cells of a summarize() result."""
    return [fmt(s["p50"], digits), fmt(s["p99"], digits)]


def rate_cells(values: list[float], digits: int = 0) -> list[str]:
    """Median, min and max cells of per-batch (or per-round) values."""
    return [fmt(median(values), digits), fmt(min(values), digits), fmt(max(values), digits)]


def quartile_cells(values: list[float], digits: int = 2) -> list[str]:
    """Median, p25 and p75 cells (few samples: one per fresh process)."""
    return [fmt(median(values), digits), fmt(percentile(values, 25), digits),
            fmt(percentile(values, 75), digits)]


# ------------------------------------------------------------------ meta data


def cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _loadavg() -> str:
    return " ".join((_read("/proc/loadavg") or "? ? ?").split()[:3])


def _git_rev() -> str:
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def _package_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "not installed"


def collect_meta(loop: str) -> dict[str, Any]:
    try:
        import aiosubinterp

        ours = f"{aiosubinterp.__version__} ({os.path.dirname(aiosubinterp.__file__)})"
    except Exception as exc:  # noqa: BLE001
        ours = f"not importable: {exc}"
    command = shlex.join(["python", *sys.argv])
    if os.environ.get("PYTHONPATH"):
        command = f"PYTHONPATH={os.environ['PYTHONPATH']} {command}"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpus": ncpu(),
        "cpu_model": cpu_model(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "platform": platform.platform(),
        "loop": loop if loop == "asyncio" else f"uvloop {_package_version('uvloop')}",
        "aiosubinterp": ours,
        "git": _git_rev(),
        "command": command,
        "loadavg_start": _loadavg(),
    }


# --------------------------------------------------------------- the harness


def _parse_args(doc: str, names: list[str]) -> argparse.Namespace:
    first = doc.strip().splitlines()[0]
    parser = argparse.ArgumentParser(description=first, epilog=f"contenders: {', '.join(names)}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small smoke run (< 20 s): fewer tasks and rounds; numbers are rough")
    parser.add_argument("--json", action="store_true",
                        help="print the results as one JSON document instead of the tables")
    parser.add_argument("--loop", choices=LOOPS, default="asyncio",
                        help="event loop for every contender (default: asyncio)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds over all contenders (each contender once per round, "
                             "in a fresh process)")
    parser.add_argument("--only", default=None,
                        help="comma-separated subset of contenders to run")
    # Internal: how the parent runs one contender in a child process.
    parser.add_argument("--contender", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.contender is not None and args.contender not in names:
        parser.error(f"unknown contender {args.contender!r}; choose from {', '.join(names)}")
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            parser.error(f"unknown contender(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(names)}")
        args.only = wanted
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def spawn_contender(script: str, name: str, params: dict[str, Any], loop: str,
                    timeout: float) -> dict[str, Any]:
    """Run one contender in a fresh `python script --contender name` and return its JSON result."""
    cmd = [sys.executable, script, "--contender", name, "--loop", loop,
           "--params", json.dumps(params)]
    env = dict(os.environ)
    # Interpreters created by anyio (and processes started by spawn) do not
    # inherit sys.path[0] (the script's directory): put _work on PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers
        out, err = proc.communicate()
        return {"error": f"hung: killed after {timeout:g} s", "stderr": _tail(err),
                "returncode": proc.returncode}
    result = None
    for line in out.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
    if result is None:
        last = _tail(err, 1) or "(no output)"
        return {"error": f"exit code {proc.returncode}: {last}", "stderr": _tail(err),
                "returncode": proc.returncode}
    if proc.returncode != 0:
        # A result was printed, then the process failed (e.g. an abort at exit).
        result["exit_problem"] = f"exit code {proc.returncode} after the result: {_tail(err, 3)}"
    return result


def main(
    *,
    doc: str,
    title: str,
    contenders: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]],
    full: dict[str, Any],
    quick: dict[str, Any],
    report: Callable[[dict[str, list[dict[str, Any]]], dict[str, Any]], Report],
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    child_timeout: tuple[float, float] = (120.0, 20.0),
) -> int:
    """Entry point of a benchmark script: parent (run every contender) or child (run one).

    Args:
        doc: the script's docstring (its first line is the --help summary).
        title: heading of the printed report.
        contenders: name -> function(params, loop) returning a JSON-able dict,
            run in the child process.
        full, quick: parameters for a full and a --quick run; "rounds" is read here.
        report: turns {name: [result of each round]} into tables and targets.
        prepare: called in the parent to complete the parameters (calibration).
        child_timeout: seconds one child may take, (full, quick); then it is killed.
    """
    names = list(contenders)
    args = _parse_args(doc, names)
    if args.contender is not None:
        params = json.loads(args.params)
        try:
            result = contenders[args.contender](params, args.loop)
        except BaseException as exc:  # noqa: BLE001 - report any failure to the parent
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(RESULT_MARK + json.dumps(result), flush=True)
        return 0

    import importlib.util

    if importlib.util.find_spec("aiosubinterp") is None:
        print(f"warning: aiosubinterp is not importable by {sys.executable}: install it "
              f"(`make venv`, or `pip install -e .`) or set PYTHONPATH={REPO}; its rows will "
              "show the error", file=sys.stderr)
    params = dict(quick if args.quick else full)
    if args.rounds is not None:
        params["rounds"] = args.rounds
    params["quick"] = args.quick
    meta = collect_meta(args.loop)
    if prepare is not None:
        params = prepare(params)
    chosen = args.only or default_selection(names)
    skipped = {n: reason for n in chosen if (reason := unavailable(n)) is not None}
    for name, reason in skipped.items():
        print(f"[{title}] skipping {name}: {reason}", file=sys.stderr, flush=True)
    chosen = [n for n in chosen if n not in skipped]
    if not chosen:
        print(f"[{title}] no contender can run on this Python", file=sys.stderr)
        return 1
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in chosen}
    timeout = child_timeout[1] if args.quick else child_timeout[0]
    script = os.path.abspath(sys.argv[0])
    started = time.perf_counter()
    rounds = int(params.get("rounds", 1))
    for r in range(rounds):
        order = chosen[r % len(chosen):] + chosen[: r % len(chosen)]
        for name in order:
            print(f"[{title}] round {r + 1}/{rounds}: {name} ...", end="", file=sys.stderr,
                  flush=True)
            t0 = time.perf_counter()
            res = spawn_contender(script, name, params, args.loop, timeout)
            results[name].append(res)
            status = f" error: {res['error']}" if "error" in res else ""
            print(f" {time.perf_counter() - t0:.1f} s{status}", file=sys.stderr, flush=True)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["loadavg_end"] = _loadavg()
    rep = report(results, params)
    problems = {n: [r.get("exit_problem") for r in rs if r.get("exit_problem")]
                for n, rs in results.items()}
    problems = {n: p for n, p in problems.items() if p}
    errors = {n: [{k: r.get(k) for k in ("error", "traceback", "stderr") if r.get(k)}
                  for r in rs if "error" in r] for n, rs in results.items()}
    errors = {n: e for n, e in errors.items() if e}
    if args.json:
        print(json.dumps({
            "benchmark": os.path.basename(script),
            "title": title,
            "meta": meta,
            "params": params,
            "summary": rep.summary,
            "targets": [t.as_dict() for t in rep.targets],
            "errors": errors,
            "exit_problems": problems,
            "skipped": skipped,
            "notes": rep.notes,
        }, indent=1, default=str))
        return 0
    print(render(title, meta, params, rep, errors, problems, skipped))
    return 0


def render(title: str, meta: dict[str, Any], params: dict[str, Any], rep: Report,
           errors: dict[str, Any], problems: dict[str, Any],
           skipped: dict[str, str] | None = None) -> str:
    shown = {k: v for k, v in params.items() if k != "quick"}
    lines = [
        f"### {title}{' (--quick: rough numbers)' if params.get('quick') else ''}",
        "",
        f"- date: {meta['date']}; machine: {meta['cpus']} CPUs, {meta['cpu_model']}; "
        f"{meta['platform']}",
        f"- Python: {meta['python']} ({meta['executable']}); loop: {meta['loop']}; "
        f"aiosubinterp {meta['aiosubinterp']} at git {meta['git']}",
        f"- command: `{meta['command']}`",
        f"- parameters: {', '.join(f'{k}={v}' for k, v in shown.items())}",
        f"- load average at start / end: {meta['loadavg_start']} / {meta['loadavg_end']}; "
        f"elapsed {meta['elapsed_s']} s",
        "",
    ]
    for heading, headers, rows in rep.tables:
        if heading:
            lines += [heading, ""]
        lines += [markdown_table(headers, rows), ""]
    if rep.targets:
        lines += [targets_table(rep.targets), ""]
    for note in rep.notes:
        lines.append(f"- {note}")
    for name, errs in errors.items():
        first = errs[0]
        lines.append(f"- {name}: {len(errs)} round(s) failed; first: {first.get('error')}")
        detail = first.get("traceback") or first.get("stderr")
        if detail:
            lines += ["", "```", _tail(detail, 12), "```"]
    for name, probs in problems.items():
        lines.append(f"- {name}: {len(probs)} round(s) exited badly after reporting: {probs[0]}")
    for name, reason in (skipped or {}).items():
        lines.append(f"- {name}: skipped: {reason}")
    return "\n".join(lines).rstrip() + "\n"


LOAD_HEADERS = ["CPU/wall", "other load"]
LOAD_NOTE = (
    "CPU/wall: CPU seconds used by the contender's process tree (every thread, worker "
    "processes included) per wall-clock second of the timed part. other load: cores kept "
    "busy at the same time by processes outside the benchmark (from /proc/stat): the noise "
    f"on this {ncpu()}-CPU machine. Both are medians over rounds."
)


def load_cells(good: list[dict[str, Any]]) -> list[str]:
    """CPU/wall and other-load cells (medians over rounds) for a contender's row."""
    cells = []
    for key in ("cpu_per_wall", "other_cores"):
        value = median(collect(good, key))
        cells.append("–" if math.isnan(value) else f"{value:.2f}")
    return cells
