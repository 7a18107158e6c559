"""Command line: ``python -m aiosubinterp demo | bench | info``."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time

__all__ = ["main"]


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


async def _timed(label: str, coro_fn) -> tuple[str, float, float, object]:
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    result = await coro_fn()
    wall = time.perf_counter() - t0
    return label, wall, (_cpu_seconds() - cpu0) / wall, result


async def _demo(workers: int, tasks: int, span: int) -> int:
    import aiosubinterp as asi
    from aiosubinterp._demowork import count_primes

    chunks = [(i * span, (i + 1) * span) for i in range(tasks)]

    async def serial():
        return sum(count_primes(a, b) for a, b in chunks)

    async def threads():
        parts = []
        for k in range(0, len(chunks), workers):  # at most `workers` threads at once
            batch = chunks[k:k + workers]
            parts += await asyncio.gather(
                *(asyncio.to_thread(count_primes, a, b) for a, b in batch))
        return sum(parts)

    async with asi.InterpreterPool(workers) as pool:
        await pool.run(count_primes, 0, 10)  # warm: the function's module is imported

        async def interpreters():
            return sum(await asyncio.gather(*(pool.run(count_primes, a, b) for a, b in chunks)))

        rows = [
            await _timed("one thread (plain Python)", serial),
            await _timed(f"asyncio.to_thread, {workers} threads", threads),
            await _timed(f"aiosubinterp, {workers} interpreters", interpreters),
        ]

    results = {row[3] for row in rows}
    base = rows[0][1]
    print(f"\nCounting primes below {tasks * span:,} in {tasks} tasks on {os.cpu_count()} CPUs "
          f"(Python {platform.python_version()}):\n")
    print(f"  {'how':<36} {'seconds':>8} {'speedup':>8} {'CPU/wall':>9}")
    for label, wall, cpu_ratio, _ in rows:
        print(f"  {label:<36} {wall:8.2f} {base / wall:7.2f}x {cpu_ratio:9.2f}")
    print(f"\n  every contender found {rows[0][3]:,} primes" if len(results) == 1
          else f"\n  MISMATCH: {sorted(results)}")
    print("  CPU/wall near the worker count means the work really ran on that many cores;\n"
          "  threads stay near 1.0 because they share the main interpreter's GIL.")
    return 0 if len(results) == 1 else 1


_PROBE_MODULES = ("json", "re", "math", "collections", "datetime", "decimal", "fractions",
                  "hashlib", "pickle", "sqlite3", "ssl", "zlib", "xml.etree.ElementTree",
                  "asyncio", "ctypes", "readline", "numpy", "uvloop")

_PROBE_SCRIPT = """
import asyncio, sys
import aiosubinterp as asi
from aiosubinterp._demowork import probe_import

async def main(name):
    async with asi.InterpreterPool(1) as pool:
        try:
            print("OK", await pool.run(probe_import, name))
        except asi.ModuleRefusedError as exc:
            print("refused", f"{exc.name} is not built for own-GIL interpreters")
        except ModuleNotFoundError:
            print("absent", "not installed")
        except ImportError as exc:
            print("error", type(exc).__name__ + ": " + str(exc).splitlines()[0])

asyncio.run(main(sys.argv[1]))
"""


def _probe(name: str) -> tuple[str, str]:
    """Import ``name`` in a worker of a fresh child process (some imports crash CPython)."""
    import subprocess

    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT, name], capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "error", "timed out after 60 s"
    status, _, detail = proc.stdout.strip().partition(" ")
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return ("crash" if status == "" else f"{status}, then crash",
                f"child exit code {proc.returncode}: {tail[:100]}")
    return status, detail


def _info(probe: bool) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from aiosubinterp import _core, _quirks
    from aiosubinterp._engine import hub as _loop
    from aiosubinterp._engine import lifecycle as _lifecycle

    print(f"aiosubinterp {__import__('aiosubinterp').__version__}")
    print(f"Python {platform.python_version()} ({sys.executable})")
    own_gil = sys.version_info >= (3, 12)
    print(f"per-interpreter GIL (PEP 684): {'yes' if own_gil else 'no: needs 3.12+'}")
    print(f"CPUs: {os.cpu_count()} in the machine, {_lifecycle.default_size()} usable "
          "(default pool size)")
    print(f"wakeup: {_loop.wakeup_mechanism()}")
    print(f"C accelerators kept out of workers: {', '.join(_quirks.blocked_modules()) or 'none'}")
    print(f"main interpreter id: {_core.main_interpreter_id()}")
    if not probe:
        return 0
    print("\nimporting common modules in a worker (each in a child process):")
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as ex:
        results = list(ex.map(_probe, _PROBE_MODULES))
    for name, (status, detail) in zip(_PROBE_MODULES, results, strict=True):
        print(f"  {name:<24} {status:<8} {detail}")
    return 0


async def _circles_demo(args: argparse.Namespace) -> int:
    import statistics

    from aiosubinterp import _circles, _zoo

    params, initial = _circles.initial_state(args.circles, args.seed)
    _circles.split(initial, params, args.workers)  # a clear error before anything runs
    print(f"\n{args.circles:,} circles on a {params[0]:.0f}x{params[1]:.0f} canvas, "
          f"{args.frames} frames, {args.workers} regions, {args.rounds} round(s); "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
    fps: dict[str, list[float]] = {name: [] for name in args.contenders}
    cpu: dict[str, list[float]] = {name: [] for name in args.contenders}
    other: dict[str, list[float]] = {name: [] for name in args.contenders}
    labels: dict[str, str] = {}
    reference = _zoo.reference_result(initial, params, args.frames)
    mismatched: set[str] = set()
    final = reference
    for r in range(args.rounds):
        k = r % len(args.contenders)  # rotate the order from round to round
        order = args.contenders[k:] + args.contenders[:k]
        for name in order:
            print(f"  round {r + 1}: {name} ...", end="", flush=True)
            busy0 = _zoo.machine_busy()
            outcome = await _zoo.run_contender(name, initial, params, args.frames, args.workers)
            busy = _zoo.machine_busy(busy0)
            print(f" {outcome.fps(args.frames):.0f} fps", flush=True)
            labels[name] = outcome.label
            fps[name].append(outcome.fps(args.frames))
            cpu[name].append(outcome.cpu)
            other[name].append(max(0.0, busy - outcome.cpu))
            if outcome.circles != reference:
                mismatched.add(name)
            if name == "aiosubinterp":
                final = outcome.circles
    base = statistics.median(fps["single"]) if "single" in fps else None
    print(f"\n  {'contender':<36} {'FPS':>7} {'vs single':>10} {'CPU/wall':>9} "
          f"{'other load':>11}  same positions")
    for name in args.contenders:
        f = statistics.median(fps[name])
        ratio = f"{f / base:9.2f}x" if base else f"{'-':>10}"
        print(f"  {labels[name]:<36} {f:7.1f} {ratio} {statistics.median(cpu[name]):9.2f} "
              f"{statistics.median(other[name]):11.2f}  "
              f"{'NO' if name in mismatched else 'yes'}")
    print("\n  FPS: median over the rounds. CPU/wall: cores this process tree kept busy;\n"
          "  other load: cores busy with other processes meanwhile (noise on a shared machine).\n"
          f"  same positions: every circle equal, bit for bit, to the single-threaded run "
          f"after {args.frames} frames.")
    png, gif = _zoo.render(args.out, params, initial, final, args.workers)
    where, png, gif = (os.path.abspath(p) for p in (args.out, png, gif))  # noqa: ASYNC240 - the demo's own files, after the timed part
    print(f"\n  images in {where}/:\n    final frame:  {png}\n    first frames: {gif}")
    return 1 if mismatched else 0


def _contenders(value: str) -> list[str]:
    from aiosubinterp._zoo import CONTENDERS

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in CONTENDERS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown contender(s) {', '.join(bad) or '(none)'}; choose from "
            f"{', '.join(CONTENDERS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aiosubinterp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cores = os.cpu_count() or 2
    demo = sub.add_parser(
        "demo", help="bouncing circles: one thread vs threads vs processes vs interpreters",
        description="The circles zoo: the same simulation (identical physics, checked) on one "
                    "thread, threads, processes and interpreters; prints frames per second and "
                    "writes a PNG of the final frame and a GIF of the first frames. "
                    "--kind primes runs the older CPU-bound speedup table instead.")
    demo.add_argument("--kind", choices=("circles", "primes"), default="circles")
    demo.add_argument("--circles", type=int, default=3000, help="number of circles (3000)")
    demo.add_argument("--frames", type=int, default=200, help="frames per contender (200)")
    demo.add_argument("--workers", type=int, default=cores,
                      help="regions: interpreters, threads, processes (default: CPU count)")
    demo.add_argument("--contenders", type=_contenders,
                      default=["single", "threads", "processes", "aiosubinterp"],
                      help="comma-separated subset of single,threads,processes,aiosubinterp")
    demo.add_argument("--rounds", type=int, default=3,
                      help="rounds over all contenders, order rotated; the median counts (3)")
    demo.add_argument("--seed", type=int, default=0, help="random seed of the initial state")
    demo.add_argument("--out", default="aiosubinterp-demo",
                      help="folder for the images (default ./aiosubinterp-demo)")
    demo.add_argument("--tasks", type=int, default=8, help="primes: number of tasks (8)")
    demo.add_argument("--span", type=int, default=150_000,
                      help="primes: numbers checked per task (150000)")
    bench = sub.add_parser("bench", help="run benchmarks/bench_*.py; Markdown report + PNG charts")
    bench.add_argument("--quick", action="store_true", help="pass --quick: rough numbers, fast")
    bench.add_argument("--only", default=None,
                       help="comma-separated benchmark names (e.g. roundtrip,channel)")
    bench.add_argument("--out", default="aiosubinterp-bench",
                       help="folder for report.md and the charts (default ./aiosubinterp-bench)")
    bench.add_argument("--dir", default=None, help="the benchmarks/ folder (default: the repo's)")
    info = sub.add_parser("info", help="what this Python and machine offer")
    info.add_argument("--no-probe", action="store_true",
                      help="skip importing common modules in a worker")
    args = parser.parse_args(argv)
    if args.command == "demo":
        for name in ("workers", "tasks", "span", "circles", "frames", "rounds"):
            if getattr(args, name) < 1:
                parser.error(f"--{name} must be at least 1")
        if args.kind == "primes":
            return asyncio.run(_demo(args.workers, args.tasks, args.span))
        try:
            return asyncio.run(_circles_demo(args))
        except ValueError as exc:
            parser.error(str(exc))
    if args.command == "bench":
        from aiosubinterp._benchcli import run_bench

        return run_bench(args.quick, args.only, args.out, args.dir)
    return _info(not args.no_probe)


if __name__ == "__main__":
    sys.exit(main())
