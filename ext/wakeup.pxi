# wakeup.pxi: the completion hub of one event loop.
#
# Workers append completions to the hub's list and write its wakeup fd only
# on the empty -> non-empty edge, so one wakeup drains many completions. The
# loop watches the fd with add_reader. Linux uses an eventfd; elsewhere (or
# with AIOSUBINTERP_WAKEUP=pipe) a non-blocking self-pipe.
#
# The hub is reference counted: every queued or running job holds one
# reference, so the fd stays open (and cannot be reused by an unrelated
# file) until the last worker that might write to it is done.

cdef struct HubState:
    pthread_mutex_t mu
    Completion* head
    Completion* tail
    int rfd
    int wfd
    int is_pipe
    int refs
    int closed               # the loop side is gone: drop completions


cdef void hub_decref(HubState* h) noexcept nogil:
    cdef int refs
    pthread_mutex_lock(&h.mu)
    h.refs -= 1
    refs = h.refs
    pthread_mutex_unlock(&h.mu)
    if refs > 0:
        return
    completions_free(h.head)
    close(h.rfd)
    if h.is_pipe:
        close(h.wfd)
    pthread_mutex_destroy(&h.mu)
    free(h)


cdef void completions_free(Completion* c) noexcept nogil:
    """Free completions nobody will decode, dropping what their results carry
    (shares, shared memory, fds, channel ends). Caller holds no channel lock."""
    cdef Completion* nxt
    cdef bint any_data = False
    while c != NULL:
        nxt = c.next
        if c.data != NULL:
            blob_discard(c.data, c.size)
            any_data = True
        free(c.data)
        free(c)
        c = nxt
    if any_data:
        chan_release_orphans()


cdef void hub_wake(HubState* h) noexcept nogil:
    cdef uint64_t one = 1
    cdef char byte = 1
    # A full pipe or a saturated eventfd already means "wake up": EAGAIN is fine.
    if h.is_pipe:
        write(h.wfd, &byte, 1)
    else:
        write(h.wfd, &one, 8)


cdef void hub_post(HubState* h, Completion* c) noexcept nogil:
    """Hand a completion to the hub's loop; takes ownership of c."""
    cdef bint was_empty
    c.next = NULL
    pthread_mutex_lock(&h.mu)
    if h.closed:
        pthread_mutex_unlock(&h.mu)
        c.next = NULL
        completions_free(c)  # the loop is gone: drop what the result carries
        return
    was_empty = h.head == NULL
    if h.tail == NULL:
        h.head = c
    else:
        h.tail.next = c
    h.tail = c
    pthread_mutex_unlock(&h.mu)
    if was_empty:
        hub_wake(h)


cdef void hub_post_job(Job* job, int status, int flags, uint64_t serial, char* data,
                       Py_ssize_t size) noexcept nogil:
    """Post job's outcome in the Completion allocated with it (ownership of
    `data` passes to the hub). Never fails, so a finished job is never lost."""
    cdef Completion* c = <Completion*>job.comp
    if c == NULL:  # posted already (a bug): drop what it carries, never crash
        blob_discard(data, size)
        chan_release_orphans()
        free(data)
        return
    job.comp = NULL
    c.tid = job.tid
    c.status = status
    c.flags = flags
    c.worker_serial = serial
    c.data = data
    c.size = size
    hub_post(job.hub, c)


cdef void hub_unget(HubState* h, Completion* c) noexcept nogil:
    """Put completions taken by a drain back at the front of the list (in
    order), for the next drain; dropped if the hub closed meanwhile."""
    cdef Completion* last = c
    if c == NULL:
        return
    while last.next != NULL:
        last = last.next
    pthread_mutex_lock(&h.mu)
    if h.closed:
        pthread_mutex_unlock(&h.mu)
        completions_free(c)
        return
    last.next = h.head
    if h.head == NULL:
        h.tail = last
    h.head = c
    pthread_mutex_unlock(&h.mu)
    hub_wake(h)  # the drain cleared the fd before taking them


cdef void hub_release(HubState* h) noexcept nogil:
    """The loop side lets go of h: pending and later completions are dropped."""
    cdef Completion* left
    pthread_mutex_lock(&h.mu)
    h.closed = 1
    left = h.head
    h.head = NULL
    h.tail = NULL
    pthread_mutex_unlock(&h.mu)
    completions_free(left)  # outside h.mu: dropping a share may take other locks
    hub_decref(h)


cdef class Hub:
    """Completion hub of one event loop: a wakeup fd plus a list of finished jobs.

    Thread-safety: workers post from any thread or interpreter; ``drain()``
    and ``close()`` belong to the thread that runs the loop.
    """
    cdef HubState* h

    def __cinit__(self, bint use_pipe=False):
        cdef int fds[2]
        cdef HubState* h = <HubState*>calloc(1, sizeof(HubState))
        if h == NULL:
            raise_no_memory()
        asi_mutex_init(&h.mu, ASI_RANK_HUB, "h.mu (a completion hub)")
        h.refs = 1
        if not use_pipe and ASI_HAVE_EVENTFD:
            h.rfd = asi_eventfd()
            h.wfd = h.rfd
            if h.rfd < 0:
                pthread_mutex_destroy(&h.mu)
                free(h)
                raise_os_error(errno, "aiosubinterp: eventfd() failed for the wakeup fd")
        else:
            if asi_pipe(fds) != 0:
                pthread_mutex_destroy(&h.mu)
                free(h)
                raise_os_error(errno, "aiosubinterp: pipe() failed for the wakeup fd")
            h.rfd = fds[0]
            h.wfd = fds[1]
            h.is_pipe = 1
        self.h = h

    def __dealloc__(self):
        cdef HubState* h = self.h
        self.h = NULL
        if h != NULL:
            hub_release(h)

    cdef HubState* acquire(self) except NULL:
        """The hub with one more reference (the caller drops it with hub_decref).

        In the object's critical section (a no-op with a GIL), as close()
        takes the pointer: a close() on another thread either comes first
        (this raises) or leaves the reference to this caller.
        """
        cdef HubState* h
        with cython.critical_section(self):
            h = self.state()
            pthread_mutex_lock(&h.mu)
            h.refs += 1
            pthread_mutex_unlock(&h.mu)
        return h

    cdef HubState* state(self) except NULL:
        if self.h == NULL:
            raise_closed("this event loop's completion hub")
        return self.h

    @property
    def mechanism(self):
        """'eventfd' or 'pipe'."""
        return "pipe" if self.state().is_pipe else "eventfd"

    def fileno(self):
        """The fd to watch for readability (loop.add_reader)."""
        return self.state().rfd

    def close(self):
        """Stop receiving: pending and future completions are dropped. Idempotent."""
        cdef HubState* h
        # Taken in the object's critical section (a no-op with a GIL): on a
        # free-threaded build a close() racing another close() or a drain()
        # in another thread sees either the hub or NULL, and a drain that got
        # the hub holds its own reference on it before leaving the section.
        with cython.critical_section(self):
            h = self.h
            self.h = NULL
        if h != NULL:
            hub_release(h)

    @property
    def closed(self):
        return self.h == NULL

    def wake(self):
        """Make fileno() readable, as a worker posting a completion does; False if closed.

        For completions handed over in Python (LoopHub.post): the next
        ``drain()`` clears the fd, so the caller wakes it only on its own
        list's empty -> non-empty edge and one wakeup carries both kinds.

        Thread-safety: any thread (a ProcessPool's reader threads call it).
        """
        cdef HubState* h
        cdef bint live = False
        # The pointer and a reference taken in the object's critical section,
        # as acquire() does: a close() meanwhile cannot free the fd under us.
        with cython.critical_section(self):
            h = self.h
            if h != NULL:
                pthread_mutex_lock(&h.mu)
                h.refs += 1
                pthread_mutex_unlock(&h.mu)
                live = True
        if not live:
            return False
        hub_wake(h)  # one non-blocking write(2): no thread-state switch, the GIL stays held
        hub_decref(h)
        return True

    def drain(self, wanted=None):
        """Return every completion posted so far as (tid, status, flags, serial, value).

        The value is decoded here, in the calling interpreter. A value that
        cannot be decoded gives status DONE_LOCAL_ERROR and the exception.

        wanted: None (decode every value), or a callable given a completion's
        tid, true if its value is still awaited. A value nobody awaits (its
        task was cancelled after it finished) is dropped undecoded, as a
        closed hub drops it: its fds are closed, its shares and channel ends
        released (decoded, a bare int fd would leak). It is reported with
        value None, so that its flags still count. Called only for
        completions that carry a value (channel ops carry none).
        """
        # A reference for the drain: decoding runs Python code, and a close()
        # from another thread meanwhile (a misuse, but on a free-threaded
        # build nothing else serialises the two) must not free h.
        cdef HubState* h = self.acquire()
        try:
            return self._drain(h, wanted)
        finally:
            hub_decref(h)

    cdef list _drain(self, HubState* h, object wanted):
        cdef char sink[256]
        cdef Completion* c
        cdef Completion* nxt
        cdef bint consumed
        cdef uint64_t tid, serial
        cdef int flags
        # Clear the fd before taking the list: a completion posted after the
        # take finds an empty list and writes the fd again, so none is lost.
        # One read clears an eventfd (it returns, and zeroes, the counter); a
        # pipe is read until empty.
        if h.is_pipe:
            while read(h.rfd, sink, sizeof(sink)) > 0:
                pass
        else:
            read(h.rfd, sink, 8)
        share_drain(current_owner())
        pthread_mutex_lock(&h.mu)
        c = h.head
        h.head = NULL
        h.tail = NULL
        pthread_mutex_unlock(&h.mu)
        out = []
        try:
            while c != NULL:
                status = c.status
                value = None
                if c.size:
                    consumed = False
                    try:
                        if wanted is None or wanted(c.tid):
                            consumed = True  # decode_blob drops what it fails to adopt
                            value = decode_blob(c.data, c.size)
                        else:
                            consumed = True
                            blob_discard(c.data, c.size)
                            chan_release_orphans()
                    except BaseException as exc:
                        if not consumed:  # wanted() raised: nobody decoded the value
                            blob_discard(c.data, c.size)
                            chan_release_orphans()
                        status = DONE_LOCAL_ERROR
                        value = exc
                    free(c.data)  # decoded or dropped: the blob owns nothing any more
                    c.data = NULL
                    c.size = 0
                # c is unlinked and freed before anything else can fail.
                nxt = c.next
                tid = c.tid
                flags = c.flags
                serial = c.worker_serial
                free(c)
                c = nxt
                out.append((tid, status, flags, serial, value))
        finally:
            # Reached with c != NULL only when something outside the
            # per-completion try failed (out of memory for the list): the
            # rest goes back, undecoded, for the next drain; none is lost.
            hub_unget(h, c)
        return out
