/* MXFP4 (OCP microscaling v1.0): 32 E2M1 values sharing an E8M0 exponent e,
 * value = 2^(e-127) * e2m1. GGML stores element j in the low nibble of qs[j]
 * and element j+16 in the high nibble, and computes with the E2M1 table
 * doubled (integers) times 2^(e-128), which is exact; so do we. */
#include <math.h>

#include "quant/quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK TND_QK_MXFP4

/* {0, .5, 1, 1.5, 2, 3, 4, 6} doubled, then the negatives (sign bit 3). */
const int8_t tnd_mxfp4_values2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void tnd_ref_to_float_mxfp4(const void *vx, float *y, int64_t k) {
    const block_mxfp4 *x = (const block_mxfp4 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = tnd_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)tnd_mxfp4_values2[x[i].qs[j] & 0xF];
            y[i * QK + j + QK / 2] = d * (float)tnd_mxfp4_values2[x[i].qs[j] >> 4];
        }
    }
}

/* Nearest table entry to v at scale d; first index on ties (as gguf-py's
 * argmin), so +0 rather than -0 and positive before negative. */
static int nearest_e2m1(float v, float d) {
    int best = 0;
    float best_err = INFINITY;
    for (int t = 0; t < 16; t++) {
        float err = fabsf(d * (float)tnd_mxfp4_values2[t] - v);
        if (err < best_err) {
            best_err = err;
            best = t;
        }
    }
    return best;
}

void tnd_ref_from_float_mxfp4(const float *x, void *vy, int64_t k) {
    block_mxfp4 *y = (block_mxfp4 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        /* Shared exponent floor(log2(amax)) - 2 (the E2M1 maximum 6 is in
         * [4, 8)), exact from the bits rather than through log2f. */
        int e = 0;
        if (amax > 0.0f) {
            int ex;
            frexpf(amax, &ex); /* amax = f * 2^ex, f in [0.5, 1) */
            e = ex - 1 - 2 + 127;
            e = e < 0 ? 0 : e > 254 ? 254 : e;
        }
        y[i].e = (uint8_t)e;
        float d = tnd_e8m0_to_fp32_half((uint8_t)e);
        for (int j = 0; j < QK / 2; j++)
            y[i].qs[j] = (uint8_t)(nearest_e2m1(xb[j], d) | (nearest_e2m1(xb[j + QK / 2], d) << 4));
    }
}

float tnd_ref_vec_dot_mxfp4_q8_0(int64_t n, const void *vx, const void *vy) {
    const block_mxfp4 *x = (const block_mxfp4 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += tnd_mxfp4_values2[x[i].qs[j] & 0xF] * y[i].qs[j];
            sumi += tnd_mxfp4_values2[x[i].qs[j] >> 4] * y[i].qs[j + QK / 2];
        }
        acc += (tnd_e8m0_to_fp32_half(x[i].e) * tnd_fp16_to_fp32(y[i].d)) * (float)sumi;
    }
    return acc;
}
