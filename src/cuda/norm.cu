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

/* The same with the row held in registers, C values a thread (n <= C *
 * blockDim.x): every load is issued at once and the row read once, where
 * the loops above wait for memory three times (a decode norm is a chain of
 * such waits: ~10 us a launch, 73 a qwen3-8b token). The same values in
 * the same order: the same bits. */
template <int C>
__global__ void k_rms_norm_reg(const float *x, const float *r, const float *__restrict__ w, float *y, float *sum,
                               int n, float eps) {
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float v[C], ss = 0.f;
#pragma unroll
    for (int k = 0; k < C; k++) {
        int i = threadIdx.x + k * blockDim.x;
        v[k] = i < n ? xr[i] : 0.f;
    }
    if (r) {
        const float *rr = r + (int64_t)blockIdx.x * n;
        float *sr = sum + (int64_t)blockIdx.x * n;
#pragma unroll
        for (int k = 0; k < C; k++) {
            int i = threadIdx.x + k * blockDim.x;
            if (i < n) sr[i] = v[k] = v[k] + rr[i];
        }
    }
#pragma unroll
    for (int k = 0; k < C; k++)
        if (threadIdx.x + k * blockDim.x < n) ss = fmaf(v[k], v[k], ss);
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)n + eps);
#pragma unroll
    for (int k = 0; k < C; k++) {
        int i = threadIdx.x + k * blockDim.x;
        if (i < n) yr[i] = v[k] * inv * (w ? w[i] : 1.0f);
    }
}

static int norm_launch(const float *x, const float *r, const float *w, float *y, float *sum, int64_t n, int64_t rows,
                       float eps, tnd_cu_stream stream) {
    if (!x || !y || (r && !sum) || n < 1 || rows < 1 || rows > 0x7fffffff) return cudaErrorInvalidValue;
    const int th = tnd_cu_norm_threads(n);
    const dim3 grid((unsigned)rows);
    cudaStream_t st = (cudaStream_t)stream;
    if (n <= 8 * th) k_rms_norm_reg<8><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps);
    else if (n <= 16 * th) k_rms_norm_reg<16><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps);
    else if (n <= 32 * th) k_rms_norm_reg<32><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps);
    else k_rms_norm<<<grid, th, 0, st>>>(x, r, w, y, sum, n, eps);
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
