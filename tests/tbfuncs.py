"""Worker functions for tests/test_remote_tracebacks.py: they fail inside workers.

Imported inside workers: no asyncio at module level. Tests find lines by
their text (line_of), so editing this file does not break them.
"""

from __future__ import annotations

import sys


class NeedsTwo(Exception):
    def __init__(self, a: object, b: object) -> None:  # pickles badly: cannot be rebuilt
        super().__init__(f"{a} and {b}")


def line_of(text: str) -> int:
    """The number of the line of this file that contains text (exactly once)."""
    with open(__file__, encoding="utf-8") as f:
        found = [n for n, line in enumerate(f, 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def _inner(table: dict[str, object]) -> object:
    return table["missing"]  # inner lookup fails


def outer() -> object:
    return _inner({})  # outer calls inner


def nested_subscript() -> object:
    table: dict[str, dict[str, int]] = {"a": {}}
    return table["a"]["b"] + 1  # fails in the middle of the line


def raise_from() -> None:
    try:
        outer()  # the cause starts here
    except KeyError as exc:
        raise ValueError("while looking up") from exc  # explicit cause


def raise_during() -> None:
    try:
        outer()
    except KeyError:
        raise RuntimeError("while handling")  # implicit context  # noqa: B904


def raise_from_none() -> None:
    try:
        outer()
    except KeyError:
        raise ValueError("no context") from None


def raise_group() -> None:
    errors = []
    for fn in (outer, nested_subscript):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    raise ExceptionGroup("two failed", errors)


def raise_unrebuildable() -> None:
    raise NeedsTwo(1, 2)  # never rebuilt in the caller


def long_chain(n: int) -> None:
    try:
        if n:
            long_chain(n - 1)
        else:
            raise KeyError(0)
    except KeyError as exc:
        raise KeyError(n) from exc


def recurse(n: int) -> int:
    return recurse(n + 1) + 1  # recursion


async def async_inner() -> None:
    raise LookupError("in a coroutine")  # raised by a coroutine


async def async_outer() -> None:
    await async_inner()


def tracebacks_loaded() -> bool:
    """Whether this worker loaded the error path's module."""
    return "aiosubinterp._tracebacks" in sys.modules
