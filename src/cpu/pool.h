/* Thread pool for per-token work: threads are created once and kept hot, a
 * parallel region costs a wake-up and a barrier, not a thread creation.
 * The calling thread takes part as thread 0. */
#ifndef TND_CPU_POOL_H
#define TND_CPU_POOL_H

#include "tandem.h"

typedef struct tnd_pool tnd_pool;

/* ith in [0, nth): which share of the work this thread does. */
typedef void (*tnd_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: physical cores. NULL on failure (message set). */
tnd_pool *tnd_pool_new(int n_threads);
void tnd_pool_free(tnd_pool *p);
int tnd_pool_size(const tnd_pool *p);
/* Runs fn(arg, ith, nth) on every thread and returns when all are done.
 * p may be NULL: runs fn(arg, 0, 1) on the caller. Not reentrant. */
void tnd_pool_run(tnd_pool *p, tnd_task_fn fn, void *arg);
/* Inside a task run by tnd_pool_run: returns once all nth threads of the run
 * have called it (every thread must call it the same number of times).
 * p NULL or of one thread: returns at once. */
void tnd_pool_barrier(tnd_pool *p);

#endif
