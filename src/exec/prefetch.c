/* Expert prefetch (docs/ARCHITECTURE.md: MoE): the experts a split layer's
 * next layer will use, copied to the GPU while this layer computes.
 *
 * A split layer's GPU experts sit compacted in its arena copy, indexed
 * through exp_gpu. Up to pf_max of those entries (the least popular
 * resident experts' places, so memory and the budget do not change) become
 * slots: each holds some non-resident expert, whichever was copied there
 * last. The placement (pl.exp) is left as the plan made it: its GPU experts
 * are those resident and those whose places the slots took; exp_gpu says
 * which are resident.
 * At a split layer's routing the host already waits for the ids; the
 * recipe puts the next layer's router over this layer's FFN input beside
 * them (model/forward.c), which names nearly all of the next layer's
 * experts. The predicted experts that are on the CPU side and in no slot
 * are copied on the transfer stream into the least recently used slots, so
 * at the next layer's routing the experts that arrived run on the GPU
 * (its compute stream waits for the copies) and only the rest on the CPU.
 *
 * How many to copy is the balance of Algorithm 2 applied a layer ahead: k
 * copies take k t_copy on the link, the n - k left run on the CPU at t_cpu
 * each, and a layer takes H besides its experts; the link keeps up (no
 * layer waits for a copy) while k t_copy <= H + (n - k) t_cpu, so k is the
 * largest such. H and t_cpu are measured as rounds run (EWMAs), t_copy
 * comes from the profile's link speed. H is a layer's time from routing to
 * routing less its CPU experts: the link copies through all of it, the
 * host's waits for the GPU's attention and routing included. Only when the
 * copies a layer's GPU part reads were not done as its routing came back
 * (the GPU then waits for them, and the next wait grows with the lag) are
 * that layer's waits left out, so copying too much shrinks H instead of
 * feeding it. (Leaving every wait out under-copied once CUDA graphs made
 * the host's own time small: the waits are most of a layer then.) A miss
 * costs nothing extra: that expert runs on the CPU, as without prefetch.
 * With PreSched on, its count replaces the balance's, and when it finds
 * nothing of the next layer worth a copy, the layer after next's predicted
 * experts may be copied into that layer's slots instead (its Q4). */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "exec/exec.h"
#include "moe/moe.h"
#include "sched/perf.h"
#include "util.h"

#define PF_ALPHA 0.2 /* EWMA weight of the newest sample */
#define PS_DECAY 0.98 /* PreSched's cost fit: the weight left to a split layer's sample per newer one */

tnd_status tnd_pf_init(tnd_ctx *c) {
    const int L = c->pl.n_layer, E = c->pl.n_expert;
    if (!c->exp_gpu) return TND_OK;
    if (!(c->n_compact = tnd_calloc((size_t)L, sizeof *c->n_compact))) return TND_ERR_NOMEM;
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) c->n_compact[l] += c->exp_gpu[(size_t)l * E + e] >= 0;
    const int want = tnd_config_get()->expert_prefetch;
    const int P = c->ablate & TND_ABLATE_PREFETCH ? 0 : want < 0 ? c->m->hp.n_expert_used : want;
    if (P <= 0) return TND_OK;
    c->pf_max = P;
    const size_t LP = (size_t)L * (size_t)P;
    c->pf_n = tnd_calloc((size_t)L, sizeof *c->pf_n);
    c->pf_idx = tnd_calloc(LP, sizeof *c->pf_idx);
    c->pf_exp = tnd_calloc(LP, sizeof *c->pf_exp);
    c->pf_used = tnd_calloc(LP, sizeof *c->pf_used);
    c->pf_fill = tnd_calloc(LP, sizeof *c->pf_fill);
    c->pf_fresh = tnd_calloc((size_t)L, 1);
    c->pf_read = tnd_calloc(LP, sizeof *c->pf_read);
    c->pf_two = tnd_calloc(LP, sizeof *c->pf_two);
    int *idx = tnd_calloc((size_t)E, sizeof *idx);
    if (!c->pf_n || !c->pf_idx || !c->pf_exp || !c->pf_used || !c->pf_fill || !c->pf_fresh || !c->pf_read ||
        !c->pf_two || !idx) {
        free(idx);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    const double *pop = c->perf && c->perf->pop && c->perf->n_expert == E ? c->perf->pop : NULL;
    for (int l = 0; l < L; l++) {
        if (!c->pl.split[l]) continue;
        int32_t *gi = c->exp_gpu + (size_t)l * E;
        int k = 0;
        for (int e = 0; e < E; e++)
            if (gi[e] >= 0) idx[k++] = e;
        /* the least popular resident experts first (then the highest ids) */
        for (int i = 1; i < k; i++) {
            int v = idx[i], j = i;
            while (j > 0 && (pop ? pop[(size_t)l * E + idx[j - 1]] > pop[(size_t)l * E + v] ||
                                       (pop[(size_t)l * E + idx[j - 1]] == pop[(size_t)l * E + v] && idx[j - 1] < v)
                                 : idx[j - 1] < v)) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
        const int n = TND_MIN(P, k);
        for (int s = 0; s < n; s++) { /* the expert stays there: the slot starts holding it */
            const int e = idx[s];
            c->pf_idx[(size_t)l * P + s] = gi[e];
            c->pf_exp[(size_t)l * P + s] = e;
            gi[e] = -1; /* the placement still gives it GPU memory (pl.exp): the slot's */
        }
        c->pf_n[l] = n;
    }
    free(idx);
    /* asked for (tnd_ctx_params.moe_presched), and not replaced by the
     * fixed count (the paper's ablation of PreSched) */
    c->presched = c->presched_want && !(c->ablate & TND_ABLATE_FIXED2);
    c->pf_cap = -1;
    c->ps_behind = -1;
    c->ps_rhit = 0.9; /* until measured: the next layer's router names ~all of its experts */
    c->ps_rhit2 = 0.9; /* two layers ahead: as a layer ahead, until measured */
    for (int i = 0; i < TND_PF_EV; i++) {
        tnd_status st = tnd_backend_event_new(c->side[1].be, &c->pf_ev[i]);
        if (st) return st;
    }
    return TND_OK;
}

void tnd_pf_free(tnd_ctx *c) {
    for (int i = 0; i < TND_PF_EV; i++)
        if (c->pf_ev[i]) tnd_backend_event_free(c->side[1].be, c->pf_ev[i]);
    free(c->n_compact);
    free(c->pf_n);
    free(c->pf_idx);
    free(c->pf_exp);
    free(c->pf_used);
    free(c->pf_fill);
    free(c->pf_fresh);
    free(c->pf_read);
    free(c->pf_two);
    c->pf_read = NULL;
    c->pf_two = NULL;
    c->n_compact = NULL;
    c->pf_n = NULL;
    c->pf_idx = c->pf_exp = NULL;
    c->pf_used = c->pf_fill = NULL;
    c->pf_fresh = NULL;
    memset(c->pf_ev, 0, sizeof c->pf_ev);
    c->pf_max = 0;
}

/* The slot of split layer l that holds expert e, or -1. */
static int slot_of(const tnd_ctx *c, int l, int e) {
    const size_t b = (size_t)l * (size_t)c->pf_max;
    for (int s = 0; s < c->pf_n[l]; s++)
        if (c->pf_exp[b + s] == e) return s;
    return -1;
}

int32_t tnd_pf_lookup(tnd_ctx *c, int l, int e) {
    const int s = c->pf_max ? slot_of(c, l, e) : -1;
    if (s < 0) return -1;
    const size_t i = (size_t)l * (size_t)c->pf_max + (size_t)s;
    c->pf_used[i] = c->pf_read[i] = c->pf_round;
    if (c->pf_fill[i] == c->pf_round) c->pf_fresh[l] = 1; /* a copy of this round is read */
    return c->pf_idx[i];
}

tnd_status tnd_xfer_drain(tnd_ctx *c) {
    return c->xfer ? tnd_backend_stream_sync(c->side[1].be, c->xfer) : TND_OK;
}

tnd_status tnd_xfer_sync_ablated(tnd_ctx *c) {
    if (!(c->ablate & TND_ABLATE_SYNC)) return TND_OK;
    tnd_status st = tnd_xfer_drain(c);
    if (!st) c->pf_link_free = 0; /* drained */
    return st;
}

tnd_status tnd_pf_layer_begin(tnd_ctx *c, int l, int n_cpu) {
    const double now = tnd_time_s();
    if (c->pf_last > 0) { /* the layer since the last routing, less its experts' CPU time (and waits) */
        /* the waits for its on-demand loads are theirs, not the link's to use
         * (PreSched counts those copies itself) */
        const double od = TND_MIN(c->pf_wait_s, c->ps_od_s);
        const double over =
            TND_MAX(now - c->pf_last - c->pf_cpu_s - (c->pf_behind ? c->pf_wait_s : od), 0.0);
        c->pf_t_over = c->pf_t_over > 0 ? (1 - PF_ALPHA) * c->pf_t_over + PF_ALPHA * over : over;
    }
    c->pf_last = now;
    if (c->pf_cpu_n > 0 && c->pf_cpu_s > 0) {
        const double t = c->pf_cpu_s / c->pf_cpu_n;
        c->pf_t_exp = c->pf_t_exp > 0 ? (1 - PF_ALPHA) * c->pf_t_exp + PF_ALPHA * t : t;
        if (c->ps_cpu_e > 0) { /* PreSched's eq. 2 fit: T = c0 n + beta m, older layers fading */
            const double n = c->ps_cpu_e, m = c->pf_cpu_n, T = c->pf_cpu_s, x[5] = {n * n, n * m, m * m, n * T, m * T};
            for (int i = 0; i < 5; i++) c->ps_fit[i] = PS_DECAY * c->ps_fit[i] + x[i];
        }
    }
    c->ps_cpu_e = c->ps_next_e; /* this layer's, for the next sample */
    c->ps_od_s = c->ps_od_next;
    c->ps_next_e = 0;
    c->ps_od_next = 0;
    c->pf_cpu_s = c->pf_wait_s = 0;
    c->pf_cpu_n = n_cpu;
    tnd_status st = TND_OK;
    c->pf_behind = false;
    if (c->pf_fresh && c->pf_fresh[l]) { /* the GPU part reads experts perhaps still on their way */
        bool done;
        /* after on-demand loads, whether the copies a layer ahead were done
         * before them (tnd_pf_presched): the loads are waited for by design */
        if (c->ps_behind >= 0) c->pf_behind = c->ps_behind;
        else c->pf_behind = tnd_backend_event_done(c->side[1].be, c->pf_ev[l % TND_PF_EV], &done) || !done;
        st = tnd_backend_stream_wait(c->side[1].be, c->side[1].st, c->pf_ev[l % TND_PF_EV]);
    }
    c->ps_behind = -1;
    if (c->pf_fresh) c->pf_fresh[l] = 0;
    return st;
}

/* Seconds the link takes for one expert of layer l (gate, up and down), or
 * 0 when the profile does not say. */
static double copy_time(const tnd_ctx *c, int l) {
    const tnd_layer *L = &c->m->layers[l];
    const tnd_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    double bytes = 0;
    for (int j = 0; j < 3; j++) bytes += (double)w[j]->t->nbytes / (double)w[j]->n_expert;
    double bw = c->perf ? c->perf->b_pcie : 0;
    if (bw > 0 && c->ad[0].pcie > 0) bw /= c->ad[0].pcie; /* the recorder's live slowdown */
    return bw > 0 ? bytes / bw : 0;
}

/* Copies expert e of split layer l from the host store into its compacted
 * tensors' entry at (gate, up and down, on the transfer stream; the three
 * on streams of their own were slower: docs/DECISIONS.md, "AsyncIO's
 * pieces: not kept"). */
static tnd_status copy_expert(tnd_ctx *c, int l, int e, int32_t at) {
    const tnd_layer *L = &c->m->layers[l];
    const tnd_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int j = 0; j < 3; j++) {
        const size_t per = w[j]->t->nbytes / (size_t)w[j]->n_expert;
        tnd_status st = tnd_backend_copy_h2d(c->side[1].be, (char *)c->w[1][w[j]->id] + (size_t)at * per,
                                             (const char *)c->w[0][w[j]->id] + (size_t)e * per, per, c->xfer);
        if (st) return st;
    }
    return TND_OK;
}

/* Whether slot s of split layer l may take another expert: not wanted this
 * round; or, once the layer's routing is known (routed), not read by it
 * (an expert copied or kept there a layer ahead that the routing did not
 * choose is read by nothing else this round). */
static bool slot_free(const tnd_ctx *c, size_t s, bool routed) {
    return routed ? c->pf_read[s] != c->pf_round : c->pf_used[s] != c->pf_round;
}

/* The least recently used free slot of split layer l (slot_free), or -1. */
static int free_slot(const tnd_ctx *c, int l, bool routed) {
    const size_t b = (size_t)l * (size_t)c->pf_max;
    int v = -1;
    for (int s = 0; s < c->pf_n[l]; s++)
        if (slot_free(c, b + s, routed) && (v < 0 || c->pf_used[b + s] < c->pf_used[b + v])) v = s;
    return v;
}

/* Queues expert e's copy into slot v of split layer l, which holds it from now. */
static tnd_status fill_slot(tnd_ctx *c, int l, int v, int e, bool two) {
    const size_t b = (size_t)l * (size_t)c->pf_max;
    c->pf_exp[b + v] = -1; /* no reader may take it for what it held */
    c->pf_queued = true;   /* the round's end drains the copies, those of a failed one too */
    tnd_status st = copy_expert(c, l, e, c->pf_idx[b + v]);
    if (st) return st;
    c->pf_exp[b + v] = e;
    c->pf_used[b + v] = c->pf_fill[b + v] = c->pf_round;
    c->pf_two[b + v] = two;
    return TND_OK;
}

tnd_status tnd_pf_issue(tnd_ctx *c, int l, const int32_t *pred, int64_t n, int cap, bool two) {
    if (!c->pf_max || l < 0 || l >= c->pl.n_layer || !c->pf_n[l]) return TND_OK;
    const int E = c->pl.n_expert, P = c->pf_max;
    const size_t b = (size_t)l * P;
    const int32_t *gi = c->exp_gpu + (size_t)l * E;
    /* the candidates: predicted, not resident, in no slot; by how many
     * tokens chose them, then by the order of the prediction */
    int cand[TND_PREDICT_MAX_TOK * 8], cnt[TND_PREDICT_MAX_TOK * 8], nc = 0;
    for (int64_t i = 0; i < n; i++) {
        const int e = pred[i];
        if (e < 0 || e >= E || gi[e] >= 0) continue;
        const int s = slot_of(c, l, e);
        if (s >= 0) { /* there already: keep it */
            c->pf_used[b + s] = c->pf_round;
            continue;
        }
        int j = 0;
        while (j < nc && cand[j] != e) j++;
        if (j == nc) {
            if (nc == (int)(sizeof cand / sizeof *cand)) continue;
            cand[nc] = e, cnt[nc++] = 0;
        }
        cnt[j]++;
    }
    for (int i = 1; i < nc; i++) { /* stable: most chosen first */
        int e = cand[i], k = cnt[i], j = i;
        while (j > 0 && cnt[j - 1] < k) cand[j] = cand[j - 1], cnt[j] = cnt[j - 1], j--;
        cand[j] = e, cnt[j] = k;
    }
    int free_slots = 0;
    for (int s = 0; s < c->pf_n[l]; s++) free_slots += c->pf_used[b + s] != c->pf_round;
    int k = TND_MIN(nc, free_slots);
    /* the balance: the link keeps up while k copies take no longer than a
     * layer without waits, its overhead H plus the n - k experts left to
     * the CPU: k t_copy <= H + (n - k) t_cpu (all of them until measured) */
    const double tc = copy_time(c, l), te = c->pf_t_exp, H = c->pf_t_over;
    if (c->ablate & TND_ABLATE_FIXED2) {
        k = TND_MIN(k, 2); /* the ablation: a fixed count, what HybriMoE-like prefetch does */
    } else if (cap >= 0) {
        k = TND_MIN(k, cap); /* PreSched chose at the routing (tnd_pf_presched) */
    } else if (k > 0 && tc > 0 && te > 0 && H > 0) {
        /* rounded down: taking the fractions as they add up (error
         * diffusion) copied more and ran slower (docs/DECISIONS.md) */
        const double x = (H + nc * te) / (tc + te);
        k = TND_MIN(k, (int)x);
        c->pf_sum[0] += nc, c->pf_sum[1] += x, c->pf_sum[2] += k, c->pf_sum[3] += tc, c->pf_sum[4] += 1;
    }
    int done = 0;
    for (; done < k; done++) {
        const int v = free_slot(c, l, false);
        if (v < 0) break;
        tnd_status st = fill_slot(c, l, v, cand[done], two);
        if (st) return st;
        c->n_pf_copies++;
    }
    if (done <= 0) return TND_OK;
    c->pf_link_free = TND_MAX(c->pf_link_free, tnd_time_s()) + done * tc;
    tnd_status st = tnd_backend_event_record(c->side[1].be, c->pf_ev[l % TND_PF_EV], c->xfer);
    return st ? st : tnd_xfer_sync_ablated(c);
}

/* ---- PreSched ------------------------------------------------------------------ */

typedef struct ps_exp {
    int e, m; /* an expert, its routings this round */
} ps_exp;

/* The experts counted in cnt[E], ascending by routings, then by id: the
 * order of PreSched's lists. */
static int ps_list(const int *cnt, int E, ps_exp *v) {
    int n = 0;
    for (int e = 0; e < E; e++) {
        if (!cnt[e]) continue;
        int j = n++;
        while (j > 0 && v[j - 1].m > cnt[e]) v[j] = v[j - 1], j--;
        v[j] = (ps_exp){e, cnt[e]};
    }
    return n;
}

/* Eq. 2's beta and c0 from the fit's sums: least squares of T = c0 n +
 * beta m over the split layers' CPU parts, both terms kept non-negative
 * (where the unconstrained fit makes one negative, the best fit without
 * it). Where every sample has as many routings as experts (decode: one
 * token each) the two cannot be told apart: beta 0, c0 the time an
 * expert. false: nothing measured yet. */
static bool ps_costs(const tnd_ctx *c, double *beta, double *c0) {
    const double *f = c->ps_fit, det = f[0] * f[2] - f[1] * f[1];
    *beta = 0;
    *c0 = 0;
    if (!(f[0] > 0)) return false;
    if (!(det > 1e-6 * f[0] * f[2])) {
        *c0 = f[3] / f[0];
    } else {
        *c0 = (f[3] * f[2] - f[1] * f[4]) / det;
        *beta = (f[0] * f[4] - f[1] * f[3]) / det;
        if (!(*c0 >= 0)) *c0 = 0, *beta = f[4] / f[2];
        else if (!(*beta >= 0)) *beta = 0, *c0 = f[3] / f[0];
    }
    return *c0 > 0 || *beta > 0;
}

/* Layer l's experts that pred ([n]) names, neither resident nor in a slot,
 * as PreSched's list (ps_list) into v; 0 where l has no slots. */
static int ps_pred_list(const tnd_ctx *c, int l, const int32_t *pred, int64_t n, ps_exp *v) {
    const int E = c->pl.n_expert;
    if (!pred || l >= c->pl.n_layer || !c->pf_n[l]) return 0;
    const int32_t *g = c->exp_gpu + (size_t)l * E;
    int cnt[TND_PRESCHED_MAX] = {0};
    for (int64_t i = 0; i < n; i++) {
        const int e = pred[i];
        if (e >= 0 && e < E && g[e] < 0 && slot_of(c, l, e) < 0) cnt[e]++;
    }
    return ps_list(cnt, E, v);
}

tnd_status tnd_pf_presched(tnd_ctx *c, int l, const int32_t *ids, int64_t n, int32_t *ric, int32_t *rig, int *n_cpu,
                           const int32_t *pred, int64_t n_pred, const int32_t *pred2, int64_t n_pred2) {
    c->pf_cap = -1;
    c->pf_cap2 = 0;
    const int E = c->pl.n_expert, P = c->pf_max;
    if (!c->presched || !P || !c->pf_n[l] || E > TND_PRESCHED_MAX) return TND_OK;
    const size_t b = (size_t)l * P;
    /* R_hit: of this layer's slots filled this round a layer ahead, the
     * share its routing read; the same of those filled two layers ahead */
    int tot[2] = {0, 0}, hit[2] = {0, 0};
    for (int s = 0; s < c->pf_n[l]; s++)
        if (c->pf_fill[b + s] == c->pf_round) {
            const int w = c->pf_two[b + s];
            tot[w]++, hit[w] += c->pf_read[b + s] == c->pf_round;
        }
    double *rh[2] = {&c->ps_rhit, &c->ps_rhit2};
    for (int w = 0; w < 2; w++)
        if (tot[w]) *rh[w] = (1 - PF_ALPHA) * *rh[w] + PF_ALPHA * (double)hit[w] / tot[w];
    int cnt[TND_PRESCHED_MAX] = {0};
    for (int64_t i = 0; i < n; i++)
        if (rig[i] < 0) cnt[ids[i]]++;
    ps_exp cur[TND_PRESCHED_MAX], nxt[TND_PRESCHED_MAX], nxt2[TND_PRESCHED_MAX];
    const int nc = ps_list(cnt, E, cur);
    c->ps_next_e = nc;
    /* the next layer's predicted, and the one after's (Q4) */
    const int nn = ps_pred_list(c, l + 1, pred, n_pred, nxt), nn2 = ps_pred_list(c, l + 2, pred2, n_pred2, nxt2);
    int room = 0; /* slots on-demand loads may take */
    for (int s = 0; s < c->pf_n[l]; s++) room += slot_free(c, b + (size_t)s, true);
    tnd_presched_in in = {.n_cur = nc, .n_next = nn, .max_load = room, .t_io = copy_time(c, l),
                          .t_attn = c->pf_t_over, .r_hit = c->ps_rhit, .r_hit2 = c->ps_rhit2};
    const double now = tnd_time_s();
    in.alpha = TND_MAX(c->pf_link_free - now, 0.0);
    if (!ps_costs(c, &in.beta, &in.c0) || !(in.t_io > 0)) return TND_OK; /* the balance decides */
    int mc[TND_PRESCHED_MAX], mn[TND_PRESCHED_MAX], mn2[TND_PRESCHED_MAX];
    for (int i = 0; i < nc; i++) mc[i] = cur[i].m;
    for (int i = 0; i < nn; i++) mn[i] = nxt[i].m;
    for (int i = 0; i < nn2; i++) mn2[i] = nxt2[i].m;
    in.m_cur = mc, in.m_next = mn, in.m_next2 = mn2, in.n_next2 = nn2;
    tnd_presched_out out;
    tnd_presched(&in, &out);
    c->pf_cap = out.n_prefetch;
    c->pf_cap2 = out.n_prefetch2;
    /* on demand: the most loaded, into free slots of this layer */
    int loaded = 0;
    bool was_done = true;
    if (out.n_load > 0 && c->pf_fresh[l]) { /* copies a layer ahead read here: were they done already */
        bool d;
        was_done = !tnd_backend_event_done(c->side[1].be, c->pf_ev[l % TND_PF_EV], &d) && d;
    }
    for (; loaded < out.n_load; loaded++) {
        const int v = free_slot(c, l, true);
        if (v < 0) break; /* not reached: n_load <= room */
        const ps_exp x = cur[nc - 1 - loaded];
        tnd_status st = fill_slot(c, l, v, x.e, false);
        if (st) return st;
        c->pf_read[b + v] = c->pf_round;
        for (int64_t i = 0; i < n; i++)
            if (ids[i] == x.e && rig[i] < 0) rig[i] = c->pf_idx[b + v], ric[i] = -1, (*n_cpu)--;
        c->n_od_copies++;
    }
    c->ps_next_e = nc - loaded;
    if (!loaded) return TND_OK;
    c->pf_link_free = TND_MAX(c->pf_link_free, now) + loaded * in.t_io;
    c->ps_od_next = loaded * in.t_io;
    c->ps_behind = c->pf_fresh[l] ? !was_done : 0;
    c->pf_fresh[l] = 1; /* the GPU part waits for the event (tnd_pf_layer_begin) */
    tnd_status st = tnd_backend_event_record(c->side[1].be, c->pf_ev[l % TND_PF_EV], c->xfer);
    return st ? st : tnd_xfer_sync_ablated(c);
}
