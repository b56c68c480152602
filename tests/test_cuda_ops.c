/* Every CUDA op against a scalar reference, on odd shapes (rows and columns
 * that are not multiples of the block, warp or tile sizes; n_tok 1, 3, 17,
 * 64; odd context lengths; GQA ratios 1, 3, 4), through the backend
 * interface (op_run) and, for the matvec launch variants, the kernels' own
 * entry points. Block formats are referenced by quant/ (to_float,
 * tnd_ref_dot_f32); norms, RoPE, attention, activations and routing by the
 * double-precision references below. Outputs are poisoned (all bits set:
 * NaN) before every run, so an element a kernel forgets to write fails.
 *
 * Tolerances are per op and stated where they are checked, as
 * |got - ref| <= atol + rtol * scale with the scale named there.
 *
 * The recipe's fused forms of RMS_NORM and ROPE (backend.h): tests/
 * test_cuda_fused.c (this file is long enough).
 *
 * Also: copies (H2D/D2H/D2D, the SM copy over mapped pinned memory), events
 * ordering two streams, and the VRAM budget (allocation refused past it, and
 * the device's free memory shrinking by no more than the budget).
 *
 * Prints one line per check and "N passed, N failed". Exits 77 (skipped)
 * when built without CUDA or when no GPU is present. The kernels over the
 * Q4_K tile layout: tests/test_cuda_q4kt.c; Q6_K's: test_cuda_q6kt.c.
 */
#include <cublas_v2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "quant/quant.h"
#include "util.h"
#ifdef TND_HAVE_CUDA
#include "cuda/cuda_ops.h"
#include "attn_ref.h"
#endif

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("test_cuda_ops: skipped (built without CUDA)\n");
    return 77;
}
#else

#include "cuda_check.h"

static const tnd_type ALL_TYPES[] = {TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1,
                                     TND_TYPE_Q5_0, TND_TYPE_Q5_1, TND_TYPE_Q8_0, TND_TYPE_Q2_K, TND_TYPE_Q3_K,
                                     TND_TYPE_Q4_K, TND_TYPE_Q5_K, TND_TYPE_Q6_K, TND_TYPE_MXFP4};

/* One matmul case: random weights of type t, x uniform in (-1, 1), the
 * reference and its error scale (ref_matmul), both inputs uploaded. */
typedef struct {
    size_t wb;        /* bytes of W */
    void *W, *dW;     /* (n_out, n_in) of type t: host, device */
    float *x, *dx;    /* (n_tok, n_in): host, device */
    double *ref, *sc; /* (n_tok, n_out): reference, sum_k |w_rk x_tk| */
    double xmax;      /* max |x| */
} mm_case;

static mm_case mm_case_new(tnd_type t, int64_t n_in, int64_t n_out, int64_t n_tok) {
    mm_case c;
    memset(&c, 0, sizeof c);
    c.W = make_weights(t, n_in, n_out, &c.wb);
    const size_t nx = (size_t)(n_in * n_tok), ny = (size_t)(n_out * n_tok);
    c.x = (float *)tc_xmalloc(nx * 4);
    tc_fill_unif(c.x, nx, -1, 1);
    c.ref = (double *)tc_xmalloc(ny * 8);
    c.sc = (double *)tc_xmalloc(ny * 8);
    ref_matmul(t, c.W, n_in, n_out, c.x, n_tok, c.ref, c.sc, &c.xmax);
    c.dW = dev_upload(c.W, c.wb);
    c.dx = (float *)dev_upload(c.x, nx * 4);
    return c;
}

static void mm_case_free(mm_case *c) {
    dev_free(c->dW);
    dev_free(c->dx);
    free(c->W);
    free(c->x);
    free(c->ref);
    free(c->sc);
}

/* ---- matmul / matvec ------------------------------------------------------------ */

static void test_matmul(tnd_type t, int64_t n_in, int64_t n_out, int64_t n_tok) {
    mm_case mc = mm_case_new(t, n_in, n_out, n_tok);
    float *dy = (float *)dev_alloc((size_t)(n_out * n_tok) * 4);
    dev_poison(dy, (size_t)(n_out * n_tok) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MATMUL;
    op.in[0] = tens(mc.dW, t, n_in, n_out, 1);
    op.in[1] = tens(mc.dx, TND_TYPE_F32, n_in, n_tok, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, n_tok, 1);
    char what[160];
    bool f16path = n_tok > TND_MMID_PAIRS_MAX_TOK;
    const int kind = f16path ? TND_CU_MV_F32 : tnd_cu_matvec_kind(t, n_in, (int)n_tok);
    /* i8mma keeps the f32 tolerance (test_matvec_mma) */
    bool mvh = kind == TND_CU_MV_F16MMA;
    snprintf(what, sizeof what, "matmul %-5s n_in=%lld n_out=%lld n_tok=%lld (%s)", tnd_type_name(t), (long long)n_in,
             (long long)n_out, (long long)n_tok,
             f16path                        ? "f16 cuBLAS"
             : mvh                          ? "matvec f16mma"
             : kind == TND_CU_MV_I8MMA      ? "matvec i8mma"
                                            : "matvec f32");
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)(n_out * n_tok) * 4);
        dev_download(y, dy, (size_t)(n_out * n_tok) * 4);
        /* matvec: weights decoded to f32 exactly, f32 accumulation of n_in
         * products split as a*sum(q x) + b*sum(x) per 16 values; the offset
         * terms can cancel, so allow 2e-4 of sum|w x| (f32 epsilon 6e-8 times
         * the ~100 sequential adds per thread times a cancellation factor of
         * ~10, with margin). cuBLAS: x and W each rounded to f16 (relative
         * 2^-11), so each product is off by up to ~1e-3 relative: 2e-3 of
         * sum|w x|, plus f16 subnormal flushing of tiny weights: n_in * 6e-8
         * * max|x|. The f16 tensor-core matvec: as cuBLAS (see
         * test_matvec_f16mma). */
        double rtol = f16path || mvh ? 2e-3 : 2e-4;
        double atol = f16path || mvh ? (double)n_in * 6e-8 * mc.xmax : 1e-6;
        compare(what, y, mc.ref, mc.sc, n_out * n_tok, rtol, atol);
        free(y);
    }
    mm_case_free(&mc);
    dev_free(dy);
}

/* The launch variants of the single-token matvec (rows per block x threads). */
static void test_matvec_cfg(tnd_type t, int64_t n_in, int64_t n_out) {
    mm_case mc = mm_case_new(t, n_in, n_out, 1);
    float *dy = (float *)dev_alloc((size_t)n_out * 4), *y = (float *)tc_xmalloc((size_t)n_out * 4);
    /* kernels: 1 lane-per-sub, 2 the type's own (Q4_K; the others fall back
     * to their default, tested too) */
    static const int R[] = {1, 2, 4}, T[] = {32, 96, 128, 256};
    for (int k = 1; k <= 2; k++)
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 4; j++) {
            char what[160];
            snprintf(what, sizeof what, "matvec_cfg %-5s n_in=%lld n_out=%lld kernel=%d rows/warp=%d threads=%d",
                     tnd_type_name(t), (long long)n_in, (long long)n_out, k, R[i], T[j]);
            dev_poison(dy, (size_t)n_out * 4);
            int e = tnd_cu_matvec_cfg(t, mc.dW, n_in, n_out, (const float *)mc.dx, dy, k, R[i], T[j],
                                      (tnd_cu_stream)tnd_cuda_stream_handle(S));
            tnd_status st = B->iface->stream_sync(B, S);
            if (e || st) {
                tc_report(false, "%s: launch %s / %s", what, e ? tnd_cu_error_string(e) : "ok", st ? tnd_last_error() : "ok");
                continue;
            }
            dev_download(y, dy, (size_t)n_out * 4);
            compare(what, y, mc.ref, mc.sc, n_out, 2e-4, 1e-6); /* as test_matmul's matvec */
        }
    mm_case_free(&mc);
    dev_free(dy);
    free(y);
}

/* The tensor-core matvecs (tnd_cu_matvec_f16mma, or _i8mma if i8) for n_tok
 * tokens, every launch shape (tiles per block x warps per tile; 0, 0: the
 * default).
 * i8: weights exact, x rounded to a 16-bit grid per 256 values (half a
 * step: max|x| / 65278 per value, x uniform in (-1, 1) here, so about
 * 3e-5 of sum|w x| at worst), integer sums exact, then f32: 2e-4 of
 * sum|w x| as the f32 kernels.
 * f16:
 * tolerance 2e-3 of sum|w x| + n_in * 6e-8 * max|x|, as the cuBLAS f16 path:
 * x and each weight are rounded to f16 (relative 2^-11 each), and the
 * weight's scale and min are f16 roundings of d*sc and dmin*m (2^-11 of
 * |d*sc*q| + |dmin*m|, about |w| for these weights), so each product is
 * off by at most ~3 * 2^-11 = 1.5e-3 relative in the worst case; the f32
 * sums add ~1e-6; weights below the f16 normal range (6e-5) lose precision:
 * the atol term. Also: the default shape gives the same bits twice (the
 * split sums meet in a fixed order). */
static void test_matvec_mma(bool i8, tnd_type t, int64_t n_in, int64_t n_out, int n_tok) {
    mm_case mc = mm_case_new(t, n_in, n_out, n_tok);
    const size_t yb = (size_t)(n_out * n_tok) * 4;
    float *dy = (float *)dev_alloc(yb), *y = (float *)tc_xmalloc(yb), *y0 = (float *)tc_xmalloc(yb);
    static const int shapes[][2] = {{0, 0}, {1, 1}, {1, 3}, {2, 2}, {4, 1}, {1, 8}, {8, 1}, {0, 0}};
    for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) {
        char what[160];
        snprintf(what, sizeof what, "matvec_%s %-5s n_in=%lld n_out=%lld n_tok=%d tiles/block=%d warps/tile=%d%s",
                 i8 ? "i8mma" : "f16mma", tnd_type_name(t), (long long)n_in, (long long)n_out, n_tok, shapes[i][0],
                 shapes[i][1], i + 1 == TND_ARRAY_LEN(shapes) ? " (again: same bits)" : "");
        dev_poison(dy, yb);
        int e = (i8 ? tnd_cu_matvec_i8mma : tnd_cu_matvec_f16mma)(t, mc.dW, n_in, n_out, (const float *)mc.dx, n_tok, dy,
                                                                  shapes[i][0], shapes[i][1],
                                                                  (tnd_cu_stream)tnd_cuda_stream_handle(S));
        tnd_status st = B->iface->stream_sync(B, S);
        if (e || st) {
            tc_report(false, "%s: launch %s / %s", what, e ? tnd_cu_error_string(e) : "ok", st ? tnd_last_error() : "ok");
            continue;
        }
        dev_download(y, dy, yb);
        if (i8) compare(what, y, mc.ref, mc.sc, n_out * n_tok, 2e-4, 1e-6);
        else compare(what, y, mc.ref, mc.sc, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * mc.xmax);
        if (i == 0) memcpy(y0, y, yb);
        if (i + 1 == TND_ARRAY_LEN(shapes))
            tc_report(memcmp(y0, y, yb) == 0, "%s: bitwise repeat", what);
    }
    mm_case_free(&mc);
    dev_free(dy);
    free(y);
    free(y0);
}

/* Types and shapes the tensor-core paths refuse: cudaErrorNotSupported, and
 * tnd_cu_matvec_kind does not pick the refusing family (so tnd_cu_matvec
 * falls back, which test_matmul checks with the right tolerance). */
static void test_matvec_mma_refusals(void) {
    /* the int8 path: Q4_K only, n_tok <= 4 */
    {
        size_t wb;
        void *W = make_weights(TND_TYPE_Q6_K, 256, 16, &wb), *W4 = make_weights(TND_TYPE_Q4_K, 256, 16, &wb);
        void *dW = dev_upload(W, wb), *dW4 = dev_upload(W4, wb);
        float *dx = (float *)dev_alloc(256 * 8 * 4), *dy = (float *)dev_alloc(16 * 8 * 4);
        tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
        int e1 = tnd_cu_matvec_i8mma(TND_TYPE_Q6_K, dW, 256, 16, dx, 1, dy, 0, 0, cs);
        int e2 = tnd_cu_matvec_i8mma(TND_TYPE_Q4_K, dW4, 256, 16, dx, 5, dy, 0, 0, cs);
        tc_report(e1 == 801 && e2 == 801, "matvec_i8mma refuses Q6_K and 5 tokens (got %d, %d)", e1, e2);
        dev_free(dW);
        dev_free(dW4);
        dev_free(dx);
        dev_free(dy);
        free(W);
        free(W4);
    }
    static const struct {
        int type;
        int64_t n_in;
        int n_tok;
    } c[] = {{TND_TYPE_Q4_K, 256 * 200, 1}, {TND_TYPE_Q4_K, 256 * 40, 8}, {TND_TYPE_Q6_K, 256 * 200, 1},
             {TND_TYPE_F32, 256, 1}, {TND_TYPE_Q8_0, 32 * 41, 1}};
    for (size_t i = 0; i < TND_ARRAY_LEN(c); i++) {
        size_t wb;
        void *W = make_weights((tnd_type)c[i].type, c[i].n_in, 16, &wb);
        void *dW = dev_upload(W, wb);
        float *dx = (float *)dev_alloc((size_t)(c[i].n_in * c[i].n_tok) * 4), *dy = (float *)dev_alloc(16 * 4 * 8);
        int e = tnd_cu_matvec_f16mma(c[i].type, dW, c[i].n_in, 16, dx, c[i].n_tok, dy, 0, 0,
                                     (tnd_cu_stream)tnd_cuda_stream_handle(S));
        int kind = tnd_cu_matvec_kind(c[i].type, c[i].n_in, c[i].n_tok);
        tc_report(e == 801 && kind != TND_CU_MV_F16MMA, "matvec_f16mma refuses %s n_in=%lld n_tok=%d (got %d, kind %d)",
               tnd_type_name((tnd_type)c[i].type), (long long)c[i].n_in, c[i].n_tok, e, kind);
        dev_free(dW);
        dev_free(dx);
        dev_free(dy);
        free(W);
    }
}

/* ---- expert matmul -------------------------------------------------------------- */

static void test_matmul_id(tnd_type t, int64_t n_in, int64_t n_out, int64_t n_exp, int64_t n_tok, int n_used, bool per_slot) {
    size_t wb;
    void *W = make_weights(t, n_in, n_out * n_exp, &wb);
    size_t rs = tnd_row_size(t, n_in);
    int64_t n_x = per_slot ? n_used : 1; /* x rows per token */
    float *x = (float *)tc_xmalloc((size_t)(n_in * n_x * n_tok) * 4);
    tc_fill_unif(x, (size_t)(n_in * n_x * n_tok), -1, 1);
    int32_t *ids = (int32_t *)tc_xmalloc((size_t)(n_tok * n_used) * 4);
    for (int64_t i = 0; i < n_tok * n_used; i++) ids[i] = (int32_t)(tc_xorshift() % (uint64_t)n_exp);
    int64_t ny = n_out * n_used * n_tok;
    double *ref = (double *)tc_xmalloc((size_t)ny * 8), *sc = (double *)tc_xmalloc((size_t)ny * 8), xmax = 0;
    double *tmp = (double *)tc_xmalloc((size_t)n_out * 8), *tsc = (double *)tc_xmalloc((size_t)n_out * 8);
    for (int64_t k = 0; k < n_tok; k++)
        for (int u = 0; u < n_used; u++) {
            double xm;
            const uint8_t *we = (const uint8_t *)W + rs * (size_t)n_out * (size_t)ids[k * n_used + u];
            ref_matmul(t, we, n_in, n_out, x + (k * n_x + (per_slot ? u : 0)) * n_in, 1, tmp, tsc, &xm);
            xmax = fmax(xmax, xm);
            memcpy(ref + (k * n_used + u) * n_out, tmp, (size_t)n_out * 8);
            memcpy(sc + (k * n_used + u) * n_out, tsc, (size_t)n_out * 8);
        }
    void *dW = dev_upload(W, wb), *dx = dev_upload(x, (size_t)(n_in * n_x * n_tok) * 4);
    void *dids = dev_upload(ids, (size_t)(n_tok * n_used) * 4);
    float *dy = (float *)dev_alloc((size_t)ny * 4);
    dev_poison(dy, (size_t)ny * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MATMUL_ID;
    op.in[0] = tens(dW, t, n_in, n_out, n_exp);
    op.in[1] = tens(dx, TND_TYPE_F32, n_in, n_x, n_tok);
    op.in[2] = tens(dids, TND_TYPE_I32, n_used, n_tok, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, n_used, n_tok);
    bool f16path = n_tok > TND_MMID_PAIRS_MAX_TOK;
    char what[160];
    snprintf(what, sizeof what, "matmul_id %-5s n_in=%lld n_out=%lld experts=%lld n_tok=%lld used=%d x %s (%s)",
             tnd_type_name(t), (long long)n_in, (long long)n_out, (long long)n_exp, (long long)n_tok, n_used,
             per_slot ? "per slot" : "shared", f16path ? "grouped f16 cuBLAS" : "matvec_id f32");
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)ny * 4);
        dev_download(y, dy, (size_t)ny * 4);
        /* same tolerances as test_matmul, per path */
        compare(what, y, ref, sc, ny, f16path ? 2e-3 : 2e-4, f16path ? (double)n_in * 6e-8 * xmax : 1e-6);
        free(y);
    }
    dev_free(dW);
    dev_free(dx);
    dev_free(dids);
    dev_free(dy);
    free(W);
    free(x);
    free(ids);
    free(ref);
    free(sc);
    free(tmp);
    free(tsc);
}

/* The grouped path's runs, through tnd_cu_matmul_id itself so that runs
 * shorter than the experts can be asked for on small shapes: experts used
 * with gaps between them (whose unused neighbours a run dequantizes too),
 * runs of 1, 2, 3 and all 9 experts, and invalid ids, whose rows become
 * NaN (skip false) or keep what was there (skip true). */
static void test_matmul_id_runs(tnd_type t, int64_t n_in) {
    const int64_t n_out = 45, n_exp = 9, n_tok = 70;
    const int n_used = 2;
    static const int32_t pick[5] = {1, 2, 4, 7, 8};
    size_t wb;
    void *W = make_weights(t, n_in, n_out * n_exp, &wb);
    size_t rs = tnd_row_size(t, n_in);
    const int64_t pairs = n_tok * n_used, ny = pairs * n_out;
    float *x = (float *)tc_xmalloc((size_t)(n_in * n_tok) * 4);
    tc_fill_unif(x, (size_t)(n_in * n_tok), -1, 1);
    int32_t *ids = (int32_t *)tc_xmalloc((size_t)pairs * 4);
    int64_t n_good = 0;
    for (int64_t i = 0; i < pairs; i++) {
        ids[i] = i % 13 == 5 ? -1 : pick[tc_xorshift() % 5];
        n_good += ids[i] >= 0;
    }
    double *ref = (double *)tc_xmalloc((size_t)(n_good * n_out) * 8), *sc = (double *)tc_xmalloc((size_t)(n_good * n_out) * 8);
    double xmax = 0, xm;
    for (int64_t i = 0, k = 0; i < pairs; i++) {
        if (ids[i] < 0) continue;
        ref_matmul(t, (const uint8_t *)W + rs * (size_t)n_out * (size_t)ids[i], n_in, n_out, x + (i / n_used) * n_in, 1,
                   ref + k * n_out, sc + k * n_out, &xm);
        xmax = fmax(xmax, xm);
        k++;
    }
    void *dW = dev_upload(W, wb), *dx = dev_upload(x, (size_t)(n_in * n_tok) * 4);
    float *dy = (float *)dev_alloc((size_t)ny * 4);
    size_t ss = tnd_cu_matmul_id_scratch(n_in, n_out, n_exp, n_tok, n_used, n_exp);
    void *scratch = dev_alloc(ss);
    float *y = (float *)tc_xmalloc((size_t)ny * 4), *got = (float *)tc_xmalloc((size_t)(n_good * n_out) * 4);
    cublasHandle_t h = NULL;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    static const int64_t runs[4] = {1, 2, 3, 9};
    for (int r = 0; h && r < 4; r++)
        for (int skip = 0; skip < 2; skip++) {
            char what[160];
            snprintf(what, sizeof what, "matmul_id %-5s grouped, runs of %lld of 9 experts, invalid ids %s",
                     tnd_type_name(t), (long long)runs[r], skip ? "skipped" : "NaN");
            dev_poison(dy, (size_t)ny * 4);
            int e = tnd_cu_matmul_id((tnd_cu_blas)h, t, dW, n_in, n_out, n_exp, (const float *)dx, false, n_tok, ids,
                                     n_used, skip, dy, scratch, ss, runs[r], NULL, NULL, cs);
            CHECK(e == 0, "%s: error %d", what, e);
            if (e) continue;
            dev_download(y, dy, (size_t)ny * 4);
            int64_t wrong = 0;
            for (int64_t i = 0, k = 0; i < pairs; i++) {
                const float *row = y + i * n_out;
                if (ids[i] >= 0) {
                    memcpy(got + k++ * n_out, row, (size_t)n_out * 4);
                    continue;
                }
                for (int64_t j = 0; j < n_out; j++) {
                    uint32_t bits;
                    memcpy(&bits, &row[j], 4);
                    wrong += bits != (skip ? 0xffffffffu : 0x7fc00000u); /* left alone: the poison; else a quiet NaN */
                }
            }
            CHECK(!wrong, "%s: %lld values of invalid ids' rows wrong", what, (long long)wrong);
            compare(what, got, ref, sc, n_good * n_out, 2e-3, (double)n_in * 6e-8 * xmax);
        }
    if (h) cublasDestroy(h);
    dev_free(dW);
    dev_free(dx);
    dev_free(dy);
    dev_free(scratch);
    free(W), free(x), free(ids), free(ref), free(sc), free(y), free(got);
}

/* ---- get_rows ------------------------------------------------------------------------- */

static void test_get_rows(tnd_type t, int64_t n, int64_t n_rows, int64_t n_ids) {
    size_t wb;
    void *T = make_weights(t, n, n_rows, &wb);
    int32_t *ids = (int32_t *)tc_xmalloc((size_t)n_ids * 4);
    for (int64_t i = 0; i < n_ids; i++) ids[i] = i == 0 ? (int32_t)(n_rows - 1) : (int32_t)(tc_xorshift() % (uint64_t)n_rows);
    double *ref = (double *)tc_xmalloc((size_t)(n * n_ids) * 8), *sc = (double *)tc_xmalloc((size_t)(n * n_ids) * 8);
    float *row = (float *)tc_xmalloc((size_t)n * 4);
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t rs = tnd_row_size(t, n);
    for (int64_t i = 0; i < n_ids; i++) {
        tr->to_float((const uint8_t *)T + rs * (size_t)ids[i], row, n);
        double mx = 0;
        for (int64_t k = 0; k < n; k++) mx = fmax(mx, fabs(row[k]));
        for (int64_t k = 0; k < n; k++) {
            ref[i * n + k] = row[k];
            sc[i * n + k] = mx;
        }
    }
    void *dT = dev_upload(T, wb), *dids = dev_upload(ids, (size_t)n_ids * 4);
    float *dy = (float *)dev_alloc((size_t)(n * n_ids) * 4);
    dev_poison(dy, (size_t)(n * n_ids) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_GET_ROWS;
    op.in[0] = tens(dT, t, n, n_rows, 1);
    op.in[1] = tens(dids, TND_TYPE_I32, n_ids, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, n_ids, 1);
    char what[160];
    snprintf(what, sizeof what, "get_rows %-5s n=%lld rows=%lld ids=%lld", tnd_type_name(t), (long long)n,
             (long long)n_rows, (long long)n_ids);
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)(n * n_ids) * 4);
        dev_download(y, dy, (size_t)(n * n_ids) * 4);
        /* the same a*q + b in f32 as the reference; a fused multiply-add may
         * round once instead of twice: a few ulp of the row's largest value */
        compare(what, y, ref, sc, n * n_ids, 5e-7, 0);
        free(y);
    }
    dev_free(dT);
    dev_free(dids);
    dev_free(dy);
    free(T);
    free(ids);
    free(ref);
    free(sc);
    free(row);
}

/* ---- norms ------------------------------------------------------------------------------- */

static void test_rms_norm(int64_t n, int64_t rows, bool weight, bool inplace) {
    float *x = (float *)tc_xmalloc((size_t)(n * rows) * 4), *w = (float *)tc_xmalloc((size_t)n * 4);
    tc_fill_unif(x, (size_t)(n * rows), -2, 2);
    tc_fill_unif(w, (size_t)n, 0.5f, 1.5f);
    double *ref = (double *)tc_xmalloc((size_t)(n * rows) * 8);
    const float eps = 1e-6f;
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        double inv = 1.0 / sqrt(ss / n + eps);
        for (int64_t i = 0; i < n; i++) ref[r * n + i] = x[r * n + i] * inv * (weight ? w[i] : 1.0);
    }
    float *dx = (float *)dev_upload(x, (size_t)(n * rows) * 4), *dw = (float *)dev_upload(w, (size_t)n * 4);
    float *dy = inplace ? dx : (float *)dev_alloc((size_t)(n * rows) * 4);
    if (!inplace) dev_poison(dy, (size_t)(n * rows) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_RMS_NORM;
    op.in[0] = tens(dx, TND_TYPE_F32, n, rows, 1);
    op.in[1] = tens(weight ? dw : NULL, TND_TYPE_F32, n, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, rows, 1);
    op.p.norm.eps = eps;
    char what[160];
    snprintf(what, sizeof what, "rms_norm n=%lld rows=%lld%s%s", (long long)n, (long long)rows, weight ? " weight" : "",
             inplace ? " in-place" : "");
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)(n * rows) * 4);
        dev_download(y, dy, (size_t)(n * rows) * 4);
        /* f32 sum of n squares (relative error ~ n/threads * 6e-8 + tree),
         * rsqrtf (~2 ulp): 2e-5 relative */
        compare(what, y, ref, NULL, n * rows, 2e-5, 1e-7);
        free(y);
    }
    dev_free(dx);
    dev_free(dw);
    if (!inplace) dev_free(dy);
    free(x);
    free(w);
    free(ref);
}

/* ---- rope ---------------------------------------------------------------------------------- */

static void test_rope(int64_t n_tok, int n_head, int hd, int n_rot, int mode, float base) {
    int64_t n = n_tok * n_head * hd;
    float *x = (float *)tc_xmalloc((size_t)n * 4);
    int32_t *pos = (int32_t *)tc_xmalloc((size_t)n_tok * 4);
    tc_fill_unif(x, (size_t)n, -1, 1);
    for (int64_t t = 0; t < n_tok; t++) pos[t] = t == 0 ? 0 : (int32_t)(tc_xorshift() % 100000);
    double *ref = (double *)tc_xmalloc((size_t)n * 8);
    for (int64_t t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            const float *xr = x + (t * n_head + h) * hd;
            double *yr = ref + (t * n_head + h) * hd;
            for (int i = 0; i < hd; i++) yr[i] = xr[i];
            for (int i = 0; i < n_rot / 2; i++) {
                int i0 = mode == TND_ROPE_NEOX ? i : 2 * i, i1 = mode == TND_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                double th = pos[t] * pow(base, -2.0 * i / n_rot);
                yr[i0] = xr[i0] * cos(th) - xr[i1] * sin(th);
                yr[i1] = xr[i0] * sin(th) + xr[i1] * cos(th);
            }
        }
    float *dx = (float *)dev_upload(x, (size_t)n * 4), *dy = (float *)dev_alloc((size_t)n * 4);
    void *dpos = dev_upload(pos, (size_t)n_tok * 4);
    dev_poison(dy, (size_t)n * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_ROPE;
    op.in[0] = tens(dx, TND_TYPE_F32, hd, n_head, n_tok);
    op.in[1] = tens(dpos, TND_TYPE_I32, n_tok, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, hd, n_head, n_tok);
    op.p.rope.n_rot = n_rot;
    op.p.rope.mode = mode;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = 1.0f;
    char what[160];
    snprintf(what, sizeof what, "rope %s n_tok=%lld heads=%d head_dim=%d n_rot=%d base=%g",
             mode == TND_ROPE_NEOX ? "neox  " : "normal", (long long)n_tok, n_head, hd, n_rot, base);
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)n * 4);
        dev_download(y, dy, (size_t)n * 4);
        /* angles and sin/cos in double on both sides, outputs rounded to
         * f32 (|x| <= 1 so 1 ulp <= 1.2e-7): 3e-7 absolute */
        compare(what, y, ref, NULL, n, 0, 3e-7);
        free(y);
    }
    dev_free(dx);
    dev_free(dy);
    dev_free(dpos);
    free(x);
    free(pos);
    free(ref);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* ATTN over slots (backend.h): queries of several sequences in one op, each
 * at its row slot * SR + position, against the double reference over its
 * own slot. Rows no query sees are NaN. short_cache: K and V are given one
 * slot fewer, so query 3 names a slot past them: it reads nothing (its
 * output is NaN, no key's value) and the others are unchanged. */
static void test_attn_slots(int n_head, int n_kv, int hd, float softcap, int window, bool short_cache) {
    enum { N_SLOT = 5, SR = 300, NT = 7 };
    const int32_t slot[NT] = {3, 0, 0, 4, 1, 0, 2}, at[NT] = {5, 0, 1, 170, SR - 1, 9, 260};
    const int64_t row = (int64_t)n_kv * hd, nq = (int64_t)NT * n_head * hd;
    float *q = (float *)tc_xmalloc((size_t)nq * 4);
    uint16_t *K = (uint16_t *)tc_xmalloc((size_t)(N_SLOT * SR * row) * 2);
    uint16_t *V = (uint16_t *)tc_xmalloc((size_t)(N_SLOT * SR * row) * 2);
    tc_fill_unif(q, (size_t)nq, -1, 1);
    int32_t seen[N_SLOT] = {0}, rows[NT];
    for (int t = 0; t < NT; t++) seen[slot[t]] = seen[slot[t]] > at[t] + 1 ? seen[slot[t]] : at[t] + 1;
    double vmax = 0;
    for (int64_t i = 0; i < N_SLOT * SR * row; i++) {
        bool dead = (i / row) % SR >= seen[i / row / SR];
        K[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
        V[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
        if (!dead) vmax = fmax(vmax, fabs(tnd_fp16_to_fp32(V[i])));
    }
    const float scale = 1.0f / sqrtf((float)hd);
    double *ref = (double *)tc_xmalloc((size_t)nq * 8), *p = (double *)tc_xmalloc((size_t)SR * 8);
    for (int t = 0; t < NT; t++) {
        rows[t] = slot[t] * SR + at[t];
        tc_ref_attn_query(q + (int64_t)t * n_head * hd, K + (int64_t)slot[t] * SR * row, V + (int64_t)slot[t] * SR * row,
                       row, n_head, n_kv, hd, at[t], scale, softcap, window, p, ref + (int64_t)t * n_head * hd);
    }
    float *dq = (float *)dev_upload(q, (size_t)nq * 4), *dout = (float *)dev_alloc((size_t)nq * 4);
    void *dK = dev_upload(K, (size_t)(N_SLOT * SR * row) * 2), *dV = dev_upload(V, (size_t)(N_SLOT * SR * row) * 2);
    void *drows = dev_upload(rows, sizeof rows);
    dev_poison(dout, (size_t)nq * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_ATTN;
    op.in[0] = tens(dq, TND_TYPE_F32, hd, n_head, NT);
    op.in[1] = tens(dK, TND_TYPE_F16, row, (N_SLOT - short_cache) * SR, 1);
    op.in[2] = tens(dV, TND_TYPE_F16, row, (N_SLOT - short_cache) * SR, 1);
    op.in[3] = tens(drows, TND_TYPE_I32, NT, 1, 1);
    op.out[0] = tens(dout, TND_TYPE_F32, hd, n_head, NT);
    op.p.attn.n_head = n_head;
    op.p.attn.n_head_kv = n_kv;
    op.p.attn.head_dim = hd;
    op.p.attn.scale = scale;
    op.p.attn.softcap = softcap;
    op.p.attn.window = window;
    op.p.attn.kv_cap = SR;
    op.p.attn.slot_rows = SR;
    char what[200];
    snprintf(what, sizeof what, "attn over %d slots of %d rows: %d queries, heads=%d kv_heads=%d head_dim=%d softcap=%g "
             "window=%d%s", N_SLOT - short_cache, SR, NT, n_head, n_kv, hd, softcap, window,
             short_cache ? ", query 3 past the slots" : "");
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)nq * 4);
        double *sc = (double *)tc_xmalloc((size_t)nq * 8);
        dev_download(y, dout, (size_t)nq * 4);
        for (int64_t i = 0; i < nq; i++) sc[i] = vmax;
        const int64_t qs = (int64_t)n_head * hd; /* one query's outputs */
        if (short_cache) {
            int finite = 0;
            for (int64_t i = 3 * qs; i < 4 * qs; i++) finite += !isnan(y[i]);
            tc_report(finite == 0, "%s: query 3 read no key (%d finite outputs)", what, finite);
            compare(what, y, ref, sc, 3 * qs, 1e-4, 0);
            compare(what, y + 4 * qs, ref + 4 * qs, sc + 4 * qs, nq - 4 * qs, 1e-4, 0);
        } else {
            compare(what, y, ref, sc, nq, 1e-4, 0); /* test_attn's bound */
        }
        free(sc);
        free(y);
    }
    dev_free(dq), dev_free(dout), dev_free(dK), dev_free(dV), dev_free(drows);
    free(q), free(K), free(V), free(ref), free(p);
}

static void test_attn(int64_t n_tok, int n_head, int n_kv, int hd, int64_t pos0, float softcap, int window) {
    int64_t n_ctx = pos0 + n_tok + 3; /* 3 rows past the last query: NaN, never to be read */
    int64_t row = (int64_t)n_kv * hd;
    int64_t nq = n_tok * n_head * hd;
    float *q = (float *)tc_xmalloc((size_t)nq * 4);
    uint16_t *K = (uint16_t *)tc_xmalloc((size_t)(n_ctx * row) * 2), *V = (uint16_t *)tc_xmalloc((size_t)(n_ctx * row) * 2);
    tc_fill_unif(q, (size_t)nq, -1, 1);
    for (int64_t i = 0; i < n_ctx * row; i++) {
        bool dead = i >= (pos0 + n_tok) * row;
        K[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
        V[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
    }
    float scale = 1.0f / sqrtf((float)hd);
    double *ref = (double *)tc_xmalloc((size_t)nq * 8);
    double *p = (double *)tc_xmalloc((size_t)(pos0 + n_tok) * 8);
    double vmax = 0;
    for (int64_t i = 0; i < (pos0 + n_tok) * row; i++) vmax = fmax(vmax, fabs(tnd_fp16_to_fp32(V[i])));
    int ratio = n_head / n_kv;
    for (int64_t t = 0; t < n_tok; t++)
        tc_ref_attn_query(q + t * n_head * hd, K, V, row, n_head, n_kv, hd, pos0 + t, scale, softcap, window, p,
                       ref + t * n_head * hd);
    float *dq = (float *)dev_upload(q, (size_t)nq * 4), *dout = (float *)dev_alloc((size_t)nq * 4);
    void *dK = dev_upload(K, (size_t)(n_ctx * row) * 2), *dV = dev_upload(V, (size_t)(n_ctx * row) * 2);
    dev_poison(dout, (size_t)nq * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_ATTN;
    op.in[0] = tens(dq, TND_TYPE_F32, hd, n_head, n_tok);
    op.in[1] = tens(dK, TND_TYPE_F16, row, n_ctx, 1);
    op.in[2] = tens(dV, TND_TYPE_F16, row, n_ctx, 1);
    op.out[0] = tens(dout, TND_TYPE_F32, hd, n_head, n_tok);
    op.p.attn.n_head = n_head;
    op.p.attn.n_head_kv = n_kv;
    op.p.attn.head_dim = hd;
    op.p.attn.pos0 = (int32_t)pos0;
    op.p.attn.scale = scale;
    op.p.attn.softcap = softcap;
    op.p.attn.window = window;
    /* form 1 (decode-sized rounds, backend.h): positions read from memory
     * and the launch sized by kv_cap, here every row of the cache, so the
     * key ranges past the last visible row (the NaN rows) stay empty */
    int32_t *pos = (int32_t *)tc_xmalloc((size_t)n_tok * 4);
    for (int64_t t = 0; t < n_tok; t++) pos[t] = (int32_t)(pos0 + t);
    void *dpos = dev_upload(pos, (size_t)n_tok * 4);
    for (int form = 0; form < (n_tok <= TND_GRAPH_MAX_TOK ? 2 : 1); form++) {
        if (form) {
            op.in[3] = tens(dpos, TND_TYPE_I32, n_tok, 1, 1);
            op.p.attn.pos0 = 0;
            op.p.attn.kv_cap = (int32_t)n_ctx;
            dev_poison(dout, (size_t)nq * 4);
        }
        char what[220];
        snprintf(what, sizeof what,
                 "attn n_tok=%lld heads=%d kv_heads=%d (gqa %d) head_dim=%d pos0=%lld n_ctx=%lld softcap=%g window=%d%s",
                 (long long)n_tok, n_head, n_kv, ratio, hd, (long long)pos0, (long long)n_ctx, softcap, window,
                 form ? " (positions in memory)" : "");
        if (run_op(&op, what)) {
            float *y = (float *)tc_xmalloc((size_t)nq * 4);
            dev_download(y, dout, (size_t)nq * 4);
            /* outputs are convex combinations of V; f32 scores and the fast
             * exp (a few ulp) perturb each weight by ~1e-6 relative: 1e-4 *
             * max|V| is 10x that, and any indexing or masking error is O(0.1) */
            double *sc = (double *)tc_xmalloc((size_t)nq * 8);
            for (int64_t i = 0; i < nq; i++) sc[i] = vmax;
            compare(what, y, ref, sc, nq, 1e-4, 0);
            free(sc);
            free(y);
        }
    }
    dev_free(dpos);
    free(pos);
    dev_free(dq);
    dev_free(dout);
    dev_free(dK);
    dev_free(dV);
    free(q);
    free(K);
    free(V);
    free(ref);
    free(p);
}

/* ---- softmax and element-wise ops ------------------------------------------------------ */

static void test_softmax(int64_t n, int64_t rows, float scale) {
    float *x = (float *)tc_xmalloc((size_t)(n * rows) * 4);
    tc_fill_unif(x, (size_t)(n * rows), -5, 5);
    double *ref = (double *)tc_xmalloc((size_t)(n * rows) * 8);
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < n; i++) m = fmax(m, (double)x[r * n + i] * scale);
        for (int64_t i = 0; i < n; i++) s += ref[r * n + i] = exp((double)x[r * n + i] * scale - m);
        for (int64_t i = 0; i < n; i++) ref[r * n + i] /= s;
    }
    float *dx = (float *)dev_upload(x, (size_t)(n * rows) * 4), *dy = (float *)dev_alloc((size_t)(n * rows) * 4);
    dev_poison(dy, (size_t)(n * rows) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_SOFTMAX;
    op.in[0] = tens(dx, TND_TYPE_F32, n, rows, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, rows, 1);
    op.p.scale.s = scale;
    char what[128];
    snprintf(what, sizeof what, "softmax n=%lld rows=%lld scale=%g", (long long)n, (long long)rows, scale);
    if (run_op(&op, what)) {
        float *y = (float *)tc_xmalloc((size_t)(n * rows) * 4);
        dev_download(y, dy, (size_t)(n * rows) * 4);
        /* fast exp: 2 + 1.2|arg| ulp with |arg| <= 7: ~1.3e-6; sums in f32 */
        compare(what, y, ref, NULL, n * rows, 1e-5, 1e-9);
        free(y);
    }
    dev_free(dx);
    dev_free(dy);
    free(x);
    free(ref);
}

static void test_elementwise(int64_t n) {
    float *a = (float *)tc_xmalloc((size_t)n * 4), *b = (float *)tc_xmalloc((size_t)n * 4), *y = (float *)tc_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        a[i] = tc_unif(-8, 8);
        b[i] = tc_unif(-2, 2);
    }
    double *ref = (double *)tc_xmalloc((size_t)n * 8), *sc = (double *)tc_xmalloc((size_t)n * 8);
    float *da = (float *)dev_upload(a, (size_t)n * 4), *db = (float *)dev_upload(b, (size_t)n * 4);
    float *dy = (float *)dev_alloc((size_t)n * 4);
    static const tnd_op_kind kinds[] = {TND_OP_SILU_MUL, TND_OP_GELU_MUL, TND_OP_ADD, TND_OP_SCALE};
    for (size_t k = 0; k < TND_ARRAY_LEN(kinds); k++) {
        const float s = 0.37f;
        for (int64_t i = 0; i < n; i++) {
            double g = a[i], u = b[i];
            switch (kinds[k]) {
            case TND_OP_SILU_MUL: ref[i] = g / (1 + exp(-g)) * u; sc[i] = fabs(ref[i]); break;
            case TND_OP_GELU_MUL:
                ref[i] = 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
                sc[i] = fabs(g * u); /* 1 + tanh cancels for g << 0: errors scale with |g u| */
                break;
            case TND_OP_ADD: ref[i] = (float)(a[i] + b[i]); sc[i] = 0; break;
            default: ref[i] = (float)(a[i] * s); sc[i] = 0; break;
            }
        }
        dev_poison(dy, (size_t)n * 4);
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = kinds[k];
        op.in[0] = tens(da, TND_TYPE_F32, n, 1, 1);
        op.in[1] = tens(kinds[k] == TND_OP_SCALE ? NULL : db, TND_TYPE_F32, n, 1, 1);
        op.out[0] = tens(dy, TND_TYPE_F32, n, 1, 1);
        op.p.scale.s = s;
        char what[128];
        snprintf(what, sizeof what, "%s n=%lld", tnd_op_name(kinds[k]), (long long)n);
        if (!run_op(&op, what)) continue;
        dev_download(y, dy, (size_t)n * 4);
        /* add and scale round once in f32 on both sides: exact. silu: fast
         * exp (<= 12 ulp for |g| <= 8) and division (2 ulp): 5e-6 relative.
         * gelu: tanhf (2 ulp of 1) times 0.5|g u|: 1e-6 of |g u|. */
        double rtol = kinds[k] == TND_OP_SILU_MUL ? 5e-6 : kinds[k] == TND_OP_GELU_MUL ? 1e-6 : 0;
        compare(what, y, ref, sc, n, rtol, 0);
    }
    dev_free(da);
    dev_free(db);
    dev_free(dy);
    free(a);
    free(b);
    free(y);
    free(ref);
    free(sc);
}

/* ADD with a one-row in[1] (bias broadcast) and MOE_SUM. */
static void test_bias_and_moe_sum(int64_t n, int64_t rows, int n_used) {
    float *a = (float *)tc_xmalloc((size_t)(n * rows * n_used) * 4), *b = (float *)tc_xmalloc((size_t)n * 4);
    float *w = (float *)tc_xmalloc((size_t)(rows * n_used) * 4), *y = (float *)tc_xmalloc((size_t)(n * rows) * 4);
    double *ref = (double *)tc_xmalloc((size_t)(n * rows) * 8), *sc = (double *)tc_xmalloc((size_t)(n * rows) * 8);
    tc_fill_unif(a, (size_t)(n * rows * n_used), -2, 2);
    tc_fill_unif(b, (size_t)n, -1, 1);
    tc_fill_unif(w, (size_t)(rows * n_used), 0, 1);
    float *da = (float *)dev_upload(a, (size_t)(n * rows * n_used) * 4), *db = (float *)dev_upload(b, (size_t)n * 4);
    float *dw = (float *)dev_upload(w, (size_t)(rows * n_used) * 4), *dy = (float *)dev_alloc((size_t)(n * rows) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_ADD;
    op.in[0] = tens(da, TND_TYPE_F32, n, rows, 1);
    op.in[1] = tens(db, TND_TYPE_F32, n, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, rows, 1);
    char what[128];
    snprintf(what, sizeof what, "add bias broadcast n=%lld rows=%lld", (long long)n, (long long)rows);
    dev_poison(dy, (size_t)(n * rows) * 4);
    if (run_op(&op, what)) {
        for (int64_t i = 0; i < n * rows; i++) ref[i] = (float)(a[i] + b[i % n]);
        dev_download(y, dy, (size_t)(n * rows) * 4);
        compare(what, y, ref, NULL, n * rows, 0, 0); /* one f32 rounding on both sides: exact */
    }
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MOE_SUM;
    op.in[0] = tens(da, TND_TYPE_F32, n, n_used, rows);
    op.in[1] = tens(dw, TND_TYPE_F32, n_used, rows, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, rows, 1);
    snprintf(what, sizeof what, "moe_sum n=%lld n_tok=%lld used=%d", (long long)n, (long long)rows, n_used);
    dev_poison(dy, (size_t)(n * rows) * 4);
    if (run_op(&op, what)) {
        for (int64_t t = 0; t < rows; t++)
            for (int64_t i = 0; i < n; i++) {
                double s = 0, m = 0;
                for (int u = 0; u < n_used; u++) {
                    s += (double)w[t * n_used + u] * a[(t * n_used + u) * n + i];
                    m += fabs((double)w[t * n_used + u] * a[(t * n_used + u) * n + i]);
                }
                ref[t * n + i] = s;
                sc[t * n + i] = m;
            }
        dev_download(y, dy, (size_t)(n * rows) * 4);
        compare(what, y, ref, sc, n * rows, 1e-6, 0); /* n_used f32 fmas: a few ulp of sum|w y| */
    }
    dev_free(da);
    dev_free(db);
    dev_free(dw);
    dev_free(dy);
    free(a);
    free(b);
    free(w);
    free(y);
    free(ref);
    free(sc);
}

/* The KV store of a decode-sized round (backend.h): n rows of rl values to
 * the rows pos[i] of a cache of cap rows; other rows keep their bytes. */
static void test_cpy_at(int64_t rl, int64_t n, int64_t cap) {
    float *x = (float *)tc_xmalloc((size_t)(n * rl) * 4);
    tc_fill_unif(x, (size_t)(n * rl), -3, 3);
    int32_t *pos = (int32_t *)tc_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)((cap - 1 - 3 * i) % cap); /* from the end, not in order */
    float *dx = (float *)dev_upload(x, (size_t)(n * rl) * 4);
    void *dpos = dev_upload(pos, (size_t)n * 4);
    uint16_t *dh = (uint16_t *)dev_alloc((size_t)(cap * rl) * 2);
    dev_poison(dh, (size_t)(cap * rl) * 2);
    uint16_t *before = (uint16_t *)tc_xmalloc((size_t)(cap * rl) * 2), *h = (uint16_t *)tc_xmalloc((size_t)(cap * rl) * 2);
    dev_download(before, dh, (size_t)(cap * rl) * 2);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_CPY;
    op.in[0] = tens(dx, TND_TYPE_F32, rl, n, 1);
    op.in[1] = tens(dpos, TND_TYPE_I32, n, 1, 1);
    op.out[0] = tens(dh, TND_TYPE_F16, rl, cap, 1);
    char what[96];
    snprintf(what, sizeof what, "cpy by position: %lld rows of %lld into %lld", (long long)n, (long long)rl, (long long)cap);
    if (run_op(&op, what)) {
        dev_download(h, dh, (size_t)(cap * rl) * 2);
        uint16_t *want = before;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < rl; j++) want[pos[i] * rl + j] = tnd_fp32_to_fp16(x[i * rl + j]);
        int64_t bad = -1;
        for (int64_t i = 0; i < cap * rl && bad < 0; i++)
            if (h[i] != want[i]) bad = i;
        tc_report(bad < 0, "%s%s", what, bad < 0 ? " (bit-exact; other rows untouched)" : ": differs");
    }
    dev_free(dx);
    dev_free(dpos);
    dev_free(dh);
    free(x);
    free(pos);
    free(before);
    free(h);
}

static void test_cpy(int64_t n) {
    float *x = (float *)tc_xmalloc((size_t)n * 4);
    static const float special[] = {0.0f, -0.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6e-8f, 3e-8f, 1e-4f, -2.5e-6f, INFINITY, -INFINITY, NAN};
    for (int64_t i = 0; i < n; i++)
        x[i] = (size_t)i < TND_ARRAY_LEN(special) ? special[i] : tc_unif(-3, 3) * (float)pow(10, (double)(tc_xorshift() % 9) - 4);
    float *dx = (float *)dev_upload(x, (size_t)n * 4);
    uint16_t *dh = (uint16_t *)dev_alloc((size_t)n * 2);
    float *dy = (float *)dev_alloc((size_t)n * 4);
    dev_poison(dh, (size_t)n * 2);
    dev_poison(dy, (size_t)n * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_CPY;
    op.in[0] = tens(dx, TND_TYPE_F32, n, 1, 1);
    op.out[0] = tens(dh, TND_TYPE_F16, n, 1, 1);
    char what[96];
    snprintf(what, sizeof what, "cpy f32->f16->f32 n=%lld", (long long)n);
    if (!run_op(&op, what)) goto out;
    op.in[0] = tens(dh, TND_TYPE_F16, n, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n, 1, 1);
    if (!run_op(&op, what)) goto out;
    {
        uint16_t *h = (uint16_t *)tc_xmalloc((size_t)n * 2);
        float *y = (float *)tc_xmalloc((size_t)n * 4);
        dev_download(h, dh, (size_t)n * 2);
        dev_download(y, dy, (size_t)n * 4);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            uint16_t want = tnd_fp32_to_fp16(x[i]);
            bool nan_ok = isnan(x[i]) && (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff) && isnan(y[i]);
            /* f16 bits must match quant.h's round-to-nearest-even exactly,
             * and f16 -> f32 is exact */
            if (!nan_ok && (h[i] != want || tnd_fp32_to_bits(y[i]) != tnd_fp32_to_bits(tnd_fp16_to_fp32(want)))) bad = i;
        }
        if (bad >= 0)
            tc_report(false, "%s: at [%lld] x=%.9g: f16 0x%04x want 0x%04x, back %.9g", what, (long long)bad, x[bad], h[bad],
                   tnd_fp32_to_fp16(x[bad]), y[bad]);
        else
            tc_report(true, "%s (bit-exact, specials included)", what);
        free(h);
        free(y);
    }
out:
    dev_free(dx);
    dev_free(dh);
    dev_free(dy);
    free(x);
}

/* ---- MoE routing --------------------------------------------------------------------------- */

static void test_route(int64_t n_tok, int n_exp, int n_used, int mode, bool norm) {
    float *l = (float *)tc_xmalloc((size_t)(n_tok * n_exp) * 4);
    tc_fill_unif(l, (size_t)(n_tok * n_exp), -4, 4);
    int32_t *rid = (int32_t *)tc_xmalloc((size_t)(n_tok * n_used) * 4);
    double *rw = (double *)tc_xmalloc((size_t)(n_tok * n_used) * 8);
    bool *taken = (bool *)tc_xmalloc((size_t)n_exp);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *lt = l + t * n_exp;
        memset(taken, 0, (size_t)n_exp);
        double m = -INFINITY, tot = 0, sel = 0;
        for (int e = 0; e < n_exp; e++) m = fmax(m, lt[e]);
        for (int e = 0; e < n_exp; e++) tot += exp(lt[e] - m);
        for (int k = 0; k < n_used; k++) {
            int best = -1;
            for (int e = 0; e < n_exp; e++)
                if (!taken[e] && (best < 0 || lt[e] > lt[best])) best = e;
            taken[best] = true;
            rid[t * n_used + k] = best;
            double w = mode == TND_ROUTE_SOFTMAX_TOPK ? exp(lt[best] - m) / tot : exp(lt[best] - lt[rid[t * n_used]]);
            rw[t * n_used + k] = w;
            sel += w;
        }
        if (mode == TND_ROUTE_TOPK_SOFTMAX || norm)
            for (int k = 0; k < n_used; k++) rw[t * n_used + k] /= sel;
    }
    float *dl = (float *)dev_upload(l, (size_t)(n_tok * n_exp) * 4), *dw = (float *)dev_alloc((size_t)(n_tok * n_used) * 4);
    int32_t *di = (int32_t *)dev_alloc((size_t)(n_tok * n_used) * 4);
    dev_poison(dw, (size_t)(n_tok * n_used) * 4);
    dev_poison(di, (size_t)(n_tok * n_used) * 4);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MOE_ROUTE;
    op.in[0] = tens(dl, TND_TYPE_F32, n_exp, n_tok, 1);
    op.out[0] = tens(dw, TND_TYPE_F32, n_used, n_tok, 1);
    op.out[1] = tens(di, TND_TYPE_I32, n_used, n_tok, 1);
    op.p.route.n_used = n_used;
    op.p.route.mode = mode;
    op.p.route.norm = norm;
    char what[128];
    snprintf(what, sizeof what, "moe_route %s%s n_tok=%lld experts=%d used=%d",
             mode == TND_ROUTE_SOFTMAX_TOPK ? "softmax-topk" : "topk-softmax", norm ? "+norm" : "", (long long)n_tok, n_exp,
             n_used);
    if (run_op(&op, what)) {
        float *w = (float *)tc_xmalloc((size_t)(n_tok * n_used) * 4);
        int32_t *id = (int32_t *)tc_xmalloc((size_t)(n_tok * n_used) * 4);
        dev_download(w, dw, (size_t)(n_tok * n_used) * 4);
        dev_download(id, di, (size_t)(n_tok * n_used) * 4);
        int64_t bad = -1;
        for (int64_t i = 0; i < n_tok * n_used && bad < 0; i++)
            if (id[i] != rid[i]) bad = i;
        if (bad >= 0) {
            tc_report(false, "%s: ids differ at [%lld]: got %d want %d", what, (long long)bad, id[bad], rid[bad]);
        } else {
            /* fast exp over |arg| <= 8 (~12 ulp) and f32 sums: 1e-5 relative */
            compare(what, w, rw, NULL, n_tok * n_used, 1e-5, 1e-9);
        }
        free(w);
        free(id);
    }
    dev_free(dl);
    dev_free(dw);
    dev_free(di);
    free(l);
    free(rid);
    free(rw);
    free(taken);
}

/* ---- copies, mapped memory, events ---------------------------------------------------------- */

static void test_copies(void) {
    const size_t n = 1000003;
    void *host = NULL, *hdev = NULL;
    tnd_status st = B->iface->host_alloc(B, n + 64, &host, &hdev);
    if (st) {
        tc_report(false, "host_alloc of %zu bytes: %s", n + 64, tnd_last_error());
        return;
    }
    uint8_t *h = (uint8_t *)host;
    for (size_t i = 0; i < n + 64; i++) h[i] = (uint8_t)(i * 131 + 7);
    uint8_t *d = (uint8_t *)dev_alloc(n + 64), *d2 = (uint8_t *)dev_alloc(n + 64);
    uint8_t *back = (uint8_t *)tc_xmalloc(n + 64);
    /* mapped host -> device through the SM copy, unaligned source */
    dev_poison(d, n + 64);
    CHECK_ST(B->iface->copy_mapped(B, d, (uint8_t *)hdev + 3, n, S));
    dev_download(back, d, n);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (back[i] != h[i + 3]) bad = i;
    tc_report(bad == n, "copy_mapped host->device n=%zu unaligned (first mismatch %zu)", n, bad);
    /* device -> device (copy engine), then device -> mapped host, aligned */
    CHECK_ST(B->iface->copy_d2d(B, d2, d, n, S));
    memset(h, 0, n + 64);
    CHECK_ST(B->iface->copy_mapped(B, (uint8_t *)hdev + 16, d2, n, S));
    CHECK_ST(B->iface->stream_sync(B, S));
    bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (h[16 + i] != (uint8_t)((i + 3) * 131 + 7)) bad = i;
    bool edges = h[15] == 0 && h[16 + n] == 0;
    tc_report(bad == n && edges, "copy_d2d + copy_mapped device->host n=%zu (first mismatch %zu, bounds %s)", n, bad,
           edges ? "kept" : "overwritten");
    dev_free(d);
    dev_free(d2);
    free(back);
    B->iface->host_free(B, host);
}

static void test_events(void) {
    const size_t n = 64u << 20;
    tnd_stream *s2 = NULL;
    tnd_event *e0 = NULL, *e1 = NULL;
    CHECK_ST(B->iface->stream_new(B, &s2));
    CHECK_ST(B->iface->event_new(B, &e0));
    CHECK_ST(B->iface->event_new(B, &e1));
    uint8_t *a = (uint8_t *)dev_alloc(n), *b = (uint8_t *)dev_alloc(n);
    CHECK_ST(B->iface->memset(B, a, 0x22, n, S));
    CHECK_ST(B->iface->memset(B, b, 0x00, n, S));
    CHECK_ST(B->iface->stream_sync(B, S));
    /* S: overwrite a (several passes, so it takes a while); s2 must wait for it */
    CHECK_ST(B->iface->event_record(B, e0, S));
    for (int i = 0; i < 8; i++) CHECK_ST(B->iface->memset(B, a, 0x11, n, S));
    CHECK_ST(B->iface->event_record(B, e1, S));
    CHECK_ST(B->iface->stream_wait(B, s2, e1));
    CHECK_ST(B->iface->copy_d2d(B, b, a, n, s2));
    CHECK_ST(B->iface->stream_sync(B, s2));
    uint8_t *hb = (uint8_t *)tc_xmalloc(n);
    CHECK_ST(B->iface->copy_d2h(B, hb, b, n, s2));
    CHECK_ST(B->iface->stream_sync(B, s2));
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (hb[i] != 0x11) bad = i;
    tc_report(bad == n, "stream_wait orders a copy on a second stream after an event (first stale byte %zu)", bad);
    CHECK_ST(B->iface->event_sync(B, e1));
    float ms = -1;
    {
        tnd_status st = B->iface->event_elapsed(B, e0, e1, &ms);
        /* 8 x 64 MiB written at a few TB/s: well above 0.01 ms, below 1 s */
        tc_report(st == TND_OK && ms > 0.01f && ms < 1000.0f, "event_elapsed over 512 MiB of memset: %.3f ms (%s)", ms,
               st ? tnd_last_error() : "ok");
    }
    free(hb);
    dev_free(a);
    dev_free(b);
    B->iface->event_free(B, e0);
    B->iface->event_free(B, e1);
    B->iface->stream_free(B, s2);
}

/* ---- VRAM budget ----------------------------------------------------------------------------- */

static void test_budget(void) {
    const uint64_t budget = 256ull << 20, chunk = 24ull << 20;
    tnd_cuda_params p = {0, budget};
    tnd_backend *b2 = NULL;
    CHECK_ST(tnd_backend_cuda_new(&p, &b2));
    tnd_mem_info m0, m1, m2;
    CHECK_ST(B->iface->stream_sync(B, S));
    b2->iface->mem_info(b2, &m0); /* the context exists already: its overhead is in m0 */
    void *ptrs[64];
    int n = 0;
    tnd_status st = TND_OK;
    while (n < 64 && (st = b2->iface->buf_alloc(b2, chunk, &ptrs[n])) == TND_OK) n++;
    const char *msg = tnd_last_error();
    bool refused = st == TND_ERR_NOMEM && strstr(msg, "budget") != NULL;
    b2->iface->mem_info(b2, &m1);
    int64_t grown = (int64_t)m0.dev_free - (int64_t)m1.dev_free;
    /* 24 MiB chunks (2 MiB pages): exactly floor(256/24) = 10 fit */
    int want = (int)(budget / chunk);
    tc_report(refused && n == want, "budget %llu MiB: %d allocations of %llu MiB before refusal (want %d): \"%s\"",
           (unsigned long long)(budget >> 20), n, (unsigned long long)(chunk >> 20), want, refused ? msg : "not refused");
    tc_report(m1.used <= budget && m1.used == (uint64_t)n * chunk, "budget accounting: used %llu bytes, %d x chunk = %llu",
           (unsigned long long)m1.used, n, (unsigned long long)((uint64_t)n * chunk));
    /* the device's own count: no more than the budget (plus one 2 MiB page
     * of allocator slack), and at least what was handed out */
    tc_report(grown <= (int64_t)(budget + (2u << 20)) && grown >= (int64_t)((uint64_t)n * chunk),
           "cudaMemGetInfo: device memory grew by %.1f MiB for %.1f MiB allocated (budget %.1f MiB)", grown / 1048576.0,
           (double)((uint64_t)n * chunk) / 1048576.0, budget / 1048576.0);
    for (int i = 0; i < n; i++) b2->iface->buf_free(b2, ptrs[i]);
    b2->iface->mem_info(b2, &m2);
    void *again = NULL;
    st = b2->iface->buf_alloc(b2, chunk * (uint64_t)want, &again);
    tc_report(m2.used == 0 && st == TND_OK, "budget released on free: used %llu after freeing, one %llu MiB allocation %s",
           (unsigned long long)m2.used, (unsigned long long)((chunk * want) >> 20), st ? tnd_last_error() : "ok");
    b2->iface->buf_free(b2, again);
    tnd_backend_free(b2);
}

/* ---- driver ------------------------------------------------------------------------------- */

/* Row length per type for the odd shapes: 3 blocks of 256, 13 blocks of 32,
 * or 417 (not a multiple of anything) for the float types. */
static int64_t odd_n_in(tnd_type t) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    return tr->block_size == 256 ? 768 : tr->block_size == 32 ? 416 : 417;
}
static int64_t big_n_in(tnd_type t) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    return tr->block_size == 256 ? 256 * 23 : tr->block_size == 32 ? 32 * 171 : 5001;
}

/* A build without code for the device's architecture (src/cuda/arch.cu):
 * the probe's attribute query agrees with the __CUDA_ARCH__ its code ran as;
 * with the code capped at sm_75 (as a build for sm_75 alone runs on a newer
 * GPU), the decode matvec, the Q4_K tiles and the prefill attention refuse
 * their sm_80 kernels, the fallbacks still match the references, and the
 * fallback is counted (the warning's trigger); without the cap the tensor-core
 * kernels are chosen again. */
static bool test_arch_fallback(void) {
    int attr = 0, ran = 0;
    const int dev = tnd_cu_device_arch();
    CHECK(tnd_cu_arch_probe(&attr, &ran) == 0);
    CHECK(attr == ran && ran > 0 && ran <= dev, " probe: attributes %d, ran as %d, device %d", attr, ran, dev);
    printf("arch: device sm_%d, code sm_%d, built %s\n", dev / 10, ran / 10, tnd_cuda_build_archs());
    if (dev < 800 || ran < 800) return false; /* no sm_80 kernels to refuse */
    const int64_t n_in = 256 * 21;
    const bool tc = tnd_cu_matvec_kind(TND_TYPE_Q4_K, n_in, 1) != TND_CU_MV_F32; /* TND_CUDA_MV=old: f32 */
    const int before = tnd_cu_arch_fallbacks();
    tnd_cu_arch_cap(750);
    CHECK(tnd_cu_matvec_kind(TND_TYPE_Q4_K, n_in, 1) == TND_CU_MV_F32);
    CHECK(tnd_cu_matvec_kind(TND_TYPE_Q6_K, n_in, 2) == TND_CU_MV_F32);
    CHECK(!tnd_cu_q4kt_supported(n_in, 1024), " the Q4_K tiles need sm_80 code");
    test_matmul(TND_TYPE_Q4_K, n_in, 1031, 1);
    test_matmul(TND_TYPE_Q6_K, n_in, 67, 2);
    test_attn(40, 8, 2, 128, 5, 0.f, 0); /* 16+ tokens: the tensor-core kernel's shape */
    CHECK(tnd_cu_arch_fallbacks() > before, " fallbacks counted: %d -> %d", before, tnd_cu_arch_fallbacks());
    tnd_cu_arch_cap(0);
    if (tc) CHECK(tnd_cu_matvec_kind(TND_TYPE_Q4_K, n_in, 1) != TND_CU_MV_F32);
    CHECK(tnd_cu_q4kt_supported(n_in, 1024));
    return true;
}

/* Without sm_80 code (an older GPU, or a build without code for this one):
 * every entry point of the tensor-core and tile families says so
 * and refuses a launch with an error, instead of running a compiled-out body
 * (which traps) or returning zeros. */
static void test_arch_refusals(void) {
    const int64_t n_in = 256 * 4, n_out = 32;
    size_t wb;
    void *W = make_weights(TND_TYPE_Q4_K, n_in, n_out, &wb);
    void *dW = dev_upload(W, wb);
    float *dx = (float *)dev_alloc((size_t)n_in * 4), *dy = (float *)dev_alloc((size_t)n_out * 4);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    CHECK(!tnd_cu_matvec_f16mma_supported(TND_TYPE_Q4_K, n_in, 1) && !tnd_cu_matvec_i8mma_supported(TND_TYPE_Q4_K, n_in, 1));
    CHECK(!tnd_cu_q4kt_supported(n_in, n_out) && !tnd_cu_matvec_q4kt_i8_supported(n_in, n_out, 1));
    CHECK(!tnd_cu_matvec_q4kt_pair_supported(n_in, n_out, n_out, 1));
    CHECK(tnd_cu_matvec_kind(TND_TYPE_Q4_K, n_in, 1) == TND_CU_MV_F32);
    CHECK(tnd_cu_matvec_f16mma(TND_TYPE_Q4_K, dW, n_in, n_out, dx, 1, dy, 0, 0, cs) != 0);
    CHECK(tnd_cu_matvec_i8mma(TND_TYPE_Q4_K, dW, n_in, n_out, dx, 1, dy, 0, 0, cs) != 0);
    CHECK(tnd_cu_q4kt_repack(dW, n_in, n_out, cs) != 0);
    CHECK_ST(B->iface->stream_sync(B, S)); /* nothing ran that trapped */
    test_matmul(TND_TYPE_Q4_K, n_in, n_out, 1); /* the f32 matvec instead */
    printf("arch: no sm_80 code on this GPU: its kernels refused, the tensor-core and tile tests skipped\n");
    dev_free(dW);
    dev_free(dx);
    dev_free(dy);
    free(W);
}

int main(void) {
    tc_rng = 0x9e3779b97f4a7c15ull;
    const int rc = cuda_test_open("test_cuda_ops");
    if (rc) return rc;
    const bool sm80 = test_arch_fallback();
    if (!sm80) test_arch_refusals();

    static const int64_t toks[] = {1, 3, 8, 17, 64};
    for (size_t i = 0; i < TND_ARRAY_LEN(ALL_TYPES); i++) {
        tnd_type t = ALL_TYPES[i];
        for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++) test_matmul(t, odd_n_in(t), 37, toks[k]);
        test_matmul(t, big_n_in(t), 129, 1);
        test_matmul(t, big_n_in(t), 67, 5);
        test_matmul(t, odd_n_in(t), 4099, 1); /* many blocks, the 2-rows-per-block launch */
        test_get_rows(t, odd_n_in(t), 37, 9);
    }
    test_matmul(TND_TYPE_Q4_K, 256 * 20, 300, 33); /* cuBLAS with several row chunks would need n_out > 4096 */
    test_matmul(TND_TYPE_Q8_0, 4096, 4133, 19);    /* two row chunks of the f16 path */
    test_matvec_cfg(TND_TYPE_Q4_K, 256 * 9, 67);
    test_matvec_cfg(TND_TYPE_Q4_K, 256 * 21, 1031); /* row groups split between warps and blocks */
    test_matvec_cfg(TND_TYPE_Q6_K, 256 * 9, 67);
    test_matvec_cfg(TND_TYPE_Q8_0, 32 * 41, 67);
    test_matvec_cfg(TND_TYPE_Q4_0, 32 * 41, 67);
    test_matvec_cfg(TND_TYPE_F16, 417, 67);
    /* every other format: rows not 16-byte aligned, n_in not a multiple of
     * 32 subs (a warp's last step partial) */
    test_matvec_cfg(TND_TYPE_Q4_1, 32 * 41, 13);
    test_matvec_cfg(TND_TYPE_Q5_0, 32 * 41, 13);
    test_matvec_cfg(TND_TYPE_Q5_1, 32 * 41, 13);
    test_matvec_cfg(TND_TYPE_MXFP4, 32 * 41, 13);
    test_matvec_cfg(TND_TYPE_Q2_K, 256 * 9, 13);
    test_matvec_cfg(TND_TYPE_Q3_K, 256 * 9, 13);
    test_matvec_cfg(TND_TYPE_Q5_K, 256 * 9, 13);
    test_matvec_cfg(TND_TYPE_BF16, 417, 13);
    test_matvec_cfg(TND_TYPE_F32, 417, 13);

    /* the f16 tensor-core matvec: n_out not a multiple of the 16-row tile,
     * n_in of one super-block, long rows, 1..4 and 8 tokens */
    if (sm80) { /* else test_arch_refusals */
    static const tnd_type mvh_types[] = {TND_TYPE_Q4_K, TND_TYPE_Q6_K, TND_TYPE_Q8_0};
    for (size_t i = 0; i < TND_ARRAY_LEN(mvh_types); i++) {
        tnd_type t = mvh_types[i];
        for (int nt = 1; nt <= 4; nt++) {
            test_matvec_mma(false, t, 256, 37, nt);
            test_matvec_mma(false, t, 256 * 21, 1031, nt); /* Q6_K, Q8_0: rows alternate 4- and 2-byte alignment */
        }
        test_matvec_mma(false, t, 256 * 23, 67, 1);
        test_matvec_mma(false, t, 256 * 68, 129, 1); /* 17408: the longest row of the bench shapes */
        test_matvec_mma(false, t, 256 * 5, 16, 8);
        test_matvec_mma(false, t, 256 * 3, 4099, 8);
    }
    for (int nt = 1; nt <= 4; nt++) {
        test_matvec_mma(true, TND_TYPE_Q4_K, 256, 37, nt);
        test_matvec_mma(true, TND_TYPE_Q4_K, 256 * 21, 1031, nt);
    }
    test_matvec_mma(true, TND_TYPE_Q4_K, 256 * 68, 129, 1);
    test_matvec_mma(true, TND_TYPE_Q4_K, 256 * 3, 4099, 2);
    test_matvec_mma_refusals();
    }
    static const char *const kind_names[] = {"f32", "f16mma", "i8mma"};
    printf("matvec default family: Q4_K %s, Q6_K %s, Q8_0 %s (env TND_CUDA_MV=%s)\n",
           kind_names[tnd_cu_matvec_kind(TND_TYPE_Q4_K, 4096, 1)], kind_names[tnd_cu_matvec_kind(TND_TYPE_Q6_K, 4096, 1)],
           kind_names[tnd_cu_matvec_kind(TND_TYPE_Q8_0, 4096, 1)],
           getenv("TND_CUDA_MV") ? getenv("TND_CUDA_MV") : "(unset)");

    static const tnd_type id_types[] = {TND_TYPE_Q4_K, TND_TYPE_Q8_0, TND_TYPE_MXFP4, TND_TYPE_F16};
    for (size_t i = 0; i < TND_ARRAY_LEN(id_types); i++) {
        tnd_type t = id_types[i];
        int64_t n_in = t == TND_TYPE_F16 ? 417 : 512;
        test_matmul_id(t, n_in, 45, 5, 1, 2, false);
        test_matmul_id(t, n_in, 45, 5, 3, 2, false);
        test_matmul_id(t, n_in, 45, 7, 17, 3, false);
        test_matmul_id(t, n_in, 45, 7, 70, 3, false); /* past the pair kernel's tokens: grouped */
        test_matmul_id(t, n_in, 45, 5, 3, 2, true);
        test_matmul_id(t, n_in, 45, 7, 17, 3, true);
        test_matmul_id(t, n_in, 45, 7, 70, 3, true);
        test_matmul_id_runs(t, n_in);
    }
    test_get_rows(TND_TYPE_Q4_K, 2048, 1000, 64);

    for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++) test_rms_norm(4099, toks[k], true, false);
    test_rms_norm(4096, 1, true, true); /* the register forms' widths: 16, 8, 32 a thread */
    test_rms_norm(2048, 2, true, false);
    test_rms_norm(8192, 1, true, false);
    test_rms_norm(8193, 1, true, false); /* past them: the loops */
    test_rms_norm(128, 17 * 5, true, false); /* per-head q/k norm */
    test_rms_norm(64, 3 * 7, true, true);
    test_rms_norm(1000, 3, false, false);

    static const int64_t rtoks[] = {1, 3, 17, 64};
    for (size_t k = 0; k < TND_ARRAY_LEN(rtoks); k++) {
        test_rope(rtoks[k], 5, 128, 128, TND_ROPE_NORMAL, 10000.0f);
        test_rope(rtoks[k], 5, 128, 128, TND_ROPE_NEOX, 1000000.0f);
    }
    test_rope(17, 3, 64, 32, TND_ROPE_NORMAL, 10000.0f);
    test_rope(17, 3, 64, 32, TND_ROPE_NEOX, 10000.0f);
    test_rope(3, 3, 80, 80, TND_ROPE_NEOX, 500000.0f);

    test_attn(1, 4, 4, 64, 0, 0, 0);      /* first token, ratio 1 */
    test_attn(1, 6, 2, 128, 300, 0, 0);   /* decode, ratio 3 */
    test_attn(1, 8, 2, 128, 1000, 0, 0);  /* decode, ratio 4, several key splits */
    test_attn(1, 32, 8, 128, 4100, 0, 0); /* decode, llama-8B-like heads, long context */
    test_attn(3, 6, 2, 64, 37, 0, 0);
    test_attn(17, 8, 2, 128, 5, 0, 0);
    test_attn(17, 12, 3, 80, 131, 0, 0);  /* head_dim not a power of two */
    test_attn(64, 4, 4, 64, 200, 0, 0);
    test_attn(64, 12, 4, 128, 0, 0, 0);   /* prefill from empty, ratio 3 */
    test_attn(3, 16, 1, 256, 50, 0, 0);   /* ratio 16, head_dim 256 */
    test_attn(1, 8, 4, 128, 1000, 50.0f, 0);  /* gemma-style soft-capping */
    test_attn(1, 8, 4, 128, 1000, 0, 300);    /* sliding window, decode */
    test_attn(17, 6, 2, 64, 200, 30.0f, 64);  /* both, prefill chunk crossing the window edge */
    test_attn(512, 40, 8, 128, 0, 0, 0);      /* tensor-core prefill (n_tok >= 16): Qwen3-14B-like chunk */
    test_attn(2048, 32, 4, 128, 0, 0, 0);     /* Qwen3-30B-A3B-like 2048-token chunk from empty */
    test_attn(100, 32, 4, 128, 900, 0, 0);    /* pos0 > 0 with a chunk: key splits and the combine pass */
    test_attn(16, 40, 8, 128, 3000, 0, 0);    /* smallest tensor-core chunk, long context, many splits */
    test_attn(77, 10, 2, 80, 130, 0, 0);      /* head_dim 80, ratio 5 */
    test_attn(40, 16, 2, 256, 70, 0, 0);      /* head_dim 256, ratio 8 */
    test_attn(33, 16, 1, 64, 20, 0, 0);       /* ratio 16 */
    test_attn(70, 8, 8, 96, 500, 0, 100);     /* ratio 1, window over several tiles */
    test_attn(50, 8, 4, 128, 200, 50.0f, 64); /* soft-cap and window, tensor-core path */
    test_attn(20, 6, 2, 72, 10, 0, 0);        /* head_dim 72: no tensor-core kernel, k_attn */
    test_attn(1, 32, 4, 128, 1023, 0, 0);     /* decode over 1024 rows, 30B-A3B heads (32-key splits) */
    test_attn(1, 40, 8, 128, 20000, 0, 0);    /* decode, long context */
    test_attn_slots(32, 4, 128, 0, 0, false);     /* a batched round's decode tokens, 30B-A3B heads */
    test_attn_slots(32, 2, 128, 50.0f, 0, false); /* soft-cap; GQA 16: the thread-per-output form */
    test_attn_slots(16, 8, 256, 0, 64, false);    /* window */
    test_attn_slots(32, 4, 128, 0, 0, true);      /* a query past the cache's slots */
    test_attn_slots(32, 2, 128, 0, 0, true);

    test_softmax(1001, 3, 0.7f);
    test_softmax(7, 17, 1.0f);
    test_elementwise(100003);
    test_cpy(100003);
    test_cpy_at(512, 1, 300);
    test_cpy_at(1024, 8, 4096);
    test_bias_and_moe_sum(1001, 17, 8);
    test_bias_and_moe_sum(4096, 3, 1);

    for (size_t k = 0; k < TND_ARRAY_LEN(rtoks); k++) {
        test_route(rtoks[k], 8, 2, TND_ROUTE_SOFTMAX_TOPK, false);
        test_route(rtoks[k], 128, 8, TND_ROUTE_SOFTMAX_TOPK, true);
    }
    test_route(17, 60, 4, TND_ROUTE_SOFTMAX_TOPK, true);
    test_route(17, 257, 8, TND_ROUTE_TOPK_SOFTMAX, false);
    test_route(3, 32, 4, TND_ROUTE_TOPK_SOFTMAX, false);
    test_route(3, 512, 32, TND_ROUTE_SOFTMAX_TOPK, false);

    test_copies();
    test_events();
    test_budget();

    return cuda_test_close(0);
}
#endif
