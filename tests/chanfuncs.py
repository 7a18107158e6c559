"""Functions the channel tests run inside worker interpreters.

Imported inside workers: no asyncio, no uvloop at module level.
"""

from __future__ import annotations

KEEP: dict[str, object] = {}


def produce(send, n, close=True):
    """Send 0..n-1 with the blocking API, then close the end."""
    for i in range(n):
        send.send_sync(i, timeout=30)
    if close:
        send.close()
    return n


def consume(recv):
    """Receive everything with plain iteration (ends on EndOfChannel)."""
    return [x for x in recv]


def echo_items(recv, send):
    """Send back every item received, until the channel ends; then close."""
    n = 0
    for x in recv:
        send.send_sync(x, timeout=30)
        n += 1
    send.close()
    return n


def recv_one(recv, timeout=30):
    return recv.recv_sync(timeout=timeout)


def recv_block(recv):
    """Block without timeout (cancellation must interrupt it)."""
    return recv.recv_sync()


def send_one(send, value, timeout=30):
    send.send_sync(value, timeout=timeout)
    return True


def recv_end_and_use(recv_of_ends):
    """Receive a send end through a channel, send on it, close it."""
    send = recv_of_ends.recv_sync(timeout=30)
    send.send_sync(("from", _interp_id()), timeout=30)
    send.close()
    return type(send).__name__


def try_errors(send, recv):
    from aiosubinterp import ChannelClosedError, EndOfChannel, WouldBlock

    out = []
    try:
        recv.recv_nowait()
    except WouldBlock:
        out.append("wouldblock")
    try:
        recv.recv_sync(timeout=0.01)
    except TimeoutError:
        out.append("timeout")
    send.close()
    try:
        send.send_sync(1)
    except ChannelClosedError:
        out.append("closed")
    try:
        recv.recv_sync(timeout=5)
    except EndOfChannel:
        out.append("end")
    return out


def select_two(a, b, n):
    """select_sync over two receive ends until both end; returns (index, value) pairs."""
    from aiosubinterp import EndOfChannel, select_sync

    live = [a, b]
    names = [0, 1]
    got = []
    while live:
        try:
            idx, value = select_sync(*live, timeout=30)
        except EndOfChannel as exc:
            del live[exc.index]
            del names[exc.index]
            continue
        got.append((names[idx], value))
    return got


def keep(name, end):
    """Store an end in this interpreter's module state and return: it dies with the interpreter."""
    KEEP[name] = end
    return True


def send_keep_forever(send, value):
    """Send one item, keep the end open (in module state)."""
    send.send_sync(value, timeout=30)
    KEEP["send"] = send
    return True


def _interp_id():
    from aiosubinterp import _core

    return _core.current_interpreter_id()
