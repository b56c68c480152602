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
 * Two tensor-core families (below, after the f32 kernels) decode with far
 * fewer instructions per weight: f16 (k_mvh_*, Q4_K, Q6_K, Q8_0: weights and
 * x rounded to f16, mma.sync m16n8k16, f32 sums) and int8 (k_mvi_q4k:
 * exact weights, x on a 16-bit grid per 256 values, mma.sync m16n8k32,
 * exact s32 sums). tnd_cu_matvec picks a family per type through
 * mv_default() (env TND_CUDA_MV=old|f16mma|i8mma overrides it); the MoE
 * path (tnd_cu_matvec_id) keeps the f32 kernels. Experiments that lost
 * (a TMA-fed f32 kernel, f16cp, shared-memory feeds of the tiles, the
 * bandwidth probes) were removed on 2026-12-01: docs/DECISIONS.md.
 */
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/q4k_tile.cuh"

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
__device__ __forceinline__ bool mv_select(mv_slot &m, size_t row_bytes, int64_t n_in, int64_t n_out,
                                          const int32_t *ids, int n_used, int64_t n_expert, int x_per_slot) {
    if (!ids) return true;
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
                                                 int x_per_slot) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return;
    mv_slot m = {W, x, y};
    const bool ok = mv_select(m, row_bytes, n_in, n_out, ids, n_used, n_expert, x_per_slot);
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
                                                int x_per_slot) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return;
    mv_slot m = {W, x, y};
    const bool ok = mv_select(m, row_bytes, n_in, n_out, ids, n_used, n_expert, x_per_slot);
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

/* mbarrier and bulk-copy helpers (sm_90): the int8 tiles' shared ring
 * (k_mvq_q4k, NS > 0) and the even share's L2 prefetch (k_mvb_q4k). */
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
/* Waits for the phase of the given parity to complete; traps after ~4 s
 * rather than hang the device on a bug. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
    const long long t0 = clock64();
    for (;;) {
        uint32_t ok;
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
        if (ok) return;
        if (clock64() - t0 > 8000000000ll) __trap();
    }
}
/* bytes (a multiple of 16, src 16-byte aligned) asked of L2 */
__device__ __forceinline__ void bulk_prefetch(const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
/* bytes (a multiple of 16) from global src to shared dst, completing on b */
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}
#else /* never run without sm_90 code: the bodies that call them trap first */
__device__ __forceinline__ void mbar_init(uint64_t *, uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_arrive(uint64_t *) { __trap(); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t *, uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_wait(uint64_t *, uint32_t) { __trap(); }
__device__ __forceinline__ void bulk_prefetch(const void *, uint32_t) { __trap(); }
__device__ __forceinline__ void bulk_copy(void *, const void *, uint32_t, uint64_t *) { __trap(); }
#endif


/* ---- f16 tensor-core decode path (TND_CUDA_MV=f16mma) ---------------------
 * Why: the kernels above decode every weight exactly to f32 (mask, FADD,
 * FFMA and their share of scale work: ~4.6 instructions per weight) and
 * measured bound by that decode at ~37% of the copy bandwidth. Here a weight
 * costs ~1.6 instructions: per 8 weights of a lane one shift and 4 LOP3 make
 * f16 pairs 1024+q, 4 HSUB2/HFMA2 remove the offset exactly and 4 HFMA2
 * apply scale and min (common.cuh, mvh_q4k_*); one mma.sync m16n8k16 then
 * does 256 multiply-adds of a 16-row tile (f32 accumulation). x is rounded
 * to f16 once per block into shared memory, in the order the weights come
 * out of the nibble tricks, and serves up to 8 tokens (the mma's 8 columns:
 * lane g < n_tok feeds token g), so one launch shape serves n_tok 1..8.
 *
 * Accuracy: each product w*x carries the f16 roundings of x (relative
 * 2^-11), of the weight (2^-11) and of the sub-block's scale and min (2^-11
 * of |d*sc*q| + |dmin*m|); sums are f32. Tests allow 2e-3 of sum|w x|, the
 * bound of the cuBLAS f16 path.
 *
 * Shape: a block = MB row tiles (16 rows each) x KW warps per tile; the KW
 * warps of a tile take its super-blocks round-robin (so they read adjacent
 * bytes of the same rows at the same time) and their sums meet once, at the
 * end, in shared memory (fixed order: deterministic). Each lane keeps the
 * next super-block's six 16-byte loads in flight while it decodes the
 * current one. The launch picks MB, KW so that the grid fits the device in
 * one wave when it can (mvh_shape). */

#define MVH_XS_MAX (96 * 1024) /* shared bytes for x (f16) per block; wider x falls back */

__device__ __forceinline__ uint4 ld_stream16(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 b) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
#else
    __trap(); /* never chosen without this code: cu_code_major() */
#endif
}

/* x (n_tok rows of n_in f32) into shared f16 pairs: token k's super-block
 * sb at xs + k * xstride + sb * 64, slot mvh_q4k_slot / mvh_q6k_slot within. */
template <int TY>
__device__ __forceinline__ void mvh_stage_x(uint2 *xs, const float *x, int64_t n_in, int n_tok, int xstride) {
    const int nq = (int)(n_in / 4);
    for (int k = 0; k < n_tok; k++) {
        const float4 *xr = (const float4 *)(x + (int64_t)k * n_in);
        for (int q = threadIdx.x; q < nq; q += blockDim.x) {
            const float4 v = __ldcg(xr + q); /* not ld.global.nc: under PDL x was written during this kernel's life */
            const int sb = q >> 6, o = (q & 63) * 4;
            const int slot = TY == TND_TYPE_Q4_K ? mvh_q4k_slot(o) : TY == TND_TYPE_Q6_K ? mvh_q6k_slot(o) : mvh_q8_slot(o);
            xs[k * xstride + sb * 64 + slot] = make_uint2(f2h2u(v.x, v.z), f2h2u(v.y, v.w));
        }
    }
}

/* Sums the KW partials of each tile in shared memory (red: MB*KW*32 float4),
 * warp kw == 0 of a tile writes y: lane (g, t) holds rows g, g+8 of tokens
 * 2t, 2t+1. */
__device__ __forceinline__ void mvh_finish(float4 a, float4 *red, int KW, int kw, int wid, int lane, int64_t r0,
                                           int64_t n_out, int n_tok, float *y) {
    if (KW > 1) {
        red[wid * 32 + lane] = a;
        __syncthreads();
        if (kw != 0) return;
        for (int k = 1; k < KW; k++) {
            const float4 b = red[(wid + k) * 32 + lane];
            a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
        }
    }
    const int t = lane & 3;
    const int64_t r1 = r0 + 8;
    if (2 * t < n_tok) {
        float *yt = y + (int64_t)(2 * t) * n_out;
        if (r0 < n_out) yt[r0] = a.x;
        if (r1 < n_out) yt[r1] = a.z;
    }
    if (2 * t + 1 < n_tok) {
        float *yt = y + (int64_t)(2 * t + 1) * n_out;
        if (r0 < n_out) yt[r0] = a.y;
        if (r1 < n_out) yt[r1] = a.w;
    }
}

/* The six 16-byte pieces a lane holds of one Q4_K super-block of its 16-row
 * tile (headers of rows g and g+8, quant pieces 16t and 16t+64 of each),
 * whatever the layout or feed they came through. */
struct q4k_pieces {
    uint4 h0, h1, q00, q01, q10, q11;
};

/* A lane's pieces of chunk sb of a re-laid tile (q4k_tile.cuh): qp = the
 * tile's base + 16 * lane, hp = its base + Q4KT_HDR + 16 * g. */
__device__ __forceinline__ void q4kt_load(q4k_pieces &b, const uint8_t *qp, const uint8_t *hp, int sb) {
    const size_t o = (size_t)sb * Q4KT_CHUNK;
    b.q00 = ld_stream16(qp + o);
    b.q01 = ld_stream16(qp + o + 512);
    b.q10 = ld_stream16(qp + o + 1024);
    b.q11 = ld_stream16(qp + o + 1536);
    b.h0 = ld_stream16(hp + o);
    b.h1 = ld_stream16(hp + o + 128);
}

/* One super-block step of the f16 tensor-core Q4_K decode: x pairs at xb,
 * sums into acc's two chains. Shared by k_mvh_q4k and k_mvt_q4k so the two
 * layouts give the same bits. */
__device__ __forceinline__ void q4k_step(const q4k_pieces &b, const uint2 *xb, int t, float (&acc)[2][4]) {
    const uint32_t h0[4] = {b.h0.x, b.h0.y, b.h0.z, b.h0.w}, h1[4] = {b.h1.x, b.h1.y, b.h1.z, b.h1.w};
    const uint32_t q0[8] = {b.q00.x, b.q00.y, b.q00.z, b.q00.w, b.q01.x, b.q01.y, b.q01.z, b.q01.w};
    const uint32_t q1[8] = {b.q10.x, b.q10.y, b.q10.z, b.q10.w, b.q11.x, b.q11.y, b.q11.z, b.q11.w};
    mvh_q4k_sb(h0, h1, q0, q1, t, [&](int m) { return xb[m * 4]; },
               [&](int chain, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx) {
                   mma_f16(acc[chain], a0, a1, a2, a3, bx);
               });
}

/* Q4_K, n_tok 1..8; blockDim.x = 32 * MB * KW. */
__global__ void __launch_bounds__(256) k_mvh_q4k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in,
                                                 int64_t n_out, const float *__restrict__ x, int n_tok,
                                                 float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), xstride = nsb * 64 + 4; /* +4 pairs: tokens' slots in other banks */
    uint2 *const xz = (uint2 *)mvh_dyn, *const xs = xz + 64; /* xz: zeros, read by lanes that feed no token */
    float4 *red = (float4 *)(xs + n_tok * xstride);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t r0 = ((int64_t)blockIdx.x * MB + mi) * 16 + g;
    /* per row: the header (h) and the pieces (q, lane offset 16t) of this
     * warp's next super-block, advanced by KW super-blocks per load */
    const uint8_t *h0p = W + (size_t)(r0 < n_out ? r0 : n_out - 1) * rb + (size_t)kw * 144;
    const uint8_t *h1p = W + (size_t)(r0 + 8 < n_out ? r0 + 8 : n_out - 1) * rb + (size_t)kw * 144;
    const uint8_t *q0p = h0p + 16 + 16 * t, *q1p = h1p + 16 + 16 * t;
    const size_t step = (size_t)KW * 144;
    /* h0/h1: headers of rows g, g+8; qRJ: piece j of row g (R = 0), g+8 (R = 1) */
    typedef q4k_pieces buf;
    auto load = [&](buf &b) {
        b.h0 = ld_stream16(h0p);
        b.h1 = ld_stream16(h1p);
        b.q00 = ld_stream16(q0p);
        b.q01 = ld_stream16(q0p + 64);
        b.q10 = ld_stream16(q1p);
        b.q11 = ld_stream16(q1p + 64);
        h0p += step, h1p += step, q0p += step, q1p += step;
    };
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}; /* two chains: low / high subs */
    const bool feeds = g < n_tok; /* lane g feeds token g's column of B */
    const uint2 *xl = (feeds ? xs + g * xstride : xz) + t;
    const int xsb = feeds ? 64 : 0;
    auto compute = [&](const buf &b, int sb) { q4k_step(b, xl + sb * xsb, t, acc); };
    buf A, B;
    int sb = kw;
    if (sb < nsb) load(A); /* in flight while x is staged */
    mvh_stage_x<TND_TYPE_Q4_K>(xs, x, n_in, n_tok, xstride);
    for (int i = threadIdx.x; i < 64; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
    __syncthreads();
    /* two super-blocks per trip, so the buffers swap roles without copies */
    for (; sb < nsb; sb += 2 * KW) {
        if (sb + KW < nsb) load(B);
        compute(A, sb);
        if (sb + KW >= nsb) break;
        if (sb + 2 * KW < nsb) load(A);
        compute(B, sb + KW);
    }
    const float4 a = make_float4(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1], acc[0][2] + acc[1][2],
                                 acc[0][3] + acc[1][3]);
    mvh_finish(a, red, KW, kw, wid, lane, r0, n_out, n_tok, y);
}

/* ---- Q4_K in the tile layout (q4k_tile.cuh): k_mvt_q4k ---------------------
 * Why: k_mvh_q4k's lanes read, per super-block, 16 separate 144-byte
 * segments a row stride apart; the bandwidth probes (the same loads, no
 * decode) measured that pattern at 35-63% of the copy bandwidth on the
 * H200, a contiguous read at 85%. Resident weights re-laid once at upload
 * (tnd_cu_q4kt_repack) hold a tile's super-block as one 2304-byte chunk in
 * the order the lanes read it: four fully coalesced 512-byte warp loads
 * (q00, q01, q10, q11) and one 256-byte header load, and the chunks of a
 * tile follow each other, so the KW warps of a tile stream one contiguous
 * range. The math is k_mvh_q4k's (mvh_q4k_sb, mvh_finish): with the same
 * MB, KW the sums are the same bits.
 *
 * DEPTH: super-blocks whose loads are in flight while the lane decodes one
 * (k_mvh_q4k: 1), a ring of DEPTH + 1 register buffers of 96 bytes per
 * lane. PF 1: besides, lanes 0..17 ask L2 for the 128-byte lines of the
 * chunk MVT_PF_AHEAD steps past the ring (prefetch.global.L2: more bytes in
 * flight at no register cost). PF 2: the same L2 requests for the warp's
 * MVT_PRE chunks after its ring, once, before the grid-dependency wait.
 *
 * Programmatic dependent launch (sm_90, launch_mvt1 with mvt_pdl()): a
 * decode matvec is ~15-30 us, and each launch paid the gap after its
 * predecessor, block dispatch and its first loads' latency before any byte
 * streamed. Launched with the PDL attribute, the kernel lets its successor
 * launch at once (launch_dependents) and, itself, only reads weights before
 * griddepcontrol.wait: nothing a predecessor writes (x, y) is touched
 * before the predecessor has completed and flushed, while the weights'
 * first loads overlap its tail. (The weights are never written by a
 * kernel the matvec could overlap: the repack is followed by a plain
 * kernel, tnd_cu_q4kt_repack.) Without the attribute both instructions
 * are no-ops.
 *
 * n_out is a multiple of 16 (q4k_tile_ok): a
 * tile is all in or all out; the tiles of the last block past n_out load
 * the last tile (so every warp reaches the reduction's barrier) and write
 * nothing. */
/* x into shared f16 as mvh_stage_x (any 4-byte alignment of x), and the
 * 64 zero pairs xz that lanes feeding no token read. */
__device__ __forceinline__ void mvt_stage_x(uint2 *xz, uint2 *xs, const float *x, int64_t n_in, int n_tok,
                                            int xstride) {
    if (((uintptr_t)x & 15) == 0) {
        mvh_stage_x<TND_TYPE_Q4_K>(xs, x, n_in, n_tok, xstride);
    } else { /* x not 16-byte aligned: the same staging from single floats */
        const int nq = (int)(n_in / 4);
        for (int k = 0; k < n_tok; k++)
            for (int q = threadIdx.x; q < nq; q += blockDim.x) {
                const float *v = x + (int64_t)k * n_in + 4 * q;
                xs[k * xstride + (q >> 6) * 64 + mvh_q4k_slot((q & 63) * 4)] =
                    make_uint2(f2h2u(__ldcg(v), __ldcg(v + 2)), f2h2u(__ldcg(v + 1), __ldcg(v + 3)));
            }
    }
    for (int i = threadIdx.x; i < 64; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
}

#define MVT_PF_AHEAD 4
#define MVT_PRE 8
template <int DEPTH, int PF>
__global__ void __launch_bounds__(256) k_mvt_q4k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in,
                                                 int64_t n_out, const float *__restrict__ x, int n_tok,
                                                 float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), xstride = nsb * 64 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xs = xz + 64;
    float4 *red = (float4 *)(xs + n_tok * xstride);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t tile = (int64_t)blockIdx.x * MB + mi, last = n_out / 16 - 1;
    const int64_t r0 = tile * 16 + g;
    /* this warp's chunks: base + sb * Q4KT_CHUNK */
    const uint8_t *const base = W + (size_t)(tile <= last ? tile : last) * 16 * rb;
    const uint8_t *const qp = base + 16 * lane, *const hp = base + Q4KT_HDR + 16 * g;
    typedef q4k_pieces buf;
    auto load = [&](buf &b, int sb) { q4kt_load(b, qp, hp, sb); };
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const bool feeds = g < n_tok;
    const uint2 *xl = (feeds ? xs + g * xstride : xz) + t;
    const int xsb = feeds ? 64 : 0;
    auto compute = [&](const buf &b, int sb) { q4k_step(b, xl + sb * xsb, t, acc); };
    buf ring[DEPTH + 1];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
    /* the first DEPTH chunks in flight while x is staged */
#pragma unroll
    for (int i = 0; i < DEPTH; i++)
        if (kw + i * KW < nsb) load(ring[i], kw + i * KW);
    if (PF == 2 && lane < Q4KT_CHUNK / 128)
        for (int i = DEPTH; i < DEPTH + MVT_PRE && kw + i * KW < nsb; i++)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)(kw + i * KW) * Q4KT_CHUNK + 128 * lane));
#if __CUDA_ARCH__ >= 900
    /* x (and y) only past here. (ld_stream16 is not volatile: the compiler
     * may sink the ring's loads below this, which costs overlap, not
     * correctness; the PTX has them above.) */
    asm volatile("griddepcontrol.wait;" ::: "memory");
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
    mvt_stage_x(xz, xs, x, n_in, n_tok, xstride);
    __syncthreads();
    /* step i decodes ring[i % (DEPTH + 1)] after queuing the load of step
     * i + DEPTH into the buffer step i - 1 used; unrolled by the ring's
     * length so every buffer index is a constant (registers) */
    bool more = true;
    for (int i0 = 0; more; i0 += DEPTH + 1) {
#pragma unroll
        for (int u = 0; u <= DEPTH; u++) {
            const int sb = kw + (i0 + u) * KW;
            if (sb >= nsb) {
                more = false;
                break;
            }
            if (sb + DEPTH * KW < nsb) load(ring[(u + DEPTH) % (DEPTH + 1)], sb + DEPTH * KW);
            if (PF == 1 && lane < Q4KT_CHUNK / 128 && sb + (DEPTH + MVT_PF_AHEAD) * KW < nsb)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)(sb + (DEPTH + MVT_PF_AHEAD) * KW) *
                                                                        Q4KT_CHUNK + 128 * lane));
            compute(ring[u], sb);
        }
    }
    const float4 a = make_float4(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1], acc[0][2] + acc[1][2],
                                 acc[0][3] + acc[1][3]);
    mvh_finish(a, red, KW, kw, wid, lane, r0, n_out, n_tok, y);
}

__global__ void k_noop(void) {}

/* In-place repack of one 16-row group per block into the tile layout:
 * the group (16 * rb bytes) into shared memory, then written back in
 * chunk order, 16-byte units (q4k_tile_src gives each unit's source). */
__global__ void __launch_bounds__(512) k_q4kt_repack(uint8_t *__restrict__ W, size_t rb) {
    extern __shared__ uint4 mvh_dyn[];
    uint4 *const grp = (uint4 *)(W + (size_t)blockIdx.x * 16 * rb);
    const int nu = (int)rb, upr = (int)(rb / 16); /* units: 16 * rb / 16; per row */
    for (int i = threadIdx.x; i < nu; i += blockDim.x) mvh_dyn[i] = grp[i];
    __syncthreads();
    for (int i = threadIdx.x; i < nu; i += blockDim.x) {
        const int sb = i / (Q4KT_CHUNK / 16), k = i - sb * (Q4KT_CHUNK / 16);
        int r, o;
        q4k_tile_src(16 * k, &r, &o);
        grp[i] = mvh_dyn[r * upr + sb * (Q4KT_BLOCK / 16) + (o >> 4)];
    }
}

/* Lane t's words of one Q6_K super-block at b (2-byte aligned): aligned
 * 32-bit loads from a = b rounded down to 4 and funnel shifts by 16 bits
 * when b is 2 mod 4 (every piece is at an offset that is a multiple of 4
 * from b, so one parity serves all). No byte past the super-block is read:
 * the word after each 8-byte piece stays inside it, and d's word is read
 * 4 bytes wide only when d sits in its upper half. */
__device__ __forceinline__ void mvh_q6k_load(const uint8_t *b, int t, uint32_t (&ql)[8], uint32_t (&qh)[4],
                                             uint32_t (&sc)[4], uint32_t &d) {
    const bool odd = ((uintptr_t)b & 2) != 0;
    const unsigned int *a = (const unsigned int *)((uintptr_t)b & ~(uintptr_t)3);
    const unsigned int *at = a + 2 * t;
    const uint32_t sh = odd ? 16u : 0u;
    uint32_t v[3];
#pragma unroll
    for (int p = 0; p < 4; p++) { /* ql pieces at 32p + 8t: (n, h) = (p / 2, p % 2) */
#pragma unroll
        for (int k = 0; k < 3; k++) v[k] = __ldg(at + 8 * p + k);
        ql[2 * p] = __funnelshift_r(v[0], v[1], sh), ql[2 * p + 1] = __funnelshift_r(v[1], v[2], sh);
    }
#pragma unroll
    for (int n = 0; n < 2; n++) { /* qh pieces at 128 + 32n + 8t */
#pragma unroll
        for (int k = 0; k < 3; k++) v[k] = __ldg(at + 32 + 8 * n + k);
        qh[2 * n] = __funnelshift_r(v[0], v[1], sh), qh[2 * n + 1] = __funnelshift_r(v[1], v[2], sh);
    }
    uint32_t s[5];
#pragma unroll
    for (int k = 0; k < 4; k++) s[k] = __ldg(a + 48 + k); /* scales at 192 */
    s[4] = odd ? __ldg(a + 52) : (uint32_t)__ldg((const unsigned short *)(a + 52));
#pragma unroll
    for (int k = 0; k < 4; k++) sc[k] = __funnelshift_r(s[k], s[k + 1], sh);
    d = odd ? s[4] >> 16 : s[4] & 0xffffu;
}

/* Q6_K, n_tok 1..8, as k_mvh_q4k. Rows are only 2-byte aligned (210-byte
 * super-blocks), so a lane reads its words with aligned 32-bit loads and
 * funnel shifts (ld_words_a2), one super-block at a time: 2 x 23 loads in
 * flight per lane, no second buffer (it would cost ~48 registers). */
__global__ void __launch_bounds__(256) k_mvh_q6k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in,
                                                 int64_t n_out, const float *__restrict__ x, int n_tok,
                                                 float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), xstride = nsb * 64 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xs = xz + 64;
    float4 *red = (float4 *)(xs + n_tok * xstride);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t r0 = ((int64_t)blockIdx.x * MB + mi) * 16 + g;
    const uint8_t *b0 = W + (size_t)(r0 < n_out ? r0 : n_out - 1) * rb + (size_t)kw * 210;
    const uint8_t *b1 = W + (size_t)(r0 + 8 < n_out ? r0 + 8 : n_out - 1) * rb + (size_t)kw * 210;
    const size_t step = (size_t)KW * 210;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const bool feeds = g < n_tok;
    const uint2 *xl = (feeds ? xs + g * xstride : xz) + t;
    const int xsb = feeds ? 64 : 0;
    mvh_stage_x<TND_TYPE_Q6_K>(xs, x, n_in, n_tok, xstride);
    for (int i = threadIdx.x; i < 64; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
    __syncthreads();
    for (int sb = kw; sb < nsb; sb += KW, b0 += step, b1 += step) {
        uint32_t ql0[8], qh0[4], sc0[4], ql1[8], qh1[4], sc1[4], d0, d1;
        mvh_q6k_load(b0, t, ql0, qh0, sc0, d0);
        mvh_q6k_load(b1, t, ql1, qh1, sc1, d1);
        const uint2 *xb = xl + sb * xsb;
        mvh_q6k_sb(ql0, qh0, sc0, d0, ql1, qh1, sc1, d1, t, [&](int m) { return xb[m * 4]; },
                   [&](int chain, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx) {
                       mma_f16(acc[chain], a0, a1, a2, a3, bx);
                   });
    }
    const float4 a = make_float4(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1], acc[0][2] + acc[1][2],
                                 acc[0][3] + acc[1][3]);
    mvh_finish(a, red, KW, kw, wid, lane, r0, n_out, n_tok, y);
}

/* Lane t's part of one Q8_0 group of 8 blocks at b (2-byte aligned): the
 * 68 bytes at b + 68t (blocks 2t, 2t+1) with aligned 32-bit loads (and
 * a 16-bit one for the last 2 bytes when the start is 2 mod 4) and funnel shifts:
 * block 2t's quants at +2, block 2t+1's at +36, their d at +0 and +34. */
__device__ __forceinline__ void mvh_q8_load(const uint8_t *b, int t, uint32_t (&qa)[8], uint32_t (&qb)[8],
                                            uint32_t &da, uint32_t &db) {
    const uint8_t *p = b + 68 * t;
    const bool odd = ((uintptr_t)p & 2) != 0;
    const unsigned int *a = (const unsigned int *)((uintptr_t)p & ~(uintptr_t)3);
    uint32_t r[18];
#pragma unroll
    for (int k = 0; k < 17; k++) r[k] = __ldg(a + k);
    r[17] = odd ? (uint32_t)__ldg((const unsigned short *)(a + 17)) : 0u; /* bytes 66, 67: nothing past the lane's 68 */
    /* +2 + 4k: word k + odd, shift 16 unless odd; +36 + 4k: word 9 + k, shift 16 if odd */
    const uint32_t sa = odd ? 0u : 16u, sb = odd ? 16u : 0u;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        qa[k] = odd ? r[k + 1] : __funnelshift_r(r[k], r[k + 1], sa);
        qb[k] = __funnelshift_r(r[9 + k], r[10 + k], sb);
    }
    da = odd ? r[0] >> 16 : r[0] & 0xffffu;
    db = odd ? r[9] & 0xffffu : r[8] >> 16;
}

/* Q8_0 in groups of 8 blocks, n_tok 1..8, as k_mvh_q6k (one group at a
 * time per warp; n_in a multiple of 256). */
__global__ void __launch_bounds__(256) k_mvh_q8(const uint8_t *__restrict__ W, size_t rb, int64_t n_in,
                                                int64_t n_out, const float *__restrict__ x, int n_tok,
                                                float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), xstride = nsb * 64 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xs = xz + 64;
    float4 *red = (float4 *)(xs + n_tok * xstride);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t r0 = ((int64_t)blockIdx.x * MB + mi) * 16 + g;
    const uint8_t *b0 = W + (size_t)(r0 < n_out ? r0 : n_out - 1) * rb + (size_t)kw * 272;
    const uint8_t *b1 = W + (size_t)(r0 + 8 < n_out ? r0 + 8 : n_out - 1) * rb + (size_t)kw * 272;
    const size_t step = (size_t)KW * 272;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const bool feeds = g < n_tok;
    const uint2 *xl = (feeds ? xs + g * xstride : xz) + t;
    const int xsb = feeds ? 64 : 0;
    mvh_stage_x<TND_TYPE_Q8_0>(xs, x, n_in, n_tok, xstride);
    for (int i = threadIdx.x; i < 64; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
    __syncthreads();
    for (int sb = kw; sb < nsb; sb += KW, b0 += step, b1 += step) {
        uint32_t qa0[8], qb0[8], qa1[8], qb1[8], da0, db0, da1, db1;
        mvh_q8_load(b0, t, qa0, qb0, da0, db0);
        mvh_q8_load(b1, t, qa1, qb1, da1, db1);
        const uint2 *xb = xl + sb * xsb;
        mvh_q8_sb(qa0, qb0, da0, db0, qa1, qb1, da1, db1, [&](int m) { return xb[m * 4]; },
                  [&](int chain, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx) {
                      mma_f16(acc[chain], a0, a1, a2, a3, bx);
                  });
    }
    const float4 a = make_float4(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1], acc[0][2] + acc[1][2],
                                 acc[0][3] + acc[1][3]);
    mvh_finish(a, red, KW, kw, wid, lane, r0, n_out, n_tok, y);
}

/* ---- int8 tensor-core path for Q4_K (TND_CUDA_MV=i8mma) -------------------
 * Why: the f16 path still spends ~2.5 instructions per weight turning
 * nibbles into scaled halves. Here a LOP3 makes 4 weights (common.cuh,
 * mvi_*): ~1.5 instructions per weight, scale and min work included. x is
 * quantized per block into shared memory: per (token, super-block) one
 * warp finds max|x|, rounds x to a 16-bit grid and splits it into byte
 * planes H, L (mma columns 2k, 2k+1 for token k: n_tok <= 4), with the
 * sub-block sums of the codes for the min terms. Weights stay exact; the
 * error is x's rounding, <= max|x over its super-block| / 65278 per value.
 * Same block shape and split-K reduction as k_mvh_q4k. */
__device__ __forceinline__ uint2 ld_stream8(const void *p) {
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

__device__ __forceinline__ void imma_u8s8(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 b, int (&d)[4]) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y), "r"(0));
#else
    __trap(); /* tensor cores: sm_80 (mvh_supported keeps older code off this) */
#endif
}

/* shared layout of the int8 path: zeros (32 pairs), then per plane p (2 per
 * token) its B pairs [sb][sub][t] (stride nsb*32 + 4 pairs: planes in
 * other banks), then the sums [tok][sb][sub] and deltas [tok][sb] */
__host__ __device__ __forceinline__ size_t mvi_xbytes(int64_t n_in, int n_tok) {
    const size_t nsb = (size_t)(n_in / 256);
    return ((32 + 2 * (size_t)n_tok * (nsb * 32 + 4)) * 8 + (size_t)n_tok * nsb * 8 * 4 + (size_t)n_tok * nsb * 4 +
            15) / 16 * 16; /* 16-byte aligned: k_mvq_q4k's rings follow */
}

/* x (n_tok rows of n_in f32, any 4-byte alignment) into the int8 path's
 * shared layout (mvi_xbytes): per (token, super-block) one warp finds
 * max|x|, rounds x to the 16-bit grid (mvi_quant8) and stores the planes H
 * (2k) and L (2k + 1) at xq + plane * pstride + sb * 32 + lane (lane = 4 *
 * sub + t: elements 8t.. of the sub), the code sums xsm[(k * nsb + sb) * 8 +
 * sub] and the step dl[k * nsb + sb]; xz: 32 zero pairs. Loads through L2
 * (not the read-only path): under PDL x was written during the kernel's
 * life. */
__device__ __forceinline__ void mvi_stage_x(uint2 *xz, uint2 *xq, int *xsm, float *dl, const float *x, int64_t n_in,
                                            int n_tok, int pstride) {
    const int nsb = (int)(n_in / 256), lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int tasks = n_tok * nsb;
    const bool al = ((uintptr_t)x & 15) == 0;
    /* two tasks a trip, both loads issued before either is used: the
     * latency of x's loads (L2, under the weights' stream) paid half as often */
    for (int task0 = wid; task0 < tasks; task0 += 2 * nw) {
        float e[2][8];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int task = task0 + j * nw;
            if (task >= tasks) break;
            const int k = task / nsb, s = task - k * nsb;
            const float *p = x + (int64_t)k * n_in + (int64_t)s * 256 + 8 * lane;
            if (al) {
                const float4 u = __ldcg((const float4 *)p), v = __ldcg((const float4 *)p + 1);
                e[j][0] = u.x, e[j][1] = u.y, e[j][2] = u.z, e[j][3] = u.w;
                e[j][4] = v.x, e[j][5] = v.y, e[j][6] = v.z, e[j][7] = v.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) e[j][i] = __ldcg(p + i);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int task = task0 + j * nw;
            if (task >= tasks) break;
            const int k = task / nsb, s = task - k * nsb;
            float mx = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++) mx = fmaxf(mx, fabsf(e[j][i]));
            mx = warp_max(mx);
            uint2 H, L;
            int sum;
            mvi_quant8(e[j], mx > 0.f ? 32639.0f / mx : 0.f, H, L, sum);
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            xq[(2 * k) * pstride + s * 32 + lane] = H;
            xq[(2 * k + 1) * pstride + s * 32 + lane] = L;
            if ((lane & 3) == 0) xsm[(k * nsb + s) * 8 + (lane >> 2)] = sum;
            if (lane == 0) dl[k * nsb + s] = mx / 32639.0f;
        }
    }
    for (int i = threadIdx.x; i < 32; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
}

__global__ void __launch_bounds__(256) k_mvi_q4k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in,
                                                 int64_t n_out, const float *__restrict__ x, int n_tok,
                                                 float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), pstride = nsb * 32 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xq = xz + 32;
    int *const xsm = (int *)(xq + 2 * n_tok * pstride);
    float *const dl = (float *)(xsm + n_tok * nsb * 8);
    float2 *const red = (float2 *)mvh_dyn; /* reused after the main loop */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t r0 = ((int64_t)blockIdx.x * MB + mi) * 16 + g;
    const uint8_t *h0p = W + (size_t)(r0 < n_out ? r0 : n_out - 1) * rb + (size_t)kw * 144;
    const uint8_t *h1p = W + (size_t)(r0 + 8 < n_out ? r0 + 8 : n_out - 1) * rb + (size_t)kw * 144;
    const uint8_t *q0p = h0p + 16 + 8 * t, *q1p = h1p + 16 + 8 * t;
    const size_t step = (size_t)KW * 144;
    struct buf {
        uint4 h0, h1;
        uint2 q0[4], q1[4];
    };
    auto load = [&](buf &b) {
        b.h0 = ld_stream16(h0p);
        b.h1 = ld_stream16(h1p);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            b.q0[c] = ld_stream8(q0p + 32 * c);
            b.q1[c] = ld_stream8(q1p + 32 * c);
        }
        h0p += step, h1p += step, q0p += step, q1p += step;
    };
    /* lane (g, t) feeds plane g (token g/2) and reads the sums of token t */
    const bool feeds = g < 2 * n_tok;
    const uint2 *xl = (feeds ? xq + g * pstride : xz) + t;
    const int xsb = feeds ? 32 : 0;
    const int tt = t < n_tok ? t : 0;
    float yv[2] = {0.f, 0.f};
    auto compute = [&](const buf &b, int sb) {
        const uint32_t h0[4] = {b.h0.x, b.h0.y, b.h0.z, b.h0.w}, h1[4] = {b.h1.x, b.h1.y, b.h1.z, b.h1.w};
        const uint32_t q0[8] = {b.q0[0].x, b.q0[0].y, b.q0[1].x, b.q0[1].y, b.q0[2].x, b.q0[2].y, b.q0[3].x, b.q0[3].y};
        const uint32_t q1[8] = {b.q1[0].x, b.q1[0].y, b.q1[1].x, b.q1[1].y, b.q1[2].x, b.q1[2].y, b.q1[3].x, b.q1[3].y};
        const uint2 *xb = xl + sb * xsb;
        const int *xs = xsm + (tt * nsb + sb) * 8;
        int acc[2][5] = {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
        mvi_q4k_sb(h0, h1, q0, q1, [&](int s) { return xb[s * 4]; }, [&](int s) { return xs[s]; },
                   [&](uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx, int(&D)[4]) {
                       imma_u8s8(a0, a1, a2, a3, bx, D);
                   },
                   acc);
        const float delta = dl[tt * nsb + sb];
        yv[0] += mvi_q4k_value(h0, acc[0], delta);
        yv[1] += mvi_q4k_value(h1, acc[1], delta);
    };
    buf A, B;
    int sb = kw;
    if (sb < nsb) load(A); /* in flight while x is quantized */
    mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
    __syncthreads();
    for (; sb < nsb; sb += 2 * KW) {
        if (sb + KW < nsb) load(B);
        compute(A, sb);
        if (sb + KW >= nsb) break;
        if (sb + 2 * KW < nsb) load(A);
        compute(B, sb + KW);
    }
    /* split-K sums in a fixed order, then lane (g, t) writes rows g, g+8 of token t */
    float2 a = make_float2(yv[0], yv[1]);
    if (KW > 1) {
        __syncthreads(); /* the x area becomes the reduction area */
        red[wid * 32 + lane] = a;
        __syncthreads();
        if (kw != 0) return;
        for (int k = 1; k < KW; k++) {
            const float2 b2 = red[(wid + k) * 32 + lane];
            a.x += b2.x;
            a.y += b2.y;
        }
    }
    if (t < n_tok) {
        if (r0 < n_out) y[(int64_t)t * n_out + r0] = a.x;
        if (r0 + 8 < n_out) y[(int64_t)t * n_out + r0 + 8] = a.y;
    }
}

/* ---- Q4_K in the tile layout on the int8 tensor cores: k_mvq_q4k -----------
 * Why: ncu put the f16 tiled decode (k_mvt_q4k) at 45% issue with ~200 of
 * a chunk's ~330 instructions on the half-rate integer pipe (DECISIONS,
 * session 8). This is k_mvi_q4k's math (x on a 16-bit grid per super-block
 * as byte planes H, L; masked nibbles into mma m16n8k32 u8 x s8; exact
 * s32 sums per sub-block, one f32 step per super-block: mvq_value) on the
 * tile layout's loads: ~200 instructions a chunk all told (ncu), far fewer
 * of them on that pipe.
 *
 * The mapping that fits the layout: lane (g, t) holds, for rows g and g+8,
 * the qs bytes 16t + 64J.. (J = 0, 1): 16 weights of sub 4J + 2(t >> 1)
 * (low nibbles) and of the sub after it (high nibbles), at positions
 * 16(t & 1) + 4w.. of word w. So a quad's lanes hold two subs, and one mma
 * (words 2m, 2m + 1 as a0/a2, rows g / g+8 as a0/a1) takes both: B column
 * 4k + 2u + P carries plane P of token k only in the k-slots of lanes with
 * t >> 1 == u, zeros elsewhere, so the subs stay apart in the columns.
 * Lane (g, t) then gets token t >> 1, sub 4J + 2(t & 1) + half, H in c0,
 * L in c1; m = 0, 1 accumulate in the mma. Lanes t, t ^ 1 hold the two
 * halves of a token's sum. n_tok 1..2 (8 columns).
 *
 * Loads and PDL as k_mvt_q4k, launch shape from mvq_shape; x is quantized into
 * shared memory after the grid-dependency wait (mvi_stage_x). */
__device__ __forceinline__ void imma_u8s8_acc(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 b,
                                              int (&d)[4]) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
#else
    __trap(); /* never chosen without this code: cu_code_major() */
#endif
}

/* A super-block's integer sums for one row (d, dmin: the header's first
 * word) as f32: delta * (d * (256 H + L) / 16 - dmin * M). */
__device__ __forceinline__ float mvq_value(uint32_t dd, const int (&a)[3], float delta) {
    const float d = h2f((uint16_t)(dd & 0xffff)), dmin = h2f((uint16_t)(dd >> 16));
    return delta * (d * 0.0625f * fmaf(256.0f, (float)a[0], (float)a[1]) - dmin * (float)a[2]);
}

#define MVQ_MAX_DEPTH 2 /* 3 spilled at 128 registers and measured slower */
#define MVQ_MAX_WARPS 16      /* a block of the register ring (128 registers a lane) */
#define MVQ_MAX_WARPS_RING 24 /* a block of the shared ring (80 registers) */

/* Where lane (g, t) reads the staged x (mvi_stage_x's layout) for the
 * mapping above. B: lane (g, t) feeds column g (token g >> 2, u = (g >> 1)
 * & 1, plane g & 1) where t >> 1 == u: 16 bytes of sub 4J + 2u + half at
 * offset 16(t & 1); other lanes read the zeros (stride 0). C: lane (g, t)
 * sums token kc = t >> 1, subs 4J + 2uc + half. */
struct mvq_lane {
    const uint2 *xb;   /* B pairs; per super-block + xsb, per J + xj, per half + xh */
    const int *xs;     /* code sums; per super-block + xss */
    const float *dls;  /* steps; per super-block + dls_s */
    int xsb, xj, xh, xss, dls_s;
    int kc, uc;        /* the token and sub pair this lane's sums belong to */
    bool sums;         /* kc < n_tok */
    uint32_t sel0;
};

__device__ __forceinline__ mvq_lane mvq_lane_of(const uint2 *xz, const uint2 *xq, const int *xsm, const float *dl,
                                                int nsb, int pstride, int n_tok, int lane) {
    const int g = lane >> 2, t = lane & 3, kb = g >> 2, ub = (g >> 1) & 1;
    const bool feeds = kb < n_tok && ub == (t >> 1);
    mvq_lane L;
    L.xb = feeds ? xq + (2 * kb + (g & 1)) * pstride + 8 * ub + 2 * (t & 1) : xz;
    L.xsb = feeds ? 32 : 0, L.xj = feeds ? 16 : 0, L.xh = feeds ? 4 : 0;
    L.kc = t >> 1, L.uc = t & 1;
    L.sums = L.kc < n_tok;
    L.xs = L.sums ? xsm + L.kc * nsb * 8 + 2 * L.uc : (const int *)xz;
    L.dls = L.sums ? dl + L.kc * nsb : (const float *)xz;
    L.xss = L.sums ? 8 : 0, L.dls_s = L.sums ? 1 : 0;
    L.sel0 = 0x4440u | (uint32_t)(2 * L.uc);
    return L;
}

/* One chunk (super-block sb of a 16-row tile) into yv (rows g, g + 8 of
 * token kc, half of the subs: lanes t, t ^ 1 hold the two halves).
 * piece(i) gives the lane's pieces q00, q01, q10, q11, h0, h1 (i = 0..5),
 * from a register ring or straight from a shared slot. */
template <class Piece>
__device__ __forceinline__ void mvq_chunk(const mvq_lane &L, Piece &&piece, int sb, float (&yv)[2]) {
    const uint4 h0 = piece(4), h1 = piece(5);
    /* per row: [0] H, [1] L (sc * D, the low subs' sc times 16: their
     * nibbles are not 16x), [2] m * code sums */
    int acc[2][3] = {{0, 0, 0}, {0, 0, 0}};
#pragma unroll
    for (int J = 0; J < 2; J++) {
        /* the 6-bit scales and mins of subs 4J..4J+3, one byte each */
        const uint32_t S0 = J ? (h0.w & 0x0F0F0F0Fu) | ((h0.y >> 2) & 0x30303030u) : h0.y & 0x3F3F3F3Fu;
        const uint32_t M0 = J ? ((h0.w >> 4) & 0x0F0F0F0Fu) | ((h0.z >> 2) & 0x30303030u) : h0.z & 0x3F3F3F3Fu;
        const uint32_t S1 = J ? (h1.w & 0x0F0F0F0Fu) | ((h1.y >> 2) & 0x30303030u) : h1.y & 0x3F3F3F3Fu;
        const uint32_t M1 = J ? ((h1.w >> 4) & 0x0F0F0F0Fu) | ((h1.z >> 2) & 0x30303030u) : h1.z & 0x3F3F3F3Fu;
        const uint4 qa = piece(J), qc = piece(2 + J); /* rows g, g+8 */
        const int2 X = *(const int2 *)(L.xs + sb * L.xss + 4 * J); /* code sums of subs 4J + 2uc, +1 */
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const uint32_t mask = half ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
            const uint4 xv = *(const uint4 *)(L.xb + sb * L.xsb + J * L.xj + half * L.xh);
            int D[4];
            imma_u8s8(qa.x & mask, qc.x & mask, qa.y & mask, qc.y & mask, make_uint2(xv.x, xv.y), D);
            imma_u8s8_acc(qa.z & mask, qc.z & mask, qa.w & mask, qc.w & mask, make_uint2(xv.z, xv.w), D);
            const uint32_t sel = L.sel0 + half; /* byte (sub & 3), zeros above */
            const int sc0 = (int)prmt(S0, 0, sel) << (half ? 0 : 4), sc1 = (int)prmt(S1, 0, sel) << (half ? 0 : 4);
            acc[0][0] += sc0 * D[0];
            acc[0][1] += sc0 * D[1];
            acc[1][0] += sc1 * D[2];
            acc[1][1] += sc1 * D[3];
            const int Xs = half ? X.y : X.x;
            acc[0][2] += (int)prmt(M0, 0, sel) * Xs;
            acc[1][2] += (int)prmt(M1, 0, sel) * Xs;
        }
    }
    const float delta = L.dls[sb * L.dls_s];
    yv[0] += mvq_value(h0.x, acc[0], delta);
    yv[1] += mvq_value(h1.x, acc[1], delta);
}

/* NS == 0: DEPTH chunks in flight per lane in a register ring (as
 * k_mvt_q4k). NS > 0 (sm_90): instead, each warp streams its chunks
 * through its own ring of NS 2304-byte slots in shared memory, one
 * cp.async.bulk per chunk completing on the slot's mbarrier (as k_mvs_q4k),
 * so NS - 2 chunks or more stay in flight at no register cost, and the
 * lanes decode out of the slot: 80 registers, so 24 warps fit an SM.
 * Shared memory: x (mvi_xbytes), then the rings, then the mbarriers. */
template <int DEPTH, int NS>
__global__ void __launch_bounds__(32 * (NS ? MVQ_MAX_WARPS_RING : MVQ_MAX_WARPS), 1) k_mvq_q4k(const uint8_t *__restrict__ W, size_t rb,
                                                                   int64_t n_in, int64_t n_out,
                                                                   const float *__restrict__ x, int n_tok,
                                                                   float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), pstride = nsb * 32 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xq = xz + 32;
    int *const xsm = (int *)(xq + 2 * n_tok * pstride);
    float *const dl = (float *)(xsm + n_tok * nsb * 8);
    float2 *const red = (float2 *)mvh_dyn; /* reused after the main loop */
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2;
    const int64_t tile = (int64_t)blockIdx.x * MB + mi, last = n_out / 16 - 1;
    const int64_t r0 = tile * 16 + g;
    const uint8_t *const base = W + (size_t)(tile <= last ? tile : last) * 16 * rb;
    const uint8_t *const qp = base + 16 * lane, *const hp = base + Q4KT_HDR + 16 * g;
    typedef q4k_pieces buf;
    auto load = [&](buf &b, int sb) { q4kt_load(b, qp, hp, sb); };
    const mvq_lane L = mvq_lane_of(xz, xq, xsm, dl, nsb, pstride, n_tok, lane);
    float yv[2] = {0.f, 0.f};
    auto compute = [&](auto &&piece, int sb) { mvq_chunk(L, piece, sb, yv); };
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
    if constexpr (NS == 0) {
        buf ring[DEPTH + 1];
#pragma unroll
        for (int i = 0; i < DEPTH; i++)
            if (kw + i * KW < nsb) load(ring[i], kw + i * KW);
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory"); /* x (and y) only past here, as k_mvt_q4k */
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
        mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
        __syncthreads();
        bool more = true;
        for (int i0 = 0; more; i0 += DEPTH + 1) {
#pragma unroll
            for (int u = 0; u <= DEPTH; u++) {
                const int sb = kw + (i0 + u) * KW;
                if (sb >= nsb) {
                    more = false;
                    break;
                }
                if (sb + DEPTH * KW < nsb) load(ring[(u + DEPTH) % (DEPTH + 1)], sb + DEPTH * KW);
                const buf &b = ring[u];
                compute(
                    [&](int i) {
                        return i == 0 ? b.q00 : i == 1 ? b.q01 : i == 2 ? b.q10 : i == 3 ? b.q11 : i == 4 ? b.h0 : b.h1;
                    },
                    sb);
            }
        }
    } else {
#if __CUDA_ARCH__ >= 900
        const int warps = MB * KW;
        uint8_t *const ring = (uint8_t *)mvh_dyn + mvi_xbytes(n_in, n_tok) + (size_t)wid * NS * Q4KT_CHUNK;
        uint64_t *const bar = (uint64_t *)((uint8_t *)mvh_dyn + mvi_xbytes(n_in, n_tok) +
                                           (size_t)warps * NS * Q4KT_CHUNK) + wid * NS;
        const int per = kw < nsb ? (nsb - kw + KW - 1) / KW : 0; /* this warp's chunks */
        auto issue = [&](int i) { /* chunk i (super-block kw + i * KW) into slot i % NS, by lane 0 */
            if (i < per && lane == 0) {
                /* the slot's earlier reads (generic proxy) before the copy's writes (async proxy) */
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                mbar_expect_tx(bar + i % NS, Q4KT_CHUNK);
                bulk_copy(ring + (i % NS) * Q4KT_CHUNK, base + (size_t)(kw + i * KW) * Q4KT_CHUNK, Q4KT_CHUNK,
                          bar + i % NS);
            }
        };
        if (lane == 0) {
            for (int k = 0; k < NS; k++) mbar_init(bar + k, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncwarp();
        for (int i = 0; i < NS; i++) issue(i); /* weights only before the wait */
        asm volatile("griddepcontrol.wait;" ::: "memory");
        mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
        __syncthreads();
        for (int i = 0; i < per; i++) {
            const int slot = i % NS;
            mbar_wait(bar + slot, (uint32_t)((i / NS) & 1));
            const uint8_t *sp = ring + slot * Q4KT_CHUNK;
            /* the pieces read where they are used (few registers held), so
             * the slot is refilled once the chunk is decoded */
            compute(
                [&](int k) {
                    return *(const uint4 *)(sp + (k < 4 ? 512 * k + 16 * lane : Q4KT_HDR + 128 * (k - 4) + 16 * g));
                },
                kw + i * KW);
            __syncwarp(); /* every lane's reads of the slot before it is refilled */
            issue(i + NS);
        }
#else
        __trap(); /* never chosen without this code: cu_code_major() */
#endif
    }
    /* the two halves of each token's sums (lanes t, t ^ 1), then the KW
     * warps of a tile in a fixed order; lane (g, 2k) writes token k */
    float2 a = make_float2(yv[0] + __shfl_xor_sync(0xffffffffu, yv[0], 1),
                           yv[1] + __shfl_xor_sync(0xffffffffu, yv[1], 1));
    if (KW > 1) {
        __syncthreads(); /* the x area becomes the reduction area */
        red[wid * 32 + lane] = a;
        __syncthreads();
        if (kw != 0) return;
        for (int k = 1; k < KW; k++) {
            const float2 b2 = red[(wid + k) * 32 + lane];
            a.x += b2.x;
            a.y += b2.y;
        }
    }
    if (L.uc == 0 && L.sums && tile <= last) {
        y[(int64_t)L.kc * n_out + r0] = a.x;
        y[(int64_t)L.kc * n_out + r0 + 8] = a.y;
    }
}

/* ---- the int8 tiled decode over an even share per SM: k_mvb_q4k -----------
 * Why: k_mvq_q4k gives each block whole tiles and each warp one tile's
 * chunks to stream, so at 5120x17408 (1088 tiles on 132 SMs) 121 blocks
 * of 9 tiles run while 11 SMs idle, and some 2000 warps each stream their
 * own stretch of memory. Here a grid of (at most) one block per SM shares
 * out the rows in half-tiles (8 rows): block b takes half-tiles
 * [b H / G, (b + 1) H / G), counts that differ by one at most, so no SM
 * idles and none streams more than half a tile beyond the mean; no block
 * shares a row with another, so none ever waits on another.
 *
 * A block decodes its half-tiles in pairs, the first as the mma's rows g,
 * the second as rows g + 8. A block that starts on an odd half-tile pairs
 * the lower half of one tile with the upper half of the next, whose pieces
 * lie one tile (nsb chunks) further on, so either way item c of the block
 * (pair c / nsb, super-block c % nsb) sits at fixed lane offsets from the
 * block's first tile + c * Q4KT_CHUNK. An odd count leaves the second half
 * of the last pair empty (zeros, not loaded, not written).
 *
 * The block's items (pair-major, super-blocks in order) are dealt to its
 * nw warps in turn: warp w takes items w, w + nw, w + 2 nw, ..., so each
 * step of the block reads nw consecutive chunks (its stretch of memory
 * front to back) and no warp holds more than one item beyond the mean
 * (measured: about as fast as other splits; what is left is a fixed cost
 * per launch, DECISIONS, session 10). A warp
 * leaves its sum of each pair it touches in shared memory (no barrier in
 * the loop): the items p nsb + j, j < min(nsb, nw), of pair p belong to
 * distinct warps, and after the loop the block adds their sums in that
 * order and writes y (the bits depend on G and nw only). The math,
 * loads, PDL and feeds (DEPTH, NS) are k_mvq_q4k's. Shared memory: x, then
 * the rings and their mbarriers (NS > 0), then 16 float2 per pair and
 * warp that touches it (mvb_smem_*).
 *
 * TWO (the pair, tnd_cu_matvec_q4kt_pair): the rows are those of two
 * matrices over the same x, the second's tiles numbered on after the
 * first's, wherever it lies (mvb_second); one launch streams both for one
 * launch's fixed cost. */
#define MVB_MAX_NS 4

/* TWO (tnd_cu_matvec_q4kt_pair): a second matrix over the same x, its
 * tiles numbered after the first's tiles1, at delta bytes from where the
 * first's next tile would be; rows from n_out1 on go to y2. */
struct mvb_second {
    int64_t tiles1, n_out1;
    ptrdiff_t delta;
    float *y2;
};

#ifdef TND_MVB_TRACE /* dev only: per-block timelines of the last 4 launches (dev_cuda_matvec_bench) */
__device__ unsigned long long mvb_trace[4][1024][16];
__device__ unsigned mvb_trace_seq[1024];
#define MVB_TRACE_START const unsigned tseq = threadIdx.x == 0 && blockIdx.x < 1024 ? mvb_trace_seq[blockIdx.x]++ : 0
/* by thread 0 only: slot j of this launch's record of the block */
#define MVB_REC(...)                                                                                \
    do {                                                                                            \
        if (threadIdx.x == 0 && blockIdx.x < 1024) {                                                \
            __VA_ARGS__                                                                             \
        }                                                                                           \
    } while (0)
#define MVB_SET(j, v) mvb_trace[tseq & 3][blockIdx.x][j] = (unsigned long long)(v)
/* event k: globaltimer (ns) in slot k and clock64 (cycles) in slot 8 + k */
#define MVB_T(k)                                                                                    \
    MVB_REC(unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); MVB_SET(k, t_); \
            MVB_SET(8 + k, clock64());)
/* the block's SM, its share (half-tiles) and the grid in the free slots 6, 7 and 14 */
#define MVB_TRACE_SHARE(n)                                                                          \
    MVB_REC(unsigned smid_; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_)); MVB_SET(6, smid_);  \
            MVB_SET(7, n); MVB_SET(14, gridDim.x);)
#else
#define MVB_TRACE_START
#define MVB_T(k) ((void)0)
#define MVB_TRACE_SHARE(n) ((void)0)
#endif

template <int DEPTH, int NS, bool TWO>
__global__ void __launch_bounds__(32 * (NS ? MVQ_MAX_WARPS_RING : MVQ_MAX_WARPS), 1)
    k_mvb_q4k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in, int64_t n_out, const float *__restrict__ x,
              int n_tok, float *__restrict__ y, int pre, mvb_second sec) {
    extern __shared__ uint4 mvh_dyn[];
    MVB_TRACE_START;
    MVB_T(0);
    const int nsb = (int)(n_in / 256), pstride = nsb * 32 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xq = xz + 32;
    int *const xsm = (int *)(xq + 2 * n_tok * pstride);
    float *const dl = (float *)(xsm + n_tok * nsb * 8);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5, g = lane >> 2;
    const int kws = nw < nsb ? nw : nsb; /* the warps that touch a pair */
    const size_t xbytes = mvi_xbytes(n_in, n_tok);
    float2 *const part = (float2 *)((uint8_t *)mvh_dyn + xbytes + (size_t)nw * NS * (Q4KT_CHUNK + 8));
    /* this block's half-tiles [hlo, hhi), as npairs pairs */
    const int64_t H = n_out / 8, hlo = (int64_t)blockIdx.x * H / gridDim.x;
    const int64_t hhi = (int64_t)(blockIdx.x + 1) * H / gridDim.x;
    MVB_TRACE_SHARE(hhi - hlo);
    const int npairs = (int)((hhi - hlo + 1) / 2);
    const int psingle = ((hhi - hlo) & 1) ? npairs - 1 : npairs; /* pairs from here on have no second half */
    const int odd = (int)(hlo & 1);
    const size_t tb = 16 * rb; /* a tile: nsb chunks */
    const uint8_t *const wb = W + (size_t)(hlo >> 1) * tb;
    /* the lane's offsets from wb + c * Q4KT_CHUNK: quant pieces (J = 0; + 512
     * for J = 1) and header of the pair's first (A) and second (B) half */
    const uint32_t qa = odd * 1024 + 16 * lane, ha = Q4KT_HDR + odd * 128 + 16 * g;
    const uint32_t bo = odd ? (uint32_t)tb : 0; /* B: the next tile's upper half when A is a lower one */
    const uint32_t qb = bo + (1 - odd) * 1024 + 16 * lane, hb = bo + Q4KT_HDR + (1 - odd) * 128 + 16 * g;
    /* TWO: the pairs from psw on read their first half from the second
     * matrix (one before it, their second half: odd blocks straddle) */
    const int64_t psw = TWO ? sec.tiles1 - (hlo >> 1) : 0;
    auto in_a = [&](const uint8_t *p, int pp) { return TWO && pp >= psw ? p + sec.delta : p; };
    auto in_b = [&](const uint8_t *p, int pp) { return TWO && pp + odd >= psw ? p + sec.delta : p; };
    const mvq_lane L = mvq_lane_of(xz, xq, xsm, dl, nsb, pstride, n_tok, lane);
    float yv[2] = {0.f, 0.f};
    /* this warp's items in order: c = wid, wid + nw, ... as (pair, super-block) */
    struct cursor {
        int p, sb;
    };
    const cursor first = {wid / nsb, wid % nsb};
    const int pstep = nw / nsb, sstep = nw % nsb;
    auto next = [&](cursor &u) {
        u.p += pstep, u.sb += sstep;
        if (u.sb >= nsb) u.p++, u.sb -= nsb;
    };
    auto flush = [&](int p) { /* this warp's sum of pair p: lanes with t even hold token t / 2's */
        const float2 a = make_float2(yv[0] + __shfl_xor_sync(0xffffffffu, yv[0], 1),
                                     yv[1] + __shfl_xor_sync(0xffffffffu, yv[1], 1));
        yv[0] = yv[1] = 0.f;
        /* the warp's place j among those that touch p: its first item there is p nsb + j */
        const int j = (wid - p * nsb % nw + nw) % nw;
        if (!(lane & 1)) part[((size_t)p * kws + j) * 16 + (lane >> 1)] = a;
    };
    /* the pre items after u asked of L2, by lane 0, before the wait: DRAM
     * stays busy while the block waits for its predecessor and stages x */
    auto prefetch = [&](cursor u) {
#if __CUDA_ARCH__ >= 900
        if (lane != 0) return;
        for (int i = 0; i < pre && u.p < npairs; i++, next(u)) {
            const uint8_t *const p = wb + (size_t)(u.p * nsb + u.sb) * Q4KT_CHUNK;
            const uint8_t *const pa = in_a(p, u.p), *const pb = in_b(p, u.p);
            if (!odd && u.p < psingle) {
                bulk_prefetch(pa, Q4KT_CHUNK);
                continue;
            }
            bulk_prefetch(pa + odd * 1024, 1024);
            bulk_prefetch(pa + Q4KT_HDR + odd * 128, 128);
            if (u.p < psingle) {
                bulk_prefetch(pb + bo + (1 - odd) * 1024, 1024);
                bulk_prefetch(pb + bo + Q4KT_HDR + (1 - odd) * 128, 128);
            }
        }
#else /* no trap: an L2 hint; the launch passes no prefetch below sm_90 */
        (void)u;
#endif
    };
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
    if constexpr (NS == 0) {
        typedef q4k_pieces buf;
        auto load = [&](buf &b, cursor u) {
            const uint8_t *p = wb + (size_t)(u.p * nsb + u.sb) * Q4KT_CHUNK;
            const uint8_t *const pa = in_a(p, u.p), *const pb = in_b(p, u.p);
            b.q00 = ld_stream16(pa + qa);
            b.q01 = ld_stream16(pa + qa + 512);
            b.h0 = ld_stream16(pa + ha);
            if (u.p < psingle) {
                b.q10 = ld_stream16(pb + qb);
                b.q11 = ld_stream16(pb + qb + 512);
                b.h1 = ld_stream16(pb + hb);
            } else {
                b.q10 = b.q11 = b.h1 = make_uint4(0u, 0u, 0u, 0u);
            }
        };
        buf ring[DEPTH + 1];
        cursor ld = first, cu = first;
#pragma unroll
        for (int i = 0; i < DEPTH; i++)
            if (ld.p < npairs) load(ring[i], ld), next(ld);
        prefetch(ld);
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory"); /* x (and y) only past here, as k_mvt_q4k */
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
        MVB_T(1);
        mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
        __syncthreads();
        MVB_T(2);
        bool more = cu.p < npairs;
        while (more) {
#pragma unroll
            for (int u = 0; u <= DEPTH; u++) {
                if (cu.p >= npairs) {
                    more = false;
                    break;
                }
                if (ld.p < npairs) load(ring[(u + DEPTH) % (DEPTH + 1)], ld), next(ld);
                const buf &b = ring[u];
                mvq_chunk(
                    L,
                    [&](int i) {
                        return i == 0 ? b.q00 : i == 1 ? b.q01 : i == 2 ? b.q10 : i == 3 ? b.q11 : i == 4 ? b.h0 : b.h1;
                    },
                    cu.sb, yv);
                const int p = cu.p;
                next(cu);
                if (cu.p != p) flush(p);
            }
        }
        MVB_T(3);
    } else {
#if __CUDA_ARCH__ >= 900
        uint8_t *const ring = (uint8_t *)mvh_dyn + xbytes + (size_t)wid * NS * Q4KT_CHUNK;
        uint64_t *const bar = (uint64_t *)((uint8_t *)mvh_dyn + xbytes + (size_t)nw * NS * Q4KT_CHUNK) + wid * NS;
        cursor is = first, cu = first;
        int n_issued = 0;
        auto issue = [&]() { /* the next item into slot n_issued % NS, by lane 0: A's pieces, then B's */
            if (is.p >= npairs) return;
            if (lane == 0) {
                uint8_t *const d = ring + (n_issued % NS) * Q4KT_CHUNK;
                const uint8_t *const p = wb + (size_t)(is.p * nsb + is.sb) * Q4KT_CHUNK;
                const uint8_t *const pa = in_a(p, is.p), *const pb = in_b(p, is.p);
                uint64_t *const b = bar + n_issued % NS;
                const bool both = is.p < psingle;
                /* the slot's earlier reads (generic proxy) before the copy's writes (async proxy) */
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                if (!odd && both) { /* a whole tile's chunk */
                    mbar_expect_tx(b, Q4KT_CHUNK);
                    bulk_copy(d, pa, Q4KT_CHUNK, b);
                } else {
                    mbar_expect_tx(b, both ? Q4KT_CHUNK : Q4KT_CHUNK / 2);
                    bulk_copy(d, pa + odd * 1024, 1024, b);
                    bulk_copy(d + Q4KT_HDR, pa + Q4KT_HDR + odd * 128, 128, b);
                    if (both) {
                        bulk_copy(d + 1024, pb + bo + (1 - odd) * 1024, 1024, b);
                        bulk_copy(d + Q4KT_HDR + 128, pb + bo + Q4KT_HDR + (1 - odd) * 128, 128, b);
                    }
                }
            }
            n_issued++;
            next(is);
        };
        if (lane == 0) {
            for (int k = 0; k < NS; k++) mbar_init(bar + k, 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncwarp();
        for (int i = 0; i < NS; i++) issue(); /* weights only before the wait */
        prefetch(is);
        asm volatile("griddepcontrol.wait;" ::: "memory");
        MVB_T(1);
        mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
        __syncthreads();
        MVB_T(2);
        for (int i = 0; cu.p < npairs; i++) {
            const int slot = i % NS;
            mbar_wait(bar + slot, (uint32_t)((i / NS) & 1));
            const uint8_t *sp = ring + slot * Q4KT_CHUNK;
            const bool two = cu.p < psingle;
            mvq_chunk(
                L,
                [&](int k) {
                    if (!two && (k == 2 || k == 3 || k == 5)) return make_uint4(0u, 0u, 0u, 0u);
                    return *(const uint4 *)(sp + (k < 4 ? 512 * k + 16 * lane : Q4KT_HDR + 128 * (k - 4) + 16 * g));
                },
                cu.sb, yv);
            __syncwarp(); /* every lane's reads of the slot before it is refilled */
            issue();
            const int p = cu.p;
            next(cu);
            if (cu.p != p) flush(p);
        }
        MVB_T(3);
#else
        __trap(); /* never chosen without this code: cu_code_major() */
#endif
    }
    /* each pair's sums from the warps that touch it, in the order of their
     * first items there: entry e = (pair, lane >> 1 of an even lane: row g
     * and token t / 2) */
    __syncthreads();
    MVB_T(4);
    for (int e = threadIdx.x; e < npairs * 16; e += blockDim.x) {
        const int p = e >> 4, i = e & 15, k = i & 1;
        if (k >= n_tok) continue;
        const float2 *const pp = part + (size_t)p * kws * 16 + i;
        float2 a = pp[0];
#pragma unroll 8 /* the loads ahead of the adds, which stay in order */
        for (int w = 1; w < kws; w++) {
            const float2 v = pp[w * 16];
            a.x += v.x;
            a.y += v.y;
        }
        const int64_t r = (hlo + 2 * p) * 8 + (i >> 1);
        if constexpr (TWO) { /* rows from sec.n_out1 on are the second matrix's */
            const int64_t n1 = sec.n_out1, n2 = n_out - n1;
            *(r < n1 ? y + (int64_t)k * n1 + r : sec.y2 + (int64_t)k * n2 + r - n1) = a.x;
            if (p < psingle) *(r + 8 < n1 ? y + (int64_t)k * n1 + r + 8 : sec.y2 + (int64_t)k * n2 + r + 8 - n1) = a.y;
        } else {
            y[(int64_t)k * n_out + r] = a.x;
            if (p < psingle) y[(int64_t)k * n_out + r + 8] = a.y;
        }
    }
    MVB_T(5);
}

static int cu_dev_attr(cudaDeviceAttr a) {
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

/* The major architecture this file's code runs as on the current device
 * (9 for sm_90 code; 7 when a build for sm_75 runs on an sm_90 GPU, whose
 * mma, cp.async and bulk-copy kernels are then compiled out): every kernel
 * choice below goes by this, never by the device's compute capability. */
TND_CU_UNIT_ARCH(matvec)
static int cu_code_major(void) { return cu_unit_arch() / 100; }

/* The dynamic shared memory the f16 tensor-core kernels opt into: x's area
 * and the reduction, capped at what the device allows (launches that need
 * more are refused by mvh_supported). */
static int mvh_attr_smem(void) {
    const int max = cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin), want = MVH_XS_MAX + 8 * 32 * 16;
    return max < want ? max : want;
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

static int check_w(int type, const void *W, int64_t n_in, int64_t n_out) {
    if (!tnd_cu_type_supported(type) || !W || n_in <= 0 || n_out <= 0) return cudaErrorInvalidValue;
    if (tnd_cu_row_bytes(type, n_in) == 0) return cudaErrorInvalidValue;
    if ((uintptr_t)W % tnd_cu_type_align(type)) return cudaErrorMisalignedAddress;
    if (n_out > 0x7fffffff) return cudaErrorInvalidValue;
    return 0;
}


/* ---- tensor-core paths: selection and launch -------------------------------- */

/* THE DEFAULT (flip here after measuring): which family tnd_cu_matvec uses
 * for each type. Env TND_CUDA_MV=old|f16mma|i8mma overrides it for all
 * types; a family that cannot take a type or shape falls back to the f32
 * kernels. */
/* Measured on the H200 (docs/BENCHMARKS.md, session 3), GB/s at 5120x17408:
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

/* env TND_CUDA_MV: -1 unset (per-type default), else the family forced */
static int mv_env(void) {
    static int mode = -2; /* a benign race: every thread computes the same value */
    if (mode == -2) {
        const char *e = getenv("TND_CUDA_MV");
        mode = !e                          ? -1
               : strcmp(e, "old") == 0    ? TND_CU_MV_F32
               : strcmp(e, "f16mma") == 0 ? TND_CU_MV_F16MMA
               : strcmp(e, "i8mma") == 0  ? TND_CU_MV_I8MMA
                                          : -1;
    }
    return mode;
}

static int mv_mode(int type) {
    if (mv_forced >= 0) return mv_forced;
    const int e = mv_env();
    return e >= 0 ? e : mv_default(type);
}

/* Shared bytes of family fam (F16MMA / I8MMA) for this row length, n_tok
 * and block size. */
static size_t mvh_smem(int fam, int64_t n_in, int n_tok, int warps) {
    if (fam == TND_CU_MV_I8MMA) {
        const size_t xb = mvi_xbytes(n_in, n_tok), rb = (size_t)warps * 32 * 8; /* reduction reuses x's area */
        return xb > rb ? xb : rb;
    }
    return (size_t)(64 + n_tok * (n_in / 256 * 64 + 4)) * 8 + (size_t)warps * 32 * 16;
}

/* Whether family fam can take this type, row length and token count on the
 * current device (sm_80+ for mma.sync; x staged in shared memory). */
static bool mvh_supported(int fam, int type, int64_t n_in, int n_tok) {
    if (n_tok < 1 || n_in <= 0 || n_in % 256 || n_in > (1 << 24)) return false;
    if (fam == TND_CU_MV_F16MMA &&
        ((type != TND_TYPE_Q4_K && type != TND_TYPE_Q6_K && type != TND_TYPE_Q8_0) || n_tok > 8))
        return false;
    if (fam == TND_CU_MV_I8MMA && (type != TND_TYPE_Q4_K || n_tok > 4)) return false;
    if (fam != TND_CU_MV_F16MMA && fam != TND_CU_MV_I8MMA) return false;
    if (cu_code_major() < 8) return false;
    /* and the largest block (8 warps) within the device's opt-in shared
     * memory: 99 KiB on sm_86/89/120 (RTX 30/40/50), below MVH_XS_MAX's */
    return mvh_smem(fam, n_in, n_tok, 0) <= MVH_XS_MAX &&
           mvh_smem(fam, n_in, n_tok, 8) <= (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

extern "C" bool tnd_cu_matvec_f16mma_supported(int type, int64_t n_in, int n_tok) {
    return mvh_supported(TND_CU_MV_F16MMA, type, n_in, n_tok);
}
extern "C" bool tnd_cu_matvec_i8mma_supported(int type, int64_t n_in, int n_tok) {
    return mvh_supported(TND_CU_MV_I8MMA, type, n_in, n_tok);
}

extern "C" int tnd_cu_matvec_kind(int type, int64_t n_in, int n_tok) {
    const int m = mv_mode(type);
    return m != TND_CU_MV_F32 && mvh_supported(m, type, n_in, n_tok) ? m : TND_CU_MV_F32;
}

typedef void (*mvh_kernel)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *, int, int);
static mvh_kernel mvh_kernel_of(int fam, int type) {
    return fam == TND_CU_MV_I8MMA    ? k_mvi_q4k
           : type == TND_TYPE_Q6_K ? k_mvh_q6k
           : type == TND_TYPE_Q8_0 ? k_mvh_q8
                                   : k_mvh_q4k;
}

/* Resident blocks per SM of kernel k for this block size and shared size
 * (cached: the occupancy query is not free; 0 on error). */
static int mvh_occupancy_k(mvh_kernel k, int warps, size_t smem) {
    static struct {
        int dev;
        mvh_kernel k;
        int warps;
        size_t smem;
        int n;
    } cache[256];
    static int n_cache;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].dev == dev && cache[i].k == k && cache[i].warps == warps && cache[i].smem == smem) return cache[i].n;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, 32 * warps, smem) != cudaSuccess) return 0;
    if (n_cache < 256) cache[n_cache++] = {dev, k, warps, smem, n}; /* a benign race, as the other caches */
    return n;
}

/* Default launch shape: MB tiles x KW warps per tile. Picks, over blocks of
 * 4 or 8 warps, the split that keeps the most warps resident on average
 * over the waves (total warps / waves): one full wave of many warps beats a
 * second, mostly idle one; ties go to fewer waves, then to less splitting. */
static void mvh_shape_k(mvh_kernel k, int fam, int64_t n_in, int64_t n_out, int n_tok, size_t extra_per_warp, int *MB,
                        int *KW) {
    const int64_t tiles = (n_out + 15) / 16, nsb = n_in / 256;
    const int64_t sms = cu_dev_attr(cudaDevAttrMultiProcessorCount);
    const size_t smax = (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    double best = -1;
    int64_t best_waves = 0;
    *MB = 4, *KW = 1;
    for (int nw = 4; nw <= 8; nw *= 2) {
        const size_t smem = mvh_smem(fam, n_in, n_tok, nw) + (size_t)nw * extra_per_warp;
        if (smem > smax) continue;
        const int64_t cap = (int64_t)mvh_occupancy_k(k, nw, smem) * (sms > 0 ? sms : 1);
        if (cap <= 0) continue;
        for (int kw = 1; kw <= nw; kw *= 2) {
            if (kw > 1 && kw > nsb) break;
            const int mb = nw / kw;
            const int64_t blocks = (tiles + mb - 1) / mb, waves = (blocks + cap - 1) / cap;
            const double score = (double)blocks * nw / (double)waves;
            if (score > best * 1.001 || (score > best * 0.999 && waves < best_waves)) {
                best = score;
                best_waves = waves;
                *MB = mb, *KW = kw;
            }
        }
    }
}

static void mvh_shape(int fam, int type, int64_t n_in, int64_t n_out, int n_tok, int *MB, int *KW) {
    mvh_shape_k(mvh_kernel_of(fam, type), fam, n_in, n_out, n_tok, 0, MB, KW);
}

static int launch_mvh(int fam, int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                      float *y, int MB, int KW, cudaStream_t st) {
    if (!mvh_supported(fam, type, n_in, n_tok) || ((uintptr_t)x & 15)) return cudaErrorNotSupported;
    static bool attr_set[4][64]; /* the opt-in above 48 KiB, once per kernel and device, before any occupancy query */
    const int ki = fam == TND_CU_MV_I8MMA ? 2 : type == TND_TYPE_Q6_K ? 1 : type == TND_TYPE_Q8_0 ? 3 : 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    if (!attr_set[ki][dev]) {
        cudaError_t e = cudaFuncSetAttribute(mvh_kernel_of(fam, type), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             mvh_attr_smem());
        if (e != cudaSuccess) return (int)e;
        attr_set[ki][dev] = true;
    }
    if (MB <= 0 || KW <= 0) mvh_shape(fam, type, n_in, n_out, n_tok, &MB, &KW);
    if (MB * KW > 8) return cudaErrorInvalidValue;
    const size_t smem = mvh_smem(fam, n_in, n_tok, MB * KW);
    const int64_t tiles = (n_out + 15) / 16;
    const unsigned grid = (unsigned)((tiles + MB - 1) / MB);
    mvh_kernel_of(fam, type)<<<grid, 32 * MB * KW, smem, st>>>((const uint8_t *)W, tnd_cu_row_bytes(type, n_in), n_in,
                                                               n_out, x, n_tok, y, MB, KW);
    return (int)cudaGetLastError();
}

extern "C" int tnd_cu_matvec_f16mma(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                                    float *y, int tiles_per_block, int ksplit, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8 || tiles_per_block < 0 || ksplit < 0) return cudaErrorInvalidValue;
    return launch_mvh(TND_CU_MV_F16MMA, type, W, n_in, n_out, x, n_tok, y, tiles_per_block, ksplit,
                      (cudaStream_t)stream);
}

extern "C" int tnd_cu_matvec_i8mma(int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                                   float *y, int tiles_per_block, int ksplit, tnd_cu_stream stream) {
    int e = check_w(type, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8 || tiles_per_block < 0 || ksplit < 0) return cudaErrorInvalidValue;
    return launch_mvh(TND_CU_MV_I8MMA, type, W, n_in, n_out, x, n_tok, y, tiles_per_block, ksplit,
                      (cudaStream_t)stream);
}

/* Lets kernels k[0..n) take the device's opt-in shared memory, once per
 * device (done: per device, the caller's). */
static int smem_optin_once(bool (&done)[64], const void *const *k, int n) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    if (done[dev]) return 0;
    cudaError_t e = cudaSuccess;
    const int max = cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    for (int i = 0; i < n && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, max);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not left for a later launch to report */
        return (int)e;
    }
    done[dev] = true;
    return 0;
}

/* ---- Q4_K tile layout: repack and launch (k_mvt_q4k) ------------------------- */

#define MVT_MAX_DEPTH 4
#define MVT_N_PF 3
/* THE DEFAULTS (flip after the bench's sweep): super-blocks in flight per
 * lane while one is decoded (env TND_CUDA_TILE_DEPTH=1..4 overrides), the
 * L2 prefetch (env TND_CUDA_TILE_PF=0|1|2: none, running ahead, before
 * the grid-dependency wait) and programmatic dependent launch (env
 * TND_CUDA_PDL=0|1). */
/* Measured on the H200 (copy bandwidth 4271 GB/s), default launch shape,
 * 4096x4096 / 4096x14336 / 5120x17408 / 14336x4096: DEPTH 1 PF 0 32% / 53%
 * / 52% / 52% of the copy bandwidth, the best; DEPTH 3-4 worse (170
 * registers: fewer warps resident); PF 1 never helped. Session 8 (4244
 * GB/s): PDL 31->39%, 53->59%, 53->55%, 53->60%; PF 2 no better. */
#define MVT_DEFAULT_DEPTH 1
#define MVT_DEFAULT_PF 0
#define MVT_DEFAULT_PDL 1

#define MVT_K(F) {k_mvt_q4k<1, F>, k_mvt_q4k<2, F>, k_mvt_q4k<3, F>, k_mvt_q4k<4, F>}
static mvh_kernel mvt_kernel_of(int depth, int pf) {
    static const mvh_kernel k[MVT_N_PF][MVT_MAX_DEPTH] = {MVT_K(0), MVT_K(1), MVT_K(2)};
    return k[pf][depth - 1];
}
#undef MVT_K

static int mvt_depth(void) {
    static int d = 0; /* a benign race: every thread computes the same value */
    if (!d) {
        const char *e = getenv("TND_CUDA_TILE_DEPTH");
        const int v = e ? atoi(e) : 0;
        d = v >= 1 && v <= MVT_MAX_DEPTH ? v : MVT_DEFAULT_DEPTH;
    }
    return d;
}

static int mvt_pf(void) {
    static int pf = -1; /* a benign race, as mvt_depth's */
    if (pf < 0) {
        const char *e = getenv("TND_CUDA_TILE_PF");
        const int v = e ? atoi(e) : -1;
        pf = v >= 0 && v < MVT_N_PF ? v : MVT_DEFAULT_PF;
    }
    return pf;
}

/* True if kernel k runs from code built for compute_90 or newer, the only
 * code with griddepcontrol.wait: a build whose PTX is older, compiled at
 * load time for an H100, must not be launched with PDL, or it would read x
 * before its predecessor's writes are visible. Cached per kernel and
 * device (a benign race, as the other caches). */
static bool mvt_has_wait(const void *k) {
    static struct {
        const void *k;
        int dev;
        bool ok;
    } cache[256];
    static int n_cache;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].k == k && cache[i].dev == dev) return cache[i].ok;
    cudaFuncAttributes fa;
    const bool ok = cudaFuncGetAttributes(&fa, k) == cudaSuccess && fa.ptxVersion >= 90;
    if (!ok) (void)cudaGetLastError();
    if (n_cache < 256) cache[n_cache++] = {k, dev, ok};
    return ok;
}

/* -1: not yet read from the environment (tnd_cu_matvec_q4kt_set_pdl
 * overrides it, for the bench and tests, which call it between launches);
 * PDL needs sm_90, checked at launch. */
static int mvt_pdl_on = -1;
static bool mvt_pdl(void) {
    if (mvt_pdl_on < 0) {
        const char *e = getenv("TND_CUDA_PDL");
        mvt_pdl_on = e ? atoi(e) != 0 : MVT_DEFAULT_PDL;
    }
    return mvt_pdl_on != 0;
}

/* The opt-in shared memory of the tiled kernels and the repack, once per
 * device. */
static int mvt_prepare(void) {
    static bool attr_set[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    if (attr_set[dev]) return 0;
    const int max = cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < MVT_N_PF * MVT_MAX_DEPTH && e == cudaSuccess; k++) /* k: pf, depth - 1 */
        e = cudaFuncSetAttribute(mvt_kernel_of(k % MVT_MAX_DEPTH + 1, k / MVT_MAX_DEPTH),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, mvh_attr_smem());
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_q4kt_repack, cudaFuncAttributeMaxDynamicSharedMemorySize, max);
    if (e != cudaSuccess) return (int)e;
    attr_set[dev] = true;
    return 0;
}

/* Most tokens one launch of k_mvt_q4k takes for this row length (x staged
 * in shared memory, as f16mma); more tokens run in groups. 0: none. */
static int mvt_max_tok(int64_t n_in) {
    int n = 0;
    while (n < 8 && mvh_smem(TND_CU_MV_F16MMA, n_in, n + 1, 0) <= MVH_XS_MAX &&
           mvh_smem(TND_CU_MV_F16MMA, n_in, n + 1, 8) <= (size_t)mvh_attr_smem())
        n++;
    return n;
}

extern "C" bool tnd_cu_q4kt_supported(int64_t n_in, int64_t n_out) {
    if (!q4k_tile_ok(n_in, n_out) || n_in > (1 << 24) || n_out > 0x7fffffff) return false;
    if (!mvh_supported(TND_CU_MV_F16MMA, TND_TYPE_Q4_K, n_in, 1)) return false; /* sm_80+, one token's x fits */
    const size_t group = 16 * tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in);
    return group <= (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

extern "C" int tnd_cu_q4kt_repack(void *W, int64_t n_in, int64_t n_out, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q4_K, W, n_in, n_out);
    if (e) return e;
    if (!tnd_cu_q4kt_supported(n_in, n_out)) return cudaErrorNotSupported;
    if (mvt_prepare()) { /* nothing launched: the weight stays as uploaded */
        (void)cudaGetLastError();
        return cudaErrorNotSupported;
    }
    const size_t rb = tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in);
    k_q4kt_repack<<<(unsigned)(n_out / 16), 512, 16 * rb, (cudaStream_t)stream>>>((uint8_t *)W, rb);
    /* A plain launch between the repack and any matvec: a matvec launched
     * with PDL right after the repack could read the weights before the
     * repack's writes are flushed (it reads weights before its wait). */
    k_noop<<<1, 32, 0, (cudaStream_t)stream>>>();
    return (int)cudaGetLastError();
}

/* The launch configuration of a tiled decode kernel k (grid blocks of
 * threads, smem bytes, on st), with programmatic dependent launch where it
 * is on and k waits for its predecessor (sm_90); the attribute lives in
 * *at. And a launch's result: its error, or the one it left (cleared, not
 * left for a later launch to report). */
static cudaLaunchConfig_t tile_launch_cfg(const void *k, int64_t grid, int threads, size_t smem, cudaStream_t st,
                                          cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    if (mvt_pdl() && cu_code_major() >= 9 && mvt_has_wait(k)) cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}
static int launch_result(cudaError_t le) {
    const cudaError_t last = cudaGetLastError();
    return (int)(le != cudaSuccess ? le : last);
}

/* One launch of k_mvt_q4k for n_tok <= mvt_max_tok tokens. */
static int launch_mvt1(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y, int MB,
                       int KW, int depth, int pf, cudaStream_t st) {
    const mvh_kernel k = mvt_kernel_of(depth, pf);
    if (MB <= 0 || KW <= 0) mvh_shape_k(k, TND_CU_MV_F16MMA, n_in, n_out, n_tok, 0, &MB, &KW);
    if (MB * KW > 8) return cudaErrorInvalidValue;
    const size_t smem = mvh_smem(TND_CU_MV_F16MMA, n_in, n_tok, MB * KW);
    const int64_t tiles = n_out / 16;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = tile_launch_cfg((const void *)k, (tiles + MB - 1) / MB, 32 * MB * KW, smem, st, &at);
    return launch_result(cudaLaunchKernelEx(&cfg, k, (const uint8_t *)W, tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in), n_in,
                                            n_out, x, n_tok, y, MB, KW));
}

static int launch_mvt(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y, int MB, int KW,
                      int depth, int prefetch, cudaStream_t st) {
    if (!tnd_cu_q4kt_supported(n_in, n_out)) return cudaErrorNotSupported;
    if (depth <= 0) depth = mvt_depth();
    if (depth > MVT_MAX_DEPTH || MB < 0 || KW < 0 || prefetch >= MVT_N_PF) return cudaErrorInvalidValue;
    const int pf = prefetch < 0 ? mvt_pf() : prefetch;
    int e = mvt_prepare();
    if (e) return e;
    const int per = mvt_max_tok(n_in);
    if (per < 1) return cudaErrorNotSupported;
    for (int k0 = 0; k0 < n_tok && !e; k0 += per) /* x too wide for all tokens at once: token groups */
        e = launch_mvt1(W, n_in, n_out, x + (int64_t)k0 * n_in, n_tok - k0 < per ? n_tok - k0 : per,
                        y + (int64_t)k0 * n_out, MB, KW, depth, pf, st);
    return e;
}

/* ---- the int8 tiled decode (k_mvq_q4k): defaults and launch ------------------ */

/* THE DEFAULTS (flip after dev_cuda_matvec_bench --i8): which kernel the
 * default tnd_cu_matvec_q4kt call of one or two tokens takes (env
 * TND_CUDA_TILE_MV=f16|i8|i8b|auto: TND_CU_Q4KT_*), and the int8 tiles'
 * depth (env TND_CUDA_TILE_DEPTH, shared with k_mvt_q4k, clamped to 1..2).
 * AUTO (session 14, H200, PDL): the even share at depth 1 from 20 MiB of
 * weights (5120x17408: 14.8 us against the tiles' 16.5; 4096x12288: 9.8
 * against 12.2; 4096x14336: 10.8 against 10.9), the tiles below (5120x5120:
 * 7.1 us against 7.6). */
#define MVQ_DEFAULT_MODE TND_CU_Q4KT_AUTO
#define MVB_AUTO_BYTES (20.0 * 1048576)
#define MVQ_DEFAULT_DEPTH 2
#define MVQ_DEFAULT_NS -1 /* the launch shape's pick (mvq_shape) */

/* TND_CU_Q4KT_*; -1: not read yet; tnd_cu_matvec_q4kt_set_mode overrides
 * the environment */
static int mvq_on_v = -1;
static int mvq_mode(void) {
    if (mvq_on_v < 0) { /* a benign race, as mvt_depth's */
        const char *e = getenv("TND_CUDA_TILE_MV");
        mvq_on_v = e && strcmp(e, "f16") == 0    ? TND_CU_Q4KT_F16
                   : e && strcmp(e, "i8") == 0   ? TND_CU_Q4KT_I8
                   : e && strcmp(e, "i8b") == 0  ? TND_CU_Q4KT_I8B
                   : e && strcmp(e, "auto") == 0 ? TND_CU_Q4KT_AUTO
                                                 : MVQ_DEFAULT_MODE;
    }
    return mvq_on_v;
}
static bool mvq_on(void) { return mvq_mode() != TND_CU_Q4KT_F16; }

static int mvq_depth(void) {
    static int d = 0; /* a benign race, as mvt_depth's */
    if (!d) {
        const char *e = getenv("TND_CUDA_TILE_DEPTH");
        const int v = e ? atoi(e) : 0;
        d = v >= 1 ? (v <= MVQ_MAX_DEPTH ? v : MVQ_MAX_DEPTH) : MVQ_DEFAULT_DEPTH;
    }
    return d;
}

/* the ring's stages (env TND_CUDA_TILE_I8_NS=0|2|4|6|8; 0: the register
 * ring; unset: -1, picked with the launch shape) */
static bool mvq_ns_ok(int ns) { return ns == 0 || ns == 2 || ns == 4 || ns == 6 || ns == 8; }
static int mvq_stages(void) {
    static int n = -2; /* -2: not read yet; a benign race, as mvt_depth's */
    if (n == -2) {
        const char *e = getenv("TND_CUDA_TILE_I8_NS");
        char *end = NULL;
        const long v = e ? strtol(e, &end, 10) : -1;
        n = e && *e && end && *end == 0 && mvq_ns_ok((int)v) ? (int)v : MVQ_DEFAULT_NS; /* junk: the default */
    }
    return n;
}

/* depth 1..MVQ_MAX_DEPTH (register ring) for ns == 0, else the ring of ns stages */
static mvh_kernel mvq_kernel_of(int depth, int ns) {
    static const mvh_kernel k[MVQ_MAX_DEPTH + 4] = {k_mvq_q4k<1, 0>, k_mvq_q4k<2, 0>, k_mvq_q4k<1, 2>,
                                                    k_mvq_q4k<1, 4>, k_mvq_q4k<1, 6>, k_mvq_q4k<1, 8>};
    return ns ? k[MVQ_MAX_DEPTH + ns / 2 - 1] : k[depth - 1];
}

/* Shared bytes: x, then (ns > 0) the warps' rings and mbarriers; at least
 * the reduction's float2 per lane. */
static size_t mvq_smem(int64_t n_in, int n_tok, int warps, int ns) {
    const size_t b = mvi_xbytes(n_in, n_tok) + (size_t)warps * ns * (Q4KT_CHUNK + 8), red = (size_t)warps * 32 * 8;
    return b > red ? b : red;
}

static int mvq_prepare(void) {
    static bool done[64];
    const void *k[MVQ_MAX_DEPTH + 4];
    for (int i = 0; i < MVQ_MAX_DEPTH + 4; i++)
        k[i] = (const void *)(i < MVQ_MAX_DEPTH ? mvq_kernel_of(i + 1, 0) : mvq_kernel_of(1, 2 * (i - MVQ_MAX_DEPTH + 1)));
    return smem_optin_once(done, k, MVQ_MAX_DEPTH + 4);
}

/* The most warps per tile (KW) for MB tiles a block with ns stages (0:
 * the register ring) within the block and shared-memory limits; 0 if
 * none fits. */
static int mvq_max_kw(int64_t n_in, int n_tok, int64_t mb, int ns) {
    const size_t smax = (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    const int maxw = ns ? MVQ_MAX_WARPS_RING : MVQ_MAX_WARPS;
    int best = 0;
    for (int kw = 1; kw * mb <= maxw && kw <= n_in / 256; kw++)
        if (mvq_smem(n_in, n_tok, (int)mb * kw, ns) <= smax) best = kw;
    return best;
}

/* Default launch shape and stages (*NS in: the stages asked for, -1 any;
 * out: those to run). Measured on the H200 (session 9, ncu): each warp is
 * latency-bound (~7.6 cycles an instruction, half of it waiting on its
 * loads), the chunks of a warp run one after another, and a second wave of
 * blocks costs as much as the first. So: the fewest tiles per block (MB,
 * any count, at most 16) that fit every block into one wave at one block
 * per SM (beyond 16 x the SMs' tiles, more waves), then
 * the most warps per tile (KW). The register ring (depth 2, at most 16
 * warps) measured best on four of the five 8B/14B shapes; the shared ring
 * (at most 24 warps, 4+ stages) where it gives half again as many warps:
 * 5120x17408, MB 9, 18 warps against 9, 70% of the copy against 65%. */
static void mvq_shape(int64_t n_in, int64_t n_out, int n_tok, int *NS, int *MB, int *KW) {
    const int64_t tiles = n_out / 16;
    int64_t sms = cu_dev_attr(cudaDevAttrMultiProcessorCount);
    if (sms < 1) sms = 1;
    int64_t mb = (tiles + sms - 1) / sms;
    if (mb > MVQ_MAX_WARPS) mb = MVQ_MAX_WARPS;
    *MB = (int)mb;
    if (*NS >= 0) { /* stages given: fewer tiles a block (more blocks) until a warp per tile fits */
        while (mb > 1 && mvq_max_kw(n_in, n_tok, mb, *NS) == 0) mb--;
        const int kw = mvq_max_kw(n_in, n_tok, mb, *NS);
        *MB = (int)mb, *KW = kw > 0 ? kw : 1; /* 0: nothing fits, the launch refuses */
        return;
    }
    const int kr = mvq_max_kw(n_in, n_tok, mb, 0);
    int ks = 0, ns = 0;
    if (cu_code_major() >= 9)
        for (int n = 8; n >= 4; n -= 2) { /* the deepest ring with the most warps */
            const int k = mvq_max_kw(n_in, n_tok, mb, n);
            if (k > ks) ks = k, ns = n;
        }
    if (ks > 0 && 2 * ks > 3 * (kr > 0 ? kr : 0)) *KW = ks, *NS = ns;
    else *KW = kr > 0 ? kr : 1, *NS = 0;
}

extern "C" bool tnd_cu_matvec_q4kt_i8_supported(int64_t n_in, int64_t n_out, int n_tok) {
    return n_tok >= 1 && n_tok <= 2 && tnd_cu_q4kt_supported(n_in, n_out) &&
           mvh_supported(TND_CU_MV_I8MMA, TND_TYPE_Q4_K, n_in, n_tok);
}

extern "C" int tnd_cu_matvec_q4kt_i8(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                                     int tiles_per_block, int ksplit, int depth, int stages, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q4_K, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || tiles_per_block < 0 || ksplit < 0 || tiles_per_block > MVQ_MAX_WARPS_RING ||
        ksplit > MVQ_MAX_WARPS_RING || tiles_per_block * ksplit > MVQ_MAX_WARPS_RING || depth < 0 ||
        depth > MVQ_MAX_DEPTH || (stages >= 0 && !mvq_ns_ok(stages)) || stages < -1)
        return cudaErrorInvalidValue;
    /* 16-byte loads and bulk copies of the weights (the backend re-lays only aligned tensors) */
    if (((uintptr_t)W & 15) || !tnd_cu_matvec_q4kt_i8_supported(n_in, n_out, n_tok)) return cudaErrorNotSupported;
    int ns = stages < 0 ? mvq_stages() : stages; /* -1 still: the shape's pick */
    if (ns > 0 && cu_code_major() < 9) return cudaErrorNotSupported;
    if ((e = mvq_prepare())) return e;
    int MB = tiles_per_block, KW = ksplit;
    if (MB <= 0 || KW <= 0) mvq_shape(n_in, n_out, n_tok, &ns, &MB, &KW);
    if (ns < 0) { /* a fixed shape, stages left open: registers up to their 16 warps (as mvq_shape
                   * prefers at equal warps), else the deepest ring that fits */
        ns = MB * KW <= MVQ_MAX_WARPS || cu_code_major() < 9 ? 0 : 8;
        while (ns > 0 && mvq_smem(n_in, n_tok, MB * KW, ns) >
                             (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin))
            ns -= 2;
    }
    if (MB * KW > (ns ? MVQ_MAX_WARPS_RING : MVQ_MAX_WARPS)) return cudaErrorInvalidValue;
    const mvh_kernel k = mvq_kernel_of(depth ? depth : mvq_depth(), ns);
    const size_t smem = mvq_smem(n_in, n_tok, MB * KW, ns);
    if (smem > (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin)) return cudaErrorNotSupported;
    const int64_t tiles = n_out / 16;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg =
        tile_launch_cfg((const void *)k, (tiles + MB - 1) / MB, 32 * MB * KW, smem, (cudaStream_t)stream, &at);
    return launch_result(cudaLaunchKernelEx(&cfg, k, (const uint8_t *)W, tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in), n_in,
                                            n_out, x, n_tok, y, MB, KW));
}

extern "C" bool tnd_cu_matvec_q4kt_i8_default(void) { return mvq_on(); }
extern "C" int tnd_cu_matvec_q4kt_mode(void) { return mvq_mode(); }
extern "C" void tnd_cu_matvec_q4kt_set_mode(int mode) {
    if (mode >= TND_CU_Q4KT_F16 && mode <= TND_CU_Q4KT_AUTO) mvq_on_v = mode;
}
extern "C" int tnd_cu_matvec_q4kt_i8_depth(void) { return mvq_depth(); }
extern "C" int tnd_cu_matvec_q4kt_i8_stages(void) { return mvq_stages(); }

/* ---- the int8 decode over an even share per SM (k_mvb_q4k): launch --------- */

/* THE DEFAULTS, from dev_cuda_matvec_bench --i8 (session 10, H200, 5120x17408,
 * PDL): the register ring of depth 2 (tnd_cu_matvec_q4kt_i8's default depth)
 * with 16 warps, 2 chunks per warp asked of L2 before the wait: 16.0 us,
 * 74% of the copy bandwidth; the shared rings 66-68%, 8 or 12 warps 70%,
 * 4 or more chunks asked of L2 70%. Session 14 (the kernel as built since,
 * two runs on one machine): depth 1 14.8-14.9 us (80%) against depth 2's
 * 15.7 (76%), and the pair of 5120x17408 matrices 26.4 us (90%) against
 * 27.5 (86%). So depth 1, for this kernel alone. */
#define MVB_DEFAULT_DEPTH 1 /* chunks in flight per lane in registers (the register ring) */
#define MVB_DEFAULT_NS 0 /* stages of the shared ring (sm_90; 0: the register ring) */
#define MVB_DEFAULT_PRE 2 /* chunks per warp asked of L2 before the wait (sm_90) */
#define MVB_MAX_PRE 16

static bool mvb_ns_ok(int ns) { return ns == 0 || (ns >= 2 && ns <= MVB_MAX_NS); }
typedef void (*mvb_kernel)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *, int, mvb_second);
/* every instance: the register ring by depth, the shared ring by stages
 * (2..MVB_MAX_NS), then the pair's register ring by depth */
static const mvb_kernel mvb_kernels[] = {k_mvb_q4k<1, 0, false>, k_mvb_q4k<2, 0, false>, k_mvb_q4k<1, 2, false>,
                                         k_mvb_q4k<1, 3, false>, k_mvb_q4k<1, 4, false>, k_mvb_q4k<1, 0, true>,
                                         k_mvb_q4k<2, 0, true>};
#define MVB_N_KERNELS ((int)(sizeof mvb_kernels / sizeof mvb_kernels[0]))
/* depth 1..MVQ_MAX_DEPTH (register ring) for ns == 0, else the ring of ns
 * stages; two: the pair's kernel (register ring only) */
static mvb_kernel mvb_kernel_of(int depth, int ns, bool two) {
    return mvb_kernels[two ? MVQ_MAX_DEPTH + MVB_MAX_NS - 1 + depth - 1 : ns ? MVQ_MAX_DEPTH + ns - 2 : depth - 1];
}

/* x, the rings and their mbarriers (all but the sums), and the bytes of
 * the sums per pair of a block */
static size_t mvb_smem_fixed(int64_t n_in, int n_tok, int warps, int ns) {
    return mvi_xbytes(n_in, n_tok) + (size_t)warps * ns * (Q4KT_CHUNK + 8);
}
static size_t mvb_smem_pair(int64_t n_in, int warps) {
    const int64_t nsb = n_in / 256;
    return (size_t)(warps < nsb ? warps : nsb) * 16 * sizeof(float2);
}

static int mvb_prepare(void) {
    static bool done[64];
    const void *k[MVB_N_KERNELS];
    for (int i = 0; i < MVB_N_KERNELS; i++) k[i] = (const void *)mvb_kernels[i];
    return smem_optin_once(done, k, MVB_N_KERNELS);
}

/* One launch of k_mvb_q4k over W's n_out rows (sec: and a second matrix's
 * after them, the pair; register ring only); arguments as
 * tnd_cu_matvec_q4kt_i8b. */
static bool mvb_args_ok(const float *x, const float *y, int blocks, int warps, int depth, int stages, int prefetch) {
    return x && y && blocks >= 0 && warps >= 0 && warps <= MVQ_MAX_WARPS_RING && depth >= 0 &&
           depth <= MVQ_MAX_DEPTH && stages >= -1 && (stages < 0 || mvb_ns_ok(stages)) && prefetch >= -1 &&
           prefetch <= MVB_MAX_PRE;
}
static int launch_mvb(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y, int blocks,
                      int warps, int depth, int stages, int prefetch, const mvb_second *sec, cudaStream_t stream) {
    int ns = stages >= 0 ? stages : cu_code_major() >= 9 ? MVB_DEFAULT_NS : 0;
    if ((ns > 0 && cu_code_major() < 9) || (ns > 0 && sec)) return cudaErrorNotSupported;
    const int maxw = ns ? MVQ_MAX_WARPS_RING : MVQ_MAX_WARPS;
    const size_t smax = (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    const int64_t H = n_out / 8;
    int nw = warps;
    if (nw == 0) /* the most that fit with a pair's sums */
        for (nw = maxw; nw > 1 && mvb_smem_fixed(n_in, n_tok, nw, ns) + mvb_smem_pair(n_in, nw) > smax;) nw--;
    if (nw > maxw) return cudaErrorInvalidValue;
    const size_t fixed = mvb_smem_fixed(n_in, n_tok, nw, ns), per = mvb_smem_pair(n_in, nw);
    if (fixed + per > smax) return cudaErrorNotSupported;
    const int64_t maxpairs = (int64_t)((smax - fixed) / per); /* a block's sums that fit */
    int64_t grid = blocks;
    if (!grid) { /* one block per SM, or more where a block cannot hold its pairs' sums */
        grid = cu_dev_attr(cudaDevAttrMultiProcessorCount);
        const int64_t need = (H + 2 * maxpairs - 1) / (2 * maxpairs);
        if (grid < need) grid = need;
    }
    if (grid > H) grid = H; /* a half-tile a block at least */
    if (grid < 1) grid = 1;
    const int64_t npairs = ((H + grid - 1) / grid + 1) / 2; /* the most of a block */
    if (npairs > maxpairs) return cudaErrorNotSupported;
    const size_t smem = fixed + (size_t)npairs * per;
    int e = mvb_prepare();
    if (e) return e;
    const mvb_kernel k = mvb_kernel_of(depth ? depth : MVB_DEFAULT_DEPTH, ns, sec != NULL);
    const mvb_second none = {0, 0, 0, NULL};
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = tile_launch_cfg((const void *)k, grid, 32 * nw, smem, stream, &at);
    return launch_result(cudaLaunchKernelEx(&cfg, k, (const uint8_t *)W, tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in), n_in,
                                            n_out, x, n_tok, y,
                                            cu_code_major() >= 9 ? (prefetch < 0 ? MVB_DEFAULT_PRE : prefetch) : 0,
                                            sec ? *sec : none));
}

extern "C" int tnd_cu_matvec_q4kt_i8b(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
                                      float *y, int blocks, int warps, int depth, int stages, int prefetch,
                                      tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q4_K, W, n_in, n_out);
    if (e) return e;
    if (!mvb_args_ok(x, y, blocks, warps, depth, stages, prefetch)) return cudaErrorInvalidValue;
    if (((uintptr_t)W & 15) || !tnd_cu_matvec_q4kt_i8_supported(n_in, n_out, n_tok)) return cudaErrorNotSupported;
    return launch_mvb(W, n_in, n_out, x, n_tok, y, blocks, warps, depth, stages, prefetch, NULL,
                      (cudaStream_t)stream);
}

extern "C" bool tnd_cu_matvec_q4kt_pair_supported(int64_t n_in, int64_t n_out1, int64_t n_out2, int n_tok) {
    return tnd_cu_matvec_q4kt_i8_supported(n_in, n_out1, n_tok) && tnd_cu_matvec_q4kt_i8_supported(n_in, n_out2, n_tok);
}

extern "C" int tnd_cu_matvec_q4kt_pair(const void *W1, const void *W2, int64_t n_in, int64_t n_out1, int64_t n_out2,
                                       const float *x, int n_tok, float *y1, float *y2, int blocks, int warps,
                                       int depth, int prefetch, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q4_K, W1, n_in, n_out1);
    if (!e) e = check_w(TND_TYPE_Q4_K, W2, n_in, n_out2);
    if (e) return e;
    if (!y2 || !mvb_args_ok(x, y1, blocks, warps, depth, 0, prefetch)) return cudaErrorInvalidValue;
    if (((uintptr_t)W1 & 15) || ((uintptr_t)W2 & 15) || !tnd_cu_matvec_q4kt_pair_supported(n_in, n_out1, n_out2, n_tok))
        return cudaErrorNotSupported;
    const size_t tb = 16 * tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in);
    /* W2's tiles as if they followed W1's: the kernel adds delta past tile tiles1 */
    const mvb_second sec = {n_out1 / 16, n_out1,
                            (ptrdiff_t)((uintptr_t)W2 - ((uintptr_t)W1 + (uintptr_t)(n_out1 / 16) * tb)), y2};
    return launch_mvb(W1, n_in, n_out1 + n_out2, x, n_tok, y1, blocks, warps, depth, 0, prefetch, &sec,
                      (cudaStream_t)stream);
}

#ifdef TND_MVB_TRACE
/* dev only: the last 4 launches' timelines, out[4][1024][16], and each block's launch count */
extern "C" int tnd_cu_matvec_i8b_trace(unsigned long long *out, unsigned *seq) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpyFromSymbol(out, mvb_trace, sizeof mvb_trace);
    if (e == cudaSuccess) e = cudaMemcpyFromSymbol(seq, mvb_trace_seq, sizeof mvb_trace_seq);
    return (int)e;
}
#endif

extern "C" int tnd_cu_matvec_q4kt(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                                  int tiles_per_block, int ksplit, int depth, int prefetch, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q4_K, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8 || tiles_per_block < 0 || ksplit < 0 || depth < 0)
        return cudaErrorInvalidValue;
    /* all defaults: the int8 kernel for one or two tokens where it is on,
     * else (or where it cannot run) k_mvt_q4k */
    if (tiles_per_block == 0 && ksplit == 0 && depth == 0 && prefetch == -1 && mvq_on() &&
        tnd_cu_matvec_q4kt_i8_supported(n_in, n_out, n_tok)) {
        const int mode = mvq_mode();
        if (mode == TND_CU_Q4KT_I8B ||
            (mode == TND_CU_Q4KT_AUTO && (double)n_out * tnd_cu_row_bytes(TND_TYPE_Q4_K, n_in) >= MVB_AUTO_BYTES)) {
            /* the even share; where it refuses, the int8 tiles */
            e = tnd_cu_matvec_q4kt_i8b(W, n_in, n_out, x, n_tok, y, 0, 0, 0, -1, -1, stream);
            if (e != cudaErrorNotSupported) return e;
        }
        e = tnd_cu_matvec_q4kt_i8(W, n_in, n_out, x, n_tok, y, 0, 0, 0, -1, stream);
        if (e != cudaErrorNotSupported) return e; /* e.g. TND_CUDA_TILE_I8_NS's ring does not fit: the f16 kernel */
    }
    return launch_mvt(W, n_in, n_out, x, n_tok, y, tiles_per_block, ksplit, depth, prefetch, (cudaStream_t)stream);
}

extern "C" int tnd_cu_matvec_q4kt_depth(void) { return mvt_depth(); }
extern "C" int tnd_cu_matvec_q4kt_prefetch(void) { return mvt_pf(); }
extern "C" bool tnd_cu_matvec_q4kt_pdl(void) { return mvt_pdl(); }
extern "C" void tnd_cu_matvec_q4kt_set_pdl(bool on) { mvt_pdl_on = on ? 1 : 0; }

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
                     cudaStream_t st) {
    dim3 grid(gx, gy);
    if (TY == TND_TYPE_Q4_K && fam == MV_SPECIAL)
        k_mv_q4k<R><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps);
    else
        k_mv_warp<TY, R><<<grid, threads, 0, st>>>(w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps);
}

template <int TY>
static void launch1(int fam, int R, int threads, const void *W, size_t rb, int64_t n_in, int64_t n_out,
                    const float *x, float *y, const int32_t *ids, int n_used, int64_t n_expert, int xps, unsigned gy,
                    cudaStream_t st) {
    const int64_t rows_per_block = (int64_t)R * (threads / 32);
    const unsigned gx = tnd_cu_blocks(n_out, (int)rows_per_block);
    const uint8_t *w8 = (const uint8_t *)W;
    switch (R) {
    case 1: launch_r<TY, 1>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, st); break;
    case 2: launch_r<TY, 2>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, st); break;
    default: launch_r<TY, 4>(fam, gx, gy, threads, w8, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, st); break;
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
                     cudaStream_t st) {
    size_t rb = tnd_cu_row_bytes(type, n_in);
    /* a family the type or x cannot use falls back to the default */
    int def = mv_family(type, x);
    if (fam == MV_AUTO || (fam == MV_SPECIAL && def != MV_SPECIAL)) fam = def;
    switch (type) {
#define X(t) case t: launch1<t>(fam, R, threads, W, rb, n_in, n_out, x, y, ids, n_used, n_expert, xps, gy, st); break;
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
        return dispatch1(MV_AUTO, type, R, threads, W, n_in, n_out, x, y, NULL, 1, 0, 0, 1, st);
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
    return dispatch1(kernel, type, rows_per_warp, threads, W, n_in, n_out, x, y, NULL, 1, 0, 0, 1,
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
                     (unsigned)pairs, (cudaStream_t)stream);
}
