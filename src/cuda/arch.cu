/* Which architecture the device code runs as, so that no kernel whose body
 * was compiled out is ever chosen.
 *
 * Why: a build for sm_75 only still runs on an sm_90 GPU. The driver
 * JIT-compiles its compute_75 PTX, in which every body under
 * `#if __CUDA_ARCH__ >= 800` (tensor-core mma, cp.async) is missing, and a
 * choice made from the device's compute capability alone would then run
 * kernels that do nothing: wrong tokens, at a speed that looks good. So the
 * files that choose kernels by architecture (matvec_mma.cu, matvec_tile.cu,
 * attn.cu) ask the
 * runtime which architecture their own code was loaded as on this device
 * (cudaFuncGetAttributes on a probe kernel of theirs, TND_CU_UNIT_ARCH in
 * common.cuh) and choose by that. Where that is below what the device could
 * run, one warning says so and names the fix; the callers fall back to
 * kernels that exist. Every `#if __CUDA_ARCH__` body that a fallback must
 * avoid has an `#else __trap()`, so a miss fails loudly.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"
extern "C" {
#include "util.h"
}

#ifndef TND_CUDA_ARCHS
#define TND_CUDA_ARCHS "unknown" /* set by CMakeLists.txt from CMAKE_CUDA_ARCHITECTURES */
#endif

/* this file's own probe (TND_CU_UNIT_ARCH's kernel, without its chooser):
 * the tests launch it to check that the attribute query agrees with the
 * __CUDA_ARCH__ the code actually ran as */
__global__ void k_unit_arch_arch(int *out) { *out = cu_arch_here(); }

static int arch_cap;      /* tests: treat code as built for at most this (0: no cap) */
static int warned;        /* the fallback warning, once per process */
static int n_fallbacks;   /* how many times a unit's architecture was below its device's */

extern "C" int tnd_cu_device_arch(void) {
    static int cache[TND_CU_MAX_DEV];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= TND_CU_MAX_DEV) {
        cudaGetLastError();
        return 0;
    }
    int a = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);
    if (!a) {
        int ma = 0, mi = 0;
        if (cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        a = ma * 100 + mi * 10;
        __atomic_store_n(&cache[dev], a, __ATOMIC_RELAXED);
    }
    return a;
}

extern "C" int tnd_cu_code_arch(const void *kernel) {
    cudaFuncAttributes at;
    if (cudaFuncGetAttributes(&at, kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    /* ptxVersion: the virtual architecture the code was compiled from (75 for
     * JIT-compiled compute_75 PTX, 90 for an sm_90 cubin built from
     * compute_90); binaryVersion, the machine code's, only if that is 0 */
    return (at.ptxVersion ? at.ptxVersion : at.binaryVersion) * 10;
}

extern "C" int tnd_cu_arch_usable(int code_arch) {
    const int cap = __atomic_load_n(&arch_cap, __ATOMIC_RELAXED);
    if (cap > 0 && code_arch > cap) code_arch = cap;
    const int dev = tnd_cu_device_arch();
    /* a family falls back only where the device could run it: sm_80 for the
     * mma and cp.async kernels, sm_90 for bulk copies and PDL */
    /* 0: the query failed; nothing is known, and the callers then choose
     * the fallbacks anyway */
    const bool short_of = code_arch > 0 && ((code_arch < 800 && dev >= 800) || (code_arch < 900 && dev >= 900));
    if (short_of) {
        __atomic_fetch_add(&n_fallbacks, 1, __ATOMIC_RELAXED);
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            TND_WARN("cuda: this build has no sm_%d code for the GPU (built for %s): the driver compiled "
                     "compute_%d code, which lacks the kernels that need sm_%d or later (tensor cores, "
                     "cp.async, bulk copies); slower kernels run instead. Rebuild for this GPU: cmake -S . -B "
                     "build -DCMAKE_CUDA_ARCHITECTURES=%d (or configure a new build folder on this machine)",
                     dev / 10, TND_CUDA_ARCHS, code_arch / 10, code_arch < 800 ? 80 : 90, dev / 10);
    }
    return code_arch;
}

extern "C" void tnd_cu_arch_cap(int arch) {
    __atomic_store_n(&arch_cap, arch, __ATOMIC_RELAXED);
    __atomic_store_n(&warned, 0, __ATOMIC_RELAXED);
}

extern "C" int tnd_cu_arch_fallbacks(void) { return __atomic_load_n(&n_fallbacks, __ATOMIC_RELAXED); }

extern "C" int tnd_cu_arch_probe(int *attr_arch, int *ran_arch) {
    *attr_arch = tnd_cu_code_arch((const void *)k_unit_arch_arch);
    *ran_arch = 0;
    int *d = NULL;
    cudaError_t e = cudaMalloc(&d, sizeof(int));
    if (e == cudaSuccess) {
        k_unit_arch_arch<<<1, 1>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(ran_arch, d, sizeof(int), cudaMemcpyDeviceToHost);
    if (d) cudaFree(d);
    return (int)e;
}

/* ---- the public view (tandem.h) ----------------------------------------- */

extern "C" const char *tnd_cuda_build_archs(void) { return TND_CUDA_ARCHS; }

extern "C" tnd_status tnd_cuda_device_get(int dev, tnd_cuda_device_info *out) {
    if (!out) return tnd_fail(TND_ERR_ARG, "cuda: no place for the device info");
    memset(out, 0, sizeof *out);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (dev < 0 || dev >= n) return tnd_fail(TND_ERR_ARG, "cuda: device %d does not exist (%d found)", dev, n);
    int prev = 0;
    cudaGetDevice(&prev);
    cudaError_t e = cudaSetDevice(dev);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, dev);
    size_t fr = 0, tot = 0;
    if (e == cudaSuccess) e = cudaMemGetInfo(&fr, &tot);
    if (e == cudaSuccess) {
        memcpy(out->name, prop.name, sizeof out->name - 1);
        out->arch = prop.major * 100 + prop.minor * 10;
        out->code_arch = tnd_cu_code_arch((const void *)k_unit_arch_arch);
        out->mem_total = tot;
        out->mem_free = fr;
    }
    cudaSetDevice(prev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return tnd_fail(TND_ERR_BACKEND, "cuda: describing device %d: %s", dev, cudaGetErrorString(e));
    }
    return TND_OK;
}
