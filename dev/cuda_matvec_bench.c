/* Decode matvec on the GPU: validate against the scalar reference, then time
 * every launch variant on the shapes of 8B/14B models, next to the device's
 * own copy bandwidth measured in the same run.
 *
 *   build/dev_cuda_matvec_bench [reps] [-t TYPE,...] [-s NINxNOUT,...] [--tiled|--i8]
 *
 * -t: only these types (names as tnd_type_name: Q4_K,Q6_K,...); -s: these
 * shapes instead (any NINxNOUT, at most 16), for the listed types (default:
 * the four main types);
 * --tiled: of the variants, only the default launch and the tiled rows
 * (Q4_K, and Q6_K's "tiled6" rows); --i8: as --tiled, but of the f16 tiled rows only the default
 * depth and prefetch, next to the int8
 * rows ("tiled i8 MBm KWk Dd [PDL]": tnd_cu_matvec_q4kt_i8) and the
 * even-share int8 rows ("i8b Gg Ww Dd|NSn Pp [PDL]": tnd_cu_matvec_q4kt_i8b,
 * g blocks of w warps, p chunks per warp asked of L2 before the wait; 0
 * and -1: the defaults), then two matrices over one x: "pair Gg Ww Dd
 * Pp" (tnd_cu_matvec_q4kt_pair over two copies) against "two launches"
 * (the default call on each): GB/s counts the bytes of both matrices, MiB
 * one matrix's.
 *
 * Built with -DTND_MVB_TRACE in both CMAKE_C_FLAGS and CMAKE_CUDA_FLAGS
 * (a build of its own: the kernel then writes timestamps), each even-share
 * row is followed by the per-block timeline of its last two launches
 * (print_trace): where a launch's fixed cost goes (DECISIONS, session 11).
 *
 * Each shape's weights are replicated until the set exceeds 4x the L2 cache
 * and the timed loop cycles through the copies, so every launch reads W from
 * HBM. GB/s counts the bytes of W plus x and y; "of copy" is that over the
 * device-to-device copy rate (bytes read + written), the practical HBM peak.
 *
 * Q4_K shapes the tile layout takes (q4k_tile.cuh: n_out % 16 == 0, a
 * 16-row group in shared memory) end with the tiled rows: the weight
 * copies re-laid in place, "tiled MBm KWk Dd PFp" (k_mvt_q4k: m tiles x k
 * warps per tile, d super-blocks in flight per lane, 0 = default; p = 1:
 * an L2 prefetch 4 chunks past the loads in flight, 2: of the warp's first
 * 8 chunks before the kernel's grid-dependency wait; "PDL": launched with
 * programmatic dependent launch, so each launch overlaps the tail of the
 * one before, as consecutive matvecs of a decode step do), then n_tok 2,
 * 4, 8 with the default dispatch; the summary line gets the best of each.
 * (The f16cp ring, the shared-memory feeds of the tiles and the bandwidth
 * probes were removed on 2026-12-01: docs/DECISIONS.md.) Sweep of the
 * tiled rows:
 *
 *   build/dev_cuda_matvec_bench 50 -t Q4_K -s 5120x17408,4096x4096,4096x14336,14336x4096
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dev_check.h"
#include "quant/quant.h"
#include "util.h"
#ifdef TND_HAVE_CUDA
#include "cuda/cuda_ops.h"
#endif

#ifndef TND_HAVE_CUDA
int main(void) {
    printf("cuda_matvec_bench: built without CUDA\n");
    return 0;
}
#else

static tnd_backend *B;
static tnd_stream *S;
static tnd_event *E0, *E1;

static void put_f16(uint8_t *p, float v) {
    uint16_t h = tnd_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Random codes with scales that keep values finite (as test_cuda_ops). */
static uint8_t *make_w(tnd_type t, int64_t n_in, int64_t n_out, size_t *bytes) {
    size_t n = tnd_row_size(t, n_in) * (size_t)n_out;
    uint8_t *w = malloc(n);
    if (!w) exit(1);
    *bytes = n;
    if (t == TND_TYPE_F32 || t == TND_TYPE_F16 || t == TND_TYPE_BF16) {
        for (size_t i = 0; i < (size_t)(n_in * n_out); i++) {
            float v = unif(-1, 1);
            if (t == TND_TYPE_F32) memcpy(w + 4 * i, &v, 4);
            else {
                uint16_t h = t == TND_TYPE_F16 ? tnd_fp32_to_fp16(v) : tnd_fp32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return w;
    }
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t r = rnd();
        memcpy(w + i, &r, 8);
    }
    for (size_t i = n & ~(size_t)7; i < n; i++) w[i] = (uint8_t)rnd();
    size_t ts = tnd_type_traits_get(t)->type_size;
    for (size_t b = 0; b < n / ts; b++) {
        uint8_t *p = w + b * ts;
        float d = unif(0.0002f, 0.002f), m = unif(0.0001f, 0.001f);
        switch (t) {
        case TND_TYPE_Q4_0: case TND_TYPE_Q5_0: case TND_TYPE_Q8_0: put_f16(p, d); break;
        case TND_TYPE_Q4_1: case TND_TYPE_Q5_1: put_f16(p, d); put_f16(p + 2, m); break;
        case TND_TYPE_Q2_K: put_f16(p + 80, d); put_f16(p + 82, m); break;
        case TND_TYPE_Q3_K: put_f16(p + 108, d); break;
        case TND_TYPE_Q4_K: case TND_TYPE_Q5_K: put_f16(p, d); put_f16(p + 2, m); break;
        case TND_TYPE_Q6_K: put_f16(p + 208, d); break;
        case TND_TYPE_MXFP4: p[0] = (uint8_t)(119 + rnd() % 6); break;
        default: break;
        }
    }
    return w;
}

static float time_ms(void) {
    float ms = 0;
    CK(B->iface->event_sync(B, E1));
    CK(B->iface->event_elapsed(B, E0, E1, &ms));
    return ms;
}

static double copy_bandwidth(void) {
    const size_t n = 1ull << 30;
    void *a, *b;
    CK(B->iface->buf_alloc(B, n, &a));
    CK(B->iface->buf_alloc(B, n, &b));
    CK(B->iface->memset(B, a, 1, n, S));
    CK(B->iface->copy_d2d(B, b, a, n, S)); /* warm-up */
    const int reps = 10;
    CK(B->iface->event_record(B, E0, S));
    for (int i = 0; i < reps; i++) CK(B->iface->copy_d2d(B, b, a, n, S));
    CK(B->iface->event_record(B, E1, S));
    double ms = time_ms();
    B->iface->buf_free(B, a);
    B->iface->buf_free(B, b);
    return 2.0 * n * reps / (ms * 1e-3) / 1e9; /* read + write */
}

/* Comma-separated list item i of s into out (false past the end). */
static bool list_item(const char *s, int i, char *out, size_t n) {
    for (; i > 0 && s; i--) {
        s = strchr(s, ',');
        if (s) s++;
    }
    if (!s || !*s) return false;
    size_t len = strcspn(s, ",");
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = 0;
    return true;
}
static bool in_list(const char *list, const char *name) {
    char it[32];
    for (int i = 0; list_item(list, i, it, sizeof it); i++)
        if (strcmp(it, name) == 0) return true;
    return false;
}

/* 97 rows spread over the matrix against the reference: the number that
 * miss the f16 path's tolerance (2e-3 of sum|w x| + n_in * 6e-8, as
 * test_cuda_ops); *err: max |y - ref| / sum|w x|. */
static int validate_f16(tnd_type t, const uint8_t *w, int64_t n_in, int64_t n_out, const float *x, const float *y,
                        double *err) {
    int bad = 0;
    *err = 0;
    for (int k = 0; k < 97; k++) {
        int64_t r = (int64_t)k * (n_out - 1) / 96;
        const uint8_t *row = w + tnd_row_size(t, n_in) * (size_t)r;
        double ref = tnd_ref_dot_f32(t, n_in, row, x), sc = 0;
        float wf[256];
        for (int64_t i = 0; i < n_in; i += 256) {
            tnd_type_traits_get(t)->to_float(row + tnd_row_size(t, i), wf, 256);
            for (int j = 0; j < 256; j++) sc += fabs((double)wf[j] * x[i + j]);
        }
        if (sc > 0 && fabs(y[r] - ref) / sc > *err) *err = fabs(y[r] - ref) / sc;
        if (!(fabs(y[r] - ref) <= 2e-3 * sc + n_in * 6e-8)) {
            if (!bad) printf("MISMATCH row %lld: got %g want %g\n", (long long)r, y[r], ref);
            bad++;
        }
    }
    return bad;
}

/* What one timed row needs of its shape. */
typedef struct {
    tnd_type t;
    int64_t n_in, n_out;
    size_t wb, ncopies;
    void **dw, *dx, *dy;
    const uint8_t *w;
    const float *x;
    float *y;
    double bw;
    int reps;
    tnd_cu_stream cs;
    void *dy2; /* the second y of a row over two matrices */
    int mats;  /* matrices a launch reads: 1, or 2 (a pair, or two launches) */
} row_ctx;

/* A variant's launch on weight copy c; returns a CUDA error code. */
typedef int (*row_launch)(const row_ctx *r, size_t c, const void *arg);

/* One row "variant": a launch into a poisoned y validated against the
 * reference, then reps launches cycling the copies timed; prints the row.
 * Returns GB/s, 0 if the variant does not run here (801); *failures
 * counts launch failures and mismatches. */
static double time_row(const row_ctx *r, const char *var, row_launch launch, const void *arg, int *failures) {
    CK(B->iface->memset(B, r->dy, 0xff, (size_t)r->n_out * 4, S));
    if (r->mats == 2) CK(B->iface->memset(B, r->dy2, 0xff, (size_t)r->n_out * 4, S));
    const int e = launch(r, 0, arg);
    if (e == 801) {
        printf("| %s | %lldx%lld | %.1f | %s | - | - | - | not supported here |\n", tnd_type_name(r->t),
               (long long)r->n_in, (long long)r->n_out, r->wb / 1048576.0, var);
        return 0;
    }
    if (e) {
        printf("| %s | %lldx%lld | %.1f | %s | - | - | - | LAUNCH FAILED (%s) |\n", tnd_type_name(r->t),
               (long long)r->n_in, (long long)r->n_out, r->wb / 1048576.0, var, tnd_cu_error_string(e));
        (*failures)++;
        return 0;
    }
    CK(B->iface->copy_d2h(B, r->y, r->dy, (size_t)r->n_out * 4, S));
    CK(B->iface->stream_sync(B, S));
    double err = 0;
    int bad = validate_f16(r->t, r->w, r->n_in, r->n_out, r->x, r->y, &err);
    if (r->mats == 2) { /* every copy holds the same matrix: y2 has y's reference */
        CK(B->iface->copy_d2h(B, r->y, r->dy2, (size_t)r->n_out * 4, S));
        CK(B->iface->stream_sync(B, S));
        double err2 = 0;
        bad += validate_f16(r->t, r->w, r->n_in, r->n_out, r->x, r->y, &err2);
        if (err2 > err) err = err2;
    }
    if (bad) (*failures)++;
    int le = 0; /* a launch that fails after validating would time as fast */
    for (int k = 0; k < 3; k++) le |= launch(r, (size_t)k % r->ncopies, arg);
    CK(B->iface->event_record(B, E0, S));
    for (int k = 0; k < r->reps; k++) le |= launch(r, (size_t)k % r->ncopies, arg);
    CK(B->iface->event_record(B, E1, S));
    if (le) {
        printf("| %s | %lldx%lld | %.1f | %s | - | - | - | LAUNCH FAILED while timing |\n", tnd_type_name(r->t),
               (long long)r->n_in, (long long)r->n_out, r->wb / 1048576.0, var);
        (*failures)++;
        return 0;
    }
    const double us = time_ms() * 1e3 / r->reps;
    const double gbs = (r->mats * ((double)r->wb + r->n_out * 4.0) + r->n_in * 4.0) / (us * 1e-6) / 1e9;
    printf("| %s | %lldx%lld | %.1f | %s%s | %.1f | %.0f | %.0f%% | %.1e |\n", tnd_type_name(r->t), (long long)r->n_in,
           (long long)r->n_out, r->wb / 1048576.0, var, bad ? " MISMATCH" : "", us, gbs, 100.0 * gbs / r->bw, err);
    return gbs;
}

#ifdef TND_MVB_TRACE
int tnd_cu_matvec_i8b_trace(unsigned long long *out, unsigned *seq);
static int cmp_ll(const void *a, const void *b) {
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}
/* The last two launches of k_mvb_q4k (grid G): per event, min/median/max
 * over blocks of the time from the earlier launch's first entry (ns,
 * globaltimer), and each block's phase lengths (cycles, median/max). Events: 0
 * entry, 1 past the wait, 2 x staged, 3 warp 0's loop done, 4 all warps
 * done, 5 thread 0's sums written. Then the mean end (e4) of the blocks
 * with the smaller and the larger share, and how alike an SM's loop
 * lengths are in the two launches (session 12). */
static void print_trace(void) {
    static unsigned long long tr[4][1024][16];
    static unsigned seq[1024];
    if (tnd_cu_matvec_i8b_trace(&tr[0][0][0], seq)) {
        printf("trace: copy failed\n");
        return;
    }
    /* each block's last two launches are in its own slots (blocks past a
     * smaller grid's have fewer launches); the grid is in slot 14 */
    if (seq[0] < 2) return;
#define TR(l, b) tr[(seq[b] - 2 + (l)) & 3][b] /* launch N-1 (l 0) or N (l 1) of block b */
    const int G = (int)TR(1, 0)[14];
    if (G < 1 || G > 1024) return;
    for (int b = 0; b < G; b++)
        if (seq[b] < 2 || TR(0, b)[14] != (unsigned long long)G || TR(1, b)[14] != (unsigned long long)G) {
            printf("trace: the last two launches had other grids\n");
            return;
        }
    unsigned long long T0 = ~0ull;
    for (int b = 0; b < G; b++)
        if (TR(0, b)[0] < T0) T0 = TR(0, b)[0];
    static long long v[1024];
    for (int l = 0; l < 2; l++) {
        printf("trace launch %s (G %d): ", l ? "N  " : "N-1", G);
        for (int k = 0; k < 6; k++) {
            for (int b = 0; b < G; b++) v[b] = (long long)(TR(l, b)[k] - T0);
            qsort(v, (size_t)G, sizeof v[0], cmp_ll);
            printf(" e%d %lld/%lld/%lld", k, v[0], v[G / 2], v[G - 1]);
        }
        printf(" | cycles:");
        for (int k = 0; k < 5; k++) {
            for (int b = 0; b < G; b++) v[b] = (long long)(TR(l, b)[9 + k] - TR(l, b)[8 + k]);
            qsort(v, (size_t)G, sizeof v[0], cmp_ll);
            printf(" %d-%d %lld/%lld", k, k + 1, v[G / 2], v[G - 1]);
        }
        printf("\n");
    }
    /* whether the late blocks are those with the larger share (slot 7), and
     * whether an SM (slot 6) is slow in both launches: the correlation of
     * the loop's length (e2 to e4, ns) over SMs between N-1 and N */
    double sum[2][2] = {{0, 0}, {0, 0}};
    long long lo = 1LL << 62;
    for (int b = 0; b < G; b++)
        if ((long long)TR(1, b)[7] < lo) lo = (long long)TR(1, b)[7];
    for (int b = 0; b < G; b++) {
        const int big = (long long)TR(1, b)[7] > lo;
        sum[big][0] += 1, sum[big][1] += (double)(TR(1, b)[4] - T0);
    }
    static double len[2][1024];
    static bool seen[2][1024];
    memset(seen, 0, sizeof seen);
    for (int l = 0; l < 2; l++)
        for (int b = 0; b < G; b++) {
            const int sm = (int)(TR(l, b)[6] & 1023);
            len[l][sm] = (double)(TR(l, b)[4] - TR(l, b)[2]), seen[l][sm] = true;
        }
#undef TR
    double n = 0, mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
    for (int sm = 0; sm < 1024; sm++)
        if (seen[0][sm] && seen[1][sm]) n++, mx += len[0][sm], my += len[1][sm];
    if (n > 1) {
        mx /= n, my /= n;
        for (int sm = 0; sm < 1024; sm++)
            if (seen[0][sm] && seen[1][sm]) {
                const double a = len[0][sm] - mx, c = len[1][sm] - my;
                sxx += a * a, syy += c * c, sxy += a * c;
            }
    }
    printf("trace N: e4 mean %.0f ns over %.0f blocks of share %lld, %.0f ns over %.0f of more | loop length "
           "over SMs: corr(N-1, N) %.2f over %.0f SMs\n",
           sum[0][0] ? sum[0][1] / sum[0][0] : 0, sum[0][0], lo, sum[1][0] ? sum[1][1] / sum[1][0] : 0, sum[1][0],
           sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0, n);
}
#endif

/* the int8 tiled kernel: arg = {tiles per block, warps per tile, depth, stages} */
static int launch_i8(const row_ctx *r, size_t c, const void *arg) {
    const int *a = (const int *)arg;
    return tnd_cu_matvec_q4kt_i8(r->dw[c], r->n_in, r->n_out, (const float *)r->dx, 1, (float *)r->dy, a[0], a[1],
                                 a[2], a[3], r->cs);
}
/* the even-share int8 kernel: arg = {blocks, warps, depth, stages, prefetch} */
static int launch_i8b(const row_ctx *r, size_t c, const void *arg) {
    const int *a = (const int *)arg;
    return tnd_cu_matvec_q4kt_i8b(r->dw[c], r->n_in, r->n_out, (const float *)r->dx, 1, (float *)r->dy, a[0], a[1],
                                  a[2], a[3], a[4], r->cs);
}
/* Rows over two matrices (mats 2): launch k reads copies 2k and 2k + 1
 * (mod the copies, at least 5), so no launch finds the one before's in L2. */
/* the pair (tnd_cu_matvec_q4kt_pair): arg = {blocks, warps, depth, prefetch} */
static int launch_pair(const row_ctx *r, size_t c, const void *arg) {
    const int *a = (const int *)arg;
    return tnd_cu_matvec_q4kt_pair(r->dw[2 * c % r->ncopies], r->dw[(2 * c + 1) % r->ncopies], r->n_in, r->n_out,
                                   r->n_out, (const float *)r->dx, 1, (float *)r->dy, (float *)r->dy2, a[0], a[1],
                                   a[2], a[3], r->cs);
}
/* the same two matrices in two default launches (tnd_cu_matvec_q4kt) */
static int launch_two(const row_ctx *r, size_t c, const void *arg) {
    (void)arg;
    const int e = tnd_cu_matvec_q4kt(r->dw[2 * c % r->ncopies], r->n_in, r->n_out, (const float *)r->dx, 1,
                                     (float *)r->dy, 0, 0, 0, -1, r->cs);
    return e ? e
             : tnd_cu_matvec_q4kt(r->dw[(2 * c + 1) % r->ncopies], r->n_in, r->n_out, (const float *)r->dx, 1,
                                  (float *)r->dy2, 0, 0, 0, -1, r->cs);
}

/* the Q6_K tiles (tnd_cu_matvec_q6kt): arg = {tiles per block, warps per tile, depth} */
static int launch_q6kt(const row_ctx *r, size_t c, const void *arg) {
    const int *a = (const int *)arg;
    return tnd_cu_matvec_q6kt(r->dw[c], r->n_in, r->n_out, (const float *)r->dx, 1, (float *)r->dy, a[0], a[1], a[2],
                              r->cs);
}

int main(int argc, char **argv) {
    int reps = 50;
    const char *tlist = NULL, *slist = NULL;
    bool tiled_only = false, i8_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) tlist = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) slist = argv[++i];
        else if (strcmp(argv[i], "--tiled") == 0) tiled_only = true;
        else if (strcmp(argv[i], "--i8") == 0) tiled_only = i8_only = true;
        else reps = atoi(argv[i]);
    }
    if (reps < 1) reps = 50;
    if (tnd_cuda_device_count() <= 0) {
        printf("cuda_matvec_bench: no CUDA device\n");
        return 0;
    }
    tnd_cuda_params p = {0, 0};
    CK(tnd_backend_cuda_new(&p, &B));
    CK(B->iface->stream_new(B, &S));
    CK(B->iface->event_new(B, &E0));
    CK(B->iface->event_new(B, &E1));
    tnd_cu_stream cs = (tnd_cu_stream)tnd_cuda_stream_handle(S);

    double bw = copy_bandwidth();
    printf("device-to-device copy: %.0f GB/s (read + write)\n\n", bw);
    printf("| type | n_in x n_out | MiB | variant | us | GB/s | of copy | max err/sum|wx| |\n|---|---|---|---|---|---|---|---|\n");

    /* the main formats on the shapes of 8B/14B models; the others on the
     * 14B FFN shape */
    static const tnd_type types[] = {TND_TYPE_Q4_K, TND_TYPE_Q6_K, TND_TYPE_Q8_0, TND_TYPE_Q4_0};
    int64_t shapes[16][2] = {{4096, 4096}, {4096, 14336}, {5120, 17408}, {14336, 4096}, {17408, 5120}};
    size_t n_shapes = 5;
    if (slist) { /* -s: exactly these shapes, in order */
        n_shapes = 0;
        const char *q = slist;
        while (*q && n_shapes < 16) {
            long long a = 0, b = 0;
            int used = 0;
            if (sscanf(q, "%lldx%lld%n", &a, &b, &used) != 2 || a < 256 || a % 256 || b < 1 || b > (1 << 24)) {
                fprintf(stderr, "-s: NINxNOUT,... expected, NIN a multiple of 256 (every type's block), at '%s'\n", q);
                return 2;
            }
            shapes[n_shapes][0] = a, shapes[n_shapes][1] = b, n_shapes++;
            q += used;
            if (*q == ',') q++;
        }
        if (*q) fprintf(stderr, "-s: only the first 16 shapes are run\n");
    }
    static const tnd_type others[] = {TND_TYPE_Q4_1, TND_TYPE_Q5_0, TND_TYPE_Q5_1, TND_TYPE_Q2_K, TND_TYPE_Q3_K,
                                      TND_TYPE_Q5_K, TND_TYPE_MXFP4, TND_TYPE_F16};
    const size_t n_main = sizeof types / sizeof types[0] * n_shapes;
    const size_t n_cases = n_main + sizeof others / sizeof others[0];
    int failures = 0;
    char summary[64][2000];
    int n_summary = 0;
    for (size_t ci = 0; ci < n_cases; ci++) {
            const size_t ns = n_shapes;
            tnd_type t = ci < n_main ? types[ci / ns] : others[ci - n_main];
            int64_t n_in = ci < n_main ? shapes[ci % ns][0] : 5120, n_out = ci < n_main ? shapes[ci % ns][1] : 17408;
            if (tlist && !in_list(tlist, tnd_type_name(t))) continue;
            if (slist && ci >= n_main) continue;
            size_t wb;
            uint8_t *w = make_w(t, n_in, n_out, &wb);
            const int n_tok_max = 8;
            float *x = malloc((size_t)(n_in * n_tok_max) * 4), *y = malloc((size_t)(n_out * n_tok_max) * 4);
            for (int64_t i = 0; i < n_in * n_tok_max; i++) x[i] = unif(-1, 1);
            size_t ncopies = (size_t)((200ull << 20) / wb + 1);
            void **dw = calloc(ncopies, sizeof *dw);
            void *dx, *dy, *dy2;
            CK(B->iface->buf_alloc(B, wb, &dw[0]));
            CK(B->iface->copy_h2d(B, dw[0], w, wb, S));
            for (size_t c = 1; c < ncopies; c++) {
                CK(B->iface->buf_alloc(B, wb, &dw[c]));
                CK(B->iface->copy_d2d(B, dw[c], dw[0], wb, S));
            }
            CK(B->iface->buf_alloc(B, (size_t)(n_in * n_tok_max) * 4, &dx));
            CK(B->iface->buf_alloc(B, (size_t)(n_out * n_tok_max) * 4, &dy));
            CK(B->iface->buf_alloc(B, (size_t)n_out * 4, &dy2));
            CK(B->iface->copy_h2d(B, dx, x, (size_t)(n_in * n_tok_max) * 4, S));
            CK(B->iface->stream_sync(B, S));
            const row_ctx rc = {t, n_in, n_out, wb, ncopies, dw, dx, dy, w, x, y, bw, reps, cs, dy2, 1};

            /* variants: the default launch, the f16 and int8 tensor-core
             * kernels (default shape, then tiles per block x warps per tile),
             * then kernel (2 = the type's own, 1 = lane-per-sub) x rows per
             * warp x threads */
            enum { V_F16MMA = 4, V_I8MMA = 5, V_FAMS = 6 };
            static int VK[256], VR[256], VT[256];
            int nv = 0;
#define ADDV(k, r, th) (VK[nv] = (k), VR[nv] = (r), VT[nv] = (th), nv++)
            ADDV(-1, -1, 0);
            static const int mk[][2] = {{0, 0}, {1, 2}, {1, 4}, {1, 8}, {2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}};
            for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++)
                if (tnd_cu_matvec_f16mma_supported(t, n_in, 1)) ADDV(V_F16MMA, mk[i][0], mk[i][1]);
            for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++)
                if (tnd_cu_matvec_i8mma_supported(t, n_in, 1)) ADDV(V_I8MMA, mk[i][0], mk[i][1]);
            for (int k = 2; k >= 1; k--) {
                if (k == 2 && t != TND_TYPE_Q4_K) continue;
                for (int r = 1; r <= 4; r *= 2)
                    for (int th = 64; th <= 256; th *= 2) ADDV(k, r, th);
            }
#undef ADDV
            if (tiled_only) nv = 1; /* the default launch, then the tiled rows */
            double def_gbs = 0, def_err = 0, fam_gbs[V_FAMS] = {0};
            char fam_var[V_FAMS][64] = {""};
            for (int v = 0; v < nv; v++) {
                int e;
#define LAUNCH(c)                                                                                                     \
    (VK[v] < 0            ? tnd_cu_matvec(t, dw[c], n_in, n_out, dx, 1, dy, cs)                                        \
     : VK[v] == V_F16MMA  ? tnd_cu_matvec_f16mma(t, dw[c], n_in, n_out, dx, 1, dy, VR[v], VT[v], cs)                   \
     : VK[v] == V_I8MMA   ? tnd_cu_matvec_i8mma(t, dw[c], n_in, n_out, dx, 1, dy, VR[v], VT[v], cs)                    \
                          : tnd_cu_matvec_cfg(t, dw[c], n_in, n_out, dx, dy, VK[v], VR[v], VT[v], cs))
                char var[64];
                if (VK[v] < 0) var[0] = 0;
                else if (VK[v] == V_F16MMA) snprintf(var, sizeof var, "f16mma MB%d KW%d", VR[v], VT[v]);
                else if (VK[v] == V_I8MMA) snprintf(var, sizeof var, "i8mma MB%d KW%d", VR[v], VT[v]);
                else snprintf(var, sizeof var, "K%d R%d T%d", VK[v], VR[v], VT[v]);
                CK(B->iface->memset(B, dy, 0xff, (size_t)n_out * 4, S));
                e = LAUNCH(0);
                if (e) {
                    printf("launch failed (%s): %s\n", var, tnd_cu_error_string(e));
                    return 1;
                }
                CK(B->iface->copy_d2h(B, y, dy, (size_t)n_out * 4, S));
                CK(B->iface->stream_sync(B, S));
                /* validate 97 rows spread over the matrix (tolerance as in
                 * test_cuda_ops: 2e-4 of sum|w x| for the exact-f32 and int8 kernels,
                 * 2e-3 + n_in * 6e-8 for the f16 path) */
                const int dkind = tnd_cu_matvec_kind(t, n_in, 1);
                const bool f16 = VK[v] == V_F16MMA || (VK[v] < 0 && dkind == TND_CU_MV_F16MMA);
                int bad = 0;
                double err = 0; /* max |y - ref| / sum |w x| */
                for (int k = 0; k < 97; k++) {
                    int64_t r = (int64_t)k * (n_out - 1) / 96;
                    const uint8_t *row = w + tnd_row_size(t, n_in) * (size_t)r;
                    double ref = tnd_ref_dot_f32(t, n_in, row, x), sc = 0;
                    float wf[256];
                    for (int64_t i = 0; i < n_in; i += 256) {
                        tnd_type_traits_get(t)->to_float(row + tnd_row_size(t, i), wf, 256);
                        for (int j = 0; j < 256; j++) sc += fabs((double)wf[j] * x[i + j]);
                    }
                    if (sc > 0 && fabs(y[r] - ref) / sc > err) err = fabs(y[r] - ref) / sc;
                    if (!(fabs(y[r] - ref) <= (f16 ? 2e-3 * sc + n_in * 6e-8 : 2e-4 * sc + 1e-6))) {
                        if (!bad) printf("MISMATCH row %lld: got %g want %g\n", (long long)r, y[r], ref);
                        bad++;
                    }
                }
                if (bad) failures++;
                for (int i = 0; i < 3; i++) LAUNCH(i % ncopies);
                CK(B->iface->event_record(B, E0, S));
                for (int i = 0; i < reps; i++) LAUNCH(i % ncopies);
                CK(B->iface->event_record(B, E1, S));
                double us = time_ms() * 1e3 / reps;
                double bytes = (double)wb + n_in * 4.0 + n_out * 4.0;
                double gbs = bytes / (us * 1e-6) / 1e9;
                if (VK[v] < 0)
                    snprintf(var, sizeof var, "default (%s)",
                             dkind == TND_CU_MV_F16MMA   ? "f16mma"
                             : dkind == TND_CU_MV_I8MMA  ? "i8mma"
                                                         : "f32");
                printf("| %s | %lldx%lld | %.1f | %s%s | %.1f | %.0f | %.0f%% | %.1e |\n", tnd_type_name(t),
                       (long long)n_in, (long long)n_out, wb / 1048576.0, var, bad ? " MISMATCH" : "", us, gbs,
                       100.0 * gbs / bw, err);
                if (VK[v] < 0) {
                    def_gbs = gbs;
                    def_err = err;
                } else if (gbs > fam_gbs[VK[v]]) {
                    fam_gbs[VK[v]] = gbs;
                    snprintf(fam_var[VK[v]], sizeof fam_var[0], "R%dT%d", VR[v], VT[v]);
                }
#undef LAUNCH
            }
            if (n_summary < 64) {
                snprintf(summary[n_summary], sizeof summary[0],
                         "%-5s %5lldx%-5lld default %5.0f GB/s (%3.0f%%) err %.0e | f16mma %-7s %5.0f (%3.0f%%) | i8mma %-7s %5.0f (%3.0f%%) | own %-7s %5.0f | lane/sub %-7s %5.0f",
                         tnd_type_name(t), (long long)n_in, (long long)n_out, def_gbs, 100 * def_gbs / bw, def_err,
                         fam_var[4], fam_gbs[4], 100 * fam_gbs[4] / bw, fam_var[5], fam_gbs[5], 100 * fam_gbs[5] / bw,
                         fam_var[2], fam_gbs[2], fam_var[1], fam_gbs[1]);
                n_summary++;
            }
            /* batched decode: 2, 4 and 8 tokens through tnd_cu_matvec with
             * each family forced (f16mma only where it takes the shape) */
            for (int nt = 2; nt <= 8; nt *= 2)
                for (int kind = TND_CU_MV_F32; kind <= TND_CU_MV_I8MMA; kind++) {
                    if (kind == TND_CU_MV_F16MMA && !tnd_cu_matvec_f16mma_supported(t, n_in, nt)) continue;
                    if (kind == TND_CU_MV_I8MMA && !tnd_cu_matvec_i8mma_supported(t, n_in, nt)) continue;
                    tnd_cu_matvec_set_kind(kind);
                    for (int i = 0; i < 3; i++) tnd_cu_matvec(t, dw[i % ncopies], n_in, n_out, dx, nt, dy, cs);
                    CK(B->iface->event_record(B, E0, S));
                    for (int i = 0; i < reps; i++) tnd_cu_matvec(t, dw[i % ncopies], n_in, n_out, dx, nt, dy, cs);
                    CK(B->iface->event_record(B, E1, S));
                    tnd_cu_matvec_set_kind(-1);
                    double us = time_ms() * 1e3 / reps;
                    double gbs = ((double)wb + nt * (n_in + n_out) * 4.0) / (us * 1e-6) / 1e9;
                    printf("| %s | %lldx%lld | %.1f | n_tok=%d %s | %.1f | %.0f | %.0f%% |\n", tnd_type_name(t),
                           (long long)n_in, (long long)n_out, wb / 1048576.0, nt,
                           kind == TND_CU_MV_F16MMA  ? "f16mma"
                           : kind == TND_CU_MV_I8MMA ? "i8mma"
                                                     : "f32",
                           us, gbs,
                           100.0 * gbs / bw);
                }
            /* The Q4_K tile layout: the copies re-laid in place
             * (tnd_cu_q4kt_repack), then the tiled kernel ("tiled MBm KWk
             * Dd": m tiles x k warps per tile, d super-blocks in flight per
             * lane; 0: the default), then batched decode with the default
             * shape. */
            if (t == TND_TYPE_Q4_K && tnd_cu_q4kt_supported(n_in, n_out)) {
                for (size_t c = 0; c < ncopies; c++) {
                    int e = tnd_cu_q4kt_repack(dw[c], n_in, n_out, cs);
                    if (e) {
                        printf("repack failed: %s\n", tnd_cu_error_string(e));
                        return 1;
                    }
                }
                CK(B->iface->stream_sync(B, S));
                /* [pdl]: launched without, with programmatic dependent launch */
                double tiled_gbs[2] = {0, 0};
                char tiled_var[2][64] = {"", ""};
                static const int tw[][2] = {{0, 0}, {4, 1}, {2, 2}, {1, 4}, {8, 1}, {4, 2}, {2, 4}, {1, 8}};
                const bool pdl_default = tnd_cu_matvec_q4kt_pdl();
                for (int pdl = 0; pdl < 2; pdl++)
                    for (int pf = 0; pf < 3; pf++)
                    for (int d = 0; d <= 4; d++)
                        for (size_t i = 0; i < sizeof tw / sizeof tw[0]; i++) {
                            const int MB = tw[i][0], KW = tw[i][1];
                            if (i8_only && (d != 0 || pf != tnd_cu_matvec_q4kt_prefetch())) continue;
                            tnd_cu_matvec_q4kt_set_pdl(pdl);
                            char var[64];
                            snprintf(var, sizeof var, "tiled MB%d KW%d D%d PF%d%s", MB, KW, d, pf, pdl ? " PDL" : "");
#define TLAUNCH(c) tnd_cu_matvec_q4kt(dw[c], n_in, n_out, dx, 1, dy, MB, KW, d, pf, cs)
                            CK(B->iface->memset(B, dy, 0xff, (size_t)n_out * 4, S));
                            int e = TLAUNCH(0);
                            if (e) {
                                printf("| %s | %lldx%lld | %.1f | %s | - | - | - | LAUNCH FAILED (%s) |\n",
                                       tnd_type_name(t), (long long)n_in, (long long)n_out, wb / 1048576.0, var,
                                       tnd_cu_error_string(e));
                                failures++;
                                continue;
                            }
                            CK(B->iface->copy_d2h(B, y, dy, (size_t)n_out * 4, S));
                            CK(B->iface->stream_sync(B, S));
                            double err = 0;
                            int bad = validate_f16(t, w, n_in, n_out, x, y, &err);
                            if (bad) failures++;
                            for (int k = 0; k < 3; k++) TLAUNCH(k % ncopies);
                            CK(B->iface->event_record(B, E0, S));
                            for (int k = 0; k < reps; k++) TLAUNCH(k % ncopies);
                            CK(B->iface->event_record(B, E1, S));
#undef TLAUNCH
                            double us = time_ms() * 1e3 / reps;
                            double gbs = ((double)wb + n_in * 4.0 + n_out * 4.0) / (us * 1e-6) / 1e9;
                            printf("| %s | %lldx%lld | %.1f | %s%s | %.1f | %.0f | %.0f%% | %.1e |\n", tnd_type_name(t),
                                   (long long)n_in, (long long)n_out, wb / 1048576.0, var, bad ? " MISMATCH" : "", us,
                                   gbs, 100.0 * gbs / bw, err);
                            if (gbs > tiled_gbs[pdl]) {
                                tiled_gbs[pdl] = gbs;
                                snprintf(tiled_var[pdl], sizeof tiled_var[0], "%s", var + 6);
                            }
                        }
                /* the int8 kernel (tnd_cu_matvec_q4kt_i8): "tiled i8 MBm KWk Dd" (register
                 * ring of depth d) or "... NSn" (a shared ring of n bulk-fed slots per warp) */
                double i8_gbs[2] = {0, 0};
                char i8_var[2][64] = {"", ""};
                static const int qw[][2] = {{0, 0}, {9, 1}, {9, 2}, {7, 2}, {8, 3}, {4, 4}, {3, 5}, {3, 8}, {2, 12}, {1, 16},
                                             {5, 2}, {5, 3}, {4, 3}, {6, 2}, {4, 2}};
                static const int qd[][2] = {{0, -1}, {1, 0}, {2, 0}, {1, 2}, {1, 4}, {1, 6}, {1, 8}};
                for (int pdl = 0; pdl < 2; pdl++)
                    for (size_t di = 0; di < sizeof qd / sizeof qd[0]; di++)
                        for (size_t i = 0; i < sizeof qw / sizeof qw[0]; i++) {
                            const int MB = qw[i][0], KW = qw[i][1], d = qd[di][0], ns = qd[di][1];
                            if (MB * KW > (ns == 0 ? 16 : 24)) continue; /* the register ring: 16 warps a block; the ring 24 */
                            tnd_cu_matvec_q4kt_set_pdl(pdl);
                            char var[64];
                            if (ns > 0)
                                snprintf(var, sizeof var, "tiled i8 MB%d KW%d NS%d%s", MB, KW, ns, pdl ? " PDL" : "");
                            else
                                snprintf(var, sizeof var, "tiled i8 MB%d KW%d D%d%s", MB, KW, ns < 0 ? 0 : d,
                                         pdl ? " PDL" : "");
                            const int arg[4] = {MB, KW, ns < 0 ? 0 : d, ns};
                            const double gbs = time_row(&rc, var, launch_i8, arg, &failures);
                            if (gbs > i8_gbs[pdl]) {
                                i8_gbs[pdl] = gbs;
                                snprintf(i8_var[pdl], sizeof i8_var[0], "%s", var + 9);
                            }
                        }
                /* the even-share int8 kernel (tnd_cu_matvec_q4kt_i8b): "i8b Gg Ww Dd|NSn Pp",
                 * g blocks (0: one per SM) of w warps (0: the most that fit), p chunks per
                 * warp asked of L2 before the wait (-1: the default) */
                double i8b_gbs[2] = {0, 0};
                char i8b_var[2][64] = {"", ""};
                /* 128 blocks: on the H200's 132 SMs, 17 half-tiles each at 5120x17408
                 * (no block with one more, four SMs idle) */
                static const int bw_[][2] = {{0, 0}, {0, 12}, {0, 16}, {0, 24}, {128, 0}, {264, 8}};
                static const int bd[][2] = {{0, -1}, {1, 0}, {2, 0}, {1, 3}};
                static const int bp[] = {-1, 0, 2, 4};
                for (int pdl = 0; pdl < 2; pdl++)
                    for (size_t di = 0; di < sizeof bd / sizeof bd[0]; di++)
                        for (size_t i = 0; i < sizeof bw_ / sizeof bw_[0]; i++)
                            for (size_t pi = 0; pi < sizeof bp / sizeof bp[0]; pi++) {
                                const int G = bw_[i][0], NW = bw_[i][1], d = bd[di][0], ns = bd[di][1], pf = bp[pi];
                                if (NW > (ns > 0 ? 24 : 16)) continue; /* the default (-1) is the register ring */
                                tnd_cu_matvec_q4kt_set_pdl(pdl);
                                char var[64];
                                if (ns > 0)
                                    snprintf(var, sizeof var, "i8b G%d W%d NS%d P%d%s", G, NW, ns, pf, pdl ? " PDL" : "");
                                else
                                    snprintf(var, sizeof var, "i8b G%d W%d D%d P%d%s", G, NW, ns < 0 ? 0 : d, pf,
                                             pdl ? " PDL" : "");
                                const int arg[5] = {G, NW, ns < 0 ? 0 : d, ns, pf};
                                const double gbs = time_row(&rc, var, launch_i8b, arg, &failures);
#ifdef TND_MVB_TRACE
                                if (gbs > 0) print_trace();
#endif
                                if (gbs > i8b_gbs[pdl]) {
                                    i8b_gbs[pdl] = gbs;
                                    snprintf(i8b_var[pdl], sizeof i8b_var[0], "%s", var + 4);
                                }
                            }
                /* two matrices over one x (a decode step's gate and up): the pair in one
                 * launch ("pair Gg Ww Dd Pp", tnd_cu_matvec_q4kt_pair) against two default
                 * launches ("two launches"); GB/s and % count both matrices */
                double pair_gbs[2] = {0, 0}, two_gbs[2] = {0, 0};
                char pair_var[2][64] = {"", ""};
                row_ctx r2 = rc;
                r2.mats = 2;
                static const int pa[][4] = {{0, 0, 0, -1}, {0, 16, 2, 0}, {0, 16, 1, 2}, {0, 12, 2, 2}};
                for (int pdl = 0; pdl < 2 && ncopies >= 5; pdl++) {
                    tnd_cu_matvec_q4kt_set_pdl(pdl);
                    char var[64];
                    snprintf(var, sizeof var, "two launches%s", pdl ? " PDL" : "");
                    two_gbs[pdl] = time_row(&r2, var, launch_two, NULL, &failures);
                    for (size_t i = 0; i < sizeof pa / sizeof pa[0]; i++) {
                        snprintf(var, sizeof var, "pair G%d W%d D%d P%d%s", pa[i][0], pa[i][1], pa[i][2], pa[i][3],
                                 pdl ? " PDL" : "");
                        const double gbs = time_row(&r2, var, launch_pair, pa[i], &failures);
                        if (gbs > pair_gbs[pdl]) {
                            pair_gbs[pdl] = gbs;
                            snprintf(pair_var[pdl], sizeof pair_var[0], "%s", var + 5);
                        }
                    }
                }
                tnd_cu_matvec_q4kt_set_pdl(pdl_default);
                for (int nt = 2; nt <= 8; nt *= 2) {
                    for (int i = 0; i < 3; i++)
                        tnd_cu_matvec_q4kt(dw[i % ncopies], n_in, n_out, dx, nt, dy, 0, 0, 0, -1, cs);
                    CK(B->iface->event_record(B, E0, S));
                    for (int i = 0; i < reps; i++)
                        tnd_cu_matvec_q4kt(dw[i % ncopies], n_in, n_out, dx, nt, dy, 0, 0, 0, -1, cs);
                    CK(B->iface->event_record(B, E1, S));
                    double us = time_ms() * 1e3 / reps;
                    double gbs = ((double)wb + nt * (n_in + n_out) * 4.0) / (us * 1e-6) / 1e9;
                    printf("| %s | %lldx%lld | %.1f | n_tok=%d tiled default | %.1f | %.0f | %.0f%% |\n", tnd_type_name(t),
                           (long long)n_in, (long long)n_out, wb / 1048576.0, nt, us, gbs, 100.0 * gbs / bw);
                }
                if (n_summary > 0) {
                    char *sm = summary[n_summary - 1];
                    size_t n = strlen(sm);
                    for (int pdl = 0; pdl < 2; pdl++) {
                        n = strlen(sm);
                        snprintf(sm + n, sizeof summary[0] - n,
                                 "\n        tiled%s (default depth %d, prefetch %d) %s %5.0f (%3.0f%%)",
                                 pdl ? " PDL" : "", tnd_cu_matvec_q4kt_depth(), tnd_cu_matvec_q4kt_prefetch(),
                                 tiled_var[pdl], tiled_gbs[pdl], 100 * tiled_gbs[pdl] / bw);
                    }
                    for (int pdl = 0; pdl < 2; pdl++) {
                        n = strlen(sm);
                        snprintf(sm + n, sizeof summary[0] - n,
                                 "\n        tiled i8%s (default %s, depth %d, stages %d) %s %5.0f (%3.0f%%)",
                                 pdl ? " PDL" : "", tnd_cu_matvec_q4kt_i8_default() ? "on" : "off",
                                 tnd_cu_matvec_q4kt_i8_depth(), tnd_cu_matvec_q4kt_i8_stages(), i8_var[pdl],
                                 i8_gbs[pdl], 100 * i8_gbs[pdl] / bw);
                    }
                    for (int pdl = 0; pdl < 2; pdl++) {
                        n = strlen(sm);
                        snprintf(sm + n, sizeof summary[0] - n, "\n        i8b%s %s %5.0f (%3.0f%%)", pdl ? " PDL" : "",
                                 i8b_var[pdl], i8b_gbs[pdl], 100 * i8b_gbs[pdl] / bw);
                    }
                    for (int pdl = 0; pdl < 2; pdl++) {
                        n = strlen(sm);
                        snprintf(sm + n, sizeof summary[0] - n,
                                 "\n        two matrices%s: pair %s %5.0f (%3.0f%%) | two launches %5.0f (%3.0f%%)",
                                 pdl ? " PDL" : "", pair_var[pdl], pair_gbs[pdl], 100 * pair_gbs[pdl] / bw,
                                 two_gbs[pdl], 100 * two_gbs[pdl] / bw);
                    }
                }
            }
            /* The Q6_K tile layout: the copies re-laid in place, then "tiled6
             * MBm KWk Dd [PDL]" (tnd_cu_matvec_q6kt: m tiles x k warps per
             * tile, depth d; 0: the defaults), then batched decode with the
             * default shape. */
            if (t == TND_TYPE_Q6_K && tnd_cu_q6kt_supported(n_in, n_out)) {
                for (size_t c = 0; c < ncopies; c++) {
                    int e = tnd_cu_q6kt_repack(dw[c], n_in, n_out, cs);
                    if (e) {
                        printf("repack failed: %s\n", tnd_cu_error_string(e));
                        return 1;
                    }
                }
                CK(B->iface->stream_sync(B, S));
                double best = 0;
                char best_var[64] = "";
                static const int tw[][2] = {{0, 0}, {1, 8}, {2, 4}, {4, 2}, {8, 1}};
                const bool pdl_default = tnd_cu_matvec_q4kt_pdl();
                for (int pdl = 0; pdl < 2; pdl++)
                    for (int v = 0; v <= 2; v++)
                        for (size_t i = 0; i < sizeof tw / sizeof tw[0]; i++) {
                            tnd_cu_matvec_q4kt_set_pdl(pdl);
                            char var[64];
                            snprintf(var, sizeof var, "tiled6 MB%d KW%d D%d%s", tw[i][0], tw[i][1], v, pdl ? " PDL" : "");
                            const int arg[3] = {tw[i][0], tw[i][1], v};
                            const double gbs = time_row(&rc, var, launch_q6kt, arg, &failures);
                            if (gbs > best) best = gbs, snprintf(best_var, sizeof best_var, "%s", var);
                        }
                tnd_cu_matvec_q4kt_set_pdl(pdl_default);
                for (int nt = 2; nt <= 8; nt *= 2) {
                    for (int i = 0; i < 3; i++) tnd_cu_matvec_q6kt(dw[i % ncopies], n_in, n_out, dx, nt, dy, 0, 0, 0, cs);
                    CK(B->iface->event_record(B, E0, S));
                    for (int i = 0; i < reps; i++)
                        tnd_cu_matvec_q6kt(dw[i % ncopies], n_in, n_out, dx, nt, dy, 0, 0, 0, cs);
                    CK(B->iface->event_record(B, E1, S));
                    double us = time_ms() * 1e3 / reps;
                    double gbs = ((double)wb + nt * (n_in + n_out) * 4.0) / (us * 1e-6) / 1e9;
                    printf("| %s | %lldx%lld | %.1f | n_tok=%d tiled6 default | %.1f | %.0f | %.0f%% |\n",
                           tnd_type_name(t), (long long)n_in, (long long)n_out, wb / 1048576.0, nt, us, gbs,
                           100.0 * gbs / bw);
                }
                if (n_summary > 0) {
                    char *sm = summary[n_summary - 1];
                    size_t n = strlen(sm);
                    snprintf(sm + n, sizeof summary[0] - n, "\n        best tiled6: %s %5.0f (%3.0f%%)", best_var, best,
                             100 * best / bw);
                }
            }
            for (size_t c = 0; c < ncopies; c++) B->iface->buf_free(B, dw[c]);
            B->iface->buf_free(B, dx);
            B->iface->buf_free(B, dy);
            B->iface->buf_free(B, dy2);
            free(dw);
            free(w);
            free(x);
            free(y);
        }
    B->iface->event_free(B, E0);
    B->iface->event_free(B, E1);
    B->iface->stream_free(B, S);
    tnd_backend_free(B);
    printf("\nsummary (copy bandwidth %.0f GB/s):\n", bw);
    for (int i = 0; i < n_summary; i++) printf("  %s\n", summary[i]);
    printf("validation: %s\n", failures ? "FAILED" : "all variants match the reference");
    return failures ? 1 : 0;
}
#endif
