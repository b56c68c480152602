/* Body of the x86 f32-activation kernels, shared by matmul_f32_avx2.c (L = 8)
 * and matmul_f32_avx512.c (L = 16): the register-blocked tile (prefill, and
 * decode of float formats), the generic fused decode kernel (any format of
 * dequant_x86.h), and fast fused decode kernels for Q4_0, Q4_K, Q6_K, Q8_0.
 *
 * The includer defines TGT, TGTI (target attributes), L and DQ_WIDTH (8 or
 * 16), MR, MT (tile rows and tokens) and includes cpu/dequant_x86.h first.
 *
 * Bit-identity (matmul_f32.h): every weight is the float the reference
 * dequantizer makes, fl(d * q), fl(fl(dl * q) - ml), ..., each operation
 * rounded on its own; every (row, token) lane accumulates w * x with one FMA
 * per k, k ascending, exactly as the tile does. The fast kernels differ from
 * the generic one only in how they get the same floats:
 *   4-bit formats, AVX-512: a 16-entry table per (sub-)block, tab[q] =
 *     fl(d * (q - 8)) (Q4_0) or fl(fl(dl * q) - ml) (Q4_K), computed with the
 *     reference's operations on the 16 possible q, then one vpermps per 16
 *     weights (it reads only the low 4 bits of each index, so the low nibble
 *     of a zero-extended byte needs no mask and the high one just a shift);
 *   Q6_K: the 6-bit quants of 128 weights assembled with a few byte ops on
 *     whole vectors, then sign-extend, convert, multiply;
 *   scales of a block computed once (per row), kept on the stack and
 *     broadcast from there (a load, no shuffle).
 * Rows go 4 at a time for one token (4 independent FMA chains, each row a
 * sequential stream), fewer rows for more tokens (register budget). */
#ifndef TND_CPU_MATMUL_F32_X86_H
#define TND_CPU_MATMUL_F32_X86_H

#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

/* Loops over rows and tokens: always fully unrolled (R, T are constants
 * after inlining), so accumulators stay in registers. */
#define MV_UNROLL _Pragma("GCC unroll 16")

/* ---- vector width --------------------------------------------------------------- */

#if L == 16
typedef __m512 vf;
#define VZERO() _mm512_setzero_ps()
#define VLD(p) _mm512_loadu_ps(p)
#define VST(p, v) _mm512_storeu_ps(p, v)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSET1(s) _mm512_set1_ps(s)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
/* Fixed reduction tree: (l, l+8), (l, l+4), (l, l+2), (0, 1). */
TGTI float vhsum(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The first n < 16 floats at p, zeros after. */
TGTI __m512 vld_part(const float *p, int64_t n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
#else
typedef __m256 vf;
#define VZERO() _mm256_setzero_ps()
#define VLD(p) _mm256_loadu_ps(p)
#define VST(p, v) _mm256_storeu_ps(p, v)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSET1(s) _mm256_set1_ps(s)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
/* Fixed reduction tree: (l, l+4), then (l, l+2), then (0, 1). */
TGTI float vhsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
TGTI __m256 vld_part(const float *p, int64_t n) {
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, m);
}
#endif

/* ---- tile ------------------------------------------------------------------------- */

TGTI void tile_rt(const int R, const int T, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc,
                  float *st, int64_t st_rs, int first, int last, float *y, int64_t ys) {
    vf acc[MR][MT];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = first ? VZERO() : VLD(st + r * st_rs + t * L);
    int64_t k = 0;
    for (; k + L <= kc; k += L) {
        vf xv[MT];
        for (int t = 0; t < T; t++) xv[t] = VLD(x + t * xs + k);
        for (int r = 0; r < R; r++) {
            vf wv = VLD(w + r * ws + k);
            for (int t = 0; t < T; t++) acc[r][t] = VFMA(wv, xv[t], acc[r][t]);
        }
    }
    if (k < kc) { /* float formats only: n_in not a multiple of L */
        vf xv[MT];
        for (int t = 0; t < T; t++) xv[t] = vld_part(x + t * xs + k, kc - k);
        for (int r = 0; r < R; r++) {
            vf wv = vld_part(w + r * ws + k, kc - k);
            for (int t = 0; t < T; t++) acc[r][t] = VFMA(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            if (last) y[t * ys + r] = vhsum(acc[r][t]);
            else VST(st + r * st_rs + t * L, acc[r][t]);
        }
}

TGT static void tile(int nr, int nt, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc, float *st,
                     int64_t st_rs, int first, int last, float *y, int64_t ys) {
#define CASE(R, T) \
    case (R) * 8 + (T): tile_rt(R, T, w, ws, x, xs, kc, st, st_rs, first, last, y, ys); break;
#if MT == 6
#define ROW(R) CASE(R, 1) CASE(R, 2) CASE(R, 3) CASE(R, 4) CASE(R, 5) CASE(R, 6)
#else
#define ROW(R) CASE(R, 1) CASE(R, 2) CASE(R, 3)
#endif
    switch (nr * 8 + nt) {
        ROW(1) ROW(2) ROW(3) ROW(4)
    default: break;
    }
#undef ROW
#undef CASE
}

/* ---- fused decode: row and token blocking ------------------------------------------ */

/* Rows per pass for nt tokens: R * T accumulators plus the weight vectors
 * and scales must fit the register file (16 ymm, 32 zmm). */
#if L == 16
#define MV_ROWS(nt) ((nt) <= 2 ? 4 : 2)
#else
#define MV_ROWS(nt) ((nt) == 1 ? 4 : (nt) == 2 ? 2 : 1)
#endif

/* mv_FMT(W, w_row, nr, x, xs, nt, n_in, y, ys) over FMT##_rt(R, T, ...):
 * full passes of MV_ROWS(nt) rows, then the rest one row at a time. */
#define MV_DRIVER(fmt)                                                                                         \
    TGT __attribute__((unused)) static void mv_##fmt(const uint8_t *W, size_t w_row, int64_t nr, const float *x, int64_t xs, int nt,  \
                             int64_t n_in, float *y, int64_t ys) {                                             \
        const int R = MV_ROWS(nt);                                                                             \
        int64_t r0 = 0;                                                                                        \
        for (; r0 + R <= nr; r0 += R) {                                                                        \
            const uint8_t *w = W + (size_t)r0 * w_row;                                                         \
            switch (nt) {                                                                                      \
            case 1: fmt##_rt(MV_ROWS(1), 1, w, w_row, x, xs, n_in, y + r0, ys); break;                         \
            case 2: fmt##_rt(MV_ROWS(2), 2, w, w_row, x, xs, n_in, y + r0, ys); break;                         \
            case 3: fmt##_rt(MV_ROWS(3), 3, w, w_row, x, xs, n_in, y + r0, ys); break;                         \
            case 4: fmt##_rt(MV_ROWS(4), 4, w, w_row, x, xs, n_in, y + r0, ys); break;                         \
            default: break;                                                                                    \
            }                                                                                                  \
        }                                                                                                      \
        for (; r0 < nr; r0++) {                                                                                \
            const uint8_t *w = W + (size_t)r0 * w_row;                                                         \
            switch (nt) {                                                                                      \
            case 1: fmt##_rt(1, 1, w, w_row, x, xs, n_in, y + r0, ys); break;                                  \
            case 2: fmt##_rt(1, 2, w, w_row, x, xs, n_in, y + r0, ys); break;                                  \
            case 3: fmt##_rt(1, 3, w, w_row, x, xs, n_in, y + r0, ys); break;                                  \
            case 4: fmt##_rt(1, 4, w, w_row, x, xs, n_in, y + r0, ys); break;                                  \
            default: break;                                                                                    \
            }                                                                                                  \
        }                                                                                                      \
    }

#define MV_MAXR 4
/* Software prefetch distance of the fused decode kernels (bytes ahead in
 * each row; 0: none). With 4 rows streamed at once, Zen 3's hardware
 * prefetch alone left Q6_K from DRAM at 60% of the rate with it; 1 KB was
 * the best of 0.5-2 KB. Build with -DMV_PREFETCH=0 to compare. */
#ifndef MV_PREFETCH
#define MV_PREFETCH 1024
#endif
#define MV_MAXT TND_F32_MATVEC_MAX_TOK

/* acc[t] += w * x[t][0..L) for the T tokens (xs floats apart). */
TGTI void mv_fma(vf *acc, vf w, const float *x, int64_t xs, const int T) {
    MV_UNROLL
    for (int t = 0; t < T; t++) acc[t] = VFMA(w, VLD(x + t * xs), acc[t]);
}

/* ---- generic fused decode (every format of dequant_x86.h) ------------------------- */

/* Per block of each of R rows: its scales, then per 32-chunk the quants ->
 * DQ_NV vectors (FMT_emit, the dequantizers' own code) -> FMAs. */
#define MV_GENERIC(fmt, BT, QK, KIND)                                                                  \
    TGTI void gen_##fmt##_rt(const int R, const int T, const uint8_t *W, size_t w_row, const float *x,  \
                             int64_t xs, int64_t n_in, float *y, int64_t ys) {                          \
        vf acc[MV_MAXR][MV_MAXT];                                                                       \
        MV_UNROLL for (int r = 0; r < R; r++) MV_UNROLL for (int t = 0; t < T; t++) acc[r][t] = VZERO(); \
        for (int64_t b = 0; b < n_in / (QK); b++) {                                                     \
            dq_sc s[MV_MAXR];                                                                           \
            MV_UNROLL for (int r = 0; r < R; r++) fmt##_prep((const BT *)(W + (size_t)r * w_row) + b, &s[r]); \
            for (int c = 0; c < (QK) / 32; c++) {                                                       \
                const float *xc = x + b * (QK) + 32 * c;                                                \
                MV_UNROLL for (int r = 0; r < R; r++) {                                                 \
                    dq_vec w[DQ_NV];                                                                    \
                    fmt##_emit((const BT *)(W + (size_t)r * w_row) + b, c, &s[r], w);                   \
                    for (int v = 0; v < DQ_NV; v++) mv_fma(acc[r], w[v], xc + v * L, xs, T);            \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        MV_UNROLL for (int r = 0; r < R; r++) MV_UNROLL for (int t = 0; t < T; t++) y[t * ys + r] = vhsum(acc[r][t]); \
    }                                                                                                   \
    MV_DRIVER(gen_##fmt)
DQ_FORMATS(MV_GENERIC)
DQ_FLOAT_FORMATS(MV_GENERIC)
#undef MV_GENERIC

/* ---- fast fused decode ---------------------------------------------------------------- */

/* Per format FMT (functions fv_FMT_*):
 *   st, prep(block, &st):            per row and block: its scales;
 *   cs, cprep(block, &st, c, &cs):   per row and chunk c (CW weights): what
 *                                    the chunk's vectors share;
 *   vec(block, &st, &cs, c, i):      weight vector i of chunk c.
 * The R rows advance vector by vector (for each vector index, every row),
 * so the R accumulator chains interleave in program order: one row's chunk
 * after another's would queue a chain of dependent FMAs per row, and the
 * FP scheduler fills up with waiting operations (measured 1.4x slower on
 * Zen 3). Scales are read back from memory with broadcast loads. */
#define MV_FAST(fmt, BT, QK, CW)                                                                        \
    TGTI void fast_##fmt##_rt(const int R, const int T, const uint8_t *W, size_t w_row, const float *x, \
                              int64_t xs, int64_t n_in, float *y, int64_t ys) {                         \
        vf acc[MV_MAXR][MV_MAXT];                                                                       \
        MV_UNROLL for (int r = 0; r < R; r++) MV_UNROLL for (int t = 0; t < T; t++) acc[r][t] = VZERO(); \
        const int64_t nb = n_in / (QK);                                                                 \
        for (int64_t b = 0; b < nb; b++) {                                                              \
            const BT *blk[MV_MAXR];                                                                     \
            fv_##fmt##_st st[MV_MAXR];                                                                  \
            MV_UNROLL for (int r = 0; r < R; r++) {                                                     \
                blk[r] = (const BT *)(W + (size_t)r * w_row) + b;                                       \
                /* every 64-byte line once or a few times: small blocks not each time */              \
                if (MV_PREFETCH && (sizeof(BT) >= 64 || b % (int64_t)(64 / sizeof(BT)) == 0))           \
                    for (size_t o = 0; o < sizeof(BT); o += 64)                                         \
                        _mm_prefetch((const char *)blk[r] + MV_PREFETCH + o, _MM_HINT_T0);              \
                fv_##fmt##_prep(blk[r], &st[r]);                                                        \
            }                                                                                           \
            /* scales re-read from memory (broadcast loads), not shuffled out of registers */          \
            __asm__("" : "+m"(st));                                                                     \
            const float *xb = x + b * (QK);                                                             \
            MV_UNROLL for (int c = 0; c < (QK) / (CW); c++) {                                           \
                fv_##fmt##_cs cs[MV_MAXR];                                                              \
                MV_UNROLL for (int r = 0; r < R; r++) fv_##fmt##_cprep(blk[r], &st[r], c, &cs[r]);      \
                MV_UNROLL for (int i = 0; i < (CW) / L; i++)                                            \
                    MV_UNROLL for (int r = 0; r < R; r++)                                               \
                        mv_fma(acc[r], fv_##fmt##_vec(blk[r], &st[r], &cs[r], c, i), xb + c * (CW) + i * L, xs, T); \
            }                                                                                           \
        }                                                                                               \
        MV_UNROLL for (int r = 0; r < R; r++) MV_UNROLL for (int t = 0; t < T; t++) y[t * ys + r] = vhsum(acc[r][t]); \
    }                                                                                                   \
    MV_DRIVER(fast_##fmt)

typedef struct { char unused; } fv_none;

/* Q8_0: w = fl(d * q). */
typedef fv_none fv_q8_0_st;
typedef struct { vf d; } fv_q8_0_cs;
TGTI void fv_q8_0_prep(const block_q8_0 *b, fv_q8_0_st *st) { (void)b, (void)st; }
TGTI void fv_q8_0_cprep(const block_q8_0 *b, const fv_q8_0_st *st, const int c, fv_q8_0_cs *cs) {
    (void)st, (void)c;
    cs->d = VSET1(dq_h2f(b->d));
}
TGTI vf fv_q8_0_vec(const block_q8_0 *b, const fv_q8_0_st *st, const fv_q8_0_cs *cs, const int c, const int i) {
    (void)st, (void)c;
    return VMUL(cs->d, dq_cvti(dq_i8x(b->qs + i * L)));
}

/* Q4_0: element j < 16 is the low nibble of byte j, 16 + j its high nibble. */
typedef fv_none fv_q4_0_st;
TGTI void fv_q4_0_prep(const block_q4_0 *b, fv_q4_0_st *st) { (void)b, (void)st; }

#if L == 16

/* tab[q] = fl(d * (q - 8)). */
typedef struct { __m512 tab; __m512i idx; } fv_q4_0_cs;
TGTI void fv_q4_0_cprep(const block_q4_0 *b, const fv_q4_0_st *st, const int c, fv_q4_0_cs *cs) {
    (void)st, (void)c;
    const __m512 iota = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    cs->tab = _mm512_mul_ps(_mm512_set1_ps(dq_h2f(b->d)), iota);
    cs->idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->qs));
}
TGTI vf fv_q4_0_vec(const block_q4_0 *b, const fv_q4_0_st *st, const fv_q4_0_cs *cs, const int c, const int i) {
    (void)b, (void)st, (void)c;
    return _mm512_permutexvar_ps(i ? _mm512_srli_epi32(cs->idx, 4) : cs->idx, cs->tab);
}

#else

/* Converted and scaled (vpermps tables measured no faster than cvt + mul +
 * sub on Zen 3). */
typedef struct { __m256 d; } fv_q4_0_cs;
TGTI void fv_q4_0_cprep(const block_q4_0 *b, const fv_q4_0_st *st, const int c, fv_q4_0_cs *cs) {
    (void)st, (void)c;
    cs->d = _mm256_set1_ps(dq_h2f(b->d));
}
TGTI vf fv_q4_0_vec(const block_q4_0 *b, const fv_q4_0_st *st, const fv_q4_0_cs *cs, const int c, const int i) {
    (void)st, (void)c;
    __m256i v = dq_u8x(b->qs + 8 * (i & 1));
    v = i < 2 ? _mm256_and_si256(v, _mm256_set1_epi32(15)) : _mm256_srli_epi32(v, 4);
    return _mm256_mul_ps(cs->d, _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(8))));
}

#endif

/* Q4_K: dl[g] = fl(d * sc[g]), ml[g] = fl(dmin * m[g]) for the 8 groups of
 * 32 (the 6-bit fields unpacked as in dequant_x86.h's k4_prep). Chunk c =
 * group c: the low (c even) or high nibbles of bytes 32 (c / 2)... */
typedef struct { float dl[8], ml[8]; } fv_q4_K_st;
TGTI void fv_q4_K_prep(const block_q4_K *b, fv_q4_K_st *st) {
    uint32_t u0, u1, u2;
    memcpy(&u0, b->scales, 4);
    memcpy(&u1, b->scales + 4, 4);
    memcpy(&u2, b->scales + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    _mm256_storeu_ps(st->dl, dq_scale8(_mm_setr_epi32((int)sc_lo, (int)sc_hi, 0, 0), dq_h2f(b->d)));
    _mm256_storeu_ps(st->ml, dq_scale8(_mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0), dq_h2f(b->dmin)));
}

#if L == 16

/* tab[q] = fl(fl(dl * q) - ml). */
typedef struct { __m512 tab; } fv_q4_K_cs;
TGTI void fv_q4_K_cprep(const block_q4_K *b, const fv_q4_K_st *st, const int c, fv_q4_K_cs *cs) {
    (void)b;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    cs->tab = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(st->dl[c]), iota), _mm512_set1_ps(st->ml[c]));
}
TGTI vf fv_q4_K_vec(const block_q4_K *b, const fv_q4_K_st *st, const fv_q4_K_cs *cs, const int c, const int i) {
    (void)st;
    __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 32 * (c / 2) + 16 * i)));
    return _mm512_permutexvar_ps(c & 1 ? _mm512_srli_epi32(idx, 4) : idx, cs->tab);
}

#else

/* q: the chunk's bytes, through an empty asm so that the compiler does not
 * keep the expanded bytes of an even chunk for the next (odd) one: that
 * spills, and the load + expand again is cheaper. */
typedef struct { __m256 dl, ml; const uint8_t *q; } fv_q4_K_cs;
TGTI void fv_q4_K_cprep(const block_q4_K *b, const fv_q4_K_st *st, const int c, fv_q4_K_cs *cs) {
    cs->dl = _mm256_set1_ps(st->dl[c]);
    cs->ml = _mm256_set1_ps(st->ml[c]);
    cs->q = b->qs + 32 * (c / 2);
    __asm__ volatile("" : "+r"(cs->q));
}
TGTI vf fv_q4_K_vec(const block_q4_K *b, const fv_q4_K_st *st, const fv_q4_K_cs *cs, const int c, const int i) {
    (void)st, (void)b;
    __m256i v = dq_u8x(cs->q + 8 * i);
    v = c & 1 ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(15));
    return _mm256_sub_ps(_mm256_mul_ps(cs->dl, _mm256_cvtepi32_ps(v)), cs->ml);
}

#endif

/* Q6_K: ds[g] = fl(d * sc[g]) for the 16 groups of 16. Per half h (128
 * weights) from ql (64 bytes) and qh (32 bytes), with byte ops on whole
 * vectors:
 *   elements 0..63:   low nibbles of ql | (qh bits 0-1 for ql bytes 0..31,
 *                     bits 2-3 for bytes 32..63) << 4;
 *   elements 64..127: high nibbles of ql | (qh bits 4-5 / 6-7) << 4;
 * minus 32; then per vector: sign-extend, convert, times its group's ds. */
typedef struct { float ds[16]; } fv_q6_K_st;

#if L == 16

TGTI void fv_q6_K_prep(const block_q6_K *b, fv_q6_K_st *st) {
    _mm512_storeu_ps(st->ds, _mm512_mul_ps(_mm512_set1_ps(dq_h2f(b->d)),
                                           _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)))));
}
/* Chunk c (64 weights): elements 64c.. of the block = half c / 2, part c & 1. */
typedef struct { __m512i q; } fv_q6_K_cs;
TGTI void fv_q6_K_cprep(const block_q6_K *b, const fv_q6_K_st *st, const int c, fv_q6_K_cs *cs) {
    (void)st;
    const int h = c / 2;
    const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512i ql = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    __m512i q;
    if (c & 1) q = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m0f), _mm512_and_si512(qh2, m30));
    else q = _mm512_or_si512(_mm512_and_si512(ql, m0f), _mm512_and_si512(_mm512_slli_epi16(qh2, 4), m30));
    cs->q = _mm512_sub_epi8(q, _mm512_set1_epi8(32));
}
TGTI vf fv_q6_K_vec(const block_q6_K *b, const fv_q6_K_st *st, const fv_q6_K_cs *cs, const int c, const int i) {
    (void)b;
    __m128i q = i == 0 ? _mm512_castsi512_si128(cs->q)
                : i == 1 ? _mm512_extracti32x4_epi32(cs->q, 1)
                : i == 2 ? _mm512_extracti32x4_epi32(cs->q, 2)
                         : _mm512_extracti32x4_epi32(cs->q, 3);
    return _mm512_mul_ps(_mm512_set1_ps(st->ds[4 * c + i]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}
#define FV_Q6_K_CW 64

#else

TGTI void fv_q6_K_prep(const block_q6_K *b, fv_q6_K_st *st) {
    __m256 d = _mm256_set1_ps(dq_h2f(b->d));
    __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    _mm256_storeu_ps(st->ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(st->ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)))));
}
/* Chunk c (32 weights): elements 32c.. = half c / 4, quarter cc = c % 4:
 * nibble of ql[64h + 32 (cc & 1)..] (high for cc >= 2), qh bits 2cc, 2cc+1. */
typedef struct { __m256i q; } fv_q6_K_cs;
TGTI void fv_q6_K_cprep(const block_q6_K *b, const fv_q6_K_st *st, const int c, fv_q6_K_cs *cs) {
    (void)st;
    const int h = c / 4, cc = c % 4;
    /* re-load ql / qh per chunk rather than keep them across chunks (spills) */
    __asm__ volatile("" : "+r"(b));
    const __m256i m0f = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (cc & 1)));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    l = cc >= 2 ? _mm256_srli_epi16(l, 4) : l;
    qh = cc == 0 ? _mm256_slli_epi16(qh, 4) : cc == 1 ? _mm256_slli_epi16(qh, 2) : cc == 3 ? _mm256_srli_epi16(qh, 2) : qh;
    __m256i q = _mm256_or_si256(_mm256_and_si256(l, m0f), _mm256_and_si256(qh, m30));
    cs->q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
}
TGTI vf fv_q6_K_vec(const block_q6_K *b, const fv_q6_K_st *st, const fv_q6_K_cs *cs, const int c, const int i) {
    (void)b;
    __m128i h = i < 2 ? _mm256_castsi256_si128(cs->q) : _mm256_extracti128_si256(cs->q, 1);
    if (i & 1) h = _mm_unpackhi_epi64(h, h);
    return _mm256_mul_ps(_mm256_set1_ps(st->ds[2 * c + i / 2]), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h)));
}
#define FV_Q6_K_CW 32

#endif

MV_FAST(q4_0, block_q4_0, 32, 32)
MV_FAST(q8_0, block_q8_0, 32, 32)
MV_FAST(q4_K, block_q4_K, 256, 32)
MV_FAST(q6_K, block_q6_K, 256, FV_Q6_K_CW)
#undef MV_FAST

/* The kernel table of this ISA (the generic kernels of the formats with a
 * fast one stay unused). */
static void f32_kernel_fill(tnd_f32_kernel *k) {
    *k = (tnd_f32_kernel){.lanes = L, .max_r = MR, .max_t = MT, .tile = tile};
#if L == 16
    k->matvec[TND_TYPE_Q4_0] = mv_fast_q4_0;
#else
    /* 8 lanes: the generic kernel shares one expand between the two nibbles
     * of a byte; measured faster than the fast one for Q4_0 on Zen 3. */
    k->matvec[TND_TYPE_Q4_0] = mv_gen_q4_0;
#endif
    k->matvec[TND_TYPE_Q4_1] = mv_gen_q4_1;
    k->matvec[TND_TYPE_Q5_0] = mv_gen_q5_0;
    k->matvec[TND_TYPE_Q5_1] = mv_gen_q5_1;
    k->matvec[TND_TYPE_Q8_0] = mv_fast_q8_0;
    k->matvec[TND_TYPE_MXFP4] = mv_gen_mxfp4;
    k->matvec[TND_TYPE_Q2_K] = mv_gen_q2_K;
    k->matvec[TND_TYPE_Q3_K] = mv_gen_q3_K;
    k->matvec[TND_TYPE_Q4_K] = mv_fast_q4_K;
    k->matvec[TND_TYPE_Q5_K] = mv_gen_q5_K;
    k->matvec[TND_TYPE_Q6_K] = mv_fast_q6_K;
    k->matvec[TND_TYPE_F16] = mv_gen_f16;
    k->matvec[TND_TYPE_BF16] = mv_gen_bf16;
}

#endif
