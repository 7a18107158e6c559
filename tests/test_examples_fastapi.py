"""examples/fastapi_app.py in a child process (uvicorn, uvloop, httptools), over real HTTP.

The server always runs in a child process: its interpreters load private
copies of pydantic-core (``fallback="copy"``), and nothing in this test
process may depend on a copy loading (tests/test_private_copies.py); this
process does not even import fastapi or pydantic. Each test ends by
stopping the server with a signal and checking that it exited with 0 and
logged no error. The client (aiohttp) runs on asyncio and on uvloop
(conftest.py); the server always runs uvloop.

To hold requests in flight, a test starts the app through a few lines
(``HELD``) that swap the app's work module for one whose ``score`` keeps
the worker's CPU busy until a pipe the test holds becomes readable
(``workfuncs.busy_until_readable``): what happens meanwhile is asserted
through the server's ``/stats`` and its log, never through timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import aiohttp
import pytest
from aiohelpers import until
from httphelpers import check_stats_mode, free_port, get_json

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TESTS = ROOT / "tests"
DEADLINE = 30.0  # seconds any awaited condition may take: a backstop (a loaded machine)
READY = "Uvicorn running on"  # uvicorn logs it once it listens
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
MISSING = [m for m in ("fastapi", "pydantic", "uvicorn") if importlib.util.find_spec(m) is None]

needs_fastapi = pytest.mark.skipif(
    bool(MISSING) or FREE_THREADED,
    reason=f"{', '.join(MISSING)} not installed (the `copies` extra has fastapi and pydantic; "
    "the free-threaded venv goes without)"
    if MISSING
    else "free-threaded build: fallback='copy' is refused there, and pydantic-core has no "
    "wheels for it",
)
# The app refuses --mode interpreters on 3.12 (pydantic in several interpreters'
# copies corrupts the heap there): test_interpreters_mode_is_refused_on_3_12.
ON_3_12 = sys.version_info[:2] == (3, 12)
needs_interpreters = pytest.mark.skipif(
    ON_3_12,
    reason="examples/fastapi_app.py refuses --mode interpreters on CPython 3.12 "
    "(pydantic models built in several interpreters' copies of pydantic-core "
    "abort the process there); the other modes are tested",
)
pytestmark = pytest.mark.timeout(5 * DEADLINE)  # a test awaits several conditions

# The app with /score held: its work module swapped (in the child) for one
# whose score() computes until fd argv[1] is readable, then scores.
HELD = """
import functools, sys, types
import fastapi_app, workfuncs
fd = int(sys.argv.pop(1))
real = fastapi_app.work
fastapi_app.work = types.SimpleNamespace(**vars(real))
fastapi_app.work.score = functools.partial(workfuncs.busy_until_readable, fd, real.score)
sys.exit(fastapi_app.main(sys.argv[1:]))
"""

BATCH = {
    "id": 7,
    "items": [
        {"name": "small", "n": 1000, "weight": 2.5},
        {"name": "big", "n": 20_000},
        {"name": "none", "n": 1, "weight": 3},
    ],
}


def primes_below(n: int) -> int:
    """How many primes lie below n (a sieve, here in the test)."""
    sieve = bytearray([1]) * max(n, 2)
    sieve[:2] = b"\0\0"
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytes(len(range(i * i, n, i)))
    return sum(sieve[:n])


def expected(batch: dict) -> dict:
    """What /score answers for batch, less where it ran (computed here, independently)."""
    items = [
        {
            "name": it["name"],
            "primes": primes_below(it["n"]),
            "score": primes_below(it["n"]) * float(it.get("weight", 1.0)),
        }
        for it in batch["items"]
    ]
    best = max(items, key=lambda it: it["score"])["name"]
    return {
        "id": batch["id"],
        "items": items,
        "total": sum(it["score"] for it in items),
        "best": best,
    }


class Server:
    """examples/fastapi_app.py in a child process on a free loopback port, its output in a file."""

    def __init__(self, tmp_path: Path, mode: str, hold_fd: int | None = None) -> None:
        self.port = free_port()
        # Appending: the child writes at the end whatever offset output() left
        # (the file description is shared; with "w+" a seek(0) there made the
        # child overwrite the log's first lines).
        self.log = open(tmp_path / "server.log", "a+")  # closed by close()
        args = ["--port", str(self.port), "--workers", "2", "--mode", mode]
        if hold_fd is None:
            cmd = [sys.executable, str(EXAMPLES / "fastapi_app.py"), *args]
        else:
            cmd = [sys.executable, "-c", HELD, str(hold_fd), *args]
        # This tree's aiosubinterp, examples/ and tests/ (HELD's imports);
        # the pools copy sys.path to their workers.
        path = os.pathsep.join(map(str, (ROOT, EXAMPLES, TESTS)))
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=str(tmp_path),
            env={**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"},
            pass_fds=() if hold_fd is None else (hold_fd,),
        )
        self.base = f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    async def started(self) -> None:
        await until(lambda: READY in self.output() or self.proc.poll() is not None, DEADLINE)
        assert self.proc.poll() is None, f"the server exited at startup:\n{self.output()}"

    async def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        """Send sig, then exited()."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return await self.exited()

    async def exited(self) -> tuple[int, str]:
        """Wait (on the loop) until the server exits: (exit code, its output)."""
        await until(lambda: self.proc.poll() is not None, DEADLINE)
        return self.proc.returncode, self.output()

    def close(self) -> None:
        if self.proc.poll() is None:  # a failed test: no clean stop to wait for
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def assert_clean_exit(code: int, output: str) -> None:
    assert code == 0, output
    assert "Application shutdown complete." in output, output
    assert "ERROR" not in output and "Traceback" not in output, output


@contextlib.asynccontextmanager
async def serving(tmp_path, mode="interpreters", hold_fd=None, sig=signal.SIGINT):
    """(server, aiohttp client); on a normal exit, stops it with sig: exit 0, no error."""
    server = Server(tmp_path, mode, hold_fd)
    try:
        await server.started()
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with aiohttp.ClientSession(server.base, timeout=timeout) as client:
            yield server, client
        assert_clean_exit(*await server.stop(sig))
    finally:
        server.close()


async def post_score(client: aiohttp.ClientSession, body: bytes | dict) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with client.post("/score", data=data, headers={"Content-Type": "application/json"}) as r:
        assert r.headers["Content-Type"] == "application/json"
        return r.status, await r.json()


async def stats_until(client: aiohttp.ClientSession, check) -> dict:
    """GET /stats until check(its cpu_pool) is true; returns that cpu_pool (backstop: DEADLINE)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not check(pool := (await get_json(client, "/stats"))["cpu_pool"]):
        assert asyncio.get_running_loop().time() < deadline, f"/stats never got there: {pool}"
        await asyncio.sleep(0.01)
    return pool


def where(answer: dict) -> tuple[int, int]:
    """(interpreter_id, pid) of a /score answer, removed from it."""
    return answer.pop("interpreter_id"), answer.pop("pid")


@needs_fastapi
@needs_interpreters
async def test_scored_in_interpreters_from_private_copies(tmp_path):
    async with serving(tmp_path) as (server, client):
        answers = await asyncio.gather(*(post_score(client, BATCH) for _ in range(6)))
        ids = set()
        for status, answer in answers:
            assert status == 200, answer
            interpreter_id, pid = where(answer)
            # Validated and computed in a worker interpreter of the server's process.
            assert interpreter_id != 0 and pid == server.proc.pid
            ids.add(interpreter_id)
            assert answer == expected(BATCH)
        assert len(ids) <= 2
        described = await get_json(client, "/stats")
        assert described["mode"] == "interpreters"
        pool = described["cpu_pool"]
        assert pool["size"] == 2 and pool["completed"] >= 6
        # pydantic-core came from a private copy: one per interpreter that imported it.
        assert 1 <= pool["copies"] <= 2 and pool["copies_bytes"] > 0, pool
        async with client.get("/ping") as r:
            assert r.status == 200 and await r.text() == "pong\n"
        schema = await get_json(client, "/openapi.json")
        assert schema["paths"]["/score"]["post"]["requestBody"]["content"]["application/json"][
            "schema"
        ] == {"$ref": "#/components/schemas/Batch"}
        assert {"Batch", "Item", "Scored"} <= set(schema["components"]["schemas"])


@needs_fastapi
@needs_interpreters
async def test_an_invalid_body_gets_422_and_pydantics_errors(tmp_path):
    async with serving(tmp_path) as (_, client):
        status, answer = await post_score(
            client, {"id": "seven", "items": [{"name": "", "n": -1, "colour": "red"}]}
        )
        assert status == 422
        assert [(e["type"], e["loc"]) for e in answer["detail"]] == [
            ("int_parsing", ["id"]),
            ("string_too_short", ["items", 0, "name"]),
            ("greater_than_equal", ["items", 0, "n"]),
            ("extra_forbidden", ["items", 0, "colour"]),
        ]
        assert answer["detail"][0]["input"] == "seven"
        assert all(e["msg"] for e in answer["detail"])
        status, answer = await post_score(client, b'{"id": 1, "items": [')
        assert status == 422 and [e["type"] for e in answer["detail"]] == ["json_invalid"]
        status, answer = await post_score(client, {"id": 1, "items": []})
        assert status == 422 and [e["type"] for e in answer["detail"]] == ["too_short"]
        # The model's own validator: the work one request may ask for is bounded.
        status, answer = await post_score(
            client, {"id": 1, "items": [{"name": "a", "n": 10**7}, {"name": "b", "n": 1}]}
        )
        assert status == 422 and [e["type"] for e in answer["detail"]] == ["value_error"]
        assert "add up to 10000001" in answer["detail"][0]["msg"]
        async with client.post("/score", data=io.BytesIO(b"x" * ((1 << 20) + 1))) as r:
            assert r.status == 413
        # Every failure was answered; the workers still score.
        status, answer = await post_score(client, BATCH)
        assert status == 200 and where(answer)[0] != 0


@needs_fastapi
@pytest.mark.parametrize("mode", ["processes", "to_thread", "inline"])
async def test_scored_in_the_other_modes(tmp_path, mode):
    # The modes bench_http.py --app fastapi compares with the default (interpreters).
    # SIGTERM stops the server here (SIGINT elsewhere): both exit with 0.
    sig = signal.SIGTERM if mode == "processes" else signal.SIGINT
    async with serving(tmp_path, mode, sig=sig) as (server, client):
        answers = await asyncio.gather(*(post_score(client, BATCH) for _ in range(4)))
        for status, answer in answers:
            assert status == 200, answer
            interpreter_id, pid = where(answer)
            assert interpreter_id == 0  # a process's main interpreter, or the server's
            if mode == "processes":
                assert pid != server.proc.pid
            else:
                assert pid == server.proc.pid
            assert answer == expected(BATCH)
        status, answer = await post_score(client, {"id": 1})
        assert status == 422 and answer["detail"][0]["type"] == "missing"
        await check_stats_mode(client, mode)


@needs_fastapi
@needs_interpreters
async def test_ping_answers_while_every_worker_validates(tmp_path, pipe):
    r, w = pipe
    async with serving(tmp_path, hold_fd=r) as (_, client):
        # 4 requests on 2 interpreters: two compute until released, two wait in the queue.
        heavy = [asyncio.create_task(post_score(client, BATCH)) for _ in range(4)]
        try:
            await stats_until(client, lambda p: (p["running"], p["queued"]) == (2, 2))
            for _ in range(5):
                async with client.get("/ping") as resp:
                    assert await resp.text() == "pong\n"
            # The pings were answered while every worker computed and the rest waited.
            assert not any(t.done() for t in heavy)
            pool = (await get_json(client, "/stats"))["cpu_pool"]
            assert (pool["running"], pool["queued"]) == (2, 2)
        finally:
            os.write(w, b"go")  # nobody reads it: readable from now on
        for status, answer in await asyncio.gather(*heavy):
            assert status == 200 and where(answer)[0] != 0
            assert answer == expected(BATCH)


@needs_fastapi
@needs_interpreters
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_stops_it_after_the_request_in_flight(tmp_path, pipe, sig):
    # uvicorn stops accepting connections, waits for the response in flight,
    # then the lifespan closes the pool; the process exits with 0 (SIGTERM too).
    r, w = pipe
    server = Server(tmp_path, "interpreters", hold_fd=r)
    try:
        await server.started()
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with aiohttp.ClientSession(server.base, timeout=timeout) as client:
            held = asyncio.create_task(post_score(client, BATCH))
            await stats_until(client, lambda p: p["running"] == 1)
            server.proc.send_signal(sig)
            await until(lambda: "Waiting for connections to close" in server.output(), DEADLINE)
            assert not held.done() and server.proc.poll() is None
            os.write(w, b"go")
            status, answer = await held
            assert status == 200 and where(answer)[0] != 0
            assert answer == expected(BATCH)
        code, output = await server.exited()  # a second signal would force the exit
        assert_clean_exit(code, output)
        assert "event loop: uvloop, HTTP parser: httptools" in output, output
    finally:
        server.close()


def test_without_fastapi_it_says_what_to_install(tmp_path):
    # Runs everywhere, the free-threaded venv included (which has no pydantic).
    blocked = "import runpy, sys; sys.modules['fastapi'] = None; sys.path.insert(0, sys.argv[1]); "
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked + "runpy.run_path(sys.argv[2], run_name='__main__')",
            str(EXAMPLES),
            str(EXAMPLES / "fastapi_app.py"),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    missing = "pydantic" if "pydantic" in MISSING else "fastapi"
    assert f"examples/fastapi_app.py needs {missing}, which is not installed" in proc.stderr
    assert "pip install fastapi" in proc.stderr and "Traceback" not in proc.stderr


@needs_fastapi
@pytest.mark.skipif(not ON_3_12, reason="the refusal is for CPython 3.12")
def test_interpreters_mode_is_refused_on_3_12(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "fastapi_app.py"), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--mode interpreters is refused here: on CPython 3.12" in proc.stderr
    assert "use CPython 3.13+, or --mode processes" in proc.stderr
