/* Scalar CPU versions of the weightless ops (see ops.h). These are both the
 * reference and the engine's implementation, vectorized by the compiler
 * where it can — except attention's inner products over the f16 cache, which
 * have an AVX2/F16C path (prefill attention reads the cache once per query
 * and head; converting f16 one element at a time made it the slowest op),
 * the expf of silu and softmax on AVX2 and AVX-512, and on AVX-512
 * RMSNorm's sum of squares and adjacent-pair RoPE (per-token work that
 * batched rounds do not share; the scalar code stays their reference,
 * tnd_cpu_ops_scalar). */
#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul_impl.h"
#include "quant/quant.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

bool tnd_cpu_ops_scalar; /* tests: force the scalar paths */

static float dot_f16_scalar(const float *q, const uint16_t *k, int n) {
    float s = 0;
    for (int d = 0; d < n; d++) s += q[d] * tnd_fp16_to_fp32(k[d]);
    return s;
}

static void axpy_f16_scalar(float *acc, float w, const uint16_t *v, int n) {
    for (int d = 0; d < n; d++) acc[d] += w * tnd_fp16_to_fp32(v[d]);
}

#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,f16c")))
/* n a multiple of 16: two accumulators, then a fixed-order horizontal sum */
TGT static float dot_f16_avx2(const float *q, const uint16_t *k, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int d = 0; d < n; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 8))), a1);
    }
    __m256 a = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

TGT static void axpy_f16_avx2(float *acc, float w, const uint16_t *v, int n) {
    __m256 wv = _mm256_set1_ps(w);
    for (int d = 0; d < n; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))),
                                                  _mm256_loadu_ps(acc + d)));
}

/* acc[0..n) = sum over p in [lo, hi] of w[p] v[p * stride ..], n a
 * multiple of 16: axpy_f16_avx2 over the positions in order (the same
 * FMAs, so the same bits), each 64 columns kept in registers across all
 * positions instead of loaded and stored per position. */
TGT static void axpy_rows_f16_avx2(float *acc, const float *w, const uint16_t *v, int64_t stride, int lo, int hi,
                                   int n) {
    for (int d0 = 0; d0 < n; d0 += 64) {
        const int k = n - d0 < 64 ? (n - d0) / 8 : 8;
        __m256 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
        for (int p = lo; p <= hi; p++) {
            const __m256 wv = _mm256_set1_ps(w[p]);
            const uint16_t *vp = v + (int64_t)p * stride + d0;
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                if (i < k) a[i] = _mm256_fmadd_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vp + 8 * i))), a[i]);
        }
        for (int i = 0; i < k; i++) _mm256_storeu_ps(acc + d0 + 8 * i, a[i]);
    }
}
#undef TGT
#endif

/* ---- expf, 16 at a time ---------------------------------------------------
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

static double exp_d(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

float tnd_cpu_expf(float x) {
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    if (((ux >> 20) & 0x7ff) >= EXP_BIG) return expf(x);
    double xd = (double)x, kd = fma(EXP_INVLN2N, xd, EXP_SHIFT);
    uint64_t ki;
    memcpy(&ki, &kd, sizeof ki);
    kd -= EXP_SHIFT;
    double r = fma(EXP_INVLN2N, xd, -kd);
    double s = exp_d(k_exp_tab[ki & 31] + (ki << 47));
    double z = fma(EXP_C0, r, EXP_C1), r2 = r * r, y = fma(EXP_C2, r, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}

#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,avx512f,avx512dq")))
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

/* x[i] = expf(x[i] - m) */
TGT static void exp_sub_avx512(float *x, float m, int64_t n) {
    __m512i tab[4];
    exp_tab(tab);
    const __m512 mv = _mm512_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv), tab));
    }
}

/* out = g / (1 + expf(-g)) * u, the scalar loop's operations */
TGT static void silu_mul_avx512(const float *g, const float *u, float *out, int64_t n) {
    __m512i tab[4];
    exp_tab(tab);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv), tab);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
                                                        _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* sum of x[i]^2 in double: 16 lanes, then a fixed-order reduction (each
 * square is exact in double, as in the scalar loop; only the order of the
 * additions differs) */
TGT static double sumsq_avx512(const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    return ss;
}

/* Adjacent-pair RoPE of n (a multiple of 16) values: the scalar loop's
 * multiplies, subtract and add (no FMA), 8 pairs at a time. cs: c0 s0 c1 s1 .. */
TGT static void rope_pairs_avx512(float *v, const float *cs, int n) {
    const __m512i swap = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    const __m512i ev = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
    const __m512i od = _mm512_setr_epi32(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
    for (int d = 0; d < n; d += 16) {
        const __m512 x = _mm512_loadu_ps(v + d), t = _mm512_loadu_ps(cs + d);
        const __m512 a = _mm512_mul_ps(x, _mm512_permutexvar_ps(ev, t));                              /* x0 c, x1 c */
        const __m512 b = _mm512_mul_ps(_mm512_permutexvar_ps(swap, x), _mm512_permutexvar_ps(od, t)); /* x1 s, x0 s */
        _mm512_storeu_ps(v + d, _mm512_mask_add_ps(_mm512_sub_ps(a, b), 0xaaaa, a, b));
    }
}

/* Decode and prefill attention over the f16 cache, 16 lanes a vector.
 * Scores of 8 positions at a time: one accumulator a position, summed over
 * the head's 16-element chunks, then the 8 reduced together by a transposing
 * tree (lanes i + 8, i + 4, i + 2, i + 1 at each step, ~3 instructions a
 * score instead of a horizontal sum each). s[j] = dot(q, k + j * stride),
 * j < N <= 8 (a constant at each call); hd a multiple of 16. */
TGTI void dot8_f16(const float *q, const uint16_t *k, int64_t stride, const int N, int hd, float *s) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 16) {
        const __m512 qv = _mm512_loadu_ps(q + d);
#define KV(j) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + (j) * stride + d)))
        a0 = _mm512_fmadd_ps(qv, KV(0), a0);
        if (N > 1) a1 = _mm512_fmadd_ps(qv, KV(1), a1);
        if (N > 2) a2 = _mm512_fmadd_ps(qv, KV(2), a2);
        if (N > 3) a3 = _mm512_fmadd_ps(qv, KV(3), a3);
        if (N > 4) a4 = _mm512_fmadd_ps(qv, KV(4), a4);
        if (N > 5) a5 = _mm512_fmadd_ps(qv, KV(5), a5);
        if (N > 6) a6 = _mm512_fmadd_ps(qv, KV(6), a6);
        if (N > 7) a7 = _mm512_fmadd_ps(qv, KV(7), a7);
#undef KV
    }
    /* lanes i + 8: chunks 0,1 of one, then of the other */
#define H8(x, y) _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee))
    const __m512 w0 = H8(a0, a1), w1 = H8(a2, a3), w2 = H8(a4, a5), w3 = H8(a6, a7);
#undef H8
    /* lanes i + 4: chunk j of x0 is a_j's, of x1 a_{4+j}'s */
    const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
    const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(w2, w3, 0x88), _mm512_shuffle_f32x4(w2, w3, 0xdd));
    /* lanes i + 2: chunk j holds a_j (2 lanes), a_{4+j} (2 lanes) */
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x44), _mm512_shuffle_ps(x0, x1, 0xee));
    /* lanes i + 1: lane 4j is a_j, 4j + 1 is a_{4+j} */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y, y, 0x88), _mm512_shuffle_ps(y, y, 0xdd));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_mask_storeu_ps(s, (__mmask16)((1u << N) - 1), _mm512_permutexvar_ps(order, z));
}

/* s[p] = dot(q, k + p * stride) for p < n */
TGT static void scores_f16_avx512(const float *q, const uint16_t *k, int64_t stride, int n, int hd, float *s) {
    int p = 0;
    for (; p + 8 <= n; p += 8) dot8_f16(q, k + p * stride, stride, 8, hd, s + p);
    switch (n - p) {
    case 7: dot8_f16(q, k + p * stride, stride, 7, hd, s + p); break;
    case 6: dot8_f16(q, k + p * stride, stride, 6, hd, s + p); break;
    case 5: dot8_f16(q, k + p * stride, stride, 5, hd, s + p); break;
    case 4: dot8_f16(q, k + p * stride, stride, 4, hd, s + p); break;
    case 3: dot8_f16(q, k + p * stride, stride, 3, hd, s + p); break;
    case 2: dot8_f16(q, k + p * stride, stride, 2, hd, s + p); break;
    case 1: dot8_f16(q, k + p * stride, stride, 1, hd, s + p); break;
    default: break;
    }
}

/* acc[0..hd) = sum over p < n of w[p] v[p * stride ..], the columns in
 * registers, hd a multiple of 16. Up to 64 columns (4 vectors), even and
 * odd positions go to two sets of accumulators, added at the end: with one,
 * each position waited on the last's FMAs. */
TGT static void axpy_rows_f16_avx512(float *acc, const float *w, const uint16_t *v, int64_t stride, int n, int hd) {
#define VV(p, i) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + (int64_t)(p) * stride + d0 + 16 * (i))))
    for (int d0 = 0; d0 < hd; d0 += 128) {
        const int k = hd - d0 < 128 ? (hd - d0) / 16 : 8;
        __m512 a[8], b[4];
        for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_ps();
        for (int i = 0; i < 4; i++) b[i] = _mm512_setzero_ps();
        int p = 0;
        if (k <= 4)
            for (; p + 1 < n; p += 2) {
                const __m512 wa = _mm512_set1_ps(w[p]), wb = _mm512_set1_ps(w[p + 1]);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++)
                    if (i < k) a[i] = _mm512_fmadd_ps(wa, VV(p, i), a[i]), b[i] = _mm512_fmadd_ps(wb, VV(p + 1, i), b[i]);
            }
        for (; p < n; p++) {
            const __m512 wv = _mm512_set1_ps(w[p]);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                if (i < k) a[i] = _mm512_fmadd_ps(wv, VV(p, i), a[i]);
        }
        for (int i = 0; i < k; i++) _mm512_storeu_ps(acc + d0 + 16 * i, i < 4 ? _mm512_add_ps(a[i], b[i]) : a[i]);
    }
#undef VV
}

/* Softmax numerators of n raw scores in place (scaled, soft-capped where
 * softcap > 0, their max *mx subtracted, expf), as the scalar loop computes
 * each; the returned sum (in double) adds them 16 lanes at a time. */
TGT static double softmax_avx512(float *x, int64_t n, float scale, float softcap, float *mx) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    if (softcap > 0) { /* tanhf: libm, one at a time */
        float top = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            x[i] = softcap * tanhf(x[i] * scale / softcap);
            top = x[i] > top ? x[i] : top;
        }
        m = _mm512_set1_ps(top);
    } else {
        const __m512 sv = _mm512_set1_ps(scale);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
            const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sv);
            _mm512_mask_storeu_ps(x + i, k, v);
            m = _mm512_mask_max_ps(m, k, m, v);
        }
        m = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    }
    *mx = _mm512_cvtss_f32(m);
    __m512i tab[4];
    exp_tab(tab);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m), tab));
        _mm512_mask_storeu_ps(x + i, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* Chunk [c0, c0 + n) of head h for query token t of a: the max *m and the
 * sum *s of its softmax numerators, and acc[hd], their products with V
 * (unnormalized). w: n floats of scratch. */
TGT static void attn_chunk_avx512(const tnd_attn_args *a, int t, int h, int c0, int n, float *w, float *acc,
                                  float *m, double *s) {
    const int hd = a->head_dim, kvh = h / (a->n_head / a->n_kv_head);
    const int64_t stride = (int64_t)a->n_kv_head * hd, off = (int64_t)c0 * stride + (int64_t)kvh * hd;
    scores_f16_avx512(a->q + ((int64_t)t * a->n_head + h) * hd, a->k + off, stride, n, hd, w);
    *s = softmax_avx512(w, n, a->scale, a->softcap, m);
    axpy_rows_f16_avx512(acc, w, a->v + off, stride, n, hd);
}

#undef TGT
#undef TGTI
#endif

/* The same expf, silu and softmax exponentials on AVX2 (a batched round's
 * silu and softmax on a 2-core AVX2 EPYC were ~7% of its time through libm):
 * four doubles a vector, the table read by a gather. */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma")))
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

TGT static void exp_sub_avx2(float *x, float m, int64_t n) {
    const __m256 mv = _mm256_set1_ps(m);
    for (int64_t i = 0; i < n; i += 8) store8_k(x + i, exp8_avx2(_mm256_sub_ps(load8_k(x + i, n - i), mv)), n - i);
}

TGT static void silu_mul_avx2(const float *g, const float *u, float *out, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 gv = load8_k(g + i, n - i);
        const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        store8_k(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), load8_k(u + i, n - i)), n - i);
    }
}
#undef TGT
#undef TGTI
#endif

/* The ISA of the vector expf (AVX-512 or AVX2) and of AVX-512's RMSNorm
 * and RoPE: the best here, scalar when tests force it (tnd_cpu_ops_scalar). */
static tnd_cpu_isa_id exp_isa(void) { return tnd_cpu_ops_scalar ? TND_ISA_SCALAR : tnd_cpu_isa_best(); }

void tnd_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double ss = 0;
#if defined(__x86_64__)
    /* the scalar sum is one chain of dependent additions: a batched
     * round's per-token serial work */
    if (exp_isa() == TND_ISA_AVX512) ss = sumsq_avx512(x, n);
    else
#endif
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv;
}

/* The cos and sin of one position's angles, kept per thread: every layer
 * rotates q and k at the same positions with the same parameters, so a
 * round computes each table once instead of 2 x n_layer times (pow, cos and
 * sin per pair were a per-token cost that batched rounds do not share). A
 * few entries, as a batched round holds several sequences' positions: 16,
 * so that a batched prompt of up to 16 positions a sequence (4 sequences'
 * are 64 tokens at positions 0..15 four times) computes each once; with 8
 * every token of it recomputed its table. The values are the same as
 * computed in place. */
#define ROPE_SLOTS 16
#define ROPE_MAX_HALF 256
typedef struct rope_slot {
    int pos, n_rot;
    float base, scale;
    float cs[2 * ROPE_MAX_HALF];
} rope_slot;
static _Thread_local rope_slot g_rope[ROPE_SLOTS];
static _Thread_local int g_rope_init, g_rope_next;

static const float *rope_table(int pos, int n_rot, float freq_base, float freq_scale) {
    const int half = n_rot / 2;
    if (half > ROPE_MAX_HALF) return NULL;
    if (!g_rope_init) {
        for (int k = 0; k < ROPE_SLOTS; k++) g_rope[k].n_rot = -1;
        g_rope_init = 1;
    }
    for (int k = 0; k < ROPE_SLOTS; k++) {
        const rope_slot *e = &g_rope[k];
        if (e->pos == pos && e->n_rot == n_rot && e->base == freq_base && e->scale == freq_scale) return e->cs;
    }
    rope_slot *e = &g_rope[g_rope_next];
    g_rope_next = (g_rope_next + 1) % ROPE_SLOTS;
    e->pos = pos, e->n_rot = n_rot, e->base = freq_base, e->scale = freq_scale;
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * freq_scale * pow((double)freq_base, -2.0 * i / n_rot);
        e->cs[2 * i] = (float)cos(theta);
        e->cs[2 * i + 1] = (float)sin(theta);
    }
    return e->cs;
}

void tnd_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, int pos,
                  float freq_base, float freq_scale, bool neox) {
    int half = n_rot / 2;
    const float *cs = rope_table(pos, n_rot, freq_base, freq_scale);
#if defined(__x86_64__)
    if (cs && !neox && n_rot % 16 == 0 && exp_isa() == TND_ISA_AVX512) {
        for (int h = 0; h < n_heads; h++) rope_pairs_avx512(x + (int64_t)h * head_dim, cs, n_rot);
        return;
    }
#endif
    for (int i = 0; i < half; i++) {
        float c, s;
        if (cs) {
            c = cs[2 * i];
            s = cs[2 * i + 1];
        } else {
            double theta = (double)pos * freq_scale * pow((double)freq_base, -2.0 * i / n_rot);
            c = (float)cos(theta);
            s = (float)sin(theta);
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

typedef struct {
    const tnd_attn_args *a; /* n attentions of one op's shape */
    int n;
} attn_task;

/* Job j of attention a: query token j / n_head, head j % n_head (AVX2 and
 * scalar). */
static void attn_one(const tnd_attn_args *a, int job, float *scores, float *acc,
                     float (*dot)(const float *, const uint16_t *, int),
                     void (*axpy)(float *, float, const uint16_t *, int), tnd_cpu_isa_id eisa) {
    (void)eisa; /* x86 only */
    const int hd = a->head_dim, group = a->n_head / a->n_kv_head;
    const int64_t kv_stride = (int64_t)a->n_kv_head * hd;
    int t = job / a->n_head, h = job % a->n_head, kvh = h / group;
    int pos = a->pos0 + t;
    int lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const float *q = a->q + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
    float mx = -INFINITY;
    for (int p = lo; p <= pos; p++) {
        float s = dot(q, a->k + (int64_t)p * kv_stride + (int64_t)kvh * hd, hd) * a->scale;
        if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
        scores[p] = s;
        if (s > mx) mx = s;
    }
    double sum = 0;
#if defined(__x86_64__)
    if (eisa == TND_ISA_AVX512) exp_sub_avx512(scores + lo, mx, pos - lo + 1);
    else if (eisa == TND_ISA_AVX2) exp_sub_avx2(scores + lo, mx, pos - lo + 1);
    else
#endif
        for (int p = lo; p <= pos; p++) scores[p] = expf(scores[p] - mx);
    for (int p = lo; p <= pos; p++) sum += scores[p];
#if defined(__x86_64__)
    if (axpy == axpy_f16_avx2) axpy_rows_f16_avx2(acc, scores, a->v + (int64_t)kvh * hd, kv_stride, lo, pos, hd);
    else
#endif
    {
        memset(acc, 0, sizeof(float) * (size_t)hd);
        for (int p = lo; p <= pos; p++) axpy(acc, scores[p], a->v + (int64_t)p * kv_stride + (int64_t)kvh * hd, hd);
    }
    float inv = (float)(1.0 / sum);
    float *o = a->out + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
}

/* The (token, head) jobs of all n attentions dealt round-robin over the
 * threads, as one region. */
static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *tk = (const attn_task *)arg;
    const int hd = tk->a[0].head_dim;
    float (*dot)(const float *, const uint16_t *, int) = dot_f16_scalar;
    void (*axpy)(float *, float, const uint16_t *, int) = axpy_f16_scalar;
#if defined(__x86_64__)
    if (!tnd_cpu_ops_scalar && hd % 16 == 0 && tnd_cpu_isa_id_current() >= TND_ISA_AVX2) {
        dot = dot_f16_avx2;
        axpy = axpy_f16_avx2;
    }
#endif
    const tnd_cpu_isa_id eisa = exp_isa();
    int n_pos_max = 0;
    for (int r = 0; r < tk->n; r++) n_pos_max = TND_MAX(n_pos_max, tk->a[r].pos0 + tk->a[r].n_tok);
    /* the thread's reusable scratch (a malloc per call, freed at once, can
     * make glibc trim and re-fault a thread's arena every decode step) */
    float *scores = tnd_cpu_tls_buf(1, sizeof(float) * (size_t)n_pos_max + sizeof(float) * (size_t)hd);
    if (!scores) return; /* cannot happen in practice; output stays unwritten */
    float *acc = scores + n_pos_max;
    for (int r = 0, base = 0; r < tk->n; r++) {
        const tnd_attn_args *a = &tk->a[r];
        const int total = a->n_tok * a->n_head;
        for (int job = ((ith - base) % nth + nth) % nth; job < total; job += nth)
            attn_one(a, job, scores, acc, dot, axpy, eisa);
        base += total;
    }
}

#if defined(__x86_64__)
/* ---- AVX-512: K and V rows read once for a group of heads ----------------
 * A unit is (attention, query token, kv head): the n_head / n_kv_head heads
 * sharing the kv head read each chunk of K and V rows while it is in cache,
 * where a job per head read the cache once per head (at long contexts from
 * DRAM, 3-8 times over). Positions go in chunks of ATTN_CHUNK from the
 * first attended one; each chunk gives per head its softmax's max, sum and
 * unnormalized output, and a head's chunks combine in order (attn_combine),
 * so the bits are the same whichever thread computed a chunk and however
 * the work was split (attn_wide): a unit an item where there are enough,
 * else a head an item (short contexts: one chunk each) or a chunk an item
 * and the combine as a second run (long contexts, few tokens: decode). */
#define ATTN_CHUNK 256

/* A head's output from its C chunks: max m, sum s (C each), unnormalized
 * acc (C rows of hd). One chunk: acc / s, as one pass computes it. */
static void attn_combine(int C, int hd, const float *m, const double *s, const float *acc, float *out) {
    if (C == 1) {
        const float inv = (float)(1.0 / s[0]);
        for (int d = 0; d < hd; d++) out[d] = acc[d] * inv;
        return;
    }
    float M = m[0];
    for (int c = 1; c < C; c++) M = m[c] > M ? m[c] : M;
    double S = 0;
    for (int d = 0; d < hd; d++) out[d] = 0;
    for (int c = 0; c < C; c++) {
        if (m[c] == -INFINITY && M != -INFINITY) continue; /* weight 0 (its own numerators are NaN) */
        const float f = tnd_cpu_expf(m[c] - M);
        S += (double)f * s[c];
        for (int d = 0; d < hd; d++) out[d] += f * acc[(int64_t)c * hd + d];
    }
    const float inv = (float)(1.0 / S);
    for (int d = 0; d < hd; d++) out[d] *= inv;
}

enum { WIDE_UNIT, WIDE_HEAD, WIDE_CHUNK, WIDE_COMBINE };
#define WIDE_ITEMS (1 << 18) /* items a pool run: its limit is 2^20 - 1 */
#define WIDE_SHARED_MAX ((size_t)16 << 20) /* bytes of chunk partials shared by a call's items */

typedef struct {
    const tnd_attn_args *a;
    int n, kind, G, c_max;
    int n_unit, base; /* base: the first item of this run (runs of at most WIDE_ITEMS) */
    /* WIDE_CHUNK, WIDE_COMBINE: unit u's chunks are items first[u] ..
     * first[u + 1] - 1; its partials rows G * first[u] .., head-major */
    const int *first;
    float *pm, *pacc;
    double *ps;
} wide_task;

/* Unit u: its attention, query token and kv head; its positions [*lo, *lo + *np). */
static const tnd_attn_args *wide_unit(const wide_task *w, int u, int *t, int *kvh, int *lo, int *np) {
    int r = 0;
    for (; r < w->n && u >= w->a[r].n_tok * w->a[r].n_kv_head; r++) u -= w->a[r].n_tok * w->a[r].n_kv_head;
    const tnd_attn_args *a = &w->a[r];
    *t = u / a->n_kv_head, *kvh = u % a->n_kv_head;
    const int pos = a->pos0 + *t;
    *lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    *np = pos - *lo + 1;
    return a;
}

static void wide_item(void *arg, int i, int n) {
    (void)n;
    const wide_task *w = arg;
    i += w->base;
    const int G = w->G;
    if (w->kind == WIDE_COMBINE) { /* item: (unit, head) */
        int t, kvh, lo, np;
        const int u = i / G, g = i % G;
        const tnd_attn_args *a = wide_unit(w, u, &t, &kvh, &lo, &np);
        const int hd = a->head_dim, C = w->first[u + 1] - w->first[u];
        const int64_t row = (int64_t)G * w->first[u] + (int64_t)g * C;
        attn_combine(C, hd, w->pm + row, w->ps + row, w->pacc + row * hd,
                     a->out + ((int64_t)t * a->n_head + kvh * G + g) * hd);
        return;
    }
    int u = i, g0 = 0, g1 = G, c0 = 0, c1;
    if (w->kind == WIDE_HEAD) u = i / G, g0 = i % G, g1 = g0 + 1;
    if (w->kind == WIDE_CHUNK) { /* the unit whose chunks hold item i */
        int lo_u = 0, hi_u = w->n_unit - 1;
        while (lo_u < hi_u) {
            const int mid = (lo_u + hi_u + 1) / 2;
            if (w->first[mid] <= i) lo_u = mid;
            else hi_u = mid - 1;
        }
        u = lo_u, c0 = i - w->first[u];
    }
    int t, kvh, lo, np;
    const tnd_attn_args *a = wide_unit(w, u, &t, &kvh, &lo, &np);
    const int hd = a->head_dim, C = (np + ATTN_CHUNK - 1) / ATTN_CHUNK;
    c1 = w->kind == WIDE_CHUNK ? c0 + 1 : C;
    /* scratch: the scores of a chunk; the partials of this item's heads */
    const int rows = w->kind == WIDE_CHUNK ? 0 : (g1 - g0) * C;
    double *ls = tnd_cpu_tls_buf(1, sizeof(double) * (size_t)rows +
                                        sizeof(float) * ((size_t)ATTN_CHUNK + (size_t)rows * (hd + 1)));
    if (!ls) return; /* cannot happen in practice; output stays unwritten */
    float *sc = (float *)(ls + rows), *lacc = sc + ATTN_CHUNK, *lm = lacc + (size_t)rows * hd; /* doubles first: aligned */
    for (int c = c0; c < c1; c++) {
        const int p0 = lo + c * ATTN_CHUNK, pn = TND_MIN(ATTN_CHUNK, np - c * ATTN_CHUNK);
        for (int g = g0; g < g1; g++) {
            int64_t r; /* the partials' row */
            float *pa, *pm;
            double *ps;
            if (w->kind == WIDE_CHUNK) {
                r = (int64_t)G * w->first[u] + (int64_t)g * C + c;
                pa = w->pacc + r * hd, pm = w->pm + r, ps = w->ps + r;
            } else {
                r = (int64_t)(g - g0) * C + c;
                pa = lacc + r * hd, pm = lm + r, ps = ls + r;
            }
            attn_chunk_avx512(a, t, kvh * G + g, p0, pn, sc, pa, pm, ps);
        }
    }
    if (w->kind != WIDE_CHUNK)
        for (int g = g0; g < g1; g++) {
            const int64_t r = (int64_t)(g - g0) * C;
            attn_combine(C, hd, lm + r, ls + r, lacc + r * hd, a->out + ((int64_t)t * a->n_head + kvh * G + g) * hd);
        }
}

static void wide_runs(tnd_pool *pool, wide_task *w, int64_t n_items) {
    for (w->base = 0; w->base < n_items; w->base += WIDE_ITEMS)
        tnd_pool_run_n(pool, wide_item, w, (int)TND_MIN(WIDE_ITEMS, n_items - w->base));
}

/* The AVX-512 attention of n attentions of one shape (see above). */
static void attn_wide(tnd_pool *pool, const tnd_attn_args *a, int n) {
    wide_task w = {.a = a, .n = n, .G = a[0].n_head / a[0].n_kv_head};
    int64_t n_items = 0; /* chunks of all units */
    for (int r = 0; r < n; r++) {
        w.n_unit += a[r].n_tok * a[r].n_kv_head;
        for (int t = 0; t < a[r].n_tok; t++) {
            const int pos = a[r].pos0 + t, lo = a[r].window > 0 && pos - a[r].window + 1 > 0 ? pos - a[r].window + 1 : 0;
            const int C = (pos - lo + ATTN_CHUNK) / ATTN_CHUNK;
            w.c_max = TND_MAX(w.c_max, C);
            n_items += (int64_t)C * a[r].n_kv_head;
        }
    }
    if (w.n_unit < 1) return;
    const int nth = pool ? tnd_pool_size(pool) : 1;
    /* units an item where there are 2 a thread and none longer than half a
     * thread's share of the chunks (one long sequence among short ones
     * would hold its thread while the others wait) */
    w.kind = w.n_unit >= 2 * nth && (int64_t)w.c_max * 2 * nth <= n_items ? WIDE_UNIT
             : w.c_max == 1                                                 ? WIDE_HEAD
                                                                            : WIDE_CHUNK;
    if (w.kind == WIDE_CHUNK) {
        /* the chunks' partials in the caller's scratch, shared with the
         * workers for this call */
        const size_t rows = (size_t)n_items * w.G, hd = (size_t)a[0].head_dim;
        const size_t bytes = rows * (sizeof(double) + sizeof(float) * (hd + 1)) + sizeof(int) * (size_t)(w.n_unit + 1);
        /* kept by the thread for its next calls; beyond WIDE_SHARED_MAX
         * (one sequence of qwen3-14b's shape past ~200K positions), units
         * an item, each with partials of its own */
        char *buf = bytes <= WIDE_SHARED_MAX ? tnd_cpu_tls_buf(0, bytes) : NULL;
        if (!buf) {
            w.kind = WIDE_UNIT;
        } else { /* doubles first (aligned), then the floats, then first[] */
            w.ps = (double *)buf;
            w.pm = (float *)(w.ps + rows);
            w.pacc = w.pm + rows;
            int *first = (int *)(w.pacc + rows * hd);
            n_items = 0;
            for (int u = 0; u < w.n_unit; u++) {
                int t, kvh, lo, np;
                wide_unit(&w, u, &t, &kvh, &lo, &np);
                first[u] = (int)n_items;
                n_items += (np + ATTN_CHUNK - 1) / ATTN_CHUNK;
            }
            first[w.n_unit] = (int)n_items;
            w.first = first;
            wide_runs(pool, &w, n_items);
            w.kind = WIDE_COMBINE;
            wide_runs(pool, &w, w.n_unit * w.G);
            return;
        }
    }
    wide_runs(pool, &w, w.kind == WIDE_HEAD ? w.n_unit * w.G : w.n_unit);
}
#endif

void tnd_cpu_attn_many(tnd_pool *pool, const tnd_attn_args *a, int n) {
    if (n < 1) return;
#if defined(__x86_64__)
    if (!tnd_cpu_ops_scalar && a[0].head_dim % 16 == 0 && tnd_cpu_isa_id_current() == TND_ISA_AVX512) {
        attn_wide(pool, a, n);
        return;
    }
#endif
    attn_task t = {a, n};
    tnd_pool_run(pool, attn_worker, &t);
}

void tnd_cpu_attn(tnd_pool *pool, const tnd_attn_args *a) { tnd_cpu_attn_many(pool, a, 1); }

void tnd_cpu_silu_mul(const float *g, const float *u, float *out, int64_t n) {
#if defined(__x86_64__)
    const tnd_cpu_isa_id eisa = exp_isa();
    if (eisa == TND_ISA_AVX512) {
        silu_mul_avx512(g, u, out, n);
        return;
    }
    if (eisa == TND_ISA_AVX2) {
        silu_mul_avx2(g, u, out, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void tnd_cpu_gelu_mul(const float *g, const float *u, float *out, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

void tnd_cpu_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void tnd_cpu_add_bias(float *y, const float *b, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * n + i] += b[i];
}

void tnd_cpu_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

#if defined(__x86_64__)
/* F16C rounds to nearest even as tnd_fp32_to_fp16 does; only NaNs differ
 * (F16C keeps payload bits), so a group of 8 holding one goes the scalar
 * way. The KV store converts every token's k and v each layer. */
__attribute__((target("avx2,f16c"))) static int64_t f32_to_f16_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int k = 0; k < 8; k++) y[i + k] = tnd_fp32_to_fp16(x[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}
#endif

void tnd_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (!tnd_cpu_ops_scalar && tnd_cpu_isa_best() >= TND_ISA_AVX2) i = f32_to_f16_f16c(x, y, n);
#endif
    for (; i < n; i++) y[i] = tnd_fp32_to_fp16(x[i]);
}

void tnd_cpu_topk(const float *x, int n, int k, int *idx) {
    /* Insertion into a sorted list of k: k is small (experts per token). */
    int m = 0;
    for (int i = 0; i < n; i++) {
        int p = m;
        while (p > 0 && x[idx[p - 1]] < x[i]) p--;
        if (p >= k) continue;
        int end = m < k ? m : k - 1;
        for (int j = end; j > p; j--) idx[j] = idx[j - 1];
        idx[p] = i;
        if (m < k) m++;
    }
}
