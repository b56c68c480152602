/* The memory layout of a context: what the GPU and the host hold for a
 * placement, computed before anything big is allocated (tandem plan,
 * run --dry-run). Allocating it is exec/layout.c's tnd_layout_alloc. */
#ifndef TND_EXEC_LAYOUT_H
#define TND_EXEC_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/forward.h"
#include "model/model.h"
#include "sched/placement.h"

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
    uint64_t pinned_host;   /* the weights pinned (a store of the non-resident slices, or all of them in
                             * place: in_place) + host activations */
    bool in_place;          /* the weights are to be pinned where they are, not copied to a store */
    uint64_t kv_cpu;        /* KV cache of CPU layers */
    uint64_t slot_bytes;    /* size of one slot */
    int n_slots;
} tnd_layout;

/* Fills *l for model m, placement p, n_seq sequence slots of n_ctx rows
 * each (every layer's KV cache holds n_seq x n_ctx rows), rounds of n_batch
 * tokens, GPU budget (gpu: a GPU side exists). */
void tnd_layout_compute(const tnd_model *m, const tnd_placement *p, int n_ctx, int n_seq, int n_batch,
                        uint64_t budget, bool gpu, tnd_layout *l);
/* Prints the memory breakdown. */
void tnd_layout_print(const tnd_layout *l, FILE *f);
/* Activation buffer sizes for n_batch tokens of up to n_seq sequences (the
 * logits: a row per sequence a round can end, min(n_batch, n_seq)). */
void tnd_act_sizes(const tnd_hparams *hp, int n_batch, int n_seq, size_t sz[A_COUNT]);
/* Rows of logits a round can produce: min(n_batch, n_seq), at least 1. */
int tnd_logit_rows(int n_batch, int n_seq);

#endif
