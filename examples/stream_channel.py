"""Stream items from an interpreter to asyncio through a channel.

A producer runs in a worker interpreter (its own GIL, another core) and
sends items with the blocking API; the event loop consumes them with
``async for``. The bounded channel gives back-pressure, and the producer
closing its end ends the stream cleanly: an end passed to a worker is the
same end, so its close() there closes it for the loop's side too.

Run: ``python examples/stream_channel.py``
"""

import asyncio

import aiosubinterp


def produce(send, n):
    """Runs inside a worker interpreter: plain synchronous code."""
    with send:  # closing the end at the end of the block ends the stream
        for i in range(n):
            send.send_sync(i)
    return n


async def main():
    send, recv = aiosubinterp.open_channel(maxsize=64)
    async with aiosubinterp.InterpreterPool(1) as pool:
        producer = pool.submit(produce, send, 1000)  # the worker closes `send` when done
        count = total = 0
        async for item in recv:
            count += 1
            total += item
        await producer
    print(f"received {count} items, sum {total}")


if __name__ == "__main__":
    asyncio.run(main())
