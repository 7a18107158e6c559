"""Warnings issued in worker interpreters are handled by the main interpreter's warnings.

They travel on the log channel (forward_logging=True), and main passes each
to warnings.warn_explicit on the pool's log thread: main's filters, its
once-per-location registry and its showwarning decide. The pool's aclose()
returns once they are handled, so the tests check after it.
"""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
import warnfuncs

import aiosubinterp as asi


@pytest.fixture
def shown():
    """Every warning main's machinery shows, under filters the test sets ("default" first)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        yield seen


async def test_warning_reaches_main(shown):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(warnfuncs.warn, "careful")
    (w,) = shown
    assert w.category is warnfuncs.AppWarning and str(w.message) == "careful"
    assert (w.filename, w.lineno) == (warnfuncs.__file__, warnfuncs.line_of("the warning's line"))


async def test_once_per_location_by_main_rules(shown):
    async with asi.InterpreterPool(2) as pool:
        await pool.run(warnfuncs.warn, "again", 5)
        await pool.run(warnfuncs.warn, "again", 5)
        await pool.run(warnfuncs.warn, "other text")
    assert [str(w.message) for w in shown] == ["again", "other text"]


async def test_main_always_filter_shows_each_worker_once(shown):
    warnings.simplefilter("always")
    async with asi.InterpreterPool(1, max_tasks_per_interpreter=1) as pool:
        await pool.run(warnfuncs.warn, "each", 3)  # one worker: sent once
        await pool.run(warnfuncs.warn, "each", 3)  # its replacement: once more
    assert [str(w.message) for w in shown] == ["each", "each"]


async def test_main_filters_apply(shown):
    warnings.filterwarnings("ignore", category=warnfuncs.AppWarning)
    async with asi.InterpreterPool(1) as pool:
        await pool.run(warnfuncs.warn, "ignored")
        await pool.run(warnfuncs.call_deprecated, "old api")
    # DeprecationWarning: "default" shows it, at the caller's line (stacklevel=2).
    (w,) = shown
    assert w.category is DeprecationWarning and str(w.message) == "old api"
    assert w.lineno == warnfuncs.line_of("the caller's line")


async def test_pytest_warns():
    with pytest.warns(warnfuncs.AppWarning, match="seen by pytest"):
        async with asi.InterpreterPool(1) as pool:
            await pool.run(warnfuncs.warn, "seen by pytest")


async def test_capture_warnings_goes_to_py_warnings_logger(shown):
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)
    logging.captureWarnings(True)
    try:
        async with asi.InterpreterPool(1) as pool:
            await pool.run(warnfuncs.log_warn_log)
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
    assert [r.name for r in records] == ["warntest", "py.warnings", "warntest"]  # in order
    assert records[0].getMessage() == "before" and records[2].getMessage() == "after"
    first_line = records[1].getMessage().splitlines()[0]
    assert first_line == f"{warnfuncs.__file__}:{warnfuncs.line_of('between')}: AppWarning: between"
    assert shown == []  # logging showed it


async def test_error_filter_goes_to_unraisablehook(shown, monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    warnings.simplefilter("error")
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(warnfuncs.warn, "an error in main") is None  # the task went on
    (unraisable,) = seen
    assert isinstance(unraisable.exc_value, warnfuncs.AppWarning)
    assert "turn into an error" in unraisable.err_msg


async def test_category_main_does_not_have(shown):
    async with asi.InterpreterPool(1) as pool:
        await pool.run(warnfuncs.warn_unknown_category, "made in the worker")
    (w,) = shown
    assert w.category is UserWarning
    assert str(w.message) == "warnfuncs.LocalWarning: made in the worker"


async def test_task_catching_its_warnings_keeps_them(shown):
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(warnfuncs.warn_in_catch, "mine") == ["mine"]
    assert shown == []


async def test_initializer_showwarning_is_kept(shown):
    async with asi.InterpreterPool(1, initializer=warnfuncs.own_showwarning) as pool:
        await pool.run(warnfuncs.warn, "kept in the worker")
    assert shown == []


async def test_opt_out(shown, capfd):
    async with asi.InterpreterPool(1, forward_logging=False) as pool:
        await pool.run(warnfuncs.warn, "stays in the worker")
    assert shown == []
    assert "stays in the worker" in capfd.readouterr().err  # the worker's own stderr


def test_executor_forwards(shown):
    with asi.InterpreterPoolExecutor(1) as executor:
        executor.submit(warnfuncs.warn, "from the executor").result()
    assert [str(w.message) for w in shown] == ["from the executor"]
