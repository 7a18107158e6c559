"""Worker functions and context variables for tests/test_context_vars.py."""

from __future__ import annotations

import contextvars
import logging
import threading

from aiosubinterp import _core

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")
trace = contextvars.ContextVar("trace", default="no-trace")
# Imported under another name here: found as ctxfuncs.tenant all the same.
tenant_var = contextvars.ContextVar("tenant")

# A global that is a ContextVar only in the main interpreter, and one that
# exists only there: the worker-side failures of a context variable.
if _core.is_main_interpreter():
    not_a_var_in_workers: object = contextvars.ContextVar("not_a_var_in_workers")
    only_in_main = contextvars.ContextVar("only_in_main")
else:
    not_a_var_in_workers = "a str in workers"

log = logging.getLogger("ctxtest.app")
UNSET = "<unset>"


def read() -> tuple[str, str, object]:
    return request_id.get(UNSET), trace.get(), tenant_var.get(UNSET)


def set_and_read(value: str) -> tuple[str, str, object]:
    """Sets request_id and does not reset it: the worker resets it after the task."""
    request_id.set(value)
    return read()


async def aread() -> tuple[str, str, object]:
    import asyncio

    await asyncio.sleep(0)
    return read()


_arrived = 0
_all_in: object = None


async def read_together(count: int) -> tuple[str, str, object]:
    """Wait (on this interpreter's loop) until `count` of these run at once, then read."""
    import asyncio

    global _arrived, _all_in
    if _all_in is None:
        _all_in = asyncio.Event()
    event = _all_in
    _arrived += 1
    if _arrived == count:
        event.set()  # type: ignore[attr-defined]
    await asyncio.wait_for(event.wait(), 60)  # type: ignore[attr-defined]
    return read()


def reset_together() -> None:
    global _arrived, _all_in
    _arrived, _all_in = 0, None


def log_it(message: str) -> str:
    log.warning(message)
    return request_id.get(UNSET)


async def alog_it(message: str) -> str:
    import asyncio

    await asyncio.sleep(0)
    log.warning(message)
    return request_id.get(UNSET)


def log_from_thread(message: str) -> None:
    """A thread the task starts does not inherit its context (threading's rule)."""
    thread = threading.Thread(target=log.warning, args=(message,))
    thread.start()
    thread.join()


def read_odd() -> None:
    pass
