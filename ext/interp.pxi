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
        raise_interp_create_failed()
    w.ts0 = ts0
    w.interp = PyThreadState_GetInterpreter(ts0)
    w.interp_id = PyInterpreterState_GetID(w.interp)
    # GIL: sub -> main (detach ts0 without deleting it)
    PyThreadState_Swap(save)
    return 0


cdef bint interp_alone(PyInterpreterState* interp, PyThreadState* ts) noexcept nogil:
    """True if ts is the only thread state of interp. Caller holds interp's GIL, ts current.

    Reads two pointers and follows none but ts: on a free-threaded build the
    other threads of interp run meanwhile and may delete their states, so
    walking the list further could read freed memory. A stale answer errs
    safely: no one can add a state to interp while ts is alone (its threads
    are gone and main's helpers, which pin the worker, are done), so "alone"
    stays true; "not alone" is asked again.
    """
    return PyInterpreterState_ThreadHead(interp) == ts and PyThreadState_Next(ts) == NULL


cdef int interp_count_others(PyInterpreterState* interp, PyThreadState* ts) noexcept nogil:
    """Thread states of interp besides ts; -1 on a free-threaded build (not counted).

    Caller holds interp's GIL, ts current: with a GIL no other thread of
    interp can add or delete a state meanwhile, so the walk is safe; without
    one it is not (see interp_alone).
    """
    cdef PyThreadState* it
    cdef int n = 0
    if ASI_FREE_THREADED:
        return -1
    it = PyInterpreterState_ThreadHead(interp)
    while it != NULL:
        if it != ts:
            n += 1
        it = PyThreadState_Next(it)
    return n


cdef bint interp_end(WorkerState* w, double wait) noexcept:
    """Destroy w's interpreter, unless another of its threads outlives `wait` seconds.

    Caller holds the MAIN GIL; the worker thread is joined. Returns True when
    the interpreter is gone (or was already). False: a thread a task started
    still has its thread state after `wait` seconds (a `threading` or
    `_thread` thread that keeps running). Py_EndInterpreter would join a
    `threading` one without bound and then abort the process ("not the last
    thread") for any that is left, so the interpreter is abandoned instead:
    kept alive through the new thread state, which becomes w.ts0, and may be
    ended by a later call (the exit sweep's).

    The interpreter is ended through a thread state made here, on this
    thread. ts0 was made on the thread that created the interpreter: ending
    the interpreter through it from another thread left, on CPython 3.14 and
    3.15, an extra reference to a module a task had imported in 20-45% of
    the closes, so that module and its globals were never freed (no __del__,
    a channel end kept there never closed). ts0 goes only once the new state
    exists: on 3.12 an interpreter whose thread-state list runs empty cannot
    get one.
    """
    cdef PyThreadState* save
    cdef PyThreadState* last
    cdef double deadline = asi_monotonic() + wait
    if w.ts0 == NULL:
        return True
    # GIL: main -> main (a new thread state of the worker's interpreter, not attached)
    last = PyThreadState_New(w.interp)
    if last == NULL:
        # Out of memory: end it through ts0 as before rather than not at all.
        last = w.ts0
    # GIL: main -> sub (last must be current and, below, the interpreter's only thread state)
    save = PyThreadState_Swap(last)
    if last != w.ts0:
        # GIL: sub -> sub (ts0 is not current: clear and drop it)
        PyThreadState_Clear(w.ts0)
        PyThreadState_Delete(w.ts0)
        w.ts0 = last
    while not interp_alone(w.interp, last):
        if asi_monotonic() >= deadline:
            w.leftover_threads = interp_count_others(w.interp, last)
            # GIL: sub -> main (abandoned: last stays, detached, and keeps the interpreter)
            PyThreadState_Swap(save)
            return False
        # A thread whose code has ended needs this GIL once more to delete its state.
        # GIL: sub -> none (let the interpreter's other threads run and finish)
        PyEval_SaveThread()
        usleep(2000)
        # GIL: none -> sub
        PyEval_RestoreThread(last)
    # GIL: sub -> none (the interpreter and its last thread state are gone)
    Py_EndInterpreter(last)
    w.ts0 = NULL
    w.interp = NULL
    # GIL: none -> main
    PyEval_RestoreThread(save)
    return True


cdef extern from "<pthread.h>" nogil:
    int PTHREAD_CREATE_DETACHED
    int pthread_attr_setdetachstate(pthread_attr_t*, int)


cdef enum:
    CLAIM_NONE = 0      # the task no longer runs on the worker
    CLAIM_INJECT = 1    # it runs as plain Python code: inject KeyboardInterrupt
    CLAIM_FLAGGED = 2   # it runs on the worker's event loop: flagged, loop woken

cdef enum:
    INTERRUPT_PENDING = -1  # the worker kept its GIL past the timeout (a long C call)


cdef bint interp_interrupt(WorkerState* w, uint64_t tid) noexcept nogil:
    """Raise KeyboardInterrupt in the worker if it still runs task tid as plain
    Python code; flag it instead if it runs on the worker's event loop.

    Blocks until the worker yields its GIL: without bound if it sits in C code
    that never checks for it (sum(range(10**11))). So it runs on a helper
    thread (interrupt_helper_main); the caller waits with a deadline.
    Caller holds no GIL and has pinned the worker (w.ops) so the interpreter
    cannot be destroyed meanwhile.
    """
    cdef PyThreadState* ts
    cdef int claim
    # GIL: none -> none (a thread state of the worker's interpreter for this thread)
    ts = PyThreadState_New(w.interp)
    if ts == NULL:
        return False
    # GIL: none -> sub (waits until the worker yields: one switch interval
    # while it runs bytecode, the whole call while it sits in C)
    PyEval_RestoreThread(ts)
    # Decide again, now that the worker stands still: while we waited, the
    # job may have started a coroutine on the worker's loop (wake_fd set, or
    # a session slot), where an injected exception would land in the loop's
    # own code, or never fire while the loop sleeps in epoll.
    #
    # The injection happens under q.mu, so it is ordered against
    # worker_finish_running (which clears current_tid under q.mu, then drops
    # an injected exception that did not fire): either it lands in the task
    # or is cleared unraised, never in the next job. With a GIL, holding the
    # sub GIL already kept the worker still; on a free-threaded build
    # (Py_GIL_DISABLED) attaching does not stop the worker, and only the
    # lock orders the two. SetAsyncExc takes CPython's runtime head lock and
    # stops no world.
    pthread_mutex_lock(&w.q.mu)
    claim = worker_claim_interrupt(w, tid, True)
    if claim == CLAIM_INJECT:
        PyThreadState_SetAsyncExc(w.ident, PyExc_KeyboardInterrupt)
    pthread_mutex_unlock(&w.q.mu)
    if claim == CLAIM_INJECT:
        # A task blocked in a channel's send_sync/recv_sync sits in C: wake it
        # so it returns to bytecode, where the exception fires (channel.pxi).
        # After q.mu, never under it: the lock order is asi_chan_mu before
        # q.mu (a channel item discarded under asi_chan_mu releases a
        # worker's share, which takes its q.mu), and taking asi_chan_mu here
        # under q.mu deadlocked the whole process (review 2026-12-04, R1).
        # Still under the worker's GIL, so a wait the task registers after
        # this call first runs bytecode, where the exception fires. Waking a
        # wait of a later task of this thread (this task ended meanwhile) is
        # harmless: CH_INTERRUPTED makes send_sync/recv_sync wait again.
        chan_interrupt_thread(w.ident)
    PyThreadState_Clear(ts)
    # GIL: sub -> none
    PyThreadState_DeleteCurrent()
    return claim != CLAIM_NONE


cdef struct InterruptOp:
    pthread_mutex_t mu
    pthread_cond_t cv
    WorkerState* w
    uint64_t tid
    int refs            # the waiting caller + the helper thread
    int done
    int hit


cdef void interrupt_op_decref(InterruptOp* op) noexcept nogil:
    cdef bint last
    pthread_mutex_lock(&op.mu)
    op.refs -= 1
    last = op.refs == 0
    pthread_mutex_unlock(&op.mu)
    if last:
        pthread_cond_destroy(&op.cv)
        pthread_mutex_destroy(&op.mu)
        free(op)


cdef void* interrupt_helper_main(void* arg) noexcept nogil:
    """Detached thread: interp_interrupt, then unpin the worker and report."""
    cdef InterruptOp* op = <InterruptOp*>arg
    cdef WorkerState* w = op.w
    cdef bint hit = interp_interrupt(w, op.tid)
    # Unpinned only now that this thread's state is deleted: interp_end
    # (worker_close waits for ops == 0) needs its thread state to be the last.
    # w may be freed right after: not touched again.
    pthread_mutex_lock(&w.q.mu)
    w.ops -= 1
    pthread_cond_broadcast(&w.q.state_cv)
    pthread_mutex_unlock(&w.q.mu)
    pthread_mutex_lock(&op.mu)
    op.done = 1
    op.hit = hit
    pthread_cond_broadcast(&op.cv)
    pthread_mutex_unlock(&op.mu)
    interrupt_op_decref(op)
    return NULL


cdef int interrupt_with_deadline(WorkerState* w, uint64_t tid, double timeout) noexcept nogil:
    """interp_interrupt on a detached helper thread, waited for at most timeout seconds.

    Returns 1 (delivered), 0 (the task no longer runs, or no thread could be
    started) or INTERRUPT_PENDING: the worker kept its GIL past the timeout;
    the helper stays blocked and delivers (or finds the task gone) when the
    worker yields. The helper pins the worker (w.ops) until it is done, so a
    closer waits for it; the exit sweep does not need to (it exits with 70).
    Caller holds no GIL and has pinned w.
    """
    cdef InterruptOp* op = <InterruptOp*>calloc(1, sizeof(InterruptOp))
    cdef pthread_attr_t attr
    cdef pthread_t thread
    cdef double deadline = asi_monotonic() + timeout
    cdef int rc
    cdef int result
    if op == NULL:
        return 0
    asi_mutex_init(&op.mu, ASI_RANK_INTERRUPT, "op.mu (an interruption)")
    asi_cond_init(&op.cv)
    op.w = w
    op.tid = tid
    op.refs = 2
    pthread_mutex_lock(&w.q.mu)
    w.ops += 1  # the helper's own pin, dropped by the helper
    pthread_mutex_unlock(&w.q.mu)
    pthread_attr_init(&attr)
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)
    rc = pthread_create(&thread, &attr, interrupt_helper_main, op)
    pthread_attr_destroy(&attr)
    if rc != 0:
        # No thread: do not block here without bound either. The caller's
        # grace period runs out and the worker is replaced (or the exit
        # sweep exits with 70).
        pthread_mutex_lock(&w.q.mu)
        w.ops -= 1
        pthread_cond_broadcast(&w.q.state_cv)
        pthread_mutex_unlock(&w.q.mu)
        op.refs = 1
        interrupt_op_decref(op)
        return 0
    pthread_mutex_lock(&op.mu)
    while not op.done:
        if timeout <= 0 or asi_cond_wait_until(&op.cv, &op.mu, deadline) == ETIMEDOUT:
            break
    result = op.hit if op.done else INTERRUPT_PENDING
    pthread_mutex_unlock(&op.mu)
    interrupt_op_decref(op)
    return result


cdef extern from *:
    """
    #include <dlfcn.h>
    /* How the extension module file at path declares itself for interpreters
     * with their own GIL, read from its definition without making a module:
     * 1 it supports them (Py_mod_multiple_interpreters =
     * Py_MOD_PER_INTERPRETER_GIL_SUPPORTED), 0 CPython would refuse it there
     * (another value, or no such slot), -1 not known (the file does not load,
     * has no such init function, or its init does not return a definition:
     * single-phase modules, which the caller never passes, or modules that
     * export a PyModExport_ hook, which CPython 3.15 reads instead).
     * Calls the init function, as CPython's own import would: for a
     * multi-phase module it only hands out its static definition. The file
     * stays loaded (so does every file CPython loads). Needs the caller's GIL. */
    static int asi_extension_own_gil(const char *path, const char *init_name,
                                     const char *export_name, int flags) {
        void *handle = dlopen(path, flags);
        if (handle == NULL) return -1;
        if (dlsym(handle, export_name) != NULL) return -1;
        PyObject *(*init)(void) = (PyObject *(*)(void))dlsym(handle, init_name);
        if (init == NULL) return -1;
        PyObject *made = init();
        if (made == NULL) {
            PyErr_Clear();
            return -1;
        }
        if (!PyObject_TypeCheck(made, &PyModuleDef_Type)) {
            Py_DECREF(made);
            return -1;
        }
        PyModuleDef *def = (PyModuleDef *)made;  /* static: no reference to drop */
    #ifdef Py_mod_multiple_interpreters
        for (PyModuleDef_Slot *slot = def->m_slots; slot != NULL && slot->slot != 0; slot++) {
            if (slot->slot == Py_mod_multiple_interpreters) {
                return slot->value == Py_MOD_PER_INTERPRETER_GIL_SUPPORTED;
            }
        }
    #endif
        (void)def;
        return 0;
    }
    """
    int asi_extension_own_gil(const char* path, const char* init_name,
                              const char* export_name, int flags)


def extension_own_gil(str path, str name, int flags):
    """Whether the multi-phase extension module name, in the file at path,
    declares support for interpreters with their own GIL: True, False (CPython
    refuses it there), or None (not known). flags: ``sys.getdlopenflags()``.

    Reads the module's definition without making a module, so no
    interpreter-wide setting is involved (``_inside/copies.py``). Call it only
    for a file whose imports show multi-phase init (``_inside/elf.py``): for a
    single-phase module, calling its init function would make the module.
    """
    short = name.rpartition(".")[2]
    if not short.isascii():
        return None  # PyInitU_ + punycode: not worth reading
    cdef bytes b_path = path.encode(_sys.getfilesystemencoding(), "surrogateescape")
    cdef bytes b_init = ("PyInit_" + short).encode()
    cdef bytes b_export = ("PyModExport_" + short).encode()
    cdef int found = asi_extension_own_gil(b_path, b_init, b_export, flags)
    return None if found < 0 else bool(found)
