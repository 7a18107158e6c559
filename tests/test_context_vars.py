"""context_vars: the caller's context variables hold in the worker for the task's duration;
log records forwarded from workers carry the task's id."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import ctxfuncs
import pytest
from ctxfuncs import UNSET, request_id, tenant_var, trace
from loghelpers import captured_records

import aiosubinterp as asi
from aiosubinterp._inside import worker as _worker

needs_313 = pytest.mark.skipif(
    not _worker.coroutines_supported(), reason="coroutines in interpreters need CPython 3.13+"
)
VARS = [request_id, trace, tenant_var]


def in_context(fn, /, *args):
    """fn(*args) in a copy of the current context: what it sets stays there."""
    return contextvars.copy_context().run(fn, *args)


async def run_with(pool, value, fn=ctxfuncs.read, *args):
    """pool.run(fn) from an asyncio task whose request_id is value (None: unset)."""

    async def call():
        if value is not None:
            request_id.set(value)
        return await pool.run(fn, *args)

    return await asyncio.create_task(call())


# -- values in the worker ------------------------------------------------------------


async def test_value_seen_in_the_worker_and_unset_stays_unset():
    async with asi.InterpreterPool(1, context_vars=VARS) as pool:
        assert await run_with(pool, "r-1") == ("r-1", "no-trace", UNSET)
        # Not set in the caller: unset (or at its default) in the worker.
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)

        async def all_three():
            request_id.set("r-2")
            trace.set("t-9")
            tenant_var.set(("acme", 7))  # any value that crosses by copy
            return await pool.run(ctxfuncs.read)

        assert await asyncio.create_task(all_three()) == ("r-2", "t-9", ("acme", 7))


async def test_reset_after_the_task():
    async with asi.Interpreter(context_vars=VARS) as interp:
        assert await run_with(interp, "r-1") == ("r-1", "no-trace", UNSET)
        assert await run_with(interp, None) == (UNSET, "no-trace", UNSET)
        # A task that sets the variable itself: reset too.
        assert await run_with(interp, "r-2", ctxfuncs.set_and_read, "mine") == (
            "mine",
            "no-trace",
            UNSET,
        )
        assert await run_with(interp, None) == (UNSET, "no-trace", UNSET)
        assert await run_with(interp, None, ctxfuncs.set_and_read, "mine") == (
            "mine",
            "no-trace",
            UNSET,
        )
        assert await run_with(interp, None) == (UNSET, "no-trace", UNSET)


async def test_concurrent_tasks_with_different_values():
    async with asi.InterpreterPool(2, context_vars=[request_id]) as pool:
        values = [f"r-{i}" for i in range(16)]
        got = await asyncio.gather(*(run_with(pool, v) for v in values))
        assert [g[0] for g in got] == values


async def test_map_and_submit_copy_the_callers_values():
    async with asi.InterpreterPool(1, context_vars=[request_id]) as pool:

        async def body():
            request_id.set("from-map")
            task = pool.submit(ctxfuncs.read)
            request_id.set("changed after submit")  # submit copied the value already
            results = [r async for r in pool.map(ctxfuncs.set_and_read, ["a", "b"])]
            return await task, results

        first, results = await asyncio.create_task(body())
        assert first[0] == "from-map"
        assert [r[0] for r in results] == ["a", "b"]


async def test_no_context_vars_configured_sends_nothing():
    async with asi.InterpreterPool(1) as pool:
        assert await run_with(pool, "in main only") == (UNSET, "no-trace", UNSET)


@needs_313
async def test_coroutine_function():
    async with asi.InterpreterPool(1, context_vars=VARS) as pool:
        assert await run_with(pool, "r-a", ctxfuncs.aread) == ("r-a", "no-trace", UNSET)
        assert await run_with(pool, None, ctxfuncs.aread) == (UNSET, "no-trace", UNSET)
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)


@needs_313
async def test_concurrent_coroutines_in_one_interpreter():
    """A session: coroutines run at once on one interpreter's loop, each with its values,
    and a plain call taken meanwhile (with a value, and unset) sees its own."""
    async with asi.InterpreterPool(
        1, context_vars=[request_id], concurrency_per_interpreter=4
    ) as pool:
        values = ["c-0", "c-1", "c-2"]
        together = [
            asyncio.create_task(run_with(pool, v, ctxfuncs.read_together, 3)) for v in values
        ]
        # Taken by the session while the three wait for each other (one slot is left).
        assert await run_with(pool, "plain") == ("plain", "no-trace", UNSET)
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)
        assert [r[0] for r in await asyncio.gather(*together)] == values
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)
        assert await run_with(pool, None, ctxfuncs.aread) == (UNSET, "no-trace", UNSET)


def test_executor():
    with asi.InterpreterPoolExecutor(1, context_vars=[request_id]) as executor:
        assert (
            in_context(lambda: (request_id.set("e-1"), executor.submit(ctxfuncs.read).result())[1])[
                0
            ]
            == "e-1"
        )
        assert executor.submit(ctxfuncs.read).result()[0] == UNSET


async def test_executor_under_to_thread():
    executor = asi.InterpreterPoolExecutor(1, context_vars=[request_id])
    loop = asyncio.get_running_loop()
    try:

        async def call():
            request_id.set("via-to_thread")
            return await loop.run_in_executor(executor, ctxfuncs.read)

        assert (await asyncio.create_task(call()))[0] == "via-to_thread"
    finally:
        executor.shutdown()


async def test_process_pool():
    async with asi.ProcessPool(1, context_vars=VARS) as pool:
        assert await run_with(pool, "p-1") == ("p-1", "no-trace", UNSET)
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)
        assert await run_with(pool, "p-2", ctxfuncs.set_and_read, "mine") == (
            "mine",
            "no-trace",
            UNSET,
        )
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)
        # Coroutines run in worker processes on 3.12 too.
        assert await run_with(pool, "p-3", ctxfuncs.aread) == ("p-3", "no-trace", UNSET)
        assert await run_with(pool, None, ctxfuncs.aread) == (UNSET, "no-trace", UNSET)


async def test_process_pool_errors(monkeypatch):
    with pytest.raises(asi.NotShareableError, match=r"ProcessPool\(context_vars=...\)"):
        asi.ProcessPool(1, context_vars=[contextvars.ContextVar("local_var")])
    # Set on the module in this process only: a worker process imports it without.
    added = contextvars.ContextVar("added_here")
    monkeypatch.setattr(ctxfuncs, "added_here", added, raising=False)
    async with asi.ProcessPool(1, context_vars=[request_id, added]) as pool:

        async def unpicklable():
            request_id.set(threading.Lock())  # type: ignore[arg-type]
            return pool.submit(ctxfuncs.read)

        with pytest.raises(asi.NotShareableError, match=r"ctxfuncs\.request_id .* it is a lock"):
            await asyncio.create_task(unpicklable())

        async def missing():
            added.set("x")
            return await pool.run(ctxfuncs.read)

        with pytest.raises(
            RuntimeError,
            match=r"ctxfuncs\.added_here .* could not be found "
            "in this worker: AttributeError",
        ):
            await asyncio.create_task(missing())
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)


# -- errors --------------------------------------------------------------------------


def test_a_variable_instead_of_a_list():
    with pytest.raises(TypeError, match=r"context_vars=\[request_id\]"):
        asi.InterpreterPool(1, context_vars=request_id)  # type: ignore[arg-type]


def test_not_a_context_var():
    with pytest.raises(TypeError, match="not names: got the string 'request_id'"):
        asi.InterpreterPool(1, context_vars="request_id")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must contain contextvars\.ContextVar objects, got str"):
        asi.Interpreter(context_vars=["request_id"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"must be a list of contextvars\.ContextVar, got int"):
        asi.InterpreterPoolExecutor(1, context_vars=3)  # type: ignore[arg-type]


def test_not_a_module_global():
    local = contextvars.ContextVar("local_var")
    with pytest.raises(
        asi.NotShareableError,
        match=r"InterpreterPool\(context_vars=...\): the context variable "
        r"'local_var' is not a global of any imported module",
    ):
        asi.InterpreterPool(1, context_vars=[local])
    with pytest.raises(asi.NotShareableError, match="InterpreterPoolExecutor"):
        asi.InterpreterPoolExecutor(1, context_vars=[local])


def test_not_with_the_process_fallback():
    with pytest.raises(ValueError, match="fallback='process'"):
        asi.InterpreterPool(1, context_vars=[request_id], fallback="process")


async def test_a_value_that_cannot_cross():
    async with asi.InterpreterPool(1, context_vars=[request_id]) as pool:

        async def call():
            request_id.set(threading.Lock())  # type: ignore[arg-type]
            return pool.submit(ctxfuncs.read)

        with pytest.raises(
            asi.NotShareableError, match=r"context variable ctxfuncs\.request_id .* it is a lock"
        ):
            await asyncio.create_task(call())
        assert await pool.run(ctxfuncs.read) == (UNSET, "no-trace", UNSET)  # still usable


def test_a_value_that_cannot_cross_executor():
    with asi.InterpreterPoolExecutor(1, context_vars=[request_id]) as executor:

        def call():
            request_id.set(threading.Lock())  # type: ignore[arg-type]
            return executor.submit(ctxfuncs.read)

        with pytest.raises(asi.NotShareableError, match=r"ctxfuncs\.request_id"):
            in_context(call)


async def test_a_variable_that_is_something_else_in_the_worker():
    async with asi.InterpreterPool(1, context_vars=[ctxfuncs.not_a_var_in_workers]) as pool:

        async def call():
            ctxfuncs.not_a_var_in_workers.set("x")  # type: ignore[attr-defined]
            return await pool.run(ctxfuncs.read)

        with pytest.raises(
            TypeError,
            match=r"ctxfuncs\.not_a_var_in_workers .* is a str in "
            r"this worker, not a contextvars\.ContextVar",
        ):
            await asyncio.create_task(call())
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)


async def test_a_variable_missing_in_the_worker():
    async with asi.InterpreterPool(1, context_vars=[ctxfuncs.only_in_main, request_id]) as pool:

        async def call():
            request_id.set("kept out")
            ctxfuncs.only_in_main.set("x")
            return await pool.run(ctxfuncs.read)

        with pytest.raises(
            RuntimeError,
            match=r"ctxfuncs\.only_in_main .* could not be found "
            "in this worker: AttributeError",
        ):
            await asyncio.create_task(call())
        # What was set before the failure was reset.
        assert await run_with(pool, None) == (UNSET, "no-trace", UNSET)


# -- task_id on forwarded log records -----------------------------------------------


@pytest.fixture
def captured():
    with captured_records("ctxtest") as records:
        yield records


async def test_task_id_on_records(captured):
    async with asi.InterpreterPool(2) as pool:  # no context_vars needed
        tasks = [pool.submit(ctxfuncs.log_it, f"m{i}") for i in range(6)]
        await asyncio.gather(*tasks)
        thread_task = pool.submit(ctxfuncs.log_from_thread, "from a thread")
        await thread_task
    by_message = {r.getMessage(): r.task_id for r in captured}
    assert by_message == {**{f"m{i}": t.id for i, t in enumerate(tasks)}, "from a thread": None}


@needs_313
async def test_task_id_on_records_of_concurrent_coroutines(captured):
    async with asi.InterpreterPool(
        1, concurrency_per_interpreter=4, context_vars=[request_id]
    ) as pool:
        tasks = [pool.submit(ctxfuncs.alog_it, f"a{i}") for i in range(8)]
        plain = pool.submit(ctxfuncs.log_it, "plain")
        await asyncio.gather(*tasks, plain)
    by_message = {r.getMessage(): r.task_id for r in captured}
    assert by_message == {**{f"a{i}": t.id for i, t in enumerate(tasks)}, "plain": plain.id}


async def test_task_id_on_process_pool_records(captured):
    async with asi.ProcessPool(1) as pool:
        tasks = [pool.submit(ctxfuncs.log_it, f"p{i}") for i in range(4)]
        await asyncio.gather(*tasks)
        async_task = pool.submit(ctxfuncs.alog_it, "async")
        await async_task
        thread_task = pool.submit(ctxfuncs.log_from_thread, "from a thread")
        await thread_task
    by_message = {r.getMessage(): r.task_id for r in captured}
    assert by_message == {
        **{f"p{i}": t.id for i, t in enumerate(tasks)},
        "async": async_task.id,
        "from a thread": None,
    }


def test_task_id_on_executor_records(captured):
    with asi.InterpreterPoolExecutor(1) as executor:
        executor.submit(ctxfuncs.log_it, "e1").result()
        executor.submit(ctxfuncs.log_it, "e2").result()
    ids = [r.task_id for r in captured]
    assert len(ids) == 2 and all(isinstance(i, int) for i in ids) and ids[0] != ids[1]
