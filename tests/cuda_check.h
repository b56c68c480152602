/* The CUDA op tests' shared helpers (tests/test_cuda_ops.c, _fused.c,
 * _q4kt.c, _q6kt.c, _dequant.c): the backend and stream under test, device
 * buffers, a tensor over them, running one op, and comparing against a
 * double-precision reference with a stated tolerance; random weights in
 * any block format and their reference product; a test main's start and
 * end. Include once, after check.h, in a file built with TND_HAVE_CUDA. */
#ifndef TND_TEST_CUDA_CHECK_H
#define TND_TEST_CUDA_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cuda/cuda_ops.h"
#include "quant/quant.h"
#include "util.h"

static tnd_backend *B;
static tnd_stream *S;

/* A CUDA test's start: 77 (skipped, for the caller to return) without a
 * device, else 0 with B and S made. */
static inline int cuda_test_open(const char *name) {
    if (tnd_cuda_device_count() <= 0) {
        printf("%s: skipped (no CUDA device)\n", name);
        return 77;
    }
    tnd_cuda_params p = {0, 0};
    CHECK_ST(tnd_backend_cuda_new(&p, &B));
    CHECK_ST(B->iface->stream_new(B, &S));
    return 0;
}

/* Its end: B and S freed; rc if not 0, else tc_summary()'s. */
static inline int cuda_test_close(int rc) {
    B->iface->stream_free(B, S);
    tnd_backend_free(B);
    return rc ? rc : tc_summary();
}

/* Waits for S after a kernel launch that returned e (a cudaError_t):
 * false, reported against `what`, if either failed. */
static inline bool sync_ok(int e, const char *what) {
    tnd_status st = B->iface->stream_sync(B, S);
    if (e || st) {
        tc_report(false, "%s: launch %s / %s", what, e ? tnd_cu_error_string(e) : "ok", st ? tnd_last_error() : "ok");
        return false;
    }
    return true;
}

static inline void *dev_alloc(size_t n) {
    void *p = NULL;
    CHECK_ST(B->iface->buf_alloc(B, n, &p));
    return p;
}
static inline void *dev_upload(const void *h, size_t n) {
    void *p = dev_alloc(n);
    CHECK_ST(B->iface->copy_h2d(B, p, h, n, S));
    CHECK_ST(B->iface->stream_sync(B, S));
    return p;
}
static inline void dev_download(void *h, const void *d, size_t n) {
    CHECK_ST(B->iface->copy_d2h(B, h, d, n, S));
    CHECK_ST(B->iface->stream_sync(B, S));
}
static inline void dev_poison(void *d, size_t n) {
    CHECK_ST(B->iface->memset(B, d, 0xff, n, S));
}
static inline void dev_free(void *d) { B->iface->buf_free(B, d); }

/* A tensor of type t over data, shape (n0, n1, n2, 1), other fields zero. */
static inline tnd_tensor tens(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    return (tnd_tensor){.data = data, .type = t, .ne = {n0, n1, n2, 1}};
}

/* Runs op and waits; a failure is reported against `what` and returns false. */
static inline bool run_op(const tnd_op *op, const char *what) {
    tnd_status st = B->iface->op_run(B, op, S);
    if (st == TND_OK) st = B->iface->stream_sync(B, S);
    if (st != TND_OK) {
        printf("FAIL %s: op_run: %s\n", what, tnd_last_error());
        tc_count(false);
        return false;
    }
    return true;
}

/* Compares n values: |got - ref| <= atol + rtol * scale[i] (scale NULL: |ref|).
 * Prints one line; NaN anywhere fails. */
static inline bool compare(const char *what, const float *got, const double *ref, const double *scale, int64_t n, double rtol,
                    double atol) {
    double worst = 0;
    int64_t bad = -1, nbad = 0;
    for (int64_t i = 0; i < n; i++) {
        double sc = scale ? scale[i] : fabs(ref[i]);
        double tol = atol + rtol * sc;
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol)) { /* NaN fails too */
            if (bad < 0) bad = i;
            nbad++;
        }
        if (err / (tol > 0 ? tol : 1) > worst) worst = err / (tol > 0 ? tol : 1);
    }
    if (bad >= 0) {
        double sc = scale ? scale[bad] : fabs(ref[bad]);
        printf("FAIL %s: %lld of %lld wrong; first at [%lld]: got %.9g want %.9g (tol %.3g)\n", what, (long long)nbad,
               (long long)n, (long long)bad, got[bad], ref[bad], atol + rtol * sc);
        tc_count(false);
        return false;
    }
    printf("ok   %s (worst err/tol %.3f)\n", what, worst);
    tc_count(true);
    return true;
}

/* ---- random weights in any block format -------------------------------------- */

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = tnd_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Random blocks: random quant bits, then sane scales (so values stay within
 * f16 range for the cuBLAS path and no scale is a NaN pattern). */
static inline void *make_weights(tnd_type t, int64_t n_in, int64_t rows, size_t *bytes) {
    size_t rs = tnd_row_size(t, n_in);
    size_t n = rs * (size_t)rows;
    uint8_t *w = (uint8_t *)tc_xmalloc(n);
    *bytes = n;
    if (t == TND_TYPE_F32 || t == TND_TYPE_F16 || t == TND_TYPE_BF16) {
        for (int64_t i = 0; i < n_in * rows; i++) {
            float v = tc_unif(-1, 1);
            if (t == TND_TYPE_F32) memcpy(w + 4 * i, &v, 4);
            else {
                uint16_t h = t == TND_TYPE_F16 ? tnd_fp32_to_fp16(v) : tnd_fp32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return w;
    }
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)(tc_xorshift() >> 24);
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t ts = tr->type_size, nb = n / ts;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *p = w + b * ts;
        float d = tc_unif(0.002f, 0.02f), m = tc_unif(0.0005f, 0.01f);
        switch (t) {
        case TND_TYPE_Q4_0: case TND_TYPE_Q5_0: case TND_TYPE_Q8_0: put_f16(p, tc_xorshift() & 1 ? d : -d); break;
        case TND_TYPE_Q4_1: case TND_TYPE_Q5_1: put_f16(p, d); put_f16(p + 2, tc_xorshift() & 1 ? m : -m); break;
        case TND_TYPE_Q2_K: put_f16(p + 80, d); put_f16(p + 82, m); break;
        case TND_TYPE_Q3_K: put_f16(p + 108, d * 0.1f); break;
        case TND_TYPE_Q4_K: case TND_TYPE_Q5_K: put_f16(p, d * 0.1f); put_f16(p + 2, m * 0.1f); break;
        case TND_TYPE_Q6_K: put_f16(p + 208, d * 0.05f); break;
        case TND_TYPE_MXFP4: p[0] = (uint8_t)(119 + tc_xorshift() % 6); break;
        default: break;
        }
    }
    return w;
}

/* Reference y[t][r] and the error scale sum_k |w_rk x_tk| (doubles). */
static inline void ref_matmul(tnd_type t, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                       double *y, double *scale, double *xmax) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t rs = tnd_row_size(t, n_in);
    float *wf = (float *)tc_xmalloc((size_t)n_in * sizeof(float));
    *xmax = 0;
    for (int64_t i = 0; i < n_in * n_tok; i++) *xmax = fmax(*xmax, fabs(x[i]));
    for (int64_t r = 0; r < n_out; r++) {
        const uint8_t *row = (const uint8_t *)W + rs * r;
        tr->to_float(row, wf, n_in);
        for (int64_t k = 0; k < n_tok; k++) {
            const float *xt = x + k * n_in;
            double s = 0;
            for (int64_t i = 0; i < n_in; i++) s += fabs((double)wf[i] * xt[i]);
            y[k * n_out + r] = tnd_ref_dot_f32(t, n_in, row, xt);
            scale[k * n_out + r] = s;
        }
    }
    free(wf);
}

#endif
