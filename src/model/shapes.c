/* The table of named model shapes (see shapes.h). Numbers are the published
 * configurations of each model (config.json of the release); the parameter
 * totals they give are checked by tests/test_synth.py. */
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "model/shapes.h"

static const tnd_shape shapes[] = {
    /* Dense Qwen3: per-head q/k RMSNorm, untied output, NeoX RoPE. */
    {.name = "qwen3-8b", .arch = "qwen3", .desc = "Qwen3-8B (dense, 8.2B)", .qk_norm = true,
     .n_vocab = 151936, .n_ctx_train = 40960, .n_embd = 4096, .n_layer = 36, .n_head = 32, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 12288, .rope_base = 1000000.0f, .eps = 1e-6f},
    {.name = "qwen3-14b", .arch = "qwen3", .desc = "Qwen3-14B (dense, 14.8B)", .qk_norm = true,
     .n_vocab = 151936, .n_ctx_train = 40960, .n_embd = 5120, .n_layer = 40, .n_head = 40, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 17408, .rope_base = 1000000.0f, .eps = 1e-6f},
    {.name = "qwen3-32b", .arch = "qwen3", .desc = "Qwen3-32B (dense, 32.8B)", .qk_norm = true,
     .n_vocab = 151936, .n_ctx_train = 40960, .n_embd = 5120, .n_layer = 64, .n_head = 64, .n_head_kv = 8,
     .head_dim = 128, .n_ff = 25600, .rope_base = 1000000.0f, .eps = 1e-6f},
    /* Qwen3 MoE: 128 experts, 8 routed per token, no shared expert. */
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .desc = "Qwen3-30B-A3B (MoE 128x8, 30.5B, 3.3B active)",
     .qk_norm = true, .n_vocab = 151936, .n_ctx_train = 40960, .n_embd = 2048, .n_layer = 48, .n_head = 32,
     .n_head_kv = 4, .head_dim = 128, .n_ff = 6144, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768,
     .rope_base = 1000000.0f, .eps = 1e-6f},
    /* Llama 3 / 3.1: GQA with 8 KV heads, untied output. */
    {.name = "llama3-8b", .arch = "llama", .desc = "Llama-3-8B (dense, 8.0B)", .n_vocab = 128256,
     .n_ctx_train = 8192, .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 14336, .rope_base = 500000.0f, .eps = 1e-5f},
    {.name = "llama3-70b", .arch = "llama", .desc = "Llama-3-70B (dense, 70.6B)", .n_vocab = 128256,
     .n_ctx_train = 8192, .n_embd = 8192, .n_layer = 80, .n_head = 64, .n_head_kv = 8, .head_dim = 128,
     .n_ff = 28672, .rope_base = 500000.0f, .eps = 1e-5f},
    /* Tiny shapes for tests: every width a multiple of 256 (the K-quant block). */
    {.name = "tiny-qwen3", .arch = "qwen3", .desc = "test shape (qwen3, 4 layers)", .test_only = true,
     .qk_norm = true, .n_vocab = 512, .n_ctx_train = 2048, .n_embd = 256, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .head_dim = 64, .n_ff = 512, .rope_base = 1000000.0f, .eps = 1e-6f},
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", .desc = "test shape (qwen3moe, 4 layers, 32x4 experts)",
     .test_only = true, .qk_norm = true, .n_vocab = 512, .n_ctx_train = 2048, .n_embd = 256, .n_layer = 4,
     .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 768, .n_expert = 32, .n_expert_used = 4,
     .n_ff_exp = 256, .rope_base = 1000000.0f, .eps = 1e-6f},
    {.name = "tiny-llama", .arch = "llama", .desc = "test shape (llama, 2 layers)", .test_only = true,
     .n_vocab = 512, .n_ctx_train = 2048, .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_ff = 768, .rope_base = 500000.0f, .eps = 1e-5f},
};

int tnd_shape_count(void) { return (int)(sizeof shapes / sizeof shapes[0]); }

const tnd_shape *tnd_shape_at(int i) { return i >= 0 && i < tnd_shape_count() ? &shapes[i] : NULL; }

const tnd_shape *tnd_shape_find(const char *name) {
    for (int i = 0; i < tnd_shape_count(); i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

static const char *const role_names[TND_ROLE_COUNT] = {
    [TND_ROLE_TOKEN_EMBD] = "token_embd",       [TND_ROLE_OUTPUT_NORM] = "output_norm",
    [TND_ROLE_OUTPUT] = "output",               [TND_ROLE_ATTN_NORM] = "attn_norm",
    [TND_ROLE_ATTN_Q] = "attn_q",               [TND_ROLE_ATTN_K] = "attn_k",
    [TND_ROLE_ATTN_V] = "attn_v",               [TND_ROLE_ATTN_OUTPUT] = "attn_output",
    [TND_ROLE_ATTN_Q_NORM] = "attn_q_norm",     [TND_ROLE_ATTN_K_NORM] = "attn_k_norm",
    [TND_ROLE_FFN_NORM] = "ffn_norm",           [TND_ROLE_FFN_GATE_INP] = "ffn_gate_inp",
    [TND_ROLE_FFN_GATE] = "ffn_gate",           [TND_ROLE_FFN_UP] = "ffn_up",
    [TND_ROLE_FFN_DOWN] = "ffn_down",           [TND_ROLE_FFN_GATE_EXPS] = "ffn_gate_exps",
    [TND_ROLE_FFN_UP_EXPS] = "ffn_up_exps",     [TND_ROLE_FFN_DOWN_EXPS] = "ffn_down_exps",
};

const char *tnd_role_name(tnd_role r) { return (unsigned)r < TND_ROLE_COUNT ? role_names[r] : "?"; }

tnd_type tnd_role_type(tnd_role r) {
    switch (r) {
    case TND_ROLE_OUTPUT_NORM:
    case TND_ROLE_ATTN_NORM:
    case TND_ROLE_ATTN_Q_NORM:
    case TND_ROLE_ATTN_K_NORM:
    case TND_ROLE_FFN_NORM:
    case TND_ROLE_FFN_GATE_INP:
        return TND_TYPE_F32;
    case TND_ROLE_ATTN_V:
    case TND_ROLE_FFN_DOWN:
    case TND_ROLE_FFN_DOWN_EXPS:
    case TND_ROLE_OUTPUT:
        return TND_TYPE_Q6_K;
    default:
        return TND_TYPE_Q4_K;
    }
}

/* Roles of one block, in file order, for the shape's kind. */
static int layer_roles(const tnd_shape *s, tnd_role *out) {
    int n = 0;
    out[n++] = TND_ROLE_ATTN_NORM;
    out[n++] = TND_ROLE_ATTN_Q;
    out[n++] = TND_ROLE_ATTN_K;
    out[n++] = TND_ROLE_ATTN_V;
    out[n++] = TND_ROLE_ATTN_OUTPUT;
    if (s->qk_norm) {
        out[n++] = TND_ROLE_ATTN_Q_NORM;
        out[n++] = TND_ROLE_ATTN_K_NORM;
    }
    out[n++] = TND_ROLE_FFN_NORM;
    if (s->n_expert) {
        out[n++] = TND_ROLE_FFN_GATE_INP;
        out[n++] = TND_ROLE_FFN_GATE_EXPS;
        out[n++] = TND_ROLE_FFN_UP_EXPS;
        out[n++] = TND_ROLE_FFN_DOWN_EXPS;
    } else {
        out[n++] = TND_ROLE_FFN_GATE;
        out[n++] = TND_ROLE_FFN_UP;
        out[n++] = TND_ROLE_FFN_DOWN;
    }
    return n;
}

int64_t tnd_shape_n_tensors(const tnd_shape *s) {
    tnd_role r[TND_ROLE_COUNT];
    return 3 + (int64_t)s->n_layer * layer_roles(s, r);
}

bool tnd_shape_tensor_at(const tnd_shape *s, int64_t i, tnd_shape_tensor *t) {
    tnd_role roles[TND_ROLE_COUNT];
    int per = layer_roles(s, roles);
    int64_t n = 3 + (int64_t)s->n_layer * per;
    if (i < 0 || i >= n) return false;
    memset(t, 0, sizeof *t);
    if (i == 0) {
        t->role = TND_ROLE_TOKEN_EMBD;
        t->layer = -1;
    } else if (i == n - 2) {
        t->role = TND_ROLE_OUTPUT_NORM;
        t->layer = -1;
    } else if (i == n - 1) {
        t->role = TND_ROLE_OUTPUT;
        t->layer = -1;
    } else {
        t->layer = (int)((i - 1) / per);
        t->role = roles[(i - 1) % per];
    }
    int64_t E = s->n_embd, Q = (int64_t)s->n_head * s->head_dim, KV = (int64_t)s->n_head_kv * s->head_dim;
    int64_t ne0 = 0, ne1 = 1, ne2 = 1;
    switch (t->role) {
    case TND_ROLE_TOKEN_EMBD:
    case TND_ROLE_OUTPUT: ne0 = E; ne1 = s->n_vocab; break;
    case TND_ROLE_OUTPUT_NORM:
    case TND_ROLE_ATTN_NORM:
    case TND_ROLE_FFN_NORM: ne0 = E; break;
    case TND_ROLE_ATTN_Q: ne0 = E; ne1 = Q; break;
    case TND_ROLE_ATTN_K:
    case TND_ROLE_ATTN_V: ne0 = E; ne1 = KV; break;
    case TND_ROLE_ATTN_OUTPUT: ne0 = Q; ne1 = E; break;
    case TND_ROLE_ATTN_Q_NORM:
    case TND_ROLE_ATTN_K_NORM: ne0 = s->head_dim; break;
    case TND_ROLE_FFN_GATE_INP: ne0 = E; ne1 = s->n_expert; break;
    case TND_ROLE_FFN_GATE:
    case TND_ROLE_FFN_UP: ne0 = E; ne1 = s->n_ff; break;
    case TND_ROLE_FFN_DOWN: ne0 = s->n_ff; ne1 = E; break;
    case TND_ROLE_FFN_GATE_EXPS:
    case TND_ROLE_FFN_UP_EXPS: ne0 = E; ne1 = s->n_ff_exp; ne2 = s->n_expert; break;
    case TND_ROLE_FFN_DOWN_EXPS: ne0 = s->n_ff_exp; ne1 = E; ne2 = s->n_expert; break;
    default: return false;
    }
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->type = tnd_role_type(t->role);
    t->n_params = (uint64_t)ne0 * (uint64_t)ne1 * (uint64_t)ne2;
    if (t->layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s.weight", t->layer, tnd_role_name(t->role));
    else snprintf(t->name, sizeof t->name, "%s.weight", tnd_role_name(t->role));
    if (!gguf_tensor_bytes(t->type, t->n_dims, t->ne, &t->nbytes)) return false;
    return true;
}

void tnd_shape_totals(const tnd_shape *s, uint64_t *n_params, uint64_t *nbytes) {
    uint64_t p = 0, b = 0;
    tnd_shape_tensor t;
    for (int64_t i = 0; i < tnd_shape_n_tensors(s); i++)
        if (tnd_shape_tensor_at(s, i, &t)) {
            p += t.n_params;
            b += t.nbytes;
        }
    if (n_params) *n_params = p;
    if (nbytes) *nbytes = b;
}
