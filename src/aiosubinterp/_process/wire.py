"""The wire between a ProcessPool and its worker processes: frames over a Unix socket.

A frame is a 16-byte header (body length, kind, number of fds, id) and a
pickled body. File descriptors travel as SCM_RIGHTS ancillary data attached
to the header; the receiver takes them, in stream order, from a FIFO.

Used on both sides; it imports neither asyncio nor uvloop.
"""

from __future__ import annotations

import array
import collections
import io
import os
import pickle
import socket
import struct
from collections.abc import Callable

from aiosubinterp import _core
from aiosubinterp._errors import NotShareableError
from aiosubinterp._inside import marshal as _marshal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HEADER",
    "Decoder",
    "Encoder",
    "Reader",
    "close_fds",
    "decode",
    "encode",
    "send_frame",
]

HEADER = struct.Struct("<IBBxxQ")  # body length, kind, fds, id

# parent -> child
SETUP = 1  # body: setup tuple (with the log levels); child answers READY or FAILED
JOB = 2  # id: task id; body: pickled call payload
SETTINGS = 3  # body: pickled settings (sys.path, output bits)
REPLY = 4  # id: request id; body: pickled (status, value)
STOP = 5  # the child exits
# child -> parent
READY = 11  # id: pid
FAILED = 12  # body: pickled error description
RESULT = 13  # id: task id; body: pickled (status, value, released ends)
REQUEST = 14  # id: request id; body: pickled (operation, key, arguments)
ABORT = 15  # id: request id being abandoned (the task was cancelled)
LOG = 16  # body: pickled log item (_inside.logs: a record, warning or output tuple)

# Bodies smaller than this are sent in one write together with their header.
_JOIN_LIMIT = 1 << 16
_MAX_FDS = 64
_ANC_SIZE = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)


def send_frame(
    sock: socket.socket,
    kind: int,
    ident: int,
    body: bytes = b"",
    fds: list[int] | tuple[int, ...] = (),
) -> None:
    """Write one frame; the caller makes sure no other thread writes to sock meanwhile."""
    if len(fds) > _MAX_FDS:
        raise ValueError(f"at most {_MAX_FDS} file descriptors can cross in one message")
    head = HEADER.pack(len(body), kind, len(fds), ident)
    if fds:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sent = sock.sendmsg([head], anc)
        if sent < len(head):
            sock.sendall(head[sent:])
        if body:
            sock.sendall(body)
    elif len(body) < _JOIN_LIMIT:
        sock.sendall(head + body)
    else:
        sock.sendall(head)
        sock.sendall(body)


class Reader:
    """Reads frames from a socket (one thread at a time)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._fds: collections.deque[int] = collections.deque()

    def _fill(self) -> None:
        data, anc, _flags, _addr = self._sock.recvmsg(1 << 16, _ANC_SIZE)
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                self._fds.extend(got)
        if not data:
            raise EOFError("the peer closed the connection")
        self._buf += data

    def pending(self) -> bool:
        """True when a whole header is already buffered (no read needed to start a frame)."""
        return len(self._buf) >= HEADER.size

    def read(self) -> tuple[int, int, bytes | bytearray, list[int]]:
        """The next frame: (kind, id, body, fds). Raises EOFError when the peer closed."""
        buf = self._buf
        while len(buf) < HEADER.size:
            self._fill()
        length, kind, nfds, ident = HEADER.unpack_from(buf)
        end = HEADER.size + length
        if len(buf) >= end:
            body: bytes | bytearray = bytes(buf[HEADER.size : end])
            del buf[:end]
        else:
            body = bytearray(length)
            have = len(buf) - HEADER.size
            body[:have] = buf[HEADER.size :]
            del buf[:]
            view = memoryview(body)
            while have < length:
                n = self._sock.recv_into(view[have:], length - have)
                if n == 0:
                    raise EOFError("the peer closed the connection in the middle of a message")
                have += n
            view.release()
        while len(self._fds) < nfds:
            self._fill()  # fds travel with the header: already here, unless the peer misbehaved
        fds = [self._fds.popleft() for _ in range(nfds)]
        return kind, ident, body, fds

    def close(self) -> None:
        while self._fds:
            try:
                import os

                os.close(self._fds.popleft())
            except OSError:
                pass


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


# -- pickling with file descriptors and channel ends ------------------------------


def take_fd(index: int, kind: tuple[Any, ...] | None) -> object:
    """Placeholder for a file descriptor in a message; only a Decoder resolves it."""
    raise RuntimeError("aiosubinterp: a file descriptor reference was unpickled outside a message")


def parent_end(key: int) -> object:
    """Placeholder for a channel end a worker process holds; only the pool's Decoder resolves it."""
    raise RuntimeError("aiosubinterp: a channel end of a worker process was unpickled elsewhere")


_SOCKET_TYPES = ("TransportSocket", "PseudoSocket")


def _refuse(obj: object, why: str) -> NotShareableError:
    return NotShareableError(f"cannot send {type(obj).__name__} to a worker process: {why}")


class Encoder(pickle.Pickler):
    """Pickles one message. File descriptors are duplicated into ``fds`` (owned by the
    message until sent); channel ends are handed to ``on_end``, which returns their reduction.
    """

    def __init__(self, file: io.BytesIO, on_end: Callable[[object], tuple[Any, ...]]) -> None:
        super().__init__(file, protocol=5)
        self.fds: list[int] = []
        self._on_end = on_end

    def reducer_override(self, obj: object) -> Any:
        tp = type(obj)
        if tp is _core.FileDescriptor:
            self.fds.append(os.dup(obj.fd))  # type: ignore[attr-defined]
            return take_fd, (len(self.fds) - 1, None)
        if isinstance(obj, socket.socket) or (
            tp.__name__ in _SOCKET_TYPES and hasattr(obj, "fileno")
        ):
            sock: socket.socket = obj  # type: ignore[assignment]
            self.fds.append(os.dup(sock.fileno()))
            return take_fd, (len(self.fds) - 1, (int(sock.family), int(sock.type), sock.proto))
        if isinstance(obj, _core.ChannelEnd):
            return self._on_end(obj)
        if tp is memoryview:  # zero-copy views from interpreters: their bytes cross
            return bytes, (obj.tobytes(),)  # type: ignore[attr-defined]
        if tp is _core.SharedBuffer or tp is _core.SharedLock:
            raise _refuse(
                obj,
                "it is memory of this process (SharedBuffer and SharedLock work "
                "between interpreters only); pass the data itself",
            )
        if tp is _core.ShareRequest:
            raise _refuse(
                obj,
                "zero-copy sharing works between interpreters only; pass the "
                "buffer itself (it is copied)",
            )
        return NotImplemented


class Decoder(pickle.Unpickler):
    """Unpickles one message, resolving its file descriptors and channel ends."""

    def __init__(
        self,
        file: io.BytesIO,
        fds: list[int],
        *,
        main: Callable[[], object] | None,
        on_end: Callable[[int], object] | None,
    ) -> None:
        super().__init__(file)
        self._fds = fds
        self._main = main
        self._on_end = on_end

    def _take_fd(self, index: int, kind: tuple[Any, ...] | None) -> object:
        fd = self._fds[index]
        self._fds[index] = -1  # taken: the new owner closes it
        if kind is None:
            return fd
        family, stype, proto = kind
        return socket.socket(family, stype, proto, fileno=fd)

    def find_class(self, module: str, name: str) -> object:
        if module == __name__:
            if name == "take_fd":
                return self._take_fd
            if name == "parent_end":
                if self._on_end is None:
                    raise NotShareableError("a channel end of a worker process arrived elsewhere")
                return self._on_end
        if module == "__main__" and self._main is not None:
            obj = self._main()
            for part in name.split("."):
                obj = getattr(obj, part)
            return obj
        if module == _marshal.MAIN_ALIAS and self._main is None:
            module = "__main__"
        return super().find_class(module, name)


def encode(obj: object, on_end: Callable[[Any], tuple[Any, ...]]) -> tuple[bytes, list[int]]:
    """(pickled obj, fds it carries). On failure no duplicated fd is left open."""
    file = io.BytesIO()
    enc = Encoder(file, on_end)
    try:
        enc.dump(obj)
    except BaseException:
        close_fds(enc.fds)
        raise
    return file.getvalue(), enc.fds


def decode(
    body: bytes | bytearray,
    fds: list[int],
    *,
    main: Callable[[], object] | None = None,
    on_end: Callable[[int], object] | None = None,
) -> Any:
    """Unpickle a message; fds it did not take are closed."""
    try:
        return Decoder(io.BytesIO(body), fds, main=main, on_end=on_end).load()
    finally:
        close_fds([fd for fd in fds if fd >= 0])
