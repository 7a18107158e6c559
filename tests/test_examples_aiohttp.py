"""examples/aiohttp_app.py served on loopback and called with a real HTTP client.

Each async test runs on asyncio and on uvloop (conftest.py): the app is
started in the test's loop (AppRunner + SockSite on 127.0.0.1, port 0),
except the last test, which runs the script itself in a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohelpers import until
from aiohttp import web
from httphelpers import check_primes_in_mode, free_port, get, get_json, hold_primes

import aiosubinterp

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEADLINE = 30.0  # seconds any awaited condition may take: a backstop (a loaded machine)

pytestmark = pytest.mark.timeout(4 * DEADLINE)  # a test awaits several conditions


@pytest.fixture
def ex(monkeypatch):
    """The example module; examples/ is on sys.path (the pools copy it to their workers)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("aiohttp_app")


class Server:
    """The app on a loopback socket; stop() is its shutdown (idempotent)."""

    def __init__(self, ex, handler_cancellation: bool, mode: str = "interpreters") -> None:
        self.app = ex.make_app(workers=2, max_streams=2, mode=mode)
        self.runner = web.AppRunner(
            self.app, handler_cancellation=handler_cancellation, shutdown_timeout=5
        )
        self.stopped = False

    async def start(self) -> str:
        await self.runner.setup()  # runs cleanup_ctx: the pools start here
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", 0))
            # A bound socket: no name resolution (uvloop's would start libuv's threads).
            await web.SockSite(self.runner, sock).start()
        except BaseException:
            sock.close()
            raise
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.runner.cleanup()


@contextlib.asynccontextmanager
async def serving(ex, handler_cancellation=True, mode="interpreters"):
    server = Server(ex, handler_cancellation, mode)
    try:
        url = await server.start()
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with aiohttp.ClientSession(url, timeout=timeout) as client:
            yield server, client
    finally:
        await server.stop()


async def test_primes_and_ping(ex):
    async with serving(ex) as (_, client):
        assert await get_json(client, "/primes", n=1000) == {"n": 1000, "primes": 168}
        assert await get_json(client, "/primes", n=2) == {"n": 2, "primes": 0}
        async with client.get("/primes", params={"n": "many"}) as r:
            assert r.status == 400
        async with client.get("/ping") as r:
            assert r.status == 200 and await r.text() == "pong\n"


@pytest.mark.parametrize("mode", ["processes", "to_thread", "inline"])
async def test_primes_in_the_other_modes(ex, mode):
    # The modes bench_http.py compares with the default (interpreters).
    async with serving(ex, mode=mode) as (_, client):
        await check_primes_in_mode(client, ex, mode)
    with pytest.raises(ValueError, match="unknown mode 'fork'"):
        ex.make_app(mode="fork")


async def test_ping_answers_while_every_worker_computes(ex, monkeypatch, pipe):
    async with serving(ex) as (server, client):
        cpu = server.app[ex.CPU_POOL]
        release = hold_primes(ex, monkeypatch, pipe)  # the warm-up is over
        # 4 requests on 2 interpreters: two compute until released, two wait in the queue.
        heavy = [asyncio.create_task(get_json(client, "/primes", n=20_000)) for _ in range(4)]
        try:
            await until(lambda: (cpu.statistics()["running"], cpu.statistics()["queued"]) == (2, 2))
            for _ in range(5):
                async with client.get("/ping") as r:
                    assert await r.text() == "pong\n"
            # The pings were answered while every worker computed and the rest waited.
            assert not any(t.done() for t in heavy)
            stats = cpu.statistics()
            assert (stats["running"], stats["queued"]) == (2, 2)
        finally:
            release()
        for result in await asyncio.gather(*heavy):
            assert result == {"n": 20_000, "primes": 2262}


@pytest.mark.parametrize("size", [1000, 70_000], ids=["copied", "zero-copy"])
async def test_stream_arrives_complete_and_in_order(ex, size):
    # Chunks of 64 KiB or more cross the channel as views of the producer's memory.
    count = 60
    async with serving(ex) as (server, client):
        async with client.get("/stream", params={"count": count, "size": size}) as r:
            assert r.status == 200
            assert r.headers["Transfer-Encoding"] == "chunked"
            body = await r.read()
        lines = body.splitlines(keepends=True)
        assert len(lines) == count
        for i, line in enumerate(lines):
            assert line == ex.work.chunk(i, size), f"chunk {i}"
        st = server.app[ex.STREAMS][-1]
        assert (st.state, st.written) == ("complete", count)
        assert await st.producer == count
        assert st.send.closed and st.recv.closed
        async with client.get("/stream", params={"count": 0}) as r:
            assert r.status == 200 and await r.read() == b""


async def test_a_failing_producer_ends_the_response_early(ex, monkeypatch):
    # count_primes(send, count, size) fails at once in the worker (TypeError),
    # before any `with send`: the channel is closed when its task ends, and
    # the handler raises the error, which aiohttp answers by closing the
    # connection: the chunked body is cut short (no final chunk).
    async with serving(ex) as (server, client):
        monkeypatch.setattr(ex.work, "produce", ex.work.count_primes)
        async with client.get("/stream", params={"count": 3}) as r:
            assert r.status == 200  # the headers went out before the body failed
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()
        st = server.app[ex.STREAMS][-1]
        await until(lambda: st.state != "streaming")
        assert st.state == "failed" and st.written == 0
        assert isinstance(st.producer.exception(), TypeError)
        assert st.send.closed and st.recv.closed
        assert await get_json(client, "/primes", n=1000) == {"n": 1000, "primes": 168}


@pytest.mark.parametrize(
    "handler_cancellation", [True, False], ids=["handler-cancelled", "write-fails"]
)
async def test_client_gone_mid_stream_stops_the_producer(ex, handler_cancellation):
    count, size = 10**6, 65536
    async with serving(ex, handler_cancellation) as (server, client):
        streams = server.app[ex.STREAM_POOL]
        r = await client.get("/stream", params={"count": count, "size": size})
        assert await r.content.readexactly(size) == ex.work.chunk(0, size)
        st = server.app[ex.STREAMS][-1]
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
        # With handler_cancellation, the write that fails may come before the cancellation.
        assert st.state in (
            {"cancelled", "client gone"} if handler_cancellation else {"client gone"}
        )
        await until(lambda: streams.statistics()["running"] == 0)
        assert st.send.closed and st.recv.closed
        stats = st.recv.statistics()
        assert (stats.open_send_channels, stats.open_receive_channels) == (0, 0)
        assert streams.statistics()["replaced"] == 0  # stopped, not abandoned

        # The server keeps serving, streams included.
        async with client.get("/ping") as r2:
            assert await r2.text() == "pong\n"
        async with client.get("/stream", params={"count": 3, "size": 100}) as r2:
            assert await r2.read() == b"".join(ex.work.chunk(i, 100) for i in range(3))
        described = await get_json(client, "/stats")
        assert described["stream_pool"]["running"] == 0
        assert [s["state"] for s in described["streams"]] == [st.state, "complete"]


async def test_a_queued_stream_whose_client_leaves_is_withdrawn(ex):
    # Two streams hold the stream pool's two interpreters (their clients
    # read nothing); a third waits in the queue, its client leaves.
    async with serving(ex) as (server, client):
        streams = server.app[ex.STREAM_POOL]
        held = [
            await client.get("/stream", params={"count": 10**6, "size": 65536}) for _ in range(2)
        ]
        await until(lambda: streams.statistics()["running"] == 2)
        queued = await client.get("/stream", params={"count": 10, "size": 100})
        await until(lambda: streams.statistics()["queued"] == 1)
        st = server.app[ex.STREAMS][-1]
        queued.close()
        await until(lambda: st.state != "streaming")
        assert st.state == "cancelled" and st.written == 0
        assert streams.statistics()["queued"] == 0
        assert st.producer.cancelled()
        assert st.send.closed and st.recv.closed
        for r in held:
            r.close()
        await until(lambda: streams.statistics()["running"] == 0)
        assert streams.statistics()["replaced"] == 0
        for st in server.app[ex.STREAMS]:
            assert st.send.closed and st.recv.closed


async def test_shutdown_with_a_stream_in_flight_closes_everything(ex):
    async with serving(ex) as (server, client):
        cpu, streams = server.app[ex.CPU_POOL], server.app[ex.STREAM_POOL]
        async with client.get("/stream", params={"count": 10**6, "size": 4096}) as r:
            assert await r.content.readline() == ex.work.chunk(0, 4096)
            st = server.app[ex.STREAMS][-1]
            await server.stop()  # on_shutdown cancels the stream, cleanup_ctx closes the pools
        assert st.state == "cancelled"
        assert st.send.closed and st.recv.closed
        assert cpu.statistics()["state"] == streams.statistics()["state"] == "closed"
        assert [info.is_main for info in aiosubinterp.list_all()] == [True]


def test_the_script_serves_and_stops_on_ctrl_c():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "aiohttp_app.py"),
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
        for line in proc.stdout:  # run_app prints "Running on ..." once it listens
            out.append(line)
            if "Running on" in line:
                break
        base = f"http://127.0.0.1:{port}"
        assert get(f"{base}/ping") == b"pong\n"
        assert get(f"{base}/primes?n=100") == b'{"n": 100, "primes": 25}'
        assert get(f"{base}/stream?count=2&size=20") == _expected_stream(2, 20)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(out) + rest
    assert proc.returncode == 0, output
    assert "event loop: uvloop.Loop" in output or "event loop: asyncio" in output, output


def _expected_stream(count: int, size: int) -> bytes:
    sys.path.insert(0, str(EXAMPLES))
    try:
        work = importlib.import_module("_web_work")
    finally:
        sys.path.remove(str(EXAMPLES))
    return b"".join(work.chunk(i, size) for i in range(count))
