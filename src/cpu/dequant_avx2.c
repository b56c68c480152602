/* AVX2 (+ F16C) dequantizers, bit-exact with quant/ref_*.c: integer unpacking
 * (dequant_x86.h), then per 8 values an exact int -> float conversion and
 * the reference's float operations, unfused. */
#include <immintrin.h>
#include <string.h>

#include "cpu/dequant.h"

/* Products and sums round as written (no FMA), as in the references; gcc
 * does not contract under -std=c11, clang is told here. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c"), always_inline))
#define DQ_WIDTH 8
#define DQ_DEFINE_DEQUANT
#define DQ(name) dq2_##name
#include "cpu/dequant_x86.h"

/* ---- float formats (block size 1: any k) ----------------------------------- */

TGT static void dq2_f32(const void *x, float *y, int64_t k) { memcpy(y, x, (size_t)k * sizeof(float)); }

TGT static void dq2_f16(const void *vx, float *y, int64_t k) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < k; i++) y[i] = _cvtsh_ss(x[i]);
}

TGT static void dq2_bf16(const void *vx, float *y, int64_t k) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
    }
    for (; i < k; i++) y[i] = tnd_bf16_to_fp32(x[i]);
}

void tnd_cpu_dequant_table_avx2(tnd_dequant_fn tab[TND_TYPE_COUNT]) {
    tab[TND_TYPE_F32] = dq2_f32;
    tab[TND_TYPE_F16] = dq2_f16;
    tab[TND_TYPE_BF16] = dq2_bf16;
    tab[TND_TYPE_Q4_0] = dq2_q4_0;
    tab[TND_TYPE_Q4_1] = dq2_q4_1;
    tab[TND_TYPE_Q5_0] = dq2_q5_0;
    tab[TND_TYPE_Q5_1] = dq2_q5_1;
    tab[TND_TYPE_Q8_0] = dq2_q8_0;
    tab[TND_TYPE_MXFP4] = dq2_mxfp4;
    tab[TND_TYPE_Q2_K] = dq2_q2_K;
    tab[TND_TYPE_Q3_K] = dq2_q3_K;
    tab[TND_TYPE_Q4_K] = dq2_q4_K;
    tab[TND_TYPE_Q5_K] = dq2_q5_K;
    tab[TND_TYPE_Q6_K] = dq2_q6_K;
}
