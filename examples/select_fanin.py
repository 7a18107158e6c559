"""Fan-in with select(): several interpreters produce, one loop consumes.

Each producer has its own channel; ``aiosubinterp.select`` takes the first
item that is ready from any of them, exactly one at a time. When a channel
ends (its producer closed it: an end passed to a worker is the same end),
select raises EndOfChannel with the index of that channel, and the consumer
drops it.

Run: ``python examples/select_fanin.py``
"""

import asyncio

import aiosubinterp


def produce(send, name, n):
    """Runs inside a worker interpreter."""
    with send:
        for i in range(n):
            send.send_sync((name, i))


async def main():
    names = ["alpha", "beta", "gamma"]
    channels = [aiosubinterp.open_channel(maxsize=4) for _ in names]
    async with aiosubinterp.InterpreterPool(len(names)) as pool:
        producers = [
            pool.submit(produce, send, name, 100)
            for (send, _), name in zip(channels, names, strict=True)
        ]
        live = [recv for _, recv in channels]
        counts = dict.fromkeys(names, 0)
        while live:
            try:
                _, (name, _) = await aiosubinterp.select(*live, timeout=30)
            except aiosubinterp.EndOfChannel as end:
                del live[end.index]
                continue
            counts[name] += 1
        await asyncio.gather(*producers)
    for name, count in counts.items():
        print(f"{name}: {count} items")
    print("fan-in done")


if __name__ == "__main__":
    asyncio.run(main())
