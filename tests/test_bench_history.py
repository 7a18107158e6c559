"""benchmarks/history keeps every run as data; the README shows each benchmark's latest table."""

from __future__ import annotations

import importlib.util
import itertools
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
HISTORY = ROOT / "benchmarks" / "history"
README = ROOT / "benchmarks" / "README.md"


def _load_script():
    path = ROOT / "scripts" / "bench-history.py"
    spec = importlib.util.spec_from_file_location("bench_history", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bh = _load_script()
RUNS = sorted(HISTORY.glob("*.json"))

# What a bench script prints (bench_loop_lag, shortened), as `convert` reads it.
PRINTED = """\
[bench_loop_lag: event-loop lag while 2 workers are busy] round 1/3: to_thread ... 0.2 s
### bench_loop_lag: event-loop lag (1 ms ticker) while 2 workers are busy

- date: 2026-12-03 09:06:23 UTC; machine: 2 CPUs, AMD EPYC; Linux-6.18.44-x86_64
- Python: CPython 3.13.0 (/v/bin/python); loop: asyncio; aiosubinterp 0.1.0 (/a) at git 77cdb0b
- command: `python benchmarks/bench_loop_lag.py`
- parameters: busy_seconds=2.0, chunk_seconds=0.1, rounds=3
- load average at start / end: 1.21 0.82 0.63 / 1.10 0.83 0.64; elapsed 26.6 s

| contender     | lag p50 ms | lag p99 ms |
|---------------|-----------:|-----------:|
| idle baseline |      0.083 |      0.152 |
| aiosubinterp  |      0.073 |      0.638 |

| target                             | measured | target | verdict | anchor   |
|------------------------------------|---------:|-------:|---------|----------|
| lag p99 while all workers are busy |  0.64 ms | < 2 ms | PASS    | absolute |

- Per round: 40 tasks of spin_for(0.1) on 2 workers.
- aiosubinterp: InterpreterPool(size=2)

Prose written later is not part of the run.
"""


def test_the_history_has_runs():
    assert len(RUNS) >= 57  # the runs the README held when the history was made


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_run_parses_and_has_the_fields(path):
    run = json.loads(path.read_text(encoding="utf-8"))
    for field in bh.REQUIRED:
        assert field in run, f"{path.name}: no {field!r}"
    for field in ("date", "benchmark", "python", "machine", "command", "notes"):
        assert isinstance(run[field], str) and run[field].strip(), f"{path.name}: empty {field!r}"
    assert run["load"] is None or isinstance(run["load"], str)
    assert re.match(r"\d{4}-\d\d-\d\d", run["date"]), run["date"]
    assert re.match(r"\d+\.\d+", run["python"]), run["python"]
    assert path.name.startswith(bh.file_name(run)[: -len(".json")])
    for n, table in enumerate(run["tables"], 1):
        assert table["columns"] and all(isinstance(c, str) for c in table["columns"])
        assert all(len(row) == len(table["columns"]) for row in table["rows"]), (path.name, n)
        assert f"{{table {n}}}" in run["notes"], (path.name, n)
    # A run without a table keeps its numbers in its notes.
    assert run["tables"] or re.search(r"\d", run["notes"])


def _sections(text):
    """{heading: body} of the README's level-2 sections."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py")))
def test_every_benchmark_has_a_section_with_its_latest_table(script):
    sections = _sections(README.read_text(encoding="utf-8"))
    assert script in sections, f"benchmarks/README.md has no '## {script}' section"
    body = sections[script]
    assert "**Measures**" in body and "**Command**" in body and "**Target**" in body
    lines = body.splitlines()
    pairs = itertools.pairwise(lines)
    assert any(line.startswith("|") and bh.is_separator(nxt) for line, nxt in pairs), (
        f"{script}: no table"
    )
    assert re.search(r"\b2\d{3}-\d\d-\d\d\b", body), f"{script}: no date"
    assert re.search(r"\b3\.1\d", body), f"{script}: no Python version"
    assert "machine" in body


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")))
def test_every_benchmark_has_runs_in_the_history(script):
    names = [json.loads(p.read_text(encoding="utf-8"))["benchmark"] for p in RUNS]
    assert any(script in name.split("+") for name in names), script


def test_convert_reads_a_printed_report(tmp_path, capsys):
    source = tmp_path / "run.md"
    source.write_text(PRINTED)
    bh.main(["--dir", str(tmp_path / "h"), "convert", str(source)])
    (saved,) = (tmp_path / "h").glob("*.json")
    assert saved.name == "2026-12-03-0906-bench_loop_lag-3.13.0.json"
    run = json.loads(saved.read_text())
    assert run["date"] == "2026-12-03 09:06:23 UTC"
    assert run["machine"].startswith("2 CPUs, AMD EPYC")
    assert run["command"] == "python benchmarks/bench_loop_lag.py"
    assert run["load"] == "1.21 0.82 0.63 / 1.10 0.83 0.64; elapsed 26.6 s"
    assert (run["loop"], run["git"]) == ("asyncio", "77cdb0b")
    assert [t["columns"][0] for t in run["tables"]] == ["contender", "target"]
    assert run["tables"][0]["rows"][1] == ["aiosubinterp", "0.073", "0.638"]
    assert run["tables"][1]["rows"][0][3] == "PASS"
    assert "round 1/3: to_thread" in run["notes"]
    assert "- aiosubinterp: InterpreterPool(size=2)" in run["notes"]
    assert "Prose written later" not in run["notes"]

    capsys.readouterr()
    bh.main(["show", str(saved)])
    shown = capsys.readouterr().out
    assert "| aiosubinterp | 0.073 | 0.638 |" in shown
    assert "{table" not in shown

    bh.main(["--dir", str(tmp_path / "h"), "list", "--benchmark", "bench_loop_lag"])
    listed = capsys.readouterr().out
    assert saved.name in listed and "python benchmarks/bench_loop_lag.py" in listed

    # A second run in the same minute gets its own file.
    bh.main(["--dir", str(tmp_path / "h"), "convert", str(source)])
    assert len(list((tmp_path / "h").glob("*.json"))) == 2


def test_convert_says_when_nothing_was_printed(tmp_path):
    source = tmp_path / "notes.md"
    source.write_text("# Notes\n\nNo run here.\n")
    with pytest.raises(SystemExit, match="no run printed by a bench script"):
        bh.main(["--dir", str(tmp_path / "h"), "convert", str(source)])


def test_add_needs_the_fields_a_hand_written_run_does_not_print(tmp_path):
    source = tmp_path / "notes.md"
    source.write_text("Ran it by hand: 12.5 ms.\n")
    with pytest.raises(SystemExit, match="date, benchmark, python, machine, command"):
        bh.main(["--dir", str(tmp_path / "h"), "add", str(source), "--lines", "1"])
    bh.main(
        [
            "--dir",
            str(tmp_path / "h"),
            "add",
            str(source),
            "--lines",
            "1",
            "--date",
            "2026-12-05",
            "--benchmark",
            "bench_startup",
            "--python",
            "3.13.0",
            "--machine",
            "2 CPUs",
            "--command",
            "python benchmarks/bench_startup.py",
        ]
    )
    run = json.loads((tmp_path / "h" / "2026-12-05-bench_startup-3.13.0.json").read_text())
    assert run["notes"] == "Ran it by hand: 12.5 ms.\n"
    assert run["tables"] == [] and run["load"] is None


def test_the_readme_tables_are_the_runs_tables():
    """Every table row the README shows is a row of a run in the history (copied, not retyped)."""
    rows = set()
    for path in RUNS:
        for table in json.loads(path.read_text(encoding="utf-8"))["tables"]:
            rows.add(tuple(table["columns"]))
            rows.update(tuple(r) for r in table["rows"])
    text = README.read_text(encoding="utf-8")
    body = text[text.index("## bench_roundtrip.py") :]
    lines = body.splitlines()
    shown = [bh.split_row(x) for x in lines if x.startswith("|") and not bh.is_separator(x)]
    assert shown
    stray = [r for r in shown if tuple(r) not in rows]
    assert not stray, stray[:3]
