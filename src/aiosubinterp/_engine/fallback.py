"""InterpreterPool(fallback="process"): a module that refuses interpreters runs on processes.

A task whose function needs an extension module that refuses subinterpreters
(numpy, for one) fails in its interpreter with ModuleRefusedError. With the
fallback on, that task runs again on a worker process of a ProcessPool made
on first need, a FallbackWarning says so once, and later tasks of the same
function's module go straight to the processes.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiosubinterp._engine.task import Task
from aiosubinterp._errors import FallbackWarning, ModuleRefusedError

if TYPE_CHECKING:  # a type only: _pool imports this module
    from aiosubinterp._engine import pool as _pool
    from aiosubinterp._process.pool import ProcessPool

__all__ = [
    "FREE_THREADED",
    "Fallback",
    "copies_only",
    "copies_unavailable",
    "make",
    "parse",
    "wants_copies",
]


def parse(fallback: object) -> tuple[str, ...]:
    """fallback as a tuple of tiers, in order; a clear error for a bad value."""
    if fallback is None:
        return ()
    tiers = (fallback,) if isinstance(fallback, str) else fallback
    if isinstance(tiers, (tuple, list)) and tuple(tiers) in (
        (("process",), ("copy",), ("copy", "process"))
    ):
        return tuple(tiers)
    hint = ""
    if isinstance(tiers, (tuple, list)) and tuple(tiers) == ("process", "copy"):
        hint = " (a copy is tried first, processes are the last resort: ('copy', 'process'))"
    raise ValueError(
        "fallback must be None (a refusing module's error reaches the caller), 'process' "
        "(such tasks run on worker processes instead), 'copy' (each interpreter loads a "
        "private copy of a refusing extension module where its binaries allow it) or "
        f"('copy', 'process') (a copy where it is safe, processes otherwise), got "
        f"{fallback!r}{hint}"
    )


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def copies_unavailable() -> str | None:
    """Why this Python cannot load private copies, or None when it can."""
    if FREE_THREADED:
        return (
            "it is not available on a free-threaded build of CPython, which cannot lift its "
            "refusal of an extension module for one interpreter. Threads run Python in "
            "parallel on this build: asyncio.to_thread() runs such code on every core"
        )
    if sys.version_info < (3, 13):
        return (
            "it needs CPython 3.13 or newer: on 3.12 (measured on 3.12.1) the process "
            "aborted at exit after copies of pydantic-core or SQLAlchemy, or numpy's own "
            "tests, ran in two interpreters (the datetime C API those modules need is not "
            "safe in several interpreters there)"
        )
    return None


def wants_copies(tiers: tuple[str, ...], who: str) -> bool:
    """Whether a pool with these fallback tiers loads private copies on this Python.

    Not on free-threaded builds nor on 3.12 (copies_unavailable()): there
    ``"copy"`` alone is an error and ``("copy", "process")`` means processes.
    """
    if "copy" not in tiers:
        return False
    why = copies_unavailable()
    if why is None:
        return True
    if "process" in tiers:
        return False
    raise ValueError(
        f"{who}(fallback='copy'): {why}. fallback=('copy', 'process') runs such modules on "
        "processes here and in private copies where they are available."
    )


def copies_only(fallback: object, who: str) -> bool:
    """Whether fallback (None or "copy", all that ``who`` takes) asks for private copies."""
    if fallback is None or fallback == "copy":
        return fallback is not None and wants_copies(("copy",), who)
    tiers = parse(fallback)  # a clear error for a value nobody takes
    raise ValueError(
        f"{who} takes fallback=None or 'copy' (a private copy of a refusing extension module in "
        f"its interpreters), got {tiers!r}: processes have their own API (ProcessPool, "
        "concurrent.futures.ProcessPoolExecutor), and InterpreterPool(fallback=('copy', "
        "'process')) routes between both"
    )


def make(
    fallback: object,
    *,
    size: int,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
    max_tasks: int | None,
    cancel_grace: float,
    forward_logging: bool = True,
) -> Fallback | None:
    """The process fallback of a new InterpreterPool, or None; a clear error for a bad value."""
    if "process" not in parse(fallback):
        return None
    return Fallback(
        size=size,
        initializer=initializer,
        initargs=initargs,
        max_tasks=max_tasks,
        cancel_grace=cancel_grace,
        forward_logging=forward_logging,
    )


def _unwrap(fn: object) -> object:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__func__", fn)


def module_of(fn: object) -> str:
    """The module a callable's code lives in (through partials and bound methods)."""
    fn = _unwrap(fn)
    module = getattr(fn, "__module__", None)
    if not isinstance(module, str):
        module = type(fn).__module__
    return module


class _RoutedTask(Task):
    """The Task a routed call's caller awaits; ``inner`` is the Task that runs it now (in
    an interpreter, then on a process if its module refused): cancel() cancels that one."""

    inner: asyncio.Future[Any] | None = None


class Fallback:
    """The process side of one InterpreterPool, and the modules sent there.

    Thread-safety: as InterpreterPool (a lock guards the decisions and the pool).
    """

    def __init__(
        self,
        *,
        size: int,
        initializer: Callable[..., object] | None,
        initargs: tuple[Any, ...],
        max_tasks: int | None,
        cancel_grace: float,
        forward_logging: bool = True,
    ) -> None:
        self._options = dict(
            initializer=initializer,
            initargs=initargs,
            max_tasks_per_worker=max_tasks,
            cancel_grace=cancel_grace,
            forward_logging=forward_logging,
        )
        self._size = size
        self._lock = threading.Lock()
        self._modules: dict[str, str] = {}  # function module -> the extension module that refused
        self._processes: ProcessPool | None = None
        self._closed = False

    @property
    def modules(self) -> dict[str, str]:
        """Function modules that run on processes, each with the module that refused."""
        with self._lock:
            return dict(self._modules)

    def processes(self) -> Any:
        """The ProcessPool, created on first need."""
        from aiosubinterp._process.pool import ProcessPool

        with self._lock:
            if self._processes is None:
                self._processes = ProcessPool(self._size, **self._options)  # type: ignore[arg-type]
            return self._processes

    def submit(
        self,
        engine: _pool._InterpreterBackend,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Task:
        module = module_of(fn)
        if module in self._modules:
            engine._check_open()
            return self.processes().submit(fn, *args, **kwargs)  # type: ignore[no-any-return]
        inner = engine._submit_to_interpreters(fn, args, kwargs)
        outer = _RoutedTask(inner.get_loop(), self, inner.id, inner.name, None)
        outer.inner = inner
        inner.add_done_callback(functools.partial(self._settle, outer, fn, args, kwargs, module))
        return outer

    def _settle(
        self,
        outer: _RoutedTask,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        module: str,
        inner: asyncio.Future[Any],
    ) -> None:
        if outer.done():
            return
        if inner.cancelled():
            Task.cancel(outer)
            return
        exc = inner.exception()
        if not isinstance(exc, ModuleRefusedError):
            _copy(inner, outer)
            return
        refused = exc.name or "an extension module"
        with self._lock:
            first = module not in self._modules
            self._modules.setdefault(module, refused)
            closed = self._closed
        if closed:
            _copy(inner, outer)
            return
        if first:
            # Pointed at the function's definition: this runs in a loop callback.
            code = getattr(getattr(_unwrap(fn), "__code__", None), "co_filename", None)
            line = getattr(getattr(_unwrap(fn), "__code__", None), "co_firstlineno", 0)
            warnings.warn_explicit(
                FallbackWarning(
                    f"the extension module {refused!r} refuses to load in a subinterpreter: "
                    f"functions of module {module!r} run on worker processes from now on "
                    "(InterpreterPool fallback includes 'process')"
                ),
                FallbackWarning,
                code or "<aiosubinterp>",
                line,
                module=module,
            )
        try:
            again = self.processes().submit(fn, *args, **kwargs)
        except BaseException as err:  # noqa: BLE001 - the awaiter gets it
            outer.set_exception(err)
            return
        outer.inner = again
        again.add_done_callback(lambda done: None if outer.done() else _copy(done, outer))

    def _cancel_task(self, task: Task) -> None:
        inner = task.inner if isinstance(task, _RoutedTask) else None
        if inner is not None and not inner.done():
            inner.cancel()

    def _on_retired(self, serial: int) -> None:
        """TaskOwner: a no-op here. The router runs no workers: the interpreter pool and
        the ProcessPool own the inner tasks, and their workers' retirements."""

    def close(self) -> None:
        """Close the process pool (if any): what was submitted to it still runs."""
        with self._lock:
            self._closed = True
            processes = self._processes
        if processes is not None:
            processes.close()

    async def aclose(self) -> None:
        """Close, and wait until the worker processes have exited."""
        self.close()
        if self._processes is not None:
            await self._processes.aclose()


def _copy(source: asyncio.Future[Any], target: Task) -> None:
    if target.done():
        return
    if source.cancelled():
        Task.cancel(target)
        return
    exc = source.exception()
    if exc is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())
