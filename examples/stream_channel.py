"""Stream items from an interpreter to asyncio through a channel.

A producer runs in a worker interpreter (its own GIL, another core) and
sends items with the blocking API; the event loop consumes them with
``async for``. The bounded channel gives back-pressure, and closing the
producer's end ends the stream cleanly.

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
        producer = pool.submit(produce, send, 1000)
        send.close()  # the worker holds its own copy of the send end
        count = total = 0
        async for item in recv:
            count += 1
            total += item
        await producer
    print(f"received {count} items, sum {total}")


if __name__ == "__main__":
    asyncio.run(main())
