/* glibc's expf: its table and constants (the scalar tnd_cpu_expf is in
 * ops.c), and the same in vectors of 16 (AVX-512) and 8 (AVX2), for silu
 * and gelu (ops.c) and attention's softmax (attn.c). */
#ifndef TND_CPU_VEXP_H
#define TND_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- expf --------------------------------------------------------------------
 * silu's expf (every FFN activation: n_ff per token and layer) and
 * attention's softmax were a per-token cost that libm's scalar expf made
 * ~5 ns an element. This is glibc's expf (2.27+, the FMA build its x86-64
 * dispatch picks: 2^(k/32) from a table times a cubic in double) step for
 * step, the same roundings and FMAs, so on glibc the results are its
 * expf's bits and every output stays as it was; elsewhere within 1 ulp of
 * libm (test_cpu_attn). |x| >= 88 (overflow, underflow, inf, NaN) goes to
 * libm's expf. */
static const uint64_t k_exp_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
/* 32 / ln 2, 1.5 * 2^52 (rounds to an integer in the low bits), the cubic */
#define EXP_INVLN2N 0x1.71547652b82fep+5
#define EXP_SHIFT 0x1.8p+52
#define EXP_C0 0x1.c6af84b912394p-20
#define EXP_C1 0x1.ebfce50fac4f3p-13
#define EXP_C2 0x1.62e42ff0c52d6p-6
#define EXP_BIG 0x42a /* top 12 bits (less the sign) of 88.0f */

static inline double exp_d(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

#if defined(__x86_64__)
#define TGTI static inline __attribute__((target("avx2,fma,avx512f,avx512dq"), always_inline))
TGTI __m256 exp8_d(__m256 x, const __m512i tab[4]) {
    const __m512d xd = _mm512_cvtps_pd(x), ln = _mm512_set1_pd(EXP_INVLN2N), sh = _mm512_set1_pd(EXP_SHIFT);
    __m512d kd = _mm512_fmadd_pd(ln, xd, sh);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, sh);
    const __m512d r = _mm512_fmsub_pd(ln, xd, kd);
    /* tab[ki % 32]: two 16-entry permutes, bit 4 picks */
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)),
                                        _mm512_permutex2var_epi64(tab[0], ki, tab[1]),
                                        _mm512_permutex2var_epi64(tab[2], ki, tab[3]));
    t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(EXP_C0), r, _mm512_set1_pd(EXP_C1)), r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(EXP_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

/* expf of 16 floats; lanes with |x| >= 88 through libm */
TGTI __m512 exp16(__m512 x, const __m512i tab[4]) {
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(exp8_d(_mm512_castps512_ps256(x), tab)),
                                  exp8_d(_mm512_extractf32x8_ps(x, 1), tab), 1);
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    __mmask16 big = _mm512_cmpge_epi32_mask(top, _mm512_set1_epi32(EXP_BIG));
    if (big) {
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        for (int i = 0; i < 16; i++)
            if (big >> i & 1) ys[i] = expf(xs[i]);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}

TGTI void exp_tab(__m512i tab[4]) {
    for (int i = 0; i < 4; i++) tab[i] = _mm512_loadu_si512((const void *)(k_exp_tab + 8 * i));
}

#undef TGTI

/* The same on AVX2 (a batched round's silu and softmax on a 2-core AVX2
 * EPYC were ~7% of its time through libm): four doubles a vector, the
 * table read by a gather. */
#define TGTI static inline __attribute__((target("avx2,fma"), always_inline))
TGTI __m128 exp4_d_avx2(__m128 x) {
    const __m256d xd = _mm256_cvtps_pd(x), ln = _mm256_set1_pd(EXP_INVLN2N), sh = _mm256_set1_pd(EXP_SHIFT);
    __m256d kd = _mm256_fmadd_pd(ln, xd, sh);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, sh);
    const __m256d r = _mm256_fmsub_pd(ln, xd, kd);
    __m256i t = _mm256_i64gather_epi64((const long long *)k_exp_tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C0), r, _mm256_set1_pd(EXP_C1)), r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

/* expf of 8 floats; lanes with |x| >= 88 through libm */
TGTI __m256 exp8_avx2(__m256 x) {
    __m256 y = _mm256_set_m128(exp4_d_avx2(_mm256_extractf128_ps(x, 1)), exp4_d_avx2(_mm256_castps256_ps128(x)));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    const int big = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(EXP_BIG - 1))));
    if (big) {
        float xs[8], ys[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(ys, y);
        for (int i = 0; i < 8; i++)
            if (big >> i & 1) ys[i] = expf(xs[i]);
        y = _mm256_loadu_ps(ys);
    }
    return y;
}

/* 8 lanes of x (k < 8: the first k, the rest 0) */
TGTI __m256 load8_k(const float *x, int64_t k) {
    if (k >= 8) return _mm256_loadu_ps(x);
    float t[8] = {0};
    memcpy(t, x, (size_t)k * sizeof(float));
    return _mm256_loadu_ps(t);
}
TGTI void store8_k(float *x, __m256 v, int64_t k) {
    if (k >= 8) {
        _mm256_storeu_ps(x, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(x, t, (size_t)k * sizeof(float));
}

#undef TGTI
#endif

#endif
