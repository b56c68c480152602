/* The decode matvecs of the Q4_K tile layout (q4k_tile.cuh): the in-place
 * repack, the f16 tiles (k_mvt_q4k), the int8 tiles (k_mvq_q4k), the int8
 * even share per SM and its pair of matrices (k_mvb_q4k), their launch
 * shapes and programmatic dependent launch (tile_launch_cfg). The backend
 * calls tnd_cu_matvec_q4kt and tnd_cu_matvec_q4kt_pair for weights it
 * re-laid. */
#include "cuda/matvec.cuh"
#include "config.h"

#include <stdlib.h>
#include <string.h>

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
    mvt_ring_fill<DEPTH>(ring, kw, KW, nsb, load);
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
    mvt_stage_x<TND_TYPE_Q4_K>(xz, xs, x, n_in, n_tok, xstride);
    __syncthreads();
    mvt_ring_run<DEPTH>(ring, kw, KW, nsb, load, [&](const buf &b, int sb) {
        if (PF == 1 && lane < Q4KT_CHUNK / 128 && sb + (DEPTH + MVT_PF_AHEAD) * KW < nsb)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (size_t)(sb + (DEPTH + MVT_PF_AHEAD) * KW) *
                                                                Q4KT_CHUNK + 128 * lane));
        compute(b, sb);
    });
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

/* ---- Q4_K in the tile layout on the int8 tensor cores: k_mvq_q4k -----------
 * Why: ncu put the f16 tiled decode (k_mvt_q4k) at 45% issue with ~200 of
 * a chunk's ~330 instructions on the half-rate integer pipe (docs/DECISIONS.md,
 * "Programmatic dependent launch for the tiled decode"). This is k_mvi_q4k's math (x on a 16-bit grid per super-block
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
 * cp.async.bulk per chunk completing on the slot's mbarrier, so NS - 2
 * chunks or more stay in flight at no register cost, and the
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
        mvt_ring_fill<DEPTH>(ring, kw, KW, nsb, load);
#if __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory"); /* x (and y) only past here, as k_mvt_q4k */
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (tile_launch_cfg) */
#endif
        mvi_stage_x(xz, xq, xsm, dl, x, n_in, n_tok, pstride);
        __syncthreads();
        mvt_ring_run<DEPTH>(ring, kw, KW, nsb, load, [&](const buf &b, int sb) {
            compute(
                [&](int i) {
                    return i == 0 ? b.q00 : i == 1 ? b.q01 : i == 2 ? b.q10 : i == 3 ? b.q11 : i == 4 ? b.h0 : b.h1;
                },
                sb);
        });
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
 * per launch, docs/DECISIONS.md, "An even share per SM"). A warp
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

/* The major architecture this file's code runs as on the current device
 * (9 for sm_90 code; 7 when a build for sm_75 runs on an sm_90 GPU, whose
 * mma, bulk-copy and PDL code is then compiled out): every kernel
 * choice below goes by this, never by the device's compute capability. */
TND_CU_UNIT_ARCH(matvec_tile)
static int cu_code_major(void) { return cu_unit_arch() / 100; }

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
 * registers: fewer warps resident); PF 1 never helped. At 554335c
 * (2026-11-30, copy 4244 GB/s): PDL 31->39%, 53->59%, 53->55%, 53->60%; PF 2 no better. */
#define MVT_DEFAULT_DEPTH 1
#define MVT_DEFAULT_PF 0
#define MVT_DEFAULT_PDL 1

#define MVT_K(F) {k_mvt_q4k<1, F>, k_mvt_q4k<2, F>, k_mvt_q4k<3, F>, k_mvt_q4k<4, F>}
static mvh_kernel mvt_kernel_of(int depth, int pf) {
    static const mvh_kernel k[MVT_N_PF][MVT_MAX_DEPTH] = {MVT_K(0), MVT_K(1), MVT_K(2)};
    return k[pf][depth - 1];
}
#undef MVT_K

/* TND_CUDA_TILE_DEPTH (config.h accepts 1..MVT_MAX_DEPTH; 0: unset) */
static int mvt_depth(void) {
    const int v = tnd_config_get()->cuda_tile_depth;
    return v >= 1 && v <= MVT_MAX_DEPTH ? v : MVT_DEFAULT_DEPTH;
}

static int mvt_pf(void) {
    const int v = tnd_config_get()->cuda_tile_pf;
    return v >= 0 && v < MVT_N_PF ? v : MVT_DEFAULT_PF;
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
        const int v = tnd_config_get()->cuda_pdl;
        mvt_pdl_on = v >= 0 ? v : MVT_DEFAULT_PDL;
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
int mvt_max_tok(int64_t n_in) {
    int n = 0;
    while (n < 8 && mvh_smem(TND_CU_MV_F16MMA, n_in, n + 1, 0) <= MVH_XS_MAX &&
           mvh_smem(TND_CU_MV_F16MMA, n_in, n + 1, 8) <= (size_t)mvh_attr_smem())
        n++;
    return n;
}

extern "C" bool tnd_cu_q4kt_supported(int64_t n_in, int64_t n_out) {
    if (!q4k_tile_ok(n_in, n_out) || n_in > (1 << 24) || n_out > 0x7fffffff) return false;
    if (cu_code_major() < 8) return false; /* the tile kernels: mma.sync */
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
cudaLaunchConfig_t tile_launch_cfg(const void *k, int64_t grid, int threads, size_t smem, cudaStream_t st,
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
int launch_result(cudaError_t le) {
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
 * AUTO (75610e8, H200, PDL): the even share at depth 1 from 20 MiB of
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
    if (mvq_on_v < 0) { /* a benign race: every thread computes the same value */
        const int e = tnd_config_get()->cuda_tile_mv;
        mvq_on_v = e == TND_CFG_TILE_F16   ? TND_CU_Q4KT_F16
                   : e == TND_CFG_TILE_I8  ? TND_CU_Q4KT_I8
                   : e == TND_CFG_TILE_I8B ? TND_CU_Q4KT_I8B
                                           : MVQ_DEFAULT_MODE;
    }
    return mvq_on_v;
}
static bool mvq_on(void) { return mvq_mode() != TND_CU_Q4KT_F16; }

static int mvq_depth(void) {
    const int v = tnd_config_get()->cuda_tile_depth;
    return v >= 1 ? (v <= MVQ_MAX_DEPTH ? v : MVQ_MAX_DEPTH) : MVQ_DEFAULT_DEPTH;
}

/* the ring's stages (env TND_CUDA_TILE_I8_NS=0|2|4|6|8; 0: the register
 * ring; unset: -1, picked with the launch shape) */
static bool mvq_ns_ok(int ns) { return ns == 0 || ns == 2 || ns == 4 || ns == 6 || ns == 8; }
static int mvq_stages(void) {
    const int v = tnd_config_get()->cuda_tile_i8_ns;
    return mvq_ns_ok(v) ? v : MVQ_DEFAULT_NS;
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
 * out: those to run). Measured on the H200 (ncu, docs/DECISIONS.md, "The int8 decode on the tile layout"): each warp is
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

/* THE DEFAULTS, from dev_cuda_matvec_bench --i8 (docs/BENCHMARKS.md of the even share, H200, 5120x17408,
 * PDL): the register ring of depth 2 (tnd_cu_matvec_q4kt_i8's default depth)
 * with 16 warps, 2 chunks per warp asked of L2 before the wait: 16.0 us,
 * 74% of the copy bandwidth; the shared rings 66-68%, 8 or 12 warps 70%,
 * 4 or more chunks asked of L2 70%. At d12e459 (2026-12-01; the kernel as
 * built since, two runs on one machine): depth 1 14.8-14.9 us (80%) against depth 2's
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

