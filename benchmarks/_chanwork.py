"""Worker-side functions of bench_channel.py (imported inside interpreters and processes).

No asyncio, no uvloop: stdlib only.
"""

from __future__ import annotations

SMALL = ("ab", "short string", 7, 123456789)


def small_item(i):
    """Ints and short strings, alternating."""
    return i if i & 1 else SMALL[i & 3]


def chan_produce_small(send, n):
    send_sync = send.send_sync
    for i in range(n):
        send_sync(i if i & 1 else SMALL[i & 3])
    send.close()
    return n


def chan_produce_big(send, n, size):
    chunk = b"x" * size
    for _ in range(n):
        send.send_sync(chunk)
    send.close()
    return n


def chan_consume(recv):
    n = 0
    total = 0
    for x in recv:
        n += 1
        if type(x) is bytes or type(x) is memoryview:  # 1 MiB chunks cross zero-copy as views
            total += len(x)
    return n, total


def chan_echo(recv, send):
    for x in recv:
        send.send_sync(x)
    send.close()


def mpq_produce_small(q, n):
    put = q.put
    for i in range(n):
        put(i if i & 1 else SMALL[i & 3])
    put(None)


def mpq_produce_big(q, n, size):
    chunk = b"x" * size
    for _ in range(n):
        q.put(chunk)
    q.put(None)


def mpq_consume(q, out):
    n = 0
    total = 0
    while True:
        x = q.get()
        if x is None:
            break
        n += 1
        if type(x) is bytes or type(x) is memoryview:  # 1 MiB chunks cross zero-copy as views
            total += len(x)
    out.put((n, total))


def mpq_echo(qin, qout):
    while True:
        x = qin.get()
        qout.put(x)
        if x is None:
            break
