/* Thread pool for per-token work: threads are created once and kept hot, a
 * parallel region costs a wake-up, not a thread creation. The calling thread
 * takes part.
 *
 * A run is a set of items; whichever threads are running claim them one at a
 * time, and the run ends when every item is done, not when every thread has
 * checked in. So a worker the OS has descheduled (other processes on the
 * cores) delays at most the item it holds, never the whole run: the others,
 * and the caller, take what it would have done. Item functions must not
 * depend on which thread runs them. Items are claimed in index order, so
 * an item may wait for items of lower index in the same run (they are held
 * by running threads): MOE_FFN's down grains wait for their expert's GLU
 * grains (cpu/backend_cpu.c); a waiter should yield now and then, since
 * the holder may be descheduled. No other waits. */
#ifndef TND_CPU_POOL_H
#define TND_CPU_POOL_H

#include "tandem.h"

typedef struct tnd_pool tnd_pool;

/* Item i of n: which share of the work (e.g. rows [r*i/n, r*(i+1)/n)). */
typedef void (*tnd_task_fn)(void *arg, int i, int n);

/* n_threads <= 0: the physical cores this process may run on. NULL on
 * failure (message set). */
tnd_pool *tnd_pool_new(int n_threads);
void tnd_pool_free(tnd_pool *p);
int tnd_pool_size(const tnd_pool *p);
/* Runs fn(arg, i, n) for every i in [0, n) with n = the pool's size, and
 * returns when all are done. p may be NULL: runs fn(arg, 0, 1) on the caller.
 * Not reentrant. */
void tnd_pool_run(tnd_pool *p, tnd_task_fn fn, void *arg);
/* The same with n_items items (1 .. 1<<20 - 1): more items than threads balance
 * threads that run at different speeds. */
void tnd_pool_run_n(tnd_pool *p, tnd_task_fn fn, void *arg, int n_items);
/* An errand: fn(arg) run once by the caller of the next run, after the
 * workers are woken and before it claims items, so host work that does not
 * belong to the run (queuing copies, say) overlaps it instead of delaying
 * its start; the others take the items the caller would have. One at a
 * time: setting one runs any still pending first. p NULL: runs fn now. */
typedef void (*tnd_errand_fn)(void *arg);
void tnd_pool_errand(tnd_pool *p, tnd_errand_fn fn, void *arg);
/* Runs the pending errand now, if any (before its results are needed). */
void tnd_pool_errand_flush(tnd_pool *p);
/* A spinning thread's pause (the SMT sibling keeps the core meanwhile). */
static inline void tnd_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Items per thread that tnd_pool_run_n callers use to balance late threads. */
#define TND_POOL_ITEMS_PER_THREAD 4
/* Items of a decode matmul's run over p's threads: TND_POOL_ITEMS_PER_THREAD
 * a thread, 2 in a pool of two. (Each claim and completion moves a shared
 * cache line between the cores; on the 2-core CI machine 2 a thread
 * decoded the default model 8-12% faster in six alternated pairs, and as
 * fast with the other core busy, while at 16 threads on the device's host
 * 4 stayed ahead: docs/DECISIONS.md, "Decode matmul items in a pool of
 * two".) */
static inline int tnd_pool_items(const tnd_pool *p) {
    const int n = tnd_pool_size(p);
    return n * (n <= 2 ? 2 : TND_POOL_ITEMS_PER_THREAD);
}

#endif
