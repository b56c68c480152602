/* AVX-512 kernels of the f32-activation matmul (16 lanes); the body is
 * matmul_f32_x86.h.
 *
 * Tile register blocking: up to 4 weight rows x 6 tokens = 24 accumulators,
 * plus 6 activation vectors and one weight vector (31 of 32 zmm registers).
 * Per 16 k: 4 + 6 loads for 24 FMAs. See matmul_f32_avx2.c. */
#include <immintrin.h>

#include "cpu/matmul_f32_impl.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"), always_inline))

#define L 16
#define DQ_WIDTH 16
#define MR 4
#define MT 6
#include "cpu/dequant_x86.h"
#include "cpu/matmul_f32_x86.h"

void tnd_f32_kernel_avx512(tnd_f32_kernel *k) { f32_kernel_fill(k); }
