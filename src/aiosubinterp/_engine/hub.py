"""Completions: the one road by which results reach their callers.

A completion hub is an ext-level wakeup fd plus a completion list
(``_core.Hub``); two kinds of consumer deliver from one:

LoopHub, one per running event loop: the loop watches the fd with
add_reader and resolves tasks from the completions; no thread is parked
per task and nothing polls. Workers of the interpreter backends post into
the C list; ProcessPool's reader threads hand their results over with
``post()``, into a Python list that the same wakeup drains. The hub, and the
loop's default pool, are closed when the loop shuts down its async
generators (asyncio.run and asyncio.Runner do) or, failing that
(loop.close() alone), when the loop is garbage-collected: its fd is closed,
its default pool's running tasks are interrupted and the pool is closed.

ThreadHub, one per InterpreterPoolExecutor: a thread of its own waits on
the fd (no event loop there) and completes concurrent futures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import select
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from aiosubinterp import _core
from aiosubinterp._engine import futures as _futures
from aiosubinterp._engine import jobs as _jobs
from aiosubinterp._engine.task import Task

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from aiosubinterp._engine.lifecycle import Lifecycle

__all__ = [
    "Completion",
    "LoopHub",
    "ThreadHub",
    "ThreadHubEngine",
    "hub_for",
    "running_loop",
    "wakeup_mechanism",
]

_RETIRED = _core.FLAG_RETIRED
_complete = _jobs.complete


class Completion(Protocol):
    """What waits in a hub's ``pending``: a Task, or a channel operation (_core.ChannelOp)."""

    def _deliver(self, status: int, value: object) -> None: ...

    def cancel(self) -> Any: ...


# loop -> weakref to its LoopHub. A running loop keeps its hub alive (the
# add_reader callback), and the hub refers back to the loop (its shutdown
# guard holds the loop's async-generator finalizer). Held strongly here, the
# hub would keep a loop closed without shutdown_asyncgens() (loop.close()
# outside asyncio.run) alive forever, with its wakeup fd and default pool.
_hubs: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_hubs_lock = threading.Lock()


class _Owned:
    """What a hub must release if its loop dies without shutting down: the fd, the default pool."""

    __slots__ = ("core", "default_pool")

    def __init__(self, core: Any) -> None:
        self.core = core
        self.default_pool = None


def _release(owned: _Owned) -> None:
    # Runs when the loop is collected (from the garbage collector, on any
    # thread, perhaps while this thread holds a pool's lock): hand the pool
    # to a helper thread; closing the fd takes no Python lock.
    pool, owned.default_pool = owned.default_pool, None
    if pool is not None:
        from aiosubinterp._engine import admin as _admin

        _admin.spawn(_close_orphan, pool)
    owned.core.close()


def _close_orphan(pool: Lifecycle) -> None:
    pool._interrupt_running()  # nobody can receive these results any more
    pool.close()


def wakeup_mechanism() -> str:
    """'eventfd' or 'pipe': what a new hub uses (AIOSUBINTERP_WAKEUP=pipe forces the pipe)."""
    forced = os.environ.get("AIOSUBINTERP_WAKEUP", "").strip().lower()
    if forced not in ("", "eventfd", "pipe"):
        raise ValueError(
            f"AIOSUBINTERP_WAKEUP={forced!r} is not a wakeup mechanism: use 'eventfd' or 'pipe'"
        )
    if forced == "pipe" or not _core.HAVE_EVENTFD:
        return "pipe"
    return "eventfd"


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} needs a running event loop: call it from async code (inside "
            "asyncio.run(...)), or use aiosubinterp.InterpreterPoolExecutor from plain threads"
        ) from None


class LoopHub:
    """Per-loop state: the completion hub, tasks in flight, the default pool.

    Thread-safety: ``post()`` from any thread; the rest belongs to the loop's thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.core = _core.Hub(use_pipe=wakeup_mechanism() == "pipe")
        # Task ids and channel-op tokens (_core keeps the two ranges apart).
        self.pending: dict[int, Completion] = {}
        self.closed = False
        # Results handed over by post(), in arrival order; the lock makes
        # "append, and was the list empty?" one step (the wakeup edge) and
        # orders post() against shutdown() setting `closed`.
        self._posted: list[tuple[Task, int, object]] = []
        self._posted_lock = threading.Lock()
        self._loop_ref = weakref.ref(loop)
        self._owned = _Owned(self.core)
        loop.add_reader(self.core.fileno(), self.drain)
        self._finalizer = weakref.finalize(loop, _release, self._owned)
        # Not at exit: the exit sweep (_core._shutdown_all) destroys the
        # interpreters, and a helper thread closing the pool meanwhile races it.
        self._finalizer.atexit = False
        # Started by hand so the loop registers it: it is closed (and our
        # finally runs) when the loop shuts down its async generators.
        self._guard = _shutdown_guard(self)
        try:
            self._guard.asend(None).send(None)
        except StopIteration:
            pass

    @property
    def default_pool(self) -> Any:
        """The pool aiosubinterp.run() uses on this loop (None until first use)."""
        return self._owned.default_pool

    @default_pool.setter
    def default_pool(self, pool: Any) -> None:
        self._owned.default_pool = pool

    def _wants(self, tid: int) -> bool:
        # A Task cancelled after its call finished stays in pending (its
        # completion still carries the worker's flags) but wants no value: it
        # is dropped undecoded, so the fds it carries are closed.
        task = self.pending.get(tid)
        return task is not None and not (isinstance(task, asyncio.Future) and task.done())

    def post(self, task: Task, status: int, value: object) -> None:
        """Complete task with (status, value) on the loop's thread: from any thread.

        The result joins the hub's posted list; the hub's fd is written only
        when that list was empty, so a burst of results costs one wakeup,
        and ``drain()`` delivers them in the order they were posted. A task
        done meanwhile (cancelled) ignores its result (``Task._deliver``). A
        loop that is closed or gone drops it: nobody waits any more.
        """
        loop = self._loop_ref()
        if loop is None or loop.is_closed():
            return
        with self._posted_lock:
            closed = self.closed
            if not closed:
                posted = self._posted
                posted.append((task, status, value))
                if len(posted) > 1:
                    return  # the wakeup for the first one is on its way
        if closed:
            # Shut down (loop.shutdown_asyncgens()) while the loop runs on:
            # its fd is no longer watched, so hand the result to the loop itself.
            try:
                loop.call_soon_threadsafe(task._deliver, status, value)
            except RuntimeError:  # it closed meanwhile: nobody waits any more
                pass
            return
        # False: the fd closed meanwhile (the loop was collected): dropped with the hub.
        self.core.wake()

    def drain(self) -> None:
        pending = self.pending
        for tid, status, flags, serial, value in self.core.drain(self._wants):
            task = pending.pop(tid, None)
            if task is None:
                continue
            task._deliver(status, value)
            if flags & _RETIRED and isinstance(task, Task):
                task._worker_retired(serial)  # the owner replaces the worker (TaskOwner)
        # After core.drain() cleared the fd: a result posted after this take
        # finds the list empty and writes the fd again, so none is lost.
        if self._posted:
            with self._posted_lock:
                posted, self._posted = self._posted, []
            rest = iter(posted)
            try:
                for task, status, value in rest:
                    task._deliver(status, value)
            except BaseException:
                self._repost(list(rest))  # for the next drain, in order: none is lost
                raise

    def _repost(self, results: list[tuple[Task, int, object]]) -> None:
        if not results:
            return
        with self._posted_lock:
            if self.closed:
                return
            self._posted[:0] = results
        self.core.wake()

    async def shutdown(self) -> None:
        if self.closed:
            return
        # Nobody can receive these results once the loop is gone: withdraw or
        # interrupt them, so closing the default pool does not wait for them.
        for task in list(self.pending.values()):
            task.cancel()
        pool, self.default_pool = self.default_pool, None
        try:
            if pool is not None:
                await pool.aclose()
        finally:
            with self._posted_lock:
                self.closed = True  # later post()s go to the loop directly
                posted, self._posted = self._posted, []
            loop = self._loop_ref()
            if loop is not None and not loop.is_closed():
                loop.remove_reader(self.core.fileno())
            self.core.close()
            self._finalizer.detach()
            with _hubs_lock:
                if loop is not None and _lookup(loop) is self:
                    del _hubs[loop]
            # Results posted since the last drain: the loop still runs (this is
            # its async-generator shutdown), so they are delivered, as drain would.
            for task, status, value in posted:
                task._deliver(status, value)


async def _shutdown_guard(hub: LoopHub) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await hub.shutdown()


def _lookup(loop: asyncio.AbstractEventLoop) -> LoopHub | None:
    ref = _hubs.get(loop)
    return None if ref is None else ref()


def hub_for(loop: asyncio.AbstractEventLoop) -> LoopHub:
    ref = _hubs.get(loop)  # _lookup(), inlined: this runs at every submit
    hub = None if ref is None else ref()
    if hub is None or hub.closed:
        with _hubs_lock:
            hub = _lookup(loop)
            if hub is None or hub.closed:
                hub = LoopHub(loop)
                _hubs[loop] = weakref.ref(hub)
    return hub


class ThreadHubEngine(Protocol):
    """What a ThreadHub asks of the engine whose completions it delivers (the executor's)."""

    @property
    def closed_future(self) -> concurrent.futures.Future[Any]:
        """Done once the engine closed: every completion has been posted."""

    def withdraw(self, tid: int) -> bool:
        """Take queued job tid off the queue; False if a worker took it."""

    def worker_retired(self, serial: int) -> None:
        """A completion said worker serial retired (max_tasks): replace it."""

    def remote_error(self, info: tuple[Any, ...]) -> BaseException:
        """The exception a STATUS_ERROR completion's value stands for."""

    def unfinished_error(self) -> BaseException:
        """The exception for a future still pending when the engine closed."""


class ThreadHub:
    """LoopHub's sibling for callers without an event loop: its own thread drains the hub.

    One per InterpreterPoolExecutor: the thread waits on the hub's fd and on
    a pipe written when the engine closed (every completion has been posted
    then: drain once more and exit), and completes the concurrent futures
    in ``pending``. Holds no reference to the executor, so an executor
    dropped without shutdown() is collected (its engine then closes and this
    thread ends). It is the FutureOwner of the futures it completes.

    Thread-safety: ``pending`` is shared with the submitting threads (single
    dict operations); ``join()`` from any thread.
    """

    def __init__(self, engine: ThreadHubEngine) -> None:
        self.engine = engine
        self.pending: dict[int, _futures.Future] = {}
        self.core = _core.Hub(use_pipe=wakeup_mechanism() == "pipe")
        self._wake_r, self._wake_w = os.pipe()
        self._wake_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="aiosubinterp-executor", daemon=True)
        self.thread.start()
        engine.closed_future.add_done_callback(self._wake)

    def _wake(self, _: object = None) -> None:
        with self._wake_lock:
            if self._wake_w >= 0:
                os.write(self._wake_w, b"\0")

    def withdraw(self, tid: int) -> bool:
        return self.engine.withdraw(tid)

    def is_running(self, tid: int) -> bool:
        # The process-wide registry, not the engine's list: a worker serves
        # jobs as soon as it is ready, a moment before the engine lists it.
        return any(current == tid for _, _, current in _core.live_workers())

    def _wait(self) -> Callable[[], object]:
        fds = (self.core.fileno(), self._wake_r)
        if hasattr(select, "poll"):
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            return poller.poll
        return functools.partial(select.select, fds, (), ())

    def _run(self) -> None:
        wait = self._wait()
        closed = self.engine.closed_future
        try:
            while True:
                wait()  # releases the GIL while there is nothing to deliver
                last = closed.done()  # read before draining: nothing can come after
                # Values of futures no longer pending are dropped undecoded.
                self._deliver(self.core.drain(self.pending.__contains__))
                if last:
                    break
        finally:
            leftovers = list(self.pending.values())
            self.pending.clear()
            for fut in leftovers:
                try:
                    fut.set_exception(self.engine.unfinished_error())
                except concurrent.futures.InvalidStateError:
                    pass
            with self._wake_lock:
                os.close(self._wake_w)
                self._wake_w = -1
            os.close(self._wake_r)
            self.core.close()

    def _deliver(self, completions: list[tuple[int, int, int, int, object]]) -> None:
        # No lock of ours is held here: set_result() runs the done-callbacks,
        # which may submit to the executor or cancel other futures.
        pending = self.pending
        engine = self.engine
        remote_error = engine.remote_error
        for tid, status, flags, serial, value in completions:
            if flags & _RETIRED:
                engine.worker_retired(serial)
            fut = pending.pop(tid, None)
            if fut is None:
                continue
            try:
                _complete(fut, status, value, None, remote_error)
            except concurrent.futures.InvalidStateError:
                pass  # cancelled through concurrent.futures.Future.cancel(fut) meanwhile

    def join(self) -> None:
        if threading.current_thread() is not self.thread:
            self.thread.join()
