/* Driver of the f32-activation matmul (see matmul_f32.h for the summation
 * order that makes decode and prefill bit-identical).
 *
 * Each thread takes a contiguous range of output rows (it streams its own
 * part of W) and walks it in panels of P rows. For each K chunk of a panel it
 * dequantizes the P x KC weights once into a thread-local buffer, then runs
 * the ISA's register-blocked tile kernel over all tokens. Accumulators of a
 * (row, token) pair are L-lane vectors; between K chunks they live in a
 * per-thread state buffer (P x n_tok x L floats), so the order of the sum is
 * the same for any P, KC, tile shape, n_tok or thread count.
 *   decode (n_tok <= 4): quantized formats use the ISA's fused kernel
 *     (blocks dequantized into registers right before their FMAs, 4 rows at
 *     a time); others P = one tile of rows, KC large: the buffer is a few KB
 *     in L1 and weights go DRAM -> registers -> L1 -> FMA once.
 *   prefill: P = 32 rows x KC = 1024: the panel (128 KB) stays in L2
 *     while all token tiles sweep over it, so each weight is dequantized
 *     once per call. */
#include "cpu/matmul_f32.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dequant.h"
#include "cpu/matmul_f32_impl.h"
#include "cpu/matmul_impl.h"
#include "util.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- scalar tile: 8 emulated lanes, product and sum rounded separately ---- */

#define SL 8

static void tile_scalar(int nr, int nt, const float *w, int64_t ws, const float *x, int64_t xs, int64_t kc, float *st,
                        int64_t st_rs, int first, int last, float *y, int64_t ys) {
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            float acc[SL];
            float *s = st + r * st_rs + t * SL;
            for (int l = 0; l < SL; l++) acc[l] = first ? 0.0f : s[l];
            const float *wr = w + r * ws, *xr = x + t * xs;
            for (int64_t k = 0; k < kc; k++) acc[k % SL] = acc[k % SL] + wr[k] * xr[k];
            if (last) {
                float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
                y[t * ys + r] = (a0 + a2) + (a1 + a3);
            } else {
                memcpy(s, acc, sizeof acc);
            }
        }
}

/* ---- kernel tables ------------------------------------------------------------ */

static tnd_f32_kernel g_kern[3];
static pthread_once_t g_kern_once = PTHREAD_ONCE_INIT;

static void kern_init(void) {
    g_kern[TND_ISA_SCALAR] = (tnd_f32_kernel){.lanes = SL, .max_r = 4, .max_t = 4, .tile = tile_scalar};
    tnd_f32_kernel_avx2(&g_kern[TND_ISA_AVX2]);
    tnd_f32_kernel_avx512(&g_kern[TND_ISA_AVX512]);
}

static const tnd_f32_kernel *kern_current(void) {
    pthread_once(&g_kern_once, kern_init);
    return &g_kern[tnd_cpu_isa_id_current()];
}

int tnd_cpu_matmul_f32_lanes(void) { return kern_current()->lanes; }

/* ---- per-thread buffer ------------------------------------------------------- */

/* Grows on demand, kept between calls, freed when the thread exits (pool
 * workers live as long as their pool). */
typedef struct tls_buf { float *p; size_t n; } tls_buf;
static pthread_key_t g_tls_key;
static pthread_once_t g_tls_once = PTHREAD_ONCE_INIT;
static bool g_tls_ok;

static void tls_free(void *v) {
    tls_buf *b = v;
    if (b) tnd_aligned_free(b->p);
    free(b);
}
static void tls_init(void) { g_tls_ok = pthread_key_create(&g_tls_key, tls_free) == 0; }

static float *tls_get(size_t n) {
    pthread_once(&g_tls_once, tls_init);
    if (!g_tls_ok) return NULL;
    tls_buf *b = pthread_getspecific(g_tls_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_setspecific(g_tls_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->n < n) {
        tnd_aligned_free(b->p);
        b->n = 0;
        b->p = tnd_aligned_alloc((n + n / 4) * sizeof(float));
        if (!b->p) return NULL;
        b->n = n + n / 4;
    }
    return b->p;
}

/* ---- driver ------------------------------------------------------------------ */

#define DECODE_MAX_TOK 4
#define KC_DECODE 1024
/* Prefill blocking (see the top of the file): the panel (P x KC floats, in
 * L2) is swept by every token tile, a token tile's x chunk (in L1) by every
 * row tile of the panel. Per FMA instruction that is 4L/P bytes of x from
 * L2/L3 and 8L^2/KC bytes of accumulator state. Best of the sizes tried on
 * a Zen 3 core (16-64 rows x 256-2048). */
#define KC_PREFILL 1024
#define P_PREFILL 32
#define TOK_GROUP 1024
/* Rows handed to threads in multiples of this (y's cache lines unshared). */
#define ROW_GRAIN 16

typedef struct job {
    const tnd_f32_kernel *k;
    tnd_dequant_fn deq;
    tnd_f32_matvec_fn mv; /* fused decode kernel, or NULL */
    bool direct; /* F32 weights: the tile reads W itself */
    const char *W;
    size_t w_row, blk_bytes;
    int64_t blk, n_in, n_out, r0, r1, n_tok, P, KC;
    const float *x;
    float *y;
} job;

static void fill_nan(float *y, int64_t n_out, int64_t n_tok, int64_t a, int64_t b) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = a; r < b; r++) y[t * n_out + r] = NAN;
}

static void task(void *arg, int ith, int nth) {
    const job *j = arg;
    int64_t nrows = j->r1 - j->r0, ng = (nrows + ROW_GRAIN - 1) / ROW_GRAIN;
    int64_t a = j->r0 + ng * ith / nth * ROW_GRAIN, b = TND_MIN(j->r0 + ng * (ith + 1) / nth * ROW_GRAIN, j->r1);
    if (a >= b) return;
    if (j->mv) {
        j->mv((const uint8_t *)j->W + (size_t)a * j->w_row, j->w_row, b - a, j->x, j->n_in, (int)j->n_tok, j->n_in,
              j->y + a, j->n_out);
        return;
    }
    const tnd_f32_kernel *K = j->k;
    const int64_t L = K->lanes, P = j->P, KC = j->KC, n_in = j->n_in;
    /* Tokens in groups of at most TOK_GROUP, so the accumulator state stays
     * bounded (P x TOK_GROUP x L floats); weights are dequantized once per
     * group, which costs < 1% at that many tokens. */
    const int64_t tg = TND_MIN(j->n_tok, TOK_GROUP), st_rs = tg * L;
    /* Buffer rows one cache line longer than KC: rows a power-of-two size
     * apart would all map to the same L1 sets. */
    const int64_t BS = KC + 16;
    size_t nbuf = j->direct ? 0 : (size_t)(P * BS);
    size_t nst = n_in > KC ? (size_t)(P * st_rs) : 0;
    float *buf = tls_get(nbuf + nst + 1);
    if (!buf) {
        TND_WARN("tnd_cpu_matmul_f32: out of memory for thread buffers");
        fill_nan(j->y, j->n_out, j->n_tok, a, b);
        return;
    }
    float *st = buf + nbuf;
    for (int64_t g0 = 0; g0 < j->n_tok; g0 += tg) {
        const int64_t n_tok = TND_MIN(tg, j->n_tok - g0);
        const float *x = j->x + g0 * n_in;
        float *y = j->y + g0 * j->n_out;
        for (int64_t p0 = a; p0 < b; p0 += P) {
            int64_t np = TND_MIN(P, b - p0);
            for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
                int64_t kc = TND_MIN(KC, n_in - k0);
                const float *w;
                int64_t ws;
                if (j->direct) {
                    w = (const float *)j->W + p0 * n_in + k0;
                    ws = n_in;
                } else {
                    for (int64_t r = 0; r < np; r++)
                        j->deq(j->W + (size_t)(p0 + r) * j->w_row + (size_t)(k0 / j->blk) * j->blk_bytes,
                               buf + r * BS, kc);
                    w = buf;
                    ws = BS;
                }
                int first = k0 == 0, last = k0 + kc >= n_in;
                for (int64_t t0 = 0; t0 < n_tok; t0 += K->max_t) {
                    int nt = (int)TND_MIN(K->max_t, n_tok - t0);
                    for (int64_t q = 0; q < np; q += K->max_r) {
                        int nr = (int)TND_MIN(K->max_r, np - q);
                        K->tile(nr, nt, w + q * ws, ws, x + t0 * n_in + k0, n_in, kc, st + q * st_rs + t0 * L, st_rs,
                                first, last, y + t0 * j->n_out + p0 + q, j->n_out);
                    }
                }
            }
        }
    }
}

void tnd_cpu_matmul_f32_rows(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, int64_t r0,
                             int64_t r1, const float *x, int64_t n_tok, float *y) {
    if (r0 < 0) r0 = 0;
    if (r1 > n_out) r1 = n_out;
    if (r0 >= r1 || n_tok <= 0) return;
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    tnd_dequant_fn deq = tnd_cpu_dequant_fn(wt);
    size_t w_row = tnd_row_size(wt, n_in);
    if (!tr || !deq || w_row == 0 || n_in <= 0) {
        /* A caller bug (the loader validates types and shapes): visible in
         * the output rather than a crash. */
        TND_WARN("tnd_cpu_matmul_f32: unsupported type %s or n_in %lld", tnd_type_name(wt), (long long)n_in);
        fill_nan(y, n_out, n_tok, r0, r1);
        return;
    }
    const tnd_f32_kernel *k = kern_current();
    bool decode = n_tok <= DECODE_MAX_TOK;
    job j = {
        .k = k, .deq = deq, .mv = n_tok <= TND_F32_MATVEC_MAX_TOK && n_in % 32 == 0 ? k->matvec[wt] : NULL, .direct = wt == TND_TYPE_F32, .W = W, .w_row = w_row, .blk_bytes = tr->type_size,
        .blk = tr->block_size, .n_in = n_in, .n_out = n_out, .r0 = r0, .r1 = r1, .n_tok = n_tok,
        .P = decode ? k->max_r : P_PREFILL, .KC = decode ? KC_DECODE : KC_PREFILL, .x = x, .y = y,
    };
    /* decode: more items than threads, so late threads (other processes on
     * the cores) leave their share to the others (pool.h) */
    const int64_t ng = (r1 - r0 + ROW_GRAIN - 1) / ROW_GRAIN;
    const int64_t items = decode ? tnd_pool_items(pool) : tnd_pool_size(pool);
    tnd_pool_run_n(pool, task, &j, (int)TND_MAX(1, TND_MIN(ng, items)));
}

void tnd_cpu_matmul_f32(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tok, float *y) {
    tnd_cpu_matmul_f32_rows(pool, wt, W, n_in, n_out, 0, n_out, x, n_tok, y);
}
