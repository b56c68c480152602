/* Weightless ops of the forward pass on the CPU: norms, RoPE, attention over
 * the f16 KV cache, activations. f32 activations, row-major [token][feature].
 *
 * KV cache layout (shared with the CUDA backend): per layer, K and V are each
 * [n_ctx][n_kv_head * head_dim] f16 (raw uint16_t), position-major, so a
 * round appends whole rows and attention streams rows in order.
 */
#ifndef TND_CPU_OPS_H
#define TND_CPU_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu/pool.h"

/* y[i] = x[i] / rms(x) * (w ? w[i] : 1), for one row of n; y may alias x. */
void tnd_cpu_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps);

/* Applies rotary embedding in place to n_heads heads of head_dim floats (one
 * token) at position pos; only the first n_rot dims of each head rotate.
 * neox: pairs (i, i + n_rot/2) (qwen2/3, gemma); else adjacent pairs (2i, 2i+1)
 * (llama as stored in GGUF). theta_i = pos * freq_scale * base^(-2i/n_rot).
 * cs: this position's row of tnd_rope_rows (cos and sin of each pair), or
 * NULL to compute them here; the same values either way. */
void tnd_cpu_rope(float *x, int n_heads, int head_dim, int n_rot, int pos, float freq_base, float freq_scale,
                  bool neox, const float *cs);

/* The cos and sin of RoPE's angles at positions 0..n_pos-1, for a few
 * parameter sets (Gemma 3 has two), grown on demand; zero-initialized. */
#define TND_ROPE_TABS 4
typedef struct tnd_rope_tab {
    int n_rot; /* 0: free */
    float base, scale;
    int64_t n_pos, cap;
    double *pw; /* [n_rot / 2] base^(-2i/n_rot) */
    float *cs;  /* [cap][n_rot]: cos, sin of pair i at 2i, 2i+1 */
} tnd_rope_tab;
typedef struct tnd_rope_tabs {
    tnd_rope_tab t[TND_ROPE_TABS];
} tnd_rope_tabs;
/* The rows of positions 0..max_pos for these parameters (row pos at
 * pos * n_rot), computing the missing ones; NULL (compute in place) when
 * memory runs out, the table would pass 256 MiB, or TND_ROPE_TABS other
 * sets are kept. Not thread-safe: call before splitting the op. */
const float *tnd_rope_rows(tnd_rope_tabs *ts, int n_rot, float base, float scale, int max_pos);
void tnd_rope_tabs_free(tnd_rope_tabs *ts);

typedef struct tnd_attn_args {
    const float *q;        /* [n_tok][n_head * head_dim] */
    const uint16_t *k;     /* [n_ctx][n_kv_head * head_dim] f16, this layer */
    const uint16_t *v;     /* same layout */
    float *out;            /* [n_tok][n_head * head_dim] */
    int n_tok;             /* query tokens, at positions pos0 .. pos0+n_tok-1 */
    int pos0;
    int n_head, n_kv_head, head_dim;
    int window;            /* sliding window: attend to positions > pos - window; 0 = full */
    float scale;           /* usually 1/sqrt(head_dim) */
    float softcap;         /* tanh soft-capping of scores; 0 = off */
} tnd_attn_args;

/* Tests: true forces the scalar attention, silu, RMSNorm and RoPE (the
 * references of the SIMD ones). */
extern bool tnd_cpu_ops_scalar;

/* Causal multi-head attention with GQA (head h reads kv head h / (n_head /
 * n_kv_head)); the cache must already hold rows up to pos0 + n_tok - 1.
 * Parallel over (token, head) pairs; on AVX2 and AVX-512 over (token, kv
 * head) units, their heads or their chunks of positions (attn.c), with the
 * same bits however the work is split. */
void tnd_cpu_attn(tnd_pool *pool, const tnd_attn_args *a);
/* n attentions of one shape (n_head, n_kv_head, head_dim; a batched
 * round's sequences) as one parallel region: each gives the bits
 * tnd_cpu_attn gives it alone. */
void tnd_cpu_attn_many(tnd_pool *pool, const tnd_attn_args *a, int n);

/* expf(x) with glibc's algorithm (the same bits as its expf on x86-64 with
 * FMA), as the AVX-512 silu and softmax compute it: their reference. */
float tnd_cpu_expf(float x);

/* out[i] = silu(g[i]) * u[i];  out may alias g. */
void tnd_cpu_silu_mul(const float *g, const float *u, float *out, int64_t n);
/* out[i] = gelu_tanh(g[i]) * u[i], computed as g / (1 + expf(tnd_cpu_gelu_arg(g))) * u;
 * out may alias g. */
void tnd_cpu_gelu_mul(const float *g, const float *u, float *out, int64_t n);
/* -2 sqrt(2/pi) (x + 0.044715 x^3): gelu_tanh(x) = x / (1 + exp(this)) */
float tnd_cpu_gelu_arg(float x);
/* y[i] += x[i] */
void tnd_cpu_add(float *y, const float *x, int64_t n);
/* y[i] += b[i] for each of n_rows rows of n (bias add). */
void tnd_cpu_add_bias(float *y, const float *b, int64_t n_rows, int64_t n);
/* In-place softmax over n values. */
void tnd_cpu_softmax(float *x, int64_t n);
/* f32 -> f16 row conversion (KV cache writes). */
void tnd_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n);

/* Indices of the k largest of x[0..n) in descending order of value (ties: lower
 * index first). k <= n. */
void tnd_cpu_topk(const float *x, int n, int k, int *idx);

#endif
