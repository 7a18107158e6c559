"""What runs inside a ProcessPool's worker process: setup, the job loop, cancellation.

A worker is a fresh Python process (started like multiprocessing's "spawn")
connected to its pool by a Unix socket, plus a pipe on which the pool writes
the ids of tasks to cancel before it sends SIGINT. The SIGINT handler raises
KeyboardInterrupt in the running task only if that task's id was written:
a late signal (the task already finished) or a Ctrl-C meant for the parent
does nothing here.

With forward_logging, the worker's records, warnings and (while main's
sys.stdout/sys.stderr are replaced) output go to the pool as LOG frames:
the interpreter workers' Forwarder (aiosubinterp._inside.logs) makes the
same tuples, and _LogSend writes them on the socket, in order with the
task's RESULT. The socket is the bound: a worker that logs faster than main
handles waits (nothing is dropped).
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
import sys
import threading
import types

from aiosubinterp import _core
from aiosubinterp._errors import NotShareableError
from aiosubinterp._inside import marshal as _marshal
from aiosubinterp._process import wire as _wire
from aiosubinterp._process.wire import (
    ABORT,
    FAILED,
    JOB,
    LOG,
    READY,
    REPLY,
    REQUEST,
    RESULT,
    SETTINGS,
    SETUP,
    STOP,
    Reader,
    send_frame,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["main"]

# The status of a RESULT frame: the same codes the interpreter backend's
# completions carry, so the pool hands them to Task._deliver unchanged.
OK = _core.STATUS_OK
ERROR = _core.STATUS_ERROR
CANCELLED = _core.STATUS_CANCELLED


class _State:
    """This process's connection to its pool (one per process)."""

    def __init__(self, sock: socket.socket, ctl_fd: int) -> None:
        self.sock = sock
        self.reader = Reader(sock)
        self.ctl_fd = ctl_fd
        self.current = 0  # id of the task running now (0: idle)
        self.requested: set[int] = set()  # task ids the pool asked to cancel
        self.shielded = False  # writing a frame: an interruption waits until it is out
        self.deferred = False
        self.loop = None  # asyncio loop for coroutine jobs, made on first use
        self.aio_task = None
        self.in_request = False  # waiting for the pool to finish a channel operation
        self.in_select = False  # ...and blocked in the select() of that wait
        self.resolver = _marshal.Resolver(None, process=True)  # made again at SETUP
        self.next_request = 0
        self.proxies: dict[int, object] = {}  # key -> weakref of the channel-end proxy here
        self.wlock = threading.Lock()  # one frame at a time (log records from any thread)
        self.logs: Any = None  # _inside.logs.Forwarder, with forward_logging

    # -- cancellation ---------------------------------------------------------------

    def _read_requests(self) -> None:
        while True:
            try:
                data = os.read(self.ctl_fd, 8 * 64)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            for i in range(0, len(data) - len(data) % 8, 8):
                self.requested.add(int.from_bytes(data[i : i + 8], "little"))

    def on_sigint(self, signum: int, frame: object) -> None:
        self._read_requests()
        if not self.current or self.current not in self.requested:
            return  # not for the running task (late, or a Ctrl-C meant for the parent)
        task = self.aio_task
        if task is not None and not self.in_request:
            self.loop.call_soon_threadsafe(task.cancel)  # type: ignore[attr-defined]
            return
        if self.shielded or (self.in_request and not self.in_select):
            # Writing a frame, or between a channel request and the wait for
            # its reply: raising here would leave the pool's side of the
            # request waiting forever. The wait sees it and aborts the request.
            self.deferred = True
            return
        raise KeyboardInterrupt

    def cancel_requested(self, tid: int) -> bool:
        self._read_requests()
        return tid in self.requested

    def forget(self, tid: int) -> None:
        self.requested.discard(tid)
        if len(self.requested) > 256:
            # Requests that arrived after their task ended: ids only grow, drop older ones.
            self.requested = {t for t in self.requested if t > tid}

    # -- frames -------------------------------------------------------------------

    def send(self, kind: int, ident: int, body: bytes = b"", fds: list[int] | None = None) -> None:
        """Write a whole frame; an interruption meanwhile is raised once it is written."""
        self.shielded = True
        try:
            with self.wlock:
                send_frame(self.sock, kind, ident, body, fds or ())
        finally:
            self.shielded = False
            if fds:
                _wire.close_fds(fds)
        if self.deferred and not self.in_request:  # a request's wait raises it instead
            self.deferred = False
            raise KeyboardInterrupt

    def decode(self, body: bytes | bytearray, fds: list[int]) -> object:
        return _wire.decode(body, fds, main=self.resolver.main_module)

    def encode(self, obj: object) -> tuple[bytes, list[int]]:
        return _wire.encode(obj, _end_reduction)

    # -- functions ------------------------------------------------------------------

    def call(self, payload: tuple[Any, ...], task: bool = True) -> object:
        if len(payload) > 4:
            # context_vars: in a copy of this context, as in interpreter workers.
            import contextvars

            return contextvars.copy_context().run(self._call_in, payload, task)
        fn, args, kw, _ = self.resolver.call(payload)
        if task and self.logs is not None and self.logs.pending:
            self.logs.maybe_install()  # the task's module may have imported logging just now
        result = fn(*args, **kw) if kw else fn(*args)
        if type(result) is types.CoroutineType:
            return self.run_coroutine(result)
        return result

    def _call_in(self, payload: tuple[Any, ...], task: bool) -> object:
        for module, name, value in payload[4]:
            self.resolver.context_var(module, name).set(value)
        return self.call(payload[:4], task)

    def run_coroutine(self, coro: types.CoroutineType[Any, Any, Any]) -> object:
        import asyncio

        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        task = self.aio_task = self.loop.create_task(coro)
        try:
            self.loop.run_until_complete(task)
        except asyncio.CancelledError:
            if task.cancelled() and self.cancel_requested(self.current):
                raise KeyboardInterrupt from None
            raise
        finally:
            self.aio_task = None
        return task.result()

    # -- the job loop ---------------------------------------------------------------

    def run_job(self, tid: int, body: bytes | bytearray, fds: list[int]) -> None:
        status, value = OK, None
        try:
            if self.cancel_requested(tid):
                _wire.close_fds(fds)
                raise KeyboardInterrupt
            value = self.decode_and_call(tid, body, fds)
        except KeyboardInterrupt as exc:
            self.current = 0
            if self.cancel_requested(tid):
                status, value = CANCELLED, None
            else:
                status, value = ERROR, _describe(exc)
        except BaseException as exc:  # noqa: BLE001 - sent to the awaiter
            self.current = 0
            status, value = ERROR, _describe(exc)
        self.forget(tid)
        released = self.released()
        try:
            out, out_fds = self.encode((status, value, released))
        except Exception as exc:  # noqa: BLE001 - an unsendable result
            err = NotShareableError(
                f"the task returned a {type(value).__name__}, which cannot be sent back to the "
                f"caller: {type(exc).__name__}: {exc}. Return plain data (or a picklable object)."
            )
            out, out_fds = self.encode((ERROR, _describe(err), released))
        self.send(RESULT, tid, out, out_fds)

    def decode_and_call(self, tid: int, body: bytes | bytearray, fds: list[int]) -> object:
        # A function of its own, so that the arguments (channel-end proxies among
        # them) are gone once it returns: released() then sees the ones the task dropped.
        payload = self.decode(body, fds)
        self.current = tid
        # Forwarded records carry the task's id (task_id), as in interpreter workers.
        var = token = None
        if self.logs is not None and self.logs.forwarding:
            from aiosubinterp._inside.worker import load_contextvars

            var = load_contextvars()
            token = var.set(tid)
        try:
            return self.call(payload)  # type: ignore[arg-type]
        finally:
            self.current = 0
            if var is not None:
                var.reset(token)

    def released(self) -> tuple[int, ...]:
        """Keys of channel-end proxies that died in this task without being closed."""
        if not self.proxies:
            return ()
        dead = tuple(k for k, ref in self.proxies.items() if ref() is None)  # type: ignore[operator]
        for k in dead:
            del self.proxies[k]
        return dead

    def request(self, op: str, key: int, *args: object) -> tuple[Any, Any]:
        """Ask the pool to do a channel operation for this process; returns (status, value)."""
        self.next_request += 1
        rid = self.next_request
        body, fds = self.encode((op, key, args))
        # From the REQUEST on, an interruption is deferred to _await_reply,
        # which aborts the request: the pool's side never waits for nobody.
        self.in_request = True
        try:
            self.send(REQUEST, rid, body, fds)
            return self._await_reply(rid)
        finally:
            self.in_request = False

    def _await_reply(self, rid: int) -> object:
        import select

        interrupted = False
        try:
            self.in_select = True  # the only interruptible part of the wait
            if not self.deferred and not self.reader.pending():
                select.select([self.sock], [], [])
            self.in_select = False
        except KeyboardInterrupt:
            self.in_select = False
            interrupted = True
        if self.deferred:  # interrupted before the wait began
            self.deferred = False
            interrupted = True
        self.shielded = True
        try:
            if interrupted:
                # Cancelled while waiting: the pool withdraws the operation (or it
                # already completed); either way its answer comes, then we stop.
                with self.wlock:
                    send_frame(self.sock, ABORT, rid)
            kind, ident, body, fds = self.reader.read()
        finally:
            self.shielded = False
        if kind != REPLY or ident != rid:
            _wire.close_fds(fds)
            raise RuntimeError(f"aiosubinterp: unexpected message {kind} from the pool")
        reply = self.decode(body, fds)
        if interrupted or self.deferred:
            self.deferred = False
            raise KeyboardInterrupt
        return reply


class _LogSend:
    """The Forwarder's "send end" in a worker process: LOG frames on the pool's socket.

    Answers as a channel end's _send_nowait does (CHAN_DONE; CHAN_CLOSED once
    the pool is gone). It never answers CHAN_WOULDBLOCK: a full socket makes
    the sender wait until main has read, so nothing is dropped.

    Thread-safety: any thread of the worker; frames are whole (the state's wlock).
    """

    def __init__(self, st: _State) -> None:
        self._st = st
        self._closed = False

    def _send_nowait(self, item: tuple[Any, ...]) -> int:
        if self._closed:
            return _core.CHAN_CLOSED
        body = pickle.dumps(item, protocol=5)  # builtins only: no fd, no channel end
        st = self._st
        try:
            if threading.current_thread() is threading.main_thread():
                st.send(LOG, 0, body)  # a cancellation meanwhile waits until it is out
            else:
                with st.wlock:
                    send_frame(st.sock, LOG, 0, body)
        except OSError:
            self._closed = True
            return _core.CHAN_CLOSED
        return _core.CHAN_DONE

    def _send_wait(self, item: tuple[Any, ...], timeout: float) -> int:
        return self._send_nowait(item)

    def close(self) -> None:
        self._closed = True


_state: _State | None = None


def state() -> _State:
    if _state is None:
        raise RuntimeError("this is not a worker process of an aiosubinterp.ProcessPool")
    return _state


def _end_reduction(end: object) -> tuple[Any, ...]:
    raise NotShareableError(
        f"cannot send {end!r} out of this worker process: it belongs to a channel opened "
        "here. Open channels in the parent and pass their ends to the tasks instead."
    )


def _describe(exc: BaseException) -> tuple[Any, ...]:
    """(type_name, message, traceback, pickled exception or None, frames)."""
    type_name, message, tb_text, carried, frames = _marshal.describe_exception(exc)
    data = None
    if carried is not None:
        try:
            data = _marshal.dumps(carried.exc)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            data = None
    return (type_name, message, tb_text, data, frames)


def _apply_settings(settings: tuple[Any, ...]) -> None:
    """(sys.path[, output bits]): output as in _inside.logs.Forwarder.set_output."""
    sys.path[:] = settings[0]
    if len(settings) > 1 and _state is not None and _state.logs is not None:
        _state.logs.set_output(settings[1])


def main(sock_fd: int, ctl_fd: int) -> None:
    """Serve jobs until the pool says STOP or goes away."""
    global _state
    sock = socket.socket(fileno=sock_fd)
    os.set_blocking(ctl_fd, False)
    st = _state = _State(sock, ctl_fd)
    signal.signal(signal.SIGINT, st.on_sigint)
    try:
        kind, _, body, fds = st.reader.read()
        if kind != SETUP:
            raise RuntimeError(f"aiosubinterp: expected the set-up message, got {kind}")
        setup: Any = st.decode(body, fds)
        main_ref, preload, init_payload, settings = setup[:4]
        levels = setup[4] if len(setup) > 4 else None
        st.resolver = _marshal.Resolver(main_ref, process=True)
        st.resolver.install()
        if levels is not None:
            from aiosubinterp._inside.logs import Forwarder

            st.logs = Forwarder((_LogSend(st), *levels))
            # Imported now (~2 ms of a process start that takes tens): the
            # handler is then in place before the first job, also for a task
            # that imports logging itself for the first time.
            import logging  # noqa: F401
        _apply_settings(settings)
        for name in preload:
            importlib.import_module(name)
        if init_payload is not None:
            st.call(init_payload, task=False)
        if st.logs is not None:
            # After the initializer: logging (or warnings) it configured is kept.
            st.logs.maybe_install()
            st.logs.install_warnings()
    except EOFError:
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the pool
        out, out_fds = st.encode(_describe(exc))
        send_frame(sock, FAILED, 0, out, out_fds)
        return
    send_frame(sock, READY, os.getpid())
    try:
        _serve(st)
    finally:
        if st.logs is not None:
            st.logs.shutdown()  # the last partial line of output; the worker's own streams


def _serve(st: _State) -> None:
    while True:
        try:
            kind, ident, body, fds = st.reader.read()
        except (EOFError, OSError):
            return
        except KeyboardInterrupt:
            continue
        if kind == JOB:
            st.run_job(ident, body, fds)
        elif kind == SETTINGS:
            _apply_settings(st.decode(body, fds))  # type: ignore[arg-type]
        elif kind == STOP:
            return
        else:
            _wire.close_fds(fds)


def bootstrap_source(path: list[str], sock_fd: int, ctl_fd: int) -> str:
    """The -c program of a worker process."""
    return (
        f"import sys; sys.path[:] = {path!r}\n"
        "from aiosubinterp._process import worker as _worker\n"
        f"_worker.main({sock_fd}, {ctl_fd})\n"
    )
