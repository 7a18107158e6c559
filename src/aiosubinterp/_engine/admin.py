"""Blocking interpreter chores (create, interrupt, destroy) on short-lived daemon threads.

They must never run on an event-loop thread: creating an interpreter blocks
its caller for about 15 ms, destroying one waits for its running task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["relay", "spawn"]


def spawn(
    fn: Callable[..., Any], *args: Any, name: str = "aiosubinterp-admin"
) -> concurrent.futures.Future[Any]:
    """Run fn(*args) on a new daemon thread; return a concurrent Future of its outcome."""
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def body() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    threading.Thread(target=body, name=name, daemon=True).start()
    return fut


def relay(cfut: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop) -> Any:
    """An asyncio future on loop that follows cfut; silent if the loop closed meanwhile."""
    afut = loop.create_future()

    def copy(_: object = None) -> None:
        if afut.done():
            return
        exc = cfut.exception()
        if exc is not None:
            afut.set_exception(exc)
        else:
            afut.set_result(cfut.result())

    def on_done(_: concurrent.futures.Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(copy)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    cfut.add_done_callback(on_done)
    return afut
