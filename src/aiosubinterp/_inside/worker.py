"""What runs inside a worker interpreter: setup, running jobs (marshal.Resolver finds them).

Worker-side module: it must not import asyncio or uvloop (uvloop refuses to
load in a subinterpreter; 3.12.1 aborts at exit after one imported asyncio).
"""

import os
import sys

from aiosubinterp import _core
from aiosubinterp._inside import marshal as _marshal

# Imported in every worker at start-up, so it imports little: not
# `from __future__ import annotations` (the __future__ module), `types` or
# `importlib` (~0.4-0.7 ms each of every interpreter's start); _errors only
# when something fails (see _errors_module()).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import types
    from typing import Any


async def _coroutine_function() -> None:
    pass


_probe = _coroutine_function()
_CoroutineType = type(_probe)
_probe.close()
del _probe


def _errors_module():
    from aiosubinterp import _errors

    return _errors


def refusal_from(exc: BaseException):
    """_errors.refusal_from, imported on first use."""
    return _errors_module().refusal_from(exc)


__all__ = [
    "REFUSED_ON_312",
    "REFUSED_ON_313",
    "Runner",
    "coroutine_refusal",
    "coroutines_supported",
    "describe_exception",
    "load_contextvars",
    "task_id_var",
]

# Called by C when Runner() raised (the contract at the top of ext/worker.pxi).
describe_exception = _marshal.describe_exception

# The ContextVar holding the id of the task running in this context (Task.id in
# main), or None. Set by Runner for a task's duration while log records are
# forwarded (their ``task_id``) or the pool has context_vars; a coroutine
# task's asyncio task copies it, so concurrent coroutines each see their own.
# Made on first use (load_contextvars): a worker that needs neither does not
# even import _contextvars.
task_id_var: "Any" = None
_copy_context: "Any" = None


def load_contextvars() -> "Any":
    """task_id_var, made (with what Runner needs of _contextvars) on first use."""
    global task_id_var, _copy_context
    if task_id_var is None:
        # The builtin module itself: `contextvars` only re-exports it.
        from _contextvars import ContextVar, copy_context

        _copy_context = copy_context
        task_id_var = ContextVar("aiosubinterp.task_id", default=None)
    return task_id_var


# On 3.12.1 CPython runs a single-phase extension's init function inside the
# subinterpreter before refusing it, which corrupts the heap: the process
# aborts at exit ("free(): invalid pointer"). Refuse the well-known ones
# before CPython touches them. 3.13 refuses cleanly and needs no list.
REFUSED_ON_312 = frozenset(
    {
        "readline",
        "_curses",
        "_curses_panel",
        "curses",
        "_ctypes",
        "ctypes",
        "pyexpat",
        "_lsprof",
        "cProfile",
        "uvloop",
        "numpy",
    }
)


# On 3.13+ CPython still runs a single-phase extension's init inside the
# subinterpreter before it refuses the module, and these stdlib ones set
# process-wide state there: readline's init sets up GNU readline and the
# terminal, _curses's keeps a static pointer to the module dict it fills. Two
# workers importing one at once raced on that state (3.13t once gave a worker
# a `curses` without COLOR_RED). Refused before CPython touches them.
REFUSED_ON_313 = frozenset({"readline", "_curses", "_curses_panel"})


class _RefuseKnown:
    """Meta-path finder that refuses known single-phase extensions before their init runs."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if name in self.names or top in self.names:
            raise ImportError(
                f"module {name} does not support loading in subinterpreters", name=name
            )
        return None


def coroutines_supported() -> bool:
    """Whether coroutines may run on an event loop inside a worker on this CPython."""
    return sys.version_info >= (3, 13)


def coroutine_refusal(what: str) -> str:
    import platform

    return (
        f"cannot run {what} inside an interpreter on CPython {platform.python_version()}: "
        'CPython 3.12 aborts the process at exit ("munmap_chunk(): invalid pointer") once an '
        "asyncio event loop ran in a subinterpreter. Use CPython 3.13 or newer, or await the "
        "coroutine in the main interpreter and send only its synchronous CPU work to the pool."
    )


class Runner:
    """Per-worker state: setup, its resolver (with the function cache), the job dispatcher.

    A job whose function returns a coroutine (an ``async def`` function) runs
    it to completion on an asyncio event loop owned by this worker, created on
    first use and kept for the worker's life. While it runs, cancellation
    arrives as a byte on a wake pipe (ext/worker.pxi routes it there) and is
    turned into ``Task.cancel()`` on the coroutine, so it can clean up.

    With concurrency > 1 such a coroutine opens a *session*: while the
    worker's loop runs it, the worker takes more jobs from the queue (up to
    `concurrency` at once), woken through the same pipe when jobs arrive; each
    finished job is posted at once. The session ends when nothing runs and
    nothing is queued, and the worker goes back to its C job loop.

    The C job loop and this class call each other: the block comment at the
    top of ext/worker.pxi lists every call either side makes, when, what it
    returns and who owns the job at each step. All run on the worker's thread
    holding its interpreter's GIL. The C side calls ``Runner(setup, handle)``
    (setup), ``apply_settings``, ``run``, ``describe``,
    ``describe_unsendable_result``, ``describe_minimal`` and ``shutdown``;
    this class calls the ``_core._worker_*`` functions with ``handle``.

    Thread-safety: one worker thread only (its own interpreter's).
    """

    def __init__(self, setup: tuple[object, ...], handle: int = 0) -> None:
        """Called by C (_worker_main) once, before the worker is ready.

        setup is (main_ref, preload, initializer, settings[, logs[, copies]]);
        logs is None or what _inside.logs.Forwarder takes (forward_logging);
        copies is None or the folder, new for this interpreter, where
        fallback="copy" puts private copies of refusing extension modules
        (_inside.copies). handle is
        the worker's C state (0: no worker; a coroutine job is then refused).
        Raising fails the worker's start with that exception's description.
        """
        main_ref, preload, initializer, settings = setup[:4]
        logs = setup[4] if len(setup) > 4 else None
        copies = setup[5] if len(setup) > 5 else None
        self._handle = handle
        self._loop = None  # the worker's asyncio loop, made on the first coroutine
        self._wake: tuple[int, int] | None = None  # (read, write) pipe for cancel messages
        self._current = None  # the asyncio.Task of the coroutine job running now
        self._concurrency = _core._worker_concurrency(handle) if handle else 1
        self._session: dict[int, object] | None = None  # tid -> asyncio.Task while serving
        self._session_done = None  # future the loop runs until, while serving
        self._resolver = _marshal.Resolver(main_ref)
        # While run() runs a job: (task id, token of task_id_var), or the context
        # the job's own was copied from (context_vars), for _event_loop().
        self._token: object = None
        self._outside: object = None
        self._logs = None
        if logs is not None:
            from aiosubinterp._inside.logs import Forwarder

            self._logs = Forwarder(logs)
        self._resolver.install()
        refused = REFUSED_ON_312 if sys.version_info[:2] == (3, 12) else REFUSED_ON_313
        sys.meta_path.insert(0, _RefuseKnown(refused))
        self._copies = None
        if copies is not None:
            from aiosubinterp._inside import copies as _copies

            # First: it decides for extension modules, and refuses
            # single-phase ones before their init runs (3.13+ only).
            self._copies = _copies.install(copies)
        if settings is not None:
            self.apply_settings(settings)
        for name in preload:
            try:
                _marshal.import_module(name)
            except BaseException as exc:
                refused = refusal_from(exc)
                if refused is not None:
                    raise refused from exc
                raise
        if initializer is not None:
            # No job is dispatched yet: an async initializer runs to its end
            # here, whatever the concurrency (a session needs a job).
            self.run(_marshal.JOB_CALL, initializer, session=False)
        if self._logs is not None:
            # After the initializer: logging (or warnings) it configured is kept.
            self._logs.maybe_install()
            self._logs.install_warnings()

    def apply_settings(self, settings: tuple[object, ...]) -> None:
        """Called by C before a job when main's settings changed: (sys.path[, output]).

        output: bit 1 (stdout) and 2 (stderr) set when main's stream is not
        the process's own, so what this worker writes goes to main's (through
        the log channel; _inside.logs.Forwarder.set_output). Raising fails
        that job; the next job tries again.
        """
        path = settings[0]
        # No importlib.invalidate_caches(): new entries have no cached finder
        # yet, and on 3.13 it imports importlib.metadata (~40 ms, 88 modules).
        sys.path[:] = path  # type: ignore[index]
        if len(settings) > 1 and self._logs is not None:
            self._logs.set_output(settings[1])  # type: ignore[arg-type]

    def _tracks_tasks(self) -> bool:
        """Whether jobs set task_id_var: while records are forwarded to main."""
        logs = self._logs
        return logs is not None and logs.forwarding

    def _set_context(self, context: object, tid: int) -> None:
        """In a job's own context: task_id_var and each variable the caller had set."""
        if tid:
            task_id_var.set(tid)
        for module, name, value in context:  # type: ignore[attr-defined]
            self._resolver.context_var(module, name).set(value)

    def run(self, kind: int, payload: object, session: bool = True) -> object:
        """Called by C for the dispatched job: its value, or raises its error.

        A coroutine runs here to its end (concurrency 1, or session=False: the
        initializer), or opens a session that posts the job itself and
        returns None (concurrency > 1).
        """
        fn, args, kw, context = self._resolver.job(kind, payload)
        logs = self._logs
        if logs is not None and logs.pending and session:  # not for the initializer
            logs.maybe_install()
        if context is None and (logs is None or not logs.forwarding):
            return self._call(fn, args, kw, session)
        tid = _core._worker_current_task(self._handle) if self._handle else 0
        if task_id_var is None:
            load_contextvars()
        if context is None:  # only the task id: set, and reset after
            self._token = (tid or None, task_id_var.set(tid or None))
            try:
                return self._call(fn, args, kw, session)
            finally:
                entered, self._token = self._token, None
                task_id_var.reset(entered[1])  # type: ignore[index]
        # context_vars: the job runs in a copy of this context, as an asyncio
        # task does, so whatever it sets (the caller's values, its own) is
        # gone after it, and a variable the caller had not set is unset here.
        outside = self._outside = _copy_context()
        try:
            return outside.copy().run(self._call_in, context, tid, fn, args, kw, session)
        finally:
            self._outside = None

    def _call_in(self, context: object, tid: int, fn, args, kw, session: bool) -> object:
        self._set_context(context, tid)
        return self._call(fn, args, kw, session)

    def _call(self, fn, args, kw, session: bool) -> object:
        """run()'s call: fn's value, or its coroutine run here (or in a session)."""
        try:
            result = fn(*args, **kw) if kw else fn(*args)
        except ImportError as exc:
            refused = refusal_from(exc)
            if refused is not None:
                raise refused from exc
            raise
        if type(result) is _CoroutineType:
            if self._concurrency > 1 and session:
                self.serve(result)
                return None  # posted by the session
            return self.run_coroutine(result)
        return result

    def _event_loop(self):
        """This worker's asyncio loop and wake pipe, made on first use."""
        import asyncio

        loop = self._loop
        if loop is None:
            loop = asyncio.new_event_loop()
            rfd, wfd = os.pipe()
            os.set_blocking(rfd, False)
            os.set_blocking(wfd, False)
            self._loop, self._wake = loop, (rfd, wfd)
            # The reader's callback runs in a copy of the context current
            # here, for the loop's whole life: not in the one of the job that
            # happens to make the loop (a session's later jobs take theirs).
            outside, entered = self._outside, self._token
            if outside is not None:
                outside.run(loop.add_reader, rfd, self._on_wake)  # type: ignore[attr-defined]
            else:
                if entered is not None:
                    task_id_var.reset(entered[1])  # type: ignore[index]
                try:
                    loop.add_reader(rfd, self._on_wake)
                finally:
                    if entered is not None:
                        tid = entered[0]  # type: ignore[index]
                        self._token = (tid, task_id_var.set(tid))
        return loop

    # -- sessions: several coroutine jobs at once (concurrency > 1) ------------

    def serve(self, coro: "types.CoroutineType[object, object, object]") -> None:
        """Run coro, the dispatched job, and every job that joins it, until none is left."""
        if not coroutines_supported():
            coro.close()  # never started: no event loop, no asyncio import
            raise RuntimeError(coroutine_refusal(f"coroutine {coro.__qualname__}()"))
        loop = self._event_loop()
        tid = _core._worker_session_begin(self._handle, self._wake[1])  # type: ignore[index]
        self._session = {}
        self._session_done = loop.create_future()
        try:
            self._start(tid, coro)
            self._session_poll()
            while not self._session_done.done():
                try:
                    loop.run_until_complete(self._session_done)
                except BaseException:  # noqa: BLE001
                    # A task ended in KeyboardInterrupt or SystemExit, which asyncio
                    # re-raises out of the loop; its done-callback still reports it.
                    continue
        finally:
            self._session = None
            self._session_done = None
            _core._worker_session_end(self._handle, self)

    def _start(self, tid: int, coro: "types.CoroutineType[object, object, object]") -> None:
        task = self._loop.create_task(coro)  # type: ignore[union-attr]
        self._session[tid] = task  # type: ignore[index]
        task.add_done_callback(lambda t, tid=tid: self._finished(tid, t))

    def _finished(self, tid: int, task) -> None:
        import asyncio

        session = self._session
        if session is None or session.pop(tid, None) is None:
            return
        if task.cancelled():
            self._complete(tid, asyncio.CancelledError(), None, True)
        elif (exc := task.exception()) is not None:
            self._complete(tid, exc, None, isinstance(exc, KeyboardInterrupt))
        else:
            self._complete(tid, None, task.result(), False)
        self._session_poll()

    def _complete(self, tid: int, failure, value, cancelled: bool) -> None:
        _core._worker_complete(self._handle, tid, failure, value, cancelled, self)

    def _session_poll(self) -> None:
        """Cancel what main asked to, take what is queued; end when idle."""
        session, done = self._session, self._session_done
        if session is None or done is None or done.done():
            return
        for tid in _core._worker_cancels(self._handle):
            task = session.get(tid)
            if task is not None:
                task.cancel()
        while (item := _core._worker_take(self._handle)) is not None:
            self._take(*item)
        if not session:
            done.set_result(None)

    def _take(self, tid: int, kind: int, ok: bool, payload: object, settings: object) -> None:
        if settings is not None:
            self.apply_settings(settings)  # type: ignore[arg-type]
        if not ok:
            self._complete(tid, payload, None, False)
            return
        try:
            fn, args, kw, context = self._resolver.job(kind, payload)
            if self._logs is not None and self._logs.pending:
                self._logs.maybe_install()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            self._failed(tid, exc)
            return
        if context is not None:
            # In a copy of the context outside the session's first job (run()
            # is still running it): this may run in a job's done-callback.
            if task_id_var is None:
                load_contextvars()
            base = self._outside if self._outside is not None else _copy_context()
            base.copy().run(self._take_call, tid, fn, args, kw, context)  # type: ignore[attr-defined]
        elif self._tracks_tasks():
            var = task_id_var or load_contextvars()
            token = var.set(tid)
            try:
                self._take_call(tid, fn, args, kw, None)
            finally:
                var.reset(token)
        else:
            self._take_call(tid, fn, args, kw, None)

    def _take_call(self, tid: int, fn, args, kw, context: object) -> None:
        try:
            if context is not None:
                self._set_context(context, tid)
            result = _core._worker_call_guarded(self._handle, tid, fn, args, kw)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            self._failed(tid, exc)
            return
        if type(result) is _CoroutineType:
            self._start(tid, result)  # its asyncio task copies this context
        else:
            self._complete(tid, None, result, False)

    def _failed(self, tid: int, exc: BaseException) -> None:
        refused = refusal_from(exc) if isinstance(exc, ImportError) else None
        if refused is not None:
            refused.__cause__ = exc
            exc = refused
        self._complete(tid, exc, None, isinstance(exc, KeyboardInterrupt))

    def run_coroutine(self, coro: "types.CoroutineType[object, object, object]") -> object:
        """Run coro on this worker's event loop until it finishes; cancellable from main."""
        if not coroutines_supported():
            coro.close()  # never started: no event loop, no asyncio import
            raise RuntimeError(coroutine_refusal(f"coroutine {coro.__qualname__}()"))
        # Lazy: asyncio is imported only by workers that run coroutines.
        import asyncio

        loop = self._event_loop()
        if not self._handle:
            coro.close()
            raise RuntimeError("aiosubinterp: Runner.run_coroutine() needs a worker handle")
        task = None
        try:
            # From here a cancel from main is a byte on the wake pipe (no
            # KeyboardInterrupt lands in the loop's own code).
            _core._worker_set_wake(self._handle, self._wake[1])  # type: ignore[index]
            task = self._current = loop.create_task(coro)
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            if (
                task is not None
                and task.cancelled()
                and _core._worker_cancel_requested(self._handle)
            ):
                # The engine reports a cancelled job when KeyboardInterrupt ends it.
                raise KeyboardInterrupt from None
            raise
        finally:
            _core._worker_set_wake(self._handle, -1)
            self._current = None
            if task is None:
                coro.close()  # an earlier injected KeyboardInterrupt fired before it started
            elif not task.done():
                task.cancel()  # same, after create_task: it must not run in a later job
        return task.result()

    def _on_wake(self) -> None:
        try:
            os.read(self._wake[0], 4096)  # type: ignore[index]
        except BlockingIOError:
            pass
        if self._session is not None:
            self._session_poll()
            return
        task = self._current
        # A byte can be stale (written just after the previous job ended): ask.
        if task is not None and _core._worker_cancel_requested(self._handle):
            task.cancel()

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        import asyncio

        try:
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            if self._wake is not None:
                loop.remove_reader(self._wake[0])
            loop.close()
            if self._wake is not None:
                for fd in self._wake:
                    os.close(fd)
                self._wake = None

    def describe(self, exc: BaseException) -> tuple[object, ...]:
        """Called by C to post a job's error: describe_exception(exc)."""
        return describe_exception(exc)

    def describe_unsendable_result(self, value: object, exc: BaseException) -> tuple[object, ...]:
        """Called by C when a job's value would not encode (exc says why)."""
        err = _errors_module().NotShareableError(
            f"the task returned a {type(value).__name__}, which cannot be sent back to the "
            f"caller: {type(exc).__name__}: {exc}. Return plain data (or a picklable object)."
        )
        return describe_exception(err)

    def describe_minimal(self, exc: BaseException) -> tuple[object, ...]:
        """Called by C when describe() failed: type and repr only."""
        return (f"{type(exc).__module__}.{type(exc).__qualname__}", repr(exc), "", None, None)

    def shutdown(self, grace: float = 0.0) -> str | None:
        """Called by C once, after the worker's last job: close its event loop, and
        wait at most ``grace`` seconds for the threads tasks started here.

        Returns None when none runs any more, else a text naming those still
        running: C then abandons the interpreter rather than end it (CPython's
        Py_EndInterpreter would join them without bound, or abort).
        """
        try:
            self._close_loop()
        finally:
            self._resolver.uninstall()
            if self._logs is not None:
                self._logs.shutdown()
        return wait_for_threads(grace)


def wait_for_threads(grace: float) -> str | None:
    """Join the other threads of this interpreter for at most grace seconds.

    None if they all ended, else what is left: "2 threads ('name', 1 started
    with _thread)". `threading` threads are joined; `_thread` ones (no
    object to join) are counted by _thread._count() until it reaches 0.
    """
    import _thread
    import time

    deadline = time.monotonic() + grace
    me = _thread.get_ident()
    threading = sys.modules.get("threading")  # not imported: no threading thread exists
    others = []
    if threading is not None:
        # Not main_thread(): threading is imported while the interpreter is
        # made, so its "main thread" is the creating thread of the main
        # interpreter, which never runs here again (and never ends).
        main = threading.main_thread()
        # A dummy one (a _thread thread that asked for its object) cannot be
        # joined (RuntimeError on 3.13, AssertionError on 3.12): counted below.
        others = [
            t
            for t in threading.enumerate()
            if t.ident != me and t is not main and not isinstance(t, threading._DummyThread)
        ]
        for t in others:
            try:
                t.join(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - a subclass's join(): report it below
                pass
    # A poll: a _thread thread leaves nothing to wait on. Rare, and bounded.
    while _thread._count() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.005)
    named = [t for t in others if t.is_alive()]
    total = max(_thread._count(), len(named))  # type: ignore[attr-defined]
    if not total:
        return None
    parts = [repr(t.name) for t in named]
    if total > len(named):
        parts.append(f"{total - len(named)} started with _thread")
    return f"{total} thread{'s' if total != 1 else ''} ({', '.join(parts)})"
