/* Internal interface between the matmul driver (matmul.c) and the per-ISA
 * kernel files (matmul_avx2.c, matmul_avx512.c). Not for users of cpu/. */
#ifndef TND_CPU_MATMUL_IMPL_H
#define TND_CPU_MATMUL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

typedef enum tnd_cpu_isa_id { TND_ISA_SCALAR = 0, TND_ISA_AVX2 = 1, TND_ISA_AVX512 = 2 } tnd_cpu_isa_id;

/* Computes a tile of products: for r < nr, t < nt
 *     y[t * y_stride + r] = dot(row r of W, activation row t)
 * W: nr rows of n_in weights, w_row bytes apart. xq: nt activation rows in the
 * kernel's activation type, x_row bytes apart. The kernel tiles internally. */
typedef void (*tnd_mm_kernel)(int64_t n_in, const void *W, size_t w_row, int64_t nr,
                              const void *xq, size_t x_row, int64_t nt, float *y, int64_t y_stride);

/* Quantizes k floats (k a multiple of the block size) into activation blocks;
 * must produce exactly what the type's reference from_float produces. */
typedef void (*tnd_act_quant_fn)(const float *x, void *y, int64_t k);

typedef struct tnd_mm_entry {
    tnd_mm_kernel fn; /* NULL: no kernel at this ISA */
    tnd_type act;     /* activation type fn expects */
} tnd_mm_entry;

typedef struct tnd_cpu_kernels {
    tnd_mm_entry mm[TND_TYPE_COUNT];        /* by weight type */
    tnd_act_quant_fn quant[TND_TYPE_COUNT]; /* by activation type */
} tnd_cpu_kernels;

/* Fill in the entries each ISA implements (entries left alone stay generic). */
void tnd_cpu_kernels_avx2(tnd_cpu_kernels *k);
void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k);

/* Highest ISA this CPU (and OS) supports. */
tnd_cpu_isa_id tnd_cpu_isa_best(void);
/* Selects the ISA used from now on; returns false (and changes nothing) if
 * the machine lacks it. Tests use it to run every path; not thread-safe
 * against concurrent matmuls. */
bool tnd_cpu_isa_force(tnd_cpu_isa_id isa);
/* The ISA currently in use. */
tnd_cpu_isa_id tnd_cpu_isa_id_current(void);
/* Kernel table of the ISA in use. */
const tnd_cpu_kernels *tnd_cpu_kernels_current(void);

#endif
