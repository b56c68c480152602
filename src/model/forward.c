/* Contexts and the forward pass. One recipe for every backend: a round (a
 * chunk of tokens) is emitted as backend ops (backend.h) and run on the
 * context's backend — the CPU, or the GPU with every weight resident.
 *
 * The recipe is the pre-norm transformer block common to the architectures
 * of model/arch.c, with the features each arch row enables:
 *
 *   x = embed(tokens) [* sqrt(n_embd)]
 *   per layer:  h = norm(x);  q,k,v = W h [+ b];  [q,k = headnorm(q,k)];  rope(q,k)
 *               K,V[pos] = k,v (f16);  a = attn(q, K, V);  o = Wo a;  [o = norm(o)];  x += o
 *               h = norm(x);  f = ffn(h) or moe(h);  [f = norm(f)];  x += f
 *   logits = out(norm(x_last))
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model/model.h"
#include "util.h"

/* Activation buffers of one round, in the backend's memory. */
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
    A_IDS,    /* [nb] i32 token ids */
    A_POS,    /* [nb] i32 positions */
    A_LOGITS, /* [n_vocab] */
    A_COUNT
};

struct tnd_ctx {
    tnd_model *m;
    int n_ctx, n_batch, n_past;
    int64_t kv_dim;          /* n_head_kv * head_dim */
    tnd_backend *be;
    tnd_stream *st;
    void *act[A_COUNT];
    uint16_t *kcache, *vcache; /* [n_layer][n_ctx][kv_dim] f16, backend memory */
    const void **w;          /* [n_slices] weight data in the backend's address space */
    void **w_owned;          /* [n_slices] uploads to free (NULL for host-mapped weights) */
    float *logits;           /* [n_vocab] host */
    int32_t *host_i32;       /* [2 * nb] staging for ids and positions */
    tnd_status err;          /* first op failure of the round */
};

tnd_ctx_params tnd_ctx_default_params(void) {
    tnd_ctx_params p = {.n_ctx = 0, .n_batch = 0, .device = TND_DEVICE_CPU, .vram_budget = 0};
    return p;
}

void tnd_ctx_free(tnd_ctx *c) {
    if (!c) return;
    if (c->be) {
        if (c->st) c->be->iface->stream_free(c->be, c->st);
        for (int i = 0; i < A_COUNT; i++) c->be->iface->buf_free(c->be, c->act[i]);
        c->be->iface->buf_free(c->be, c->kcache);
        c->be->iface->buf_free(c->be, c->vcache);
        for (int i = 0; c->w_owned && i < c->m->n_slices; i++) c->be->iface->buf_free(c->be, c->w_owned[i]);
        tnd_backend_free(c->be);
    }
    free(c->w);
    free(c->w_owned);
    free(c->logits);
    free(c->host_i32);
    free(c);
}

/* Places every weight in the backend's memory: host-mapped as they are for
 * the CPU, uploaded for a GPU. */
static tnd_status place_weights(tnd_ctx *c) {
    const tnd_model *m = c->m;
    c->w = calloc((size_t)m->n_slices, sizeof *c->w);
    c->w_owned = calloc((size_t)m->n_slices, sizeof *c->w_owned);
    if (!c->w || !c->w_owned) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    /* backend.h: a backend without pinned host buffers reads host memory
     * directly, so the mmapped weights serve as they are. */
    bool host = c->be->iface->host_alloc == NULL;
    for (int i = 0; i < m->n_slices; i++) {
        const tnd_weight *w = m->slices[i];
        if (host) {
            c->w[i] = w->data;
            continue;
        }
        tnd_status st = c->be->iface->buf_alloc(c->be, w->t->nbytes, &c->w_owned[i]);
        if (st) return tnd_fail_wrap(st, "uploading weight '%.*s': ", (int)w->t->name.len, w->t->name.ptr);
        if ((st = c->be->iface->copy_h2d(c->be, c->w_owned[i], w->data, w->t->nbytes, c->st))) return st;
        c->w[i] = c->w_owned[i];
    }
    return c->be->iface->stream_sync(c->be, c->st);
}

static tnd_status alloc_buffers(tnd_ctx *c) {
    const tnd_hparams *hp = &c->m->hp;
    int64_t nb = c->n_batch, E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim;
    int64_t used = hp->n_expert ? hp->n_expert_used : 1, ff = hp->n_expert ? hp->n_ff_exp : hp->n_ff;
    size_t f = sizeof(float);
    size_t sz[A_COUNT] = {
        [A_X] = f * nb * E, [A_H] = f * nb * E, [A_Q] = f * nb * qd, [A_K] = f * nb * c->kv_dim,
        [A_V] = f * nb * c->kv_dim, [A_ATT] = f * nb * qd, [A_O] = f * nb * E,
        [A_G] = f * nb * used * ff, [A_U] = f * nb * used * ff,
        [A_EY] = hp->n_expert ? f * nb * used * E : 0, [A_RL] = f * nb * hp->n_expert,
        [A_RW] = hp->n_expert ? f * nb * used : 0, [A_RI] = hp->n_expert ? sizeof(int32_t) * nb * used : 0,
        [A_IDS] = sizeof(int32_t) * nb, [A_POS] = sizeof(int32_t) * nb, [A_LOGITS] = f * hp->n_vocab,
    };
    for (int i = 0; i < A_COUNT; i++) {
        if (!sz[i]) continue;
        tnd_status st = c->be->iface->buf_alloc(c->be, sz[i], &c->act[i]);
        if (st) return tnd_fail_wrap(st, "activation buffers: ");
    }
    size_t cache = (size_t)hp->n_layer * (size_t)c->n_ctx * (size_t)c->kv_dim * sizeof(uint16_t);
    tnd_status st;
    if ((st = c->be->iface->buf_alloc(c->be, cache, (void **)&c->kcache)) ||
        (st = c->be->iface->buf_alloc(c->be, cache, (void **)&c->vcache)))
        return tnd_fail_wrap(st, "KV cache of %d tokens (%.1f MiB): ", c->n_ctx, 2.0 * (double)cache / (1 << 20));
    c->logits = malloc(f * (size_t)hp->n_vocab);
    c->host_i32 = malloc(sizeof(int32_t) * 2 * (size_t)nb);
    if (!c->logits || !c->host_i32) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    return TND_OK;
}

tnd_status tnd_ctx_new(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out) {
    tnd_ctx_params dp = tnd_ctx_default_params();
    if (!p) p = &dp;
    const tnd_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_batch < 0) return tnd_fail(TND_ERR_ARG, "context and batch sizes must be positive");
    int n_ctx = p->n_ctx ? p->n_ctx : TND_MIN(hp->n_ctx_train, 4096);
    if (n_ctx > hp->n_ctx_train)
        return tnd_fail(TND_ERR_LIMIT, "context length %d exceeds the model's training context %d", n_ctx,
                        hp->n_ctx_train);
    int nb = p->n_batch ? p->n_batch : 512;
    if (nb > n_ctx) nb = n_ctx;
    tnd_ctx *c = tnd_calloc(1, sizeof *c);
    if (!c) return TND_ERR_NOMEM;
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_batch = nb;
    c->kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    tnd_status st;
    if (p->device == TND_DEVICE_CUDA) {
        tnd_cuda_params cp = {.device = 0, .vram_budget = p->vram_budget};
        st = tnd_backend_cuda_new(&cp, &c->be);
    } else {
        st = tnd_backend_cpu_new(m->pool, 0, &c->be);
    }
    if (!st) st = c->be->iface->stream_new(c->be, &c->st);
    if (!st) st = place_weights(c);
    if (!st) st = alloc_buffers(c);
    if (st) {
        if (p->device == TND_DEVICE_CUDA && st == TND_ERR_NOMEM)
            tnd_fail_wrap(st, "the model (%.0f MiB of weights) cannot run entirely on the GPU within the budget: ",
                          (double)m->weight_bytes / (1 << 20));
        tnd_ctx_free(c);
        return st;
    }
    *out = c;
    return TND_OK;
}

int tnd_ctx_n_past(const tnd_ctx *c) { return c->n_past; }
int tnd_ctx_n_ctx(const tnd_ctx *c) { return c->n_ctx; }

tnd_status tnd_ctx_truncate(tnd_ctx *c, int n) {
    if (n < 0 || n > c->n_past) return tnd_fail(TND_ERR_ARG, "cannot truncate %d tokens to %d", c->n_past, n);
    c->n_past = n;
    return TND_OK;
}

/* ---- op emission ----------------------------------------------------------- */

static tnd_tensor T(const void *data, tnd_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    tnd_tensor t = {.data = (void *)data, .type = type, .ne = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1}};
    return t;
}

static tnd_tensor F(const void *data, int64_t ne0, int64_t ne1, int64_t ne2) {
    return T(data, TND_TYPE_F32, ne0, ne1, ne2);
}

/* Weight w as a tensor in the backend's memory. */
static tnd_tensor W(const tnd_ctx *c, const tnd_weight *w) {
    return T(c->w[w->id], w->type, w->n_in, w->n_out, w->n_expert);
}

static void run(tnd_ctx *c, tnd_op *op) {
    if (c->err) return;
    tnd_status st = c->be->iface->op_run(c->be, op, c->st);
    if (st) c->err = tnd_fail_wrap(st, "%s: ", tnd_op_name(op->kind));
}

static void op_matmul(tnd_ctx *c, const tnd_weight *w, const void *x, int nt, void *y) {
    tnd_op op = {.kind = TND_OP_MATMUL};
    op.in[0] = W(c, w);
    op.in[1] = F(x, w->n_in, nt, 1);
    op.out[0] = F(y, w->n_out, nt, 1);
    run(c, &op);
}

static void op_norm(tnd_ctx *c, const void *x, const tnd_weight *w, void *y, int64_t n, int64_t rows) {
    tnd_op op = {.kind = TND_OP_RMS_NORM, .p.norm.eps = c->m->hp.eps};
    op.in[0] = F(x, n, rows, 1);
    op.in[1] = F(w ? c->w[w->id] : NULL, n, 1, 1);
    op.out[0] = F(y, n, rows, 1);
    run(c, &op);
}

static void op_binary(tnd_ctx *c, tnd_op_kind kind, void *a, const void *b, int64_t n, int64_t nb) {
    tnd_op op = {.kind = kind};
    op.in[0] = F(a, n, 1, 1);
    op.in[1] = F(b, nb, 1, 1);
    op.out[0] = F(a, n, 1, 1);
    run(c, &op);
}

static void op_rope(tnd_ctx *c, void *x, int n_head, int nt, float base, float scale) {
    const tnd_hparams *hp = &c->m->hp;
    tnd_op op = {.kind = TND_OP_ROPE};
    op.p.rope.n_rot = hp->n_rot;
    op.p.rope.mode = c->m->arch->rope_neox ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = scale;
    op.in[0] = F(x, hp->head_dim, n_head, nt);
    op.in[1] = T(c->act[A_POS], TND_TYPE_I32, nt, 1, 1);
    op.out[0] = op.in[0];
    run(c, &op);
}

static void op_store_kv(tnd_ctx *c, const void *src, uint16_t *cache, int pos0, int nt) {
    tnd_op op = {.kind = TND_OP_CPY};
    op.in[0] = F(src, c->kv_dim, nt, 1);
    op.out[0] = T(cache + (size_t)pos0 * c->kv_dim, TND_TYPE_F16, c->kv_dim, nt, 1);
    run(c, &op);
}

static void moe_ffn(tnd_ctx *c, const tnd_layer *L, int nt) {
    const tnd_hparams *hp = &c->m->hp;
    int64_t E = hp->n_embd, F_ = hp->n_ff_exp, k = hp->n_expert_used;
    op_matmul(c, &L->router, c->act[A_H], nt, c->act[A_RL]);
    tnd_op r = {.kind = TND_OP_MOE_ROUTE};
    r.p.route.n_used = (int)k;
    r.p.route.mode = TND_ROUTE_SOFTMAX_TOPK;
    r.p.route.norm = hp->expert_norm;
    r.in[0] = F(c->act[A_RL], hp->n_expert, nt, 1);
    r.out[0] = F(c->act[A_RW], k, nt, 1);
    r.out[1] = T(c->act[A_RI], TND_TYPE_I32, k, nt, 1);
    run(c, &r);
    const tnd_weight *gu[2] = {&L->gate_exps, &L->up_exps};
    void *dst[2] = {c->act[A_G], c->act[A_U]};
    for (int i = 0; i < 2; i++) {
        tnd_op op = {.kind = TND_OP_MATMUL_ID};
        op.in[0] = W(c, gu[i]);
        op.in[1] = F(c->act[A_H], E, 1, nt);
        op.in[2] = r.out[1];
        op.out[0] = F(dst[i], F_, k, nt);
        run(c, &op);
    }
    tnd_op act = {.kind = TND_OP_SILU_MUL};
    act.in[0] = F(c->act[A_G], F_ * k * nt, 1, 1);
    act.in[1] = F(c->act[A_U], F_ * k * nt, 1, 1);
    act.out[0] = act.in[0];
    run(c, &act);
    tnd_op down = {.kind = TND_OP_MATMUL_ID};
    down.in[0] = W(c, &L->down_exps);
    down.in[1] = F(c->act[A_G], F_, k, nt);
    down.in[2] = r.out[1];
    down.out[0] = F(c->act[A_EY], E, k, nt);
    run(c, &down);
    tnd_op sum = {.kind = TND_OP_MOE_SUM};
    sum.in[0] = down.out[0];
    sum.in[1] = r.out[0];
    sum.out[0] = F(c->act[A_O], E, nt, 1);
    run(c, &sum);
}

static void layer_forward(tnd_ctx *c, int il, int nt, int pos0) {
    const tnd_model *m = c->m;
    const tnd_hparams *hp = &m->hp;
    const tnd_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd, kvd = c->kv_dim;
    void **a = c->act;

    op_norm(c, a[A_X], &L->attn_norm, a[A_H], E, nt);
    op_matmul(c, &L->wq, a[A_H], nt, a[A_Q]);
    op_matmul(c, &L->wk, a[A_H], nt, a[A_K]);
    op_matmul(c, &L->wv, a[A_H], nt, a[A_V]);
    if (L->bq.t) {
        op_binary(c, TND_OP_ADD, a[A_Q], c->w[L->bq.id], qd * nt, qd);
        op_binary(c, TND_OP_ADD, a[A_K], c->w[L->bk.id], kvd * nt, kvd);
        op_binary(c, TND_OP_ADD, a[A_V], c->w[L->bv.id], kvd * nt, kvd);
    }
    if (L->q_norm.t) {
        op_norm(c, a[A_Q], &L->q_norm, a[A_Q], hd, (int64_t)hp->n_head * nt);
        op_norm(c, a[A_K], &L->k_norm, a[A_K], hd, (int64_t)hp->n_head_kv * nt);
    }
    float base = L->swa ? hp->rope_base_local : hp->rope_base;
    float scale = L->swa ? 1.0f : hp->rope_scale;
    op_rope(c, a[A_Q], hp->n_head, nt, base, scale);
    op_rope(c, a[A_K], hp->n_head_kv, nt, base, scale);
    uint16_t *kc = c->kcache + (size_t)il * c->n_ctx * kvd, *vc = c->vcache + (size_t)il * c->n_ctx * kvd;
    op_store_kv(c, a[A_K], kc, pos0, nt);
    op_store_kv(c, a[A_V], vc, pos0, nt);
    tnd_op at = {.kind = TND_OP_ATTN};
    at.p.attn.n_head = hp->n_head;
    at.p.attn.n_head_kv = hp->n_head_kv;
    at.p.attn.head_dim = (int)hd;
    at.p.attn.pos0 = pos0;
    at.p.attn.scale = hp->attn_scale;
    at.p.attn.window = L->swa ? hp->swa_window : 0;
    at.in[0] = F(a[A_Q], hd, hp->n_head, nt);
    at.in[1] = T(kc, TND_TYPE_F16, kvd, c->n_ctx, 1);
    at.in[2] = T(vc, TND_TYPE_F16, kvd, c->n_ctx, 1);
    at.out[0] = F(a[A_ATT], hd, hp->n_head, nt);
    run(c, &at);
    op_matmul(c, &L->wo, a[A_ATT], nt, a[A_O]);
    if (L->attn_post_norm.t) op_norm(c, a[A_O], &L->attn_post_norm, a[A_O], E, nt);
    op_binary(c, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
    op_norm(c, a[A_X], &L->ffn_norm, a[A_H], E, nt);
    if (m->arch->moe) {
        moe_ffn(c, L, nt);
    } else {
        int64_t F_ = hp->n_ff;
        op_matmul(c, &L->ffn_gate, a[A_H], nt, a[A_G]);
        op_matmul(c, &L->ffn_up, a[A_H], nt, a[A_U]);
        op_binary(c, m->arch->gelu ? TND_OP_GELU_MUL : TND_OP_SILU_MUL, a[A_G], a[A_U], F_ * nt, F_ * nt);
        op_matmul(c, &L->ffn_down, a[A_G], nt, a[A_O]);
    }
    if (L->ffn_post_norm.t) op_norm(c, a[A_O], &L->ffn_post_norm, a[A_O], E, nt);
    op_binary(c, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
}

/* One round: nt tokens at positions n_past..; logits of the last if asked. */
static tnd_status round_forward(tnd_ctx *c, const int32_t *tokens, int nt, bool want_logits) {
    const tnd_model *m = c->m;
    const tnd_hparams *hp = &m->hp;
    const tnd_backend_iface *be = c->be->iface;
    int64_t E = hp->n_embd;
    int32_t *pos = c->host_i32 + c->n_batch;
    memcpy(c->host_i32, tokens, sizeof(int32_t) * (size_t)nt);
    for (int t = 0; t < nt; t++) pos[t] = c->n_past + t;
    c->err = be->copy_h2d(c->be, c->act[A_IDS], c->host_i32, sizeof(int32_t) * (size_t)nt, c->st);
    if (!c->err) c->err = be->copy_h2d(c->be, c->act[A_POS], pos, sizeof(int32_t) * (size_t)nt, c->st);
    tnd_op emb = {.kind = TND_OP_GET_ROWS};
    emb.in[0] = W(c, &m->tok_embd);
    emb.in[1] = T(c->act[A_IDS], TND_TYPE_I32, nt, 1, 1);
    emb.out[0] = F(c->act[A_X], E, nt, 1);
    run(c, &emb);
    if (m->arch->embd_scale) {
        tnd_op sc = {.kind = TND_OP_SCALE, .p.scale.s = sqrtf((float)E)};
        sc.in[0] = sc.out[0] = emb.out[0];
        run(c, &sc);
    }
    for (int il = 0; il < hp->n_layer; il++) layer_forward(c, il, nt, c->n_past);
    if (want_logits) {
        float *last = (float *)c->act[A_X] + (int64_t)(nt - 1) * E;
        op_norm(c, last, &m->output_norm, c->act[A_H], E, 1);
        op_matmul(c, &m->output, c->act[A_H], 1, c->act[A_LOGITS]);
        if (!c->err)
            c->err = be->copy_d2h(c->be, c->logits, c->act[A_LOGITS], sizeof(float) * (size_t)hp->n_vocab, c->st);
    }
    tnd_status st = be->stream_sync(c->be, c->st);
    if (!c->err) c->err = st;
    if (c->err) return c->err;
    c->n_past += nt;
    return TND_OK;
}

tnd_status tnd_ctx_eval(tnd_ctx *c, const int32_t *tokens, int n, float *logits) {
    if (n <= 0) return tnd_fail(TND_ERR_ARG, "no tokens to evaluate");
    if ((int64_t)c->n_past + n > c->n_ctx)
        return tnd_fail(TND_ERR_LIMIT, "context full: %d tokens in the cache + %d new > context length %d "
                        "(use a larger --ctx-size, up to the model's %d)",
                        c->n_past, n, c->n_ctx, c->m->hp.n_ctx_train);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab)
            return tnd_fail(TND_ERR_ARG, "token id %d out of range [0, %d)", tokens[i], c->m->hp.n_vocab);
    int start = c->n_past;
    for (int done = 0; done < n;) {
        int nt = TND_MIN(c->n_batch, n - done);
        tnd_status st = round_forward(c, tokens + done, nt, done + nt == n);
        if (st) {
            c->n_past = start; /* a failed eval leaves the cache as it was */
            return st;
        }
        done += nt;
    }
    if (logits) memcpy(logits, c->logits, sizeof(float) * (size_t)c->m->hp.n_vocab);
    return TND_OK;
}
