# worker.pxi: the worker OS thread, its job loop, the worker-side functions
# Runner calls (the contract below), and the Worker handle.
#
# == The contract between the C job loop and Runner (aiosubinterp/_inside/worker.py) ==
#
# Every call marked [C -> Python] or [Python -> C] is made on the worker's own
# OS thread, inside its interpreter, holding that interpreter's GIL ("sub")
# before and after, and none switches thread state (worker_thread_main
# attaches before the bootstrap runs; worker_next_job, C only, waits without
# the GIL between jobs). The C side takes q.mu only for short stretches and
# never waits for a GIL holding it. `handle` is the WorkerState address, given
# to the bootstrap as HANDLE. Nothing else calls the _worker_* functions
# (aiosubinterp/_core.pyi declares them for mypy).
#
# Who owns a job (a Job struct, under q.mu): queued, the JobQueue (Queue.cancel
# may withdraw it, Queue.fail_queued complete it); dispatched, this worker's C
# loop (w.current_job) until worker_post frees it; in a session, the session
# (w.slots) until _worker_complete or _worker_session_end frees it. Posted, its
# Completion belongs to the hub until main drains it; main's awaiter holds only
# the task id. The asyncio.Task a coroutine job runs in belongs to Runner.
#
# Start (main's Worker.start() waits meanwhile for W_READY or W_FAILED):
#   worker_thread_main  runs the bootstrap (_pool._BOOTSTRAP) with HANDLE in its
#                       namespace: it imports _core and calls
#   _worker_main(handle)      [Python -> C] the whole life of the worker; it
#                       returns when the worker stops (or its setup failed). The bootstrap's ERROR
#                       (a text) is the start failure if _core did not import.
#   _worker.Runner(setup, handle)      [C -> Python] runs setup: settings,
#                       preloads, initializer (Runner.run with no job
#                       dispatched). Returns the runner.
#   _worker.describe_exception(exc)    [C -> Python] only if Runner() raised:
#                       the description main's Worker.start() returns (W_FAILED).
#     In __init__ the runner calls back:
#   _worker_concurrency(handle)        [Python -> C] -> int, jobs at once.
#
# Each job (worker_job_loop):
#   worker_next_job     pops a job: the queue gives it to this worker's C loop
#                       (w.current_job, w.current_tid). Waits without the GIL
#                       (its own `# GIL:` switch), never inside a call below.
#   runner.apply_settings(settings)    [C -> Python] first, if main's settings
#                       (sys.path) changed. Returns None; raising fails this job.
#   runner.run(kind, payload)          [C -> Python] returns the value or
#                       raises. A KeyboardInterrupt while a cancel was asked for
#                       this job (w.cancel_tid) reports it cancelled. If the job
#                       went to a session meanwhile (below) run() returns None
#                       and the C loop posts nothing (what run() raised then is
#                       printed: the session posted its jobs).
#   worker_post         encodes the outcome, posts it to the job's hub (the hub
#                       owns it until main drains it) and frees the job. To
#                       describe an error it calls [C -> Python]
#     runner.describe(exc)             -> (type name, message, traceback text,
#                       exception or None): _worker.describe_exception;
#     runner.describe_unsendable_result(value, exc)  when the value would not
#                       encode: the same tuple, saying why;
#     runner.describe_minimal(exc)     when describing failed: the same tuple
#                       from type and repr only. Anything these raise is caught.
#   If the loop itself fails, worker_fail_dispatched posts the dispatched job
#   as an error: a job is never lost.
#
# While runner.run() runs a coroutine job with concurrency 1 (run_coroutine),
# the job stays the C loop's; a cancel becomes a byte on Runner's wake pipe:
#   _worker_set_wake(handle, fd)       [Python -> C] fd >= 0: cancel the
#                       current job by writing to fd (not by injecting
#                       KeyboardInterrupt into the loop's own code); -1 when the
#                       coroutine ended. Returns None.
#   _worker_cancel_requested(handle)   [Python -> C] -> bool: was the current
#                       job asked to stop? (a wake byte may be stale.) Runner
#                       then cancels its asyncio task and turns the resulting
#                       CancelledError into KeyboardInterrupt.
#   _worker_current_task(handle)       [Python -> C] -> int: the dispatched
#                       job's task id (0: none); Runner.run() reads it to set
#                       the task-id context variable when it tracks task ids.
#
# Sessions (concurrency > 1, runner.run() got a coroutine: Runner.serve):
#   _worker_session_begin(handle, fd)  [Python -> C] -> tid: the dispatched job
#                       moves from the C loop to slot 0 of the session, which
#                       owns its jobs from now on (w.slots, under q.mu); Runner
#                       keeps tid -> asyncio.Task. fd is woken for new jobs,
#                       cancels and stop. A cancel already injected becomes a
#                       slot flag. RuntimeError if no job is dispatched.
#   _worker_take(handle)               [Python -> C] -> None, or (tid, kind, ok,
#                       payload or decoding error, new settings or None): a
#                       queued job moves into a free slot.
#   _worker_call_guarded(handle, tid, fn, args, kwargs)  [Python -> C] -> fn's
#                       result: a taken job's call, during which a cancel
#                       injects KeyboardInterrupt (raised at once if the cancel
#                       came first).
#   _worker_cancels(handle)            [Python -> C] -> [tid]: jobs asked to
#                       cancel since the last call; Runner cancels their tasks.
#   _worker_complete(handle, tid, failure, value, cancelled, runner)
#                       [Python -> C] -> None: posts job tid (worker_post, which
#                       calls runner.describe* as above) and frees its slot.
#                       cancelled: it ended by KeyboardInterrupt or
#                       CancelledError; reported cancelled only if main asked.
#   _worker_session_end(handle, runner)  [Python -> C] -> None, in serve()'s
#                       finally: every job still in a slot is posted as an
#                       error; back to the C loop.
#   The slot functions raise RuntimeError for a tid not in a slot.
#
# Stop: when worker_next_job returns no job (stop, or a closed and empty queue)
#   runner.shutdown(grace)             [C -> Python] closes the worker's event
#                       loop and caches, and waits at most grace seconds (the
#                       pool's cancel_grace, w.close_grace) for the threads
#                       tasks started in the interpreter. Returns None, or a
#                       text naming the threads still running (kept in
#                       w.leftover_text for the warning); then _worker_main
#                       returns. interp_end waits for thread states until the
#                       same deadline (w.thread_deadline), then abandons the
#                       interpreter rather than end it with a thread alive.

cdef enum:
    W_NEW = 0
    W_STARTING = 1
    W_READY = 2
    W_FAILED = 3

cdef enum:
    SLOT_CANCEL = 1           # cancellation asked, not yet reported to the worker
    SLOT_CANCEL_SEEN = 2      # reported (the worker cancelled its asyncio task)
    SLOT_SYNC = 4             # the job runs synchronously now: cancel by injection


cdef struct WorkerState:
    WorkerState* next_in_queue
    WorkerState* next_live
    JobQueue* q
    PyInterpreterState* interp
    PyThreadState* ts0
    pthread_t thread
    int thread_started
    unsigned long ident
    long long interp_id
    uint64_t serial
    uint64_t current_tid      # job being run (0: idle); under q.mu
    uint64_t cancel_tid       # current_tid when an interrupt was injected
    int state                 # W_*; under q.mu
    int stop                  # exit when idle (retire, replace, close)
    int exited                # the thread has finished
    int closing
    int closed                # the interpreter is destroyed
    int ops                   # interrupts in progress (pin the interpreter)
    int orphan                # its Worker handle is gone: free after closing
    int pinned                # the exit sweep holds this pointer: do not free yet
                              # (orphan, pinned: under the registry lock)
    int wake_fd               # >= 0 while the job runs a coroutine on the worker's
                              # event loop: cancel by writing here, not by injecting
                              # KeyboardInterrupt (it would land in the loop's own
                              # code, and a loop blocked in epoll would not see it)
    int concurrency           # jobs at once: > 1 lets a coroutine session take more
    Job* current_job          # the job the C loop dispatched, until it is posted
    int in_session            # the job loop is inside the worker's event loop, serving
                              # several coroutine jobs (concurrency > 1); under q.mu
    PyThreadState* run_ts     # the worker thread's own state while it exists; under q.mu
    int slots_used
    Job** slots               # concurrency entries: jobs of the session; under q.mu
    char* slot_flags          # per slot: SLOT_* bits; under q.mu
    long max_tasks
    long done_tasks
    uint64_t settings_version
    char* bootstrap
    char* setup_data
    Py_ssize_t setup_size
    char* error_data          # encoded exception info (start failed in setup)
    Py_ssize_t error_size
    char* error_text          # start failed before setup could report
    double close_grace        # seconds a close waits for threads tasks left running
    double thread_deadline    # when runner.shutdown() stopped waiting for them (0: it did not run)
    char* leftover_text       # runner.shutdown()'s report of threads still running, or NULL
    int leftover_threads      # other thread states when interp_end gave up (-1: not counted)
    int abandoned             # closed, but its interpreter is kept alive: a thread a task
                              # started still runs there; in the registry for the exit sweep
    void* share_owner         # ShareOwner* of the interpreter while its job loop runs
    void* share_owner_hold    # the same, one reference held until the interpreter is
                              # destroyed: any of its threads may still read the address


# The registry of live workers is process-wide: its head and the serial
# counter are C statics in compat.h, under asi_registry_lock().


cdef void worker_free(WorkerState* w) noexcept nogil:
    free(w.slots)
    free(w.slot_flags)
    free(w.bootstrap)
    if w.setup_data != NULL:
        # Never decoded (the worker did not get that far): drop what the
        # initargs carry (shares, fds, channel ends).
        blob_discard(w.setup_data, w.setup_size)
        chan_release_orphans()
    free(w.setup_data)
    free(w.error_data)
    free(w.error_text)
    free(w.leftover_text)
    queue_decref(w.q)
    free(w)


cdef void registry_unlink(WorkerState* w) noexcept nogil:
    cdef WorkerState** pp
    asi_registry_lock()
    pp = <WorkerState**>&asi_live_head
    while pp[0] != NULL:
        if pp[0] == w:
            pp[0] = w.next_live
            break
        pp = &pp[0].next_live
    asi_registry_unlock()


cdef char* c_strdup(const char* s, Py_ssize_t n) noexcept nogil:
    cdef char* p = <char*>malloc(n + 1)
    if p != NULL:
        memcpy(p, s, n)
        p[n] = 0
    return p


cdef void* worker_thread_main(void* arg) noexcept nogil:
    """Body of a worker OS thread: attach, run the bootstrap (setup + job loop), detach."""
    cdef WorkerState* w = <WorkerState*>arg
    cdef PyThreadState* ts
    cdef PyObject* ns
    cdef PyObject* handle
    cdef PyObject* res = NULL
    cdef PyObject* err
    cdef const char* text = NULL
    cdef Py_ssize_t n = 0
    cdef char* failure = NULL
    # GIL: none -> none (a thread state of the worker's interpreter for this thread)
    ts = PyThreadState_New(w.interp)
    # GIL: none -> sub
    PyEval_RestoreThread(ts)
    w.ident = PyThread_get_thread_ident()
    pthread_mutex_lock(&w.q.mu)
    w.run_ts = ts
    pthread_mutex_unlock(&w.q.mu)
    ns = PyDict_New()
    handle = PyLong_FromSsize_t(<Py_ssize_t>w)
    if (ns != NULL and handle != NULL
            and PyDict_SetItemString(ns, "__builtins__", PyEval_GetBuiltins()) == 0
            and PyDict_SetItemString(ns, "HANDLE", handle) == 0):
        res = PyRun_String(w.bootstrap, Py_file_input, ns, ns)
    if res == NULL:
        PyErr_Clear()
        failure = c_strdup("the worker bootstrap raised an unexpected error", 47)
    else:
        err = PyDict_GetItemString(ns, "ERROR")
        if err != NULL:
            text = PyUnicode_AsUTF8AndSize(err, &n)
            if text != NULL:
                failure = c_strdup(text, n)
            else:
                PyErr_Clear()
    if res != NULL:
        Py_DecRef(res)
    if handle != NULL:
        Py_DecRef(handle)
    if ns != NULL:
        Py_DecRef(ns)
    pthread_mutex_lock(&w.q.mu)
    w.run_ts = NULL
    pthread_mutex_unlock(&w.q.mu)
    PyThreadState_Clear(ts)
    # GIL: sub -> none (this thread's state is gone; ts0 keeps the interpreter alive)
    PyThreadState_DeleteCurrent()
    pthread_mutex_lock(&w.q.mu)
    if w.state == W_STARTING:
        w.state = W_FAILED
        if w.error_text == NULL and w.error_data == NULL:
            w.error_text = failure
            failure = NULL
    w.exited = 1
    w.current_tid = 0
    w.current_job = NULL
    pthread_cond_broadcast(&w.q.state_cv)
    if w.q.head != NULL:
        # Pass on a job wakeup this worker may have consumed but will not serve.
        pthread_cond_signal(&w.q.cv)
    pthread_mutex_unlock(&w.q.mu)
    free(failure)
    return NULL


cdef void worker_copy_settings(WorkerState* w, char** settings,
                               Py_ssize_t* settings_size) noexcept nogil:
    """A copy of the queue's settings if they changed since w applied them. Caller holds q.mu."""
    cdef JobQueue* q = w.q
    if w.settings_version != q.settings_version and q.settings_data != NULL:
        settings[0] = c_strdup(q.settings_data, q.settings_size)
        if settings[0] != NULL:
            settings_size[0] = q.settings_size
            w.settings_version = q.settings_version


cdef Job* worker_next_job(WorkerState* w, char** settings, Py_ssize_t* settings_size) noexcept:
    """Block until a job is available (returns it, marked running) or the worker must stop (NULL)."""
    cdef JobQueue* q = w.q
    cdef Job* job = NULL
    cdef bint may_spin = q.spin_seconds > 0
    cdef double deadline
    # GIL: sub -> none (wait for work without blocking this interpreter's threads)
    with nogil:
        pthread_mutex_lock(&q.mu)
        while True:
            if w.stop:
                break
            if w.share_owner != NULL and asi_load_ptr(&(<ShareOwner*>w.share_owner).pending) != NULL:
                break  # buffers came back: release them (below), then wait again
            if q.head != NULL:
                job = queue_pop(q)
                if q.head != NULL:
                    # Pass the baton: submits skip the wake-up while a worker
                    # spins, so the taker wakes the next sleeper for the rest.
                    pthread_cond_signal(&q.cv)
                w.current_tid = job.tid
                w.current_job = job
                w.cancel_tid = 0
                worker_copy_settings(w, settings, settings_size)
                break
            if q.closed:
                break
            if may_spin and not q.spinning:
                # Poll for a short while (one spinner per queue, so the
                # event loop keeps a core), then re-check under the lock.
                may_spin = False
                q.spinning = 1
                pthread_mutex_unlock(&q.mu)
                deadline = asi_monotonic() + q.spin_seconds
                while (asi_load_ptr(<void**>&q.head) == NULL and not asi_load_int(&w.stop)
                       and not asi_load_int(&q.closed) and asi_monotonic() < deadline):
                    asi_cpu_relax()
                pthread_mutex_lock(&q.mu)
                q.spinning = 0
                continue
            pthread_cond_wait(&q.cv, &q.mu)
        if job == NULL and q.head != NULL:
            pthread_cond_signal(&q.cv)
        pthread_mutex_unlock(&q.mu)
    # GIL: none -> sub
    return job


cdef bint worker_finish_running(WorkerState* w) noexcept:
    """Mark the current job finished. Caller holds the sub GIL. True if it was interrupted."""
    cdef bint hit
    pthread_mutex_lock(&w.q.mu)
    hit = w.cancel_tid != 0 and w.cancel_tid == w.current_tid
    w.current_tid = 0
    w.cancel_tid = 0
    if hit:
        pthread_cond_broadcast(&w.q.state_cv)  # an interrupter may wait in wait_idle()
    pthread_mutex_unlock(&w.q.mu)
    if hit:
        # Drop an injected exception that has not fired yet (the task ended in C code).
        PyThreadState_SetAsyncExc(w.ident, NULL)
    return hit


cdef void worker_set_state(WorkerState* w, int state) noexcept:
    pthread_mutex_lock(&w.q.mu)
    w.state = state
    pthread_cond_broadcast(&w.q.state_cv)
    pthread_mutex_unlock(&w.q.mu)


cdef int worker_slot_of(WorkerState* w, uint64_t tid) noexcept nogil:
    """Index of session job tid in w.slots, or -1. Caller holds q.mu."""
    cdef int i
    if not w.in_session:
        return -1
    for i in range(w.concurrency):
        if w.slots[i] != NULL and w.slots[i].tid == tid:
            return i
    return -1


cdef bint worker_runs(WorkerState* w, uint64_t tid) noexcept nogil:
    """Whether w runs job tid now (dispatched or in a session). Caller holds q.mu."""
    return tid != 0 and (w.current_tid == tid or worker_slot_of(w, tid) >= 0)


cdef uint64_t worker_any_tid(WorkerState* w) noexcept nogil:
    """A job w runs now (the dispatched one first), or 0. Caller holds q.mu."""
    cdef int i
    if w.current_tid != 0:
        return w.current_tid
    if w.in_session:
        for i in range(w.concurrency):
            if w.slots[i] != NULL:
                return w.slots[i].tid
    return 0


cdef void worker_poke(WorkerState* w) noexcept nogil:
    """Wake the worker's event loop if it waits in one. Caller holds q.mu."""
    cdef char one = 1
    if w.wake_fd >= 0:
        # Non-blocking pipe: a full pipe already holds a wakeup.
        write(w.wake_fd, &one, 1)


cdef int worker_post(WorkerState* w, object runner, Job* job, int status,
                     object failure, object value) except -1:
    """Encode the outcome of job (this interpreter's objects), post it to its hub, free job.

    status: DONE_OK (value), DONE_ERROR (failure) or DONE_CANCELLED. Caller
    holds the sub GIL and no longer lists job as running.
    """
    cdef Buf out
    cdef int flags = 0
    out.data = NULL
    out.size = 0
    out.cap = 0
    try:
        if status == DONE_ERROR:
            encode_into(&out, runner.describe(failure))
        elif status == DONE_OK:
            try:
                encode_into(&out, value)
            except BaseException as exc:
                blob_discard(out.data, out.size)  # shares and fds encoded before the failure
                chan_release_orphans()
                out.size = 0
                status = DONE_ERROR
                encode_into(&out, runner.describe_unsendable_result(value, exc))
    except BaseException as exc:
        blob_discard(out.data, out.size)
        chan_release_orphans()
        out.size = 0
        status = DONE_ERROR
        try:
            encode_into(&out, runner.describe_minimal(exc))
        except BaseException:
            # A hostile __repr__, or out of memory: say so with plain strings
            # (no user code runs), and never lose the job.
            out.size = 0
            try:
                encode_into(&out, ("builtins.RuntimeError", "aiosubinterp: the task ended, but "
                                   "its outcome could not be described to send it back", "", None))
            except BaseException:
                out.size = 0
                status = DONE_LOCAL_ERROR
    failure = None
    value = None
    pthread_mutex_lock(&w.q.mu)
    w.done_tasks += 1
    w.q.completed += 1
    if w.max_tasks > 0 and w.done_tasks >= w.max_tasks:
        flags |= DONE_FLAG_RETIRED
        w.stop = 1
    pthread_mutex_unlock(&w.q.mu)
    hub_post_job(job, status, flags, w.serial, out.data, out.size)
    out.data = NULL
    job_free(job)
    return 0


cdef int worker_run_job(WorkerState* w, object runner, Job* job, char* settings,
                        Py_ssize_t settings_size) except -1:
    """Run the dispatched job (after applying main's new settings, if any) and post it."""
    cdef int status = DONE_OK
    cdef bint hit
    cdef bint taken
    failure = None
    value = None
    try:
        if settings != NULL:
            try:
                runner.apply_settings(decode_blob(settings, settings_size))
            except BaseException:
                # This job fails with the reason; the next one tries again.
                pthread_mutex_lock(&w.q.mu)
                w.settings_version = 0
                pthread_mutex_unlock(&w.q.mu)
                raise
        value = runner.run(job.kind, decode_blob(job.data, job.size))
    except BaseException as exc:
        failure = exc
    pthread_mutex_lock(&w.q.mu)
    taken = w.current_job == NULL  # a coroutine session took it and posted it
    w.current_job = NULL
    pthread_mutex_unlock(&w.q.mu)
    if taken:
        if failure is not None:
            # The session machinery failed; its jobs were completed with an
            # error by _worker_session_end. Say so, and keep serving.
            import traceback
            traceback.print_exception(failure)
        return 0
    hit = worker_finish_running(w)
    if hit and isinstance(failure, KeyboardInterrupt):
        status = DONE_CANCELLED
    elif failure is not None:
        status = DONE_ERROR
    return worker_post(w, runner, job, status, failure, value)


cdef int worker_interrupt(WorkerState* w, uint64_t tid, double timeout) noexcept nogil:
    """Interrupt task tid on w: a cancel message to its event loop if it runs a
    coroutine, else KeyboardInterrupt injected, which needs the worker's GIL:
    waited for at most timeout seconds (interrupt_with_deadline).

    Returns 1 (delivered), 0 (tid does not run on w) or INTERRUPT_PENDING.
    Caller holds no GIL and pinned w (w.ops).
    """
    cdef int claim
    pthread_mutex_lock(&w.q.mu)
    claim = worker_claim_interrupt(w, tid, False)
    pthread_mutex_unlock(&w.q.mu)
    if claim != CLAIM_INJECT:
        return claim == CLAIM_FLAGGED
    return interrupt_with_deadline(w, tid, timeout)


# worker_c_state(): where the thread running tid stands, on a free-threaded build.
cdef enum:
    C_STATE_FREE = 0          # not running tid, gone, or detached (blocked, not in C)
    C_STATE_ATTACHED = 1      # holds its thread state, no injected exception waiting
    C_STATE_EXC_PENDING = 2   # holds it, and an injected exception waits: in C


cdef int worker_c_state(WorkerState* w, uint64_t tid) noexcept nogil:
    """C_STATE_* of w's thread for job tid. Caller holds q.mu (run_ts lives under it)."""
    if (tid == 0 or w.exited or w.run_ts == NULL or w.current_tid != tid
            or not asi_ts_attached(w.run_ts)):
        return C_STATE_FREE
    if asi_ts_exc_pending(w.run_ts):
        return C_STATE_EXC_PENDING
    return C_STATE_ATTACHED


cdef int worker_claim_interrupt(WorkerState* w, uint64_t tid, bint holding_gil) noexcept nogil:
    """How to interrupt tid on w now (CLAIM_*). Caller holds q.mu.

    A job on the worker's event loop (a session slot not in a synchronous
    call, or the dispatched job while wake_fd is set) is flagged and the loop
    woken: that needs no GIL. A job running plain Python code needs an
    injected KeyboardInterrupt: with holding_gil (the caller holds the sub
    GIL, so the worker stands still) the request is recorded for the
    injection that follows; without it nothing is recorded (the caller gets
    the GIL and asks again).
    """
    cdef int i
    if w.exited:
        return CLAIM_NONE
    if w.in_session:
        i = worker_slot_of(w, tid)
        if i < 0:
            return CLAIM_NONE
        if not (w.slot_flags[i] & SLOT_SYNC):
            w.slot_flags[i] |= SLOT_CANCEL
            worker_poke(w)
            return CLAIM_FLAGGED
        if holding_gil:
            w.slot_flags[i] |= SLOT_CANCEL
        return CLAIM_INJECT
    if w.current_tid != tid or tid == 0:
        return CLAIM_NONE
    if w.wake_fd >= 0:
        w.cancel_tid = tid
        worker_poke(w)
        return CLAIM_FLAGGED
    if holding_gil:
        w.cancel_tid = tid
    return CLAIM_INJECT


cdef WorkerState* own_worker(Py_ssize_t handle) except NULL:
    """The worker behind `handle`, which must be a live worker whose thread is this one.

    The _worker_* functions are the worker side of the contract above, called
    by that worker's Runner on its own thread; any other handle (a stale or
    made-up number, another worker, a call from another thread) is refused
    rather than dereferenced. Being the worker's thread also keeps w alive
    for the whole call (a worker is freed only after its thread ended).
    """
    cdef WorkerState* w
    cdef bint ok = False
    asi_registry_lock()
    w = <WorkerState*>asi_live_head
    while w != NULL:
        if <Py_ssize_t>w == handle:
            ok = w.ident == PyThread_get_thread_ident()
            break
        w = w.next_live
    asi_registry_unlock()
    if not ok:
        raise_wrong_state(f"aiosubinterp: {handle} is not this thread's aiosubinterp worker: "
                          "the _worker_* functions are internal, called only by a worker's "
                          "own Runner (aiosubinterp._inside.worker) on its thread")
    return w


def _worker_concurrency(Py_ssize_t handle):
    """Worker side: how many jobs this worker may run at once."""
    return own_worker(handle).concurrency


def _worker_session_begin(Py_ssize_t handle, int fd):
    """Worker side: the dispatched job started a coroutine; from now on this
    worker's event loop serves up to `concurrency` jobs, woken through fd
    (new jobs, cancellations, stop). The dispatched job becomes the session's
    first; returns its task id."""
    cdef WorkerState* w = own_worker(handle)
    cdef Job* job
    cdef bint hit
    pthread_mutex_lock(&w.q.mu)
    job = w.current_job
    if job == NULL or w.in_session:
        pthread_mutex_unlock(&w.q.mu)
        raise_not_dispatched()
    hit = w.cancel_tid != 0 and w.cancel_tid == w.current_tid
    w.current_job = NULL
    w.current_tid = 0
    w.cancel_tid = 0
    memset(w.slot_flags, 0, w.concurrency)
    w.slots[0] = job
    w.slot_flags[0] = SLOT_CANCEL if hit else 0
    w.slots_used = 1
    w.in_session = 1
    w.wake_fd = fd
    w.q.sessions += 1
    if hit:
        worker_poke(w)
    pthread_mutex_unlock(&w.q.mu)
    if hit:
        # The cancel is now a flag the loop will see; drop the injected
        # exception before it fires in the loop's own code.
        PyThreadState_SetAsyncExc(w.ident, NULL)
    return job.tid


def _worker_take(Py_ssize_t handle):
    """Worker side, in a session: the next queued job if there is room for it.

    Returns None, or (tid, kind, ok, payload_or_error, settings_or_None).
    The job stays this worker's until _worker_complete(tid).
    """
    cdef WorkerState* w = own_worker(handle)
    cdef JobQueue* q = w.q
    cdef Job* job = NULL
    cdef char* settings = NULL
    cdef Py_ssize_t settings_size = 0
    cdef int i
    if w.share_owner != NULL:
        share_drain(<ShareOwner*>w.share_owner)
    pthread_mutex_lock(&q.mu)
    if (w.in_session and not w.stop and w.slots_used < w.concurrency
            and q.head != NULL):
        job = queue_pop(q)
        for i in range(w.concurrency):
            if w.slots[i] == NULL:
                w.slots[i] = job
                w.slot_flags[i] = 0
                break
        w.slots_used += 1
        if q.head != NULL:
            # More work: a sleeping worker or another session may take it.
            pthread_cond_signal(&q.cv)
            queue_wake_session(q, w)
        worker_copy_settings(w, &settings, &settings_size)
    pthread_mutex_unlock(&q.mu)
    if job == NULL:
        return None
    new_settings = None
    if settings != NULL:
        try:
            new_settings = decode_blob(settings, settings_size)
        finally:
            free(settings)
    try:
        payload = decode_blob(job.data, job.size)
    except BaseException as exc:
        return (job.tid, job.kind, False, exc, new_settings)
    return (job.tid, job.kind, True, payload, new_settings)


def _worker_call_guarded(Py_ssize_t handle, uint64_t tid, fn, args, kwargs):
    """Worker side, in a session: fn(*args, **kwargs) for job tid. While it
    runs, cancelling tid injects KeyboardInterrupt (as outside sessions)."""
    cdef WorkerState* w = own_worker(handle)
    cdef int i
    cdef bint asked
    cdef bint hit
    pthread_mutex_lock(&w.q.mu)
    i = worker_slot_of(w, tid)
    asked = i >= 0 and (w.slot_flags[i] & (SLOT_CANCEL | SLOT_CANCEL_SEEN)) != 0
    if i >= 0:
        w.slot_flags[i] |= SLOT_SYNC
    pthread_mutex_unlock(&w.q.mu)
    if i < 0:
        raise_job_not_running(tid)
    try:
        if asked:
            raise_cancelled()  # cancelled before it started
        return fn(*args, **kwargs) if kwargs else fn(*args)
    finally:
        # C code from the call's return to here: an injected exception that
        # has not fired yet is dropped below, never raised in the loop's code.
        pthread_mutex_lock(&w.q.mu)
        hit = (w.slot_flags[i] & SLOT_CANCEL) != 0
        w.slot_flags[i] &= ~SLOT_SYNC
        if hit:
            w.slot_flags[i] = (w.slot_flags[i] & ~SLOT_CANCEL) | SLOT_CANCEL_SEEN
        pthread_mutex_unlock(&w.q.mu)
        if hit:
            PyThreadState_SetAsyncExc(w.ident, NULL)


def _worker_cancels(Py_ssize_t handle):
    """Worker side, in a session: task ids asked to cancel since the last call."""
    cdef WorkerState* w = own_worker(handle)
    cdef int i
    out = []
    pthread_mutex_lock(&w.q.mu)
    if w.in_session:
        for i in range(w.concurrency):
            if w.slots[i] != NULL and (w.slot_flags[i] & SLOT_CANCEL) and not (w.slot_flags[i] & SLOT_SYNC):
                w.slot_flags[i] = (w.slot_flags[i] & ~SLOT_CANCEL) | SLOT_CANCEL_SEEN
                out.append(w.slots[i].tid)
    pthread_mutex_unlock(&w.q.mu)
    return out


def _worker_complete(Py_ssize_t handle, uint64_t tid, failure, value, bint cancelled, runner):
    """Worker side, in a session: post job tid's outcome and free its slot.

    cancelled: the job ended by KeyboardInterrupt or CancelledError; it is
    reported as cancelled if the caller asked for that, else as an error.
    """
    cdef WorkerState* w = own_worker(handle)
    cdef int i
    cdef int status
    cdef Job* job = NULL
    cdef bint asked = False
    pthread_mutex_lock(&w.q.mu)
    i = worker_slot_of(w, tid)
    if i >= 0:
        job = w.slots[i]
        asked = (w.slot_flags[i] & (SLOT_CANCEL | SLOT_CANCEL_SEEN)) != 0
        w.slots[i] = NULL
        w.slot_flags[i] = 0
        w.slots_used -= 1
        if asked:
            pthread_cond_broadcast(&w.q.state_cv)  # an interrupter may wait in wait_idle()
    pthread_mutex_unlock(&w.q.mu)
    if job == NULL:
        raise_job_not_running(tid)
    if failure is None:
        status = DONE_OK
    elif cancelled and asked:
        status = DONE_CANCELLED
    else:
        status = DONE_ERROR
    worker_post(w, runner, job, status, failure, value)


def _worker_session_end(Py_ssize_t handle, runner):
    """Worker side: leave the session (back to the C job loop). A job still
    listed (the session failed) is completed with an error, never lost."""
    cdef WorkerState* w = own_worker(handle)
    cdef int i
    cdef list left = []
    pthread_mutex_lock(&w.q.mu)
    if w.in_session:
        for i in range(w.concurrency):
            if w.slots[i] != NULL:
                left.append(<Py_ssize_t>w.slots[i])
                w.slots[i] = NULL
                w.slot_flags[i] = 0
        w.slots_used = 0
        w.in_session = 0
        w.q.sessions -= 1
        pthread_cond_broadcast(&w.q.state_cv)
    w.wake_fd = -1
    pthread_mutex_unlock(&w.q.mu)
    for addr in left:
        worker_post(w, runner, <Job*><Py_ssize_t>addr, DONE_ERROR, RuntimeError(
            "the worker's event loop stopped before this task finished"), None)


def _worker_set_wake(Py_ssize_t handle, int fd):
    """Worker side: fd >= 0 routes cancellation of the current job to fd (a coroutine
    runs on the worker's loop); -1 goes back to injecting KeyboardInterrupt."""
    cdef WorkerState* w = own_worker(handle)
    pthread_mutex_lock(&w.q.mu)
    w.wake_fd = fd
    pthread_mutex_unlock(&w.q.mu)


def _worker_cancel_requested(Py_ssize_t handle):
    """Worker side: True if the job it runs now was asked to stop."""
    cdef WorkerState* w = own_worker(handle)
    cdef bint hit
    pthread_mutex_lock(&w.q.mu)
    hit = w.cancel_tid != 0 and w.cancel_tid == w.current_tid
    pthread_mutex_unlock(&w.q.mu)
    return hit


def _worker_current_task(Py_ssize_t handle):
    """Worker side: the task id of the job dispatched to the C loop now (0: none).

    Runner.run() asks it for the task-id context variable (log records'
    ``task_id``); a session's jobs carry their ids in _worker_take()."""
    cdef WorkerState* w = own_worker(handle)
    cdef uint64_t tid
    pthread_mutex_lock(&w.q.mu)
    tid = w.current_tid
    pthread_mutex_unlock(&w.q.mu)
    return tid


def _worker_main(Py_ssize_t handle):
    """The job loop of one worker; runs on its thread, inside its interpreter."""
    cdef WorkerState* w = own_worker(handle)
    cdef Buf err
    cdef ShareOwner* owner
    global _share_owner_addr
    from aiosubinterp._inside import worker as _worker
    try:
        try:
            setup = decode_blob(w.setup_data, w.setup_size)
        finally:
            # Decoded: its references now belong to `setup` (worker_free
            # discards a blob only while it was never decoded).
            free(w.setup_data)
            w.setup_data = NULL
        runner = _worker.Runner(setup, handle)
        setup = None
    except BaseException as exc:
        err.data = NULL
        err.size = 0
        err.cap = 0
        try:
            encode_into(&err, _worker.describe_exception(exc))
        except BaseException:
            buf_free(&err)
            raise
        pthread_mutex_lock(&w.q.mu)
        w.error_data = err.data
        w.error_size = err.size
        pthread_mutex_unlock(&w.q.mu)
        worker_set_state(w, W_FAILED)
        return
    owner = owner_new(w.q)
    # A reference for the worker's record, dropped by worker_close once the
    # interpreter is destroyed: until then another thread of this interpreter
    # may have read _share_owner_addr (encode_share) and must find the owner
    # allocated even after owner_kill (with a GIL that thread could not run
    # between the read and its reference; on a free-threaded build it can).
    pthread_mutex_lock(&asi_share_mu)
    owner.refs += 1
    pthread_mutex_unlock(&asi_share_mu)
    _share_owner_addr = <Py_ssize_t>owner
    pthread_mutex_lock(&w.q.mu)
    w.share_owner = owner
    w.share_owner_hold = owner
    pthread_mutex_unlock(&w.q.mu)
    worker_set_state(w, W_READY)
    try:
        worker_job_loop(w, runner)
    except BaseException as exc:
        # Whatever escaped the job loop, the job it dispatched is not lost:
        # its awaiter gets an error (the thread still ends).
        worker_fail_dispatched(w, runner, exc)
        raise
    finally:
        pthread_mutex_lock(&w.q.mu)
        w.share_owner = NULL
        pthread_mutex_unlock(&w.q.mu)
        _share_owner_addr = 0
        owner_kill(owner)


cdef void worker_fail_dispatched(WorkerState* w, object runner, object exc) noexcept:
    """Post an error for the job the C loop dispatched, if it was not posted. Sub GIL held."""
    cdef Job* job
    pthread_mutex_lock(&w.q.mu)
    job = w.current_job
    w.current_job = NULL
    pthread_mutex_unlock(&w.q.mu)
    if job == NULL:
        return
    worker_finish_running(w)
    try:
        why = f"{type(exc).__name__}: {exc}"
    except BaseException:
        why = type(exc).__name__
    try:
        worker_post(w, runner, job, DONE_ERROR, RuntimeError(
            f"aiosubinterp: the worker's job loop failed while it ran this task ({why}); "
            "the worker stopped"), None)
    except BaseException:
        pass  # out of memory; worker_post freed the job


cdef int worker_job_loop(WorkerState* w, object runner) except -1:
    cdef Job* job
    cdef char* settings = NULL
    cdef Py_ssize_t settings_size = 0
    cdef ShareOwner* owner = <ShareOwner*>w.share_owner
    while True:
        share_drain(owner)
        job = worker_next_job(w, &settings, &settings_size)
        if job == NULL:
            if asi_load_ptr(&owner.pending) != NULL and not asi_load_int(&w.stop):
                continue
            pthread_mutex_lock(&w.q.mu)
            if w.q.head != NULL and not w.stop and not w.q.closed:
                pthread_mutex_unlock(&w.q.mu)
                continue
            pthread_mutex_unlock(&w.q.mu)
            break
        try:
            worker_run_job(w, runner, job, settings, settings_size)
        finally:
            free(settings)
            settings = NULL
    w.thread_deadline = asi_monotonic() + w.close_grace
    left = runner.shutdown(w.close_grace)
    if left is not None:
        # Copied out as bytes: main reads it, and no object crosses interpreters.
        text = str(left).encode("utf-8", "replace")
        free(w.leftover_text)
        w.leftover_text = c_strdup(text, len(text))
    share_drain(owner)
    return 0


cdef class Worker:
    """One interpreter with its own GIL, driven by one OS thread serving a Queue.

    ``start()``, ``interrupt()`` and ``close()`` block (for milliseconds to the
    length of a running task): call them off the event-loop thread.

    Thread-safety: any thread of the main interpreter; close() is idempotent
    and may race with the exit-time sweep.
    """
    cdef WorkerState* w
    cdef readonly Queue queue
    cdef object __weakref__   # _quirks keeps the abandoned ones in a WeakSet

    def __cinit__(self, Queue queue not None, str bootstrap not None, setup, long max_tasks=0,
                  int concurrency=1, double close_grace=1.0):
        cdef Buf b
        cdef bytes boot = bootstrap.encode("utf-8")
        cdef WorkerState* w
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if not close_grace >= 0:
            raise ValueError(f"close_grace must be >= 0 seconds, got {close_grace!r}")
        w = <WorkerState*>calloc(1, sizeof(WorkerState))
        if w == NULL:
            raise_no_memory()
        w.slots = <Job**>calloc(concurrency, sizeof(Job*))
        w.slot_flags = <char*>calloc(concurrency, 1)
        if w.slots == NULL or w.slot_flags == NULL:
            free(w.slots)
            free(w.slot_flags)
            free(w)
            raise_no_memory()
        w.concurrency = concurrency
        w.close_grace = close_grace
        b.data = NULL
        b.size = 0
        b.cap = 0
        try:
            encode_into(&b, setup)
        except BaseException:
            blob_discard(b.data, b.size)  # the shares and fds encoded before the failure
            chan_release_orphans()
            buf_free(&b)
            free(w.slots)
            free(w.slot_flags)
            free(w)
            raise
        w.setup_data = b.data
        w.setup_size = b.size
        w.bootstrap = c_strdup(PyBytes_AS_STRING(boot), PyBytes_GET_SIZE(boot))
        w.max_tasks = max_tasks
        w.wake_fd = -1
        w.q = queue.q
        pthread_mutex_lock(&w.q.mu)
        w.q.refs += 1
        pthread_mutex_unlock(&w.q.mu)
        self.queue = queue
        self.w = w

    def __dealloc__(self):
        cdef WorkerState* w = self.w
        cdef bint free_now
        if w == NULL:
            return
        self.w = NULL
        if w.state == W_NEW:
            worker_free(w)
            return
        asi_registry_lock()
        # The exit sweep may hold a pointer to it (pinned), or will (abandoned):
        # it frees it then.
        free_now = w.closed and not w.pinned and not w.abandoned
        if not free_now:
            w.orphan = 1
        asi_registry_unlock()
        if free_now:
            worker_free(w)

    def start(self):
        """Create the interpreter and its thread; wait until setup ran.

        Returns None when ready, else what went wrong: the encoded exception
        description from setup, or a text when the worker failed earlier. A
        failed worker is already torn down.
        """
        global asi_serial_counter, asi_live_head
        cdef WorkerState* w = self.w
        cdef pthread_attr_t attr
        cdef int rc
        # Compare-and-swap: two threads calling start() at once (a free-threaded
        # build runs them in parallel) must not both create an interpreter.
        if not asi_cas_int(&w.state, W_NEW, W_STARTING):
            raise_wrong_state("aiosubinterp: Worker.start() called twice")
        # Everything from creating the interpreter to starting its thread
        # happens under the create lock, which the exit sweep takes
        # exclusively: it then sees every interpreter that exists, each with
        # its thread. Starts hold it shared on 3.13+ (the workers of a pool
        # are created in parallel), exclusively on 3.12 (compat.h says why).
        # GIL: main -> none (wait for our turn to create without blocking the main GIL)
        with nogil:
            asi_create_begin()
        # GIL: none -> main
        try:
            if asi_exiting:
                raise_wrong_state("aiosubinterp: the process is exiting; no new interpreters")
            interp_create(w)
        except BaseException:
            w.state = W_NEW
            asi_create_end()
            raise
        asi_registry_lock()
        asi_serial_counter += 1
        w.serial = asi_serial_counter
        w.next_live = <WorkerState*>asi_live_head
        asi_live_head = <void*>w
        asi_registry_unlock()
        pthread_mutex_lock(&w.q.mu)
        w.next_in_queue = w.q.workers
        w.q.workers = w
        pthread_mutex_unlock(&w.q.mu)
        pthread_attr_init(&attr)
        pthread_attr_setstacksize(&attr, ASI_WORKER_STACK_SIZE)
        rc = pthread_create(&w.thread, &attr, worker_thread_main, w)
        pthread_attr_destroy(&attr)
        if rc == 0:
            w.thread_started = 1
        asi_create_end()
        if rc != 0:
            w.state = W_FAILED
            w.exited = 1
            self.close()
            raise_os_error(rc, "aiosubinterp: could not start a worker thread")
        # GIL: main -> none (setup runs on the worker; never wait holding the main GIL)
        with nogil:
            pthread_mutex_lock(&w.q.mu)
            while w.state == W_STARTING:
                pthread_cond_wait(&w.q.state_cv, &w.q.mu)
            pthread_mutex_unlock(&w.q.mu)
        # GIL: none -> main
        if w.state == W_READY:
            return None
        if w.error_data != NULL:
            failure = decode_blob(w.error_data, w.error_size)
        elif w.error_text != NULL:
            failure = w.error_text.decode("utf-8", "replace")
        else:
            failure = "the worker exited during start-up"
        self.close()
        return failure

    def stop(self):
        """Ask the worker to exit once idle, without waiting (it serves no more jobs)."""
        cdef WorkerState* w = self.w
        pthread_mutex_lock(&w.q.mu)
        w.stop = 1
        pthread_cond_broadcast(&w.q.cv)
        worker_poke(w)
        pthread_mutex_unlock(&w.q.mu)

    def interrupt(self, uint64_t tid, double timeout=1.0):
        """Interrupt task tid if this worker still runs it.

        A coroutine job is cancelled on the worker's event loop; a plain
        call gets KeyboardInterrupt, which needs the worker's GIL: the worker
        yields it within one switch interval (about 5 ms) while it runs
        bytecode, but not while it sits in a long C call. So this waits at
        most ``timeout`` seconds; past that the request stays pending on a
        helper thread and is delivered when the worker next yields.

        Returns True if the interruption was delivered (or the coroutine
        flagged) in time; False if tid does not run here, or is still pending.
        """
        cdef WorkerState* w = self.w
        cdef int hit = 0
        if not timeout >= 0:
            raise ValueError(f"Worker.interrupt: timeout must be >= 0 seconds, got {timeout!r}")
        pthread_mutex_lock(&w.q.mu)
        # A closing worker may still be interrupted while its thread runs tid
        # (a close with drain waits for that task: an abandoned task that
        # swallowed an interruption gets another). Safe: the close joins the
        # thread, then waits for ops == 0 before ending the interpreter, and
        # exited is set under this lock.
        if w.exited or w.state != W_READY or not worker_runs(w, tid):
            pthread_mutex_unlock(&w.q.mu)
            return False
        w.ops += 1
        pthread_mutex_unlock(&w.q.mu)
        # GIL: main -> none (a helper thread may attach to the worker's interpreter)
        with nogil:
            hit = worker_interrupt(w, tid, timeout)
            pthread_mutex_lock(&w.q.mu)
            w.ops -= 1
            pthread_cond_broadcast(&w.q.state_cv)
            pthread_mutex_unlock(&w.q.mu)
        # GIL: none -> main
        return hit == 1

    def stuck_in_c(self, double probe):
        """On a free-threaded build: True if the job this worker runs sits in C.

        That is: its thread holds its thread state (it did not release it
        for a blocking call) and does not take an injected interruption
        within ``probe`` seconds, as a thread running bytecode does at once.
        Such a thread blocks CPython's stop of every thread (done to create an
        interpreter or import an extension module) until its call returns.
        Interrupts the job to find out: for a worker given up on. Always
        False with a GIL, or when the worker runs no job.
        """
        cdef WorkerState* w = self.w
        cdef uint64_t tid
        cdef int state
        cdef double deadline
        if not ASI_FREE_THREADED:
            return False
        pthread_mutex_lock(&w.q.mu)
        tid = w.current_tid
        state = worker_c_state(w, tid)
        pthread_mutex_unlock(&w.q.mu)
        if state == C_STATE_FREE:
            return False
        if state == C_STATE_ATTACHED:
            self.interrupt(tid, probe)  # delivered at once (no GIL to wait for)
        deadline = asi_monotonic() + probe
        # GIL: main -> none
        with nogil:
            pthread_mutex_lock(&w.q.mu)
            while True:
                state = worker_c_state(w, tid)
                if state != C_STATE_EXC_PENDING or asi_monotonic() >= deadline:
                    break
                asi_cond_wait_until(&w.q.state_cv, &w.q.mu,
                                    min(asi_monotonic() + 0.001, deadline))
            pthread_mutex_unlock(&w.q.mu)
        # GIL: none -> main
        return state == C_STATE_EXC_PENDING

    def wait_idle(self, uint64_t tid, double timeout):
        """Wait until this worker no longer runs task tid. True if it stopped in time."""
        cdef WorkerState* w = self.w
        cdef double deadline = asi_monotonic() + timeout
        cdef bint done
        # GIL: main -> none
        with nogil:
            pthread_mutex_lock(&w.q.mu)
            while worker_runs(w, tid) and not w.exited:
                if asi_cond_wait_until(&w.q.state_cv, &w.q.mu, deadline) == ETIMEDOUT:
                    break
            done = not worker_runs(w, tid) or w.exited
            pthread_mutex_unlock(&w.q.mu)
        # GIL: none -> main
        return done

    def wait_exited(self, double timeout):
        """Wait until the worker thread has finished. True if it did in time."""
        return worker_wait_exited(self.w, timeout)

    def close(self, bint drain=False):
        """Stop the worker, join its thread, destroy its interpreter.

        The worker finishes its current job first; with drain=True and a
        closed queue it also serves every job still queued. Threads its tasks
        started get close_grace seconds to end. Returns None, or, if this call
        abandoned the interpreter because such a thread still runs there
        (CPython cannot destroy it then), a text naming the threads.
        """
        cdef WorkerState* w = self.w
        if worker_close(w, drain) != CLOSE_ABANDONED:
            return None
        return worker_leftover_description(w)

    @property
    def serial(self):
        """Process-unique number of this worker (never reused)."""
        return self.w.serial

    @property
    def id(self):
        """CPython's id of the worker's interpreter (-1 before start)."""
        return self.w.interp_id if self.w.state != W_NEW else -1

    @property
    def ident(self):
        """threading-style ident of the worker's OS thread (0 before it ran)."""
        return self.w.ident

    @property
    def current_task(self):
        """Id of the job it runs now (the first of several in a session), or 0 when idle."""
        cdef uint64_t tid
        pthread_mutex_lock(&self.w.q.mu)
        tid = worker_any_tid(self.w)
        pthread_mutex_unlock(&self.w.q.mu)
        return tid

    @property
    def concurrency(self):
        return self.w.concurrency

    @property
    def done_tasks(self):
        return self.w.done_tasks

    @property
    def state(self):
        """'new', 'starting', 'ready', 'failed', 'exited' or 'closed'."""
        cdef WorkerState* w = self.w
        if w.closed:
            return "closed"
        if w.exited and w.state == W_READY:
            return "exited"
        return ("new", "starting", "ready", "failed")[w.state]


cdef str worker_leftover_description(WorkerState* w):
    """What runs in an abandoned interpreter: runner.shutdown()'s names, else a count."""
    cdef int n = w.leftover_threads
    if w.leftover_text != NULL:
        # Its count comes from _thread._count(), which misses a _thread thread
        # that has not run yet (3.13 counts it once it runs): the walk does not.
        text = w.leftover_text.decode("utf-8", "replace")
        if n <= 0 or text.startswith(f"{n} thread"):
            return text
        return f"{n} threads, among them {text}"
    if n > 0:
        return f"{n} thread{'s' if n != 1 else ''} (started with _thread: no names)"
    return "threads it started (their thread states are still alive)"


cdef bint worker_wait_exited(WorkerState* w, double timeout) noexcept:
    cdef double deadline = asi_monotonic() + timeout
    cdef bint done
    if not w.thread_started:
        return True
    # GIL: main -> none
    with nogil:
        pthread_mutex_lock(&w.q.mu)
        while not w.exited:
            if asi_cond_wait_until(&w.q.state_cv, &w.q.mu, deadline) == ETIMEDOUT:
                break
        done = w.exited
        pthread_mutex_unlock(&w.q.mu)
    # GIL: none -> main
    return done


cdef enum:
    CLOSE_DONE = 0        # closed earlier, by another caller, or now and destroyed
    CLOSE_ABANDONED = 1   # this call kept the interpreter alive: a task's thread runs there


cdef int worker_close(WorkerState* w, bint drain) noexcept:
    """Stop, join and destroy. Caller holds the MAIN GIL. Idempotent and race-safe.

    The wait for threads that tasks left running is bounded: until the
    deadline runner.shutdown() used (at least a moment, for a thread whose
    code just ended), or close_grace when it did not run. A thread still
    running then makes it abandon the interpreter (CLOSE_ABANDONED): closed
    for its pool, but alive and listed for the exit sweep, which tries again.
    """
    cdef bint mine
    cdef double wait
    if w == NULL or w.state == W_NEW:
        return CLOSE_DONE
    # GIL: main -> none (another closer may be joining; wait for it without the main GIL)
    with nogil:
        pthread_mutex_lock(&w.q.mu)
        mine = not w.closing
        if mine:
            w.closing = 1
            if not (drain and w.q.closed):
                w.stop = 1
            pthread_cond_broadcast(&w.q.cv)
            worker_poke(w)
        else:
            while not w.closed:
                pthread_cond_wait(&w.q.state_cv, &w.q.mu)
        pthread_mutex_unlock(&w.q.mu)
        if mine and w.thread_started:
            # Never join holding the main GIL: the worker may need it to finish.
            pthread_join(w.thread, NULL)
        if mine:
            pthread_mutex_lock(&w.q.mu)
            while w.ops > 0:
                pthread_cond_wait(&w.q.state_cv, &w.q.mu)
            pthread_mutex_unlock(&w.q.mu)
    # GIL: none -> main
    if not mine:
        return CLOSE_DONE
    queue_detach_worker(w)
    if w.thread_deadline > 0:
        # At least 50 ms: a thread whose code ended just before the deadline
        # still needs the interpreter's GIL once to delete its thread state.
        wait = max(w.thread_deadline - asi_monotonic(), 0.05)
    else:
        wait = w.close_grace
    if not interp_end(w, wait):
        # Its threads may still read the share owner's address: keep the
        # reference, and the registry entry (the exit sweep ends it or exits 70).
        pthread_mutex_lock(&w.q.mu)
        w.abandoned = 1
        w.closed = 1
        pthread_cond_broadcast(&w.q.state_cv)
        pthread_mutex_unlock(&w.q.mu)
        return CLOSE_ABANDONED
    worker_forget(w)
    return CLOSE_DONE


cdef void worker_forget(WorkerState* w) noexcept:
    """After its interpreter is destroyed: drop the owner reference, unlist, mark closed."""
    if w.share_owner_hold != NULL:
        # No thread of the interpreter is left to read its owner's address.
        pthread_mutex_lock(&asi_share_mu)
        owner_decref_locked(<ShareOwner*>w.share_owner_hold)
        pthread_mutex_unlock(&asi_share_mu)
        w.share_owner_hold = NULL
    registry_unlink(w)
    pthread_mutex_lock(&w.q.mu)
    w.closed = 1
    pthread_cond_broadcast(&w.q.state_cv)
    pthread_mutex_unlock(&w.q.mu)


def _shutdown_all(double grace=5.0):
    """Exit-time sweep: destroy every live worker so CPython never exits with one.

    Queued jobs are dropped, running ones interrupted; a worker stuck in C code
    for longer than `grace` seconds is reported and the process exits at once
    (finalizing with a live interpreter would abort CPython). So is an
    interpreter that cannot be ended because a thread a task started still
    runs there after `grace` (abandoned by a pool's close, or here): ending it
    would join that thread without bound or abort ("not the last thread"),
    and CPython's own finalization does the same with it left alive.
    """
    cdef WorkerState* w
    cdef WorkerState** states = NULL
    cdef WorkerState** grown
    cdef Py_ssize_t nstates = 0
    cdef Py_ssize_t cap = 0
    cdef Py_ssize_t i
    cdef int j
    cdef int ntids
    cdef uint64_t* tids
    cdef bint ok
    cdef int orphan
    cdef double deadline
    cdef bint ended
    cdef bint stranded = False
    global asi_exiting
    # GIL: main -> none (a start in progress finishes creating and starting first)
    with nogil:
        asi_create_lock()
    # GIL: none -> main
    asi_registry_lock()
    asi_exiting = 1
    w = <WorkerState*>asi_live_head
    while w != NULL:
        # Pinned: a worker closed meanwhile by a helper thread (retired,
        # replaced) stays allocated until this sweep is done with it.
        # A C array, not a list: no Python object is made under the
        # registry mutex (a collection's finalizers take it too).
        if nstates == cap:
            cap = cap * 2 if cap else 16
            grown = <WorkerState**>realloc(states, cap * sizeof(WorkerState*))
            if grown == NULL:
                break  # out of memory: the workers not pinned are left to CPython's exit
            states = grown
        w.pinned += 1
        states[nstates] = w
        nstates += 1
        w = w.next_live
    asi_registry_unlock()
    asi_create_unlock()
    if nstates == 0:
        free(states)
        return 0
    for i in range(nstates):
        w = states[i]
        pthread_mutex_lock(&w.q.mu)
        w.q.closed = 1
        w.stop = 1
        pthread_cond_broadcast(&w.q.cv)
        worker_poke(w)
        pthread_mutex_unlock(&w.q.mu)
    for i in range(nstates):
        w = states[i]
        if worker_wait_exited(w, 0.05):
            continue
        # Task ids copied into C memory: no Python object is made under q.mu.
        tids = <uint64_t*>calloc(w.concurrency + 1, sizeof(uint64_t))
        if tids == NULL:
            continue  # not interrupted: the grace period still bounds the exit
        ntids = 0
        pthread_mutex_lock(&w.q.mu)
        ok = not (w.closing or w.exited or w.state != W_READY)
        if ok:
            if w.current_tid != 0:
                tids[ntids] = w.current_tid
                ntids += 1
            if w.in_session:
                for j in range(w.concurrency):
                    if w.slots[j] != NULL:
                        tids[ntids] = w.slots[j].tid
                        ntids += 1
            ok = ntids > 0
        if ok:
            w.ops += 1
        pthread_mutex_unlock(&w.q.mu)
        if ok:
            for j in range(ntids):
                # Not waited for: a worker stuck in C keeps its GIL, and the
                # grace period below covers every worker at once.
                with nogil:  # GIL: main -> none -> main
                    worker_interrupt(w, tids[j], 0.0)
            pthread_mutex_lock(&w.q.mu)
            w.ops -= 1
            pthread_cond_broadcast(&w.q.state_cv)
            pthread_mutex_unlock(&w.q.mu)
        free(tids)
    deadline = asi_monotonic() + grace
    for i in range(nstates):
        w = states[i]
        if not worker_wait_exited(w, max(0.0, deadline - asi_monotonic())):
            import os, sys
            sys.stderr.write(
                f"aiosubinterp: interpreter {w.interp_id} is still running a task at exit "
                f"{grace:g}s after it was interrupted (blocked in C code?); exiting now "
                "without finalizing, because CPython aborts when it exits with a live "
                "interpreter.\n")
            sys.stderr.flush()
            os._exit(70)
    for i in range(nstates):
        worker_close(states[i], False)
    # Abandoned interpreters (now or by an earlier close): end those whose
    # threads finished meanwhile; each gets what is left of the grace period.
    for i in range(nstates):
        w = states[i]
        if not w.abandoned:
            continue
        ended = interp_end(w, max(0.0, deadline - asi_monotonic()))
        if not ended:
            stranded = True
            import sys
            try:
                sys.stderr.write(
                    f"aiosubinterp: interpreter {w.interp_id} still runs "
                    f"{worker_leftover_description(w)} at exit, started by a task and left "
                    f"running (waited up to {grace:g}s for it); CPython cannot destroy an "
                    "interpreter while another of its threads runs (and aborts when it exits "
                    "with a live one), so the process exits now with status 70, without "
                    "finalizing.\n")
            except Exception:  # no stderr: exit with 70 all the same
                pass
            continue
        asi_registry_lock()
        w.abandoned = 0
        asi_registry_unlock()
        worker_forget(w)
    if stranded:
        import os, sys
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # None, or closed: exit all the same
                pass
        os._exit(70)
    for i in range(nstates):
        w = states[i]
        asi_registry_lock()
        w.pinned -= 1
        orphan = w.orphan and not w.pinned
        asi_registry_unlock()
        if orphan:
            worker_free(w)
    free(states)
    return nstates
