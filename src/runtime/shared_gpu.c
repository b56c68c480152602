/* The GPU shared with another process (docs/ARCHITECTURE.md: Adaptation;
 * the rule is sched/adapt.h's tnd_adapt_gpu).
 *
 * Without MPS, another process's kernels time-share the GPU with ours: each
 * time a round moves to the GPU it waits for a time slice, milliseconds
 * where the profile measured microseconds. A static placement switches
 * sides dozens of times a decode step, and promotions add more, so it
 * collapses (14B at 50% on the H200 beside a kernel spinning on half the
 * SMs: 4 tok/s, against 11.5 for whole layers on the GPU and nothing
 * promoted; docs/BENCHMARKS.md, 2026-12-04). After each round the context
 * pings the GPU now and then; when the rule says the GPU is shared, the
 * weights are placed again by Algorithm 1 with the measured switch latency,
 * which gives few switches, and swapped in between rounds
 * (tnd_ctx_swap_plan: the KV cache is kept); when it says the GPU is ours
 * again, the plan for an idle GPU, kept meanwhile, comes back. Placements
 * the user chose (not static) stay as they are. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/internal.h"
#include "sched/perf.h"
#include "util.h"

/* Same sides for every slice, layer cache and expert. */
static bool same_sides(const tnd_placement *a, const tnd_placement *b) {
    if (memcmp(a->where, b->where, (size_t)a->n_slices) || memcmp(a->kv, b->kv, (size_t)a->n_layer) ||
        memcmp(a->split, b->split, (size_t)a->n_layer))
        return false;
    return !a->exp || !memcmp(a->exp, b->exp, (size_t)a->n_layer * a->n_expert);
}

/* Swaps plan in; on failure swaps back to keep (the plan c ran, a copy), so
 * the context goes on as it was, or says it cannot. */
static tnd_status swap(tnd_ctx *c, const tnd_plan *plan, const tnd_plan *keep) {
    tnd_status st = tnd_ctx_swap_plan(c, plan);
    if (!st) return TND_OK;
    char why[256];
    snprintf(why, sizeof why, "%s", tnd_last_error());
    if (tnd_ctx_swap_plan(c, keep))
        return tnd_fail(st, "placing the weights for a shared GPU failed (%s), and so did restoring the placement: "
                        "the context cannot go on", why);
    TND_WARN("placing the weights for a shared GPU failed (%s); they stay where they were", why);
    return TND_OK;
}

tnd_status tnd_shared_after_round(tnd_ctx *c) {
    if (!c->adapt || !c->gpu || !c->plan || !c->perf || !c->side[1].be->iface->ping) return TND_OK;
    const tnd_plan *idle = c->plan_idle ? c->plan_idle : c->plan;
    if (!idle->stat) return TND_OK;
    double now = tnd_time_s();
    if (!tnd_adapt_gpu_round(&c->adg, now, c->round_s)) return TND_OK;
    /* the least of three: the host thread descheduled in one (a busy CPU)
     * is not the GPU, while a shared GPU makes each of them wait */
    double ping = INFINITY;
    for (int i = 0; i < 3; i++) {
        double p;
        tnd_status st = tnd_backend_ping(c->side[1].be, c->side[1].st, &p);
        if (st) return st; /* the stream failed: the next round would too */
        ping = fmin(ping, p);
    }
    tnd_status st = TND_OK;
    const double lat = idle->perf->lat;
    const int d = tnd_adapt_gpu_observe(&c->adg, tnd_time_s(), ping, lat);
    TND_DEBUG("ping %.1f us (x%.1f the profile's), %s", 1e6 * ping, ping / lat, c->adg.shared ? "shared" : "idle");
    if (!d) return TND_OK;
    const double t0 = tnd_time_s();
    tnd_plan *np = NULL, *keep = NULL;
    bool moved = false;
    if (d > 0) {
        /* the plan for an idle GPU is kept (a copy: the live hot-expert
         * table is in its perf DB) to come back to */
        st = tnd_plan_replace(idle, c->adg.lat, &np);
        const bool differ = !st && !same_sides(&np->pl, &c->pl);
        if (differ && !c->plan_idle) st = tnd_plan_copy(c->plan, &c->plan_idle);
        if (differ && !st) {
            st = swap(c, np, c->plan_idle);
            moved = true;
        }
        if (st && !moved) { /* no plan for a shared GPU (its layout does not fit, no memory): this one stays */
            TND_WARN("no placement for a shared GPU: %s", tnd_last_error());
            st = TND_OK;
        }
    } else if (c->plan_idle) {
        st = tnd_plan_copy(c->plan, &keep);
        if (!st) st = swap(c, c->plan_idle, keep);
        if (!st) {
            tnd_plan_free(c->plan_idle);
            c->plan_idle = NULL;
        }
        moved = true;
    }
    tnd_plan_free(np);
    tnd_plan_free(keep);
    if (st) return st;
    const double t1 = tnd_time_s();
    if (moved) {
        c->n_replace++;
        c->n_replans++;
    }
    char args[256];
    snprintf(args, sizeof args, "\"ping_us\":%.1f,\"profile_us\":%.1f,\"moved\":%s", 1e6 * ping, 1e6 * lat,
             moved ? "true" : "false");
    tnd_tl_span(c, d > 0 ? "re-place: the GPU is shared" : "re-place: the GPU is idle", t0, t1, args);
    TND_INFO("re-place %llu: the GPU is %s (a kernel waited %.0f us, x%.0f the profile's %.0f us): %s; %.0f ms",
             (unsigned long long)c->n_replace, d > 0 ? "shared" : "idle again", 1e6 * ping, ping / lat, 1e6 * lat,
             moved ? c->pl.desc : "the placement stays", 1e3 * (t1 - t0));
    return TND_OK;
}
