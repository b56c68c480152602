/* Internal interface between the f32-activation matmul driver (matmul_f32.c)
 * and its per-ISA tile kernels (matmul_f32_avx2.c, matmul_f32_avx512.c). */
#ifndef TND_CPU_MATMUL_F32_IMPL_H
#define TND_CPU_MATMUL_F32_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

/* One tile of products over one K chunk: for r < nr, t < nt, the L-lane
 * accumulator of (r, t) runs acc[l] = fma(w[r][k], x[t][k], acc[l]) for the
 * chunk's k (lane l = k mod L, ascending; kc need not be a multiple of L:
 * the last partial vector is loaded masked, lanes past kc add 0 * 0).
 *   w: nr rows of kc dequantized weights, ws floats apart.
 *   x: nt token rows, xs floats apart, already offset to the chunk.
 *   st: accumulators, (r, t) at st + r * st_rs + t * L; read unless first
 *       (then zero), written unless last (then summed: y[t * ys + r]).
 * nr <= max_r, nt <= max_t of the kernel. */
typedef void (*tnd_f32_tile_fn)(int nr, int nt, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc,
                                float *st, int64_t st_rs, int first, int last, float *y, int64_t ys);

/* Fused decode kernel of one weight format: for r < nr, t < nt (nt <= 4),
 * y[t * ys + r] = the dot of row r of W (rows w_row bytes apart, n_in
 * elements) with token row t of x (xs floats apart), dequantizing each block
 * into registers right before its FMAs. Same float values and the same
 * summation order as dequantize + tile, so bit-identical with it. n_in a
 * multiple of 32 (the driver uses the tile path otherwise). */
typedef void (*tnd_f32_matvec_fn)(const uint8_t *W, size_t w_row, int64_t nr, const float *x, int64_t xs, int nt,
                                  int64_t n_in, float *y, int64_t ys);
#define TND_F32_MATVEC_MAX_TOK 4

typedef struct tnd_f32_kernel {
    int lanes, max_r, max_t;
    tnd_f32_tile_fn tile;
    tnd_f32_matvec_fn matvec[TND_TYPE_COUNT]; /* NULL: dequantize + tile */
} tnd_f32_kernel;

void tnd_f32_kernel_avx2(tnd_f32_kernel *k);
void tnd_f32_kernel_avx512(tnd_f32_kernel *k);

#endif
