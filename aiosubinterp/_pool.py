"""InterpreterPool and Interpreter: interpreters with their own GIL, awaited from asyncio."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, Self, cast

from aiosubinterp import _admin, _core, _loop, _marshal, _procfallback, _worker
from aiosubinterp._errors import (
    BrokenPoolError,
    ForkWarning,
    NotShareableError,
    PoolClosedError,
    rebuild,
)
from aiosubinterp._interpreters import InterpreterInfo
from aiosubinterp._task import Task
from aiosubinterp._worker import coroutine_refusal, coroutines_supported, describe_exception

__all__ = ["Interpreter", "InterpreterPool", "default_size", "run"]

_task_ids = itertools.count(1)

# CPython bugs that crash the process when a C accelerator is imported in two
# or more interpreters (see CPYTHON-NOTES): workers use the pure-Python twin.
#   _datetime: heap corruption on 3.12.1 and 3.13.0 (gh-136421), also hit by
#              sqlite3, zoneinfo, http.client, urllib.request.
#   _zoneinfo: needs _datetime's C API; blocked with it so zoneinfo falls back.
#   _decimal:  double free on 3.12.1 (single-phase init runs before refusal).
#   _hashlib:  free(): invalid pointer at exit on 3.12.1; hashlib falls back
#              to its builtin _md5/_sha1/_sha2/_sha3/_blake2 modules.
#   _pickle:   any pickle.dumps in a 3.12.1 subinterpreter aborts the process
#              at exit (free(): invalid pointer); the pure-Python pickle is safe.
_BLOCKED_BY_VERSION: dict[tuple[int, int], tuple[str, ...]] = {
    (3, 12): ("_datetime", "_zoneinfo", "_decimal", "_hashlib", "_pickle"),
    (3, 13): ("_datetime", "_zoneinfo"),
}


_COROUTINES = coroutines_supported()  # fixed for the process: checked at every submit
# Coroutines one interpreter may run at once (each slot is a few bytes; the
# bound catches a typo such as 10**6 before it allocates).
_MAX_CONCURRENCY = 10_000

def blocked_modules() -> tuple[str, ...]:
    """C accelerators kept out of workers on this CPython (their pure-Python twins are used)."""
    return _BLOCKED_BY_VERSION.get(sys.version_info[:2], ())


# -- shim: CPython 3.12.0-3.12.3, gh-119213 (fixed in 3.12.4) ------------------
# The first call with keyword arguments of an Argument Clinic function of an
# extension module (math.isclose(rel_tol=...), zlib.compress(level=...),
# SimpleQueue.get(block=...)) caches its keyword names in a process-wide
# struct, as a tuple allocated by the calling interpreter. Made in a worker,
# the tuple dangles once that worker is destroyed: heap corruption, abort at
# exit. Making those first calls in main, before any worker starts, keeps the
# tuples in memory that lives as long as the process. Each call passes a
# bogus keyword, so it fails right after the cache is filled, doing nothing.
_PRIME_ARG_PARSERS = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 4)
_PRIME_SKIP = ("_test", "xx", "_xx", "_tkinter", "_ctypes_test", "readline", "_curses",
               "audioop", "nis", "spwd", "ossaudiodev", "_crypt")
# Objects whose methods take keywords on the stdlib's own paths (concurrent.futures,
# gzip, bz2, lzma, selectors); methods can only be primed on an instance.
_PRIME_INSTANCES = (("_queue", "SimpleQueue"), ("zlib", "compressobj"), ("zlib", "decompressobj"),
                    ("_bz2", "BZ2Decompressor"), ("_lzma", "LZMADecompressor"), ("select", "poll"),
                    ("select", "epoll"), ("_random", "Random"), ("_struct", "Struct"))
_primed = False
_prime_lock = threading.Lock()


def _prime_arg_parsers() -> None:
    global _primed
    with _prime_lock:
        if _primed or not _PRIME_ARG_PARSERS:
            return
        _primed = True
        import importlib
        import importlib.machinery
        import importlib.util

        spec = importlib.util.find_spec("_json")
        folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        names = sorted({f.split(".", 1)[0] for f in (os.listdir(folder) if folder else ())
                        if f.endswith(suffixes)})
        skip = set(blocked_modules()) | _worker.REFUSED_ON_312
        for name in names:
            if name.startswith(_PRIME_SKIP) or name in skip:
                continue
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - missing library: workers cannot use it either
                continue
            for obj in list(vars(module).values()):
                if callable(obj) and (isinstance(obj, type) or type(obj).__name__ ==
                                      "builtin_function_or_method"):
                    _prime_call(obj)
        for name, factory in _PRIME_INSTANCES:
            try:
                obj = getattr(importlib.import_module(name), factory)(
                    *(("i",) if factory == "Struct" else ()))
            except Exception:  # noqa: BLE001
                continue
            for attr in dir(type(obj)):
                if not attr.startswith("__"):
                    _prime_call(getattr(obj, attr))
            if hasattr(obj, "close"):
                obj.close()


def _prime_call(fn: object) -> None:
    if callable(fn):
        try:
            fn(_aiosubinterp_prime_=None)
        except Exception:  # noqa: BLE001 - the expected TypeError
            pass


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


def default_size() -> int:
    """Default number of interpreters: the CPUs this process may use."""
    count = getattr(os, "process_cpu_count", os.cpu_count)()
    return max(1, count or 1)


def _main_ref() -> tuple[str, str] | None:
    """How a worker finds the user's script: by module name (-m) or by file."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) not in (None, "__main__"):
        return ("module", spec.name)
    path = getattr(main, "__file__", None)
    if isinstance(path, str) and path.endswith(".py"):
        return ("path", os.path.abspath(path))
    return None


def _check_names(preload: object) -> tuple[str, ...]:
    if isinstance(preload, str):
        raise TypeError(f"preload must be an iterable of module names, not the string {preload!r}: "
                        f"write preload=({preload!r},)")
    try:
        names: tuple[object, ...] = tuple(preload)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError("preload must be an iterable of module names, got "
                        f"{type(preload).__name__}") from None
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"preload must contain module names (str), got {name!r}")
    return cast("tuple[str, ...]", names)  # every item checked just above


async def start_or_release(pool: Any) -> None:
    """pool.start() for ``async with`` (both backends).

    When it fails, the caller never gets the pool to close: close it here,
    waiting for what did start unless the start itself was interrupted.
    """
    try:
        await pool.start()
    except Exception:
        await pool.aclose()
        raise
    except BaseException:
        pool.close()
        raise


_live: weakref.WeakSet[Any] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked child has none of the parent's worker threads, and CPython
    # deleted its subinterpreters: the exit-time sweep must not wait for (or
    # interrupt) them, or the child hangs 5 s and exits 70. Pools refuse work
    # in the child (see _check_open).
    import atexit

    atexit.unregister(_core._shutdown_all)


_fork_warned = False


def _before_fork() -> None:
    # CPython kills a child forked while any subinterpreter exists, ours or
    # not, in its after-fork code (measured with the stdlib's _interpreters
    # alone: 3.13.0-3.13.18 abort with "Fatal Python error: PyThreadState_Get",
    # 3.14.10 and 3.15.2 segfault, 3.12.1 hangs). Say so before it happens,
    # once per process. A warning, not an error: the parent is unharmed, and a
    # child that only calls exec() at once may survive on some versions.
    global _fork_warned
    if _fork_warned:
        return
    others = len(_core.list_interpreter_ids()) - 1
    if others <= 0:
        return
    _fork_warned = True
    warnings.warn(ForkWarning(
        f"fork() with {others} live subinterpreter{'s' if others != 1 else ''} in this process "
        "(os.fork(), multiprocessing's 'fork' start method, uvloop spawning a subprocess): "
        "CPython cannot fork next to subinterpreters and the child will most likely die in "
        "CPython's after-fork code (a CPython limit, not a bug of your code). Use the 'spawn' "
        "or 'forkserver' start method (multiprocessing.get_context('spawn')), "
        "aiosubinterp.ProcessPool, asyncio's own loop for subprocesses, or close your pools "
        "before forking. This process and its pools are not affected."), stacklevel=2)


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


class _Engine:
    """Interpreters serving one job queue. Base of InterpreterPool and Interpreter."""

    _kind = "pool"
    _fallback: _procfallback.Fallback | None = None  # fallback="process" routes submit() here

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
    ) -> None:
        if not _core.is_main_interpreter():
            raise RuntimeError(
                f"{type(self).__name__} can only be created in the main interpreter, and this "
                f"code runs in worker interpreter {_core.current_interpreter_id()}. If a worker "
                "imported your script to find a function, guard the script's top-level code "
                "with `if __name__ == '__main__':`."
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int (number of interpreters), got {size!r}")
        names = _check_names(preload)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be callable or None, got "
                            f"{type(initializer).__name__}")
        if not isinstance(initargs, tuple):
            raise TypeError(f"initargs must be a tuple, got {type(initargs).__name__}")
        if max_tasks_per_interpreter is not None and (
            isinstance(max_tasks_per_interpreter, bool)
            or not isinstance(max_tasks_per_interpreter, int)
            or max_tasks_per_interpreter < 1
        ):
            raise ValueError(
                "max_tasks_per_interpreter must be None or a positive int, "
                f"got {max_tasks_per_interpreter!r}"
            )
        if (isinstance(cancel_grace, bool) or not isinstance(cancel_grace, (int, float))
                or not cancel_grace >= 0):  # NaN too: it would make a cancel wait forever
            raise ValueError("cancel_grace must be a non-negative number of seconds, got "
                             f"{cancel_grace!r}")
        if (isinstance(concurrency_per_interpreter, bool)
                or not isinstance(concurrency_per_interpreter, int)
                or not 1 <= concurrency_per_interpreter <= _MAX_CONCURRENCY):
            raise ValueError(
                "concurrency_per_interpreter must be an int from 1 to "
                f"{_MAX_CONCURRENCY} (coroutines one interpreter runs at once), "
                f"got {concurrency_per_interpreter!r}"
            )
        if idle_spin is not None and (isinstance(idle_spin, bool)
                                      or not isinstance(idle_spin, (int, float))
                                      or not 0 <= idle_spin <= 1):
            raise ValueError(
                "idle_spin must be None (the default, 100 microseconds) or a number of seconds "
                "from 0 to 1 an idle interpreter polls for work before it sleeps, got "
                f"{idle_spin!r}"
            )
        if concurrency_per_interpreter > 1 and not coroutines_supported():
            raise RuntimeError(coroutine_refusal("coroutines (concurrency_per_interpreter > 1)"))
        init_payload = None
        if initializer is not None:
            init_payload = _marshal.call_payload(initializer, initargs, {})
            try:
                _core.dumps(init_payload)
            except Exception as exc:
                raise _marshal.explain_unshareable(initializer, initargs, {}, exc) from exc
        self._size = size
        self._concurrency = concurrency_per_interpreter
        self._preload = names
        self._init_payload = init_payload
        self._max_tasks = max_tasks_per_interpreter or 0
        self._grace = float(cancel_grace)
        self._replace_stuck = replace_stuck
        self._queue = _core.Queue(_spin_seconds() if idle_spin is None else float(idle_spin))
        self._lock = threading.Lock()
        self._workers: dict[int, _core.Worker] = {}
        self._abandoned: list[_core.Worker] = []
        self._state = "new"  # new, starting, running, broken, closing, closed
        self._broken: BaseException | None = None
        self._started: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._closed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._path: list[str] | None = None
        self._submitted = 0
        self._replaced = 0
        self._setup: tuple[Any, ...] | None = None
        # Retirements reported before the worker was registered (a fresh
        # worker can serve max_tasks jobs before its starter thread resumes).
        self._retired_early: set[int] = set()
        # Replacement workers being started; a closing pool waits for them
        # (they serve what is still queued), signalled through _adds_done,
        # which also tells a cancel (_interrupt) that a worker was listed.
        self._pending_adds = 0
        self._adds_done = threading.Condition(self._lock)
        # Interpreter only: task id -> Task, so `interp.task` can name what runs.
        self._tasks: weakref.WeakValueDictionary[int, Task] | None = None
        self._pid = os.getpid()
        _live.add(self)

    # -- lifecycle -------------------------------------------------------------

    def _make_setup(self) -> tuple[Any, ...]:
        self._path = list(sys.path)
        return (_main_ref(), self._preload, self._init_payload, (tuple(self._path),))

    def _bootstrap(self) -> str:
        return _BOOTSTRAP.format(path=list(sys.path), blocked=blocked_modules())

    def _ensure_started(self) -> None:
        with self._lock:
            if self._state != "new":
                return
            self._state = "starting"
            self._setup = self._make_setup()
        _admin.spawn(self._start_all)

    def _new_worker(self) -> tuple[_core.Worker | None, BaseException | None]:
        """Create and start one worker (blocking). Returns (worker, None) or (None, error)."""
        _prime_arg_parsers()  # shim, see above
        worker = _core.Worker(self._queue, self._bootstrap(), self._setup, self._max_tasks,
                              self._concurrency)
        try:
            failure = worker.start()
        except BaseException as exc:  # noqa: BLE001
            return None, exc
        if failure is None:
            return worker, None
        if isinstance(failure, tuple):
            return None, rebuild(failure)
        return None, RuntimeError(f"an interpreter failed to start:\n{failure}")

    def _start_all(self) -> None:
        futures = [_admin.spawn(self._start_one) for _ in range(self._size)]
        errors = [err for err in (f.result() for f in futures) if err is not None]
        if not errors:
            with self._lock:
                if self._state == "starting":
                    self._state = "running"
            self._started.set_result(None)
            return
        cause = errors[0]
        broken = BrokenPoolError(
            f"the {self._kind} could not start its interpreters: {type(cause).__name__}: {cause}"
        )
        broken.__cause__ = cause
        with self._lock:
            self._broken = broken
            if self._state == "starting":
                self._state = "broken"
            workers = list(self._workers.values())
            self._workers.clear()
        self._queue.close()
        for w in workers:
            w.close()
        self._queue.fail_queued(describe_exception(broken))
        self._started.set_exception(broken)

    def _start_one(self) -> BaseException | None:
        """Start one worker and list it at once, so a task it runs can be cancelled."""
        try:
            worker, error = self._new_worker()
        except BaseException as exc:  # noqa: BLE001 - _start_all reports it: start() fails
            return exc
        if worker is None:
            return error
        with self._lock:
            usable = self._state in ("starting", "running", "closing")
            # When closing meanwhile, it still drains the queue first.
            retired = usable and not self._register(worker)
            if retired:
                self._pending_adds += 1
        if not usable:
            worker.close()
        elif retired:
            _admin.spawn(self._retire_and_replace, worker)
        return None

    async def start(self) -> None:
        """Create the interpreters now (off the loop thread) and wait until they are ready.

        Optional: the first submit starts them too. Raises BrokenPoolError if
        a preload import or the initializer fails.

        Cancellation: the interpreters keep starting; close() still cleans up.
        """
        loop = _loop.running_loop(f"{type(self).__name__}.start()")
        if self._state in ("closing", "closed"):
            raise PoolClosedError(f"this {self._kind} is closed: create a new one")
        self._ensure_started()
        await asyncio.shield(_admin.relay(self._started, loop))

    def close(self) -> None:
        """Stop accepting work; finish what was submitted, then destroy the interpreters.

        Returns at once; the interpreters are destroyed on a helper thread.
        ``await aclose()`` to wait for that. Idempotent.
        """
        if self._pid != os.getpid():
            # A forked child's copy: the interpreters belong to the parent;
            # joining their threads from here would hang. Just drop it.
            self._state = "closed"
            return
        with self._lock:
            state = self._state
            if state in ("closing", "closed"):
                return
            self._state = "closing"
        self._queue.close()
        if state == "new":
            self._finish_close()
        else:
            _admin.spawn(self._shutdown)

    def _shutdown(self) -> None:
        try:
            self._started.exception()  # wait until start-up settled
        except concurrent.futures.CancelledError:
            pass
        while True:
            with self._lock:
                while True:
                    workers = list(self._workers.values()) + self._abandoned
                    if workers or self._pending_adds == 0:
                        break
                    self._adds_done.wait()
                if not workers and self._queue.qsize() > 0 and self._broken is None:
                    # Every worker retired (max_tasks) with work still queued:
                    # start fresh ones to serve it, as a running pool would.
                    self._pending_adds += self._size
                    for _ in range(self._size):
                        _admin.spawn(self._add_worker)
                    continue
            if not workers:
                break
            for w in workers:
                w.close(drain=True)
                # Listed until destroyed, so a late cancel can still interrupt it.
                with self._lock:
                    if self._workers.get(w.serial) is w:
                        del self._workers[w.serial]
                    if w in self._abandoned:
                        self._abandoned.remove(w)
        self._finish_close()

    def _finish_close(self) -> None:
        self._queue.fail_queued(describe_exception(PoolClosedError(
            f"this {self._kind} was closed before the task could run")))
        with self._lock:
            self._state = "closed"
            self._adds_done.notify_all()
        if not self._started.done():
            self._started.set_exception(PoolClosedError(f"this {self._kind} is closed"))
        if not self._closed.done():
            self._closed.set_result(None)

    async def aclose(self) -> None:
        """Close and wait until every interpreter is destroyed.

        Submitted tasks run to completion first.

        Cancellation: if the wait is cancelled, the tasks still running are
        interrupted; the shutdown completes in the background.
        """
        loop = _loop.running_loop(f"{type(self).__name__}.aclose()")
        self.close()
        if self._pid != os.getpid():
            return
        done = _admin.relay(self._closed, loop)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self._interrupt_all()
            raise

    def _interrupt_all(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for w in workers:
            tid = w.current_task
            if tid:
                _admin.spawn(w.interrupt, tid)

    async def __aenter__(self) -> Self:
        await start_or_release(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        state = getattr(self, "_state", "closed")
        if state not in ("closed", "closing", "new"):
            warnings.warn(
                f"unclosed {self!r}: close it (async with, or await aclose()) to destroy "
                "its interpreters; they are destroyed at exit otherwise",
                ResourceWarning,
                source=self,
                stacklevel=2,
            )
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    # -- submitting --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._pid != os.getpid():
            raise RuntimeError(
                f"this {self._kind} was created in process {self._pid}, and this is a forked "
                f"child ({os.getpid()}): its interpreters and threads stayed in the parent. "
                "Create a new pool in the child, or use the 'spawn' or 'forkserver' start method."
            )
        state = self._state
        if state in ("closing", "closed"):
            raise PoolClosedError(f"this {self._kind} is closed: create a new one to run more work")
        if state == "broken":
            raise BrokenPoolError(str(self._broken)) from self._broken

    def _submit(self, kind: int, payload: object, name: str, fn: object = None,
                args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Task:
        loop = _loop.running_loop(f"{type(self).__name__}.submit()")
        self._check_open()
        hub = _loop.hub_for(loop)
        if self._path is not None and sys.path != self._path:
            path = list(sys.path)
            self._queue.set_settings((tuple(path),))  # raises for an entry that cannot cross
            self._path = path
        tid = next(_task_ids)
        try:
            self._queue.submit(tid, kind, payload, hub.core)
        except RuntimeError as exc:
            if self._queue.closed:  # closed between the check above and now
                self._check_open()
                raise
            # Otherwise encoding failed (a __reduce__ that raises RuntimeError).
            if fn is None:
                raise NotShareableError("cannot send the source text to an interpreter: "
                                        f"{exc}") from exc
            raise _marshal.explain_unshareable(fn, args, kwargs or {}, exc) from exc
        except (NotShareableError, MemoryError):
            raise
        except Exception as exc:
            if fn is None:
                raise NotShareableError("cannot send the source text to an interpreter: "
                                        f"{exc}") from exc
            raise _marshal.explain_unshareable(fn, args, kwargs or {}, exc) from exc
        task = Task(loop, self, tid, name, hub)
        hub.pending[tid] = task
        if self._tasks is not None:
            self._tasks[tid] = task
        self._submitted += 1
        if self._state == "new":
            self._ensure_started()
        return task

    def submit(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Task:
        """Schedule fn(*args, **kwargs) in an interpreter; return its Task at once.

        fn crosses by reference (module and name) and must be a module-level
        function, a builtin, or a picklable callable; arguments cross by copy.
        Raises NotShareableError here, before anything is queued, if they cannot.
        """
        if self._fallback is not None:  # InterpreterPool(fallback="process")
            return self._fallback.submit(self, fn, args, kwargs)
        return self._submit_here(fn, args, kwargs)

    def _submit_here(self, fn: Callable[..., object], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Task:
        """submit() in an interpreter, whatever the fallback (the fallback router's way in)."""
        if not _COROUTINES and _is_coroutine_function(fn):
            raise RuntimeError(coroutine_refusal(f"async function {_name_of(fn)}"))
        payload = _marshal.call_payload(fn, args, kwargs)
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        return self._submit(_core.JOB_KIND_CALL, payload, name, fn, args, kwargs)

    async def run(self, fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
        """Run fn(*args, **kwargs) in an interpreter and return its result.

        Like ``asyncio.to_thread``, but on another core: the function runs in
        an interpreter with its own GIL. Exceptions come back with their own
        type, caused by an ExecutionFailed that carries the remote traceback.

        If fn is an ``async def`` function (or returns a coroutine), the
        coroutine runs to completion on an asyncio event loop owned by the
        worker (CPython 3.13+; on 3.12 this raises RuntimeError at once,
        because 3.12 aborts at exit once a loop ran in a subinterpreter).

        Cancellation: a queued call is withdrawn; a running one is interrupted
        (KeyboardInterrupt inside it; a coroutine is cancelled instead, so its
        ``finally`` blocks and ``except CancelledError`` run on the worker's
        loop), and its worker is replaced if it does not stop within the
        grace period.
        """
        return await self.submit(fn, *args, **kwargs)

    def map(
        self,
        fn: Callable[..., object],
        iterable: Iterable[Any] | AsyncIterable[Any],
        *,
        ordered: bool = True,
        window: int | None = None,
    ) -> AsyncIterator[Any]:
        """Yield fn(item) for every item, computed in the interpreters.

        At most ``window`` calls are in flight (default: 8 per interpreter,
        at least 64), so a long or endless iterable streams. With
        ``ordered=False`` results come as they finish. The first failure is
        raised at its place and the calls still in flight are cancelled.

        Cancellation: closing or cancelling the iteration cancels every call in flight.
        """
        if window is None:
            window = max(64, 8 * self._size * self._concurrency)
        return windowed_map(self.submit, fn, iterable, ordered=ordered, window=window)

    # -- completions and cancellation (loop thread / helper threads) -----------

    def _cancel_task(self, task: Task) -> None:
        code, serial = self._queue.cancel(task._tid)
        if code == _core.CANCEL_CODE_WITHDRAWN:
            task._hub.pending.pop(task._tid, None)
        elif code == _core.CANCEL_CODE_RUNNING:
            _admin.spawn(self._interrupt, serial, task._tid)

    def _interrupt(self, serial: int, tid: int) -> None:
        # A worker serves jobs a moment before its starter lists it: wait
        # for it to appear (this runs on a helper thread, never the loop).
        deadline = time.monotonic() + max(self._grace, 1.0)
        with self._lock:
            while (worker := self._workers.get(serial)) is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._state == "closed":
                    return
                self._adds_done.wait(left)  # _register() and closing notify
        # A worker stuck in a C call keeps its GIL, so the interruption may
        # not get through: it waits at most the grace period, which it shares
        # with the wait for the task to stop.
        deadline = time.monotonic() + self._grace
        delivered = worker.interrupt(tid, self._grace)
        if (worker.wait_idle(tid, max(0.0, deadline - time.monotonic()))
                or not self._replace_stuck):
            return
        # The task ignores the interruption (blocked in C, or catching it):
        # give up on this worker and put a fresh one in its slot.
        with self._lock:
            if self._workers.pop(worker.serial, None) is None:
                return
            self._abandoned.append(worker)
            self._replaced += 1
            replace = self._state in ("starting", "running")
            if replace:
                self._pending_adds += 1
        worker.stop()
        if replace:
            self._add_worker()
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
        self._adds_done.notify_all()  # a cancel may wait for this worker (_interrupt)
        return True

    def _on_retired(self, serial: int) -> None:
        with self._lock:
            worker = self._workers.pop(serial, None)
            if worker is None and self._state in ("starting", "running"):
                self._retired_early.add(serial)
            # A closing pool still serves what is queued: a worker that
            # retires meanwhile is replaced while there is work left.
            replace = worker is not None and (
                self._state in ("starting", "running")
                or (self._state == "closing" and self._queue.qsize() > 0))
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
            worker.close()
        finally:
            self._add_worker()

    def _add_worker(self) -> None:
        """Start a replacement worker. The caller counted it in _pending_adds."""
        try:
            self._add_worker_counted()
        finally:
            with self._lock:
                self._pending_adds -= 1
                self._adds_done.notify_all()

    def _add_worker_counted(self) -> None:
        worker, error = self._new_worker()
        with self._lock:
            if worker is not None and self._state in ("starting", "running", "closing"):
                if not self._register(worker):
                    self._pending_adds += 1
                    _admin.spawn(self._retire_and_replace, worker)
                return
            alone = not self._workers
        if worker is not None:  # closed meanwhile
            worker.close()
            return
        if alone and error is not None:
            broken = BrokenPoolError(f"the {self._kind} lost its last interpreter: {error}")
            broken.__cause__ = error
            with self._lock:
                self._broken = broken
                if self._state == "running":
                    self._state = "broken"
            self._queue.fail_queued(describe_exception(broken))

    # -- introspection -----------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of interpreters."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._state in ("closing", "closed")

    def statistics(self) -> dict[str, int | str]:
        """A snapshot: size, concurrency, state, busy, running, queued, submitted, completed,
        replaced.

        ``busy`` counts interpreters running at least one call, ``running``
        the calls running (several per interpreter with
        ``concurrency_per_interpreter`` > 1).

        ``completed`` counts calls that ran to their end in a worker (with a
        result, an error, or interrupted by cancellation); withdrawn calls
        and calls failed because the pool closed or broke are not counted.
        """
        return {
            "size": self._size,
            "concurrency": self._concurrency,
            "state": self._state,
            "busy": self._queue.busy(),
            "running": self._queue.running(),
            "queued": self._queue.qsize(),
            "submitted": self._submitted,
            "completed": self._queue.completed(),
            "replaced": self._replaced,
        }

    def __repr__(self) -> str:
        return f"<aiosubinterp.{type(self).__name__} size={self._size} {self._state}>"


class InterpreterPool(_Engine):
    """A pool of interpreters, each with its own GIL and its own OS thread.

    Args:
        size: number of interpreters (default: the CPUs this process may use).
        preload: modules each interpreter imports at start, so the first
            task does not pay for them.
        initializer: a module-level function each interpreter calls once at
            start, with ``initargs``. If it raises, the pool is broken.
        max_tasks_per_interpreter: replace an interpreter after it ran this many tasks.
        cancel_grace: seconds a cancelled, running task gets to stop before its
            interpreter is given up and replaced.
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
        fallback: None (default), or ``"process"``: a task whose module refuses
            to load in a subinterpreter (ModuleRefusedError, e.g. numpy) runs
            again on a worker process (a ProcessPool of the same size, made on
            first need); a FallbackWarning says so once per module, and later
            tasks of that function's module go straight to the processes.

    Each interpreter runs one task at a time (or up to
    ``concurrency_per_interpreter`` coroutines); tasks are taken from one
    shared queue. Interpreters are created off the event loop, on first use or on
    ``await pool.start()`` / ``async with``.

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
        fallback: str | None = None,
    ) -> None:
        # fallback="process" (issue #8): aiosubinterp._procfallback
        self._fallback = _procfallback.make(
            fallback, size=default_size() if size is None else size, initializer=initializer,
            initargs=initargs, max_tasks=max_tasks_per_interpreter, cancel_grace=cancel_grace)
        super().__init__(
            default_size() if size is None else size,
            preload=preload,
            initializer=initializer,
            initargs=initargs,
            max_tasks_per_interpreter=max_tasks_per_interpreter,
            cancel_grace=cancel_grace,
            concurrency_per_interpreter=concurrency_per_interpreter,
            idle_spin=idle_spin,
        )
        router = self._fallback
        if router is not None:
            self._closed.add_done_callback(lambda _: router.close())

    # -- fallback="process" (issue #8): aiosubinterp._procfallback ----------------

    async def aclose(self) -> None:
        """Close and wait until every interpreter (and fallback process) is gone.

        Cancellation: as _Engine.aclose().
        """
        await super().aclose()
        if self._fallback is not None:
            await self._fallback.aclose()

    # -- end of fallback hooks -------------------------------------------------------


class Interpreter(_Engine):
    """One interpreter with its own GIL, and the OS thread that runs its tasks.

    State persists between calls (module globals, ``exec`` namespace): use it
    when tasks build on each other; use InterpreterPool to spread work.
    A cancelled task that ignores its interruption keeps this interpreter
    busy (it cannot be replaced without losing its state).

    Thread-safety: as InterpreterPool.
    """

    _kind = "interpreter"

    def __init__(
        self,
        *,
        preload: Iterable[str] = (),
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        super().__init__(1, preload=preload, initializer=initializer, initargs=initargs,
                         replace_stuck=False)
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
        return worker is not None and worker.state == "ready" and self._state == "running"

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


async def windowed_map(
    submit: Callable[..., asyncio.Future[Any]],
    fn: Callable[..., object],
    iterable: Iterable[Any] | AsyncIterable[Any],
    *,
    ordered: bool,
    window: int,
) -> AsyncIterator[Any]:
    """The loop behind every pool's map(): fn(item) through submit, at most
    ``window`` in flight, in order or as they finish; the first failure is
    raised at its place and the calls in flight are cancelled."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if not callable(fn):
        raise TypeError(f"map() needs a callable, got {type(fn).__name__}")
    if hasattr(iterable, "__aiter__"):
        source: Any = iterable.__aiter__()
        is_async = True
    else:
        source = iter(iterable)
        is_async = False
    inflight: collections.deque[asyncio.Future[Any]] = collections.deque()
    exhausted = False
    try:
        while True:
            while not exhausted and len(inflight) < window:
                try:
                    item = await source.__anext__() if is_async else next(source)
                except (StopIteration, StopAsyncIteration):
                    exhausted = True
                    break
                inflight.append(submit(fn, item))
            if not inflight:
                return
            if ordered:
                task = inflight.popleft()
                yield await task
            else:
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                for task in list(inflight):
                    if task in done:
                        inflight.remove(task)
                        yield task.result()
    finally:
        for task in inflight:
            task.cancel()


def _is_coroutine_function(fn: object) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def _name_of(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


async def run(fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> Any:
    """Run fn(*args, **kwargs) in the running loop's default interpreter pool.

    The default pool has one interpreter per CPU, starts on first use and is
    closed when the loop shuts down (asyncio.run does this) or at exit.

    Cancellation: as InterpreterPool.run().
    """
    loop = _loop.running_loop("aiosubinterp.run()")
    hub = _loop.hub_for(loop)
    pool = hub.default_pool
    if pool is None or pool.closed:
        pool = hub.default_pool = InterpreterPool()
    return await pool.submit(fn, *args, **kwargs)
