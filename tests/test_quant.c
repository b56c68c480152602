/* Block formats: traits table, half/bfloat16 conversion (exhaustive and
 * against a double-precision reference), quantize -> dequantize error bounds
 * per format, and every vec_dot against the dequantize-then-f32 reference on
 * odd lengths, with tolerances derived below. The bit-exact comparison with
 * an independent decoder is tests/test_quant_oracle.py. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "quant/quant.h"
#include "util.h"

/* ---- deterministic random numbers ------------------------------------------ */

static float rng_gauss(void) {
    double u = tc_unit(tc_splitmix()), v = tc_unit(tc_splitmix());
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

/* Rows to quantize: gaussian blocks at scales over many octaves, then edge
 * blocks (zero, constant, one spike, all positive, all negative, ramps). */
static void fill_inputs(float *x, int64_t n, int64_t bs) {
    for (int64_t b = 0; b < n / bs; b++) {
        float *xb = x + b * bs;
        float scale = (float)ldexp(1.0, (int)(tc_splitmix() % 24) - 16);
        int kind = (int)(b % 11);
        for (int64_t i = 0; i < bs; i++) {
            float g = rng_gauss() * scale;
            switch (kind) {
            case 0: xb[i] = 0.0f; break;
            case 1: xb[i] = 0.75f * scale; break;
            case 2: xb[i] = i == bs / 3 ? -3.0f * scale : 0.0f; break;
            case 3: xb[i] = fabsf(g) + scale; break;
            case 4: xb[i] = -fabsf(g) - 2.0f * scale; break;
            case 5: xb[i] = ((float)i - (float)bs / 2) * scale / (float)bs; break;
            default: xb[i] = g; break;
            }
        }
    }
}

/* ---- traits ------------------------------------------------------------------ */

static void test_traits(void) {
    static const struct { int id; const char *name; int64_t bs; size_t ts; } known[] = {
        {TND_TYPE_F32, "F32", 1, 4}, {TND_TYPE_F16, "F16", 1, 2}, {TND_TYPE_BF16, "BF16", 1, 2},
        {TND_TYPE_Q4_0, "Q4_0", 32, sizeof(block_q4_0)}, {TND_TYPE_Q4_1, "Q4_1", 32, sizeof(block_q4_1)},
        {TND_TYPE_Q5_0, "Q5_0", 32, sizeof(block_q5_0)}, {TND_TYPE_Q5_1, "Q5_1", 32, sizeof(block_q5_1)},
        {TND_TYPE_Q8_0, "Q8_0", 32, sizeof(block_q8_0)}, {TND_TYPE_Q8_1, "Q8_1", 32, sizeof(block_q8_1)},
        {TND_TYPE_Q2_K, "Q2_K", 256, sizeof(block_q2_K)}, {TND_TYPE_Q3_K, "Q3_K", 256, sizeof(block_q3_K)},
        {TND_TYPE_Q4_K, "Q4_K", 256, sizeof(block_q4_K)}, {TND_TYPE_Q5_K, "Q5_K", 256, sizeof(block_q5_K)},
        {TND_TYPE_Q6_K, "Q6_K", 256, sizeof(block_q6_K)}, {TND_TYPE_Q8_K, "Q8_K", 256, sizeof(block_q8_K)},
        {TND_TYPE_MXFP4, "MXFP4", 32, sizeof(block_mxfp4)},
        /* sized only (GGML format facts) */
        {TND_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66}, {TND_TYPE_IQ2_XS, "IQ2_XS", 256, 74},
        {TND_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98}, {TND_TYPE_IQ1_S, "IQ1_S", 256, 50},
        {TND_TYPE_IQ4_NL, "IQ4_NL", 32, 18}, {TND_TYPE_IQ3_S, "IQ3_S", 256, 110},
        {TND_TYPE_IQ2_S, "IQ2_S", 256, 82}, {TND_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
        {TND_TYPE_I8, "I8", 1, 1}, {TND_TYPE_I16, "I16", 1, 2}, {TND_TYPE_I32, "I32", 1, 4},
        {TND_TYPE_I64, "I64", 1, 8}, {TND_TYPE_F64, "F64", 1, 8}, {TND_TYPE_IQ1_M, "IQ1_M", 256, 56},
        {TND_TYPE_TQ1_0, "TQ1_0", 256, 54}, {TND_TYPE_TQ2_0, "TQ2_0", 256, 66},
    };
    int n_known = 0;
    for (size_t i = 0; i < TND_ARRAY_LEN(known); i++) {
        const tnd_type_traits *t = tnd_type_traits_get(known[i].id);
        CHECK(t != NULL, "type %d", known[i].id);
        if (!t) continue;
        CHECK(!strcmp(t->name, known[i].name) && !strcmp(tnd_type_name(known[i].id), known[i].name), "%s", known[i].name);
        CHECK(t->block_size == known[i].bs && t->type_size == known[i].ts, "%s sizes %lld %zu", t->name,
              (long long)t->block_size, t->type_size);
        CHECK(tnd_row_size((tnd_type)known[i].id, 3 * 256) == 3 * 256 / known[i].bs * known[i].ts, "%s row", t->name);
        if (known[i].bs > 1) CHECK(tnd_row_size((tnd_type)known[i].id, 256 + 1) == 0, "%s partial row", t->name);
        if (t->supported) {
            const tnd_type_traits *vt = tnd_type_traits_get(t->vec_dot_type);
            CHECK(t->to_float && t->from_float && t->vec_dot && vt && vt->supported, "%s functions", t->name);
            CHECK(vt && vt->block_size == t->block_size, "%s activation blocks", t->name);
        } else {
            CHECK(!t->to_float && !t->vec_dot, "%s unsupported has functions", t->name);
        }
        n_known++;
    }
    int n_listed = 0;
    for (int id = -3; id < TND_TYPE_COUNT + 3; id++) n_listed += tnd_type_traits_get(id) != NULL;
    CHECK(n_listed == n_known, "table lists %d ids, expected %d", n_listed, n_known);
    CHECK(!strcmp(tnd_type_name(4), "?") && !strcmp(tnd_type_name(-1), "?") && !strcmp(tnd_type_name(40), "?"), "unknown");
    const int supported[] = {TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1, TND_TYPE_Q5_0,
                             TND_TYPE_Q5_1, TND_TYPE_Q8_0, TND_TYPE_Q8_1, TND_TYPE_Q2_K, TND_TYPE_Q3_K, TND_TYPE_Q4_K,
                             TND_TYPE_Q5_K, TND_TYPE_Q6_K, TND_TYPE_Q8_K, TND_TYPE_MXFP4};
    for (size_t i = 0; i < TND_ARRAY_LEN(supported); i++)
        CHECK(tnd_type_traits_get(supported[i])->supported, "%s not supported", tnd_type_name(supported[i]));
}

/* ---- fp16 / bf16 ----------------------------------------------------------------- */

/* Value of a half from its fields, in double (independent of quant.h). */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

/* Nearest half to f by search over the ordered finite halves, ties to even;
 * magnitudes >= 65520 (max half + half an ulp) become infinity. */
static uint16_t half_reference(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f)) return 0x7e00;
    if (a >= 65520.0) return sign | 0x7c00;
    unsigned lo = 0, hi = 0x7bff; /* largest h with value <= a */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
    }
    double below = half_value((uint16_t)lo);
    double above = lo == 0x7bff ? 65536.0 : half_value((uint16_t)(lo + 1));
    unsigned r;
    if (a - below < above - a) r = lo;
    else if (a - below > above - a) r = lo + 1;
    else r = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | r);
}

static void test_fp16(void) {
    /* Every half decodes to its exact value and re-encodes to itself. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tnd_fp16_to_fp32((uint16_t)h);
        double v = half_value((uint16_t)h);
        if (isnan(v)) {
            uint16_t back = tnd_fp32_to_fp16(f);
            CHECK(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (back & 0x8000) == (h & 0x8000),
                  "nan %04x", h);
        } else {
            CHECK((double)f == v && (signbit(f) != 0) == (int)(h >> 15), "decode %04x", h);
            CHECK(tnd_fp32_to_fp16(f) == h, "round trip %04x -> %04x", h, tnd_fp32_to_fp16(f));
        }
    }
    /* Ties between adjacent halves, and one float ulp either side of them. */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double mid = (half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2;
        float m = (float)mid; /* exact: needs 12 significant bits */
        CHECK((double)m == mid, "tie not exact %04x", h);
        float cases[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int c = 0; c < 3; c++) {
            for (int s = 0; s < 2; s++) {
                float f = s ? -cases[c] : cases[c];
                CHECK(tnd_fp32_to_fp16(f) == half_reference(f), "round %a: %04x vs %04x", f,
                      tnd_fp32_to_fp16(f), half_reference(f));
            }
        }
    }
    /* Overflow, underflow and random floats over the half range and beyond. */
    const float special[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, FLT_MAX, INFINITY,
                             0x1p-24f, 0x1p-25f, nextafterf(0x1p-25f, 1.0f), 0x1.8p-25f, 0x1p-26f,
                             0x1p-14f, nextafterf(0x1p-14f, 0.0f), FLT_MIN, 0x1p-149f, 0.0f};
    for (size_t i = 0; i < TND_ARRAY_LEN(special); i++)
        for (int s = 0; s < 2; s++) {
            float f = s ? -special[i] : special[i];
            CHECK(tnd_fp32_to_fp16(f) == half_reference(f), "special %a: %04x vs %04x", f,
                  tnd_fp32_to_fp16(f), half_reference(f));
        }
    CHECK((tnd_fp32_to_fp16(NAN) & 0x7c00) == 0x7c00 && (tnd_fp32_to_fp16(NAN) & 0x3ff), "nan");
    for (int i = 0; i < 300000; i++) {
        uint32_t bits = (uint32_t)tc_splitmix();
        uint32_t e = 96 + (uint32_t)(tc_splitmix() % 50); /* 2^-31 .. 2^18 */
        bits = (bits & 0x807fffffu) | (e << 23);
        float f = tnd_fp32_from_bits(bits);
        CHECK(tnd_fp32_to_fp16(f) == half_reference(f), "random %a: %04x vs %04x", f, tnd_fp32_to_fp16(f),
              half_reference(f));
    }
}

/* Nearest bfloat16 by comparing the two candidates in double, ties to even. */
static uint16_t bf16_reference(float f) {
    uint32_t x = tnd_fp32_to_bits(f);
    uint16_t lo = (uint16_t)(x >> 16);
    if ((x & 0xffff) == 0) return lo;
    double a = fabs((double)f), vlo = fabs((double)tnd_fp32_from_bits((uint32_t)lo << 16));
    double vhi = (lo & 0x7fff) == 0x7f7f ? ldexp(1.0, 128) : fabs((double)tnd_fp32_from_bits((uint32_t)(lo + 1) << 16));
    if (a - vlo < vhi - a) return lo;
    if (a - vlo > vhi - a) return (uint16_t)(lo + 1);
    return (lo & 1) ? (uint16_t)(lo + 1) : lo;
}

static void test_bf16(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tnd_bf16_to_fp32((uint16_t)h);
        CHECK(tnd_fp32_to_bits(f) == h << 16, "bf16 decode %04x", h);
        if (!isnan(f)) CHECK(tnd_fp32_to_bf16(f) == h, "bf16 round trip %04x", h);
        else CHECK(isnan(tnd_bf16_to_fp32(tnd_fp32_to_bf16(f))), "bf16 nan %04x", h);
    }
    for (int i = 0; i < 300000; i++) {
        uint32_t bits = (uint32_t)tc_splitmix();
        if (i % 3 == 0) bits = (bits & 0xffff0000u) | 0x8000u; /* exact tie */
        if (i % 3 == 1) bits = (bits & 0xffff0000u) | (0x8000u + (i & 2 ? 1u : 0xffffffffu)); /* tie +- 1 */
        float f = tnd_fp32_from_bits(bits);
        if (isnan(f)) {
            CHECK(isnan(tnd_bf16_to_fp32(tnd_fp32_to_bf16(f))), "bf16 nan %08x", bits);
            continue;
        }
        CHECK(tnd_fp32_to_bf16(f) == bf16_reference(f), "bf16 %08x: %04x vs %04x", bits, tnd_fp32_to_bf16(f),
              bf16_reference(f));
    }
}

/* ---- quantize -> dequantize error bounds -------------------------------------------- */

#define H2F tnd_fp16_to_fp32
static const double EH = 0x1p-11; /* relative rounding of a half */

static void group_range(const float *x, int n, double *mn, double *mx) {
    *mn = *mx = x[0];
    for (int i = 1; i < n; i++) {
        *mn = fmin(*mn, x[i]);
        *mx = fmax(*mx, x[i]);
    }
}
static double absmax(const float *x, int n) {
    double a = 0;
    for (int i = 0; i < n; i++) a = fmax(a, fabs(x[i]));
    return a;
}

/* Largest rounding error of storing v as a half: relative 2^-11, or 2^-25
 * absolute where v is subnormal as a half. */
static double half_err(double v) { return fabs(v) * EH + 0x1p-25; }

/* Legacy formats. Steps follow from the block alone: Q4_0 d = amax/8 (the
 * extreme maps to -8, so the far side's extreme can sit a whole step from
 * the last level 7; elsewhere within half a step), Q4_1 (max-min)/15, Q5
 * likewise with 16 / 31, Q8 amax/127 (half a step). Storing d as a half adds
 * qmax * half_err(d), storing m adds half_err(m). */
static void check_legacy(tnd_type t, const float *x, const float *y, const void *blocks, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32, *yb = y + b * 32;
        double mn, mx, am = absmax(xb, 32);
        group_range(xb, 32, &mn, &mx);
        for (int i = 0; i < 32; i++) {
            double err = fabs((double)xb[i] - yb[i]), ax = fabs(xb[i]), bound;
            switch (t) {
            case TND_TYPE_Q4_0: bound = (ax < 7 * am / 8 ? 0.5 : 1.0) * am / 8 + 8 * half_err(am / 8); break;
            case TND_TYPE_Q5_0: bound = (ax < 15 * am / 16 ? 0.5 : 1.0) * am / 16 + 16 * half_err(am / 16); break;
            case TND_TYPE_Q4_1: bound = 0.5 * (mx - mn) / 15 + 15 * half_err((mx - mn) / 15) + half_err(mn); break;
            case TND_TYPE_Q5_1: bound = 0.5 * (mx - mn) / 31 + 31 * half_err((mx - mn) / 31) + half_err(mn); break;
            default: bound = 0.5 * am / 127 + 127 * half_err(am / 127); break; /* Q8_0, Q8_1 */
            }
            CHECK(err <= bound * (1 + 1e-6) + 1e-30, "%s block %lld [%d]: x %g y %g bound %g", tnd_type_name(t),
                  (long long)b, i, xb[i], yb[i], bound);
        }
        if (t == TND_TYPE_Q8_1) {
            const block_q8_1 *q = (const block_q8_1 *)blocks + b;
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += q->qs[i];
            double ds = am / 127 * sum;
            CHECK(fabs(H2F(q->s) - ds) <= half_err(ds) * 1.01, "Q8_1 s %g vs %g", H2F(q->s), ds);
        }
    }
}

/* K-quants: our quantizer covers each group's range with the smallest
 * representable step, so every element is within half its group's step, and
 * that step is at most (range + dmin)/nq + d (min/max formats; dmin pays for
 * the ceil-rounded min) or s + d (symmetric; s = the group's needed scale).
 * d itself is at most the largest needed step / scale levels, plus one half
 * ulp (relative 2^-10, or 2^-24 where subnormal). */
static void check_kquant(tnd_type t, const float *x, const float *y, const void *blk, int64_t nb) {
    int gs = t == TND_TYPE_Q4_K || t == TND_TYPE_Q5_K ? 32 : 16;
    int nq = t == TND_TYPE_Q2_K ? 3 : t == TND_TYPE_Q4_K ? 15 : t == TND_TYPE_Q5_K ? 31 : t == TND_TYPE_Q3_K ? 3 : 31;
    int smax = t == TND_TYPE_Q2_K ? 15 : t == TND_TYPE_Q3_K ? 32 : t == TND_TYPE_Q6_K ? 128 : 63;
    bool asym = t == TND_TYPE_Q2_K || t == TND_TYPE_Q4_K || t == TND_TYPE_Q5_K;
    size_t ts = tnd_type_traits_get(t)->type_size;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *bp = (const uint8_t *)blk + b * ts;
        double d, dmin = 0;
        if (t == TND_TYPE_Q2_K) { d = H2F(((const block_q2_K *)bp)->d); dmin = H2F(((const block_q2_K *)bp)->dmin); }
        else if (t == TND_TYPE_Q3_K) d = H2F(((const block_q3_K *)bp)->d);
        else if (t == TND_TYPE_Q4_K) { d = H2F(((const block_q4_K *)bp)->d); dmin = H2F(((const block_q4_K *)bp)->dmin); }
        else if (t == TND_TYPE_Q5_K) { d = H2F(((const block_q5_K *)bp)->d); dmin = H2F(((const block_q5_K *)bp)->dmin); }
        else d = H2F(((const block_q6_K *)bp)->d);
        double need_max = 0, m_max = 0;
        for (int g = 0; g < 256 / gs; g++) {
            const float *xg = x + b * 256 + g * gs, *yg = y + b * 256 + g * gs;
            double mn, mx, step;
            group_range(xg, gs, &mn, &mx);
            if (asym) {
                step = (mx - fmin(mn, 0) + dmin) / nq + d;
                need_max = fmax(need_max, (mx - fmin(mn, 0) + dmin) / nq);
                m_max = fmax(m_max, -fmin(mn, 0));
            } else {
                double s = fmax(fmax(mx, 0) / (nq + 1), fmax(-mn, 0) / nq);
                step = s + d;
                need_max = fmax(need_max, s);
            }
            for (int i = 0; i < gs; i++) {
                double err = fabs((double)xg[i] - yg[i]);
                CHECK(err <= 0.5 * step * (1 + 1e-5) + 1e-30, "%s block %lld group %d [%d]: x %g y %g step %g",
                      tnd_type_name(t), (long long)b, g, i, xg[i], yg[i], step);
            }
        }
        CHECK(d <= need_max / smax * (1 + 2 * EH) + 0x1p-24, "%s d %g too large (need %g)", tnd_type_name(t), d,
              need_max / smax);
        if (asym) CHECK(dmin <= m_max / smax * (1 + 2 * EH) + 0x1p-24, "%s dmin %g", tnd_type_name(t), dmin);
    }
}

/* Q8_K: f32 d = amax/127, so within half a step; bsums are the group sums. */
static void check_q8_K(const float *x, const float *y, const void *blk, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const block_q8_K *q = (const block_q8_K *)blk + b;
        double am = absmax(x + b * 256, 256);
        for (int i = 0; i < 256; i++)
            CHECK(fabs((double)x[b * 256 + i] - y[b * 256 + i]) <= am / 127 * 0.5 * (1 + 1e-6) + 1e-30, "Q8_K [%d]", i);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += q->qs[16 * g + i];
            CHECK(q->bsums[g] == s, "Q8_K bsums[%d] %d vs %d", g, q->bsums[g], s);
        }
    }
}

/* MXFP4: scale 2^(floor(log2 amax) - 2), so amax/scale is in [4, 8). E2M1
 * levels are 0.5 apart below 2, 1 apart below 4, 2 apart up to 6: the
 * nearest level is within half that gap; beyond 6 values clamp to 6. */
static void check_mxfp4(const float *x, const float *y, const void *blk, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const block_mxfp4 *q = (const block_mxfp4 *)blk + b;
        double am = absmax(x + b * 32, 32);
        double s = ldexp(1.0, q->e - 127);
        if (am > 0) CHECK(am / s >= 4 && am / s < 8, "MXFP4 e %d for amax %g", q->e, am);
        for (int i = 0; i < 32; i++) {
            double a = fabs((double)x[b * 32 + i]) / s, err = fabs((double)x[b * 32 + i] - y[b * 32 + i]) / s;
            double bound = a <= 2 ? 0.25 : a <= 4 ? 0.5 : a <= 6 ? 1.0 : a - 6;
            CHECK(err <= bound * (1 + 1e-6), "MXFP4 block %lld [%d] x %g y %g", (long long)b, i, x[b * 32 + i],
                  y[b * 32 + i]);
        }
    }
}

static void test_roundtrip(void) {
    const int types[] = {TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1, TND_TYPE_Q5_0,
                         TND_TYPE_Q5_1, TND_TYPE_Q8_0, TND_TYPE_Q8_1, TND_TYPE_Q2_K, TND_TYPE_Q3_K, TND_TYPE_Q4_K,
                         TND_TYPE_Q5_K, TND_TYPE_Q6_K, TND_TYPE_Q8_K, TND_TYPE_MXFP4};
    const int64_t n = 256 * 44;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *blk = malloc(n * 4);
    for (size_t ti = 0; ti < TND_ARRAY_LEN(types); ti++) {
        tnd_type t = (tnd_type)types[ti];
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        fill_inputs(x, n, tr->block_size > 1 ? tr->block_size : 32);
        tr->from_float(x, blk, n);
        tr->to_float(blk, y, n);
        int64_t nb = n / tr->block_size;
        switch (t) {
        case TND_TYPE_F32:
            CHECK(!memcmp(x, y, n * sizeof(float)), "F32 copy");
            break;
        case TND_TYPE_F16:
        case TND_TYPE_BF16:
            for (int64_t i = 0; i < n; i++) {
                float want = t == TND_TYPE_F16 ? tnd_fp16_to_fp32(tnd_fp32_to_fp16(x[i]))
                                               : tnd_bf16_to_fp32(tnd_fp32_to_bf16(x[i]));
                CHECK(y[i] == want, "%s [%lld]", tr->name, (long long)i);
            }
            break;
        case TND_TYPE_Q2_K: case TND_TYPE_Q3_K: case TND_TYPE_Q4_K: case TND_TYPE_Q5_K: case TND_TYPE_Q6_K:
            check_kquant(t, x, y, blk, nb);
            break;
        case TND_TYPE_Q8_K: check_q8_K(x, y, blk, nb); break;
        case TND_TYPE_MXFP4: check_mxfp4(x, y, blk, nb); break;
        default: check_legacy(t, x, y, blk, nb); break;
        }
        /* Relative RMS error on the gaussian blocks, for the log. */
        double se = 0, sx = 0;
        for (int64_t i = 0; i < n; i++) {
            se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            sx += (double)x[i] * x[i];
        }
        printf("roundtrip %-5s relative rms error %.4f\n", tr->name, sqrt(se / sx));
    }
    free(x);
    free(y);
    free(blk);
}

/* ---- vec_dot --------------------------------------------------------------------------
 *
 * vec_dot(w, quant(x)) against tnd_ref_dot_f32(w, x) = sum w_i x_i (double).
 * The difference is sum w_i (x_i - a_i), a_i the dequantized activations,
 * plus the rounding of the integer path's float arithmetic:
 *   activations: q8_0/q8_1 (half d = amax/127): |x_i - a_i| <= d/2 + 127 half_err(d)
 *                q8_K (f32 d):                  |x_i - a_i| <= d/2 (1 + 2^-20)
 *   so |err_act| <= sum_i |w_i| * e_block(i)                       (tol_act)
 *   Q4_1/Q5_1 use q8_1.s = half(d sum q) for the min term instead of
 *   sum d_h q: adds |m| * 2^-10 * sum |a_i| per block (1% slack).
 *   float arithmetic: per block a few roundings (2^-24 each) of terms of
 *   size <= sum (|w_i| + 2 |min terms|) |a_i| <= sum (|w_i| + 3 max|w|) |a_i|,
 *   then an f32 sequential sum of nb terms: (nb + 4) 2^-23 * that.  (tol_fp)
 * A second, tight check compares vec_dot with sum w_i a_i in double using
 * tol_fp (+ the q8_1.s term) only: the integer path must agree with the
 * dequantized weights and activations up to float rounding. */
static void test_vec_dot(void) {
    const int types[] = {TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_BF16, TND_TYPE_Q4_0, TND_TYPE_Q4_1, TND_TYPE_Q5_0,
                         TND_TYPE_Q5_1, TND_TYPE_Q8_0, TND_TYPE_Q8_1, TND_TYPE_Q2_K, TND_TYPE_Q3_K, TND_TYPE_Q4_K,
                         TND_TYPE_Q5_K, TND_TYPE_Q6_K, TND_TYPE_Q8_K, TND_TYPE_MXFP4};
    const int nblocks[] = {1, 3, 7, 13};
    for (size_t ti = 0; ti < TND_ARRAY_LEN(types); ti++) {
        tnd_type t = (tnd_type)types[ti];
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        const tnd_type_traits *at = tnd_type_traits_get(tr->vec_dot_type);
        double worst = 0, worst_tight = 0;
        for (size_t ni = 0; ni < TND_ARRAY_LEN(nblocks); ni++) {
            for (int rep = 0; rep < 4; rep++) {
                int64_t bs = tr->block_size > 1 ? tr->block_size : 33; /* F32/F16/BF16: odd lengths */
                int64_t n = nblocks[ni] * bs, nb = nblocks[ni];
                float *wf = malloc(n * sizeof(float)), *wd = malloc(n * sizeof(float));
                float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
                void *w = malloc(tnd_row_size(t, n)), *q = malloc(tnd_row_size(tr->vec_dot_type, n));
                float ws = (float)ldexp(1.0, (int)(tc_splitmix() % 8) - 4), xs = (float)ldexp(1.0, (int)(tc_splitmix() % 8) - 4);
                for (int64_t i = 0; i < n; i++) {
                    wf[i] = rng_gauss() * ws + (rep == 3 ? ws : 0.0f); /* rep 3: offset weights */
                    x[i] = rng_gauss() * xs;
                }
                tr->from_float(wf, w, n);
                tr->to_float(w, wd, n);
                at->from_float(x, q, n);
                at->to_float(q, a, n);
                double got = tr->vec_dot(n, w, q);
                double ref = tnd_ref_dot_f32(t, n, w, x);
                double exact_a = 0, tol_act = 0, tol_fp = 0, tol_s = 0;
                int64_t abs_ = tr->block_size > 1 ? bs : n; /* activation block */
                for (int64_t b0 = 0; b0 < n; b0 += abs_) {
                    double am = absmax(x + b0, (int)abs_), wmax = absmax(wd + b0, (int)abs_), sa = 0;
                    double e_act = 0;
                    if (tr->vec_dot_type == TND_TYPE_Q8_0 || tr->vec_dot_type == TND_TYPE_Q8_1)
                        e_act = 0.5 * am / 127 + 127 * half_err(am / 127);
                    else if (tr->vec_dot_type == TND_TYPE_Q8_K)
                        e_act = am / 127 * 0.5 * (1 + 0x1p-20);
                    for (int64_t i = b0; i < b0 + abs_; i++) {
                        exact_a += (double)wd[i] * a[i];
                        tol_act += fabs(wd[i]) * e_act;
                        tol_fp += (fabs(wd[i]) + 3 * wmax) * fabs(a[i]);
                        sa += fabs(a[i]);
                    }
                    if (t == TND_TYPE_Q4_1 || t == TND_TYPE_Q5_1) {
                        uint16_t m = t == TND_TYPE_Q4_1 ? ((const block_q4_1 *)w)[b0 / 32].m : ((const block_q5_1 *)w)[b0 / 32].m;
                        tol_s += fabs(H2F(m)) * 0x1p-10 * 1.01 * sa;
                    }
                }
                tol_fp *= (double)(nb + 4) * 0x1p-23;
                if (tr->vec_dot_type == TND_TYPE_F32) tol_fp = 0x1p-24 * fabs(ref) + 1e-30; /* double sum, one rounding */
                double tol = tol_act + tol_fp + tol_s, tight = tol_fp + tol_s;
                CHECK(fabs(got - ref) <= tol, "%s n=%lld: vec_dot %.9g ref %.9g tol %.3g", tr->name, (long long)n,
                      got, ref, tol);
                CHECK(fabs(got - exact_a) <= tight, "%s n=%lld: vec_dot %.9g vs dequant dot %.9g tol %.3g",
                      tr->name, (long long)n, got, exact_a, tight);
                worst = fmax(worst, fabs(got - ref) / tol);
                worst_tight = fmax(worst_tight, fabs(got - exact_a) / tight);
                free(wf); free(wd); free(x); free(a); free(w); free(q);
            }
        }
        printf("vec_dot   %-5s worst err/tol %.3f, vs dequantized activations %.3f\n", tr->name, worst, worst_tight);
    }
}

int main(void) {
    tc_rng = 0x9e3779b97f4a7c15ull;
    test_traits();
    test_fp16();
    test_bf16();
    test_roundtrip();
    test_vec_dot();
    return tc_summary();
}
