/* Prefill: one matmul over n_tok tokens against n_tok separate matvecs, in
 * tokens per second, per format and shape, for each prefill kernel this
 * machine has: the per-ISA one (AVX2 / AVX-512 VNNI) and the AMX one.
 *
 * Build (CMake builds it as build/dev_matmul_prefill), or by hand:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude dev/matmul_prefill.c build/libtandem.a -lpthread -lm -o matmul_prefill
 * Run:
 *   build/dev_matmul_prefill [-t THREADS] [-f Q4_0,...] [-s 4096x4096,4096x14336] [-n 512] [-m MB]
 *                            [--isa avx2] [--no-amx] [--emu]
 * -s: NINxNOUT shapes (comma-separated). --no-amx: only the per-ISA kernel.
 * --emu: also the AMX kernel body with emulated tiles (slow; to check the
 * bench itself on a machine without AMX, with small -s and -n).
 *
 * The matvecs read their weights from DRAM (a rotation of copies totalling
 * -m MB, default 512), as decode steps do; the matmul reads its weights once.
 * Both include activation quantization. Each matmul variant's output is
 * checked against the scalar reference (vec_dot) on a sample of entries
 * first. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "cpu/matmul_amx.h"
#include "cpu/matmul_impl.h"
#include "cpu/pool.h"
#include "util.h"

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

/* Process CPU time: on a shared machine, compare with wall time. */
static double cpu_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Largest |y - reference| / S over a sample of entries (S = sum |w_i a_i|). */
static double check_sample(const tnd_type_traits *tr, const tnd_type_traits *at, const uint8_t *W, size_t rs,
                           int64_t n_in, int64_t n_out, const float *x, int64_t n_tok, const float *y) {
    void *xq = malloc(tnd_row_size(tr->vec_dot_type, n_in));
    float *wd = malloc((size_t)n_in * sizeof(float)), *ad = malloc((size_t)n_in * sizeof(float));
    double worst = 0;
    for (int64_t t = 0; t < n_tok; t += 37) {
        at->from_float(x + t * n_in, xq, n_in);
        at->to_float(xq, ad, n_in);
        for (int64_t r = t % 13; r < n_out; r += 97) {
            float ref = tr->vec_dot(n_in, W + r * rs, xq);
            tr->to_float(W + r * rs, wd, n_in);
            double S = 1e-30;
            for (int64_t i = 0; i < n_in; i++) S += fabs((double)wd[i] * ad[i]);
            double e = fabs((double)y[t * n_out + r] - ref) / S;
            if (!(e <= worst)) worst = e;
        }
    }
    free(xq);
    free(wd);
    free(ad);
    return worst;
}

int main(int argc, char **argv) {
    int nth = tnd_physical_cores();
    const char *types_arg = "Q4_0,Q4_1,Q8_0,Q4_K,Q6_K", *shapes_arg = "4096x4096,4096x14336";
    int64_t n_tok = 512;
    double mb = 512;
    bool amx = true, emu = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) shapes_arg = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_tok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-amx")) amx = false;
        else if (!strcmp(argv[i], "--emu")) emu = true;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            tnd_cpu_isa_id id = !strcmp(s, "scalar") ? TND_ISA_SCALAR : !strcmp(s, "avx2") ? TND_ISA_AVX2 : TND_ISA_AVX512;
            if (!tnd_cpu_isa_force(id)) fprintf(stderr, "ISA %s not available here\n", s);
        } else {
            fprintf(stderr, "usage: %s [-t N] [-f TYPES] [-s NINxNOUT,...] [-n TOKENS] [-m MB] [--isa ISA] [--no-amx] [--emu]\n",
                    argv[0]);
            return 2;
        }
    }
    tnd_pool *pool = tnd_pool_new(nth);
    /* variants: the per-ISA kernel, then AMX where it runs here */
    tnd_amx_mode modes[3];
    int n_modes = 0;
    modes[n_modes++] = TND_AMX_OFF;
    if (amx && tnd_cpu_amx_supported() && tnd_cpu_isa_id_current() == TND_ISA_AVX512) modes[n_modes++] = TND_AMX_HW;
    if (emu) modes[n_modes++] = TND_AMX_EMU;
    printf("# CPU %s\n# ISA %s, AMX %s, %d threads, %lld tokens\n", tnd_cpu_model_name(), tnd_cpu_isa(),
           tnd_cpu_amx_state(), tnd_pool_size(pool), (long long)n_tok);
    printf("| shape | format | kernel | matmul ms | matmul tok/s | %lld matvecs ms | matvec tok/s | ratio | matmul GOP/s | GOP/s per CPU-s of a thread | max err/S |\n",
           (long long)n_tok);
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    char *shapes = strdup(shapes_arg);
    char *save_s = NULL;
    for (char *sh = strtok_r(shapes, ",", &save_s); sh; sh = strtok_r(NULL, ",", &save_s)) {
        long long sa, sb;
        if (sscanf(sh, "%lldx%lld", &sa, &sb) != 2 || sa <= 0 || sb <= 0) {
            fprintf(stderr, "bad shape %s\n", sh);
            continue;
        }
        int64_t n_in = sa, n_out = sb;
        float *x = malloc((size_t)(n_in * n_tok) * sizeof(float)), *y = malloc((size_t)(n_out * n_tok) * sizeof(float));
        for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = frand();
        char *types = strdup(types_arg);
        char *save_t = NULL;
        for (char *tok = strtok_r(types, ",", &save_t); tok; tok = strtok_r(NULL, ",", &save_t)) {
            int wt = parse_type(tok);
            if (wt < 0) {
                fprintf(stderr, "unknown type %s\n", tok);
                continue;
            }
            const tnd_type_traits *tr = tnd_type_traits_get(wt), *at = tnd_type_traits_get(tr->vec_dot_type);
            size_t rs = tnd_row_size((tnd_type)wt, n_in), wbytes = rs * (size_t)n_out;
            if (!rs) continue;
            int copies = (int)(mb * 1048576.0 / (double)wbytes) + 1;
            uint8_t *W = tnd_aligned_alloc(wbytes * (size_t)copies);
            float *f = malloc((size_t)n_in * sizeof(float));
            for (int64_t r = 0; r < 64 && r < n_out; r++) {
                for (int64_t i = 0; i < n_in; i++) f[i] = frand() * 0.05f;
                tr->from_float(f, W + r * rs, n_in);
            }
            for (int64_t r = 64; r < n_out; r++) memcpy(W + r * rs, W + (r % 64) * rs, rs);
            for (int c = 1; c < copies; c++) memcpy(W + (size_t)c * wbytes, W, wbytes);

            /* matvecs: n_tok = 1 never takes the AMX path */
            tnd_cpu_amx_force(TND_AMX_OFF);
            double t0 = tnd_time_s();
            for (int64_t t = 0; t < n_tok; t++)
                tnd_cpu_matmul(pool, (tnd_type)wt, W + (size_t)(t % copies) * wbytes, n_in, n_out, x + t * n_in, 1,
                               y + t * n_out);
            double mv = tnd_time_s() - t0;

            for (int v = 0; v < n_modes; v++) {
                if (modes[v] != TND_AMX_OFF && !tnd_cpu_amx_kernel((tnd_type)wt, modes[v])) continue;
                tnd_cpu_amx_force(modes[v]);
                const char *kname = modes[v] == TND_AMX_HW ? "amx" : modes[v] == TND_AMX_EMU ? "amx-emu" : tnd_cpu_isa();
                /* validate on a sample, then time */
                tnd_cpu_matmul(pool, (tnd_type)wt, W, n_in, n_out, x, n_tok, y);
                double worst = check_sample(tr, at, W, rs, n_in, n_out, x, n_tok, y);
                double best_mm = 1e30, cpu_mm = 0;
                for (int rep = 0; rep < 3; rep++) {
                    double t1 = tnd_time_s(), c0 = cpu_time_s();
                    tnd_cpu_matmul(pool, (tnd_type)wt, W + (size_t)(rep % copies) * wbytes, n_in, n_out, x, n_tok, y);
                    double dt = tnd_time_s() - t1;
                    if (dt < best_mm) best_mm = dt, cpu_mm = (cpu_time_s() - c0) / tnd_pool_size(pool);
                }
                double gop = 2.0 * (double)n_in * (double)n_out * (double)n_tok / best_mm / 1e9;
                printf("| %lldx%lld | %s | %s | %.1f | %.0f | %.1f | %.0f | %.1fx | %.1f | %.1f | %.1e%s |\n",
                       (long long)n_in, (long long)n_out, tr->name, kname, best_mm * 1e3, (double)n_tok / best_mm,
                       mv * 1e3, (double)n_tok / mv, mv / best_mm, gop, gop * best_mm / cpu_mm / tnd_pool_size(pool),
                       worst, worst <= 1e-4 ? "" : " INVALID");
                fflush(stdout);
            }
            tnd_cpu_amx_force(TND_AMX_OFF);
            free(f);
            tnd_aligned_free(W);
        }
        free(types);
        free(x);
        free(y);
    }
    free(shapes);
    tnd_pool_free(pool);
    return 0;
}
