"""`python -m aiosubinterp check MODULE...`: each outcome, for real, in child processes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from aiosubinterp._engine.fallback import copies_unavailable
from aiosubinterp.demo.check import PROBES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Modules that misbehave on purpose, written into tmp_path (on the child's PYTHONPATH).
MODULES = {
    "abort_at_import": "import os\nos.abort()\n",
    "raise_at_import": "raise RuntimeError('no luck at import')\n",
    "hang_at_import": "import time\ntime.sleep(600)\n",
}


@pytest.fixture
def modules_dir(tmp_path):
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


def check(*args, path=None, timeout=240):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(path or ""), ROOT) if p)}
    return subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def test_a_module_that_works_exits_0():
    proc = check("json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.splitlines()[0].split()
    assert line[:3] == ["json", "works", "stdlib"]
    assert "json.dumps -> '{\"a\": [1, 2.5, null]}'" in proc.stdout
    assert "1 of 1 work in a worker interpreter" in proc.stdout


def test_every_outcome_in_json(modules_dir):
    names = ["json", "numpy", "no_such_module_here", "abort_at_import", "raise_at_import"]
    proc = check("--json", *names, path=modules_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["all_work"] is False and out["python"] == ".".join(map(str, sys.version_info[:3]))
    got = {r["module"]: r for r in out["modules"]}
    assert [r["module"] for r in out["modules"]] == names  # in the order asked
    assert got["json"]["status"] == "works" and got["json"]["result"] == "'{\"a\": [1, 2.5, null]}'"
    # numpy (a test dependency) refuses own-GIL interpreters on every version:
    # 3.12's workers refuse it up front, 3.13 through its C core.
    numpy = got["numpy"]
    assert numpy["status"] == "refused", numpy
    assert numpy["version"] == importlib.metadata.version("numpy")  # no import: it starts threads
    assert 'InterpreterPool(fallback="copy")' in numpy["detail"]
    assert 'fallback="process" or ProcessPool' in numpy["detail"]
    assert numpy["detail"].startswith("numpy")
    assert got["no_such_module_here"]["status"] == "not installed"
    crashed = got["abort_at_import"]
    assert crashed["status"] == "crashed", crashed
    assert crashed["signal"] == "SIGABRT" and crashed["returncode"] == -6
    assert "killed by SIGABRT" in crashed["detail"]
    failed = got["raise_at_import"]
    assert failed["status"] == "failed"
    assert failed["detail"] == "at import: RuntimeError: no luck at import"


def test_lines_name_the_outcome_and_exit_1(modules_dir):
    proc = check("numpy", "no_such_module_here", "raise_at_import", path=modules_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[:3]}
    assert rows["numpy"].split()[1] == "refused" and "fallback=" in rows["numpy"]
    assert "not installed" in rows["no_such_module_here"]
    assert "failed" in rows["raise_at_import"] and "no luck at import" in rows["raise_at_import"]
    assert "0 of 3 work in a worker interpreter" in proc.stdout


def test_a_hang_is_reported_not_waited_on(modules_dir):
    proc = check("--json", "--timeout", "3", "hang_at_import", path=modules_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)["modules"]
    assert report["status"] == "timeout"
    assert report["detail"] == "no answer within 3 s, child killed"


@pytest.mark.parametrize("args", [[], ["--jobs", "0", "json"], ["--timeout", "nan", "json"]])
def test_usage_errors_exit_2(args):
    proc = check(*args)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_every_probe_is_valid_code_that_sets_result():
    for name, probe in PROBES.items():
        code = compile(probe.code, f"<probe {name}>", "exec")
        assert "result" in code.co_names, name
        assert probe.what, name


NO_COPIES = copies_unavailable()


@pytest.mark.skipif(
    NO_COPIES is not None, reason="--fallback copy is a usage error on this Python (tested below)"
)
def test_fallback_copy_names_the_tier_of_each_module():
    import importlib.util

    single = ["msgspec"] if importlib.util.find_spec("msgspec") else []
    proc = check("--json", "--fallback", "copy", "json", "numpy", *single)
    out = json.loads(proc.stdout)
    got = {r["module"]: r for r in out["modules"]}
    assert got["json"]["status"] == "works"
    numpy = got["numpy"]
    assert numpy["status"] == "copy", numpy
    assert numpy["mib_per_interpreter"] > 1 and numpy["result"] == "45"
    assert "20 calls in 2 interpreters at once agree" in numpy["detail"]
    if single:
        assert got["msgspec"]["status"] == "refused"
        assert "single-phase" in got["msgspec"]["detail"]
        assert proc.returncode == 1
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(NO_COPIES is None, reason="the usage error of free-threaded builds and 3.12")
def test_fallback_copy_is_a_usage_error_where_copies_are_refused():
    proc = check("--fallback", "copy", "numpy")
    assert proc.returncode == 2 and NO_COPIES.split(":")[0] in proc.stderr
