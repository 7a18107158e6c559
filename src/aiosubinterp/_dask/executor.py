"""Inside Dask: DaskInterpreterExecutor runs a Dask worker's tasks in interpreters.

``DaskInterpreterPlugin`` (or the ``aiosubinterp.dask_preload`` module)
installs one in every worker. See the package's docstring for how a Dask
worker calls it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import distributed
from distributed.diagnostics.plugin import WorkerPlugin

from aiosubinterp._dask.translate import task_call
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine.executor import InterpreterPoolExecutor
from aiosubinterp._errors import NotShareableError
from aiosubinterp._inside import daskwork as _daskwork

__all__ = [
    "DaskInterpreterExecutor",
    "DaskInterpreterPlugin",
    "install_executor",
    "stop_frame_sampling",
    "uninstall_executor",
]

# The wrapper a Dask worker submits to an executor that is not a thread pool.
try:
    from distributed.worker import _run_task_simple
except ImportError:  # pragma: no cover - another distributed
    _run_task_simple = None  # type: ignore[assignment]


class _Outcome:
    """Stands in for the task in distributed's _run_task_simple: returns or raises the outcome."""

    __slots__ = ("future",)

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self.future = future

    def __call__(self, data: object) -> Any:
        return self.future.result()


class DaskInterpreterExecutor(InterpreterPoolExecutor):
    """An InterpreterPoolExecutor that also runs a Dask worker's tasks.

    Install it in a worker with ``DaskInterpreterPlugin`` or the
    ``aiosubinterp.dask_preload`` module (they also turn off the worker's
    frame sampling, which would crash it), then run tasks on it with
    ``dask.annotate(executor="interpreters")``. Each task then runs in one of
    the worker's interpreters, each with its own GIL: one Dask worker process
    uses every core for pure-Python tasks.

    Only the task's functions and values cross: the worker's wrapper and
    dask's task objects stay in the main interpreter. Functions that cannot
    cross by name (lambdas, closures, functions of the client's script,
    which Dask ships by value) cross by value with cloudpickle. Tasks run
    without the worker's context, so ``get_worker()``, ``get_client()``,
    ``secede()`` and ``worker_client()`` do not work inside them, and
    neither do modules that refuse subinterpreters (numpy): run those on
    the worker's default executor.

    Any other call (``submit(fn, ...)``, ``map``) behaves as in
    InterpreterPoolExecutor, whose arguments this class takes.

    Thread-safety: as InterpreterPoolExecutor.
    """

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        if fn is _run_task_simple and _run_task_simple is not None and len(args) == 3:
            return self._submit_task(*args)
        module = getattr(fn, "__module__", None) or ""
        if module == "distributed" or module.startswith("distributed."):
            version = getattr(distributed, "__version__", "?")
            raise RuntimeError(
                f"DaskInterpreterExecutor got {module}.{getattr(fn, '__qualname__', fn)!r}, a "
                "wrapper of this version of distributed that it does not know "
                f"(distributed {version}); it cannot run in an interpreter. "
                "Use the worker's default executor, or a distributed version aiosubinterp "
                "supports (>= 2025.1)."
            )
        return super().submit(fn, *args, **kwargs)

    def _submit_task(
        self, task: object, data: dict[Any, Any], time_delay: float
    ) -> concurrent.futures.Future[Any]:
        start = time.time()
        try:
            fn, args, kwargs = task_call(task, data)
            inner = self._submit_call(fn, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the task fails with it, the worker goes on
            # (a value that cannot cross, a broken or shut-down executor)
            inner = concurrent.futures.Future()
            inner.set_exception(exc)
        outer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        outer.set_running_or_notify_cancel()
        inner.add_done_callback(functools.partial(_report, outer, start, time_delay))
        return outer

    def _submit_call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> concurrent.futures.Future[Any]:
        try:
            return super().submit(fn, *args, **kwargs)
        except NotShareableError as by_name:
            try:
                blob = cloudpickle.dumps((fn, args, kwargs))
            except Exception:  # noqa: BLE001 - the first error says more
                raise by_name from None
            return super().submit(_daskwork.call_pickled, blob)


def _report(
    outer: concurrent.futures.Future[Any],
    start: float,
    time_delay: float,
    inner: concurrent.futures.Future[Any],
) -> None:
    """The message a Dask worker expects from _run_task_simple, for the finished call."""
    try:
        msg = _run_task_simple(_Outcome(inner), {}, time_delay)  # type: ignore[arg-type]
        msg["start"] = start + time_delay
    except BaseException as exc:  # noqa: BLE001 - hand it to the worker, as a thread would
        outer.set_exception(exc)
    else:
        outer.set_result(msg)


class _WithoutThreadFrames:
    """Stands in for the sys module in distributed's profiler: it sees no thread's frames.

    CPython 3.12 and 3.13 ``sys._current_frames()`` walks the threads of
    every interpreter, not only the caller's, and makes frame objects for
    frames that other interpreters are running under their own GIL: memory
    one interpreter allocated is then freed by another, and the process
    aborts ("free(): invalid pointer"). distributed calls it to sample its
    servers' event loops (a thread per server) and its worker threads.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)

    @staticmethod
    def _current_frames() -> dict[int, Any]:
        return {}


def _no_call_stack(keys: object = None) -> dict[Any, Any]:
    return {}


def stop_frame_sampling(worker: distributed.Worker | None = None) -> None:
    """Keep distributed from calling sys._current_frames() here (see _WithoutThreadFrames).

    Process-wide: the event-loop sampling threads of this process's servers
    end at their next sample (they stop when their loop's thread has no
    frame). For ``worker``: its periodic profile of task threads is removed,
    and ``client.call_stack()`` gets no stacks from it.
    """
    import distributed.profile

    if getattr(distributed.profile, "sys", None) is sys:
        distributed.profile.sys = _WithoutThreadFrames()  # type: ignore[attr-defined,assignment]
    if worker is not None:
        callback = worker.periodic_callbacks.pop("profile", None)
        if callback is not None:
            callback.stop()
        if "call_stack" in worker.handlers:
            worker.handlers["call_stack"] = _no_call_stack


_installed: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def install_executor(
    worker: distributed.Worker,
    name: str = "interpreters",
    *,
    size: int | None = None,
    default: bool = False,
    **options: Any,
) -> DaskInterpreterExecutor:
    """Give a Dask worker a DaskInterpreterExecutor under ``name`` (and as its default).

    ``size`` defaults to the worker's number of threads (``--nthreads``),
    so it runs as many tasks at once as the worker schedules. Other keyword
    arguments go to DaskInterpreterExecutor. An executor this function
    installed under the same name before is shut down first.
    """
    if not isinstance(name, str) or not name or name in ("offload", "actor"):
        raise ValueError(
            f"executor name must be a non-empty str other than 'offload' and 'actor', got {name!r}"
        )
    if size is None:
        size = worker.state.nthreads
    executor = DaskInterpreterExecutor(size, **options)
    # Before any interpreter exists (they start with the first task).
    stop_frame_sampling(worker)
    mine = _installed.setdefault(worker, {})
    old = mine.pop(name, None)
    if old is not None:
        old[0].shutdown(wait=False)
    previous_default = worker.executors.get("default") if default else None
    worker.executors[name] = executor
    if default:
        worker.executors["default"] = executor
    mine[name] = (executor, previous_default)
    return executor


def uninstall_executor(worker: distributed.Worker, name: str = "interpreters") -> None:
    """Undo install_executor: remove the executor, restore the default, shut it down.

    Returns at once (it runs on the worker's event loop): the calls already
    submitted still run, then the interpreters are destroyed on a helper
    thread; the process does not exit before that.
    """
    executor, previous_default = _installed.get(worker, {}).pop(name, (None, None))
    if executor is None:
        return
    if worker.executors.get(name) is executor:
        del worker.executors[name]
    if previous_default is not None and worker.executors.get("default") is executor:
        worker.executors["default"] = previous_default
    executor.shutdown(wait=False)


class DaskInterpreterPlugin(WorkerPlugin):
    """A Dask worker plugin: each worker gets a DaskInterpreterExecutor.

    Args:
        name: the executor's name; tasks run on it under
            ``dask.annotate(executor=name)``.
        size: interpreters per worker (default: the worker's threads).
        default: also make it the worker's default executor, so every task
            runs in an interpreter (only for pure-Python work: modules that
            refuse subinterpreters, such as numpy, then fail).
        preload: as InterpreterPoolExecutor's.
        initializer: as InterpreterPoolExecutor's (it must be importable on
            the workers).
        initargs: as InterpreterPoolExecutor's.
        max_tasks_per_interpreter: as InterpreterPoolExecutor's.

    ``client.register_plugin(DaskInterpreterPlugin())`` installs it in every
    worker, also those that join later; unregistering it (or closing the
    worker) shuts the executor down.
    """

    def __init__(
        self,
        name: str = "interpreters",
        *,
        size: int | None = None,
        default: bool = False,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        max_tasks_per_interpreter: int | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or name in ("offload", "actor"):
            raise ValueError(
                f"name must be a non-empty str other than 'offload' and 'actor', got {name!r}"
            )
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"size must be None or a positive int, got {size!r}")
        self.name = f"aiosubinterp-{name}"
        self.executor_name = name
        self.size = size
        self.default = bool(default)
        self.options = {
            "preload": _lifecycle.check_names(preload),
            "initializer": initializer,
            "initargs": initargs,
            "max_tasks_per_interpreter": max_tasks_per_interpreter,
        }

    def setup(self, worker: distributed.Worker) -> None:
        install_executor(
            worker, self.executor_name, size=self.size, default=self.default, **self.options
        )

    def teardown(self, worker: distributed.Worker) -> None:
        uninstall_executor(worker, self.executor_name)
