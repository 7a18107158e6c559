"""What ProcessPool workers log, warn and print reaches the main process, as for interpreters.

The worker process's Forwarder (aiosubinterp._inside.logs, the one
interpreter workers use) makes the same tuples; they travel as LOG frames on
the worker's socket, in order with its results, and the pool's reader thread
hands them to main's logging, warnings and streams. aclose() returns once
every one is handled, so the tests check after it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

import childproc
import logfuncs

# Loading numpy's C library starts OpenBLAS's threads in this process, even when
# an interpreter's import of numpy is then refused (the fallback test): start
# them before any test takes its snapshot of the threads.
import numpy  # noqa: F401
import outfuncs
import procfuncs
import pytest
import warnfuncs
from loghelpers import captured_records, output_and_records, record_items

import aiosubinterp as asi


@pytest.fixture
def captured():
    """A handler on main's "logtest" logger, whose level is INFO (set before any pool starts)."""
    with captured_records("logtest") as records:
        yield records


@pytest.fixture
def handled(monkeypatch):
    """Every item main received from a worker, in order."""
    return record_items(monkeypatch)


async def test_record_reaches_main_logging(captured):
    async with asi.ProcessPool(1) as pool:
        (pid,) = pool.pids()
        await pool.run(logfuncs.log_warning, 42)
    (record,) = captured
    assert record.name == "logtest.app"
    assert record.levelname == "WARNING" and record.levelno == logging.WARNING
    assert record.getMessage() == "working on 42"
    assert record.funcName == "log_warning" and record.pathname == logfuncs.__file__
    assert record.process == pid != os.getpid()
    assert record.request == "r-17" and record.weight == 2.5  # type: ignore[attr-defined]
    assert not hasattr(record, "blob")  # not a builtin: not sent


async def test_disabled_level_does_not_cross(captured, handled):
    async with asi.ProcessPool(1) as pool:
        await pool.run(logfuncs.log_levels)
    assert [r.getMessage() for r in captured] == ["info, enabled in main"]
    assert len(handled) == 1  # the debug record was dropped in the worker


async def test_exception_text(captured):
    async with asi.ProcessPool(1) as pool:
        await pool.run(logfuncs.log_exception)
    (record,) = captured
    assert record.levelno == logging.ERROR
    assert "ZeroDivisionError" in record.exc_text


async def test_worker_configured_in_initializer_is_kept(captured, handled):
    async with asi.ProcessPool(1, initializer=logfuncs.configure_root) as pool:
        assert await pool.run(logfuncs.root_handler_names) == ["StreamHandler"]
    assert handled == []


async def test_records_before_aclose_all_arrive_in_order(captured):
    pool = asi.ProcessPool(2)
    try:
        await pool.run(logfuncs.log_many, 300, "a")
        await pool.run(logfuncs.log_many, 300, "b")
        pool.submit(logfuncs.log_many, 300, "c")  # not awaited: aclose() waits for it
    finally:
        await pool.aclose()
    assert [r.getMessage() for r in captured] == (
        [f"a {i}" for i in range(300)]
        + [f"b {i}" for i in range(300)]
        + [f"c {i}" for i in range(300)]
    )


async def test_opt_out(captured, handled):
    async with asi.ProcessPool(1, forward_logging=False) as pool:
        assert await pool.run(logfuncs.root_handler_names) == []
        assert await pool.run(outfuncs.streams_forwarded) == (False, False)
    assert captured == [] and handled == []


def test_forward_logging_must_be_bool():
    with pytest.raises(TypeError, match="forward_logging"):
        asi.ProcessPool(1, forward_logging=1)  # type: ignore[arg-type]


async def test_warnings_reach_main_once_per_location():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        async with asi.ProcessPool(1) as pool:
            await pool.run(warnfuncs.warn, "careful", 3)
            await pool.run(warnfuncs.warn, "careful")
    (w,) = shown
    assert w.category is warnfuncs.AppWarning and str(w.message) == "careful"
    assert (w.filename, w.lineno) == (warnfuncs.__file__, warnfuncs.line_of("the warning's line"))


async def test_output_reaches_replaced_streams(capsys):
    buf = io.StringIO()
    async with asi.ProcessPool(1) as pool:
        with contextlib.redirect_stdout(buf):
            await pool.run(outfuncs.say, "hello", 2)
        await pool.run(outfuncs.to_stderr, "err")
    assert buf.getvalue() == "hello 0\nhello 1\n"
    assert capsys.readouterr().err == "err\n"


async def test_output_in_order_with_records():
    with output_and_records("outtest") as events:
        async with asi.ProcessPool(1) as pool:
            await pool.run(outfuncs.print_log_print)
            await pool.run(outfuncs.partial, "at close", False)
    assert events == ["first", "second", "third", "at close"]


# The handler is slow and the first record waits until exit begins: records
# are still unhandled when the program ends.
EXIT_CHILD = """
    import asyncio, atexit, logging, sys, threading, time
    import aiosubinterp as asi
    import logfuncs

    gate = threading.Event()

    class Late(logging.Handler):
        def emit(self, record):
            gate.wait(60)
            time.sleep(0.002)  # a slow handler: exit would not wait for it
            sys.stdout.write(record.getMessage() + "\\n")

    logging.getLogger("logtest").addHandler(Late())
    logging.getLogger("logtest").setLevel(logging.INFO)

    async def main():
        pool = asi.InterpreterPool(1)
        await pool.run(logfuncs.log_many, 100, "x")
        return pool

    pool = asyncio.run(main())  # never closed
    atexit.register(gate.set)  # runs before aiosubinterp's hooks (registered before it)
    print("exiting", flush=True)
    {undo}
"""

# The start of the children below: main's "logtest" logger with a slow handler.
SLOW_LOGTEST_CHILD = """
    import asyncio, logging, socket, sys, threading, time
    import aiosubinterp as asi
    import logfuncs

    class Slow(logging.Handler):
        def emit(self, record):
            time.sleep(0.002)  # a slow handler: exit would not wait for it
            sys.stdout.write(record.getMessage() + "\\n")

    logging.getLogger("logtest").addHandler(Slow())
    logging.getLogger("logtest").setLevel(logging.INFO)
"""

# A process worker's records are handled on its reader thread, before its
# result: the worker says on a socket of its own that it sent them all.
PROCESS_EXIT_CHILD = (
    SLOW_LOGTEST_CHILD
    + """

    async def main():
        pool = asi.ProcessPool(1)
        mine, theirs = socket.socketpair()
        pool.submit(logfuncs.log_many_then_signal, 100, "x", theirs)
        theirs.close()
        await asyncio.get_running_loop().sock_recv(mine, 1)  # all 100 are sent
        mine.close()
        return pool

    pool = asyncio.run(main())  # never closed
    sys.stdout.write("exiting\\n")
    {undo}
"""
)


def test_records_of_a_pool_never_closed_reach_main_at_exit(tmp_path):
    proc = childproc.run_child(tmp_path, EXIT_CHILD.replace("{undo}", ""))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["exiting"] + [f"x {i}" for i in range(100)]


def test_records_of_a_process_pool_never_closed_reach_main_at_exit(tmp_path):
    proc = childproc.run_child(tmp_path, PROCESS_EXIT_CHILD.replace("{undo}", ""))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "exiting" in lines
    lines.remove("exiting")  # where it falls among the records is the slow handler's business
    assert lines == [f"x {i}" for i in range(100)]


# The cause of the lost records above (about 1 run in 10): the exit drain
# asked how many bytes each worker had sent (read so far + still in the
# kernel), and bytes that the reader thread's recv had taken out of the kernel
# but not yet counted were in neither. Here the reader thread is held right
# there, from before the exit hook starts until a while after: the drain must
# still handle every record.
HELD_READER_EXIT_CHILD = (
    SLOW_LOGTEST_CHILD
    + """
    all_sent, draining = threading.Event(), threading.Event()

    class HeldAfterRecv:
        # Each recv waits until the worker sent all its records, takes them,
        # then waits until main's exit hook runs.
        def __init__(self, sock):
            self._sock = sock

        def __getattr__(self, name):
            return getattr(self._sock, name)

        def _hold(self):
            draining.wait()
            time.sleep(0.3)  # room for the hook to look while the bytes are held

        def recvmsg(self, *args):
            all_sent.wait()
            got = self._sock.recvmsg(*args)
            self._hold()
            return got

        def recv_into(self, *args):
            all_sent.wait()
            n = self._sock.recv_into(*args)
            self._hold()
            return n

    async def main():
        pool = asi.ProcessPool(1)
        await pool.run(abs, -1)  # the worker is up
        (proc,) = pool._procs.values()
        proc.reader._sock = HeldAfterRecv(proc.reader._sock)
        await pool.run(abs, -1)  # its reader is now inside a wrapped recv, waiting
        drain = pool.drain_logs

        def drain_logs(deadline):
            draining.set()
            drain(deadline)

        pool.drain_logs = drain_logs
        mine, theirs = socket.socketpair()
        pool.submit(logfuncs.log_many_then_signal, 100, "x", theirs)
        theirs.close()
        await asyncio.get_running_loop().sock_recv(mine, 1)  # all 100 are sent
        all_sent.set()
        mine.close()
        return pool

    pool = asyncio.run(main())  # never closed
    sys.stdout.write("exiting\\n")
"""
)


def test_records_held_by_the_reader_when_main_exits_are_still_handled(tmp_path):
    proc = childproc.run_child(tmp_path, HELD_READER_EXIT_CHILD)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "exiting" in lines
    lines.remove("exiting")
    assert lines == [f"x {i}" for i in range(100)]


async def test_records_from_worker_threads_arrive_whole(captured):
    async with asi.ProcessPool(1) as pool:
        await pool.run(logfuncs.log_from_threads, 4, 200)
    messages = [r.getMessage() for r in captured]
    expected = [f"thread {t} record {i}" for t in range(4) for i in range(200)]
    assert sorted(messages) == sorted(expected)
    for t in range(4):  # each thread's in its order
        assert [m for m in messages if m.startswith(f"thread {t} ")] == [
            f"thread {t} record {i}" for i in range(200)
        ]


async def test_cancel_while_logging_leaves_the_stream_whole(captured):
    import asyncio

    loop = asyncio.get_running_loop()
    first = asyncio.Event()

    class Signal(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            loop.call_soon_threadsafe(first.set)

    signal = Signal()
    logging.getLogger("logtest").addHandler(signal)
    try:
        async with asi.ProcessPool(1) as pool:
            (pid,) = pool.pids()
            task = pool.submit(logfuncs.log_forever, "busy")
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await pool.run(logfuncs.log_many, 50, "after")
            assert pool.pids() == [pid]  # interrupted, not killed: its stream stayed whole
    finally:
        logging.getLogger("logtest").removeHandler(signal)
    busy = [r.getMessage() for r in captured if r.getMessage().startswith("busy ")]
    assert busy == [f"busy {i}" for i in range(len(busy))]
    assert [r.getMessage() for r in captured if r.getMessage().startswith("after ")] == [
        f"after {i}" for i in range(50)
    ]


# Main's handling never returns (a handler's filter that waits forever, outside
# the handler's lock so that logging's own shutdown can still flush it): the
# exit hook gives up after its limit, and the program still ends.
STUCK_CHILD = """
    import asyncio, logging, socket, sys, threading
    import aiosubinterp as asi
    from aiosubinterp._engine import logs
    import logfuncs

    logs.EXIT_LIMIT = 0.5
    never = threading.Event()
    handler = logging.StreamHandler(sys.stdout)
    # Whole lines in one write each: the reader thread and main print at once.
    handler.addFilter(lambda record: sys.stdout.write("stuck\\n") and never.wait())
    logging.getLogger("logtest").addHandler(handler)
    logging.getLogger("logtest").setLevel(logging.INFO)

    async def main():
        pool = asi.{kind}(1)
        if "{kind}" == "InterpreterPool":
            await pool.run(logfuncs.log_many, 5, "x")
        else:  # its records come before its result: that never comes
            mine, theirs = socket.socketpair()
            pool.submit(logfuncs.log_many_then_signal, 5, "x", theirs)
            theirs.close()
            await asyncio.get_running_loop().sock_recv(mine, 1)
            mine.close()
        return pool

    pool = asyncio.run(main())  # never closed
    sys.stdout.write("exiting\\n")
"""


@pytest.mark.parametrize("kind", ["InterpreterPool", "ProcessPool"])
def test_exit_does_not_wait_forever_for_a_stuck_handler(tmp_path, kind):
    proc = childproc.run_child(tmp_path, STUCK_CHILD.replace("{kind}", kind))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(proc.stdout.splitlines()) == ["exiting", "stuck"]


@pytest.mark.parametrize("forward", [True, False])
async def test_process_fallback_follows_forward_logging(captured, forward):
    async with asi.InterpreterPool(1, fallback="process", forward_logging=forward) as pool:
        with pytest.warns(asi.FallbackWarning):
            await pool.run(procfuncs.numpy_total, 3)  # procfuncs goes to processes now
        pid = await pool.run(procfuncs.log_from_process, "from a process")
    assert pid != os.getpid()
    if forward:
        (record,) = captured
        assert (record.getMessage(), record.process) == ("from a process", pid)
    else:
        assert captured == []
