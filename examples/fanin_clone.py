"""Fan-in with clone(): several producers share one channel, a worker sums it.

A channel end passed to a worker is the same end: if the worker closes it,
it is closed for everyone. To give each producer an end it may close on its
own, pass ``send.clone()``: the channel ends only when every clone is closed
(or dropped). Here three producers (worker interpreters) send into one
channel through their clones, a fourth worker consumes it with a plain
``for x in recv`` loop and sends the total back, and the event loop reads it
with ``async for``.

Run: ``python examples/fanin_clone.py``
"""

import asyncio

import aiosubinterp


def produce(send, start, n):
    """Runs inside a worker interpreter: plain synchronous code."""
    with send:  # this producer's clone closes here; the others stay open
        for i in range(start, start + n):
            send.send_sync(i)
    return n


def total(recv, report):
    """Runs inside a worker interpreter: iterates until every clone is closed."""
    s = sum(x for x in recv)
    with report:  # closing the report end ends the loop's `async for`
        report.send_sync(s)
    return s


async def main():
    send, recv = aiosubinterp.open_channel(maxsize=16)
    report, results = aiosubinterp.open_channel(maxsize=1)
    async with aiosubinterp.InterpreterPool(4) as pool:
        consumer = pool.submit(total, recv, report)
        producers = [pool.submit(produce, send.clone(), k * 1000, 1000) for k in range(3)]
        send.close()  # ours only: each producer closes its own clone
        async for value in results:
            print(f"sum of 3000 items: {value}")
        await asyncio.gather(consumer, *producers)
    print("fan-in with clones done")


if __name__ == "__main__":
    asyncio.run(main())
