/* Static placement from the perf DB (ATSInfer §4.3.2, Algorithm 1; DESIGN.md
 * §8): the items of a decode round in execution order — each weight slice,
 * and each layer's attention with its KV cache as one more item whose bytes
 * are the cache — go to the knapsack DP with switch costs (sched/place.c),
 * under the MoE rule for expert tensors. */
#include <stdlib.h>
#include <string.h>

#include "sched/perf.h"
#include "sched/place.h"
#include "util.h"

/* Item i stands for slice ref[i] >= 0, or the attention of layer -ref[i]-1. */
static int collect(const tnd_model *m, const tnd_perf *pf, uint64_t kv_layer, tnd_place_item *it, int *ref) {
    const tnd_hparams *hp = &m->hp;
    double act = sizeof(float) * (double)hp->n_embd;
    double sw = pf->lat + act / pf->b_pcie;
    int n = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const tnd_layer *L = &m->layers[l];
        const tnd_weight *seq[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
        bool first_exp = true;
        for (size_t j = 0; j < sizeof seq / sizeof *seq; j++) {
            const tnd_weight *w = seq[j];
            tnd_place_item x = {.c_switch = sw, .weight = 1, .fixed = -1};
            if (!w) {
                x.bytes = kv_layer;
                x.t_cpu = pf->attn_cpu[0] + pf->other_cpu[0];
                x.t_gpu = pf->attn_gpu[0] + pf->other_gpu[0];
                ref[n] = -l - 1;
            } else {
                if (!w->t || w->id < 0) continue;
                x.bytes = w->t->nbytes;
                x.t_cpu = tnd_perf_slice_time(pf, w->id, TND_SIDE_CPU, 1);
                x.t_gpu = tnd_perf_slice_time(pf, w->id, TND_SIDE_GPU, 1);
                if (w->n_expert > 1) {
                    x.expert = true;
                    x.switch_free = !first_exp; /* gate, up and down of the experts run back to back */
                    first_exp = false;
                }
                ref[n] = w->id;
            }
            it[n++] = x;
        }
    }
    const tnd_weight *o = &m->output;
    if (o->id >= 0) {
        it[n] = (tnd_place_item){.bytes = o->t->nbytes, .t_cpu = tnd_perf_slice_time(pf, o->id, TND_SIDE_CPU, 1),
                                 .t_gpu = tnd_perf_slice_time(pf, o->id, TND_SIDE_GPU, 1), .c_switch = sw,
                                 .weight = 1, .fixed = -1};
        /* a tied head is also the embedding table, which stays on the CPU */
        if (m->hp_tied) it[n].fixed = TND_B_CPU;
        ref[n++] = o->id;
    }
    return n;
}

tnd_status tnd_static_place(const tnd_model *m, const tnd_perf *pf, uint64_t weight_budget, uint64_t kv_layer,
                            tnd_placement *p) {
    int cap = m->n_slices + m->hp.n_layer + 1;
    tnd_place_item *it = tnd_calloc((size_t)cap, sizeof *it);
    int *ref = tnd_calloc((size_t)cap, sizeof *ref);
    uint8_t *out = tnd_calloc((size_t)cap, 1);
    if (!it || !ref || !out) {
        free(it), free(ref), free(out);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    int n = collect(m, pf, kv_layer, it, ref);
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
        memset(p->kv, 0, (size_t)m->hp.n_layer);
        for (int i = 0; i < n; i++) {
            if (ref[i] >= 0) p->where[ref[i]] = out[i];
            else p->kv[-ref[i] - 1] = out[i];
        }
        int gl = 0;
        uint64_t wb = 0;
        for (int l = 0; l < m->hp.n_layer; l++) gl += p->kv[l];
        for (int i = 0; i < n; i++)
            if (ref[i] >= 0 && out[i]) wb += it[i].bytes;
        snprintf(p->desc, sizeof p->desc, "static: %.0f MiB of weights and %d KV caches on the GPU, %d switches",
                 (double)wb / 1048576.0, gl, res.n_switches);
    }
    free(it), free(ref), free(out);
    return st;
}
