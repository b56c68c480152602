/* The AMX prefill kernel body, included twice by matmul_amx.c:
 *   AMX_HW 1: tile operations are AMX instructions; functions carry TGT
 *             (amx-tile, amx-int8, avx512) and the epilogue uses AVX-512 FMA.
 *   AMX_HW 0: tile operations are emulated in C on a tile file on the stack
 *             (amx_emu), everything else is the same code.
 * SFX(name) gives each copy its own names; TGT / TGTI are its function
 * attributes. See matmul_amx.c for the design. */

#if AMX_HW
#define TL_PARAM
#define TL_ARG
#define TL_DECL
#define TL_CFG(c) _tile_loadconfig(c)
#define TL_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define TL_ZERO(t) _tile_zero(t)
#define TL_DP(c, a, b) _tile_dpbssd(c, a, b)
#define TL_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define TL_RELEASE() _tile_release()
/* acc += a * b (b a vector) / acc -= a * b (b a scalar), fused */
#define V_FMA(acc, a, b) ((acc) = (amx_v16f)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(acc)))
#define V_FNMA_S(acc, a, b) ((acc) = (amx_v16f)_mm512_fnmadd_ps((__m512)(a), _mm512_set1_ps(b), (__m512)(acc)))
#define V_FMA_S(acc, a, b) ((acc) = (amx_v16f)_mm512_fmadd_ps((__m512)(a), _mm512_set1_ps(b), (__m512)(acc)))
#define H2F(h) _cvtsh_ss(h) /* exact, like tnd_fp16_to_fp32 */
#else
#define TL_PARAM amx_emu *E,
#define TL_ARG E,
#define TL_DECL amx_emu emu_tiles, *E = &emu_tiles;
#define TL_CFG(c) emu_cfg(E, c)
#define TL_LOAD(t, p, s) emu_load(E, t, p, s)
#define TL_ZERO(t) emu_zero(E, t)
#define TL_DP(c, a, b) emu_dpbssd(E, c, a, b)
#define TL_STORE(t, p, s) emu_store(E, t, p, s)
#define TL_RELEASE() ((void)E)
#define V_FMA(acc, a, b) ((acc) = (acc) + (a) * (b))
#define V_FNMA_S(acc, a, b) ((acc) = (acc) - (a) * (b))
#define V_FMA_S(acc, a, b) ((acc) = (acc) + (a) * (b))
#define H2F(h) tnd_fp16_to_fp32(h)
#endif

/* ---- weight panels -------------------------------------------------------- */

/* r[i][j] <- r[j][i] for 16 x 16 dwords: four rounds that swap the
 * off-diagonal blocks of size 8, 4, 2, 1 (64 two-source shuffles). */
TGTI void SFX(transpose16)(amx_v16i r[16]) {
#define AMX_STAGE(B, ...)                                                                       \
    for (int i = 0; i < 16; i++)                                                                \
        if (!(i & B)) {                                                                         \
            amx_v16i a = r[i], b = r[i + B];                                                    \
            r[i] = __builtin_shufflevector(a, b, AMX_LO##B);                                    \
            r[i + B] = __builtin_shufflevector(a, b, AMX_HI##B);                                \
        }
    AMX_STAGE(8)
    AMX_STAGE(4)
    AMX_STAGE(2)
    AMX_STAGE(1)
#undef AMX_STAGE
}

/* Loads 16 rows of 64 bytes (src + n * stride), rows >= rows zero, and
 * transposes them: t[l] = dword l of every row. */
TGTI void SFX(load_t)(amx_v16i t[16], const char *src, size_t stride, int rows) {
    for (int n = 0; n < 16; n++) {
        if (n < rows) memcpy(&t[n], src + (size_t)n * stride, 64);
        else t[n] = (amx_v16i){0};
    }
    SFX(transpose16)(t);
}

/* Block formats: one weight row's k-range [0, K) to int8 e and its block
 * scales cs (stride 16 floats: one per panel column); Q4_1 also its block
 * mins in cm (same stride). */
TGTI void SFX(unpack_blk)(const int FMT, const void *vw, int64_t K, int8_t *e, float *cs, float *cm) {
    if (FMT == AF_Q4_1) {
        const block_q4_1 *w = vw;
        for (int64_t b = 0; b < K / 32; b++) {
            amx_v16u8 q, lo, hi;
            memcpy(&q, w[b].qs, 16);
            lo = q & 15, hi = q >> 4; /* 0..15: q itself, the min goes apart */
            memcpy(e + 32 * b, &lo, 16);
            memcpy(e + 32 * b + 16, &hi, 16);
            cs[16 * b] = H2F(w[b].d);
            cm[16 * b] = H2F(w[b].m);
        }
    } else if (FMT == AF_Q4_0) {
        const block_q4_0 *w = vw;
        for (int64_t b = 0; b < K / 32; b++) {
            amx_v16u8 q, lo, hi;
            memcpy(&q, w[b].qs, 16);
            lo = (q & 15) - 8, hi = (q >> 4) - 8; /* wraps to the int8 bit pattern */
            memcpy(e + 32 * b, &lo, 16);
            memcpy(e + 32 * b + 16, &hi, 16);
            cs[16 * b] = H2F(w[b].d);
        }
    } else {
        const block_q8_0 *w = vw;
        for (int64_t b = 0; b < K / 32; b++) {
            memcpy(e + 32 * b, w[b].qs, 32);
            cs[16 * b] = H2F(w[b].d);
        }
    }
}

/* Super formats, one B line of 4 elements x 16 rows: x holds the unsigned
 * quants (byte 4n + j: row n, element j), s16 each row's group scale twice
 * (16-bit lanes 2n, 2n + 1), off16 (OFF) likewise an offset. The products
 * x * s16 + off16 (16-bit, even and odd bytes apart) are split into a high
 * and a low line: v = 128 hi + lo, lo in [0, 127]; hi - bias. (Vectors go
 * by pointer: by value they would change the ABI of the emulated build.) */
TGTI void SFX(split_line)(const amx_v16i *x, const int16_t *s16, const int OFF, const int16_t *off16, int bias, uint8_t *hi,
                          uint8_t *lo) {
    amx_v32s16 s;
    memcpy(&s, s16, 64);
    amx_v32u16 xu = (amx_v32u16)*x;
    amx_v32s16 pe = (amx_v32s16)(xu & 0xFF) * s, po = (amx_v32s16)(xu >> 8) * s;
    if (OFF) {
        amx_v32s16 o;
        memcpy(&o, off16, 64);
        pe += o, po += o;
    }
    amx_v32s16 l = (pe & 127) | ((po & 127) << 8), h = (pe >> 7) | ((po >> 7) << 8);
    memcpy(lo, &l, 64);
    if (bias) {
        amx_v64u8 hb = (amx_v64u8)h - (uint8_t)bias;
        memcpy(hi, &hb, 64);
    } else memcpy(hi, &h, 64);
}

/* Super formats, one super-block of 16 rows (src: row 0's block, rows
 * w_row apart; rows >= rows zero) into 64 B lines of the high (qh) and low
 * (ql) planes, scales cs (d per row), Q4_K mins cm (dmin * m per group and
 * row). The packed quants are transposed first (2 or 3 16 x 16 dword
 * transposes instead of 8), then each B line is made from its transposed
 * packed line with the row scales as 16-bit lanes:
 *   Q4_K: packed dword D = 8j + p holds elements 64j + 4p.. in its low
 *     nibbles (line 16j + p, group 2j) and 64j + 32 + 4p.. in its high ones
 *     (line 16j + 8 + p, group 2j + 1); v = sc * q in [0, 945].
 *   Q6_K: line L (h = L / 32, c = L % 32 / 8, l = L % 8) takes the low (c
 *     < 2) or high nibbles of ql dword 16h + 8(c & 1) + l and bits 2c, 2c+1
 *     of qh dword 8h + l; group L / 4; v = sc * (u - 32) + 4096 in [32,
 *     8192], hi biased by 32 so it is sc * q's high part. */
TGTI void SFX(panel_sup)(const int FMT, const char *src, size_t w_row, int rows, uint8_t *qh, uint8_t *ql,
                         float *cs, float *cm) {
    uint32_t s16[16][16], o16[16][16]; /* [group][row]: the scale (offset) in both 16-bit halves */
    for (int n = 0; n < 16; n++) {
        if (n >= rows) {
            cs[n] = 0.0f;
            for (int g = 0; g < 16; g++) s16[g][n] = 0, o16[g][n] = FMT == AF_Q4_K ? 0 : 4096u * 0x10001u;
            if (FMT == AF_Q4_K)
                for (int g = 0; g < 8; g++) cm[16 * g + n] = 0.0f;
            continue;
        }
        if (FMT == AF_Q4_K) {
            const block_q4_K *w = (const block_q4_K *)(src + (size_t)n * w_row);
            /* the 6-bit scales and mins as bytes (layout of the K-quants'
             * 12 scale bytes) */
            uint32_t u0, u1, u2;
            memcpy(&u0, w->scales, 4);
            memcpy(&u1, w->scales + 4, 4);
            memcpy(&u2, w->scales + 8, 4);
            uint32_t sw[2] = {u0 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4)};
            uint32_t mw[2] = {u1 & 0x3f3f3f3fu, ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4)};
            float dmin = H2F(w->dmin);
            for (int g = 0; g < 8; g++) {
                uint32_t a = (sw[g / 4] >> (8 * (g % 4))) & 0xff, m = (mw[g / 4] >> (8 * (g % 4))) & 0xff;
                s16[g][n] = a * 0x10001u;
                cm[16 * g + n] = dmin * (float)m;
            }
            cs[n] = H2F(w->d);
        } else {
            const block_q6_K *w = (const block_q6_K *)(src + (size_t)n * w_row);
            for (int g = 0; g < 16; g++) {
                uint32_t a = (uint16_t)w->scales[g], o = (uint16_t)(4096 - 32 * w->scales[g]);
                s16[g][n] = a * 0x10001u, o16[g][n] = o * 0x10001u;
            }
            cs[n] = H2F(w->d);
        }
    }
    const amx_v16i m0f = (amx_v16i){0} + 0x0F0F0F0F, m03 = (amx_v16i){0} + 0x03030303;
    if (FMT == AF_Q4_K) {
        amx_v16i t[2][16];
        for (int c = 0; c < 2; c++) SFX(load_t)(t[c], src + offsetof(block_q4_K, qs) + 64 * c, w_row, rows);
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) {
                amx_v16i v = t[j / 2][8 * (j % 2) + p], x0 = v & m0f, x1 = (v >> 4) & m0f;
                int L = 16 * j + p;
                SFX(split_line)(&x0, (const int16_t *)s16[2 * j], 0, NULL, 0, qh + 64 * L, ql + 64 * L);
                SFX(split_line)(&x1, (const int16_t *)s16[2 * j + 1], 0, NULL, 0, qh + 64 * (L + 8), ql + 64 * (L + 8));
            }
    } else {
        amx_v16i tl[2][16], th[16];
        for (int h = 0; h < 2; h++) SFX(load_t)(tl[h], src + offsetof(block_q6_K, ql) + 64 * h, w_row, rows);
        SFX(load_t)(th, src + offsetof(block_q6_K, qh), w_row, rows);
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 4; c++)
#pragma GCC unroll 8
                for (int l = 0; l < 8; l++) {
                    int L = 32 * h + 8 * c + l;
                    amx_v16i v = tl[h][8 * (c & 1) + l];
                    amx_v16i x = (c < 2 ? v & m0f : (v >> 4) & m0f) | (((th[8 * h + l] >> (2 * c)) & m03) << 4);
                    SFX(split_line)(&x, (const int16_t *)s16[L / 4], 1, (const int16_t *)o16[L / 4], 32, qh + 64 * L,
                                    ql + 64 * L);
                }
    }
}

/* Unpacks rows (<= 16) weight rows into a panel: the int8 values in tile-B
 * order (dword i/4 of row n at byte (i/4) * 64 + 4n, so 16 consecutive
 * 64-byte lines are one B tile of K = 64, 8 lines one of K = 32), missing
 * rows and the tail past K zero. q2: the low parts (super formats).
 * Block formats go through st (16 x 256 bytes, L1): 256 elements of each
 * row unpacked, then each 64-element column is one 16 x 16 dword transpose;
 * super formats go one super-block at a time through panel_sup. */
TGT static void SFX(panel)(const int FMT, const char *W, size_t w_row, int rows, int64_t K, uint8_t *q, uint8_t *q2,
                           float *cs, float *cm, int8_t *st) {
    if (FMT == AF_Q4_K || FMT == AF_Q6_K) {
        size_t bsz = FMT == AF_Q4_K ? sizeof(block_q4_K) : sizeof(block_q6_K);
        for (int64_t b = 0; b < K / TND_QK_K; b++)
            SFX(panel_sup)(FMT, W + (size_t)b * bsz, w_row, rows, q + 4096 * b, q2 + 4096 * b, cs + 16 * b,
                           FMT == AF_Q4_K ? cm + 16 * 8 * b : NULL);
        return;
    }
    size_t bsz = FMT == AF_Q4_0 ? sizeof(block_q4_0) : FMT == AF_Q4_1 ? sizeof(block_q4_1) : sizeof(block_q8_0);
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
        int64_t len = K - k0 < 256 ? K - k0 : 256, lp = (len + 63) & ~(int64_t)63;
        for (int n = 0; n < 16; n++) {
            int8_t *e = st + 256 * n;
            if (n < rows) {
                SFX(unpack_blk)(FMT, W + (size_t)n * w_row + (size_t)(k0 / 32) * bsz, len, e, cs + 16 * (k0 / 32) + n,
                                cm ? cm + 16 * (k0 / 32) + n : NULL);
                memset(e + len, 0, (size_t)(lp - len));
            } else {
                memset(e, 0, 256);
                for (int64_t b = k0 / 32; b < (k0 + len) / 32; b++) {
                    cs[16 * b + n] = 0.0f;
                    if (cm) cm[16 * b + n] = 0.0f;
                }
            }
        }
        for (int64_t c = 0; c < lp / 64; c++) {
            amx_v16i r[16];
            SFX(load_t)(r, (const char *)st + 64 * c, 256, 16);
            for (int l = 0; l < 16; l++) memcpy(q + 16 * k0 + 1024 * c + 64 * l, &r[l], 64);
        }
    }
}

/* ---- one 16 x 16 output tile ------------------------------------------------ */

/* Writes rows [mlo, mhi) and the first ncols columns of acc into y. Copies
 * each row out first, so acc's address is not taken and it can live in
 * registers through the K loop. */
TGTI void SFX(write_tile)(const amx_v16f *acc, float *y, int64_t ys, int mlo, int mhi, int ncols) {
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) {
        if (m < mlo || m >= mhi) continue;
        amx_v16f v = acc[m];
        if (ncols == 16) memcpy(y + m * ys, &v, sizeof v);
        else {
            float t[16];
            memcpy(t, &v, sizeof v);
            memcpy(y + m * ys, t, (size_t)ncols * sizeof(float));
        }
    }
}

/* Block formats (Q4_0, Q8_0, Q4_1): one tile product per 32-element block
 * (A: 16 tokens x 32 bytes straight from the Q8_0 / Q8_1 activations, x_row
 * apart; B: the panel's 8 lines), then acc += C * (d_w[n] * d_a[m]), and for
 * Q4_1 (M1) the min part m_w[n] * s_a[m] (cm, sa). Two blocks per
 * iteration on alternating tiles, so the second product runs while the
 * first one's epilogue does. da: the 16 tokens' activation scales, 16 per
 * block. */
TGT static void SFX(tile_blk)(TL_PARAM const int M1, int64_t nb, const char *xa, size_t xs, const uint8_t *q,
                              const float *cs, const float *cm, const float *da, const float *sa, int32_t *cb, float *y,
                              int64_t ys, int mlo, int mhi, int ncols) {
    /* activation block: Q8_0 34 bytes (qs at 2), Q8_1 36 (qs at 4) */
    const size_t ab = M1 ? sizeof(block_q8_1) : sizeof(block_q8_0), ao = M1 ? 4 : 2;
    amx_v16f acc[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = (amx_v16f){0};
    /* Software pipelined: the products of blocks b + 2, b + 3 run (on the
     * other pair of C tiles) while the epilogue does blocks b, b + 1, whose
     * C went to memory first; so neither the products' latency nor the
     * tile store's is waited for. cb: 4 C tiles, pair set p at 512 p. */
#define AMX_BLK_DP(C, A, B, bl)                                                                                  \
    do {                                                                                                         \
        TL_LOAD(A, xa + ab * (bl) + ao, xs);                                                                     \
        TL_LOAD(B, q + 512 * (bl), 64);                                                                          \
        TL_ZERO(C);                                                                                              \
        TL_DP(C, A, B);                                                                                          \
    } while (0)
    AMX_BLK_DP(T_C0, T_A0, T_B0, 0);
    if (nb > 1) AMX_BLK_DP(T_C1, T_A1, T_B1, 1);
    for (int64_t b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb, set = (int)(b / 2) & 1;
        int32_t *cp = cb + 512 * set;
        if (!set) {
            TL_STORE(T_C0, cp, 64);
            if (two) TL_STORE(T_C1, cp + 256, 64);
            if (b + 2 < nb) AMX_BLK_DP(T_C2, T_A0, T_B0, b + 2);
            if (b + 3 < nb) AMX_BLK_DP(T_C3, T_A1, T_B1, b + 3);
        } else {
            TL_STORE(T_C2, cp, 64);
            if (two) TL_STORE(T_C3, cp + 256, 64);
            if (b + 2 < nb) AMX_BLK_DP(T_C0, T_A0, T_B0, b + 2);
            if (b + 3 < nb) AMX_BLK_DP(T_C1, T_A1, T_B1, b + 3);
        }
        for (int k = 0; k < 1 + two; k++) {
            const int32_t *c = cp + 256 * k;
            amx_v16f s = *(const amx_v16f *)(cs + 16 * (b + k));
            const float *d = da + 16 * (b + k);
#pragma GCC unroll 16
            for (int m = 0; m < 16; m++)
                V_FMA(acc[m], __builtin_convertvector(*(const amx_v16i *)(c + 16 * m), amx_v16f), s * d[m]);
            if (M1) {
                amx_v16f mv = *(const amx_v16f *)(cm + 16 * (b + k));
                const float *ds = sa + 16 * (b + k);
#pragma GCC unroll 16
                for (int m = 0; m < 16; m++) V_FMA_S(acc[m], mv, ds[m]);
            }
        }
    }
#undef AMX_BLK_DP
    SFX(write_tile)(acc, y, ys, mlo, mhi, ncols);
}

/* Super formats (Q4_K, Q6_K): the weights are sc * q (the integer sub-block
 * scale times the quant) split as 128 * hi + lo, both int8; per super-block
 * C_hi += A.B_hi and C_lo += A.B_lo over four K = 64 steps, then
 * isum = 128 C_hi + C_lo is the reference's exact integer sum and
 * acc += isum * (d_w[n] * d_a[m]); Q4_K subtracts its min term per 32-group
 * (cm: dmin * m per column, dsa: d_a * (sum of the group's activations)
 * per token). */
TGT static void SFX(tile_sup)(TL_PARAM const int MIN, int64_t nsb, const char *xa, size_t xs, const uint8_t *qh,
                              const uint8_t *ql, const float *cs, const float *cm, const float *da, const float *dsa,
                              int32_t *cb, float *y, int64_t ys, int mlo, int mhi, int ncols) {
    amx_v16f acc[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = (amx_v16f){0};
    for (int64_t b = 0; b < nsb; b++) {
        TL_ZERO(T_C0);
        TL_ZERO(T_C1);
        for (int j = 0; j < 4; j += 2) {
            int64_t s = 4 * b + j;
            const char *a = xa + (size_t)b * sizeof(block_q8_K) + 4 + 64 * j;
            TL_LOAD(T_A0, a, xs);
            TL_LOAD(T_B0, qh + 1024 * s, 64);
            TL_LOAD(T_B1, ql + 1024 * s, 64);
            TL_DP(T_C0, T_A0, T_B0);
            TL_DP(T_C1, T_A0, T_B1);
            TL_LOAD(T_A1, a + 64, xs);
            TL_LOAD(T_B2, qh + 1024 * (s + 1), 64);
            TL_LOAD(T_B3, ql + 1024 * (s + 1), 64);
            TL_DP(T_C0, T_A1, T_B2);
            TL_DP(T_C1, T_A1, T_B3);
        }
        TL_STORE(T_C0, cb, 64);
        TL_STORE(T_C1, cb + 256, 64);
        amx_v16f s = *(const amx_v16f *)(cs + 16 * b);
        const float *d = da + 16 * b;
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            amx_v16i isum = *(const amx_v16i *)(cb + 16 * m) * 128 + *(const amx_v16i *)(cb + 256 + 16 * m);
            V_FMA(acc[m], __builtin_convertvector(isum, amx_v16f), s * d[m]);
        }
        if (MIN)
            for (int g = 0; g < 8; g++) {
                amx_v16f mv = *(const amx_v16f *)(cm + 16 * (8 * b + g));
                const float *ds = dsa + 16 * (8 * b + g);
#pragma GCC unroll 16
                for (int m = 0; m < 16; m++) V_FNMA_S(acc[m], mv, ds[m]);
            }
    }
    SFX(write_tile)(acc, y, ys, mlo, mhi, ncols);
}

/* ---- the kernel ------------------------------------------------------------- */

TGTI void SFX(gemm)(const int FMT, int64_t K, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row,
                    const tnd_act_aux *aux, int64_t nt, float *y, int64_t ys) {
    const int SUPER = FMT == AF_Q4_K || FMT == AF_Q6_K, MIN = FMT == AF_Q4_K, M1 = FMT == AF_Q4_1;
    int64_t nc = K / TND_CHUNK, ns = SUPER ? K / TND_QK_K : K / 32; /* ns: scale steps */
    /* panel: quants (K rounded up to 64, the transpose's width) x 16 */
    size_t sq = (size_t)((K + 63) & ~(int64_t)63) * 16, sf = (size_t)ns * 64;
    size_t pbytes = sq * (SUPER ? 2 : 1) + sf + (MIN ? 8 * sf : M1 ? sf : 0);
    int64_t np = (nr + 15) / 16;
    int64_t P = (int64_t)(AMX_PANEL_BYTES / pbytes);
    P = P < 1 ? 1 : P > AMX_PANELS_MAX ? AMX_PANELS_MAX : P;
    if (P > np) P = np;
    size_t ka = 16 * 256, tab = sf * (MIN ? 9 : M1 ? 2 : 1); /* ka: panel's staging */
    size_t pad = nt < 16 ? AMX_ALIGN64(16 * x_row) : 0;
    uint8_t *buf = tnd_cpu_tls_buf(1, (size_t)P * pbytes + ka + tab + 4096 + pad);
    if (!buf) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;
        return;
    }
    uint8_t *panels = buf;
    int8_t *st = (int8_t *)(buf + (size_t)P * pbytes);
    float *da = (float *)(buf + (size_t)P * pbytes + ka), *dsa = da + 16 * ns;
    int32_t *cb = (int32_t *)((uint8_t *)da + tab);
    const char *xb = xq;
    if (pad) {
        /* fewer tokens than a tile: a zero-padded copy, so tile loads stay
         * inside the buffer */
        char *xp = (char *)cb + 4096;
        memset(xp, 0, 16 * x_row);
        memcpy(xp, xq, (size_t)nt * x_row);
        xb = xp;
    }

    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    if (!SUPER) {
        /* K = 32 per product: A 16 x 32 bytes, B 8 lines; tiles 6, 7 a second pair of C */
        cfg.colsb[T_A0] = cfg.colsb[T_A1] = 32;
        cfg.rows[T_B0] = cfg.rows[T_B1] = 8;
    }
    TL_DECL
    TL_CFG(&cfg);

    for (int64_t p0 = 0; p0 < np; p0 += P) {
        int64_t pn = np - p0 < P ? np - p0 : P;
        for (int64_t p = 0; p < pn; p++) {
            uint8_t *pb = panels + (size_t)p * pbytes;
            int64_t r = 16 * (p0 + p);
            int rows = nr - r < 16 ? (int)(nr - r) : 16;
            float *pcs = (float *)(pb + sq * (SUPER ? 2 : 1));
            SFX(panel)(FMT, (const char *)W + (size_t)r * w_row, w_row, rows, K, pb, pb + sq, pcs,
                       MIN || M1 ? pcs + 16 * ns : NULL, st);
        }
        /* Token blocks of 16; a last partial one is shifted back to end at
         * nt (recomputing some tokens, writing only new ones). */
        for (int64_t done = 0; done < nt;) {
            int64_t t0 = done + 16 <= nt || nt < 16 ? done : nt - 16;
            int mlo = (int)(done - t0), mhi = nt - t0 < 16 ? (int)(nt - t0) : 16;
            for (int m = 0; m < 16; m++) {
                const tnd_act_aux *x = t0 + m < nt ? aux + (t0 + m) * nc : NULL;
                for (int64_t s = 0; s < ns; s++) {
                    da[16 * s + m] = x ? x[SUPER ? 16 * s : 2 * s].da : 0.0f;
                    /* Q8_1: the block's stored s is its first chunk's dsa */
                    if (M1) dsa[16 * s + m] = x ? x[2 * s].dsa : 0.0f;
                    if (MIN)
                        for (int g = 0; g < 8; g++)
                            dsa[16 * (8 * s + g) + m] = x ? x[16 * s + 2 * g].dsa + x[16 * s + 2 * g + 1].dsa : 0.0f;
                }
            }
            const char *xa = xb + (size_t)t0 * x_row;
            for (int64_t p = 0; p < pn; p++) {
                const uint8_t *pb = panels + (size_t)p * pbytes;
                int64_t r = 16 * (p0 + p);
                int ncols = nr - r < 16 ? (int)(nr - r) : 16;
                const float *pcs = (const float *)(pb + sq * (SUPER ? 2 : 1));
                float *yt = y + t0 * ys + r;
                if (SUPER)
                    SFX(tile_sup)(TL_ARG MIN, ns, xa, x_row, pb, pb + sq, pcs, MIN ? pcs + 16 * ns : NULL, da, dsa, cb, yt, ys,
                                  mlo, mhi, ncols);
                else SFX(tile_blk)(TL_ARG M1, ns, xa, x_row, pb, pcs, M1 ? pcs + 16 * ns : NULL, da, dsa, cb, yt, ys, mlo,
                                   mhi, ncols);
            }
            done = t0 + mhi;
        }
    }
    TL_RELEASE();
}

#define AMX_WRAP(FN, FMT)                                                                                     \
    TGT static void SFX(FN)(int64_t n_in, const void *W, size_t w_row, int64_t nr, const void *xq, size_t x_row, \
                            const tnd_act_aux *aux, int64_t nt, float *y, int64_t ys) {                       \
        SFX(gemm)(FMT, n_in, W, w_row, nr, xq, x_row, aux, nt, y, ys);                                       \
    }
AMX_WRAP(gemm_q4_0, AF_Q4_0)
AMX_WRAP(gemm_q8_0, AF_Q8_0)
AMX_WRAP(gemm_q4_1, AF_Q4_1)
AMX_WRAP(gemm_q4_K, AF_Q4_K)
AMX_WRAP(gemm_q6_K, AF_Q6_K)
#undef AMX_WRAP

#undef TL_PARAM
#undef TL_ARG
#undef TL_DECL
#undef TL_CFG
#undef TL_LOAD
#undef TL_ZERO
#undef TL_DP
#undef TL_STORE
#undef TL_RELEASE
#undef V_FMA
#undef V_FNMA_S
#undef V_FMA_S
#undef H2F
