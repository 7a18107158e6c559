"""Interpreter: one interpreter whose state persists between calls."""

from __future__ import annotations

import pytest
import workfuncs

import aiosubinterp as asi
from aiosubinterp import _core


async def test_exec_state_persists():
    async with asi.Interpreter() as interp:
        await interp.exec("x = 41\ndef bump():\n    global x\n    x += 1\n")
        await interp.exec("bump()")
        assert await interp.run(workfuncs.main_var, "x") == 42
        assert interp.id != _core.main_interpreter_id()
        assert interp.id == await interp.run(workfuncs.interp_id)


async def test_module_state_persists_between_runs():
    async with asi.Interpreter() as interp:
        await interp.run(workfuncs.set_state, "k", [1, 2])
        assert await interp.run(workfuncs.get_state, "k") == [1, 2]
    # A new interpreter starts fresh, and main never saw it.
    async with asi.Interpreter() as other:
        assert await other.run(workfuncs.get_state, "k") is None
    assert workfuncs.get_state("k") is None


async def test_exec_errors():
    async with asi.Interpreter() as interp:
        with pytest.raises(ZeroDivisionError) as info:
            await interp.exec("1/0")
        assert "<aiosubinterp exec>" in info.value.__cause__.remote_traceback
        with pytest.raises(SyntaxError):
            await interp.exec("def (")
        with pytest.raises(TypeError, match="source as str"):
            await interp.exec(b"x = 1")


async def test_id_before_start_is_a_clear_error():
    interp = asi.Interpreter()
    with pytest.raises(RuntimeError, match="has not started"):
        interp.id  # noqa: B018 - the attribute access is what raises
    await interp.aclose()


async def test_closed_interpreter():
    interp = asi.Interpreter()
    await interp.start()
    await interp.aclose()
    with pytest.raises(asi.PoolClosedError, match="interpreter is closed"):
        await interp.exec("pass")
