/* The fused op forms of the forward recipe (backend.h) on the CUDA backend,
 * on a real GPU (device machine; exits 77 elsewhere):
 *   - ROPE with a per-head norm (in[2]: qwen3's q/k norm, then the rotation);
 *   - RMS_NORM with a residual add (in[2], the sum written to out[1]);
 *   - ROPE_KV, the executor's fusion of a decode step's ropes and K/V stores;
 *   - MATMUL_PAIR of two f32 matrices (a MoE layer's router and the next's);
 *   - MOE_SUM_NORM (an MoE layer's expert sum, then the residual add + norm)
 *     and MOE_ROUTE_PAIR (its routing and the next layer's predicted one),
 *     the executor's fusions of those pairs of ops.
 * Each against a double-precision reference (tolerances stated where they
 * are checked, as test_cuda_ops.c states its own), against the unfused pair
 * of ops on the GPU, and collected into a CUDA graph (graph_defer: captured,
 * then replayed) against plain launches, bit for bit. Outputs are poisoned
 * (NaN) before every run. Prints one line per check and "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "util.h"

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("test_cuda_fused: skipped (built without CUDA)\n");
    return 77;
}
#else

#include "cuda_check.h"

/* Downloads n floats of device memory into a fresh host buffer. */
static float *fetch(const float *d, int64_t n) {
    float *h = (float *)tc_xmalloc((size_t)n * 4);
    dev_download(h, d, (size_t)n * 4);
    return h;
}

/* ---- RMS_NORM with the residual add ------------------------------------------------ */

/* s = x + r into out[1] (x itself when sum_in_x, the recipe's form), y =
 * norm(s) * w. The sum must be the f32 add exactly; y within test_cuda_ops'
 * rms_norm tolerance; and the unfused ADD then RMS_NORM on the GPU run the
 * same kernel code, so the same bits. */
static void test_add_norm(int64_t n, int64_t rows, bool weight, bool sum_in_x) {
    const int64_t m = n * rows;
    const size_t nb = (size_t)m * 4;
    const float eps = 1e-6f;
    float *x = (float *)tc_xmalloc(nb), *r = (float *)tc_xmalloc(nb), *w = (float *)tc_xmalloc((size_t)n * 4);
    tc_fill_unif(x, (size_t)m, -2, 2);
    tc_fill_unif(r, (size_t)m, -2, 2);
    tc_fill_unif(w, (size_t)n, 0.5f, 1.5f);
    double *ref = (double *)tc_xmalloc((size_t)m * 8), *rsum = (double *)tc_xmalloc((size_t)m * 8);
    for (int64_t i = 0; i < m; i++) rsum[i] = (double)(x[i] + r[i]); /* the f32 sum */
    for (int64_t j = 0; j < rows; j++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += rsum[j * n + i] * rsum[j * n + i];
        double inv = 1.0 / sqrt(ss / (double)n + eps);
        for (int64_t i = 0; i < n; i++) ref[j * n + i] = rsum[j * n + i] * inv * (weight ? w[i] : 1.0);
    }
    float *dx = (float *)dev_upload(x, nb), *dr = (float *)dev_upload(r, nb), *dw = (float *)dev_upload(w, (size_t)n * 4);
    float *dy = (float *)dev_alloc(nb), *ds = sum_in_x ? dx : (float *)dev_alloc(nb);
    dev_poison(dy, nb);
    if (!sum_in_x) dev_poison(ds, nb);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_RMS_NORM;
    op.in[0] = tens(dx, TND_TYPE_F32, n, rows, 1);
    op.in[1] = tens(weight ? dw : NULL, TND_TYPE_F32, n, 1, 1);
    op.in[2] = tens(dr, TND_TYPE_F32, n, rows, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, rows, 1);
    op.out[1] = tens(ds, TND_TYPE_F32, n, rows, 1);
    op.p.norm.eps = eps;
    char what[160], w2[220];
    snprintf(what, sizeof what, "add+rms_norm n=%lld rows=%lld%s%s", (long long)n, (long long)rows,
             weight ? " weight" : "", sum_in_x ? " sum into x" : " sum apart");
    if (run_op(&op, what)) {
        float *y = fetch(dy, m), *sm = fetch(ds, m);
        /* f32 sum of n squares and rsqrtf, as test_cuda_ops' rms_norm: 2e-5 relative */
        compare(what, y, ref, NULL, m, 2e-5, 1e-7);
        snprintf(w2, sizeof w2, "%s: the sum, exactly", what);
        compare(w2, sm, rsum, NULL, m, 0, 0);
        if (!sum_in_x) {
            float *xa = fetch(dx, m);
            tc_report(memcmp(xa, x, nb) == 0, "%s: x left alone", what);
            free(xa);
        }
        /* unfused: ADD into a fresh x, then RMS_NORM of it */
        float *ux = (float *)dev_upload(x, nb), *uy = (float *)dev_alloc(nb);
        tnd_op add;
        memset(&add, 0, sizeof add);
        add.kind = TND_OP_ADD;
        add.in[0] = add.out[0] = tens(ux, TND_TYPE_F32, m, 1, 1);
        add.in[1] = tens(dr, TND_TYPE_F32, m, 1, 1);
        tnd_op nm = op;
        nm.in[0] = tens(ux, TND_TYPE_F32, n, rows, 1);
        nm.out[0] = tens(uy, TND_TYPE_F32, n, rows, 1);
        memset(&nm.in[2], 0, sizeof nm.in[2]);
        memset(&nm.out[1], 0, sizeof nm.out[1]);
        snprintf(w2, sizeof w2, "%s: unfused", what);
        if (run_op(&add, w2) && run_op(&nm, w2)) {
            float *y2 = fetch(uy, m), *s2 = fetch(ux, m);
            tc_report(memcmp(y, y2, nb) == 0 && memcmp(sm, s2, nb) == 0,
                      "%s: fused == ADD then RMS_NORM on the GPU, bit for bit", what);
            free(y2), free(s2);
        }
        dev_free(ux), dev_free(uy);
        free(y), free(sm);
    }
    dev_free(dx), dev_free(dr), dev_free(dw), dev_free(dy);
    if (!sum_in_x) dev_free(ds);
    free(x), free(r), free(w), free(ref), free(rsum);
}

/* ---- ROPE with the per-head norm --------------------------------------------------- */

/* Each head normed over head_dim (weight w), then rotated. Reference in
 * double; the norm's error (2e-5 relative) is carried through the rotation,
 * so an element is held to the size of its pair. Against the unfused
 * RMS_NORM on rows of head_dim then ROPE on the GPU: the same operations
 * in the same order (rope.cu), so the same bits. */
static void test_rope_norm(int64_t n_tok, int n_head, int hd, int n_rot, int mode, float base, bool inplace) {
    const int64_t n = n_tok * n_head * hd;
    const size_t nb = (size_t)n * 4;
    const float eps = 1e-6f;
    float *x = (float *)tc_xmalloc(nb), *w = (float *)tc_xmalloc((size_t)hd * 4);
    int32_t *pos = (int32_t *)tc_xmalloc((size_t)n_tok * 4);
    tc_fill_unif(x, (size_t)n, -3, 3);
    tc_fill_unif(w, (size_t)hd, 0.5f, 1.5f);
    for (int64_t t = 0; t < n_tok; t++) pos[t] = t == 0 ? 0 : (int32_t)(tc_xorshift() % 100000);
    double *ref = (double *)tc_xmalloc((size_t)n * 8), *sc = (double *)tc_xmalloc((size_t)n * 8);
    double *h = (double *)tc_xmalloc((size_t)hd * 8);
    for (int64_t t = 0; t < n_tok; t++)
        for (int k = 0; k < n_head; k++) {
            const float *xr = x + (t * n_head + k) * hd;
            double *yr = ref + (t * n_head + k) * hd, *sr = sc + (t * n_head + k) * hd;
            double ss = 0;
            for (int i = 0; i < hd; i++) ss += (double)xr[i] * xr[i];
            double inv = 1.0 / sqrt(ss / hd + eps);
            for (int i = 0; i < hd; i++) {
                h[i] = xr[i] * inv * w[i];
                yr[i] = h[i];
                sr[i] = fabs(h[i]);
            }
            for (int i = 0; i < n_rot / 2; i++) {
                int i0 = mode == TND_ROPE_NEOX ? i : 2 * i, i1 = mode == TND_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                double th = pos[t] * pow(base, -2.0 * i / n_rot);
                yr[i0] = h[i0] * cos(th) - h[i1] * sin(th);
                yr[i1] = h[i0] * sin(th) + h[i1] * cos(th);
                sr[i0] = sr[i1] = fabs(h[i0]) + fabs(h[i1]);
            }
        }
    float *dx = (float *)dev_upload(x, nb), *dw = (float *)dev_upload(w, (size_t)hd * 4);
    float *dy = inplace ? dx : (float *)dev_alloc(nb);
    void *dpos = dev_upload(pos, (size_t)n_tok * 4);
    if (!inplace) dev_poison(dy, nb);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_ROPE;
    op.in[0] = tens(dx, TND_TYPE_F32, hd, n_head, n_tok);
    op.in[1] = tens(dpos, TND_TYPE_I32, n_tok, 1, 1);
    op.in[2] = tens(dw, TND_TYPE_F32, hd, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, hd, n_head, n_tok);
    op.p.rope.n_rot = n_rot;
    op.p.rope.mode = mode;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = 1.0f;
    op.p.rope.eps = eps;
    char what[160], w2[220];
    snprintf(what, sizeof what, "rope+norm %s n_tok=%lld heads=%d head_dim=%d n_rot=%d base=%g%s",
             mode == TND_ROPE_NEOX ? "neox  " : "normal", (long long)n_tok, n_head, hd, n_rot, base,
             inplace ? " in-place" : "");
    if (run_op(&op, what)) {
        float *y = fetch(dy, n);
        /* the norm's 2e-5 relative of the pair, plus test_cuda_ops' rope 3e-7 */
        compare(what, y, ref, sc, n, 2e-5, 3e-7);
        if (!inplace) {
            float *xa = fetch(dx, n);
            tc_report(memcmp(xa, x, nb) == 0, "%s: x left alone", what);
            free(xa);
        }
        float *ux = (float *)dev_upload(x, nb);
        tnd_op nm;
        memset(&nm, 0, sizeof nm);
        nm.kind = TND_OP_RMS_NORM;
        nm.in[0] = nm.out[0] = tens(ux, TND_TYPE_F32, hd, n_head * n_tok, 1);
        nm.in[1] = tens(dw, TND_TYPE_F32, hd, 1, 1);
        nm.p.norm.eps = eps;
        tnd_op rp = op;
        rp.in[0] = rp.out[0] = tens(ux, TND_TYPE_F32, hd, n_head, n_tok);
        memset(&rp.in[2], 0, sizeof rp.in[2]);
        snprintf(w2, sizeof w2, "%s: unfused", what);
        if (run_op(&nm, w2) && run_op(&rp, w2)) {
            float *y2 = fetch(ux, n);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (memcmp(&y[i], &y2[i], 4) != 0) bad = i;
            tc_report(bad < 0, "%s: fused == RMS_NORM then ROPE on the GPU, bit for bit (first difference: %lld)",
                      what, (long long)bad);
            free(y2);
        }
        dev_free(ux);
        free(y);
    }
    dev_free(dx), dev_free(dw), dev_free(dpos);
    if (!inplace) dev_free(dy);
    free(x), free(w), free(pos), free(ref), free(sc), free(h);
}

/* ---- ROPE_KV: a decode step's ropes and K/V stores in one launch ------------------ */

/* ROPE_KV against its four ops (tnd_op_rope_kv_split) on the GPU, which
 * test_cuda_ops and the test above hold to references: q, k and both caches
 * bit for bit, the caches' other rows untouched. A position past the
 * cache's rows (the last token's, when past) is stored by neither. */
static void test_rope_kv(int64_t n_tok, int nh, int nkv, int hd, int n_rot, int mode, bool norm, bool past) {
    const int64_t nq = n_tok * nh * hd, nk = n_tok * nkv * hd, kvd = (int64_t)nkv * hd, rows = 64;
    float *q = (float *)tc_xmalloc((size_t)nq * 4), *k = (float *)tc_xmalloc((size_t)nk * 4);
    float *v = (float *)tc_xmalloc((size_t)nk * 4), *w = (float *)tc_xmalloc((size_t)hd * 8);
    int32_t *pos = (int32_t *)tc_xmalloc((size_t)n_tok * 4);
    tc_fill_unif(q, (size_t)nq, -3, 3);
    tc_fill_unif(k, (size_t)nk, -3, 3);
    tc_fill_unif(v, (size_t)nk, -3, 3);
    tc_fill_unif(w, (size_t)hd * 2, 0.5f, 1.5f);
    for (int64_t t = 0; t < n_tok; t++) pos[t] = (int32_t)(20 + 7 * t);
    if (past) pos[n_tok - 1] = (int32_t)rows;
    const size_t cb = (size_t)(rows * kvd * 2);
    uint16_t *cache0 = (uint16_t *)tc_xmalloc(cb);
    for (size_t i = 0; i < cb / 2; i++) cache0[i] = (uint16_t)(tc_xorshift() & 0x3bff); /* finite halves */
    float *dw = (float *)dev_upload(w, (size_t)hd * 8);
    void *dpos = dev_upload(pos, (size_t)n_tok * 4);
    float *got[2][2];
    uint16_t *cache[2][2];
    bool ok = true;
    char what[200];
    snprintf(what, sizeof what, "rope_kv %s n_tok=%lld heads=%d/%d head_dim=%d n_rot=%d%s%s",
             mode == TND_ROPE_NEOX ? "neox  " : "normal", (long long)n_tok, nh, nkv, hd, n_rot, norm ? " norm" : "",
             past ? " (a row past the cache)" : "");
    for (int f = 0; f < 2; f++) { /* 0: the four ops, 1: fused */
        float *dq = (float *)dev_upload(q, (size_t)nq * 4), *dk = (float *)dev_upload(k, (size_t)nk * 4);
        float *dv = (float *)dev_upload(v, (size_t)nk * 4);
        void *dK = dev_upload(cache0, cb), *dV = dev_upload(cache0, cb);
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TND_OP_ROPE_KV;
        op.in[0] = op.out[0] = tens(dq, TND_TYPE_F32, hd, nh, n_tok);
        op.in[1] = tens(dpos, TND_TYPE_I32, n_tok, 1, 1);
        op.in[3] = op.out[1] = tens(dk, TND_TYPE_F32, hd, nkv, n_tok);
        op.in[5] = tens(dv, TND_TYPE_F32, kvd, n_tok, 1);
        if (norm) {
            op.in[2] = tens(dw, TND_TYPE_F32, hd, 1, 1);
            op.in[4] = tens(dw + hd, TND_TYPE_F32, hd, 1, 1);
        }
        op.out[2] = tens(dK, TND_TYPE_F16, kvd, rows, 1);
        op.out[3] = tens(dV, TND_TYPE_F16, kvd, rows, 1);
        op.p.rope.n_rot = n_rot;
        op.p.rope.mode = mode;
        op.p.rope.freq_base = 1000000.0f;
        op.p.rope.freq_scale = 1.0f;
        op.p.rope.eps = 1e-6f;
        if (f) {
            ok = ok && run_op(&op, what);
        } else {
            tnd_op part[4];
            tnd_op_rope_kv_split(&op, part);
            for (int i = 0; i < 4; i++) ok = ok && run_op(&part[i], what);
        }
        got[f][0] = fetch(dq, nq), got[f][1] = fetch(dk, nk);
        cache[f][0] = (uint16_t *)tc_xmalloc(cb), cache[f][1] = (uint16_t *)tc_xmalloc(cb);
        dev_download(cache[f][0], dK, cb);
        dev_download(cache[f][1], dV, cb);
        dev_free(dq), dev_free(dk), dev_free(dv), dev_free(dK), dev_free(dV);
    }
    if (ok) {
        bool same = memcmp(got[0][0], got[1][0], (size_t)nq * 4) == 0 &&
                    memcmp(got[0][1], got[1][1], (size_t)nk * 4) == 0 && memcmp(cache[0][0], cache[1][0], cb) == 0 &&
                    memcmp(cache[0][1], cache[1][1], cb) == 0;
        tc_report(same, "%s: q, k and both caches as the four ops give them, bit for bit", what);
        int64_t stored = 0; /* rows the four ops changed: the tokens' own, inside the cache */
        for (int64_t r = 0; r < rows; r++)
            stored += memcmp(cache[0][1] + r * kvd, cache0 + r * kvd, (size_t)kvd * 2) != 0;
        tc_report(stored == n_tok - (past ? 1 : 0), "%s: V rows stored %lld, want %lld", what, (long long)stored,
                  (long long)(n_tok - (past ? 1 : 0)));
    }
    for (int f = 0; f < 2; f++) free(got[f][0]), free(got[f][1]), free(cache[f][0]), free(cache[f][1]);
    dev_free(dw), dev_free(dpos);
    free(q), free(k), free(v), free(w), free(pos), free(cache0);
}

/* ---- a MoE layer's router and the next layer's as one MATMUL_PAIR ----------------- */

/* Two f32 matrices of one shape over one token's x: the pair is offered
 * (op_supported) and gives the bits two MATMULs give (the same kernel, a
 * grid row per matrix); other token counts or shapes are refused. */
static void test_f32_pair(int64_t n_in, int64_t n_out) {
    float *w = (float *)tc_xmalloc((size_t)(2 * n_in * n_out) * 4), *x = (float *)tc_xmalloc((size_t)n_in * 4);
    tc_fill_unif(w, (size_t)(2 * n_in * n_out), -1, 1);
    tc_fill_unif(x, (size_t)n_in, -1, 1);
    float *dw1 = (float *)dev_upload(w, (size_t)(n_in * n_out) * 4);
    float *dw2 = (float *)dev_upload(w + n_in * n_out, (size_t)(n_in * n_out) * 4);
    float *dx = (float *)dev_upload(x, (size_t)n_in * 4);
    float *dy = (float *)dev_alloc((size_t)(4 * n_out) * 4); /* y1, y2 fused; y1, y2 apart */
    char what[120];
    snprintf(what, sizeof what, "matmul_pair f32 %lld x (%lld + %lld)", (long long)n_in, (long long)n_out,
             (long long)n_out);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MATMUL_PAIR;
    op.in[0] = tens(dw1, TND_TYPE_F32, n_in, n_out, 1);
    op.in[1] = tens(dx, TND_TYPE_F32, n_in, 1, 1);
    op.in[2] = tens(dw2, TND_TYPE_F32, n_in, n_out, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, 1, 1);
    op.out[1] = tens(dy + n_out, TND_TYPE_F32, n_out, 1, 1);
    const bool offered = B->iface->op_supported(B, &op) == TND_OK;
    tnd_clear_error();
    tc_report(offered, "%s: offered", what);
    dev_poison(dy, (size_t)(4 * n_out) * 4);
    bool ok = offered && run_op(&op, what);
    tnd_op one;
    memset(&one, 0, sizeof one);
    one.kind = TND_OP_MATMUL;
    one.in[1] = op.in[1];
    for (int i = 0; i < 2 && ok; i++) {
        one.in[0] = i ? op.in[2] : op.in[0];
        one.out[0] = tens(dy + (2 + i) * n_out, TND_TYPE_F32, n_out, 1, 1);
        ok = run_op(&one, what);
    }
    if (ok) {
        float *y = fetch(dy, 4 * n_out);
        int finite = 0;
        for (int64_t i = 0; i < 2 * n_out; i++) finite += isfinite(y[i]) != 0;
        tc_report(finite == 2 * n_out && memcmp(y, y + 2 * n_out, (size_t)(2 * n_out) * 4) == 0,
                  "%s: y1 and y2 as two matmuls give them, bit for bit (%d of %lld finite)", what, finite,
                  (long long)(2 * n_out));
        free(y);
    }
    op.in[1] = tens(dx, TND_TYPE_F32, n_in / 2, 2, 1); /* two tokens: not a pair form of the f32 kernel */
    op.in[0].ne[0] = op.in[2].ne[0] = n_in / 2;
    op.out[0].ne[1] = op.out[1].ne[1] = 2;
    op.out[0].ne[0] = op.out[1].ne[0] = n_out / 2;
    op.in[0].ne[1] = op.in[2].ne[1] = n_out / 2;
    const bool two = B->iface->op_supported(B, &op) == TND_OK;
    tnd_clear_error();
    tc_report(!two, "%s: two tokens refused", what);
    op.in[1] = tens(dx, TND_TYPE_F32, n_in, 1, 1);
    op.in[0] = tens(dw1, TND_TYPE_F32, n_in, n_out, 1);
    op.in[2] = tens(dw2, TND_TYPE_F32, n_in, n_out / 2, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, 1, 1);
    op.out[1] = tens(dy + n_out, TND_TYPE_F32, n_out / 2, 1, 1);
    const bool shapes = B->iface->op_supported(B, &op) == TND_OK;
    tnd_clear_error();
    tc_report(!shapes, "%s: matrices of two shapes refused", what);
    dev_free(dw1), dev_free(dw2), dev_free(dx), dev_free(dy);
    free(w), free(x);
}

/* ---- an MoE layer's expert sum with the residual add + norm: MOE_SUM_NORM ----------- */

/* Runs a fused op of two parts: itself (fused; op_supported must offer
 * it) or the two ops split gives. False after a failure (reported). */
static bool run_fused_or_parts(const tnd_op *op, bool fused, void (*split)(const tnd_op *, tnd_op[2]),
                               const char *what) {
    if (!fused) {
        tnd_op part[2];
        split(op, part);
        return run_op(&part[0], what) && run_op(&part[1], what);
    }
    const bool offered = B->iface->op_supported(B, op) == TND_OK;
    tnd_clear_error();
    tc_report(offered, "%s: offered", what);
    return offered && run_op(op, what);
}

/* MOE_SUM_NORM against its two ops (tnd_op_sum_norm_split) on the GPU,
 * which test_cuda_ops and test_add_norm above hold to references: h, x
 * (the residual sum, in place) and the expert sum, bit for bit. Rows past
 * what the kernel holds in registers are refused. */
static void test_sum_norm(int64_t n, int n_used, int64_t rows, bool weight) {
    const int64_t m = n * rows, ny = m * n_used;
    float *x = (float *)tc_xmalloc((size_t)m * 4), *y = (float *)tc_xmalloc((size_t)ny * 4);
    float *wt = (float *)tc_xmalloc((size_t)(rows * n_used) * 4), *w = (float *)tc_xmalloc((size_t)n * 4);
    tc_fill_unif(x, (size_t)m, -2, 2);
    tc_fill_unif(y, (size_t)ny, -2, 2);
    tc_fill_unif(wt, (size_t)(rows * n_used), 0, 0.5f);
    tc_fill_unif(w, (size_t)n, 0.5f, 1.5f);
    float *dy = (float *)dev_upload(y, (size_t)ny * 4), *dwt = (float *)dev_upload(wt, (size_t)(rows * n_used) * 4);
    float *dw = (float *)dev_upload(w, (size_t)n * 4);
    char what[160];
    snprintf(what, sizeof what, "moe_sum_norm n=%lld n_used=%d rows=%lld%s", (long long)n, n_used, (long long)rows,
             weight ? " weight" : "");
    float *got[2][3];
    bool ok = true;
    for (int f = 0; f < 2; f++) { /* 0: MOE_SUM then RMS_NORM, 1: fused */
        float *dx = (float *)dev_upload(x, (size_t)m * 4), *dh = (float *)dev_alloc((size_t)m * 4);
        float *ds = (float *)dev_alloc((size_t)m * 4);
        dev_poison(dh, (size_t)m * 4);
        dev_poison(ds, (size_t)m * 4);
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TND_OP_MOE_SUM_NORM;
        op.p.norm.eps = 1e-6f;
        op.in[0] = op.out[1] = tens(dx, TND_TYPE_F32, n, rows, 1);
        op.in[1] = tens(weight ? dw : NULL, TND_TYPE_F32, n, 1, 1);
        op.in[2] = tens(dy, TND_TYPE_F32, n, n_used, rows);
        op.in[3] = tens(dwt, TND_TYPE_F32, n_used, rows, 1);
        op.out[0] = tens(dh, TND_TYPE_F32, n, rows, 1);
        op.out[2] = tens(ds, TND_TYPE_F32, n, rows, 1);
        ok = run_fused_or_parts(&op, f, tnd_op_sum_norm_split, what) && ok;
        got[f][0] = fetch(dh, m), got[f][1] = fetch(dx, m), got[f][2] = fetch(ds, m);
        dev_free(dx), dev_free(dh), dev_free(ds);
    }
    if (ok) {
        int64_t finite = 0;
        for (int64_t i = 0; i < m; i++) finite += isfinite(got[1][0][i]) && isfinite(got[1][2][i]);
        bool same = true;
        for (int k = 0; k < 3; k++) same = same && memcmp(got[0][k], got[1][k], (size_t)m * 4) == 0;
        tc_report(same && finite == m, "%s: h, x and the sum as MOE_SUM then RMS_NORM give them, bit for bit "
                  "(%lld of %lld finite)", what, (long long)finite, (long long)m);
    }
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 3; k++) free(got[f][k]);
    dev_free(dy), dev_free(dwt), dev_free(dw);
    free(x), free(y), free(wt), free(w);
}

/* Shapes the fused kernel does not take are refused, not run wrongly. */
static void test_sum_norm_refused(void) {
    float *d = (float *)dev_alloc(5 * 10000 * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MOE_SUM_NORM;
    op.in[0] = op.out[1] = tens(d, TND_TYPE_F32, 10000, 1, 1);
    op.in[2] = tens(d + 10000, TND_TYPE_F32, 10000, 1, 1);
    op.in[3] = tens(d + 20000, TND_TYPE_F32, 1, 1, 1);
    op.out[0] = tens(d + 30000, TND_TYPE_F32, 10000, 1, 1);
    op.out[2] = tens(d + 40000, TND_TYPE_F32, 10000, 1, 1);
    const bool wide = B->iface->op_supported(B, &op) == TND_OK;
    tnd_clear_error();
    tc_report(!wide, "moe_sum_norm: rows of 10000 (past 32 values a thread) refused");
    op.in[0] = op.out[1] = tens(d, TND_TYPE_F32, 64, 2, 1);
    op.in[2] = tens(d + 1000, TND_TYPE_F32, 64, 2, 2);
    op.in[3] = tens(d + 2000, TND_TYPE_F32, 2, 3, 1); /* weights of 3 tokens for 2 */
    op.out[0] = tens(d + 3000, TND_TYPE_F32, 64, 2, 1);
    op.out[2] = tens(d + 4000, TND_TYPE_F32, 64, 2, 1);
    const bool toks = B->iface->op_supported(B, &op) == TND_OK;
    tnd_clear_error();
    tc_report(!toks, "moe_sum_norm: weights for other tokens than x's refused");
    dev_free(d);
}

/* ---- an MoE layer's routing and the next one's: MOE_ROUTE_PAIR -------------------- */

/* MOE_ROUTE_PAIR against its two MOE_ROUTEs on the GPU (test_cuda_ops holds
 * those to the CPU's): both weights and ids, bit for bit. */
static void test_route_pair(int n_expert, int n_used, int64_t n_tok, int mode, bool norm) {
    const int64_t nl = (int64_t)n_expert * n_tok, no = (int64_t)n_used * n_tok;
    float *l = (float *)tc_xmalloc((size_t)(2 * nl) * 4);
    tc_fill_unif(l, (size_t)(2 * nl), -4, 4);
    float *dl = (float *)dev_upload(l, (size_t)(2 * nl) * 4);
    char what[160];
    snprintf(what, sizeof what, "moe_route_pair %d experts, %d used, %lld tokens, mode %d%s", n_expert, n_used,
             (long long)n_tok, mode, norm ? " norm" : "");
    void *out[2];
    bool ok = true;
    for (int f = 0; f < 2; f++) { /* 0: two MOE_ROUTEs, 1: fused */
        float *d = (float *)dev_alloc((size_t)(4 * no) * 4); /* w1, ids1, w2, ids2 */
        dev_poison(d, (size_t)(4 * no) * 4);
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TND_OP_MOE_ROUTE_PAIR;
        op.p.route.n_used = n_used;
        op.p.route.mode = mode;
        op.p.route.norm = norm;
        for (int k = 0; k < 2; k++) {
            op.in[k] = tens(dl + k * nl, TND_TYPE_F32, n_expert, n_tok, 1);
            op.out[2 * k] = tens(d + (2 * k) * no, TND_TYPE_F32, n_used, n_tok, 1);
            op.out[2 * k + 1] = tens(d + (2 * k + 1) * no, TND_TYPE_I32, n_used, n_tok, 1);
        }
        ok = run_fused_or_parts(&op, f, tnd_op_route_pair_split, what) && ok;
        out[f] = fetch(d, 4 * no);
        dev_free(d);
    }
    if (ok) {
        int64_t valid = 0; /* ids in range, in both routings */
        for (int k = 0; k < 2; k++)
            for (int64_t i = 0; i < no; i++) {
                int32_t id = ((const int32_t *)out[1])[(2 * k + 1) * no + i];
                valid += id >= 0 && id < n_expert;
            }
        tc_report(memcmp(out[0], out[1], (size_t)(4 * no) * 4) == 0 && valid == 2 * no,
                  "%s: both routings as two MOE_ROUTEs give them, bit for bit (%lld of %lld ids valid)", what,
                  (long long)valid, (long long)(2 * no));
    }
    free(out[0]), free(out[1]);
    dev_free(dl);
    free(l);
}

/* ---- in a CUDA graph --------------------------------------------------------------- */

/* A decode layer's fused ops (rope+norm of q, add+norm of x), twice over,
 * collected with graph_defer, three times (captured, replayed, replayed), against
 * plain launches: the same kernels, so the same bits; and graphs ran. */
static void test_graph(void) {
    const int nh = 32, hd = 128;
    const int64_t nq = (int64_t)nh * hd, ne = 4096;
    float *q = (float *)tc_xmalloc((size_t)nq * 4), *qw = (float *)tc_xmalloc((size_t)hd * 4);
    float *x = (float *)tc_xmalloc((size_t)ne * 4), *o = (float *)tc_xmalloc((size_t)ne * 4);
    float *xw = (float *)tc_xmalloc((size_t)ne * 4);
    tc_fill_unif(q, (size_t)nq, -2, 2);
    tc_fill_unif(qw, (size_t)hd, 0.5f, 1.5f);
    tc_fill_unif(x, (size_t)ne, -2, 2);
    tc_fill_unif(o, (size_t)ne, -2, 2);
    tc_fill_unif(xw, (size_t)ne, 0.5f, 1.5f);
    int32_t pos = 4321;
    float *dqw = (float *)dev_upload(qw, (size_t)hd * 4), *dxw = (float *)dev_upload(xw, (size_t)ne * 4);
    float *dout = (float *)dev_upload(o, (size_t)ne * 4);
    int32_t *dpos = (int32_t *)dev_upload(&pos, 4);
    float *want_q = NULL, *want_x = NULL, *want_h = NULL;
    const tnd_backend_counters c0 = tnd_backend_counters_get(B);
    for (int run = 0; run < 4; run++) { /* 0: plain launches; 1..3: collected */
        float *dq = (float *)dev_upload(q, (size_t)nq * 4), *dx = (float *)dev_upload(x, (size_t)ne * 4);
        float *dh = (float *)dev_alloc((size_t)ne * 4);
        dev_poison(dh, (size_t)ne * 4);
        tnd_op rp;
        memset(&rp, 0, sizeof rp);
        rp.kind = TND_OP_ROPE;
        rp.in[0] = rp.out[0] = tens(dq, TND_TYPE_F32, hd, nh, 1);
        rp.in[1] = tens(dpos, TND_TYPE_I32, 1, 1, 1);
        rp.in[2] = tens(dqw, TND_TYPE_F32, hd, 1, 1);
        rp.p.rope.n_rot = hd;
        rp.p.rope.mode = TND_ROPE_NEOX;
        rp.p.rope.freq_base = 1e6f;
        rp.p.rope.freq_scale = 1.0f;
        rp.p.rope.eps = 1e-6f;
        tnd_op an;
        memset(&an, 0, sizeof an);
        an.kind = TND_OP_RMS_NORM;
        an.in[0] = an.out[1] = tens(dx, TND_TYPE_F32, ne, 1, 1);
        an.in[1] = tens(dxw, TND_TYPE_F32, ne, 1, 1);
        an.in[2] = tens(dout, TND_TYPE_F32, ne, 1, 1);
        an.out[0] = tens(dh, TND_TYPE_F32, ne, 1, 1);
        an.p.norm.eps = 1e-6f;
        if (run) CHECK_ST(tnd_backend_graph_defer(B, S, true));
        for (int k = 0; k < 2; k++) { /* a graph takes at least 4 items (backend_cuda.cu) */
            CHECK_ST(tnd_backend_op_run(B, &rp, S));
            CHECK_ST(tnd_backend_op_run(B, &an, S));
        }
        if (run) CHECK_ST(tnd_backend_graph_defer(B, S, false));
        CHECK_ST(tnd_backend_stream_sync(B, S));
        float *gq = fetch(dq, nq), *gx = fetch(dx, ne), *gh = fetch(dh, ne);
        if (!run) {
            want_q = gq, want_x = gx, want_h = gh;
        } else {
            tc_report(memcmp(gq, want_q, (size_t)nq * 4) == 0 && memcmp(gx, want_x, (size_t)ne * 4) == 0 &&
                          memcmp(gh, want_h, (size_t)ne * 4) == 0,
                      "graph run %d: rope+norm and add+rms_norm as launched plainly, bit for bit", run);
            free(gq), free(gx), free(gh);
        }
        dev_free(dq), dev_free(dx), dev_free(dh);
    }
    const tnd_backend_counters c1 = tnd_backend_counters_get(B);
    printf("  graphs: %llu launched, %llu instantiated, %llu replayed, %llu updated\n",
           (unsigned long long)(c1.graph_launches - c0.graph_launches), (unsigned long long)(c1.graph_inst - c0.graph_inst),
           (unsigned long long)(c1.graph_replays - c0.graph_replays), (unsigned long long)(c1.graph_updates - c0.graph_updates));
    /* each run's buffers are new allocations (maybe new addresses): replayed or updated, not plain launches */
    tc_report(c1.graph_launches - c0.graph_launches == 3, "the three collected runs ran as graphs");
    dev_free(dqw), dev_free(dxw), dev_free(dout), dev_free(dpos);
    free(q), free(qw), free(x), free(o), free(xw), free(want_q), free(want_x), free(want_h);
}

int main(void) {
    tc_rng = 0x243f6a8885a308d3ull;
    const int rc = cuda_test_open("test_cuda_fused");
    if (rc) return rc;

    static const int64_t toks[] = {1, 3, 17, 64};
    for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++) {
        test_rope_norm(toks[k], 32, 128, 128, TND_ROPE_NEOX, 1000000.0f, true); /* qwen3-8b's q */
        test_rope_norm(toks[k], 8, 128, 128, TND_ROPE_NORMAL, 10000.0f, false);
    }
    test_rope_norm(17, 3, 64, 32, TND_ROPE_NORMAL, 10000.0f, true);   /* partial rotation */
    test_rope_norm(3, 5, 256, 256, TND_ROPE_NEOX, 10000.0f, false);   /* 128 threads a head */
    test_rope_norm(3, 3, 80, 80, TND_ROPE_NEOX, 500000.0f, true);     /* head_dim not a power of two */
    test_rope_norm(5, 4, 1024, 64, TND_ROPE_NORMAL, 10000.0f, false); /* 256 threads a head, several warps */

    for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++) test_add_norm(4096, toks[k], true, true);
    test_add_norm(4099, 3, true, false);
    test_add_norm(5120, 17, true, true);
    test_add_norm(1000, 17, false, true);
    test_add_norm(37, 5, true, false);

    for (int norm = 0; norm < 2; norm++)
        for (int mode = 0; mode <= TND_ROPE_NEOX; mode += TND_ROPE_NEOX) {
            test_rope_kv(1, 32, 8, 128, 128, mode, norm, false); /* qwen3-8b */
            test_rope_kv(3, 9, 3, 64, 64, mode, norm, true);     /* SmolLM2-135M, three tokens */
        }
    test_rope_kv(2, 16, 4, 256, 64, TND_ROPE_NORMAL, true, false); /* partial rotation, 128 threads a head */
    test_rope_kv(1, 5, 1, 80, 80, TND_ROPE_NEOX, true, false);     /* head_dim not a power of two */
    test_sum_norm(2048, 8, 1, true); /* qwen3-30b-a3b's decode step */
    test_sum_norm(2048, 8, 4, true);
    test_sum_norm(4096, 2, 17, false);
    test_sum_norm(8192, 4, 3, true); /* 32 values a thread */
    test_sum_norm(576, 1, 64, true);
    test_sum_norm(37, 3, 5, true);
    test_sum_norm_refused();
    test_route_pair(128, 8, 1, TND_ROUTE_SOFTMAX_TOPK, true); /* qwen3-30b-a3b */
    test_route_pair(128, 8, 2, TND_ROUTE_SOFTMAX_TOPK, false);
    test_route_pair(60, 4, 17, TND_ROUTE_TOPK_SOFTMAX, false);
    test_route_pair(512, 32, 5, TND_ROUTE_SOFTMAX_TOPK, true);
    test_f32_pair(2048, 128); /* qwen3-30b-a3b's routers */
    test_f32_pair(576, 32);   /* a narrow one: a single block a matrix */

    test_graph();

    return cuda_test_close(0);
}
#endif
