/* lockorder.h: the one lock order of aiosubinterp._core, checked in debug builds.
 *
 * Every mutex of ours has a rank. A thread takes mutexes in increasing rank
 * only, and never waits for a GIL (PyEval_RestoreThread) while it holds one:
 *
 *   rank  mutex                     guards
 *   ----  ------------------------  -------------------------------------------
 *    10   asi_chan_mu               every channel (channel.pxi)
 *    15   asi_orphan_mu             ends of discarded blobs (channel.pxi)
 *    20   asi_share_mu              share records, owners, shared memory (share.pxi)
 *    30   q.mu                      a job queue and its workers (queues.pxi)
 *    35   asi_registry_mu           the registry of live workers (compat.h)
 *    40   h.mu                      a completion hub (wakeup.pxi)
 *    50   op.mu                     one interruption (interp.pxi)
 *    60   m.mu                      one SharedLock (share.pxi)
 *
 * So: GIL -> channel -> orphans -> share -> queue -> registry -> hub, and the
 * two leaves. Two mutexes of the same rank are never held at once. A
 * channel item discarded under asi_chan_mu may release a worker's share
 * (share -> that worker's q.mu): the reason no path may take asi_chan_mu
 * while holding q.mu (the 2026-12-04 review's whole-process deadlock).
 *
 * With ASI_CHECK_LOCK_ORDER (setup.py defines it for AIOSUBINTERP_DEBUG=1)
 * each thread keeps the list of our mutexes it holds; an acquisition out of
 * order, an unranked mutex, or a GIL taken while holding one prints both
 * locks and aborts. Without it the wrappers are the plain pthread calls.
 * Ranks of per-object mutexes are registered when they are initialised
 * (asi_mutex_init) and forgotten when destroyed; the four statics are
 * ranked once at module import (asi_mutex_rank_static).
 *
 * The debug build also counts, per rank and for the whole process (every
 * interpreter shares this extension's statics): acquisitions, contended
 * acquisitions (a trylock failed first), nanoseconds waited for contended
 * ones, and nanoseconds held (lock to unlock, less the time a condition
 * variable wait gave the mutex back). _core._lock_stats() reads them. A
 * release build has none of it: the wrappers below are the plain calls.
 * (The debug build's rank lookup takes asi_ranked_mu on every acquisition,
 * and it is built -O0: its counts and ratios are what to read, its times
 * are upper bounds.)
 */
#ifndef AIOSUBINTERP_LOCKORDER_H
#define AIOSUBINTERP_LOCKORDER_H

#include "Python.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    ASI_RANK_CHAN = 10,
    ASI_RANK_ORPHAN = 15,
    ASI_RANK_SHARE = 20,
    ASI_RANK_QUEUE = 30,
    ASI_RANK_REGISTRY = 35,
    ASI_RANK_HUB = 40,
    ASI_RANK_INTERRUPT = 50,
    ASI_RANK_SHARED_LOCK = 60,
};

#ifdef ASI_CHECK_LOCK_ORDER
#define ASI_LOCK_ORDER_CHECKED 1

#include <errno.h>
#include <time.h>

typedef struct AsiRanked {
    const pthread_mutex_t *mu;
    int rank;
    const char *name;
    struct AsiRanked *next;
} AsiRanked;

#define ASI_RANK_BUCKETS 1024
#define ASI_HELD_MAX 16
static AsiRanked *asi_ranked[ASI_RANK_BUCKETS];
/* Guards asi_ranked; itself outside the order (held for a lookup only). */
static pthread_mutex_t asi_ranked_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread const AsiRanked *asi_held[ASI_HELD_MAX];
static __thread uint64_t asi_held_since[ASI_HELD_MAX];  /* ns, when taken */
static __thread int asi_nheld;

/* Lock-wait counters, indexed by rank (every rank is below ASI_RANK_SLOTS),
 * updated with relaxed atomics. */
#define ASI_RANK_SLOTS 64
typedef struct {
    uint64_t acquired, contended, wait_ns, hold_ns;
} AsiLockStat;
static AsiLockStat asi_lock_stats[ASI_RANK_SLOTS];

static inline uint64_t asi_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void asi_stat_add(uint64_t *p, uint64_t v) {
    __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* Copy rank's counters into out[4] (acquired, contended, wait_ns, hold_ns);
 * 1 if the build counts, 0 (out untouched) if not. */
static int asi_lock_stats_get(int rank, unsigned long long out[4]) {
    if (rank <= 0 || rank >= ASI_RANK_SLOTS) return 0;
    AsiLockStat *st = &asi_lock_stats[rank];
    out[0] = __atomic_load_n(&st->acquired, __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&st->contended, __ATOMIC_RELAXED);
    out[2] = __atomic_load_n(&st->wait_ns, __ATOMIC_RELAXED);
    out[3] = __atomic_load_n(&st->hold_ns, __ATOMIC_RELAXED);
    return 1;
}

static void asi_lock_stats_reset(void) {
    for (int i = 0; i < ASI_RANK_SLOTS; i++) {
        __atomic_store_n(&asi_lock_stats[i].acquired, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&asi_lock_stats[i].contended, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&asi_lock_stats[i].wait_ns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&asi_lock_stats[i].hold_ns, 0, __ATOMIC_RELAXED);
    }
}
static const AsiRanked asi_unranked = {NULL, 0, "an unranked mutex", NULL};

static inline size_t asi_rank_bucket(const pthread_mutex_t *mu) {
    return ((uintptr_t)mu >> 4) % ASI_RANK_BUCKETS;
}

static void asi_mutex_rank_static(pthread_mutex_t *mu, int rank, const char *name) {
    AsiRanked *r;
    size_t b = asi_rank_bucket(mu);
    pthread_mutex_lock(&asi_ranked_mu);
    for (r = asi_ranked[b]; r != NULL; r = r->next)
        if (r->mu == mu) break;
    if (r == NULL && (r = (AsiRanked *)malloc(sizeof(AsiRanked))) != NULL) {
        r->mu = mu;
        r->next = asi_ranked[b];
        asi_ranked[b] = r;
    }
    if (r != NULL) {
        r->rank = rank;
        r->name = name;
    }
    pthread_mutex_unlock(&asi_ranked_mu);
}

static void asi_mutex_unrank(pthread_mutex_t *mu) {
    AsiRanked **p;
    AsiRanked *r;
    size_t b = asi_rank_bucket(mu);
    pthread_mutex_lock(&asi_ranked_mu);
    for (p = &asi_ranked[b]; (r = *p) != NULL; p = &r->next) {
        if (r->mu == mu) {
            *p = r->next;
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&asi_ranked_mu);
}

static const AsiRanked *asi_rank_of(const pthread_mutex_t *mu) {
    const AsiRanked *r;
    pthread_mutex_lock(&asi_ranked_mu);
    for (r = asi_ranked[asi_rank_bucket(mu)]; r != NULL; r = r->next)
        if (r->mu == mu) break;
    pthread_mutex_unlock(&asi_ranked_mu);
    return r != NULL ? r : &asi_unranked;
}

static void asi_lock_order_fail(const char *what, const AsiRanked *want, const AsiRanked *held) {
    fprintf(stderr,
            "aiosubinterp: lock order violated: %s %s (rank %d) while holding %s (rank %d)"
            " [%p]; the order is in ext/includes/lockorder.h\n",
            what, want->name, want->rank, held->name, held->rank, (void *)held->mu);
    fflush(stderr);
    abort();
}

static inline int asi_mutex_lock(pthread_mutex_t *mu) {
    const AsiRanked *want = asi_rank_of(mu);
    if (want->rank == 0) {
        fprintf(stderr, "aiosubinterp: lock order: mutex %p has no rank\n", (void *)mu);
        fflush(stderr);
        abort();
    }
    for (int i = 0; i < asi_nheld; i++)
        if (asi_held[i]->rank >= want->rank)
            asi_lock_order_fail("taking", want, asi_held[i]);
    AsiLockStat *st = &asi_lock_stats[want->rank % ASI_RANK_SLOTS];
    int rc = pthread_mutex_trylock(mu);
    uint64_t now;
    if (rc == EBUSY) {
        uint64_t t0 = asi_now_ns();
        rc = pthread_mutex_lock(mu);
        now = asi_now_ns();
        asi_stat_add(&st->contended, 1);
        asi_stat_add(&st->wait_ns, now - t0);
    } else {
        now = asi_now_ns();
    }
    asi_stat_add(&st->acquired, 1);
    if (asi_nheld < ASI_HELD_MAX) {
        asi_held_since[asi_nheld] = now;
        asi_held[asi_nheld++] = want;
    }
    return rc;
}

/* The index of mu in this thread's held list, or -1. */
static inline int asi_held_index(const pthread_mutex_t *mu) {
    for (int i = asi_nheld - 1; i >= 0; i--)
        if (asi_held[i]->mu == mu) return i;
    return -1;
}

static inline void asi_add_hold(int i, uint64_t now) {
    asi_stat_add(&asi_lock_stats[asi_held[i]->rank % ASI_RANK_SLOTS].hold_ns,
                 now - asi_held_since[i]);
}

static inline int asi_mutex_unlock(pthread_mutex_t *mu) {
    int i = asi_held_index(mu);
    if (i >= 0) {
        asi_add_hold(i, asi_now_ns());
        for (int j = i; j < asi_nheld - 1; j++) {
            asi_held[j] = asi_held[j + 1];
            asi_held_since[j] = asi_held_since[j + 1];
        }
        asi_nheld--;
    }
    return pthread_mutex_unlock(mu);
}

/* A condition-variable wait gives the mutex back while it sleeps: that time
 * is not held time. Every pthread_cond_wait and pthread_cond_timedwait of
 * this translation unit goes through these (the macros below; a
 * function-like macro does not expand inside its own expansion). macOS's
 * pthread_cond_timedwait_relative_np (compat.h) does not: there a timed
 * wait counts as held. */
static inline int asi_cond_wait_counted(pthread_cond_t *cv, pthread_mutex_t *mu) {
    int i = asi_held_index(mu);
    if (i >= 0) asi_add_hold(i, asi_now_ns());
    int rc = pthread_cond_wait(cv, mu);
    if (i >= 0) asi_held_since[i] = asi_now_ns();
    return rc;
}

static inline int asi_cond_timedwait_counted(pthread_cond_t *cv, pthread_mutex_t *mu,
                                             const struct timespec *ts) {
    int i = asi_held_index(mu);
    if (i >= 0) asi_add_hold(i, asi_now_ns());
    int rc = pthread_cond_timedwait(cv, mu, ts);
    if (i >= 0) asi_held_since[i] = asi_now_ns();
    return rc;
}

#define pthread_cond_wait(cv, mu) asi_cond_wait_counted((cv), (mu))
#define pthread_cond_timedwait(cv, mu, ts) asi_cond_timedwait_counted((cv), (mu), (ts))

/* Called before every GIL acquisition of ours (PyEval_RestoreThread). */
static inline void asi_check_no_mutex_held(void) {
    static const AsiRanked gil = {NULL, 0, "a GIL (PyEval_RestoreThread)", NULL};
    if (asi_nheld > 0) asi_lock_order_fail("waiting for", &gil, asi_held[asi_nheld - 1]);
}

/* Every GIL acquisition in this translation unit, ours and the ones Cython
 * generates for `with nogil` blocks, checks first that no mutex of ours is
 * held. (A function-like macro does not expand inside its own expansion:
 * the inner call is CPython's function.) */
#define PyEval_RestoreThread(ts) (asi_check_no_mutex_held(), PyEval_RestoreThread(ts))

#else  /* release build: the plain calls */
#define ASI_LOCK_ORDER_CHECKED 0

static inline void asi_mutex_rank_static(pthread_mutex_t *mu, int rank, const char *name) {
    (void)mu; (void)rank; (void)name;
}
static inline void asi_mutex_unrank(pthread_mutex_t *mu) { (void)mu; }
static inline int asi_mutex_lock(pthread_mutex_t *mu) { return pthread_mutex_lock(mu); }
static inline int asi_mutex_unlock(pthread_mutex_t *mu) { return pthread_mutex_unlock(mu); }
static inline void asi_check_no_mutex_held(void) {}
/* No lock-wait counters in a release build. */
static inline int asi_lock_stats_get(int rank, unsigned long long out[4]) {
    (void)rank; (void)out;
    return 0;
}
static inline void asi_lock_stats_reset(void) {}

#endif

/* A per-object mutex: initialised with its rank. */
static inline int asi_mutex_init(pthread_mutex_t *mu, int rank, const char *name) {
    int rc = pthread_mutex_init(mu, NULL);
    if (rc == 0) asi_mutex_rank_static(mu, rank, name);
    return rc;
}

static inline int asi_mutex_destroy(pthread_mutex_t *mu) {
    asi_mutex_unrank(mu);
    return pthread_mutex_destroy(mu);
}

#endif /* AIOSUBINTERP_LOCKORDER_H */
