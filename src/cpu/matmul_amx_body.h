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

/* One weight row to int8 (e; super formats: e = high part, e2 = low part of
 * sc * q, see matmul_amx.c) and its scales, written with a stride of 16
 * floats (one per panel column): cs per block (block formats) or per
 * super-block, cm (Q4_K) per 32-element group. */
TGTI void SFX(unpack_row)(const int FMT, const void *vw, int64_t K, int8_t *e, int8_t *e2, float *cs, float *cm) {
    if (FMT == AF_Q4_0) {
        const block_q4_0 *w = vw;
        for (int64_t b = 0; b < K / 32; b++) {
            for (int j = 0; j < 16; j++) {
                e[32 * b + j] = (int8_t)((w[b].qs[j] & 0xF) - 8);
                e[32 * b + 16 + j] = (int8_t)((w[b].qs[j] >> 4) - 8);
            }
            cs[16 * b] = tnd_fp16_to_fp32(w[b].d);
        }
    } else if (FMT == AF_Q8_0) {
        const block_q8_0 *w = vw;
        for (int64_t b = 0; b < K / 32; b++) {
            memcpy(e + 32 * b, w[b].qs, 32);
            cs[16 * b] = tnd_fp16_to_fp32(w[b].d);
        }
    } else if (FMT == AF_Q4_K) {
        const block_q4_K *w = vw;
        for (int64_t b = 0; b < K / TND_QK_K; b++) {
            uint8_t sc[8], mn[8];
            for (int g = 0; g < 8; g++) tnd_get_scale_min_k4(g, w[b].scales, &sc[g], &mn[g]);
            float dmin = tnd_fp16_to_fp32(w[b].dmin);
            cs[16 * b] = tnd_fp16_to_fp32(w[b].d);
            for (int g = 0; g < 8; g++) cm[16 * (8 * b + g)] = dmin * (float)mn[g];
            int8_t *h = e + TND_QK_K * b, *l = e2 + TND_QK_K * b;
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 32; i++) {
                    /* element 64j+i: low nibble (group 2j); 64j+32+i: high (2j+1) */
                    int v0 = sc[2 * j] * (w[b].qs[32 * j + i] & 0xF), v1 = sc[2 * j + 1] * (w[b].qs[32 * j + i] >> 4);
                    h[64 * j + i] = (int8_t)(v0 >> 7), l[64 * j + i] = (int8_t)(v0 & 127);
                    h[64 * j + 32 + i] = (int8_t)(v1 >> 7), l[64 * j + 32 + i] = (int8_t)(v1 & 127);
                }
        }
    } else { /* AF_Q6_K */
        const block_q6_K *w = vw;
        for (int64_t b = 0; b < K / TND_QK_K; b++) {
            cs[16 * b] = tnd_fp16_to_fp32(w[b].d);
            int8_t *h = e + TND_QK_K * b, *l = e2 + TND_QK_K * b;
            for (int half = 0; half < 2; half++)
                for (int c = 0; c < 4; c++) {
                    const uint8_t *ql = w[b].ql + 64 * half + 32 * (c & 1), *qh = w[b].qh + 32 * half;
                    int base = 128 * half + 32 * c;
                    for (int i = 0; i < 32; i++) {
                        int lo = c >= 2 ? ql[i] >> 4 : ql[i] & 0xF, hi = (qh[i] >> (2 * c)) & 3;
                        /* v = sc * q in [-4064, 4096]; v + 4096 >= 0 splits
                         * without relying on signed shifts */
                        int v = w[b].scales[(base + i) / 16] * ((lo | (hi << 4)) - 32) + 4096;
                        h[base + i] = (int8_t)(v / 128 - 32), l[base + i] = (int8_t)(v % 128);
                    }
                }
        }
    }
}

/* Unpacks rows (<= 16) weight rows into a panel: the int8 values in tile-B
 * order (dword i/4 of row n at byte (i/4) * 64 + 4n, so 16 consecutive
 * 64-byte lines are one B tile of K = 64, 8 lines one of K = 32), missing
 * rows and the tail past K zero. q2: the low parts (super formats).
 * Works in chunks of 256 elements: the 16 rows' chunk is unpacked into st
 * (and st2; 16 x 256 bytes each, so they stay in L1), then each 64-element
 * column of it is one 16 x 16 dword transpose. */
TGT static void SFX(panel)(const int FMT, const char *W, size_t w_row, int rows, int64_t K, uint8_t *q, uint8_t *q2,
                           float *cs, float *cm, int8_t *st, int8_t *st2) {
    const int SUPER = FMT == AF_Q4_K || FMT == AF_Q6_K, MIN = FMT == AF_Q4_K;
    const tnd_type_traits *tr = tnd_type_traits_get(FMT == AF_Q4_0   ? TND_TYPE_Q4_0
                                                    : FMT == AF_Q8_0 ? TND_TYPE_Q8_0
                                                    : FMT == AF_Q4_K ? TND_TYPE_Q4_K
                                                                     : TND_TYPE_Q6_K);
    int64_t bs = tr->block_size;
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
        int64_t len = K - k0 < 256 ? K - k0 : 256, lp = (len + 63) & ~(int64_t)63;
        int64_t sb = k0 / (SUPER ? TND_QK_K : 32); /* first scale step of the chunk */
        for (int n = 0; n < 16; n++) {
            int8_t *e = st + 256 * n, *e2 = st2 + 256 * n;
            if (n < rows) {
                SFX(unpack_row)(FMT, W + (size_t)n * w_row + (size_t)(k0 / bs) * tr->type_size, len, e, e2,
                                cs + 16 * sb + n, MIN ? cm + 16 * 8 * sb + n : NULL);
                memset(e + len, 0, (size_t)(lp - len));
            } else {
                memset(e, 0, 256);
                if (SUPER) memset(e2, 0, 256);
                for (int64_t s = sb; s < sb + (SUPER ? 1 : len / 32); s++) {
                    cs[16 * s + n] = 0.0f;
                    if (MIN)
                        for (int g = 0; g < 8; g++) cm[16 * (8 * s + g) + n] = 0.0f;
                }
            }
        }
        for (int plane = 0; plane < 1 + SUPER; plane++) {
            const int8_t *src = plane ? st2 : st;
            uint8_t *dst = (plane ? q2 : q) + 16 * k0;
            for (int64_t c = 0; c < lp / 64; c++) {
                amx_v16i r[16];
                for (int n = 0; n < 16; n++) r[n] = *(const amx_v16i *)(src + 256 * n + 64 * c);
                SFX(transpose16)(r);
                for (int l = 0; l < 16; l++) *(amx_v16i *)(dst + 1024 * c + 64 * l) = r[l];
            }
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

/* Block formats (Q4_0, Q8_0): one tile product per 32-element block (A: 16
 * tokens x 32 bytes straight from the Q8_0 activations, x_row apart; B: the
 * panel's 8 lines), then acc += C * (d_w[n] * d_a[m]). Two blocks per
 * iteration on alternating tiles, so the second product runs while the
 * first one's epilogue does. da: the 16 tokens' activation scales, 16 per
 * block. */
TGT static void SFX(tile_blk)(TL_PARAM int64_t nb, const char *xa, size_t xs, const uint8_t *q, const float *cs,
                              const float *da, int32_t *cb, float *y, int64_t ys, int mlo, int mhi, int ncols) {
    amx_v16f acc[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = (amx_v16f){0};
    for (int64_t b = 0; b < nb; b += 2) {
        int two = b + 1 < nb;
        TL_LOAD(T_A0, xa + 34 * b + 2, xs);
        TL_LOAD(T_B0, q + 512 * b, 64);
        TL_ZERO(T_C0);
        TL_DP(T_C0, T_A0, T_B0);
        if (two) {
            TL_LOAD(T_A1, xa + 34 * (b + 1) + 2, xs);
            TL_LOAD(T_B1, q + 512 * (b + 1), 64);
            TL_ZERO(T_C1);
            TL_DP(T_C1, T_A1, T_B1);
        }
        for (int k = 0; k < 1 + two; k++) {
            if (k) TL_STORE(T_C1, cb + 256, 64);
            else TL_STORE(T_C0, cb, 64);
            const int32_t *c = cb + 256 * k;
            amx_v16f s = *(const amx_v16f *)(cs + 16 * (b + k));
            const float *d = da + 16 * (b + k);
#pragma GCC unroll 16
            for (int m = 0; m < 16; m++)
                V_FMA(acc[m], __builtin_convertvector(*(const amx_v16i *)(c + 16 * m), amx_v16f), s * d[m]);
        }
    }
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
    const int SUPER = FMT == AF_Q4_K || FMT == AF_Q6_K, MIN = FMT == AF_Q4_K;
    int64_t nc = K / TND_CHUNK, ns = SUPER ? K / TND_QK_K : K / 32; /* ns: scale steps */
    /* panel: quants (K rounded up to 64, the transpose's width) x 16 */
    size_t sq = (size_t)((K + 63) & ~(int64_t)63) * 16, sf = (size_t)ns * 64;
    size_t pbytes = sq * (SUPER ? 2 : 1) + sf + (MIN ? 8 * sf : 0);
    int64_t np = (nr + 15) / 16;
    int64_t P = (int64_t)(AMX_PANEL_BYTES / pbytes);
    P = P < 1 ? 1 : P > AMX_PANELS_MAX ? AMX_PANELS_MAX : P;
    if (P > np) P = np;
    size_t ka = 16 * 256, tab = sf * (MIN ? 9 : 1);
    size_t pad = nt < 16 ? AMX_ALIGN64(16 * x_row) : 0;
    uint8_t *buf = tnd_cpu_tls_buf(1, (size_t)P * pbytes + 2 * ka + tab + 2048 + pad);
    if (!buf) {
        for (int64_t t = 0; t < nt; t++)
            for (int64_t r = 0; r < nr; r++) y[t * ys + r] = NAN;
        return;
    }
    uint8_t *panels = buf;
    int8_t *st = (int8_t *)(buf + (size_t)P * pbytes), *st2 = st + ka;
    float *da = (float *)(buf + (size_t)P * pbytes + 2 * ka), *dsa = da + 16 * ns;
    int32_t *cb = (int32_t *)((uint8_t *)da + tab);
    const char *xb = xq;
    if (pad) {
        /* fewer tokens than a tile: a zero-padded copy, so tile loads stay
         * inside the buffer */
        char *xp = (char *)cb + 2048;
        memset(xp, 0, 16 * x_row);
        memcpy(xp, xq, (size_t)nt * x_row);
        xb = xp;
    }

    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    if (!SUPER) {
        /* K = 32 per product: A 16 x 32 bytes, B 8 lines; tiles 6, 7 unused */
        cfg.colsb[T_A0] = cfg.colsb[T_A1] = 32;
        cfg.rows[T_B0] = cfg.rows[T_B1] = 8;
        cfg.rows[6] = cfg.rows[7] = 0, cfg.colsb[6] = cfg.colsb[7] = 0;
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
            SFX(panel)(FMT, (const char *)W + (size_t)r * w_row, w_row, rows, K, pb, pb + sq, pcs, MIN ? pcs + 16 * ns : NULL,
                       st, st2);
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
                else SFX(tile_blk)(TL_ARG ns, xa, x_row, pb, pcs, da, cb, yt, ys, mlo, mhi, ncols);
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
