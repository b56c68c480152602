/* The forward recipe: one round (a chunk of tokens through every layer)
 * as an op list over canonical buffers (graph.h). It knows the model and
 * nothing of where ops run: the executor (exec/) decides that. */
#ifndef TND_MODEL_FORWARD_H
#define TND_MODEL_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "graph.h"
#include "model/model.h"

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
    A_PR,     /* the next layer's routing predicted (split layers, rounds of at most TND_PREDICT_MAX_TOK):
                 [TND_PREDICT_MAX_TOK][n_expert] logits, then [..][n_used] weights, then [..][n_used] i32 ids */
    A_PR2,    /* the same for the layer after the next (PreSched's wider window, Q4) */
    A_IDS,    /* [nb] i32 token ids */
    A_POS,    /* [nb] i32 positions */
    A_ROW,    /* [nb] i32 batched rounds: each token's KV row, slot * n_ctx + position */
    A_LOGITS, /* [n_out][n_vocab]: n_out = 1, or a batched round's sequences that want logits */
    A_COUNT
};

/* What the recipe emits into and over: the canonical buffers of a context. */
typedef struct tnd_recipe {
    const tnd_model *m;
    tnd_graph *g;            /* the round's op list, reset by tnd_recipe_emit */
    void **act;              /* [A_COUNT] host activation buffers */
    uint16_t *kv_canon;      /* canonical KV cache: [2][n_layer][n_seq][n_ctx][kv_dim] f16 */
    int n_ctx;               /* rows of one sequence's slot */
    int n_seq;               /* sequence slots per layer (0: 1) */
    int64_t kv_dim;
    const uint8_t *split;    /* [n_layer] layers whose experts run on two sides (a NONE node maps
                                the routing ids for each side), or NULL for none */
    bool predict;            /* a split layer followed by a split layer also routes its FFN input
                                through the next layer's router (rounds of at most
                                TND_PREDICT_MAX_TOK tokens): the experts the executor copies to
                                the GPU a layer ahead (exec/prefetch.c) */
    bool predict2;           /* with predict, also through the router of the layer after the next,
                                where that one is split: PreSched's wider window (LayerScope's Q4) */
} tnd_recipe;

/* The largest round whose split layers predict the next layer's experts. */
#define TND_PREDICT_MAX_TOK 16

/* Emits the op list of one round: nt tokens at positions pos0.. (ids and
 * positions are read from act[A_IDS] and act[A_POS] when it runs), and the
 * logits of the last token when want_logits. */
tnd_status tnd_recipe_emit(const tnd_recipe *r, int nt, int pos0, bool want_logits);

/* One sequence's share of a batched round: tokens [off, off + n) of the
 * round, at positions pos0.. of KV slot seq; logits: the head runs on its
 * last token. */
typedef struct tnd_seg {
    int seq, off, n, pos0;
    bool logits;
} tnd_seg;

/* Emits a batched round: the segments' tokens in order (segs[i].off is the
 * sum of the n before it), every matmul over all of them; with more than
 * one segment the KV store is one op by row (act[A_ROW], written by the
 * caller), and attention runs once over the slots for each run of short
 * segments (at most TND_GRAPH_MAX_TOK tokens: decode steps), per segment
 * for the others; A_LOGITS gets one row per segment with logits, in order. */
tnd_status tnd_recipe_emit_batch(const tnd_recipe *r, const tnd_seg *segs, int n_seg);

#endif
