/* K-quants: super-blocks of 256 with per-group scales (Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K) and their activation format Q8_K.
 *
 * Element layouts (facts of the format), for element i of a super-block:
 *   Q2_K: group i/16; 2 bits at qs[32*(i/128) + i%32] >> 2*((i%128)/32);
 *         y = d*(sc&15)*q - dmin*(sc>>4).
 *   Q3_K: group i/16; low 2 bits as Q2_K, high bit at hmask[i%32] bit i/32,
 *         q = low - (high ? 0 : 4); y = d*(scale-32)*q.
 *   Q4_K: group i/32; nibble of qs[32*(i/64) + i%32], high one if (i/32) odd;
 *         y = d*sc*q - dmin*m (6-bit sc, m).
 *   Q5_K: as Q4_K plus a fifth bit at qh[i%32] bit i/32.
 *   Q6_K: group i/16; with h = i/128, r = i%128, l = r%32, c = r/32:
 *         low 4 bits in ql[64h + l + 32*(c&1)] (high nibble if c >= 2),
 *         high 2 bits at qh[32h + l] >> 2c; y = d*scale*(q-32), int8 scales.
 *
 * The quantizers are ours (not ggml's search): for each group they choose
 * the smallest representable scale (and min) whose grid covers the group's
 * values, so every element is within half a step of its dequantized value. */
#include <math.h>

#include "quant/quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QK TND_QK_K

static inline float h2f(uint16_t h) { return tnd_fp16_to_fp32(h); }

/* Smallest non-negative half h with h * mult >= v (v >= 0, finite), so a
 * super-block scale d = h covers v / mult in mult integer steps. */
static uint16_t half_at_least(float v, float mult) {
    if (!(v > 0.0f)) return 0;
    uint16_t h = tnd_fp32_to_fp16(v / mult);
    while (h < 0x7bff && h2f(h) * mult < v) h++;
    return h;
}

/* Smallest integer q in [0, qmax] with q * unit >= v (v >= 0), or qmax. */
static int ceil_steps(float v, float unit, int qmax) {
    if (!(unit > 0.0f) || !(v > 0.0f)) return 0;
    float r = ceilf(v / unit);
    int q = r > (float)qmax ? qmax : (int)r;
    if (q < qmax && (float)q * unit < v) q++;
    return q;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void group_minmax(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo;
    *mx = hi;
}

/* Asymmetric super-block: ng groups of gs values, q in [0, nq], scale and min
 * in [0, smax]. Writes the half d, dmin, per-group ls, lm and the quants. */
static void quant_asym(const float *x, int ng, int gs, int nq, int smax,
                       uint16_t *d_out, uint16_t *dmin_out, uint8_t *ls, uint8_t *lm, uint8_t *q) {
    float m[16], top[16], s[16];
    float maxm = 0.0f;
    for (int g = 0; g < ng; g++) {
        float mn, mx;
        group_minmax(x + g * gs, gs, &mn, &mx);
        m[g] = mn < 0.0f ? -mn : 0.0f; /* min stored as a non-negative offset */
        top[g] = mx;
        maxm = fmaxf(maxm, m[g]);
    }
    uint16_t dmin_h = half_at_least(maxm, (float)smax);
    float dmin = h2f(dmin_h);
    float maxs = 0.0f;
    for (int g = 0; g < ng; g++) {
        lm[g] = (uint8_t)ceil_steps(m[g], dmin, smax);
        float span = top[g] + dmin * (float)lm[g]; /* >= 0: top >= min >= -m_eff */
        s[g] = span > 0.0f ? span / (float)nq : 0.0f;
        maxs = fmaxf(maxs, s[g]);
    }
    uint16_t d_h = half_at_least(maxs, (float)smax);
    float d = h2f(d_h);
    for (int g = 0; g < ng; g++) {
        ls[g] = (uint8_t)ceil_steps(s[g], d, smax);
        float dl = d * (float)ls[g], ml = dmin * (float)lm[g];
        for (int j = 0; j < gs; j++) {
            int v = dl > 0.0f ? (int)roundf((x[g * gs + j] + ml) / dl) : 0;
            q[g * gs + j] = (uint8_t)clampi(v, 0, nq);
        }
    }
    *d_out = d_h;
    *dmin_out = dmin_h;
}

/* Symmetric super-block: q in [qlo, qhi] with qlo = -(qhi+1); group scales
 * ls in [-smax, 0] (non-positive, so the longer negative side of q holds the
 * positive extreme); d > 0. */
static void quant_sym(const float *x, int ng, int gs, int qhi, int smax,
                      uint16_t *d_out, int *ls, int8_t *q) {
    int qlo = -qhi - 1;
    float s[16], maxs = 0.0f;
    for (int g = 0; g < ng; g++) {
        float mn, mx;
        group_minmax(x + g * gs, gs, &mn, &mx);
        /* scale -s covers [-qhi*s, (qhi+1)*s] */
        float a = mx > 0.0f ? mx / (float)(qhi + 1) : 0.0f;
        float b = mn < 0.0f ? -mn / (float)qhi : 0.0f;
        s[g] = fmaxf(a, b);
        maxs = fmaxf(maxs, s[g]);
    }
    uint16_t d_h = half_at_least(maxs, (float)smax);
    float d = h2f(d_h);
    for (int g = 0; g < ng; g++) {
        ls[g] = -ceil_steps(s[g], d, smax);
        float dl = d * (float)ls[g];
        for (int j = 0; j < gs; j++) {
            int v = dl != 0.0f ? (int)roundf(x[g * gs + j] / dl) : 0;
            q[g * gs + j] = (int8_t)clampi(v, qlo, qhi);
        }
    }
    *d_out = d_h;
}

/* ---- Q2_K ------------------------------------------------------------------ */

void tnd_ref_to_float_q2_K(const void *vx, float *y, int64_t k) {
    const block_q2_K *x = (const block_q2_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK) {
        float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
        for (int i = 0; i < QK; i++) {
            int sc = x[b].scales[i / 16];
            int q = (x[b].qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
            float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            y[i] = dl * (float)q - ml;
        }
    }
}

void tnd_ref_from_float_q2_K(const float *x, void *vy, int64_t k) {
    block_q2_K *y = (block_q2_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        uint8_t ls[16], lm[16], q[QK];
        quant_asym(x, 16, 16, 3, 15, &y[b].d, &y[b].dmin, ls, lm, q);
        for (int g = 0; g < 16; g++) y[b].scales[g] = (uint8_t)(ls[g] | (lm[g] << 4));
        memset(y[b].qs, 0, sizeof(y[b].qs));
        for (int i = 0; i < QK; i++) y[b].qs[32 * (i / 128) + i % 32] |= (uint8_t)(q[i] << (2 * ((i % 128) / 32)));
    }
}

/* ---- Q3_K ------------------------------------------------------------------ */

static inline int q3_at(const block_q3_K *x, int i) {
    int lo = (x->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
    int hi = (x->hmask[i % 32] >> (i / 32)) & 1;
    return lo - (hi ? 0 : 4);
}

void tnd_ref_to_float_q3_K(const void *vx, float *y, int64_t k) {
    const block_q3_K *x = (const block_q3_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK) {
        float d = h2f(x[b].d);
        int8_t sc[16];
        tnd_get_scales_q3_K(x[b].scales, sc);
        for (int i = 0; i < QK; i++) {
            float dl = d * (float)sc[i / 16];
            y[i] = dl * (float)q3_at(&x[b], i);
        }
    }
}

void tnd_ref_from_float_q3_K(const float *x, void *vy, int64_t k) {
    block_q3_K *y = (block_q3_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        int ls[16];
        int8_t q[QK];
        quant_sym(x, 16, 16, 3, 32, &y[b].d, ls, q);
        memset(y[b].scales, 0, sizeof(y[b].scales));
        for (int g = 0; g < 16; g++) {
            int v = ls[g] + 32; /* 0..32, 6 bits */
            if (g < 8) y[b].scales[g] |= (uint8_t)(v & 0xF);
            else y[b].scales[g - 8] |= (uint8_t)((v & 0xF) << 4);
            y[b].scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
        }
        memset(y[b].qs, 0, sizeof(y[b].qs));
        memset(y[b].hmask, 0, sizeof(y[b].hmask));
        for (int i = 0; i < QK; i++) {
            int u = q[i] + 4; /* 0..7: high bit set means no -4 offset */
            y[b].qs[32 * (i / 128) + i % 32] |= (uint8_t)((u & 3) << (2 * ((i % 128) / 32)));
            y[b].hmask[i % 32] |= (uint8_t)((u >> 2) << (i / 32));
        }
    }
}

/* ---- Q4_K / Q5_K ------------------------------------------------------------ */

static inline int q4k_at(const uint8_t *qs, int i) {
    int byte = qs[32 * (i / 64) + i % 32];
    return (i / 32) & 1 ? byte >> 4 : byte & 0xF;
}

void tnd_ref_to_float_q4_K(const void *vx, float *y, int64_t k) {
    const block_q4_K *x = (const block_q4_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK) {
        float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(g, x[b].scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int i = 32 * g; i < 32 * g + 32; i++) y[i] = dl * (float)q4k_at(x[b].qs, i) - ml;
        }
    }
}

void tnd_ref_from_float_q4_K(const float *x, void *vy, int64_t k) {
    block_q4_K *y = (block_q4_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        uint8_t ls[8], lm[8], q[QK];
        quant_asym(x, 8, 32, 15, 63, &y[b].d, &y[b].dmin, ls, lm, q);
        tnd_pack_scale_min_k4(ls, lm, y[b].scales);
        memset(y[b].qs, 0, sizeof(y[b].qs));
        for (int i = 0; i < QK; i++)
            y[b].qs[32 * (i / 64) + i % 32] |= (uint8_t)(q[i] << ((i / 32) & 1 ? 4 : 0));
    }
}

static inline int q5k_at(const block_q5_K *x, int i) {
    return q4k_at(x->qs, i) | (((x->qh[i % 32] >> (i / 32)) & 1) << 4);
}

void tnd_ref_to_float_q5_K(const void *vx, float *y, int64_t k) {
    const block_q5_K *x = (const block_q5_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK) {
        float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(g, x[b].scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int i = 32 * g; i < 32 * g + 32; i++) y[i] = dl * (float)q5k_at(&x[b], i) - ml;
        }
    }
}

void tnd_ref_from_float_q5_K(const float *x, void *vy, int64_t k) {
    block_q5_K *y = (block_q5_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        uint8_t ls[8], lm[8], q[QK];
        quant_asym(x, 8, 32, 31, 63, &y[b].d, &y[b].dmin, ls, lm, q);
        tnd_pack_scale_min_k4(ls, lm, y[b].scales);
        memset(y[b].qs, 0, sizeof(y[b].qs));
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int i = 0; i < QK; i++) {
            y[b].qs[32 * (i / 64) + i % 32] |= (uint8_t)((q[i] & 0xF) << ((i / 32) & 1 ? 4 : 0));
            y[b].qh[i % 32] |= (uint8_t)((q[i] >> 4) << (i / 32));
        }
    }
}

/* ---- Q6_K ------------------------------------------------------------------ */

static inline int q6k_at(const block_q6_K *x, int i) {
    int h = i / 128, r = i % 128, l = r % 32, c = r / 32;
    int byte = x->ql[64 * h + l + 32 * (c & 1)];
    int lo = c >= 2 ? byte >> 4 : byte & 0xF;
    int hi = (x->qh[32 * h + l] >> (2 * c)) & 3;
    return (lo | (hi << 4)) - 32;
}

void tnd_ref_to_float_q6_K(const void *vx, float *y, int64_t k) {
    const block_q6_K *x = (const block_q6_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK) {
        float d = h2f(x[b].d);
        for (int i = 0; i < QK; i++) {
            float dl = d * (float)x[b].scales[i / 16];
            y[i] = dl * (float)q6k_at(&x[b], i);
        }
    }
}

void tnd_ref_from_float_q6_K(const float *x, void *vy, int64_t k) {
    block_q6_K *y = (block_q6_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        int ls[16];
        int8_t q[QK];
        quant_sym(x, 16, 16, 31, 128, &y[b].d, ls, q);
        for (int g = 0; g < 16; g++) y[b].scales[g] = (int8_t)ls[g];
        memset(y[b].ql, 0, sizeof(y[b].ql));
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int i = 0; i < QK; i++) {
            int h = i / 128, r = i % 128, l = r % 32, c = r / 32;
            int u = q[i] + 32; /* 0..63 */
            y[b].ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)((u & 0xF) << (c >= 2 ? 4 : 0));
            y[b].qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * c));
        }
    }
}

/* ---- Q8_K: x = d * q (f32 d), bsums = sums of each 16 quants ---------------- */

void tnd_ref_to_float_q8_K(const void *vx, float *y, int64_t k) {
    const block_q8_K *x = (const block_q8_K *)vx;
    for (int64_t b = 0; b < k / QK; b++, y += QK)
        for (int i = 0; i < QK; i++) y[i] = x[b].d * (float)x[b].qs[i];
}

void tnd_ref_from_float_q8_K(const float *x, void *vy, int64_t k) {
    block_q8_K *y = (block_q8_K *)vy;
    for (int64_t b = 0; b < k / QK; b++, x += QK) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
        float iscale = amax > 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = amax / 127.0f;
        for (int i = 0; i < QK; i++) y[b].qs[i] = (int8_t)clampi((int)roundf(x[i] * iscale), -127, 127);
        for (int g = 0; g < QK / 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)s;
        }
    }
}

/* ---- dot products with Q8_K activations --------------------------------------- */

float tnd_ref_vec_dot_q2_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q2_K *x = (const block_q2_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 16; g++) {
            int sc = x[b].scales[g];
            int32_t sumi = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) {
                int q = (x[b].qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
                sumi += q * y[b].qs[i];
            }
            isum += (sc & 0xF) * sumi;
            msum += (sc >> 4) * y[b].bsums[g];
        }
        acc += (y[b].d * h2f(x[b].d)) * (float)isum - (y[b].d * h2f(x[b].dmin)) * (float)msum;
    }
    return acc;
}

float tnd_ref_vec_dot_q3_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q3_K *x = (const block_q3_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int8_t sc[16];
        tnd_get_scales_q3_K(x[b].scales, sc);
        int32_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int32_t sumi = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) sumi += q3_at(&x[b], i) * y[b].qs[i];
            isum += sc[g] * sumi;
        }
        acc += (y[b].d * h2f(x[b].d)) * (float)isum;
    }
    return acc;
}

float tnd_ref_vec_dot_q4_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q4_K *x = (const block_q4_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(g, x[b].scales, &sc, &m);
            int32_t sumi = 0;
            for (int i = 32 * g; i < 32 * g + 32; i++) sumi += q4k_at(x[b].qs, i) * y[b].qs[i];
            isum += sc * sumi;
            msum += m * (y[b].bsums[2 * g] + y[b].bsums[2 * g + 1]);
        }
        acc += (y[b].d * h2f(x[b].d)) * (float)isum - (y[b].d * h2f(x[b].dmin)) * (float)msum;
    }
    return acc;
}

float tnd_ref_vec_dot_q5_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q5_K *x = (const block_q5_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            tnd_get_scale_min_k4(g, x[b].scales, &sc, &m);
            int32_t sumi = 0;
            for (int i = 32 * g; i < 32 * g + 32; i++) sumi += q5k_at(&x[b], i) * y[b].qs[i];
            isum += sc * sumi;
            msum += m * (y[b].bsums[2 * g] + y[b].bsums[2 * g + 1]);
        }
        acc += (y[b].d * h2f(x[b].d)) * (float)isum - (y[b].d * h2f(x[b].dmin)) * (float)msum;
    }
    return acc;
}

float tnd_ref_vec_dot_q6_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q6_K *x = (const block_q6_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t isum = 0;
        for (int g = 0; g < 16; g++) {
            int32_t sumi = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) sumi += q6k_at(&x[b], i) * y[b].qs[i];
            isum += x[b].scales[g] * sumi;
        }
        acc += (y[b].d * h2f(x[b].d)) * (float)isum;
    }
    return acc;
}

float tnd_ref_vec_dot_q8_K_q8_K(int64_t n, const void *vx, const void *vy) {
    const block_q8_K *x = (const block_q8_K *)vx;
    const block_q8_K *y = (const block_q8_K *)vy;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / QK; b++) {
        int32_t sumi = 0;
        for (int i = 0; i < QK; i++) sumi += x[b].qs[i] * y[b].qs[i];
        acc += (x[b].d * y[b].d) * (float)sumi;
    }
    return acc;
}
