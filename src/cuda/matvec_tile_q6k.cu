/* The decode matvec of the Q6_K tile layout (q6k_tile.cuh): the in-place
 * repack and the f16 tiles (k_mvt_q6k). The backend calls
 * tnd_cu_matvec_q6kt for weights it re-laid.
 *
 * Why: every attn_v and ffn_down of a Q4_K_M file, and its output head, is
 * Q6_K: 43% of a qwen3-8b decode step's bytes. k_mvh_q6k reads them where
 * they lie, a 210-byte block per row, 2-byte aligned, so each lane makes 23
 * narrow loads per row and super-block with funnel shifts, one super-block
 * in flight: 37% of the copy bandwidth at 12288x4096 (ffn_down), 10% at
 * 4096x1024 (attn_v), against 57% for the Q4_K tiles at 12288x4096
 * (docs/DECISIONS.md, "The Q6_K tile layout"). Re-laid, a lane's share of
 * a 16-row tile's super-block is six 16-byte pieces of one contiguous
 * 3360-byte chunk, two scale pieces and two d's; a ring of such loads
 * stays in flight while one is decoded; and, since the weights are
 * resident and never written by a kernel the matvec can overlap, the
 * kernel reads them before its grid-dependency wait under programmatic
 * dependent launch, as k_mvt_q4k does. The math is k_mvh_q6k's
 * (mvh_q6k_sb): with the same tiles per block and warps per tile the sums
 * are the same bits. */
#include "cuda/matvec.cuh"

#include <stdlib.h>
#include <string.h>

TND_CU_UNIT_ARCH(matvec_tile_q6k)
static int cu_code_major(void) { return cu_unit_arch() / 100; }

/* A lane's pieces of one super-block of its tile: rows g (0) and g + 8 (1),
 * ql words 0..3 (a), 4..7 (b), qh words 0..3 (c), the 16 scales (s), and
 * both d's (d: row g's in the low half). */
struct q6k_pieces {
    uint4 a0, b0, c0, a1, b1, c1, s0, s1;
    uint32_t d;
};

__device__ __forceinline__ uint32_t ld_stream_u16(const void *p) {
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

/* Chunk sb of a re-laid tile: qp = the tile's base + 16 * lane, sp = its
 * base + Q6KT_SC + 16 * g, dp = its base + Q6KT_D + 2 * g. */
__device__ __forceinline__ void q6kt_load(q6k_pieces &b, const uint8_t *qp, const uint8_t *sp, const uint8_t *dp,
                                          int sb) {
    const size_t o = (size_t)sb * Q6KT_CHUNK;
    b.a0 = ld_stream16(qp + o);
    b.b0 = ld_stream16(qp + o + 512);
    b.c0 = ld_stream16(qp + o + 1024);
    b.a1 = ld_stream16(qp + o + 1536);
    b.b1 = ld_stream16(qp + o + 2048);
    b.c1 = ld_stream16(qp + o + 2560);
    b.s0 = ld_stream16(sp + o);
    b.s1 = ld_stream16(sp + o + 128);
    b.d = ld_stream_u16(dp + o) | ld_stream_u16(dp + o + 16) << 16;
}

/* One super-block step: k_mvh_q6k's, from the pieces. */
__device__ __forceinline__ void q6kt_step(const q6k_pieces &b, const uint2 *xb, int t, float (&acc)[2][4]) {
    const uint32_t ql0[8] = {b.a0.x, b.a0.y, b.a0.z, b.a0.w, b.b0.x, b.b0.y, b.b0.z, b.b0.w};
    const uint32_t ql1[8] = {b.a1.x, b.a1.y, b.a1.z, b.a1.w, b.b1.x, b.b1.y, b.b1.z, b.b1.w};
    const uint32_t qh0[4] = {b.c0.x, b.c0.y, b.c0.z, b.c0.w}, qh1[4] = {b.c1.x, b.c1.y, b.c1.z, b.c1.w};
    const uint32_t sc0[4] = {b.s0.x, b.s0.y, b.s0.z, b.s0.w}, sc1[4] = {b.s1.x, b.s1.y, b.s1.z, b.s1.w};
    q6k_step(ql0, qh0, sc0, b.d & 0xffffu, ql1, qh1, sc1, b.d >> 16, xb, t, acc);
}

/* k_mvt_q4k's structure on this layout: MB tiles x KW warps per block, warp
 * kw of a tile taking super-blocks kw, kw + KW, ...; DEPTH chunks in flight
 * per lane in a register ring; the weights' first loads before the
 * grid-dependency wait, x (and y) only after it. The tiles of the last
 * block past n_out load the last tile (every warp reaches the reduction's
 * barrier) and write nothing. */
template <int DEPTH>
__global__ void __launch_bounds__(256, DEPTH == 1 ? 2 : 1)
    k_mvt_q6k(const uint8_t *__restrict__ W, size_t rb, int64_t n_in, int64_t n_out, const float *__restrict__ x,
              int n_tok, float *__restrict__ y, int MB, int KW) {
    extern __shared__ uint4 mvh_dyn[];
    const int nsb = (int)(n_in / 256), xstride = nsb * 64 + 4;
    uint2 *const xz = (uint2 *)mvh_dyn, *const xs = xz + 64;
    float4 *red = (float4 *)(xs + n_tok * xstride);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int mi = wid / KW, kw = wid - mi * KW;
    const int g = lane >> 2, t = lane & 3;
    const int64_t tile = (int64_t)blockIdx.x * MB + mi, last = n_out / 16 - 1;
    const int64_t r0 = tile * 16 + g;
    const uint8_t *const base = W + (size_t)(tile <= last ? tile : last) * 16 * rb;
    const uint8_t *const qp = base + 16 * lane, *const sp = base + Q6KT_SC + 16 * g, *const dp = base + Q6KT_D + 2 * g;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const bool feeds = g < n_tok;
    const uint2 *xl = (feeds ? xs + g * xstride : xz) + t;
    const int xsb = feeds ? 64 : 0;
    q6k_pieces ring[DEPTH + 1];
    auto load = [&](q6k_pieces &b, int sb) { q6kt_load(b, qp, sp, dp, sb); };
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (launch_q6kt1) */
#endif
    mvt_ring_fill<DEPTH>(ring, kw, KW, nsb, load);
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* x (and y) only past here */
#else /* no trap: no launch asks for PDL unless this file runs sm_90 code (launch_q6kt1) */
#endif
    mvt_stage_x<TND_TYPE_Q6_K>(xz, xs, x, n_in, n_tok, xstride);
    __syncthreads();
    mvt_ring_run<DEPTH>(ring, kw, KW, nsb, load,
                        [&](const q6k_pieces &b, int sb) { q6kt_step(b, xl + sb * xsb, t, acc); });
    const float4 a = make_float4(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1], acc[0][2] + acc[1][2],
                                 acc[0][3] + acc[1][3]);
    mvh_finish(a, red, KW, kw, wid, lane, r0, n_out, n_tok, y);
}

__global__ void k_noop_q6kt(void) {}

/* In-place repack of one 16-row group per block into the tile layout: the
 * group (16 * rb bytes) into shared memory, then written back in chunk
 * order, each 16-byte unit gathered from eight 2-byte units
 * (q6k_tile_src). */
__global__ void __launch_bounds__(512) k_q6kt_repack(uint8_t *__restrict__ W, size_t rb) {
    extern __shared__ uint4 mvh_dyn[];
    uint4 *const grp = (uint4 *)(W + (size_t)blockIdx.x * 16 * rb);
    const int nu = (int)rb; /* 16-byte units: 16 * rb / 16 */
    for (int i = threadIdx.x; i < nu; i += blockDim.x) mvh_dyn[i] = grp[i];
    __syncthreads();
    const uint16_t *const h = (const uint16_t *)mvh_dyn;
    for (int i = threadIdx.x; i < nu; i += blockDim.x) {
        const int sb = i / (Q6KT_CHUNK / 16), c = 16 * (i - sb * (Q6KT_CHUNK / 16));
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int r, o;
            q6k_tile_src(c + 4 * k, &r, &o);
            const uint32_t lo = h[((size_t)r * rb + (size_t)sb * Q6KT_BLOCK + (size_t)o) >> 1];
            q6k_tile_src(c + 4 * k + 2, &r, &o);
            const uint32_t hi = h[((size_t)r * rb + (size_t)sb * Q6KT_BLOCK + (size_t)o) >> 1];
            w[k] = lo | hi << 16;
        }
        grp[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* ---- launch ------------------------------------------------------------------- */

/* THE DEFAULT (flip after dev_cuda_matvec_bench's "tiled6" rows): chunks in
 * flight per lane while one is decoded. Depth 1 is compiled for two blocks
 * an SM (128 registers: 16 warps), depth 2 for one (222 registers).
 * Measured on the H200 (2026-12-04, PDL, copy 4271 GB/s), us at depth 1 /
 * 2 and, for comparison, the untiled k_mvh_q6k: 12288x4096 (ffn_down)
 * 17.6 / 19.6 / 26.3; 4096x151936 (the head) 157.1 / 178.9 / 192.8;
 * 17408x5120 40.5 / 42.6 / 48.0; but 4096x1024 (attn_v, 3 MiB) 5.4 / 4.4
 * / 8.4 (depth 1 at one block an SM measured 4.9 there, 21.3 on ffn_down;
 * depth 2 at two blocks spilled: 18.2). So: depth 2 below MVT6_DEEP_BYTES. */
#define MVT6_MAX_DEPTH 2
#define MVT6_DEEP_BYTES (8.0 * 1048576)

static mvh_kernel q6kt_kernel_of(int depth) {
    static const mvh_kernel k[MVT6_MAX_DEPTH] = {k_mvt_q6k<1>, k_mvt_q6k<2>};
    return k[depth - 1];
}

/* The opt-in shared memory of the tiled kernels and the repack, once per
 * device. */
static int q6kt_prepare(void) {
    static bool attr_set[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return cudaErrorInvalidDevice;
    if (attr_set[dev]) return 0;
    cudaError_t e = cudaSuccess;
    for (int d = 1; d <= MVT6_MAX_DEPTH && e == cudaSuccess; d++)
        e = cudaFuncSetAttribute(q6kt_kernel_of(d), cudaFuncAttributeMaxDynamicSharedMemorySize, mvh_attr_smem());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_q6kt_repack, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin));
    if (e != cudaSuccess) return (int)e;
    attr_set[dev] = true;
    return 0;
}

extern "C" bool tnd_cu_q6kt_supported(int64_t n_in, int64_t n_out) {
    if (!q6k_tile_ok(n_in, n_out) || n_in > (1 << 24) || n_out > 0x7fffffff) return false;
    if (cu_code_major() < 8) return false; /* the tile kernels: mma.sync */
    if (!mvh_supported(TND_CU_MV_F16MMA, TND_TYPE_Q6_K, n_in, 1)) return false; /* sm_80+, one token's x fits */
    const size_t group = 16 * tnd_cu_row_bytes(TND_TYPE_Q6_K, n_in);
    return group <= (size_t)cu_dev_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

extern "C" int tnd_cu_q6kt_repack(void *W, int64_t n_in, int64_t n_out, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q6_K, W, n_in, n_out);
    if (e) return e;
    if ((uintptr_t)W & 15) return cudaErrorMisalignedAddress; /* the chunks' 16-byte loads */
    if (!tnd_cu_q6kt_supported(n_in, n_out)) return cudaErrorNotSupported;
    if (q6kt_prepare()) { /* nothing launched: the weight stays as uploaded */
        (void)cudaGetLastError();
        return cudaErrorNotSupported;
    }
    const size_t rb = tnd_cu_row_bytes(TND_TYPE_Q6_K, n_in);
    k_q6kt_repack<<<(unsigned)(n_out / 16), 512, 16 * rb, (cudaStream_t)stream>>>((uint8_t *)W, rb);
    /* a plain launch between the repack and any matvec, which reads
     * weights before its grid-dependency wait (as tnd_cu_q4kt_repack) */
    k_noop_q6kt<<<1, 32, 0, (cudaStream_t)stream>>>();
    return (int)cudaGetLastError();
}

/* One launch for n_tok <= mvt_max_tok tokens; PDL only where this file's
 * code is sm_90's (tile_launch_cfg checks the kernel's own PTX too). */
static int launch_q6kt1(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y, int MB,
                        int KW, int depth, cudaStream_t st) {
    const mvh_kernel k = q6kt_kernel_of(depth);
    if (MB <= 0 || KW <= 0) mvh_shape_k(k, TND_CU_MV_F16MMA, n_in, n_out, n_tok, 0, &MB, &KW);
    if (MB * KW > 8) return cudaErrorInvalidValue;
    const size_t smem = mvh_smem(TND_CU_MV_F16MMA, n_in, n_tok, MB * KW);
    const int64_t tiles = n_out / 16;
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = tile_launch_cfg((const void *)k, (tiles + MB - 1) / MB, 32 * MB * KW, smem, st, &at);
    if (cu_code_major() < 9) cfg.attrs = NULL, cfg.numAttrs = 0;
    return launch_result(cudaLaunchKernelEx(&cfg, k, (const uint8_t *)W, tnd_cu_row_bytes(TND_TYPE_Q6_K, n_in), n_in,
                                            n_out, x, n_tok, y, MB, KW));
}

extern "C" int tnd_cu_matvec_q6kt(const void *W, int64_t n_in, int64_t n_out, const float *x, int n_tok, float *y,
                                  int tiles_per_block, int ksplit, int depth, tnd_cu_stream stream) {
    int e = check_w(TND_TYPE_Q6_K, W, n_in, n_out);
    if (e) return e;
    if (!x || !y || n_tok < 1 || n_tok > 8 || tiles_per_block < 0 || ksplit < 0 || depth < 0 ||
        depth > MVT6_MAX_DEPTH)
        return cudaErrorInvalidValue;
    if ((uintptr_t)W & 15) return cudaErrorMisalignedAddress;
    if (!tnd_cu_q6kt_supported(n_in, n_out)) return cudaErrorNotSupported;
    if (depth == 0) depth = (double)n_out * tnd_cu_row_bytes(TND_TYPE_Q6_K, n_in) < MVT6_DEEP_BYTES ? 2 : 1;
    if ((e = q6kt_prepare())) return e;
    const int per = mvt_max_tok(n_in);
    if (per < 1) return cudaErrorNotSupported;
    for (int k0 = 0; k0 < n_tok && !e; k0 += per) /* x too wide for all tokens at once: token groups */
        e = launch_q6kt1(W, n_in, n_out, x + (int64_t)k0 * n_in, n_tok - k0 < per ? n_tok - k0 : per,
                         y + (int64_t)k0 * n_out, tiles_per_block, ksplit, depth, (cudaStream_t)stream);
    return e;
}
