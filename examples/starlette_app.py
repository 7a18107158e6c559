"""A Starlette app under uvicorn whose CPU work and streamed bodies come from interpreters.

Run: ``python examples/starlette_app.py --port 8080`` (needs starlette,
uvicorn and httptools: the ``test`` extra has them). uvicorn serves it with
``loop="uvloop"`` and ``http="httptools"``; without uvloop or httptools it
says so and uses asyncio or h11 instead. Ctrl-C stops it (exit code 0).
Then, on 127.0.0.1:8080:

- ``GET /primes?n=200000``: counts the primes below n in pure Python in
  an ``InterpreterPool`` (``await pool.run(...)``): the CPU work runs on
  other cores, each interpreter with its own GIL;
- ``GET /ping``: answers at once, and keeps doing so while ``/primes``
  requests keep every worker busy (the event loop never runs the work);
- ``GET /stream?count=1000&size=4096``: a chunked ``text/plain`` response
  of ``count`` numbered lines of ``size`` bytes, produced in an interpreter
  and carried to the response by a channel of capacity 2
  (``open_channel(2)``): the producer blocks in ``send_sync`` whenever the
  client reads slower than it produces (back-pressure: nothing piles up in
  memory);
- ``GET /events?n=1000000&step=10000``: server-sent events
  (``text/event-stream``, ``curl -N``): an interpreter counts the primes
  below n a block of ``step`` numbers at a time, and each block becomes a
  ``progress`` event (``data: {"below": ..., "primes": ...}``); a
  ``result`` event ends the stream (``shutdown`` if the server stops
  first), so that an ``EventSource`` does not reconnect;
- ``GET /stats``: the mode, both pools' ``statistics()`` and the recent
  streams (how far each got, how it ended, whether its channel ends are closed).

``--mode`` says where ``/primes`` computes, as in ``aiohttp_app.py`` (so
that ``benchmarks/bench_http.py`` can measure both apps the same way):
``interpreters`` (the default, an ``InterpreterPool``), ``processes``
(an ``aiosubinterp.ProcessPool``: worker processes, pickled calls),
``to_thread`` (``asyncio.to_thread`` on a default executor of as many
threads: they share the main GIL with the event loop) and ``inline`` (on
the event loop itself: every other request waits meanwhile). ``/stream``
and ``/events`` always come from the stream pool of interpreters.

A client that disconnects mid-stream stops its producer: Starlette notices
the disconnect and stops sending, and the response then closes the channel
(the producer's next ``send_sync`` raises ``BrokenChannelError``) and
cancels the producer's task (``KeyboardInterrupt`` in the worker, should it
be computing rather than waiting on the channel). Nothing is left running.

Streams run in a pool of their own (``--max-streams`` interpreters, so that
many streams at once; more wait in its queue): a producer blocked on a slow
client holds its interpreter, and must not starve ``/primes`` of workers.
Both pools are opened and closed by the app's lifespan. On shutdown uvicorn
stops accepting connections and waits for the responses in flight before
it runs the lifespan's end, and a stream may never end by itself: so the
``Server`` here first ends the streams in flight (a ``/stream`` body stops
early, fewer lines than asked; ``/events`` sends a ``shutdown`` event; a client
too slow to take the rest within 5 s, uvicorn's ``timeout_graceful_shutdown``,
is cut off), then the lifespan closes the pools, which destroys their
interpreters.

The work itself is in ``examples/_web_work.py``: worker interpreters
import functions by module name, and that module imports neither starlette
nor asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import _web_work as work
import uvicorn
from _web_modes import add_arguments, check_mode, enter_cpu, server_options
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

import aiosubinterp

STREAM_CAPACITY = 2  # items buffered between a producer and its response
MAX_COUNT = 10**9
MAX_PRIMES_N = 10**7
MAX_EVENTS_N = 10**9


# -- streams -----------------------------------------------------------------------------

_stream_ids = itertools.count(1)


@dataclasses.dataclass(eq=False)
class Stream:
    """One streamed response: its channel, its producer and how far it got."""

    id: int
    path: str
    send: aiosubinterp.SendChannel
    recv: aiosubinterp.RecvChannel
    producer: aiosubinterp.Task
    written: int = 0  # items handed to the server
    state: str = "streaming"  # then: complete, client gone, shutdown, cancelled, failed

    def finish(self, state: str) -> None:
        """Record how the stream ended (the first call wins) and stop its producer.

        Closing the receive end wakes a producer blocked in send_sync with
        BrokenChannelError (and a recv waiting here with ChannelClosedError);
        cancelling its task interrupts it wherever it is (KeyboardInterrupt in
        the worker; the pool replaces a worker that ignores it). Nothing here
        waits: the response may be being cancelled.
        """
        if self.state == "streaming":
            self.state = state
        self.recv.close()
        self.producer.cancel()
        self.send.close()  # in case the producer never started (withdrawn from the queue)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "written": self.written,
            "state": self.state,
            "send_closed": self.send.closed,
            "recv_closed": self.recv.closed,
            "producer_done": self.producer.done(),
            "channel": dataclasses.asdict(self.recv.statistics()),
        }


class Streams:
    """The app's streams: those in flight (for shutdown) and the last ones (for /stats)."""

    def __init__(self, keep: int = 64) -> None:
        self.live: set[Stream] = set()
        self.recent: collections.deque[Stream] = collections.deque(maxlen=keep)
        self.closing = False

    def open(
        self,
        path: str,
        pool: aiosubinterp.InterpreterPool,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> Stream:
        send, recv = aiosubinterp.open_channel(STREAM_CAPACITY)
        # The producer gets `send` itself (not a clone): its close() there ends our `async for`.
        producer = pool.submit(fn, send, *args)
        # A producer that fails before its `with send` (a bad argument, say)
        # never closes its end: close it when the task ends, however it
        # ends, so that the response drains the channel and raises the error
        # instead of waiting for ever.
        producer.add_done_callback(lambda _: send.close())
        st = Stream(next(_stream_ids), path, send, recv, producer)
        self.live.add(st)
        self.recent.append(st)
        if self.closing:  # a response that starts after end_all() ends at once
            self.finish(st, "shutdown")
        return st

    def finish(self, st: Stream, state: str) -> None:
        st.finish(state)
        self.live.discard(st)

    def end_all(self) -> None:
        """Refuse new streams and end those in flight (their responses end early)."""
        self.closing = True
        for st in list(self.live):
            self.finish(st, "shutdown")


class ChannelResponse(StreamingResponse):
    """A streamed response whose body a worker produces into a bounded channel.

    ``fn(send, *args)`` runs in ``pool`` and sends items; ``frame(item)``
    turns each into bytes of the body, and ``ending(how, result)``, if given,
    the body's last bytes (``how`` is "complete" or "shutdown"). The
    producer is submitted when the response starts to be sent, not when the
    endpoint returns it, and stopped in ``__call__``'s ``finally`` however
    the response ends: a response never sent starts nothing, and none leaks
    its producer.
    """

    def __init__(
        self,
        request: Request,
        fn: Callable[..., Any],
        *args: Any,
        frame: Callable[[Any], bytes | memoryview],
        ending: Callable[[str, Any], bytes] | None = None,
        media_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.streams: Streams = request.app.state.streams
        if self.streams.closing:
            raise HTTPException(503, "the server is shutting down\n")
        self.pool: aiosubinterp.InterpreterPool = request.state.stream_pool
        self.fn, self.args, self.frame, self.ending = fn, args, frame, ending
        self.stream: Stream | None = None
        super().__init__(self._body(), media_type=media_type, headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        st = self.stream = self.streams.open(scope["path"], self.pool, self.fn, self.args)
        how = "client gone"
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            raise  # a server of ASGI spec 2.4 reports a client gone by failing the send
        except asyncio.CancelledError:
            how = "cancelled"  # by the server (its graceful shutdown timed out)
            raise
        except Exception:
            how = "failed"
            raise
        finally:
            # Returning normally with the stream still "streaming": uvicorn
            # (ASGI 2.3) reported the client's disconnect, Starlette stopped sending.
            self.streams.finish(st, how)

    async def _body(self) -> AsyncIterator[bytes | memoryview]:
        st = self.stream
        assert st is not None  # set by __call__ before the body is iterated
        try:
            async for item in st.recv:
                yield self.frame(item)
                st.written += 1
        except aiosubinterp.ChannelClosedError:
            if st.state != "shutdown":
                raise
            how, result = "shutdown", None  # Streams.end_all closed our end
        else:
            # The producer closed its end: it is done (or failed: raise its error,
            # which ends the response early, as the truncated body the client sees).
            how, result = "complete", await st.producer
        if self.ending is not None:
            yield self.ending(how, result)
        self.streams.finish(st, how)


# -- endpoints ---------------------------------------------------------------------------


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise HTTPException(400, f"{name} must be an integer in [{low}, {high}]\n")
    return value


async def ping(request: Request) -> Response:
    return PlainTextResponse("pong\n")


async def primes(request: Request) -> Response:
    n = int_param(request, "n", 100_000, 0, MAX_PRIMES_N)
    count = await request.state.run_cpu(work.count_primes, n)
    return JSONResponse({"n": n, "primes": count})


async def stream(request: Request) -> Response:
    count = int_param(request, "count", 1000, 0, MAX_COUNT)
    size = int_param(request, "size", 4096, 16, 1 << 20)
    # Lines of 64 KiB or more arrive as read-only memoryviews of the
    # producer's memory (no copy); the server writes them as they are.
    return ChannelResponse(
        request,
        work.produce,
        count,
        size,
        frame=lambda data: data,
        media_type="text/plain; charset=ascii",
    )


def sse(event: str, data: object, id: int | None = None) -> bytes:
    """One server-sent event: ``id:``, ``event:`` and a JSON ``data:`` line."""
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def events(request: Request) -> Response:
    n = int_param(request, "n", 1_000_000, 0, MAX_EVENTS_N)
    step = int_param(request, "step", 10_000, 1, MAX_EVENTS_N)
    ids = itertools.count(1)

    def progress(item: tuple[int, int]) -> bytes:
        below, count = item
        return sse("progress", {"below": below, "primes": count}, next(ids))

    def ending(how: str, result: int | None) -> bytes:
        if how == "complete":
            return sse("result", {"n": n, "primes": result})
        return sse("shutdown", "the server is shutting down")

    return ChannelResponse(
        request,
        work.produce_progress,
        n,
        step,
        frame=progress,
        ending=ending,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def stats(request: Request) -> Response:
    cpu = request.state.cpu_pool
    return JSONResponse(
        {
            "mode": request.app.state.settings[2],
            "cpu_pool": cpu.statistics() if cpu is not None else None,
            "stream_pool": request.state.stream_pool.statistics(),
            "streams": [st.describe() for st in request.app.state.streams.recent],
        }
    )


# -- the app and its server --------------------------------------------------------------


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
    """Both pools (or to_thread's threads) live exactly as long as the app.

    Handlers see them in request.state: ``cpu_pool`` (an InterpreterPool, a
    ProcessPool, or None for to_thread and inline), ``run_cpu`` (how /primes
    runs ``fn(*args)``: an async function, per the mode) and ``stream_pool``.
    """
    workers, max_streams, mode = app.state.settings
    async with contextlib.AsyncExitStack() as stack:
        cpu, run_cpu = await enter_cpu(stack, mode, workers)
        streams = await stack.enter_async_context(
            aiosubinterp.InterpreterPool(max_streams, idle_spin=0)
        )
        # Runs first on the way out: a producer still blocked on a channel
        # would keep its pool from closing.
        stack.callback(app.state.streams.end_all)
        # Warm up: each worker imports _web_work before the first request needs it.
        await asyncio.gather(
            *(run_cpu(work.count_primes, 10) for _ in range(workers or os.cpu_count() or 1)),
            streams.run(work.count_primes, 10),
        )
        yield {"cpu_pool": cpu, "run_cpu": run_cpu, "stream_pool": streams}
    # Leaving the stack closed both pools: every interpreter (and process, or thread) is gone.


def make_app(
    workers: int | None = None, max_streams: int = 2, mode: str = "interpreters"
) -> Starlette:
    """The application; ``workers`` for /primes (default: one per CPU), in ``mode`` (MODES)."""
    check_mode(mode)
    app = Starlette(
        routes=[
            Route("/ping", ping),
            Route("/primes", primes),
            Route("/stream", stream),
            Route("/events", events),
            Route("/stats", stats),
        ],
        lifespan=lifespan,
    )
    app.state.settings = (workers, max_streams, mode)
    app.state.streams = Streams()
    return app


class Server(uvicorn.Server):
    """uvicorn's Server, which ends the app's streams as soon as it starts shutting down.

    uvicorn stops accepting connections, then waits for every response in
    flight before it runs the lifespan's shutdown (or until
    ``timeout_graceful_shutdown``, then cancels them): a stream that never
    ends would hold the server up.
    """

    async def shutdown(self, sockets: Any = None) -> None:
        app = self.config.app
        assert isinstance(app, Starlette), "Server serves the app of make_app()"
        app.state.streams.end_all()
        await super().shutdown(sockets=sockets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    loop, http = server_options()
    print(f"event loop: {loop}, HTTP parser: {http}; /primes: {args.mode}", flush=True)
    config = uvicorn.Config(
        make_app(args.workers, args.max_streams, args.mode),
        host=args.host,
        port=args.port,
        loop=loop,
        http=http,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn handles Ctrl-C itself (a clean shutdown: streams ended,
        # pools closed), then raises it again for the caller to see.
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
