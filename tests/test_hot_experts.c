/* The live hot-expert table (runtime/hot.c) on SimGPU, a tiny synthetic MoE
 * model with a random placement that splits layers expert by expert:
 *   - told that its GPU experts take every routing (a table far from what
 *     the routing does), the context sees the measured share drift below
 *     it and swaps experts in place;
 *   - afterwards each split layer's GPU experts are its most used ones by
 *     the live table, and the measured share rises;
 *   - the logits and greedy tokens stay bit for bit the CPU's (exact mode)
 *     through the swaps: the arena slots hold the right experts;
 *   - a context made with no_adapt never swaps.
 * Skips (77) without the tandem binary (for synth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "runtime/internal.h"
#include "tandem.h"

#define N_PROMPT 1200
#define N_GEN 24

/* The prompt, then N_GEN greedy tokens; the last logits into lg, the tokens into tok. */
static tnd_status run(tnd_ctx *c, const int32_t *prompt, int nv, int32_t *tok, float *lg) {
    tnd_status st = tnd_ctx_eval(c, prompt, N_PROMPT, lg);
    for (int i = 0; !st && i < N_GEN; i++) {
        tok[i] = tc_argmax(lg, nv);
        st = tnd_ctx_eval(c, &tok[i], 1, lg);
    }
    return st;
}

int main(void) {
    tnd_model *m;
    int rc = fx_synth_load("tiny-qwen3moe", 2, &m);
    if (rc) return rc;
    const int nv = tnd_model_n_vocab(m);
    int32_t *prompt = tc_xmalloc(sizeof(int32_t) * N_PROMPT);
    fx_random_tokens(m, 11, prompt, N_PROMPT);

    tnd_ctx_params p = tnd_ctx_default_params();
    p.cpu_exact = true;
    p.n_ctx = N_PROMPT + N_GEN + 8;
    p.n_batch = 64;
    int32_t ref_tok[N_GEN], tok[N_GEN];
    float *ref_lg = tc_xmalloc(sizeof(float) * (size_t)nv), *lg = tc_xmalloc(sizeof(float) * (size_t)nv);
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &p, &c));
    if (c) CHECK_ST(run(c, prompt, nv, ref_tok, ref_lg));
    tnd_ctx_free(c);

    p.device = TND_DEVICE_SIM;
    p.hw = "rtx3060-laptop";
    p.placement = "random:5";
    for (int no_adapt = 0; no_adapt < 2; no_adapt++) {
        p.no_adapt = no_adapt;
        c = NULL;
        CHECK_ST(tnd_ctx_new(m, &p, &c));
        if (!c) break;
        const int L = c->pl.n_layer, E = c->pl.n_expert;
        CHECK(tnd_hot_assumed(c) >= 0, "the random placement split no layer: nothing to test");
        if (tnd_hot_assumed(c) < 0) {
            tnd_ctx_free(c);
            break;
        }
        /* the placement is taken to assume its GPU experts take every routing */
        double *pop = tc_xmalloc(sizeof(double) * (size_t)L * E);
        for (size_t i = 0; i < (size_t)L * E; i++) pop[i] = c->pl.exp[i] == TND_SIDE_GPU;
        tnd_hot_assume(c, pop);
        CHECK(tnd_hot_assumed(c) == 1.0, "assumed share %.3f", tnd_hot_assumed(c));
        free(pop);

        /* the first window (64 tokens): the measured share before any swap */
        CHECK_ST(tnd_ctx_eval(c, prompt, 64, NULL));
        tnd_ctx_stats s0;
        tnd_ctx_get_stats(c, &s0);
        CHECK_ST(tnd_ctx_truncate(c, 0));
        CHECK_ST(run(c, prompt, nv, tok, lg));
        tnd_ctx_stats s;
        tnd_ctx_get_stats(c, &s);
        const char *what = no_adapt ? "no_adapt" : "adaptive";
        CHECK(!memcmp(tok, ref_tok, sizeof tok) && !memcmp(lg, ref_lg, sizeof(float) * (size_t)nv),
              "%s: tokens or logits differ from the CPU's", what);
        if (no_adapt) {
            CHECK(s.n_expert_moves == 0, "no_adapt moved %llu experts", (unsigned long long)s.n_expert_moves);
        } else {
            CHECK(s.n_expert_moves > 0, "no swap in %d tokens although the share drifted from 1 to %.2f",
                  64 + N_PROMPT + N_GEN, s0.hot_measured);
            printf("GPU-hit share: %.3f in the first window, %.3f in the last; %llu experts moved\n", s0.hot_measured,
                   s.hot_measured, (unsigned long long)s.n_expert_moves);
            CHECK(s.hot_measured > s0.hot_measured, "the share did not rise: %.3f -> %.3f", s0.hot_measured,
                  s.hot_measured);
            /* each split layer holds its most used experts under the live table */
            for (int l = 0; l < L; l++) {
                if (!c->pl.split[l]) continue;
                double min_gpu = 1e30, max_cpu = -1;
                for (int e = 0; e < E; e++) {
                    double x = c->hot_pop[(size_t)l * E + e];
                    if (c->pl.exp[(size_t)l * E + e] == TND_SIDE_GPU) min_gpu = x < min_gpu ? x : min_gpu;
                    else max_cpu = x > max_cpu ? x : max_cpu;
                }
                /* within the swap rule's slack: the table moves on after the last swap */
                CHECK(min_gpu >= max_cpu - 0.25, "layer %d: a GPU expert at %.3f uses/token, a CPU one at %.3f", l,
                      min_gpu, max_cpu);
            }
        }
        tnd_ctx_free(c);
    }
    free(prompt), free(ref_lg), free(lg);
    tnd_model_free(m);
    return tc_summary();
}
