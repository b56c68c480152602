/* CPU attention: the SIMD path (AVX2/F16C) against the scalar reference on
 * odd shapes — head_dim 16..256, GQA ratios, windows, soft-capping, chunk
 * and decode positions, odd thread counts. Products are summed in another
 * order, so the outputs agree to float rounding (bound stated below). Also
 * the KV store's f16 conversion and RoPE's angle cache, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "quant/quant.h"

/* The KV store's f32 -> f16 conversion (F16C where there is one) against
 * the scalar reference, bit for bit: ties, subnormals, overflow, infinities,
 * NaNs with payloads, and lengths not a multiple of the vector. */
static void test_f32_to_f16(void) {
    enum { N = 1003 };
    float *x = malloc(N * sizeof(float));
    uint16_t *y = malloc(N * 2);
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)tc_xorshift();
        float f;
        memcpy(&f, &bits, 4);
        x[i] = i % 4 == 0 ? f : tc_frand() * (float)(1 << (i % 20)) * (i % 7 == 0 ? 1e-6f : 1.0f);
    }
    x[5] = 65520.0f, x[6] = -65519.0f, x[7] = 1.0f + 1.0f / 2048.0f, x[9] = 5.96046448e-08f;
    x[10] = INFINITY, x[11] = -INFINITY, x[12] = NAN, x[13] = 2.98023224e-08f, x[14] = 1e-40f;
    const int lens[] = {N, 8, 7, 1, 0};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        memset(y, 0xab, N * 2);
        tnd_cpu_f32_to_f16(x, y, lens[l]);
        int bad = 0;
        for (int i = 0; i < lens[l] && bad < 3; i++)
            if (y[i] != tnd_fp32_to_fp16(x[i])) {
                CHECK(0, "f32_to_f16 n=%d [%d] %a: got %04x want %04x", lens[l], i, (double)x[i], y[i],
                      tnd_fp32_to_fp16(x[i]));
                bad++;
            }
        CHECK(lens[l] == N || y[lens[l]] == 0xabab, "f32_to_f16 n=%d wrote past the end", lens[l]);
    }
    free(x), free(y);
}

/* RoPE keeps each position's angles per thread: the same rotation as
 * computed in place, over more positions and parameters than it keeps. */
static void test_rope_cache(void) {
    const int hd = 64, nh = 3;
    float x[3 * 64], y[3 * 64];
    for (int round = 0; round < 3; round++)
        for (int pos = 0; pos < 20; pos++)
            for (int pv = 0; pv < 3; pv++) {
                const int n_rot = pv == 2 ? 32 : 64;
                const float base = pv == 1 ? 1e6f : 1e4f;
                const bool neox = pv == 1;
                tc_fill_frand(x, hd * nh);
                memcpy(y, x, sizeof x);
                tnd_cpu_rope(y, nh, hd, n_rot, pos, base, 1.0f, neox);
                for (int i = 0; i < n_rot / 2; i++) {
                    double theta = (double)pos * 1.0f * pow((double)base, -2.0 * i / n_rot);
                    float c = (float)cos(theta), s = (float)sin(theta);
                    for (int h = 0; h < nh; h++) {
                        float *v = x + h * hd;
                        int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                        float x0 = v[a], x1 = v[b];
                        v[a] = x0 * c - x1 * s;
                        v[b] = x0 * s + x1 * c;
                    }
                }
                CHECK(!memcmp(x, y, sizeof x), "rope pos %d variant %d differs", pos, pv);
            }
}

int main(void) {
    tc_rng = 0x1234567;
    test_f32_to_f16();
    test_rope_cache();
    struct { int hd, n_head, n_kv, n_tok, pos0, window; float softcap; int threads; } cases[] = {
        {64, 9, 3, 7, 0, 0, 0, 1},   {128, 8, 2, 1, 300, 0, 0, 3}, {16, 4, 4, 33, 5, 0, 0, 2},
        {256, 2, 1, 5, 17, 0, 0, 2}, {128, 6, 1, 19, 40, 16, 0, 4}, {64, 4, 2, 9, 3, 0, 30.0f, 2},
        {48, 3, 3, 4, 2, 0, 0, 1},   /* 48 is not a multiple of 16: the scalar path for both */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int hd = cases[c].hd, nh = cases[c].n_head, nkv = cases[c].n_kv, nt = cases[c].n_tok, p0 = cases[c].pos0;
        int rows = p0 + nt;
        size_t qn = (size_t)nt * nh * hd, kn = (size_t)rows * nkv * hd;
        float *q = malloc(qn * 4), *o1 = malloc(qn * 4), *o2 = malloc(qn * 4);
        uint16_t *k = malloc(kn * 2), *v = malloc(kn * 2);
        tc_fill_frand(q, qn);
        for (size_t i = 0; i < kn; i++) k[i] = tnd_fp32_to_fp16(tc_frand()), v[i] = tnd_fp32_to_fp16(tc_frand());
        tnd_pool *pool = tnd_pool_new(cases[c].threads);
        tnd_attn_args a = {.q = q, .k = k, .v = v, .out = o1, .n_tok = nt, .pos0 = p0, .n_head = nh, .n_kv_head = nkv,
                           .head_dim = hd, .window = cases[c].window, .scale = 1.0f / sqrtf((float)hd),
                           .softcap = cases[c].softcap};
        tnd_cpu_ops_scalar = true;
        tnd_cpu_attn(pool, &a);
        tnd_cpu_ops_scalar = false;
        a.out = o2;
        tnd_cpu_attn(pool, &a);
        float worst = tc_max_abs_diff(o1, o2, (int)qn); /* (a NaN difference counts as one) */
        /* values in [-1, 1], scores summed over <= 256 products: a few ulps of 1 */
        CHECK(worst <= 2e-5f, "case %zu (hd %d, heads %d/%d, %d tokens at %d): max diff %g", c, hd, nh, nkv, nt, p0,
              worst);
        tnd_pool_free(pool);
        free(q), free(o1), free(o2), free(k), free(v);
    }
    return tc_summary();
}
