/* Hybrid execution on SimGPU (same kernels as the CPU): every placement and
 * every promotion set must give exactly the CPU-only logits and tokens
 * (DESIGN.md §14). Random placements of weights and KV caches, random
 * promotions, chunked prefill across several rounds, greedy decode; plus the
 * budget refusal and placement-file errors. Runs under ThreadSanitizer in CI.
 * Skips (77) when the default model is absent.
 *   TND_HYBRID_N: number of random placements (default 60; 8 sanitized). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "sim/sim.h"
#include "tandem.h"
#include "util.h"

static int failures;
#define CHECK(c, ...)                                                   \
    do {                                                                \
        if (!(c)) {                                                     \
            failures++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                               \
            fputc('\n', stderr);                                        \
        }                                                               \
    } while (0)

#define N_GEN 12

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Prefill (in rounds of n_batch) then N_GEN greedy tokens; the logits of
 * every step into lg[(N_GEN + 1) * nv]. */
static tnd_status generate(tnd_model *m, const tnd_ctx_params *cp, const int32_t *ids, int n, int32_t *out, float *lg,
                           int jitter_us) {
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, cp, &c);
    if (st) return st;
    /* random delays in the simulated streams shake out missing synchronization */
    if (jitter_us && c->gpu) tnd_sim_set_jitter(c->side[1].be, jitter_us, (uint64_t)jitter_us * 7919);
    int nv = tnd_model_n_vocab(m);
    st = tnd_ctx_eval(c, ids, n, lg);
    for (int i = 0; !st && i < N_GEN; i++) {
        out[i] = argmax(lg + (size_t)i * nv, nv);
        st = tnd_ctx_eval(c, &out[i], 1, lg + (size_t)(i + 1) * nv);
    }
    tnd_ctx_free(c);
    return st;
}

int main(void) {
    char path[4096];
    const char *src = getenv("TND_SRC");
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    if (access(path, R_OK) != 0) {
        printf("skipped: %s missing\n", path);
        return 77;
    }
    int n_place = getenv("TND_SANITIZED") ? 8 : 60;
    if (getenv("TND_HYBRID_N")) n_place = atoi(getenv("TND_HYBRID_N"));
    tnd_model_params mp = tnd_model_default_params();
    mp.n_threads = 2;
    tnd_model *m;
    if (tnd_model_load(path, &mp, &m)) {
        fprintf(stderr, "load: %s\n", tnd_last_error());
        return 1;
    }
    int nv = tnd_model_n_vocab(m);
    const char *text = "The capital of France is Paris, and the capital of Italy is";
    int32_t *ids;
    size_t n;
    CHECK(tnd_tokenize(tnd_model_tokenizer(m), text, strlen(text), true, false, &ids, &n) == TND_OK && n > 8, "tokenize");
    size_t nl = (size_t)(N_GEN + 1) * nv;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];

    /* CPU-only reference, prefill in rounds of 5 tokens */
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 5;
    CHECK(generate(m, &cp, ids, (int)n, ref_tok, ref, 0) == TND_OK, "cpu: %s", tnd_last_error());

    char spec[64], prom[64];
    uint64_t seed = 12345;
    int identical = 0;
    for (int k = 0; k < n_place; k++) {
        tnd_ctx_params hp = cp;
        hp.device = TND_DEVICE_SIM;
        hp.n_batch = 1 + (int)(tnd_splitmix64(&seed) % 12); /* prefill in rounds of 1..12 tokens */
        snprintf(spec, sizeof spec, "random:%d", k);
        hp.placement = k == 0 ? "gpu" : k == 1 ? "cpu" : spec;
        int pk = (int)(tnd_splitmix64(&seed) % 5); /* none, all, random, auto */
        snprintf(prom, sizeof prom, "random:%d", 1000 + k);
        hp.promote = pk == 0 ? "none" : pk == 1 ? "all" : pk == 4 ? "auto" : prom;
        tnd_status st = generate(m, &hp, ids, (int)n, tok, got, k % 2 ? 1 + k % 40 : 0);
        CHECK(st == TND_OK, "placement %s promote %s: %s", hp.placement, hp.promote, tnd_last_error());
        if (st) continue;
        bool same = !memcmp(tok, ref_tok, sizeof tok) && !memcmp(got, ref, sizeof(float) * nl);
        CHECK(same, "placement %s promote %s batch %d: output differs from the CPU", hp.placement, hp.promote, hp.n_batch);
        identical += same;
    }
    printf("%d of %d random placements/promotions identical to the CPU (logits bit for bit, %d tokens)\n", identical,
           n_place, N_GEN);

    /* A budget too small for the placement: a clear refusal, no crash. */
    tnd_ctx_params bp = cp;
    bp.device = TND_DEVICE_SIM;
    bp.placement = "gpu";
    bp.vram_budget = 10u << 20;
    tnd_ctx *c = NULL;
    CHECK(tnd_ctx_new(m, &bp, &c) == TND_ERR_NOMEM && !c, "a 10 MiB budget must refuse the all-GPU placement");
    CHECK(strstr(tnd_last_error(), "budget"), "message names the budget: %s", tnd_last_error());
    /* layer policy at a budget: fits (whole layers), never beyond it */
    bp.placement = "layer";
    bp.vram_budget = 150u << 20;
    CHECK(tnd_ctx_new(m, &bp, &c) == TND_OK, "layer policy at 150 MiB: %s", tnd_last_error());
    CHECK(c && c->gpu && c->lay.gpu_total <= bp.vram_budget && c->lay.w_gpu > 0, "layer policy: some layers within the budget");
    tnd_ctx_free(c);
    c = NULL;

    /* placement files: good and bad */
    char fpath[] = "/tmp/tnd_place_XXXXXX";
    int fd = mkstemp(fpath);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# attention on the GPU, FFN promoted\nblk.*.attn_* gpu\nblk.*.kv gpu\nblk.*.ffn_* promote\n");
    fclose(f);
    tnd_ctx_params fp = cp;
    fp.device = TND_DEVICE_SIM;
    fp.placement = fpath;
    CHECK(generate(m, &fp, ids, (int)n, tok, got, 0) == TND_OK && !memcmp(tok, ref_tok, sizeof tok),
          "placement file: %s", tnd_last_error());
    f = fopen(fpath, "w");
    fprintf(f, "blk.*.attn_q.weight gpu\nno.such.tensor gpu\n");
    fclose(f);
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG && strstr(tnd_last_error(), ":2:"), "bad file line: %s",
          tnd_last_error());
    f = fopen(fpath, "w");
    fprintf(f, "blk.0.attn_q.weight sideways\n");
    fclose(f);
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG, "bad side word");
    unlink(fpath);
    fp.placement = "random:x";
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG, "bad random seed");
    fp.placement = "gpu";
    fp.promote = "sometimes";
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG, "bad promotion set");

    free(ids);
    free(ref);
    free(got);
    tnd_model_free(m);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    else printf("ok\n");
    return failures ? 1 : 0;
}
