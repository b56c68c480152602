/* Matvec (decode) throughput of the CPU kernels, in GB/s of weights read,
 * next to this machine's read bandwidth measured in the same run.
 *
 * Build (CMake builds it as build/dev_matvec_bw), or by hand:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude dev/matvec_bw.c build/libtandem.a -lpthread -lm -o matvec_bw
 * Run:
 *   build/dev_matvec_bw [-t 1,2] [-f Q4_0,Q8_0,...] [-s 4096x4096,...] [-n TOKENS] [-r REPS] [-m MB] [--isa avx2]
 *
 * -n: tokens per call (default 1; 4 is a batched round of four sequences).
 *
 * Shapes are n_in x n_out (ne0 x ne1 of the GGUF tensor): 4096x14336 is an
 * FFN up projection of an 8B model, 14336x4096 its down projection.
 *
 * Method: the read bandwidth is a streaming sum over a buffer much larger
 * than the last-level cache (-m MB, default 1024), with 1 thread and with the
 * pool, timed per 16 MiB piece. Each matvec (-n tokens, activation quantization included) runs over a
 * rotation of copies of the weight matrix totalling >= that size too, so
 * every call reads its weights from DRAM, as in a real decode step where the
 * other layers evicted them. GB/s and the fraction use the best call and the
 * best bandwidth pass (the same rule, so load from other processes biases
 * neither); the mean time per call is shown too. Before timing, the kernel's output is checked
 * against the scalar reference (vec_dot of the type) on the first copy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "cpu/matmul_impl.h"
#include "cpu/membw.h"
#include "cpu/pool.h"
#include "util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Read bandwidth: the library's measurement (cpu/membw.h), timed over 16 MiB
 * pieces like the matvecs, so both see the same luck on a busy machine. */
static double measure_bw(tnd_pool *pool, const uint8_t *buf, size_t n, int reps) {
    return tnd_cpu_read_bw(pool, buf, n, reps);
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

/* Fills W (n_out rows) with properly quantized random rows: 64 distinct rows
 * quantized by the reference, repeated (quantizing 100M values would take
 * longer than the benchmark). */
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

/* Max |kernel - reference| / S over all rows (S = sum |w a|), via vec_dot. */
static double validate(tnd_pool *pool, tnd_type wt, const void *W, int64_t n_in, int64_t n_out, const float *x) {
    const tnd_type_traits *tr = tnd_type_traits_get(wt), *at = tnd_type_traits_get(tr->vec_dot_type);
    size_t rs = tnd_row_size(wt, n_in);
    float *y = malloc((size_t)n_out * sizeof(float));
    tnd_cpu_matmul(pool, wt, W, n_in, n_out, x, 1, y);
    void *xq = malloc(tnd_row_size(tr->vec_dot_type, n_in));
    at->from_float(x, xq, n_in);
    float *wd = malloc((size_t)n_in * sizeof(float)), *ad = malloc((size_t)n_in * sizeof(float));
    at->to_float(xq, ad, n_in);
    double worst = 0;
    int64_t step = n_out > 512 ? n_out / 512 : 1; /* a sample of rows keeps this quick */
    for (int64_t r = 0; r < n_out; r += step) {
        const void *w = (const char *)W + r * rs;
        float ref = tr->vec_dot(n_in, w, xq);
        tr->to_float(w, wd, n_in);
        double S = 1e-30;
        for (int64_t i = 0; i < n_in; i++) S += fabs((double)wd[i] * ad[i]);
        double e = fabs((double)y[r] - ref) / S;
        if (!(e <= worst)) worst = e; /* NaN sticks */
    }
    free(y);
    free(xq);
    free(wd);
    free(ad);
    return worst;
}

typedef struct shape { int64_t n_in, n_out; } shape;

/* Process CPU time: on a shared machine, wall time / CPU time shows how much
 * of the run other processes took. */
static double cpu_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *threads_arg = NULL, *types_arg = "Q4_0,Q4_1,Q8_0,Q4_K,Q6_K", *shapes_arg = "4096x4096,4096x14336,5120x17408,14336x4096";
    int reps = 50, ntok = 1;
    double mb = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads_arg = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) shapes_arg = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) ntok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            tnd_cpu_isa_id id = !strcmp(s, "scalar") ? TND_ISA_SCALAR : !strcmp(s, "avx2") ? TND_ISA_AVX2 : TND_ISA_AVX512;
            if (!tnd_cpu_isa_force(id)) fprintf(stderr, "ISA %s not available here\n", s);
        } else {
            fprintf(stderr, "usage: %s [-t 1,N] [-f TYPES] [-s NINxNOUT,...] [-n TOKENS] [-r REPS] [-m MB] [--isa scalar|avx2|avx512]\n", argv[0]);
            return 2;
        }
    }
    int nthreads[8], n_nt = 0;
    if (threads_arg) {
        char *s = strdup(threads_arg);
        for (char *tok = strtok(s, ","); tok && n_nt < 8; tok = strtok(NULL, ",")) nthreads[n_nt++] = atoi(tok);
        free(s);
    } else {
        nthreads[n_nt++] = 1;
        if (tnd_physical_cores() > 1) nthreads[n_nt++] = tnd_physical_cores();
    }
    shape shapes[16];
    int n_sh = 0;
    {
        char *s = strdup(shapes_arg);
        for (char *tok = strtok(s, ","); tok && n_sh < 16; tok = strtok(NULL, ",")) {
            long long a, b;
            if (sscanf(tok, "%lldx%lld", &a, &b) == 2) shapes[n_sh++] = (shape){a, b};
        }
        free(s);
    }
    int types[32], n_ty = 0;
    {
        char *s = strdup(types_arg);
        for (char *tok = strtok(s, ","); tok && n_ty < 32; tok = strtok(NULL, ",")) {
            int t = parse_type(tok);
            if (t < 0) fprintf(stderr, "unknown type %s\n", tok);
            else types[n_ty++] = t;
        }
        free(s);
    }

    size_t bw_bytes = (size_t)(mb * 1024 * 1024) & ~(size_t)4095;
    uint8_t *bwbuf = tnd_aligned_alloc(bw_bytes);
    if (!bwbuf) return 1;
    memset(bwbuf, 1, bw_bytes);
    if (ntok < 1 || ntok > 64) {
        fprintf(stderr, "-n: 1 to 64 tokens\n");
        return 2;
    }
    printf("# ISA %s; read-bandwidth buffer %.0f MiB; %d reps; %d token(s) a call\n", tnd_cpu_isa(), mb, reps, ntok);
    printf("| format | shape (n_in x n_out) | threads | MiB | us/call (mean) | us (best) | cpu us/thread | GB/s (best) | read BW GB/s | fraction | max err/S |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int ti = 0; ti < n_nt; ti++) {
        tnd_pool *pool = tnd_pool_new(nthreads[ti]);
        double bw = measure_bw(pool, bwbuf, bw_bytes, 2);
        for (int yi = 0; yi < n_ty; yi++) {
            tnd_type wt = (tnd_type)types[yi];
            for (int si = 0; si < n_sh; si++) {
                int64_t n_in = shapes[si].n_in, n_out = shapes[si].n_out;
                size_t rs = tnd_row_size(wt, n_in), wbytes = rs * (size_t)n_out;
                if (!rs) {
                    printf("| %s | %lldx%lld | - | n_in not a multiple of the block |\n", tnd_type_name(wt),
                           (long long)n_in, (long long)n_out);
                    continue;
                }
                int copies = (int)((double)bw_bytes / (double)wbytes) + 1;
                if (copies < 2) copies = 2;
                uint8_t *W = tnd_aligned_alloc(wbytes * (size_t)copies);
                float *x = malloc((size_t)(n_in * ntok) * sizeof(float)), *y = malloc((size_t)(n_out * ntok) * sizeof(float));
                if (!W || !x || !y) {
                    fprintf(stderr, "out of memory\n");
                    return 1;
                }
                fill_weights(wt, W, n_in, n_out);
                for (int c = 1; c < copies; c++) memcpy(W + (size_t)c * wbytes, W, wbytes);
                for (int64_t i = 0; i < n_in * ntok; i++) x[i] = frand();
                double err = validate(pool, wt, W, n_in, n_out, x);
                /* warm-up pass over every copy (page faults, pool wake) */
                for (int c = 0; c < copies; c++) tnd_cpu_matmul(pool, wt, W + (size_t)c * wbytes, n_in, n_out, x, ntok, y);
                int calls = reps;
                double t0 = tnd_time_s(), c0 = cpu_time_s(), best = 1e30;
                for (int k = 0; k < calls; k++) {
                    double tk = tnd_time_s();
                    tnd_cpu_matmul(pool, wt, W + (size_t)(k % copies) * wbytes, n_in, n_out, x, ntok, y);
                    best = fmin(best, tnd_time_s() - tk);
                }
                double dt = (tnd_time_s() - t0) / calls, ct = (cpu_time_s() - c0) / calls / nthreads[ti];
                /* best call against the best bandwidth pass: the same rule
                 * for both, so other load on the machine biases neither */
                double gbs = (double)wbytes / best / 1e9;
                printf("| %s | %lldx%lld | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.0f%% | %.1e%s |\n", tnd_type_name(wt),
                       (long long)n_in, (long long)n_out, nthreads[ti], (double)wbytes / (1 << 20), dt * 1e6, best * 1e6, ct * 1e6, gbs, bw,
                       100.0 * gbs / bw, err, err <= 1e-4 ? "" : " INVALID");
                fflush(stdout);
                tnd_aligned_free(W);
                free(x);
                free(y);
            }
        }
        tnd_pool_free(pool);
    }
    tnd_aligned_free(bwbuf);
    return 0;
}
