/* AVX-512 (F, BW, VL, DQ) dequantizers: the unpacking of dequant_x86.h (32
 * quants per step) with 16-wide conversion, scaling and stores. Same float
 * operations as the references, unfused. */
#include <immintrin.h>
#include <string.h>

#include "cpu/dequant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))
#define DQ_WIDTH 16
#define DQ_DEFINE_DEQUANT
#define DQ(name) dq5_##name
#include "cpu/dequant_x86.h"

TGT static void dq5_f16(const void *vx, float *y, int64_t k) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    for (; i < k; i++) y[i] = _cvtsh_ss(x[i]);
}

TGT static void dq5_bf16(const void *vx, float *y, int64_t k) {
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    for (; i < k; i++) y[i] = tnd_bf16_to_fp32(x[i]);
}

void tnd_cpu_dequant_table_avx512(tnd_dequant_fn tab[TND_TYPE_COUNT]) {
    tab[TND_TYPE_F16] = dq5_f16;
    tab[TND_TYPE_BF16] = dq5_bf16;
    tab[TND_TYPE_Q4_0] = dq5_q4_0;
    tab[TND_TYPE_Q4_1] = dq5_q4_1;
    tab[TND_TYPE_Q5_0] = dq5_q5_0;
    tab[TND_TYPE_Q5_1] = dq5_q5_1;
    tab[TND_TYPE_Q8_0] = dq5_q8_0;
    tab[TND_TYPE_MXFP4] = dq5_mxfp4;
    tab[TND_TYPE_Q2_K] = dq5_q2_K;
    tab[TND_TYPE_Q3_K] = dq5_q3_K;
    tab[TND_TYPE_Q4_K] = dq5_q4_K;
    tab[TND_TYPE_Q5_K] = dq5_q5_K;
    tab[TND_TYPE_Q6_K] = dq5_q6_K;
}
