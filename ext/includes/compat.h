/* compat.h: the only platform #ifdefs of aiosubinterp._core.
 *
 * Everything here is plain C that needs no interpreter and no GIL. The
 * mutex below is a process-wide static: the extension module is loaded once
 * per interpreter, but C statics exist once per process, which is exactly
 * what the registry of live workers needs.
 */
#ifndef AIOSUBINTERP_COMPAT_H
#define AIOSUBINTERP_COMPAT_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/eventfd.h>
#define ASI_HAVE_EVENTFD 1
static inline int asi_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
#else
#define ASI_HAVE_EVENTFD 0
static inline int asi_eventfd(void) { errno = ENOSYS; return -1; }
#endif

/* A non-blocking, close-on-exec pipe: the wakeup fallback where there is no eventfd. */
static inline int asi_pipe(int fds[2]) {
    if (pipe(fds) != 0) return -1;
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) != 0 ||
            fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0) {
            close(fds[0]);
            close(fds[1]);
            return -1;
        }
    }
    return 0;
}

/* 1 on a free-threaded build (PEP 703, "3.13t"): the threads of one
 * interpreter run at once, with no GIL between them. */
#include "pyconfig.h"
#ifdef Py_GIL_DISABLED
#define ASI_FREE_THREADED 1
#else
#define ASI_FREE_THREADED 0
#endif

/* 1 while the thread state `p` (a PyThreadState*) is attached: its thread
 * runs Python code, or C code that did not release it. 0 while detached
 * (blocked in a call that released it) or suspended. Only a free-threaded
 * build needs it: there, CPython stops every thread of every interpreter to
 * create an interpreter or import an extension module, and an attached
 * thread in a long C call never stops, so the stop waits (with every other
 * thread parked) until the call returns. PyThreadState.state is a field of
 * the public cpython/pystate.h since 3.13; 1 is _Py_THREAD_ATTACHED
 * (internal pycore_pystate.h). Elsewhere: always 0. */
/* asi_ts_exc_pending: 1 while an exception injected with
 * PyThreadState_SetAsyncExc waits in that thread state; the thread takes it
 * (and clears the field) at its next bytecode boundary, so one still
 * pending after a moment means a thread in C. PyThreadState.async_exc is a
 * field of the public cpython/pystate.h. */
#ifdef Py_GIL_DISABLED
#include "Python.h"
static inline int asi_ts_attached(void *p) {
    return __atomic_load_n(&((PyThreadState *)p)->state, __ATOMIC_RELAXED) == 1;
}
static inline int asi_ts_exc_pending(void *p) {
    return __atomic_load_n(&((PyThreadState *)p)->async_exc, __ATOMIC_RELAXED) != NULL;
}
#else
static inline int asi_ts_attached(void *p) { (void)p; return 0; }
static inline int asi_ts_exc_pending(void *p) { (void)p; return 0; }
#endif

#include "lockorder.h"

/* 1 while this thread holds asi_chan_mu (chan_lock/chan_unlock in
 * channel.pxi). A share release that must schedule a call in main
 * (Py_AddPendingCall, which may park and re-attach this thread, taking its
 * GIL) is deferred while it is set: asi_main_release_due, run by chan_unlock
 * once the mutex is free (review 2026-12-04, U1). */
static __thread int asi_chan_mine = 0;
static __thread int asi_main_release_due = 0;

/* Registry of live workers, shared by every interpreter of the process. */
static pthread_mutex_t asi_registry_mu = PTHREAD_MUTEX_INITIALIZER;
static inline void asi_registry_lock(void) { asi_mutex_lock(&asi_registry_mu); }
static inline void asi_registry_unlock(void) { asi_mutex_unlock(&asi_registry_mu); }
/* The creation lock. A worker start holds it from creating its interpreter
 * to starting its thread (asi_create_begin/end); the exit sweep takes it
 * exclusively (asi_create_lock/unlock), so it sees every interpreter that
 * exists, each with its thread. On 3.13+ starts hold it shared: the
 * interpreters of a pool are created in parallel (creation runs without the
 * main GIL, ~10 ms each, most of a pool's start-up). On 3.12 starts hold it
 * exclusively: 3.12.1 corrupts static types when two threads run
 * Py_NewInterpreterFromConfig at once ("descriptor 'close' for
 * '_io.BufferedReader' objects doesn't apply to a '_io.FileIO' object"). */
#include "patchlevel.h"
static pthread_rwlock_t asi_create_rw = PTHREAD_RWLOCK_INITIALIZER;
static inline void asi_create_lock(void) { pthread_rwlock_wrlock(&asi_create_rw); }
static inline void asi_create_unlock(void) { pthread_rwlock_unlock(&asi_create_rw); }
#if PY_VERSION_HEX >= 0x030D0000
static inline void asi_create_begin(void) { pthread_rwlock_rdlock(&asi_create_rw); }
#else
static inline void asi_create_begin(void) { pthread_rwlock_wrlock(&asi_create_rw); }
#endif
static inline void asi_create_end(void) { pthread_rwlock_unlock(&asi_create_rw); }

/* Head of the list of live workers (a WorkerState*) and the serial counter,
 * both under asi_registry_mu. */
static void *asi_live_head = NULL;
static int asi_exiting = 0;  /* the exit sweep ran: no new interpreters */
static uint64_t asi_serial_counter = 0;

/* Condition variables time out on the monotonic clock, so wall-clock jumps
 * neither shorten nor stretch a timeout. */
static inline int asi_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc) return rc;
#if !defined(__APPLE__)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
#endif
    rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

static inline double asi_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Deadlines further ahead than this (seconds, about 31 years) mean "no time
 * limit": the wait is untimed. Python-side callers turn math.inf and any
 * timeout past threading.TIMEOUT_MAX into such a deadline
 * (aiosubinterp/_timeouts.py); this bound also keeps every deadline that
 * does reach pthread_cond_timedwait representable in a time_t. */
#define ASI_DEADLINE_HORIZON 1e9

/* Wait on cv until the absolute monotonic time `deadline` (seconds).
 * Returns 0 when signalled (or spuriously woken), ETIMEDOUT when the deadline
 * passed; never anything else. A deadline that is not finite (inf; NaN is
 * refused by the callers, and treated the same here) or beyond the horizon
 * waits untimed: converting it to a time_t is undefined and gave a negative
 * tv_nsec, for which glibc returns EINVAL without ever unlocking the mutex,
 * and every caller then spun holding it (review 2026-12-04, R2). */
static inline int asi_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline) {
    double now = asi_monotonic();
    int rc;
    if (!(deadline - now <= ASI_DEADLINE_HORIZON)) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    if (deadline <= now) return ETIMEDOUT;
#if defined(__APPLE__)
    double left = deadline - now;
    struct timespec rel;
    rel.tv_sec = (time_t)left;
    rel.tv_nsec = (long)((left - (double)rel.tv_sec) * 1e9);
    if (rel.tv_nsec < 0) rel.tv_nsec = 0;
    if (rel.tv_nsec >= 1000000000L) { rel.tv_sec += 1; rel.tv_nsec = 0; }
    rc = pthread_cond_timedwait_relative_np(cv, mu, &rel);
#else
    struct timespec ts;
    ts.tv_sec = (time_t)deadline;
    ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec += 1; ts.tv_nsec = 0; }
    rc = pthread_cond_timedwait(cv, mu, &ts);
#endif
    /* Anything but a time-out counts as a wake-up: the callers re-check
     * their condition, and the arguments above can no longer be invalid. */
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* Spinning: an idle worker polls its queue briefly before it sleeps, so a
 * job submitted right after the previous one finished needs no futex wake-up
 * (an idle vCPU takes tens of microseconds to wake). */
static inline void *asi_load_ptr(void *const *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline int asi_load_int(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
/* Free threading: a state change that several threads of one interpreter
 * may attempt at once (ext/_core.pyx, "Free threading"). */
static inline int asi_cas_int(int *p, int expected, int desired) {
    return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
static inline void asi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Worker threads get a fixed, generous stack: Python recursion in a worker
 * must hit RecursionError long before the C stack ends. */
#define ASI_WORKER_STACK_SIZE ((size_t)16 * 1024 * 1024)

#endif /* AIOSUBINTERP_COMPAT_H */
