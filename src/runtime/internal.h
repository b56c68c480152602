/* Shared by the files of src/runtime/ only: the plan's fields, and the
 * steps a context and a plan are built from. */
#ifndef TND_RUNTIME_INTERNAL_H
#define TND_RUNTIME_INTERNAL_H

#include "exec/exec.h"
#include "runtime/runtime.h"

struct tnd_plan {
    tnd_model *m;
    tnd_device device;       /* the device asked for */
    uint64_t vram_budget;    /* the GPU budget asked for (0: the backend's default) */
    char *hw;                /* the SimGPU timing profile asked for, or NULL (owned) */
    bool cpu_exact;          /* the CPU's f32 activations (tnd_ctx_params.cpu_exact) */
    int n_ctx, n_batch;
    int n_seq_max;           /* sequence slots, each with n_ctx rows of KV per layer */
    int64_t kv_dim;
    bool gpu;                /* a GPU side: false on the CPU, and after a fallback to it */
    char gpu_name[16];       /* the GPU backend's name ("cuda", "sim"), "cpu" without one */
    uint64_t budget;         /* GPU bytes the layout was checked against (0: no GPU) */
    uint64_t budget_asked;   /* the GPU backend's budget before any fallback to the CPU */
    tnd_placement pl;
    tnd_layout lay;
    tnd_perf *perf;          /* the perf DB the placement came from, or that automatic promotion
                                decides by (the context's executor reads it); NULL: none */
    tnd_perf *perf_pred;     /* a perf DB fetched for the predictions alone (tnd_ctx_params.predict) */
    /* a static placement keeps what made it, so that it can be made again
     * with live costs (tnd_plan_replace) */
    bool stat;               /* placed by Algorithm 1 from perf */
    uint64_t wbudget;        /* the GPU bytes its weights and KV caches had */
    uint64_t kv_layer;       /* a GPU layer's KV cache, bytes */
    char promote[40];        /* the promotions asked for ("none": none) */
    unsigned ablate;         /* TND_ABLATE_*: MoE mechanisms switched off (tnd_ctx_params.moe_ablate) */
    bool presched;           /* MoE: PreSched asked for (tnd_ctx_params.moe_presched) */
};

/* A round's token budget: n_batch asked (0: 512), at most what the
 * sequences' KV rows hold (n_ctx each), so a round of several sequences'
 * prompts may be longer than one context. */
static inline int tnd_round_cap(int n_batch, int n_ctx, int n_seq_max) {
    const int64_t rows = (int64_t)n_ctx * (n_seq_max > 0 ? n_seq_max : 1);
    const int64_t nb = n_batch ? n_batch : 512;
    return (int)(nb < rows ? nb : rows);
}

/* Builds *out for m on backends already made: cpu (it times CPU ops when a
 * perf DB is measured) and gpu (NULL: none; its mem_info gives the budget,
 * and it is the GPU a perf DB is measured on). fixed: the placement to take
 * as it is (the calibration steps of runtime/perfdb.c), else NULL. When the
 * budget cannot hold even what any GPU placement needs, the plan falls
 * back to the CPU (out->gpu false, a warning): the caller then drops gpu. */
tnd_status tnd_plan_make(tnd_model *m, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu,
                         const tnd_placement *fixed, tnd_plan **out);
/* A context with its backends (CPU, and the GPU p asks for) and nothing
 * laid out: what tnd_plan_build plans on. */
tnd_status tnd_ctx_new_bare(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out);
/* The recipe over c's canonical buffers (context.c; batch.c emits through it too). */
void tnd_ctx_recipe(tnd_ctx *c, tnd_recipe *r);
/* The sequence slots' state of c (n_seq_max of them, logits too); batch.c. */
tnd_status tnd_seq_alloc(tnd_ctx *c);
void tnd_seq_release(tnd_ctx *c);

/* The live hot-expert table (hot.c): made for c's layout (nothing without
 * split layers or a GPU), released, and consulted after each round, where
 * it may swap experts between the CPU and the GPU. */
tnd_status tnd_hot_init(tnd_ctx *c);
void tnd_hot_release(tnd_ctx *c);
tnd_status tnd_hot_after_round(tnd_ctx *c);
/* Tests: the table the placement is taken to assume (n_layer x n_expert
 * uses per token), and the GPU-hit share that gives (-1: no table). */
void tnd_hot_assume(tnd_ctx *c, const double *pop);
double tnd_hot_assumed(const tnd_ctx *c);

/* The GPU shared with another process (shared_gpu.c): consulted after each
 * round, it may place the weights again for few switches, or back. */
tnd_status tnd_shared_after_round(tnd_ctx *c);
/* tnd_ctx_set_plan without forgetting the placement for an idle GPU. */
tnd_status tnd_ctx_swap_plan(tnd_ctx *c, const tnd_plan *plan);

/* A deep copy of src (placement, perf DBs), to free with tnd_plan_free. */
tnd_status tnd_plan_copy(const tnd_plan *src, tnd_plan **out);
/* A static plan made again with the GPU's switch latency set to lat (s):
 * the GPU time-shared with another process makes every move to it cost
 * lat, so Algorithm 1 places for fewer switches. Same budget, sizes and
 * promotions; the new plan's perf DB says lat, so the executor's
 * promotions (Algorithm 2) weigh it too. TND_ERR_ARG for a plan that was
 * not placed by Algorithm 1 (a placement the user chose stays). */
tnd_status tnd_plan_replace(const tnd_plan *base, double lat, tnd_plan **out);

/* The perf DB for m and the GPU gpu (cached, else measured with cpu and
 * gpu, or computed from p->hw's cost model, and cached). */
tnd_status tnd_perf_get(tnd_model *m, const tnd_ctx_params *p, tnd_backend *cpu, tnd_backend *gpu, tnd_perf **out);

#endif
