/* The prefill's f16 dequantization on the GPU (src/cuda/matmul.cu), value
 * by value, where the matmul tests see it only through cuBLAS sums. Skips
 * with 77 without CUDA or a device.
 *   - tnd_cu_dequant_f16, every type the GPU takes, row ranges that start
 *     and end mid-warp, rows of whole and of partial 32-value subs: each
 *     value against the host's to_float, rounded to f16 (one f16 step of
 *     slack: the device fuses the scale's multiply-add); the halves past
 *     the range stay as poisoned.
 *   - tnd_cu_dequant_f16_q4kt / _q6kt on re-laid copies (rows of 1 to 9
 *     super-blocks, so both the full staged blocks of 4 and the short
 *     last ones run; ranges not starting at row 0): the same bits as
 *     tnd_cu_dequant_f16 on the original layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "util.h"

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("test_cuda_dequant: skipped (built without CUDA)\n");
    return 77;
}
#else

#include "cuda/cuda_ops.h"
#include "cuda_check.h"

/* Rows [r0, r1) of a random rows x n_in W of type t against the host. */
static void test_plain(tnd_type t, int64_t n_in, int64_t rows, int64_t r0, int64_t r1) {
    char what[160];
    snprintf(what, sizeof what, "dequant %s %lld x %lld rows [%lld, %lld)", tnd_type_name(t), (long long)rows,
             (long long)n_in, (long long)r0, (long long)r1);
    size_t wb;
    void *W = make_weights(t, n_in, rows, &wb);
    const size_t rb = tnd_row_size(t, n_in), nv = (size_t)((r1 - r0) * n_in);
    float *row = (float *)tc_xmalloc((size_t)n_in * 4);
    uint16_t *got = (uint16_t *)tc_xmalloc((nv + 64) * 2);
    void *dW = dev_upload(W, wb);
    uint16_t *dh = (uint16_t *)dev_alloc((nv + 64) * 2);
    dev_poison(dh, (nv + 64) * 2);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    if (sync_ok(tnd_cu_dequant_f16(t, dW, n_in, r0, r1, dh, cs), what)) {
        dev_download(got, dh, (nv + 64) * 2);
        int64_t bad = -1;
        for (int64_t r = r0; r < r1 && bad < 0; r++) {
            tnd_type_traits_get(t)->to_float((const uint8_t *)W + (size_t)r * rb, row, n_in);
            for (int64_t i = 0; i < n_in; i++) {
                const float want = tnd_fp16_to_fp32(tnd_fp32_to_fp16(row[i]));
                const float g = tnd_fp16_to_fp32(got[(r - r0) * n_in + i]);
                /* one f16 step at |want| (2^-10 relative), and f16's smallest normal */
                if (!(fabsf(g - want) <= fabsf(want) * (1.0f / 1024) + 6.2e-5f)) {
                    bad = (r - r0) * n_in + i;
                    printf("  [%lld]: got %.7g want %.7g\n", (long long)bad, g, want);
                    break;
                }
            }
        }
        bool tail = true;
        for (size_t i = nv; i < nv + 64; i++) tail &= got[i] == 0xffff;
        tc_report(bad < 0 && tail, "%s: each value as the host's%s", what, tail ? "" : " (wrote past the range)");
    }
    dev_free(dh);
    dev_free(dW);
    free(W);
    free(row);
    free(got);
}

/* A re-laid copy of a Q4_K or Q6_K W: rows [r0, r1) bit for bit as the
 * original layout's. */
static void test_tiled(tnd_type t, int64_t n_in, int64_t rows, int64_t r0, int64_t r1) {
    char what[160];
    snprintf(what, sizeof what, "tiled dequant %s %lld x %lld rows [%lld, %lld)", tnd_type_name(t), (long long)rows,
             (long long)n_in, (long long)r0, (long long)r1);
    const bool q4 = t == TND_TYPE_Q4_K;
    if (!(q4 ? tnd_cu_q4kt_supported(n_in, rows) : tnd_cu_q6kt_supported(n_in, rows))) {
        printf("skip %s: the layout needs sm_80 code and a device to run it\n", what);
        return;
    }
    size_t wb;
    void *W = make_weights(t, n_in, rows, &wb);
    const size_t nb = (size_t)((r1 - r0) * n_in) * 2;
    void *dW0 = dev_upload(W, wb), *dW = dev_upload(W, wb);
    uint16_t *da = (uint16_t *)dev_alloc(nb), *db = (uint16_t *)dev_alloc(nb);
    uint16_t *a = (uint16_t *)tc_xmalloc(nb), *b = (uint16_t *)tc_xmalloc(nb);
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);
    dev_poison(da, nb);
    dev_poison(db, nb);
    int e = q4 ? tnd_cu_q4kt_repack(dW, n_in, rows, cs) : tnd_cu_q6kt_repack(dW, n_in, rows, cs);
    if (sync_ok(e, what)) {
        e = q4 ? tnd_cu_dequant_f16_q4kt(dW, n_in, r0, r1, da, cs) : tnd_cu_dequant_f16_q6kt(dW, n_in, r0, r1, da, cs);
        if (sync_ok(e, what) && sync_ok(tnd_cu_dequant_f16(t, dW0, n_in, r0, r1, db, cs), what)) {
            dev_download(a, da, nb);
            dev_download(b, db, nb);
            tc_report(memcmp(a, b, nb) == 0, "%s: the same bits as the original layout's", what);
        }
    }
    dev_free(da);
    dev_free(db);
    dev_free(dW);
    dev_free(dW0);
    free(W);
    free(a);
    free(b);
}

int main(void) {
    tc_rng = 0x3c6ef372fe94f82bull;
    const int rc = cuda_test_open("test_cuda_dequant");
    if (rc) return rc;
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        if (!tnd_cu_type_supported(t)) continue;
        const int64_t blk = tnd_type_traits_get(t)->block_size;
        /* whole warps and ragged ends; a row of 24 subs puts warps across rows */
        test_plain((tnd_type)t, 256 * 3, 45, 0, 45);
        test_plain((tnd_type)t, 256 * 3, 45, 7, 38);
        test_plain((tnd_type)t, 4096, 9, 1, 9);
        if (blk == 1) test_plain((tnd_type)t, 100, 13, 2, 13); /* subs past the row's end */
    }
    for (int q = 0; q < 2; q++) {
        const tnd_type t = q ? TND_TYPE_Q6_K : TND_TYPE_Q4_K;
        for (int nsb = 1; nsb <= 9; nsb += 2) test_tiled(t, 256 * nsb, 48, 0, 48);
        test_tiled(t, 256 * 4, 64, 16, 48);
        test_tiled(t, 256 * 20, 4112, 16, 4112);
    }
    return cuda_test_close(0);
}
#endif
