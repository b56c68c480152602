/* AMX prefill kernels (cpu/matmul_amx.c) against the scalar int8 reference,
 * for Q4_0, Q8_0, Q4_1, Q4_K and Q6_K, on odd shapes: n_tok not a multiple of 16
 * (and below 16, through the kernel directly), n_out not a multiple of 16,
 * several block counts, 1 and 3 threads, row sub-ranges.
 *
 * Two builds of the same kernel body run here: the emulated one (tile
 * operations in C) everywhere, and the AMX one where the CPU has AMX (skipped
 * with a message otherwise).
 *
 * Reference: y[t][r] = traits->vec_dot(row r of W, from_float(x[t])).
 * Tolerance as in test_cpu_matmul: the integer part of every block is
 * exact, the float sum over blocks runs in another order (and with FMA),
 * so |err| <= (m + 16) eps S with S = sum |w_i a_i| (dequantized) and
 * m = n_in / 16. A wrong quant, scale, block, token or column moves the
 * result by about a whole term, far more than that.
 *
 * Weights come three ways: quantized from random floats; random block
 * bytes (every quant and scale pattern, including Q6_K's negative scales
 * down to -128 and Q4_K's 6-bit scales and mins up to 63) with sane d; and
 * extreme rows (+-1) against extreme activations (every quant at +-127). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/matmul.h"
#include "cpu/matmul_amx.h"
#include "cpu/matmul_impl.h"
#include "util.h"

static long g_checked; /* output entries compared */

enum { W_QUANT, W_BYTES, W_EXTREME };

/* Weights of one kind (see the top comment). */
static void make_weights(tnd_type wt, int kind, void *W, int64_t n_in, int64_t n_out) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t wrow = tnd_row_size(wt, n_in);
    if (kind == W_BYTES) {
        uint8_t *p = W;
        for (size_t i = 0; i < wrow * (size_t)n_out; i++) p[i] = (uint8_t)(tc_xorshift() >> 33);
        int64_t nb = n_in / tr->block_size * n_out;
        for (int64_t b = 0; b < nb; b++) {
            uint16_t d = tnd_fp32_to_fp16(0.001f + 0.02f * (tc_frand() + 1.0f));
            uint16_t d2 = tnd_fp32_to_fp16(0.001f + 0.01f * (tc_frand() + 1.0f));
            switch (wt) {
            case TND_TYPE_Q4_0: ((block_q4_0 *)W)[b].d = d; break;
            case TND_TYPE_Q8_0: ((block_q8_0 *)W)[b].d = d; break;
            case TND_TYPE_Q4_1: ((block_q4_1 *)W)[b].d = d, ((block_q4_1 *)W)[b].m = tnd_fp32_to_fp16(-8.0f * tnd_fp16_to_fp32(d2)); break;
            case TND_TYPE_Q4_K: ((block_q4_K *)W)[b].d = d, ((block_q4_K *)W)[b].dmin = d2; break;
            case TND_TYPE_Q6_K:
                ((block_q6_K *)W)[b].d = d;
                if (b % 3 == 0) ((block_q6_K *)W)[b].scales[b % 16] = -128; /* the widest sc * q */
                break;
            default: break;
            }
        }
        return;
    }
    float *wf = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        float sc = 0.05f + 0.1f * (float)(r % 7);
        for (int64_t i = 0; i < n_in; i++)
            wf[i] = kind == W_EXTREME
                        ? (r % 4 == 0 ? -1.0f : r % 4 == 1 ? 1.0f : r % 4 == 2 ? ((i / 16) % 2 ? 1.0f : -1.0f) : -0.5f)
                        : tc_frand() * sc * (1.0f + (float)((i / 32) % 3));
        tr->from_float(wf, (char *)W + (size_t)r * wrow, n_in);
    }
    free(wf);
}

static void make_x(float *x, int64_t n_in, int64_t n_tok, bool extreme) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n_in; i++) {
            float v = tc_frand();
            if ((i % 97) == 5) v *= 20.0f;
            if (extreme) v = t % 3 == 0 ? 1.0f : t % 3 == 1 ? -1.0f : (i % 2 ? 3.0f : -3.0f);
            x[t * n_in + i] = v;
        }
}

/* Reference y and error scale S; also the quantized activations. */
static void reference(tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                      char *xq, float *y, double *S) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    const tnd_type_traits *at = tnd_type_traits_get(tr->vec_dot_type);
    size_t wrow = tnd_row_size(wt, n_in), xrow = tnd_row_size(tr->vec_dot_type, n_in);
    float *wd = malloc((size_t)(n_in * n_out) * sizeof(float)), *ad = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) tr->to_float((const char *)W + r * wrow, wd + r * n_in, n_in);
    for (int64_t t = 0; t < n_tok; t++) {
        char *q = xq + t * xrow;
        at->from_float(x + t * n_in, q, n_in);
        at->to_float(q, ad, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            y[t * n_out + r] = tr->vec_dot(n_in, (const char *)W + r * wrow, q);
            double s = 0;
            for (int64_t i = 0; i < n_in; i++) s += fabs((double)wd[r * n_in + i] * ad[i]);
            S[t * n_out + r] = s;
        }
    }
    free(wd);
    free(ad);
}

/* The kernel's per-chunk activation aux, built here independently of the
 * driver: scale of the chunk's block, sum of its 16 quants, their product. */
static void make_aux(tnd_type act, const char *xq, size_t xrow, int64_t n_in, int64_t n_tok, tnd_act_aux *aux) {
    int64_t nc = n_in / TND_CHUNK;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < nc; c++) {
            float da;
            int32_t sa = 0;
            if (act == TND_TYPE_Q8_K) {
                const block_q8_K *b = (const block_q8_K *)(xq + t * xrow) + c / 16;
                da = b->d;
                for (int i = 0; i < 16; i++) sa += b->qs[16 * (c % 16) + i];
            } else if (act == TND_TYPE_Q8_1) {
                /* Q4_1 takes the block's stored s (d * sum, rounded to half)
                 * as the reference does: dsa on the first chunk, 0 on the second */
                const block_q8_1 *b = (const block_q8_1 *)(xq + t * xrow) + c / 2;
                da = tnd_fp16_to_fp32(b->d);
                for (int i = 0; i < 16; i++) sa += b->qs[16 * (c % 2) + i];
                aux[t * nc + c] = (tnd_act_aux){.da = da, .dsa = c % 2 ? 0.0f : tnd_fp16_to_fp32(b->s), .sa = sa};
                continue;
            } else {
                const block_q8_0 *b = (const block_q8_0 *)(xq + t * xrow) + c / 2;
                da = tnd_fp16_to_fp32(b->d);
                for (int i = 0; i < 16; i++) sa += b->qs[16 * (c % 2) + i];
            }
            aux[t * nc + c] = (tnd_act_aux){.da = da, .dsa = da * (float)sa, .sa = sa};
        }
}

static int compare(const char *what, tnd_type wt, int64_t n_in, int64_t n_out, int64_t n_tok, const float *y,
                   int64_t ys, const float *yr, const double *S, int64_t r0, int64_t r1) {
    int bad = 0;
    double tol_k = (double)(n_in / 16 + 16) * FLT_EPSILON;
    for (int64_t t = 0; t < n_tok && bad < 3; t++)
        for (int64_t r = r0; r < r1 && bad < 3; r++) {
            float got = y[t * ys + (r - r0)], want = yr[t * n_out + r];
            double tol = tol_k * S[t * n_out + r];
            g_checked++;
            if (!(fabs((double)got - want) <= tol)) {
                CHECK(0, "%s %s n_in=%lld n_out=%lld n_tok=%lld: y[%lld][%lld]=%.9g want %.9g (tol %.3g)", what,
                      tnd_type_traits_get(wt)->name, (long long)n_in, (long long)n_out, (long long)n_tok,
                      (long long)t, (long long)r, got, want, tol);
                bad++;
            }
        }
    return bad;
}

/* One (type, shape, weight kind) through the driver (every thread count,
 * full and partial row ranges) and through the kernel directly (all tokens,
 * and fewer than 16). */
static void test_case(tnd_amx_mode mode, tnd_pool **pools, int npools, tnd_type wt, int64_t n_in, int64_t n_out,
                      int64_t n_tok, int kind) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t wrow = tnd_row_size(wt, n_in), xrow = tnd_row_size(tr->vec_dot_type, n_in);
    void *W = malloc(wrow * (size_t)n_out);
    make_weights(wt, kind, W, n_in, n_out);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof(float));
    make_x(x, n_in, n_tok, kind == W_EXTREME);
    char *xq = malloc(xrow * (size_t)n_tok);
    float *yr = malloc((size_t)(n_out * n_tok) * sizeof(float)), *y = malloc((size_t)(n_out * n_tok) * sizeof(float));
    double *S = malloc((size_t)(n_out * n_tok) * sizeof(double));
    reference(wt, W, n_in, n_out, x, n_tok, xq, yr, S);
    const char *mname = mode == TND_AMX_HW ? "amx" : "emu";

    CHECK(tnd_cpu_amx_force(mode), "force mode %s", mname);
    CHECK(tnd_cpu_amx_select(wt, n_tok) == tnd_cpu_amx_kernel(wt, mode) && tnd_cpu_amx_kernel(wt, mode),
          "%s: driver does not pick the AMX kernel for %s at n_tok=%lld", mname, tr->name, (long long)n_tok);
    for (int p = 0; p < npools; p++)
        for (int pass = 0; pass < 2; pass++) {
            int64_t r0 = pass ? n_out / 3 : 0, r1 = pass ? n_out - n_out / 4 : n_out;
            for (int64_t i = 0; i < n_out * n_tok; i++) y[i] = -12345.0f;
            if (pass) tnd_cpu_matmul_rows(pools[p], wt, W, n_in, n_out, r0, r1, x, n_tok, y);
            else tnd_cpu_matmul(pools[p], wt, W, n_in, n_out, x, n_tok, y);
            char what[64];
            snprintf(what, sizeof what, "%s driver threads=%d rows=[%lld,%lld)", mname, tnd_pool_size(pools[p]),
                     (long long)r0, (long long)r1);
            compare(what, wt, n_in, n_out, n_tok, y + r0, n_out, yr, S, r0, r1);
            int outside = 0;
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < n_out; r++)
                    if ((r < r0 || r >= r1) && y[t * n_out + r] != -12345.0f) outside++;
            CHECK(!outside, "%s %s: %d entries written outside the row range", what, tr->name, outside);
        }
    CHECK(tnd_cpu_amx_force(TND_AMX_OFF), "mode off");

    /* The kernel directly: a row range that is not a multiple of 16 and
     * starts inside the matrix, y with a wider stride, and n_tok below a
     * tile (zero-padded copy) as well as all tokens. */
    tnd_gemm_kernel k = tnd_cpu_amx_kernel(wt, mode);
    tnd_act_aux *aux = malloc((size_t)(n_in / 16 * n_tok) * sizeof(tnd_act_aux));
    make_aux(tr->vec_dot_type, xq, xrow, n_in, n_tok, aux);
    int64_t r0 = n_out > 3 ? 3 : 0, nr = n_out - r0, ys = nr + 5;
    const int64_t nts[] = {1, 5, 15, n_tok};
    float *yk = malloc((size_t)(ys * n_tok) * sizeof(float));
    for (size_t i = 0; i < TND_ARRAY_LEN(nts); i++) {
        int64_t nt = nts[i] < n_tok ? nts[i] : n_tok;
        for (int64_t j = 0; j < ys * n_tok; j++) yk[j] = -12345.0f;
        k(n_in, (const char *)W + (size_t)r0 * wrow, wrow, nr, xq, xrow, aux, nt, yk, ys);
        char what[64];
        snprintf(what, sizeof what, "%s kernel nt=%lld rows=[%lld,%lld)", mname, (long long)nt, (long long)r0,
                 (long long)n_out);
        compare(what, wt, n_in, n_out, nt, yk, ys, yr, S, r0, n_out);
        int outside = 0;
        for (int64_t j = 0; j < ys * n_tok; j++) {
            int64_t t = j / ys, c = j % ys;
            if ((t >= nt || c >= nr) && yk[j] != -12345.0f) outside++;
        }
        CHECK(!outside, "%s %s: %d entries written outside", what, tr->name, outside);
    }
    free(yk);
    free(aux);
    free(W);
    free(x);
    free(xq);
    free(yr);
    free(y);
    free(S);
}

static void run_mode(tnd_amx_mode mode, tnd_pool **pools, int npools) {
    /* (blocks of the weight type in a row, n_out, n_tok): odd block counts
     * test the two-blocks-per-step loop's tail, n_out the partial panel,
     * n_tok the shifted last token block. */
    static const struct { int nb; int n_out, n_tok; } shapes[] = {
        {1, 5, 16}, {3, 37, 17}, {8, 16, 37}, {13, 70, 50}, {2, 33, 32}, {5, 21, 16},
    };
    const tnd_type types[] = {TND_TYPE_Q4_0, TND_TYPE_Q8_0, TND_TYPE_Q4_1, TND_TYPE_Q4_K, TND_TYPE_Q6_K};
    for (size_t ti = 0; ti < TND_ARRAY_LEN(types); ti++) {
        const tnd_type_traits *tr = tnd_type_traits_get(types[ti]);
        for (size_t s = 0; s < TND_ARRAY_LEN(shapes); s++) {
            /* K-quant rows of 13 super-blocks would be slow in the reference
             * without adding a case: cap at 4 */
            int nb = tr->block_size == TND_QK_K && shapes[s].nb > 4 ? shapes[s].nb % 4 + 1 : shapes[s].nb;
            for (int kind = 0; kind < 3; kind++)
                test_case(mode, pools, npools, types[ti], (int64_t)nb * tr->block_size, shapes[s].n_out,
                          shapes[s].n_tok, kind);
        }
    }
    /* A panel group larger than AMX_PANELS_MAX panels (several groups per
     * thread) and many token blocks. */
    test_case(mode, pools, 1, TND_TYPE_Q4_0, 64, 16 * 9 + 7, 70, W_QUANT);
    test_case(mode, pools, 1, TND_TYPE_Q6_K, 256, 16 * 9 + 1, 33, W_BYTES);
}

int main(void) {
    tc_rng = 0x2545f4914f6cdd1dull;
    printf("ISA %s, AMX %s\n", tnd_cpu_isa(), tnd_cpu_amx_state());
    /* selection rules */
    CHECK(tnd_cpu_amx_force(TND_AMX_EMU), "force emu");
    CHECK(tnd_cpu_amx_select(TND_TYPE_Q4_K, TND_AMX_MIN_TOK) != NULL, "no kernel at the threshold");
    CHECK(tnd_cpu_amx_select(TND_TYPE_Q4_K, TND_AMX_MIN_TOK - 1) == NULL, "kernel below the threshold");
    CHECK(tnd_cpu_amx_select(TND_TYPE_Q5_0, 64) == NULL, "kernel for a type without one");
    CHECK(tnd_cpu_amx_force(TND_AMX_OFF), "force off");
    CHECK(tnd_cpu_amx_select(TND_TYPE_Q4_K, 64) == NULL, "kernel while off");
    CHECK(tnd_cpu_amx_force(TND_AMX_HW) == tnd_cpu_amx_supported(), "force hw must follow support");
    tnd_cpu_amx_force(TND_AMX_OFF);

    tnd_pool *pools[2] = {tnd_pool_new(1), tnd_pool_new(3)};
    if (!pools[0] || !pools[1]) {
        fprintf(stderr, "pool: %s\n", tnd_last_error());
        return 1;
    }
    run_mode(TND_AMX_EMU, pools, 2);
    printf("emulated tiles: %ld entries checked, %d failures\n", g_checked, tc_fails);
    if (tnd_cpu_amx_supported()) {
        long before = g_checked;
        int fb = tc_fails;
        run_mode(TND_AMX_HW, pools, 2);
        printf("AMX: %ld entries checked, %d failures\n", g_checked - before, tc_fails - fb);
    } else {
        printf("AMX hardware test skipped: AMX %s\n", tnd_cpu_amx_state());
    }
    tnd_pool_free(pools[0]);
    tnd_pool_free(pools[1]);
    return tc_summary();
}
