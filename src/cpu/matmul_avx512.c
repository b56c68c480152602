/* AVX-512 (F, BW, VL, DQ, VNNI) kernels. */
#include "cpu/matmul_impl.h"

void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k) { (void)k; }
