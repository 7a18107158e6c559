"""HTTP/1.1 on h11 for one interpreter's event loop: connections, request cycles, ASGI ``http``.

Runs inside a serve worker interpreter (``aiosubinterp._serve.worker``), which
owns an asyncio loop; nothing here is shared with another interpreter. One
``Connection`` (an ``asyncio.Protocol``) per accepted socket feeds h11; each
request becomes a ``Cycle`` whose ``run`` awaits the ASGI application as a
task of the loop. Requests on one connection are answered one after the
other (a pipelined request waits in h11's buffer, reading paused).

Flow control: reading pauses while a request body the application has not
received exceeds ``_BODY_HIGH`` bytes, and ``send`` waits while the transport's
write buffer is above its high-water mark (``pause_writing``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11

from aiosubinterp._serve.proxies import TrustedProxies

__all__ = ["Connection", "ServerState"]

_BODY_HIGH = 65536
_log = logging.getLogger("aiosubinterp.serve")
_access = logging.getLogger("aiosubinterp.serve.access")

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


# "%xx" -> its byte, for every case of the two hex digits (as urllib.parse's table).
_HEXDIGITS = "0123456789abcdefABCDEF"
_HEX_BYTES = {(a + b).encode(): bytes.fromhex(a + b) for a in _HEXDIGITS for b in _HEXDIGITS}


def unquote_path(raw: bytes) -> str:
    """``urllib.parse.unquote(raw.decode("ascii", "replace"))``, without urllib.parse.

    urllib.parse imports ipaddress: ~0.4 MiB in every interpreter for one
    function. h11 admits only visible ASCII in a request target; a byte
    above it becomes U+FFFD, as with urllib.
    """
    if not raw.isascii():
        raw = raw.decode("ascii", "replace").encode()
    if b"%" not in raw:
        return raw.decode()
    first, *rest = raw.split(b"%")
    out = [first]
    for item in rest:
        byte = _HEX_BYTES.get(item[:2])
        out.append(b"%" + item if byte is None else byte + item[2:])
    return b"".join(out).decode("utf-8", "replace")


class ServerState:
    """What every connection of one interpreter shares: the app, the options, the counts."""

    def __init__(
        self, app: Any, cfg: dict[str, Any], lifespan_state: dict[str, Any], server_addr: Any
    ) -> None:
        self.app = app
        self.root_path: str = cfg["root_path"]
        self.keep_alive: float = cfg["timeout_keep_alive"]
        self.head_timeout: float = cfg["timeout_request_head"]
        self.max_incomplete: int = cfg["h11_max_incomplete_event_size"]
        self.limit_concurrency: int | None = cfg["limit_concurrency"]
        self.limit_max_requests: int | None = cfg["limit_max_requests"]
        self.access_log: bool = cfg["access_log"]
        self.ws_max_size: int = cfg["ws_max_size"]
        self.ws_ping_interval: float | None = cfg["ws_ping_interval"]
        self.ws_ping_timeout: float | None = cfg["ws_ping_timeout"]
        allowed = cfg["forwarded_allow_ips"]
        self.proxies = TrustedProxies(allowed) if allowed is not None else None
        self.lifespan_state = lifespan_state
        self.server_addr = server_addr
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.requests = 0  # responses finished
        self.stopping = False
        self.limit_reached = asyncio.Event()  # --limit-max-requests or SystemExit: recycle
        self.exit_code: object = None  # what the application's SystemExit carried
        self.idle = asyncio.Event()  # set while stopping once no connection is left
        self._date = (0, b"")

    def date(self) -> bytes:
        """The Date header's value, formatted once per second."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (
                now,
                time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode(),
            )
        return self._date[1]

    def stop(self) -> None:
        """Stop taking requests: idle connections close now, busy ones after their response."""
        self.stopping = True
        for conn in list(self.connections):
            conn.close_when_idle()
        self._check_idle()

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._check_idle()

    def _check_idle(self) -> None:
        if self.stopping and not self.connections and not self.tasks:
            self.idle.set()

    def task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._check_idle()

    def spawn(self, run: Any) -> None:
        """Run one request's (or WebSocket's) coroutine as a task the stop waits for."""
        task = asyncio.get_running_loop().create_task(run)
        self.tasks.add(task)
        task.add_done_callback(self.task_done)

    def app_exited(self, exc: SystemExit) -> None:
        """The application raised SystemExit: this interpreter stops and main replaces it."""
        _log.error(
            "The application raised SystemExit(%s): this interpreter stops serving and is replaced",
            exc.code,
        )
        self.exit_code = exc.code if exc.code is not None else 0
        self.limit_reached.set()

    def response_done(self) -> None:
        self.requests += 1
        limit = self.limit_max_requests
        if limit is not None and self.requests >= limit:
            self.limit_reached.set()


class Connection(asyncio.Protocol):
    """One client connection: h11's state, the request cycle running, the keep-alive timer."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.loop = asyncio.get_running_loop()
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=state.max_incomplete)
        self.transport: Any = None
        self.cycle: Cycle | None = None
        self.websocket: Any = None  # a WebSocketCycle once a WebSocket handshake came
        self.client: tuple[str, int] | None = None
        self.behind_proxy = False  # the peer is a trusted proxy: its forwarding headers count
        self.writable = asyncio.Event()
        self.writable.set()
        self.reading_paused = False
        self.served = 0  # responses finished on this connection
        self.idle_timer: asyncio.TimerHandle | None = None
        self.head_timer: asyncio.TimerHandle | None = None  # from a head's first byte
        # Counted from here, not from connection_made: asyncio's loop calls the
        # protocol factory for an accepted socket one loop step before the
        # transport exists. A stop in between must wait for this connection's
        # first request, or the socket would be closed under its client.
        state.connections.add(self)

    # -- asyncio.Protocol -----------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        proxies = self.state.proxies
        if proxies is not None:
            self.behind_proxy = proxies.trusts(self.client[0] if self.client else None)
        self._arm_idle_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_idle_timer()
        self._cancel_head_timer()
        self.writable.set()
        if self.websocket is not None:
            self.websocket.lost()
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.wake.set()
        self.state.forget(self)

    def data_received(self, data: bytes) -> None:
        if self.websocket is not None:
            self.websocket.feed(data)
            return
        self.h11.receive_data(data)
        self._handle_events()
        if self.websocket is not None:
            return  # a WebSocket from now on: no keep-alive or head timers
        if self.cycle is not None:
            self._cancel_idle_timer()
        elif not self.transport.is_closing():
            # Part of a request head: it must be complete within the keep-alive
            # timeout of the last byte (a client that stalls mid-head is
            # closed), and whole within the head timeout of its first byte (a
            # client that sends it a byte at a time is answered 408).
            self._arm_idle_timer()
            if self.head_timer is None:
                self.head_timer = self.loop.call_later(self.state.head_timeout, self._head_timeout)

    def eof_received(self) -> bool | None:
        if self.websocket is not None:
            self.websocket.feed(None)
            return None  # the transport closes
        self.h11.receive_data(b"")
        self._handle_events()
        # A client that half-closed after its request still gets the response
        # (the connection closes after it); an idle one is closed now.
        return self.cycle is not None and not self.transport.is_closing()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- events ----------------------------------------------------------------------

    def _handle_events(self) -> None:
        while not self.transport.is_closing():
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(exc.error_status_hint, str(exc))
                return
            if event is h11.NEED_DATA:
                if self.h11.they_are_waiting_for_100_continue:
                    pass  # answered when the application calls receive()
                return
            if event is h11.PAUSED:
                self._pause_reading()  # a pipelined request: after this cycle
                return
            if isinstance(event, h11.Request):
                self._start_cycle(event)
                if self.websocket is not None:
                    return  # the rest of the bytes are the WebSocket's
            elif isinstance(event, h11.Data):
                cycle = self.cycle
                assert cycle is not None
                cycle.body += event.data
                if len(cycle.body) > _BODY_HIGH:
                    self._pause_reading()
                cycle.wake.set()
            elif isinstance(event, h11.EndOfMessage):
                cycle = self.cycle
                assert cycle is not None
                cycle.more_body = False
                cycle.wake.set()
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _refuse(self, status: int, why: str) -> None:
        """Answer a request h11 could not parse (status 400, 431, 501...) and close."""
        if status not in _REASONS:
            status = 400
        body = f"{_REASONS[status].decode()}: {why}\n".encode()
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, _REASONS[status], len(body), body)
            )
        _log.warning("Invalid HTTP request received (%d): %s", status, why)
        if self.cycle is not None:  # its body was malformed: the application's answer is moot
            self.cycle.disconnected = True
            self.cycle.wake.set()
        self.transport.close()

    def _start_cycle(self, request: h11.Request) -> None:
        self._cancel_head_timer()
        state = self.state
        # h11 bounds only a head that arrives in pieces; one that came whole is measured here.
        size = (
            len(request.method)
            + len(request.target)
            + 12
            + sum(len(k) + len(v) + 4 for k, v in request.headers)
        )
        if size > state.max_incomplete:
            self._refuse(
                431,
                f"request line and headers of {size} bytes, more than "
                f"the {state.max_incomplete} allowed",
            )
            return
        raw_path, _, query = request.target.partition(b"?")
        path = unquote_path(raw_path)
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode("ascii"),
            "method": request.method.decode("ascii"),
            "scheme": "http",
            "path": state.root_path + path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": state.root_path,
            "headers": list(request.headers),
            "client": self.client,
            "server": state.server_addr,
            "state": dict(state.lifespan_state),
        }
        if self.behind_proxy:
            state.proxies.apply(scope, scope["headers"])  # type: ignore[union-attr]
        app = state.app
        limit = state.limit_concurrency
        if limit is not None and len(state.tasks) >= limit:
            app = _service_unavailable
        elif request.method == b"GET" and _asks_websocket(scope["headers"]) and _websockets():
            self._start_websocket(scope)
            return
        self.cycle = cycle = Cycle(self, scope)
        state.spawn(cycle.run(app))

    def _start_websocket(self, http_scope: dict[str, Any]) -> None:
        """A WebSocket handshake: from now on the connection's bytes are the WebSocket's."""
        self._cancel_idle_timer()
        wsmod = _websockets()
        self.websocket = ws = wsmod.WebSocketCycle(
            self, wsmod.websocket_scope(http_scope), self.h11.trailing_data[0]
        )
        self.state.spawn(ws.run(self.state.app))

    def websocket_done(self) -> None:
        """The application's WebSocket coroutine returned (its close frame is sent)."""
        self.served += 1
        self.state.response_done()
        if self.state.stopping:
            self.transport.close()

    def cycle_done(self) -> None:
        """The cycle's response is complete (or failed): next request, or close."""
        self.cycle = None
        self.served += 1
        self.state.response_done()
        if self.transport.is_closing():
            return
        if (
            self.state.stopping
            or self.h11.our_state is not h11.DONE
            or self.h11.their_state is not h11.DONE
        ):
            # Stopping, `connection: close`, or a request body the application
            # did not read: this connection takes no further request.
            self.transport.close()
            return
        self.h11.start_next_cycle()
        self._arm_idle_timer()
        self._resume_reading()
        self._handle_events()  # a pipelined request already buffered

    def close_when_idle(self) -> None:
        if self.websocket is not None:
            self.websocket.shut_down()
            return
        # A connection that has not sent its first request yet was accepted
        # just before the stop: its request is answered (then it closes), or
        # the keep-alive timeout closes it.
        if self.cycle is None and self.served and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection now (the graceful timeout is over)."""
        if self.transport is not None:
            self.transport.abort()
        else:  # never connected: nothing of it is left to wait for
            self.state.forget(self)

    def _pause_reading(self) -> None:
        if not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def _arm_idle_timer(self) -> None:
        self._cancel_idle_timer()
        self.idle_timer = self.loop.call_later(self.state.keep_alive, self._idle_timeout)

    def _cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _idle_timeout(self) -> None:
        self.idle_timer = None
        if self.cycle is None:
            self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timeout(self) -> None:
        self.head_timer = None
        if self.cycle is None and not self.transport.is_closing():
            self._cancel_idle_timer()
            self._refuse(
                408, f"the request head did not arrive whole within {self.state.head_timeout:g} s"
            )


class Cycle:
    """One request and its response: the ASGI ``receive`` and ``send`` of that request."""

    def __init__(self, conn: Connection, scope: dict[str, Any]) -> None:
        self.conn = conn
        self.scope = scope
        self.body = bytearray()
        self.more_body = True
        self.final_received = False
        self.wake = asyncio.Event()
        self.disconnected = False
        self.started = False
        self.complete = False
        self.status = 0
        self.head = scope["method"] == "HEAD"
        self.pending = b""  # the response head, until the first body message

    async def run(self, app: Any) -> None:
        conn = self.conn
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            conn.transport.abort()  # the graceful shutdown's time ran out
            raise
        except SystemExit as exc:
            # The application asked its interpreter to exit: answer this
            # request, then the interpreter stops and main replaces it.
            self._fail()
            conn.state.app_exited(exc)
        except Exception:  # noqa: BLE001 - the application's error: logged, answered with 500
            _log.exception("Exception in ASGI application")
            self._fail()
        else:
            if not self.started:
                _log.error("ASGI callable returned without starting response.")
                self._fail()
            elif not self.complete and not self.disconnected:
                _log.error("ASGI callable returned without completing response.")
                conn.transport.close()
        finally:
            if self.started and self.conn.state.access_log:
                client, target = access_names(self.scope)
                _access.info(
                    '%s - "%s %s HTTP/%s" %d',
                    client,
                    self.scope["method"],
                    target,
                    self.scope["http_version"],
                    self.status,
                )
            self.complete = True
            self.wake.set()
            conn.cycle_done()

    def _fail(self) -> None:
        if not self.started and not self.disconnected:
            self.started = True
            self.status = 500
            body = b"Internal Server Error"
            self._write(
                h11.Response(
                    status_code=500,
                    headers=[
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", b"%d" % len(body)),
                        (b"connection", b"close"),
                    ],
                    reason=b"Internal Server Error",
                )
            )
            self._write(h11.Data(data=body))
            self._write(h11.EndOfMessage())
        else:
            self.conn.transport.close()

    def _flush(self) -> None:
        if self.pending and not self.conn.transport.is_closing():
            self.conn.transport.write(self.pending)
        self.pending = b""

    def _write(self, event: Any) -> None:
        self.conn.transport.write(self.conn.h11.send(event))

    async def receive(self) -> dict[str, Any]:
        conn = self.conn
        if (
            conn.h11.they_are_waiting_for_100_continue
            and not self.started
            and not self.disconnected
        ):
            self._write(h11.InformationalResponse(status_code=100, headers=[]))
        while not (
            self.disconnected
            or self.complete
            or self.body
            or (not self.more_body and not self.final_received)
        ):
            conn._resume_reading()
            self.wake.clear()
            await self.wake.wait()
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        body = bytes(self.body)
        self.body.clear()
        if not self.more_body:
            self.final_received = True
        conn._resume_reading()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if self.disconnected:
            return  # ASGI 2.3: sending to a gone client is silently ignored
        conn = self.conn
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError(f"unexpected ASGI message {kind!r}: the response started")
            self.started = True
            self.status = int(message["status"])
            headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", ())]
            headers.append((b"date", conn.state.date()))
            if conn.state.stopping:
                headers.append((b"connection", b"close"))
            # The head waits for a body message sent in the same step of the
            # application (one write, one send() call, for a small response);
            # else it goes out when the loop next runs its callbacks.
            self.pending = conn.h11.send(h11.Response(status_code=self.status, headers=headers))
            conn.loop.call_soon(self._flush)
            return
        elif kind == "http.response.body":
            if not self.started or self.complete:
                raise RuntimeError(
                    f"unexpected ASGI message {kind!r}: "
                    + ("no response started" if not self.started else "the response is complete")
                )
            out = self.pending
            self.pending = b""
            body = message.get("body", b"")
            if body and not self.head:
                out += conn.h11.send(h11.Data(data=body))
            if not message.get("more_body", False):
                out += conn.h11.send(h11.EndOfMessage())
                self.complete = True
                self.wake.set()
            if out:
                conn.transport.write(out)
        else:
            raise RuntimeError(f"unexpected ASGI message type {kind!r} in an HTTP response")
        if not conn.writable.is_set():
            await conn.writable.wait()


def access_names(scope: dict[str, Any]) -> tuple[str, str]:
    """(client, target) of a request for the access log: the forwarded client behind a proxy."""
    peer = scope["client"]
    query = scope["query_string"]
    target = scope["raw_path"].decode("ascii", "replace") + (
        "?" + query.decode("ascii", "replace") if query else ""
    )
    return ("{}:{}".format(*peer) if peer else "-"), target


def _asks_websocket(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers ask for a WebSocket (``Upgrade: websocket``)."""
    upgrade = connection = False
    for name, value in headers:
        if name == b"upgrade":
            upgrade = upgrade or b"websocket" in value.lower()
        elif name == b"connection":
            connection = connection or any(
                token.strip() == b"upgrade" for token in value.lower().split(b",")
            )
    return upgrade and connection


_ws_module: Any = None


def _websockets() -> Any:
    """The websocket module, imported on the first upgrade request; False without wsproto."""
    global _ws_module
    if _ws_module is None:
        try:
            from aiosubinterp._serve import websocket
        except ImportError:
            _log.warning(
                "A WebSocket handshake was answered as a plain HTTP request: "
                "WebSockets need wsproto (pip install 'aiosubinterp[serve]')"
            )
            _ws_module = False
        else:
            _ws_module = websocket
    return _ws_module


async def _service_unavailable(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The answer to a request beyond ``--limit-concurrency``."""
    body = b"Service Unavailable"
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(body)),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
