"""Worker-side functions for tests/test_locks_and_timeouts.py.

Importable in a worker: no asyncio at module level.
"""

from __future__ import annotations

import os

from aiosubinterp import BrokenChannelError, EndOfChannel

BIG = 65536  # >= the share threshold: a worker's bytes cross as a share it owns


def send_refused_forever(tx) -> None:
    """Send 64 KiB items into a channel with no receiver, until interrupted.

    Each refused item is discarded under the channel mutex, which releases
    the share this worker owns (the share mutex, then this worker's queue
    mutex): one side of the 2026-12-04 review's R1 cycle.
    """
    big = b"x" * BIG
    while True:
        try:
            tx.send_nowait(big)
        except BrokenChannelError:
            pass


def spin() -> None:
    while True:
        pass


def produce_chunks(tx) -> None:
    """send_sync 64 KiB chunks until interrupted (or the channel breaks)."""
    chunk = b"y" * BIG
    try:
        while True:
            tx.send_sync(chunk)
    except (BrokenChannelError, EndOfChannel):
        pass


def read_then_return(fd: int) -> str:
    """Block in C (GIL released) until a byte arrives on fd."""
    os.read(fd, 1)
    return "read"


def recv_no_limit(rx, timeout: float) -> object:
    """recv_sync with a timeout that means no limit (math.inf, 1e300, 2**80)."""
    return rx.recv_sync(timeout=timeout)
