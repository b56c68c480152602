/* Plans: the placement, the memory layout and the perf DB behind them,
 * decided before anything big is allocated (tandem.h, tnd_plan_build). A
 * context runs one plan and can take another between rounds. */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

void tnd_plan_free(tnd_plan *pl) {
    if (!pl) return;
    tnd_placement_free(&pl->pl);
    tnd_perf *dbs[2] = {pl->perf, pl->perf_pred};
    for (int i = 0; i < 2; i++)
        if (dbs[i]) {
            tnd_perf_free(dbs[i]);
            free(dbs[i]);
        }
    free(pl->hw);
    free(pl);
}

/* A deep copy of a perf DB (NULL: NULL). */
static tnd_status perf_copy(const tnd_perf *src, tnd_perf **out) {
    *out = NULL;
    if (!src) return TND_OK;
    tnd_perf *d = tnd_calloc(1, sizeof *d);
    if (!d) return TND_ERR_NOMEM;
    *d = *src;
    d->t_cpu = d->t_gpu = d->t_cpu_one = d->pop = NULL;
    size_t nt = (size_t)src->n_slices * TND_PERF_NK + 1, ns = (size_t)src->n_slices + 1;
    size_t np = src->pop ? (size_t)src->n_layer * src->n_expert : 0;
    d->t_cpu = tnd_calloc(nt, sizeof(double));
    d->t_gpu = tnd_calloc(nt, sizeof(double));
    d->t_cpu_one = tnd_calloc(ns, sizeof(double));
    d->pop = np ? tnd_calloc(np, sizeof(double)) : NULL;
    if (!d->t_cpu || !d->t_gpu || !d->t_cpu_one || (np && !d->pop)) {
        tnd_perf_free(d);
        free(d);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    memcpy(d->t_cpu, src->t_cpu, sizeof(double) * (nt - 1));
    memcpy(d->t_gpu, src->t_gpu, sizeof(double) * (nt - 1));
    memcpy(d->t_cpu_one, src->t_cpu_one, sizeof(double) * (ns - 1));
    if (np) memcpy(d->pop, src->pop, sizeof(double) * np);
    *out = d;
    return TND_OK;
}

tnd_status tnd_plan_copy(const tnd_plan *src, tnd_plan **out) {
    tnd_plan *d = tnd_calloc(1, sizeof *d);
    if (!d) return TND_ERR_NOMEM;
    *d = *src;
    memset(&d->pl, 0, sizeof d->pl);
    d->perf = d->perf_pred = NULL;
    d->hw = NULL;
    tnd_status st = tnd_placement_copy(src->m, &src->pl, &d->pl);
    if (!st) st = perf_copy(src->perf, &d->perf);
    if (!st) st = perf_copy(src->perf_pred, &d->perf_pred);
    if (!st && src->hw && !(d->hw = strdup(src->hw))) st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (st) {
        tnd_plan_free(d);
        return st;
    }
    *out = d;
    return TND_OK;
}

/* Algorithm 1 for pl from its perf DB, within pl->wbudget (pl->stat and
 * what made it set): the placement and the promotions it leaves. */
static tnd_status place_static(tnd_plan *pl) {
    tnd_model *m = pl->m;
    const bool prom = strcmp(pl->promote, "none") != 0;
    tnd_status st = tnd_placement_make(m, "cpu", prom ? pl->promote : NULL, 0, 0, &pl->pl);
    if (!st)
        st = tnd_static_place(m, pl->perf, pl->wbudget, pl->kv_layer, pl->n_ctx, pl->n_batch, pl->n_seq_max, prom,
                              &pl->pl);
    for (int i = 0; !st && i < m->n_slices; i++)
        if (pl->pl.where[i] == TND_SIDE_GPU) pl->pl.promote[i] = 0;
    return st;
}

/* pl's layout for its placement, checked against pl->budget (verbose: printed). */
static tnd_status lay_out(tnd_plan *pl, bool verbose) {
    tnd_layout_compute(pl->m, &pl->pl, pl->n_ctx, pl->n_seq_max, pl->n_batch, pl->budget, pl->gpu, &pl->lay);
    if (verbose) {
        fprintf(stderr, "placement: %s\n", pl->pl.desc);
        tnd_layout_print(&pl->lay, stderr);
    }
    const tnd_layout *l = &pl->lay;
    if (pl->gpu && l->gpu_total > pl->budget)
        return tnd_fail(TND_ERR_NOMEM,
                        "placement '%s' needs %.1f MiB on the GPU (weights %.1f, KV cache %.1f, activations %.1f, "
                        "slots %.1f, scratch %.1f, norms %.1f) but the budget is %.1f MiB",
                        pl->pl.desc, l->gpu_total / 1048576.0, l->w_gpu / 1048576.0, l->kv_gpu / 1048576.0,
                        l->act_gpu / 1048576.0, l->slots_gpu / 1048576.0, l->scratch_gpu / 1048576.0,
                        l->small_gpu / 1048576.0, pl->budget / 1048576.0);
    return TND_OK;
}

tnd_status tnd_plan_replace(const tnd_plan *base, double lat, tnd_plan **out) {
    *out = NULL;
    if (!base->stat || !base->perf || !base->gpu)
        return tnd_fail(TND_ERR_ARG, "plan '%s' was not placed by Algorithm 1", base->pl.desc);
    tnd_plan *pl;
    tnd_status st = tnd_plan_copy(base, &pl);
    if (st) return st;
    pl->perf->lat = lat;
    tnd_placement_free(&pl->pl);
    if (!(st = place_static(pl))) st = lay_out(pl, false);
    if (st) {
        tnd_plan_free(pl);
        return st;
    }
    *out = pl;
    return TND_OK;
}

/* The perf DB for pl (tnd_perf_get); without the hot-expert table
 * (TND_ABLATE_HOT) it forgets the routing it measured, so every expert
 * counts as equally popular. */
static tnd_status perf_for(tnd_plan *pl, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu,
                           tnd_perf **out) {
    tnd_status st = tnd_perf_get(pl->m, p, cpu, gpu, out);
    if (!st && (pl->ablate & TND_ABLATE_HOT) && (*out)->pop) {
        free((*out)->pop);
        (*out)->pop = NULL;
    }
    return st;
}

/* Chooses the placement and the layout, checking it against the budget. */
static tnd_status plan_memory(tnd_plan *pl, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu,
                              const tnd_placement *fixed) {
    tnd_model *m = pl->m;
    uint64_t budget = 0;
    if (pl->gpu) {
        tnd_mem_info mi;
        tnd_backend_mem_info(gpu, &mi);
        budget = mi.budget ? mi.budget : UINT64_MAX / 4;
        pl->budget_asked = mi.budget;
    }
    const char *spec = p->placement ? p->placement : pl->gpu ? "static" : "cpu";
    /* a fixed placement brings its own promotions, and no slots: the
     * profile's steps decode (promote_auto would need the perf DB being built) */
    const char *promote = fixed ? NULL : p->promote;
    if (fixed && fixed->promote_auto) return tnd_fail(TND_ERR_ARG, "a fixed placement cannot promote automatically");
    bool stat = !strcmp(spec, "static");
    /* By default the measured placements promote where Algorithm 2 finds
     * it pays (sched/transfer.h), every round, decode included, from slots
     * that take at most a tenth of the budget (a slot holds the largest
     * candidate: a whole expert tensor for MoE models). */
    const bool dflt = !fixed && !promote && pl->gpu && (stat || !strcmp(spec, "layer"));
    if (dflt) promote = "auto";
    /* a layer's cache holds every sequence slot */
    uint64_t kv_layer = 2ull * (uint64_t)pl->n_seq_max * pl->n_ctx * (uint64_t)pl->kv_dim * sizeof(uint16_t);
    uint64_t wbudget = 0;
    tnd_status st;
    if (pl->gpu && (stat || !strcmp(spec, "layer"))) {
        /* what the GPU holds whatever the placement: activations, norms, scratch */
        tnd_placement all;
        if ((st = tnd_placement_make(m, "gpu", NULL, 0, 0, &all))) return st;
        tnd_layout l;
        tnd_layout_compute(m, &all, pl->n_ctx, pl->n_seq_max, pl->n_batch, budget, true, &l);
        tnd_placement_free(&all);
        /* + 4 MiB: the weight and KV arenas round up to 2 MiB pages */
        uint64_t fixed_bytes = l.act_gpu + l.small_gpu + l.scratch_gpu + (4u << 20);
        if (fixed_bytes <= budget && promote && strcmp(promote, "none")) {
            /* room for as many promotion slots (up to 3) as fit; none: no promotions */
            uint64_t big = 0, all = 0;
            for (int i = 0; i < m->n_slices; i++) {
                const tnd_weight *w = m->slices[i];
                if (tnd_slice_small(w)) continue;
                all += w->t->nbytes;
                if (w != &m->tok_embd && i != m->output.id && w->t->nbytes > big)
                    big = w->t->nbytes;
            }
            uint64_t slot = ((big + 255) & ~(uint64_t)255) + (2u << 20); /* page rounding */
            int k = big ? 3 : 0;
            while (k > 0 && fixed_bytes + k * slot > budget) k--;
            /* the default: no slots where the weights fit without them or would lose over a tenth */
            if (dflt && fixed_bytes + all + (4u << 20) <= budget) k = 0;
            while (dflt && k > 0 && k * slot > (budget - fixed_bytes) / 10) k--;
            if (!k && dflt) {
                promote = NULL;
            } else if (!k) {
                TND_WARN("no room for a promotion slot (%.1f MiB) within the GPU budget: no promotions",
                         slot / 1048576.0);
                promote = NULL;
            }
            fixed_bytes += k * slot;
        }
        wbudget = budget > fixed_bytes ? budget - fixed_bytes : 0;
        if (fixed_bytes > budget) {
            /* a policy, not a demand: fall back to the CPU, loudly */
            TND_WARN("the GPU budget (%.1f MiB) cannot hold even the activations and scratch the GPU "
                     "needs (%.1f MiB); running on the CPU only", budget / 1048576.0, fixed_bytes / 1048576.0);
            pl->gpu = false;
            gpu = NULL;
            budget = 0;
        }
    }
    if (fixed) {
        if ((st = tnd_placement_copy(m, fixed, &pl->pl))) return st;
    } else if (stat && pl->gpu) {
        /* promotions apply to what static placement leaves on the CPU */
        pl->stat = true;
        pl->wbudget = wbudget;
        pl->kv_layer = kv_layer;
        snprintf(pl->promote, sizeof pl->promote, "%s", promote ? promote : "none");
        if ((st = perf_for(pl, p, cpu, gpu, &pl->perf)) || (st = place_static(pl))) return st;
    } else if ((st = tnd_placement_make(m, stat ? "cpu" : spec, promote, wbudget, kv_layer, &pl->pl))) {
        return st;
    }
    if (pl->gpu && pl->pl.promote_auto && !pl->perf && (st = perf_for(pl, p, cpu, gpu, &pl->perf))) return st;
    if (!pl->gpu) {
        memset(pl->pl.where, 0, (size_t)m->n_slices);
        memset(pl->pl.kv, 0, (size_t)m->hp.n_layer);
        memset(pl->pl.promote, 0, (size_t)m->n_slices);
        memset(pl->pl.split, 0, (size_t)m->hp.n_layer);
    }
    pl->budget = budget;
    if ((st = lay_out(pl, p->verbose))) return st;
    /* predictions asked for where the placement needed no DB: one more
     * look-up (or profile), whose failure only leaves the plan without them */
    if (p->predict && pl->gpu && !pl->perf) {
        if (perf_for(pl, p, cpu, gpu, &pl->perf_pred)) tnd_clear_error();
    }
    return TND_OK;
}

/* The sizes a plan is made for: what tnd_ctx_new would accept. */
static tnd_status check_sizes(const tnd_model *m, const tnd_ctx_params *p) {
    if (p->n_ctx < 0 || p->n_batch < 0) return tnd_fail(TND_ERR_ARG, "context and batch sizes must be positive");
    if (p->n_seq_max < 0 || p->n_seq_max > TND_SEQ_MAX)
        return tnd_fail(TND_ERR_ARG, "n_seq_max %d out of range [0, %d]", p->n_seq_max, TND_SEQ_MAX);
    if (p->n_ctx > m->hp.n_ctx_train) /* as tnd_ctx_new: a plan must be one that can run */
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", p->n_ctx,
                        m->hp.n_ctx_train);
    return TND_OK;
}

tnd_status tnd_plan_make(tnd_model *m, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu,
                         const tnd_placement *fixed, tnd_plan **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    tnd_status cs = check_sizes(m, p);
    if (cs) return cs;
    tnd_plan *pl = tnd_calloc(1, sizeof *pl);
    if (!pl) return TND_ERR_NOMEM;
    pl->m = m;
    pl->device = p->device;
    pl->vram_budget = p->vram_budget;
    pl->cpu_exact = p->cpu_exact;
    pl->n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(m->hp.n_ctx_train, 4096);
    pl->n_seq_max = p->n_seq_max ? p->n_seq_max : 1;
    pl->n_batch = tnd_round_cap(p->n_batch, pl->n_ctx, pl->n_seq_max);
    pl->kv_dim = (int64_t)m->hp.n_head_kv * m->hp.head_dim;
    pl->gpu = gpu != NULL;
    pl->ablate = p->moe_ablate;
    pl->presched = p->moe_presched;
    tnd_status st = TND_OK;
    if (p->hw && !(pl->hw = strdup(p->hw))) st = tnd_fail(TND_ERR_NOMEM, "out of memory");
    if (!st) st = plan_memory(pl, p, cpu, gpu, fixed);
    snprintf(pl->gpu_name, sizeof pl->gpu_name, "%s", pl->gpu ? tnd_backend_name(gpu) : "cpu");
    if (st) {
        tnd_plan_free(pl);
        return st;
    }
    *out = pl;
    return TND_OK;
}

tnd_status tnd_plan_build(tnd_model *m, const tnd_ctx_params *p, tnd_plan **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    /* sizes first: the backends (a CUDA context) take a while to start */
    tnd_status st = check_sizes(m, p);
    if (st) return st;
    /* backends only to plan with: the GPU's budget, and a perf DB measured
     * on them when none is cached */
    tnd_ctx *c = NULL;
    st = tnd_ctx_new_bare(m, p, &c);
    if (!st) st = tnd_plan_make(m, p, c->side[0].be, c->gpu ? c->side[1].be : NULL, NULL, out);
    tnd_ctx_free(c);
    return st;
}

tnd_model *tnd_plan_model(const tnd_plan *pl) { return pl->m; }
const tnd_placement *tnd_plan_placement(const tnd_plan *pl) { return &pl->pl; }
const tnd_layout *tnd_plan_layout(const tnd_plan *pl) { return &pl->lay; }
bool tnd_plan_gpu(const tnd_plan *pl) { return pl->gpu; }
const char *tnd_plan_device_name(const tnd_plan *pl) { return pl->gpu_name; }
int tnd_plan_n_ctx(const tnd_plan *pl) { return pl->n_ctx; }
int tnd_plan_n_batch(const tnd_plan *pl) { return pl->n_batch; }
uint64_t tnd_plan_budget_asked(const tnd_plan *pl) { return pl->budget_asked; }
const tnd_perf *tnd_plan_perf(const tnd_plan *pl) { return pl->perf ? pl->perf : pl->perf_pred; }

tnd_perf *tnd_plan_take_perf(tnd_plan *pl) {
    tnd_perf **at = pl->perf ? &pl->perf : &pl->perf_pred, *pf = *at;
    *at = NULL;
    return pf;
}

double tnd_plan_predict(const tnd_plan *pl, const tnd_perf *pf, int nt, int pos0) {
    if (!pf) pf = tnd_plan_perf(pl);
    return pf ? tnd_perf_predict(pl->m, pf, &pl->pl, pl->lay.n_slots, nt, pos0) : 0;
}
