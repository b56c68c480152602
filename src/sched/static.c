/* Static placement from the perf DB (ATSInfer §4.3.2, Algorithm 1;
 * docs/ARCHITECTURE.md: Static placement): the items of a decode round in execution order — each weight slice,
 * and each layer's attention with its KV cache as one more item whose bytes
 * are the cache — go to the knapsack DP with switch costs (sched/place.c),
 * under the MoE rule for expert tensors. The times are those of a round mix
 * (a decode step and a prompt token's share of a prefill chunk): a
 * decode-only objective leaves the KV caches on the CPU, whose prefill
 * attention then dominates long prompts. */
#include <stdlib.h>
#include <string.h>

#include "sched/perf.h"
#include "sched/place.h"
#include "util.h"

/* The round mix the placement is optimized for: a token's share of a
 * decode round of nseq sequences (one token each, at half the context)
 * plus one prompt token's share of a prefill chunk of nb tokens (requests
 * as long in as out). A CPU slice's prefill share is its CPU time, or with
 * promotions the copy and the GPU time when that is less. With many
 * sequences a decode round reads each weight once for nseq tokens, so the
 * weights' time per token falls and attention's (per sequence) does not. */
typedef struct mix {
    int depth, nb, nseq;
    bool promote;
} mix;

static double slice_cost(const tnd_model *m, const tnd_perf *pf, const mix *x, int sid, int side) {
    int nt = sid == m->output.id ? 1 : x->nb;
    double dec = tnd_perf_slice_time(pf, sid, side, x->nseq) / x->nseq, pp = tnd_perf_slice_time(pf, sid, side, nt);
    if (side == TND_SIDE_CPU && x->promote && sid != m->output.id) {
        double via_gpu = pf->lat + (double)m->slices[sid]->t->nbytes / pf->b_pcie + tnd_perf_slice_time(pf, sid, 1, nt);
        if (via_gpu < pp) pp = via_gpu;
    }
    return dec + pp / x->nb;
}

/* Attention and the other weightless ops of one layer, same mix: a decode
 * step at the mix's depth, and a token's share of a chunk at the start. */
static double attn_cost(const tnd_perf *pf, const mix *x, int side) {
    return tnd_perf_attn_time(pf, side, 1, x->depth) + tnd_perf_other_time(pf, side, 1) +
           (tnd_perf_attn_time(pf, side, x->nb, 0) + tnd_perf_other_time(pf, side, x->nb)) / x->nb;
}

/* Item i stands for slice ref[i] >= 0, the attention of layer -ref[i]-1,
 * or (ref[i] <= -n_layer-1) expert (l, e) with l*E + e = -ref[i]-n_layer-1. */
static int collect(const tnd_model *m, const tnd_perf *pf, const mix *mx, uint64_t kv_layer, tnd_place_item *it,
                   int *ref) {
    const tnd_hparams *hp = &m->hp;
    double act = sizeof(float) * (double)hp->n_embd;
    double sw = pf->lat + act / pf->b_pcie;
    int n = 0, E = hp->n_expert;
    for (int l = 0; l < hp->n_layer; l++) {
        const tnd_layer *L = &m->layers[l];
        const tnd_weight *seq[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
        bool experts = E > 1 && L->gate_exps.id >= 0 && L->up_exps.id >= 0 && L->down_exps.id >= 0;
        for (size_t j = 0; j < sizeof seq / sizeof *seq; j++) {
            const tnd_weight *w = seq[j];
            /* a switch moves a row per token: a token's share of a decode round's is
             * lat/nseq + a row, of a chunk's lat/nb + a row */
            tnd_place_item x = {.c_switch = pf->lat / mx->nseq + act / pf->b_pcie + pf->lat / mx->nb + act / pf->b_pcie,
                                .weight = 1, .fixed = -1};
            if (!w) {
                x.bytes = kv_layer;
                x.t_cpu = attn_cost(pf, mx, TND_SIDE_CPU);
                x.t_gpu = attn_cost(pf, mx, TND_SIDE_GPU);
                ref[n] = -l - 1;
            } else if (experts && w == &L->gate_exps) {
                const tnd_weight *ex[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
                double tc = 0, tg = 0;
                uint64_t bytes = 0;
                for (int k = 0; k < 3; k++) {
                    tc += slice_cost(m, pf, mx, ex[k]->id, TND_SIDE_CPU) / E;
                    tg += slice_cost(m, pf, mx, ex[k]->id, TND_SIDE_GPU) / E;
                    bytes += ex[k]->t->nbytes / (uint64_t)E;
                }
                /* uses per token relative to uniform (n_used of E) */
                const double *pop = pf->pop && pf->n_expert == E ? pf->pop + (size_t)l * E : NULL;
                double uni = (double)hp->n_expert_used / E;
                for (int e = 0; e < E; e++) {
                    tnd_place_item y = x;
                    y.bytes = bytes;
                    y.t_cpu = tc;
                    y.t_gpu = tg;
                    y.weight = pop ? pop[e] / uni : 1.0;
                    y.expert = true;
                    y.switch_free = e > 0; /* a layer's experts run side by side */
                    ref[n] = -hp->n_layer - 1 - (l * E + e);
                    it[n++] = y;
                }
                continue;
            } else if (experts && (w == &L->up_exps || w == &L->down_exps)) {
                continue; /* in the experts' items */
            } else {
                if (!w->t || w->id < 0) continue;
                x.bytes = w->t->nbytes;
                x.t_cpu = slice_cost(m, pf, mx, w->id, TND_SIDE_CPU);
                x.t_gpu = slice_cost(m, pf, mx, w->id, TND_SIDE_GPU);
                ref[n] = w->id;
            }
            it[n++] = x;
        }
    }
    const tnd_weight *o = &m->output;
    if (o->id >= 0) {
        it[n] = (tnd_place_item){.bytes = o->t->nbytes, .t_cpu = slice_cost(m, pf, mx, o->id, TND_SIDE_CPU),
                                 .t_gpu = slice_cost(m, pf, mx, o->id, TND_SIDE_GPU), .c_switch = sw,
                                 .weight = 1, .fixed = -1};
        /* a tied head is also the embedding table, which stays on the CPU */
        if (m->hp_tied) it[n].fixed = TND_B_CPU;
        ref[n++] = o->id;
    }
    return n;
}

tnd_status tnd_static_place(const tnd_model *m, const tnd_perf *pf, uint64_t weight_budget, uint64_t kv_layer,
                            int n_ctx, int n_batch, int n_seq, bool promote, tnd_placement *p) {
    mix mx = {.depth = n_ctx / 2, .nb = n_batch > 0 ? n_batch : 1, .nseq = n_seq > 0 ? n_seq : 1, .promote = promote};
    int L = m->hp.n_layer, E = m->hp.n_expert > 1 ? m->hp.n_expert : 0;
    int cap = m->n_slices + L + 1 + L * E;
    tnd_place_item *it = tnd_calloc((size_t)cap, sizeof *it);
    int *ref = tnd_calloc((size_t)cap, sizeof *ref);
    uint8_t *out = tnd_calloc((size_t)cap, 1);
    if (!it || !ref || !out) {
        free(it), free(ref), free(out);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    int n = collect(m, pf, &mx, kv_layer, it, ref);
    double c_last = pf->lat + sizeof(float) * (double)m->hp.n_vocab / pf->b_pcie;
    tnd_place_result res;
    /* Sizes round up to whole units: 1 MiB as in the paper for big budgets,
     * finer for small models (whose tensors are smaller than 1 MiB); the
     * DP coarsens by itself if the table would be too large. */
    uint64_t granule = weight_budget / 8192;
    granule = granule < 4096 ? 4096 : granule > (1u << 20) ? (1u << 20) : granule;
    tnd_status st = tnd_place_moe(it, n, weight_budget, granule, TND_B_CPU, TND_B_CPU, c_last, out, &res);
    if (!st) {
        memset(p->where, 0, (size_t)m->n_slices);
        memset(p->kv, 0, (size_t)L);
        memset(p->split, 0, (size_t)L);
        for (int i = 0; i < n; i++) {
            if (ref[i] >= 0) {
                p->where[ref[i]] = out[i];
            } else if (ref[i] >= -L) {
                p->kv[-ref[i] - 1] = out[i];
            } else {
                int le = -ref[i] - L - 1;
                p->split[le / E] = 1;
                p->exp[le] = out[i];
            }
        }
        tnd_placement_normalize(m, p); /* layers with all experts on one side: whole tensors */
        int gl = 0, ge = 0, se = 0;
        uint64_t wb = 0;
        for (int l = 0; l < L; l++) gl += p->kv[l];
        for (int i = 0; i < n; i++)
            if (ref[i] >= 0 || ref[i] < -L) {
                if (out[i]) wb += it[i].bytes;
                if (ref[i] < -L) se++, ge += out[i];
            }
        if (se)
            snprintf(p->desc, sizeof p->desc,
                     "static: %.0f MiB (%d/%d experts), %d KV caches on the GPU, %d switches",
                     (double)wb / 1048576.0, ge, se, gl, res.n_switches);
        else
            snprintf(p->desc, sizeof p->desc, "static: %.0f MiB of weights and %d KV caches on the GPU, %d switches",
                     (double)wb / 1048576.0, gl, res.n_switches);
    }
    free(it), free(ref), free(out);
    return st;
}
