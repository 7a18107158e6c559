"""numpy's own tests (one file) pass inside interpreters with fallback="copy", as in main.

The CI part of the proof of ``fallback="copy"`` for numpy;
scripts/numpy-tests-in-interpreters.py runs the other files. In a child
process (a copy that goes wrong may crash it):
pytest runs numpy's test_einsum.py in a worker of
``InterpreterPool(1, fallback="copy")`` (and in two workers at once), then, after the pool is
closed, in the child's main interpreter; the outcomes must be the same, test
by test. Worker code: scripts/_numpy_suite_work.py.
"""

from __future__ import annotations

import collections
import importlib.util
import os

import pytest
from test_private_copies import run_child

from aiosubinterp._engine.fallback import copies_unavailable

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
FILE = "_core/tests/test_einsum.py"

pytestmark = [
    pytest.mark.skipif(
        copies_unavailable() is not None,
        reason="fallback='copy' is refused on this Python (3.12, free-threaded)",
    ),
    pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy not installed"),
]


@pytest.mark.parametrize(("loop_kind", "workers"), [("asyncio", 1), ("uvloop", 1), ("asyncio", 2)])
def test_numpy_einsum_tests_in_interpreters_match_the_main_interpreter(
    tmp_path, loop_kind, workers
):
    reports, _ = run_child(
        tmp_path,
        f"""
        import importlib.util
        sys.path.insert(0, {SCRIPTS!r})  # before the pool: workers get main's sys.path
        import _numpy_suite_work as work

        path = os.path.join(os.path.dirname(importlib.util.find_spec("numpy").origin), {FILE!r})

        async def main():
            async with asi.InterpreterPool({workers}, fallback="copy") as pool:
                runs = await asyncio.gather(*[pool.run(work.run_file, path)
                                              for _ in range({workers})])
                cores = await pool.run(copyfuncs.mapped, "_multiarray_umath")
                folder = pool.statistics()["copies_folder"]
            report("interpreters", runs)
            report("from_copies", [core.startswith(folder + os.sep) for core in cores])
            report("numpy_in_main_before", "numpy" in sys.modules)
            report("baseline", work.run_file(path))
    """,
        loop_kind,
        timeout=150,
    )
    base = reports["baseline"]
    base_counts = collections.Counter(outcome for outcome, _ in base["tests"].values())
    assert base["rc"] == 0 and not base["collect_errors"], base["tail"]
    assert len(base["tests"]) > 50, base_counts
    assert base_counts["failed"] == base_counts["error"] == 0, base_counts
    # The baseline ran after the pool closed, in a main interpreter that had not imported numpy.
    assert reports["numpy_in_main_before"] is False
    assert any(reports["from_copies"]), "the workers' numpy core was not a private copy"
    for run in reports["interpreters"]:
        counts = collections.Counter(outcome for outcome, _ in run["tests"].values())
        assert run["rc"] == 0 and not run["collect_errors"], run["tail"]
        assert counts == base_counts
        differ = {
            nodeid: (base["tests"].get(nodeid), outcome)
            for nodeid, outcome in run["tests"].items()
            if base["tests"].get(nodeid, [None])[0] != outcome[0]
        }
        assert not differ, differ
        assert run["numpy_file"] == base["numpy_file"]  # numpy's Python files: the installed ones
