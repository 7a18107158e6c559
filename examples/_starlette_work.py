"""The work of ``examples/starlette_app.py`` that runs in worker interpreters.

Workers import functions by module name, so these live in a module of
their own that imports nothing heavy: not starlette or uvicorn (nothing
here needs them, and anyio would bring in asyncio), not asyncio (a worker
that imported it aborts CPython 3.12.1 at exit).
"""

from aiosubinterp import BrokenChannelError, ChannelClosedError


def _is_prime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def count_primes(stop, start=0):
    """Primes in ``[start, stop)``, by trial division: pure-Python CPU work."""
    return sum(1 for n in range(start, stop) if _is_prime(n))


def line(index, size):
    """Line ``index`` of a ``/stream`` body: ``size`` bytes, numbered, checkable.

    ``b"<index> "`` (8 digits), then letters from a small generator seeded
    by the index, then a newline: a client can check every byte and the order.
    """
    head = b"%08d " % index
    x = index * 40503 + 7
    pattern = bytearray(61)
    for i in range(61):
        x = (x * 69069 + 1) & 0xFFFFFFFF
        pattern[i] = 97 + (x >> 24) % 26
    n = size - len(head) - 1
    return head + (bytes(pattern) * (n // 61 + 1))[:n] + b"\n"


def produce_lines(send, count, size):
    """Send ``count`` lines into ``send``, then close it; returns how many were sent.

    ``send_sync`` blocks this worker while the channel is full: the client
    sets the pace (back-pressure). When the client goes away (or the server
    shuts down) the app closes the receive end, so the next ``send_sync``
    raises ``BrokenChannelError`` and the producer stops; if the app cancels
    this task instead, ``KeyboardInterrupt`` stops it. Either way ``with
    send`` closes the send end.
    """
    sent = 0
    with send:
        try:
            for i in range(count):
                send.send_sync(line(i, size))
                sent += 1
        except (BrokenChannelError, ChannelClosedError):
            pass  # nobody reads any more
    return sent


def produce_progress(send, n, step):
    """Count the primes below ``n`` a block of ``step`` numbers at a time.

    After each block, sends ``(below, primes)``: the primes counted so far
    and the bound they are counted below, which the app turns into one
    server-sent event; returns the count. Back-pressure and stopping work as
    in ``produce_lines``: a client that leaves stops the computation too.
    """
    total = 0
    with send:
        try:
            for lo in range(0, n, step):
                hi = min(lo + step, n)
                total += count_primes(hi, lo)
                send.send_sync((hi, total))
        except (BrokenChannelError, ChannelClosedError):
            pass  # nobody reads any more
    return total
