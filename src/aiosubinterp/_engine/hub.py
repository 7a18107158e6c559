"""Event-loop integration: one completion hub per running loop.

A hub is an ext-level wakeup fd plus a completion list. Its loop watches the
fd with add_reader and resolves tasks from the completions; no thread is
parked per task and nothing polls. The hub, and the loop's default pool, are
closed when the loop shuts down its async generators (asyncio.run and
asyncio.Runner do) or, failing that (loop.close() alone), when the loop is
garbage-collected: its fd is closed, its default pool's running tasks are
interrupted and the pool is closed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any, Protocol

from aiosubinterp import _core
from aiosubinterp._engine.task import Task

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

    from aiosubinterp._engine.lifecycle import Lifecycle

__all__ = ["Completion", "LoopHub", "hub_for", "running_loop", "wakeup_mechanism"]

_RETIRED = _core.FLAG_RETIRED


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
    """Per-loop state: the completion hub, tasks in flight, the default pool."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.core = _core.Hub(use_pipe=wakeup_mechanism() == "pipe")
        # Task ids and channel-op tokens (_core keeps the two ranges apart).
        self.pending: dict[int, Completion] = {}
        self.closed = False
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

    def drain(self) -> None:
        pending = self.pending
        for tid, status, flags, serial, value in self.core.drain(self._wants):
            task = pending.pop(tid, None)
            if task is None:
                continue
            task._deliver(status, value)
            if flags & _RETIRED and isinstance(task, Task):
                task._worker_retired(serial)  # the owner replaces the worker (TaskOwner)

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
            self.closed = True
            loop = self._loop_ref()
            if loop is not None and not loop.is_closed():
                loop.remove_reader(self.core.fileno())
            self.core.close()
            self._finalizer.detach()
            with _hubs_lock:
                if loop is not None and _lookup(loop) is self:
                    del _hubs[loop]


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
