/* Placements: which side runs the ops reading each weight slice, where each
 * layer's attention and KV cache live, which CPU slices are promoted to the
 * GPU every round (docs/ARCHITECTURE.md, "Hybrid execution"). A placement
 * is a decision over the model only; the executor (exec/) carries it out. */
#ifndef TND_SCHED_PLACEMENT_H
#define TND_SCHED_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/model.h"

enum { TND_SIDE_CPU = 0, TND_SIDE_GPU = 1 };

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
/* Promoted slices of a round in the executor's ring at once, at most: a
 * copy is queued no earlier than the op TND_RING_EV promotions before it
 * (exec.c; the timeline model and dynamic transfer assume the same). */
#define TND_RING_EV 16

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

#endif
