/* The internal API the tools (src/tools/) and the tests use beside
 * include/tandem.h: a plan's contents and predictions, what a context ran,
 * the perf DB, and the machine's bandwidths. A tool includes tandem.h, its
 * own tools.h and this header, nothing else of src/ (docs/ARCHITECTURE.md);
 * the context's fields stay behind exec/exec.h.
 *
 * Below this header: sched/placement.h (tnd_placement, slice queries),
 * sched/perf.h (the perf DB and the timeline model), exec/layout.h (the
 * memory layout) and util.h (errors, logging, timing, checked arithmetic). */
#ifndef TND_RUNTIME_H
#define TND_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "exec/layout.h"
#include "sched/perf.h"
#include "sched/placement.h"
#include "tandem.h"
#include "util.h"

/* ---- a plan's contents (plan.c) ---- */
tnd_model *tnd_plan_model(const tnd_plan *pl);
const tnd_placement *tnd_plan_placement(const tnd_plan *pl);
const tnd_layout *tnd_plan_layout(const tnd_plan *pl);
/* True when the plan uses a GPU (false on the CPU and after a fallback). */
bool tnd_plan_gpu(const tnd_plan *pl);
/* The GPU backend's name ("cuda", "sim"), "cpu" without a GPU. */
const char *tnd_plan_device_name(const tnd_plan *pl);
int tnd_plan_n_ctx(const tnd_plan *pl);
int tnd_plan_n_batch(const tnd_plan *pl);
/* The GPU budget before any fallback to the CPU (0: none). */
uint64_t tnd_plan_budget_asked(const tnd_plan *pl);
/* The perf DB behind the plan's predictions: its placement's, else the
 * one tnd_ctx_params.predict fetched; NULL without one. */
const tnd_perf *tnd_plan_perf(const tnd_plan *pl);
/* Takes that DB out of the plan: the caller's, to free with tnd_perf_free
 * and free. */
tnd_perf *tnd_plan_take_perf(tnd_plan *pl);
/* The timeline model's seconds for a round of nt tokens at positions
 * pos0.. under the plan's placement and promotion slots, by pf (NULL: the
 * plan's DB); 0 without a DB. */
double tnd_plan_predict(const tnd_plan *pl, const tnd_perf *pf, int nt, int pos0);

/* ---- contexts (context.c) ---- */
/* tnd_ctx_new with placement pl (copied; p->placement and p->promote
 * ignored, no promotion slots, so pl may not promote automatically): the
 * profile's calibration steps under a placement of its choosing. */
tnd_status tnd_ctx_new_placed(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *pl, tnd_ctx **out);
/* The plan the context runs now (changed by tnd_ctx_set_plan). */
const tnd_plan *tnd_ctx_plan(const tnd_ctx *c);
typedef struct tnd_ctx_stats {
    uint64_t n_switch, n_act_copies, act_copy_bytes, n_w_copies, w_copy_bytes, n_pairs;
    uint64_t n_rope_kv; /* decode steps' RoPE and K/V stores run as one ROPE_KV (backend.h) */
    uint64_t n_two;     /* MoE sums + norms and routing pairs run as one MOE_SUM_NORM or MOE_ROUTE_PAIR */
    uint64_t n_ffn;     /* MOE_GLUs run with their down projection as one MOE_FFN (backend.h) */
    uint64_t n_glu;     /* MoE FFNs' gate, up and SILU_MUL run as one MOE_GLU (backend.h) */
    /* split layers' routings of decode steps: all, and those to GPU experts */
    uint64_t n_route_dec, n_route_dec_gpu;
    /* ... of those, routings served by an expert copied ahead (a layer
     * ahead, or two with PreSched's Q4: exec/prefetch.c), and the experts
     * copied so (every round) */
    uint64_t n_route_dec_pf, n_pf_copies;
    uint64_t n_od_copies; /* experts PreSched loaded on demand at their own layer's routing */
    uint64_t n_pf2_copies; /* of n_pf_copies, those PreSched copied two layers ahead (its Q4) */
    /* experts the live hot-expert table moved onto the GPU (runtime/hot.c),
     * and the GPU-hit share of split layers' routings in its last window
     * against the share the placement assumes now (-1: no table) */
    uint64_t n_expert_moves;
    double hot_measured, hot_assumed;
    uint64_t n_route_dec_g[3], n_route_dec_gpu_g[3]; /* per layer group: input, middle, output (moe.h) */
    /* Seconds the rounds took (wall) and, within them, how long each
     * resource was busy: the CPU's ops (measured), the weight copies over
     * PCIe (measured by events, the last 16 of a round scaled to all its
     * bytes) plus the activations' bytes at the link's bandwidth, and the
     * GPU's ops (the perf DB's times for them: a model, 0 without a DB). */
    double wall_s, busy_cpu_s, busy_pcie_s, busy_gpu_s;
    /* the GPU backend's counters (host syncs, launches, graphs; backend.h),
     * zeros without a GPU; a backend shared by contexts counts for all */
    tnd_backend_counters gpu;
} tnd_ctx_stats;
void tnd_ctx_get_stats(const tnd_ctx *c, tnd_ctx_stats *out);
/* Weight bytes one decode token reads on the CPU, on the GPU (resident)
 * and copies over PCIe (promoted); MoE experts count n_used / n_expert. */
void tnd_ctx_token_bytes(const tnd_ctx *c, uint64_t *cpu, uint64_t *gpu, uint64_t *pcie);

/* ---- the machine's bandwidths (limits.c) ---- */
/* The bandwidths of the physical limit (docs/ARCHITECTURE.md), GB/s: the
 * CPU's read, pinned host to GPU, GPU memory, and the CPU's read and the
 * pinned copies while both run at once. */
typedef struct tnd_limits {
    double cpu, pcie, hbm, both_cpu, both_pcie;
} tnd_limits;
/* Measures them with n_threads CPU threads on CUDA device 0; fails
 * without a CUDA GPU or memory for 3 GiB of buffers. */
tnd_status tnd_measure_limits(int n_threads, tnd_limits *out);
/* The CPU kernels' instruction set in use ("avx512", "avx2", "scalar"). */
const char *tnd_cpu_isa(void);

#endif
