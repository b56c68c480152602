/* Named model shapes: the hyperparameters and tensor table of real models,
 * as data, so `tandem synth`, tests and benchmarks agree on what "qwen3-14b"
 * is without downloading it.
 *
 * A shape fixes every tensor's name, dimensions and type. Types follow a
 * Q4_K_M-like mix (the benchmark spec): Q4_K for every quantized weight except
 * Q6_K for attn_v, ffn_down, ffn_down_exps and output; F32 for norms and the
 * MoE router. GGUF dims: ne[0] is the input (row) length, ne[1] the output
 * dim, ne[2] the expert.
 */
#ifndef TND_MODEL_SHAPES_H
#define TND_MODEL_SHAPES_H

#include <stdbool.h>
#include <stdint.h>

#include "quant/quant.h"

typedef struct tnd_shape {
    const char *name;        /* "qwen3-14b" */
    const char *arch;        /* general.architecture: llama, qwen3, qwen3moe */
    const char *desc;        /* one line for --list */
    bool test_only;          /* tiny shapes for tests */
    bool qk_norm;            /* attn_q_norm / attn_k_norm present */
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_ff;                /* dense FFN width (MoE: the unused dense width the config states) */
    int n_expert;            /* 0 = dense */
    int n_expert_used;
    int n_ff_exp;            /* expert FFN width */
    float rope_base;
    float eps;               /* RMSNorm epsilon */
} tnd_shape;

/* Role of a tensor within a model; decides its dims and its type. */
typedef enum tnd_role {
    TND_ROLE_TOKEN_EMBD,
    TND_ROLE_OUTPUT_NORM,
    TND_ROLE_OUTPUT,
    TND_ROLE_ATTN_NORM,
    TND_ROLE_ATTN_Q,
    TND_ROLE_ATTN_K,
    TND_ROLE_ATTN_V,
    TND_ROLE_ATTN_OUTPUT,
    TND_ROLE_ATTN_Q_NORM,
    TND_ROLE_ATTN_K_NORM,
    TND_ROLE_FFN_NORM,
    TND_ROLE_FFN_GATE_INP,   /* MoE router */
    TND_ROLE_FFN_GATE,
    TND_ROLE_FFN_UP,
    TND_ROLE_FFN_DOWN,
    TND_ROLE_FFN_GATE_EXPS,
    TND_ROLE_FFN_UP_EXPS,
    TND_ROLE_FFN_DOWN_EXPS,
    TND_ROLE_COUNT
} tnd_role;

typedef struct tnd_shape_tensor {
    char name[64];           /* GGUF name, "blk.3.attn_q.weight" */
    tnd_role role;
    int layer;               /* -1 for token_embd, output_norm, output */
    tnd_type type;
    uint32_t n_dims;
    int64_t ne[4];           /* unused dims are 1 */
    uint64_t n_params;
    uint64_t nbytes;
} tnd_shape_tensor;

/* Number of named shapes, and shape i (0 <= i < count), in table order. */
int tnd_shape_count(void);
const tnd_shape *tnd_shape_at(int i);
/* Shape by name, or NULL. */
const tnd_shape *tnd_shape_find(const char *name);

/* GGUF base name of a role ("attn_q"). */
const char *tnd_role_name(tnd_role r);
/* The Q4_K_M-like type rule: the type a tensor of role r is stored as. */
tnd_type tnd_role_type(tnd_role r);

/* Number of tensors of the shape (1-D norms included). */
int64_t tnd_shape_n_tensors(const tnd_shape *s);
/* Tensor i in file order: token_embd, then blk.0 ... blk.{n_layer-1} (attention,
 * then FFN/MoE), then output_norm, output. False if i is out of range. */
bool tnd_shape_tensor_at(const tnd_shape *s, int64_t i, tnd_shape_tensor *out);
/* Totals over all tensors: parameters and data bytes (without alignment
 * padding or metadata). */
void tnd_shape_totals(const tnd_shape *s, uint64_t *n_params, uint64_t *nbytes);

#endif
