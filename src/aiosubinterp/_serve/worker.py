"""One serve worker: the ``async def`` task each interpreter of ``serve`` runs for its life.

``serve_interpreter`` imports the application, runs its lifespan startup,
accepts connections from its own duplicate of the listening socket that main
created (``socket.socket(fileno=os.dup(fd))``: every interpreter's loop
accepts from the same kernel queue), and serves them with
``aiosubinterp._serve.http`` until main sends ``"stop"`` on the control
channel or ``--limit-max-requests`` responses were sent. Then it stops
accepting, lets the requests in flight finish within the graceful timeout,
cancels what is left, runs the lifespan shutdown and returns how it ended.

Main learns that the interpreter serves from a ``("started", ticket, id)``
item on the events channel, that it is alive from a ``("beat", ticket, id)``
every third of ``--timeout-worker-healthcheck`` (sent by its loop: a loop
that an application blocks sends none), and that it closed its duplicate of
the listening socket from ``("closed", ticket, id)``; what went wrong comes
back as the task's result ``("error", message, exit_code)``, so main decides
what to print.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import socket
import sys
import traceback
from typing import Any

__all__ = ["load_app", "serve_interpreter"]

_log = logging.getLogger("aiosubinterp.serve")

# Exit codes, as uvicorn's: 1 the application cannot be loaded, 3 its lifespan startup failed.
EXIT_LOAD = 1
EXIT_STARTUP = 3


class AppLoadError(Exception):
    """The application named by ``module:attribute`` cannot be loaded (the message says why)."""


def allow_asgiref_join_threads() -> None:
    """Let asgiref (Django's ASGI handler) end its requests in this interpreter.

    asgiref's ``ThreadSensitiveContext`` ends each request by starting a
    daemon thread that shuts its thread pool down, and an interpreter with its
    own GIL refuses daemon threads: every Django response was followed by a
    RuntimeError ("daemon threads are disabled in this (sub)interpreter").
    ``asgiref.sync`` gets a ``threading`` whose ``Thread`` starts a thread
    that is not a daemon instead: it ends once the pool is done, and the
    interpreter's exit waits for it. Nothing changes if asgiref is not loaded
    or daemon threads are allowed here.
    """
    import _thread
    import threading
    import types

    sync = sys.modules.get("asgiref.sync")
    if sync is None or _thread.daemon_threads_allowed():
        return
    if getattr(getattr(sync, "threading", None), "aiosubinterp_no_daemons", False):
        return

    class Thread(threading.Thread):
        def __init__(self, *args: Any, daemon: bool | None = None, **kwargs: Any) -> None:
            super().__init__(*args, daemon=False if daemon else daemon, **kwargs)

    shim = types.ModuleType("threading", "threading for asgiref.sync: no daemon threads")
    shim.__dict__.update({k: v for k, v in vars(threading).items() if not k.startswith("__")})
    shim.Thread = Thread  # type: ignore[attr-defined]
    shim.aiosubinterp_no_daemons = True  # type: ignore[attr-defined]
    setattr(sync, "threading", shim)  # noqa: B010 - a module attribute mypy cannot see


def load_app(path: str, factory: bool) -> Any:
    """The ASGI application ``module:attribute`` names (called, with ``factory``)."""
    module_name, _, attrs = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or module_name.split(".")[: len(exc.name.split("."))] != exc.name.split(
            "."
        ):
            raise  # a module the application's module imports: its traceback says which
        raise AppLoadError(
            f"Could not import module {module_name!r} (from the application "
            f"path {path!r}): no module named {exc.name!r}. Check the name, "
            "and the folder given by --app-dir (default: the current "
            "one)"
        ) from None
    app: Any = module
    for attr in attrs.split("."):
        try:
            app = getattr(app, attr)
        except AttributeError:
            raise AppLoadError(
                f"Attribute {attrs!r} not found in module {module_name!r} "
                f"(the application path {path!r})"
            ) from None
    if factory:
        try:
            app = app()
        except TypeError as exc:
            raise AppLoadError(f"--factory: calling {path} failed: {exc}") from None
    if not callable(app):
        made = "what the factory returned" if factory else path
        raise AppLoadError(
            f"{made} is not callable ({type(app).__name__}): not an ASGI "
            "application (an async callable taking scope, receive, send)"
        )
    return app


class Lifespan:
    """The ASGI ``lifespan`` protocol, as one task of the loop."""

    def __init__(self, app: Any, mode: str, state: dict[str, Any]) -> None:
        self.app = app
        self.mode = mode
        self.state = state
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.supported = True
        self.error: BaseException | None = None

    async def _run(self) -> None:
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        try:
            await self.app(scope, self.inbox.get, self.outbox.put)
        except Exception as exc:  # noqa: BLE001 - reported by startup()/shutdown()
            self.error = exc
        finally:
            self.outbox.put_nowait({"type": "lifespan.ended"})

    async def startup(self) -> str | None:
        """None if the application started (or has no lifespan); else the reason it did not."""
        if self.mode == "off":
            self.supported = False
            return None
        self.task = asyncio.get_running_loop().create_task(self._run())
        await self.inbox.put({"type": "lifespan.startup"})
        reply = await self.outbox.get()
        if reply["type"] == "lifespan.startup.complete":
            return None
        if reply["type"] == "lifespan.startup.failed":
            return f"the application's lifespan startup failed: {reply.get('message', '')}"
        # The application returned or raised before it answered.
        self.supported = False
        if self.mode == "auto":
            if self.error is not None:
                _log.info(
                    "ASGI 'lifespan' protocol appears unsupported (%s: %s).",
                    type(self.error).__name__,
                    self.error,
                )
            return None
        if self.error is not None:
            text = "".join(traceback.format_exception(self.error))
            return f"the application's lifespan startup raised:\n{text}"
        return "the application returned before its lifespan startup completed"

    async def shutdown(self) -> None:
        if not self.supported or self.task is None or self.task.done():
            return
        await self.inbox.put({"type": "lifespan.shutdown"})
        reply = await self.outbox.get()
        if reply["type"] == "lifespan.shutdown.failed":
            _log.error("The application's lifespan shutdown failed: %s", reply.get("message", ""))
        elif reply["type"] == "lifespan.ended" and self.error is not None:
            _log.error("The application's lifespan shutdown raised", exc_info=self.error)
        await self.task


async def serve_interpreter(
    fd: int, app_path: str, cfg: dict[str, Any], control: Any, events: Any, ticket: int
) -> tuple[Any, ...]:
    """Serve ``app_path`` on the listening socket ``fd`` until told to stop; see the module."""
    import aiosubinterp

    # Here, not at the top: main imports this module to name this function
    # for the pool, and must not load h11 and the HTTP code it never runs.
    from aiosubinterp._serve.http import Connection, ServerState

    loop = asyncio.get_running_loop()
    try:
        app = load_app(app_path, cfg["factory"])
    except AppLoadError as exc:
        return ("error", str(exc), EXIT_LOAD)
    except BaseException as exc:  # noqa: BLE001 - the application's import failed: say how
        text = "".join(traceback.format_exception(exc))
        if "does not support loading in subinterpreters" in text and not cfg["copies"]:
            text += (
                "An extension module the application imports refuses interpreters: "
                "without --no-copies, serve loads such modules from a private copy in "
                "each interpreter (CPython 3.13+, not free-threaded builds).\n"
            )
        return ("error", f"Error loading the application {app_path!r}:\n{text}", EXIT_LOAD)

    allow_asgiref_join_threads()
    state: dict[str, Any] = {}
    lifespan = Lifespan(app, cfg["lifespan"], state)
    why = await lifespan.startup()
    if why is not None:
        return ("error", why, EXIT_STARTUP)
    allow_asgiref_join_threads()  # if the startup imported it

    sock = socket.socket(fileno=os.dup(fd))
    sock.setblocking(False)
    name = sock.getsockname()
    server_addr = (name[0], name[1]) if isinstance(name, tuple) else (name, None)
    srv = ServerState(app, cfg, state, server_addr)
    server = await loop.create_server(lambda: Connection(srv), sock=sock, backlog=cfg["backlog"])
    me = aiosubinterp.get_current().id
    await events.send(("started", ticket, me))
    beats: list[asyncio.TimerHandle] = []
    check = cfg["timeout_worker_healthcheck"]
    if check is not None:

        def beat() -> None:
            events.send_nowait(("beat", ticket, me))
            beats[:] = [loop.call_later(check / 3, beat)]

        beats.append(loop.call_later(check / 3, beat))

    told = loop.create_task(control.recv())
    limit = loop.create_task(srv.limit_reached.wait())
    reason = "stopped"
    forced = False  # cancelled (main's second signal): no grace, no lifespan shutdown
    try:
        await asyncio.wait([told, limit], return_when=asyncio.FIRST_COMPLETED)
        if limit.done() and not told.done():
            reason = "recycle" if srv.exit_code is None else "exit"
    except asyncio.CancelledError:
        forced = True
    for t in (told, limit):
        t.cancel()
    server.close()  # this interpreter accepts no more (the others go on)
    # A socket asyncio's loop accepted before the close gets its protocol in
    # the task it queued for it, which runs before this one resumes: after
    # this step every accepted connection is in srv.connections, and the stop
    # below waits for it (uvloop makes the protocol as it accepts).
    await asyncio.sleep(0)
    srv.stop()
    events.send_nowait(("closed", ticket, me))
    grace = 0 if forced else cfg["timeout_graceful_shutdown"]
    try:
        await asyncio.wait_for(srv.idle.wait(), grace)
    except TimeoutError:
        if srv.tasks and not forced:
            _log.warning(
                "Cancel %d running request(s): --timeout-graceful-shutdown (%s s) exceeded",
                len(srv.tasks),
                grace,
            )
    except asyncio.CancelledError:
        forced = True  # cancelled during the grace
    if not srv.idle.is_set():
        for task in list(srv.tasks):
            task.cancel()
        for conn in list(srv.connections):
            conn.abort()
        await asyncio.gather(*srv.tasks, return_exceptions=True)
    await server.wait_closed()
    for handle in beats:
        handle.cancel()
    if forced:
        raise asyncio.CancelledError
    await lifespan.shutdown()
    sys.stdout.flush()
    return (reason, srv.requests, repr(srv.exit_code))
