"""``serve``: an ASGI application served from N interpreters of this process.

Main creates the listening sockets (one per slot with ``SO_REUSEPORT``, or
one for all) and an ``InterpreterPool`` of N interpreters
(``max_tasks_per_interpreter=1``: an interpreter whose serve task ended is
destroyed and a fresh one takes its place), and submits one
``aiosubinterp._serve.worker.serve_interpreter`` task per slot. Each gets
its slot's socket fd by number (so does a replacement), a control channel
(main sends ``"stop"``) and the shared events channel (the worker sends
``("started", slot, id)``). Main never imports the application.

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
import time
from typing import Any

__all__ = ["serve"]

_log = logging.getLogger("aiosubinterp.serve")
_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": logging.DEBUG,
}
_LIFESPANS = ("auto", "on", "off")


def _check_app_path(app: object) -> str:
    if not isinstance(app, str):
        raise TypeError(
            f"serve(app): the application's import path as a 'module:attribute' "
            f"string, not a {type(app).__name__} (an application object cannot "
            "cross into the interpreters: each one imports it)"
        )
    module, sep, attr = app.partition(":")
    if (
        not sep
        or not module
        or not attr
        or any(not p.isidentifier() for p in module.split(".") + attr.split("."))
    ):
        raise ValueError(
            f"application path {app!r}: expected 'module:attribute', e.g. 'myproject.asgi:app'"
        )
    return app


def _positive(name: str, value: object, kind: type = float, allow_none: bool = True) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise TypeError(
            f"serve({name}=...): expected {'an int' if kind is int else 'a number'}, got {value!r}"
        )
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


def _listen(
    host: str, port: int, uds: str | None, fd: int | None, backlog: int, reuse_port: bool = False
) -> socket.socket:
    """A listening socket; with reuse_port (TCP, where the system balances it:
    Linux), bound with SO_REUSEPORT, so that more can bind the address."""
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
        if reuse_port and sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT"):
            with contextlib.suppress(OSError):  # not on this kernel: one shared socket
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
    timeout_request_head: float = 20.0,
    timeout_graceful_shutdown: float | None = None,
    limit_concurrency: int | None = None,
    limit_max_requests: int | None = None,
    timeout_worker_healthcheck: float | None = 30.0,
    backlog: int = 2048,
    h11_max_incomplete_event_size: int = 16 * 1024,
    reuse_port: bool = True,
    copies: bool | None = None,
    proxy_headers: bool = True,
    forwarded_allow_ips: str | list[str] | None = None,
    ws_max_size: int = 16 * 1024 * 1024,
    ws_ping_interval: float | None = 20.0,
    ws_ping_timeout: float | None = 20.0,
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
        timeout_keep_alive: seconds an idle keep-alive connection stays open
            (and a client that stalls in the middle of a request head).
        timeout_request_head: seconds a request line and headers get to
            arrive whole, from their first byte; a client still sending them
            then (one byte at a time, say) gets ``408 Request Timeout``.
        timeout_graceful_shutdown: seconds the requests in flight get to finish
            on SIGTERM/SIGINT before they are cancelled (None: no limit).
        limit_concurrency: at most this many requests at once per interpreter;
            more get ``503 Service Unavailable``.
        limit_max_requests: replace an interpreter by a fresh one after it
            answered this many requests (the others keep serving meanwhile).
        timeout_worker_healthcheck: an interpreter whose event loop gave no
            sign of life for this many seconds (an application blocking it:
            a busy loop, a blocking call) is interrupted and replaced by a
            fresh one; None: never.
        backlog: the listening socket's backlog.
        h11_max_incomplete_event_size: the largest request line plus headers
            in bytes; a larger one gets ``431 Request Header Fields Too Large``.
        reuse_port: with ``host`` and ``port`` on Linux, each interpreter
            accepts from a listening socket of its own, all bound to the
            address with ``SO_REUSEPORT``: the kernel spreads new connections
            evenly. From one shared socket, the interpreter that wakes first
            takes a whole burst of connections (all of a benchmark's, say) and
            the others stay idle. The socket of an interpreter being replaced
            keeps its connections waiting for the replacement. False: one
            socket for all (as always with ``uds`` and ``fd``).
        copies: extension modules that refuse interpreters (pydantic-core,
            so FastAPI; orjson, numpy) load in each interpreter from a private
            copy of their file (``InterpreterPool(fallback="copy")``; its
            costs apply per interpreter, and again per replacement). None
            (default): where this Python can (CPython 3.13+, not
            free-threaded builds); True: required (an error where it cannot);
            False: never (such a module fails the application's import).
        proxy_headers: behind a reverse proxy: for a connection from a
            trusted proxy, the ``X-Forwarded-For`` header gives the ASGI
            ``client`` (the nearest address that is not itself a trusted
            proxy) and ``X-Forwarded-Proto`` the ``scheme`` (``http`` or
            ``https``); the access log shows that client. False: ignored.
        forwarded_allow_ips: the trusted proxies: addresses and networks
            (``"10.0.0.0/8"``), comma-separated or a list, ``"*"`` for any
            peer, ``"unix:"`` for peers on a Unix domain socket. None
            (default): the ``FORWARDED_ALLOW_IPS`` environment variable, or
            ``"127.0.0.1"``.
        ws_max_size: the largest WebSocket message in bytes; a larger one
            closes the WebSocket with 1009 (message too big).
        ws_ping_interval: seconds between the pings each WebSocket sends
            its client once it was answered (None: no pings).
        ws_ping_timeout: seconds a ping's answer may take; then the client
            is taken as gone: the connection is dropped and the application
            gets ``websocket.disconnect`` with code 1011 (None: no limit).

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
        raise RuntimeError(
            "serve needs CPython 3.13 or newer: CPython 3.12 aborts at exit "
            "once an event loop ran in a subinterpreter"
        )
    import importlib.util

    if importlib.util.find_spec("h11") is None:
        raise RuntimeError("serve needs h11: pip install 'aiosubinterp[serve]'")
    if workers is None:
        workers = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
    _positive("workers", workers, int, allow_none=False)
    if lifespan not in _LIFESPANS:
        raise ValueError(f"serve(lifespan={lifespan!r}): choose from {', '.join(_LIFESPANS)}")
    if log_level not in _LEVELS:
        raise ValueError(f"serve(log_level={log_level!r}): choose from {', '.join(_LEVELS)}")
    _positive("timeout_keep_alive", timeout_keep_alive, allow_none=False)
    _positive("timeout_request_head", timeout_request_head, allow_none=False)
    _positive("timeout_graceful_shutdown", timeout_graceful_shutdown)
    _positive("limit_concurrency", limit_concurrency, int)
    _positive("limit_max_requests", limit_max_requests, int)
    _positive("timeout_worker_healthcheck", timeout_worker_healthcheck)
    _positive("backlog", backlog, int, allow_none=False)
    _positive("h11_max_incomplete_event_size", h11_max_incomplete_event_size, int, allow_none=False)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"serve(port={port!r}) must be an int in [0, 65535]")
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise ValueError(
            f"serve(root_path={root_path!r}): a path starting with '/', without a trailing '/'"
        )
    if copies not in (None, True, False):
        raise TypeError(f"serve(copies={copies!r}): True, False or None")
    proxies = _trusted_proxies(forwarded_allow_ips) if proxy_headers else None
    _positive("ws_max_size", ws_max_size, int, allow_none=False)
    _positive("ws_ping_interval", ws_ping_interval)
    _positive("ws_ping_timeout", ws_ping_timeout)
    from aiosubinterp._engine.fallback import copies_unavailable

    why = copies_unavailable()
    if copies and why is not None:
        raise ValueError(f"serve(copies=True): private copies of extension modules: {why}")
    _configure_logging(_LEVELS[log_level], access_log)
    if app_dir is not None:
        sys.path.insert(0, os.path.abspath(app_dir))
    cfg = {
        "factory": bool(factory),
        "root_path": root_path,
        "lifespan": lifespan,
        "access_log": bool(access_log),
        "timeout_keep_alive": float(timeout_keep_alive),
        "timeout_request_head": float(timeout_request_head),
        "timeout_graceful_shutdown": timeout_graceful_shutdown,
        "limit_concurrency": limit_concurrency,
        "limit_max_requests": limit_max_requests,
        "timeout_worker_healthcheck": timeout_worker_healthcheck,
        "backlog": backlog,
        "h11_max_incomplete_event_size": h11_max_incomplete_event_size,
        "copies": why is None if copies is None else copies,
        "forwarded_allow_ips": proxies,
        "ws_max_size": ws_max_size,
        "ws_ping_interval": ws_ping_interval,
        "ws_ping_timeout": ws_ping_timeout,
    }
    per_worker = reuse_port and workers > 1 and uds is None and fd is None
    socks = [_listen(host, port, uds, fd, backlog, reuse_port=per_worker)]
    try:
        if per_worker and _reuses_port(socks[0]):
            bound = socks[0].getsockname()[:2]  # the port chosen, for port 0
            for _ in range(workers - 1):
                socks.append(_listen(bound[0], bound[1], None, None, backlog, reuse_port=True))
        return asyncio.run(_Supervisor(app, workers, cfg, socks).run())
    finally:
        for sock in socks:
            sock.close()
        if uds is not None:
            with contextlib.suppress(OSError):
                os.unlink(uds)


def _trusted_proxies(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """serve(forwarded_allow_ips=) checked: its entries, each an address, a network, * or unix:."""
    from aiosubinterp._serve.proxies import TrustedProxies

    if value is None:
        value = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    if isinstance(value, str):
        entries = [e.strip() for e in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(e, str) for e in value):
        entries = [e.strip() for e in value]
    else:
        raise TypeError(
            f"serve(forwarded_allow_ips={value!r}): a string of comma-separated "
            "addresses or a list of them"
        )
    allowed = tuple(e for e in entries if e)
    try:
        TrustedProxies(allowed)  # what each interpreter will make of them
    except ValueError as exc:
        raise ValueError(
            f"serve(forwarded_allow_ips={value!r}): {exc}; give addresses or networks "
            "(10.0.0.0/8), comma-separated, '*' for any peer or 'unix:' for Unix socket peers"
        ) from None
    return allowed


def _reuses_port(sock: socket.socket) -> bool:
    option = getattr(socket, "SO_REUSEPORT", None)
    return option is not None and bool(sock.getsockopt(socket.SOL_SOCKET, option))


class _Slot:
    """One interpreter's place: its current serve task and what main knows of it.

    A slot outlives its interpreters: a replacement is a new ``_Slot`` with
    the same ``index`` and a new ``ticket`` (unique in the process), the
    name the worker's events carry, so that a late event of the interpreter
    it replaced is not taken for the new one's.
    """

    __slots__ = ("beat", "closed", "control", "index", "started", "task", "ticket")

    def __init__(self, index: int, ticket: int, task: Any, control: Any) -> None:
        self.index = index
        self.ticket = ticket
        self.task = task
        self.control = control  # the send end of its control channel
        self.started = False
        self.closed = False  # it closed its duplicate of the listening socket
        self.beat = time.monotonic()  # its last sign of life


class _Supervisor:
    """Main's side: the pool, one slot per interpreter, the signals, the health checks."""

    def __init__(
        self, app: str, workers: int, cfg: dict[str, Any], socks: list[socket.socket]
    ) -> None:
        self.app = app
        self.workers = workers
        self.cfg = cfg
        self.socks = socks  # one per slot index (SO_REUSEPORT), or one for all
        self.sock = socks[0]
        self.stopping = asyncio.Event()
        self.slots: dict[int, _Slot] = {}  # ticket -> slot, the current interpreters only
        self.tickets = 0
        self.served_once = False  # the "Serving ..." line was logged
        self.changed = asyncio.Event()  # a slot started, closed or missed its beats
        self.hung: set[int] = set()  # tickets given up on whose loop has not run since

    def _where(self) -> str:
        name = self.sock.getsockname()
        if isinstance(name, tuple):
            host = f"[{name[0]}]" if ":" in name[0] else name[0]
            return f"http://{host}:{name[1]}"
        return f"unix socket {name}" if name else f"fd {self.sock.fileno()}"

    def _on_signal(self, signum: int) -> None:
        if self.stopping.is_set():
            _log.warning("%s again: cancelling the requests in flight", signal.Signals(signum).name)
            for slot in self.slots.values():
                if not slot.task.done():
                    self.hung.add(slot.ticket)  # until its loop reports it closed
                    slot.task.cancel()
            return
        _log.info(
            "%s: shutting down (finishing the requests in flight)", signal.Signals(signum).name
        )
        self.stopping.set()

    def _start_slot(self, pool: Any, index: int, events: Any) -> None:
        import aiosubinterp
        from aiosubinterp._serve import worker

        self.tickets += 1
        send, recv = aiosubinterp.open_channel(1)
        task = pool.submit(
            worker.serve_interpreter,
            self.socks[index % len(self.socks)].fileno(),
            self.app,
            self.cfg,
            recv,
            events,
            self.tickets,
        )
        self.slots[self.tickets] = _Slot(index, self.tickets, task, send)

    async def run(self) -> int:
        import aiosubinterp

        loop = asyncio.get_running_loop()
        signals = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal, sig)
                signals.append(sig)
        # Unbounded: a worker reports without waiting (its start, its beats,
        # its close), and _events reads them at once.
        events_send, events_recv = aiosubinterp.open_channel(math.inf)
        pool = aiosubinterp.InterpreterPool(
            self.workers,
            max_tasks_per_interpreter=1,
            idle_spin=0,
            cancel_grace=5.0,
            fallback="copy" if self.cfg["copies"] else None,
        )
        helpers = [loop.create_task(self._events(events_recv))]
        if self.cfg["timeout_worker_healthcheck"] is not None:
            helpers.append(loop.create_task(self._watch(self.cfg["timeout_worker_healthcheck"])))
        status = 1
        try:
            await pool.start()
            try:
                for index in range(self.workers):
                    self._start_slot(pool, index, events_send)
                status = await self._supervise(pool, events_send)
                await self._stop_all()
            finally:
                if self.hung:
                    self._exit_without(self.hung, status)
                await pool.aclose()
            return status
        finally:
            for helper in helpers:
                helper.cancel()
            for sig in signals:
                loop.remove_signal_handler(sig)
            events_send.close()
            events_recv.close()
            for slot in self.slots.values():
                slot.control.close()

    def _exit_without(self, hung: set[int], status: int) -> None:
        """End the process now: an interpreter whose loop is still blocked cannot be destroyed.

        CPython destroys an interpreter only once its thread returns, and
        closing the pool (or exiting normally) would wait for it for ever.
        """
        _log.error(
            "%d interpreter(s) still block their event loop (not answering, or "
            "cancelled by a second signal): the process exits without waiting for "
            "them",
            len(hung),
        )
        logging.shutdown()  # flush the handlers: os._exit skips it
        os._exit(status)

    async def _events(self, recv: Any) -> None:
        async for kind, ticket, interp in recv:
            slot = self.slots.get(ticket)
            if slot is None:  # from an interpreter already replaced
                if kind == "closed":
                    self.hung.discard(ticket)  # its loop runs again: it is ending
                continue
            slot.beat = time.monotonic()
            if kind == "started":
                slot.started = True
                if self.served_once:
                    _log.info("Interpreter %d serves in slot %d", interp, slot.index)
                elif all(s.started for s in self.slots.values()):
                    self.served_once = True
                    _log.info(
                        "Serving %s on %s from %d interpreters (press Ctrl-C to stop)",
                        self.app,
                        self._where(),
                        self.workers,
                    )
            elif kind == "closed":
                slot.closed = True
                self.changed.set()

    async def _watch(self, silence: float) -> None:
        """Cancel the task of a serving interpreter silent for ``silence`` seconds (hung).

        Its loop sends a beat every third of that; a loop that does not run
        (an application blocking it) sends none. The pool interrupts the
        task, and replaces the interpreter if it does not stop within its
        grace; the slot gets a fresh interpreter either way.
        """
        while not self.stopping.is_set():
            await asyncio.sleep(silence / 3)
            now = time.monotonic()
            for slot in list(self.slots.values()):
                if (
                    slot.started
                    and not slot.task.done()
                    and not self.stopping.is_set()
                    and now - slot.beat > silence
                ):
                    _log.error(
                        "The interpreter of slot %d sent no sign of life for %.1f s "
                        "(--timeout-worker-healthcheck %g): interrupting and "
                        "replacing it",
                        slot.index,
                        now - slot.beat,
                        silence,
                    )
                    self.hung.add(slot.ticket)
                    slot.task.cancel()

    async def _supervise(self, pool: Any, events: Any) -> int:
        stop = asyncio.get_running_loop().create_task(self.stopping.wait())
        try:
            while True:
                tasks = [slot.task for slot in self.slots.values()]
                done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    return 0
                for slot in [s for s in self.slots.values() if s.task in done]:
                    del self.slots[slot.ticket]
                    slot.control.close()
                    status = self._ended(slot)
                    if status is not None:  # it could not start: give up
                        self.stopping.set()
                        return status
                    self._start_slot(pool, slot.index, events)
        finally:
            stop.cancel()

    def _ended(self, slot: _Slot) -> int | None:
        """Report how a slot's task ended; an exit status if serving must end."""
        task, index = slot.task, slot.index
        if task.cancelled():
            _log.error("The interpreter of slot %d was cancelled; replacing it", index)
            return None
        exc = task.exception()
        if exc is not None:
            _log.error("The interpreter of slot %d failed; replacing it", index, exc_info=exc)
            return None
        result = task.result()
        if result[0] == "error":
            _log.error("%s", result[1])
            return int(result[2])
        if result[0] == "exit":
            _log.error(
                "The interpreter of slot %d stopped: the application raised "
                "SystemExit(%s); replacing it",
                index,
                result[2],
            )
        elif result[0] == "recycle":
            _log.info(
                "The interpreter of slot %d answered %d requests "
                "(--limit-max-requests); replacing it",
                index,
                result[1],
            )
        return None

    async def _close_listener(self) -> None:
        """Close main's listening socket once no interpreter may still accept or dup it.

        From then on new connections are refused, as the requests in flight
        finish. An interpreter still starting dups the fd by number: main
        waits for each slot's ``closed`` event (or for its task to end).
        """
        while True:
            pending = [s.task for s in self.slots.values() if not s.task.done() and not s.closed]
            if not pending:
                break
            self.changed.clear()
            changed = asyncio.get_running_loop().create_task(self.changed.wait())
            try:
                await asyncio.wait([changed, *pending], return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
        for sock in self.socks:
            sock.close()
        _log.info("Stopped accepting connections")

    async def _stop_all(self) -> None:
        for slot in self.slots.values():
            with contextlib.suppress(Exception):
                slot.control.send_nowait("stop")
        await self._close_listener()
        if self.slots:
            await asyncio.wait([slot.task for slot in self.slots.values()])
        for slot in self.slots.values():
            if not slot.task.cancelled() and slot.task.exception() is not None:
                _log.error(
                    "The interpreter of slot %d failed while stopping",
                    slot.index,
                    exc_info=slot.task.exception(),
                )
        _log.info("Finished serving %s", self.app)
