# cython: language_level=3
# cython: subinterpreters_compatible=own_gil
# cython: freethreading_compatible=True
"""aiosubinterp._core: own-GIL interpreters on OS threads, queues, wakeup fds, data crossing.

This module has no asyncio and makes no policy. It is imported in the main
interpreter and in every worker interpreter (each gets its own module state);
C-level statics (the registry of live workers) are shared by the process.
"""

# == Free threading (PEP 703) ==
#
# The module declares Py_mod_gil = Py_MOD_GIL_NOT_USED (the directive above),
# so importing it on a free-threaded build ("3.13t") leaves the GIL off. There
# several threads of main run truly in parallel (the event loop, the pool's
# admin helpers in aiosubinterp/_engine/admin.py, executor callers), and so do
# threads inside a worker's interpreter. Nothing below may rely on main's GIL
# to serialise them. Every piece of state such threads share, and what
# protects it:
#
#   state                               where          protection
#   ----------------------------------  -------------  -------------------------------
#   job queue: jobs, workers list,      queues.pxi     q.mu (pthread; it was always
#     settings, counters, closed                        shared with worker threads)
#   completion hub: list, refs, closed  wakeup.pxi     h.mu
#   Hub.h (the pointer in the object)   wakeup.pxi     the object's critical section in
#                                                       close() and acquire(); acquire()
#                                                       takes a reference with it, so a
#                                                       close() on another thread cannot
#                                                       free it under submit() or drain()
#   WorkerState: job, slots, state,     worker.pxi     q.mu; start() moves W_NEW ->
#     cancel flags, ops pins, run_ts                    W_STARTING by compare-and-swap
#                                                       (two start() calls at once);
#                                                       run_ts->state and ->async_exc
#                                                       are read atomically (CPython
#                                                       writes them)
#   worker fields set before start      worker.pxi     none needed: written before the
#     (serial, interp_id, concurrency)                  thread and the registry see w;
#                                                       done_tasks and the `state`
#                                                       property are unlocked reads of
#                                                       ints (a stale value, never torn)
#   interrupt: claim + injection        interp.pxi     q.mu around both: attaching to the
#                                                       worker's interpreter no longer stops
#                                                       it, so the lock orders the injection
#                                                       against worker_finish_running (never
#                                                       an exception in the next job)
#   registry of live workers, serials,  compat.h       asi_registry_mu
#     asi_exiting                                       (+ asi_create_rw, below)
#   creation vs exit sweep              compat.h       asi_create_rw (starts shared on
#                                                       3.13+, the sweep exclusive)
#   channels: buffers, handles, ops,    channel.pxi    asi_chan_mu (one for all channels)
#     tokens, ids, select rotor,
#     blocking waiters
#   orphaned ends                       channel.pxi    asi_orphan_mu
#   ChannelEnd.h / .c                   channel.pxi    set when made, cleared in dealloc
#   ChannelOp, its `waiter`             channel.pxi    its loop's thread only (documented
#                                                       contract, as with a GIL)
#   hub pointer of a channel op         channel.pxi    a reference of its own, taken with
#                                                       Hub.acquire() before the item is
#                                                       encoded (as Queue.submit does)
#   share records, owners, pending      share.pxi      asi_share_mu; a worker's owner stays
#     releases, counters, SharedMem                     allocated until its interpreter is
#     refs                                              destroyed (a reference held by the
#                                                       WorkerState), so a thread that read
#                                                       its address before the kill is safe
#   main's owner                        share.pxi      static storage, never freed
#   SharedLock state                    share.pxi      m.mu; locked() is an atomic read
#   exit sweep (_shutdown_all)          worker.pxi     the locks above; its worker list
#                                                       and task ids are C arrays
#   list / dict encoded natively        xdata.pxi      on 3.13t a copy made in one step
#                                                       under the container's own lock
#                                                       (PyList_AsTuple, PyDict_Copy)
#   module-level Python globals         share.pxi      per interpreter; the only one
#     (_share_owner_addr)                               written (by the worker thread) is
#                                                       covered by the row above
#   Cython's per-interpreter module     generated      Cython's own locking; setup.py
#     state table                                       adds the bounds check it lacks
#
# The order in which these mutexes may be taken is one table, in
# ext/includes/lockorder.h; debug builds (AIOSUBINTERP_DEBUG=1) check it.
#
# Locks stay pthread mutexes, not PyMutex: each is shared by several
# interpreters and by threads with no thread state, which PyMutex serves too,
# but they predate it and the rule below makes them safe. A thread attached to
# main that blocks on one of them keeps main from stopping the world (the
# free-threaded collector does); that is harmless because no holder ever
# waits for main: while holding these mutexes nothing calls Python code,
# attaches a thread state, or makes or frees an object the collector tracks
# or that has a finalizer (only ints are made, by worker-side functions), so
# no collection, finalizer or stop-the-world request starts inside; every
# long wait on them happens with the thread state released (`with nogil`).
# One CPython 3.13t limit no lock of ours can fix: importing an extension
# module stops the world of EVERY interpreter (_PyEval_EnableGILTransient),
# so while a worker sits in C code that never reaches an eval breaker,
# main's next extension import waits for it (tests/test_worker_races.py).
# live_workers(), ChannelEnd._stats() and share_stats() copy C values out
# and build their tuples after the unlock for that reason (with a GIL, a
# collection started inside could run a finalizer that takes the same mutex).
# Ordinary Python-object state (the pools, hubs and futures of
# aiosubinterp/_engine) is pure Python, whose objects CPython makes safe
# under free threading; it never relied on the GIL for atomicity across
# bytecodes either.

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.complex cimport PyComplex_FromDoubles, PyComplex_ImagAsDouble, PyComplex_RealAsDouble
from cpython.float cimport PyFloat_FromDouble
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8

cimport cython

from capi cimport *
from posix cimport *

import sys as _sys
import aiosubinterp._inside.marshal as _marshal_module

include "errors.pxi"
include "xdata.pxi"
include "queues.pxi"
include "share.pxi"
include "wakeup.pxi"
include "interp.pxi"
include "worker.pxi"
include "channel.pxi"

# Rank the process-wide mutexes (ext/includes/lockorder.h; a no-op unless the
# debug build checks the lock order). Every interpreter's import repeats it.
asi_mutex_rank_static(&asi_chan_mu, ASI_RANK_CHAN, "asi_chan_mu (every channel)")
asi_mutex_rank_static(&asi_orphan_mu, ASI_RANK_ORPHAN, "asi_orphan_mu (orphaned ends)")
asi_mutex_rank_static(&asi_share_mu, ASI_RANK_SHARE, "asi_share_mu (shares)")
asi_mutex_rank_static(&asi_registry_mu, ASI_RANK_REGISTRY, "asi_registry_mu (live workers)")
LOCK_ORDER_CHECKED = bool(ASI_LOCK_ORDER_CHECKED)


def _lock_order_selftest(gil=False):
    """Break the lock order on purpose: a debug build aborts, naming both locks.

    Takes a queue-ranked mutex, then asi_chan_mu (or, if gil is true, this
    interpreter's GIL again). Returns LOCK_ORDER_CHECKED where nothing aborted
    (a release build). For tests/test_locks_and_timeouts.py only.
    """
    cdef pthread_mutex_t mu
    cdef PyThreadState* ts
    asi_mutex_init(&mu, ASI_RANK_QUEUE, "q.mu (a test queue)")
    pthread_mutex_lock(&mu)
    if gil:
        # GIL: this interpreter's -> none
        ts = PyEval_SaveThread()
        # GIL: none -> this interpreter's (holding mu: what the check forbids)
        PyEval_RestoreThread(ts)
    else:
        chan_lock()
        chan_unlock()
    pthread_mutex_unlock(&mu)
    pthread_mutex_destroy(&mu)
    return LOCK_ORDER_CHECKED

# Lock-wait counters (ext/includes/lockorder.h): debug builds only.
cdef int refuse_lock_stats() except -1:
    return raise_wrong_state("lock-wait counters exist only in a debug build of "
                             "aiosubinterp._core (built with AIOSUBINTERP_DEBUG=1); this build "
                             "has none")


def _lock_stats():
    """The process's lock-wait counters per lock rank (a debug build's only).

    Returns {name: {"rank", "acquired", "contended", "wait_ns", "hold_ns"}}
    for the ranks of ext/includes/lockorder.h: acquisitions of every mutex of
    that rank, by every interpreter, since the process started or the last
    _lock_stats_reset(); those that found the mutex taken (a trylock failed
    first); the nanoseconds those waited; the nanoseconds the mutexes were
    held (condition-variable waits excluded). Raises RuntimeError in a release
    build, which keeps no counters.
    """
    cdef unsigned long long out[4]
    if not ASI_LOCK_ORDER_CHECKED:
        refuse_lock_stats()
    stats = {}
    for name, rank in (("chan", ASI_RANK_CHAN), ("orphan", ASI_RANK_ORPHAN),
                       ("share", ASI_RANK_SHARE), ("queue", ASI_RANK_QUEUE),
                       ("registry", ASI_RANK_REGISTRY), ("hub", ASI_RANK_HUB),
                       ("interrupt", ASI_RANK_INTERRUPT),
                       ("shared_lock", ASI_RANK_SHARED_LOCK)):
        asi_lock_stats_get(rank, out)
        stats[name] = {"rank": rank, "acquired": out[0], "contended": out[1],
                       "wait_ns": out[2], "hold_ns": out[3]}
    return stats


cdef extern from *:
    """
    /* _lock_stats_selftest: one contended acquisition, for certain. The
     * thread holds m while a second thread takes it; it lets go only once
     * the second thread sleeps (blocked in the mutex: its trylock failed). */
    #if defined(__linux__)
    #include <sys/syscall.h>
    #endif
    typedef struct { pthread_mutex_t mu; int tid; } asi_contender;
    static void *asi_contender_main(void *p) {
        asi_contender *c = (asi_contender *)p;
    #if defined(__linux__)
        __atomic_store_n(&c->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    #else
        __atomic_store_n(&c->tid, 1, __ATOMIC_RELEASE);
    #endif
        asi_mutex_lock(&c->mu);
        asi_mutex_unlock(&c->mu);
        return NULL;
    }
    /* 1 when thread tid sleeps (Linux: its state in /proc); elsewhere 1
     * after about 0.2 s. */
    static int asi_thread_sleeps(int tid, int polls) {
    #if defined(__linux__)
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
        FILE *f = fopen(path, "r");
        if (f == NULL) return 0;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *r = strrchr(buf, ')');
        (void)polls;
        return r != NULL && r[1] == ' ' && r[2] == 'S';
    #else
        (void)tid;
        return polls >= 200;
    #endif
    }
    /* 0, or the error code of the mutex's or the thread's creation. */
    static int asi_lock_contention_selftest(void) {
        asi_contender c;
        pthread_t t;
        c.tid = 0;
        int rc = asi_mutex_init(&c.mu, ASI_RANK_SHARED_LOCK, "m.mu (a test lock)");
        if (rc != 0) return rc;
        asi_mutex_lock(&c.mu);
        rc = pthread_create(&t, NULL, asi_contender_main, &c);
        if (rc != 0) {
            asi_mutex_unlock(&c.mu);
            asi_mutex_destroy(&c.mu);
            return rc;
        }
        while (__atomic_load_n(&c.tid, __ATOMIC_ACQUIRE) == 0) usleep(1000);
        /* Bounded: 10 s at most. */
        for (int i = 0; i < 10000 && !asi_thread_sleeps(c.tid, i); i++) usleep(1000);
        asi_mutex_unlock(&c.mu);
        pthread_join(t, NULL);
        asi_mutex_destroy(&c.mu);
        return 0;
    }
    """
    int asi_lock_contention_selftest() nogil


def _lock_stats_selftest():
    """Two threads take one SharedLock-ranked test mutex, the second while the first holds it.

    Adds 2 acquisitions, 1 of them contended, to _lock_stats()["shared_lock"].
    For tests/test_locks_and_timeouts.py only; RuntimeError in a release build.
    """
    cdef int rc
    if not ASI_LOCK_ORDER_CHECKED:
        refuse_lock_stats()
    rc = asi_lock_contention_selftest()
    if rc != 0:
        raise_os_error(rc, "could not start the selftest's thread", True)


def _lock_stats_reset():
    """Zero the lock-wait counters of _lock_stats() (RuntimeError in a release build)."""
    if not ASI_LOCK_ORDER_CHECKED:
        refuse_lock_stats()
    asi_lock_stats_reset()


JOB_KIND_CALL = JOB_CALL
JOB_KIND_EXEC = JOB_EXEC
STATUS_OK = DONE_OK
STATUS_ERROR = DONE_ERROR
STATUS_CANCELLED = DONE_CANCELLED
STATUS_LOCAL_ERROR = DONE_LOCAL_ERROR
FLAG_RETIRED = DONE_FLAG_RETIRED
CANCEL_CODE_WITHDRAWN = CANCEL_WITHDRAWN
CANCEL_CODE_RUNNING = CANCEL_RUNNING
CANCEL_CODE_NOT_FOUND = CANCEL_NOT_FOUND
HAVE_EVENTFD = bool(ASI_HAVE_EVENTFD)


def current_interpreter_id():
    """CPython's id of the interpreter running this code (0 is main)."""
    return PyInterpreterState_GetID(PyInterpreterState_Get())


def main_interpreter_id():
    return PyInterpreterState_GetID(PyInterpreterState_Main())


def is_main_interpreter():
    return PyInterpreterState_Get() == PyInterpreterState_Main()


def list_interpreter_ids():
    """Ids of every interpreter alive in the process, including ones other code created."""
    cdef PyInterpreterState* it = PyInterpreterState_Head()
    ids = []
    while it != NULL:
        ids.append(PyInterpreterState_GetID(it))
        it = PyInterpreterState_Next(it)
    return ids


def live_workers():
    """(serial, interpreter id, current task id) of every worker not yet destroyed."""
    cdef WorkerState* w
    cdef uint64_t* rows = NULL
    cdef uint64_t* grown
    cdef Py_ssize_t n = 0
    cdef Py_ssize_t cap = 0
    cdef Py_ssize_t i
    # Copied out as C values first: building tuples under the registry mutex
    # could start a garbage collection, whose finalizers (Worker.__dealloc__)
    # take the same mutex, and which on a free-threaded build stops every
    # thread of main, one of which may be waiting for this mutex attached.
    asi_registry_lock()
    w = <WorkerState*>asi_live_head
    while w != NULL:
        if n == cap:
            cap = cap * 2 if cap else 16
            grown = <uint64_t*>realloc(rows, cap * 3 * sizeof(uint64_t))
            if grown == NULL:
                asi_registry_unlock()
                free(rows)
                raise_no_memory()
            rows = grown
        rows[3 * n] = w.serial
        rows[3 * n + 1] = <uint64_t>w.interp_id
        rows[3 * n + 2] = w.current_tid
        n += 1
        w = w.next_live
    asi_registry_unlock()
    try:
        return [(rows[3 * i], <long long>rows[3 * i + 1], rows[3 * i + 2]) for i in range(n)]
    finally:
        free(rows)


if PyInterpreterState_Get() == PyInterpreterState_Main():
    import atexit as _atexit
    # Python-level atexit hooks run before the runtime starts finalizing, while
    # daemon threads still run: the last moment to destroy interpreters safely.
    _atexit.register(_shutdown_all)
