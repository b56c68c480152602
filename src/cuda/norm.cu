/* RMSNorm over rows, with an optional weight; the per-head norm of qwen3's
 * q/k is the same kernel on rows of head_dim (or fused into RoPE, rope.cu).
 * One block per row; the sum of squares is reduced in f32 (rows are at most
 * a few thousand values). The fused form first adds a residual into x (the
 * recipe's `x += o; h = norm(x)`), saving the ADD's launch. */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

/* r == NULL: y = norm(x). Else s = x + r is written to sum (may alias x)
 * and normed: the ADD kernel's sums, and the same reduction as unfused. */
__global__ void k_rms_norm(const float *x, const float *r, const float *__restrict__ w, float *y, float *sum,
                           int64_t n, float eps) {
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    if (r) {
        const float *rr = r + (int64_t)blockIdx.x * n;
        float *sr = sum + (int64_t)blockIdx.x * n;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sr[i] = xr[i] + rr[i];
        xr = sr; /* each thread reads back only what it wrote */
    }
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)n + eps);
    /* each thread rewrites only the elements it read: y may alias x */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * (w ? w[i] : 1.0f);
}

static int norm_launch(const float *x, const float *r, const float *w, float *y, float *sum, int64_t n, int64_t rows,
                       float eps, tnd_cu_stream stream) {
    if (!x || !y || (r && !sum) || n < 1 || rows < 1 || rows > 0x7fffffff) return cudaErrorInvalidValue;
    k_rms_norm<<<(unsigned)rows, tnd_cu_norm_threads(n), 0, (cudaStream_t)stream>>>(x, r, w, y, sum, n, eps);
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_rms_norm(const float *x, const float *w, float *y, int64_t n, int64_t rows, float eps,
                               tnd_cu_stream stream) {
    return norm_launch(x, NULL, w, y, NULL, n, rows, eps, stream);
}

extern "C" int tnd_cu_rms_norm_add(const float *x, const float *r, const float *w, float *y, float *sum, int64_t n,
                                   int64_t rows, float eps, tnd_cu_stream stream) {
    if (!r) return cudaErrorInvalidValue;
    return norm_launch(x, r, w, y, sum, n, rows, eps, stream);
}
