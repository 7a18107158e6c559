"""Races and stuck workers: a worker holding its GIL in C, a cancellation racing a
job that became a coroutine, submit racing shutdown, completions for a closed hub,
an exception escaping the job loop, a share racing its owner's end, setup blobs.

Crash-prone paths run in a child process that checks the exit code.
"""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig

import pytest
import racefuncs
import workfuncs
from childproc import run_child

import aiosubinterp as asi
from aiosubinterp import _core
from aiosubinterp._inside import worker as _worker

needs_313 = pytest.mark.skipif(
    not _worker.coroutines_supported(),
    reason="coroutines in workers need CPython 3.13+ (3.12 aborts at exit)",
)

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
# A free-threaded build has no GIL for a worker to hold: an interruption is
# injected at once (interrupt() returns True), so "the worker keeps its GIL,
# the call gives up after its timeout" cannot be set up there.
needs_a_gil_to_hold = pytest.mark.skipif(
    FREE_THREADED,
    reason="free-threaded build: no GIL for the worker to hold, so the "
    "interruption is delivered at once; this test's premise does not exist there",
)
# On 3.13t CPython stops EVERY interpreter's threads for some operations in
# main, e.g. importing an extension module (_imp_create_dynamic ->
# _PyEval_EnableGILTransient -> _PyEval_StopTheWorldAll, seen with gdb on
# 3.13.15t); a worker in C code that never reaches an eval breaker never
# stops, so main waits until the C call returns. The pool imports _pickle
# before its first task there (lifecycle.py), which fixed the exit sweep
# (test_exit_with_a_cancelled_task_stuck_in_c_ends_with_70 passes on 3.13t).
# Creating an interpreter stops every thread too, so there a replacement
# waits until the stuck call returns: the free-threaded variant below.
stuck_in_c_blocks_imports = pytest.mark.skipif(
    FREE_THREADED,
    reason="free-threaded builds: creating an interpreter stops every thread, "
    "so the replacement waits for the C call to return (the free-threaded variant)",
)


async def holding(flag) -> None:
    """Wait until hold_gil() holds its worker's GIL (flag[1] set, in C, after its b"s")."""
    while flag[1] != 1:
        await asyncio.sleep(0.001)


async def read_byte(fd: int) -> bytes:
    """One byte from fd, waiting on the running loop (no thread, no polling)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, 1)


# -- 7: a worker that keeps its GIL in C ------------------------------------------


def test_exit_with_a_cancelled_task_stuck_in_c_ends_with_70(tmp_path):
    # The exit sweep interrupts the task; the interruption cannot get the
    # worker's GIL (sum() in C never yields it). The sweep must not wait for
    # it: after its grace period (5 s) it reports and exits with 70.
    proc = run_child(
        tmp_path,
        """
        import asyncio, os
        import aiosubinterp as asi
        import aiohelpers, racefuncs

        async def main():
            r, w = os.pipe()
            pool = asi.InterpreterPool(1, cancel_grace=0.2)
            await pool.start()
            task = pool.submit(racefuncs.sum_forever, w)
            # Read on the loop, not in run_in_executor: its first use imports
            # _queue, and on a free-threaded build an extension import in main
            # waits for a worker stuck in C (a documented CPython limit).
            await aiohelpers.read_byte(r)  # inside sum() now
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                print("cancelled", flush=True)
            print("leaving main", flush=True)

        asyncio.run(main())
    """,
    )
    assert proc.returncode == 70, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "cancelled\nleaving main\n" in proc.stdout
    assert "still running a task at exit" in proc.stderr
    assert "blocked in C code" in proc.stderr


@stuck_in_c_blocks_imports
async def test_worker_stuck_in_c_holding_its_gil_is_replaced(pipe):
    r, w = pipe
    flag = asi.SharedBuffer(2)
    async with asi.InterpreterPool(1, cancel_grace=0.2) as pool:
        stuck_id = await pool.run(workfuncs.interp_id)
        task = pool.submit(racefuncs.hold_gil, flag, w)
        try:
            assert await read_byte(r) == b"s"  # the worker holds its GIL in C now
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Only a replacement can serve this (the pool has one interpreter).
            new_id = await asyncio.wait_for(pool.run(workfuncs.interp_id), 30)
            assert new_id != stuck_id
            assert pool.statistics()["replaced"] == 1
        finally:
            flag[0] = 1  # the abandoned worker returns, and is destroyed at close


@pytest.mark.skipif(
    not FREE_THREADED,
    reason="free-threaded builds only: with a GIL the replacement starts at once (the test above)",
)
@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_free_threaded_worker_stuck_in_c_is_replaced_once_its_call_returns(tmp_path, loop_kind):
    # There creating an interpreter stops every thread of the process, and a
    # worker in C never stops: the replacement must wait for the call to
    # return, say why, and keep the event loop running meanwhile. In a child:
    # a regression would freeze the whole process, pytest's timeout included.
    proc = run_child(
        tmp_path,
        f"""
        import asyncio, os, time, warnings
        import aiosubinterp as asi
        import aiohelpers, racefuncs, workfuncs

        async def main():
            r, w = os.pipe()
            flag = asi.SharedBuffer(2)
            async with asi.InterpreterPool(1, cancel_grace=0.2) as pool:
                stuck_id = await pool.run(workfuncs.interp_id)
                task = pool.submit(racefuncs.hold_gil, flag, w)
                # Read on the loop, not in run_in_executor: its first use
                # imports _queue, and on this build an extension import in
                # main waits for a worker stuck in C (a CPython limit). It
                # froze the child once in CI when the worker got there first.
                assert await aiohelpers.read_byte(r) == b"s"
                with warnings.catch_warnings(record=True) as seen:
                    warnings.simplefilter("always")
                    task.cancel()
                    try:
                        await task
                    except asyncio.CancelledError:
                        print("cancelled", flush=True)
                    following = pool.submit(workfuncs.interp_id)
                    deadline = time.monotonic() + 20
                    while not seen and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)  # the loop keeps running
                    print("warned:", [str(m.message) for m in seen], flush=True)
                    print("done while stuck:", following.done(), flush=True)
                    flag[0] = 1  # the C call returns: the replacement may start
                    new_id = await asyncio.wait_for(following, 30)
                print("new worker:", new_id != stuck_id, pool.statistics()["replaced"], flush=True)

        if "{loop_kind}" == "uvloop":
            import uvloop
            uvloop.run(main())
        else:
            asyncio.run(main())
        print("exited", flush=True)
    """,
        timeout=90,
    )
    out = proc.stdout
    assert proc.returncode == 0, (proc.returncode, out, proc.stderr[-3000:])
    assert "cancelled\n" in out
    assert "cannot create an interpreter until that call returns" in out
    assert "done while stuck: False\n" in out
    assert "new worker: True 1\n" in out
    assert out.endswith("exited\n")


@needs_a_gil_to_hold
async def test_worker_interrupt_is_bounded_and_delivered_later(pipe):
    r, w = pipe
    flag = asi.SharedBuffer(2)
    async with asi.InterpreterPool(1, cancel_grace=60) as pool:
        await pool.run(workfuncs.interp_id)
        task = pool.submit(racefuncs.hold_gil_then_spin, flag, w)
        try:
            assert await read_byte(r) == b"s"
            await asyncio.wait_for(holding(flag), 30)
            (worker,) = pool._workers.values()
            loop = asyncio.get_running_loop()
            # The worker keeps its GIL: the call gives up after its timeout.
            assert await loop.run_in_executor(None, worker.interrupt, task._tid, 0.05) is False
            with pytest.raises(ValueError, match="timeout"):
                worker.interrupt(task._tid, -1.0)
        finally:
            flag[0] = 1
        # Still pending: once the worker runs bytecode again and yields its
        # GIL, the interruption lands.
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert pool.statistics()["replaced"] == 0


# -- 6: a cancellation claimed while the job became a coroutine -------------------


@needs_313
@needs_a_gil_to_hold
@pytest.mark.parametrize("concurrency", [1, 2])
async def test_interrupt_claimed_while_the_worker_loop_sleeps_cancels_the_coroutine(
    pipe, concurrency
):
    r, w = pipe
    flag = asi.SharedBuffer(2)
    async with asi.InterpreterPool(
        1, concurrency_per_interpreter=concurrency, cancel_grace=60
    ) as pool:
        first_id = await pool.run(racefuncs.async_interp_id)  # the worker's loop exists
        task = pool.submit(racefuncs.hold_gil_then_sleep, flag, w)
        try:
            assert await read_byte(r) == b"s"
            await asyncio.wait_for(holding(flag), 30)
            (worker,) = pool._workers.values()
            loop = asyncio.get_running_loop()
            # Decided while the job is a plain call (inject); the GIL comes later.
            assert await loop.run_in_executor(None, worker.interrupt, task._tid, 0.05) is False
        finally:
            flag[0] = 1
        # The job returns a coroutine and the worker's loop sleeps in epoll,
        # yielding the GIL: the pending interruption must cancel the coroutine
        # there, not inject an exception nobody sees.
        assert await asyncio.wait_for(read_byte(r), 30) == b"c"
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        assert await pool.run(workfuncs.interp_id) == first_id
        assert pool.statistics()["replaced"] == 0


@needs_313
@pytest.mark.parametrize("concurrency", [1, 2])
async def test_timeout_on_the_first_coroutine_of_a_fresh_pool(pipe, concurrency):
    # The review's repro: the cancel arrives while the worker imports asyncio
    # and makes its loop. It must end the task at once, not after the grace
    # period with the worker replaced.
    _r, w = pipe
    async with asi.InterpreterPool(
        1, concurrency_per_interpreter=concurrency, cancel_grace=60
    ) as pool:
        first_id = await pool.run(workfuncs.interp_id)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pool.run(racefuncs.async_sleep_marked, w), 0.005)

        async def idle():
            while pool.statistics()["running"]:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(idle(), 30)
        assert await pool.run(workfuncs.interp_id) == first_id
        assert pool.statistics()["replaced"] == 0


# -- 1: Queue.submit racing the executor's shutdown --------------------------------


def test_executor_submit_pickling_while_another_thread_shuts_down(tmp_path):
    # The argument's __reduce__ runs inside Queue.submit (the GIL is released
    # there) while another thread shuts the executor down, which closes and
    # frees its completion hub. Before the fix submit then used the freed hub
    # (a hang on its mutex, or a double free).
    proc = run_child(
        tmp_path,
        """
        import os, threading
        import aiosubinterp as asi
        import workfuncs

        reducing = threading.Event()
        shut = threading.Event()

        class Slow:
            def __reduce__(self):
                reducing.set()
                shut.wait()
                return (int, (3,))

        ex = asi.InterpreterPoolExecutor(1)
        assert ex.submit(workfuncs.square, 2).result() == 4
        outcome = []

        def submitter():
            try:
                ex.submit(workfuncs.square, Slow())
                outcome.append("accepted")
            except RuntimeError as exc:
                outcome.append(str(exc))

        t = threading.Thread(target=submitter)
        t.start()
        reducing.wait()
        ex.shutdown(wait=True)
        # The hub's fd number is free now and goes to this pipe; a stale
        # close(hub fd) from the submit would close it.
        r, w = os.pipe()
        shut.set()
        t.join()
        print(outcome, flush=True)
        os.fstat(r)
        with asi.InterpreterPoolExecutor(1) as ex2:
            assert ex2.submit(workfuncs.square, 5).result() == 25
        print("ok", flush=True)
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "['cannot schedule new futures after shutdown']\nok\n" == proc.stdout


# -- 3: completions dropped by a closed hub ----------------------------------------


def test_result_dropped_by_a_closed_hub_releases_its_fd_and_share(pipe):
    r, w = pipe
    sr, sw = os.pipe()
    fds_before = set(os.listdir("/proc/self/fd"))
    shares_before = _core.share_stats()[0]
    pool = asi.InterpreterPool(1)

    async def main():
        await pool.start()
        pool.submit(racefuncs.wait_then_return_carriers, sw, r)
        # Blocked in os.read: the loop's end interrupts the task (which
        # ignores it) and closes the hub before the task returns.
        assert await read_byte(sr) == b"s"

    try:
        asyncio.run(main())
        os.write(w, b"!")  # the task returns an fd duplicate and a share into a closed hub
        asyncio.run(pool.aclose())
    finally:
        os.close(sr)
        os.close(sw)
    assert _core.share_stats()[0] == shares_before
    leaked = set(os.listdir("/proc/self/fd")) - fds_before
    assert not leaked, f"fds of the dropped result leaked: {leaked}"


# -- 8: an exception escaping the job loop -----------------------------------------


async def test_settings_a_worker_cannot_apply_fail_the_task_not_lose_it():
    async with asi.InterpreterPool(1) as pool:
        first_id = await pool.run(workfuncs.interp_id)
        entry = racefuncs.RefusedInWorkers()
        sys.path.append(entry)  # published to the workers at the next submit
        try:
            with pytest.raises(LookupError, match="cannot be rebuilt in a worker"):
                await asyncio.wait_for(pool.run(workfuncs.square, 3), 30)
        finally:
            sys.path.remove(entry)
        # The worker survived and applies the next settings.
        assert await asyncio.wait_for(pool.run(workfuncs.interp_id), 30) == first_id


async def test_settings_that_would_cross_by_reference_are_refused_at_submit():
    # Every worker decodes its own copy of the settings blob: a reference in
    # it (here shared memory) would be adopted once per worker.
    blocks_before = _core.share_stats()[2]
    async with asi.InterpreterPool(2) as pool:
        assert await pool.run(workfuncs.square, 2) == 4
        entry = asi.SharedBuffer(1)
        sys.path.append(entry)
        try:
            with pytest.raises(TypeError, match=r"keep sys\.path to str entries"):
                pool.submit(workfuncs.square, 3)
        finally:
            sys.path.remove(entry)
        assert await pool.run(workfuncs.square, 3) == 9
    del entry
    assert _core.share_stats()[2] == blocks_before  # the shared block is freed


# -- 11: encode_share racing the owner's end ---------------------------------------


def test_share_encoded_while_its_worker_leaves_its_job_loop(tmp_path):
    # A thread of a worker shares a buffer; the buffer's export (__buffer__)
    # releases the GIL and the worker thread leaves its job loop meanwhile,
    # freeing the interpreter's share owner. The share must then be refused
    # (the interpreter no longer owns shares), not recorded in the freed owner.
    proc = run_child(
        tmp_path,
        """
        import asyncio, os
        import aiosubinterp as asi
        import racefuncs

        async def main():
            r, w = os.pipe()
            lock = asi.SharedLock()
            lock.acquire()
            pool = asi.InterpreterPool(1)
            await pool.run(racefuncs.share_from_a_thread, lock, w)
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, os.read, r, 1) == b"b"
            (worker,) = pool._workers.values()
            closing = asyncio.ensure_future(pool.aclose())
            while worker.state != "exited":  # its job loop ended: the owner is gone
                await asyncio.sleep(0.001)
            lock.release()
            await closing
            print(os.read(r, 100).decode(), flush=True)

        asyncio.run(main())
    """,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert proc.stdout == "refused\n"


# -- 12: setup blobs ---------------------------------------------------------------


def test_setup_of_a_worker_never_started_releases_its_fd(tmp_path):
    fds_before = set(os.listdir("/proc/self/fd"))
    with open(tmp_path / "f", "wb") as f:
        worker = _core.Worker(_core.Queue(), "", (asi.FileDescriptor(f),))
        assert len(set(os.listdir("/proc/self/fd")) - fds_before) == 2  # f and its duplicate
        del worker
    assert set(os.listdir("/proc/self/fd")) - fds_before == set()
