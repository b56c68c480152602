/* Prefill products: W decoded to f16 in row chunks, x converted to f16 once,
 * cuBLAS GemmEx with f32 accumulation and f32 output.
 *
 * Chunking bounds the scratch to chunk_rows x n_in halves whatever the size
 * of W; each chunk's GEMM writes its own rows of y directly (ldc = n_out), so
 * no gather pass is needed. The decode kernel is the matvec's decoder
 * (common.cuh), one thread per 32-value sub, a warp's 2 KB of f16 written
 * as one piece through shared memory: written a thread at a time, the
 * dequant took two thirds of an 8B prefill (docs/DECISIONS.md, "The
 * prefill's dequant writes whole pieces").
 */
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/q4k_tile.cuh"
#include "cuda/q6k_tile.cuh"
extern "C" {
#include "util.h"
}

#define MM_DEFAULT_CHUNK 4096

/* One sub's 32 values as f16, in four 16-byte pieces. */
__device__ __forceinline__ void sub32_f16(const sub32 &w, uint4 v[4]) {
    __half2 h[16];
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
        h[i / 2] = __floats2half2_rn(w.a0 * w.q[i] + w.b0, w.a0 * w.q[i + 1] + w.b0);
        h[8 + i / 2] = __floats2half2_rn(w.a1 * w.q[16 + i] + w.b1, w.a1 * w.q[17 + i] + w.b1);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = *(const uint4 *)&h[4 * j];
}

/* A thread's sub straight to o, `left` values of it: four 16-byte pieces
 * where o is aligned for them, else value by value. */
__device__ __forceinline__ void sub32_store(const sub32 &w, __half *o, int64_t left) {
    if (left >= 32 && (((uintptr_t)o) & 15) == 0) {
        uint4 v[4];
        sub32_f16(w, v);
#pragma unroll
        for (int j = 0; j < 4; j++) ((uint4 *)o)[j] = v[j];
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++)
            if (i < left) o[i] = __float2half_rn(i < 16 ? w.a0 * w.q[i] + w.b0 : w.a1 * w.q[i] + w.b1);
    }
}

/* A warp's 32 subs, lane i's the i-th 64 bytes of the 2 KB at dst (16-byte
 * aligned), through buf (128 pieces of this warp's): stored a thread per
 * sub, each warp store would touch 32 rows' worth of sectors; through
 * shared memory it writes 512 contiguous bytes. The pieces are swizzled so
 * that neither side has bank conflicts. */
__device__ __forceinline__ void sub32_store_warp(const sub32 &w, uint4 *buf, uint4 *dst, int lane) {
    uint4 v[4];
    sub32_f16(w, v);
#pragma unroll
    for (int j = 0; j < 4; j++) buf[4 * lane + (j ^ ((lane >> 1) & 3))] = v[j];
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int s = lane + 32 * k, t = s >> 2;
        dst[4 * t + ((s & 3) ^ ((t >> 1) & 3))] = buf[s];
    }
    __syncwarp();
}

#define DQ_THREADS 256
template <int TY>
__global__ void __launch_bounds__(DQ_THREADS) k_dequant_f16(const uint8_t *__restrict__ W, size_t row_bytes,
                                                            int64_t n_in, int64_t r0, int64_t nrows,
                                                            __half *__restrict__ out) {
    __shared__ uint4 buf[DQ_THREADS / 32][128];
    const int64_t nsub = (n_in + 31) / 32, total = nrows * nsub;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    /* rows of whole subs are back to back in out: a full warp's 32 subs are
     * 2 KB in one piece */
    const bool whole = n_in % 32 == 0 && idx - lane + 32 <= total && ((uintptr_t)out & 15) == 0;
    if (!whole && idx >= total) return;
    const int64_t r = idx / nsub, s = idx % nsub;
    sub32 w;
    load_sub<TY>(W + (size_t)(r0 + r) * row_bytes, s, n_in, w);
    if (whole)
        sub32_store_warp(w, buf[threadIdx.x / 32], (uint4 *)(out + (idx - lane) * 32), lane);
    else
        sub32_store(w, out + r * n_in + s * 32, n_in - s * 32);
}

__global__ void k_f32_to_f16_rows(const float *__restrict__ x, __half *__restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half_rn(x[i]);
}

extern "C" int tnd_cu_dequant_f16(int type, const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out,
                                  tnd_cu_stream stream) {
    if (!tnd_cu_type_supported(type) || !W || !out || n_in <= 0 || r0 < 0 || r1 <= r0) return cudaErrorInvalidValue;
    size_t rb = tnd_cu_row_bytes(type, n_in);
    if (!rb) return cudaErrorInvalidValue;
    if ((uintptr_t)W % tnd_cu_type_align(type)) return cudaErrorMisalignedAddress;
    int64_t nsub = (n_in + 31) / 32, total = (r1 - r0) * nsub;
    unsigned grid = tnd_cu_blocks(total, DQ_THREADS);
    cudaStream_t st = (cudaStream_t)stream;
    const uint8_t *w8 = (const uint8_t *)W;
    __half *o = (__half *)out;
    switch (type) {
#define X(t) case t: k_dequant_f16<t><<<grid, DQ_THREADS, 0, st>>>(w8, rb, n_in, r0, r1 - r0, o); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* Rows [r0, r1) of a Q4_K or Q6_K W in its tile layout (q4k_tile.cuh,
 * q6k_tile.cuh; r0 and r1 multiples of 16). A block takes DQT_SB
 * consecutive chunks of one group (contiguous bytes) into shared memory
 * with coalesced 16-byte loads, puts them back in the original layout
 * beside them (in the layout's units: 16 bytes for Q4_K, 2 for Q6_K), and
 * decodes from there as k_dequant_f16 does, a thread per 32 values, a
 * warp per row's DQT_SB blocks. (A thread per block gathering its pieces
 * from global memory ran qwen3-8b's pp512 10% slower than the original
 * layout with Q6_K; staged but still a thread per block, 5% slower at
 * pp2048.) */
#define DQT_SB 4
template <int TY> struct tile_fmt;
template <> struct tile_fmt<TND_TYPE_Q4_K> {
    typedef uint4 unit;
    static constexpr int chunk = Q4KT_CHUNK, block = Q4KT_BLOCK;
    static __device__ __forceinline__ int dst(int r, int o) { return q4k_tile_dst(r, o); }
};
template <> struct tile_fmt<TND_TYPE_Q6_K> {
    typedef uint16_t unit;
    static constexpr int chunk = Q6KT_CHUNK, block = Q6KT_BLOCK;
    static __device__ __forceinline__ int dst(int r, int o) { return q6k_tile_dst(r, o); }
};

template <int TY>
__global__ void __launch_bounds__(DQ_THREADS) k_dequant_f16_tiled(const uint8_t *__restrict__ W, size_t rb,
                                                                  int64_t n_in, int64_t r0, __half *__restrict__ out) {
    typedef tile_fmt<TY> F;
    typedef typename F::unit U;
    constexpr int UB = sizeof(U), BU = F::block / UB; /* a block's units */
    __shared__ uint4 ch[DQT_SB * F::chunk / 16];
    __shared__ U rows[16 * DQT_SB * BU];
    __shared__ uint4 buf[DQ_THREADS / 32][128];
    const int64_t nsb = n_in / 256, grp = r0 / 16 + blockIdx.x, sb0 = (int64_t)blockIdx.y * DQT_SB;
    const int nc = (int)(nsb - sb0 < DQT_SB ? nsb - sb0 : DQT_SB);
    const uint4 *src = (const uint4 *)(W + (size_t)grp * 16 * rb + (size_t)sb0 * F::chunk);
    for (int i = threadIdx.x; i < nc * (F::chunk / 16); i += blockDim.x) ch[i] = __ldg(src + i);
    __syncthreads();
    const U *const tiled = (const U *)ch;
    const int per_row = nc * BU; /* units of a row's nc blocks */
    for (int i = threadIdx.x; i < 16 * per_row; i += blockDim.x) {
        const int r = i / per_row, j = i - r * per_row, s = j / BU, o = UB * (j - s * BU);
        rows[i] = tiled[(s * F::chunk + F::dst(r, o)) / UB];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < 16 * nc * 8; i += blockDim.x) {
        const int r = i / (nc * 8), k = i - r * (nc * 8); /* k: the 32-value sub within the row's nc blocks */
        sub32 w;
        load_sub<TY>((const uint8_t *)(rows + r * per_row), k, (int64_t)nc * 256, w);
        __half *o = out + (grp * 16 + r - r0) * n_in + sb0 * 256;
        if (nc == DQT_SB && ((uintptr_t)out & 15) == 0) /* a warp: one row's 32 subs */
            sub32_store_warp(w, buf[threadIdx.x / 32], (uint4 *)o, lane);
        else
            sub32_store(w, o + k * 32, 32);
    }
}

template <int TY>
static int dequant_tiled(const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out, tnd_cu_stream stream) {
    if (!W || !out || n_in <= 0 || n_in % 256 || r0 < 0 || r1 <= r0 || r0 % 16 || r1 % 16) return cudaErrorInvalidValue;
    if ((uintptr_t)W & 15) return cudaErrorMisalignedAddress;
    const size_t rb = tnd_cu_row_bytes(TY, n_in);
    const int64_t sbb = (n_in / 256 + DQT_SB - 1) / DQT_SB;
    if ((r1 - r0) / 16 > 0x7fffffff || sbb > 65535) return cudaErrorInvalidValue;
    k_dequant_f16_tiled<TY><<<dim3((unsigned)((r1 - r0) / 16), (unsigned)sbb), DQ_THREADS, 0, (cudaStream_t)stream>>>(
        (const uint8_t *)W, rb, n_in, r0, (__half *)out);
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_dequant_f16_q4kt(const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out,
                                       tnd_cu_stream stream) {
    return dequant_tiled<TND_TYPE_Q4_K>(W, n_in, r0, r1, out, stream);
}

extern "C" int tnd_cu_dequant_f16_q6kt(const void *W, int64_t n_in, int64_t r0, int64_t r1, uint16_t *out,
                                       tnd_cu_stream stream) {
    return dequant_tiled<TND_TYPE_Q6_K>(W, n_in, r0, r1, out, stream);
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" size_t tnd_cu_matmul_scratch(int64_t n_in, int64_t n_out, int64_t n_tok, int64_t chunk_rows) {
    if (chunk_rows <= 0) chunk_rows = MM_DEFAULT_CHUNK;
    if (chunk_rows > n_out) chunk_rows = n_out;
    return align256((size_t)n_tok * n_in * 2) + align256((size_t)chunk_rows * n_in * 2);
}

/* Binds h to st. cublasSetStream also resets the handle's workspace to
 * cuBLAS's own pool (memory outside the backend's budget), so it is called
 * only when the stream really changes: the backend gives each stream its own
 * handle, bound once, with a workspace from the budget. */
static int bind_stream(cublasHandle_t h, cudaStream_t st) {
    cudaStream_t cur = NULL;
    if (cublasGetStream(h, &cur) == CUBLAS_STATUS_SUCCESS && cur == st) return 0;
    cublasStatus_t cs = cublasSetStream(h, st);
    return cs == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)cs;
}

/* y (ldc = ldy) = Wh (rows x n_in) * xh^T, on f16 inputs. */
static int gemm_f16(cublasHandle_t h, const __half *Wh, int64_t rows, int64_t n_in, const __half *xh,
                    int64_t n_tok, float *y, int64_t ldy) {
    const float one = 1.0f, zero = 0.0f;
    /* Column-major view: Wh is (n_in x rows) with ld n_in, so op(A) = A^T is
     * rows x n_in; xh is (n_in x n_tok); y is (rows x n_tok) with ld ldy. */
    cublasStatus_t cs = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n_tok, (int)n_in, &one, Wh,
                                     CUDA_R_16F, (int)n_in, xh, CUDA_R_16F, (int)n_in, &zero, y, CUDA_R_32F,
                                     (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cs == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)cs;
}

/* tiled: W is a Q4_K or Q6_K tensor in its tile layout (chunks of whole groups) */
static int matmul(tnd_cu_blas blas, int type, bool tiled, const void *W, int64_t n_in, int64_t n_out, const float *x,
                  int64_t n_tok, float *y, void *scratch, size_t scratch_size, int64_t chunk_rows,
                  tnd_cu_stream stream) {
    if (!blas || !x || !y || !scratch || n_tok < 1 || n_out < 1 || n_in < 1) return cudaErrorInvalidValue;
    if (n_in > 0x7fffffff || n_out > 0x7fffffff || n_tok > 0x7fffffff) return cudaErrorInvalidValue;
    if (chunk_rows <= 0) chunk_rows = MM_DEFAULT_CHUNK;
    if (chunk_rows > n_out) chunk_rows = n_out;
    if (tiled) chunk_rows = chunk_rows < 16 ? 16 : chunk_rows & ~(int64_t)15; /* n_out % 16 == 0: whole groups */
    if (scratch_size < tnd_cu_matmul_scratch(n_in, n_out, n_tok, chunk_rows)) return cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    cublasHandle_t h = (cublasHandle_t)blas;
    int e = bind_stream(h, st);
    if (e) return e;
    __half *xh = (__half *)scratch;
    __half *wh = (__half *)((char *)scratch + align256((size_t)n_tok * n_in * 2));
    int64_t nx = n_tok * n_in;
    k_f32_to_f16_rows<<<tnd_cu_blocks(nx, 256), 256, 0, st>>>(x, xh, nx);
    e = (int)cudaGetLastError();
    if (e) return e;
    for (int64_t r0 = 0; r0 < n_out; r0 += chunk_rows) {
        int64_t r1 = r0 + chunk_rows < n_out ? r0 + chunk_rows : n_out;
        e = !tiled                     ? tnd_cu_dequant_f16(type, W, n_in, r0, r1, (uint16_t *)wh, stream)
            : type == TND_TYPE_Q6_K ? tnd_cu_dequant_f16_q6kt(W, n_in, r0, r1, (uint16_t *)wh, stream)
                                       : tnd_cu_dequant_f16_q4kt(W, n_in, r0, r1, (uint16_t *)wh, stream);
        if (e) return e;
        e = gemm_f16(h, wh, r1 - r0, n_in, xh, n_tok, y + r0, n_out);
        if (e) return e;
    }
    return 0;
}

extern "C" int tnd_cu_matmul(tnd_cu_blas blas, int type, const void *W, int64_t n_in, int64_t n_out, const float *x,
                             int64_t n_tok, float *y, void *scratch, size_t scratch_size, int64_t chunk_rows,
                             tnd_cu_stream stream) {
    return matmul(blas, type, false, W, n_in, n_out, x, n_tok, y, scratch, scratch_size, chunk_rows, stream);
}

extern "C" int tnd_cu_matmul_q4kt(tnd_cu_blas blas, const void *W, int64_t n_in, int64_t n_out, const float *x,
                                  int64_t n_tok, float *y, void *scratch, size_t scratch_size, int64_t chunk_rows,
                                  tnd_cu_stream stream) {
    if (!q4k_tile_ok(n_in, n_out)) return cudaErrorInvalidValue;
    return matmul(blas, TND_TYPE_Q4_K, true, W, n_in, n_out, x, n_tok, y, scratch, scratch_size, chunk_rows, stream);
}

extern "C" int tnd_cu_matmul_q6kt(tnd_cu_blas blas, const void *W, int64_t n_in, int64_t n_out, const float *x,
                                  int64_t n_tok, float *y, void *scratch, size_t scratch_size, int64_t chunk_rows,
                                  tnd_cu_stream stream) {
    if (!q6k_tile_ok(n_in, n_out)) return cudaErrorInvalidValue;
    return matmul(blas, TND_TYPE_Q6_K, true, W, n_in, n_out, x, n_tok, y, scratch, scratch_size, chunk_rows, stream);
}

/* ---- expert matmul, grouped by expert ----------------------------------- */

/* xg[i] = x[tok[i]] as f16. */
__global__ void k_gather_f16(const float *__restrict__ x, const int32_t *__restrict__ tok, int64_t n_in,
                             int64_t n_rows, __half *__restrict__ xg) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n_in) return;
    int64_t r = i / n_in, k = i % n_in;
    xg[i] = __float2half_rn(x[(int64_t)tok[r] * n_in + k]);
}
/* y[pair[i]] = yg[i] (rows of n_out). */
__global__ void k_scatter_rows(const float *__restrict__ yg, const int32_t *__restrict__ pair, int64_t n_out,
                               int64_t n_rows, float *__restrict__ y) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n_out) return;
    int64_t r = i / n_out, k = i % n_out;
    y[(int64_t)pair[r] * n_out + k] = yg[i];
}
__global__ void k_fill_nan(float *y, const int32_t *pair, int64_t n_out, int64_t n_rows) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n_out) return;
    y[(int64_t)pair[i / n_out] * n_out + i % n_out] = __int_as_float(0x7fc00000);
}

/* The upload of the grouping: [pairs] int32 token list, [pairs] int32 pair
 * list, then the grouped GEMM's A, B and C pointer arrays (one entry per
 * used expert, at most min(n_expert, pairs)). */
static size_t mmid_upload_bytes(int64_t n_expert, int64_t pairs) {
    int64_t k = n_expert < pairs ? n_expert : pairs;
    return (size_t)pairs * 8 + (size_t)k * 3 * sizeof(void *);
}

/* Scratch: the upload, xg f16 [pairs][n_in], yg f32 [pairs][n_out], wh f16
 * [n_run][n_out][n_in] (a run of experts dequantized at once). */
extern "C" size_t tnd_cu_matmul_id_scratch(int64_t n_in, int64_t n_out, int64_t n_expert, int64_t n_tok, int n_used,
                                           int64_t n_run) {
    size_t pairs = (size_t)n_tok * (size_t)n_used;
    return align256(mmid_upload_bytes(n_expert, (int64_t)pairs)) + align256(pairs * n_in * 2) +
           align256(pairs * n_out * 4) + align256((size_t)n_run * n_out * n_in * 2);
}

extern "C" size_t tnd_cu_matmul_id_stage_words(int64_t n_expert, int64_t n_tok, int n_used) {
    return (mmid_upload_bytes(n_expert, n_tok * n_used) + 3) / 4;
}

/* A run's GEMMs, one per used expert (g of them): one grouped call, or one
 * call an expert where the grouped one is refused (where it never worked,
 * it is not tried again). */
static int gemm_run(cublasHandle_t h, int g, const int *rows, const int *ntok, int n_in, const void *const *dA,
                    const void *const *dB, void *const *dC, const __half *const *hA, const __half *const *hB,
                    float *const *hC) {
    static int grouped_ok = -1; /* unknown, 0 refused, 1 works (any thread may learn it) */
    const int grouped = __atomic_load_n(&grouped_ok, __ATOMIC_RELAXED);
    if (grouped != 0) {
        cublasOperation_t *ta = (cublasOperation_t *)malloc(sizeof(cublasOperation_t) * 2 * (size_t)g);
        int *iv = (int *)malloc(sizeof(int) * 5 * (size_t)g);
        float *ab = (float *)malloc(sizeof(float) * 2 * (size_t)g);
        if (!ta || !iv || !ab) {
            free(ta), free(iv), free(ab);
            return cudaErrorMemoryAllocation;
        }
        cublasOperation_t *tb = ta + g;
        int *kk = iv, *lda = iv + g, *ldc = iv + 2 * g, *gs = iv + 3 * g, *nn = iv + 4 * g;
        for (int i = 0; i < g; i++) {
            ta[i] = CUBLAS_OP_T, tb[i] = CUBLAS_OP_N;
            kk[i] = n_in, lda[i] = n_in, ldc[i] = rows[i], gs[i] = 1, nn[i] = ntok[i];
            ab[i] = 1.0f, ab[g + i] = 0.0f;
        }
        cublasStatus_t cs = cublasGemmGroupedBatchedEx(h, ta, tb, rows, nn, kk, ab, dA, CUDA_R_16F, lda, dB, CUDA_R_16F,
                                                       lda, ab + g, dC, CUDA_R_32F, ldc, g, gs, CUBLAS_COMPUTE_32F);
        free(ta), free(iv), free(ab);
        if (cs == CUBLAS_STATUS_SUCCESS) {
            if (grouped < 0) __atomic_store_n(&grouped_ok, 1, __ATOMIC_RELAXED);
            return 0;
        }
        /* refused before anything was queued: this run a GEMM an expert, and
         * never grouped again if this cuBLAS does not do it at all; said
         * once, since prefill is slower so (docs/DECISIONS.md) */
        if (cs != CUBLAS_STATUS_NOT_SUPPORTED && cs != CUBLAS_STATUS_INVALID_VALUE) return 1000 + (int)cs;
        static int warned = 0;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            TND_WARN("cuda: cuBLAS refused a grouped expert GEMM (%s); running one GEMM an expert instead",
                     cs == CUBLAS_STATUS_NOT_SUPPORTED ? "not supported" : "invalid value");
        if (cs == CUBLAS_STATUS_NOT_SUPPORTED && grouped < 0) __atomic_store_n(&grouped_ok, 0, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < g; i++) {
        int e = gemm_f16(h, hA[i], rows[i], n_in, hB[i], ntok[i], hC[i], rows[i]);
        if (e) return e;
    }
    return 0;
}

extern "C" int tnd_cu_matmul_id(tnd_cu_blas blas, int type, const void *W, int64_t n_in, int64_t n_out,
                                int64_t n_expert, const float *x, bool x_per_slot, int64_t n_tok, const int32_t *ids_host,
                                int n_used, bool skip, float *y, void *scratch, size_t scratch_size, int64_t n_run,
                                int32_t *stage_host, const int32_t *stage_dev, tnd_cu_stream stream) {
    if (!blas || !W || !x || !y || !ids_host || !scratch || n_tok < 1 || n_used < 1 || n_expert < 1 || n_run < 1)
        return cudaErrorInvalidValue;
    if (n_in > 0x7fffffff || n_out > 0x7fffffff || n_tok * n_used > 0x7fffffff) return cudaErrorInvalidValue;
    size_t rb = tnd_cu_row_bytes(type, n_in);
    if (!tnd_cu_type_supported(type) || !rb) return cudaErrorInvalidValue;
    if (scratch_size < tnd_cu_matmul_id_scratch(n_in, n_out, n_expert, n_tok, n_used, n_run)) return cudaErrorInvalidValue;
    const int64_t pairs = n_tok * n_used;
    const size_t up_bytes = mmid_upload_bytes(n_expert, pairs);
    /* Counting sort of the pairs by expert (invalid ids last, as expert
     * n_expert), on the host: the ids are there already. The upload block
     * is built in 8-byte words, so its pointer arrays are aligned. */
    int32_t *cnt = (int32_t *)calloc((size_t)n_expert + 2, sizeof(int32_t));
    uint64_t *up = (uint64_t *)malloc((up_bytes + 7) & ~(size_t)7);
    int32_t *fill = (int32_t *)malloc(((size_t)n_expert + 1) * sizeof(int32_t));
    /* the experts some pair uses, in order */
    int32_t *used = (int32_t *)malloc(sizeof(int32_t) * (size_t)n_expert);
    if (!cnt || !up || !fill || !used) {
        free(cnt), free(up), free(fill), free(used);
        return cudaErrorMemoryAllocation;
    }
    for (int64_t i = 0; i < pairs; i++) {
        int32_t e = ids_host[i];
        cnt[(e < 0 || e >= n_expert) ? n_expert + 1 : e + 1]++;
    }
    for (int64_t e = 0; e <= n_expert; e++) cnt[e + 1] += cnt[e];
    /* cnt[e] is now the first slot of expert e; cnt[n_expert] the first bad one */
    int32_t *tok = (int32_t *)up, *pair = tok + pairs;
    memcpy(fill, cnt, ((size_t)n_expert + 1) * sizeof(int32_t));
    for (int64_t i = 0; i < pairs; i++) {
        int32_t e = ids_host[i];
        int64_t b = (e < 0 || e >= n_expert) ? n_expert : e;
        int32_t at = fill[b]++;
        tok[at] = (int32_t)(x_per_slot ? i : i / n_used); /* the x row this pair reads */
        pair[at] = (int32_t)i;
    }
    free(fill);
    char *sp = (char *)scratch;
    int32_t *d_tok = (int32_t *)sp, *d_pair = d_tok + pairs; /* as up[]: one upload */
    sp += align256(up_bytes);
    __half *xg = (__half *)sp;
    sp += align256((size_t)pairs * n_in * 2);
    float *yg = (float *)sp;
    sp += align256((size_t)pairs * n_out * 4);
    __half *wh = (__half *)sp;
    /* the used experts, and the GEMM pointers of each (host and device) */
    int g = 0;
    for (int64_t ex = 0; ex < n_expert; ex++)
        if (cnt[ex + 1] > cnt[ex]) used[g++] = (int32_t)ex;
    const size_t ptr_off = (size_t)pairs * 8;
    void **hp = (void **)((char *)up + ptr_off); /* A[g], B[g], C[g] as uploaded */
    void **dp = (void **)((char *)d_tok + ptr_off);
    int *rows = (int *)malloc(sizeof(int) * 2 * ((size_t)g + 1));
    if (!rows) {
        free(cnt), free(up), free(used);
        return cudaErrorMemoryAllocation;
    }
    int *ntok = rows + g + 1;
    for (int i = 0, r0 = 0; i < g; i++) {
        int32_t ex = used[i];
        if (used[i] - used[r0] >= n_run) r0 = i; /* a new run starts at this expert */
        hp[i] = wh + (size_t)(ex - used[r0]) * (size_t)n_out * (size_t)n_in;
        hp[g + i] = xg + (size_t)cnt[ex] * (size_t)n_in;
        hp[2 * g + i] = yg + (size_t)cnt[ex] * (size_t)n_out;
        rows[i] = (int)n_out;
        ntok[i] = cnt[ex + 1] - cnt[ex];
    }
    cudaStream_t st = (cudaStream_t)stream;
    cublasHandle_t h = (cublasHandle_t)blas;
    int e = 0;
    const size_t n_up = ptr_off + (size_t)g * 3 * sizeof(void *);
    /* Through the caller's pinned staging with an SM copy when given (no
     * copy-engine queue); else from pageable memory, which cudaMemcpyAsync
     * stages before returning, so freeing up[] afterwards is safe. */
    if (stage_host && stage_dev) {
        memcpy(stage_host, up, n_up);
        e = tnd_cu_copy_sm(d_tok, stage_dev, n_up, stream);
    } else {
        e = (int)cudaMemcpyAsync(d_tok, up, n_up, cudaMemcpyHostToDevice, st);
    }
    if (!e) e = bind_stream(h, st);
    int64_t good = cnt[n_expert], nbad = pairs - good;
    if (!e && good > 0) { /* only the pairs some expert computes */
        k_gather_f16<<<tnd_cu_blocks(good * n_in, 256), 256, 0, st>>>(x, d_tok, n_in, good, xg);
        e = (int)cudaGetLastError();
    }
    /* runs of used experts within n_run of the run's first: one dequant of
     * the experts from the first to the last (unused ones between them too),
     * then their GEMMs */
    for (int i0 = 0; !e && i0 < g;) {
        int i1 = i0 + 1;
        while (i1 < g && used[i1] - used[i0] < n_run) i1++;
        const uint8_t *w0 = (const uint8_t *)W + (size_t)used[i0] * (size_t)n_out * rb;
        e = tnd_cu_dequant_f16(type, w0, n_in, 0, (int64_t)(used[i1 - 1] - used[i0] + 1) * n_out, (uint16_t *)wh,
                               stream);
        if (!e)
            e = gemm_run(h, i1 - i0, rows + i0, ntok + i0, (int)n_in, (const void *const *)dp + i0,
                         (const void *const *)dp + g + i0, dp + 2 * g + i0, (const __half *const *)hp + i0,
                         (const __half *const *)hp + g + i0, (float *const *)hp + 2 * g + i0);
        i0 = i1;
    }
    if (!e && good > 0) {
        k_scatter_rows<<<tnd_cu_blocks(good * n_out, 256), 256, 0, st>>>(yg, d_pair, n_out, good, y);
        e = (int)cudaGetLastError();
    }
    if (!e && nbad > 0 && !skip) {
        k_fill_nan<<<tnd_cu_blocks(nbad * n_out, 256), 256, 0, st>>>(y, d_pair + good, n_out, nbad);
        e = (int)cudaGetLastError();
    }
    free(rows);
    free(cnt);
    free(up);
    free(used);
    return e;
}
