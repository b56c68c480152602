/* CPU attention (src/cpu/attn.c) by itself: microseconds per call of
 * tnd_cpu_attn_many over the f16 cache, for each vector ISA this machine
 * has and the scalar loop, alternated in one process (best of the
 * repetitions, so load from other processes biases none of them).
 *
 * Build: CMake builds it as build/dev_cpu_attn_bench.
 * Run:   build/dev_cpu_attn_bench [-p POS,...] [-s SEQS] [-l LAYERS] [-t THREADS]
 *                                 [--hd HEAD_DIM] [--heads N_HEAD/N_KV] [-r REPS] [--huge] [--no-scalar]
 *
 * Each call is one decode round: SEQS sequences, one query token each at
 * position POS, over caches of POS + 1 rows, as a batched round's runs are.
 * LAYERS separate caches are visited in turn (one call each), as a token's
 * layers are: with the default 30 and POS in the thousands they are far
 * beyond the last-level cache, as in decode; with -l 1 they stay hot.
 * --huge puts the caches on transparent huge pages (madvise), as the
 * engine's CPU KV reservation does (src/exec/layout.c).
 *
 * Defaults: the default model's shape (head_dim 64, 9 heads over 3 kv
 * heads), 4 sequences, positions 40, 300 and 2000, the physical cores
 * (-t 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu/matmul_impl.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "quant/quant.h"
#include "util.h"

static void *cache_alloc(size_t n, int huge) {
    void *p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, n)) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, n, MADV_HUGEPAGE);
#else
    (void)huge;
#endif
    return p;
}

static void usage(const char *me) {
    fprintf(stderr,
            "usage: %s [-p POS,...] [-s SEQS] [-l LAYERS] [-t THREADS] [--hd HEAD_DIM] [--heads N_HEAD/N_KV]"
            " [-r REPS] [--huge] [--no-scalar]\n",
            me);
    exit(2);
}

static int arg_int(const char *s, const char *what, int lo, int hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s is not an integer in [%d, %d]\n", what, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    const char *pos_list = "40,300,2000";
    int n_seq = 4, n_layer = 30, threads = 0, hd = 64, nh = 9, nkv = 3, reps = 20, huge = 0, scalar = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--huge")) huge = 1;
        else if (!strcmp(a, "--no-scalar")) scalar = 0;
        else if (!v) usage(argv[0]);
        else if (!strcmp(a, "-p")) pos_list = v, i++;
        else if (!strcmp(a, "-s")) n_seq = arg_int(v, "-s", 1, 256), i++;
        else if (!strcmp(a, "-l")) n_layer = arg_int(v, "-l", 1, 256), i++;
        else if (!strcmp(a, "-t")) threads = arg_int(v, "-t", 0, 1024), i++;
        else if (!strcmp(a, "--hd")) hd = arg_int(v, "--hd", 8, 512), i++;
        else if (!strcmp(a, "-r")) reps = arg_int(v, "-r", 1, 100000), i++;
        else if (!strcmp(a, "--heads")) {
            if (sscanf(v, "%d/%d", &nh, &nkv) != 2 || nh < 1 || nkv < 1 || nh % nkv) {
                fprintf(stderr, "--heads: %s is not N_HEAD/N_KV with N_KV dividing N_HEAD\n", v);
                return 2;
            }
            i++;
        } else usage(argv[0]);
    }
    long positions[64];
    int n_pos = 0;
    for (const char *p = pos_list; *p;) {
        char *end;
        const long pos = strtol(p, &end, 10);
        if (end == p || pos < 0 || pos > (1 << 24) || (*end && *end != ',') || n_pos == 64) {
            fprintf(stderr, "-p: %s is not a list of up to 64 positions in [0, 2^24]\n", pos_list);
            return 2;
        }
        positions[n_pos++] = pos;
        p = *end ? end + 1 : end;
    }
    tnd_pool *pool = tnd_pool_new(threads);
    if (!pool) {
        fprintf(stderr, "no thread pool: %s\n", tnd_last_error());
        return 1;
    }
    tnd_cpu_isa_id isas[3];
    const char *names[3] = {"scalar", "avx2", "avx512"};
    int n_isa = 0;
    for (int isa = scalar ? TND_ISA_SCALAR : TND_ISA_AVX2; isa <= (int)tnd_cpu_isa_best(); isa++)
        isas[n_isa++] = (tnd_cpu_isa_id)isa;
    printf("# %d threads, %d sequences x 1 query token, %d layers' caches%s; head_dim %d, %d/%d heads; best of %d\n",
           tnd_pool_size(pool), n_seq, n_layer, huge ? " on huge pages" : "", hd, nh, nkv, reps);
    printf("| position | cache MiB |");
    for (int k = 0; k < n_isa; k++) printf(" %s us/call |", names[isas[k]]);
    printf("\n|---:|---:|");
    for (int k = 0; k < n_isa; k++) printf("---:|");
    printf("\n");
    for (int pi = 0; pi < n_pos; pi++) {
        const long pos = positions[pi];
        const size_t rows = (size_t)pos + 1, row = (size_t)nkv * hd, per = rows * row; /* a sequence's cache */
        const size_t bytes = 2 * (size_t)n_layer * n_seq * per * sizeof(uint16_t);
        uint16_t *kv = cache_alloc(bytes, huge);
        float *q = malloc(sizeof(float) * (size_t)n_seq * nh * hd), *o = malloc(sizeof(float) * (size_t)n_seq * nh * hd);
        tnd_attn_args *a = malloc(sizeof *a * (size_t)n_layer * n_seq);
        if (!kv || !q || !o || !a) {
            fprintf(stderr, "out of memory for %.0f MiB of caches\n", bytes / 1048576.0);
            return 1;
        }
        for (size_t i = 0; i < bytes / 2; i++) kv[i] = tnd_fp32_to_fp16((float)rand() / RAND_MAX - 0.5f);
        for (int i = 0; i < n_seq * nh * hd; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int l = 0; l < n_layer; l++)
            for (int s = 0; s < n_seq; s++) {
                const uint16_t *k = kv + ((size_t)l * n_seq + s) * 2 * per;
                a[l * n_seq + s] = (tnd_attn_args){.q = q + (size_t)s * nh * hd, .k = k, .v = k + per,
                                                   .out = o + (size_t)s * nh * hd, .n_tok = 1, .pos0 = (int)pos,
                                                   .n_head = nh, .n_kv_head = nkv, .head_dim = hd,
                                                   .scale = 0.125f};
            }
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < n_isa; k++) {
                tnd_cpu_isa_force(isas[k]);
                double t0 = tnd_time_s();
                for (int l = 0; l < n_layer; l++) tnd_cpu_attn_many(pool, a + (size_t)l * n_seq, n_seq);
                const double t = (tnd_time_s() - t0) / n_layer;
                best[k] = t < best[k] ? t : best[k];
            }
        printf("| %ld | %.1f |", pos, bytes / 1048576.0);
        for (int k = 0; k < n_isa; k++) printf(" %.2f |", best[k] * 1e6);
        printf("\n");
        free(kv), free(q), free(o), free(a);
    }
    tnd_pool_free(pool);
    return 0;
}
