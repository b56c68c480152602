/* Legacy 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (weights) and
 * Q8_0, Q8_1 (activations). Within a block of 32, the 4-bit formats store
 * element j in the low nibble of qs[j] and element j+16 in the high nibble;
 * Q5 keeps the fifth bit of element j in bit j of the little-endian qh.
 *
 * The weight quantizers reproduce gguf-py's (and ggml's reference) rounding
 * step by step in f32, so results are bit-exact with it. */
#include <math.h>

#include "quant/quant.h"

/* No fused multiply-add: every product and sum rounds as written, as in the
 * numpy oracle (gcc does not contract under -std=c11). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32

static inline float h2f(uint16_t h) { return tnd_fp16_to_fp32(h); }
static inline uint16_t f2h(float f) { return tnd_fp32_to_fp16(f); }

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4); /* little-endian host assumed, like GGUF */
    return v;
}
static inline void store_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Signed value of largest magnitude (first one on ties, like numpy argmax). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* ---- Q4_0: x = d * (q - 8) ------------------------------------------------ */

void tnd_ref_to_float_q4_0(const void *vx, float *y, int64_t k) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)((x[i].qs[j] & 0xF) - 8);
            y[i * QK + j + QK / 2] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

void tnd_ref_from_float_q4_0(const float *x, void *vy, int64_t k) {
    block_q4_0 *y = (block_q4_0 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        /* The extreme maps to -8 exactly, so the other sign gets 7 levels. */
        float d = signed_absmax(xb, QK) / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)(xb[j] * id + 8.5f), q1 = (int)(xb[j + QK / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- Q4_1: x = d * q + m -------------------------------------------------- */

void tnd_ref_to_float_q4_1(const void *vx, float *y, int64_t k) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)(x[i].qs[j] & 0xF) + m;
            y[i * QK + j + QK / 2] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo;
    *mx = hi;
}

void tnd_ref_from_float_q4_1(const float *x, void *vy, int64_t k) {
    block_q4_1 *y = (block_q4_1 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float mn, mx;
        minmax(xb, QK, &mn, &mx);
        float d = (mx - mn) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)((xb[j] - mn) * id + 0.5f), q1 = (int)((xb[j + QK / 2] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- Q5_0: x = d * (q - 16) ----------------------------------------------- */

void tnd_ref_to_float_q5_0(const void *vx, float *y, int64_t k) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d);
        uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[i * QK + j] = d * (float)(q0 - 16);
            y[i * QK + j + QK / 2] = d * (float)(q1 - 16);
        }
    }
}

void tnd_ref_from_float_q5_0(const float *x, void *vy, int64_t k) {
    block_q5_0 *y = (block_q5_0 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float d = signed_absmax(xb, QK) / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)(xb[j] * id + 16.5f), q1 = (int)(xb[j + QK / 2] * id + 16.5f);
            q0 = q0 > 31 ? 31 : q0;
            q1 = q1 > 31 ? 31 : q1;
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_u32(y[i].qh, qh);
    }
}

/* ---- Q5_1: x = d * q + m -------------------------------------------------- */

void tnd_ref_to_float_q5_1(const void *vx, float *y, int64_t k) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d), m = h2f(x[i].m);
        uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[i * QK + j] = d * (float)q0 + m;
            y[i * QK + j + QK / 2] = d * (float)q1 + m;
        }
    }
}

void tnd_ref_from_float_q5_1(const float *x, void *vy, int64_t k) {
    block_q5_1 *y = (block_q5_1 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        const float *xb = x + i * QK;
        float mn, mx;
        minmax(xb, QK, &mn, &mx);
        float d = (mx - mn) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)((xb[j] - mn) * id + 0.5f), q1 = (int)((xb[j + QK / 2] - mn) * id + 0.5f);
            q0 = q0 > 31 ? 31 : q0;
            q1 = q1 > 31 ? 31 : q1;
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_u32(y[i].qh, qh);
    }
}

/* ---- Q8_0: x = d * q; also the activation format of Q4_0/Q5_0/Q8_0/MXFP4 -- */

void tnd_ref_to_float_q8_0(const void *vx, float *y, int64_t k) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[i * QK + j] = d * (float)x[i].qs[j];
    }
}

/* Quantizes one block of 32 symmetrically to int8; returns d (unrounded). */
static float quant_block_q8(const float *xb, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < QK; j++) {
        int q = (int)roundf(xb[j] * id);
        qs[j] = (int8_t)q;
        s += q;
    }
    *sum = s;
    return d;
}

void tnd_ref_from_float_q8_0(const float *x, void *vy, int64_t k) {
    block_q8_0 *y = (block_q8_0 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        int sum;
        y[i].d = f2h(quant_block_q8(x + i * QK, y[i].qs, &sum));
    }
}

/* ---- Q8_1: x = d * q, s = d * sum(q); activations of Q4_1/Q5_1 ----------- */

void tnd_ref_to_float_q8_1(const void *vx, float *y, int64_t k) {
    const block_q8_1 *x = (const block_q8_1 *)vx;
    for (int64_t i = 0; i < k / QK; i++) {
        float d = h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[i * QK + j] = d * (float)x[i].qs[j];
    }
}

void tnd_ref_from_float_q8_1(const float *x, void *vy, int64_t k) {
    block_q8_1 *y = (block_q8_1 *)vy;
    for (int64_t i = 0; i < k / QK; i++) {
        int sum;
        float d = quant_block_q8(x + i * QK, y[i].qs, &sum);
        y[i].d = f2h(d);
        y[i].s = f2h(d * (float)sum);
    }
}

/* ---- dot products ---------------------------------------------------------- */

float tnd_ref_vec_dot_q4_0_q8_0(int64_t n, const void *vx, const void *vy) {
    const block_q4_0 *x = (const block_q4_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK / 2];
        }
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi;
    }
    return acc;
}

float tnd_ref_vec_dot_q4_1_q8_1(int64_t n, const void *vx, const void *vy) {
    const block_q4_1 *x = (const block_q4_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            sumi += (x[i].qs[j] & 0xF) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QK / 2];
        }
        /* sum (d q + m) a = d da sumi + m (da sum qa), the last from y.s */
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi + h2f(x[i].m) * h2f(y[i].s);
    }
    return acc;
}

float tnd_ref_vec_dot_q5_0_q8_0(int64_t n, const void *vx, const void *vy) {
    const block_q5_0 *x = (const block_q5_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh = load_u32(x[i].qh);
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += (q0 - 16) * y[i].qs[j] + (q1 - 16) * y[i].qs[j + QK / 2];
        }
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi;
    }
    return acc;
}

float tnd_ref_vec_dot_q5_1_q8_1(int64_t n, const void *vx, const void *vy) {
    const block_q5_1 *x = (const block_q5_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh = load_u32(x[i].qh);
        int32_t sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (x[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK / 2];
        }
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi + h2f(x[i].m) * h2f(y[i].s);
    }
    return acc;
}

float tnd_ref_vec_dot_q8_0_q8_0(int64_t n, const void *vx, const void *vy) {
    const block_q8_0 *x = (const block_q8_0 *)vx;
    const block_q8_0 *y = (const block_q8_0 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi;
    }
    return acc;
}

float tnd_ref_vec_dot_q8_1_q8_1(int64_t n, const void *vx, const void *vy) {
    const block_q8_1 *x = (const block_q8_1 *)vx;
    const block_q8_1 *y = (const block_q8_1 *)vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
        acc += (h2f(x[i].d) * h2f(y[i].d)) * (float)sumi;
    }
    return acc;
}
