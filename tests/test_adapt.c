/* Load awareness (Algorithm 3, sched/adapt.h, and the executor's recorder):
 * the rule on made-up measurement streams (noise within ±10% never
 * re-plans, a lasting slowdown re-plans within the bound, a short spike
 * does not, the end of a slowdown re-plans back to exactly the unloaded
 * factors), then on SimGPU a tiny model decoding while its link is slowed
 * at run time: a re-plan promotes less, the link's return brings back the
 * first promotion set, no re-plan while nothing changes, and the tokens
 * stay the CPU's throughout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "runtime/internal.h"
#include "sched/adapt.h"
#include "sched/transfer.h"
#include "sim/sim.h"
#include "util.h"

static double noise(double amp) { return 1 + amp * (2 * tc_unit(tc_splitmix()) - 1); }

/* Feeds rounds of tpot seconds with CPU ratio cpu(k) and link ratio 1 (both
 * with ±amp noise) from round k0 to k1; returns the round of the first
 * re-plan in that span, or -1. */
static int feed(tnd_adapt *a, int k0, int k1, double tpot, double cpu, double amp) {
    int first = -1;
    for (int k = k0; k < k1; k++) {
        double r = cpu * noise(amp), q = noise(amp);
        if (tnd_adapt_observe(a, k * tpot, tpot, r * 0.02, 0.02, q * 0.004, 0.004) && first < 0) first = k;
    }
    return first;
}

static void test_rule(void) {
    const double tpot = 0.05; /* 20 tok/s */
    tnd_adapt a;
    tnd_adapt_init(&a);
    /* noise within ±10%: never */
    CHECK(feed(&a, 0, 2000, tpot, 1.0, 0.10) < 0 && a.n_replans == 0, "noise re-planned %d times", a.n_replans);
    /* ten busy cores: the CPU 1.7x slower from round 2000 */
    int k = feed(&a, 2000, 2400, tpot, 1.7, 0.10);
    CHECK(k >= 2000, "no re-plan for a lasting 1.7x slowdown");
    CHECK((k - 2000) * tpot <= 2.0, "re-planned %.2f s after the load began (bound 2 s)", (k - 2000) * tpot);
    CHECK(fabs(a.plan_cpu / 1.7 - 1) < 0.15 && a.plan_pcie == 1, "planned with CPU x%.3f, PCIe x%.3f", a.plan_cpu,
          a.plan_pcie);
    CHECK(a.n_replans == 1, "one re-plan for one change (%d)", a.n_replans);
    /* the load ends: back to exactly the unloaded factors */
    int k2 = feed(&a, 2400, 2800, tpot, 1.0, 0.10);
    CHECK(k2 >= 2400 && (k2 - 2400) * tpot <= 2.0, "back: re-planned at round %d", k2);
    CHECK(a.plan_cpu == 1 && a.plan_pcie == 1, "back to CPU x%.3f, PCIe x%.3f", a.plan_cpu, a.plan_pcie);
    CHECK(a.n_replans == 2, "two re-plans in all (%d)", a.n_replans);
    /* a spike of three rounds is shorter than tau (5 tpot): nothing */
    int n = a.n_replans;
    feed(&a, 2800, 2803, tpot, 3.0, 0);
    feed(&a, 2803, 3200, tpot, 1.0, 0.05);
    CHECK(a.n_replans == n, "a 3-round spike re-planned (%d -> %d)", n, a.n_replans);
    /* the link slowed by another process's copies */
    tnd_adapt b;
    tnd_adapt_init(&b);
    bool re = false;
    for (int i = 0; i < 200; i++) re |= tnd_adapt_observe(&b, i * tpot, tpot, 0.02, 0.02, 0.012, 0.004);
    CHECK(re && fabs(b.plan_pcie / 3 - 1) < 0.05 && b.plan_cpu == 1, "link x3: planned CPU x%.3f, PCIe x%.3f",
          b.plan_cpu, b.plan_pcie);
    /* unmeasured rounds (no CPU work, no copies) change nothing */
    tnd_adapt z;
    tnd_adapt_init(&z);
    for (int i = 0; i < 100; i++) CHECK(!tnd_adapt_observe(&z, i * tpot, tpot, 0, 0, 0, 0), "empty round re-planned");
}

/* Pings of lat * f(k) (noise ±amp) every TND_ADAPT_PING_S from ping k0 to
 * k1, each after a round of tpot; returns the first ping that moved
 * (its sign in *dir), or -1. */
static int pings(tnd_adapt_gpu *g, int k0, int k1, double tpot, double lat, double f, double amp, int *dir) {
    int first = -1;
    for (int k = k0; k < k1; k++) {
        double now = k * TND_ADAPT_PING_S * 2.5; /* the shared state's interval: a ping is due either way */
        CHECK(tnd_adapt_gpu_round(g, now, tpot), "ping %d not due", k);
        int d = tnd_adapt_gpu_observe(g, now, lat * f * noise(amp), lat);
        if (d && first < 0) {
            first = k;
            *dir = d;
        }
    }
    return first;
}

static void test_gpu_rule(void) {
    const double lat = 30e-6, tpot = 0.05;
    const double step = TND_ADAPT_PING_S * 2.5;
    tnd_adapt_gpu g;
    tnd_adapt_gpu_init(&g);
    int dir = 0;
    /* an idle GPU's pings, ±10%, and up to 2x: never */
    CHECK(pings(&g, 0, 500, tpot, lat, 1.0, 0.10, &dir) < 0 && pings(&g, 500, 600, tpot, lat, 1.5, 0.33, &dir) < 0 &&
          g.n_moves == 0 && !g.shared, "an idle GPU moved %d times", g.n_moves);
    /* one ping the host was descheduled in: nothing */
    pings(&g, 600, 601, tpot, lat, 300, 0, &dir);
    CHECK(pings(&g, 601, 700, tpot, lat, 1.0, 0.10, &dir) < 0 && g.n_moves == 0, "a lone slow ping moved");
    /* another process's kernels: pings 150x */
    int k = pings(&g, 700, 800, tpot, lat, 150, 0.2, &dir);
    CHECK(k >= 700 && dir == 1 && g.shared, "no move for a shared GPU (%d)", k);
    CHECK(k >= 700 && (k - 700) * step <= 1.0, "placed for a shared GPU %.2f s after it began", (k - 700) * step);
    CHECK(fabs(g.lat / (150 * lat) - 1) < 0.2, "placed with a switch latency of %.0f us (pings ~%.0f us)", 1e6 * g.lat,
          150e6 * lat);
    CHECK(g.n_moves == 1, "one move (%d)", g.n_moves);
    /* still shared, one fast ping between slow ones: nothing */
    pings(&g, 800, 801, tpot, lat, 1.0, 0, &dir);
    CHECK(pings(&g, 801, 900, tpot, lat, 150, 0.2, &dir) < 0 && g.n_moves == 1 && g.shared, "a lone fast ping moved");
    /* the other process ends: back within the bound */
    k = pings(&g, 900, 1000, tpot, lat, 1.0, 0.1, &dir);
    CHECK(k >= 900 && dir == -1 && !g.shared && (k - 900) * step <= 1.0, "back: ping %d", k);
    CHECK(g.n_moves == 2 && g.lat == 0, "two moves in all (%d)", g.n_moves);
    /* pings between the thresholds (3x-8x) keep whichever placement is in */
    CHECK(pings(&g, 1000, 1200, tpot, lat, 5, 0.1, &dir) < 0 && g.n_moves == 2, "5x moved an idle placement");
    /* a shared GPU stretches the rounds tenfold: tau still counts the idle
     * times per token (5 x 50 ms), not the stretched ones (1 s at most) */
    k = pings(&g, 1200, 1300, 10 * tpot, lat, 150, 0.2, &dir);
    CHECK(k >= 1200 && dir == 1 && (k - 1200) * step <= TND_ADAPT_TAU * tpot + step,
          "placed for a shared GPU %.2f s after it began, with rounds of %.0f ms", (k - 1200) * step, 1e3 * 10 * tpot);
    /* pings that cannot be measured say nothing */
    CHECK(!tnd_adapt_gpu_observe(&g, 1e4, NAN, lat) && !tnd_adapt_gpu_observe(&g, 1e4, 1, 0), "bad ping moved");
}

/* The switches a decode step pays under c's static placement, as
 * Algorithm 1 counted them (its description ends "..., N switches"). */
static int switches(const tnd_ctx *c) {
    const char *e = strstr(c->pl.desc, " switches"), *b = e;
    while (b && b > c->pl.desc && b[-1] >= '0' && b[-1] <= '9') b--;
    return e && b < e ? atoi(b) : -1;
}

static int decode(tnd_ctx *c, int32_t *tok, int n, uint64_t until, float *lg);

/* tiny-llama, synthesized and loaded (NULL: skipped or failed, said). */
static tnd_model *tiny_llama(void) {
    char path[64];
    int rc = fx_synth("tiny-llama", "", path, sizeof path);
    if (rc == 77) return NULL;
    CHECK(rc == 0, "synth");
    if (rc) return NULL;
    tnd_model *m = fx_load(path, 2);
    unlink(path);
    CHECK(m != NULL, "load");
    return m;
}

/* The CPU's greedy tokens: n after the prompt, in a context of n_ctx. */
static void cpu_tokens(tnd_model *m, int n_ctx, const int32_t *prompt, int np, int32_t *want, int n, float *lg) {
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.cpu_exact = true;
    cp.n_ctx = n_ctx;
    tnd_ctx *ref;
    CHECK_ST(tnd_ctx_new(m, &cp, &ref));
    CHECK_ST(tnd_ctx_eval(ref, prompt, np, lg));
    decode(ref, want, n, UINT64_MAX, lg);
    tnd_ctx_free(ref);
}

/* A SimGPU timing profile of these lines, written to a temporary file
 * (path: its template, filled in); false if it could not be written. */
static bool hw_file(char *path, const char *lines) {
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL, "hw profile file");
    if (!f) return false;
    fputs(lines, f);
    return fclose(f) == 0;
}

/* Greedy decode on c after the prompt, held to the CPU's tokens want[0..n):
 * when the n are done the context goes back to the prompt (its last token
 * evaluated again) and starts over. Runs until c has re-placed its weights
 * `until` times (then returns true) or for secs seconds of wall time (the
 * rule's pings and tau are wall time). *bad counts tokens off the CPU's. */
typedef struct cycle {
    const int32_t *prompt, *want;
    int np, n, at;
    float *lg;
    long tokens, bad;
} cycle;

static bool cycle_until(tnd_ctx *c, cycle *y, uint64_t until, double secs) {
    const int nv = tnd_model_n_vocab(c->m);
    const double end = tnd_time_s() + secs;
    while (c->n_replace < until && tnd_time_s() < end) {
        if (y->at == y->n) {
            if (tnd_ctx_truncate(c, y->np - 1) || tnd_ctx_eval(c, &y->prompt[y->np - 1], 1, y->lg)) {
                CHECK(0, "back to the prompt: %s", tnd_last_error());
                return false;
            }
            y->at = 0;
        }
        int32_t t = tc_argmax(y->lg, nv);
        y->bad += t != y->want[y->at];
        y->tokens++;
        y->at++;
        if (tnd_ctx_eval(c, &t, 1, y->lg)) {
            CHECK(0, "eval: %s", tnd_last_error());
            return false;
        }
    }
    return c->n_replace >= until;
}

/* The last round of the trace at path: its predicted time is the live
 * plan's for its tokens and position (not the swapped-out plan's), and
 * every measured round has its prediction. */
static void check_trace_pred(tnd_ctx *c, const char *path) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "trace %s", path);
    if (!f) return;
    char line[1024];
    int measured = 0, predicted = 0, nt = 0, pos0 = -1;
    double dur = -1;
    while (fgets(line, sizeof line, f)) {
        const bool pred = strstr(line, "\"pid\":2,\"tid\":6,\"args\":{\"round\"") != NULL;
        measured += strstr(line, "\"pid\":1,\"tid\":6,\"args\":{\"round\"") != NULL;
        predicted += pred;
        const char *d = strstr(line, "\"dur\":"), *a = strstr(line, "\"tokens\":");
        if (pred && d && a) {
            dur = strtod(d + 6, NULL);
            if (sscanf(a, "\"tokens\":%d,\"pos0\":%d", &nt, &pos0) != 2) pos0 = -1;
        }
    }
    fclose(f);
    CHECK(measured > 0 && predicted == measured, "trace: %d rounds, %d predicted", measured, predicted);
    const double want = 1e6 * tnd_plan_predict(c->plan, NULL, nt, pos0);
    CHECK(pos0 >= 0 && fabs(dur - want) <= 1e-3 + 1e-6 * want,
          "trace: the last round's prediction %.3f us is the shared plan's %.3f us (%d tokens at %d)", dur, want, nt,
          pos0);
}

/* SimGPU, the default static placement: the GPU's pings slowed 200x (another
 * process's kernels) and restored. in_place: pinning in place allowed (the
 * idle plan's small CPU share takes a store piece, the shared plan's whole
 * model on the CPU pins in place and frees it); else refused, so that the
 * store's pieces hold the CPU's slices throughout. */
static void test_sim_shared(bool in_place) {
    tnd_model *m = tiny_llama();
    if (!m) return;
    const char *how = in_place ? "weights pinned in place" : "a pinned store";
    const int32_t prompt[] = {1, 17, 42, 99, 7, 300, 12};
    const int np = sizeof prompt / sizeof *prompt, n_gen = 200, nv = tnd_model_n_vocab(m);
    float *lg = malloc(sizeof(float) * nv);
    int32_t *want = calloc(n_gen, sizeof *want);
    cpu_tokens(m, 2048, prompt, np, want, n_gen, lg);
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.cpu_exact = true;
    cp.n_ctx = 2048;
    /* a GPU far faster than the CPU */
    char hw[] = "/tmp/tnd_adapt_hw_XXXXXX";
    if (!hw_file(hw, "base = rtx3060-laptop\ncpu_bw = 0.5 GB/s\n")) return;
    char cache[] = "/tmp/tnd_adapt_cache_XXXXXX";
    CHECK(mkdtemp(cache) != NULL, "cache dir");
    setenv("TANDEM_CACHE", cache, 1);
    cp.device = TND_DEVICE_SIM;
    cp.hw = hw;
    cp.promote = "none";
    /* the smallest budget that holds the weights: the KV caches stay on
     * the CPU, and so does attention, two switches a layer more */
    cp.vram_budget = 0;
    tnd_plan *probe;
    CHECK_ST(tnd_plan_build(m, &cp, &probe));
    const tnd_layout *l0 = tnd_plan_layout(probe);
    const uint64_t fixed = l0->act_gpu + l0->small_gpu + l0->scratch_gpu, w = l0->w_gpu;
    tnd_plan_free(probe);
    for (uint64_t b = fixed + (4u << 20); b < fixed + w + (8u << 20); b += 64u << 10) {
        cp.vram_budget = b;
        CHECK_ST(tnd_plan_build(m, &cp, &probe));
        bool all = tnd_plan_layout(probe)->w_gpu == w;
        tnd_plan_free(probe);
        if (all) break;
    }
    /* traced (one of the two runs): the trace's predictions follow the plan swapped in */
    char trace[] = "/tmp/tnd_adapt_trace_XXXXXX";
    const int tfd = in_place ? mkstemp(trace) : -1;
    if (tfd >= 0) {
        close(tfd);
        cp.trace = trace;
    }
    tnd_ctx *c;
    tnd_backend_set_register_fault(!in_place); /* for the whole test: every layout may ask (main clears it) */
    tnd_status st = tnd_ctx_new(m, &cp, &c);
    unlink(hw);
    CHECK_ST(st);
    if (st) return;
    c->adapt_cpu = false;
    const int sw0 = switches(c);
    const double lat0 = c->perf->lat;
    tnd_placement idle;
    CHECK_ST(tnd_placement_copy(m, &c->pl, &idle));
    CHECK(c->gpu && c->plan->stat && sw0 >= 4, "a static placement with switches (%d: %s)", sw0, c->pl.desc);
    CHECK_ST(tnd_ctx_eval(c, prompt, np, lg));
    cycle y = {prompt, want, np, n_gen, 0, lg, 0, 0};
    /* ±10% and a 2x bump, 0.4 s each: the placement stays */
    const double wobble[] = {1.1, 0.9, 2.0, 1.0};
    for (int i = 0; i < 4; i++) {
        tnd_sim_set_gpu_slowdown(c->side[1].be, wobble[i]);
        cycle_until(c, &y, 1, 0.4);
    }
    CHECK(c->n_replace == 0 && tnd_ctx_n_replans(c) == 0, "an idle GPU re-placed (%llu)",
          (unsigned long long)c->n_replace);
    /* another process's kernels: every move to the GPU waits */
    tnd_sim_set_gpu_slowdown(c->side[1].be, 200);
    CHECK(cycle_until(c, &y, 1, 10) && c->plan_idle, "re-placed for a shared GPU (%llu)",
          (unsigned long long)c->n_replace);
    const int pins1 = c->n_pins;
    CHECK(in_place == (c->w_locked != NULL), "%s: weights pinned in place %s", how, c->w_locked ? "yes" : "no");
    if (in_place) CHECK(pins1 == 0, "%s: the move pinned %d pieces", how, pins1);
    else CHECK(pins1 == 2, "%s: the move pinned only the slices new to the CPU, as a second piece (%d pieces)", how,
               pins1);
    const int sw1 = switches(c);
    CHECK(sw1 < sw0, "fewer switches on a shared GPU: %d, before %d (%s)", sw1, sw0, c->pl.desc);
    CHECK(c->perf->lat > 100 * tnd_plan_perf(c->plan_idle)->lat, "placed with the measured latency (%.0f us)",
          1e6 * c->perf->lat);
    printf("sim: %d switches a step on an idle GPU, %d on a shared one (%s)\n", sw0, sw1, c->pl.desc);
    if (tfd >= 0) { /* a few rounds on the shared plan, then the trace ends */
        cycle_until(c, &y, 2, 0.05);
        CHECK_ST(tnd_tl_close(c));
        check_trace_pred(c, trace);
        unlink(trace);
    }
    /* the GPU is ours again: the first placement comes back */
    tnd_sim_set_gpu_slowdown(c->side[1].be, 1);
    CHECK(cycle_until(c, &y, 2, 10) && !c->plan_idle, "back to the idle placement (%llu)",
          (unsigned long long)c->n_replace);
    CHECK(!memcmp(idle.where, c->pl.where, m->n_slices) && !memcmp(idle.kv, c->pl.kv, m->hp.n_layer) &&
          c->perf->lat == lat0, "the idle placement is back");
    CHECK(c->n_pins == pins1 && in_place == (c->w_locked != NULL), "%s: the way back pinned nothing (%d pieces)", how,
          c->n_pins);
    cycle_until(c, &y, 3, 0.4);
    CHECK(c->n_replace == 2, "no further move (%llu)", (unsigned long long)c->n_replace);
    CHECK(y.bad == 0, "%ld of %ld tokens off the CPU's through the moves", y.bad, y.tokens);
    printf("sim, %s: %ld tokens as the CPU's through two moves\n", how, y.tokens);
    tnd_placement_free(&idle);
    tnd_ctx_free(c);
    free(want);
    free(lg);
    tnd_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    CHECK(system(cmd) == 0, "rm cache");
}

/* The slices promoted this decode step. */
static int promoted_set(const tnd_ctx *c, uint8_t *out) {
    int k = 0;
    for (int i = 0; i < c->m->n_slices; i++) k += out[i] = c->round_prom ? c->round_prom[i] : 0;
    return k;
}

/* Greedy decode of n tokens after ids; stops early (returns how many) once
 * the context has re-planned `until` times (until < 0: never). */
static int decode(tnd_ctx *c, int32_t *tok, int n, uint64_t until, float *lg) {
    int nv = tnd_model_n_vocab(c->m);
    for (int i = 0; i < n; i++) {
        tok[i] = tc_argmax(lg, nv);
        if (tnd_ctx_eval(c, &tok[i], 1, lg)) {
            CHECK(0, "eval: %s", tnd_last_error());
            return i;
        }
        if (tnd_ctx_n_replans(c) >= until) return i + 1;
    }
    return n;
}

static void test_sim(void) {
    tnd_model *m = tiny_llama();
    if (!m) return;
    const int32_t prompt[] = {1, 17, 42, 99, 7, 300, 12};
    const int np = sizeof prompt / sizeof *prompt, n_gen = 120, nv = tnd_model_n_vocab(m);
    float *lg = malloc(sizeof(float) * nv);
    int32_t *want = calloc(n_gen, sizeof *want), *got = calloc(n_gen, sizeof *got);
    cpu_tokens(m, 256, prompt, np, want, n_gen, lg);
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.cpu_exact = true;
    cp.n_ctx = 256;
    /* SimGPU with automatic promotions; the recorder watches the link alone
     * (the CPU's real times on a shared test machine are noise) */
    /* a machine whose CPU is slow beside its link, so that decode promotes */
    char hw[] = "/tmp/tnd_adapt_hw_XXXXXX";
    if (!hw_file(hw, "base = rtx3060-laptop\ncpu_bw = 0.2 GB/s\npcie_bw = 1 GB/s\n")) return;
    cp.device = TND_DEVICE_SIM;
    cp.hw = hw;
    cp.promote = "auto";
    /* every weight on the CPU, each a candidate; the GPU's fixed needs
     * (activations, scratch: ~109 MiB here) and the slots */
    cp.placement = "cpu";
    cp.vram_budget = 116ull << 20;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &cp, &c);
    unlink(hw);
    CHECK_ST(st);
    c->adapt_cpu = false;
    CHECK(c->gpu && c->lay.n_slots > 0 && c->pl.promote_auto, "a GPU with promotion slots (%d)", c->lay.n_slots);
    uint8_t *s0 = calloc(m->n_slices, 1), *s1 = calloc(m->n_slices, 1), *s2 = calloc(m->n_slices, 1);
    CHECK_ST(tnd_ctx_eval(c, prompt, np, lg));
    int at = decode(c, got, 30, UINT64_MAX, lg);
    int k0 = promoted_set(c, s0);
    CHECK(k0 > 0, "the unloaded decode promotes something (%d)", k0);
    CHECK(tnd_ctx_n_replans(c) == 0, "no re-plan while nothing changes (%llu)",
          (unsigned long long)tnd_ctx_n_replans(c));
    /* another process takes the link: copies 6x slower */
    tnd_sim_set_copy_slowdown(c->side[1].be, 6);
    at += decode(c, got + at, 40, 1, lg);
    CHECK(tnd_ctx_n_replans(c) == 1, "a re-plan after the link slowed (%llu)", (unsigned long long)tnd_ctx_n_replans(c));
    at += decode(c, got + at, 1, UINT64_MAX, lg); /* the step that chooses again */
    int k1 = promoted_set(c, s1);
    CHECK(k1 < k0, "the slow link promotes less: %d slices, before %d", k1, k0);
    /* the link is free again: the first set comes back */
    tnd_sim_set_copy_slowdown(c->side[1].be, 1);
    at += decode(c, got + at, 40, 2, lg);
    CHECK(tnd_ctx_n_replans(c) == 2, "a re-plan after the link recovered (%llu)", (unsigned long long)tnd_ctx_n_replans(c));
    at += decode(c, got + at, 1, UINT64_MAX, lg);
    promoted_set(c, s2);
    /* the unloaded choice at this depth (attention grows with it) */
    CHECK(c->ad[0].plan_pcie == 1 && c->ad[0].plan_cpu == 1, "back to the profile's times (PCIe x%.3f)",
          c->ad[0].plan_pcie);
    CHECK_ST(tnd_xfer_choose(m, c->perf, NULL, &c->pl, c->lay.n_slots, 1, tnd_ctx_n_past(c) - 1, s0, NULL));
    CHECK(!memcmp(s0, s2, m->n_slices), "the unloaded promotion set is back");
    at += decode(c, got + at, n_gen - at, UINT64_MAX, lg);
    CHECK(tnd_ctx_n_replans(c) == 2, "no further re-plan (%llu)", (unsigned long long)tnd_ctx_n_replans(c));
    CHECK(at == n_gen && !memcmp(want, got, sizeof *got * n_gen), "the tokens are the CPU's through the re-plans");
    printf("sim: promoted %d slices, %d with the link 6x slower, %d again after; %d tokens as the CPU's\n", k0, k1,
           promoted_set(c, s2), at);
    tnd_ctx_free(c);
    free(s0);
    free(s1);
    free(s2);
    free(want);
    free(got);
    free(lg);
    tnd_model_free(m);
}

int main(void) {
    test_rule();
    test_gpu_rule();
    test_sim();
    test_sim_shared(true);
    test_sim_shared(false);
    tnd_backend_set_register_fault(false);
    return tc_summary();
}
