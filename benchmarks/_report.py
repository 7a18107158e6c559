"""The report a benchmark prints: tables, targets and the markdown page.

What belongs here: Target (a measured ratio against its limit, PASS or MISS,
with the anchor the limit comes from) and Report (what a benchmark's
report() returns); number and ratio formatting; the markdown tables (Table: a
row per contender, error rows, failed-round counts, the contenders'
descriptions for the notes) and their standard cells (latency, rate,
quartile, CPU/wall and other load); and render(), the page printed when
--json is not given.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

from _machine import ncpu
from _stats import collect, median, ok_rounds, percentile


@dataclasses.dataclass
class Target:
    """One target, measured: ``measured op limit`` passes."""

    what: str
    measured: float
    op: str  # "<=", "<" or ">="
    limit: float
    unit: str = "x"
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None or math.isnan(self.measured):
            return "n/a"
        ok = {
            "<=": self.measured <= self.limit,
            "<": self.measured < self.limit,
            ">=": self.measured >= self.limit,
        }[self.op]
        return "PASS" if ok else "MISS"

    def as_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "measured": self.measured,
            "op": self.op,
            "limit": self.limit,
            "unit": self.unit,
            "verdict": self.verdict,
            "note": self.note,
        }


@dataclasses.dataclass
class Report:
    """What a benchmark's report() returns: tables, targets, notes, a JSON summary."""

    tables: list[tuple[str, list[str], list[list[str]]]]
    targets: list[Target]
    notes: list[str]
    summary: dict[str, Any]


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value != 0 and abs(value) < 10**-digits * 5:
        return f"{value:.2g}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def fmt_ratio(value: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    if value < 1:  # 3 decimals: a 0.102x that misses a 0.1x target must not print as 0.10x
        return f"{value:.3f}x"
    return f"{value:.2f}x"


def markdown_table(headers: list[str], rows: list[list[str]], left: Sequence[int] = (0,)) -> str:
    """A GitHub markdown table; columns whose index is in `left` are left-aligned, others right."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    right = [i not in left for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.rjust(widths[i]) if right[i] else cell.ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if right[i] else ("-" * (w + 2)) for i, w in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def targets_table(targets: list[Target]) -> str:
    rows = []
    for t in targets:
        measured = fmt_ratio(t.measured) if t.unit == "x" else fmt(t.measured, 2, " " + t.unit)
        limit = f"{t.op} {t.limit:g}{'x' if t.unit == 'x' else ' ' + t.unit}"
        rows.append([t.what, measured, limit, t.verdict, t.note])
    return markdown_table(
        ["target", "measured", "target", "verdict", "anchor"], rows, left=(0, 3, 4)
    )


def error_cell(message: str, limit: int = 90) -> str:
    message = " ".join(message.split()).replace("|", "/")
    return "error: " + (message if len(message) <= limit else message[: limit - 1] + "…")


class Table:
    """One markdown table with a row per contender, in the order the contenders ran.

    ``for name, good in table.each(results)`` visits the contenders with at
    least one good round; the others get their error row, and every visited
    contender's ``info`` goes to ``table.infos``. A visited contender's row is
    ``table.add(name, *cells)`` (the name cell is added, with the count of
    failed rounds if any); ``table.set`` fills a column afterwards.
    """

    def __init__(self, headers: list[str], heading: str = "", error_col: int = 1) -> None:
        self.headers = headers
        self.heading = heading
        self.error_col = error_col
        self.rows: dict[str, list[str]] = {}
        self.infos: list[str] = []
        self._labels: dict[str, str] = {}

    def each(
        self, results: dict[str, list[dict[str, Any]]], also: Sequence[Table] = ()
    ) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Visit the contenders that have good rounds; `also`: more tables with a row each."""
        tables = (self, *also)
        for name, rounds in results.items():
            good, error = ok_rounds(rounds)
            if not good:
                for t in tables:
                    row = [name] + [""] * (len(t.headers) - 1)
                    row[t.error_col] = error_cell(error or "no result")
                    t.rows[name] = row
                continue
            failed = len(rounds) - len(good)
            for t in tables:
                t._labels[name] = name + (
                    f" ({failed}/{len(rounds)} rounds failed)" if failed else ""
                )
            if "info" in good[0]:
                self.infos.append(f"{name}: {good[0]['info']}")
            yield name, good

    def add(self, name: str, *cells: str, key: str | None = None) -> None:
        """The row of contender `name`; `key`: one more row of it (a row per worker count)."""
        row = [self._labels.get(name, name), *cells]
        self.rows[key or name] = row + [""] * (len(self.headers) - len(row))

    def set(self, name: str, column: int, text: str) -> None:
        if name in self._labels:  # not on error rows
            self.rows[name][column] = text

    def section(self) -> tuple[str, list[str], list[list[str]]]:
        """The (heading, headers, rows) that Report.tables holds."""
        return self.heading, self.headers, list(self.rows.values())


def latency_cells(s: dict[str, float], digits: int = 1) -> list[str]:
    """p50 and p99 cells of a summarize() result."""
    return [fmt(s["p50"], digits), fmt(s["p99"], digits)]


def rate_cells(values: list[float], digits: int = 0) -> list[str]:
    """Median, min and max cells of per-batch (or per-round) values."""
    return [fmt(median(values), digits), fmt(min(values), digits), fmt(max(values), digits)]


def quartile_cells(values: list[float], digits: int = 2) -> list[str]:
    """Median, p25 and p75 cells (few samples: one per fresh process)."""
    return [
        fmt(median(values), digits),
        fmt(percentile(values, 25), digits),
        fmt(percentile(values, 75), digits),
    ]


LOAD_HEADERS = ["CPU/wall", "other load"]
LOAD_NOTE = (
    "CPU/wall: CPU seconds used by the contender's process tree (every thread, worker "
    "processes included) per wall-clock second of the timed part. other load: cores kept "
    "busy at the same time by processes outside the benchmark (from /proc/stat): the noise "
    f"on this {ncpu()}-CPU machine. Both are medians over rounds."
)


def load_cells(good: list[dict[str, Any]]) -> list[str]:
    """CPU/wall and other-load cells (medians over rounds) for a contender's row."""
    cells = []
    for key in ("cpu_per_wall", "other_cores"):
        value = median(collect(good, key))
        cells.append("–" if math.isnan(value) else f"{value:.2f}")
    return cells


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def render(
    title: str,
    meta: dict[str, Any],
    params: dict[str, Any],
    rep: Report,
    errors: dict[str, Any],
    problems: dict[str, Any],
    skipped: dict[str, str] | None = None,
) -> str:
    shown = {k: v for k, v in params.items() if k != "quick"}
    lines = [
        f"### {title}{' (--quick: rough numbers)' if params.get('quick') else ''}",
        "",
        f"- date: {meta['date']}; machine: {meta['cpus']} CPUs, {meta['cpu_model']}; "
        f"{meta['platform']}",
        f"- Python: {meta['python']} ({meta['executable']}); loop: {meta['loop']}; "
        f"aiosubinterp {meta['aiosubinterp']} at git {meta['git']}",
        f"- command: `{meta['command']}`",
        f"- parameters: {', '.join(f'{k}={v}' for k, v in shown.items())}",
        f"- load average at start / end: {meta['loadavg_start']} / {meta['loadavg_end']}; "
        f"elapsed {meta['elapsed_s']} s",
        "",
    ]
    for heading, headers, rows in rep.tables:
        if heading:
            lines += [heading, ""]
        lines += [markdown_table(headers, rows), ""]
    if rep.targets:
        lines += [targets_table(rep.targets), ""]
    for note in rep.notes:
        lines.append(f"- {note}")
    for name, errs in errors.items():
        first = errs[0]
        lines.append(f"- {name}: {len(errs)} round(s) failed; first: {first.get('error')}")
        detail = first.get("traceback") or first.get("stderr")
        if detail:
            lines += ["", "```", tail(detail, 12), "```"]
    for name, probs in problems.items():
        lines.append(f"- {name}: {len(probs)} round(s) exited badly after reporting: {probs[0]}")
    for name, reason in (skipped or {}).items():
        lines.append(f"- {name}: skipped: {reason}")
    return "\n".join(lines).rstrip() + "\n"
