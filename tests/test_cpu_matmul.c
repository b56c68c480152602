/* CPU matmul against the quant/ references, for every ISA this machine has
 * (scalar, AVX2, AVX-512), every supported weight type, odd shapes, and
 * several thread counts.
 *
 * Reference: y[t][r] = traits->vec_dot(row r of W, from_float(x[t])), the
 * scalar integer path. Tolerances:
 *   - activation quantizers (SIMD vs reference from_float): bit-exact; they
 *     do the same IEEE divisions, products and round-half-away.
 *   - scalar ISA: bit-exact (it calls the reference vec_dot).
 *   - SIMD ISAs: the integer part of each block is exact, but the float sum
 *     over blocks is done in another order (and with FMA), so results may
 *     differ by the rounding of a sum of m terms: |err| <= 2 m eps S with
 *     S = sum |w_i a_i| (dequantized, in double) and m the number of float
 *     additions (n/16: the prefill kernels sum per 16-element chunk; n/8
 *     lanes for float types, whose reference sums in double). We allow
 *     (m + 16) * eps * S. A wrong quant, scale or block
 *     index moves the result by about one term, far more than that.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/matmul.h"
#include "cpu/matmul_impl.h"
#include "util.h"

static long g_checked; /* outputs compared */

/* Activations shaped like a transformer's: mostly small, a few outliers. */
static void fill_x(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = tc_frand();
        if ((i % 97) == 5) x[i] *= 20.0f;
    }
}

static const tnd_type k_types[] = {
    TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1, TND_TYPE_Q5_0,
    TND_TYPE_Q5_1, TND_TYPE_Q8_0, TND_TYPE_Q2_K, TND_TYPE_Q3_K, TND_TYPE_Q4_K, TND_TYPE_Q5_K,
    TND_TYPE_Q6_K, TND_TYPE_MXFP4,
};

/* Reference y and the error scale S for one (W, x) pair. */
static void reference(tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                      float *y, double *S) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    const tnd_type_traits *at = tnd_type_traits_get(tr->vec_dot_type);
    size_t wrow = tnd_row_size(wt, n_in), xrow = tnd_row_size(tr->vec_dot_type, n_in);
    void *xq = malloc(xrow);
    float *wd = malloc((size_t)n_in * sizeof(float)), *ad = malloc((size_t)n_in * sizeof(float));
    for (int64_t t = 0; t < n_tok; t++) {
        at->from_float(x + t * n_in, xq, n_in);
        at->to_float(xq, ad, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            const void *w = (const char *)W + r * wrow;
            y[t * n_out + r] = tr->vec_dot(n_in, w, xq);
            tr->to_float(w, wd, n_in);
            double s = 0;
            for (int64_t i = 0; i < n_in; i++) s += fabs((double)wd[i] * ad[i]);
            S[t * n_out + r] = s;
        }
    }
    free(xq);
    free(wd);
    free(ad);
}

/* A quantized block of random bytes with its float scales set to finite
 * values of a sane size (an E8M0 exponent near 1), so that every field
 * takes values the reference quantizer never writes (Q3_K's positive
 * scales, all of Q4_K's 6-bit scales and mins, ...). */
static void random_block(tnd_type t, uint8_t *b, size_t bs) {
    for (size_t i = 0; i < bs; i++) b[i] = (uint8_t)tc_xorshift();
    size_t f16[2] = {SIZE_MAX, SIZE_MAX}; /* offsets of the fp16 scale fields */
    switch (t) {
    case TND_TYPE_Q4_0: case TND_TYPE_Q5_0: case TND_TYPE_Q8_0: case TND_TYPE_Q4_K: case TND_TYPE_Q5_K:
    case TND_TYPE_Q4_1: case TND_TYPE_Q5_1:
        f16[0] = 0;
        if (t == TND_TYPE_Q4_1 || t == TND_TYPE_Q5_1 || t == TND_TYPE_Q4_K || t == TND_TYPE_Q5_K) f16[1] = 2;
        break;
    case TND_TYPE_Q2_K: f16[0] = 80, f16[1] = 82; break;
    case TND_TYPE_Q3_K: f16[0] = 108; break;
    case TND_TYPE_Q6_K: f16[0] = 208; break;
    case TND_TYPE_MXFP4: b[0] = (uint8_t)(124 + tc_xorshift() % 8); break;
    default: break;
    }
    for (int k = 0; k < 2; k++)
        if (f16[k] != SIZE_MAX) {
            const uint16_t h = tnd_fp32_to_fp16(tc_unif(0.001f, 0.05f) * (tc_xorshift() % 2 ? 1.0f : -1.0f));
            memcpy(b + f16[k], &h, 2);
        }
}

/* mode: MODE_RANDOM, weights quantized from random floats; MODE_EXTREME,
 * constant rows and tokens (+-1), which drive every quant to the end of its
 * range and every activation to +-127, the case where 16-bit partial sums
 * in a kernel would overflow; MODE_BYTES, quantized blocks of random bytes
 * (random_block). */
enum { MODE_RANDOM, MODE_EXTREME, MODE_BYTES };
static void test_shape_x(tnd_pool *pool, tnd_cpu_isa_id isa, tnd_type wt, int64_t n_in, int64_t n_out,
                         int64_t n_tok, int mode);
static void test_shape(tnd_pool *pool, tnd_cpu_isa_id isa, tnd_type wt, int64_t n_in, int64_t n_out,
                       int64_t n_tok) {
    test_shape_x(pool, isa, wt, n_in, n_out, n_tok, MODE_RANDOM);
}
static void test_shape_x(tnd_pool *pool, tnd_cpu_isa_id isa, tnd_type wt, int64_t n_in, int64_t n_out,
                         int64_t n_tok, int mode) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    const bool extreme = mode == MODE_EXTREME;
    size_t wrow = tnd_row_size(wt, n_in);
    void *W = malloc(wrow * (size_t)n_out);
    float *wf = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; mode == MODE_BYTES && r < n_out; r++)
        for (int64_t i = 0; i < n_in / tr->block_size; i++)
            random_block(wt, (uint8_t *)W + r * wrow + i * tr->type_size, tr->type_size);
    for (int64_t r = 0; mode != MODE_BYTES && r < n_out; r++) {
        /* Row scales vary so blocks have different d. */
        float sc = 0.05f + 0.1f * (float)(r % 7);
        for (int64_t i = 0; i < n_in; i++)
            wf[i] = extreme ? (r % 4 == 0 ? -1.0f : r % 4 == 1 ? 1.0f : r % 4 == 2 ? ((i / 16) % 2 ? 1.0f : -1.0f) : -0.5f)
                            : tc_frand() * sc * (1.0f + (float)((i / 32) % 3));
        tr->from_float(wf, (char *)W + r * wrow, n_in);
    }
    float *x = malloc((size_t)(n_in * n_tok) * sizeof(float));
    fill_x(x, n_in * n_tok);
    if (extreme)
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n_in; i++) x[t * n_in + i] = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : (i % 2 ? 3.0f : -3.0f);
    float *yr = malloc((size_t)(n_out * n_tok) * sizeof(float));
    double *S = malloc((size_t)(n_out * n_tok) * sizeof(double));
    float *y = malloc((size_t)(n_out * n_tok) * sizeof(float));
    reference(wt, W, n_in, n_out, x, n_tok, yr, S);

    /* float additions: per 16-element chunk in the prefill kernels (n_tok >=
     * 8), per block otherwise; float types: per 8-lane step */
    int64_t m = tr->vec_dot_type == TND_TYPE_F32 ? n_in / 8 : n_in / 16;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: all rows; pass 1: a row range, other entries untouched */
        int64_t r0 = pass ? n_out / 3 : 0, r1 = pass ? n_out - n_out / 4 : n_out;
        for (int64_t i = 0; i < n_out * n_tok; i++) y[i] = -12345.0f;
        if (pass) tnd_cpu_matmul_rows(pool, wt, W, n_in, n_out, r0, r1, x, n_tok, y);
        else tnd_cpu_matmul(pool, wt, W, n_in, n_out, x, n_tok, y);
        int bad = 0;
        for (int64_t t = 0; t < n_tok && bad < 3; t++)
            for (int64_t r = 0; r < n_out && bad < 3; r++) {
                float got = y[t * n_out + r], want = yr[t * n_out + r];
                g_checked++;
                if (r < r0 || r >= r1) {
                    if (got != -12345.0f) {
                        CHECK(0, "%s %s rows [%lld,%lld): wrote outside at r=%lld", tnd_cpu_isa(), tr->name,
                              (long long)r0, (long long)r1, (long long)r);
                        bad++;
                    }
                    continue;
                }
                double tol = isa == TND_ISA_SCALAR ? 0.0 : (double)(m + 16) * FLT_EPSILON * S[t * n_out + r];
                if (!(fabs((double)got - want) <= tol)) {
                    CHECK(0, "%s %s n_in=%lld n_out=%lld n_tok=%lld threads=%d pass=%d: y[%lld][%lld]=%.9g want %.9g (tol %.3g)",
                          tnd_cpu_isa(), tr->name, (long long)n_in, (long long)n_out, (long long)n_tok,
                          tnd_pool_size(pool), pass, (long long)t, (long long)r, got, want, tol);
                    bad++;
                }
            }
    }

    /* get_row: the reference dequantization. */
    float *row = malloc((size_t)n_in * sizeof(float));
    int64_t rr = n_out / 2;
    tnd_cpu_get_row(wt, W, n_in, rr, row);
    tr->to_float((char *)W + rr * wrow, wf, n_in);
    CHECK(!memcmp(row, wf, (size_t)n_in * sizeof(float)), "%s get_row", tr->name);
    free(row);
    free(W);
    free(wf);
    free(x);
    free(yr);
    free(S);
    free(y);
}

/* The ISA's activation quantizers must reproduce from_float bit for bit,
 * including ties (x * (1/d) exactly k + 0.5) and all-zero blocks. */
static void test_act_quant(void) {
    const tnd_cpu_kernels *k = tnd_cpu_kernels_current();
    const tnd_type acts[] = {TND_TYPE_Q8_0, TND_TYPE_Q8_1, TND_TYPE_Q8_K};
    for (size_t a = 0; a < TND_ARRAY_LEN(acts); a++) {
        if (!k->quant[acts[a]]) continue;
        const tnd_type_traits *at = tnd_type_traits_get(acts[a]);
        int64_t n = 4 * TND_QK_K;
        float *x = malloc((size_t)n * sizeof(float));
        fill_x(x, n);
        for (int i = 0; i < 32; i++) x[i] = 0.0f;                      /* zero block */
        for (int i = 32; i < 64; i++) x[i] = (float)(i - 48) + 0.5f;  /* ties */
        x[33] = 127.0f;                                                 /* amax 127: d = 1 */
        for (int i = 256; i < 512; i++) x[i] = (float)((i % 9) - 4) * 0.5f; /* ties in Q8_K */
        x[300] = 127.0f;
        for (int i = 512; i < 544; i++) x[i] = 1e-30f * (float)(i - 520); /* tiny d: subnormal half */
        size_t rs = tnd_row_size(acts[a], n);
        char *q1 = calloc(1, rs), *q2 = calloc(1, rs);
        at->from_float(x, q1, n);
        k->quant[acts[a]](x, q2, n);
        CHECK(!memcmp(q1, q2, rs), "%s: %s activation quantizer differs from reference", tnd_cpu_isa(), at->name);
        free(x);
        free(q1);
        free(q2);
    }
}

/* Decode matmuls reuse the last quantized activations when the input is the
 * same array with the same contents: an input changed in place in between
 * (one value, or one token of several) must be quantized again. */
static void test_act_reuse(tnd_pool *pool) {
    const int64_t n_in = 96, n_out = 5, n_tok = 3;
    const tnd_type wt = TND_TYPE_Q4_1;
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t wrow = tnd_row_size(wt, n_in);
    char *W = malloc(wrow * (size_t)n_out);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof(float)), *y = malloc((size_t)(n_out * n_tok) * sizeof(float));
    float *yr = malloc((size_t)(n_out * n_tok) * sizeof(float));
    double *S = malloc((size_t)(n_out * n_tok) * sizeof(double));
    float *wf = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        fill_x(wf, n_in);
        tr->from_float(wf, W + r * wrow, n_in);
    }
    fill_x(x, n_in * n_tok);
    for (int k = 0; k < 4; k++) {
        if (k == 1) x[7] += 5.0f;                  /* one value */
        if (k == 2) x[2 * n_in + 40] = -x[2 * n_in + 40] - 1.0f; /* the last token's */
        for (int again = 0; again < 2; again++) { /* the second: reused */
            tnd_cpu_matmul(pool, wt, W, n_in, n_out, x, n_tok, y);
            reference(wt, W, n_in, n_out, x, n_tok, yr, S);
            for (int64_t i = 0; i < n_out * n_tok; i++)
                CHECK(fabs((double)y[i] - yr[i]) <= (n_in / 16 + 16) * FLT_EPSILON * S[i] + 1e-30,
                      "%s act reuse step %d/%d: y[%lld] %g want %g", tnd_cpu_isa(), k, again, (long long)i, y[i], yr[i]);
        }
    }
    free(W), free(x), free(y), free(yr), free(S), free(wf);
}

int main(int argc, char **argv) {
    tc_rng = 0x9e3779b97f4a7c15ull;
    bool quick = argc > 1 && !strcmp(argv[1], "quick");
    tnd_cpu_isa_id best = tnd_cpu_isa_best();
    printf("best ISA here: %d\n", (int)best);
    int nthreads[] = {1, 2, 3};
    tnd_pool *pools[3];
    for (int i = 0; i < 3; i++) pools[i] = tnd_pool_new(nthreads[i]);
    for (int isa = 0; isa <= (int)best; isa++) {
        CHECK(tnd_cpu_isa_force((tnd_cpu_isa_id)isa), "force isa %d", isa);
        printf("ISA %s\n", tnd_cpu_isa());
        test_act_quant();
        test_act_reuse(pools[1]);
        for (size_t ti = 0; ti < TND_ARRAY_LEN(k_types); ti++) {
            tnd_type wt = k_types[ti];
            const tnd_type_traits *tr = tnd_type_traits_get(wt);
            int64_t bs = tr->block_size;
            /* n_in: one block, and odd block counts (not multiples of 256 or
             * of a vector where the block allows it); for the 32-blocks also
             * even counts (the 512-bit kernels take blocks in pairs) that
             * are not multiples of 8, every block count % 8 (AVX2's Q4_1
             * steps of 8 blocks share the last one between 8 / (nb % 8)
             * rows). */
            int64_t nins_k[] = {256, 768, 1280};
            int64_t nins_32[] = {32, 96, 224, 800, 64, 576, 128, 160, 192};
            int64_t nins_1[] = {1, 7, 33, 301};
            int64_t *nins = bs == 256 ? nins_k : bs == 32 ? nins_32 : nins_1;
            int n_nins = (int)(bs == 256  ? TND_ARRAY_LEN(nins_k)
                               : bs == 32 ? TND_ARRAY_LEN(nins_32)
                                          : TND_ARRAY_LEN(nins_1));
            /* n_out: every remainder mod 4 (the decode kernels take rows in
             * groups of 4) on one thread and across thread shares */
            int64_t nouts[] = {1, 3, 6, 17, 37};
            int64_t ntoks[] = {1, 2, 3, 4, 5, 7, 17};
            long before = g_checked;
            for (int a = 0; a < n_nins; a++)
                for (int b = 0; b < 5; b++)
                    for (int c = 0; c < 7; c++) {
                        if (quick && (a + b + c) % 3) continue;
                        test_shape(pools[(a + b + c) % 3], (tnd_cpu_isa_id)isa, wt, nins[a], nouts[b], ntoks[c]);
                    }
            /* One larger shape with many tokens: exercises full register
             * tiles and several row tiles per thread. */
            test_shape(pools[1], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 515 : bs * (bs == 256 ? 3 : 9), 70, 33);
            /* Extremes, through the matvec and the prefill paths. */
            test_shape_x(pools[1], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 64 : bs * (bs == 256 ? 2 : 8), 9, 3, MODE_EXTREME);
            test_shape_x(pools[1], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 64 : bs * (bs == 256 ? 2 : 8), 9, 12, MODE_EXTREME);
            /* Extremes through the one-token (decode) kernels, whose int16
             * partial sums span several blocks: rows not a multiple of the
             * rows per pass, blocks not a multiple of the blocks per step. */
            test_shape_x(pools[1], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 64 : bs * (bs == 256 ? 3 : 19), 9, 1, MODE_EXTREME);
            /* and through the several-token ones (Q4_1's shared last step,
             * four tokens and one more) */
            test_shape_x(pools[1], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 64 : bs * (bs == 256 ? 3 : 19), 9, 5, MODE_EXTREME);
            /* Blocks of random bytes (quantized types): every field's
             * values, through the decode kernels (1, 4 and 5 tokens) and the
             * prefill ones (17) */
            const int64_t ntb[] = {1, 4, 5, 17};
            for (int c = 0; bs > 1 && c < 4; c++)
                test_shape_x(pools[c % 3], (tnd_cpu_isa_id)isa, wt, bs * (bs == 256 ? 3 : 9), 21, ntb[c], MODE_BYTES);
            /* the prefill's token tails of 2 and 3 (tiles of 4) */
            test_shape(pools[2], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 96 : bs * (bs == 256 ? 2 : 4), 37, 10);
            test_shape(pools[0], (tnd_cpu_isa_id)isa, wt, bs == 1 ? 96 : bs * (bs == 256 ? 2 : 4), 37, 11);
            /* a wide row (fewer row groups repacked at once than the most)
             * and more tokens than one block of the prefill's tokens */
            if (!quick) test_shape(pools[1], (tnd_cpu_isa_id)isa, wt, 4096, 40, 70);
            /* NULL pool. */
            test_shape(NULL, (tnd_cpu_isa_id)isa, wt, bs == 1 ? 65 : bs * 2, 19, 4);
            printf("  %-5s %ld outputs checked\n", tr->name, g_checked - before);
        }
    }
    for (int i = 0; i < 3; i++) tnd_pool_free(pools[i]);
    return tc_summary();
}
