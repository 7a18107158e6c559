"""Coroutines inside interpreters: pool.run(async_fn) runs on the worker's own event loop."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import textwrap

import asyncfuncs
import pytest
import workfuncs
from aiohelpers import read_byte

import aiosubinterp as asi
from aiosubinterp._inside import worker as _worker

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = pathlib.Path(__file__).resolve().parent

needs_313 = pytest.mark.skipif(
    not _worker.coroutines_supported(),
    reason="CPython 3.12 aborts at exit after a loop ran in a subinterpreter",
)


@needs_313
async def test_async_function_runs_in_the_worker():
    async with asi.InterpreterPool(1) as pool:
        assert await asyncio.wait_for(pool.run(asyncfuncs.async_add, 2, b=3), 30) == 5
        assert await asyncio.wait_for(pool.run(asyncfuncs.async_gather_squares, 10), 30) == 285
        # A plain function returning a coroutine is driven the same way.
        assert await asyncio.wait_for(pool.run(asyncfuncs.returns_coroutine, 1, 1), 30) == 2
        # Plain functions still take the synchronous path.
        assert await pool.run(workfuncs.square, 4) == 16
        assert pool.statistics()["completed"] == 4


@needs_313
async def test_worker_loop_is_stock_asyncio_and_persistent():
    async with asi.Interpreter() as interp:
        loop_id, module, where = await asyncio.wait_for(interp.run(asyncfuncs.async_loop_facts), 30)
        assert module.startswith("asyncio") and where == interp.id
        again, _, _ = await asyncio.wait_for(interp.run(asyncfuncs.async_loop_facts), 30)
        assert again == loop_id


@needs_313
async def test_async_errors_keep_their_type():
    async with asi.InterpreterPool(1) as pool:
        with pytest.raises(workfuncs.CustomError, match="boom") as info:
            await asyncio.wait_for(pool.run(asyncfuncs.async_raise, "boom"), 30)
        assert "async_raise" in info.value.__cause__.remote_traceback
        assert await asyncio.wait_for(pool.run(asyncfuncs.async_add, 1), 30) == 1


@needs_313
@pytest.mark.parametrize("kind", ["pool", "interpreter"])
async def test_cancel_cancels_the_coroutine_in_the_worker(pipe, kind):
    r, w = pipe
    engine = asi.InterpreterPool(1) if kind == "pool" else asi.Interpreter()
    async with engine:
        first = await engine.run(workfuncs.interp_id)
        task = engine.submit(asyncfuncs.async_wait_forever, w)
        assert await read_byte(r) == b"s"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The coroutine saw CancelledError and cleaned up on the worker's loop.
        assert await read_byte(r) == b"c"
        # Same interpreter, not replaced, and ready for more coroutines.
        assert await asyncio.wait_for(engine.run(workfuncs.interp_id), 30) == first
        assert await asyncio.wait_for(engine.run(asyncfuncs.async_add, 7), 30) == 7
        stats = engine.statistics()
        assert stats["replaced"] == 0 and stats["completed"] == 4


@needs_313
async def test_timeout_on_a_coroutine(pipe):
    r, w = pipe
    async with asi.InterpreterPool(1) as pool:
        task = pool.submit(asyncfuncs.async_wait_forever, w)
        assert await read_byte(r) == b"s"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(task, 0.1)
        assert await read_byte(r) == b"c"
        assert await asyncio.wait_for(pool.run(asyncfuncs.async_add, 1, 2), 30) == 3


@needs_313
async def test_coroutines_in_several_workers_and_interpreter_tasks():
    async with asi.InterpreterPool(2) as pool:
        results = await asyncio.wait_for(
            asyncio.gather(*(pool.run(asyncfuncs.async_add, i, i) for i in range(20))), 60
        )
        assert results == [2 * i for i in range(20)]


def _run_child(source: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.skipif(_worker.coroutines_supported(), reason="the refusal is for CPython 3.12")
def test_coroutines_refused_on_312_with_a_clear_error():
    proc = _run_child("""
        import asyncio, platform
        import aiosubinterp as asi, asyncfuncs, workfuncs

        async def main():
            async with asi.InterpreterPool(1) as pool:
                try:
                    pool.submit(asyncfuncs.async_add, 1)
                except RuntimeError as exc:
                    print("call site:", exc)
                try:
                    await asyncio.wait_for(pool.run(asyncfuncs.returns_coroutine, 1, 2), 30)
                except RuntimeError as exc:
                    print("worker:", exc)
                print(await pool.run(workfuncs.imported, "asyncio"))
                print(await pool.run(workfuncs.square, 3))

        asyncio.run(main())
    """)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    version = ".".join(map(str, sys.version_info[:3]))
    assert lines[0].startswith("call site: cannot run async function async_add")
    assert lines[1].startswith("worker: cannot run coroutine async_add()")
    assert all(version in line and "3.13" in line for line in lines[:2])
    assert lines[2:] == ["False", "9"]  # asyncio never reached the worker


def test_example_async_in_worker():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "async_in_worker.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr
    if _worker.coroutines_supported():
        assert "fetched 12 pages" in proc.stdout
        assert "slow job cancelled in the worker" in proc.stdout
        assert "20 calls on one interpreter, 10 at a time" in proc.stdout
    else:
        assert "needs CPython 3.13" in proc.stdout
