/* CPU attention over the f16 KV cache (ops.h): the scalar loop, the
 * reference, with a job per (query token, head); and on AVX-512 and AVX2
 * the heads of a kv head together over chunks of positions (below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul_impl.h"
#include "cpu/ops.h"
#include "cpu/vexp.h"
#include "quant/quant.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- scalar ------------------------------------------------------------------ */

static float dot_f16_scalar(const float *q, const uint16_t *k, int n) {
    float s = 0;
    for (int d = 0; d < n; d++) s += q[d] * tnd_fp16_to_fp32(k[d]);
    return s;
}

typedef struct {
    const tnd_attn_args *a; /* n attentions of one op's shape */
    int n;
} attn_task;

/* Job j of attention a: query token j / n_head, head j % n_head. */
static void attn_one(const tnd_attn_args *a, int job, float *scores, float *acc) {
    const int hd = a->head_dim, group = a->n_head / a->n_kv_head;
    const int64_t kv_stride = (int64_t)a->n_kv_head * hd;
    int t = job / a->n_head, h = job % a->n_head, kvh = h / group;
    int pos = a->pos0 + t;
    int lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    const float *q = a->q + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
    float mx = -INFINITY;
    for (int p = lo; p <= pos; p++) {
        float s = dot_f16_scalar(q, a->k + (int64_t)p * kv_stride + (int64_t)kvh * hd, hd) * a->scale;
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
        const uint16_t *v = a->v + (int64_t)p * kv_stride + (int64_t)kvh * hd;
        for (int d = 0; d < hd; d++) acc[d] += scores[p] * tnd_fp16_to_fp32(v[d]);
    }
    float inv = (float)(1.0 / sum);
    float *o = a->out + (int64_t)t * a->n_head * hd + (int64_t)h * hd;
    for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
}

/* The (token, head) jobs of all n attentions dealt round-robin over the
 * threads, as one region. */
static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *tk = (const attn_task *)arg;
    const int hd = tk->a[0].head_dim;
    int n_pos_max = 0;
    for (int r = 0; r < tk->n; r++) n_pos_max = TND_MAX(n_pos_max, tk->a[r].pos0 + tk->a[r].n_tok);
    /* the thread's reusable scratch (a malloc per call, freed at once, can
     * make glibc trim and re-fault a thread's arena every decode step) */
    float *scores = tnd_cpu_tls_buf(1, sizeof(float) * (size_t)n_pos_max + sizeof(float) * (size_t)hd);
    if (!scores) return; /* cannot happen in practice; output stays unwritten */
    float *acc = scores + n_pos_max;
    for (int r = 0, base = 0; r < tk->n; r++) {
        const tnd_attn_args *a = &tk->a[r];
        const int total = a->n_tok * a->n_head;
        for (int job = ((ith - base) % nth + nth) % nth; job < total; job += nth) attn_one(a, job, scores, acc);
        base += total;
    }
}

#if defined(__x86_64__)
/* s[p] = dot(q, k + p * stride) for p < n: 8 positions a step, then the
 * last 1-7 (DOT8 takes their count as a constant); in each ISA's section */
#define SCORES_FN(name, DOT8)                                                                                  \
    TGT static void name(const float *q, const uint16_t *k, int64_t stride, int n, int hd, float *s) {         \
        int p = 0;                                                                                             \
        for (; p + 8 <= n; p += 8) DOT8(q, k + p * stride, stride, 8, hd, s + p);                              \
        switch (n - p) {                                                                                       \
        case 7: DOT8(q, k + p * stride, stride, 7, hd, s + p); break;                                          \
        case 6: DOT8(q, k + p * stride, stride, 6, hd, s + p); break;                                          \
        case 5: DOT8(q, k + p * stride, stride, 5, hd, s + p); break;                                          \
        case 4: DOT8(q, k + p * stride, stride, 4, hd, s + p); break;                                          \
        case 3: DOT8(q, k + p * stride, stride, 3, hd, s + p); break;                                          \
        case 2: DOT8(q, k + p * stride, stride, 2, hd, s + p); break;                                          \
        case 1: DOT8(q, k + p * stride, stride, 1, hd, s + p); break;                                          \
        default: break;                                                                                        \
        }                                                                                                      \
    }

/* The N <= 8 positions' accumulators a0..a7 of a DOT8, one step: qv times
 * each position's vector KV(j) */
#define FMA8(FMA, KV)                                                                                          \
    do {                                                                                                       \
        a0 = FMA(qv, KV(0), a0);                                                                               \
        if (N > 1) a1 = FMA(qv, KV(1), a1);                                                                    \
        if (N > 2) a2 = FMA(qv, KV(2), a2);                                                                    \
        if (N > 3) a3 = FMA(qv, KV(3), a3);                                                                    \
        if (N > 4) a4 = FMA(qv, KV(4), a4);                                                                    \
        if (N > 5) a5 = FMA(qv, KV(5), a5);                                                                    \
        if (N > 6) a6 = FMA(qv, KV(6), a6);                                                                    \
        if (N > 7) a7 = FMA(qv, KV(7), a7);                                                                    \
    } while (0)

/* acc[0..hd) = sum over p < n of w[p] v[p * stride ..], 8 vectors of columns
 * at a time in registers. Up to 4 vectors, even and odd positions go to two
 * sets of accumulators, added at the end: with one, each position waited on
 * the last's FMAs. In each ISA's section, over its vector type V of L lanes
 * (LDH: L f16 values to a V); hd a multiple of L. */
#define AXPY_FN(name, V, L, ZERO, SET1, FMA, ADD, STORE, LDH)                                                   \
    TGT static void name(float *acc, const float *w, const uint16_t *v, int64_t stride, int n, int hd) {         \
        for (int d0 = 0; d0 < hd; d0 += 8 * (L)) {                                                             \
            const int k = hd - d0 < 8 * (L) ? (hd - d0) / (L) : 8;                                             \
            const uint16_t *col = v + d0;                                                                      \
            V a[8], b[4];                                                                                      \
            for (int i = 0; i < 8; i++) a[i] = ZERO();                                                         \
            for (int i = 0; i < 4; i++) b[i] = ZERO();                                                         \
            int p = 0;                                                                                         \
            if (k <= 4)                                                                                        \
                for (; p + 1 < n; p += 2) {                                                                    \
                    const V wa = SET1(w[p]), wb = SET1(w[p + 1]);                                              \
                    const uint16_t *ra = col + (int64_t)p * stride, *rb = ra + stride;                         \
                    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) if (i < k) {                           \
                        a[i] = FMA(wa, LDH(ra + (L) * i), a[i]);                                               \
                        b[i] = FMA(wb, LDH(rb + (L) * i), b[i]);                                               \
                    }                                                                                          \
                }                                                                                              \
            for (; p < n; p++) {                                                                               \
                const V wv = SET1(w[p]);                                                                       \
                const uint16_t *r = col + (int64_t)p * stride;                                                 \
                _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) if (i < k) a[i] = FMA(wv, LDH(r + (L) * i), a[i]); \
            }                                                                                                  \
            for (int i = 0; i < k; i++) STORE(acc + d0 + (L) * i, i < 4 ? ADD(a[i], b[i]) : a[i]);             \
        }                                                                                                      \
    }

/* ---- AVX-512 ----------------------------------------------------------------
 * Decode and prefill attention over the f16 cache, 16 lanes a vector.
 * Scores of 8 positions at a time: one accumulator a position, summed over
 * the head's 16-element chunks, then the 8 reduced together by a transposing
 * tree (lanes i + 8, i + 4, i + 2, i + 1 at each step, ~3 instructions a
 * score instead of a horizontal sum each). s[j] = dot(q, k + j * stride),
 * j < N <= 8 (a constant at each call); hd a multiple of 16. */
#define TGT __attribute__((target("avx2,fma,avx512f,avx512dq")))
#define TGTI static inline __attribute__((target("avx2,fma,avx512f,avx512dq"), always_inline))
TGTI void dot8_f16(const float *q, const uint16_t *k, int64_t stride, const int N, int hd, float *s) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 16) {
        const __m512 qv = _mm512_loadu_ps(q + d);
#define KV(j) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + (j) * stride + d)))
        FMA8(_mm512_fmadd_ps, KV);
#undef KV
    }
    /* lanes i + 8: chunks 0,1 of one, then of the other */
#define H8(x, y) _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee))
    const __m512 w0 = H8(a0, a1), w1 = H8(a2, a3), w2 = H8(a4, a5), w3 = H8(a6, a7);
#undef H8
    /* lanes i + 4: chunk j of x0 is a_j's, of x1 a_{4+j}'s */
    const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xdd));
    const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(w2, w3, 0x88), _mm512_shuffle_f32x4(w2, w3, 0xdd));
    /* lanes i + 2: chunk j holds a_j (2 lanes), a_{4+j} (2 lanes) */
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x44), _mm512_shuffle_ps(x0, x1, 0xee));
    /* lanes i + 1: lane 4j is a_j, 4j + 1 is a_{4+j} */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y, y, 0x88), _mm512_shuffle_ps(y, y, 0xdd));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_mask_storeu_ps(s, (__mmask16)((1u << N) - 1), _mm512_permutexvar_ps(order, z));
}

SCORES_FN(scores_f16_avx512, dot8_f16)

TGTI __m512 ldh16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
AXPY_FN(axpy_rows_f16_avx512, __m512, 16, _mm512_setzero_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps,
        _mm512_storeu_ps, ldh16)

/* Softmax numerators of n raw scores in place (scaled, soft-capped where
 * softcap > 0, their max *mx subtracted, expf), as the scalar loop computes
 * each; the returned sum (in double) adds them 16 lanes at a time. */
TGT static double softmax_avx512(float *x, int64_t n, float scale, float softcap, float *mx) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    if (softcap > 0) { /* tanhf: libm, one at a time */
        float top = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            x[i] = softcap * tanhf(x[i] * scale / softcap);
            top = x[i] > top ? x[i] : top;
        }
        m = _mm512_set1_ps(top);
    } else {
        const __m512 sv = _mm512_set1_ps(scale);
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
            const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sv);
            _mm512_mask_storeu_ps(x + i, k, v);
            m = _mm512_mask_max_ps(m, k, m, v);
        }
        m = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    }
    *mx = _mm512_cvtss_f32(m);
    __m512i tab[4];
    exp_tab(tab);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        /* lanes past n load m, so expf(0): loading 0 there, a max below -88
         * sent libm an overflowing expf (errno, the FP flags) */
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(m, k, x + i), m), tab));
        _mm512_mask_storeu_ps(x + i, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* Chunk [c0, c0 + n) of head h for query token t of a: the max *m and the
 * sum *s of its softmax numerators, and acc[hd], their products with V
 * (unnormalized). w: n floats of scratch. */
TGT static void attn_chunk_avx512(const tnd_attn_args *a, int t, int h, int c0, int n, float *w, float *acc,
                                  float *m, double *s) {
    const int hd = a->head_dim, kvh = h / (a->n_head / a->n_kv_head);
    const int64_t stride = (int64_t)a->n_kv_head * hd, off = (int64_t)c0 * stride + (int64_t)kvh * hd;
    scores_f16_avx512(a->q + ((int64_t)t * a->n_head + h) * hd, a->k + off, stride, n, hd, w);
    *s = softmax_avx512(w, n, a->scale, a->softcap, m);
    axpy_rows_f16_avx512(acc, w, a->v + off, stride, n, hd);
}
#undef TGT
#undef TGTI

/* ---- AVX2 -------------------------------------------------------------------
 * The same, 8 lanes a vector: 8 positions' scores a step, reduced together
 * (lanes i + 4, i + 2, i + 1); hd a multiple of 8. */
#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c"), always_inline))

/* lanes j < k set (k <= 8), for masked loads and stores */
TGTI __m256i mask8(int k) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

TGTI void dot8_avx2(const float *q, const uint16_t *k, int64_t stride, const int N, int hd, float *s) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
#define KV(j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + (j) * stride + d)))
        FMA8(_mm256_fmadd_ps, KV);
#undef KV
    }
    /* lanes i + 4: the low half holds one, the high half the other */
#define H4(x, y) _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31))
    const __m256 w0 = H4(a0, a1), w1 = H4(a2, a3), w2 = H4(a4, a5), w3 = H4(a6, a7);
#undef H4
    /* lanes i + 2: low halves a0 a0 a2 a2 (x0), a4 a4 a6 a6 (x1); high a1 a3, a5 a7 */
    const __m256 x0 = _mm256_add_ps(_mm256_shuffle_ps(w0, w1, 0x44), _mm256_shuffle_ps(w0, w1, 0xee));
    const __m256 x1 = _mm256_add_ps(_mm256_shuffle_ps(w2, w3, 0x44), _mm256_shuffle_ps(w2, w3, 0xee));
    /* lanes i + 1: low half a0 a2 a4 a6, high a1 a3 a5 a7 */
    const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(x0, x1, 0x88), _mm256_shuffle_ps(x0, x1, 0xdd));
    const __m256 o = _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (N == 8) _mm256_storeu_ps(s, o);
    else _mm256_maskstore_ps(s, mask8(N), o);
}

SCORES_FN(scores_avx2, dot8_avx2)

TGTI __m256 ldh8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
AXPY_FN(axpy_rows_avx2, __m256, 8, _mm256_setzero_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps,
        ldh8)

/* softmax_avx512's work, 8 lanes a vector */
TGT static double softmax_avx2(float *x, int64_t n, float scale, float softcap, float *mx) {
    float top = -INFINITY;
    if (softcap > 0) { /* tanhf: libm, one at a time */
        for (int64_t i = 0; i < n; i++) {
            x[i] = softcap * tanhf(x[i] * scale / softcap);
            top = x[i] > top ? x[i] : top;
        }
    } else {
        const __m256 sv = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
        __m256 m = ninf;
        for (int64_t i = 0; i < n; i += 8) {
            const __m256i k = mask8((int)TND_MIN(8, n - i));
            const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + i, k), sv);
            _mm256_maskstore_ps(x + i, k, v);
            m = _mm256_max_ps(m, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(k)));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        top = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    }
    *mx = top;
    const __m256 mv = _mm256_set1_ps(top);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i k = mask8((int)TND_MIN(8, n - i));
        const __m256 xv = _mm256_blendv_ps(mv, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)); /* as above */
        const __m256 e = _mm256_and_ps(exp8_avx2(_mm256_sub_ps(xv, mv)), _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(x + i, k, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    __m256d s = _mm256_add_pd(s0, s1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

TGT static void attn_chunk_avx2(const tnd_attn_args *a, int t, int h, int c0, int n, float *w, float *acc, float *m,
                                double *s) {
    const int hd = a->head_dim, kvh = h / (a->n_head / a->n_kv_head);
    const int64_t stride = (int64_t)a->n_kv_head * hd, off = (int64_t)c0 * stride + (int64_t)kvh * hd;
    scores_avx2(a->q + ((int64_t)t * a->n_head + h) * hd, a->k + off, stride, n, hd, w);
    *s = softmax_avx2(w, n, a->scale, a->softcap, m);
    axpy_rows_avx2(acc, w, a->v + off, stride, n, hd);
}
#undef TGT
#undef TGTI

/* ---- Vectors: K and V rows read once for a group of heads ---------------
 * A unit is (attention, query token, kv head): the n_head / n_kv_head heads
 * sharing the kv head read each chunk of K and V rows while it is in cache,
 * where a job per head read the cache once per head (at long contexts from
 * DRAM, 3-8 times over). Positions go in chunks of ATTN_CHUNK from the
 * first attended one; each chunk gives per head its softmax's max, sum and
 * unnormalized output, and a head's chunks combine in order (attn_combine),
 * so the bits are the same whichever thread computed a chunk and however
 * the work was split (attn_wide): a unit an item where there are enough,
 * else a head an item (short contexts: one chunk each) or a chunk an item
 * and the combine as a second run (long contexts, few tokens: decode).
 * The chunk's kernels are AVX-512's (16 lanes) or AVX2's (8). */
#define ATTN_CHUNK 256

/* A head's output from its C chunks: max m, sum s (C each), unnormalized
 * acc (C rows of hd). One chunk: acc / s, as one pass computes it. */
static void attn_combine(int C, int hd, const float *m, const double *s, const float *acc, float *out) {
    if (C == 1) {
        const float inv = (float)(1.0 / s[0]);
        for (int d = 0; d < hd; d++) out[d] = acc[d] * inv;
        return;
    }
    float M = m[0];
    for (int c = 1; c < C; c++) M = m[c] > M ? m[c] : M;
    double S = 0;
    for (int d = 0; d < hd; d++) out[d] = 0;
    for (int c = 0; c < C; c++) {
        if (m[c] == -INFINITY && M != -INFINITY) continue; /* weight 0 (its own numerators are NaN) */
        const float f = tnd_cpu_expf(m[c] - M);
        S += (double)f * s[c];
        for (int d = 0; d < hd; d++) out[d] += f * acc[(int64_t)c * hd + d];
    }
    const float inv = (float)(1.0 / S);
    for (int d = 0; d < hd; d++) out[d] *= inv;
}

enum { WIDE_UNIT, WIDE_HEAD, WIDE_CHUNK, WIDE_COMBINE };
#define WIDE_ITEMS (1 << 18) /* items a pool run: its limit is 2^20 - 1 */
#define WIDE_SHARED_MAX ((size_t)16 << 20) /* bytes of chunk partials shared by a call's items */

typedef struct {
    const tnd_attn_args *a;
    tnd_cpu_isa_id isa; /* AVX-512 or AVX2 */
    int n, kind, G, c_max;
    int n_unit, base; /* base: the first item of this run (runs of at most WIDE_ITEMS) */
    /* WIDE_CHUNK, WIDE_COMBINE: unit u's chunks are items first[u] ..
     * first[u + 1] - 1; its partials rows G * first[u] .., head-major */
    const int *first;
    float *pm, *pacc;
    double *ps;
} wide_task;

/* Unit u: its attention, query token and kv head; its positions [*lo, *lo + *np). */
static const tnd_attn_args *wide_unit(const wide_task *w, int u, int *t, int *kvh, int *lo, int *np) {
    int r = 0;
    for (; r < w->n && u >= w->a[r].n_tok * w->a[r].n_kv_head; r++) u -= w->a[r].n_tok * w->a[r].n_kv_head;
    const tnd_attn_args *a = &w->a[r];
    *t = u / a->n_kv_head, *kvh = u % a->n_kv_head;
    const int pos = a->pos0 + *t;
    *lo = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    *np = pos - *lo + 1;
    return a;
}

static void wide_item(void *arg, int i, int n) {
    (void)n;
    const wide_task *w = arg;
    i += w->base;
    const int G = w->G;
    if (w->kind == WIDE_COMBINE) { /* item: (unit, head) */
        int t, kvh, lo, np;
        const int u = i / G, g = i % G;
        const tnd_attn_args *a = wide_unit(w, u, &t, &kvh, &lo, &np);
        const int hd = a->head_dim, C = w->first[u + 1] - w->first[u];
        const int64_t row = (int64_t)G * w->first[u] + (int64_t)g * C;
        attn_combine(C, hd, w->pm + row, w->ps + row, w->pacc + row * hd,
                     a->out + ((int64_t)t * a->n_head + kvh * G + g) * hd);
        return;
    }
    int u = i, g0 = 0, g1 = G, c0 = 0, c1;
    if (w->kind == WIDE_HEAD) u = i / G, g0 = i % G, g1 = g0 + 1;
    if (w->kind == WIDE_CHUNK) { /* the unit whose chunks hold item i */
        int lo_u = 0, hi_u = w->n_unit - 1;
        while (lo_u < hi_u) {
            const int mid = (lo_u + hi_u + 1) / 2;
            if (w->first[mid] <= i) lo_u = mid;
            else hi_u = mid - 1;
        }
        u = lo_u, c0 = i - w->first[u];
    }
    int t, kvh, lo, np;
    const tnd_attn_args *a = wide_unit(w, u, &t, &kvh, &lo, &np);
    const int hd = a->head_dim, C = (np + ATTN_CHUNK - 1) / ATTN_CHUNK;
    c1 = w->kind == WIDE_CHUNK ? c0 + 1 : C;
    /* scratch: the scores of a chunk; the partials of this item's heads */
    const int rows = w->kind == WIDE_CHUNK ? 0 : (g1 - g0) * C;
    double *ls = tnd_cpu_tls_buf(1, sizeof(double) * (size_t)rows +
                                        sizeof(float) * ((size_t)ATTN_CHUNK + (size_t)rows * (hd + 1)));
    if (!ls) return; /* cannot happen in practice; output stays unwritten */
    float *sc = (float *)(ls + rows), *lacc = sc + ATTN_CHUNK, *lm = lacc + (size_t)rows * hd; /* doubles first: aligned */
    for (int c = c0; c < c1; c++) {
        const int p0 = lo + c * ATTN_CHUNK, pn = TND_MIN(ATTN_CHUNK, np - c * ATTN_CHUNK);
        for (int g = g0; g < g1; g++) {
            int64_t r; /* the partials' row */
            float *pa, *pm;
            double *ps;
            if (w->kind == WIDE_CHUNK) {
                r = (int64_t)G * w->first[u] + (int64_t)g * C + c;
                pa = w->pacc + r * hd, pm = w->pm + r, ps = w->ps + r;
            } else {
                r = (int64_t)(g - g0) * C + c;
                pa = lacc + r * hd, pm = lm + r, ps = ls + r;
            }
            if (w->isa == TND_ISA_AVX512) attn_chunk_avx512(a, t, kvh * G + g, p0, pn, sc, pa, pm, ps);
            else attn_chunk_avx2(a, t, kvh * G + g, p0, pn, sc, pa, pm, ps);
        }
    }
    if (w->kind != WIDE_CHUNK)
        for (int g = g0; g < g1; g++) {
            const int64_t r = (int64_t)(g - g0) * C;
            attn_combine(C, hd, lm + r, ls + r, lacc + r * hd, a->out + ((int64_t)t * a->n_head + kvh * G + g) * hd);
        }
}

static void wide_runs(tnd_pool *pool, wide_task *w, int64_t n_items) {
    for (w->base = 0; w->base < n_items; w->base += WIDE_ITEMS)
        tnd_pool_run_n(pool, wide_item, w, (int)TND_MIN(WIDE_ITEMS, n_items - w->base));
}

/* The vector attention of n attentions of one shape (see above). */
static void attn_wide(tnd_pool *pool, const tnd_attn_args *a, int n, tnd_cpu_isa_id isa) {
    wide_task w = {.a = a, .isa = isa, .n = n, .G = a[0].n_head / a[0].n_kv_head};
    int64_t n_items = 0; /* chunks of all units */
    for (int r = 0; r < n; r++) {
        w.n_unit += a[r].n_tok * a[r].n_kv_head;
        for (int t = 0; t < a[r].n_tok; t++) {
            const int pos = a[r].pos0 + t, lo = a[r].window > 0 && pos - a[r].window + 1 > 0 ? pos - a[r].window + 1 : 0;
            const int C = (pos - lo + ATTN_CHUNK) / ATTN_CHUNK;
            w.c_max = TND_MAX(w.c_max, C);
            n_items += (int64_t)C * a[r].n_kv_head;
        }
    }
    if (w.n_unit < 1) return;
    const int nth = pool ? tnd_pool_size(pool) : 1;
    /* units an item where there are 2 a thread and none longer than half a
     * thread's share of the chunks (one long sequence among short ones
     * would hold its thread while the others wait) */
    w.kind = w.n_unit >= 2 * nth && (int64_t)w.c_max * 2 * nth <= n_items ? WIDE_UNIT
             : w.c_max == 1                                                 ? WIDE_HEAD
                                                                            : WIDE_CHUNK;
    if (w.kind == WIDE_CHUNK) {
        /* the chunks' partials in the caller's scratch, shared with the
         * workers for this call */
        const size_t rows = (size_t)n_items * w.G, hd = (size_t)a[0].head_dim;
        const size_t bytes = rows * (sizeof(double) + sizeof(float) * (hd + 1)) + sizeof(int) * (size_t)(w.n_unit + 1);
        /* kept by the thread for its next calls; beyond WIDE_SHARED_MAX
         * (one sequence of qwen3-14b's shape past ~200K positions), units
         * an item, each with partials of its own */
        char *buf = bytes <= WIDE_SHARED_MAX ? tnd_cpu_tls_buf(0, bytes) : NULL;
        if (!buf) {
            w.kind = WIDE_UNIT;
        } else { /* doubles first (aligned), then the floats, then first[] */
            w.ps = (double *)buf;
            w.pm = (float *)(w.ps + rows);
            w.pacc = w.pm + rows;
            int *first = (int *)(w.pacc + rows * hd);
            n_items = 0;
            for (int u = 0; u < w.n_unit; u++) {
                int t, kvh, lo, np;
                wide_unit(&w, u, &t, &kvh, &lo, &np);
                first[u] = (int)n_items;
                n_items += (np + ATTN_CHUNK - 1) / ATTN_CHUNK;
            }
            first[w.n_unit] = (int)n_items;
            w.first = first;
            wide_runs(pool, &w, n_items);
            w.kind = WIDE_COMBINE;
            wide_runs(pool, &w, w.n_unit * w.G);
            return;
        }
    }
    wide_runs(pool, &w, w.kind == WIDE_HEAD ? w.n_unit * w.G : w.n_unit);
}
#endif

void tnd_cpu_attn_many(tnd_pool *pool, const tnd_attn_args *a, int n) {
    if (n < 1) return;
#if defined(__x86_64__)
    /* the ISA in use (TND_CPU_ISA, tests' tnd_cpu_isa_force), as the matmuls' */
    const tnd_cpu_isa_id isa = tnd_cpu_ops_scalar ? TND_ISA_SCALAR : tnd_cpu_isa_id_current();
    const int hd = a[0].head_dim;
    if (isa == TND_ISA_AVX512 && hd % 16 == 0) {
        attn_wide(pool, a, n, TND_ISA_AVX512);
        return;
    }
    if (isa >= TND_ISA_AVX2 && hd % 8 == 0) {
        attn_wide(pool, a, n, TND_ISA_AVX2);
        return;
    }
#endif
    attn_task t = {a, n};
    tnd_pool_run(pool, attn_worker, &t);
}

void tnd_cpu_attn(tnd_pool *pool, const tnd_attn_args *a) { tnd_cpu_attn_many(pool, a, 1); }
