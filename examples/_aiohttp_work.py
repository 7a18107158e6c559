"""The work of ``examples/aiohttp_app.py`` that runs in worker interpreters.

Workers import functions by module name, so these live in a module of
their own that imports nothing heavy: not aiohttp (its compiled helpers,
multidict, yarl, frozenlist, refuse interpreters with their own GIL), not
asyncio (a worker that imported it aborts CPython 3.12.1 at exit).
"""

from aiosubinterp import BrokenChannelError, ChannelClosedError


def count_primes(stop):
    """Primes below ``stop``, by trial division: pure-Python CPU work."""
    count = 0
    for n in range(2, stop):
        d = 2
        while d * d <= n:
            if n % d == 0:
                break
            d += 1
        else:
            count += 1
    return count


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
    sets the pace (back-pressure). When the client goes away, the handler
    closes the channel, so the next ``send_sync`` raises
    ``BrokenChannelError`` (or ``ChannelClosedError``) and the producer
    stops; if the handler cancels this task instead, ``KeyboardInterrupt``
    stops it the same way. Either way ``with send`` closes the send end.
    """
    sent = 0
    with send:
        try:
            for i in range(count):
                send.send_sync(chunk(i, size))
                sent += 1
        except (BrokenChannelError, ChannelClosedError):
            pass  # nobody reads any more: the client went away, the handler closed the channel
    return sent
