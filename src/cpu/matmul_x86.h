/* x86 SIMD code shared by matmul_avx2.c and matmul_avx512.c: helpers, the
 * per-format row unpackers and the prefill kernels. Included once by each,
 * after it defines TGT / TGTI (its target attribute), X86_VNNI (1: use
 * AVX512-VNNI vpdpbusd for the int8 dots) and X86_ZMM (1: the prefill
 * kernels on 512-bit vectors, 16 rows a group; needs X86_VNNI). Everything is
 * static: each file gets its own copy compiled for its own target. */
#ifndef TND_CPU_MATMUL_X86_H
#define TND_CPU_MATMUL_X86_H

#if X86_ZMM && !X86_VNNI
#error "X86_ZMM (16-row prefill groups) needs X86_VNNI"
#endif

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/matmul_impl.h"

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

/* The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K / Q5_K
 * super-block: unpacked in integer registers, moved over in two words (not
 * byte by byte, which would make the moves the limit). */
TGTI __m128i k4_scales_v(const uint8_t *s) {
    uint8_t sc[8], m[8];
    k4_scales(s, sc, m);
    uint64_t a, b;
    memcpy(&a, sc, 8);
    memcpy(&b, m, 8);
    return _mm_set_epi64x((long long)b, (long long)a);
}

/* The 16 signed 6-bit scales of a Q3_K super-block (stored - 32) as int8:
 * low nibbles from bytes 0..7 (scales 0..7) and their high nibbles (8..15),
 * high bits from bytes 8..11, scale i at bits 2 (i / 4) of byte 8 + i % 4
 * (tnd_get_scales_q3_K's rule, a few vector instructions instead of a
 * loop of 16 that bounded the matvec). */
TGTI __m128i k3_scales_v(const uint8_t *s) {
    int32_t w2;
    memcpy(&w2, s + 8, 4); /* 12 bytes, read as 8 + 4 (a 16-byte copy through memory stalled the load) */
    const __m128i v = _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)s), w2, 2), m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i h = _mm_shuffle_epi8(v, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(h, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(0x03));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

/* A Q2_K (Q3 0) or Q3_K (Q3 1) super-block for the row kernels: its 2-bit
 * quants; its 16 scales as words in sc16 and its d; for Q2_K its 16 mins in
 * m16 and its dmin (Q3_K: zeros; its high bits, hmask, are the caller's,
 * as their vector width is). */
TGTI const uint8_t *k23_block(const char *blk, const int Q3, __m256i *sc16, __m256i *m16, float *d, float *dmin) {
    if (Q3) {
        const block_q3_K *w = (const block_q3_K *)blk;
        *sc16 = _mm256_cvtepi8_epi16(k3_scales_v(w->scales));
        *m16 = _mm256_setzero_si256();
        *d = h2f(w->d), *dmin = 0.0f;
        return w->qs;
    }
    const block_q2_K *w = (const block_q2_K *)blk;
    const __m128i sb = _mm_loadu_si128((const __m128i *)w->scales);
    *sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0f)));
    *m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0f)));
    *d = h2f(w->d), *dmin = h2f(w->dmin);
    return w->qs;
}

/* ---- decode: software prefetch ---------------------------------------------------
 * A decode matvec streams each weight row once; on the machines measured the
 * hardware prefetchers ramp up too slowly for these short streams (or for
 * several interleaved ones) and the kernels read DRAM well below the
 * streaming rate. So each kernel step that consumes S bytes of a stream
 * prefetches ceil(S / 64) lines PF_DIST bytes ahead of it (tnd_cpu_pf_dist,
 * matmul.h): points spaced at
 * most 64 bytes apart, so every line gets one. Rows are contiguous, so
 * ahead of a row's end is the next row, where the next pass goes. */
#define PF_DIST ((size_t)tnd_cpu_pf_dist)

TGTI void pf_ahead(const void *p, const int lines) {
    for (int k = 0; k < lines; k++) _mm_prefetch((const char *)p + PF_DIST + 64 * k, _MM_HINT_T0);
}

/* ---- decode: row and token loops ---------------------------------------------
 * Around a per-row kernel ROWFN(n_in, w, xq, x_row, nt, y, ys) for nt <= 4
 * (constant after inlining, so its accumulators stay in registers). */

/* A per-row kernel ROWFN(..., V) shared by two formats (V: which), as a
 * ROW_LOOP kernel NAME. */
#define ROW_VARIANT(NAME, ROWFN, V)                                                                      \
    TGTI void NAME(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) { \
        ROWFN(n, vw, xq, xs, nt, y, ys, V);                                                              \
    }

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


/* ---- decode: 32-block formats x Q8_0 -----------------------------------------
 * Q8_0 (matmul_avx2.c): signed x signed int8 dots through |w| (unsigned) and
 * sign(a, w): exact since |w| <= 128, |a| <= 127. */

/* int32 dot of 32 unsigned bytes aq and 32 signed bytes as, in 8 lanes:
 * vpdpbusd where there is VNNI (one instruction, no 16-bit intermediate),
 * else vpmaddubsw (pairs: at most 2 * 128 * 127, no saturation) + vpmaddwd. */
TGTI __m256i dot_ss(__m256i aq, __m256i as) {
#if X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq, as);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aq, as), _mm256_set1_epi16(1));
#endif
}

/* The 32 weights of a Q8_0 block as int8. */
TGTI __m256i q32_q8_0(const block_q8_0 *w) { return _mm256_loadu_si256((const __m256i *)w->qs); }

/* ---- decode: Q4_0 (helpers) ----------------------------------------------------
 * The kernels (matmul_avx2.c, matmul_avx512.c) dot the unsigned nibbles
 * u = q + 8 with the signed activations: dot(q, a) = dot(u, a) - 8 sum(a),
 * the activation block sums computed once per call. One 16-byte load gives
 * all 32 nibbles: broadcast to both halves, the upper half shifted right by
 * 4 (per 32-bit lane). */

/* Per token t and 32-block i of the Q8_0 activations: the scale as float
 * (da) and minus the sum of the quants (nsa), at t * nb + i. */
TGTI void q8_0_prep(const char *xq, size_t x_row, int64_t nt, int64_t nb, float *da, int32_t *nsa) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + t * x_row);
        for (int64_t i = 0; i < nb; i++) {
            da[t * nb + i] = h2f(a[i].d);
            nsa[t * nb + i] = -hsum_epi32(dot_us(ones8, _mm256_loadu_si256((const __m256i *)a[i].qs)));
        }
    }
}

/* The 32 quants of a Q4_0 block as unsigned bytes, in element order. */
TGTI __m256i nib32(const uint8_t *qs) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
}

/* Rows in groups of R (the rest one by one), tokens in groups of up to 4. */
#define ROWS_BY(ROWFN, R_, ...)                                                                                     \
    do {                                                                                                        \
        int64_t r_ = 0;                                                                                         \
        for (; r_ + (R_) <= nr; r_ += (R_))                                                                     \
            for (int64_t t_ = 0; t_ < nt; t_ += 4) {                                                            \
                int k_ = nt - t_ < 4 ? (int)(nt - t_) : 4;                                                      \
                const char *w_ = (const char *)W + (size_t)r_ * w_row, *x_ = (const char *)xq + t_ * x_row;     \
                float *y_ = y + t_ * ys + r_;                                                                   \
                if ((R_) == 4) ROWFN(w_, x_, t_, 4, 1, y_, __VA_ARGS__);                                        \
                else if ((R_) == 2) ROWFN(w_, x_, t_, 2, 2, y_, __VA_ARGS__);                                   \
                else if (k_ == 4) ROWFN(w_, x_, t_, 1, 4, y_, __VA_ARGS__);                                     \
                else if (k_ == 3) ROWFN(w_, x_, t_, 1, 3, y_, __VA_ARGS__);                                     \
                else if (k_ == 2) ROWFN(w_, x_, t_, 1, 2, y_, __VA_ARGS__);                                     \
                else ROWFN(w_, x_, t_, 1, 1, y_, __VA_ARGS__);                                                  \
            }                                                                                                   \
        for (; r_ < nr; r_++)                                                                                   \
            for (int64_t t_ = 0; t_ < nt; t_ += 4) {                                                            \
                int k_ = nt - t_ < 4 ? (int)(nt - t_) : 4;                                                      \
                const char *w_ = (const char *)W + (size_t)r_ * w_row, *x_ = (const char *)xq + t_ * x_row;     \
                float *y_ = y + t_ * ys + r_;                                                                   \
                if (k_ == 4) ROWFN(w_, x_, t_, 1, 4, y_, __VA_ARGS__);                                          \
                else if (k_ == 3) ROWFN(w_, x_, t_, 1, 3, y_, __VA_ARGS__);                                     \
                else if (k_ == 2) ROWFN(w_, x_, t_, 1, 2, y_, __VA_ARGS__);                                     \
                else ROWFN(w_, x_, t_, 1, 1, y_, __VA_ARGS__);                                                  \
            }                                                                                                   \
    } while (0)

/* Row-group size for nt tokens: R * min(nt, 4) accumulators <= 4, except
 * that 3 and 4 tokens take one row. */
#define ROWS_FOR(nt) ((nt) == 1 ? 4 : (nt) == 2 ? 2 : 1)

/* Calls the per-format prep (activation scales and sums) into the kernels'
 * buffer: nt * nb floats, then nt * nb int32. NaN if out of memory. */
#define PREP_BUF(nb)                                                                                            \
    float *da = tnd_cpu_tls_buf(1, (size_t)(nt * (nb)) * 8);                                                    \
    if (!da) {                                                                                                  \
        for (int64_t t = 0; t < nt; t++)                                                                        \
            for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;                                               \
        return;                                                                                                 \
    }                                                                                                           \
    int32_t *nsa = (int32_t *)(da + nt * (nb))

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

#if X86_ZMM
/* Unpacks up to 16 rows (missing rows are zero) into the 16-row group
 * layout: per 16-chunk c, 4 steps of 64 bytes (4 elements of each row),
 * nc*256 quant bytes in all, then nc*16 scales d, then nc*16 mins m. The
 * rows are unpacked one after another into tmp (each: n bytes, nc d, nc
 * m; 16 (n + 8 nc) bytes in all); then per chunk a 4x4 transpose of 32-bit
 * words within each 128-bit lane (lane j of input i: row 4j + i's 16
 * bytes) gives its 4 steps at once, and two gathers its 16 d and m.
 * (Scattering 4 bytes at a time, as repack8 does, took ~30% of a 64-token
 * matmul.) */
TGT static void repack16(unpack_row_fn unpack, const char *W, size_t w_row, int rows, int64_t n, uint8_t *tmp,
                         uint8_t *q, float *d, float *m) {
    const int64_t nc = n / TND_CHUNK, rs = n + 8 * nc; /* a row's bytes in tmp */
    for (int r = 0; r < 16; r++) {
        uint8_t *u = tmp + r * rs;
        float *td = (float *)(u + n), *tm = td + nc;
        memset(tm, 0, (size_t)nc * sizeof(float));
        if (r < rows) {
            unpack(W + (size_t)r * w_row, n, u, td, tm);
        } else {
            memset(u, 0, (size_t)n);
            memset(td, 0, (size_t)nc * sizeof(float));
        }
    }
    /* word offsets of each row's d (m: + nc) from row 0's, for the gathers */
    const __m512i di = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32((int)(rs / 4)));
    const float *d0 = (const float *)(tmp + n);
    for (int64_t c = 0; c < nc; c++) {
        __m512i a[4];
        for (int i = 0; i < 4; i++) {
            const uint8_t *p = tmp + i * rs + TND_CHUNK * c;
            /* spelled out: the lane must be an immediate, and at -O1 a loop over it stays rolled */
            a[i] = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
            a[i] = _mm512_inserti32x4(a[i], _mm_loadu_si128((const __m128i *)(p + 4 * rs)), 1);
            a[i] = _mm512_inserti32x4(a[i], _mm_loadu_si128((const __m128i *)(p + 8 * rs)), 2);
            a[i] = _mm512_inserti32x4(a[i], _mm_loadu_si128((const __m128i *)(p + 12 * rs)), 3);
        }
        const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
        uint8_t *o = q + 256 * c;
        _mm512_storeu_si512(o, _mm512_unpacklo_epi64(t0, t2));
        _mm512_storeu_si512(o + 64, _mm512_unpackhi_epi64(t0, t2));
        _mm512_storeu_si512(o + 128, _mm512_unpacklo_epi64(t1, t3));
        _mm512_storeu_si512(o + 192, _mm512_unpackhi_epi64(t1, t3));
        _mm512_storeu_ps(d + 16 * c, _mm512_i32gather_ps(di, d0 + c, 4));
        _mm512_storeu_ps(m + 16 * c, _mm512_i32gather_ps(di, d0 + nc + c, 4));
    }
}
#else
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
#endif

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
            const tnd_act_aux *x = aux + t * naux + c;
            __m256i s;
#if X86_VNNI
            /* vpdpbusd accumulates in int32: no 16-bit limits; the offset
             * starts the sum. Two chains for latency. */
            __m256i s0 = OFF ? _mm256_set1_epi32(-OFF * x->sa) : _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
            if (SGN) {
                s0 = _mm256_dpbusd_epi32(s0, a0w, _mm256_sign_epi8(b0, w0));
                s1 = _mm256_dpbusd_epi32(s1, a1w, _mm256_sign_epi8(b1, w1));
                s0 = _mm256_dpbusd_epi32(s0, a2w, _mm256_sign_epi8(b2, w2));
                s1 = _mm256_dpbusd_epi32(s1, a3w, _mm256_sign_epi8(b3, w3));
            } else {
                s0 = _mm256_dpbusd_epi32(s0, w0, b0);
                s1 = _mm256_dpbusd_epi32(s1, w1, b1);
                s0 = _mm256_dpbusd_epi32(s0, w2, b2);
                s1 = _mm256_dpbusd_epi32(s1, w3, b3);
            }
            s = _mm256_add_epi32(s0, s1);
            (void)ones, (void)SIX;
#else
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
            if (OFF) s = _mm256_sub_epi32(s, _mm256_set1_epi32(OFF * x->sa));
#endif
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
#if X86_VNNI
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), uv, av);
            (void)ones;
#else
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uv, av), ones);
#endif
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


/* As gemm_tile, two 16-chunks per step for formats whose scale and min are
 * per 32 elements (so the float step is shared): BITS 4 sums all eight
 * vpmaddubsw results in int16 (16 * 15 * 127 = 30480 fits), BITS 5 two halves. */
TGTI void gemm_tile_pair(int64_t nc, const uint8_t *q, const float *dv, const float *mv, const char *xq, size_t x_row,
                         const tnd_act_aux *aux, int64_t naux, int nt, float *y, int64_t ys, int rows,
                         const int AB, const int AH, const int CPB, const int OFF, const int MIN, const int BITS) {
    __m256 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t c = 0; c < nc; c += 2) {
        const uint8_t *qc = q + 128 * c;
        __m256i w[8];
        for (int k = 0; k < 8; k++) w[k] = _mm256_load_si256((const __m256i *)(qc + 32 * k));
        __m256 d = _mm256_load_ps(dv + 8 * c);
        __m256 m = MIN ? _mm256_load_ps(mv + 8 * c) : d;
        int64_t off_a = (c / CPB) * AB + AH + (c % CPB) * TND_CHUNK; /* 32 contiguous bytes */
        for (int t = 0; t < nt; t++) {
            const int8_t *a = (const int8_t *)(xq + t * x_row + off_a);
            const tnd_act_aux *x = aux + t * naux + c;
            __m256i s;
#if X86_VNNI
            __m256i s0 = OFF ? _mm256_set1_epi32(-OFF * (x[0].sa + x[1].sa)) : _mm256_setzero_si256();
            __m256i s1 = _mm256_setzero_si256();
            for (int k = 0; k < 8; k += 2) {
                s0 = _mm256_dpbusd_epi32(s0, w[k], _mm256_set1_epi32(load_i32(a + 4 * k)));
                s1 = _mm256_dpbusd_epi32(s1, w[k + 1], _mm256_set1_epi32(load_i32(a + 4 * k + 4)));
            }
            s = _mm256_add_epi32(s0, s1);
            (void)ones, (void)BITS;
#else
            __m256i p[8];
            for (int k = 0; k < 8; k++) p[k] = _mm256_maddubs_epi16(w[k], _mm256_set1_epi32(load_i32(a + 4 * k)));
            __m256i lo = _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
            __m256i hi = _mm256_add_epi16(_mm256_add_epi16(p[4], p[5]), _mm256_add_epi16(p[6], p[7]));
            if (BITS == 4) s = _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones);
            else s = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
            if (OFF) s = _mm256_sub_epi32(s, _mm256_set1_epi32(OFF * (x[0].sa + x[1].sa)));
#endif
            /* both chunks lie in one activation block: one da */
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(x[0].da)), acc[t]);
            if (MIN) acc[t] = _mm256_fnmadd_ps(m, _mm256_set1_ps(x[0].dsa + x[1].dsa), acc[t]);
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

#if X86_ZMM
/* ---- prefill in 16-row groups (512-bit vectors, VNNI) ----------------------
 * The same kernels over two 8-row groups at once: lane r of a 512-bit
 * vector is row r of a 16-row group, so one vpdpbusd advances 16 rows (on
 * Zen 5 at the rate a 256-bit one advances 8). Every lane does what the
 * 8-row kernels' lane does, in the same order: the same bits. The group
 * layout is repack16's (above). */

/* The activation's 4 bytes at a, negated in the lanes whose weight byte in
 * w is negative (what vpsignb does in the 8-row kernel; a zero weight
 * makes the product 0 either way). */
TGTI __m512i bcast_signed(const int8_t *a, __m512i w) {
    const __m512i b = _mm512_set1_epi32(load_i32(a));
    return _mm512_mask_sub_epi8(b, _mm512_movepi8_mask(w), _mm512_setzero_si512(), b);
}

TGTI void store_rows16(float *y, __m512 v, int rows) {
    if (rows == 16) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << rows) - 1), v);
}

/* gemm_tile over 16 rows. */
TGTI void gemm_tile16(int64_t nc, const uint8_t *q, const float *dv, const float *mv, const char *xq, size_t x_row,
                      const tnd_act_aux *aux, int64_t naux, int nt, float *y, int64_t ys, int rows, const int AB,
                      const int AH, const int CPB, const int OFF, const int SGN, const int MIN) {
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c++) {
        const uint8_t *qc = q + 256 * c;
        __m512i w[4], aw[4];
        for (int k = 0; k < 4; k++) {
            w[k] = _mm512_loadu_si512(qc + 64 * k);
            aw[k] = SGN ? _mm512_abs_epi8(w[k]) : w[k];
        }
        __m512 d = _mm512_loadu_ps(dv + 16 * c);
        __m512 m = MIN ? _mm512_loadu_ps(mv + 16 * c) : d;
        int64_t off_a = (c / CPB) * AB + AH + (c % CPB) * TND_CHUNK;
        for (int t = 0; t < nt; t++) {
            const int8_t *a = (const int8_t *)(xq + t * x_row + off_a);
            const tnd_act_aux *x = aux + t * naux + c;
            __m512i b[4];
            for (int k = 0; k < 4; k++) b[k] = SGN ? bcast_signed(a + 4 * k, w[k]) : _mm512_set1_epi32(load_i32(a + 4 * k));
            __m512i s0 = OFF ? _mm512_set1_epi32(-OFF * x->sa) : _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            s0 = _mm512_dpbusd_epi32(s0, aw[0], b[0]);
            s1 = _mm512_dpbusd_epi32(s1, aw[1], b[1]);
            s0 = _mm512_dpbusd_epi32(s0, aw[2], b[2]);
            s1 = _mm512_dpbusd_epi32(s1, aw[3], b[3]);
            const __m512i si = _mm512_add_epi32(s0, s1);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(d, _mm512_set1_ps(x->da)), acc[t]);
            if (MIN) acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(x->dsa), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) store_rows16(y + t * ys, acc[t], rows);
}

/* gemm_tile_pair over 16 rows. */
TGTI void gemm_tile16_pair(int64_t nc, const uint8_t *q, const float *dv, const float *mv, const char *xq,
                           size_t x_row, const tnd_act_aux *aux, int64_t naux, int nt, float *y, int64_t ys,
                           int rows, const int AB, const int AH, const int CPB, const int OFF, const int MIN) {
    __m512 acc[4];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c += 2) {
        const uint8_t *qc = q + 256 * c;
        __m512i w[8];
        for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(qc + 64 * k);
        __m512 d = _mm512_loadu_ps(dv + 16 * c);
        __m512 m = MIN ? _mm512_loadu_ps(mv + 16 * c) : d;
        int64_t off_a = (c / CPB) * AB + AH + (c % CPB) * TND_CHUNK; /* 32 contiguous bytes */
        for (int t = 0; t < nt; t++) {
            const int8_t *a = (const int8_t *)(xq + t * x_row + off_a);
            const tnd_act_aux *x = aux + t * naux + c;
            __m512i s0 = OFF ? _mm512_set1_epi32(-OFF * (x[0].sa + x[1].sa)) : _mm512_setzero_si512();
            __m512i s1 = _mm512_setzero_si512();
            for (int k = 0; k < 8; k += 2) {
                s0 = _mm512_dpbusd_epi32(s0, w[k], _mm512_set1_epi32(load_i32(a + 4 * k)));
                s1 = _mm512_dpbusd_epi32(s1, w[k + 1], _mm512_set1_epi32(load_i32(a + 4 * k + 4)));
            }
            const __m512i si = _mm512_add_epi32(s0, s1);
            /* both chunks lie in one activation block: one da */
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(d, _mm512_set1_ps(x[0].da)), acc[t]);
            if (MIN) acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(x[0].dsa + x[1].dsa), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) store_rows16(y + t * ys, acc[t], rows);
}
#define GEMM_GROUP 16
#define REPACK repack16
#define REPACK_TMP(n, nc) (16 * ((size_t)(n) + 8 * (size_t)(nc)))
#else
#define GEMM_GROUP 8
#define REPACK repack8
#define REPACK_TMP(n, nc) ((size_t)(n) + 8 * (size_t)(nc))
#endif

/* One tile through the pair or the single-chunk kernel (PAIR: 0, 4 or 5);
 * the activation layout comes as three arguments (AB, AH, CPB). */
#if X86_ZMM
#define TILE(NT_, AB_, AH_, CPB_, OFF_, SIX_, SGN_, MIN_, PAIR_)                                                  \
    do {                                                                                                      \
        if (PAIR_)                                                                                            \
            gemm_tile16_pair(nc, qg, dg, mg, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, NT_,      \
                             yg + t * ys, ys, rows, AB_, AH_, CPB_, OFF_, MIN_);                              \
        else                                                                                                  \
            gemm_tile16(nc, qg, dg, mg, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, NT_,           \
                        yg + t * ys, ys, rows, AB_, AH_, CPB_, OFF_, SGN_, MIN_);                             \
    } while (0)
#else
#define TILE(NT_, AB_, AH_, CPB_, OFF_, SIX_, SGN_, MIN_, PAIR_)                                                                                        \
    do {                                                                                                      \
        if (PAIR_)                                                                                            \
            gemm_tile_pair(nc, qg, dg, mg, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, NT_,        \
                           yg + t * ys, ys, rows, AB_, AH_, CPB_, OFF_, MIN_, PAIR_);                                       \
        else                                                                                                  \
            gemm_tile(nc, qg, dg, mg, (const char *)xq + t * x_row, x_row, aux + t * nc, nc, NT_,             \
                      yg + t * ys, ys, rows, AB_, AH_, CPB_, OFF_, SIX_, SGN_, MIN_);                                        \
    } while (0)
#endif

/* Most row groups (GEMM_GROUP rows each) repacked at once. */
#define SG_MAX 4

#define GEMM(NAME, UNPACK, ACT, OFF, SIX, SGN, MIN, PAIR)                                                         \
    TGT static void NAME(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,  \
                         const tnd_act_aux *aux, int64_t nt, float *y, int64_t ys) {                           \
        int64_t nc = n_in / TND_CHUNK;                                                                      \
        /* group buffer: quants, d, m; then the unpack scratch */                                           \
        size_t gq = (size_t)nc * 16 * GEMM_GROUP, gf = (size_t)nc * GEMM_GROUP * sizeof(float);                               \
        uint8_t *buf = tnd_cpu_tls_buf(1, SG_MAX * (gq + 2 * gf) + REPACK_TMP(n_in, nc) + 64);           \
        if (!buf) {                                                                                         \
            for (int64_t t = 0; t < nt; t++)                                                                \
                for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;                                       \
            return;                                                                                         \
        }                                                                                                   \
        uint8_t *gbuf = buf, *tmp = buf + SG_MAX * (gq + 2 * gf);                                           \
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
        /* Cache blocking: sg groups (GEMM_GROUP rows each) repacked at once, \
         * sized to stay in L2 with a block of tb tokens' activations, so    \
         * each activation is fetched from L3 once per GEMM_GROUP*sg rows. */ \
        size_t gbytes = gq + 2 * gf;                                                                        \
        int64_t sg = (int64_t)(262144 / gbytes);                                                            \
        sg = sg < 1 ? 1 : sg > SG_MAX ? SG_MAX : sg;                                                        \
        int64_t tb = (int64_t)(262144 / (x_row + (size_t)nc * sizeof(tnd_act_aux))) & ~(int64_t)3;          \
        tb = tb < 4 ? 4 : tb > 64 ? 64 : tb;                                                                \
        for (int64_t r0 = 0; r0 < nr; r0 += GEMM_GROUP * sg) {                                              \
            int64_t ng = (nr - r0 + GEMM_GROUP - 1) / GEMM_GROUP;                                                \
            ng = ng > sg ? sg : ng;                                                                         \
            for (int64_t g = 0; g < ng; g++) {                                                              \
                int rows = nr - r0 - GEMM_GROUP * g < GEMM_GROUP ? (int)(nr - r0 - GEMM_GROUP * g) : GEMM_GROUP;                               \
                uint8_t *qg = gbuf + g * gbytes;                                                            \
                REPACK(UNPACK, (const char *)W + (size_t)(r0 + GEMM_GROUP * g) * w_row, w_row, rows, n_in, tmp, qg, \
                       (float *)(qg + gq), (float *)(qg + gq + gf));                                       \
            }                                                                                               \
            for (int64_t t0 = 0; t0 < nt; t0 += tb) {                                                       \
                int64_t te = t0 + tb < nt ? t0 + tb : nt;                                                   \
                for (int64_t g = 0; g < ng; g++) {                                                          \
                    int rows = nr - r0 - GEMM_GROUP * g < GEMM_GROUP ? (int)(nr - r0 - GEMM_GROUP * g) : GEMM_GROUP;                           \
                    const uint8_t *qg = gbuf + g * gbytes;                                                  \
                    const float *dg = (const float *)(qg + gq), *mg = (const float *)(qg + gq + gf);        \
                    float *yg = y + r0 + GEMM_GROUP * g;                                                         \
                    int64_t t = t0;                                                                         \
                    for (; t + 4 <= te; t += 4) TILE(4, ACT, OFF, SIX, SGN, MIN, PAIR);                                                    \
                    switch (te - t) {                                                                       \
                    case 3: TILE(3, ACT, OFF, SIX, SGN, MIN, PAIR); break;                                                                 \
                    case 2: TILE(2, ACT, OFF, SIX, SGN, MIN, PAIR); break;                                                                 \
                    case 1: TILE(1, ACT, OFF, SIX, SGN, MIN, PAIR); break;                                                                 \
                    default: break;                                                                         \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }

GEMM(gemm_q4_0, unpack_q4_0, ACT_Q8_0, 8, 0, 0, 0, 4)
GEMM(gemm_q4_1, unpack_q4_1, ACT_Q8_1, 0, 0, 0, 1, 4)
GEMM(gemm_q5_0, unpack_q5_0, ACT_Q8_0, 16, 0, 0, 0, 5)
GEMM(gemm_q5_1, unpack_q5_1, ACT_Q8_1, 0, 0, 0, 1, 5)
GEMM(gemm_q8_0, unpack_q8_0, ACT_Q8_0, 0, 0, 1, 0, 0)
GEMM(gemm_mxfp4, unpack_mxfp4, ACT_Q8_0, 12, 0, 0, 0, 5)
GEMM(gemm_q2_K, unpack_q2_K, ACT_Q8_K, 0, 0, 0, 1, 0)
GEMM(gemm_q3_K, unpack_q3_K, ACT_Q8_K, 4, 0, 0, 0, 0)
GEMM(gemm_q4_K, unpack_q4_K, ACT_Q8_K, 0, 0, 0, 1, 4)
GEMM(gemm_q5_K, unpack_q5_K, ACT_Q8_K, 0, 0, 0, 1, 5)
GEMM(gemm_q6_K, unpack_q6_K, ACT_Q8_K, 32, 1, 0, 0, 0)



/* Installs the prefill kernels (and the activation type they expect). */
static void x86_register_gemm(tnd_cpu_kernels *k) {
    k->mm[TND_TYPE_Q4_0].gemm = gemm_q4_0, k->mm[TND_TYPE_Q4_0].act = TND_TYPE_Q8_0;
    k->mm[TND_TYPE_Q4_1].gemm = gemm_q4_1, k->mm[TND_TYPE_Q4_1].act = TND_TYPE_Q8_1;
    k->mm[TND_TYPE_Q5_0].gemm = gemm_q5_0, k->mm[TND_TYPE_Q5_0].act = TND_TYPE_Q8_0;
    k->mm[TND_TYPE_Q5_1].gemm = gemm_q5_1, k->mm[TND_TYPE_Q5_1].act = TND_TYPE_Q8_1;
    k->mm[TND_TYPE_Q8_0].gemm = gemm_q8_0, k->mm[TND_TYPE_Q8_0].act = TND_TYPE_Q8_0;
    k->mm[TND_TYPE_MXFP4].gemm = gemm_mxfp4, k->mm[TND_TYPE_MXFP4].act = TND_TYPE_Q8_0;
    k->mm[TND_TYPE_Q2_K].gemm = gemm_q2_K, k->mm[TND_TYPE_Q2_K].act = TND_TYPE_Q8_K;
    k->mm[TND_TYPE_Q3_K].gemm = gemm_q3_K, k->mm[TND_TYPE_Q3_K].act = TND_TYPE_Q8_K;
    k->mm[TND_TYPE_Q4_K].gemm = gemm_q4_K, k->mm[TND_TYPE_Q4_K].act = TND_TYPE_Q8_K;
    k->mm[TND_TYPE_Q5_K].gemm = gemm_q5_K, k->mm[TND_TYPE_Q5_K].act = TND_TYPE_Q8_K;
    k->mm[TND_TYPE_Q6_K].gemm = gemm_q6_K, k->mm[TND_TYPE_Q6_K].act = TND_TYPE_Q8_K;
}

#endif
