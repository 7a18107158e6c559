"""Helpers shared by the stress tests (tests/stress/)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import childproc

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
STRESS = TESTS / "stress"


def rss() -> int:
    """Resident set size of this process (main and every interpreter), in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def threads_back_to(start: int, timeout: float = 10.0) -> bool:
    """True once no more threads run than at start. Helper threads that close
    a pool exit just after its awaiter resumes: give them a bounded moment."""
    import time

    deadline = time.monotonic() + timeout
    while thread_count() > start:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def report(name: str, **figures) -> None:
    """Print figures (see them with -s) and append them to $AIOSUBINTERP_FIGURES if set."""
    line = {"test": name, "python": ".".join(map(str, sys.version_info[:3])), **figures}
    print("FIGURES", json.dumps(line))
    path = os.environ.get("AIOSUBINTERP_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def run_script(
    tmp_path: pathlib.Path,
    source: str,
    timeout: float = 120,
    env: dict | None = None,
    name: str = "script.py",
) -> subprocess.CompletedProcess:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), str(STRESS)])
    full_env.update(env or {})
    # A freeze fails the test with the child's native stacks (gdb), for the next look.
    return childproc.run_or_fail_with_stacks(
        [sys.executable, str(script)], timeout, cwd=str(tmp_path), env=full_env
    )


def popen_script(tmp_path: pathlib.Path, source: str, name: str = "script.py") -> subprocess.Popen:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), str(STRESS)])
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
        env=full_env,
    )
