/* AVX2 + FMA tile kernel of the f32-activation matmul (8 lanes).
 *
 * Register blocking: up to 4 weight rows x 3 tokens = 12 accumulators, plus
 * 3 activation vectors and one weight vector (16 ymm registers). Per 8 k:
 * 4 + 3 loads for 12 FMAs, so FMA-bound from L1. The same kernel serves
 * decode (nt <= 3, weights dequantized just before into a small L1 buffer)
 * and prefill, which is what makes their results bit-identical. */
#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

#define TGT __attribute__((target("avx2,fma")))
#define TGTI static inline __attribute__((target("avx2,fma"), always_inline))

#define L 8
#define MR 4
#define MT 3

/* Fixed reduction tree: (l, l+4), then (l, l+2), then (0, 1). */
TGTI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGTI void tile_rt(const int R, const int T, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc,
                  float *st, int64_t st_rs, int first, int last, float *y, int64_t ys) {
    __m256 acc[MR][MT];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(st + r * st_rs + t * L);
    int64_t k = 0;
    for (; k + L <= kc; k += L) {
        __m256 xv[MT];
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(x + t * xs + k);
        for (int r = 0; r < R; r++) {
            __m256 wv = _mm256_loadu_ps(w + r * ws + k);
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (k < kc) { /* float formats only: n_in not a multiple of 8 */
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(kc - k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 xv[MT];
        for (int t = 0; t < T; t++) xv[t] = _mm256_maskload_ps(x + t * xs + k, m);
        for (int r = 0; r < R; r++) {
            __m256 wv = _mm256_maskload_ps(w + r * ws + k, m);
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            if (last) y[t * ys + r] = hsum8(acc[r][t]);
            else _mm256_storeu_ps(st + r * st_rs + t * L, acc[r][t]);
        }
}

TGT static void tile(int nr, int nt, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc, float *st,
                     int64_t st_rs, int first, int last, float *y, int64_t ys) {
#define CASE(R, T) \
    case (R) * 4 + (T): tile_rt(R, T, w, ws, x, xs, kc, st, st_rs, first, last, y, ys); break;
    switch (nr * 4 + nt) {
        CASE(1, 1) CASE(1, 2) CASE(1, 3)
        CASE(2, 1) CASE(2, 2) CASE(2, 3)
        CASE(3, 1) CASE(3, 2) CASE(3, 3)
        CASE(4, 1) CASE(4, 2) CASE(4, 3)
    default: break;
    }
#undef CASE
}

void tnd_f32_kernel_avx2(tnd_f32_kernel *k) { *k = (tnd_f32_kernel){.lanes = L, .max_r = MR, .max_t = MT, .tile = tile}; }
