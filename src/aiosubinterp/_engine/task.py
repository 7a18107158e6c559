"""Task: an asyncio future for work running in an interpreter."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from aiosubinterp._engine import jobs as _jobs

__all__ = ["Task", "TaskOwner"]

_complete = _jobs.complete


class TaskOwner(Protocol):
    """What made a Task, and what the Task asks of it: the task-owner protocol.

    Every pool (aiosubinterp._engine.lifecycle.Lifecycle and its backends), the
    process fallback's router and DaskPool are owners. The owner creates the
    Task on the loop that submitted the call, and completes it on that loop's
    thread with ``Task._deliver(status, value)`` (status: one of
    ``_core.STATUS_*``; value: the result, a remote error description, or a
    local exception; aiosubinterp._engine.jobs.complete maps them). The Task
    calls its owner, from its loop's thread, only through these methods, and
    mypy checks that every owner has them:

    ``_cancel_task(task)``
        ``task.cancel()`` was called while the task was pending: withdraw the
        call if it is queued, interrupt it if it runs. It must not block and
        must not complete the task (the Task marks itself cancelled); a
        completion that arrives later is ignored.

    ``_on_retired(serial)``
        The worker that ran the task retired after it (max_tasks reached):
        replace it. Called right after the task's completion by the loop's hub
        (aiosubinterp._engine.hub), through ``Task._worker_retired``, for
        tasks whose completion carries the worker's retirement: those of the
        interpreter backends. Owners whose workers retire otherwise (ProcessPool's
        reader threads, Dask's cluster) or that run no workers (the process
        fallback's router) implement it as a no-op.
    """

    def _cancel_task(self, task: Task) -> None: ...

    def _on_retired(self, serial: int) -> None: ...


class Task(asyncio.Future[Any]):
    """A function call submitted to an interpreter; await it for the result.

    It is an ``asyncio.Future``: ``await``, ``done()``, ``cancelled()``,
    ``result()``, ``exception()``, ``add_done_callback()``, ``asyncio.wait``,
    ``gather`` and ``wait_for`` all work. ``cancel()`` withdraws the call if it
    has not started; if it runs, it is interrupted inside its interpreter
    (``KeyboardInterrupt`` raised in the running code), and a worker that
    does not stop within the pool's grace period is replaced.

    Thread-safety: like any asyncio future, use it from its loop's thread.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, owner: TaskOwner, tid: int, name: str, hub: Any
    ) -> None:
        super().__init__(loop=loop)
        self._owner = owner
        self._tid = tid
        self._name = name
        self._hub = hub

    @property
    def id(self) -> int:
        """Process-unique id of this task."""
        return self._tid

    @property
    def name(self) -> str:
        return self._name

    def get_name(self) -> str:
        return self._name

    def set_name(self, value: object) -> None:
        self._name = str(value)

    def cancel(self, msg: object = None) -> bool:
        if self.done():
            return False
        self._owner._cancel_task(self)
        return super().cancel(msg=msg)

    def _deliver(self, status: int, value: object) -> None:
        if self.done():
            return
        _complete(self, status, value, self._name)

    def _set_cancelled_by_worker(self) -> None:
        super().cancel()

    def _worker_retired(self, serial: int) -> None:
        """The completion said the worker that ran this task retired: tell the owner."""
        self._owner._on_retired(serial)

    def __repr__(self) -> str:
        if self.cancelled():
            state = "cancelled"
        elif self.done():
            state = "finished"
        else:
            state = "pending"
        return f"<aiosubinterp.Task {self._name!r} id={self._tid} {state}>"
