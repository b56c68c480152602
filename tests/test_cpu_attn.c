/* CPU attention: the vector paths (AVX2, AVX-512: the heads of a kv head
 * over chunks of positions, split by units, heads or chunks) against the
 * scalar reference on odd shapes — head_dim 16..256, GQA ratios, windows,
 * soft-capping, chunk and decode positions, long contexts, odd thread
 * counts — and their bits against themselves however the work is split.
 * Products are summed in another order, so the outputs agree to float
 * rounding (bound stated below). Also the KV store's f16 conversion, RoPE
 * (its table of angles, both pair layouts on each ISA) and the vector expf
 * of silu and gelu, bit for bit, and RMSNorm's vector sum to float
 * rounding. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/matmul_impl.h"
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

/* RoPE's table of angles: the same rotation as computed in place (cs
 * NULL), for rows grown over several calls and parameter sets, both pair
 * layouts (the table's rows take the ISA's vector path), past the sets it
 * keeps (NULL then), and NULL for an odd n_rot. */
static void test_rope_table(void) {
    const int hd = 64, nh = 3;
    float x[3 * 64], y[3 * 64], z[3 * 64];
    tnd_rope_tabs tabs = {0};
    for (int round = 0; round < 3; round++)
        for (int pos = round * 50; pos < round * 50 + 70; pos++)
            for (int pv = 0; pv < 4; pv++) {
                const int n_rot = pv >= 2 ? 32 : 64;
                const float base = pv % 2 ? 1e6f : 1e4f, scale = pv == 2 ? 0.25f : 1.0f;
                const bool neox = pv % 2;
                tc_fill_frand(x, hd * nh);
                memcpy(y, x, sizeof x);
                memcpy(z, x, sizeof x);
                const float *cs = tnd_rope_rows(&tabs, n_rot, base, scale, pos);
                CHECK(cs != NULL, "rope table: no rows for variant %d to position %d", pv, pos);
                if (!cs) continue;
                tnd_cpu_rope(y, nh, hd, n_rot, pos, base, scale, neox, cs + (int64_t)pos * n_rot);
                tnd_cpu_rope(z, nh, hd, n_rot, pos, base, scale, neox, NULL);
                for (int i = 0; i < n_rot / 2; i++) {
                    double theta = (double)pos * scale * pow((double)base, -2.0 * i / n_rot);
                    float c = (float)cos(theta), s = (float)sin(theta);
                    for (int h = 0; h < nh; h++) {
                        float *v = x + h * hd;
                        int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
                        float x0 = v[a], x1 = v[b];
                        v[a] = x0 * c - x1 * s;
                        v[b] = x0 * s + x1 * c;
                    }
                }
                CHECK(!memcmp(x, y, sizeof x), "rope pos %d variant %d: the table's rotation differs", pos, pv);
                CHECK(!memcmp(x, z, sizeof x), "rope pos %d variant %d: computed in place differs", pos, pv);
            }
    CHECK(tabs.t[0].n_pos == 170 && tabs.t[2].n_pos == 170, "rope table: %lld positions kept, want 170",
          (long long)tabs.t[0].n_pos);
    CHECK(tnd_rope_rows(&tabs, 16, 2e4f, 1.0f, 3) == NULL, "rope table: a fifth set kept");
    CHECK(tnd_rope_rows(&tabs, 15, 1e4f, 1.0f, 3) == NULL, "rope table: odd n_rot accepted");
    CHECK(tnd_rope_rows(&tabs, 64, 1e4f, 1.0f, -1) == NULL, "rope table: a negative position accepted");
    tnd_rope_tabs_free(&tabs);
}

/* ulps between two finite floats of one sign (large when they differ in sign) */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

/* tnd_cpu_expf (glibc's algorithm) against libm: the same bits on glibc
 * 2.27+ with FMA (an AVX2 or AVX-512 machine has it), within 1 ulp
 * elsewhere. Then silu_mul and gelu_mul, vector (the ISA main forces:
 * AVX-512, AVX2 or none) and libm's scalar loop, against the formula with
 * tnd_cpu_expf, bit for bit: every range of the exponent, the libm lanes
 * (|x| >= 88, inf, NaN; gelu's from g < -10.9), lengths not a multiple of
 * 16 or 8. gelu_mul also against the tanh form in double: its sigmoid form
 * is the same function. */
static void test_expf_silu(void) {
#if defined(__GLIBC__) && defined(__x86_64__)
    const bool exact = tnd_cpu_isa_best() >= TND_ISA_AVX2; /* FMA: glibc's __expf_fma */
#else
    const bool exact = false;
#endif
    int64_t worst = 0, n_diff = 0, n = 0;
    for (uint64_t i = 0; i < 3000000; i++) {
        /* a third random bit patterns (those above 200 in size moved near 0),
         * the rest uniform over the range where expf is neither 0 nor inf */
        uint32_t bits = (uint32_t)tc_xorshift();
        float x;
        memcpy(&x, &bits, 4);
        if (i % 3) x = tc_unif(-104.0f, 104.0f);
        else if (fabsf(x) > 200.0f) x = tc_frand() * 1e-3f;
        float a = tnd_cpu_expf(x), b = expf(x);
        n++;
        if (same_bits(a, b)) continue;
        n_diff++;
        int64_t u = isfinite(a) && isfinite(b) ? ulps(a, b) : 1000;
        if (u > worst) worst = u;
    }
    CHECK(worst <= 1, "tnd_cpu_expf vs libm: %lld of %lld differ, by up to %lld ulps", (long long)n_diff,
          (long long)n, (long long)worst);
    CHECK(!exact || n_diff == 0, "tnd_cpu_expf vs glibc's expf: %lld of %lld differ", (long long)n_diff,
          (long long)n);
    enum { N = 4099 };
    float *g = malloc(N * 4), *u = malloc(N * 4), *y = malloc(N * 4), *ref = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        g[i] = i % 5 == 0 ? tc_unif(-120.0f, 120.0f) : tc_frand() * (float)(1 << (i % 6));
        u[i] = tc_frand();
    }
    g[3] = INFINITY, g[4] = -INFINITY, g[6] = NAN, g[7] = 88.0f, g[8] = -88.0f, g[9] = 87.99f, g[11] = -0.0f;
    g[12] = 1e-40f, g[13] = -103.5f, g[14] = 103.5f, g[16] = 88.72f, g[17] = -88.73f;
    const int lens[] = {N, 16, 15, 1, 33};
    for (int gelu = 0; gelu < 2; gelu++) {
        const char *name = gelu ? "gelu_mul" : "silu_mul";
        for (int i = 0; i < N; i++)
            ref[i] = g[i] / (1.0f + tnd_cpu_expf(gelu ? tnd_cpu_gelu_arg(g[i]) : -g[i])) * u[i];
        for (int sc = 0; sc < 2; sc++) {
            tnd_cpu_ops_scalar = sc; /* 1: libm's expf, equal to tnd_cpu_expf only where exact */
            if (sc && !exact) break;
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
                for (int i = 0; i < N; i++) y[i] = 12345.0f;
                (gelu ? tnd_cpu_gelu_mul : tnd_cpu_silu_mul)(g, u, y, lens[l]);
                int bad = 0;
                for (int i = 0; i < lens[l] && bad < 3; i++)
                    if (!same_bits(y[i], ref[i])) {
                        CHECK(0, "%s (scalar %d) n=%d [%d] g %a: got %a want %a", name, sc, lens[l], i, (double)g[i],
                              (double)y[i], (double)ref[i]);
                        bad++;
                    }
                CHECK(lens[l] == N || y[lens[l]] == 12345.0f, "%s n=%d wrote past the end", name, lens[l]);
            }
        }
        tnd_cpu_ops_scalar = false;
    }
    /* the sigmoid form against 0.5 x (1 + tanh z) in double: within a few
     * float roundings of |x u|, where that is a normal float (not 0, inf or
     * denormal) */
    double worst_g = 0;
    for (int i = 0; i < N; i++) {
        const double x = g[i], z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        const double want = 0.5 * x * (1.0 + tanh(z)) * u[i], scale = fabs(x * u[i]);
        if (!isfinite(want) || !isfinite(ref[i]) || scale < FLT_MIN || fabs(x) > 1e12) continue;
        const double err = fabs(ref[i] - want) / scale;
        worst_g = err > worst_g ? err : worst_g;
    }
    CHECK(worst_g < 4e-7, "gelu_mul vs the tanh form in double: error %.3g of |g u|", worst_g);
    free(g), free(u), free(y), free(ref);
}

/* RMSNorm's AVX-512 sum of squares (another order of exact double
 * products) against the scalar loop: the same to float rounding. */
static void test_rmsnorm(void) {
    const int lens[] = {576, 1000, 17, 16, 1};
    float x[1000], w[1000], y0[1000], y1[1000];
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        const int n = lens[l];
        for (int i = 0; i < n; i++) x[i] = tc_frand() * (float)(1 << (i % 9)), w[i] = tc_frand();
        tnd_cpu_ops_scalar = true;
        tnd_cpu_rmsnorm(x, w, y0, n, 1e-5f);
        tnd_cpu_ops_scalar = false;
        tnd_cpu_rmsnorm(x, w, y1, n, 1e-5f);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += fabsf(y0[i] - y1[i]) > 2.4e-7f * fabsf(y0[i]);
        CHECK(bad == 0, "rmsnorm n=%d: %d values beyond float rounding of the scalar loop", n, bad);
    }
}

/* A chunk of positions whose scores all overflow to -inf weighs 0, as in
 * the one-pass scalar loop (its own numerators exp(-inf - -inf) are NaN):
 * head_dim 16, 3 chunks of 256, the middle one's keys huge against a huge
 * query, the others' zero. Then every score far below zero (~-300: the max
 * must be taken over the real positions only, or every numerator is 0). */
static void test_attn_inf_chunk(void) {
    enum { HD = 16, POS = 700 };
    float q[HD], o1[HD], o2[HD];
    uint16_t *k = malloc((POS + 1) * HD * 2), *v = malloc((POS + 1) * HD * 2);
    for (int variant = 0; variant < 2; variant++) {
        for (int d = 0; d < HD; d++) q[d] = variant ? 75.0f : 1e36f;
        for (int p = 0; p <= POS; p++)
            for (int d = 0; d < HD; d++) {
                const float kv = variant ? -1.0f - 0.001f * (float)(p % 7) : p >= 256 && p < 512 ? -65504.0f : 0.0f;
                k[p * HD + d] = tnd_fp32_to_fp16(kv);
                v[p * HD + d] = tnd_fp32_to_fp16(tc_frand());
            }
        for (int pos = POS - 4; pos <= POS; pos++) { /* 1-5 positions in the last 8 */
            tnd_attn_args a = {.q = q, .k = k, .v = v, .out = o1, .n_tok = 1, .pos0 = pos, .n_head = 1,
                               .n_kv_head = 1, .head_dim = HD, .scale = 0.25f};
            tnd_cpu_ops_scalar = true;
            tnd_cpu_attn(NULL, &a);
            tnd_cpu_ops_scalar = false;
            a.out = o2;
            errno = 0;
            tnd_cpu_attn(NULL, &a);
            /* padding lanes must not reach libm with overflowing arguments */
            CHECK(errno == 0, "%s, position %d: errno %d", variant ? "scores near -300" : "a chunk of -inf scores", pos,
                  errno);
            CHECK(tc_max_abs_diff(o1, o2, HD) <= 2e-5f, "%s, position %d: %g from scalar (%g, %g)",
                  variant ? "scores near -300" : "a chunk of -inf scores", pos, tc_max_abs_diff(o1, o2, HD),
                  (double)o1[0], (double)o2[0]);
        }
    }
    free(k), free(v);
}

/* A batched round's sequences, each with its own cache and length (one
 * long among short ones), in one call: each one's bits alone, on pools
 * that split the call by units and by chunks, and the scalar result. */
static void test_attn_batched_caches(void) {
    enum { NS = 6, HD = 64, NH = 9, NKV = 3 };
    const int pos[NS] = {900, 3, 20, 7, 300, 1};
    tnd_attn_args runs[NS];
    float *ref[NS], *out[NS];
    uint16_t *kv[NS];
    for (int s = 0; s < NS; s++) {
        const size_t kn = (size_t)(pos[s] + 1) * NKV * HD;
        kv[s] = malloc(kn * 4);
        for (size_t i = 0; i < 2 * kn; i++) kv[s][i] = tnd_fp32_to_fp16(tc_frand());
        float *q = malloc(NH * HD * 4);
        tc_fill_frand(q, NH * HD);
        for (int i = 0; i < NH * HD; i++) q[i] *= 4.0f;
        ref[s] = malloc(NH * HD * 4), out[s] = malloc(NH * HD * 4);
        runs[s] = (tnd_attn_args){.q = q, .k = kv[s], .v = kv[s] + kn, .out = ref[s], .n_tok = 1, .pos0 = pos[s],
                                  .n_head = NH, .n_kv_head = NKV, .head_dim = HD, .scale = 0.125f};
        tnd_cpu_ops_scalar = true;
        tnd_cpu_attn(NULL, &runs[s]);
        tnd_cpu_ops_scalar = false;
        runs[s].out = out[s];
    }
    const int threads[] = {2, 7};
    for (int k = 0; k < 2; k++) {
        tnd_pool *pool = tnd_pool_new(threads[k]);
        float alone[NH * HD];
        for (int s = 0; s < NS; s++) for (int i = 0; i < NH * HD; i++) out[s][i] = NAN;
        tnd_cpu_attn_many(pool, runs, NS);
        for (int s = 0; s < NS; s++) {
            tnd_attn_args one = runs[s];
            one.out = alone;
            tnd_cpu_attn(pool, &one);
            CHECK(!memcmp(alone, out[s], sizeof alone), "%d threads: sequence %d batched differs from alone",
                  threads[k], s);
            CHECK(tc_max_abs_diff(ref[s], out[s], NH * HD) <= 2e-5f, "%d threads: sequence %d: %g from scalar",
                  threads[k], s, tc_max_abs_diff(ref[s], out[s], NH * HD));
        }
        tnd_pool_free(pool);
    }
    for (int s = 0; s < NS; s++) free((void *)runs[s].q), free(ref[s]), free(out[s]), free(kv[s]);
}

int main(void) {
    tc_rng = 0x1234567;
    test_f32_to_f16();
    const tnd_cpu_isa_id isa0 = tnd_cpu_isa_id_current(); /* TND_CPU_ISA's, restored after each loop */
    for (int isa = TND_ISA_SCALAR; isa <= (int)tnd_cpu_isa_best(); isa++) { /* silu, RMSNorm, RoPE of each */
        tnd_cpu_isa_force((tnd_cpu_isa_id)isa);
        test_rope_table();
        test_expf_silu();
        test_rmsnorm();
    }
    tnd_cpu_isa_force(isa0);
    for (int isa = TND_ISA_AVX2; isa <= (int)tnd_cpu_isa_best(); isa++) {
        tnd_cpu_isa_force((tnd_cpu_isa_id)isa);
        test_attn_inf_chunk();
        test_attn_batched_caches();
    }
    tnd_cpu_isa_force(isa0);
    struct { int hd, n_head, n_kv, n_tok, pos0, window; float softcap; int threads; float qmul; } cases[] = {
        {64, 9, 3, 7, 0, 0, 0, 1, 1},   {128, 8, 2, 1, 300, 0, 0, 3, 1}, {16, 4, 4, 33, 5, 0, 0, 2, 1},
        {256, 2, 1, 5, 17, 0, 0, 2, 1}, {128, 6, 1, 19, 40, 16, 0, 4, 1}, {64, 4, 2, 9, 3, 0, 30.0f, 2, 1},
        {48, 3, 3, 4, 2, 0, 0, 1, 1},   {40, 3, 3, 4, 2, 0, 0, 1, 1}, /* 40: AVX2's 8 lanes on both */
        {36, 2, 1, 3, 9, 0, 0, 2, 1}, /* 36 is not a multiple of 8: the scalar loop for all */
        {8, 4, 2, 3, 30, 0, 0, 2, 1}, {24, 3, 1, 2, 40, 0, 0, 2, 1}, {72, 6, 2, 2, 300, 0, 0, 3, 1}, /* 8 lanes */
        {192, 3, 1, 3, 21, 0, 0, 2, 1}, {64, 9, 3, 2, 61, 0, 0, 2, 1}, /* column blocks of 128 + 64; odd positions */
        /* long contexts: AVX-512's chunks of 256 positions, split over the
         * threads (few query tokens) or not, combined */
        {64, 9, 3, 1, 700, 0, 0, 2, 1}, {128, 4, 2, 3, 600, 300, 0, 3, 1}, {64, 4, 1, 2, 513, 0, 20.0f, 4, 1},
        {128, 8, 2, 5, 600, 0, 0, 2, 1}, /* units on 1-2 threads, chunks on 7 */
        /* peaked scores (q x 6): chunk maxima far apart, so the combine's
         * rescaling counts; one head a kv head */
        {16, 2, 2, 1, 800, 0, 0, 7, 6.0f}, {64, 9, 3, 1, 1100, 0, 0, 2, 6.0f},
    };
    tnd_pool *others[] = {NULL, tnd_pool_new(2), tnd_pool_new(7)};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int hd = cases[c].hd, nh = cases[c].n_head, nkv = cases[c].n_kv, nt = cases[c].n_tok, p0 = cases[c].pos0;
        int rows = p0 + nt;
        size_t qn = (size_t)nt * nh * hd, kn = (size_t)rows * nkv * hd;
        float *q = malloc(qn * 4), *o1 = malloc(qn * 4), *o2 = malloc(qn * 4);
        uint16_t *k = malloc(kn * 2), *v = malloc(kn * 2);
        tc_fill_frand(q, qn);
        for (size_t i = 0; i < qn; i++) q[i] *= cases[c].qmul;
        for (size_t i = 0; i < kn; i++) k[i] = tnd_fp32_to_fp16(tc_frand()), v[i] = tnd_fp32_to_fp16(tc_frand());
        tnd_pool *pool = tnd_pool_new(cases[c].threads);
        tnd_attn_args a = {.q = q, .k = k, .v = v, .out = o1, .n_tok = nt, .pos0 = p0, .n_head = nh, .n_kv_head = nkv,
                           .head_dim = hd, .window = cases[c].window, .scale = 1.0f / sqrtf((float)hd),
                           .softcap = cases[c].softcap};
        tnd_cpu_ops_scalar = true;
        tnd_cpu_attn(pool, &a);
        tnd_cpu_ops_scalar = false;
        /* each vector ISA here in turn (AVX2: 8 lanes, AVX-512: 16) */
        for (int isa = TND_ISA_AVX2; isa <= (int)tnd_cpu_isa_best(); isa++) {
            tnd_cpu_isa_force((tnd_cpu_isa_id)isa);
            a.out = o2;
            for (size_t i = 0; i < qn; i++) o2[i] = NAN; /* what is not written shows */
            tnd_cpu_attn(pool, &a);
            float worst = tc_max_abs_diff(o1, o2, (int)qn); /* (a NaN difference counts as one) */
            /* values in [-1, 1], scores summed over <= 256 products: a few ulps of 1 */
            CHECK(worst <= 2e-5f, "case %zu (hd %d, heads %d/%d, %d tokens at %d, isa %d): max diff %g", c, hd, nh,
                  nkv, nt, p0, isa, worst);
            /* the same rows as three attentions in one region (a batched
             * round's runs: tokens 0, 1..nt/2, the rest, each at its own
             * position over the same cache) give each one's bits alone */
            float *o3 = malloc(qn * 4);
            for (size_t i = 0; i < qn; i++) o3[i] = NAN;
            const int cut[4] = {0, 1, nt / 2 > 1 ? nt / 2 : 1, nt};
            tnd_attn_args runs[3];
            int nr = 0;
            for (int r = 0; r < 3; r++) {
                if (cut[r + 1] <= cut[r]) continue;
                runs[nr] = a;
                runs[nr].q = q + (size_t)cut[r] * nh * hd;
                runs[nr].out = o3 + (size_t)cut[r] * nh * hd;
                runs[nr].n_tok = cut[r + 1] - cut[r];
                runs[nr].pos0 = p0 + cut[r];
                nr++;
            }
            tnd_cpu_attn_many(pool, runs, nr);
            CHECK(memcmp(o2, o3, qn * 4) == 0, "case %zu isa %d: %d runs in one region differ from one attention", c,
                  isa, nr);
            /* and on other pool sizes, which split the work otherwise
             * (AVX-512: units, heads or chunks an item) */
            for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
                a.out = o3;
                for (size_t i = 0; i < qn; i++) o3[i] = NAN;
                tnd_cpu_attn(others[k], &a);
                CHECK(memcmp(o2, o3, qn * 4) == 0, "case %zu isa %d: %d threads differ from %d", c, isa,
                      others[k] ? tnd_pool_size(others[k]) : 1, cases[c].threads);
            }
            free(o3);
        }
        tnd_cpu_isa_force(isa0);
        tnd_pool_free(pool);
        free(q), free(o1), free(o2), free(k), free(v);
    }
    for (size_t k = 0; k < sizeof others / sizeof *others; k++) tnd_pool_free(others[k]);
    return tc_summary();
}
