/* Thread pool for per-token work.
 *
 * Threads are created once. A run publishes (fn, arg) and its item count in
 * one 64-bit word, `next` = run tag | item count | next item to claim; every
 * thread (the caller too) claims items from it by compare-and-swap until none
 * is left, and the caller returns once `done` reaches the count. Because the
 * tag and the count travel in the claimed word itself, a thread that wakes up
 * late, during a later run or after the caller returned, either claims an
 * item of the run that is live now or nothing: it never runs a stale item,
 * and nobody waits for it. (Before 2026-12-01 every thread ran its own fixed
 * share and the caller waited for all of them: with 10 of the device's 16
 * cores busy, 14B decode fell to 13% of its unloaded speed.)
 *
 * Idle workers spin on the run counter for a short while (a decode step
 * issues the next op within microseconds; a spinning worker starts it in
 * ~100 ns where a futex wake costs 5-50 us), then sleep on a futex, so an
 * idle pool costs nothing. A worker whose spin was interrupted for longer
 * than a time slice (descheduled: the cores are oversubscribed) stops
 * spinning at once rather than take a core from a thread with work.
 *
 * Tuning: TND_POOL_SPIN (spin iterations before sleeping, default 200000,
 * about 0.1-1 ms).
 */
#include "cpu/pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "util.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MAX_THREADS 512
/* `next`: run tag (24 bits) | item count (20) | next item (20) */
#define ITEM_BITS 20
#define MAX_ITEMS (1 << ITEM_BITS)
#define ITEM_MASK ((uint64_t)MAX_ITEMS - 1)
#define TAG_SHIFT (2 * ITEM_BITS)
/* a gap this long inside a spin means the thread was descheduled */
#define PREEMPTED_NS 200000

typedef struct worker {
    tnd_pool *pool;
    pthread_t tid;
} worker;

/* Each hot word on its own cache line: workers poll them while the caller
 * writes the others. */
struct tnd_pool {
    int n;
    int spin;
    worker *workers;
    _Alignas(64) _Atomic uint64_t next; /* tag | count | next item of the live run */
    _Alignas(64) _Atomic uint32_t gen;  /* bumped per run: what idle workers wait on */
    _Alignas(64) _Atomic uint32_t done; /* items finished in the live run */
    _Alignas(64) _Atomic int n_sleeping; /* threads blocked in a futex */
    uint32_t tag;                       /* the live run's tag (caller only) */
    tnd_task_fn fn;                     /* the live run's; read only after claiming an item */
    void *arg;
    tnd_errand_fn errand; /* caller only: see tnd_pool_errand */
    void *errand_arg;
    _Atomic int quit;
};

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#ifdef __linux__
/* Sleeps while *addr == val (spurious wake-ups allowed: callers re-check). */
static void futex_wait(_Atomic uint32_t *addr, uint32_t val) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
static void futex_wake_all(_Atomic uint32_t *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void futex_wait(_Atomic uint32_t *addr, uint32_t val) { (void)addr; (void)val; sched_yield(); }
static void futex_wake_all(_Atomic uint32_t *addr) { (void)addr; }
#endif

/* Waits until *addr != val: spins, then sleeps. Counts itself in n_sleeping
 * while blocked so wakers can skip the syscall when nobody sleeps. */
static void wait_change(tnd_pool *p, _Atomic uint32_t *addr, uint32_t val) {
    int64_t last = now_ns();
    for (int i = 0; i < p->spin; i++) {
        if (atomic_load_explicit(addr, memory_order_acquire) != val) return;
        tnd_cpu_relax();
        if ((i & 255) == 255) {
            /* With more runnable threads than cores (other processes, or a
             * pool larger than the machine) a pure spin would hold the core
             * the thread we wait for needs: yield now and then, and stop
             * spinning once the OS has shown it wants this core back. */
            sched_yield();
            const int64_t t = now_ns();
            if (t - last > PREEMPTED_NS) break;
            last = t;
        }
    }
    while (atomic_load_explicit(addr, memory_order_acquire) == val) {
        atomic_fetch_add_explicit(&p->n_sleeping, 1, memory_order_seq_cst);
        /* Re-check after announcing: a waker that changed *addr before seeing
         * our announcement would not wake us. */
        if (atomic_load_explicit(addr, memory_order_seq_cst) == val) futex_wait(addr, val);
        atomic_fetch_sub_explicit(&p->n_sleeping, 1, memory_order_seq_cst);
    }
}

/* Publishes a change of *addr to sleepers (the caller already stored it). */
static void wake(tnd_pool *p, _Atomic uint32_t *addr) {
    if (atomic_load_explicit(&p->n_sleeping, memory_order_seq_cst) > 0) futex_wake_all(addr);
}

/* Claims and runs items of the live run until none is left. */
static void work(tnd_pool *p) {
    uint64_t cur = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        const uint64_t count = (cur >> ITEM_BITS) & ITEM_MASK, item = cur & ITEM_MASK;
        if (item >= count) return;
        /* A successful claim proves the run is live (the caller cannot return
         * before this item is done), so fn and arg are its own. */
        if (!atomic_compare_exchange_weak_explicit(&p->next, &cur, cur + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        p->fn(p->arg, (int)item, (int)count);
        /* seq_cst: with the sleeper's announce-then-recheck on n_sleeping,
         * either it sees this count or this thread sees it asleep */
        const uint32_t d = atomic_fetch_add_explicit(&p->done, 1, memory_order_seq_cst) + 1;
        if (d == count) wake(p, &p->done);
        cur = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

static void *worker_main(void *varg) {
    worker *w = varg;
    tnd_pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        wait_change(p, &p->gen, seen);
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) break;
        work(p);
    }
    return NULL;
}

tnd_pool *tnd_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = tnd_physical_cores();
    if (n_threads <= 0) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    tnd_pool *p = tnd_aligned_alloc(sizeof *p);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    p->spin = tnd_config_get()->pool_spin;
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->quit, 0);
    p->workers = tnd_calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        tnd_aligned_free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
            p->n = i; /* free what exists so far */
            tnd_pool_free(p);
            tnd_fail(TND_ERR_INTERNAL, "pthread_create failed for pool thread %d", i);
            return NULL;
        }
    }
    return p;
}

void tnd_pool_free(tnd_pool *p) {
    if (!p) return;
    atomic_store_explicit(&p->quit, 1, memory_order_release);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    futex_wake_all(&p->gen);
    for (int i = 1; i < p->n; i++) pthread_join(p->workers[i].tid, NULL);
    free(p->workers);
    tnd_aligned_free(p);
}

int tnd_pool_size(const tnd_pool *p) { return p ? p->n : 1; }

void tnd_pool_errand_flush(tnd_pool *p) {
    if (!p || !p->errand) return;
    tnd_errand_fn fn = p->errand;
    p->errand = NULL;
    fn(p->errand_arg);
}

void tnd_pool_errand(tnd_pool *p, tnd_errand_fn fn, void *arg) {
    if (!p) {
        fn(arg);
        return;
    }
    tnd_pool_errand_flush(p);
    p->errand = fn;
    p->errand_arg = arg;
}

void tnd_pool_run_n(tnd_pool *p, tnd_task_fn fn, void *arg, int n_items) {
    if (n_items <= 0) return;
    if (n_items > MAX_ITEMS - 1) n_items = MAX_ITEMS - 1;
    if (!p || p->n == 1 || n_items == 1) {
        tnd_pool_errand_flush(p);
        for (int i = 0; i < n_items; i++) fn(arg, i, n_items);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->tag = (p->tag + 1) & ((1u << (64 - TAG_SHIFT)) - 1);
    /* The release publishes fn, arg and done = 0 to whoever claims an item. */
    atomic_store_explicit(&p->next, (uint64_t)p->tag << TAG_SHIFT | (uint64_t)n_items << ITEM_BITS,
                          memory_order_release);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    wake(p, &p->gen);
    tnd_pool_errand_flush(p);
    work(p);
    for (;;) {
        const uint32_t d = atomic_load_explicit(&p->done, memory_order_acquire);
        if (d == (uint32_t)n_items) break;
        wait_change(p, &p->done, d);
    }
}

void tnd_pool_run(tnd_pool *p, tnd_task_fn fn, void *arg) { tnd_pool_run_n(p, fn, arg, tnd_pool_size(p)); }
