/* The CUDA op tests' shared helpers (tests/test_cuda_ops.c,
 * tests/test_cuda_fused.c): the backend and stream under test, device
 * buffers, a tensor over them, running one op, and comparing against a
 * double-precision reference with a stated tolerance. Include once, after
 * check.h, in a file built with TND_HAVE_CUDA. */
#ifndef TND_TEST_CUDA_CHECK_H
#define TND_TEST_CUDA_CHECK_H

#include <math.h>
#include <stdio.h>

#include "backend.h"
#include "check.h"

static tnd_backend *B;
static tnd_stream *S;

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

#endif
