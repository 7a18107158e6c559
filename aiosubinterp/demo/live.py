"""``python -m aiosubinterp demo --serve``: the circles zoo live in the browser.

An aiohttp server (uvloop when installed) serves one page (``live.html``)
and a WebSocket (``/ws``). When the page says start, the four contenders of
:mod:`aiosubinterp.demo.zoo` run **at the same time**, each from the same
initial circles with the same physics (:mod:`aiosubinterp.demo.livework`):

- ``single``: one thread steps the whole canvas;
- ``threads``: one thread per strip, queues between neighbours, and a
  collector thread that gathers each shown frame's strips;
- ``processes``: one spawned process per strip, pipes between neighbours
  and to the server (a collector thread reads them);
- ``aiosubinterp``: one interpreter of an :class:`InterpreterPool` per
  strip, channels between neighbours, and each strip's frames streamed to
  the event loop over a channel as zero-copy views (``share``).

With ``stride`` 1 (the default, "every frame"), every frame's positions
return to the main interpreter, as a game's state would to be drawn; the
FPS shown is then the rate at which whole frames reach main. Each frame is
packed into one binary message (:data:`HEADER`, then float32 ``x, y, r``
per circle); the WebSocket carries the newest frame of each contender up to
30 times a second (a browser draws no faster), and twice a second a JSON
line of statistics: FPS, CPU (cores: CPU seconds per wall second of the
contender's threads and processes, read from ``/proc``), speedup over one
thread.

Closing the page (the WebSocket) stops its contenders; Ctrl-C stops
everything: interpreters destroyed, threads joined, child processes reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any

from aiohttp import WSMsgType, web

import aiosubinterp as asi
from aiosubinterp.demo import circles as _circles
from aiosubinterp.demo import livework, zoo
from aiosubinterp.demo.circles import Circle, Params

__all__ = ["CONTENDERS", "HEADER", "LAST", "MAGIC", "make_app", "page", "parse_frame", "serve"]

CONTENDERS = zoo.CONTENDERS
# One frame on the WebSocket: magic, contender index, flags, workers, frame
# index, number of circles; then that many float32 (x, y, r). Little-endian.
HEADER = struct.Struct("<4sBBHII")
MAGIC = b"CIRC"
LAST = 1  # flags: the run's last frame (it had a frame limit)
SEND_INTERVAL = 1 / 30  # newest frame of each contender to the page, at most this often
STATS_INTERVAL = 0.5
FPS_WINDOW = 1.0  # seconds of history behind an FPS or CPU figure
MAX_CIRCLES = 100_000
MAX_WORKERS = 64
STOP_TIMEOUT = 15.0  # a contender that does not stop in this time is cancelled

DEFAULTS: web.AppKey[dict[str, Any]] = web.AppKey("defaults")
SESSIONS: web.AppKey[set[Any]] = web.AppKey("sessions")  # of Session

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def page() -> str:
    """The page (package data)."""
    return resources.files("aiosubinterp.demo").joinpath("live.html").read_text("utf-8")


def parse_frame(data: bytes) -> tuple[int, int, int, int, list[tuple[float, float, float]]]:
    """(contender index, flags, workers, frame, [(x, y, r), ...]) of one binary message."""
    magic, index, flags, workers, frame, n = HEADER.unpack_from(data)
    if magic != MAGIC or len(data) != HEADER.size + 12 * n:
        raise ValueError(f"not a circles frame: magic {magic!r}, {len(data)} bytes for {n}")
    values = struct.unpack_from(f"<{3 * n}f", data, HEADER.size)
    return index, flags, workers, frame, [values[i:i + 3] for i in range(0, 3 * n, 3)]


def _ticks(path: str) -> int | None:
    """utime + stime (clock ticks) from a /proc .../stat file; None if it is gone."""
    try:
        with open(path, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])


class _Sink:
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
        self.latest = (k, HEADER.pack(MAGIC, self.index, flags, self.workers, k,
                                      len(body) // 12) + body, now)
        if self.first is None:
            self.first = (k, now)


class _Run:
    """One contender's run: its sink, its stop signal, the threads and processes it uses."""

    def __init__(self, name: str, index: int, workers: int, frames: int) -> None:
        self.name, self.index = name, index
        self.label = "single thread" if name == "single" else zoo._label(name, workers)
        self.sink = _Sink(index, workers, frames)
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
        self.stop.set()
        for recv in self.recvs:
            recv.close()  # wakes the loop's pending recv; the workers' next send raises

    def ticks(self) -> int:
        paths = [f"/proc/self/task/{t}/stat" for t in self.tids]
        paths += [f"/proc/{p}/stat" for p in self.pids]
        for path in paths:
            value = _ticks(path)
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
            self.cpu = (self.samples[-1][3] - c0) / _CLK_TCK / (now - t0)

    def describe(self, single_fps: float | None) -> dict[str, Any]:
        latest = self.sink.latest
        return {
            "name": self.name, "label": self.label, "state": self.state, "error": self.error,
            "frame": latest[0] if latest else 0, "fps": round(self.fps, 2),
            "cpu": round(self.cpu, 2), "pids": list(self.pids),
            "speedup": round(self.fps / single_fps, 2) if single_fps else None,
        }


async def _in_thread(run: _Run, fn: Callable[..., Any], *args: Any, name: str) -> Any:
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


async def _run_single(run: _Run, initial: list[Circle], params: Params, workers: int,
                      frames: int, stride: int) -> None:
    await _in_thread(run, livework.single_loop, initial, params, frames, stride, run.sink.put,
                     run.stop, name="live-single")


async def _run_threads(run: _Run, initial: list[Circle], params: Params, workers: int,
                       frames: int, stride: int) -> None:
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
        *(_in_thread(run, livework.queue_region, owned, lo, hi, params, frames, stride,
                     outs[k], *links[k], name=f"live-threads-{k}")
          for k, (lo, hi, owned) in enumerate(regions)),
        _in_thread(run, collect, name="live-threads-collector"))


def _processes(run: _Run, initial: list[Circle], params: Params, workers: int, frames: int,
               stride: int) -> None:
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
            proc = ctx.Process(target=livework.pipe_region, args=(child, left, right),
                               name=f"live-processes-{k}", daemon=True)
            proc.start()
            procs.append(proc)
            child.close()
        for a, b in pipes:
            a.close()
            b.close()
        for control in controls:
            _, pid = control.recv()
            run.pids.append(pid)
        for control, (lo, hi, owned) in zip(controls, _circles.split(initial, params, workers),
                                            strict=True):
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


async def _run_processes(run: _Run, initial: list[Circle], params: Params, workers: int,
                         frames: int, stride: int) -> None:
    await _in_thread(run, _processes, run, initial, params, workers, frames, stride,
                     name="live-processes-collector")


async def _run_interpreters(run: _Run, initial: list[Circle], params: Params, workers: int,
                            frames: int, stride: int) -> None:
    async with asi.InterpreterPool(workers, preload=("aiosubinterp.demo.livework",)) as pool:
        if run.stop.is_set():
            return
        regions = _circles.split(initial, params, workers)
        links = zoo._links(workers, lambda: asi.open_channel(2))
        outs = [asi.open_channel(2) for _ in regions]
        run.recvs = [recv for _, recv in outs]
        tasks = [pool.submit(livework.channel_region, owned, lo, hi, params, frames, stride,
                             outs[k][0], *links[k])
                 for k, (lo, hi, owned) in enumerate(regions)]
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


_RUNNERS = {"single": _run_single, "threads": _run_threads, "processes": _run_processes,
            "aiosubinterp": _run_interpreters}


@dataclasses.dataclass
class Config:
    """What the page asked for (validated)."""

    circles: int
    workers: int
    stride: int = 1
    frames: int = 0  # 0: until stopped
    seed: int = 0
    contenders: tuple[str, ...] = CONTENDERS

    @classmethod
    def parse(cls, cmd: dict[str, Any], defaults: dict[str, Any]) -> Config:
        def number(key: str, low: int, high: int) -> int:
            value = cmd.get(key, defaults.get(key, low))
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{key} must be an integer in [{low}, {high}], got {value!r}")
            return value

        names = cmd.get("contenders", list(CONTENDERS))
        if (not isinstance(names, list) or not names
                or any(n not in CONTENDERS for n in names)):
            raise ValueError(f"contenders must be a non-empty list of {', '.join(CONTENDERS)}")
        return cls(number("circles", 1, MAX_CIRCLES), number("workers", 1, MAX_WORKERS),
                   number("stride", 1, 1000), number("frames", 0, 10**9),
                   number("seed", 0, 2**31), tuple(n for n in CONTENDERS if n in names))


class Session:
    """One page: its contenders' runs and the task that feeds the WebSocket."""

    def __init__(self, ws: web.WebSocketResponse, defaults: dict[str, Any]) -> None:
        self.ws = ws
        self.defaults = defaults
        self.runs: list[_Run] = []
        self.sender: asyncio.Task[None] | None = None
        self.main_tid = threading.get_native_id()
        self._server: deque[tuple[float, int]] = deque()
        self._busy: Any = None

    async def start(self, cmd: dict[str, Any]) -> Config:
        """Stop what runs, then start the contenders ``cmd`` asks for (ValueError: refused)."""
        config = Config.parse(cmd, self.defaults)
        params, initial = _circles.initial_state(config.circles, config.seed)
        if any(name != "single" for name in config.contenders):
            _circles.split(initial, params, config.workers)  # strips too narrow: ValueError
        await self.stop()
        self.runs = [_Run(name, CONTENDERS.index(name), config.workers, config.frames)
                     for name in config.contenders]
        for run in self.runs:
            run.task = asyncio.create_task(self._run(run, config, params, initial))
        self.sender = asyncio.create_task(self._send())
        await self.ws.send_json({
            "type": "started", "width": params[0], "height": params[1],
            **dataclasses.asdict(config),
            "contenders": [{"name": r.name, "index": r.index, "label": r.label}
                           for r in self.runs]})
        return config

    async def _run(self, run: _Run, config: Config, params: Params,
                   initial: list[Circle]) -> None:
        run.state = "running"
        try:
            await _RUNNERS[run.name](run, initial, params, config.workers, config.frames,
                                     config.stride)
        except Exception as exc:  # noqa: BLE001 - shown on the page, the others go on
            run.state, run.error = "error", f"{type(exc).__name__}: {exc}"
        else:
            run.state = "stopped" if run.stop.is_set() else "done"

    async def stop(self) -> None:
        """Stop every contender and wait until each has cleaned up (idempotent)."""
        for run in self.runs:
            run.halt()
        tasks = [run.task for run in self.runs if run.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
            for task in late:  # pragma: no cover - a contender that ignored its stop
                task.cancel()
            if late:
                await asyncio.wait(late)
        if self.sender is not None and not self.sender.done():
            self.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sender
        if self.runs and not self.ws.closed:
            with contextlib.suppress(ConnectionError):
                await self.ws.send_json(self.stats())
                await self.ws.send_json({"type": "stopped"})
        self.sender = None

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        for run in self.runs:
            run.sample(now)
        single = next((r.fps for r in self.runs if r.name == "single"), None)
        ticks = _ticks(f"/proc/self/task/{self.main_tid}/stat") or 0
        self._server.append((now, ticks))
        while len(self._server) > 2 and now - self._server[1][0] >= FPS_WINDOW:
            self._server.popleft()
        t0, c0 = self._server[0]
        busy = zoo.machine_busy(self._busy) if self._busy is not None else float("nan")
        self._busy = zoo.machine_busy()
        return {
            "type": "stats",
            "contenders": [r.describe(single) for r in self.runs],
            "server_cpu": round((ticks - c0) / _CLK_TCK / (now - t0), 2) if now > t0 else 0.0,
            "machine_busy": None if busy != busy else round(busy, 2),  # NaN: unknown
        }

    async def _send(self) -> None:
        """The newest frame of each contender, 30 times a second; the statistics, twice."""
        with contextlib.suppress(ConnectionError):  # the page is gone: the handler stops us
            await self._send_until_finished()

    async def _send_until_finished(self) -> None:
        sent = dict.fromkeys(range(len(CONTENDERS)), -1)
        next_stats = 0.0
        while True:
            finished = all(run.task is not None and run.task.done() for run in self.runs)
            for run in self.runs:
                latest = run.sink.latest
                if latest is not None and latest[0] != sent[run.index]:
                    sent[run.index] = latest[0]
                    await self.ws.send_bytes(latest[1])
            now = time.monotonic()
            if finished or now >= next_stats:
                await self.ws.send_json(self.stats())
                next_stats = now + STATS_INTERVAL
            if finished:
                await self.ws.send_json({"type": "finished"})
                return
            await asyncio.sleep(SEND_INTERVAL)


async def _websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=1 << 16)
    await ws.prepare(request)
    app = request.app
    defaults = app[DEFAULTS]
    session = Session(ws, defaults)
    app[SESSIONS].add(session)
    try:
        await ws.send_json({
            "type": "hello", "contenders": list(CONTENDERS), "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            **defaults})
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                cmd = json.loads(msg.data)
                if not isinstance(cmd, dict):
                    raise ValueError("a command is a JSON object with an 'op'")
                if cmd.get("op") == "start":
                    await session.start(cmd)
                elif cmd.get("op") == "stop":
                    await session.stop()
                else:
                    raise ValueError(f"unknown op {cmd.get('op')!r}: start or stop")
            except ValueError as exc:
                await ws.send_json({"type": "error", "message": str(exc)})
    finally:
        app[SESSIONS].discard(session)
        # The page is gone (or the server shuts down): its contenders stop.
        await asyncio.shield(session.stop())
    return ws


async def _index(request: web.Request) -> web.Response:
    return web.Response(text=page(), content_type="text/html")


async def _shutdown(app: web.Application) -> None:
    """on_shutdown: stop every page's contenders, then close their WebSockets."""
    held = app[SESSIONS]
    sessions = list(held)
    await asyncio.gather(*(s.stop() for s in sessions))
    for s in sessions:
        await s.ws.close(code=1001, message=b"server shutting down")


def make_app(circles: int = 3000, workers: int | None = None) -> web.Application:
    """The application: ``/`` the page, ``/ws`` its WebSocket; the page's initial settings."""
    app = web.Application()
    app[DEFAULTS] = {"circles": circles, "workers": workers or os.cpu_count() or 2}
    app[SESSIONS] = set()
    app.on_shutdown.append(_shutdown)
    app.add_routes([web.get("/", _index), web.get("/ws", _websocket)])
    return app


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _ListenError(Exception):
    pass


async def _serve(host: str, port: int, circles: int, workers: int | None) -> None:
    runner = web.AppRunner(make_app(circles, workers), shutdown_timeout=5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise _ListenError(f"demo --serve: cannot listen on {host}:{port}: "
                               f"{exc.strerror or exc}; choose another --port (0: any free)"
                               ) from None
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        real_port = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        print(f"aiosubinterp live demo ({loop} loop, {os.cpu_count()} CPUs): "
              f"open http://{shown}:{real_port}/ in a browser; Ctrl-C stops", flush=True)
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()  # until SIGTERM, or Ctrl-C cancels us
    finally:
        await runner.cleanup()


def serve(host: str = "127.0.0.1", port: int = 8080, circles: int = 3000,
          workers: int | None = None) -> int:
    """The ``demo --serve`` command: serve until Ctrl-C, then stop everything; exit code 0."""
    try:
        with asyncio.Runner(loop_factory=_new_loop) as runner:
            runner.run(_serve(host, port, circles, workers))
    except KeyboardInterrupt:
        pass
    except _ListenError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("stopped: every contender ended, pools closed, processes reaped", flush=True)
    return 0
