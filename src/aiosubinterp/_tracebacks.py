"""A worker's frames in the caller's traceback.

Where the exception was raised (a worker interpreter or process), capture()
turns its traceback, and recursively the tracebacks of its ``__cause__``,
``__context__`` and ExceptionGroup members, into plain data (strings and
ints: it crosses by copy). In the caller, attach() gives the rebuilt
exception a real traceback made of those frames, so ``traceback``, pytest's
report, ``pdb.post_mortem()`` and error trackers see the worker's file, line
and function (and read its source line from the file, as for any frame).

A frame cannot be made from data, but one can be made by running code: for
each remote frame a tiny function is compiled whose code object carries the
remote ``co_filename``, ``co_name``, ``co_qualname`` and ``co_firstlineno``
and which fails at the remote line (and, from 3.11's positions, at the same
columns, so the carets under the source line are the worker's). Running it
once, on a short thread of its own (so that the frame's f_back is not the
caller's stack), gives a finished frame; those frames are cached (a finished frame is
never run again, and holds no locals) and linked with
``types.TracebackType(tb_next, tb_frame, tb_lasti, tb_lineno)``.

Frames of our own machinery (aiosubinterp/_inside, the process worker, the
compiled ext/ fragments) are left out, and so are the asyncio frames above
the first frame of the task's code (a coroutine job's event loop).

Both sides: imported lazily, on the error path only, in workers and in main;
it must not import asyncio.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType, FrameType, TracebackType
    from typing import Any

__all__ = ["MAX_EXCEPTIONS", "MAX_FRAMES", "attach", "capture", "format_text"]

MAX_FRAMES = 100  # per exception: the 30 outermost and the 70 innermost of a deeper one
MAX_EXCEPTIONS = 16  # chained exceptions and group members carried, in all (cycles stop too)
_CACHE_SIZE = 1024  # synthetic frames kept for reuse

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_OURS = (os.path.join(_PACKAGE, "_inside") + os.sep,)
_PROCESS_WORKER = os.path.join(_PACKAGE, "_process", "worker.py")
_ASYNCIO = os.path.join(os.path.dirname(os.__file__), "asyncio") + os.sep


def _ours(filename: str) -> bool:
    if filename.startswith(_OURS) or filename == _PROCESS_WORKER:
        return True
    # Cython frames of aiosubinterp._core carry the fragment's path as written
    # in the build ("ext/worker.pxi").
    return (
        filename.endswith((".pxi", ".pyx")) and os.path.basename(os.path.dirname(filename)) == "ext"
    )


# -- where the exception was raised ---------------------------------------------------


def _kept(filenames: "list[str]") -> list[bool]:
    """Which frames to show: not ours, nor the asyncio frames before the task's first."""
    kept = []
    leading = True
    for filename in filenames:
        keep = not (_ours(filename) or (leading and filename.startswith(_ASYNCIO)))
        leading = leading and not keep
        kept.append(keep)
    return kept


def format_text(exc: BaseException) -> str:
    """traceback.format_exception(exc), our own frames left out (in its chain too)."""
    import traceback

    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    todo = [te]
    seen: set[int] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        stack = list(item.stack)
        item.stack = traceback.StackSummary.from_list(
            [
                fs
                for fs, keep in zip(stack, _kept([fs.filename for fs in stack]), strict=True)
                if keep
            ]
        )
        todo.extend(x for x in (item.__cause__, item.__context__) if x is not None)
        todo.extend(item.exceptions or ())
    return "".join(te.format())


def _frames(tb: "TracebackType | None") -> tuple[tuple[object, ...], ...]:
    """(filename, lineno, name, qualname, firstlineno, positions) per frame, outermost first."""
    tbs = []
    while tb is not None:
        tbs.append(tb)
        tb = tb.tb_next
    out: list[tuple[object, ...]] = []
    for tb, keep in zip(tbs, _kept([t.tb_frame.f_code.co_filename for t in tbs]), strict=True):
        if not keep:
            continue
        code = tb.tb_frame.f_code
        positions = None
        if tb.tb_lasti >= 0:
            try:
                for i, pos in enumerate(code.co_positions()):
                    if i == tb.tb_lasti // 2:
                        positions = pos
                        break
            except Exception:  # noqa: BLE001 - a code object without positions
                positions = None
        out.append(
            (
                code.co_filename,
                tb.tb_lineno,
                code.co_name,
                getattr(code, "co_qualname", code.co_name),
                code.co_firstlineno,
                positions,
            )
        )
    if len(out) > MAX_FRAMES:
        out[30 : len(out) - (MAX_FRAMES - 30)] = []
    return tuple(out)


def capture(exc: BaseException, describe: "Any", dumps: "Any") -> tuple[object, ...] | None:
    """Plain data describing exc's frames and chain, or None when it has no traceback.

    describe(exc) -> (type_name, message) and dumps(exc) -> bytes (raises
    when exc cannot be rebuilt elsewhere) come from the caller, so that this
    module imports nothing of ours.

    The result is (frames, cause, context, members): cause and context are
    None or (type_name, message, pickled exception or None, detail), context
    only when it would be shown (no cause, not suppressed); members is None
    or one detail (or None) per member of an ExceptionGroup, in order.
    """
    if exc.__traceback__ is None:
        return None
    budget = [MAX_EXCEPTIONS]
    return _detail(exc, describe, dumps, {id(exc)}, budget)


def _detail(
    exc: BaseException, describe: "Any", dumps: "Any", seen: set[int], budget: list[int]
) -> tuple[object, ...]:
    cause = context = members = None
    if exc.__cause__ is not None:
        cause = _chained(exc.__cause__, describe, dumps, seen, budget)
    elif exc.__context__ is not None and not exc.__suppress_context__:
        context = _chained(exc.__context__, describe, dumps, seen, budget)
    group = getattr(exc, "exceptions", None)
    if isinstance(exc, BaseExceptionGroup) and isinstance(group, tuple):
        items: list[object] = []
        for member in group:
            if budget[0] <= 0 or id(member) in seen:
                items.append(None)
                continue
            budget[0] -= 1
            seen.add(id(member))
            items.append(_detail(member, describe, dumps, seen, budget))
        members = tuple(items)
    return (_frames(exc.__traceback__), cause, context, members)


def _chained(
    exc: BaseException, describe: "Any", dumps: "Any", seen: set[int], budget: list[int]
) -> tuple[object, ...] | None:
    if budget[0] <= 0 or id(exc) in seen:
        return None
    budget[0] -= 1
    seen.add(id(exc))
    type_name, message = describe(exc)
    try:
        data: bytes | None = dumps(exc)
    except Exception:  # noqa: BLE001 - shown as an ExecutionFailed in the caller
        data = None
    return (type_name, message, data, _detail(exc, describe, dumps, seen, budget))


# -- in the caller ----------------------------------------------------------------------


class _Stop(Exception):
    """What a synthetic frame raises to end."""


def _stop() -> None:
    raise _Stop


# The globals of every synthetic frame: nothing but what ends it. An empty
# __builtins__ makes any other name a NameError (the short-span form in _source).
_GLOBALS: dict[str, object] = {"__builtins__": {}, "__name__": "aiosubinterp.remote", "Z": _stop}
_cache: dict[tuple[object, ...], tuple["FrameType", int, int]] = {}


def _source(body_line: int, positions: object) -> tuple[str, bool]:
    """Source of `def _():` on line 1 failing on line body_line, at positions if it can.

    Returns (source, exact): exact when the failing instruction spans the
    given columns (UTF-8 byte offsets: the padding is spaces, one byte each).
    """
    prefix = "def _(): ("
    line = end_line = col = end_col = None
    if isinstance(positions, tuple) and len(positions) == 4:
        line, end_line, col, end_col = positions
    if (
        isinstance(col, int)
        and isinstance(end_col, int)
        and isinstance(end_line, int)
        and isinstance(line, int)
        and col >= 0
        and end_col >= 1
        and end_line >= line
    ):
        rows = end_line - line
        start = col if body_line > 1 else col - len(prefix)
        if start >= 0 and (rows or end_col > col):
            if rows:
                expr = "Z(" + "\n" * rows + " " * (end_col - 1) + ")"
            elif end_col - col >= 3:
                expr = "Z(" + " " * (end_col - col - 3) + ")"
            else:
                expr = "Y" * (end_col - col)  # a name: NameError over exactly these columns
            if body_line == 1:
                return prefix + " " * start + expr + ")", True
            return prefix + "\n" * (body_line - 1) + " " * col + expr + ")", True
    if body_line == 1:
        return prefix + "Z())", False
    return prefix + "\n" * (body_line - 1) + "Z())", False


def _run_all(todo: list[object], done: "Any") -> None:
    """Run each synthetic function of todo, putting its (frame, lasti) in its place (or None).

    The first frame of a thread of its own (_run): the synthetic frames'
    f_back is this frame, which has no f_back and, once it returns, no
    locals but ``release``. Run on the caller's thread, they would keep the
    caller's whole stack (and its locals) alive for as long as they are cached.
    """
    release = done.release
    try:
        for i, function in enumerate(todo):
            todo[i] = None
            try:
                function()  # type: ignore[operator]
            except Exception as exc:  # noqa: BLE001 - _Stop or NameError, by construction
                tb = exc.__traceback__
                if tb is not None and tb.tb_next is not None:
                    todo[i] = (tb.tb_next.tb_frame, tb.tb_next.tb_lasti)
                del exc, tb
        del i, function
    finally:
        del todo, done
        release()


def _run(functions: list[object]) -> list[object]:
    """_run_all(functions) on a new thread, waited for; the list it filled."""
    import _thread

    done = _thread.allocate_lock()
    done.acquire()
    todo = list(functions)
    try:
        _thread.start_new_thread(_run_all, (todo, done))
    except RuntimeError:  # no new thread (interpreter shutdown): no frames
        return [None] * len(functions)
    done.acquire()
    return todo


def _function(entry: tuple[object, ...]) -> tuple["Any", bool] | None:
    """(synthetic function, exact columns) standing for one remote frame, or None."""
    filename, lineno, name, qualname, firstlineno, positions = entry
    if not (
        isinstance(filename, str)
        and isinstance(name, str)
        and isinstance(lineno, int)
        and isinstance(firstlineno, int)
        and lineno > 0
    ):
        return None
    if not isinstance(qualname, str):
        qualname = name
    if not 0 < firstlineno <= lineno:
        firstlineno = lineno
    source, exact = _source(lineno - firstlineno + 1, positions)
    try:
        module = compile(source, filename, "exec", dont_inherit=True)
        code: CodeType = next(c for c in module.co_consts if isinstance(c, type(module)))
        code = code.replace(co_name=name, co_qualname=qualname, co_firstlineno=firstlineno)
        return type(_stop)(code, _GLOBALS, name), exact  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - e.g. a name compile() refuses: leave the frame out
        return None


def _frames_for(entries: list[tuple[object, ...]]) -> list[tuple["FrameType", int, int] | None]:
    """(frame, lasti, lineno) per entry (None where it cannot be made), cached."""
    out = [_cache.get(entry) for entry in entries]
    missing = [i for i, made in enumerate(out) if made is None]
    if not missing:
        return out
    made_functions = [(i, _function(entries[i])) for i in missing]
    todo = [(i, f) for i, f in made_functions if f is not None]
    results = _run([f[0] for _, f in todo]) if todo else []
    for (i, (function, exact)), result in zip(todo, results, strict=True):
        if not isinstance(result, tuple):
            continue
        frame, lasti = result
        lineno = entries[i][1]
        if frame.f_code is not function.__code__ or not isinstance(lineno, int):
            continue
        made = (frame, lasti if exact else -1, lineno)
        if len(_cache) >= _CACHE_SIZE:
            del _cache[next(iter(_cache))]  # the oldest
        _cache[entries[i]] = made
        out[i] = made
    return out


def _frame(entry: tuple[object, ...]) -> tuple["FrameType", int, int] | None:
    """(frame, lasti, lineno) standing for one remote frame, or None if it cannot be made."""
    return _frames_for([entry])[0]


def _traceback(frames: object) -> "TracebackType | None":
    from types import TracebackType

    if not isinstance(frames, tuple):
        return None
    entries: list[tuple[object, ...]] = [e for e in frames if isinstance(e, tuple) and len(e) == 6]
    tb = None
    for made in reversed(_frames_for(entries)):
        if made is not None:
            frame, lasti, lineno = made
            tb = TracebackType(tb, frame, lasti, lineno)
    return tb


def attach(
    exc: BaseException, detail: object, chain_on: BaseException, loads: "Any", fallback: "Any"
) -> None:
    """Give exc the remote frames of detail (see capture), and chain_on its remote chain.

    chain_on is exc itself, or the ExecutionFailed that exc's ``__cause__``
    already is (the text form): the remote cause or context then hang below
    it. loads(bytes) rebuilds a chained exception; fallback(type_name,
    message) makes one when that fails.
    """
    if not (isinstance(detail, tuple) and len(detail) == 4):
        return
    frames, cause, context, members = detail
    tb = _traceback(frames)
    if tb is not None:
        exc.__traceback__ = tb
    if cause is not None:
        rebuilt = _rebuild(cause, loads, fallback)
        if rebuilt is not None:
            chain_on.__cause__ = rebuilt
    elif context is not None:
        rebuilt = _rebuild(context, loads, fallback)
        if rebuilt is not None:
            chain_on.__context__ = rebuilt
    group = getattr(exc, "exceptions", None)
    if (
        isinstance(members, tuple)
        and isinstance(exc, BaseExceptionGroup)
        and isinstance(group, tuple)
        and len(group) == len(members)
    ):
        for member, member_detail in zip(group, members, strict=True):
            if isinstance(member, BaseException) and member_detail is not None:
                attach(member, member_detail, member, loads, fallback)


def _rebuild(node: object, loads: "Any", fallback: "Any") -> BaseException | None:
    if not (isinstance(node, tuple) and len(node) == 4):
        return None
    type_name, message, data, detail = node
    exc = None
    if isinstance(data, (bytes, bytearray)):
        try:
            exc = loads(data)
        except Exception:  # noqa: BLE001 - shown as an ExecutionFailed
            exc = None
    if not isinstance(exc, BaseException):
        exc = fallback(type_name, message)
    attach(exc, detail, exc, loads, fallback)
    return exc
