"""pool.profile() and `python -m aiosubinterp profile`: each interpreter profiles itself."""

from __future__ import annotations

import asyncio
import json
import os
import pstats
import subprocess
import sys

import proffuncs
import pytest

import aiosubinterp as asi
from aiosubinterp._engine import flamegraph
from aiosubinterp._engine import profiling as _profiling

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = sys.version_info >= (3, 13)
needs_313 = pytest.mark.skipif(
    not HERE,
    reason="cProfile does not load in a subinterpreter "
    "on 3.12: test_refused_on_312 covers that version",
)


def calls(raw, name, module=proffuncs):
    """ncalls of function `name` of `module` in a raw stats dict (0 if absent)."""
    path = module.__file__
    found = [v[1] for k, v in raw.items() if k[2] == name and k[0] == path]
    return sum(found)


def stats_calls(stats: pstats.Stats, name: str) -> int:
    return calls(stats.stats, name)  # type: ignore[attr-defined]


@needs_313
async def test_merged_and_per_interpreter_counts():
    async with asi.InterpreterPool(2) as pool:
        async with pool.profile() as prof:
            ids = await asyncio.gather(*(pool.submit(proffuncs.branch, 2000) for _ in range(6)))
            await pool.run(proffuncs.other, 10)
        merged = prof.stats()
        assert stats_calls(merged, "branch") == 6
        assert stats_calls(merged, "leaf") == 13
        assert stats_calls(merged, "other") == 1
        per = prof.per_interpreter()
        assert set(ids) <= set(per)
        for interp in set(ids):
            assert stats_calls(per[interp], "branch") == ids.count(interp)
        assert sum(stats_calls(s, "leaf") for s in per.values()) == 13
        assert prof.tasks == 7 and prof.closed
        assert "closed, 7 tasks" in repr(prof)


@needs_313
async def test_context_vars_hold_in_profiled_tasks():
    # The pool's context_vars travel with the profiled call: the task sees the
    # caller's values, plain and async, and is counted.
    import ctxfuncs

    async with asi.InterpreterPool(2, context_vars=[ctxfuncs.request_id]) as pool:
        token = ctxfuncs.request_id.set("r-prof")
        try:
            async with pool.profile() as prof:
                assert (await pool.run(ctxfuncs.read))[0] == "r-prof"
                assert (await pool.run(ctxfuncs.aread))[0] == "r-prof"
        finally:
            ctxfuncs.request_id.reset(token)
        assert (await pool.run(ctxfuncs.read))[0] == "<unset>"
    raw = prof.stats().stats  # type: ignore[attr-defined]
    assert calls(raw, "aread", ctxfuncs) >= 1  # cProfile counts each resumption
    assert calls(raw, "read", ctxfuncs) == 2  # once itself, once from aread


@needs_313
async def test_profiled_tasks_find_their_function_once_per_worker():
    # A profiled task's function is found by the worker's resolver, with its
    # cache, as an unprofiled task's: Looked.work is looked up on its class
    # once in the worker, however often it runs, profiled or not.
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(proffuncs.Looked.work, 1) == 1
        async with pool.profile() as prof:
            for i in range(3):
                assert await pool.run(proffuncs.Looked.work, i) == i
        assert await pool.run(proffuncs.lookups) == 1
        assert stats_calls(prof.stats(), "work") == 3


@needs_313
async def test_off_after_the_block_and_again_on():
    async with asi.InterpreterPool(2) as pool:
        async with pool.profile() as prof:
            await pool.run(proffuncs.branch, 100)
        await pool.run(proffuncs.branch, 100)  # not measured
        await asyncio.gather(*(pool.submit(proffuncs.other, 10) for _ in range(4)))
        assert stats_calls(prof.stats(), "branch") == 1
        assert stats_calls(prof.stats(), "other") == 0
        assert prof.tasks == 1
        with pool.profile() as again:  # a plain `with` too
            await pool.run(proffuncs.other, 10)
        assert stats_calls(again.stats(), "other") == 1
        assert stats_calls(again.stats(), "branch") == 0


@needs_313
async def test_stats_while_on_and_empty_profile():
    async with asi.InterpreterPool(1) as pool:
        prof = pool.profile()
        assert prof.stats().stats == {}  # type: ignore[attr-defined]
        assert prof.per_interpreter() == {}
        await pool.run(proffuncs.other, 10)
        assert stats_calls(prof.stats(), "other") == 1  # read while still on
        await pool.run(proffuncs.other, 10)
        prof.close()
        prof.close()  # idempotent
        assert stats_calls(prof.stats(), "other") == 2


@needs_313
async def test_one_profile_at_a_time_and_closed_pool():
    pool = asi.InterpreterPool(1)
    async with pool:
        async with pool.profile():
            with pytest.raises(RuntimeError, match="already being profiled"):
                pool.profile()
    with pytest.raises(RuntimeError, match="closed"):
        pool.profile()


@needs_313
async def test_replaced_workers_are_profiled():
    # Each interpreter retires after one task: six tasks run in six interpreters
    # started while profiling was on.
    async with asi.InterpreterPool(2, max_tasks_per_interpreter=1) as pool:
        async with pool.profile() as prof:
            ids = [await pool.run(proffuncs.branch, 100) for _ in range(6)]
        assert len(set(ids)) == 6
        per = prof.per_interpreter()
        assert set(per) == set(ids)
        assert all(stats_calls(s, "branch") == 1 for s in per.values())


@needs_313
async def test_failing_cancelled_and_self_profiling_tasks():
    async with asi.InterpreterPool(1) as pool:
        async with pool.profile() as prof:
            with pytest.raises(ValueError, match="fails") as info:
                await pool.run(proffuncs.fails, 10)
            # The remote traceback is the task's, without the profiling frames.
            remote = info.value.__cause__.remote_traceback  # type: ignore[union-attr]
            assert "proffuncs.py" in remote and "run_profiled" not in remote
            # One profiler per interpreter: a task that starts its own meanwhile gets
            # CPython's error, as under `python -m cProfile`.
            refusal = r"Another profiling tool is already active|is already in use"
            with pytest.raises(ValueError, match=refusal):
                await pool.run(proffuncs.profiles_itself, 10)
            rfd, wfd = os.pipe()
            try:
                task = pool.submit(proffuncs.signal_then_spin, wfd)
                started = asyncio.Event()
                asyncio.get_running_loop().add_reader(rfd, started.set)
                await started.wait()
                asyncio.get_running_loop().remove_reader(rfd)
            finally:
                os.close(rfd)
                os.close(wfd)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The interpreter measures the next task again (nothing left enabled).
            await pool.run(proffuncs.other, 10)
        raw = prof.raw()
        assert calls(raw, "fails") == 1
        assert calls(raw, "profiles_itself") == 1
        # Measured up to its interruption. Not its own entry: a cancel that lands as a
        # callee starts raises before CPython reports the call, so cProfile closes the
        # caller's frame (signal_then_spin) as that callee's.
        assert calls(raw, "leaf") > 1  # the spin's (other calls it once)
        assert calls(raw, "other") == 1
        assert calls(raw, "fails") == 1


@needs_313
async def test_a_task_under_an_interpreters_own_profiler_runs_unmeasured():
    async with asi.Interpreter() as interp:
        await interp.run(proffuncs.own_profiler, True)  # left on, before the profile
        async with interp.profile() as prof:
            assert await interp.run(proffuncs.other, 10) == proffuncs.leaf(10)
        assert await interp.run(proffuncs.own_profiler, False) == 1  # its profiler saw it
        assert calls(prof.raw(), "other") == 0 and prof.tasks == 1


@needs_313
async def test_coroutines_and_exec_are_profiled():
    async with asi.Interpreter() as interp:
        async with interp.profile() as prof:
            assert await interp.run(proffuncs.awaits_then_leaf, 10) == proffuncs.leaf(10)
            await interp.exec("def twice(x):\n    return 2 * x\ny = [twice(i) for i in range(5)]")
        raw = prof.raw()
        # cProfile counts each resumption of a coroutine as a call: before and after its await.
        assert calls(raw, "awaits_then_leaf") == 2 and calls(raw, "leaf") == 1
        twice = [v for k, v in raw.items() if k[0] == "<aiosubinterp exec>" and k[2] == "twice"]
        assert twice and twice[0][1] == 5


@needs_313
async def test_dump_writes_pstats(tmp_path):
    async with asi.InterpreterPool(1) as pool:
        async with pool.profile() as prof:
            await pool.run(proffuncs.branch, 10)
        prof.dump(tmp_path / "out.pstats")
        assert stats_calls(pstats.Stats(str(tmp_path / "out.pstats")), "leaf") == 2
        with pytest.raises(TypeError, match="needs a file path"):
            prof.dump(42)  # type: ignore[arg-type]


@pytest.mark.skipif(HERE, reason="3.12 only; the other tests cover 3.13+")
async def test_refused_on_312(tmp_path):
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(RuntimeError, match=r"needs CPython 3\.13"):
            pool.profile()
        assert await pool.run(proffuncs.other, 3) == 5


@pytest.mark.skipif(HERE, reason="3.12 only; the other tests cover 3.13+")
def test_cli_refused_on_312(tmp_path):
    (tmp_path / "s.py").write_text("print('ran')\n")
    proc = run_cli(tmp_path, "s.py")
    assert proc.returncode == 2 and "needs CPython 3.13" in proc.stderr
    assert "ran" not in proc.stdout


def test_folded_stacks_from_edges():
    root, a, b, c = ("m.py", 1, "root"), ("m.py", 5, "a"), ("m.py", 9, "b"), ("m.py", 13, "c")
    # root (1 s own) calls a (4 s) and b (5 s); a and b each call c (2 s from each).
    raw = {
        root: (1, 1, 1.0, 10.0, {}),
        a: (1, 1, 2.0, 4.0, {root: (1, 1, 2.0, 4.0)}),
        b: (1, 1, 3.0, 5.0, {root: (1, 1, 3.0, 5.0)}),
        c: (2, 2, 4.0, 4.0, {a: (1, 1, 2.0, 2.0), b: (1, 1, 2.0, 2.0)}),
    }
    stacks = flamegraph.folded_stacks(raw)
    assert stacks == pytest.approx(
        {(root,): 1.0, (root, a): 2.0, (root, a, c): 2.0, (root, b): 3.0, (root, b, c): 2.0}
    )
    assert sum(stacks.values()) == pytest.approx(10.0)
    svg = flamegraph.render_svg(raw, "t", "s")
    assert svg.startswith("<svg") and "root (m.py:1)" in svg and "10 s" in svg
    doc = json.loads(flamegraph.speedscope_json(raw, "t"))
    assert {f["name"] for f in doc["shared"]["frames"]} == {
        "root (m.py:1)",
        "a (m.py:5)",
        "b (m.py:9)",
        "c (m.py:13)",
    }
    assert sum(doc["profiles"][0]["weights"]) == pytest.approx(10.0)


def test_merge_into_adds_counts_and_edges():
    f, g = ("m.py", 1, "f"), ("m.py", 2, "g")
    into = {g: (1, 1, 0.5, 0.5, {f: (1, 1, 0.5, 0.5)})}
    _profiling.merge_into(into, {g: (2, 2, 1.0, 1.0, {f: (2, 2, 1.0, 1.0)}), f: (1, 1, 0, 1, {})})
    assert into[g][:4] == (3, 3, 1.5, 1.5) and into[g][4][f] == (3, 3, 1.5, 1.5)
    assert into[f][1] == 1


SCRIPT = """\
import asyncio
import sys

import aiosubinterp


def crunch_numbers(n):
    return sum(i * i for i in range(n))


async def main():
    async with aiosubinterp.InterpreterPool(2) as pool:
        await asyncio.gather(*(pool.submit(crunch_numbers, 5000) for _ in range(5)))
    print("args", sys.argv[1:])
    sys.exit(int(sys.argv[1]))


if __name__ == "__main__":
    asyncio.run(main())
"""


def run_cli(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "aiosubinterp", "profile", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": ROOT},
    )


@needs_313
def test_cli_writes_report_and_flame_graph(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    out = tmp_path / "report"
    proc = run_cli(tmp_path, "-o", str(out), "script.py", "3", "--flag")
    # The script's own exit status and arguments go through.
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "args ['3', '--flag']" in proc.stdout
    assert "5 tasks profiled" in proc.stderr
    text = (out / "profile.txt").read_text()
    assert "crunch_numbers" in text and "5 tasks profiled in" in text
    assert "== all interpreters together" in text and "== interpreter " in text
    merged = pstats.Stats(str(out / "profile.pstats"))
    assert (
        sum(
            v[1]
            for k, v in merged.stats.items()  # type: ignore[attr-defined]
            if k[2] == "crunch_numbers"
        )
        == 5
    )
    svg = (out / "flamegraph.svg").read_text()
    assert svg.startswith("<svg") and "crunch_numbers (script.py:7)" in svg
    doc = json.loads((out / "profile.speedscope.json").read_text())
    assert any(f["name"] == "crunch_numbers (script.py:7)" for f in doc["shared"]["frames"])


@needs_313
def test_cli_bad_input(tmp_path):
    proc = run_cli(tmp_path, "missing.py")
    assert proc.returncode == 2 and "no such file" in proc.stderr
    (tmp_path / "afile").write_text("")
    (tmp_path / "script.py").write_text("print('ran')\n")
    proc = run_cli(tmp_path, "-o", "afile", "script.py")
    assert proc.returncode == 2 and "is a file" in proc.stderr and "ran" not in proc.stdout
    proc = run_cli(tmp_path)
    assert proc.returncode == 2 and "SCRIPT" in proc.stderr


@needs_313
async def test_pool_profile_under_the_process_profile():
    # What `python -m aiosubinterp profile` does: pools join the process-wide
    # profile; a pool.profile() inside counts for both.
    outer = _profiling.start_process_profile()
    try:
        async with asi.InterpreterPool(1) as pool:
            await pool.run(proffuncs.other, 10)
            async with pool.profile() as inner:
                await pool.run(proffuncs.branch, 10)
            await pool.run(proffuncs.other, 10)
    finally:
        _profiling.stop_process_profile()
    assert calls(inner.raw(), "branch") == 1 and calls(inner.raw(), "other") == 0
    assert calls(outer.raw(), "branch") == 1 and calls(outer.raw(), "other") == 2
    assert outer.closed and _profiling._process_profile is None


@needs_313
def test_cli_script_without_pools(tmp_path):
    (tmp_path / "script.py").write_text("print('no pool here')\n")
    proc = run_cli(tmp_path, "-o", "out", "script.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no pool here" in proc.stdout and "0 tasks profiled" in proc.stderr
    assert (
        "no task ran in an interpreter while profiling"
        in (tmp_path / "out" / "profile.txt").read_text()
    )
    assert (tmp_path / "out" / "flamegraph.svg").read_text().startswith("<svg")
    assert json.loads((tmp_path / "out" / "profile.speedscope.json").read_text())["profiles"]


@needs_313
async def test_unshareable_arguments_are_refused_as_without_profiling():
    import threading

    async with asi.InterpreterPool(1) as pool:
        async with pool.profile() as prof:
            with pytest.raises(asi.NotShareableError, match="other"):
                pool.submit(proffuncs.other, threading.Lock())
            assert await pool.run(proffuncs.other, 10) == proffuncs.leaf(10)
        assert calls(prof.raw(), "other") == 1


@needs_313
async def test_overlapping_coroutines_share_one_measurement():
    async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
        async with pool.profile() as prof:
            results = await asyncio.gather(
                *(pool.submit(proffuncs.awaits_then_leaf, 10) for _ in range(4)),
                pool.submit(proffuncs.other, 10),
            )
        assert results == [proffuncs.leaf(10)] * 5
        raw = prof.raw()
        assert calls(raw, "awaits_then_leaf") == 8  # each resumed once after its await
        assert calls(raw, "leaf") == 5 and calls(raw, "other") == 1
        # Nothing left on: a later task is measured again in a new profile.
        async with pool.profile() as again:
            await pool.run(proffuncs.other, 10)
        assert calls(again.raw(), "other") == 1


def test_the_worker_side_of_profiling_runs_only_in_workers():
    # run_profiled finds the job through its worker's resolver: main has none.
    from aiosubinterp._inside import profiling as inside

    with pytest.raises(RuntimeError, match="only in a worker"):
        inside.run_profiled(None, 1, ("os", "getpid", (), ()))
