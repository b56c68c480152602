/* The tensor-core decode matvecs: f16 (k_mvh_q4k, k_mvh_q6k, k_mvh_q8) and
 * int8 (k_mvi_q4k) on weights as uploaded, their launch shapes, and the
 * helpers the f16 tiles (matvec_tile.cu) share. tnd_cu_matvec (matvec.cu)
 * takes a family per type. */
#include "cuda/matvec.cuh"

/* ---- f16 tensor-core decode path (TND_CUDA_MV=f16mma) ---------------------
 * Why: the f32 kernels (matvec.cu) decode every weight exactly to f32
 * (mask, FADD, FFMA and their share of scale work: ~4.6 instructions per
 * weight) and measured bound by that decode at ~37% of the copy
 * bandwidth. Here a weight
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
        q6k_step(ql0, qh0, sc0, d0, ql1, qh1, sc1, d1, xl + sb * xsb, t, acc);
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

/* The major architecture this file's code runs as on the current device
 * (9 for sm_90 code; 7 when a build for sm_75 runs on an sm_90 GPU, whose
 * mma kernels are then compiled out): every kernel
 * choice below goes by this, never by the device's compute capability. */
TND_CU_UNIT_ARCH(matvec_mma)
static int cu_code_major(void) { return cu_unit_arch() / 100; }

/* The dynamic shared memory the f16 tensor-core kernels opt into: x's area
 * and the reduction, capped at what the device allows (launches that need
 * more are refused by mvh_supported). */
int mvh_attr_smem(void) {
    const int max = cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin), want = MVH_XS_MAX + 8 * 32 * 16;
    return max < want ? max : want;
}

/* Shared bytes of family fam (F16MMA / I8MMA) for this row length, n_tok
 * and block size. */
size_t mvh_smem(int fam, int64_t n_in, int n_tok, int warps) {
    if (fam == TND_CU_MV_I8MMA) {
        const size_t xb = mvi_xbytes(n_in, n_tok), rb = (size_t)warps * 32 * 8; /* reduction reuses x's area */
        return xb > rb ? xb : rb;
    }
    return (size_t)(64 + n_tok * (n_in / 256 * 64 + 4)) * 8 + (size_t)warps * 32 * 16;
}

/* Whether family fam can take this type, row length and token count on the
 * current device (sm_80+ for mma.sync; x staged in shared memory). */
bool mvh_supported(int fam, int type, int64_t n_in, int n_tok) {
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

static mvh_kernel mvh_kernel_of(int fam, int type) {
    return fam == TND_CU_MV_I8MMA    ? k_mvi_q4k
           : type == TND_TYPE_Q6_K ? k_mvh_q6k
           : type == TND_TYPE_Q8_0 ? k_mvh_q8
                                   : k_mvh_q4k;
}

/* Resident blocks per SM of kernel k for this block size and shared size
 * (cached: the occupancy query is not free; 0 on error). */
int mvh_occupancy_k(mvh_kernel k, int warps, size_t smem) {
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
void mvh_shape_k(mvh_kernel k, int fam, int64_t n_in, int64_t n_out, int n_tok, size_t extra_per_warp, int *MB,
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

int launch_mvh(int fam, int type, const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok,
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

