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

/* Per token and per 16-element chunk of the quantized activations, what the
 * prefill kernels need besides the int8 values: the chunk's scale, the sum of
 * its quants, and their product. Computed once per call by the driver. */
typedef struct tnd_act_aux {
    float da;  /* scale of the activation block holding the chunk */
    float dsa; /* da * sa */
    int32_t sa; /* sum of the chunk's 16 quants */
    int32_t pad;
} tnd_act_aux;

#define TND_CHUNK 16

/* Prefill kernel: like tnd_mm_kernel, plus aux (nt rows of n_in/16 entries,
 * x_aux entries apart). Used when nt >= TND_GEMM_MIN_TOK. */
typedef void (*tnd_gemm_kernel)(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq,
                                size_t x_row, const tnd_act_aux *aux, int64_t nt, float *y, int64_t y_stride);
#define TND_GEMM_MIN_TOK 8

/* Lays out nt rows of quantized activations (x_row bytes apart) the way a
 * decode kernel reads them, into out; returns the bytes per token of that
 * layout (out NULL: only the size). The driver runs it once per call, and
 * the kernel then gets out as xq, that size as x_row. */
typedef size_t (*tnd_mm_prep_fn)(int64_t n_in, const void *xq, size_t x_row, int64_t nt, void *out);

typedef struct tnd_mm_entry {
    tnd_mm_kernel fn;     /* NULL: no kernel at this ISA (generic path) */
    tnd_type act;         /* activation type fn and gemm expect */
    tnd_gemm_kernel gemm; /* NULL: fn (or generic) for every nt */
    tnd_mm_prep_fn prep;  /* NULL: fn takes the quantized rows as they are */
} tnd_mm_entry;

typedef struct tnd_cpu_kernels {
    tnd_mm_entry mm[TND_TYPE_COUNT];        /* by weight type */
    tnd_act_quant_fn quant[TND_TYPE_COUNT]; /* by activation type */
} tnd_cpu_kernels;

/* Fill in the entries each ISA implements (entries left alone stay generic). */
void tnd_cpu_kernels_avx2(tnd_cpu_kernels *k);
void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k);

/* A per-thread buffer of at least n bytes (64-byte aligned), kept between
 * calls; slot 0 is the driver's, slot 1 the kernels'. NULL if out of memory. */
void *tnd_cpu_tls_buf(int slot, size_t n);

/* XCR0, the register state the OS enables (xgetbv 0); only to be called
 * where cpuid reports OSXSAVE. 0 off x86. */
uint64_t tnd_cpu_xgetbv0(void);
/* Highest ISA this CPU (and OS) supports. */
tnd_cpu_isa_id tnd_cpu_isa_best(void);
/* Selects the ISA used from now on; returns false (and changes nothing) if
 * the machine lacks it. Tests use it to run every path; not thread-safe
 * against concurrent matmuls. */
bool tnd_cpu_isa_force(tnd_cpu_isa_id isa);
/* The ISA currently in use. */
tnd_cpu_isa_id tnd_cpu_isa_id_current(void);
/* Bytes ahead of its reads that a decode kernel prefetches a weight
 * stream (matmul_x86.h: pf_ahead); 3072, or TND_CPU_PF_DIST, read with the
 * kernel tables. */
extern int tnd_cpu_pf_dist;
/* Kernel table of the ISA in use. */
const tnd_cpu_kernels *tnd_cpu_kernels_current(void);

#endif
