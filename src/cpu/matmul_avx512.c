/* AVX-512 (F, BW, VL, DQ, VNNI) kernels.
 *
 * Prefill: the kernels of matmul_x86.h compiled with vpdpbusd (AVX512-VNNI):
 * one instruction per 4-byte dot instead of vpmaddubsw + vpmaddwd, and no
 * 16-bit intermediate to bound; on 512-bit vectors over groups of 16 rows
 * (X86_ZMM), which on Zen 5 run at the rate 256-bit ones over 8 do.
 *
 * Decode (matvec, n_tok < TND_GEMM_MIN_TOK):
 *   Q4_0, Q5_0, Q8_0: 512-bit kernels below, two 32-blocks per vector,
 *     vpdpbusd on unsigned weights (the offset taken out through the
 *     activation block sums), each token's part prepared once per call so
 *     that extra tokens (batched rounds) cost little;
 *   Q4_1, Q5_1: the same with four blocks per vector (each block's first
 *     and second halves apart), so a token's conversion and scaling is
 *     shared by 4 blocks;
 *   Q5_0 and Q5_1 are their 4-bit siblings with each element's fifth bit
 *     (the block's 32-bit qh, bit j for element j) or-ed in as 0x10 by one
 *     masked move: the bits are a byte mask already;
 *   Q2_K..Q6_K: 512-bit kernels below, 64 weights per step: the unsigned
 *     quants u (Q2_K: 2 bits, 0..3; Q3_K: 3 bits, 0..7; Q4_K: nibbles, 0..15;
 *     Q5_K: 5 bits, 0..31; Q6_K: 6 bits, 0..63) in element order,
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
#define X86_ZMM 1
#include "cpu/matmul_x86.h"

TGTI float hsum512_ps(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* 16-bit lanes: lanes 0..15 = a, lanes 16..31 = b. */
TGTI __m512i w16_pair(short a, short b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(a)), _mm256_set1_epi16(b), 1);
}

/* Q4_K and Q5_K x Q8_K. Step j (elements 64j..64j+63): the low nibbles of
 * bytes 32j..32j+31 (group 2j) then their high nibbles (group 2j+1), with
 * the group scales in the matching 16-bit lanes; the mins go through the
 * activation's 16-sums as in the AVX2 kernel. Q5_K (Q5 1) puts each
 * element's fifth bit, bit g of qh[i % 32] for element i of group g, above
 * its nibble (u <= 31: vpmaddubsw's pairs stay within 2 * 31 * 127): step
 * j's bits 2j and 2j + 1 are brought to bit 0 of each byte by one variable
 * shift of the 16-bit lanes (2j in the low half, 2j + 1 in the high), then
 * to bit 4. The two blocks share d, dmin and scales' offsets. */
TGTI void row5_k45(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys, const int Q5) {
    const size_t bs = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    __m512 acc[NT_MAX];
    __m256 accm[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps(), accm[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m512i b4 = _mm512_set1_epi8(0x10);
    __m512i cnt[4];
    for (int j = 0; j < 4; j++) cnt[j] = w16_pair((short)(2 * j), (short)(2 * j + 1));
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        const block_q4_K *w = (const block_q4_K *)((const char *)vw + (size_t)b * bs);
        const uint8_t *qs = Q5 ? ((const block_q5_K *)w)->qs : w->qs;
        pf_ahead(w, 3); /* a block: 144 or 176 bytes */
        __m128i sm = k4_scales_v(w->scales);
        float d = h2f(w->d), dmin = h2f(w->dmin);
        /* mins as 16 int16 (each twice: bsums come in 16-groups) */
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
        /* the 8 scales as int16 in lanes 0..7 (vpermw below reads only those) */
        __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m512i qh =
            Q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const block_q5_K *)w)->qh))
               : _mm512_setzero_si512();
        __m512i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qb, m4)),
                                           _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4), 1);
            if (Q5) {
                const __m512i hb = _mm512_slli_epi16(_mm512_srlv_epi16(qh, cnt[j]), 4);
                u = _mm512_ternarylogic_epi32(u, hb, b4, 0xf8); /* u | (hb & b4) */
            }
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
ROW_VARIANT(row5_q4_K, row5_k45, 0)
ROW_VARIANT(row5_q5_K, row5_k45, 1)
ROW_LOOP(mm5_q4_K, row5_q4_K)
ROW_LOOP(mm5_q5_K, row5_q5_K)

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

/* Q2_K and Q3_K x Q8_K: 2-bit quants, element i at bits 2 ((i % 128) / 32)
 * of qs[32 (i / 128) + i % 32]; Q3_K (Q3 1) adds bit i / 32 of
 * hmask[i % 32] as the third (u = q + 4 in 0..7). Steps of 64 elements as
 * in row5_q6_K (the 16 groups of 16 and their scales alike): step c of half
 * h takes its two 32-element runs at shifts 4c and 4c + 2 of the half's 32
 * qs bytes, by one variable shift of the 16-bit lanes of the bytes in both
 * halves of a vector (and the high bits the same way at 4h + 2c and
 * 4h + 2c + 1). Q2_K: d sc q - dmin m, sc and m the nibbles of scales[g],
 * the mins through the activation's 16-sums as in row5_k45; Q3_K: d sc (u -
 * 4), sc the 6-bit signed scales, the -4 through the 16-sums as row5_q6_K
 * folds its -32. */
TGTI void row5_k23(int64_t n, const void *vw, const char *xq, size_t xs, int nt, float *y, int64_t ys, const int Q3) {
    const size_t bs = Q3 ? sizeof(block_q3_K) : sizeof(block_q2_K);
    __m512 acc[NT_MAX];
    __m256 accm[NT_MAX];
    for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps(), accm[t] = _mm256_setzero_ps();
    const __m512i m3 = _mm512_set1_epi8(0x03), b2 = _mm512_set1_epi8(0x04);
    /* vpermw indices: lanes 8g..8g+7 -> scale g (g = 0..3), then + 4 a step */
    const __m512i gi = _mm512_srli_epi16(
        _mm512_setr_epi32(0x00010000, 0x00030002, 0x00050004, 0x00070006, 0x00090008, 0x000b000a, 0x000d000c,
                          0x000f000e, 0x00110010, 0x00130012, 0x00150014, 0x00170016, 0x00190018, 0x001b001a,
                          0x001d001c, 0x001f001e),
        3);
    for (int64_t b = 0; b < n / TND_QK_K; b++) {
        const char *blk = (const char *)vw + (size_t)b * bs;
        pf_ahead(blk, 2); /* a block: 84 or 110 bytes */
        __m256i sc16, m16;
        float d, dmin;
        const uint8_t *qs = k23_block(blk, Q3, &sc16, &m16, &d, &dmin);
        const __m512i hm =
            Q3 ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const block_q3_K *)blk)->hmask))
               : _mm512_setzero_si512();
        const __m512i sc16z = _mm512_castsi256_si512(sc16); /* vpermw reads lanes 0..15 only */
        __m512i isum[NT_MAX];
        for (int t = 0; t < nt; t++) isum[t] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
            for (int c = 0; c < 2; c++) {
                __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, w16_pair((short)(4 * c), (short)(4 * c + 2))), m3);
                if (Q3) {
                    const __m512i hb = _mm512_srlv_epi16(hm, w16_pair((short)(4 * h + 2 * c), (short)(4 * h + 2 * c + 1)));
                    u = _mm512_ternarylogic_epi32(u, _mm512_slli_epi16(hb, 2), b2, 0xf8); /* u | (hb << 2 & 4) */
                }
                const __m512i s =
                    _mm512_permutexvar_epi16(_mm512_add_epi16(gi, _mm512_set1_epi16((short)(8 * h + 4 * c))), sc16z);
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
                    __m512i av = _mm512_loadu_si512((const void *)(a->qs + 128 * h + 64 * c));
                    isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(u, av), s);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = (const block_q8_K *)(xq + t * xs) + b;
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m512i si = isum[t];
            if (Q3) /* sum_g sc_g (dot(u, a)_g - 4 bsum_g) */
                si = _mm512_sub_epi32(si, _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 2)));
            else
                accm[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, m16)),
                                           _mm256_set1_ps(a->d * dmin), accm[t]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_set1_ps(a->d * d), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ys] = hsum512_ps(acc[t]) + hsum_ps(accm[t]);
}
ROW_VARIANT(row5_q2_K, row5_k23, 0)
ROW_VARIANT(row5_q3_K, row5_k23, 1)
ROW_LOOP(mm5_q2_K, row5_q2_K)
ROW_LOOP(mm5_q3_K, row5_q3_K)

/* ---- Q4_0, Q5_0 and Q8_0 x Q8_0 -------------------------------------------------
 * Two 32-blocks per 512-bit vector. The weights enter vpdpbusd as unsigned
 * bytes u: Q4_0 its nibbles (q + 8), Q5_0 its 5 bits (q + 16), Q8_0 q + 128
 * (q xor 0x80). The offset comes back out through the activation block sums
 * (pair_prep, once per call): dot(q, a) = dot(u, a) - OFF sum(a), spread
 * over the block's 8 int32 lanes as vpdpbusd's start value (OFF / 8 sum(a)
 * each: Q4_0 sum(a), Q5_0 2 sum(a), Q8_0 16 sum(a)).
 * Integer sums are exact per block (at most 4 * 255 * 128 per lane); the
 * float sum over blocks runs in 16 lanes. An odd last block goes alone in
 * the lower half (the upper half all zeros). */

/* The nibbles of two blocks' 16 quant bytes, element order: qs0's in the
 * lower half, qs1's in the upper. */
TGTI __m512i nib64(const uint8_t *qs0, const uint8_t *qs1) {
    __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs0))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs1)), 1);
    /* per 16 bytes: low nibbles (elements 0..15), then high (16..31) */
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
}
/* 0x10 in the bytes whose bit of mask is set: Q5's fifth bits. */
TGTI __m512i hb64(uint64_t mask) { return _mm512_maskz_mov_epi8((__mmask64)mask, _mm512_set1_epi8(0x10)); }
TGTI uint32_t qh32(const uint8_t *qh) {
    uint32_t v;
    memcpy(&v, qh, 4);
    return v;
}

/* u for blocks b[0] (lower half) and b[1] (upper half), element order. */
TGTI __m512i u64_q4_0(const block_q4_0 *b) { return nib64(b[0].qs, b[1].qs); }
TGTI __m512i u64_q5_0(const block_q5_0 *b) {
    return _mm512_or_si512(nib64(b[0].qs, b[1].qs), hb64((uint64_t)qh32(b[1].qh) << 32 | qh32(b[0].qh)));
}
TGTI __m512i u64_q8_0(const block_q8_0 *b) {
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                   _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}
/* u of one block, upper half zero. */
TGTI __m512i u32_q4_0(const block_q4_0 *b) { return _mm512_zextsi256_si512(nib32(b->qs)); }
TGTI __m512i u32_q5_0(const block_q5_0 *b) {
    return _mm512_zextsi256_si512(_mm256_or_si256(nib32(b->qs), _mm256_maskz_mov_epi8(qh32(b->qh), _mm256_set1_epi8(0x10))));
}
TGTI __m512i u32_q8_0(const block_q8_0 *b) {
    return _mm512_zextsi256_si512(
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), _mm256_set1_epi8((char)0x80)));
}
/* The scales of b[0] (lanes 0..7) and b[1] (lanes 8..15): one load holding
 * both half floats and one vpermw. Q4_0: d at 16-bit words 0 and 9 of 32
 * bytes; Q5_0: words 0 and 11 of 32; Q8_0: words 0 and 17 of 64 bytes (all
 * within the pair). */
TGTI __m512 d16_w(const void *b, const short w1) {
    __m256i v = _mm256_loadu_si256((const __m256i *)b);
    return _mm512_cvtph_ps(
        _mm256_permutexvar_epi16(_mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, w1, w1, w1, w1, w1, w1, w1, w1), v));
}
TGTI __m512 d16_q4_0(const block_q4_0 *b) { return d16_w(b, 9); }
TGTI __m512 d16_q5_0(const block_q5_0 *b) { return d16_w(b, 11); }
TGTI __m512 d16_q8_0(const block_q8_0 *b) {
    __m512i v = _mm512_loadu_si512((const void *)b);
    __m512i idx = _mm512_zextsi256_si512(_mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17, 17, 17));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, v)));
}

/* ---- the pair kernels' driver -----------------------------------------------
 * What belongs to a token alone is prepared once per call (pair_prep), not
 * per row group: its quants of each block pair contiguous (one 64-byte
 * operand), its scales spread over the pair's lanes (S), and X, the
 * int32 offset start values of vpdpbusd. A token then costs 4 instructions per row and 64 weights, all taking the
 * prepared vectors as memory operands, against ~6-10 for unpacking the
 * row's pair, which is shared by every token of the group: so a batched
 * decode round (several sequences, issue 27) costs little more than one
 * token. Rows go in groups of 4 for 1-2 tokens, of 2 for more (R * NT <= 8
 * accumulators), tokens in groups of up to 4. Each (row, token) sum is
 * computed in the same order whatever the group sizes, so a sequence's
 * results do not depend on what it is batched with. */
enum { PF_Q4_0, PF_Q8_0, PF_Q5_0, PF_Q4_1, PF_Q5_1 }; /* PF_Q4_1, PF_Q5_1: the quad kernel below */

/* Per token: np = ceil(nb / 2) pairs of 64 quant bytes, np x 16 floats S,
 * np x 16 words X; an odd last block's pair padded with zeros. */
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
            } else {
                /* dot(q, a) = dot(u, a) - OFF sum(a), OFF / 8 per lane */
                const block_q8_0 *a = (const block_q8_0 *)arow + i;
                __m256i q = _mm256_loadu_si256((const __m256i *)a->qs);
                _mm256_storeu_si256((__m256i *)(aq + 32 * i), q);
                _mm256_storeu_ps(S + 8 * i, _mm256_set1_ps(h2f(a->d)));
                int32_t nsa = -hsum_epi32(dot_us(ones8, q));
                _mm256_storeu_si256((__m256i *)(X + 32 * i),
                                    _mm256_set1_epi32(nsa * (F == PF_Q8_0 ? 16 : F == PF_Q5_0 ? 2 : 1)));
            }
        }
    }
}

/* R rows x NT tokens of format F. */
TGTI void pair_tile(const int F, int64_t nb, const char *w, size_t w_row, const char *buf, const int R, const int NT,
                    float *y, int64_t ys) {
    const int64_t np = (nb + 1) / 2;
    const size_t tb = PAIR_TOK_BYTES(np);
    const size_t bs = F == PF_Q4_0 ? sizeof(block_q4_0) : F == PF_Q5_0 ? sizeof(block_q5_0) : sizeof(block_q8_0);
    const size_t rowb = (size_t)nb * bs;
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
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
            if (two) {
                if (F == PF_Q4_0) u = u64_q4_0((const block_q4_0 *)b), dw = d16_q4_0((const block_q4_0 *)b);
                else if (F == PF_Q5_0) u = u64_q5_0((const block_q5_0 *)b), dw = d16_q5_0((const block_q5_0 *)b);
                else u = u64_q8_0((const block_q8_0 *)b), dw = d16_q8_0((const block_q8_0 *)b);
            } else { /* an odd last block, alone in the lower half */
                uint16_t d;
                memcpy(&d, b, 2); /* every format starts with d */
                dw = _mm512_set1_ps(h2f(d));
                if (F == PF_Q4_0) u = u32_q4_0((const block_q4_0 *)b);
                else if (F == PF_Q5_0) u = u32_q5_0((const block_q5_0 *)b);
                else u = u32_q8_0((const block_q8_0 *)b);
            }
            for (int t = 0; t < NT; t++) {
                const char *tp = buf + (size_t)t * tb;
                const __m512 S = _mm512_loadu_ps((const float *)(tp + 64 * np) + 16 * p);
                __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(tp + 128 * np + 64 * p), u, _mm512_loadu_si512(tp + 64 * p));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, S), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) y[t * ys + r] = hsum512_ps(acc[r][t]);
}

/* ---- Q4_1 and Q5_1 x Q8_1: four blocks per vector ------------------------------
 * Q4_1 keeps its quants as 16 bytes a block, low nibbles the first 16
 * elements, high nibbles the last 16: the low nibbles of 4 blocks are one
 * 64-byte vector (4 loads, an and), the high nibbles another. Two vpdpbusd
 * against the token's matching halves (laid out once per call, quad_prep)
 * leave each block's integer sum in 4 lanes, so converting and scaling
 * costs a token 3 instructions per 4 blocks instead of per 2: a token
 * costs 5 instructions per row and 128 weights (the pair layout: 8). The
 * d of the 4 blocks, 4 lanes each, come from one load of the 4 headers
 * (80 bytes, all within the first 64) and one vpermw; the m part as in
 * the pair kernels, gathered per 16 blocks. Each (row, token) sum runs in
 * the same order whatever the row and token grouping. (Q8_0, the head,
 * the same way measured no faster: at 30 MB it is bound by memory.)
 * Q5_1 (24-byte blocks: d, m, qh, qs) the same, its headers reaching past
 * the first 64 bytes (two loads, one vpermt2w) and the fifth bits of the
 * 4 blocks' first and second halves or-ed in as two 64-bit masks. */

/* Per token: nq quads of 64 + 64 quant bytes (elements 0..15, then 16..31
 * of each block), nq x 16 floats S (d, 4 lanes a block), then the blocks'
 * s as floats, zeros up to a multiple of 16; missing blocks zero. */
#define QUAD_TOK_BYTES(nq) ((size_t)(nq) * 192 + (size_t)64 * (((nq) + 3) / 4))

TGTI void quad_prep(const char *xq, size_t x_row, int64_t nt, int64_t nb, char *buf) {
    const int64_t nq = (nb + 3) / 4;
    for (int64_t t = 0; t < nt; t++) {
        const block_q8_1 *a = (const block_q8_1 *)(xq + t * x_row);
        int8_t *aq = (int8_t *)(buf + (size_t)t * QUAD_TOK_BYTES(nq));
        float *S = (float *)(aq + 128 * nq), *X = S + 16 * nq;
        for (int64_t i = 0; i < 4 * nq; i++) {
            int8_t *h = aq + 128 * (i / 4) + 16 * (i % 4);
            if (i < nb) {
                memcpy(h, a[i].qs, 16);
                memcpy(h + 64, a[i].qs + 16, 16);
                _mm_storeu_ps(S + 4 * i, _mm_set1_ps(h2f(a[i].d)));
            } else {
                memset(h, 0, 16);
                memset(h + 64, 0, 16);
                _mm_storeu_ps(S + 4 * i, _mm_setzero_ps());
            }
        }
        for (int64_t i = 0; i < 16 * ((nq + 3) / 4); i++) X[i] = i < nb ? h2f(a[i].s) : 0.0f;
    }
}

/* Quad q (its n blocks, 1-4) of R rows x NT tokens into acc; F: PF_Q4_1
 * or PF_Q5_1. */
TGTI void quad_step(const int F, int64_t q, const int n, int64_t nq, const char *w, size_t w_row, size_t rowb,
                    const char *buf, size_t tb, const int R, const int NT, __m512 acc[4][4], __m256i mh[4]) {
    const bool q5 = F == PF_Q5_1;
    const size_t bs = q5 ? sizeof(block_q5_1) : sizeof(block_q4_1), qs = q5 ? 8 : 4;
    /* words of 4 headers (bs bytes apart): d_k at bs/2 k, m_k at bs/2 k + 1 */
    const short hw = (short)(bs / 2);
    const __m512i d_idx = _mm512_castsi256_si512(_mm256_setr_epi16(0, 0, 0, 0, hw, hw, hw, hw, 2 * hw, 2 * hw, 2 * hw,
                                                                    2 * hw, 3 * hw, 3 * hw, 3 * hw, 3 * hw));
    const __m512i m_idx = _mm512_castsi256_si512(_mm256_setr_epi16(1, hw + 1, 2 * hw + 1, 3 * hw + 1, 1, hw + 1,
                                                                    2 * hw + 1, 3 * hw + 1, 1, hw + 1, 2 * hw + 1,
                                                                    3 * hw + 1, 1, hw + 1, 2 * hw + 1, 3 * hw + 1));
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const char *b = w + r * w_row + (size_t)(4 * q) * bs;
        const char *pf = b + PF_DIST; /* R interleaved streams, as pair_tile */
        if (pf >= w + r * w_row + rowb) pf += (size_t)(R - 1) * w_row;
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        __m512i v, h, h2 = _mm512_setzero_si512();
        if (n == 4) {
            v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b + qs)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + bs + qs)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + 2 * bs + qs)), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + 3 * bs + qs)), 3);
            h = _mm512_loadu_si512(b);
            if (q5) h2 = _mm512_maskz_loadu_epi16(0xffff, b + 64); /* bytes 64..95 */
        } else { /* the row's last 1-3 blocks; nothing read past them */
            v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b + qs)));
            if (n > 1) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + bs + qs)), 1);
            if (n > 2) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + 2 * bs + qs)), 2);
            v = _mm512_maskz_mov_epi32((__mmask16)((1u << (4 * n)) - 1), v);
            const int words = (int)(bs / 2) * n; /* the n blocks' 16-bit words */
            h = _mm512_maskz_loadu_epi16(words >= 32 ? ~0u : (1u << words) - 1, b);
            if (words > 32) h2 = _mm512_maskz_loadu_epi16((1u << (words - 32)) - 1, b + 64);
        }
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        __m512 dw;
        if (q5) {
            /* block k's qh: bits 0..15 its first half (bytes 16k.. of lo), 16..31 its second */
            uint64_t ml = 0, mhi = 0;
            for (int k = 0; k < n; k++) {
                const uint64_t x = qh32((const uint8_t *)b + k * bs + 4);
                ml |= (x & 0xffff) << (16 * k);
                mhi |= (x >> 16) << (16 * k);
            }
            lo = _mm512_or_si512(lo, hb64(ml));
            hi = _mm512_or_si512(hi, hb64(mhi));
            dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(h, d_idx, h2)));
            mh[r] = _mm256_mask_mov_epi16(mh[r], (__mmask16)(0xfu << (4 * (q & 3))),
                                          _mm512_castsi512_si256(_mm512_permutex2var_epi16(h, m_idx, h2)));
        } else {
            dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_idx, h)));
            /* m_0..m_3 into words 4 (q % 4) .. + 3 */
            mh[r] = _mm256_mask_mov_epi16(mh[r], (__mmask16)(0xfu << (4 * (q & 3))),
                                          _mm512_castsi512_si256(_mm512_permutexvar_epi16(m_idx, h)));
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const char *tp = buf + (size_t)t * tb;
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(tp + 128 * q));
            s = _mm512_dpbusd_epi32(s, hi, _mm512_loadu_si512(tp + 128 * q + 64));
            const __m512 S = _mm512_loadu_ps((const float *)(tp + 128 * nq) + 16 * q);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, S), acc[r][t]);
        }
        if ((q & 3) == 3 || q == nq - 1) { /* 16 blocks' m part */
            const __m512 m16 = _mm512_cvtph_ps(mh[r]);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                const float *sa = (const float *)(buf + (size_t)t * tb + 192 * nq) + 16 * (q / 4);
                acc[r][t] = _mm512_fmadd_ps(m16, _mm512_loadu_ps(sa), acc[r][t]);
            }
            mh[r] = _mm256_setzero_si256();
        }
    }
}

/* R rows x NT tokens: the whole quads with n a constant 4, then the row's
 * last 1-3 blocks. With the branch on n inside one loop, gcc kept the
 * loop's state on the stack: four-token rounds over 8B-sized matrices ran
 * up to 18% slower (docs/BENCHMARKS.md). The same operations in the same
 * order: the same bits. */
TGTI void quad_tile(const int F, int64_t nb, const char *w, size_t w_row, const char *buf, const int R, const int NT,
                    float *y, int64_t ys) { /* buf: quad_prep's layout */
    const int64_t nq = (nb + 3) / 4;
    const size_t tb = QUAD_TOK_BYTES(nq), rowb = (size_t)nb * (F == PF_Q5_1 ? sizeof(block_q5_1) : sizeof(block_q4_1));
    __m512 acc[4][4];
    __m256i mh[4]; /* the m (half floats) of up to 16 blocks, block order */
    for (int r = 0; r < R; r++) {
        mh[r] = _mm256_setzero_si256();
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    }
    for (int64_t q = 0; q < nb / 4; q++) quad_step(F, q, 4, nq, w, w_row, rowb, buf, tb, R, NT, acc, mh);
    if (nb % 4) quad_step(F, nb / 4, (int)(nb % 4), nq, w, w_row, rowb, buf, tb, R, NT, acc, mh);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < NT; t++) y[t * ys + r] = hsum512_ps(acc[r][t]);
}

/* prep: the driver lays out a call's tokens once (matmul_impl.h); Q4_1's
 * and Q5_1's alike */
TGT static size_t prep5_q4_1(int64_t n_in, const void *xq, size_t x_row, int64_t nt, void *out) {
    const int64_t nb = n_in / 32;
    if (out) quad_prep(xq, x_row, nt, nb, out);
    return QUAD_TOK_BYTES((nb + 3) / 4);
}

/* One R x NT tile of format F: the pair kernel (Q4_0, Q5_0, Q8_0) or the
 * quad one (Q4_1, Q5_1). F, R and NT are constants at every call. */
TGTI void fmt_tile(const int F, int64_t nb, const char *w, size_t w_row, const char *buf, const int R, const int NT,
                   float *y, int64_t ys) {
    if (F == PF_Q4_1 || F == PF_Q5_1) quad_tile(F, nb, w, w_row, buf, R, NT, y, ys);
    else pair_tile(F, nb, w, w_row, buf, R, NT, y, ys);
}

/* nr rows x nt tokens in tiles (buf: the prepared tokens, tb bytes each):
 * rows in groups of 4 for 1-2 tokens, of 2 for more, the last rows one by
 * one; tokens in groups of up to 4. Each tile size is its own inlined
 * instance (the switch), as the kernels' accumulators want constant R, NT. */
TGTI void tiles_mm(const int F, int64_t nb, const void *W, size_t w_row, int64_t nr, const char *buf, size_t tb,
                   int64_t nt, float *y, int64_t ys) {
    const int R = nt <= 2 ? 4 : 2;
    for (int64_t r = 0; r < nr;) {
        const int rg = nr - r >= R ? R : 1; /* the last rows one by one */
        for (int64_t t = 0; t < nt; t += 4) {
            const int k = nt - t < 4 ? (int)(nt - t) : 4;
            const char *w = (const char *)W + (size_t)r * w_row, *bt = buf + (size_t)t * tb;
            float *yt = y + t * ys + r;
            switch (rg * 8 + k) {
            case 4 * 8 + 1: fmt_tile(F, nb, w, w_row, bt, 4, 1, yt, ys); break;
            case 4 * 8 + 2: fmt_tile(F, nb, w, w_row, bt, 4, 2, yt, ys); break;
            case 2 * 8 + 1: fmt_tile(F, nb, w, w_row, bt, 2, 1, yt, ys); break;
            case 2 * 8 + 2: fmt_tile(F, nb, w, w_row, bt, 2, 2, yt, ys); break;
            case 2 * 8 + 3: fmt_tile(F, nb, w, w_row, bt, 2, 3, yt, ys); break;
            case 2 * 8 + 4: fmt_tile(F, nb, w, w_row, bt, 2, 4, yt, ys); break;
            case 1 * 8 + 1: fmt_tile(F, nb, w, w_row, bt, 1, 1, yt, ys); break;
            case 1 * 8 + 2: fmt_tile(F, nb, w, w_row, bt, 1, 2, yt, ys); break;
            case 1 * 8 + 3: fmt_tile(F, nb, w, w_row, bt, 1, 3, yt, ys); break;
            default: fmt_tile(F, nb, w, w_row, bt, 1, 4, yt, ys); break;
            }
        }
        r += rg;
    }
}

/* xq: prep5_q4_1's layout, x_row its bytes per token */
TGT static void mm5_q4_1(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                         int64_t nt, float *y, int64_t ys) {
    tiles_mm(PF_Q4_1, n_in / 32, W, w_row, nr, xq, x_row, nt, y, ys);
}
TGT static void mm5_q5_1(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                         int64_t nt, float *y, int64_t ys) {
    tiles_mm(PF_Q5_1, n_in / 32, W, w_row, nr, xq, x_row, nt, y, ys);
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
    tiles_mm(F, nb, W, w_row, nr, buf, tb, nt, y, ys);
}

#define PAIR_KERNEL(fmt, F)                                                                                  \
    TGT static void mm5_##fmt(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq,         \
                              size_t x_row, int64_t nt, float *y, int64_t ys) {                              \
        pair_mm(F, n_in, W, w_row, nr, xq, x_row, nt, y, ys);                                                \
    }
PAIR_KERNEL(q4_0, PF_Q4_0)
PAIR_KERNEL(q5_0, PF_Q5_0)
PAIR_KERNEL(q8_0, PF_Q8_0)
#undef PAIR_KERNEL

void tnd_cpu_kernels_avx512(tnd_cpu_kernels *k) {
    x86_register_gemm(k);
    k->mm[TND_TYPE_Q4_0].fn = mm5_q4_0;
    k->mm[TND_TYPE_Q8_0].fn = mm5_q8_0;
    k->mm[TND_TYPE_Q4_1].fn = mm5_q4_1;
    k->mm[TND_TYPE_Q4_1].prep = prep5_q4_1;
    k->mm[TND_TYPE_Q5_0].fn = mm5_q5_0;
    k->mm[TND_TYPE_Q5_1].fn = mm5_q5_1;
    k->mm[TND_TYPE_Q5_1].prep = prep5_q4_1;
    k->mm[TND_TYPE_Q4_K].fn = mm5_q4_K;
    k->mm[TND_TYPE_Q5_K].fn = mm5_q5_K;
    k->mm[TND_TYPE_Q2_K].fn = mm5_q2_K;
    k->mm[TND_TYPE_Q3_K].fn = mm5_q3_K;
    k->mm[TND_TYPE_Q6_K].fn = mm5_q6_K;
}
