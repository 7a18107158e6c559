"""`python -m aiosubinterp` subcommands run and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys

from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Without the variables that make rich treat a pipe as a terminal.
ENV = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}


def cli(*args, timeout=180, stderr=False):
    proc = subprocess.run(
        [sys.executable, "-m", "aiosubinterp", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**ENV, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return (proc.stdout, proc.stderr) if stderr else proc.stdout


def test_demo_circles(tmp_path):
    out = cli("demo", "--circles", "300", "--frames", "10", "--rounds", "1", "--out", str(tmp_path))
    for label in (
        "single thread",
        "threading, 2 threads",
        "multiprocessing, 2 procs + pipes",
        "aiosubinterp, 2 interpreters",
    ):
        line = next(row for row in out.splitlines() if row.strip().startswith(label))
        assert line.rstrip().endswith("yes"), line  # same positions as single-threaded
    assert "FPS" in out and "vs single" in out and "every-frame FPS" in out
    assert f"final frame:  {tmp_path}/circles_final.png" in out
    with Image.open(tmp_path / "circles_final.png") as png:
        assert png.format == "PNG" and len(png.convert("RGB").getcolors(1 << 16)) > 3
    with Image.open(tmp_path / "circles_first_frames.gif") as gif:
        assert gif.format == "GIF" and gif.n_frames == 40


def test_demo_subset_and_errors(tmp_path):
    out = cli(
        "demo",
        "--circles",
        "200",
        "--frames",
        "5",
        "--rounds",
        "1",
        "--workers",
        "3",
        "--contenders",
        "single,aiosubinterp",
        "--out",
        str(tmp_path),
    )
    assert "aiosubinterp, 3 interpreters" in out and "threading" not in out
    proc = subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "demo", "--contenders", "gpu"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown contender(s) gpu" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "demo", "--circles", "50", "--workers", "16"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "narrower" in proc.stderr


def test_demo_primes():
    out = cli("demo", "--kind", "primes", "--tasks", "2", "--span", "2000")
    assert "every contender found" in out


def test_info():
    out = cli("info")
    assert "per-interpreter GIL (PEP 684): yes" in out
    assert "wakeup: " in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[8:] if line.strip()}
    assert rows["json"] == "OK" and rows["re"] == "OK"
    assert rows["numpy"] in ("refused", "absent")  # refused, or not installed
    assert rows["readline"] == "refused"


def test_bench_quick(tmp_path):
    out, err = cli(
        "bench", "--quick", "--only", "roundtrip", "--out", str(tmp_path), timeout=300, stderr=True
    )
    assert f"report: {tmp_path}/report.md" in out
    report = (tmp_path / "report.md").read_text()
    assert "| # | target | measured | limit | verdict |" in report
    assert "| contender | round trip of a trivial task, p50, µs (lower is better) |" in report
    assert "| aiosubinterp |" in report and "![bench_roundtrip: " in report
    with Image.open(tmp_path / "bench_roundtrip.png") as png:
        assert png.format == "PNG" and png.size[0] == 1100
        assert png.text["Title"].startswith("bench_roundtrip: await round trip")
    # Not a terminal: plain progress lines, no escape codes.
    assert "[1/1]" in err and "\x1b[" not in err


def test_bench_run_from_another_folder_says_where_the_benchmarks_are(tmp_path):
    # The installed package holds no benchmarks (they are in the repository):
    # --dir pointing where there are none says so and how to fix it.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiosubinterp",
            "bench",
            "--quick",
            "--dir",
            str(tmp_path / "nowhere"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert f"no benchmarks found in {tmp_path / 'nowhere'}" in proc.stderr
    assert "run this from a clone of the repository" in proc.stderr and "--dir" in proc.stderr
    # From a clone's root, --dir relative to the current folder works.
    out, _ = cli(
        "bench",
        "--quick",
        "--only",
        "roundtrip",
        "--dir",
        "benchmarks",
        "--out",
        str(tmp_path / "out"),
        timeout=300,
        stderr=True,
    )
    assert f"report: {tmp_path / 'out'}/report.md" in out


def test_without_the_extra_the_command_names_it():
    for command, blocked, extra in (("demo", "PIL", "demo"), ("bench", "matplotlib", "bench")):
        code = (
            f"import sys; sys.modules[{blocked!r}] = None; "
            f"from aiosubinterp.__main__ import main; sys.exit(main([{command!r}]))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
            env={**ENV, "PYTHONPATH": ROOT},
        )
        assert proc.returncode == 2, proc.stderr
        assert f"pip install 'aiosubinterp[{extra}]'" in proc.stderr, proc.stderr
        assert "round 1" not in proc.stdout  # stopped before running anything
