"""A script in a child Python process: the house pattern for paths that may hang or crash.

A regression there freezes or kills the child, not the test run: the test
checks the child's exit code and output.
"""

from __future__ import annotations

import os
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
    try:
        return subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(tmp_path),
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(
            f"the child froze (killed after {timeout} s); its output:\n{out}\n"
            f"its stderr:\n{(err or '')[-3000:]}"
        )
