"""The contenders of the circles zoo, streaming their frames to the main interpreter.

Main-side (no aiohttp): ``demo --serve`` (:mod:`aiosubinterp.demo.live`)
runs them at the same time and sends their frames to a page; the ``demo``
command's table (:mod:`aiosubinterp.demo.zoo`) runs each alone with every
frame sent home. Each contender is an ``async`` runner (:data:`RUNNERS`)
that steps the circles with :mod:`aiosubinterp.demo.livework` until its
:class:`Run` is halted or its frames are done, then cleans up: threads
joined, interpreters destroyed, processes reaped.

- ``single``: one thread steps the whole canvas;
- ``threads``: one thread per strip, queues between neighbours, and a
  collector thread that gathers each shown frame's strips;
- ``processes``: one spawned process per strip, pipes between neighbours
  and to the server (a collector thread reads them);
- ``aiosubinterp``: one interpreter of an :class:`InterpreterPool` per
  strip, channels between neighbours, and each strip's frames streamed to
  the event loop over a channel as zero-copy views (``share``).

A shown frame lands in the run's :class:`Sink` as one message: :data:`HEADER`,
then float32 ``x, y, r`` per circle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiosubinterp as asi
from aiosubinterp.demo import circles as _circles
from aiosubinterp.demo import livework, zoo
from aiosubinterp.demo.circles import Circle, Params

__all__ = [
    "FPS_WINDOW",
    "HEADER",
    "LAST",
    "MAGIC",
    "RUNNERS",
    "Run",
    "Sink",
    "parse_frame",
    "ticks",
]

# One frame on the WebSocket: magic, contender index, flags, workers, frame
# index, number of circles; then that many float32 (x, y, r). Little-endian.
HEADER = struct.Struct("<4sBBHII")
MAGIC = b"CIRC"
LAST = 1  # flags: the run's last frame (it had a frame limit)
FPS_WINDOW = 1.0  # seconds of history behind an FPS or CPU figure

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_frame(data: bytes) -> tuple[int, int, int, int, list[tuple[float, float, float]]]:
    """(contender index, flags, workers, frame, [(x, y, r), ...]) of one binary message."""
    magic, index, flags, workers, frame, n = HEADER.unpack_from(data)
    if magic != MAGIC or len(data) != HEADER.size + 12 * n:
        raise ValueError(f"not a circles frame: magic {magic!r}, {len(data)} bytes for {n}")
    values = struct.unpack_from(f"<{3 * n}f", data, HEADER.size)
    return index, flags, workers, frame, [values[i : i + 3] for i in range(0, 3 * n, 3)]


def ticks(path: str) -> int | None:
    """utime + stime (clock ticks) from a /proc .../stat file; None if it is gone."""
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


class Sink:
    """Where a contender's shown frames land in main; the newest one waits for the sender.

    Thread-safety: ``put`` runs in a collector thread or on the loop; one
    tuple assignment publishes the frame (atomic under the GIL).
    """

    def __init__(self, index: int, workers: int, frames: int) -> None:
        self.index, self.workers, self.frames = index, workers, frames
        self.latest: tuple[int, bytes, float] | None = None  # (frame, message, arrival)
        self.first: tuple[int, float] | None = None  # (frame, arrival) of the first one

    def put(self, k: int, parts: Sequence[Any]) -> None:
        body = b"".join(parts)
        flags = LAST if k == self.frames else 0
        now = time.monotonic()
        self.latest = (
            k,
            HEADER.pack(MAGIC, self.index, flags, self.workers, k, len(body) // 12) + body,
            now,
        )
        if self.first is None:
            self.first = (k, now)


class Run:
    """One contender's run: its sink, its stop signal, the threads and processes it uses.

    Thread-safety: ``stop`` (an Event) and ``tids``/``pids`` (appended to)
    are shared with the run's threads; the rest belongs to the event loop.
    """

    def __init__(self, name: str, index: int, workers: int, frames: int) -> None:
        self.name, self.index = name, index
        self.label = "single thread" if name == "single" else zoo._label(name, workers)
        self.sink = Sink(index, workers, frames)
        self.stop = threading.Event()
        self.tids: list[int] = []  # OS threads of this process (/proc/self/task/<tid>/stat)
        self.pids: list[int] = []  # child processes
        self.recvs: list[Any] = []  # channel ends the server reads (interpreters)
        self.state = "starting"
        self.error = ""
        self.task: asyncio.Task[None] | None = None
        self.samples: deque[tuple[float, int, float, int]] = deque()  # (t, frame, t_frame, ticks)
        self._ticks: dict[str, int] = {}
        self.fps = 0.0
        self.cpu = 0.0

    def halt(self) -> None:
        """Ask every worker of the run to stop at its next frame (returns at once)."""
        self.stop.set()
        for recv in self.recvs:
            recv.close()  # wakes the loop's pending recv; the workers' next send raises

    def ticks(self) -> int:
        paths = [f"/proc/self/task/{t}/stat" for t in self.tids]
        paths += [f"/proc/{p}/stat" for p in self.pids]
        for path in paths:
            value = ticks(path)
            if value is not None:  # a finished thread or process keeps its last figure
                self._ticks[path] = value
        return sum(self._ticks.values())

    def sample(self, now: float) -> None:
        """Update fps and cpu from the frames and CPU ticks of the last FPS_WINDOW seconds."""
        latest = self.sink.latest
        frame, t_frame = (latest[0], latest[2]) if latest else (0, now)
        self.samples.append((now, frame, t_frame, self.ticks()))
        while len(self.samples) > 2 and now - self.samples[1][0] >= FPS_WINDOW:
            self.samples.popleft()
        t0, f0, tf0, c0 = self.samples[0]
        if self.state != "running":
            first = self.sink.first
            if latest and first and latest[0] > first[0] and latest[2] > first[1]:
                # Over the whole run, from the first frame that reached main.
                self.fps = (latest[0] - first[0]) / (latest[2] - first[1])
            return
        if frame > f0 and t_frame > tf0:
            self.fps = (frame - f0) / (t_frame - tf0)
        elif now - t_frame > FPS_WINDOW:
            self.fps = 0.0
        if now > t0:
            self.cpu = (self.samples[-1][3] - c0) / CLK_TCK / (now - t0)

    def describe(self, single_fps: float | None) -> dict[str, Any]:
        latest = self.sink.latest
        return {
            "name": self.name,
            "label": self.label,
            "state": self.state,
            "error": self.error,
            "frame": latest[0] if latest else 0,
            "fps": round(self.fps, 2),
            "cpu": round(self.cpu, 2),
            "pids": list(self.pids),
            "speedup": round(self.fps / single_fps, 2) if single_fps else None,
        }


async def _in_thread(run: Run, fn: Callable[..., Any], *args: Any, name: str) -> Any:
    """Run ``fn(*args)`` in a new thread of ``run`` (its CPU counts); await it, join it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[tuple[Any, BaseException | None]] = loop.create_future()

    def settle(outcome: tuple[Any, BaseException | None]) -> None:
        if not fut.done():
            fut.set_result(outcome)

    def body() -> None:
        run.tids.append(threading.get_native_id())
        outcome: tuple[Any, BaseException | None]
        try:
            outcome = (fn(*args), None)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the loop
            run.stop.set()  # the others of this run stop too
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    try:
        result, exc = await fut
    except asyncio.CancelledError:
        run.halt()
        raise
    thread.join()  # it has settled the future: its last act
    if exc is not None:
        raise exc
    return result


async def _gather(*coros: Awaitable[Any]) -> None:
    """Await all (none is abandoned), then raise the first error."""
    results = await asyncio.gather(*coros, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def _run_single(
    run: Run, initial: list[Circle], params: Params, workers: int, frames: int, stride: int
) -> None:
    await _in_thread(
        run,
        livework.single_loop,
        initial,
        params,
        frames,
        stride,
        run.sink.put,
        run.stop,
        name="live-single",
    )


async def _run_threads(
    run: Run, initial: list[Circle], params: Params, workers: int, frames: int, stride: int
) -> None:
    regions = _circles.split(initial, params, workers)
    links = zoo._links(workers, lambda: (link := livework.StopLink(run.stop), link))
    outs = [livework.StopLink(run.stop, maxsize=2) for _ in regions]

    def collect() -> None:
        try:
            for k in livework.shown_frames(frames, stride):
                run.sink.put(k, [out.get() for out in outs])
        except livework.Stopped:
            pass

    await _gather(
        *(
            _in_thread(
                run,
                livework.queue_region,
                owned,
                lo,
                hi,
                params,
                frames,
                stride,
                outs[k],
                *links[k],
                name=f"live-threads-{k}",
            )
            for k, (lo, hi, owned) in enumerate(regions)
        ),
        _in_thread(run, collect, name="live-threads-collector"),
    )


def _processes(
    run: Run, initial: list[Circle], params: Params, workers: int, frames: int, stride: int
) -> None:
    """The process contender, in a thread: start, collect, stop, reap."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")  # no fork: this process has threads
    controls: list[Any] = []
    procs: list[Any] = []
    pipes = [ctx.Pipe() for _ in range(workers - 1)]  # duplex: one per border
    try:
        for k in range(workers):
            parent, child = ctx.Pipe()
            controls.append(parent)
            left = pipes[k - 1][1] if k > 0 else None
            right = pipes[k][0] if k < workers - 1 else None
            proc = ctx.Process(
                target=livework.pipe_region,
                args=(child, left, right),
                name=f"live-processes-{k}",
                daemon=True,
            )
            proc.start()
            procs.append(proc)
            child.close()
        for a, b in pipes:
            a.close()
            b.close()
        for control in controls:
            _, pid = control.recv()
            run.pids.append(pid)
        for control, (lo, hi, owned) in zip(
            controls, _circles.split(initial, params, workers), strict=True
        ):
            control.send((owned, lo, hi, params, frames, stride))
        for k in livework.shown_frames(frames, stride):
            if run.stop.is_set():
                break
            run.sink.put(k, [control.recv_bytes() for control in controls])
    except (EOFError, OSError):
        if not run.stop.is_set():
            raise RuntimeError("a circles process ended early") from None
    finally:
        for a, b in pipes:
            a.close()
            b.close()
        for control in controls:
            with contextlib.suppress(OSError):
                control.send("stop")  # each child stops at its next frame
        # Read what they still send until each has closed its end: a child
        # blocked on a full pipe must not keep its neighbour waiting for it.
        pending = list(controls)
        deadline = time.monotonic() + 5
        while pending and time.monotonic() < deadline:
            for conn in wait(pending, timeout=max(0.0, deadline - time.monotonic())):
                try:
                    conn.recv_bytes()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    pending.remove(conn)
        for control in controls:
            control.close()
        for proc in procs:
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
            proc.close()


async def _run_processes(
    run: Run, initial: list[Circle], params: Params, workers: int, frames: int, stride: int
) -> None:
    await _in_thread(
        run,
        _processes,
        run,
        initial,
        params,
        workers,
        frames,
        stride,
        name="live-processes-collector",
    )


async def _run_interpreters(
    run: Run, initial: list[Circle], params: Params, workers: int, frames: int, stride: int
) -> None:
    async with asi.InterpreterPool(workers, preload=("aiosubinterp.demo.livework",)) as pool:
        if run.stop.is_set():
            return
        regions = _circles.split(initial, params, workers)
        links = zoo._links(workers, lambda: asi.open_channel(2))
        outs = [asi.open_channel(2) for _ in regions]
        run.recvs = [recv for _, recv in outs]
        tasks = [
            pool.submit(
                livework.channel_region,
                owned,
                lo,
                hi,
                params,
                frames,
                stride,
                outs[k][0],
                *links[k],
            )
            for k, (lo, hi, owned) in enumerate(regions)
        ]
        del links  # the workers hold the ends between them; each closes its own
        try:
            for recv in run.recvs:
                run.tids.append(await recv.recv())
            for k in livework.shown_frames(frames, stride):
                # Zero-copy views of the workers' arrays; put() copies them into the frame.
                run.sink.put(k, [await recv.recv() for recv in run.recvs])
        except (asi.EndOfChannel, asi.ChannelClosedError, asi.BrokenChannelError):
            if not run.stop.is_set():
                raise
        finally:
            for send, recv in outs:
                recv.close()
                send.close()  # the same ends the workers hold: their next send raises
            await _gather(*tasks)


RUNNERS = {
    "single": _run_single,
    "threads": _run_threads,
    "processes": _run_processes,
    "aiosubinterp": _run_interpreters,
}
