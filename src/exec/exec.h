/* Hybrid execution (docs/ARCHITECTURE.md): the context's fields, the memory
 * layout's allocation, and running a round's op list across the CPU and a GPU
 * (CUDA or SimGPU). Only exec/, runtime/ and tests include this header.
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
#include "exec/layout.h"
#include "graph.h"
#include "model/forward.h"
#include "model/model.h"
#include "sched/adapt.h"
#include "sched/placement.h"

#define TND_PF_EV 4 /* prefetch events, a ring over layers (a copy waits two layers at most: PreSched's Q4) */
#define TND_MAX_PINS 8 /* pieces of the pinned host store kept across plan swaps */

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

/* A sequence of a context (tnd_seq_*; runtime/batch.c). */
typedef struct tnd_seq {
    bool live;               /* made by tnd_seq_new (slot 0 also by tnd_ctx_eval), not freed since */
    int n_past;              /* tokens in its KV slot (slot 0: the context's n_past) */
    int32_t *q;              /* [q_cap] tokens fed, not yet evaluated */
    int nq, q_cap;
    bool has_logits;         /* seq_logits holds the logits of its last fed token */
} tnd_seq;

struct tnd_ctx {
    tnd_model *m;
    int n_ctx, n_batch, n_past; /* n_ctx: rows of each sequence's KV slot; n_past: sequence 0's */
    int n_seq_max;           /* sequence slots (tnd_ctx_params.n_seq_max, at least 1) */
    tnd_seq *seq;            /* [n_seq_max] */
    float *seq_logits;       /* [n_seq_max][n_vocab] each sequence's last logits */
    int seq_rr;              /* the sequence a round's token budget is offered to first (fairness) */
    int depth;               /* the deepest position the round's attention reads (what
                                automatic promotion keys on): n_past, or a batch's deepest */
    int64_t kv_dim;
    size_t act_size[A_COUNT];
    tnd_side side[2];
    bool gpu;                /* side 1 present */
    tnd_stream *xfer;        /* GPU transfer stream (weight copies) */
    struct tnd_plan *plan;   /* the plan run now (runtime/); owns pl's arrays and perf */
    tnd_placement pl;        /* the plan's placement and layout, copied here for the executor */
    tnd_layout lay;
    uint64_t budget_asked;   /* the GPU budget before any fallback to the CPU */

    /* weights */
    const void **w[2];       /* [side][n_slices] address of each slice on that side, or NULL */
    void *w_arena;           /* GPU: every resident slice, 256-byte aligned, in slice order */
    /* the pinned host store: CPU slices' copies, for copies to the GPU at
     * full speed. Pieces are kept across plan swaps (tnd_layout_release), so a
     * swap pins only slices no earlier plan had on the CPU: pinning GBs
     * takes seconds. pin_of[i]: slice i's pinned copy, or NULL. */
    void *pins[TND_MAX_PINS];
    int n_pins;
    void **pin_of;
    /* Or the model's weights pinned where they are (host_register), and no
     * store: w_locked is that range's start (NULL: not pinned), kept across
     * plan swaps like the pieces; lock_refused: the backend refused, not
     * asked again (exec/layout.c: lock_weights). */
    void *w_locked;
    bool lock_refused;
    /* KV cache: canonical reservation [2][n_layer][n_seq_max][n_ctx][kv_dim] f16
     * (sequence s's slot at rows s * n_ctx), and per layer the address of K and
     * V (all slots) on the layer's side */
    uint16_t *kv_canon;
    size_t kv_canon_bytes;
    void **kv_addr;          /* [n_layer][2] */
    void *kv_arena;          /* GPU: the K and V caches of the GPU layers */
    /* activations on the host: act_dev[i] is side 0's act[i] as the GPU sees it;
     * NULL when pinning failed and they are pageable (copied by the copy engine) */
    void *act_dev[A_COUNT];
    bool pin_warned;         /* the one warning about a failed pinning was given */
    uint8_t valid[A_COUNT];  /* bit s: side s holds the latest contents */
    size_t wlen[A_COUNT];    /* end of the bytes the last writer wrote */
    tnd_event *host_read[A_COUNT]; /* GPU copy out of the host buffer queued */
    bool host_read_pending[A_COUNT];
    tnd_event *sync_ev;
    /* promotion slots: one ring of lay.n_slots * lay.slot_bytes on the GPU;
     * the round's j-th promoted slice is copied to ring + prom_off[j], after
     * the earlier ones its bytes overlap are done (exec.c) */
    void *ring;
    uint64_t ring_bytes;
    tnd_event *slot_ready[TND_RING_EV], *slot_free[TND_RING_EV]; /* of promotion j % TND_RING_EV */
    uint64_t *prom_off, *prom_len; /* [prom_cap] each promoted slice's place in the ring */
    uint8_t *round_prom;     /* [n_slices] promoted this round (promote_auto) */
    int prom_key_nt, prom_key_depth; /* the round size and depth / 256 round_prom was chosen for (nt 0: none) */
    uint64_t n_replans;      /* promotions re-decided on measured speeds (Algorithm 3) */
    bool adapt;              /* correct promote=auto's times by measured ones (not no_adapt) */
    bool adapt_cpu;          /* ... the CPU's too (tests on a shared machine watch the link alone) */
    unsigned ablate;         /* TND_ABLATE_*: MoE mechanisms switched off (tnd_ctx_params.moe_ablate) */
    tnd_adapt ad[2];         /* the recorder and rule, for decode steps and prefill chunks */
    tnd_adapt_gpu adg;       /* ... and for the GPU shared with another process (runtime/shared_gpu.c) */
    struct tnd_plan *plan_idle; /* while placed for a shared GPU: the plan for an idle one (owned) */
    uint64_t n_replace;      /* placements changed for a shared GPU and back */
    /* this round's measurements: CPU weight ops (wall) and their prediction,
     * and each copy's start event and prediction (copy j: index j % TND_RING_EV) */
    int round_nt;
    double round_s;          /* the last round's wall time */
    bool round_decode;       /* every token of the round wants logits: decode steps (the trace's name) */
    double r_cpu_meas, r_cpu_pred, copy_pred[TND_RING_EV];
    size_t copy_bytes[TND_RING_EV];
    /* what each resource was busy with, summed over rounds (tnd_ctx_stats) */
    double busy_wall, busy_cpu, busy_pcie, busy_gpu;
    tnd_event *copy_start[TND_RING_EV];
    uint8_t *chosen;         /* [n_expert] scratch: the experts routing chose */
    int32_t *cpu_idx;        /* [n_layer][n_expert] in rounds that copy experts ahead: a split layer's
                                CPU experts (exp_gpu -1) numbered in order, their places in its slot,
                                which holds only them; -1 for the others (NULL until such a round) */
    int32_t *n_cpu_idx;      /* [n_layer] the CPU experts so numbered */
    int8_t *pair_ok;         /* [n_slices][2] whether the GPU backend takes the MATMUL after this slice's
                                as one MATMUL_PAIR for 1 / 2 tokens: -1 not asked yet, 0 no, 1 yes */
    int32_t *exp_gpu;        /* [n_layer][n_expert] split layers: compact index of a GPU-resident expert in
                                its tensors' arena copy, -1 for CPU-side experts (NULL: no split layer) */
    int32_t *n_compact;      /* [n_layer] split layers: entries of the compacted expert tensors (resident
                                experts and prefetch slots) */
    /* expert prefetch (prefetch.c): some entries of a split layer's compacted
     * tensors are slots that hold CPU-side experts copied a layer ahead */
    int pf_max;              /* slots of a layer at most (0: off) */
    int *pf_n;               /* [n_layer] slots of layer l */
    int32_t *pf_idx;         /* [n_layer][pf_max] each slot's compact index */
    int32_t *pf_exp;         /* [n_layer][pf_max] the expert a slot holds, -1: none */
    uint64_t *pf_used;       /* [n_layer][pf_max] the round a slot was last filled or read (LRU) */
    uint64_t *pf_fill;       /* [n_layer][pf_max] the round a slot was last filled */
    uint8_t *pf_fresh;       /* [n_layer] its routing reads a slot filled this round: wait for pf_ev */
    tnd_event *pf_ev[TND_PF_EV]; /* copies into layer l's slots done: pf_ev[l % TND_PF_EV] */
    uint64_t pf_round;       /* rounds run (the LRU's clock) */
    bool pf_queued;          /* this round queued prefetch copies on xfer */
    double pf_last;          /* when the previous split layer's routing reached the host (s) */
    double pf_t_over, pf_t_exp; /* EWMAs: s of a split layer besides its experts; CPU s per CPU expert */
    double pf_cpu_s;         /* this layer's CPU expert ops so far (s) ... */
    double pf_wait_s;        /* ... and the host's waits for GPU writes into host buffers (s) */
    int pf_cpu_n;            /* ... over its CPU experts */
    bool pf_behind;          /* the copies this layer's GPU part reads were not done at its routing */
    double pf_sum[5];        /* TND_TRACE: over the issues the balance bounded, the sums of candidates,
                              * bound, copies and t_copy, and their count */
    bool pfq_flush;          /* the GPU's collected work, to launch in the CPU pool's errand (exec.c) */
    bool pfq_pending;        /* copies chosen at a routing, to queue in that errand ... */
    int pfq_l;               /* ... into layer pfq_l's slots */
    const int32_t *pfq_pred; /* ... from its prediction [pfq_n] (host activations, live for the round) */
    int64_t pfq_n;
    const int32_t *pfq_pred2; /* ... then, PreSched's Q4, into layer pfq_l + 1's from this prediction [pfq_n2] */
    int64_t pfq_n2;
    tnd_status pfq_st;       /* the errand's status, for the next routing or the round's end */
    uint64_t n_pf_copies, n_route_dec_pf; /* experts copied; decode routings served from a slot */
    /* PreSched (moe/presched.c; prefetch.c carries its decisions out) */
    bool presched_want;      /* tnd_ctx_params.moe_presched (the plan's) */
    bool presched;           /* on: a split layer's routing may load CPU-side experts on demand, and the
                                count copied a layer ahead is PreSched's, not the balance's */
    uint64_t *pf_read;       /* [n_layer][pf_max] the round a slot was last read */
    uint8_t *pf_two;         /* [n_layer][pf_max] its last fill was two layers ahead (Q4) */
    int pf_cap;              /* copies a layer ahead PreSched chose at the last routing (-1: none chosen) */
    int pf_cap2;             /* ... and two layers ahead (Q4: when its GPU queue held none of the next layer) */
    double pf_link_free;     /* when the copies queued so far end, by the link's modelled speed (s) */
    double ps_fit[5];        /* decayed sums over split layers' CPU parts (experts n, routings m, time T):
                                n n, n m, m m, n T, m T: the fit T = c0 n + beta m (eq. 2) */
    double ps_rhit;          /* EWMA: the share of experts copied a layer ahead that their layer used */
    double ps_rhit2;         /* ... of those copied two layers ahead (Q4's eq. 6) */
    int ps_cpu_e;            /* the CPU-side experts of the layer whose time pf_cpu_s sums */
    int ps_next_e;           /* ... of the layer whose routing came last (tnd_pf_layer_begin moves it up) */
    int ps_behind;           /* at on-demand loads: 1 the copies a layer ahead were not done, 0 they were,
                                -1 no loads (tnd_pf_layer_begin asks the event) */
    double ps_od_s;          /* the on-demand copies (modelled s) the layer whose time pf_last spans waited for */
    double ps_od_next;       /* ... of the layer whose routing came last */
    uint64_t n_od_copies;    /* experts loaded on demand */
    uint64_t n_pf2_copies;   /* experts copied two layers ahead (Q4; also counted in n_pf_copies) */
    tnd_event *mapped_ev;    /* the GPU's last write into a host buffer (split layers' A_EY rows) */
    bool mapped_pending[A_COUNT]; /* a GPU write into the host buffer may still be running */
    int64_t *expert_hits;    /* [n_layer][n_expert] routing counts (calibration), or NULL */
    struct tnd_route_rec *route_rec; /* moe/record.c: every MOE_ROUTE's router input and ids, or NULL */
    int *prom;               /* [prom_cap] promoted node indices of the round */
    int prom_cap;
    int n_prom, prom_next;   /* copies queued so far */
    bool experts_ahead;      /* this round copies promoted expert tensors ahead of routing (tnd_perf_experts_ahead) */
    /* canonical regions, sorted by base */
    tnd_region *reg;
    int n_reg;

    struct tnd_perf *perf;   /* the plan's perf DB (static placement, automatic promotion), or NULL */
    bool verbose;            /* report predicted vs measured per round */

    tnd_graph g;
    int cur;                 /* side of the previous node */
    float *logits;           /* [tnd_logit_rows][n_vocab] host: the last round's */
    /* counters (tests, --verbose) */
    uint64_t n_switch, n_act_copies, act_copy_bytes, n_w_copies, w_copy_bytes;
    uint64_t n_pairs; /* MATMUL pairs handed to the GPU as one MATMUL_PAIR (fuse_pair) */
    uint64_t n_rope_kv; /* ROPE, ROPE, CPY, CPY runs handed to the GPU as one ROPE_KV (fuse_rope_kv) */
    int8_t rope_kv_ok;  /* whether the GPU backend takes ROPE_KV: 0 not asked yet, 1 yes, -1 no */
    uint64_t n_two;     /* MOE_SUM + RMS_NORM and MOE_ROUTE pairs handed to the GPU as one op (fuse_two) */
    int8_t two_ok[2];   /* whether the GPU backend takes MOE_SUM_NORM [0], MOE_ROUTE_PAIR [1], as rope_kv_ok */
    uint64_t n_glu;     /* gate, up, SILU_MUL runs handed to their side as one MOE_GLU (fuse_glu) */
    int8_t glu_ok[2];   /* whether side s's backend takes MOE_GLU: 0 not asked yet, 1 yes, -1 no */
    uint64_t n_ffn;     /* ... of which with their down MATMUL_ID as one MOE_FFN (fuse_ffn) */
    int8_t ffn_ok[2];   /* whether side s's backend takes MOE_FFN, as glu_ok */
    /* split layers' routings of decode steps: all, and those to GPU experts
     * (bench sets them beside the hot-expert table's prediction) */
    uint64_t n_route_dec, n_route_dec_gpu;
    /* the live hot-expert table (runtime/hot.c): per split layer, each
     * expert's EWMA uses per token, this window's counts and tokens, its
     * routings and those that found their expert on the GPU */
    double *hot_pop;
    int64_t *hot_cnt, *hot_tok;
    uint64_t hot_win_route, hot_win_gpu, n_expert_moves;
    double hot_assumed, hot_measured; /* GPU-hit share the placement assumes / the last window's */
    uint64_t n_route_dec_g[3], n_route_dec_gpu_g[3]; /* the same per layer group (moe.h: input, middle, output) */
    /* TND_TRACE=1|2 (trace_mode, read once at creation), a diagnostic:
     * node times summed per cell (exec.c); printed by tnd_ctx_free */
    int trace_mode;
    struct tnd_trace_cell *trace;
    int trace_prefill;       /* the round being traced has more than one token */
    /* the --trace timeline (tnd_ctx_params.trace, exec/trace.c), or NULL */
    struct tnd_tl *tl;
    /* this round's GPU work is collected into CUDA graphs (TND_CUDA_GRAPHS,
     * rounds of at most TND_GRAPH_MAX_TOK tokens; exec.c) */
    bool graphs_on;
};

/* ---- layout.c ---- */
/* Allocates everything of c's layout on both sides (c->pl and c->lay set). */
tnd_status tnd_layout_alloc(tnd_ctx *c);
/* Frees what tnd_layout_alloc allocated. */
void tnd_layout_free(tnd_ctx *c);
/* The same, leaving c as before tnd_layout_alloc (a new plan is laid out
 * next); keep_pins: the pinned store's pieces stay, for the next layout to
 * reuse. */
void tnd_layout_release(tnd_ctx *c, bool keep_pins);
/* Frees the pinned store's pieces (tnd_layout_free does). */
void tnd_layout_free_pins(tnd_ctx *c);
/* Weight bytes one decode token reads on the CPU, on the GPU (resident),
 * and copies over PCIe (promoted); MoE experts count n_used / n_expert. */
void tnd_layout_token_bytes(const tnd_ctx *c, uint64_t *cpu, uint64_t *gpu, uint64_t *pcie);
/* Copies (host to GPU, on st) the experts e of an expert tensor (nbytes
 * over n_expert experts at src) whose mark[e] == want, one copy per run of
 * consecutive ones: to dst + e * per_expert, or packed from dst on when
 * compact. *copied: the bytes queued. */
tnd_status tnd_copy_experts(tnd_backend *g, void *dst, const void *src, size_t nbytes, int64_t n_expert,
                            const uint8_t *mark, uint8_t want, bool compact, tnd_stream *st, size_t *copied);

/* ---- prefetch.c: next-layer experts copied a layer ahead ---- */
/* Turns up to pf_max of each split layer's resident experts (the least
 * popular) into prefetch slots (exp_gpu -1; pl.exp unchanged); c's arena
 * and exp_gpu are allocated. */
tnd_status tnd_pf_init(tnd_ctx *c);
/* Frees what tnd_pf_init made. */
void tnd_pf_free(tnd_ctx *c);
/* Waits for every weight copy queued so far (the transfer stream; none
 * without a GPU side). */
tnd_status tnd_xfer_drain(tnd_ctx *c);
/* The ablation without asynchronous copies (TND_ABLATE_SYNC): the host
 * waits for the copies (tnd_xfer_drain) after queuing weight copies; else
 * nothing. */
tnd_status tnd_xfer_sync_ablated(tnd_ctx *c);
/* Compact index of expert e of split layer l when a slot holds it, else -1. */
int32_t tnd_pf_lookup(tnd_ctx *c, int l, int e);
/* Layer l's routing reached the host: its GPU part waits for its slots'
 * copies when they were queued this round; n_cpu: its routings left to the CPU. */
tnd_status tnd_pf_layer_begin(tnd_ctx *c, int l, int n_cpu);
/* Queues copies into layer l's slots of the experts pred names ([nt][k],
 * the next-layer prediction) that are neither resident nor in a slot: at
 * most cap of them (PreSched's count), or with cap < 0 as many as the
 * balance (or the fixed-two ablation) allows; two: pred is a prediction
 * two layers ahead (PreSched's Q4; its copies' hit rate is kept apart). */
tnd_status tnd_pf_issue(tnd_ctx *c, int l, const int32_t *pred, int64_t n, int cap, bool two);
/* PreSched at split layer l's routing (ids [n], partitioned into ric / rig
 * with *n_cpu routings left to the CPU): loads on demand the CPU-side
 * experts it chooses into free slots of l (their routings move to the GPU,
 * *n_cpu shrinks) and sets how many of pred's ([n_pred], layer l + 1; NULL:
 * none) tnd_pf_issue copies (pf_cap), or, when PreSched's GPU queue holds
 * none of them, how many of pred2's ([n_pred2], layer l + 2; NULL: none)
 * (pf_cap2).
 * Before tnd_pf_layer_begin. */
tnd_status tnd_pf_presched(tnd_ctx *c, int l, const int32_t *ids, int64_t n, int32_t *ric, int32_t *rig, int *n_cpu,
                           const int32_t *pred, int64_t n_pred, const int32_t *pred2, int64_t n_pred2);

/* ---- exec.c ---- */
/* The side node nd runs on after a node on side cur (the rule of the file
 * comment of exec.c). any_promotion: count every promotion candidate as
 * promoted (reserving scratch for the worst case); *prom (may be NULL): it is. */
int tnd_exec_node_side(const tnd_ctx *c, const tnd_node *nd, int cur, bool any_promotion, bool *prom);
/* Runs c->g (the round of nt tokens) and leaves the n_logits rows of logits
 * it computes (0: none) in logits (NULL: c->logits). */
tnd_status tnd_exec_round(tnd_ctx *c, int nt, int n_logits, float *logits);
/* Prints the TND_TRACE table of c (nothing when tracing is off). */
void tnd_exec_trace_print(const tnd_ctx *c, FILE *f);

/* ---- trace.c: the --trace timeline (Chrome/Perfetto trace events) ---- */
/* Starts writing path; c->tl set. perf: the DB of the predicted round
 * times (kept, not owned), or NULL. TND_ERR_IO when it cannot be written. */
tnd_status tnd_tl_open(tnd_ctx *c, const char *path, const struct tnd_perf *perf);
/* The DB of the predicted round times from now on (a plan swapped in: the
 * old plan's DB goes with it); nothing when c has no trace. */
void tnd_tl_set_perf(tnd_ctx *c, const struct tnd_perf *perf);
/* Ends the file and frees c->tl (before c's GPU backend goes). */
tnd_status tnd_tl_close(tnd_ctx *c);
/* The executor's hooks (c->tl set): a round's start and end (after the
 * drain: the round is written then), and each node's start, its op's start
 * and end (s: the side it runs on; prom: it reads a promoted weight, whose
 * copy moved `copied` bytes). */
void tnd_tl_round_begin(tnd_ctx *c);
void tnd_tl_round_end(tnd_ctx *c, int nt, int pos0);
void tnd_tl_node_begin(tnd_ctx *c, const tnd_node *nd, int s, bool prom);
void tnd_tl_op_begin(tnd_ctx *c, int s, uint64_t copied);
void tnd_tl_op_end(tnd_ctx *c, int s);
/* A span of the host's between rounds (a re-placement), args: JSON members. */
void tnd_tl_span(tnd_ctx *c, const char *name, double t0, double t1, const char *args);

#endif
