"""The circles zoo: the same simulation on one thread, threads, processes and interpreters.

Every contender steps the canvas split into vertical strips with
:mod:`aiosubinterp.demo.circles`; they differ only in who runs a strip and how
neighbouring strips swap their border circles each frame:

- ``single``: one thread, the whole canvas as one region (the reference);
- ``threads``: one ``threading.Thread`` per strip, ``queue.SimpleQueue``
  links (one GIL: what threads cost);
- ``processes``: one ``multiprocessing`` process (spawn) per strip,
  ``multiprocessing.Pipe`` links straight between neighbours;
- ``aiosubinterp``: one interpreter of an :class:`InterpreterPool` per
  strip, channels straight between neighbours (never through the main
  interpreter), awaited from asyncio.

Workers (pool, processes) are started before the clock starts; the clock
covers handing out the strips, all frames, and collecting the result.
Every contender's final circles are compared with the reference's: they
must be equal bit for bit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import queue
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiosubinterp.demo import circles as _circles
from aiosubinterp.demo.circles import Circle, Params

__all__ = [
    "CONTENDERS",
    "Outcome",
    "machine_busy",
    "reference_result",
    "run_contender",
    "run_demo",
    "run_every_frame",
]

CONTENDERS = ("single", "threads", "processes", "aiosubinterp")


@dataclasses.dataclass
class Outcome:
    name: str
    label: str
    wall: float
    cpu: float
    circles: list[Circle]

    def fps(self, frames: int) -> float:
        return frames / self.wall if self.wall > 0 else float("inf")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _by_id(circles: Sequence[Circle]) -> list[Circle]:
    return sorted(circles)


def _links(n: int, make: Callable[[], tuple[Any, Any]]) -> list[tuple[Any, Any, Any, Any]]:
    """Per region: (send_left, recv_left, send_right, recv_right); None at the canvas edges."""
    rightward = [make() for _ in range(n - 1)]  # k -> k+1
    leftward = [make() for _ in range(n - 1)]  # k+1 -> k
    out = []
    for k in range(n):
        send_left = leftward[k - 1][0] if k > 0 else None
        recv_left = rightward[k - 1][1] if k > 0 else None
        send_right = rightward[k][0] if k < n - 1 else None
        recv_right = leftward[k][1] if k < n - 1 else None
        out.append((send_left, recv_left, send_right, recv_right))
    return out


def _run_single(circles: list[Circle], params: Params, frames: int, workers: int) -> list[Circle]:
    return _circles.step_frames(circles, params, frames)


def _run_threads(circles: list[Circle], params: Params, frames: int, workers: int) -> list[Circle]:
    regions = _circles.split(circles, params, workers)
    links = _links(workers, lambda: (q := queue.SimpleQueue[Any](), q))
    results: list[list[Circle]] = [[] for _ in regions]
    errors: list[BaseException] = []

    def body(k: int) -> None:
        lo, hi, owned = regions[k]
        try:
            results[k] = _circles.queue_region(owned, lo, hi, params, frames, *links[k])
        except BaseException as exc:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(exc)

    threads = [
        threading.Thread(target=body, args=(k,), name=f"circles-{k}") for k in range(workers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [c for part in results for c in part]


class _ProcessRegions:
    """``workers`` spawned processes, linked by pipes, started (and imported) ahead of time."""

    def __init__(self, workers: int) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # no fork: this process may have threads
        self.controls = []
        self.procs = []
        pipes = [ctx.Pipe() for _ in range(workers - 1)]  # duplex: one per border
        for k in range(workers):
            parent, child = ctx.Pipe()
            left = pipes[k - 1][1] if k > 0 else None
            right = pipes[k][0] if k < workers - 1 else None
            proc = ctx.Process(
                target=_circles.pipe_region,
                args=(child, left, right),
                name=f"circles-{k}",
                daemon=True,
            )
            proc.start()
            child.close()
            self.controls.append(parent)
            self.procs.append(proc)
        for a, b in pipes:
            a.close()
            b.close()
        for control in self.controls:
            if control.recv() != "ready":
                raise RuntimeError("a circles process did not start")

    def run(self, circles: list[Circle], params: Params, frames: int) -> list[Circle]:
        regions = _circles.split(circles, params, len(self.procs))
        for control, (lo, hi, owned) in zip(self.controls, regions, strict=True):
            control.send((owned, lo, hi, params, frames))
        out = [c for control in self.controls for c in control.recv()]
        for proc in self.procs:
            proc.join()
        return out

    def close(self) -> None:
        for control in self.controls:
            control.close()
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join()
            proc.close()


async def _run_interpreters(
    pool: Any, circles: list[Circle], params: Params, frames: int, workers: int
) -> list[Circle]:
    import aiosubinterp as asi

    regions = _circles.split(circles, params, workers)
    links = _links(workers, lambda: asi.open_channel(maxsize=2))
    tasks = [
        pool.submit(_circles.channel_region, owned, lo, hi, params, frames, *links[k])
        for k, (lo, hi, owned) in enumerate(regions)
    ]
    # The ends passed to a worker are the same ends: each worker closes its
    # own when it finishes (channel_region's finally), which ends its
    # neighbours' streams; nothing to close here.
    del links
    parts = await asyncio.gather(*tasks)
    return [c for part in parts for c in part]


def _label(name: str, workers: int) -> str:
    return {
        "single": "single thread",
        "threads": f"threading, {workers} threads",
        "processes": f"multiprocessing, {workers} procs + pipes",
        "aiosubinterp": f"aiosubinterp, {workers} interpreters",
    }[name]


async def run_contender(
    name: str, circles: list[Circle], params: Params, frames: int, workers: int
) -> Outcome:
    """Run one contender; the clock excludes starting its workers."""
    label = _label(name, workers)
    if name in ("single", "threads"):
        fn = _run_single if name == "single" else _run_threads
        cpu0, t0 = _cpu(), time.perf_counter()
        out = fn(circles, params, frames, workers)
        wall = time.perf_counter() - t0
        return Outcome(name, label, wall, (_cpu() - cpu0) / wall, _by_id(out))
    if name == "processes":
        loop = asyncio.get_running_loop()
        procs = await loop.run_in_executor(None, _ProcessRegions, workers)
        try:
            cpu0, t0 = _cpu(), time.perf_counter()
            out = await loop.run_in_executor(None, procs.run, circles, params, frames)
            wall = time.perf_counter() - t0
            cpu = _cpu() - cpu0  # the children were joined: their CPU time is counted
        finally:
            await loop.run_in_executor(None, procs.close)
        return Outcome(name, label, wall, cpu / wall, _by_id(out))
    if name == "aiosubinterp":
        import aiosubinterp as asi

        async with asi.InterpreterPool(workers, preload=("aiosubinterp.demo.circles",)) as pool:
            cpu0, t0 = _cpu(), time.perf_counter()
            out = await _run_interpreters(pool, circles, params, frames, workers)
            wall = time.perf_counter() - t0
            cpu = _cpu() - cpu0
        return Outcome(name, label, wall, cpu / wall, _by_id(out))
    raise ValueError(f"unknown contender {name!r}; choose from {', '.join(CONTENDERS)}")


async def run_every_frame(
    name: str, circles: list[Circle], params: Params, frames: int, workers: int
) -> tuple[float, list[tuple[float, ...]]]:
    """FPS when every frame's positions return to the main interpreter, and the last frame.

    The contender as ``demo --serve`` runs it (:mod:`aiosubinterp.demo.stream`):
    after each frame, every region packs its circles as float32 ``x, y, r``
    and hands them to main, which assembles the frame. Timed from the first
    frame's arrival in main to the last's (starting the workers excluded).
    Returns (FPS, the last frame's sorted ``(x, y, r)``).

    Cancellation: the run is halted (each worker stops at its next frame);
    its threads end and its interpreters and processes are cleaned up
    shortly after, without this coroutine waiting for all of them.
    """
    from aiosubinterp.demo import stream

    run = stream.Run(name, CONTENDERS.index(name), workers, frames)
    run.state = "running"
    await stream.RUNNERS[name](run, circles, params, workers, frames, 1)
    first, latest = run.sink.first, run.sink.latest
    if first is None or latest is None:
        raise RuntimeError(f"{name}: no frame reached the main interpreter")
    fps = (latest[0] - first[0]) / (latest[2] - first[1]) if latest[0] > first[0] else float("nan")
    return fps, sorted(stream.parse_frame(latest[1])[4])


def float32_positions(circles: Sequence[Circle]) -> list[tuple[float, ...]]:
    """Sorted ``(x, y, r)`` rounded to float32, as the frames sent to main carry them."""
    import struct

    n = len(circles)
    values = struct.unpack(
        f"<{3 * n}f", struct.pack(f"<{3 * n}f", *(v for c in circles for v in (c[1], c[2], c[5])))
    )
    return sorted(values[i : i + 3] for i in range(0, 3 * n, 3))


def reference_result(circles: list[Circle], params: Params, frames: int) -> list[Circle]:
    """The single-threaded result, sorted by id: what every contender must reproduce."""
    return _by_id(_circles.step_frames(circles, params, frames))


def machine_busy(start: tuple[int, int] | None = None) -> Any:
    """Cores busy machine-wide since ``start`` (a snapshot from calling this with no argument)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return (0, 0) if start is None else float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    snap = (sum(fields) - idle, sum(fields))
    if start is None:
        return snap
    total = snap[1] - start[1]
    return (snap[0] - start[0]) / total * (os.cpu_count() or 1) if total > 0 else float("nan")


async def run_demo(
    circles: int,
    frames: int,
    workers: int,
    contenders: Sequence[str],
    rounds: int,
    seed: int,
    out: str,
) -> int:
    """The ``demo`` command: every contender ``rounds`` times, a table, the pictures.

    Returns the exit code: 1 if a contender's circles differ from the reference.
    Raises ValueError (before anything runs) if the strips would be too narrow.
    """
    from aiosubinterp.demo import render

    contenders = list(contenders)
    params, initial = _circles.initial_state(circles, seed)
    _circles.split(initial, params, workers)  # a clear error before anything runs
    print(
        f"\n{circles:,} circles on a {params[0]:.0f}x{params[1]:.0f} canvas, "
        f"{frames} frames, {workers} regions, {rounds} round(s); "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        flush=True,
    )
    fps: dict[str, list[float]] = {name: [] for name in contenders}
    every: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    other: dict[str, list[float]] = {name: [] for name in contenders}
    labels: dict[str, str] = {}
    reference = reference_result(initial, params, frames)
    reference32 = float32_positions(reference)
    mismatched: set[str] = set()
    final = reference
    for r in range(rounds):
        k = r % len(contenders)  # rotate the order from round to round
        order = contenders[k:] + contenders[:k]
        for name in order:
            print(f"  round {r + 1}: {name} ...", end="", flush=True)
            busy0 = machine_busy()
            outcome = await run_contender(name, initial, params, frames, workers)
            busy = machine_busy(busy0)
            print(f" {outcome.fps(frames):.0f} fps", flush=True)
            labels[name] = outcome.label
            fps[name].append(outcome.fps(frames))
            cpu[name].append(outcome.cpu)
            other[name].append(max(0.0, busy - outcome.cpu))
            if outcome.circles != reference:
                mismatched.add(name)
            if name == "aiosubinterp":
                final = outcome.circles
            print(f"  round {r + 1}: {name}, every frame to main ...", end="", flush=True)
            every_fps, last = await run_every_frame(name, initial, params, frames, workers)
            print(f" {every_fps:.0f} fps", flush=True)
            every[name].append(every_fps)
            if last != reference32:
                mismatched.add(name)
    base = statistics.median(fps["single"]) if "single" in fps else None
    every_base = statistics.median(every["single"]) if "single" in every else None
    print(
        f"\n  {'contender':<36} {'FPS':>7} {'vs single':>10} {'CPU/wall':>9} "
        f"{'other load':>11} {'every-frame FPS':>16} {'vs single':>10}  same positions"
    )
    for name in contenders:
        f = statistics.median(fps[name])
        ratio = f"{f / base:9.2f}x" if base else f"{'-':>10}"
        e = statistics.median(every[name])
        every_ratio = f"{e / every_base:9.2f}x" if every_base else f"{'-':>10}"
        print(
            f"  {labels[name]:<36} {f:7.1f} {ratio} {statistics.median(cpu[name]):9.2f} "
            f"{statistics.median(other[name]):11.2f} {e:16.1f} {every_ratio}  "
            f"{'NO' if name in mismatched else 'yes'}"
        )
    print(
        "\n  FPS: median over the rounds. CPU/wall: cores this process tree kept busy;\n"
        "  other load: cores busy with other processes meanwhile (noise on a shared machine).\n"
        "  every-frame FPS: the same contender with every frame's positions returned to the\n"
        "  main interpreter (as a game's, to be drawn; as `demo --serve` runs it), from the\n"
        "  first frame's arrival to the last's.\n"
        f"  same positions: every circle equal, bit for bit, to the single-threaded run "
        f"after {frames} frames (both ways)."
    )
    png, gif = render.pictures(out, params, initial, final, workers, frames)
    where, png, gif = (os.path.abspath(p) for p in (out, png, gif))  # noqa: ASYNC240 - the demo's own files, after the timed part
    print(f"\n  images in {where}/:\n    final frame:  {png}\n    first frames: {gif}")
    return 1 if mismatched else 0
