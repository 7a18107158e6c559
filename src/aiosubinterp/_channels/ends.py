"""Channels: send and receive ends usable from event loops, threads and interpreters.

The channel itself lives in C (aiosubinterp._core, ext/channel.pxi): a FIFO
of encoded items with counts of open ends, shared by every interpreter that
holds an end. This module adds the policy: awaitables, blocking calls,
iteration, errors.

Worker-side module: it is imported inside interpreters when an end crosses
there, so it must not import asyncio at module level; the async methods
import it when first called (they only run where a loop runs).
"""

from __future__ import annotations

import math
import sys

from aiosubinterp import _core, _timeouts
from aiosubinterp._errors import (
    BrokenChannelError,
    ChannelClosedError,
    EndOfChannel,
    WouldBlock,
)

# Not `from typing import ...`: every worker imports this module at start
# (its end of the log channel), and typing (with collections, functools and
# more) cost each new interpreter ~4.6 ms of CPU there (3.13). Annotations
# are strings (postponed evaluation), so these names are for type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Self

    from aiosubinterp._channels.stats import ChannelStatistics

__all__ = ["EndBase", "RecvChannel", "RecvEndBase", "SendChannel", "open_channel", "park"]

_DONE = _core.CHAN_DONE
_END = _core.CHAN_END
_BROKEN = _core.CHAN_BROKEN
_CLOSED = _core.CHAN_CLOSED
_WOULDBLOCK = _core.CHAN_WOULDBLOCK
_TIMEOUT = _core.CHAN_TIMEOUT
_INTERRUPTED = _core.CHAN_INTERRUPTED
_OWN_RECEIVER = _core.CHAN_OWN_RECEIVER

# Loaded on first async use (never inside a worker interpreter).
_aio: Any = None
_hub_mod: Any = None


def _async_env(what: str) -> tuple[Any, Any]:
    """(running loop, its LoopHub); a clear error without a running loop."""
    global _aio, _hub_mod
    if _hub_mod is None:
        import asyncio

        from aiosubinterp._engine import hub as _hub

        _aio, _hub_mod = asyncio, _hub
    try:
        loop = _aio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} needs a running event loop; in synchronous code (a worker "
            "interpreter, a plain thread) use the blocking form (send_sync / recv_sync / "
            "select_sync) instead"
        ) from None
    return loop, _hub_mod.hub_for(loop)


def _check_not_on_loop(what: str, instead: str) -> None:
    aio = sys.modules.get("asyncio")
    if aio is not None and aio._get_running_loop() is not None:
        raise RuntimeError(
            f"{what} blocks, and this thread runs an event loop (it would stall it): "
            f"use `{instead}` in async code instead"
        )


def _deadline(timeout: float | None) -> float:
    """The C core's deadline for a timeout (the one rule: aiosubinterp/_timeouts.py).

    -1 for no limit (None, math.inf, or a timeout too large for any clock).
    """
    limit = _timeouts.optional_seconds(timeout)
    if limit is None:
        return -1.0
    return _core.monotonic() + limit


def _defer_cancel(exc: BaseException) -> None:
    """The operation completed although its task was cancelled: re-arm the cancellation.

    Called while handling the CancelledError: the task's cancel count stays
    the same, and the next await of the task raises CancelledError again.
    """
    task = _aio.current_task()
    if task is not None:
        task.uncancel()
        task.cancel(exc.args[0] if exc.args else None)


def _expire(op: Any, fut: Any, hub: Any) -> None:
    """park()'s timeout: withdraw op if it still waits, and wake its task with CHAN_TIMEOUT."""
    if fut.done():
        return
    if op.cancel():  # still waiting: withdrawn everywhere, nothing taken
        hub.pending.pop(op.token, None)
        fut.set_result(_TIMEOUT)
    # else: committed just now; its completion is on the way and wins.


async def park(
    op: Any, loop: Any, hub: Any, *, keep: bool = False, limit: float | None = None
) -> int:
    """Wait on loop until hub delivers op's completion (a ChannelOp); its status.

    The one asyncio wait of send(), recv() and select(), where their atomicity
    under cancellation is decided (trio's wait_task_rescheduled plays this
    part there). An exception while parked (a cancellation, an interruption)
    withdraws op, and is raised: nothing happened. If op had been committed
    at that moment:
    - keep=False (a receive, a select): its item goes back to the front of
      its channel (op.unget()), and the exception is raised: nothing taken;
    - keep=True (a send): its item has reached a receiver and cannot be
      taken back; a CancelledError is deferred to the task's next await and
      the send's status returned (any other exception is raised).
    limit: seconds after which an op still waiting is withdrawn and
    CHAN_TIMEOUT returned (select()'s timeout).
    """
    fut = loop.create_future()
    op.waiter = fut
    hub.pending[op.token] = op
    timer = loop.call_later(limit, _expire, op, fut, hub) if limit is not None else None
    try:
        status: int = await fut
        return status
    except BaseException as exc:
        hub.pending.pop(op.token, None)
        if op.cancel():
            raise
        if not keep:
            op.unget()
            raise
        if op.status != _DONE or not isinstance(exc, _aio.CancelledError):
            raise
        _defer_cancel(exc)
        return _DONE
    finally:
        if timer is not None:
            timer.cancel()


# What encoding an item can raise (pickle's errors among them); MemoryError
# and our own NotShareableError pass through unchanged.
_ENCODING_ERRORS = (
    TypeError,
    AttributeError,
    ValueError,
    RuntimeError,
    RecursionError,
    LookupError,
    ArithmeticError,
    OSError,
    BufferError,
)


def _encoding_errors() -> tuple[type[BaseException], ...]:
    """_ENCODING_ERRORS, plus pickle's own errors once pickle is loaded (evaluated
    only when a send raised: no pickle import in workers that never pickle)."""
    pickle = sys.modules.get("pickle")
    return _ENCODING_ERRORS + ((pickle.PickleError,) if pickle is not None else ())


def _unshareable(value: object, exc: BaseException) -> BaseException:
    from aiosubinterp._errors import NotShareableError

    if isinstance(exc, NotShareableError):
        return exc
    return NotShareableError(
        f"cannot send a {type(value).__name__} through a channel: {type(exc).__name__}: {exc}. "
        "Items cross by copy (builtin immutables natively, anything else by pickle): send "
        "plain data or a picklable object."
    )


def send_error(end: object, status: int) -> BaseException:
    if status == _CLOSED:
        return ChannelClosedError(
            f"{end!r} is closed: it cannot send any more (use another open send end, or "
            "clone() one before closing)"
        )
    if status == _BROKEN:
        return BrokenChannelError(
            f"cannot send on {end!r}: every receive end of the channel is closed, nobody "
            "can receive this item"
        )
    if status == _WOULDBLOCK:
        return WouldBlock(f"{end!r}: the channel is full (or, unbuffered, has no waiting receiver)")
    if status == _OWN_RECEIVER:
        from aiosubinterp._errors import NotShareableError

        return NotShareableError(
            f"cannot send this item on {end!r}: it holds a receive end of the same channel. "
            "Buffered there, that end would keep the channel open for ever (once the other "
            "receive ends are gone nobody could receive it, and senders would wait instead of "
            "getting BrokenChannelError). Pass the receive end as a task argument or through "
            "another channel (nothing was sent)"
        )
    return RuntimeError(f"aiosubinterp: unexpected channel status {status}; please report this bug")


def recv_error(end: object, status: int, index: int | None = None) -> BaseException:
    if status == _END:
        return EndOfChannel(
            f"{end!r}: every send end is closed and the buffer is drained", index=index
        )
    if status == _CLOSED:
        return ChannelClosedError(f"{end!r} is closed: it cannot receive any more")
    if status == _WOULDBLOCK:
        return WouldBlock(f"{end!r}: no item is ready")
    return RuntimeError(f"aiosubinterp: unexpected channel status {status}; please report this bug")


class EndBase:
    """What every channel end does the same way, whatever carries its operations.

    The ends of this process (_End: the compiled ChannelEnd) and the proxies
    in a ProcessPool worker (aiosubinterp._process.proxies) derive from it.
    A subclass provides close(), ``closed``, ``_channel_id``, ``_clone()``
    (a new end of the same kind, or None when this one is closed) and
    ``_stats()`` (the six counts of statistics(), or None when closed).
    """

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def closed(self) -> bool: ...
        @property
        def _channel_id(self) -> int: ...
        def _clone(self) -> Any: ...
        def _stats(self) -> Any: ...

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close this end, as close(); for ``async with`` and trio-style code.

        Cancellation: closing does not wait; it always happens.
        """
        self.close()

    def clone(self) -> Self:
        """A new, independently closable end of the same kind on the same channel.

        The channel ends (or breaks) only when every clone is closed: give one
        clone to each producer (fan-in) or consumer (fan-out), and close the
        original. Passing an end without clone() shares it: a close() by the
        receiver closes it for everyone.
        """
        end = self._clone()
        if end is None:
            raise ChannelClosedError(f"{self!r} is closed: clone it before closing it")
        assert isinstance(end, type(self))
        return end

    def statistics(self) -> ChannelStatistics:
        """A snapshot: buffered items, open ends, waiting senders and receivers."""
        counts = self._stats()
        if counts is None:
            raise ChannelClosedError(f"{self!r} is closed")
        used, maxsize, senders, receivers, wsend, wrecv = counts
        # Imported here, not at module level: this module is imported in every
        # worker that receives a channel end (the log channel: each worker at
        # start), and dataclasses (with inspect, re and ast) cost ~12 ms there.
        from aiosubinterp._channels.stats import ChannelStatistics

        return ChannelStatistics(
            used, math.inf if maxsize < 0 else maxsize, senders, receivers, wsend, wrecv
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<aiosubinterp.{type(self).__name__} channel={self._channel_id} {state}>"


class RecvEndBase(EndBase):
    """Iteration over a receive end: ``async for`` awaits recv(), ``for`` calls
    recv_sync(); both end at EndOfChannel."""

    __slots__ = ()

    if TYPE_CHECKING:

        async def recv(self) -> Any: ...
        def recv_sync(self, timeout: float | None = None) -> Any: ...

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.recv()
        except EndOfChannel:
            raise StopAsyncIteration from None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        try:
            return self.recv_sync()
        except EndOfChannel:
            raise StopIteration from None


class _End(_core.ChannelEnd, EndBase):
    # ChannelEnd first: its compiled closed, _clone and _stats are the ones used.
    __slots__ = ()

    def close(self) -> None:
        """Close this end (idempotent) for every holder of it. Its clones stay open.

        An end passed to a worker (as an argument, a result or through a
        channel) is the same end, so closing it there closes it here, and
        the other way round. An end whose every copy is dropped without
        close() counts as closed. When the last send end closes, receivers
        drain what is buffered and then get EndOfChannel; when the last
        receive end closes, senders get BrokenChannelError and buffered items
        are dropped.
        """
        self._close()

    def __repr__(self) -> str:
        if not self._valid:
            return f"<aiosubinterp.{type(self).__name__} (not made by open_channel())>"
        return EndBase.__repr__(self)


class SendChannel(_End):
    """The send end of a channel (``open_channel()`` makes one).

    Items cross to the receiver's interpreter as copies (the same rules as
    task arguments); channel ends themselves can be sent.

    Thread-safety: any thread of the interpreter that holds it; the channel
    is shared by every interpreter holding one of its ends. Pass the end
    itself (as a task argument or through a channel) to use it elsewhere:
    the worker gets the same end (see close() and clone()). Plain pickling
    (``pickle.dumps``, ``copy``) raises TypeError: only aiosubinterp's own
    transfers carry an end.
    """

    __slots__ = ()

    async def send(self, value: object) -> None:
        """Send value, waiting while the channel is full (unbuffered: until a receiver takes it).

        Raises:
            ChannelClosedError: this end is closed.
            BrokenChannelError: every receive end is closed.
            NotShareableError: value cannot cross, or holds a receive end of
                this same channel (see open_channel() on cycles of ends).

        Cancellation: atomic. If CancelledError is raised, the item was not
        sent. If the item had already been taken when the cancellation came,
        send() returns normally and the task's next await raises CancelledError.
        """
        loop, hub = _async_env("SendChannel.send()")
        try:
            op = self._send_begin(value, hub.core)
        except _encoding_errors() as exc:
            raise _unshareable(value, exc) from exc
        if op.__class__ is int:
            if op == _DONE:
                return
            raise send_error(self, op)
        status = await park(op, loop, hub, keep=True)
        if status != _DONE:
            raise send_error(self, status)

    def send_nowait(self, value: object) -> None:
        """Send value if that needs no waiting; else raise WouldBlock (nothing sent)."""
        try:
            status = self._send_nowait(value)
        except _encoding_errors() as exc:
            raise _unshareable(value, exc) from exc
        if status != _DONE:
            raise send_error(self, status)

    def send_sync(self, value: object, timeout: float | None = None) -> None:
        """Send value, blocking this thread (its interpreter's GIL released) while needed.

        For synchronous code: worker interpreters, plain threads. Raises
        TimeoutError (nothing sent) when timeout seconds pass, RuntimeError
        on a thread that runs an event loop (``await send()`` there).
        """
        _check_not_on_loop("SendChannel.send_sync()", "await send.send(x)")
        deadline = _deadline(timeout)
        while True:
            # Interrupted: return to bytecode so a task cancellation can fire, then retry.
            try:
                status = self._send_wait(value, deadline)
            except _encoding_errors() as exc:
                raise _unshareable(value, exc) from exc
            if status != _INTERRUPTED:
                break
        if status == _DONE:
            return
        if status == _TIMEOUT:
            raise TimeoutError(f"{self!r}: send_sync() timed out after {timeout} s (nothing sent)")
        raise send_error(self, status)


class RecvChannel(_End, RecvEndBase):
    """The receive end of a channel (``open_channel()`` makes one).

    ``async for x in recv`` in async code, ``for x in recv`` in synchronous
    code; both end when every send end is closed and the buffer is drained.

    Thread-safety: as SendChannel.
    """

    __slots__ = ()

    async def recv(self) -> Any:
        """Receive the next item, waiting until one is sent.

        Raises:
            EndOfChannel: every send end is closed and nothing is buffered.
            ChannelClosedError: this end is closed.

        Cancellation: atomic. If CancelledError is raised, no item was taken:
        an item that was handed over at the same moment goes back to the
        front of the channel.
        """
        status, _, value = self._recv_nowait()
        if status == _DONE:
            return value
        if status != _WOULDBLOCK:
            raise recv_error(self, status)
        loop, hub = _async_env("RecvChannel.recv()")
        op = self._recv_begin(hub.core)
        if op.__class__ is tuple:
            status, _, value = op
            if status == _DONE:
                return value
            raise recv_error(self, status)
        await park(op, loop, hub)
        status, _, value = op.take()
        if status == _DONE:
            return value
        raise recv_error(self, status)

    def recv_nowait(self) -> Any:
        """The next item if one is ready; else raise WouldBlock (or EndOfChannel)."""
        status, _, value = self._recv_nowait()
        if status == _DONE:
            return value
        raise recv_error(self, status)

    def recv_sync(self, timeout: float | None = None) -> Any:
        """Receive the next item, blocking this thread (its interpreter's GIL released).

        For synchronous code: worker interpreters, plain threads. Raises
        TimeoutError (nothing taken) when timeout seconds pass, RuntimeError
        on a thread that runs an event loop (``await recv()`` there).
        """
        _check_not_on_loop("RecvChannel.recv_sync()", "await recv.recv()")
        deadline = _deadline(timeout)
        while True:
            status, _, value = self._recv_wait(deadline)
            if status != _INTERRUPTED:
                break
        if status == _DONE:
            return value
        if status == _TIMEOUT:
            raise TimeoutError(f"{self!r}: recv_sync() timed out after {timeout} s")
        raise recv_error(self, status)


def open_channel(maxsize: float = 0) -> tuple[SendChannel, RecvChannel]:
    """Open a channel; return its (send end, receive end).

    Args:
        maxsize: 0 (default) for a rendezvous channel, where a send completes
            when a receiver takes the item; a positive int for a buffer of
            that many items (send waits while it is full); ``math.inf`` for
            an unbounded buffer.

    The ends work in any interpreter and on any event loop: pass them as
    task arguments or send them through channels.

    Cycles of ends: an end buffered in a channel counts as open for as long
    as it waits there. So a receive end sent into its own channel would keep
    that channel open for ever once every other receive end is gone (nobody
    could receive it, senders would wait instead of getting
    BrokenChannelError, and the buffered items would never be freed); send()
    refuses it with NotShareableError. Longer cycles are not detected: a
    receive end of channel 1 buffered in channel 2 while a receive end of
    channel 2 is buffered in channel 1 keeps both open for ever. Do not
    leave receive ends in channels that only they can drain. A send end in
    its own channel is fine: it goes when the channel's last receive end
    closes (buffered items are dropped then).
    """
    if isinstance(maxsize, bool) or not (
        (isinstance(maxsize, int) and maxsize >= 0) or maxsize == math.inf
    ):
        raise ValueError(f"maxsize must be an int >= 0 or math.inf, got {maxsize!r}")
    send, recv = _core.open_channel_ends(-1 if maxsize == math.inf else maxsize)
    assert isinstance(send, SendChannel) and isinstance(recv, RecvChannel)
    return send, recv
