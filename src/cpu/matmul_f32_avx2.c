/* AVX2 + FMA kernels of the f32-activation matmul (8 lanes); the body is
 * matmul_f32_x86.h.
 *
 * Tile register blocking: up to 4 weight rows x 3 tokens = 12 accumulators,
 * plus 3 activation vectors and one weight vector (16 ymm registers). Per
 * 8 k: 4 + 3 loads for 12 FMAs, so FMA-bound from L1. The same tile serves
 * prefill and the decode of float formats; quantized formats decode through
 * the fused kernels, which compute the same floats in the same order. */
#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

/* No contraction of the dequantization's mul + add (see dequant_x86.h). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c"), always_inline))

#define L 8
#define DQ_WIDTH 8
#define MR 4
#define MT 3
#include "cpu/dequant_x86.h"
#include "cpu/matmul_f32_x86.h"

void tnd_f32_kernel_avx2(tnd_f32_kernel *k) { f32_kernel_fill(k); }
