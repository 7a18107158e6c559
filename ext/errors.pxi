# errors.pxi: where C failures become Python exceptions.
#
# The compiled module makes no policy: it raises builtin exceptions with a
# clear message; aiosubinterp/_errors.py maps them onto the public classes.
#
# The rule. A failure that C reports (a C call that failed or returned an
# error code, an allocation that failed, corrupt transfer data, a C struct in
# a state that refuses the operation: closed, exiting, not running) becomes an
# exception here, through the raise_* helper of its kind, called where the
# failure is detected. Two kinds of raise stay at their site, in any fragment:
#   - argument checks at the API boundary: a TypeError or ValueError (or a
#     subclass) saying what the caller passed or did wrong: a type, a range,
#     a closed socket, a value that cannot cross, an object pickled,
#     unpickled or made directly that must not be, input to loads() that
#     dumps() cannot give;
#   - a bare `raise` that re-raises what it caught, after cleaning up.
# tests/test_sourcecode.py checks that no other exception type is raised
# outside this file.
#
# Each helper raises and so returns -1: a call is a statement that never
# falls through (Cython checks the -1 and propagates), like `raise` itself.


cdef int raise_no_memory(str message=None) except -1:
    """An allocation (calloc, malloc, realloc) returned NULL."""
    if message is None:
        raise MemoryError()
    raise MemoryError(message)


cdef int raise_os_error(int code, str message, bint with_strerror=False) except -1:
    """A C call failed with errno or a returned error code (pthread_create's rc).

    with_strerror: append ": " and the text of code to the message.
    """
    if with_strerror:
        import os
        message = f"{message}: {os.strerror(code)}"
    raise OSError(code, message)


cdef int raise_interp_create_failed() except -1:
    """Py_NewInterpreterFromConfig returned an error status."""
    raise RuntimeError("aiosubinterp: Py_NewInterpreterFromConfig failed to create an interpreter "
                       "with its own GIL (is this CPython >= 3.12?)")


cdef int raise_closed(str what) except -1:
    """The C object an operation needs is closed: "aiosubinterp: {what} is closed"."""
    raise RuntimeError(f"aiosubinterp: {what} is closed")


cdef int raise_wrong_state(str message) except -1:
    """A C struct's state refuses the operation (started twice, lock not held, exiting)."""
    raise RuntimeError(message)


cdef int raise_not_dispatched() except -1:
    """The worker side broke the contract with the C job loop (worker.pxi): it
    opened a session while no job was dispatched, or one was open already."""
    raise RuntimeError("aiosubinterp: no dispatched job to start a session with")


cdef int raise_job_not_running(uint64_t tid) except -1:
    """The worker side named a job its worker does not run (worker.pxi's contract)."""
    raise RuntimeError(f"aiosubinterp: job {tid} is not running on this worker")


cdef int raise_cancelled() except -1:
    """A cancel request recorded in C (a slot flag) before the job's call
    started: it ends as an injected interruption would."""
    raise KeyboardInterrupt


cdef int raise_end_closed(object end) except -1:
    """A channel end whose handle C marked closed was given to be sent."""
    raise ValueError(f"cannot send a closed channel end ({end!r}) to another interpreter: "
                     "send an open end, or clone() it before closing")


cdef int raise_no_share_owner(str message) except -1:
    """This interpreter has no ShareOwner (share.pxi): neither main nor a worker."""
    raise ValueError(message)


cdef int raise_corrupt(str what) except -1:
    """Transfer data does not decode as xdata.pxi wrote it."""
    raise ValueError(f"aiosubinterp: corrupt transfer data ({what}); please report this bug")


cdef int raise_view_released() except -1:
    """A shared view's record is gone (C pointer NULL) when a buffer is asked of it."""
    raise BufferError("aiosubinterp: empty shared view")


cdef int raise_build_mismatch(str message) except -1:
    """At import: the C layout this module was built with does not hold."""
    raise ImportError(message)
