/* Rotary position embedding, normal (pairs 2i, 2i+1) and NeoX (pairs i,
 * i + n_rot/2). The angle is computed in double: with --use_fast_math the
 * float sin/cos lose accuracy at the large angles of long contexts
 * (pos * freq reaches 10^5 rad), and double keeps the kernel within float
 * rounding of the reference at any position. One thread per pair. */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

__global__ void k_rope(const float *x, float *y, const int32_t *__restrict__ pos, int64_t n_tok, int n_head,
                       int head_dim, int n_rot, int neox, double freq_base, double freq_scale) {
    const int half = head_dim / 2; /* pairs per head, rotated or not */
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t total = n_tok * n_head * half;
    if (idx >= total) return;
    int i = (int)(idx % half);
    int64_t th = idx / half; /* token * n_head + head */
    int64_t t = th / n_head;
    const float *xr = x + th * head_dim;
    float *yr = y + th * head_dim;
    if (2 * i >= n_rot) {
        /* not rotated: copy this pair's two elements (same indices either mode) */
        yr[2 * i] = xr[2 * i];
        yr[2 * i + 1] = xr[2 * i + 1];
        if (head_dim & 1 && i == half - 1) yr[head_dim - 1] = xr[head_dim - 1];
        return;
    }
    int i0 = neox ? i : 2 * i, i1 = neox ? i + n_rot / 2 : 2 * i + 1;
    double theta = (double)pos[t] * freq_scale * pow(freq_base, -2.0 * i / n_rot);
    double s, c;
    sincos(theta, &s, &c);
    float a = xr[i0], b = xr[i1];
    yr[i0] = (float)(a * c - b * s);
    yr[i1] = (float)(a * s + b * c);
}

extern "C" int tnd_cu_rope(const float *x, float *y, const int32_t *pos, int64_t n_tok, int n_head, int head_dim,
                           int n_rot, int mode, float freq_base, float freq_scale, tnd_cu_stream stream) {
    if (!x || !y || !pos || n_tok < 1 || n_head < 1 || head_dim < 2 || n_rot < 2 || (n_rot & 1) ||
        n_rot > head_dim || (mode != 0 && mode != 2) || !(freq_base > 0))
        return cudaErrorInvalidValue;
    int64_t total = n_tok * n_head * (head_dim / 2);
    k_rope<<<tnd_cu_blocks(total, 256), 256, 0, (cudaStream_t)stream>>>(x, y, pos, n_tok, n_head, head_dim, n_rot,
                                                                        mode == 2, freq_base, freq_scale);
    return (int)cudaGetLastError();
}

/* The fused per-head norm (qwen3's q/k norms) and the rotation: one block
 * per (token, head), as many threads as norm.cu gives a row of head_dim,
 * so the normed values are k_rms_norm's to the bit; the pairs then rotate
 * as k_rope rotates them. */
__global__ void k_rope_norm(const float *x, float *y, const int32_t *__restrict__ pos, const float *__restrict__ w,
                            float eps, int n_head, int head_dim, int n_rot, int neox, double freq_base,
                            double freq_scale) {
    __shared__ float sh[32];
    const int64_t th = blockIdx.x; /* token * n_head + head */
    const float *xr = x + th * head_dim;
    float *yr = y + th * head_dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)head_dim + eps);
    /* each thread rewrites only the elements it read: y may alias x */
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
    __syncthreads(); /* a pair's two values were normed by different threads */
    const int half = n_rot / 2;
    const int32_t p = pos[th / n_head];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        double theta = (double)p * freq_scale * pow(freq_base, -2.0 * i / n_rot);
        double s, c;
        sincos(theta, &s, &c);
        float a = yr[i0], b = yr[i1];
        yr[i0] = (float)(a * c - b * s);
        yr[i1] = (float)(a * s + b * c);
    }
}

extern "C" int tnd_cu_rope_norm(const float *x, float *y, const int32_t *pos, const float *w, float eps,
                                int64_t n_tok, int n_head, int head_dim, int n_rot, int mode, float freq_base,
                                float freq_scale, tnd_cu_stream stream) {
    if (!x || !y || !pos || !w || n_tok < 1 || n_head < 1 || head_dim < 2 || n_rot < 2 || (n_rot & 1) ||
        n_rot > head_dim || (mode != 0 && mode != 2) || !(freq_base > 0) || n_tok * n_head > 0x7fffffff)
        return cudaErrorInvalidValue;
    k_rope_norm<<<(unsigned)(n_tok * n_head), tnd_cu_norm_threads(head_dim), 0, (cudaStream_t)stream>>>(
        x, y, pos, w, eps, n_head, head_dim, n_rot, mode == 2, freq_base, freq_scale);
    return (int)cudaGetLastError();
}
