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
/* One head's RMS norm (weight w) from xr into yr, by the block, as norm.cu
 * norms a row of head_dim; yr may alias xr (each thread rewrites only what
 * it read). Ends with the block synchronized. */
__device__ __forceinline__ void head_norm(const float *xr, float *yr, const float *__restrict__ w, float eps,
                                          int head_dim, float *sh) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum(ss, sh);
    float inv = rsqrtf(ss / (float)head_dim + eps);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
    __syncthreads(); /* a pair's two values were normed by different threads */
}

/* One head's first n_rot values of yr rotated in place for position p, a
 * pair a thread, with k_rope's arithmetic. */
__device__ __forceinline__ void head_rotate(float *yr, int32_t p, int n_rot, int neox, double freq_base,
                                            double freq_scale) {
    const int half = n_rot / 2;
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

__global__ void k_rope_norm(const float *x, float *y, const int32_t *__restrict__ pos, const float *__restrict__ w,
                            float eps, int n_head, int head_dim, int n_rot, int neox, double freq_base,
                            double freq_scale) {
    __shared__ float sh[32];
    const int64_t th = blockIdx.x; /* token * n_head + head */
    float *yr = y + th * head_dim;
    head_norm(x + th * head_dim, yr, w, eps, head_dim, sh);
    head_rotate(yr, pos[th / n_head], n_rot, neox, freq_base, freq_scale);
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

/* ROPE_KV (backend.h): a block per (token, head) of q, then of k, then of
 * v. A q or k head is normed (w set) and rotated in place as k_rope_norm
 * does, or rotated as k_rope does (w NULL: each thread its pairs, the same
 * arithmetic), so the results are theirs to the bit; a k head is then
 * stored as f16 into K's row pos, a v head straight into V's, as
 * k_f32_to_f16_at stores (rows outside [0, cap) are skipped). */
__global__ void k_rope_kv(float *q, float *k, const float *__restrict__ v, const int32_t *__restrict__ pos,
                          const float *__restrict__ wq, const float *__restrict__ wk, float eps, __half *Kc,
                          __half *Vc, int64_t cap, int n_head, int n_head_kv, int head_dim, int n_rot, int neox,
                          double freq_base, double freq_scale) {
    __shared__ float sh[32];
    const int per = n_head + 2 * n_head_kv;
    const int64_t t = blockIdx.x / per;
    int h = (int)(blockIdx.x % per);
    const int32_t p = pos[t];
    const int64_t kvd = (int64_t)n_head_kv * head_dim;
    if (h >= n_head + n_head_kv) { /* v */
        h -= n_head + n_head_kv;
        if (p < 0 || p >= cap) return;
        const float *vr = v + t * kvd + (int64_t)h * head_dim;
        __half *dst = Vc + (int64_t)p * kvd + (int64_t)h * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = __float2half_rn(vr[i]);
        return;
    }
    const bool is_k = h >= n_head;
    float *x = is_k ? k + (t * n_head_kv + (h - n_head)) * head_dim : q + (t * n_head + h) * head_dim;
    const float *w = is_k ? wk : wq;
    if (w) head_norm(x, x, w, eps, head_dim, sh);
    head_rotate(x, p, n_rot, neox, freq_base, freq_scale);
    if (!is_k || p < 0 || p >= cap) return;
    __syncthreads(); /* the rotated values came from other threads */
    __half *dst = Kc + (int64_t)p * kvd + (int64_t)(h - n_head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = __float2half_rn(x[i]);
}

extern "C" int tnd_cu_rope_kv(float *q, float *k, const float *v, const int32_t *pos, const float *wq,
                              const float *wk, float eps, uint16_t *K, uint16_t *V, int64_t cap, int64_t n_tok,
                              int n_head, int n_head_kv, int head_dim, int n_rot, int mode, float freq_base,
                              float freq_scale, tnd_cu_stream stream) {
    if (!q || !k || !v || !pos || !K || !V || !wq != !wk || n_tok < 1 || n_head < 1 || n_head_kv < 1 ||
        head_dim < 2 || n_rot < 2 || (n_rot & 1) || n_rot > head_dim || (mode != 0 && mode != 2) ||
        !(freq_base > 0) || n_tok * (n_head + 2 * (int64_t)n_head_kv) > 0x7fffffff)
        return cudaErrorInvalidValue;
    k_rope_kv<<<(unsigned)(n_tok * (n_head + 2 * n_head_kv)), tnd_cu_norm_threads(head_dim), 0,
                (cudaStream_t)stream>>>(q, k, v, pos, wq, wk, eps, (__half *)K, (__half *)V, cap, n_head, n_head_kv,
                                        head_dim, n_rot, mode == 2, freq_base, freq_scale);
    return (int)cudaGetLastError();
}
