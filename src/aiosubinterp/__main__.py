"""Command line: ``python -m aiosubinterp demo | bench | info | check | profile | serve``.

Also ``--version``. Parses the arguments and dispatches; the commands live in
:mod:`aiosubinterp.demo` (``serve`` in ``aiosubinterp._serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys

from aiosubinterp._version import __version__
from aiosubinterp.demo import missing

__all__ = ["main"]


def _contenders(value: str) -> list[str]:
    from aiosubinterp.demo.zoo import CONTENDERS

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in CONTENDERS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown contender(s) {', '.join(bad) or '(none)'}; choose from "
            f"{', '.join(CONTENDERS)}"
        )
    return names


def _seconds_or_none(text: str) -> float | None:
    """A number of seconds, or "none" (None: off)."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or 'none', got {text!r}") from None


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve an ASGI application from N interpreters of one process",
        description="Serve an ASGI 3 application (module:attribute) from --workers "
        "interpreters of this one process: each imports the application, runs "
        "its own event loop and an HTTP/1.1 server (h11), and all accept from "
        "one listening socket. SIGTERM or Ctrl-C stops accepting and finishes "
        "the requests in flight. Exit code 0 once stopped, 1 if the "
        "application cannot be loaded, 3 if its lifespan startup failed.",
    )
    serve.add_argument("app", metavar="APP", help="the application, module:attribute")
    serve.add_argument(
        "--workers",
        type=int,
        default=None,
        help="interpreters (default: the CPUs this process may use)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (8000; 0: any)")
    serve.add_argument("--uds", default=None, help="bind this Unix domain socket instead")
    serve.add_argument(
        "--fd",
        type=int,
        default=None,
        help="serve from this bound socket's file descriptor instead",
    )
    serve.add_argument(
        "--app-dir", default=".", help="folder put first on sys.path to import APP from (.)"
    )
    serve.add_argument(
        "--factory",
        action="store_true",
        help="APP is a function without arguments that returns the application",
    )
    serve.add_argument("--root-path", default="", help="the ASGI root_path")
    serve.add_argument(
        "--lifespan",
        choices=("auto", "on", "off"),
        default="auto",
        help="run the ASGI lifespan protocol in every interpreter (auto)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log one line per response (on)",
    )
    serve.add_argument(
        "--timeout-keep-alive",
        type=float,
        default=5.0,
        help="seconds an idle keep-alive connection stays open (5)",
    )
    serve.add_argument(
        "--reuse-port",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --host/--port on Linux, a listening socket per interpreter "
        "(SO_REUSEPORT): the kernel spreads connections evenly (on)",
    )
    serve.add_argument(
        "--copies",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="load extension modules that refuse interpreters (pydantic-core for FastAPI, "
        "orjson, numpy) from a private copy per interpreter (default: where this Python can)",
    )
    serve.add_argument(
        "--timeout-request-head",
        type=float,
        default=20.0,
        help="seconds a request head gets to arrive whole, from its first byte; then 408 (20)",
    )
    serve.add_argument(
        "--timeout-graceful-shutdown",
        type=float,
        default=None,
        help="seconds the requests in flight get on SIGTERM/SIGINT (default: no limit)",
    )
    serve.add_argument(
        "--limit-concurrency",
        type=int,
        default=None,
        help="requests at once per interpreter; more get 503",
    )
    serve.add_argument(
        "--limit-max-requests",
        type=int,
        default=None,
        help="replace an interpreter after this many requests",
    )
    serve.add_argument(
        "--timeout-worker-healthcheck",
        type=float,
        default=30.0,
        help="replace an interpreter whose event loop gave no sign of life "
        "for this many seconds (30)",
    )
    serve.add_argument(
        "--proxy-headers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="from a trusted proxy, take the client's address from X-Forwarded-For "
        "and the scheme from X-Forwarded-Proto (on)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="the trusted proxies: comma-separated addresses or networks, '*' for any, "
        "'unix:' for Unix socket peers ($FORWARDED_ALLOW_IPS, or 127.0.0.1)",
    )
    serve.add_argument(
        "--ws-max-size",
        type=int,
        default=16 * 1024 * 1024,
        help="largest WebSocket message in bytes; larger close with 1009 (16777216)",
    )
    serve.add_argument(
        "--ws-ping-interval",
        type=_seconds_or_none,
        default=20.0,
        help="seconds between a WebSocket's pings to its client (20; 'none': no pings)",
    )
    serve.add_argument(
        "--ws-ping-timeout",
        type=_seconds_or_none,
        default=20.0,
        help="seconds a ping's answer may take before the client is taken as gone (20)",
    )
    serve.add_argument("--backlog", type=int, default=2048, help="listen backlog (2048)")
    serve.add_argument(
        "--h11-max-incomplete-event-size",
        type=int,
        default=16 * 1024,
        help="largest request line and headers in bytes; larger get 431 (16384)",
    )


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    problem = missing("serve", "h11")
    if problem:
        parser.error(f"serve needs h11; {problem}")
    from aiosubinterp._serve.main import serve

    options = {k: v for k, v in vars(args).items() if k not in ("command", "app")}
    try:
        return serve(args.app, **options)
    except (ValueError, TypeError) as exc:
        # serve(name=...) in the function's messages is --name here.
        parser.error(
            re.sub(
                r"serve\((\w+)=[^)]*\)", lambda m: "--" + m[1].replace("_", "-"), f"serve: {exc}"
            )
        )
    except OSError as exc:
        print(f"serve: cannot listen: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        parser.error(f"serve: {exc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aiosubinterp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    cores = os.cpu_count() or 2
    demo = sub.add_parser(
        "demo",
        help="bouncing circles: one thread vs threads vs processes vs interpreters",
        description="The circles zoo: the same simulation (identical physics, checked) on one "
        "thread, threads, processes and interpreters; prints frames per second and "
        "writes a PNG of the final frame and a GIF of the first frames. --serve "
        "runs them at the same time in a web page instead. "
        "--kind primes runs the older CPU-bound speedup table instead.",
    )
    demo.add_argument("--kind", choices=("circles", "primes"), default="circles")
    demo.add_argument("--circles", type=int, default=3000, help="number of circles (3000)")
    demo.add_argument("--frames", type=int, default=200, help="frames per contender (200)")
    demo.add_argument(
        "--workers",
        type=int,
        default=cores,
        help="regions: interpreters, threads, processes (default: CPU count)",
    )
    demo.add_argument(
        "--contenders",
        type=_contenders,
        default=["single", "threads", "processes", "aiosubinterp"],
        help="comma-separated subset of single,threads,processes,aiosubinterp",
    )
    demo.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds over all contenders, order rotated; the median counts (3)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed of the initial state")
    demo.add_argument(
        "--out",
        default="aiosubinterp-demo",
        help="folder for the images (default ./aiosubinterp-demo)",
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="the live demo: serve a page where the four contenders run at the "
        "same time, side by side (aiohttp, the demo extra)",
    )
    demo.add_argument("--host", default="127.0.0.1", help="--serve: address (127.0.0.1)")
    demo.add_argument("--port", type=int, default=8080, help="--serve: port (8080; 0: any free)")
    demo.add_argument("--tasks", type=int, default=8, help="primes: number of tasks (8)")
    demo.add_argument(
        "--span", type=int, default=150_000, help="primes: numbers checked per task (150000)"
    )
    bench = sub.add_parser("bench", help="run benchmarks/bench_*.py; Markdown report + PNG charts")
    bench.add_argument("--quick", action="store_true", help="pass --quick: rough numbers, fast")
    bench.add_argument(
        "--only", default=None, help="comma-separated benchmark names (e.g. roundtrip,channel)"
    )
    bench.add_argument(
        "--out",
        default="aiosubinterp-bench",
        help="folder for report.md and the charts (default ./aiosubinterp-bench)",
    )
    bench.add_argument(
        "--dir", default=None, help="the benchmarks/ folder of a clone (default: ./benchmarks)"
    )
    info = sub.add_parser("info", help="what this Python and machine offer")
    info.add_argument(
        "--no-probe", action="store_true", help="skip importing common modules in a worker"
    )
    check = sub.add_parser(
        "check",
        help="will these modules load in a worker? (each in a child process)",
        description="Import each module in a worker interpreter of a child process of its own "
        "and make one representative call. Prints works (with the version), "
        "refused (runs with InterpreterPool(fallback='process') or ProcessPool), "
        "crashed, not installed, failed or timeout per module. Exit code 0 if "
        "every module works, 1 otherwise.",
    )
    check.add_argument("modules", nargs="+", metavar="MODULE", help="import name, e.g. yaml, PIL")
    check.add_argument("--json", action="store_true", help="print JSON instead of lines")
    check.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds per module before it counts as hung (60)",
    )
    check.add_argument(
        "--fallback",
        choices=("copy",),
        default="",
        help="copy: try a refused module again in a private copy per "
        "interpreter (InterpreterPool(fallback='copy')), with 20 calls "
        "in 2 interpreters at once",
    )
    check.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(4, cores)),
        help="modules checked at once (default: CPU count, at most 4)",
    )
    profile = sub.add_parser(
        "profile",
        help="run a script with its pools profiled; report and flame graph",
        description="Run SCRIPT (with ARGS) as __main__, with every InterpreterPool and "
        "Interpreter it creates profiled: each interpreter runs cProfile on itself "
        "around its tasks. Writes OUT/profile.txt (top functions, all interpreters "
        "together and each one), OUT/profile.pstats (python -m pstats, snakeviz), "
        "OUT/flamegraph.svg and OUT/profile.speedscope.json "
        "(https://www.speedscope.app). Needs CPython 3.13 or newer.",
    )
    profile.add_argument(
        "-o",
        "--out",
        default="aiosubinterp-profile",
        help="folder for the report files (default ./aiosubinterp-profile); "
        "before SCRIPT, as the script's own arguments follow it",
    )
    profile.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    profile.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments of the script"
    )
    _add_serve(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(parser, args)
    if args.command == "profile":
        from aiosubinterp._engine.profiling import profile_script

        try:
            return profile_script(args.script, args.args, args.out)
        except ValueError as exc:
            parser.error(f"profile: {exc}")
    if args.command == "demo":
        for name in ("workers", "tasks", "span", "circles", "frames", "rounds"):
            if getattr(args, name) < 1:
                parser.error(f"--{name} must be at least 1")
        if args.serve:
            problem = missing("demo", "aiohttp")
            if problem:
                parser.error(f"demo --serve needs aiohttp; {problem}")
            if not 0 <= args.port <= 65535:
                parser.error("--port must be in [0, 65535]")
            from aiosubinterp.demo.live import serve

            return serve(args.host, args.port, args.circles, args.workers)
        if args.kind == "primes":
            from aiosubinterp.demo.primes import run_primes

            return asyncio.run(run_primes(args.workers, args.tasks, args.span))
        problem = missing("demo", "PIL")
        if problem:  # before the minutes of simulation whose pictures it could not write
            parser.error(f"demo: the pictures need Pillow; {problem}")
        from aiosubinterp.demo.zoo import run_demo

        try:
            return asyncio.run(
                run_demo(
                    args.circles,
                    args.frames,
                    args.workers,
                    args.contenders,
                    args.rounds,
                    args.seed,
                    args.out,
                )
            )
        except ValueError as exc:
            parser.error(str(exc))
    if args.command == "bench":
        problem = missing("bench", "matplotlib", "rich")
        if problem:
            parser.error(f"bench: the charts and progress bar need matplotlib and rich; {problem}")
        from aiosubinterp.demo.bench import run_bench

        return run_bench(args.quick, args.only, args.out, args.dir)
    if args.command == "check":
        if args.jobs < 1:
            parser.error("--jobs must be at least 1")
        if not args.timeout > 0:
            parser.error("--timeout must be a positive number of seconds")
        from aiosubinterp.demo.check import run_check

        if args.fallback == "copy":
            from aiosubinterp._engine.fallback import copies_unavailable

            why = copies_unavailable()
            if why is not None:
                parser.error(f"--fallback copy: {why}")
        return run_check(args.modules, args.json, args.timeout, args.jobs, args.fallback)
    from aiosubinterp.demo.info import run_info

    return run_info(not args.no_probe)


if __name__ == "__main__":
    sys.exit(main())
