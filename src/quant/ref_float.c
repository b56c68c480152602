/* Float formats: F32, F16, BF16. Their dots take F32 activations (no
 * activation rounding, so no loss beyond the weights' own) and accumulate in
 * double: the reference sets the accuracy SIMD float kernels are held to. */
#include "quant/quant.h"

void tnd_ref_to_float_f32(const void *x, float *y, int64_t k) { memcpy(y, x, (size_t)k * sizeof(float)); }
void tnd_ref_from_float_f32(const float *x, void *y, int64_t k) { memcpy(y, x, (size_t)k * sizeof(float)); }

void tnd_ref_to_float_f16(const void *x, float *y, int64_t k) {
    const uint16_t *h = (const uint16_t *)x;
    for (int64_t i = 0; i < k; i++) y[i] = tnd_fp16_to_fp32(h[i]);
}
void tnd_ref_from_float_f16(const float *x, void *y, int64_t k) {
    uint16_t *h = (uint16_t *)y;
    for (int64_t i = 0; i < k; i++) h[i] = tnd_fp32_to_fp16(x[i]);
}

void tnd_ref_to_float_bf16(const void *x, float *y, int64_t k) {
    const uint16_t *h = (const uint16_t *)x;
    for (int64_t i = 0; i < k; i++) y[i] = tnd_bf16_to_fp32(h[i]);
}
void tnd_ref_from_float_bf16(const float *x, void *y, int64_t k) {
    uint16_t *h = (uint16_t *)y;
    for (int64_t i = 0; i < k; i++) h[i] = tnd_fp32_to_bf16(x[i]);
}

float tnd_ref_vec_dot_f32_f32(int64_t n, const void *x, const void *y) {
    const float *a = (const float *)x, *b = (const float *)y;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * (double)b[i];
    return (float)acc;
}

float tnd_ref_vec_dot_f16_f32(int64_t n, const void *x, const void *y) {
    const uint16_t *a = (const uint16_t *)x;
    const float *b = (const float *)y;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)tnd_fp16_to_fp32(a[i]) * (double)b[i];
    return (float)acc;
}

float tnd_ref_vec_dot_bf16_f32(int64_t n, const void *x, const void *y) {
    const uint16_t *a = (const uint16_t *)x;
    const float *b = (const float *)y;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)tnd_bf16_to_fp32(a[i]) * (double)b[i];
    return (float)acc;
}
