/* The tensor-core decodes of matvec_mma.cu replayed on the host (runs in CI
 * without a GPU): every lane's fragments come from the same host+device
 * helpers the kernels use, an emulated mma.sync places them by the PTX
 * fragment layout and sums exactly.
 *
 * f16 (k_mvh_q4k, k_mvh_q6k, k_mvh_q8: mvh_*_sb, mvh_*_slot for x):
 * m16n8k16 (A: rows g, g+8, k 2t.., 2t+8..; B: k 2t.., 2t+8.., column g;
 * D: rows g, g+8, columns 2t, 2t+1), tokens 0..7 as the columns. Checked
 * against tnd_ref_dot_f32 with the f16 path's tolerance (2e-3 of sum |w x|)
 * and against the product of the weights and x rounded to f16 the kernel's
 * way (1e-9 relative: catches any misplaced fragment, which the loose
 * tolerance could miss).
 *
 * int8 (k_mvi_q4k: mvi_quant8, mvi_q4k_sb, mvi_q4k_value): m16n8k32 u8 x
 * s8 (A: rows g, g+8, k 4t.., 16+4t..; B: k 4t.., 16+4t.., column g), x's
 * byte planes H, L of token k as columns 2k, 2k+1. Checked against the
 * reference within the grid's rounding bound (half a step per value), and
 * against the product with x on the grid in double (1e-5 of sum |w x|: the
 * f32 combination of the exact integer sums), with an outlier in x too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/common.cuh"
#include "quant/quant.h"

TND_HD double hf(uint32_t bits) { return (double)__half2float(__ushort_as_half((unsigned short)(bits & 0xffff))); }

/* per mma of a super-block: A[16][16], B[16][8] gathered from all lanes */
static double A[16][16][16], Bm[16][16][8];

/* lane (g, t)'s B pair of mma m (token g's slot; zeros past n_tok) */
struct xfetch {
    const uint2 *xs;
    int g, t, n_tok, xs_tok, sb;
    TND_HD uint2 operator()(int m) const {
        return g < n_tok ? xs[g * xs_tok + sb * 64 + m * 4 + t] : make_uint2(0, 0);
    }
};
/* places lane (g, t)'s fragments of the next mma by the PTX layout */
struct mma_emu {
    double (*a)[16][16], (*b)[16][8];
    int g, t, mi;
    TND_HD void operator()(int, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx) {
        const uint32_t r[4] = {a0, a1, a2, a3};
        for (int i = 0; i < 8; i++) {
            const int row = g + 8 * ((i >> 1) & 1), k = 2 * t + (i & 1) + 8 * (i >> 2);
            a[mi][row][k] = hf(r[i >> 1] >> (16 * (i & 1)));
        }
        for (int i = 0; i < 4; i++) {
            const int k = 2 * t + (i & 1) + 8 * (i >> 1);
            b[mi][k][g] = hf((i < 2 ? bx.x : bx.y) >> (16 * (i & 1)));
        }
        mi++;
    }
};

/* f16 weight element i of a row as the kernel computes it */
static double emu_weight(int ty, const uint8_t *row, int i) {
    const int s = (i % 256) / 32, e = i % 32;
    if (ty == TND_TYPE_Q4_K) {
        const uint8_t *b = row + (i / 256) * 144;
        float scf, mf;
        kscale_min(b + 4, s, &scf, &mf);
        uint16_t dh, mh;
        memcpy(&dh, b, 2);
        memcpy(&mh, b + 2, 2);
        const double sh = (double)__half2float(__double2half(h2f(dh) * (double)scf));
        const double mh2 = (double)__half2float(__double2half(-(double)h2f(mh) * mf));
        const int q = (b[16 + 32 * (s / 2) + e] >> (4 * (s & 1))) & 15;
        return (double)__half2float(__double2half(sh * q + mh2));
    }
    if (ty == TND_TYPE_Q8_0) {
        const uint8_t *b = row + (i / 32) * 34;
        uint16_t dh;
        memcpy(&dh, b, 2);
        return (double)__half2float(__double2half(h2f(dh) * (double)(int8_t)b[2 + i % 32]));
    }
    const uint8_t *b = row + (i / 256) * 210;
    const int n = s / 4, j = s % 4;
    uint16_t dh;
    memcpy(&dh, b + 208, 2);
    const double sh = (double)__half2float(__double2half(h2f(dh) * (double)(int8_t)b[192 + 2 * s + e / 16]));
    const int q = ((b[64 * n + 32 * (j & 1) + e] >> (4 * (j >= 2))) & 15) | (((b[128 + 32 * n + e] >> (2 * j)) & 3) << 4);
    return (double)__half2float(__double2half(sh * (q - 32)));
}

static void check_tile(int ty, int nsb, int n_tok) {
    const int sbb = ty == TND_TYPE_Q4_K ? 144 : ty == TND_TYPE_Q6_K ? 210 : 272;
    const size_t rb = (size_t)nsb * sbb;
    uint8_t *w = (uint8_t *)malloc(rb * 16);
    for (size_t i = 0; i < rb * 16; i++) w[i] = (uint8_t)(tc_xorshift() >> 24);
    for (int r = 0; r < 16; r++)
        for (int b = 0; b < nsb; b++) {
            uint8_t *p = w + r * rb + b * sbb;
            uint16_t d = tnd_fp32_to_fp16(tc_unif(0.0002f, 0.002f)), m = tnd_fp32_to_fp16(tc_unif(0.00005f, 0.001f));
            if (ty == TND_TYPE_Q8_0)
                for (int k = 0; k < 8; k++) {
                    uint16_t dk = tnd_fp32_to_fp16(tc_unif(0.002f, 0.02f) * (tc_xorshift() & 1 ? 1 : -1));
                    memcpy(p + 34 * k, &dk, 2);
                }
            else memcpy(p + (ty == TND_TYPE_Q4_K ? 0 : 208), &d, 2);
            if (ty == TND_TYPE_Q4_K) memcpy(p + 2, &m, 2);
        }
    const int n_in = nsb * 256;
    float *x = (float *)malloc(sizeof(float) * n_in * n_tok);
    for (int i = 0; i < n_in * n_tok; i++) x[i] = tc_unif(-1, 1);
    /* x staged as the kernel does: token k's super-block sb at k*xs_tok + sb*64 */
    const int xs_tok = nsb * 64;
    uint2 *xs = (uint2 *)calloc((size_t)xs_tok * n_tok, sizeof(uint2));
    for (int k = 0; k < n_tok; k++)
        for (int q = 0; q < n_in / 4; q++) {
            const float *v = x + (size_t)k * n_in + 4 * q;
            const int sb = q >> 6, o = (q & 63) * 4;
            xs[k * xs_tok + sb * 64 + (ty == TND_TYPE_Q4_K ? mvh_q4k_slot(o) : ty == TND_TYPE_Q6_K ? mvh_q6k_slot(o) : mvh_q8_slot(o))] = make_uint2(f2h2u(v[0], v[2]), f2h2u(v[1], v[3]));
        }
    double D[16][8] = {{0}};
    for (int sb = 0; sb < nsb; sb++) {
        /* per mma: A[16][16], B[16][8] gathered from all lanes */
        for (int lane = 0; lane < 32; lane++) {
            const int g = lane >> 2, t = lane & 3;
            xfetch xf = {xs, g, t, n_tok, xs_tok, sb};
            mma_emu me = {A, Bm, g, t, 0};
            const uint8_t *b0 = w + g * rb + sb * sbb, *b1 = w + (g + 8) * rb + sb * sbb;
            if (ty == TND_TYPE_Q4_K) {
                uint32_t h0[4], h1[4], q0[8], q1[8];
                memcpy(h0, b0, 16);
                memcpy(h1, b1, 16);
                memcpy(q0, b0 + 16 + 16 * t, 16);
                memcpy(q0 + 4, b0 + 80 + 16 * t, 16);
                memcpy(q1, b1 + 16 + 16 * t, 16);
                memcpy(q1 + 4, b1 + 80 + 16 * t, 16);
                mvh_q4k_sb(h0, h1, q0, q1, t, xf, me);
            } else if (ty == TND_TYPE_Q8_0) {
                uint32_t qa[2][8], qb[2][8], da[2], db[2];
                for (int r = 0; r < 2; r++) {
                    const uint8_t *b = (r ? b1 : b0) + 68 * t;
                    uint16_t h;
                    memcpy(&h, b, 2), da[r] = h;
                    memcpy(&h, b + 34, 2), db[r] = h;
                    memcpy(qa[r], b + 2, 32);
                    memcpy(qb[r], b + 36, 32);
                }
                mvh_q8_sb(qa[0], qb[0], da[0], db[0], qa[1], qb[1], da[1], db[1], xf, me);
            } else {
                uint32_t ql[2][8], qh[2][4], sc[2][4], d[2];
                for (int r = 0; r < 2; r++) {
                    const uint8_t *b = r ? b1 : b0;
                    for (int p = 0; p < 4; p++) memcpy(ql[r] + 2 * p, b + 32 * p + 8 * t, 8);
                    for (int n = 0; n < 2; n++) memcpy(qh[r] + 2 * n, b + 128 + 32 * n + 8 * t, 8);
                    memcpy(sc[r], b + 192, 16);
                    uint16_t dh;
                    memcpy(&dh, b + 208, 2);
                    d[r] = dh;
                }
                mvh_q6k_sb(ql[0], qh[0], sc[0], d[0], ql[1], qh[1], sc[1], d[1], t, xf, me);
            }
        }
        for (int m = 0; m < 16; m++)
            for (int r = 0; r < 16; r++)
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 16; k++) D[r][c] += A[m][r][k] * Bm[m][k][c];
    }
    /* references: exact (quant/) and "kernel arithmetic" (f16 scale, min,
     * weight and x, from the scalar decode) */
    float *wf = (float *)malloc(sizeof(float) * n_in);
    for (int r = 0; r < 16; r++) {
        const uint8_t *row = w + r * rb;
        tnd_type_traits_get((tnd_type)ty)->to_float(row, wf, n_in);
        for (int k = 0; k < 8; k++) {
            double got = D[r][k];
            if (k >= n_tok) {
                if (!tc_count(got == 0)) {
                    printf("FAIL nsb=%d: column %d (no token) = %g\n", nsb, k, got);
                }
                continue;
            }
            const float *xt = x + (size_t)k * n_in;
            double ref = tnd_ref_dot_f32((tnd_type)ty, n_in, row, xt), sc = 0, emu = 0;
            for (int i = 0; i < n_in; i++) sc += fabs((double)wf[i] * xt[i]);
            for (int i = 0; i < n_in; i++) {
                const double wv = emu_weight(ty, row, i);
                emu += wv * (double)__half2float(__float2half_rn(xt[i]));
            }
            if (!tc_count(fabs(got - ref) <= 2e-3 * sc + 1e-6)) {
                printf("FAIL %s nsb=%d row %d tok %d: got %.9g want %.9g (scale %g)\n", tnd_type_name((tnd_type)ty), nsb, r, k, got, ref, sc);
            }
            if (!tc_count(fabs(got - emu) <= 1e-9 * sc)) {
                printf("FAIL %s nsb=%d row %d tok %d: got %.12g, f16 arithmetic gives %.12g\n", tnd_type_name((tnd_type)ty), nsb, r, k, got, emu);
            }
        }
    }
    free(wf);
    free(w);
    free(x);
    free(xs);
}

/* ---- the int8 path (k_mvi_q4k) ---- */

/* lane (g, t)'s B words of sub s (plane g = token g/2's H or L; zeros past
 * the planes) */
struct bfetch {
    const uint2 *xq;
    int g, t, planes, pstride, sb;
    TND_HD uint2 operator()(int s) const {
        return g < planes ? xq[g * pstride + sb * 32 + s * 4 + t] : make_uint2(0, 0);
    }
};
struct sfetch {
    const int *xsum;
    TND_HD int operator()(int s) const { return xsum[s]; }
};
/* m16n8k32 u8 x s8 for one lane: records its fragments, and returns D from
 * the matrices gathered so far (the caller runs all 32 lanes per mma first:
 * see check_i8 for the two-pass replay) */
struct imma_emu {
    int (*a)[16][32], (*b)[32][8];
    const int (*d)[16][8];
    int g, t, mi;
    TND_HD void operator()(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 bx, int (&D)[4]) {
        const uint32_t r[4] = {a0, a1, a2, a3};
        for (int i = 0; i < 16; i++) {
            const int row = g + 8 * ((i >> 2) & 1), k = 4 * t + (i & 3) + 16 * (i >> 3);
            a[mi][row][k] = (int)((r[i >> 2] >> (8 * (i & 3))) & 255); /* u8 */
        }
        for (int i = 0; i < 8; i++) {
            const int k = 4 * t + (i & 3) + 16 * (i >> 2);
            b[mi][k][g] = (int)(int8_t)(((i < 4 ? bx.x : bx.y) >> (8 * (i & 3))) & 255); /* s8 */
        }
        if (d) {
            D[0] = d[mi][g][2 * t];
            D[1] = d[mi][g][2 * t + 1];
            D[2] = d[mi][g + 8][2 * t];
            D[3] = d[mi][g + 8][2 * t + 1];
        } else {
            D[0] = D[1] = D[2] = D[3] = 0;
        }
        mi++;
    }
};

static int IA[8][16][32], IB[8][32][8], ID[8][16][8];

static void check_i8(int nsb, int n_tok, bool outlier) {
    const size_t rb = (size_t)nsb * 144;
    const int n_in = nsb * 256;
    uint8_t *w = (uint8_t *)malloc(rb * 16);
    for (size_t i = 0; i < rb * 16; i++) w[i] = (uint8_t)(tc_xorshift() >> 24);
    for (int r = 0; r < 16; r++)
        for (int b = 0; b < nsb; b++) {
            uint8_t *p = w + r * rb + b * 144;
            uint16_t d = tnd_fp32_to_fp16(tc_unif(0.0002f, 0.002f)), m = tnd_fp32_to_fp16(tc_unif(0.00005f, 0.001f));
            memcpy(p, &d, 2);
            memcpy(p + 2, &m, 2);
        }
    float *x = (float *)malloc(sizeof(float) * n_in * n_tok);
    for (int i = 0; i < n_in * n_tok; i++) x[i] = tc_unif(-1, 1);
    if (outlier) x[7] = 300.0f; /* one large value: its super-block's grid coarsens */
    /* x quantized as the kernel's prologue does (lane l: elements 8l.. of the super-block) */
    const int pstride = nsb * 32 + 4;
    uint2 *xq = (uint2 *)calloc((size_t)2 * n_tok * pstride, sizeof(uint2));
    int *xsum = (int *)calloc((size_t)n_tok * nsb * 8, sizeof(int));
    float *dl = (float *)calloc((size_t)n_tok * nsb, sizeof(float));
    double *xr = (double *)malloc(sizeof(double) * n_in * n_tok); /* x as the grid holds it */
    for (int k = 0; k < n_tok; k++)
        for (int sb = 0; sb < nsb; sb++) {
            const float *v = x + (size_t)k * n_in + sb * 256;
            float mx = 0;
            for (int i = 0; i < 256; i++) mx = fmaxf(mx, fabsf(v[i]));
            const float inv = mx > 0 ? 32639.0f / mx : 0.f;
            dl[k * nsb + sb] = mx / 32639.0f;
            for (int l = 0; l < 32; l++) {
                float e[8];
                for (int i = 0; i < 8; i++) e[i] = v[8 * l + i];
                uint2 H, L;
                int sum;
                mvi_quant8(e, inv, H, L, sum);
                xq[(2 * k) * pstride + sb * 32 + l] = H;
                xq[(2 * k + 1) * pstride + sb * 32 + l] = L;
                xsum[(k * nsb + sb) * 8 + l / 4] += sum;
                for (int i = 0; i < 8; i++) {
                    const int h = (int)(int8_t)(((i < 4 ? H.x : H.y) >> (8 * (i & 3))) & 255);
                    const int lo = (int)(int8_t)(((i < 4 ? L.x : L.y) >> (8 * (i & 3))) & 255);
                    xr[(size_t)k * n_in + sb * 256 + 8 * l + i] = (double)dl[k * nsb + sb] * (256.0 * h + lo);
                }
            }
        }
    double got[16][4] = {{0}};
    for (int sb = 0; sb < nsb; sb++) {
        /* pass 1: gather every lane's fragments; then D = A*B exactly; pass 2: the lanes' sums */
        for (int pass = 0; pass < 2; pass++) {
            for (int lane = 0; lane < 32; lane++) {
                const int g = lane >> 2, t = lane & 3, tt = t < n_tok ? t : 0;
                const uint8_t *b0 = w + g * rb + sb * 144, *b1 = w + (g + 8) * rb + sb * 144;
                uint32_t h0[4], h1[4], q0[8], q1[8];
                memcpy(h0, b0, 16);
                memcpy(h1, b1, 16);
                for (int c = 0; c < 4; c++) {
                    memcpy(q0 + 2 * c, b0 + 16 + 32 * c + 8 * t, 8);
                    memcpy(q1 + 2 * c, b1 + 16 + 32 * c + 8 * t, 8);
                }
                bfetch bf = {xq, g, t, 2 * n_tok, pstride, sb};
                sfetch sf = {xsum + (tt * nsb + sb) * 8};
                imma_emu em = {IA, IB, pass ? ID : NULL, g, t, 0};
                int acc[2][5] = {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
                mvi_q4k_sb(h0, h1, q0, q1, bf, sf, em, acc);
                if (pass && t < n_tok) {
                    got[g][t] += mvi_q4k_value(h0, acc[0], dl[t * nsb + sb]);
                    got[g + 8][t] += mvi_q4k_value(h1, acc[1], dl[t * nsb + sb]);
                }
            }
            if (!pass)
                for (int m = 0; m < 8; m++)
                    for (int r = 0; r < 16; r++)
                        for (int c = 0; c < 8; c++) {
                            int v = 0;
                            for (int k = 0; k < 32; k++) v += IA[m][r][k] * IB[m][k][c];
                            ID[m][r][c] = v;
                        }
        }
    }
    float *wf = (float *)malloc(sizeof(float) * n_in);
    for (int r = 0; r < 16; r++) {
        const uint8_t *row = w + r * rb;
        tnd_type_traits_get(TND_TYPE_Q4_K)->to_float(row, wf, n_in);
        for (int k = 0; k < n_tok; k++) {
            const float *xt = x + (size_t)k * n_in;
            double ref = tnd_ref_dot_f32(TND_TYPE_Q4_K, n_in, row, xt), sc = 0, emu = 0, bound = 0;
            for (int i = 0; i < n_in; i++) {
                sc += fabs((double)wf[i] * xt[i]);
                emu += (double)wf[i] * xr[(size_t)k * n_in + i];
                bound += fabs((double)wf[i]) * dl[k * nsb + i / 256] * 0.5;
            }
            /* x's rounding to the grid: at most half a step per value */
            if (!tc_count(fabs(got[r][k] - ref) <= bound * 1.01 + 1e-5 * sc)) {
                printf("FAIL i8 nsb=%d row %d tok %d: got %.9g want %.9g (grid bound %g, scale %g)\n", nsb, r, k,
                       got[r][k], ref, bound, sc);
            }
            /* the same grid values in double: only f32 rounding apart */
            if (!tc_count(fabs(got[r][k] - emu) <= 1e-5 * sc)) {
                printf("FAIL i8 nsb=%d row %d tok %d: got %.12g, grid arithmetic gives %.12g\n", nsb, r, k,
                       got[r][k], emu);
            }
        }
    }
    free(wf);
    free(w);
    free(x);
    free(xq);
    free(xsum);
    free(dl);
    free(xr);
}

int main() {
    tc_rng = 0x1234567ull;
    static const int tys[] = {TND_TYPE_Q4_K, TND_TYPE_Q6_K, TND_TYPE_Q8_0};
    for (int ti = 0; ti < 3; ti++) {
        const int ty = tys[ti];
        check_tile(ty, 1, 1);
        check_tile(ty, 3, 1);
        check_tile(ty, 2, 3);
        check_tile(ty, 5, 8);
    }
    check_i8(1, 1, false);
    check_i8(3, 2, true);
    check_i8(2, 4, false);
    /* the scale/min byte unpacking for every sub and lane half */
    for (int it = 0; it < 1000; it++) {
        uint32_t h[4];
        for (int i = 0; i < 4; i++) h[i] = (uint32_t)tc_xorshift();
        h[0] = (uint32_t)tnd_fp32_to_fp16(tc_unif(0.001f, 0.01f)) | ((uint32_t)tnd_fp32_to_fp16(tc_unif(0.001f, 0.01f)) << 16);
        for (int c0 = 0; c0 < 2; c0++)
            for (int j = 0; j < 2; j++) {
                uint32_t s[2], m[2];
                mvh_q4k_scales(h, c0, j, s[0], m[0], s[1], m[1]);
                for (int k = 0; k < 2; k++) {
                    float scf, mf;
                    kscale_min((const uint8_t *)h + 4, 4 * j + 2 * c0 + k, &scf, &mf);
                    const double want_s = (double)__half2float(__double2half(h2f((uint16_t)h[0]) * (double)scf));
                    const double want_m = (double)__half2float(__double2half(-(double)h2f((uint16_t)(h[0] >> 16)) * mf));
                    if (!tc_count(hf(s[k]) == want_s && hf(s[k] >> 16) == want_s && hf(m[k]) == want_m &&
                                  hf(m[k] >> 16) == want_m)) {
                        printf("FAIL scales sub %d: got %g/%g want %g/%g\n", 4 * j + 2 * c0 + k, hf(s[k]), hf(m[k]), want_s,
                               want_m);
                    }
                }
            }
    }
    return tc_summary();
}
