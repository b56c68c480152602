/* The kernels over the Q4_K tile layout on the GPU (src/cuda/matvec_tile.cu,
 * matmul.cu, the CUDA backend's weight_prepare; the layout's byte map is
 * checked on the host by test_tile_layout): the repack against the host's
 * permutation; the f16 tiles, the int8 tiles and the even share over launch
 * shapes, feeds and rings, against the reference with their tolerances and
 * bit for bit where the math is shared; chains of launches under
 * programmatic dependent launch; the pair of matrices in one launch; the
 * backend re-laying resident weights and refusing other ops over them.
 * Skips with 77 without CUDA or without sm_80 code for the device.
 * scripts/device-test.sh runs it first under compute-sanitizer memcheck
 * (the rings' bulk copies). Split from test_cuda_ops.c, whose helpers
 * (tests/cuda_check.h) it shares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "quant/quant.h"
#include "util.h"

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("test_cuda_q4kt: skipped (built without CUDA)\n");
    return 77;
}
#else

#include "cuda/cuda_ops.h"
#include "cuda/q4k_tile.cuh"
#include "cuda_check.h"

/* The host's repack of a whole tensor (q4k_tile_pack_group per group). */
static void *host_q4kt(const void *W, int64_t n_in, int64_t n_out) {
    const size_t rb = tnd_row_size(TND_TYPE_Q4_K, n_in);
    uint8_t *t = (uint8_t *)tc_xmalloc(rb * (size_t)n_out);
    for (int64_t g = 0; g < n_out / 16; g++)
        q4k_tile_pack_group(t + (size_t)g * 16 * rb, (const uint8_t *)W + (size_t)g * 16 * rb, rb);
    return t;
}

/* tnd_cu_q4kt_repack against the host's permutation (bytes), then
 * tnd_cu_matvec_q4kt on the re-laid copy for n_tok tokens over launch
 * shapes (tiles per block x warps per tile x depth; 0: defaults): against
 * the reference with the f16 path's tolerance (test_matvec_mma), and bit
 * for bit against tnd_cu_matvec_f16mma on the original layout with the
 * same tiles per block and warps per tile where f16mma takes the shape
 * (same fragments, same summation order). Also x 4 bytes off alignment. */
static void test_matvec_q4kt(int64_t n_in, int64_t n_out, int n_tok) {
    const tnd_type t = TND_TYPE_Q4_K;
    size_t wb;
    void *W = make_weights(t, n_in, n_out, &wb);
    float *x = (float *)tc_xmalloc((size_t)(n_in * n_tok + 1) * 4);
    tc_fill_unif(x, (size_t)(n_in * n_tok + 1), -1, 1);
    double *ref = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8), *sc = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8);
    double *ref1 = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8), *sc1 = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8);
    double xmax, xmax1;
    ref_matmul(t, W, n_in, n_out, x, n_tok, ref, sc, &xmax);
    ref_matmul(t, W, n_in, n_out, x + 1, n_tok, ref1, sc1, &xmax1); /* for the misaligned x */
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    void *dW0 = dev_upload(W, wb), *dW = dev_upload(W, wb);
    float *dx = (float *)dev_upload(x, (size_t)(n_in * n_tok + 1) * 4);
    char what[200];
    snprintf(what, sizeof what, "q4kt n_in=%lld n_out=%lld n_tok=%d", (long long)n_in, (long long)n_out, n_tok);
    if (!tnd_cu_q4kt_supported(n_in, n_out)) {
        tc_report(false, "%s: tnd_cu_q4kt_supported refuses the shape", what);
        goto out;
    }
    {
        int e = tnd_cu_q4kt_repack(dW, n_in, n_out, cs);
        tnd_status st = B->iface->stream_sync(B, S);
        uint8_t *got = (uint8_t *)tc_xmalloc(wb), *want = (uint8_t *)host_q4kt(W, n_in, n_out);
        dev_download(got, dW, wb);
        tc_report(!e && !st && memcmp(got, want, wb) == 0, "%s: device repack == host permutation (launch %d)", what, e);
        free(got);
        free(want);
    }
    {
        const size_t yb = (size_t)(n_out * n_tok) * 4;
        float *dy = (float *)dev_alloc(yb), *y = (float *)tc_xmalloc(yb), *y1 = (float *)tc_xmalloc(yb);
        /* tiles per block, warps per tile, depth, L2 prefetch (-1: default) */
        static const int shapes[][4] = {{0, 0, 0, -1}, {1, 1, 1, 0}, {1, 3, 2, 1}, {2, 2, 3, 0}, {4, 1, 4, 1},
                                        {1, 8, 2, 0},  {8, 1, 1, 1}, {2, 4, 4, 0}, {4, 2, 2, 1}, {2, 2, 1, 2},
                                        {1, 4, 3, 2}};
        for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) {
            const int *c = shapes[i];
            char w2[260];
            snprintf(w2, sizeof w2, "%s tiles/block=%d warps/tile=%d depth=%d prefetch=%d", what, c[0], c[1], c[2],
                     c[3]);
            dev_poison(dy, yb);
            int e = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx, n_tok, dy, c[0], c[1], c[2], c[3], cs);
            tnd_status st = B->iface->stream_sync(B, S);
            if (e || st) {
                tc_report(false, "%s: launch %s / %s", w2, e ? tnd_cu_error_string(e) : "ok", st ? tnd_last_error() : "ok");
                continue;
            }
            dev_download(y, dy, yb);
            compare(w2, y, ref, sc, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
            if (c[0] > 0 && tnd_cu_matvec_f16mma_supported(t, n_in, n_tok)) {
                dev_poison(dy, yb);
                e = tnd_cu_matvec_f16mma(t, dW0, n_in, n_out, dx, n_tok, dy, c[0], c[1], cs);
                st = B->iface->stream_sync(B, S);
                dev_download(y1, dy, yb);
                tc_report(!e && !st && memcmp(y, y1, yb) == 0, "%s: same bits as f16mma on the original layout", w2);
            }
        }
        /* x 4 bytes past a 16-byte boundary: the kernel stages it from single floats */
        dev_poison(dy, yb);
        int e = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx + 1, n_tok, dy, 0, 0, 0, -1, cs);
        tnd_status st = B->iface->stream_sync(B, S);
        snprintf(what + strlen(what), sizeof what - strlen(what), " x misaligned");
        if (e || st) tc_report(false, "%s: launch %s", what, e ? tnd_cu_error_string(e) : tnd_last_error());
        else {
            dev_download(y, dy, yb);
            compare(what, y, ref1, sc1, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * xmax1);
        }
        /* refusals: more than 8 warps per block, depth past the ring's maximum, an unknown prefetch */
        e = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx, n_tok, dy, 4, 4, 0, -1, cs);
        int e2 = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 5, -1, cs);
        int e3 = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, 3, cs);
        tc_report(e == 1 && e2 == 1 && e3 == 1, "%s: refuses 16 warps per block (%d), depth 5 (%d), prefetch 3 (%d)",
               what, e, e2, e3);
        dev_free(dy);
        free(y);
        free(y1);
    }
out:
    dev_free(dW0);
    dev_free(dW);
    dev_free(dx);
    free(W);
    free(x);
    free(ref);
    free(sc);
    free(ref1);
    free(sc1);
}

/* One launch shape of an int8 tiled kernel (i8b: the even share; c: its
 * arguments after y) twice into a poisoned y: against the reference with
 * test_matvec_mma's int8 tolerance, and the same bits both times. */
static void q4kt_i8_twice(const char *w2, bool i8b, const int *c, void *dW, int64_t n_in, int64_t n_out,
                          const float *dx, int n_tok, float *dy, float *y, float *y1, const double *ref,
                          const double *sc) {
    const size_t yb = (size_t)(n_out * n_tok) * 4;
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    bool same = true;
    for (int rep = 0; rep < 2; rep++) {
        dev_poison(dy, yb);
        int e = i8b ? tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, c[0], c[1], c[2], c[3], c[4], cs)
                    : tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, c[0], c[1], c[2], c[3], cs);
        tnd_status st = B->iface->stream_sync(B, S);
        if (e || st) {
            tc_report(false, "%s: launch %s / %s", w2, e ? tnd_cu_error_string(e) : "ok", st ? tnd_last_error() : "ok");
            return;
        }
        dev_download(rep ? y1 : y, dy, yb);
        if (rep) same = memcmp(y, y1, yb) == 0;
    }
    compare(w2, y, ref, sc, n_out * n_tok, 2e-4, 1e-6);
    tc_report(same, "%s: the same bits twice", w2);
}

/* tnd_cu_matvec_q4kt_i8 on a re-laid copy over launch shapes (tiles per
 * block x warps per tile x depth; 0: defaults) against the reference with
 * test_matvec_mma's int8 tolerance (x on a 16-bit grid, exact integer sums,
 * f32 after: 2e-4 of sum|w x|); x's scale differs by up to 2^8 between
 * super-blocks and tokens, one super-block is all zeros and one value per
 * token an outlier, so a step (delta) or code sum taken from the wrong
 * super-block or token shows; the same bits for the same launch twice;
 * the all-default tnd_cu_matvec_q4kt call is this kernel when it is the
 * default (same bits); x 4 bytes off alignment; refusals. */
static void test_matvec_q4kt_i8(int64_t n_in, int64_t n_out, int n_tok) {
    const tnd_type t = TND_TYPE_Q4_K;
    size_t wb;
    void *W = make_weights(t, n_in, n_out, &wb);
    float *x = (float *)tc_xmalloc((size_t)(n_in * n_tok + 1) * 4);
    tc_fill_unif(x, (size_t)(n_in * n_tok + 1), -1, 1);
    for (int64_t i = 0; i < n_in * n_tok; i++) {
        const int64_t k = i / n_in, sb = (i % n_in) / 256;
        x[i] = ldexpf(x[i], (int)((sb * 7 + k * 3) % 9) - 4);
        if (k == 0 && sb == 1) x[i] = 0.0f;
        if (i % n_in == 5) x[i] = ldexpf(x[i] < 0 ? -8.0f : 8.0f, (int)((k * 3) % 9) - 4); /* the max of super-block 0 */
    }
    const size_t nr = (size_t)(n_out * n_tok);
    double *ref = (double *)tc_xmalloc(nr * 8), *sc = (double *)tc_xmalloc(nr * 8);
    double *ref1 = (double *)tc_xmalloc(nr * 8), *sc1 = (double *)tc_xmalloc(nr * 8);
    double xmax, xmax1;
    ref_matmul(t, W, n_in, n_out, x, n_tok, ref, sc, &xmax);
    ref_matmul(t, W, n_in, n_out, x + 1, n_tok, ref1, sc1, &xmax1);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    void *dW = dev_upload(W, wb);
    float *dx = (float *)dev_upload(x, (size_t)(n_in * n_tok + 1) * 4);
    const size_t yb = nr * 4;
    float *dy = (float *)dev_alloc(yb), *y = (float *)tc_xmalloc(yb), *y1 = (float *)tc_xmalloc(yb);
    char what[200];
    snprintf(what, sizeof what, "q4kt int8 n_in=%lld n_out=%lld n_tok=%d", (long long)n_in, (long long)n_out, n_tok);
    if (!tnd_cu_matvec_q4kt_i8_supported(n_in, n_out, n_tok)) {
        tc_report(false, "%s: not supported", what);
        goto out;
    }
    {
        int e = tnd_cu_q4kt_repack(dW, n_in, n_out, cs);
        tnd_status st = B->iface->stream_sync(B, S);
        if (e || st) {
            tc_report(false, "%s: repack %s", what, e ? tnd_cu_error_string(e) : tnd_last_error());
            goto out;
        }
    }
    {
        /* tiles per block, warps per tile, depth, stages (0: the register ring; -1: default) */
        static const int shapes[][4] = {{0, 0, 0, -1}, {1, 1, 1, 0}, {1, 3, 2, 0}, {2, 2, 2, 0}, {4, 1, 1, 0},
                                        {1, 8, 2, 0},  {8, 2, 2, 0}, {16, 1, 1, 0}, {1, 16, 1, 0}, {2, 4, 0, 2},
                                        {4, 2, 0, 4},  {8, 1, 0, 6}, {1, 8, 0, 8}, {8, 2, 0, 4},  {0, 0, 0, 6},
                                        {3, 8, 0, 2},  {0, 0, 2, 0}, {0, 0, 0, 8}, {3, 6, 0, -1}};
        for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) {
            const int *c = shapes[i];
            char w2[260];
            snprintf(w2, sizeof w2, "%s tiles/block=%d warps/tile=%d depth=%d stages=%d", what, c[0], c[1], c[2], c[3]);
            q4kt_i8_twice(w2, false, c, dW, n_in, n_out, dx, n_tok, dy, y, y1, ref, sc);
        }
        /* the even share (tnd_cu_matvec_q4kt_i8b): blocks (clamped to a
         * half-tile each), warps, depth, stages (0: the register ring),
         * prefetch (chunks per warp asked of L2 before the wait) */
        static const int bshapes[][5] = {{0, 0, 0, -1, -1}, {1, 1, 1, 0, 0},   {3, 5, 2, 0, 16},  {7, 16, 1, 0, 2},
                                         {2, 3, 0, 2, 4},   {5, 24, 0, 3, 1},  {9, 7, 0, 4, 0},   {0, 16, 2, 0, 4},
                                         {1000, 1, 1, 0, 3}, {4, 13, 0, 2, 0}, {0, 0, 0, 0, -1},  {0, 0, 0, 4, 8},
                                         {6, 2, 2, 0, 5},   {11, 24, 0, 2, 2}, {0, 9, 1, 0, 0},   {0, 20, 0, 3, 4},
                                         {0, 6, 2, 0, 16}};
        for (size_t i = 0; i < TND_ARRAY_LEN(bshapes); i++) {
            const int *c = bshapes[i];
            /* a given grid of a few blocks on a tall matrix: more rows a block than
             * its partial sums fit in shared memory (801, checked below) */
            if (c[0] > 0 && n_out / 8 / c[0] > 64) continue;
            char w2[320];
            snprintf(w2, sizeof w2, "%s even share: blocks=%d warps=%d depth=%d stages=%d prefetch=%d", what, c[0],
                     c[1], c[2], c[3], c[4]);
            q4kt_i8_twice(w2, true, c, dW, n_in, n_out, dx, n_tok, dy, y, y1, ref, sc);
        }
        {
            /* the bits depend on the grid and the warps only: the same from
             * either feed, at either depth, with or without the L2 requests */
            static const int feeds[][5] = {{0, 16, 1, 0, 0}, {0, 16, 2, 0, 2}, {0, 16, 0, 2, -1}, {0, 16, 0, 3, 4}};
            bool same = true, ran = true;
            for (size_t i = 0; i < TND_ARRAY_LEN(feeds) && ran; i++) {
                const int *c = feeds[i];
                dev_poison(dy, yb);
                ran = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, c[0], c[1], c[2], c[3], c[4], cs) == 0 &&
                      B->iface->stream_sync(B, S) == TND_OK;
                dev_download(i ? y1 : y, dy, yb);
                if (i) same = same && memcmp(y, y1, yb) == 0;
            }
            tc_report(ran && same, "%s even share: the same bits from the register ring (depth 1, 2) and the shared "
                      "ring (2, 3 stages), with and without L2 requests", what);
        }
        {
            dev_poison(dy, yb);
            int e = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx + 1, n_tok, dy, 0, 0, 0, -1, -1, cs);
            tnd_status st = B->iface->stream_sync(B, S);
            if (e || st) tc_report(false, "%s even share, x misaligned: launch %s", what, e ? tnd_cu_error_string(e) : tnd_last_error());
            else {
                dev_download(y, dy, yb);
                compare("even share, x misaligned", y, ref1, sc1, n_out * n_tok, 2e-4, 1e-6);
            }
            const int r1 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, 3, dy, 0, 0, 0, -1, -1, cs);
            const int r2 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 0, 17, 1, 0, -1, cs);
            const int r3 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, 5, -1, cs);
            const int r4 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 3, 0, -1, cs);
            const int r5 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, -1, 0, 0, 0, -1, cs);
            const int r6 = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, 0, 17, cs);
            if (n_out >= 32768) /* one block: 2048+ pairs x 128 bytes of sums, more than a block's shared memory */
                tc_report(tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 1, 1, 1, 0, 0, cs) == 801,
                          "%s even share: one block for all rows refuses (801)", what);
            tc_report(r1 == 801 && r2 == 1 && r3 == 1 && r4 == 1 && r5 == 1 && r6 == 1,
                      "%s even share: refuses 3 tokens (%d), 17 warps in registers (%d), 5 stages (%d), depth 3 (%d), "
                      "-1 blocks (%d), prefetch 17 (%d)",
                      what, r1, r2, r3, r4, r5, r6);
        }
        /* the default call in each mode (tnd_cu_matvec_q4kt_mode): the f16
         * kernel's tolerance, the int8 tiles' bits, the even share's (its
         * defaults), and AUTO's pick by size */
        dev_poison(dy, yb);
        int e = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, -1, cs);
        tnd_status st = B->iface->stream_sync(B, S);
        dev_download(y, dy, yb);
        float *yb8 = (float *)tc_xmalloc(yb);
        dev_poison(dy, yb);
        const int eb = tnd_cu_matvec_q4kt_i8b(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, -1, -1, cs);
        const tnd_status sb = B->iface->stream_sync(B, S);
        dev_download(yb8, dy, yb);
        const int was = tnd_cu_matvec_q4kt_mode();
        const bool big = (double)n_out * (double)(n_in / 256 * 144) >= 20.0 * 1048576;
        for (int mode = TND_CU_Q4KT_F16; mode <= TND_CU_Q4KT_AUTO; mode++) {
            tnd_cu_matvec_q4kt_set_mode(mode);
            dev_poison(dy, yb);
            int e2 = tnd_cu_matvec_q4kt(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, -1, cs);
            tnd_status st2 = B->iface->stream_sync(B, S);
            dev_download(y1, dy, yb);
            /* where the even share refuses (801), I8B and AUTO fall back to the tiles */
            const bool ok = !e && !st && (eb == 801 || (!eb && !sb)) && !e2 && !st2;
            if (mode == TND_CU_Q4KT_F16) {
                tc_report(ok && memcmp(y, y1, yb) != 0, "%s: tnd_cu_matvec_q4kt's default in mode f16 is the f16 kernel",
                          what);
                compare(what, y1, ref, sc, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
            } else {
                const bool even = !eb && (mode == TND_CU_Q4KT_I8B || (mode == TND_CU_Q4KT_AUTO && big));
                tc_report(ok && memcmp(even ? yb8 : y, y1, yb) == 0,
                          "%s: tnd_cu_matvec_q4kt's default in mode %d is the %s kernel", what, mode,
                          even ? "even-share" : "int8 tiles'");
            }
        }
        tnd_cu_matvec_q4kt_set_mode(was);
        free(yb8);
        /* x 4 bytes past a 16-byte boundary: staged from single floats */
        dev_poison(dy, yb);
        e = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx + 1, n_tok, dy, 0, 0, 0, -1, cs);
        st = B->iface->stream_sync(B, S);
        char w3[260];
        snprintf(w3, sizeof w3, "%s x misaligned", what);
        if (e || st) tc_report(false, "%s: launch %s", w3, e ? tnd_cu_error_string(e) : tnd_last_error());
        else {
            dev_download(y, dy, yb);
            compare(w3, y, ref1, sc1, n_out * n_tok, 2e-4, 1e-6);
        }
        /* refusals: 3 tokens, depth 3, 32 warps per block, 3 stages, 24 warps without the ring */
        e = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, 3, dy, 0, 0, 0, -1, cs);
        int e2 = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 3, 0, cs);
        int e3 = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, 4, 8, 0, -1, cs);
        int e4 = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, 0, 0, 0, 3, cs);
        int e5 = tnd_cu_matvec_q4kt_i8(dW, n_in, n_out, dx, n_tok, dy, 8, 3, 1, 0, cs);
        tc_report(e == 801 && e2 == 1 && e3 == 1 && e4 == 1 && e5 == 1,
                  "%s: refuses 3 tokens (%d), depth 3 (%d), 32 warps per block (%d), 3 stages (%d), 24 warps in "
                  "registers (%d)",
                  what, e, e2, e3, e4, e5);
    }
out:
    dev_free(dW);
    dev_free(dx);
    dev_free(dy);
    free(W);
    free(x);
    free(y);
    free(y1);
    free(ref);
    free(sc);
    free(ref1);
    free(sc1);
}

/* Programmatic dependent launch: a chain of tiled matvecs queued back to
 * back, each reading the vector the previous one wrote and writing the one
 * it read (both hazards a matvec that starts early could break), with PDL
 * on and no waits between launches, gives the bits of the same chain with
 * PDL off and a stream sync after every launch. Also right after an
 * in-place repack (the weights' first loads precede the kernel's wait).
 * i8: 0 the f16 kernel, 1 the int8 one from its register ring, 2 the int8
 * one from its shared ring (4 stages); 3, 4: the even-share int8 kernel
 * (tiles_per_block: blocks, ksplit: warps; 4 chunks per warp asked of L2
 * before the wait) from registers, from a ring of 3 stages. */
static void test_q4kt_pdl_chain(int64_t n, int tiles_per_block, int ksplit, int i8) {
    const int steps = 8;
    if (!tnd_cu_q4kt_supported(n, n)) {
        tc_report(false, "q4kt %lldx%lld: the tile layout refuses the chain's shape", (long long)n, (long long)n);
        return;
    }
    /* weights quantized from zero-mean floats of rms 1/sqrt(n): the
     * vector keeps its size along the chain (no f16 overflow, no zeros) */
    const size_t wb = tnd_row_size(TND_TYPE_Q4_K, n) * (size_t)n;
    void *W = tc_xmalloc(wb);
    {
        float *wf = (float *)tc_xmalloc((size_t)(n * n) * 4);
        tc_fill_unif(wf, (size_t)(n * n), -sqrtf(3.0f / (float)n), sqrtf(3.0f / (float)n));
        tnd_type_traits_get(TND_TYPE_Q4_K)->from_float(wf, W, n * n);
        free(wf);
    }
    float *x = (float *)tc_xmalloc((size_t)n * 4), *want = (float *)tc_xmalloc((size_t)n * 4),
          *got = (float *)tc_xmalloc((size_t)n * 4);
    tc_fill_unif(x, (size_t)n, -1, 1);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    const bool was = tnd_cu_matvec_q4kt_pdl();
    float *d[2] = {(float *)dev_alloc((size_t)n * 4), (float *)dev_alloc((size_t)n * 4)};
    int fails = 0;
    for (int pdl = 0; pdl < 2; pdl++) {
        void *dW = dev_upload(W, wb);
        CHECK_ST(B->iface->copy_h2d(B, d[0], x, (size_t)n * 4, S));
        dev_poison(d[1], (size_t)n * 4);
        tnd_cu_matvec_q4kt_set_pdl(pdl != 0);
        int e = tnd_cu_q4kt_repack(dW, n, n, cs); /* no sync: the first matvec follows the repack */
        for (int i = 0; i < steps && !e; i++) {
            /* depth 1, no prefetch, stages fixed: the kernel asked for, whatever the environment says */
            e = i8 >= 3 ? tnd_cu_matvec_q4kt_i8b(dW, n, n, d[i & 1], 1, d[(i + 1) & 1], tiles_per_block, ksplit, 1,
                                                 i8 == 4 ? 3 : 0, 4, cs)
                : i8    ? tnd_cu_matvec_q4kt_i8(dW, n, n, d[i & 1], 1, d[(i + 1) & 1], tiles_per_block, ksplit, 1,
                                                i8 == 2 ? 4 : 0, cs)
                        : tnd_cu_matvec_q4kt(dW, n, n, d[i & 1], 1, d[(i + 1) & 1], tiles_per_block, ksplit, 1, 0, cs);
            if (!pdl && !e) CHECK_ST(B->iface->stream_sync(B, S));
        }
        CHECK_ST(B->iface->stream_sync(B, S));
        if (e) fails++;
        dev_download(pdl ? got : want, d[steps & 1], (size_t)n * 4);
        dev_free(dW);
    }
    tnd_cu_matvec_q4kt_set_pdl(was);
    bool finite = true;
    for (int64_t i = 0; i < n; i++) finite = finite && isfinite(want[i]) && want[i] != 0.0f;
    tc_report(!fails && finite && memcmp(want, got, (size_t)n * 4) == 0,
              "q4kt%s %lldx%lld, shape %d x %d (%s): %d chained matvecs with PDL == synchronized without "
              "(PDL by default: %s)",
              i8 == 4 ? " int8 even-share ring" : i8 == 3 ? " int8 even-share" : i8 == 2 ? " int8 ring" : i8 ? " int8" : "",
              (long long)n, (long long)n, tiles_per_block, ksplit, i8 >= 3 ? "blocks x warps" : "tiles x warps a block",
              steps,
              tnd_cu_matvec_q4kt_pdl() ? "on" : "off");
    dev_free(d[0]);
    dev_free(d[1]);
    free(W);
    free(x);
    free(want);
    free(got);
}

/* A MATMUL over W (uploaded at dW) through op_run vs the reference, n_tok
 * tokens; tol: the f16 path's (decode f16mma / tiled, prefill cuBLAS). */
static bool q4kt_matmul_op(const char *what, void *dW, const void *W, int64_t n_in, int64_t n_out, int64_t n_tok,
                           float *out_y) {
    float *x = (float *)tc_xmalloc((size_t)(n_in * n_tok) * 4);
    tc_fill_unif(x, (size_t)(n_in * n_tok), -1, 1);
    double *ref = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8), *sc = (double *)tc_xmalloc((size_t)(n_out * n_tok) * 8);
    double xmax;
    ref_matmul(TND_TYPE_Q4_K, W, n_in, n_out, x, n_tok, ref, sc, &xmax);
    void *dx = dev_upload(x, (size_t)(n_in * n_tok) * 4);
    const size_t yb = (size_t)(n_out * n_tok) * 4;
    float *dy = (float *)dev_alloc(yb), *y = (float *)tc_xmalloc(yb);
    dev_poison(dy, yb);
    tnd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TND_OP_MATMUL;
    op.in[0] = tens(dW, TND_TYPE_Q4_K, n_in, n_out, 1);
    op.in[1] = tens(dx, TND_TYPE_F32, n_in, n_tok, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, n_tok, 1);
    bool ok = run_op(&op, what);
    if (ok) {
        dev_download(y, dy, yb);
        ok = compare(what, y, ref, sc, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
        if (out_y) memcpy(out_y, y, yb);
    }
    dev_free(dx);
    dev_free(dy);
    free(x);
    free(y);
    free(ref);
    free(sc);
    return ok;
}

/* weight_prepare as the executor uses it (layout.c): upload, prepare, then
 * MATMUL ops through op_run for decode (n_tok 1..8: the tiled kernel,
 * whatever TND_CUDA_MV says) and prefill (n_tok > 8: the tiled dequant,
 * several row chunks when n_out > 4096); a second prepare is a no-op;
 * GET_ROWS, MATMUL_ID and a MATMUL over part of the tensor are refused
 * with a message naming the re-laid weight; once the buffer is freed, a
 * new buffer at the same place reads as uploaded. A shape the layout
 * cannot take (n_out % 16 != 0) stays as uploaded. */
static void test_weight_prepare(int64_t n_in, int64_t n_out) {
    const tnd_type t = TND_TYPE_Q4_K;
    char what[200];
    size_t wb;
    void *W = make_weights(t, n_in, n_out, &wb);
    void *dW = dev_upload(W, wb);
    tnd_tensor wt = tens(dW, t, n_in, n_out, 1);
    if (!B->iface->weight_prepare) {
        tc_report(false, "cuda backend has no weight_prepare");
        return;
    }
    tnd_status st = B->iface->weight_prepare(B, &wt, S);
    if (!st) st = B->iface->stream_sync(B, S);
    const bool tiles = q4k_tile_ok(n_in, n_out) && tnd_cu_q4kt_supported(n_in, n_out) &&
                       !(getenv("TND_CUDA_REPACK") && strcmp(getenv("TND_CUDA_REPACK"), "0") == 0);
    {
        uint8_t *got = (uint8_t *)tc_xmalloc(wb);
        dev_download(got, dW, wb);
        void *want = tiles ? host_q4kt(W, n_in, n_out) : NULL;
        tc_report(!st && memcmp(got, tiles ? want : W, wb) == 0, "weight_prepare Q4_K %lldx%lld: %s (%s)",
               (long long)n_out, (long long)n_in, tiles ? "re-laid as the host's permutation" : "left as uploaded",
               st ? tnd_last_error() : "ok");
        free(got);
        free(want);
    }
    static const int64_t toks[] = {1, 2, 5, 8, 9, 64};
    float *y1 = (float *)tc_xmalloc((size_t)n_out * 4), *y2 = (float *)tc_xmalloc((size_t)n_out * 4);
    for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++) {
        snprintf(what, sizeof what, "matmul prepared Q4_K n_in=%lld n_out=%lld n_tok=%lld (%s)", (long long)n_in,
                 (long long)n_out, (long long)toks[k], toks[k] > 8 ? "prefill" : "decode");
        q4kt_matmul_op(what, dW, W, n_in, n_out, toks[k], NULL);
    }
    /* a second prepare changes nothing: the same bits for the same x */
    uint64_t keep = tc_rng;
    snprintf(what, sizeof what, "matmul prepared Q4_K n_in=%lld n_out=%lld n_tok=1 (before re-prepare)",
             (long long)n_in, (long long)n_out);
    q4kt_matmul_op(what, dW, W, n_in, n_out, 1, y1);
    st = B->iface->weight_prepare(B, &wt, S);
    tc_rng = keep;
    snprintf(what, sizeof what, "matmul prepared Q4_K n_in=%lld n_out=%lld n_tok=1 (after re-prepare)",
             (long long)n_in, (long long)n_out);
    bool ok = q4kt_matmul_op(what, dW, W, n_in, n_out, 1, y2);
    tc_report(!st && ok && memcmp(y1, y2, (size_t)n_out * 4) == 0, "weight_prepare twice is a no-op (%s)",
           st ? tnd_last_error() : "ok");
    if (tiles) {
        /* GET_ROWS of the table: refused, not read wrongly */
        int32_t ids[3] = {0, (int32_t)(n_out / 2), (int32_t)(n_out - 1)};
        void *dids = dev_upload(ids, sizeof ids);
        float *dout = (float *)dev_alloc((size_t)n_in * 3 * 4);
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TND_OP_GET_ROWS;
        op.in[0] = wt;
        op.in[1] = tens(dids, TND_TYPE_I32, 3, 1, 1);
        op.out[0] = tens(dout, TND_TYPE_F32, n_in, 3, 1);
        st = B->iface->op_run(B, &op, S);
        tc_report(st == TND_ERR_UNSUPPORTED && strstr(tnd_last_error(), "re-laid") != NULL,
               "get_rows over a re-laid Q4_K weight is refused: %s", st ? tnd_last_error() : "(ran)");
        /* MATMUL_ID viewing it as 2 experts of n_out/2 rows */
        if (n_out % 2 == 0) {
            float *dx = (float *)dev_alloc((size_t)n_in * 4), *dy = (float *)dev_alloc((size_t)n_out * 4);
            int32_t id = 1;
            void *did = dev_upload(&id, 4);
            memset(&op, 0, sizeof op);
            op.kind = TND_OP_MATMUL_ID;
            op.in[0] = tens(dW, t, n_in, n_out / 2, 2);
            op.in[1] = tens(dx, TND_TYPE_F32, n_in, 1, 1);
            op.in[2] = tens(did, TND_TYPE_I32, 1, 1, 1);
            op.out[0] = tens(dy, TND_TYPE_F32, n_out / 2, 1, 1);
            st = B->iface->op_run(B, &op, S);
            tc_report(st == TND_ERR_UNSUPPORTED && strstr(tnd_last_error(), "re-laid") != NULL,
                   "matmul_id over a re-laid Q4_K weight is refused: %s", st ? tnd_last_error() : "(ran)");
            /* MATMUL over its second half only */
            memset(&op, 0, sizeof op);
            op.kind = TND_OP_MATMUL;
            op.in[0] = tens((uint8_t *)dW + wb / 2, t, n_in, n_out / 2, 1);
            op.in[1] = tens(dx, TND_TYPE_F32, n_in, 1, 1);
            op.out[0] = tens(dy, TND_TYPE_F32, n_out / 2, 1, 1);
            st = B->iface->op_run(B, &op, S);
            tc_report(st == TND_ERR_UNSUPPORTED, "matmul over half a re-laid Q4_K weight is refused: %s",
                   st ? tnd_last_error() : "(ran)");
            dev_free(dx);
            dev_free(dy);
            dev_free(did);
        }
        B->iface->stream_sync(B, S);
        dev_free(dids);
        dev_free(dout);
    }
    /* freed: the backend forgets the range; a fresh upload (the allocator
     * likely hands out the same address) reads as uploaded */
    dev_free(dW);
    void *dW2 = dev_upload(W, wb);
    snprintf(what, sizeof what, "matmul Q4_K n_in=%lld n_out=%lld n_tok=1 after freeing a re-laid buffer%s",
             (long long)n_in, (long long)n_out, dW2 == dW ? " (same address)" : "");
    q4kt_matmul_op(what, dW2, W, n_in, n_out, 1, NULL);
    dev_free(dW2);
    free(W);
    free(y1);
    free(y2);
}

/* Grids of the pair test: blocks (0: the default), warps, depth, prefetch */
static const int PAIR_GRIDS[][4] = {{0, 0, 0, -1}, {1, 1, 1, 0}, {3, 5, 2, 16}, {7, 16, 1, 2},
                                    {0, 16, 2, 4}, {5, 9, 1, 0},  {13, 3, 2, 1}};

/* tnd_cu_matvec_q4kt_pair (two re-laid matrices over one x in one launch):
 * y1 and y2 against the reference with the int8 tolerance, and bit for bit
 * the even share's rows of the two matrices stacked in one buffer (same
 * grid and warps): from separate buffers, and from the stacked one (the
 * second matrix right after the first). With blocks = 1 .. 12 on a short
 * stack, odd blocks pair the first matrix's last half-tile with the
 * second's first. x scaled per super-block as test_matvec_q4kt_i8's. Then
 * the backend's MATMUL_PAIR op over weights as uploaded (two matvecs), and
 * the refusals. */
static void test_matvec_q4kt_pair(int64_t n_in, int64_t n1, int64_t n2, int n_tok) {
    const tnd_type t = TND_TYPE_Q4_K;
    const int64_t n = n1 + n2;
    size_t wb1, wb2;
    void *W1 = make_weights(t, n_in, n1, &wb1), *W2 = make_weights(t, n_in, n2, &wb2);
    uint8_t *Wc = (uint8_t *)tc_xmalloc(wb1 + wb2);
    memcpy(Wc, W1, wb1);
    memcpy(Wc + wb1, W2, wb2);
    const size_t nx = (size_t)(n_in * n_tok);
    float *x = (float *)tc_xmalloc(nx * 4);
    tc_fill_unif(x, nx, -1, 1);
    for (size_t i = 0; i < nx; i++) x[i] = ldexpf(x[i], (int)(((i % n_in) / 256 * 7 + i / n_in * 3) % 9) - 4);
    double *ref1 = (double *)tc_xmalloc((size_t)(n1 * n_tok) * 8), *sc1 = (double *)tc_xmalloc((size_t)(n1 * n_tok) * 8);
    double *ref2 = (double *)tc_xmalloc((size_t)(n2 * n_tok) * 8), *sc2 = (double *)tc_xmalloc((size_t)(n2 * n_tok) * 8);
    double xmax;
    ref_matmul(t, W1, n_in, n1, x, n_tok, ref1, sc1, &xmax);
    ref_matmul(t, W2, n_in, n2, x, n_tok, ref2, sc2, &xmax);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    uint8_t *dW1 = (uint8_t *)dev_upload(W1, wb1), *dW2 = (uint8_t *)dev_upload(W2, wb2);
    uint8_t *dWc = (uint8_t *)dev_upload(Wc, wb1 + wb2);
    float *dx = (float *)dev_upload(x, nx * 4);
    const size_t yb1 = (size_t)(n1 * n_tok) * 4, yb2 = (size_t)(n2 * n_tok) * 4;
    float *dy1 = (float *)dev_alloc(yb1), *dy2 = (float *)dev_alloc(yb2), *dyc = (float *)dev_alloc(yb1 + yb2);
    float *y1 = (float *)tc_xmalloc(yb1), *y2 = (float *)tc_xmalloc(yb2), *yc = (float *)tc_xmalloc(yb1 + yb2);
    char what[160];
    snprintf(what, sizeof what, "q4kt pair n_in=%lld n_out=%lld+%lld n_tok=%d", (long long)n_in, (long long)n1,
             (long long)n2, n_tok);
    {
        /* the backend's MATMUL_PAIR over weights as uploaded: the two matvecs */
        tnd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TND_OP_MATMUL_PAIR;
        op.in[0] = tens(dW1, t, n_in, n1, 1);
        op.in[1] = tens(dx, TND_TYPE_F32, n_in, n_tok, 1);
        op.in[2] = tens(dW2, t, n_in, n2, 1);
        op.out[0] = tens(dy1, TND_TYPE_F32, n1, n_tok, 1);
        op.out[1] = tens(dy2, TND_TYPE_F32, n2, n_tok, 1);
        const bool sup = B->iface->op_supported(B, &op) == TND_OK;
        const int mode = tnd_cu_matvec_q4kt_mode();
        const bool want = (mode == TND_CU_Q4KT_AUTO || mode == TND_CU_Q4KT_I8B) &&
                          !(getenv("TND_CUDA_PAIR") && strcmp(getenv("TND_CUDA_PAIR"), "0") == 0);
        tc_report(sup == want, "%s: the backend offers the pair op exactly in the even share's modes (%d)", what, sup);
        const int was = mode;
        tnd_cu_matvec_q4kt_set_mode(TND_CU_Q4KT_I8);
        const bool sup_i8 = B->iface->op_supported(B, &op) == TND_OK;
        tnd_cu_matvec_q4kt_set_mode(was);
        tc_report(!sup_i8, "%s: and not while the int8 tiles are forced (%d)", what, sup_i8);
        dev_poison(dy1, yb1);
        dev_poison(dy2, yb2);
        char w2[200];
        snprintf(w2, sizeof w2, "%s: MATMUL_PAIR op, weights as uploaded", what);
        if (sup && run_op(&op, w2)) {
            dev_download(y1, dy1, yb1);
            dev_download(y2, dy2, yb2);
            compare(w2, y1, ref1, sc1, n1 * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
            compare(w2, y2, ref2, sc2, n2 * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
        }
        op.in[2].type = TND_TYPE_Q6_K;
        const bool q6 = B->iface->op_supported(B, &op) == TND_OK;
        op.in[2].type = t;
        op.in[1].ne[1] = op.out[0].ne[1] = op.out[1].ne[1] = 3;
        const bool three = B->iface->op_supported(B, &op) == TND_OK;
        tnd_clear_error();
        tc_report(!q6 && !three, "%s: the backend refuses a pair with a Q6_K matrix (%d) or of 3 tokens (%d)", what, q6,
                  three);
    }
    int e = tnd_cu_q4kt_repack(dW1, n_in, n1, cs);
    if (!e) e = tnd_cu_q4kt_repack(dW2, n_in, n2, cs);
    if (!e) e = tnd_cu_q4kt_repack(dWc, n_in, n, cs);
    if (e || B->iface->stream_sync(B, S)) {
        tc_report(false, "%s: repack %s", what, e ? tnd_cu_error_string(e) : tnd_last_error());
        goto out;
    }
    for (int stacked = 0; stacked < 2; stacked++) {
        const uint8_t *a = stacked ? dWc : dW1, *b = stacked ? dWc + wb1 : dW2;
        const int n_grids = (int)TND_ARRAY_LEN(PAIR_GRIDS) + (n <= 256 ? 12 : 0);
        for (int gi = 0; gi < n_grids; gi++) {
            const int c0[4] = {gi - (int)TND_ARRAY_LEN(PAIR_GRIDS) + 1, 4, 1, 0};
            const int *c = gi < (int)TND_ARRAY_LEN(PAIR_GRIDS) ? PAIR_GRIDS[gi] : c0;
            /* a given grid of a few blocks on a tall stack: more rows a block than its
             * partial sums fit in shared memory (both refuse, as test_matvec_q4kt_i8's) */
            if (c[0] > 0 && n / 8 / c[0] > 64) continue;
            char w2[260];
            snprintf(w2, sizeof w2, "%s%s blocks=%d warps=%d depth=%d prefetch=%d", what, stacked ? " stacked" : "",
                     c[0], c[1], c[2], c[3]);
            dev_poison(dy1, yb1);
            dev_poison(dy2, yb2);
            dev_poison(dyc, yb1 + yb2);
            int ep = tnd_cu_matvec_q4kt_pair(a, b, n_in, n1, n2, dx, n_tok, dy1, dy2, c[0], c[1], c[2], c[3], cs);
            int eb = tnd_cu_matvec_q4kt_i8b(dWc, n_in, n, dx, n_tok, dyc, c[0], c[1], c[2], 0, c[3], cs);
            tnd_status st = B->iface->stream_sync(B, S);
            if (ep || eb || st) {
                tc_report(false, "%s: launch %s / %s / %s", w2, ep ? tnd_cu_error_string(ep) : "ok",
                          eb ? tnd_cu_error_string(eb) : "ok", st ? tnd_last_error() : "ok");
                continue;
            }
            dev_download(y1, dy1, yb1);
            dev_download(y2, dy2, yb2);
            dev_download(yc, dyc, yb1 + yb2);
            compare(w2, y1, ref1, sc1, n1 * n_tok, 2e-4, 1e-6);
            compare(w2, y2, ref2, sc2, n2 * n_tok, 2e-4, 1e-6);
            bool same = true;
            for (int k = 0; k < n_tok; k++)
                same = same && memcmp(y1 + k * n1, yc + k * n, (size_t)n1 * 4) == 0 &&
                       memcmp(y2 + k * n2, yc + k * n + n1, (size_t)n2 * 4) == 0;
            tc_report(same, "%s: the bits of the even share over the stacked matrices", w2);
        }
    }
    {
        const int r1 = tnd_cu_matvec_q4kt_pair(dW1, dW2, n_in, n1, n2, dx, 3, dy1, dy2, 0, 0, 0, -1, cs);
        const int r2 = tnd_cu_matvec_q4kt_pair(dW1, dW2 + 8, n_in, n1, n2, dx, n_tok, dy1, dy2, 0, 0, 0, -1, cs);
        const int r3 = tnd_cu_matvec_q4kt_pair(dW1, dW2, n_in, n1, n2, dx, n_tok, dy1, NULL, 0, 0, 0, -1, cs);
        const int r4 = tnd_cu_matvec_q4kt_pair(dW1, dW2, n_in, n1, n2 + 8, dx, n_tok, dy1, dy2, 0, 0, 0, -1, cs);
        const int r5 = tnd_cu_matvec_q4kt_pair(dW1, dW2, n_in, n1, n2, dx, n_tok, dy1, dy2, 0, 17, 0, -1, cs);
        tc_report(r1 == 801 && r2 == 716 && r3 == 1 && r4 == 801 && r5 == 1, /* 716: misaligned address */
                  "%s: refuses 3 tokens (%d), W2 off 16-byte alignment (%d), no y2 (%d), n_out2 not a multiple of "
                  "16 (%d), 17 warps (%d)",
                  what, r1, r2, r3, r4, r5);
    }
out:
    dev_free(dW1);
    dev_free(dW2);
    dev_free(dWc);
    dev_free(dx);
    dev_free(dy1);
    dev_free(dy2);
    dev_free(dyc);
    free(W1);
    free(W2);
    free(Wc);
    free(x);
    free(ref1);
    free(sc1);
    free(ref2);
    free(sc2);
    free(y1);
    free(y2);
    free(yc);
}

/* Every kernel over the Q4_K tile layout: the f16 and int8 tiles, their
 * feeds and rings, PDL chains, the pair. */
static void test_q4kt_all(void) {
    /* the Q4_K tile layout: n_out a multiple of 16 but not of 128 (48,
     * 4112), one super-block, the longest bench row (17408: 1 or 2 tokens
     * per launch, token groups beyond), 1..8 tokens */
    for (int nt = 1; nt <= 8; nt++) {
        test_matvec_q4kt(256, 48, nt);
        test_matvec_q4kt(256 * 20, 144, nt);
    }
    test_matvec_q4kt(256 * 68, 128, 1);
    test_matvec_q4kt(256 * 68, 48, 3);
    test_matvec_q4kt(256 * 68, 16, 8);
    test_matvec_q4kt(256 * 7, 4112, 2);
    test_q4kt_pdl_chain(4096, 0, 0, 0);
    test_q4kt_pdl_chain(8192, 1, 8, 0); /* 512 blocks of 8 warps: more than one wave on the H200 */
    test_q4kt_pdl_chain(4096, 0, 0, 1);
    test_q4kt_pdl_chain(8192, 1, 16, 1);
    int attr = 0, ran = 0;
    if (tnd_cu_arch_probe(&attr, &ran) == 0 && ran >= 900) { /* sm_90 code: the ring */
        test_q4kt_pdl_chain(4096, 0, 0, 2);
        test_q4kt_pdl_chain(8192, 1, 8, 2);
        test_q4kt_pdl_chain(4096, 0, 0, 4);
        test_q4kt_pdl_chain(8192, 300, 5, 4); /* more blocks than SMs */
    }
    test_q4kt_pdl_chain(4096, 0, 0, 3);
    test_q4kt_pdl_chain(8192, 0, 9, 3);
    test_matvec_q4kt_i8(256, 16, 1);
    test_matvec_q4kt_i8(256, 48, 2);
    test_matvec_q4kt_i8(256 * 20, 144, 1);
    test_matvec_q4kt_i8(256 * 20, 144, 2);
    test_matvec_q4kt_i8(256 * 68, 128, 1);
    test_matvec_q4kt_i8(256 * 7, 4112, 2);
    test_matvec_q4kt_i8(256 * 20, 34816, 1); /* 2176 tiles: 16 a block, several waves; 8 stages need fewer */
    test_matvec_q4kt_pair(256, 16, 48, 1); /* 8 half-tiles: grids of 1..12 blocks straddle the seam */
    test_matvec_q4kt_pair(256 * 3, 112, 64, 2);
    test_matvec_q4kt_pair(256 * 20, 5120, 1024, 1); /* q and k of a 14B */
    test_matvec_q4kt_pair(256 * 20, 17408, 17408, 2); /* its gate and up */
}

int main(void) {
    tc_rng = 0x9e3779b97f4a7c15ull;
    const int rc = cuda_test_open("test_cuda_q4kt");
    if (rc) return rc;
    if (!tnd_cu_q4kt_supported(256, 16)) { /* test_cuda_ops checks the refusals */
        printf("test_cuda_q4kt: skipped (the tile layout needs sm_80 code and a device to run it)\n");
        return cuda_test_close(77);
    }
    test_q4kt_all();
    test_weight_prepare(256 * 3, 4112); /* prefill: two row chunks of the tiled dequant */
    test_weight_prepare(256 * 20, 48);
    test_weight_prepare(256 * 68, 32);
    test_weight_prepare(256 * 3, 40);   /* n_out % 16 != 0: stays as uploaded */
    return cuda_test_close(0);
}
#endif
