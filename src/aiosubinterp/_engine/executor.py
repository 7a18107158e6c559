"""InterpreterPoolExecutor: a concurrent.futures.Executor over the interpreter engine.

The same engine as InterpreterPool (one job queue, own-GIL interpreters on
their own OS threads, start-up, max_tasks retirement) without an event loop:
futures are ``concurrent.futures.Future`` objects, resolved by ONE daemon
thread per executor that sleeps in poll() on the executor's own completion
hub and drains it in batches. No thread is parked per task.
"""

from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.thread
import contextvars
import functools
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import _base
from typing import Any

from aiosubinterp import _core, _timeouts
from aiosubinterp._engine import fallback as _fallback
from aiosubinterp._engine import futures as _futures
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine import jobs as _jobs
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine.pool import (
    _InterpreterBackend,  # the interpreter engine this executor drives
)
from aiosubinterp._errors import BrokenPoolError, rebuild
from aiosubinterp._inside import chunks as _chunks
from aiosubinterp._inside import executor_start as _executor_start
from aiosubinterp._inside import marshal as _marshal

__all__ = ["BrokenInterpreterPool", "InterpreterPoolExecutor"]

_PENDING = _base.PENDING
_RUNNING = _base.RUNNING


def _stdlib_broken_pool() -> type:
    """The standard library's class for this error: 3.14+ has its own interpreter executor's."""
    try:
        from concurrent.futures.interpreter import BrokenInterpreterPool as stdlib
    except ImportError:  # before 3.14, or a build without subinterpreters
        return concurrent.futures.thread.BrokenThreadPool
    found: type = stdlib
    return found


class BrokenInterpreterPool(BrokenPoolError, _stdlib_broken_pool()):  # type: ignore[misc]
    """The executor's interpreters could not start (preload or initializer failed).

    Raised by ``submit()`` on a broken executor and set on the futures that
    were waiting. It is a ``concurrent.futures.BrokenExecutor`` and a
    ``concurrent.futures.thread.BrokenThreadPool``, on 3.14+ also the
    standard library's ``concurrent.futures.interpreter.BrokenInterpreterPool``
    (code written for the standard executors catches it), and an
    ``aiosubinterp.BrokenPoolError``; ``__cause__`` is what went wrong.
    """


# Like the standard executors: once the interpreter starts shutting down, no
# new work; and the program does not exit before submitted work is done.
_global_shutdown = False
# Each started executor's completion hub (alive while its thread runs) -> its engine.
_live: weakref.WeakKeyDictionary[_hub.ThreadHub, _ExecutorEngine] = weakref.WeakKeyDictionary()


def _python_exit() -> None:
    global _global_shutdown
    _global_shutdown = True
    for completions, engine in list(_live.items()):
        engine.close_and_wait()
        completions.join()  # the done-callbacks of the last calls run too


# threading's exit hooks run before non-daemon threads are joined and before
# atexit hooks (aiosubinterp._core's sweep, which would drop queued work).
# concurrent.futures.thread registers its own wait the same way.
try:
    threading._register_atexit(_python_exit)  # type: ignore[attr-defined]
except (AttributeError, RuntimeError):  # pragma: no cover - private API gone, or at exit
    import atexit

    atexit.register(_python_exit)


def _broken_error(engine: _ExecutorEngine) -> BrokenInterpreterPool:
    broken = engine.broken
    err = BrokenInterpreterPool(
        f"{broken}; this InterpreterPoolExecutor is not usable anymore: create a new one"
    )
    err.__cause__ = broken.__cause__ if broken is not None else None
    return err


class _ExecutorEngine(_InterpreterBackend):
    """The engine, with a synchronous close for the exit hook, and what the executor uses of it.

    Each interpreter first runs _executor_start.start, which names its
    thread (as ThreadPoolExecutor names its threads) and then runs the
    user's initializer. The executor and its completion thread use only the
    public names defined here (a source rule keeps executor.py from reading
    another object's private attributes).
    """

    _kind = "interpreter pool executor"
    _public_name = "InterpreterPoolExecutor"
    _nested_calls = True

    def __init__(
        self,
        size: int,
        *,
        thread_name_prefix: str,
        initializer: Callable[..., object] | None,
        **kwargs: Any,
    ) -> None:
        # A nested initializer that captures nothing crosses as code, as submit()'s calls do.
        super().__init__(size, initializer=_marshal.by_code(initializer) or initializer, **kwargs)
        self._init_payload = _marshal.call_payload(
            _executor_start.start, (thread_name_prefix, self._init_payload), {}
        )
        # Why the executor is broken, once _on_started logged it (ThreadPoolExecutor's _broken).
        self.broken_message: str | None = None
        # The context_vars found at creation (their values cross with each call).
        self.context = self._context

    @property
    def broken(self) -> BaseException | None:
        """The BrokenPoolError that broke the engine (its start failed, or it lost every
        worker), or None."""
        return self._broken

    @property
    def state(self) -> _lifecycle.PoolState:
        return self._state

    @property
    def started_future(self) -> concurrent.futures.Future[Any]:
        """Done once start-up settled: every worker ready, or the start failed."""
        return self._started

    @property
    def closed_future(self) -> concurrent.futures.Future[Any]:
        """Done once the engine closed: every completion has been posted."""
        return self._closed

    @property
    def queue_closed(self) -> bool:
        return bool(self._queue.closed)

    def enqueue(
        self,
        tid: int,
        payload: object,
        hub: _core.Hub,
        fn: object,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Queue the call; its completion goes to hub (every interpreter pool's one
        enqueue step, _InterpreterBackend._enqueue)."""
        self._enqueue(tid, payload, hub, fn, args, kwargs)

    def start_workers(self) -> None:
        """Start the interpreters (on helper threads) unless they started already."""
        self._ensure_started()

    def withdraw(self, tid: int) -> bool:
        """Take queued job tid off the queue; False if a worker took it (or it is gone)."""
        code, _ = self._queue.cancel(tid)
        return bool(code == _core.CANCEL_CODE_WITHDRAWN)

    def worker_retired(self, serial: int) -> None:
        """A completion said worker serial retired (max_tasks): replace it."""
        self._on_retired(serial)

    def remote_error(self, info: tuple[Any, ...]) -> BaseException:
        """The exception a failed call's completion stands for (the ThreadHub asks)."""
        exc = rebuild(info)
        if (
            isinstance(exc, BrokenPoolError)
            and not isinstance(exc, BrokenInterpreterPool)
            and self._broken is not None
        ):
            # The engine failed the queued jobs with its own BrokenPoolError.
            return _broken_error(self)
        return exc

    def unfinished_error(self) -> BaseException:
        """The exception for a call still pending once the engine closed (the ThreadHub asks)."""
        if self._broken is not None:
            return _broken_error(self)
        return RuntimeError("the InterpreterPoolExecutor shut down before this call finished")

    def close_and_wait(self) -> None:
        """close() and wait, on this thread: at exit, 3.12 refuses to start helper threads."""
        state = self._begin_close()
        if state is None:
            if self._pid == os.getpid():
                self._closed.exception()  # closing elsewhere: wait for it
        elif state is _lifecycle.PoolState.NEW:
            self._finish_close()
        else:
            self._shutdown()


def _on_started(engine: _ExecutorEngine, started: concurrent.futures.Future[Any]) -> None:
    broken = engine.broken
    if started.exception() is None or broken is None:
        return
    # Like ThreadPoolExecutor: the initializer's error is logged, then the
    # executor reads as broken (_broken), and it releases its completion
    # thread and fds by itself; submit() keeps raising. Not logged once the
    # program exits and the exit hook closed this executor: a start failing
    # then is no news (CPython refuses new interpreters once it finalizes:
    # "Py_NewInterpreterFromConfig failed" was logged as a broken initializer
    # after shutdown(wait=False)).
    if not _global_shutdown:
        cause = broken.__cause__ or broken
        _LOGGER.critical(
            "Exception in initializer (or a preload import) of an interpreter; "
            "the InterpreterPoolExecutor is broken:",
            exc_info=cause,
        )
    engine.broken_message = str(_broken_error(engine))
    engine.close()


_LOGGER = _base.LOGGER


def _without_context_run(
    fn: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[object, tuple[Any, ...], dict[str, Any]]:
    """Unwrap asyncio.to_thread's ``partial(Context.run, func, *args, **kwargs)``.

    A contextvars.Context cannot cross to another interpreter, and its
    variables would mean nothing there: the function is called without it.
    """
    if type(fn) is functools.partial:
        run = fn.func
        if (
            type(getattr(run, "__self__", None)) is contextvars.Context
            and getattr(run, "__name__", None) == "run"
            and fn.args
        ):
            return fn.args[0], fn.args[1:] + args, {**fn.keywords, **kwargs}
    return fn, args, kwargs


def _chain_from_lists(results: Iterator[list[Any]]) -> Iterator[Any]:
    for chunk in results:
        chunk.reverse()
        while chunk:
            yield chunk.pop()


def _result_or_cancel(fut: concurrent.futures.Future[Any], timeout: float | None = None) -> Any:
    try:
        return fut.result(timeout)
    finally:
        fut.cancel()  # timed out: the call need not run any more


class _WorkerThread:
    """One entry of ``InterpreterPoolExecutor._threads``: an interpreter's worker thread.

    ThreadPoolExecutor keeps its ``threading.Thread`` objects there, and code
    reads the set's size or joins them after shutdown(). The executor's
    threads are not Python threads: this stands for one of them, and
    ``join()`` returns once the executor has shut down and destroyed its
    interpreters.
    """

    def __init__(self, name: str, closed: concurrent.futures.Future[Any]) -> None:
        self.name = name
        self.daemon = False
        self._closed = closed

    def is_alive(self) -> bool:
        return not self._closed.done()

    def join(self, timeout: float | None = None) -> None:
        concurrent.futures.wait([self._closed], _timeouts.executor_timeout(timeout))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {'alive' if self.is_alive() else 'stopped'}>"


# A ThreadPoolExecutor only by class: asyncio's loop.set_default_executor()
# accepts nothing else (TypeError since 3.11), and CPython 3.14's own
# InterpreterPoolExecutor derives from it too. ThreadPoolExecutor.__init__ is
# not called and every method is replaced: no thread runs the calls.
class InterpreterPoolExecutor(concurrent.futures.ThreadPoolExecutor):
    """A ``concurrent.futures.Executor`` whose calls run in interpreters with their own GIL.

    Args:
        max_workers: number of interpreters (default: the CPUs this process
            may use). ValueError if it is not positive.
        initializer: a module-level function each interpreter calls once at
            start, with ``initargs``. If it raises, the error is logged on the
            ``concurrent.futures`` logger and the executor is broken: the
            waiting futures get BrokenInterpreterPool, and so does submit().
        initargs: arguments of the initializer.
        preload: modules each interpreter imports at start.
        max_tasks_per_interpreter: replace an interpreter after it ran this many calls.
        thread_name_prefix: names the interpreters' OS threads
            (``prefix_<interpreter id>``; default ``InterpreterPoolExecutor-<n>``).
            Keyword-only: the second positional parameter is ``initializer``.
        forward_logging: True (default): what the interpreters log is handled
            by the main interpreter's logging (see InterpreterPool); False:
            workers log as plain interpreters do. Keyword-only.
        fallback: None (default) or ``"copy"``: each interpreter loads a
            private copy of an extension module that refuses interpreters,
            where its binaries allow it (see InterpreterPool). Keyword-only.
        context_vars: ``contextvars.ContextVar`` objects whose values in the
            context that calls ``submit()`` (or ``map()``, ``run_in_executor``,
            ``asyncio.to_thread``) hold in the interpreter for that call (see
            InterpreterPool). Keyword-only.

    The whole ``concurrent.futures`` contract: ``submit`` returns a
    ``Future``; ``map`` (with ``timeout``, ``chunksize`` and ``buffersize``);
    ``shutdown(wait=True, cancel_futures=False)``; the context manager;
    ``wait``/``as_completed``. A call counts as running (``running()``,
    not cancellable) from the moment an interpreter is assigned to it: at
    submit() when fewer calls than ``max_workers`` are in flight (the
    interpreters may still be starting), later when an interpreter takes it
    from the queue, as ProcessPoolExecutor counts the calls it handed to its
    processes. ``Future.cancel()`` and ``shutdown(cancel_futures=True)``
    withdraw the calls that are not running; a running one runs to its end
    (as in the standard executors). It works with
    ``loop.run_in_executor(executor, fn, *args)`` and as a loop's default
    executor (``loop.set_default_executor``); then ``asyncio.to_thread(fn,
    ...)`` runs fn in an interpreter too, without the caller's context
    variables (a Context cannot cross interpreters), except those named in
    ``context_vars``.

    Functions cross by reference (module and name) and must be module-level
    functions, builtins, picklable callables, or functions defined inside
    another function that capture nothing (those cross as code, with their
    module's globals). Arguments and results cross by copy. submit()
    raises NotShareableError at once if they cannot (the standard library's
    executor raises it from result()). Exceptions come back with their own
    type, caused by an ExecutionFailed carrying the remote traceback.

    Done-callbacks run on the executor's completion thread: keep them short
    and never block there on another future of the same executor.

    Thread-safety: every method may be called from any thread of the main
    interpreter, including from done-callbacks.
    """

    BROKEN = BrokenInterpreterPool

    def __init__(
        self,
        max_workers: int | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        preload: Iterable[str] = (),
        max_tasks_per_interpreter: int | None = None,
        *,
        thread_name_prefix: str = "",
        forward_logging: bool = True,
        fallback: str | None = None,
        context_vars: Iterable[contextvars.ContextVar[Any]] | None = None,
    ) -> None:
        if max_workers is None:
            max_workers = _lifecycle.default_size()
        elif isinstance(max_workers, bool) or not isinstance(max_workers, int):
            raise TypeError(f"max_workers must be an int or None, got {type(max_workers).__name__}")
        elif max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if isinstance(initializer, str):
            raise TypeError(
                f"initializer must be a callable, got the string {initializer!r}: scripts are not "
                "supported (the standard library's InterpreterPoolExecutor refuses them too), and "
                "the second positional parameter here is the initializer: pass "
                "thread_name_prefix=... by keyword"
            )
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if not isinstance(thread_name_prefix, str):
            raise TypeError(
                f"thread_name_prefix must be a str, got {type(thread_name_prefix).__name__}"
            )
        self._max_workers = max_workers
        self._thread_name_prefix = thread_name_prefix or (
            f"InterpreterPoolExecutor-{self._counter()}"  # type: ignore[attr-defined]
        )
        self._initializer = initializer  # type: ignore[assignment]
        self._initargs = initargs
        self._engine = _ExecutorEngine(
            max_workers,
            thread_name_prefix=self._thread_name_prefix,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            max_tasks_per_interpreter=max_tasks_per_interpreter,
            forward_logging=forward_logging,
            private_copies=_fallback.copies_only(fallback, "InterpreterPoolExecutor"),
            context_vars=context_vars,
        )
        self._lock = threading.Lock()
        self._shutdown = False
        self._completions: _hub.ThreadHub | None = None
        self._worker_threads: frozenset[_WorkerThread] = frozenset()
        self._engine.started_future.add_done_callback(functools.partial(_on_started, self._engine))
        # Dropped without shutdown(): finish the submitted calls, then destroy
        # the interpreters (the standard executors also wind down on collection).
        weakref.finalize(self, self._engine.close)

    # -- what ThreadPoolExecutor code reads ----------------------------------------

    @property
    def _broken(self) -> str | bool:  # type: ignore[override]
        """False, or why the executor is broken (ThreadPoolExecutor's attribute)."""
        return self._engine.broken_message or False

    @property
    def _threads(self) -> frozenset[_WorkerThread]:  # type: ignore[override]
        """One entry per interpreter once the executor started (ThreadPoolExecutor's attribute).

        Every interpreter starts at the first submit(): ``max_workers`` entries
        from then on, where ThreadPoolExecutor adds a thread when no idle
        one is left.
        """
        return self._worker_threads

    @property
    def _shutdown_lock(self) -> threading.Lock:  # type: ignore[override]
        return self._lock

    # -- submitting --------------------------------------------------------------

    def _check(self) -> None:
        if self._engine.broken is not None:
            raise _broken_error(self._engine)
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _global_shutdown:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    def _start(self) -> _hub.ThreadHub:
        with self._lock:
            self._check()
            if self._completions is None:
                self._completions = _hub.ThreadHub(self._engine)
                _live[self._completions] = self._engine
                self._worker_threads = frozenset(
                    _WorkerThread(f"{self._thread_name_prefix}_{i}", self._engine.closed_future)
                    for i in range(self._max_workers)
                )
                self._engine.start_workers()
            return self._completions

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Schedule fn(*args, **kwargs) in an interpreter; return its Future at once.

        The Future is already running (not cancellable) when an interpreter
        is free for it, or one is starting for it: when fewer than
        ``max_workers`` calls are in flight.

        Raises NotShareableError (a TypeError) here, before anything is
        queued, if fn or the arguments cannot cross; RuntimeError after
        shutdown(); BrokenInterpreterPool if the interpreters failed to start.
        """
        if type(fn) is functools.partial:
            fn, args, kwargs = _without_context_run(fn, args, kwargs)  # type: ignore[assignment]
        engine = self._engine
        payload = _jobs.call_payload(fn, args, kwargs, engine.context, nested=True)
        if self._shutdown or _global_shutdown or engine.broken is not None:
            self._check()
        owner = self._completions or self._start()
        tid = _lifecycle.next_task_id()
        # Fewer calls in flight than interpreters: one of them (idle, or
        # still starting) takes this call next; the queue is FIFO and the
        # calls ahead of it are running too. The count may include calls
        # that finished a moment ago and are not delivered yet (then this
        # one just stays cancellable); two threads racing here may both
        # count a free interpreter: the later call then waits for the next
        # free one, still running as promised, only later.
        state = _RUNNING if len(owner.pending) < self._max_workers else _PENDING
        fut = _futures.Future(owner, tid, state)
        # Registered before it is queued: its completion may come at once.
        owner.pending[tid] = fut
        try:
            engine.enqueue(tid, payload, owner.core, fn, args, kwargs)
        except BaseException as exc:
            owner.pending.pop(tid, None)
            if isinstance(exc, RuntimeError) and engine.queue_closed:
                # shutdown() (or the engine breaking) closed the queue meanwhile.
                self._check()
                raise RuntimeError("cannot schedule new futures after shutdown") from None
            raise
        return fut

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[Any]:
        """Like the builtin map(), the calls run in the interpreters; results in order.

        Every call is submitted at once, or with ``buffersize``, that many
        ahead of the results consumed: one more each time a result is taken
        (for long or infinite iterables). ``timeout`` (seconds from this call)
        makes the iteration raise TimeoutError when a result is not ready in
        time. ``chunksize`` > 1 sends the items in chunks of that size, one
        job per chunk (fewer round trips for many small items; ``buffersize``
        then counts chunks). The first failing call raises its exception when
        its result is reached; the calls not yet started are then cancelled.
        """
        if isinstance(chunksize, bool) or not isinstance(chunksize, int):
            raise TypeError(f"chunksize must be an int, got {type(chunksize).__name__}")
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None and (
            isinstance(buffersize, bool) or not isinstance(buffersize, int)
        ):
            raise TypeError("buffersize must be an integer or None")
        if buffersize is not None and buffersize < 1:
            raise ValueError("buffersize must be None or > 0")
        if chunksize == 1:
            return self._map(fn, zip(*iterables, strict=False), timeout, buffersize)
        _marshal.call_payload(fn, (), {}, nested=True)  # a lambda or closure: say so here
        chunks = itertools.batched(zip(*iterables, strict=False), chunksize)
        results = self._map(
            functools.partial(_chunks.run_chunk, _marshal.by_code(fn) or fn),
            ((chunk,) for chunk in chunks),
            timeout,
            buffersize,
        )
        return _chain_from_lists(results)

    def _map(
        self,
        fn: Callable[..., Any],
        calls: Iterator[tuple[Any, ...]],
        timeout: float | None,
        buffersize: int | None,
    ) -> Iterator[Any]:
        limit = _timeouts.executor_timeout(timeout)
        end = None if limit is None else limit + time.monotonic()
        if buffersize is None:
            futures = collections.deque(self.submit(fn, *args) for args in calls)
        else:
            futures = collections.deque(
                self.submit(fn, *args) for args in itertools.islice(calls, buffersize)
            )
        # The generator holds the executor weakly, as the standard map does:
        # an abandoned iterator does not keep it alive.
        executor_ref = weakref.ref(self) if buffersize is not None else None
        return self._results(futures, calls, fn, end, executor_ref)

    @staticmethod
    def _results(
        futures: collections.deque[Any],
        calls: Iterator[tuple[Any, ...]],
        fn: Callable[..., Any],
        end: float | None,
        executor_ref: weakref.ref[Any] | None,
    ) -> Iterator[Any]:
        try:
            while futures:
                if executor_ref is not None:
                    executor = executor_ref()
                    args = next(calls, None) if executor is not None else None
                    if args is not None:
                        futures.append(executor.submit(fn, *args))  # type: ignore[union-attr]
                    del executor
                # No local name for the future or its result: once yielded,
                # the iterator keeps no reference to either.
                if end is None:
                    yield _result_or_cancel(futures.popleft())
                else:
                    yield _result_or_cancel(futures.popleft(), end - time.monotonic())
        finally:
            for fut in futures:
                fut.cancel()

    # -- shutting down -----------------------------------------------------------

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting calls; with wait=True, return once they ran and the interpreters are gone.

        Calls already submitted run to their end, except, with
        ``cancel_futures=True``, those that are not running (see the class
        docstring): their futures are cancelled. Idempotent. With wait=False
        it returns at once and the interpreters are destroyed on a helper
        thread once the calls are done; the program does not exit before that.
        """
        with self._lock:
            self._shutdown = True
            owner = self._completions
        if cancel_futures and owner is not None:
            # In submission order: each withdrawal then finds its job at the head.
            for _, fut in sorted(list(owner.pending.items())):
                fut.cancel()
        self._engine.close()
        if wait:
            self._engine.closed_future.exception()
            if owner is not None:
                owner.join()

    # -- introspection -----------------------------------------------------------

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: size, state, busy, queued, submitted, replaced interpreters."""
        return self._engine.statistics()

    def __repr__(self) -> str:
        return (
            f"<aiosubinterp.InterpreterPoolExecutor max_workers={self._max_workers} "
            f"{self._engine.state}>"
        )

    # ThreadPoolExecutor internals that must never run here.
    def _adjust_thread_count(self) -> None:  # pragma: no cover
        raise NotImplementedError("InterpreterPoolExecutor runs no threads")

    def _initializer_failed(self) -> None:  # pragma: no cover
        raise NotImplementedError("InterpreterPoolExecutor runs no threads")
