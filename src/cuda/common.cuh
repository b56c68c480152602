/* Device-side helpers shared by the CUDA op files: block-format decoding into
 * a common "32 values = a*q + b" form, half conversions, reductions.
 *
 * Every supported block format is read 32 values at a time (a "sub"): sub s
 * of a row covers elements [32s, 32s+32). Quant formats have blocks of 32 or
 * 256 values, so a sub never straddles a block. A sub decodes to 32 numbers q
 * and two (scale a, offset b) pairs, one per half: value_i = a[i/16]*q_i +
 * b[i/16]. Matvec, dequantize-to-f16 and get_rows all read formats through
 * load_sub<TYPE>(), so one decoder per format serves them all. Layouts are
 * the GGUF ones (quant/quant.h); the comments give the element mapping.
 */
#ifndef TND_CUDA_COMMON_CUH
#define TND_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#define TND_SUB 32

/* Decoders are host+device so they can be checked on a machine without a
 * GPU against the scalar references. */
#define TND_HD __host__ __device__ __forceinline__
/* the host pass of nvcc hands #pragma unroll to gcc, which rejects it */
#ifdef __CUDA_ARCH__
#define TND_UNROLL _Pragma("unroll")
#else
#define TND_UNROLL
#endif

/* ---- the architecture this file's device code runs as (arch.cu) ----------
 * A file that picks kernels by architecture places TND_CU_UNIT_ARCH(name)
 * once and asks cu_unit_arch() (e.g. 900), never the device's compute
 * capability: a build without code for this GPU runs PTX of an older
 * architecture, in which the newer kernels' bodies are compiled out. */
#define TND_CU_MAX_DEV 64
#ifdef __cplusplus
extern "C" {
#endif
int tnd_cu_code_arch(const void *kernel); /* arch.cu */
int tnd_cu_arch_usable(int code_arch);
#ifdef __cplusplus
}
#endif
__device__ __forceinline__ int cu_arch_here() {
#ifdef __CUDA_ARCH__
    return __CUDA_ARCH__;
#else
    return 0;
#endif
}
#define TND_CU_UNIT_ARCH(unit)                                                                           \
    __global__ void k_unit_arch_##unit(int *out) { *out = cu_arch_here(); }                             \
    static inline int cu_unit_arch(void) {                                                               \
        static int cache[TND_CU_MAX_DEV];                                                                \
        int dev = 0;                                                                                     \
        if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= TND_CU_MAX_DEV) {                    \
            cudaGetLastError();                                                                          \
            return 0;                                                                                    \
        }                                                                                                \
        int a = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);                                          \
        if (!a) {                                                                                        \
            a = tnd_cu_code_arch((const void *)k_unit_arch_##unit);                                      \
            __atomic_store_n(&cache[dev], a, __ATOMIC_RELAXED);                                          \
        }                                                                                                \
        return tnd_cu_arch_usable(a);                                                                    \
    }

/* Plain loads: the decoders read global memory and, in the staged matvec,
 * shared memory; after inlining the compiler sees which (an explicit __ldg
 * would make a shared address fault). */
template <class T> TND_HD T ldg(const T *p) { return *p; }
TND_HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

struct sub32 {
    float q[TND_SUB];
    float a0, b0, a1, b1; /* halves 0..15 and 16..31 */
};

TND_HD float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
TND_HD float bf2f(uint16_t h) { return u2f((uint32_t)h << 16); }
TND_HD uint16_t ldu16(const uint8_t *p) { return ldg((const unsigned short *)p); }
TND_HD uint32_t ldu8(const uint8_t *p) { return ldg(p); }

/* N 32-bit words from a 2-byte aligned address. On the device: N aligned
 * 32-bit loads (N+1 when p is 2 mod 4, the extra word sharing its 4 bytes
 * with the last wanted ones, so never past an allocation) and a funnel shift,
 * instead of 2N 16-bit loads; branch-free, as lanes of a warp differ in
 * alignment. */
template <int N>
TND_HD void ld_words_a2(const uint8_t *p, uint32_t (&w)[N]) {
#ifdef __CUDA_ARCH__
    const unsigned int *q = (const unsigned int *)((uintptr_t)p & ~(uintptr_t)3);
    const bool odd = ((uintptr_t)p & 2) != 0;
    uint32_t v[N + 1];
TND_UNROLL
    for (int i = 0; i < N; i++) v[i] = ldg(q + i);
    v[N] = odd ? ldg(q + N) : 0u;
    const uint32_t sh = odd ? 16u : 0u;
TND_UNROLL
    for (int i = 0; i < N; i++) w[i] = __funnelshift_r(v[i], v[i + 1], sh);
#else
    const unsigned short *q = (const unsigned short *)p;
    for (int i = 0; i < N; i++) w[i] = (uint32_t)ldg(q + 2 * i) | ((uint32_t)ldg(q + 2 * i + 1) << 16);
#endif
}
/* N 32-bit words from a 4-byte aligned address. */
template <int N>
TND_HD void ld_words_a4(const uint8_t *p, uint32_t (&w)[N]) {
    const unsigned int *q = (const unsigned int *)p;
TND_UNROLL
    for (int i = 0; i < N; i++) w[i] = ldg(q + i);
}
/* 8 words (32 bytes) from a 16-byte aligned address, two 16-byte loads. */
TND_HD void ld_words_a16x2(const uint8_t *p, uint32_t (&w)[8]) {
    const uint4 *q = (const uint4 *)p;
    uint4 u0 = ldg(q), u1 = ldg(q + 1);
    w[0] = u0.x; w[1] = u0.y; w[2] = u0.z; w[3] = u0.w;
    w[4] = u1.x; w[5] = u1.y; w[6] = u1.z; w[7] = u1.w;
}
TND_HD uint32_t byte_of(const uint32_t *w, int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xffu; }

/* Exact int -> float for 0 <= u < 2^23 without I2F (a quarter-rate
 * instruction on sm_90 that would bound the decoders): the bits of 2^23 + u
 * are 0x4B000000 | u, and subtracting 2^23 (+ an integer offset `off`, for
 * signed codes) is exact. */
TND_HD float qf(uint32_t u) { return u2f(0x4B000000u | u) - 8388608.0f; }
TND_HD float qf_off(uint32_t u, float off) { return u2f(0x4B000000u | u) - (8388608.0f + off); }

/* 6-bit scale and min j (0..7) of Q4_K/Q5_K from the 12 packed bytes. */
TND_HD void kscale_min(const uint8_t *sc, int j, float *s, float *m) {
    if (j < 4) {
        *s = (float)(ldu8(sc + j) & 63);
        *m = (float)(ldu8(sc + j + 4) & 63);
    } else {
        *s = (float)((ldu8(sc + j + 4) & 0xF) | ((ldu8(sc + j - 4) >> 6) << 4));
        *m = (float)((ldu8(sc + j + 4) >> 4) | ((ldu8(sc + j) >> 6) << 4));
    }
}

/* Signed 6-bit scale k (0..15) of Q3_K, already minus 32. */
TND_HD float q3k_scale(const uint8_t *sc, int k) {
    uint32_t lo = k < 8 ? (ldu8(sc + k) & 0xF) : (ldu8(sc + k - 8) >> 4);
    uint32_t hi = (ldu8(sc + 8 + (k & 3)) >> (2 * (k >> 2))) & 3;
    return (float)((int)(lo | (hi << 4)) - 32);
}

/* E2M1 code (4 bits) as a signed integer of twice its value. */
TND_HD float e2m1x2(uint32_t c) {
    uint32_t m = c & 7;
    uint32_t v = m < 4 ? m : (m < 6 ? 2 * m - 4 : 4 * m - 16);
    float f = qf(v);
    return (c & 8) ? -f : f;
}
/* 2^(e-128) for an E8M0 exponent e (half the block scale, pairs with e2m1x2). */
TND_HD float e8m0_half(uint32_t e) {
    return e < 2 ? u2f(0x00200000u << e) : u2f((e - 1) << 23);
}

/* Loads sub s of a row (row = first byte of the row; n_in = row length in
 * elements, used only by the float formats whose last sub may be partial:
 * missing values read as 0). Row bases must be 16-byte aligned. */
template <int TY> TND_HD void load_sub(const uint8_t *row, int64_t s, int64_t n_in, sub32 &o);

template <> TND_HD void load_sub<TND_TYPE_F32>(const uint8_t *row, int64_t s, int64_t n_in, sub32 &o) {
    const float *p = (const float *)row + s * 32;
    int64_t left = n_in - s * 32;
    if (left >= 32 && ((uintptr_t)p & 15) == 0) {
TND_UNROLL
        for (int i = 0; i < 8; i++) {
            float4 v = ldg((const float4 *)p + i);
            o.q[4 * i] = v.x; o.q[4 * i + 1] = v.y; o.q[4 * i + 2] = v.z; o.q[4 * i + 3] = v.w;
        }
    } else {
TND_UNROLL
        for (int i = 0; i < 32; i++) o.q[i] = i < left ? ldg(p + i) : 0.0f;
    }
    o.a0 = o.a1 = 1.0f; o.b0 = o.b1 = 0.0f;
}
template <> TND_HD void load_sub<TND_TYPE_F16>(const uint8_t *row, int64_t s, int64_t n_in, sub32 &o) {
    const unsigned short *p = (const unsigned short *)row + s * 32;
    int64_t left = n_in - s * 32;
    if (left >= 32 && ((uintptr_t)p & 15) == 0) {
TND_UNROLL
        for (int i = 0; i < 4; i++) {
            uint4 v = ldg((const uint4 *)p + i);
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
TND_UNROLL
            for (int j = 0; j < 4; j++) {
                o.q[8 * i + 2 * j] = h2f((uint16_t)(w[j] & 0xffff));
                o.q[8 * i + 2 * j + 1] = h2f((uint16_t)(w[j] >> 16));
            }
        }
    } else {
TND_UNROLL
        for (int i = 0; i < 32; i++) o.q[i] = i < left ? h2f(ldg(p + i)) : 0.0f;
    }
    o.a0 = o.a1 = 1.0f; o.b0 = o.b1 = 0.0f;
}
template <> TND_HD void load_sub<TND_TYPE_BF16>(const uint8_t *row, int64_t s, int64_t n_in, sub32 &o) {
    const unsigned short *p = (const unsigned short *)row + s * 32;
    int64_t left = n_in - s * 32;
    if (left >= 32 && ((uintptr_t)p & 15) == 0) {
TND_UNROLL
        for (int i = 0; i < 4; i++) {
            uint4 v = ldg((const uint4 *)p + i);
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
TND_UNROLL
            for (int j = 0; j < 4; j++) {
                o.q[8 * i + 2 * j] = bf2f((uint16_t)(w[j] & 0xffff));
                o.q[8 * i + 2 * j + 1] = bf2f((uint16_t)(w[j] >> 16));
            }
        }
    } else {
TND_UNROLL
        for (int i = 0; i < 32; i++) o.q[i] = i < left ? bf2f(ldg(p + i)) : 0.0f;
    }
    o.a0 = o.a1 = 1.0f; o.b0 = o.b1 = 0.0f;
}

/* Q4_0 (18 B): d, qs[16]; value i<16 = d*((qs[i]&15)-8), i>=16 = d*((qs[i-16]>>4)-8). */
template <> TND_HD void load_sub<TND_TYPE_Q4_0>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 18;
    float d = h2f(ldu16(b));
    uint32_t w[4];
    ld_words_a2<4>(b + 2, w);
TND_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t c = byte_of(w, i);
        o.q[i] = qf(c & 15);
        o.q[i + 16] = qf(c >> 4);
    }
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = -8.0f * d;
}
/* Q4_1 (20 B): d, m, qs[16]; value = d*nibble + m (nibble order as Q4_0). */
template <> TND_HD void load_sub<TND_TYPE_Q4_1>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 20;
    uint32_t w[5];
    ld_words_a4<5>(b, w);
    float d = h2f((uint16_t)(w[0] & 0xffff)), m = h2f((uint16_t)(w[0] >> 16));
TND_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t c = byte_of(w + 1, i);
        o.q[i] = qf(c & 15);
        o.q[i + 16] = qf(c >> 4);
    }
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = m;
}
/* Q5_0 (22 B): d, qh (32 bits, bit i = high bit of value i), qs[16];
 * value = d*((nibble | high<<4) - 16). */
template <> TND_HD void load_sub<TND_TYPE_Q5_0>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 22;
    float d = h2f(ldu16(b));
    uint32_t hw[1], w[4];
    ld_words_a2<1>(b + 2, hw);
    ld_words_a2<4>(b + 6, w);
    uint32_t qh = hw[0];
TND_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t c = byte_of(w, i);
        o.q[i] = qf((c & 15) | (((qh >> i) & 1) << 4));
        o.q[i + 16] = qf((c >> 4) | (((qh >> (i + 16)) & 1) << 4));
    }
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = -16.0f * d;
}
/* Q5_1 (24 B): d, m, qh, qs[16]; value = d*(nibble | high<<4) + m. */
template <> TND_HD void load_sub<TND_TYPE_Q5_1>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 24;
    uint32_t w[6];
    ld_words_a4<6>(b, w);
    float d = h2f((uint16_t)(w[0] & 0xffff)), m = h2f((uint16_t)(w[0] >> 16));
    uint32_t qh = w[1];
TND_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t c = byte_of(w + 2, i);
        o.q[i] = qf((c & 15) | (((qh >> i) & 1) << 4));
        o.q[i + 16] = qf((c >> 4) | (((qh >> (i + 16)) & 1) << 4));
    }
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = m;
}
/* Q8_0 (34 B): d, qs[32] int8; value = d*qs[i]. */
template <> TND_HD void load_sub<TND_TYPE_Q8_0>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 34;
    float d = h2f(ldu16(b));
    uint32_t w[8];
    ld_words_a2<8>(b + 2, w);
TND_UNROLL
    for (int i = 0; i < 32; i++) o.q[i] = qf_off(byte_of(w, i) ^ 0x80u, 128.0f); /* int8 = (u ^ 0x80) - 128 */
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = 0.0f;
}
/* MXFP4 (17 B): e (E8M0), qs[16] E2M1 codes, nibble order as Q4_0;
 * value = e2m1(code) * 2^(e-127). */
template <> TND_HD void load_sub<TND_TYPE_MXFP4>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + s * 17;
    float d = e8m0_half(ldu8(b));
TND_UNROLL
    for (int i = 0; i < 16; i++) {
        uint32_t c = ldu8(b + 1 + i);
        o.q[i] = e2m1x2(c & 15);
        o.q[i + 16] = e2m1x2(c >> 4);
    }
    o.a0 = o.a1 = d;
    o.b0 = o.b1 = 0.0f;
}
/* Q2_K (84 B): scales[16] @0, qs[64] @16, d @80, dmin @82. Sub s = 4n+j:
 * byte l of qs[32n..], bits 2j..2j+1; scale byte 2s (+1 for the second
 * half): value = d*(sc&15)*q - dmin*(sc>>4). */
template <> TND_HD void load_sub<TND_TYPE_Q2_K>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + (s >> 3) * 84;
    int sb = (int)(s & 7), n = sb >> 2, j = sb & 3;
    uint32_t w[8], hd[1];
    ld_words_a4<8>(b + 16 + 32 * n, w);
    ld_words_a4<1>(b + 80, hd);
    float d = h2f((uint16_t)(hd[0] & 0xffff)), dmin = h2f((uint16_t)(hd[0] >> 16));
    uint32_t sc0 = ldu8(b + 2 * sb), sc1 = ldu8(b + 2 * sb + 1);
TND_UNROLL
    for (int i = 0; i < 32; i++) o.q[i] = qf((byte_of(w, i) >> (2 * j)) & 3);
    o.a0 = d * (float)(sc0 & 15); o.b0 = -dmin * (float)(sc0 >> 4);
    o.a1 = d * (float)(sc1 & 15); o.b1 = -dmin * (float)(sc1 >> 4);
}
/* Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Sub s =
 * 4n+j: low bits = bits 2j.. of qs[32n+l], high bit = bit s of hmask[l]
 * (clear means -4); scale 2s (+1), 6-bit signed (-32). */
template <> TND_HD void load_sub<TND_TYPE_Q3_K>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + (s >> 3) * 110;
    int sb = (int)(s & 7), n = sb >> 2, j = sb & 3;
    uint32_t w[8], hm[8];
    ld_words_a2<8>(b + 32 + 32 * n, w);
    ld_words_a2<8>(b, hm);
    float d = h2f(ldu16(b + 108));
TND_UNROLL
    for (int i = 0; i < 32; i++) {
        uint32_t lo = (byte_of(w, i) >> (2 * j)) & 3, hi = (byte_of(hm, i) >> sb) & 1;
        o.q[i] = qf_off(lo | (hi << 2), 4.0f); /* lo - (hi ? 0 : 4) */
    }
    o.a0 = d * q3k_scale(b + 96, 2 * sb);
    o.a1 = d * q3k_scale(b + 96, 2 * sb + 1);
    o.b0 = o.b1 = 0.0f;
}
/* Q4_K (144 B): d @0, dmin @2, scales[12] @4, qs[128] @16. Sub s: bytes
 * qs[32*(s/2)..], low nibbles for even s, high for odd; scale/min s. */
template <> TND_HD void load_sub<TND_TYPE_Q4_K>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + (s >> 3) * 144;
    int sb = (int)(s & 7);
    uint32_t w[8];
    ld_words_a16x2(b + 16 + 32 * (sb >> 1), w);
    uint32_t hd = ldg((const unsigned int *)b);
    float d = h2f((uint16_t)(hd & 0xffff)), dmin = h2f((uint16_t)(hd >> 16));
    float sc, m;
    kscale_min(b + 4, sb, &sc, &m);
    int sh = 4 * (sb & 1);
TND_UNROLL
    for (int i = 0; i < 32; i++) o.q[i] = qf((byte_of(w, i) >> sh) & 15);
    o.a0 = o.a1 = d * sc;
    o.b0 = o.b1 = -dmin * m;
}
/* Q5_K (176 B): d, dmin, scales[12], qh[32] @16, qs[128] @48. As Q4_K plus
 * bit s of qh[l] as the fifth bit. */
template <> TND_HD void load_sub<TND_TYPE_Q5_K>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + (s >> 3) * 176;
    int sb = (int)(s & 7);
    uint32_t w[8], h[8];
    ld_words_a16x2(b + 48 + 32 * (sb >> 1), w);
    ld_words_a16x2(b + 16, h);
    uint32_t hd = ldg((const unsigned int *)b);
    float d = h2f((uint16_t)(hd & 0xffff)), dmin = h2f((uint16_t)(hd >> 16));
    float sc, m;
    kscale_min(b + 4, sb, &sc, &m);
    int sh = 4 * (sb & 1);
TND_UNROLL
    for (int i = 0; i < 32; i++)
        o.q[i] = qf(((byte_of(w, i) >> sh) & 15) | (((byte_of(h, i) >> sb) & 1) << 4));
    o.a0 = o.a1 = d * sc;
    o.b0 = o.b1 = -dmin * m;
}
/* Q6_K (210 B): ql[128] @0, qh[64] @128, scales[16] int8 @192, d @208.
 * Sub s = 4n+j: low 4 bits from ql[64n + 32*(j&1) + l] (high nibble if
 * j >= 2), high 2 bits = bits 2j.. of qh[32n+l]; value = d*sc*(q-32) with
 * scale 8n+2j (+1 for the second half) = 2s (+1). */
template <> TND_HD void load_sub<TND_TYPE_Q6_K>(const uint8_t *row, int64_t s, int64_t, sub32 &o) {
    const uint8_t *b = row + (s >> 3) * 210;
    int sb = (int)(s & 7), n = sb >> 2, j = sb & 3;
    uint32_t w[8], h[8];
    ld_words_a2<8>(b + 64 * n + 32 * (j & 1), w);
    ld_words_a2<8>(b + 128 + 32 * n, h);
    float d = h2f(ldu16(b + 208));
    int sl = 4 * (j >> 1);
TND_UNROLL
    for (int i = 0; i < 32; i++)
        o.q[i] = qf_off(((byte_of(w, i) >> sl) & 15) | (((byte_of(h, i) >> (2 * j)) & 3) << 4), 32.0f);
    o.a0 = d * (float)(int8_t)ldu8(b + 192 + 2 * sb);
    o.a1 = d * (float)(int8_t)ldu8(b + 192 + 2 * sb + 1);
    o.b0 = o.b1 = 0.0f;
}

/* Calls F.template operator()<TYPE>() for a runtime type; returns false for
 * a type without a decoder. */
#define TND_CU_TYPE_CASES(X)   \
    X(TND_TYPE_F32)            \
    X(TND_TYPE_F16)            \
    X(TND_TYPE_BF16)           \
    X(TND_TYPE_Q4_0)           \
    X(TND_TYPE_Q4_1)           \
    X(TND_TYPE_Q5_0)           \
    X(TND_TYPE_Q5_1)           \
    X(TND_TYPE_Q8_0)           \
    X(TND_TYPE_Q2_K)           \
    X(TND_TYPE_Q3_K)           \
    X(TND_TYPE_Q4_K)           \
    X(TND_TYPE_Q5_K)           \
    X(TND_TYPE_Q6_K)           \
    X(TND_TYPE_MXFP4)

/* Bytes of one row of n elements of a decodable type, 0 if not decodable
 * or n is not a multiple of the block size. */
static inline size_t tnd_cu_row_bytes(int t, int64_t n) {
    int64_t bs = 32;
    size_t ts;
    switch (t) {
    case TND_TYPE_F32: return (size_t)n * 4;
    case TND_TYPE_F16:
    case TND_TYPE_BF16: return (size_t)n * 2;
    case TND_TYPE_Q4_0: ts = 18; break;
    case TND_TYPE_Q4_1: ts = 20; break;
    case TND_TYPE_Q5_0: ts = 22; break;
    case TND_TYPE_Q5_1: ts = 24; break;
    case TND_TYPE_Q8_0: ts = 34; break;
    case TND_TYPE_MXFP4: ts = 17; break;
    case TND_TYPE_Q2_K: ts = 84; bs = 256; break;
    case TND_TYPE_Q3_K: ts = 110; bs = 256; break;
    case TND_TYPE_Q4_K: ts = 144; bs = 256; break;
    case TND_TYPE_Q5_K: ts = 176; bs = 256; break;
    case TND_TYPE_Q6_K: ts = 210; bs = 256; break;
    default: return 0;
    }
    if (n % bs) return 0;
    return (size_t)(n / bs) * ts;
}

/* Alignment (bytes) the decoders need at a row's start: each format's row
 * size is a multiple of it, so every row (and every expert's matrix) of a
 * matrix whose base has it has it too. The float types check wider
 * alignment per sub and fall back to element loads. */
static inline size_t tnd_cu_type_align(int t) {
    switch (t) {
    case TND_TYPE_Q4_K:
    case TND_TYPE_Q5_K: return 16;
    case TND_TYPE_F32:
    case TND_TYPE_Q4_1:
    case TND_TYPE_Q5_1:
    case TND_TYPE_Q2_K: return 4;
    case TND_TYPE_MXFP4: return 1;
    default: return 2;
    }
}


/* ---- f16 tensor-core decode (matvec_mma.cu, k_mvh_*) ------------------------
 * Weights are decoded to f16 pairs (half2 as raw 32-bit words) with integer
 * tricks and fed to mma.sync m16n8k16 (f16 in, f32 accumulate). A 4-bit code
 * q at bits 0..3 (or 4..7) of a 16-bit lane ORed into 0x6400 is the half
 * 1024 + q (1024 + 16q): the mantissa's unit at 1024 is 1. Subtracting 1024
 * (or * 1/16 - 64) is exact, then one HFMA2 applies the sub-block's scale and
 * min (each the f16 rounding of the exact product d*sc, dmin*m), rounding
 * the weight once. (Folding the 1024 into the min, (1024+q)*s - (1024s+m),
 * would cancel: the f16 error of 1024s + m is ~s/2.)
 *
 * The helpers work on raw words and are host+device so that a host test
 * (tests/test_cuda_mvh.cu) can replay a whole warp's fragments. */
TND_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, sel);
#else
    const uint64_t v = (uint64_t)a | ((uint64_t)b << 32);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}
#ifdef __CUDA_ARCH__
__device__ __forceinline__ __half2 u2h2(uint32_t u) { return *(const __half2 *)&u; }
__device__ __forceinline__ uint32_t h22u(__half2 h) { return *(const uint32_t *)&h; }
#else
/* host: each half of a pair through double (exact for sums and products of
 * two halves), rounded once to f16 */
static inline double hbits2d(uint32_t u) { return (double)__half2float(__ushort_as_half((unsigned short)u)); }
static inline uint32_t d2hbits(double v) { return (uint32_t)__half_as_ushort(__double2half(v)); }
#endif
/* a*b + c per half, one rounding (HFMA2) */
TND_HD uint32_t hfma2u(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
    return h22u(__hfma2(u2h2(a), u2h2(b), u2h2(c)));
#else
    return d2hbits(hbits2d(a) * hbits2d(b) + hbits2d(c)) |
           (d2hbits(hbits2d(a >> 16) * hbits2d(b >> 16) + hbits2d(c >> 16)) << 16);
#endif
}
TND_HD uint32_t hmul2u(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return h22u(__hmul2(u2h2(a), u2h2(b)));
#else
    return d2hbits(hbits2d(a) * hbits2d(b)) | (d2hbits(hbits2d(a >> 16) * hbits2d(b >> 16)) << 16);
#endif
}
TND_HD uint32_t hsub2u(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return h22u(__hsub2(u2h2(a), u2h2(b)));
#else
    return d2hbits(hbits2d(a) - hbits2d(b)) | (d2hbits(hbits2d(a >> 16) - hbits2d(b >> 16)) << 16);
#endif
}
/* two floats as a half2 word (round to nearest even), a in the low half */
TND_HD uint32_t f2h2u(float a, float b) {
#ifdef __CUDA_ARCH__
    return h22u(__floats2half2_rn(a, b));
#else
    return (uint32_t)__half_as_ushort(__float2half_rn(a)) | ((uint32_t)__half_as_ushort(__float2half_rn(b)) << 16);
#endif
}

/* (a & m) | c in one LOP3 (the compiler splits it in two when both m and c
 * are immediates) */
TND_HD uint32_t and_or(uint32_t a, uint32_t m, uint32_t c) {
#ifdef __CUDA_ARCH__
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(m), "r"(c));
    return r;
#else
    return (a & m) | c;
#endif
}

#define MVH_1024 0x64006400u  /* (1024, 1024) */
#define MVH_16TH 0x2C002C00u  /* (1/16, 1/16) */
#define MVH_M64 0xD400D400u   /* (-64, -64) */

/* Q4_K for the mma path. Lane (g, t) of a warp (g = lane/4, t = lane%4)
 * owns rows g and g+8 of a 16-row tile; per super-block it reads, per row,
 * the 16-byte header and the 16-byte pieces j = 0, 1 at qs offset 64j + 16t:
 * chunk c = 2j + t/2 (subs 2c: low nibbles, 2c+1: high), elements
 * 16(t%2) .. +15. Word i of a piece gives, per row, the mma A pairs
 * (bytes 0,2) and (bytes 1,3): elements e, e+2 and e+1, e+3 with e =
 * 16(t%2) + 4i, low nibbles for the mma of sub 2c, high for sub 2c+1. The
 * dot product does not care about the order of k, so x is stored in the
 * same order (mvh_q4k_slot).
 *
 * Scale pairs for piece j: broadcast half2 words s_lo, m_lo (sub 2c, m
 * negated), s_hi, m_hi (sub 2c+1) of one row from its header h[4]. */
TND_HD void mvh_q4k_scales(const uint32_t (&h)[4], int c0, int j, uint32_t &s_lo, uint32_t &m_lo, uint32_t &s_hi,
                           uint32_t &m_hi) {
    /* 6-bit scales and mins of subs 0..3 (j = 0) or 4..7 (j = 1), a byte each */
    const uint32_t S = j == 0 ? h[1] & 0x3F3F3F3Fu : (h[3] & 0x0F0F0F0Fu) | ((h[1] >> 2) & 0x30303030u);
    const uint32_t M = j == 0 ? h[2] & 0x3F3F3F3Fu : ((h[3] >> 4) & 0x0F0F0F0Fu) | ((h[2] >> 2) & 0x30303030u);
    /* bytes 2c0, 2c0+1 into the low bytes of the two halves, 0x64 above */
    const uint32_t sel = c0 ? 0x4342u : 0x4140u;
    const uint32_t sc = hsub2u(prmt(S, 0x64u, sel), MVH_1024), mn = hsub2u(prmt(M, 0x64u, sel), MVH_1024);
    const uint32_t s2 = hmul2u(sc, prmt(h[0], 0, 0x1010u));                /* (d*sc_a, d*sc_b) */
    const uint32_t m2 = hmul2u(mn, prmt(h[0], 0, 0x3232u) ^ 0x80008000u); /* (-dmin*m_a, -dmin*m_b) */
    s_lo = prmt(s2, 0, 0x1010u);
    s_hi = prmt(s2, 0, 0x3232u);
    m_lo = prmt(m2, 0, 0x1010u);
    m_hi = prmt(m2, 0, 0x3232u);
}
/* One qs word of one row: A pairs lo0 (e, e+2) and lo1 (e+1, e+3) of the
 * low-nibble sub, hi0, hi1 of the high-nibble sub, scaled. */
TND_HD void mvh_q4k_word(uint32_t w, uint32_t s_lo, uint32_t m_lo, uint32_t s_hi, uint32_t m_hi, uint32_t &lo0,
                         uint32_t &lo1, uint32_t &hi0, uint32_t &hi1) {
    const uint32_t w8 = w >> 8;
    lo0 = hfma2u(hsub2u(and_or(w, 0x000F000Fu, MVH_1024), MVH_1024), s_lo, m_lo);
    lo1 = hfma2u(hsub2u(and_or(w8, 0x000F000Fu, MVH_1024), MVH_1024), s_lo, m_lo);
    hi0 = hfma2u(hfma2u(and_or(w, 0x00F000F0u, MVH_1024), MVH_16TH, MVH_M64), s_hi, m_hi);
    hi1 = hfma2u(hfma2u(and_or(w8, 0x00F000F0u, MVH_1024), MVH_16TH, MVH_M64), s_hi, m_hi);
}
/* One super-block of a 16-row tile, lane t's part: h0, h1 = headers of rows
 * g, g+8; q0, q1 = their pieces j = 0, 1 (8 words). For each of the 16
 * mmas m (low sub, high sub alternating) calls mma(m & 1, A0, A1, A2, A3,
 * xpair(m)): A0 = (row g, k 2t..), A1 = (row g+8, k 2t..), A2 = (row g,
 * k 2t+8..), A3 = (row g+8, k 2t+8..), xpair(m) = lane's B pair. */
template <class XF, class MF>
TND_HD void mvh_q4k_sb(const uint32_t (&h0)[4], const uint32_t (&h1)[4], const uint32_t (&q0)[8],
                       const uint32_t (&q1)[8], int t, XF xpair, MF mma) {
    const int c0 = t >> 1;
TND_UNROLL
    for (int j = 0; j < 2; j++) {
        uint32_t sl0, ml0, sh0, mh0, sl1, ml1, sh1, mh1;
        mvh_q4k_scales(h0, c0, j, sl0, ml0, sh0, mh0);
        mvh_q4k_scales(h1, c0, j, sl1, ml1, sh1, mh1);
TND_UNROLL
        for (int i = 0; i < 4; i++) {
            uint32_t a_lo0, a_lo1, a_hi0, a_hi1, b_lo0, b_lo1, b_hi0, b_hi1;
            mvh_q4k_word(q0[4 * j + i], sl0, ml0, sh0, mh0, a_lo0, a_lo1, a_hi0, a_hi1);
            mvh_q4k_word(q1[4 * j + i], sl1, ml1, sh1, mh1, b_lo0, b_lo1, b_hi0, b_hi1);
            const int m = (4 * j + i) * 2;
            mma(0, a_lo0, b_lo0, a_lo1, b_lo1, xpair(m));
            mma(1, a_hi0, b_hi0, a_hi1, b_hi1, xpair(m + 1));
        }
    }
}
/* Where x[o..o+3] (o: offset in the super-block, a multiple of 4) goes: the
 * B pair slot m*4 + t of mma m = (4j + i)*2 + (sub & 1) of lane t. */
TND_HD int mvh_q4k_slot(int o) {
    const int s = o >> 5, e = o & 31, c = s >> 1;
    const int t = 2 * (c & 1) + (e >> 4), i = (e >> 2) & 3, j = c >> 1;
    return ((4 * j + i) * 2 + (s & 1)) * 4 + t;
}

/* Q6_K for the mma path. Lane (g, t), per row and super-block: for half n
 * (0, 1) and group gi (0, 1), elements l0 .. l0+3 (l0 = 8t + 4gi) of the
 * subs 4n + j (j = 0..3): the ql word at 64n + 32(j&1) + l0 (low nibbles
 * for j < 2, high for j >= 2) and the qh word at 128 + 32n + l0 (bits
 * 2j, 2j+1 of each byte). ql[(2n + h)*2 + gi] (h = j&1), qh[2n + gi]: the
 * lane's words; sc[4]: the 16 int8 scales; d the f16 bits of d. Lane t's
 * elements lie in half t/2 of each sub (scale 2(4n+j) + t/2). mma m =
 * (2n + gi)*4 + j, chains by j & 1. */
#define MVH_1056 0x64206420u /* (1056, 1056): 1024 + 32 */
#define MVH_1152 0x64806480u /* (1152, 1152): 1024 + 128 */
template <class XF, class MF>
TND_HD void mvh_q6k_sb(const uint32_t (&ql0)[8], const uint32_t (&qh0)[4], const uint32_t (&sc0)[4], uint32_t d0,
                       const uint32_t (&ql1)[8], const uint32_t (&qh1)[4], const uint32_t (&sc1)[4], uint32_t d1,
                       int t, XF xpair, MF mma) {
    const uint32_t sel = (t >> 1) ? 0x4341u : 0x4240u; /* bytes hb, 2+hb of a scale word, 0x64 above */
    const uint32_t dd0 = prmt(d0, 0, 0x1010u), dd1 = prmt(d1, 0, 0x1010u);
TND_UNROLL
    for (int n = 0; n < 2; n++) {
        uint32_t s0[4], s1[4]; /* broadcast scale of sub 4n + j, rows g and g+8 */
TND_UNROLL
        for (int k = 0; k < 2; k++) { /* scale word 2n + k: subs 4n + 2k, 4n + 2k + 1 */
            const uint32_t p0 = hmul2u(hsub2u(prmt(sc0[2 * n + k] ^ 0x80808080u, 0x64u, sel), MVH_1152), dd0);
            const uint32_t p1 = hmul2u(hsub2u(prmt(sc1[2 * n + k] ^ 0x80808080u, 0x64u, sel), MVH_1152), dd1);
            s0[2 * k] = prmt(p0, 0, 0x1010u), s0[2 * k + 1] = prmt(p0, 0, 0x3232u);
            s1[2 * k] = prmt(p1, 0, 0x1010u), s1[2 * k + 1] = prmt(p1, 0, 0x3232u);
        }
TND_UNROLL
        for (int gi = 0; gi < 2; gi++) {
            const uint32_t h0 = qh0[2 * n + gi], h1 = qh1[2 * n + gi];
            const uint32_t h08 = h0 >> 8, h18 = h1 >> 8;
TND_UNROLL
            for (int j = 0; j < 4; j++) {
                const int sh = 4 - 2 * j; /* qh bits 2j.. to bits 4, 5 */
                const uint32_t l0 = ql0[(2 * n + (j & 1)) * 2 + gi] >> (j >= 2 ? 4 : 0);
                const uint32_t l1 = ql1[(2 * n + (j & 1)) * 2 + gi] >> (j >= 2 ? 4 : 0);
                const uint32_t q0a = sh >= 0 ? h0 << sh : h0 >> -sh, q0b = sh >= 0 ? h08 << sh : h08 >> -sh;
                const uint32_t q1a = sh >= 0 ? h1 << sh : h1 >> -sh, q1b = sh >= 0 ? h18 << sh : h18 >> -sh;
                /* (1024 + q) for bytes 0, 2 (a) and 1, 3 (b); minus 1056 is q - 32, exact */
                const uint32_t v0a = and_or(l0, 0x000F000Fu, and_or(q0a, 0x00300030u, MVH_1024));
                const uint32_t v0b = and_or(l0 >> 8, 0x000F000Fu, and_or(q0b, 0x00300030u, MVH_1024));
                const uint32_t v1a = and_or(l1, 0x000F000Fu, and_or(q1a, 0x00300030u, MVH_1024));
                const uint32_t v1b = and_or(l1 >> 8, 0x000F000Fu, and_or(q1b, 0x00300030u, MVH_1024));
                mma(j & 1, hmul2u(hsub2u(v0a, MVH_1056), s0[j]), hmul2u(hsub2u(v1a, MVH_1056), s1[j]),
                    hmul2u(hsub2u(v0b, MVH_1056), s0[j]), hmul2u(hsub2u(v1b, MVH_1056), s1[j]),
                    xpair((2 * n + gi) * 4 + j));
            }
        }
    }
}
/* Q6_K slot of x[o..o+3] in a super-block (see mvh_q4k_slot). */
TND_HD int mvh_q6k_slot(int o) {
    const int s = o >> 5, e = o & 31, n = s >> 2, j = s & 3;
    return ((2 * n + ((e >> 2) & 1)) * 4 + j) * 4 + (e >> 3);
}

/* ---- int8 tensor-core decode of Q4_K (matvec_mma.cu, k_mvi_q4k) ------------
 * The weights go in as they are: a nibble masked in place is an unsigned
 * byte (0..15 for the low sub of a chunk, 16*q for the high one), 4 weights
 * per LOP3, into mma.sync m16n8k32 (u8 x s8, exact s32 sums). x goes in as
 * two signed byte planes per super-block: x ~ delta * (256*H + L), delta =
 * max|x| / 32639 over the 256 values, so each x is rounded to a 16-bit grid
 * (error <= max|x| / 65278); H and L are the mma's columns 2k, 2k+1 for
 * token k (4 tokens per mma). Per sub-block the s32 results are scaled by
 * the 6-bit integer scale and summed exactly in s32; d, dmin and delta
 * apply once per super-block in f32.
 *
 * x quantization of 8 values (one lane's part of a super-block; inv =
 * 32639 / max|x|): H, L bytes of elements 0..3 (.x) and 4..7 (.y), and the
 * sum of the 16-bit codes. */
TND_HD void mvi_quant8(const float (&v)[8], float inv, uint2 &H, uint2 &L, int &sum) {
    uint32_t hw[2] = {0, 0}, lw[2] = {0, 0};
    sum = 0;
TND_UNROLL
    for (int i = 0; i < 8; i++) {
#ifdef __CUDA_ARCH__
        const int q = __float2int_rn(v[i] * inv);
#else
        const int q = (int)nearbyintf(v[i] * inv);
#endif
        const int h = (q + 128) >> 8, l = q - 256 * h; /* h in [-127, 127], l in [-128, 127] */
        hw[i >> 2] |= (uint32_t)(h & 255) << (8 * (i & 3));
        lw[i >> 2] |= (uint32_t)(l & 255) << (8 * (i & 3));
        sum += q;
    }
    H = make_uint2(hw[0], hw[1]);
    L = make_uint2(lw[0], lw[1]);
}
/* One super-block of a 16-row tile, lane t's part, for the int8 path. h0,
 * h1: headers of rows g, g+8; q0, q1: their 8-byte pieces at qs offset 32c
 * + 8t, c = 0..3 (words 2c, 2c+1: elements 8t.. and 8t+4.. of subs 2c (low
 * nibbles) and 2c+1 (high)). bpair(s): the lane's B words of sub s; xsum(s):
 * the sum of the 16-bit codes of sub s of the lane's token t; imma(a0..a3,
 * b, D): D = A*B. Adds, per row r (0: g, 1: g+8), into acc[r]: [0] sum over
 * low subs of sc*D(H), [1] over high subs (16x), [2], [3] the same for L,
 * [4] sum of m * xsum. */
template <class BF, class SF, class MF>
TND_HD void mvi_q4k_sb(const uint32_t (&h0)[4], const uint32_t (&h1)[4], const uint32_t (&q0)[8],
                       const uint32_t (&q1)[8], BF bpair, SF xsum, MF imma, int (&acc)[2][5]) {
    const uint32_t S0[2] = {h0[1] & 0x3F3F3F3Fu, (h0[3] & 0x0F0F0F0Fu) | ((h0[1] >> 2) & 0x30303030u)};
    const uint32_t M0[2] = {h0[2] & 0x3F3F3F3Fu, ((h0[3] >> 4) & 0x0F0F0F0Fu) | ((h0[2] >> 2) & 0x30303030u)};
    const uint32_t S1[2] = {h1[1] & 0x3F3F3F3Fu, (h1[3] & 0x0F0F0F0Fu) | ((h1[1] >> 2) & 0x30303030u)};
    const uint32_t M1[2] = {h1[2] & 0x3F3F3F3Fu, ((h1[3] >> 4) & 0x0F0F0F0Fu) | ((h1[2] >> 2) & 0x30303030u)};
TND_UNROLL
    for (int s = 0; s < 8; s++) {
        const int c = s >> 1, h = s & 1;
        const uint32_t mask = h ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
        int D[4];
        imma(q0[2 * c] & mask, q1[2 * c] & mask, q0[2 * c + 1] & mask, q1[2 * c + 1] & mask, bpair(s), D);
        const uint32_t sel = 0x4440u | (uint32_t)(s & 3); /* byte s%4, zeros above */
        const int sc0 = (int)prmt(S0[s >> 2], 0, sel), sc1 = (int)prmt(S1[s >> 2], 0, sel);
        const int m0 = (int)prmt(M0[s >> 2], 0, sel), m1 = (int)prmt(M1[s >> 2], 0, sel);
        acc[0][h] += sc0 * D[0];
        acc[0][2 + h] += sc0 * D[1];
        acc[1][h] += sc1 * D[2];
        acc[1][2 + h] += sc1 * D[3];
        const int X = xsum(s);
        acc[0][4] += m0 * X;
        acc[1][4] += m1 * X;
    }
}
/* The f32 value of a super-block's integer sums for one row (header h) and
 * delta: d * (256 H + L) / 16 - dmin * M, times delta. */
TND_HD float mvi_q4k_value(const uint32_t (&h)[4], const int (&a)[5], float delta) {
    const float d = h2f((uint16_t)(h[0] & 0xffff)), dmin = h2f((uint16_t)(h[0] >> 16));
    const float H = (float)(16 * a[0] + a[1]), L = (float)(16 * a[2] + a[3]);
    return delta * (d * 0.0625f * fmaf(256.0f, H, L) - dmin * (float)a[4]);
}

/* Q8_0 for the f16 mma path, in groups of 8 blocks (256 values, 272 bytes,
 * "super-blocks" here): lane t owns blocks 2t (a) and 2t+1 (b) of the
 * group, whole: qa, qb = their 32 quant bytes as 8 words, da, db = the f16
 * bits of their d, for rows g (0) and g+8 (1). mma m = 8*(block) + word k:
 * pairs (bytes 0, 2) and (1, 3) of word k as 1024 + (q ^ 0x80) halves,
 * minus 1152 (exact: q), times d (one rounding). */
template <class XF, class MF>
TND_HD void mvh_q8_sb(const uint32_t (&qa0)[8], const uint32_t (&qb0)[8], uint32_t da0, uint32_t db0,
                      const uint32_t (&qa1)[8], const uint32_t (&qb1)[8], uint32_t da1, uint32_t db1, XF xpair,
                      MF mma) {
    const uint32_t dd[2][2] = {{prmt(da0, 0, 0x1010u), prmt(db0, 0, 0x1010u)}, {prmt(da1, 0, 0x1010u), prmt(db1, 0, 0x1010u)}};
TND_UNROLL
    for (int m = 0; m < 16; m++) {
        const int blk = m >> 3, k = m & 7;
        const uint32_t w0 = (blk ? qb0[k] : qa0[k]) ^ 0x80808080u, w1 = (blk ? qb1[k] : qa1[k]) ^ 0x80808080u;
        mma(m & 1, hmul2u(hsub2u(prmt(w0, 0x64u, 0x4240u), MVH_1152), dd[0][blk]),
            hmul2u(hsub2u(prmt(w1, 0x64u, 0x4240u), MVH_1152), dd[1][blk]),
            hmul2u(hsub2u(prmt(w0, 0x64u, 0x4341u), MVH_1152), dd[0][blk]),
            hmul2u(hsub2u(prmt(w1, 0x64u, 0x4341u), MVH_1152), dd[1][blk]), xpair(m));
    }
}
/* Q8_0 slot of x[o..o+3] in a group of 8 blocks (see mvh_q4k_slot). */
TND_HD int mvh_q8_slot(int o) {
    const int b = o >> 5;
    return (((b & 1) << 3) + ((o & 31) >> 2)) * 4 + (b >> 1);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. sh: 32 floats of shared memory. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

static inline unsigned tnd_cu_blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

/* Threads of a block that RMS-norms one row of n (norm.cu, and rope.cu's
 * fused per-head norm: the same count, so the same sum order) */
static inline int tnd_cu_norm_threads(int64_t n) { return n >= 1024 ? 256 : n >= 256 ? 128 : 32; }

#endif
