/* The MoE ablations (tnd_ctx_params.moe_ablate; bench --ablate) on SimGPU,
 * a tiny synthetic MoE model, the static placement at a budget that splits
 * layers expert by expert:
 *   - with each mechanism off, the logits stay bit for bit the CPU's
 *     (exact mode): an ablation moves work, it never changes it;
 *   - without the hot-expert table the plan's perf DB holds no routing, and
 *     the live table swaps nothing even when told its GPU experts take
 *     every routing (the full system then swaps, as in test_hot_experts),
 *     though it still measures the share; with it, the DB holds the
 *     profile's;
 *   - without prefetch nothing is copied a layer ahead; the full system
 *     copies, and a fixed two copy at most two experts a split layer and
 *     step (and some);
 *   - synchronous copies copy as much as the full system's rule allows;
 *   - nothing loads on demand unless PreSched is asked for
 *     (tnd_ctx_params.moe_presched); with it, experts load on demand (the
 *     tiny experts copy far faster than the CPU runs them), the logits stay
 *     the CPU's, also with synchronous copies and with the transfer stream
 *     slowed (the GPU's half must wait for the loads, and for the copies
 *     two layers ahead that its wider window (Q4) makes: some are made),
 *     and the fixed count replaces it (no on-demand loads, nothing two
 *     layers ahead, at most two copies a layer and step).
 * Skips (77) without the tandem binary (for synth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "runtime/internal.h"
#include "sim/sim.h"
#include "tandem.h"

#define N_PROMPT 40
#define N_GEN 24
#define N_HOT 192 /* tokens after the table is told a wrong share: three of its 64-token windows */

static int split_layers(const tnd_ctx *c) {
    int n = 0;
    for (int l = 0; l < c->pl.n_layer; l++) n += c->pl.split[l] != 0;
    return n;
}

int main(void) {
    tnd_model *m;
    int rc = fx_synth_load("tiny-qwen3moe", 2, &m);
    if (rc) return rc;
    char cache[] = "/tmp/tnd_ablate_cache_XXXXXX";
    CHECK(mkdtemp(cache) != NULL, "cache dir");
    setenv("TANDEM_CACHE", cache, 1);
    const int nv = tnd_model_n_vocab(m);
    int32_t prompt[N_PROMPT], tok[N_GEN], more[N_HOT];
    fx_random_tokens(m, 11, prompt, N_PROMPT);
    fx_random_tokens(m, 12, more, N_HOT);
    tnd_ctx_params p = tnd_ctx_default_params();
    p.cpu_exact = true;
    p.n_ctx = N_HOT + 8;
    p.n_batch = 64;
    const size_t nl = (size_t)N_GEN * (size_t)nv;
    float *ref = tc_xmalloc(sizeof(float) * nl), *lg = tc_xmalloc(sizeof(float) * nl);
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &p, &c));
    if (c) CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, true, ref));
    tnd_ctx_free(c);

    p.device = TND_DEVICE_SIM;
    p.hw = "rtx3060-laptop";
    /* the GPU's fixed needs, then room for about half the weights */
    tnd_plan *probe = NULL;
    p.vram_budget = 0;
    CHECK_ST(tnd_plan_build(m, &p, &probe));
    if (!probe) return tc_summary();
    const tnd_layout *l0 = tnd_plan_layout(probe);
    p.vram_budget = l0->act_gpu + l0->small_gpu + l0->scratch_gpu + l0->w_gpu / 2;
    tnd_plan_free(probe);

    static const unsigned ablations[] = {0, TND_ABLATE_HOT, TND_ABLATE_PREFETCH, TND_ABLATE_FIXED2, TND_ABLATE_SYNC};
    static const char *const names[] = {"none", "hot", "prefetch", "fixed2", "sync"};
    uint64_t copies_full = 0;
    for (int a = 0; a < 5; a++) {
        p.moe_ablate = ablations[a];
        c = NULL;
        CHECK_ST(tnd_ctx_new(m, &p, &c));
        if (!c) continue;
        const int ns = split_layers(c);
        CHECK(ns > 0, "ablate %s: the budget split no layer: nothing to test", names[a]);
        CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, false, lg));
        CHECK(!memcmp(lg, ref, sizeof(float) * nl), "ablate %s: logits differ from the CPU's", names[a]);
        tnd_ctx_stats s;
        tnd_ctx_get_stats(c, &s);
        const bool pop = c->perf && c->perf->pop;
        printf("ablate %s: %d split layers; %llu decode routings, %llu on the GPU, %llu from slots; %llu experts "
               "copied a layer ahead; %llu moved by the live table; routing in the perf DB: %s\n",
               names[a], ns, (unsigned long long)s.n_route_dec, (unsigned long long)s.n_route_dec_gpu,
               (unsigned long long)s.n_route_dec_pf, (unsigned long long)s.n_pf_copies,
               (unsigned long long)s.n_expert_moves, pop ? "yes" : "no");
        if (ablations[a] == TND_ABLATE_HOT) CHECK(!pop, "ablate hot: the plan's perf DB still holds the profile's routing");
        else CHECK(pop, "ablate %s: no routing in the plan's perf DB", names[a]);
        if (ablations[a] == 0) {
            copies_full = s.n_pf_copies;
            CHECK(s.n_pf_copies > 0, "the full system copied no expert a layer ahead");
        }
        if (ablations[a] == TND_ABLATE_PREFETCH)
            CHECK(s.n_pf_copies == 0 && s.n_route_dec_pf == 0, "ablate prefetch: %llu experts copied",
                  (unsigned long long)s.n_pf_copies);
        if (ablations[a] == TND_ABLATE_FIXED2)
            CHECK(s.n_pf_copies > 0 && s.n_pf_copies <= 2ull * (uint64_t)ns * (N_GEN + 1),
                  "ablate fixed2: %llu experts copied over %d split layers and %d steps",
                  (unsigned long long)s.n_pf_copies, ns, N_GEN + 1);
        if (ablations[a] == TND_ABLATE_SYNC)
            CHECK(s.n_pf_copies > 0, "ablate sync: no expert copied (full system: %llu)",
                  (unsigned long long)copies_full);
        CHECK(s.n_od_copies == 0 && s.n_pf2_copies == 0,
              "ablate %s: %llu experts loaded on demand, %llu copied two layers ahead without PreSched", names[a],
              (unsigned long long)s.n_od_copies, (unsigned long long)s.n_pf2_copies);
        tnd_ctx_free(c);
    }
    /* PreSched (exec/prefetch.c, moe/presched.c) */
    static const unsigned ps_ablations[] = {0, TND_ABLATE_SYNC, TND_ABLATE_FIXED2, 0};
    static const char *const ps_names[] = {"none", "sync", "fixed2", "none, the transfer stream slowed"};
    p.moe_presched = true;
    for (int a = 0; a < 4; a++) {
        p.moe_ablate = ps_ablations[a];
        c = NULL;
        CHECK_ST(tnd_ctx_new(m, &p, &c));
        if (!c) continue;
        if (a == 3) {
            CHECK(c->xfer != NULL, "no transfer stream");
            if (c->xfer) tnd_sim_set_stream_delay(c->side[1].be, c->xfer, 300);
        }
        const int ns = split_layers(c);
        CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, false, lg));
        CHECK(!memcmp(lg, ref, sizeof(float) * nl), "presched, ablate %s: logits differ from the CPU's", ps_names[a]);
        tnd_ctx_stats s;
        tnd_ctx_get_stats(c, &s);
        printf("presched, ablate %s: %llu decode routings, %llu on the GPU, %llu from slots; %llu experts copied "
               "ahead (%llu of them two layers ahead), %llu loaded on demand\n",
               ps_names[a], (unsigned long long)s.n_route_dec, (unsigned long long)s.n_route_dec_gpu,
               (unsigned long long)s.n_route_dec_pf, (unsigned long long)s.n_pf_copies,
               (unsigned long long)s.n_pf2_copies, (unsigned long long)s.n_od_copies);
        if (ps_ablations[a] == TND_ABLATE_FIXED2)
            CHECK(s.n_od_copies == 0 && s.n_pf_copies > 0 && s.n_pf_copies <= 2ull * (uint64_t)ns * (N_GEN + 1),
                  "presched, ablate fixed2: %llu loaded on demand, %llu copied ahead over %d split layers",
                  (unsigned long long)s.n_od_copies, (unsigned long long)s.n_pf_copies, ns);
        else CHECK(s.n_od_copies > 0, "presched, ablate %s: nothing loaded on demand", ps_names[a]);
        /* Q4: where the next layer's predicted experts are all on the GPU
         * already (the tiny experts' slots hold most), the link takes the
         * layer after's; not under the fixed count */
        if (ps_ablations[a] == TND_ABLATE_FIXED2)
            CHECK(s.n_pf2_copies == 0, "presched, ablate fixed2: %llu copied two layers ahead",
                  (unsigned long long)s.n_pf2_copies);
        else CHECK(s.n_pf2_copies > 0 && s.n_pf2_copies <= s.n_pf_copies,
                   "presched, ablate %s: %llu of %llu copies two layers ahead", ps_names[a],
                   (unsigned long long)s.n_pf2_copies, (unsigned long long)s.n_pf_copies);
        tnd_ctx_free(c);
    }
    /* the plan carries it to a context made from it */
    p.moe_ablate = 0;
    tnd_plan *pp = NULL;
    CHECK_ST(tnd_plan_build(m, &p, &pp));
    c = NULL;
    if (pp) CHECK_ST(tnd_ctx_new_from_plan(pp, &c));
    if (c) {
        CHECK(c->presched, "a context made from a plan with PreSched asked for runs without it");
        tnd_ctx_free(c);
    }
    tnd_plan_free(pp);
    p.moe_presched = false;
    /* Told that its GPU experts take every routing, the live table measures
     * less and swaps experts in (a random placement, whose residents are not
     * the popular ones: test_hot_experts), unless it is switched off. */
    p.placement = "random:5";
    for (int a = 0; a < 2; a++) {
        p.moe_ablate = a ? TND_ABLATE_HOT : 0;
        c = NULL;
        CHECK_ST(tnd_ctx_new(m, &p, &c));
        if (!c) continue;
        const int L = c->pl.n_layer, E = c->pl.n_expert;
        double *gpu_all = tc_xmalloc(sizeof(double) * (size_t)L * E);
        for (size_t i = 0; i < (size_t)L * E; i++) gpu_all[i] = c->pl.exp[i] == TND_SIDE_GPU;
        tnd_hot_assume(c, gpu_all);
        free(gpu_all);
        for (int i = 0; i < N_HOT; i += 64) CHECK_ST(tnd_ctx_eval(c, more + i, 64, NULL));
        tnd_ctx_stats h;
        tnd_ctx_get_stats(c, &h);
        printf("random:5, ablate %s, told a wrong share: %llu experts moved, measured share %.2f\n",
               a ? "hot" : "none", (unsigned long long)h.n_expert_moves, h.hot_measured);
        CHECK(a ? h.n_expert_moves == 0 : h.n_expert_moves > 0, "random:5, ablate %s: %llu experts moved",
              a ? "hot" : "none", (unsigned long long)h.n_expert_moves);
        CHECK(h.hot_measured > 0 && h.hot_measured < 1, "random:5, ablate %s: measured share %.3f", a ? "hot" : "none",
              h.hot_measured);
        tnd_ctx_free(c);
    }
    free(ref), free(lg);
    tnd_model_free(m);
    return tc_summary();
}
