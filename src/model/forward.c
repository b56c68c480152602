/* Contexts and the forward pass. One recipe for every placement: a round (a
 * chunk of tokens) is emitted as an op list (graph.h) over canonical
 * buffers, then run by the executor (exec/) on the CPU, the GPU, or both.
 *
 * The recipe is the pre-norm transformer block common to the architectures
 * of model/arch.c, with the features each arch row enables:
 *
 *   x = embed(tokens) [* sqrt(n_embd)]
 *   per layer:  h = norm(x);  q,k,v = W h [+ b];  [q,k = headnorm(q,k)];  rope(q,k)
 *               K,V[pos] = k,v (f16);  a = attn(q, K, V);  o = Wo a;  [o = norm(o)];  x += o
 *               h = norm(x);  f = ffn(h) or moe(h);  [f = norm(f)];  x += f
 *   logits = out(norm(x_last))
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec/exec.h"
#include "model/model.h"
#include "sched/perf.h"
#include "sim/sim.h"
#include "util.h"

tnd_ctx_params tnd_ctx_default_params(void) {
    tnd_ctx_params p = {.n_ctx = 0, .n_batch = 0, .device = TND_DEVICE_CPU, .vram_budget = 0,
                        .cpu_exact = !tnd_cpu_int8_env()};
    return p;
}

void tnd_ctx_free(tnd_ctx *c) {
    if (!c) return;
    tnd_exec_trace_print(c, stderr);
    free(c->trace);
    tnd_layout_free(c);
    if (c->xfer) c->side[1].be->iface->stream_free(c->side[1].be, c->xfer);
    for (int s = 1; s >= 0; s--) {
        tnd_side *sd = &c->side[s];
        if (!sd->be) continue;
        if (sd->st) sd->be->iface->stream_free(sd->be, sd->st);
        tnd_backend_free(sd->be);
    }
    tnd_placement_free(&c->pl);
    if (c->perf) {
        tnd_perf_free(c->perf);
        free(c->perf);
    }
    tnd_graph_free(&c->g);
    free(c->prom);
    free(c->round_prom);
    free(c->chosen);
    free(c->pair_ok);
    free(c->logits);
    free(c);
}

static tnd_status emit_round(tnd_ctx *c, int nt, int pos0, bool want_logits);

/* Allocates now the GPU scratch of the largest rounds (a full prefill chunk
 * at the end of the context, a decode step), so that a budget too small
 * fails here with a clear message and never mid-generation. */
static tnd_status reserve_scratch(tnd_ctx *c) {
    tnd_backend *g = c->side[1].be;
    if (!g->iface->reserve) return TND_OK;
    int rounds[2][2] = {{c->n_batch, c->n_ctx - c->n_batch}, {1, c->n_ctx - 1}};
    for (int r = 0; r < 2; r++) {
        tnd_status st = emit_round(c, rounds[r][0], rounds[r][1], true);
        int cur = TND_SIDE_CPU;
        for (int i = 0; !st && i < c->g.n; i++) {
            cur = tnd_exec_node_side(c, &c->g.nodes[i], cur, true, NULL);
            if (cur == TND_SIDE_GPU) st = g->iface->reserve(g, &c->g.nodes[i].op, c->side[1].st);
        }
        if (st) return tnd_fail_wrap(st, "GPU op scratch: ");
    }
    return TND_OK;
}

static tnd_status new_gpu(tnd_ctx *c, const tnd_ctx_params *p) {
    tnd_status st;
    if (p->device == TND_DEVICE_CUDA) {
        tnd_cuda_params cp = {.device = 0, .vram_budget = p->vram_budget};
        st = tnd_backend_cuda_new(&cp, &c->side[1].be);
    } else {
        tnd_hw hw;
        if (p->hw && (st = tnd_hw_load(p->hw, &hw))) return st;
        tnd_sim_params sp = {.budget = p->vram_budget ? p->vram_budget : p->hw ? hw.vram : 0, .n_threads = 1,
                             .hw = p->hw ? &hw : NULL, .cpu_exact = p->cpu_exact};
        st = tnd_backend_sim_new(&sp, &c->side[1].be);
    }
    if (st) return st;
    c->gpu = true;
    if ((st = c->side[1].be->iface->stream_new(c->side[1].be, &c->side[1].st)) ||
        (st = c->side[1].be->iface->stream_new(c->side[1].be, &c->xfer)))
        return st;
    if (!c->side[1].be->iface->host_alloc || !c->side[1].be->iface->copy_mapped)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend cannot map host memory", c->side[1].be->iface->name);
    return TND_OK;
}

static void progress_bar(int done, int total, const char *what) {
    int w = 30, f = total ? w * done / total : w;
    fprintf(stderr, "\rprofiling [%.*s%*s] %d/%d %-24s", f, "##############################", w - f, "", done, total, what);
    if (done >= total) fputc('\n', stderr);
}

/* True the first time this process asks about `path` (the last 16 paths are
 * remembered): a bench or a server makes many contexts over one perf DB,
 * and one warning about it is enough. */
static bool first_warning(const char *path) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t seen[16]; /* FNV-1a hashes of the paths */
    static int n_seen;
    const uint64_t h = tnd_fnv1a(TND_FNV_SEED, path, strlen(path));
    bool first = true;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_seen && i < 16 && first; i++) first = seen[i] != h;
    if (first) seen[n_seen++ % 16] = h;
    pthread_mutex_unlock(&mu);
    return first;
}

/* The perf DB for this model and machine: from the cache, else measured (or
 * computed from the SimGPU profile) and cached. */
static tnd_status get_perf(tnd_ctx *c, const tnd_ctx_params *p, tnd_perf **out) {
    tnd_perf *pf = tnd_calloc(1, sizeof *pf);
    if (!pf) return TND_ERR_NOMEM;
    tnd_hw hw;
    bool use_hw = p->device == TND_DEVICE_SIM && p->hw;
    tnd_status st = use_hw ? tnd_hw_load(p->hw, &hw) : TND_OK;
    tnd_mem_info mi = {0};
    c->side[1].be->iface->mem_info(c->side[1].be, &mi);
    char key[240], path[4200];
    uint64_t hh = TND_FNV_SEED; /* the profile's numbers: an edited file is another machine */
    if (use_hw) {
        double v[] = {(double)hw.vram, hw.hbm_bw, hw.gpu_flops, hw.pcie_bw, hw.pcie_pageable_bw, hw.pcie_lat,
                      hw.launch, hw.cpu_bw, hw.cpu_flops, hw.cpu_op, hw.cpu_threads};
        hh = tnd_fnv1a(hh, v, sizeof v);
    }
    /* two GPU models of equal memory are different machines */
    hh = tnd_fnv1a(hh, mi.dev_name, strlen(mi.dev_name));
    /* the CPU's times depend on its activation mode: a profile taken in one
     * mode must not steer runs in the other */
    snprintf(key, sizeof key, "%s-%s-%llu-%016llx-%s", c->side[1].be->iface->name, use_hw ? hw.name : "measured",
             (unsigned long long)mi.dev_total, (unsigned long long)hh,
             tnd_backend_cpu_int8(c->side[0].be) ? "i8" : "f32");
    bool cached = !st && tnd_perf_cache_path(c->m, key, path, sizeof path);
    if (!st && cached && !p->reprofile && tnd_perf_load(c->m, path, pf) == TND_OK) {
        TND_INFO("perf DB: %s (%s)", path, pf->source);
        if (strstr(pf->source, ", disturbed") && first_warning(path))
            TND_WARN("the perf DB %s was measured while the machine was busy: the placement and the predictions "
                     "may be off (tandem profile measures again)", path);
    } else if (!st) {
        tnd_clear_error();
        if (!use_hw) fprintf(stderr, "tandem: profiling this model on this machine once (cached for later runs)\n");
        /* real hybrid steps calibrate only the real GPU */
        st = tnd_perf_build(c->m, c->side[0].be, c->side[1].be, use_hw ? &hw : NULL,
                            p->device == TND_DEVICE_CUDA ? TND_DEVICE_CUDA : TND_DEVICE_CPU,
                            use_hw ? NULL : progress_bar, pf);
        if (!st && cached && !pf->estimated && tnd_perf_save(pf, path)) {
            TND_WARN("could not cache the perf DB: %s", tnd_last_error());
            tnd_clear_error();
        }
    }
    if (st) {
        free(pf);
        return st;
    }
    *out = pf;
    return TND_OK;
}

tnd_status tnd_ctx_get_perf(tnd_ctx *c, const tnd_ctx_params *p, struct tnd_perf **out) {
    if (!c->gpu) return tnd_fail(TND_ERR_ARG, "a perf DB needs a GPU (--device cuda or sim)");
    return get_perf(c, p, out);
}

/* Chooses the placement and the layout, checking it against the budget. */
static tnd_status plan_memory(tnd_ctx *c, const tnd_ctx_params *p) {
    tnd_model *m = c->m;
    uint64_t budget = 0;
    if (c->gpu) {
        tnd_mem_info mi;
        c->side[1].be->iface->mem_info(c->side[1].be, &mi);
        budget = mi.budget ? mi.budget : UINT64_MAX / 4;
        c->budget_asked = mi.budget;
    }
    const char *spec = p->placement ? p->placement : c->gpu ? "static" : "cpu";
    /* a fixed placement brings its own promotions, and no slots: the
     * profile's steps decode (promote_auto would need the perf DB being built) */
    const char *promote = c->fixed_pl ? NULL : p->promote;
    if (c->fixed_pl && c->fixed_pl->promote_auto)
        return tnd_fail(TND_ERR_ARG, "a fixed placement cannot promote automatically");
    bool stat = !strcmp(spec, "static");
    uint64_t kv_layer = 2ull * c->n_ctx * (uint64_t)c->kv_dim * sizeof(uint16_t);
    uint64_t wbudget = 0;
    tnd_status st;
    if (c->gpu && (stat || !strcmp(spec, "layer"))) {
        /* what the GPU holds whatever the placement: activations, norms, scratch */
        tnd_placement all;
        if ((st = tnd_placement_make(m, "gpu", NULL, 0, 0, &all))) return st;
        tnd_layout l;
        tnd_layout_compute(m, &all, c->n_ctx, c->n_batch, budget, true, &l);
        tnd_placement_free(&all);
        /* + 4 MiB: the weight and KV arenas round up to 2 MiB pages */
        uint64_t fixed = l.act_gpu + l.small_gpu + l.scratch_gpu + (4u << 20);
        if (fixed <= budget && promote && strcmp(promote, "none")) {
            /* room for as many promotion slots (up to 3) as fit; none: no promotions */
            uint64_t big = 0;
            for (int i = 0; i < m->n_slices; i++)
                if (!tnd_slice_small(m->slices[i]) && m->slices[i] != &m->tok_embd && i != m->output.id &&
                    m->slices[i]->t->nbytes > big)
                    big = m->slices[i]->t->nbytes;
            uint64_t slot = ((big + 255) & ~(uint64_t)255) + (2u << 20); /* page rounding */
            int k = 3;
            while (k > 0 && fixed + k * slot > budget) k--;
            if (!k) {
                TND_WARN("no room for a promotion slot (%.1f MiB) within the GPU budget: no promotions",
                         slot / 1048576.0);
                promote = NULL;
            }
            fixed += k * slot;
        }
        wbudget = budget > fixed ? budget - fixed : 0;
        if (fixed > budget) {
            /* a policy, not a demand: fall back to the CPU, loudly */
            TND_WARN("the GPU budget (%.1f MiB) cannot hold even the activations and scratch the GPU "
                     "needs (%.1f MiB); running on the CPU only", budget / 1048576.0, fixed / 1048576.0);
            c->side[1].be->iface->stream_free(c->side[1].be, c->xfer);
            c->side[1].be->iface->stream_free(c->side[1].be, c->side[1].st);
            tnd_backend_free(c->side[1].be);
            memset(&c->side[1], 0, sizeof c->side[1]);
            c->xfer = NULL;
            c->gpu = false;
            budget = 0;
        }
    }
    if (c->fixed_pl) {
        if ((st = tnd_placement_copy(m, c->fixed_pl, &c->pl))) return st;
    } else if (stat && c->gpu) {
        /* promotions apply to what static placement leaves on the CPU */
        if ((st = get_perf(c, p, &c->perf)) || (st = tnd_placement_make(m, "cpu", promote, 0, 0, &c->pl)) ||
            (st = tnd_static_place(m, c->perf, wbudget, kv_layer, c->n_ctx, c->n_batch,
                                   promote && strcmp(promote, "none"), &c->pl)))
            return st;
        for (int i = 0; i < m->n_slices; i++)
            if (c->pl.where[i] == TND_SIDE_GPU) c->pl.promote[i] = 0;
    } else if ((st = tnd_placement_make(m, stat ? "cpu" : spec, promote, wbudget, kv_layer, &c->pl))) {
        return st;
    }
    if (c->gpu && c->pl.promote_auto && !c->perf && (st = get_perf(c, p, &c->perf))) return st;
    if (!c->gpu) {
        memset(c->pl.where, 0, (size_t)m->n_slices);
        memset(c->pl.kv, 0, (size_t)m->hp.n_layer);
        memset(c->pl.promote, 0, (size_t)m->n_slices);
        memset(c->pl.split, 0, (size_t)m->hp.n_layer);
    }
    tnd_layout_compute(m, &c->pl, c->n_ctx, c->n_batch, budget, c->gpu, &c->lay);
    if (p->verbose) {
        fprintf(stderr, "placement: %s\n", c->pl.desc);
        tnd_layout_print(&c->lay, stderr);
    }
    if (c->gpu && c->lay.gpu_total > budget)
        return tnd_fail(TND_ERR_NOMEM,
                        "placement '%s' needs %.1f MiB on the GPU (weights %.1f, KV cache %.1f, activations %.1f, "
                        "slots %.1f, scratch %.1f, norms %.1f) but the budget is %.1f MiB",
                        c->pl.desc, c->lay.gpu_total / 1048576.0, c->lay.w_gpu / 1048576.0, c->lay.kv_gpu / 1048576.0,
                        c->lay.act_gpu / 1048576.0, c->lay.slots_gpu / 1048576.0, c->lay.scratch_gpu / 1048576.0,
                        c->lay.small_gpu / 1048576.0, budget / 1048576.0);
    return TND_OK;
}

static tnd_status ctx_new(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *fixed, tnd_ctx **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    const tnd_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_batch < 0) return tnd_fail(TND_ERR_ARG, "context and batch sizes must be positive");
    int n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(hp->n_ctx_train, 4096);
    if (n_ctx > hp->n_ctx_train)
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", n_ctx,
                        hp->n_ctx_train);
    int nb = p->n_batch ? p->n_batch : 512;
    if (nb > n_ctx) nb = n_ctx;
    tnd_ctx *c = tnd_calloc(1, sizeof *c);
    if (!c) return TND_ERR_NOMEM;
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_batch = nb;
    c->kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    const char *tr = getenv("TND_TRACE");
    c->trace_mode = tr && atoi(tr) >= 2 ? 2 : tr && atoi(tr) > 0 ? 1 : 0;
    tnd_status st = tnd_backend_cpu_new(m->pool, 0, &c->side[0].be);
    if (!st && p->cpu_exact) tnd_backend_cpu_set_int8(c->side[0].be, false);
    if (!st) st = c->side[0].be->iface->stream_new(c->side[0].be, &c->side[0].st);
    if (!st && p->device != TND_DEVICE_CPU) st = new_gpu(c, p);
    c->fixed_pl = fixed;
    if (!st) st = plan_memory(c, p);
    c->fixed_pl = NULL;
    if (!st) st = tnd_layout_alloc(c);
    if (!st && c->gpu) st = reserve_scratch(c);
    c->verbose = p->verbose;
    if (!st && !(c->logits = malloc(sizeof(float) * (size_t)hp->n_vocab))) st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (st) {
        tnd_ctx_free(c);
        return st;
    }
    *out = c;
    return TND_OK;
}

tnd_status tnd_ctx_new(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out) { return ctx_new(m, p, NULL, out); }

tnd_status tnd_ctx_new_placed(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *pl, tnd_ctx **out) {
    return ctx_new(m, p, pl, out);
}

int tnd_ctx_n_past(const tnd_ctx *c) { return c->n_past; }
int tnd_ctx_n_ctx(const tnd_ctx *c) { return c->n_ctx; }

tnd_status tnd_ctx_truncate(tnd_ctx *c, int n) {
    if (n < 0 || n > c->n_past) return tnd_fail(TND_ERR_ARG, "cannot truncate %d tokens to %d", c->n_past, n);
    c->n_past = n;
    return TND_OK;
}

/* ---- op emission ----------------------------------------------------------- */

static tnd_tensor T(const void *data, tnd_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    tnd_tensor t = {.data = (void *)data, .type = type, .ne = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1}};
    return t;
}

static tnd_tensor F(const void *data, int64_t ne0, int64_t ne1, int64_t ne2) {
    return T(data, TND_TYPE_F32, ne0, ne1, ne2);
}

/* Weight w as a canonical tensor (its mmapped data). */
static tnd_tensor W(const tnd_weight *w) { return T(w->data, w->type, w->n_in, w->n_out, w->n_expert); }

/* Appends op; sid is the slice it reads as in[0] (-1: none). */
static void emit(tnd_ctx *c, const tnd_op *op, int sid, int pin) {
    if (c->err) return;
    c->err = tnd_graph_push(&c->g, op, sid, c->emit_layer, pin);
}

static void run(tnd_ctx *c, const tnd_op *op) { emit(c, op, -1, TND_PIN_FOLLOW); }

/* Canonical K (kv 0) or V (kv 1) cache of layer il. */
static uint16_t *kv_canon(const tnd_ctx *c, int kv, int il) {
    return c->kv_canon + ((size_t)kv * c->m->hp.n_layer + (size_t)il) * (size_t)c->n_ctx * (size_t)c->kv_dim;
}

static void op_matmul(tnd_ctx *c, const tnd_weight *w, const void *x, int nt, void *y) {
    tnd_op op = {.kind = TND_OP_MATMUL};
    op.in[0] = W(w);
    op.in[1] = F(x, w->n_in, nt, 1);
    op.out[0] = F(y, w->n_out, nt, 1);
    emit(c, &op, w->id, TND_PIN_FOLLOW);
}

static void op_norm(tnd_ctx *c, const void *x, const tnd_weight *w, void *y, int64_t n, int64_t rows) {
    tnd_op op = {.kind = TND_OP_RMS_NORM, .p.norm.eps = c->m->hp.eps};
    op.in[0] = F(x, n, rows, 1);
    op.in[1] = F(w ? w->data : NULL, n, 1, 1);
    op.out[0] = F(y, n, rows, 1);
    run(c, &op);
}

static void op_binary(tnd_ctx *c, tnd_op_kind kind, void *a, const void *b, int64_t n, int64_t nb) {
    tnd_op op = {.kind = kind};
    op.in[0] = F(a, n, 1, 1);
    op.in[1] = F(b, nb, 1, 1);
    op.out[0] = F(a, n, 1, 1);
    run(c, &op);
}

static void op_rope(tnd_ctx *c, void *x, int n_head, int nt, float base, float scale) {
    const tnd_hparams *hp = &c->m->hp;
    tnd_op op = {.kind = TND_OP_ROPE};
    op.p.rope.n_rot = hp->n_rot;
    op.p.rope.mode = c->m->arch->rope_neox ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = scale;
    op.in[0] = F(x, hp->head_dim, n_head, nt);
    op.in[1] = T(c->side[0].act[A_POS], TND_TYPE_I32, nt, 1, 1);
    op.out[0] = op.in[0];
    run(c, &op);
}

static void op_store_kv(tnd_ctx *c, const void *src, uint16_t *cache, int pos0, int nt) {
    tnd_op op = {.kind = TND_OP_CPY};
    op.in[0] = F(src, c->kv_dim, nt, 1);
    op.out[0] = T(cache + (size_t)pos0 * c->kv_dim, TND_TYPE_F16, c->kv_dim, nt, 1);
    emit(c, &op, -1, TND_PIN_KV);
}

static void moe_ffn(tnd_ctx *c, const tnd_layer *L, int nt) {
    const tnd_hparams *hp = &c->m->hp;
    int64_t E = hp->n_embd, F_ = hp->n_ff_exp, k = hp->n_expert_used;
    op_matmul(c, &L->router, c->side[0].act[A_H], nt, c->side[0].act[A_RL]);
    tnd_op r = {.kind = TND_OP_MOE_ROUTE};
    r.p.route.n_used = (int)k;
    r.p.route.mode = TND_ROUTE_SOFTMAX_TOPK;
    r.p.route.norm = hp->expert_norm;
    r.in[0] = F(c->side[0].act[A_RL], hp->n_expert, nt, 1);
    r.out[0] = F(c->side[0].act[A_RW], k, nt, 1);
    r.out[1] = T(c->side[0].act[A_RI], TND_TYPE_I32, k, nt, 1);
    run(c, &r);
    /* A layer split expert by expert (docs/ARCHITECTURE.md, Hybrid execution): the executor maps the
     * routing ids to those of each side's experts (the NONE node: A_RIG
     * holds the GPU's compact indices, A_RIC the CPU's ids, -1 elsewhere),
     * then the GPU's experts run (queued), then the CPU's (on this thread,
     * meanwhile; on the GPU too when promoted). Each side's MATMUL_IDs skip
     * the other side's ids, so they fill disjoint rows of A_EY and MOE_SUM
     * adds the same values in the same order as on one side. */
    bool split = c->gpu && c->pl.split && c->pl.split[c->emit_layer];
    const void *part_ids[2] = {r.out[1].data, NULL};
    if (split) {
        tnd_op map = {.kind = TND_OP_NONE};
        map.in[0] = r.out[1];
        map.out[0] = T(c->side[0].act[A_RIC], TND_TYPE_I32, k, nt, 1);
        map.out[1] = T(c->side[0].act[A_RIG], TND_TYPE_I32, k, nt, 1);
        run(c, &map);
        part_ids[0] = c->side[0].act[A_RIG];
        part_ids[1] = c->side[0].act[A_RIC];
    }
    for (int part = 0; part < 2 && part_ids[part]; part++) {
        tnd_tensor ids = T(part_ids[part], TND_TYPE_I32, k, nt, 1);
        const tnd_weight *gu[2] = {&L->gate_exps, &L->up_exps};
        void *dst[2] = {c->side[0].act[A_G], c->side[0].act[A_U]};
        for (int i = 0; i < 2; i++) {
            tnd_op op = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = split};
            op.in[0] = W(gu[i]);
            op.in[1] = F(c->side[0].act[A_H], E, 1, nt);
            op.in[2] = ids;
            op.out[0] = F(dst[i], F_, k, nt);
            emit(c, &op, gu[i]->id, TND_PIN_FOLLOW);
        }
        tnd_op act = {.kind = TND_OP_SILU_MUL};
        act.in[0] = F(c->side[0].act[A_G], F_ * k * nt, 1, 1);
        act.in[1] = F(c->side[0].act[A_U], F_ * k * nt, 1, 1);
        act.out[0] = act.in[0];
        run(c, &act);
        tnd_op down = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = split};
        down.in[0] = W(&L->down_exps);
        down.in[1] = F(c->side[0].act[A_G], F_, k, nt);
        down.in[2] = ids;
        down.out[0] = F(c->side[0].act[A_EY], E, k, nt);
        emit(c, &down, L->down_exps.id, TND_PIN_FOLLOW);
    }
    tnd_op sum = {.kind = TND_OP_MOE_SUM};
    sum.in[0] = F(c->side[0].act[A_EY], E, k, nt);
    sum.in[1] = r.out[0];
    sum.out[0] = F(c->side[0].act[A_O], E, nt, 1);
    run(c, &sum);
}

static void layer_forward(tnd_ctx *c, int il, int nt, int pos0) {
    const tnd_model *m = c->m;
    const tnd_hparams *hp = &m->hp;
    const tnd_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd, kvd = c->kv_dim;
    void **a = c->side[0].act;
    c->emit_layer = il;

    op_norm(c, a[A_X], &L->attn_norm, a[A_H], E, nt);
    op_matmul(c, &L->wq, a[A_H], nt, a[A_Q]);
    op_matmul(c, &L->wk, a[A_H], nt, a[A_K]);
    op_matmul(c, &L->wv, a[A_H], nt, a[A_V]);
    if (L->bq.t) {
        op_binary(c, TND_OP_ADD, a[A_Q], L->bq.data, qd * nt, qd);
        op_binary(c, TND_OP_ADD, a[A_K], L->bk.data, kvd * nt, kvd);
        op_binary(c, TND_OP_ADD, a[A_V], L->bv.data, kvd * nt, kvd);
    }
    if (L->q_norm.t) {
        op_norm(c, a[A_Q], &L->q_norm, a[A_Q], hd, (int64_t)hp->n_head * nt);
        op_norm(c, a[A_K], &L->k_norm, a[A_K], hd, (int64_t)hp->n_head_kv * nt);
    }
    float base = L->swa ? hp->rope_base_local : hp->rope_base;
    float scale = L->swa ? 1.0f : hp->rope_scale;
    op_rope(c, a[A_Q], hp->n_head, nt, base, scale);
    op_rope(c, a[A_K], hp->n_head_kv, nt, base, scale);
    uint16_t *kc = kv_canon(c, 0, il), *vc = kv_canon(c, 1, il);
    op_store_kv(c, a[A_K], kc, pos0, nt);
    op_store_kv(c, a[A_V], vc, pos0, nt);
    tnd_op at = {.kind = TND_OP_ATTN};
    at.p.attn.n_head = hp->n_head;
    at.p.attn.n_head_kv = hp->n_head_kv;
    at.p.attn.head_dim = (int)hd;
    at.p.attn.pos0 = pos0;
    at.p.attn.scale = hp->attn_scale;
    at.p.attn.window = L->swa ? hp->swa_window : 0;
    at.in[0] = F(a[A_Q], hd, hp->n_head, nt);
    at.in[1] = T(kc, TND_TYPE_F16, kvd, c->n_ctx, 1);
    at.in[2] = T(vc, TND_TYPE_F16, kvd, c->n_ctx, 1);
    at.out[0] = F(a[A_ATT], hd, hp->n_head, nt);
    emit(c, &at, -1, TND_PIN_KV);
    op_matmul(c, &L->wo, a[A_ATT], nt, a[A_O]);
    if (L->attn_post_norm.t) op_norm(c, a[A_O], &L->attn_post_norm, a[A_O], E, nt);
    op_binary(c, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
    op_norm(c, a[A_X], &L->ffn_norm, a[A_H], E, nt);
    if (m->arch->moe) {
        moe_ffn(c, L, nt);
    } else {
        int64_t F_ = hp->n_ff;
        op_matmul(c, &L->ffn_gate, a[A_H], nt, a[A_G]);
        op_matmul(c, &L->ffn_up, a[A_H], nt, a[A_U]);
        op_binary(c, m->arch->gelu ? TND_OP_GELU_MUL : TND_OP_SILU_MUL, a[A_G], a[A_U], F_ * nt, F_ * nt);
        op_matmul(c, &L->ffn_down, a[A_G], nt, a[A_O]);
    }
    if (L->ffn_post_norm.t) op_norm(c, a[A_O], &L->ffn_post_norm, a[A_O], E, nt);
    op_binary(c, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
}

/* The op list of one round: nt tokens at positions pos0.. (ids and
 * positions are read from the host buffers when it runs). */
static tnd_status emit_round(tnd_ctx *c, int nt, int pos0, bool want_logits) {
    const tnd_model *m = c->m;
    int64_t E = m->hp.n_embd;
    tnd_graph_reset(&c->g);
    c->err = TND_OK;
    c->emit_layer = -1;
    tnd_op emb = {.kind = TND_OP_GET_ROWS};
    emb.in[0] = W(&m->tok_embd);
    emb.in[1] = T(c->side[0].act[A_IDS], TND_TYPE_I32, nt, 1, 1);
    emb.out[0] = F(c->side[0].act[A_X], E, nt, 1);
    emit(c, &emb, m->tok_embd.id, TND_PIN_FOLLOW);
    if (m->arch->embd_scale) {
        tnd_op sc = {.kind = TND_OP_SCALE, .p.scale.s = sqrtf((float)E)};
        sc.in[0] = sc.out[0] = emb.out[0];
        run(c, &sc);
    }
    for (int il = 0; il < m->hp.n_layer; il++) layer_forward(c, il, nt, pos0);
    c->emit_layer = -1;
    if (want_logits) {
        float *last = (float *)c->side[0].act[A_X] + (int64_t)(nt - 1) * E;
        op_norm(c, last, &m->output_norm, c->side[0].act[A_H], E, 1);
        op_matmul(c, &m->output, c->side[0].act[A_H], 1, c->side[0].act[A_LOGITS]);
    }
    return c->err;
}

/* One round: nt tokens at positions n_past..; logits of the last if asked. */
static tnd_status round_forward(tnd_ctx *c, const int32_t *tokens, int nt, bool want_logits) {
    tnd_status st = emit_round(c, nt, c->n_past, want_logits);
    if (st) return st;
    int32_t *ids = c->side[0].act[A_IDS], *pos = c->side[0].act[A_POS];
    memcpy(ids, tokens, sizeof(int32_t) * (size_t)nt);
    for (int t = 0; t < nt; t++) pos[t] = c->n_past + t;
    double t0 = tnd_time_s();
    if ((st = tnd_exec_round(c, nt, want_logits))) return st;
    if (c->verbose && c->perf) {
        double ms = 1e3 * (tnd_time_s() - t0);
        double pred = 1e3 * tnd_perf_predict(c->m, c->perf, &c->pl, c->lay.n_slots, nt, c->n_past);
        fprintf(stderr, "round of %d tokens: predicted %.2f ms, measured %.2f ms (%+.0f%%)\n", nt, pred, ms,
                100.0 * (ms - pred) / pred);
    }
    c->n_past += nt;
    return TND_OK;
}

tnd_status tnd_ctx_eval(tnd_ctx *c, const int32_t *tokens, int n, float *logits) {
    if (n <= 0) return tnd_fail(TND_ERR_ARG, "no tokens to evaluate");
    if ((int64_t)c->n_past + n > c->n_ctx) {
        if (c->n_ctx >= c->m->hp.n_ctx_train) /* no larger --ctx-size to suggest */
            return tnd_fail(TND_ERR_LIMIT, "context full: %d tokens in the cache + %d new > context length %d, the "
                            "model's maximum (shorten the prompt)", c->n_past, n, c->n_ctx);
        return tnd_fail(TND_ERR_LIMIT, "context full: %d tokens in the cache + %d new > context length %d "
                        "(use a larger --ctx-size, up to the model's %d)",
                        c->n_past, n, c->n_ctx, c->m->hp.n_ctx_train);
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab)
            return tnd_fail(TND_ERR_ARG, "token id %d out of range [0, %d)", tokens[i], c->m->hp.n_vocab);
    int start = c->n_past;
    double t0 = tnd_time_s();
    uint64_t sw0 = c->n_switch, ac0 = c->n_act_copies, wc0 = c->n_w_copies, wb0 = c->w_copy_bytes, np0 = c->n_pairs;
    for (int done = 0; done < n;) {
        int nt = TND_MIN(c->n_batch, n - done);
        tnd_status st = round_forward(c, tokens + done, nt, done + nt == n);
        if (st) {
            c->n_past = start; /* a failed eval leaves the cache as it was */
            return st;
        }
        done += nt;
    }
    if (logits) memcpy(logits, c->logits, sizeof(float) * (size_t)c->m->hp.n_vocab);
    TND_DEBUG("eval %d tokens: %.2f ms, %llu switches, %llu activation copies, %llu weight copies (%.1f MiB), "
              "%llu matmul pairs",
              n, 1e3 * (tnd_time_s() - t0), (unsigned long long)(c->n_switch - sw0),
              (unsigned long long)(c->n_act_copies - ac0), (unsigned long long)(c->n_w_copies - wc0),
              (c->w_copy_bytes - wb0) / 1048576.0, (unsigned long long)(c->n_pairs - np0));
    return TND_OK;
}

tnd_status tnd_ctx_plan_only(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    tnd_ctx *c = tnd_calloc(1, sizeof *c);
    if (!c) return TND_ERR_NOMEM;
    c->m = m;
    c->n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(m->hp.n_ctx_train, 4096);
    if (c->n_ctx > m->hp.n_ctx_train) { /* as ctx_new: a plan must be one that can run */
        free(c);
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", p->n_ctx,
                        m->hp.n_ctx_train);
    }
    c->n_batch = TND_MIN(p->n_batch ? p->n_batch : 512, c->n_ctx);
    c->kv_dim = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    c->planned_only = true;
    tnd_status st = tnd_backend_cpu_new(m->pool, 0, &c->side[0].be); /* profiling may time CPU ops */
    if (!st && p->cpu_exact) tnd_backend_cpu_set_int8(c->side[0].be, false);
    if (!st) st = c->side[0].be->iface->stream_new(c->side[0].be, &c->side[0].st);
    if (!st && p->device != TND_DEVICE_CPU) st = new_gpu(c, p);
    if (!st) st = plan_memory(c, p);
    if (st) {
        tnd_ctx_free(c);
        return st;
    }
    *out = c;
    return TND_OK;
}

tnd_status tnd_ctx_plan_text(tnd_model *m, const tnd_ctx_params *p, char **text) {
    *text = NULL;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_plan_only(m, p, &c);
    if (st) return st;
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (f) {
        fprintf(f, "model: %s\nplacement: %s\n", m->desc, c->pl.desc);
        tnd_layout_print(&c->lay, f);
        fclose(f);
    } else {
        st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    tnd_ctx_free(c);
    return st;
}
