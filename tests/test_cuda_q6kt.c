/* The Q6_K tile layout's kernels on the GPU (src/cuda/matvec_tile_q6k.cu,
 * matmul.cu; the layout's byte map is checked on the host by
 * test_tile_layout). Skips with 77 without CUDA or a device of sm_80 or
 * newer. Per shape (odd group counts, rows from 256 to 12288 values):
 *   - tnd_cu_q6kt_repack gives the host's permutation, byte for byte;
 *   - tnd_cu_matvec_q6kt at both depths and over launch shapes, 1 to 8
 *     tokens: against the double-precision reference with the f16 path's
 *     tolerance (test_cuda_ops: 2e-3 of sum |w x|), and the same bits as
 *     tnd_cu_matvec_f16mma on the original layout with the same tiles per
 *     block and warps per tile (the same fragments, summed in the same
 *     order);
 *   - x 4 bytes off 16-byte alignment: against the reference;
 *   - tnd_cu_matmul_q6kt (prefill: the tiled dequant, then cuBLAS): the
 *     same bits as tnd_cu_matmul on the original layout;
 *   - refusals: a shape outside the layout, 9 tokens, 16 warps a block,
 *     depth 3, a misaligned W. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "util.h"

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("test_cuda_q6kt: skipped (built without CUDA)\n");
    return 77;
}
#else

#include <cublas_v2.h>

#include "cuda/cuda_ops.h"
#include "cuda/q6k_tile.cuh"
#include "cuda_check.h"

static void *host_q6kt(const void *W, int64_t n_in, int64_t n_out) {
    const size_t rb = tnd_row_size(TND_TYPE_Q6_K, n_in);
    uint8_t *t = (uint8_t *)tc_xmalloc(rb * (size_t)n_out);
    for (int64_t g = 0; g < n_out / 16; g++)
        q6k_tile_pack_group(t + (size_t)g * 16 * rb, (const uint8_t *)W + (size_t)g * 16 * rb, rb);
    return t;
}

static void test_shape(int64_t n_in, int64_t n_out) {
    const tnd_type t = TND_TYPE_Q6_K;
    const int max_tok = 8;
    size_t wb;
    void *W = make_weights(t, n_in, n_out, &wb);
    const size_t nx = (size_t)(n_in * max_tok + 1);
    float *x = (float *)tc_xmalloc(nx * 4);
    tc_fill_unif(x, nx, -1, 1);
    const size_t ny = (size_t)(n_out * max_tok);
    double *ref = (double *)tc_xmalloc(ny * 8), *sc = (double *)tc_xmalloc(ny * 8);
    double *ref1 = (double *)tc_xmalloc(ny * 8), *sc1 = (double *)tc_xmalloc(ny * 8);
    double xmax, xmax1;
    ref_matmul(t, W, n_in, n_out, x, max_tok, ref, sc, &xmax);
    ref_matmul(t, W, n_in, n_out, x + 1, max_tok, ref1, sc1, &xmax1); /* for the misaligned x */
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    void *dW0 = dev_upload(W, wb), *dW = dev_upload(W, wb);
    float *dx = (float *)dev_upload(x, nx * 4);
    float *dy = (float *)dev_alloc(ny * 4), *y = (float *)tc_xmalloc(ny * 4), *y1 = (float *)tc_xmalloc(ny * 4);
    char what[200];
    snprintf(what, sizeof what, "q6kt %lld x %lld", (long long)n_out, (long long)n_in);
    if (!tnd_cu_q6kt_supported(n_in, n_out)) {
        tc_report(false, "%s: tnd_cu_q6kt_supported refuses the shape", what);
        goto out;
    }
    {
        int e = tnd_cu_q6kt_repack(dW, n_in, n_out, cs);
        uint8_t *got = (uint8_t *)tc_xmalloc(wb), *want = (uint8_t *)host_q6kt(W, n_in, n_out);
        if (sync_ok(e, what)) {
            dev_download(got, dW, wb);
            tc_report(memcmp(got, want, wb) == 0, "%s: device repack == host permutation", what);
        }
        free(got);
        free(want);
    }
    {
        /* tiles per block, warps per tile, depth (0: the default) */
        static const int shapes[][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {1, 8, 1}, {4, 2, 2},
                                        {8, 1, 1}, {2, 4, 2}, {1, 4, 1}, {4, 1, 0}};
        static const int toks[] = {1, 2, 3, 5, 8};
        for (size_t ti = 0; ti < TND_ARRAY_LEN(toks); ti++)
            for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) {
                const int n_tok = toks[ti], *c = shapes[i];
                if (n_tok > 2 && i > 2 && i != TND_ARRAY_LEN(shapes) - 1) continue; /* every shape at 1, 2 tokens */
                const size_t yb = (size_t)(n_out * n_tok) * 4;
                char w2[260];
                snprintf(w2, sizeof w2, "%s n_tok=%d tiles/block=%d warps/tile=%d depth=%d", what, n_tok, c[0], c[1],
                         c[2]);
                dev_poison(dy, yb);
                if (!sync_ok(tnd_cu_matvec_q6kt(dW, n_in, n_out, dx, n_tok, dy, c[0], c[1], c[2], cs), w2)) continue;
                dev_download(y, dy, yb);
                compare(w2, y, ref, sc, n_out * n_tok, 2e-3, (double)n_in * 6e-8 * xmax);
                if (c[0] > 0 && tnd_cu_matvec_f16mma_supported(t, n_in, n_tok)) {
                    dev_poison(dy, yb);
                    if (!sync_ok(tnd_cu_matvec_f16mma(t, dW0, n_in, n_out, dx, n_tok, dy, c[0], c[1], cs), w2)) continue;
                    dev_download(y1, dy, yb);
                    tc_report(memcmp(y, y1, yb) == 0, "%s: same bits as f16mma on the original layout", w2);
                }
            }
        /* x 4 bytes past a 16-byte boundary: staged from single floats */
        dev_poison(dy, (size_t)n_out * 4);
        snprintf(what + strlen(what), sizeof what - strlen(what), " x misaligned");
        if (sync_ok(tnd_cu_matvec_q6kt(dW, n_in, n_out, dx + 1, 1, dy, 0, 0, 0, cs), what)) {
            dev_download(y, dy, (size_t)n_out * 4);
            compare(what, y, ref1, sc1, n_out, 2e-3, (double)n_in * 6e-8 * xmax1);
        }
        what[strlen(what) - strlen(" x misaligned")] = 0;
        /* refusals */
        const int e1 = tnd_cu_matvec_q6kt(dW, n_in, n_out, dx, 9, dy, 0, 0, 0, cs);
        const int e2 = tnd_cu_matvec_q6kt(dW, n_in, n_out, dx, 1, dy, 4, 4, 0, cs);
        const int e3 = tnd_cu_matvec_q6kt(dW, n_in, n_out, dx, 1, dy, 0, 0, 3, cs);
        const int e4 = tnd_cu_matvec_q6kt((const uint8_t *)dW + 2, n_in, n_out, dx, 1, dy, 0, 0, 0, cs);
        const int e5 = tnd_cu_matvec_q6kt(dW, n_in, n_out - 8, dx, 1, dy, 0, 0, 0, cs);
        tc_report(e1 == 1 && e2 == 1 && e3 == 1 && e4 != 0 && e5 == 801,
                  "%s: refuses 9 tokens (%d), 16 warps a block (%d), depth 3 (%d), W 2 bytes off (%d), %lld rows (%d)",
                  what, e1, e2, e3, e4, (long long)n_out - 8, e5);
    }
    {
        /* prefill: the tiled dequant + cuBLAS against the plain one */
        static const int64_t ptoks[] = {12, 40};
        cublasHandle_t h = NULL;
        CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
        tnd_cu_blas blas = (tnd_cu_blas)h;
        for (size_t i = 0; blas && i < TND_ARRAY_LEN(ptoks); i++) {
            const int64_t n_tok = ptoks[i];
            float *px = (float *)tc_xmalloc((size_t)(n_in * n_tok) * 4);
            tc_fill_unif(px, (size_t)(n_in * n_tok), -1, 1);
            float *dpx = (float *)dev_upload(px, (size_t)(n_in * n_tok) * 4);
            const size_t yb = (size_t)(n_out * n_tok) * 4, need = tnd_cu_matmul_scratch(n_in, n_out, n_tok, 48);
            float *dpy = (float *)dev_alloc(yb), *a = (float *)tc_xmalloc(yb), *b = (float *)tc_xmalloc(yb);
            void *scr = dev_alloc(need);
            char w2[260];
            snprintf(w2, sizeof w2, "%s matmul n_tok=%lld (chunks of 48 rows)", what, (long long)n_tok);
            dev_poison(dpy, yb);
            if (sync_ok(tnd_cu_matmul_q6kt(blas, dW, n_in, n_out, dpx, n_tok, dpy, scr, need, 48, cs), w2)) {
                dev_download(a, dpy, yb);
                dev_poison(dpy, yb);
                if (sync_ok(tnd_cu_matmul(blas, t, dW0, n_in, n_out, dpx, n_tok, dpy, scr, need, 48, cs), w2)) {
                    dev_download(b, dpy, yb);
                    tc_report(memcmp(a, b, yb) == 0, "%s: same bits as the original layout's", w2);
                }
            }
            dev_free(scr);
            dev_free(dpy);
            dev_free(dpx);
            free(px);
            free(a);
            free(b);
        }
        if (h) cublasDestroy(h);
    }
out:
    dev_free(dW0);
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

int main(void) {
    tc_rng = 0x6a09e667f3bcc909ull;
    const int rc = cuda_test_open("test_cuda_q6kt");
    if (rc) return rc;
    if (!tnd_cu_q6kt_supported(256, 16)) {
        printf("test_cuda_q6kt: skipped (the tile layout needs sm_80 code and a device to run it)\n");
        return cuda_test_close(77);
    }
    static const int64_t shapes[][2] = {{256, 16}, {768, 48}, {4096, 1024}, {2048, 272}, {12288, 4096}, {4096, 2064}};
    for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) test_shape(shapes[i][0], shapes[i][1]);
    return cuda_test_close(0);
}
#endif
