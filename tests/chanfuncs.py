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


def produce_plain(send, n):
    """Send 0..n-1 and close, with no `with` block: the natural producer."""
    for i in range(n):
        send.send_sync(i, timeout=30)
    send.close()
    return n


def consume_sum(recv):
    """`for x in recv` in a worker: ends when the send end is closed anywhere."""
    return sum(x for x in recv)


def relay_sum(recv, send):
    """Receive until the end, then send the total and close `send`."""
    total = 0
    for x in recv:
        total += x
    send.send_sync(total, timeout=30)
    send.close()
    return total


def identity(value):
    return value


def close_it(end):
    end.close()
    return end.closed


def drop_it(end):
    """Do nothing with the end: this copy is dropped when the task ends."""
    return end.closed


def open_and_return():
    """A channel opened in a worker; both ends go back to the caller."""
    from aiosubinterp import open_channel

    send, recv = open_channel(4)
    send.send_sync("hello from a worker", timeout=30)
    return send, recv


def stream_big_chunks(send, done, ack, n, size):
    """Stream n chunks of `size` bytes (shared zero-copy), report, wait for ack."""
    from aiosubinterp import _core

    chunk = b"\x07" * size
    for _ in range(n):
        send.send_sync(bytes(chunk), timeout=30)
    send.close()
    done.send_sync("sent", timeout=30)
    ack.recv_sync(timeout=30)
    return _core.share_stats()[0]


class Boxed:
    """A picklable object carrying channel ends (they cross inside its pickle)."""

    def __init__(self, **ends):
        self.ends = ends


class Exploding:
    """Pickles in the sender; unpickling it raises (a decode that fails half way)."""

    def __reduce__(self):
        return _explode, ()


def _explode():
    raise ValueError("Exploding cannot be rebuilt here")


def close_boxed(box):
    """Close the end that came inside a pickled object."""
    box.ends["x"].close()
    return box.ends["x"].closed


def produce_boxed(box, n):
    return produce_plain(box.ends["x"], n)


def recv_until_closed(recv):
    """Block in recv_sync until another holder of this same end closes it."""
    from aiosubinterp import ChannelClosedError

    try:
        recv.recv_sync(timeout=30)
    except ChannelClosedError:
        return "closed"
    return "received"
