/* AVX-512 tile kernel of the f32-activation matmul (16 lanes).
 *
 * Register blocking: up to 4 weight rows x 6 tokens = 24 accumulators, plus
 * 6 activation vectors and one weight vector (31 of 32 zmm registers). Per
 * 16 k: 4 + 6 loads for 24 FMAs. See matmul_f32_avx2.c for the contract. */
#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

/* No contraction of the dequantization's mul + add (see dequant_x86.h). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))

#define L 16
#define DQ_WIDTH 16
#include "cpu/dequant_x86.h"
#define MR 4
#define MT 6

/* Fixed reduction tree: (l, l+8), (l, l+4), (l, l+2), (0, 1). */
TGTI float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGTI void tile_rt(const int R, const int T, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc,
                  float *st, int64_t st_rs, int first, int last, float *y, int64_t ys) {
    __m512 acc[MR][MT];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(st + r * st_rs + t * L);
    int64_t k = 0;
    for (; k + L <= kc; k += L) {
        __m512 xv[MT];
        for (int t = 0; t < T; t++) xv[t] = _mm512_loadu_ps(x + t * xs + k);
        for (int r = 0; r < R; r++) {
            __m512 wv = _mm512_loadu_ps(w + r * ws + k);
            for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (k < kc) { /* float formats only: n_in not a multiple of 16 */
        __mmask16 m = (__mmask16)((1u << (kc - k)) - 1);
        __m512 xv[MT];
        for (int t = 0; t < T; t++) xv[t] = _mm512_maskz_loadu_ps(m, x + t * xs + k);
        for (int r = 0; r < R; r++) {
            __m512 wv = _mm512_maskz_loadu_ps(m, w + r * ws + k);
            for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            if (last) y[t * ys + r] = hsum16(acc[r][t]);
            else _mm512_storeu_ps(st + r * st_rs + t * L, acc[r][t]);
        }
}

TGT static void tile(int nr, int nt, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc, float *st,
                     int64_t st_rs, int first, int last, float *y, int64_t ys) {
#define CASE(R, T) \
    case (R) * 8 + (T): tile_rt(R, T, w, ws, x, xs, kc, st, st_rs, first, last, y, ys); break;
#define ROW(R) CASE(R, 1) CASE(R, 2) CASE(R, 3) CASE(R, 4) CASE(R, 5) CASE(R, 6)
    switch (nr * 8 + nt) {
        ROW(1) ROW(2) ROW(3) ROW(4)
    default: break;
    }
#undef ROW
#undef CASE
}


/* ---- fused decode kernels ------------------------------------------------------ */

/* Per block of each of R rows: its scales, then per 32-chunk the quants ->
 * DQ_NV vectors (dq_emit, the dequantizers' own code) -> FMAs into the
 * (row, token) accumulators in ascending k, exactly the tile's order. */
#define MV_DEF(fmt, BT, QK, KIND)                                                                          \
    TGTI void mv_##fmt##_rt(const int R, const int T, const uint8_t *W, size_t w_row, const float *x,      \
                            int64_t xs, int64_t n_in, float *y, int64_t ys) {                              \
        __m512 acc[4][TND_F32_MATVEC_MAX_TOK];                                                                \
        for (int r = 0; r < R; r++)                                                                        \
            for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();                                               \
        for (int64_t b = 0; b < n_in / (QK); b++) {                                                        \
            dq_sc s[4];                                                                                    \
            for (int r = 0; r < R; r++) fmt##_prep((const BT *)(W + (size_t)r * w_row) + b, &s[r]);        \
            for (int c = 0; c < (QK) / 32; c++) {                                                          \
                const float *xc = x + b * (QK) + 32 * c;                                                   \
                for (int r = 0; r < R; r++) {                                                              \
                    dq_vec w[DQ_NV];                                                                       \
                    fmt##_emit((const BT *)(W + (size_t)r * w_row) + b, c, &s[r], w);                      \
                    for (int v = 0; v < DQ_NV; v++)                                                        \
                        for (int t = 0; t < T; t++)                                                        \
                            acc[r][t] = _mm512_fmadd_ps(w[v], _mm512_loadu_ps(xc + t * xs + v * L), acc[r][t]);                 \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < R; r++)                                                                        \
            for (int t = 0; t < T; t++) y[t * ys + r] = hsum16(acc[r][t]);                                   \
    }                                                                                                      \
    TGT static void mv_##fmt(const uint8_t *W, size_t w_row, int64_t nr, const float *x, int64_t xs, int nt, \
                             int64_t n_in, float *y, int64_t ys) {                                         \
        /* 4 rows for one token (4 independent FMA chains), 2 for two */                                  \
        int R = nt == 1 ? 4 : nt == 2 ? 2 : 1;                                                             \
        for (int64_t r0 = 0; r0 < nr; r0 += R) {                                                           \
            const uint8_t *w = W + (size_t)r0 * w_row;                                                     \
            float *yr = y + r0;                                                                            \
            if (nr - r0 < R) {                                                                             \
                for (int64_t r = r0; r < nr; r++, w += w_row, yr++) {                                      \
                    switch (nt) {                                                                          \
                    case 1: mv_##fmt##_rt(1, 1, w, w_row, x, xs, n_in, yr, ys); break;                     \
                    case 2: mv_##fmt##_rt(1, 2, w, w_row, x, xs, n_in, yr, ys); break;                     \
                    default: break;                                                                        \
                    }                                                                                      \
                }                                                                                          \
                break;                                                                                     \
            }                                                                                              \
            switch (nt) {                                                                                  \
            case 1: mv_##fmt##_rt(4, 1, w, w_row, x, xs, n_in, yr, ys); break;                             \
            case 2: mv_##fmt##_rt(2, 2, w, w_row, x, xs, n_in, yr, ys); break;                             \
            case 3: mv_##fmt##_rt(1, 3, w, w_row, x, xs, n_in, yr, ys); break;                             \
            case 4: mv_##fmt##_rt(1, 4, w, w_row, x, xs, n_in, yr, ys); break;                             \
            default: break;                                                                                \
            }                                                                                              \
        }                                                                                                  \
    }
DQ_FORMATS(MV_DEF)
DQ_FLOAT_FORMATS(MV_DEF)
#undef MV_DEF


void tnd_f32_kernel_avx512(tnd_f32_kernel *k) {
    *k = (tnd_f32_kernel){.lanes = L, .max_r = MR, .max_t = MT, .tile = tile};
    k->matvec[TND_TYPE_Q4_0] = mv_q4_0;
    k->matvec[TND_TYPE_Q4_1] = mv_q4_1;
    k->matvec[TND_TYPE_Q5_0] = mv_q5_0;
    k->matvec[TND_TYPE_Q5_1] = mv_q5_1;
    k->matvec[TND_TYPE_Q8_0] = mv_q8_0;
    k->matvec[TND_TYPE_MXFP4] = mv_mxfp4;
    k->matvec[TND_TYPE_Q2_K] = mv_q2_K;
    k->matvec[TND_TYPE_Q3_K] = mv_q3_K;
    k->matvec[TND_TYPE_Q4_K] = mv_q4_K;
    k->matvec[TND_TYPE_Q5_K] = mv_q5_K;
    k->matvec[TND_TYPE_Q6_K] = mv_q6_K;
    k->matvec[TND_TYPE_F16] = mv_f16;
    k->matvec[TND_TYPE_BF16] = mv_bf16;
}
