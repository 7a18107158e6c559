"""A task that leaves a thread running in its interpreter (finding R3 of an
outside memory-safety review).

CPython's Py_EndInterpreter joins the interpreter's `threading` threads
without bound and aborts ("not the last thread") if any other thread state
is left. So a close waits for such threads at most the pool's cancel_grace,
then warns and abandons the interpreter (never ends it); the exit sweep ends
an abandoned interpreter whose threads finished meanwhile, and otherwise
exits with 70 instead of hanging or aborting.

Cases that hang or abort without the fix run in a child process (an
abandoned interpreter would also outlive the test, which conftest's
no_leaks fixture refuses); worker functions are in tests/threadfuncs.py.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import childproc
import pytest
import threadfuncs

import aiosubinterp as asi

LOOPS = ["asyncio", "uvloop"]


def run_child(
    tmp_path, body: str, loop_kind: str, timeout: float = 90
) -> subprocess.CompletedProcess:
    """Run `async def main()` (body) on loop_kind in a fresh interpreter; its outcome."""
    source = (
        textwrap.dedent("""
        import asyncio, os, sys, warnings
        import aiosubinterp as asi
        import threadfuncs

        async def close_showing_warnings(pool):
            # aclose() the pool; print each warning it raised as a "warned:" line.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await asyncio.wait_for(pool.aclose(), 60)
            for m in caught:
                print("warned:", m.category.__name__, m.message, flush=True)
    """)
        + textwrap.dedent(body)
        + textwrap.dedent(f"""
        if {loop_kind!r} == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
        print("left main", flush=True)
    """)
    )
    return childproc.run_child(tmp_path, source, timeout)


def interp_of(out: str) -> str:
    """The interpreter id the child printed as "interp N"."""
    return out.split("interp ", 1)[1].split()[0]


def warned(out: str) -> list[str]:
    """The "warned:" lines close_showing_warnings() printed."""
    return [line for line in out.splitlines() if line.startswith("warned:")]


def no_crash(proc: subprocess.CompletedProcess) -> None:
    assert "Fatal Python error" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode not in (-6, 134, -11, 139), (proc.returncode, proc.stderr[-3000:])


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_thread_left_running_then_aclose_warns_abandons_and_exit_says_so(tmp_path, loop_kind):
    proc = run_child(
        tmp_path,
        """
        async def main():
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            iid = await pool.run(threadfuncs.interp_id)
            print("interp", iid, flush=True)
            await pool.run(threadfuncs.leave_thread, "left-behind")
            await close_showing_warnings(pool)
            print("closed", pool.closed, flush=True)
            async with asi.InterpreterPool(1) as other:
                print("next pool", await other.run(threadfuncs.interp_id) != iid, flush=True)
    """,
        loop_kind,
    )
    no_crash(proc)
    out = proc.stdout
    iid = interp_of(out)
    assert "closed True\nnext pool True\nleft main\n" in out, (out, proc.stderr[-3000:])
    lines = warned(out)
    assert len(lines) == 1, out
    assert "RuntimeWarning" in lines[0] and "'left-behind'" in lines[0], lines
    assert f"interpreter {iid}" in lines[0], lines
    # The thread still sleeps at exit: the sweep cannot end that interpreter.
    assert proc.returncode == 70, (proc.returncode, out, proc.stderr[-3000:])
    assert f"interpreter {iid}" in proc.stderr and "'left-behind'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_thread_left_running_at_exit_exits_70(tmp_path, loop_kind):
    # No close: the exit sweep meets the worker with its thread still running.
    proc = run_child(
        tmp_path,
        """
        async def main():
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            await pool.start()
            print("interp", await pool.run(threadfuncs.interp_id), flush=True)
            await pool.run(threadfuncs.leave_thread, "left-at-exit")
            pool._state = "closed"  # no ResourceWarning: this test is about the sweep
    """,
        loop_kind,
    )
    no_crash(proc)
    iid = interp_of(proc.stdout)
    assert "left main\n" in proc.stdout
    assert proc.returncode == 70, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert f"interpreter {iid}" in proc.stderr and "'left-at-exit'" in proc.stderr, proc.stderr


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_raw_thread_left_running_then_aclose_does_not_abort(tmp_path, loop_kind):
    proc = run_child(
        tmp_path,
        """
        async def main():
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            iid = await pool.run(threadfuncs.interp_id)
            print("interp", iid, flush=True)
            await pool.run(threadfuncs.leave_raw)
            await close_showing_warnings(pool)
            print("closed", pool.closed, flush=True)
    """,
        loop_kind,
    )
    no_crash(proc)
    out = proc.stdout
    iid = interp_of(out)
    assert "closed True\nleft main\n" in out, (out, proc.stderr[-3000:])
    lines = warned(out)
    assert len(lines) == 1 and "RuntimeWarning" in lines[0], out
    assert f"interpreter {iid}" in lines[0] and "1 thread" in lines[0], lines
    assert proc.returncode == 70, (proc.returncode, out, proc.stderr[-3000:])
    assert f"interpreter {iid}" in proc.stderr


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_raw_thread_with_a_dummy_thread_object_is_counted_not_joined(tmp_path, loop_kind):
    # threading lists it (a _DummyThread), whose join() raises: on 3.12 an
    # AssertionError, on 3.13 a RuntimeError.
    proc = run_child(
        tmp_path,
        """
        async def main():
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            await pool.run(threadfuncs.leave_raw_with_object)
            await close_showing_warnings(pool)
            print("closed", pool.closed, flush=True)
    """,
        loop_kind,
    )
    no_crash(proc)
    out = proc.stdout
    assert "closed True\nleft main\n" in out, (out, proc.stderr[-3000:])
    lines = warned(out)
    assert len(lines) == 1 and "1 thread (1 started with _thread)" in lines[0], out
    assert proc.returncode == 70, (proc.returncode, out, proc.stderr[-3000:])


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_abandoned_interpreter_is_ended_at_exit_once_its_thread_finished(tmp_path, loop_kind):
    proc = run_child(
        tmp_path,
        """
        async def main():
            r, w = os.pipe()
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            await pool.run(threadfuncs.leave_thread_until, r)
            await close_showing_warnings(pool)
            os.write(w, b"x")  # the thread ends; the exit sweep may end the interpreter
    """,
        loop_kind,
    )
    no_crash(proc)
    assert "'waits-for-a-byte'" in proc.stdout, proc.stdout
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "left main\n" in proc.stdout


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_replaced_worker_with_a_running_thread_is_abandoned(tmp_path, loop_kind):
    # max_tasks_per_interpreter=1: the worker retires after the task and is
    # replaced while the thread it started still runs.
    proc = run_child(
        tmp_path,
        """
        async def main():
            async with asi.InterpreterPool(1, max_tasks_per_interpreter=1,
                                           cancel_grace=0.2) as pool:
                first = await pool.run(threadfuncs.interp_id)
                await pool.run(threadfuncs.leave_thread, "outlives-its-worker")
                again = await asyncio.wait_for(pool.run(threadfuncs.interp_id), 60)
                print("replaced", first != again, pool.statistics()["state"], flush=True)
            print("closed", pool.closed, flush=True)
    """,
        loop_kind,
    )
    no_crash(proc)
    out = proc.stdout
    assert "replaced True running\nclosed True\nleft main\n" in out, (out, proc.stderr[-3000:])
    assert "RuntimeWarning" in proc.stderr and "'outlives-its-worker'" in proc.stderr, proc.stderr
    assert proc.returncode == 70, (proc.returncode, out, proc.stderr[-3000:])


async def test_thread_that_finishes_in_time_is_joined_without_warning(pipe):
    # Warnings are errors here, and no_leaks checks the interpreter is gone.
    r, w = pipe
    pool = asi.InterpreterPool(1, cancel_grace=5.0)
    await pool.run(threadfuncs.short_thread, w)
    assert os.read(r, 1) == b"t"
    await pool.run(threadfuncs.short_raw, w)
    assert os.read(r, 1) == b"t"
    await pool.aclose()
    assert pool.closed


async def test_thread_still_starting_when_the_pool_closes_is_joined(pipe):
    # The close comes while the thread may not have run a line yet.
    r, w = pipe
    async with asi.InterpreterPool(1, cancel_grace=30.0) as pool:
        await pool.run(threadfuncs.short_thread, w)
        await pool.run(threadfuncs.short_raw, w)
    assert os.read(r, 2) in (b"tt", b"t")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_worker_replaced_after_a_stuck_cancel_with_a_running_thread(tmp_path, loop_kind):
    # The cancelled task ignores interruptions: its worker is given up on and
    # replaced; once the task ends, its thread still runs, and the close
    # abandons that interpreter with a warning.
    proc = run_child(
        tmp_path,
        """
        async def main():
            r, w = os.pipe()
            r2, w2 = os.pipe()
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            task = pool.submit(threadfuncs.stubborn_with_thread, r, w2)
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, os.read, r2, 1) == b"s"
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                print("cancelled", flush=True)
            await asyncio.wait_for(pool.run(threadfuncs.interp_id), 60)  # a new worker
            print("replaced", pool.statistics()["replaced"], flush=True)
            os.write(w, b"xx")  # the stubborn task returns; its thread runs on
            await close_showing_warnings(pool)
            print("closed", pool.closed, flush=True)
    """,
        loop_kind,
    )
    no_crash(proc)
    out = proc.stdout
    assert "cancelled\nreplaced 1\n" in out and "closed True\nleft main\n" in out, (
        out,
        proc.stderr[-3000:],
    )
    lines = warned(out)
    assert len(lines) == 1 and "'from-stubborn-task'" in lines[0], out
    assert proc.returncode == 70, (proc.returncode, out, proc.stderr[-3000:])
    assert "'from-stubborn-task'" in proc.stderr
