/* The CPU backend (backend.h): ops run synchronously on the calling thread
 * with the pool's threads; "device" memory is host memory. It is the
 * reference the CUDA backend is compared with, and the engine's CPU path. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "cpu/matmul.h"
#include "cpu/matmul_f32.h"
#include "cpu/ops.h"
#include "util.h"

typedef struct cpu_ctx {
    tnd_pool *pool;
    /* Matmuls quantize activations to Q8 (cpu/matmul.h, the integer path:
     * faster prefill, ~1 logit of noise) instead of the default f32
     * activations (cpu/matmul_f32.h: exact, decode and prefill identical). */
    bool int8_act;
    uint64_t budget, used, peak;
    /* MATMUL_ID scratch (gathered inputs/outputs of one expert; gu: MOE_GLU's
     * up outputs beside gy's gate ones), grown on demand */
    float *gx, *gy, *gu, *gdy; /* gdy: MOE_FFN's down outputs, grouped */
    int32_t *gidx, *gact;
    int64_t *goff;
    _Atomic int64_t *gready; /* MOE_FFN: each used expert's G rows done */
    size_t g_cap_x, g_cap_y, g_cap_u, g_cap_dy, g_cap_i, g_cap_act, g_cap_off, g_cap_ready;
    tnd_rope_tabs rope; /* RoPE's cos and sin by position, for every layer */
} cpu_ctx;

struct tnd_stream { int unused; };
struct tnd_event { double t; };

static cpu_ctx *C(tnd_backend *b) { return (cpu_ctx *)b->ctx; }

/* Allocations carry their size in a 64-byte header so frees can be counted. */
static tnd_status cpu_buf_alloc(tnd_backend *b, size_t size, void **out) {
    cpu_ctx *c = C(b);
    if (c->budget && c->used + size > c->budget)
        return tnd_fail(TND_ERR_NOMEM, "cpu: allocating %zu bytes would exceed the budget (%llu of %llu in use)", size,
                        (unsigned long long)c->used, (unsigned long long)c->budget);
    char *p = tnd_aligned_alloc(size + 64);
    if (!p) return TND_ERR_NOMEM;
    *(size_t *)p = size;
    c->used += size;
    if (c->used > c->peak) c->peak = c->used;
    *out = p + 64;
    return TND_OK;
}

static void cpu_buf_free(tnd_backend *b, void *ptr) {
    if (!ptr) return;
    char *p = (char *)ptr - 64;
    C(b)->used -= *(size_t *)p;
    tnd_aligned_free(p);
}

static void cpu_mem_info(tnd_backend *b, tnd_mem_info *out) {
    cpu_ctx *c = C(b);
    memset(out, 0, sizeof *out);
    out->budget = c->budget;
    out->used = c->used;
    out->peak = c->peak;
}

static tnd_status cpu_stream_new(tnd_backend *b, tnd_stream **out) {
    (void)b;
    *out = tnd_calloc(1, sizeof **out);
    return *out ? TND_OK : TND_ERR_NOMEM;
}
static void cpu_stream_free(tnd_backend *b, tnd_stream *s) { (void)b, free(s); }
static tnd_status cpu_stream_sync(tnd_backend *b, tnd_stream *s) { return (void)b, (void)s, TND_OK; }
static tnd_status cpu_event_new(tnd_backend *b, tnd_event **out) {
    (void)b;
    *out = tnd_calloc(1, sizeof **out);
    return *out ? TND_OK : TND_ERR_NOMEM;
}
static void cpu_event_free(tnd_backend *b, tnd_event *e) { (void)b, free(e); }
static tnd_status cpu_event_record(tnd_backend *b, tnd_event *e, tnd_stream *s) {
    (void)b, (void)s;
    e->t = tnd_time_s();
    return TND_OK;
}
static tnd_status cpu_stream_wait(tnd_backend *b, tnd_stream *s, tnd_event *e) { return (void)b, (void)s, (void)e, TND_OK; }
static tnd_status cpu_event_sync(tnd_backend *b, tnd_event *e) { return (void)b, (void)e, TND_OK; }
static tnd_status cpu_event_done(tnd_backend *b, tnd_event *e, bool *done) {
    (void)b, (void)e;
    *done = true; /* the CPU's work is done when queued */
    return TND_OK;
}
static tnd_status cpu_event_elapsed(tnd_backend *b, tnd_event *s, tnd_event *e, float *ms) {
    (void)b;
    *ms = (float)((e->t - s->t) * 1e3);
    return TND_OK;
}
static tnd_status cpu_copy(tnd_backend *b, void *dst, const void *src, size_t n, tnd_stream *s) {
    (void)b, (void)s;
    if (n) memmove(dst, src, n);
    return TND_OK;
}
static tnd_status cpu_memset(tnd_backend *b, void *dst, int v, size_t n, tnd_stream *s) {
    (void)b, (void)s;
    memset(dst, v, n);
    return TND_OK;
}

/* y = W x with the activation path the backend was set to. */
static void cpu_matmul(const cpu_ctx *c, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x,
                       int64_t n_tok, float *y) {
    if (c->int8_act) tnd_cpu_matmul(c->pool, wt, W, n_in, n_out, x, n_tok, y);
    else tnd_cpu_matmul_f32(c->pool, wt, W, n_in, n_out, x, n_tok, y);
}

static bool grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    void *q = tnd_aligned_alloc(need);
    if (!q) return false;
    tnd_aligned_free(*p);
    *p = q;
    *cap = need;
    return true;
}

typedef struct {
    const float *g, *u;
    float *y;
    int64_t n;
    bool gelu; /* GELU_MUL, else SILU_MUL */
} actmul_job;

/* SILU_MUL or GELU_MUL over thread ith's share of nth (cut at multiples of 16) */
static void actmul_task(void *arg, int ith, int nth) {
    const actmul_job *j = arg;
    int64_t a = j->n * ith / nth / 16 * 16, b = ith + 1 == nth ? j->n : j->n * (ith + 1) / nth / 16 * 16;
    if (a >= b) return;
    if (j->gelu) tnd_cpu_gelu_mul(j->g + a, j->u + a, j->y + a, b - a);
    else tnd_cpu_silu_mul(j->g + a, j->u + a, j->y + a, b - a);
}

/* Row-wise ops of a prefill chunk (norms, rope, KV stores, adds, embedding
 * rows) split over the pool: single-threaded they cost milliseconds per
 * layer at 2048 tokens (a KV store 9.8 ms on the device). Rows are
 * independent, so the results are those of one thread. Small ops (decode)
 * stay on the calling thread: waking the pool costs more than they do. */
#define ROWS_PAR_MIN (1 << 16) /* elements */

typedef struct {
    const tnd_op *op;
    int64_t rows; /* units split over threads: rows, tokens or 256-element blocks */
    const float *rope; /* ROPE: tnd_rope_rows' table, or NULL (computed in place) */
    _Atomic int err; /* a bad embedding id, seen by any thread */
} rows_job;

static void rows_range(const tnd_op *op, int64_t r0, int64_t r1, const float *rope, tnd_status *err) {
    const tnd_tensor *in = op->in, *out = op->out;
    switch (op->kind) {
    case TND_OP_RMS_NORM: {
        int64_t n = in[0].ne[0];
        for (int64_t r = r0; r < r1; r++) {
            const float *x = (const float *)in[0].data + r * n;
            if (in[2].data) { /* fused residual add: the ADD's sums, then the norm of them */
                const float *o = (const float *)in[2].data + r * n;
                float *sum = (float *)out[1].data + r * n;
                for (int64_t i = 0; i < n; i++) sum[i] = x[i] + o[i];
                x = sum;
            }
            tnd_cpu_rmsnorm(x, in[1].data, (float *)out[0].data + r * n, n, op->p.norm.eps);
        }
        break;
    }
    case TND_OP_ROPE: {
        int hd = (int)in[0].ne[0], nh = (int)in[0].ne[1];
        const int32_t *pos = in[1].data;
        for (int64_t t = r0; t < r1; t++) {
            float *y = (float *)out[0].data + t * hd * nh;
            const float *x = (const float *)in[0].data + t * hd * nh;
            if (in[2].data) /* fused per-head norm: RMS_NORM's rows of head_dim, token by token */
                for (int h = 0; h < nh; h++)
                    tnd_cpu_rmsnorm(x + (int64_t)h * hd, in[2].data, y + (int64_t)h * hd, hd, op->p.rope.eps);
            else if (y != x) memcpy(y, x, sizeof(float) * hd * nh);
            tnd_cpu_rope(y, nh, hd, op->p.rope.n_rot, pos[t], op->p.rope.freq_base, op->p.rope.freq_scale,
                         op->p.rope.mode == TND_ROPE_NEOX, rope ? rope + (int64_t)pos[t] * op->p.rope.n_rot : NULL);
        }
        break;
    }
    case TND_OP_ADD: { /* blocks of 256 elements */
        int64_t n = tnd_tensor_nelem(&in[0]), m = tnd_tensor_nelem(&in[1]);
        const float *a = in[0].data, *bb = in[1].data;
        float *y = out[0].data;
        for (int64_t i = r0 * 256, e = TND_MIN(r1 * 256, n); i < e; i++) y[i] = a[i] + bb[m == n ? i : i % m];
        break;
    }
    case TND_OP_CPY: { /* f32 -> f16, blocks of 256 elements */
        int64_t n = tnd_tensor_nelem(&in[0]), a = r0 * 256, e = TND_MIN(r1 * 256, n);
        if (a < e) tnd_cpu_f32_to_f16((const float *)in[0].data + a, (uint16_t *)out[0].data + a, e - a);
        break;
    }
    case TND_OP_GET_ROWS: {
        const int32_t *ids = in[1].data;
        int64_t n = in[0].ne[0], rows = in[0].ne[1];
        for (int64_t i = r0; i < r1; i++) {
            if (ids[i] < 0 || ids[i] >= rows) {
                *err = TND_ERR_ARG;
                continue;
            }
            tnd_cpu_get_row(in[0].type, in[0].data, n, ids[i], (float *)out[0].data + i * n);
        }
        break;
    }
    default:
        break;
    }
}

static void rows_task(void *arg, int ith, int nth) {
    rows_job *j = arg;
    tnd_status err = TND_OK;
    rows_range(j->op, j->rows * ith / nth, j->rows * (ith + 1) / nth, j->rope, &err);
    if (err) atomic_store(&j->err, (int)err);
}

/* ATTN over slots (backend.h): each run of queries in one slot at
 * consecutive positions is one attention of that slot's rows, as the op of
 * that sequence alone would compute it; up to ATTN_RUNS runs share one
 * parallel region (a region a run cost a batch-4 decode round of the
 * default model ~0.5 of its ~10 ms on 2 cores: 4 wake-ups a layer). */
#define ATTN_RUNS 64
static tnd_status attn_slots(cpu_ctx *c, const tnd_op *op, const tnd_attn_args *all) {
    tnd_status st = tnd_op_check_positions(op, "cpu");
    if (st) return st;
    const int32_t *row = op->in[3].data, sr = op->p.attn.slot_rows;
    const int64_t n_slots = op->in[1].ne[1] / sr, kvd = op->in[1].ne[0];
    const int64_t qd = (int64_t)all->n_head * all->head_dim;
    tnd_attn_args runs[ATTN_RUNS];
    int nr = 0;
    for (int t = 0, u; t < all->n_tok; t = u) {
        const int64_t s = row[t] / sr, p = row[t] % sr;
        if (row[t] < 0 || s >= n_slots || p >= op->p.attn.kv_cap)
            return tnd_fail(TND_ERR_ARG, "attn: query %d's row %d is past the slots (%lld of %d rows, kv_cap %d)", t,
                            row[t], (long long)n_slots, sr, op->p.attn.kv_cap);
        /* the run: the next rows of the same slot, within kv_cap */
        u = t + 1;
        while (u < all->n_tok && row[u] == row[u - 1] + 1 && row[u] % sr != 0 && row[u] % sr < op->p.attn.kv_cap) u++;
        tnd_attn_args *a = &runs[nr++];
        *a = *all;
        a->q = (const float *)all->q + t * qd;
        a->out = (float *)all->out + t * qd;
        a->k = (const uint16_t *)all->k + s * sr * kvd;
        a->v = (const uint16_t *)all->v + s * sr * kvd;
        a->n_tok = u - t;
        a->pos0 = (int)p;
        if (nr == ATTN_RUNS) tnd_cpu_attn_many(c->pool, runs, nr), nr = 0;
    }
    tnd_cpu_attn_many(c->pool, runs, nr);
    return TND_OK;
}

/* Runs a row-wise op, over the pool when it is large. */
static tnd_status run_rows(cpu_ctx *c, const tnd_op *op, int64_t rows, int64_t elems, const float *rope) {
    rows_job j = {op, rows, rope, TND_OK};
    tnd_status err = TND_OK;
    if (elems >= ROWS_PAR_MIN && rows > 1) tnd_pool_run(c->pool, rows_task, &j);
    else rows_range(op, 0, rows, rope, &err);
    return err ? err : (tnd_status)atomic_load(&j.err);
}

/* A round of few tokens per expert (a decode step, a batched decode
 * round): every used expert's rows in one parallel region, items of
 * a grain of rows of one expert over all the tokens that chose it.
 * A region per expert (three pool runs each: quantize, aux, rows) would pay
 * wake-ups and barriers 128 x 3 times a layer, more than the rows cost.
 * Each item quantizes its expert's tokens itself (a few microseconds,
 * against its rows' reads). Every row is computed as tnd_cpu_matmul
 * computes it for that expert's tokens (the kernels' order does not depend
 * on the split), so the result equals the per-expert path's. */
typedef struct {
    const cpu_ctx *c;
    tnd_type wt;
    const char *W;
    size_t w_slice;
    int64_t n_in, n_out, n_act, grains, rows; /* grains of `rows` rows an expert */
    const int32_t *act;  /* [n_act] the used experts */
    const int64_t *off;  /* [n_exp + 1] each expert's first pair in gx/gy (counting sort) */
    const float *gx;
    float *gy;
} group_job;

/* Grains of 16, 32 or 64 rows: the smallest that keeps a region at most
 * EXPERT_GROUP_GRAINS_PER_THREAD grains a thread, each its own item. A
 * decode step's few experts are few grains (6 experts x 768 rows of 64 are
 * 72 grains for 16 threads), and items of unequal grain counts left threads
 * idle: the gate and up matmuls read 63-66 GB/s where the down matmul (192
 * grains) read 84-89 (dev/moe_cpu_bw on the H200 machine, 2026-12-02). */
#define EXPERT_GROUP_ROWS_MIN 16
#define EXPERT_GROUP_ROWS_MAX 64
#define EXPERT_GROUP_GRAINS_PER_THREAD 16
/* at most this many tokens per used expert on average: the grouped region; more (prefill):
 * an expert's matmul of its own, whose kernels want long row ranges over many tokens */
#define EXPERT_GROUP_MAX_TOK 24

/* Rows r0..r1 of expert e for all the tokens that chose it, into j->gy. */
static void group_rows(const group_job *j, int e, int64_t r0, int64_t r1) {
    int64_t p0 = j->off[e], n = j->off[e + 1] - p0;
    const char *W = j->W + (size_t)e * j->w_slice;
    if (j->c->int8_act) tnd_cpu_matmul_rows(NULL, j->wt, W, j->n_in, j->n_out, r0, r1, j->gx + p0 * j->n_in, n,
                                            j->gy + p0 * j->n_out);
    else tnd_cpu_matmul_f32_rows(NULL, j->wt, W, j->n_in, j->n_out, r0, r1, j->gx + p0 * j->n_in, n,
                                 j->gy + p0 * j->n_out);
}

static void group_task(void *arg, int item, int n_items) {
    const group_job *j = arg;
    int64_t total = j->grains * j->n_act;
    int64_t a = total * item / n_items, b = total * (item + 1) / n_items;
    while (a < b) {
        int64_t k = a / j->grains, g0 = a % j->grains, g1 = TND_MIN(j->grains, g0 + (b - a));
        group_rows(j, j->act[k], g0 * j->rows, TND_MIN(j->n_out, g1 * j->rows));
        a += g1 - g0;
    }
}

/* Rows a grain of the grouped region: 16, 32 or 64, the smallest that
 * keeps it at most EXPERT_GROUP_GRAINS_PER_THREAD grains a thread. */
static int64_t group_grain_rows(int64_t n_out, int64_t n_act, int64_t most) {
    int64_t rows = EXPERT_GROUP_ROWS_MIN;
    while (rows < EXPERT_GROUP_ROWS_MAX && (n_out + rows - 1) / rows * n_act > most) rows *= 2;
    return rows;
}

/* Items of a grouped region of `total` grains: a grain an item while they
 * are few; beyond, items of several grains. */
static int64_t group_items(int64_t total, int64_t n_thr, int64_t most) {
    return TND_MAX(1, TND_MIN(total, total <= most ? total : n_thr * TND_POOL_ITEMS_PER_THREAD));
}

/* Whether an expert op of n_pairs pairs over n_act experts runs as the
 * grouped region (a decode step, a batched decode round). */
static bool group_region(int n_act, int64_t n_pairs) {
    return n_pairs > 0 && n_pairs <= (int64_t)EXPERT_GROUP_MAX_TOK * n_act;
}

/* An expert op's (token, slot) pairs grouped by expert (MATMUL_ID's, or
 * MOE_GLU's, whose in[0..2] are MATMUL_ID's): c->gidx[off[e] ..] are expert
 * e's pairs in token order, off[n_exp] = *n_pairs of them, and after them
 * the skipped pairs (negative ids); c->gact the *n_act used experts; c->gx
 * each pair's x; c->gy sized for the outputs. grouped_only: only the
 * counts when the grouped region will not run (group_region false). */
static tnd_status group_pairs(cpu_ctx *c, const tnd_op *op, bool grouped_only, int *n_act_out, int64_t *n_pairs_out) {
    const tnd_tensor *W = &op->in[0], *X = &op->in[1], *I = &op->in[2];
    int64_t n_in = W->ne[0], n_out = W->ne[1], n_exp = W->ne[2];
    int64_t n_used = I->ne[0], n_tok = I->ne[1], n_x = X->ne[1];
    const int32_t *ids = I->data;
    const float *x = X->data;
    int64_t pairs = n_used * n_tok;
    /* negative ids: skipped pairs, whose rows stay as they are (backend.h) */
    for (int64_t i = 0; i < pairs; i++)
        if (ids[i] >= n_exp)
            return tnd_fail(TND_ERR_ARG, "matmul_id: expert id %d out of range [0, %lld)", ids[i], (long long)n_exp);
    /* counting sort of the pairs by expert: gidx[off[e] ..] are expert e's, in token order */
    if (!grow((void **)&c->gidx, &c->g_cap_i, sizeof(int32_t) * (size_t)pairs) ||
        !grow((void **)&c->gact, &c->g_cap_act, sizeof(int32_t) * (size_t)n_exp) ||
        !grow((void **)&c->goff, &c->g_cap_off, sizeof(int64_t) * (size_t)(n_exp + 1)) ||
        !grow((void **)&c->gx, &c->g_cap_x, sizeof(float) * (size_t)(pairs * n_in)) ||
        !grow((void **)&c->gy, &c->g_cap_y, sizeof(float) * (size_t)(pairs * n_out)))
        return TND_ERR_NOMEM;
    int64_t *off = c->goff;
    int32_t *act = c->gact;
    memset(off, 0, sizeof(int64_t) * (size_t)(n_exp + 1));
    for (int64_t i = 0; i < pairs; i++)
        if (ids[i] >= 0) off[ids[i] + 1]++;
    int n_act = 0;
    for (int64_t e = 0; e < n_exp; e++) {
        if (off[e + 1]) act[n_act++] = (int32_t)e;
        off[e + 1] += off[e];
    }
    const int64_t n_pairs = off[n_exp];
    *n_act_out = n_act;
    *n_pairs_out = n_pairs;
    if (grouped_only && !group_region(n_act, n_pairs)) return TND_OK;
    for (int64_t i = 0, k = n_pairs; i < pairs; i++) {
        if (ids[i] >= 0) c->gidx[off[ids[i]]++] = (int32_t)i;
        else c->gidx[k++] = (int32_t)i;
    }
    for (int64_t e = n_exp; e > 0; e--) off[e] = off[e - 1]; /* the fill moved each start to the next's */
    off[0] = 0;
    for (int64_t r = 0; r < n_pairs; r++) {
        int64_t t = c->gidx[r] / n_used, u = c->gidx[r] % n_used;
        memcpy(c->gx + r * n_in, x + (t * n_x + (n_x == 1 ? 0 : u)) * n_in, sizeof(float) * (size_t)n_in);
    }
    return TND_OK;
}

/* Expert matmul: (token, slot) pairs grouped by expert, so each expert's
 * weights are streamed once for all the tokens that chose it. */
static tnd_status run_matmul_id(cpu_ctx *c, const tnd_op *op) {
    const tnd_tensor *W = &op->in[0];
    int64_t n_in = W->ne[0], n_out = W->ne[1];
    float *y = op->out[0].data;
    size_t w_slice = tnd_row_size(W->type, n_in) * (size_t)n_out;
    int n_act;
    int64_t n_pairs;
    tnd_status st = group_pairs(c, op, false, &n_act, &n_pairs);
    if (st || !n_pairs) return st;
    const int32_t *act = c->gact;
    const int64_t *off = c->goff;
    if (group_region(n_act, n_pairs)) {
        const int64_t n_thr = tnd_pool_size(c->pool), most = n_thr * EXPERT_GROUP_GRAINS_PER_THREAD;
        const int64_t rows = group_grain_rows(n_out, n_act, most);
        group_job j = {.c = c, .wt = W->type, .W = W->data, .w_slice = w_slice, .n_in = n_in, .n_out = n_out,
                       .n_act = n_act, .grains = (n_out + rows - 1) / rows, .rows = rows, .act = act,
                       .off = off, .gx = c->gx, .gy = c->gy};
        tnd_pool_run_n(c->pool, group_task, &j, (int)group_items(j.grains * n_act, n_thr, most));
    } else {
        for (int k = 0; k < n_act; k++) {
            int64_t e = act[k], p0 = off[e];
            cpu_matmul(c, W->type, (const char *)W->data + (size_t)e * w_slice, n_in, n_out, c->gx + p0 * n_in,
                       off[e + 1] - p0, c->gy + p0 * n_out);
        }
    }
    for (int64_t r = 0; r < n_pairs; r++)
        memcpy(y + (int64_t)c->gidx[r] * n_out, c->gy + r * n_out, sizeof(float) * (size_t)n_out);
    return TND_OK;
}

static tnd_status cpu_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s);

/* MOE_GLU's region (backend.h): the grouped region's grains (group_job)
 * of the gate and the up matmul at once, each item then writing its rows of
 * G = silu(gate) * up and U = up for the grain's expert's pairs; items past
 * n_work run SILU_MUL over the skipped pairs' rows of what G and U hold, as
 * the separate op would. */
typedef struct {
    group_job mm[2];     /* gate (into gy), up (into gu): the same pairs, experts and grains */
    const int32_t *gidx; /* group_pairs': n_pairs grouped by expert, then n_skip skipped */
    float *G, *U;
    int64_t n_work, n_pairs, n_skip;
    /* MOE_FFN: SiLU's rows also stay grouped in gy (the down's input), and
     * each grain adds its rows to ready[k] of its expert act[k] */
    bool ffn;
    _Atomic int64_t *ready;
} glu_job;

static void glu_task(void *arg, int item, int n_items) {
    const glu_job *j = arg;
    const group_job *m = &j->mm[0];
    const int64_t n_out = m->n_out;
    if (item >= j->n_work) {
        const int64_t k = item - j->n_work, nk = n_items - j->n_work;
        for (int64_t i = j->n_skip * k / nk; i < j->n_skip * (k + 1) / nk; i++) {
            const int64_t row = (int64_t)j->gidx[j->n_pairs + i] * n_out;
            tnd_cpu_silu_mul(j->G + row, j->U + row, j->G + row, n_out);
        }
        return;
    }
    const int64_t total = m->grains * m->n_act;
    int64_t a = total * item / j->n_work, b = total * (item + 1) / j->n_work;
    while (a < b) {
        int64_t k = a / m->grains, g0 = a % m->grains, g1 = TND_MIN(m->grains, g0 + (b - a));
        const int e = m->act[k];
        const int64_t r0 = g0 * m->rows, r1 = TND_MIN(n_out, g1 * m->rows);
        group_rows(&j->mm[0], e, r0, r1);
        group_rows(&j->mm[1], e, r0, r1);
        /* silu is elementwise (cpu/ops.c), so rows r0..r1 alone are SILU_MUL's values */
        for (int64_t p = m->off[e]; p < m->off[e + 1]; p++) {
            float *g = m->gy + p * n_out + r0;
            const float *u = j->mm[1].gy + p * n_out + r0;
            const int64_t at = (int64_t)j->gidx[p] * n_out + r0;
            memcpy(j->U + at, u, sizeof(float) * (size_t)(r1 - r0));
            if (j->ffn) { /* in place, so the down reads them grouped as MATMUL_ID would gather them */
                tnd_cpu_silu_mul(g, u, g, r1 - r0);
                memcpy(j->G + at, g, sizeof(float) * (size_t)(r1 - r0));
            } else {
                tnd_cpu_silu_mul(g, u, j->G + at, r1 - r0);
            }
        }
        if (j->ffn) atomic_fetch_add_explicit(&j->ready[k], r1 - r0, memory_order_release);
        a += g1 - g0;
    }
}

/* MOE_FFN's region: MOE_GLU's items, then the down's grains (a group_job
 * over the grouped SiLU rows into gdy), each of which waits until its
 * expert's G rows are all done, then scatters its rows of each pair into
 * Y. The pool claims items in order, so every item a down grain waits for
 * is already held by a running thread. */
typedef struct {
    glu_job g;
    group_job dn;
    float *Y;
    int64_t n_glu_items, n_dn_work, n_ff;
} ffn_job;

static void ffn_task(void *arg, int item, int n_items) {
    const ffn_job *j = arg;
    if (item < j->n_glu_items) {
        glu_task((void *)&j->g, item, (int)j->n_glu_items);
        return;
    }
    (void)n_items;
    const group_job *d = &j->dn;
    const int64_t total = d->grains * d->n_act, w = item - j->n_glu_items;
    int64_t a = total * w / j->n_dn_work, b = total * (w + 1) / j->n_dn_work;
    while (a < b) {
        const int64_t k = a / d->grains, g0 = a % d->grains, g1 = TND_MIN(d->grains, g0 + (b - a));
        const int e = d->act[k];
        const int64_t r0 = g0 * d->rows, r1 = TND_MIN(d->n_out, g1 * d->rows);
        for (unsigned spins = 1; atomic_load_explicit(&j->g.ready[k], memory_order_acquire) < j->n_ff; spins++) {
            if (spins % 1024) tnd_cpu_relax();
            else sched_yield(); /* now and then: its holder may be descheduled */
        }
        group_rows(d, e, r0, r1);
        for (int64_t p = d->off[e]; p < d->off[e + 1]; p++)
            memcpy(j->Y + (int64_t)j->g.gidx[p] * d->n_out + r0, d->gy + p * d->n_out + r0,
                   sizeof(float) * (size_t)(r1 - r0));
        a += g1 - g0;
    }
}

/* MOE_GLU: in one region where MATMUL_ID would run the grouped region (a
 * decode step: gate and up were two regions of few grains each, plus
 * SILU_MUL's, each a wake-up and a barrier); otherwise (many tokens an
 * expert, no pair computed, no memory for the up rows) as its three ops.
 * MOE_FFN (op->kind): the down projection's grains in the same region. */
static tnd_status run_moe_glu(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    cpu_ctx *c = C(b);
    const tnd_tensor *Wg = &op->in[0], *Wu = &op->in[3], *Wd = &op->in[4];
    const int64_t n_in = Wg->ne[0], n_out = Wg->ne[1];
    const bool ffn = op->kind == TND_OP_MOE_FFN;
    int n_act;
    int64_t n_pairs;
    tnd_status st = group_pairs(c, op, true, &n_act, &n_pairs);
    if (st) return st;
    const int64_t pairs = tnd_tensor_nelem(&op->in[2]);
    const int64_t n_dout = ffn ? Wd->ne[1] : 0;
    if (!group_region(n_act, n_pairs) ||
        !grow((void **)&c->gu, &c->g_cap_u, sizeof(float) * (size_t)(pairs * n_out)) ||
        (ffn && (!grow((void **)&c->gdy, &c->g_cap_dy, sizeof(float) * (size_t)(pairs * n_dout)) ||
                 !grow((void **)&c->gready, &c->g_cap_ready, sizeof *c->gready * (size_t)n_act)))) {
        tnd_op part[3];
        if (ffn) { /* MOE_GLU, then the down */
            tnd_op_moe_ffn_split(op, part);
            if ((st = run_moe_glu(b, &part[0], s))) return st;
            return cpu_op_run(b, &part[1], s);
        }
        tnd_op_moe_glu_split(op, part);
        for (int i = 0; i < 3; i++)
            if ((st = cpu_op_run(b, &part[i], s))) return st;
        return TND_OK;
    }
    /* Grains as MATMUL_ID's: a grain here reads twice the bytes (its gate
     * rows and its up rows), so the same count keeps the same balance over
     * the threads with each item's fixed cost (quantizing its expert's
     * tokens, once for both matmuls: cpu/matmul.c reuses them) spread over
     * twice the rows; the one region holds both ops' work in as many items
     * as one of them had. */
    const int64_t n_thr = tnd_pool_size(c->pool), most = n_thr * EXPERT_GROUP_GRAINS_PER_THREAD;
    const int64_t rows = group_grain_rows(n_out, n_act, most), grains = (n_out + rows - 1) / rows;
    glu_job j = {.gidx = c->gidx, .G = op->out[0].data, .U = op->out[1].data, .n_pairs = n_pairs,
                 .n_skip = pairs - n_pairs};
    for (int i = 0; i < 2; i++) {
        const tnd_tensor *W = i ? Wu : Wg;
        j.mm[i] = (group_job){.c = c, .wt = W->type, .W = W->data,
                              .w_slice = tnd_row_size(W->type, n_in) * (size_t)n_out, .n_in = n_in, .n_out = n_out,
                              .n_act = n_act, .grains = grains, .rows = rows, .act = c->gact, .off = c->goff,
                              .gx = c->gx, .gy = i ? c->gu : c->gy};
    }
    j.n_work = group_items(grains * n_act, n_thr, most);
    const int64_t n_skip_items = TND_MIN(j.n_skip, n_thr);
    if (!ffn) {
        tnd_pool_run_n(c->pool, glu_task, &j, (int)(j.n_work + n_skip_items));
        return TND_OK;
    }
    /* the down's grains as MATMUL_ID would make them, over the grouped SiLU rows */
    j.ffn = true;
    j.ready = c->gready;
    for (int k = 0; k < n_act; k++) atomic_init(&j.ready[k], 0); /* (the pool's start of the run publishes them) */
    const int64_t drows = group_grain_rows(n_dout, n_act, most);
    ffn_job f = {.g = j, .Y = op->out[2].data, .n_glu_items = j.n_work + n_skip_items, .n_ff = n_out};
    f.dn = (group_job){.c = c, .wt = Wd->type, .W = Wd->data, .w_slice = tnd_row_size(Wd->type, n_out) * (size_t)n_dout,
                       .n_in = n_out, .n_out = n_dout, .n_act = n_act, .grains = (n_dout + drows - 1) / drows,
                       .rows = drows, .act = c->gact, .off = c->goff, .gx = c->gy, .gy = c->gdy};
    f.n_dn_work = group_items(f.dn.grains * n_act, n_thr, most);
    tnd_pool_run_n(c->pool, ffn_task, &f, (int)(f.n_glu_items + f.n_dn_work));
    return TND_OK;
}

static tnd_status cpu_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    (void)s;
    cpu_ctx *c = C(b);
    const tnd_tensor *in = op->in;
    const tnd_tensor *out = op->out;
    switch (op->kind) {
    case TND_OP_MATMUL:
        cpu_matmul(c, in[0].type, in[0].data, in[0].ne[0], in[0].ne[1], in[1].data,
                   tnd_tensor_nelem(&in[1]) / in[1].ne[0], out[0].data);
        return TND_OK;
    case TND_OP_MATMUL_ID:
        return run_matmul_id(c, op);
    case TND_OP_GET_ROWS: {
        int64_t k = tnd_tensor_nelem(&in[1]);
        if (run_rows(c, op, k, k * in[0].ne[0], NULL)) {
            const int32_t *ids = in[1].data;
            for (int64_t i = 0; i < k; i++)
                if (ids[i] < 0 || ids[i] >= in[0].ne[1])
                    return tnd_fail(TND_ERR_ARG, "get_rows: id %d out of range", ids[i]);
        }
        return TND_OK;
    }
    case TND_OP_RMS_NORM: {
        int64_t n = tnd_tensor_nelem(&in[0]);
        return run_rows(c, op, n / in[0].ne[0], n, NULL);
    }
    case TND_OP_ROPE: {
        const int32_t *pos = in[1].data;
        int max_pos = 0, min_pos = 0;
        for (int64_t t = 0; t < in[0].ne[2]; t++) {
            max_pos = pos[t] > max_pos ? pos[t] : max_pos;
            min_pos = pos[t] < min_pos ? pos[t] : min_pos;
        }
        /* the table's rows, filled here before the threads read them; a negative position: computed in place */
        const float *rope = min_pos < 0 ? NULL
                                        : tnd_rope_rows(&c->rope, op->p.rope.n_rot, op->p.rope.freq_base,
                                                        op->p.rope.freq_scale, max_pos);
        return run_rows(c, op, in[0].ne[2], tnd_tensor_nelem(&in[0]), rope);
    }
    case TND_OP_ATTN: {
        tnd_attn_args a = {
            .q = in[0].data, .k = in[1].data, .v = in[2].data, .out = out[0].data,
            .n_tok = (int)in[0].ne[2], .pos0 = in[3].data ? *(const int32_t *)in[3].data : op->p.attn.pos0,
            .n_head = op->p.attn.n_head, .n_kv_head = op->p.attn.n_head_kv, .head_dim = op->p.attn.head_dim,
            .window = op->p.attn.window, .scale = op->p.attn.scale, .softcap = op->p.attn.softcap,
        };
        if (op->p.attn.slot_rows > 0) return attn_slots(c, op, &a);
        if (a.pos0 < 0 || a.pos0 + in[0].ne[2] > in[1].ne[1])
            return tnd_fail(TND_ERR_ARG, "attn: position %d past the cache's %lld rows", a.pos0, (long long)in[1].ne[1]);
        tnd_cpu_attn(c->pool, &a);
        return TND_OK;
    }
    case TND_OP_SOFTMAX: {
        int64_t n = in[0].ne[0], rows = tnd_tensor_nelem(&in[0]) / n;
        float sc = op->p.scale.s != 0 ? op->p.scale.s : 1.0f;
        for (int64_t r = 0; r < rows; r++) {
            float *y = (float *)out[0].data + r * n;
            const float *x = (const float *)in[0].data + r * n;
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc;
            tnd_cpu_softmax(y, n);
        }
        return TND_OK;
    }
    case TND_OP_SILU_MUL:
    case TND_OP_GELU_MUL: {
        /* expf bound: a decode step's MoE activations (n_used x n_ff) cost
         * tens of microseconds on one thread, a prefill's more;
         * element-wise, so the same bits */
        actmul_job j = {in[0].data, in[1].data, out[0].data, tnd_tensor_nelem(&in[0]), op->kind == TND_OP_GELU_MUL};
        if (j.n >= 4096) tnd_pool_run(c->pool, actmul_task, &j);
        else actmul_task(&j, 0, 1);
        return TND_OK;
    }
    case TND_OP_ADD: {
        int64_t n = tnd_tensor_nelem(&in[0]);
        return run_rows(c, op, (n + 255) / 256, n, NULL);
    }
    case TND_OP_SCALE: {
        int64_t n = tnd_tensor_nelem(&in[0]);
        for (int64_t i = 0; i < n; i++) ((float *)out[0].data)[i] = ((const float *)in[0].data)[i] * op->p.scale.s;
        return TND_OK;
    }
    case TND_OP_CPY: {
        int64_t n = tnd_tensor_nelem(&in[0]);
        if (in[1].data) { /* rows by position (backend.h) */
            const int64_t rl = out[0].ne[0], rows = n / TND_MAX(rl, 1), cap = tnd_tensor_nelem(&out[0]) / TND_MAX(rl, 1);
            const int32_t *pos = in[1].data;
            tnd_status st = tnd_op_check_positions(op, "cpu");
            if (st) return st;
            for (int64_t i = 0; i < rows; i++) {
                if (pos[i] < 0 || pos[i] >= cap)
                    return tnd_fail(TND_ERR_ARG, "cpy by position: row %d of %lld", pos[i], (long long)cap);
                tnd_cpu_f32_to_f16((const float *)in[0].data + i * rl, (uint16_t *)out[0].data + pos[i] * rl, rl);
            }
            return TND_OK;
        }
        if (in[0].type == out[0].type) memmove(out[0].data, in[0].data, tnd_tensor_nbytes(&in[0]));
        else if (in[0].type == TND_TYPE_F32 && out[0].type == TND_TYPE_F16) return run_rows(c, op, (n + 255) / 256, n, NULL);
        else if (in[0].type == TND_TYPE_F16 && out[0].type == TND_TYPE_F32)
            for (int64_t i = 0; i < n; i++) ((float *)out[0].data)[i] = tnd_fp16_to_fp32(((const uint16_t *)in[0].data)[i]);
        else return tnd_fail(TND_ERR_UNSUPPORTED, "cpy: %s -> %s", tnd_type_name(in[0].type), tnd_type_name(out[0].type));
        return TND_OK;
    }
    case TND_OP_MOE_ROUTE: {
        int ne = (int)in[0].ne[0], k = op->p.route.n_used;
        int64_t nt = tnd_tensor_nelem(&in[0]) / ne;
        float *p = malloc(sizeof(float) * (size_t)ne);
        if (!p) return TND_ERR_NOMEM;
        for (int64_t t = 0; t < nt; t++) {
            memcpy(p, (const float *)in[0].data + t * ne, sizeof(float) * (size_t)ne);
            int *sel = (int32_t *)out[1].data + t * k;
            float *w = (float *)out[0].data + t * k;
            if (op->p.route.mode == TND_ROUTE_SOFTMAX_TOPK) {
                tnd_cpu_softmax(p, ne);
                tnd_cpu_topk(p, ne, k, sel);
                double sum = 0;
                for (int j = 0; j < k; j++) sum += w[j] = p[sel[j]];
                if (op->p.route.norm && sum > 0)
                    for (int j = 0; j < k; j++) w[j] = (float)(w[j] / sum);
            } else {
                tnd_cpu_topk(p, ne, k, sel);
                for (int j = 0; j < k; j++) w[j] = p[sel[j]];
                tnd_cpu_softmax(w, k);
            }
        }
        free(p);
        return TND_OK;
    }
    case TND_OP_MOE_SUM: {
        int64_t n = in[0].ne[0], k = in[0].ne[1], nt = in[0].ne[2];
        const float *y = in[0].data, *w = in[1].data;
        float *o = out[0].data;
        for (int64_t t = 0; t < nt; t++) {
            float *dst = o + t * n;
            memset(dst, 0, sizeof(float) * (size_t)n);
            for (int64_t u = 0; u < k; u++) {
                const float *src = y + (t * k + u) * n;
                float wu = w[t * k + u];
                for (int64_t i = 0; i < n; i++) dst[i] += wu * src[i];
            }
        }
        return TND_OK;
    }
    case TND_OP_NONE:
        return TND_OK;
    case TND_OP_ROPE_KV: { /* its four ops (the simulated GPU runs it here) */
        tnd_op part[4];
        tnd_op_rope_kv_split(op, part);
        for (int i = 0; i < 4; i++) {
            tnd_status st = cpu_op_run(b, &part[i], s);
            if (st) return st;
        }
        return TND_OK;
    }
    case TND_OP_MOE_SUM_NORM:
    case TND_OP_MOE_ROUTE_PAIR: { /* their two ops (the simulated GPU runs them here) */
        tnd_op part[2];
        if (op->kind == TND_OP_MOE_SUM_NORM) tnd_op_sum_norm_split(op, part);
        else tnd_op_route_pair_split(op, part);
        for (int i = 0; i < 2; i++) {
            tnd_status st = cpu_op_run(b, &part[i], s);
            if (st) return st;
        }
        return TND_OK;
    }
    case TND_OP_MOE_GLU:
    case TND_OP_MOE_FFN:
        return run_moe_glu(b, op, s);
    case TND_OP_MATMUL_PAIR: /* optional (backend.h), never fused for this backend */
    case TND_OP_COUNT:
        break;
    }
    return tnd_fail(TND_ERR_UNSUPPORTED, "cpu: op %s is not supported", tnd_op_name(op->kind));
}

static void cpu_free(tnd_backend *b) {
    if (!b) return;
    cpu_ctx *c = C(b);
    tnd_aligned_free(c->gx);
    tnd_aligned_free(c->gy);
    tnd_aligned_free(c->gu);
    tnd_aligned_free(c->gdy);
    tnd_aligned_free((void *)c->gready);
    tnd_aligned_free(c->gidx);
    tnd_rope_tabs_free(&c->rope);
    tnd_aligned_free(c->gact);
    tnd_aligned_free(c->goff);
    free(c);
    free(b);
}

static const tnd_backend_iface cpu_iface = {
    .name = "cpu",
    .free = cpu_free,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .mem_info = cpu_mem_info,
    .host_alloc = NULL,
    .host_free = NULL,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .stream_sync = cpu_stream_sync,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .event_elapsed = cpu_event_elapsed,
    .event_done = cpu_event_done,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .copy_mapped = cpu_copy,
    .memset = cpu_memset,
    .op_supported = NULL,
    .op_run = cpu_op_run,
};

tnd_status tnd_backend_cpu_new(struct tnd_pool *pool, uint64_t budget, tnd_backend **out) {
    tnd_backend *b = tnd_calloc(1, sizeof *b);
    cpu_ctx *c = tnd_calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        return TND_ERR_NOMEM;
    }
    c->pool = pool;
    c->budget = budget;
    c->int8_act = tnd_cpu_int8_env();
    b->iface = &cpu_iface;
    b->ctx = c;
    *out = b;
    return TND_OK;
}

void tnd_backend_cpu_set_int8(tnd_backend *b, bool on) {
    if (b && b->iface == &cpu_iface) C(b)->int8_act = on;
}

bool tnd_backend_cpu_int8(const tnd_backend *b) {
    return b && b->iface == &cpu_iface && ((const cpu_ctx *)b->ctx)->int8_act;
}

bool tnd_cpu_int8_env(void) { return tnd_config_get()->cpu_int8; }
