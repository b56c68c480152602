/* Thread pool for per-token work.
 *
 * Threads are created once. A run publishes (fn, arg) and bumps a generation
 * counter; workers that finished the previous run spin on that counter for a
 * short while (a decode step issues the next op within microseconds, and a
 * spinning worker starts it in ~100 ns where a futex wake costs 5-50 us), then
 * sleep on a futex so an idle pool costs nothing. Completion and the in-task
 * barrier are counters the waiting threads spin on the same way.
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

#include "util.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MAX_THREADS 512

typedef struct worker {
    tnd_pool *pool;
    int ith;
    pthread_t tid;
} worker;

/* Each hot counter on its own cache line: workers poll them while the caller
 * writes the others. */
struct tnd_pool {
    int n;
    int spin;
    worker *workers;
    _Alignas(64) _Atomic uint32_t gen;  /* run generation; bumped by tnd_pool_run */
    _Alignas(64) _Atomic uint32_t pending; /* workers still in the current run */
    _Alignas(64) _Atomic uint32_t bar_count;
    _Atomic uint32_t bar_phase;
    _Alignas(64) _Atomic int n_sleeping; /* threads blocked in a futex (gen or barrier) */
    tnd_task_fn fn;
    void *arg;
    _Atomic int quit;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
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
    for (int i = 0; i < p->spin; i++) {
        if (atomic_load_explicit(addr, memory_order_acquire) != val) return;
        cpu_relax();
        /* With more runnable threads than cores (other processes, or a pool
         * larger than the machine) a pure spin would hold the core the
         * thread we wait for needs; yielding now and then costs ~1 us. */
        if ((i & 255) == 255) sched_yield();
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

static void *worker_main(void *varg) {
    worker *w = varg;
    tnd_pool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        wait_change(p, &p->gen, seen);
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) break;
        p->fn(p->arg, w->ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) wake(p, &p->pending);
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
    const char *e = getenv("TND_POOL_SPIN");
    p->spin = e ? atoi(e) : 200000;
    if (p->spin < 0) p->spin = 0;
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_phase, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->quit, 0);
    p->workers = tnd_calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        tnd_aligned_free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
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

void tnd_pool_run(tnd_pool *p, tnd_task_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, (uint32_t)(p->n - 1), memory_order_relaxed);
    /* The release on gen publishes fn, arg and pending to the workers. */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
    wake(p, &p->gen);
    fn(arg, 0, p->n);
    for (;;) {
        uint32_t left = atomic_load_explicit(&p->pending, memory_order_acquire);
        if (left == 0) break;
        wait_change(p, &p->pending, left);
    }
}

void tnd_pool_barrier(tnd_pool *p) {
    if (!p || p->n == 1) return;
    uint32_t phase = atomic_load_explicit(&p->bar_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == (uint32_t)(p->n - 1)) {
        /* Last to arrive: reset the count before opening the next phase, so
         * nobody can enter the next barrier and see a stale count. */
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bar_phase, 1, memory_order_seq_cst);
        wake(p, &p->bar_phase);
        return;
    }
    wait_change(p, &p->bar_phase, phase);
}
