"""CPython workarounds, in one place: each with its bug, the versions it applies to, its test.

- C accelerators kept out of workers (``blocked_modules``; their pure-Python
  twins are used). Bugs: gh-136421 and the crashes listed below.
  Versions: 3.12, 3.13. Proved by: tests/test_stdlib_matrix.py (every
  exercise group, and test_datetime_shim_applies_exactly_where_cpython_still_crashes).
- With private copies (``fallback="copy"``) on 3.13, ``_datetime`` is
  imported in main and not blocked in workers (``blocked_modules(True)``):
  numpy, orjson and pydantic-core need its C API (orjson segfaulted without
  it), and gh-136421 does not strike once main imported it first. Proved by:
  tests/test_private_copies.py (every test exits 0). On 3.12 copies are
  refused (``_engine.fallback.copies_unavailable``): with ``_datetime``
  allowed there, 3.12.1 aborted at exit after copies of pydantic-core
  (several interpreters subclassing its static ``tzinfo``), SQLAlchemy, or
  numpy's test suite ran in two interpreters.
- Argument Clinic keyword caches primed in main (``prime_arg_parsers``).
  Bug: gh-119213. Versions: 3.12.0 to 3.12.3. Proved by:
  tests/test_stdlib_matrix.py::test_keyword_calls_of_c_functions_in_successive_pools.
- A ForkWarning before fork() next to live interpreters; a forked child's
  pools refuse work. Bug: CPython kills such a child in its after-fork code
  (measured on every version). Proved by: the fork tests of
  tests/stress/test_stress_lifecycle.py.
- ``_pickle`` imported in main before a pool's first task on free-threaded
  builds (``import_pickle_early``). Bug: on 3.13t importing an extension
  module stops the threads of every interpreter, which a worker stuck in C
  never allows, so main's first import of it (to describe a cancelled task)
  waited forever. Versions: free-threaded 3.13. Proved by:
  tests/test_worker_races.py::test_exit_with_a_cancelled_task_stuck_in_c_ends_with_70
  (run on 3.13t).
- A new interpreter waits on free-threaded builds while a worker given up on
  still holds its thread state in C (``note_abandoned``,
  ``wait_until_no_worker_is_stuck``). Bug: there creating an interpreter
  stops the threads of every interpreter (``_PyEval_EnableGILTransient``, for
  the modules it imports), which a thread in a long C call never allows: the
  replacement for a worker stuck in C froze the whole process, event loop
  included. Versions: free-threaded 3.13 (the same code is in 3.14 and main).
  Proved by: tests/test_worker_races.py, the test
  test_free_threaded_worker_stuck_in_c_is_replaced_once_its_call_returns; and
  for a task swallowing interruptions in bytecode (replaced at once),
  tests/stress/test_stress_faults.py, the test
  test_task_that_never_returns_is_timed_out_and_its_worker_replaced.

Workarounds that must live elsewhere (workers import little; C and the build
are not Python) are in this index too, ``INDEX`` below, each with where it
lives:

- 3.12: modules that crash an own-GIL interpreter before CPython refuses them
  are refused up front (``_inside/worker.py``, ``REFUSED_ON_312``), and
  coroutines in workers are refused (3.12.1 aborts at exit after an event
  loop ran in a subinterpreter).
- 3.13+: readline, _curses and _curses_panel are refused up front too
  (``REFUSED_ON_313``): CPython runs a single-phase extension's init in the
  subinterpreter before refusing it, and theirs set process-wide state.
- 3.12: interpreters are created one at a time (``ext/includes/compat.h``,
  the creation lock taken exclusively): 3.12.1 corrupts static types when two
  threads run ``Py_NewInterpreterFromConfig`` at once.
- 3.14, 3.15: an interpreter is ended through a fresh thread state
  (``ext/interp.pxi``), or its module state stays alive.
- Cython 3.1 to 3.3.1 (not CPython): the per-interpreter module state lookup
  reads one entry past its table; ``setup.py`` (``_LOOKUP_FIXES``) adds the
  bounds check to the generated C.
- ``threading._register_atexit`` (a private API, used as
  ``concurrent.futures`` does) lets the executor finish queued work before the
  exit sweep (``_engine/executor.py``; ``atexit`` if it is gone).

``tests/test_crash_paths.py::test_the_quirks_index_is_alive`` checks that every
entry still applies to a supported Python and names a test that exists.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import time
import warnings
import weakref
from collections.abc import Callable

from aiosubinterp import _core
from aiosubinterp._errors import ForkWarning
from aiosubinterp._inside import marshal as _marshal
from aiosubinterp._inside import worker as _worker

__all__ = [
    "INDEX",
    "blocked_modules",
    "import_pickle_early",
    "note_abandoned",
    "prime_arg_parsers",
    "wait_until_no_worker_is_stuck",
]


# The index of every workaround: (what, the last CPython version it applies to
# ("any" for every version, "cython" for one of Cython's), where it lives, the
# test that proves it as "file::test"). A "last version" below the oldest
# supported Python means the shim is dead: the test above fails.
INDEX: tuple[tuple[str, str, str, str], ...] = (
    (
        "C accelerators kept out of workers",
        "3.13",
        "_quirks.blocked_modules",
        "tests/test_stdlib_matrix.py::test_datetime_shim_applies_exactly_where_cpython_still_crashes",
    ),
    (
        "_datetime imported in main with private copies",
        "3.13",
        "_quirks.blocked_modules",
        "tests/test_private_copies.py::test_threads_importing_copies_at_once_leave_the_check_on",
    ),
    (
        "Argument Clinic keyword caches primed in main",
        "3.12",
        "_quirks.prime_arg_parsers",
        "tests/test_stdlib_matrix.py::test_keyword_calls_of_c_functions_in_successive_pools",
    ),
    (
        "ForkWarning; a forked child's pools refuse work",
        "any",
        "_quirks (fork hooks)",
        "tests/stress/test_stress_lifecycle.py::"
        "test_fork_with_live_interpreters_warns_and_spares_the_parent",
    ),
    (
        "_pickle imported in main early on free-threaded builds",
        "3.13",
        "_quirks.import_pickle_early",
        "tests/test_worker_races.py::test_exit_with_a_cancelled_task_stuck_in_c_ends_with_70",
    ),
    (
        "a new interpreter waits while a worker is stuck in C (free-threaded)",
        "any",
        "_quirks.wait_until_no_worker_is_stuck",
        "tests/test_worker_races.py::"
        "test_free_threaded_worker_stuck_in_c_is_replaced_once_its_call_returns",
    ),
    (
        "modules refused up front on 3.12",
        "3.12",
        "_inside/worker.py REFUSED_ON_312",
        "tests/test_crash_paths.py::test_module_that_refuses_subinterpreters",
    ),
    (
        "stdlib single-phase extensions refused before their init runs",
        "any",
        "_inside/worker.py REFUSED_ON_313",
        "tests/test_crash_paths.py::test_stdlib_single_phase_extensions_are_refused_before_their_init",
    ),
    (
        "coroutines refused in workers on 3.12",
        "3.12",
        "_inside/worker.py coroutine_refusal",
        "tests/test_async_worker.py::test_coroutines_refused_on_312_with_a_clear_error",
    ),
    (
        "interpreters created one at a time on 3.12",
        "3.12",
        "ext/includes/compat.h",
        "tests/test_backends.py::test_two_tasks_run_at_the_same_time",
    ),
    (
        "an interpreter ended through a fresh thread state",
        "any",
        "ext/interp.pxi",
        "tests/test_pool.py::test_what_a_task_keeps_in_module_state_is_freed_with_its_interpreter",
    ),
    (
        "Cython's module state lookup bounded",
        "cython",
        "setup.py _LOOKUP_FIXES",
        "tests/test_sourcecode.py::test_the_built_module_bounds_cythons_module_state_lookup",
    ),
)

# CPython bugs that crash the process when a C accelerator is imported in two
# or more interpreters (measured on 3.12.1 and 3.13.0): workers use the pure-Python twin.
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


def blocked_modules(private_copies: bool = False) -> tuple[str, ...]:
    """C accelerators kept out of workers on this CPython (their pure-Python twins are used).

    With private copies (fallback="copy", 3.13+ only) on 3.13, _datetime is
    imported in main instead and left to the workers: numpy, orjson and
    pydantic-core need its C API, and gh-136421 does not strike once main
    imported it first (measured on 3.13.0 and 3.13.18 with numpy, orjson and
    pydantic-core loaded in four workers at once).
    """
    blocked = _BLOCKED_BY_VERSION.get(sys.version_info[:2], ())
    if private_copies and sys.version_info[:2] == (3, 13):
        import _datetime  # type: ignore[import-not-found]  # noqa: F401
        import datetime  # noqa: F401

        blocked = tuple(name for name in blocked if name != "_datetime")
    return blocked


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
_PRIME_SKIP = (
    "_test",
    "xx",
    "_xx",
    "_tkinter",
    "_ctypes_test",
    "readline",
    "_curses",
    "audioop",
    "nis",
    "spwd",
    "ossaudiodev",
    "_crypt",
)
# Objects whose methods take keywords on the stdlib's own paths (concurrent.futures,
# gzip, bz2, lzma, selectors); methods can only be primed on an instance.
_PRIME_INSTANCES = (
    ("_queue", "SimpleQueue"),
    ("zlib", "compressobj"),
    ("zlib", "decompressobj"),
    ("_bz2", "BZ2Decompressor"),
    ("_lzma", "LZMADecompressor"),
    ("select", "poll"),
    ("select", "epoll"),
    ("_random", "Random"),
    ("_struct", "Struct"),
)
_primed = False
_prime_lock = threading.Lock()


def prime_arg_parsers() -> None:
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
        names = sorted(
            {
                f.split(".", 1)[0]
                for f in (os.listdir(folder) if folder else ())
                if f.endswith(suffixes)
            }
        )
        skip = set(blocked_modules()) | _worker.REFUSED_ON_312
        for name in names:
            if name.startswith(_PRIME_SKIP) or name in skip:
                continue
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - missing library: workers cannot use it either
                continue
            for obj in list(vars(module).values()):
                if callable(obj) and (
                    isinstance(obj, type) or type(obj).__name__ == "builtin_function_or_method"
                ):
                    _prime_call(obj)
        for name, factory in _PRIME_INSTANCES:
            try:
                obj = getattr(importlib.import_module(name), factory)(
                    *(("i",) if factory == "Struct" else ())
                )
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


# -- free-threaded 3.13 ("3.13t"): an extension import stops every interpreter --
_FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))  # PEP 703


def import_pickle_early() -> None:
    """On a free-threaded build, import ``_pickle`` in main now, before any task runs.

    There an extension import stops the threads of every interpreter, and a
    worker stuck in C never stops, so the first import of ``_pickle`` in main
    (describing a cancelled task) would wait for it forever.
    """
    if _FREE_THREADED and _marshal._pickle is None:
        _marshal._load_pickle()


# Workers given up on while a cancelled task still ran on them, in every pool
# of the process: on a free-threaded build a new interpreter waits for them.
_abandoned: weakref.WeakSet[_core.Worker] = weakref.WeakSet()
_abandoned_lock = threading.Lock()


def note_abandoned(worker: _core.Worker) -> None:
    """Remember a worker given up on while its cancelled task still runs."""
    if _FREE_THREADED:
        with _abandoned_lock:
            _abandoned.add(worker)


def _stuck_in_c(probe: float) -> list[_core.Worker]:
    with _abandoned_lock:
        candidates = list(_abandoned)
    return [w for w in candidates if w.stuck_in_c(probe)]


def wait_until_no_worker_is_stuck(
    give_up: Callable[[], bool], probe: float = 0.05, poll: float = 0.01
) -> bool:
    """On a free-threaded build, wait before creating an interpreter until no
    abandoned worker sits in C. False if ``give_up()`` turned true meanwhile
    (then create nothing); True at once with a GIL.

    There CPython stops every thread of every interpreter to create an
    interpreter (and to import an extension module), and a thread in a long
    C call never stops: a creation would park every thread of the process,
    the event loop too, until the call returns. So the replacement waits
    here, and says why once, instead of freezing the process. A worker is in
    C when it does not take an interruption within ``probe`` seconds
    (``Worker.stuck_in_c``); a task that catches interruptions in a bytecode
    loop takes them, and does not delay the replacement.
    """
    if not _FREE_THREADED:
        return True
    warned = False
    while stuck := _stuck_in_c(probe):
        if give_up():
            return False
        if not warned:
            warned = True
            ids = ", ".join(str(w.id) for w in stuck)
            warnings.warn(
                f"a cancelled task still runs in C code in interpreter {ids}, given up on; on a "
                "free-threaded build CPython cannot create an interpreter until that call "
                "returns (creating one stops every thread of the process), so the new worker "
                "waits for it and the pool has one worker fewer meanwhile. Make long C calls "
                "return in shorter steps, or run them in a ProcessPool, whose workers can be "
                "killed.",
                RuntimeWarning,
                stacklevel=2,
            )
        time.sleep(poll)
    return True


# Interpreter creations in flight, and whether a fork() is about to happen.
# A child forked while another thread is inside CPython's interpreter creation
# inherits the runtime's locks held and hangs in its after-fork code (before
# exec: uvloop's spawn then waits for it forever; seen once `async with
# InterpreterPool(2)` returned with the second interpreter still starting). So
# the before-fork hook waits (at most _FORK_WAIT s) for the creations in flight
# to end, and new ones wait until the fork is done.
_FORK_WAIT = 30.0
_creations = threading.Condition(threading.Lock())
_creating = 0
_forking = False


class creating_interpreter:
    """``with creating_interpreter():`` around the creation of one interpreter."""

    def __enter__(self) -> None:
        global _creating
        with _creations:
            # Bounded: a fork whose parent hook never ran cannot stop creations.
            _creations.wait_for(lambda: not _forking, timeout=_FORK_WAIT)
            _creating += 1

    def __exit__(self, *exc: object) -> None:
        global _creating
        with _creations:
            _creating -= 1
            _creations.notify_all()


def _after_fork_in_parent() -> None:
    global _forking
    with _creations:
        _forking = False
        _creations.notify_all()


def _after_fork_in_child() -> None:
    # A forked child has none of the parent's worker threads, and CPython
    # deleted its subinterpreters: the exit-time sweep must not wait for (or
    # interrupt) them, or the child hangs 5 s and exits 70. Pools refuse work
    # in the child (see _check_open).
    import atexit

    global _creations, _creating, _forking
    _creations = threading.Condition(threading.Lock())  # its threads are gone
    _creating = 0
    _forking = False
    atexit.unregister(_core._shutdown_all)


_fork_warned = False


def _before_fork() -> None:
    # CPython kills a child forked while any subinterpreter exists, ours or
    # not, in its after-fork code (measured with the stdlib's _interpreters
    # alone: 3.13.0-3.13.18 abort with "Fatal Python error: PyThreadState_Get",
    # 3.14.10 and 3.15.2 segfault, 3.12.1 hangs). Say so before it happens,
    # once per process. A warning, not an error: the parent is unharmed, and a
    # child that only calls exec() at once may survive on some versions.
    global _fork_warned, _forking
    with _creations:
        _forking = True
        _creations.wait_for(lambda: _creating == 0, timeout=_FORK_WAIT)
    if _fork_warned:
        return
    others = len(_core.list_interpreter_ids()) - 1
    if others <= 0:
        return
    _fork_warned = True
    warnings.warn(
        ForkWarning(
            f"fork() with {others} live subinterpreter{'s' if others != 1 else ''} in this process "
            "(os.fork(), multiprocessing's 'fork' start method, uvloop spawning a subprocess): "
            "CPython cannot fork next to subinterpreters and the child will most likely die in "
            "CPython's after-fork code (a CPython limit, not a bug of your code). Use the 'spawn' "
            "or 'forkserver' start method (multiprocessing.get_context('spawn')), "
            "aiosubinterp.ProcessPool, asyncio's own loop for subprocesses, or close your pools "
            "before forking. This process and its pools are not affected."
        ),
        stacklevel=2,
    )


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
