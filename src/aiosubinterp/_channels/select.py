"""select(): wait for the first of several receive ends, take exactly one item.

Worker-side module (select_sync runs in interpreters): no asyncio at module level.
"""

from __future__ import annotations

from typing import Any

from aiosubinterp import _core, _timeouts
from aiosubinterp._channels import ends as _ends
from aiosubinterp._channels.ends import RecvChannel, recv_error

__all__ = ["select", "select_sync"]

_DONE = _core.CHAN_DONE
_WOULDBLOCK = _core.CHAN_WOULDBLOCK
_TIMEOUT = _core.CHAN_TIMEOUT
_INTERRUPTED = _core.CHAN_INTERRUPTED


def _ends_of(receivers: tuple[Any, ...]) -> tuple[Any, ...]:
    if not receivers:
        raise TypeError("select() needs at least one receive end")
    for end in receivers:
        if not isinstance(end, RecvChannel):
            raise TypeError(f"select() takes receive ends (RecvChannel), got {type(end).__name__}")
    return receivers


def _outcome(ends: tuple[Any, ...], status: int, index: int, value: Any) -> tuple[int, Any]:
    if status == _DONE:
        return index, value
    raise recv_error(ends[index], status, index)


async def select(
    *receivers: RecvChannel,
    timeout: float | None = None,  # noqa: ASYNC109 - the public API has its own deadline
) -> tuple[int, Any]:
    """Receive from whichever of the receive ends has an item first.

    Returns ``(index, value)``: the position of the end in the arguments and
    the item. Exactly one item is taken; the other ends are left unchanged.
    When several are ready, the first one looked at wins, and the order
    rotates between calls so no end starves.

    Raises:
        EndOfChannel: one of the channels ended (its ``index`` attribute says
            which); drop that end and select again over the others.
        ChannelClosedError: one of the given ends is closed.
        TimeoutError: timeout seconds passed with nothing received.

    Cancellation: atomic, as RecvChannel.recv(): a cancelled select took no
    item (one handed over at the same moment goes back to its channel).
    """
    ends = _ends_of(receivers)
    limit = _timeouts.optional_seconds(timeout)
    status, index, value = _core.select_nowait(ends)
    if status != _WOULDBLOCK:
        return _outcome(ends, status, index, value)
    if limit is not None and limit <= 0:
        raise TimeoutError("select(): nothing was ready (timeout=0)")
    loop, hub = _ends._async_env("aiosubinterp.select()")
    op = _core.select_begin(ends, hub.core)
    if op.__class__ is tuple:
        return _outcome(ends, *op)
    status = await _ends.park(op, loop, hub, limit=limit)
    if status == _TIMEOUT:
        raise TimeoutError(f"select(): nothing received within {timeout} s")
    return _outcome(ends, *op.take())


def select_sync(*receivers: RecvChannel, timeout: float | None = None) -> tuple[int, Any]:
    """Blocking select() for synchronous code (worker interpreters, plain threads).

    Same result and errors as select(); the interpreter's GIL is released
    while waiting. Raises RuntimeError on a thread that runs an event loop.
    """
    ends = _ends_of(receivers)
    _ends._check_not_on_loop("aiosubinterp.select_sync()", "await aiosubinterp.select(...)")
    deadline = _ends._deadline(timeout)
    while True:
        status, index, value = _core.select_wait(ends, deadline)
        if status != _INTERRUPTED:
            break
    if status == _TIMEOUT:
        raise TimeoutError(f"select_sync(): nothing received within {timeout} s")
    return _outcome(ends, status, index, value)
