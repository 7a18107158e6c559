"""InterpreterPool and Interpreter: interpreters with their own GIL, awaited from asyncio."""

from __future__ import annotations

import contextvars
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from aiosubinterp import _core, _quirks
from aiosubinterp._engine import admin as _admin
from aiosubinterp._engine import context as _context
from aiosubinterp._engine import copies as _copies
from aiosubinterp._engine import fallback as _fallback
from aiosubinterp._engine import hub as _hub
from aiosubinterp._engine import jobs as _jobs
from aiosubinterp._engine import lifecycle as _lifecycle
from aiosubinterp._engine import logs as _logs
from aiosubinterp._engine import profiling as _profiling
from aiosubinterp._engine.task import Task
from aiosubinterp._errors import rebuild
from aiosubinterp._inside.worker import coroutine_refusal, coroutines_supported, describe_exception
from aiosubinterp._introspect import InterpreterInfo

__all__ = ["Interpreter", "InterpreterPool", "run"]

_COROUTINES = coroutines_supported()  # fixed for the process: checked at every submit
_call_payload = _jobs.call_payload  # module globals: read at every submit
_output_bits = _jobs.output_bits
# Coroutines one interpreter may run at once (each slot is a few bytes; the
# bound catches a typo such as 10**6 before it allocates).
_MAX_CONCURRENCY = 10_000

_BOOTSTRAP = """\
def _boot():
    import sys
    try:
        sys.path[:] = {path!r}
        for name in {blocked!r}:
            sys.modules.setdefault(name, None)
        from aiosubinterp import _core
    except BaseException as exc:
        import traceback
        return "".join(traceback.format_exception(exc))
    _core._worker_main(HANDLE)
ERROR = _boot()
"""


def _spin_seconds() -> float:
    """How long an idle worker polls for the next job before it sleeps.

    AIOSUBINTERP_SPIN_US sets it in microseconds (0 disables spinning).
    """
    raw = os.environ.get("AIOSUBINTERP_SPIN_US", "").strip()
    if not raw:
        return 100e-6
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"AIOSUBINTERP_SPIN_US={raw!r} must be a number of microseconds >= 0")
    return value * 1e-6


class _InterpreterBackend(_lifecycle.Lifecycle):
    """Interpreters serving one job queue. Base of InterpreterPool, Interpreter and
    the InterpreterPoolExecutor's engine.

    A job reaches an interpreter through the C job queue (_core.Queue); its
    completion comes back through the submitting loop's hub (_hub).
    """

    def __init__(
        self,
        size: int,
        *,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        max_tasks_per_interpreter: int | None = None,
        cancel_grace: float = 1.0,
        replace_stuck: bool = True,
        concurrency_per_interpreter: int = 1,
        idle_spin: float | None = None,
        forward_logging: bool = True,
        private_copies: bool = False,
        context_vars: Iterable[contextvars.ContextVar[Any]] | None = None,
    ) -> None:
        super().__init__(
            size,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            max_tasks=max_tasks_per_interpreter,
            max_tasks_name="max_tasks_per_interpreter",
            cancel_grace=cancel_grace,
            concurrency=concurrency_per_interpreter,
        )
        if (
            isinstance(concurrency_per_interpreter, bool)
            or not isinstance(concurrency_per_interpreter, int)
            or not 1 <= concurrency_per_interpreter <= _MAX_CONCURRENCY
        ):
            raise ValueError(
                "concurrency_per_interpreter must be an int from 1 to "
                f"{_MAX_CONCURRENCY} (coroutines one interpreter runs at once), "
                f"got {concurrency_per_interpreter!r}"
            )
        if idle_spin is not None and (
            isinstance(idle_spin, bool)
            or not isinstance(idle_spin, (int, float))
            or not 0 <= idle_spin <= 1
        ):
            raise ValueError(
                "idle_spin must be None (the default, 100 microseconds) or a number of seconds "
                "from 0 to 1 an idle interpreter polls for work before it sleeps, got "
                f"{idle_spin!r}"
            )
        if not isinstance(forward_logging, bool):
            raise TypeError(f"forward_logging must be True or False, got {forward_logging!r}")
        if concurrency_per_interpreter > 1 and not coroutines_supported():
            raise RuntimeError(coroutine_refusal("coroutines (concurrency_per_interpreter > 1)"))
        # Found once here; each submit reads their values (aiosubinterp._engine.context).
        self._context = _context.locate(context_vars, self._public_name)
        self._replace_stuck = replace_stuck
        self._queue = _core.Queue(_spin_seconds() if idle_spin is None else float(idle_spin))
        self._workers: dict[int, _core.Worker] = {}
        self._abandoned: list[_core.Worker] = []
        # Retirements reported before the worker was registered (a fresh
        # worker can serve max_tasks jobs before its starter thread resumes).
        self._retired_early: set[int] = set()
        # Replacement workers being started; a closing pool waits for them
        # (they serve what is still queued), signalled through _changed,
        # which also tells a cancel (_interrupt) that a worker was listed.
        self._pending_adds = 0
        # Interpreter only: task id -> Task, so `interp.task` can name what runs.
        self._tasks: weakref.WeakValueDictionary[int, Task] | None = None
        self._output = 0  # the output bits the workers were last given (see _submit)
        # forward_logging: made with the first worker's setup, stopped once every worker is gone.
        self._forward_logging = forward_logging
        self._log_consumer: _logs.LogConsumer | None = None
        # fallback="copy": a new folder for each interpreter's private copies.
        self._copies = _copies.CopyFolders() if private_copies else None
        # pool.profile() (aiosubinterp._engine.profiling): jobs go through it while set.
        self._profile: _profiling.Profile | None = None
        _profiling.join_process_profile(self)

    _public_name = "InterpreterPool"  # in messages: who was given a bad argument

    # -- log forwarding (aiosubinterp._engine.logs) ------------------------------

    _log_buffer = _logs.DEFAULT_BUFFER  # records waiting in main at most (tests make it small)

    def _setup(self) -> tuple[Any, ...]:
        """The lifecycle's setup, plus the worker's end of the log channel and the folder
        for its private copies (each None when not used)."""
        logs = None
        if self._forward_logging and self._log_consumer is None:
            try:
                self._log_consumer = _logs.LogConsumer(self._log_buffer)
            except RuntimeError:
                # No new thread at interpreter shutdown (3.12: an executor
                # that starts its workers while the program exits): what
                # the workers log goes to their stderr, as when not forwarded.
                self._forward_logging = False
        if self._forward_logging and self._log_consumer is not None:
            logs = self._log_consumer.worker_setup()
        copies = self._copies.next_folder() if self._copies is not None else None
        return (*super()._setup(), logs, copies)

    def _stop_logs(self) -> None:
        """Every worker is gone: handle the records they sent, then stop the consumer;
        remove the private copies' folder (the interpreters that mapped them are gone)."""
        with self._lock:
            consumer = self._log_consumer
        try:
            if consumer is not None:
                consumer.stop()
        finally:
            if self._copies is not None:
                self._copies.close()

    def statistics(self) -> dict[str, int | str]:
        """As Lifecycle.statistics(); with fallback="copy" also ``copies`` (private copies
        of extension modules made so far), ``copies_bytes`` and ``copies_seconds``."""
        stats = super().statistics()
        if self._copies is not None:
            stats.update(self._copies.statistics())  # type: ignore[arg-type]
        return stats

    # -- the lifecycle's backend hooks --------------------------------------------

    def _bootstrap(self) -> str:
        return _BOOTSTRAP.format(
            path=list(sys.path), blocked=_quirks.blocked_modules(self._copies is not None)
        )

    def _new_worker(self) -> tuple[_core.Worker | None, BaseException | None]:
        """Create and start one worker (blocking). Returns (worker, None) or (None, error)."""
        _quirks.prime_arg_parsers()  # gh-119213, see _quirks
        if not _quirks.wait_until_no_worker_is_stuck(self._no_worker_needed):
            return None, RuntimeError(
                f"the {self._kind} closed before a new interpreter could "
                "start (a worker given up on was still in a C call)"
            )
        with self._lock:
            setup = self._setup()
        worker = _core.Worker(
            self._queue, self._bootstrap(), setup, self._max_tasks, self._concurrency, self._grace
        )
        try:
            with _quirks.creating_interpreter():  # a fork() waits for it: see _quirks
                failure = worker.start()
        except BaseException as exc:  # noqa: BLE001
            return None, exc
        if failure is None:
            return worker, None
        if isinstance(failure, tuple):
            return None, rebuild(failure)
        return None, RuntimeError(f"an interpreter failed to start:\n{failure}")

    def _no_worker_needed(self) -> bool:
        """Closed, or closing with nothing queued: a new worker would serve nothing."""
        state = self._state
        return not state.drains or (
            state is _lifecycle.PoolState.CLOSING and self._queue.qsize() == 0
        )

    def _start_one(self) -> BaseException | None:
        """Start one worker and list it at once, so a task it runs can be cancelled."""
        try:
            worker, error = self._new_worker()
        except BaseException as exc:  # noqa: BLE001 - _start_all reports it: start() fails
            return exc
        if worker is None:
            return error
        with self._lock:
            usable = self._state.drains
            # When closing meanwhile, it still drains the queue first.
            retired = usable and not self._register(worker)
            if retired:
                self._pending_adds += 1
        if not usable:
            self._close_worker(worker)
        elif retired:
            _admin.spawn(self._retire_and_replace, worker)
        return None

    def _abort_start(self, broken: BaseException) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        self._queue.close()
        for w in workers:
            self._close_worker(w)
        self._stop_logs()

    def _stop_taking_work(self) -> None:
        self._queue.close()

    def _drain_and_stop(self) -> None:
        try:
            self._close_workers()
        finally:
            self._stop_logs()

    def _close_workers(self) -> None:
        while True:
            with self._lock:
                while True:
                    workers = list(self._workers.values()) + self._abandoned
                    if workers or self._pending_adds == 0:
                        break
                    self._changed.wait()
                if not workers and self._queue.qsize() > 0 and self._broken is None:
                    # Every worker retired (max_tasks) with work still queued:
                    # start fresh ones to serve it, as a running pool would.
                    self._pending_adds += self._size
                    for _ in range(self._size):
                        _admin.spawn(self._add_worker)
                    continue
            if not workers:
                return
            for w in workers:
                self._close_worker(w, drain=True)
                # Listed until destroyed, so a late cancel can still interrupt it.
                with self._lock:
                    if self._workers.get(w.serial) is w:
                        del self._workers[w.serial]
                    if w in self._abandoned:
                        self._abandoned.remove(w)

    def _close_worker(self, worker: _core.Worker, drain: bool = False) -> None:
        """worker.close(drain); warn if it had to abandon the interpreter (review R3)."""
        left = worker.close(drain)
        if left is None:
            return
        self._warn_later(
            f"interpreter {worker.id} is abandoned: a task left {left} running there, "
            f"still running {self._grace:g}s (cancel_grace) after the interpreter was asked "
            "to stop. CPython cannot destroy an interpreter while another of its threads "
            "runs, so it stays alive and keeps its memory; at exit it is destroyed if those "
            "threads ended by then, else the process exits with status 70. Join the "
            "threads a task starts before it returns."
        )

    def _fail_queued(self, exc: BaseException) -> None:
        self._queue.fail_queued(describe_exception(exc))

    def _interrupt_running(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            tid = w.current_task
            if tid:
                _admin.spawn(w.interrupt, tid)

    def _counts(self) -> tuple[int, int, int, int]:
        return (
            self._queue.busy(),
            self._queue.running(),
            self._queue.qsize(),
            self._queue.completed(),
        )

    def _listed(self) -> int:
        return len(self._workers)

    # -- submitting --------------------------------------------------------------

    def _publish_settings(self, output: int) -> None:
        """What every worker applies before its next job: (sys.path, output bits)."""
        path = list(sys.path)
        self._queue.set_settings((tuple(path), output))  # raises for an entry that cannot cross
        if self._path is not None:
            self._path = path
        self._output = output

    def _submit(
        self,
        kind: int,
        payload: object,
        name: str,
        fn: object = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Task:
        loop = _hub.running_loop(f"{type(self).__name__}.submit()")
        self._check_open()
        hub = _hub.hub_for(loop)
        if self._profile is not None:
            kind, payload = self._profile.wrap(kind, payload)
        tid = _lifecycle.next_task_id()
        self._enqueue(tid, payload, hub.core, fn, args, kwargs, kind)
        task = Task(loop, self, tid, name, hub)
        hub.pending[tid] = task
        if self._tasks is not None:
            self._tasks[tid] = task
        if self._state is _lifecycle.PoolState.NEW:
            self._ensure_started()
        return task

    # The executor's rule (aiosubinterp._inside.marshal.call_payload): a nested
    # function that captures nothing crosses as its code; messages say so.
    _nested_calls = False

    def _enqueue(
        self,
        tid: int,
        payload: object,
        hub: _core.Hub,
        fn: object = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        kind: int = _core.JOB_KIND_CALL,
    ) -> None:
        """Put job tid on the queue; its completion goes to hub. The one enqueue step of
        InterpreterPool, Interpreter and the InterpreterPoolExecutor.

        First sends the workers main's sys.path and output redirection when
        they changed. Raises what _check_open() raises if the pool closed
        meanwhile; if the job does not encode, what jobs.encode_error() says
        (fn, args, kwargs: the call, to name the part that cannot cross; fn
        None: the source text of an exec).
        """
        output = _output_bits(self._forward_logging)
        if output != self._output or (self._path is not None and sys.path != self._path):
            self._publish_settings(output)
        try:
            self._queue.submit(tid, kind, payload, hub)
        except BaseException as exc:
            if isinstance(exc, RuntimeError) and self._queue.closed:
                self._check_open()  # closed between the caller's check and now
                raise
            # Otherwise encoding failed (perhaps a __reduce__ that raises RuntimeError).
            error = _jobs.encode_error(exc, payload, fn, args, kwargs, nested=self._nested_calls)
            if error is exc:
                raise
            raise error from exc
        self._submitted += 1

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) in an interpreter; return its Task at once.

        fn crosses by reference (module and name) and must be a module-level
        function, a builtin, or a picklable callable; arguments cross by copy,
        and so do the values of the ``context_vars`` set in the caller's context.
        Raises NotShareableError here, before anything is queued, if they cannot.
        """
        return self._submit_to_interpreters(fn, args, kwargs)

    def profile(self) -> _profiling.Profile:
        """Profile the tasks that run in this pool's interpreters, from now until it closes.

        Use it as ``async with pool.profile() as prof:`` (or ``with``); after
        the block, ``prof.stats()`` is one `pstats.Stats` of every interpreter
        together, ``prof.per_interpreter()`` one per interpreter id, and
        ``prof.dump(path)`` writes the former for ``python -m pstats`` or
        snakeviz. Each interpreter runs `cProfile` on itself around each task
        submitted while the profile is on (interpreters started or replaced
        meanwhile too) and sends its statistics back as bytes. Off, profiling
        costs nothing.

        Raises:
            RuntimeError: this pool is already being profiled, or CPython is
                3.12 (cProfile does not load in a subinterpreter there).
        """
        self._check_open()
        return _profiling.start(self)

    def _submit_to_interpreters(
        self, fn: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Task:
        """submit() in an interpreter, whatever the fallback (the fallback router's way in)."""
        if not _COROUTINES and _is_coroutine_function(fn):
            raise RuntimeError(coroutine_refusal(f"async function {_name_of(fn)}"))
        payload = _call_payload(fn, args, kwargs, self._context)
        name = getattr(fn, "__qualname__", None) or type(fn).__name__  # _name_of(), inlined
        return self._submit(_core.JOB_KIND_CALL, payload, name, fn, args, kwargs)

    # -- completions and cancellation (loop thread / helper threads) -----------

    def _cancel_task(self, task: Task) -> None:
        tid = task.id
        code, serial = self._queue.cancel(tid)
        if code == _core.CANCEL_CODE_WITHDRAWN:
            task._hub.pending.pop(tid, None)
        elif code == _core.CANCEL_CODE_RUNNING:
            _admin.spawn(self._interrupt, serial, tid)

    def _interrupt(self, serial: int, tid: int) -> None:
        # A worker serves jobs a moment before its starter lists it: wait
        # for it to appear (this runs on a helper thread, never the loop).
        deadline = time.monotonic() + max(self._grace, 1.0)
        with self._lock:
            while (worker := self._workers.get(serial)) is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._state is _lifecycle.PoolState.CLOSED:
                    return
                self._changed.wait(left)  # _register() and closing notify
        # A worker stuck in a C call keeps its GIL, so the interruption may
        # not get through: it waits at most the grace period, which it shares
        # with the wait for the task to stop.
        deadline = time.monotonic() + self._grace
        delivered = worker.interrupt(tid, self._grace)
        if worker.wait_idle(tid, max(0.0, deadline - time.monotonic())) or not self._replace_stuck:
            return
        # The task ignores the interruption (blocked in C, or catching it):
        # give up on this worker and put a fresh one in its slot.
        with self._lock:
            if self._workers.pop(worker.serial, None) is None:
                return
            self._abandoned.append(worker)
            _quirks.note_abandoned(worker)
            self._replaced += 1
            replace = self._state.is_live
            if replace:
                self._pending_adds += 1
        worker.stop()
        if replace:
            # On its own helper: on a free-threaded build the new interpreter
            # may wait for this one to leave C (_quirks), while the loop
            # below goes on interrupting it.
            _admin.spawn(self._add_worker)
        # A delivered interruption can be swallowed: by an `except
        # BaseException`, or by CPython itself when it lands in an importlib
        # callback while the task's module is still being imported ("Exception
        # ignored", seen under load). Repeat it while the abandoned task runs,
        # so a task that does stop on KeyboardInterrupt ends and closing the
        # pool does not wait for it forever. A pending one (the worker keeps
        # its GIL in C) is delivered by its helper once the worker yields.
        period = max(self._grace, 0.5)
        while delivered and not worker.wait_idle(tid, period):
            delivered = worker.interrupt(tid, period)

    def _register(self, worker: _core.Worker) -> bool:
        """Add a started worker (lock held). False if it already retired: replace it."""
        if worker.serial in self._retired_early:
            self._retired_early.discard(worker.serial)
            return False
        self._workers[worker.serial] = worker
        self._changed.notify_all()  # a cancel may wait for this worker (_interrupt)
        return True

    def _on_retired(self, serial: int) -> None:
        with self._lock:
            worker = self._workers.pop(serial, None)
            if worker is None and self._state.is_live:
                self._retired_early.add(serial)
            # A closing pool still serves what is queued: a worker that
            # retires meanwhile is replaced while there is work left.
            replace = worker is not None and (
                self._state.is_live
                or (self._state is _lifecycle.PoolState.CLOSING and self._queue.qsize() > 0)
            )
            if replace:
                self._pending_adds += 1
            if worker is not None and not replace:
                self._abandoned.append(worker)
        if worker is None:
            return
        if replace:
            _admin.spawn(self._retire_and_replace, worker)

    def _retire_and_replace(self, worker: _core.Worker) -> None:
        try:
            self._close_worker(worker)
        finally:
            self._add_worker()

    def _add_worker(self) -> None:
        """Start a replacement worker. The caller counted it in _pending_adds."""
        try:
            self._add_worker_counted()
        finally:
            with self._lock:
                self._pending_adds -= 1
                self._changed.notify_all()

    def _add_worker_counted(self) -> None:
        worker, error = self._new_worker()
        with self._lock:
            if worker is not None and self._state.drains:
                if not self._register(worker):
                    self._pending_adds += 1
                    _admin.spawn(self._retire_and_replace, worker)
                return
            alone = not self._workers
        if worker is not None:  # closed meanwhile
            self._close_worker(worker)
            return
        if alone and error is not None:
            self._break(error)


class InterpreterPool(_InterpreterBackend):
    """A pool of interpreters, each with its own GIL and its own OS thread.

    Args:
        size: number of interpreters (default: the CPUs this process may use).
        preload: modules each interpreter imports at start, so the first
            task does not pay for them.
        initializer: a module-level function each interpreter calls once at
            start, with ``initargs``. If it raises in the first interpreter,
            the pool is broken (``async with`` raises BrokenPoolError); in a
            later one, that interpreter is left out (logged as a warning).
        max_tasks_per_interpreter: replace an interpreter after it ran this many tasks.
        cancel_grace: seconds a cancelled, running task gets to stop before its
            interpreter is given up and replaced; also how long closing an
            interpreter waits for threads its tasks left running (if one
            still runs, the interpreter is abandoned with a RuntimeWarning).
        concurrency_per_interpreter: how many ``async def`` calls one
            interpreter runs at once on its event loop (for I/O-bound
            coroutines; default 1). While an interpreter's loop runs
            coroutines it also takes plain calls, which then run on that loop's
            thread between the coroutines' steps. CPython 3.13+.
        idle_spin: seconds an interpreter that finished a task keeps polling
            for the next one before it sleeps (default 100 microseconds, or
            ``AIOSUBINTERP_SPIN_US``). Polling makes back-to-back small tasks
            fast; one idle interpreter at a time polls, using a core while it
            does. 0 turns it off (lowest CPU use when tasks are rare).
        fallback: what happens when an extension module refuses to load in a
            subinterpreter (ModuleRefusedError: numpy, pydantic-core, orjson,
            lxml). None (default): the task fails with that error.
            ``"copy"``: each interpreter loads a private copy of the module's
            file (a new path per interpreter, under ``AIOSUBINTERP_COPY_DIR``
            or the temp folder; removed at close and at exit), so its C state
            is its own; only for modules whose binaries show multi-phase init
            (others, such as msgspec or numpy's test helpers, and a short deny
            list, are refused with the reason). Costs per interpreter: the
            copied files' disk (numpy: ~15 MiB), a few tens of ms at the first
            import, and its memory (numpy: ~13 MiB), which CPython does not
            return when an interpreter is replaced (``max_tasks_per_interpreter``
            makes each replacement pay again). Native thread pools (OpenBLAS,
            OpenMP, MKL) are one per process: ``OPENBLAS_NUM_THREADS``,
            ``OMP_NUM_THREADS`` and the like are set to 1 when not set (before
            such a library loads; numpy imported earlier in main keeps its
            threads). CPython 3.13+ with the GIL: on 3.12 and free-threaded
            builds it is a ValueError (3.12.1 aborted at exit after copies in
            two interpreters; free-threaded builds cannot lift the check).
            ``"process"``: a task whose module refuses runs again on a worker
            process (a ProcessPool of the same size, made on
            first need); a FallbackWarning says so once per module, and later
            tasks of that function's module go straight to the processes.
            ``("copy", "process")``: a private copy where the binaries allow it,
            processes otherwise (processes only on 3.12 and free-threaded builds).
        forward_logging: True (default): records the interpreters log are
            handled by this (the main) interpreter's logging, with the same
            logger name, level, message (formatted in the worker), time,
            source location, exception text, the ``extra`` fields that are
            str, int, float, bool or None, and ``interpreter_id``. Levels
            disabled in main when an interpreter starts are disabled in it
            too, so those records cost nothing and never cross. An
            interpreter whose code configured its own handlers (in its
            initializer, or on the logger that logs) keeps them, and its
            records are not forwarded. If main falls behind, at most 10,000
            records wait; later ones are dropped and counted, and the count is
            logged once as a warning of logger ``aiosubinterp``. A record
            logged by a task also carries ``task_id`` (its ``Task.id``; None
            outside a task). False:
            workers log as plain interpreters do (to stderr through logging's
            last-resort handler unless they configure logging).
        context_vars: ``contextvars.ContextVar`` objects (a request id, a
            trace id) whose values in the caller's context at ``submit()``
            (``run()``, ``map()``) hold in the worker for that task, and are
            reset after it (plain and ``async def`` functions alike). Each
            must be a global of a module (found once, here): a worker sets
            its own variable of that module and name, and its value crosses
            by copy like an argument (NotShareableError at submit if it
            cannot). A variable the caller has not set stays unset (at its
            default) in the worker. Not with ``fallback="process"``.

    Each interpreter runs one task at a time (or up to
    ``concurrency_per_interpreter`` coroutines); tasks are taken from one
    shared queue. Interpreters are created off the event loop, on first use or on
    ``await pool.start()`` / ``async with``, which return once the first one
    is ready: the others start then and join as they come up (tasks queue
    meanwhile; ``statistics()["starting"]`` counts them), and ``await
    pool.wait_ready()`` waits for all of them.

    Thread-safety: a pool may be used from several event loops in several
    threads at once; each task belongs to the loop that submitted it.
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        max_tasks_per_interpreter: int | None = None,
        cancel_grace: float = 1.0,
        concurrency_per_interpreter: int = 1,
        idle_spin: float | None = None,
        fallback: str | tuple[str, ...] | None = None,
        forward_logging: bool = True,
        context_vars: Iterable[contextvars.ContextVar[Any]] | None = None,
    ) -> None:
        size = _lifecycle.default_size() if size is None else size
        if context_vars is not None and "process" in _fallback.parse(fallback):
            raise ValueError(
                "InterpreterPool(context_vars=...) cannot be combined with fallback='process' "
                "yet: the worker processes would run the calls without the context variables. "
                "Use fallback=None or 'copy', or pass the values as arguments."
            )
        # fallback="process": a ProcessPool for what interpreters refuse
        # (aiosubinterp._engine.fallback).
        self._fallback = _fallback.make(
            fallback,
            size=size,
            initializer=initializer,
            initargs=initargs,
            max_tasks=max_tasks_per_interpreter,
            cancel_grace=cancel_grace,
            forward_logging=forward_logging,
        )
        super().__init__(
            size,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            max_tasks_per_interpreter=max_tasks_per_interpreter,
            cancel_grace=cancel_grace,
            concurrency_per_interpreter=concurrency_per_interpreter,
            idle_spin=idle_spin,
            forward_logging=forward_logging,
            private_copies=_fallback.wants_copies(_fallback.parse(fallback), "InterpreterPool"),
            context_vars=context_vars,
        )
        router = self._fallback
        if router is not None:
            self._closed.add_done_callback(lambda _: router.close())

    # -- fallback="process": aiosubinterp._engine.fallback --------------------------

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) in an interpreter; return its Task at once.

        fn crosses by reference (module and name) and must be a module-level
        function, a builtin, or a picklable callable; arguments cross by copy.
        Raises NotShareableError here, before anything is queued, if they cannot.
        With ``fallback="process"``, a call whose module refuses interpreters
        runs on a worker process instead.
        """
        if self._fallback is not None:
            return self._fallback.submit(self, fn, args, kwargs)
        return self._submit_to_interpreters(fn, args, kwargs)

    async def aclose(self) -> None:
        """Close and wait until every interpreter (and fallback process) is gone.

        Cancellation: as for close(): the tasks still running are interrupted
        and the shutdown completes in the background.
        """
        await super().aclose()
        if self._fallback is not None:
            await self._fallback.aclose()

    # -- end of fallback hooks -------------------------------------------------------


class Interpreter(_InterpreterBackend):
    """One interpreter with its own GIL, and the OS thread that runs its tasks.

    State persists between calls (module globals, ``exec`` namespace): use it
    when tasks build on each other; use InterpreterPool to spread work.
    A cancelled task that ignores its interruption keeps this interpreter
    busy (it cannot be replaced without losing its state).

    Thread-safety: as InterpreterPool.
    """

    _kind = "interpreter"
    _public_name = "Interpreter"

    def __init__(
        self,
        *,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        forward_logging: bool = True,
        fallback: str | None = None,
        context_vars: Iterable[contextvars.ContextVar[Any]] | None = None,
    ) -> None:
        """Arguments as InterpreterPool's (preload, initializer, initargs, forward_logging,
        context_vars; fallback: None or ``"copy"``). ``exec()`` carries no context variables."""
        super().__init__(
            1,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            replace_stuck=False,
            forward_logging=forward_logging,
            private_copies=_fallback.copies_only(fallback, "Interpreter"),
            context_vars=context_vars,
        )
        self._tasks = weakref.WeakValueDictionary()

    def _worker(self) -> _core.Worker | None:
        with self._lock:
            for worker in self._workers.values():
                return worker
        return None

    def _started_worker(self) -> _core.Worker:
        worker = self._worker()
        if worker is None:
            raise RuntimeError(
                "this interpreter has not started (or is closed): use `async with "
                "Interpreter() as interp` or `await interp.start()` first"
            )
        return worker

    @property
    def id(self) -> int:
        """CPython's id of this interpreter; known once it has started."""
        return self._started_worker().id

    def info(self) -> InterpreterInfo:
        """This interpreter as get_current()/list_all() describe it (once started)."""
        return InterpreterInfo(self.id, False, True)

    def get_ident(self) -> int:
        """``threading.get_ident()`` of the OS thread that runs this interpreter's tasks."""
        return self._started_worker().ident

    def is_alive(self) -> bool:
        """True from start until close: the interpreter exists and serves tasks."""
        worker = self._worker()
        return (
            worker is not None
            and worker.state == "ready"
            and self._state is _lifecycle.PoolState.RUNNING
        )

    def is_running(self) -> bool:
        """True while a task runs in it (False while idle, queued work does not count)."""
        worker = self._worker()
        return worker is not None and worker.current_task != 0

    @property
    def task(self) -> Task | None:
        """The Task running in this interpreter now, or None when idle.

        None also when the running task was submitted from another thread's
        loop and has been dropped there already.
        """
        worker = self._worker()
        if worker is None or self._tasks is None:
            return None
        tid = worker.current_task
        return self._tasks.get(tid) if tid else None

    def submit_exec(self, source: str) -> Task:
        if not isinstance(source, str):
            raise TypeError(f"exec() takes Python source as str, got {type(source).__name__}")
        return self._submit(_core.JOB_KIND_EXEC, source, "exec")

    async def exec(self, source: str) -> None:
        """Execute Python source in this interpreter's ``__main__`` namespace.

        Names it defines stay there for later ``exec`` calls. An exception is
        re-raised here as for run().

        Cancellation: as run().
        """
        await self.submit_exec(source)


def _is_coroutine_function(fn: object) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def _name_of(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


async def run(fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
    """Run fn(*args, **kwargs) in the running loop's default interpreter pool.

    The default pool has one interpreter per CPU, starts on first use and is
    closed when the loop shuts down (asyncio.run does this) or at exit. Its
    ``fallback`` comes from the environment variable ``AIOSUBINTERP_FALLBACK``
    (``copy``, ``process`` or ``copy,process``; unset: None).

    Cancellation: as InterpreterPool.run().
    """
    loop = _hub.running_loop("aiosubinterp.run()")
    hub = _hub.hub_for(loop)
    pool = hub.default_pool
    if pool is None or pool.closed:
        pool = hub.default_pool = InterpreterPool(fallback=_default_fallback())
    return await pool.submit(fn, *args, **kwargs)


def _default_fallback() -> str | tuple[str, ...] | None:
    """The default pool's fallback, from AIOSUBINTERP_FALLBACK; a clear error for a bad value."""
    raw = os.environ.get("AIOSUBINTERP_FALLBACK", "").strip()
    if not raw:
        return None
    tiers = tuple(part.strip() for part in raw.split(","))
    value: str | tuple[str, ...] = tiers[0] if len(tiers) == 1 else tiers
    try:
        _fallback.parse(value)
    except ValueError as exc:
        raise ValueError(
            f"the environment variable AIOSUBINTERP_FALLBACK={raw!r} is not a "
            "fallback: use copy, process or copy,process (or unset it). "
            f"{exc}"
        ) from None
    return value
