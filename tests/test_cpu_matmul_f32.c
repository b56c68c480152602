/* The f32-activation matmul (cpu/matmul_f32.h) and the dequantizers under it
 * (cpu/dequant.h), for every ISA this machine has (scalar, AVX2, AVX-512),
 * every supported weight type, odd shapes and several thread counts.
 *
 * 1. Dequantizers: bit-exact (memcmp) with the type's reference to_float on
 *    random blocks (every bit pattern of the quants, random finite scales),
 *    to an unaligned destination, for odd lengths of the float formats.
 * 2. Products against a double-precision dequantize-then-dot reference:
 *    each of the L lanes sums m = ceil(n_in / L) terms with FMA (one rounding
 *    each) and a tree of log2 L levels adds the lanes, so (first order)
 *    |y - exact| <= (m + log2 L) * 2^-24 * S, S = sum |w_k x_k|; we allow
 *    (m + log2 L + 2) * 2^-24 * S. A wrong quant, scale or index moves y by
 *    about one term, far more.
 * 3. Order independence: y of token t is bit-identical whether computed
 *    alone (n_tok = 1, the decode path), inside a prefill batch (also one
 *    of more than 1024 tokens), or in a chunk of other tokens, and for any
 *    thread count.
 * 4. Row ranges write only their rows; unsupported types give NaN. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/dequant.h"
#include "cpu/matmul_f32.h"
#include "cpu/matmul_impl.h"
#include "util.h"

static long g_checked; /* values compared */

static uint32_t rnd32(void) { return (uint32_t)(tc_xorshift() >> 16); }
static float frand(void) { return (float)((rnd32() >> 8) * (1.0 / (1 << 23))) - 1.0f; } /* [-1, 1) */

/* Activations shaped like a transformer's: mostly small, a few outliers. */
static void fill_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = frand();
        if ((i % 97) == 5) x[i] *= 20.0f;
    }
}

static const tnd_type k_types[] = {
    TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1, TND_TYPE_Q5_0, TND_TYPE_Q5_1,
    TND_TYPE_Q8_0, TND_TYPE_Q2_K, TND_TYPE_Q3_K, TND_TYPE_Q4_K, TND_TYPE_Q5_K, TND_TYPE_Q6_K, TND_TYPE_MXFP4,
};
static const char *const k_isa[] = {"scalar", "avx2", "avx512"};

/* ---- 1. dequantizers --------------------------------------------------------- */

/* A random finite half (any sign, subnormals included). */
static uint16_t rand_half(void) {
    uint16_t h = (uint16_t)rnd32();
    if (((h >> 10) & 0x1f) == 0x1f) h &= (uint16_t)~0x0400;
    return h;
}

/* Offsets of the half-float fields of a block (-1 ends). */
static void half_fields(tnd_type t, int off[3]) {
    off[0] = off[1] = off[2] = -1;
    switch (t) {
    case TND_TYPE_Q4_0: off[0] = offsetof(block_q4_0, d); break;
    case TND_TYPE_Q4_1: off[0] = offsetof(block_q4_1, d), off[1] = offsetof(block_q4_1, m); break;
    case TND_TYPE_Q5_0: off[0] = offsetof(block_q5_0, d); break;
    case TND_TYPE_Q5_1: off[0] = offsetof(block_q5_1, d), off[1] = offsetof(block_q5_1, m); break;
    case TND_TYPE_Q8_0: off[0] = offsetof(block_q8_0, d); break;
    case TND_TYPE_Q2_K: off[0] = offsetof(block_q2_K, d), off[1] = offsetof(block_q2_K, dmin); break;
    case TND_TYPE_Q3_K: off[0] = offsetof(block_q3_K, d); break;
    case TND_TYPE_Q4_K: off[0] = offsetof(block_q4_K, d), off[1] = offsetof(block_q4_K, dmin); break;
    case TND_TYPE_Q5_K: off[0] = offsetof(block_q5_K, d), off[1] = offsetof(block_q5_K, dmin); break;
    case TND_TYPE_Q6_K: off[0] = offsetof(block_q6_K, d); break;
    default: break;
    }
}

/* Random blocks: every byte random, then the half fields made finite (F16:
 * every element; F32: random finite floats). */
static void random_blocks(tnd_type t, void *buf, int64_t k) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t bytes = tnd_row_size(t, k);
    uint8_t *p = buf;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd32();
    if (t == TND_TYPE_F16) {
        for (int64_t i = 0; i < k; i++) ((uint16_t *)buf)[i] = rand_half();
    } else if (t == TND_TYPE_F32) {
        for (int64_t i = 0; i < k; i++) {
            uint32_t b = rnd32() ^ (rnd32() << 16);
            if (((b >> 23) & 0xff) == 0xff) b &= ~(1u << 23);
            memcpy((float *)buf + i, &b, 4);
        }
    } else {
        int off[3];
        half_fields(t, off);
        for (int64_t b = 0; b < k / tr->block_size; b++)
            for (int f = 0; f < 3 && off[f] >= 0; f++) {
                uint16_t h = rand_half();
                memcpy(p + (size_t)b * tr->type_size + off[f], &h, 2);
            }
    }
}

static void test_dequant(int isa) {
    for (size_t ti = 0; ti < TND_ARRAY_LEN(k_types); ti++) {
        tnd_type t = k_types[ti];
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        tnd_dequant_fn f = tnd_cpu_dequant_fn_isa(t, isa);
        CHECK(f != NULL, "%s: no %s dequantizer", k_isa[isa], tr->name);
        if (!f) continue;
        const int64_t lens_q[] = {32, 256, 1024 + 256}, lens_f[] = {1, 7, 8, 15, 16, 17, 37, 1037};
        bool fl = tr->block_size == 1;
        int nl = fl ? (int)TND_ARRAY_LEN(lens_f) : (int)TND_ARRAY_LEN(lens_q);
        for (int li = 0; li < nl; li++) {
            int64_t k = fl ? lens_f[li] : lens_q[li];
            if (k % tr->block_size) continue;
            for (int rep = 0; rep < 8; rep++) {
                void *w = malloc(tnd_row_size(t, k));
                float *ref = malloc((size_t)(k + 1) * sizeof(float)), *got = malloc((size_t)(k + 1) * sizeof(float));
                random_blocks(t, w, k);
                tr->to_float(w, ref, k);
                got[0] = 12345.0f;
                f(w, got + 1, k); /* unaligned destination */
                CHECK(got[0] == 12345.0f, "%s %s: wrote before y", k_isa[isa], tr->name);
                int64_t bad = -1;
                for (int64_t i = 0; i < k && bad < 0; i++)
                    if (memcmp(&ref[i], &got[i + 1], 4)) bad = i;
                CHECK(bad < 0, "%s %s k=%lld: element %lld: %.9g (ref %.9g)", k_isa[isa], tr->name, (long long)k,
                      (long long)bad, bad >= 0 ? got[bad + 1] : 0.0, bad >= 0 ? ref[bad] : 0.0);
                g_checked += k;
                free(w), free(ref), free(got);
            }
        }
    }
}

/* ---- 2-4. products -------------------------------------------------------------- */

/* Random weights as a model has them: quantized from random floats. */
static void *make_w(tnd_type t, int64_t n_in, int64_t n_out) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t rs = tnd_row_size(t, n_in);
    char *w = malloc(rs * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = frand() * (1.0f + (float)(r % 3));
        tr->from_float(row, w + (size_t)r * rs, n_in);
    }
    free(row);
    return w;
}

static void test_shape(tnd_pool **pools, int n_pools, int isa, tnd_type t, int64_t n_in, int64_t n_out) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    const int64_t toks[] = {1, 2, 3, 4, 5, 17, 64}; /* 1-4: the fused decode kernels */
    const int64_t n_tok_max = 64;
    size_t rs = tnd_row_size(t, n_in);
    char *W = make_w(t, n_in, n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok_max));
    fill_x(x, n_in * n_tok_max);
    /* double reference and error scale for every (t, r) */
    double *ref = malloc(sizeof(double) * (size_t)(n_out * n_tok_max)), *S = malloc(sizeof(double) * (size_t)(n_out * n_tok_max));
    float *wd = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        tr->to_float(W + (size_t)r * rs, wd, n_in);
        for (int64_t tt = 0; tt < n_tok_max; tt++) {
            double s = 0, a = 0;
            for (int64_t i = 0; i < n_in; i++) {
                double p = (double)wd[i] * (double)x[tt * n_in + i];
                s += p;
                a += fabs(p);
            }
            ref[tt * n_out + r] = s;
            S[tt * n_out + r] = a;
        }
    }
    free(wd);
    int L = tnd_cpu_matmul_f32_lanes();
    double m = (double)((n_in + L - 1) / L), lg = L == 16 ? 4 : 3;
    float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok_max));
    float *full = malloc(sizeof(float) * (size_t)(n_out * n_tok_max));
    float *one = malloc(sizeof(float) * (size_t)n_out);
    /* the full batch on the first pool: the bit pattern everything else must match */
    tnd_cpu_matmul_f32(pools[0], t, W, n_in, n_out, x, n_tok_max, full);
    for (int64_t i = 0; i < n_out * n_tok_max; i++) {
        double tol = (m + lg + 2) * ldexp(1.0, -24) * S[i];
        CHECK(fabs((double)full[i] - ref[i]) <= tol, "%s %s n_in=%lld n_out=%lld: y[%lld][%lld] = %.9g, ref %.9g (tol %.3g)",
              k_isa[isa], tr->name, (long long)n_in, (long long)n_out, (long long)(i / n_out),
              (long long)(i % n_out), full[i], ref[i], tol);
        g_checked++;
    }
    for (int pi = 0; pi < n_pools; pi++)
        for (size_t ni = 0; ni < TND_ARRAY_LEN(toks); ni++) {
            int64_t nt = toks[ni];
            /* a chunk of nt tokens starting at an odd token */
            int64_t t0 = nt < n_tok_max ? (7 * (int64_t)ni) % (n_tok_max - nt + 1) : 0;
            tnd_cpu_matmul_f32(pools[pi], t, W, n_in, n_out, x + t0 * n_in, nt, y);
            int64_t bad = -1;
            for (int64_t i = 0; i < nt * n_out && bad < 0; i++)
                if (memcmp(&y[i], &full[t0 * n_out + i], 4)) bad = i;
            CHECK(bad < 0, "%s %s n_in=%lld n_out=%lld pool %d: n_tok=%lld from token %lld differs from the batch at "
                  "[%lld][%lld]: %.9g vs %.9g", k_isa[isa], tr->name, (long long)n_in, (long long)n_out, pi,
                  (long long)nt, (long long)t0, (long long)(bad / n_out), (long long)(bad % n_out),
                  bad >= 0 ? y[bad] : 0.0, bad >= 0 ? full[t0 * n_out + bad] : 0.0);
            g_checked += nt * n_out;
        }
    /* token by token (the decode path) == batch, bitwise */
    for (int64_t tt = 0; tt < n_tok_max; tt += 5) {
        tnd_cpu_matmul_f32(pools[n_pools - 1], t, W, n_in, n_out, x + tt * n_in, 1, one);
        CHECK(!memcmp(one, full + tt * n_out, sizeof(float) * (size_t)n_out), "%s %s: token %ld alone differs",
              k_isa[isa], tr->name, (long)tt);
    }
    /* a row range writes exactly its rows */
    int64_t r0 = n_out / 3, r1 = n_out - 2, nt = 5;
    for (int64_t i = 0; i < n_out * nt; i++) y[i] = -7.0f;
    tnd_cpu_matmul_f32_rows(pools[n_pools - 1], t, W, n_in, n_out, r0, r1, x, nt, y);
    for (int64_t tt = 0; tt < nt; tt++)
        for (int64_t r = 0; r < n_out; r++) {
            float v = y[tt * n_out + r];
            if (r >= r0 && r < r1)
                CHECK(!memcmp(&v, &full[tt * n_out + r], 4), "%s %s rows [%lld,%lld): y[%lld][%lld] differs",
                      k_isa[isa], tr->name, (long long)r0, (long long)r1, (long long)tt, (long long)r);
            else CHECK(v == -7.0f, "%s %s rows: wrote outside at r=%lld", k_isa[isa], tr->name, (long long)r);
        }
    free(W), free(x), free(ref), free(S), free(y), free(full), free(one);
}

/* More tokens than one token group of the driver (1024): every token still
 * bit-identical with its one-token product. */
static void test_many_tokens(tnd_pool *pool, int isa, tnd_type t, int64_t n_in) {
    const int64_t n_out = 5, n_tok = 1100;
    char *W = make_w(t, n_in, n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok)), *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    float one[5];
    fill_x(x, n_in * n_tok);
    tnd_cpu_matmul_f32(pool, t, W, n_in, n_out, x, n_tok, y);
    for (int64_t tt = 0; tt < n_tok; tt += 37) {
        tnd_cpu_matmul_f32(pool, t, W, n_in, n_out, x + tt * n_in, 1, one);
        CHECK(!memcmp(one, y + tt * n_out, sizeof one), "%s %s: token %lld of %lld differs from its one-token product",
              k_isa[isa], tnd_type_name(t), (long long)tt, (long long)n_tok);
    }
    free(W), free(x), free(y);
}

int main(void) {
    tc_rng = 0x243f6a8885a308d3ull;
    tnd_pool *pools[3] = {NULL, tnd_pool_new(2), tnd_pool_new(3)};
    if (!pools[1] || !pools[2]) {
        fprintf(stderr, "pool: %s\n", tnd_last_error());
        return 1;
    }
    tnd_cpu_isa_id best = tnd_cpu_isa_best();
    for (int isa = 0; isa <= 2; isa++) {
        if (isa > (int)best) {
            printf("%s: not supported by this CPU, skipped\n", k_isa[isa]);
            continue;
        }
        if (!tnd_cpu_isa_force((tnd_cpu_isa_id)isa)) {
            CHECK(0, "cannot force %s", k_isa[isa]);
            continue;
        }
        long before = g_checked;
        test_dequant(isa);
        for (size_t ti = 0; ti < TND_ARRAY_LEN(k_types); ti++) {
            tnd_type t = k_types[ti];
            int64_t bs = tnd_type_traits_get(t)->block_size;
            /* below one K chunk; several chunks (crossing the decode chunk of
             * 1024 too); for 32-blocks not a multiple of 256; for floats odd */
            int64_t small = bs == 1 ? 37 : bs == 32 ? 96 : 256;
            int64_t large = bs == 1 ? 1037 : bs == 32 ? 1056 : 1280;
            test_shape(pools, 3, isa, t, small, 37);
            test_shape(pools, 3, isa, t, large, 19);
            test_shape(pools, 3, isa, t, bs == 1 ? 8 : bs, 1);
            if (bs == 1) { /* rows of a multiple of 32: the fused decode kernels of F16 / BF16 */
                test_shape(pools, 3, isa, t, 160, 37);
                test_shape(pools, 3, isa, t, 1088, 19);
            }
        }
        test_many_tokens(pools[1], isa, TND_TYPE_F32, 37);
        test_many_tokens(pools[1], isa, TND_TYPE_Q8_0, 64);
        /* unsupported type: NaN in the rows asked for */
        float y[4] = {0, 0, 0, 0}, x[32] = {0};
        uint8_t w[64] = {0};
        tnd_cpu_matmul_f32(pools[1], TND_TYPE_IQ2_XXS, w, 32, 2, x, 2, y);
        CHECK(isnan(y[0]) && isnan(y[3]), "%s: unsupported type did not give NaN", k_isa[isa]);
        printf("%s (L=%d): %ld values checked\n", k_isa[isa], tnd_cpu_matmul_f32_lanes(), g_checked - before);
    }
    tnd_cpu_isa_force(best);
    tnd_pool_free(pools[1]);
    tnd_pool_free(pools[2]);
    return tc_summary();
}
