# queues.pxi: the job queue: job and completion records, the JobQueue struct
# and its operations, and `Queue`, the main interpreter's handle on it.
#
# Plain C structs guarded by a pthread mutex. No Python object is ever stored
# in them, so any interpreter (or none) may touch a queue; `Queue` only
# encodes payloads into jobs and holds a reference on the struct. Lock order:
# a thread may take a queue mutex while holding some interpreter's GIL, but
# never waits for a GIL while holding a queue mutex.
#
# The completion hub that jobs report to is in wakeup.pxi; the workers that
# take jobs (WorkerState, the job loop, `Worker`) are in worker.pxi.

cdef enum:
    JOB_CALL = 1
    JOB_EXEC = 2

cdef enum:
    DONE_OK = 0
    DONE_ERROR = 1
    DONE_CANCELLED = 2
    DONE_LOCAL_ERROR = 3   # decoding failed in the receiving interpreter

cdef enum:
    DONE_FLAG_RETIRED = 1  # the worker stopped after this job (max_tasks reached)

cdef enum:
    CANCEL_WITHDRAWN = 0
    CANCEL_RUNNING = 1
    CANCEL_NOT_FOUND = 2


cdef struct Job:
    Job* next
    uint64_t tid
    int kind
    char* data
    Py_ssize_t size
    HubState* hub       # where the completion goes; holds a reference
    void* comp          # its Completion, allocated at submit: posting it cannot fail


cdef struct Completion:
    Completion* next
    uint64_t tid
    int status
    int flags
    uint64_t worker_serial
    char* data
    Py_ssize_t size


cdef struct JobQueue:
    pthread_mutex_t mu
    pthread_cond_t cv          # workers wait here for jobs, stop or close
    pthread_cond_t state_cv    # worker state changes: ready, idle, exited
    Job* head
    Job* tail
    Py_ssize_t length
    int closed
    int spinning               # an idle worker is polling head (at most one)
    int sessions               # workers serving a coroutine session (wait on a wake fd)
    double spin_seconds        # how long an idle worker polls before it sleeps
    int refs                   # the Queue object plus one per worker
    WorkerState* workers       # attached workers (for cancel lookups)
    uint64_t settings_version  # bumped when main's sys.path changes
    char* settings_data
    Py_ssize_t settings_size
    long long completed        # jobs its workers ran to the end (any outcome)


cdef void job_free(Job* job) noexcept nogil:
    free(job.comp)  # NULL once posted (hub_post_job)
    free(job.data)
    if job.hub != NULL:
        hub_decref(job.hub)
    free(job)


cdef JobQueue* queue_new() except NULL:
    cdef JobQueue* q = <JobQueue*>calloc(1, sizeof(JobQueue))
    if q == NULL:
        raise_no_memory()
    asi_mutex_init(&q.mu, ASI_RANK_QUEUE, "q.mu (a job queue)")
    asi_cond_init(&q.cv)
    asi_cond_init(&q.state_cv)
    q.refs = 1
    return q


cdef void queue_decref(JobQueue* q) noexcept nogil:
    cdef int refs
    cdef Job* job
    pthread_mutex_lock(&q.mu)
    q.refs -= 1
    refs = q.refs
    pthread_mutex_unlock(&q.mu)
    if refs > 0:
        return
    while q.head != NULL:
        job = q.head
        q.head = job.next
        blob_discard(job.data, job.size)  # never run: drop what its arguments hold
        job_free(job)
    chan_release_orphans()
    free(q.settings_data)
    pthread_cond_destroy(&q.cv)
    pthread_cond_destroy(&q.state_cv)
    pthread_mutex_destroy(&q.mu)
    free(q)


cdef void queue_push(JobQueue* q, Job* job) noexcept nogil:
    # Caller holds q.mu.
    job.next = NULL
    if q.tail == NULL:
        q.head = job
    else:
        q.tail.next = job
    q.tail = job
    q.length += 1


cdef Job* queue_pop(JobQueue* q) noexcept nogil:
    # Caller holds q.mu.
    cdef Job* job = q.head
    if job != NULL:
        q.head = job.next
        if q.head == NULL:
            q.tail = NULL
        q.length -= 1
        job.next = NULL
    return job


cdef Job* queue_unlink(JobQueue* q, uint64_t tid) noexcept nogil:
    # Caller holds q.mu. Removes and returns the queued job `tid`, or NULL.
    cdef Job* prev = NULL
    cdef Job* job = q.head
    while job != NULL:
        if job.tid == tid:
            if prev == NULL:
                q.head = job.next
            else:
                prev.next = job.next
            if q.tail == job:
                q.tail = prev
            q.length -= 1
            job.next = NULL
            return job
        prev = job
        job = job.next
    return NULL


cdef void queue_detach_worker(WorkerState* w) noexcept nogil:
    cdef WorkerState** pp
    pthread_mutex_lock(&w.q.mu)
    pp = &w.q.workers
    while pp[0] != NULL:
        if pp[0] == w:
            pp[0] = w.next_in_queue
            break
        pp = &pp[0].next_in_queue
    pthread_mutex_unlock(&w.q.mu)


cdef void queue_wake_session(JobQueue* q, WorkerState* skip) noexcept nogil:
    """A job is queued: wake one worker serving a coroutine session with room
    for it (it waits in its event loop, not on q.cv). Caller holds q.mu."""
    cdef WorkerState* w
    if q.sessions == 0:
        return
    w = q.workers
    while w != NULL:
        if (w != skip and w.in_session and not w.stop
                and w.slots_used < w.concurrency and w.wake_fd >= 0):
            worker_poke(w)
            return
        w = w.next_in_queue


cdef int encode_copyable(Buf* b, object value, str refusal) except -1:
    """Encode value into b, for a blob that is copied and each copy decoded once.

    No reference may cross that way: a share, fd or channel end in it would be
    adopted once per copy (a double release), so such a value raises
    TypeError(refusal). On any failure b is freed and what it held dropped.
    """
    b.data = NULL
    b.size = 0
    b.cap = 0
    try:
        encode_into(b, value)
    except BaseException:
        blob_discard(b.data, b.size)
        chan_release_orphans()
        buf_free(b)
        raise
    if blob_refs(b.data, b.size) != 0:
        blob_discard(b.data, b.size)
        chan_release_orphans()
        buf_free(b)
        raise TypeError(refusal)
    return 0


cdef class Queue:
    """A job queue served by one or more workers.

    Thread-safety: every method may be called from any thread of the main
    interpreter, holding its GIL.
    """
    cdef JobQueue* q

    def __cinit__(self, double spin_seconds=0.0):
        self.q = queue_new()
        self.q.spin_seconds = spin_seconds

    def __dealloc__(self):
        cdef JobQueue* q = self.q
        if q != NULL:
            self.q = NULL
            pthread_mutex_lock(&q.mu)
            q.closed = 1
            pthread_cond_broadcast(&q.cv)
            pthread_mutex_unlock(&q.mu)
            queue_decref(q)

    def submit(self, uint64_t tid, int kind, payload, Hub hub not None):
        """Encode payload here (the sender's interpreter) and queue it as job tid."""
        cdef Buf b
        cdef Job* job
        # The job's hub reference, taken before anything that can run Python
        # code (pickling, a __del__ during share_drain): that code may release
        # the GIL, and another thread may close the hub meanwhile (executor
        # shutdown). Without it, h could be freed under us. Taken together
        # with the pointer (Hub.acquire): on a free-threaded build the close
        # may also come between the two.
        cdef HubState* h = hub.acquire()
        b.data = NULL
        b.size = 0
        b.cap = 0
        try:
            share_drain(main_owner())
            encode_into(&b, payload)
        except BaseException:
            blob_discard(b.data, b.size)  # the shares and fds encoded before the failure
            chan_release_orphans()
            buf_free(&b)
            hub_decref(h)
            raise
        job = <Job*>calloc(1, sizeof(Job))
        if job != NULL:
            # The completion too, here where running out of memory raises at
            # the call site: a worker that finished the job can always post it.
            job.comp = calloc(1, sizeof(Completion))
            if job.comp == NULL:
                free(job)
                job = NULL
        if job == NULL:
            blob_discard(b.data, b.size)
            chan_release_orphans()
            buf_free(&b)
            hub_decref(h)
            raise_no_memory()
        job.tid = tid
        job.kind = kind
        job.data = b.data
        job.size = b.size
        job.hub = h
        pthread_mutex_lock(&self.q.mu)
        if self.q.closed:
            pthread_mutex_unlock(&self.q.mu)
            blob_discard(job.data, job.size)
            chan_release_orphans()
            job_free(job)
            raise_closed("this queue")
        queue_push(self.q, job)
        if not self.q.spinning:  # a spinning worker re-checks under the lock: no wake needed
            pthread_cond_signal(&self.q.cv)
        queue_wake_session(self.q, NULL)
        pthread_mutex_unlock(&self.q.mu)

    def cancel(self, uint64_t tid):
        """Withdraw job tid if still queued. Returns (code, worker_serial).

        code: 0 withdrawn (no completion will come), 1 running on worker
        `worker_serial`, 2 not found (finished, completion on its way).
        """
        cdef Job* job
        cdef WorkerState* w
        cdef uint64_t serial = 0
        cdef int code = CANCEL_NOT_FOUND
        pthread_mutex_lock(&self.q.mu)
        job = queue_unlink(self.q, tid)
        if job != NULL:
            code = CANCEL_WITHDRAWN
        else:
            w = self.q.workers
            while w != NULL:
                if worker_runs(w, tid):
                    code = CANCEL_RUNNING
                    serial = w.serial
                    break
                w = w.next_in_queue
        pthread_mutex_unlock(&self.q.mu)
        if job != NULL:
            blob_discard(job.data, job.size)
            chan_release_orphans()
            job_free(job)
        return code, serial

    def fail_queued(self, info):
        """Complete every queued job with an error described by info. Returns how many."""
        cdef Buf b
        cdef Job* job
        cdef Job* jobs
        cdef int count = 0
        cdef char* copy
        # Every failed job gets a copy of one encoding: refused if it holds a
        # reference (the 2026-12-03 review's remainder; the engine passes strs).
        encode_copyable(&b, info, "aiosubinterp: fail_queued() needs an error description "
                        "that crosses by copy only (no large buffer, fd or channel end)")
        pthread_mutex_lock(&self.q.mu)
        jobs = self.q.head
        self.q.head = NULL
        self.q.tail = NULL
        self.q.length = 0
        pthread_mutex_unlock(&self.q.mu)
        while jobs != NULL:
            job = jobs
            jobs = job.next
            copy = c_strdup(b.data, b.size)
            hub_post_job(job, DONE_ERROR, 0, 0, copy, b.size if copy != NULL else 0)
            blob_discard(job.data, job.size)
            chan_release_orphans()
            job_free(job)
            count += 1
        buf_free(&b)
        return count

    def close(self):
        """Accept no more jobs; workers finish what is queued, then exit."""
        pthread_mutex_lock(&self.q.mu)
        self.q.closed = 1
        pthread_cond_broadcast(&self.q.cv)
        pthread_mutex_unlock(&self.q.mu)

    def set_settings(self, settings):
        """Publish settings (e.g. sys.path) that every worker applies before its next job."""
        cdef Buf b
        # Every worker decodes its own copy.
        encode_copyable(
            &b, settings,
            "aiosubinterp: the worker settings (main's sys.path) hold an object that crosses "
            "to interpreters by reference (a large buffer, a file descriptor, a channel "
            "end): keep sys.path to str entries")
        pthread_mutex_lock(&self.q.mu)
        free(self.q.settings_data)
        self.q.settings_data = b.data
        self.q.settings_size = b.size
        self.q.settings_version += 1
        pthread_mutex_unlock(&self.q.mu)

    def qsize(self):
        """Number of jobs waiting for a worker."""
        cdef Py_ssize_t n
        pthread_mutex_lock(&self.q.mu)
        n = self.q.length
        pthread_mutex_unlock(&self.q.mu)
        return n

    def completed(self):
        """Number of jobs its workers ran to the end (result, error or cancelled while running)."""
        cdef long long n
        pthread_mutex_lock(&self.q.mu)
        n = self.q.completed
        pthread_mutex_unlock(&self.q.mu)
        return n

    def busy(self):
        """Number of attached workers running a job now."""
        cdef int n = 0
        cdef WorkerState* w
        pthread_mutex_lock(&self.q.mu)
        w = self.q.workers
        while w != NULL:
            if w.current_tid != 0 or (w.in_session and w.slots_used > 0):
                n += 1
            w = w.next_in_queue
        pthread_mutex_unlock(&self.q.mu)
        return n

    def running(self):
        """Number of jobs running now (a worker with concurrency > 1 may run several)."""
        cdef int n = 0
        cdef WorkerState* w
        pthread_mutex_lock(&self.q.mu)
        w = self.q.workers
        while w != NULL:
            if w.current_tid != 0:
                n += 1
            elif w.in_session:
                n += w.slots_used
            w = w.next_in_queue
        pthread_mutex_unlock(&self.q.mu)
        return n

    @property
    def closed(self):
        return bool(self.q.closed)
