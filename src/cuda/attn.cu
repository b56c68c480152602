/* Causal attention over an f16 KV cache: split-K over the keys ("flash
 * decoding") plus a combine pass. k_attn serves decode (n_tok < FA_MIN_TOK)
 * and every shape the tensor-core prefill kernel k_attn_tc (below) does not
 * take; TND_CUDA_ATTN=old sends every call to k_attn's thread-per-output
 * form (k_attn<0>).
 *
 * A block owns one kv head, one query token and one key range; it computes
 * all the q heads of that kv head's GQA group together, so each K/V row is
 * read once per group instead of once per q head. Keys are taken in tiles of
 * AT_C with an online softmax (running max m, running sum l, rescaled
 * accumulators), so shared memory does not grow with the context. Each block
 * writes (m, l, acc[head_dim]) per q head; the combine pass merges the
 * ranges: o = sum_c acc_c e^(m_c - M) / sum_c l_c e^(m_c - M).
 * The key range is split only as far as needed to fill the GPU (decode has
 * few (head, token) pairs, prefill many).
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cuda/attn_tc.cuh"
#include "cuda/common.cuh"
#include "cuda/cuda_ops.h"

#define AT_C 128        /* keys per tile */
#define AT_THREADS 128
#define AT_MAXO 32      /* outputs per thread: ratio * head_dim <= 32 * 128 */
#define AT_MAX_RATIO 16
/* Decode has few (kv head, token) pairs: the keys are split into ranges of
 * AT_SPLIT_MIN keys or more until about 4 blocks per SM (132 on the H200)
 * are in flight; whole AT_C tiles per range left decode with ~64 blocks each
 * walking 128+ keys serially (119 us per layer at 1024 rows). */
#define AT_TARGET_BLOCKS 528
#define AT_SPLIT_MIN 32

/* U = 0: P V with a thread per (head, dim) output, each walking the tile's
 * keys in turn (any ratio * head_dim up to AT_MAXO * AT_THREADS). U > 0
 * (head_dim <= 32 U, ratio * U <= 32): a warp per key, as the scores are
 * taken, its lanes over head_dim, every warp holding all the group's
 * outputs for its keys; the warps' sums are added once at the end. Decode
 * time went to the first form's chains of dependent V loads (a thread read
 * 4 outputs x the range's keys, one after another: ~30 us a layer at 128
 * keys on the H200); the second has a warp's keys' loads in flight at once.
 * With one key range (n_split == 1) the block writes o itself and the
 * combine pass is not launched. */
template <int U>
__global__ void __launch_bounds__(AT_THREADS)
k_attn(const float *__restrict__ q, const __half *__restrict__ K, const __half *__restrict__ V,
       float *__restrict__ part, float *__restrict__ out, int n_head, int n_head_kv, int hd, int64_t pos0,
       const int32_t *__restrict__ pos, int64_t slot_rows, int64_t n_slots, float scale, float softcap, int64_t window,
       int n_split,
       int64_t per_split) {
    constexpr int RM = U ? 32 / U : 1; /* most heads a group has in the warp form */
    extern __shared__ float smem[];
    const int ratio = n_head / n_head_kv;
    const int c = blockIdx.x, g = blockIdx.y;
    const int64_t t = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = AT_THREADS / 32;
    float *qs = smem;                 /* [ratio][hd] */
    float *sc = qs + ratio * hd;      /* [ratio][AT_C] scores, then probabilities */
    float *mh = sc + ratio * AT_C;    /* [ratio] running max */
    float *lh = mh + ratio;           /* [ratio] running sum */
    float *corr = lh + ratio;         /* [ratio] rescale of this tile */
    float *red = corr + ratio;        /* U > 0: [nw][ratio * hd] the warps' sums */
    const int64_t kv_stride = (int64_t)n_head_kv * hd;
    const int nout = ratio * hd;

    for (int i = tid; i < nout; i += AT_THREADS) qs[i] = q[(t * n_head + (int64_t)g * ratio) * hd + i];
    if (tid < ratio) {
        mh[tid] = -INFINITY;
        lh[tid] = 0.f;
    }
    float acc[U ? RM * U : AT_MAXO];
#pragma unroll
    for (int k = 0; k < (U ? RM * U : AT_MAXO); k++) acc[k] = 0.f;
    /* positions in memory: ranges past the last key stay empty (m -inf, l 0) */
    int64_t n_vis = pos ? pos[0] + t + 1 : pos0 + t + 1;
    if (slot_rows > 0) { /* query t at position p of slot s: that slot's rows */
        const int64_t s = pos[t] / slot_rows;
        if (pos[t] < 0 || s >= n_slots) { /* no slot of the cache: read nothing */
            n_vis = 0;
        } else {
            n_vis = pos[t] - s * slot_rows + 1;
            K += s * slot_rows * kv_stride;
            V += s * slot_rows * kv_stride;
        }
    }
    /* sliding window: position p sees rows > p - window */
    const int64_t lo = window > 0 && n_vis - window > 0 ? n_vis - window : 0;
    const int64_t k0 = (int64_t)c * per_split > lo ? (int64_t)c * per_split : lo;
    const int64_t k1 = (int64_t)c * per_split + per_split < n_vis ? (int64_t)c * per_split + per_split : n_vis;
    __syncthreads();

    for (int64_t kt = k0; kt < k1; kt += AT_C) {
        const int nk = (int)(k1 - kt < AT_C ? k1 - kt : AT_C);
        /* scores: a warp per key, lanes over head_dim, all heads of the group */
        if constexpr (U > 0) {
            /* the group's dots of a key reduced side by side: RM
             * independent shuffle trees, not one after another (a decode
             * layer's scores took ~7 us that way, the trees' latency) */
            for (int j = warp; j < nk; j += nw) {
                const __half *kr = K + (kt + j) * kv_stride + (int64_t)g * hd;
                float kv[U], s[RM];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int d = lane + 32 * u;
                    kv[u] = d < hd ? __half2float(kr[d]) : 0.f;
                }
#pragma unroll
                for (int hh = 0; hh < RM; hh++) {
                    s[hh] = 0.f;
                    if (hh < ratio) {
#pragma unroll
                        for (int u = 0; u < U; u++) {
                            int d = lane + 32 * u;
                            if (d < hd) s[hh] = fmaf(qs[hh * hd + d], kv[u], s[hh]);
                        }
                    }
                }
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                    for (int hh = 0; hh < RM; hh++) s[hh] += __shfl_xor_sync(0xffffffffu, s[hh], off);
                if (lane == 0) {
#pragma unroll
                    for (int hh = 0; hh < RM; hh++) {
                        if (hh >= ratio) break;
                        float v = s[hh] * scale;
                        if (softcap > 0.f) v = softcap * tanhf(v / softcap);
                        sc[hh * AT_C + j] = v;
                    }
                }
            }
        } else {
            for (int j = warp; j < nk; j += nw) {
                const __half *kr = K + (kt + j) * kv_stride + (int64_t)g * hd;
                float kv[8];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    int d = lane + 32 * u;
                    kv[u] = d < hd ? __half2float(kr[d]) : 0.f;
                }
                for (int hh = 0; hh < ratio; hh++) {
                    float s = 0.f;
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        int d = lane + 32 * u;
                        if (d < hd) s = fmaf(qs[hh * hd + d], kv[u], s);
                    }
                    s = warp_sum(s);
                    s *= scale;
                    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
                    if (lane == 0) sc[hh * AT_C + j] = s;
                }
            }
        }
        __syncthreads();
        /* online softmax update: a warp per head */
        for (int hh = warp; hh < ratio; hh += nw) {
            float m = -INFINITY;
            for (int j = lane; j < nk; j += 32) m = fmaxf(m, sc[hh * AT_C + j]);
            m = warp_max(m);
            float mo = mh[hh], mn = fmaxf(mo, m);
            float sum = 0.f;
            for (int j = lane; j < nk; j += 32) {
                float p = expf(sc[hh * AT_C + j] - mn);
                sc[hh * AT_C + j] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                float cr = expf(mo - mn); /* mo = -inf on the first tile: 0 */
                corr[hh] = cr;
                lh[hh] = lh[hh] * cr + sum;
                mh[hh] = mn;
            }
        }
        __syncthreads();
        if constexpr (U > 0) { /* P V: a warp per key, lanes over head_dim */
#pragma unroll
            for (int hh = 0; hh < RM; hh++) {
                float cr = hh < ratio ? corr[hh] : 0.f;
#pragma unroll
                for (int u = 0; u < U; u++) acc[hh * U + u] *= cr;
            }
            for (int j = warp; j < nk; j += nw) {
                const __half *vr = V + (kt + j) * kv_stride + (int64_t)g * hd;
                float vv[U ? U : 1];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int d = lane + 32 * u;
                    vv[u] = d < hd ? __half2float(vr[d]) : 0.f;
                }
#pragma unroll
                for (int hh = 0; hh < RM; hh++) {
                    if (hh >= ratio) break;
                    float p = sc[hh * AT_C + j];
#pragma unroll
                    for (int u = 0; u < U; u++) acc[hh * U + u] = fmaf(p, vv[u], acc[hh * U + u]);
                }
            }
        } else { /* P V: a thread per (head, dim) output, V rows read coalesced */
#pragma unroll
            for (int k = 0; k < AT_MAXO; k++) {
                int o = tid + k * AT_THREADS;
                if (o < nout) {
                    int hh = o / hd, d = o - hh * hd;
                    float a = acc[k] * corr[hh];
                    const __half *vp = V + kt * kv_stride + (int64_t)g * hd + d;
                    const float *pp = sc + hh * AT_C;
                    for (int j = 0; j < nk; j++) a = fmaf(pp[j], __half2float(vp[j * kv_stride]), a);
                    acc[k] = a;
                }
            }
        }
        __syncthreads(); /* sc and corr are rewritten by the next tile */
    }
    const int stride = hd + 2;
    if constexpr (U > 0) { /* the warps' sums, through shared memory */
#pragma unroll
        for (int hh = 0; hh < RM; hh++) {
            if (hh >= ratio) break;
#pragma unroll
            for (int u = 0; u < U; u++) {
                int d = lane + 32 * u;
                if (d < hd) red[warp * nout + hh * hd + d] = acc[hh * U + u];
            }
        }
        __syncthreads();
        for (int o = tid; o < nout; o += AT_THREADS) {
            float a = 0.f;
            for (int w = 0; w < nw; w++) a += red[w * nout + o];
            int hh = o / hd, d = o - hh * hd;
            int64_t h = (int64_t)g * ratio + hh;
            if (n_split == 1) out[(t * n_head + h) * hd + d] = a / lh[hh];
            else part[((t * n_head + h) * n_split + c) * stride + 2 + d] = a;
        }
    } else {
#pragma unroll
        for (int k = 0; k < AT_MAXO; k++) {
            int o = tid + k * AT_THREADS;
            if (o < nout) {
                int hh = o / hd, d = o - hh * hd;
                int64_t h = (int64_t)g * ratio + hh;
                if (n_split == 1) out[(t * n_head + h) * hd + d] = acc[k] / lh[hh];
                else part[((t * n_head + h) * n_split + c) * stride + 2 + d] = acc[k];
            }
        }
    }
    if (tid < ratio && n_split > 1) {
        int64_t h = (int64_t)g * ratio + tid;
        float *b = part + ((t * n_head + h) * n_split + c) * stride;
        b[0] = mh[tid];
        b[1] = lh[tid];
    }
}

__global__ void k_attn_combine(const float *__restrict__ part, float *__restrict__ o, int hd, int n_split) {
    const int64_t th = blockIdx.x; /* token * n_head + head */
    const int stride = hd + 2;
    const float *p = part + th * n_split * stride;
    float M = -INFINITY;
    for (int c = 0; c < n_split; c++) M = fmaxf(M, p[c * stride]);
    float L = 0.f;
    for (int c = 0; c < n_split; c++) L += p[c * stride + 1] * expf(p[c * stride] - M);
    float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.f;
        for (int c = 0; c < n_split; c++) a = fmaf(p[c * stride + 2 + d], expf(p[c * stride] - M), a);
        o[th * hd + d] = a * inv;
    }
}

/* ---- tensor-core prefill (attn_tc.cuh has the layout) ----------------------
 * Why: k_attn re-reads every K/V row for every query and runs its dot
 * products on CUDA cores with a warp reduction per (key, head): ~4 TFLOP/s,
 * 8.1 ms per layer for a 2048-token chunk. Here a block stages a 64-key K/V
 * tile in shared memory once for its 64 (token, head) rows, and Q K^T and
 * P V run on mma.sync. Tiles wholly above the diagonal are never visited
 * (the block's key range ends at its last token), tiles wholly masked for a
 * warp are skipped by that warp. */
#define FA_MIN_TOK 16       /* fewer queries: k_attn (decode-shaped) */
#define FA_TARGET_BLOCKS 264 /* 2 per SM; split the keys only below that */

__device__ __forceinline__ void fa_mma(float (&d)[4], const uint32_t (&a)[4], uint2 b) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
#else
    __trap(); /* never chosen without this code: tnd_cu_attn checks cu_unit_arch() */
#endif
}

/* grid (n_split, row tiles, n_head_kv); FA_THREADS threads; fa_smem_bytes(HD) */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS)
k_attn_tc(const float *__restrict__ q, const uint16_t *__restrict__ K, const uint16_t *__restrict__ V,
          float *__restrict__ o, float *__restrict__ part, int64_t n_tok, int n_head, int n_head_kv, int64_t pos0,
          float scale, float softcap, int64_t window, int n_split, int64_t per) {
    extern __shared__ uint4 fa_smem[];
    const int ld = HD + FA_PAD, ldv = FA_BK + FA_PAD;
    uint16_t *qh = (uint16_t *)fa_smem, *ql = qh + FA_BQ * ld, *ks = ql + FA_BQ * ld, *vt = ks + FA_BK * ld;
    const int c = blockIdx.x, g = blockIdx.z;
    const int ratio = n_head / n_head_kv;
    const fa_geom b = fa_block(blockIdx.y, c, per, n_tok, ratio, pos0, window);
    const int64_t kv_stride = (int64_t)n_head_kv * HD;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
    for (int i = tid; i < FA_BQ * HD; i += FA_THREADS) fa_stage_q(i, q, qh, ql, b.r0, b.M, ratio, n_head, g, HD, scale);

    const int64_t wr0 = b.r0 + 16 * w;
    const bool wact = wr0 < b.M;
    const int64_t tw0 = wr0 / ratio, tw1 = (wr0 + 15 < b.M ? wr0 + 15 : b.M - 1) / ratio;
    const int64_t wlo = fa_lo(tw0, pos0, window), whi = pos0 + tw1;
    float O[HD / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < HD / 8; n++) O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.f;
    const uint16_t *qwh = qh + 16 * w * ld, *qwl = ql + 16 * w * ld;

    for (int64_t kt = b.kb; kt < b.ke; kt += FA_BK) {
        const int nk = (int)(b.ke - kt < FA_BK ? b.ke - kt : FA_BK);
        __syncthreads(); /* the previous tile is read (and Q staged) */
        for (int i = tid; i < FA_BK * HD / 4; i += FA_THREADS) {
            fa_stage_k(i, K, ks, kt, nk, kv_stride, g, HD);
            fa_stage_v(i, V, vt, kt, nk, kv_stride, g, HD);
        }
        __syncthreads();
        /* warp-uniform: rows past the end, or a tile wholly masked for the warp */
        if (!wact || kt > whi || kt + nk <= wlo) continue;
        float S[FA_BK / 8][4];
#pragma unroll
        for (int j = 0; j < FA_BK / 8; j++) S[j][0] = S[j][1] = S[j][2] = S[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t ah[4], al[4];
            fa_afrag(qwh, ld, kk, gq, tq, ah);
            fa_afrag(qwl, ld, kk, gq, tq, al);
#pragma unroll
            for (int j = 0; j < FA_BK / 8; j++) {
                const uint2 bk = fa_bfrag(ks, ld, j, kk, gq, tq);
                fa_mma(S[j], ah, bk);
                fa_mma(S[j], al, bk);
            }
        }
        float mx[2];
        fa_mask(S, wr0, gq, tq, kt, nk, b.M, ratio, pos0, window, softcap, mx);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        }
        fa_softmax<HD>(S, O, m, l, mx);
#pragma unroll
        for (int s = 0; s < FA_BK / 16; s++) {
            uint32_t ah[4], al[4];
            fa_pfrag(S, s, ah, al);
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                const uint2 bv = fa_bfrag(vt, ldv, n, s, gq, tq);
                fa_mma(O[n], ah, bv);
                fa_mma(O[n], al, bv);
            }
        }
    }
    if (!wact) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    fa_store<HD>(O, m, l, wr0, gq, tq, b.M, ratio, n_head, g, n_split, c, o, part);
}

/* The tensor-core kernel needs sm_80 code (mma.sync m16n8k16), which a build
 * for an older architecture lacks even on a newer GPU (arch.cu). */
TND_CU_UNIT_ARCH(attn)

/* TND_CUDA_ATTN=old: k_attn for every call (a way out without a rebuild) */
static bool attn_old_only() { return tnd_config_get()->cuda_attn_old; }

template <int HD>
static int attn_tc_launch(const float *q, const uint16_t *K, const uint16_t *V, float *o, int64_t n_tok, int n_head,
                          int n_head_kv, int64_t pos0, float scale, float softcap, int64_t window, void *scratch,
                          size_t scratch_size, cudaStream_t st) {
    /* > 48 KB of dynamic shared memory needs the opt-in, once per device */
    static unsigned attr_set = 0;
    const size_t smem = fa_smem_bytes(HD);
    int dev = 0;
    int e = (int)cudaGetDevice(&dev);
    if (e) return e;
    if (dev >= 32 || !(__atomic_load_n(&attr_set, __ATOMIC_RELAXED) & (1u << dev))) {
        e = (int)cudaFuncSetAttribute(k_attn_tc<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e) return e;
        if (dev < 32) __atomic_fetch_or(&attr_set, 1u << dev, __ATOMIC_RELAXED);
    }
    const int ratio = n_head / n_head_kv;
    const int64_t rtiles = (n_tok * ratio + FA_BQ - 1) / FA_BQ, n_kv_max = pos0 + n_tok;
    const size_t per_split_bytes = (size_t)n_tok * n_head * (HD + 2) * sizeof(float);
    int64_t per;
    const int64_t ns = fa_splits(n_tok, ratio, n_head_kv, n_kv_max, FA_TARGET_BLOCKS,
                                 (int64_t)(scratch_size / per_split_bytes), &per);
    float *part = (float *)scratch;
    dim3 grid((unsigned)ns, (unsigned)rtiles, (unsigned)n_head_kv);
    k_attn_tc<HD><<<grid, FA_THREADS, smem, st>>>(q, K, V, o, part, n_tok, n_head, n_head_kv, pos0, scale, softcap,
                                                  window, (int)ns, per);
    e = (int)cudaGetLastError();
    if (e || ns == 1) return e;
    k_attn_combine<<<(unsigned)(n_tok * n_head), HD >= 128 ? 128 : HD, 0, st>>>(part, o, HD, (int)ns);
    return (int)cudaGetLastError();
}

static int attn_splits(int64_t n_tok, int n_head_kv, int64_t n_kv_max, int64_t *per_split) {
    int64_t base = n_tok * n_head_kv;
    int64_t ns = (AT_TARGET_BLOCKS + base - 1) / base;
    int64_t chunks = (n_kv_max + AT_SPLIT_MIN - 1) / AT_SPLIT_MIN;
    if (ns > chunks) ns = chunks;
    if (ns < 1) ns = 1;
    int64_t per = (n_kv_max + ns - 1) / ns;
    per = (per + AT_SPLIT_MIN - 1) / AT_SPLIT_MIN * AT_SPLIT_MIN; /* k_attn takes any range; whole warps' worth */
    *per_split = per;
    return (int)((n_kv_max + per - 1) / per);
}

extern "C" size_t tnd_cu_attn_scratch(int64_t n_tok, int n_head, int head_dim, int64_t n_kv_max) {
    int64_t per;
    int ns = attn_splits(n_tok, 1, n_kv_max, &per); /* n_head_kv = 1 gives the most splits */
    return (size_t)n_tok * n_head * ns * (head_dim + 2) * sizeof(float);
}

extern "C" int tnd_cu_attn(const float *q, const uint16_t *K, const uint16_t *V, float *o, int64_t n_tok,
                           int n_head, int n_head_kv, int head_dim, int64_t pos0, const int32_t *pos,
                           int64_t kv_cap, int64_t slot_rows, int64_t n_slots, float scale, float softcap,
                           int64_t window,
                           void *scratch, size_t scratch_size, tnd_cu_stream stream) {
    if (!q || !K || !V || !o || !scratch || n_tok < 1 || n_tok > 65535 || n_head < 1 || n_head_kv < 1 ||
        n_head % n_head_kv || n_head / n_head_kv > AT_MAX_RATIO || head_dim < 1 || head_dim > 256 || pos0 < 0 ||
        n_head_kv > 65535 || (pos && kv_cap < (slot_rows > 0 ? 1 : n_tok)) || slot_rows < 0 ||
        (slot_rows > 0 && (!pos || kv_cap > slot_rows || n_slots < 1)))
        return cudaErrorInvalidValue;
    int ratio = n_head / n_head_kv;
    if (ratio * head_dim > AT_MAXO * AT_THREADS) return cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    /* 8-byte K/V loads (rows start at multiples of head_dim, a multiple of
     * 16) and 8-byte o / scratch stores */
    if (!pos && n_tok >= FA_MIN_TOK && !attn_old_only() && cu_unit_arch() >= 800 &&
        (((uintptr_t)K | (uintptr_t)V | (uintptr_t)o | (uintptr_t)scratch) & 7) == 0) {
        switch (head_dim) {
#define TC(HD)                                                                                                   \
    case HD:                                                                                                     \
        return attn_tc_launch<HD>(q, K, V, o, n_tok, n_head, n_head_kv, pos0, scale, softcap, window, scratch,    \
                                  scratch_size, st);
            TC(64) TC(80) TC(96) TC(128) TC(256)
#undef TC
        default:
            break; /* other head sizes: k_attn */
        }
    }
    int64_t n_kv_max = pos ? kv_cap : pos0 + n_tok, per;
    int ns = attn_splits(n_tok, n_head_kv, n_kv_max, &per);
    size_t need = (size_t)n_tok * n_head * ns * (head_dim + 2) * sizeof(float);
    if (scratch_size < need) return cudaErrorInvalidValue;
    dim3 grid((unsigned)ns, (unsigned)n_head_kv, (unsigned)n_tok);
    float *part = (float *)scratch;
    const __half *Kh = (const __half *)K, *Vh = (const __half *)V;
    const int U = (head_dim + 31) / 32;
    size_t smem = (size_t)ratio * (head_dim + AT_C + 3) * sizeof(float);
    if (ratio * U <= 32 && !attn_old_only()) { /* the warp form (k_attn) */
        smem += (size_t)(AT_THREADS / 32) * ratio * head_dim * sizeof(float);
        switch (U) {
#define AW(N)                                                                                                    \
    case N:                                                                                                      \
        k_attn<N><<<grid, AT_THREADS, smem, st>>>(q, Kh, Vh, part, o, n_head, n_head_kv, head_dim, pos0, pos,    \
                                                  slot_rows, n_slots, scale, softcap, window, ns, per);          \
        break;
            AW(1) AW(2) AW(3) AW(4) AW(5) AW(6) AW(7) AW(8)
#undef AW
        }
    } else {
        k_attn<0><<<grid, AT_THREADS, smem, st>>>(q, Kh, Vh, part, o, n_head, n_head_kv, head_dim, pos0, pos,
                                                  slot_rows, n_slots, scale, softcap, window, ns, per);
    }
    int e = (int)cudaGetLastError();
    if (e || ns == 1) return e; /* one key range: k_attn wrote o */
    int threads = head_dim >= 128 ? 128 : (head_dim + 31) / 32 * 32;
    k_attn_combine<<<(unsigned)(n_tok * n_head), threads, 0, st>>>(part, o, head_dim, ns);
    return (int)cudaGetLastError();
}
