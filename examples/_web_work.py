"""The work of the web examples (aiohttp_app.py, starlette_app.py) run in worker interpreters.

Workers import functions by module name, so these live in a module of
their own that imports nothing heavy: not aiohttp (its compiled helpers,
multidict, yarl, frozenlist, refuse interpreters with their own GIL), not
starlette or uvicorn (anyio would bring in asyncio), not asyncio (a worker
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


def chunk(index, size):
    """Chunk ``index`` of a stream: ``size`` bytes, one line, numbered.

    The line is ``"<index> <digits>\\n"``: a block of 97 pseudo-random
    digits seeded by the index, repeated to length, so the client can check
    every byte and the order.
    """
    head = b"%08d " % index
    x = index * 2654435761 + 1
    block = bytearray(97)
    for i in range(97):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        block[i] = 48 + (x >> 16) % 10
    n = size - len(head) - 1
    return head + (bytes(block) * (n // 97 + 1))[:n] + b"\n"


def produce(send, count, size):
    """Send ``count`` chunks into ``send``, then close it; returns how many were sent.

    ``send_sync`` blocks this worker while the channel is full: the client
    sets the pace (back-pressure). When the client goes away (or the server
    shuts down), the app closes the channel, so the next ``send_sync``
    raises ``BrokenChannelError`` (or ``ChannelClosedError``) and the
    producer stops; if the app cancels this task instead,
    ``KeyboardInterrupt`` stops it the same way. Either way ``with send``
    closes the send end.
    """
    sent = 0
    with send:
        try:
            for i in range(count):
                send.send_sync(chunk(i, size))
                sent += 1
        except (BrokenChannelError, ChannelClosedError):
            pass  # nobody reads any more: the client went away, the app closed the channel
    return sent


def produce_progress(send, n, step):
    """Count the primes below ``n`` a block of ``step`` numbers at a time.

    After each block, sends ``(below, primes)``: the primes counted so far
    and the bound they are counted below, which the app turns into one
    server-sent event; returns the count. Back-pressure and stopping work as
    in ``produce``: a client that leaves stops the computation too.
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
