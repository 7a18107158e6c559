"""Where the web examples' ``/primes`` computes (``--mode``), on the server's side.

Shared by ``aiohttp_app.py`` and ``starlette_app.py``; the work itself is in
``_web_work.py`` (which the workers import, so it cannot import asyncio).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Callable
from typing import Any

import aiosubinterp

MODES = ("interpreters", "processes", "to_thread", "inline")  # where /primes computes


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """--mode inline: the work runs on the event loop, which serves nothing else meanwhile."""
    return fn(*args)


async def enter_cpu(stack: contextlib.AsyncExitStack, mode: str, workers: int | None,
                    ) -> tuple[aiosubinterp.InterpreterPool | aiosubinterp.ProcessPool | None,
                               Callable[..., Any]]:
    """What ``mode`` needs, entered on ``stack``: (the pool or None, how to run ``fn(*args)``)."""
    if mode == "interpreters":
        interpreters = await stack.enter_async_context(aiosubinterp.InterpreterPool(workers))
        return interpreters, interpreters.run
    if mode == "processes":
        processes = await stack.enter_async_context(aiosubinterp.ProcessPool(workers))
        return processes, processes.run
    if mode == "to_thread":
        # asyncio.to_thread runs on the loop's default executor: give it as
        # many threads as the pools have workers.
        threads = concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count())
        stack.callback(threads.shutdown)
        asyncio.get_running_loop().set_default_executor(threads)
        return None, asyncio.to_thread
    if mode == "inline":
        return None, run_inline
    raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
