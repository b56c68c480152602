/* AVX-512 (F, BW, VL, DQ, VNNI) kernels.
 *
 * The prefill kernels of matmul_x86.h compiled with vpdpbusd (AVX512-VNNI on
 * 256-bit vectors, AVX512VL): one instruction per 4-byte dot instead of
 * vpmaddubsw + vpmaddwd, and no 16-bit intermediate to bound. Decode
 * (matvec) keeps the AVX2 kernels, inherited through the table: with all
 * cores reading, they are limited by DRAM, not by instruction throughput. */
#include <immintrin.h>

#include "cpu/matmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"), always_inline))
#define X86_VNNI 1
#include "cpu/matmul_x86.h"

void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k) { x86_register_gemm(k); }
