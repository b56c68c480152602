/* Element-wise ops (SiLU/GELU gating, add, scale), row softmax, f32<->f16
 * conversion, and the SM copy kernel for mapped host memory. Grid-stride
 * loops so any n works with a bounded grid. */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

static unsigned ew_grid(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : (b < 1 ? 1 : b));
}
#define GRID_STRIDE(i, n) for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_silu_mul(const float *g, const float *u, float *y, int64_t n) {
    /* silu(v) = v / (1 + e^-v); expf(-v) overflows to inf for v < -88 and
     * v / inf = -0, the right limit */
    GRID_STRIDE(i, n) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
    }
}
__global__ void k_gelu_mul(const float *g, const float *u, float *y, int64_t n) {
    GRID_STRIDE(i, n) {
        float v = g[i];
        /* tanh form; accurate tanhf (the CUDA sources build without
         * --use_fast_math, which would map it to tanh.approx, ~2^-11) */
        float t = tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
        y[i] = 0.5f * v * (1.0f + t) * u[i];
    }
}
__global__ void k_add(const float *a, const float *b, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}
__global__ void k_add_bcast(const float *a, const float *b, float *y, int64_t n, int64_t nb) {
    GRID_STRIDE(i, n) y[i] = a[i] + b[i % nb];
}
__global__ void k_moe_sum(const float *__restrict__ y, const float *__restrict__ w, float *__restrict__ out, int64_t n,
                          int n_used, int64_t n_tok) {
    GRID_STRIDE(i, n * n_tok) {
        int64_t t = i / n, k = i - t * n;
        const float *yt = y + t * n_used * n + k;
        const float *wt = w + t * n_used;
        float s = 0.f;
        for (int u = 0; u < n_used; u++) s = fmaf(wt[u], yt[(int64_t)u * n], s);
        out[i] = s;
    }
}
__global__ void k_scale(const float *x, float s, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = x[i] * s;
}
__global__ void k_f32_to_f16(const float *x, __half *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = __float2half_rn(x[i]);
}
/* row i of x (rl values) to row pos[i] of y; rows outside [0, cap) are
 * skipped (the executor never asks for them; backend.h) */
__global__ void k_f32_to_f16_at(const float *x, __half *y, const int32_t *pos, int64_t rl, int64_t n, int64_t cap) {
    GRID_STRIDE(i, n) {
        const int64_t r = i / rl, p = pos[r];
        if (p >= 0 && p < cap) y[p * rl + (i - r * rl)] = __float2half_rn(x[i]);
    }
}
__global__ void k_f16_to_f32(const __half *x, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = __half2float(x[i]);
}
/* 16 bytes per thread per step where both sides are 16-byte aligned (the
 * common case: activations are), bytes otherwise. */
__global__ void k_copy16(uint4 *dst, const uint4 *src, int64_t n16) {
    GRID_STRIDE(i, n16) dst[i] = src[i];
}
__global__ void k_copy1(uint8_t *dst, const uint8_t *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = src[i];
}

__global__ void k_softmax(const float *x, float *y, int64_t n, float scale) {
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, xr[i] * scale);
    m = block_max(m, sh);
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float e = expf(xr[i] * scale - m);
        yr[i] = e;
        s += e;
    }
    s = block_sum(s, sh);
    float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] *= inv;
}

#define EW_CHECK(...) \
    if (n < 0 || !(__VA_ARGS__)) return cudaErrorInvalidValue; \
    if (n == 0) return 0

extern "C" int tnd_cu_silu_mul(const float *g, const float *u, float *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(g && u && y);
    k_silu_mul<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(g, u, y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_gelu_mul(const float *g, const float *u, float *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(g && u && y);
    k_gelu_mul<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(g, u, y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_add(const float *a, const float *b, float *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(a && b && y);
    k_add<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(a, b, y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_add_bcast(const float *a, const float *b, float *y, int64_t n, int64_t nb,
                                tnd_cu_stream stream) {
    EW_CHECK(a && b && y && nb > 0 && n % nb == 0);
    k_add_bcast<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(a, b, y, n, nb);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_moe_sum(const float *y, const float *w, float *out, int64_t n, int n_used, int64_t n_tok,
                              tnd_cu_stream stream) {
    if (!y || !w || !out || n < 1 || n_used < 1 || n_tok < 0) return cudaErrorInvalidValue;
    if (n_tok == 0) return 0;
    k_moe_sum<<<ew_grid(n * n_tok), 256, 0, (cudaStream_t)stream>>>(y, w, out, n, n_used, n_tok);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_scale(const float *x, float s, float *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(x && y);
    k_scale<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(x, s, y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_f32_to_f16(const float *x, uint16_t *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(x && y);
    k_f32_to_f16<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(x, (__half *)y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_f32_to_f16_at(const float *x, uint16_t *y, const int32_t *pos, int64_t rl, int64_t n,
                                     int64_t cap, tnd_cu_stream stream) {
    EW_CHECK(x && y && pos && rl > 0);
    k_f32_to_f16_at<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>(x, (__half *)y, pos, rl, n, cap);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_f16_to_f32(const uint16_t *x, float *y, int64_t n, tnd_cu_stream stream) {
    EW_CHECK(x && y);
    k_f16_to_f32<<<ew_grid(n), 256, 0, (cudaStream_t)stream>>>((const __half *)x, y, n);
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_copy_sm(void *dst, const void *src, size_t n_bytes, tnd_cu_stream stream) {
    int64_t n = (int64_t)n_bytes;
    EW_CHECK(dst && src);
    cudaStream_t st = (cudaStream_t)stream;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
        int64_t n16 = n / 16, tail = n - n16 * 16;
        if (n16) k_copy16<<<ew_grid(n16), 256, 0, st>>>((uint4 *)dst, (const uint4 *)src, n16);
        if (tail) k_copy1<<<1, 32, 0, st>>>((uint8_t *)dst + n16 * 16, (const uint8_t *)src + n16 * 16, tail);
    } else {
        k_copy1<<<ew_grid(n), 256, 0, st>>>((uint8_t *)dst, (const uint8_t *)src, n);
    }
    return (int)cudaGetLastError();
}
extern "C" int tnd_cu_softmax(const float *x, float *y, int64_t n, int64_t rows, float scale, tnd_cu_stream stream) {
    if (!x || !y || n < 1 || rows < 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
    if (rows == 0) return 0;
    int threads = n >= 1024 ? 256 : n >= 256 ? 128 : 32;
    k_softmax<<<(unsigned)rows, threads, 0, (cudaStream_t)stream>>>(x, y, n, scale);
    return (int)cudaGetLastError();
}
