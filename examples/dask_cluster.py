"""From one machine's interpreters to a Dask cluster, by swapping the pool object.

``crunch(pool)`` is written against InterpreterPool's API (run, map). It
runs first on an InterpreterPool (every core of this machine), then on a
DaskPool in front of a Dask cluster whose workers run their tasks in
interpreters too (DaskInterpreterPlugin): one Dask worker process per
machine then uses every core for pure-Python work.

The cluster here is a LocalCluster on loopback: one worker process with two
threads. With a real cluster, only the Client's address changes, and each
machine runs ``dask worker SCHEDULER --preload aiosubinterp.dask_preload``
(or the client registers the plugin, as below).

Run: ``python examples/dask_cluster.py`` (needs ``pip install 'dask[distributed]'``).
"""

from __future__ import annotations

import asyncio
import os

import aiosubinterp


def count_primes(limit: int) -> int:
    """Pure-Python CPU work."""
    return sum(all(n % d for d in range(2, int(n**0.5) + 1)) for n in range(2, limit))


def where(_: object = None) -> str:
    """Which process and which interpreter ran this call."""
    info = aiosubinterp.get_current()
    return f"process {os.getpid()}, interpreter {info.id}"


async def crunch(pool) -> tuple[list[int], str]:
    """The application code: it only needs run() and map()."""
    limits = [20_000 + 2_000 * i for i in range(8)]
    results = [r async for r in pool.map(count_primes, limits)]
    return results, await pool.run(where)


async def main() -> None:
    async with aiosubinterp.InterpreterPool(2) as pool:
        local, ran_at = await crunch(pool)
    print(f"InterpreterPool: {local} ({ran_at}; this is process {os.getpid()})")

    from distributed import Client, LocalCluster

    async with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            asynchronous=True,
        ) as cluster,
        Client(cluster, asynchronous=True) as client,
    ):
        # Every worker gets an interpreter executor named "interpreters" ...
        await client.register_plugin(aiosubinterp.DaskInterpreterPlugin())
        # ... and the pool's calls run on it.
        async with aiosubinterp.DaskPool(client, executor="interpreters") as pool:
            remote, ran_at = await crunch(pool)
    print(f"DaskPool:        {remote} ({ran_at})")
    print(f"same results: {remote == local}")


if __name__ == "__main__":
    asyncio.run(main())
