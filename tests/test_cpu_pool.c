/* Thread pool: every item of a run runs exactly once with its own index and
 * the run's item count, runs are ordered (a run sees all writes of the
 * previous one), a slow item leaves the other items to the other threads
 * (the run does not wait for a fixed share per thread), and both the
 * spinning and the sleeping wake-up paths work, and an errand runs once,
 * on the caller, with the next run or at a flush. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/pool.h"
#include "check.h"
#include "config.h"
#include "util.h"

#define MAXT 16

typedef struct {
    int count[MAXT];   /* times thread ith ran in this run */
    int nth_seen[MAXT];
    long acc[MAXT];    /* running sum, read across runs */
} run_arg;

static void task_count(void *v, int ith, int nth) {
    run_arg *a = v;
    a->count[ith]++;
    a->nth_seen[ith] = nth;
    a->acc[ith] += ith + 1;
}

#define MANY 1000

typedef struct {
    _Atomic int runs[MANY]; /* times item i ran */
    _Atomic int bad_n;
} many_arg;

static void task_many(void *v, int i, int n) {
    many_arg *a = v;
    atomic_fetch_add(&a->runs[i], 1);
    if (n != MANY) atomic_fetch_add(&a->bad_n, 1);
}

/* Item 0 waits (bounded) until every other item is done: only threads other
 * than the one holding item 0 can do them, as when the OS deschedules a
 * worker in the middle of a run. A pool that gave each thread a fixed share
 * would never finish the others' part of item 0's thread. */
typedef struct {
    _Atomic int finished;
    int n_items;
    bool timed_out;
} slow_arg;

static void task_slow(void *v, int i, int n) {
    slow_arg *a = v;
    (void)n;
    if (i == 0) {
        const double t0 = tnd_time_s();
        while (atomic_load(&a->finished) < a->n_items - 1)
            if (tnd_time_s() - t0 > 20) { /* a bound, not a timing: 20 s means stuck */
                a->timed_out = true;
                break;
            }
    }
    atomic_fetch_add(&a->finished, 1);
}

static void test_pool(int n, const char *spin) {
    /* the environment is read once per process: the knob is set directly */
    CHECK(tnd_config_set("TND_POOL_SPIN", spin) == TND_OK, "TND_POOL_SPIN=%s: %s", spin ? spin : "(unset)", tnd_last_error());
    tnd_pool *p = tnd_pool_new(n);
    CHECK(p, "pool_new(%d): %s", n, tnd_last_error());
    if (!p) return;
    CHECK(tnd_pool_size(p) == n, "size %d != %d", tnd_pool_size(p), n);

    run_arg ra;
    memset(&ra, 0, sizeof ra);
    const int runs = 2000;
    for (int r = 0; r < runs; r++) {
        tnd_pool_run(p, task_count, &ra);
        /* After run returns, every thread's write must be visible. */
        for (int i = 0; i < n; i++)
            if (ra.count[i] != r + 1) {
                CHECK(0, "n=%d run %d: thread %d ran %d times", n, r, i, ra.count[i]);
                r = runs;
                break;
            }
    }
    for (int i = 0; i < n; i++) {
        CHECK(ra.nth_seen[i] == n, "thread %d saw nth=%d", i, ra.nth_seen[i]);
        CHECK(ra.acc[i] == (long)runs * (i + 1), "thread %d acc %ld", i, ra.acc[i]);
    }

    static many_arg ma;
    memset(&ma, 0, sizeof ma);
    for (int rep = 0; rep < 20; rep++) tnd_pool_run_n(p, task_many, &ma, MANY);
    int wrong = 0;
    for (int i = 0; i < MANY; i++) wrong += atomic_load(&ma.runs[i]) != 20;
    CHECK(wrong == 0 && atomic_load(&ma.bad_n) == 0, "n=%d: %d of %d items did not run exactly 20 times", n, wrong,
          MANY);

    if (n > 1) {
        slow_arg sa = {.n_items = 8 * n};
        tnd_pool_run_n(p, task_slow, &sa, sa.n_items);
        CHECK(!sa.timed_out && atomic_load(&sa.finished) == sa.n_items,
              "n=%d: the other threads did not take a slow thread's items (%d of %d done)", n,
              atomic_load(&sa.finished), sa.n_items);
    }

    /* Latency of an empty run, for information only (not asserted: shared CI
     * machines make timing meaningless). */
    double t0 = tnd_time_s();
    for (int r = 0; r < 1000; r++) tnd_pool_run(p, task_count, &ra);
    double dt = (tnd_time_s() - t0) / 1000;
    printf("pool n=%d spin=%s: %.2f us per empty run\n", n, spin ? spin : "default", dt * 1e6);
    tnd_pool_free(p);
}

/* Errands (tnd_pool_errand): each runs once, on the caller, at the next
 * run (single-item and many-item runs alike) or at a flush, never at once. */
typedef struct {
    pthread_t caller;
    int runs, wrong_thread, items_before;
    _Atomic int items;
} errand_arg;
static void errand(void *v) {
    errand_arg *e = v;
    e->runs++;
    e->wrong_thread += !pthread_equal(pthread_self(), e->caller);
}
static void task_item(void *v, int i, int n) {
    (void)i, (void)n;
    atomic_fetch_add(&((errand_arg *)v)->items, 1);
}
static void test_errands(int n) {
    tnd_pool *p = tnd_pool_new(n);
    CHECK(p, "pool_new(%d): %s", n, tnd_last_error());
    if (!p) return;
    errand_arg e = {.caller = pthread_self()};
    for (int items = 1; items <= 64; items *= 4) {
        const int before = e.runs;
        tnd_pool_errand(p, errand, &e);
        CHECK(e.runs == before, "n=%d: the errand ran when set", n);
        tnd_pool_run_n(p, task_item, &e, items);
        CHECK(e.runs == before + 1, "n=%d, %d items: the errand ran %d times in the run", n, items, e.runs - before);
        tnd_pool_run_n(p, task_item, &e, items);
        CHECK(e.runs == before + 1, "n=%d, %d items: the errand ran again", n, items);
    }
    tnd_pool_errand(p, errand, &e);
    tnd_pool_errand(p, errand, &e); /* the first runs before the second is kept */
    CHECK(e.runs == 5, "n=%d: a replaced errand ran %d times of 5", n, e.runs);
    tnd_pool_errand_flush(p);
    tnd_pool_errand_flush(p);
    CHECK(e.runs == 6, "n=%d: flushed errands ran %d times of 6", n, e.runs);
    CHECK(e.wrong_thread == 0, "n=%d: %d errands ran off the caller", n, e.wrong_thread);
    CHECK(atomic_load(&e.items) == 2 * (1 + 4 + 16 + 64), "n=%d: %d items ran", n, atomic_load(&e.items));
    tnd_pool_free(p);
}

int main(void) {
    /* NULL pool: runs on the caller as thread 0 of 1. */
    run_arg ra;
    memset(&ra, 0, sizeof ra);
    tnd_pool_run(NULL, task_count, &ra);
    CHECK(ra.count[0] == 1 && ra.nth_seen[0] == 1, "NULL pool");
    CHECK(tnd_pool_size(NULL) == 1, "size of NULL pool");
    many_arg *ma = calloc(1, sizeof *ma);
    tnd_pool_run_n(NULL, task_many, ma, MANY);
    CHECK(atomic_load(&ma->runs[MANY - 1]) == 1 && atomic_load(&ma->bad_n) == 0, "NULL pool, many items");
    free(ma);

    errand_arg e0 = {.caller = pthread_self()};
    tnd_pool_errand(NULL, errand, &e0);
    CHECK(e0.runs == 1, "NULL pool: the errand runs at once");
    test_errands(1);
    test_errands(4);
    test_pool(1, NULL);
    test_pool(2, NULL);
    test_pool(4, NULL);
    /* No spinning: every wake-up goes through the futex path. */
    test_pool(3, "0");
    test_pool(MAXT, "50");
    /* Default size: physical cores (those this process may use). */
    tnd_config_set("TND_POOL_SPIN", NULL);
    tnd_pool *p = tnd_pool_new(0);
    CHECK(p && tnd_pool_size(p) >= 1 && tnd_pool_size(p) <= 512, "default pool");
    tnd_pool_free(p);
    return tc_summary();
}
