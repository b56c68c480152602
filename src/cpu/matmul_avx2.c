/* AVX2 + FMA + F16C kernels: activation quantizers and weight x activation
 * products for the block formats.
 *
 * Built without -march flags: every function carries the target attribute,
 * and matmul.c only calls them after checking the CPU (cpuid + XCR0).
 *
 * Products (decode and small n_tok): one weight row at a time, its blocks
 * unpacked once into int8 vectors and dotted with up to 4 tokens' activations
 * (so weights are read once per call for n_tok <= 4 and from L1 after that).
 * Per block the integer sum is exact (as in the reference); the float sum over
 * blocks runs in 8 lanes with FMA, so it differs from the sequential
 * reference only by rounding (tolerance in tests/test_cpu_matmul.c).
 *
 * Signed x signed int8 products use vpmaddubsw (unsigned x signed) on |w| and
 * sign(a, w): the classic sign transfer, exact since |w| <= 128, |a| <= 127. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/matmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c"), always_inline))

/* Largest number of tokens one weight unpack is shared by. */
#define NT_MAX 4

/* ---- helpers ---------------------------------------------------------------- */

TGTI float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGTI int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

TGTI float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

TGTI float h2f(uint16_t h) { return _cvtsh_ss(h); } /* exact, like tnd_fp16_to_fp32 */

/* int32 dot of 32 unsigned bytes w (<= 127 so pairs cannot saturate) and 32
 * signed bytes a, in 8 lanes. */
TGTI __m256i dot_us(__m256i w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high ones
 * (the order of elements j and j+16 in the 32-blocks). */
TGTI __m256i unpack_nibbles(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* round half away from zero, exactly like roundf: t = trunc(v); add sign(v)
 * where |v - t| >= 0.5 (v - t is exact). */
TGTI __m256 round_away(__m256 v) {
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 sgnmask = _mm256_set1_ps(-0.0f);
    __m256 frac = _mm256_andnot_ps(sgnmask, _mm256_sub_ps(v, t));
    __m256 need = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sgnmask));
    return _mm256_add_ps(t, _mm256_and_ps(need, one));
}

/* 32 int32 (in 4 vectors, element order) -> 32 int8. */
TGTI __m256i pack_i32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    /* packs works per 128-bit lane: dword order is a0 b0 c0 d0 a1 b1 c1 d1 */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

TGTI __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* ---- activation quantizers (bit-exact with quant/ref_legacy.c, ref_kquants.c) */

/* Quantizes 32 floats with multiplier id into int8 q; returns the int32 sum. */
TGTI __m256i quant32(const float *x, float id, int8_t *q) {
    __m256 vid = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x), vid)));
    __m256i i1 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid)));
    __m256i i2 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid)));
    __m256i i3 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid)));
    _mm256_storeu_si256((__m256i *)q, pack_i32_i8(i0, i1, i2, i3));
    return _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
}

TGTI float amax32(const float *x) {
    __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(_mm256_loadu_ps(x)), abs_ps(_mm256_loadu_ps(x + 8))),
                             _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 16)), abs_ps(_mm256_loadu_ps(x + 24))));
    return hmax_ps(m);
}

TGT static void quant_q8_0(const float *x, void *vy, int64_t k) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float d = amax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant32(x, id, y[i].qs);
        y[i].d = tnd_fp32_to_fp16(d);
    }
}

TGT static void quant_q8_1(const float *x, void *vy, int64_t k) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float d = amax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = hsum_epi32(quant32(x, id, y[i].qs));
        y[i].d = tnd_fp32_to_fp16(d);
        y[i].s = tnd_fp32_to_fp16(d * (float)sum);
    }
}

TGT static void quant_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = vy;
    for (int64_t b = 0; b < k / TND_QK_K; b++, x += TND_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < TND_QK_K; j += 32) amax = fmaxf(amax, amax32(x + j));
        float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = amax / 127.0f;
        for (int j = 0; j < TND_QK_K; j += 32) quant32(x + j, iscale, y[b].qs + j);
        /* bsums: pairs of 16-quant sums via maddubs with ones, then madd. */
        for (int j = 0; j < TND_QK_K; j += 64) {
            __m256i q0 = _mm256_loadu_si256((const __m256i *)(y[b].qs + j));
            __m256i q1 = _mm256_loadu_si256((const __m256i *)(y[b].qs + j + 32));
            __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
            __m256i s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q0), ones16); /* 8 x sum of 4 */
            __m256i s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q1), ones16);
            __m256i h = _mm256_hadd_epi32(s0, s1); /* sums of 8: s0[0..3] s1[0..3] | s0[4..7] s1[4..7] per lane */
            h = _mm256_hadd_epi32(h, h);           /* sums of 16 */
            /* lane 0: s0g0 s0g1 s1g0 s1g1 ... ; lane 1 the same for the upper halves */
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, h);
            /* q0 covers elements j..j+31: its 16-groups are (lane0 of s0: bytes 0-15) and
             * (lane1 of s0: bytes 16-31). */
            y[b].bsums[j / 16 + 0] = (int16_t)t[0];
            y[b].bsums[j / 16 + 1] = (int16_t)t[4];
            y[b].bsums[j / 16 + 2] = (int16_t)t[1];
            y[b].bsums[j / 16 + 3] = (int16_t)t[5];
        }
    }
}

/* ---- per-row kernels --------------------------------------------------------
 * Each processes one weight row against nt <= NT_MAX activation rows; the
 * always_inline + constant nt lets the compiler keep accumulators in
 * registers. ROW_LOOP expands the row and token-chunk loops around one. */

#define ROW_LOOP(NAME, ROWFN)                                                                           \
    TGT static void NAME(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq,         \
                         size_t x_row, int64_t nt, float *y, int64_t ys) {                               \
        for (int64_t r = 0; r < nr; r++) {                                                             \
            const void *w = (const char *)W + (size_t)r * w_row;                                       \
            int64_t t = 0;                                                                             \
            for (; t + 4 <= nt; t += 4) ROWFN(n_in, w, (const char *)xq + t * x_row, x_row, 4, y + t * ys + r, ys); \
            switch (nt - t) {                                                                          \
            case 3: ROWFN(n_in, w, (const char *)xq + t * x_row, x_row, 3, y + t * ys + r, ys); break;   \
            case 2: ROWFN(n_in, w, (const char *)xq + t * x_row, x_row, 2, y + t * ys + r, ys); break;   \
            case 1: ROWFN(n_in, w, (const char *)xq + t * x_row, x_row, 1, y + t * ys + r, ys); break;   \
            default: break;                                                                            \
            }                                                                                          \
        }                                                                                              \
    }

/* Q4_0 x Q8_0: w = q - 8. */
TGTI void row_q4_0(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q4_0 *w = vw;
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_sub_epi8(unpack_nibbles(w[i].qs), _mm256_set1_epi8(8));
        __m256i aq = _mm256_sign_epi8(q, q);
        float dw = h2f(w[i].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_0 *a = (const block_q8_0 *)(xq + t * xs) + i;
            __m256i av = _mm256_loadu_si256((const __m256i *)a->qs);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(av, q)), _mm256_set1_epi16(1));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(a->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_LOOP(mm_q4_0, row_q4_0)

/* Q4_1 x Q8_1: w = d q + m; the m part is m * s of the activation block. */
TGTI void row_q4_1(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q4_1 *w = vw;
    __m256 acc[NT_MAX];
    float accm[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps(), accm[t] = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = unpack_nibbles(w[i].qs);
        float dw = h2f(w[i].d), mw = h2f(w[i].m);
        for (int t = 0; t < nt; t++) {
            const block_q8_1 *a = (const block_q8_1 *)(xq + t * xs) + i;
            __m256i p = dot_us(q, _mm256_loadu_si256((const __m256i *)a->qs));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(a->d)), acc[t]);
            accm[t] += mw * h2f(a->s);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]) + accm[t];
}
ROW_LOOP(mm_q4_1, row_q4_1)

/* Q8_0 x Q8_0. */
TGTI void row_q8_0(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q8_0 *w = vw;
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)w[i].qs);
        __m256i aq = _mm256_sign_epi8(q, q);
        float dw = h2f(w[i].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_0 *a = (const block_q8_0 *)(xq + t * xs) + i;
            __m256i av = _mm256_loadu_si256((const __m256i *)a->qs);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(av, q)), _mm256_set1_epi16(1));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(a->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_LOOP(mm_q8_0, row_q8_0)

/* The 8 6-bit scales and mins of a Q4_K / Q5_K super-block, as bytes. */
TGTI void k4_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8]) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t a = u0 & 0x3f3f3f3fu, b = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t c = u1 & 0x3f3f3f3fu, d = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    memcpy(sc, &a, 4);
    memcpy(sc + 4, &b, 4);
    memcpy(m, &c, 4);
    memcpy(m + 4, &d, 4);
}

/* Q4_K x Q8_K: isum = sum_g sc_g * dot_g, msum = sum_g m_g * bsum_g. */
TGTI void row_q4_K(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q4_K *w = vw;
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        uint8_t sc[8], mn[8];
        k4_scales(w[b].scales, sc, mn);
        float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
        /* mins as 16 int16 (each twice: bsums come in 16-groups) */
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)mn),
                                                             _mm_loadl_epi64((const __m128i *)mn)));
        __m256i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * j));
            __m256i lo = _mm256_and_si256(qb, _mm256_set1_epi8(0x0f));
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), _mm256_set1_epi8(0x0f));
            __m256i s_lo = _mm256_set1_epi16(sc[2 * j]), s_hi = _mm256_set1_epi16(sc[2 * j + 1]);
            for (int t = 0; t < nt; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * j));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * j + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s_lo);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s_hi);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
            }
        }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), m16);
            /* d*isum - dmin*msum, both scaled by the activation d */
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(a->d * d), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(a->d * dmin), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_LOOP(mm_q4_K, row_q4_K)

/* Q6_K x Q8_K: q = u - 32 with u in [0, 63]; the -32 is folded in through the
 * activation's 16-group sums: isum = sum_g sc_g (dot(u, a)_g - 32 bsum_g). */
TGTI void row_q6_K(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q6_K *w = vw;
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        __m256i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            u[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int c = 0; c < 4; c++) {
                /* scales of the two 16-groups of this 32-run: low half, high half */
                int g = 8 * h + 2 * c;
                __m256i s = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[g + 1]), _mm_set1_epi16(w[b].scales[g]));
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                    __m256i av = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * c));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], av), s));
                }
            }
        }
        float d = h2f(w[b].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), sc16);
            __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(a->d * d), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_LOOP(mm_q6_K, row_q6_K)

void tnd_cpu_kernels_avx2(tnd_cpu_kernels *k) {
    k->quant[TND_TYPE_Q8_0] = quant_q8_0;
    k->quant[TND_TYPE_Q8_1] = quant_q8_1;
    k->quant[TND_TYPE_Q8_K] = quant_q8_K;
    k->mm[TND_TYPE_Q4_0] = (tnd_mm_entry){mm_q4_0, TND_TYPE_Q8_0};
    k->mm[TND_TYPE_Q4_1] = (tnd_mm_entry){mm_q4_1, TND_TYPE_Q8_1};
    k->mm[TND_TYPE_Q8_0] = (tnd_mm_entry){mm_q8_0, TND_TYPE_Q8_0};
    k->mm[TND_TYPE_Q4_K] = (tnd_mm_entry){mm_q4_K, TND_TYPE_Q8_K};
    k->mm[TND_TYPE_Q6_K] = (tnd_mm_entry){mm_q6_K, TND_TYPE_Q8_K};
}
