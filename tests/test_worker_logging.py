"""Records logged in worker interpreters are handled by the main interpreter's logging."""

from __future__ import annotations

import asyncio
import logging
import threading

import logfuncs
import pytest
from loghelpers import captured_records, record_items

import aiosubinterp as asi
from aiosubinterp import _core
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine import logs as _logs


@pytest.fixture
def captured():
    """A handler on main's "logtest" logger, whose level is INFO (set before any pool starts)."""
    with captured_records("logtest") as records:
        yield records


@pytest.fixture
def handled(monkeypatch):
    """Every item the consumer received from a worker, in order."""
    return record_items(monkeypatch)


async def test_record_reaches_main_logging(captured):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(logfuncs.log_warning, 42)
    (record,) = captured
    assert record.name == "logtest.app"
    assert record.levelname == "WARNING" and record.levelno == logging.WARNING
    assert record.getMessage() == "working on 42"
    assert record.funcName == "log_warning"
    assert record.pathname == logfuncs.__file__ and record.module == "logfuncs"
    assert record.lineno == logfuncs.log_warning.__code__.co_firstlineno + 1
    assert record.request == "r-17" and record.weight == 2.5
    assert not hasattr(record, "blob")  # an object that cannot cross is left out
    assert record.interpreter_id != _core.main_interpreter_id()
    assert record.exc_text is None


async def test_disabled_level_does_not_cross(captured, handled):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(logfuncs.log_levels)
    assert [r.getMessage() for r in captured] == ["info, enabled in main"]
    assert len(handled) == 1  # the debug record never left the worker


async def test_exception_text(captured):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(logfuncs.log_exception)
    (record,) = captured
    assert record.getMessage() == "it failed" and record.levelname == "ERROR"
    assert record.exc_info is None
    assert "ZeroDivisionError: division by zero" in record.exc_text
    assert "log_exception" in logging.Formatter().format(record)


async def test_worker_handler_on_its_logger_is_kept(captured, handled):
    async with asi.Interpreter() as interp:
        assert await interp.run(logfuncs.log_own_handler) == ["kept in the worker"]
    assert captured == [] and handled == []


async def test_worker_configured_in_initializer_is_kept(captured, handled):
    async with asi.InterpreterPool(1, initializer=logfuncs.configure_root) as pool:
        assert await pool.run(logfuncs.root_handler_names) == ["StreamHandler"]
        await pool.run(logfuncs.log_warning, 1)
    assert captured == [] and handled == []


async def test_opt_out(captured, handled):
    async with asi.InterpreterPool(1, forward_logging=False) as pool:
        assert await pool.run(logfuncs.root_handler_names) == []
        await pool.run(logfuncs.log_levels)
    assert captured == [] and handled == []


def test_forward_logging_must_be_bool():
    with pytest.raises(TypeError, match="forward_logging"):
        asi.InterpreterPool(1, forward_logging=1)


async def test_records_before_aclose_all_arrive_in_order(captured):
    pool = asi.InterpreterPool(2)
    try:
        await pool.run(logfuncs.log_many, 300, "a")
        await pool.run(logfuncs.log_many, 300, "b")
    finally:
        await pool.aclose()
    assert [r.getMessage() for r in captured] == (
        [f"a {i}" for i in range(300)] + [f"b {i}" for i in range(300)]
    )


async def test_default_pool_forwards(captured):
    await asi.run(logfuncs.log_warning, "default")
    await asi.run(logfuncs.log_warning, "default")
    # The default pool closes with the loop: close it here to check what it handled.
    pool = _hub.hub_for(asyncio.get_running_loop()).default_pool
    await pool.aclose()
    assert [r.getMessage() for r in captured] == ["working on default"] * 2


async def test_full_buffer_drops_and_reports_once(captured, caplog):
    # Main's handler holds the consumer on the first record (the worker waits
    # for that through `gate`), so the worker's next 20 records meet a full
    # channel of 4: 4 wait, 16 are dropped, and one warning says so.
    release = threading.Event()
    gate_send, gate_recv = asi.open_channel(1)

    class Holding(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "first":
                gate_send.send_nowait(True)
                release.wait(60)
            elif record.getMessage() == "flood 3":  # the last one that fit: drained
                gate_send.send_nowait(True)

    holder = Holding()
    caplog.set_level(logging.WARNING)
    logging.getLogger("logtest").addHandler(holder)
    pool = asi.InterpreterPool(1)
    pool._log_buffer = 4
    try:
        await pool.run(logfuncs.log_then_flood, gate_recv, 20)
        release.set()
        assert await gate_recv.recv() is True  # the channel is empty again
        await pool.run(logfuncs.log_warning, "after")
    finally:
        release.set()
        await pool.aclose()
        logging.getLogger("logtest").removeHandler(holder)
        gate_send.close()
        gate_recv.close()
    assert [r.getMessage() for r in captured] == [
        "first",
        "flood 0",
        "flood 1",
        "flood 2",
        "flood 3",
        "working on after",
    ]
    warnings = [r for r in caplog.records if r.name == "aiosubinterp"]
    assert len(warnings) == 1
    assert "dropped 16 log records" in warnings[0].getMessage()
    messages = [r.getMessage() for r in caplog.records]
    assert messages.index(warnings[0].getMessage()) < messages.index("working on after")


async def test_replaced_workers_lose_nothing(captured):
    async with asi.InterpreterPool(1, max_tasks_per_interpreter=1) as pool:
        for tag in "abc":
            await pool.run(logfuncs.log_many, 50, tag)
    assert [r.getMessage() for r in captured] == [f"{tag} {i}" for tag in "abc" for i in range(50)]
    assert len({r.interpreter_id for r in captured}) == 3


def test_executor_forwards(captured):
    with asi.InterpreterPoolExecutor(1) as executor:
        executor.submit(logfuncs.log_warning, "executor").result()
    assert [r.getMessage() for r in captured] == ["working on executor"]
    assert captured[0].interpreter_id != _core.main_interpreter_id()


async def test_consumer_stopped_on_a_loop_thread_does_not_hang():
    # send_sync refuses a loop's thread: stop() then ends the thread without its marker.
    consumer = _logs.LogConsumer(4)
    consumer.stop()
    consumer.stop()  # idempotent
    assert not consumer._thread.is_alive()
    assert consumer.worker_setup() is None
