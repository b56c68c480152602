/* The GPU loads of dev/stress.c (dev/stress_gpu.cu; a build without CUDA
 * gets stubs that fail with a message). */
#ifndef TND_DEV_STRESS_GPU_H
#define TND_DEV_STRESS_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stress_gpu_stats {
    uint64_t n;     /* launches or copies completed */
    double seconds; /* time they took in all */
} stress_gpu_stats;

/* Opens device 0; its SM count and name. 0 on success, else see
 * stress_gpu_error(). */
int stress_gpu_init(int *n_sm, char *name, size_t name_cap);
/* Launches a kernel of `blocks` blocks (one per SM: each takes the SM's
 * shared memory) that spins spin_ms, again and again until stop(arg). */
int stress_gpu_hog(int blocks, double spin_ms, bool (*stop)(void *), void *arg, stress_gpu_stats *st);
/* Copies a pinned host block of `bytes` to the GPU, again and again until
 * stop(arg), on a stream of its own; frees both buffers before returning. */
int stress_gpu_copy(size_t bytes, bool (*stop)(void *), void *arg, stress_gpu_stats *st);
/* The last failure's message (per thread). */
const char *stress_gpu_error(void);

#ifdef __cplusplus
}
#endif

#endif
