"""``python -m aiosubinterp serve``: an ASGI app served from the interpreters of one process.

Every server runs in a child process (the command itself, started with
``--port 0``; the port is read from its "Serving ... on http://..." log line)
and is called by real HTTP clients: an h11 client on plain sockets (keep-alive,
pipelining, malformed requests), urllib, and aiohttp in the async test (on
asyncio and uvloop). The applications are in ``tests/servefuncs.py``.
Conditions are awaited through the server's log lines and files the
application writes, each with a generous deadline as a backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import h11
import pytest
from httphelpers import free_port

import aiosubinterp
from aiosubinterp._engine.fallback import copies_unavailable

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
DEADLINE = 30.0  # seconds any awaited condition may take: a backstop (a loaded machine)

pytestmark = [
    pytest.mark.timeout(4 * DEADLINE),
    pytest.mark.skipif(sys.version_info < (3, 13), reason="serve needs CPython 3.13+"),
]


class Server:
    """``python -m aiosubinterp serve APP ARGS`` in a child process, its output collected."""

    def __init__(
        self,
        tmp_path,
        *args: str,
        app: str = "servefuncs:app",
        env: dict[str, str] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        cmd = [
            sys.executable,
            "-m",
            "aiosubinterp",
            "serve",
            app,
            "--app-dir",
            TESTS,
            "--port",
            "0",
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=str(tmp_path),
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ROOT, **(env or {})},
            pass_fds=pass_fds,
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.port = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append("")  # end of output
            self.changed.notify_all()

    @property
    def output(self) -> str:
        with self.changed:
            return "".join(self.lines)

    def wait_for(self, pattern: str, count: int = 1) -> list[str]:
        """The first `count` output lines matching `pattern` (a regex), once there are so many."""
        deadline = time.monotonic() + DEADLINE
        with self.changed:
            while True:
                found = [line for line in self.lines if re.search(pattern, line)]
                if len(found) >= count:
                    return found[:count]
                if self.lines and self.lines[-1] == "":
                    pytest.fail(
                        f"the server exited ({self.proc.wait()}) before printing "
                        f"{pattern!r} x{count}:\n{''.join(self.lines)}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(
                        f"no {pattern!r} x{count} within {DEADLINE} s:\n{''.join(self.lines)}"
                    )
                self.changed.wait(left)

    def start(self) -> Server:
        line = self.wait_for(r"Serving .* on http://")[0]
        self.port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line)[1])
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def exit_code(self) -> int:
        try:
            code = self.proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not exit within {DEADLINE} s:\n{self.output}")
        self.reader.join(DEADLINE)
        return code

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.exit_code()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(DEADLINE)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@contextlib.contextmanager
def serving(tmp_path, *args: str, **kwargs):
    server = Server(tmp_path, *args, **kwargs)
    try:
        yield server.start()
    finally:
        server.kill()


class Client:
    """An HTTP/1.1 client on one socket (h11): keep-alive, and raw bytes when needed."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        self.conn = h11.Connection(h11.CLIENT)

    def close(self) -> None:
        self.sock.close()

    def send(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        headers = [("host", "localhost"), *(headers or [])]
        if body:
            headers.append(("content-length", str(len(body))))
        data = self.conn.send(h11.Request(method=method, target=target, headers=headers))
        if body:
            data += self.conn.send(h11.Data(data=body))
        data += self.conn.send(h11.EndOfMessage())
        self.sock.sendall(data)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = 0, {}, b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                return status, headers, body
            else:
                raise AssertionError(f"unexpected {event!r}")

    def request(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        self.send(method, target, body, headers)
        return self.response()

    def raw(self, data: bytes) -> bytes:
        """Send bytes as they are; everything the server answers until it closes."""
        self.sock.sendall(data)
        received = b""
        while chunk := self.sock.recv(65536):
            received += chunk
        return received

    def closed_by_server(self) -> bool:
        """Wait (up to the deadline) for the server to close this idle connection."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def wait_for_file(path, server: Server) -> None:
    """Wait until path exists (the test app's sign that a request started)."""
    deadline = time.monotonic() + DEADLINE
    while not path.exists():
        assert time.monotonic() < deadline, server.output
        time.sleep(0.02)


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        with exc:  # 3.14 warns about an HTTPError left open
            return exc.code, exc.read()


def get_json(url: str) -> dict:
    status, body = get(url)
    assert status == 200, body
    return json.loads(body)


def interpreters_answering(url: str, want: int = 2, bound: int = 50) -> set[int]:
    """Interpreter ids that answered GET url/json until `want` were seen (`bound` rounds).

    Each round opens 8 connections at once (whichever interpreter's loop
    accepts each one answers it), then asks /json on each.
    """
    port = int(url.rsplit(":", 1)[1])
    seen: set[int] = set()
    for _ in range(bound):
        clients = [Client(port) for _ in range(8)]
        try:
            for client in clients:
                status, _, body = client.request("GET", "/json")
                assert status == 200, body
                answer = json.loads(body)
                assert answer["started_in"] == answer["interpreter"]  # its own lifespan ran
                seen.add(answer["interpreter"])
        finally:
            for client in clients:
                client.close()
        if len(seen) >= want:
            break
    return seen


# -- serving -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server of 2 interpreters for the tests that do not stop or break it."""
    with serving(tmp_path_factory.mktemp("serve"), "--workers", "2") as server:
        yield server


def test_plaintext_and_json_from_different_interpreters(server):
    assert get(server.url + "/") == (200, b"Hello, world!")
    seen = interpreters_answering(server.url)
    assert len(seen) == 2 and 0 not in seen  # never the main interpreter
    answer = get_json(server.url + "/json?x=1")
    assert (answer["method"], answer["query"], answer["root_path"]) == ("GET", "x=1", "")
    # Access lines of every interpreter reach main's logging (its stderr handler).
    server.wait_for(r'INFO: 127\.0\.0\.1:\d+ - "GET /json\?x=1 HTTP/1\.1" 200')


def test_the_path_is_percent_decoded_as_urllib_does(server):
    from aiosubinterp._serve.http import unquote_path

    status, body = get(server.url + "/js%6Fn")  # "/json"
    assert status == 200 and json.loads(body)["method"] == "GET"
    parts = [b"%", b"e2", b"82", b"AC", b"ac", b"g", b"/", b"%2", b"ff", b"\xff", b"C3", b"A9"]
    rng = random.Random(5)
    for _ in range(5000):
        raw = b"".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert unquote_path(raw) == urllib.parse.unquote(raw.decode("ascii", "replace")), raw


def test_the_server_side_loads_only_what_it_runs(server):
    # Every interpreter pays for each module it imports: the HTTP code does
    # not import urllib.parse (and ipaddress with it), and main, which only
    # names the worker's function, does not import h11 or the HTTP code.
    modules = set(json.loads(get(server.url + "/modules")[1]))
    assert "h11" in modules and "aiosubinterp._serve.http" in modules
    assert not modules & {"urllib.parse", "ipaddress"}
    code = (
        "import sys; from aiosubinterp._serve import main, worker; "
        "print(sorted({'h11', 'aiosubinterp._serve.http', 'urllib.parse'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE, check=True
    )
    assert out.stdout.strip() == "[]", out.stderr


async def test_websockets_are_served_from_the_interpreters(server):
    from wshelpers import Client
    from wsproto import events as ws

    port = int(server.url.rsplit(":", 1)[1])
    clients = []
    for _ in range(4):
        client, answer = await Client.connect(port, "/ws")
        assert isinstance(answer, ws.AcceptConnection), answer
        clients.append(client)
    for i, client in enumerate(clients):
        client.send_text(f"hello {i}")
    for i, client in enumerate(clients):
        interp, _, text = (await client.message()).partition(":")
        assert text == f"hello {i}" and int(interp) != 0  # never the main interpreter
        client.send_close()
        assert isinstance(await client.next(), ws.CloseConnection)
        await client.aclose()
    server.wait_for(r'INFO: 127\.0\.0\.1:\d+ - "WebSocket /ws" 101')


def test_keep_alive_and_pipelining(server):
    client = Client(server.port)
    try:
        answers = [client.request("GET", "/json") for _ in range(3)]
        assert [status for status, _, _ in answers] == [200] * 3
        # One connection, one interpreter: its loop answers them all.
        assert len({json.loads(body)["interpreter"] for _, _, body in answers}) == 1
        assert answers[0][1]["content-type"] == "application/json"
        assert "date" in answers[0][1]
    finally:
        client.close()
    # Two requests sent at once (pipelined) are answered in order.
    client = Client(server.port)
    try:
        answer = client.raw(
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n"
            b"connection: close\r\n\r\nsecond"
        )
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 200 ") == 2
    assert answer.index(b"Hello, world!") < answer.index(b"second")
    assert answer.endswith(b"second")


def test_streaming_and_request_bodies(server):
    client = Client(server.port)
    try:
        status, headers, body = client.request("GET", "/stream?n=200")
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert body == b"".join(b"chunk %d\n" % i for i in range(200))
        big = os.urandom(3 * 1024 * 1024)  # beyond the server's read buffer: flow control
        status, _, body = client.request("POST", "/echo", big)
        assert status == 200 and body == big
        status, headers, body = client.request("HEAD", "/")
        assert (status, body, headers["content-length"]) == (200, b"", "13")
    finally:
        client.close()


def test_a_client_that_half_closes_still_gets_its_response(server, tmp_path):
    release = tmp_path / "release"
    client = Client(server.port)
    try:
        client.sock.sendall(
            b"GET /slow?path=%s HTTP/1.1\r\nhost: x\r\n\r\n" % str(release).encode()
        )
        client.sock.shutdown(socket.SHUT_WR)  # EOF while the request runs
        wait_for_file(tmp_path / "release.started", server)
        release.write_text("go")
        answer = b""
        while chunk := client.sock.recv(65536):
            answer += chunk
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"slow done"), answer


def test_the_head_goes_out_before_a_late_body(server, tmp_path):
    release = tmp_path / "release"
    client = Client(server.port)
    try:
        client.send("GET", f"/late?path={release}")
        head = b""
        while b"\r\n\r\n" not in head:  # the head arrives while the body waits
            head += client.sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 ")
        release.write_text("go")
        rest = head.split(b"\r\n\r\n", 1)[1]
        while not rest.endswith(b"0\r\n\r\n"):
            rest += client.sock.recv(65536)
        assert b"late body" in rest
    finally:
        client.close()


def test_an_application_error_is_a_500_and_logged(server):
    assert get(server.url + "/error")[0] == 500
    server.wait_for(r"ERROR: Exception in ASGI application")
    server.wait_for(r"RuntimeError: the application failed on purpose")
    assert get(server.url + "/missing") == (404, b"not found")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n", 431),
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n", 431),
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nbad header line\r\n\r\n", 400),
    ],
    ids=["huge-header", "huge-request-line", "garbage", "bad-header"],
)
def test_bad_requests_get_4xx_and_close(server, request_bytes, status):
    client = Client(server.port)
    try:
        answer = client.raw(request_bytes)
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"connection: close" in answer
    assert get(server.url + "/") == (200, b"Hello, world!")  # the server goes on


async def test_concurrent_clients(server):
    # aiohttp: a pool of keep-alive connections, many requests at once (asyncio and uvloop).
    import aiohttp

    async with aiohttp.ClientSession(server.url) as session:

        async def one(i):
            async with session.get("/echo", data=b"%d" % i) as r:
                return r.status, await r.read()

        results = await asyncio.gather(*(one(i) for i in range(60)))
    assert results == [(200, b"%d" % i) for i in range(60)]


def test_starlette(tmp_path):
    pytest.importorskip("starlette")
    with serving(tmp_path, "--workers", "2", "--factory", app="servefuncs:make_starlette") as srv:
        assert get(srv.url + "/") == (200, b"Hello, world!")
        seen = interpreters_answering(srv.url)
        assert len(seen) == 2
        client = Client(srv.port)
        try:
            status, headers, body = client.request("GET", "/stream")
            assert (status, body) == (200, b"line 0\nline 1\nline 2\n")
            assert headers["transfer-encoding"] == "chunked"
            assert client.request("GET", "/json")[0] == 200  # the same connection
        finally:
            client.close()
        assert srv.stop(signal.SIGINT) == 0


# -- stopping ----------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_finishes_the_requests_in_flight_and_exits_0(tmp_path, sig):
    markers = tmp_path / "markers"
    markers.mkdir()
    with serving(
        tmp_path,
        "--workers",
        "2",
        "--timeout-graceful-shutdown",
        "60",
        env={"SERVE_TEST_SHUTDOWN_DIR": str(markers)},
    ) as srv:
        seen = interpreters_answering(srv.url)
        release = tmp_path / "release"
        client = Client(srv.port)
        try:
            client.send("GET", f"/slow?path={release}")
            wait_for_file(tmp_path / "release.started", srv)  # the request is in flight
            srv.proc.send_signal(sig)
            srv.wait_for(r"Stopped accepting connections")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", srv.port), timeout=DEADLINE).close()
            assert srv.proc.poll() is None  # still finishing the slow request
            release.write_text("go")
            status, headers, body = client.response()
            assert (status, body) == (200, b"slow done")
            assert headers["connection"] == "close"
        finally:
            client.close()
        assert srv.exit_code() == 0, srv.output
    # The lifespan shutdown ran in every interpreter.
    assert {int(p.name.split("-")[1]) for p in markers.iterdir()} == seen
    assert f"{signal.Signals(sig).name}: shutting down" in srv.output
    assert "Traceback" not in srv.output, srv.output


def test_graceful_shutdown_timeout_cancels_what_is_left(tmp_path):
    with serving(tmp_path, "--workers", "1", "--timeout-graceful-shutdown", "0.5") as srv:
        client = Client(srv.port)
        try:
            client.send("GET", f"/slow?path={tmp_path / 'never'}")
            wait_for_file(tmp_path / "never.started", srv)
            assert srv.stop() == 0, srv.output
            assert client.closed_by_server()  # cut off, no response
        finally:
            client.close()
    assert "Cancel 1 running request(s)" in srv.output
    assert "Traceback" not in srv.output, srv.output


def test_a_second_signal_cancels_the_requests_in_flight(tmp_path):
    with serving(tmp_path, "--workers", "2") as srv:  # no graceful limit
        client = Client(srv.port)
        try:
            client.send("GET", f"/slow?path={tmp_path / 'never'}")
            wait_for_file(tmp_path / "never.started", srv)
            srv.proc.send_signal(signal.SIGINT)
            srv.wait_for(r"Stopped accepting connections")
            assert srv.stop(signal.SIGINT) == 0, srv.output
            assert client.closed_by_server()  # cut off, no response
        finally:
            client.close()
    assert "SIGINT again: cancelling the requests in flight" in srv.output
    assert "Traceback" not in srv.output, srv.output


# -- options -----------------------------------------------------------------------


def test_limit_concurrency_keep_alive_timeout_and_quiet_logs(tmp_path):
    with serving(
        tmp_path,
        "--workers",
        "1",
        "--limit-concurrency",
        "1",
        "--timeout-keep-alive",
        "0.5",
        "--no-access-log",
        "--root-path",
        "/api",
    ) as srv:
        release = tmp_path / "release"
        slow = Client(srv.port)
        try:
            slow.send("GET", f"/slow?path={release}")
            wait_for_file(tmp_path / "release.started", srv)
            status, body = get(srv.url + "/")
            assert (status, body) == (503, b"Service Unavailable")
            release.write_text("go")
            assert slow.response()[:1] == (200,)
            # Idle after its response: the server closes it (--timeout-keep-alive).
            assert slow.closed_by_server()
        finally:
            slow.close()
        stalled = Client(srv.port)  # sends half a request head, then nothing
        try:
            stalled.sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")
            assert stalled.closed_by_server()
        finally:
            stalled.close()
        answer = get_json(srv.url + "/json")
        assert answer["root_path"] == "/api"
        assert srv.stop() == 0
    assert '"GET' not in srv.output  # --no-access-log


def listening_sockets(pid: int, port: int) -> int:
    """How many TCP sockets process pid holds that listen on port (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:
                    count += 1
    return count


@pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT balances connections on Linux")
def test_each_interpreter_accepts_from_a_socket_of_its_own(tmp_path):
    # One shared socket let the interpreter that woke first take a whole
    # burst of connections (a benchmark's 64 at once): the other interpreter
    # idled while CPU-bound requests queued on the first. With a socket each
    # (SO_REUSEPORT), the kernel spreads the connections.
    with serving(tmp_path, "--workers", "2", "--no-access-log") as srv:
        assert listening_sockets(srv.proc.pid, srv.port) == 2
        clients = [Client(srv.port) for _ in range(16)]  # at once, before any request
        try:
            seen = set()
            for client in clients:
                status, _, body = client.request("GET", "/json")
                assert status == 200, body
                seen.add(json.loads(body)["interpreter"])
        finally:
            for client in clients:
                client.close()
        assert len(seen) == 2, seen  # all 16 on one of two sockets: 1 in 32,768
        assert srv.stop() == 0, srv.output
    with serving(tmp_path, "--workers", "2", "--no-reuse-port") as srv:
        assert listening_sockets(srv.proc.pid, srv.port) == 1
        assert len(interpreters_answering(srv.url)) == 2
        assert srv.stop() == 0, srv.output


def test_django(tmp_path):
    # Django's ASGI handler (asgiref) ends each request by starting a daemon
    # thread, which an interpreter with its own GIL refuses: every response
    # was followed by "daemon threads are disabled in this (sub)interpreter".
    with serving(tmp_path, "--workers", "2", app="djangoapp:application") as srv:
        assert get(srv.url + "/") == (200, b"Hello from Django")  # a sync view
        seen = set()
        for k in range(8):
            client = Client(srv.port)
            try:
                status, _, body = client.request("POST", f"/info?q={k}", body=b"form")
            finally:
                client.close()
            assert status == 200, body
            answer = json.loads(body)
            assert (answer["method"], answer["q"], answer["body"]) == ("POST", str(k), "form")
            seen.add(answer["interpreter"])
        assert 0 not in seen
        assert srv.stop() == 0, srv.output
    assert "Exception in ASGI application" not in srv.output, srv.output
    assert "daemon threads" not in srv.output, srv.output


@pytest.mark.skipif(
    copies_unavailable() is not None, reason="private copies: CPython 3.13+, not free-threaded"
)
def test_fastapi_from_private_copies(tmp_path):
    # pydantic-core refuses interpreters: FastAPI could not be imported there.
    # serve loads it from a private copy in each interpreter (the default where
    # this Python can); --no-copies gives the application's import error.
    with serving(tmp_path, "--workers", "2", app="fastapiapp:app") as srv:
        seen = set()
        for _ in range(8):
            client = Client(srv.port)
            try:
                status, _, body = client.request("GET", "/sync")
                assert status == 200, body
                seen.add(json.loads(body)["interpreter"])
                item = json.dumps({"name": "pen", "price": 1.25}).encode()
                headers = [("content-type", "application/json")]
                status, _, body = client.request("POST", "/items", item, headers)
                assert (status, json.loads(body)) == (200, {"name": "pen", "double": 2.5})
                status, _, body = client.request("POST", "/items", b'{"name": 1}', headers)
                assert status == 422, body  # pydantic's validation, in the interpreter
            finally:
                client.close()
        assert 0 not in seen
        assert srv.stop() == 0, srv.output
    assert "Exception in ASGI application" not in srv.output, srv.output
    server = Server(tmp_path, "--workers", "1", "--no-copies", app="fastapiapp:app")
    try:
        assert server.exit_code() == 1
    finally:
        server.kill()
    assert "pydantic_core._pydantic_core does not support loading in subinterpreters" in (
        server.output
    )
    assert "without --no-copies, serve loads such modules from a private copy" in server.output


def test_fd_serves_a_socket_bound_by_the_parent(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = Server(
            tmp_path, "--workers", "1", "--fd", str(sock.fileno()), pass_fds=(sock.fileno(),)
        )
    try:
        server.start()
        assert server.port == port
        assert get(server.url + "/") == (200, b"Hello, world!")
        assert server.stop() == 0, server.output
    finally:
        server.kill()


def test_log_level_warning_hides_info(tmp_path):
    # No "Serving" line at this level: the test picks the port and waits for an answer.
    port = free_port()
    server = Server(tmp_path, "--workers", "1", "--log-level", "warning", "--port", str(port))
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                assert get(f"http://127.0.0.1:{port}/error")[0] == 500
                break
            except urllib.error.URLError:
                assert time.monotonic() < deadline and server.proc.poll() is None, server.output
                time.sleep(0.05)
        server.wait_for(r"ERROR: Exception in ASGI application")
        assert server.stop() == 0, server.output
    finally:
        server.kill()
    assert "INFO" not in server.output, server.output


def test_interpreters_are_replaced_after_max_requests_and_on_exit(tmp_path):
    with serving(tmp_path, "--workers", "2", "--limit-max-requests", "3") as srv:
        first = interpreters_answering(srv.url)
        for _ in range(12):  # 2 interpreters x 3 requests, then more: some are replaced
            assert get(srv.url + "/")[0] == 200
        srv.wait_for(r"answered \d+ requests \(--limit-max-requests\); replacing it")
        srv.wait_for(r"Interpreter \d+ serves in slot \d")
        later = interpreters_answering(srv.url)
        assert later - first, (first, later)  # fresh interpreters serve now
        # An application that raises SystemExit: its interpreter is replaced too.
        assert get(srv.url + "/exit")[0] == 500
        srv.wait_for(r"raised SystemExit\(3\); replacing it")
        for _ in range(5):
            assert get(srv.url + "/")[0] == 200
        assert srv.stop() == 0, srv.output


def test_a_hung_interpreter_is_replaced(tmp_path):
    release = tmp_path / "release"
    with serving(tmp_path, "--workers", "2", "--timeout-worker-healthcheck", "1") as srv:
        client = Client(srv.port)
        try:
            client.send("GET", f"/hang?path={release}")  # blocks its interpreter's loop
            wait_for_file(tmp_path / "release.started", srv)
            srv.wait_for(r"slot \d sent no sign of life .* interrupting and replacing it")
            srv.wait_for(r"Interpreter \d+ serves in slot \d")
            for _ in range(5):
                assert get(srv.url + "/") == (200, b"Hello, world!")
            # Stopped while that interpreter still blocks: the process exits all the same.
            assert srv.stop() == 0, srv.output
            assert client.closed_by_server()
        finally:
            release.write_text("go")
            client.close()
    assert re.search(r"\d interpreter\(s\) still block their event loop", srv.output), srv.output


def test_a_replacement_that_cannot_start_ends_the_server(tmp_path):
    flag = tmp_path / "flag"
    with serving(
        tmp_path,
        "--workers",
        "2",
        app="servefuncs:fails_once_flagged",
        env={"SERVE_TEST_FAIL_FLAG": str(flag)},
    ) as srv:
        assert get(srv.url + "/")[0] == 200
        flag.write_text("fail from now on")
        assert get(srv.url + "/exit")[0] == 500  # its interpreter is replaced...
        assert srv.exit_code() == 3, srv.output  # ...by one whose startup fails
    assert "lifespan startup failed: flagged" in srv.output
    assert "Stopped accepting connections" in srv.output


# -- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("app", "code", "message"),
    [
        ("no_such_module:app", 1, r"Could not import module 'no_such_module'"),
        ("servefuncs:nothing", 1, r"Attribute 'nothing' not found in module 'servefuncs'"),
        ("servefuncs:not_callable", 1, r"not_callable is not callable \(int\): not an ASGI app"),
        ("servefuncs:failing_startup", 3, r"lifespan startup failed: no database here"),
        ("servefuncs_broken:app", 1, r"Error loading the application"),
    ],
    ids=["module", "attribute", "not-callable", "startup-failed", "import-raises"],
)
def test_an_application_that_cannot_start_exits_non_zero(tmp_path, app, code, message):
    (tmp_path / "servefuncs_broken.py").write_text("raise ImportError('broken on purpose')\n")
    server = Server(
        tmp_path,
        "--workers",
        "2",
        "--app-dir",
        str(tmp_path),
        app=app,
        env={"PYTHONPATH": os.pathsep.join([ROOT, TESTS])},
    )
    try:
        assert server.exit_code() == code, server.output
    finally:
        server.kill()
    assert re.search(message, server.output), server.output
    if app.startswith("servefuncs_broken"):
        assert "ImportError: broken on purpose" in server.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["servefuncs"], "expected 'module:attribute'"),
        (["servefuncs:app", "--workers", "0"], "--workers must be positive"),
        (["servefuncs:app", "--timeout-keep-alive", "-1"], "--timeout-keep-alive must be positive"),
        (
            ["servefuncs:app", "--timeout-request-head", "0"],
            "--timeout-request-head must be positive",
        ),
        (["servefuncs:app", "--port", "70000"], r"--port must be an int in \[0, 65535\]"),
        (["servefuncs:app", "--root-path", "api/"], "a path starting with '/'"),
        (["servefuncs:app", "--ws-max-size", "0"], "--ws-max-size must be positive"),
        (["servefuncs:app", "--ws-ping-interval", "soon"], "expected seconds or 'none'"),
        (
            ["servefuncs:app", "--forwarded-allow-ips", "10.0.0.1,nope"],
            "--forwarded-allow-ips: 'nope' is not an IP address or network",
        ),
    ],
)
def test_bad_arguments_are_usage_errors(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "serve", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 2, proc.stderr
    assert re.search(message, proc.stderr), proc.stderr


def test_the_function_checks_its_arguments_before_starting():
    with pytest.raises(TypeError, match="import path as a 'module:attribute' string"):
        aiosubinterp.serve(test_the_function_checks_its_arguments_before_starting)
    with pytest.raises(ValueError, match="choose from auto, on, off"):
        aiosubinterp.serve("servefuncs:app", lifespan="maybe")
    with pytest.raises(TypeError, match=r"expected an int, got 2\.5"):
        aiosubinterp.serve("servefuncs:app", limit_max_requests=2.5)
    with pytest.raises(ValueError, match="choose from critical"):
        aiosubinterp.serve("servefuncs:app", log_level="loud")
    with pytest.raises(TypeError, match=r"serve\(copies='yes'\): True, False or None"):
        aiosubinterp.serve("servefuncs:app", copies="yes")


def test_copies_required_where_this_python_cannot_is_an_error(monkeypatch):
    from aiosubinterp._engine import fallback

    monkeypatch.setattr(fallback, "copies_unavailable", lambda: "not on this test's Python")
    with pytest.raises(ValueError, match=r"serve\(copies=True\): .*not on this test's Python"):
        aiosubinterp.serve("servefuncs:app", copies=True)


def test_on_3_12_it_says_which_python_it_needs(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 12, 1, "final", 0))
    with pytest.raises(RuntimeError, match=r"serve needs CPython 3\.13 or newer"):
        aiosubinterp.serve("servefuncs:app")


def test_the_function_serves_a_unix_socket(tmp_path):
    path = tmp_path / "s.sock"
    script = tmp_path / "child.py"
    # The program's own logging configuration: serve() adds no handler, and the
    # interpreters' records reach this one with their interpreter_id.
    script.write_text(
        "import aiosubinterp, logging, sys\n"
        "class Show(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        where = getattr(record, 'interpreter_id', 'main')\n"
        "        print(f'{record.name} interp={where} {record.getMessage()}', flush=True)\n"
        "logging.basicConfig(level=logging.INFO, handlers=[Show()])\n"
        f"sys.exit(aiosubinterp.serve('servefuncs:app', workers=1, uds={str(path)!r}, "
        f"app_dir={TESTS!r}))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ROOT},
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Serving" in line:
                break
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(DEADLINE)
            sock.connect(str(path))
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"Hello, world!")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == 0, out
    assert f"unix socket {path}" in line
    assert line.startswith("aiosubinterp.serve interp=main Serving servefuncs:app")
    assert re.search(
        r'aiosubinterp\.serve\.access interp=[1-9]\d* - - "GET / HTTP/1\.1" 200', out
    ), out
    assert not path.exists()  # removed at exit


def server_state(app, **cfg):
    """An interpreter's ServerState for app, in this process (cfg: options to change)."""
    from aiosubinterp._serve.http import ServerState

    options = {
        "root_path": "",
        "timeout_keep_alive": DEADLINE,
        "timeout_request_head": DEADLINE,
        "h11_max_incomplete_event_size": 16384,
        "limit_concurrency": None,
        "limit_max_requests": None,
        "access_log": False,
        "forwarded_allow_ips": None,
        "ws_max_size": 16 * 1024 * 1024,
        "ws_ping_interval": 20.0,
        "ws_ping_timeout": 20.0,
    }
    return ServerState(app, {**options, **cfg}, {}, ("127.0.0.1", 0))


async def test_a_connection_accepted_just_before_a_stop_gets_its_answer():
    # asyncio's loop makes the protocol of an accepted socket one step before
    # its transport: an interpreter told to stop (or recycled) in between must
    # still answer that connection's request, not close it under the client
    # (seen as "connection reset" with --limit-max-requests).
    from aiosubinterp._serve.http import Connection

    async def app(scope, receive, send):
        headers = [(b"content-length", b"17")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"late but answered"})

    state = server_state(app)
    conn = Connection(state)  # the protocol factory ran; no transport yet
    state.stop()
    assert not state.idle.is_set()  # the stop waits for that connection
    ours, client = socket.socketpair()
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.connect_accepted_socket(lambda: conn, ours)
        await loop.sock_sendall(client, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = b""
        while chunk := await asyncio.wait_for(loop.sock_recv(client, 65536), DEADLINE):
            answer += chunk
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"connection: close" in answer and answer.endswith(b"late but answered")
    await asyncio.wait_for(state.idle.wait(), DEADLINE)
    assert not state.connections


async def test_a_client_sending_its_head_a_byte_at_a_time_gets_408():
    # Each byte comes well within the keep-alive timeout, which it restarts:
    # only the head's own timeout, counted from its first byte, ends it
    # (a "slowloris" client would otherwise hold the connection forever).
    from aiosubinterp._serve.http import Connection

    async def app(scope, receive, send):  # never reached: the head never completes
        raise AssertionError("a request started")

    state = server_state(app, timeout_request_head=0.3)
    ours, client = socket.socketpair()
    client.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(lambda: Connection(state), ours)
    answer = b""
    sent = 0
    try:
        head = b"GET / HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 100_000
        deadline = loop.time() + DEADLINE  # a backstop only
        while loop.time() < deadline:
            try:
                await loop.sock_sendall(client, head[sent : sent + 1])
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(client, 65536), 0.02)
            except TimeoutError:
                continue
            answer += chunk
            if not chunk:
                break
        while chunk := await asyncio.wait_for(loop.sock_recv(client, 65536), DEADLINE):
            answer += chunk
    except ConnectionResetError:
        pass
    finally:
        client.close()
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), (sent, answer)
    assert b"connection: close" in answer
    assert sent < len(head)
    await asyncio.wait_for(_until(lambda: not state.connections), DEADLINE)


async def _ask_with_headers(state, extra: bytes) -> dict:
    """The scope's client and scheme, as an app served in-process over TCP saw them."""
    import json

    from aiosubinterp._serve.http import Connection

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(state), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + extra + b"\r\n")
        answer = await asyncio.wait_for(reader.read(), DEADLINE)
        writer.close()
        local_port = writer.get_extra_info("sockname")[1]
    finally:
        server.close()
        await server.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answer
    seen = json.loads(body)
    seen["local_port"] = local_port
    return seen


async def _scope_app(scope, receive, send):
    import json

    body = json.dumps({"client": scope["client"], "scheme": scope["scheme"]}).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


FORWARDED = b"x-forwarded-for: 203.0.113.7, 10.1.2.3\r\nx-forwarded-proto: https\r\n"


async def test_a_trusted_proxy_gives_the_client_and_scheme(caplog):
    # The nearest hop (10.1.2.3) is a trusted proxy too: the client is the
    # first address, from the right, that is not one.
    state = server_state(
        _scope_app, forwarded_allow_ips=("127.0.0.1", "10.0.0.0/8"), access_log=True
    )
    with caplog.at_level(logging.INFO, logger="aiosubinterp.serve.access"):
        seen = await _ask_with_headers(state, FORWARDED)
    assert seen["client"] == ["203.0.113.7", 0]
    assert seen["scheme"] == "https"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "aiosubinterp.serve.access"]
    assert line.startswith('203.0.113.7:0 - "GET / HTTP/1.1" 200'), line


async def test_an_untrusted_hop_is_the_client_and_what_it_claims_is_ignored():
    # 10.1.2.3 is not trusted: it is the client, whatever it says came before it.
    state = server_state(_scope_app, forwarded_allow_ips=("127.0.0.1",))
    seen = await _ask_with_headers(state, FORWARDED + b"x-forwarded-for: 198.51.100.1\r\n")
    assert seen["client"] == ["198.51.100.1", 0]
    state = server_state(_scope_app, forwarded_allow_ips=("127.0.0.1",))
    seen = await _ask_with_headers(state, FORWARDED)
    assert seen["client"] == ["10.1.2.3", 0]


@pytest.mark.parametrize("allowed", [None, ("10.0.0.0/8",), ()])
async def test_forwarding_headers_from_an_untrusted_peer_or_when_off_are_ignored(allowed):
    state = server_state(_scope_app, forwarded_allow_ips=allowed)
    seen = await _ask_with_headers(state, FORWARDED)
    assert seen["client"] == ["127.0.0.1", seen["local_port"]]
    assert seen["scheme"] == "http"


async def test_a_proxy_trusted_by_star_with_an_unknown_scheme_keeps_http():
    state = server_state(_scope_app, forwarded_allow_ips=("*",))
    seen = await _ask_with_headers(state, b"x-forwarded-proto: gopher\r\n")
    assert seen["client"] == ["127.0.0.1", seen["local_port"]]
    assert seen["scheme"] == "http"
    seen = await _ask_with_headers(state, b"x-forwarded-for: 10.9.9.9, 127.0.0.1\r\n")
    assert seen["client"] == ["10.9.9.9", 0]  # all trusted: the leftmost


@pytest.mark.parametrize(
    ("host", "trusted"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", False),
        ("10.255.1.1", True),
        ("11.0.0.1", False),
        ("::1", True),
        ("::2", False),
        ("2001:db8:1::5", True),
        ("2001:db9::1", False),
        ("::ffff:127.0.0.1", True),  # an IPv4 peer on a dual-stack socket
        ("192.168.3.4", True),  # in ::ffff:192.168.0.0/112
        ("proxy.local", False),
        ("unknown", False),
        (None, False),  # a Unix socket peer, without "unix:"
    ],
)
def test_which_peers_are_trusted_proxies(host, trusted):
    from aiosubinterp._serve.proxies import TrustedProxies

    proxies = TrustedProxies(
        ("127.0.0.1", "10.0.0.0/8", "::1", "2001:db8::/32", "::ffff:192.168.0.0/112")
    )
    assert proxies.trusts(host) is trusted
    assert TrustedProxies(("*",)).trusts(host)
    assert TrustedProxies(("unix:",)).trusts(host) is (host is None)


def test_forwarded_allow_ips_are_checked_before_starting(monkeypatch):
    from aiosubinterp._serve.main import _trusted_proxies

    assert _trusted_proxies("127.0.0.1, 10.0.0.0/8,unix:") == ("127.0.0.1", "10.0.0.0/8", "unix:")
    assert _trusted_proxies(["::1", "*"]) == ("::1", "*")
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "192.168.0.0/16")
    assert _trusted_proxies(None) == ("192.168.0.0/16",)
    monkeypatch.delenv("FORWARDED_ALLOW_IPS")
    assert _trusted_proxies(None) == ("127.0.0.1",)
    with pytest.raises(ValueError, match=r"'proxy\.local' is not an IP address or network"):
        aiosubinterp.serve("servefuncs:app", forwarded_allow_ips="10.0.0.1,proxy.local")
    with pytest.raises(TypeError, match="comma-separated"):
        aiosubinterp.serve("servefuncs:app", forwarded_allow_ips=10)
    # Forms an interpreter could not match are refused here, not when it starts.
    for entry in ("10.0.0.0/255.0.0.0", "10.0.0.0/33", "::1/129", "10.0.0.0/-1", "10.0.0.0/"):
        with pytest.raises(ValueError, match=re.escape(f"{entry!r} is not an IP address or net")):
            aiosubinterp.serve("servefuncs:app", forwarded_allow_ips=entry)
    assert _trusted_proxies("::ffff:10.0.0.0/104,0.0.0.0/0") == ("::ffff:10.0.0.0/104", "0.0.0.0/0")


class _WsServer:
    """An in-process server (one interpreter's ServerState) on a TCP port, for WebSocket tests."""

    def __init__(self, app, **cfg):
        self.state = server_state(app, **cfg)

    async def __aenter__(self):
        from aiosubinterp._serve.http import Connection

        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Connection(self.state), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        for conn in list(self.state.connections):
            conn.abort()
        await self.server.wait_closed()


def _ws_echo_app(seen):
    """Accepts (with "chat" if offered), echoes each message, records the scope and the end."""

    async def app(scope, receive, send):
        seen["scope"] = scope
        assert (await receive())["type"] == "websocket.connect"
        offered = scope["subprotocols"]
        await send(
            {"type": "websocket.accept", "subprotocol": "chat" if "chat" in offered else None}
        )
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                seen["disconnect"] = message
                seen["ended"].set()
                return
            await send({**message, "type": "websocket.send"})

    return app


async def _echoing_client(server):
    """A client of _ws_echo_app's server whose first message came back."""
    from wshelpers import Client

    client, _ = await Client.connect(server.port)
    client.send_text("hi")
    assert await client.message() == "hi"
    return client


async def test_a_websocket_echoes_text_and_bytes_and_ends_with_the_clients_close():
    from wshelpers import Client
    from wsproto import events as ws

    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen), access_log=True) as server:
        client, answer = await Client.connect(server.port, "/chat?room=1", ("x", "chat"))
        assert isinstance(answer, ws.AcceptConnection) and answer.subprotocol == "chat"
        client.send_text("hello")
        assert await client.message() == "hello"
        client.send_bytes(b"\x00\x01" * 50_000)  # many frames' worth
        assert await client.message() == b"\x00\x01" * 50_000
        client.send_close(1000, "bye")
        closing = await client.next()
        assert isinstance(closing, ws.CloseConnection) and closing.code == 1000
        await asyncio.wait_for(seen["ended"].wait(), DEADLINE)
        await client.aclose()
    assert seen["disconnect"]["code"] == 1000
    scope = seen["scope"]
    assert (scope["type"], scope["scheme"], scope["path"]) == ("websocket", "ws", "/chat")
    assert scope["query_string"] == b"room=1" and scope["subprotocols"] == ["x", "chat"]
    assert "method" not in scope


async def test_a_websocket_the_application_closes_ends_with_its_code():
    from wshelpers import Client
    from wsproto import events as ws

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "last words"})
        await send({"type": "websocket.close", "code": 4001, "reason": "done"})
        with pytest.raises(OSError, match="the application closed it"):
            await send({"type": "websocket.send", "text": "too late"})

    async with _WsServer(app) as server:
        client, answer = await Client.connect(server.port)
        assert isinstance(answer, ws.AcceptConnection) and answer.subprotocol is None
        assert await client.message() == "last words"
        closing = await client.next()
        assert isinstance(closing, ws.CloseConnection)
        assert (closing.code, closing.reason) == (4001, "done")
        await client.aclose()


async def test_a_ping_after_the_applications_close_is_not_answered_and_breaks_nothing(caplog):
    # Once the server's close frame is out, wsproto cannot send a pong: the
    # ping is ignored, the client's answering close ends the WebSocket.
    from wshelpers import Client
    from wsproto import events as ws

    ended = asyncio.Event()

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4002})
        seen = await receive()
        assert seen["type"] == "websocket.disconnect" and seen["code"] == 4002, seen
        ended.set()

    with caplog.at_level(logging.ERROR):
        async with _WsServer(app) as server:
            client, _ = await Client.connect(server.port)
            closing = await client.next()
            assert isinstance(closing, ws.CloseConnection) and closing.code == 4002
            client.writer.write(b"\x89\x80\x00\x00\x00\x00")  # a masked, empty ping frame
            client.answer_close(closing)
            await asyncio.wait_for(ended.wait(), DEADLINE)
            assert await client.reader.read() == b""  # the server closed, sending no pong
            await client.aclose()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_websocket_outlives_the_keep_alive_and_head_timeouts():
    # Those timeouts are HTTP's: armed for the handshake request, they must
    # not close the WebSocket it became. Five pings at 0.05 s take longer
    # than both (0.1 s).
    from wshelpers import Client

    seen = {"ended": asyncio.Event()}
    app = _ws_echo_app(seen)
    async with _WsServer(
        app, timeout_keep_alive=0.1, timeout_request_head=0.1, ws_ping_interval=0.05
    ) as server:
        client, _ = await Client.connect(server.port)
        await client.wait_pings(5)
        client.send_text("still open")
        assert await client.message() == "still open"
        assert not seen["ended"].is_set()
        await client.aclose()


async def test_a_client_flooding_before_the_accept_is_disconnected():
    # Bytes that come before the handshake's answer wait for it; no more than
    # --ws-max-size of them.
    gate = asyncio.Event()
    seen = {}

    async def app(scope, receive, send):
        await receive()
        await gate.wait()
        try:
            await send({"type": "websocket.accept"})
        except OSError as exc:
            seen["accept"] = exc
        seen["next"] = await receive()

    async with _WsServer(app, ws_max_size=1000) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"GET / HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n"
            b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            + b"\x81\xfe\x04\x00"
            + b"m" * 2000  # frames the server may not read yet
        )
        assert await asyncio.wait_for(reader.read(), DEADLINE) == b""  # closed, unanswered
        writer.close()
        gate.set()
        await asyncio.wait_for(_until(lambda: "next" in seen), DEADLINE)
    assert seen["next"]["type"] == "websocket.disconnect"


@pytest.mark.parametrize(("when", "status"), [("close", 403), ("raise", 500), ("return", 500)])
async def test_a_websocket_refused_before_its_accept_gets_an_http_status(when, status):
    from wshelpers import Client
    from wsproto import events as ws

    async def app(scope, receive, send):
        await receive()
        if when == "close":
            await send({"type": "websocket.close"})
        elif when == "raise":
            raise ValueError("refused by a bug")

    async with _WsServer(app) as server:
        client, answer = await Client.connect(server.port)
        assert isinstance(answer, ws.RejectConnection), answer
        assert answer.status_code == status
        await client.aclose()


async def test_an_application_error_after_the_accept_closes_with_1011():
    from wshelpers import Client
    from wsproto import events as ws

    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        raise RuntimeError("broken on purpose")

    async with _WsServer(app) as server:
        client, _ = await Client.connect(server.port)
        client.send_text("go")
        closing = await client.next()
        assert isinstance(closing, ws.CloseConnection) and closing.code == 1011
        await client.aclose()


async def test_a_client_that_vanishes_gives_the_application_a_disconnect():

    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen)) as server:
        client = await _echoing_client(server)
        client.writer.transport.abort()  # no close frame
        await asyncio.wait_for(seen["ended"].wait(), DEADLINE)
    assert seen["disconnect"]["code"] == 1006


async def test_stopping_the_server_closes_its_websockets_with_1012():
    from wsproto import events as ws

    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen)) as server:
        client = await _echoing_client(server)
        server.state.stop()
        closing = await client.next()
        assert isinstance(closing, ws.CloseConnection) and closing.code == 1012
        client.answer_close(closing)
        await asyncio.wait_for(seen["ended"].wait(), DEADLINE)
        assert seen["disconnect"]["code"] == 1012
        await asyncio.wait_for(server.state.idle.wait(), DEADLINE)
        await client.aclose()


async def test_a_websocket_message_over_the_size_limit_closes_with_1009():
    from wshelpers import Client
    from wsproto import events as ws

    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen), ws_max_size=1000) as server:
        client, _ = await Client.connect(server.port)
        client.send_text("x" * 1000)  # at the limit: fine
        assert await client.message() == "x" * 1000
        client.send_bytes(b"y" * 1001)
        closing = await client.next()
        assert isinstance(closing, ws.CloseConnection) and closing.code == 1009
        await asyncio.wait_for(seen["ended"].wait(), DEADLINE)
        await client.aclose()
    assert seen["disconnect"]["code"] == 1009


async def test_a_client_that_answers_pings_stays_and_one_that_does_not_is_dropped():
    from wshelpers import Client

    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen), ws_ping_interval=0.02, ws_ping_timeout=5.0) as server:
        client, _ = await Client.connect(server.port)
        await client.wait_pings(3)  # each answered: the server pings again
        client.send_text("still here")
        assert await client.message() == "still here"
        assert not seen["ended"].is_set()
        await client.aclose()
    seen = {"ended": asyncio.Event()}
    async with _WsServer(_ws_echo_app(seen), ws_ping_interval=0.02, ws_ping_timeout=0.2) as server:
        client, _ = await Client.connect(server.port)  # then reads nothing: no pong
        await asyncio.wait_for(seen["ended"].wait(), DEADLINE)
        await client.aclose()
    assert seen["disconnect"] == {
        "type": "websocket.disconnect",
        "code": 1011,
        "reason": "keepalive ping timeout",
    }


async def test_a_plain_request_with_an_upgrade_header_of_another_protocol_is_http():
    async def app(scope, receive, send):
        body = scope["type"].encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async with _WsServer(app) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"GET / HTTP/1.1\r\nhost: x\r\nconnection: upgrade, close\r\nupgrade: h2c\r\n\r\n"
        )
        answer = await asyncio.wait_for(reader.read(), DEADLINE)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"http")


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)
