/* The decode matvec's shared parts (src/cuda/matvec*.cu): the device
 * helpers that more than one of its files inlines, and the host helpers
 * that one file defines for the others.
 *   matvec.cu       the exact f32 kernels (every type, the MoE variant),
 *                   the family choice and tnd_cu_matvec's dispatch;
 *   matvec_mma.cu   the f16 and int8 tensor-core kernels (f16mma, i8mma);
 *   matvec_tile.cu  the kernels of the Q4_K tile layout (q4k_tile.cuh):
 *                   f16 tiles, int8 tiles, the even share and its pair,
 *                   the repack, and programmatic dependent launch;
 *   matvec_tile_q6k.cu  the Q6_K tile layout's (q6k_tile.cuh): its f16
 *                   tiles and repack, launched as matvec_tile.cu's. */
#ifndef TND_CUDA_MATVEC_CUH
#define TND_CUDA_MATVEC_CUH

#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/q4k_tile.cuh"
#include "cuda/q6k_tile.cuh"

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

/* x into shared f16 as mvh_stage_x (any 4-byte alignment of x), and the
 * 64 zero pairs xz that lanes feeding no token read: the tiled decoders'
 * staging (k_mvt_q4k, k_mvt_q6k). */
template <int TY>
__device__ __forceinline__ void mvt_stage_x(uint2 *xz, uint2 *xs, const float *x, int64_t n_in, int n_tok,
                                            int xstride) {
    if (((uintptr_t)x & 15) == 0) {
        mvh_stage_x<TY>(xs, x, n_in, n_tok, xstride);
    } else { /* x not 16-byte aligned: the same staging from single floats */
        const int nq = (int)(n_in / 4);
        for (int k = 0; k < n_tok; k++)
            for (int q = threadIdx.x; q < nq; q += blockDim.x) {
                const float *v = x + (int64_t)k * n_in + 4 * q;
                const int o = (q & 63) * 4, slot = TY == TND_TYPE_Q4_K ? mvh_q4k_slot(o) : mvh_q6k_slot(o);
                xs[k * xstride + (q >> 6) * 64 + slot] =
                    make_uint2(f2h2u(__ldcg(v), __ldcg(v + 2)), f2h2u(__ldcg(v + 1), __ldcg(v + 3)));
            }
    }
    for (int i = threadIdx.x; i < 64; i += blockDim.x) xz[i] = make_uint2(0u, 0u);
}

/* The tiled decoders' register ring (k_mvt_q4k, k_mvq_q4k, k_mvt_q6k):
 * warp kw takes super-blocks kw, kw + KW, ... below nsb. mvt_ring_fill
 * queues the first DEPTH loads (load(buf, sb)), before the caller's
 * grid-dependency wait; mvt_ring_run then decodes step i from ring[i %
 * (DEPTH + 1)] (step(buf, sb)) after queuing the load of step i + DEPTH
 * into the buffer step i - 1 used, unrolled by the ring's length so every
 * buffer index is a constant (registers). */
template <int DEPTH, class Buf, class Load>
__device__ __forceinline__ void mvt_ring_fill(Buf (&ring)[DEPTH + 1], int kw, int KW, int nsb, Load &&load) {
#pragma unroll
    for (int i = 0; i < DEPTH; i++)
        if (kw + i * KW < nsb) load(ring[i], kw + i * KW);
}
template <int DEPTH, class Buf, class Load, class Step>
__device__ __forceinline__ void mvt_ring_run(Buf (&ring)[DEPTH + 1], int kw, int KW, int nsb, Load &&load,
                                             Step &&step) {
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
            step(ring[u], sb);
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

/* One super-block step of the f16 tensor-core Q6_K decode (rows g, g + 8:
 * ql, qh, scale words and d of each): x pairs at xb, sums into acc's two
 * chains. Shared by k_mvh_q6k and k_mvt_q6k so the two layouts give the
 * same bits. */
__device__ __forceinline__ void q6k_step(const uint32_t (&ql0)[8], const uint32_t (&qh0)[4], const uint32_t (&sc0)[4],
                                         uint32_t d0, const uint32_t (&ql1)[8], const uint32_t (&qh1)[4],
                                         const uint32_t (&sc1)[4], uint32_t d1, const uint2 *xb, int t,
                                         float (&acc)[2][4]) {
    mvh_q6k_sb(ql0, qh0, sc0, d0, ql1, qh1, sc1, d1, t, [&](int m) { return xb[m * 4]; },
               [&](int chain, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx) {
                   mma_f16(acc[chain], a0, a1, a2, a3, bx);
               });
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

/* ---- host helpers ---------------------------------------------------------- */

/* matvec.cu: a device attribute (cached per device; 0 on error), and the
 * checks every entry point makes of a weight (0 or a cudaError_t). */
int cu_dev_attr(cudaDeviceAttr a);
int check_w(int type, const void *W, int64_t n_in, int64_t n_out);

/* matvec_mma.cu: the tensor-core families' shared memory, support and
 * launch shape, which the f16 tiles share (fam: TND_CU_MV_F16MMA or
 * _I8MMA). */
typedef void (*mvh_kernel)(const uint8_t *, size_t, int64_t, int64_t, const float *, int, float *, int, int);
int mvh_attr_smem(void);
size_t mvh_smem(int fam, int64_t n_in, int n_tok, int warps);
bool mvh_supported(int fam, int type, int64_t n_in, int n_tok);
int mvh_occupancy_k(mvh_kernel k, int warps, size_t smem);
void mvh_shape_k(mvh_kernel k, int fam, int64_t n_in, int64_t n_out, int n_tok, size_t extra_per_warp, int *MB,
                 int *KW);
int launch_mvh(int fam, int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
               int MB, int KW, cudaStream_t st);

/* matvec_tile.cu: what the tiled decoders of both layouts share. The most
 * tokens one f16 tiled launch takes for this row length (0: none); a tiled
 * kernel k's launch configuration, with programmatic dependent launch where
 * it is on (TND_CUDA_PDL) and k's code waits for its predecessor (sm_90;
 * the attribute lives in *at); and a launch's result (its error, or the one
 * it left, cleared). */
int mvt_max_tok(int64_t n_in);
cudaLaunchConfig_t tile_launch_cfg(const void *k, int64_t grid, int threads, size_t smem, cudaStream_t st,
                                   cudaLaunchAttribute *at);
int launch_result(cudaError_t le);

#endif
