/* Dequantization of weight blocks to f32 for the f32-activation matmul
 * (cpu/matmul_f32.h), with SIMD versions chosen at run time.
 *
 * Every dequantizer is bit-exact with the type's reference to_float
 * (quant/ref_*.c): dequantization is exact integer unpacking followed by the
 * same float operations in the same order (d * q, d * q + m, dl * q - ml,
 * each rounded separately; no fused multiply-add). The one exception: an F16
 * signaling NaN comes out quieted by the hardware conversion (the reference
 * keeps it signaling); weights never hold NaNs.
 *
 * The ISA is the one cpu/matmul.c selected (cpuid, TND_CPU_ISA=scalar|avx2|
 * avx512, tnd_cpu_isa_force), so both matmul paths always agree on it. */
#ifndef TND_CPU_DEQUANT_H
#define TND_CPU_DEQUANT_H

#include <stdint.h>

#include "quant/quant.h"

/* Dequantizes k values (a multiple of the type's block size) from blocks x
 * into y (y need not be aligned). Same contract as tnd_to_float_fn. */
typedef tnd_to_float_fn tnd_dequant_fn;

/* Dequantizer of type t for the ISA in use; NULL if t is not supported. */
tnd_dequant_fn tnd_cpu_dequant_fn(tnd_type t);

/* Dequantizer of type t for ISA isa (a tnd_cpu_isa_id: 0 scalar, 1 AVX2,
 * 2 AVX-512), whether or not this CPU can run it (tests check the CPU);
 * NULL if t is not supported. */
tnd_dequant_fn tnd_cpu_dequant_fn_isa(tnd_type t, int isa);

/* Per-ISA tables (dequant_avx2.c, dequant_avx512.c): fill in the entries the
 * ISA implements, leave the others alone. Internal to cpu/. */
void tnd_cpu_dequant_table_avx2(tnd_dequant_fn tab[TND_TYPE_COUNT]);
void tnd_cpu_dequant_table_avx512(tnd_dequant_fn tab[TND_TYPE_COUNT]);

#endif
