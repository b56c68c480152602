/* The GPU loads of dev/stress.c: an SM hog and a host-to-GPU copier. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stress_gpu.h"

static thread_local char g_err[256];

static int fail(const char *what, cudaError_t e) {
    snprintf(g_err, sizeof g_err, "%s: %s", what, cudaGetErrorString(e));
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

extern "C" const char *stress_gpu_error(void) { return g_err; }

extern "C" int stress_gpu_init(int *n_sm, char *name, size_t name_cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fail("no CUDA device", e);
    if (n < 1) {
        snprintf(g_err, sizeof g_err, "no CUDA device");
        return 1;
    }
    cudaDeviceProp p;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess)
        return fail("device 0", e);
    if ((e = cudaFree(0)) != cudaSuccess) return fail("CUDA context", e); /* the context now, not in phase 1 */
    *n_sm = p.multiProcessorCount;
    snprintf(name, name_cap, "%s", p.name);
    return 0;
}

/* Every thread spins on the global timer, so the block holds its SM (its
 * warps and, through the launch's dynamic shared memory, the SM's shared
 * memory) for the whole time. */
__global__ void k_spin(unsigned long long ns) {
    extern __shared__ unsigned char smem[];
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    if (threadIdx.x == 0 && t == 0) smem[0] = 1; /* never: keeps smem referenced */
}

extern "C" int stress_gpu_hog(int blocks, double spin_ms, bool (*stop)(void *), void *arg, stress_gpu_stats *st) {
    memset(st, 0, sizeof *st);
    cudaError_t e;
    if ((e = cudaSetDevice(0)) != cudaSuccess) return fail("device 0", e);
    int smem = 0;
    if ((e = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0)) != cudaSuccess ||
        (e = cudaFuncSetAttribute(k_spin, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
        return fail("hog: shared memory", e);
    cudaStream_t s;
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess) return fail("hog: stream", e);
    const unsigned long long ns = (unsigned long long)(spin_ms * 1e6);
    const double t0 = now_s();
    int rc = 0;
    while (!stop(arg)) {
        k_spin<<<blocks, 1024, smem, s>>>(ns);
        if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaStreamSynchronize(s)) != cudaSuccess) {
            rc = fail("hog: launch", e);
            break;
        }
        st->n++;
    }
    st->seconds = now_s() - t0;
    cudaStreamDestroy(s);
    return rc;
}

extern "C" int stress_gpu_copy(size_t bytes, bool (*stop)(void *), void *arg, stress_gpu_stats *st) {
    memset(st, 0, sizeof *st);
    cudaError_t e;
    if ((e = cudaSetDevice(0)) != cudaSuccess) return fail("device 0", e);
    void *host = NULL, *dev = NULL;
    cudaStream_t s = NULL;
    int rc = 0;
    if ((e = cudaMallocHost(&host, bytes)) != cudaSuccess) {
        rc = fail("copier: pinned host block", e);
        goto done;
    }
    memset(host, 1, bytes);
    if ((e = cudaMalloc(&dev, bytes)) != cudaSuccess) {
        rc = fail("copier: GPU block", e);
        goto done;
    }
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = fail("copier: stream", e);
        goto done;
    }
    {
        const double t0 = now_s();
        while (!stop(arg)) {
            if ((e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s)) != cudaSuccess ||
                (e = cudaStreamSynchronize(s)) != cudaSuccess) {
                rc = fail("copier: copy", e);
                break;
            }
            st->n++;
        }
        st->seconds = now_s() - t0;
    }
done:
    if (s) cudaStreamDestroy(s);
    if (dev) cudaFree(dev);
    if (host) cudaFreeHost(host);
    return rc;
}
