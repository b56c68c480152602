/* Thread pool: every thread runs every task exactly once with its own ith,
 * runs are ordered (a run sees all writes of the previous one), the in-task
 * barrier separates phases, and both the spinning and the sleeping wake-up
 * paths work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/pool.h"
#include "check.h"
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

typedef struct {
    tnd_pool *pool;
    int phase1[MAXT];
    int ok[MAXT];
    int rounds;
} bar_arg;

/* Each round: write own slot, barrier, check everyone's slot, barrier (so no
 * one overwrites a slot another thread is still reading). */
static void task_barrier(void *v, int ith, int nth) {
    bar_arg *a = v;
    int ok = 1;
    for (int r = 1; r <= a->rounds; r++) {
        a->phase1[ith] = r * 1000 + ith;
        tnd_pool_barrier(a->pool);
        for (int i = 0; i < nth; i++)
            if (__atomic_load_n(&a->phase1[i], __ATOMIC_RELAXED) != r * 1000 + i) ok = 0;
        tnd_pool_barrier(a->pool);
    }
    a->ok[ith] = ok;
}

static void test_pool(int n, const char *spin) {
    if (spin) setenv("TND_POOL_SPIN", spin, 1);
    else unsetenv("TND_POOL_SPIN");
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

    bar_arg ba;
    memset(&ba, 0, sizeof ba);
    ba.pool = p;
    ba.rounds = 500;
    for (int rep = 0; rep < 5; rep++) {
        tnd_pool_run(p, task_barrier, &ba);
        for (int i = 0; i < n; i++) CHECK(ba.ok[i] == 1, "n=%d barrier rep %d thread %d saw a torn phase", n, rep, i);
    }

    /* Latency of an empty run, for information only (not asserted: shared CI
     * machines make timing meaningless). */
    double t0 = tnd_time_s();
    for (int r = 0; r < 1000; r++) tnd_pool_run(p, task_count, &ra);
    double dt = (tnd_time_s() - t0) / 1000;
    printf("pool n=%d spin=%s: %.2f us per empty run\n", n, spin ? spin : "default", dt * 1e6);
    tnd_pool_free(p);
}

int main(void) {
    /* NULL pool: runs on the caller as thread 0 of 1. */
    run_arg ra;
    memset(&ra, 0, sizeof ra);
    tnd_pool_run(NULL, task_count, &ra);
    CHECK(ra.count[0] == 1 && ra.nth_seen[0] == 1, "NULL pool");
    CHECK(tnd_pool_size(NULL) == 1, "size of NULL pool");
    tnd_pool_barrier(NULL);

    test_pool(1, NULL);
    test_pool(2, NULL);
    test_pool(4, NULL);
    /* No spinning: every wake-up goes through the futex path. */
    test_pool(3, "0");
    test_pool(MAXT, "50");
    /* Default size: physical cores. */
    unsetenv("TND_POOL_SPIN");
    tnd_pool *p = tnd_pool_new(0);
    CHECK(p && tnd_pool_size(p) >= 1 && tnd_pool_size(p) <= 512, "default pool");
    tnd_pool_free(p);
    return tc_summary();
}
