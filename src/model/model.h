/* Models: architectures described as data, the loaded model, its contexts.
 *
 * An architecture (model/arch.c) is a row of a table: the GGUF name, the
 * features its block uses (biases, q/k norms, post-norms, MoE, GELU, sliding
 * window...) and the RoPE kind. Tensor names are the GGUF ones
 * ("blk.N.attn_q.weight"); the loader binds each to a tnd_weight and checks
 * its shape against the hyperparameters, so the forward pass never meets an
 * unexpected shape.
 */
#ifndef TND_MODEL_H
#define TND_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/pool.h"
#include "gguf.h"
#include "tandem.h"

typedef struct tnd_arch {
    const char *name;        /* general.architecture */
    bool rope_neox;          /* rotate (i, i+n/2) pairs instead of (2i, 2i+1) */
    bool qkv_bias;           /* attn_{q,k,v}.bias present (qwen2) */
    bool qk_norm;            /* per-head RMSNorm of q and k (qwen3, gemma3) */
    bool post_norms;         /* post_attention_norm / post_ffw_norm (gemma2/3) */
    bool gelu;               /* GELU(tanh) gate instead of SiLU (gemma) */
    bool embd_scale;         /* embeddings * sqrt(n_embd) (gemma) */
    bool moe;                /* ffn_*_exps experts with a router (qwen3moe) */
    bool swa;                /* sliding-window layers (gemma3: 5 local : 1 global) */
} tnd_arch;

/* Row of the table for general.architecture, or NULL. */
const tnd_arch *tnd_arch_find(const char *name);
/* Comma-separated list of supported architectures, for messages. */
const char *tnd_arch_list(void);

typedef struct tnd_hparams {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;            /* key_length (= value_length) */
    int n_rot;               /* rope.dimension_count */
    int n_ff;                /* dense FFN width */
    int n_expert;            /* 0 for dense */
    int n_expert_used;
    int n_ff_exp;            /* expert FFN width */
    bool expert_norm;        /* renormalize the top-k weights to sum 1 */
    float eps;               /* RMSNorm epsilon */
    float rope_base;
    float rope_base_local;   /* sliding-window layers (gemma3) */
    float rope_scale;        /* freq scale = 1 / linear scaling factor */
    int swa_window;          /* 0 = none */
    int swa_period;          /* layer il is global if (il + 1) % period == 0 */
    float attn_scale;        /* q scale, usually 1/sqrt(head_dim) */
} tnd_hparams;

/* A weight slice as the kernels see it: n_out rows of n_in elements. */
typedef struct tnd_weight {
    const gguf_tensor *t;    /* NULL if absent (optional weights) */
    tnd_type type;
    const void *data;
    int64_t n_in, n_out;
    int64_t n_expert;        /* 1 for dense; experts are n_expert consecutive [n_out][n_in] slices */
    int id;                  /* index in tnd_model.slices (-1 if absent) */
} tnd_weight;

typedef struct tnd_layer {
    tnd_weight attn_norm;                 /* (n_embd) */
    tnd_weight wq, wk, wv;                /* (n_embd -> n_head*hd), (-> n_head_kv*hd) x2 */
    tnd_weight bq, bk, bv;                /* biases, optional */
    tnd_weight q_norm, k_norm;            /* (hd), optional */
    tnd_weight wo;                        /* (n_head*hd -> n_embd) */
    tnd_weight attn_post_norm;            /* (n_embd), optional */
    tnd_weight ffn_norm;                  /* (n_embd) */
    tnd_weight ffn_gate, ffn_up;          /* (n_embd -> n_ff) */
    tnd_weight ffn_down;                  /* (n_ff -> n_embd) */
    tnd_weight ffn_post_norm;             /* (n_embd), optional */
    tnd_weight router;                    /* ffn_gate_inp (n_embd -> n_expert) */
    tnd_weight gate_exps, up_exps;        /* (n_expert, n_embd -> n_ff_exp) */
    tnd_weight down_exps;                 /* (n_expert, n_ff_exp -> n_embd) */
    bool swa;                             /* this layer uses the sliding window */
} tnd_layer;

struct tnd_model {
    tnd_gguf *gguf;
    const tnd_arch *arch;
    tnd_hparams hp;
    tnd_weight tok_embd;                  /* (n_vocab rows of n_embd) */
    tnd_weight output_norm;
    tnd_weight output;                    /* lm head; = tok_embd when tied */
    bool hp_tied;                         /* output shares tok_embd's slice */
    tnd_layer *layers;                    /* [n_layer] */
    tnd_weight **slices;                  /* every present weight, by id (tied output shares tok_embd's) */
    int n_slices;
    tnd_tokenizer *tok;
    char *chat_template;
    char desc[160];
    tnd_pool *pool;
    int n_threads;
    uint64_t weight_bytes;
};

#endif
