# interp.pxi: interpreter lifecycle and thread-state switches.
#
# Every switch says which interpreter's GIL the calling thread holds before
# and after it ("main", "sub" = the worker's own interpreter, "none").
# No GIL-state API calls and no `with gil` anywhere: on a thread that has attached
# to several interpreters, the GIL-state API picks whichever it saw last.


cdef int interp_create(WorkerState* w) except -1:
    """Create w's interpreter with its own GIL. Caller holds the MAIN GIL.

    Keeps the creating thread state (ts0) alive until interp_end: on 3.12 an
    interpreter whose thread-state list runs empty cannot get a new one.
    """
    cdef PyInterpreterConfig cfg
    cdef PyThreadState* save
    cdef PyThreadState* ts0 = NULL
    cdef PyStatus st
    memset(&cfg, 0, sizeof(cfg))
    cfg.use_main_obmalloc = 0
    cfg.allow_fork = 0
    cfg.allow_exec = 0
    cfg.allow_threads = 1
    cfg.allow_daemon_threads = 0
    cfg.check_multi_interp_extensions = 1
    cfg.gil = PyInterpreterConfig_OWN_GIL
    save = PyThreadState_Get()
    # GIL: main -> sub (creation drops the main GIL and returns holding the
    # new interpreter's GIL, with ts0 current)
    st = Py_NewInterpreterFromConfig(&ts0, &cfg)
    if PyStatus_Exception(st):
        # GIL: ? -> main (creation failed; put the caller back)
        PyThreadState_Swap(save)
        raise RuntimeError("aiosubinterp: Py_NewInterpreterFromConfig failed to create an interpreter "
                           "with its own GIL (is this CPython >= 3.12?)")
    w.ts0 = ts0
    w.interp = PyThreadState_GetInterpreter(ts0)
    w.interp_id = PyInterpreterState_GetID(w.interp)
    # GIL: sub -> main (detach ts0 without deleting it)
    PyThreadState_Swap(save)
    return 0


cdef void interp_end(WorkerState* w) noexcept:
    """Destroy w's interpreter. Caller holds the MAIN GIL; the worker thread is joined."""
    cdef PyThreadState* save
    if w.ts0 == NULL:
        return
    # GIL: main -> sub (ts0 must be current and the interpreter's only thread state)
    save = PyThreadState_Swap(w.ts0)
    # GIL: sub -> none (the interpreter and ts0 are gone)
    Py_EndInterpreter(w.ts0)
    w.ts0 = NULL
    w.interp = NULL
    # GIL: none -> main
    PyEval_RestoreThread(save)


cdef bint interp_interrupt(WorkerState* w, uint64_t tid) noexcept nogil:
    """Raise KeyboardInterrupt in the worker if it still runs task tid.

    Caller holds no GIL (main was released by the caller) and has pinned the
    worker (w.ops) so the interpreter cannot be destroyed meanwhile.
    """
    cdef PyThreadState* ts
    cdef bint hit = False
    # GIL: none -> none (a thread state of the worker's interpreter for this thread)
    ts = PyThreadState_New(w.interp)
    if ts == NULL:
        return False
    # GIL: none -> sub (waits up to one switch interval for the worker to yield)
    PyEval_RestoreThread(ts)
    pthread_mutex_lock(&w.q.mu)
    hit = worker_claim_sync_interrupt(w, tid)
    pthread_mutex_unlock(&w.q.mu)
    if hit:
        # Holding the sub GIL, the worker cannot be between "task done" and
        # "current_tid cleared" (that stretch runs no bytecode, so it never
        # yields): the exception lands in the task, or is cleared unraised.
        PyThreadState_SetAsyncExc(w.ident, PyExc_KeyboardInterrupt)
        # A task blocked in a channel's send_sync/recv_sync sits in C: wake it
        # so it returns to bytecode, where the exception fires (channel.pxi).
        chan_interrupt_thread(w.ident)
    PyThreadState_Clear(ts)
    # GIL: sub -> none
    PyThreadState_DeleteCurrent()
    return hit
