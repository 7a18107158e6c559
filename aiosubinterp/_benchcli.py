"""``python -m aiosubinterp bench``: run benchmarks/bench_*.py, write a Markdown report, charts."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from typing import Any

from aiosubinterp import _render

__all__ = ["run_bench"]


def _bar(done: int, total: int, name: str, started: float) -> None:
    width = 24
    filled = width * done // max(total, 1)
    print(f"\r[{'#' * filled}{'-' * (width - filled)}] {done}/{total} "
          f"{time.perf_counter() - started:5.0f} s  {name:<28}", end="", file=sys.stderr,
          flush=True)


def _chart(path: str, targets: list[dict[str, Any]]) -> None:
    """One bar per target: measured / limit (the tick at 1.0 is the target), green PASS, red MISS.

    Unlabelled pixels: the report lists the targets in the same order, top to bottom.
    """
    palette = [(255, 255, 255), (60, 60, 60), (102, 187, 106), (239, 83, 80), (200, 200, 200)]
    w, row = 480, 28
    h = max(1, len(targets)) * row + 8
    pixels = bytearray(w * h)
    scale_max = 3.0  # the bar spans 0 .. 3x the limit
    for k, t in enumerate(targets):
        measured, limit = t.get("measured"), t.get("limit")
        if not isinstance(measured, (int, float)) or not limit or measured != measured:
            continue
        # "Good" is always to the right: for <= targets, the ratio is inverted.
        if t["op"] == ">=":
            ratio = measured / limit
        else:
            ratio = limit / measured if measured else scale_max
        colour = 2 if t.get("verdict") == "PASS" else 3
        y0 = 4 + k * row + 4
        length = int(min(ratio, scale_max) / scale_max * (w - 20))
        for y in range(y0, y0 + row - 8):
            pixels[y * w + 10:y * w + 10 + length] = bytes((colour,)) * length
    tick = 10 + int((w - 20) / scale_max)
    for y in range(h):
        pixels[y * w + tick] = 1
        pixels[y * w + 10] = 4
    _render.write_png(path, w, h, pixels, palette)


def run_bench(quick: bool, only: str | None, out: str, bench_dir: str | None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bench_dir = bench_dir or os.path.join(root, "benchmarks")
    scripts = sorted(glob.glob(os.path.join(bench_dir, "bench_*.py")))
    if only:
        wanted = {f"bench_{n.strip().removeprefix('bench_').removesuffix('.py')}.py"
                  for n in only.split(",")}
        scripts = [s for s in scripts if os.path.basename(s) in wanted]
    if not scripts:
        print(f"no benchmarks found in {bench_dir} (only={only!r})", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    started = time.perf_counter()
    sections, failed = [], []
    for i, script in enumerate(scripts):
        name = os.path.basename(script)
        _bar(i, len(scripts), name, started)
        cmd = [sys.executable, script, "--json"] + (["--quick"] if quick else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root,
                              timeout=900 if not quick else 180)
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            failed.append(name)
            sections.append(f"## {name}\n\nfailed (exit {proc.returncode}):\n\n```\n"
                            f"{proc.stderr[-1500:]}\n```\n")
            continue
        chart = f"{name.removesuffix('.py')}.png"
        _chart(os.path.join(out, chart), doc.get("targets", []))
        lines = [f"## {doc.get('title', name)}", "",
                 f"`{' '.join(['python', 'benchmarks/' + name, *cmd[2:]])}`, "
                 f"{doc['meta'].get('date', '')}, {doc['meta'].get('python', '')}, "
                 f"load {doc['meta'].get('loadavg_start', '?')}", "",
                 "| # | target | measured | limit | verdict |", "| --- | --- | --- | --- | --- |"]
        for k, t in enumerate(doc.get("targets", []), 1):
            m = t.get("measured")
            lines.append(f"| {k} | {t['what']} | "
                         f"{m:.3g}{t.get('unit', '')} | {t['op']} {t['limit']:g}{t.get('unit', '')}"
                         f" | {t['verdict']} |" if isinstance(m, (int, float))
                         else f"| {k} | {t['what']} | n/a | {t['op']} {t['limit']} | n/a |")
        lines += ["", f"![targets of {name}]({chart})",
                  "", "Chart: one bar per target, top to bottom as numbered; bar length = "
                  "how far the measurement is from the target (the dark tick is the target, "
                  "right is better); green PASS, red MISS.", ""]
        if doc.get("errors"):
            lines += ["Errors: " + ", ".join(doc["errors"]), ""]
        sections.append("\n".join(lines))
    _bar(len(scripts), len(scripts), "done", started)
    print(file=sys.stderr)
    report = os.path.join(out, "report.md")
    with open(report, "w") as f:
        f.write(f"# aiosubinterp benchmarks{' (--quick)' if quick else ''}\n\n"
                + "\n".join(sections))
    print(f"report: {os.path.abspath(report)}")
    print(f"charts: {os.path.abspath(out)}/bench_*.png")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0
