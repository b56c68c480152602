/* Scalar CPU versions of the weightless ops (see ops.h) but attention
 * (attn.c). These are both the reference and the engine's implementation,
 * vectorized by the compiler where it can, except the expf of silu on AVX2
 * and AVX-512 (vexp.h), and on AVX-512 RMSNorm's sum of squares and
 * adjacent-pair RoPE (per-token work that batched rounds do not share; the
 * scalar code stays their reference, tnd_cpu_ops_scalar). */
#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul_impl.h"
#include "cpu/vexp.h"
#include "quant/quant.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

bool tnd_cpu_ops_scalar; /* tests: force the scalar paths */

float tnd_cpu_expf(float x) {
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    if (((ux >> 20) & 0x7ff) >= EXP_BIG) return expf(x);
    double xd = (double)x, kd = fma(EXP_INVLN2N, xd, EXP_SHIFT);
    uint64_t ki;
    memcpy(&ki, &kd, sizeof ki);
    kd -= EXP_SHIFT;
    double r = fma(EXP_INVLN2N, xd, -kd);
    double s = exp_d(k_exp_tab[ki & 31] + (ki << 47));
    double z = fma(EXP_C0, r, EXP_C1), r2 = r * r, y = fma(EXP_C2, r, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}


#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,avx512f,avx512dq")))
/* out = g / (1 + expf(-g)) * u, the scalar loop's operations */
TGT static void silu_mul_avx512(const float *g, const float *u, float *out, int64_t n) {
    __m512i tab[4];
    exp_tab(tab);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv), tab);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
                                                        _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* sum of x[i]^2 in double: 16 lanes, then a fixed-order reduction (each
 * square is exact in double, as in the scalar loop; only the order of the
 * additions differs) */
TGT static double sumsq_avx512(const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) ss += (double)x[i] * x[i];
    return ss;
}

/* Adjacent-pair RoPE of n (a multiple of 16) values: the scalar loop's
 * multiplies, subtract and add (no FMA), 8 pairs at a time. cs: c0 s0 c1 s1 .. */
TGT static void rope_pairs_avx512(float *v, const float *cs, int n) {
    const __m512i swap = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    const __m512i ev = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
    const __m512i od = _mm512_setr_epi32(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
    for (int d = 0; d < n; d += 16) {
        const __m512 x = _mm512_loadu_ps(v + d), t = _mm512_loadu_ps(cs + d);
        const __m512 a = _mm512_mul_ps(x, _mm512_permutexvar_ps(ev, t));                              /* x0 c, x1 c */
        const __m512 b = _mm512_mul_ps(_mm512_permutexvar_ps(swap, x), _mm512_permutexvar_ps(od, t)); /* x1 s, x0 s */
        _mm512_storeu_ps(v + d, _mm512_mask_add_ps(_mm512_sub_ps(a, b), 0xaaaa, a, b));
    }
}
#undef TGT

#define TGT __attribute__((target("avx2,fma")))
TGT static void silu_mul_avx2(const float *g, const float *u, float *out, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 gv = load8_k(g + i, n - i);
        const __m256 e = exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        store8_k(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), load8_k(u + i, n - i)), n - i);
    }
}
#undef TGT
#endif

#if defined(__x86_64__)
/* The ISA of the vector expf (AVX-512 or AVX2) and of AVX-512's RMSNorm
 * and RoPE: the one in use, as the matmuls' and attention's (TND_CPU_ISA,
 * tests' tnd_cpu_isa_force), scalar when tests force it (tnd_cpu_ops_scalar). */
static tnd_cpu_isa_id exp_isa(void) { return tnd_cpu_ops_scalar ? TND_ISA_SCALAR : tnd_cpu_isa_id_current(); }
#endif

void tnd_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double ss = 0;
#if defined(__x86_64__)
    /* the scalar sum is one chain of dependent additions: a batched
     * round's per-token serial work */
    if (exp_isa() == TND_ISA_AVX512) ss = sumsq_avx512(x, n);
    else
#endif
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
 * few entries, as a batched round holds several sequences' positions: 16,
 * so that a batched prompt of up to 16 positions a sequence (4 sequences'
 * are 64 tokens at positions 0..15 four times) computes each once; with 8
 * every token of it recomputed its table. The values are the same as
 * computed in place. */
#define ROPE_SLOTS 16
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
#if defined(__x86_64__)
    if (cs && !neox && n_rot % 16 == 0 && exp_isa() == TND_ISA_AVX512) {
        for (int h = 0; h < n_heads; h++) rope_pairs_avx512(x + (int64_t)h * head_dim, cs, n_rot);
        return;
    }
#endif
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


void tnd_cpu_silu_mul(const float *g, const float *u, float *out, int64_t n) {
#if defined(__x86_64__)
    const tnd_cpu_isa_id eisa = exp_isa();
    if (eisa == TND_ISA_AVX512) {
        silu_mul_avx512(g, u, out, n);
        return;
    }
    if (eisa == TND_ISA_AVX2) {
        silu_mul_avx2(g, u, out, n);
        return;
    }
#endif
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
