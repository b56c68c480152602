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


/* ---- prefill (n_tok >= TND_GEMM_MIN_TOK) ------------------------------------
 * Groups of 8 weight rows are unpacked once into a common form: per element
 * an unsigned integer u (<= 63) or, for Q8_0, a signed byte; per row and
 * 16-element chunk a float scale d and min m, value = d * (u - off) - m with
 * a per-format integer offset off. The bytes are interleaved so that one
 * 32-byte vector holds 4 consecutive elements of each of the 8 rows; one
 * broadcast of 4 activation bytes and one vpmaddubsw then advance 8 rows at
 * once, and the int32 lanes of the result are the rows themselves, so the
 * chunk's scales apply with one FMA per 8 rows. The unpack cost is paid once
 * per 8 rows and shared by every token of the call.
 *
 * Integer sums are exact per chunk (u <= 31: four vpmaddubsw summed in int16
 * stay below 4*2*31*127 = 31496; u <= 63: two at a time), the offset is
 * removed in int32, so the only rounding is the float sum over chunks. */

/* Unpacks one row: u[n] bytes, d and m per 16-chunk. */
typedef void (*unpack_row_fn)(const void *w, int64_t n, uint8_t *u, float *d, float *m);

TGT static void unpack_q4_0(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q4_0 *w = vw;
    (void)m;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(u + 32 * i), unpack_nibbles(w[i].qs));
        d[2 * i] = d[2 * i + 1] = h2f(w[i].d);
    }
}

TGT static void unpack_q4_1(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q4_1 *w = vw;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(u + 32 * i), unpack_nibbles(w[i].qs));
        d[2 * i] = d[2 * i + 1] = h2f(w[i].d);
        m[2 * i] = m[2 * i + 1] = -h2f(w[i].m);
    }
}

/* The 32 fifth bits of a Q5 block as 0x10 bytes. */
TGTI __m256i q5_high(const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    /* byte j gets bits j*8..j*8+7 replicated, then each byte tests its bit */
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                    _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                       0x0202020202020202, 0x0303030303030303));
    __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

TGT static void unpack_q5_0(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q5_0 *w = vw;
    (void)m;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(u + 32 * i), _mm256_or_si256(unpack_nibbles(w[i].qs), q5_high(w[i].qh)));
        d[2 * i] = d[2 * i + 1] = h2f(w[i].d);
    }
}

TGT static void unpack_q5_1(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q5_1 *w = vw;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(u + 32 * i), _mm256_or_si256(unpack_nibbles(w[i].qs), q5_high(w[i].qh)));
        d[2 * i] = d[2 * i + 1] = h2f(w[i].d);
        m[2 * i] = m[2 * i + 1] = -h2f(w[i].m);
    }
}

TGT static void unpack_q8_0(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q8_0 *w = vw;
    (void)m;
    for (int64_t i = 0; i < n / 32; i++) {
        memcpy(u + 32 * i, w[i].qs, 32);
        d[2 * i] = d[2 * i + 1] = h2f(w[i].d);
    }
}

TGT static void unpack_mxfp4(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_mxfp4 *w = vw;
    (void)m;
    /* doubled E2M1 values + 12, so u is in [0, 24] */
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(u + 32 * i), _mm256_shuffle_epi8(lut, unpack_nibbles(w[i].qs)));
        d[2 * i] = d[2 * i + 1] = tnd_e8m0_to_fp32_half(w[i].e);
    }
}

TGT static void unpack_q2_K(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q2_K *w = vw;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < n / TND_QK_K; b++, u += TND_QK_K, d += 16, m += 16) {
        float D = h2f(w[b].d), M = h2f(w[b].dmin);
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * h));
            for (int s = 0; s < 4; s++)
                _mm256_storeu_si256((__m256i *)(u + 128 * h + 32 * s), _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3));
        }
        for (int g = 0; g < 16; g++) {
            d[g] = D * (float)(w[b].scales[g] & 0xF);
            m[g] = M * (float)(w[b].scales[g] >> 4);
        }
    }
}

TGT static void unpack_q3_K(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q3_K *w = vw;
    (void)m;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < n / TND_QK_K; b++, u += TND_QK_K, d += 16) {
        float D = h2f(w[b].d);
        __m256i hm = _mm256_loadu_si256((const __m256i *)w[b].hmask);
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                /* u = low + 4 * high: q + 4 with q = low - 4 (1 - high) */
                int bit = 4 * h + s;
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hm, bit), _mm256_set1_epi8(1));
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
                _mm256_storeu_si256((__m256i *)(u + 128 * h + 32 * s), _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2)));
            }
        }
        int8_t sc[16];
        tnd_get_scales_q3_K(w[b].scales, sc);
        for (int g = 0; g < 16; g++) d[g] = D * (float)sc[g];
    }
}

TGT static void unpack_q4_K(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q4_K *w = vw;
    for (int64_t b = 0; b < n / TND_QK_K; b++, u += TND_QK_K, d += 16, m += 16) {
        uint8_t sc[8], mn[8];
        k4_scales(w[b].scales, sc, mn);
        float D = h2f(w[b].d), M = h2f(w[b].dmin);
        for (int j = 0; j < 4; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * j));
            _mm256_storeu_si256((__m256i *)(u + 64 * j), _mm256_and_si256(q, _mm256_set1_epi8(0xF)));
            _mm256_storeu_si256((__m256i *)(u + 64 * j + 32),
                                _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0xF)));
        }
        for (int g = 0; g < 8; g++) {
            d[2 * g] = d[2 * g + 1] = D * (float)sc[g];
            m[2 * g] = m[2 * g + 1] = M * (float)mn[g];
        }
    }
}

TGT static void unpack_q5_K(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q5_K *w = vw;
    for (int64_t b = 0; b < n / TND_QK_K; b++, u += TND_QK_K, d += 16, m += 16) {
        uint8_t sc[8], mn[8];
        k4_scales(w[b].scales, sc, mn);
        float D = h2f(w[b].d), M = h2f(w[b].dmin);
        __m256i qh = _mm256_loadu_si256((const __m256i *)w[b].qh);
        for (int j = 0; j < 4; j++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * j));
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), _mm256_set1_epi8(1)), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), _mm256_set1_epi8(1)), 4);
            _mm256_storeu_si256((__m256i *)(u + 64 * j), _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi8(0xF)), h0));
            _mm256_storeu_si256((__m256i *)(u + 64 * j + 32),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0xF)), h1));
        }
        for (int g = 0; g < 8; g++) {
            d[2 * g] = d[2 * g + 1] = D * (float)sc[g];
            m[2 * g] = m[2 * g + 1] = M * (float)mn[g];
        }
    }
}

TGT static void unpack_q6_K(const void *vw, int64_t n, uint8_t *u, float *d, float *m) {
    const block_q6_K *w = vw;
    (void)m;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int64_t b = 0; b < n / TND_QK_K; b++, u += TND_QK_K, d += 16) {
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            uint8_t *o = u + 128 * h;
            _mm256_storeu_si256((__m256i *)o, _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)));
            _mm256_storeu_si256((__m256i *)(o + 32), _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)));
            _mm256_storeu_si256((__m256i *)(o + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)));
            _mm256_storeu_si256((__m256i *)(o + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)));
        }
        float D = h2f(w[b].d);
        for (int g = 0; g < 16; g++) d[g] = D * (float)w[b].scales[g];
    }
}

/* Unpacks up to 8 rows into the interleaved group layout (missing rows are
 * zero). buf: nc*128 quant bytes, then nc*8 scales d, then nc*8 mins m. */
TGT static void repack8(unpack_row_fn unpack, const char *W, size_t w_row, int rows, int64_t n, uint8_t *tmp,
                        uint8_t *q, float *d, float *m) {
    int64_t nc = n / TND_CHUNK;
    float *td = (float *)(tmp + n), *tm = td + nc;
    for (int r = 0; r < 8; r++) {
        if (r < rows) {
            memset(tm, 0, (size_t)nc * sizeof(float));
            unpack(W + (size_t)r * w_row, n, tmp, td, tm);
        } else {
            memset(tmp, 0, (size_t)n);
            memset(td, 0, (size_t)nc * sizeof(float));
            memset(tm, 0, (size_t)nc * sizeof(float));
        }
        for (int64_t c = 0; c < nc; c++) {
            uint32_t v[4];
            memcpy(v, tmp + TND_CHUNK * c, 16);
            uint8_t *o = q + 128 * c + 4 * r;
            memcpy(o, &v[0], 4);
            memcpy(o + 32, &v[1], 4);
            memcpy(o + 64, &v[2], 4);
            memcpy(o + 96, &v[3], 4);
            d[8 * c + r] = td[c];
            m[8 * c + r] = tm[c];
        }
    }
}

/* Activation chunk c of a row of act blocks: (bytes per block, header bytes,
 * chunks per block). */
#define ACT_Q8_0 34, 2, 2
#define ACT_Q8_1 36, 4, 2
#define ACT_Q8_K 292, 4, 16

TGTI int32_t load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* One tile: 8 rows (one group) x nt <= 4 tokens. */
TGTI void gemm_tile(int64_t nc, const uint8_t *q, const float *dv, const float *mv, const char *xq, size_t x_row,
                    const tnd_act_aux *aux, int64_t naux, int nt, float *y, int64_t ys, int rows,
                    const int AB, const int AH, const int CPB, const int OFF, const int SIX, const int SGN,
                    const int MIN) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t c = 0; c < nc; c++) {
        const uint8_t *qc = q + 128 * c;
        __m256i w0 = _mm256_load_si256((const __m256i *)qc), w1 = _mm256_load_si256((const __m256i *)(qc + 32));
        __m256i w2 = _mm256_load_si256((const __m256i *)(qc + 64)), w3 = _mm256_load_si256((const __m256i *)(qc + 96));
        __m256i a0w = w0, a1w = w1, a2w = w2, a3w = w3;
        if (SGN) {
            a0w = _mm256_sign_epi8(w0, w0), a1w = _mm256_sign_epi8(w1, w1);
            a2w = _mm256_sign_epi8(w2, w2), a3w = _mm256_sign_epi8(w3, w3);
        }
        __m256 d = _mm256_load_ps(dv + 8 * c);
        __m256 m = MIN ? _mm256_load_ps(mv + 8 * c) : d;
        int64_t off_a = (c / CPB) * AB + AH + (c % CPB) * TND_CHUNK;
        for (int t = 0; t < nt; t++) {
            const int8_t *a = (const int8_t *)(xq + t * x_row + off_a);
            __m256i b0 = _mm256_set1_epi32(load_i32(a)), b1 = _mm256_set1_epi32(load_i32(a + 4));
            __m256i b2 = _mm256_set1_epi32(load_i32(a + 8)), b3 = _mm256_set1_epi32(load_i32(a + 12));
            __m256i s;
            if (SGN) {
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0w, _mm256_sign_epi8(b0, w0)), ones);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1w, _mm256_sign_epi8(b1, w1)), ones);
                __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(a2w, _mm256_sign_epi8(b2, w2)), ones);
                __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(a3w, _mm256_sign_epi8(b3, w3)), ones);
                s = _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
            } else {
                __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, b0), _mm256_maddubs_epi16(w1, b1));
                __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w2, b2), _mm256_maddubs_epi16(w3, b3));
                if (SIX) s = _mm256_add_epi32(_mm256_madd_epi16(p01, ones), _mm256_madd_epi16(p23, ones));
                else s = _mm256_madd_epi16(_mm256_add_epi16(p01, p23), ones);
            }
            const tnd_act_aux *x = aux + t * naux + c;
            if (OFF) s = _mm256_sub_epi32(s, _mm256_set1_epi32(OFF * x->sa));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(x->da)), acc[t]);
            if (MIN) acc[t] = _mm256_fnmadd_ps(m, _mm256_set1_ps(x->dsa), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        if (rows == 8) _mm256_storeu_ps(y + t * ys, acc[t]);
        else {
            float tmp[8];
            _mm256_storeu_ps(tmp, acc[t]);
            memcpy(y + t * ys, tmp, (size_t)rows * sizeof(float));
        }
    }
}


/* Small n_tok for formats without a dedicated matvec kernel: each row is
 * unpacked once (vectorized) into u, d, m, then dotted 32 elements at a time
 * with up to 4 tokens; the int32 lanes 0-3 hold the first 16-chunk's partial
 * sums and lanes 4-7 the second's, so per-chunk scales apply lane-wise and the
 * integer offset is removed exactly from one lane of each half. */
TGTI void row_unpacked(int64_t n, const uint8_t *u, const float *dv, const float *mv, const char *xq, size_t x_row,
                       const tnd_act_aux *aux, int64_t naux, int nt, float *y, int64_t ys, const int AB,
                       const int AH, const int CPB, const int OFF, const int MIN) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t c = 0; c < n / TND_CHUNK; c += 2) {
        __m256i uv = _mm256_loadu_si256((const __m256i *)(u + TND_CHUNK * c));
        __m256 d = _mm256_set_m128(_mm_set1_ps(dv[c + 1]), _mm_set1_ps(dv[c]));
        __m256 m = MIN ? _mm256_set_m128(_mm_set1_ps(mv[c + 1]), _mm_set1_ps(mv[c])) : d;
        int64_t off_a = (c / CPB) * AB + AH + (c % CPB) * TND_CHUNK; /* c even: 32 contiguous bytes */
        for (int t = 0; t < nt; t++) {
            const tnd_act_aux *x = aux + t * naux + c;
            __m256i av = _mm256_loadu_si256((const __m256i *)(xq + t * x_row + off_a));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uv, av), ones);
            if (OFF) p = _mm256_sub_epi32(p, _mm256_setr_epi32(OFF * x[0].sa, 0, 0, 0, OFF * x[1].sa, 0, 0, 0));
            __m256 da = _mm256_set_m128(_mm_set1_ps(x[1].da), _mm_set1_ps(x[0].da));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(d, da), acc[t]);
            if (MIN) {
                /* the min term once per chunk: lane 0 of each half */
                __m256 dsa = _mm256_setr_ps(x[0].dsa, 0, 0, 0, x[1].dsa, 0, 0, 0);
                acc[t] = _mm256_fnmadd_ps(m, dsa, acc[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}

#define GEMM(NAME, UNPACK, ACT, OFF, SIX, SGN, MIN)                                                         \
    TGT static void NAME(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,  \
                         const tnd_act_aux *aux, int64_t nt, float *y, int64_t ys) {                           \
        int64_t nc = n_in / TND_CHUNK;                                                                      \
        /* group buffer: quants, d, m; then the unpack scratch */                                           \
        size_t gq = (size_t)nc * 128, gf = (size_t)nc * 8 * sizeof(float);                                  \
        uint8_t *buf = tnd_cpu_tls_buf(1, gq + 2 * gf + (size_t)n_in + 2 * (size_t)nc * sizeof(float) + 64); \
        if (!buf) {                                                                                         \
            for (int64_t t = 0; t < nt; t++)                                                                \
                for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;                                       \
            return;                                                                                         \
        }                                                                                                   \
        uint8_t *q = buf, *tmp = buf + gq + 2 * gf;                                                         \
        float *d = (float *)(buf + gq), *m = (float *)(buf + gq + gf);                                      \
        if (nt < TND_GEMM_MIN_TOK && !(SGN)) {                                                              \
            for (int64_t r = 0; r < nr; r++) {                                                              \
                memset(m, 0, (size_t)nc * sizeof(float));                                                   \
                UNPACK((const char *)W + (size_t)r * w_row, n_in, tmp, d, m);                               \
                for (int64_t t = 0; t < nt; t += 4) {                                                       \
                    int k = nt - t < 4 ? (int)(nt - t) : 4;                                                 \
                    const char *xt = (const char *)xq + t * x_row;                                          \
                    if (k == 4) row_unpacked(n_in, tmp, d, m, xt, x_row, aux + t * nc, nc, 4, y + t * ys + r, ys, ACT, OFF, MIN); \
                    else if (k == 3) row_unpacked(n_in, tmp, d, m, xt, x_row, aux + t * nc, nc, 3, y + t * ys + r, ys, ACT, OFF, MIN); \
                    else if (k == 2) row_unpacked(n_in, tmp, d, m, xt, x_row, aux + t * nc, nc, 2, y + t * ys + r, ys, ACT, OFF, MIN); \
                    else row_unpacked(n_in, tmp, d, m, xt, x_row, aux + t * nc, nc, 1, y + t * ys + r, ys, ACT, OFF, MIN); \
                }                                                                                           \
            }                                                                                               \
            return;                                                                                         \
        }                                                                                                   \
        for (int64_t r0 = 0; r0 < nr; r0 += 8) {                                                            \
            int rows = nr - r0 < 8 ? (int)(nr - r0) : 8;                                                    \
            repack8(UNPACK, (const char *)W + (size_t)r0 * w_row, w_row, rows, n_in, tmp, q, d, m);         \
            int64_t t = 0;                                                                                  \
            for (; t + 4 <= nt; t += 4)                                                                     \
                gemm_tile(nc, q, d, m, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, 4,            \
                          y + t * ys + r0, ys, rows, ACT, OFF, SIX, SGN, MIN);                              \
            switch (nt - t) {                                                                               \
            case 3: gemm_tile(nc, q, d, m, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, 3,        \
                              y + t * ys + r0, ys, rows, ACT, OFF, SIX, SGN, MIN); break;                   \
            case 2: gemm_tile(nc, q, d, m, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, 2,        \
                              y + t * ys + r0, ys, rows, ACT, OFF, SIX, SGN, MIN); break;                   \
            case 1: gemm_tile(nc, q, d, m, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, 1,        \
                              y + t * ys + r0, ys, rows, ACT, OFF, SIX, SGN, MIN); break;                   \
            default: break;                                                                                 \
            }                                                                                               \
        }                                                                                                   \
    }

GEMM(gemm_q4_0, unpack_q4_0, ACT_Q8_0, 8, 0, 0, 0)
GEMM(gemm_q4_1, unpack_q4_1, ACT_Q8_1, 0, 0, 0, 1)
GEMM(gemm_q5_0, unpack_q5_0, ACT_Q8_0, 16, 0, 0, 0)
GEMM(gemm_q5_1, unpack_q5_1, ACT_Q8_1, 0, 0, 0, 1)
GEMM(gemm_q8_0, unpack_q8_0, ACT_Q8_0, 0, 0, 1, 0)
GEMM(gemm_mxfp4, unpack_mxfp4, ACT_Q8_0, 12, 0, 0, 0)
GEMM(gemm_q2_K, unpack_q2_K, ACT_Q8_K, 0, 0, 0, 1)
GEMM(gemm_q3_K, unpack_q3_K, ACT_Q8_K, 4, 0, 0, 0)
GEMM(gemm_q4_K, unpack_q4_K, ACT_Q8_K, 0, 0, 0, 1)
GEMM(gemm_q5_K, unpack_q5_K, ACT_Q8_K, 0, 0, 0, 1)
GEMM(gemm_q6_K, unpack_q6_K, ACT_Q8_K, 32, 1, 0, 0)


/* ---- float weights (F32, F16, BF16) x F32 activations -----------------------
 * Tiles of 2 rows x up to 4 tokens: each converted weight vector serves 4
 * tokens, each activation vector 2 rows. Tail elements (n_in % 8) in scalar. */

TGTI __m256 load8_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }
TGTI __m256 load8_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
TGTI __m256 load8_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
TGTI float get_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
TGTI float get_f16(const void *p, int64_t i) { return h2f(((const uint16_t *)p)[i]); }
TGTI float get_bf16(const void *p, int64_t i) { return tnd_bf16_to_fp32(((const uint16_t *)p)[i]); }

#define FLOAT_KERNEL(NAME, LOAD8, GET, ES)                                                                   \
    TGTI void NAME##_tile(int64_t n, const char *w0, const char *w1, int nrow, const float *x, int64_t xs,   \
                          int nt, float *y, int64_t ys) {                                                    \
        __m256 acc[2][4];                                                                                    \
        for (int r = 0; r < 2; r++)                                                                          \
            for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();                                     \
        int64_t i = 0;                                                                                       \
        for (; i + 8 <= n; i += 8) {                                                                         \
            __m256 a = LOAD8(w0 + i * ES), b = nrow > 1 ? LOAD8(w1 + i * ES) : a;                            \
            for (int t = 0; t < nt; t++) {                                                                   \
                __m256 xv = _mm256_loadu_ps(x + t * xs + i);                                                 \
                acc[0][t] = _mm256_fmadd_ps(a, xv, acc[0][t]);                                               \
                if (nrow > 1) acc[1][t] = _mm256_fmadd_ps(b, xv, acc[1][t]);                                 \
            }                                                                                                \
        }                                                                                                    \
        for (int t = 0; t < nt; t++)                                                                         \
            for (int r = 0; r < nrow; r++) {                                                                 \
                float s = hsum_ps(acc[r][t]);                                                                \
                const char *w = r ? w1 : w0;                                                                 \
                for (int64_t k = i; k < n; k++) s += GET(w, k) * x[t * xs + k];                              \
                y[t * ys + r] = s;                                                                           \
            }                                                                                                \
    }                                                                                                        \
    TGT static void NAME(int64_t n, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,    \
                         int64_t nt, float *y, int64_t ys) {                                                 \
        const float *x = xq;                                                                                 \
        int64_t xs = (int64_t)(x_row / sizeof(float));                                                       \
        for (int64_t r = 0; r < nr; r += 2) {                                                                \
            const char *w0 = (const char *)W + (size_t)r * w_row, *w1 = w0 + w_row;                          \
            int nrow = nr - r > 1 ? 2 : 1;                                                                   \
            for (int64_t t = 0; t < nt; t += 4) {                                                            \
                int k = nt - t < 4 ? (int)(nt - t) : 4;                                                      \
                float *yt = y + t * ys + r;                                                                  \
                const float *xt = x + t * xs;                                                                \
                if (nrow == 2) {                                                                             \
                    if (k == 4) NAME##_tile(n, w0, w1, 2, xt, xs, 4, yt, ys);                                \
                    else if (k == 3) NAME##_tile(n, w0, w1, 2, xt, xs, 3, yt, ys);                           \
                    else if (k == 2) NAME##_tile(n, w0, w1, 2, xt, xs, 2, yt, ys);                           \
                    else NAME##_tile(n, w0, w1, 2, xt, xs, 1, yt, ys);                                       \
                } else {                                                                                     \
                    if (k == 4) NAME##_tile(n, w0, w0, 1, xt, xs, 4, yt, ys);                                \
                    else if (k == 3) NAME##_tile(n, w0, w0, 1, xt, xs, 3, yt, ys);                           \
                    else if (k == 2) NAME##_tile(n, w0, w0, 1, xt, xs, 2, yt, ys);                           \
                    else NAME##_tile(n, w0, w0, 1, xt, xs, 1, yt, ys);                                       \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

FLOAT_KERNEL(mm_f32, load8_f32, get_f32, 4)
FLOAT_KERNEL(mm_f16, load8_f16, get_f16, 2)
FLOAT_KERNEL(mm_bf16, load8_bf16, get_bf16, 2)

void tnd_cpu_kernels_avx2(tnd_cpu_kernels *k) {
    k->quant[TND_TYPE_Q8_0] = quant_q8_0;
    k->quant[TND_TYPE_Q8_1] = quant_q8_1;
    k->quant[TND_TYPE_Q8_K] = quant_q8_K;
    k->mm[TND_TYPE_Q4_0] = (tnd_mm_entry){mm_q4_0, TND_TYPE_Q8_0, gemm_q4_0};
    k->mm[TND_TYPE_Q4_1] = (tnd_mm_entry){mm_q4_1, TND_TYPE_Q8_1, gemm_q4_1};
    k->mm[TND_TYPE_Q5_0] = (tnd_mm_entry){NULL, TND_TYPE_Q8_0, gemm_q5_0};
    k->mm[TND_TYPE_Q5_1] = (tnd_mm_entry){NULL, TND_TYPE_Q8_1, gemm_q5_1};
    k->mm[TND_TYPE_Q8_0] = (tnd_mm_entry){mm_q8_0, TND_TYPE_Q8_0, gemm_q8_0};
    k->mm[TND_TYPE_MXFP4] = (tnd_mm_entry){NULL, TND_TYPE_Q8_0, gemm_mxfp4};
    k->mm[TND_TYPE_Q2_K] = (tnd_mm_entry){NULL, TND_TYPE_Q8_K, gemm_q2_K};
    k->mm[TND_TYPE_Q3_K] = (tnd_mm_entry){NULL, TND_TYPE_Q8_K, gemm_q3_K};
    k->mm[TND_TYPE_Q4_K] = (tnd_mm_entry){mm_q4_K, TND_TYPE_Q8_K, gemm_q4_K};
    k->mm[TND_TYPE_Q5_K] = (tnd_mm_entry){NULL, TND_TYPE_Q8_K, gemm_q5_K};
    k->mm[TND_TYPE_Q6_K] = (tnd_mm_entry){mm_q6_K, TND_TYPE_Q8_K, gemm_q6_K};
    k->mm[TND_TYPE_F32] = (tnd_mm_entry){mm_f32, TND_TYPE_F32, NULL};
    k->mm[TND_TYPE_F16] = (tnd_mm_entry){mm_f16, TND_TYPE_F32, NULL};
    k->mm[TND_TYPE_BF16] = (tnd_mm_entry){mm_bf16, TND_TYPE_F32, NULL};
}
