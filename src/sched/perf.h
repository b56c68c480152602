/* The perf DB (docs/ARCHITECTURE.md: The perf DB; ATSInfer §4.3.1): per slice, seconds on the
 * CPU and on the GPU for a decode step and for prefill chunks; per layer,
 * attention and the weightless ops; the bandwidths and the fixed latency of
 * a backend switch. Measured once per model x machine (`tandem profile`) and
 * cached on disk, or computed from a SimGPU hardware profile's cost model.
 * The timeline model below turns it into a predicted round time for a plan. */
#ifndef TND_SCHED_PERF_H
#define TND_SCHED_PERF_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "model/model.h"
#include "sched/placement.h"
#include "sim/hw.h"

#define TND_PERF_NK 3
/* A switch latency above this (seconds) was measured on a GPU another
 * process was using (perf.c): the DB is marked disturbed and
 * TND_PERF_GPU_SHARED (the next run measures it again, once, and marks the
 * new DB TND_PERF_TWICE if it is shared too: runtime/perfdb.c). */
#define TND_PERF_LAT_BUSY_S 200e-6
/* Marks in a DB's source (tnd_perf_mark). */
#define TND_PERF_DISTURBED ", disturbed"
#define TND_PERF_GPU_SHARED ", GPU shared"
#define TND_PERF_TWICE ", measured twice"
/* weightless ops per layer (norms, adds, rope, act, KV stores): with the
 * recipe's fused ops (model/forward.c; TND_FUSE=1, the default) a dense
 * layer has 7: two ropes (q/k norms inside), two KV stores, two residual
 * adds that carry the next norm, the activation (11 unfused for qwen3, 9
 * for llama; a MoE layer's routing and expert sum add 2) */
#define OTHER_OPS 7
/* The round sizes profiled: a decode step, prefill chunks of 512 and 2048. */
extern const int tnd_perf_nt[TND_PERF_NK];

typedef struct tnd_perf {
    int n_slices, n_layer;
    double *t_cpu, *t_gpu;            /* [n_slices][TND_PERF_NK] seconds; 0 for small slices */
    double *t_cpu_one;                /* [n_slices] expert slices: CPU seconds of a decode step whose token
                                         chose one of them (a split layer's CPU part, with only some of the
                                         chosen experts, costs between this and t_cpu); 0 otherwise */
    double attn_cpu[TND_PERF_NK], attn_gpu[TND_PERF_NK];   /* one layer's attention */
    double other_cpu[TND_PERF_NK], other_gpu[TND_PERF_NK]; /* one layer's weightless ops */
    double b_pcie, b_cpu, b_hbm;      /* bytes/s: pinned host->GPU, CPU read, GPU memory */
    double lat;                       /* fixed cost of one backend switch, s */
    double launch;                    /* host seconds to queue one small GPU op (a decode step's split
                                         layer queues its GPU part before the CPU part starts) */
    double *pop;                      /* MoE: [n_layer][n_expert] expected uses of each expert per
                                         token from a calibration run (the hot-expert table); NULL for dense */
    int n_expert;
    double cal_decode;                /* measured CPU decode step / the sum of its profiled ops, by which the
                                         CPU decode times above were scaled (calibrate_decode); 0: none */
    double sw_host;                   /* host seconds each move between the sides costs a step beyond lat,
                                         fitted to real hybrid decode steps (tnd_perf_fit_switch); 0: none */
    char source[128];                  /* "measured on ..." or "cost model rtx3060-laptop"; ", disturbed"
                                          at the end when the machine looked busy while profiling */
    char note[320];                   /* lines on what the calibrations could not do (not saved) */
    bool estimated;                   /* some GPU times are estimates (no room to time them): not cached */
    bool cpu_exact;                   /* measured with the CPU's f32 activations (its calibration contexts
                                         use the same mode); not saved: the cache key holds it */
} tnd_perf;

/* Progress callback: done of total steps. */
typedef void (*tnd_progress_fn)(int done, int total, const char *what);

/* Building a DB (runtime/perfdb.c does it in this order): tnd_perf_init,
 * for MoE models the hot-expert table from a real run's routing counts
 * (tnd_perf_set_popularity), then the times either from a hardware
 * profile (tnd_perf_from_hw) or measured op by op (tnd_perf_measure_ops),
 * then the calibrations against real decode steps (the layer above runs
 * them: sched/ builds no contexts), then tnd_perf_check_quiet. */

/* Allocates pf's tables for m, every time 0. */
tnd_status tnd_perf_init(const tnd_model *m, tnd_perf *pf);
/* The hot-expert table: hits[n_layer][n_expert], the routings a run of
 * n_tokens tokens made. */
tnd_status tnd_perf_set_popularity(const tnd_model *m, tnd_perf *pf, const int64_t *hits, int n_tokens);
/* Every time from the hardware profile's cost model (no backend needed). */
void tnd_perf_from_hw(const tnd_model *m, const tnd_hw *hw, tnd_perf *pf);

/* What tnd_perf_measure_ops leaves for the steps after it. */
typedef struct tnd_perf_run {
    size_t bw_bytes;  /* bytes of the first CPU read-bandwidth measurement (0: none) */
    bool gpu_timed;   /* the GPU's ops were timed (a GPU was given and took streams) */
} tnd_perf_run;

/* Measures with backends cpu and gpu (gpu may be NULL: GPU times
 * estimated from bytes / measured HBM bandwidth); slices with the same
 * type and shape are timed once. */
tnd_status tnd_perf_measure_ops(const tnd_model *m, tnd_backend *cpu, tnd_backend *gpu, tnd_progress_fn progress,
                                tnd_perf *pf, tnd_perf_run *run);
/* Measures the CPU's read bandwidth again and marks pf disturbed when it
 * moved over 20% since tnd_perf_measure_ops. */
void tnd_perf_check_quiet(const tnd_model *m, tnd_perf *pf, const tnd_perf_run *run);
/* Records that a measurement looks disturbed (why: a sentence): a warning
 * now, and ", disturbed" in the DB's source, which a later run loading the
 * DB warns about. */
void tnd_perf_disturbed(tnd_perf *pf, const char *why);
/* Appends mark (TND_PERF_*) to pf->source unless it is there. */
void tnd_perf_mark(tnd_perf *pf, const char *mark);
/* Appends a line to pf->note (what tandem profile reports beside the numbers). */
void tnd_perf_note(tnd_perf *pf, const char *line);
void tnd_perf_free(tnd_perf *pf);
/* Scales every CPU decode time (one-token slices, attention, weightless
 * ops) by f, and records it in cal_decode (the profile's calibration
 * against real decode steps). */
void tnd_perf_scale_cpu_decode(tnd_perf *pf, double f);
/* The factor to scale by, given f = real CPU decode steps' time / the sum
 * of their ops timed alone: f itself within 0.9-2.0 (undisturbed
 * profiles gave 1.05-1.32); *disturbed set outside it. Something else on
 * the machine only slows what it overlaps, and the steps run after the
 * ops: steps slower than usual may be the disturbed ones (clamped to
 * 2.0), steps faster than their ops mean the ops were (f stands, down to
 * 0.2). NaN gives 0.9. */
double tnd_perf_decode_factor(double f, bool *disturbed);
/* The largest sw_host a fit may set: five switch latencies and launches
 * (the copies, queuing and wake-ups it stands for), at most 1 ms. */
double tnd_perf_sw_host_max(const tnd_perf *pf);
/* Sets pf->sw_host so that the model's decode step at position pos0 under
 * placement p takes `measured` seconds (within 0..tnd_perf_sw_host_max); false,
 * pf unchanged, when p moves between the sides too little to tell. */
bool tnd_perf_fit_switch(const tnd_model *m, tnd_perf *pf, const tnd_placement *p, int pos0, double measured);
/* Cache file path for m on this machine (key: model file size and mtime,
 * CPU, GPU or hw profile, threads) into buf; false if no cache directory. */
bool tnd_perf_cache_path(const tnd_model *m, const char *gpu_desc, char *buf, size_t cap);
tnd_status tnd_perf_save(const tnd_perf *pf, const char *path);
/* TND_ERR_IO if absent; TND_ERR_FORMAT if it does not match m. */
tnd_status tnd_perf_load(const tnd_model *m, const char *path, tnd_perf *pf);
/* Seconds of one layer's attention on side s for a round of nt tokens at
 * positions pos0.., and of its other weightless ops. */
double tnd_perf_attn_time(const tnd_perf *pf, int side, int nt, int pos0);
double tnd_perf_other_time(const tnd_perf *pf, int side, int nt);
/* Seconds of slice sid on side s for a round of nt tokens (interpolated
 * between the profiled sizes). */
double tnd_perf_slice_time(const tnd_perf *pf, int sid, int side, int nt);

/* The per-slice rule promote=auto used before Algorithm 2 (the baseline
 * tests/test_transfer.c holds the DP against): copying slice sid and
 * running it on the GPU beats running it on the CPU, for a round of nt
 * tokens. */
bool tnd_perf_pays_to_promote(const tnd_model *m, const tnd_perf *pf, int sid, int nt);
/* The same for the CPU experts of split layer l (its three expert tensors
 * promote together): copying the ones routing chose and running their share
 * on the GPU beats running it on the CPU. */
bool tnd_perf_split_pays_to_promote(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt);

/* Seconds of split layer l's expert ops in a round of nt tokens, both
 * halves (promoted by the rule above, or side by side). */
double tnd_perf_split_time(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt);
/* The same layer's two choices apart, for Algorithm 2 where its copy can go
 * ahead: seconds with the halves side by side (*t_side), seconds of both on
 * the GPU once the CPU experts are there (*t_gpu), and the bytes that copy
 * moves (*bytes). */
void tnd_perf_split_sides(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l, int nt,
                          double *t_side, double *t_gpu, double *bytes);
/* GPU seconds of slice sid (not split) for a round of nt tokens (an expert
 * tensor's by the experts routing chooses), and the bytes its promotion
 * copies (an expert tensor's chosen experts). */
double tnd_perf_gpu_time(const tnd_model *m, const tnd_perf *pf, int sid, int nt);
double tnd_perf_promoted_bytes(const tnd_model *m, const tnd_perf *pf, int sid, int nt);

/* Whether a round of nt tokens copies its promoted expert tensors ahead of
 * their routing, each whole (a split layer's: all its CPU experts): when
 * routing would choose nearly every expert anyway (95% under a uniform
 * choice), waiting for it only exposes each layer's copy, where copying
 * ahead overlaps it with the layers before (exec.c, the executor and this
 * model both follow it). Uniform, not the hot-expert table, so the executor
 * decides the same without a perf DB. Only past TND_PREDICT_MAX_TOK tokens:
 * shorter rounds copy the predicted experts a layer ahead into the slots
 * instead (exec/prefetch.c). On the 30B-A3B shape (8 of 128) that is from
 * 47 tokens: a batch-64 decode round at 30% ran 170 -> 212 tok/s on the
 * H200 (docs/DECISIONS.md, "Long rounds copy their experts ahead"). */
bool tnd_perf_experts_ahead(const tnd_model *m, int nt);

/* Share of split layer l's routings that go to its GPU experts: their
 * popularity mass in pf's hot-expert table, or their count without one
 * (pf may be NULL). */
double tnd_perf_gpu_share(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int l);

/* Timeline model of one round of nt tokens at positions pos0.. under
 * placement p (promotions included: copies on one transfer stream into
 * n_slots slots, each op waiting for its copy): predicted seconds. */
double tnd_perf_predict(const tnd_model *m, const tnd_perf *pf, const tnd_placement *p, int n_slots, int nt, int pos0);

/* Static placement (ATSInfer Algorithm 1 with the MoE rule, sched/place.h):
 * fills p within weight_budget bytes (weights and the KV caches of GPU
 * layers, kv_layer bytes each), minimizing a token's share of a decode
 * round of n_seq sequences at half of n_ctx plus a prompt token's share of
 * a prefill chunk of n_batch (promote: CPU slices may be promoted for
 * prefill). */
tnd_status tnd_static_place(const tnd_model *m, const tnd_perf *pf, uint64_t weight_budget, uint64_t kv_layer,
                            int n_ctx, int n_batch, int n_seq, bool promote, tnd_placement *p);

#endif
