#!/usr/bin/env python
"""Soak: numpy, orjson, lxml and pydantic in private copies, 4 workers, for minutes.

``InterpreterPool(4, fallback="copy")`` runs the four
packages' workloads (scripts/_soak_work.py: each takes a seed and returns a
digest) without pause from 8 concurrent callers for ``--minutes``; every
result is checked against the digest the main interpreter computed for that
seed. Every ``--interval`` seconds the process's RSS (``/proc/self/status``)
and PSS (``/proc/self/smaps_rollup``) are sampled: the interpreters live in
this process, so these are the soak's whole memory.

Printed: calls done per package, wrong results and failed calls (must be 0),
the memory series, and the RSS slope after warm-up (the first 20% of the
run). Exit status 1 if any result is wrong or failed, or if RSS grew by more
than 10% from the end of warm-up to the end.

    python scripts/soak-copies.py                 # 10 minutes
    python scripts/soak-copies.py --minutes 1 --json soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEEDS = range(1, 33)


def memory() -> tuple[float, float]:
    """(RSS, PSS) of this process in MiB."""
    rss = pss = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) / 1024
    return rss, pss


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


async def soak(args: argparse.Namespace) -> dict:
    sys.path[:0] = [ROOT, HERE]  # workers get main's sys.path
    import _soak_work as work

    import aiosubinterp as asi

    packages = [name for name in args.packages.split(",") if name]
    done: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    failed: list[str] = []
    samples: list[tuple[float, float, float]] = []  # (seconds, RSS MiB, PSS MiB)
    seconds = args.minutes * 60
    async with asi.InterpreterPool(args.workers, fallback="copy") as pool:
        # The pool set OPENBLAS_NUM_THREADS and the like before main loads numpy here.
        expected = {(name, seed): work.WORKLOADS[name](seed) for name in packages for seed in SEEDS}
        start = time.monotonic()
        deadline = start + seconds

        async def caller(rng: random.Random) -> None:
            while time.monotonic() < deadline:
                name = rng.choice(packages)
                seed = rng.choice(SEEDS)
                try:
                    result = await pool.run(work.WORKLOADS[name], seed)
                except Exception as exc:  # noqa: BLE001 - counted and printed, the soak goes on
                    failed.append(f"{name}({seed}): {type(exc).__name__}: {exc}"[:300])
                    continue
                done[name] += 1
                if result != expected[name, seed]:
                    wrong.append(f"{name}({seed}): {result} != {expected[name, seed]}")

        async def sampler() -> None:
            while True:
                rss, pss = memory()
                elapsed = time.monotonic() - start
                samples.append((round(elapsed, 1), round(rss, 1), round(pss, 1)))
                print(
                    f"{elapsed:7.1f} s  RSS {rss:8.1f} MiB  PSS {pss:8.1f} MiB  "
                    f"calls {sum(done.values()):7d}  wrong {len(wrong)}  failed {len(failed)}",
                    flush=True,
                )
                if time.monotonic() >= deadline:
                    return
                await asyncio.sleep(min(args.interval, max(0.0, deadline - time.monotonic())))

        callers = [caller(random.Random(i)) for i in range(args.workers * 2)]
        await asyncio.gather(sampler(), *callers)
        stats = pool.statistics()
    after = [(t, rss) for t, rss, _ in samples if t >= 0.2 * seconds]
    base = after[0][1] if after else 0.0
    growth = (after[-1][1] - base) / base * 100 if after and base else 0.0
    return {
        "python": sys.version.split()[0],
        "minutes": args.minutes,
        "workers": args.workers,
        "calls": dict(done),
        "wrong": wrong,
        "failed": failed,
        "samples": samples,
        "rss_slope_mib_per_min": round(slope(after) * 60, 3),
        "rss_growth_after_warmup_percent": round(growth, 2),
        "copies": stats.get("copies"),
        "copies_bytes": stats.get("copies_bytes"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--interval", type=float, default=10, help="seconds between samples")
    parser.add_argument("--packages", default="numpy,orjson,lxml,pydantic")
    parser.add_argument("--json", help="write the summary and the series to this file")
    args = parser.parse_args()
    print(
        f'soak: {args.workers} workers, fallback="copy", {args.minutes} min, Python '
        f"{sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    result = asyncio.run(soak(args))
    print(
        "\ncalls per package: "
        + ", ".join(f"{k} {v}" for k, v in sorted(result["calls"].items()))
        + f" (total {sum(result['calls'].values())})"
    )
    print(f"wrong results: {len(result['wrong'])}; failed calls: {len(result['failed'])}")
    for line in (result["wrong"] + result["failed"])[:20]:
        print("  " + line)
    print(f"copies made: {result['copies']} ({(result['copies_bytes'] or 0) / 2**20:.1f} MiB)")
    print("RSS series (MiB): " + " ".join(f"{rss:.0f}" for _, rss, _ in result["samples"]))
    print("PSS series (MiB): " + " ".join(f"{pss:.0f}" for _, _, pss in result["samples"]))
    print(
        f"after warm-up (first 20%): RSS slope {result['rss_slope_mib_per_min']} MiB/min, "
        f"growth {result['rss_growth_after_warmup_percent']}%"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    bad = result["wrong"] or result["failed"] or result["rss_growth_after_warmup_percent"] > 10
    print("FAIL" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
