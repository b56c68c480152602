/* Dynamic transfer, Algorithm 2 (transfer.h; docs/ARCHITECTURE.md). */
#include "sched/transfer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define NB 256 /* credit buckets over [0, cap] */

/* One step of the model: item i on side s (promoted when prom) from time
 * *T with credit *a, the previous item on *side. */
static void step(const tnd_xfer_item *x, double cap, bool prom, int *side, double *T, double *a) {
    int s = prom ? TND_SIDE_GPU : x->side;
    if (s != *side) {
        *T += x->c_switch;
        *a = fmin(cap, *a + x->c_switch);
        *side = s;
    }
    if (prom) {
        double av = x->no_prefetch ? 0 : *a;
        double wait = fmax(0, x->w - av);
        *T += wait;
        *a = fmax(0, av - x->w);
    }
    double t = s == TND_SIDE_GPU ? x->t_gpu : x->t_cpu;
    *T += t;
    *a = fmin(cap, *a + t);
}

static bool bad_item(const tnd_xfer_item *x) {
    const double v[] = {x->t_cpu, x->t_gpu, x->w, x->c_switch};
    for (int k = 0; k < 4; k++)
        if (!isfinite(v[k]) || v[k] < 0) return true;
    return (x->side != TND_SIDE_CPU && x->side != TND_SIDE_GPU) || (x->candidate && x->side != TND_SIDE_CPU);
}

static tnd_status check_args(const tnd_xfer_item *it, int n, double cap, int first, int last, double c_last) {
    if (n < 0 || (n && !it) || !isfinite(cap) || cap < 0 || !isfinite(c_last) || c_last < 0 ||
        (first != TND_SIDE_CPU && first != TND_SIDE_GPU) || last > TND_SIDE_GPU)
        return tnd_fail(TND_ERR_ARG, "dynamic transfer: bad arguments");
    for (int i = 0; i < n; i++)
        if (bad_item(&it[i])) return tnd_fail(TND_ERR_ARG, "dynamic transfer: bad item %d", i);
    return TND_OK;
}

double tnd_xfer_eval(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                     const uint8_t *prom) {
    int side = first_side;
    double T = 0, a = 0;
    for (int i = 0; i < n; i++) step(&it[i], cap, prom && prom[i] && it[i].candidate, &side, &T, &a);
    if (last_side >= 0 && side != last_side) T += c_last;
    return T;
}

typedef struct cell {
    double T, a;
    int16_t from;  /* previous cell: side * (NB + 1) + bucket, -1 at the start */
    uint8_t prom;
} cell;

static int bucket(double a, double cap) {
    if (cap <= 0) return 0;
    int b = (int)(a / cap * NB);
    return b < 0 ? 0 : b > NB ? NB : b;
}

tnd_status tnd_xfer_dp(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                       uint8_t *prom, double *t) {
    tnd_status st = check_args(it, n, cap, first_side, last_side, c_last);
    if (st) return st;
    const int W = 2 * (NB + 1); /* cells per item */
    cell *dp = malloc(sizeof *dp * (size_t)(n + 1) * W);
    if (!dp) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < (size_t)(n + 1) * W; k++) dp[k] = (cell){INFINITY, 0, -1, 0};
    dp[first_side * (NB + 1)] = (cell){0, 0, -1, 0};
    for (int i = 0; i < n; i++) {
        const cell *cur = &dp[(size_t)i * W];
        cell *nxt = &dp[(size_t)(i + 1) * W];
        for (int k = 0; k < W; k++) {
            if (!isfinite(cur[k].T)) continue;
            for (int p = 0; p <= (int)it[i].candidate; p++) {
                int side = k / (NB + 1);
                double T = cur[k].T, a = cur[k].a;
                step(&it[i], cap, p, &side, &T, &a);
                cell *d = &nxt[side * (NB + 1) + bucket(a, cap)];
                if (T < d->T || (T == d->T && a > d->a)) *d = (cell){T, a, (int16_t)k, (uint8_t)p};
            }
        }
    }
    const cell *end = &dp[(size_t)n * W];
    int best = -1;
    double bt = INFINITY;
    for (int k = 0; k < W; k++) {
        if (!isfinite(end[k].T)) continue;
        double T = end[k].T + (last_side >= 0 && k / (NB + 1) != last_side ? c_last : 0);
        if (T < bt) bt = T, best = k;
    }
    for (int i = n; i > 0; i--) {
        const cell *c = &dp[(size_t)i * W + best];
        prom[i - 1] = c->prom;
        best = c->from;
    }
    free(dp);
    if (t) *t = bt;
    return TND_OK;
}

tnd_status tnd_xfer_brute(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                          uint8_t *prom, double *t) {
    tnd_status st = check_args(it, n, cap, first_side, last_side, c_last);
    if (st) return st;
    int k = 0, *cand = malloc(sizeof *cand * (size_t)(n + 1));
    uint8_t *cur = calloc((size_t)n + 1, 1);
    if (!cand || !cur) {
        free(cand);
        free(cur);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        if (it[i].candidate) cand[k++] = i;
    if (k > 20) {
        free(cand);
        free(cur);
        return tnd_fail(TND_ERR_ARG, "dynamic transfer: %d candidates are too many to search", k);
    }
    double bt = INFINITY;
    for (uint32_t mask = 0; mask < (1u << k); mask++) {
        for (int j = 0; j < k; j++) cur[cand[j]] = (uint8_t)(mask >> j & 1);
        double T = tnd_xfer_eval(it, n, cap, first_side, last_side, c_last, cur);
        if (T < bt) {
            bt = T;
            memcpy(prom, cur, (size_t)n);
        }
    }
    free(cand);
    free(cur);
    if (t) *t = bt;
    return TND_OK;
}

int tnd_xfer_items(const tnd_model *m, const tnd_perf *pf, const tnd_xfer_scale *sc, const tnd_placement *p, int nt,
                   int pos0, tnd_xfer_item *it, int cap_items) {
    const tnd_hparams *hp = &m->hp;
    const double fc = sc && sc->cpu > 0 ? sc->cpu : 1, fp = sc && sc->pcie > 0 ? sc->pcie : 1;
    const double act = sizeof(float) * (double)hp->n_embd * nt;
    const double sw = pf->lat + pf->sw_host + act / pf->b_pcie, launch = fmax(pf->launch, 0);
    const bool ahead = tnd_perf_experts_ahead(m, nt);
    int n = 0;
#define PUT(...)                                                            \
    do {                                                                    \
        if (it && n < cap_items) it[n] = (tnd_xfer_item){__VA_ARGS__};     \
        n++;                                                                \
    } while (0)
    for (int l = 0; l < hp->n_layer; l++) {
        const tnd_layer *L = &m->layers[l];
        const tnd_weight *seq[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t j = 0; j < sizeof seq / sizeof *seq; j++) {
            const tnd_weight *w = seq[j];
            if (!w) { /* attention and the layer's weightless ops, where its KV cache is */
                int s = p->kv[l];
                double t = tnd_perf_attn_time(pf, s, nt, pos0) + tnd_perf_other_time(pf, s, nt);
                PUT(.t_cpu = fc * t, .t_gpu = fmax(t, (OTHER_OPS + 1) * launch), .c_switch = sw + launch * s,
                    .side = (int8_t)s, .sid = -1);
                continue;
            }
            if (!w->t || w->id < 0) continue;
            if (tnd_slice_split(m, p, w->id, NULL)) {
                /* the layer's two halves run side by side (tnd_perf_predict); one CPU item here */
                if (w != &L->gate_exps) continue;
                if (ahead && p->promote[w->id]) {
                    /* its CPU experts' copy can go ahead: a candidate like a
                     * dense slice, so the DP weighs the link against the CPU
                     * across layers (its three tensors decide together) */
                    double ts, tg, bytes;
                    tnd_perf_split_sides(m, pf, p, l, nt, &ts, &tg, &bytes);
                    PUT(.t_cpu = fc * ts, .t_gpu = fmax(tg, launch), .w = fp * (3 * pf->lat + bytes / pf->b_pcie),
                        .c_switch = sw + launch, .side = TND_SIDE_CPU, .candidate = true, .sid = w->id);
                    continue;
                }
                double t = fc * tnd_perf_split_time(m, pf, p, l, nt);
                PUT(.t_cpu = t, .t_gpu = t, .c_switch = sw, .side = TND_SIDE_CPU, .sid = -1);
                continue;
            }
            int s = p->where[w->id];
            double tg = fmax(tnd_perf_gpu_time(m, pf, w->id, nt), launch);
            bool cand = s == TND_SIDE_CPU && p->promote[w->id] && !tnd_slice_small(w);
            PUT(.t_cpu = fc * tnd_perf_slice_time(pf, w->id, TND_SIDE_CPU, nt), .t_gpu = tg,
                .w = cand ? fp * (pf->lat + tnd_perf_promoted_bytes(m, pf, w->id, nt) / pf->b_pcie) : 0,
                .c_switch = sw + launch, .side = (int8_t)s, .candidate = cand,
                .no_prefetch = w->n_expert > 1 && w == &L->gate_exps && !ahead, .sid = w->id);
        }
    }
    if (m->output.id >= 0) {
        int s = p->where[m->output.id];
        double t = tnd_perf_slice_time(pf, m->output.id, s, nt);
        PUT(.t_cpu = fc * t, .t_gpu = fmax(t, launch), .c_switch = sw + launch, .side = (int8_t)s, .sid = m->output.id);
    }
#undef PUT
    return n;
}

tnd_status tnd_xfer_choose(const tnd_model *m, const tnd_perf *pf, const tnd_xfer_scale *sc, const tnd_placement *p,
                           int n_slots, int nt, int pos0, uint8_t *round_prom, double *t) {
    memset(round_prom, 0, (size_t)m->n_slices);
    if (t) *t = 0;
    uint64_t slot_bytes = 0;
    for (int i = 0; i < m->n_slices; i++)
        if (p->promote[i] && m->slices[i]->t->nbytes > slot_bytes) slot_bytes = m->slices[i]->t->nbytes;
    if (n_slots <= 0 || !slot_bytes || !(pf->b_pcie > 0)) return TND_OK;
    int n = tnd_xfer_items(m, pf, sc, p, nt, pos0, NULL, 0);
    tnd_xfer_item *it = malloc(sizeof *it * (size_t)(n + 1));
    uint8_t *prom = malloc((size_t)n + 1);
    if (!it || !prom) {
        free(it);
        free(prom);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    tnd_xfer_items(m, pf, sc, p, nt, pos0, it, n);
    /* the stream may run ahead by what the ring holds (exec.c: n_slots
     * times the largest candidate, 256-byte aligned), less one slot: the
     * ring places copies whole, so up to a slot's bytes go unused at its end */
    double cap = (n_slots - 1) * (double)((slot_bytes + 255) & ~(uint64_t)255) / pf->b_pcie;
    if (sc && sc->pcie > 0) cap *= sc->pcie;
    const double back = pf->lat + sizeof(float) * (double)m->hp.n_vocab / pf->b_pcie; /* the logits come home */
    tnd_status st = tnd_xfer_dp(it, n, cap, TND_SIDE_CPU, TND_SIDE_CPU, back, prom, t);
    for (int i = 0; !st && i < n; i++)
        if (prom[i] && it[i].sid >= 0) round_prom[it[i].sid] = 1;
    free(it);
    free(prom);
    if (st) return st;
    /* a split layer's three expert tensors: one decision, the DP's where
     * the copy goes ahead, else by its own rule (the copy waits for the
     * routing, all of it exposed) */
    const bool ahead = tnd_perf_experts_ahead(m, nt);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const tnd_layer *L = &m->layers[l];
        if (!p->split || !p->split[l] || L->gate_exps.id < 0 || !p->promote[L->gate_exps.id]) continue;
        uint8_t v = ahead ? round_prom[L->gate_exps.id] : tnd_perf_split_pays_to_promote(m, pf, p, l, nt);
        round_prom[L->gate_exps.id] = round_prom[L->up_exps.id] = round_prom[L->down_exps.id] = v;
    }
    return TND_OK;
}
