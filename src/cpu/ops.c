/* Scalar CPU versions of the weightless ops (see ops.h) but attention
 * (attn.c). These are both the reference and the engine's implementation,
 * vectorized by the compiler where it can, except, on AVX2 and AVX-512,
 * the expf of silu and gelu (vexp.h), RMSNorm's sum of squares and RoPE
 * (per-token work that batched rounds do not share; the scalar code stays
 * their reference, tnd_cpu_ops_scalar). */
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


/* gelu_tanh's z = sqrt(2/pi) (x + 0.044715 x^3), as exp's argument -2z */
#define GELU_C 0.7978845608028654f
#define GELU_A 0.044715f
float tnd_cpu_gelu_arg(float x) {
    const float c = GELU_A * (x * x * x); /* its own statement: never contracted to an FMA */
    return -2.0f * (GELU_C * (x + c));
}

#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,avx512f,avx512dq")))
/* out = g / (1 + expf(a)) * u with a = -g (silu) or gelu_arg(g), the
 * scalar loop's operations */
TGT static void act_mul_avx512(const float *g, const float *u, float *out, int64_t n, bool gelu) {
    __m512i tab[4];
    exp_tab(tab);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + i);
        __m512 a = _mm512_sub_ps(_mm512_setzero_ps(), gv);
        if (gelu) {
            a = _mm512_mul_ps(_mm512_set1_ps(GELU_A), _mm512_mul_ps(_mm512_mul_ps(gv, gv), gv));
            a = _mm512_mul_ps(_mm512_set1_ps(-2.0f), _mm512_mul_ps(_mm512_set1_ps(GELU_C), _mm512_add_ps(gv, a)));
        }
        const __m512 e = exp16(a, tab);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
                                                        _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* sum of x[i]^2 in double: 2 x L lanes, then a fixed-order reduction (each
 * square is exact in double, as in the scalar loop; only the order of the
 * additions differs); one body for AVX-512 (L 8) and AVX2 (L 4) */
#define SUMSQ_FN(name, VD, L, ZERO, CVT, LOADF, FMA, ADD, REDUCE)                  \
    TGT static double name(const float *x, int64_t n) {                          \
        VD a0 = ZERO(), a1 = ZERO();                                             \
        int64_t i = 0;                                                           \
        for (; i + 2 * (L) <= n; i += 2 * (L)) {                                 \
            const VD lo = CVT(LOADF(x + i)), hi = CVT(LOADF(x + i + (L)));       \
            a0 = FMA(lo, lo, a0);                                                \
            a1 = FMA(hi, hi, a1);                                                \
        }                                                                        \
        double ss = REDUCE(ADD(a0, a1));                                         \
        for (; i < n; i++) ss += (double)x[i] * x[i];                            \
        return ss;                                                               \
    }
SUMSQ_FN(sumsq_avx512, __m512d, 8, _mm512_setzero_pd, _mm512_cvtps_pd, _mm256_loadu_ps, _mm512_fmadd_pd, _mm512_add_pd,
         _mm512_reduce_add_pd)

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

/* NEOX RoPE of one head: pairs (i, i + half), half a multiple of 16, the
 * scalar loop's operations, 16 pairs at a time. cs as above. */
TGT static void rope_neox_avx512(float *v, const float *cs, int half) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int i = 0; i < half; i += 16) {
        const __m512 t0 = _mm512_loadu_ps(cs + 2 * i), t1 = _mm512_loadu_ps(cs + 2 * i + 16);
        const __m512 c = _mm512_permutex2var_ps(t0, ev, t1), s = _mm512_permutex2var_ps(t0, od, t1);
        const __m512 x0 = _mm512_loadu_ps(v + i), x1 = _mm512_loadu_ps(v + half + i);
        _mm512_storeu_ps(v + i, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
        _mm512_storeu_ps(v + half + i, _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c)));
    }
}
#undef TGT

#define TGT __attribute__((target("avx2,fma")))
TGT static void act_mul_avx2(const float *g, const float *u, float *out, int64_t n, bool gelu) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 gv = load8_k(g + i, n - i);
        __m256 a = _mm256_sub_ps(_mm256_setzero_ps(), gv);
        if (gelu) {
            a = _mm256_mul_ps(_mm256_set1_ps(GELU_A), _mm256_mul_ps(_mm256_mul_ps(gv, gv), gv));
            a = _mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_add_ps(gv, a)));
        }
        const __m256 e = exp8_avx2(a);
        store8_k(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), load8_k(u + i, n - i)), n - i);
    }
}

/* The AVX-512 paths' AVX2 twins: the sum of squares, and RoPE (n, half
 * multiples of 8), the same operations. */
TGT static double hsum4d(__m256d a) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
SUMSQ_FN(sumsq_avx2, __m256d, 4, _mm256_setzero_pd, _mm256_cvtps_pd, _mm_loadu_ps, _mm256_fmadd_pd, _mm256_add_pd,
         hsum4d)

TGT static void rope_pairs_avx2(float *v, const float *cs, int n) {
    for (int d = 0; d < n; d += 8) {
        const __m256 x = _mm256_loadu_ps(v + d), t = _mm256_loadu_ps(cs + d);
        const __m256 a = _mm256_mul_ps(x, _mm256_moveldup_ps(t));                                /* x0 c, x1 c */
        const __m256 b = _mm256_mul_ps(_mm256_permute_ps(x, 0xb1), _mm256_movehdup_ps(t));      /* x1 s, x0 s */
        _mm256_storeu_ps(v + d, _mm256_blend_ps(_mm256_sub_ps(a, b), _mm256_add_ps(a, b), 0xaa));
    }
}

TGT static void rope_neox_avx2(float *v, const float *cs, int half) {
    const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int i = 0; i < half; i += 8) {
        /* c0 s0 .. c3 s3 | c4 s4 .. c7 s7 -> c0..c3 s0..s3 | c4..c7 s4..s7 */
        const __m256 t0 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cs + 2 * i), perm);
        const __m256 t1 = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cs + 2 * i + 8), perm);
        const __m256 c = _mm256_permute2f128_ps(t0, t1, 0x20), s = _mm256_permute2f128_ps(t0, t1, 0x31);
        const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + half + i);
        _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
    }
}
#undef TGT
#endif

#if defined(__x86_64__)
/* The ISA of the vector expf, RMSNorm's sum and RoPE (AVX-512 or AVX2):
 * the one in use, as the matmuls' and attention's (TND_CPU_ISA,
 * tests' tnd_cpu_isa_force), scalar when tests force it (tnd_cpu_ops_scalar). */
static tnd_cpu_isa_id exp_isa(void) { return tnd_cpu_ops_scalar ? TND_ISA_SCALAR : tnd_cpu_isa_id_current(); }
#endif

void tnd_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps) {
    double ss = 0;
#if defined(__x86_64__)
    /* the scalar sum is one chain of dependent additions: a batched
     * round's per-token serial work */
    if (exp_isa() == TND_ISA_AVX512) ss = sumsq_avx512(x, n);
    else if (exp_isa() == TND_ISA_AVX2) ss = sumsq_avx2(x, n);
    else
#endif
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * inv;
}

/* Every layer rotates q and k at the same positions with the same
 * parameters, so the cos and sin of each position's angles are computed
 * once and kept (pow, cos and sin per pair were a per-token cost that
 * batched rounds do not share, and per-thread slots of single positions
 * recomputed a prefill's every position in every layer, 8% of a Gemma 3
 * prefill's op time on a 2-core machine). The values are those computed
 * in place: theta = ((double)pos * scale) * pow(base, -2i / n_rot). */
#define ROPE_TAB_MAX_BYTES ((int64_t)256 << 20)

const float *tnd_rope_rows(tnd_rope_tabs *ts, int n_rot, float base, float scale, int max_pos) {
    if (n_rot <= 0 || n_rot % 2 || max_pos < 0) return NULL;
    tnd_rope_tab *t = NULL;
    for (int k = 0; k < TND_ROPE_TABS && !t; k++) {
        tnd_rope_tab *e = &ts->t[k];
        if (e->n_rot == n_rot && e->base == base && e->scale == scale) t = e;
        else if (e->n_rot == 0) { /* the first free one: claim it */
            double *pw = malloc(sizeof(double) * (size_t)(n_rot / 2));
            if (!pw) return NULL;
            for (int i = 0; i < n_rot / 2; i++) pw[i] = pow((double)base, -2.0 * i / n_rot);
            *e = (tnd_rope_tab){.n_rot = n_rot, .base = base, .scale = scale, .pw = pw};
            t = e;
        }
    }
    if (!t) return NULL; /* more parameter sets than kept: the caller computes in place */
    if (max_pos < t->n_pos) return t->cs;
    const int64_t need = (int64_t)max_pos + 1, row = (int64_t)n_rot * (int64_t)sizeof(float);
    if (need * row > ROPE_TAB_MAX_BYTES) return NULL;
    if (need > t->cap) {
        int64_t cap = TND_MAX(need, TND_MAX(2 * t->cap, 64));
        if (cap * row > ROPE_TAB_MAX_BYTES) cap = ROPE_TAB_MAX_BYTES / row; /* >= need: the limit once, not a row a call */
        float *cs = realloc(t->cs, (size_t)(cap * row));
        if (!cs) return NULL;
        t->cs = cs, t->cap = cap;
    }
    for (int64_t p = t->n_pos; p < need; p++)
        for (int i = 0; i < n_rot / 2; i++) {
            const double theta = (double)(int)p * scale * t->pw[i];
            t->cs[p * n_rot + 2 * i] = (float)cos(theta);
            t->cs[p * n_rot + 2 * i + 1] = (float)sin(theta);
        }
    t->n_pos = need;
    return t->cs;
}

void tnd_rope_tabs_free(tnd_rope_tabs *ts) {
    for (int k = 0; k < TND_ROPE_TABS; k++) {
        free(ts->t[k].cs);
        free(ts->t[k].pw);
    }
    memset(ts, 0, sizeof *ts);
}

void tnd_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, float freq_base, float freq_scale,
                  bool neox, const float *cs) {
    int half = n_rot / 2;
#if defined(__x86_64__)
    /* the vector paths take a head's pairs from the table's row: n_rot
     * values (adjacent pairs) or half pairs (NEOX), in whole vectors */
    const tnd_cpu_isa_id isa = cs ? exp_isa() : TND_ISA_SCALAR;
    const int len = neox ? half : n_rot;
    void (*fn)(float *, const float *, int) = NULL;
    if (isa == TND_ISA_AVX512 && len % 16 == 0) fn = neox ? rope_neox_avx512 : rope_pairs_avx512;
    else if (isa == TND_ISA_AVX2 && len % 8 == 0) fn = neox ? rope_neox_avx2 : rope_pairs_avx2;
    if (fn) {
        for (int h = 0; h < n_heads; h++) fn(x + (int64_t)h * head_dim, cs, len);
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


/* Both are g / (1 + expf(a)) * u: silu with a = -g, and gelu's tanh form
 * as a sigmoid, 0.5 x (1 + tanh(z)) = x / (1 + exp(-2z)), so that it shares
 * silu's vector expf. (libm's tanhf, one at a time, made GELU_MUL as long
 * as all the matmuls of a Gemma 3 prefill on a 2-core AVX-512 machine.) */
static void act_mul(const float *g, const float *u, float *out, int64_t n, bool gelu) {
#if defined(__x86_64__)
    const tnd_cpu_isa_id eisa = exp_isa();
    if (eisa == TND_ISA_AVX512) {
        act_mul_avx512(g, u, out, n, gelu);
        return;
    }
    if (eisa == TND_ISA_AVX2) {
        act_mul_avx2(g, u, out, n, gelu);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(gelu ? tnd_cpu_gelu_arg(g[i]) : -g[i])) * u[i];
}

void tnd_cpu_silu_mul(const float *g, const float *u, float *out, int64_t n) { act_mul(g, u, out, n, false); }

void tnd_cpu_gelu_mul(const float *g, const float *u, float *out, int64_t n) { act_mul(g, u, out, n, true); }

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
