"""``python -m aiosubinterp bench``: run benchmarks/bench_*.py, write a Markdown report and charts.

Each benchmark runs as ``bench_x.py --json`` in a child process; its JSON
gives the report's table of targets and one PNG per benchmark (matplotlib,
the ``bench`` extra), which stands alone: the contenders' headline figure,
one labelled bar each, and every target with its limit drawn.
Progress goes to stderr: a rich progress bar on a terminal, plain lines
otherwise (a log, CI).
"""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Headline", "chart", "headline", "run_bench"]

# A contender panel: (label of the figure, unit, "higher" or "lower" is better, values).
Headline = tuple[str, str, str, dict[str, float]]


def _p(key: str) -> Callable[[Any], float]:
    return lambda stats: float(stats[key])


def _headline_of(summary: dict[str, Any], name: str) -> Headline | None:
    """The one figure per contender that says who won, from a benchmark's JSON summary."""
    if "median_tasks_per_s" in summary:
        return ("median tasks per second", "tasks/s", "higher", summary["median_tasks_per_s"])
    if "speedup" in summary:
        return ("speedup over one thread (serial)", "x", "higher", summary["speedup"])
    if "lag_ms" in summary:
        return (
            "event-loop lag p99 (1 ms ticker)",
            "ms",
            "lower",
            {k: _p("p99")(v) for k, v in summary["lag_ms"].items()},
        )
    if "http" in summary:  # bench_http (wrk)
        return (
            "/ping p99 while /primes is loaded (wrk)",
            "ms",
            "lower",
            {k: float(v["light_p99_ms"]) for k, v in summary["http"].items()},
        )
    if "requests_per_s" in summary:  # bench_serve (wrk)
        return (
            "/plaintext requests per second (wrk)",
            "req/s",
            "higher",
            summary["requests_per_s"],
        )
    if "records_per_s" in summary:  # bench_logging
        return (
            "log records per second, kept by main's handler",
            "records/s",
            "higher",
            summary["records_per_s"],
        )
    if "medians" in summary:  # bench_channel
        return (
            "small items per second, interpreter -> loop",
            "items/s",
            "higher",
            {k: float(v["small_i2l"]) for k, v in summary["medians"].items()},
        )
    if "stats" in summary:
        stats = summary["stats"]
        if name == "bench_buffer":
            return (
                "64 MiB echo round trip, p50",
                "µs",
                "lower",
                {
                    k.removesuffix(" 64MiB-echo"): _p("p50")(v)
                    for k, v in stats.items()
                    if k.endswith(" 64MiB-echo")
                },
            )
        return (
            "round trip of a trivial task, p50",
            "µs",
            "lower",
            {k: _p("p50")(v) for k, v in stats.items()},
        )
    firsts = {
        k: v["first_result_ms"]["p50"]
        for k, v in summary.items()
        if isinstance(v, dict) and isinstance(v.get("first_result_ms"), dict)
    }
    if firsts:  # bench_startup, bench_coldstart
        return ("pool creation to first result, p50", "ms", "lower", firsts)
    return None


def headline(doc: dict[str, Any]) -> Headline | None:
    """The contender panel of a benchmark's chart, or None if its summary has no such figure."""
    name = str(doc.get("benchmark", "")).removesuffix(".py")
    try:
        found = _headline_of(doc.get("summary") or {}, name)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a summary of another shape: the chart shows the targets only
    if not found or not found[3]:
        return None
    return found


# Contenders that are aiosubinterp under another name (bench_dask's plugin).
_OURS_ALSO = frozenset({"dask interpreters"})


def _is_ours(name: str) -> bool:
    return name.startswith("aiosubinterp") or name in _OURS_ALSO


def _number(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) else math.nan


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _wrap(text: str, width: int = 44) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def chart(path: str, doc: dict[str, Any]) -> None:
    """One PNG for one benchmark's JSON ``doc``: title, contenders, targets with their limits."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    head = headline(doc)
    targets = [t for t in doc.get("targets", []) if isinstance(t, dict)]
    heights = [max(2, n) * 0.45 + 1.2 for n in (len(head[3]) if head else 0, len(targets)) if n]
    fig = Figure(figsize=(11, 1.2 + sum(heights) if heights else 3), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg backend, without pyplot's global state
    meta = doc.get("meta") or {}
    quick = " (--quick: rough numbers)" if (doc.get("params") or {}).get("quick") else ""
    fig.suptitle(
        f"{doc.get('title', doc.get('benchmark', 'benchmark'))}\n"
        f"Python {meta.get('python', '?')}, {meta.get('date', '')}{quick}",
        fontsize=11,
    )
    if not heights:
        fig.text(
            0.5,
            0.5,
            "no figures: the benchmark reported neither contenders nor targets",
            ha="center",
        )
    else:
        axes = list(fig.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0])
        if head:
            _contenders_panel(axes.pop(0), head, targets)
        if targets:
            _targets_panel(axes.pop(0), targets, Line2D, Patch)
    # The title goes into the PNG's metadata too: a test (or a reader's tool) can check it.
    fig.savefig(path, metadata={"Title": str(doc.get("title", doc.get("benchmark", "")))})


def _contenders_panel(ax: Any, head: Headline, targets: list[dict[str, Any]]) -> None:
    what, unit, better, values = head
    names = list(values)
    nums = [_number(values[n]) for n in names]
    finite = [v for v in nums if not math.isnan(v)]
    ours = [_is_ours(n) for n in names]
    colours = ["tab:blue" if o else "tab:gray" for o in ours]
    ys = range(len(names))
    ax.barh(ys, [0 if math.isnan(v) else v for v in nums], color=colours)
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    top = max(finite, default=1.0) or 1.0
    log_hint = top / min((v for v in finite if v > 0), default=top) > 100
    for y, v in zip(ys, nums, strict=True):
        ax.text(
            (0 if math.isnan(v) else v) * (1.1 if log_hint else 1)
            + (0 if log_hint else top * 0.01),
            y,
            f"{_fmt(v)} {unit}" if not math.isnan(v) else "n/a (did not run)",
            va="center",
            fontsize=9,
        )
    # A target in this panel's unit (not a ratio) is drawn where it lies.
    for t in targets:
        if str(t.get("unit", "")).strip() == unit and unit != "x":
            limit = _number(t.get("limit"))
            if not math.isnan(limit):
                ax.axvline(
                    limit,
                    color="black",
                    linestyle="--",
                    linewidth=1.5,
                    label=f"target: {t['what']} {t['op']} {_fmt(limit)} {unit}",
                )
                top = max(top, limit)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    low = min((v for v in finite if v > 0), default=top)
    log = top / low > 100  # else the small bars (often ours) would be invisible
    if log:
        ax.set_xscale("log")
        ax.set_xlim(low / 3, top * 20)
    else:
        ax.set_xlim(0, top * 1.25)
    ax.set_xlabel(
        f"{what}, {unit} ({better} is better"
        + ("; blue: aiosubinterp)" if any(ours) else ")")
        + ("; log scale" if log else "")
    )
    ax.set_title(f"Contenders: {what}", loc="left", fontsize=10)


def _targets_panel(ax: Any, targets: list[dict[str, Any]], Line2D: Any, Patch: Any) -> None:
    colour = {"PASS": "tab:green", "MISS": "tab:red"}
    measured = [_number(t.get("measured")) for t in targets]
    limits = [_number(t.get("limit")) for t in targets]
    ys = list(range(len(targets)))
    ax.barh(
        ys,
        [0 if math.isnan(v) else v for v in measured],
        color=[colour.get(str(t.get("verdict")), "lightgray") for t in targets],
    )
    ax.set_yticks(ys, [_wrap(str(t.get("what", "?"))) for t in targets], fontsize=8)
    ax.invert_yaxis()
    positive = [v for v in measured + limits if not math.isnan(v) and v > 0]
    lo, hi = min(positive, default=0.1), max(positive, default=1.0)
    log = hi / lo > 30
    if log:
        ax.set_xscale("log")
        ax.set_xlim(lo / 3, hi * 30)
    else:
        ax.set_xlim(0, hi * 1.6)
    for y, t, v, limit in zip(ys, targets, measured, limits, strict=True):
        if not math.isnan(limit):
            ax.vlines(limit, y - 0.42, y + 0.42, color="black", linestyle="--", linewidth=1.5)
        unit = str(t.get("unit", ""))
        text = (
            f"{_fmt(v)}{unit}  (target {t.get('op')} {_fmt(limit)}{unit})  {t.get('verdict')}"
            if not math.isnan(v)
            else f"n/a: {t.get('note') or 'not measured here'}"
        )
        x = v if not math.isnan(v) else (lo / 2.5 if log else 0)
        ax.text(
            max(x, limit if not math.isnan(limit) else x) * (1.08 if log else 1.0)
            + (0 if log else hi * 0.02),
            y,
            text,
            va="center",
            fontsize=8,
        )
    ax.set_xlabel(
        "measured, in each row's unit (x: a ratio, as the target is worded)"
        + ("; log scale" if log else "")
    )
    ax.set_title("Targets: measured vs limit", loc="left", fontsize=10)
    ax.legend(
        handles=[
            Patch(color="tab:green", label="PASS"),
            Patch(color="tab:red", label="MISS"),
            Patch(color="lightgray", label="n/a"),
            Line2D([], [], color="black", linestyle="--", label="target limit"),
        ],
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncols=4,
        fontsize=8,
        frameon=False,
    )


@contextmanager
def _progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """``advance(done, name)``: a rich bar on a terminal, else one plain line per step."""
    from rich.console import Console

    console = Console(stderr=True)
    started = time.perf_counter()
    if not console.is_terminal:

        def line(done: int, name: str) -> None:
            print(
                f"[{done}/{total}] {time.perf_counter() - started:5.0f} s  {name}",
                file=sys.stderr,
                flush=True,
            )

        yield line
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
    ) as bar:
        task = bar.add_task("", total=total)

        def step(done: int, name: str) -> None:
            bar.update(task, completed=done, description=name)

        yield step


def _report_section(name: str, doc: dict[str, Any], cmd: list[str], chart_name: str) -> str:
    lines = [
        f"## {doc.get('title', name)}",
        "",
        f"`{' '.join(['python', 'benchmarks/' + name, *cmd[2:]])}`, "
        f"{doc['meta'].get('date', '')}, {doc['meta'].get('python', '')}, "
        f"load {doc['meta'].get('loadavg_start', '?')}",
        "",
    ]
    head = headline(doc)
    if head:
        what, unit, better, values = head
        lines += [f"| contender | {what}, {unit} ({better} is better) |", "| --- | ---: |"]
        lines += [f"| {n} | {_fmt(_number(v))} |" for n, v in values.items()]
        lines.append("")
    lines += ["| # | target | measured | limit | verdict |", "| --- | --- | --- | --- | --- |"]
    for k, t in enumerate(doc.get("targets", []), 1):
        m = t.get("measured")
        lines.append(
            f"| {k} | {t['what']} | "
            f"{m:.3g}{t.get('unit', '')} | {t['op']} {t['limit']:g}{t.get('unit', '')}"
            f" | {t['verdict']} |"
            if isinstance(m, (int, float))
            else f"| {k} | {t['what']} | n/a | {t['op']} {t['limit']} | n/a |"
        )
    lines += ["", f"![{doc.get('title', name)}]({chart_name})", ""]
    if doc.get("errors"):
        lines += ["Errors: " + ", ".join(doc["errors"]), ""]
    return "\n".join(lines)


def run_bench(quick: bool, only: str | None, out: str, bench_dir: str | None) -> int:
    """The ``bench`` command; returns 1 if a benchmark failed or none was found."""
    if bench_dir is None:
        # The benchmarks live in the repository, not in the installed package:
        # ./benchmarks in a clone, or the checkout of an editable install
        # (src/aiosubinterp/demo/ -> the clone's root).
        checkout = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))
        found = [
            d
            for d in (os.path.abspath("benchmarks"), os.path.join(checkout, "benchmarks"))
            if glob.glob(os.path.join(d, "bench_*.py"))
        ]
        bench_dir = found[0] if found else os.path.abspath("benchmarks")
    bench_dir = os.path.abspath(bench_dir)
    root = os.path.dirname(bench_dir)
    scripts = sorted(glob.glob(os.path.join(bench_dir, "bench_*.py")))
    if only:
        wanted = {
            f"bench_{n.strip().removeprefix('bench_').removesuffix('.py')}.py"
            for n in only.split(",")
        }
        scripts = [s for s in scripts if os.path.basename(s) in wanted]
    if not scripts:
        print(
            f"no benchmarks found in {bench_dir} (only={only!r}): run this from a clone of the "
            "repository (the benchmarks live in its benchmarks/ folder, not in the installed "
            "package), or pass --dir",
            file=sys.stderr,
        )
        return 1
    os.makedirs(out, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
    }
    sections, failed = [], []
    with _progress(len(scripts)) as advance:
        for i, script in enumerate(scripts):
            name = os.path.basename(script)
            advance(i, name)
            cmd = [sys.executable, script, "--json"] + (["--quick"] if quick else [])
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=env,
                cwd=root,
                timeout=900 if not quick else 180,
            )
            try:
                doc = json.loads(proc.stdout)
            except ValueError:
                failed.append(name)
                sections.append(
                    f"## {name}\n\nfailed (exit {proc.returncode}):\n\n```\n"
                    f"{proc.stderr[-1500:]}\n```\n"
                )
                continue
            chart_name = f"{name.removesuffix('.py')}.png"
            chart(os.path.join(out, chart_name), doc)
            sections.append(_report_section(name, doc, cmd, chart_name))
        advance(len(scripts), "done")
    report = os.path.join(out, "report.md")
    with open(report, "w") as f:
        f.write(
            f"# aiosubinterp benchmarks{' (--quick)' if quick else ''}\n\n" + "\n".join(sections)
        )
    print(f"report: {os.path.abspath(report)}")
    print(f"charts: {os.path.abspath(out)}/bench_*.png")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0
