# queues.pxi: job and completion records, and the job queue.
#
# Plain C structs guarded by a pthread mutex. No Python object is ever stored
# here, so any interpreter (or none) may touch a queue. Lock order: a thread
# may take a queue mutex while holding some interpreter's GIL, but never
# waits for a GIL while holding a queue mutex.

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
    free(job.data)
    if job.hub != NULL:
        hub_decref(job.hub)
    free(job)


cdef JobQueue* queue_new() except NULL:
    cdef JobQueue* q = <JobQueue*>calloc(1, sizeof(JobQueue))
    if q == NULL:
        raise MemoryError()
    pthread_mutex_init(&q.mu, NULL)
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
