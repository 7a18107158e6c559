# channel.pxi: channel core: a FIFO of encoded items, open-end counts, close, waiters, select.
#
# A channel is a C struct: no Python object is stored in it, so any
# interpreter (or none) may touch it. Items are xdata blobs prefixed by a
# ChanItem header (one malloc per item, made under the sender's GIL, decoded
# under the receiver's GIL).
#
# Locking: every channel of the process shares ONE mutex (asi_chan_mu). The
# critical sections are a few pointer moves, and a single lock makes select
# trivially atomic (an operation waiting on several channels is committed or
# withdrawn on all of them at once, with no lock ordering between channels).
# Lock order (ext/includes/lockorder.h, checked by debug builds): a thread
# may take asi_chan_mu while holding some interpreter's GIL; under it, the
# orphan, share, queue and hub mutexes (discarding an item under it releases
# a worker's share: asi_share_mu, then that worker's q.mu). So nothing takes
# asi_chan_mu while holding any of those, and nothing waits for a GIL while
# holding asi_chan_mu.
#
# Waiters ("ops"): a send or a receive (or a select over several receive
# ends) that cannot complete now registers a ChanOp with one ChanLink per
# channel. Whoever makes it completable commits it under the lock:
#   - a receive op gets the item moved into op.item (never into a hub
#     completion), so a cancelled receiver can put it back at the FRONT of the
#     channel (ChannelOp.unget): nothing is lost or duplicated;
#   - an asyncio op gets a completion with no data posted to its loop's hub
#     (token = the op's id, status = CH_*); the hub's lock is held while
#     committing, so an op whose loop is gone (hub closed) is never given an
#     item: it is withdrawn instead and the next waiter is tried;
#   - a blocking op (thread in send_sync/recv_sync) is woken through its own
#     condition variable, waited on with this interpreter's GIL released.
#
# Handles: an end is an EndHandle, a C record that counts as one sender or
# receiver of its channel and holds one reference on it. Every copy of the
# end points to the same record: the ChannelEnd objects (in any interpreter)
# and the blobs carrying it to another interpreter, each holding one of its
# `refs`. So an end passed to a worker is the same end: close() anywhere
# closes it for every holder; clone() makes a new record (a new sender or
# receiver). When the last copy goes without close() (garbage collected, its
# interpreter gone, a blob dropped undecoded) the end counts as closed. A blob
# that is freed without being decoded (a job withdrawn before it ran, an item
# refused or left in a channel whose receivers are all gone, an encoding or a
# decoding that failed half-way) drops the copies it carried: blob_discard
# queues them as orphans (it may run with asi_chan_mu held, inside
# chan_free_items), and chan_unlock() drops queued orphans each time
# asi_chan_mu is released. Ends inside pickled objects cross the same way
# (TAG_WITH_ENDS: the ends are encoded natively in front of the pickle).

cdef extern from *:
    """
    static pthread_mutex_t asi_chan_mu = PTHREAD_MUTEX_INITIALIZER;
    /* Completion tokens of channel ops: disjoint from task ids (small counters). */
    static uint64_t asi_chan_tokens = ((uint64_t)1) << 62;
    static uint64_t asi_chan_ids = 0;
    static unsigned long asi_chan_rotor = 0;
    /* Blocking ops currently waiting (a ChanOp* list), for interruptions. */
    static void *asi_chan_sync_head = NULL;
    /* Ends of discarded blobs, to close once asi_chan_mu is free (an OrphanEnd* list). */
    static pthread_mutex_t asi_orphan_mu = PTHREAD_MUTEX_INITIALIZER;
    static void *asi_orphan_head = NULL;
    """
    pthread_mutex_t asi_chan_mu
    uint64_t asi_chan_tokens
    uint64_t asi_chan_ids
    unsigned long asi_chan_rotor
    void* asi_chan_sync_head
    pthread_mutex_t asi_orphan_mu
    void* asi_orphan_head


cdef enum:
    TAG_CHANNEL = 67        # 'C': EndHandle pointer (int64) + end kind (int64); owns one of its refs
    TAG_WITH_ENDS = 69      # 'E': count, count 'C' items, then a 'p' or 'P' pickle referring to them

cdef enum:
    CH_SEND = 1
    CH_RECV = 2

cdef enum:
    # Results of channel operations; also the statuses of their completions.
    CH_DONE = 16            # the item moved
    CH_END = 17             # receive: every sender closed and the buffer is empty
    CH_BROKEN = 18          # send: every receiver closed
    CH_CLOSED = 19          # the end used is closed (by this or another task)
    CH_WOULDBLOCK = 20
    CH_TIMEOUT = 21
    CH_INTERRUPTED = 22     # a blocking wait was interrupted (task cancelled): retry from Python
    CH_OWN_RECEIVER = 23    # send: the item carries a receive end of this channel (refused)

cdef enum:
    OPS_WAITING = 0
    OPS_DONE = 1
    OPS_CANCELLED = 2


cdef struct ChanItem:
    ChanItem* next
    Py_ssize_t size          # payload bytes, which follow this header


cdef struct ChanState:
    ChanItem* head
    ChanItem* tail
    Py_ssize_t count
    Py_ssize_t maxsize       # < 0: unbounded; 0: rendezvous
    Py_ssize_t senders       # open send handles
    Py_ssize_t receivers     # open receive handles
    Py_ssize_t refs          # handles (open or closed, not yet freed) + ops linked to it
    void* rq_head            # ChanLink*: waiting receivers, FIFO
    void* rq_tail
    void* sq_head            # ChanLink*: waiting senders, FIFO
    void* sq_tail
    Py_ssize_t n_rwait
    Py_ssize_t n_swait
    uint64_t id


cdef struct EndHandle:
    ChanState* c             # one reference held
    int kind                 # CH_SEND / CH_RECV
    int closed               # counted as closed on c (close() or the last copy gone)
    Py_ssize_t refs          # ChannelEnd objects (any interpreter) + blobs carrying this end


cdef struct ChanLink:
    ChanLink* next
    ChanLink* prev
    ChanState* chan
    void* op                 # ChanOp*
    EndHandle* end           # the end waited through (closing it wakes this op)
    int index
    int linked


cdef struct ChanOp:
    int kind                 # CH_SEND / CH_RECV
    int state                # OPS_*
    int status               # CH_* once done
    int index                # which link committed
    ChanItem* item           # send: the item to hand over; receive: the item received
    HubState* hub            # asyncio op: its loop's hub (one reference held)
    uint64_t token
    Completion* comp         # preallocated completion (asyncio op)
    int is_sync
    int interrupted
    int in_sync_list
    unsigned long ident      # blocking op: the waiting thread
    pthread_cond_t cv
    ChanOp* sync_next
    ChanOp* sync_prev
    int nlinks
    ChanLink* links


# -- item blobs ------------------------------------------------------------------


cdef struct OrphanEnd:
    OrphanEnd* next
    EndHandle* h


cdef bint end_is_receiver_of(int64_t p, int64_t kind, const void* c) noexcept nogil:
    """True if the handle a blob carries (tag 'C': p, kind) is a receive end of channel c.

    No lock: a handle's channel is fixed for its life, and the blob holds a copy.
    """
    return p != 0 and kind == CH_RECV and <const void*>(<EndHandle*><Py_ssize_t>p).c == c


cdef bint item_carries_receiver_of(ChanItem* item, ChanState* c) noexcept nogil:
    """True if the item holds a receive end (any clone) of c, anywhere in it.

    Buffered in c, such an end would count as an open receiver of c for as
    long as the item stays there, and nobody could receive it once the
    other receive ends are gone: the channel would never break. Longer
    cycles (a receive end of c1 sent on c2 and one of c2 on c1) are not
    detected; the docstrings of open_channel() and send() say so.
    """
    cdef Reader r
    cdef int found = 0
    reader_init(&r, (<char*>item) + sizeof(ChanItem), item.size, 0, NULL)
    r.recv_of = <const void*>c
    _discard_obj(&r, &found)  # count mode: drops nothing
    return r.recv_hits > 0


cdef void chan_orphan_end(int64_t p, int64_t kind) noexcept nogil:
    """A discarded blob carried this end: drop its copy at the next chan_unlock(). Any lock."""
    global asi_orphan_head
    cdef OrphanEnd* o = <OrphanEnd*>malloc(sizeof(OrphanEnd))
    if o == NULL or p == 0 or (kind != CH_SEND and kind != CH_RECV):
        free(o)
        return  # out of memory or corrupt: the copy stays counted (the end stays open)
    o.h = <EndHandle*><Py_ssize_t>p
    pthread_mutex_lock(&asi_orphan_mu)
    o.next = <OrphanEnd*>asi_orphan_head
    asi_orphan_head = <void*>o
    pthread_mutex_unlock(&asi_orphan_mu)


cdef inline void chan_lock() noexcept nogil:
    """Take asi_chan_mu (released by chan_unlock)."""
    global asi_chan_mine
    pthread_mutex_lock(&asi_chan_mu)
    asi_chan_mine = 1


cdef void chan_unlock() noexcept nogil:
    """Release asi_chan_mu, then close the ends of discarded blobs (which may
    discard more), then schedule main's share releases deferred meanwhile."""
    global asi_orphan_head, asi_chan_mine, asi_main_release_due
    cdef OrphanEnd* o
    cdef OrphanEnd* nxt
    asi_chan_mine = 0
    pthread_mutex_unlock(&asi_chan_mu)
    while asi_load_ptr(&asi_orphan_head) != NULL:
        pthread_mutex_lock(&asi_orphan_mu)
        o = <OrphanEnd*>asi_orphan_head
        asi_orphan_head = NULL
        pthread_mutex_unlock(&asi_orphan_mu)
        chan_lock()
        while o != NULL:
            nxt = o.next
            handle_decref_locked(o.h)
            free(o)
            o = nxt
        asi_chan_mine = 0
        pthread_mutex_unlock(&asi_chan_mu)
    if asi_main_release_due:
        asi_main_release_due = 0
        schedule_main_release()


cdef void chan_release_orphans() noexcept nogil:
    """Close the ends of blobs discarded outside the channel lock. Caller holds no channel lock."""
    if asi_load_ptr(&asi_orphan_head) != NULL:
        chan_lock()
        chan_unlock()


cdef ChanItem* item_encode(object obj) except NULL:
    cdef Buf b
    cdef ChanItem* item
    b.data = NULL
    b.size = 0
    b.cap = 0
    try:
        if type(obj) is bytes and PyBytes_GET_SIZE(obj) < SHARE_MIN:
            # One allocation for mid-size buffers instead of a chain of
            # reallocs (larger ones are shared, not copied: share.pxi).
            buf_reserve(&b, sizeof(ChanItem) + 16 + PyBytes_GET_SIZE(obj))
        else:
            buf_reserve(&b, sizeof(ChanItem) + 64)
        b.size = sizeof(ChanItem)
        encode_into(&b, obj)
    except BaseException:
        if b.size > <Py_ssize_t>sizeof(ChanItem):  # drop the shares and fds encoded so far
            blob_discard(b.data + sizeof(ChanItem), b.size - <Py_ssize_t>sizeof(ChanItem))
            chan_release_orphans()
        buf_free(&b)
        raise
    item = <ChanItem*>b.data
    item.next = NULL
    item.size = b.size - <Py_ssize_t>sizeof(ChanItem)
    return item


cdef object item_decode(ChanItem* item):
    return decode_blob((<char*>item) + sizeof(ChanItem), item.size)


cdef inline void item_discard(ChanItem* item) noexcept nogil:
    """Free an item nobody will decode, dropping the ends, fds and shares it carries.

    Any lock: the ends are dropped at the next chan_unlock() (call
    chan_release_orphans() when asi_chan_mu is not held).
    """
    if item != NULL:
        blob_discard((<char*>item) + sizeof(ChanItem), item.size)
        free(item)


# -- waiter lists (asi_chan_mu held) -------------------------------------------------


cdef void link_append(ChanLink* l) noexcept nogil:
    cdef ChanState* c = l.chan
    cdef ChanLink** head
    cdef ChanLink** tail
    if (<ChanOp*>l.op).kind == CH_RECV:
        head = <ChanLink**>&c.rq_head
        tail = <ChanLink**>&c.rq_tail
        c.n_rwait += 1
    else:
        head = <ChanLink**>&c.sq_head
        tail = <ChanLink**>&c.sq_tail
        c.n_swait += 1
    l.next = NULL
    l.prev = tail[0]
    if tail[0] != NULL:
        tail[0].next = l
    else:
        head[0] = l
    tail[0] = l
    l.linked = 1


cdef void link_unlink(ChanLink* l) noexcept nogil:
    cdef ChanState* c = l.chan
    cdef ChanLink** head
    cdef ChanLink** tail
    if not l.linked:
        return
    if (<ChanOp*>l.op).kind == CH_RECV:
        head = <ChanLink**>&c.rq_head
        tail = <ChanLink**>&c.rq_tail
        c.n_rwait -= 1
    else:
        head = <ChanLink**>&c.sq_head
        tail = <ChanLink**>&c.sq_tail
        c.n_swait -= 1
    if l.prev != NULL:
        l.prev.next = l.next
    else:
        head[0] = l.next
    if l.next != NULL:
        l.next.prev = l.prev
    else:
        tail[0] = l.prev
    l.next = NULL
    l.prev = NULL
    l.linked = 0


cdef void op_withdraw(ChanOp* op) noexcept nogil:
    cdef int i
    for i in range(op.nlinks):
        link_unlink(&op.links[i])


cdef void sync_list_add(ChanOp* op) noexcept nogil:
    global asi_chan_sync_head
    op.sync_prev = NULL
    op.sync_next = <ChanOp*>asi_chan_sync_head
    if op.sync_next != NULL:
        op.sync_next.sync_prev = op
    asi_chan_sync_head = <void*>op
    op.in_sync_list = 1


cdef void sync_list_remove(ChanOp* op) noexcept nogil:
    global asi_chan_sync_head
    if not op.in_sync_list:
        return
    if op.sync_prev != NULL:
        op.sync_prev.sync_next = op.sync_next
    else:
        asi_chan_sync_head = <void*>op.sync_next
    if op.sync_next != NULL:
        op.sync_next.sync_prev = op.sync_prev
    op.in_sync_list = 0


cdef bint op_complete(ChanOp* op, int status, int index, ChanItem* item) noexcept nogil:
    """Commit a waiting op. asi_chan_mu held. A receive op takes `item` (may be NULL).

    Returns False, and withdraws the op without giving it anything, when the
    op's event loop is gone (its hub is closed).
    """
    cdef HubState* h = op.hub
    cdef Completion* comp
    cdef bint was_empty
    op_withdraw(op)
    if op.is_sync:
        op.state = OPS_DONE
        op.status = status
        op.index = index
        if item != NULL:
            op.item = item
        pthread_cond_signal(&op.cv)
        return True
    pthread_mutex_lock(&h.mu)
    if h.closed:
        pthread_mutex_unlock(&h.mu)
        op.state = OPS_CANCELLED
        return False
    op.state = OPS_DONE
    op.status = status
    op.index = index
    if item != NULL:
        op.item = item
    comp = op.comp
    op.comp = NULL
    comp.next = NULL
    comp.tid = op.token
    comp.status = status
    comp.flags = 0
    comp.worker_serial = 0
    comp.data = NULL
    comp.size = 0
    was_empty = h.head == NULL
    if h.tail == NULL:
        h.head = comp
    else:
        h.tail.next = comp
    h.tail = comp
    pthread_mutex_unlock(&h.mu)
    if was_empty:
        hub_wake(h)
    return True


# -- the channel state machine (asi_chan_mu held) --------------------------------------


cdef bint chan_give(ChanState* c, ChanItem* item) noexcept nogil:
    """Hand item to the first waiting receiver that can take it."""
    cdef ChanLink* l
    while c.rq_head != NULL:
        l = <ChanLink*>c.rq_head
        if op_complete(<ChanOp*>l.op, CH_DONE, l.index, item):
            return True
    return False


cdef ChanItem* chan_take_sender(ChanState* c) noexcept nogil:
    """Take the item of the first waiting sender that can be released, or NULL."""
    cdef ChanLink* l
    cdef ChanOp* op
    cdef ChanItem* item
    while c.sq_head != NULL:
        l = <ChanLink*>c.sq_head
        op = <ChanOp*>l.op
        item = op.item
        if op_complete(op, CH_DONE, l.index, NULL):
            op.item = NULL
            return item
    return NULL


cdef inline void chan_push(ChanState* c, ChanItem* item, bint front) noexcept nogil:
    if front:
        item.next = c.head
        c.head = item
        if c.tail == NULL:
            c.tail = item
    else:
        item.next = NULL
        if c.tail == NULL:
            c.head = item
        else:
            c.tail.next = item
        c.tail = item
    c.count += 1


cdef int chan_try_send(ChanState* c, ChanItem* item) noexcept nogil:
    """CH_DONE (item taken), CH_BROKEN or CH_WOULDBLOCK (item still the caller's)."""
    if c.receivers <= 0:
        return CH_BROKEN
    if chan_give(c, item):
        return CH_DONE
    if c.maxsize < 0 or c.count < c.maxsize:
        chan_push(c, item, False)
        return CH_DONE
    return CH_WOULDBLOCK


cdef int chan_try_recv(ChanState* c, ChanItem** out) noexcept nogil:
    """CH_DONE (out set), CH_END or CH_WOULDBLOCK."""
    cdef ChanItem* item = c.head
    cdef ChanItem* moved
    if item != NULL:
        c.head = item.next
        if c.head == NULL:
            c.tail = NULL
        c.count -= 1
        item.next = NULL
        out[0] = item
        # A slot opened: the first blocked sender's item moves into the buffer.
        while c.sq_head != NULL and (c.maxsize < 0 or c.count < c.maxsize):
            moved = chan_take_sender(c)
            if moved == NULL:
                break
            chan_push(c, moved, False)
        return CH_DONE
    item = chan_take_sender(c)
    if item != NULL:
        out[0] = item
        return CH_DONE
    if c.senders <= 0:
        return CH_END
    return CH_WOULDBLOCK


cdef void chan_free_items(ChanState* c) noexcept nogil:
    cdef ChanItem* item = c.head
    cdef ChanItem* nxt
    while item != NULL:
        nxt = item.next
        item_discard(item)  # nobody will decode it
        item = nxt
    c.head = NULL
    c.tail = NULL
    c.count = 0


cdef void chan_close_handle(ChanState* c, int kind) noexcept nogil:
    """One handle of `kind` is closed: wake who can no longer make progress."""
    cdef ChanLink* l
    if kind == CH_SEND:
        c.senders -= 1
        if c.senders > 0:
            return
        # Receivers wait only while the buffer is empty: the channel has ended.
        while c.rq_head != NULL:
            l = <ChanLink*>c.rq_head
            op_complete(<ChanOp*>l.op, CH_END, l.index, NULL)
        while c.sq_head != NULL:
            l = <ChanLink*>c.sq_head
            op_complete(<ChanOp*>l.op, CH_CLOSED, l.index, NULL)
    else:
        c.receivers -= 1
        if c.receivers > 0:
            return
        while c.sq_head != NULL:
            l = <ChanLink*>c.sq_head
            op_complete(<ChanOp*>l.op, CH_BROKEN, l.index, NULL)
        while c.rq_head != NULL:
            l = <ChanLink*>c.rq_head
            op_complete(<ChanOp*>l.op, CH_CLOSED, l.index, NULL)
        # Nobody can ever receive these.
        chan_free_items(c)


cdef void chan_unref(ChanState* c) noexcept nogil:
    """Drop one reference. asi_chan_mu held; frees the channel on the last one."""
    c.refs -= 1
    if c.refs > 0:
        return
    chan_free_items(c)
    free(c)


cdef void handle_close_locked(EndHandle* e) noexcept nogil:
    """Count end e as closed on its channel (once), and wake the ops waiting
    through it (another holder of the same end may be blocked in it). asi_chan_mu held."""
    cdef ChanLink* l
    if e.closed:
        return
    e.closed = 1
    chan_close_handle(e.c, e.kind)
    l = <ChanLink*>(e.c.rq_head if e.kind == CH_RECV else e.c.sq_head)
    while l != NULL:
        if l.end == e:
            op_complete(<ChanOp*>l.op, CH_CLOSED, l.index, NULL)  # unlinks: start again
            l = <ChanLink*>(e.c.rq_head if e.kind == CH_RECV else e.c.sq_head)
        else:
            l = l.next


cdef void handle_decref_locked(EndHandle* e) noexcept nogil:
    """Drop one copy of end e. asi_chan_mu held; the last copy closes and frees it."""
    e.refs -= 1
    if e.refs > 0:
        return
    handle_close_locked(e)
    chan_unref(e.c)
    free(e)


cdef void chan_interrupt_thread(unsigned long ident) noexcept nogil:
    """Wake every blocking channel wait of thread `ident` (its task is being cancelled).

    Called by interp_interrupt right after it injected the exception, holding
    that interpreter's GIL: a wait registered later runs bytecode first, where
    the injected exception fires.
    """
    cdef ChanOp* op
    chan_lock()
    op = <ChanOp*>asi_chan_sync_head
    while op != NULL:
        if op.ident == ident:
            op.interrupted = 1
            pthread_cond_signal(&op.cv)
        op = op.sync_next
    chan_unlock()


# -- ops ---------------------------------------------------------------------------------


cdef ChanOp* op_new(int kind, int nlinks, bint is_sync) noexcept nogil:
    cdef ChanOp* op = <ChanOp*>calloc(1, sizeof(ChanOp))
    if op == NULL:
        return NULL
    op.links = <ChanLink*>calloc(nlinks, sizeof(ChanLink))
    if op.links == NULL:
        free(op)
        return NULL
    if is_sync:
        asi_cond_init(&op.cv)
    else:
        op.comp = <Completion*>calloc(1, sizeof(Completion))
        if op.comp == NULL:
            free(op.links)
            free(op)
            return NULL
    op.kind = kind
    op.nlinks = nlinks
    op.is_sync = is_sync
    op.state = OPS_WAITING
    return op


cdef void op_register(ChanOp* op, ChanState** chans) noexcept nogil:
    """Link op on every channel (asi_chan_mu held); each link holds a channel reference."""
    global asi_chan_tokens
    cdef int i
    cdef ChanLink* l
    for i in range(op.nlinks):
        l = &op.links[i]
        l.chan = chans[i]
        l.op = <void*>op
        l.index = i
        chans[i].refs += 1
        link_append(l)
    asi_chan_tokens += 1
    op.token = asi_chan_tokens


cdef void op_unget_locked(ChanOp* op) noexcept nogil:
    """Put a received, unclaimed item back at the front of its channel. asi_chan_mu held."""
    cdef ChanItem* item = op.item
    cdef ChanState* c
    if item == NULL or op.kind != CH_RECV:
        return
    op.item = NULL
    c = op.links[op.index].chan
    if c.receivers <= 0:
        item_discard(item)  # dropped at this lock's release
    elif not chan_give(c, item):
        chan_push(c, item, True)


cdef void op_free(ChanOp* op) noexcept nogil:
    """Withdraw (or unget) and free. Takes asi_chan_mu."""
    cdef int i
    cdef ChanItem* item
    cdef HubState* h = op.hub
    chan_lock()
    if op.state == OPS_WAITING:
        op_withdraw(op)
        op.state = OPS_CANCELLED
    sync_list_remove(op)
    # A received item nobody claimed goes back: never lost.
    op_unget_locked(op)
    item = op.item
    op.item = NULL
    for i in range(op.nlinks):
        if op.links[i].chan != NULL:
            chan_unref(op.links[i].chan)
            op.links[i].chan = NULL
    chan_unlock()
    if item != NULL:  # a send op's item that was never handed over
        item_discard(item)
        chan_release_orphans()
    if h != NULL:
        hub_decref(h)
    if op.is_sync:
        pthread_cond_destroy(&op.cv)
    free(op.comp)
    free(op.links)
    free(op)


cdef int op_wait_blocking(ChanOp* op, double deadline) noexcept nogil:
    """Block until op is committed, the deadline passes or the thread is interrupted.

    No GIL held; takes asi_chan_mu. Returns op's status, CH_TIMEOUT or CH_INTERRUPTED.
    """
    cdef int st
    chan_lock()
    while op.state == OPS_WAITING and not op.interrupted:
        if deadline >= 0:
            if asi_cond_wait_until(&op.cv, &asi_chan_mu, deadline) == ETIMEDOUT:
                break
        else:
            pthread_cond_wait(&op.cv, &asi_chan_mu)
    sync_list_remove(op)
    if op.state == OPS_WAITING:
        op_withdraw(op)
        op.state = OPS_CANCELLED
        st = CH_INTERRUPTED if op.interrupted else CH_TIMEOUT
    else:
        st = op.status
    chan_unlock()
    return st


cdef class ChannelOp:
    """A channel send, receive or select waiting for its event loop (internal).

    Registered in its hub's ``pending`` under ``token``; the loop calls
    ``_deliver(status, None)`` when the op was committed, which resolves
    ``waiter`` (a future) with the status. Received items stay in C until
    ``take()`` decodes them, so ``unget()`` can put one back unchanged.

    Thread-safety: use it from the thread of its loop.
    """
    cdef ChanOp* op
    cdef public object waiter

    def __init__(self, *args, **kwargs):
        raise TypeError("ChannelOp cannot be created directly: channel sends, receives and "
                        "selects make their own (internal)")

    def __dealloc__(self):
        if self.op != NULL:
            op_free(self.op)
            self.op = NULL

    cdef int check(self) except -1:
        if self.op == NULL:
            raise TypeError("this ChannelOp was not made by a channel operation (internal)")
        return 0

    @property
    def token(self):
        self.check()
        return self.op.token

    @property
    def status(self):
        """CH_* once committed, else 0."""
        cdef int st
        self.check()
        chan_lock()
        st = self.op.status if self.op.state == OPS_DONE else 0
        chan_unlock()
        return st

    def _deliver(self, int status, value):
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(status)

    def cancel(self):
        """Withdraw if still waiting: True means nothing happened; False: it was committed."""
        cdef bint withdrawn = False
        cdef ChanItem* item
        self.check()
        chan_lock()
        if self.op.state == OPS_WAITING:
            op_withdraw(self.op)
            self.op.state = OPS_CANCELLED
            withdrawn = True
            if self.op.kind == CH_SEND and self.op.item != NULL:
                # Never sent: drop what it carries now, not when this object
                # is collected (a traceback may keep it for long).
                item = self.op.item
                self.op.item = NULL
                item_discard(item)
        chan_unlock()
        return withdrawn

    def take(self):
        """(status, index, value) of a committed op; decodes a received item here."""
        cdef ChanItem* item
        cdef int st
        cdef int idx
        self.check()
        chan_lock()
        item = self.op.item if self.op.kind == CH_RECV else NULL
        if item != NULL:
            self.op.item = NULL
        st = self.op.status if self.op.state == OPS_DONE else CH_CLOSED
        idx = self.op.index
        chan_unlock()
        if item == NULL:
            return st, idx, None
        try:
            value = item_decode(item)
        finally:
            free(item)
        return st, idx, value

    def unget(self):
        """Put a received but unclaimed item back at the front of its channel."""
        self.check()
        chan_lock()
        op_unget_locked(self.op)
        chan_unlock()


cdef ChannelOp wrap_op(ChanOp* op):
    cdef ChannelOp o = ChannelOp.__new__(ChannelOp)
    o.op = op
    return o


# -- ends --------------------------------------------------------------------------------


cdef object end_classes():
    from aiosubinterp._channels import ends as _channel
    return _channel.SendChannel, _channel.RecvChannel


cdef object adopt_end(EndHandle* e):
    """A new end object for one (already counted) copy of e; the copy is dropped on failure."""
    cdef ChannelEnd end
    try:
        send_cls, recv_cls = end_classes()
        cls = send_cls if e.kind == CH_SEND else recv_cls
        end = cls.__new__(cls)
    except BaseException:
        chan_lock()
        handle_decref_locked(e)
        chan_unlock()
        raise
    end.h = e
    end.c = e.c
    end.kind = e.kind
    return end


cdef EndHandle* handle_alloc(ChanState* c, int kind) except NULL:
    cdef EndHandle* e = <EndHandle*>calloc(1, sizeof(EndHandle))
    if e == NULL:
        raise_no_memory("aiosubinterp: out of memory while making a channel end")
    e.c = c
    e.kind = kind
    e.refs = 1
    return e


cdef int take_handle(ChanState* c, int kind) noexcept nogil:
    # asi_chan_mu held: one more open end (an EndHandle) of c.
    c.refs += 1
    if kind == CH_SEND:
        c.senders += 1
    else:
        c.receivers += 1
    return 0


cdef int chan_try_encode_end(Buf* b, object obj) except -1:
    """Encode a channel end (tag 'C'); returns 1 if obj was one, else 0.

    The blob holds one copy of the end (the same end: not a clone) until it
    is decoded or discarded.
    """
    cdef ChannelEnd end
    cdef int64_t v
    if not isinstance(obj, ChannelEnd):
        return 0
    end = <ChannelEnd>obj
    end.check()
    buf_reserve(b, 17)  # before the copy is counted: running out of memory leaks nothing
    chan_lock()
    if end.h.closed:
        chan_unlock()
        raise_end_closed(end)
    end.h.refs += 1
    chan_unlock()
    buf_tag(b, TAG_CHANNEL)
    v = <int64_t><Py_ssize_t>end.h
    buf_i64(b, v)
    buf_i64(b, end.kind)
    return 1


cdef object chan_decode_end(Reader* r):
    cdef int64_t p = rd_i64(r)
    cdef int64_t kind = rd_i64(r)
    if p == 0 or kind not in (CH_SEND, CH_RECV):
        raise_corrupt("channel end")
    return adopt_end(<EndHandle*><Py_ssize_t>p)


def _adopt_end(*args):
    """Refuses: ends are no longer pickled with raw handles (an old pickle)."""
    raise TypeError("aiosubinterp: a channel end cannot be unpickled: ends cross only as task "
                    "arguments and results or through channels, which aiosubinterp carries itself")


def open_channel_ends(maxsize):
    """(send end, receive end) of a new channel; maxsize < 0 means unbounded."""
    global asi_chan_ids
    cdef Py_ssize_t m = maxsize
    cdef EndHandle* se
    cdef EndHandle* re
    cdef ChanState* c = <ChanState*>calloc(1, sizeof(ChanState))
    if c == NULL:
        raise_no_memory()
    se = <EndHandle*>calloc(1, sizeof(EndHandle))
    re = <EndHandle*>calloc(1, sizeof(EndHandle))
    if se == NULL or re == NULL:
        free(se)
        free(re)
        free(c)
        raise_no_memory()
    c.maxsize = m
    c.senders = 1
    c.receivers = 1
    c.refs = 2
    se.c = c
    se.kind = CH_SEND
    se.refs = 1
    re.c = c
    re.kind = CH_RECV
    re.refs = 1
    chan_lock()
    asi_chan_ids += 1
    c.id = asi_chan_ids
    chan_unlock()
    try:
        send_end = adopt_end(se)  # drops se itself if it fails
    except BaseException:
        chan_lock()
        handle_decref_locked(re)  # the receive end nobody got: the channel goes
        chan_unlock()
        raise
    return send_end, adopt_end(re)


cdef int collect_chans(object ends, ChanState** chans, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef ChannelEnd e
    for i in range(n):
        e = <ChannelEnd?>ends[i]
        e.check()
        if e.kind != CH_RECV:
            raise TypeError(f"select() takes receive ends, got {e!r}")
        chans[i] = e.c
    return 0


cdef int released_end(object ends, Py_ssize_t n) noexcept:
    """Index of the first end whose object dropped its copy (_release()), or -1."""
    cdef Py_ssize_t i
    for i in range(n):
        if (<ChannelEnd>ends[i]).h == NULL:
            return <int>i
    return -1


cdef int any_closed(object ends, Py_ssize_t n) noexcept:
    # asi_chan_mu held. Index of the first closed end, or -1.
    cdef Py_ssize_t i
    for i in range(n):
        if (<ChannelEnd>ends[i]).h.closed:
            return <int>i
    return -1


@cython.cdivision(True)  # n >= 1: no zero-division check, which would take the GIL
cdef int recv_try_locked(ChanState** chans, int n, ChanItem** out, int* index) noexcept nogil:
    """Try every channel, starting at a rotating position (fairness). asi_chan_mu held."""
    global asi_chan_rotor
    cdef int k
    cdef int i
    cdef int st
    cdef int start = 0
    cdef int ended = -1
    if n > 1:
        asi_chan_rotor += 1
        start = <int>(asi_chan_rotor % <unsigned long>n)
    for k in range(n):
        i = (start + k) % n
        st = chan_try_recv(chans[i], out)
        if st == CH_DONE:
            index[0] = i
            return CH_DONE
        if st == CH_END and ended < 0:
            ended = i
    if ended >= 0:
        index[0] = ended
        return CH_END
    return CH_WOULDBLOCK


cdef object recv_generic(object ends, int mode, Hub hub, double deadline):
    """Receive from the first ready end. mode 0: nowait; 1: async (hub); 2: blocking.

    Returns (status, index, value), or a ChannelOp (mode 1, registered: not ready).
    """
    cdef Py_ssize_t n = len(ends)
    cdef Py_ssize_t i
    cdef ChanState* one[1]
    cdef ChanState** chans = one
    cdef ChanItem* item = NULL
    cdef ChanOp* op = NULL
    cdef HubState* h = NULL
    cdef int index = 0
    cdef int st
    cdef ChannelOp wrapper = None
    if n == 0:
        raise ValueError("select() needs at least one receive end")
    if type(ends) is not tuple:
        ends = tuple(ends)
    if n > 1:
        chans = <ChanState**>malloc(n * sizeof(ChanState*))
        if chans == NULL:
            raise_no_memory()
    try:
        collect_chans(ends, chans, n)
        share_drain(current_owner())  # what receivers released of earlier items (long tasks)
        if mode == 1:
            wrapper = ChannelOp.__new__(ChannelOp)
            h = hub.acquire()  # as send_generic: before anything else can run
        # share_drain() ran Python code (a buffer's release), which may have
        # released one of these ends (_release()): it counts as closed.
        index = released_end(ends, n)
        if index >= 0:
            return CH_CLOSED, index, None
        chan_lock()
        index = any_closed(ends, n)
        if index >= 0:
            chan_unlock()
            return CH_CLOSED, index, None
        st = recv_try_locked(chans, <int>n, &item, &index)
        if st != CH_WOULDBLOCK or mode == 0:
            chan_unlock()
            if item == NULL:
                return st, index, None
            try:
                value = item_decode(item)
            finally:
                free(item)
            return st, index, value
        op = op_new(CH_RECV, <int>n, mode == 2)
        if op == NULL:
            chan_unlock()
            raise_no_memory()
        op_register(op, chans)
        for i in range(n):
            op.links[i].end = (<ChannelEnd>ends[i]).h
        if mode == 1:
            op.hub = h  # the op owns the reference from here on
            h = NULL
            wrapper.op = op
            chan_unlock()
            return wrapper
        op.ident = PyThread_get_thread_ident()
        sync_list_add(op)
        chan_unlock()
        # GIL: X -> none (wait for a sender without blocking this interpreter's other threads)
        with nogil:
            st = op_wait_blocking(op, deadline)
        # GIL: none -> X
        if st == CH_DONE:
            wrapper = wrap_op(op)  # owns op from here on
            return wrapper.take()
        index = op.index
        op_free(op)
        return st, index, None
    finally:
        if chans != one:
            free(chans)
        if h != NULL:
            hub_decref(h)


def select_nowait(ends):
    """(status, index, value) without waiting (status CH_WOULDBLOCK if nothing is ready)."""
    return recv_generic(ends, 0, None, -1.0)


def select_begin(ends, Hub hub not None):
    """(status, index, value) if ready now, else a ChannelOp registered for `hub`."""
    return recv_generic(ends, 1, hub, -1.0)


def select_wait(ends, double deadline):
    """Block (GIL released) until ready or the monotonic deadline (< 0: none) passes."""
    return recv_generic(ends, 2, None, deadline)


def monotonic():
    """The clock of blocking deadlines (CLOCK_MONOTONIC, seconds)."""
    return asi_monotonic()


cdef class ChannelEnd:
    """One end of a channel: a copy of the handle that counts as an open sender or receiver.

    The C part of SendChannel / RecvChannel (aiosubinterp._channels.ends): status
    codes only, no policy. Every copy of an end (in any interpreter) shares
    one EndHandle: closing one closes all; the last copy to go closes it.

    Thread-safety: any thread of its interpreter; the channel itself is
    shared by every interpreter holding an end.
    """
    cdef EndHandle* h
    cdef ChanState* c        # h.c, h.kind: fixed for the handle's life
    cdef int kind

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} cannot be created directly: "
                        "use aiosubinterp.open_channel(), or clone() an existing end")

    def __dealloc__(self):
        cdef EndHandle* e = self.h
        if e == NULL:
            return
        self.h = NULL
        self.c = NULL
        chan_lock()
        handle_decref_locked(e)
        chan_unlock()

    cdef int check(self) except -1:
        if self.h == NULL:
            raise TypeError(f"this {type(self).__name__} was not made by "
                            "aiosubinterp.open_channel(): use the ends it returns")
        return 0

    def _close(self):
        """Close this end for every holder of it; True if it was open."""
        self.check()
        chan_lock()
        if self.h.closed:
            chan_unlock()
            return False
        handle_close_locked(self.h)
        chan_unlock()
        return True

    @property
    def closed(self):
        """True once this end is closed (here or by another holder; not its clones)."""
        cdef bint closed
        if self.h == NULL:
            return True
        chan_lock()
        closed = self.h.closed
        chan_unlock()
        return closed

    @property
    def _valid(self):
        return self.h != NULL

    @property
    def _channel_id(self):
        self.check()
        return self.c.id

    def _clone(self):
        """A new open handle of the same kind on the same channel, or None if this one is closed."""
        cdef EndHandle* e
        self.check()
        e = handle_alloc(self.c, self.kind)
        chan_lock()
        if self.h.closed:
            chan_unlock()
            free(e)
            return None
        take_handle(self.c, self.kind)
        chan_unlock()
        return adopt_end(e)

    def _share(self):
        """Another copy of this same end (closing either closes both), or None if it is closed."""
        self.check()
        chan_lock()
        if self.h.closed:
            chan_unlock()
            return None
        self.h.refs += 1
        chan_unlock()
        return adopt_end(self.h)

    def _release(self):
        """Drop this copy of the end now, as its collection would, without closing
        the end for its other holders. Only for an object no other thread uses:
        afterwards it is closed, and every operation on it refuses.

        On a free-threaded build an object whose last reference another thread
        drops is collected later, by the thread that made it, when that thread
        next runs Python code: too late for a loop that sleeps in epoll until
        the end closes.
        """
        cdef EndHandle* e = self.h
        if e == NULL:
            return
        self.h = NULL
        self.c = NULL
        chan_lock()
        handle_decref_locked(e)
        chan_unlock()

    def _stats(self):
        """(buffered, maxsize, open senders, open receivers, waiting senders, waiting receivers)."""
        cdef ChanState* c
        cdef Py_ssize_t s[6]
        self.check()
        c = self.c
        # C values under the lock, Python objects after it (a collection
        # started by an allocation must not run with asi_chan_mu held).
        chan_lock()
        s[0] = c.count
        s[1] = c.maxsize
        s[2] = c.senders
        s[3] = c.receivers
        s[4] = c.n_swait
        s[5] = c.n_rwait
        chan_unlock()
        return (s[0], s[1], s[2], s[3], s[4], s[5])

    def __reduce__(self):
        # A plain pickle would have to carry a raw address (loaded twice, or in
        # another process, it is a use-after-free). aiosubinterp's own
        # transfers carry ends themselves (ext/xdata.pxi TAG_WITH_ENDS,
        # _procwire for worker processes) and never get here.
        raise EndNotPicklableError(
            f"cannot pickle {self!r}: a channel end crosses only as a task argument or result, "
            "or through a channel, where aiosubinterp carries it itself (pickle.dumps, copy "
            "and multiprocessing cannot); pass the end itself")

    cdef object send_generic(self, obj, int mode, Hub hub, double deadline):
        """mode 0: nowait; 1: async; 2: blocking. Returns a status or a ChannelOp (mode 1)."""
        cdef ChanItem* item
        cdef ChanOp* op
        cdef HubState* h = NULL
        cdef ChannelOp wrapper = None
        cdef ChanState* c
        cdef int st
        self.check()
        share_drain(current_owner())  # what receivers released of earlier items (long tasks)
        if mode == 1:
            wrapper = ChannelOp.__new__(ChannelOp)
            # The hub's reference before encoding runs Python code, as
            # Queue.submit takes it: a hub closed meanwhile cannot be freed
            # under this op (it is then withdrawn at commit, never given the item).
            h = hub.acquire()
        try:
            item = item_encode(obj)
            # Python code ran since check() (share_drain's releases, the item's
            # __reduce__), which may have released this very end (_release()):
            # then it counts as closed, and self.h and self.c are gone.
            if self.h == NULL:
                item_discard(item)
                chan_release_orphans()
                return CH_CLOSED
            c = self.c
            if item_carries_receiver_of(item, c):
                item_discard(item)  # drop the copies it carries (no channel lock held here)
                chan_release_orphans()
                return CH_OWN_RECEIVER
            chan_lock()
            if self.h.closed:
                st = CH_CLOSED
            else:
                st = chan_try_send(c, item)
            if st != CH_WOULDBLOCK or mode == 0:
                if st != CH_DONE:
                    item_discard(item)  # refused: drop what it carries (at this unlock)
                chan_unlock()
                return st
            op = op_new(CH_SEND, 1, mode == 2)
            if op == NULL:
                item_discard(item)
                chan_unlock()
                raise_no_memory()
            op.item = item
            op_register(op, &c)
            op.links[0].end = self.h
            if mode == 1:
                op.hub = h  # the op owns the reference from here on
                h = NULL
                wrapper.op = op
                chan_unlock()
                return wrapper
            op.ident = PyThread_get_thread_ident()
            sync_list_add(op)
            chan_unlock()
            # GIL: X -> none (wait for a receiver without blocking this interpreter's other threads)
            with nogil:
                st = op_wait_blocking(op, deadline)
            # GIL: none -> X
            op_free(op)
            return st
        finally:
            if h != NULL:
                hub_decref(h)

    def _send_nowait(self, obj):
        return self.send_generic(obj, 0, None, -1.0)

    def _send_begin(self, obj, Hub hub not None):
        return self.send_generic(obj, 1, hub, -1.0)

    def _send_wait(self, obj, double deadline):
        return self.send_generic(obj, 2, None, deadline)

    def _recv_nowait(self):
        self.check()
        return recv_generic((self,), 0, None, -1.0)

    def _recv_begin(self, Hub hub not None):
        return recv_generic((self,), 1, hub, -1.0)

    def _recv_wait(self, double deadline):
        return recv_generic((self,), 2, None, deadline)


class EndNotPicklableError(TypeError):
    """A channel end was given to pickle (or copy) rather than to an aiosubinterp transfer."""


CHAN_DONE = CH_DONE
CHAN_END = CH_END
CHAN_BROKEN = CH_BROKEN
CHAN_CLOSED = CH_CLOSED
CHAN_WOULDBLOCK = CH_WOULDBLOCK
CHAN_TIMEOUT = CH_TIMEOUT
CHAN_INTERRUPTED = CH_INTERRUPTED
CHAN_OWN_RECEIVER = CH_OWN_RECEIVER
