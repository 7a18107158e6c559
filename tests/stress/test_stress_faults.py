"""Faults in user code: every kind of exception, failing initializers, tasks that never return.

os._exit and a C-level crash end the whole process (it is one process):
those run in a child process and document the limit.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import stressfuncs
from stresshelp import run_script

import aiosubinterp as asi

pytestmark = pytest.mark.slow

# kind -> (exception type the awaiter sees, text it contains)
KINDS = {
    "SystemExit": (asi.ExecutionFailed, "SystemExit"),
    "KeyboardInterrupt": (asi.ExecutionFailed, "KeyboardInterrupt"),
    "GeneratorExit": (asi.ExecutionFailed, "GeneratorExit"),
    "StopIteration": (asi.ExecutionFailed, "StopIteration"),
    "StopAsyncIteration": (asi.ExecutionFailed, "StopAsyncIteration"),
    "RecursionError": (RecursionError, "recursion"),
    "MemoryError": (MemoryError, ""),
    "ExceptionGroup": (ExceptionGroup, "many"),
    "BaseExceptionGroup": (BaseExceptionGroup, "base"),
    "ZeroDivisionError": (ZeroDivisionError, "division"),
    "OSError": (FileNotFoundError, "nonexistent"),
    "UnicodeDecodeError": (UnicodeDecodeError, "utf-8"),
    "AssertionError": (AssertionError, "asserted"),
    "unpicklable": (asi.ExecutionFailed, "UnpicklableError"),
    "bad_str": (stressfuncs.BadStrError, ""),
    "chained": (RuntimeError, "outer"),
}


async def test_every_kind_of_exception_comes_back_and_the_pool_keeps_serving():
    async with asi.InterpreterPool(2) as pool:
        limit = await pool.run(stressfuncs.recursion_limit)
        for kind, (tp, text) in KINDS.items():
            with pytest.raises(tp) as info:
                await asyncio.wait_for(pool.run(stressfuncs.raise_kind, kind), 60)
            if text:
                assert text in str(info.value) or text in repr(info.value), (kind, info.value)
            if tp is not asi.ExecutionFailed and kind != "bad_str":
                assert isinstance(info.value.__cause__, asi.ExecutionFailed), kind
                assert "raise_kind" in info.value.__cause__.remote_traceback, kind
        with pytest.raises(ExceptionGroup) as info:
            await pool.run(stressfuncs.raise_kind, "ExceptionGroup")
        assert [type(e) for e in info.value.exceptions] == [ValueError, TypeError]
        # The same interpreters still serve, none was replaced, the limit is intact.
        assert await asyncio.gather(*(pool.run(stressfuncs.inc, i) for i in range(100))) == list(
            range(1, 101)
        )
        assert await pool.run(stressfuncs.recursion_limit) == limit
        assert pool.statistics()["replaced"] == 0


async def test_initializer_raising_a_base_exception_breaks_the_pool():
    pool = asi.InterpreterPool(2, initializer=stressfuncs.fail_initializer)
    with pytest.raises(asi.BrokenPoolError) as info:
        await asyncio.wait_for(pool.run(stressfuncs.inc, 1), 60)
    assert "initializer gave up" in str(info.value) or "initializer gave up" in str(
        info.value.__cause__
    )
    with pytest.raises(asi.BrokenPoolError):
        pool.submit(stressfuncs.inc, 1)
    await asyncio.wait_for(pool.aclose(), 60)


async def test_task_that_never_returns_is_timed_out_and_its_worker_replaced():
    r, w = os.pipe()
    try:
        async with asi.InterpreterPool(1, cancel_grace=0.2) as pool:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pool.run(stressfuncs.swallow_until, r), 0.2)
            # The slot is served by a fresh interpreter while the old one spins.
            assert await asyncio.wait_for(pool.run(stressfuncs.inc, 1), 60) == 2
            assert pool.statistics()["replaced"] == 1
            os.write(w, b"!")  # let the abandoned task end, so its interpreter can go
    finally:
        os.close(r)
        os.close(w)


def test_os_exit_in_a_task_ends_the_process(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio, sys
        import aiosubinterp as asi, stressfuncs

        async def main():
            async with asi.InterpreterPool(2) as pool:
                print("before", flush=True)
                await pool.run(stressfuncs.exit_process, 7)
                print("not reached", flush=True)

        asyncio.run(main())
    """,
        timeout=60,
    )
    # One process: os._exit anywhere ends it, with that code, at once.
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "before\n"


def test_c_level_crash_in_a_task_ends_the_process(tmp_path):
    proc = run_script(
        tmp_path,
        """
        import asyncio
        import aiosubinterp as asi, stressfuncs

        async def main():
            async with asi.InterpreterPool(2) as pool:
                print("before", flush=True)
                await pool.run(stressfuncs.crash_process)

        asyncio.run(main())
    """,
        timeout=60,
    )
    # The limit of in-process isolation: a segfault in any interpreter kills all of them.
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr)
    assert proc.stdout == "before\n"
