# errors.pxi: where C failures become Python exceptions.
#
# The compiled module makes no policy: it raises builtin exceptions with a
# clear message; aiosubinterp/_errors.py maps them onto the public classes.

cdef int raise_errno(const char* what) except -1:
    raise OSError(errno, f"aiosubinterp: {what.decode()} failed")
