/* Static placement: ATSInfer Algorithm 1 (knapsack DP with a switch penalty),
 * the MoE partition rule, a brute-force oracle, the round cost model and the
 * llama.cpp-style layer baseline. See place.h and docs/ARCHITECTURE.md
 * (Static placement). */
#include "sched/place.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Limits on the DP size; beyond them the granule is coarsened rather than
 * failing (a coarser granule only wastes some budget). The work cap bounds
 * both time (~1-2 ns per (item, unit) pair while the value rows stay in
 * cache) and the backtracking table (2 bits per pair: 128 MiB at the cap,
 * under the ~1 GiB asked for); the unit cap keeps the four value rows of
 * doubles at 8 MiB (2^18 units of 1 MiB = 256 GiB, beyond any GPU). */
#define PLACE_MAX_PAIRS ((uint64_t)1 << 29)
#define PLACE_MAX_UNITS ((uint64_t)1 << 18)

static tnd_status check_args(const tnd_place_item *it, int n, uint64_t granule, int first_backend, int last_backend,
                             double c_last, const uint8_t *out) {
    if (n < 0)
        return tnd_fail(TND_ERR_ARG, "placement: n = %d", n);
    if (granule == 0)
        return tnd_fail(TND_ERR_ARG, "placement: granule is 0");
    if (n > 0 && (!it || !out))
        return tnd_fail(TND_ERR_ARG, "placement: NULL items or output");
    if (first_backend != TND_B_CPU && first_backend != TND_B_GPU)
        return tnd_fail(TND_ERR_ARG, "placement: first_backend %d", first_backend);
    if (last_backend > TND_B_GPU || last_backend < -1)
        return tnd_fail(TND_ERR_ARG, "placement: last_backend %d", last_backend);
    if (!isfinite(c_last))
        return tnd_fail(TND_ERR_ARG, "placement: c_last not finite");
    for (int i = 0; i < n; i++) {
        const tnd_place_item *p = &it[i];
        if (!isfinite(p->t_cpu) || !isfinite(p->t_gpu) || !isfinite(p->c_switch) || !isfinite(p->weight))
            return tnd_fail(TND_ERR_ARG, "placement: item %d has a non-finite time, cost or weight", i);
        if (p->fixed < -1 || p->fixed > TND_B_GPU)
            return tnd_fail(TND_ERR_ARG, "placement: item %d fixed = %d", i, p->fixed);
    }
    return TND_OK;
}

/* The granule the DP can use over budget: the requested one, or a coarser
 * one so that it stays within PLACE_MAX_PAIRS and PLACE_MAX_UNITS; 0 when
 * n items are too many for it. */
static uint64_t granule_for(int n, uint64_t budget, uint64_t granule) {
    uint64_t max_units = PLACE_MAX_PAIRS / (uint64_t)(n > 0 ? n : 1);
    if (max_units < 64)
        return 0;
    max_units -= 64; /* rows are padded to 64 bits */
    if (max_units > PLACE_MAX_UNITS)
        max_units = PLACE_MAX_UNITS;
    uint64_t g = granule;
    if (budget / g > max_units) {
        g = budget / (max_units + 1) + 1;
        if (g < granule)
            g = granule;
    }
    return g;
}

/* Granule actually used (granule_for), said when coarser than asked. */
static tnd_status effective_granule(int n, uint64_t budget, uint64_t granule, uint64_t *out) {
    const uint64_t g = granule_for(n, budget, granule);
    if (!g)
        return tnd_fail(TND_ERR_ARG, "placement: %d items is too many for the DP (at most %llu)", n,
                        (unsigned long long)(PLACE_MAX_PAIRS / 64));
    if (g != granule)
        TND_INFO("placement: a granule of %llu B would make the DP too big; using %llu B",
                 (unsigned long long)granule, (unsigned long long)g);
    *out = g;
    return TND_OK;
}

static uint64_t units_of(uint64_t bytes, uint64_t g) { return bytes / g + (bytes % g != 0); }

/* A budget with room for every item is no constraint: such a budget (twice
 * the items' bytes plus two granules an item, when their rounding at the
 * granule it gives fits), so that an unlimited one (SimGPU without a
 * profile's memory) does not coarsen the granule to terabytes. Else budget. */
static uint64_t budget_for(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule) {
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (!tnd_add_ok(sum, it[i].bytes, &sum))
            return budget;
    /* room for each item's rounding at the granule this cap itself gives */
    if (sum > UINT64_MAX / 4 || (uint64_t)n > UINT64_MAX / 4 / granule)
        return budget;
    const uint64_t cap = 2 * sum + 2 * (uint64_t)n * granule, g = granule_for(n, cap, granule);
    uint64_t need = 0;
    for (int i = 0; g && i < n; i++)
        if (!tnd_add_ok(need, units_of(it[i].bytes, g) * g, &need))
            return budget;
    return g && need <= cap && cap < budget ? cap : budget;
}

static double switch_cost(const tnd_place_item *p) { return p->switch_free ? 0.0 : p->c_switch; }

double tnd_place_eval(const tnd_place_item *it, int n, const uint8_t *where, int first_backend, int last_backend,
                      double c_last, tnd_place_result *res) {
    double gain = 0;
    uint64_t bytes = 0;
    int nsw = 0, prev = first_backend;
    for (int i = 0; i < n; i++) {
        int b = where[i];
        if (b == TND_B_GPU) {
            gain += it[i].weight * (it[i].t_cpu - it[i].t_gpu);
            bytes += it[i].bytes;
        }
        if (b != prev && !it[i].switch_free) {
            gain -= it[i].c_switch;
            nsw++;
        }
        prev = b;
    }
    if (last_backend >= 0 && prev != last_backend) {
        gain -= c_last;
        nsw++;
    }
    if (res) {
        res->gain = gain;
        res->gpu_bytes = bytes;
        res->n_switches = nsw;
    }
    return gain;
}

double tnd_place_round_time(const tnd_place_item *it, int n, const uint8_t *where, int first_backend,
                            int last_backend, double c_last) {
    double t = 0;
    int prev = first_backend;
    for (int i = 0; i < n; i++) {
        int b = where[i];
        t += it[i].weight * (b == TND_B_GPU ? it[i].t_gpu : it[i].t_cpu);
        if (b != prev)
            t += switch_cost(&it[i]);
        prev = b;
    }
    if (last_backend >= 0 && prev != last_backend)
        t += c_last;
    return t;
}

/* Packs w*64 flags (each 0.0 or 1.0) into w words, flag m -> bit m. The
 * flags are doubles so the DP loops that write them have one element type
 * and vectorize (gcc 12 does not vectorize a double compare into an integer
 * or byte store at the baseline ISA). */
static void pack_bits(const double *fl, size_t w, uint64_t *dst) {
    for (size_t k = 0; k < w; k++) {
        uint64_t word = 0;
        for (int j = 0; j < 64; j++)
            word |= (uint64_t)(fl[k * 64 + (size_t)j] != 0.0) << j;
        dst[k] = word;
    }
}

/* One DP step into state CPU over n memory units: nc[m] = max(cpu[m],
 * gpu[m] - c), fl[m] = 1 where the GPU predecessor won (ties: no switch). */
static void step_cpu(const double *restrict cpu, const double *restrict gpu, double c, size_t n,
                     double *restrict nc, double *restrict fl) {
    for (size_t m = 0; m < n; m++) {
        double stay = cpu[m], sw = gpu[m] - c;
        fl[m] = sw > stay ? 1.0 : 0.0;
        nc[m] = sw > stay ? sw : stay;
    }
}

/* One DP step into state GPU: ng[k] = gain + max(gpu[k], cpu[k] - c), the
 * caller offsetting ng and fl by the item's units; fl[k] = 1 where the GPU
 * predecessor won (ties: no switch). */
static void step_gpu(const double *restrict cpu, const double *restrict gpu, double c, double gain, size_t n,
                     double *restrict ng, double *restrict fl) {
    for (size_t k = 0; k < n; k++) {
        double stay = gpu[k], sw = cpu[k] - c;
        fl[k] = sw > stay ? 0.0 : 1.0;
        ng[k] = gain + (sw > stay ? sw : stay);
    }
}

/* The DP. v[b][m] = best objective over the items so far, with at most m
 * memory units on the GPU and the last item on backend b (-inf: impossible).
 * For item i (u units, gain g, switch cost c):
 *   v'[CPU][m] = max(v[CPU][m], v[GPU][m] - c)
 *   v'[GPU][m] = g + max(v[GPU][m-u], v[CPU][m-u] - c)      (m >= u)
 * Choice table: per item, two bit rows of M+1 bits (padded to 64-bit words),
 * row 0 for state CPU, row 1 for state GPU; bit m = 1 when the predecessor
 * state was on the GPU. That is all backtracking needs: the current state
 * fixes the backend, the GPU state says m went down by u. 2 bits per
 * (item, unit): 280 items x 5001 units take 350 KB. */
static tnd_status place_dp(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                           int last_backend, double c_last, uint8_t *out) {
    if (n == 0)
        return TND_OK;
    uint64_t g = granule;
    tnd_status st = effective_granule(n, budget, granule, &g);
    if (st != TND_OK)
        return st;
    const size_t M = (size_t)(budget / g);
    const size_t W = (M + 1 + 63) / 64; /* words per bit row */
    double *buf = tnd_malloc(4 * (M + 1) * sizeof(double));
    uint64_t *bits = tnd_malloc((size_t)n * 2 * W * sizeof(uint64_t));
    size_t *units = tnd_malloc((size_t)n * sizeof(size_t));
    double *fl = tnd_calloc(W * 64, sizeof(double)); /* flags past M stay 0 */
    if (!buf || !bits || !units || !fl) {
        free(fl);
        free(buf);
        free(bits);
        free(units);
        return tnd_fail(TND_ERR_NOMEM, "placement: DP of %d items x %zu units", n, M + 1);
    }
    for (int i = 0; i < n; i++) {
        uint64_t u = units_of(it[i].bytes, g);
        units[i] = u > M ? M + 1 : (size_t)u; /* M + 1: never fits */
    }
    double *cpu = buf, *gpu = buf + (M + 1), *ncpu = buf + 2 * (M + 1), *ngpu = buf + 3 * (M + 1);
    for (size_t m = 0; m <= M; m++) {
        cpu[m] = first_backend == TND_B_CPU ? 0.0 : -INFINITY;
        gpu[m] = first_backend == TND_B_GPU ? 0.0 : -INFINITY;
    }
    for (int i = 0; i < n; i++) {
        const tnd_place_item *p = &it[i];
        const double c = switch_cost(p);
        const double gain = p->weight * (p->t_cpu - p->t_gpu);
        const size_t u = units[i];
        uint64_t *bc = bits + (size_t)i * 2 * W, *bg = bc + W;
        /* Written as max-and-flag loops over plain arrays so the compiler
         * vectorizes them; the 0/1 flags are packed into bits afterwards. */
        if (p->fixed == TND_B_GPU) {
            for (size_t m = 0; m <= M; m++)
                ncpu[m] = -INFINITY;
            memset(bc, 0, W * sizeof(uint64_t));
        } else {
            step_cpu(cpu, gpu, c, M + 1, ncpu, fl);
            pack_bits(fl, W, bc);
        }
        if (p->fixed == TND_B_CPU || u > M) {
            for (size_t m = 0; m <= M; m++)
                ngpu[m] = -INFINITY;
            memset(bg, 0, W * sizeof(uint64_t));
        } else {
            for (size_t m = 0; m < u; m++) {
                ngpu[m] = -INFINITY;
                fl[m] = 0;
            }
            step_gpu(cpu, gpu, c, gain, M + 1 - u, ngpu + u, fl + u);
            pack_bits(fl, W, bg);
        }
        double *t;
        t = cpu, cpu = ncpu, ncpu = t;
        t = gpu, gpu = ngpu, ngpu = t;
    }
    double vc = cpu[M], vg = gpu[M];
    if (last_backend == TND_B_GPU)
        vc -= c_last;
    else if (last_backend == TND_B_CPU)
        vg -= c_last;
    if (vc == -INFINITY && vg == -INFINITY) {
        free(fl);
        free(buf);
        free(bits);
        free(units);
        return tnd_fail(TND_ERR_NOMEM, "placement: the items fixed to the GPU do not fit in %llu bytes",
                        (unsigned long long)budget);
    }
    int b = vg > vc ? TND_B_GPU : TND_B_CPU;
    size_t m = M;
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (uint8_t)b;
        const uint64_t *row = bits + (size_t)i * 2 * W + (size_t)b * W;
        int prev = (int)((row[m >> 6] >> (m & 63)) & 1);
        if (b == TND_B_GPU)
            m -= units[i];
        b = prev;
    }
    free(fl);
    free(buf);
    free(bits);
    free(units);
    return TND_OK;
}

tnd_status tnd_place_dp(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                        int last_backend, double c_last, uint8_t *out, tnd_place_result *res) {
    tnd_status st = check_args(it, n, granule, first_backend, last_backend, c_last, out);
    if (st == TND_OK)
        st = place_dp(it, n, budget_for(it, n, budget, granule), granule, first_backend, last_backend, c_last, out);
    if (st != TND_OK)
        return st;
    tnd_place_eval(it, n, out, first_backend, last_backend, c_last, res);
    return TND_OK;
}

tnd_status tnd_place_moe(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                         int last_backend, double c_last, uint8_t *out, tnd_place_result *res) {
    tnd_status st = check_args(it, n, granule, first_backend, last_backend, c_last, out);
    if (st != TND_OK)
        return st;
    bool moe = false;
    for (int i = 0; i < n && !moe; i++)
        moe = it[i].expert;
    if (!moe)
        return tnd_place_dp(it, n, budget, granule, first_backend, last_backend, c_last, out, res);
    budget = budget_for(it, n, budget, granule);
    /* Same granule as the DP will use, so "covers" means the same thing here
     * as in the knapsack (sizes rounded up to granules). */
    uint64_t g = granule;
    if ((st = effective_granule(n, budget, granule, &g)) != TND_OK)
        return st;
    uint64_t need = 0, M = budget / g;
    for (int i = 0; i < n; i++) {
        bool must = it[i].expert ? it[i].fixed == TND_B_GPU : it[i].fixed != TND_B_CPU;
        if (must && !tnd_add_ok(need, units_of(it[i].bytes, g), &need))
            need = UINT64_MAX;
    }
    bool covers = need <= M;
    /* The rule becomes fixings; the DP then runs over the whole sequence so
     * that switch costs between the two groups are counted exactly. */
    tnd_place_item *cp = tnd_malloc((size_t)n * sizeof *cp);
    if (!cp)
        return tnd_fail_wrap(TND_ERR_NOMEM, "placement: ");
    memcpy(cp, it, (size_t)n * sizeof *cp);
    for (int i = 0; i < n; i++) {
        if (cp[i].fixed != -1)
            continue;
        if (covers && !cp[i].expert)
            cp[i].fixed = TND_B_GPU;
        else if (!covers && cp[i].expert)
            cp[i].fixed = TND_B_CPU;
    }
    TND_DEBUG("placement: MoE, budget %s the non-expert slices", covers ? "covers" : "does not cover");
    st = place_dp(cp, n, (uint64_t)M * g, g, first_backend, last_backend, c_last, out);
    free(cp);
    if (st != TND_OK)
        return st;
    tnd_place_eval(it, n, out, first_backend, last_backend, c_last, res);
    return TND_OK;
}

tnd_status tnd_place_brute(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                           int last_backend, double c_last, uint8_t *out, tnd_place_result *res) {
    tnd_status st = check_args(it, n, granule, first_backend, last_backend, c_last, out);
    if (st != TND_OK)
        return st;
    if (n > 20)
        return tnd_fail(TND_ERR_ARG, "placement: brute force over %d items (max 20)", n);
    uint64_t g = granule;
    if ((st = effective_granule(n, budget, granule, &g)) != TND_OK)
        return st;
    const uint64_t M = budget / g;
    uint8_t cur[20];
    double best = -INFINITY;
    uint32_t best_mask = 0;
    for (uint32_t mask = 0; mask < (1u << n); mask++) {
        uint64_t used = 0;
        bool ok = true;
        for (int i = 0; i < n && ok; i++) {
            int b = (mask >> i) & 1;
            ok = it[i].fixed < 0 || it[i].fixed == b;
            if (b)
                used += units_of(it[i].bytes, g) > M ? M + 1 : units_of(it[i].bytes, g);
            cur[i] = (uint8_t)b;
        }
        if (!ok || used > M)
            continue;
        double v = tnd_place_eval(it, n, cur, first_backend, last_backend, c_last, NULL);
        if (v > best) {
            best = v;
            best_mask = mask;
        }
    }
    if (best == -INFINITY)
        return tnd_fail(TND_ERR_NOMEM, "placement: no feasible placement in %llu bytes", (unsigned long long)budget);
    for (int i = 0; i < n; i++)
        out[i] = (uint8_t)((best_mask >> i) & 1);
    tnd_place_eval(it, n, out, first_backend, last_backend, c_last, res);
    return TND_OK;
}

uint64_t tnd_place_layers(const tnd_place_item *it, const int *layer_of, int n, uint64_t budget, uint8_t *out) {
    uint64_t used = 0;
    int max_layer = -1, last_in_layer = -1;
    for (int i = 0; i < n; i++) {
        out[i] = it[i].fixed == TND_B_GPU ? TND_B_GPU : TND_B_CPU;
        if (it[i].fixed == TND_B_GPU)
            used += it[i].bytes;
        if (layer_of[i] >= 0) {
            max_layer = TND_MAX(max_layer, layer_of[i]);
            last_in_layer = i;
        }
    }
    bool all_layers = true;
    for (int l = max_layer; l >= 0; l--) {
        uint64_t lb = 0;
        for (int i = 0; i < n; i++)
            if (layer_of[i] == l && it[i].fixed == -1)
                lb += it[i].bytes;
        if (used + lb > budget || used + lb < used) {
            all_layers = false;
            break;
        }
        used += lb;
        for (int i = 0; i < n; i++)
            if (layer_of[i] == l && it[i].fixed == -1)
                out[i] = TND_B_GPU;
    }
    if (all_layers) {
        uint64_t hb = 0;
        for (int i = last_in_layer + 1; i < n; i++)
            if (layer_of[i] < 0 && it[i].fixed == -1)
                hb += it[i].bytes;
        if (used + hb <= budget && used + hb >= used) {
            used += hb;
            for (int i = last_in_layer + 1; i < n; i++)
                if (layer_of[i] < 0 && it[i].fixed == -1)
                    out[i] = TND_B_GPU;
        }
    }
    return used;
}
