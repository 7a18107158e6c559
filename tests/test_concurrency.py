"""concurrency_per_interpreter: one interpreter's event loop runs several coroutines at once."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import asyncfuncs
import pytest
import workfuncs
from aiohelpers import read_byte, until

import aiosubinterp as asi
from aiosubinterp._inside import worker as _worker

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = pathlib.Path(__file__).resolve().parent

needs_313 = pytest.mark.skipif(
    not _worker.coroutines_supported(),
    reason="CPython 3.12 aborts at exit after a loop ran in a subinterpreter",
)


@needs_313
async def test_coroutines_run_together_in_one_interpreter():
    async with asi.InterpreterPool(1, concurrency_per_interpreter=5) as pool:
        # Each waits until all five are inside at once: only concurrency lets them finish.
        ids = await asyncio.wait_for(
            asyncio.gather(*(pool.run(asyncfuncs.async_rendezvous, "five", 5) for _ in range(5))),
            30,
        )
        assert len(set(ids)) == 1


@needs_313
async def test_at_most_n_coroutines_per_interpreter(pipe):
    r, w = pipe
    async with asi.InterpreterPool(2, concurrency_per_interpreter=3) as pool:
        # Each probe holds until released: both interpreters fill up to the limit, no further.
        tasks = [pool.submit(asyncfuncs.async_probe_until_readable, "cap", r) for _ in range(30)]
        await until(lambda: pool.statistics()["running"] == 6)
        os.write(w, b"go")
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        peaks = [peak for peak, _ in results]
        assert max(peaks) == 3  # the limit is reached, and never passed
        ids, _ = await pool.run(workfuncs.all_ids)
        assert {where for _, where in results} <= set(ids)


@needs_313
@pytest.mark.parametrize("concurrency", [1, 3])
async def test_an_async_initializer_runs_to_its_end_at_any_concurrency(concurrency):
    # With concurrency > 1 it used to fail the pool's start with "no
    # dispatched job to start a session with": no job exists yet at start.
    async with asi.InterpreterPool(
        2,
        initializer=asyncfuncs.async_initializer,
        initargs=("ready",),
        concurrency_per_interpreter=concurrency,
    ) as pool:
        values = await asyncio.gather(
            *(pool.run(workfuncs.get_state, "initialized") for _ in range(8))
        )
        assert values == ["ready"] * 8


@needs_313
async def test_default_concurrency_runs_one_coroutine_at_a_time():
    async with asi.InterpreterPool(1) as pool:
        results = await asyncio.wait_for(
            asyncio.gather(*(pool.run(asyncfuncs.async_probe, "one", 0.005) for _ in range(6))), 30
        )
        assert {peak for peak, _ in results} == {1}
        assert pool.statistics()["concurrency"] == 1


@needs_313
async def test_many_results_each_delivered_once_in_order():
    async with asi.InterpreterPool(2, concurrency_per_interpreter=8) as pool:
        results = await asyncio.wait_for(
            asyncio.gather(
                *(pool.run(asyncfuncs.async_sleep_add, i, 1, 0.001 * (i % 3)) for i in range(500))
            ),
            60,
        )
        assert results == [i + 1 for i in range(500)]
        mapped = [r async for r in pool.map(asyncfuncs.async_add, range(300))]
        assert mapped == list(range(300))
        stats = pool.statistics()
        assert stats["completed"] == 800 and stats["running"] == 0 and stats["queued"] == 0


@needs_313
async def test_plain_calls_join_a_running_session(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
        slow = pool.submit(asyncfuncs.async_add_when_readable, r, 1, 2)  # until released
        await until(lambda: pool.statistics()["running"] == 1)
        # Plain functions run on the interpreter while the coroutine waits.
        squares = await asyncio.wait_for(
            asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(20))), 30
        )
        assert squares == [i * i for i in range(20)]
        assert not slow.done()
        os.write(w, b"go")
        assert await asyncio.wait_for(slow, 30) == 3


@needs_313
async def test_statistics_count_running_coroutines(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
        tasks = [pool.submit(asyncfuncs.async_wait_forever, w) for _ in range(3)]
        for _ in range(3):
            assert await read_byte(r) == b"s"
        stats = pool.statistics()
        assert (stats["busy"], stats["running"], stats["queued"]) == (1, 3, 0)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task
        for _ in range(3):
            assert await read_byte(r) == b"c"


@needs_313
async def test_cancel_one_coroutine_leaves_the_others_running(pipe):
    r, w = pipe
    gate_r, gate_w = os.pipe()
    try:
        async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
            waiter = pool.submit(asyncfuncs.async_wait_forever, w)
            assert await read_byte(r) == b"s"
            others = [
                pool.submit(asyncfuncs.async_add_when_readable, gate_r, i) for i in range(3)
            ]  # until released
            await until(lambda: pool.statistics()["running"] == 4)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert await read_byte(r) == b"c"  # it saw CancelledError in the worker
            await until(lambda: pool.statistics()["running"] == 3)
            assert not any(t.done() for t in others)
            os.write(gate_w, b"go")
            assert await asyncio.wait_for(asyncio.gather(*others), 30) == [0, 1, 2]
            stats = pool.statistics()
            assert stats["replaced"] == 0 and stats["running"] == 0
    finally:
        os.close(gate_r)
        os.close(gate_w)


@needs_313
async def test_cancel_a_plain_call_running_inside_a_session(pipe):
    r, w = pipe
    r2, w2 = os.pipe()
    try:
        async with asi.InterpreterPool(1, concurrency_per_interpreter=4, cancel_grace=10) as pool:
            first = await pool.run(workfuncs.interp_id)
            waiter = pool.submit(asyncfuncs.async_wait_forever, w2)
            assert await read_byte(r2) == b"s"
            spinner = pool.submit(workfuncs.signal_then_spin, w)
            assert await read_byte(r) == b"s"
            spinner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await spinner
            assert await read_byte(r) == b"k"  # KeyboardInterrupt reached the plain call
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert await read_byte(r2) == b"c"
            assert await asyncio.wait_for(pool.run(workfuncs.interp_id), 30) == first
            assert pool.statistics()["replaced"] == 0
    finally:
        os.close(r2)
        os.close(w2)


@needs_313
async def test_timeouts_and_errors_stay_with_their_task(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
        good = pool.submit(asyncfuncs.async_sleep_add, 2, 3, 0.1)
        bad = pool.submit(asyncfuncs.async_raise, "only me")
        slow = pool.submit(asyncfuncs.async_wait_forever, w)
        assert await read_byte(r) == b"s"
        with pytest.raises(workfuncs.CustomError, match="only me"):
            await bad
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow, 0.1)
        assert await read_byte(r) == b"c"
        assert await asyncio.wait_for(good, 30) == 5


@needs_313
async def test_exit_like_exceptions_in_a_session_are_reported(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1, concurrency_per_interpreter=4) as pool:
        slow = pool.submit(asyncfuncs.async_add_when_readable, r, 1, 1)  # until released
        await until(lambda: pool.statistics()["running"] == 1)
        # As outside sessions: they come back as ExecutionFailed, never escape.
        for fn, args in [
            (workfuncs.raise_exit, (3,)),
            (workfuncs.raise_keyboard, ()),
            (asyncfuncs.async_raise_exit, (4,)),
        ]:
            with pytest.raises(asi.ExecutionFailed, match="in its interpreter"):
                await asyncio.wait_for(pool.run(fn, *args), 30)
        assert not slow.done()  # the session survived them
        os.write(w, b"go")
        assert await asyncio.wait_for(slow, 30) == 2
        assert await asyncio.wait_for(pool.run(asyncfuncs.async_add, 4), 30) == 4


@needs_313
async def test_max_tasks_retires_interpreters_serving_sessions():
    async with asi.InterpreterPool(
        1, concurrency_per_interpreter=4, max_tasks_per_interpreter=5
    ) as pool:
        results = await asyncio.wait_for(
            asyncio.gather(*(pool.run(asyncfuncs.async_sleep_add, i, 0, 0.01) for i in range(23))),
            60,
        )
        assert results == list(range(23))
        ids = {await pool.run(workfuncs.interp_id) for _ in range(2)}
        assert len(ids) >= 1


@needs_313
async def test_close_waits_for_running_coroutines(pipe):
    r, w = pipe
    pool = asi.InterpreterPool(1, concurrency_per_interpreter=4)
    tasks = [pool.submit(asyncfuncs.async_add_when_readable, r, i, 1) for i in range(4)]
    await until(lambda: pool.statistics()["running"] == 4)  # each until released
    close = asyncio.ensure_future(pool.aclose())
    await until(lambda: pool.statistics()["state"] == "closing")
    assert not close.done() and not any(t.done() for t in tasks)
    os.write(w, b"go")
    await asyncio.wait_for(close, 30)
    assert [t.result() for t in tasks] == [1, 2, 3, 4]


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "4", None, 10**6])
def test_concurrency_must_be_a_sensible_int(bad):
    with pytest.raises(ValueError, match="concurrency_per_interpreter must be an int from 1"):
        asi.InterpreterPool(1, concurrency_per_interpreter=bad)


@pytest.mark.skipif(_worker.coroutines_supported(), reason="the refusal is for CPython 3.12")
def test_concurrency_refused_on_312_naming_the_version():
    with pytest.raises(RuntimeError) as info:
        asi.InterpreterPool(1, concurrency_per_interpreter=2)
    version = ".".join(map(str, sys.version_info[:3]))
    assert "concurrency_per_interpreter > 1" in str(info.value)
    assert version in str(info.value) and "3.13" in str(info.value)
    asi.InterpreterPool(1, concurrency_per_interpreter=1).close()  # 1 is fine everywhere


@needs_313
def test_exit_with_coroutines_running_in_sessions_is_prompt(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    source = textwrap.dedent("""
        import asyncio, os, sys
        import aiosubinterp as asi, asyncfuncs

        async def main():
            r, w = os.pipe()
            pool = asi.InterpreterPool(2, concurrency_per_interpreter=3)
            tasks = [pool.submit(asyncfuncs.async_wait_forever, w) for _ in range(6)]
            for _ in range(6):
                os.read(r, 1)
            print("running", pool.statistics()["running"], flush=True)
            sys.exit(0)  # the pool is still open: the interpreter exits with it running

        asyncio.run(main())
    """)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["running", "6"]
    assert time.monotonic() - start < 30
