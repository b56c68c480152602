/* Weight x activation products on the CPU, for every supported block type.
 *
 * W is a GGUF weight tensor: n_out rows of n_in elements (ne[0] = n_in),
 * type wt. x is n_tok rows of n_in floats; y is n_tok rows of n_out floats:
 *     y[t][r] = sum_k W[r][k] * x[t][k]
 * Activations are quantized once per call to the type's vec_dot_type (the
 * integer path) where the type has one. Work is split over the pool's threads
 * by contiguous row ranges so each thread streams its own part of W.
 * The ISA (scalar, AVX2, AVX-512) is chosen at run time; TND_CPU_ISA=scalar|avx2|avx512
 * forces a lower one. */
#ifndef TND_CPU_MATMUL_H
#define TND_CPU_MATMUL_H

#include <stdint.h>

#include "cpu/pool.h"
#include "quant/quant.h"

void tnd_cpu_matmul(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out,
                    const float *x, int64_t n_tok, float *y);

/* Same, restricted to output rows [r0, r1) of W (y still has n_out columns;
 * only those are written). For expert slices and split tensors. */
void tnd_cpu_matmul_rows(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out,
                         int64_t r0, int64_t r1, const float *x, int64_t n_tok, float *y);

/* Copies row `row` of W (n_in elements, type wt) as floats into out. */
void tnd_cpu_get_row(tnd_type wt, const void *W, int64_t n_in, int64_t row, float *out);

/* Name of the ISA in use: "avx512", "avx2" or "scalar". */
const char *tnd_cpu_isa(void);

#endif
