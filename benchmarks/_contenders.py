"""The contenders: one way to await fn(*args) on a worker, whatever runs it.

What belongs here: the event-loop choice (run_async), the uniform Runner that
open_runner() starts over each contender (aiosubinterp's pool, executor and
process pool, to_thread, the process pools, anyio.to_interpreter,
aiomultiprocess, the interpreters-pep-734 executor, and on 3.14+ the standard
library's InterpreterPoolExecutor and concurrent.interpreters, and
aiointerpreters), each warmed with one task per worker; which contenders a
Python lacks (unavailable) and which run without --only (default_selection);
the versions of their packages; and pool_module(), the one import of a
private module of aiosubinterp in benchmarks/.

Worker code is in _work.py; this module imports asyncio and is never
imported inside an interpreter.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import platform
import sys
import sysconfig
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import _work

WORKERS = 2


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
            return (
                f"{what} is not in the standard library of Python "
                f"{platform.python_version()} (it is new in 3.14)"
            )
        return None

    return reason


def _needs_aiointerpreters() -> str | None:
    import importlib.util

    if sys.version_info < (3, 14):
        return (
            f"aiointerpreters needs Python 3.14+ (concurrent.interpreters); this is "
            f"{platform.python_version()}"
        )
    if importlib.util.find_spec("aiointerpreters") is None:
        return (
            f"aiointerpreters is not installed for {sys.executable} "
            "(pip install -e '.[bench]' installs it on 3.14+)"
        )
    return None


def _needs_pep734_backport() -> str | None:
    import importlib.util

    if sys.version_info >= (3, 14):
        return (
            "interpreters-pep-734 backports 3.14's executor to 3.13 and fails on "
            f"{platform.python_version()}; the stdlib-executor row is 3.14's own"
        )
    if importlib.util.find_spec("interpreters_backport") is None:
        return (
            f"interpreters-pep-734 is not installed for {sys.executable} "
            "(pip install -e '.[bench]' installs it on 3.13)"
        )
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
async def open_runner(
    kind: str, loop: str, *, workers: int = WORKERS, preload: Sequence[str] = (), warm: bool = True
) -> AsyncIterator[Runner]:
    """Start `workers` workers of the given kind; with warm=True, make each run one task first."""
    async with _start(kind, loop, workers, tuple(preload)) as runner:
        if warm:
            await _warm(runner, workers)
        yield runner


def _executor(
    kind: str, workers: int, preload: tuple[str, ...]
) -> tuple[Any, Callable[..., Any] | None, str, Callable[[], None]]:
    """A concurrent.futures contender: (executor, wrapper of each call or None, info, cleanup)."""
    import concurrent.futures

    if kind == "aiosubinterp-executor":
        import aiosubinterp

        executor = aiosubinterp.InterpreterPoolExecutor(max_workers=workers, preload=preload)
        return executor, None, f"InterpreterPoolExecutor({workers})", lambda: None
    if kind == "threadpool":
        # Plain threads, the free-threaded build's own answer.
        return (
            concurrent.futures.ThreadPoolExecutor(max_workers=workers),
            None,
            f"concurrent.futures.ThreadPoolExecutor({workers})",
            lambda: None,
        )
    if kind == "pep734-executor":
        # interpreters-pep-734 (PyPI), the backport of CPython 3.14's
        # InterpreterPoolExecutor: threads that each drive an interpreter.
        from interpreters_backport.concurrent.futures import InterpreterPoolExecutor

        return (
            InterpreterPoolExecutor(max_workers=workers),
            None,
            f"interpreters-pep-734 {package_version('interpreters-pep-734')} "
            f"InterpreterPoolExecutor({workers})",
            lambda: None,
        )
    if kind == "stdlib-executor":
        # CPython 3.14's own, awaited as the asyncio documentation shows.
        return (
            concurrent.futures.InterpreterPoolExecutor(max_workers=workers),
            None,
            f"concurrent.futures.InterpreterPoolExecutor({workers}) "
            f"(Python {platform.python_version()})",
            lambda: None,
        )
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

        return (
            concurrent.futures.ThreadPoolExecutor(max_workers=workers),
            in_interp,
            f"concurrent.interpreters: ThreadPoolExecutor({workers}), one interpreter per "
            "thread made on its first call, interp.call(fn, *args)",
            close,
        )
    if kind.startswith("procpool-"):
        import multiprocessing

        method = kind.split("-", 1)[1]
        executor = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context(method)
        )
        return executor, None, f"ProcessPoolExecutor({workers}, {method})", lambda: None
    raise ValueError(f"unknown contender kind {kind!r}")


@contextlib.asynccontextmanager
async def _start(
    kind: str, loop: str, workers: int, preload: tuple[str, ...]
) -> AsyncIterator[Runner]:
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
        yield Runner(
            kind,
            asyncio.to_thread,
            asyncio.to_thread,
            f"default executor = ThreadPoolExecutor({workers})",
        )
    elif kind == "aiointerpreters":
        # aiointerpreters (PyPI, 3.14+): Runner(workers=N).start() makes N
        # threads that each create an interpreter and serve a shared queue.
        from aiointerpreters.runner import Runner as AioRunner

        with AioRunner(workers=workers).start() as aio:
            yield Runner(
                kind,
                aio.run,
                aio.run,
                f"aiointerpreters {package_version('aiointerpreters')} "
                f"Runner(workers={workers}).start(), await runner.run(fn, *args)",
            )
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
        yield Runner(
            kind,
            call,
            call if ungated else gated,
            f"anyio {package_version('anyio')} to_interpreter.run_sync, "
            f"CapacityLimiter({workers}), anyio.run(backend='asyncio')"
            + ("" if ungated else f", concurrent calls gated by a Semaphore({workers})"),
        )
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

            yield Runner(
                kind,
                apply,
                apply,
                f"aiomultiprocess.Pool({workers}) (spawn), async twins of the functions",
            )
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


def package_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "not installed"
