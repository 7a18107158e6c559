"""Where the web examples' CPU route computes (``--mode``), on the server's side.

Shared by ``aiohttp_app.py``, ``starlette_app.py`` (``/primes``) and
``fastapi_app.py`` (``/score``); the work itself is in ``_web_work.py`` and
``_fastapi_work.py`` (which the workers import, so they cannot import asyncio).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import importlib.util
import os
from collections.abc import Callable
from typing import Any

import aiosubinterp

MODES = ("interpreters", "processes", "to_thread", "inline")  # where the CPU route computes


def check_mode(mode: str) -> None:
    """Raise ValueError, naming the choices, unless ``mode`` is one of MODES."""
    if mode not in MODES:
        raise ValueError(f"make_app: unknown mode {mode!r}; choose one of {', '.join(MODES)}")


def add_arguments(
    parser: argparse.ArgumentParser, route: str = "/primes", streams: bool = True
) -> None:
    """The command-line options the apps take (the benchmark relies on them).

    ``route`` is the app's CPU route (for the help); ``streams``: whether
    it has ``--max-streams`` (an app that streams bodies from interpreters).
    """
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="interpreters",
        help=f"where {route} computes: an InterpreterPool (default), a "
        "ProcessPool, asyncio.to_thread, or inline on the event loop",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help=f"interpreters (processes, threads) for {route} (default: one per CPU)",
    )
    if streams:
        parser.add_argument(
            "--max-streams",
            type=int,
            default=2,
            help="interpreters producing streams, so streams at once (default 2)",
        )


def server_options() -> tuple[str, str]:
    """uvicorn's loop and http options: uvloop and httptools when installed."""
    loop, http = "uvloop", "httptools"
    if importlib.util.find_spec("uvloop") is None:
        print("note: uvloop is not installed: serving on asyncio's event loop", flush=True)
        loop = "asyncio"
    if importlib.util.find_spec("httptools") is None:
        print(
            "note: httptools is not installed: serving with h11 (uvicorn's pure-Python "
            "HTTP parser)",
            flush=True,
        )
        http = "h11"
    return loop, http


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """--mode inline: the work runs on the event loop, which serves nothing else meanwhile."""
    return fn(*args)


async def enter_cpu(
    stack: contextlib.AsyncExitStack,
    mode: str,
    workers: int | None,
    *,
    fallback: str | None = None,
) -> tuple[aiosubinterp.InterpreterPool | aiosubinterp.ProcessPool | None, Callable[..., Any]]:
    """What ``mode`` needs, entered on ``stack``: (the pool or None, how to run ``fn(*args)``).

    ``fallback`` is the InterpreterPool's (``"copy"``: fastapi_app.py's
    pydantic runs in the interpreters from private copies of pydantic-core).
    """
    check_mode(mode)
    if mode == "interpreters":
        interpreters = await stack.enter_async_context(
            aiosubinterp.InterpreterPool(workers, fallback=fallback)
        )
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
    return None, run_inline  # inline
