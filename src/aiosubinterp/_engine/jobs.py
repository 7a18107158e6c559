"""A call as a job, for every backend: how it is encoded, and how its outcome reaches the caller.

InterpreterPool and Interpreter (a ``Task`` on the submitting loop), the
InterpreterPoolExecutor (a ``concurrent.futures.Future``) and ProcessPool (a
``Task``, its job sent over a socket) make a call's payload, refuse what
cannot cross, and complete the caller's future with these functions:

    call_payload(fn, args, kwargs, context)    the payload a worker resolves and calls
    output_bits(forwarding)                    which of main's streams workers write to
    encode_error(exc, payload, fn, ...)        what submit() raises when the job does not encode
    complete(fut, status, value, name)         a finished job's outcome, set on its future
    error_value(exc)                           a local failure as a job's STATUS_ERROR value

The interpreter backends put the job on their C queue with
``_InterpreterBackend._enqueue`` (aiosubinterp._engine.pool); ProcessPool writes it to a
worker process (aiosubinterp._process.pool).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

from aiosubinterp import _core
from aiosubinterp._engine import context as _context
from aiosubinterp._errors import ExecutionFailed, NotShareableError, rebuild
from aiosubinterp._inside import marshal as _marshal

__all__ = ["JobFuture", "call_payload", "complete", "encode_error", "error_value", "output_bits"]

_call_payload = _marshal.call_payload
_OK = _core.STATUS_OK
_ERROR = _core.STATUS_ERROR
_LOCAL_ERROR = _core.STATUS_LOCAL_ERROR


def call_payload(
    fn: object, args: tuple[Any, ...], kwargs: dict[str, Any], context: Any, *, nested: bool = False
) -> tuple[object, ...]:
    """The payload that asks a worker to call fn(*args, **kwargs).

    ``(module, qualname, args, kwargs)``, plus the caller's values of the
    pool's ``context_vars`` (context: what ``_context.locate`` found; empty or
    None when the pool has none). nested: the executor's rule, a nested
    function that captures nothing crosses as its code.
    """
    if nested:
        payload = _marshal.call_payload(fn, args, kwargs, nested=True)
    else:
        payload = _call_payload(fn, args, kwargs)  # the interpreter pools' every submit
    if context:
        payload = (*payload, _context.values(context))
    return payload


def output_bits(forwarding: bool) -> int:
    """Main's stdout/stderr replaced (redirect_stdout, capsys, ipykernel): bit 1 stdout,
    bit 2 stderr; the workers then send what they write there. 0 when not forwarding."""
    if not forwarding:
        return 0
    return (sys.stdout is not sys.__stdout__) | (sys.stderr is not sys.__stderr__) << 1


def encode_error(
    exc: BaseException,
    payload: object,
    fn: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    *,
    nested: bool = False,
) -> BaseException:
    """What submit() raises when encoding its job raised exc.

    exc itself when it is not about the values (NotShareableError,
    MemoryError, KeyboardInterrupt and other BaseExceptions); otherwise a
    NotShareableError naming the part that cannot cross: the context
    variable, the argument path, or (fn None) the source text of an exec.
    """
    if isinstance(exc, (NotShareableError, MemoryError)) or not isinstance(exc, Exception):
        return exc
    if fn is None:
        return NotShareableError(f"cannot send the source text to an interpreter: {exc}")
    if type(payload) is tuple and len(payload) > 4:  # the context values (call_payload)
        found = _context.explain(payload[4])
        if found is not None:
            return found
    error: BaseException = _marshal.explain_unshareable(fn, args, kwargs or {}, exc, nested=nested)
    return error


class JobFuture(Protocol):
    """What complete() sets: a Task, or the executor's Future."""

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...

    def _set_cancelled_by_worker(self) -> None:
        """The job reported STATUS_CANCELLED: mark the future cancelled, asking no owner."""


def complete(
    fut: JobFuture,
    status: int,
    value: object,
    name: str | None = None,
    rebuild_error: Callable[[Any], BaseException] = rebuild,
) -> None:
    """Set a finished job's outcome on its future: the one status -> outcome mapping.

    status is one of ``_core.STATUS_*``. OK: value is the result. ERROR: value
    describes the remote exception, which ``rebuild_error`` turns into the
    exception to raise (by default the exception with its own type, caused by
    an ExecutionFailed that carries the remote traceback). LOCAL_ERROR: value
    is the exception raised here while rebuilding the result; the caller gets
    an ExecutionFailed caused by it. CANCELLED (or anything else): the job was
    cancelled where it ran. name: the task's name for messages (None: "the call").
    """
    if status == _OK:
        fut.set_result(value)
    elif status == _ERROR:
        fut.set_exception(rebuild_error(value))
    elif status == _LOCAL_ERROR:
        what = "the call" if name is None else f"the task {name!r}"
        err = ExecutionFailed(
            f"{what} finished, but its result could not be rebuilt in this "
            f"interpreter: {type(value).__name__}: {value}"
        )
        err.__cause__ = value  # type: ignore[assignment]
        fut.set_exception(err)
    else:
        fut._set_cancelled_by_worker()


def error_value(exc: BaseException) -> tuple[Any, ...]:
    """A failure found here (a worker process that died, a pool that closed or broke) as
    a job's STATUS_ERROR value: complete() then raises exc itself to the caller."""
    return (f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc), "", exc)
