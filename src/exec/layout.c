/* Memory layout (docs/ARCHITECTURE.md: Memory layout): what goes where on each side, computed
 * before anything big is allocated (so `tandem plan` and `run --dry-run`
 * can print it), then allocated in one go.
 *
 * GPU: resident slices, replicated small slices, KV cache of GPU layers,
 * activation buffers, promotion slots, op scratch. Host: the non-resident
 * slices pinned (the CPU computes from them and promoted slices are copied
 * out at the copy engine's pinned rate), either where the model's file is
 * mapped or copied into a pinned store (weights_in_place decides), pinned
 * activation buffers mapped into the GPU, the KV cache of CPU layers. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "exec/exec.h"
#include "sched/perf.h"
#include "util.h"

#define ALIGN256(x) (((x) + 255) & ~(uint64_t)255)

/* What a device allocation of n bytes costs against the budget: the CUDA
 * backend counts what the driver maps (2 MiB pages for large buffers), so
 * the layout does too, and keeps the number of allocations small (one
 * arena for the resident weights, one for the KV caches). */
static uint64_t dev_cost(uint64_t n) {
    if (!n) return 0;
    n = (n + 15) & ~(uint64_t)15;
    if (n >= (1u << 20)) return (n + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    return (n + 511) & ~(uint64_t)511;
}
#define MIB (1024.0 * 1024.0)
/* Promotion slots wanted: two lets a copy overlap the op before it, three
 * keeps the copy engine busy across a short op. */
#define WANT_SLOTS 3

int tnd_logit_rows(int nb, int n_seq) { return TND_MAX(TND_MIN(nb, n_seq), 1); }

void tnd_act_sizes(const tnd_hparams *hp, int nb, int n_seq, size_t sz[A_COUNT]) {
    int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t used = hp->n_expert ? hp->n_expert_used : 1, ff = hp->n_expert ? hp->n_ff_exp : hp->n_ff;
    size_t f = sizeof(float);
    size_t s[A_COUNT] = {
        [A_X] = f * nb * E, [A_H] = f * nb * E, [A_Q] = f * nb * qd, [A_K] = f * nb * kvd,
        [A_V] = f * nb * kvd, [A_ATT] = f * nb * qd, [A_O] = f * nb * E,
        [A_G] = f * nb * used * ff, [A_U] = f * nb * used * ff,
        [A_EY] = hp->n_expert ? f * nb * used * E : 0, [A_RL] = f * nb * hp->n_expert,
        [A_RW] = hp->n_expert ? f * nb * used : 0, [A_RI] = hp->n_expert ? sizeof(int32_t) * nb * used : 0,
        [A_PR] = hp->n_expert ? f * TND_PREDICT_MAX_TOK * (size_t)(hp->n_expert + 2 * used) : 0,
        [A_PR2] = hp->n_expert ? f * TND_PREDICT_MAX_TOK * (size_t)(hp->n_expert + 2 * used) : 0,
        [A_RIC] = hp->n_expert ? sizeof(int32_t) * nb * used : 0, [A_RIG] = hp->n_expert ? sizeof(int32_t) * nb * used : 0,
        /* logits only for each sequence's last token of the round (model/forward.c) */
        [A_IDS] = sizeof(int32_t) * nb, [A_POS] = sizeof(int32_t) * nb, [A_ROW] = sizeof(int32_t) * nb,
        [A_LOGITS] = f * hp->n_vocab * (size_t)tnd_logit_rows(nb, n_seq),
    };
    memcpy(sz, s, sizeof s);
}

/* Scratch a GPU matmul over w needs for nb tokens (the CUDA backend's
 * formulas, rounded up: prefill dequantizes 4096-row chunks to f16). */
static uint64_t matmul_scratch(const tnd_weight *w, int nb, int n_used) {
    if (nb <= 8) return 0;
    uint64_t rows = w->n_out < 4096 ? (uint64_t)w->n_out : 4096;
    if (w->n_expert > 1) {
        uint64_t pairs = (uint64_t)nb * (uint64_t)n_used, used = TND_MIN(pairs, (uint64_t)w->n_expert);
        uint64_t run = (uint64_t)tnd_mmid_run_experts(w->n_in, w->n_out, w->n_expert, (int64_t)pairs);
        return ALIGN256(pairs * 8 + used * 3 * sizeof(void *)) + ALIGN256(pairs * w->n_in * 2) +
               ALIGN256(pairs * w->n_out * 4) + ALIGN256(run * w->n_out * w->n_in * 2);
    }
    return ALIGN256((uint64_t)nb * w->n_in * 2) + ALIGN256(rows * w->n_in * 2);
}

/* What an expert matmul that skips ids needs (split layers): the CUDA
 * pair kernels (up to TND_MMID_PAIRS_MAX_TOK tokens) compute into a
 * temporary [pairs][n_out] and copy the kept rows; the grouped prefill path
 * writes the kept rows itself, and its scratch holds the largest such
 * temporary too. */
static uint64_t skip_scratch(const tnd_weight *w, int nb, int n_used) {
    return nb <= TND_MMID_PAIRS_MAX_TOK ? ALIGN256((uint64_t)nb * (uint64_t)n_used * (uint64_t)w->n_out * 4) : matmul_scratch(w, nb, n_used);
}

/* The weights pinned where they are rather than in a store (the layout's
 * in_place, which lock_weights below follows): for a CPU share (cpu bytes) of at least half of them (all
 * bytes), as pinning runs at 1.7-2.8 GB/s either way (the H200's host); and
 * not where they would take over half the machine's memory (locked pages
 * cannot be reclaimed). */
static bool weights_in_place(uint64_t cpu, uint64_t all) {
    const uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    return cpu && 2 * cpu >= all && all <= ram / 2;
}

void tnd_layout_compute(const tnd_model *m, const tnd_placement *p, int n_ctx, int n_seq, int nb,
                        uint64_t budget, bool gpu, tnd_layout *l) {
    const tnd_hparams *hp = &m->hp;
    memset(l, 0, sizeof *l);
    l->budget = budget;
    n_seq = TND_MAX(n_seq, 1);
    /* every sequence slot has its n_ctx rows in each layer's cache */
    uint64_t kv_layer = 2ull * (uint64_t)n_seq * n_ctx * hp->n_head_kv * hp->head_dim * sizeof(uint16_t);
    size_t sz[A_COUNT];
    tnd_act_sizes(hp, nb, n_seq, sz);
    uint64_t act = 0, store = 0, scratch = 0, all = 0;
    for (int i = 0; i < A_COUNT; i++) act += dev_cost(sz[i]);
    for (int il = 0; il < hp->n_layer; il++) *(p->kv[il] ? &l->kv_gpu : &l->kv_cpu) += kv_layer;
    int n_used = hp->n_expert ? hp->n_expert_used : 1;
    for (int i = 0; i < m->n_slices; i++) {
        const tnd_weight *w = m->slices[i];
        uint64_t b = ALIGN256(w->t->nbytes);
        all += w->t->nbytes;
        if (tnd_slice_small(w)) {
            l->small_gpu += gpu ? b : 0;
            continue;
        }
        bool split = tnd_slice_split(m, p, i, NULL);
        if (p->where[i] == TND_SIDE_GPU) l->w_gpu += b;
        else store += b; /* a split tensor: whole in the store, its GPU experts also in the arena */
        if (split) l->w_gpu += ALIGN256(tnd_slice_gpu_bytes(m, p, i));
        if (p->promote[i] && b > l->slot_bytes) l->slot_bytes = b;
        if ((p->where[i] == TND_SIDE_GPU || p->promote[i] || split) && w != &m->tok_embd) {
            /* the output head reads one row per round (model/forward.c: logits only where read) */
            int rows = w == &m->output ? 1 : nb;
            uint64_t s = split ? skip_scratch(w, rows, n_used) : matmul_scratch(w, rows, n_used);
            if (s > scratch) scratch = s;
        }
    }
    if (!gpu) {
        l->kv_cpu += l->kv_gpu;
        l->kv_gpu = 0;
        return;
    }
    /* attention splits: n_tok * n_head * splits * (head_dim + 2) floats, the
     * backend splitting to keep ~264 blocks busy: n_tok * splits <= nb + 264 */
    uint64_t att = (uint64_t)(nb + 264) * hp->n_head * (hp->head_dim + 2) * 4;
    if (att > scratch) scratch = att;
    l->act_gpu = act;
    /* + the cuBLAS workspace and the handle's own memory (64 MiB measured on
     * the H200; the CUDA backend charges what the driver reports) */
    l->scratch_gpu = dev_cost(scratch) + dev_cost(32u << 20) + (64u << 20);
    l->in_place = weights_in_place(store, all);
    l->pinned_host = (l->in_place ? all : store) + act;
    /* the arenas' page rounding is counted with the weights and the caches */
    l->w_gpu = dev_cost(l->w_gpu + l->small_gpu) - l->small_gpu;
    l->kv_gpu = dev_cost(l->kv_gpu);
    uint64_t fixed = l->w_gpu + l->small_gpu + l->kv_gpu + l->act_gpu + l->scratch_gpu;
    if (l->slot_bytes) {
        l->n_slots = WANT_SLOTS;
        while (l->n_slots > 1 && fixed + l->n_slots * dev_cost(l->slot_bytes) > budget) l->n_slots--;
        l->slots_gpu = l->n_slots * dev_cost(l->slot_bytes);
    }
    l->gpu_total = fixed + l->slots_gpu;
}

void tnd_layout_print(const tnd_layout *l, FILE *f) {
    fprintf(f, "memory layout:\n");
    if (l->budget || l->gpu_total) {
        /* plan_memory's stand-in for "no limit" (SimGPU without --hw or a budget) */
        if (l->budget >= UINT64_MAX / 4) fprintf(f, "  GPU budget           unlimited (SimGPU without --hw or --vram-budget)\n");
        else fprintf(f, "  GPU budget          %10.1f MiB\n", l->budget / MIB);
        fprintf(f, "    resident weights  %10.1f MiB\n", l->w_gpu / MIB);
        fprintf(f, "    norms and biases  %10.1f MiB\n", l->small_gpu / MIB);
        fprintf(f, "    KV cache          %10.1f MiB\n", l->kv_gpu / MIB);
        fprintf(f, "    activations       %10.1f MiB\n", l->act_gpu / MIB);
        fprintf(f, "    promotion slots   %10.1f MiB (%d x %.1f MiB)\n", l->slots_gpu / MIB, l->n_slots,
                l->slot_bytes / MIB);
        fprintf(f, "    op scratch        %10.1f MiB\n", l->scratch_gpu / MIB);
        if (l->budget >= UINT64_MAX / 4) fprintf(f, "    total             %10.1f MiB\n", l->gpu_total / MIB);
        else fprintf(f, "    total             %10.1f MiB (%.1f%% of the budget)\n", l->gpu_total / MIB,
                     l->budget ? 100.0 * (double)l->gpu_total / (double)l->budget : 0.0);
        fprintf(f, "  host pinned         %10.1f MiB (%s, activations)\n", l->pinned_host / MIB,
                l->in_place ? "the weights where they are" : "a store of the CPU's weights");
    }
    fprintf(f, "  host KV cache       %10.1f MiB\n", l->kv_cpu / MIB);
}

/* ---- allocation ------------------------------------------------------------ */

static tnd_status gpu_alloc(tnd_ctx *c, size_t n, void **out, const char *what) {
    tnd_status st = tnd_backend_buf_alloc(c->side[1].be, n, out);
    return st ? tnd_fail_wrap(st, "%s: ", what) : TND_OK;
}

/* A pinning that failed: the first of a context warns (what it costs), the
 * others are logged at debug level only; the caller falls back to pageable
 * memory. */
static void pin_failed(tnd_ctx *c, const char *what, uint64_t bytes) {
    if (c->pin_warned) {
        TND_DEBUG("could not pin %.1f MiB for the %s either (%s)", bytes / MIB, what, tnd_last_error());
    } else {
        TND_WARN("could not pin %.1f MiB of host memory for the %s (%s); using pageable memory "
                 "instead: copies between the CPU and the GPU run several times slower",
                 bytes / MIB, what, tnd_last_error());
        c->pin_warned = true;
    }
    tnd_clear_error();
}

static tnd_status alloc_acts(tnd_ctx *c) {
    tnd_backend *g = c->gpu ? c->side[1].be : NULL;
    bool pageable = false; /* once one buffer could not be pinned, none is tried again */
    for (int i = 0; i < A_COUNT; i++) {
        size_t n = c->act_size[i];
        if (!n) continue;
        tnd_status st;
        if (g) {
            if (!pageable && tnd_backend_host_alloc(g, n, &c->side[0].act[i], &c->act_dev[i])) {
                uint64_t all = 0;
                for (int j = 0; j < A_COUNT; j++) all += c->act_size[j];
                pin_failed(c, "activations", all);
                pageable = true;
                c->side[0].act[i] = c->act_dev[i] = NULL;
            }
            /* pageable: the executor copies these with copy_h2d/d2h (act_dev NULL) */
            if (pageable && (st = tnd_backend_buf_alloc(c->side[0].be, n, &c->side[0].act[i])))
                return tnd_fail_wrap(st, "activation buffers: ");
            if ((st = gpu_alloc(c, n, &c->side[1].act[i], "GPU activation buffers"))) return st;
            /* a split layer's CPU part runs SILU_MUL over the rows the GPU's
             * part computes elsewhere too (unused): never over undefined bytes */
            memset(c->side[0].act[i], 0, n);
        } else {
            if ((st = tnd_backend_buf_alloc(c->side[0].be, n, &c->side[0].act[i])))
                return tnd_fail_wrap(st, "activation buffers: ");
        }
    }
    return TND_OK;
}

static tnd_status alloc_kv(tnd_ctx *c) {
    const tnd_hparams *hp = &c->m->hp;
    /* per layer: n_seq_max slots of n_ctx rows (the recipe's kv_canon) */
    size_t per = (size_t)c->n_seq_max * (size_t)c->n_ctx * (size_t)c->kv_dim * sizeof(uint16_t);
    c->kv_canon_bytes = 2 * (size_t)hp->n_layer * per;
    /* The canonical cache is a reservation: pages of GPU layers are never
     * touched, so they cost no memory; CPU layers compute in place. */
    void *r = mmap(NULL, c->kv_canon_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return tnd_fail(TND_ERR_NOMEM, "cannot reserve %.1f MiB for the KV cache", c->kv_canon_bytes / MIB);
#ifdef MADV_HUGEPAGE
    /* 2 MiB pages where the kernel has them (THP "madvise" or "always"):
     * attention reads a kv head's rows n_kv_head * head_dim * 2 bytes
     * apart, which on 4 KiB pages costs a TLB miss every few rows
     * (decode at depth 4096 of the default model, 2-core Zen 5: 108-119 ->
     * 124-131 tok/s). Pages are still committed only when written, and a
     * region's first write commits at most 2 MiB more than before. */
    madvise(r, c->kv_canon_bytes, MADV_HUGEPAGE); /* advice: a kernel without it keeps 4 KiB pages */
#endif
    c->kv_canon = r;
    c->kv_addr = tnd_calloc(2 * (size_t)hp->n_layer, sizeof *c->kv_addr);
    if (!c->kv_addr) return TND_ERR_NOMEM;
    int n_gpu = 0;
    for (int l = 0; c->gpu && l < hp->n_layer; l++) n_gpu += c->pl.kv[l] == TND_SIDE_GPU;
    if (n_gpu) {
        tnd_status st = gpu_alloc(c, 2 * (size_t)n_gpu * per, &c->kv_arena, "KV cache");
        if (st)
            return tnd_fail_wrap(st, "%d GPU layers x %d sequences x %d tokens of context: ", n_gpu, c->n_seq_max,
                                 c->n_ctx);
    }
    char *next = c->kv_arena;
    for (int l = 0; l < hp->n_layer; l++) {
        for (int kv = 0; kv < 2; kv++) {
            char *canon = (char *)c->kv_canon + ((size_t)kv * hp->n_layer + (size_t)l) * per;
            if (c->pl.kv[l] == TND_SIDE_CPU || !c->gpu) {
                c->kv_addr[2 * l + kv] = canon;
            } else {
                c->kv_addr[2 * l + kv] = next;
                next += per;
            }
        }
    }
    return TND_OK;
}

/* True for a slice that only TND_OP_MATMUL reads, so that a backend may
 * re-lay it at upload (weight_prepare): the recipe (model/forward.c) reads
 * every 2-D slice through op_matmul except the embedding table (GET_ROWS,
 * and the tied output head is the same slice) and expert tensors
 * (MATMUL_ID, copied per expert for split layers). 1-D slices are norms
 * and biases. Promotion slots are refilled raw each round and never pass
 * here. A recipe that reads such a slice otherwise fails loudly in the
 * backend, never silently. */
static bool slice_matmul_only(const tnd_model *m, int sid) {
    const tnd_weight *w = m->slices[sid];
    return !tnd_slice_small(w) && w->n_expert <= 1 && w != &m->tok_embd && sid != m->tok_embd.id;
}

/* Pinning runs at 1.7-2.8 GB/s: seconds for big models, said first (as
 * the profile says it measures) unless the log is silenced. */
static void pin_notice(uint64_t bytes, const char *how) {
    if (bytes >= (2ull << 30) && tnd_log_level() >= TND_LOG_WARN)
        fprintf(stderr, "tandem: pinning %.1f GiB of weights %s for copies to the GPU\n", bytes / (MIB * 1024), how);
}

/* The pinned store's pieces freed (pin_of cleared with them). */
static void free_pieces(tnd_ctx *c) {
    for (int i = 0; i < c->n_pins; i++) tnd_backend_host_free(c->side[1].be, c->pins[i]);
    c->n_pins = 0;
    if (c->pin_of) memset(c->pin_of, 0, sizeof(void *) * (size_t)c->m->n_slices);
}

/* The model's weights pinned where they are (host_register; exec.h:
 * w_locked), as the layout chose (weights_in_place): the CPU computes from
 * them as without a GPU, copies to the GPU read them at the pinned rate, no
 * store is filled, and a plan swap pins nothing. Pieces of a store an
 * earlier plan pinned go. A backend that refuses is not asked again. */
static void lock_weights(tnd_ctx *c) {
    const tnd_model *m = c->m;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < m->n_slices; i++) {
        const uintptr_t a = (uintptr_t)m->slices[i]->data;
        lo = TND_MIN(lo, a);
        hi = TND_MAX(hi, a + m->slices[i]->t->nbytes);
    }
    if (hi <= lo) return;
    lo &= ~(pg - 1);
    hi = (hi + pg - 1) & ~(pg - 1);
    /* a second context of the model only counts the registration: no notice */
    if (!tnd_backend_host_registered(c->side[1].be, (void *)lo, hi - lo)) pin_notice(hi - lo, "where they are");
    const double t0 = tnd_time_s();
    if (tnd_backend_host_register(c->side[1].be, (void *)lo, hi - lo)) {
        TND_DEBUG("weights not pinned in place (%s): a pinned store", tnd_last_error());
        tnd_clear_error();
        c->lock_refused = true;
        return;
    }
    c->w_locked = (void *)lo;
    TND_DEBUG("weights: %.1f MiB pinned in place in %.2f s", (hi - lo) / MIB, tnd_time_s() - t0);
    free_pieces(c);
}

static tnd_status alloc_weights(tnd_ctx *c) {
    const tnd_model *m = c->m;
    int n = m->n_slices;
    c->w[0] = tnd_calloc((size_t)n, sizeof(void *));
    c->w[1] = tnd_calloc((size_t)n, sizeof(void *));
    if (!c->w[0] || !c->w[1]) return TND_ERR_NOMEM;
    for (int i = 0; i < n; i++) c->w[0][i] = m->slices[i]->data;
    if (!c->gpu) return TND_OK;
    tnd_backend *g = c->side[1].be;
    /* the CPU's slices pinned in place (lock_weights), or else the pinned
     * host store: every slice the GPU does not hold; those an earlier plan
     * pinned keep their copies (plan swaps), the rest get a new piece */
    if (c->n_pins == TND_MAX_PINS) tnd_layout_free_pins(c); /* many swaps: start over */
    if (!c->pin_of && !(c->pin_of = tnd_calloc((size_t)n, sizeof(void *)))) return TND_ERR_NOMEM;
    uint64_t store = 0;
    if (c->lay.in_place && !c->w_locked && !c->lock_refused) lock_weights(c);
    for (int i = 0; i < n && !c->w_locked; i++) {
        if (tnd_slice_small(m->slices[i]) || c->pl.where[i] != TND_SIDE_CPU) continue;
        if (c->pin_of[i]) c->w[0][i] = c->pin_of[i];
        else store += ALIGN256(m->slices[i]->t->nbytes);
    }
    if (store) {
        void *host, *dev;
        pin_notice(store, "in a host store");
        const double tp = tnd_time_s();
        tnd_status st = tnd_backend_host_alloc(g, store, &host, &dev);
        if (st) {
            pin_failed(c, "weight store", store);
        } else {
            double t0 = tnd_time_s();
            c->pins[c->n_pins++] = host;
            uint64_t off = 0;
            for (int i = 0; i < n; i++) {
                const tnd_weight *w = m->slices[i];
                if (tnd_slice_small(w) || c->pl.where[i] != TND_SIDE_CPU || c->pin_of[i]) continue;
                memcpy((char *)host + off, w->data, w->t->nbytes);
                c->w[0][i] = c->pin_of[i] = (char *)host + off;
                off += ALIGN256(w->t->nbytes);
            }
            TND_DEBUG("pinned store: %.1f MiB pinned in %.2f s, filled in %.2f s", store / MIB, t0 - tp,
                      tnd_time_s() - t0);
        }
    }
    uint64_t arena = 0;
    for (int i = 0; i < n; i++)
        if (tnd_slice_small(m->slices[i]) || c->pl.where[i] == TND_SIDE_GPU) arena += ALIGN256(m->slices[i]->t->nbytes);
        else if (tnd_slice_split(m, &c->pl, i, NULL)) arena += ALIGN256(tnd_slice_gpu_bytes(m, &c->pl, i));
    const double tu = tnd_time_s();
    tnd_status st = arena ? tnd_backend_buf_alloc(g, arena, &c->w_arena) : TND_OK;
    if (st) return tnd_fail_wrap(st, "resident weights (%.1f MiB): ", arena / MIB);
    char *next = c->w_arena;
    for (int i = 0; i < n; i++) {
        const tnd_weight *w = m->slices[i];
        int l;
        if (tnd_slice_split(m, &c->pl, i, &l)) {
            /* Only the GPU's experts, compacted in expert order: the executor
             * remaps routing ids to these compact indices (A_RIG), so the
             * kernels see an ordinary smaller expert tensor; a per-expert
             * pointer table would need new kernel arguments on every backend. */
            size_t at = 0;
            st = tnd_copy_experts(g, next, w->data, w->t->nbytes, w->n_expert, c->pl.exp + (size_t)l * c->pl.n_expert,
                                  TND_SIDE_GPU, true, c->side[1].st, &at);
            if (st) return st;
            c->w[1][i] = next;
            next += ALIGN256(at);
            continue;
        }
        if (!tnd_slice_small(w) && c->pl.where[i] != TND_SIDE_GPU) continue;
        /* from a pinned copy where an earlier plan made one: the copy engine reads it at full speed */
        const void *src = c->pin_of[i] ? c->pin_of[i] : w->data;
        if ((st = tnd_backend_copy_h2d(g, next, src, w->t->nbytes, c->side[1].st))) return st;
        /* the backend may re-lay a weight that only dense matmuls read (CUDA: Q4_K tiles) */
        if (g->iface->weight_prepare && slice_matmul_only(m, i)) {
            tnd_tensor t = {next, w->type, {w->n_in, w->n_out, 1, 1}};
            if ((st = tnd_backend_weight_prepare(g, &t, c->side[1].st)))
                return tnd_fail_wrap(st, "%.*s: ", (int)w->t->name.len, w->t->name.ptr);
        }
        c->w[1][i] = next;
        next += ALIGN256(w->t->nbytes);
    }
    st = tnd_backend_stream_sync(g, c->side[1].st);
    TND_DEBUG("resident weights: %.1f MiB allocated and uploaded in %.2f s", arena / MIB, tnd_time_s() - tu);
    return st;
}

tnd_status tnd_copy_experts(tnd_backend *g, void *dst, const void *src, size_t nbytes, int64_t n_expert,
                            const uint8_t *mark, uint8_t want, bool compact, tnd_stream *st, size_t *copied) {
    size_t per = nbytes / (size_t)n_expert, at = 0;
    for (int64_t e = 0; e < n_expert;) { /* one copy per run of marked experts */
        if (mark[e] != want) {
            e++;
            continue;
        }
        int64_t e1 = e;
        while (e1 < n_expert && mark[e1] == want) e1++;
        size_t n = (size_t)(e1 - e) * per;
        tnd_status s = tnd_backend_copy_h2d(g, (char *)dst + (compact ? at : (size_t)e * per),
                                          (const char *)src + (size_t)e * per, n, st);
        if (s) return s;
        at += n;
        e = e1;
    }
    *copied = at;
    return TND_OK;
}

static tnd_status alloc_slots(tnd_ctx *c) {
    tnd_backend *g = c->side[1].be;
    c->ring_bytes = (uint64_t)c->lay.n_slots * c->lay.slot_bytes;
    tnd_status st = gpu_alloc(c, c->ring_bytes, &c->ring, "promotion slots");
    for (int i = 0; !st && i < TND_RING_EV; i++)
        if (!(st = tnd_backend_event_new(g, &c->slot_ready[i])) && !(st = tnd_backend_event_new(g, &c->slot_free[i])))
            st = tnd_backend_event_new(g, &c->copy_start[i]);
    return st;
}

/* Compact GPU index of each expert of a split layer (the arena's order). */
static tnd_status alloc_expert_map(tnd_ctx *c) {
    const tnd_placement *p = &c->pl;
    int L = p->n_layer, E = p->n_expert;
    bool any = false;
    for (int l = 0; p->split && l < L; l++) any |= p->split[l] != 0;
    if (!any || !E) return TND_OK;
    if (!(c->exp_gpu = tnd_calloc((size_t)L * E, sizeof *c->exp_gpu))) return TND_ERR_NOMEM;
    for (int l = 0; l < L; l++)
        for (int e = 0, k = 0; e < E; e++) {
            bool g = p->split[l] && p->exp[(size_t)l * E + e] == TND_SIDE_GPU;
            c->exp_gpu[(size_t)l * E + e] = g ? k++ : -1;
        }
    return TND_OK;
}

static int reg_cmp(const void *a, const void *b) {
    const tnd_region *x = a, *y = b;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* The canonical address ranges the executor rebases. */
static tnd_status build_regions(tnd_ctx *c) {
    const tnd_model *m = c->m;
    c->reg = tnd_calloc((size_t)(A_COUNT + 2 + m->n_slices), sizeof *c->reg);
    if (!c->reg) return TND_ERR_NOMEM;
    int n = 0;
    for (int i = 0; i < A_COUNT; i++)
        if (c->act_size[i]) c->reg[n++] = (tnd_region){c->side[0].act[i], c->act_size[i], R_ACT, i};
    size_t half = c->kv_canon_bytes / 2;
    c->reg[n++] = (tnd_region){(const char *)c->kv_canon, half, R_KV, 0};
    c->reg[n++] = (tnd_region){(const char *)c->kv_canon + half, half, R_KV, 1};
    for (int i = 0; i < m->n_slices; i++)
        c->reg[n++] = (tnd_region){m->slices[i]->data, m->slices[i]->t->nbytes, R_WEIGHT, i};
    qsort(c->reg, (size_t)n, sizeof *c->reg, reg_cmp);
    /* tied slices share one id; distinct ranges must not overlap */
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && c->reg[i].base == c->reg[k - 1].base && c->reg[i].size == c->reg[k - 1].size) continue;
        if (k && c->reg[i].base < c->reg[k - 1].base + c->reg[k - 1].size)
            return tnd_fail(TND_ERR_FORMAT, "overlapping tensors in the model file");
        c->reg[k++] = c->reg[i];
    }
    c->n_reg = k;
    return TND_OK;
}

tnd_status tnd_layout_alloc(tnd_ctx *c) {
    tnd_act_sizes(&c->m->hp, c->n_batch, c->n_seq_max, c->act_size);
    tnd_status st;
    const double t0 = tnd_time_s();
    if ((st = alloc_acts(c))) return st;
    const double t1 = tnd_time_s();
    if ((st = alloc_kv(c))) return st;
    const double t2 = tnd_time_s();
    if ((st = alloc_weights(c))) return st;
    TND_DEBUG("layout: activations %.0f ms, KV caches %.0f ms, weights %.0f ms", 1e3 * (t1 - t0), 1e3 * (t2 - t1),
              1e3 * (tnd_time_s() - t2));
    if (c->gpu) {
        tnd_backend *g = c->side[1].be;
        if ((st = tnd_backend_event_new(g, &c->sync_ev))) return st;
        for (int i = 0; i < A_COUNT; i++)
            if (c->act_size[i] && (st = tnd_backend_event_new(g, &c->host_read[i]))) return st;
        if (c->lay.n_slots && (st = alloc_slots(c))) return st;
        if ((st = tnd_backend_event_new(g, &c->mapped_ev))) return st;
        if ((st = alloc_expert_map(c)) || (st = tnd_pf_init(c))) return st;
    }
    return build_regions(c);
}

void tnd_layout_free_pins(tnd_ctx *c) {
    free_pieces(c);
    if (c->w_locked) tnd_backend_host_unregister(c->side[1].be, c->w_locked);
    c->w_locked = NULL;
    c->lock_refused = false;
    free(c->pin_of);
    c->pin_of = NULL;
}

static void layout_free(tnd_ctx *c, bool keep_pins) {
    tnd_backend *g = c->gpu ? c->side[1].be : NULL;
    for (int s = 0; s < 2; s++) {
        tnd_backend *b = c->side[s].be;
        if (!b) continue;
        for (int i = 0; i < A_COUNT; i++) {
            if (!c->side[s].act[i]) continue;
            if (s == 0 && g && c->act_dev[i]) tnd_backend_host_free(g, c->side[0].act[i]);
            else tnd_backend_buf_free(b, c->side[s].act[i]);
        }
    }
    if (g) {
        tnd_backend_buf_free(g, c->kv_arena);
        tnd_backend_buf_free(g, c->w_arena);
        if (!keep_pins) tnd_layout_free_pins(c);
        if (c->ring) tnd_backend_buf_free(g, c->ring);
        for (int i = 0; i < TND_RING_EV; i++) {
            if (c->slot_ready[i]) tnd_backend_event_free(g, c->slot_ready[i]);
            if (c->slot_free[i]) tnd_backend_event_free(g, c->slot_free[i]);
            if (c->copy_start[i]) tnd_backend_event_free(g, c->copy_start[i]);
        }
        for (int i = 0; i < A_COUNT; i++)
            if (c->host_read[i]) tnd_backend_event_free(g, c->host_read[i]);
        if (c->sync_ev) tnd_backend_event_free(g, c->sync_ev);
        if (c->mapped_ev) tnd_backend_event_free(g, c->mapped_ev);
    }
    tnd_pf_free(c);
    free(c->exp_gpu);
    if (c->kv_canon) munmap(c->kv_canon, c->kv_canon_bytes);
    free(c->kv_addr);
    free(c->w[0]);
    free(c->w[1]);
    free(c->reg);
}

void tnd_layout_free(tnd_ctx *c) { layout_free(c, false); }

void tnd_layout_release(tnd_ctx *c, bool keep_pins) {
    layout_free(c, keep_pins);
    for (int s = 0; s < 2; s++) memset(c->side[s].act, 0, sizeof c->side[s].act);
    memset(c->act_size, 0, sizeof c->act_size);
    memset(c->act_dev, 0, sizeof c->act_dev);
    memset(c->valid, 0, sizeof c->valid);
    memset(c->wlen, 0, sizeof c->wlen);
    memset(c->host_read, 0, sizeof c->host_read);
    memset(c->host_read_pending, 0, sizeof c->host_read_pending);
    memset(c->mapped_pending, 0, sizeof c->mapped_pending);
    c->w[0] = c->w[1] = NULL;
    c->w_arena = c->kv_arena = NULL;
    c->kv_canon = NULL;
    c->kv_canon_bytes = 0;
    c->kv_addr = NULL;
    c->sync_ev = c->mapped_ev = NULL;
    c->ring = NULL;
    c->ring_bytes = 0;
    memset(c->slot_ready, 0, sizeof c->slot_ready);
    memset(c->slot_free, 0, sizeof c->slot_free);
    memset(c->copy_start, 0, sizeof c->copy_start);
    c->exp_gpu = NULL;
    c->reg = NULL;
    c->n_reg = 0;
}

void tnd_layout_token_bytes(const tnd_ctx *c, uint64_t *cpu, uint64_t *gpu, uint64_t *pcie) {
    const tnd_model *m = c->m;
    *cpu = *gpu = *pcie = 0;
    for (int i = 0; i < m->n_slices; i++) {
        const tnd_weight *w = m->slices[i];
        if (tnd_slice_small(w) || w == &m->tok_embd) continue; /* the embedding is read a row at a time */
        uint64_t b = w->t->nbytes;
        /* one token reads n_used of the n_expert experts */
        if (w->n_expert > 1) b = b / (uint64_t)w->n_expert * (uint64_t)m->hp.n_expert_used;
        int l;
        if (c->gpu && tnd_slice_split(m, &c->pl, i, &l)) {
            /* the GPU's share of the chosen experts (popularity, or uniform) */
            uint64_t g = (uint64_t)((double)b * tnd_perf_gpu_share(m, c->perf, &c->pl, l));
            *gpu += g;
            b -= g;
        }
        if (c->gpu && c->pl.where[i] == TND_SIDE_GPU) *gpu += b;
        /* auto promotes only when it pays, which a decode step never does */
        else if (c->gpu && c->pl.promote[i] && c->lay.n_slots && !c->pl.promote_auto) *pcie += b; /* chosen experts only */
        else *cpu += b;
    }
    if (m->hp_tied) {
        /* the tied head reads the whole table once per token */
        uint64_t b = m->tok_embd.t->nbytes;
        *(c->gpu && c->pl.where[m->tok_embd.id] == TND_SIDE_GPU ? gpu : cpu) += b;
    }
}
