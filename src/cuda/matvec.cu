/* Quantized matrix-vector products for decode (y = W x, n_tok 1..8), every
 * block format, and the expert (MoE) variant.
 *
 * Decode is bound by reading W once from HBM, so the kernels are shaped for
 * bytes in flight and few instructions per weight. A warp owns R rows (no
 * block-level reduction, warps are independent); lane i takes subs i, i+32,
 * ... (32 values each) of all R rows, so x is loaded once per R rows, and
 * the offset terms b*sum(x) use one x sum per R rows. Quant codes become
 * floats through the exponent trick in common.cuh (qf), not I2F, which runs
 * at a quarter of the FMA rate on sm_90 and bounded the old kernels. Q4_K
 * has its own kernel (16-byte loads of a super-block split over 8 lanes,
 * loads for the next steps in flight while computing). Weights are decoded
 * exactly and products accumulate in f32, with x in f32: no quantization of
 * the activations.
 *
 * Two tensor-core families (matvec_mma.cu) decode with far fewer
 * instructions per weight: f16 (k_mvh_*, Q4_K, Q6_K, Q8_0: weights and
 * x rounded to f16, mma.sync m16n8k16, f32 sums) and int8 (k_mvi_q4k:
 * exact weights, x on a 16-bit grid per 256 values, mma.sync m16n8k32,
 * exact s32 sums). tnd_cu_matvec picks a family per type through
 * mv_default() (env TND_CUDA_MV=old|f16mma|i8mma overrides it); the MoE
 * path (tnd_cu_matvec_id) keeps the f32 kernels. Weights re-laid in the
 * Q4_K tile layout have kernels of their own (matvec_tile.cu), which the
 * backend calls directly. Experiments that lost
 * (a TMA-fed f32 kernel, f16cp, shared-memory feeds of the tiles, the
 * bandwidth probes) were removed on 2026-12-01: docs/DECISIONS.md.
 */
#include "cuda/matvec.cuh"
#include "config.h"

#include <stdlib.h>
#include <string.h>

#define MV_MAX_WARPS 8

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

/* Warp w of the grid owns rows [R*w, R*w + R). With ids: blockIdx.y =
 * t*n_used + u selects the token and the expert; returns false for an id
 * outside [0, n_expert) (the rows then get NaN). */
struct mv_slot {
    const uint8_t *W;
    const float *x;
    float *y;
};
/* Without ids, blockIdx.y 1 is a pair's second matrix (W2, y2; same type
 * and shape, same x): two matvecs in one launch. */
__device__ __forceinline__ bool mv_select(mv_slot &m, size_t row_bytes, int64_t n_in, int64_t n_out,
                                          const int32_t *ids, int n_used, int64_t n_expert, int x_per_slot,
                                          const uint8_t *W2, float *y2) {
    if (!ids) {
        if (blockIdx.y) m.W = W2, m.y = y2;
        return true;
    }
    int64_t pair = blockIdx.y, t = pair / n_used;
    int32_t e = ids[pair];
    bool ok = e >= 0 && e < n_expert;
    m.W += (ok ? (size_t)e : 0) * (size_t)n_out * row_bytes;
    m.x += (x_per_slot ? pair : t) * n_in;
    m.y += pair * n_out;
    return ok;
}

/* Sums acc[r] over the warp; lane r < R writes row r0 + r. */
template <int R>
__device__ __forceinline__ void mv_write(float (&acc)[R], float *y, int64_t r0, int64_t n_out, bool ok) {
    const int lane = threadIdx.x & 31;
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++) {
        float v = warp_sum(acc[r]);
        if (lane == r) mine = v;
    }
    if (lane < R && r0 + lane < n_out) y[r0 + lane] = ok ? mine : __int_as_float(0x7fc00000);
}

/* Any readable type, one token: a warp per R rows, lane i takes subs i,
 * i+32, ... of all R rows, so each x sub is loaded once per R rows and its
 * two half sums (the offset terms b*sum(x)) once for all of them. */
template <int TY, int R>
__global__ void __launch_bounds__(256) k_mv_warp(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in,
                                                 int64_t n_out, const float *__restrict__ x, float *__restrict__ y,
                                                 const int32_t *__restrict__ ids, int n_used, int64_t n_expert,
                                                 int x_per_slot, const uint8_t *W2, float *y2) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return;
    mv_slot m = {W, x, y};
    const bool ok = mv_select(m, row_bytes, n_in, n_out, ids, n_used, n_expert, x_per_slot, W2, y2);
    const uint8_t *row[R];
#pragma unroll
    for (int r = 0; r < R; r++) row[r] = m.W + (size_t)(r0 + r < n_out ? r0 + r : n_out - 1) * row_bytes;
    const int64_t nsub = (n_in + 31) / 32;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    if (ok) {
        for (int64_t s = lane; s < nsub; s += 32) {
            float xv[32];
            load_x(m.x, s, n_in, xv);
            float x0 = 0.f, x1 = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                x0 += xv[i];
                x1 += xv[i + 16];
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                sub32 w;
                load_sub<TY>(row[r], s, n_in, w);
                float s0 = 0.f, s1 = 0.f;
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    s0 = fmaf(w.q[i], xv[i], s0);
                    s1 = fmaf(w.q[i + 16], xv[i + 16], s1);
                }
                acc[r] += w.a0 * s0 + w.b0 * x0 + w.a1 * s1 + w.b1 * x1;
            }
        }
    }
    mv_write<R>(acc, m.y, r0, n_out, ok);
}

/* Q4_K, one token. A super-block (256 values, 144 bytes: d, dmin, 12 bytes
 * of 6-bit scales and mins, then 4 chunks of 32 quant bytes) is split over 8
 * lanes: lane part p = 2c + h takes the 16 bytes [16h, 16h+16) of chunk c,
 * i.e. values 16h.. of sub 2c (low nibbles) and of sub 2c+1 (high nibbles),
 * with one 16-byte load, plus the 16-byte header. A warp covers 4
 * consecutive super-blocks of each of its R rows per step: dense 16-byte
 * loads, R*2 of them in flight per lane.
 *
 * Nibbles become floats without I2F or per-value shifts: a nibble masked in
 * place at bit p (p <= 16 after one shift of the word by 12 for the top
 * three) makes the float 2^23 + q*2^p, exact; subtracting 2^23 gives q*2^p
 * exactly, and x was scaled by 2^-p once per step for all R rows, so each
 * product is q*x rounded once, as in a plain f32 dot. */
template <int R>
__global__ void __launch_bounds__(256) k_mv_q4k(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in,
                                                int64_t n_out, const float *__restrict__ x, float *__restrict__ y,
                                                const int32_t *__restrict__ ids, int n_used, int64_t n_expert,
                                                int x_per_slot, const uint8_t *W2, float *y2) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return;
    mv_slot m = {W, x, y};
    const bool ok = mv_select(m, row_bytes, n_in, n_out, ids, n_used, n_expert, x_per_slot, W2, y2);
    const int part = lane & 7, c = part >> 1, h = part & 1;
    const int nsb = (int)(n_in / 256);
    const uint8_t *row[R];
#pragma unroll
    for (int r = 0; r < R; r++) row[r] = m.W + (size_t)(r0 + r < n_out ? r0 + r : n_out - 1) * row_bytes;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    /* scale/min bytes of subs 2c, 2c+1: bytes 2c&3, +1 of the words picked below */
    const int ssh = 16 * (c & 1);
    const bool hi_sc = c >= 2;
    const float M = 8388608.0f;
    /* U steps' loads go out together, and the next U steps' loads are
     * issued before this group is computed (two register sets), so a warp
     * keeps its loads in flight through its arithmetic */
    constexpr int U = 4 / R;
    uint4 hd[U][R], qs[U][R], hd2[U][R], qs2[U][R];
    auto load = [&](int sb0, uint4 (&h_)[U][R], uint4 (&q_)[U][R]) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int sb = sb0 + 4 * u < nsb ? sb0 + 4 * u : 0;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint8_t *b = row[r] + (size_t)sb * 144;
                h_[u][r] = __ldg((const uint4 *)b);
                q_[u][r] = __ldg((const uint4 *)(b + 16) + part);
            }
        }
    };
    auto compute = [&](int sb0, const uint4 (&h_)[U][R], const uint4 (&q_)[U][R]) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int sb = sb0 + 4 * u;
            if (sb >= nsb) break;
            const float4 *xp = (const float4 *)(m.x + (int64_t)sb * 256 + 64 * c + 16 * h);
            float xl[16], xh[16];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float4 a = __ldg(xp + k), b = __ldg(xp + 8 + k);
                xl[4 * k] = a.x; xl[4 * k + 1] = a.y; xl[4 * k + 2] = a.z; xl[4 * k + 3] = a.w;
                xh[4 * k] = b.x; xh[4 * k + 1] = b.y; xh[4 * k + 2] = b.z; xh[4 * k + 3] = b.w;
            }
            float x0 = 0.f, x1 = 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                x0 += xl[i];
                x1 += xh[i];
            }
            /* byte j of a word: low nibble at bit p = 0, 8, 16 / (w>>12) 12;
             * high nibble at 4, 12 / (w>>12) 8, 16 */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                xl[4 * k + 1] *= 0x1p-8f; xl[4 * k + 2] *= 0x1p-16f; xl[4 * k + 3] *= 0x1p-12f;
                xh[4 * k] *= 0x1p-4f; xh[4 * k + 1] *= 0x1p-12f; xh[4 * k + 2] *= 0x1p-8f; xh[4 * k + 3] *= 0x1p-16f;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t qw[4] = {q_[u][r].x, q_[u][r].y, q_[u][r].z, q_[u][r].w};
                float s0 = 0.f, s1 = 0.f, t0 = 0.f, t1 = 0.f;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint32_t w = qw[k], v = w >> 12;
                    s0 = fmaf(u2f((w & 0xFu) | 0x4B000000u) - M, xl[4 * k], s0);
                    t0 = fmaf(u2f((w & 0xF00u) | 0x4B000000u) - M, xl[4 * k + 1], t0);
                    s0 = fmaf(u2f((w & 0xF0000u) | 0x4B000000u) - M, xl[4 * k + 2], s0);
                    t0 = fmaf(u2f((v & 0xF000u) | 0x4B000000u) - M, xl[4 * k + 3], t0);
                    s1 = fmaf(u2f((w & 0xF0u) | 0x4B000000u) - M, xh[4 * k], s1);
                    t1 = fmaf(u2f((w & 0xF000u) | 0x4B000000u) - M, xh[4 * k + 1], t1);
                    s1 = fmaf(u2f((v & 0xF00u) | 0x4B000000u) - M, xh[4 * k + 2], s1);
                    t1 = fmaf(u2f((v & 0xF0000u) | 0x4B000000u) - M, xh[4 * k + 3], t1);
                }
                /* 6-bit scales/mins j = 2c, 2c+1 (see kscale_min) */
                const uint32_t w1 = h_[u][r].y, w2 = h_[u][r].z, w3 = h_[u][r].w;
                uint32_t S = hi_sc ? (w3 & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u) : w1 & 0x3F3F3F3Fu;
                uint32_t Mn = hi_sc ? ((w3 >> 4) & 0x0F0F0F0Fu) | ((w2 >> 2) & 0x30303030u) : w2 & 0x3F3F3F3Fu;
                S >>= ssh;
                Mn >>= ssh;
                const float d = h2f((uint16_t)(h_[u][r].x & 0xffff)), dmin = h2f((uint16_t)(h_[u][r].x >> 16));
                acc[r] += d * (qf(S & 0xFF) * (s0 + t0) + qf((S >> 8) & 0xFF) * (s1 + t1)) -
                          dmin * (qf(Mn & 0xFF) * x0 + qf((Mn >> 8) & 0xFF) * x1);
            }
        }
    };
    if (ok) {
        int sb0 = lane >> 3;
        load(sb0, hd, qs);
        /* two groups per trip, so the register sets swap roles without copies */
        for (; sb0 < nsb; sb0 += 8 * U) {
            if (sb0 + 4 * U < nsb) load(sb0 + 4 * U, hd2, qs2);
            compute(sb0, hd, qs);
            if (sb0 + 4 * U >= nsb) break;
            if (sb0 + 8 * U < nsb) load(sb0 + 8 * U, hd, qs);
            compute(sb0 + 4 * U, hd2, qs2);
        }
    }
    mv_write<R>(acc, m.y, r0, n_out, ok);
}

/* n_tok 2..TMAX tokens, any readable type: as k_mv_warp, each decoded sub
 * of each of the R rows is dotted with the n_tok x subs, so W is read once
 * for all tokens. */
template <int TY, int R, int TMAX>
__global__ void __launch_bounds__(256) k_mv_warpT(const uint8_t *__restrict__ W, size_t row_bytes, int64_t n_in,
                                                  int64_t n_out, const float *__restrict__ x, int n_tok,
                                                  float *__restrict__ y) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return;
    const uint8_t *row[R];
#pragma unroll
    for (int r = 0; r < R; r++) row[r] = W + (size_t)(r0 + r < n_out ? r0 + r : n_out - 1) * row_bytes;
    const int64_t nsub = (n_in + 31) / 32;
    float acc[R][TMAX];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TMAX; t++) acc[r][t] = 0.f;
    for (int64_t s = lane; s < nsub; s += 32) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            sub32 w;
            load_sub<TY>(row[r], s, n_in, w);
#pragma unroll
            for (int t = 0; t < TMAX; t++) {
                if (t < n_tok) {
                    float xv[32];
                    load_x(x + (int64_t)t * n_in, s, n_in, xv);
                    float s0 = 0.f, s1 = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
                    for (int i = 0; i < 16; i++) {
                        s0 = fmaf(w.q[i], xv[i], s0);
                        s1 = fmaf(w.q[i + 16], xv[i + 16], s1);
                        x0 += xv[i];
                        x1 += xv[i + 16];
                    }
                    acc[r][t] += w.a0 * s0 + w.b0 * x0 + w.a1 * s1 + w.b1 * x1;
                }
            }
        }
    }
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < TMAX; t++) {
            float v = warp_sum(acc[r][t]);
            if (lane == r * TMAX + t) mine = v;
        }
    const int r = lane / TMAX, t = lane % TMAX;
    if (r < R && t < n_tok && r0 + r < n_out) y[(int64_t)t * n_out + r0 + r] = mine;
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

int check_w(int type, const void *W, int64_t n_in, int64_t n_out) {
    if (!tnd_cu_type_supported(type) || !W || n_in <= 0 || n_out <= 0) return cudaErrorInvalidValue;
    if (tnd_cu_row_bytes(type, n_in) == 0) return cudaErrorInvalidValue;
    if ((uintptr_t)W % tnd_cu_type_align(type)) return cudaErrorMisalignedAddress;
    if (n_out > 0x7fffffff) return cudaErrorInvalidValue;
    return 0;
}


int cu_dev_attr(cudaDeviceAttr a) {
    static int cache[2][64];
    const int i = a == cudaDevAttrMultiProcessorCount ? 0 : 1;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    if (cache[i][dev]) return cache[i][dev];
    int n = 0;
    if (cudaDeviceGetAttribute(&n, a, dev) != cudaSuccess) return 0;
    cache[i][dev] = n;
    return n;
}

/* ---- tensor-core paths: selection and launch -------------------------------- */

/* THE DEFAULT (flip here after measuring): which family tnd_cu_matvec uses
 * for each type. Env TND_CUDA_MV=old|f16mma|i8mma overrides it for all
 * types; a family that cannot take a type or shape falls back to the f32
 * kernels. */
/* Measured on the H200 (docs/DECISIONS.md, "CUDA decode matvec on f16 tensor cores"), GB/s at 5120x17408:
 * Q4_K f32 1595, f16mma 2010-2206, i8mma 2041; Q6_K f32 950, f16mma 1710;
 * Q8_0 f32 1786, f16mma 1719 (no gain: the exact kernel stays). */
static int mv_default(int type) {
    switch (type) {
    case TND_TYPE_Q4_K: return TND_CU_MV_F16MMA;
    case TND_TYPE_Q6_K: return TND_CU_MV_F16MMA;
    default: return TND_CU_MV_F32;
    }
}

static int mv_forced = -1; /* tnd_cu_matvec_set_kind */

extern "C" void tnd_cu_matvec_set_kind(int kind) {
    mv_forced = kind == TND_CU_MV_F32 || kind == TND_CU_MV_F16MMA || kind == TND_CU_MV_I8MMA ? kind : -1;
}

/* env TND_CUDA_MV: -1 auto (per-type default), else the family forced */
static_assert((int)TND_CFG_MV_OLD == (int)TND_CU_MV_F32 && (int)TND_CFG_MV_F16MMA == (int)TND_CU_MV_F16MMA &&
                  (int)TND_CFG_MV_I8MMA == (int)TND_CU_MV_I8MMA && (int)TND_CFG_MV_AUTO == -1,
              "config.h's TND_CUDA_MV values are the families' own");
static int mv_env(void) { return tnd_config_get()->cuda_mv; }

static int mv_mode(int type) {
    if (mv_forced >= 0) return mv_forced;
    const int e = mv_env();
    return e >= 0 ? e : mv_default(type);
}

extern "C" int tnd_cu_matvec_kind(int type, int64_t n_in, int n_tok) {
    const int m = mv_mode(type);
    return m != TND_CU_MV_F32 && mvh_supported(m, type, n_in, n_tok) ? m : TND_CU_MV_F32;
}

/* Kernel families for one token (tnd_cu_matvec_cfg's `kernel`). */
enum { MV_AUTO = 0, MV_DIRECT = 1, MV_SPECIAL = 2 };

/* The family a type gets by default: its own kernel (Q4_K, when x is
 * 16-byte aligned), else the lane-per-sub kernel. (A variant staging the
 * unaligned formats' blocks through shared memory with 16-byte copies
 * measured slower than reading them straight through L1, for every
 * format, and was dropped.) */
static int mv_family(int type, const float *x) {
    if (type == TND_TYPE_Q4_K && ((uintptr_t)x & 15) == 0) return MV_SPECIAL;
    return MV_DIRECT;
}

template <int TY, int R>
static void launch_r(int fam, unsigned gx, unsigned gy, int threads, const uint8_t *w8, size_t rb, int64_t n_in,
                     int64_t n_out, const float *x, float *y, const int32_t *ids, int n_used, int64_t n_expert, int xps,
                     const uint8_t *W2, float *y2, cudaStream_t st) {
    dim3 grid(gx, gy);
    if (TY == TND_TYPE_Q4_K && fam == MV_SPECIAL)
        k_mv_q4k<R><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, W2, y2);
    else
        k_mv_warp<TY, R><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, W2, y2);
}

template <int TY>
static void launch1(int fam, int R, int threads, const void *W, size_t rb, int64_t n_in, int64_t n_out,
                    const float *x, float *y, const int32_t *ids, int n_used, int64_t n_expert, int xps, unsigned gy,
                    const void *W2, float *y2, cudaStream_t st) {
    const int64_t rows_per_block = (int64_t)R * (threads / 32);
    const unsigned gx = tnd_cu_blocks(n_out, (int)rows_per_block);
    const uint8_t *w8 = (const uint8_t *)W, *v8 = (const uint8_t *)W2;
    switch (R) {
    case 1: launch_r<TY, 1>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, v8, y2, st); break;
    case 2: launch_r<TY, 2>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, v8, y2, st); break;
    default: launch_r<TY, 4>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, v8, y2, st); break;
    }
}

/* n_tok 2..8: two rows per warp, four warps per block */
template <int TY>
static void launchT(int n_tok, const void *W, size_t rb, int64_t n_in, int64_t n_out, const float *x, float *y,
                    cudaStream_t st) {
    const uint8_t *w8 = (const uint8_t *)W;
    const unsigned grid = tnd_cu_blocks(n_out, 8);
    if (n_tok <= 2) k_mv_warpT<TY, 2, 2><<<grid, 128, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
    else if (n_tok <= 4) k_mv_warpT<TY, 2, 4><<<grid, 128, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
    else k_mv_warpT<TY, 2, 8><<<grid, 128, 0, st>>>(w8, rb, n_in, n_out, x, n_tok, y);
}

static int dispatch1(int fam, int type, int R, int threads, const void *W, int64_t n_in, int64_t n_out,
                     const float *x, float *y, const int32_t *ids, int n_used, int64_t n_expert, int xps, unsigned gy,
                     const void *W2, float *y2, cudaStream_t st) {
    size_t rb = tnd_cu_row_bytes(type, n_in);
    /* a family the type or x cannot use falls back to the default */
    int def = mv_family(type, x);
    if (fam == MV_AUTO || (fam == MV_SPECIAL && def != MV_SPECIAL)) fam = def;
    switch (type) {
#define X(t)                                                                                                   \
    case t: launch1<t>(fam, R, threads, W, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, gy, W2, y2, st); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* Default launch for one token: rows per warp R and threads per block.
 * More rows per warp reuse each x load and its sums more; fewer give more
 * warps, which a short matrix needs to keep every SM's loads in flight. */
static void mv_shape(int type, int64_t n_in, int64_t n_out, int64_t pairs, int *R, int *threads) {
    int64_t rows = n_out * pairs;
    if (type == TND_TYPE_Q4_K) { /* its own kernel: 4 rows per warp was best on every bench shape */
        *R = rows >= 2048 ? 4 : rows >= 512 ? 2 : 1;
        *threads = 64;
        return;
    }
    /* lane-per-sub kernel: 4 rows per warp; small blocks on tall matrices
     * and on long rows, bigger ones on 4096x4096 (measured on the H200; at
     * 17408x5120, 64 threads beat 256 by 20-28% for Q6_K, Q8_0 and Q4_0) */
    *R = rows >= 2048 ? 4 : rows >= 512 ? 2 : 1;
    *threads = rows >= 8192 || n_in >= 16384 ? 64 : 256;
}

extern "C" int tnd_cu_matvec(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                             float *y, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8) return cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    const int kind = tnd_cu_matvec_kind(type, n_in, n_tok);
    if (kind != TND_CU_MV_F32 && ((uintptr_t)x & 15) == 0) return launch_mvh(kind, type, W, n_in, n_out, x, n_tok, y, 0, 0, st);
    if (n_tok == 1) {
        int R, threads;
        mv_shape(type, n_in, n_out, 1, &R, &threads);
        return dispatch1(MV_AUTO, type, R, threads, W, n_in, n_out, x, y, NULL, 1, 0, 0, 1, NULL, NULL, st);
    }
    size_t rb = tnd_cu_row_bytes(type, n_in);
    switch (type) {
#define X(t) case t: launchT<t>(n_tok, W, rb, n_in, n_out, x, y, st); break;
        TND_CU_TYPE_CASES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_matvec_cfg(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, float *y,
                                 int kernel, int rows_per_warp, int threads, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || (rows_per_warp != 1 && rows_per_warp != 2 && rows_per_warp != 4)) return cudaErrorInvalidValue;
    if (threads < 32 || threads > 32 * MV_MAX_WARPS || threads % 32 || kernel < 0 || kernel > MV_SPECIAL)
        return cudaErrorInvalidValue;
    return dispatch1(kernel, type, rows_per_warp, threads, W, n_in, n_out, x, y, NULL, 1, 0, 0, 1, NULL, NULL,
                     (cudaStream_t)stream);
}

extern "C" int tnd_cu_matvec_id(int type, const void *W, int64_t n_in, int64_t n_out, int64_t n_expert,
                                const float *x, bool x_per_slot, int64_t n_tok, const int32_t *ids, int n_used,
                                float *y, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || !ids || n_expert < 1 || n_tok < 1 || n_used < 1) return cudaErrorInvalidValue;
    int64_t pairs = n_tok * n_used;
    if (pairs > 65535) return cudaErrorInvalidValue; /* grid.y limit */
    int R, threads;
    mv_shape(type, n_in, n_out, pairs, &R, &threads);
    return dispatch1(MV_AUTO, type, R, threads, W, n_in, n_out, x, y, ids, n_used, n_expert, x_per_slot ? 1 : 0,
                     (unsigned)pairs, NULL, NULL, (cudaStream_t)stream);
}

extern "C" int tnd_cu_matvec_pair(int type, const void *W1, const void *W2, int64_t n_in, int64_t n_out,
                                  const float *x, float *y1, float *y2, tnd_cu_stream stream) {
    int e = check_w(type, W1, n_in, n_out);
    if (!e) e = check_w(type, W2, n_in, n_out);
    if (e) return e;
    if (!x || !y1 || !y2) return cudaErrorInvalidValue;
    /* the f16/int8 mma kernels have no pair form: those stay two launches */
    if (tnd_cu_matvec_kind(type, n_in, 1) != TND_CU_MV_F32 && ((uintptr_t)x & 15) == 0) return cudaErrorNotSupported;
    int R, threads;
    mv_shape(type, n_in, n_out, 1, &R, &threads); /* as tnd_cu_matvec's: each row's sum is the same */
    return dispatch1(MV_AUTO, type, R, threads, W1, n_in, n_out, x, y1, NULL, 1, 0, 0, 2, W2, y2,
                     (cudaStream_t)stream);
}

