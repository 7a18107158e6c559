"""What workers write to sys.stdout/sys.stderr reaches main's, when main's are replaced.

Main checks at each submit whether its sys.stdout/sys.stderr are the
process's own (sys.__stdout__); when not (redirect_stdout, capsys,
ipykernel), workers send what they write through the log channel, and the
pool's log thread writes it to main's stream. aclose() returns once it is
written, so the tests check after it.
"""

from __future__ import annotations

import contextlib
import io
import sys

import childproc
import outfuncs
import pytest
from loghelpers import output_and_records

import aiosubinterp as asi


@contextlib.contextmanager
def own_streams():
    """Main's sys.stdout/sys.stderr are the process's own (pytest's capture replaced them;
    in the test's body, since pytest puts its own back after each fixture's set-up)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


async def test_redirect_stdout_gets_worker_prints():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        async with asi.InterpreterPool(2) as pool:
            await pool.run(outfuncs.say, "hello", 3)
            await pool.run(outfuncs.say, "again")
    assert buf.getvalue() == "hello 0\nhello 1\nhello 2\nagain 0\n"


async def test_capsys_sees_stdout_and_stderr(capsys):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(outfuncs.say, "out")
        await pool.run(outfuncs.to_stderr, "err")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("out 0\n", "err\n")


async def test_own_streams_are_not_forwarded():
    with own_streams():
        async with asi.InterpreterPool(1) as pool:
            assert await pool.run(outfuncs.streams_forwarded) == (False, False)
            with contextlib.redirect_stdout(io.StringIO()):
                assert await pool.run(outfuncs.streams_forwarded) == (True, False)
            assert await pool.run(outfuncs.streams_forwarded) == (False, False)  # at once


async def test_order_with_log_records_is_kept():
    with output_and_records("outtest") as events:
        async with asi.InterpreterPool(1) as pool:
            await pool.run(outfuncs.print_log_print)
    assert events == ["first", "second", "third"]


async def test_partial_line_waits_for_flush_or_close():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        async with asi.InterpreterPool(1) as pool:
            await pool.run(outfuncs.partial, "flushed", True)
            await pool.run(outfuncs.say, "")  # a line after it: the flushed text came first
            await pool.run(outfuncs.partial, "at close", False)
    assert buf.getvalue() == "flushed 0\nat close"


async def test_task_redirect_in_the_worker_is_kept():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        async with asi.InterpreterPool(1) as pool:
            assert await pool.run(outfuncs.own_redirect, "mine") == "mine\n"
    assert buf.getvalue() == ""


async def test_bytes_are_refused_clearly():
    with contextlib.redirect_stdout(io.StringIO()):
        async with asi.InterpreterPool(1) as pool:
            with pytest.raises(TypeError, match="must be str, not bytes"):
                await pool.run(outfuncs.write_bytes)


async def test_opt_out():
    with own_streams(), contextlib.redirect_stdout(io.StringIO()):
        async with asi.InterpreterPool(1, forward_logging=False) as pool:
            assert await pool.run(outfuncs.streams_forwarded) == (False, False)


def test_executor_forwards():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        with asi.InterpreterPoolExecutor(1) as executor:
            executor.submit(outfuncs.say, "executor").result()
    assert buf.getvalue() == "executor 0\n"


def test_exit_with_an_unclosed_forwarding_pool(tmp_path):
    # The worker ends in the exit sweep with a partial line still buffered
    # and main's stdout redirected: the process exits, nothing hangs.
    proc = childproc.run_child(
        tmp_path,
        """
        import asyncio
        import io
        import sys
        import warnings

        import outfuncs

        import aiosubinterp as asi

        warnings.simplefilter("ignore", ResourceWarning)  # the unclosed pool, on purpose
        buf = io.StringIO()

        async def main():
            pool = asi.InterpreterPool(1)
            sys.stdout = buf
            await pool.run(outfuncs.say, "whole")
            await pool.run(outfuncs.partial, "partial", False)
            return pool

        pool = asyncio.run(main())
        sys.__stdout__.write("main done\\n")
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert "main done" in proc.stdout
