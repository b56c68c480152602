/* The live hot-expert table (docs/ARCHITECTURE.md: MoE): which experts of
 * each split layer the GPU holds follows the routing the context sees, not
 * only the calibration text the plan was made from.
 *
 * The executor counts every routing of a split layer (remap_ids in
 * exec.c: the ids are on the host there anyway). Every HOT_WINDOW tokens
 * the counts fold into an EWMA of each expert's uses per token, and the
 * window's measured GPU-hit share (routings that found their expert on the
 * GPU) is set against the share the plan assumed. When the measured share
 * has drifted HOT_DRIFT below it, and holding each layer's k most used
 * experts (by the live table) promises HOT_GAIN more share than the experts
 * held now, the experts swap in place: an expert leaving the GPU gives its
 * slot in the layer's compacted arena to one arriving, whose gate, up and
 * down are copied there from the host store. The layer keeps k experts, so
 * the layout and its memory do not change, and a swap costs three copies
 * of one expert (a full re-plan would upload every resident weight). The
 * plan's popularity table takes the live one, so predictions and the
 * promotions' choice see it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "sched/perf.h"
#include "util.h"

#define HOT_WINDOW 64  /* tokens (in each split layer) between looks */
#define HOT_ALPHA 0.5  /* weight of the newest window in the EWMA */
#define HOT_DRIFT 0.05 /* measured share this far below the assumed one: drift */
#define HOT_GAIN 0.05  /* a swap must promise this much more share under the live table */
/* an arriving expert must be this much more used than the one it replaces
 * (ratio, and uses per token): a window's counts are noisy, and churn costs copies */
#define HOT_RATIO 1.25
#define HOT_MARGIN 0.01
/* swaps per layer and look, at most k / HOT_STEP (at least 1): the copies of
 * one look stay a small part of a window's time, and the table converges
 * over a few looks */
#define HOT_STEP 4

static bool any_split(const tnd_ctx *c) {
    for (int l = 0; c->exp_gpu && l < c->pl.n_layer; l++)
        if (c->pl.split[l]) return true;
    return false;
}

/* GPU-hit share the split layers' GPU experts get under table pop. */
static double share_of(const tnd_ctx *c, const double *pop) {
    const int E = c->pl.n_expert;
    double g = 0, all = 0;
    for (int l = 0; l < c->pl.n_layer; l++) {
        if (!c->pl.split[l]) continue;
        for (int e = 0; e < E; e++) {
            double x = pop[(size_t)l * E + e];
            all += x;
            if (c->pl.exp[(size_t)l * E + e] == TND_SIDE_GPU) g += x;
        }
    }
    return all > 0 ? g / all : 0;
}

void tnd_hot_release(tnd_ctx *c) {
    free(c->hot_pop);
    free(c->hot_cnt);
    free(c->hot_tok);
    c->hot_pop = NULL;
    c->hot_cnt = NULL;
    c->hot_tok = NULL;
}

tnd_status tnd_hot_init(tnd_ctx *c) {
    tnd_hot_release(c);
    c->hot_win_route = c->hot_win_gpu = 0;
    if (!c->gpu || !any_split(c)) return TND_OK;
    const int L = c->pl.n_layer, E = c->pl.n_expert;
    c->hot_pop = malloc(sizeof(double) * (size_t)L * E);
    c->hot_cnt = tnd_calloc((size_t)L * E, sizeof *c->hot_cnt);
    c->hot_tok = tnd_calloc((size_t)L, sizeof *c->hot_tok);
    if (!c->hot_pop || !c->hot_cnt || !c->hot_tok) {
        tnd_hot_release(c);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    /* the start: the plan's table (calibration), else every expert alike */
    const bool cal = c->perf && c->perf->pop && c->perf->n_expert == E;
    const double u = (double)c->m->hp.n_expert_used / E;
    for (size_t i = 0; i < (size_t)L * E; i++) c->hot_pop[i] = cal ? c->perf->pop[i] : u;
    c->hot_assumed = share_of(c, c->hot_pop);
    return TND_OK;
}

void tnd_hot_assume(tnd_ctx *c, const double *pop) {
    if (!c->hot_pop) return;
    memcpy(c->hot_pop, pop, sizeof(double) * (size_t)c->pl.n_layer * c->pl.n_expert);
    c->hot_assumed = share_of(c, c->hot_pop);
}

double tnd_hot_assumed(const tnd_ctx *c) { return c->hot_pop ? c->hot_assumed : -1; }

/* Insertion sort of idx[n] by pop, descending, ties by id (n: a layer's experts). */
static void sort_experts(int *idx, int n, const double *pop) {
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i;
        while (j > 0 && (pop[idx[j - 1]] < pop[v] || (pop[idx[j - 1]] == pop[v] && idx[j - 1] > v))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
}

/* Copies expert a of split layer l from the host store (pinned where the
 * layout could pin it) to arena slot slot of each of the layer's expert
 * tensors. */
static tnd_status upload(tnd_ctx *c, int l, int a, int32_t slot) {
    for (int i = 0; i < c->m->n_slices; i++) {
        int sl;
        if (!tnd_slice_split(c->m, &c->pl, i, &sl) || sl != l) continue;
        const tnd_weight *w = c->m->slices[i];
        size_t per = w->t->nbytes / (size_t)w->n_expert;
        tnd_status st = tnd_backend_copy_h2d(c->side[1].be, (char *)c->w[1][i] + (size_t)slot * per,
                                             (const char *)c->w[0][i] + (size_t)a * per, per, c->side[1].st);
        if (st) return st;
    }
    return TND_OK;
}

/* Layer l's GPU experts become its k most used under the live table: each
 * leaving expert's arena slot takes an arriving one. Returns the swaps. */
static tnd_status swap_layer(tnd_ctx *c, int l, int *idx, int *n_swaps) {
    const int E = c->pl.n_expert;
    const double *pop = c->hot_pop + (size_t)l * E;
    uint8_t *side = c->pl.exp + (size_t)l * E;
    int32_t *gi = c->exp_gpu + (size_t)l * E;
    /* resident: an arena entry of its own (exp_gpu); an expert the
     * placement gives the GPU may instead have lent its entry to a prefetch
     * slot (exec/prefetch.c) */
    int k = 0;
    for (int e = 0; e < E; e++) {
        idx[e] = e;
        k += gi[e] >= 0;
    }
    sort_experts(idx, E, pop);
    /* pairs: the most used arriving expert (in the top k, not resident)
     * takes the entry of the least used leaving one (outside the top k, resident) */
    int in = 0, out = E - 1, cap = TND_MAX(1, k / HOT_STEP);
    *n_swaps = 0;
    while (*n_swaps < cap) {
        while (in < k && gi[idx[in]] >= 0) in++;
        while (out >= k && gi[idx[out]] < 0) out--;
        if (in >= k || out < k) break;
        int a = idx[in], r = idx[out];
        if (pop[a] < HOT_RATIO * pop[r] + HOT_MARGIN) break; /* the rest are closer still: keep what is there */
        int32_t slot = gi[r];
        tnd_status st = upload(c, l, a, slot);
        if (st) return st;
        gi[a] = slot;
        gi[r] = -1;
        /* the placement's GPU experts keep their number: one that lent its
         * entry to a slot hands that role to the leaving one */
        if (side[a] != TND_SIDE_GPU) {
            side[a] = TND_SIDE_GPU;
            side[r] = TND_SIDE_CPU;
        }
        (*n_swaps)++;
        in++;
        out--;
    }
    return TND_OK;
}

tnd_status tnd_hot_after_round(tnd_ctx *c) {
    if (!c->hot_pop || !c->adapt) return TND_OK;
    const int L = c->pl.n_layer, E = c->pl.n_expert;
    int64_t tok = 0;
    for (int l = 0; l < L; l++) tok = TND_MAX(tok, c->hot_tok[l]);
    if (tok < HOT_WINDOW) return TND_OK;
    const double measured = c->hot_win_route ? (double)c->hot_win_gpu / (double)c->hot_win_route : 0;
    for (int l = 0; l < L; l++) {
        if (!c->pl.split[l] || !c->hot_tok[l]) continue;
        for (int e = 0; e < E; e++) {
            size_t i = (size_t)l * E + e;
            c->hot_pop[i] = (1 - HOT_ALPHA) * c->hot_pop[i] + HOT_ALPHA * (double)c->hot_cnt[i] / (double)c->hot_tok[l];
        }
    }
    memset(c->hot_cnt, 0, sizeof *c->hot_cnt * (size_t)L * E);
    memset(c->hot_tok, 0, sizeof *c->hot_tok * (size_t)L);
    c->hot_win_route = c->hot_win_gpu = 0;
    c->hot_measured = measured;
    /* without the table (an ablation) the share is measured, never acted on */
    if ((c->ablate & TND_ABLATE_HOT) || measured >= c->hot_assumed - HOT_DRIFT) return TND_OK;
    /* what holding each layer's top k would give under the live table */
    const double now = share_of(c, c->hot_pop);
    int *idx = malloc(sizeof(int) * (size_t)E);
    uint8_t *keep = malloc((size_t)L * E);
    int32_t *keep_gi = malloc(sizeof(int32_t) * (size_t)L * E);
    if (!idx || !keep || !keep_gi) {
        free(idx), free(keep), free(keep_gi);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    memcpy(keep, c->pl.exp, (size_t)L * E);
    memcpy(keep_gi, c->exp_gpu, sizeof(int32_t) * (size_t)L * E);
    double best_g = 0, all = 0;
    for (int l = 0; l < L; l++) {
        if (!c->pl.split[l]) continue;
        int k = 0;
        for (int e = 0; e < E; e++) {
            idx[e] = e;
            k += c->pl.exp[(size_t)l * E + e] == TND_SIDE_GPU;
            all += c->hot_pop[(size_t)l * E + e];
        }
        sort_experts(idx, E, c->hot_pop + (size_t)l * E);
        for (int j = 0; j < k; j++) best_g += c->hot_pop[(size_t)l * E + idx[j]];
    }
    const double best = all > 0 ? best_g / all : 0;
    tnd_status st = TND_OK;
    if (best - now >= HOT_GAIN) {
        /* the GPU must be done with the experts it holds before they change */
        st = tnd_backend_stream_sync(c->side[1].be, c->side[1].st);
        if (!st) st = tnd_xfer_drain(c);
        int swaps = 0;
        for (int l = 0; !st && l < L; l++) {
            int n = 0;
            if (c->pl.split[l]) st = swap_layer(c, l, idx, &n);
            swaps += n;
        }
        if (!st) st = tnd_backend_stream_sync(c->side[1].be, c->side[1].st);
        if (st) { /* a failed copy: back to the old sides and slots, the arena rewritten from them */
            char why[256];
            snprintf(why, sizeof why, "%s", tnd_last_error());
            memcpy(c->pl.exp, keep, (size_t)L * E);
            memcpy(c->exp_gpu, keep_gi, sizeof(int32_t) * (size_t)L * E);
            tnd_status rs = TND_OK;
            for (int l = 0; !rs && l < L; l++)
                for (int e = 0; !rs && c->pl.split[l] && e < E; e++)
                    if (c->exp_gpu[(size_t)l * E + e] >= 0) rs = upload(c, l, e, c->exp_gpu[(size_t)l * E + e]);
            if (!rs) rs = tnd_backend_stream_sync(c->side[1].be, c->side[1].st);
            if (rs) {
                st = tnd_fail(rs, "moving hot experts to the GPU failed (%s), and so did restoring them: the "
                              "context cannot go on", why);
            } else { /* the context goes on as it was */
                TND_WARN("moving hot experts to the GPU failed (%s); they stay where they were", why);
                st = TND_OK;
            }
        } else {
            c->n_expert_moves += (uint64_t)swaps;
            c->prom_key_nt = 0; /* promotions are chosen afresh for the new sides */
            if (c->perf && c->perf->pop && c->perf->n_expert == E)
                memcpy(c->perf->pop, c->hot_pop, sizeof(double) * (size_t)L * E);
            TND_DEBUG("hot experts: GPU-hit share %.2f measured against %.2f assumed; %d experts swapped, %.2f "
                      "expected now", measured, c->hot_assumed, swaps, best);
        }
    }
    c->hot_assumed = share_of(c, c->hot_pop);
    free(idx), free(keep), free(keep_gi);
    return st;
}
