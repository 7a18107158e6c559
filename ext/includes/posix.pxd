# POSIX declarations used by aiosubinterp._core (threads, fds, clocks).
# Platform differences live in compat.h, never here.

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_attr_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_attr_init(pthread_attr_t*)
    int pthread_attr_setstacksize(pthread_attr_t*, size_t)
    int pthread_attr_destroy(pthread_attr_t*)
    int pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*) noexcept nogil, void*)
    int pthread_join(pthread_t, void**)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)

cdef extern from "<unistd.h>" nogil:
    ssize_t read(int, void*, size_t)
    ssize_t write(int, const void*, size_t)
    int close(int)
    int usleep(unsigned int)

cdef extern from "<errno.h>" nogil:
    int errno
    int EAGAIN
    int EINTR
    int ETIMEDOUT

cdef extern from "compat.h" nogil:
    # Our mutexes go through lockorder.h: ranked, and in debug builds
    # (AIOSUBINTERP_DEBUG=1) checked for the one lock order.
    int pthread_mutex_lock "asi_mutex_lock"(pthread_mutex_t*)
    int pthread_mutex_unlock "asi_mutex_unlock"(pthread_mutex_t*)
    int pthread_mutex_destroy "asi_mutex_destroy"(pthread_mutex_t*)
    int asi_mutex_init(pthread_mutex_t*, int rank, const char* name)
    void asi_mutex_rank_static(pthread_mutex_t*, int rank, const char* name)
    const bint ASI_LOCK_ORDER_CHECKED
    int asi_lock_stats_get(int rank, unsigned long long out[4])
    void asi_lock_stats_reset()
    enum:
        ASI_RANK_CHAN
        ASI_RANK_ORPHAN
        ASI_RANK_SHARE
        ASI_RANK_QUEUE
        ASI_RANK_REGISTRY
        ASI_RANK_HUB
        ASI_RANK_INTERRUPT
        ASI_RANK_SHARED_LOCK
    int ASI_HAVE_EVENTFD
    size_t ASI_WORKER_STACK_SIZE
    const bint ASI_FREE_THREADED
    bint asi_ts_attached(void* ts)
    bint asi_ts_exc_pending(void* ts)
    int asi_eventfd()
    int asi_pipe(int fds[2])
    pthread_mutex_t asi_registry_mu
    int asi_chan_mine
    int asi_main_release_due
    void asi_registry_lock()
    void asi_registry_unlock()
    void asi_create_lock()
    void asi_create_unlock()
    void asi_create_begin()
    void asi_create_end()
    void* asi_live_head
    int asi_exiting
    unsigned long long asi_serial_counter
    int asi_cond_init(pthread_cond_t*)
    double asi_monotonic()
    void* asi_load_ptr(void* const* p)
    int asi_load_int(const int* p)
    bint asi_cas_int(int* p, int expected, int desired)
    void asi_cpu_relax()
    int asi_cond_wait_until(pthread_cond_t*, pthread_mutex_t*, double deadline)
