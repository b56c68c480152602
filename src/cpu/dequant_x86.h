/* Block unpacking shared by dequant_avx2.c and dequant_avx512.c: every
 * format is turned into 32 integer quants at a time (one __m256i of int8, in
 * element order) plus its scales, and the including file's emit_* functions
 * convert, scale and store them at its vector width.
 *
 * The includer defines, before including this file:
 *   TGT, TGTI   target attributes (function, forced-inline helper)
 *   DQ(name)    the name of a dequantizer in that file
 *   emit_mul(y, q, s0, s1):           y[0,16) = s0 * q, y[16,32) = s1 * q
 *   emit_add(y, q, d, m):             y[0,32) = d * q + m
 *   emit_sub(y, q, d0, m0, d1, m1):   y[0,16) = d0 * q - m0, y[16,32) = d1 * q - m1
 * each product and sum rounded separately, as in quant/ref_*.c.
 * Formats and bit positions: see quant/quant.h and quant/ref_kquants.c. */
#ifndef TND_CPU_DEQUANT_X86_H
#define TND_CPU_DEQUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "quant/quant.h"

/* 16 bytes of packed nibbles -> 32 quants: the low nibbles (elements 0..15)
 * then the high ones (16..31). */
TGTI __m256i dq_nibbles(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 32-bit mask -> 32 bytes: 0x10 where bit j is set (the fifth bit of Q5). */
TGTI __m256i dq_bit4(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    /* bytes 0..7 look at byte 0 of h, 8..15 at byte 1, ... (shuffle is per
     * 128-bit lane; each lane holds all four bytes of h). */
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                         3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Bits (c, c+2) style extraction: (v >> s) & mask on every byte. */
TGTI __m256i dq_bits(__m256i v, int s, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8((char)mask));
}

TGTI __m256i dq_load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* F16C conversion: exact, like tnd_fp16_to_fp32 (NaNs aside). */
TGTI float dq_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ---- 32-element blocks -------------------------------------------------- */

TGT static void DQ(q4_0)(const void *vx, float *y, int64_t k) {
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < k / 32; i++, y += 32) {
        float d = dq_h2f(x[i].d);
        emit_mul(y, _mm256_sub_epi8(dq_nibbles(x[i].qs), _mm256_set1_epi8(8)), d, d);
    }
}

TGT static void DQ(q4_1)(const void *vx, float *y, int64_t k) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < k / 32; i++, y += 32) emit_add(y, dq_nibbles(x[i].qs), dq_h2f(x[i].d), dq_h2f(x[i].m));
}

TGT static void DQ(q5_0)(const void *vx, float *y, int64_t k) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < k / 32; i++, y += 32) {
        float d = dq_h2f(x[i].d);
        __m256i q = _mm256_or_si256(dq_nibbles(x[i].qs), dq_bit4(x[i].qh));
        emit_mul(y, _mm256_sub_epi8(q, _mm256_set1_epi8(16)), d, d);
    }
}

TGT static void DQ(q5_1)(const void *vx, float *y, int64_t k) {
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < k / 32; i++, y += 32)
        emit_add(y, _mm256_or_si256(dq_nibbles(x[i].qs), dq_bit4(x[i].qh)), dq_h2f(x[i].d), dq_h2f(x[i].m));
}

TGT static void DQ(q8_0)(const void *vx, float *y, int64_t k) {
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < k / 32; i++, y += 32) {
        float d = dq_h2f(x[i].d);
        emit_mul(y, dq_load32(x[i].qs), d, d);
    }
}

TGT static void DQ(mxfp4)(const void *vx, float *y, int64_t k) {
    const block_mxfp4 *x = vx;
    __m128i t = _mm_loadu_si128((const __m128i *)tnd_mxfp4_values2);
    __m256i tab = _mm256_set_m128i(t, t);
    for (int64_t i = 0; i < k / 32; i++, y += 32) {
        float d = tnd_e8m0_to_fp32_half(x[i].e);
        emit_mul(y, _mm256_shuffle_epi8(tab, dq_nibbles(x[i].qs)), d, d);
    }
}

/* ---- K-quants: 256-element super-blocks, 8 chunks of 32 ------------------- */

TGT static void DQ(q2_K)(const void *vx, float *y, int64_t k) {
    const block_q2_K *x = vx;
    for (int64_t b = 0; b < k / TND_QK_K; b++) {
        float d = dq_h2f(x[b].d), dmin = dq_h2f(x[b].dmin);
        for (int c = 0; c < 8; c++, y += 32) {
            __m256i q = dq_bits(dq_load32(x[b].qs + 32 * (c / 4)), 2 * (c % 4), 3);
            int s0 = x[b].scales[2 * c], s1 = x[b].scales[2 * c + 1];
            emit_sub(y, q, d * (float)(s0 & 0xF), dmin * (float)(s0 >> 4), d * (float)(s1 & 0xF),
                     dmin * (float)(s1 >> 4));
        }
    }
}

TGT static void DQ(q3_K)(const void *vx, float *y, int64_t k) {
    const block_q3_K *x = vx;
    for (int64_t b = 0; b < k / TND_QK_K; b++) {
        float d = dq_h2f(x[b].d);
        int8_t sc[16];
        tnd_get_scales_q3_K(x[b].scales, sc);
        __m256i hm = dq_load32(x[b].hmask);
        for (int c = 0; c < 8; c++, y += 32) {
            __m256i lo = dq_bits(dq_load32(x[b].qs + 32 * (c / 4)), 2 * (c % 4), 3);
            /* high bit 1 -> q = lo, 0 -> lo - 4: q = (lo | hbit << 2) - 4 */
            __m256i hb = _mm256_slli_epi16(dq_bits(hm, c, 1), 2);
            __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hb), _mm256_set1_epi8(4));
            emit_mul(y, q, d * (float)sc[2 * c], d * (float)sc[2 * c + 1]);
        }
    }
}

TGT static void DQ(q4_K)(const void *vx, float *y, int64_t k) {
    const block_q4_K *x = vx;
    for (int64_t b = 0; b < k / TND_QK_K; b++) {
        float d = dq_h2f(x[b].d), dmin = dq_h2f(x[b].dmin);
        for (int c = 0; c < 8; c++, y += 32) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(c, x[b].scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            __m256i q = dq_bits(dq_load32(x[b].qs + 32 * (c / 2)), 4 * (c & 1), 0xF);
            emit_sub(y, q, dl, ml, dl, ml);
        }
    }
}

TGT static void DQ(q5_K)(const void *vx, float *y, int64_t k) {
    const block_q5_K *x = vx;
    for (int64_t b = 0; b < k / TND_QK_K; b++) {
        float d = dq_h2f(x[b].d), dmin = dq_h2f(x[b].dmin);
        __m256i qh = dq_load32(x[b].qh);
        for (int c = 0; c < 8; c++, y += 32) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(c, x[b].scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            __m256i q = dq_bits(dq_load32(x[b].qs + 32 * (c / 2)), 4 * (c & 1), 0xF);
            q = _mm256_or_si256(q, _mm256_slli_epi16(dq_bits(qh, c, 1), 4));
            emit_sub(y, q, dl, ml, dl, ml);
        }
    }
}

TGT static void DQ(q6_K)(const void *vx, float *y, int64_t k) {
    const block_q6_K *x = vx;
    for (int64_t b = 0; b < k / TND_QK_K; b++) {
        float d = dq_h2f(x[b].d);
        for (int c = 0; c < 8; c++, y += 32) {
            int h = c / 4, cc = c % 4;
            __m256i lo = dq_bits(dq_load32(x[b].ql + 64 * h + 32 * (cc & 1)), cc >= 2 ? 4 : 0, 0xF);
            __m256i hi = dq_bits(dq_load32(x[b].qh + 32 * h), 2 * cc, 3);
            __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
            emit_mul(y, q, d * (float)x[b].scales[2 * c], d * (float)x[b].scales[2 * c + 1]);
        }
    }
}

#endif
