/* Expert prefetch (exec/prefetch.c) on a tiny synthetic MoE model with
 * random placements that split layers expert by expert, on SimGPU and (on
 * the device machine) CUDA:
 *   - SimGPU: every step's logits stay bit for bit the CPU's (exact mode)
 *     while experts are copied into slots a layer ahead and read from them;
 *     CUDA: they stay as close to the CPU's as without prefetch (an expert
 *     computed on the GPU instead of the CPU differs by rounding only);
 *   - copies happen and decode routings are served from the slots;
 *   - the slots take no memory of their own: the layout's GPU total is the
 *     same with TND_EXPERT_PREFETCH=0, which copies nothing;
 *   - the placement stays as the plan made it (resident experts and slots
 *     add up to its GPU experts), across a plan swap too;
 *   - the same on SimGPU with the transfer stream slowed: a GPU part that
 *     read a slot before its copy landed would change the logits.
 * Skips (77) without the tandem binary (for synth). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "runtime/internal.h"
#include "sim/sim.h"
#include "tandem.h"

#define N_PROMPT 40
#define N_GEN 32

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

/* Resident experts of the split layers, and their slots (*slots); the
 * placement's GPU experts must be as many (the slots lend their entries). */
static int gpu_experts(const tnd_ctx *c, int *slots) {
    int n = 0, placed = 0;
    *slots = 0;
    for (int l = 0; l < c->pl.n_layer; l++) {
        if (!c->pl.split[l]) continue;
        for (int e = 0; e < c->pl.n_expert; e++) {
            n += c->exp_gpu[(size_t)l * c->pl.n_expert + e] >= 0;
            placed += c->pl.exp[(size_t)l * c->pl.n_expert + e] == TND_SIDE_GPU;
        }
        if (c->pf_n) *slots += c->pf_n[l];
    }
    CHECK(n + *slots == placed, "%d resident + %d slots for %d GPU experts placed", n, *slots, placed);
    return n;
}

/* The transfer stream the slow one (SimGPU): a GPU part that did not wait
 * for its slots' copies reads the experts they held before. */
static void slow_xfer(tnd_ctx *c) {
    if (c->xfer) tnd_sim_set_stream_delay(c->side[1].be, c->xfer, 300);
}

int main(void) {
    tnd_model *m;
    int rc = fx_synth_load("tiny-qwen3moe", 2, &m);
    if (rc) return rc;
    const int nv = tnd_model_n_vocab(m);
    int32_t prompt[N_PROMPT];
    fx_random_tokens(m, 7, prompt, N_PROMPT);

    static const char *mode[3] = {"off", "on", "on, the transfer stream slowed"};
    tnd_ctx_params p = tnd_ctx_default_params();
    p.cpu_exact = true;
    p.n_ctx = N_PROMPT + N_GEN + 8;
    p.n_batch = 64;
    const size_t nl = (size_t)N_GEN * (size_t)nv;
    int32_t tok[N_GEN];
    float *ref = tc_xmalloc(sizeof(float) * nl), *lg = tc_xmalloc(sizeof(float) * nl);
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &p, &c));
    if (c) CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, true, ref));
    tnd_ctx_free(c);

    for (int dev = 0; dev < 2; dev++) {
        p.device = dev ? TND_DEVICE_CUDA : TND_DEVICE_SIM;
        p.hw = dev ? NULL : "rtx3060-laptop";
        if (dev && tnd_cuda_device_count() <= 0) {
            printf("no CUDA device: SimGPU only\n");
            break;
        }
        const char *dn = dev ? "cuda" : "sim";
        uint64_t total[3] = {0, 0, 0};
        double diff[3][3] = {{0}};
        /* on: 2 prefetch with the transfer stream slowed (SimGPU), 1 prefetch, 0 none */
        for (int on = 2 - dev; on >= 0; on--) {
            CHECK_ST(tnd_config_set("TND_EXPERT_PREFETCH", on ? NULL : "0"));
            for (int seed = 5; seed <= 7; seed++) {
                char pl[32];
                snprintf(pl, sizeof pl, "random:%d", seed);
                p.placement = pl;
                c = NULL;
                CHECK_ST(tnd_ctx_new(m, &p, &c));
                if (!c) continue;
                int slots, res = gpu_experts(c, &slots);
                if (seed == 5) total[on] = c->lay.gpu_total;
                if (on == 2) slow_xfer(c);
                CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, false, lg));
                tnd_ctx_stats s;
                tnd_ctx_get_stats(c, &s);
                diff[on][seed - 5] = max_diff(lg, ref, nl);
                if (!dev)
                    CHECK(diff[on][seed - 5] == 0, "%s %s, prefetch %s: logits differ from the CPU's by %g", dn, pl,
                          mode[on], diff[on][seed - 5]);
                printf("%s %s, prefetch %s: %d resident experts, %d slots; %llu decode routings, %llu on the GPU, "
                       "%llu from slots; %llu experts copied; logits within %.3g of the CPU's\n",
                       dn, pl, mode[on], res, slots, (unsigned long long)s.n_route_dec,
                       (unsigned long long)s.n_route_dec_gpu, (unsigned long long)s.n_route_dec_pf,
                       (unsigned long long)s.n_pf_copies, diff[on][seed - 5]);
                if (on && slots) {
                    CHECK(s.n_pf_copies > 0, "%s %s: no expert copied a layer ahead", dn, pl);
                    CHECK(s.n_route_dec_pf > 0 && s.n_route_dec_pf <= s.n_route_dec_gpu,
                          "%s %s: %llu routings from slots of %llu on the GPU", dn, pl,
                          (unsigned long long)s.n_route_dec_pf, (unsigned long long)s.n_route_dec_gpu);
                    /* a plan swap lays out the same placement again */
                    CHECK_ST(tnd_ctx_set_plan(c, tnd_ctx_plan(c)));
                    if (on == 2) slow_xfer(c); /* the swap made the streams anew */
                    int slots2, res2 = gpu_experts(c, &slots2);
                    CHECK(res2 + slots2 == res + slots && slots2 == slots,
                          "%s %s: after a plan swap %d resident + %d slots, before %d + %d", dn, pl, res2, slots2, res,
                          slots);
                    CHECK_ST(tnd_ctx_truncate(c, 0));
                    CHECK_ST(fx_steps(c, prompt, N_PROMPT, N_GEN, tok, false, lg));
                    if (!dev) CHECK(!memcmp(lg, ref, sizeof(float) * nl), "%s %s: logits differ after the plan swap", dn, pl);
                }
                if (!on) CHECK(s.n_pf_copies == 0 && s.n_route_dec_pf == 0, "%s %s: prefetch off copied experts", dn, pl);
                tnd_ctx_free(c);
            }
        }
        CHECK(total[0] == total[1] && (dev || total[1] == total[2]) && total[0] > 0,
              "%s: GPU total %llu with prefetch (%llu with the transfer stream slowed), %llu without", dn,
              (unsigned long long)total[1], (unsigned long long)total[2], (unsigned long long)total[0]);
        /* CUDA: the GPU computes some experts the CPU computed before; rounding, not wrong experts */
        for (int i = 0; dev && i < 3; i++)
            CHECK(diff[1][i] <= 2 * diff[0][i] + 0.02, "cuda random:%d: logits off the CPU's by %.4f with prefetch, "
                  "%.4f without", i + 5, diff[1][i], diff[0][i]);
    }
    CHECK_ST(tnd_config_set("TND_EXPERT_PREFETCH", NULL));
    free(ref), free(lg);
    tnd_model_free(m);
    return tc_summary();
}
