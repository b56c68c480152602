/* The CUDA block-format decoders (src/cuda/common.cuh, host+device) against
 * the scalar references of quant/ (to_float), on the host: runs in CI without
 * a GPU. Every element of random blocks of every format; odd row lengths for
 * the float formats (partial last sub). Tolerance: 1e-6 relative (the same
 * a*q + b in f32; a fused multiply-add may round once instead of twice). */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "check.h"
#include "cuda/common.cuh"
#include "quant/quant.h"
static void put16(uint8_t *p, float v) { uint16_t h = tnd_fp32_to_fp16(v); memcpy(p, &h, 2); }
template <int TY> void check(int64_t n_in, int rows) {
    size_t rs = tnd_row_size((tnd_type)TY, n_in);
    uint8_t *w = (uint8_t *)aligned_alloc(64, (rs * rows + 63) / 64 * 64);
    for (size_t i = 0; i < rs * rows; i++) w[i] = (uint8_t)(tc_xorshift() >> 24);
    const tnd_type_traits *tr = tnd_type_traits_get(TY);
    if (TY == TND_TYPE_F32) for (int64_t i = 0; i < n_in * rows; i++) { float v = tc_unif(-1, 1); memcpy(w + 4 * i, &v, 4); }
    else if (TY == TND_TYPE_F16 || TY == TND_TYPE_BF16) for (int64_t i = 0; i < n_in * rows; i++) { float v = tc_unif(-1,1); uint16_t h = TY == TND_TYPE_F16 ? tnd_fp32_to_fp16(v) : tnd_fp32_to_bf16(v); memcpy(w + 2*i, &h, 2);} 
    else {
        size_t ts = tr->type_size;
        for (size_t b = 0; b < rs * rows / ts; b++) {
            uint8_t *p = w + b * ts; float d = tc_unif(0.002f, 0.02f), m = tc_unif(0.0005f, 0.01f);
            switch (TY) {
            case TND_TYPE_Q4_0: case TND_TYPE_Q5_0: case TND_TYPE_Q8_0: put16(p, d); break;
            case TND_TYPE_Q4_1: case TND_TYPE_Q5_1: put16(p, d); put16(p + 2, -m); break;
            case TND_TYPE_Q2_K: put16(p + 80, d); put16(p + 82, m); break;
            case TND_TYPE_Q3_K: put16(p + 108, d); break;
            case TND_TYPE_Q4_K: case TND_TYPE_Q5_K: put16(p, d); put16(p + 2, m); break;
            case TND_TYPE_Q6_K: put16(p + 208, d); break;
            case TND_TYPE_MXFP4: p[0] = (uint8_t)(119 + tc_xorshift() % 6); break;
            }
        }
    }
    float *ref = (float *)malloc(n_in * 4);
    int bad = 0;
    for (int r = 0; r < rows; r++) {
        tr->to_float(w + rs * r, ref, n_in);
        for (int64_t s = 0; s < (n_in + 31) / 32; s++) {
            sub32 o;
            load_sub<TY>(w + rs * r, s, n_in, o);
            for (int i = 0; i < 32 && s * 32 + i < n_in; i++) {
                float v = i < 16 ? o.a0 * o.q[i] + o.b0 : o.a1 * o.q[i] + o.b1;
                float want = ref[s * 32 + i];
                if (!(fabsf(v - want) <= 1e-6f * fabsf(want) + 1e-9f)) {
                    if (bad < 5) printf("%s row %d elem %lld: got %g want %g\n", tr->name, r, (long long)(s * 32 + i), v, want);
                    bad++;
                }
            }
        }
    }
    printf("%-6s n_in=%lld: %s (%d bad)\n", tr->name, (long long)n_in, bad ? "FAIL" : "ok", bad);
    free(w); free(ref);
    tc_count(bad == 0);
}
int main() {
    tc_rng = 12345;
    check<TND_TYPE_F32>(417, 5); check<TND_TYPE_F16>(417, 5); check<TND_TYPE_BF16>(417, 5);
    check<TND_TYPE_Q4_0>(416, 5); check<TND_TYPE_Q4_1>(416, 5); check<TND_TYPE_Q5_0>(416, 5);
    check<TND_TYPE_Q5_1>(416, 5); check<TND_TYPE_Q8_0>(416, 5); check<TND_TYPE_MXFP4>(416, 5);
    check<TND_TYPE_Q2_K>(768, 5); check<TND_TYPE_Q3_K>(768, 5); check<TND_TYPE_Q4_K>(768, 5);
    check<TND_TYPE_Q5_K>(768, 5); check<TND_TYPE_Q6_K>(768, 5);
    return tc_summary();
}
