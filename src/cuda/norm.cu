/* RMSNorm over rows, with an optional weight; the per-head norm of qwen3's
 * q/k is the same kernel on rows of head_dim (or fused into RoPE, rope.cu).
 * One block per row; the sum of squares is reduced in f32 (rows are at most
 * a few thousand values). The fused form first adds a residual into x (the
 * recipe's `x += o; h = norm(x)`), saving the ADD's launch; the residual
 * may be an MoE layer's expert sum, made in the same launch (MOE_SUM_NORM). */
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
 * the same order: the same bits.
 *
 * MOE: the residual is an MoE layer's expert sum, made here (MOE_SUM_NORM,
 * one launch instead of two): r is the expert outputs y [n_used][n] of the
 * row's token, wt its n_used weights, and each sum is written to o before
 * it is added. Each element's sum is k_moe_sum's (act.cu), in its order, and
 * the add reads it as the unfused norm reads o: the two launches' bits. */
template <int C, bool MOE>
__global__ void k_rms_norm_reg(const float *x, const float *r, const float *__restrict__ w, float *y, float *sum,
                               int n, float eps, const float *__restrict__ wt, int n_used, float *o) {
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
        float *sr = sum + (int64_t)blockIdx.x * n;
        const float *rr = r + (int64_t)blockIdx.x * (MOE ? n_used : 1) * n;
        const float *wr = MOE ? wt + (int64_t)blockIdx.x * n_used : NULL;
        float *orow = MOE ? o + (int64_t)blockIdx.x * n : NULL;
#pragma unroll
        for (int k = 0; k < C; k++) {
            int i = threadIdx.x + k * blockDim.x;
            if (i >= n) continue;
            float add;
            if (MOE) {
                add = 0.f;
                for (int u = 0; u < n_used; u++) add = fmaf(wr[u], rr[(int64_t)u * n + i], add);
                orow[i] = add;
            } else {
                add = rr[i];
            }
            sr[i] = v[k] = v[k] + add;
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
    if (n <= 8 * th) k_rms_norm_reg<8, false><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps, NULL, 0, NULL);
    else if (n <= 16 * th) k_rms_norm_reg<16, false><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps, NULL, 0, NULL);
    else if (n <= 32 * th) k_rms_norm_reg<32, false><<<grid, th, 0, st>>>(x, r, w, y, sum, (int)n, eps, NULL, 0, NULL);
    else k_rms_norm<<<grid, th, 0, st>>>(x, r, w, y, sum, n, eps);
    return (int)cudaGetLastError();
}

extern "C" bool tnd_cu_moe_sum_norm_supported(int64_t n, int n_used) {
    return n >= 1 && n <= 32 * tnd_cu_norm_threads(n) && n_used >= 1;
}

extern "C" int tnd_cu_moe_sum_norm(const float *x, const float *ey, const float *wt, const float *w, float *y,
                                   float *sum, float *o, int64_t n, int n_used, int64_t rows, float eps,
                                   tnd_cu_stream stream) {
    if (!x || !ey || !wt || !y || !sum || !o || rows < 1 || rows > 0x7fffffff ||
        !tnd_cu_moe_sum_norm_supported(n, n_used))
        return cudaErrorInvalidValue;
    const int th = tnd_cu_norm_threads(n);
    const dim3 grid((unsigned)rows);
    cudaStream_t st = (cudaStream_t)stream;
    if (n <= 8 * th) k_rms_norm_reg<8, true><<<grid, th, 0, st>>>(x, ey, w, y, sum, (int)n, eps, wt, n_used, o);
    else if (n <= 16 * th) k_rms_norm_reg<16, true><<<grid, th, 0, st>>>(x, ey, w, y, sum, (int)n, eps, wt, n_used, o);
    else k_rms_norm_reg<32, true><<<grid, th, 0, st>>>(x, ey, w, y, sum, (int)n, eps, wt, n_used, o);
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
