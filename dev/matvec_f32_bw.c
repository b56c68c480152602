/* f32-activation matmul (cpu/matmul_f32.h): decode throughput in GB/s of
 * weights read, next to this machine's read bandwidth measured in the same
 * run, and the prefill ratio (one n_tok-token matmul against n_tok matvecs).
 *
 * Build (CMake builds it as build/dev_matvec_f32_bw), or by hand:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude dev/matvec_f32_bw.c build/libtandem.a -lpthread -lm -o matvec_f32_bw
 * Run:
 *   build/dev_matvec_f32_bw [-t 1,N] [-f Q4_0,Q8_0,...] [-s 4096x4096,...] [-r REPS] [-m MB] [-n 512]
 *                           [--no-prefill | --prefill-all] [--int8] [--isa scalar|avx2|avx512]
 *
 * Shapes are n_in x n_out (ne0 x ne1 of the GGUF tensor): 4096x14336 is an
 * FFN up projection of an 8B model, 14336x4096 its down projection.
 *
 * Method. Decode: each call (one token) runs over a rotation of copies of W
 * totalling >= -m MB, so every call reads its weights from DRAM as a real
 * decode step does. Read bandwidth: a streaming sum over a buffer of -m MB
 * (far larger than the last-level cache), with the same thread count.
 * The two are measured alternately: each of the -r repetitions is one read
 * pass, then one pass over the rotation per kernel (f32, and int8 with
 * --int8), a repetition's kernel rate being the median over its calls; the
 * table reports medians over the repetitions of the read bandwidth, of each
 * kernel rate and of each repetition's ratio kernel / read (frac), so that
 * a noisy neighbour slows both sides of the ratio alike. A last line counts
 * the (format, shape) cells whose frac reaches 85%.
 * Prefill: one call with n_tok tokens (weights read once) against n_tok
 * one-token calls over the rotation; ratio = tokens/s of the first over the
 * second; by default only for shapes of at most 4096 x 4096 weights (the
 * larger ones take seconds per call on one thread), --prefill-all for every
 * shape. Before any timing, the output is checked against a double
 * dequantize-then-dot reference on a sample of rows (tolerance of
 * matmul_f32.h), and the batched result against the one-token result
 * bitwise. --int8 adds the int8 path (tnd_cpu_matmul) for comparison.
 * hot GB/s: the median of the same call repeated on one copy of W, which
 * then stays in the caches where it fits (L2 + L3 over the threads): the
 * kernel's compute ceiling; a decode kernel can only reach the read
 * bandwidth if this is well above it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "cpu/matmul_f32.h"
#include "cpu/matmul_impl.h"
#include "cpu/membw.h"
#include "cpu/pool.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / (1 << 23))) - 1.0f;
}

static int parse_type(const char *s) {
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        const tnd_type_traits *tr = tnd_type_traits_get(t);
        if (tr && tr->supported && !strcmp(tr->name, s)) return t;
    }
    return -1;
}

/* 64 distinct rows quantized by the reference, repeated. */
static void fill_weights(tnd_type wt, void *W, int64_t n_in, int64_t n_out) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t rs = tnd_row_size(wt, n_in);
    float *f = malloc((size_t)n_in * sizeof(float));
    int64_t distinct = n_out < 64 ? n_out : 64;
    for (int64_t r = 0; r < distinct; r++) {
        for (int64_t i = 0; i < n_in; i++) f[i] = frand() * (0.02f + 0.01f * (float)(r % 5));
        tr->from_float(f, (char *)W + r * rs, n_in);
    }
    for (int64_t r = distinct; r < n_out; r++) memcpy((char *)W + r * rs, (char *)W + (r % distinct) * rs, rs);
    free(f);
}

/* Max over sampled (row, token) of |y - exact| / bound (bound of
 * matmul_f32.h); > 1 means wrong. */
static double validate(tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok,
                       const float *y) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt);
    size_t rs = tnd_row_size(wt, n_in);
    float *wd = malloc((size_t)n_in * sizeof(float));
    int L = tnd_cpu_matmul_f32_lanes();
    double worst = 0, lg = L == 16 ? 4 : 3;
    int64_t step = n_out > 64 ? n_out / 64 : 1, tstep = n_tok > 8 ? n_tok / 8 : 1;
    for (int64_t r = 0; r < n_out; r += step) {
        tr->to_float((const char *)W + r * rs, wd, n_in);
        for (int64_t t = 0; t < n_tok; t += tstep) {
            double s = 0, a = 1e-30;
            for (int64_t i = 0; i < n_in; i++) {
                double p = (double)wd[i] * x[t * n_in + i];
                s += p, a += fabs(p);
            }
            double e = fabs((double)y[t * n_out + r] - s) / (((double)(n_in + L - 1) / L + lg + 2) * ldexp(1, -24) * a);
            if (!(e <= worst)) worst = e; /* NaN sticks */
        }
    }
    free(wd);
    return worst;
}

typedef struct shape { int64_t n_in, n_out; } shape;

typedef void (*mm_fn)(tnd_pool *, tnd_type, const void *, int64_t, int64_t, const float *, int64_t, float *);

/* Process CPU time: on a shared machine, the 1-thread rows' cpu GB/s
 * (weights / CPU seconds) shows the kernel's own cost when wall time is
 * inflated by other processes. */
static double cpu_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One pass of one-token calls over copies 0..copies-1 of W (after one
 * warm-up call): returns the median GB/s of weights over the calls; *cpu
 * (if given): CPU seconds of the process per call. */
static double pass_rate(mm_fn f, tnd_pool *pool, tnd_type wt, const uint8_t *W, size_t wbytes, int copies,
                        int64_t n_in, int64_t n_out, const float *x, float *y, int calls, double *cpu) {
    f(pool, wt, W, n_in, n_out, x, 1, y);
    double *r = malloc((size_t)calls * sizeof *r), c0 = cpu_time_s();
    for (int k = 0; k < calls; k++) {
        double t0 = tnd_time_s();
        f(pool, wt, W + (size_t)(k % copies) * wbytes, n_in, n_out, x, 1, y);
        r[k] = (double)wbytes / (tnd_time_s() - t0) / 1e9;
    }
    if (cpu) *cpu = (cpu_time_s() - c0) / calls;
    double m = median(r, calls);
    free(r);
    return m;
}

static int parse_list(const char *arg, char **out, int max) {
    int n = 0;
    char *s = strdup(arg);
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = strdup(tok);
    free(s);
    return n;
}

int main(int argc, char **argv) {
    const char *threads_arg = NULL, *types_arg = "Q4_0,Q8_0,Q4_K,Q6_K",
               *shapes_arg = "4096x4096,4096x14336,5120x17408,14336x4096";
    int reps = 11, n_pf = 512, prefill = 1, int8 = 0; /* prefill: 0 none, 1 small shapes, 2 all */
    double mb = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads_arg = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) shapes_arg = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_pf = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-prefill")) prefill = 0;
        else if (!strcmp(argv[i], "--prefill-all")) prefill = 2;
        else if (!strcmp(argv[i], "--int8")) int8 = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            tnd_cpu_isa_id id = !strcmp(s, "scalar") ? TND_ISA_SCALAR : !strcmp(s, "avx2") ? TND_ISA_AVX2 : TND_ISA_AVX512;
            if (!tnd_cpu_isa_force(id)) fprintf(stderr, "ISA %s not available here\n", s);
        } else {
            fprintf(stderr, "usage: %s [-t 1,N] [-f TYPES] [-s NINxNOUT,...] [-r REPS] [-m MB] [-n NTOK] [--no-prefill] "
                            "[--prefill-all] [--int8] [--isa scalar|avx2|avx512]\n", argv[0]);
            return 2;
        }
    }
    char *tok[32];
    int nthreads[8], n_nt = 0;
    if (threads_arg) {
        int n = parse_list(threads_arg, tok, 8);
        for (int i = 0; i < n; i++) nthreads[n_nt++] = atoi(tok[i]), free(tok[i]);
    } else {
        nthreads[n_nt++] = 1;
        if (tnd_physical_cores() > 1) nthreads[n_nt++] = tnd_physical_cores();
    }
    shape shapes[16];
    int n_sh = 0, n = parse_list(shapes_arg, tok, 16);
    for (int i = 0; i < n; i++) {
        long long a, b;
        if (sscanf(tok[i], "%lldx%lld", &a, &b) == 2) shapes[n_sh++] = (shape){a, b};
        free(tok[i]);
    }
    int types[32], n_ty = 0;
    n = parse_list(types_arg, tok, 32);
    for (int i = 0; i < n; i++) {
        int t = parse_type(tok[i]);
        if (t < 0) fprintf(stderr, "unknown type %s\n", tok[i]);
        else types[n_ty++] = t;
        free(tok[i]);
    }

    size_t bw_bytes = (size_t)(mb * 1024 * 1024) & ~(size_t)4095;
    uint8_t *bwbuf = tnd_aligned_alloc(bw_bytes);
    if (!bwbuf) return 1;
    memset(bwbuf, 1, bw_bytes);
    printf("# ISA %s (f32 lanes %d); read-bandwidth buffer %.0f MiB; %d interleaved reps, medians; prefill n_tok %d\n", tnd_cpu_isa(),
           tnd_cpu_matmul_f32_lanes(), mb, reps, n_pf);
    printf("| format | n_in x n_out | thr | MiB | us/tok | GB/s | read BW | frac | cpu GB/s | hot GB/s |%s err/bound | "
           "prefill tok/s | matvec tok/s | ratio |\n", int8 ? " int8 GB/s | int8 frac | int8 hot GB/s |" : "");
    printf("|---|---|---|---|---|---|---|---|---|---|%s---|---|---|---|\n", int8 ? "---|---|---|" : "");
    int n_cells = 0, n_pass = 0, n_pass8 = 0;
    for (int ti = 0; ti < n_nt; ti++) {
        tnd_pool *pool = tnd_pool_new(nthreads[ti]);
        for (int yi = 0; yi < n_ty; yi++) {
            tnd_type wt = (tnd_type)types[yi];
            for (int si = 0; si < n_sh; si++) {
                int64_t n_in = shapes[si].n_in, n_out = shapes[si].n_out;
                size_t rs = tnd_row_size(wt, n_in), wbytes = rs * (size_t)n_out;
                if (!rs) continue;
                int copies = (int)((double)bw_bytes / (double)wbytes) + 1;
                if (copies < 2) copies = 2;
                uint8_t *W = tnd_aligned_alloc(wbytes * (size_t)copies);
                bool pf_here = prefill == 2 || (prefill == 1 && n_in * n_out <= 4096 * 4096);
                int64_t nx = pf_here ? n_pf : 1;
                float *x = malloc((size_t)(n_in * nx) * sizeof(float)), *y = malloc((size_t)(n_out * nx) * sizeof(float));
                float *y1 = malloc((size_t)n_out * sizeof(float));
                if (!W || !x || !y || !y1) {
                    fprintf(stderr, "out of memory\n");
                    return 1;
                }
                fill_weights(wt, W, n_in, n_out);
                for (int c = 1; c < copies; c++) memcpy(W + (size_t)c * wbytes, W, wbytes);
                for (int64_t i = 0; i < n_in * nx; i++) x[i] = frand();
                /* validate before timing */
                tnd_cpu_matmul_f32(pool, wt, W, n_in, n_out, x, nx, y);
                double err = validate(wt, W, n_in, n_out, x, nx, y);
                bool same = true;
                for (int64_t t = 0; t < nx; t += nx > 4 ? nx / 4 : 1) {
                    tnd_cpu_matmul_f32(pool, wt, W, n_in, n_out, x + t * n_in, 1, y1);
                    same = same && !memcmp(y1, y + t * n_out, (size_t)n_out * sizeof(float));
                }
                /* interleaved repetitions: read pass, f32 pass, int8 pass */
                double *bwv = malloc((size_t)reps * 6 * sizeof(double)), *gv = bwv + reps, *fv = gv + reps,
                       *cv = fv + reps, *g8 = cv + reps, *f8 = g8 + reps;
                for (int r = 0; r < reps; r++) {
                    bwv[r] = (double)bw_bytes / tnd_cpu_read_once(pool, bwbuf, bw_bytes) / 1e9;
                    gv[r] = pass_rate(tnd_cpu_matmul_f32, pool, wt, W, wbytes, copies, n_in, n_out, x, y1, copies, &cv[r]);
                    fv[r] = gv[r] / bwv[r];
                    if (int8) {
                        g8[r] = pass_rate(tnd_cpu_matmul, pool, wt, W, wbytes, copies, n_in, n_out, x, y1, copies, NULL);
                        f8[r] = g8[r] / bwv[r];
                    }
                }
                double gbs = median(gv, reps), bw = median(bwv, reps), frac = median(fv, reps), ct = median(cv, reps);
                double dt = (double)wbytes / gbs / 1e9;
                int hot_calls = reps * 4;
                double hot = pass_rate(tnd_cpu_matmul_f32, pool, wt, W, wbytes, 1, n_in, n_out, x, y1, hot_calls, NULL);
                n_cells++;
                n_pass += frac >= 0.85;
                char i8[64] = "";
                if (int8) {
                    double m8 = median(g8, reps), fr8 = median(f8, reps);
                    double h8 = pass_rate(tnd_cpu_matmul, pool, wt, W, wbytes, 1, n_in, n_out, x, y1, hot_calls, NULL);
                    n_pass8 += fr8 >= 0.85;
                    snprintf(i8, sizeof i8, " %.2f | %.0f%% | %.2f |", m8, 100.0 * fr8, h8);
                }
                free(bwv);
                char pf[96] = " - | - | - |";
                if (pf_here) {
                    /* best of 2; matvecs: n_pf one-token calls over the rotation */
                    double tp = 1e30;
                    for (int r = 0; r < 2; r++) {
                        double t0 = tnd_time_s();
                        tnd_cpu_matmul_f32(pool, wt, W, n_in, n_out, x, n_pf, y);
                        tp = fmin(tp, tnd_time_s() - t0);
                    }
                    double tm = (double)wbytes / pass_rate(tnd_cpu_matmul_f32, pool, wt, W, wbytes, copies, n_in, n_out,
                                                           x, y1, n_pf, NULL) / 1e9 * n_pf; /* n_pf x the median matvec */
                    snprintf(pf, sizeof pf, " %.0f | %.0f | %.1f |", n_pf / tp, n_pf / tm, tm / tp);
                }
                printf("| %s | %lldx%lld | %d | %.1f | %.1f | %.2f | %.2f | %.0f%% | %.2f | %.2f |%s %.2f%s%s |%s\n",
                       tnd_type_name(wt), (long long)n_in, (long long)n_out, nthreads[ti], (double)wbytes / (1 << 20),
                       dt * 1e6, gbs, bw, 100.0 * frac, (double)wbytes / (ct / nthreads[ti]) / 1e9, hot, i8, err, err <= 1 ? "" : " INVALID", same ? "" : " NOT-BITWISE", pf);
                fflush(stdout);
                tnd_aligned_free(W);
                free(x), free(y), free(y1);
            }
        }
        tnd_pool_free(pool);
    }
    printf("# cells at >= 85%% of the read bandwidth (median frac): f32 %d of %d", n_pass, n_cells);
    if (int8) printf(", int8 %d of %d", n_pass8, n_cells);
    printf("\n");
    tnd_aligned_free(bwbuf);
    return 0;
}
