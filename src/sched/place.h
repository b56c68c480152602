/* Static placement (ATSInfer §4.3, Algorithm 1; docs/ARCHITECTURE.md:
 * Static placement) and the round
 * cost model it optimizes. Symbols follow the paper: s_i (bytes), t_i^c,
 * t_i^g (seconds), r_i = t_i^c - t_i^g, c_i (switch cost before op i), M
 * (GPU budget). Objective (paper eq. in §4.3.2):
 *     max  sum_i w_i r_i [b_i = GPU]  -  sum_i c_i [b_i != b_{i-1}]
 *     s.t. sum_i s_i [b_i = GPU] <= M
 * Pure functions: no model, no backend, no globals. */
#ifndef TND_SCHED_PLACE_H
#define TND_SCHED_PLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem.h"

enum { TND_B_CPU = 0, TND_B_GPU = 1 };

/* One weight-consuming op of a round in execution order (a dense weight slice, or one expert). */
typedef struct tnd_place_item {
    uint64_t bytes;   /* s_i: weight bytes if placed on the GPU */
    double t_cpu;     /* t_i^c: seconds on the CPU for the round being optimized */
    double t_gpu;     /* t_i^g: seconds on the GPU */
    double c_switch;  /* c_i: cost (s) of a backend switch just before this item (activation copy + latency) */
    double weight;    /* multiplies r_i = t_cpu - t_gpu (expert popularity; 1 for dense) */
    int8_t fixed;     /* -1 free; TND_B_CPU / TND_B_GPU: forced (e.g. a tensor the GPU cannot run) */
    bool expert;      /* one expert of an expert tensor (for the MoE rule) */
    bool switch_free; /* items of one MoE layer's experts run side by side: no switch cost between experts of the
                         same layer (set on every expert after the first of a layer) */
} tnd_place_item;

typedef struct tnd_place_result {
    double gain;        /* sum of weight*r_i over GPU items minus switch costs paid (the objective) */
    uint64_t gpu_bytes; /* sum of bytes of GPU items */
    int n_switches;     /* backend changes whose cost was paid (switch_free ones not counted; c_last counted) */
} tnd_place_result;

/* Algorithm 1: chooses b_i maximizing sum weight_i*r_i*[b_i=GPU] - sum c_i*[b_i != b_{i-1}] subject to
 * sum s_i*[b_i=GPU] <= budget, by a knapsack DP over (item, memory in units of granule bytes, last backend)
 * with backtracking. Item sizes are rounded UP to granules, so the result never exceeds budget.
 * b_{-1} = first_backend (the backend before the first item, e.g. where the embedding runs) and, if
 * last_backend >= 0, a switch back to it after the last item is costed too (c_last).
 * Writes out[n] (TND_B_CPU / TND_B_GPU) and *res (res may be NULL). Errors: TND_ERR_ARG (granule 0,
 * n < 0, bad backend, non-finite times, more than 2^23 items), TND_ERR_NOMEM
 * (allocation failed, or the items fixed to the GPU do not fit the budget). If the table at this
 * granule would pass 2^29 (item, unit) pairs (a 128 MiB choice table, ~1 s) or 2^18 units, the granule
 * is coarsened (logged at info level) instead of failing. */
tnd_status tnd_place_dp(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                        int last_backend, double c_last, uint8_t *out, tnd_place_result *res);

/* The MoE rule of the paper (docs/ARCHITECTURE.md: Static placement), plus tandem's per-expert
 * refinement: if budget covers all non-expert items (those not fixed to the CPU, plus any experts
 * fixed to the GPU), they all go to the GPU and the DP runs over the expert items with the rest
 * (experts weighted by popularity through weight, so hotter experts win when all else is equal);
 * otherwise free experts stay on the CPU and the DP runs over the non-expert items. Dense models (no
 * expert items): plain tnd_place_dp. Fixed items are honored in all cases; switch costs are counted
 * over the whole sequence. Errors as tnd_place_dp. */
tnd_status tnd_place_moe(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                         int last_backend, double c_last, uint8_t *out, tnd_place_result *res);

/* Exhaustive search over all 2^n placements (n <= 20) of the same objective, with the same granule
 * rounding as tnd_place_dp — for tests. TND_ERR_ARG if n > 20; TND_ERR_NOMEM if nothing is feasible. */
tnd_status tnd_place_brute(const tnd_place_item *it, int n, uint64_t budget, uint64_t granule, int first_backend,
                           int last_backend, double c_last, uint8_t *out, tnd_place_result *res);

/* The objective of placement where[] (same terms as tnd_place_dp; ignores the budget); fills *res if
 * not NULL and returns the gain. */
double tnd_place_eval(const tnd_place_item *it, int n, const uint8_t *where, int first_backend, int last_backend,
                      double c_last, tnd_place_result *res);

/* Timeline cost model of one round for a placement (no promotions): sum of each item's weight * time
 * on its backend, plus c_i at each paid switch (switch_free items pay none), plus c_last if
 * last_backend >= 0 and the last item is elsewhere. Weightless ops are not items: the caller adds
 * their time (other_cpu + other_gpu). Returns seconds; round_time + gain is the same for every
 * placement (it equals sum weight_i * t_cpu_i). */
double tnd_place_round_time(const tnd_place_item *it, int n, const uint8_t *where, int first_backend,
                            int last_backend, double c_last);

/* Layer-level baseline (what llama.cpp -ngl does): items are grouped into layers by layer_of[i]
 * (-1 = not in a layer). Whole layers go to the GPU from the LAST layer backwards while they fit (so the
 * switch happens once; the first layer that does not fit stops it). Non-layer items after the last
 * layer item (the output head) go to the GPU only once every layer is there and if they fit (llama.cpp
 * offloads the output at -ngl n_layer+1); non-layer items before it (the embedding) stay on the CPU.
 * Fixed items are honored (fixed GPU ones are counted first). Writes out[n]; returns the bytes placed. */
uint64_t tnd_place_layers(const tnd_place_item *it, const int *layer_of, int n, uint64_t budget, uint8_t *out);

#endif
