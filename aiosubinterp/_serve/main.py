"""``serve``: an ASGI application served from N interpreters of this process.

Main creates the listening socket and an ``InterpreterPool`` of N
interpreters (``max_tasks_per_interpreter=1``: an interpreter whose serve
task ended is destroyed and a fresh one takes its place), and submits one
``aiosubinterp._serve.worker.serve_interpreter`` task per slot. Each gets
the socket's fd by number, a control channel (main sends ``"stop"``) and the
shared events channel (the worker sends ``("started", slot, id)``). Main
never imports the application.

While serving, a slot whose task ends (``--limit-max-requests`` reached, or
the task failed: the application raised ``SystemExit`` or a bug) gets a new
task on a fresh interpreter; the others keep accepting meanwhile.
SIGTERM or SIGINT sends ``"stop"`` to every slot: each stops accepting,
finishes its requests in flight within ``timeout_graceful_shutdown``, runs
the lifespan shutdown and returns; a second signal cancels what still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import sys
import threading
from typing import Any

__all__ = ["serve"]

_log = logging.getLogger("aiosubinterp.serve")
_LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
           "info": logging.INFO, "debug": logging.DEBUG, "trace": logging.DEBUG}
_LIFESPANS = ("auto", "on", "off")


def _check_app_path(app: object) -> str:
    if not isinstance(app, str):
        raise TypeError(f"serve(app): the application's import path as a 'module:attribute' "
                        f"string, not a {type(app).__name__} (an application object cannot "
                        "cross into the interpreters: each one imports it)")
    module, sep, attr = app.partition(":")
    if not sep or not module or not attr or any(not p.isidentifier() for p in
                                                 module.split(".") + attr.split(".")):
        raise ValueError(f"application path {app!r}: expected 'module:attribute', "
                         "e.g. 'myproject.asgi:app'")
    return app


def _positive(name: str, value: object, kind: type = float, allow_none: bool = True) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise TypeError(f"serve({name}=...): expected {'an int' if kind is int else 'a number'}"
                        f", got {value!r}")
    if not value > 0:
        raise ValueError(f"serve({name}=...) must be positive, got {value!r}")
    return value


def _configure_logging(level: int, access_log: bool) -> None:
    """Our loggers' levels; a stderr handler unless the program configured logging."""
    logger = logging.getLogger("aiosubinterp.serve")
    logger.setLevel(level)
    access = logging.getLogger("aiosubinterp.serve.access")
    access.setLevel(level if access_log else logging.CRITICAL + 1)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(handler)


def _listen(host: str, port: int, uds: str | None, fd: int | None, backlog: int) -> socket.socket:
    if fd is not None:
        sock = socket.socket(fileno=fd)
        sock.listen(backlog)
        return sock
    if uds is not None:
        with contextlib.suppress(FileNotFoundError):
            if os.path.exists(uds) and not os.path.isdir(uds):
                import stat

                if stat.S_ISSOCK(os.stat(uds).st_mode):
                    os.unlink(uds)  # a stale socket of an earlier run
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(uds)
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
    sock.listen(backlog)
    return sock


def serve(
    app: str,
    *,
    workers: int | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    uds: str | None = None,
    fd: int | None = None,
    app_dir: str | None = ".",
    factory: bool = False,
    root_path: str = "",
    lifespan: str = "auto",
    log_level: str = "info",
    access_log: bool = True,
    timeout_keep_alive: float = 5.0,
    timeout_graceful_shutdown: float | None = None,
    limit_concurrency: int | None = None,
    limit_max_requests: int | None = None,
    backlog: int = 2048,
    h11_max_incomplete_event_size: int = 16 * 1024,
) -> int:
    """Serve an ASGI 3 application from ``workers`` interpreters of this process, until stopped.

    Each interpreter imports the application itself, runs its own asyncio
    event loop and an HTTP/1.1 server (h11), and accepts connections from
    one listening socket created here. SIGTERM or SIGINT (Ctrl-C) stops it:
    every interpreter stops accepting and finishes its requests in flight.
    ``python -m aiosubinterp serve module:app`` calls this. CPython 3.13+;
    needs h11 (the ``serve`` extra).

    Args:
        app: the application's import path, ``"module:attribute"``
            (``attribute`` may be dotted).
        workers: number of interpreters (default: the CPUs this process may use).
        host: address to bind (``"::1"`` or any address with a colon: IPv6).
        port: port to bind (0: any free port; the log line says which).
        uds: bind this Unix domain socket path instead of host and port.
        fd: serve from this already bound socket's file descriptor instead.
        app_dir: folder put first on ``sys.path`` (of main and of every
            interpreter) before the application is imported; None: none.
        factory: ``app`` names a function without arguments that returns the application.
        root_path: the ASGI ``root_path`` (the application is mounted below this path).
        lifespan: ``"auto"`` (run the ASGI lifespan protocol if the application
            supports it), ``"on"`` (it must), ``"off"``. It runs in every interpreter.
        log_level: ``critical``, ``error``, ``warning``, ``info``, ``debug``
            (``trace``: as debug): the level of the loggers ``aiosubinterp.serve``
            and ``aiosubinterp.serve.access``. Records logged in the
            interpreters are handled by this interpreter's logging; a
            handler on stderr is added unless logging is configured.
        access_log: one ``aiosubinterp.serve.access`` record per response (INFO).
        timeout_keep_alive: seconds an idle keep-alive connection stays open.
        timeout_graceful_shutdown: seconds the requests in flight get to finish
            on SIGTERM/SIGINT before they are cancelled (None: no limit).
        limit_concurrency: at most this many requests at once per interpreter;
            more get ``503 Service Unavailable``.
        limit_max_requests: replace an interpreter by a fresh one after it
            answered this many requests (the others keep serving meanwhile).
        backlog: the listening socket's backlog.
        h11_max_incomplete_event_size: the largest request line plus headers
            in bytes; a larger one gets ``431 Request Header Fields Too Large``.

    Returns:
        The exit status: 0 once stopped by a signal, 1 if the application
        could not be loaded, 3 if its lifespan startup failed.

    Raises:
        ValueError, TypeError: a bad argument (before anything starts).
        OSError: the address cannot be bound.
        RuntimeError: CPython 3.12 (event loops in interpreters abort it at
            exit), or h11 is not installed.
    """
    app = _check_app_path(app)
    if sys.version_info < (3, 13):
        raise RuntimeError("serve needs CPython 3.13 or newer: CPython 3.12 aborts at exit "
                           "once an event loop ran in a subinterpreter")
    import importlib.util

    if importlib.util.find_spec("h11") is None:
        raise RuntimeError("serve needs h11: pip install 'aiosubinterp[serve]'")
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    _positive("workers", workers, int, allow_none=False)
    if lifespan not in _LIFESPANS:
        raise ValueError(f"serve(lifespan={lifespan!r}): choose from {', '.join(_LIFESPANS)}")
    if log_level not in _LEVELS:
        raise ValueError(f"serve(log_level={log_level!r}): choose from {', '.join(_LEVELS)}")
    _positive("timeout_keep_alive", timeout_keep_alive, allow_none=False)
    _positive("timeout_graceful_shutdown", timeout_graceful_shutdown)
    _positive("limit_concurrency", limit_concurrency, int)
    _positive("limit_max_requests", limit_max_requests, int)
    _positive("backlog", backlog, int, allow_none=False)
    _positive("h11_max_incomplete_event_size", h11_max_incomplete_event_size, int,
              allow_none=False)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"serve(port={port!r}) must be an int in [0, 65535]")
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise ValueError(f"serve(root_path={root_path!r}): a path starting with '/', "
                         "without a trailing '/'")
    _configure_logging(_LEVELS[log_level], access_log)
    if app_dir is not None:
        sys.path.insert(0, os.path.abspath(app_dir))
    cfg = {"factory": bool(factory), "root_path": root_path, "lifespan": lifespan,
           "access_log": bool(access_log), "timeout_keep_alive": float(timeout_keep_alive),
           "timeout_graceful_shutdown": timeout_graceful_shutdown,
           "limit_concurrency": limit_concurrency, "limit_max_requests": limit_max_requests,
           "backlog": backlog, "h11_max_incomplete_event_size": h11_max_incomplete_event_size}
    sock = _listen(host, port, uds, fd, backlog)
    try:
        return asyncio.run(_Supervisor(app, workers, cfg, sock).run())
    finally:
        sock.close()
        if uds is not None:
            with contextlib.suppress(OSError):
                os.unlink(uds)


class _Supervisor:
    """Main's side: the pool, one slot per interpreter, the signals."""

    def __init__(self, app: str, workers: int, cfg: dict[str, Any], sock: socket.socket) -> None:
        self.app = app
        self.workers = workers
        self.cfg = cfg
        self.sock = sock
        self.stopping = asyncio.Event()
        self.forced = False
        self.tasks: dict[asyncio.Future[Any], int] = {}  # serve task -> slot
        self.controls: dict[int, Any] = {}  # slot -> the send end of its control channel
        self.started: set[int] = set()
        self.closed: set[int] = set()  # slots whose interpreter closed its listening socket
        self.closed_changed = asyncio.Event()

    def _where(self) -> str:
        name = self.sock.getsockname()
        if isinstance(name, tuple):
            host = f"[{name[0]}]" if ":" in name[0] else name[0]
            return f"http://{host}:{name[1]}"
        return f"unix socket {name}" if name else f"fd {self.sock.fileno()}"

    def _on_signal(self, signum: int) -> None:
        if self.stopping.is_set():
            _log.warning("%s again: cancelling the requests in flight",
                         signal.Signals(signum).name)
            self.forced = True
            for task in self.tasks:
                task.cancel()
            return
        _log.info("%s: shutting down (finishing the requests in flight)",
                  signal.Signals(signum).name)
        self.stopping.set()

    def _start_slot(self, pool: Any, slot: int, events: Any) -> None:
        import aiosubinterp
        from aiosubinterp._serve import worker

        send, recv = aiosubinterp.open_channel(1)
        task = pool.submit(worker.serve_interpreter, self.sock.fileno(), self.app, self.cfg,
                           recv, events, slot)
        self.tasks[task] = slot
        self.controls[slot] = send

    async def run(self) -> int:
        import aiosubinterp

        loop = asyncio.get_running_loop()
        signals = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal, sig)
                signals.append(sig)
        # Unbounded: a worker reports "closed" without waiting (two items per
        # interpreter it starts, read at once by _events).
        events_send, events_recv = aiosubinterp.open_channel(math.inf)
        pool = aiosubinterp.InterpreterPool(self.workers, max_tasks_per_interpreter=1,
                                            idle_spin=0, cancel_grace=5.0)
        listener = loop.create_task(self._events(events_recv))
        try:
            async with pool:
                for slot in range(self.workers):
                    self._start_slot(pool, slot, events_send)
                status = await self._supervise(pool, events_send)
                await self._stop_all()
                return status
        finally:
            listener.cancel()
            for sig in signals:
                loop.remove_signal_handler(sig)
            events_send.close()
            events_recv.close()
            for send in self.controls.values():
                send.close()

    async def _events(self, recv: Any) -> None:
        async for kind, slot, interp in recv:
            if kind == "started":
                if slot not in self.started:
                    self.started.add(slot)
                    if len(self.started) == self.workers:
                        _log.info("Serving %s on %s from %d interpreters (press Ctrl-C to stop)",
                                  self.app, self._where(), self.workers)
                else:
                    _log.info("Interpreter %d serves in slot %d", interp, slot)
            elif kind == "closed":
                self.closed.add(slot)
                self.closed_changed.set()

    async def _supervise(self, pool: Any, events: Any) -> int:
        stop = asyncio.get_running_loop().create_task(self.stopping.wait())
        try:
            while True:
                done, _ = await asyncio.wait([stop, *self.tasks],
                                             return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    return 0
                for task in done:
                    slot = self.tasks.pop(task)
                    status = self._ended(task, slot)
                    if status is not None:  # it could not start: give up
                        self.stopping.set()
                        return status
                    self._start_slot(pool, slot, events)
        finally:
            stop.cancel()

    def _ended(self, task: asyncio.Future[Any], slot: int) -> int | None:
        """Report how a slot's task ended; an exit status if serving must end."""
        if task.cancelled():
            _log.error("The interpreter of slot %d was cancelled; replacing it", slot)
            return None
        exc = task.exception()
        if exc is not None:
            _log.error("The interpreter of slot %d failed; replacing it", slot, exc_info=exc)
            return None
        result = task.result()
        if result[0] == "error":
            _log.error("%s", result[1])
            return int(result[2])
        if result[0] == "exit":
            _log.error("The interpreter of slot %d stopped: the application raised "
                       "SystemExit(%s); replacing it", slot, result[2])
        elif result[0] == "recycle":
            _log.info("The interpreter of slot %d answered %d requests "
                      "(--limit-max-requests); replacing it", slot, result[1])
        return None

    async def _close_listener(self) -> None:
        """Close main's listening socket once no interpreter may still accept or dup it.

        From then on new connections are refused, as the requests in flight
        finish. An interpreter still starting dups the fd by number: main
        waits for each slot's ``closed`` event (or for its task to end).
        """
        while True:
            pending = [t for t, slot in self.tasks.items()
                       if not t.done() and slot not in self.closed]
            if not pending:
                break
            self.closed_changed.clear()
            changed = asyncio.get_running_loop().create_task(self.closed_changed.wait())
            try:
                await asyncio.wait([changed, *pending], return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
        self.sock.close()
        _log.info("Stopped accepting connections")

    async def _stop_all(self) -> None:
        for send in self.controls.values():
            with contextlib.suppress(Exception):
                send.send_nowait("stop")
        await self._close_listener()
        if self.tasks:
            await asyncio.wait(list(self.tasks))
        for task, slot in self.tasks.items():
            if not task.cancelled() and task.exception() is not None:
                _log.error("The interpreter of slot %d failed while stopping", slot,
                           exc_info=task.exception())
        self.tasks.clear()
        _log.info("Finished serving %s", self.app)
