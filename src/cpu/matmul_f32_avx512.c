/* AVX-512 tile kernel of the f32-activation matmul (16 lanes).
 *
 * Register blocking: up to 4 weight rows x 6 tokens = 24 accumulators, plus
 * 6 activation vectors and one weight vector (31 of 32 zmm registers). Per
 * 16 k: 4 + 6 loads for 24 FMAs. See matmul_f32_avx2.c for the contract. */
#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define TGTI static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"), always_inline))

#define L 16
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

void tnd_f32_kernel_avx512(tnd_f32_kernel *k) {
    *k = (tnd_f32_kernel){.lanes = L, .max_r = MR, .max_t = MT, .tile = tile};
}
