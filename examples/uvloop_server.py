"""An HTTP server on uvloop whose CPU-heavy endpoint runs in an InterpreterPool.

Two endpoints on 127.0.0.1:

- ``GET /light``: answers at once (a health check, a cache hit);
- ``GET /heavy``: counts primes in pure Python (~20 ms of CPU).

The script runs the server three times, each time with the heavy work done
differently, and drives both endpoints at once from a load process of its
own (loopback only, bounded in time and in requests):

- ``inline``: on the event loop (blocks every other request meanwhile);
- ``to_thread``: ``asyncio.to_thread`` (the loop stays free, but the
  threads share the main interpreter's GIL with it);
- ``aiosubinterp``: ``pool.run`` on an ``InterpreterPool`` (own GIL each).

It prints requests/s of each endpoint and the light endpoint's latency
(p50/p99): what a health check sees while the heavy endpoint is busy.

Run: ``python examples/uvloop_server.py [--duration 3]`` (needs uvloop:
``pip install '.[uvloop]'``; without it, plain asyncio).

The worker interpreters import this script to find ``count_primes``, so its
top level imports nothing heavy: not asyncio (a worker that imported it
aborts CPython 3.12.1 at exit) and not uvloop (it refuses to load in an
interpreter with its own GIL). Those imports are inside the functions that
run in the main interpreter.
"""

import json
import os
import subprocess
import sys
import time

HEAVY_N = 30_000  # numbers checked per heavy request: ~20 ms of pure Python
SETUPS = ("inline", "to_thread", "aiosubinterp")


def count_primes(stop):
    """The heavy endpoint's work: runs in a worker interpreter (or inline, or a thread)."""
    count = 0
    for n in range(2, stop):
        d = 2
        while d * d <= n:
            if n % d == 0:
                break
            d += 1
        else:
            count += 1
    return count


# -- server ------------------------------------------------------------------------------


async def serve(setup, ready, stop, heavy_n):
    """Serve until ``stop`` is set; ``ready`` gets the port."""
    import asyncio

    import aiosubinterp

    pool = aiosubinterp.InterpreterPool() if setup == "aiosubinterp" else None

    async def heavy():
        if setup == "inline":
            return count_primes(heavy_n)
        if setup == "to_thread":
            return await asyncio.to_thread(count_primes, heavy_n)
        return await pool.run(count_primes, heavy_n)

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path == b"/light":
                    body = b"ok\n"
                elif path == b"/heavy":
                    body = b"%d\n" % await heavy()
                else:
                    body = b"not found\n"
                status = b"404 Not Found" if body == b"not found\n" else b"200 OK"
                head = b"HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                writer.write(head % (status, len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    try:
        if pool is not None:
            await pool.run(count_primes, 10)  # warm: the workers import this script
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.set_result(server.sockets[0].getsockname()[1])
        async with server:
            await stop.wait()
    finally:
        if pool is not None:
            await pool.aclose()


# -- load --------------------------------------------------------------------------------


async def load(port, duration, light_conns, heavy_conns, max_requests, light_rate):
    """Drive both endpoints at once for ``duration`` s; returns counts and light latencies."""
    import asyncio

    deadline = time.perf_counter() + duration
    light_ms, counts = [], {"light": 0, "heavy": 0}

    async def client(path, record):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = b"GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode()
        # Light requests are paced (a health check every few ms), so a fast
        # server is not rewarded with more load; heavy ones go back to back.
        interval = 1.0 / light_rate if record else 0.0
        next_at = time.perf_counter()
        try:
            while time.perf_counter() < deadline and counts[path] < max_requests:
                if interval:
                    next_at += interval
                    delay = next_at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                t0 = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                if record:
                    light_ms.append((time.perf_counter() - t0) * 1000)
                counts[path] += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(
        *[client("light", True) for _ in range(light_conns)],
        *[client("heavy", False) for _ in range(heavy_conns)],
    )
    elapsed = time.perf_counter() - t0
    light_ms.sort()
    return {
        "light_rps": counts["light"] / elapsed,
        "heavy_rps": counts["heavy"] / elapsed,
        "light_p50_ms": light_ms[len(light_ms) // 2] if light_ms else float("nan"),
        "light_p99_ms": light_ms[min(len(light_ms) - 1, int(len(light_ms) * 0.99))]
        if light_ms
        else float("nan"),
        "requests": counts["light"] + counts["heavy"],
        "seconds": elapsed,
    }


def new_loop():
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop(), "asyncio"
    return uvloop.new_event_loop(), "uvloop"


def run_setup(setup, args):
    """Run the server for one set-up in this process and the load in a child process."""
    import asyncio

    loop, loop_name = new_loop()

    async def main():
        ready, stop = loop.create_future(), asyncio.Event()
        server = asyncio.create_task(serve(setup, ready, stop, args.heavy_n))
        port = await asyncio.wait_for(asyncio.shield(ready), 30) if not server.done() else None
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--client",
            str(port),
            "--duration",
            str(args.duration),
            "--max-requests",
            str(args.max_requests),
            "--light-rate",
            str(args.light_rate),
        ]
        # subprocess.Popen, not loop.subprocess_exec: the load process must not
        # share this loop's fate, and a plain fork+exec runs no Python in the child.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        try:
            out, _ = await asyncio.to_thread(proc.communicate, timeout=args.duration + 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stop.set()
            await server
        return json.loads(out)

    try:
        return loop.run_until_complete(main()), loop_name
    finally:
        loop.close()


def parse_args(argv):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=3.0, help="seconds of load per set-up (default 3)"
    )
    parser.add_argument(
        "--max-requests",
        type=int,
        default=20_000,
        help="stop a set-up's load after this many requests per endpoint",
    )
    parser.add_argument(
        "--heavy-n",
        type=int,
        default=HEAVY_N,
        help=f"numbers checked per heavy request (default {HEAVY_N})",
    )
    parser.add_argument(
        "--light-rate",
        type=float,
        default=200.0,
        help="light requests per second per connection, paced (default 200)",
    )
    parser.add_argument(
        "--setups", default=",".join(SETUPS), help=f"comma-separated subset of {','.join(SETUPS)}"
    )
    parser.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.client is not None:  # the load process
        loop, _ = new_loop()
        try:
            result = loop.run_until_complete(
                load(
                    args.client,
                    args.duration,
                    light_conns=2,
                    heavy_conns=4,
                    max_requests=args.max_requests,
                    light_rate=args.light_rate,
                )
            )
        finally:
            loop.close()
        print(json.dumps(result))
        return 0
    results = {}
    loop_name = "?"
    for setup in args.setups.split(","):
        if setup not in SETUPS:
            raise SystemExit(f"unknown set-up {setup!r}; choose from {', '.join(SETUPS)}")
        cpu0, t0 = os.times(), time.perf_counter()
        results[setup], loop_name = run_setup(setup, args)
        cpu1 = os.times()
        cpu = cpu1.user + cpu1.system - cpu0.user - cpu0.system
        results[setup]["server_cpu_per_wall"] = cpu / (time.perf_counter() - t0)
    print(
        f"\nHTTP on 127.0.0.1 ({loop_name}), {os.cpu_count()} CPUs: 2 connections on /light "
        f"(each paced at {args.light_rate:g}/s), 4 on /heavy (count_primes({args.heavy_n})), "
        f"{args.duration:g} s per set-up\n"
    )
    print(
        f"  {'heavy work':<14} {'heavy req/s':>12} {'light req/s':>12} {'light p50 ms':>13} "
        f"{'light p99 ms':>13} {'server CPU/wall':>16}"
    )
    for setup, r in results.items():
        print(
            f"  {setup:<14} {r['heavy_rps']:12.1f} {r['light_rps']:12.0f} "
            f"{r['light_p50_ms']:13.2f} {r['light_p99_ms']:13.2f} "
            f"{r['server_cpu_per_wall']:16.2f}"
        )
    if {"inline", "aiosubinterp"} <= results.keys():
        print(
            f"\n  light p99, inline / aiosubinterp: "
            f"{results['inline']['light_p99_ms'] / results['aiosubinterp']['light_p99_ms']:.1f}x "
            "(target >= 5x)"
        )
    if {"to_thread", "aiosubinterp"} <= results.keys():
        print(
            f"  heavy req/s, aiosubinterp / to_thread: "
            f"{results['aiosubinterp']['heavy_rps'] / results['to_thread']['heavy_rps']:.2f}x "
            "(target >= 1.7x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
