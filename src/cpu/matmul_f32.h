/* Weight x activation products on the CPU with f32 activations, for every
 * supported weight type: the default CPU matmul (cpu/matmul.h's int8 path,
 * which quantizes activations to Q8, is the opt-in for prefill throughput).
 *
 * Same contract as tnd_cpu_matmul: W is n_out rows of n_in elements of type
 * wt (ne[0] = n_in), x is n_tok rows of n_in floats, y is n_tok rows of n_out
 * floats, y[t][r] = sum_k W[r][k] * x[t][k].
 *
 * Weights are dequantized exactly (cpu/dequant.h: bit-exact with to_float)
 * and every output is a sum of f32 FMAs in one fixed order that depends on
 * neither n_tok, nor the other tokens of the call, nor the thread count: with
 * L the ISA's vector width (8 for scalar and AVX2, 16 for AVX-512), lane l
 * accumulates w[k] * x[k] for k = l, l + L, l + 2L, ... in that order, then
 * the L lanes are added in a fixed tree. So y for token t is bit-identical
 * whether t is computed alone (decode) or in a prefill batch, and chunked
 * prefill equals token-by-token evaluation exactly (same ISA).
 *
 * Error against the exact (double) dot of the dequantized weights: each lane
 * sums about n_in / L terms and the tree adds log2(L) levels, so
 * |y - exact| <= (n_in / L + log2 L + 1) * 2^-24 * sum_k |w_k x_k| (first-order
 * bound; tests/test_cpu_matmul_f32.c holds every ISA to it). */
#ifndef TND_CPU_MATMUL_F32_H
#define TND_CPU_MATMUL_F32_H

#include <stdint.h>

#include "cpu/pool.h"
#include "quant/quant.h"

void tnd_cpu_matmul_f32(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tok, float *y);

/* Same, restricted to output rows [r0, r1) of W (y still has n_out columns;
 * only those are written). */
void tnd_cpu_matmul_f32_rows(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, int64_t r0,
                             int64_t r1, const float *x, int64_t n_tok, float *y);

/* Lanes of the summation order in use (8 or 16): for tests and tools. */
int tnd_cpu_matmul_f32_lanes(void);

#endif
