"""Helpers for the tests of the web examples (an HTTP client's side)."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import types
import urllib.request
from collections.abc import Callable
from typing import Any

import workfuncs


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10.0) -> bytes:
    """The body of GET url, blocking (for a server in another process)."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


async def get_json(client: Any, path: str, **params: Any) -> Any:
    """GET path on an aiohttp ClientSession; asserts 200 and returns the JSON body."""
    async with client.get(path, params=params) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def check_stats_mode(client: Any, mode: str) -> None:
    """An example app's /stats names mode, and has a CPU pool of 2 processes only there."""
    described = await get_json(client, "/stats")
    assert described["mode"] == mode
    if mode == "processes":
        assert described["cpu_pool"]["size"] == 2
    else:
        assert described["cpu_pool"] is None


async def check_primes_in_mode(client: Any, ex: Any, mode: str) -> None:
    """An example app served in --mode `mode`: /primes, /stats and /stream answer right.

    The modes bench_http.py compares with the default (interpreters); `ex`
    is the example's module (its make_app and its work module).
    """
    results = await asyncio.gather(*(get_json(client, "/primes", n=1000) for _ in range(4)))
    assert results == [{"n": 1000, "primes": 168}] * 4
    await check_stats_mode(client, mode)
    async with client.get("/stream", params={"count": 3, "size": 100}) as r:
        assert await r.read() == b"".join(ex.work.chunk(i, 100) for i in range(3))


def hold_primes(ex: Any, monkeypatch: Any, pipe: tuple[int, int]) -> Callable[[], object]:
    """From now until ``release()``, each /primes of example ``ex`` computes and never answers.

    Call it once the app has started (its warm-up counts primes too). The
    app's ``work`` module is swapped for one whose ``count_primes`` keeps
    the worker's CPU busy (``workfuncs.busy_until_readable``) until the
    read end of ``pipe`` (conftest's fixture, closed after the test) is
    readable; then it counts the primes as the app's would. Returns
    ``release``, which makes it readable for good.
    """
    r, w = pipe
    held = functools.partial(workfuncs.busy_until_readable, r, ex.work.count_primes)
    monkeypatch.setattr(ex, "work", types.SimpleNamespace(count_primes=held))
    return functools.partial(os.write, w, b"go")  # nobody reads it: readable from now on
