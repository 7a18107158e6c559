"""The executor's futures: a concurrent.futures.Future made cheap to create.

What InterpreterPoolExecutor.submit() returns. Its Condition is made on
first need, and cancel() withdraws a queued job from the engine's queue
(a started job cannot be cancelled, as with the standard executors).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from concurrent.futures import _base
from typing import Any, Protocol

from aiosubinterp import _timeouts

__all__ = ["Future"]

_PENDING = _base.PENDING
_RUNNING = _base.RUNNING
_FINISHED = _base.FINISHED
_CANCELLED = _base.CANCELLED
_CANCELLED_AND_NOTIFIED = _base.CANCELLED_AND_NOTIFIED
_LOGGER = _base.LOGGER


class FutureOwner(Protocol):
    """What a Future asks of the executor side that made it (hub.ThreadHub)."""

    pending: dict[int, Any]  # tid -> Future, still to be completed

    def withdraw(self, tid: int) -> bool:
        """Take the queued job off the queue; False if a worker took it."""

    def is_running(self, tid: int) -> bool: ...


# Guards the creation of a future's Condition (see _Future).
_lazy_lock = threading.Lock()
_DONE = frozenset((_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED))
_LOGGER = _base.LOGGER
_Callback = Callable[["concurrent.futures.Future[Any]"], object]


class Future(concurrent.futures.Future):  # type: ignore[type-arg]
    """A Future whose cancel() withdraws the queued job; a started job cannot be cancelled.

    Its ``threading.Condition`` (and its list of waiters) is created on first need (a thread that
    waits, concurrent.futures.wait(), cancel(), repr()): most futures, such
    as those awaited through loop.run_in_executor(), never need one, and it
    is most of what a Future costs to make and to garbage-collect. Until it
    exists, state changes happen under ``_lazy_lock``; whoever creates it
    takes that lock too, so it sees every change made without it, and every
    change after it goes through the Condition (the stdlib's code paths).
    """

    def __init__(self, owner: FutureOwner, tid: int, state: str = _PENDING) -> None:
        # concurrent.futures.Future.__init__ (3.12, 3.13), minus the Condition.
        self._cond: threading.Condition | None = None
        self._state = state
        self._result = None
        self._exception: BaseException | None = None
        self._waiter_list: list[Any] | None = None
        self._done_callbacks: list[_Callback] = []
        self._owner = owner
        self._tid = tid

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        cond = self._cond
        if cond is None:
            with _lazy_lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
        return cond

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        # Only concurrent.futures.wait() and as_completed() add waiters: most
        # futures never need the list either.
        waiters = self._waiter_list
        if waiters is None:
            with _lazy_lock:
                waiters = self._waiter_list
                if waiters is None:
                    waiters = self._waiter_list = []
        return waiters

    # -- lock-free reads: a single attribute read is atomic --------------------------

    def done(self) -> bool:
        return self._state in _DONE

    def cancelled(self) -> bool:
        return self._state == _CANCELLED or self._state == _CANCELLED_AND_NOTIFIED

    def result(self, timeout: float | None = None) -> Any:
        timeout = _timeouts.executor_timeout(timeout)
        if self._state == _FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None  # type: ignore[assignment]  # break the cycle, as the stdlib does
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        timeout = _timeouts.executor_timeout(timeout)
        if self._state == _FINISHED:
            return self._exception
        return super().exception(timeout)

    # -- state changes -----------------------------------------------------------------

    def add_done_callback(self, fn: _Callback) -> None:
        with _lazy_lock:
            if self._cond is not None:
                now = None
            elif self._state in _DONE:
                now = True
            else:
                self._done_callbacks.append(fn)
                return
        if now is None:
            super().add_done_callback(fn)
            return
        try:
            fn(self)
        except Exception:
            _LOGGER.exception("exception calling callback for %r", self)

    def _finish_fast(self, attr: str, value: object) -> bool:
        """Store the outcome without a Condition when no thread waits yet; False if one does."""
        with _lazy_lock:
            if self._cond is not None:
                return False
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            setattr(self, attr, value)
            self._state = _FINISHED
        self._invoke_callbacks()  # type: ignore[attr-defined]
        return True

    def set_result(self, result: Any) -> None:
        if not self._finish_fast("_result", result):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._finish_fast("_exception", exception):
            super().set_exception(exception)

    def cancel(self) -> bool:
        """Cancel the call if it has not started; return False if it runs or has finished."""
        with self._condition:
            state = self._state
            if state in (_CANCELLED, _CANCELLED_AND_NOTIFIED):
                return True
            if state != _PENDING:
                return False
            if not self._owner.withdraw(self._tid):
                # A worker took it: it runs (or ran), as RUNNING in the stdlib's
                # executors, which never cancel a started call either.
                self._state = _RUNNING
                return False
            self._owner.pending.pop(self._tid, None)
            self._notify_cancelled()
        self._invoke_callbacks()  # type: ignore[attr-defined]
        return True

    def running(self) -> bool:
        with self._condition:
            if self._state == _PENDING and self._owner.is_running(self._tid):
                self._state = _RUNNING
            return self._state == _RUNNING

    def _notify_cancelled(self) -> None:
        # Caller holds self._condition. The job will never run: notify the
        # waiters now (the stdlib's executors do it with
        # set_running_or_notify_cancel() when they skip the job), so wait()
        # and as_completed() see the future as done.
        self._state = _CANCELLED_AND_NOTIFIED
        for waiter in self._waiters:
            waiter.add_cancelled(self)
        self._condition.notify_all()

    def _set_cancelled_by_worker(self) -> None:
        """The worker reported the call as interrupted (only at process exit; jobs.complete)."""
        with self._condition:
            if self._state not in (_PENDING, _RUNNING):
                return
            self._notify_cancelled()
        self._invoke_callbacks()  # type: ignore[attr-defined]
