"""Web apps (aiohttp, Starlette, FastAPI) under load from ``wrk``: light latency, heavy req/s, MB/s.

The servers are the examples themselves: ``examples/aiohttp_app.py`` (aiohttp
on uvloop, the app the README shows), ``examples/starlette_app.py``
(Starlette under uvicorn, uvloop and httptools) and ``examples/fastapi_app.py``
(FastAPI under uvicorn, uvloop and httptools; pydantic validates in the
workers), ``--app aiohttp|starlette|fastapi|both|all`` (default both:
aiohttp and Starlette; all: the three). Each is started once per contender
and round in a process of its own on a loopback port, with ``--mode`` saying
where its heavy endpoint computes: ``/primes`` counts primes (pure Python,
``n`` calibrated to ~10 ms in the parent); FastAPI's ``POST /score`` gets a
JSON body of 4 items, which pydantic validates (``model_validate_json``)
and whose primes it counts (the items' ``n`` calibrated to ~10 ms of the
whole, validation included), and answers ``model_dump_json``. A contender is
an app and a mode, named ``APP/MODE`` (``aiohttp/to_thread``,
``fastapi/aiosubinterp``, ...); the modes:

  inline                  on the event loop (every other request waits meanwhile)
  to_thread               ``asyncio.to_thread``, a default executor of 2 threads
  aiosubinterp-processes  ``aiosubinterp.ProcessPool(2)``
  aiosubinterp            ``aiosubinterp.InterpreterPool(2)`` (FastAPI's with
                          ``fallback="copy"``: a private copy of pydantic-core in
                          each interpreter; not on CPython 3.12, where the app
                          refuses it, nor on free-threaded builds)

Per contender, after a short warm-up of the heavy endpoint:

1. load: for ``seconds`` s, one ``wrk`` keeps the heavy endpoint busy
   (``heavy_connections`` connections, back to back; FastAPI's as POSTs of
   the body, set by ``_wrk_report.lua``) while a second ``wrk --latency``
   asks ``/ping`` on 1 connection, one request every ``light_delay_ms`` ms
   (a health check). Reported: ``/ping``'s p50/p99/max (exact, from wrk's
   histogram through the ``done()`` hook of ``_wrk_report.lua``) and the
   heavy endpoint's requests/s.
2. streaming (aiohttp's and Starlette's InterpreterPool contenders only: ``/stream`` is produced
   in an interpreter of the app's stream pool in every mode): ``wrk`` reads
   ``/stream?count=..&size=1 MiB`` for ``stream_seconds`` s on
   ``stream_connections`` connections; each 1 MiB chunk crosses
   ``open_channel(2)`` from the producer to the handler (a view, not a copy,
   from 64 KiB up). Reported: MiB/s of response bytes (wrk's ``Transfer/sec``;
   1 MiB = 2**20 bytes, what wrk prints as "MB").

Targets (one run, 2 cores, aiohttp on uvloop; each app's are
computed against its own to_thread, Starlette's and FastAPI's printed too):
  /ping p99 while the heavy endpoint is loaded <= 0.1 x to_thread's;
  heavy endpoint req/s >= 1.4 x to_thread's;
  streaming from an interpreter >= 200 MB/s to a loopback client (measured in MiB/s:
  stricter; aiohttp and Starlette).

wrk runs on the same 2 cores as the server (it is light: ~100-200 heavy
requests/s and a paced ping), and its CPU time counts in CPU/wall.

``wrk`` must be on PATH. If it is not and this runs as root where
``apt-get`` exists, the script installs Debian's package (``apt-get install
-y wrk``) and says so; otherwise it exits with status 1, saying how to install it.

A chart (matplotlib, the ``bench`` extra) of the three figures with the
targets drawn goes to ``bench_http.png`` in the temporary directory
(``--chart PATH`` elsewhere, ``--chart ''`` for none; the README's picture
is ``--chart docs/http_bench.png``).

Run: ``python benchmarks/bench_http.py [--app aiohttp|starlette|fastapi|both|all] [--quick]
[--json] [--chart PATH]`` (``--loop asyncio`` serves the aiohttp app on asyncio's loop
instead of uvloop; the Starlette and FastAPI apps always ask uvicorn for uvloop).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

import _contenders
import _harness
import _machine
import _report
import _stats

MODES = {  # contender's kind -> the app's --mode
    "inline": "inline",
    "to_thread": "to_thread",
    "aiosubinterp-processes": "processes",
    "aiosubinterp": "interpreters",
}
LABELS = {  # for the chart
    "inline": "inline (on the loop)",
    "to_thread": "asyncio.to_thread (2 threads)",
    "aiosubinterp-processes": "aiosubinterp ProcessPool(2)",
    "aiosubinterp": "aiosubinterp InterpreterPool(2)",
}
STREAMER = "aiosubinterp"  # the kind of contender that also measures /stream
ANCHOR = "to_thread"
APPS = {  # --app -> the example it serves, and what it prints once it listens
    "aiohttp": (os.path.join(_harness.REPO, "examples", "aiohttp_app.py"), "Running on"),
    "starlette": (
        os.path.join(_harness.REPO, "examples", "starlette_app.py"),
        "Uvicorn running on",
    ),
    "fastapi": (os.path.join(_harness.REPO, "examples", "fastapi_app.py"), "Uvicorn running on"),
}
APP_CHOICES = {"both": ("aiohttp", "starlette"), "all": tuple(APPS)}  # --app groups
APP_LABELS = {
    "aiohttp": "aiohttp on uvloop",
    "starlette": "Starlette under uvicorn (uvloop, httptools)",
    "fastapi": "FastAPI under uvicorn (uvloop, httptools)",
}
HEAVY = {"aiohttp": "/primes", "starlette": "/primes", "fastapi": "/score"}  # the CPU route
STREAMING = ("aiohttp", "starlette")  # the apps with /stream (and --max-streams)
SCORE_ITEMS = 4  # items of FastAPI's /score body
APP = APPS["aiohttp"][0]
LUA = os.path.join(_harness.HERE, "_wrk_report.lua")
WRK_MARK = "@@wrk "

# The targets (each app against its own to_thread).
LIGHT_P99_MAX = 0.1  # x to_thread's p99
HEAVY_RPS_MIN = 1.4  # x to_thread's req/s
STREAM_MIB_S_MIN = 200.0

# ----------------------------------------------------------------- finding wrk

INSTALL_HINT = (
    "install it: `sudo apt-get install wrk` (Debian, Ubuntu), `sudo dnf install wrk` "
    "(Fedora), `brew install wrk` (macOS), or build it from https://github.com/wg/wrk; "
    "then run this script again"
)


def find_wrk(*, install: bool = True) -> str:
    """The path of wrk; installs Debian's package if missing and allowed.

    Raises:
        SystemExit: (exit status 1) wrk is missing and could not be installed;
            the message says how to install it.
    """
    found = shutil.which("wrk")
    if found:
        return found
    apt = shutil.which("apt-get")
    if not install or apt is None or os.geteuid() != 0:
        why = (
            "not root"
            if apt and os.geteuid() != 0
            else "no apt-get here"
            if apt is None
            else "installing is off"
        )
        raise SystemExit(
            f"bench_http: wrk (the HTTP load generator) is not on PATH and was "
            f"not installed ({why}); {INSTALL_HINT}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in ("install", "update", "install"):
        cmd = [apt, "-y", "-q", "install", "wrk"] if attempt == "install" else [apt, "-q", "update"]
        print(
            f"bench_http: wrk is not on PATH; running `{' '.join(cmd)}` (root, Debian package)",
            file=sys.stderr,
            flush=True,
        )
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SystemExit(
                f"bench_http: `{' '.join(cmd)}` failed: {exc}; {INSTALL_HINT}"
            ) from None
        found = shutil.which("wrk")
        if found:
            print(f"bench_http: installed {found}", file=sys.stderr, flush=True)
            return found
        if proc.returncode != 0:
            print(
                f"bench_http: `{' '.join(cmd)}` exited {proc.returncode}: "
                f"{proc.stderr.strip()[-400:]}",
                file=sys.stderr,
                flush=True,
            )
    raise SystemExit(f"bench_http: could not install wrk with apt-get; {INSTALL_HINT}")


# ------------------------------------------------------------- contender names


def contender_name(app: str, kind: str) -> str:
    """``aiohttp/to_thread``: the app (APPS) and the kind of contender (MODES)."""
    return f"{app}/{kind}"


def split_name(name: str) -> tuple[str, str]:
    """(app, kind) of a contender name; ValueError if either is unknown."""
    app, _, kind = name.partition("/")
    if app not in APPS or kind not in MODES:
        raise ValueError(f"not a bench_http contender: {name!r}")
    return app, kind


def contender_names(app: str = "both") -> list[str]:
    """The contenders of ``--app`` (an app of APPS, ``both``: aiohttp and starlette, or
    ``all``), app by app, in MODES' order."""
    apps = list(APP_CHOICES.get(app, (app,)))
    if not set(apps) <= set(APPS):
        raise ValueError(f"unknown app {app!r}; choose {', '.join([*APPS, *APP_CHOICES])}")
    return [contender_name(a, kind) for a in apps for kind in MODES]


def _fastapi_interpreters_unavailable() -> str | None:
    """Why fastapi/aiosubinterp cannot run on this Python (as examples/fastapi_app.py says)."""
    import importlib.util
    import sysconfig

    if importlib.util.find_spec("fastapi") is None:
        return "fastapi is not installed (the `copies` extra has it)"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "fallback='copy' is refused on free-threaded builds"
    if sys.version_info[:2] == (3, 12):
        return (
            "examples/fastapi_app.py refuses --mode interpreters on CPython 3.12 (pydantic "
            "in several interpreters' copies of pydantic-core aborts the process there)"
        )
    return None


def _fastapi_unavailable() -> str | None:
    import importlib.util

    if importlib.util.find_spec("fastapi") is None:
        return "fastapi is not installed (the `copies` extra has it)"
    return None


for _kind in MODES:  # the parent skips these, with the reason
    _contenders.AVAILABILITY[contender_name("fastapi", _kind)] = (
        _fastapi_interpreters_unavailable if _kind == STREAMER else _fastapi_unavailable
    )


def _and(words: Iterable[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    *head, last = list(words)
    return f"{', '.join(head)} and {last}" if head else last


def apps_in(names: Sequence[str]) -> list[str]:
    """The apps that some of ``names`` belong to, in APPS' order."""
    present = {split_name(n)[0] for n in names}
    return [a for a in APPS if a in present]


# ------------------------------------------------------------- wrk's output
#
# Pure functions (tests/test_bench.py runs them without wrk).

_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_METRIC_UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}


def parse_duration(text: str) -> float:
    """Seconds from wrk's time format: "850.00us", "1.23ms", "2.00s", "1.50m"."""
    m = re.fullmatch(r"\s*([\d.]+)\s*(us|ms|s|m|h)\s*", text)
    if not m:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


def parse_size(text: str) -> float:
    """Bytes from wrk's binary size format: "512.00B", "11.44MB" (MB = 2**20 bytes)."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)B\s*", text)
    if not m:
        raise ValueError(f"not a wrk size: {text!r}")
    return float(m.group(1)) * _SIZE_UNITS[m.group(2)]


def parse_wrk_text(text: str) -> dict[str, Any]:
    """What wrk's standard report says: req/s, bytes/s, requests, errors, latency (seconds).

    ``latency`` holds avg/stdev/max from the thread stats line and, with
    ``--latency``, the distribution's 50/75/90/99 percentiles.
    """
    out: dict[str, Any] = {"latency": {}, "errors": {}}
    m = re.search(r"^Requests/sec:\s*([\d.]+)", text, re.M)
    if m:
        out["requests_per_s"] = float(m.group(1))
    m = re.search(r"^Transfer/sec:\s*(\S+)", text, re.M)
    if m:
        out["bytes_per_s"] = parse_size(m.group(1))
    m = re.search(r"^\s*(\d+) requests in (\S+), (\S+) read", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        out["duration_s"] = parse_duration(m.group(2))
        out["bytes"] = parse_size(m.group(3))
    m = re.search(r"^\s*Latency\s+(\S+)\s+(\S+)\s+(\S+)\s+\S+%", text, re.M)
    if m:
        out["latency"].update(
            avg=parse_duration(m.group(1)),
            stdev=parse_duration(m.group(2)),
            max=parse_duration(m.group(3)),
        )
    dist = text.split("Latency Distribution", 1)
    if len(dist) == 2:
        for q, value in re.findall(r"^\s*([\d.]+)%\s+(\S+)\s*$", dist[1], re.M):
            out["latency"][f"p{float(q):g}"] = parse_duration(value)
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"].update(
            zip(("connect", "read", "write", "timeout"), map(int, m.groups()), strict=True)
        )
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        out["errors"]["status"] = int(m.group(1))
    return out


def parse_wrk_report(text: str) -> dict[str, Any]:
    """The JSON line of ``_wrk_report.lua``'s done(), with rates added; ValueError if absent.

    Adds ``requests_per_s``, ``bytes_per_s`` and ``latency_ms`` (p50, p90,
    p99, p99.9, min, max, mean in milliseconds) and ``errors_total``.
    """
    found = None
    for line in text.splitlines():
        if line.startswith(WRK_MARK):
            found = json.loads(line[len(WRK_MARK) :])
    if found is None:
        raise ValueError("no '@@wrk' line in wrk's output (was it run with -s _wrk_report.lua?)")
    seconds = found["duration_us"] / 1e6
    lat = found["latency_us"]
    found["requests_per_s"] = found["requests"] / seconds if seconds > 0 else math.nan
    found["bytes_per_s"] = found["bytes"] / seconds if seconds > 0 else math.nan
    # No request completed: wrk's histogram is empty and says 0; that is no latency.
    answered = found["requests"] > 0
    ms = {
        f"p{float(q):g}": v / 1000 if answered else math.nan for q, v in lat["percentiles"].items()
    }
    ms.update({k: lat[k] / 1000 if answered else math.nan for k in ("min", "max", "mean")})
    found["latency_ms"] = ms
    found["errors_total"] = sum(found["errors"].values())
    return found


# ------------------------------------------------------------------- targets


def targets_of(summary: dict[str, dict[str, float]], app: str = "aiohttp") -> list[_report.Target]:
    """The three targets for ``app`` from report()'s summary.

    Against that app's own to_thread; NaN (no verdict) where a figure is
    missing. Each target's name starts with the app: ``aiohttp: /ping p99 ...``.
    """
    ours = summary.get(contender_name(app, STREAMER), {})
    anchor = summary.get(contender_name(app, ANCHOR), {})
    nan = math.nan
    heavy = HEAVY[app]
    targets = [
        _report.Target(
            f"{app}: /ping p99 while {heavy} is loaded / to_thread's",
            _stats.ratio(ours.get("light_p99_ms", nan), anchor.get("light_p99_ms")),
            "<=",
            LIGHT_P99_MAX,
            note="asyncio.to_thread, 2 threads",
        ),
        _report.Target(
            f"{app}: {heavy} req/s under load / to_thread's",
            _stats.ratio(ours.get("heavy_rps", nan), anchor.get("heavy_rps")),
            ">=",
            HEAVY_RPS_MIN,
            note="asyncio.to_thread, 2 threads",
        ),
    ]
    if app in STREAMING:
        targets.append(
            _report.Target(
                f"{app}: streaming from an interpreter to a loopback client",
                ours.get("stream_mib_s", nan),
                ">=",
                STREAM_MIB_S_MIN,
                unit="MiB/s",
                note="absolute (1 MiB chunks through open_channel(2))",
            )
        )
    return targets


# ------------------------------------------------------------------ the child


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """examples/<app>_app.py in a child process, its output in a temporary file."""

    def __init__(
        self, mode: str, loop: str, workers: int, max_streams: int, app: str = "aiohttp"
    ) -> None:
        self.port = _free_port()
        self.log = tempfile.TemporaryFile("w+")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        script, self.ready = APPS[app]
        # The uvicorn apps have no --loop: uvicorn gets uvloop when installed.
        loop_args = ["--loop", loop] if app == "aiohttp" else []
        stream_args = ["--max-streams", str(max_streams)] if app in STREAMING else []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                script,
                "--port",
                str(self.port),
                "--mode",
                mode,
                *loop_args,
                "--workers",
                str(workers),
                *stream_args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.base = f"http://127.0.0.1:{self.port}"
        self.body_file: str | None = None  # the body wrk POSTs (FastAPI's /score)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self, timeout: float = 60.0) -> str:
        """Wait until the server says it listens; returns the loop line the app printed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if self.ready in out:
                return next((ln for ln in out.splitlines() if ln.startswith("event loop")), "")
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the app exited with {self.proc.returncode} before serving: "
                    f"{out.strip()[-600:]}"
                )
            time.sleep(0.05)
        raise RuntimeError(f"the app did not serve within {timeout:g} s: {self.output()[-600:]}")

    def stop(self) -> int:
        """Ctrl-C (the app's clean shutdown), then a kill if it does not exit in 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.body_file is not None:
            os.unlink(self.body_file)
        return self.proc.returncode


def _wrk_cmd(
    wrk: str,
    url: str,
    seconds: float,
    connections: int,
    *,
    latency: bool = False,
    delay_ms: float = 0,
    body_file: str | None = None,
) -> list[str]:
    """wrk's command; with ``body_file``, each request POSTs that file's JSON (the Lua script)."""
    cmd = [
        wrk,
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        LUA,
    ]
    if latency:
        cmd.append("--latency")
    return [*cmd, url, "--", f"{delay_ms:g}", *([body_file] if body_file else [])]


def run_wrks(cmds: Sequence[list[str]], seconds: float) -> list[dict[str, Any]]:
    """Run the wrk commands at the same time; each one's parsed report, and its text."""
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
    ]
    results = []
    for cmd, proc in zip(cmds, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"wrk did not finish: {' '.join(cmd)}") from None
        if proc.returncode != 0:
            raise RuntimeError(
                f"wrk exited {proc.returncode}: {' '.join(cmd)}: {(err or out).strip()[-400:]}"
            )
        rep = parse_wrk_report(out)
        rep["text"] = parse_wrk_text(out)
        results.append(rep)
    return results


def _get(url: str, body: bytes | None = None) -> bytes:
    """The body of GET url, or of a POST of JSON ``body``."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as r:
        return bytes(r.read())


def score_body(n: int) -> bytes:
    """FastAPI's /score body: SCORE_ITEMS items of ``n`` (the work is ~ SCORE_ITEMS x n**1.4)."""
    items = [{"name": f"item-{i}", "n": n, "weight": 0.5 + i / 2} for i in range(SCORE_ITEMS)]
    return json.dumps({"id": n, "items": items}).encode()


def check_heavy(app: str, kind: str, server: Server, params: dict[str, Any]) -> str:
    """Ask the heavy endpoint once and check its answer (wrk only counts status codes).

    Returns the URL wrk loads; for FastAPI, ``server.body_file`` is set to the
    body's file (POSTed by every wrk request).
    """
    if app != "fastapi":
        n = params["primes_n"]
        url = f"{server.base}/primes?n={n}"
        got = json.loads(_get(url))
        if got != {"n": n, "primes": params["primes_expected"]}:
            raise AssertionError(
                f"/primes?n={n} answered {got}, expected {params['primes_expected']} primes"
            )
        return url
    body = score_body(params["score_n"])
    url = f"{server.base}/score"
    got = json.loads(_get(url, body))
    if (got.get("total"), got.get("best")) != (params["score_total"], params["score_best"]):
        raise AssertionError(f"/score answered {got}, expected total {params['score_total']}")
    # Where it ran: a worker interpreter of the server, or (other modes) an interpreter 0.
    if kind == STREAMER and (got["interpreter_id"] == 0 or got["pid"] != server.proc.pid):
        raise AssertionError(f"/score did not run in an interpreter of the server: {got}")
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(body)
    server.body_file = f.name
    return url


def contender(name: str):
    app, kind = split_name(name)

    def run(params: dict[str, Any], loop: str) -> dict[str, Any]:
        wrk, seconds = params["wrk"], params["seconds"]
        server = Server(
            MODES[kind],
            params["server_loop"],
            _contenders.WORKERS,
            params["stream_connections"],
            app,
        )
        try:
            loop_line = server.wait_ready()
            # One answer checked by hand; wrk then counts only status codes.
            heavy_url = check_heavy(app, kind, server, params)
            body = server.body_file
            if params["warmup_seconds"]:
                run_wrks(
                    [
                        _wrk_cmd(
                            wrk,
                            heavy_url,
                            params["warmup_seconds"],
                            params["heavy_connections"],
                            body_file=body,
                        )
                    ],
                    params["warmup_seconds"],
                )
            with _machine.Meter() as meter:
                heavy, light = run_wrks(
                    [
                        _wrk_cmd(
                            wrk, heavy_url, seconds, params["heavy_connections"], body_file=body
                        ),
                        _wrk_cmd(
                            wrk,
                            f"{server.base}/ping",
                            seconds,
                            1,
                            latency=True,
                            delay_ms=params["light_delay_ms"],
                        ),
                    ],
                    seconds,
                )
            out: dict[str, Any] = {
                "heavy": heavy,
                "light": light,
                **meter.result(),
                "info": f"examples/{app}_app.py --mode {MODES[kind]} --workers "
                f"{_contenders.WORKERS}; {loop_line}",
            }
            if kind == STREAMER and app in STREAMING:
                count, size = params["stream_count"], params["stream_size"]
                url = f"{server.base}/stream?count={count}&size={size}"
                head = _get(f"{server.base}/stream?count=2&size={size}")
                if len(head) != 2 * size or not head.startswith(b"00000000 "):
                    raise AssertionError(f"/stream answered {len(head)} bytes, not 2 x {size}")
                with _machine.Meter() as smeter:
                    (stream,) = run_wrks(
                        [
                            _wrk_cmd(
                                wrk, url, params["stream_seconds"], params["stream_connections"]
                            )
                        ],
                        params["stream_seconds"],
                    )
                out["stream"] = stream
                out["stream_meter"] = smeter.result()
        finally:
            code = server.stop()
        if code != 0:
            out["exit_problem"] = f"the app exited with {code} on Ctrl-C"
        return out

    return run


# ----------------------------------------------------------------- the parent


def _calibrate(fn: Any, n: int, target: float, low: int) -> tuple[int, float]:
    """(n, seconds): the n for which fn(n) takes ~target seconds here, and its time."""

    def best(n: int) -> float:
        times = []
        for _ in range(5):  # the fastest of 5: other load on the machine only slows
            t0 = time.perf_counter()
            fn(n)
            times.append(time.perf_counter() - t0)
        return min(times)

    for _ in range(3):  # trial division costs ~n**1.5 (a little less: primes stop early)
        n = max(low, int(n * (target / best(n)) ** (1 / 1.4)))
    return n, best(n)


def prepare_score(params: dict[str, Any]) -> dict[str, Any]:
    """Calibrate FastAPI's /score body (validation and work) to ~heavy_ms here; its answer."""
    sys.path.insert(0, os.path.dirname(APP))
    try:
        import _fastapi_work as score_work
    finally:
        sys.path.remove(os.path.dirname(APP))

    def score(n: int) -> dict[str, Any]:
        status, answer = score_work.score(score_body(n))
        if status != 200:
            raise AssertionError(f"_fastapi_work.score answered {status}: {answer!r}")
        return dict(json.loads(answer))

    n, seconds = _calibrate(score, 5_000, params["heavy_ms"] / 1000, 100)
    answer = score(n)
    params.update(
        score_items=SCORE_ITEMS,
        score_n=n,
        score_ms=round(seconds * 1000, 2),
        score_total=answer["total"],
        score_best=answer["best"],
    )
    return params


_CHOSEN_APP = "both"  # --app, for prepare()


def prepare(params: dict[str, Any]) -> dict[str, Any]:
    """Find (or install) wrk, and calibrate /primes's n (and /score's body, for FastAPI)
    to ~heavy_ms of pure Python here."""
    params["wrk"] = find_wrk()
    version = subprocess.run([params["wrk"], "-v"], capture_output=True, text=True, timeout=10)
    params["wrk_version"] = (version.stdout or version.stderr).split("[")[0].strip()
    params["server_loop"] = _server_loop()
    sys.path.insert(0, os.path.dirname(APP))
    try:
        import _web_work as work
    finally:
        sys.path.remove(os.path.dirname(APP))

    n, seconds = _calibrate(work.count_primes, 20_000, params["heavy_ms"] / 1000, 1000)
    params["primes_n"] = n
    params["primes_ms"] = round(seconds * 1000, 2)
    params["primes_expected"] = work.count_primes(n)
    if "fastapi" in APP_CHOICES.get(_CHOSEN_APP, (_CHOSEN_APP,)) and _fastapi_unavailable() is None:
        prepare_score(params)
    return params


def _server_loop() -> str:
    """uvloop unless the command line says --loop asyncio (the issue measures uvloop)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--loop", default=None)
    known, _ = parser.parse_known_args()
    return "asyncio" if known.loop == "asyncio" else "uvloop"


_REPORTED: dict[str, Any] = {}


def _ms(x: float, digits: int = 2) -> str:
    return _report.fmt(x, digits)


def report(results: dict[str, list[dict[str, Any]]], params: dict[str, Any]) -> _report.Report:
    apps = apps_in(list(results))
    heavy = " or ".join(dict.fromkeys(HEAVY[a] for a in apps)) or "/primes"
    load = _report.Table(
        [
            "contender",
            "/ping p50 ms",
            "/ping p99 ms",
            "/ping max ms",
            "/ping req",
            "p99 / to_thread's",
            f"{heavy} req/s",
            "req/s / to_thread's",
            f"{heavy} p50 ms",
            "errors",
            *_report.LOAD_HEADERS,
        ],
        heading="#### Under load",
    )
    stream = _report.Table(
        ["contender", "MiB/s", "min", "max", "streams done", "chunk", *_report.LOAD_HEADERS],
        heading="#### Streaming",
    )
    summary: dict[str, dict[str, float]] = {}
    for name, good in load.each(results):
        med = _stats.median
        lp50 = med([r["light"]["latency_ms"]["p50"] for r in good])
        lp99 = med([r["light"]["latency_ms"]["p99"] for r in good])
        lmax = max(
            (v for r in good if not math.isnan(v := r["light"]["latency_ms"]["max"])),
            default=math.nan,
        )
        rps = med([r["heavy"]["requests_per_s"] for r in good])
        summary[name] = {
            "light_p50_ms": lp50,
            "light_p99_ms": lp99,
            "light_max_ms": lmax,
            "heavy_rps": rps,
            "heavy_p50_ms": med([r["heavy"]["latency_ms"]["p50"] for r in good]),
            "cpu_per_wall": med(_stats.collect(good, "cpu_per_wall")),
            "other_cores": med(_stats.collect(good, "other_cores")),
        }
        errors = sum(r["light"]["errors_total"] + r["heavy"]["errors_total"] for r in good)
        load.add(
            name,
            _ms(lp50),
            _ms(lp99),
            _ms(lmax),
            f"{sum(r['light']['requests'] for r in good):,}",
            "",
            f"{rps:,.1f}",
            "",
            _ms(summary[name]["heavy_p50_ms"], 1),
            str(errors),
            *_report.load_cells(good),
        )
        streams = [r["stream"] for r in good if "stream" in r]
        if streams:
            rates = [s["bytes_per_s"] / (1 << 20) for s in streams]
            summary[name]["stream_mib_s"] = med(rates)
            cells = _report.rate_cells(rates, 0)
            meters = [r["stream_meter"] for r in good if "stream_meter" in r]
            stream.add(
                name,
                *cells,
                f"{sum(s['requests'] for s in streams):,}",
                f"{params['stream_size'] >> 10} KiB",
                *_report.load_cells(meters),
            )
    for name, s in summary.items():
        anchor = summary.get(contender_name(split_name(name)[0], ANCHOR), {})
        load.set(
            name, 5, _report.fmt_ratio(_stats.ratio(s["light_p99_ms"], anchor.get("light_p99_ms")))
        )
        load.set(name, 7, _report.fmt_ratio(_stats.ratio(s["heavy_rps"], anchor.get("heavy_rps"))))
    targets = [t for app in apps for t in targets_of(summary, app)]
    seconds = params["seconds"]
    servers = {
        "aiohttp": f"examples/aiohttp_app.py on {params['server_loop']}",
        "starlette": "examples/starlette_app.py under uvicorn (uvloop, httptools)",
        "fastapi": "examples/fastapi_app.py under uvicorn (uvloop, httptools)",
    }
    work = []
    if set(apps) & set(STREAMING):
        work.append(
            f"/primes?n={params['primes_n']} counts primes in pure Python "
            f"(~{params['primes_ms']} ms here)"
        )
    if "fastapi" in apps and "score_n" in params:
        work.append(
            f"POST /score: a JSON body of {params['score_items']} items of "
            f"n={params['score_n']}, validated by pydantic (model_validate_json, in the "
            "worker: InterpreterPool(fallback='copy') loads a private copy of "
            "pydantic-core in each interpreter), their primes counted, answered with "
            f"model_dump_json (~{params['score_ms']} ms here)"
        )
    notes = [
        f"Server: {_and(servers[a] for a in apps)}, one fresh process per "
        f"contender (APP/MODE) and round; ratios are to the same app's to_thread; "
        f"{'; '.join(work)}; {_contenders.WORKERS} workers in every mode.",
        f"Under load ({seconds} s, after {params['warmup_seconds']} s of warm-up): "
        f"`{params['wrk_version']}` -t1 -c{params['heavy_connections']} on {heavy}, and at the "
        f"same time -t1 -c1 --latency on /ping with a {params['light_delay_ms']} ms pause "
        "before each request. /ping percentiles are exact (wrk's histogram, done() hook), "
        "medians over rounds; max is the worst of all rounds; errors: socket errors and "
        "non-2xx answers of both wrks.",
        *(
            [
                f"Streaming ({params['stream_seconds']} s): -t1 -c{params['stream_connections']} on "  # noqa: E501
                f"/stream?count={params['stream_count']}&size={params['stream_size']}: each request a "  # noqa: E501
                f"chunked body of {params['stream_count']} chunks of {params['stream_size'] >> 10} "
                "KiB produced in an interpreter and sent through open_channel(2); MiB/s = response "
                "bytes read by wrk per second (its Transfer/sec)."
            ]
            if set(apps) & set(STREAMING)
            else []
        ),
        "CPU/wall includes wrk's own CPU time (it runs in the contender's process tree). "
        + _report.LOAD_NOTE,
        *load.infos,
    ]
    _REPORTED.update(summary=summary, targets=targets, params=params, chosen=list(results))
    tables = [load.section()]
    if stream.rows:
        tables.append(stream.section())
    return _report.Report(tables, targets, notes, {"http": summary})


# ------------------------------------------------------------------ the chart


def draw_chart(
    path: str, summary: dict[str, dict[str, float]], targets: list[_report.Target], subtitle: str
) -> None:
    """Per app, a column of three panels: /ping p99 under load, heavy req/s, streaming MiB/s.

    An app without /stream (FastAPI) says so in its third panel.

    ``targets`` are targets_of()'s for each app in ``summary`` (their names
    start with the app); each panel draws and states its app's.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    apps = apps_in(list(summary)) or ["aiohttp"]
    rows = max(len([k for k in MODES if contender_name(a, k) in summary]) for a in apps)
    fig = Figure(figsize=(11 * len(apps), 8.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg backend, without pyplot's global state
    heavy = " or ".join(dict.fromkeys(HEAVY[a] for a in apps))
    fig.suptitle(
        f"{_and(APP_LABELS[a] for a in apps)} under wrk load: where the "
        f"CPU-heavy endpoint {heavy} runs\n" + subtitle,
        fontsize=11,
    )
    grid = fig.subplots(3, len(apps), height_ratios=[rows + 0.6, rows + 0.6, 1.8], squeeze=False)
    for column, app in enumerate(apps):
        mine = [t for t in targets if t.what.startswith(f"{app}: ")]
        _draw_app(list(grid[:, column]), app, summary, mine or targets_of(summary, app))
    names = " and ".join(APP_LABELS[a].split()[0] for a in apps)
    fig.savefig(path, metadata={"Title": f"bench_http: {names} under wrk load"})


def _draw_app(
    axes: list[Any], app: str, summary: dict[str, dict[str, float]], targets: list[_report.Target]
) -> None:
    """The three panels of one app (the third one empty but for a note without /stream)."""
    kinds = [k for k in MODES if contender_name(app, k) in summary]
    mine = {k: summary[contender_name(app, k)] for k in kinds}
    colours = ["tab:blue" if k.startswith("aiosubinterp") else "tab:gray" for k in kinds]
    anchor = mine.get(ANCHOR, {})
    # What the contender got of the machine: a reader of the picture alone
    # must see when other load left it less than 2 cores.
    labels = [
        LABELS[k]
        + (",\nfallback='copy'" if (app, k) == ("fastapi", STREAMER) else "")
        + (
            ""
            if math.isnan(mine[k].get("cpu_per_wall", math.nan))
            else f"\nused {mine[k]['cpu_per_wall']:.2f} cores, others {mine[k]['other_cores']:.2f}"
        )
        for k in kinds
    ]
    light, heavy = targets[:2]
    route = HEAVY[app]
    _bars(
        axes[0],
        labels,
        [mine[k].get("light_p99_ms", math.nan) for k in kinds],
        colours,
        "ms",
        anchor.get("light_p99_ms", math.nan) * LIGHT_P99_MAX,
        f"target: <= {LIGHT_P99_MAX:g} x to_thread's p99 = {{limit}}",
        log=True,
    )
    _title(axes[0], f"{app}: /ping p99 latency while {route} is loaded (lower is better)", light)
    axes[0].set_xlabel(
        axes[0].get_xlabel() + "; used: cores of CPU time of the server and wrk "
        "(medians), others: the rest of the machine"
    )
    _bars(
        axes[1],
        labels,
        [mine[k].get("heavy_rps", math.nan) for k in kinds],
        colours,
        "req/s",
        anchor.get("heavy_rps", math.nan) * HEAVY_RPS_MIN,
        f"target: >= {HEAVY_RPS_MIN:g} x to_thread's = {{limit}}",
        log=False,
    )
    _title(axes[1], f"{app}: {route} requests per second under load (higher is better)", heavy)
    if len(targets) < 3:
        axes[2].set_axis_off()
        axes[2].text(
            0.5,
            0.5,
            f"{app}: no /stream in this app (streaming is measured on the "
            "aiohttp and Starlette apps)",
            ha="center",
            va="center",
            fontsize=10,
            transform=axes[2].transAxes,
        )
        return
    streaming = targets[2]
    _bars(
        axes[2],
        ["aiosubinterp InterpreterPool(2):\n/stream, 1 MiB chunks\nthrough a channel"],
        [mine.get(STREAMER, {}).get("stream_mib_s", math.nan)],
        ["tab:blue"],
        "MiB/s",
        STREAM_MIB_S_MIN,
        f"target: >= {STREAM_MIB_S_MIN:g} MB/s, drawn at {{limit}} (stricter)",
        log=False,
    )
    _title(
        axes[2],
        f"{app}: streaming a body produced in an interpreter to wrk (higher is better)",
        streaming,
    )
    axes[2].set_xlabel("MiB/s of response body read by wrk (1 MiB = 2**20 bytes)")


def _title(ax: Any, text: str, target: _report.Target) -> None:
    colour = {"PASS": "tab:green", "MISS": "tab:red"}.get(target.verdict, "black")
    ax.set_title(text, loc="left", fontsize=10)
    measured = (
        _report.fmt_ratio(target.measured)
        if target.unit == "x"
        else _report.fmt(target.measured, 0, " " + target.unit)
    )
    ax.set_title(
        f"{target.verdict}: {measured} (target {target.op} {target.limit:g}"
        f"{'x' if target.unit == 'x' else ' ' + target.unit})",
        loc="right",
        fontsize=10,
        color=colour,
    )


def _bars(
    ax: Any,
    labels: list[str],
    values: list[float],
    colours: list[str],
    unit: str,
    limit: float,
    limit_label: str,
    *,
    log: bool,
) -> None:
    ys = list(range(len(labels)))
    ax.barh(ys, [0 if math.isnan(v) else v for v in values], color=colours, height=0.6)
    ax.set_yticks(ys, labels, fontsize=9)
    ax.invert_yaxis()
    finite = [v for v in [*values, limit] if not math.isnan(v) and v > 0]
    top, low = max(finite, default=1.0), min(finite, default=1.0)
    log = log and top / low > 20  # else the small bars (ours) would be invisible
    if log:
        ax.set_xscale("log")
        ax.set_xlim(low / 3, top * 15)
    else:
        ax.set_xlim(0, top * 1.3)
    for y, v in zip(ys, values, strict=True):
        if math.isnan(v):
            text, x = "n/a: no request answered in the run", (low / 2.5 if log else top * 0.01)
        else:
            text = f"{v:,.3g} {unit}" if v < 100 else f"{v:,.0f} {unit}"
            x = v * 1.08 if log else v + top * 0.01
        ax.text(
            x,
            y,
            text,
            va="center",
            fontsize=9,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )
    ax.set_ylim(len(labels) - 0.5, -1.2)  # a strip above the bars for the target's label
    if not math.isnan(limit):
        ax.axvline(limit, color="black", linestyle="--", linewidth=1.5)
        left, right = ax.get_xlim()
        # The label on the side of the line with room for it.
        at_right = (
            math.log(limit / left) / math.log(right / left)
            if log
            else (limit - left) / (right - left)
        ) < 0.6
        ax.text(
            limit * (1.04 if at_right else 0.96)
            if log
            else limit + (1 if at_right else -1) * top * 0.01,
            -0.85,
            limit_label.format(limit=f"{limit:,.3g} {unit}"),
            va="center",
            fontsize=8,
            ha="left" if at_right else "right",
        )
    ax.set_xlabel(
        unit
        + (" (log scale)" if log else "")
        + ("; blue: aiosubinterp" if "tab:gray" in colours else "")
    )


def _chart_option() -> str | None:
    """--chart PATH, removed from sys.argv before _harness parses it (None: the default)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--chart", default=None)
    known, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    return known.chart


def _app_option() -> str:
    """--app aiohttp|starlette|fastapi|both|all, removed from sys.argv before _harness parses it."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--app", choices=(*APPS, *APP_CHOICES), default="both")
    known, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    return str(known.app)


def _subtitle(params: dict[str, Any]) -> str:
    return (
        f"{_machine.ncpu()} CPUs ({_machine.cpu_model()}), Python "
        f"{sys.version.split()[0]}, {params.get('wrk_version', 'wrk')}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{' '.join(open('/proc/loadavg').read().split()[:3])}"
        + (" (--quick: rough numbers)" if params.get("quick") else "")
    )


def main() -> int:
    chart = _chart_option()
    global _CHOSEN_APP
    app = _CHOSEN_APP = _app_option()
    # A child is asked for one contender by name, without --app: it knows them all.
    child = "--contender" in sys.argv
    apps = APP_CHOICES.get(app, (app,))
    heavy = ", ".join(dict.fromkeys(HEAVY[a] for a in apps))
    names = {"aiohttp": "aiohttp", "starlette": "Starlette", "fastapi": "FastAPI"}
    code = _harness.main(
        doc=__doc__,
        title=f"bench_http: {_and(names[a] for a in apps)} under wrk: /ping latency, "
        f"{heavy} req/s" + (", /stream MiB/s" if set(apps) & set(STREAMING) else ""),
        contenders={name: contender(name) for name in contender_names("all" if child else app)},
        full={
            "seconds": 7,
            "warmup_seconds": 1,
            "heavy_ms": 10,
            "heavy_connections": 8,
            "light_delay_ms": 5,
            "stream_seconds": 5,
            "stream_connections": 2,
            "stream_count": 256,
            "stream_size": 1 << 20,
            "rounds": 2,
        },
        quick={
            "seconds": 2,
            "warmup_seconds": 0,
            "heavy_ms": 10,
            "heavy_connections": 8,
            "light_delay_ms": 5,
            "stream_seconds": 2,
            "stream_connections": 2,
            "stream_count": 64,
            "stream_size": 1 << 20,
            "rounds": 1,
        },
        prepare=prepare,
        report=report,
        child_timeout=(120.0, 60.0),
    )
    if child or not _REPORTED:
        return code
    summary = _REPORTED["summary"]
    missing = [n for n in _REPORTED["chosen"] if n not in summary]
    if chart is None:
        chart = os.path.join(tempfile.gettempdir(), "bench_http.png")
    if chart:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(chart)), exist_ok=True)
            draw_chart(chart, summary, _REPORTED["targets"], _subtitle(_REPORTED["params"]))
            print(f"bench_http: chart written to {chart}", file=sys.stderr)
        except ImportError as exc:
            print(
                f"bench_http: no chart ({exc}; the `bench` extra installs matplotlib)",
                file=sys.stderr,
            )
    if not summary or missing:
        print(
            f"bench_http: contender(s) without a result: {', '.join(missing) or 'all'}",
            file=sys.stderr,
        )
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
