"""The live demo's region loops: the circles stepped frame by frame, each shown frame sent home.

Worker-side: the interpreter contender's workers and the process
contender's spawned children import it, so it imports neither asyncio nor
aiohttp (whose compiled helpers refuse interpreters with their own GIL).

Every contender runs :func:`aiosubinterp.demo.circles.region_frame`, the
physics of ``python -m aiosubinterp demo``, so the positions after frame k
are bit for bit the same whoever computed them. After every ``stride``-th
frame (and the last one) each region packs its circles as float32
``x, y, r`` triples (:func:`pack`) and hands them to the main interpreter:
with ``stride=1`` every frame's state returns to main, as a game's would.
"""

from __future__ import annotations

import queue
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aiosubinterp.demo.circles import Circle, Params, exchange_with, region_frame

__all__ = [
    "StopLink",
    "Stopped",
    "channel_region",
    "pack",
    "pipe_region",
    "queue_region",
    "shown_frames",
    "single_loop",
]


class Stopped(Exception):  # a flow signal, named after the event (STYLE.md)
    """The server asked a thread contender to stop."""


def pack(circles: Sequence[Circle]) -> array[float]:
    """A region's circles as float32 ``x, y, r`` triples, in the region's order."""
    return array("f", [v for c in circles for v in (c[1], c[2], c[5])])


def shown_frames(frames: int, stride: int) -> Iterator[int]:
    """The indices of the frames sent home: every ``stride``-th, and the last (0: endless)."""
    k = 0
    while frames == 0 or k < frames:
        k = k + stride if frames == 0 else min(k + stride, frames)
        yield k


def _shown(k: int, frames: int, stride: int) -> bool:
    return k % stride == 0 or k == frames


def single_loop(
    circles: list[Circle],
    params: Params,
    frames: int,
    stride: int,
    emit: Callable[[int, Sequence[Any]], None],
    stop: Any,
) -> None:
    """One thread, the whole canvas as one region, until ``stop`` (an Event) is set."""
    owned = list(circles)
    k = 0
    while not stop.is_set() and (frames == 0 or k < frames):
        owned = region_frame(owned, 0.0, params[0], params, None)
        k += 1
        if _shown(k, frames, stride):
            emit(k, [pack(owned)])


class StopLink:
    """A queue whose blocking ``put``/``get`` give up with :class:`Stopped` once ``stop`` is set.

    ``maxsize`` 0: unbounded (the links between regions, one item per frame
    each way); else ``put`` blocks while full (a region's frames to the
    collector: it runs at most ``maxsize`` frames ahead of main).
    """

    def __init__(self, stop: Any, maxsize: int = 0) -> None:
        self.q: queue.Queue[Any] | queue.SimpleQueue[Any] = (
            queue.Queue(maxsize) if maxsize else queue.SimpleQueue()
        )
        self.stop = stop

    def put(self, item: Any) -> None:
        while True:
            try:
                return self.q.put(item, timeout=0.1)
            except queue.Full:
                if self.stop.is_set():
                    raise Stopped from None

    def get(self) -> Any:
        while True:
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stopped from None


def queue_region(
    owned: list[Circle],
    lo: float,
    hi: float,
    params: Params,
    frames: int,
    stride: int,
    out: StopLink,
    send_left: Any,
    recv_left: Any,
    send_right: Any,
    recv_right: Any,
) -> None:
    """A region in a thread: neighbours over :class:`StopLink` queues, shown frames to ``out``."""
    exchange = exchange_with(send_left, recv_left, send_right, recv_right, "put", "get")
    k = 0
    try:
        while not out.stop.is_set() and (frames == 0 or k < frames):
            owned = region_frame(owned, lo, hi, params, exchange)
            k += 1
            if _shown(k, frames, stride):
                out.put(pack(owned))
    except Stopped:
        pass  # a neighbour (or the collector) gave up waiting: the server stops the run


def channel_region(
    owned: list[Circle],
    lo: float,
    hi: float,
    params: Params,
    frames: int,
    stride: int,
    out: Any,
    send_left: Any,
    recv_left: Any,
    send_right: Any,
    recv_right: Any,
) -> int:
    """A region in an interpreter: neighbours over channels, shown frames into ``out``.

    Sends its OS thread's id first (the server reads its CPU time), then
    each shown frame as a zero-copy view (``share``) of the packed array:
    the main interpreter reads it in place. Returns the frames stepped. The
    server stops it by closing ``out``'s receive end (the next send raises);
    a region that ends closes its channel ends, which ends its neighbours.
    """
    import threading

    from aiosubinterp import BrokenChannelError, ChannelClosedError, EndOfChannel, share

    k = 0
    try:
        out.send_sync(threading.get_native_id())
        exchange = exchange_with(
            send_left, recv_left, send_right, recv_right, "send_sync", "recv_sync"
        )
        while frames == 0 or k < frames:
            owned = region_frame(owned, lo, hi, params, exchange)
            k += 1
            if _shown(k, frames, stride):
                out.send_sync(share(pack(owned)))
    except (BrokenChannelError, ChannelClosedError, EndOfChannel):
        pass  # the server closed `out`, or a neighbour stopped: the run is over
    finally:
        for end in (out, send_left, recv_left, send_right, recv_right):
            if end is not None:
                end.close()
    return k


def pipe_region(control: Any, left: Any, right: Any) -> None:
    """A region in a spawned child process: neighbours over pipes, shown frames to ``control``.

    Says ("ready", pid) once imported, gets (owned, lo, hi, params, frames,
    stride), then sends each shown frame with ``send_bytes``. Any message
    from the server (or its end closing) stops it at the next frame; a
    neighbour that exits ends it too (EOFError on the pipe between them).
    """
    import os
    import signal

    # Ctrl-C in a terminal reaches the whole process group: the server stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        control.send(("ready", os.getpid()))
        owned, lo, hi, params, frames, stride = control.recv()
        exchange = exchange_with(left, left, right, right, "send", "recv")
        k = 0
        while (frames == 0 or k < frames) and not control.poll():
            owned = region_frame(owned, lo, hi, params, exchange)
            k += 1
            if _shown(k, frames, stride):
                control.send_bytes(pack(owned).tobytes())
    except (EOFError, OSError):
        pass  # the server or a neighbour went away
    finally:
        for conn in (control, left, right):
            if conn is not None:
                conn.close()
