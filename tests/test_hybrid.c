/* Hybrid execution on SimGPU (same kernels as the CPU): every placement and
 * every promotion set must give exactly the CPU-only logits and tokens
 * (docs/ARCHITECTURE.md, Testing). Random placements of weights and KV
 * caches, random promotions, chunked prefill across several rounds, greedy
 * decode; plus the budget refusal and placement-file errors. Runs under
 * ThreadSanitizer in CI.
 * The rounds' sizes vary from run to run, so these runs use the CPU's exact
 * mode (cpu_exact), whose results do not depend on how the tokens are
 * chunked; the default Q8 activations take other kernels for other token
 * counts, and the rounding makes the logits chaotic in that (tests/
 * test_ref_logits.py), so a few placements in the default mode keep the
 * reference's chunking and must match it bit for bit too.
 * Skips (77) when the default model is absent (with TND_TSAN: when TND_BIN,
 * the tandem binary that synthesizes the model, is not set).
 *   TND_HYBRID_N: number of random placements (default 60; 8 sanitized).
 *   TND_TSAN: under ThreadSanitizer (scripts/test.sh), where races, not the
 *   model, are the point and every op runs ~10x slower: the dense part runs
 *   on the tiny synthetic llama (`tandem synth`) instead of the default
 *   model (its prompt given as ids), with the same placements, promotions
 *   and checks, and auto promotions time the GPU with a hardware profile
 *   (auto_hw). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "runtime/runtime.h"
#include "sched/perf.h"
#include "model_fixture.h"
#include "sim/sim.h"
#include "tandem.h"
#include "util.h"

#define N_GEN 12

/* Prefill (in rounds of n_batch) then N_GEN greedy tokens; the logits of
 * every step into lg[(N_GEN + 1) * nv]. */
static tnd_status generate(tnd_model *m, const tnd_ctx_params *cp, const int32_t *ids, int n, int32_t *out, float *lg,
                           int jitter_us) {
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, cp, &c);
    if (st) return st;
    /* random delays in the simulated streams shake out missing synchronization */
    if (jitter_us && c->gpu) tnd_sim_set_jitter(c->side[1].be, jitter_us, (uint64_t)jitter_us * 7919);
    st = fx_greedy(c, ids, n, N_GEN, out, lg);
    tnd_ctx_free(c);
    return st;
}

/* Auto promotions need the perf DB, and profiling a SimGPU without a
 * hardware profile times each of its ops for real: minutes under TSan. There
 * (TND_TSAN) the built-in profile's model gives the GPU's times instead:
 * seconds, and the same tokens (it changes no result, only the clock). */
static void auto_hw(tnd_ctx_params *p) {
    if (p->promote && !strcmp(p->promote, "auto") && getenv("TND_TSAN")) p->hw = "rtx3060-laptop";
}

/* A round long enough that routing picks nearly every expert copies its
 * promoted expert tensors ahead of the routing (tnd_perf_experts_ahead):
 * each whole, or a split layer's CPU experts, all of them; a decode step
 * still copies only what routing chose. The bytes copied say which, and
 * the tokens and logits are the CPU's bit for bit. N: the round's tokens,
 * past the GPU's pair kernels (TND_MMID_PAIRS_MAX_TOK) or within them. */
static void moe_ahead(tnd_model *m, const tnd_ctx_params *cp0, const int N) {
    tnd_ctx_params cpv = *cp0, *cp = &cpv;
    cpv.n_ctx = 96;
    const int nv = tnd_model_n_vocab(m), E = m->hp.n_expert;
    int32_t ids[96], ref_tok[N_GEN], tok[N_GEN];
    if (N + N_GEN > cpv.n_ctx) {
        CHECK(0, "moe ahead: %d tokens do not fit", N);
        return;
    }
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 5) % nv);
    CHECK(tnd_perf_experts_ahead(m, N) && !tnd_perf_experts_ahead(m, 1) &&
              !tnd_perf_experts_ahead(m, TND_PREDICT_MAX_TOK),
          "rounds of %d tokens copy experts ahead, of 1 and %d (the slots' rounds) not", N, TND_PREDICT_MAX_TOK);
    size_t nl = (size_t)(N_GEN + 1) * nv;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    CHECK(generate(m, cp, ids, N, ref_tok, ref, 0) == TND_OK, "moe cpu, %d-token prompt: %s", N, tnd_last_error());
    for (int k = 0; k < 3; k++) {
        tnd_ctx_params hp = *cp;
        char spec[32];
        snprintf(spec, sizeof spec, "random:%d", 70 + k);
        hp.device = TND_DEVICE_SIM;
        hp.n_batch = N;
        hp.placement = spec;
        hp.promote = "all";
        tnd_ctx *c;
        if (tnd_ctx_new(m, &hp, &c) != TND_OK) {
            CHECK(0, "moe ahead %s: %s", spec, tnd_last_error());
            continue;
        }
        /* the prompt's round: every promoted slice whole, a split layer's CPU experts all */
        uint64_t want = 0;
        int split = 0;
        for (int i = 0; i < m->n_slices; i++) {
            const tnd_weight *w = m->slices[i];
            if (!c->pl.promote[i]) continue;
            const int l = tnd_slice_layer(w);
            if (w->n_expert > 1 && l >= 0 && c->pl.split[l]) {
                int n_cpu = 0;
                for (int e = 0; e < E; e++) n_cpu += c->exp_gpu[(size_t)l * E + e] < 0;
                want += w->t->nbytes / E * (uint64_t)n_cpu;
                split++;
            } else {
                want += w->t->nbytes;
            }
        }
        uint64_t b0 = c->w_copy_bytes;
        tnd_status st = tnd_ctx_eval(c, ids, N, got);
        uint64_t b1 = c->w_copy_bytes;
        for (int i = 0; !st && i < N_GEN; i++) {
            tok[i] = tc_argmax(got + (size_t)i * nv, nv);
            st = tnd_ctx_eval(c, &tok[i], 1, got + (size_t)(i + 1) * nv);
            /* a decode step: at most the routing's k experts of each promoted expert tensor */
            if (i == 0 && !st) {
                uint64_t most = 0;
                for (int j = 0; j < m->n_slices; j++)
                    if (c->pl.promote[j])
                        most += m->slices[j]->n_expert > 1 ? m->slices[j]->t->nbytes / E * (uint64_t)m->hp.n_expert_used
                                                           : m->slices[j]->t->nbytes;
                CHECK(c->w_copy_bytes - b1 <= most, "%s: a decode step copied %llu bytes, routing allows %llu", spec,
                      (unsigned long long)(c->w_copy_bytes - b1), (unsigned long long)most);
            }
        }
        CHECK(st == TND_OK, "moe ahead %s: %s", spec, tnd_last_error());
        CHECK(split > 0 && b1 - b0 == want, "%s: the prompt's round copied %llu bytes, ahead %llu (%d split tensors)",
              spec, (unsigned long long)(b1 - b0), (unsigned long long)want, split);
        CHECK(!st && !memcmp(tok, ref_tok, sizeof tok) && !memcmp(got, ref, sizeof(float) * nl),
              "moe ahead %s: output differs from the CPU", spec);
        tnd_ctx_free(c);
    }
    free(ref);
    free(got);
}

/* MoE layers split expert by expert (random:K splits most layers, each
 * expert on a random side), with and without promotions, against the CPU:
 * logits bit for bit. The tiny qwen3moe comes from `tandem synth`. */
static void test_moe(int n_place) {
    char path[64];
    int rc = fx_synth("tiny-qwen3moe", "", path, sizeof path);
    if (rc == 77) return; /* no tandem binary: this part skipped, not passed */
    CHECK(rc == 0, "synth tiny-qwen3moe");
    if (rc) return;
    tnd_model *m = fx_load(path, 2);
    if (!m) {
        CHECK(0, "load moe");
        unlink(path);
        return;
    }
    int nv = tnd_model_n_vocab(m), E = m->hp.n_expert;
    const int32_t ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190, 8, 400, 11, 23};
    int n = (int)(sizeof ids / sizeof *ids);
    size_t nl = (size_t)(N_GEN + 1) * nv;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 6;
    cp.cpu_exact = true; /* the rounds' sizes vary below (the top of the file) */
    CHECK(generate(m, &cp, ids, n, ref_tok, ref, 0) == TND_OK, "moe cpu: %s", tnd_last_error());
    int split_layers = 0, identical = 0, runs = n_place / 2 > 4 ? n_place / 2 : 4;
    uint64_t seed = 777;
    char spec[64], prom[64];
    for (int k = 0; k < runs; k++) {
        tnd_ctx_params hp = cp;
        hp.device = TND_DEVICE_SIM;
        hp.n_batch = 1 + (int)(tnd_splitmix64(&seed) % 12);
        snprintf(spec, sizeof spec, "random:%d", 50 + k);
        snprintf(prom, sizeof prom, "random:%d", 2000 + k);
        int pk = k % 4;
        hp.placement = spec;
        hp.promote = pk == 0 ? "none" : pk == 1 ? "all" : pk == 2 ? prom : "auto";
        auto_hw(&hp);
        /* the placement really splits layers: count them, and the GPU's experts are resident */
        tnd_ctx *c;
        if (tnd_ctx_new(m, &hp, &c) == TND_OK) {
            for (int l = 0; l < m->hp.n_layer; l++) {
                if (!c->pl.split[l]) continue;
                int g = tnd_placement_gpu_experts(m, &c->pl, l);
                split_layers++;
                CHECK(g > 0 && g < E && c->exp_gpu, "split layer %d has %d of %d experts on the GPU", l, g, E);
                const tnd_weight *w = &m->layers[l].up_exps;
                CHECK(c->w[1][w->id] && tnd_slice_gpu_bytes(m, &c->pl, w->id) == w->t->nbytes / E * g,
                      "split layer %d: resident experts", l);
            }
            tnd_ctx_free(c);
        }
        tnd_status st = generate(m, &hp, ids, n, tok, got, k % 2 ? 1 + k % 30 : 0);
        CHECK(st == TND_OK, "moe %s promote %s: %s", hp.placement, hp.promote, tnd_last_error());
        if (st) continue;
        bool same = !memcmp(tok, ref_tok, sizeof tok) && !memcmp(got, ref, sizeof(float) * nl);
        CHECK(same, "moe placement %s promote %s batch %d: output differs from the CPU", hp.placement, hp.promote,
              hp.n_batch);
        identical += same;
    }
    CHECK(split_layers >= runs, "random placements split only %d layers in %d runs", split_layers, runs);
    printf("moe: %d of %d split placements identical to the CPU (%d split layers)\n", identical, runs, split_layers);

    /* tnd_ctx_new_placed (the profile's calibration contexts): the placement
     * given is the one used, whole (split layers and experts included), the
     * params' placement and promotions ignored, and the prompt's logits are
     * the CPU's; a placement that promotes automatically is refused. */
    {
        tnd_placement pl;
        CHECK(tnd_placement_make(m, "random:51", NULL, 0, 0, &pl) == TND_OK, "random:51: %s", tnd_last_error());
        tnd_ctx_params fp = cp;
        fp.device = TND_DEVICE_SIM;
        fp.placement = "gpu";
        fp.promote = "all";
        tnd_ctx *c = NULL;
        CHECK(tnd_ctx_new_placed(m, &fp, &pl, &c) == TND_OK, "new_placed: %s", tnd_last_error());
        if (c) {
            const int L = m->hp.n_layer;
            bool same = !memcmp(c->pl.where, pl.where, (size_t)m->n_slices) &&
                        !memcmp(c->pl.kv, pl.kv, (size_t)L) && !memcmp(c->pl.split, pl.split, (size_t)L) &&
                        !memcmp(c->pl.exp, pl.exp, (size_t)L * E) &&
                        !memcmp(c->pl.promote, pl.promote, (size_t)m->n_slices);
            int n_split = 0;
            for (int l = 0; l < L; l++) n_split += pl.split[l];
            CHECK(same && n_split > 0 && c->lay.n_slots == 0, "new_placed keeps the placement (%d split layers), "
                  "no slots (%d)", n_split, c->lay.n_slots);
            CHECK(tnd_ctx_eval(c, ids, n, got) == TND_OK && !memcmp(got, ref, sizeof(float) * nv),
                  "new_placed: the prompt's logits are the CPU's");
            tnd_ctx_free(c);
        }
        pl.promote_auto = true;
        c = NULL;
        CHECK(tnd_ctx_new_placed(m, &fp, &pl, &c) == TND_ERR_ARG && !c, "new_placed refuses promote_auto");
        tnd_clear_error();
        tnd_placement_free(&pl);
    }

    /* placement files: single experts and patterns over them; written back and reloaded the same */
    char fpath[] = "/tmp/tnd_place_XXXXXX";
    int fd = mkstemp(fpath);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "blk.*.kv gpu\nblk.1.exp.* gpu\nblk.1.exp.1? cpu\nblk.2.exp.3 gpu\nblk.3.ffn_up_exps.weight gpu\n"
               "blk.3.exp.0 gpu\nblk.3.ffn_*_exps.weight cpu\n");
    fclose(f);
    tnd_ctx_params fp = cp;
    fp.device = TND_DEVICE_SIM;
    fp.placement = fpath;
    fp.promote = "all";
    tnd_ctx *c;
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_OK, "expert placement file: %s", tnd_last_error());
    if (c) {
        CHECK(!c->pl.split[0] && c->pl.split[1] && c->pl.split[2] && !c->pl.split[3], "split layers from the file");
        CHECK(tnd_placement_gpu_experts(m, &c->pl, 1) == E - 10 && tnd_placement_gpu_experts(m, &c->pl, 2) == 1,
              "experts on the GPU: %d, %d", tnd_placement_gpu_experts(m, &c->pl, 1),
              tnd_placement_gpu_experts(m, &c->pl, 2));
        CHECK(c->pl.promote[m->layers[2].down_exps.id] && c->lay.n_slots > 0, "split layers promote their CPU experts");
        /* the GPU holds only its experts: the layout is smaller than with whole tensors */
        uint64_t want = 0;
        for (int l = 1; l <= 2; l++) {
            const tnd_weight *e3[] = {&m->layers[l].gate_exps, &m->layers[l].up_exps, &m->layers[l].down_exps};
            for (int j = 0; j < 3; j++) want += (e3[j]->t->nbytes / E * tnd_placement_gpu_experts(m, &c->pl, l) + 255) & ~255ull;
        }
        CHECK(c->lay.w_gpu >= want && c->lay.w_gpu < want + (4u << 20), "resident bytes %llu for %llu of experts",
              (unsigned long long)c->lay.w_gpu, (unsigned long long)want);
        FILE *o = fopen(fpath, "w");
        CHECK(o && tnd_placement_write(m, &c->pl, o) == TND_OK, "write placement");
        if (o) fclose(o);
        tnd_ctx *c2;
        fp.promote = "none";
        CHECK(tnd_ctx_new(m, &fp, &c2) == TND_OK, "reload: %s", tnd_last_error());
        if (c2) {
            CHECK(!memcmp(c2->pl.split, c->pl.split, (size_t)m->hp.n_layer) &&
                      !memcmp(c2->pl.exp, c->pl.exp, (size_t)m->hp.n_layer * E),
                  "a written placement reloads the same");
            tnd_ctx_free(c2);
        }
        tnd_ctx_free(c);
        fp.promote = "all";
        f = fopen(fpath, "w");
        fprintf(f, "blk.*.kv gpu\nblk.1.exp.* gpu\nblk.1.exp.1? cpu\nblk.2.exp.3 gpu\n");
        fclose(f);
        CHECK(generate(m, &fp, ids, n, tok, got, 3) == TND_OK && !memcmp(got, ref, sizeof(float) * nl),
              "expert placement file: output differs from the CPU (%s)", tnd_last_error());
    }
    f = fopen(fpath, "w");
    fprintf(f, "blk.1.exp.3 promote\n");
    fclose(f);
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG, "an expert is not promoted by name");
    f = fopen(fpath, "w");
    fprintf(f, "blk.1.exp.99 gpu\n");
    fclose(f);
    CHECK(tnd_ctx_new(m, &fp, &c) == TND_ERR_ARG && strstr(tnd_last_error(), "matches no"), "no such expert");
    unlink(fpath);
    moe_ahead(m, &cp, 72);
    moe_ahead(m, &cp, 32); /* a batched decode round's size: the GPU's pair kernels */
    free(ref);
    free(got);
    tnd_model_free(m);
    unlink(path);
}

int main(void) {
    char path[4096];
    bool tiny; /* the top of the file */
    int rc = fx_test_model(path, sizeof path, &tiny);
    if (rc) return rc;
    int n_place = getenv("TND_SANITIZED") ? 8 : 60;
    if (getenv("TND_HYBRID_N")) n_place = atoi(getenv("TND_HYBRID_N"));
    tnd_model *m = fx_load(path, 2);
    if (tiny) unlink(path);
    if (!m) return 1;
    int nv = tnd_model_n_vocab(m);
    int32_t *ids;
    size_t n;
    if (tiny) { /* random weights: any ids will do */
        static const int32_t tiny_ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2};
        n = sizeof tiny_ids / sizeof *tiny_ids;
        ids = malloc(sizeof tiny_ids);
        memcpy(ids, tiny_ids, sizeof tiny_ids);
    } else {
        const char *text = "The capital of France is Paris, and the capital of Italy is";
        CHECK(tnd_tokenize(tnd_model_tokenizer(m), text, strlen(text), true, false, &ids, &n) == TND_OK && n > 8,
              "tokenize");
    }
    size_t nl = (size_t)(N_GEN + 1) * nv;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];

    /* CPU-only reference, prefill in rounds of 5 tokens */
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 5;
    cp.cpu_exact = true; /* the rounds' sizes vary below (the top of the file) */
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
        auto_hw(&hp);
        tnd_status st = generate(m, &hp, ids, (int)n, tok, got, k % 2 ? 1 + k % 40 : 0);
        CHECK(st == TND_OK, "placement %s promote %s: %s", hp.placement, hp.promote, tnd_last_error());
        if (st) continue;
        bool same = !memcmp(tok, ref_tok, sizeof tok) && !memcmp(got, ref, sizeof(float) * nl);
        CHECK(same, "placement %s promote %s batch %d: output differs from the CPU", hp.placement, hp.promote, hp.n_batch);
        identical += same;
    }
    printf("%d of %d random placements/promotions identical to the CPU (logits bit for bit, %d tokens)\n", identical,
           n_place, N_GEN);

    /* The default mode (Q8 activations), rounds of 5 tokens on both sides. */
    {
        tnd_ctx_params qp = cp;
        qp.cpu_exact = false;
        float *qref = malloc(sizeof(float) * nl);
        int32_t qref_tok[N_GEN];
        CHECK(qref && generate(m, &qp, ids, (int)n, qref_tok, qref, 0) == TND_OK, "cpu q8: %s", tnd_last_error());
        int n_q8 = n_place < 6 ? n_place : 6, same_q8 = 0;
        for (int k = 0; k < n_q8; k++) {
            tnd_ctx_params hp = qp;
            hp.device = TND_DEVICE_SIM;
            snprintf(spec, sizeof spec, "random:%d", 500 + k);
            hp.placement = k == 0 ? "gpu" : spec;
            snprintf(prom, sizeof prom, "random:%d", 1500 + k);
            hp.promote = k % 3 == 0 ? "none" : k % 3 == 1 ? "all" : prom;
            tnd_status st = generate(m, &hp, ids, (int)n, tok, got, k % 2 ? 1 + k : 0);
            CHECK(st == TND_OK, "q8 placement %s promote %s: %s", hp.placement, hp.promote, tnd_last_error());
            if (st) continue;
            bool same = !memcmp(tok, qref_tok, sizeof tok) && !memcmp(got, qref, sizeof(float) * nl);
            CHECK(same, "q8 placement %s promote %s: output differs from the CPU", hp.placement, hp.promote);
            same_q8 += same;
        }
        printf("%d of %d placements in the default mode (Q8 activations) identical to the CPU\n", same_q8, n_q8);
        free(qref);
    }

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
    test_moe(n_place);
    return tc_summary();
}
