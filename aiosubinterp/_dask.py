"""Dask distributed, in both directions.

Inside Dask: ``DaskInterpreterExecutor`` is an executor a Dask worker can run
its tasks on; ``DaskInterpreterPlugin`` (or the ``aiosubinterp.dask_preload``
module) installs one in every worker. In front of Dask: ``DaskPool(client)``
has InterpreterPool's async API and runs the calls on a Dask cluster.

How a Dask worker calls a non-thread executor (distributed >= 2025.1):
``loop.run_in_executor(executor, _run_task_simple, task, data, delay)``,
where ``task`` is a ``dask._task_spec`` graph node and ``data`` maps the keys
it depends on to their values. Neither that wrapper nor the task object can
run in an interpreter (distributed imports C extensions that refuse
subinterpreters), so the executor translates them here, in the main
interpreter and without running any user code: a plain task becomes
``fn(*args, **kwargs)`` with its dependencies filled in, anything nested
(containers of tasks, fused subgraphs) becomes a tuple expression that
``aiosubinterp._inside.daskwork`` evaluates in the interpreter. Only the user's
functions and values cross. The message the worker expects back is built by
distributed's own ``_run_task_simple``, around the outcome.

Functions that cannot cross by name (lambdas, closures, functions of the
client's script, which Dask ships by value) cross by value with cloudpickle,
as Dask itself ships them.

Main-interpreter module: imports distributed, never imported by workers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sys
import time
import traceback
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any

try:
    import cloudpickle  # type: ignore[import-untyped]
    import dask
    import distributed
    from dask import _task_spec as _spec
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError as exc:  # pragma: no cover - the test command installs them
    raise ImportError(
        f"aiosubinterp's Dask integration needs dask and distributed ({exc}): "
        "pip install 'dask[distributed]'"
    ) from exc

from aiosubinterp._engine import hub as _loop
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine.executor import InterpreterPoolExecutor
from aiosubinterp._engine.task import Task
from aiosubinterp._errors import ExecutionFailed, NotShareableError, PoolClosedError
from aiosubinterp._inside import daskwork as _daskwork

__all__ = [
    "DaskInterpreterExecutor",
    "DaskInterpreterPlugin",
    "DaskPool",
    "install_executor",
    "stop_frame_sampling",
    "to_expression",
    "uninstall_executor",
]

# The wrapper a Dask worker submits to an executor that is not a thread pool.
try:
    from distributed.worker import _run_task_simple
except ImportError:  # pragma: no cover - another distributed
    _run_task_simple = None  # type: ignore[assignment]

_CONTAINERS: dict[type, str] = {_spec.List: "l", _spec.Tuple: "t", _spec.Set: "s"}


# -- translating dask's task objects (main interpreter, no user code runs) -----------------


class _Untranslatable(TypeError):
    pass


def _is_shallow(arg: object) -> bool:
    """True if arg is resolved without calling any user function (a ref, a value, a container)."""
    if isinstance(arg, (_spec.TaskRef, _spec.Alias, _spec.DataNode)):
        return True
    if isinstance(arg, _spec.NestedContainer):
        return (type(arg) in _CONTAINERS or type(arg) is _spec.Dict) and all(
            _is_shallow(a) for a in arg.args)
    return not isinstance(arg, _spec.GraphNode)


def _resolve(arg: object, data: dict[Any, Any]) -> object:
    """The value of a shallow argument, as dask's Task.__call__ would compute it."""
    if isinstance(arg, _spec.TaskRef):
        return data[arg.key]
    if isinstance(arg, _spec.GraphNode):
        return arg({k: data[k] for k in arg.dependencies})
    return arg


def to_expression(node: Any, data: dict[Any, Any], local: bool = False) -> tuple[Any, ...]:
    """The aiosubinterp._inside.daskwork expression that computes node.

    ``data`` holds the values of the keys the task depends on. With
    ``local``, references are to keys of the enclosing fused subgraph and
    stay references ("r"); otherwise they are replaced by their values.
    """
    if isinstance(node, _spec.TaskRef):
        return ("r", node.key) if local else ("v", data[node.key])
    if not isinstance(node, _spec.GraphNode):
        return ("v", node)
    if isinstance(node, _spec.Alias):
        return ("r", node.target) if local else ("v", data[node.target])
    if isinstance(node, _spec.DataNode):
        return ("v", node.value)
    task: Any = node  # a Task (or container): isinstance narrowing would hide its fields
    kind = type(task)
    if kind in _CONTAINERS:
        return (_CONTAINERS[kind], tuple(to_expression(a, data, local) for a in task.args))
    if kind is _spec.Dict:
        items = task.args
        return ("d", tuple((to_expression(items[i], data, local),
                            to_expression(items[i + 1], data, local))
                           for i in range(0, len(items), 2)))
    if kind is _spec.Task and task.func is _spec._execute_subgraph:
        inner, outkey, inkeys, *deps = task.args
        graph = {key: to_expression(sub, data, True) for key, sub in inner.items()}
        return ("g", graph, outkey, tuple(inkeys),
                tuple(to_expression(d, data, local) for d in deps))
    if kind is _spec.Task:
        return ("c", task.func, tuple(to_expression(a, data, local) for a in task.args),
                tuple((k, to_expression(v, data, local)) for k, v in task.kwargs.items()))
    raise _Untranslatable(
        f"aiosubinterp cannot run a dask {kind.__module__}.{kind.__qualname__} task in an "
        "interpreter; run it on the worker's default executor (do not annotate it with "
        "the interpreter executor)"
    )


def task_call(task: Any, data: dict[Any, Any]
              ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """(fn, args, kwargs) to send to an interpreter for a dask task."""
    if (type(task) is _spec.Task and task.func is not _spec._execute_subgraph
            and all(_is_shallow(a) for a in task.args)
            and all(_is_shallow(v) for v in task.kwargs.values())):
        args = tuple(_resolve(a, data) for a in task.args)
        kwargs = {k: _resolve(v, data) for k, v in task.kwargs.items()}
        return task.func, args, kwargs
    return _daskwork.evaluate, (to_expression(task, data),), {}


# -- inside Dask: the worker's executor ----------------------------------------------------


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

    def _submit_task(self, task: object, data: dict[Any, Any],
                     time_delay: float) -> concurrent.futures.Future[Any]:
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

    def _submit_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
                     ) -> concurrent.futures.Future[Any]:
        try:
            return super().submit(fn, *args, **kwargs)
        except NotShareableError as by_name:
            try:
                blob = cloudpickle.dumps((fn, args, kwargs))
            except Exception:  # noqa: BLE001 - the first error says more
                raise by_name from None
            return super().submit(_daskwork.call_pickled, blob)


def _report(outer: concurrent.futures.Future[Any], start: float, time_delay: float,
            inner: concurrent.futures.Future[Any]) -> None:
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
        raise ValueError(f"executor name must be a non-empty str other than 'offload' and "
                         f"'actor', got {name!r}")
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
        preload, initializer, initargs, max_tasks_per_interpreter: as
            InterpreterPoolExecutor (the initializer must be importable on
            the workers).

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
            raise ValueError(f"name must be a non-empty str other than 'offload' and "
                             f"'actor', got {name!r}")
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
        install_executor(worker, self.executor_name, size=self.size, default=self.default,
                         **self.options)

    def teardown(self, worker: distributed.Worker) -> None:
        uninstall_executor(worker, self.executor_name)


# -- in front of Dask: DaskPool ----------------------------------------------------------------


async def _gather(client: distributed.Client, future: distributed.Future[Any]) -> Any:
    return await client.gather(future, asynchronous=True)  # type: ignore[no-untyped-call]


def _remote_error(exc: BaseException) -> BaseException:
    """As InterpreterPool raises them: the task's own exception, caused by an ExecutionFailed.

    The traceback that distributed attached (the worker's frames, then the
    client's gather machinery) becomes the ExecutionFailed's text and is
    dropped from the exception: its frames hold the Dask future, which would
    keep the task's result alive on the cluster as long as the exception lives.
    """
    if isinstance(exc, asyncio.CancelledError):
        return exc
    cause = exc.__cause__
    if not isinstance(cause, ExecutionFailed) and not isinstance(exc, ExecutionFailed):
        tp = type(exc)
        type_name = f"{tp.__module__}.{tp.__qualname__}"
        tb_text = "".join(traceback.format_exception(exc))
        message = str(exc)
        exc.__cause__ = ExecutionFailed(f"{type_name}: {message}" if message else type_name,
                                        type_name, tb_text)
    return exc.with_traceback(None)


class DaskPool:
    """InterpreterPool's async API (run, submit, map) on a Dask cluster.

    Args:
        client: a connected ``distributed.Client``: an asynchronous one
            (``await Client(address, asynchronous=True)``) created on the
            loop that uses the pool, or a synchronous one (whose loop runs in
            its own thread). The pool does not close it.
        executor: the name of the executor the calls run on in each worker,
            such as ``"interpreters"`` when the workers have
            DaskInterpreterPlugin; None (default) is the worker's default
            executor (threads).

    Code written against InterpreterPool runs on a cluster by swapping the
    pool object. The differences: functions and arguments travel the Dask
    way (cloudpickle, so lambdas work), every call is a Dask task with a
    unique key (calls are never merged, as ``pure=False``), results are
    copied back from the workers, and closing the pool leaves the client and
    the cluster running.

    Thread-safety: use a pool from the event loop's thread; each task belongs
    to the loop that submitted it.
    """

    def __init__(self, client: distributed.Client, *, executor: str | None = None) -> None:
        if not isinstance(client, distributed.Client):
            raise TypeError(
                f"DaskPool needs a distributed.Client, got {type(client).__name__}: create one "
                "with distributed.Client(address) or Client(cluster) (asynchronous=True in async "
                "code) and pass it"
            )
        if executor is not None and (not isinstance(executor, str) or not executor):
            raise TypeError(f"executor must be None or an executor name (str), got {executor!r}")
        if client.status in ("closing", "closed"):
            raise ValueError(f"DaskPool got a closed client ({client!r}): pass an open Client")
        # This process may run interpreters too (and a LocalCluster's scheduler).
        stop_frame_sampling()
        self._client = client
        self._executor = executor
        self._closed = False
        # Task -> (its Dask future, the relay that gathers its result)
        self._inflight: dict[Task, tuple[distributed.Future[Any], asyncio.Future[Any]]] = {}
        self._cancels: set[asyncio.Future[Any]] = set()
        self._submitted = 0

    @property
    def client(self) -> distributed.Client:
        """The Dask client the calls go through."""
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed

    def _client_loop(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        client = self._client
        if client.status in ("closing", "closed"):
            raise PoolClosedError(
                "the Dask client of this DaskPool is closed: create a pool on an open Client")
        try:
            io_loop = client.loop
        except RuntimeError:
            io_loop = None
        client_loop = getattr(io_loop, "asyncio_loop", None)
        if client_loop is None or client.status != "running":
            raise RuntimeError(
                f"the Dask client of this DaskPool has not connected (status {client.status!r}): "
                "`await` an asynchronous Client before using the pool"
            )
        if client_loop is not loop and not client_loop.is_running():
            raise RuntimeError(
                "the Dask client of this DaskPool belongs to another event loop, which is not "
                "running: create the Client (asynchronous=True) on the loop that uses the pool, "
                "or use a synchronous Client"
            )
        return client_loop  # type: ignore[no-any-return]

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) on the cluster; return its Task at once.

        The Task is an ``asyncio.Future``: await it for the result;
        ``cancel()`` cancels the Dask task too. Raises TypeError if fn is not
        callable, NotShareableError if Dask cannot serialize the call,
        PoolClosedError after close() or once the client closed.
        """
        loop = _loop.running_loop("DaskPool.submit()")
        if self._closed:
            raise PoolClosedError("this DaskPool is closed: create a new one to run more work")
        if not callable(fn):
            raise TypeError(f"DaskPool: expected a callable to run, got {type(fn).__name__} {fn!r}")
        client_loop = self._client_loop(loop)
        call = functools.partial(fn, **kwargs) if kwargs else fn
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        try:
            if self._executor is not None:
                with dask.annotate(executor=self._executor):  # type: ignore[attr-defined]
                    dfut = self._client.submit(call, *args, pure=False)
            else:
                dfut = self._client.submit(call, *args, pure=False)
        except Exception as exc:
            text = str(exc).lower()
            if isinstance(exc, TypeError) and ("pickl" in text or "serializ" in text):
                raise NotShareableError(
                    f"Dask cannot send the call {name}() to the cluster: "
                    f"{type(exc).__name__}: {exc}. Pass picklable arguments."
                ) from exc
            raise
        task = Task(loop, self, _lifecycle.next_task_id(), name, None)
        if client_loop is loop:
            relay: asyncio.Future[Any] = loop.create_task(_gather(self._client, dfut))
        else:
            relay = asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_gather(self._client, dfut), client_loop),
                loop=loop)
        self._inflight[task] = (dfut, relay)
        relay.add_done_callback(functools.partial(self._settle, task))
        self._submitted += 1
        return task

    def _settle(self, task: Task, relay: asyncio.Future[Any]) -> None:
        # Dropping the Dask future releases the task's result on the cluster.
        self._inflight.pop(task, None)
        exc = None if relay.cancelled() else relay.exception()
        if task.done():  # cancelled: the relay ended with Dask's cancellation error
            return
        if relay.cancelled():
            asyncio.Future[Any].cancel(task)
            return
        if exc is not None:
            task.set_exception(_remote_error(exc))
        else:
            task.set_result(relay.result())

    def _cancel_task(self, task: Task) -> None:
        # Called by Task.cancel() on the loop thread, before the Task is marked cancelled.
        # The relay is not cancelled (distributed's gather does not expect that):
        # it ends with Dask's cancellation error once the cancel reached the client.
        entry = self._inflight.get(task)
        if entry is None:
            return
        dfut, _ = entry
        try:
            client_loop = self._client_loop(task.get_loop())
        except RuntimeError:  # the client closed or stopped: its tasks are gone with it
            return
        loop = task.get_loop()
        coro = self._client.cancel(  # type: ignore[no-untyped-call]
            [dfut], asynchronous=True, reason="DaskPool task cancelled")
        if client_loop is loop:
            done: asyncio.Future[Any] = loop.create_task(coro)
        else:
            done = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, client_loop),
                                       loop=loop)
        self._cancels.add(done)
        done.add_done_callback(self._cancel_done)

    def _cancel_done(self, done: asyncio.Future[Any]) -> None:
        self._cancels.discard(done)
        if not done.cancelled():
            done.exception()  # the cluster went away meanwhile: nothing left to cancel

    async def run(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
        """Run fn(*args, **kwargs) on the cluster and return its result.

        Exceptions come back with their own type, caused by an ExecutionFailed
        that carries the remote traceback.

        Cancellation: the Dask task is cancelled (a running task still runs to
        its end on its worker: Dask does not interrupt running tasks).
        """
        return await self.submit(fn, *args, **kwargs)

    def map(
        self,
        fn: Callable[..., object],
        iterable: Iterable[Any] | AsyncIterable[Any],
        *,
        ordered: bool = True,
        window: int | None = None,
    ) -> AsyncIterator[Any]:
        """Yield fn(item) for every item, computed on the cluster.

        At most ``window`` calls are in flight (default 64), so a long or
        endless iterable streams. With ``ordered=False`` results come as they
        finish. The first failure is raised at its place and the calls still
        in flight are cancelled.

        Cancellation: closing or cancelling the iteration cancels every call in flight.
        """
        return _lifecycle.windowed_map(self.submit, fn, iterable, ordered=ordered,
                                  window=64 if window is None else window)

    def close(self) -> None:
        """Accept no more calls; those submitted still run. Idempotent; the client stays open."""
        self._closed = True

    async def aclose(self) -> None:
        """Close, and wait until the calls submitted so far have finished.

        Cancellation: the calls still in flight are cancelled.
        """
        self.close()
        pending = dict(self._inflight)
        try:
            if pending:
                await asyncio.wait([relay for _, relay in pending.values()])
        except asyncio.CancelledError:
            for task in pending:
                task.cancel()
            raise
        if self._cancels:
            await asyncio.wait(list(self._cancels))

    async def __aenter__(self) -> DaskPool:
        _loop.running_loop("async with DaskPool(...)")
        if self._closed:
            raise PoolClosedError("this DaskPool is closed: create a new one")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: state, submitted, in flight."""
        return {
            "state": "closed" if self._closed else "open",
            "submitted": self._submitted,
            "inflight": len(self._inflight),
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<aiosubinterp.DaskPool {self._client!r} {state}>"
