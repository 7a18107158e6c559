"""Helpers for the tests of the web examples (an HTTP client's side)."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any


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
