"""InterpreterPoolExecutor: the concurrent.futures.Executor contract, item by item.

Written from the documented behaviour of concurrent.futures (Executor,
Future, wait, as_completed, BrokenExecutor) and of asyncio's executor hooks
(loop.run_in_executor, loop.set_default_executor, asyncio.to_thread).
Every test shuts its executor down: the leak fixture wants no interpreter,
thread or fd left behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextvars
import functools
import gc
import itertools
import os
import select
import subprocess
import sys
import threading

import pytest
import workfuncs

import aiosubinterp as asi
from aiosubinterp import _core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 60


class Gate:
    """Pipes that let a test hold a task inside its interpreter and release it.

    ``gate.task()`` gives the (fn, args) of a call that signals "started" then
    blocks until ``gate.release()``; ``gate.wait_started()`` waits for the signal.
    """

    def __init__(self) -> None:
        self.started_r, self.started_w = os.pipe()
        self.release_r, self.release_w = os.pipe()

    def task(self):
        return workfuncs.write_then_read, (self.started_w, self.release_r)

    def wait_started(self, n: int = 1) -> None:
        for _ in range(n):
            ready, _, _ = select.select([self.started_r], [], [], TIMEOUT)
            assert ready, "the task did not start"
            assert os.read(self.started_r, 1) == b"x"

    def release(self, n: int = 1) -> None:
        os.write(self.release_w, b"r" * n)

    def unblock(self) -> None:
        """Let every blocked task end (EOF), so that a failed test cannot hang in shutdown()."""
        if self.release_w >= 0:
            os.close(self.release_w)
            self.release_w = -1

    def close(self) -> None:
        self.unblock()
        for fd in (self.started_r, self.started_w, self.release_r):
            os.close(fd)


@pytest.fixture
def gate():
    g = Gate()
    yield g
    g.close()


@pytest.fixture
def executor():
    ex = asi.InterpreterPoolExecutor(2)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


# -- construction -------------------------------------------------------------------


def test_is_a_concurrent_futures_executor():
    ex = asi.InterpreterPoolExecutor(1)
    try:
        assert isinstance(ex, cf.Executor)
        assert issubclass(asi.BrokenInterpreterPool, cf.BrokenExecutor)
        assert issubclass(asi.BrokenInterpreterPool, asi.BrokenPoolError)
        assert "InterpreterPoolExecutor" in repr(ex)
    finally:
        ex.shutdown()


@pytest.mark.parametrize("bad", [0, -1])
def test_max_workers_must_be_positive(bad):
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        asi.InterpreterPoolExecutor(bad)


def test_bad_arguments():
    with pytest.raises(TypeError, match="max_workers"):
        asi.InterpreterPoolExecutor("2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="initializer must be a callable"):
        asi.InterpreterPoolExecutor(1, initializer=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="initargs must be a tuple"):
        asi.InterpreterPoolExecutor(1, workfuncs.set_state, ["a", 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="preload"):
        asi.InterpreterPoolExecutor(1, preload="json")
    with pytest.raises(ValueError, match="max_tasks_per_interpreter"):
        asi.InterpreterPoolExecutor(1, max_tasks_per_interpreter=0)


def test_default_max_workers():
    ex = asi.InterpreterPoolExecutor()
    try:
        assert ex._max_workers == asi._engine.lifecycle.default_size()
    finally:
        ex.shutdown()


def test_never_used_executor_shuts_down():
    ex = asi.InterpreterPoolExecutor(2)
    ex.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(workfuncs.square, 1)


# -- submit and Future --------------------------------------------------------------


def test_submit_returns_a_future_with_the_result(executor):
    fut = executor.submit(workfuncs.add, 1, 2, c=3)
    assert isinstance(fut, cf.Future)
    assert fut.result(TIMEOUT) == 6
    assert fut.done() and not fut.running() and not fut.cancelled()
    assert fut.exception() is None
    assert "finished" in repr(fut)


def test_calls_run_in_other_interpreters_in_parallel(executor):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    try:
        # Each call writes, then waits for the other one's write: only
        # possible if both run at the same time.
        a = executor.submit(workfuncs.write_then_read, w1, r2)
        b = executor.submit(workfuncs.write_then_read, w2, r1)
        assert a.result(TIMEOUT) == b.result(TIMEOUT) == b"x"
        ids = {executor.submit(workfuncs.interp_id).result(TIMEOUT) for _ in range(10)}
        assert _core.main_interpreter_id() not in ids
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)


def test_exception_keeps_type_and_remote_traceback(executor):
    fut = executor.submit(workfuncs.raise_custom, "boom")
    with pytest.raises(workfuncs.CustomError, match="boom") as info:
        fut.result(TIMEOUT)
    exc = fut.exception()
    assert isinstance(exc, workfuncs.CustomError)
    assert isinstance(info.value.__cause__, asi.ExecutionFailed)
    assert "raise_custom" in info.value.__cause__.remote_traceback
    assert fut.done() and "raised CustomError" in repr(fut)


def test_unshareable_calls_are_refused_at_submit(executor):
    offset = 1

    def closure(x):
        return x + offset

    with pytest.raises(asi.NotShareableError, match="lambda"):
        executor.submit(lambda: 1)
    with pytest.raises(TypeError, match=r"uses the variables offset .*top level of a module"):
        executor.submit(closure, 1)
    with pytest.raises(asi.NotShareableError, match=r"argument 1 of echo\(\) \(lock\)"):
        executor.submit(workfuncs.echo, 1, threading.Lock())
    with pytest.raises(TypeError, match="expected a callable"):
        executor.submit(42)
    assert executor.submit(workfuncs.square, 3).result(TIMEOUT) == 9


def test_result_and_exception_timeouts(executor, gate):
    fn, args = gate.task()
    fut = executor.submit(fn, *args)
    with pytest.raises(cf.TimeoutError):
        fut.result(timeout=0)
    with pytest.raises(TimeoutError):
        fut.exception(timeout=0.01)
    gate.release()
    assert fut.result(TIMEOUT) == b"r"


def test_future_states_pending_running_finished(gate):
    ex = asi.InterpreterPoolExecutor(1)
    try:
        fn, args = gate.task()
        first = ex.submit(fn, *args)
        queued = ex.submit(workfuncs.square, 4)
        gate.wait_started()
        assert first.running() and not first.done()
        assert not queued.running() and not queued.done()
        assert not first.cancel(), "a running call cannot be cancelled"
        assert first.running()
        gate.release()
        assert first.result(TIMEOUT) == b"r" and queued.result(TIMEOUT) == 16
        assert not first.running() and first.done()
        assert not queued.cancel(), "a finished call cannot be cancelled"
    finally:
        gate.unblock()
        ex.shutdown()


def test_cancel_withdraws_a_pending_call(gate):
    ex = asi.InterpreterPoolExecutor(1)
    try:
        fn, args = gate.task()
        blocker = ex.submit(fn, *args)
        gate.wait_started()
        queued = ex.submit(workfuncs.square, 5)
        seen = []
        queued.add_done_callback(seen.append)
        assert queued.cancel()
        assert queued.cancel(), "cancel() of a cancelled future is True again"
        assert queued.cancelled() and queued.done() and not queued.running()
        assert seen == [queued]
        with pytest.raises(cf.CancelledError):
            queued.result(TIMEOUT)
        with pytest.raises(cf.CancelledError):
            queued.exception(TIMEOUT)
        assert ex.statistics()["queued"] == 0
        gate.release()
        assert blocker.result(TIMEOUT) == b"r"
        assert ex.submit(workfuncs.square, 6).result(TIMEOUT) == 36
    finally:
        gate.unblock()
        ex.shutdown()


def test_done_callbacks(executor):
    called = threading.Event()
    seen: list[object] = []

    def first(f):
        seen.append(("first", f.result()))

    def broken(f):
        raise ValueError("a failing callback is logged and ignored")

    def last(f):
        seen.append(("last", f.result()))
        called.set()

    fut = executor.submit(workfuncs.square, 9)
    fut.add_done_callback(first)
    fut.add_done_callback(broken)
    fut.add_done_callback(last)
    assert called.wait(TIMEOUT)
    assert seen == [("first", 81), ("last", 81)]
    # Added to a finished future: called at once, in this thread.
    here = []
    fut.add_done_callback(lambda f: here.append(threading.current_thread()))
    assert here == [threading.current_thread()]


def test_failing_callback_is_logged(executor, caplog):
    done = threading.Event()
    fut = executor.submit(workfuncs.square, 2)
    fut.add_done_callback(lambda f: 1 / 0)
    fut.add_done_callback(lambda f: done.set())
    assert done.wait(TIMEOUT)
    assert "exception calling callback" in caplog.text


# -- map ---------------------------------------------------------------------------


def test_map_returns_results_in_order(executor):
    assert list(executor.map(workfuncs.square, range(50))) == [i * i for i in range(50)]
    assert list(executor.map(workfuncs.add, [1, 2, 3], [10, 20, 30, 40])) == [11, 22, 33]
    assert list(executor.map(workfuncs.square, [])) == []


@pytest.mark.parametrize("chunksize", [2, 7, 100])
def test_map_with_chunksize(executor, chunksize):
    got = list(executor.map(workfuncs.add, range(53), range(53), chunksize=chunksize))
    assert got == [2 * i for i in range(53)]


def test_map_bad_chunksize_and_functions(executor):
    with pytest.raises(ValueError, match="chunksize must be >= 1"):
        executor.map(workfuncs.square, [1], chunksize=0)
    with pytest.raises(asi.NotShareableError, match="lambda"):
        executor.map(lambda x: x, [1], chunksize=2)
    with pytest.raises(asi.NotShareableError, match="lambda"):
        executor.map(lambda x: x, [1])


def test_map_raises_at_the_failing_item(executor):
    results = executor.map(workfuncs.raise_custom, ["a", "b"])
    with pytest.raises(workfuncs.CustomError, match="a"):
        next(results)
    # An item that cannot cross is refused by map() itself, as by submit().
    with pytest.raises(asi.NotShareableError):
        executor.map(workfuncs.echo, [1, 2, threading.Lock()], chunksize=2)


def test_map_chunk_failure_raises_at_its_chunk(executor):
    it = executor.map(workfuncs.raise_custom, ["x", "y", "z"], chunksize=2)
    with pytest.raises(workfuncs.CustomError, match="x"):
        next(it)


def test_map_timeout(gate):
    ex = asi.InterpreterPoolExecutor(1)
    try:
        fn, args = gate.task()
        blocker = ex.submit(fn, *args)
        results = ex.map(workfuncs.square, [1, 2, 3], timeout=0.05)
        with pytest.raises(TimeoutError):
            next(results)
        gate.release()
        assert blocker.result(TIMEOUT) == b"r"
    finally:
        gate.unblock()
        ex.shutdown()


def test_map_closed_early_cancels_the_rest(gate):
    ex = asi.InterpreterPoolExecutor(1)
    try:
        n = 10
        results = ex.map(workfuncs.write_then_read, [gate.started_w] * n, [gate.release_r] * n)
        gate.wait_started()
        gate.release()
        assert next(results) == b"r"
        results.close()  # the calls that have not started are withdrawn
        assert ex.statistics()["queued"] == 0
        gate.release()  # the one that may have started meanwhile
    finally:
        gate.unblock()
        ex.shutdown()


# -- shutdown ---------------------------------------------------------------------


def test_shutdown_waits_for_submitted_calls():
    ex = asi.InterpreterPoolExecutor(2)
    futures = [ex.submit(workfuncs.square, i) for i in range(200)]
    ex.shutdown(wait=True)
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures] == [i * i for i in range(200)]
    assert _core.live_workers() == []
    ex.shutdown()  # idempotent


def test_submit_after_shutdown_raises_runtime_error():
    ex = asi.InterpreterPoolExecutor(1)
    assert ex.submit(workfuncs.square, 2).result(TIMEOUT) == 4
    ex.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(workfuncs.square, 2)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.map(workfuncs.square, [1])
    ex.shutdown(wait=True)


def test_shutdown_without_wait_still_runs_the_calls(gate):
    ex = asi.InterpreterPoolExecutor(1)
    fn, args = gate.task()
    blocker = ex.submit(fn, *args)
    queued = [ex.submit(workfuncs.square, i) for i in range(5)]
    ex.shutdown(wait=False)
    gate.release()
    assert blocker.result(TIMEOUT) == b"r"
    assert [f.result(TIMEOUT) for f in queued] == [0, 1, 4, 9, 16]
    ex.shutdown(wait=True)


def test_shutdown_cancel_futures(gate):
    ex = asi.InterpreterPoolExecutor(1)
    fn, args = gate.task()
    blocker = ex.submit(fn, *args)
    gate.wait_started()
    queued = [ex.submit(workfuncs.square, i) for i in range(20)]
    done, not_done = cf.wait(queued, timeout=0)
    assert not done
    ex.shutdown(wait=False, cancel_futures=True)
    assert all(f.cancelled() for f in queued)
    assert not blocker.cancelled(), "a running call is not cancelled"
    gate.release()
    assert blocker.result(TIMEOUT) == b"r"
    # The cancelled futures count as done for wait() and as_completed().
    done, not_done = cf.wait(queued, timeout=TIMEOUT)
    assert len(done) == 20 and not not_done
    assert len(list(cf.as_completed(queued, timeout=TIMEOUT))) == 20
    ex.shutdown(wait=True)


def test_context_manager_shuts_down():
    with asi.InterpreterPoolExecutor(2) as ex:
        futures = [ex.submit(workfuncs.square, i) for i in range(20)]
    assert [f.result(0) for f in futures] == [i * i for i in range(20)]
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(workfuncs.square, 1)


def test_shutdown_from_a_done_callback_does_not_deadlock():
    ex = asi.InterpreterPoolExecutor(1)
    returned = threading.Event()

    def stop(_):
        ex.shutdown(wait=True)  # runs on the completion thread
        returned.set()

    fut = ex.submit(workfuncs.square, 3)
    fut.add_done_callback(stop)
    assert returned.wait(TIMEOUT)
    ex.shutdown(wait=True)


def test_dropped_executor_cleans_up():
    ex = asi.InterpreterPoolExecutor(1)
    fut = ex.submit(workfuncs.square, 3)
    del ex
    gc.collect()
    assert fut.result(TIMEOUT) == 9
    # The no_leaks fixture checks that its interpreter and thread are gone.


# -- wait / as_completed --------------------------------------------------------


def test_wait_return_conditions(executor, gate):
    fn, args = gate.task()
    blocked = executor.submit(fn, *args)
    quick = executor.submit(workfuncs.square, 2)
    failing = executor.submit(workfuncs.raise_custom, "f")

    done, not_done = cf.wait([blocked, quick], return_when=cf.FIRST_COMPLETED, timeout=TIMEOUT)
    assert quick in done and blocked in not_done
    done, not_done = cf.wait([blocked, failing], return_when=cf.FIRST_EXCEPTION, timeout=TIMEOUT)
    assert failing in done and blocked in not_done
    done, not_done = cf.wait([blocked, quick], timeout=0.01)
    assert blocked in not_done
    gate.release()
    done, not_done = cf.wait(
        [blocked, quick, failing], return_when=cf.ALL_COMPLETED, timeout=TIMEOUT
    )
    assert len(done) == 3 and not not_done


def test_as_completed(executor, gate):
    futures = [executor.submit(workfuncs.square, i) for i in range(30)]
    assert sorted(f.result() for f in cf.as_completed(futures, timeout=TIMEOUT)) == sorted(
        i * i for i in range(30)
    )
    fn, args = gate.task()
    blocked = executor.submit(fn, *args)
    with pytest.raises(TimeoutError):
        for _ in cf.as_completed([blocked], timeout=0.01):
            pass
    gate.release()
    assert [f.result() for f in cf.as_completed([blocked], timeout=TIMEOUT)] == [b"r"]


# -- broken executor ---------------------------------------------------------------


def test_failing_initializer_breaks_the_executor():
    ex = asi.InterpreterPoolExecutor(2, initializer=workfuncs.fail_init)
    fut = ex.submit(workfuncs.square, 3)
    with pytest.raises(cf.BrokenExecutor, match="initializer says no") as info:
        fut.result(TIMEOUT)
    assert isinstance(info.value, asi.BrokenInterpreterPool)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(asi.BrokenInterpreterPool):
        ex.submit(workfuncs.square, 3)
    with pytest.raises(cf.BrokenExecutor):
        ex.map(workfuncs.square, [1])
    ex.shutdown(wait=True)


def test_broken_executor_releases_its_resources_without_shutdown():
    ex = asi.InterpreterPoolExecutor(1, preload=("no_such_module_xyz",))
    with pytest.raises(asi.BrokenInterpreterPool, match="no_such_module_xyz"):
        ex.submit(workfuncs.square, 3).result(TIMEOUT)
    # No shutdown(): the no_leaks fixture checks the thread and fds are gone.


def test_initializer_preload_and_max_tasks():
    with asi.InterpreterPoolExecutor(
        2, workfuncs.set_state, ("greeting", "hi"), preload=("fractions",)
    ) as ex:
        assert list(ex.map(workfuncs.get_state, ["greeting"] * 8)) == ["hi"] * 8
        assert ex.submit(workfuncs.imported, "fractions").result(TIMEOUT) is True
    with asi.InterpreterPoolExecutor(1, max_tasks_per_interpreter=2) as ex:
        ids = [ex.submit(workfuncs.interp_id).result(TIMEOUT) for _ in range(6)]
        assert list(ex.map(workfuncs.square, range(20))) == [i * i for i in range(20)]
    assert len(set(ids)) == 3 and ids[0] == ids[1] and ids[2] == ids[3]


# -- threads ------------------------------------------------------------------------


def test_callback_submits_to_its_own_executor(executor):
    # The completion thread calls this callback; submitting from there (and
    # from a plain thread waiting on the result) must not deadlock.
    second: list[cf.Future] = []
    ready = threading.Event()

    def chain(f):
        second.append(executor.submit(workfuncs.square, f.result()))
        ready.set()

    executor.submit(workfuncs.square, 3).add_done_callback(chain)
    assert ready.wait(TIMEOUT)
    assert second[0].result(TIMEOUT) == 81


def test_threads_submit_while_completions_are_delivered(executor):
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(k):
        try:
            futures = [executor.submit(workfuncs.add, k * 1000, i) for i in range(300)]
            # Each thread also submits from inside a done-callback.
            extra: list[cf.Future] = []
            submitted = threading.Event()

            def chain(f):
                extra.append(executor.submit(workfuncs.square, k))
                submitted.set()

            futures[0].add_done_callback(chain)
            results[k] = [f.result(TIMEOUT) for f in futures]
            assert submitted.wait(TIMEOUT)
            assert extra[0].result(TIMEOUT) == k * k
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors
    for k in range(6):
        assert results[k] == [k * 1000 + i for i in range(300)]


def test_wait_on_a_future_from_a_thread_started_by_a_callback(executor):
    out: list[int] = []
    finished = threading.Event()

    def spawn_waiter(f):
        def waiter():
            out.append(executor.submit(workfuncs.square, f.result()).result(TIMEOUT))
            finished.set()

        threading.Thread(target=waiter).start()

    executor.submit(workfuncs.add, 2, 3).add_done_callback(spawn_waiter)
    assert finished.wait(TIMEOUT)
    assert out == [25]


# -- asyncio -----------------------------------------------------------------------


async def test_run_in_executor():
    loop = asyncio.get_running_loop()
    ex = asi.InterpreterPoolExecutor(2)
    try:
        assert await loop.run_in_executor(ex, workfuncs.square, 7) == 49
        got = await asyncio.gather(
            *(loop.run_in_executor(ex, workfuncs.square, i) for i in range(500))
        )
        assert got == [i * i for i in range(500)]
        with pytest.raises(workfuncs.CustomError):
            await loop.run_in_executor(ex, workfuncs.raise_custom, "x")
        assert await asyncio.wrap_future(ex.submit(workfuncs.add, 1, c=2)) == 3
    finally:
        ex.shutdown()


async def test_as_the_loop_default_executor():
    loop = asyncio.get_running_loop()
    ex = asi.InterpreterPoolExecutor(2)
    try:
        loop.set_default_executor(ex)
        assert await loop.run_in_executor(None, workfuncs.square, 6) == 36
        ident = await loop.run_in_executor(None, workfuncs.interp_id)
        assert ident != _core.main_interpreter_id()
        # asyncio.to_thread sends partial(Context.run, fn, ...): the context
        # is left behind (it cannot cross), fn runs in an interpreter.
        assert await asyncio.to_thread(workfuncs.add, 1, 2, c=3) == 6
        assert await asyncio.to_thread(workfuncs.interp_id) != _core.main_interpreter_id()
        # asyncio's own uses of the default executor work too (in debug mode it
        # sends a bound method of the loop; uvloop resolves names in libuv).
        if isinstance(loop, asyncio.BaseEventLoop) and not loop.get_debug():
            infos = await loop.getaddrinfo("127.0.0.1", 80)
            assert infos and infos[0][4][0] == "127.0.0.1"
    finally:
        ex.shutdown()


async def test_cancelling_the_awaiter_withdraws_the_queued_call(gate):
    ex = asi.InterpreterPoolExecutor(1)
    try:
        fn, args = gate.task()
        blocker = asyncio.wrap_future(ex.submit(fn, *args))
        gate.wait_started()  # blocks the loop a moment: the call runs in an interpreter
        inner = ex.submit(workfuncs.square, 3)
        outer = asyncio.wrap_future(inner)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        await asyncio.sleep(0)  # asyncio passes the cancellation on in a callback
        assert inner.cancelled()
        assert ex.statistics()["queued"] == 0
        gate.release()
        assert await blocker == b"r"
    finally:
        gate.unblock()
        ex.shutdown()


def test_context_run_partial_is_unwrapped(executor):
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, workfuncs.add, 1, c=10)
    assert executor.submit(call, 2).result(TIMEOUT) == 13


# -- process-level behaviour ------------------------------------------------------


def _run_child(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "tests"), ROOT])
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
    )


def test_program_exits_only_after_submitted_calls_finish():
    # Two completion threads print: one write() per line keeps the lines whole.
    code = (
        "import sys, aiosubinterp as asi, workfuncs\n"
        "expected = sum(i * i for i in range(200_000))\n"
        "ex = asi.InterpreterPoolExecutor(1)\n"
        "futures = [ex.submit(workfuncs.spin, 200_000) for _ in range(4)]\n"
        "for f in futures:\n"
        "    f.add_done_callback(lambda f: sys.stdout.write(f'done {f.result() == expected}\\n'))\n"
        "ex.shutdown(wait=False)\n"
        "other = asi.InterpreterPoolExecutor(1)\n"
        "other.submit(workfuncs.square, 5).add_done_callback(\n"
        "    lambda f: sys.stdout.write(f'never shut down {f.result()}\\n'))\n"
    )
    proc = _run_child(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("done True") == 4
    assert "never shut down 25" in proc.stdout


def test_example_runs():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "executor_compat.py")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


# -- a drop-in for the standard library's executor ------------------------------------
# (CPython's own tests run against ours in test_cpython_executor.py.)


def test_calls_handed_to_starting_interpreters_count_as_running(gate):
    # Right after creation no interpreter exists yet; the first max_workers
    # calls are theirs all the same: running, not cancellable, and
    # shutdown(cancel_futures=True) lets them run (ProcessPoolExecutor counts
    # the calls it handed to its processes the same way).
    ex = asi.InterpreterPoolExecutor(2)
    try:
        fn, args = gate.task()
        first = [ex.submit(fn, *args) for _ in range(2)]
        rest = [ex.submit(workfuncs.square, i) for i in range(10)]
        assert all(f.running() for f in first)
        assert not first[0].cancel() and first[0].running()
        assert not any(f.running() or f.done() for f in rest)
        ex.shutdown(wait=False, cancel_futures=True)
        assert all(f.cancelled() for f in rest)
        gate.wait_started(2)
        gate.release(2)
        assert [f.result(TIMEOUT) for f in first] == [b"r", b"r"]
    finally:
        gate.unblock()
        ex.shutdown()


def test_map_with_buffersize_submits_that_many_ahead():
    with asi.InterpreterPoolExecutor(2) as ex:
        results = ex.map(workfuncs.square, itertools.count(), buffersize=2)
        assert [next(results) for _ in range(5)] == [0, 1, 4, 9, 16]
        results.close()
        assert list(ex.map(workfuncs.add, range(5), range(5), buffersize=3, chunksize=2)) == [
            0,
            2,
            4,
            6,
            8,
        ]
        assert list(ex.map(workfuncs.square, [], buffersize=1)) == []
        for bad in ("2", 2.0, True):
            with pytest.raises(TypeError, match="buffersize must be an integer or None"):
                ex.map(workfuncs.square, [1], buffersize=bad)
        for bad in (0, -1):
            with pytest.raises(ValueError, match="buffersize must be None or > 0"):
                ex.map(workfuncs.square, [1], buffersize=bad)
        items = iter(range(10))
        ex.map(workfuncs.square, items, buffersize=3)
    assert next(items) == 3, "only buffersize items are taken before results are read"


def test_failing_initializer_is_logged_and_marks_the_executor_broken(caplog):
    ex = asi.InterpreterPoolExecutor(2, initializer=workfuncs.fail_init)
    assert ex._broken is False
    with caplog.at_level("CRITICAL", logger="concurrent.futures"):
        fut = ex.submit(workfuncs.square, 3)
        with pytest.raises(cf.thread.BrokenThreadPool):
            fut.result(TIMEOUT)
        ex._engine._closed.result(TIMEOUT)
    # Logged before the executor reads as broken, as ThreadPoolExecutor does.
    assert isinstance(ex._broken, str) and "not usable anymore" in ex._broken
    assert "initializer says no" in ex._broken
    [record] = [r for r in caplog.records if r.name == "concurrent.futures"]
    assert record.levelname == "CRITICAL" and "initializer" in record.getMessage()
    assert "RuntimeError: initializer says no" in caplog.text
    with pytest.raises(ex.BROKEN):
        ex.submit(workfuncs.square, 3)
    ex.shutdown()


def test_a_start_failing_while_the_program_exits_is_not_logged(caplog, monkeypatch):
    # At exit (the exit hook set the flag and closed the executor) a worker's
    # start that fails is not reported as a broken initializer: CPython refuses
    # new interpreters once it finalizes, after shutdown(wait=False).
    from aiosubinterp._engine import executor as _executor

    r, w = os.pipe()
    try:
        ex = asi.InterpreterPoolExecutor(
            1, initializer=workfuncs.fail_init_after_read, initargs=(r,)
        )
        with caplog.at_level("CRITICAL", logger="concurrent.futures"):
            fut = ex.submit(workfuncs.square, 3)
            monkeypatch.setattr(_executor, "_global_shutdown", True)
            os.write(w, b"x")  # the initializer fails now
            with pytest.raises(cf.thread.BrokenThreadPool):
                fut.result(TIMEOUT)
            ex._engine._closed.result(TIMEOUT)
        # Broken as ever (set after the place the error would be logged).
        assert isinstance(ex._broken, str) and "initializer says no, late" in ex._broken
        assert not [rec for rec in caplog.records if rec.name == "concurrent.futures"]
        ex.shutdown()
    finally:
        os.close(r)
        os.close(w)


def test_threadpool_attributes():
    ex = asi.InterpreterPoolExecutor(3, thread_name_prefix="calc")
    try:
        assert ex._max_workers == 3 and ex._thread_name_prefix == "calc"
        assert ex._threads == frozenset(), "nothing started before the first submit()"
        assert ex.submit(workfuncs.square, 2).result(TIMEOUT) == 4
        assert len(ex._threads) == 3
        assert sorted(t.name for t in ex._threads) == ["calc_0", "calc_1", "calc_2"]
        assert all(t.is_alive() for t in ex._threads)
        assert ex._initializer is None and ex._initargs == ()
    finally:
        ex.shutdown()
    for t in ex._threads:
        t.join()
        assert not t.is_alive()
    assert asi.InterpreterPoolExecutor(1)._thread_name_prefix.startswith("InterpreterPoolExecutor-")


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/comm"), reason="Linux only")
def test_worker_threads_are_named():
    def _thread_name():
        with open("/proc/thread-self/comm") as comm:
            return comm.read().strip()

    with asi.InterpreterPoolExecutor(1, thread_name_prefix="calc") as ex:
        name = ex.submit(_thread_name).result(TIMEOUT)
        interp = ex.submit(workfuncs.interp_id).result(TIMEOUT)
    assert name == f"calc_{interp}"[:15]


def test_string_initializer_is_refused_with_the_reason():
    with pytest.raises(TypeError, match=r"scripts are not supported.*thread_name_prefix"):
        asi.InterpreterPoolExecutor(2, "my-prefix")


def test_nested_function_without_closure_crosses_as_code(executor):
    def length(x, pad=1, *, extra=0):
        import _thread  # imports inside are fine: no globals

        return len(x) + pad + extra + 0 * _thread.get_ident()

    def init(key, value):
        from workfuncs import STATE

        STATE[key] = value

    assert executor.submit(length, "abc", extra=10).result(TIMEOUT) == 14
    with asi.InterpreterPoolExecutor(1, init, ("nested", "yes")) as ex:
        assert ex.submit(workfuncs.get_state, "nested").result(TIMEOUT) == "yes"
    assert list(executor.map(length, ["a", "bb"], [0, 0])) == [1, 2]
    assert list(executor.map(length, ["a", "bb", "ccc"], chunksize=2)) == [2, 3, 4]
    # One that reads its module's globals gets the worker's copy of that
    # module, as a module-level function does.
    namespace = vars(workfuncs)
    exec(
        "def _outer():\n    def inner(x):\n        return square(x) + 1\n    return inner\n",
        namespace,
    )
    try:
        inner = namespace["_outer"]()
        assert inner.__qualname__ == "_outer.<locals>.inner"
        assert executor.submit(inner, 5).result(TIMEOUT) == 26
    finally:
        del namespace["_outer"]


def test_a_closure_still_gets_the_clear_error(executor):
    count = 0

    def bump():
        nonlocal count
        count += 1

    with pytest.raises(asi.NotShareableError, match=r"uses the variables count .* closure"):
        executor.submit(bump)
    with pytest.raises(asi.NotShareableError, match="lambda"):
        executor.submit(lambda: None)
    with pytest.raises(asi.NotShareableError, match="lambda"):
        executor.map(lambda x: x, [1], chunksize=2)


def test_errors_are_the_standard_librarys_too():
    assert issubclass(asi.BrokenInterpreterPool, cf.thread.BrokenThreadPool)
    failed = asi.ExecutionFailed("builtins.ValueError: bad", "builtins.ValueError", "tb")
    assert failed.excinfo.type.__name__ == "ValueError"
    assert failed.excinfo.type.__module__ == "builtins"
    assert failed.excinfo.msg == "bad" and failed.excinfo.errdisplay == "tb"
    if sys.version_info < (3, 14):
        return  # concurrent.interpreters is new in 3.14
    from concurrent import interpreters
    from concurrent.futures import interpreter

    assert issubclass(asi.BrokenInterpreterPool, interpreter.BrokenInterpreterPool)
    assert issubclass(asi.NotShareableError, interpreters.NotShareableError)
    assert issubclass(asi.ExecutionFailed, interpreters.ExecutionFailed)
    assert issubclass(asi.NotShareableError, asi.InterpreterError)
    with asi.InterpreterPoolExecutor(1) as ex:
        with pytest.raises(interpreters.NotShareableError):
            ex.submit(workfuncs.echo, threading.Lock())
        with pytest.raises(workfuncs.CustomError) as info:
            ex.submit(workfuncs.raise_custom, "spam").result(TIMEOUT)
    cause = info.value.__cause__
    assert isinstance(cause, interpreters.ExecutionFailed)
    assert cause.excinfo.type.__qualname__ == "CustomError"
    assert cause.excinfo.type.__module__ == "workfuncs" and cause.excinfo.msg == "spam"


@pytest.mark.skipif(sys.version_info < (3, 14), reason="concurrent.interpreters is new in 3.14")
def test_a_stdlib_interpreters_queue_crosses(executor):
    from concurrent import interpreters

    queue = interpreters.create_queue()

    def put(q, item):
        q.put_nowait(item)
        return q.id

    assert executor.submit(put, queue, "hello").result(TIMEOUT) == queue.id
    assert queue.get(timeout=TIMEOUT) == "hello"
