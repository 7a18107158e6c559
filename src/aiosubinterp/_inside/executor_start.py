"""What an InterpreterPoolExecutor's interpreter runs once at start, before its calls.

Worker-side module: imported inside interpreters, so it must not import
asyncio (nor anything of ours that does).
"""

from __future__ import annotations

import sys

from aiosubinterp import _core
from aiosubinterp._inside import marshal as _marshal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["start"]


def _name_thread(name: str) -> None:
    """Give this worker's OS thread a name, as ThreadPoolExecutor names its threads.

    ``_thread.set_name`` (3.14+) truncates to the platform's limit (15 bytes
    on Linux); before 3.14, Linux only, through /proc.
    """
    import _thread

    set_name = getattr(_thread, "set_name", None)
    if set_name is not None:
        try:
            set_name(name)
        except (OSError, ValueError):
            pass  # a name is a convenience: never a reason to fail the start
        return
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/thread-self/comm", "wb") as comm:
                comm.write(name.encode("utf-8", "replace")[:15])
        except OSError:
            pass  # a kernel without /proc/thread-self (before 3.17): unnamed


def start(thread_name_prefix: str, initializer: tuple[Any, ...] | None) -> None:
    """Name the thread, then run the user's initializer (a call payload of _marshal)."""
    _name_thread(f"{thread_name_prefix}_{_core.current_interpreter_id()}")
    if initializer is None:
        return
    resolver = _marshal.resolver
    if resolver is None:
        raise RuntimeError("aiosubinterp: executor_start.start() runs only in a worker")
    fn, args, kw, _ = resolver.call(initializer)
    fn(*args, **(kw or {}))
