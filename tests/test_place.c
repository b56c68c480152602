/* Static placement: the DP against brute force on thousands of random small
 * instances (dense and the MoE rule, fixed items, first/last backends,
 * switch-free experts), the budget on large 14B-like instances (with
 * automatic granule coarsening), constructed MoE cases, the layer baseline,
 * the round cost model by hand, argument errors, the plan SVG, and the
 * per-expert static placement of a tiny MoE model (hot experts first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "sched/perf.h"
#include "sched/place.h"
#include "sched/plan_svg.h"
#include "util.h"

static double rnd(void) { return tc_unit(tc_splitmix()); }
static int rnd_int(int n) { return (int)(tc_splitmix() % (uint64_t)n); }

static const uint64_t MiB = 1ull << 20;

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b))); }

static uint64_t units(uint64_t bytes, uint64_t g) { return (bytes + g - 1) / g; }

/* Checks what every valid placement must satisfy: fixed items honored,
 * the rounded sizes within budget, res consistent with the placement. */
static void check_valid(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int fb, int lb,
                        double cl, const uint8_t *out, const tnd_place_result *res, const char *what) {
    uint64_t bytes = 0, u = 0;
    for (int i = 0; i < n; i++) {
        CHECK(out[i] == TND_B_CPU || out[i] == TND_B_GPU, "%s: out[%d] = %d", what, i, out[i]);
        if (it[i].fixed >= 0)
            CHECK(out[i] == it[i].fixed, "%s: item %d fixed %d placed %d", what, i, it[i].fixed, out[i]);
        if (out[i] == TND_B_GPU) {
            bytes += it[i].bytes;
            u += units(it[i].bytes, granule);
        }
    }
    CHECK(bytes <= budget, "%s: %llu bytes > budget %llu", what, (unsigned long long)bytes,
          (unsigned long long)budget);
    CHECK(u <= budget / granule, "%s: %llu units > %llu", what, (unsigned long long)u,
          (unsigned long long)(budget / granule));
    CHECK(res->gpu_bytes == bytes, "%s: res bytes %llu vs %llu", what, (unsigned long long)res->gpu_bytes,
          (unsigned long long)bytes);
    /* The objective recomputed here, independently of tnd_place_eval. */
    double g = 0;
    int prev = fb, nsw = 0;
    for (int i = 0; i < n; i++) {
        if (out[i] == TND_B_GPU)
            g += it[i].weight * (it[i].t_cpu - it[i].t_gpu);
        if (out[i] != prev && !it[i].switch_free) {
            g -= it[i].c_switch;
            nsw++;
        }
        prev = out[i];
    }
    if (lb >= 0 && prev != lb) {
        g -= cl;
        nsw++;
    }
    CHECK(close_to(g, res->gain), "%s: res gain %.17g vs recomputed %.17g", what, res->gain, g);
    CHECK(nsw == res->n_switches, "%s: switches %d vs %d", what, res->n_switches, nsw);
}

static const uint64_t granules[] = {1, 7, 1000, 1 << 20};

/* A random instance of n items; moe: layers of a few dense items then
 * experts (switch-free after the first of a layer). Returns the granule. */
static uint64_t random_instance(tnd_place_item *it, int n, bool moe, uint64_t *budget, int *fb, int *lb,
                                double *cl) {
    uint64_t g = granules[rnd_int(4)];
    uint64_t total = 0;
    int in_layer = 0, n_dense = 1 + rnd_int(3), n_exp = 2 + rnd_int(4);
    for (int i = 0; i < n; i++) {
        tnd_place_item *p = &it[i];
        memset(p, 0, sizeof *p);
        p->bytes = (uint64_t)rnd_int(20) * g + (rnd() < 0.3 ? (uint64_t)rnd_int((int)TND_MIN(g, 1000)) : 0);
        if (rnd() < 0.05)
            p->bytes = 0;
        p->t_cpu = rnd() * 2.0;
        p->t_gpu = rnd() < 0.8 ? p->t_cpu * rnd() * 0.5 : rnd() * 3.0; /* some GPU-slower items */
        p->c_switch = rnd() < 0.2 ? 0.0 : rnd() * 0.8;
        p->weight = 1.0;
        p->fixed = rnd() < 0.15 ? (int8_t)rnd_int(2) : -1;
        if (moe) {
            if (in_layer >= n_dense) {
                p->expert = true;
                p->weight = rnd() * 3.0;
                p->switch_free = in_layer > n_dense;
            }
            if (++in_layer == n_dense + n_exp)
                in_layer = 0;
        } else {
            p->switch_free = rnd() < 0.1;
        }
        total += units(p->bytes, g) * g;
    }
    int kind = rnd_int(4);
    *budget = kind == 0 ? 0 : kind == 1 ? total + (uint64_t)rnd_int(3) : (uint64_t)(rnd() * (double)total);
    *fb = rnd_int(2);
    *lb = rnd_int(3) - 1;
    *cl = rnd() * 0.5;
    return g;
}

static void test_dense_vs_brute(void) {
    tnd_place_item it[14];
    uint8_t a[14], b[14];
    int n_ok = 0, n_nomem = 0;
    for (int trial = 0; trial < 4000; trial++) {
        int n = rnd_int(15);
        uint64_t budget;
        int fb, lb;
        double cl;
        uint64_t g = random_instance(it, n, false, &budget, &fb, &lb, &cl);
        tnd_place_result ra, rb;
        tnd_status sa = tnd_place_dp(it, n, budget, g, fb, lb, cl, a, &ra);
        tnd_status sb = tnd_place_brute(it, n, budget, g, fb, lb, cl, b, &rb);
        CHECK(sa == sb, "trial %d: dp %d brute %d (%s)", trial, sa, sb, tnd_last_error());
        if (sa != TND_OK || sb != TND_OK) {
            CHECK(sa == TND_ERR_NOMEM, "trial %d: status %d", trial, sa);
            n_nomem++;
            continue;
        }
        n_ok++;
        check_valid(it, n, budget, g, fb, lb, cl, a, &ra, "dp");
        check_valid(it, n, budget, g, fb, lb, cl, b, &rb, "brute");
        CHECK(close_to(ra.gain, rb.gain), "trial %d n %d: dp gain %.17g brute %.17g", trial, n, ra.gain, rb.gain);
    }
    printf("dense: %d instances equal to brute force (%d infeasible, both said so)\n", n_ok, n_nomem);
    CHECK(n_ok > 3000, "too few feasible instances: %d", n_ok);
}

/* The MoE rule applied by the test itself, then brute force over the rest. */
static tnd_status moe_brute(const tnd_place_item *it, int n, uint64_t budget, uint64_t g, int fb, int lb, double cl,
                            uint8_t *out, tnd_place_result *res, bool *covers) {
    tnd_place_item cp[14];
    memcpy(cp, it, (size_t)n * sizeof *cp);
    bool any_expert = false;
    uint64_t need = 0;
    for (int i = 0; i < n; i++) {
        any_expert |= it[i].expert;
        if (it[i].expert ? it[i].fixed == TND_B_GPU : it[i].fixed != TND_B_CPU)
            need += units(it[i].bytes, g);
    }
    *covers = need <= budget / g;
    if (any_expert)
        for (int i = 0; i < n; i++)
            if (cp[i].fixed < 0)
                cp[i].fixed = (*covers && !cp[i].expert) ? TND_B_GPU : (!*covers && cp[i].expert) ? TND_B_CPU : -1;
    return tnd_place_brute(cp, n, budget, g, fb, lb, cl, out, res);
}

static void test_moe_vs_brute(void) {
    tnd_place_item it[14];
    uint8_t a[14], b[14];
    int n_ok = 0, n_cover = 0;
    for (int trial = 0; trial < 4000; trial++) {
        int n = rnd_int(15);
        uint64_t budget;
        int fb, lb;
        double cl;
        uint64_t g = random_instance(it, n, true, &budget, &fb, &lb, &cl);
        tnd_place_result ra, rb;
        bool covers;
        tnd_status sa = tnd_place_moe(it, n, budget, g, fb, lb, cl, a, &ra);
        tnd_status sb = moe_brute(it, n, budget, g, fb, lb, cl, b, &rb, &covers);
        CHECK(sa == sb, "trial %d: moe %d brute %d (%s)", trial, sa, sb, tnd_last_error());
        if (sa != TND_OK || sb != TND_OK)
            continue;
        n_ok++;
        check_valid(it, n, budget, g, fb, lb, cl, a, &ra, "moe");
        CHECK(close_to(ra.gain, rb.gain), "trial %d n %d: moe gain %.17g brute %.17g", trial, n, ra.gain, rb.gain);
        bool any_expert = false;
        for (int i = 0; i < n; i++)
            any_expert |= it[i].expert;
        if (!any_expert)
            continue;
        n_cover += covers;
        for (int i = 0; i < n; i++) {
            if (it[i].fixed >= 0)
                continue;
            if (covers && !it[i].expert)
                CHECK(a[i] == TND_B_GPU, "trial %d: budget covers non-experts, item %d on CPU", trial, i);
            if (!covers && it[i].expert)
                CHECK(a[i] == TND_B_CPU, "trial %d: budget short, expert %d on GPU", trial, i);
        }
    }
    printf("moe: %d instances equal to the rule + brute force (%d with the budget covering non-experts)\n", n_ok,
           n_cover);
    CHECK(n_ok > 2500 && n_cover > 500 && n_ok - n_cover > 500, "coverage: %d %d", n_ok, n_cover);
}

/* 14B-like: 40 layers x 7 tensors of 10-90 MB, times proportional to size
 * with per-role GPU speed-ups; plus an embedding and an output head. */
static int make_14b(tnd_place_item *it, int *layer_of, int n_layers) {
    int n = 0;
    it[n] = (tnd_place_item){.bytes = 400 * MiB, .t_cpu = 0, .t_gpu = 0, .c_switch = 0, .weight = 1, .fixed = TND_B_CPU};
    layer_of[n++] = -1;
    for (int l = 0; l < n_layers; l++)
        for (int k = 0; k < 7; k++) {
            uint64_t mb = 10 + (uint64_t)rnd_int(81);
            double tc = (double)mb * 1e-5 * (0.8 + 0.4 * rnd()), tg = tc * (0.05 + 0.3 * rnd());
            it[n] = (tnd_place_item){.bytes = mb * MiB + (uint64_t)rnd_int(1 << 20), .t_cpu = tc, .t_gpu = tg,
                                     .c_switch = 2e-5 + 1e-5 * rnd(), .weight = 1, .fixed = -1};
            layer_of[n++] = l;
        }
    it[n] = (tnd_place_item){.bytes = 700 * MiB, .t_cpu = 7e-3, .t_gpu = 4e-4, .c_switch = 2e-5, .weight = 1, .fixed = -1};
    layer_of[n++] = -1;
    return n;
}

static void test_large(void) {
    enum { NL = 286 }; /* 286 layers x 7 + 2 = 2004 items */
    tnd_place_item *it = malloc(sizeof *it * (NL * 7 + 2));
    int *layer_of = malloc(sizeof *layer_of * (NL * 7 + 2));
    uint8_t *out = malloc(NL * 7 + 2), *base = malloc(NL * 7 + 2);
    for (int trial = 0; trial < 12; trial++) {
        int nl = trial < 6 ? 40 : NL;
        int n = make_14b(it, layer_of, nl);
        uint64_t total = 0;
        for (int i = 0; i < n; i++)
            total += it[i].bytes;
        uint64_t budget = trial % 6 == 0 ? 5000 * MiB : (uint64_t)(rnd() * 1.1 * (double)total);
        tnd_place_result res;
        double t0 = tnd_time_s();
        tnd_status st = tnd_place_dp(it, n, budget, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &res);
        double dt = tnd_time_s() - t0;
        CHECK(st == TND_OK, "large: %s", tnd_last_error());
        if (st != TND_OK)
            continue;
        check_valid(it, n, budget, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &res, "large");
        /* The optimum is at least as good as the layer baseline and all-CPU. */
        uint64_t lb_bytes = tnd_place_layers(it, layer_of, n, budget, base);
        CHECK(lb_bytes <= budget, "layers: %llu > %llu", (unsigned long long)lb_bytes, (unsigned long long)budget);
        double gb = tnd_place_eval(it, n, base, TND_B_CPU, TND_B_CPU, 1e-5, NULL);
        CHECK(res.gain >= gb - 1e-12, "large: dp %.9g < layer baseline %.9g", res.gain, gb);
        CHECK(res.gain >= 0, "large: dp %.9g < all-CPU", res.gain);
        /* With room to spare under the budget, nothing worth moving is left. */
        if (budget > total + 2 * (uint64_t)n * MiB)
            CHECK(res.gpu_bytes == total - it[0].bytes, "large: everything fits but %llu of %llu placed",
                  (unsigned long long)res.gpu_bytes, (unsigned long long)total);
        if (trial == 0) {
            printf("dp: 40 layers x 7 items, budget 5000 MiB at 1 MiB: %.1f ms, gain %.3f ms, %d switches, %llu MiB\n",
                   dt * 1e3, res.gain * 1e3, res.n_switches, (unsigned long long)(res.gpu_bytes / MiB));
            CHECK(dt < 0.5, "dp took %.3f s", dt);
        }
    }
    /* Granule 1 byte over a 20 GB budget: the table would be ~10 TB, so the
     * granule is coarsened; the result must still respect the byte budget. */
    int n = make_14b(it, layer_of, 40);
    uint64_t budget = 20000 * MiB + 12345;
    tnd_place_result res;
    double t0 = tnd_time_s();
    tnd_status st = tnd_place_dp(it, n, budget, 1, TND_B_CPU, -1, 0, out, &res);
    CHECK(st == TND_OK, "coarsened: %s", tnd_last_error());
    if (st == TND_OK) {
        check_valid(it, n, budget, 1, TND_B_CPU, -1, 0, out, &res, "coarsened");
        uint64_t lb_bytes = tnd_place_layers(it, layer_of, n, budget, base);
        (void)lb_bytes;
        double gb = tnd_place_eval(it, n, base, TND_B_CPU, -1, 0, NULL);
        CHECK(res.gain >= gb * 0.99, "coarsened: dp %.9g vs layer baseline %.9g", res.gain, gb);
        printf("coarsened granule: 282 items, 20000 MiB at 1 B asked: %.0f ms, %llu MiB placed\n",
               (tnd_time_s() - t0) * 1e3, (unsigned long long)(res.gpu_bytes / MiB));
    }
    /* An unlimited budget (SimGPU without a memory size) is no constraint:
     * the DP caps it to room for everything at the granule asked (not a
     * granule of terabytes), and the cap must leave the same placement as
     * a budget with that room, for the dense DP and the MoE entry alike. */
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += it[i].bytes;
    tnd_place_result r_all, r_inf;
    for (int moe = 0; moe < 2; moe++) {
        tnd_status (*place)(const tnd_place_item *, int, uint64_t, uint64_t, int, int, double, uint8_t *,
                            tnd_place_result *) = moe ? tnd_place_moe : tnd_place_dp;
        st = place(it, n, total + 2 * (uint64_t)n * MiB, MiB, TND_B_CPU, TND_B_CPU, 1e-5, base, &r_all);
        tnd_status s2 = place(it, n, UINT64_MAX, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &r_inf);
        CHECK(st == TND_OK && s2 == TND_OK, "unlimited budget (%s): %s", moe ? "moe" : "dp", tnd_last_error());
        CHECK(!memcmp(out, base, (size_t)n) && close_to(r_all.gain, r_inf.gain) &&
                  r_inf.gpu_bytes == total - it[0].bytes,
              "unlimited budget (%s): gain %.9g, %llu bytes placed; with room for all %.9g", moe ? "moe" : "dp",
              r_inf.gain, (unsigned long long)r_inf.gpu_bytes, r_all.gain);
    }
    free(it);
    free(layer_of);
    free(out);
    free(base);
}

/* Two MoE layers: 3 dense tensors of 10 MiB, 8 experts of 5 MiB each. */
static int make_moe(tnd_place_item *it, const double *pop) {
    int n = 0;
    for (int l = 0; l < 2; l++) {
        for (int k = 0; k < 3; k++)
            it[n++] = (tnd_place_item){.bytes = 10 * MiB, .t_cpu = 1e-3, .t_gpu = 1e-4, .c_switch = 1e-5,
                                       .weight = 1, .fixed = -1};
        for (int e = 0; e < 8; e++)
            it[n++] = (tnd_place_item){.bytes = 5 * MiB, .t_cpu = 4e-3, .t_gpu = 1e-4, .c_switch = 0,
                                       .weight = pop[l * 8 + e], .fixed = -1, .expert = true,
                                       .switch_free = e > 0};
    }
    return n;
}

static void test_moe_cases(void) {
    double pop[16];
    for (int i = 0; i < 16; i++)
        pop[i] = 0.05 + 0.01 * ((i * 7) % 16); /* distinct popularities */
    tnd_place_item it[22];
    uint8_t out[22], d[22];
    tnd_place_result res, rd;
    int n = make_moe(it, pop);
    /* Covers non-experts (60 MiB) with 40 MiB to spare: 8 experts fit, and
     * with equal sizes and times the 8 most popular must be the ones. */
    CHECK(tnd_place_moe(it, n, 100 * MiB, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &res) == TND_OK, "%s",
          tnd_last_error());
    double thr;
    {
        double s[16];
        memcpy(s, pop, sizeof s);
        for (int i = 0; i < 16; i++)
            for (int j = i + 1; j < 16; j++)
                if (s[j] > s[i]) {
                    double t = s[i];
                    s[i] = s[j], s[j] = t;
                }
        thr = s[7];
    }
    int n_exp_gpu = 0;
    for (int i = 0, e = 0; i < n; i++) {
        if (!it[i].expert)
            CHECK(out[i] == TND_B_GPU, "covered: dense %d on CPU", i);
        else {
            n_exp_gpu += out[i] == TND_B_GPU;
            CHECK((out[i] == TND_B_GPU) == (pop[e] >= thr), "covered: expert %d pop %.2f placed %d", e, pop[e],
                  out[i]);
            e++;
        }
    }
    CHECK(n_exp_gpu == 8 && res.gpu_bytes == 100 * MiB, "covered: %d experts, %llu bytes", n_exp_gpu,
          (unsigned long long)res.gpu_bytes);
    /* 50 MiB < 60 MiB of non-experts: no expert on the GPU (plain DP would
     * take the experts: higher gain per byte here). */
    CHECK(tnd_place_moe(it, n, 50 * MiB, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &res) == TND_OK, "%s",
          tnd_last_error());
    int n_dense_gpu = 0;
    for (int i = 0; i < n; i++) {
        if (it[i].expert)
            CHECK(out[i] == TND_B_CPU, "short: expert item %d on GPU", i);
        else
            n_dense_gpu += out[i] == TND_B_GPU;
    }
    CHECK(n_dense_gpu == 5, "short: %d dense on GPU, expected 5", n_dense_gpu);
    CHECK(tnd_place_dp(it, n, 50 * MiB, MiB, TND_B_CPU, TND_B_CPU, 1e-5, d, &rd) == TND_OK, "%s", tnd_last_error());
    int n_exp_dp = 0;
    for (int i = 0; i < n; i++)
        n_exp_dp += it[i].expert && d[i] == TND_B_GPU;
    CHECK(n_exp_dp > 0 && rd.gain > res.gain, "plain dp should prefer experts here: %d, %.9g vs %.9g", n_exp_dp,
          rd.gain, res.gain);
    /* A fixed-CPU dense tensor does not count against "covers". */
    it[0].fixed = TND_B_CPU;
    CHECK(tnd_place_moe(it, n, 50 * MiB, MiB, TND_B_CPU, TND_B_CPU, 1e-5, out, &res) == TND_OK, "%s",
          tnd_last_error());
    CHECK(out[0] == TND_B_CPU, "fixed dense placed on the GPU");
    for (int i = 1; i < n; i++)
        if (!it[i].expert)
            CHECK(out[i] == TND_B_GPU, "covered with item 0 fixed: dense %d on CPU", i);
    /* Dense model: the same as tnd_place_dp. */
    tnd_place_item dn[6];
    for (int i = 0; i < 6; i++)
        dn[i] = it[i < 3 ? i : i + 8], dn[i].fixed = -1;
    CHECK(tnd_place_moe(dn, 6, 25 * MiB, MiB, TND_B_CPU, -1, 0, out, &res) == TND_OK, "%s", tnd_last_error());
    CHECK(tnd_place_dp(dn, 6, 25 * MiB, MiB, TND_B_CPU, -1, 0, d, &rd) == TND_OK, "%s", tnd_last_error());
    CHECK(memcmp(out, d, 6) == 0 && res.gain == rd.gain, "dense moe != dp");
}

static void test_layers(void) {
    /* embedding, 5 layers of 3 tensors (layer l: 10+l, 20, 30 MiB), head. */
    tnd_place_item it[17];
    int layer_of[17];
    int n = 0;
    it[n] = (tnd_place_item){.bytes = 50 * MiB, .weight = 1, .fixed = -1};
    layer_of[n++] = -1;
    for (int l = 0; l < 5; l++)
        for (int k = 0; k < 3; k++) {
            it[n] = (tnd_place_item){.bytes = (uint64_t)(k == 0 ? 10 + l : 10 * (k + 1)) * MiB, .weight = 1,
                                     .fixed = -1};
            layer_of[n++] = l;
        }
    it[n] = (tnd_place_item){.bytes = 40 * MiB, .weight = 1, .fixed = -1};
    layer_of[n++] = -1;
    uint8_t out[17];
    /* Layers weigh 60..64 MiB. 130 MiB: layers 4 (64) and 3 (63) = 127. */
    uint64_t b = tnd_place_layers(it, layer_of, n, 130 * MiB, out);
    CHECK(b == 127 * MiB, "layers: %llu", (unsigned long long)(b / MiB));
    for (int i = 0; i < n; i++)
        CHECK(out[i] == (layer_of[i] >= 3 ? TND_B_GPU : TND_B_CPU), "layers 130: item %d -> %d", i, out[i]);
    /* All layers (310) but not the head (40): head stays; embedding always. */
    b = tnd_place_layers(it, layer_of, n, 340 * MiB, out);
    CHECK(b == 310 * MiB, "layers 340: %llu", (unsigned long long)(b / MiB));
    CHECK(out[0] == TND_B_CPU && out[16] == TND_B_CPU, "layers 340: emb %d head %d", out[0], out[16]);
    b = tnd_place_layers(it, layer_of, n, 350 * MiB, out);
    CHECK(b == 350 * MiB && out[16] == TND_B_GPU && out[0] == TND_B_CPU, "layers 350: %llu head %d",
          (unsigned long long)(b / MiB), out[16]);
    b = tnd_place_layers(it, layer_of, n, 0, out);
    CHECK(b == 0, "layers 0: %llu", (unsigned long long)b);
    for (int i = 0; i < n; i++)
        CHECK(out[i] == TND_B_CPU, "layers 0: item %d", i);
    /* Contiguity: a big layer 2 stops the walk even though layer 1 would fit. */
    it[7].bytes = 500 * MiB; /* layer 2, first tensor */
    b = tnd_place_layers(it, layer_of, n, 250 * MiB, out);
    CHECK(b == 127 * MiB, "layers big: %llu", (unsigned long long)(b / MiB));
    for (int i = 0; i < n; i++)
        CHECK(out[i] == (layer_of[i] >= 3 ? TND_B_GPU : TND_B_CPU), "layers big: item %d -> %d", i, out[i]);
    /* A fixed-CPU tensor stays put; its layer's other tensors still go. */
    it[7].bytes = 12 * MiB;
    it[14].fixed = TND_B_CPU; /* layer 4, second tensor (20 MiB) */
    b = tnd_place_layers(it, layer_of, n, 130 * MiB, out);
    CHECK(out[14] == TND_B_CPU && out[13] == TND_B_GPU && b == 107 * MiB, "layers fixed: %d %d %llu", out[14],
          out[13], (unsigned long long)(b / MiB));
}

static void test_round_time(void) {
    tnd_place_item it[3] = {
        {.bytes = 1, .t_cpu = 1.0, .t_gpu = 0.25, .c_switch = 0.5, .weight = 1, .fixed = -1},
        {.bytes = 1, .t_cpu = 2.0, .t_gpu = 0.5, .c_switch = 0.125, .weight = 1, .fixed = -1},
        {.bytes = 1, .t_cpu = 3.0, .t_gpu = 1.0, .c_switch = 0.0625, .weight = 2, .fixed = -1},
    };
    const double cl = 0.03125;
    uint8_t p1[3] = {1, 1, 0}, p2[3] = {0, 1, 1}, p3[3] = {0, 1, 0};
    /* 0.5 + 0.25 + 0.5 + 0.0625 + 2*3.0 */
    CHECK(tnd_place_round_time(it, 3, p1, TND_B_CPU, TND_B_CPU, cl) == 7.3125, "p1 %.17g",
          tnd_place_round_time(it, 3, p1, TND_B_CPU, TND_B_CPU, cl));
    /* 1.0 + 0.125 + 0.5 + 2*1.0 + c_last */
    CHECK(tnd_place_round_time(it, 3, p2, TND_B_CPU, TND_B_CPU, cl) == 3.65625, "p2");
    /* no c_last when last_backend < 0; first backend GPU: switch before 0 */
    CHECK(tnd_place_round_time(it, 3, p2, TND_B_GPU, -1, cl) == 4.125, "p2b %.17g",
          tnd_place_round_time(it, 3, p2, TND_B_GPU, -1, cl));
    it[2].switch_free = true; /* 1.0 + 0.125 + 0.5 + 0 + 6.0 */
    CHECK(tnd_place_round_time(it, 3, p3, TND_B_CPU, TND_B_CPU, cl) == 7.625, "p3");
    it[2].switch_free = false;
    /* round_time + gain is the same for every placement (all-CPU time). */
    tnd_place_item r[10];
    uint8_t w[10];
    for (int trial = 0; trial < 200; trial++) {
        uint64_t budget;
        int fb, lb;
        double c;
        random_instance(r, 10, trial & 1, &budget, &fb, &lb, &c);
        double base = 0;
        for (int i = 0; i < 10; i++)
            base += r[i].weight * r[i].t_cpu, w[i] = (uint8_t)rnd_int(2);
        uint8_t cpu[10] = {0};
        double base_sw = tnd_place_round_time(r, 10, cpu, fb, lb, c) - base; /* switches of all-CPU */
        double t = tnd_place_round_time(r, 10, w, fb, lb, c);
        double g = tnd_place_eval(r, 10, w, fb, lb, c, NULL);
        CHECK(close_to(t + g, base), "trial %d: time %.17g + gain %.17g != %.17g (+%g)", trial, t, g, base, base_sw);
    }
}

static void test_errors(void) {
    tnd_place_item it[21];
    uint8_t out[21];
    tnd_place_result res;
    for (int i = 0; i < 21; i++)
        it[i] = (tnd_place_item){.bytes = MiB, .t_cpu = 1, .t_gpu = 0.5, .c_switch = 0.1, .weight = 1, .fixed = -1};
    CHECK(tnd_place_dp(it, 3, MiB, 0, 0, -1, 0, out, &res) == TND_ERR_ARG, "granule 0");
    CHECK(tnd_place_dp(it, -1, MiB, 1, 0, -1, 0, out, &res) == TND_ERR_ARG, "n < 0");
    CHECK(tnd_place_dp(it, 3, MiB, 1, 2, -1, 0, out, &res) == TND_ERR_ARG, "first backend 2");
    CHECK(tnd_place_brute(it, 21, MiB, 1, 0, -1, 0, out, &res) == TND_ERR_ARG, "brute n 21");
    CHECK(tnd_place_dp(it, 0, MiB, 1, 0, -1, 0, NULL, &res) == TND_OK && res.gain == 0, "n 0");
    it[1].fixed = TND_B_GPU;
    it[2].fixed = TND_B_GPU;
    tnd_status st = tnd_place_dp(it, 3, MiB, MiB, 0, -1, 0, out, &res);
    CHECK(st == TND_ERR_NOMEM && strlen(tnd_last_error()) > 0, "fixed GPU over budget: %d", st);
    CHECK(tnd_place_dp(it, 3, 2 * MiB, MiB, 0, -1, 0, out, &res) == TND_OK && out[0] == 0 && out[1] == 1 &&
              out[2] == 1,
          "fixed GPU exactly fits");
    it[1].t_gpu = NAN;
    CHECK(tnd_place_dp(it, 3, MiB, 1, 0, -1, 0, out, &res) == TND_ERR_ARG, "NaN time");
    CHECK(tnd_place_moe(it, 3, MiB, 1, 0, -1, 0, out, &res) == TND_ERR_ARG, "NaN time moe");
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static int count(const char *s, const char *needle) {
    int k = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        k++;
    return k;
}

static void test_svg(void) {
    const char *dir = getenv("TND_BUILD") ? getenv("TND_BUILD") : "/tmp";
    char path[1024];
    snprintf(path, sizeof path, "%s/test_place_%ld.svg", dir, (long)getpid());
    enum { ROWS = 42, ROLES = 9 };
    const char *rows[ROWS];
    char names[ROWS][16];
    for (int r = 0; r < ROWS; r++) {
        if (r == 0)
            snprintf(names[r], sizeof names[r], "token_embd");
        else if (r == ROWS - 1)
            snprintf(names[r], sizeof names[r], "output");
        else
            snprintf(names[r], sizeof names[r], "blk.%d", r - 1);
        rows[r] = names[r];
    }
    const char *roles[ROLES] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_exps", "ffn_up_exps",
                                "ffn_down_exps", "x<&>\"'", "w"};
    float cells[ROWS * ROLES];
    int n_mixed = 0;
    for (int i = 0; i < ROWS * ROLES; i++) {
        int k = rnd_int(4);
        cells[i] = k == 0 ? -1.0f : k == 1 ? 0.0f : k == 2 ? 1.0f : (float)(0.05 + 0.9 * rnd());
        n_mixed += k == 3;
    }
    tnd_status st = tnd_plan_svg(path, "qwen3-14b & friends: 5000 MiB <budget>", ROWS, rows, ROLES, roles, cells);
    CHECK(st == TND_OK, "svg: %s", tnd_last_error());
    char *s = slurp(path);
    CHECK(s != NULL, "svg not written");
    if (s) {
        CHECK(strncmp(s, "<?xml", 5) == 0 && strstr(s, "<svg ") != NULL, "svg head");
        size_t len = strlen(s);
        CHECK(len > 8 && strcmp(s + len - 7, "</svg>\n") == 0, "svg tail");
        CHECK(count(s, "class=\"cell\"") == ROWS * ROLES, "cells: %d", count(s, "class=\"cell\""));
        CHECK(count(s, "class=\"legend\"") == 4, "legend: %d", count(s, "class=\"legend\""));
        CHECK(count(s, "class=\"frac\"") == n_mixed + 1, "fracs: %d vs %d", count(s, "class=\"frac\""), n_mixed + 1);
        CHECK(count(s, "<rect") == ROWS * ROLES + n_mixed + 1 + 4 + 1, "rects: %d", count(s, "<rect"));
        CHECK(count(s, "<") == count(s, ">"), "unbalanced angle brackets");
        CHECK(count(s, "<text") == count(s, "</text>") && count(s, "<title>") == count(s, "</title>"),
              "unclosed elements");
        CHECK(strstr(s, "&amp; friends") && strstr(s, "&lt;budget&gt;") && strstr(s, "x&lt;&amp;&gt;&quot;&apos;"),
              "escaping");
        CHECK(strstr(s, ">blk.39<") && strstr(s, ">output<"), "row labels");
        free(s);
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "temp file left behind");
    unlink(path);
    st = tnd_plan_svg("/nonexistent-dir-tandem/x/plan.svg", "t", ROWS, rows, ROLES, roles, cells);
    CHECK(st == TND_ERR_IO && strstr(tnd_last_error(), "nonexistent"), "bad path: %d %s", st, tnd_last_error());
    cells[5] = NAN;
    CHECK(tnd_plan_svg(path, "t", ROWS, rows, ROLES, roles, cells) == TND_ERR_ARG, "NaN cell");
    CHECK(access(path, F_OK) != 0, "file written despite the error");
}

/* Bytes the GPU holds under p: resident slices and experts, KV caches. */
static uint64_t placed_bytes(const tnd_model *m, const tnd_placement *p, uint64_t kv_layer) {
    uint64_t b = 0;
    for (int i = 0; i < m->n_slices; i++)
        if (!tnd_slice_small(m->slices[i])) b += tnd_slice_gpu_bytes(m, p, i);
    for (int l = 0; l < m->hp.n_layer; l++) b += p->kv[l] ? kv_layer : 0;
    return b;
}

/* The decode calibration's factor (tnd_perf_decode_factor): used as
 * measured in the usual range; slower steps clamped; faster ones (the ops
 * timed alone were slowed) used down to a floor; NaN as the range's low
 * end. */
static void test_decode_factor(void) {
    static const double in[] = {1.1, 0.9, 2.0, 3.5, 0.3, 0.05, NAN}, want[] = {1.1, 0.9, 2.0, 2.0, 0.3, 0.2, 0.9};
    static const bool dist[] = {false, false, false, true, true, true, true};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        bool d = !dist[i];
        const double got = tnd_perf_decode_factor(in[i], &d);
        CHECK(got == want[i] && d == dist[i], "decode factor %g: %g (disturbed %d), want %g (%d)", in[i], got, d,
              want[i], dist[i]);
    }
}

/* tnd_static_place on a synthesized tiny qwen3moe with a hand-made perf DB
 * (GPU 10x faster, free switches): experts are placed one by one, the
 * budget is never exceeded, and with a hot-expert table no CPU expert is
 * more popular than a GPU one. */
static void test_static_experts(void) {
    const char *bin = getenv("TND_BIN");
    char path[] = "/tmp/tnd_place_moe_XXXXXX", cmd[4096];
    int fd = mkstemp(path);
    if (!bin || fd < 0) {
        printf("static experts: skipped (no TND_BIN)\n");
        return;
    }
    close(fd);
    snprintf(cmd, sizeof cmd, "'%s' synth --force --shape tiny-qwen3moe -o '%s' > /dev/null 2>&1", bin, path);
    CHECK(system(cmd) == 0, "synth");
    tnd_model_params mp = tnd_model_default_params();
    mp.n_threads = 1;
    tnd_model *m = NULL;
    if (tnd_model_load(path, &mp, &m) != TND_OK) {
        CHECK(0, "load: %s", tnd_last_error());
        unlink(path);
        return;
    }
    int L = m->hp.n_layer, E = m->hp.n_expert, K = m->hp.n_expert_used;
    tnd_perf pf = {.n_slices = m->n_slices, .n_layer = L, .b_pcie = 1e15, .b_cpu = 50e9, .b_hbm = 1e12, .lat = 0};
    pf.t_cpu = calloc((size_t)m->n_slices * TND_PERF_NK, sizeof(double));
    pf.t_gpu = calloc((size_t)m->n_slices * TND_PERF_NK, sizeof(double));
    for (int i = 0; i < m->n_slices; i++)
        for (int k = 0; k < TND_PERF_NK; k++) {
            double t = (double)m->slices[i]->t->nbytes / 50e9 * (1 + tnd_perf_nt[k] / 64.0);
            pf.t_cpu[i * TND_PERF_NK + k] = tnd_slice_small(m->slices[i]) ? 0 : t;
            pf.t_gpu[i * TND_PERF_NK + k] = tnd_slice_small(m->slices[i]) ? 0 : t / 10;
        }
    for (int k = 0; k < TND_PERF_NK; k++) {
        pf.attn_cpu[k] = 1e-4 * tnd_perf_nt[k], pf.attn_gpu[k] = 1e-5 * tnd_perf_nt[k];
        pf.other_cpu[k] = 1e-5, pf.other_gpu[k] = 1e-5;
    }
    uint64_t kv_layer = 2ull * 64 * (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim * 2;
    uint64_t dense = 0, experts = 0;
    for (int i = 0; i < m->n_slices; i++) {
        if (tnd_slice_small(m->slices[i])) continue;
        *(m->slices[i]->n_expert > 1 ? &experts : &dense) += m->slices[i]->t->nbytes;
    }
    dense += kv_layer * (uint64_t)L;
    /* popularity: distinct per layer, n_used uses per token in all */
    double *pop = calloc((size_t)L * E, sizeof(double));
    for (int l = 0; l < L; l++) {
        double sum = 0;
        for (int e = 0; e < E; e++) sum += pop[l * E + e] = 1.0 + (double)((e * 7 + l * 3) % E) * ((e * 7 + l * 3) % E);
        for (int e = 0; e < E; e++) pop[l * E + e] *= K / sum;
    }
    for (int calib = 0; calib < 2; calib++) {
        pf.pop = calib ? pop : NULL;
        pf.n_expert = calib ? E : 0;
        uint64_t budgets[] = {dense / 2, dense + experts / 8, dense + experts / 3, dense + experts * 3 / 4,
                              dense + experts + (1u << 20)};
        for (size_t bi = 0; bi < sizeof budgets / sizeof *budgets; bi++) {
            uint64_t budget = budgets[bi];
            tnd_placement p;
            CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "placement");
            tnd_status st = tnd_static_place(m, &pf, budget, kv_layer, 64, 32, 1, false, &p);
            CHECK(st == TND_OK, "static place at %llu: %s", (unsigned long long)budget, tnd_last_error());
            if (st) {
                tnd_placement_free(&p);
                continue;
            }
            uint64_t used = placed_bytes(m, &p, kv_layer);
            CHECK(used <= budget, "budget %llu exceeded: %llu", (unsigned long long)budget, (unsigned long long)used);
            int n_gpu = 0, n_split = 0;
            double min_gpu = INFINITY, max_cpu = -INFINITY;
            for (int l = 0; l < L; l++) {
                int g = tnd_placement_gpu_experts(m, &p, l);
                n_gpu += g;
                n_split += p.split[l];
                CHECK(p.split[l] == (g > 0 && g < E), "layer %d: split flag vs %d GPU experts", l, g);
                for (int e = 0; e < E; e++) {
                    bool on = p.split[l] ? p.exp[l * E + e] == TND_SIDE_GPU : g == E;
                    if (on) min_gpu = fmin(min_gpu, pop[l * E + e]);
                    else max_cpu = fmax(max_cpu, pop[l * E + e]);
                }
            }
            if (bi == 0) CHECK(n_gpu == 0, "budget short of the dense part: experts stay on the CPU (%d)", n_gpu);
            if (bi == 1 || bi == 2 || bi == 3) {
                CHECK(n_gpu > 0 && n_gpu < L * E, "budget %zu: %d of %d experts on the GPU", bi, n_gpu, L * E);
                /* the GPU's share of the expert bytes tracks the budget left to experts */
                uint64_t room = budget - dense, per = experts / (uint64_t)(L * E);
                CHECK((uint64_t)n_gpu * per <= room && (uint64_t)(n_gpu + L + 8) * per >= room * 9 / 10,
                      "budget %zu: %d experts of %llu bytes for %llu bytes of room", bi, n_gpu,
                      (unsigned long long)per, (unsigned long long)room);
                if (calib) {
                    CHECK(n_split > 0, "some layers split");
                    CHECK(min_gpu >= max_cpu, "hot experts first: a GPU expert used %.4f < a CPU one %.4f", min_gpu,
                          max_cpu);
                }
            }
            if (bi == 4) CHECK(n_gpu == L * E && n_split == 0, "everything fits: all experts (%d) on the GPU", n_gpu);
            printf("static experts (%s): budget %5.1f MiB: %3d of %d experts on the GPU, %d layers split\n",
                   calib ? "hot-expert table" : "uniform", budget / 1048576.0, n_gpu, L * E, n_split);
            tnd_placement_free(&p);
        }
    }
    /* The perf DB survives its cache file, the hot-expert table and the
     * one-expert CPU times included. */
    pf.pop = pop;
    pf.n_expert = E;
    pf.cal_decode = 1.25;
    pf.sw_host = 17e-6;
    pf.t_cpu_one = calloc((size_t)m->n_slices, sizeof(double));
    for (int i = 0; i < m->n_slices; i++)
        if (m->slices[i]->n_expert > 1) pf.t_cpu_one[i] = pf.t_cpu[i * TND_PERF_NK] / K;
    char db[] = "/tmp/tnd_perf_XXXXXX";
    int dfd = mkstemp(db);
    CHECK(dfd >= 0, "temp file");
    if (dfd >= 0) {
        close(dfd);
        tnd_perf back;
        CHECK(tnd_perf_save(&pf, db) == TND_OK, "save: %s", tnd_last_error());
        CHECK(tnd_perf_load(m, db, &back) == TND_OK, "load: %s", tnd_last_error());
        double worst = 0;
#define REL(a, b) fmax(worst, fabs((a) - (b)) / fmax(fabs(a), 1e-30))
        for (int i = 0; back.t_cpu && i < m->n_slices; i++) {
            for (int k = 0; k < TND_PERF_NK; k++) {
                worst = REL(pf.t_cpu[i * TND_PERF_NK + k], back.t_cpu[i * TND_PERF_NK + k]);
                worst = REL(pf.t_gpu[i * TND_PERF_NK + k], back.t_gpu[i * TND_PERF_NK + k]);
            }
            worst = REL(pf.t_cpu_one[i], back.t_cpu_one[i]);
        }
        for (int i = 0; back.pop && i < L * E; i++) worst = REL(pop[i], back.pop[i]);
        worst = REL(pf.cal_decode, back.cal_decode);
        worst = REL(pf.sw_host, back.sw_host);
#undef REL
        CHECK(back.t_cpu && back.pop && back.n_expert == E && worst < 1e-5, "round trip: worst relative error %g",
              worst);
        tnd_perf_free(&back);
        unlink(db);
    }
    pf.sw_host = 0; /* the checks below model no per-switch host cost */
    /* A split layer's CPU part in a decode step: one-expert times in
     * proportion (no fixed cost) predict exactly the routing share; a fixed
     * cost per op makes the step dearer. */
    tnd_placement p;
    CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "placement");
    if (tnd_static_place(m, &pf, dense + experts / 3, kv_layer, 64, 32, 1, false, &p) == TND_OK) {
        int n_split = 0;
        for (int l = 0; l < L; l++) n_split += p.split[l];
        double lin = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        double *one = pf.t_cpu_one;
        pf.t_cpu_one = NULL;
        double share = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        pf.t_cpu_one = one;
        for (int i = 0; i < m->n_slices; i++) one[i] *= 3;
        double fixed = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        CHECK(n_split > 0 && fabs(lin - share) <= 1e-9 * share && fixed > share,
              "split decode: %d split layers, linear %.9g vs share %.9g, with fixed cost %.9g", n_split, lin, share,
              fixed);
    }
    tnd_placement_free(&p);
    /* Two clocks: all on the GPU, a decode step without launch costs is the
     * sum of the GPU's times; queuing each op costs the host pf.launch, and
     * when that exceeds the kernels the step is bound by the queuing. */
    CHECK(tnd_placement_make(m, "gpu", NULL, 0, 0, &p) == TND_OK, "gpu placement");
    {
        double sum = 0;
        int n_ops = 0;
        for (int l = 0; l < L; l++) {
            sum += tnd_perf_attn_time(&pf, TND_SIDE_GPU, 1, 16) + tnd_perf_other_time(&pf, TND_SIDE_GPU, 1);
            n_ops += OTHER_OPS + 1; /* attention and the layer's weightless ops */
        }
        for (int i = 0; i < m->n_slices; i++)
            if (!tnd_slice_small(m->slices[i]) && m->slices[i] != &m->tok_embd) {
                sum += tnd_perf_slice_time(&pf, i, TND_SIDE_GPU, 1);
                n_ops++;
            }
        double free_q = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        pf.launch = 1e-3; /* far above every kernel of the tiny model */
        double bound = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        pf.launch = 0;
        /* (plus the activation's trips, at the test DB's PCIe rate: picoseconds) */
        CHECK(fabs(free_q - sum) <= 1e-9, "all on the GPU, free queuing: %.9g vs sum of times %.9g", free_q,
              sum);
        /* (one more queued op: the activation's copy to the GPU) */
        CHECK(bound >= (n_ops + 1) * 1e-3 && bound <= (n_ops + 1) * 1e-3 + sum + 1e-9,
              "queuing-bound step: %.6g s for %d ops at 1 ms (kernels %.6g s)", bound, n_ops, sum);
    }
    tnd_placement_free(&p);
    /* The decode calibration scales the CPU's decode times only: an
     * all-CPU decode step by exactly the factor, prefill not at all. */
    CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "cpu placement");
    {
        double dec = tnd_perf_predict(m, &pf, &p, 0, 1, 16), pre = tnd_perf_predict(m, &pf, &p, 0, 512, 0);
        double gpu_dec = pf.t_gpu[0], cal = pf.cal_decode;
        tnd_perf_scale_cpu_decode(&pf, 1.3);
        double dec2 = tnd_perf_predict(m, &pf, &p, 0, 1, 16), pre2 = tnd_perf_predict(m, &pf, &p, 0, 512, 0);
        CHECK(dec > 0 && fabs(dec2 - 1.3 * dec) <= 1e-9 * dec && pre2 == pre && pf.t_gpu[0] == gpu_dec &&
                  fabs(pf.cal_decode - 1.3 * cal) <= 1e-12,
              "decode calibration 1.3: step %.6g -> %.6g s, prefill %.6g -> %.6g s, cal %.3f -> %.3f", dec, dec2,
              pre, pre2, cal, pf.cal_decode);
    }
    tnd_placement_free(&p);
    /* The hybrid calibration's fit inverts the model: a step predicted
     * with a per-switch cost s is fitted back to s; a faster step than the
     * model's without one gives 0, a far slower one (a disturbed
     * measurement) the cap. */
    pf.sw_host = 0;
    pf.lat = 10e-6;
    pf.launch = 4e-6;
    CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "placement");
    if (tnd_static_place(m, &pf, dense + experts / 3, kv_layer, 64, 32, 1, false, &p) == TND_OK) {
        const double cap = tnd_perf_sw_host_max(&pf), base = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        pf.sw_host = 30e-6;
        const double slower = tnd_perf_predict(m, &pf, &p, 0, 1, 16);
        const double want[3] = {slower, base * 0.8, base * 100}, fit[3] = {30e-6, 0, cap};
        CHECK(fabs(cap - 70e-6) < 1e-12 && slower > base, "cap %.3g s; a switch cost slows the step (%.6g -> %.6g)",
              cap, base, slower);
        for (int k = 0; k < 3; k++) {
            pf.sw_host = 5e-6;
            bool ok = tnd_perf_fit_switch(m, &pf, &p, 16, want[k]);
            CHECK(ok && fabs(pf.sw_host - fit[k]) <= 1e-9, "fit %d: sw_host %.6g s, want %.6g", k, pf.sw_host,
                  fit[k]);
        }
    } else {
        CHECK(0, "static placement for the fit: %s", tnd_last_error());
    }
    tnd_placement_free(&p);
    /* one move to the GPU and back (the output head) is too few to fit */
    CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "cpu placement");
    p.where[m->output.id] = TND_SIDE_GPU;
    pf.sw_host = 3e-6;
    CHECK(m->output.id >= 0 && !tnd_perf_fit_switch(m, &pf, &p, 16, 1.0) && pf.sw_host == 3e-6,
          "a step with one move to the GPU fits nothing: sw_host %.3g", pf.sw_host);
    tnd_placement_free(&p);
    CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "cpu placement");
    pf.sw_host = 3e-6;
    CHECK(!tnd_perf_fit_switch(m, &pf, &p, 16, 1.0) && pf.sw_host == 3e-6,
          "an all-CPU step (no switches) fits nothing: sw_host %.3g", pf.sw_host);
    pf.sw_host = pf.lat = pf.launch = 0;
    tnd_placement_free(&p);
    /* many sequences: a decode round reads each weight once for all of them
     * and runs attention per sequence, so a budget short of everything goes
     * more to the KV caches (attention) and less to weights than for one */
    pf.pop = NULL;
    pf.n_expert = 0;
    /* KV caches from small to as large as the weights: never fewer GPU
     * caches for 16 sequences than for one, and more for some */
    int more = 0;
    for (int sc = 0; sc < 3; sc++) /* attention from as costly as in the DB above to a hundredth */
    for (int f = 1; f <= 8; f *= 2) {
        for (int k = 0; k < TND_PERF_NK; k++) {
            const double a = sc == 0 ? 1 : sc == 1 ? 0.1 : 0.01;
            pf.attn_cpu[k] = a * 1e-4 * tnd_perf_nt[k], pf.attn_gpu[k] = a * 1e-5 * tnd_perf_nt[k];
        }
        uint64_t kvb = (dense - kv_layer * (uint64_t)L) * (uint64_t)f / (8ull * (uint64_t)L), bud = (dense - kv_layer * (uint64_t)L) / 2;
        int n_kv[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            CHECK(tnd_placement_make(m, "cpu", NULL, 0, 0, &p) == TND_OK, "cpu placement");
            CHECK(tnd_static_place(m, &pf, bud, kvb, 64, 32, k ? 16 : 1, false, &p) == TND_OK, "n_seq %d: %s",
                  k ? 16 : 1, tnd_last_error());
            CHECK(placed_bytes(m, &p, kvb) <= bud, "n_seq %d: within the budget", k ? 16 : 1);
            for (int l = 0; l < L; l++) n_kv[k] += p.kv[l] == TND_SIDE_GPU;
            tnd_placement_free(&p);
        }
        CHECK(n_kv[1] >= n_kv[0], "KV %d/8 of the weights: GPU KV layers %d for one sequence, %d for 16", f, n_kv[0],
              n_kv[1]);
        more += n_kv[1] > n_kv[0];
        printf("static placement, attention x%g, KV %d/8 of the weights: %d GPU KV layers for 1 sequence, %d for 16\n",
               sc == 0 ? 1 : sc == 1 ? 0.1 : 0.01, f, n_kv[0], n_kv[1]);
    }
    CHECK(more > 0, "16 sequences never put more KV caches on the GPU than one");
    free(pf.t_cpu_one);
    free(pop);
    free(pf.t_cpu);
    free(pf.t_gpu);
    tnd_model_free(m);
    unlink(path);
}

int main(void) {
    tc_rng = 0x5eed5eed12345678ull;
    test_static_experts();
    test_dense_vs_brute();
    test_moe_vs_brute();
    test_large();
    test_moe_cases();
    test_layers();
    test_round_time();
    test_decode_factor();
    test_errors();
    test_svg();
    return tc_summary();
}
