"""An aiohttp web app on uvloop whose CPU work and streamed bodies come from interpreters.

Run: ``python examples/aiohttp_app.py --port 8080`` (needs aiohttp, the
``test`` extra has it; uvloop is the loop when installed, else asyncio).
Then, on 127.0.0.1:8080:

- ``GET /primes?n=200000``: counts the primes below n in pure Python in
  an ``InterpreterPool`` (``await pool.run(...)``): the CPU work runs on
  other cores, each interpreter with its own GIL;
- ``GET /ping``: answers at once, and keeps doing so while ``/primes``
  requests keep every worker busy (the event loop never runs the work);
- ``GET /stream?count=1000&size=4096``: a chunked response of ``count``
  numbered lines of ``size`` bytes, produced in an interpreter and carried
  to the handler by a channel of capacity 2 (``open_channel(2)``): the
  producer blocks in ``send_sync`` whenever the client reads slower than it
  produces (back-pressure, nothing piles up in memory). When the client
  disconnects, the handler is cancelled (``handler_cancellation=True``) or
  its next write fails; either way it closes the channel, which stops the
  producer, and cancels the producer's task, which interrupts it if it is
  not blocked on the channel;
- ``GET /stats``: both pools' ``statistics()`` and the recent streams (how
  far each got, how it ended, whether its channel ends are closed).

``--mode`` says where ``/primes`` computes, so the same app can be
measured against what people do without interpreters
(``benchmarks/bench_http.py`` drives it with ``wrk``):
``interpreters`` (the default, an ``InterpreterPool``), ``processes``
(an ``aiosubinterp.ProcessPool``: worker processes, pickled calls),
``to_thread`` (``asyncio.to_thread`` on a default executor of as many
threads: they share the main GIL with the event loop) and ``inline`` (on
the event loop itself: every other request waits meanwhile). ``/stream``
always comes from the stream pool of interpreters.

Streams run in a pool of their own (``--max-streams`` interpreters, so that
many streams at once; more wait in its queue): a producer blocked on a slow
client holds its interpreter, and must not starve ``/primes`` of workers.
Both pools are opened and closed with the app (``cleanup_ctx``): on
shutdown (Ctrl-C) streams in flight are cancelled, then the pools close and
destroy their interpreters.

The work itself is in ``examples/_web_work.py``: worker interpreters
import functions by module name, and that module imports neither aiohttp
(its compiled helpers refuse interpreters with their own GIL) nor asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import itertools
import os
import sys

import _web_work as work
from _web_modes import add_arguments, check_mode, enter_cpu
from aiohttp import web

import aiosubinterp

STREAM_CAPACITY = 2  # chunks buffered between a producer and its handler
MAX_COUNT = 10**9
MAX_PRIMES_N = 10**7

# The pool of /primes: an InterpreterPool, a ProcessPool, or None (to_thread, inline).
CPU_POOL = web.AppKey("cpu_pool", object)
# How /primes runs fn(*args): an async function, per --mode.
RUN_CPU = web.AppKey("run_cpu", object)
STREAM_POOL = web.AppKey("stream_pool", aiosubinterp.InterpreterPool)
SETTINGS = web.AppKey("settings", dict)
STREAMS = web.AppKey("streams", collections.deque)


@dataclasses.dataclass
class Stream:
    """One ``/stream`` request: its channel, its producer and how far it got."""

    id: int
    count: int
    size: int
    send: aiosubinterp.SendChannel
    recv: aiosubinterp.RecvChannel
    producer: aiosubinterp.Task
    handler: asyncio.Task
    written: int = 0
    state: str = "streaming"  # then: complete, client gone, cancelled, failed

    def describe(self):
        return {
            "id": self.id,
            "count": self.count,
            "size": self.size,
            "written": self.written,
            "state": self.state,
            "send_closed": self.send.closed,
            "recv_closed": self.recv.closed,
            "producer_done": self.producer.done(),
            "channel": dataclasses.asdict(self.recv.statistics()),
        }


def int_param(request, name, default, low, high):
    try:
        value = int(request.query.get(name, default))
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise web.HTTPBadRequest(text=f"{name} must be an integer in [{low}, {high}]\n")
    return value


# -- handlers ----------------------------------------------------------------------------


async def ping(request):
    return web.Response(text="pong\n")


async def primes(request):
    n = int_param(request, "n", 100_000, 0, MAX_PRIMES_N)
    count = await request.app[RUN_CPU](work.count_primes, n)
    return web.json_response({"n": n, "primes": count})


_stream_ids = itertools.count(1)


async def stream(request):
    count = int_param(request, "count", 1000, 0, MAX_COUNT)
    size = int_param(request, "size", 4096, 16, 1 << 20)
    send, recv = aiosubinterp.open_channel(STREAM_CAPACITY)
    # The producer gets `send` itself (not a clone): its close() there ends our `async for`.
    producer = request.app[STREAM_POOL].submit(work.produce, send, count, size)
    # A producer that fails before its `with send` (or never starts) leaves
    # the end open: close it when the task ends, whatever the outcome.
    producer.add_done_callback(lambda _: send.close())
    st = Stream(next(_stream_ids), count, size, send, recv, producer, asyncio.current_task())
    request.app[STREAMS].append(st)
    response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=ascii"})
    try:
        await response.prepare(request)
        async for data in recv:
            await response.write(data)
            st.written += 1
        await producer  # its errors, if any, end the response early
        await response.write_eof()
        st.state = "complete"
    except ConnectionError:
        st.state = "client gone"  # handler_cancellation off: the write failed
    except asyncio.CancelledError:
        st.state = "cancelled"  # the client went away, or the server shuts down
        raise
    except Exception:
        st.state = "failed"
        raise
    finally:
        # Closing the receive end wakes a producer blocked in send_sync with
        # BrokenChannelError; cancelling its task interrupts it wherever it is
        # (KeyboardInterrupt in the worker; the pool replaces a worker that
        # ignores it). Neither waits: the handler may be being cancelled.
        recv.close()
        producer.cancel()
        send.close()  # in case the producer never started (withdrawn from the queue)
    return response


async def stats(request):
    app = request.app
    cpu = app[CPU_POOL]
    return web.json_response(
        {
            "mode": app[SETTINGS]["mode"],
            "cpu_pool": cpu.statistics() if cpu is not None else None,
            "stream_pool": app[STREAM_POOL].statistics(),
            "streams": [st.describe() for st in app[STREAMS]],
        }
    )


# -- the app -----------------------------------------------------------------------------


async def pools(app):
    """cleanup_ctx: both pools (or to_thread's threads) live exactly as long as the app."""
    settings = app[SETTINGS]
    mode, workers = settings["mode"], settings["workers"]
    async with contextlib.AsyncExitStack() as stack:
        cpu, run_cpu = await enter_cpu(stack, mode, workers)
        streams = await stack.enter_async_context(
            aiosubinterp.InterpreterPool(settings["max_streams"], idle_spin=0)
        )
        # Warm up: each worker imports _web_work before the first request needs it.
        await asyncio.gather(
            *(run_cpu(work.count_primes, 10) for _ in range(workers or os.cpu_count() or 1)),
            streams.run(work.count_primes, 10),
        )
        app[CPU_POOL], app[RUN_CPU], app[STREAM_POOL] = cpu, run_cpu, streams
        yield
    # Leaving the stack closed both pools: every interpreter (and process, or thread) is gone.


async def cancel_streams(app):
    """on_shutdown: end the streams in flight (their handlers stop their producers)."""
    for st in app[STREAMS]:
        if st.state == "streaming":
            st.handler.cancel()


def make_app(workers=None, max_streams=2, mode="interpreters"):
    """The application; ``workers`` for /primes (default: one per CPU), in ``mode`` (MODES)."""
    check_mode(mode)
    app = web.Application()
    app[SETTINGS] = {"workers": workers, "max_streams": max_streams, "mode": mode}
    # The streams in flight and the last ones that ended, for /stats.
    app[STREAMS] = collections.deque(maxlen=64)
    app.cleanup_ctx.append(pools)
    app.on_shutdown.append(cancel_streams)
    app.add_routes(
        [
            web.get("/ping", ping),
            web.get("/primes", primes),
            web.get("/stream", stream),
            web.get("/stats", stats),
        ]
    )
    return app


def new_loop(kind="auto"):
    """uvloop's loop if installed (or asked for: then it must be), else asyncio's."""
    if kind == "asyncio":
        return asyncio.new_event_loop()
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="event loop (default: uvloop if installed, else asyncio)",
    )
    args = parser.parse_args(argv)
    app = make_app(args.workers, args.max_streams, args.mode)
    loop = new_loop(args.loop)
    print(
        f"event loop: {type(loop).__module__}.{type(loop).__name__}; /primes: {args.mode}",
        flush=True,
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        loop=loop,
        handler_cancellation=True,
        shutdown_timeout=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
