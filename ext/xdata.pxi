# xdata.pxi: moving data between interpreters.
#
# A value crosses as a self-contained C blob (malloc'd, no Python object
# inside), written under the sender's GIL and read under the receiver's GIL,
# which builds its own objects from it. Exact builtin immutables get a native
# tag; everything else is one pickle (protocol 5) per non-native item.
#
# Layout: one tag byte, then a tag-specific body. Lengths and counts are
# int64 in native byte order (both sides are the same process).

cdef enum:
    TAG_NONE = 78        # 'N'
    TAG_TRUE = 84        # 'T'
    TAG_FALSE = 70       # 'F'
    TAG_INT = 105        # 'i': int64
    TAG_BIGINT = 73      # 'I': length + little-endian two's complement bytes
    TAG_FLOAT = 102      # 'f': double
    TAG_COMPLEX = 99     # 'c': two doubles
    TAG_STR = 115        # 's': length + UTF-8
    TAG_STR_SURROGATE = 83  # 'S': length + UTF-8 with surrogatepass
    TAG_BYTES = 98       # 'b': length + bytes
    TAG_TUPLE = 116      # 't': count + items
    TAG_FROZENSET = 122  # 'z': count + items
    TAG_PICKLE = 112     # 'p': length + pickle protocol 5
    TAG_LIST = 108       # 'l': count + items
    TAG_DICT = 109       # 'm': count + key, value pairs

cdef enum:
    # Native nesting deeper than this is pickled as a whole instead, so the C
    # stack of the encoder stays bounded whatever the input.
    MAX_NATIVE_DEPTH = 64
    # The decoder refuses deeper nesting (loads() takes any bytes): what the
    # encoder makes nests at most a few levels past MAX_NATIVE_DEPTH (a pickle
    # with out-of-band views or channel ends at the deepest native level).
    MAX_DECODE_DEPTH = MAX_NATIVE_DEPTH + 16


cdef struct Buf:
    char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int buf_reserve(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = b.size + extra
    cdef Py_ssize_t cap
    cdef char* p
    if need <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 128
    if cap < need:
        cap = need
    p = <char*>realloc(b.data, cap)
    if p == NULL:
        raise_no_memory("aiosubinterp: out of memory while encoding a value")
    b.data = p
    b.cap = cap
    return 0


cdef inline int buf_put(Buf* b, const void* src, Py_ssize_t n) except -1:
    buf_reserve(b, n)
    memcpy(b.data + b.size, src, n)
    b.size += n
    return 0


cdef inline int buf_tag(Buf* b, unsigned char tag) except -1:
    buf_reserve(b, 1)
    b.data[b.size] = <char>tag
    b.size += 1
    return 0


cdef inline int buf_i64(Buf* b, int64_t v) except -1:
    return buf_put(b, &v, 8)


cdef inline int buf_sized(Buf* b, unsigned char tag, const char* p, Py_ssize_t n) except -1:
    buf_tag(b, tag)
    buf_i64(b, n)
    return buf_put(b, p, n)


cdef inline void buf_free(Buf* b) noexcept nogil:
    free(b.data)
    b.data = NULL
    b.size = 0
    b.cap = 0


cdef int encode_pickled(Buf* b, object obj) except -1:
    cdef bytes data
    cdef list oob = None
    cdef list ends
    if current_owner() == NULL:
        data, ends = _marshal_module.dumps_ends(obj)
    else:
        # Protocol 5 out-of-band buffers (PickleBuffer) of SHARE_MIN bytes or more
        # cross zero-copy (share.pxi); smaller ones stay in the pickle.
        data, oob, ends = _marshal_module.dumps_oob(obj, SHARE_MIN)
    if ends:
        # Channel ends inside the object: natively in front, the pickle refers
        # to them by index (so a blob dropped undecoded drops them too).
        buf_tag(b, TAG_WITH_ENDS)
        buf_i64(b, len(ends))
        for end in ends:
            chan_try_encode_end(b, end)
    if not oob:
        return buf_sized(b, TAG_PICKLE, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    buf_tag(b, TAG_PICKLE_OOB)
    buf_i64(b, len(oob))
    for pb in oob:
        if not encode_share(b, pb, False):
            raise_no_share_owner("aiosubinterp: cannot share an out-of-band pickle buffer here")
    buf_i64(b, PyBytes_GET_SIZE(data))
    return buf_put(b, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef int encode_obj(Buf* b, object obj, int depth) except -1:
    cdef type t = type(obj)
    cdef long long v
    cdef int overflow = 0
    cdef double d
    cdef Py_ssize_t n
    cdef const char* s
    if obj is None:
        return buf_tag(b, TAG_NONE)
    if t is bool:
        return buf_tag(b, TAG_TRUE if obj else TAG_FALSE)
    if t is int:
        v = PyLong_AsLongLongAndOverflow(obj, &overflow)
        if overflow == 0:
            buf_tag(b, TAG_INT)
            return buf_i64(b, v)
        raw = (<object>obj).to_bytes(((<object>obj).bit_length() + 8) // 8, "little", signed=True)
        return buf_sized(b, TAG_BIGINT, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
    if t is float:
        d = obj
        buf_tag(b, TAG_FLOAT)
        return buf_put(b, &d, 8)
    if t is str:
        s = PyUnicode_AsUTF8AndSize(<PyObject*>obj, &n)
        if s == NULL:
            # Lone surrogates have no UTF-8 form; carry them with surrogatepass.
            PyErr_Clear()
            raw = (<str>obj).encode("utf-8", "surrogatepass")
            return buf_sized(b, TAG_STR_SURROGATE, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
        return buf_sized(b, TAG_STR, s, n)
    if t is bytes:
        if PyBytes_GET_SIZE(obj) >= SHARE_MIN and encode_special(b, obj):
            return 0  # large: zero-copy, the receiver gets a read-only memoryview
        return buf_sized(b, TAG_BYTES, PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj))
    if t is tuple and depth < MAX_NATIVE_DEPTH:
        buf_tag(b, TAG_TUPLE)
        buf_i64(b, PyTuple_GET_SIZE(obj))
        for item in <tuple>obj:
            encode_obj(b, item, depth + 1)
        return 0
    if t is frozenset and depth < MAX_NATIVE_DEPTH:
        buf_tag(b, TAG_FROZENSET)
        buf_i64(b, len(<frozenset>obj))
        for item in <frozenset>obj:
            encode_obj(b, item, depth + 1)
        return 0
    if t is complex:
        buf_tag(b, TAG_COMPLEX)
        d = PyComplex_RealAsDouble(obj)
        buf_put(b, &d, 8)
        d = PyComplex_ImagAsDouble(obj)
        return buf_put(b, &d, 8)
    if (t is list or t is dict) and depth < MAX_NATIVE_DEPTH:
        # The check, the count and the items must see one state of the
        # container. With a GIL nothing here lets another thread run. On a
        # free-threaded build another thread may append meanwhile (a count
        # that disagrees with the items is a corrupt blob), so we encode a
        # private copy made in one step under the container's own lock
        # (PyList_AsTuple, PyDict_Copy). Not a critical section of ours
        # around the loop: on 3.13t reading an item may lock the same list
        # again (PyList_GetItemRef's slow path), which suspends the outer
        # section and lets the other thread in (measured: IndexError).
        snap = obj
        if ASI_FREE_THREADED:
            snap = PyList_AsTuple(obj) if t is list else PyDict_Copy(obj)
        if native_only(snap, depth):
            encode_native_container(b, snap, t is dict, depth)
            return 0
    if chan_try_encode_end(b, obj):  # channel.pxi: an end crosses as a handle
        return 0
    if encode_special(b, obj):  # share.pxi: buffers, shared memory, fds
        return 0
    return encode_pickled(b, obj)


cdef int encode_native_container(Buf* b, object obj, bint is_dict, int depth) except -1:
    """A dict, or a list (or on a free-threaded build its tuple copy), that
    native_only() accepted: encoded as a dict or a list."""
    if is_dict:
        buf_tag(b, TAG_DICT)
        buf_i64(b, len(<dict>obj))
        for key, item in (<dict>obj).items():
            encode_obj(b, key, depth + 1)
            encode_obj(b, item, depth + 1)
        return 0
    buf_tag(b, TAG_LIST)
    buf_i64(b, len(obj))
    for item in obj:
        encode_obj(b, item, depth + 1)
    return 0


cdef bint native_only(object obj, int depth) except -1:
    """True if obj (an exact list or dict) holds only scalars, strings and bytes, and
    nested exact lists, dicts and tuples of those: such a value has no shared
    references or cycles that pickle's memo would preserve, so a native copy is exact."""
    cdef type t
    if depth >= 8:
        return False
    if type(obj) is dict:
        for key, item in (<dict>obj).items():
            if not native_leaf(key, depth) or not native_leaf(item, depth):
                return False
        return True
    for item in obj:
        if not native_leaf(item, depth):
            return False
    return True


cdef inline bint native_leaf(object item, int depth) except -1:
    cdef type t = type(item)
    if item is None or t is int or t is str or t is float or t is bool:
        return True
    if t is bytes:
        return PyBytes_GET_SIZE(item) < SHARE_MIN
    if t is tuple:
        # Nested lists and dicts are left to pickle, whose memo keeps shared
        # references (the same list twice) shared.
        for sub in <tuple>item:
            if not native_leaf(sub, depth + 1):
                return False
        return depth < 8
    return False


cdef int encode_into(Buf* b, object obj) except -1:
    """Encode obj into b (appending). On error b keeps its memory; the caller frees it."""
    return encode_obj(b, obj, 0)


cdef struct Reader:
    const char* p
    const char* end
    int no_refs              # loads(): the blob's shares, shared memory and fds were dropped
    # Decoding: the end of the last reference (share, shared memory, fd, channel
    # end) taken over by a decoded object. blob_discard: references that start
    # before it are skipped (a failed decode drops only the rest).
    const char* adopted
    # Counting (blob_refs, item_carries_receiver_of): receive ends of this
    # channel (a ChanState*) found are counted in recv_hits as well.
    const void* recv_of
    int recv_hits
    int depth                # containers being decoded (bounds decode_obj's recursion)


cdef inline void reader_init(Reader* r, const char* data, Py_ssize_t size, int no_refs,
                             const char* adopted) noexcept nogil:
    r.p = data
    r.end = data + size
    r.no_refs = no_refs
    r.adopted = adopted
    r.recv_of = NULL
    r.recv_hits = 0
    r.depth = 0


cdef inline int rd_need(Reader* r, Py_ssize_t n) except -1:
    if n < 0 or r.end - r.p < n:
        raise_corrupt("truncated")
    return 0


cdef inline int64_t rd_i64(Reader* r) except? -1:
    cdef int64_t v
    rd_need(r, 8)
    memcpy(&v, r.p, 8)
    r.p += 8
    return v


cdef inline int rd_enter(Reader* r) except -1:
    """One more container level; refused past MAX_DECODE_DEPTH (the caller
    decrements r.depth when the container is done; a failed decode is abandoned)."""
    r.depth += 1
    if r.depth > MAX_DECODE_DEPTH:
        raise ValueError(f"aiosubinterp: transfer data nested too deeply (more than "
                         f"{MAX_DECODE_DEPTH} levels); dumps() never nests that deep, so this "
                         "input was not made by it")
    return 0


cdef inline double rd_f64(Reader* r) except? -1.0:
    cdef double v
    rd_need(r, 8)
    memcpy(&v, r.p, 8)
    r.p += 8
    return v


cdef object decode_obj(Reader* r):
    cdef unsigned char tag
    cdef int64_t n, i
    cdef const char* start
    cdef double re_part
    cdef tuple tup
    rd_need(r, 1)
    tag = <unsigned char>r.p[0]
    r.p += 1
    if tag == TAG_NONE:
        return None
    if tag == TAG_TRUE:
        return True
    if tag == TAG_FALSE:
        return False
    if tag == TAG_INT:
        return PyLong_FromLongLong(rd_i64(r))
    if tag == TAG_FLOAT:
        return PyFloat_FromDouble(rd_f64(r))
    if tag == TAG_COMPLEX:
        re_part = rd_f64(r)
        # Not complex(re, im): Cython computes that as re + im*1j, and
        # inf*1j is (nan+infj).
        return PyComplex_FromDoubles(re_part, rd_f64(r))
    if tag == TAG_TUPLE:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        tup = PyTuple_New(n)
        for i in range(n):
            item = decode_obj(r)
            Py_INCREF(item)
            PyTuple_SET_ITEM(tup, i, item)
        r.depth -= 1
        return tup
    if tag == TAG_FROZENSET:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        fs = frozenset([decode_obj(r) for i in range(n)])
        r.depth -= 1
        return fs
    if tag == TAG_LIST:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        lst = [decode_obj(r) for i in range(n)]
        r.depth -= 1
        return lst
    if tag == TAG_DICT:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        d = {}
        for i in range(n):
            key = decode_obj(r)
            d[key] = decode_obj(r)
        r.depth -= 1
        return d
    if r.no_refs and (tag == TAG_SHARE or tag == TAG_SHARED_MEM or tag == TAG_FD
                      or tag == TAG_PICKLE_OOB or tag == TAG_CHANNEL or tag == TAG_WITH_ENDS):
        raise ValueError("aiosubinterp.loads: this value held zero-copy buffers, shared memory, "
                         "file descriptors or channel ends, which dumps() does not keep; only a "
                         "transfer carries them")
    # A reference leaf belongs to the decoded value from here on, even if its
    # decoder fails (each one drops what it could not adopt).
    if tag == TAG_CHANNEL:
        rd_need(r, 16)
        r.adopted = r.p + 16
        return chan_decode_end(r)
    if tag == TAG_SHARE:
        rd_need(r, 32)
        r.adopted = r.p + 32
        return decode_share(r)
    if tag == TAG_SHARED_MEM:
        rd_need(r, 16)
        r.adopted = r.p + 16
        return decode_shared_mem(r)
    if tag == TAG_FD:
        rd_need(r, 40)
        r.adopted = r.p + 40
        return decode_fd(r)
    if tag == TAG_WITH_ENDS:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        ends = [decode_obj(r) for i in range(n)]
        rd_need(r, 1)
        tag = <unsigned char>r.p[0]
        r.p += 1
        if tag != TAG_PICKLE and tag != TAG_PICKLE_OOB:
            raise_corrupt("ends")
        value = decode_pickle(r, tag, ends)
        r.depth -= 1
        return value
    if tag == TAG_PICKLE_OOB:
        return decode_pickle(r, tag, None)
    n = rd_i64(r)
    rd_need(r, n)
    start = r.p
    r.p += n
    if tag == TAG_STR:
        return PyUnicode_DecodeUTF8(start, n, NULL)
    if tag == TAG_BYTES:
        return PyBytes_FromStringAndSize(start, n)
    if tag == TAG_PICKLE:
        return _marshal_module.loads(PyBytes_FromStringAndSize(start, n))
    if tag == TAG_STR_SURROGATE:
        return PyUnicode_DecodeUTF8(start, n, "surrogatepass")
    if tag == TAG_BIGINT:
        return int.from_bytes(PyBytes_FromStringAndSize(start, n), "little", signed=True)
    raise_corrupt(f"tag {tag}")


cdef object decode_pickle(Reader* r, unsigned char tag, list ends):
    """The body of a 'p' or 'P' item (tag already read); ends: what 'E' decoded for it."""
    cdef int64_t n, i
    cdef const char* start
    views = None
    if tag == TAG_PICKLE_OOB:
        n = rd_i64(r)
        if n < 0 or n > r.end - r.p:
            rd_need(r, -1)
        rd_enter(r)
        views = [decode_obj(r) for i in range(n)]
        r.depth -= 1
    n = rd_i64(r)
    rd_need(r, n)
    start = r.p
    r.p += n
    return _marshal_module.loads(PyBytes_FromStringAndSize(start, n), views, ends)


cdef object decode_blob(const char* data, Py_ssize_t size):
    """Decode a blob. On failure, the references not yet taken over are dropped
    (the caller only frees the blob): a half-decoded job or item leaks no fd,
    share or channel end."""
    cdef Reader r
    reader_init(&r, data, size, 0, data)
    try:
        value = decode_obj(&r)
        if r.p != r.end:
            raise_corrupt("trailing bytes")
    except BaseException:
        blob_discard_from(data, size, r.adopted)
        chan_release_orphans()
        raise
    return value


def dumps(obj):
    """Encode obj exactly as it would cross to another interpreter (for tests and benchmarks).

    Shares, shared memory and fds in obj are dropped again at once (the
    result can be loaded only for values without them).
    """
    cdef Buf b
    b.data = NULL
    b.size = 0
    b.cap = 0
    try:
        encode_into(&b, obj)
        return PyBytes_FromStringAndSize(b.data, b.size)
    finally:
        if b.size:
            blob_discard(b.data, b.size)
            chan_release_orphans()
        buf_free(&b)


def roundtrip(obj):
    """Encode and decode obj in this interpreter, as a transfer would (tests, benchmarks)."""
    cdef Buf b
    b.data = NULL
    b.size = 0
    b.cap = 0
    try:
        try:
            encode_into(&b, obj)
        except BaseException:
            if b.size:
                blob_discard(b.data, b.size)
                chan_release_orphans()
            raise
        return decode_blob(b.data, b.size)
    finally:
        buf_free(&b)


def loads(data):
    """Decode what dumps() produced, building new objects in this interpreter."""
    cdef bytes raw = data if type(data) is bytes else bytes(data)
    if not raw:
        raise ValueError("aiosubinterp.loads: empty input")
    cdef Reader r
    reader_init(&r, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), 1, NULL)
    value = decode_obj(&r)
    if r.p != r.end:
        raise_corrupt("trailing bytes")
    return value
