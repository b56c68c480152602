/* x86 building blocks shared by the AVX2 and AVX-512 dequantizers
 * (dequant_avx2.c, dequant_avx512.c) and the fused matvec kernels of
 * matmul_f32_avx2.c / matmul_f32_avx512.c, so both compute the very same
 * floats (the decode/prefill bit-identity of matmul_f32.h rests on it).
 *
 * Each format is described by (formats and bit positions: quant/quant.h,
 * quant/ref_kquants.c):
 *   FMT_prep(block, &s):    the block's scales per 16 elements, s.d[g] (and
 *                           s.m[g]), computed with the reference's float ops;
 *   FMT_emit(block, c, &s, o): chunk c (elements 32c..32c+31) as DQ_NV
 *                           float vectors: y = d * q (DQ_MUL), d * q + m
 *                           (DQ_ADD) or d * q - m (DQ_SUB), each operation
 *                           rounded separately as in quant/ref_*.c (no FMA);
 *   FMT_q(block, c):        for the generic emit, the chunk's 32 integer
 *                           quants as int8 in element order.
 * The includer defines TGT and TGTI (target attributes of a function and of
 * a forced-inline helper) and DQ_WIDTH (8: AVX2, 16: AVX-512): dq_emit()
 * then produces a chunk as DQ_NV vectors dq_vec. With DQ_DEFINE_DEQUANT it
 * also gets the dequantizers DQ(fmt) (DQ(name) defined by the includer). */
#ifndef TND_CPU_DEQUANT_X86_H
#define TND_CPU_DEQUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "quant/quant.h"

enum { DQ_MUL, DQ_ADD, DQ_SUB };

typedef struct dq_sc { float d[16], m[16]; } dq_sc;

/* ---- integer unpacking --------------------------------------------------- */

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

/* (v >> s) & mask on every byte. */
TGTI __m256i dq_bits(__m256i v, int s, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8((char)mask));
}

TGTI __m256i dq_load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* F16C conversion: exact, like tnd_fp16_to_fp32 (NaNs aside). */
TGTI float dq_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ---- conversion and scaling (per vector width) ------------------------------ */

/* dq_vec: DQ_WIDTH floats; dq_veci: DQ_WIDTH int32. dq_u8x / dq_i8x load
 * DQ_WIDTH bytes zero- / sign-extended to int32 (one load+expand each). */
#if DQ_WIDTH == 16
typedef __m512 dq_vec;
typedef __m512i dq_veci;
#define DQ_NV 2
TGTI dq_veci dq_u8x(const void *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
TGTI dq_veci dq_i8x(const void *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
TGTI dq_veci dq_and(dq_veci a, int m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
TGTI dq_veci dq_srl(dq_veci a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
TGTI dq_veci dq_subi(dq_veci a, int n) { return _mm512_sub_epi32(a, _mm512_set1_epi32(n)); }
TGTI dq_vec dq_cvti(dq_veci a) { return _mm512_cvtepi32_ps(a); }
/* d * q, d * q + m or d * q - m, rounded twice (mul, then add/sub). */
TGTI dq_vec dq_scale(dq_vec q, int kind, float d, float m) {
    __m512 p = _mm512_mul_ps(_mm512_set1_ps(d), q);
    return kind == DQ_MUL ? p : kind == DQ_ADD ? _mm512_add_ps(p, _mm512_set1_ps(m)) : _mm512_sub_ps(p, _mm512_set1_ps(m));
}
TGTI void dq_store(float *y, const dq_vec *o) {
    _mm512_storeu_ps(y, o[0]);
    _mm512_storeu_ps(y + 16, o[1]);
}
#else
typedef __m256 dq_vec;
typedef __m256i dq_veci;
#define DQ_NV 4
TGTI dq_veci dq_u8x(const void *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
TGTI dq_veci dq_i8x(const void *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
TGTI dq_veci dq_and(dq_veci a, int m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
TGTI dq_veci dq_srl(dq_veci a, int n) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(n)); }
TGTI dq_veci dq_subi(dq_veci a, int n) { return _mm256_sub_epi32(a, _mm256_set1_epi32(n)); }
TGTI dq_vec dq_cvti(dq_veci a) { return _mm256_cvtepi32_ps(a); }
/* d * q, d * q + m or d * q - m, rounded twice (mul, then add/sub). */
TGTI dq_vec dq_scale(dq_vec q, int kind, float d, float m) {
    __m256 p = _mm256_mul_ps(_mm256_set1_ps(d), q);
    return kind == DQ_MUL ? p : kind == DQ_ADD ? _mm256_add_ps(p, _mm256_set1_ps(m)) : _mm256_sub_ps(p, _mm256_set1_ps(m));
}
TGTI void dq_store(float *y, const dq_vec *o) {
    for (int v = 0; v < 4; v++) _mm256_storeu_ps(y + 8 * v, o[v]);
}
#endif

/* A chunk of 32 int8 quants (element order) -> DQ_NV vectors; elements 0..15
 * use (d0, m0), 16..31 (d1, m1). (Expanding through a stack copy instead
 * measured 10% slower for Q5_K and Q6_K on Zen 3.) */
#if DQ_WIDTH == 16
TGTI void dq_emit(__m256i q, int kind, float d0, float m0, float d1, float m1, dq_vec o[DQ_NV]) {
    o[0] = dq_scale(dq_cvti(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), kind, d0, m0);
    o[1] = dq_scale(dq_cvti(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), kind, d1, m1);
}
#else
TGTI void dq_emit(__m256i q, int kind, float d0, float m0, float d1, float m1, dq_vec o[DQ_NV]) {
    __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
    o[0] = dq_scale(dq_cvti(_mm256_cvtepi8_epi32(a)), kind, d0, m0);
    o[1] = dq_scale(dq_cvti(_mm256_cvtepi8_epi32(_mm_srli_si128(a, 8))), kind, d0, m0);
    o[2] = dq_scale(dq_cvti(_mm256_cvtepi8_epi32(b)), kind, d1, m1);
    o[3] = dq_scale(dq_cvti(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))), kind, d1, m1);
}
#endif

/* ---- formats: prep + q ------------------------------------------------------ */

TGTI void q4_0_prep(const void *vb, dq_sc *s) { s->d[0] = s->d[1] = dq_h2f(((const block_q4_0 *)vb)->d); }

TGTI void q4_1_prep(const void *vb, dq_sc *s) {
    const block_q4_1 *b = vb;
    s->d[0] = s->d[1] = dq_h2f(b->d);
    s->m[0] = s->m[1] = dq_h2f(b->m);
}

TGTI void q5_0_prep(const void *vb, dq_sc *s) { s->d[0] = s->d[1] = dq_h2f(((const block_q5_0 *)vb)->d); }
TGTI __m256i q5_0_q(const void *vb, int c) {
    const block_q5_0 *b = vb;
    (void)c;
    return _mm256_sub_epi8(_mm256_or_si256(dq_nibbles(b->qs), dq_bit4(b->qh)), _mm256_set1_epi8(16));
}

TGTI void q5_1_prep(const void *vb, dq_sc *s) {
    const block_q5_1 *b = vb;
    s->d[0] = s->d[1] = dq_h2f(b->d);
    s->m[0] = s->m[1] = dq_h2f(b->m);
}
TGTI __m256i q5_1_q(const void *vb, int c) {
    const block_q5_1 *b = vb;
    (void)c;
    return _mm256_or_si256(dq_nibbles(b->qs), dq_bit4(b->qh));
}

TGTI void q8_0_prep(const void *vb, dq_sc *s) { s->d[0] = s->d[1] = dq_h2f(((const block_q8_0 *)vb)->d); }

TGTI void mxfp4_prep(const void *vb, dq_sc *s) { s->d[0] = s->d[1] = tnd_e8m0_to_fp32_half(((const block_mxfp4 *)vb)->e); }
TGTI __m256i mxfp4_q(const void *vb, int c) {
    (void)c;
    __m128i t = _mm_loadu_si128((const __m128i *)tnd_mxfp4_values2);
    return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), dq_nibbles(((const block_mxfp4 *)vb)->qs));
}

/* 8 bytes (low half of v) as floats times s: the reference's s * (float)b. */
TGTI __m256 dq_scale8(__m128i v, float s) {
    return _mm256_mul_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
}

TGTI void q2_K_prep(const void *vb, dq_sc *s) {
    const block_q2_K *b = vb;
    float d = dq_h2f(b->d), dmin = dq_h2f(b->dmin);
    __m128i sc = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0xF);
    __m128i lo = _mm_and_si128(sc, m4), hi = _mm_and_si128(_mm_srli_epi16(sc, 4), m4); /* 0..15: signed ok */
    _mm256_storeu_ps(s->d, dq_scale8(lo, d));
    _mm256_storeu_ps(s->d + 8, dq_scale8(_mm_srli_si128(lo, 8), d));
    _mm256_storeu_ps(s->m, dq_scale8(hi, dmin));
    _mm256_storeu_ps(s->m + 8, dq_scale8(_mm_srli_si128(hi, 8), dmin));
}
TGTI __m256i q2_K_q(const void *vb, int c) {
    return dq_bits(dq_load32(((const block_q2_K *)vb)->qs + 32 * (c / 4)), 2 * (c % 4), 3);
}

TGTI void q3_K_prep(const void *vb, dq_sc *s) {
    const block_q3_K *b = vb;
    float d = dq_h2f(b->d);
    int8_t sc[16];
    tnd_get_scales_q3_K(b->scales, sc);
    for (int g = 0; g < 16; g++) s->d[g] = d * (float)sc[g];
}
TGTI __m256i q3_K_q(const void *vb, int c) {
    const block_q3_K *b = vb;
    __m256i lo = dq_bits(dq_load32(b->qs + 32 * (c / 4)), 2 * (c % 4), 3);
    /* high bit 1 -> q = lo, 0 -> lo - 4: q = (lo | hbit << 2) - 4 */
    __m256i hb = _mm256_slli_epi16(dq_bits(dq_load32(b->hmask), c, 1), 2);
    return _mm256_sub_epi8(_mm256_or_si256(lo, hb), _mm256_set1_epi8(4));
}

/* Q4_K / Q5_K: one scale and min per 32, stored for both 16-halves. The
 * 6-bit fields of tnd_get_scale_min_k4, four at a time in 32-bit words:
 * groups 0-3 are the low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
 * groups 4-7 take their low 4 bits from the nibbles of bytes 8-11 and their
 * high 2 bits from the top bits of bytes 0-3 (scales) and 4-7 (mins). */
TGTI void k4_prep(uint16_t dh, uint16_t dminh, const uint8_t *scales, dq_sc *s) {
    float d = dq_h2f(dh), dmin = dq_h2f(dminh);
    uint32_t u0, u1, u2;
    memcpy(&u0, scales, 4);
    memcpy(&u1, scales + 4, 4);
    memcpy(&u2, scales + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    __m256 dl = dq_scale8(_mm_setr_epi32((int)sc_lo, (int)sc_hi, 0, 0), d); /* 0..63: signed ok */
    __m256 ml = dq_scale8(_mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0), dmin);
    const __m256i lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    _mm256_storeu_ps(s->d, _mm256_permutevar8x32_ps(dl, lo));
    _mm256_storeu_ps(s->d + 8, _mm256_permutevar8x32_ps(dl, hi));
    _mm256_storeu_ps(s->m, _mm256_permutevar8x32_ps(ml, lo));
    _mm256_storeu_ps(s->m + 8, _mm256_permutevar8x32_ps(ml, hi));
}
TGTI void q4_K_prep(const void *vb, dq_sc *s) {
    const block_q4_K *b = vb;
    k4_prep(b->d, b->dmin, b->scales, s);
}

TGTI void q5_K_prep(const void *vb, dq_sc *s) {
    const block_q5_K *b = vb;
    k4_prep(b->d, b->dmin, b->scales, s);
}
TGTI __m256i q5_K_q(const void *vb, int c) {
    const block_q5_K *b = vb;
    __m256i q = dq_bits(dq_load32(b->qs + 32 * (c / 2)), 4 * (c & 1), 0xF);
    return _mm256_or_si256(q, _mm256_slli_epi16(dq_bits(dq_load32(b->qh), c, 1), 4));
}

TGTI void q6_K_prep(const void *vb, dq_sc *s) {
    const block_q6_K *b = vb;
    float d = dq_h2f(b->d);
    __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    _mm256_storeu_ps(s->d, dq_scale8(sc, d));
    _mm256_storeu_ps(s->d + 8, dq_scale8(_mm_srli_si128(sc, 8), d));
}
TGTI __m256i q6_K_q(const void *vb, int c) {
    const block_q6_K *b = vb;
    int h = c / 4, cc = c % 4;
    __m256i lo = dq_bits(dq_load32(b->ql + 64 * h + 32 * (cc & 1)), cc >= 2 ? 4 : 0, 0xF);
    __m256i hi = dq_bits(dq_load32(b->qh + 32 * h), 2 * cc, 3);
    return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
}

/* ---- formats: emit ------------------------------------------------------------------ */

/* FMT_emit(block, c, &s, o): chunk c of a block as DQ_NV vectors. Generic:
 * the int8 quants through dq_emit. 4- and 8-bit formats whose quants sit
 * one per byte in element order expand straight from the block instead
 * (load + zero/sign-extend, then nibble masks in 32-bit lanes): fewer
 * shuffles, the same values. */
#define DQ_GENERIC_EMIT(fmt, KIND)                                                                   \
    TGTI void fmt##_emit(const void *b, int c, const dq_sc *s, dq_vec o[DQ_NV]) {                  \
        dq_emit(fmt##_q(b, c), KIND, s->d[2 * c], s->m[2 * c], s->d[2 * c + 1], s->m[2 * c + 1], o); \
    }
DQ_GENERIC_EMIT(q5_0, DQ_MUL)
DQ_GENERIC_EMIT(q5_1, DQ_ADD)
DQ_GENERIC_EMIT(mxfp4, DQ_MUL)
DQ_GENERIC_EMIT(q2_K, DQ_SUB)
DQ_GENERIC_EMIT(q3_K, DQ_MUL)
DQ_GENERIC_EMIT(q5_K, DQ_SUB)
DQ_GENERIC_EMIT(q6_K, DQ_MUL)

/* Bytes of 2 nibbles: vector i < DQ_NV/2 holds the low nibbles of bytes
 * [i W, (i+1) W) = elements i W.., vector i + DQ_NV/2 their high nibbles =
 * elements 16 + i W.. (W = DQ_WIDTH; 16 = half a block). */
TGTI void q4_0_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const block_q4_0 *b = vb;
    (void)c;
    for (int i = 0; i < DQ_NV / 2; i++) {
        dq_veci v = dq_u8x(b->qs + i * DQ_WIDTH);
        o[i] = dq_scale(dq_cvti(dq_subi(dq_and(v, 15), 8)), DQ_MUL, s->d[0], 0.0f);
        o[i + DQ_NV / 2] = dq_scale(dq_cvti(dq_subi(dq_srl(v, 4), 8)), DQ_MUL, s->d[1], 0.0f);
    }
}

TGTI void q4_1_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const block_q4_1 *b = vb;
    (void)c;
    for (int i = 0; i < DQ_NV / 2; i++) {
        dq_veci v = dq_u8x(b->qs + i * DQ_WIDTH);
        o[i] = dq_scale(dq_cvti(dq_and(v, 15)), DQ_ADD, s->d[0], s->m[0]);
        o[i + DQ_NV / 2] = dq_scale(dq_cvti(dq_srl(v, 4)), DQ_ADD, s->d[1], s->m[1]);
    }
}

TGTI void q8_0_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const block_q8_0 *b = vb;
    (void)c;
    for (int v = 0; v < DQ_NV; v++) o[v] = dq_scale(dq_cvti(dq_i8x(b->qs + v * DQ_WIDTH)), DQ_MUL, s->d[0], 0.0f);
}

/* Q4_K chunk c: one nibble (low for even c) of the 32 bytes at 32 (c / 2). */
TGTI void q4_K_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const uint8_t *q = ((const block_q4_K *)vb)->qs + 32 * (c / 2);
    for (int v = 0; v < DQ_NV; v++)
        o[v] = dq_scale(dq_cvti(dq_and(dq_srl(dq_u8x(q + v * DQ_WIDTH), 4 * (c & 1)), 15)), DQ_SUB, s->d[2 * c],
                        s->m[2 * c]);
}

/* F16 and BF16 rows as blocks of 32 for the fused matvec kernels (rows of
 * a multiple of 32 elements only; the tile path takes the others). Same
 * conversions as their dequantizers: exact. */
typedef struct { uint16_t h[32]; } dq_f16x32;
TGTI void f16_prep(const void *vb, dq_sc *s) { (void)vb, (void)s; }
TGTI void bf16_prep(const void *vb, dq_sc *s) { (void)vb, (void)s; }
#if DQ_WIDTH == 16
TGTI void f16_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const uint16_t *h = ((const dq_f16x32 *)vb)->h;
    (void)c, (void)s;
    for (int v = 0; v < DQ_NV; v++) o[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + 16 * v)));
}
TGTI void bf16_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const uint16_t *h = ((const dq_f16x32 *)vb)->h;
    (void)c, (void)s;
    for (int v = 0; v < DQ_NV; v++)
        o[v] = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + 16 * v))), 16));
}
#else
TGTI void f16_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const uint16_t *h = ((const dq_f16x32 *)vb)->h;
    (void)c, (void)s;
    for (int v = 0; v < DQ_NV; v++) o[v] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8 * v)));
}
TGTI void bf16_emit(const void *vb, int c, const dq_sc *s, dq_vec o[DQ_NV]) {
    const uint16_t *h = ((const dq_f16x32 *)vb)->h;
    (void)c, (void)s;
    for (int v = 0; v < DQ_NV; v++)
        o[v] = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + 8 * v))), 16));
}
#endif
/* X(...) as DQ_FORMATS, for formats with a fused matvec but their own
 * dequantizer (any length). */
#define DQ_FLOAT_FORMATS(X)            \
    X(f16, dq_f16x32, 32, DQ_MUL)      \
    X(bf16, dq_f16x32, 32, DQ_MUL)

/* X(fmt, block type, elements per block, kind) for every quantized format. */
#define DQ_FORMATS(X)                      \
    X(q4_0, block_q4_0, 32, DQ_MUL)        \
    X(q4_1, block_q4_1, 32, DQ_ADD)        \
    X(q5_0, block_q5_0, 32, DQ_MUL)        \
    X(q5_1, block_q5_1, 32, DQ_ADD)        \
    X(q8_0, block_q8_0, 32, DQ_MUL)        \
    X(mxfp4, block_mxfp4, 32, DQ_MUL)      \
    X(q2_K, block_q2_K, 256, DQ_SUB)       \
    X(q3_K, block_q3_K, 256, DQ_MUL)       \
    X(q4_K, block_q4_K, 256, DQ_SUB)       \
    X(q5_K, block_q5_K, 256, DQ_SUB)       \
    X(q6_K, block_q6_K, 256, DQ_MUL)

/* ---- dequantizers ----------------------------------------------------------------- */

#ifdef DQ_DEFINE_DEQUANT
#define DQ_DEF(fmt, BT, QK, KIND)                                                            \
    TGT static void DQ(fmt)(const void *vx, float *y, int64_t k) {                           \
        const BT *x = vx;                                                                    \
        for (int64_t i = 0; i < k / (QK); i++) {                                             \
            dq_sc s;                                                                         \
            fmt##_prep(&x[i], &s);                                                           \
            for (int c = 0; c < (QK) / 32; c++, y += 32) {                                   \
                dq_vec o[DQ_NV];                                                             \
                fmt##_emit(&x[i], c, &s, o);                                                 \
                dq_store(y, o);                                                              \
            }                                                                                \
        }                                                                                    \
    }
DQ_FORMATS(DQ_DEF)
#undef DQ_DEF
#endif

#endif
