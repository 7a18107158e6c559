"""A script in a child Python process: the house pattern for paths that may hang or crash.

A regression there freezes or kills the child, not the test run: the test
checks the child's exit code and output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def run_child(tmp_path, source: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run source (dedented) as tmp_path/child.py with the project and tests/ importable.

    A child still running after timeout seconds is killed and the test fails
    with what it printed so far (a freeze: nothing else ends it).
    """
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]))
    return run_or_fail_with_stacks(
        [sys.executable, str(script)], timeout, cwd=str(tmp_path), env=env
    )


def native_stacks(pid: int) -> str:
    """Every thread's C stack of process pid, by gdb (if found): what a frozen child waits on."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb on PATH: no native stacks)"
    try:
        got = subprocess.run(
            [gdb, "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return "(gdb did not finish in 120 s)"
    lines = [ln for ln in got.stdout.splitlines() if ln.startswith(("Thread ", "#"))]
    return "\n".join(lines)[-20000:] or got.stderr[-2000:]


def run_or_fail_with_stacks(
    cmd: list[str], timeout: float, **kwargs
) -> subprocess.CompletedProcess:
    """subprocess.run(cmd) with output captured as text; a child still running after
    timeout seconds fails the test with its output and every thread's native stack."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = native_stacks(proc.pid)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(
            f"the child froze (killed after {timeout} s); its output:\n{out}\n"
            f"its stderr:\n{(err or '')[-3000:]}\nits threads' native stacks:\n{stacks}"
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
