# share.pxi: zero-copy buffers, shared memory, a cross-interpreter lock, file descriptors.
#
# Owned buffers (tag 'B'): the sending interpreter (the OWNER) takes a
# Py_buffer on the object and keeps it in a C ShareRec; the blob carries the
# record's address and holds one reference. The receiver wraps the record in
# a _ShareView (a per-interpreter heap type: CYTHON_USE_TYPE_SPECS) and gets
# memoryview(_ShareView). When the last view and slice die, the record's last
# reference goes and the release is sent back to the owner: PyBuffer_Release
# only ever runs in the owner interpreter under its GIL.
#   - main owner: the record goes on a C list and a pending call is scheduled
#     (Py_AddPendingCall runs it in main's main thread, loop or no loop); the
#     list is also drained at every submit and hub drain;
#   - worker owner: the record goes on the worker's list and its queue's
#     condition variable is broadcast; the worker drains between jobs and
#     when woken while idle;
#   - an owner that is destroyed while records are still referenced elsewhere
#     never releases them: the exporting object is leaked with its memory, so
#     views elsewhere stay valid (documented: copy what you keep for longer).
# Records, owners and shared memory are guarded by asi_share_mu. Lock order
# (ext/includes/lockorder.h): asi_chan_mu, then asi_share_mu, then a queue
# mutex; never wait for a GIL holding any of them. A release that needs a
# pending call in main waits until asi_chan_mu is free (chan_unlock).
#
# Shared memory (tag 'D'): malloc'd, reference counted, freed by whoever drops
# the last reference (no interpreter owns it). Used by SharedBuffer and
# SharedLock.
#
# File descriptors (tag 'd'): the sender duplicates the fd close-on-exec
# (non-inheritable, PEP 446, as os.dup makes it); the blob owns the duplicate;
# the receiver adopts it (an int, or a socket rebuilt around it).

from cpython.buffer cimport PyBuffer_FillInfo, PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE

cdef extern from *:
    """
    static pthread_mutex_t asi_share_mu = PTHREAD_MUTEX_INITIALIZER;
    static Py_ssize_t asi_share_live = 0;      /* ShareRecs not yet freed */
    static Py_ssize_t asi_share_orphans = 0;   /* records whose owner died first */
    static Py_ssize_t asi_shared_mem_live = 0; /* SharedMem blocks not yet freed */
    """
    pthread_mutex_t asi_share_mu
    Py_ssize_t asi_share_live
    Py_ssize_t asi_share_orphans
    Py_ssize_t asi_shared_mem_live

cdef extern from "Python.h" nogil:
    # Needs no GIL and no thread state; the function runs in main's main thread with main's GIL.
    int Py_AddPendingCall(int (*func)(void*) noexcept nogil, void* arg)

cdef extern from "<fcntl.h>" nogil:
    # F_DUPFD_CLOEXEC (POSIX 2008; Linux, macOS): a duplicate that is close-on-exec in
    # one step, as Python's own fds are (PEP 446). Plain dup() clears the flag.
    int fcntl(int fd, int cmd, ...)
    int F_DUPFD_CLOEXEC

cdef enum:
    TAG_SHARE = 66        # 'B': rec pointer, offset, length, readonly (owns one rec reference)
    TAG_SHARED_MEM = 68   # 'D': SharedMem pointer, kind (owns one reference)
    TAG_FD = 100          # 'd': fd, kind, family, type, proto (owns the fd)
    TAG_PICKLE_OOB = 80   # 'P': count, count 'B' items, then length + pickle bytes

cdef enum:
    # Buffers at least this large cross zero-copy by default; smaller ones are copied.
    SHARE_MIN = 65536

cdef enum:
    SHM_BUFFER = 0
    SHM_LOCK = 1

cdef enum:
    FD_INT = 0
    FD_SOCKET = 1


cdef struct ShareOwner:
    void* pending            # ShareRec*: released elsewhere, waiting for the owner's GIL
    PyInterpreterState* interp
    JobQueue* q              # worker owner: broadcast q.cv to wake it; NULL once dead
    Py_ssize_t refs          # 1 while the owner lives + 1 per record
    int dead
    int pending_call         # main: a pending call is scheduled


cdef struct ShareRec:
    ShareRec* next
    ShareOwner* owner
    Py_ssize_t refs
    Py_buffer view
    char* buf
    Py_ssize_t len


cdef struct SharedMem:
    char* data
    Py_ssize_t size
    Py_ssize_t refs
    int locked               # SharedLock state
    pthread_mutex_t mu
    pthread_cond_t cv


cdef extern from *:
    """
    /* Aligned for the ShareOwner it holds (pointers, atomics): a plain char
     * array may sit at any address. */
    static _Alignas(16) char asi_main_owner_storage[256];
    """
    char asi_main_owner_storage[256]

if sizeof(ShareOwner) > sizeof(asi_main_owner_storage):
    raise_build_mismatch("aiosubinterp._core: asi_main_owner_storage is too small for a ShareOwner")


cdef inline ShareOwner* main_owner() noexcept nogil:
    return <ShareOwner*>asi_main_owner_storage

# This interpreter's owner record, if it is an aiosubinterp worker (a Python
# global, hence per interpreter); main uses main_owner().
_share_owner_addr = 0
SHARE_THRESHOLD = SHARE_MIN


cdef ShareOwner* current_owner():
    if PyInterpreterState_Get() == PyInterpreterState_Main():
        return main_owner()
    return <ShareOwner*><Py_ssize_t>_share_owner_addr


cdef void owner_decref_locked(ShareOwner* o) noexcept nogil:
    # asi_share_mu held.
    o.refs -= 1
    if o.refs == 0 and o != main_owner():
        free(o)


cdef ShareOwner* owner_new(JobQueue* q) except NULL:
    cdef ShareOwner* o = <ShareOwner*>calloc(1, sizeof(ShareOwner))
    if o == NULL:
        raise_no_memory()
    o.interp = PyInterpreterState_Get()
    o.q = q
    o.refs = 1
    return o


cdef void release_list(ShareRec* rec) noexcept:
    """PyBuffer_Release each record of a list. Caller holds the OWNER's GIL."""
    global asi_share_live, asi_share_orphans, asi_shared_mem_live
    cdef ShareRec* nxt
    cdef ShareOwner* o
    while rec != NULL:
        nxt = rec.next
        o = rec.owner
        PyBuffer_Release(&rec.view)
        pthread_mutex_lock(&asi_share_mu)
        asi_share_live -= 1
        owner_decref_locked(o)
        pthread_mutex_unlock(&asi_share_mu)
        free(rec)
        rec = nxt


cdef void share_drain(ShareOwner* o) noexcept:
    """Release what other interpreters gave back. Caller holds o's interpreter's GIL."""
    cdef ShareRec* recs
    if o == NULL or asi_load_ptr(&o.pending) == NULL:
        return
    pthread_mutex_lock(&asi_share_mu)
    recs = <ShareRec*>o.pending
    o.pending = NULL
    o.pending_call = 0
    pthread_mutex_unlock(&asi_share_mu)
    release_list(recs)


cdef int main_pending_release(void* arg) noexcept:
    # Runs in the main interpreter's main thread, holding its GIL (CPython
    # calls pending calls from the eval loop).
    share_drain(main_owner())
    return 0


cdef void owner_kill(ShareOwner* o) noexcept:
    """The owner interpreter is about to be destroyed. Caller holds its GIL."""
    cdef ShareRec* recs
    pthread_mutex_lock(&asi_share_mu)
    recs = <ShareRec*>o.pending
    o.pending = NULL
    o.dead = 1
    o.q = NULL
    pthread_mutex_unlock(&asi_share_mu)
    release_list(recs)
    pthread_mutex_lock(&asi_share_mu)
    owner_decref_locked(o)
    pthread_mutex_unlock(&asi_share_mu)


cdef void rec_decref(ShareRec* rec) noexcept nogil:
    """Drop one reference; the last one sends the record home. Any interpreter's GIL (or none)."""
    global asi_share_live, asi_share_orphans, asi_shared_mem_live, asi_main_release_due
    cdef ShareOwner* o = rec.owner
    cdef bint schedule = False
    pthread_mutex_lock(&asi_share_mu)
    rec.refs -= 1
    if rec.refs > 0:
        pthread_mutex_unlock(&asi_share_mu)
        return
    if o.dead:
        # The owner is gone: its object is leaked with the interpreter's
        # memory, which stays valid; only the record is freed.
        asi_share_live -= 1
        asi_share_orphans += 1
        owner_decref_locked(o)
        pthread_mutex_unlock(&asi_share_mu)
        free(rec)
        return
    rec.next = <ShareRec*>o.pending
    o.pending = rec
    if o == main_owner():
        if not o.pending_call:
            o.pending_call = 1
            schedule = True
    elif o.q != NULL:
        pthread_mutex_lock(&o.q.mu)
        pthread_cond_broadcast(&o.q.cv)
        pthread_mutex_unlock(&o.q.mu)
    pthread_mutex_unlock(&asi_share_mu)
    if schedule:
        if asi_chan_mine:
            asi_main_release_due = 1  # chan_unlock() schedules it, mutex-free
        else:
            schedule_main_release()


cdef void schedule_main_release() noexcept nogil:
    """Ask main to release its pending shares. Called holding none of our mutexes:
    Py_AddPendingCall takes CPython's own lock and may re-attach this thread."""
    # The cast is sound: CPython runs pending calls holding main's GIL (Cython warns).
    if Py_AddPendingCall(<int (*)(void*) noexcept nogil>main_pending_release, NULL) != 0:
        pthread_mutex_lock(&asi_share_mu)
        main_owner().pending_call = 0  # queue full: the next submit or hub drain releases it
        pthread_mutex_unlock(&asi_share_mu)


cdef class _ShareView:
    """Exporter of a buffer owned by another interpreter (or this one). Internal."""
    cdef ShareRec* rec
    cdef Py_ssize_t off
    cdef Py_ssize_t n
    cdef bint ro

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if self.rec == NULL:
            raise_view_released()
        PyBuffer_FillInfo(buffer, self, self.rec.buf + self.off, self.n, self.ro, flags)

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __dealloc__(self):
        cdef ShareRec* rec = self.rec
        self.rec = NULL
        if rec == NULL:
            return
        if rec.owner.interp == PyInterpreterState_Get() and rec.refs == 1 and not rec.owner.dead:
            # Back home with the last reference: release here and now.
            pthread_mutex_lock(&asi_share_mu)
            rec.refs -= 1
            pthread_mutex_unlock(&asi_share_mu)
            rec.next = NULL
            release_list(rec)
        else:
            rec_decref(rec)


cdef int encode_rec_ref(Buf* b, ShareRec* rec, Py_ssize_t off, Py_ssize_t n, bint ro) except -1:
    buf_reserve(b, 33)
    buf_tag(b, TAG_SHARE)
    buf_i64(b, <int64_t><Py_ssize_t>rec)
    buf_i64(b, off)
    buf_i64(b, n)
    return buf_i64(b, ro)


cdef int encode_share(Buf* b, object obj, bint writable) except -1:
    """Share obj's memory (tag 'B'): returns 1, or 0 when this interpreter cannot own shares."""
    global asi_share_live, asi_share_orphans, asi_shared_mem_live
    cdef ShareOwner* o = current_owner()
    cdef ShareRec* rec
    cdef _ShareView sv
    cdef Py_buffer tmp
    cdef Py_ssize_t off, n
    cdef bint ro
    if o == NULL:
        return 0
    base = obj
    if type(obj) is memoryview and type(obj.obj) is _ShareView:
        base = obj.obj
    if type(base) is _ShareView:
        # A view of a share (an echo, a slice): pass the same record on.
        sv = <_ShareView>base
        PyObject_GetBuffer(obj, &tmp, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
        off = <char*>tmp.buf - sv.rec.buf
        ro = tmp.readonly or not writable
        n = tmp.len
        PyBuffer_Release(&tmp)
        if 0 <= off <= sv.rec.len - n:
            pthread_mutex_lock(&asi_share_mu)
            sv.rec.refs += 1
            pthread_mutex_unlock(&asi_share_mu)
            try:
                encode_rec_ref(b, sv.rec, off, n, ro)
            except BaseException:
                rec_decref(sv.rec)
                raise
            return 1
    rec = <ShareRec*>calloc(1, sizeof(ShareRec))
    if rec == NULL:
        raise_no_memory()
    try:
        PyObject_GetBuffer(obj, &rec.view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
    except BaseException:
        free(rec)
        raise
    rec.buf = <char*>rec.view.buf
    rec.len = rec.view.len
    rec.refs = 1
    # PyObject_GetBuffer may have run Python code (a __buffer__ method) and
    # let other threads of this interpreter run: the worker thread may have
    # left its job loop and killed the owner (owner_kill) meanwhile. Read the
    # owner again. On a free-threaded build the kill may also come between
    # this read and the reference below; the owner stays allocated anyway
    # (the worker's record holds a reference until the interpreter is
    # destroyed, worker_close), and a record of a dead owner is never
    # released, as documented above.
    o = current_owner()
    if o == NULL:
        PyBuffer_Release(&rec.view)
        free(rec)
        return 0
    pthread_mutex_lock(&asi_share_mu)
    o.refs += 1
    asi_share_live += 1
    pthread_mutex_unlock(&asi_share_mu)
    rec.owner = o
    try:
        encode_rec_ref(b, rec, 0, rec.len, not writable)
    except BaseException:
        rec_decref(rec)
        raise
    return 1


cdef object decode_share(Reader* r):
    cdef ShareRec* rec = <ShareRec*><Py_ssize_t>rd_i64(r)
    cdef int64_t off = rd_i64(r)
    cdef int64_t n = rd_i64(r)
    cdef int64_t ro = rd_i64(r)
    cdef _ShareView sv
    # Adopted from here on (decode_obj): drop the reference if no view takes it.
    try:
        sv = _ShareView.__new__(_ShareView)
    except BaseException:
        rec_decref(rec)
        raise
    sv.rec = rec
    sv.off = off
    sv.n = n
    sv.ro = ro != 0
    return memoryview(sv)


# -- shared memory and lock ------------------------------------------------------

cdef SharedMem* shm_new(Py_ssize_t size) except NULL:
    global asi_share_live, asi_share_orphans, asi_shared_mem_live
    cdef SharedMem* m = <SharedMem*>calloc(1, sizeof(SharedMem))
    if m == NULL:
        raise_no_memory()
    if size > 0:
        m.data = <char*>calloc(1, size)
        if m.data == NULL:
            free(m)
            raise_no_memory(f"SharedBuffer: cannot allocate {size} bytes")
    m.size = size
    m.refs = 1
    asi_mutex_init(&m.mu, ASI_RANK_SHARED_LOCK, "m.mu (shared memory or a SharedLock)")
    asi_cond_init(&m.cv)
    pthread_mutex_lock(&asi_share_mu)
    asi_shared_mem_live += 1
    pthread_mutex_unlock(&asi_share_mu)
    return m


cdef void shm_incref(SharedMem* m) noexcept nogil:
    pthread_mutex_lock(&asi_share_mu)
    m.refs += 1
    pthread_mutex_unlock(&asi_share_mu)


cdef void shm_decref(SharedMem* m) noexcept nogil:
    global asi_share_live, asi_share_orphans, asi_shared_mem_live
    cdef bint last
    pthread_mutex_lock(&asi_share_mu)
    m.refs -= 1
    last = m.refs == 0
    if last:
        asi_shared_mem_live -= 1
    pthread_mutex_unlock(&asi_share_mu)
    if last:
        pthread_mutex_destroy(&m.mu)
        pthread_cond_destroy(&m.cv)
        free(m.data)
        free(m)


cdef class SharedBuffer:
    """Memory that several interpreters read and write at once.

    ``SharedBuffer(size)`` allocates ``size`` zeroed bytes outside every
    interpreter. Passing it (task argument, result, channel item) passes a
    reference to the same memory; it is freed when the last SharedBuffer
    object referring to it, in any interpreter, is gone. It supports the
    buffer protocol (writable): ``memoryview(buf)``, ``buf[i]``, slicing.

    Thread-safety: the memory itself is not synchronised: concurrent writes
    are data races on bytes. Guard them with a SharedLock (pass it along
    with the buffer) or give each writer its own region.
    """
    cdef SharedMem* m

    def __cinit__(self, Py_ssize_t size=0):
        if size < 0:
            raise ValueError(f"SharedBuffer size must be >= 0, got {size}")
        self.m = shm_new(size)

    def __dealloc__(self):
        if self.m != NULL:
            shm_decref(self.m)
            self.m = NULL

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        PyBuffer_FillInfo(buffer, self, self.m.data, self.m.size, 0, flags)

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __len__(self):
        return self.m.size

    def __getitem__(self, key):
        return memoryview(self)[key]

    def __setitem__(self, key, value):
        memoryview(self)[key] = value

    @property
    def address(self):
        """Address of the first byte (the same in every interpreter)."""
        return <Py_ssize_t>self.m.data

    def __reduce__(self):
        raise TypeError("SharedBuffer crosses to interpreters by reference and cannot be pickled")

    def __repr__(self):
        return f"<aiosubinterp.SharedBuffer size={self.m.size} at {<Py_ssize_t>self.m.data:#x}>"


cdef class SharedLock:
    """A lock that works across interpreters (and threads).

    Pass it to tasks or through channels: every copy is the same lock. Like
    ``threading.Lock``: ``acquire(blocking=True, timeout=-1)``, ``release()``,
    ``locked()``, and ``with lock:``. A blocked acquire waits without holding
    any GIL; it is not interrupted by task cancellation, so keep critical
    sections short.

    Thread-safety: every method may be called from any interpreter or thread.
    """
    cdef SharedMem* m

    def __cinit__(self):
        self.m = shm_new(0)

    def __dealloc__(self):
        if self.m != NULL:
            shm_decref(self.m)
            self.m = NULL

    def acquire(self, bint blocking=True, double timeout=-1):
        cdef SharedMem* m = self.m
        cdef bint got = False
        cdef double deadline = 0
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if not (timeout >= 0 or timeout == -1):  # NaN too: it never compares
            raise ValueError("timeout value must be a non-negative number of seconds, -1 or "
                             f"math.inf for no limit, got {timeout!r}")
        pthread_mutex_lock(&m.mu)
        if not m.locked:
            m.locked = 1
            got = True
        pthread_mutex_unlock(&m.mu)
        if got or not blocking:
            return got
        if timeout >= 0:
            # math.inf, or a timeout beyond what a clock can represent, gives
            # a deadline past ASI_DEADLINE_HORIZON: asi_cond_wait_until then
            # waits without a limit (aiosubinterp/_timeouts.py's rule).
            deadline = asi_monotonic() + timeout
        # GIL: any -> none (wait for the holder, who may need this GIL to finish)
        with nogil:
            pthread_mutex_lock(&m.mu)
            while m.locked:
                if timeout < 0:
                    pthread_cond_wait(&m.cv, &m.mu)
                elif asi_cond_wait_until(&m.cv, &m.mu, deadline) == ETIMEDOUT:
                    break
            if not m.locked:
                m.locked = 1
                got = True
            pthread_mutex_unlock(&m.mu)
        # GIL: none -> any
        return got

    def release(self):
        cdef SharedMem* m = self.m
        pthread_mutex_lock(&m.mu)
        if not m.locked:
            pthread_mutex_unlock(&m.mu)
            raise_wrong_state("release unlocked SharedLock")
        m.locked = 0
        pthread_cond_signal(&m.cv)
        pthread_mutex_unlock(&m.mu)

    def locked(self):
        return bool(asi_load_int(&self.m.locked))

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __reduce__(self):
        raise TypeError("SharedLock crosses to interpreters by reference and cannot be pickled")


cdef int encode_shared_mem(Buf* b, object obj) except -1:
    cdef SharedMem* m
    cdef int64_t kind
    if type(obj) is SharedBuffer:
        m = (<SharedBuffer>obj).m
        kind = SHM_BUFFER
    elif type(obj) is SharedLock:
        m = (<SharedLock>obj).m
        kind = SHM_LOCK
    else:
        return 0
    buf_reserve(b, 17)
    shm_incref(m)
    buf_tag(b, TAG_SHARED_MEM)
    buf_i64(b, <int64_t><Py_ssize_t>m)
    buf_i64(b, kind)
    return 1


cdef object decode_shared_mem(Reader* r):
    cdef SharedMem* m = <SharedMem*><Py_ssize_t>rd_i64(r)
    cdef int64_t kind = rd_i64(r)
    cdef SharedBuffer sb
    cdef SharedLock sl
    # Adopted from here on (decode_obj): drop the reference if no wrapper takes it.
    try:
        if kind == SHM_BUFFER:
            sb = SharedBuffer.__new__(SharedBuffer, 0)
        else:
            sl = SharedLock.__new__(SharedLock)
    except BaseException:
        shm_decref(m)
        raise
    if kind == SHM_BUFFER:
        shm_decref(sb.m)
        sb.m = m
        return sb
    shm_decref(sl.m)
    sl.m = m
    return sl


# -- explicit requests: share(), FileDescriptor ---------------------------------

cdef class ShareRequest:
    """What aiosubinterp.share() returns: obj's memory, to cross zero-copy."""
    cdef readonly object obj
    cdef readonly bint writable

    def __cinit__(self, obj, bint writable=False):
        memoryview(obj)  # fail here, at the call site, if obj has no buffer
        self.obj = obj
        self.writable = writable

    def __repr__(self):
        return f"aiosubinterp.share({self.obj!r}, writable={self.writable})"

    def __reduce__(self):
        raise TypeError("aiosubinterp.share(...) can only be passed to an interpreter, not pickled")


cdef class FileDescriptor:
    """An open file descriptor to hand to another interpreter.

    Crossing duplicates it (as os.dup does: the duplicate is non-inheritable,
    PEP 446); the receiver gets the duplicate as an int and owns it (close it
    when done). The original stays open here.
    """
    cdef readonly int fd

    def __cinit__(self, fd):
        if hasattr(fd, "fileno"):
            fd = fd.fileno()
        self.fd = fd
        if self.fd < 0:
            raise ValueError(f"FileDescriptor: invalid file descriptor {fd!r}")

    def __repr__(self):
        return f"aiosubinterp.FileDescriptor({self.fd})"

    def __reduce__(self):
        raise TypeError("FileDescriptor can only be passed to an interpreter, not pickled")


cdef int encode_fd(Buf* b, int fd, int64_t kind, int64_t family, int64_t stype, int64_t proto) except -1:
    cdef int d
    buf_reserve(b, 41)
    d = fcntl(fd, F_DUPFD_CLOEXEC, 0)
    if d < 0:
        raise_os_error(errno, f"cannot pass file descriptor {fd} to an interpreter",
                       with_strerror=True)
    buf_tag(b, TAG_FD)
    buf_i64(b, d)
    buf_i64(b, kind)
    buf_i64(b, family)
    buf_i64(b, stype)
    buf_i64(b, proto)
    return 1


cdef object decode_fd(Reader* r):
    cdef int64_t fd = rd_i64(r)
    cdef int64_t kind = rd_i64(r)
    cdef int64_t family = rd_i64(r)
    cdef int64_t stype = rd_i64(r)
    cdef int64_t proto = rd_i64(r)
    if kind == FD_SOCKET:
        # This decoder owns fd from the start (decode_obj counts it as
        # adopted): anything that fails, the import included, closes it.
        try:
            import socket
            return socket.socket(family, stype, proto, fileno=fd)
        except BaseException:
            close(fd)
            raise
    return fd


cdef int encode_special(Buf* b, object obj) except -1:
    """Buffers, shared memory, fds: returns 1 if obj was encoded here, else 0."""
    cdef type t = type(obj)
    cdef Py_ssize_t n
    if t is ShareRequest:
        if encode_share(b, (<ShareRequest>obj).obj, (<ShareRequest>obj).writable):
            return 1
        raise_no_share_owner("aiosubinterp.share() works only in the main interpreter and in "
                             "aiosubinterp workers")
    if t is SharedBuffer or t is SharedLock:
        return encode_shared_mem(b, obj)
    if t is FileDescriptor:
        return encode_fd(b, (<FileDescriptor>obj).fd, FD_INT, 0, 0, 0)
    if t is bytes:
        if PyBytes_GET_SIZE(obj) >= SHARE_MIN:
            return encode_share(b, obj, False)
        return 0
    if t is memoryview or t is bytearray or t is _ShareView or _is_other_buffer_type(t):
        if t is memoryview or t is _ShareView or t.__module__ == "mmap":
            n = SHARE_MIN   # not picklable (or a view already): always shared
        elif t is bytearray:
            n = len(<bytearray>obj)
        else:
            n = memoryview(obj).nbytes
        if n >= SHARE_MIN:
            # A writable view of a share stays writable as it passes on (it was
            # handed over writable); every other buffer crosses read-only.
            return encode_share(b, obj, _is_writable_share_view(obj))
        return 0
    sock_mod = _sys.modules.get("socket")
    if sock_mod is not None and (isinstance(obj, sock_mod.socket)
                                 or t.__name__ in ("TransportSocket", "PseudoSocket")):
        # What asyncio's (TransportSocket) and uvloop's (PseudoSocket)
        # transports hand out as get_extra_info("socket"): a real socket there.
        if obj.fileno() < 0:
            raise ValueError(f"cannot pass the closed socket {obj!r} to an interpreter")
        ssl_mod = _sys.modules.get("ssl")
        if ssl_mod is not None and isinstance(obj, ssl_mod.SSLSocket):
            # Its fd alone would cross: the receiver would talk plain TCP.
            raise TypeError(
                "cannot pass an ssl.SSLSocket to an interpreter: its TLS session lives in "
                "this interpreter and cannot be shared (only the plain TCP connection would "
                "cross). Hand over the socket before wrapping it and do TLS in the worker, "
                "or keep TLS here and send the data")
        return encode_fd(b, obj.fileno(), FD_SOCKET, obj.family, obj.type, obj.proto)
    return 0


cdef bint _is_writable_share_view(object obj) except -1:
    if type(obj) is memoryview:
        return type(obj.obj) is _ShareView and not obj.readonly
    if type(obj) is _ShareView:
        return not (<_ShareView>obj).ro
    return False


cdef bint _is_other_buffer_type(type t):
    mod = t.__module__
    return (mod == "array" and t.__name__ == "array") or (mod == "mmap" and t.__name__ == "mmap")


def share(obj, *, bint writable=False):
    """Mark obj's buffer to cross to an interpreter zero-copy, whatever its size.

    The receiver gets a memoryview over the same memory: read-only, or
    writable with writable=True (hand over a buffer you will no longer touch).
    The sender's object stays alive (and a bytearray cannot be resized) until
    every receiver has dropped its view and all slices of it.
    """
    return ShareRequest(obj, writable)


def share_stats():
    """Counters for tests: (records alive, records orphaned by a dead owner, shared blocks alive)."""
    cdef Py_ssize_t live, orphans, mem
    share_drain(current_owner())
    pthread_mutex_lock(&asi_share_mu)
    live = asi_share_live
    orphans = asi_share_orphans
    mem = asi_shared_mem_live
    pthread_mutex_unlock(&asi_share_mu)
    return (live, orphans, mem)


# -- dropping a blob that will never be decoded ----------------------------------

cdef int blob_discard(const char* data, Py_ssize_t size) noexcept nogil:
    """Drop the references a blob owns (shares, shared memory, fds, channel ends). Any GIL.

    Channel ends are queued and closed at the next release of the channel
    lock (chan_release_orphans() when none is held). Returns -1 on a corrupt
    blob (nothing more is dropped).
    """
    return blob_discard_from(data, size, data)


cdef int blob_discard_from(const char* data, Py_ssize_t size, const char* start) noexcept nogil:
    """blob_discard, for the references that begin at `start` or later only
    (those before it were taken over by a decode that failed afterwards)."""
    cdef Reader r
    reader_init(&r, data, size, 0, start)
    return _discard_obj(&r, NULL)


cdef Py_ssize_t blob_refs(const char* data, Py_ssize_t size) noexcept nogil:
    """How many references (shares, shared memory, fds, channel ends) a blob
    owns, dropping none; -1 on a corrupt blob. A blob copied to several
    receivers (worker settings) must own none: each copy would adopt them."""
    cdef Reader r
    cdef int found = 0
    reader_init(&r, data, size, 0, data)
    if _discard_obj(&r, &found) < 0:
        return -1
    return found


cdef int _discard_obj(Reader* r, int* count) noexcept nogil:
    """Drop what one encoded object owns, or with count != NULL only count it."""
    cdef unsigned char tag
    cdef int64_t n, i, v
    cdef bint keep
    if r.end - r.p < 1:
        return -1
    tag = <unsigned char>r.p[0]
    r.p += 1
    if tag == TAG_NONE or tag == TAG_TRUE or tag == TAG_FALSE:
        return 0
    if tag == TAG_INT or tag == TAG_FLOAT:
        return _skip(r, 8)
    if tag == TAG_COMPLEX:
        return _skip(r, 16)
    # A reference that starts before r.adopted was taken over by a decoded object.
    keep = r.p - 1 < r.adopted
    if count != NULL and tag in (TAG_CHANNEL, TAG_SHARE, TAG_SHARED_MEM, TAG_FD):
        count[0] += 1
        keep = True
    if tag == TAG_CHANNEL:
        if r.end - r.p < 16:
            return -1
        memcpy(&v, r.p, 8)
        memcpy(&n, r.p + 8, 8)
        r.p += 16
        if count != NULL and r.recv_of != NULL and end_is_receiver_of(v, n, r.recv_of):
            r.recv_hits += 1
        if not keep:
            chan_orphan_end(v, n)
        return 0
    if tag == TAG_SHARE:
        if r.end - r.p < 32:
            return -1
        memcpy(&v, r.p, 8)
        r.p += 32
        if not keep:
            rec_decref(<ShareRec*><Py_ssize_t>v)
        return 0
    if tag == TAG_SHARED_MEM:
        if r.end - r.p < 16:
            return -1
        memcpy(&v, r.p, 8)
        r.p += 16
        if not keep:
            shm_decref(<SharedMem*><Py_ssize_t>v)
        return 0
    if tag == TAG_FD:
        if r.end - r.p < 40:
            return -1
        memcpy(&v, r.p, 8)
        r.p += 40
        if not keep:
            close(<int>v)
        return 0
    if tag == TAG_WITH_ENDS:  # the ends, then the pickle that refers to them
        if r.end - r.p < 8:
            return -1
        memcpy(&n, r.p, 8)
        r.p += 8
        for i in range(n):
            if _discard_obj(r, count) < 0:
                return -1
        return _discard_obj(r, count)
    if tag == TAG_TUPLE or tag == TAG_FROZENSET or tag == TAG_PICKLE_OOB or tag == TAG_LIST:
        if r.end - r.p < 8:
            return -1
        memcpy(&n, r.p, 8)
        r.p += 8
        for i in range(n):
            if _discard_obj(r, count) < 0:
                return -1
        if tag != TAG_PICKLE_OOB:
            return 0
    elif tag == TAG_DICT:
        if r.end - r.p < 8:
            return -1
        memcpy(&n, r.p, 8)
        r.p += 8
        for i in range(2 * n):
            if _discard_obj(r, count) < 0:
                return -1
        return 0
    # length-prefixed bodies (and the pickle bytes after 'P')
    if r.end - r.p < 8:
        return -1
    memcpy(&n, r.p, 8)
    r.p += 8
    return _skip(r, n)


cdef inline int _skip(Reader* r, int64_t n) noexcept nogil:
    if n < 0 or r.end - r.p < n:
        return -1
    r.p += n
    return 0


def buffer_address(obj):
    """Address of the first byte of obj's buffer (tests: proves two views share memory)."""
    cdef Py_buffer v
    PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE)
    addr = <Py_ssize_t>v.buf
    PyBuffer_Release(&v)
    return addr
