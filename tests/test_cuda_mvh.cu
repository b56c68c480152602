/* The f16 tensor-core decode of matvec.cu (k_mvh_q4k, k_mvh_q6k) replayed on the host:
 * runs in CI without a GPU. For random Q4_K and Q6_K tiles (16 rows x a few
 * super-blocks) every lane's fragments come from the same host+device
 * helpers the kernel uses (mvh_q4k_sb / mvh_q6k_sb, mvh_q*_slot for x), an emulated
 * mma.sync m16n8k16 places them by the PTX fragment layout (A: rows g, g+8,
 * k 2t.., 2t+8..; B: k 2t.., 2t+8.., column g; D: rows g, g+8, columns 2t,
 * 2t+1) and sums in double; tokens 0..7 are the mma's columns. Checked
 * against tnd_ref_dot_f32 with the f16 path's tolerance (2e-3 of
 * sum |w x|), and against the same product computed from the weights and
 * x rounded to f16 the kernel's way (1e-9 relative: catches any misplaced
 * fragment, which the loose tolerance could miss). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "quant/quant.h"

static uint64_t st = 0x1234567ull;
static uint64_t rnd() {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
}
static float unif(float a, float b) { return a + (b - a) * (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)); }
TND_HD double hf(uint32_t bits) { return (double)__half2float(__ushort_as_half((unsigned short)(bits & 0xffff))); }

static int fails, checks;

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
    const uint8_t *b = row + (i / 256) * 210;
    const int n = s / 4, j = s % 4;
    uint16_t dh;
    memcpy(&dh, b + 208, 2);
    const double sh = (double)__half2float(__double2half(h2f(dh) * (double)(int8_t)b[192 + 2 * s + e / 16]));
    const int q = ((b[64 * n + 32 * (j & 1) + e] >> (4 * (j >= 2))) & 15) | (((b[128 + 32 * n + e] >> (2 * j)) & 3) << 4);
    return (double)__half2float(__double2half(sh * (q - 32)));
}

static void check_tile(int ty, int nsb, int n_tok) {
    const int sbb = ty == TND_TYPE_Q4_K ? 144 : 210;
    const size_t rb = (size_t)nsb * sbb;
    uint8_t *w = (uint8_t *)malloc(rb * 16);
    for (size_t i = 0; i < rb * 16; i++) w[i] = (uint8_t)(rnd() >> 24);
    for (int r = 0; r < 16; r++)
        for (int b = 0; b < nsb; b++) {
            uint8_t *p = w + r * rb + b * sbb;
            uint16_t d = tnd_fp32_to_fp16(unif(0.0002f, 0.002f)), m = tnd_fp32_to_fp16(unif(0.00005f, 0.001f));
            memcpy(p + (ty == TND_TYPE_Q4_K ? 0 : 208), &d, 2);
            if (ty == TND_TYPE_Q4_K) memcpy(p + 2, &m, 2);
        }
    const int n_in = nsb * 256;
    float *x = (float *)malloc(sizeof(float) * n_in * n_tok);
    for (int i = 0; i < n_in * n_tok; i++) x[i] = unif(-1, 1);
    /* x staged as the kernel does: token k's super-block sb at k*xs_tok + sb*64 */
    const int xs_tok = nsb * 64;
    uint2 *xs = (uint2 *)calloc((size_t)xs_tok * n_tok, sizeof(uint2));
    for (int k = 0; k < n_tok; k++)
        for (int q = 0; q < n_in / 4; q++) {
            const float *v = x + (size_t)k * n_in + 4 * q;
            const int sb = q >> 6, o = (q & 63) * 4;
            xs[k * xs_tok + sb * 64 + (ty == TND_TYPE_Q4_K ? mvh_q4k_slot(o) : mvh_q6k_slot(o))] = make_uint2(f2h2u(v[0], v[2]), f2h2u(v[1], v[3]));
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
                checks++;
                if (got != 0) {
                    fails++;
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
            checks += 2;
            if (!(fabs(got - ref) <= 2e-3 * sc + 1e-6)) {
                fails++;
                printf("FAIL %s nsb=%d row %d tok %d: got %.9g want %.9g (scale %g)\n", tnd_type_name((tnd_type)ty), nsb, r, k, got, ref, sc);
            }
            if (!(fabs(got - emu) <= 1e-9 * sc)) {
                fails++;
                printf("FAIL %s nsb=%d row %d tok %d: got %.12g, f16 arithmetic gives %.12g\n", tnd_type_name((tnd_type)ty), nsb, r, k, got, emu);
            }
        }
    }
    free(wf);
    free(w);
    free(x);
    free(xs);
}

int main() {
    for (int ty = TND_TYPE_Q4_K; ty >= 0; ty = ty == TND_TYPE_Q4_K ? TND_TYPE_Q6_K : -1) {
        check_tile(ty, 1, 1);
        check_tile(ty, 3, 1);
        check_tile(ty, 2, 3);
        check_tile(ty, 5, 8);
    }
    /* the scale/min byte unpacking for every sub and lane half */
    for (int it = 0; it < 1000; it++) {
        uint32_t h[4];
        for (int i = 0; i < 4; i++) h[i] = (uint32_t)rnd();
        h[0] = (uint32_t)tnd_fp32_to_fp16(unif(0.001f, 0.01f)) | ((uint32_t)tnd_fp32_to_fp16(unif(0.001f, 0.01f)) << 16);
        for (int c0 = 0; c0 < 2; c0++)
            for (int j = 0; j < 2; j++) {
                uint32_t s[2], m[2];
                mvh_q4k_scales(h, c0, j, s[0], m[0], s[1], m[1]);
                for (int k = 0; k < 2; k++) {
                    float scf, mf;
                    kscale_min((const uint8_t *)h + 4, 4 * j + 2 * c0 + k, &scf, &mf);
                    const double want_s = (double)__half2float(__double2half(h2f((uint16_t)h[0]) * (double)scf));
                    const double want_m = (double)__half2float(__double2half(-(double)h2f((uint16_t)(h[0] >> 16)) * mf));
                    checks++;
                    if (hf(s[k]) != want_s || hf(s[k] >> 16) != want_s || hf(m[k]) != want_m || hf(m[k] >> 16) != want_m) {
                        fails++;
                        printf("FAIL scales sub %d: got %g/%g want %g/%g\n", 4 * j + 2 * c0 + k, hf(s[k]), hf(m[k]), want_s,
                               want_m);
                    }
                }
            }
    }
    printf("test_cuda_mvh: %d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
