/* Quantized matrix-vector products for decode (y = W x, n_tok 1..8), every
 * block format, and the expert (MoE) variant.
 *
 * Decode is bound by reading W once from HBM, so the kernel is shaped for
 * bytes in flight: a block of threads owns R rows; its threads stride over
 * the row's 32-value subs, each thread decoding one sub of each of the R rows
 * per step (the sub's quants come in wide loads, 16 bytes where the format's
 * alignment allows) and dotting it with x. x is kept in registers for the
 * step (32 floats), so it is read once per R rows instead of once per row:
 * with R >= 2 the L1 traffic of x no longer exceeds that of W. Decoding to
 * f32 (no x quantization) keeps the result as exact as the f32 reference.
 * Partial sums are reduced with warp shuffles, then across warps in shared
 * memory.
 */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

#define MV_MAX_WARPS 8

/* dot of a decoded sub with 32 x values */
__device__ __forceinline__ float sub_dot(const sub32 &w, const float *xv) {
    float s0 = 0.f, s1 = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        s0 = fmaf(w.q[i], xv[i], s0);
        x0 += xv[i];
        s1 = fmaf(w.q[i + 16], xv[i + 16], s1);
        x1 += xv[i + 16];
    }
    return w.a0 * s0 + w.b0 * x0 + w.a1 * s1 + w.b1 * x1;
}

/* 32 values of x from sub s (zeros past n_in). */
__device__ __forceinline__ void load_x(const float *x, int64_t s, int64_t n_in, float *xv) {
    const float *p = x + s * 32;
    int64_t left = n_in - s * 32;
    if (left >= 32 && ((uintptr_t)p & 15) == 0) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 v = __ldg((const float4 *)p + i);
            xv[4 * i] = v.x; xv[4 * i + 1] = v.y; xv[4 * i + 2] = v.z; xv[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) xv[i] = i < left ? __ldg(p + i) : 0.0f;
    }
}

/* Reduces acc[N] over the block and lets thread i < N write out[i]. */
template <int N>
__device__ __forceinline__ void block_reduce_n(float (&acc)[N], float (*red)[N]) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = warp_sum(acc[i]);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < N; i++) red[wid][i] = acc[i];
    }
    __syncthreads();
}

/* T == 1, R rows per block. With ids: blockIdx.y = t*n_used + u selects the
 * token and the expert. */
template <int TY, int R>
__global__ void k_matvec1(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out,
                          const float *__restrict__ x, float *__restrict__ y, const int32_t *__restrict__ ids,
                          int n_used, int64_t n_expert) {
    __shared__ float red[MV_MAX_WARPS][R];
    const int64_t r0 = (int64_t)blockIdx.x * R;
    bool bad = false;
    if (ids) {
        int64_t pair = blockIdx.y, t = pair / n_used;
        int32_t e = ids[pair];
        bad = e < 0 || e >= n_expert;
        W += (bad ? 0 : (size_t)e) * (size_t)n_out * row_bytes;
        x += t * n_in;
        y += pair * n_out;
    }
    const int64_t nsub = (n_in + 31) / 32;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    if (!bad) {
        for (int64_t s = threadIdx.x; s < nsub; s += blockDim.x) {
            float xv[32];
            load_x(x, s, n_in, xv);
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (r0 + r < n_out) {
                    sub32 w;
                    load_sub<TY>(W + (size_t)(r0 + r) * row_bytes, s, n_in, w);
                    acc[r] += sub_dot(w, xv);
                }
            }
        }
    }
    block_reduce_n<R>(acc, red);
    int nw = blockDim.x >> 5;
    if (threadIdx.x < R && r0 + threadIdx.x < n_out) {
        float v = 0.f;
        for (int i = 0; i < nw; i++) v += red[i][threadIdx.x];
        y[r0 + threadIdx.x] = bad ? __int_as_float(0x7fc00000) : v;
    }
}

/* T tokens (1..TMAX valid given by n_tok), one row per block. */
template <int TY, int TMAX>
__global__ void k_matvecT(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in, int64_t n_out,
                          const float *__restrict__ x, int n_tok, float *__restrict__ y) {
    __shared__ float red[MV_MAX_WARPS][TMAX];
    const int64_t r = blockIdx.x;
    const int64_t nsub = (n_in + 31) / 32;
    float acc[TMAX];
#pragma unroll
    for (int t = 0; t < TMAX; t++) acc[t] = 0.f;
    for (int64_t s = threadIdx.x; s < nsub; s += blockDim.x) {
        sub32 w;
        load_sub<TY>(W + (size_t)r * row_bytes, s, n_in, w);
#pragma unroll
        for (int t = 0; t < TMAX; t++) {
            if (t < n_tok) {
                float xv[32];
                load_x(x + (int64_t)t * n_in, s, n_in, xv);
                acc[t] += sub_dot(w, xv);
            }
        }
    }
    block_reduce_n<TMAX>(acc, red);
    int nw = blockDim.x >> 5;
    if (threadIdx.x < n_tok) {
        float v = 0.f;
        for (int i = 0; i < nw; i++) v += red[i][threadIdx.x];
        y[(int64_t)threadIdx.x * n_out + r] = v;
    }
}

extern "C" const char *tnd_cu_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

extern "C" bool tnd_cu_type_supported(int type) {
    switch (type) {
#define X(t) case t:
        TND_CU_TYPE_CASES(X)
#undef X
        return true;
    default: return false;
    }
}

extern "C" size_t tnd_cu_row_size(int type, int64_t n) { return tnd_cu_row_bytes(type, n); }

static int check_w(int type, const void *W, int64_t n_in, int64_t n_out) {
    if (!tnd_cu_type_supported(type) || !W || n_in <= 0 || n_out <= 0) return cudaErrorInvalidValue;
    if (tnd_cu_row_bytes(type, n_in) == 0) return cudaErrorInvalidValue;
    if ((uintptr_t)W & 15) return cudaErrorMisalignedAddress;
    if (n_out > 0x7fffffff) return cudaErrorInvalidValue;
    return 0;
}

/* Threads per block for a row of nsub subs: enough to cover the row in a few
 * steps, no more (idle threads cost occupancy). */
static int mv_threads(int64_t nsub) {
    if (nsub >= 512) return 256;
    if (nsub >= 128) return 128;
    if (nsub >= 64) return 64;
    return 32;
}

template <int TY>
static void launch1(int R, int threads, const void *W, size_t rb, int64_t n_in, int64_t n_out, const float *x,
                    float *y, const int32_t *ids, int n_used, int64_t n_expert, unsigned gy, cudaStream_t st) {
    dim3 grid(tnd_cu_blocks(n_out, R), gy);
    const uint8_t *w8 = (const uint8_t *)W;
    switch (R) {
    case 1: k_matvec1<TY, 1><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert); break;
    case 2: k_matvec1<TY, 2><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert); break;
    default: k_matvec1<TY, 4><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert); break;
    }
}

template <int TY>
static void launchT(int n_tok, int threads, const void *W, size_t rb, int64_t n_in, int64_t n_out, const float *x,
                    float *y, cudaStream_t st) {
    const uint8_t *w8 = (const uint8_t *)W;
    unsigned grid = (unsigned)n_out;
    if (n_tok <= 2) k_matvecT<TY, 2><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
    else if (n_tok <= 4) k_matvecT<TY, 4><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
    else k_matvecT<TY, 8><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
}

static int dispatch1(int type, int R, int threads, const void *W, int64_t n_in, int64_t n_out, const float *x,
                     float *y, const int32_t *ids, int n_used, int64_t n_expert, unsigned gy, cudaStream_t st) {
    size_t rb = tnd_cu_row_bytes(type, n_in);
    switch (type) {
#define X(t) case t: launch1<t>(R, threads, W, rb, n_in, n_out, x, y, ids, n_used, n_expert, gy, st); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* Rows per block for one token: 2 keeps x's L1 traffic at W's while the
 * grid still has enough blocks to fill every SM on 4096-row matrices. */
static int mv_rows(int64_t n_out) { return n_out >= 2048 ? 2 : 1; }

extern "C" int tnd_cu_matvec(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                             float *y, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8) return cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    int64_t nsub = (n_in + 31) / 32;
    int threads = mv_threads(nsub);
    if (n_tok == 1) return dispatch1(type, mv_rows(n_out), threads, W, n_in, n_out, x, y, NULL, 1, 0, 1, st);
    size_t rb = tnd_cu_row_bytes(type, n_in);
    switch (type) {
#define X(t) case t: launchT<t>(n_tok, threads, W, rb, n_in, n_out, x, y, st); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_matvec_cfg(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, float *y,
                                 int rows_per_block, int threads, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || (rows_per_block != 1 && rows_per_block != 2 && rows_per_block != 4)) return cudaErrorInvalidValue;
    if (threads < 32 || threads > 32 * MV_MAX_WARPS || threads % 32) return cudaErrorInvalidValue;
    return dispatch1(type, rows_per_block, threads, W, n_in, n_out, x, y, NULL, 1, 0, 1, (cudaStream_t)stream);
}

extern "C" int tnd_cu_matvec_id(int type, const void *W, int64_t n_in, int64_t n_out, int64_t n_expert,
                                const float *x, int64_t n_tok, const int32_t *ids, int n_used, float *y,
                                tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || !ids || n_expert < 1 || n_tok < 1 || n_used < 1) return cudaErrorInvalidValue;
    int64_t pairs = n_tok * n_used;
    if (pairs > 65535) return cudaErrorInvalidValue; /* grid.y limit */
    int64_t nsub = (n_in + 31) / 32;
    return dispatch1(type, mv_rows(n_out), mv_threads(nsub), W, n_in, n_out, x, y, ids, n_used, n_expert,
                     (unsigned)pairs, (cudaStream_t)stream);
}
