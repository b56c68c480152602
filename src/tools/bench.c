/* tandem bench: prefill and decode throughput in the manner of llama-bench
 * (pp512 = one 512-token prompt from an empty cache, tg128 = 128 single-token
 * decode steps), mean ± standard deviation over repetitions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "tandem.h"
#include "tools.h"
#include "util.h"

#ifndef TND_GIT_COMMIT
#define TND_GIT_COMMIT "unknown"
#endif

static void usage(FILE *f) {
    fprintf(f, "usage: tandem bench [options]\n\n"
               "  -m, --model FILE   GGUF model (default: the default model)\n"
               "  -p, --n-prompt N   prompt tokens for the prefill test (default 512; 0 = skip)\n"
               "  -n, --n-gen N      tokens for the decode test (default 128; 0 = skip)\n"
               "  -d, --depth D      tokens already in the cache before the decode test (default 0)\n"
               "  -b, --batch-size N prefill chunk size (default: the prompt length)\n"
               "  -t, --threads N    CPU threads (default: physical cores)\n"
               "  -r, --repetitions N (default 3)\n"
               "  -o, --output md|json (default md)\n"
               "      --device cpu|cuda  (default cpu)\n"
               "      --vram-budget X    bytes (6G) or percent of the weights (50%%)\n");
}

static void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, cap, "%s", p);
            }
            break;
        }
    fclose(f);
}

typedef struct {
    const char *name; /* "pp512" */
    int n_tok;
    double mean, sd;  /* tokens per second */
    double samples[64];
    int n;
} result;

static void stats(result *r) {
    double s = 0, ss = 0;
    for (int i = 0; i < r->n; i++) s += r->samples[i];
    r->mean = r->n ? s / r->n : 0;
    for (int i = 0; i < r->n; i++) ss += (r->samples[i] - r->mean) * (r->samples[i] - r->mean);
    r->sd = r->n > 1 ? sqrt(ss / (r->n - 1)) : 0;
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *fmt = "md", *budget = NULL;
    tnd_device device = TND_DEVICE_CPU;
    long n_prompt = 512, n_gen = 128, depth = 0, threads = 0, reps = 3, batch = 0;
    for (int i = 1; i < argc; i += 2) { /* every option but --help takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (model = v) != NULL;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) ok = tools_parse_int(v, 0, 1 << 20, &n_prompt);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) ok = tools_parse_int(v, 0, 1 << 20, &n_gen);
        else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) ok = tools_parse_int(v, 0, 1 << 20, &depth);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) ok = tools_parse_int(v, 1, 1 << 16, &batch);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = tools_parse_int(v, 1, 1024, &threads);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) ok = tools_parse_int(v, 1, 64, &reps);
        else if (!strcmp(a, "--device")) {
            ok = v && (!strcmp(v, "cpu") || !strcmp(v, "cuda"));
            if (ok) device = strcmp(v, "cuda") ? TND_DEVICE_CPU : TND_DEVICE_CUDA;
        } else if (!strcmp(a, "--vram-budget")) ok = (budget = v) != NULL;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) ok = v && (!strcmp(v, "md") || !strcmp(v, "json")) && (fmt = v);
        else {
            fprintf(stderr, "tandem bench: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "tandem bench: bad or missing value for %s\n", a);
            return 2;
        }
    }
    if (!model && !(model = tools_default_model())) return 1;
    tnd_model_params mp = tnd_model_default_params();
    mp.n_threads = (int)threads;
    tnd_model *m;
    if (tnd_model_load(model, &mp, &m)) {
        tools_print_error(NULL);
        return 1;
    }
    int n_threads = threads ? (int)threads : tnd_physical_cores();
    tnd_ctx_params cp = tnd_ctx_default_params();
    long need = TND_MAX(n_prompt, depth + n_gen);
    cp.n_ctx = (int)TND_MAX(need, 16);
    cp.n_batch = (int)(batch ? batch : TND_MAX(n_prompt, 1));
    cp.device = device;
    if (budget && tnd_parse_budget(budget, m, &cp.vram_budget)) {
        tools_print_error(NULL);
        tnd_model_free(m);
        return 2;
    }
    tnd_ctx *c;
    if (tnd_ctx_new(m, &cp, &c)) {
        tools_print_error(NULL);
        tnd_model_free(m);
        return 1;
    }
    int nv = tnd_model_n_vocab(m);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)TND_MAX(need, 1));
    uint64_t x = 0x9E3779B97F4A7C15ull; /* fixed pseudo-random tokens: same work every run */
    for (long i = 0; i < TND_MAX(need, 1); i++) { /* at least one: the warm-up reads toks[0] */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[i] = (int32_t)(x % (uint64_t)nv);
    }
    result res[2] = {{0}};
    int nres = 0;
    char name_pp[32], name_tg[48];
    snprintf(name_pp, sizeof name_pp, "pp%ld", n_prompt);
    if (depth) snprintf(name_tg, sizeof name_tg, "tg%ld @ d%ld", n_gen, depth);
    else snprintf(name_tg, sizeof name_tg, "tg%ld", n_gen);
    int rc = 0;
    /* warm-up: touches the weights so page faults stay out of the timings */
    if (tnd_ctx_eval(c, toks, 1, NULL)) goto fail;
    if (n_prompt) {
        result *r = &res[nres++];
        r->name = name_pp;
        r->n_tok = (int)n_prompt;
        for (long k = 0; k < reps; k++) {
            tnd_ctx_truncate(c, 0);
            double t0 = tnd_time_s();
            if (tnd_ctx_eval(c, toks, (int)n_prompt, NULL)) goto fail;
            r->samples[r->n++] = (double)n_prompt / (tnd_time_s() - t0);
        }
        stats(r);
    }
    if (n_gen) {
        result *r = &res[nres++];
        r->name = name_tg;
        r->n_tok = (int)n_gen;
        for (long k = 0; k < reps; k++) {
            tnd_ctx_truncate(c, 0);
            if (depth && tnd_ctx_eval(c, toks, (int)depth, NULL)) goto fail;
            double t0 = tnd_time_s();
            for (long i = 0; i < n_gen; i++)
                if (tnd_ctx_eval(c, toks + depth + i, 1, NULL)) goto fail;
            r->samples[r->n++] = (double)n_gen / (tnd_time_s() - t0);
        }
        stats(r);
    }
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    const char *desc = tnd_model_desc(m);
    if (!strcmp(fmt, "json")) {
        printf("{\"model\": \"%s\", \"cpu\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"build\": \"%s\", "
               "\"device\": \"%s\", \"results\": [",
               model, cpu, n_threads, tnd_cpu_isa(), TND_GIT_COMMIT, device == TND_DEVICE_CUDA ? "cuda" : "cpu");
        for (int i = 0; i < nres; i++)
            printf("%s{\"test\": \"%s\", \"n_tokens\": %d, \"reps\": %d, \"tok_per_s\": %.3f, \"stddev\": %.3f}",
                   i ? ", " : "", res[i].name, res[i].n_tok, res[i].n, res[i].mean, res[i].sd);
        printf("]}\n");
    } else {
        printf("model: %s\ncpu: %s | threads: %d | isa: %s | device: %s | build: %s\n\n", desc, cpu, n_threads,
               tnd_cpu_isa(), device == TND_DEVICE_CUDA ? "cuda" : "cpu", TND_GIT_COMMIT);
        printf("| test | t/s |\n|---|---:|\n");
        for (int i = 0; i < nres; i++) printf("| %s | %.2f ± %.2f |\n", res[i].name, res[i].mean, res[i].sd);
    }
    goto done;
fail:
    tools_print_error("bench");
    rc = 1;
done:
    free(toks);
    tnd_ctx_free(c);
    tnd_model_free(m);
    return rc;
}
