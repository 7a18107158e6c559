"""Coroutines inside interpreters: async I/O-style work on a worker's own event loop.

``await pool.run(async_fn, ...)`` runs the coroutine on a stock asyncio loop
owned by the worker interpreter (uvloop cannot load in subinterpreters), so
a worker can overlap its own waits with ``asyncio.gather`` while the main
loop (asyncio or uvloop) keeps serving. Cancelling the awaiting task
cancels the coroutine inside the worker: its ``finally`` blocks run there.

With ``concurrency_per_interpreter=N`` one interpreter runs up to N such
coroutines at once on its loop (aiomultiprocess calls this childconcurrency):
I/O-heavy calls overlap inside each interpreter, not only across them.

Needs CPython 3.13+: 3.12 aborts at exit once a loop ran in a subinterpreter,
so the pool refuses coroutines there with a clear RuntimeError.

Run: ``python examples/async_in_worker.py``
"""

from __future__ import annotations

import asyncio
import hashlib

import aiosubinterp


async def fetch_page(site: int, page: int) -> bytes:
    """Stand-in for a network call: waits, then returns a page."""
    await asyncio.sleep(0.01)
    return f"site {site} page {page}".encode() * 100


async def crawl(site: int, pages: int) -> tuple[int, int, str]:
    """Runs in a worker: fetches pages concurrently, then does the CPU work (a digest)."""
    bodies = await asyncio.gather(*(fetch_page(site, p) for p in range(pages)))
    digest = hashlib.sha256(b"".join(bodies)).hexdigest()[:12]
    return site, len(bodies), digest


async def slow_job(seconds: float, started: aiosubinterp.SendChannel) -> str:
    started.send_nowait("started")  # a channel end passed as an argument
    try:
        await asyncio.sleep(seconds)
        return "finished"
    except asyncio.CancelledError:
        # Runs inside the worker when the caller gives up.
        print("slow job cancelled in the worker", flush=True)
        raise


async def main() -> None:
    async with aiosubinterp.InterpreterPool(2) as pool:
        try:
            results = await asyncio.gather(*(pool.run(crawl, site, 4) for site in range(3)))
        except RuntimeError as exc:  # CPython 3.12
            print(f"coroutines in interpreters needs CPython 3.13: {exc}")
            return
        print(
            f"fetched {sum(n for _, n, _ in results)} pages:",
            ", ".join(f"site {s} {d}" for s, _, d in results),
        )
        send, recv = aiosubinterp.open_channel(maxsize=1)
        slow = asyncio.ensure_future(pool.run(slow_job, 60.0, send))
        await recv.recv()  # it runs now: a timeout will cancel it inside the worker
        try:
            await asyncio.wait_for(slow, timeout=0.2)
        except TimeoutError:
            print("timed out; the worker is free again:", await pool.run(crawl, 9, 1))
        send.close()
    # Twenty I/O-bound calls on one interpreter running ten at a time.
    async with aiosubinterp.InterpreterPool(1, concurrency_per_interpreter=10) as pool:
        loop = asyncio.get_running_loop()
        start = loop.time()
        pages = await asyncio.gather(*(pool.run(fetch_page, 0, p) for p in range(20)))
        elapsed = loop.time() - start
        print(
            f"{len(pages)} calls on one interpreter, 10 at a time: {elapsed * 1000:.0f} ms "
            f"(one at a time would take at least {20 * 10} ms)"
        )


if __name__ == "__main__":
    asyncio.run(main())
