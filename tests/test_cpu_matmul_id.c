/* The CPU backend's expert matmul (MATMUL_ID) over rounds of several tokens:
 * pairs grouped by expert, either in one parallel region over every used
 * expert's rows (few tokens per expert: batched decode) or an expert's
 * matmul at a time (prefill). Both must give, bit for bit, what a plain
 * matmul of each expert over the tokens that chose it gives (in the exact
 * mode, what each token alone gives), leave skipped pairs (id -1) untouched,
 * and agree with a double-precision dot product of the dequantized rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu/matmul.h"
#include "cpu/matmul_f32.h"
#include "cpu/pool.h"
#include "quant/quant.h"

static const float POISON = -12345.0f;

/* n_exp experts of n_out x n_in, type t, from random floats through the type's quantizer */
static void *make_experts(tnd_type t, int64_t n_in, int64_t rows) {
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    size_t rs = tnd_row_size(t, n_in);
    uint8_t *w = tc_xmalloc(rs * (size_t)rows);
    float *f = tc_xmalloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < rows; r++) {
        tc_fill_unif(f, (size_t)n_in, -1, 1);
        tr->from_float(f, w + (size_t)r * rs, n_in);
    }
    free(f);
    return w;
}

static tnd_tensor tens(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    tnd_tensor x = {.type = t, .data = data, .ne = {n0, n1, n2, 1}};
    return x;
}

static void run_case(tnd_backend *cpu, tnd_pool *pool, bool int8, tnd_type t, int64_t n_in, int64_t n_out,
                     int64_t n_exp, int n_used, int64_t n_tok) {
    tnd_backend_cpu_set_int8(cpu, int8);
    const size_t w_slice = tnd_row_size(t, n_in) * (size_t)n_out;
    char *W = make_experts(t, n_in, n_out * n_exp);
    float *x = tc_xmalloc(sizeof(float) * (size_t)(n_in * n_tok));
    tc_fill_unif(x, (size_t)(n_in * n_tok), -1, 1);
    int32_t *ids = tc_xmalloc(sizeof(int32_t) * (size_t)(n_used * n_tok));
    for (int64_t k = 0; k < n_tok; k++)
        for (int u = 0; u < n_used; u++) {
            int32_t e;
            bool dup;
            do { /* distinct per token; a skewed choice (low ids hot), and a few pairs skipped */
                uint64_t r = tc_xorshift();
                e = (int32_t)((r % (uint64_t)n_exp) * ((r >> 32) % (uint64_t)n_exp) / (uint64_t)n_exp);
                dup = false;
                for (int v = 0; v < u; v++) dup |= ids[k * n_used + v] == e;
            } while (dup);
            ids[k * n_used + u] = (tc_xorshift() % 11 == 0) ? -1 : e;
        }
    const size_t ny = (size_t)(n_out * n_used * n_tok);
    float *y = tc_xmalloc(sizeof(float) * ny), *ref = tc_xmalloc(sizeof(float) * ny);
    for (size_t i = 0; i < ny; i++) y[i] = ref[i] = POISON;

    tnd_op op = {.kind = TND_OP_MATMUL_ID};
    op.in[0] = tens(W, t, n_in, n_out, n_exp);
    op.in[1] = tens(x, TND_TYPE_F32, n_in, 1, n_tok);
    op.in[2] = tens(ids, TND_TYPE_I32, n_used, n_tok, 1);
    op.out[0] = tens(y, TND_TYPE_F32, n_out, n_used, n_tok);
    CHECK_ST(tnd_backend_op_run(cpu, &op, NULL));

    /* the reference: each expert's plain matmul over its tokens, in token order */
    float *gx = tc_xmalloc(sizeof(float) * (size_t)(n_in * n_tok)), *gy = tc_xmalloc(sizeof(float) * (size_t)(n_out * n_tok));
    int32_t *who = tc_xmalloc(sizeof(int32_t) * (size_t)(n_used * n_tok));
    for (int64_t e = 0; e < n_exp; e++) {
        int64_t n = 0;
        for (int64_t i = 0; i < n_used * n_tok; i++)
            if (ids[i] == e) {
                who[n] = (int32_t)i;
                memcpy(gx + n * n_in, x + (i / n_used) * n_in, sizeof(float) * (size_t)n_in);
                n++;
            }
        if (!n) continue;
        if (int8) tnd_cpu_matmul(pool, t, W + (size_t)e * w_slice, n_in, n_out, gx, n, gy);
        else tnd_cpu_matmul_f32(pool, t, W + (size_t)e * w_slice, n_in, n_out, gx, n, gy);
        for (int64_t r = 0; r < n; r++) memcpy(ref + (size_t)who[r] * n_out, gy + r * n_out, sizeof(float) * (size_t)n_out);
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s %lldx%lld, %lld experts, %d used, %lld tokens", int8 ? "Q8" : "exact",
             tnd_type_name(t), (long long)n_in, (long long)n_out, (long long)n_exp, n_used, (long long)n_tok);
    CHECK(!memcmp(y, ref, sizeof(float) * ny), "%s: differs from each expert's own matmul", what);

    /* and against double-precision dots of the dequantized rows */
    float *row = tc_xmalloc(sizeof(float) * (size_t)n_in);
    double worst = 0;
    int skipped_ok = 1;
    for (int64_t i = 0; i < n_used * n_tok; i++) {
        const float *yi = y + (size_t)i * n_out;
        if (ids[i] < 0) {
            for (int64_t r = 0; r < n_out; r++) skipped_ok &= yi[r] == POISON;
            continue;
        }
        for (int64_t r = 0; r < n_out; r++) {
            tnd_cpu_get_row(t, W + (size_t)ids[i] * w_slice, n_in, r, row);
            double d = 0, mag = 0;
            for (int64_t k = 0; k < n_in; k++) {
                d += (double)row[k] * x[(i / n_used) * n_in + k];
                mag += fabs((double)row[k] * x[(i / n_used) * n_in + k]);
            }
            double err = fabs(yi[r] - d) / (mag + 1e-6);
            if (err > worst) worst = err;
        }
    }
    CHECK(skipped_ok, "%s: a skipped pair's rows were written", what);
    /* relative to the sum of |terms|: f32 accumulation, or 8-bit activations (~1/127 per term, averaging down) */
    CHECK(worst < (int8 ? 2e-3 : 1e-5), "%s: %.3g from the double-precision reference", what, worst);
    free(row), free(W), free(x), free(ids), free(y), free(ref), free(gx), free(gy), free(who);
}

int main(void) {
    tnd_pool *pool = tnd_pool_new(2);
    tnd_backend *cpu = NULL;
    CHECK(pool != NULL, "pool");
    CHECK_ST(tnd_backend_cpu_new(pool, 0, &cpu));
    if (!cpu) return tc_summary();
    const tnd_type types[] = {TND_TYPE_Q4_K, TND_TYPE_Q4_0, TND_TYPE_Q8_0};
    /* 2..16 tokens: the grouped region; 96 tokens of 8 used of 16: ~48 a used expert, an expert at a time */
    const int64_t toks[] = {2, 5, 16, 96};
    for (int i8 = 0; i8 < 2; i8++)
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
            for (size_t k = 0; k < sizeof toks / sizeof *toks; k++)
                run_case(cpu, pool, i8, types[ti], 512, 200, 16, 8, toks[k]);
    tnd_backend_free(cpu);
    tnd_pool_free(pool);
    return tc_summary();
}
