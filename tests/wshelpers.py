"""A WebSocket client for the tests of serve: wsproto's client side over asyncio streams."""

from __future__ import annotations

import asyncio

from wsproto import WSConnection
from wsproto import events as ws
from wsproto.connection import ConnectionType

DEADLINE = 60.0  # a backstop only: a step that never comes fails the test


class Client:
    """One client WebSocket: connect(), then send_*, next() (an event) and close()."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[ws.Event] = []
        self.pings = 0  # pings from the server, answered
        self.eof = False

    @classmethod
    async def connect(
        cls, port: int, path: str = "/", subprotocols: tuple[str, ...] = ()
    ) -> tuple[Client, ws.Event]:
        """A client and the handshake's answer (AcceptConnection or RejectConnection)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        writer.write(
            client.ws.send(
                ws.Request(host="localhost", target=path, subprotocols=list(subprotocols))
            )
        )
        return client, await client.next()

    async def next(self) -> ws.Event:
        """The next event from the server (pings answered); ConnectionError at the end."""
        while not self.events:
            await self._read()
        return self.events.pop(0)

    async def wait_pings(self, count: int) -> None:
        """Read (answering pings) until the server sent count pings in all."""
        while self.pings < count:
            if self.eof:
                raise ConnectionError(f"the server closed the connection after {self.pings} pings")
            await self._read()

    async def _read(self) -> None:
        if self.eof:
            raise ConnectionError("the server closed the connection")
        data = await asyncio.wait_for(self.reader.read(65536), DEADLINE)
        self.eof = not data
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            if isinstance(event, ws.Ping):
                self.pings += 1
                self.writer.write(self.ws.send(event.response()))
            else:
                self.events.append(event)
        if not data and not self.events:
            raise ConnectionError("the server closed the connection")

    async def message(self) -> str | bytes:
        """The next whole message's data."""
        parts: list[str | bytes] = []
        while True:
            event = await self.next()
            assert isinstance(event, ws.Message), event
            parts.append(event.data)
            if event.message_finished:
                return "".join(parts) if isinstance(event, ws.TextMessage) else b"".join(parts)

    def send_text(self, text: str) -> None:
        self.writer.write(self.ws.send(ws.TextMessage(data=text)))

    def send_bytes(self, data: bytes) -> None:
        self.writer.write(self.ws.send(ws.BytesMessage(data=data)))

    def send_close(self, code: int = 1000, reason: str = "") -> None:
        self.writer.write(self.ws.send(ws.CloseConnection(code=code, reason=reason)))

    def answer_close(self, event: ws.CloseConnection) -> None:
        self.writer.write(self.ws.send(event.response()))

    async def aclose(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass
