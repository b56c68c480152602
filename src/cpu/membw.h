/* Host memory read bandwidth, measured the way the CPU kernels read weights
 * (every thread streams a contiguous share): the denominator of the
 * matvec benchmarks and of the physical limit (docs/ARCHITECTURE.md: The physical limit). */
#ifndef TND_CPU_MEMBW_H
#define TND_CPU_MEMBW_H

#include <stddef.h>

#include "cpu/pool.h"

/* Reads n bytes of buf (64-byte aligned) once with every thread of pool;
 * returns the seconds it took. */
double tnd_cpu_read_once(tnd_pool *pool, const void *buf, size_t n);
/* GB/s of the best of reps passes over each 16 MiB piece of buf (pieces in
 * turn, so reads come from DRAM, not cache). */
double tnd_cpu_read_bw(tnd_pool *pool, const void *buf, size_t n, int reps);

#endif
