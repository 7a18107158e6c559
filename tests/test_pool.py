"""InterpreterPool: running, results, errors, lifecycle."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import workfuncs
from aiohelpers import until

import aiosubinterp as asi
from aiosubinterp import _core


async def test_deep_nesting_falls_back_to_pickle():
    value: tuple = ()
    for _ in range(200):
        value = (value,)
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(workfuncs.echo, value) == value


async def test_bound_method_and_partial():
    import functools

    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(workfuncs.Point(3, 4).norm2) == 25
        assert await pool.run(functools.partial(workfuncs.add, 10), 5) == 15


async def test_tasks_run_in_other_interpreters():
    async with asi.InterpreterPool(2) as pool:
        ids = await asyncio.gather(*(pool.run(workfuncs.interp_id) for _ in range(20)))
    assert _core.main_interpreter_id() not in ids
    assert all(isinstance(i, int) and i > 0 for i in ids)


async def test_unrebuildable_exception_is_execution_failed():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.ExecutionFailed, match="NeedsTwoArgs") as info:
            await pool.run(workfuncs.raise_needs_two)
    assert "raise_needs_two" in info.value.remote_traceback


async def test_lambda_and_closure_are_refused_at_the_call_site():
    def inner(x):
        return x

    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="lambda"):
            pool.submit(lambda x: x, 1)
        with pytest.raises(asi.NotShareableError, match="top level of a module"):
            pool.submit(inner, 1)
        assert pool.statistics()["submitted"] == 0
        assert isinstance(asi.NotShareableError("x"), TypeError)


async def test_unpicklable_argument_is_named():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match=r"argument 1 of echo\(\) \(lock\)"):
            pool.submit(workfuncs.echo, 1, threading.Lock())
        with pytest.raises(asi.NotShareableError, match="keyword argument 'key'"):
            pool.submit(workfuncs.echo, 1, key=threading.Lock())


async def test_unsendable_result_is_a_clear_error():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(asi.NotShareableError, match="returned a generator"):
            await pool.run(workfuncs.make_generator)


async def test_not_callable():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(TypeError, match="expected a callable"):
            pool.submit(42)


async def test_error_before_an_interpreter_exists_breaks_the_pool(monkeypatch):
    # A failure while preparing a worker (here: its bootstrap source), before
    # any interpreter runs, fails start() and the queued task; it used to
    # leave start() waiting forever.
    from aiosubinterp._engine import pool as _pool

    def no_bootstrap(self):
        raise MemoryError("no memory for the bootstrap")

    monkeypatch.setattr(_pool._InterpreterBackend, "_bootstrap", no_bootstrap)
    pool = asi.InterpreterPool(2)
    task = pool.submit(workfuncs.square, 3)
    with pytest.raises(asi.BrokenPoolError, match="no memory for the bootstrap") as info:
        await asyncio.wait_for(pool.start(), 30)
    assert isinstance(info.value.__cause__, MemoryError)
    with pytest.raises(asi.BrokenPoolError):
        await asyncio.wait_for(task, 30)
    await asyncio.wait_for(pool.aclose(), 30)


async def test_max_tasks_per_interpreter_replaces_workers():
    async with asi.InterpreterPool(1, max_tasks_per_interpreter=2) as pool:
        ids = [await pool.run(workfuncs.interp_id) for _ in range(6)]
        results = await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(20)))
    assert len(set(ids)) == 3
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[4] == ids[5]
    assert results == [i * i for i in range(20)]


async def test_default_pool():
    assert await asi.run(workfuncs.square, 11) == 121
    assert await asi.run(workfuncs.add, 1, b=2) == 3
    ids = await asyncio.gather(*(asi.run(workfuncs.interp_id) for _ in range(4)))
    assert _core.main_interpreter_id() not in ids


def test_default_pool_is_closed_with_asyncio_run():
    async def main():
        return await asi.run(workfuncs.square, 4)

    assert asyncio.run(main()) == 16
    assert _core.live_workers() == []


async def test_statistics():
    async with asi.InterpreterPool(2) as pool:
        await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(10)))
        stats = pool.statistics()
    assert stats["size"] == 2 and stats["submitted"] == 10 and stats["queued"] == 0
    assert stats["state"] == "running"


def test_loop_shutdown_interrupts_abandoned_default_pool_tasks():
    async def main():
        asi_task = asyncio.ensure_future(asi.run(workfuncs.spin_forever))
        while not asi_task.done() and _core.live_workers() == []:
            await asyncio.sleep(0.01)
        # Submitted and never awaited: the loop ends while it spins.
        pool = _loop_hub().default_pool
        pool.submit(workfuncs.spin_forever)
        while pool.statistics()["busy"] < 1:
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(main(), 60))
    assert _core.live_workers() == []


def _loop_hub():
    from aiosubinterp._engine import hub as _hub

    return _hub.hub_for(asyncio.get_running_loop())


async def test_close_serves_queued_tasks_even_when_interpreters_retire():
    pool = asi.InterpreterPool(1, max_tasks_per_interpreter=3)
    tasks = [pool.submit(workfuncs.square, i) for i in range(20)]
    close = asyncio.ensure_future(pool.aclose())  # while most are still queued
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    assert results == [i * i for i in range(20)]
    await asyncio.wait_for(close, 60)
    assert pool.statistics()["completed"] == 20


@pytest.mark.parametrize("bad", [-1, 2, True, "0", float("nan")])
def test_idle_spin_must_be_a_small_number_of_seconds(bad):
    with pytest.raises(ValueError, match="idle_spin must be None"):
        asi.InterpreterPool(1, idle_spin=bad)


def _thread_sched(tid: int) -> tuple[str, float, float]:
    """A thread of this process: (state letter, seconds on a CPU, seconds waiting for one)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        state = f.read().rpartition(")")[2].split()[0]
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        on_cpu, waiting, _ = (int(x) for x in f.read().split())
    return state, on_cpu / 1e9, waiting / 1e9


def _worker_while_idle(pool_seconds: float) -> tuple[float, float]:
    """The worker's seconds (on a CPU, runnable) from a task's submission until it sleeps again."""

    async def main() -> tuple[float, float]:
        async with asi.InterpreterPool(1, idle_spin=pool_seconds) as pool:
            tid = await pool.run(workfuncs.native_thread_id)
            # Asleep on the empty queue ("S"): whatever it polled before is over.
            await until(lambda: _thread_sched(tid)[0] == "S")
            _, cpu0, wait0 = _thread_sched(tid)
            await pool.run(workfuncs.square, 3)
            await until(lambda: _thread_sched(tid)[0] == "S")  # idle again, asleep
            _, cpu1, wait1 = _thread_sched(tid)
        return cpu1 - cpu0, (cpu1 + wait1) - (cpu0 + wait0)

    return asyncio.run(main())


@pytest.mark.skipif(
    not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"),
    reason="needs the kernel's per-thread schedstat",
)
def test_idle_spin_sets_how_long_an_idle_interpreter_polls():
    # Polling keeps the worker runnable (on a core, or waiting for one on a
    # busy machine) for as long as it lasts; 0 means the worker sleeps at once.
    _, runnable = _worker_while_idle(0.5)
    assert runnable > 0.4
    on_cpu, _ = _worker_while_idle(0)
    assert on_cpu < 0.05


def test_exit_while_interpreters_are_created_in_parallel():
    # On 3.13+ the interpreters of a pool (and of several pools) are created
    # at once; the exit sweep must wait for creations in flight, then destroy
    # every interpreter, wherever its start-up got to.
    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(tests), tests])
    source = textwrap.dedent("""
        import asyncio, sys
        import aiosubinterp as asi, workfuncs

        async def main():
            pools = [asi.InterpreterPool(3) for _ in range(3)]
            tasks = [pool.submit(workfuncs.square, i + 2) for i, pool in enumerate(pools)]
            first = await tasks[0]  # the other interpreters may still be starting
            print("first", first, flush=True)
            sys.exit(0)  # the pools are still open: the exit sweep destroys them

        asyncio.run(main())
    """)
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", source],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["first", "4"]
        assert "Fatal Python error" not in proc.stderr


async def test_worker_start_up_imports_only_the_runtime():
    # Each module a worker imports at start-up costs every interpreter of
    # every pool its import time (cold start): beyond what a bare interpreter
    # has after `site`, a worker holds only our runtime's own modules.
    from aiosubinterp import _quirks

    try:
        import _interpreters as low
    except ImportError:  # 3.12
        import _xxsubinterpreters as low
    run = low.exec if hasattr(low, "exec") else low.run_string  # 3.12: run_string raises
    r, w = os.pipe()
    with os.fdopen(r) as f:
        iid = low.create("isolated") if sys.version_info >= (3, 13) else low.create(isolated=True)
        try:
            err = run(iid, f"import os, sys\nos.write({w}, repr(sorted(sys.modules)).encode())")
            assert err is None, err
        finally:
            low.destroy(iid)
            os.close(w)
        bare = set(eval(f.read()))  # a list of str, written just above
    async with asi.InterpreterPool(1, forward_logging=False) as pool:
        held = set(await pool.run(eval, "sorted(__import__('sys').modules)"))
    runtime = {
        "aiosubinterp",
        "aiosubinterp._core",
        "aiosubinterp._inside",
        "aiosubinterp._inside.marshal",
        "aiosubinterp._inside.worker",
        "cython_runtime",
        *_quirks.blocked_modules(),
    }
    extra = {m for m in held - bare - runtime if not m.startswith("_cython_")}  # Cython's own
    assert not extra, sorted(extra)
    # forward_logging (on by default) adds the log channel's end, and with it
    # the channel ends' module (~0.2 ms). dataclasses (with inspect, re, ast:
    # ~12 ms) is not part of it.
    async with asi.InterpreterPool(1) as pool:
        held = set(await pool.run(eval, "sorted(__import__('sys').modules)"))
    forwarding = {m for m in held - bare - runtime if not m.startswith("_cython_")}
    assert "aiosubinterp._channels.ends" in forwarding
    assert not forwarding & {"dataclasses", "inspect", "ast"}, sorted(forwarding)
    # typing (with collections, functools, ...) cost every interpreter ~4.6 ms of CPU.
    assert not forwarding & {"typing", "collections", "functools"}, sorted(forwarding)


async def test_what_a_task_keeps_in_module_state_is_freed_with_its_interpreter():
    # An object kept in a worker's module globals is freed when the pool
    # destroys the interpreter. On CPython 3.14/3.15 it was not in 20-45% of
    # the closes while interpreters were ended through the thread state of
    # the thread that had created them (ext/interp.pxi, interp_end). Each
    # kept object writes one byte when freed, replaced by the next task on
    # the same worker or at the end: every call must have written its byte.
    r, w = os.pipe()
    rounds = 12
    try:
        for _ in range(rounds):
            async with asi.InterpreterPool(2) as pool:
                await asyncio.gather(
                    pool.run(workfuncs.keep_in_module_state, w),
                    pool.run(workfuncs.keep_in_module_state, w),
                )
        os.set_blocking(r, False)
        try:
            written = os.read(r, 4096)
        except BlockingIOError:
            written = b""
    finally:
        os.close(r)
        os.close(w)
    assert len(written) == 2 * rounds, f"{2 * rounds - len(written)} kept objects were never freed"


# -- start-up: async with returns once the first interpreter is ready ---------------------


class _Gate:
    """A pipe the pool's initializer (workfuncs.init_after_read) reads: each byte
    written lets one interpreter's start go on (b"f" makes it fail)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def let(self, what: bytes) -> None:
        os.write(self.w, what)

    def pool(self, size: int) -> asi.InterpreterPool:
        return asi.InterpreterPool(size, initializer=workfuncs.init_after_read, initargs=(self.r,))

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


@pytest.fixture
def gate():
    g = _Gate()
    yield g
    g.close()


async def test_first_result_arrives_while_the_others_are_still_starting(gate):
    pool = gate.pool(3)
    tasks = [pool.submit(workfuncs.square, i) for i in range(6)]
    stats = pool.statistics()
    assert stats["state"] == "starting" and stats["starting"] == 3 and stats["queued"] == 6
    gate.let(b"g")  # one start goes on; two stay in their initializers
    async with pool:
        try:
            assert pool.statistics()["state"] == "running"
            # Queued before any interpreter was ready: none lost, all served by the first.
            assert await asyncio.wait_for(asyncio.gather(*tasks), 60) == [i * i for i in range(6)]
            assert await pool.run(workfuncs.square, 7) == 49
            stats = pool.statistics()
            assert stats["starting"] == 2 and stats["completed"] == 7
            gate.let(b"gg")
            await asyncio.wait_for(pool.wait_ready(), 60)
            assert pool.statistics()["starting"] == 0
            assert asi.active_count() == 4
            assert await pool.run(workfuncs.square, 8) == 64
        finally:
            gate.let(b"ggg")  # a failed assertion must not leave a start blocked


async def test_wait_ready_starts_a_new_pool_and_waits_for_every_interpreter():
    pool = asi.InterpreterPool(2)
    await asyncio.wait_for(pool.wait_ready(), 60)
    try:
        stats = pool.statistics()
        assert stats["state"] == "running" and stats["starting"] == 0
        assert asi.active_count() == 3
        await pool.wait_ready()  # again: returns at once
    finally:
        await pool.aclose()
    with pytest.raises(asi.PoolClosedError, match="closed"):
        await pool.wait_ready()


async def test_a_later_start_that_fails_leaves_the_pool_running(gate, caplog):
    pool = gate.pool(2)
    gate.let(b"g")
    async with pool:
        gate.let(b"f")
        await asyncio.wait_for(pool.wait_ready(), 60)  # ended: one ready, one failed
        stats = pool.statistics()
        assert stats["state"] == "running" and stats["starting"] == 0
        assert asi.active_count() == 2
        results = await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(4)))
        assert results == [0, 1, 4, 9]
    failed = [
        r
        for r in caplog.records
        if r.name == "aiosubinterp" and "failed to start" in r.getMessage()
    ]
    assert len(failed) == 1, caplog.records
    assert failed[0].exc_info is not None and "initializer says no, this one" in str(
        failed[0].exc_info[1]
    )


async def test_a_later_start_refused_because_the_process_exits_is_not_reported(
    gate, caplog, monkeypatch
):
    # At exit, _core's sweep lets no new interpreter start: a pool whose other
    # interpreters were still starting (a script that ends right after its
    # first result) must not print a warning with a traceback as it exits.
    from aiosubinterp._engine import lifecycle

    pool = gate.pool(2)
    gate.let(b"g")
    async with pool:
        monkeypatch.setattr(lifecycle, "_exiting", True)  # as the atexit hook does
        gate.let(b"f")
        await asyncio.wait_for(pool.wait_ready(), 60)
        assert pool.statistics()["state"] == "running"
        assert await pool.run(workfuncs.square, 3) == 9
    assert not [r for r in caplog.records if "failed to start" in r.getMessage()]


async def test_a_first_start_that_fails_breaks_the_pool_and_starts_no_other(gate):
    pool = gate.pool(3)
    task = pool.submit(workfuncs.square, 3)
    starting = asyncio.ensure_future(pool.start())
    assert pool.statistics()["starting"] == 3
    gate.let(b"f")  # the first start fails: the others are never started
    with pytest.raises(asi.BrokenPoolError, match="initializer says no, this one") as info:
        await asyncio.wait_for(starting, 60)
    assert isinstance(info.value.__cause__, RuntimeError)
    stats = pool.statistics()
    assert stats["state"] == "broken" and stats["starting"] == 0
    with pytest.raises(asi.BrokenPoolError):
        await asyncio.wait_for(task, 60)  # queued: failed with the pool, not lost
    with pytest.raises(asi.BrokenPoolError):
        await asyncio.wait_for(pool.wait_ready(), 60)
    await asyncio.wait_for(pool.aclose(), 60)
    assert pool.statistics()["state"] == "closed"
    assert asi.active_count() == 1


async def test_closing_while_interpreters_are_still_starting(gate):
    pool = gate.pool(2)
    gate.let(b"g")
    await asyncio.wait_for(pool.start(), 60)
    task = pool.submit(workfuncs.square, 4)
    ready = asyncio.ensure_future(pool.wait_ready())
    closing = asyncio.ensure_future(pool.aclose())
    try:
        await until(lambda: pool.statistics()["state"] == "closing")
        assert pool.statistics()["starting"] == 1
        assert not closing.done()  # it waits for the start in flight, then stops both
    finally:
        gate.let(b"g")
    await asyncio.wait_for(closing, 60)
    assert await task == 16  # queued before the close: served
    with pytest.raises(asi.PoolClosedError, match="closed while its interpreters started"):
        await ready
    assert pool.statistics()["state"] == "closed"
    assert asi.active_count() == 1  # every interpreter destroyed, the late one too


async def test_closing_before_any_interpreter_is_ready(gate):
    pool = gate.pool(2)
    task = pool.submit(workfuncs.square, 5)
    ready = asyncio.ensure_future(pool.wait_ready())
    closing = asyncio.ensure_future(pool.aclose())
    try:
        await until(lambda: pool.statistics()["state"] == "closing")
        assert pool.statistics()["starting"] == 2 and not closing.done()
    finally:
        gate.let(b"gg")
    await asyncio.wait_for(closing, 60)
    assert await task == 25  # queued before the close: the interpreters that came up ran it
    with pytest.raises(asi.PoolClosedError):
        await ready
    assert asi.active_count() == 1
