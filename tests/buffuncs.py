"""Worker-side helpers for test_buffer.py (importable in every interpreter, no asyncio)."""

from __future__ import annotations

import os
import pickle

from aiosubinterp import _core

KEEP: list = []


def describe(x):
    """(type name, readonly, address, length) of what the task received."""
    try:
        mv = memoryview(x)
    except TypeError:
        return (type(x).__name__, None, None, None)
    return (type(x).__name__, mv.readonly, _core.buffer_address(x), mv.nbytes)


def keep_slice(mv):
    KEEP.append(mv[10:20])
    return len(KEEP)


def keep(x):
    KEEP.append(x)
    return len(KEEP)


def drop_kept():
    KEEP.clear()
    return 0


def make_bytes(n, fill=7):
    return bytes([fill]) * n


def make_view_and_slice(n):
    data = bytearray(b"\x05") * n
    return memoryview(data)


def write(mv, index, value):
    mv[index] = value
    return mv[index]


def add_under_lock(buf, lock, times):
    for _ in range(times):
        with lock:
            v = int.from_bytes(buf[0:8], "little")
            buf[0:8] = (v + 1).to_bytes(8, "little")
    return times


def write_fd(fd, data):
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def sock_send(sock, data):
    with sock:
        sock.sendall(data)
    return len(data)


class Blob:
    """Hands its memory out-of-band under pickle protocol 5."""

    def __init__(self, data):
        self.data = data

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            return Blob, (pickle.PickleBuffer(self.data),)
        return Blob, (bytes(self.data),)


def blob_address(blob):
    return (type(blob.data).__name__, _core.buffer_address(blob.data))


def sum_channel(recv):
    total = 0
    for item in recv:
        total += memoryview(item).nbytes
    return total


def produce(send, count, size):
    """Worker-owned buffers into a channel (the consumer may be another worker)."""
    with send:
        for i in range(count):
            send.send_sync(bytes([i % 256]) * size)
    return count


def consume(recv):
    """(items, total bytes, all items read-only views with the right content)."""
    n = total = 0
    ok = True
    for item in recv:
        ok = ok and type(item) is memoryview and item.readonly and item[0] == n % 256
        n += 1
        total += item.nbytes
    return n, total, ok


def addresses_from(recv):
    return [_core.buffer_address(item) for item in recv]


def unsendable_with_view(mv):
    return (mv, lambda: 0)
