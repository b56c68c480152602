/* The double-precision reference of causal attention for the CUDA tests
 * (test_cuda_ops.c, test_cuda_attn_tc.cu): one query, every head. */
#ifndef TND_TEST_ATTN_REF_H
#define TND_TEST_ATTN_REF_H

#include <math.h>
#include <stdint.h>

#include "quant/quant.h"

/* q: [n_head][hd] at position pos over f16 cache rows K, V ([..][row]): it
 * sees rows 0..pos (the last `window` of them when window > 0); scores
 * scaled, then soft-capped when softcap > 0; into ref [n_head][hd]. p:
 * pos + 1 doubles of room. */
static inline void tc_ref_attn_query(const float *q, const uint16_t *K, const uint16_t *V, int64_t row, int n_head,
                                     int n_kv, int hd, int64_t pos, float scale, float softcap, int window, double *p,
                                     double *ref) {
    const int ratio = n_head / n_kv;
    const int64_t nvis = pos + 1, lo = window > 0 && nvis - window > 0 ? nvis - window : 0; /* rows > pos - window */
    for (int h = 0; h < n_head; h++) {
        const int g = h / ratio;
        const float *qh = q + (int64_t)h * hd;
        double m = -INFINITY, l = 0;
        for (int64_t j = lo; j < nvis; j++) {
            double s = 0;
            for (int d = 0; d < hd; d++) s += (double)qh[d] * tnd_fp16_to_fp32(K[j * row + g * hd + d]);
            s *= scale;
            if (softcap > 0) s = softcap * tanh(s / softcap);
            p[j] = s;
            m = fmax(m, p[j]);
        }
        for (int64_t j = lo; j < nvis; j++) l += p[j] = exp(p[j] - m);
        for (int d = 0; d < hd; d++) {
            double a = 0;
            for (int64_t j = lo; j < nvis; j++) a += p[j] * tnd_fp16_to_fp32(V[j * row + g * hd + d]);
            ref[(int64_t)h * hd + d] = a / l;
        }
    }
}

#endif
