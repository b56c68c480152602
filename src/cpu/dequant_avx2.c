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
#define DQ(name) dq2_##name

/* 8 int8 (low half of v) -> 8 floats. */
TGTI __m256 cvt8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

TGTI void emit_mul(float *y, __m256i q, float s0, float s1) {
    __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
    __m256 v0 = _mm256_set1_ps(s0), v1 = _mm256_set1_ps(s1);
    _mm256_storeu_ps(y, _mm256_mul_ps(v0, cvt8(a)));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(v0, cvt8(_mm_srli_si128(a, 8))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(v1, cvt8(b)));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(v1, cvt8(_mm_srli_si128(b, 8))));
}

TGTI void emit_add(float *y, __m256i q, float d, float m) {
    __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
    __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(vd, cvt8(a)), vm));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_mul_ps(vd, cvt8(_mm_srli_si128(a, 8))), vm));
    _mm256_storeu_ps(y + 16, _mm256_add_ps(_mm256_mul_ps(vd, cvt8(b)), vm));
    _mm256_storeu_ps(y + 24, _mm256_add_ps(_mm256_mul_ps(vd, cvt8(_mm_srli_si128(b, 8))), vm));
}

TGTI void emit_sub(float *y, __m256i q, float d0, float m0, float d1, float m1) {
    __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
    __m256 vd0 = _mm256_set1_ps(d0), vm0 = _mm256_set1_ps(m0);
    __m256 vd1 = _mm256_set1_ps(d1), vm1 = _mm256_set1_ps(m1);
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(vd0, cvt8(a)), vm0));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(vd0, cvt8(_mm_srli_si128(a, 8))), vm0));
    _mm256_storeu_ps(y + 16, _mm256_sub_ps(_mm256_mul_ps(vd1, cvt8(b)), vm1));
    _mm256_storeu_ps(y + 24, _mm256_sub_ps(_mm256_mul_ps(vd1, cvt8(_mm_srli_si128(b, 8))), vm1));
}

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
