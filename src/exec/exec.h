/* Hybrid execution (docs/ARCHITECTURE.md: Slices to Execution): placement, memory layout, running a
 * round's op list across the CPU and a GPU (CUDA or SimGPU).
 *
 * Sides: side 0 is always the CPU backend; side 1, when present, is the GPU.
 * A context with no GPU runs every node on side 0 with no copies at all.
 *
 * Activations: every activation buffer exists on both sides (the host copy is
 * pinned and mapped into the GPU). The executor tracks on which side each
 * buffer's latest contents are and copies the bytes a node reads when they
 * are stale on its side (an SM copy over mapped memory on the GPU's compute
 * stream, never behind a weight copy). KV cache: each layer's lives only on
 * the side that runs the layer's attention. Weights: GPU-resident slices are
 * uploaded once; the others live in a pinned host store the CPU computes from
 * and the transfer stream copies promoted slices out of, into temporary GPU
 * slots reused in a ring (a slot is refilled once the op reading it is done).
 */
#ifndef TND_EXEC_H
#define TND_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "graph.h"
#include "model/model.h"

enum { TND_SIDE_CPU = 0, TND_SIDE_GPU = 1 };

/* Activation buffers of one round. */
enum {
    A_X,      /* [nb][n_embd] residual stream */
    A_H,      /* [nb][n_embd] normed sublayer input */
    A_Q,      /* [nb][n_head * head_dim] */
    A_K,      /* [nb][kv_dim] */
    A_V,      /* [nb][kv_dim] */
    A_ATT,    /* [nb][n_head * head_dim] */
    A_O,      /* [nb][n_embd] sublayer output */
    A_G,      /* [nb][n_used][n_ff] gate (dense: n_used = 1) */
    A_U,      /* [nb][n_used][n_ff] up */
    A_EY,     /* [nb][n_used][n_embd] expert outputs (MoE) */
    A_RL,     /* [nb][n_expert] router logits (MoE) */
    A_RW,     /* [nb][n_used] routing weights (MoE) */
    A_RI,     /* [nb][n_used] i32 routing ids (MoE) */
    A_RIC,    /* [nb][n_used] i32 split layers: ids of the CPU-side experts, -1 for the others */
    A_RIG,    /* [nb][n_used] i32 split layers: GPU-resident experts' compact indices, -1 for the others */
    A_IDS,    /* [nb] i32 token ids */
    A_POS,    /* [nb] i32 positions */
    A_LOGITS, /* [n_vocab] */
    A_COUNT
};

/* Where each weight slice runs. Small slices (norm weights, biases: 1-D
 * tensors) are replicated on both sides and not placed.
 *
 * MoE layers are placed either by whole tensors (where[] of gate_exps,
 * up_exps and down_exps, each on its own side) or, when split[l], expert
 * by expert: exp[l][e] is the side of expert e's gate, up and down (so the
 * SILU_MUL between them stays on one side). A split layer has experts on
 * both sides (tnd_placement_normalize unsplits the others); its three
 * expert tensors then have where = CPU (the host store holds them whole,
 * the GPU arena only its experts) and one promotion flag shared by the
 * three (promoting moves the chosen CPU-side experts to a slot). */
typedef struct tnd_placement {
    int n_slices, n_layer, n_expert; /* n_expert: per MoE layer, 0 for dense models */
    uint8_t *where;    /* [n_slices] TND_SIDE_* of the ops reading the slice */
    uint8_t *split;    /* [n_layer] 1: the layer's experts are placed one by one (exp[]) */
    uint8_t *exp;      /* [n_layer][n_expert] TND_SIDE_* of each expert of a split layer; NULL for dense */
    uint8_t *kv;       /* [n_layer] side of the layer's attention and KV cache */
    uint8_t *promote;  /* [n_slices] 1: a CPU slice copied to a GPU slot each round */
    bool promote_auto; /* promote[] are candidates; each round promotes those whose copy
                          costs less than the CPU time it saves (large rounds: prefill) */
    char desc[96];     /* how it was made, for messages */
} tnd_placement;

/* Memory the layout needs, computed before anything big is allocated. */
typedef struct tnd_layout {
    uint64_t budget;        /* GPU bytes allowed (0 = no GPU) */
    uint64_t w_gpu;         /* resident weight slices */
    uint64_t small_gpu;     /* replicated norm weights and biases */
    uint64_t kv_gpu;        /* KV cache of GPU layers */
    uint64_t act_gpu;       /* GPU activation buffers */
    uint64_t slots_gpu;     /* temporary slots for promoted slices */
    uint64_t scratch_gpu;   /* op scratch (prefill GEMM tiles, attention splits) */
    uint64_t gpu_total;     /* sum of the above */
    uint64_t pinned_host;   /* pinned store (non-resident slices) + host activations */
    uint64_t kv_cpu;        /* KV cache of CPU layers */
    uint64_t slot_bytes;    /* size of one slot */
    int n_slots;
} tnd_layout;

typedef struct tnd_side {
    tnd_backend *be;
    tnd_stream *st;         /* compute stream */
    void *act[A_COUNT];
} tnd_side;

/* One address range of canonical memory and where it lives on each side. */
typedef struct tnd_region {
    const char *base;       /* canonical address */
    size_t size;
    int kind;               /* R_ACT, R_KV, R_WEIGHT */
    int idx;                /* act buffer, 0/1 for K/V, slice id */
} tnd_region;
enum { R_ACT, R_KV, R_WEIGHT };

struct tnd_ctx {
    tnd_model *m;
    int n_ctx, n_batch, n_past;
    int64_t kv_dim;
    size_t act_size[A_COUNT];
    tnd_side side[2];
    bool gpu;                /* side 1 present */
    tnd_stream *xfer;        /* GPU transfer stream (weight copies) */
    tnd_placement pl;
    const tnd_placement *fixed_pl; /* tnd_ctx_new_placed: the placement asked for (while planning) */
    tnd_layout lay;
    uint64_t budget_asked;   /* the GPU budget before any fallback to the CPU */

    /* weights */
    const void **w[2];       /* [side][n_slices] address of each slice on that side, or NULL */
    void *w_arena;           /* GPU: every resident slice, 256-byte aligned, in slice order */
    void *pinned;            /* the pinned host store (host address), or NULL */
    void *pinned_dev;        /* its device-mapped address */
    /* KV cache: canonical reservation [2][n_layer][n_ctx][kv_dim] f16, and per
     * layer the address of K and V on the layer's side */
    uint16_t *kv_canon;
    size_t kv_canon_bytes;
    void **kv_addr;          /* [n_layer][2] */
    void *kv_arena;          /* GPU: the K and V caches of the GPU layers */
    /* activations on the host: act_dev[i] is side 0's act[i] as the GPU sees it */
    void *act_dev[A_COUNT];
    uint8_t valid[A_COUNT];  /* bit s: side s holds the latest contents */
    size_t wlen[A_COUNT];    /* end of the bytes the last writer wrote */
    tnd_event *host_read[A_COUNT]; /* GPU copy out of the host buffer queued */
    bool host_read_pending[A_COUNT];
    tnd_event *sync_ev;
    /* promotion slots */
    void **slot;             /* [n_slots] */
    tnd_event **slot_ready, **slot_free;
    uint8_t *round_prom;     /* [n_slices] promoted this round (promote_auto) */
    uint8_t *chosen;         /* [n_expert] scratch: the experts routing chose */
    int8_t *pair_ok;         /* [n_slices][2] whether the GPU backend takes the MATMUL after this slice's
                                as one MATMUL_PAIR for 1 / 2 tokens: -1 not asked yet, 0 no, 1 yes */
    int32_t *exp_gpu;        /* [n_layer][n_expert] split layers: compact index of a GPU-resident expert in
                                its tensors' arena copy, -1 for CPU-side experts (NULL: no split layer) */
    tnd_event *mapped_ev;    /* the GPU's last write into a host buffer (split layers' A_EY rows) */
    bool mapped_pending[A_COUNT]; /* a GPU write into the host buffer may still be running */
    int64_t *expert_hits;    /* [n_layer][n_expert] routing counts (calibration), or NULL */
    int *prom;               /* [prom_cap] promoted node indices of the round */
    int prom_cap;
    int n_prom, prom_next;   /* copies queued so far */
    /* canonical regions, sorted by base */
    tnd_region *reg;
    int n_reg;

    struct tnd_perf *perf;   /* the perf DB behind a static placement (NULL otherwise) */
    bool verbose;            /* report predicted vs measured per round */
    bool planned_only;       /* made by tnd_ctx_plan_only: nothing allocated */

    tnd_graph g;
    int cur;                 /* side of the previous node */
    int emit_layer;          /* layer the recipe is emitting (-1 outside) */
    float *logits;           /* [n_vocab] host */
    tnd_status err;          /* first failure of the round */
    /* counters (tests, --verbose) */
    uint64_t n_switch, n_act_copies, act_copy_bytes, n_w_copies, w_copy_bytes;
    uint64_t n_pairs; /* MATMUL pairs handed to the GPU as one MATMUL_PAIR (fuse_pair) */
    /* split layers' routings of decode steps: all, and those to GPU experts
     * (bench sets them beside the hot-expert table's prediction) */
    uint64_t n_route_dec, n_route_dec_gpu;
    /* TND_TRACE=1|2 (trace_mode, read once at creation), a diagnostic:
     * node times summed per cell (exec.c); printed by tnd_ctx_free */
    int trace_mode;
    struct tnd_trace_cell *trace;
    int trace_prefill;       /* the round being traced has more than one token */
};

/* ---- placement.c ---- */
/* True for slices that are replicated instead of placed (1-D tensors). */
bool tnd_slice_small(const tnd_weight *w);
/* Layer of a slice from its GGUF name ("blk.N."), or -1. */
int tnd_slice_layer(const tnd_weight *w);
/* True if slice sid is an expert tensor of a layer p splits expert by
 * expert (*layer: that layer, may be NULL). */
bool tnd_slice_split(const tnd_model *m, const tnd_placement *p, int sid, int *layer);
/* Experts of layer l on the GPU (whole tensors: all or none, from gate_exps). */
int tnd_placement_gpu_experts(const tnd_model *m, const tnd_placement *p, int l);
/* Bytes of slice sid resident on the GPU: all of it, a split tensor's GPU
 * experts, or 0. */
uint64_t tnd_slice_gpu_bytes(const tnd_model *m, const tnd_placement *p, int sid);
/* Restores the invariants of split layers: a layer with all its experts on
 * one side becomes whole tensors on that side; a split layer's expert
 * tensors get where = CPU and one promotion flag (set if any was). */
void tnd_placement_normalize(const tnd_model *m, tnd_placement *p);
/* Builds p from spec: "cpu", "gpu", "layer" (whole layers from the last
 * while they fit in weight_budget bytes, with their KV cache of kv_layer
 * bytes), "random:SEED" (MoE: some layers split expert by expert), or a
 * placement file ("name side" lines, fnmatch patterns, later lines win;
 * "blk.N.exp.E" names one expert). promote: NULL/"none", "all", "auto",
 * "random:SEED". */
tnd_status tnd_placement_make(const tnd_model *m, const char *spec, const char *promote, uint64_t weight_budget,
                              uint64_t kv_layer, tnd_placement *p);
/* A copy of src (a placement for m) into dst, to free with tnd_placement_free. */
tnd_status tnd_placement_copy(const tnd_model *m, const tnd_placement *src, tnd_placement *dst);
void tnd_placement_free(tnd_placement *p);
/* Writes p as a placement file (loadable by tnd_placement_make). */
tnd_status tnd_placement_write(const tnd_model *m, const tnd_placement *p, FILE *f);

/* ---- layout.c ---- */
/* Fills *l for model m, placement p, context n_ctx x n_batch, GPU budget
 * (gpu: a GPU side exists). */
void tnd_layout_compute(const tnd_model *m, const tnd_placement *p, int n_ctx, int n_batch, uint64_t budget,
                        bool gpu, tnd_layout *l);
/* Allocates everything of c's layout on both sides (c->pl and c->lay set). */
tnd_status tnd_layout_alloc(tnd_ctx *c);
/* Frees what tnd_layout_alloc allocated. */
void tnd_layout_free(tnd_ctx *c);
/* Prints the memory breakdown. */
void tnd_layout_print(const tnd_layout *l, FILE *f);
/* Weight bytes one decode token reads on the CPU, on the GPU (resident),
 * and copies over PCIe (promoted); MoE experts count n_used / n_expert. */
void tnd_layout_token_bytes(const tnd_ctx *c, uint64_t *cpu, uint64_t *gpu, uint64_t *pcie);
/* Copies (host to GPU, on st) the experts e of an expert tensor (nbytes
 * over n_expert experts at src) whose mark[e] == want, one copy per run of
 * consecutive ones: to dst + e * per_expert, or packed from dst on when
 * compact. *copied: the bytes queued. */
tnd_status tnd_copy_experts(tnd_backend *g, void *dst, const void *src, size_t nbytes, int64_t n_expert,
                            const uint8_t *mark, uint8_t want, bool compact, tnd_stream *st, size_t *copied);
/* Activation buffer sizes for n_batch tokens. */
void tnd_act_sizes(const tnd_hparams *hp, int n_batch, size_t sz[A_COUNT]);

/* ---- model/forward.c ---- */
/* A context with its placement, layout and perf DB decided but nothing big
 * allocated (tandem plan, --dry-run); only for inspection, then
 * tnd_ctx_free. */
tnd_status tnd_ctx_plan_only(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out);
/* tnd_ctx_new with placement pl (copied; p->placement and p->promote
 * ignored, no promotion slots, so pl may not promote automatically): the
 * profile's calibration steps under a placement of its choosing. */
tnd_status tnd_ctx_new_placed(tnd_model *m, const tnd_ctx_params *p, const tnd_placement *pl, tnd_ctx **out);

/* The perf DB for c's model and GPU (cached, else measured and cached);
 * *out is c's to free with tnd_perf_free + free. */
tnd_status tnd_ctx_get_perf(tnd_ctx *c, const tnd_ctx_params *p, struct tnd_perf **out);

/* ---- exec.c ---- */
/* The side node nd runs on after a node on side cur (the rule of the file
 * comment of exec.c). any_promotion: count every promotion candidate as
 * promoted (reserving scratch for the worst case); *prom (may be NULL): it is. */
int tnd_exec_node_side(const tnd_ctx *c, const tnd_node *nd, int cur, bool any_promotion, bool *prom);
/* Runs c->g (the round of nt tokens) and leaves the logits in c->logits
 * when want_logits. */
tnd_status tnd_exec_round(tnd_ctx *c, int nt, bool want_logits);
/* Prints the TND_TRACE table of c (nothing when tracing is off). */
void tnd_exec_trace_print(const tnd_ctx *c, FILE *f);

#endif
