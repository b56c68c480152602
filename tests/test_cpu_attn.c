/* CPU attention: the SIMD path (AVX2/F16C) against the scalar reference on
 * odd shapes — head_dim 16..256, GQA ratios, windows, soft-capping, chunk
 * and decode positions, odd thread counts. Products are summed in another
 * order, so the outputs agree to float rounding (bound stated below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "quant/quant.h"

int main(void) {
    tc_rng = 0x1234567;
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
