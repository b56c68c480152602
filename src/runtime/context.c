/* Contexts: their lifecycle (made from a plan, freed), evaluation round by
 * round (the recipe of model/forward.c emits a round, exec/ runs it), and
 * changing the plan of a live context between rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "moe/moe.h"
#include "runtime/internal.h"
#include "sim/sim.h"
#include "util.h"

tnd_ctx_params tnd_ctx_default_params(void) {
    tnd_ctx_params p = {.n_ctx = 0, .n_batch = 0, .device = TND_DEVICE_CPU, .vram_budget = 0,
                        .cpu_exact = !tnd_cpu_int8_env()};
    return p;
}

/* Drops the GPU side (a plan that fell back to the CPU). */
static void drop_gpu(tnd_ctx *c) {
    tnd_backend *g = c->side[1].be;
    if (!g) return;
    tnd_backend_stream_free(g, c->xfer);
    tnd_backend_stream_free(g, c->side[1].st);
    tnd_backend_free(g);
    memset(&c->side[1], 0, sizeof c->side[1]);
    c->xfer = NULL;
    c->gpu = false;
}

void tnd_ctx_free(tnd_ctx *c) {
    if (!c) return;
    if (c->tl && tnd_tl_close(c)) TND_WARN("%s", tnd_last_error());
    tnd_exec_trace_print(c, stderr);
    free(c->trace);
    tnd_layout_free(c);
    tnd_hot_release(c);
    drop_gpu(c);
    if (c->side[0].be) {
        tnd_backend_stream_free(c->side[0].be, c->side[0].st);
        tnd_backend_free(c->side[0].be);
    }
    tnd_plan_free(c->plan); /* owns c->pl's arrays and c->perf */
    tnd_plan_free(c->plan_idle);
    tnd_graph_free(&c->g);
    free(c->prom);
    free(c->prom_off);
    free(c->prom_len);
    free(c->round_prom);
    free(c->chosen);
    free(c->cpu_idx);
    free(c->n_cpu_idx);
    free(c->pair_ok);
    free(c->logits);
    tnd_seq_release(c);
    free(c);
}

void tnd_ctx_recipe(tnd_ctx *c, tnd_recipe *r) {
    *r = (tnd_recipe){.m = c->m,
                      .g = &c->g,
                      .act = c->side[0].act,
                      .kv_canon = c->kv_canon,
                      .n_ctx = c->n_ctx,
                      .n_seq = c->n_seq_max,
                      .kv_dim = c->kv_dim,
                      .split = c->gpu ? c->pl.split : NULL,
                      .predict = c->gpu && c->pf_max > 0,
                      .predict2 = c->gpu && c->pf_max > 0 && c->presched};
}

/* The op list of a round of sequence 0 into c->g (the recipe over c's buffers). */
static tnd_status emit_round(tnd_ctx *c, int nt, int pos0, bool want_logits) {
    tnd_recipe r;
    tnd_ctx_recipe(c, &r);
    return tnd_recipe_emit(&r, nt, pos0, want_logits);
}

/* The op list of the largest batched rounds of segments of up to per
 * tokens, each at the end of its slot, as many as a round takes: per = 1,
 * a decode step of every sequence; TND_GRAPH_MAX_TOK, the longest that
 * share one attention over the slots (model/forward.c); n_ctx, whole
 * prompts (rounds longer than a sequence's context, batch.c). */
static tnd_status emit_batch_worst(tnd_ctx *c, int per) {
    int n = TND_MIN(c->n_seq_max, (c->n_batch + per - 1) / per);
    tnd_seg *sg = tnd_calloc((size_t)n, sizeof *sg);
    if (!sg) return TND_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        int k = TND_MIN(per, c->n_batch - i * per);
        sg[i] = (tnd_seg){.seq = i, .off = i * per, .n = k, .pos0 = c->n_ctx - k, .logits = true};
    }
    tnd_recipe r;
    tnd_ctx_recipe(c, &r);
    tnd_status st = tnd_recipe_emit_batch(&r, sg, n);
    free(sg);
    return st;
}

/* Allocates now the GPU scratch of the largest rounds (a full prefill chunk
 * at the end of the context, a decode step), so that a budget too small
 * fails here with a clear message and never mid-generation. */
static tnd_status reserve_scratch(tnd_ctx *c) {
    tnd_backend *g = c->side[1].be;
    const int chunk = TND_MIN(c->n_batch, c->n_ctx);
    int rounds[2][2] = {{chunk, c->n_ctx - chunk}, {1, c->n_ctx - 1}};
    const int per[3] = {1, TND_MIN(TND_GRAPH_MAX_TOK, c->n_ctx), c->n_ctx}; /* rounds 2.. (batched) */
    for (int r = 0; r < 5; r++) {
        if (r >= 2 && (c->n_seq_max == 1 || (r == 4 && c->n_batch <= c->n_ctx))) continue;
        tnd_status st = r < 2 ? emit_round(c, rounds[r][0], rounds[r][1], true) : emit_batch_worst(c, per[r - 2]);
        int cur = TND_SIDE_CPU;
        for (int i = 0; !st && i < c->g.n; i++) {
            cur = tnd_exec_node_side(c, &c->g.nodes[i], cur, true, NULL);
            if (cur == TND_SIDE_GPU) st = tnd_backend_reserve(g, &c->g.nodes[i].op, c->side[1].st);
        }
        if (st) return tnd_fail_wrap(st, "GPU op scratch: ");
    }
    return TND_OK;
}

/* The GPU side: a CUDA GPU or SimGPU (with the timing profile hw, or none). */
static tnd_status new_gpu(tnd_ctx *c, tnd_device device, uint64_t vram_budget, const char *hw_name, bool cpu_exact) {
    tnd_status st;
    if (device == TND_DEVICE_CUDA) {
        tnd_cuda_params cp = {.device = 0, .vram_budget = vram_budget};
        st = tnd_backend_cuda_new(&cp, &c->side[1].be);
    } else {
        tnd_hw hw;
        if (hw_name && (st = tnd_hw_load(hw_name, &hw))) return st;
        tnd_sim_params sp = {.budget = vram_budget ? vram_budget : hw_name ? hw.vram : 0, .n_threads = 1,
                             .hw = hw_name ? &hw : NULL, .cpu_exact = cpu_exact};
        st = tnd_backend_sim_new(&sp, &c->side[1].be);
    }
    if (st) return st;
    tnd_backend *g = c->side[1].be;
    c->gpu = true;
    if ((st = tnd_backend_stream_new(g, &c->side[1].st)) || (st = tnd_backend_stream_new(g, &c->xfer))) return st;
    if (!g->iface->host_alloc || !g->iface->copy_mapped)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend cannot map host memory", tnd_backend_name(g));
    return TND_OK;
}

/* A context with its backends (CPU, and the GPU unless device is the CPU)
 * and nothing else yet; cpu_exact: the CPU's f32 activations. */
static tnd_status ctx_alloc(tnd_model *m, int n_ctx, int n_batch, int n_seq_max, tnd_device device,
                            uint64_t vram_budget, const char *hw, bool cpu_exact, tnd_ctx **out) {
    *out = NULL;
    tnd_status cst = tnd_config_check();
    if (cst) return cst;
    tnd_ctx *c = tnd_calloc(1, sizeof *c);
    *out = c;
    if (!c) return TND_ERR_NOMEM;
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->n_seq_max = n_seq_max > 0 ? n_seq_max : 1;
    c->kv_dim = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    c->trace_mode = tnd_config_get()->trace;
    tnd_adapt_init(&c->ad[0]);
    tnd_adapt_init(&c->ad[1]);
    tnd_adapt_gpu_init(&c->adg);
    tnd_status st = tnd_backend_cpu_new(m->pool, 0, &c->side[0].be);
    if (!st) tnd_backend_cpu_set_int8(c->side[0].be, !cpu_exact); /* either way: the params win over the env */
    if (!st) st = tnd_backend_stream_new(c->side[0].be, &c->side[0].st);
    if (!st && device != TND_DEVICE_CPU) st = new_gpu(c, device, vram_budget, hw, cpu_exact);
    return st;
}

/* c runs plan from now on (c owns it): c->pl, c->lay and c->perf are the
 * plan's, c->pl sharing its arrays. */
static void adopt(tnd_ctx *c, tnd_plan *plan) {
    c->plan = plan;
    c->pl = plan->pl;
    c->lay = plan->lay;
    c->perf = plan->perf;
    c->budget_asked = plan->budget_asked;
    c->ablate = plan->ablate;
    c->presched_want = plan->presched;
    tnd_tl_set_perf(c, tnd_plan_perf(plan)); /* a swapped-out plan's DB is freed with it */
}

/* Everything big of c's plan: buffers on both sides, then the GPU scratch. */
static tnd_status ctx_lay_out(tnd_ctx *c) {
    tnd_status st = tnd_layout_alloc(c);
    if (!st && c->gpu) {
        const double t0 = tnd_time_s();
        st = reserve_scratch(c);
        TND_DEBUG("layout: GPU scratch %.0f ms", 1e3 * (tnd_time_s() - t0));
    }
    if (!st) st = tnd_hot_init(c);
    return st;
}

/* The budget of c's GPU must still hold the layout plan made (a plan made
 * earlier, or by another process's view of the driver's free memory). */
static tnd_status check_fits(tnd_ctx *c, const tnd_plan *plan) {
    if (!c->gpu) return TND_OK;
    tnd_mem_info mi;
    tnd_backend_mem_info(c->side[1].be, &mi);
    uint64_t budget = mi.budget ? mi.budget : UINT64_MAX / 4;
    if (plan->lay.gpu_total > budget)
        return tnd_fail(TND_ERR_NOMEM, "plan '%s' needs %.1f MiB on the GPU but its budget is now %.1f MiB",
                        plan->pl.desc, plan->lay.gpu_total / 1048576.0, budget / 1048576.0);
    /* what the device has free now (another process may hold memory since the plan was made) */
    uint64_t avail = mi.dev_free + mi.used;
    if (mi.dev_total && plan->lay.gpu_total > avail)
        return tnd_fail(TND_ERR_NOMEM, "plan '%s' needs %.1f MiB on the GPU but the device has only %.1f MiB free "
                        "now (of %.1f MiB; other processes hold the rest): make the plan anew",
                        plan->pl.desc, plan->lay.gpu_total / 1048576.0, avail / 1048576.0,
                        mi.dev_total / 1048576.0);
    return TND_OK;
}

/* The GPU ran out of memory while c's layout was allocated (memory another
 * process took after the plan read the budget): everything of the GPU side
 * goes, a new GPU backend reads the budget anew (at most what the device
 * has free), and the plan is made again for it (p, fixed: as ctx_new got
 * them). One attempt; a failure names the numbers of both. */
static tnd_status replan(tnd_ctx *c, const tnd_ctx_params *p, const tnd_placement *fixed) {
    char first[512];
    snprintf(first, sizeof first, "%s", tnd_last_error());
    const double need = c->lay.gpu_total / 1048576.0;
    tnd_mem_info mi;
    tnd_backend_mem_info(c->side[1].be, &mi);
    const double had = mi.used / 1048576.0;
    tnd_layout_release(c, false);
    drop_gpu(c);
    tnd_plan_free(c->plan);
    c->plan = NULL;
    memset(&c->pl, 0, sizeof c->pl);
    tnd_status st = new_gpu(c, p->device, p->vram_budget, p->hw, p->cpu_exact);
    uint64_t fresh = 0;
    if (!st) {
        tnd_backend_mem_info(c->side[1].be, &mi);
        fresh = mi.budget;
        /* a budget the device no longer has: what it has, less a margin for the driver's own */
        uint64_t margin = TND_MIN(mi.dev_free / 20, (uint64_t)256 << 20);
        if (mi.dev_total && (!mi.budget || mi.budget > mi.dev_free - margin)) {
            fresh = mi.dev_free - margin;
            drop_gpu(c);
            st = fresh ? new_gpu(c, p->device, fresh, p->hw, p->cpu_exact)
                       : tnd_fail(TND_ERR_NOMEM, "the device has no memory free");
        }
    }
    tnd_plan *plan = NULL;
    if (!st) st = tnd_plan_make(c->m, p, c->side[0].be, c->gpu ? c->side[1].be : NULL, fixed, &plan);
    if (!st) {
        if (!plan->gpu) drop_gpu(c);
        adopt(c, plan);
        TND_WARN("the GPU ran out of memory allocating the plan's %.1f MiB (%s); re-planned for the %.1f MiB "
                 "free now: %s", need, first, fresh / 1048576.0, plan->pl.desc);
        st = ctx_lay_out(c);
    }
    if (st)
        return tnd_fail_wrap(st, "the GPU ran out of memory allocating the plan's %.1f MiB after %.1f MiB (%s; "
                             "another process may hold GPU memory), and re-planning for the %.1f MiB free failed: ",
                             need, had, first, fresh / 1048576.0);
    return TND_OK;
}

/* Lays c out (on a GPU allocation that fails, re-plans when p is given, as
 * for tnd_ctx_new) and finishes it into *out; frees c on failure. */
static tnd_status ctx_finish(tnd_ctx *c, const tnd_ctx_params *p, const tnd_placement *fixed, bool verbose,
                             tnd_ctx **out) {
    tnd_status st = ctx_lay_out(c);
    if (st == TND_ERR_NOMEM && c->gpu) {
        if (p) {
            st = replan(c, p, fixed);
        } else {
            tnd_mem_info mi;
            tnd_backend_mem_info(c->side[1].be, &mi);
            st = tnd_fail_wrap(st, "plan '%s' needs %.1f MiB on the GPU; %.1f MiB were allocated and the device "
                               "has %.1f MiB free (another process may hold GPU memory: make the plan anew): ",
                               c->pl.desc, c->lay.gpu_total / 1048576.0, mi.used / 1048576.0,
                               mi.dev_free / 1048576.0);
        }
    }
    c->verbose = verbose;
    if (!st && p && p->trace) st = tnd_tl_open(c, p->trace, tnd_plan_perf(c->plan));
    size_t rows = (size_t)tnd_logit_rows(c->n_batch, c->n_seq_max);
    if (!st && !(c->logits = malloc(sizeof(float) * (size_t)c->m->hp.n_vocab * rows)))
        st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (!st) st = tnd_seq_alloc(c);
    if (st) {
        tnd_ctx_free(c);
        return st;
    }
    *out = c;
    return TND_OK;
}

/* tnd_ctx_new and tnd_ctx_new_placed: the plan is made on the context's own
 * backends (the budget is the GPU backend's, a perf DB is measured on it). */
static tnd_status ctx_new(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *fixed, tnd_ctx **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    const tnd_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_batch < 0) return tnd_fail(TND_ERR_ARG, "context and batch sizes must be positive");
    if (p->n_seq_max < 0 || p->n_seq_max > TND_SEQ_MAX)
        return tnd_fail(TND_ERR_ARG, "n_seq_max %d out of range [0, %d]", p->n_seq_max, TND_SEQ_MAX);
    int n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(hp->n_ctx_train, 4096);
    if (n_ctx > hp->n_ctx_train)
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", n_ctx,
                        hp->n_ctx_train);
    int nb = tnd_round_cap(p->n_batch, n_ctx, p->n_seq_max);
    tnd_ctx *c;
    tnd_status st = ctx_alloc(m, n_ctx, nb, p->n_seq_max, p->device, p->vram_budget, p->hw, p->cpu_exact, &c);
    tnd_plan *plan = NULL;
    if (!st) st = tnd_plan_make(m, p, c->side[0].be, c->gpu ? c->side[1].be : NULL, fixed, &plan);
    if (st) {
        tnd_ctx_free(c);
        return st;
    }
    if (!plan->gpu) drop_gpu(c);
    adopt(c, plan);
    c->adapt = !p->no_adapt;
    c->adapt_cpu = true;
    return ctx_finish(c, p, fixed, p->verbose, out);
}

tnd_status tnd_ctx_new(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out) { return ctx_new(m, p, NULL, out); }

tnd_model *tnd_ctx_model(const tnd_ctx *c) { return c ? c->m : NULL; }

tnd_status tnd_ctx_new_bare(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out) {
    const int n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(m->hp.n_ctx_train, 4096);
    tnd_ctx *c;
    tnd_status st = ctx_alloc(m, n_ctx, tnd_round_cap(p->n_batch, n_ctx, p->n_seq_max), p->n_seq_max, p->device,
                              p->vram_budget, p->hw, p->cpu_exact, &c);
    if (st) {
        tnd_ctx_free(c);
        return st;
    }
    *out = c;
    return TND_OK;
}

tnd_status tnd_ctx_new_placed(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *pl, tnd_ctx **out) {
    return ctx_new(m, p, pl, out);
}

tnd_status tnd_ctx_new_from_plan(const tnd_plan *plan, tnd_ctx **out) {
    if (plan->n_ctx > plan->m->hp.n_ctx_train)
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", plan->n_ctx,
                        plan->m->hp.n_ctx_train);
    tnd_plan *own;
    tnd_status st = tnd_plan_copy(plan, &own);
    if (st) return st;
    tnd_ctx *c;
    st = ctx_alloc(plan->m, plan->n_ctx, plan->n_batch, plan->n_seq_max, plan->gpu ? plan->device : TND_DEVICE_CPU,
                   plan->vram_budget, plan->hw, plan->cpu_exact, &c);
    if (!st) st = check_fits(c, own);
    if (st) {
        tnd_plan_free(own);
        tnd_ctx_free(c);
        return st;
    }
    adopt(c, own);
    return ctx_finish(c, NULL, NULL, false, out);
}

/* Tokens in sequence slot s's KV rows (0 for a free slot but slot 0, the
 * context's own). */
static int slot_past(const tnd_ctx *c, int s) {
    if (s == 0) return c->n_past;
    return c->seq && c->seq[s].live ? c->seq[s].n_past : 0;
}

/* KV rows every sequence holds, all layers: the size of kv_move's copy. */
static size_t kv_rows(const tnd_ctx *c) {
    size_t n = 0;
    for (int s = 0; s < c->n_seq_max; s++) n += (size_t)slot_past(c, s);
    return n;
}

/* The filled positions of every sequence slot, every layer's K and V, saved
 * on the host (per slot: [n_layer][2][n_past][kv_dim]) or put back, from and
 * to wherever c's plan keeps each layer's cache. */
static tnd_status kv_move(tnd_ctx *c, uint16_t *save, bool restore) {
    const int L = c->m->hp.n_layer;
    tnd_backend *g = c->side[1].be;
    tnd_status st = TND_OK;
    char *host = (char *)save;
    for (int s = 0; !st && s < c->n_seq_max; s++) {
        const size_t n = (size_t)slot_past(c, s) * (size_t)c->kv_dim * sizeof(uint16_t);
        const size_t at_slot = (size_t)s * (size_t)c->n_ctx * (size_t)c->kv_dim * sizeof(uint16_t);
        if (!n) continue; /* an empty slot */
        for (int l = 0; !st && l < L; l++)
            for (int kv = 0; !st && kv < 2; kv++, host += n) {
                void *at = (char *)c->kv_addr[2 * l + kv] + at_slot;
                if (c->gpu && c->pl.kv[l] == TND_SIDE_GPU)
                    st = restore ? tnd_backend_copy_h2d(g, at, host, n, c->side[1].st)
                                 : tnd_backend_copy_d2h(g, host, at, n, c->side[1].st);
                else if (restore)
                    memcpy(at, host, n);
                else
                    memcpy(host, at, n);
            }
    }
    if (!st && c->gpu) st = tnd_backend_stream_sync(g, c->side[1].st);
    return st;
}

tnd_status tnd_ctx_set_plan(tnd_ctx *c, const tnd_plan *plan) {
    tnd_status st = tnd_ctx_swap_plan(c, plan);
    if (!st) { /* the caller's plan: placed for an idle or a shared GPU, it is the one to keep */
        tnd_plan_free(c->plan_idle);
        c->plan_idle = NULL;
        tnd_adapt_gpu_init(&c->adg);
    }
    return st;
}

tnd_status tnd_ctx_swap_plan(tnd_ctx *c, const tnd_plan *plan) {
    if (plan->m != c->m || plan->n_ctx != c->n_ctx || plan->n_batch != c->n_batch || plan->n_seq_max != c->n_seq_max)
        return tnd_fail(TND_ERR_ARG,
                        "the plan is for another model or context size (%d x %d, %d sequences; the context's %d x %d, "
                        "%d sequences)",
                        plan->n_ctx, plan->n_batch, plan->n_seq_max, c->n_ctx, c->n_batch, c->n_seq_max);
    if (plan->gpu && !c->gpu)
        return tnd_fail(TND_ERR_ARG, "plan '%s' needs a GPU and the context has none", plan->pl.desc);
    if (plan->gpu && strcmp(plan->gpu_name, tnd_backend_name(c->side[1].be)))
        return tnd_fail(TND_ERR_ARG, "plan '%s' is for a %s GPU and the context's is %s", plan->pl.desc,
                        plan->gpu_name, tnd_backend_name(c->side[1].be));
    /* a CPU plan lays out no GPU side, which a GPU context's executor expects */
    if (c->gpu && !plan->gpu)
        return tnd_fail(TND_ERR_ARG, "plan '%s' is for the CPU alone and the context has a GPU (make the plan "
                        "for the context's device with the placement cpu)", plan->pl.desc);
    /* its perf DB timed the CPU in one activation mode: the context runs the other */
    if (plan->cpu_exact == tnd_backend_cpu_int8(c->side[0].be))
        return tnd_fail(TND_ERR_ARG, "plan '%s' is for the CPU's %s activations and the context runs %s",
                        plan->pl.desc, plan->cpu_exact ? "f32" : "Q8", plan->cpu_exact ? "Q8" : "f32");
    tnd_status st = check_fits(c, plan);
    tnd_plan *own = NULL;
    if (!st) st = tnd_plan_copy(plan, &own);
    if (st) return st;
    const size_t kv_bytes = 2 * (size_t)c->m->hp.n_layer * kv_rows(c) * (size_t)c->kv_dim * sizeof(uint16_t);
    uint16_t *kv = malloc(kv_bytes + 1);
    if (!kv) {
        tnd_plan_free(own);
        return tnd_fail(TND_ERR_NOMEM, "out of memory for the KV cache's copy");
    }
    const double t0 = tnd_time_s();
    if ((st = kv_move(c, kv, false))) {
        free(kv);
        tnd_plan_free(own);
        return st;
    }
    /* Everything laid out for the old plan goes, and with it what the
     * executor learnt about it (which MATMUL pairs the GPU takes, the
     * automatic promotions' scratch). */
    tnd_layout_release(c, true); /* the slices pinned for the old plan need no pinning again */
    free(c->pair_ok);
    c->pair_ok = NULL;
    c->rope_kv_ok = 0;
    c->two_ok[0] = c->two_ok[1] = 0;
    c->glu_ok[0] = c->glu_ok[1] = 0;
    free(c->round_prom);
    c->round_prom = NULL;
    c->prom_key_nt = 0; /* the new plan chooses its promotions afresh */
    tnd_adapt_init(&c->ad[0]);
    tnd_adapt_init(&c->ad[1]);
    tnd_plan_free(c->plan);
    adopt(c, own);
    const double t1 = tnd_time_s();
    st = ctx_lay_out(c);
    const double t2 = tnd_time_s();
    if (!st) st = kv_move(c, kv, true);
    free(kv);
    TND_DEBUG("plan swap: KV cache out and old layout freed %.0f ms, new layout %.0f ms, KV cache back %.0f ms",
              1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (tnd_time_s() - t2));
    return st;
}

const tnd_plan *tnd_ctx_plan(const tnd_ctx *c) { return c->plan; }

/* moe.h: the executor appends every MOE_ROUTE node's routing to r while set */
void tnd_ctx_set_route_rec(tnd_ctx *c, tnd_route_rec *r) { c->route_rec = r; }

void tnd_ctx_get_stats(const tnd_ctx *c, tnd_ctx_stats *out) {
    *out = (tnd_ctx_stats){.n_switch = c->n_switch,
                           .n_act_copies = c->n_act_copies,
                           .act_copy_bytes = c->act_copy_bytes,
                           .n_w_copies = c->n_w_copies,
                           .w_copy_bytes = c->w_copy_bytes,
                           .n_pairs = c->n_pairs,
                           .n_rope_kv = c->n_rope_kv,
                           .n_two = c->n_two,
                           .n_glu = c->n_glu,
                           .n_ffn = c->n_ffn,
                           .n_route_dec = c->n_route_dec,
                           .n_route_dec_gpu = c->n_route_dec_gpu,
                           .n_route_dec_pf = c->n_route_dec_pf,
                           .n_pf_copies = c->n_pf_copies,
                           .n_od_copies = c->n_od_copies,
                           .n_pf2_copies = c->n_pf2_copies,
                           .n_expert_moves = c->n_expert_moves,
                           .hot_measured = c->hot_pop ? c->hot_measured : -1,
                           .hot_assumed = tnd_hot_assumed(c),
                           .wall_s = c->busy_wall,
                           .busy_cpu_s = c->busy_cpu,
                           .busy_pcie_s = c->busy_pcie,
                           .busy_gpu_s = c->busy_gpu,
                           .gpu = tnd_backend_counters_get(c->gpu ? c->side[1].be : NULL)};
    for (int g = 0; g < 3; g++) {
        out->n_route_dec_g[g] = c->n_route_dec_g[g];
        out->n_route_dec_gpu_g[g] = c->n_route_dec_gpu_g[g];
    }
}

void tnd_ctx_token_bytes(const tnd_ctx *c, uint64_t *cpu, uint64_t *gpu, uint64_t *pcie) {
    tnd_layout_token_bytes(c, cpu, gpu, pcie);
}

int tnd_ctx_n_past(const tnd_ctx *c) { return c->n_past; }
uint64_t tnd_ctx_n_replans(const tnd_ctx *c) { return c->n_replans; }
int tnd_ctx_n_ctx(const tnd_ctx *c) { return c->n_ctx; }

tnd_status tnd_ctx_truncate(tnd_ctx *c, int n) {
    if (n < 0 || n > c->n_past) return tnd_fail(TND_ERR_ARG, "cannot truncate %d tokens to %d", c->n_past, n);
    c->n_past = n;
    return TND_OK;
}

/* One round: nt tokens at positions n_past..; logits of the last if asked,
 * into sequence 0's row of seq_logits (read from there: a decode step's
 * logits, 600 KB for a 152k vocabulary, are copied once on the host). */
static tnd_status round_forward(tnd_ctx *c, const int32_t *tokens, int nt, bool want_logits) {
    tnd_status st = emit_round(c, nt, c->n_past, want_logits);
    if (st) return st;
    int32_t *ids = c->side[0].act[A_IDS], *pos = c->side[0].act[A_POS];
    memcpy(ids, tokens, sizeof(int32_t) * (size_t)nt);
    for (int t = 0; t < nt; t++) pos[t] = c->n_past + t;
    double t0 = tnd_time_s();
    c->depth = c->n_past;
    if ((st = tnd_exec_round(c, nt, want_logits ? 1 : 0, want_logits ? c->seq_logits : NULL))) return st;
    if (c->verbose && c->perf) {
        double ms = 1e3 * (tnd_time_s() - t0);
        double pred = 1e3 * tnd_perf_predict(c->m, c->perf, &c->pl, c->lay.n_slots, nt, c->n_past);
        fprintf(stderr, "round of %d tokens: predicted %.2f ms, measured %.2f ms (%+.0f%%)\n", nt, pred, ms,
                100.0 * (ms - pred) / pred);
    }
    c->n_past += nt;
    /* between rounds: may move experts, or the weights (fail only if the context cannot go on) */
    if ((st = tnd_hot_after_round(c))) return st;
    return tnd_shared_after_round(c);
}

tnd_status tnd_ctx_eval(tnd_ctx *c, const int32_t *tokens, int n, float *logits) {
    if (n <= 0) return tnd_fail(TND_ERR_ARG, "no tokens to evaluate");
    if (c->seq[0].nq)
        return tnd_fail(TND_ERR_ARG, "sequence 0 has %d tokens queued (tnd_seq_feed): run tnd_ctx_step first",
                        c->seq[0].nq);
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
            if (done + nt == n) c->seq[0].has_logits = false; /* its row may hold the failed round's */
            return st;
        }
        done += nt;
    }
    if (logits) memcpy(logits, c->seq_logits, sizeof(float) * (size_t)c->m->hp.n_vocab);
    /* sequence 0 is in use now: tnd_seq_new hands out the other slots */
    c->seq[0].live = true;
    c->seq[0].has_logits = true;
    TND_DEBUG("eval %d tokens: %.2f ms, %llu switches, %llu activation copies, %llu weight copies (%.1f MiB), "
              "%llu matmul pairs",
              n, 1e3 * (tnd_time_s() - t0), (unsigned long long)(c->n_switch - sw0),
              (unsigned long long)(c->n_act_copies - ac0), (unsigned long long)(c->n_w_copies - wc0),
              (c->w_copy_bytes - wb0) / 1048576.0, (unsigned long long)(c->n_pairs - np0));
    return TND_OK;
}
