"""Channel ends inside a ProcessPool worker: proxies served by the parent process.

A channel lives in the memory of the process that opened it. A worker
process gets a proxy for each end passed to it; every operation is a request
over the worker's socket, done by the pool in the parent on a copy of the
real end, so close semantics are the channel's own: the proxy is the same
end, so closing it closes that end for every holder; the proxy dying at the
end of the task drops only its copy (the end counts as closed if that was
the last one).
"""

from __future__ import annotations

import weakref
from typing import Any

from aiosubinterp import _core, _timeouts
from aiosubinterp._channels.ends import EndBase, RecvEndBase, recv_error, send_error
from aiosubinterp._errors import NotShareableError

__all__ = ["ProxyRecvChannel", "ProxySendChannel", "adopt"]

_DONE = _core.CHAN_DONE
_TIMEOUT = _core.CHAN_TIMEOUT
_INTERRUPTED = _core.CHAN_INTERRUPTED


def adopt(key: int, kind: str, channel_id: int) -> _ProxyEnd:
    """Unpickling of an end the pool passed to this worker process."""
    cls = ProxySendChannel if kind == "send" else ProxyRecvChannel
    end = cls(key, channel_id)
    from aiosubinterp._process import worker as _worker

    _worker.state().proxies[key] = weakref.ref(end)
    return end


def _remote_error(info: tuple[Any, ...]) -> BaseException:
    type_name, message = info
    if type_name.endswith(".NotShareableError"):
        return NotShareableError(message)
    return RuntimeError(f"the pool could not do this channel operation: {type_name}: {message}")


class _ProxyEnd(EndBase):
    __slots__ = ("__weakref__", "_channel", "_closed", "_key")

    _kind = ""  # "send" or "recv": what adopt() makes of a clone

    def __init__(self, key: int, channel_id: int) -> None:
        self._key = key
        self._channel = channel_id
        self._closed = False

    def _call(self, op: str, *args: object) -> tuple[Any, Any]:
        from aiosubinterp._process import worker as _worker

        if self._closed and op != "stats":
            return _core.CHAN_CLOSED, None
        status, value = _worker.state().request(op, self._key, *args)
        if status == "error":
            raise _remote_error(value)
        return status, value

    @property
    def closed(self) -> bool:
        """True once this proxy closed its end (a close by another holder shows in operations)."""
        return self._closed

    @property
    def _channel_id(self) -> int:
        return self._channel

    def close(self) -> None:
        """Close this end for every holder (idempotent), as SendChannel.close()."""
        if self._closed:
            return
        self._call("close")
        self._closed = True
        from aiosubinterp._process import worker as _worker

        _worker.state().proxies.pop(self._key, None)

    def _clone(self) -> _ProxyEnd | None:
        status, key = self._call("clone")
        if status != _DONE:
            return None
        return adopt(key, self._kind, self._channel)

    def _stats(self) -> Any:
        return self._call("stats")[1]

    def __reduce__(self) -> tuple[Any, ...]:
        if self._closed:
            raise ValueError(f"cannot send a closed channel end ({self!r})")
        from aiosubinterp._process.wire import parent_end

        return parent_end, (self._key,)


class ProxySendChannel(_ProxyEnd):
    """A SendChannel inside a worker process: the blocking and non-blocking forms.

    ``send_sync``, ``send_nowait``, ``close``, ``clone``, ``statistics``;
    the awaitable ``send`` works in coroutines run by the worker.

    Thread-safety: operations of one worker process are served one at a time.
    """

    __slots__ = ()
    _kind = "send"

    def send_sync(self, value: object, timeout: float | None = None) -> None:
        """Send value, blocking until a receiver has room for it; as SendChannel.send_sync()."""
        status, _ = self._call("send", value, _timeouts.optional_seconds(timeout))
        if status == _DONE:
            return
        if status == _TIMEOUT:
            raise TimeoutError(f"{self!r}: send_sync() timed out after {timeout} s (nothing sent)")
        if status == _INTERRUPTED:
            raise KeyboardInterrupt
        raise send_error(self, status)

    def send_nowait(self, value: object) -> None:
        """Send value if that needs no waiting; else raise WouldBlock (nothing sent)."""
        status, _ = self._call("send_nowait", value)
        if status != _DONE:
            raise send_error(self, status)

    async def send(self, value: object) -> None:
        """Send value from a coroutine in the worker (the worker's loop waits meanwhile).

        Cancellation: as send_sync() when the task is cancelled.
        """
        self.send_sync(value)


class ProxyRecvChannel(_ProxyEnd, RecvEndBase):
    """A RecvChannel inside a worker process: the blocking and non-blocking forms.

    ``recv_sync``, ``recv_nowait``, ``for x in recv``, ``close``, ``clone``,
    ``statistics``; the awaitable ``recv`` works in coroutines run by the worker.

    Thread-safety: operations of one worker process are served one at a time.
    """

    __slots__ = ()
    _kind = "recv"

    def recv_sync(self, timeout: float | None = None) -> Any:
        """Receive the next item, blocking until one is sent; as RecvChannel.recv_sync()."""
        status, value = self._call("recv", _timeouts.optional_seconds(timeout))
        if status == _DONE:
            return value
        if status == _TIMEOUT:
            raise TimeoutError(f"{self!r}: recv_sync() timed out after {timeout} s")
        if status == _INTERRUPTED:
            raise KeyboardInterrupt
        raise recv_error(self, status)

    def recv_nowait(self) -> Any:
        """The next item if one is ready; else raise WouldBlock (or EndOfChannel)."""
        status, value = self._call("recv_nowait")
        if status == _DONE:
            return value
        raise recv_error(self, status)

    async def recv(self) -> Any:
        """Receive from a coroutine in the worker (the worker's loop waits meanwhile).

        Cancellation: as recv_sync() when the task is cancelled.
        """
        return self.recv_sync()
