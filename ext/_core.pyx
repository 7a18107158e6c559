# cython: language_level=3
# cython: subinterpreters_compatible=own_gil
# cython: freethreading_compatible=True
"""aiosubinterp._core: own-GIL interpreters on OS threads, queues, wakeup fds, data crossing.

This module has no asyncio and makes no policy. It is imported in the main
interpreter and in every worker interpreter (each gets its own module state);
C-level statics (the registry of live workers) are shared by the process.
"""

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
