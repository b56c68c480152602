/* AVX2 + FMA + F16C kernels: activation quantizers and weight x activation
 * products for the block formats.
 *
 * Built without -march flags: every function carries the target attribute,
 * and matmul.c only calls them after checking the CPU (cpuid + XCR0).
 *
 * Products (decode and small n_tok): one weight row at a time (Q4_0 with 2+
 * tokens: four; one sequential stream per thread reads DRAM fastest),
 * its blocks unpacked once into int8 vectors and dotted with up to 4 tokens'
 * activations (so weights are read once per call for n_tok <= 4 and from L1
 * after that), the weight streams prefetched ahead (pf_ahead).
 * Per block the integer sum is exact (as in the reference); the float sum over
 * blocks runs in 8 lanes with FMA (Q8_0 in groups of four tokens: 2 lanes a
 * token, the four folded into one vector; Q4_1 with 2+ tokens: per step of 8
 * blocks, one lane a block), so it differs from the sequential reference
 * only by rounding (tolerance in tests/test_cpu_matmul.c).
 *
 * Signed x signed int8 products use vpmaddubsw (unsigned x signed) on |w| and
 * sign(a, w): the classic sign transfer, exact since |w| <= 128, |a| <= 127. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/matmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c"), always_inline))

/* Largest number of tokens one weight unpack is shared by. */
#define NT_MAX 4
#define X86_VNNI 0
#define X86_ZMM 0
#include "cpu/matmul_x86.h"

/* ---- activation quantizers (bit-exact with quant/ref_legacy.c, ref_kquants.c) */

/* Quantizes 32 floats with multiplier id into int8 q; returns the int32 sum. */
TGTI __m256i quant32(const float *x, float id, int8_t *q) {
    __m256 vid = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x), vid)));
    __m256i i1 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid)));
    __m256i i2 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid)));
    __m256i i3 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid)));
    _mm256_storeu_si256((__m256i *)q, pack_i32_i8(i0, i1, i2, i3));
    return _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
}

TGTI float amax32(const float *x) {
    __m256 m = _mm256_max_ps(_mm256_max_ps(abs_ps(_mm256_loadu_ps(x)), abs_ps(_mm256_loadu_ps(x + 8))),
                             _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 16)), abs_ps(_mm256_loadu_ps(x + 24))));
    return hmax_ps(m);
}

/* f32 -> f16 as tnd_fp32_to_fp16: F16C rounds to nearest even the same way;
 * only a NaN (from NaN activations) goes the scalar way, which quiets it
 * differently. Two per block of Q8_1 activations: the scalar conversion's
 * branches were a visible part of quantizing a decode round's tokens. */
TGTI uint16_t f2h(float f) {
    return f != f ? tnd_fp32_to_fp16(f)
                  : (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

TGT static void quant_q8_0(const float *x, void *vy, int64_t k) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float d = amax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        quant32(x, id, y[i].qs);
        y[i].d = f2h(d);
    }
}

TGT static void quant_q8_1(const float *x, void *vy, int64_t k) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float d = amax32(x) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = hsum_epi32(quant32(x, id, y[i].qs));
        y[i].d = f2h(d);
        y[i].s = f2h(d * (float)sum);
    }
}

TGT static void quant_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = vy;
    for (int64_t b = 0; b < k / TND_QK_K; b++, x += TND_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < TND_QK_K; j += 32) amax = fmaxf(amax, amax32(x + j));
        float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = amax / 127.0f;
        for (int j = 0; j < TND_QK_K; j += 32) quant32(x + j, iscale, y[b].qs + j);
        /* bsums: pairs of 16-quant sums via maddubs with ones, then madd. */
        for (int j = 0; j < TND_QK_K; j += 64) {
            __m256i q0 = _mm256_loadu_si256((const __m256i *)(y[b].qs + j));
            __m256i q1 = _mm256_loadu_si256((const __m256i *)(y[b].qs + j + 32));
            __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
            __m256i s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q0), ones16); /* 8 x sum of 4 */
            __m256i s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q1), ones16);
            __m256i h = _mm256_hadd_epi32(s0, s1); /* sums of 8: s0[0..3] s1[0..3] | s0[4..7] s1[4..7] per lane */
            h = _mm256_hadd_epi32(h, h);           /* sums of 16 */
            /* lane 0: s0g0 s0g1 s1g0 s1g1 ... ; lane 1 the same for the upper halves */
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, h);
            /* q0 covers elements j..j+31: its 16-groups are (lane0 of s0: bytes 0-15) and
             * (lane1 of s0: bytes 16-31). */
            y[b].bsums[j / 16 + 0] = (int16_t)t[0];
            y[b].bsums[j / 16 + 1] = (int16_t)t[4];
            y[b].bsums[j / 16 + 2] = (int16_t)t[1];
            y[b].bsums[j / 16 + 3] = (int16_t)t[5];
        }
    }
}

/* ---- per-row kernels --------------------------------------------------------
 * Each processes one weight row against nt <= NT_MAX activation rows; the
 * always_inline + constant nt lets the compiler keep accumulators in
 * registers. ROW_LOOP (matmul_x86.h) and mm4_q8_0 (below) run the row and
 * token-chunk loops around one. */

/* Q8_0 x Q8_0 through the sign transfer above. The 32-element formats do
 * little work per block, so one accumulator per token would make the FMA
 * latency the limit; blocks alternate between two accumulator sets. */
#define ROW_SS(fmt, BT)                                                                                     \
    TGTI void blk_##fmt(const BT *w, int64_t i, const char *xq, size_t xs, int nt, __m256 *acc,             \
                        const float *da, int64_t nb) {                                                      \
        __m256i q = q32_##fmt(&w[i]);                                                                       \
        __m256i aq = _mm256_sign_epi8(q, q);                                                                \
        float dw = h2f(w[i].d);                                                                             \
        for (int t = 0; t < nt; t++) {                                                                      \
            const block_q8_0 *a = (const block_q8_0 *)(xq + t * xs) + i;                                    \
            __m256i p = dot_ss(aq, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a->qs), q));        \
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * da[t * nb + i]), acc[t]);   \
        }                                                                                                   \
    }                                                                                                       \
    TGTI void row_##fmt(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys, \
                        const float *da, int64_t nb_) {                                                     \
        const BT *w = vw;                                                                                   \
        __m256 acc0[NT_MAX], acc1[NT_MAX];                                                                  \
        for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();                               \
        int64_t i = 0, nb = n / 32;                                                                         \
        for (; i + 2 <= nb; i += 2) {                                                                       \
            pf_ahead(&w[i], (2 * (int)sizeof(BT) + 63) / 64);                                               \
            blk_##fmt(w, i, xq, xs, nt, acc0, da, nb_);                                                     \
            blk_##fmt(w, i + 1, xq, xs, nt, acc1, da, nb_);                                                 \
        }                                                                                                   \
        if (i < nb) blk_##fmt(w, i, xq, xs, nt, acc0, da, nb_);                                             \
        for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));                  \
    }
/* Q5_0: its 5 bits u (nibble | fifth bit) less 16 */
TGTI __m256i q32_q5_0(const block_q5_0 *w) {
    return _mm256_sub_epi8(_mm256_or_si256(unpack_nibbles(w->qs), q5_high(w->qh)), _mm256_set1_epi8(16));
}
ROW_SS(q8_0, block_q8_0)
ROW_SS(q5_0, block_q5_0)
#undef ROW_SS

/* Q4_0 x Q8_0, 4 rows at a time. Per block and row the nibbles u = q + 8
 * (nib32) go through vpmaddubsw into 16 int16 pair sums; three vphaddw and
 * one vpmaddwd fold the 4 rows into one vector of int32 (lanes r and r + 4:
 * row r), to which the offset -8 sum(a) of the block is added once (-4
 * sum(a) per lane, two lanes per row), then one conversion and one FMA for
 * all 4 rows.
 * The 4 rows' scales of two blocks are gathered in integer registers and
 * converted at once. All integer work is exact; only the float sum over
 * blocks (in 2 lanes per row) differs from the reference's order. */

/* Per token t and block i: the activation scale 4 times at da4 + 4 (t nb +
 * i), and -4 times the sum of its quants at n4[t nb + i]. */
TGT static void q4_0_prep4(const char *xq, size_t x_row, int64_t nt, int64_t nb, float *da4, int32_t *n4) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_0 *a = (const block_q8_0 *)(xq + t * x_row);
        for (int64_t i = 0; i < nb; i++) {
            _mm_storeu_ps(da4 + 4 * (t * nb + i), _mm_set1_ps(h2f(a[i].d)));
            n4[t * nb + i] = -4 * hsum_epi32(dot_us(ones8, _mm256_loadu_si256((const __m256i *)a[i].qs)));
        }
    }
}

/* The half floats at byte off of 4 rows, as one 64-bit word (row k in bits
 * 16k..16k+15). */
TGTI uint64_t h16x4(const char *const *w, size_t off) {
    uint16_t h[4];
    for (int k = 0; k < 4; k++) memcpy(&h[k], w[k] + off, 2);
    return (uint64_t)h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
}

/* Prefetch distance per row stream, bytes. */
#define Q4_0_PF 3072

/* 4 rows w[0..3] (consecutive rows) x NT tokens; outputs of rows 0..nrow-1
 * stored. */
TGTI void q4_0_x4(int64_t nb, const char *const *w, const char *xq, size_t x_row, const float *da4, const int32_t *n4,
                  const int NT, int nrow, float *y, int64_t ys) {
    __m256 acc[4];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t bs = sizeof(block_q4_0);
    /* Four interleaved streams (see pf_ahead): each row Q4_0_PF bytes
     * ahead, past its end the same row of the following groups (rows are
     * rowb = nb * bs bytes, groups 4 rows): offset pf_base + pf_off. */
    const size_t rowb = (size_t)nb * bs;
    size_t pf_off = Q4_0_PF, pf_base = 0;
    while (pf_off >= rowb) pf_off -= rowb, pf_base += 4 * rowb;
    int64_t i = 0;
    for (; i < nb; i += 2) {
        int two = i + 1 < nb;
        size_t off = (size_t)i * bs;
        for (int r = 0; r < 4; r++) _mm_prefetch(w[r] + pf_base + pf_off, _MM_HINT_T0);
        pf_off += 2 * bs;
        if (pf_off >= rowb) pf_off -= rowb, pf_base += 4 * rowb;
        uint64_t h0 = h16x4(w, off), h1 = two ? h16x4(w, off + bs) : h0;
        /* lanes 0..3: the rows' scales of block i, 4..7: of block i + 1 */
        __m256 dw = _mm256_cvtph_ps(_mm_set_epi64x((long long)h1, (long long)h0));
        __m256 v[4];
        for (int t = 0; t < NT; t++) {
            const float *d = da4 + 4 * (t * nb + i);
            v[t] = _mm256_mul_ps(dw, two ? _mm256_loadu_ps(d) : _mm256_broadcast_ps((const __m128 *)d));
        }
        for (int k = 0; k < 1 + two; k++) {
            __m256i u[4];
            for (int r = 0; r < 4; r++) u[r] = nib32((const uint8_t *)(w[r] + off + k * bs + 2));
            for (int t = 0; t < NT; t++) {
                __m256i a = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(xq + t * x_row))[i + k].qs);
                __m256i p[4];
                for (int r = 0; r < 4; r++) p[r] = _mm256_maddubs_epi16(u[r], a);
                /* 16-bit sums of 4 pairs stay below 4 * 2 * 15 * 127 = 15240 */
                __m256i s = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
                s = _mm256_add_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(n4[t * nb + i + k]));
                __m256 sc = k ? _mm256_permute2f128_ps(v[t], v[t], 0x11) : _mm256_permute2f128_ps(v[t], v[t], 0x00);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[t]);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        if (nrow == 4) _mm_storeu_ps(y + t * ys, r4);
        else {
            float tmp[4];
            _mm_storeu_ps(tmp, r4);
            memcpy(y + t * ys, tmp, (size_t)nrow * sizeof(float));
        }
    }
}

/* Q4_0 x Q8_0 for one token (decode), one row at a time: each thread then
 * reads its share of W as one sequential stream. (Passes over 2 or 4 rows
 * at once, which reuse each activation load, ran faster on cached weights
 * but read DRAM at only 70-80% of the streaming rate on a 2-core EPYC,
 * against 90-100% for one stream.)
 * Steps of 8 blocks: the blocks i + k and i + k + 4 (k < 4) share one vector,
 * qs of the first in the lower half and of the second in the upper one, so
 * one AND gives the low nibbles (elements 0..15) of both and one shift + AND
 * the high ones (16..31); the activations are rearranged to match once per
 * call (relayout8). The two vpmaddubsw results add up per block in int16,
 * and three vphaddw + one vpmaddwd reduce the 4 vectors to the 8 block sums
 * in block order (int16 partial sums stay below 8 * 15 * 127 = 15240 before
 * the last vphaddw, 30480 after), to which -8 sum(a) of each block is added:
 * the exact integer dot of each block, as in the reference. One conversion
 * and one FMA with the 8 scale products then finish the step. */

/* Activation layout for the one-token steps (nib_dots8): per group of 8
 * blocks i..i+7 and k < 4, 64 bytes a_{i+k}[0..15] a_{i+k+4}[0..15]
 * a_{i+k}[16..31] a_{i+k+4}[16..31], from activation blocks whose qs are
 * stride bytes apart. Blocks past the last full group (nb % 8) are read
 * from xq itself. */
TGT static void relayout8(const int8_t *qs, size_t stride, int64_t nb, int8_t *xa) {
    for (int64_t g = 0; g + 8 <= nb; g += 8)
        for (int k = 0; k < 4; k++) {
            const int8_t *p = qs + (size_t)(g + k) * stride, *q = qs + (size_t)(g + k + 4) * stride;
            int8_t *o = xa + 32 * g + 64 * k;
            memcpy(o, p, 16);
            memcpy(o + 16, q, 16);
            memcpy(o + 32, p + 16, 16);
            memcpy(o + 48, q + 16, 16);
        }
}

/* q4_0_row1's activations: the layout, and per block its scale da[i] and
 * -8 sum(a_i) in n8[i]. */
TGT static void q4_0_prep1(const block_q8_0 *a, int64_t nb, int8_t *xa, float *da, int32_t *n8) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < nb; i++) {
        da[i] = h2f(a[i].d);
        n8[i] = -8 * hsum_epi32(dot_us(ones8, _mm256_loadu_si256((const __m256i *)a[i].qs)));
    }
    relayout8(a[0].qs, sizeof *a, nb, xa);
}

/* The half floats at p, p + stride, ..., p + 7 stride (8 consecutive
 * blocks' scales) as floats (vpinsrw from memory: fewer shuffle-port
 * operations than building two words in integer registers and moving them
 * over). */
TGTI __m256 h8(const void *p, size_t stride) {
    const char *c = p;
    __m128i v = _mm_cvtsi32_si128(*(const uint16_t *)c);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 1 * stride), 1);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 2 * stride), 2);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 3 * stride), 3);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 4 * stride), 4);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 5 * stride), 5);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 6 * stride), 6);
    v = _mm_insert_epi16(v, *(const uint16_t *)(c + 7 * stride), 7);
    return _mm256_cvtph_ps(v);
}

/* The 8 integer dots of blocks 0..7 of nibbles (16 bytes at qs, qs +
 * stride, ...) with the activations laid out by relayout8 at x, in block
 * order: two vpmaddubsw per pair of blocks, three vphaddw, one vpmaddwd. */
TGTI __m256i nib_dots8(const uint8_t *qs, size_t stride, const int8_t *x) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i h[2];
    for (int k = 0; k < 4; k++) {
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(qs + k * stride))),
                                            _mm_loadu_si128((const __m128i *)(qs + (k + 4) * stride)), 1);
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        const __m256i *xk = (const __m256i *)(x + 64 * k);
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(xk)),
                                     _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xk + 1)));
        h[k >> 1] = k & 1 ? _mm256_hadd_epi16(h[k >> 1], p) : p;
    }
    return _mm256_madd_epi16(_mm256_hadd_epi16(h[0], h[1]), _mm256_set1_epi16(1));
}

/* One row b x one token. */
TGTI float q4_0_row1(int64_t nb, const block_q4_0 *b, const block_q8_0 *a, const int8_t *xa, const float *da,
                     const int32_t *n8) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        pf_ahead(&b[i], 3); /* 144 bytes */
        __m256i s = _mm256_add_epi32(nib_dots8(b[i].qs, sizeof *b, xa + 32 * i),
                                     _mm256_loadu_si256((const __m256i *)(n8 + i)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(h8(&b[i].d, sizeof *b), _mm256_loadu_ps(da + i)),
                              acc);
    }
    float s = hsum_ps(acc);
    for (; i < nb; i++) {
        int32_t sumi = hsum_epi32(dot_us(nib32(b[i].qs), _mm256_loadu_si256((const __m256i *)a[i].qs))) + n8[i];
        s += h2f(b[i].d) * da[i] * (float)sumi;
    }
    return s;
}

TGT static void mm_q4_0_1(int64_t nb, const void *W, size_t w_row, int64_t nr, const void *xq, float *y) {
    /* xa (32 nb bytes), da, n8 (4 nb bytes each) */
    int8_t *xa = tnd_cpu_tls_buf(1, (size_t)nb * 40);
    if (!xa) {
        for (int64_t r = 0; r < nr; r++) y[r] = NAN;
        return;
    }
    float *da = (float *)(xa + 32 * nb);
    int32_t *n8 = (int32_t *)(da + nb);
    q4_0_prep1(xq, nb, xa, da, n8);
    for (int64_t r = 0; r < nr; r++)
        y[r] = q4_0_row1(nb, (const block_q4_0 *)((const char *)W + (size_t)r * w_row), xq, xa, da, n8);
}

TGT static void mm_q4_0(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                        int64_t nt, float *y, int64_t ys) {
    int64_t nb = n_in / 32;
    if (nt == 1) {
        mm_q4_0_1(nb, W, w_row, nr, xq, y);
        return;
    }
    float *da4 = tnd_cpu_tls_buf(1, (size_t)(nt * nb) * 20);
    if (!da4) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;
        return;
    }
    int32_t *n4 = (int32_t *)(da4 + 4 * nt * nb);
    q4_0_prep4((const char *)xq, x_row, nt, nb, da4, n4);
    for (int64_t r = 0; r < nr; r += 4) {
        /* a last group of fewer rows repeats its last row */
        int nrow = nr - r < 4 ? (int)(nr - r) : 4;
        const char *w[4];
        for (int k = 0; k < 4; k++) w[k] = (const char *)W + (size_t)(r + (k < nrow ? k : nrow - 1)) * w_row;
        for (int64_t t = 0; t < nt; t += 4) {
            const char *x = (const char *)xq + t * x_row;
            const float *d = da4 + 4 * t * nb;
            const int32_t *n = n4 + t * nb;
            float *yt = y + t * ys + r;
            switch (nt - t < 4 ? nt - t : 4) {
            case 1: q4_0_x4(nb, w, x, x_row, d, n, 1, nrow, yt, ys); break;
            case 2: q4_0_x4(nb, w, x, x_row, d, n, 2, nrow, yt, ys); break;
            case 3: q4_0_x4(nb, w, x, x_row, d, n, 3, nrow, yt, ys); break;
            default: q4_0_x4(nb, w, x, x_row, d, n, 4, nrow, yt, ys); break;
            }
        }
    }
}

/* Q4_1 x Q8_1 for one token (decode): q4_0_row1's steps of 8 blocks, one
 * row per pass. The nibbles are unsigned (w = d q + m), so a block's
 * integer dot needs no offset; the m part, m times the activation block's
 * s (d sum(a)), is 8 blocks' ms times their ss in one FMA. The default
 * model is Q4_1: its decode went a block at a time before (a conversion,
 * a scale and an FMA, and a scalar FMA for m, per block). Two
 * or more tokens take the transposed steps below (q41_rows): this step over
 * four tokens at once spilled its sums and accumulators and ran batch-4
 * rounds 15% slower than the per-block four-token kernel it replaced. */

/* One token's layout (prep_q4_1): the Q8_1 row itself (its last nb % 8
 * blocks are read from there), then relayout8's layout of the rest, then
 * each block's d and s as floats. */
#define Q41_RAW(x_row) (((x_row) + 63) & ~(size_t)63) /* the row's bytes, to a cache line */
#define Q41_TB1(nb, x_row) (Q41_RAW(x_row) + (size_t)(nb) * 40)

TGT static void q4_1_prep1(const block_q8_1 *a, size_t x_row, int64_t nb, char *out) {
    int8_t *xa = (int8_t *)out + Q41_RAW(x_row);
    float *da = (float *)(xa + 32 * nb), *sa = da + nb;
    memcpy(out, a, x_row);
    for (int64_t i = 0; i < nb; i++) {
        da[i] = h2f(a[i].d);
        sa[i] = h2f(a[i].s);
    }
    relayout8(a[0].qs, sizeof *a, nb, xa);
}

/* One row b x one token. */
TGTI float q4_1_row1(int64_t nb, const block_q4_1 *b, const block_q8_1 *a, const int8_t *xa, const float *da,
                     const float *sa) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        pf_ahead(&b[i], 3); /* 160 bytes */
        __m256i s = nib_dots8(b[i].qs, sizeof *b, xa + 32 * i);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(h8(&b[i].d, sizeof *b), _mm256_loadu_ps(da + i)),
                              acc);
        accm = _mm256_fmadd_ps(h8(&b[i].m, sizeof *b), _mm256_loadu_ps(sa + i), accm);
    }
    float s = hsum_ps(_mm256_add_ps(acc, accm));
    for (; i < nb; i++) {
        int32_t sumi = hsum_epi32(dot_us(nib32(b[i].qs), _mm256_loadu_si256((const __m256i *)a[i].qs)));
        s += h2f(b[i].d) * da[i] * (float)sumi + h2f(b[i].m) * sa[i];
    }
    return s;
}

/* x: q4_1_prep1's layout of a Q8_1 row x_row bytes long. */
TGT static void mm_q4_1_1(int64_t nb, const void *W, size_t w_row, int64_t nr, const char *x, size_t x_row,
                          float *y) {
    const int8_t *xa = (const int8_t *)x + Q41_RAW(x_row);
    const float *da = (const float *)(xa + 32 * nb), *sa = da + nb;
    for (int64_t r = 0; r < nr; r++)
        y[r] = q4_1_row1(nb, (const block_q4_1 *)((const char *)W + (size_t)r * w_row), (const block_q8_1 *)x, xa,
                         da, sa);
}

/* ---- Q4_1 x Q8_1, several tokens: 8 blocks a step, transposed ------------
 * Without VNNI, what a token costs per block beyond its vpmaddubsw is the
 * reduction of the 16-bit pair sums to one int32 per block, and vphaddw
 * issues one every 2 cycles on the 2-core Zen 3 EPYC against two
 * vpmaddubsw a cycle: the four-token per-block kernel spent three a block,
 * the 8-block step three per 8 blocks and token. So the
 * 8 blocks of a step are transposed instead: vector c of the step holds
 * dword c (elements 4c..4c+3, and 16+4c.. in the high nibbles) of each of
 * the 8 blocks, block k in dword k. The 8 vectors' vpmaddubsw results
 * then add up vertically in int16 (8 pair sums of 15 * 127 products: at
 * most 30480) and one vpmaddwd gives the 8 blocks' exact integer dots in
 * block order: 8 vpmaddubsw, 7 vpaddw and a vpmaddwd a token, no
 * horizontal op. The weights' transpose (a 4x4 dword transpose of block
 * pairs, 8 shuffles) is paid once per step for all the tokens; the
 * tokens' side is laid out once per call (prep_q4_1). Per step and token
 * the float part is a conversion, a scale product and two FMAs (d terms,
 * then m times the activation blocks' s).
 * The rem = nb % 8 blocks after a row's last full step would waste most of
 * a step (the default model's 576 inputs are 18 blocks: 2 steps and 2
 * blocks), so 8 / rem rows share one: slot j holds block j % rem of row
 * j / rem (rows left over take a step alone, other slots zero). */

/* Bytes per token of prep_q4_1's layout, for nb blocks: per step of 8
 * blocks 256 bytes of quants, then the steps' activation scales (8 floats
 * a step) and s terms (8 floats a step). A last step (rem blocks) holds
 * them in the shared slots' order: slot j block j % rem. */
#define Q41_TB(nb) ((size_t)(((nb) + 7) / 8) * 320)

TGT static size_t prep_q4_1(int64_t n_in, const void *xq, size_t x_row, int64_t nt, void *out) {
    const int64_t nb = n_in / 32, ng = (nb + 7) / 8, rem = nb % 8;
    if (nt == 1) {
        /* one token: the 8-block step without the transpose (q4_1_row1);
         * the row's length from nb, as mm_q4_1 has it (x_row is 0 when
         * only the size is asked for) */
        const size_t row1 = (size_t)nb * sizeof(block_q8_1);
        if (out) q4_1_prep1(xq, row1, nb, out);
        return Q41_TB1(nb, row1);
    }
    const size_t tb = Q41_TB(nb);
    if (!out) return tb;
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_1 *a = (const block_q8_1 *)((const char *)xq + t * x_row);
        char *o = (char *)out + t * tb;
        float *da = (float *)(o + 256 * ng), *sa = da + 8 * ng;
        memset(o, 0, tb);
        for (int64_t j = 0; j < 8 * ng; j++) {
            const int64_t g = j / 8, k = j % 8;
            /* block i in slot j (-1: none); rem > 0 where g is the last step */
            const int64_t i = g < nb / 8 ? j : k < 8 / rem * rem ? 8 * g + k % rem : -1;
            if (i < 0) continue;
            /* dword c of the block's low-nibble half (elements 4c..) goes
             * to vector 2c, of its high half to 2c + 1; slot k at dword k */
            char *v = o + 256 * g + 4 * k;
            for (int c = 0; c < 4; c++) {
                memcpy(v + 64 * c, a[i].qs + 4 * c, 4);
                memcpy(v + 64 * c + 32, a[i].qs + 16 + 4 * c, 4);
            }
            da[j] = h2f(a[i].d);
            sa[j] = h2f(a[i].s);
        }
    }
    return tb;
}

/* Blocks pairs R[k] (k in the lower half, k + 4 in the upper) transposed
 * into W[0..7]: W[2c] the low nibbles of dword c, W[2c + 1] the high ones. */
TGTI void q41_transpose(const __m256i *R, __m256i *W) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* per 128-bit half: a 4x4 transpose of the dwords */
    __m256i t0 = _mm256_unpacklo_epi32(R[0], R[1]), t1 = _mm256_unpackhi_epi32(R[0], R[1]);
    __m256i t2 = _mm256_unpacklo_epi32(R[2], R[3]), t3 = _mm256_unpackhi_epi32(R[2], R[3]);
    __m256i V[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                    _mm256_unpackhi_epi64(t1, t3)};
    for (int c = 0; c < 4; c++) {
        W[2 * c] = _mm256_and_si256(V[c], m4);
        W[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(V[c], 4), m4);
    }
}

/* A full step: the 8 blocks at b, with their d and m as floats. */
TGTI void q41_w_full(const block_q4_1 *b, __m256i *W, __m256 *d8, __m256 *m8) {
    __m256i R[4];
    for (int k = 0; k < 4; k++)
        R[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b[k].qs)),
                                       _mm_loadu_si128((const __m128i *)b[k + 4].qs), 1);
    q41_transpose(R, W);
    /* d and m: the blocks' first dwords (d | m << 16), 8 inserts, then
     * split into words (half the inserts of two h8) */
    int32_t dm[8]; /* memcpy: blocks are only 2-byte aligned */
    for (int k = 0; k < 8; k++) memcpy(&dm[k], &b[k], 4);
    __m128i lo = _mm_setr_epi32(dm[0], dm[1], dm[2], dm[3]), hi = _mm_setr_epi32(dm[4], dm[5], dm[6], dm[7]);
    const __m128i split = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    lo = _mm_shuffle_epi8(lo, split), hi = _mm_shuffle_epi8(hi, split);
    *d8 = _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
    *m8 = _mm256_cvtph_ps(_mm_unpackhi_epi64(lo, hi));
}

/* A shared last step: slot k's block at p[k], NULL: zeros (scales too). */
TGTI void q41_w_slots(const block_q4_1 *const *p, __m256i *W, __m256 *d8, __m256 *m8) {
    __m256i R[4];
    for (int k = 0; k < 4; k++) {
        __m128i lo = p[k] ? _mm_loadu_si128((const __m128i *)p[k]->qs) : _mm_setzero_si128();
        __m128i hi = p[k + 4] ? _mm_loadu_si128((const __m128i *)p[k + 4]->qs) : _mm_setzero_si128();
        R[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    }
    q41_transpose(R, W);
    /* words inserted from integer registers: 16-bit stores read back as
     * one vector would stall on store forwarding */
    __m128i hd = _mm_setzero_si128(), hm = _mm_setzero_si128();
#define Q41_SLOT(k)                                                                                                \
    if (p[k]) hd = _mm_insert_epi16(hd, p[k]->d, k), hm = _mm_insert_epi16(hm, p[k]->m, k)
    Q41_SLOT(0); Q41_SLOT(1); Q41_SLOT(2); Q41_SLOT(3); Q41_SLOT(4); Q41_SLOT(5); Q41_SLOT(6); Q41_SLOT(7);
#undef Q41_SLOT
    *d8 = _mm256_cvtph_ps(hd);
    *m8 = _mm256_cvtph_ps(hm);
}

/* Step g of NT tokens (x: the first token's layout, tb bytes apart; ng
 * steps a row) against the step's weights, into acc[t] (8 lanes: slots). */
TGTI void q41_step_t(const __m256i *W, __m256 d8, __m256 m8, const char *x, size_t tb, int64_t g, int64_t ng,
                     const int NT, __m256 *acc) {
    for (int t = 0; t < NT; t++) {
        const char *xt = x + t * tb;
        const __m256i *A = (const __m256i *)(xt + 256 * g);
        const float *da = (const float *)(xt + 256 * ng) + 8 * g, *sa = da + 8 * ng;
        __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(W[0], _mm256_loadu_si256(A)),
                                      _mm256_maddubs_epi16(W[1], _mm256_loadu_si256(A + 1)));
        __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(W[2], _mm256_loadu_si256(A + 2)),
                                      _mm256_maddubs_epi16(W[3], _mm256_loadu_si256(A + 3)));
        __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(W[4], _mm256_loadu_si256(A + 4)),
                                      _mm256_maddubs_epi16(W[5], _mm256_loadu_si256(A + 5)));
        __m256i s3 = _mm256_add_epi16(_mm256_maddubs_epi16(W[6], _mm256_loadu_si256(A + 6)),
                                      _mm256_maddubs_epi16(W[7], _mm256_loadu_si256(A + 7)));
        __m256i dots = _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(s0, s1), _mm256_add_epi16(s2, s3)),
                                         _mm256_set1_epi16(1));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(d8, _mm256_loadu_ps(da)), acc[t]);
        acc[t] = _mm256_fmadd_ps(m8, _mm256_loadu_ps(sa), acc[t]);
    }
}

/* Token t's sum of acc[t] for t < 4, as one vector (lane t). */
TGTI __m128 hsum4_ps(const __m256 *acc) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Row w's nf full steps x NT <= 4 tokens (ng steps a token's layout), into
 * acc[t]. */
TGTI void q41_full_steps(const block_q4_1 *w, int64_t nf, int64_t ng, const char *x, size_t tb, const int NT,
                         __m256 *acc) {
    __m256i W[8];
    __m256 d8, m8;
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < nf; g++) {
        pf_ahead(&w[8 * g], 3); /* 160 bytes */
        q41_w_full(w + 8 * g, W, &d8, &m8);
        q41_step_t(W, d8, m8, x, tb, g, ng, NT, acc);
    }
}

/* nrow <= 8 / rem rows from b (w_row bytes apart) x NT <= 4 tokens, rem =
 * nb % 8 (a constant where it is the default model's 2); the rows share
 * their last step when rem. */
TGTI void q41_rows(int64_t nb, const char *b, size_t w_row, int nrow, const int rem, const char *x, size_t tb,
                   const int NT, float *y, int64_t ys) {
    const int64_t nf = nb / 8, ng = (nb + 7) / 8;
    float out[8][4]; /* [row][token] */
    __m256 acc[4];
    for (int k = 0; k < nrow; k++) {
        q41_full_steps((const block_q4_1 *)(b + (size_t)k * w_row), nf, ng, x, tb, NT, acc);
        if (NT == 4) _mm_storeu_ps(out[k], hsum4_ps(acc));
        else
            for (int t = 0; t < NT; t++) out[k][t] = hsum_ps(acc[t]);
    }
    if (rem) {
        __m256i W[8];
        __m256 d8, m8;
        const block_q4_1 *p[8] = {0};
        for (int k = 0; k < nrow; k++)
            for (int i = 0; i < rem; i++) p[k * rem + i] = (const block_q4_1 *)(b + (size_t)k * w_row) + 8 * nf + i;
        q41_w_slots(p, W, &d8, &m8);
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
        q41_step_t(W, d8, m8, x, tb, nf, ng, NT, acc);
        for (int t = 0; t < NT; t++) {
            float l[8];
            _mm256_storeu_ps(l, acc[t]);
            for (int k = 0; k < nrow; k++)
                for (int i = 0; i < rem; i++) out[k][t] += l[k * rem + i];
        }
    }
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < nrow; k++) y[t * ys + k] = out[k][t];
}

/* q41_rows for the default model's batch of 4: 4 rows of 18 blocks (rem 2)
 * x 4 tokens, the shared last step without branches (every slot used: slot
 * j holds block j % 2 of row j / 2) and its lane pairs summed by vhaddps. */
TGTI void q41_rows4_r2(int64_t nb, const char *b, size_t w_row, const char *x, size_t tb, float *y, int64_t ys) {
    const int64_t nf = nb / 8, ng = nf + 1;
    __m128 o[4]; /* o[k]: row k's sums, lane t: token t */
    __m256 acc[4];
    for (int k = 0; k < 4; k++) {
        q41_full_steps((const block_q4_1 *)(b + (size_t)k * w_row), nf, ng, x, tb, 4, acc);
        o[k] = hsum4_ps(acc);
    }
    const block_q4_1 *tl[4]; /* the rows' last 2 blocks */
    for (int k = 0; k < 4; k++) tl[k] = (const block_q4_1 *)(b + (size_t)k * w_row) + 8 * nf;
    __m256i R[4], W[8];
    for (int j = 0; j < 4; j++)
        R[j] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)tl[j / 2][j % 2].qs)),
                                       _mm_loadu_si128((const __m128i *)tl[j / 2 + 2][j % 2].qs), 1);
    q41_transpose(R, W);
    __m128i hd = _mm_cvtsi32_si128(tl[0][0].d), hm = _mm_cvtsi32_si128(tl[0][0].m);
#define Q41_SLOT(j)                                                                                                \
    hd = _mm_insert_epi16(hd, tl[(j) / 2][(j) % 2].d, j), hm = _mm_insert_epi16(hm, tl[(j) / 2][(j) % 2].m, j)
    Q41_SLOT(1); Q41_SLOT(2); Q41_SLOT(3); Q41_SLOT(4); Q41_SLOT(5); Q41_SLOT(6); Q41_SLOT(7);
#undef Q41_SLOT
    for (int t = 0; t < 4; t++) acc[t] = _mm256_setzero_ps();
    q41_step_t(W, _mm256_cvtph_ps(hd), _mm256_cvtph_ps(hm), x, tb, nf, ng, 4, acc);
    /* u: t0r0 t0r1 t1r0 t1r1 | t0r2 t0r3 t1r2 t1r3, v the same for t2, t3 */
    __m256 u = _mm256_hadd_ps(acc[0], acc[1]), v = _mm256_hadd_ps(acc[2], acc[3]);
    __m128 ul = _mm256_castps256_ps128(u), uh = _mm256_extractf128_ps(u, 1);
    __m128 vl = _mm256_castps256_ps128(v), vh = _mm256_extractf128_ps(v, 1);
    __m128 tail[4] = {_mm_movelh_ps(ul, uh), _mm_movehl_ps(uh, ul), _mm_movelh_ps(vl, vh), _mm_movehl_ps(vh, vl)};
    _MM_TRANSPOSE4_PS(o[0], o[1], o[2], o[3]); /* o[t]: token t's sums of rows 0..3 */
    for (int t = 0; t < 4; t++) _mm_storeu_ps(y + t * ys, _mm_add_ps(o[t], tail[t]));
}

/* x: prep_q4_1's layout, x_row its bytes per token. One row after the
 * other (one sequential weight stream per thread), in groups that share
 * their last step; tokens four at a time (a fifth and later read the rows
 * from L1). */
TGT static void mm_q4_1(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                        int64_t nt, float *y, int64_t ys) {
    const int64_t nb = n_in / 32;
    if (nt == 1) {
        mm_q4_1_1(nb, W, w_row, nr, xq, (size_t)nb * sizeof(block_q8_1), y);
        return;
    }
    const int group = nb % 8 ? 8 / (int)(nb % 8) : 1;
    for (int64_t r = 0; r < nr;) {
        const int nrow = nr - r >= group ? group : 1, rem = (int)(nb % 8);
        const char *b = (const char *)W + (size_t)r * w_row;
        for (int64_t t = 0; t < nt; t += 4) {
            const char *x = (const char *)xq + t * x_row;
            float *yt = y + t * ys + r;
            const int k = nt - t < 4 ? (int)(nt - t) : 4;
            if (rem == 2 && nrow == 4) {
                /* the default model's 576 inputs: constants for the tail */
                if (k == 4) q41_rows4_r2(nb, b, w_row, x, x_row, yt, ys);
                else if (k == 3) q41_rows(nb, b, w_row, 4, 2, x, x_row, 3, yt, ys);
                else if (k == 2) q41_rows(nb, b, w_row, 4, 2, x, x_row, 2, yt, ys);
                else q41_rows(nb, b, w_row, 4, 2, x, x_row, 1, yt, ys);
            } else {
                if (k == 4) q41_rows(nb, b, w_row, nrow, rem, x, x_row, 4, yt, ys);
                else if (k == 3) q41_rows(nb, b, w_row, nrow, rem, x, x_row, 3, yt, ys);
                else if (k == 2) q41_rows(nb, b, w_row, nrow, rem, x, x_row, 2, yt, ys);
                else q41_rows(nb, b, w_row, nrow, rem, x, x_row, 1, yt, ys);
            }
        }
        r += nrow;
    }
}

/* ---- four tokens at once: Q8_0 x Q8_0 ---------------------------------------
 * Without VNNI a token's part of a block is a vpmaddubsw, a vpmaddwd, a
 * conversion, a scale broadcast and an FMA: a batched decode step of 4
 * tokens was bound by that, not by its weight reads. Here a block's four
 * int32 dots (8 lanes each) fold by three vphaddd into one vector (lanes t
 * and t + 4: token t), converted once and scaled by the four tokens' scales
 * times the weight's in one FMA. The integer sums stay exact; the float sum
 * over blocks runs in 2 lanes a token instead of 8 (another rounding order:
 * the Q8 mode's many-token kernels, tests/test_batch.c). The activations'
 * scales are laid out for it once per call: four tokens' per block,
 * together. (Q4_1's transposed steps, above, done for Q8_0 in steps of 4
 * blocks, measured no faster here: its sign-transfer products need a
 * vpmaddwd each, so there the vphaddd were not the limit.) */

TGTI __m256i fold4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
}

/* Token t's result: lanes t and t + 4 of acc. */
TGTI void store4(__m256 acc, float *y, int64_t ys) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    float v[4];
    _mm_storeu_ps(v, r);
    for (int t = 0; t < 4; t++) y[t * ys] = v[t];
}

TGTI __m256i ld32(const int8_t *q) { return _mm256_loadu_si256((const __m256i *)q); }

/* Q8_0 and Q5_0 (the weights as signed int8: q32_fmt) x Q8_0: one block
 * against 4 tokens' blocks through the sign transfer (blk4), a row of them
 * (row4), and the row and token loops (mm4): the activations' half float
 * scales converted once per call, for groups of four tokens
 * (da4[(g nb + i) 4 + t]) and for the 1-3 tokens left over (da[t nb + i]),
 * which take row_fmt. */
#define MM4_SS(fmt, BT)                                                                                          \
    TGTI void blk4_##fmt(const BT *w, const block_q8_0 *const *a, int64_t i, const float *da4, __m256 *acc) {   \
        __m256i q = q32_##fmt(w), aq = _mm256_sign_epi8(q, q);                                                   \
        __m256i h = fold4(dot_ss(aq, _mm256_sign_epi8(ld32(a[0][i].qs), q)),                                     \
                          dot_ss(aq, _mm256_sign_epi8(ld32(a[1][i].qs), q)),                                     \
                          dot_ss(aq, _mm256_sign_epi8(ld32(a[2][i].qs), q)),                                     \
                          dot_ss(aq, _mm256_sign_epi8(ld32(a[3][i].qs), q)));                                    \
        __m256 sc = _mm256_mul_ps(_mm256_broadcast_ps((const __m128 *)(da4 + 4 * i)), _mm256_set1_ps(h2f(w->d))); \
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), sc, *acc);                                                 \
    }                                                                                                            \
    TGTI void row4_##fmt(int64_t nb, const void *vw, const block_q8_0 *const *a, const float *da4, float *y,     \
                         int64_t ys) {                                                                           \
        const BT *w = vw;                                                                                        \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                           \
        int64_t i = 0;                                                                                           \
        for (; i + 2 <= nb; i += 2) {                                                                            \
            pf_ahead(&w[i], (2 * (int)sizeof(BT) + 63) / 64);                                                    \
            blk4_##fmt(&w[i], a, i, da4, &acc0);                                                                 \
            blk4_##fmt(&w[i + 1], a, i + 1, da4, &acc1);                                                         \
        }                                                                                                        \
        if (i < nb) blk4_##fmt(&w[i], a, i, da4, &acc0);                                                         \
        store4(_mm256_add_ps(acc0, acc1), y, ys);                                                                \
    }                                                                                                            \
    TGT static void mm4_##fmt(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq,             \
                              size_t x_row, int64_t nt, float *y, int64_t ys) {                                  \
        const int64_t nb = n_in / 32, ng = nt / 4, t4 = 4 * ng;                                                  \
        float *da4 = tnd_cpu_tls_buf(1, (size_t)(nt * nb + 1) * sizeof(float));                                  \
        if (!da4) {                                                                                              \
            for (int64_t t = 0; t < nt; t++)                                                                     \
                for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;                                            \
            return;                                                                                              \
        }                                                                                                        \
        float *da = da4 + t4 * nb;                                                                               \
        for (int64_t t = 0; t < nt; t++) {                                                                       \
            const block_q8_0 *a = (const block_q8_0 *)((const char *)xq + t * x_row);                            \
            if (t >= t4) {                                                                                       \
                for (int64_t i = 0; i < nb; i++) da[(t - t4) * nb + i] = h2f(a[i].d);                           \
                continue;                                                                                        \
            }                                                                                                    \
            float *d4 = da4 + (t / 4) * 4 * nb + t % 4;                                                          \
            for (int64_t i = 0; i < nb; i++) d4[4 * i] = h2f(a[i].d);                                            \
        }                                                                                                        \
        for (int64_t r = 0; r < nr; r++) {                                                                       \
            const void *w = (const char *)W + (size_t)r * w_row;                                                 \
            for (int64_t g = 0; g < ng; g++) {                                                                   \
                const block_q8_0 *a[4];                                                                          \
                for (int k = 0; k < 4; k++) a[k] = (const block_q8_0 *)((const char *)xq + (4 * g + k) * x_row); \
                row4_##fmt(nb, w, a, da4 + 4 * g * nb, y + 4 * g * ys + r, ys);                                  \
            }                                                                                                    \
            const char *x = (const char *)xq + t4 * x_row;                                                       \
            switch (nt - t4) {                                                                                   \
            case 3: row_##fmt(n_in, w, x, x_row, 3, y + t4 * ys + r, ys, da, nb); break;                         \
            case 2: row_##fmt(n_in, w, x, x_row, 2, y + t4 * ys + r, ys, da, nb); break;                         \
            case 1: row_##fmt(n_in, w, x, x_row, 1, y + t4 * ys + r, ys, da, nb); break;                         \
            default: break;                                                                                      \
            }                                                                                                    \
        }                                                                                                        \
    }
MM4_SS(q8_0, block_q8_0)
MM4_SS(q5_0, block_q5_0)
#undef MM4_SS

/* Q5_1 x Q8_1, a row against up to 4 tokens: the 5 bits u (0..31) as they
 * are, vpmaddubsw with the token's int8 (pairs at most 2 * 31 * 128, no
 * saturation), d da per block by FMA in 8 lanes, the m part m s (s = da
 * sum(a), the activation block's own) in a float per token. Blocks
 * alternate between two accumulator sets, as ROW_SS's. */
TGTI void blk_q5_1(const block_q5_1 *w, int64_t i, const char *xq, size_t xs, int nt, __m256 *acc, float *accm) {
    const __m256i u = _mm256_or_si256(unpack_nibbles(w[i].qs), q5_high(w[i].qh));
    const float dw = h2f(w[i].d), mw = h2f(w[i].m);
    for (int t = 0; t < nt; t++) {
        const block_q8_1 *a = (const block_q8_1 *)(xq + t * xs) + i;
        __m256i p = dot_us(u, _mm256_loadu_si256((const __m256i *)a->qs));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(a->d)), acc[t]);
        accm[t] += mw * h2f(a->s);
    }
}
TGTI void row_q5_1(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q5_1 *w = vw;
    __m256 acc0[NT_MAX], acc1[NT_MAX];
    float accm[NT_MAX];
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps(), accm[t] = 0;
    int64_t i = 0, nb = n / 32;
    for (; i + 2 <= nb; i += 2) {
        pf_ahead(&w[i], 1); /* 48 bytes */
        blk_q5_1(w, i, xq, xs, nt, acc0, accm);
        blk_q5_1(w, i + 1, xq, xs, nt, acc1, accm);
    }
    if (i < nb) blk_q5_1(w, i, xq, xs, nt, acc0, accm);
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t])) + accm[t];
}
ROW_LOOP(mm_q5_1, row_q5_1)

/* Vector of 16 int16 whose every word is word k of v (within each 128-bit
 * half): one vpshufb with a constant index. */
#define W16_BCAST(v, k) _mm256_shuffle_epi8((v), _mm256_set1_epi16((short)(0x0100 + 0x0202 * (k))))
/* As W16_BCAST, word k in the lower half and word k2 in the upper one. */
#define W16_BCAST2(v, k, k2)                                                                          \
    _mm256_shuffle_epi8((v), _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (k2))),        \
                                              _mm_set1_epi16((short)(0x0100 + 0x0202 * (k)))))

/* The 8 scales (bytes 0..7) and 8 mins (bytes 8..15) of a Q4_K / Q5_K
 * super-block from its 12 packed bytes s (16 bytes are read: the 4 after
 * them are the block's own quants), in vector registers (7 operations
 * against about 20 in integer registers):
 *   sc[0..3] = s[0..3] & 63,  sc[4..7] = s[8..11] & 15 | (s[0..3] >> 6) << 4,
 *   m[0..3]  = s[4..7] & 63,  m[4..7]  = s[8..11] >> 4 | (s[4..7] >> 6) << 4,
 * per 32-bit word: words (0, 2, 1, 2) masked (the last shifted by 4), or'd
 * with words (0, 0, 1, 1) >> 2 & 0x30 in the words that take high bits. */
TGTI __m128i k4_scales_x(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), _mm_setr_epi32(0, 0, 0, 4)),
                               _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, 0x50), 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(lo, hi);
}

/* Vector of 16 int16 all equal to byte k of both halves of v (a zero byte
 * index 0x80 above each). */
#define B16_BCAST(v, k) _mm256_shuffle_epi8((v), _mm256_set1_epi16((short)(0x8000 + (k))))

/* Q5_K's fifth bits of group s (bit s of each qh byte) at bit 4 of each
 * byte: a shift of the 16-bit lanes brings them to bit 0, then to bit 4. */
TGTI __m256i q5k_bit4(__m256i qh, int s) {
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), 4), _mm256_set1_epi8(0x10));
}

/* Q4_K and Q5_K x Q8_K: isum = sum_g sc_g * dot_g, msum = sum_g m_g *
 * bsum_g. The group scales reach the vpmaddwd as int16 vectors through one
 * vpshufb each from the unpacked scale bytes. Q5_K (Q5 1) puts each
 * element's fifth bit, bit g of qh[i % 32] for element i of group g, above
 * its nibble (u <= 31: vpmaddubsw's pairs stay within 2 * 31 * 127). The
 * two blocks share d, dmin and scales' offsets. */
TGTI void row_k45(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys, const int Q5) {
    const size_t bs = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* mins as int16, each twice (bsums come in 16-groups): m0 m0 .. m3 m3 | m4 m4 .. m7 m7 */
    const __m256i mins_idx = _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                                              12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        const block_q4_K *w = (const block_q4_K *)((const char *)vw + (size_t)b * bs);
        const uint8_t *qs = Q5 ? ((const block_q5_K *)w)->qs : w->qs;
        pf_ahead(w, 3); /* a block: 144 or 176 bytes */
        __m256i sm = _mm256_broadcastsi128_si256(k4_scales_x(w->scales));
        __m256i m16 = _mm256_shuffle_epi8(sm, mins_idx);
        __m256 dd = _mm256_cvtph_ps(_mm_set1_epi32((int)((uint32_t)w->d | (uint32_t)w->dmin << 16)));
        const __m256i qh = Q5 ? _mm256_loadu_si256((const __m256i *)((const block_q5_K *)w)->qh) : _mm256_setzero_si256();
        __m256i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(qb, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            if (Q5) {
                lo = _mm256_or_si256(lo, q5k_bit4(qh, 2 * j));
                hi = _mm256_or_si256(hi, q5k_bit4(qh, 2 * j + 1));
            }
            __m256i s_lo = B16_BCAST(sm, 2 * j), s_hi = B16_BCAST(sm, 2 * j + 1);
            for (int t = 0; t < nt; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * j));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * j + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s_lo);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s_hi);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
            }
        }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), m16);
            /* d*isum - dmin*msum, both scaled by the activation d (lanes of
             * dd: d, dmin alternating) */
            __m256 da = _mm256_mul_ps(dd, _mm256_set1_ps(a->d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_permute_ps(da, 0x00), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_permute_ps(da, 0x55), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_VARIANT(row_q4_K, row_k45, 0)
ROW_VARIANT(row_q5_K, row_k45, 1)
ROW_LOOP(mm_q4_K, row_q4_K)
ROW_LOOP(mm_q5_K, row_q5_K)

/* Q2_K and Q3_K x Q8_K (matmul_avx512.c's row5_k23 on 256-bit vectors):
 * run r of 32 elements (half r / 4, shift 2 (r % 4) of the half's 32 qs
 * bytes; Q3_K's third bit: bit r of each hmask byte) covers groups 2r and
 * 2r + 1, whose scales reach the vpmaddwd as int16 through one vpshufb of
 * the 16 scales as int16 (the 128-bit half holding them, broadcast). */
TGTI void row_k23(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys, const int Q3) {
    const size_t bs = Q3 ? sizeof(block_q3_K) : sizeof(block_q2_K);
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(0x03);
    /* vpshufb bytes of scale 0 in the low 128-bit half, scale 1 in the high (+ 2g: scales g, g + 1) */
    const __m256i sc_pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                             2, 3, 2, 3, 2, 3);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        const char *blk = (const char *)vw + (size_t)b * bs;
        pf_ahead(blk, 2); /* a block: 84 or 110 bytes */
        __m256i sc16, m16;
        float d, dmin;
        const uint8_t *qs = k23_block(blk, Q3, &sc16, &m16, &d, &dmin);
        const __m256i hm = Q3 ? _mm256_loadu_si256((const __m256i *)((const block_q3_K *)blk)->hmask)
                              : _mm256_setzero_si256();
        const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00); /* scales 0..7, both halves */
        const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11); /* 8..15 */
        __m256i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const int r = 4 * h + k, g = 2 * r % 8; /* groups 2r, 2r + 1 */
                __m256i u = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k)), m3);
                if (Q3)
                    u = _mm256_or_si256(u, _mm256_and_si256(_mm256_slli_epi16(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(r)), 2),
                                                            _mm256_set1_epi8(0x04)));
                /* int16 lanes 0..7: scale 2r, 8..15: scale 2r + 1 */
                const __m256i s =
                    _mm256_shuffle_epi8(r < 4 ? sc_lo : sc_hi, _mm256_add_epi8(sc_pick, _mm256_set1_epi8((char)(2 * g))));
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                    const __m256i av = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * r));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), s));
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m256i si = isum[t];
            if (Q3) si = _mm256_sub_epi32(si, _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 2));
            else acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, m16)),
                                           _mm256_set1_ps(a->d * dmin), acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_set1_ps(a->d * d), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_VARIANT(row_q2_K, row_k23, 0)
ROW_VARIANT(row_q3_K, row_k23, 1)
ROW_LOOP(mm_q2_K, row_q2_K)
ROW_LOOP(mm_q3_K, row_q3_K)

/* Q6_K x Q8_K: q = u - 32 with u in [0, 63]; the -32 is folded in through the
 * activation's 16-group sums: isum = sum_g sc_g (dot(u, a)_g - 32 bsum_g).
 * Per half h (128 elements) the four 32-runs of u are
 *   ql[0..31] & 15 | (qh bits 0-1) << 4,  ql[32..63] & 15 | (qh bits 2-3) << 4,
 *   ql[0..31] >> 4 | (qh bits 4-5) << 4,  ql[32..63] >> 4 | (qh bits 6-7) << 4,
 * the qh bits moved into place by 16-bit shifts and a 0x30 mask (bits that
 * cross a byte boundary land outside the mask). The group scales come from
 * one vector of all 16 through vpshufb. */
TGTI void row_q6_K(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q6_K *w = vw;
    __m256 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        pf_ahead(&w[b], 4); /* 210 bytes */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        /* scales 0..7, then 8..15, as int16 in both halves */
        __m256i sc_h[2] = {_mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xee)};
        __m256i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            __m256i u[4];
            u[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            u[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
            u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            for (int c = 0; c < 4; c++) {
                /* scales of the two 16-groups of this 32-run: low half, high half */
                __m256i s = W16_BCAST2(sc_h[h], 2 * c, 2 * c + 1);
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                    __m256i av = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * c));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], av), s));
                }
            }
        }
        __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)w[b].d));
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), sc16);
            __m256i s = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(a->d)), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum_ps(acc[t]);
}
ROW_LOOP(mm_q6_K, row_q6_K)


/* ---- float weights (F32, F16, BF16) x F32 activations -----------------------
 * Tiles of 2 rows x up to 4 tokens: each converted weight vector serves 4
 * tokens, each activation vector 2 rows. Tail elements (n_in % 8) in scalar. */

TGTI __m256 load8_f32(const void *p) { return _mm256_loadu_ps((const float *)p); }
TGTI __m256 load8_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
TGTI __m256 load8_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
TGTI float get_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
TGTI float get_f16(const void *p, int64_t i) { return h2f(((const uint16_t *)p)[i]); }
TGTI float get_bf16(const void *p, int64_t i) { return tnd_bf16_to_fp32(((const uint16_t *)p)[i]); }

#define FLOAT_KERNEL(NAME, LOAD8, GET, ES)                                                                   \
    TGTI void NAME##_tile(int64_t n, const char *w0, const char *w1, int nrow, const float *x, int64_t xs,   \
                          int nt, float *y, int64_t ys) {                                                    \
        __m256 acc[2][4];                                                                                    \
        for (int r = 0; r < 2; r++)                                                                          \
            for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();                                     \
        int64_t i = 0;                                                                                       \
        for (; i + 8 <= n; i += 8) {                                                                         \
            __m256 a = LOAD8(w0 + i * ES), b = nrow > 1 ? LOAD8(w1 + i * ES) : a;                            \
            for (int t = 0; t < nt; t++) {                                                                   \
                __m256 xv = _mm256_loadu_ps(x + t * xs + i);                                                 \
                acc[0][t] = _mm256_fmadd_ps(a, xv, acc[0][t]);                                               \
                if (nrow > 1) acc[1][t] = _mm256_fmadd_ps(b, xv, acc[1][t]);                                 \
            }                                                                                                \
        }                                                                                                    \
        for (int t = 0; t < nt; t++)                                                                         \
            for (int r = 0; r < nrow; r++) {                                                                 \
                float s = hsum_ps(acc[r][t]);                                                                \
                const char *w = r ? w1 : w0;                                                                 \
                for (int64_t k = i; k < n; k++) s += GET(w, k) * x[t * xs + k];                              \
                y[t * ys + r] = s;                                                                           \
            }                                                                                                \
    }                                                                                                        \
    TGT static void NAME(int64_t n, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,    \
                         int64_t nt, float *y, int64_t ys) {                                                 \
        const float *x = xq;                                                                                 \
        int64_t xs = (int64_t)(x_row / sizeof(float));                                                       \
        for (int64_t r = 0; r < nr; r += 2) {                                                                \
            const char *w0 = (const char *)W + (size_t)r * w_row, *w1 = w0 + w_row;                          \
            int nrow = nr - r > 1 ? 2 : 1;                                                                   \
            for (int64_t t = 0; t < nt; t += 4) {                                                            \
                int k = nt - t < 4 ? (int)(nt - t) : 4;                                                      \
                float *yt = y + t * ys + r;                                                                  \
                const float *xt = x + t * xs;                                                                \
                if (nrow == 2) {                                                                             \
                    if (k == 4) NAME##_tile(n, w0, w1, 2, xt, xs, 4, yt, ys);                                \
                    else if (k == 3) NAME##_tile(n, w0, w1, 2, xt, xs, 3, yt, ys);                           \
                    else if (k == 2) NAME##_tile(n, w0, w1, 2, xt, xs, 2, yt, ys);                           \
                    else NAME##_tile(n, w0, w1, 2, xt, xs, 1, yt, ys);                                       \
                } else {                                                                                     \
                    if (k == 4) NAME##_tile(n, w0, w0, 1, xt, xs, 4, yt, ys);                                \
                    else if (k == 3) NAME##_tile(n, w0, w0, 1, xt, xs, 3, yt, ys);                           \
                    else if (k == 2) NAME##_tile(n, w0, w0, 1, xt, xs, 2, yt, ys);                           \
                    else NAME##_tile(n, w0, w0, 1, xt, xs, 1, yt, ys);                                       \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

FLOAT_KERNEL(mm_f32, load8_f32, get_f32, 4)
FLOAT_KERNEL(mm_f16, load8_f16, get_f16, 2)
FLOAT_KERNEL(mm_bf16, load8_bf16, get_bf16, 2)

void tnd_cpu_kernels_avx2(tnd_cpu_kernels *k) {
    k->quant[TND_TYPE_Q8_0] = quant_q8_0;
    k->quant[TND_TYPE_Q8_1] = quant_q8_1;
    k->quant[TND_TYPE_Q8_K] = quant_q8_K;
    x86_register_gemm(k);
    k->mm[TND_TYPE_Q4_0].fn = mm_q4_0;
    k->mm[TND_TYPE_Q4_1].fn = mm_q4_1;
    k->mm[TND_TYPE_Q4_1].prep = prep_q4_1;
    k->mm[TND_TYPE_Q8_0].fn = mm4_q8_0;
    k->mm[TND_TYPE_Q5_0].fn = mm4_q5_0;
    k->mm[TND_TYPE_Q5_1].fn = mm_q5_1;
    k->mm[TND_TYPE_Q4_K].fn = mm_q4_K;
    k->mm[TND_TYPE_Q5_K].fn = mm_q5_K;
    k->mm[TND_TYPE_Q2_K].fn = mm_q2_K;
    k->mm[TND_TYPE_Q3_K].fn = mm_q3_K;
    k->mm[TND_TYPE_Q6_K].fn = mm_q6_K;
    k->mm[TND_TYPE_F32] = (tnd_mm_entry){mm_f32, TND_TYPE_F32, NULL, NULL};
    k->mm[TND_TYPE_F16] = (tnd_mm_entry){mm_f16, TND_TYPE_F32, NULL, NULL};
    k->mm[TND_TYPE_BF16] = (tnd_mm_entry){mm_bf16, TND_TYPE_F32, NULL, NULL};
}
