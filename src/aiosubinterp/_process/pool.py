"""ProcessPool: InterpreterPool's API on worker processes (for modules refusing interpreters)."""

from __future__ import annotations

import collections
import concurrent.futures
import contextvars
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from aiosubinterp import _core
from aiosubinterp._engine import admin as _admin
from aiosubinterp._engine import context as _context
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine import jobs as _jobs
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine import logs as _logs
from aiosubinterp._engine.task import Task
from aiosubinterp._errors import (
    PoolClosedError,
    WorkerCrashedError,
    rebuild,
)
from aiosubinterp._inside import marshal as _marshal
from aiosubinterp._process import endservice as _endservice
from aiosubinterp._process import wire as _wire
from aiosubinterp._process.wire import (
    ABORT,
    FAILED,
    JOB,
    LOG,
    READY,
    REQUEST,
    RESULT,
    SETTINGS,
    SETUP,
    STOP,
    Reader,
    send_frame,
)
from aiosubinterp._process.worker import bootstrap_source

__all__ = ["ProcessPool"]

# Payloads this large are written to the worker by a helper thread, not the loop's.
_BIG_PAYLOAD = 1 << 20


class _Job:
    __slots__ = ("fds", "hub", "keys", "payload", "proc", "task", "tid")

    def __init__(
        self,
        tid: int,
        payload: bytes,
        fds: list[int],
        keys: list[int],
        task: Task,
        hub: _hub.LoopHub,
    ) -> None:
        self.tid = tid
        self.payload = payload
        self.fds = fds
        self.keys = keys
        self.task = task
        self.hub = hub  # the submitting loop's: the result goes back through it
        self.proc: _Proc | None = None


class _Proc:
    """One worker process, as its pool sees it."""

    _serials = itertools.count(1)

    def __init__(self, popen: subprocess.Popen[bytes], sock: socket.socket, ctl_w: int) -> None:
        self.serial = next(self._serials)
        self.popen = popen
        self.pid = popen.pid
        self.sock = sock
        self.ctl_w = ctl_w
        self.reader = Reader(sock)
        self.wlock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.job: _Job | None = None  # the job it runs now
        self.done = 0  # jobs finished
        self.settings = 0  # version of the settings it has
        self.keys: set[int] = set()  # channel ends it holds proxies of
        self.requests: dict[int, concurrent.futures.Future[Any]] = {}
        self.abandoned = False
        self.read_all = threading.Event()  # its reader thread saw the end of its stream

    def write(
        self, kind: int, ident: int, body: bytes = b"", fds: list[int] | tuple[Any, ...] = ()
    ) -> bool:
        try:
            with self.wlock:
                send_frame(self.sock, kind, ident, body, fds)
        except OSError:
            return False  # it died: its reader thread reports that
        return True

    def close_fds(self) -> None:
        self.reader.close()
        self.sock.close()
        try:
            os.close(self.ctl_w)
        except OSError:
            pass


def _exit_text(code: int | None) -> str:
    if code is None:
        return "an unknown status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class ProcessPool(_endservice.EndService, _lifecycle.Lifecycle):
    """A pool of worker processes with InterpreterPool's API.

    For code that cannot run in a subinterpreter: extension modules that
    refuse them (numpy and most compiled libraries), or code that needs
    process isolation (a crash or ``os._exit`` ends only its worker).
    ``run``, ``submit``, ``map``, ``aclose``, ``Task``, errors, cancellation
    and timeouts behave as in InterpreterPool. If a worker process dies while
    it runs a task (``os._exit``, a crash in C), the task raises
    WorkerCrashedError and the pool starts a new worker. A cancelled, running
    task gets KeyboardInterrupt (SIGINT; a coroutine is cancelled instead);
    its process is killed and replaced if it does not stop within the grace
    period. ``async def`` functions run on 3.12 too.

    Args:
        size: number of worker processes (default: the CPUs this process may use).
        preload: modules each worker imports at start.
        initializer: a module-level function each worker calls once at start,
            with ``initargs``. If it raises, the pool is broken.
        max_tasks_per_worker: replace a worker process after it ran this many tasks.
        cancel_grace: seconds a cancelled, running task gets to stop after its
            KeyboardInterrupt before its process is killed and replaced.
        forward_logging: True (default): what the workers log is handled by
            this process's logging, their warnings by its warnings filters,
            and, while this process's ``sys.stdout``/``sys.stderr`` are
            replaced, their output is written there, as for InterpreterPool.
            False: they log, warn and write as plain processes do.
        context_vars: ``contextvars.ContextVar`` objects whose values in the
            caller's context at ``submit()`` hold in the worker process for
            that task (see InterpreterPool; they cross by pickle).

    Workers are fresh Python processes (like multiprocessing's "spawn", never
    a fork of this process: forking next to live interpreters kills the
    child), each connected by a Unix socket. A helper thread per worker waits
    for its results and hands them to the awaiting loop; nothing polls.
    Arguments and results cross by pickle; channel ends, sockets and
    ``FileDescriptor`` objects cross too (ends are served by this process on
    the worker's behalf). Functions cross by reference, as for interpreters.

    Thread-safety: a pool may be used from several event loops in several
    threads at once; each task belongs to the loop that submitted it.
    """

    _kind = "process pool"
    _unit = "worker"
    _on_exit_without_close = "they exit when this process does otherwise"

    def __init__(
        self,
        size: int | None = None,
        *,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        max_tasks_per_worker: int | None = None,
        cancel_grace: float = 1.0,
        forward_logging: bool = True,
        context_vars: Iterable[contextvars.ContextVar[Any]] | None = None,
    ) -> None:
        if not isinstance(forward_logging, bool):
            raise TypeError(f"forward_logging must be True or False, got {forward_logging!r}")
        super().__init__(
            _lifecycle.default_size() if size is None else size,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            max_tasks=max_tasks_per_worker,
            max_tasks_name="max_tasks_per_worker",
            cancel_grace=cancel_grace,
        )
        self._context = _context.locate(context_vars, "ProcessPool")
        self._queue: collections.deque[_Job] = collections.deque()
        self._queued: dict[int, _Job] = {}
        self._running: dict[int, _Job] = {}
        self._idle: list[_Proc] = []
        self._procs: dict[int, _Proc] = {}
        self._exit_drained = False  # drain_logs() ran: main exits; no worker is replaced
        self._threads: list[threading.Thread] = []
        self._settings = 0
        self._settings_body = b""
        self._completed = 0
        # forward_logging: what the reader threads hand the workers' LOG frames to.
        self._log_sink = _logs.RecordSink() if forward_logging else None
        if forward_logging:
            _logs.drain_at_exit(self)
        self._output = 0  # the output bits the workers were last given (see submit)
        self._init_ends()  # channel ends held for worker processes (_process.endservice)

    def _setup(self) -> tuple[Any, ...]:
        """The lifecycle's setup, plus main's log levels now (None: no forwarding)."""
        levels = None if self._log_sink is None else (*_logs.level_snapshot(), True)
        return (*super()._setup()[:3], (tuple(self._path or ()), self._output), levels)

    def _check_crosses(self, payload: object) -> None:
        _wire.close_fds(_wire.encode(payload, self._refuse_end)[1])

    # -- lifecycle -------------------------------------------------------------

    def _new_proc(self) -> tuple[_Proc | None, BaseException | None]:
        """Start one worker process and wait until it is ready (blocking)."""
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl_r, ctl_w = os.pipe()
        os.set_blocking(ctl_w, False)
        try:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    bootstrap_source(self._path or [], child_sock.fileno(), ctl_r),
                ],
                pass_fds=(child_sock.fileno(), ctl_r),
                stdin=subprocess.DEVNULL,
            )
        except BaseException as exc:  # noqa: BLE001 - reported as the start failure
            parent_sock.close()
            os.close(ctl_w)
            return None, exc
        finally:
            child_sock.close()
            os.close(ctl_r)
        proc = _Proc(popen, parent_sock, ctl_w)
        try:
            with self._lock:
                setup = self._setup()
                proc.settings = self._settings
            sent, fds = _wire.encode(setup, self._refuse_end)
            proc.write(SETUP, 0, sent, fds)
            _wire.close_fds(fds)
            kind, _, body, fds = proc.reader.read()
            if kind == READY:
                return proc, None
            if kind == FAILED:
                info = _wire.decode(body, fds)
                error: BaseException = rebuild(_with_exception(info))
            else:
                error = RuntimeError(f"a worker process sent message {kind} instead of READY")
        except (EOFError, OSError):
            error = RuntimeError(
                f"a worker process (pid {proc.pid}) exited during start-up with "
                f"{_exit_text(popen.wait())}; its error output is above"
            )
        self._reap(proc, kill=True)
        return None, error

    def _reap(self, proc: _Proc, kill: bool = False) -> int | None:
        if kill and proc.popen.poll() is None:
            proc.popen.kill()
        try:
            code = proc.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            code = proc.popen.wait()
        proc.close_fds()
        return code

    def _abort_start(self, broken: BaseException) -> None:
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            proc.write(STOP, 0)

    def _start_one(self) -> BaseException | None:
        proc, error = self._new_proc()
        if proc is None:
            return error
        self._register(proc)
        return None

    def _register(self, proc: _Proc) -> None:
        """List a ready worker, start its reader, give it work."""
        # The thread holds the pool weakly: an unclosed pool can still be collected (and warn).
        thread = threading.Thread(
            target=_serve,
            args=(weakref.ref(self), proc),
            daemon=True,
            name=f"aiosubinterp-process-{proc.pid}",
        )
        proc.thread = thread
        with self._lock:
            usable = self._state.drains
            if usable:
                self._procs[proc.serial] = proc
                self._threads.append(thread)
                job = self._next_job(proc)
        if not usable:
            proc.write(STOP, 0)
            self._reap(proc)
            return
        thread.start()
        if job is not None:
            self._dispatch(proc, job)

    def _stop_taking_work(self) -> None:
        pass  # the state is "closing": submit() refuses, _changed was notified

    def _drain_and_stop(self) -> None:
        with self._lock:
            # Submitted work runs first (a pool that lost its workers failed it already).
            self._changed.wait_for(lambda: not self._queued and not self._running)
            procs = list(self._procs.values())
        for proc in procs:
            proc.write(STOP, 0)
        while True:
            with self._lock:
                threads = [t for t in self._threads if t.is_alive()]
            if not threads:
                break
            for t in threads:
                t.join()
        self._stop_chan_loop()
        with self._lock:
            keys = list(self._ends)
        for key in keys:
            self._close_key(key)

    def _interrupt_running(self) -> None:
        with self._lock:
            jobs = list(self._running.values())
        for job in jobs:
            if job.proc is not None:
                _admin.spawn(self._interrupt, job.proc, job.tid)

    # -- submitting --------------------------------------------------------------

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) in a worker process; return its Task at once.

        fn crosses by reference (module and name) and must be a module-level
        function, a builtin, or a picklable callable; arguments cross by
        pickle. Raises NotShareableError here, before anything is queued, if they cannot.
        """
        loop = _hub.running_loop("ProcessPool.submit()")
        self._check_open()
        payload = _jobs.call_payload(fn, args, kwargs, self._context)
        keys: list[int] = []
        try:
            body, fds = _wire.encode(payload, lambda end: self._share_end(end, keys))
        except BaseException as exc:
            for key in keys:
                self._close_key(key)
            error = _jobs.encode_error(exc, payload, fn, args, kwargs)
            if error is exc:
                raise
            raise error from exc
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        tid = _lifecycle.next_task_id()
        task = Task(loop, self, tid, name, None)
        job = _Job(tid, body, fds, keys, task, _hub.hub_for(loop))
        output = _jobs.output_bits(self._log_sink is not None)
        if sys.path != self._path or output != self._output:
            self._new_settings(output)
        with self._lock:
            state = self._state
            proc = None
            if state.is_open:
                self._submitted += 1
                proc = self._idle.pop() if self._idle else None
                if proc is not None:
                    self._assign(proc, job)
                else:
                    self._queue.append(job)
                    self._queued[tid] = job
        if not state.is_open:
            self._drop(job)
            self._check_open()
            raise PoolClosedError("this process pool is closed")
        if proc is not None:
            self._dispatch(proc, job)
        elif state is _lifecycle.PoolState.NEW:
            self._ensure_started()
        return task

    def _new_settings(self, output: int) -> None:
        path = list(sys.path)
        body, _ = _wire.encode((tuple(path), output), self._refuse_end)
        with self._lock:
            self._path = path
            self._output = output
            self._settings += 1
            self._settings_body = body

    # -- dispatch (any thread; the lock is not held while writing) -----------------

    def _assign(self, proc: _Proc, job: _Job) -> None:
        """Give job to proc (lock held)."""
        job.proc = proc
        proc.job = job
        proc.keys.update(job.keys)
        self._running[job.tid] = job

    def _next_job(self, proc: _Proc) -> _Job | None:
        """The next queued job for an idle proc, assigned; or None and proc is idle (lock held)."""
        while self._queue:
            job = self._queue.popleft()
            if self._queued.pop(job.tid, None) is None:
                continue  # withdrawn
            self._assign(proc, job)
            return job
        self._idle.append(proc)
        return None

    def _dispatch(self, proc: _Proc, job: _Job) -> None:
        if len(job.payload) >= _BIG_PAYLOAD:  # never stall a loop thread on a long write
            _admin.spawn(self._write_job, proc, job)
        else:
            self._write_job(proc, job)

    def _write_job(self, proc: _Proc, job: _Job) -> None:
        settings = None
        if proc.settings != self._settings:
            with self._lock:
                proc.settings, settings = self._settings, self._settings_body
        if settings is not None:
            proc.write(SETTINGS, 0, settings)
        proc.write(JOB, job.tid, job.payload, job.fds)
        _wire.close_fds(job.fds)
        job.payload = b""

    def _drop(self, job: _Job) -> None:
        """A job that will never run: release what it carried."""
        _wire.close_fds(job.fds)
        for key in job.keys:
            self._close_key(key)

    def _fail_queued(self, exc: BaseException) -> None:
        with self._lock:
            jobs = [j for j in self._queue if j.tid in self._queued]
            self._queue.clear()
            self._queued.clear()
            self._changed.notify_all()
        for job in jobs:
            self._drop(job)
            self._deliver(job, _core.STATUS_ERROR, _jobs.error_value(exc))

    def _deliver(self, job: _Job, status: int, value: object) -> None:
        # Any thread: the loop's hub completes the task on the loop's thread
        # (a burst of results, one wakeup), or drops it if the loop closed.
        job.hub.post(job.task, status, value)

    # -- the reader thread of each worker -----------------------------------------

    def _handle(
        self, proc: _Proc, kind: int, ident: int, body: bytes | bytearray, fds: list[int]
    ) -> None:
        try:
            if kind == LOG:
                if self._log_sink is not None:
                    self._log_sink.handle(_wire.decode(body, fds))
            elif kind == RESULT:
                self._on_result(proc, ident, body, fds)
            elif kind == REQUEST:
                self._on_request(proc, ident, body, fds)
            elif kind == ABORT:
                fut = proc.requests.get(ident)
                if fut is not None:
                    fut.cancel()
            else:
                _wire.close_fds(fds)
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave tasks hanging
            sys.unraisablehook(_Unraisable(exc, f"aiosubinterp: worker process {proc.pid}"))  # type: ignore[arg-type]

    def _on_result(self, proc: _Proc, tid: int, body: bytes | bytearray, fds: list[int]) -> None:
        try:
            status, value, released = _wire.decode(body, fds, on_end=self._end_for(proc))
        except Exception as exc:  # noqa: BLE001 - the awaiter gets it
            status, value, released = _core.STATUS_LOCAL_ERROR, exc, ()
        for key in released:
            self._close_key(key, proc)
        if status == _core.STATUS_ERROR:  # the codes are _core's (see _process.worker)
            value = _with_exception(value)
        elif status not in (_core.STATUS_OK, _core.STATUS_CANCELLED):
            status = _core.STATUS_LOCAL_ERROR  # the frame could not be decoded: value says why
        retire = False
        with self._lock:
            job = self._running.pop(tid, None)
            if proc.job is not None and proc.job.tid == tid:
                proc.job = None
            proc.done += 1
            self._completed += 1
            nxt = None
            if proc.abandoned:
                pass
            elif self._max_tasks and proc.done >= self._max_tasks:
                retire = self._procs.pop(proc.serial, None) is not None
            else:
                nxt = self._next_job(proc)
            self._changed.notify_all()
        if job is not None:
            self._deliver(job, status, value)
        if nxt is not None:
            self._dispatch(proc, nxt)
        if retire:
            proc.write(STOP, 0)
            self._replace()

    def _on_exit(self, proc: _Proc) -> None:
        with self._lock:
            listed = self._procs.pop(proc.serial, None) is not None
            if proc in self._idle:
                self._idle.remove(proc)
            job = proc.job
            proc.job = None
            if job is not None:
                self._running.pop(job.tid, None)
            self._changed.notify_all()
        for fut in list(proc.requests.values()):
            fut.cancel()
        code = self._reap(proc)
        for key in list(proc.keys):
            self._close_key(key, proc)
        if job is not None:
            err = WorkerCrashedError(
                f"the worker process (pid {proc.pid}) running the task {job.task.name!r} "
                f"exited with {_exit_text(code)} before the task finished (os._exit, a signal, "
                "or a crash in C code); the pool started a new worker in its place"
            )
            self._deliver(job, _core.STATUS_ERROR, _jobs.error_value(err))
        if listed:
            with self._lock:
                self._replaced += 1
            self._replace()

    def _replace(self) -> None:
        with self._lock:
            wanted = self._state.is_live or (
                self._state is _lifecycle.PoolState.CLOSING and self._queued
            )
        if wanted:
            _admin.spawn(self._add_proc)

    def _add_proc(self) -> None:
        proc, error = self._new_proc()
        if proc is not None:
            self._register(proc)
            return
        with self._lock:
            alone = not self._procs
        if alone and error is not None:
            self._break(error)

    # -- cancellation ---------------------------------------------------------------

    def _cancel_task(self, task: Task) -> None:
        tid = task.id
        with self._lock:
            job = self._queued.pop(tid, None)
            running = None if job is not None else self._running.get(tid)
            self._changed.notify_all()
        if job is not None:
            self._drop(job)  # withdrawn: it never runs
        elif running is not None and running.proc is not None:
            _admin.spawn(self._interrupt, running.proc, tid)

    def _on_retired(self, serial: int) -> None:
        """TaskOwner: a no-op here. A worker that reached max_tasks_per_worker is
        stopped and replaced by its reader thread (_on_result); no hub reports it."""

    def _interrupt(self, proc: _Proc, tid: int) -> None:
        """KeyboardInterrupt in the task; after the grace period, kill and replace its process."""
        try:
            os.write(proc.ctl_w, tid.to_bytes(8, "little"))
            proc.popen.send_signal(signal.SIGINT)
        except OSError:
            return  # it is gone already
        with self._lock:
            if self._changed.wait_for(lambda: proc.job is None or proc.job.tid != tid, self._grace):
                return
            # It ignores the interruption (catches it, or is stuck in C): give up on it.
            proc.abandoned = True
            listed = self._procs.pop(proc.serial, None) is not None
            if listed:
                self._replaced += 1
        proc.popen.kill()
        if listed:
            self._replace()

    # -- interpreter exit ------------------------------------------------------------

    def drain_logs(self, deadline: float) -> None:
        """At interpreter exit (pool not closed): handle the log records the workers sent so far.

        Called by aiosubinterp._engine.logs's atexit hook, before logging's
        own shutdown. Each worker's socket is shut for reading: what it sent
        before stays queued and is read to the end, and its later writes fail
        (its process exits with ours). What comes after deadline
        (time.monotonic(): main's handling is stuck) is not waited for.
        """
        with self._lock:
            self._exit_drained = True
            procs = [p for p in self._procs.values() if p.thread and p.thread.is_alive()]
        for proc in procs:
            try:
                proc.sock.shutdown(socket.SHUT_RD)  # its reader ends after the last byte sent
            except OSError:
                proc.read_all.set()  # closed already: nothing is coming
        for proc in procs:
            proc.read_all.wait(max(0.0, deadline - time.monotonic()))

    # -- introspection -----------------------------------------------------------

    def pids(self) -> list[int]:
        """Process ids of the current workers."""
        with self._lock:
            return [p.pid for p in self._procs.values()]

    def _counts(self) -> tuple[int, int, int, int]:
        with self._lock:
            return (len(self._running), len(self._running), len(self._queued), self._completed)

    def _listed(self) -> int:
        return len(self._procs)


def _serve(pool_ref: weakref.ref[Any], proc: _Proc) -> None:
    """A worker's reader thread: hands each message to the pool, until the process exits."""
    while True:
        try:
            kind, ident, body, fds = proc.reader.read()
        except (EOFError, OSError):
            break
        pool = pool_ref()
        if pool is None:  # collected without close(): let the worker go
            _wire.close_fds(fds)
            proc.write(STOP, 0)
            continue
        pool._handle(proc, kind, ident, body, fds)
        del pool
    proc.read_all.set()  # no more: the process is gone, or main is exiting (drain_logs)
    pool = pool_ref()
    if pool is None:
        proc.popen.wait()
        proc.close_fds()
    elif not pool._exit_drained:  # else main is exiting: the worker ends with its process
        pool._on_exit(proc)


def _with_exception(info: tuple[Any, ...]) -> tuple[Any, ...]:
    """A worker's error description with its pickled exception rebuilt here (or None)."""
    type_name, message, tb_text, data = info[:4]
    exc = None
    if data is not None:
        try:
            exc = _marshal.loads(data)
        except Exception:  # noqa: BLE001 - ExecutionFailed alone then
            exc = None
    return (type_name, message, tb_text, exc, *info[4:])


class _Unraisable:
    def __init__(self, exc: BaseException, what: str) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = exc.__traceback__
        self.err_msg = f"Exception in {what}'s reader thread"
        self.object = None
