/* The forward recipe. One recipe for every placement: a round (a chunk of
 * tokens) is emitted as an op list (graph.h) over canonical buffers, then
 * run by the executor (exec/) on the CPU, the GPU, or both; contexts, which
 * own those buffers, are runtime/context.c.
 *
 * The recipe is the pre-norm transformer block common to the architectures
 * of model/arch.c, with the features each arch row enables:
 *
 *   x = embed(tokens) [* sqrt(n_embd)]
 *   per layer:  h = norm(x);  q,k,v = W h [+ b];  [q,k = headnorm(q,k)];  rope(q,k)
 *               K,V[pos] = k,v (f16);  a = attn(q, K, V);  o = Wo a;  [o = norm(o)];  x += o
 *               h = norm(x);  f = ffn(h) or moe(h);  [f = norm(f)];  x += f
 *   logits = out(norm(x_last))
 *
 * A batched round (tnd_recipe_emit_batch) runs several sequences' tokens
 * through the same ops; only the KV store and attention, and the head's
 * rows, are per sequence.
 *
 * Fused ops (TND_FUSE, on by default; backend.h): headnorm then rope is one
 * ROPE, and each `x += o; h = norm(x)` is one RMS_NORM, the add after the
 * FFN carrying the next layer's attn_norm (or the head's output_norm when
 * every row is a head row). A decode step on the GPU is bound by launches;
 * the CPU computes the same floats in the same order either way.
 */
#include "model/forward.h"

#include <math.h>
#include <stddef.h>

#include "config.h"
#include "util.h"

/* One emission in progress: the recipe, the layer being emitted (-1
 * outside the layers) and the first failure. */
typedef struct em {
    const tnd_recipe *r;
    const tnd_model *m;
    void **act;
    int layer;
    tnd_status err;
    const tnd_seg *seg; /* the round's sequences, in token order (one for tnd_recipe_emit) */
    int n_seg;
    bool fuse; /* TND_FUSE: the fused op forms (backend.h: RMS_NORM, ROPE) */
    bool pos_mem; /* a round of <= TND_GRAPH_MAX_TOK tokens: KV store and ATTN read positions (backend.h) */
} em;

/* ---- op emission ----------------------------------------------------------- */

static tnd_tensor T(const void *data, tnd_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    tnd_tensor t = {.data = (void *)data, .type = type, .ne = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1}};
    return t;
}

static tnd_tensor F(const void *data, int64_t ne0, int64_t ne1, int64_t ne2) {
    return T(data, TND_TYPE_F32, ne0, ne1, ne2);
}

/* Weight w as a canonical tensor (its mmapped data). */
static tnd_tensor W(const tnd_weight *w) { return T(w->data, w->type, w->n_in, w->n_out, w->n_expert); }

/* Appends op; sid is the slice it reads as in[0] (-1: none). */
static void emit(em *e, const tnd_op *op, int sid, int pin) {
    if (e->err) return;
    e->err = tnd_graph_push(e->r->g, op, sid, e->layer, pin);
}

static void run(em *e, const tnd_op *op) { emit(e, op, -1, TND_PIN_FOLLOW); }

/* Slots of a layer's cache (a context of one sequence: one). */
static int64_t kv_slots(const em *e) { return e->r->n_seq > 0 ? e->r->n_seq : 1; }

/* The rows attention reads when its keys end at row `end` of a slot: end
 * rounded up to TND_KV_CAP_STEP (so a replayed graph's cap changes rarely),
 * within the context. */
static int kv_cap_for(const em *e, int end) {
    return TND_MIN((end + TND_KV_CAP_STEP - 1) / TND_KV_CAP_STEP * TND_KV_CAP_STEP, e->r->n_ctx);
}

/* Canonical K (kv 0) or V (kv 1) cache of layer il, sequence slot seq:
 * each layer holds n_seq slots of n_ctx rows, one after another. */
static uint16_t *kv_canon(const em *e, int kv, int il, int seq) {
    return e->r->kv_canon +
           (((size_t)kv * e->m->hp.n_layer + (size_t)il) * (size_t)kv_slots(e) + (size_t)seq) * (size_t)e->r->n_ctx *
               (size_t)e->r->kv_dim;
}

static void op_matmul(em *e, const tnd_weight *w, const void *x, int nt, void *y) {
    tnd_op op = {.kind = TND_OP_MATMUL};
    op.in[0] = W(w);
    op.in[1] = F(x, w->n_in, nt, 1);
    op.out[0] = F(y, w->n_out, nt, 1);
    emit(e, &op, w->id, TND_PIN_FOLLOW);
}

static void op_norm(em *e, const void *x, const tnd_weight *w, void *y, int64_t n, int64_t rows) {
    tnd_op op = {.kind = TND_OP_RMS_NORM, .p.norm.eps = e->m->hp.eps};
    op.in[0] = F(x, n, rows, 1);
    op.in[1] = F(w ? w->data : NULL, n, 1, 1);
    op.out[0] = F(y, n, rows, 1);
    run(e, &op);
}

/* x += o; y = norm(x) * w over rows of n, as one RMS_NORM with a fused
 * residual add (backend.h): the ADD and the norm that follows it in one
 * launch. The sums are the ADD's, so the results are the pair's. */
static void op_add_norm(em *e, void *x, const void *o, const tnd_weight *w, void *y, int64_t n, int64_t rows) {
    tnd_op op = {.kind = TND_OP_RMS_NORM, .p.norm.eps = e->m->hp.eps};
    op.in[0] = F(x, n, rows, 1);
    op.in[1] = F(w->data, n, 1, 1);
    op.in[2] = F(o, n, rows, 1);
    op.out[0] = F(y, n, rows, 1);
    op.out[1] = F(x, n, rows, 1);
    run(e, &op);
}

static void op_binary(em *e, tnd_op_kind kind, void *a, const void *b, int64_t n, int64_t nb) {
    tnd_op op = {.kind = kind};
    op.in[0] = F(a, n, 1, 1);
    op.in[1] = F(b, nb, 1, 1);
    op.out[0] = F(a, n, 1, 1);
    run(e, &op);
}

/* RoPE over x's heads in place; norm (qwen3's q/k norm, or NULL) first
 * normalizes each head in the same op (backend.h), one launch instead of
 * RMS_NORM then ROPE. */
static void op_rope(em *e, void *x, const tnd_weight *norm, int n_head, int nt, float base, float scale) {
    const tnd_hparams *hp = &e->m->hp;
    tnd_op op = {.kind = TND_OP_ROPE};
    if (norm) {
        op.in[2] = F(norm->data, hp->head_dim, 1, 1);
        op.p.rope.eps = hp->eps;
    }
    op.p.rope.n_rot = hp->n_rot;
    op.p.rope.mode = e->m->arch->rope_neox ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = scale;
    op.in[0] = F(x, hp->head_dim, n_head, nt);
    op.in[1] = T(e->act[A_POS], TND_TYPE_I32, nt, 1, 1);
    op.out[0] = op.in[0];
    run(e, &op);
}

/* K or V rows of nt tokens (positions pos: pos0.. in A_POS) into the cache. */
static void op_store_kv(em *e, const void *src, uint16_t *cache, const int32_t *pos, int pos0, int nt) {
    tnd_op op = {.kind = TND_OP_CPY};
    op.in[0] = F(src, e->r->kv_dim, nt, 1);
    if (e->pos_mem) { /* the rows at the positions the round reads from A_POS */
        op.in[1] = T(pos, TND_TYPE_I32, nt, 1, 1);
        op.out[0] = T(cache, TND_TYPE_F16, e->r->kv_dim, e->r->n_ctx, 1);
    } else {
        op.out[0] = T(cache + (size_t)pos0 * e->r->kv_dim, TND_TYPE_F16, e->r->kv_dim, nt, 1);
    }
    emit(e, &op, -1, TND_PIN_KV);
}

/* K or V rows of a batched round's nt tokens into the layer's cache of all
 * slots (cache: slot 0), each at its row in A_ROW. */
static void op_store_rows(em *e, const void *src, uint16_t *cache, int nt) {
    tnd_op op = {.kind = TND_OP_CPY};
    op.in[0] = F(src, e->r->kv_dim, nt, 1);
    op.in[1] = T(e->act[A_ROW], TND_TYPE_I32, nt, 1, 1);
    op.out[0] = T(cache, TND_TYPE_F16, e->r->kv_dim, (int64_t)e->r->n_ctx * kv_slots(e), 1);
    emit(e, &op, -1, TND_PIN_KV);
}

/* The routing (like r) of logits pl, a predicted layer's (A_PR's layout):
 * its ids. */
static tnd_tensor predicted_route(em *e, const tnd_op *r, float *pl, int nt) {
    const int64_t E = e->m->hp.n_expert, k = e->m->hp.n_expert_used;
    float *pw = pl + (int64_t)TND_PREDICT_MAX_TOK * E;
    int32_t *pi = (int32_t *)(pw + (int64_t)TND_PREDICT_MAX_TOK * k);
    tnd_op pr = *r;
    pr.in[0] = F(pl, E, nt, 1);
    pr.out[0] = F(pw, k, nt, 1);
    pr.out[1] = T(pi, TND_TYPE_I32, k, nt, 1);
    run(e, &pr);
    return pr.out[1];
}

static void moe_ffn(em *e, const tnd_layer *L, int nt) {
    const tnd_hparams *hp = &e->m->hp;
    int64_t E = hp->n_embd, F_ = hp->n_ff_exp, k = hp->n_expert_used;
    /* A layer split expert by expert (docs/ARCHITECTURE.md): the executor maps the
     * routing ids to those of each side's experts (the NONE node: A_RIG
     * holds the GPU's compact indices, A_RIC the CPU's ids, -1 elsewhere),
     * then the GPU's experts run (queued), then the CPU's (on this thread,
     * meanwhile; on the GPU too when promoted). Each side's MATMUL_IDs skip
     * the other side's ids, so they fill disjoint rows of A_EY and MOE_SUM
     * adds the same values in the same order as on one side. */
    const bool split = e->r->split && e->r->split[e->layer];
    /* The next layer's router over this layer's FFN input names nearly all
     * of the next layer's experts (docs/DECISIONS.md): its ids let the
     * executor copy them to the GPU a layer ahead. One buffer for its
     * logits, weights and ids: the two ops run on one side, whichever
     * side the next layer's router is on, and a buffer's contents are
     * tracked as a whole (exec.c), so they must not share this layer's.
     * Its matmul comes right after this layer's router's: over the same
     * x, the executor can hand the two to the GPU as one launch. */
    const int ln = e->layer + 1;
    const bool predict = split && e->r->predict && nt <= TND_PREDICT_MAX_TOK && ln < e->m->hp.n_layer &&
                         e->r->split[ln] && e->m->layers[ln].router.t;
    float *pl = predict ? e->act[A_PR] : NULL;
    /* PreSched's wider window (LayerScope's Q4): the layer after the next
     * too, through its router over the same x, in a buffer of its own */
    const int ln2 = e->layer + 2;
    const bool predict2 = predict && e->r->predict2 && ln2 < e->m->hp.n_layer && e->r->split[ln2] &&
                          e->m->layers[ln2].router.t;
    float *pl2 = predict2 ? e->act[A_PR2] : NULL;
    op_matmul(e, &L->router, e->act[A_H], nt, e->act[A_RL]);
    if (predict) op_matmul(e, &e->m->layers[ln].router, e->act[A_H], nt, pl);
    if (predict2) op_matmul(e, &e->m->layers[ln2].router, e->act[A_H], nt, pl2);
    tnd_op r = {.kind = TND_OP_MOE_ROUTE};
    r.p.route.n_used = (int)k;
    r.p.route.mode = TND_ROUTE_SOFTMAX_TOPK;
    r.p.route.norm = hp->expert_norm;
    r.in[0] = F(e->act[A_RL], hp->n_expert, nt, 1);
    r.out[0] = F(e->act[A_RW], k, nt, 1);
    r.out[1] = T(e->act[A_RI], TND_TYPE_I32, k, nt, 1);
    run(e, &r);
    const void *part_ids[2] = {r.out[1].data, NULL};
    if (split) {
        tnd_op map = {.kind = TND_OP_NONE};
        map.in[0] = r.out[1];
        if (predict) map.in[1] = predicted_route(e, &r, pl, nt);
        if (predict2) map.in[2] = predicted_route(e, &r, pl2, nt);
        map.out[0] = T(e->act[A_RIC], TND_TYPE_I32, k, nt, 1);
        map.out[1] = T(e->act[A_RIG], TND_TYPE_I32, k, nt, 1);
        run(e, &map);
        part_ids[0] = e->act[A_RIG];
        part_ids[1] = e->act[A_RIC];
    }
    for (int part = 0; part < 2 && part_ids[part]; part++) {
        tnd_tensor ids = T(part_ids[part], TND_TYPE_I32, k, nt, 1);
        const tnd_weight *gu[2] = {&L->gate_exps, &L->up_exps};
        void *dst[2] = {e->act[A_G], e->act[A_U]};
        for (int i = 0; i < 2; i++) {
            tnd_op op = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = split};
            op.in[0] = W(gu[i]);
            op.in[1] = F(e->act[A_H], E, 1, nt);
            op.in[2] = ids;
            op.out[0] = F(dst[i], F_, k, nt);
            emit(e, &op, gu[i]->id, TND_PIN_FOLLOW);
        }
        tnd_op act = {.kind = TND_OP_SILU_MUL};
        act.in[0] = F(e->act[A_G], F_ * k * nt, 1, 1);
        act.in[1] = F(e->act[A_U], F_ * k * nt, 1, 1);
        act.out[0] = act.in[0];
        run(e, &act);
        tnd_op down = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = split};
        down.in[0] = W(&L->down_exps);
        down.in[1] = F(e->act[A_G], F_, k, nt);
        down.in[2] = ids;
        down.out[0] = F(e->act[A_EY], E, k, nt);
        emit(e, &down, L->down_exps.id, TND_PIN_FOLLOW);
    }
    tnd_op sum = {.kind = TND_OP_MOE_SUM};
    sum.in[0] = F(e->act[A_EY], E, k, nt);
    sum.in[1] = r.out[0];
    sum.out[0] = F(e->act[A_O], E, nt, 1);
    /* A split layer's sum in a decode-sized round runs beside the attention
     * (the KV cache's side), not after its CPU part: with the GPU there, the
     * host queues the sum behind the GPU's part and the CPU's rows (both in
     * the mapped A_EY) and goes on to the next layer without waiting for
     * either. A prefill chunk's A_EY is n_used times the sum's output, too
     * much to move for it. */
    emit(e, &sum, -1, split && nt <= TND_PREDICT_MAX_TOK ? TND_PIN_KV : TND_PIN_FOLLOW);
}

/* Layer il. normed: A_H already holds norm(x) by attn_norm (the previous
 * layer's last op wrote it); next_norm: the norm that follows the layer
 * (the next layer's attn_norm, or the head's output_norm when every row of
 * x is a head row), fused into the layer's last residual add, or NULL. */
static void layer_forward(em *e, int il, int nt, bool normed, const tnd_weight *next_norm) {
    const tnd_model *m = e->m;
    const tnd_hparams *hp = &m->hp;
    const tnd_layer *L = &m->layers[il];
    int64_t E = hp->n_embd, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd, kvd = e->r->kv_dim;
    void **a = e->act;
    e->layer = il;

    if (!normed) op_norm(e, a[A_X], &L->attn_norm, a[A_H], E, nt);
    op_matmul(e, &L->wq, a[A_H], nt, a[A_Q]);
    op_matmul(e, &L->wk, a[A_H], nt, a[A_K]);
    op_matmul(e, &L->wv, a[A_H], nt, a[A_V]);
    if (L->bq.t) {
        op_binary(e, TND_OP_ADD, a[A_Q], L->bq.data, qd * nt, qd);
        op_binary(e, TND_OP_ADD, a[A_K], L->bk.data, kvd * nt, kvd);
        op_binary(e, TND_OP_ADD, a[A_V], L->bv.data, kvd * nt, kvd);
    }
    /* the per-head q/k norms, if any, run inside the ropes */
    const bool qk = L->q_norm.t != NULL && e->fuse;
    if (L->q_norm.t && !qk) {
        op_norm(e, a[A_Q], &L->q_norm, a[A_Q], hd, (int64_t)hp->n_head * nt);
        op_norm(e, a[A_K], &L->k_norm, a[A_K], hd, (int64_t)hp->n_head_kv * nt);
    }
    float base = L->swa ? hp->rope_base_local : hp->rope_base;
    float scale = L->swa ? 1.0f : hp->rope_scale;
    op_rope(e, a[A_Q], qk ? &L->q_norm : NULL, hp->n_head, nt, base, scale);
    op_rope(e, a[A_K], qk ? &L->k_norm : NULL, hp->n_head_kv, nt, base, scale);
    /* the KV store and attention per sequence, over its own slot and
     * positions; a batched round stores by row, and a run of short
     * segments attends over the slots in one op (forward.h) */
    if (e->n_seg > 1) {
        op_store_rows(e, a[A_K], kv_canon(e, 0, il, 0), nt);
        op_store_rows(e, a[A_V], kv_canon(e, 1, il, 0), nt);
    }
    for (int s = 0, u; s < e->n_seg; s = u) {
        const tnd_seg *sg = &e->seg[s];
        u = s + 1;
        tnd_op at = {.kind = TND_OP_ATTN};
        at.p.attn.n_head = hp->n_head;
        at.p.attn.n_head_kv = hp->n_head_kv;
        at.p.attn.head_dim = (int)hd;
        at.p.attn.scale = hp->attn_scale;
        at.p.attn.window = L->swa ? hp->swa_window : 0;
        int n = sg->n;
        if (e->n_seg > 1 && sg->n <= TND_GRAPH_MAX_TOK) { /* this run of short segments, over the slots */
            int end = sg->pos0 + sg->n;
            for (; u < e->n_seg && e->seg[u].n <= TND_GRAPH_MAX_TOK; u++) {
                n += e->seg[u].n;
                end = TND_MAX(end, e->seg[u].pos0 + e->seg[u].n);
            }
            at.in[3] = T((const int32_t *)e->act[A_ROW] + sg->off, TND_TYPE_I32, n, 1, 1);
            at.p.attn.kv_cap = kv_cap_for(e, end);
            at.p.attn.slot_rows = e->r->n_ctx;
            at.in[1] = T(kv_canon(e, 0, il, 0), TND_TYPE_F16, kvd, (int64_t)e->r->n_ctx * kv_slots(e), 1);
            at.in[2] = T(kv_canon(e, 1, il, 0), TND_TYPE_F16, kvd, (int64_t)e->r->n_ctx * kv_slots(e), 1);
        } else {
            uint16_t *kc = kv_canon(e, 0, il, sg->seq), *vc = kv_canon(e, 1, il, sg->seq);
            const int32_t *pos = (const int32_t *)e->act[A_POS] + sg->off;
            if (e->n_seg == 1) {
                op_store_kv(e, (float *)a[A_K] + (int64_t)sg->off * kvd, kc, pos, sg->pos0, sg->n);
                op_store_kv(e, (float *)a[A_V] + (int64_t)sg->off * kvd, vc, pos, sg->pos0, sg->n);
            }
            if (e->pos_mem) {
                at.in[3] = T(pos, TND_TYPE_I32, sg->n, 1, 1);
                at.p.attn.kv_cap = kv_cap_for(e, sg->pos0 + sg->n);
            } else {
                at.p.attn.pos0 = sg->pos0;
            }
            at.in[1] = T(kc, TND_TYPE_F16, kvd, e->r->n_ctx, 1);
            at.in[2] = T(vc, TND_TYPE_F16, kvd, e->r->n_ctx, 1);
        }
        at.in[0] = F((float *)a[A_Q] + (int64_t)sg->off * qd, hd, hp->n_head, n);
        at.out[0] = F((float *)a[A_ATT] + (int64_t)sg->off * qd, hd, hp->n_head, n);
        emit(e, &at, -1, TND_PIN_KV);
    }
    op_matmul(e, &L->wo, a[A_ATT], nt, a[A_O]);
    if (L->attn_post_norm.t) op_norm(e, a[A_O], &L->attn_post_norm, a[A_O], E, nt);
    if (e->fuse) {
        op_add_norm(e, a[A_X], a[A_O], &L->ffn_norm, a[A_H], E, nt);
    } else {
        op_binary(e, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
        op_norm(e, a[A_X], &L->ffn_norm, a[A_H], E, nt);
    }
    if (m->arch->moe) {
        moe_ffn(e, L, nt);
    } else {
        int64_t F_ = hp->n_ff;
        op_matmul(e, &L->ffn_gate, a[A_H], nt, a[A_G]);
        op_matmul(e, &L->ffn_up, a[A_H], nt, a[A_U]);
        op_binary(e, m->arch->gelu ? TND_OP_GELU_MUL : TND_OP_SILU_MUL, a[A_G], a[A_U], F_ * nt, F_ * nt);
        op_matmul(e, &L->ffn_down, a[A_G], nt, a[A_O]);
    }
    if (L->ffn_post_norm.t) op_norm(e, a[A_O], &L->ffn_post_norm, a[A_O], E, nt);
    if (next_norm) op_add_norm(e, a[A_X], a[A_O], next_norm, a[A_H], E, nt);
    else op_binary(e, TND_OP_ADD, a[A_X], a[A_O], E * nt, E * nt);
}

/* The op list of one round: nt tokens of sequence 0 at positions pos0..
 * (ids and positions are read from the host buffers when it runs), the
 * head over the last token only when want_logits: its logits are the only
 * ones a caller reads (tnd_ctx_eval). A batch of one segment. */
tnd_status tnd_recipe_emit(const tnd_recipe *r, int nt, int pos0, bool want_logits) {
    const tnd_seg one = {.seq = 0, .off = 0, .n = nt, .pos0 = pos0, .logits = want_logits};
    return tnd_recipe_emit_batch(r, &one, 1);
}

/* A batched round (docs/ARCHITECTURE.md: Sequences): the tokens of n_seg
 * sequences, in the order of segs, go through every matmul together, so a
 * weight is read once per round and MATMUL_ID groups all the round's tokens
 * by expert; the KV store and attention run per sequence (layer_forward).
 * The head runs only on the last token of each segment with .logits: its
 * rows are normed into A_H one by one, then one matmul writes A_LOGITS
 * [n_logits][n_vocab] in segment order. */
tnd_status tnd_recipe_emit_batch(const tnd_recipe *r, const tnd_seg *segs, int n_seg) {
    em ctx = {.r = r, .m = r->m, .act = r->act, .layer = -1, .err = TND_OK, .seg = segs, .n_seg = n_seg,
              .fuse = tnd_config_get()->fuse},
       *e = &ctx;
    const tnd_model *m = e->m;
    int64_t E = m->hp.n_embd;
    int nt = 0;
    for (int s = 0; s < n_seg; s++) {
        if (segs[s].off != nt || segs[s].n <= 0) return tnd_fail(TND_ERR_INTERNAL, "segments out of order");
        nt += segs[s].n;
    }
    e->pos_mem = nt <= TND_GRAPH_MAX_TOK;
    tnd_graph_reset(r->g);
    tnd_op emb = {.kind = TND_OP_GET_ROWS};
    emb.in[0] = W(&m->tok_embd);
    emb.in[1] = T(e->act[A_IDS], TND_TYPE_I32, nt, 1, 1);
    emb.out[0] = F(e->act[A_X], E, nt, 1);
    emit(e, &emb, m->tok_embd.id, TND_PIN_FOLLOW);
    if (m->arch->embd_scale) {
        tnd_op sc = {.kind = TND_OP_SCALE, .p.scale.s = sqrtf((float)E)};
        sc.in[0] = sc.out[0] = emb.out[0];
        run(e, &sc);
    }
    /* Each layer's last residual add also norms x for what comes next (the
     * next layer's attn_norm). The head's output_norm reads only the last
     * row of each segment that wants logits; when those are all the rows
     * (decode steps: one token per sequence, every one with logits), the
     * last layer's add norms them into A_H in that same order. */
    bool head_rows = e->fuse;
    for (int s = 0; s < n_seg; s++) head_rows = head_rows && segs[s].logits && segs[s].n == 1;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const tnd_weight *next = !e->fuse                ? NULL
                                 : il + 1 < m->hp.n_layer ? &m->layers[il + 1].attn_norm
                                 : head_rows              ? &m->output_norm
                                                          : NULL;
        layer_forward(e, il, nt, e->fuse && il > 0, next);
    }
    e->layer = -1;
    int n_out = 0;
    for (int s = 0; s < n_seg; s++) {
        if (!segs[s].logits) continue;
        if (head_rows && m->hp.n_layer > 0) { /* normed by the last layer's add */
            n_out++;
            continue;
        }
        const float *last = (float *)e->act[A_X] + (int64_t)(segs[s].off + segs[s].n - 1) * E;
        op_norm(e, last, &m->output_norm, (float *)e->act[A_H] + (int64_t)n_out * E, E, 1);
        n_out++;
    }
    if (n_out) op_matmul(e, &m->output, e->act[A_H], n_out, e->act[A_LOGITS]);
    return e->err;
}
