/* AVX-512 (F, BW, VL, DQ, VNNI) kernels.
 *
 * Prefill: the kernels of matmul_x86.h compiled with vpdpbusd (AVX512-VNNI
 * on 256-bit vectors, AVX512VL): one instruction per 4-byte dot instead of
 * vpmaddubsw + vpmaddwd, and no 16-bit intermediate to bound.
 *
 * Decode (matvec, n_tok < TND_GEMM_MIN_TOK):
 *   Q4_0, Q8_0, Q4_1: 512-bit kernels below, two 32-blocks per vector,
 *     vpdpbusd on unsigned weights (Q4_0, Q8_0: the offset taken out
 *     through the activation block sums), each token's part prepared once
 *     per call so that extra tokens (batched rounds) cost little;
 *   Q4_K, Q6_K: 512-bit kernels below, 64 weights per step: the unsigned
 *     quants u (Q4_K: nibbles, 0..15; Q6_K: 6 bits, 0..63) in element order,
 *     vpmaddubsw with 64 activation bytes (pairs: at most 2 * 63 * 127 =
 *     16002, no saturation), then vpdpwssd with the 16-bit group scales
 *     (one instruction for scale, widen and accumulate). Integer sums are
 *     exact per super-block, as in the AVX2 kernels.
 * Other formats inherit the AVX2 kernels through the table. */
#include <immintrin.h>

#include "cpu/matmul_impl.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define TGTI static inline __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"), always_inline))
#define NT_MAX 4
#define X86_VNNI 1
#include "cpu/matmul_x86.h"

TGTI float hsum512_ps(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* 16-bit lanes: lanes 0..15 = a, lanes 16..31 = b. */
TGTI __m512i w16_pair(short a, short b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(a)), _mm256_set1_epi16(b), 1);
}

/* Q4_K x Q8_K. Step j (elements 64j..64j+63): the low nibbles of bytes
 * 32j..32j+31 (group 2j) then their high nibbles (group 2j+1), with the
 * group scales in the matching 16-bit lanes; the mins go through the
 * activation's 16-sums as in the AVX2 kernel. */
TGTI void row5_q4_K(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q4_K *w = vw;
    __m512 acc[NT_MAX];
    __m256 accm[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps(), accm[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        pf_ahead(&w[b], 3); /* 144 bytes */
        __m128i sm = k4_scales_v(w[b].scales);
        float d = h2f(w[b].d), dmin = h2f(w[b].dmin);
        /* mins as 16 int16 (each twice: bsums come in 16-groups) */
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
        /* the 8 scales as int16 in lanes 0..7 (vpermw below reads only those) */
        __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        __m512i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * j));
            __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qb, m4)),
                                           _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4), 1);
            __m512i s = _mm512_permutexvar_epi16(w16_pair((short)(2 * j), (short)(2 * j + 1)), sc16);
            for (int t = 0; t < nt; t++) {
                const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                __m512i av = _mm512_loadu_si512((const void *)(a->qs + 64 * j));
                isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(u, av), s);
            }
        }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), m16);
            /* d*isum - dmin*msum, both scaled by the activation d */
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(a->d * d), acc[t]);
            accm[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_set1_ps(a->d * dmin), accm[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum512_ps(acc[t]) + hsum_ps(accm[t]);
}
ROW_LOOP(mm5_q4_K, row5_q4_K)

/* Q6_K x Q8_K: q = u - 32, u in [0, 63]; the -32 is folded in through the
 * activation's 16-group sums: isum = sum_g sc_g (dot(u, a)_g - 32 bsum_g).
 * Per half h (128 elements), from ql (64 bytes) and qh (32 bytes):
 *   elements 0..63:   low nibbles of ql | (qh bits 0-1 for ql bytes 0..31,
 *                     bits 2-3 for bytes 32..63) << 4;
 *   elements 64..127: high nibbles of ql | (qh bits 4-5 / 6-7) << 4.
 * 16-bit lane l of a step covers elements 2l, 2l+1: group 4 * step + l / 8. */
TGTI void row5_q6_K(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys) {
    const block_q6_K *w = vw;
    __m512 acc[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    /* vpermw indices: lanes 8g..8g+7 -> scale g (g = 0..3), then +4 */
    const __m512i gi = _mm512_srli_epi16(
        _mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006, 0x00090008, 0x000b000a, 0x000d000c,
                          0x000f000e, 0x00110010, 0x00130012, 0x00150014, 0x00170016, 0x00190018, 0x001b001a,
                          0x001d001c, 0x001f001e),
        3);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        pf_ahead(&w[b], 4); /* 210 bytes */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        __m512i sc16z = _mm512_castsi256_si512(sc16); /* vpermw below reads lanes 0..15 only */
        __m512i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512((const void *)(w[b].ql + 64 * h));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            __m512i u[2];
            u[0] = _mm512_or_si512(_mm512_and_si512(ql, m0f), _mm512_and_si512(_mm512_slli_epi16(qh2, 4), m30));
            u[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m0f), _mm512_and_si512(qh2, m30));
            for (int c = 0; c < 2; c++) {
                __m512i s = _mm512_permutexvar_epi16(_mm512_add_epi16(gi, _mm512_set1_epi16((short)(8 * h + 4 * c))),
                                                     sc16z);
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                    __m512i av = _mm512_loadu_si512((const void *)(a->qs + 128 * h + 64 * c));
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(u[c], av), s);
                }
            }
        }
        float d = h2f(w[b].d);
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), sc16);
            __m512i s = _mm512_sub_epi32(isum[t], _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(a->d * d), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum512_ps(acc[t]);
}
ROW_LOOP(mm5_q6_K, row5_q6_K)

/* ---- Q4_0 and Q8_0 x Q8_0, Q4_1 x Q8_1 -------------------------------------------
 * Two 32-blocks per 512-bit vector. The weights enter vpdpbusd as unsigned
 * bytes u: Q4_0 its nibbles (q + 8), Q8_0 q + 128 (q xor 0x80). The offset
 * comes back out through the activation block sums (pair_prep, once per
 * call): dot(q, a) = dot(u, a) - OFF sum(a), spread over the block's 8 int32
 * lanes as vpdpbusd's start value (OFF / 8 sum(a) each: Q4_0 sum(a), Q8_0
 * 16 sum(a)).
 * Integer sums are exact per block (at most 4 * 255 * 128 per lane); the
 * float sum over blocks runs in 16 lanes. An odd last block goes alone in
 * the lower half (the upper half all zeros). */

/* u for blocks b[0] (lower half) and b[1] (upper half), element order. */
TGTI __m512i u64_q4_0(const block_q4_0 *b) {
    __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[0].qs))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[1].qs)), 1);
    /* per 16 bytes: low nibbles (elements 0..15), then high (16..31) */
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
}
TGTI __m512i u64_q8_0(const block_q8_0 *b) {
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                   _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}
/* u of one block, upper half zero. */
TGTI __m512i u32_q4_0(const block_q4_0 *b) { return _mm512_zextsi256_si512(nib32(b->qs)); }
TGTI __m512i u32_q8_0(const block_q8_0 *b) {
    return _mm512_zextsi256_si512(
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), _mm256_set1_epi8((char)0x80)));
}
/* The scales of b[0] (lanes 0..7) and b[1] (lanes 8..15): one load holding
 * both half floats and one vpermw. Q4_0: d at 16-bit words 0 and 9 of 32
 * bytes; Q8_0: words 0 and 17 of 64 bytes (both within the pair). */
TGTI __m512 d16_q4_0(const block_q4_0 *b) {
    __m256i v = _mm256_loadu_si256((const __m256i *)b);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(_mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9), v));
}
TGTI __m512 d16_q8_0(const block_q8_0 *b) {
    __m512i v = _mm512_loadu_si512((const void *)b);
    __m512i idx = _mm512_zextsi256_si512(_mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17, 17, 17));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, v)));
}

/* Q4_1 x Q8_1 the same way: w = d q + m with q the unsigned nibbles
 * (0..15), so vpdpbusd takes them as they are (no offset); the m part of a
 * block is m * s of the activation block (gathered per 8 pairs, below). */
TGTI __m512i u64_q4_1(const block_q4_1 *b) {
    __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[0].qs))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[1].qs)), 1);
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
}

/* ---- the pair kernels' driver -----------------------------------------------
 * What belongs to a token alone is prepared once per call (pair_prep), not
 * per row group: its quants of each block pair contiguous (one 64-byte
 * operand), its scales spread over the pair's lanes (S), and X: for Q4_0
 * and Q8_0 the int32 offset start values of vpdpbusd, for Q4_1 the block
 * sums s as floats, one per block: the kernel gathers the m of 8 pairs (16
 * blocks) into one vector, so the m part costs a token one FMA per 8 pairs.
 * A token then costs 4 instructions per row and 64 weights, all taking the
 * prepared vectors as memory operands, against ~6-10 for unpacking the
 * row's pair, which is shared by every token of the group: so a batched
 * decode round (several sequences, issue 27) costs little more than one
 * token. Rows go in groups of 4 for 1-2 tokens, of 2 for more (R * NT <= 8
 * accumulators), tokens in groups of up to 4. Each (row, token) sum is
 * computed in the same order whatever the group sizes, so a sequence's
 * results do not depend on what it is batched with. */
enum { PF_Q4_0, PF_Q8_0, PF_Q4_1 };

/* Per token: np = ceil(nb / 2) pairs of 64 quant bytes, np x 16 floats S,
 * np x 16 words X; an odd last block's pair padded with zeros (Q4_1's X:
 * nb floats, zeros up to 16 ceil(np / 8) <= 16 np). */
#define PAIR_TOK_BYTES(np) ((size_t)(np) * 192)

TGTI void pair_prep(const int F, const char *xq, size_t x_row, int64_t nt, int64_t nb, char *buf) {
    const int64_t np = (nb + 1) / 2;
    const __m256i ones8 = _mm256_set1_epi8(1);
    for (int64_t t = 0; t < nt; t++) {
        const char *arow = xq + t * x_row;
        int8_t *aq = (int8_t *)(buf + (size_t)t * PAIR_TOK_BYTES(np));
        float *S = (float *)(aq + 64 * np);
        char *X = (char *)(S + 16 * np);
        for (int64_t i = 0; i < 2 * np; i++) {
            if (i >= nb) {
                memset(aq + 32 * i, 0, 32);
                _mm256_storeu_ps(S + 8 * i, _mm256_setzero_ps());
                _mm256_storeu_si256((__m256i *)(X + 32 * i), _mm256_setzero_si256());
            } else if (F == PF_Q4_1) {
                const block_q8_1 *a = (const block_q8_1 *)arow + i;
                memcpy(aq + 32 * i, a->qs, 32);
                _mm256_storeu_ps(S + 8 * i, _mm256_set1_ps(h2f(a->d)));
            } else {
                /* dot(q, a) = dot(u, a) - OFF sum(a), OFF / 8 per lane */
                const block_q8_0 *a = (const block_q8_0 *)arow + i;
                __m256i q = _mm256_loadu_si256((const __m256i *)a->qs);
                _mm256_storeu_si256((__m256i *)(aq + 32 * i), q);
                _mm256_storeu_ps(S + 8 * i, _mm256_set1_ps(h2f(a->d)));
                int32_t nsa = -hsum_epi32(dot_us(ones8, q));
                _mm256_storeu_si256((__m256i *)(X + 32 * i), _mm256_set1_epi32(nsa * (F == PF_Q8_0 ? 16 : 1)));
            }
        }
        if (F == PF_Q4_1) { /* X: the blocks' s, zeros up to a multiple of 16 */
            const block_q8_1 *a = (const block_q8_1 *)arow;
            float *sa = (float *)X;
            for (int64_t i = 0; i < 16 * ((np + 7) / 8); i++) sa[i] = i < nb ? h2f(a[i].s) : 0.0f;
        }
    }
}

/* R rows x NT tokens of format F. */
TGTI void pair_tile(const int F, int64_t nb, const char *w, size_t w_row, const char *buf, const int R, const int NT,
                    float *y, int64_t ys) {
    const int64_t np = (nb + 1) / 2;
    const size_t tb = PAIR_TOK_BYTES(np);
    const size_t bs = F == PF_Q4_0 ? sizeof(block_q4_0) : F == PF_Q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_1);
    const size_t rowb = (size_t)nb * bs;
    __m512 acc[4][4];
    __m256i mh[4]; /* Q4_1: the m (half floats) of up to 8 pairs, block order */
    for (int r = 0; r < R; r++) {
        mh[r] = _mm256_setzero_si256();
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < np; p++) {
        const bool two = 2 * p + 1 < nb;
        for (int r = 0; r < R; r++) {
            const char *b = w + r * w_row + (size_t)(2 * p) * bs;
            /* R interleaved streams: each row ahead, past its end the same
             * row of the next group */
            const char *pf = b + PF_DIST;
            if (pf >= w + r * w_row + rowb) pf += (size_t)(R - 1) * w_row;
            for (int l = 0; l < (int)(2 * bs + 63) / 64; l++) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
            __m512i u;
            __m512 dw;
            if (F == PF_Q4_1) {
                /* 16-bit words d0 0, m0 1, d1 10, m1 11: in the pair's first
                 * 32 bytes; a lone last block's 2 words (the rest zeros) */
                __m256i h = two ? _mm256_loadu_si256((const __m256i *)b) : _mm256_maskz_loadu_epi16(0x3, b);
                u = two ? u64_q4_1((const block_q4_1 *)b)
                        : _mm512_zextsi256_si512(nib32(((const block_q4_1 *)b)->qs));
                dw = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
                    _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 10, 10, 10), h));
                /* m0, m1 into words 2 (p % 8), 2 (p % 8) + 1 */
                mh[r] = _mm256_mask_permutexvar_epi16(mh[r], (__mmask16)(3u << (2 * (p & 7))),
                                                      _mm256_setr_epi16(1, 11, 1, 11, 1, 11, 1, 11, 1, 11, 1, 11,
                                                                        1, 11, 1, 11), h);
            } else if (two) {
                if (F == PF_Q4_0) u = u64_q4_0((const block_q4_0 *)b), dw = d16_q4_0((const block_q4_0 *)b);
                else u = u64_q8_0((const block_q8_0 *)b), dw = d16_q8_0((const block_q8_0 *)b);
            } else { /* an odd last block, alone in the lower half */
                uint16_t d;
                memcpy(&d, b, 2); /* every format starts with d */
                dw = _mm512_set1_ps(h2f(d));
                if (F == PF_Q4_0) u = u32_q4_0((const block_q4_0 *)b);
                else u = u32_q8_0((const block_q8_0 *)b);
            }
            for (int t = 0; t < NT; t++) {
                const char *tp = buf + (size_t)t * tb;
                const __m512 S = _mm512_loadu_ps((const float *)(tp + 64 * np) + 16 * p);
                __m512i c = F == PF_Q4_1 ? _mm512_setzero_si512() : _mm512_loadu_si512(tp + 128 * np + 64 * p);
                __m512i s = _mm512_dpbusd_epi32(c, u, _mm512_loadu_si512(tp + 64 * p));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, S), acc[r][t]);
            }
            if (F == PF_Q4_1 && ((p & 7) == 7 || p == np - 1)) { /* 8 pairs' m part */
                const __m512 m16 = _mm512_cvtph_ps(mh[r]);
                for (int t = 0; t < NT; t++) {
                    const float *sa = (const float *)(buf + (size_t)t * tb + 128 * np) + 16 * (p / 8);
                    acc[r][t] = _mm512_fmadd_ps(m16, _mm512_loadu_ps(sa), acc[r][t]);
                }
                mh[r] = _mm256_setzero_si256();
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) y[t * ys + r] = hsum512_ps(acc[r][t]);
}

TGTI void pair_mm(const int F, int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                  int64_t nt, float *y, int64_t ys) {
    const int64_t nb = n_in / 32;
    const size_t tb = PAIR_TOK_BYTES((nb + 1) / 2);
    char *buf = tnd_cpu_tls_buf(1, tb * (size_t)nt);
    if (!buf) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;
        return;
    }
    pair_prep(F, xq, x_row, nt, nb, buf);
    const int R = nt <= 2 ? 4 : 2;
    for (int64_t r = 0; r < nr;) {
        const int rg = nr - r >= R ? R : 1; /* the last rows one by one */
        for (int64_t t = 0; t < nt; t += 4) {
            const int k = nt - t < 4 ? (int)(nt - t) : 4;
            const char *w = (const char *)W + (size_t)r * w_row, *bt = buf + (size_t)t * tb;
            float *yt = y + t * ys + r;
            switch (rg * 8 + k) {
            case 4 * 8 + 1: pair_tile(F, nb, w, w_row, bt, 4, 1, yt, ys); break;
            case 4 * 8 + 2: pair_tile(F, nb, w, w_row, bt, 4, 2, yt, ys); break;
            case 2 * 8 + 1: pair_tile(F, nb, w, w_row, bt, 2, 1, yt, ys); break;
            case 2 * 8 + 2: pair_tile(F, nb, w, w_row, bt, 2, 2, yt, ys); break;
            case 2 * 8 + 3: pair_tile(F, nb, w, w_row, bt, 2, 3, yt, ys); break;
            case 2 * 8 + 4: pair_tile(F, nb, w, w_row, bt, 2, 4, yt, ys); break;
            case 1 * 8 + 1: pair_tile(F, nb, w, w_row, bt, 1, 1, yt, ys); break;
            case 1 * 8 + 2: pair_tile(F, nb, w, w_row, bt, 1, 2, yt, ys); break;
            case 1 * 8 + 3: pair_tile(F, nb, w, w_row, bt, 1, 3, yt, ys); break;
            default: pair_tile(F, nb, w, w_row, bt, 1, 4, yt, ys); break;
            }
        }
        r += rg;
    }
}

#define PAIR_KERNEL(fmt, F)                                                                                  \
    TGT static void mm5_##fmt(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq,         \
                              size_t x_row, int64_t nt, float *y, int64_t ys) {                              \
        pair_mm(F, n_in, W, w_row, nr, xq, x_row, nt, y, ys);                                                \
    }
PAIR_KERNEL(q4_0, PF_Q4_0)
PAIR_KERNEL(q8_0, PF_Q8_0)
PAIR_KERNEL(q4_1, PF_Q4_1)
#undef PAIR_KERNEL

void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k) {
    x86_register_gemm(k);
    k->mm[TND_TYPE_Q4_0].fn = mm5_q4_0;
    k->mm[TND_TYPE_Q8_0].fn = mm5_q8_0;
    k->mm[TND_TYPE_Q4_1].fn = mm5_q4_1;
    k->mm[TND_TYPE_Q4_K].fn = mm5_q4_K;
    k->mm[TND_TYPE_Q6_K].fn = mm5_q6_K;
}
