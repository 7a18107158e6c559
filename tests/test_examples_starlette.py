"""examples/starlette_app.py under uvicorn on loopback, called with a real HTTP client.

Each async test runs on asyncio and on uvloop (conftest.py): the app is
served by the example's ``uvicorn.Server`` in the test's loop (on a bound
127.0.0.1 socket, port 0), with httptools and, for one test, h11; the last
test runs the script itself in a child process and stops it with SIGINT.
No uvicorn error may be logged (an exception in the app, a cancelled task)
but the one a test expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import uvicorn
from aiohelpers import until
from httphelpers import check_primes_in_mode, free_port, get, get_json, hold_primes

import aiosubinterp

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEADLINE = 30.0  # seconds any awaited condition may take: a backstop (a loaded machine)

pytestmark = pytest.mark.timeout(4 * DEADLINE)  # a test awaits several conditions


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(self.format(record))


@pytest.fixture(autouse=True)
def _no_server_errors():
    """uvicorn logs what went wrong in the app (and tasks it had to cancel) as errors.

    The handler sits on uvicorn's own logger: its default logging config
    stops propagation there, before the root logger (and caplog).
    """
    errors = _Errors()
    logger = logging.getLogger("uvicorn")
    logger.addHandler(errors)
    try:
        yield errors  # a test that expects an error removes it from errors.messages
    finally:
        logger.removeHandler(errors)
    assert not errors.messages, "\n".join(errors.messages)


@pytest.fixture
def ex(monkeypatch):
    """The example module; examples/ is on sys.path (the pools copy it to their workers)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("starlette_app")


class Served:
    """The app served by the example's uvicorn Server in this loop; stop() is idempotent."""

    def __init__(self, ex, http: str, mode: str = "interpreters") -> None:
        self.ex = ex
        self.app = ex.make_app(workers=2, max_streams=2, mode=mode)
        # log_config=None: uvicorn's records reach pytest's caplog (no dictConfig).
        config = uvicorn.Config(
            self.app,
            http=http,
            lifespan="on",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self.server = ex.Server(config)
        self.task: asyncio.Task | None = None

    async def start(self) -> str:
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", 0))
            # A bound socket: no name resolution (uvloop's would start libuv's threads);
            # uvicorn closes it when it shuts down.
            self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
            await until(lambda: self.server.started or self.task.done())
            if self.task.done():
                self.task.result()  # startup failed: its error
                raise AssertionError("uvicorn exited at startup")
        except BaseException:
            sock.close()
            raise
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    @property
    def cpu(self) -> aiosubinterp.InterpreterPool:
        return self.server.lifespan.state["cpu_pool"]

    @property
    def streams(self) -> aiosubinterp.InterpreterPool:
        return self.server.lifespan.state["stream_pool"]

    def last_stream(self):
        return self.app.state.streams.recent[-1]

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.server.should_exit = True
        if self.task is not None:
            await self.task


@contextlib.asynccontextmanager
async def serving(ex, http="httptools", mode="interpreters"):
    served = Served(ex, http, mode)
    try:
        url = await served.start()
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with aiohttp.ClientSession(url, timeout=timeout) as client:
            yield served, client
    finally:
        await served.stop()


def parse_events(text: str) -> list[dict[str, str]]:
    """Server-sent events as dicts of their fields (id, event, data)."""
    events = []
    for block in text.split("\n\n"):
        if block:
            events.append(dict(line.split(": ", 1) for line in block.split("\n")))
    return events


def primes_below(bounds: list[int]) -> list[int]:
    """How many primes lie below each bound (a sieve, here in the test)."""
    n = max(bounds)
    sieve = bytearray([1]) * n
    sieve[:2] = b"\0\0"
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n, i)))
    return [sum(sieve[:b]) for b in bounds]


async def test_primes_and_ping(ex):
    async with serving(ex) as (_, client):
        assert await get_json(client, "/primes", n=1000) == {"n": 1000, "primes": 168}
        assert await get_json(client, "/primes", n=2) == {"n": 2, "primes": 0}
        async with client.get("/primes", params={"n": "many"}) as r:
            assert r.status == 400
            assert "n must be an integer" in await r.text()
        async with client.get("/ping") as r:
            assert r.status == 200 and await r.text() == "pong\n"
        assert (await get_json(client, "/stats"))["mode"] == "interpreters"


@pytest.mark.parametrize("mode", ["processes", "to_thread", "inline"])
async def test_primes_in_the_other_modes(ex, mode):
    # The modes bench_http.py compares with the default (interpreters).
    async with serving(ex, mode=mode) as (_, client):
        await check_primes_in_mode(client, ex, mode)
    with pytest.raises(ValueError, match="unknown mode 'fork'"):
        ex.make_app(mode="fork")


async def test_ping_answers_while_every_worker_computes(ex, monkeypatch, pipe):
    async with serving(ex) as (served, client):
        release = hold_primes(ex, monkeypatch, pipe)  # the warm-up is over
        # 4 requests on 2 interpreters: two compute until released, two wait in the queue.
        heavy = [asyncio.create_task(get_json(client, "/primes", n=20_000)) for _ in range(4)]
        try:
            await until(
                lambda: (
                    (served.cpu.statistics()["running"], served.cpu.statistics()["queued"])
                    == (2, 2)
                )
            )
            for _ in range(5):
                async with client.get("/ping") as r:
                    assert await r.text() == "pong\n"
            # The pings were answered while every worker computed and the rest waited.
            assert not any(t.done() for t in heavy)
            stats = served.cpu.statistics()
            assert (stats["running"], stats["queued"]) == (2, 2)
        finally:
            release()
        for result in await asyncio.gather(*heavy):
            assert result == {"n": 20_000, "primes": 2262}


@pytest.mark.parametrize(
    ("http", "size"),
    [("httptools", 1000), ("httptools", 70_000), ("h11", 70_000)],
    ids=["httptools-copied", "httptools-zero-copy", "h11-zero-copy"],
)
async def test_stream_arrives_complete_and_in_order(ex, http, size):
    # Lines of 64 KiB or more cross the channel as views of the producer's memory.
    count = 60
    async with serving(ex, http) as (served, client):
        async with client.get("/stream", params={"count": count, "size": size}) as r:
            assert r.status == 200
            assert r.headers["Transfer-Encoding"] == "chunked"
            assert r.headers["Content-Type"] == "text/plain; charset=ascii"
            body = await r.read()
        lines = body.splitlines(keepends=True)
        assert len(lines) == count
        for i, line in enumerate(lines):
            assert line == ex.work.chunk(i, size), f"line {i}"
        st = served.last_stream()
        assert (st.state, st.written) == ("complete", count)
        assert await st.producer == count
        assert st.send.closed and st.recv.closed
        assert not served.app.state.streams.live
        async with client.get("/stream", params={"count": 0}) as r:
            assert r.status == 200 and await r.read() == b""


async def test_events_arrive_complete_and_in_order(ex):
    n, step = 200_000, 15_000  # 14 blocks, the last one shorter
    async with serving(ex) as (served, client):
        async with client.get("/events", params={"n": n, "step": step}) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")
            assert r.headers["Cache-Control"] == "no-cache"
            assert r.headers["Transfer-Encoding"] == "chunked"
            events = parse_events(await r.text())
        bounds = [*range(step, n, step), n]
        expected = primes_below(bounds)
        progress, last = events[:-1], events[-1]
        assert [e["id"] for e in progress] == [str(i) for i in range(1, len(bounds) + 1)]
        assert {e["event"] for e in progress} == {"progress"}
        assert [json.loads(e["data"]) for e in progress] == [
            {"below": b, "primes": p} for b, p in zip(bounds, expected, strict=True)
        ]
        assert last["event"] == "result" and "id" not in last
        assert json.loads(last["data"]) == {"n": n, "primes": expected[-1]}
        st = served.last_stream()
        assert (st.state, st.written) == ("complete", len(bounds))
        assert st.send.closed and st.recv.closed
        async with client.get("/events", params={"step": 0}) as r:
            assert r.status == 400


async def test_client_gone_mid_stream_stops_the_producer(ex):
    count, size = 10**6, 65536
    async with serving(ex) as (served, client):
        streams = served.streams
        r = await client.get("/stream", params={"count": count, "size": size})
        assert await r.content.readexactly(size) == ex.work.chunk(0, size)
        st = served.last_stream()
        # The client reads no more: once the socket buffers are full, the
        # channel fills and the producer blocks in send_sync (back-pressure).
        await until(
            lambda: (
                st.recv.statistics().current_buffer_used == ex.STREAM_CAPACITY
                and st.recv.statistics().tasks_waiting_send == 1
            )
        )
        assert st.state == "streaming" and st.written < count
        assert streams.statistics()["running"] == 1

        r.close()  # the client disconnects mid-stream
        await until(lambda: st.state != "streaming")
        assert st.state == "client gone"
        await until(lambda: streams.statistics()["running"] == 0)
        assert st.send.closed and st.recv.closed
        stats = st.recv.statistics()
        assert (stats.open_send_channels, stats.open_receive_channels) == (0, 0)
        assert streams.statistics()["replaced"] == 0  # stopped, not abandoned
        # The producer saw BrokenChannelError and returned, or was interrupted.
        assert st.producer.cancelled() or st.producer.result() < count

        # The server keeps serving, streams included.
        async with client.get("/ping") as r2:
            assert await r2.text() == "pong\n"
        async with client.get("/stream", params={"count": 3, "size": 100}) as r2:
            assert await r2.read() == b"".join(ex.work.chunk(i, 100) for i in range(3))
        described = await get_json(client, "/stats")
        assert described["stream_pool"]["running"] == 0
        assert [s["state"] for s in described["streams"]] == ["client gone", "complete"]
        assert all(s["send_closed"] and s["recv_closed"] for s in described["streams"])


async def test_client_gone_mid_events_stops_the_computation(ex):
    # A computation of minutes, reported every 20000 numbers: the client reads
    # two events and leaves; the producer is computing, not waiting on the
    # channel, so it is the cancellation (KeyboardInterrupt) that stops it.
    async with serving(ex) as (served, client):
        streams = served.streams
        r = await client.get("/events", params={"n": 10**9, "step": 20_000})
        first = b""
        while first.count(b"\n\n") < 2:
            first += await r.content.readuntil(b"\n\n")
        assert [json.loads(e["data"]) for e in parse_events(first.decode())] == [
            {"below": 20_000, "primes": 2262},
            {"below": 40_000, "primes": 4203},
        ]
        st = served.last_stream()
        assert streams.statistics()["running"] == 1
        r.close()
        await until(lambda: st.state != "streaming")
        assert st.state == "client gone"
        await until(lambda: streams.statistics()["running"] == 0)
        assert streams.statistics()["replaced"] == 0
        assert st.send.closed and st.recv.closed
        assert st.producer.done()
        async with client.get("/events", params={"n": 100, "step": 100}) as r2:
            events = parse_events(await r2.text())
        assert [e["event"] for e in events] == ["progress", "result"]
        assert json.loads(events[-1]["data"]) == {"n": 100, "primes": 25}


async def test_a_failing_producer_ends_the_response_early(ex, monkeypatch, _no_server_errors):
    # count_primes(send, 3) fails at once in the worker (TypeError), before
    # any `with send`: the channel is closed when its task ends, and the
    # response raises the error, which uvicorn logs and answers by closing
    # the connection: the chunked body is cut short (no final chunk).
    async with serving(ex) as (served, client):
        monkeypatch.setattr(ex.work, "produce", ex.work.count_primes)
        async with client.get("/stream", params={"count": 3}) as r:
            assert r.status == 200  # the headers went out before the body failed
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()
        st = served.last_stream()
        await until(lambda: st.state != "streaming")
        assert st.state == "failed" and st.written == 0
        assert isinstance(st.producer.exception(), TypeError)
        assert st.send.closed and st.recv.closed
        assert [m.splitlines()[0] for m in _no_server_errors.messages] == [
            "Exception in ASGI application"
        ]
        assert "TypeError" in _no_server_errors.messages[0]
        _no_server_errors.messages.clear()
        async with client.get("/ping") as r:
            assert await r.text() == "pong\n"


async def test_a_queued_stream_whose_client_leaves_is_withdrawn(ex):
    # Two streams hold the stream pool's two interpreters (their clients
    # read nothing); a third waits in the queue, its client leaves.
    async with serving(ex) as (served, client):
        streams = served.streams
        held = [
            await client.get("/stream", params={"count": 10**6, "size": 65536}) for _ in range(2)
        ]
        await until(lambda: streams.statistics()["running"] == 2)
        queued = await client.get("/stream", params={"count": 10, "size": 100})
        await until(lambda: streams.statistics()["queued"] == 1)
        st = served.last_stream()
        queued.close()
        await until(lambda: st.state != "streaming")
        assert st.state == "client gone" and st.written == 0
        assert streams.statistics()["queued"] == 0
        assert st.producer.cancelled()
        assert st.send.closed and st.recv.closed
        for r in held:
            r.close()
        await until(lambda: streams.statistics()["running"] == 0)
        assert streams.statistics()["replaced"] == 0
        for st in served.app.state.streams.recent:
            assert st.send.closed and st.recv.closed


async def test_shutdown_with_streams_in_flight_closes_everything(ex):
    async with serving(ex) as (served, client):
        cpu, streams = served.cpu, served.streams
        async with (
            client.get("/stream", params={"count": 10**6, "size": 4096}) as lines,
            client.get("/events", params={"n": 10**9, "step": 20_000}) as events,
        ):
            assert await lines.content.readline() == ex.work.chunk(0, 4096)
            assert b"event: progress" in await events.content.readuntil(b"\n\n")
            # The clients go on reading while the server shuts down.
            bodies = asyncio.gather(lines.read(), events.read())
            await served.stop()  # Server.shutdown ends the streams, the lifespan closes the pools
            rest_of_lines, rest_of_events = await bodies
        st_lines, st_events = served.app.state.streams.recent
        # The text stream ended early, after whole lines; the events with a `shutdown` event.
        assert st_lines.state == st_events.state == "shutdown"
        assert 0 < st_lines.written < 10**6
        assert len(rest_of_lines) % 4096 == 0
        assert parse_events(rest_of_events.decode())[-1] == {
            "event": "shutdown",
            "data": '"the server is shutting down"',
        }
        for st in (st_lines, st_events):
            assert st.send.closed and st.recv.closed and st.producer.done()
        assert not served.app.state.streams.live
        assert cpu.statistics()["state"] == streams.statistics()["state"] == "closed"
        assert [info.is_main for info in aiosubinterp.list_all()] == [True]


def test_without_uvloop_or_httptools_it_says_so_and_falls_back(ex, monkeypatch, capsys):
    assert ex.server_options() == ("uvloop", "httptools")  # the test extra has both
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name in ("uvloop", "httptools") else find_spec(name, *args),
    )
    assert ex.server_options() == ("asyncio", "h11")
    out = capsys.readouterr().out
    assert "uvloop is not installed" in out and "httptools is not installed" in out


def test_the_script_serves_and_stops_on_ctrl_c(ex):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "starlette_app.py"),
            "--port",
            str(port),
            "--workers",
            "1",
            "--max-streams",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out = []
        for line in proc.stdout:  # uvicorn logs "Uvicorn running on ..." once it listens
            out.append(line)
            if "Uvicorn running on" in line:
                break
        base = f"http://127.0.0.1:{port}"
        assert get(f"{base}/ping") == b"pong\n"
        assert get(f"{base}/primes?n=100") == b'{"n":100,"primes":25}'
        assert get(f"{base}/stream?count=2&size=20") == ex.work.chunk(0, 20) + ex.work.chunk(1, 20)
        assert [e["event"] for e in parse_events(get(f"{base}/events?n=10&step=5").decode())] == [
            "progress",
            "progress",
            "result",
        ]
        # A stream in flight when Ctrl-C comes gets its `shutdown` event.
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as conn:
            conn.sendall(b"GET /events?n=1000000000&step=20000 HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = b""
            while b"event: progress" not in received:
                received += conn.recv(65536)
            proc.send_signal(signal.SIGINT)
            while chunk := conn.recv(65536):  # until the server closes the connection
                received += chunk
        rest, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(out) + rest
    assert proc.returncode == 0, output
    assert "event loop: uvloop, HTTP parser: httptools" in output, output
    assert b"event: shutdown" in received
    assert received.endswith(b"0\r\n\r\n")  # the chunked body's proper end
    assert "Application shutdown complete." in output, output
    assert "ERROR" not in output, output
