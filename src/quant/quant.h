/* Block formats of GGUF tensors, shared by C and CUDA.
 *
 * Layouts are bit-exact with GGUF/GGML (a format fact, see docs/ARCHITECTURE.md).
 * A row of n elements of a block type is n / block_size consecutive blocks.
 * Half floats are stored as raw uint16_t so the same structs compile in C and
 * in nvcc; every size is checked below.
 *
 * Reference functions (quant/ref_*.c) are scalar, portable and the definition
 * of correctness: every SIMD and CUDA kernel is tested against them.
 */
#ifndef TND_QUANT_H
#define TND_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#define TND_STATIC_ASSERT(c, m) static_assert(c, m)
extern "C" {
#else
#define TND_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* GGML type ids as stored in GGUF tensor infos. */
typedef enum tnd_type {
    TND_TYPE_F32 = 0,
    TND_TYPE_F16 = 1,
    TND_TYPE_Q4_0 = 2,
    TND_TYPE_Q4_1 = 3,
    TND_TYPE_Q5_0 = 6,
    TND_TYPE_Q5_1 = 7,
    TND_TYPE_Q8_0 = 8,
    TND_TYPE_Q8_1 = 9,
    TND_TYPE_Q2_K = 10,
    TND_TYPE_Q3_K = 11,
    TND_TYPE_Q4_K = 12,
    TND_TYPE_Q5_K = 13,
    TND_TYPE_Q6_K = 14,
    TND_TYPE_Q8_K = 15,
    TND_TYPE_IQ2_XXS = 16,
    TND_TYPE_IQ2_XS = 17,
    TND_TYPE_IQ3_XXS = 18,
    TND_TYPE_IQ1_S = 19,
    TND_TYPE_IQ4_NL = 20,
    TND_TYPE_IQ3_S = 21,
    TND_TYPE_IQ2_S = 22,
    TND_TYPE_IQ4_XS = 23,
    TND_TYPE_I8 = 24,
    TND_TYPE_I16 = 25,
    TND_TYPE_I32 = 26,
    TND_TYPE_I64 = 27,
    TND_TYPE_F64 = 28,
    TND_TYPE_IQ1_M = 29,
    TND_TYPE_BF16 = 30,
    TND_TYPE_TQ1_0 = 34,
    TND_TYPE_TQ2_0 = 35,
    TND_TYPE_MXFP4 = 39,
    TND_TYPE_COUNT = 40,
} tnd_type;

#define TND_QK4_0 32
#define TND_QK4_1 32
#define TND_QK5_0 32
#define TND_QK5_1 32
#define TND_QK8_0 32
#define TND_QK8_1 32
#define TND_QK_K 256
#define TND_K_SCALE_SIZE 12
#define TND_QK_MXFP4 32

typedef struct { uint16_t d; uint8_t qs[TND_QK4_0 / 2]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[TND_QK4_1 / 2]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[TND_QK5_0 / 2]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[TND_QK5_1 / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[TND_QK8_0]; } block_q8_0;
/* Activation format for Q4_1/Q5_1 dots: s = d * sum(qs). */
typedef struct { uint16_t d, s; int8_t qs[TND_QK8_1]; } block_q8_1;

typedef struct {
    uint8_t scales[TND_QK_K / 16]; /* 4-bit scale | 4-bit min per 16 values */
    uint8_t qs[TND_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[TND_QK_K / 8];   /* high bit of the 3-bit quants */
    uint8_t qs[TND_QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];            /* 16 6-bit scales */
    uint16_t d;
} block_q3_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[TND_K_SCALE_SIZE]; /* 8 6-bit scales and 8 6-bit mins */
    uint8_t qs[TND_QK_K / 2];
} block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[TND_K_SCALE_SIZE];
    uint8_t qh[TND_QK_K / 8];
    uint8_t qs[TND_QK_K / 2];
} block_q5_K;
typedef struct {
    uint8_t ql[TND_QK_K / 2];      /* low 4 bits */
    uint8_t qh[TND_QK_K / 4];      /* high 2 bits */
    int8_t scales[TND_QK_K / 16];  /* 8-bit scales per 16 values */
    uint16_t d;
} block_q6_K;
/* Activation format for K-quant dots. bsums: sums of each 16 quants. */
typedef struct {
    float d;
    int8_t qs[TND_QK_K];
    int16_t bsums[TND_QK_K / 16];
} block_q8_K;
/* MXFP4 (OCP microscaling): E8M0 shared exponent, 32 E2M1 values. */
typedef struct { uint8_t e; uint8_t qs[TND_QK_MXFP4 / 2]; } block_mxfp4;

TND_STATIC_ASSERT(sizeof(block_q4_0) == 18, "block_q4_0 size");
TND_STATIC_ASSERT(sizeof(block_q4_1) == 20, "block_q4_1 size");
TND_STATIC_ASSERT(sizeof(block_q5_0) == 22, "block_q5_0 size");
TND_STATIC_ASSERT(sizeof(block_q5_1) == 24, "block_q5_1 size");
TND_STATIC_ASSERT(sizeof(block_q8_0) == 34, "block_q8_0 size");
TND_STATIC_ASSERT(sizeof(block_q8_1) == 36, "block_q8_1 size");
TND_STATIC_ASSERT(sizeof(block_q2_K) == 84, "block_q2_K size");
TND_STATIC_ASSERT(sizeof(block_q3_K) == 110, "block_q3_K size");
TND_STATIC_ASSERT(sizeof(block_q4_K) == 144, "block_q4_K size");
TND_STATIC_ASSERT(sizeof(block_q5_K) == 176, "block_q5_K size");
TND_STATIC_ASSERT(sizeof(block_q6_K) == 210, "block_q6_K size");
TND_STATIC_ASSERT(sizeof(block_q8_K) == 292, "block_q8_K size");
TND_STATIC_ASSERT(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* ---- half / bfloat16 conversion (portable, exact, round-to-nearest-even) -- */

static inline float tnd_fp32_from_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t tnd_fp32_to_bits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

static inline float tnd_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return tnd_fp32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return tnd_fp32_from_bits(sign | 0x7f800000u | (man << 13));
    return tnd_fp32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t tnd_fp32_to_fp16(float f) {
    uint32_t x = tnd_fp32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t v = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (v & 1))) v++;
        return (uint16_t)(sign | v);
    }
    uint32_t v = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) v++;
    return (uint16_t)(sign | v);
}

static inline float tnd_bf16_to_fp32(uint16_t h) { return tnd_fp32_from_bits((uint32_t)h << 16); }

static inline uint16_t tnd_fp32_to_bf16(float f) {
    uint32_t x = tnd_fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ---- type traits ---------------------------------------------------------- */

/* Dequantizes k values (k a multiple of block_size) from blocks x into y. */
typedef void (*tnd_to_float_fn)(const void *x, float *y, int64_t k);
/* Quantizes k floats into blocks (reference rounding rules of the format). */
typedef void (*tnd_from_float_fn)(const float *x, void *y, int64_t k);
/* Dot product of n weights (blocks x) with n activations already quantized
 * to the type's vec_dot_type (blocks y). Returns the float result. */
typedef float (*tnd_vec_dot_fn)(int64_t n, const void *x, const void *y);

typedef struct tnd_type_traits {
    const char *name;          /* "Q4_K" as GGUF tools print it */
    int64_t block_size;        /* elements per block */
    size_t type_size;          /* bytes per block */
    bool is_quantized;
    bool supported;            /* tandem can dequantize and compute with it */
    tnd_type vec_dot_type;     /* activation format of the integer dot path */
    tnd_to_float_fn to_float;
    tnd_from_float_fn from_float;
    tnd_vec_dot_fn vec_dot;    /* scalar reference integer/float dot */
} tnd_type_traits;

/* Traits of type t, or NULL if t is not a known GGML type id. Sizes are
 * filled for every known id (so files can be validated), functions only for
 * supported types. */
const tnd_type_traits *tnd_type_traits_get(int t);
/* Name of a type id ("Q4_K"), "?" if unknown. */
const char *tnd_type_name(int t);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block. */
size_t tnd_row_size(tnd_type t, int64_t n);

/* Reference: dot of n weights (type t, blocks) with a float vector, by
 * dequantizing then an f32 dot with double accumulation. For tests. */
double tnd_ref_dot_f32(tnd_type t, int64_t n, const void *w, const float *x);


/* ---- reference kernels (quant/ref_*.c), callable directly ----------------
 * to_float / from_float / vec_dot of each supported type, with the contracts
 * of tnd_to_float_fn, tnd_from_float_fn and tnd_vec_dot_fn above. vec_dot of
 * a quantized type takes activations in its vec_dot_type (q8_0 / q8_1 / q8_K);
 * F32, F16 and BF16 take F32 activations and accumulate in double.
 *
 * Integer dot paths (what SIMD kernels reproduce): per block, an int32 sum of
 * products of the quants (sumi), then, accumulating sequentially in float:
 *   Q4_0, Q5_0, Q8_0:  acc += (dw * da) * sumi                (q signed: q4-8, q5-16)
 *   MXFP4:             acc += (e8m0_half(e) * da) * sumi      (sumi over the doubled E2M1 table)
 *   Q4_1, Q5_1:        acc += (dw * da) * sumi + mw * sa      (q unsigned; sa = q8_1.s)
 *   Q8_1 x Q8_1:       acc += (dw * da) * sumi
 *   Q2_K, Q4_K, Q5_K:  acc += (da * d) * isum - (da * dmin) * msum
 *                      isum = sum_g sc_g * sumi_g, msum = sum_g m_g * bsums of g
 *   Q3_K, Q6_K:        acc += (da * d) * isum, isum = sum_g sc_g * sumi_g (sc, q signed)
 *   Q8_K x Q8_K:       acc += (dw * da) * sumi
 * Activation quantizers round half away from zero (roundf):
 *   q8_0 / q8_1: d = amax / 127, q = roundf(x * (1 / d)), s = fp16(d * sum q)
 *   q8_K:        d = amax / 127 (f32), q = roundf(x * (127 / amax)), bsums
 * Weight quantizers of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 are bit-exact with
 * gguf-py's; K-quant quantizers pick scales that cover each group's range
 * (so |x - dequant(x)| <= step / 2), not ggml's search. */
#define TND_REF_DECL(t)                                               \
    void tnd_ref_to_float_##t(const void *x, float *y, int64_t k);     \
    void tnd_ref_from_float_##t(const float *x, void *y, int64_t k);
TND_REF_DECL(f32)
TND_REF_DECL(f16)
TND_REF_DECL(bf16)
TND_REF_DECL(q4_0)
TND_REF_DECL(q4_1)
TND_REF_DECL(q5_0)
TND_REF_DECL(q5_1)
TND_REF_DECL(q8_0)
TND_REF_DECL(q8_1)
TND_REF_DECL(q2_K)
TND_REF_DECL(q3_K)
TND_REF_DECL(q4_K)
TND_REF_DECL(q5_K)
TND_REF_DECL(q6_K)
TND_REF_DECL(q8_K)
TND_REF_DECL(mxfp4)
#undef TND_REF_DECL

float tnd_ref_vec_dot_f32_f32(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_f16_f32(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_bf16_f32(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q4_0_q8_0(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q4_1_q8_1(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q5_0_q8_0(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q5_1_q8_1(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q8_0_q8_0(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q8_1_q8_1(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q2_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q3_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q4_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q5_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q6_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_q8_K_q8_K(int64_t n, const void *x, const void *y);
float tnd_ref_vec_dot_mxfp4_q8_0(int64_t n, const void *x, const void *y);

/* MXFP4 E2M1 values doubled (so they are integers), indexed by the nibble. */
extern const int8_t tnd_mxfp4_values2[16];
/* E8M0 exponent e as a float scale for the doubled values: 2^(e - 128),
 * exact for every e (e < 2 gives a subnormal). */
static inline float tnd_e8m0_to_fp32_half(uint8_t e) {
    return tnd_fp32_from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}
/* Unpacks the 6-bit scale and min of group j (0..7) of Q4_K / Q5_K scales. */
static inline void tnd_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* Packs the 6-bit scales sc and mins m of groups 0..7 into the 12 bytes of
 * Q4_K / Q5_K scales: the inverse of tnd_get_scale_min_k4. */
static inline void tnd_pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t q[12]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}
/* Unpacks the 16 6-bit Q3_K scales as signed values (stored - 32). */
static inline void tnd_get_scales_q3_K(const uint8_t *s, int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

#ifdef __cplusplus
}
#endif
#endif
