/* Internal interface between the f32-activation matmul driver (matmul_f32.c)
 * and its per-ISA tile kernels (matmul_f32_avx2.c, matmul_f32_avx512.c). */
#ifndef TND_CPU_MATMUL_F32_IMPL_H
#define TND_CPU_MATMUL_F32_IMPL_H

#include <stdint.h>

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

typedef struct tnd_f32_kernel {
    int lanes, max_r, max_t;
    tnd_f32_tile_fn tile;
} tnd_f32_kernel;

void tnd_f32_kernel_avx2(tnd_f32_kernel *k);
void tnd_f32_kernel_avx512(tnd_f32_kernel *k);

#endif
