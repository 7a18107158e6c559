#!/usr/bin/env python
"""The history of benchmark runs: one JSON file per run in benchmarks/history/.

benchmarks/README.md shows the latest table of each benchmark; every run,
older ones included, is kept here as data. A run's file holds:

  date       "2026-12-03 09:04:23 UTC" (as the run printed it)
  benchmark  the script's name without .py ("bench_roundtrip"), or what ran
             ("bench_roundtrip+bench_throughput", "examples/uvloop_server.py")
  python     "3.13.0", "3.14.10", "3.13.15t"
  machine    the machine the run printed (CPUs, model, platform)
  command    the command line
  load       load average / other load, when the run gave it (else null)
  tables     [{"caption": text or null, "columns": [...], "rows": [[...], ...]}]
  notes      the run's text as printed, each table replaced by "{table N}"
  optional:  title, loop, git, parameters, source

Commands:

    python scripts/bench-history.py list [--benchmark NAME] [--python VERSION]
    python scripts/bench-history.py show FILE...              # a run as markdown again
    python benchmarks/bench_roundtrip.py > run.md
    python scripts/bench-history.py convert run.md            # every run printed in it -> JSON
    python scripts/bench-history.py add NOTES.md --lines 10-40 --benchmark bench_http \\
        --date "2026-12-05 02:14 UTC" --python 3.13.0 --machine "2 CPUs" --command "..."

``convert`` finds the runs a bench_*.py script printed (a heading naming the
benchmark, then ``- date: ...; machine: ...``, tables, the target table and
its notes). ``add`` stores lines of a markdown file written by hand as one
run: the fields it cannot read from a printed header must be given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HISTORY = os.path.join(ROOT, "benchmarks", "history")
REQUIRED = ("date", "benchmark", "python", "machine", "command", "load", "tables", "notes")

HEADING = re.compile(r"^#{2,6} (bench_[a-z_]+)")
DATE_LINE = re.compile(r"^- date: (\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? UTC); machine: (.*)$")
PYTHON_LINE = re.compile(r"^- Python: \S*Python (\S+) .*?; loop: ([^;]+)(?:;.* at git (\w+))?")
COMMAND_LINE = re.compile(r"^- command: `(.*)`")
PARAMS_LINE = re.compile(r"^- parameters: (.*)$")
LOAD_LINE = re.compile(r"^- load average at start / end: (.*)$")
PROGRESS = re.compile(r"^\[bench_[a-z_]+: .*\] round \d+/\d+: ")


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row (``\\|`` stays inside a cell)."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", body)]


def is_separator(line: str) -> bool:
    return bool(re.fullmatch(r"\|?(\s*:?-{3,}:?\s*\|)*\s*:?-{3,}:?\s*\|?", line.strip()))


def parse_text(lines: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """Tables and the text around them: (tables, notes with "{table N}" in their places)."""
    tables: list[dict[str, Any]] = []
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.lstrip().startswith("|") and is_separator(nxt):
            j = i + 2
            rows = []
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append(split_row(lines[j]))
                j += 1
            caption = None
            for prev in reversed(out):
                if prev.strip():
                    if not prev.startswith("{table"):
                        caption = prev.strip().lstrip("#").strip()
                    break
            tables.append({"caption": caption, "columns": split_row(line), "rows": rows})
            out.append(f"{{table {len(tables)}}}")
            i = j
        else:
            out.append(line)
            i += 1
    return tables, "\n".join(out).strip("\n") + "\n"


def render_table(table: dict[str, Any]) -> str:
    def row(cells: Iterable[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    columns = table["columns"]
    lines = [row(columns), row("---" for _ in columns)]
    lines += [row(r) for r in table["rows"]]
    return "\n".join(lines)


def render(run: dict[str, Any]) -> str:
    """A run as markdown: its notes with the tables put back."""
    text = run["notes"]
    for n, table in enumerate(run["tables"], 1):
        text = text.replace(f"{{table {n}}}", render_table(table), 1)
    head = "<!-- {}, {}, Python {} -->\n".format(run["benchmark"], run["date"], run["python"])
    return head + text


def header_fields(lines: Sequence[str]) -> dict[str, Any]:
    """The fields a bench script prints at the top of its report."""
    fields: dict[str, Any] = {}
    for line in lines:
        if m := HEADING.match(line):
            fields.setdefault("benchmark", m.group(1))
            if ": " in line:
                fields.setdefault("title", line.lstrip("#").strip())
        elif m := DATE_LINE.match(line):
            fields.setdefault("date", m.group(1))
            fields.setdefault("machine", m.group(2))
        elif m := PYTHON_LINE.match(line):
            fields.setdefault("python", m.group(1))
            fields.setdefault("loop", m.group(2).strip())
            if m.group(3):
                fields.setdefault("git", m.group(3))
        elif m := COMMAND_LINE.match(line):
            fields.setdefault("command", m.group(1))
        elif m := PARAMS_LINE.match(line):
            fields.setdefault("parameters", m.group(1))
        elif m := LOAD_LINE.match(line):
            fields.setdefault("load", m.group(1))
    return fields


def make_run(lines: Sequence[str], given: dict[str, Any]) -> dict[str, Any]:
    """One run from its lines; ``given`` fields win over what the header says."""
    fields = header_fields(lines)
    fields.update({k: v for k, v in given.items() if v is not None})
    fields.setdefault("load", None)
    missing = [k for k in REQUIRED[:5] if not fields.get(k)]
    if missing:
        what = ", ".join(missing)
        raise SystemExit(f"bench-history: the run's {what}: not printed in it, give it")
    tables, notes = parse_text(lines)
    run = {k: fields[k] for k in REQUIRED if k in fields}
    run["tables"] = tables
    run["notes"] = notes
    for key in ("title", "loop", "git", "parameters", "source"):
        if fields.get(key):
            run[key] = fields[key]
    return run


def file_name(run: dict[str, Any]) -> str:
    m = re.match(r"(\d{4}-\d\d-\d\d)(?: (\d\d):(\d\d))?", run["date"])
    if not m:
        raise SystemExit("bench-history: date must start YYYY-MM-DD: {!r}".format(run["date"]))
    stamp = m.group(1) + (f"-{m.group(2)}{m.group(3)}" if m.group(2) else "")
    what = re.sub(r"[^A-Za-z0-9_.+-]+", "_", run["benchmark"]).strip("_")
    return "{}-{}-{}.json".format(stamp, what, run["python"])


def save(run: dict[str, Any], directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    base = file_name(run)
    path = os.path.join(directory, base)
    n = 2
    while os.path.exists(path):
        path = os.path.join(directory, f"{base[: -len('.json')]}-{n}.json")
        n += 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return path


def find_runs(lines: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) line indexes of every run a bench script printed in ``lines``."""
    runs = []
    i = 0
    while i < len(lines):
        if not HEADING.match(lines[i]):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not DATE_LINE.match(lines[j]):
            i += 1
            continue
        start = i
        while start > 0 and (PROGRESS.match(lines[start - 1]) or not lines[start - 1].strip()):
            start -= 1
        while start < i and not lines[start].strip():
            start += 1
        # The report ends with the target table and the bullet list under it.
        k = j
        while k < len(lines) and not (
            lines[k].startswith("| target") or lines[k].startswith("| issue")
        ):
            k += 1
        while k < len(lines) and lines[k].startswith("|"):
            k += 1
        end = k
        m = k
        while m < len(lines) and not lines[m].strip():
            m += 1
        if m < len(lines) and lines[m].startswith("- "):
            while m < len(lines) and lines[m].startswith("- "):
                m += 1
            end = m
        runs.append((start, end))
        i = max(end, i + 1)
    return runs


def parse_ranges(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += range(int(a) - 1, int(b or a))
    return out


def cmd_list(args: argparse.Namespace) -> None:
    for run, path in load_all(args.dir):
        if args.benchmark and args.benchmark not in run["benchmark"]:
            continue
        if args.python and not run["python"].startswith(args.python):
            continue
        name = os.path.basename(path)
        print(f"{name:58} {run['date']:24} {run['python']:9} {run['command']}")


def cmd_show(args: argparse.Namespace) -> None:
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            print(render(json.load(f)))


def cmd_convert(args: argparse.Namespace) -> None:
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = find_runs(lines)
    if not found:
        raise SystemExit(f"bench-history: no run printed by a bench script in {args.source}")
    for start, end in found:
        run = make_run(lines[start:end], {"source": args.source_note})
        print(save(run, args.dir))


def cmd_add(args: argparse.Namespace) -> None:
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    picked = [lines[i] for i in parse_ranges(args.lines)]
    given = {
        k: getattr(args, k)
        for k in (
            "date",
            "benchmark",
            "python",
            "machine",
            "command",
            "load",
            "title",
            "loop",
            "git",
        )
    }
    given["source"] = args.source_note
    print(save(make_run(picked, given), args.dir))


def load_all(directory: str) -> list[tuple[dict[str, Any], str]]:
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                out.append((json.load(f), path))
    out.sort(key=lambda rp: (rp[0]["date"], rp[1]))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=HISTORY, help="default benchmarks/history")
    sub = parser.add_subparsers(dest="command_name", required=True)
    p = sub.add_parser("list", help="one line per run, oldest first")
    p.add_argument("--benchmark")
    p.add_argument("--python")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("show", help="print runs as markdown")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("convert", help="store every run a bench script printed in a markdown file")
    p.add_argument("source")
    p.add_argument("--source-note", help="where the run was kept before (stored as 'source')")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("add", help="store lines of a markdown file as one run")
    p.add_argument("source")
    p.add_argument("--lines", required=True, help="1-based inclusive ranges: 10-40,52-60")
    for name in (*REQUIRED[:6], "title", "loop", "git"):
        p.add_argument("--" + name)
    p.add_argument("--source-note")
    p.set_defaults(func=cmd_add)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
