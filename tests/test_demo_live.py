"""`python -m aiosubinterp demo --serve`: the live page's server, a WebSocket client, Chromium.

The async tests run on asyncio and on uvloop (conftest.py): the app is
started in the test's loop on a loopback socket and driven with aiohttp's
WebSocket client. The last tests run the command itself in a child process:
stopped by SIGINT, and loaded by headless Chromium without a click, whose
screenshot shows the four canvases drawing while a second tab is told the
server is busy (set AIOSUBINTERP_LIVE_SCREENSHOT=path to keep the picture:
docs/live-demo.png is one).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import aiohelpers
import aiohttp
import pytest
from aiohttp import web
from browser import chromium as find_chromium
from browser import headless

from aiosubinterp import _core
from aiosubinterp.demo import circles as physics
from aiosubinterp.demo import live, zoo

# Seconds any one awaited condition may take: a backstop for a hang, never a
# measure. Generous: on a shared, loaded machine the process contender's
# spawned children alone may take many seconds to start.
DEADLINE = 60.0
ROOT = Path(__file__).resolve().parent.parent

# A test awaits up to six conditions in turn, each with its own DEADLINE.
pytestmark = pytest.mark.timeout(6 * DEADLINE)


@pytest.fixture(autouse=True, scope="module")
def _resource_tracker():
    # Spawning processes starts multiprocessing's resource tracker once per
    # process, and it keeps a pipe open: start it before the fd snapshot.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()


async def until(check) -> None:
    await aiohelpers.until(check, DEADLINE)


@contextlib.asynccontextmanager
async def serving(circles=300, workers=2):
    """The app on a bound loopback socket (no name resolution); yields (app, base URL)."""
    app = live.make_app(circles, workers)
    runner = web.AppRunner(app, shutdown_timeout=5)
    await runner.setup()
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
    except BaseException:
        sock.close()
        await runner.cleanup()
        raise
    try:
        yield app, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def page(url):
    """A WebSocket client as the page; yields (ws, hello)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=DEADLINE)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        async with client.ws_connect(f"{url}/ws") as ws:
            hello = await ws.receive_json(timeout=DEADLINE)
            assert hello["type"] == "hello"
            yield ws, hello


async def messages(ws, stop):
    """Receive until ``stop(kind, message)`` is true; returns (frames, json messages)."""
    frames, texts = [], []
    deadline = time.monotonic() + DEADLINE
    while True:
        msg = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
        if msg.type == aiohttp.WSMsgType.BINARY:
            frames.append(live.parse_frame(msg.data))
            item = ("frame", frames[-1])
        elif msg.type == aiohttp.WSMsgType.TEXT:
            texts.append(json.loads(msg.data))
            item = ("json", texts[-1])
        else:
            raise AssertionError(f"WebSocket ended: {msg}")
        if stop(*item):
            return frames, texts


def float32_triples(circles):
    """(x, y, r) rounded to float32 as the wire carries them, sorted."""
    values = struct.unpack(
        f"<{3 * len(circles)}f",
        struct.pack(f"<{3 * len(circles)}f", *(v for c in circles for v in (c[1], c[2], c[5]))),
    )
    return sorted(values[i : i + 3] for i in range(0, len(values), 3))


async def test_every_contender_streams_the_same_physics():
    n, workers, frames = 300, 2, 40
    params, initial = physics.initial_state(n, seed=3)
    width, height = params
    async with serving() as (_, url), page(url) as (ws, hello):
        assert hello["contenders"] == list(zoo.CONTENDERS)
        await ws.send_json(
            {"op": "start", "circles": n, "workers": workers, "frames": frames, "seed": 3}
        )
        got, texts = await messages(ws, lambda kind, m: kind == "json" and m["type"] == "finished")
        started = texts[0]
        assert started["type"] == "started"
        assert (started["width"], started["height"]) == params
        last = {}
        # Frame 0 first, on every canvas at once: the initial circles.
        assert [f[0] for f in got[:4]] == [0, 1, 2, 3] and {f[3] for f in got[:4]} == {0}
        for index, flags, w, k, pos in got:
            assert w == workers and len(pos) == n
            assert 0 <= k <= frames
            for x, y, r in pos:
                assert physics.R_MIN - 1e-4 <= r <= physics.R_MAX + 1e-4
                assert r - 1e-3 <= x <= width - r + 1e-3 and r - 1e-3 <= y <= height - r + 1e-3
            if flags & live.LAST:
                assert k == frames
                last[index] = sorted(pos)
        by_contender = {}
        for index, _, _, k, _ in got:  # each contender's frames in increasing order
            by_contender.setdefault(index, []).append(k)
        assert sorted(by_contender) == [0, 1, 2, 3]
        for ks in by_contender.values():
            assert ks == sorted(set(ks))
        # Every frame received, whoever computed it: the reference's positions at that frame.
        at: dict[int, list] = {}
        for _, _, _, k, pos in got:
            at.setdefault(k, []).append(sorted(pos))
        state = list(initial)
        assert all(pos == float32_triples(state) for pos in at[0])
        for k in range(1, frames + 1):  # ... and those of the single-threaded reference
            state = physics.step_frames(state, params, 1)
            for pos in at.get(k, []):
                assert pos == float32_triples(state), f"frame {k}"
        # The last frame of every contender: bit for bit the single-threaded reference.
        expected = float32_triples(zoo.reference_result(initial, params, frames))
        assert sorted(last) == [0, 1, 2, 3]
        for index, pos in last.items():
            assert pos == expected, zoo.CONTENDERS[index]
        final = texts[-2]
        assert final["type"] == "stats"
        for c in final["contenders"]:
            assert c["state"] == "done" and c["frame"] == frames and c["fps"] > 0, c
            assert c["speedup"] is not None
        single = next(c for c in final["contenders"] if c["name"] == "single")
        assert single["speedup"] == 1.0


async def test_every_frame_fps_of_each_contender_alone():
    # The demo command's every-frame column: each contender alone, every frame to main.
    params, initial = physics.initial_state(300, seed=5)
    expected = float32_triples(zoo.reference_result(initial, params, 20))
    for name in zoo.CONTENDERS:
        fps, last = await zoo.run_every_frame(name, initial, params, 20, 2)
        assert fps > 0, name
        assert last == expected, name
    assert zoo.float32_positions(zoo.reference_result(initial, params, 20)) == expected


async def test_stop_restart_and_page_closed_stop_everything():
    async with serving() as (app, url):
        async with page(url) as (ws, _):
            for stride in (2, 1):  # the second start replaces the first run
                await ws.send_json({"op": "start", "circles": 300, "workers": 2, "stride": stride})
                seen: dict[int, int] = {}

                def enough(kind, m, seen=seen):
                    if kind == "frame":
                        seen[m[0]] = seen.get(m[0], 0) + 1
                    return len(seen) == 4 and min(seen.values()) >= 3

                frames, _ = await messages(ws, enough)
                if stride == 2:  # every other frame, and the last frames are not flagged
                    assert all(k % 2 == 0 and not flags & live.LAST for _, flags, _, k, _ in frames)
            (session,) = app[live.SESSIONS]
            runs = list(session.runs)
            _, texts = await messages(
                ws,
                lambda kind, m: (
                    kind == "json"
                    and m["type"] == "stats"
                    and all(c["pids"] or c["name"] != "processes" for c in m["contenders"])
                ),
            )
            pids = next(c["pids"] for c in texts[-1]["contenders"] if c["name"] == "processes")
            assert len(pids) == 2
            await ws.send_json({"op": "stop"})
            _, texts = await messages(ws, lambda kind, m: kind == "json" and m["type"] == "stopped")
            assert {c["state"] for c in texts[-2]["contenders"]} == {"stopped"}
            assert all(run.task.done() for run in runs)
            for pid in pids:  # reaped: no such process
                assert not Path(f"/proc/{pid}").exists()
            assert not _core.live_workers()

            await ws.send_json({"op": "start", "circles": 300, "workers": 2})
            await messages(ws, lambda kind, m: kind == "frame" and m[3] >= 5)
            runs = list(session.runs)
        # The page went away mid-run: its contenders stop, the session is gone.
        await until(lambda: not app[live.SESSIONS] and all(run.task.done() for run in runs))
        await until(lambda: not _core.live_workers())
        assert {run.state for run in runs} == {"stopped"}


async def test_one_run_at_a_time_whatever_the_number_of_pages():
    # A second page's automatic start is refused while the first page's run goes on;
    # its Start takes the run over; the page that lost it is told why, and can take it back.
    def all_four_computing():
        """A stop for messages(): a computed frame (not frame 0) of each contender arrived."""
        seen = set()

        def stop(kind, m):
            if kind == "frame" and m[3] >= 1:
                seen.add(m[0])
            return len(seen) == 4

        return stop

    async with serving() as (app, url), page(url) as (first, _), page(url) as (second, _):
        sessions = {}
        await first.send_json({"op": "start", "auto": True})
        await messages(first, all_four_computing())
        (sessions["first"],) = [s for s in app[live.SESSIONS] if s.running]

        await second.send_json({"op": "start", "auto": True})
        _, texts = await messages(second, lambda kind, m: kind == "json")
        assert texts == [{"type": "busy", "message": live.BUSY}]
        (sessions["second"],) = app[live.SESSIONS] - {sessions["first"]}
        assert sessions["first"].running and not sessions["second"].runs
        # A refused setting stops nothing.
        await second.send_json({"op": "start", "circles": 0})
        reply = await second.receive_json(timeout=DEADLINE)
        assert reply["type"] == "error" and sessions["first"].running
        # The first page goes on: new frames of every contender.
        await messages(first, all_four_computing())

        for taker, loser in [("second", "first"), ("first", "second")]:
            ws_taker, ws_loser = {"first": (first, second), "second": (second, first)}[taker]
            old_runs = list(sessions[loser].runs)
            await ws_taker.send_json({"op": "start"})  # Start clicked: takes the run over
            _, texts = await messages(
                ws_loser, lambda kind, m: kind == "json" and m["type"] == "stopped"
            )
            assert texts[-1]["reason"] == live.TAKEN_OVER
            assert all(run.task.done() and run.state == "stopped" for run in old_runs)
            await messages(ws_taker, all_four_computing())
            assert [s.running for s in (sessions[taker], sessions[loser])] == [True, False]

        # A page whose run has ended holds nothing back: the other page's automatic start runs.
        await first.send_json({"op": "stop"})
        await messages(first, lambda kind, m: kind == "json" and m["type"] == "stopped")
        await second.send_json({"op": "start", "auto": True, "frames": 3})
        await messages(second, lambda kind, m: kind == "json" and m["type"] == "finished")
        await first.send_json({"op": "start", "auto": True, "frames": 3})
        await messages(first, lambda kind, m: kind == "json" and m["type"] == "finished")


async def test_page_and_refused_settings():
    async with serving(circles=1234, workers=2) as (_, url):
        async with aiohttp.ClientSession() as client, client.get(url + "/") as r:
            assert r.status == 200 and r.content_type == "text/html"
            text = await r.text()
            assert "<canvas" in text and "new WebSocket" in text
        async with page(url) as (ws, hello):
            assert (hello["circles"], hello["workers"]) == (1234, 2)
            for cmd, words in [
                ({"op": "start", "circles": 0}, "circles must be an integer"),
                ({"op": "start", "circles": 100, "workers": 40}, "narrower"),
                ({"op": "start", "contenders": ["gpu"]}, "contenders must be"),
                ({"op": "dance"}, "unknown op"),
                ([1, 2], "JSON object"),
            ]:
                await ws.send_json(cmd)
                reply = await ws.receive_json(timeout=DEADLINE)
                assert reply["type"] == "error" and words in reply["message"], reply
            # One contender alone needs no strips wide enough for 40 workers.
            await ws.send_json(
                {
                    "op": "start",
                    "circles": 100,
                    "workers": 40,
                    "frames": 3,
                    "contenders": ["single"],
                }
            )
            frames, _ = await messages(
                ws, lambda kind, m: kind == "json" and m["type"] == "finished"
            )
            assert {f[0] for f in frames} == {0} and frames[-1][3] == 3


# -- the command in a child process ------------------------------------------------------


@contextlib.contextmanager
def command(*args):
    """`python -m aiosubinterp demo --serve --port 0 ...`; yields (process, base URL)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiosubinterp", "demo", "--serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        assert "open http://127.0.0.1:" in line, line + proc.stdout.read()
        yield proc, line.split("open ", 1)[1].split()[0].rstrip("/")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_the_command_serves_and_stops_on_ctrl_c():
    with command("--circles", "300", "--workers", "2") as (proc, url):

        async def drive():
            async with page(url) as (ws, hello):
                assert hello["loop"] in ("uvloop", "asyncio")
                await ws.send_json({"op": "start"})
                seen = set()  # a computed frame of each (frame 0 comes at once)
                await messages(
                    ws,
                    lambda kind, m: (
                        kind == "frame" and m[3] >= 1 and (seen.add(m[0]) or len(seen) == 4)
                    ),
                )
                _, texts = await messages(
                    ws, lambda kind, m: kind == "json" and m["type"] == "stats"
                )
                return next(c["pids"] for c in texts[-1]["contenders"] if c["name"] == "processes")

        pids = asyncio.run(drive())
        assert len(pids) == 2
        proc.send_signal(signal.SIGINT)  # with the page still open: the contenders run
        out, _ = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, out
    assert "stopped: every contender ended" in out, out
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()


def test_the_command_without_aiohttp_or_with_a_busy_port():
    code = (
        "import sys; sys.modules['aiohttp'] = None; "
        "from aiosubinterp.__main__ import main; sys.exit(main(['demo', '--serve']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=DEADLINE
    )
    assert proc.returncode == 2, proc.stderr
    assert "needs aiohttp" in proc.stderr and "aiosubinterp[demo]" in proc.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "aiosubinterp",
                "demo",
                "--serve",
                "--port",
                str(busy.getsockname()[1]),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=DEADLINE,
        )
    assert proc.returncode == 1, proc.stderr
    assert "cannot listen on 127.0.0.1:" in proc.stderr and "--port" in proc.stderr
    assert "Traceback" not in proc.stderr


# The page's own state, as the page reports it in its DOM (live.html: data-ready, data-state,
# data-drawn), and where its canvases are. JSON.stringify leaves out what is still undefined.
PAGE_STATE = """JSON.stringify({
  ready: document.body.dataset.ready, state: document.body.dataset.state,
  drawn: JSON.parse(document.body.dataset.drawn || "{}"), title: document.title,
  notice: document.getElementById("notice").textContent,
  canvases: [...document.querySelectorAll("canvas")].map((c) => {
    const r = c.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom].map(Math.round);
  })})"""


@contextlib.asynccontextmanager
async def _devtools_page(client, target):
    """One Chromium page over the DevTools protocol; yields call(method, **params)."""
    async with client.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as cdp:
        ids = iter(range(1, 10**6))

        async def call(method, **params):
            i = next(ids)
            await cdp.send_json({"id": i, "method": method, "params": params})
            while True:
                reply = await cdp.receive_json(timeout=DEADLINE)
                if reply.get("id") == i:
                    assert "error" not in reply, reply
                    return reply["result"]

        yield call


async def _page_state_until(call, done, what) -> dict:
    """Evaluate PAGE_STATE until the page has loaded and done(state) is true; the deadline
    is a backstop for a hang."""
    deadline = time.monotonic() + DEADLINE * 2
    while True:
        result = await call("Runtime.evaluate", expression=PAGE_STATE, returnByValue=True)
        # No value: the page is not loaded yet (an exception, described in the result).
        state = json.loads(result["result"].get("value") or "{}")
        if state and done(state):
            return state
        assert time.monotonic() < deadline, f"{what}: {state}"
        await asyncio.sleep(0.25)


async def _open_twice(port_file: Path, url: str, shot: Path) -> tuple[dict, dict, dict]:
    """The page Chromium opened, until it draws everything; a second tab of the same URL;
    then a screenshot of the first. Returns the states: first, second, first again."""
    await until(port_file.exists)
    await until(lambda: len(port_file.read_text().split()) >= 2)
    devtools = f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    timeout = aiohttp.ClientTimeout(total=DEADLINE * 2)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        targets: list = []
        deadline = time.monotonic() + DEADLINE
        while not any(t["type"] == "page" for t in targets):
            assert time.monotonic() < deadline, "no page target in Chromium"
            async with client.get(f"{devtools}/json/list") as r:
                targets = await r.json()
            await asyncio.sleep(0.1)
        target = next(t for t in targets if t["type"] == "page")
        async with _devtools_page(client, target) as call:
            # The window's size less its (headless) frame: make the viewport the whole of it.
            await call(
                "Emulation.setDeviceMetricsOverride",
                width=1400,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            first = await _page_state_until(
                call, lambda s: s.get("ready") == "1", "the page never drew everything"
            )
            # A second tab: no second run; it says so, and the first one goes on drawing.
            async with client.put(f"{devtools}/json/new?{url}/") as r:
                tab = await r.json()
            async with _devtools_page(client, tab) as call2:
                second = await _page_state_until(
                    call2,
                    lambda s: s.get("state") is not None,
                    "the second tab never started nor was refused",
                )
            async with client.get(f"{devtools}/json/close/{tab['id']}") as r:
                assert r.status == 200
            before = first["drawn"]
            again = await _page_state_until(
                call,
                lambda s: all(s["drawn"][n] > before[n] for n in before),
                "the first page stopped drawing",
            )
            await asyncio.sleep(1.5)  # a few more stats lines: settled FPS figures on the picture
            data = await call("Page.captureScreenshot", format="png")
            shot.write_bytes(base64.b64decode(data["data"]))
            return first, second, again


def test_headless_chromium_opens_the_page_and_it_runs_at_once(tmp_path):
    # No click, no query string: the page starts its run and every canvas draws; a second
    # tab of the same page starts nothing (busy) and the first one goes on.
    from PIL import Image

    from aiosubinterp.demo import render

    browser = find_chromium()
    with command("--workers", "2", "--circles", "1500") as (server, url):
        profile = tmp_path / "profile"
        log = open(tmp_path / "chromium.log", "wb")  # closed below
        chromium = subprocess.Popen(
            [
                *headless(browser, profile),
                "--remote-debugging-port=0",
                "--window-size=1400,900",
                f"{url}/",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        shot = tmp_path / "live-demo.png"
        try:
            first, second, again = asyncio.run(
                _open_twice(profile / "DevToolsActivePort", url, shot)
            )
        finally:
            chromium.terminate()
            try:
                chromium.wait(timeout=10)
            except subprocess.TimeoutExpired:
                chromium.kill()
                chromium.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(chromium.pid, signal.SIGKILL)  # its helpers, in its own session
            log.close()
        server.send_signal(signal.SIGINT)  # Chromium closed the page already
        out, _ = server.communicate(timeout=DEADLINE)
    assert server.returncode == 0, out
    assert first["state"] == "running", first
    assert sorted(first["drawn"]) == sorted(zoo.CONTENDERS), first
    assert min(first["drawn"].values()) >= 10, first
    assert first["title"] == "aiosubinterp live: all drawing"
    assert second["state"] == "busy" and second["notice"] == live.BUSY, second
    assert again["state"] == "running" and again["notice"] == "", again
    keep = os.environ.get("AIOSUBINTERP_LIVE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
    with Image.open(shot) as image:
        assert image.size == (1400, 900)
        rgb = image.convert("RGB")
        assert len(again["canvases"]) == 4
        for box in again["canvases"]:
            # Each canvas: circles in the first two strips' colours (render.py's palette,
            # as the page draws them).
            colours = {c for _, c in rgb.crop(box).getcolors(maxcolors=1 << 20)}
            for region in (0, 1):
                assert render.PALETTE[render.region_colour(region)] in colours, box
