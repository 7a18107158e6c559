"""Channel ends on behalf of worker processes: ProcessPool's end service.

A channel end sent to a worker process stays here; the worker gets a proxy
(aiosubinterp._process.proxies) whose operations come back as REQUEST
frames. This mixin keeps those ends, answers the requests (waiting ones on a
loop thread of its own) and drops the ends when the worker no longer holds
them. ProcessPool provides ``_lock`` and calls ``_init_ends()``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiosubinterp import _core
from aiosubinterp._errors import (
    BrokenChannelError,
    ChannelClosedError,
    EndOfChannel,
    NotShareableError,
)
from aiosubinterp._process import wire as _wire
from aiosubinterp._process.wire import REPLY

if TYPE_CHECKING:
    from aiosubinterp._process.pool import _Proc

__all__ = ["EndService"]

_DONE = _core.CHAN_DONE


class EndService:
    """Channel ends that worker processes hold proxies of, and the requests they send."""

    _lock: threading.Lock

    def _init_ends(self) -> None:
        # key -> our own end (the same end the worker's proxy stands for)
        self._ends: dict[int, _core.ChannelEnd] = {}
        self._end_keys = itertools.count(1)
        self._chan_loop: asyncio.AbstractEventLoop | None = None
        self._chan_thread: threading.Thread | None = None

    def _refuse_end(self, end: object) -> tuple[Any, ...]:
        raise NotShareableError(f"cannot send {end!r} here: pass channel ends as task arguments")

    def _share_end(self, end: _core.ChannelEnd, keys: list[int] | set[int]) -> tuple[Any, ...]:
        """Keep a copy of end (the same end) for a worker process; the worker gets a proxy of it."""
        clone = end._share()
        if clone is None:
            raise NotShareableError(
                f"cannot send a closed channel end ({end!r}) to a worker process: send an open "
                "end, or clone() it before closing"
            )
        key = next(self._end_keys)
        with self._lock:
            self._ends[key] = clone
            if isinstance(keys, set):
                keys.add(key)
            else:
                keys.append(key)
        from aiosubinterp._process import proxies as _proxies

        kind = "send" if isinstance(end, _send_type()) else "recv"
        return _proxies.adopt, (key, kind, end._channel_id)

    def _end_for(self, proc: _Proc) -> Callable[[int], object]:
        def resolve(key: int) -> object:
            copy = self._copy_of(key)  # the same end the worker passed, not a clone
            if copy is None:
                raise ChannelClosedError(
                    "a channel end sent by a worker process was closed meanwhile"
                )
            return copy

        return resolve

    def _copy_of(self, key: int) -> Any:
        """A copy of the kept end `key` for one use (None if gone or closed).

        The kept ends are touched only under the lock, so _close_key can drop
        its copy at once with _release(): on a free-threaded build the end
        must not wait for a collection that another thread would run later.
        """
        with self._lock:
            kept = self._ends.get(key)
            return kept._share() if kept is not None else None

    def _close_key(self, key: int, proc: _Proc | None = None, close: bool = False) -> None:
        """Drop our copy of a worker's end; close=True closes the end for every holder."""
        with self._lock:
            end = self._ends.pop(key, None)
            if proc is not None:
                proc.keys.discard(key)
        if end is not None:
            if close:
                end._close()
            end._release()  # now, on this thread (see _copy_of)

    def _on_request(self, proc: _Proc, rid: int, body: bytes | bytearray, fds: list[int]) -> None:
        try:
            op, key, args = _wire.decode(body, fds, on_end=self._end_for(proc))
        except Exception as exc:  # noqa: BLE001 - the worker raises it
            self._reply(proc, rid, ("error", _error_info_plain(exc)))
            return
        if op == "close":
            self._close_key(key, proc, close=True)
            self._reply(proc, rid, (_DONE, None))
            return
        if op == "stats":  # of a closed end too, as a local end gives them
            with self._lock:
                kept = self._ends.get(key)
                stats = kept._stats() if kept is not None else None
            self._reply(
                proc, rid, (_DONE, stats) if stats is not None else (_core.CHAN_CLOSED, None)
            )
            return
        # This request's own copy, released when it is done (_copy_of).
        end = self._copy_of(key)
        if end is None:
            self._reply(proc, rid, (_core.CHAN_CLOSED, None))
            return
        if op in ("send", "recv"):
            loop = self._channel_loop()
            fut = asyncio.run_coroutine_threadsafe(self._wait_op(proc, rid, end, op, args), loop)
            proc.requests[rid] = fut
            return
        try:
            if op == "send_nowait":
                result: tuple[Any, ...] = (end._send_nowait(args[0]), None)
            elif op == "recv_nowait":
                status, _, value = end._recv_nowait()
                result = (status, value)
            elif op == "clone":
                clone = end._clone()
                if clone is None:
                    result = (_core.CHAN_CLOSED, None)
                else:
                    new_key = next(self._end_keys)
                    with self._lock:
                        self._ends[new_key] = clone
                        proc.keys.add(new_key)
                    result = (_DONE, new_key)
            else:
                unknown = ValueError(f"unknown channel operation {op!r}")
                result = ("error", _error_info_plain(unknown))
        except Exception as exc:  # noqa: BLE001 - the worker raises it
            result = ("error", _error_info_plain(exc))
        finally:
            end._release()
        self._reply(proc, rid, result)

    async def _wait_op(
        self, proc: _Proc, rid: int, end: Any, op: str, args: tuple[Any, ...]
    ) -> None:
        timeout = args[-1]
        try:
            async with asyncio.timeout(timeout):
                if op == "send":
                    await end.send(args[0])
                    result: tuple[Any, ...] = (_DONE, None)
                else:
                    result = (_DONE, await end.recv())
        except TimeoutError:
            result = (_core.CHAN_TIMEOUT, None)
        except asyncio.CancelledError:
            result = (_core.CHAN_INTERRUPTED, None)  # the worker's task was cancelled
        except EndOfChannel:
            result = (_core.CHAN_END, None)
        except ChannelClosedError:
            result = (_core.CHAN_CLOSED, None)
        except BrokenChannelError:
            result = (_core.CHAN_BROKEN, None)
        except Exception as exc:  # noqa: BLE001 - the worker raises it
            result = ("error", _error_info_plain(exc))
        finally:
            end._release()
        proc.requests.pop(rid, None)
        self._reply(proc, rid, result)

    def _reply(self, proc: _Proc, rid: int, result: tuple[Any, ...]) -> None:
        try:
            body, fds = _wire.encode(result, lambda end: self._share_end(end, proc.keys))
        except Exception as exc:  # noqa: BLE001 - an item that cannot go to a process
            body, fds = _wire.encode(("error", _error_info_plain(exc)), self._refuse_end)
        proc.write(REPLY, rid, body, fds)
        _wire.close_fds(fds)

    def _channel_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop that waits in channel operations for workers (started on first use)."""
        with self._lock:
            if self._chan_loop is not None:
                return self._chan_loop
            loop = self._chan_loop = asyncio.new_event_loop()
            thread = self._chan_thread = threading.Thread(
                target=_run_loop, args=(loop,), daemon=True, name="aiosubinterp-process-channels"
            )
        thread.start()
        return loop

    def _stop_chan_loop(self) -> None:
        with self._lock:
            loop, thread = self._chan_loop, self._chan_thread
            self._chan_loop = self._chan_thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


def _send_type() -> type:
    from aiosubinterp._channels.ends import SendChannel

    return SendChannel


def _error_info_plain(exc: BaseException) -> tuple[Any, ...]:
    """An error for a worker: (type name, message), rebuilt there as RuntimeError if unknown."""
    return (f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
