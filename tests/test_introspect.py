"""Introspection: get_current, get_main, list_all, active_count, Interpreter state, statistics."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys

import pytest
import workfuncs
from aiohelpers import read_byte

import aiosubinterp as asi
from aiosubinterp import _core


def test_main_interpreter():
    main = asi.get_main()
    assert main.id == _core.main_interpreter_id()
    assert main.is_main and not main.managed
    assert asi.get_current() == main
    assert asi.list_all() == [main]
    assert asi.active_count() == 1
    assert main.is_alive()
    assert pickle.loads(pickle.dumps(main)) == main
    assert hash(asi.get_current()) == hash(main)
    with pytest.raises(AttributeError, match="immutable"):
        main.id = 3  # type: ignore[misc]
    assert "main" in repr(main)


async def test_get_current_inside_a_worker():
    async with asi.Interpreter() as interp:
        info = await interp.run(workfuncs.current_info)
        assert isinstance(info, asi.InterpreterInfo)
        assert info.id == interp.id and not info.is_main and info.managed
        assert info == interp.info()
        ids, count = await interp.run(workfuncs.all_ids)
        assert ids == [_core.main_interpreter_id(), interp.id] and count == 2


async def test_list_all_sees_every_interpreter():
    async with asi.InterpreterPool(2) as pool, asi.Interpreter() as interp:
        await pool.wait_ready()  # async with returns once the first one is ready
        infos = asi.list_all()
        assert infos[0] == asi.get_main()
        assert interp.info() in infos
        assert len(infos) == asi.active_count() == 4
        assert all(i.managed for i in infos[1:])
        pool_ids = set(await asyncio.gather(*(pool.run(workfuncs.interp_id) for _ in range(8))))
        assert pool_ids <= {i.id for i in infos[1:]}
        info = interp.info()
    assert not info.is_alive()
    assert asi.list_all() == [asi.get_main()]


def test_list_all_includes_interpreters_created_by_other_code():
    if sys.version_info >= (3, 13):
        import _interpreters as stdlib
    else:
        import _xxsubinterpreters as stdlib
    other = stdlib.create()
    try:
        infos = {i.id: i for i in asi.list_all()}
        assert other in infos and not infos[other].managed and not infos[other].is_main
        assert asi.active_count() == 2
    finally:
        stdlib.destroy(other)
    assert asi.active_count() == 1


async def test_interpreter_state_ident_and_task(pipe):
    r, w = pipe
    back_r, back_w = os.pipe()
    interp = asi.Interpreter()
    assert not interp.is_alive() and not interp.is_running() and interp.task is None
    with pytest.raises(RuntimeError, match="has not started"):
        interp.get_ident()
    async with interp:
        assert interp.is_alive() and not interp.is_running()
        assert await interp.run(workfuncs.thread_ident) == interp.get_ident()
        assert interp.get_ident() != __import__("threading").get_ident()
        try:
            task = interp.submit(workfuncs.write_then_read, w, back_r)
            # The task writes first, then blocks reading what we send back.
            assert await read_byte(r) == b"x"
            assert interp.is_running()
            assert interp.task is task
            os.write(back_w, b"y")
            assert await asyncio.wait_for(task, 30) == b"y"
            assert not interp.is_running() and interp.task is None
        finally:
            os.write(back_w, b"!")  # never leave the task blocked
    os.close(back_r)
    os.close(back_w)
    assert not interp.is_alive()


async def test_statistics_count_completed(pipe):
    async with asi.InterpreterPool(2) as pool:
        assert pool.statistics()["completed"] == 0
        await asyncio.gather(*(pool.run(workfuncs.square, i) for i in range(10)))
        with pytest.raises(workfuncs.CustomError):
            await pool.run(workfuncs.raise_custom, "x")
        stats = pool.statistics()
        assert stats["completed"] == 11 and stats["submitted"] == 11
        assert stats["busy"] == 0 and stats["queued"] == 0


def test_runtime_info_reports_this_python_and_machine():
    import platform
    import sysconfig

    info = asi.runtime_info()
    assert info["version"] == asi.__version__
    assert info["python"] == platform.python_version()
    assert info["per_interpreter_gil"] is True  # the suite runs on 3.12+
    assert info["free_threaded"] is bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert info["cpus"] == os.cpu_count()
    assert 1 <= info["default_size"] <= info["cpus"]
    assert info["wakeup"] in ("eventfd", "pipe")
    assert isinstance(info["blocked_modules"], tuple)
    assert info["main_interpreter_id"] == asi.get_main().id
    assert asi.runtime_info() is not info  # a new dict each time


def test_runtime_info_names_a_bad_wakeup_setting(monkeypatch):
    monkeypatch.setenv("AIOSUBINTERP_WAKEUP", "smoke")
    with pytest.raises(ValueError, match="AIOSUBINTERP_WAKEUP='smoke'"):
        asi.runtime_info()
    monkeypatch.setenv("AIOSUBINTERP_WAKEUP", "pipe")
    assert asi.runtime_info()["wakeup"] == "pipe"
