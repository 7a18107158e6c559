"""WebSocket connections of serve's HTTP server: the ASGI ``websocket`` scope, on wsproto.

Imported by an interpreter on its first upgrade request only. The handshake
request was parsed by h11 (``http.Connection``); from the answer on, the
connection's bytes go to wsproto's frame layer. One ``WebSocketCycle`` per
connection: the application's ``receive`` and ``send``, and the frames.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from wsproto import events as ws
from wsproto.connection import Connection as FrameConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.utilities import generate_accept_token

from aiosubinterp._serve.http import access_names

_log = logging.getLogger("aiosubinterp.serve")
_access = logging.getLogger("aiosubinterp.serve.access")

_QUEUE_HIGH = 16  # messages the application has not received: reading pauses above this

# Close codes (RFC 6455 section 7.4.1).
_NORMAL = 1000
_ABNORMAL = 1006  # the connection was lost without a close frame
_TOO_BIG = 1009
_INTERNAL_ERROR = 1011
_SERVICE_RESTART = 1012


class ClientDisconnected(OSError):
    """A message sent on a WebSocket whose client is gone (ASGI: an IOError subclass)."""


def websocket_scope(http_scope: dict[str, Any]) -> dict[str, Any]:
    """The ASGI websocket scope of a handshake request, from its http scope."""
    scope = dict(http_scope)
    del scope["method"]
    scope["type"] = "websocket"
    scope["asgi"] = {"version": "3.0", "spec_version": "2.4"}
    scope["scheme"] = "wss" if http_scope["scheme"] == "https" else "ws"
    protocols: list[str] = []
    for name, value in http_scope["headers"]:
        if name == b"sec-websocket-protocol":
            protocols.extend(p.strip() for p in value.decode("latin-1").split(",") if p.strip())
    scope["subprotocols"] = protocols
    return scope


def _header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    out = b""
    for name, value in headers:
        if any(c in name + value for c in (b"\r", b"\n", b"\0")):
            raise ValueError(f"a header with a line break or NUL: {name!r}: {value!r}")
        out += name + b": " + value + b"\r\n"
    return out


class WebSocketCycle:
    """One WebSocket: the handshake's answer, the frames, the application's messages."""

    def __init__(self, conn: Any, scope: dict[str, Any], trailing: bytes) -> None:
        self.conn = conn
        self.scope = scope
        self.early = trailing  # bytes after the handshake request, before our answer
        self.frames: FrameConnection | None = None  # from the 101 answer on
        self.connect_received = False
        self.answered = False  # 101, or a refusal (403, 500)
        self.status = 0  # for the access log
        self.app_closed = False  # the application sent websocket.close
        self.disconnected = False  # the application has (or will get) websocket.disconnect
        self.messages: collections.deque[dict[str, Any]] = collections.deque()
        self.wake = asyncio.Event()
        self.fragments: list[Any] = []
        self.size = 0
        self.close_timer: asyncio.TimerHandle | None = None
        self.ping_timer: asyncio.TimerHandle | None = None  # the next ping, or the pong's deadline
        self.pong_due = False
        self._bound_early()

    # -- from the connection ------------------------------------------------------------

    def feed(self, data: bytes | None) -> None:
        """Bytes from the client (None: it closed its side)."""
        if self.frames is None:
            if data:
                self.early += data  # a client that did not wait for the answer
                self._bound_early()
            return
        self.frames.receive_data(data)
        self._take_events()

    def _bound_early(self) -> None:
        if len(self.early) > self.conn.state.ws_max_size:
            self.conn.transport.close()  # flooding before the handshake's answer

    def lost(self) -> None:
        """The connection is gone."""
        for timer in (self.close_timer, self.ping_timer):
            if timer is not None:
                timer.cancel()
        self._disconnect(_ABNORMAL, "")

    def shut_down(self) -> None:
        """The server stops: the client is told (1012, service restart)."""
        frames = self.frames
        if frames is not None and frames.state is ConnectionState.OPEN:
            self._close(_SERVICE_RESTART, "server shutting down")

    # -- frames ---------------------------------------------------------------------------

    def _take_events(self) -> None:
        frames = self.frames
        assert frames is not None
        for event in frames.events():
            if isinstance(event, ws.Message):
                self.fragments.append(event.data)
                self.size += len(event.data)
                limit = self.conn.state.ws_max_size
                if self.size > limit:
                    self.fragments.clear()
                    self._close(_TOO_BIG, f"a message larger than {limit} bytes")
                    self._disconnect(_TOO_BIG, "")
                    return
                if event.message_finished:
                    message: dict[str, Any]
                    if isinstance(event, ws.TextMessage):
                        message = {"type": "websocket.receive", "text": "".join(self.fragments)}
                    else:
                        message = {"type": "websocket.receive", "bytes": b"".join(self.fragments)}
                    self.fragments.clear()
                    self.size = 0
                    self.messages.append(message)
                    self.wake.set()
                    if len(self.messages) > _QUEUE_HIGH:
                        self.conn._pause_reading()
            elif isinstance(event, ws.Ping):
                if frames.state is ConnectionState.OPEN:  # not once a close frame went out
                    self._write(frames.send(event.response()))
            elif isinstance(event, ws.Pong):
                if self.pong_due:
                    self.pong_due = False
                    self._schedule_ping()
            elif isinstance(event, ws.CloseConnection):
                if frames.state is ConnectionState.REMOTE_CLOSING:
                    self._write(frames.send(event.response()))  # the answering close frame
                self._disconnect(event.code, event.reason or "")
                self.conn.transport.close()
                return

    def _write(self, data: bytes) -> None:
        if data and not self.conn.transport.is_closing():
            self.conn.transport.write(data)

    def _close(self, code: int, reason: str) -> None:
        """Send a close frame; the client's answer, or the keep-alive timeout, ends it."""
        frames = self.frames
        assert frames is not None
        if frames.state is ConnectionState.OPEN:
            self._write(frames.send(ws.CloseConnection(code=code, reason=reason)))
        if self.close_timer is None and not self.conn.transport.is_closing():
            self.close_timer = self.conn.loop.call_later(
                self.conn.state.keep_alive, self.conn.transport.close
            )

    # -- keep-alive pings (--ws-ping-interval, --ws-ping-timeout) ------------------------

    def _schedule_ping(self) -> None:
        interval = self.conn.state.ws_ping_interval
        if interval is not None:
            self.ping_timer = self.conn.loop.call_later(interval, self._ping)

    def _ping(self) -> None:
        frames = self.frames
        if frames is None or frames.state is not ConnectionState.OPEN:
            return
        self._write(frames.send(ws.Ping(payload=b"aiosubinterp")))
        self.pong_due = True
        timeout = self.conn.state.ws_ping_timeout
        if timeout is not None:
            self.ping_timer = self.conn.loop.call_later(timeout, self._pong_missing)

    def _pong_missing(self) -> None:
        """No pong in time: the client (or the network to it) is gone; 1011 for the app."""
        if self.pong_due:
            self._disconnect(_INTERNAL_ERROR, "keepalive ping timeout")
            self.conn.transport.abort()

    def _disconnect(self, code: int, reason: str) -> None:
        if not self.disconnected:
            self.disconnected = True
            self.messages.append({"type": "websocket.disconnect", "code": code, "reason": reason})
            self.wake.set()

    # -- the handshake's answer -----------------------------------------------------------

    def _accept(self, message: dict[str, Any]) -> None:
        key = next((v for k, v in self.scope["headers"] if k == b"sec-websocket-key"), b"")
        headers = [
            (b"upgrade", b"websocket"),
            (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", generate_accept_token(key)),
        ]
        subprotocol = message.get("subprotocol")
        if subprotocol is not None:
            if subprotocol not in self.scope["subprotocols"]:
                raise RuntimeError(
                    f"websocket.accept: subprotocol {subprotocol!r} was not offered by the "
                    f"client (it offered {self.scope['subprotocols']!r})"
                )
            headers.append((b"sec-websocket-protocol", subprotocol.encode()))
        headers += [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", ())]
        if self.conn.transport.is_closing():
            raise ClientDisconnected("cannot accept the WebSocket: its client is gone")
        self.conn.transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\n" + _header_lines(headers) + b"\r\n"
        )
        self.answered = True
        self.status = 101
        self.frames = FrameConnection(ConnectionType.SERVER)
        self._schedule_ping()
        early, self.early = self.early, b""
        if early:
            self.frames.receive_data(early)
            self._take_events()

    def _refuse(self, status: int) -> None:
        """Answer the handshake with an HTTP error instead, and close."""
        self.answered = True
        self.status = status
        reason = {403: b"Forbidden", 500: b"Internal Server Error"}[status]
        self._write(  # not to a client that is gone
            b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason)
        )
        self.conn.transport.close()
        self._disconnect(_ABNORMAL, "")

    # -- the application's side -----------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        if not self.connect_received:
            self.connect_received = True
            return {"type": "websocket.connect"}
        while not self.messages:
            if self.disconnected:  # it was received already: say it again
                return {"type": "websocket.disconnect", "code": _ABNORMAL, "reason": ""}
            self.wake.clear()
            await self.wake.wait()
        message = self.messages.popleft()
        if len(self.messages) <= _QUEUE_HIGH // 2:
            self.conn._resume_reading()
        return message

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if not self.answered:
            if kind == "websocket.accept":
                self._accept(message)
            elif kind == "websocket.close":
                self._refuse(403)
            else:
                raise RuntimeError(
                    f"unexpected ASGI message {kind!r} before the handshake's answer: "
                    "send websocket.accept or websocket.close first"
                )
            return
        if self.frames is None or self.disconnected or self.app_closed:
            raise ClientDisconnected(
                f"cannot send {kind!r}: the WebSocket is closed"
                + (" (the application closed it)" if self.app_closed else "")
            )
        if kind == "websocket.send":
            data = message.get("bytes")
            text = message.get("text")
            if data is not None:
                self._write(self.frames.send(ws.BytesMessage(data=bytes(data))))
            elif text is not None:
                self._write(self.frames.send(ws.TextMessage(data=str(text))))
            else:
                raise ValueError("websocket.send needs 'bytes' or 'text'")
        elif kind == "websocket.close":
            self.app_closed = True
            self._close(int(message.get("code") or _NORMAL), message.get("reason") or "")
        else:
            raise RuntimeError(f"unexpected ASGI message type {kind!r} on a WebSocket")
        conn = self.conn
        if not conn.writable.is_set():
            await conn.writable.wait()

    async def run(self, app: Any) -> None:
        conn = self.conn
        try:
            await app(self.scope, self.receive, self.send)
        except SystemExit as exc:
            self._end(_INTERNAL_ERROR)
            conn.state.app_exited(exc)
        except Exception:  # noqa: BLE001 - the application's error: logged, the client told
            _log.exception("Exception in ASGI application")
            self._end(_INTERNAL_ERROR)
        else:
            if not self.answered:
                _log.error("ASGI callable returned without accepting or closing the WebSocket.")
            self._end(_NORMAL)
        finally:
            if conn.state.access_log and self.status:
                client, target = access_names(self.scope)
                _access.info('%s - "WebSocket %s" %d', client, target, self.status)
            conn.websocket_done()

    def _end(self, code: int) -> None:
        """The application is done: refuse an unanswered handshake, or close the WebSocket."""
        if not self.answered:
            self._refuse(500)
        elif self.frames is not None and self.frames.state is ConnectionState.OPEN:
            self._close(code, "")
