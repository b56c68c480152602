/* The tensor-core prefill attention of attn.cu (k_attn_tc) replayed on the
 * host (runs in CI without a GPU): the block geometry, key splits, shared
 * staging of Q (hi/lo), K and V^T, every lane's fragments, the masking and
 * online softmax and the output stores all come from the host+device
 * helpers in cuda/attn_tc.cuh; the warp-collective parts (mma.sync by the
 * PTX m16n8k16 layout, the 4-lane shuffles of a row) are emulated here, in
 * the kernel's order. Split outputs are merged as k_attn_combine does.
 * Checked against a naive double-precision attention on odd shapes (ratio
 * 1..16, head_dim 64..256, pos0 > 0, soft-capping, sliding window, rows past
 * the last query poisoned with NaN) with the device test's tolerance
 * (1e-4 * max |V|), and a misplaced fragment or mask is an O(0.1) error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "attn_ref.h"
#include "check.h"
#include "cuda/attn_tc.cuh"
#include "quant/quant.h"


/* one warp's lane state */
template <int HD> struct lane_st {
    float O[HD / 8][4], S[FA_BK / 8][4], m[2], l[2];
};

static double hf(uint32_t w, int hi) { return (double)fa_h2f((uint16_t)(hi ? w >> 16 : w & 0xffff)); }

/* D (per lane c[4]) += A (per lane a[4]) x B (per lane b) by the PTX layout */
static void mma_emu(float (*const c[32])[4], const uint32_t a[32][4], const uint2 b[32]) {
    double A[16][16], B[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 8; i++) A[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = hf(a[lane][i >> 1], i & 1);
        for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + 8 * (i >> 1)][g] = hf(i < 2 ? b[lane].x : b[lane].y, i & 1);
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            double s = 0;
            for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
            (*c[lane])[i] = (float)((double)(*c[lane])[i] + s);
        }
    }
}

template <int HD>
static void run_block(const float *q, const uint16_t *K, const uint16_t *V, float *o, float *part, int64_t n_tok,
                      int n_head, int n_head_kv, int64_t pos0, float scale, float softcap, int64_t window, int n_split,
                      int64_t per, int c, int64_t rt, int g) {
    const int ld = HD + FA_PAD, ldv = FA_BK + FA_PAD;
    std::vector<uint16_t> sm(fa_smem_bytes(HD) / 2, 0x7e00); /* NaN: any read of an unstaged half shows */
    uint16_t *qh = sm.data(), *ql = qh + FA_BQ * ld, *ks = ql + FA_BQ * ld, *vt = ks + FA_BK * ld;
    const int ratio = n_head / n_head_kv;
    const fa_geom b = fa_block(rt, c, per, n_tok, ratio, pos0, window);
    const int64_t kv_stride = (int64_t)n_head_kv * HD;
    for (int i = 0; i < FA_BQ * HD; i++) fa_stage_q(i, q, qh, ql, b.r0, b.M, ratio, n_head, g, HD, scale);
    static lane_st<HD> L[4][32];
    for (int w = 0; w < 4; w++)
        for (int lane = 0; lane < 32; lane++) {
            lane_st<HD> &s = L[w][lane];
            memset(s.O, 0, sizeof s.O);
            s.m[0] = s.m[1] = -INFINITY;
            s.l[0] = s.l[1] = 0.f;
        }
    for (int64_t kt = b.kb; kt < b.ke; kt += FA_BK) {
        const int nk = (int)(b.ke - kt < FA_BK ? b.ke - kt : FA_BK);
        for (int i = 0; i < FA_BK * HD / 4; i++) {
            fa_stage_k(i, K, ks, kt, nk, kv_stride, g, HD);
            fa_stage_v(i, V, vt, kt, nk, kv_stride, g, HD);
        }
        for (int w = 0; w < 4; w++) {
            const int64_t wr0 = b.r0 + 16 * w;
            if (wr0 >= b.M) continue;
            const int64_t tw0 = wr0 / ratio, tw1 = (wr0 + 15 < b.M ? wr0 + 15 : b.M - 1) / ratio;
            if (kt > pos0 + tw1 || kt + nk <= fa_lo(tw0, pos0, window)) continue;
            const uint16_t *qwh = qh + 16 * w * ld, *qwl = ql + 16 * w * ld;
            for (int lane = 0; lane < 32; lane++) memset(L[w][lane].S, 0, sizeof L[w][lane].S);
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t ah[32][4], al[32][4];
                for (int lane = 0; lane < 32; lane++) {
                    fa_afrag(qwh, ld, kk, lane >> 2, lane & 3, ah[lane]);
                    fa_afrag(qwl, ld, kk, lane >> 2, lane & 3, al[lane]);
                }
                for (int j = 0; j < FA_BK / 8; j++) {
                    uint2 bk[32];
                    float (*cp[32])[4];
                    for (int lane = 0; lane < 32; lane++) {
                        bk[lane] = fa_bfrag(ks, ld, j, kk, lane >> 2, lane & 3);
                        cp[lane] = &L[w][lane].S[j];
                    }
                    mma_emu(cp, ah, bk);
                    mma_emu(cp, al, bk);
                }
            }
            float mx[32][2];
            for (int lane = 0; lane < 32; lane++)
                fa_mask(L[w][lane].S, wr0, lane >> 2, lane & 3, kt, nk, b.M, ratio, pos0, window, softcap, mx[lane]);
            for (int lane = 0; lane < 32; lane += 4) /* the row's 4 lanes */
                for (int h = 0; h < 2; h++) {
                    float v = fmaxf(fmaxf(mx[lane][h], mx[lane + 1][h]), fmaxf(mx[lane + 2][h], mx[lane + 3][h]));
                    for (int u = 0; u < 4; u++) mx[lane + u][h] = v;
                }
            for (int lane = 0; lane < 32; lane++) fa_softmax<HD>(L[w][lane].S, L[w][lane].O, L[w][lane].m, L[w][lane].l, mx[lane]);
            for (int s = 0; s < FA_BK / 16; s++) {
                uint32_t ah[32][4], al[32][4];
                for (int lane = 0; lane < 32; lane++) fa_pfrag(L[w][lane].S, s, ah[lane], al[lane]);
                for (int n = 0; n < HD / 8; n++) {
                    uint2 bv[32];
                    float (*cp[32])[4];
                    for (int lane = 0; lane < 32; lane++) {
                        bv[lane] = fa_bfrag(vt, ldv, n, s, lane >> 2, lane & 3);
                        cp[lane] = &L[w][lane].O[n];
                    }
                    mma_emu(cp, ah, bv);
                    mma_emu(cp, al, bv);
                }
            }
        }
    }
    for (int w = 0; w < 4; w++) {
        const int64_t wr0 = b.r0 + 16 * w;
        if (wr0 >= b.M) continue;
        for (int lane = 0; lane < 32; lane += 4)
            for (int h = 0; h < 2; h++) {
                float v = L[w][lane].l[h] + L[w][lane + 1].l[h] + L[w][lane + 2].l[h] + L[w][lane + 3].l[h];
                for (int u = 0; u < 4; u++) L[w][lane + u].l[h] = v;
            }
        for (int lane = 0; lane < 32; lane++)
            fa_store<HD>(L[w][lane].O, L[w][lane].m, L[w][lane].l, wr0, lane >> 2, lane & 3, b.M, ratio, n_head, g,
                         n_split, c, o, part);
    }
}

template <int HD>
static void check(int64_t n_tok, int n_head, int n_kv, int64_t pos0, float softcap, int window, int64_t max_splits) {
    const int hd = HD;
    const int64_t n_ctx = pos0 + n_tok + 3, row = (int64_t)n_kv * hd, nq = n_tok * n_head * hd;
    std::vector<float> q(nq), o(nq, NAN);
    std::vector<uint16_t> K(n_ctx * row), V(n_ctx * row);
    for (auto &x : q) x = tc_unif(-1, 1);
    for (int64_t i = 0; i < n_ctx * row; i++) {
        const bool dead = i >= (pos0 + n_tok) * row; /* never to be read */
        K[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
        V[i] = dead ? 0x7e00 : tnd_fp32_to_fp16(tc_unif(-1, 1));
    }
    const float scale = 1.0f / sqrtf((float)hd);
    const int ratio = n_head / n_kv;
    int64_t per;
    const int64_t ns = fa_splits(n_tok, ratio, n_kv, pos0 + n_tok, 264, max_splits, &per);
    std::vector<float> part(ns > 1 ? (size_t)(n_tok * n_head * ns * (hd + 2)) : 1, NAN);
    const int64_t rtiles = (n_tok * ratio + FA_BQ - 1) / FA_BQ;
    for (int c = 0; c < ns; c++)
        for (int64_t rt = 0; rt < rtiles; rt++)
            for (int g = 0; g < n_kv; g++)
                run_block<HD>(q.data(), K.data(), V.data(), o.data(), part.data(), n_tok, n_head, n_kv, pos0, scale,
                              softcap, window, (int)ns, per, c, rt, g);
    if (ns > 1) /* as k_attn_combine */
        for (int64_t th = 0; th < n_tok * n_head; th++) {
            const float *p = part.data() + th * ns * (hd + 2);
            float M = -INFINITY, Ls = 0.f;
            for (int c = 0; c < ns; c++) M = fmaxf(M, p[c * (hd + 2)]);
            for (int c = 0; c < ns; c++) Ls += p[c * (hd + 2) + 1] * expf(p[c * (hd + 2)] - M);
            for (int d = 0; d < hd; d++) {
                float a = 0.f;
                for (int c = 0; c < ns; c++) a = fmaf(p[c * (hd + 2) + 2 + d], expf(p[c * (hd + 2)] - M), a);
                o[th * hd + d] = a / Ls;
            }
        }
    double vmax = 0, worst = 0;
    for (int64_t i = 0; i < (pos0 + n_tok) * row; i++) vmax = fmax(vmax, fabs(tnd_fp16_to_fp32(V[i])));
    std::vector<double> p(pos0 + n_tok), r((size_t)n_head * hd);
    int64_t bad = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        tc_ref_attn_query(q.data() + t * n_head * hd, K.data(), V.data(), row, n_head, n_kv, hd, pos0 + t,
                          scale, softcap, window, p.data(), r.data());
        for (int h = 0; h < n_head; h++)
            for (int d = 0; d < hd; d++) {
                const double a = r[(size_t)h * hd + d];
                const double err = fabs((double)o[(t * n_head + h) * hd + d] - a) / (1e-4 * vmax);
                if (!(err <= 1)) {
                    if (!bad) printf("  first bad: t=%lld head=%d dim=%d got %.7g want %.7g\n", (long long)t, h, d,
                                     o[(t * n_head + h) * hd + d], a);
                    bad++;
                }
                if (err > worst) worst = err;
            }
        }
    tc_count(bad == 0);
    printf("%s attn_tc n_tok=%lld heads=%d/%d hd=%d pos0=%lld softcap=%g window=%d splits=%lld: %lld bad, worst err/tol %.4f\n",
           bad ? "FAIL" : "ok  ", (long long)n_tok, n_head, n_kv, hd, (long long)pos0, softcap, window, (long long)ns,
           (long long)bad, worst);
}

int main(void) {
    tc_rng = 0x9e3779b97f4a7c15ull;
    const int64_t any = 1 << 20;
    check<128>(17, 8, 2, 5, 0, 0, any);      /* ratio 4, one tile */
    check<80>(100, 12, 3, 131, 0, 0, any);   /* head_dim 80, pos0 > 0, key splits */
    check<128>(64, 12, 4, 0, 0, 0, any);     /* prefill from empty, ratio 3 */
    check<256>(33, 16, 1, 50, 0, 0, any);    /* ratio 16, head_dim 256 */
    check<64>(40, 6, 2, 200, 30.0f, 64, any); /* soft-cap and a window crossing tiles */
    check<128>(16, 40, 8, 300, 0, 0, any);   /* 14B-like heads, short chunk, many splits */
    check<96>(70, 5, 5, 1000, 0, 100, any);  /* ratio 1, window, long context */
    check<128>(200, 32, 4, 37, 0, 0, 1);     /* 30B-A3B-like heads, no scratch: one split */
    check<128>(150, 8, 1, 170, 0, 0, 3);     /* splits capped by the scratch */
    return tc_summary();
}
