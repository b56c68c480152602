/* Per-lane pieces of the tensor-core prefill attention (attn.cu, k_attn_tc),
 * host+device so tests/test_cuda_attn_tc.cu can replay a whole block on a
 * machine without a GPU, with an emulated mma.sync.
 *
 * Rows of a block are (query token, q head) pairs of one kv head's GQA
 * group, token-major: row r = t * ratio + hh, so K/V tiles are shared by all
 * heads of the group as well as by the block's tokens. A block has
 * FA_BQ = 64 rows, a warp 16 (one m16 tile); keys come in tiles of FA_BK = 64.
 *
 * Precision: mma.sync takes f16, the CPU reference and the device test ask
 * for ~1e-5 relative. K and V are f16 already; q (f32) and the probabilities
 * p are split into hi = f16(x) and lo = f16(x - hi), and both halves go
 * through the mma (K and V exact, f32 accumulation): ~22 mantissa bits.
 *
 * Fragment layout of m16n8k16 (PTX): lane = 4g + t; A: a0 = row g, k 2t,2t+1;
 * a1 = row g+8, same k; a2, a3 = the same rows, k + 8. B: b.x = k 2t,2t+1,
 * column g; b.y = k + 8. C/D: c0,c1 = row g, columns 2t,2t+1; c2,c3 = row
 * g+8. Scores S = Q K^T: A = Q (row-major in shared memory, [row][dim]), B
 * column n = key n, read from K rows [key][dim]. O += P V: A = P straight
 * from the S accumulators (n-tiles 2s, 2s+1 make k-step s), B column n =
 * dim n, read from V transposed in shared memory ([dim][key]).
 * Shared rows are padded by 8 halves (4 words), so the 8 g's x 4 t's of a
 * fragment load hit 32 different banks for the head dims used (64..256). */
#ifndef TND_CUDA_ATTN_TC_CUH
#define TND_CUDA_ATTN_TC_CUH

#include <math.h>

#include "cuda/common.cuh"

#define FA_BQ 64
#define FA_BK 64
#define FA_THREADS 128
#define FA_PAD 8
#define FA_LOG2E 1.4426950408889634f

/* shared-memory layout (halves): Qhi, Qlo [FA_BQ][hd+PAD], K [FA_BK][hd+PAD], V^T [hd][FA_BK+PAD] */
TND_HD int fa_ldq(int hd) { return hd + FA_PAD; }
TND_HD int fa_ldv() { return FA_BK + FA_PAD; }
TND_HD size_t fa_smem_bytes(int hd) {
    return ((size_t)3 * FA_BQ * fa_ldq(hd) + (size_t)hd * fa_ldv()) * sizeof(uint16_t);
}

TND_HD uint16_t fa_f2h(float x) { return __half_as_ushort(__float2half_rn(x)); }
TND_HD float fa_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/* two halves at an even index: one 32-bit shared load on the device */
TND_HD uint32_t fa_word(const uint16_t *p) {
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 16);
#endif
}

/* Block geometry: which rows and which keys a block (split c of n_split,
 * row tile rt) works on. Keys [kb, ke) cover every key any of its rows
 * sees, within the split's range [c*per, (c+1)*per). */
struct fa_geom {
    int64_t r0, M;    /* first row, rows of the kv head (n_tok * ratio) */
    int64_t kb, ke;   /* key range, may be empty */
};
TND_HD int64_t fa_lo(int64_t t, int64_t pos0, int64_t window) {
    const int64_t n_vis = pos0 + t + 1;
    return window > 0 && n_vis - window > 0 ? n_vis - window : 0;
}
TND_HD fa_geom fa_block(int64_t rt, int c, int64_t per, int64_t n_tok, int ratio, int64_t pos0, int64_t window) {
    fa_geom b;
    b.M = n_tok * ratio;
    b.r0 = rt * FA_BQ;
    const int64_t rl = b.r0 + FA_BQ - 1 < b.M - 1 ? b.r0 + FA_BQ - 1 : b.M - 1;
    const int64_t t0 = b.r0 / ratio, t1 = rl / ratio;
    const int64_t lo = fa_lo(t0, pos0, window), hi = pos0 + t1 + 1;
    const int64_t s0 = (int64_t)c * per, s1 = s0 + per;
    b.kb = lo > s0 ? lo : s0;
    b.ke = hi < s1 ? hi : s1;
    return b;
}

/* Key splits: only when the row tiles leave the GPU idle (fewer than
 * `target` blocks), in ranges of 2 tiles or more (each block stages its Q
 * again), at most max_splits (what the scratch holds; 1 needs none).
 * Returns the split count; *per: keys per split, whole tiles. */
TND_HD int64_t fa_splits(int64_t n_tok, int ratio, int n_head_kv, int64_t n_kv_max, int64_t target, int64_t max_splits,
                         int64_t *per) {
    const int64_t base = (n_tok * ratio + FA_BQ - 1) / FA_BQ * n_head_kv;
    int64_t ns = (target + base - 1) / base;
    const int64_t pairs = (n_kv_max + 2 * FA_BK - 1) / (2 * FA_BK);
    if (ns > pairs) ns = pairs;
    if (ns > max_splits) ns = max_splits;
    if (ns < 1) ns = 1;
    int64_t p = (n_kv_max + ns - 1) / ns;
    p = (p + FA_BK - 1) / FA_BK * FA_BK;
    *per = p;
    return (n_kv_max + p - 1) / p;
}

/* Q staging, element i of FA_BQ * hd: q * scale split into hi and lo; rows
 * past M are zero. q row r = token r / ratio, head g * ratio + r % ratio. */
TND_HD void fa_stage_q(int i, const float *q, uint16_t *qh, uint16_t *ql, int64_t r0, int64_t M, int ratio, int n_head,
                       int g, int hd, float scale) {
    const int lr = i / hd, d = i - lr * hd;
    const int64_t r = r0 + lr;
    float v = 0.f;
    if (r < M) {
        const int64_t t = r / ratio;
        const int hh = (int)(r - t * ratio);
        v = q[(t * n_head + (int64_t)g * ratio + hh) * hd + d] * scale;
    }
    const uint16_t h = fa_f2h(v);
    qh[lr * fa_ldq(hd) + d] = h;
    ql[lr * fa_ldq(hd) + d] = fa_f2h(v - fa_h2f(h));
}

/* K tile staging, 4-dim chunk i of FA_BK * hd/4 (chunks of a row adjacent:
 * coalesced reads): keys past nk are zero (rows past the last query may
 * hold anything, NaN included). */
TND_HD void fa_stage_k(int i, const uint16_t *K, uint16_t *ks, int64_t kt, int nk, int64_t kv_stride, int g, int hd) {
    const int nch = hd / 4, key = i / nch, ch = i - key * nch;
    uint16_t *dst = ks + key * fa_ldq(hd) + 4 * ch;
    if (key < nk) {
        const uint16_t *src = K + (kt + key) * kv_stride + (int64_t)g * hd + 4 * ch;
        *(uint2 *)dst = *(const uint2 *)src;
    } else {
        *(uint2 *)dst = make_uint2(0u, 0u);
    }
}

/* V tile staging transposed, chunk i of FA_BK * hd/4 (keys adjacent, so
 * neighbouring lanes store neighbouring halves of a V^T row). */
TND_HD void fa_stage_v(int i, const uint16_t *V, uint16_t *vt, int64_t kt, int nk, int64_t kv_stride, int g, int hd) {
    const int key = i % FA_BK, ch = i / FA_BK;
    uint2 w = make_uint2(0u, 0u);
    if (key < nk) w = *(const uint2 *)(V + (kt + key) * kv_stride + (int64_t)g * hd + 4 * ch);
    uint16_t *dst = vt + (4 * ch) * fa_ldv() + key;
    dst[0] = (uint16_t)(w.x & 0xffffu);
    dst[fa_ldv()] = (uint16_t)(w.x >> 16);
    dst[2 * fa_ldv()] = (uint16_t)(w.y & 0xffffu);
    dst[3 * fa_ldv()] = (uint16_t)(w.y >> 16);
}

/* A fragment of k-step ks from a warp's 16 rows (qw: its first row) */
TND_HD void fa_afrag(const uint16_t *qw, int ld, int ks, int g, int t, uint32_t (&a)[4]) {
    const uint16_t *p = qw + g * ld + 16 * ks + 2 * t;
    a[0] = fa_word(p);
    a[1] = fa_word(p + 8 * ld);
    a[2] = fa_word(p + 8);
    a[3] = fa_word(p + 8 * ld + 8);
}
/* B fragment of k-step ks, n-tile j from a row-major [n][k] array */
TND_HD uint2 fa_bfrag(const uint16_t *b, int ld, int j, int ks, int g, int t) {
    const uint16_t *p = b + (8 * j + g) * ld + 16 * ks + 2 * t;
    return make_uint2(fa_word(p), fa_word(p + 8));
}

/* Scores of one tile, in place: mask (key past the tile, past the row's
 * position or before its window), soft-cap, to log2 units; returns this
 * lane's max of its two rows (row g: mx[0], row g+8: mx[1]). wr0: the
 * warp's first row. */
TND_HD void fa_mask(float (&S)[FA_BK / 8][4], int64_t wr0, int g, int t, int64_t kt, int nk, int64_t M, int ratio,
                    int64_t pos0, int64_t window, float softcap, float (&mx)[2]) {
    mx[0] = mx[1] = -INFINITY;
    TND_UNROLL
    for (int h = 0; h < 2; h++) {
        const int64_t r = wr0 + g + 8 * h;
        const int64_t tk = (r < M ? r : M - 1) / ratio; /* rows past M: any finite values, never written */
        const int64_t lo = fa_lo(tk, pos0, window), hi = pos0 + tk;
        TND_UNROLL
        for (int j = 0; j < FA_BK / 8; j++) {
            TND_UNROLL
            for (int e = 0; e < 2; e++) {
                const int kl = 8 * j + 2 * t + e;
                const int64_t key = kt + kl;
                float s = S[j][2 * h + e];
                if (kl >= nk || key > hi || key < lo) {
                    s = -INFINITY;
                } else {
                    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
                    s *= FA_LOG2E;
                }
                S[j][2 * h + e] = s;
                mx[h] = fmaxf(mx[h], s);
            }
        }
    }
}

/* Online softmax step with the rows' tile max (mx, reduced over the 4
 * lanes of a row): S becomes p, O and the lane's partial sums l rescaled. */
template <int HD>
TND_HD void fa_softmax(float (&S)[FA_BK / 8][4], float (&O)[HD / 8][4], float (&m)[2], float (&l)[2],
                       const float (&mx)[2]) {
    float base[2], corr[2];
    TND_UNROLL
    for (int h = 0; h < 2; h++) {
        const float mn = fmaxf(m[h], mx[h]);
        base[h] = mn == -INFINITY ? 0.f : mn; /* a row with nothing seen yet: all p = 0, no NaN */
        corr[h] = exp2f(m[h] - base[h]);
        m[h] = mn;
        l[h] *= corr[h];
    }
    TND_UNROLL
    for (int j = 0; j < FA_BK / 8; j++) {
        TND_UNROLL
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(S[j][e] - base[e >> 1]);
            S[j][e] = p;
            l[e >> 1] += p;
        }
    }
    TND_UNROLL
    for (int n = 0; n < HD / 8; n++) {
        TND_UNROLL
        for (int e = 0; e < 4; e++) O[n][e] *= corr[e >> 1];
    }
}

/* A fragments (hi, lo) of P for k-step s (keys 16s..16s+15 of the tile) */
TND_HD void fa_pfrag(const float (&S)[FA_BK / 8][4], int s, uint32_t (&ah)[4], uint32_t (&al)[4]) {
    TND_UNROLL
    for (int i = 0; i < 4; i++) {
        /* a0: row g of n-tile 2s, a1: row g+8 of it, a2, a3: n-tile 2s+1 */
        const int j = 2 * s + (i >> 1), e = 2 * (i & 1);
        const float x0 = S[j][e], x1 = S[j][e + 1];
        const uint16_t h0 = fa_f2h(x0), h1 = fa_f2h(x1);
        ah[i] = (uint32_t)h0 | ((uint32_t)h1 << 16);
        al[i] = (uint32_t)fa_f2h(x0 - fa_h2f(h0)) | ((uint32_t)fa_f2h(x1 - fa_h2f(h1)) << 16);
    }
}

/* Output of a lane: with one split, o = O / l (l summed over the row's 4
 * lanes); with several, the partial (m in natural-log units, l, O) in the
 * layout k_attn_combine reads: part[((t*n_head + h)*n_split + c)*(hd+2)]. */
template <int HD>
TND_HD void fa_store(const float (&O)[HD / 8][4], const float (&m)[2], const float (&l)[2], int64_t wr0, int g, int t,
                     int64_t M, int ratio, int n_head, int gk, int n_split, int c, float *o, float *part) {
    TND_UNROLL
    for (int h = 0; h < 2; h++) {
        const int64_t r = wr0 + g + 8 * h;
        if (r >= M) continue;
        const int64_t tk = r / ratio;
        const int64_t head = (int64_t)gk * ratio + (r - tk * ratio);
        float *dst;
        float inv = 1.f;
        if (n_split == 1) {
            dst = o + (tk * n_head + head) * HD;
            inv = 1.f / l[h];
        } else {
            float *b = part + ((tk * n_head + head) * n_split + c) * (HD + 2);
            if (t == 0) {
                b[0] = m[h] * 0.69314718055994531f; /* log2 units to natural: k_attn_combine uses expf */
                b[1] = l[h];
            }
            dst = b + 2;
        }
        TND_UNROLL
        for (int n = 0; n < HD / 8; n++)
            *(float2 *)(dst + 8 * n + 2 * t) = make_float2(O[n][2 * h] * inv, O[n][2 * h + 1] * inv);
    }
}

#endif
