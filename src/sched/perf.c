/* The perf DB: measuring it, caching it, and the timeline model (perf.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu/membw.h"
#include "model/forward.h"
#include "sched/perf.h"
#include "sched/transfer.h"
#include "util.h"

const int tnd_perf_nt[TND_PERF_NK] = {1, 512, 2048};
#define KV_DEPTH 1024 /* cache rows a profiled decode step attends to */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double *T(double *a, int sid, int k) { return &a[sid * TND_PERF_NK + k]; }

/* Tokens a round of chunk size nt feeds slice w (the output head sees only
 * the last token). */
static int tokens_for(const tnd_model *m, int sid, int nt) { return sid == m->output.id ? 1 : nt; }

static bool timed_slice(const tnd_model *m, int sid) {
    const tnd_weight *w = m->slices[sid];
    return !tnd_slice_small(w) && (w != &m->tok_embd || m->hp_tied);
}

/* The op of slice w over nt tokens, with buffers x, y, ids (any may be NULL
 * for the cost model). */
static tnd_op slice_op(const tnd_model *m, const tnd_weight *w, const void *wd, int nt, void *x, void *y, void *ids) {
    tnd_op op = {.kind = w->n_expert > 1 ? TND_OP_MATMUL_ID : TND_OP_MATMUL};
    op.in[0] = (tnd_tensor){(void *)wd, w->type, {w->n_in, w->n_out, w->n_expert, 1}};
    if (w->n_expert > 1) {
        int k = m->hp.n_expert_used;
        op.in[1] = (tnd_tensor){x, TND_TYPE_F32, {w->n_in, 1, nt, 1}};
        op.in[2] = (tnd_tensor){ids, TND_TYPE_I32, {k, nt, 1, 1}};
        op.out[0] = (tnd_tensor){y, TND_TYPE_F32, {w->n_out, k, nt, 1}};
    } else {
        op.in[1] = (tnd_tensor){x, TND_TYPE_F32, {w->n_in, nt, 1, 1}};
        op.out[0] = (tnd_tensor){y, TND_TYPE_F32, {w->n_out, nt, 1, 1}};
    }
    return op;
}

static tnd_op attn_op(const tnd_model *m, int nt, int pos0, void *q, void *K, void *V, void *o) {
    const tnd_hparams *hp = &m->hp;
    int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    tnd_op op = {.kind = TND_OP_ATTN};
    op.p.attn.n_head = hp->n_head;
    op.p.attn.n_head_kv = hp->n_head_kv;
    op.p.attn.head_dim = hp->head_dim;
    op.p.attn.pos0 = pos0;
    op.p.attn.scale = hp->attn_scale;
    op.in[0] = (tnd_tensor){q, TND_TYPE_F32, {hp->head_dim, hp->n_head, nt, 1}};
    op.in[1] = (tnd_tensor){K, TND_TYPE_F16, {kvd, KV_DEPTH + 2048, 1, 1}};
    op.in[2] = (tnd_tensor){V, TND_TYPE_F16, {kvd, KV_DEPTH + 2048, 1, 1}};
    op.out[0] = (tnd_tensor){o, TND_TYPE_F32, {hp->head_dim, hp->n_head, nt, 1}};
    return op;
}

static tnd_op norm_op(const tnd_model *m, int nt, void *x, void *y) {
    tnd_op op = {.kind = TND_OP_RMS_NORM, .p.norm.eps = m->hp.eps};
    op.in[0] = (tnd_tensor){x, TND_TYPE_F32, {m->hp.n_embd, nt, 1, 1}};
    op.in[1] = (tnd_tensor){NULL, TND_TYPE_F32, {m->hp.n_embd, 1, 1, 1}};
    op.out[0] = (tnd_tensor){y, TND_TYPE_F32, {m->hp.n_embd, nt, 1, 1}};
    return op;
}

/* ---- from a hardware profile ------------------------------------------------ */

static void build_from_hw(const tnd_model *m, const tnd_hw *hw, tnd_perf *pf) {
    for (int i = 0; i < m->n_slices; i++) {
        if (!timed_slice(m, i)) continue;
        for (int k = 0; k < TND_PERF_NK; k++) {
            tnd_op op = slice_op(m, m->slices[i], NULL, tokens_for(m, i, tnd_perf_nt[k]), NULL, NULL, NULL);
            *T(pf->t_cpu, i, k) = tnd_hw_op_time_cpu(hw, &op);
            *T(pf->t_gpu, i, k) = tnd_hw_op_time_gpu(hw, &op);
        }
        /* the cost model reads weights per chosen expert: linear */
        if (m->slices[i]->n_expert > 1) pf->t_cpu_one[i] = *T(pf->t_cpu, i, 0) / TND_MAX(m->hp.n_expert_used, 1);
    }
    for (int k = 0; k < TND_PERF_NK; k++) {
        int nt = tnd_perf_nt[k];
        tnd_op a = attn_op(m, nt, k ? 0 : KV_DEPTH, NULL, NULL, NULL, NULL);
        pf->attn_cpu[k] = tnd_hw_op_time_cpu(hw, &a);
        pf->attn_gpu[k] = tnd_hw_op_time_gpu(hw, &a);
        tnd_op n = norm_op(m, nt, NULL, NULL);
        pf->other_cpu[k] = OTHER_OPS * tnd_hw_op_time_cpu(hw, &n);
        pf->other_gpu[k] = OTHER_OPS * tnd_hw_op_time_gpu(hw, &n);
    }
    pf->b_pcie = hw->pcie_bw;
    pf->b_cpu = hw->cpu_bw;
    pf->b_hbm = hw->hbm_bw;
    pf->lat = hw->pcie_lat + hw->launch;
    pf->launch = hw->launch;
    snprintf(pf->source, sizeof pf->source, "cost model of hardware profile %s", hw->name);
}

/* ---- measured ------------------------------------------------------------------- */

typedef struct meas {
    tnd_pool *pool;
    uint8_t *evict; /* read between timed decode runs, so weights come from DRAM as in a real round */
    size_t evict_n;
    size_t bw_n;    /* bytes of the first CPU read-bandwidth measurement (0: none), to repeat it at the end */
    tnd_backend *cpu, *gpu;
    tnd_stream *cs, *gs;
    tnd_event *e0, *e1;
} meas;

/* Seconds per run of op on the CPU: after one warm-up, the best of reps
 * (prefill: compute-bound, steady), or with caches flushed before each run
 * (M->evict set: decode) the median, since a decode step pays the
 * typical run of its small ops, not the luckiest. */
static double time_cpu(meas *M, const tnd_op *op, int reps) {
    double t[16];
    reps = reps < 1 ? 1 : reps > 15 ? 15 : reps;
    for (int r = 0; r <= reps; r++) {
        if (M->evict) tnd_cpu_read_once(M->pool, M->evict, M->evict_n);
        double t0 = tnd_time_s();
        if (tnd_backend_op_run(M->cpu, op, M->cs)) return -1;
        t[r] = tnd_time_s() - t0;
    }
    qsort(t + 1, (size_t)reps, sizeof(double), cmp_double);
    return M->evict ? t[1 + reps / 2] : t[1];
}

/* Seconds per run of op on the GPU (events around reps runs, after a warm-up). */
static double time_gpu(meas *M, const tnd_op *op, int reps) {
    if (tnd_backend_op_run(M->gpu, op, M->gs) || tnd_backend_stream_sync(M->gpu, M->gs)) return -1;
    tnd_backend_event_record(M->gpu, M->e0, M->gs);
    for (int r = 0; r < reps; r++)
        if (tnd_backend_op_run(M->gpu, op, M->gs)) return -1;
    tnd_backend_event_record(M->gpu, M->e1, M->gs);
    float ms = 0;
    if (tnd_backend_stream_sync(M->gpu, M->gs) || !M->gpu->iface->event_elapsed || tnd_backend_event_elapsed(M->gpu, M->e0, M->e1, &ms)) return -1;
    return ms / 1e3 / reps;
}

static void *gpu_buf(meas *M, size_t n) {
    void *p = NULL;
    if (M->gpu && tnd_backend_buf_alloc(M->gpu, n, &p)) {
        tnd_clear_error();
        return NULL;
    }
    if (p && M->gpu->iface->memset) tnd_backend_memset(M->gpu, p, 0, n, M->gs);
    return p;
}

static void fill_ids(int32_t *ids, int n_used, int nt, int n_expert, uint64_t *s) {
    for (int t = 0; t < nt; t++)
        for (int u = 0; u < n_used; u++) {
            *s = *s * 6364136223846793005ull + 1442695040888963407ull;
            ids[t * n_used + u] = (int32_t)(((*s >> 33) % (uint64_t)(n_expert / n_used > 0 ? n_expert / n_used : 1)) * n_used + u) % n_expert;
        }
}

/* The CPU's read bandwidth, bytes/s (0 if no memory): 1 GiB, past any
 * last-level cache (the device's is 300 MiB), read twice. */
static double cpu_read_bw(const tnd_model *m, size_t *n_used) {
    size_t n = *n_used ? *n_used : (size_t)1 << 30;
    uint8_t *b = tnd_aligned_alloc(n);
    if (!b && !*n_used) b = tnd_aligned_alloc(n = (size_t)256 << 20);
    *n_used = b ? n : 0;
    if (!b) return 0;
    memset(b, 1, n);
    double bw = tnd_cpu_read_bw(m->pool, b, n, 2) * 1e9;
    tnd_aligned_free(b);
    return bw;
}

void tnd_perf_disturbed(tnd_perf *pf, const char *why) {
    TND_WARN("%s: something else is using the machine, and the times may not be its own; profile again when it "
             "is quiet (tandem profile)", why);
    tnd_perf_mark(pf, TND_PERF_DISTURBED);
}

void tnd_perf_mark(tnd_perf *pf, const char *mark) {
    if (strstr(pf->source, mark)) return;
    const size_t k = strlen(pf->source);
    snprintf(pf->source + k, sizeof pf->source - k, "%s", mark);
}

void tnd_perf_note(tnd_perf *pf, const char *line) {
    size_t k = strlen(pf->note);
    snprintf(pf->note + k, sizeof pf->note - k, "%s\n", line);
}

static tnd_status build_measured(const tnd_model *m, meas *M, tnd_progress_fn progress, tnd_perf *pf) {
    /* first: what the measurements find (", disturbed") is appended to it */
    snprintf(pf->source, sizeof pf->source, "measured (%s + %s)", "cpu", M->gpu ? tnd_backend_name(M->gpu) : "no GPU");
    const tnd_hparams *hp = &m->hp;
    int n = m->n_slices, NT = tnd_perf_nt[TND_PERF_NK - 1];
    int64_t max_in = hp->n_embd, max_out = hp->n_embd;
    for (int i = 0; i < n; i++) {
        if (!timed_slice(m, i)) continue;
        const tnd_weight *w = m->slices[i];
        if (w->n_in > max_in) max_in = w->n_in;
        int64_t o = w->n_expert > 1 ? w->n_out * hp->n_expert_used : w->n_out;
        if (i != m->output.id && o > max_out) max_out = o;
    }
    if (m->output.n_out > max_out / NT) max_out = TND_MAX(max_out, (m->output.n_out + NT - 1) / NT);
    size_t xb = sizeof(float) * (size_t)max_in * NT, yb = sizeof(float) * (size_t)max_out * NT;
    size_t idb = sizeof(int32_t) * (size_t)TND_MAX(hp->n_expert_used, 1) * NT;
    float *x = tnd_aligned_alloc(xb), *y = tnd_aligned_alloc(yb);
    int32_t *ids = tnd_aligned_alloc(idb);
    void *gx = gpu_buf(M, xb), *gy = gpu_buf(M, yb), *gids = gpu_buf(M, idb);
    tnd_status st = TND_OK;
    if (!x || !y || !ids) st = tnd_fail(TND_ERR_NOMEM, "out of memory for profiling buffers");
    uint64_t seed = 1;
    for (size_t i = 0; !st && i < xb / sizeof(float); i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    if (!st) fill_ids(ids, TND_MAX(hp->n_expert_used, 1), NT, TND_MAX(hp->n_expert, 1), &seed);
    bool gpu_ok = M->gpu && gx && gy && gids;
    if (gpu_ok && !st) {
        tnd_backend_copy_h2d(M->gpu, gx, x, xb, M->gs);
        tnd_backend_copy_h2d(M->gpu, gids, ids, idb, M->gs);
        tnd_backend_stream_sync(M->gpu, M->gs);
    }
    /* bandwidths and switch latency */
    size_t bn = (size_t)256 << 20;
    uint8_t *hb = NULL;
    void *hd = NULL, *db = gpu_ok ? gpu_buf(M, bn) : NULL;
    if (!st) pf->b_cpu = cpu_read_bw(m, &M->bw_n);
    if (!st && db && M->gpu->iface->host_alloc && M->gpu->iface->copy_mapped && M->gpu->iface->event_elapsed &&
        !tnd_backend_host_alloc(M->gpu, bn, (void **)&hb, &hd)) {
        memset(hb, 1, bn);
        float ms = 0;
        tnd_backend_event_record(M->gpu, M->e0, M->gs);
        tnd_backend_copy_h2d(M->gpu, db, hb, bn, M->gs);
        tnd_backend_event_record(M->gpu, M->e1, M->gs);
        if (!tnd_backend_stream_sync(M->gpu, M->gs) && !tnd_backend_event_elapsed(M->gpu, M->e0, M->e1, &ms) && ms > 0) pf->b_pcie = bn / (ms / 1e3);
        /* the best of three copies: a single cold one read 2.5-3.1 TB/s on
         * the H200 from one profile to the next */
        for (int r = 0; r < 3; r++) {
            tnd_backend_event_record(M->gpu, M->e0, M->gs);
            tnd_backend_copy_d2d(M->gpu, (char *)db + bn / 2, db, bn / 2, M->gs);
            tnd_backend_event_record(M->gpu, M->e1, M->gs);
            if (!tnd_backend_stream_sync(M->gpu, M->gs) && !tnd_backend_event_elapsed(M->gpu, M->e0, M->e1, &ms) && ms > 0)
                pf->b_hbm = fmax(pf->b_hbm, bn / (ms / 1e3));
        }
        /* A pair of switches as the executor pays them: the CPU pool wakes
         * for an op, the activation row crosses, a GPU op runs, the result
         * comes back and the CPU waits for it. Median, minus the CPU op. */
        size_t row = sizeof(float) * (size_t)hp->n_embd;
        tnd_op cn = norm_op(m, 1, hb, hb + row), gn = norm_op(m, 1, db, (char *)db + row);
        double pair[21], alone[21];
        for (int r = 0; r < 21; r++) {
            double t0 = tnd_time_s();
            tnd_backend_op_run(M->cpu, &cn, M->cs);
            alone[r] = tnd_time_s() - t0;
            tnd_backend_copy_mapped(M->gpu, db, hd, row, M->gs);
            tnd_backend_op_run(M->gpu, &gn, M->gs);
            tnd_backend_copy_mapped(M->gpu, (char *)hd + row, (char *)db + row, row, M->gs);
            tnd_backend_event_record(M->gpu, M->e1, M->gs);
            tnd_backend_event_sync(M->gpu, M->e1);
            pair[r] = tnd_time_s() - t0;
            for (volatile int spin = 0; spin < 200000; spin++) { /* let the pool's threads fall asleep, as between real ops */
            }
        }
        qsort(pair, 21, sizeof(double), cmp_double);
        qsort(alone, 21, sizeof(double), cmp_double);
        pf->lat = (pair[10] - alone[10]) / 2;
        if (pf->lat > TND_PERF_LAT_BUSY_S && !strcmp(tnd_backend_name(M->gpu), "cuda")) {
            /* Idle GPUs answer in 5-20 us (the H200: 10-15). Another
             * process's kernels time-share the GPU, and each of ours waits
             * for a slice: a DB measured so would place the weights for a
             * shared GPU on every later run, and the shared-GPU rule, which
             * compares pings with this latency, would never see the GPU
             * idle (the H200 beside a kernel spinning on half its SMs:
             * ~0.9 ms, 2026-12-05). SimGPU's latency is its worker
             * threads' (slow under the sanitizers), not a sharing's. */
            char why[160];
            snprintf(why, sizeof why, "a pair of switches to the GPU and back took %.0f us (an idle GPU: 5-20)",
                     2e6 * pf->lat);
            tnd_perf_disturbed(pf, why);
            tnd_perf_mark(pf, TND_PERF_GPU_SHARED);
        }
        /* queuing GPU ops costs the host a few microseconds each, whatever the GPU does */
        double q0 = tnd_time_s();
        for (int r = 0; r < 64; r++) tnd_backend_op_run(M->gpu, &gn, M->gs);
        pf->launch = (tnd_time_s() - q0) / 64;
        tnd_backend_stream_sync(M->gpu, M->gs);
        tnd_backend_host_free(M->gpu, hb);
    }
    if (pf->b_hbm <= 0) pf->b_hbm = 1e12;
    if (pf->b_pcie <= 0) pf->b_pcie = 16e9;
    if (pf->b_cpu <= 0) pf->b_cpu = 20e9;
    if (pf->lat <= 0) pf->lat = 20e-6;
    if (db) tnd_backend_buf_free(M->gpu, db);
    /* slices: one timing per (type, shape) */
    M->pool = m->pool;
    M->evict_n = (size_t)256 << 20;
    uint8_t *evict = tnd_aligned_alloc(M->evict_n);
    if (evict) memset(evict, 1, M->evict_n);
    int *rep = tnd_calloc((size_t)n + 1, sizeof *rep), groups = 0, done = 0;
    if (!rep && !st) st = TND_ERR_NOMEM;
    for (int i = 0; !st && i < n; i++) {
        rep[i] = -1;
        if (!timed_slice(m, i)) continue;
        for (int j = 0; j < i && rep[i] < 0; j++) {
            const tnd_weight *a = m->slices[i], *b = m->slices[j];
            if (rep[j] == j && a->type == b->type && a->n_in == b->n_in && a->n_out == b->n_out &&
                a->n_expert == b->n_expert && (i == m->output.id) == (j == m->output.id))
                rep[i] = j;
        }
        if (rep[i] < 0) rep[i] = i, groups++;
    }
    for (int i = 0; !st && i < n; i++) {
        if (rep[i] != i) continue;
        const tnd_weight *w = m->slices[i];
        if (progress) progress(done, groups + 1, "timing weight slices");
        void *gw = gpu_ok ? gpu_buf(M, w->t->nbytes) : NULL;
        if (gw) {
            tnd_backend_copy_h2d(M->gpu, gw, w->data, w->t->nbytes, M->gs);
            /* laid out as the executor lays resident weights (layout.c), so the kernel timed is the one that runs */
            tnd_tensor t = {gw, w->type, {w->n_in, w->n_out, 1, 1}};
            if (M->gpu->iface->weight_prepare && w->n_expert <= 1 && w != &m->tok_embd &&
                tnd_backend_weight_prepare(M->gpu, &t, M->gs))
                st = tnd_fail_wrap(TND_ERR_BACKEND, "profiling on the GPU: ");
            tnd_backend_stream_sync(M->gpu, M->gs);
        }
        for (int k = 0; k < TND_PERF_NK && !st; k++) {
            int nt = tokens_for(m, i, tnd_perf_nt[k]);
            tnd_op op = slice_op(m, w, w->data, nt, x, y, ids);
            /* CPU prefill is compute-bound and linear in tokens: time 512, scale 2048 */
            double tc;
            if (k == 2 && nt > 1) tc = *T(pf->t_cpu, i, 1) * nt / tokens_for(m, i, tnd_perf_nt[1]);
            else if (k == 0) {
                M->evict = evict;
                tc = time_cpu(M, &op, 5);
                if (w->n_expert > 1 && tc >= 0 && hp->n_expert_used <= 64) {
                    /* the token's first expert only, the others skipped */
                    int n_used = TND_MAX(hp->n_expert_used, 1);
                    int32_t keep[64];
                    memcpy(keep, ids, sizeof(int32_t) * (size_t)n_used);
                    for (int u = 1; u < n_used; u++) ids[u] = -1;
                    op.p.mmid.skip = true;
                    pf->t_cpu_one[i] = time_cpu(M, &op, 5);
                    op.p.mmid.skip = false;
                    memcpy(ids, keep, sizeof(int32_t) * (size_t)n_used);
                    if (pf->t_cpu_one[i] < 0) tc = -1;
                }
                M->evict = NULL;
            } else tc = time_cpu(M, &op, 3); /* best of 3: one run moved 14B's layer pp512 prediction 20% */
            if (tc < 0) st = tnd_fail_wrap(TND_ERR_BACKEND, "profiling on the CPU: ");
            *T(pf->t_cpu, i, k) = tc;
            double tg = -1;
            tnd_op g = slice_op(m, w, gw, nt, gx, gy, gids);
            if (g.kind == TND_OP_MATMUL_ID) g.p.mmid.ids_host = ids; /* as the executor hands them over (exec.c) */
            if (M->gpu && M->gpu->iface->op_supported && tnd_backend_op_supported(M->gpu, &g)) {
                tnd_clear_error();
                tg = INFINITY; /* the GPU cannot run it: never place it there */
            } else if (gw) {
                tg = time_gpu(M, &g, k == 0 ? 20 : 3);
            }
            /* no GPU room for this slice: its bytes at the measured HBM rate,
             * an estimate (the DB is then not cached) */
            if (!(tg > 0)) pf->estimated = true;
            *T(pf->t_gpu, i, k) = tg > 0 ? tg : (double)w->t->nbytes / pf->b_hbm;
        }
        if (gw) tnd_backend_buf_free(M->gpu, gw);
        done++;
    }
    for (int i = 0; !st && i < n; i++) {
        if (rep[i] < 0 || rep[i] == i) continue;
        memcpy(T(pf->t_cpu, i, 0), T(pf->t_cpu, rep[i], 0), sizeof(double) * TND_PERF_NK);
        memcpy(T(pf->t_gpu, i, 0), T(pf->t_gpu, rep[i], 0), sizeof(double) * TND_PERF_NK);
        pf->t_cpu_one[i] = pf->t_cpu_one[rep[i]];
    }
    free(rep);
    /* attention and the weightless ops of one layer */
    if (progress && !st) progress(done, groups + 1, "timing attention");
    int64_t kvd = (int64_t)hp->n_head_kv * hp->head_dim, rows = KV_DEPTH + 2048;
    size_t kvb = sizeof(uint16_t) * (size_t)kvd * rows;
    size_t qb = sizeof(float) * (size_t)hp->n_head * hp->head_dim * NT;
    uint16_t *K = tnd_aligned_alloc(kvb), *V = tnd_aligned_alloc(kvb);
    void *gK = gpu_buf(M, kvb), *gV = gpu_buf(M, kvb);
    if (!st && (!K || !V || qb > xb || qb > yb)) st = tnd_fail(TND_ERR_NOMEM, "out of memory for profiling attention");
    if (!st) memset(K, 0, kvb), memset(V, 0, kvb);
    for (int k = 0; !st && k < TND_PERF_NK; k++) {
        int nt = tnd_perf_nt[k], pos0 = k ? 0 : KV_DEPTH;
        tnd_op a = attn_op(m, nt, pos0, x, K, V, y);
        /* timed at 2048 too: scaling 512's time by the square came out 30%
         * short on the device (the longer rows fall out of the caches) */
        /* a decode step reads each layer's cache rows cold, as its weights */
        M->evict = k ? NULL : evict;
        pf->attn_cpu[k] = time_cpu(M, &a, k == 0 ? 5 : k == 1 ? 3 : 1);
        M->evict = NULL;
        tnd_op nm = norm_op(m, nt, x, y);
        pf->other_cpu[k] = OTHER_OPS * time_cpu(M, &nm, 3);
        double ga = -1, gn = -1;
        if (gpu_ok && gK && gV) {
            tnd_op g = attn_op(m, nt, pos0, gx, gK, gV, gy);
            ga = time_gpu(M, &g, 5);
            tnd_op gnm = norm_op(m, nt, gx, gy);
            gn = time_gpu(M, &gnm, 10);
        }
        if (!(ga > 0) || !(gn > 0)) pf->estimated = true;
        pf->attn_gpu[k] = ga > 0 ? ga : pf->attn_cpu[k] / 20;
        pf->other_gpu[k] = gn > 0 ? OTHER_OPS * gn : pf->other_cpu[k] / 20;
    }
    if (progress && !st) progress(groups + 1, groups + 1, "done");
    tnd_aligned_free(evict);
    tnd_aligned_free(K);
    tnd_aligned_free(V);
    if (M->gpu) {
        tnd_backend_buf_free(M->gpu, gK);
        tnd_backend_buf_free(M->gpu, gV);
        tnd_backend_buf_free(M->gpu, gx);
        tnd_backend_buf_free(M->gpu, gy);
        tnd_backend_buf_free(M->gpu, gids);
    }
    tnd_aligned_free(x);
    tnd_aligned_free(y);
    tnd_aligned_free(ids);
    return st;
}

double tnd_perf_sw_host_max(const tnd_perf *pf) { return fmin(1e-3, 5 * (fmax(pf->lat, 0) + fmax(pf->launch, 0))); }

bool tnd_perf_fit_switch(const tnd_model *m, tnd_perf *pf, const tnd_placement *p, int pos0, double measured) {
    const double keep = pf->sw_host, hi_s = tnd_perf_sw_host_max(pf);
    pf->sw_host = 0;
    double lo = tnd_perf_predict(m, pf, p, 0, 1, pos0);
    pf->sw_host = hi_s;
    double hi = tnd_perf_predict(m, pf, p, 0, 1, pos0);
    /* under 5 switches a step, a per-switch cost is not what the model misses */
    if (!(hi_s > 0) || !(hi - lo >= 5 * hi_s) || !(measured > 0)) { /* (NaN: no fit) */
        pf->sw_host = keep;
        return false;
    }
    /* the prediction grows with the cost (the clocks only add and take
     * maxima): bisect, within 0 (the model already fast enough) and the
     * most the costs it stands for can plausibly take (a slower step is a
     * disturbed measurement) */
    double a = 0, b = hi_s;
    if (lo >= measured) b = 0;
    else if (hi <= measured) a = hi_s;
    for (int i = 0; i < 60 && b - a > 1e-13; i++) {
        pf->sw_host = (a + b) / 2;
        if (tnd_perf_predict(m, pf, p, 0, 1, pos0) < measured) a = pf->sw_host;
        else b = pf->sw_host;
    }
    pf->sw_host = (a + b) / 2;
    return true;
}

/* undisturbed decode factors: 1.05-1.12 on the device, 1.32 on a 2-core machine */
#define CAL_MIN 0.9
#define CAL_MAX 2.0
#define CAL_FLOOR 0.2

double tnd_perf_decode_factor(double f, bool *disturbed) {
    *disturbed = !(f >= CAL_MIN && f <= CAL_MAX);
    if (!*disturbed) return f;
    if (isnan(f)) return CAL_MIN;
    return f > CAL_MAX ? CAL_MAX : f < CAL_FLOOR ? CAL_FLOOR : f;
}

void tnd_perf_scale_cpu_decode(tnd_perf *pf, double f) {
    for (int i = 0; i < pf->n_slices; i++) {
        *T(pf->t_cpu, i, 0) *= f;
        if (pf->t_cpu_one) pf->t_cpu_one[i] *= f;
    }
    pf->attn_cpu[0] *= f;
    pf->other_cpu[0] *= f;
    pf->cal_decode = (pf->cal_decode > 0 ? pf->cal_decode : 1) * f;
}

tnd_status tnd_perf_init(const tnd_model *m, tnd_perf *pf) {
    memset(pf, 0, sizeof *pf);
    pf->n_slices = m->n_slices;
    pf->n_layer = m->hp.n_layer;
    pf->t_cpu = tnd_calloc((size_t)m->n_slices * TND_PERF_NK + 1, sizeof(double));
    pf->t_cpu_one = tnd_calloc((size_t)m->n_slices + 1, sizeof(double));
    pf->t_gpu = tnd_calloc((size_t)m->n_slices * TND_PERF_NK + 1, sizeof(double));
    if (!pf->t_cpu || !pf->t_gpu || !pf->t_cpu_one) {
        tnd_perf_free(pf);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    return TND_OK;
}

tnd_status tnd_perf_set_popularity(const tnd_model *m, tnd_perf *pf, const int64_t *hits, int n_tokens) {
    size_t cells = (size_t)m->hp.n_layer * m->hp.n_expert;
    free(pf->pop);
    pf->pop = tnd_calloc(cells, sizeof(double));
    if (!pf->pop) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cells; i++) pf->pop[i] = (double)hits[i] / n_tokens;
    pf->n_expert = m->hp.n_expert;
    return TND_OK;
}

void tnd_perf_from_hw(const tnd_model *m, const tnd_hw *hw, tnd_perf *pf) { build_from_hw(m, hw, pf); }

tnd_status tnd_perf_measure_ops(const tnd_model *m, tnd_backend *cpu, tnd_backend *gpu, tnd_progress_fn progress,
                                tnd_perf *pf, tnd_perf_run *run) {
    memset(run, 0, sizeof *run);
    meas M = {.cpu = cpu, .gpu = gpu};
    tnd_status st = tnd_backend_stream_new(cpu, &M.cs);
    if (!st && gpu) {
        if ((st = tnd_backend_stream_new(gpu, &M.gs)) || (st = tnd_backend_event_new(gpu, &M.e0)) ||
            (st = tnd_backend_event_new(gpu, &M.e1)))
            M.gpu = NULL;
    }
    if (!st) st = build_measured(m, &M, progress, pf);
    if (M.cs) tnd_backend_stream_free(cpu, M.cs);
    /* the measuring stream's cuBLAS handle and scratch leave the budget to the hybrid steps */
    if (gpu) {
        if (M.e0) tnd_backend_event_free(gpu, M.e0);
        if (M.e1) tnd_backend_event_free(gpu, M.e1);
        if (M.gs) tnd_backend_stream_free(gpu, M.gs);
    }
    run->gpu_timed = M.gpu != NULL;
    run->bw_bytes = M.bw_n;
    return st;
}

void tnd_perf_check_quiet(const tnd_model *m, tnd_perf *pf, const tnd_perf_run *run) {
    /* Another program's load moves the timings (on the device: profiles
     * whose CPU decode factor came out 0.5 and 0.79 against 1.05-1.12), and
     * it shows as a change in the read bandwidth between start and end. */
    size_t n_end = run->bw_bytes;
    const double b_end = !n_end ? 0 : cpu_read_bw(m, &n_end);
    if (b_end > 0 && pf->b_cpu > 0 && fabs(b_end / pf->b_cpu - 1) > 0.2) {
        char why[160];
        snprintf(why, sizeof why, "the CPU's read bandwidth went from %.1f to %.1f GB/s while profiling",
                 pf->b_cpu / 1e9, b_end / 1e9);
        tnd_perf_disturbed(pf, why);
    }
}

void tnd_perf_free(tnd_perf *pf) {
    free(pf->t_cpu);
    free(pf->t_cpu_one);
    free(pf->t_gpu);
    free(pf->pop);
    pf->t_cpu = pf->t_gpu = pf->pop = pf->t_cpu_one = NULL;
}

/* ---- cache ---------------------------------------------------------------------- */

bool tnd_perf_cache_path(const tnd_model *m, const char *gpu_desc, char *buf, size_t cap) {
    const char *dir = getenv("TANDEM_CACHE");
    char d[2048];
    if (!dir || !*dir) {
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (x && *x) snprintf(d, sizeof d, "%s/tandem", x);
        else if (home && *home) snprintf(d, sizeof d, "%s/.cache/tandem", home);
        else return false;
        dir = d;
    }
    /* mkdir -p of the last two levels is enough for ~/.cache/tandem */
    char parent[2048];
    snprintf(parent, sizeof parent, "%s", dir);
    char *sl = strrchr(parent, '/');
    if (sl && sl != parent) {
        *sl = 0;
        mkdir(parent, 0755);
    }
    if (mkdir(dir, 0755) && errno != EEXIST) return false;
    struct stat sb;
    const char *path = gguf_path(m->gguf);
    uint64_t h = TND_FNV_SEED;
    if (stat(path, &sb) == 0) {
        h = tnd_fnv1a(h, &sb.st_size, sizeof sb.st_size);
        h = tnd_fnv1a(h, &sb.st_mtime, sizeof sb.st_mtime);
    }
    h = tnd_fnv1a(h, path, strlen(path));
    h = tnd_fnv1a(h, gpu_desc, strlen(gpu_desc));
    h = tnd_fnv1a(h, &m->n_threads, sizeof m->n_threads);
    h = tnd_fnv1a(h, tnd_cpu_model_name(), strlen(tnd_cpu_model_name()));
    snprintf(buf, cap, "%s/perf-%016llx.txt", dir, (unsigned long long)h);
    return true;
}

tnd_status tnd_perf_save(const tnd_perf *pf, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return tnd_fail(TND_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    /* format 6: decode CPU times are medians, CPU attention is timed at
     * 2048 tokens (4), decode attention with cold caches and every CPU
     * decode time calibrated against real steps (5, the "cal" line), the
     * per-switch host cost fitted to hybrid steps (6), resident Q6_K
     * matrices timed in their CUDA tile layout (7: their decode matvec is
     * up to twice as fast, so a placement from older times is off); older
     * caches are measured anew. Numbers as %.17g, which reads back to the same double:
     * the knapsack breaks near-ties between alike layers by the last digits,
     * so a rounded cache planned differently from the fresh measurement. */
    fprintf(f, "tandem-perf 7\nslices %d\nlayers %d\nexperts %d\nsource %s\n", pf->n_slices, pf->n_layer,
            pf->pop ? pf->n_expert : 0, pf->source);
    fprintf(f, "bw %.17g %.17g %.17g\nlat %.17g %.17g\n", pf->b_pcie, pf->b_cpu, pf->b_hbm, pf->lat, pf->launch);
    fprintf(f, "attn %.17g %.17g %.17g %.17g %.17g %.17g\n", pf->attn_cpu[0], pf->attn_cpu[1], pf->attn_cpu[2], pf->attn_gpu[0],
            pf->attn_gpu[1], pf->attn_gpu[2]);
    fprintf(f, "other %.17g %.17g %.17g %.17g %.17g %.17g\n", pf->other_cpu[0], pf->other_cpu[1], pf->other_cpu[2],
            pf->other_gpu[0], pf->other_gpu[1], pf->other_gpu[2]);
    fprintf(f, "cal %.17g %.17g\n", pf->cal_decode, pf->sw_host);
    for (int i = 0; i < pf->n_slices; i++)
        fprintf(f, "s %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", i, *T(pf->t_cpu, i, 0), *T(pf->t_cpu, i, 1),
                *T(pf->t_cpu, i, 2), *T(pf->t_gpu, i, 0), *T(pf->t_gpu, i, 1), *T(pf->t_gpu, i, 2), pf->t_cpu_one[i]);
    for (int l = 0; pf->pop && l < pf->n_layer; l++) {
        fputc('p', f);
        for (int e = 0; e < pf->n_expert; e++) fprintf(f, " %.17g", pf->pop[(size_t)l * pf->n_expert + e]);
        fputc('\n', f);
    }
    bool bad = ferror(f) != 0;
    if (fclose(f) || bad || rename(tmp, path)) {
        remove(tmp);
        return tnd_fail(TND_ERR_IO, "writing %s failed", path);
    }
    return TND_OK;
}

tnd_status tnd_perf_load(const tnd_model *m, const char *path, tnd_perf *pf) {
    FILE *f = fopen(path, "r");
    if (!f) return tnd_fail(TND_ERR_IO, "no perf DB at %s", path);
    memset(pf, 0, sizeof *pf);
    int ns = -1, nl = -1, ok = 1;
    char line[512];
    int ne = -1;
    ok &= fgets(line, sizeof line, f) && !strncmp(line, "tandem-perf 7", 13);
    ok &= fscanf(f, "slices %d\nlayers %d\nexperts %d\n", &ns, &nl, &ne) == 3 && ns == m->n_slices &&
          nl == m->hp.n_layer && (ne == 0 || ne == m->hp.n_expert);
    if (ok) {
        pf->n_slices = ns;
        pf->n_layer = nl;
        pf->t_cpu = tnd_calloc((size_t)ns * TND_PERF_NK + 1, sizeof(double));
        pf->t_gpu = tnd_calloc((size_t)ns * TND_PERF_NK + 1, sizeof(double));
        pf->t_cpu_one = tnd_calloc((size_t)ns + 1, sizeof(double));
        ok &= pf->t_cpu && pf->t_gpu && pf->t_cpu_one;
    }
    ok = ok && fgets(line, sizeof line, f) && !strncmp(line, "source ", 7);
    if (ok) snprintf(pf->source, sizeof pf->source, "%.*s", (int)strcspn(line + 7, "\n"), line + 7);
    ok = ok && fscanf(f, "bw %lf %lf %lf\nlat %lf %lf\n", &pf->b_pcie, &pf->b_cpu, &pf->b_hbm, &pf->lat,
                      &pf->launch) == 5;
    ok = ok && fscanf(f, "attn %lf %lf %lf %lf %lf %lf\n", &pf->attn_cpu[0], &pf->attn_cpu[1], &pf->attn_cpu[2],
                      &pf->attn_gpu[0], &pf->attn_gpu[1], &pf->attn_gpu[2]) == 6;
    ok = ok && fscanf(f, "other %lf %lf %lf %lf %lf %lf\n", &pf->other_cpu[0], &pf->other_cpu[1], &pf->other_cpu[2],
                      &pf->other_gpu[0], &pf->other_gpu[1], &pf->other_gpu[2]) == 6;
    ok = ok && fscanf(f, "cal %lf %lf\n", &pf->cal_decode, &pf->sw_host) == 2 && pf->cal_decode >= 0 &&
         pf->cal_decode < 1e3 && pf->sw_host >= 0 && pf->sw_host <= 1e-3;
    for (int i = 0; ok && i < ns; i++) {
        int id;
        ok = fscanf(f, "s %d %lf %lf %lf %lf %lf %lf %lf\n", &id, T(pf->t_cpu, i, 0), T(pf->t_cpu, i, 1),
                    T(pf->t_cpu, i, 2), T(pf->t_gpu, i, 0), T(pf->t_gpu, i, 1), T(pf->t_gpu, i, 2),
                    &pf->t_cpu_one[i]) == 8 && id == i;
    }
    if (ok && ne > 0) {
        pf->n_expert = ne;
        pf->pop = tnd_calloc((size_t)nl * ne, sizeof(double));
        ok = pf->pop != NULL;
        for (int i = 0; ok && i < nl * ne; i++) ok = fscanf(f, i % ne ? " %lf" : " p %lf", &pf->pop[i]) == 1;
    }
    fclose(f);
    if (!ok) {
        tnd_perf_free(pf);
        return tnd_fail(TND_ERR_FORMAT, "perf DB %s is stale or damaged (delete it to re-profile)", path);
    }
    return TND_OK;
}

/* ---- the timeline model ------------------------------------------------------------- */

/* Linear in tokens between the profiled sizes. */
static double interp(const double *t, int nt) {
    if (nt <= tnd_perf_nt[0]) return t[0];
    for (int k = 1; k < TND_PERF_NK; k++)
        if (nt <= tnd_perf_nt[k]) {
            double a = (double)(nt - tnd_perf_nt[k - 1]) / (tnd_perf_nt[k] - tnd_perf_nt[k - 1]);
            return t[k - 1] + a * (t[k] - t[k - 1]);
        }
    return t[TND_PERF_NK - 1] * nt / tnd_perf_nt[TND_PERF_NK - 1];
}

double tnd_perf_attn_time(const tnd_perf *pf, int side, int nt, int pos0) {
    const double *at = side ? pf->attn_gpu : pf->attn_cpu;
    if (nt == 1) return at[0] * (pos0 + 1.0) / (KV_DEPTH + 1.0);
    /* a chunk's queries see pos0 + nt/2 rows on average: the cost per
     * (query, row) from the profiled chunk nearest in size (512 or 2048
     * tokens from an empty cache, nt^2/2 pairs) */
    int k = nt >= 1024 ? 2 : 1;
    double per = at[k] / ((double)tnd_perf_nt[k] * tnd_perf_nt[k] / 2.0);
    return per * nt * (pos0 + nt / 2.0);
}

double tnd_perf_other_time(const tnd_perf *pf, int side, int nt) { return interp(side ? pf->other_gpu : pf->other_cpu, nt); }

double tnd_perf_slice_time(const tnd_perf *pf, int sid, int side, int nt) {
    return interp(side ? &pf->t_gpu[sid * TND_PERF_NK] : &pf->t_cpu[sid * TND_PERF_NK], nt);
}

/* Experts of layer l that a round of nt tokens routes to, among those on
 * side `side` of p (every expert when p is NULL): sum over experts of
 * 1 - (1 - q)^nt, q the share of tokens that pick the expert (its hot-expert
 * table entry; k/E, uniform, without one). */
static double experts_chosen(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int side, int nt) {
    int E = m->hp.n_expert;
    double k = m->hp.n_expert_used, sum = 0;
    bool hot = pf && pf->pop && pf->n_expert == E && l >= 0 && l < pf->n_layer;
    for (int e = 0; e < E; e++) {
        if (p && p->exp && p->exp[(size_t)l * E + e] != side) continue;
        double q = hot ? pf->pop[(size_t)l * E + e] : k / E;
        q = q < 0 ? 0 : q > 1 ? 1 : q;
        sum += 1.0 - pow(1.0 - q, nt);
    }
    return sum;
}

/* A GPU expert op over many tokens runs one GEMM (and one dequant) per
 * expert that has tokens, and at prefill sizes those per-expert launches,
 * not the arithmetic, make its time. The profile timed it with ids spread
 * over every group of E / k experts (fill_ids), so nearly all E had tokens;
 * a real round's op has the experts its routing chose. Seconds per chosen
 * expert: the profiled time over the experts the profile's ids reached. */
static double gpu_per_expert(const tnd_model *m, const tnd_perf *pf, int sid, int nt) {
    double E = m->hp.n_expert, k = TND_MAX(m->hp.n_expert_used, 1);
    double reached = E * (1.0 - pow(1.0 - fmin(k / E, 1.0), nt));
    return tnd_perf_slice_time(pf, sid, TND_SIDE_GPU, nt) / fmax(reached, 1.0);
}

/* GPU seconds of slice sid (not split) for a round of nt tokens: an expert
 * tensor's over many tokens by the experts routing chooses. */
double tnd_perf_gpu_time(const tnd_model *m, const tnd_perf *pf, int sid, int nt) {
    const tnd_weight *w = m->slices[sid];
    if (w->n_expert <= 1 || nt <= TND_MMID_PAIRS_MAX_TOK) return tnd_perf_slice_time(pf, sid, TND_SIDE_GPU, nt);
    return gpu_per_expert(m, pf, sid, nt) * experts_chosen(m, pf, NULL, tnd_slice_layer(w), 0, nt);
}

bool tnd_perf_experts_ahead(const tnd_model *m, int nt) {
    const double E = m->hp.n_expert, k = m->hp.n_expert_used;
    return E > 1 && k > 0 && nt > TND_PREDICT_MAX_TOK && pow(1.0 - fmin(k / E, 1.0), nt) <= 0.05;
}

/* Bytes a promotion of slice sid copies in a round of nt tokens: an expert
 * tensor copies only the experts routing chose, or all of them ahead. */
double tnd_perf_promoted_bytes(const tnd_model *m, const tnd_perf *pf, int sid, int nt) {
    const tnd_weight *w = m->slices[sid];
    if (w->n_expert <= 1 || tnd_perf_experts_ahead(m, nt)) return (double)w->t->nbytes;
    return (double)w->t->nbytes / w->n_expert * experts_chosen(m, pf, NULL, tnd_slice_layer(w), 0, nt);
}

/* A split layer l's three expert tensors for a round of nt tokens: GPU
 * seconds of its resident experts' share (tg), CPU seconds of the CPU
 * experts' share (tc), GPU seconds of that share when promoted (tcg), and
 * the bytes promoting the CPU experts copies (those routing chose). */
typedef struct {
    double tg, tc, tcg, bytes;
} split_cost;

static split_cost split_times(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt) {
    const tnd_layer *L = &m->layers[l];
    const tnd_weight *ex[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    double g = tnd_perf_gpu_share(m, pf, p, l), chosen = experts_chosen(m, pf, p, l, TND_SIDE_CPU, nt);
    /* copied ahead: every CPU expert (tnd_perf_experts_ahead) */
    const double copied = tnd_perf_experts_ahead(m, nt) ? p->n_expert - tnd_placement_gpu_experts(m, p, l) : chosen;
    /* Over many tokens each GPU part costs its chosen experts
     * (gpu_per_expert); a decode step's single kernel follows the routings. */
    const bool per_expert = nt > TND_MMID_PAIRS_MAX_TOK;
    const double cg = per_expert ? experts_chosen(m, pf, p, l, TND_SIDE_GPU, nt) : 0;
    /* The CPU part of a decode step: between one chosen expert (t_cpu_one,
     * which carries the op's fixed cost) and all n_used of them, by the
     * expected number it gets. */
    double k = TND_MAX(m->hp.n_expert_used, 1), n_cpu = (1 - g) * k;
    split_cost sc = {0, 0, 0, 0};
    for (int q = 0; q < 3; q++) {
        int id = ex[q]->id;
        double tcpu = tnd_perf_slice_time(pf, id, TND_SIDE_CPU, nt), one = pf->t_cpu_one ? pf->t_cpu_one[id] : 0;
        const double tgpu = tnd_perf_slice_time(pf, id, TND_SIDE_GPU, nt), per = gpu_per_expert(m, pf, id, nt);
        sc.tg += per_expert ? cg * per : g * tgpu;
        sc.tc += nt == 1 && one > 0 && k > 1 && n_cpu > 0 ? one + (tcpu - one) * fmax(n_cpu - 1, 0) / (k - 1)
                                                        : (1 - g) * tcpu;
        sc.tcg += per_expert ? chosen * per : (1 - g) * tgpu;
        sc.bytes += (double)ex[q]->t->nbytes / ex[q]->n_expert * copied;
    }
    return sc;
}

/* The rule of tnd_perf_split_pays_to_promote, and the layer's time with its
 * halves side by side, from its costs. */
static bool split_pays(const tnd_perf *pf, const split_cost *sc) {
    return 3 * pf->lat + sc->bytes / pf->b_pcie + sc->tcg < sc->tc;
}

static double split_side_by_side(const tnd_perf *pf, const split_cost *sc, int nt) {
    return 7 * fmax(pf->launch, 0) + fmax(sc->tc + tnd_perf_other_time(pf, TND_SIDE_CPU, nt), sc->tg + pf->lat);
}

bool tnd_perf_split_pays_to_promote(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt) {
    split_cost sc = split_times(m, pf, p, l, nt);
    return split_pays(pf, &sc);
}

bool tnd_perf_pays_to_promote(const tnd_model *m, const tnd_perf *pf, int sid, int nt) {
    double copy = pf->lat + tnd_perf_promoted_bytes(m, pf, sid, nt) / pf->b_pcie;
    return copy + tnd_perf_gpu_time(m, pf, sid, nt) < tnd_perf_slice_time(pf, sid, TND_SIDE_CPU, nt);
}

void tnd_perf_split_sides(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt,
                          double *t_side, double *t_gpu, double *bytes) {
    split_cost sc = split_times(m, pf, p, l, nt);
    *t_side = split_side_by_side(pf, &sc, nt);
    *t_gpu = sc.tg + sc.tcg + 6 * fmax(pf->launch, 0);
    *bytes = sc.bytes;
}

double tnd_perf_split_time(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt) {
    split_cost sc = split_times(m, pf, p, l, nt);
    if (!split_pays(pf, &sc)) return split_side_by_side(pf, &sc, nt);
    /* there and back, the chosen CPU experts' copy once routing is known, both parts on the GPU */
    double sw = pf->lat + pf->sw_host + sizeof(float) * (double)m->hp.n_embd * nt / pf->b_pcie;
    return 2 * sw + 3 * pf->lat + sc.bytes / pf->b_pcie + sc.tg + sc.tcg + 6 * fmax(pf->launch, 0);
}

/* Share of layer l's expert work (routings) that goes to its GPU experts:
 * their popularity mass, or their count without a hot-expert table. */
double tnd_perf_gpu_share(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l) {
    int E = p->n_expert;
    if (!pf || !pf->pop || pf->n_expert != E) return (double)tnd_placement_gpu_experts(m, p, l) / E;
    double g = 0, all = 0;
    for (int e = 0; e < E; e++) {
        double x = pf->pop[(size_t)l * E + e];
        all += x;
        g += p->exp[(size_t)l * E + e] == TND_SIDE_GPU ? x : 0;
    }
    return all > 0 ? g / all : (double)tnd_placement_gpu_experts(m, p, l) / E;
}

/* Two clocks: the host thread (it runs the CPU's ops and queues the GPU's,
 * pf->launch each) and the GPU stream (an op starts once queued and once
 * the op before it is done). A decode step of small GPU ops is bound by the
 * host's queuing, which a single clock that adds kernel times misses. */
typedef struct {
    double host, gpu;
    int cur; /* side holding the activation */
    double sw, launch;
} tl_clock;

/* The activation moves to side s: a GPU op waits for the host's copy, the
 * host waits for the GPU's work and the copy back. */
static void tl_to(tl_clock *k, int s) {
    if (s == k->cur) return;
    if (s == TND_SIDE_GPU) {
        k->host += k->launch;
        k->gpu = fmax(k->gpu, k->host) + k->sw;
    } else {
        k->host = fmax(k->host, k->gpu) + k->sw;
    }
    k->cur = s;
}

/* n GPU ops taking t seconds in all, queued now: the GPU runs them as they
 * come, so it ends after the host has queued the last and that one has run. */
static void tl_gpu(tl_clock *k, double t, int n) {
    k->gpu = fmax(fmax(k->gpu, k->host + k->launch) + t, k->host + n * k->launch + t / n);
    k->host += n * k->launch;
}

/* The executor's ring of promoted slices (exec.c), in time: where each
 * promotion of the round sits and when the op reading it is done. */
typedef struct {
    uint64_t bytes, at;
    uint64_t *off, *len;
    double *done;
    int n, cap;
    const tnd_model *m;
} tl_ring;

static bool ring_init(tl_ring *r, const tnd_model *m, const tnd_placement *p, int n_slots) {
    uint64_t big = 0;
    for (int i = 0; i < m->n_slices; i++)
        if (p->promote[i]) big = TND_MAX(big, (m->slices[i]->t->nbytes + 255) & ~(uint64_t)255);
    r->m = m;
    r->bytes = (uint64_t)n_slots * big;
    r->cap = m->n_slices + 1;
    r->off = malloc(sizeof *r->off * (size_t)r->cap);
    r->len = malloc(sizeof *r->len * (size_t)r->cap);
    r->done = malloc(sizeof *r->done * (size_t)r->cap);
    return r->off && r->len && r->done && big > 0;
}

static void ring_free(tl_ring *r) {
    free(r->off);
    free(r->len);
    free(r->done);
}

/* Places the next promotion (slice sid; a split layer's CPU experts
 * copied ahead, n_packed > 0 of them, packed as exec.c does) and returns
 * when its bytes are free: promotion n - TND_RING_EV done and every later
 * one they overlap. */
static double ring_start(tl_ring *r, int sid, int n_packed) {
    if (r->n >= r->cap) return INFINITY; /* cannot happen: a round promotes each slice once */
    const tnd_weight *w = r->m->slices[sid];
    uint64_t n = n_packed > 0 ? w->t->nbytes / (uint64_t)w->n_expert * (uint64_t)n_packed : w->t->nbytes;
    n = (n + 255) & ~(uint64_t)255;
    if (r->at + n > r->bytes) r->at = 0;
    int j = r->n++;
    r->off[j] = r->at;
    r->len[j] = n;
    r->done[j] = 0; /* until ring_done: a split layer's three copies go in before its ops (exec.c orders them) */
    r->at += n;
    double t = j >= TND_RING_EV ? r->done[j - TND_RING_EV] : 0;
    for (int i = TND_MAX(j - TND_RING_EV + 1, 0); i < j; i++)
        if (r->off[i] < r->off[j] + n && r->off[j] < r->off[i] + r->len[i]) t = fmax(t, r->done[i]);
    return t;
}

static void ring_done(tl_ring *r, int j, double t) {
    if (j >= 0 && j < r->n) r->done[j] = t;
}

double tnd_perf_predict(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int n_slots, int nt, int pos0) {
    const tnd_hparams *hp = &m->hp;
    /* the transfer stream copies promoted slices one after another into a
     * ring of n_slots slots' bytes, each once the ops reading the bytes it
     * overwrites are done (exec.c) */
    double xfer = 0;
    tl_ring rg = {0};
    if (n_slots > 0 && !ring_init(&rg, m, p, n_slots)) n_slots = 0;
    /* promote=auto: the promotions Algorithm 2 chooses for this round, as the executor runs them */
    uint8_t *rp = p->promote_auto && n_slots > 0 ? tnd_calloc((size_t)m->n_slices + 1, 1) : NULL;
    if (rp && tnd_xfer_choose(m, pf, NULL, p, n_slots, nt, pos0, rp, NULL)) {
        tnd_clear_error();
        memset(rp, 0, (size_t)m->n_slices); /* an allocation failed: predict none */
    }
    double act = sizeof(float) * (double)hp->n_embd * nt;
    tl_clock ck = {0, 0, TND_SIDE_CPU, pf->lat + pf->sw_host + act / pf->b_pcie, pf->launch};
    const bool ahead = tnd_perf_experts_ahead(m, nt);

    for (int l = 0; l < hp->n_layer; l++) {
        const tnd_layer *L = &m->layers[l];
        const tnd_weight *seq[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
        /* TND_LOG=3: the clocks through layer 1, to set beside a TND_TRACE=2 table */
        const bool show = l == 1 && tnd_log_level() >= TND_LOG_DEBUG;
        const double h0 = ck.host, g0 = ck.gpu;
        for (size_t j = 0; j < sizeof seq / sizeof *seq; j++) {
            const tnd_weight *w = seq[j];
            static const char *const names[] = {"wq",     "wk",       "wv",     "attention", "wo",      "router",
                                                "ffn_gate", "ffn_up", "ffn_down", "gate_exps", "up_exps", "down_exps"};
            if (show && j && (!seq[j - 1] || seq[j - 1]->t))
                TND_DEBUG("model nt %d layer 1 after %-9s host %8.1f us, gpu %8.1f us, on %s", nt, names[j - 1],
                          1e6 * (ck.host - h0), 1e6 * (ck.gpu - g0), ck.cur ? "gpu" : "cpu");
            if (!w) { /* attention, where the KV cache is, with the layer's weightless ops */
                int side = p->kv[l];
                double t = tnd_perf_attn_time(pf, side, nt, pos0) + tnd_perf_other_time(pf, side, nt);
                tl_to(&ck, side);
                if (side == TND_SIDE_GPU) tl_gpu(&ck, t, OTHER_OPS + 1);
                else ck.host += t;
                continue;
            }
            if (w->id >= 0 && tnd_slice_split(m, p, w->id, NULL)) {
                /* A split layer (exec.c): the GPU's experts queued, the CPU's
                 * run meanwhile (or after them on the GPU when promoted, once
                 * their chosen experts are copied, or all of them ahead);
                 * each side does its share of the routings. Handled at
                 * gate_exps for the three. */
                if (w != &L->gate_exps) continue;
                split_cost sc = split_times(m, pf, p, l, nt);
                bool prom = n_slots > 0 && p->promote[w->id] && (!p->promote_auto || (rp && rp[w->id]));
                /* the host needs the routing ids (a wait for the GPU that routed) */
                if (ck.cur == TND_SIDE_GPU) ck.host = fmax(ck.host, ck.gpu) + ck.sw;
                if (prom) {
                    /* the copy waits for the routing unless it goes ahead */
                    double start = ahead ? xfer : fmax(xfer, ck.host);
                    const int ids[3] = {L->gate_exps.id, L->up_exps.id, L->down_exps.id};
                    const int packed = ahead ? p->n_expert - tnd_placement_gpu_experts(m, p, l) : 0;
                    for (int q = 0; q < 3; q++) start = fmax(start, ring_start(&rg, ids[q], packed));
                    xfer = start + 3 * pf->lat + sc.bytes / pf->b_pcie;
                    tl_to(&ck, TND_SIDE_GPU);
                    tl_gpu(&ck, sc.tg, 3);
                    ck.gpu = fmax(ck.gpu, xfer);
                    tl_gpu(&ck, sc.tcg, 3);
                    for (int q = 0; q < 3; q++) ring_done(&rg, rg.n - 3 + q, ck.gpu);
                } else {
                    /* The host queues the GPU part (seven ops: three expert
                     * ops, their row copies, the activation), then runs the
                     * CPU's with the weightless ops around it (mapping the
                     * ids, the activation, the sum) and waits for the GPU's
                     * rows, which land in the host buffer it sums. */
                    if (ck.cur == TND_SIDE_GPU) ck.host += ck.sw; /* the activation */
                    ck.host += 7 * ck.launch;
                    double gpart = fmax(ck.gpu, ck.host) + sc.tg;
                    ck.host += sc.tc + tnd_perf_other_time(pf, TND_SIDE_CPU, nt);
                    ck.host = fmax(ck.host, gpart + pf->lat);
                    ck.gpu = gpart;
                    ck.cur = TND_SIDE_CPU;
                }
                continue;
            }
            if (!w->t || w->id < 0) continue;
            bool prom = n_slots > 0 && p->promote[w->id] && (!p->promote_auto || (rp && rp[w->id]));
            int side = prom ? TND_SIDE_GPU : p->where[w->id];
            double t = side == TND_SIDE_GPU ? tnd_perf_gpu_time(m, pf, w->id, nt) : tnd_perf_slice_time(pf, w->id, side, nt);
            tl_to(&ck, side);
            if (side == TND_SIDE_CPU) {
                ck.host += t;
                continue;
            }
            if (prom) {
                double start = fmax(xfer, ring_start(&rg, w->id, 0));
                /* an expert copy is queued once the host holds the routing
                 * (a wait for the GPU), unless it goes ahead; the layer's
                 * others follow at once */
                if (w->n_expert > 1 && !ahead) {
                    if (w == &L->gate_exps) ck.host = fmax(ck.host, ck.gpu);
                    start = fmax(start, ck.host);
                }
                xfer = start + pf->lat + tnd_perf_promoted_bytes(m, pf, w->id, nt) / pf->b_pcie;
                ck.gpu = fmax(ck.gpu, xfer);
                tl_gpu(&ck, t, 1);
                ring_done(&rg, rg.n - 1, ck.gpu);
            } else {
                tl_gpu(&ck, t, 1);
            }
        }
    }
    if (m->output.id >= 0) {
        int side = p->where[m->output.id];
        double t = tnd_perf_slice_time(pf, m->output.id, side, nt);
        tl_to(&ck, side);
        if (side == TND_SIDE_GPU) tl_gpu(&ck, t, 1);
        else ck.host += t;
    }
    /* the logits come back to the host */
    if (ck.cur != TND_SIDE_CPU) ck.host = fmax(ck.host, ck.gpu) + pf->lat + sizeof(float) * (double)hp->n_vocab / pf->b_pcie;
    ring_free(&rg);
    free(rp);
    return fmax(ck.host, ck.gpu);
}
