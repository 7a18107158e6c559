"""A remote exception's traceback holds the worker's frames (aiosubinterp._tracebacks).

traceback.extract_tb, pdb and pytest's report see the file, line, function
and source line of the code that failed in the worker, after the caller's
frames, with aiosubinterp's own machinery left out; chained exceptions and
group members keep theirs; the text form stays the ExecutionFailed cause.
"""

from __future__ import annotations

import io
import os
import pdb
import sys
import traceback

import pytest
import tbfuncs
from tbfuncs import line_of

import aiosubinterp as asi
from aiosubinterp import _errors, _tracebacks

pytest_plugins = ["pytester"]

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
PACKAGE = os.path.dirname(os.path.abspath(asi.__file__))  # the installed package
OUR_MACHINERY = (
    os.path.join(PACKAGE, "_inside") + os.sep,
    os.path.join(PACKAGE, "_process", "worker.py"),
)


class Backend:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def pool(self, size: int = 1):
        if self.kind == "interpreters":
            return asi.InterpreterPool(size)
        return asi.ProcessPool(size)

    def __repr__(self) -> str:
        return self.kind


@pytest.fixture(params=["interpreters", "processes"])
def backend(request) -> Backend:
    return Backend(request.param)


def worker_entries(exc: BaseException) -> list[tuple[str, int, str | None]]:
    """(function, line, source line) of exc's traceback entries in tbfuncs."""
    return [
        (fs.name, fs.lineno, fs.line)
        for fs in traceback.extract_tb(exc.__traceback__)
        if fs.filename == tbfuncs.__file__
    ]


def at(name: str, text: str) -> tuple[str, int, str]:
    """The entry expected for function name failing on the line containing text."""
    lineno = line_of(text)
    with open(tbfuncs.__file__, encoding="utf-8") as f:
        source = f.read().splitlines()[lineno - 1].strip()
    return (name, lineno, source)


async def failure(pool, fn, *args) -> BaseException:
    with pytest.raises(BaseException) as info:  # each test checks the type
        await pool.run(fn, *args)
    return info.value


# -- the frames --------------------------------------------------------------------------


async def test_worker_frames_follow_the_callers(backend):
    async with backend.pool() as pool:
        exc = await failure(pool, tbfuncs.outer)
    assert type(exc) is KeyError
    entries = traceback.extract_tb(exc.__traceback__)
    assert (entries[0].filename, entries[0].name) == (__file__, "failure")  # the caller's
    assert worker_entries(exc) == [
        at("outer", "outer calls inner"),
        at("_inner", "inner lookup fails"),
    ]
    assert [fs.filename for fs in entries[-2:]] == [tbfuncs.__file__] * 2  # innermost last
    assert not [
        fs
        for fs in entries
        if fs.filename.startswith(OUR_MACHINERY) or fs.filename.endswith((".pxi", ".pyx"))
    ]
    # The text form stays the cause, as before.
    assert isinstance(exc.__cause__, asi.ExecutionFailed)
    text = exc.__cause__.remote_traceback
    assert "inner lookup fails" in text
    assert text.startswith('Traceback (most recent call last):\n  File "' + tbfuncs.__file__)


async def test_columns_are_the_workers(backend):
    # The carets under the source line mark what failed, as in the worker's own text.
    async with backend.pool() as pool:
        exc = await failure(pool, tbfuncs.nested_subscript)
    here = "".join(traceback.format_exception(exc, chain=False))  # not the text form
    remote = exc.__cause__.remote_traceback
    start = remote.index(f'  File "{tbfuncs.__file__}"')
    block = remote[start : remote.index("KeyError: 'b'")]
    assert "^" in block  # the worker's text marks part of the line
    assert block in here


async def test_interpreter_exec_frame():
    async with asi.Interpreter() as interp:
        with pytest.raises(ZeroDivisionError) as info:
            await interp.exec("x = 1\ny = x / 0\n")
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.lineno, last.name) == ("<aiosubinterp exec>", 2, "<module>")


async def test_unrebuildable_exception_has_the_frames(backend):
    async with backend.pool() as pool:
        exc = await failure(pool, tbfuncs.raise_unrebuildable)
    assert type(exc) is asi.ExecutionFailed
    assert worker_entries(exc) == [at("raise_unrebuildable", "never rebuilt in the caller")]


@pytest.mark.skipif(sys.version_info < (3, 13), reason="no coroutines in interpreters on 3.12")
async def test_coroutine_job_without_asyncio_frames():
    async with asi.InterpreterPool(1) as pool:
        exc = await failure(pool, tbfuncs.async_outer)
    assert type(exc) is LookupError
    entries = traceback.extract_tb(exc.__traceback__)
    assert [(fs.name, fs.lineno) for fs in entries[-2:]] == [
        ("async_outer", line_of("await async_inner()")),
        ("async_inner", line_of("raised by a coroutine")),
    ]
    asyncio_dir = os.path.join(os.path.dirname(os.__file__), "asyncio")
    assert not [fs for fs in entries[1:-2] if fs.filename.startswith(asyncio_dir)]


# -- chains and groups -------------------------------------------------------------------


async def test_cause_keeps_its_frames(backend):
    async with backend.pool() as pool:
        exc = await failure(pool, tbfuncs.raise_from)
    assert type(exc) is ValueError
    assert worker_entries(exc) == [at("raise_from", "explicit cause")]
    text_form = exc.__cause__
    assert isinstance(text_form, asi.ExecutionFailed)
    cause = text_form.__cause__
    assert type(cause) is KeyError and cause.args == ("missing",)
    assert worker_entries(cause) == [
        at("raise_from", "the cause starts here"),
        at("outer", "outer calls inner"),
        at("_inner", "inner lookup fails"),
    ]


async def test_context_keeps_its_frames_and_suppression_holds(backend):
    async with backend.pool() as pool:
        during = await failure(pool, tbfuncs.raise_during)
        from_none = await failure(pool, tbfuncs.raise_from_none)
    context = during.__cause__.__context__
    assert type(context) is KeyError
    assert during.__cause__.__cause__ is None
    assert worker_entries(context)[-1] == at("_inner", "inner lookup fails")
    assert from_none.__cause__.__cause__ is None and from_none.__cause__.__context__ is None


async def test_group_members_keep_their_frames(backend):
    async with backend.pool() as pool:
        exc = await failure(pool, tbfuncs.raise_group)
    assert type(exc) is ExceptionGroup
    assert worker_entries(exc) == [at("raise_group", 'raise ExceptionGroup("two failed"')]
    first, second = exc.exceptions
    assert worker_entries(first)[-1] == at("_inner", "inner lookup fails")
    assert worker_entries(second)[-1] == at("nested_subscript", "middle of the line")
    assert "inner lookup fails" in "".join(traceback.format_exception(exc))


async def test_frames_and_chains_are_bounded():
    async with asi.InterpreterPool(1) as pool:
        deep = await failure(pool, tbfuncs.recurse, 0)
        chained = await failure(pool, tbfuncs.long_chain, 40)
    assert type(deep) is RecursionError
    entries = worker_entries(deep)
    assert len(entries) == _tracebacks.MAX_FRAMES
    assert {name for name, _, _ in entries} == {"recurse"}
    length = 0
    link: BaseException | None = chained.__cause__  # the text form, then the remote causes
    while link is not None:
        length += 1
        link = link.__cause__
    assert length == 1 + _tracebacks.MAX_EXCEPTIONS


# -- tools that read tracebacks ----------------------------------------------------------


async def test_pdb_post_mortem_lists_worker_source():
    async with asi.InterpreterPool(1) as pool:
        exc = await failure(pool, tbfuncs.outer)
    out = io.StringIO()
    debugger = pdb.Pdb(stdin=io.StringIO("list\nup\nlist\nquit\n"), stdout=out, nosigint=True)
    debugger.reset()
    debugger.interaction(None, exc.__traceback__)  # what pdb.post_mortem() does
    text = out.getvalue()
    inner_at = text.index(f"{line_of('inner lookup fails')}  ->")
    outer_at = text.index(f"{line_of('outer calls inner')}  ->")
    assert inner_at < outer_at  # listed at the failing line, then one frame up


def test_executor_raises_with_worker_frames():
    with asi.InterpreterPoolExecutor(1) as executor:
        future = executor.submit(tbfuncs.outer)
        with pytest.raises(KeyError) as info:
            future.result()
    assert worker_entries(info.value) == [
        at("outer", "outer calls inner"),
        at("_inner", "inner lookup fails"),
    ]


def test_pytest_report_shows_worker_lines(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([ROOT, TESTS]))
    pytester.makepyfile(
        test_inner="""
        import asyncio

        import aiosubinterp as asi
        import tbfuncs


        def test_fails():
            async def main():
                async with asi.InterpreterPool(1) as pool:
                    await pool.run(tbfuncs.outer)

            asyncio.run(main())
    """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert 'return table["missing"]  # inner lookup fails' in text
    assert f"tbfuncs.py:{line_of('inner lookup fails')}: KeyError" in text
    assert text.index("outer calls inner") < text.index("inner lookup fails")


# -- cost ----------------------------------------------------------------------------


async def test_success_path_does_not_load_it():
    async with asi.InterpreterPool(1) as pool:
        assert await pool.run(tbfuncs.tracebacks_loaded) is False
        await failure(pool, tbfuncs.outer)
        assert await pool.run(tbfuncs.tracebacks_loaded) is True


# -- the synthetic frames themselves --------------------------------------------------


def test_synthetic_frames_do_not_keep_the_callers_stack():
    # A cached frame outlives the exception it was made for: its f_back must
    # not be the stack (and locals) of the code that rebuilt that exception.
    made = _tracebacks._frame(("/no/such/file.py", 30, "fn", "fn", 20, None))
    assert made is not None
    chain = []
    frame = made[0].f_back
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    assert [f.f_code.co_name for f in chain] == ["_run_all"]  # the helper thread's only frame
    assert set(chain[0].f_locals) <= {"release"}


@pytest.mark.parametrize(
    ("first", "positions"),
    [
        (10, (14, 14, 4, 20)),  # a span in a line
        (10, (14, 14, 8, 9)),  # one column: a name
        (10, (14, 14, 8, 10)),  # two
        (10, (14, 16, 12, 3)),  # over three lines
        (10, (10, 10, 12, 30)),  # on the first line, right of where `def _(): (` ends
        (1, (1, 1, 0, 5)),  # on the first line, left of it: no columns
        (10, (14, 14, None, None)),
        (10, None),
    ],
)
def test_synthetic_frame_sits_at_the_line_and_columns(first, positions):
    line = positions[0] if positions else 14
    made = _tracebacks._frame(("/no/such/file.py", line, "fn", "Cls.fn", first, positions))
    assert made is not None
    frame, lasti, lineno = made
    code = frame.f_code
    assert (code.co_filename, code.co_name, code.co_qualname, code.co_firstlineno) == (
        "/no/such/file.py",
        "fn",
        "Cls.fn",
        first,
    )
    assert frame.f_lineno == lineno == line
    assert not frame.f_locals
    exact = (
        positions is not None
        and positions[2] is not None
        and positions[2] >= (10 if line == first else 0)
    )
    if exact:
        assert list(code.co_positions())[lasti // 2] == positions
    else:
        assert lasti == -1  # traceback then shows the line without carets


@pytest.mark.parametrize(
    "frames",
    [
        "not a tuple",
        (("file.py", "seven", "fn", "fn", 1, None),),
        (("file.py", 0, "fn", "fn", 1, None), ("file.py", 3)),
        ((None, 3, "fn", "fn", 1, None),),
    ],
)
def test_bad_frame_data_is_left_out(frames):
    exc = ValueError("x")
    _tracebacks.attach(exc, (frames, None, None, None), exc, None, None)
    assert exc.__traceback__ is None
    rebuilt = _errors.rebuild(("builtins.ValueError", "x", "text", exc, frames))
    assert rebuilt is exc and exc.__traceback__ is None
    assert isinstance(exc.__cause__, asi.ExecutionFailed)
