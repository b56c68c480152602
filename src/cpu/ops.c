/* Scalar CPU versions of the weightless ops (see ops.h). These are both the
 * reference and the engine's implementation, vectorized by the compiler
 * where it can — except attention's inner products over the f16 cache, which
 * have an AVX2/F16C path (prefill attention reads the cache once per query
 * and head; converting f16 one element at a time made it the slowest op). */
#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul_impl.h"
#include "quant/quant.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

bool tnd_cpu_ops_scalar; /* tests: force the scalar attention */

static float dot_f16_scalar(const float *q, const uint16_t *k, int n) {
    float s = 0;
    for (int d = 0; d < n; d++) s += q[d] * tnd_fp16_to_fp32(k[d]);
    return s;
}

static void axpy_f16_scalar(float *acc, float w, const uint16_t *v, int n) {
    for (int d = 0; d < n; d++) acc[d] += w * tnd_fp16_to_fp32(v[d]);
}

#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,f16c")))
/* n a multiple of 16: two accumulators, then a fixed-order horizontal sum */
TGT static float dot_f16_avx2(const float *q, const uint16_t *k, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int d = 0; d < n; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 8))), a1);
    }
    __m256 a = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

TGT static void axpy_f16_avx2(float *acc, float w, const uint16_t *v, int n) {
    __m256 wv = _mm256_set1_ps(w);
    for (int d = 0; d < n; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(wv, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))),
                                                  _mm256_loadu_ps(acc + d)));
}
#undef TGT
#endif

void tnd_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv;
}

/* The cos and sin of one position's angles, kept per thread: every layer
 * rotates q and k at the same positions with the same parameters, so a
 * round computes each table once instead of 2 x n_layer times (pow, cos and
 * sin per pair were a per-token cost that batched rounds do not share). A
 * few entries, as a batched round holds several sequences' positions. The
 * values are the same as computed in place. */
#define ROPE_SLOTS 8
#define ROPE_MAX_HALF 256
typedef struct rope_slot {
    int pos, n_rot;
    float base, scale;
    float cs[2 * ROPE_MAX_HALF];
} rope_slot;
static _Thread_local rope_slot g_rope[ROPE_SLOTS];
static _Thread_local int g_rope_init, g_rope_next;

static const float *rope_table(int pos, int n_rot, float freq_base, float freq_scale) {
    const int half = n_rot / 2;
    if (half > ROPE_MAX_HALF) return NULL;
    if (!g_rope_init) {
        for (int k = 0; k < ROPE_SLOTS; k++) g_rope[k].n_rot = -1;
        g_rope_init = 1;
    }
    for (int k = 0; k < ROPE_SLOTS; k++) {
        const rope_slot *e = &g_rope[k];
        if (e->pos == pos && e->n_rot == n_rot && e->base == freq_base && e->scale == freq_scale) return e->cs;
    }
    rope_slot *e = &g_rope[g_rope_next];
    g_rope_next = (g_rope_next + 1) % ROPE_SLOTS;
    e->pos = pos, e->n_rot = n_rot, e->base = freq_base, e->scale = freq_scale;
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * freq_scale * pow((double)freq_base, -2.0 * i / n_rot);
        e->cs[2 * i] = (float)cos(theta);
        e->cs[2 * i + 1] = (float)sin(theta);
    }
    return e->cs;
}

void tnd_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, int pos,
                  float freq_base, float freq_scale, bool neox) {
    int half = n_rot / 2;
    const float *cs = rope_table(pos, n_rot, freq_base, freq_scale);
    for (int i = 0; i < half; i++) {
        float c, s;
        if (cs) {
            c = cs[2 * i];
            s = cs[2 * i + 1];
        } else {
            double theta = (double)pos * freq_scale * pow((double)freq_base, -2.0 * i / n_rot);
            c = (float)cos(theta);
            s = (float)sin(theta);
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (int64_t)h * head_dim;
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

typedef struct {
    const tnd_attn_args *a;
} attn_task;

static void attn_worker(void *arg, int ith, int nth) {
    const tnd_attn_args *a = ((attn_task *)arg)->a;
    int hd = a->head_dim, n_kv = a->n_kv_head, group = a->n_head / a->n_kv_head;
    float (*dot)(const float *, const uint16_t *, int) = dot_f16_scalar;
    void (*axpy)(float *, float, const uint16_t *, int) = axpy_f16_scalar;
#if defined(__x86_64__)
    if (!tnd_cpu_ops_scalar && hd % 16 == 0 && tnd_cpu_isa_best() >= TND_ISA_AVX2) {
        dot = dot_f16_avx2;
        axpy = axpy_f16_avx2;
    }
#endif
    int64_t kv_stride = (int64_t)n_kv * hd;
    int n_pos_max = a->pos0 + a->n_tok;
    /* the thread's reusable scratch (a malloc per call, freed at once, can
     * make glibc trim and re-fault a thread's arena every decode step) */
    float *scores = tnd_cpu_tls_buf(1, sizeof(float) * (size_t)n_pos_max + sizeof(float) * (size_t)hd);
    if (!scores) return; /* cannot happen in practice; output stays unwritten */
    float *acc = scores + n_pos_max;
    int total = a->n_tok * a->n_head;
    for (int job = ith; job < total; job += nth) {
        int t = job / a->n_head, h = job % a->n_head, kvh = h / group;
        int pos = a->pos0 + t;
        int lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
        const float *q = a->q + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
        float mx = -INFINITY;
        for (int p = lo; p <= pos; p++) {
            float s = dot(q, a->k + (int64_t)p * kv_stride + (int64_t)kvh * hd, hd) * a->scale;
            if (a->softcap > 0) s = a->softcap * tanhf(s / a->softcap);
            scores[p] = s;
            if (s > mx) mx = s;
        }
        double sum = 0;
        for (int p = lo; p <= pos; p++) {
            scores[p] = expf(scores[p] - mx);
            sum += scores[p];
        }
        memset(acc, 0, sizeof(float) * (size_t)hd);
        for (int p = lo; p <= pos; p++) {
            axpy(acc, scores[p], a->v + (int64_t)p * kv_stride + (int64_t)kvh * hd, hd);
        }
        float inv = (float)(1.0 / sum);
        float *o = a->out + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
        for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}

void tnd_cpu_attn(tnd_pool *pool, const tnd_attn_args *a) {
    attn_task t = {a};
    tnd_pool_run(pool, attn_worker, &t);
}

void tnd_cpu_silu_mul(const float *g, const float *u, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void tnd_cpu_gelu_mul(const float *g, const float *u, float *out, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

void tnd_cpu_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void tnd_cpu_add_bias(float *y, const float *b, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[r * n + i] += b[i];
}

void tnd_cpu_softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

#if defined(__x86_64__)
/* F16C rounds to nearest even as tnd_fp32_to_fp16 does; only NaNs differ
 * (F16C keeps payload bits), so a group of 8 holding one goes the scalar
 * way. The KV store converts every token's k and v each layer. */
__attribute__((target("avx2,f16c"))) static int64_t f32_to_f16_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int k = 0; k < 8; k++) y[i + k] = tnd_fp32_to_fp16(x[i + k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}
#endif

void tnd_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (!tnd_cpu_ops_scalar && tnd_cpu_isa_best() >= TND_ISA_AVX2) i = f32_to_f16_f16c(x, y, n);
#endif
    for (; i < n; i++) y[i] = tnd_fp32_to_fp16(x[i]);
}

void tnd_cpu_topk(const float *x, int n, int k, int *idx) {
    /* Insertion into a sorted list of k: k is small (experts per token). */
    int m = 0;
    for (int i = 0; i < n; i++) {
        int p = m;
        while (p > 0 && x[idx[p - 1]] < x[i]) p--;
        if (p >= k) continue;
        int end = m < k ? m : k - 1;
        for (int j = end; j > p; j--) idx[j] = idx[j - 1];
        idx[p] = i;
        if (m < k) m++;
    }
}
