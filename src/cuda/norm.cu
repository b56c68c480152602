/* RMSNorm over rows, with an optional weight; the per-head norm of qwen3's
 * q/k is the same kernel on rows of head_dim. One block per row; the sum of
 * squares is reduced in f32 (rows are at most a few thousand values). */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

__global__ void k_rms_norm(const float *x, const float *__restrict__ w, float *y, int64_t n, float eps) {
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)n + eps);
    /* each thread rewrites only the elements it read: y may alias x */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
}

extern "C" int tnd_cu_rms_norm(const float *x, const float *w, float *y, int64_t n, int64_t rows, float eps,
                               tnd_cu_stream stream) {
    if (!x || !y || n < 1 || rows < 1 || rows > 0x7fffffff) return cudaErrorInvalidValue;
    if (rows == 0) return 0;
    int threads = n >= 1024 ? 256 : n >= 256 ? 128 : 32;
    k_rms_norm<<<(unsigned)rows, threads, 0, (cudaStream_t)stream>>>(x, w, y, n, eps);
    return (int)cudaGetLastError();
}
