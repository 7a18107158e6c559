"""``python -m aiosubinterp demo --serve``: the circles zoo live in the browser.

An aiohttp server (uvloop when installed) serves one page (``live.html``)
and a WebSocket (``/ws``). The page starts a run as soon as it opens: the
four contenders of :mod:`aiosubinterp.demo.zoo` run **at the same time**,
each from the same initial circles with the same physics, as
:mod:`aiosubinterp.demo.stream` runs them (threads, a collector thread,
spawned processes and pipes, interpreters streaming zero-copy views over
channels). Every canvas shows the initial circles (frame 0) at once, before
the slower contenders (spawned processes) send their first frame.

One run at a time per server, whatever the number of pages: four contenders
already share out every core. A page opened while another page's run goes
on does not start its own (the server answers ``busy``; the first page goes
on); its Start button takes the run over (the other page's contenders stop,
and that page says why).

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
from collections.abc import Sequence
from importlib import resources
from typing import Any

from aiohttp import WSMsgType, web

from aiosubinterp.demo import circles as _circles
from aiosubinterp.demo import zoo
from aiosubinterp.demo.circles import Circle, Params
from aiosubinterp.demo.stream import (
    CLK_TCK,
    FPS_WINDOW,
    HEADER,
    LAST,
    MAGIC,
    RUNNERS,
    Run,
    parse_frame,
    ticks,
)

__all__ = ["CONTENDERS", "HEADER", "LAST", "MAGIC", "make_app", "page", "parse_frame", "serve"]

CONTENDERS = zoo.CONTENDERS
SEND_INTERVAL = 1 / 30  # newest frame of each contender to the page, at most this often
STATS_INTERVAL = 0.5
MAX_CIRCLES = 100_000
MAX_WORKERS = 64
STOP_TIMEOUT = 15.0  # a contender that does not stop in this time is cancelled
BUSY = (
    "another page is running the demo on this server (one run at a time: the contenders "
    "share every core); Start takes it over"
)
TAKEN_OVER = "another page started the demo on this server: this page's run stopped"

DEFAULTS: web.AppKey[dict[str, Any]] = web.AppKey("defaults")
SESSIONS: web.AppKey[set[Any]] = web.AppKey("sessions")  # of Session
# Held from a start's check for other pages' runs until its contenders are started,
# so that two pages starting at once cannot both see none and run at the same time.
STARTING: web.AppKey[asyncio.Lock] = web.AppKey("starting")


def page() -> str:
    """The page (package data)."""
    return resources.files("aiosubinterp.demo").joinpath("live.html").read_text("utf-8")


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
        if not isinstance(names, list) or not names or any(n not in CONTENDERS for n in names):
            raise ValueError(f"contenders must be a non-empty list of {', '.join(CONTENDERS)}")
        return cls(
            number("circles", 1, MAX_CIRCLES),
            number("workers", 1, MAX_WORKERS),
            number("stride", 1, 1000),
            number("frames", 0, 10**9),
            number("seed", 0, 2**31),
            tuple(n for n in CONTENDERS if n in names),
        )


class Session:
    """One page: its contenders' runs and the task that feeds the WebSocket."""

    def __init__(self, ws: web.WebSocketResponse, defaults: dict[str, Any]) -> None:
        self.ws = ws
        self.defaults = defaults
        self.runs: list[Run] = []
        self.sender: asyncio.Task[None] | None = None
        self.main_tid = threading.get_native_id()
        self._server: deque[tuple[float, int]] = deque()
        self._busy: Any = None

    @property
    def running(self) -> bool:
        """Whether a contender of this page's run has not ended yet."""
        return any(run.task is not None and not run.task.done() for run in self.runs)

    async def start(self, cmd: dict[str, Any], others: Sequence[Session] = ()) -> Config:
        """Stop what runs here and in ``others``, then start the contenders ``cmd`` asks for.

        ValueError: ``cmd`` is refused, and nothing was stopped.
        """
        config = Config.parse(cmd, self.defaults)
        params, initial = _circles.initial_state(config.circles, config.seed)
        if any(name != "single" for name in config.contenders):
            _circles.split(initial, params, config.workers)  # strips too narrow: ValueError
        await asyncio.gather(self.stop(), *(other.stop(TAKEN_OVER) for other in others))
        self.runs = [
            Run(name, CONTENDERS.index(name), config.workers, config.frames)
            for name in config.contenders
        ]
        for run in self.runs:
            run.task = asyncio.create_task(self._run(run, config, params, initial))
        await self.ws.send_json(
            {
                "type": "started",
                "width": params[0],
                "height": params[1],
                **dataclasses.asdict(config),
                "contenders": [
                    {"name": r.name, "index": r.index, "label": r.label} for r in self.runs
                ],
            }
        )
        # Frame 0, the initial circles, on every canvas at once: spawned processes
        # take seconds to send their first frame.
        body = struct.pack(
            f"<{3 * len(initial)}f", *(v for c in initial for v in (c[1], c[2], c[5]))
        )
        for run in self.runs:
            await self.ws.send_bytes(
                HEADER.pack(MAGIC, run.index, 0, config.workers, 0, len(initial)) + body
            )
        # Only now: the page must get "started", then frame 0, then the computed frames.
        self.sender = asyncio.create_task(self._send())
        return config

    async def _run(self, run: Run, config: Config, params: Params, initial: list[Circle]) -> None:
        run.state = "running"
        try:
            await RUNNERS[run.name](
                run, initial, params, config.workers, config.frames, config.stride
            )
        except Exception as exc:  # noqa: BLE001 - shown on the page, the others go on
            run.state, run.error = "error", f"{type(exc).__name__}: {exc}"
        else:
            run.state = "stopped" if run.stop.is_set() else "done"

    async def stop(self, reason: str = "") -> None:
        """Stop every contender and wait until each has cleaned up (idempotent).

        ``reason``: why, when it is not the page's own doing (shown on the page).
        """
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
                await self.ws.send_json({"type": "stopped", "reason": reason})
        self.sender = None

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        for run in self.runs:
            run.sample(now)
        single = next((r.fps for r in self.runs if r.name == "single"), None)
        used = ticks(f"/proc/self/task/{self.main_tid}/stat") or 0
        self._server.append((now, used))
        while len(self._server) > 2 and now - self._server[1][0] >= FPS_WINDOW:
            self._server.popleft()
        t0, c0 = self._server[0]
        busy = zoo.machine_busy(self._busy) if self._busy is not None else float("nan")
        self._busy = zoo.machine_busy()
        return {
            "type": "stats",
            "contenders": [r.describe(single) for r in self.runs],
            "server_cpu": round((used - c0) / CLK_TCK / (now - t0), 2) if now > t0 else 0.0,
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
        await ws.send_json(
            {
                "type": "hello",
                "contenders": list(CONTENDERS),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
                **defaults,
            }
        )
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                cmd = json.loads(msg.data)
                if not isinstance(cmd, dict):
                    raise ValueError("a command is a JSON object with an 'op'")
                if cmd.get("op") == "start":
                    await _start(app, session, cmd)
                elif cmd.get("op") == "stop":
                    await session.stop()
                else:
                    raise ValueError(f"unknown op {cmd.get('op')!r}: start or stop")
            except ValueError as exc:
                await ws.send_json({"type": "error", "message": str(exc)})
    except ConnectionError:
        pass  # the page went away while we wrote to it
    finally:
        app[SESSIONS].discard(session)
        # The page is gone (or the server shuts down): its contenders stop.
        await asyncio.shield(session.stop())
    return ws


async def _start(app: web.Application, session: Session, cmd: dict[str, Any]) -> None:
    """A page's start: one run per server.

    ``cmd["auto"]`` (the page has just opened) while another page's run goes
    on: refused with ``busy``, that run goes on. A start the user asked for
    takes the run over: the other pages' contenders stop first.
    """
    async with app[STARTING]:
        others = [s for s in app[SESSIONS] if s is not session and s.running]
        if others and cmd.get("auto"):
            await session.ws.send_json({"type": "busy", "message": BUSY})
            return
        await session.start(cmd, others)


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
    app[STARTING] = asyncio.Lock()
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
            raise _ListenError(
                f"demo --serve: cannot listen on {host}:{port}: "
                f"{exc.strerror or exc}; choose another --port (0: any free)"
            ) from None
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        real_port = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
        print(
            f"aiosubinterp live demo ({loop} loop, {os.cpu_count()} CPUs): "
            f"open http://{shown}:{real_port}/ in a browser; Ctrl-C stops",
            flush=True,
        )
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()  # until SIGTERM, or Ctrl-C cancels us
    finally:
        await runner.cleanup()


def serve(
    host: str = "127.0.0.1", port: int = 8080, circles: int = 3000, workers: int | None = None
) -> int:
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
