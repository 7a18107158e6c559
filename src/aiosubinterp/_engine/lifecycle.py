"""The one lifecycle every pool shares: checks, states, start, close, run and map.

InterpreterPool, Interpreter, the InterpreterPoolExecutor's engine and
ProcessPool are all a ``Lifecycle``. They differ only in how a worker starts
(``_start_one``), how a job reaches a worker and how its completion comes
back. The states, in order::

    new --start()/first submit--> starting --first worker ready--> running
    starting --the first worker failed to start--> broken
    running --the last worker lost, no replacement--> broken
    any --close()--> closing --queued work done, workers gone--> closed

What a backend provides (each called as its docstring below says):

    _start_one()           start one worker and list it; its error or None
    _abort_start(broken)   start failed: stop the workers that did start
    _stop_taking_work()    closing: wake what waits for work
    _drain_and_stop()      run what is queued, then stop every worker
    _fail_queued(exc)      fail every queued job with exc
    _interrupt_running()   aclose() was cancelled: interrupt what runs
    _counts()              (busy, running, queued, completed) for statistics()
    _listed()              how many workers are listed (started and serving)
    submit(fn, ...)        queue a call; a Task (see task.TaskOwner)

A pool is running, and start() returns, once its FIRST worker is ready; that
one starts alone, the others once it is ready, and they join as they come up
while tasks queue (cold start: the first result waits for one interpreter's
creation, not for several sharing the cores). wait_ready() waits for all of
them. If the first fails to start, the pool is broken and the others never
start; one that fails later is handled as a failed replacement: logged, and
the pool goes on with the workers it has (broken if it has none).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import enum
import itertools
import logging
import os
import sys
import threading
import warnings
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, Self, cast

from aiosubinterp import _core, _quirks, _timeouts
from aiosubinterp._engine import admin as _admin
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine.task import Task
from aiosubinterp._errors import BrokenPoolError, PoolClosedError
from aiosubinterp._inside import marshal as _marshal

__all__ = ["Lifecycle", "default_size", "next_task_id", "windowed_map"]

_OUR_FILES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
_log = logging.getLogger("aiosubinterp")

# True once the process exits: set by an atexit hook that runs before _core's
# exit sweep (atexit runs the last registered first, and _core registered its
# sweep when this module imported it). A worker still starting in the
# background then fails (the sweep lets no new interpreter start): expected,
# not worth a warning.
_exiting = False


def _mark_exiting() -> None:
    global _exiting
    _exiting = True


atexit.register(_mark_exiting)

# next_task_id(): a process-unique task id (every backend's tasks share one
# counter). The counter's own __next__, with no Python frame around it: every
# submit of every backend calls it.
next_task_id: Callable[[], int] = itertools.count(1).__next__


class PoolState(enum.StrEnum):
    """Where a pool is in its one lifecycle (every pool kind, and the executor).

    new -> starting -> running (from the first worker ready on) -> closing ->
    closed; starting or running -> broken (an initializer or a start failed
    before any worker was ready, or the last worker was lost) -> closing ->
    closed. A str:
    ``statistics()["state"]`` shows the value.
    """

    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    BROKEN = "broken"
    CLOSING = "closing"
    CLOSED = "closed"

    @property
    def is_open(self) -> bool:
        """Work may be submitted (a new pool starts on its first task)."""
        return self in (PoolState.NEW, PoolState.STARTING, PoolState.RUNNING)

    @property
    def is_live(self) -> bool:
        """Started and not closing: a worker lost is replaced."""
        return self in (PoolState.STARTING, PoolState.RUNNING)

    @property
    def drains(self) -> bool:
        """Workers run what is queued: live, or closing (close finishes the queue)."""
        return self in (PoolState.STARTING, PoolState.RUNNING, PoolState.CLOSING)

    @property
    def is_shut(self) -> bool:
        """close() was called: closing or closed."""
        return self in (PoolState.CLOSING, PoolState.CLOSED)


def default_size() -> int:
    """Default number of workers: the CPUs this process may use."""
    count = getattr(os, "process_cpu_count", os.cpu_count)()
    return max(1, count or 1)


def main_ref() -> tuple[str, str] | None:
    """How a worker finds the user's script: by module name (-m) or by file."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) not in (None, "__main__"):
        return ("module", spec.name)
    path = getattr(main, "__file__", None)
    if isinstance(path, str) and path.endswith(".py"):
        return ("path", os.path.abspath(path))
    return None


def check_names(preload: object) -> tuple[str, ...]:
    """preload as a tuple of module names; a TypeError saying what is wrong otherwise."""
    if isinstance(preload, str):
        raise TypeError(
            f"preload must be an iterable of module names, not the string {preload!r}: "
            f"write preload=({preload!r},)"
        )
    try:
        names: tuple[object, ...] = tuple(preload)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"preload must be an iterable of module names, got {type(preload).__name__}"
        ) from None
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"preload must contain module names (str), got {name!r}")
    return cast("tuple[str, ...]", names)  # every item checked just above


def check_main_interpreter(what: str) -> None:
    if not _core.is_main_interpreter():
        raise RuntimeError(
            f"{what} can only be created in the main interpreter, and this code runs in "
            f"worker interpreter {_core.current_interpreter_id()}. If a worker imported your "
            "script to find a function, guard the script's top-level code with "
            "`if __name__ == '__main__':`."
        )


class Lifecycle:
    """States, start-up, shutdown, run() and map(), shared by every pool.

    Thread-safety: ``_lock`` guards the state and the backend's bookkeeping;
    ``_changed`` (a condition on it) is notified when workers are listed or
    leave, and when the state changes.
    """

    _kind = "pool"  # in messages: "this pool is closed"
    _unit = "interpreter"  # one worker, in messages
    _on_exit_without_close = "they are destroyed at exit otherwise"

    def __init__(
        self,
        size: int,
        *,
        preload: Iterable[str],
        initializer: Callable[..., object] | None,
        initargs: tuple[Any, ...],
        max_tasks: int | None,
        max_tasks_name: str,
        cancel_grace: float,
        concurrency: int = 1,
    ) -> None:
        """Check what every pool takes; a clear error, raised here, for a bad value."""
        check_main_interpreter(type(self).__name__)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int (number of {self._unit}s), got {size!r}")
        names = check_names(preload)
        if initializer is not None and not callable(initializer):
            raise TypeError(
                f"initializer must be callable or None, got {type(initializer).__name__}"
            )
        if not isinstance(initargs, tuple):
            raise TypeError(f"initargs must be a tuple, got {type(initargs).__name__}")
        if max_tasks is not None and (
            isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1
        ):
            raise ValueError(f"{max_tasks_name} must be None or a positive int, got {max_tasks!r}")
        # NaN would make a cancel wait forever; math.inf means "never replace".
        grace = _timeouts.seconds(cancel_grace, "cancel_grace")
        self._size = size
        self._concurrency = concurrency
        self._preload = names
        self._init_payload: object = None
        if initializer is not None:
            self._init_payload = _marshal.call_payload(initializer, initargs, {})
            try:
                self._check_crosses(self._init_payload)
            except Exception as exc:
                raise _marshal.explain_unshareable(initializer, initargs, {}, exc) from exc
        self._max_tasks = max_tasks or 0
        self._grace = grace
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._state = PoolState.NEW  # new, starting, running, broken, closing, closed
        self._broken: BaseException | None = None
        # Start-up (_start_all): _started settles when the first worker is
        # ready (or the start failed), _all_started when every start settled.
        self._starting = 0  # starts of the pool's workers not settled yet
        self._first_settled = False  # the first worker's start ended (the others start then)
        self._start_error: BaseException | None = None  # the first worker's start failed
        self._started: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._all_started: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._closed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._path: list[str] | None = None  # sys.path the workers have
        self._submitted = 0
        self._replaced = 0
        self._pid = os.getpid()
        # Warnings found while closing on a helper thread (an interpreter
        # abandoned because a task's thread still runs there): aclose() warns
        # them on its caller's thread; with no aclose() waiting, the helper
        # warns them itself when the close is over (_warn_due).
        self._warnings_due: list[str] = []
        self._aclosing = 0

    def _check_crosses(self, payload: object) -> None:
        """Raise if the initializer's call cannot reach a worker."""
        _core.dumps(payload)

    # -- start-up ---------------------------------------------------------------

    def _setup(self) -> tuple[Any, ...]:
        """What every worker gets at start: the script, preload, initializer, sys.path."""
        return (main_ref(), self._preload, self._init_payload, (tuple(self._path or ()),))

    def _ensure_started(self) -> None:
        with self._lock:
            if self._state is not PoolState.NEW:
                return
            self._state = PoolState.STARTING
            self._path = list(sys.path)
            self._starting = self._size
        _quirks.import_pickle_early()  # free-threaded 3.13, see _quirks
        self._start_all()

    def _start_all(self) -> None:
        """Start the first worker alone, on a helper thread; the others once it is ready.

        Alone, its creation has the cores to itself: the first result comes as
        soon as one interpreter can give it. Created at once, two interpreters
        slow each other down (the first took 16.5 ms instead of 10.8 on 3.14,
        2 cores), and on a loaded machine they share the process's CPU time.
        """
        self._spawn_starts(1)

    def _spawn_starts(self, count: int) -> None:
        for _ in range(count):
            try:
                _admin.spawn(self._start_counted)
            except BaseException as exc:  # noqa: BLE001 - no new thread (the program exits)
                self._start_settled(exc)

    def _start_counted(self) -> None:
        try:
            error = self._start_one()
        except BaseException as exc:  # noqa: BLE001 - settled as this worker's failure
            error = exc
        self._start_settled(error)

    def _start_settled(self, error: BaseException | None) -> None:
        """One start of the pool's workers ended: ready (error None) or failed."""
        first = late = False
        rest = 0
        with self._lock:
            self._starting -= 1
            if not self._first_settled:
                self._first_settled = True
                if error is None:
                    first = True
                    if self._state is PoolState.STARTING:
                        self._state = PoolState.RUNNING
                        self._changed.notify_all()
                    # Closing meanwhile: the others still start, to serve what is
                    # queued (the executor counts calls handed to them as running).
                    rest = self._starting if self._state.drains else 0
                else:
                    self._start_error = error
                if rest == 0:  # failed (or closed): the others never start
                    self._starting = 0
            elif error is not None:
                late = self._state.is_live
            last = self._starting == 0
            start_error = self._start_error
        if first and not self._started.done():
            self._started.set_result(None)
        if late:
            self._late_start_failed(cast("BaseException", error))
        if rest:
            self._spawn_starts(rest)
        if last:
            if start_error is not None:
                self._fail_start(start_error)
            self._all_started.set_result(None)

    def _fail_start(self, cause: BaseException) -> None:
        """The first worker failed to start (the others were not started): broken."""
        broken = BrokenPoolError(
            f"the {self._kind} could not start its {self._unit}s: {type(cause).__name__}: {cause}"
        )
        broken.__cause__ = cause
        with self._lock:
            self._broken = broken
            if self._state is PoolState.STARTING:
                self._state = PoolState.BROKEN
        self._abort_start(broken)
        self._fail_queued(broken)
        if not self._started.done():
            self._started.set_exception(broken)

    def _late_start_failed(self, error: BaseException) -> None:
        """A worker failed to start after the first was ready: as a failed replacement."""
        if _exiting:
            _log.debug("a %s of %r did not start: the process is exiting", self._unit, self)
            return
        with self._lock:
            alone = self._listed() == 0
        if alone:
            self._break(error)
            return
        _log.warning(
            "a %s of %r failed to start after the first one was ready; the %s goes "
            "on with the %ss it has",
            self._unit,
            self,
            self._kind,
            self._unit,
            exc_info=error,
        )

    def _break(self, error: BaseException) -> None:
        """The last worker is gone and its replacement failed to start: the pool is broken."""
        broken = BrokenPoolError(f"the {self._kind} lost its last {self._unit}: {error}")
        broken.__cause__ = error
        with self._lock:
            self._broken = broken
            if self._state is PoolState.RUNNING:
                self._state = PoolState.BROKEN
        self._fail_queued(broken)

    async def start(self) -> None:
        """Start the workers now (off the loop thread) and wait until the first is ready.

        Returns as soon as one worker is ready: the first starts alone (the
        fastest way to a first result), the others start then and join the
        pool as they come up (tasks queue meanwhile and run on the workers
        that are ready; ``statistics()["starting"]`` counts the others).
        ``await wait_ready()`` waits for all of them. Optional: the first
        submit starts the workers too.

        Raises BrokenPoolError if the first worker cannot start (a preload
        import or the initializer raised); the others are then not started.
        A worker that fails to start later is logged (logger
        ``aiosubinterp``) and the pool goes on with the others, as when a
        replacement fails to start.

        Cancellation: the workers keep starting; close() still cleans up.
        """
        loop = _hub.running_loop(f"{type(self).__name__}.start()")
        if self._state.is_shut:
            raise PoolClosedError(f"this {self._kind} is closed: create a new one")
        self._ensure_started()
        await asyncio.shield(_admin.relay(self._started, loop))

    async def wait_ready(self) -> None:
        """Start the workers if needed, and wait until every one has started.

        ``start()`` and ``async with`` return once the first worker is ready;
        this waits for the others too (for a warm pool before timing it, or
        before work that needs every worker at once). Each start has ended
        when it returns; a worker that failed to start after the first one
        was ready is missing (logged, see start()).

        Raises:
            BrokenPoolError: no worker could start, or the pool lost its last one.
            PoolClosedError: the pool is closed, or was closed while its workers started.

        Cancellation: the workers keep starting; close() still cleans up.
        """
        loop = _hub.running_loop(f"{type(self).__name__}.wait_ready()")
        if self._state.is_shut:
            raise PoolClosedError(f"this {self._kind} is closed: create a new one")
        self._ensure_started()
        await asyncio.shield(_admin.relay(self._all_started, loop))
        if self._broken is not None:
            raise BrokenPoolError(str(self._broken)) from self._broken
        if self._state.is_shut:
            raise PoolClosedError(f"this {self._kind} was closed while its {self._unit}s started")

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except Exception:
            # The caller never gets the pool to close: close it here, and
            # wait for what did start unless the start was interrupted.
            await self.aclose()
            raise
        except BaseException:
            self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- shutdown ------------------------------------------------------------------

    def _begin_close(self) -> str | None:
        """Move to closing. The state before, or None if closing began already."""
        if self._pid != os.getpid():
            # A forked child's copy: the workers belong to the parent;
            # joining their threads from here would hang. Just drop it.
            self._state = PoolState.CLOSED
            return None
        with self._lock:
            state = self._state
            if state.is_shut:
                return None
            self._state = PoolState.CLOSING
            self._changed.notify_all()
        self._stop_taking_work()
        return state

    def close(self) -> None:
        """Stop accepting work; finish what was submitted, then stop the workers.

        Returns at once; the workers stop on a helper thread. ``await
        aclose()`` to wait for that. Idempotent.
        """
        state = self._begin_close()
        if state is PoolState.NEW:
            self._finish_close()
        elif state is not None:
            _admin.spawn(self._shutdown)

    def _shutdown(self) -> None:
        try:
            self._all_started.exception()  # wait until every start settled
        except concurrent.futures.CancelledError:
            pass
        self._drain_and_stop()
        self._finish_close()
        with self._lock:
            nobody_waits = self._aclosing == 0
        if nobody_waits:
            self._warn_due()

    def _warn_later(self, message: str) -> None:
        """Queue a RuntimeWarning for the closer; warn now if the pool is not closing."""
        with self._lock:
            self._warnings_due.append(message)
            closing = self._state.is_shut
        if not closing:  # a worker replaced while the pool runs: nobody else will
            self._warn_due()

    def _warn_due(self) -> None:
        with self._lock:
            due, self._warnings_due = self._warnings_due, []
        for message in due:
            # Attributed to the caller's line (await pool.aclose()), past our frames.
            warnings.warn(message, RuntimeWarning, stacklevel=2, skip_file_prefixes=_OUR_FILES)

    def _finish_close(self) -> None:
        self._fail_queued(
            PoolClosedError(f"this {self._kind} was closed before the task could run")
        )
        with self._lock:
            self._state = PoolState.CLOSED
            self._changed.notify_all()
        if not self._started.done():
            self._started.set_exception(PoolClosedError(f"this {self._kind} is closed"))
        if not self._closed.done():
            self._closed.set_result(None)

    async def aclose(self) -> None:
        """Close and wait until every worker is gone.

        Submitted tasks run to completion first. Threads a task started and
        left running get cancel_grace seconds to end; an interpreter where one
        still runs then is abandoned (CPython cannot destroy it), with a
        RuntimeWarning naming the threads.

        Cancellation: if the wait is cancelled, the tasks still running are
        interrupted; the shutdown completes in the background.
        """
        loop = _hub.running_loop(f"{type(self).__name__}.aclose()")
        with self._lock:
            self._aclosing += 1
        try:
            self.close()
            if self._pid != os.getpid():
                return
            try:
                await asyncio.shield(_admin.relay(self._closed, loop))
            except asyncio.CancelledError:
                self._interrupt_running()
                raise
        finally:
            with self._lock:
                self._aclosing -= 1
        self._warn_due()

    # warnings.warn bound at definition: at interpreter exit module globals
    # may already be None when this runs (seen on the free-threaded 3.13t,
    # whose finalization collects an unclosed pool later than a GIL build).
    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        state = getattr(self, "_state", "closed")
        if state not in ("closed", "closing", "new"):
            _warn(
                f"unclosed {self!r}: close it (async with, or await aclose()) to stop its "
                f"{self._unit}s; {self._on_exit_without_close}",
                ResourceWarning,
                source=self,
                stacklevel=2,
            )
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    # -- submitting ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._pid != os.getpid():
            raise RuntimeError(
                f"this {self._kind} was created in process {self._pid}, and this is a forked "
                f"child ({os.getpid()}): its {self._unit}s stayed in the parent. Create a new "
                "pool in the child, or use the 'spawn' or 'forkserver' start method."
            )
        state = self._state
        if state.is_shut:
            raise PoolClosedError(f"this {self._kind} is closed: create a new one to run more work")
        if state is PoolState.BROKEN:
            raise BrokenPoolError(str(self._broken)) from self._broken

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        raise NotImplementedError

    async def run(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
        """Run fn(*args, **kwargs) in a worker and return its result.

        Like ``asyncio.to_thread``, but on another core. Exceptions come back
        with their own type, caused by an ExecutionFailed that carries the
        remote traceback. An ``async def`` function (or one that returns a
        coroutine) runs to completion on an asyncio loop owned by the worker
        (in an interpreter: CPython 3.13+; 3.12 raises RuntimeError at once,
        because it aborts at exit once a loop ran in a subinterpreter).

        Cancellation: a queued call is withdrawn; a running one is interrupted
        (KeyboardInterrupt inside it; a coroutine is cancelled instead, so its
        ``finally`` blocks and ``except CancelledError`` run on the worker's
        loop), and its worker is replaced if it does not stop within the
        grace period.
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
        """Yield fn(item) for every item, computed in the workers.

        At most ``window`` calls are in flight (default: 8 per worker slot,
        at least 64), so a long or endless iterable streams. With
        ``ordered=False`` results come as they finish. The first failure is
        raised at its place and the calls still in flight are cancelled.

        Cancellation: closing or cancelling the iteration cancels every call in flight.
        """
        if window is None:
            window = max(64, 8 * self._size * self._concurrency)
        return windowed_map(self.submit, fn, iterable, ordered=ordered, window=window)

    # -- introspection -------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of workers."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._state.is_shut

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: size, concurrency, state, starting, busy, running, queued, submitted,
        completed, replaced.

        ``starting`` counts the workers of the pool's start that are not
        ready yet (start() and ``async with`` return once the first is).

        ``busy`` counts workers running at least one call, ``running`` the
        calls running (several per interpreter with
        ``concurrency_per_interpreter`` > 1). ``completed`` counts calls that
        ran to their end in a worker (with a result, an error, or interrupted
        by cancellation); withdrawn calls and calls failed because the pool
        closed or broke are not counted. ``replaced`` counts workers given up
        after they ignored a cancellation (or, for processes, that died).
        """
        busy, running, queued, completed = self._counts()
        return {
            "size": self._size,
            "concurrency": self._concurrency,
            "state": self._state.value,
            "starting": self._starting,
            "busy": busy,
            "running": running,
            "queued": queued,
            "submitted": self._submitted,
            "completed": completed,
            "replaced": self._replaced,
        }

    def __repr__(self) -> str:
        return f"<aiosubinterp.{type(self).__name__} size={self._size} {self._state}>"

    # -- what a backend provides ---------------------------------------------------

    def _start_one(self) -> BaseException | None:
        """Start one worker and list it (blocking, on a helper thread); its error or None."""
        raise NotImplementedError

    def _abort_start(self, broken: BaseException) -> None:
        """Start-up failed (state is broken): stop the workers that did start."""
        raise NotImplementedError

    def _stop_taking_work(self) -> None:
        """The pool is closing: wake whatever waits for new work."""
        raise NotImplementedError

    def _drain_and_stop(self) -> None:
        """Blocking, on a helper thread: run what is queued, then stop every worker."""
        raise NotImplementedError

    def _fail_queued(self, exc: BaseException) -> None:
        """Fail every job still queued with exc."""
        raise NotImplementedError

    def _interrupt_running(self) -> None:
        """aclose() was cancelled: interrupt every task that runs."""
        raise NotImplementedError

    def _counts(self) -> tuple[int, int, int, int]:
        """(busy, running, queued, completed) for statistics()."""
        raise NotImplementedError

    def _listed(self) -> int:
        """How many workers are listed (lock held): started, serving, not given up on."""
        raise NotImplementedError


async def windowed_map(
    submit: Callable[..., asyncio.Future[Any]],
    fn: Callable[..., object],
    iterable: Iterable[Any] | AsyncIterable[Any],
    *,
    ordered: bool,
    window: int,
) -> AsyncIterator[Any]:
    """The loop behind every pool's map(): fn(item) through submit, at most
    ``window`` in flight, in order or as they finish; the first failure is
    raised at its place and the calls in flight are cancelled."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if not callable(fn):
        raise TypeError(f"map() needs a callable, got {type(fn).__name__}")
    if hasattr(iterable, "__aiter__"):
        source: Any = iterable.__aiter__()
        is_async = True
    else:
        source = iter(iterable)
        is_async = False
    inflight: collections.deque[asyncio.Future[Any]] = collections.deque()
    exhausted = False
    try:
        while True:
            while not exhausted and len(inflight) < window:
                try:
                    item = await source.__anext__() if is_async else next(source)
                except (StopIteration, StopAsyncIteration):
                    exhausted = True
                    break
                inflight.append(submit(fn, item))
            if not inflight:
                return
            if ordered:
                task = inflight.popleft()
                yield await task
            else:
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                for task in list(inflight):
                    if task in done:
                        inflight.remove(task)
                        yield task.result()
    finally:
        for task in inflight:
            task.cancel()
