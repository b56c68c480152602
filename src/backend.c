/* Backend-independent helpers of backend.h, and the CUDA entry points'
 * stand-ins when tandem is built without CUDA (so nothing references CUDA
 * symbols in the CPU-only and sanitizer builds). */
#include "backend.h"

#include <string.h>

#include "util.h"

const char *tnd_op_name(tnd_op_kind k) {
    switch (k) {
    case TND_OP_NONE: return "none";
    case TND_OP_MATMUL: return "matmul";
    case TND_OP_MATMUL_ID: return "matmul_id";
    case TND_OP_GET_ROWS: return "get_rows";
    case TND_OP_RMS_NORM: return "rms_norm";
    case TND_OP_ROPE: return "rope";
    case TND_OP_ATTN: return "attn";
    case TND_OP_SOFTMAX: return "softmax";
    case TND_OP_SILU_MUL: return "silu_mul";
    case TND_OP_GELU_MUL: return "gelu_mul";
    case TND_OP_ADD: return "add";
    case TND_OP_SCALE: return "scale";
    case TND_OP_CPY: return "cpy";
    case TND_OP_MOE_ROUTE: return "moe_route";
    case TND_OP_MOE_SUM: return "moe_sum";
    case TND_OP_MATMUL_PAIR: return "matmul_pair";
    case TND_OP_ROPE_KV: return "rope_kv";
    case TND_OP_MOE_GLU: return "moe_glu";
    case TND_OP_MOE_FFN: return "moe_ffn";
    case TND_OP_MOE_SUM_NORM: return "moe_sum_norm";
    case TND_OP_MOE_ROUTE_PAIR: return "moe_route_pair";
    case TND_OP_COUNT: break;
    }
    return "?";
}

void tnd_op_rope_kv_split(const tnd_op *f, tnd_op part[4]) {
    for (int i = 0; i < 2; i++) { /* q, then k */
        tnd_op *r = &part[i];
        *r = (tnd_op){.kind = TND_OP_ROPE};
        r->p.rope = f->p.rope;
        r->in[0] = f->in[3 * i];
        r->in[1] = f->in[1];
        r->in[2] = f->in[i ? 4 : 2];
        r->out[0] = f->out[i];
    }
    for (int i = 0; i < 2; i++) { /* the roped k, then v, into their caches */
        tnd_op *c = &part[2 + i];
        *c = (tnd_op){.kind = TND_OP_CPY};
        c->in[0] = i ? f->in[5] : f->out[1];
        c->in[1] = f->in[1];
        c->out[0] = f->out[2 + i];
    }
}

static bool same_tensor(const tnd_tensor *a, const tnd_tensor *b) {
    return a->data == b->data && a->type == b->type && memcmp(a->ne, b->ne, sizeof a->ne) == 0;
}

bool tnd_op_rope_kv_fuse(const tnd_op part[4], tnd_op *f) {
    const tnd_op *rq = &part[0], *rk = &part[1], *ck = &part[2], *cv = &part[3];
    if (rq->kind != TND_OP_ROPE || rk->kind != TND_OP_ROPE || ck->kind != TND_OP_CPY || cv->kind != TND_OP_CPY)
        return false;
    if (memcmp(&rq->p.rope, &rk->p.rope, sizeof rq->p.rope) != 0 || !same_tensor(&rq->in[0], &rq->out[0]) ||
        !same_tensor(&rk->in[0], &rk->out[0]) || !same_tensor(&rq->in[1], &rk->in[1]) ||
        !rq->in[1].data || !rq->in[0].data || !rk->in[0].data || !rq->in[2].data != !rk->in[2].data)
        return false;
    /* the CPYs store by the same positions, k as roped, and rows of one width */
    const tnd_tensor *pos = &rq->in[1];
    if (ck->in[1].data != pos->data || cv->in[1].data != pos->data || ck->in[0].data != rk->out[0].data ||
        tnd_tensor_nelem(&ck->in[0]) != tnd_tensor_nelem(&rk->out[0]) || !ck->out[0].data || !cv->out[0].data ||
        !cv->in[0].data || ck->out[0].ne[0] != cv->out[0].ne[0] ||
        tnd_tensor_nelem(&cv->in[0]) != tnd_tensor_nelem(&ck->in[0]))
        return false;
    *f = (tnd_op){.kind = TND_OP_ROPE_KV};
    f->p.rope = rq->p.rope;
    f->in[0] = rq->in[0];
    f->in[1] = *pos;
    f->in[2] = rq->in[2];
    f->in[3] = rk->in[0];
    f->in[4] = rk->in[2];
    f->in[5] = cv->in[0];
    f->out[0] = rq->out[0];
    f->out[1] = rk->out[0];
    f->out[2] = ck->out[0];
    f->out[3] = cv->out[0];
    return true;
}

void tnd_op_moe_glu_split(const tnd_op *f, tnd_op part[3]) {
    for (int i = 0; i < 2; i++) { /* gate, then up */
        tnd_op *m = &part[i];
        *m = (tnd_op){.kind = TND_OP_MATMUL_ID};
        m->p.mmid = f->p.mmid;
        m->in[0] = f->in[i ? 3 : 0];
        m->in[1] = f->in[1];
        m->in[2] = f->in[2];
        m->out[0] = f->out[i];
    }
    tnd_op *a = &part[2]; /* in place over the whole of G, as the recipe's */
    *a = (tnd_op){.kind = TND_OP_SILU_MUL};
    for (int i = 0; i < 2; i++)
        a->in[i] = (tnd_tensor){.data = f->out[i].data, .type = TND_TYPE_F32,
                                .ne = {tnd_tensor_nelem(&f->out[i]), 1, 1, 1}};
    a->out[0] = a->in[0];
}

bool tnd_tensors_overlap(const tnd_tensor *s, const tnd_tensor *t) {
    const uintptr_t a = (uintptr_t)s->data, b = (uintptr_t)t->data;
    return a < b + tnd_tensor_nbytes(t) && b < a + tnd_tensor_nbytes(s);
}

bool tnd_op_moe_glu_fuse(const tnd_op part[3], tnd_op *f) {
    const tnd_op *g = &part[0], *u = &part[1], *a = &part[2];
    if (g->kind != TND_OP_MATMUL_ID || u->kind != TND_OP_MATMUL_ID || a->kind != TND_OP_SILU_MUL) return false;
    if (!same_tensor(&g->in[1], &u->in[1]) || !same_tensor(&g->in[2], &u->in[2]) ||
        g->p.mmid.skip != u->p.mmid.skip || g->p.mmid.ids_host != u->p.mmid.ids_host || !g->in[0].data ||
        !u->in[0].data || memcmp(g->in[0].ne, u->in[0].ne, sizeof g->in[0].ne) != 0 || !g->in[1].data ||
        !g->in[2].data)
        return false;
    /* G and U: a row per (token, slot) pair each, and the SILU_MUL exactly over them, in place */
    const tnd_tensor *G = &g->out[0], *U = &u->out[0];
    const int64_t n = tnd_tensor_nelem(G);
    if (!G->data || !U->data || G->type != TND_TYPE_F32 || U->type != TND_TYPE_F32 ||
        memcmp(G->ne, U->ne, sizeof G->ne) != 0 || n != g->in[0].ne[1] * tnd_tensor_nelem(&g->in[2]) ||
        a->in[0].data != G->data || a->out[0].data != G->data || a->in[1].data != U->data ||
        tnd_tensor_nelem(&a->in[0]) != n || tnd_tensor_nelem(&a->in[1]) != n || tnd_tensor_nelem(&a->out[0]) != n ||
        a->in[0].type != TND_TYPE_F32 || a->in[1].type != TND_TYPE_F32 || a->out[0].type != TND_TYPE_F32)
        return false;
    /* one op reads x and the ids while it writes G and U: the three ops read
     * nothing the ones before them wrote but G and U */
    const tnd_tensor *rd[2] = {&g->in[1], &g->in[2]};
    bool clash = tnd_tensors_overlap(G, U);
    for (int i = 0; i < 2; i++) clash = clash || tnd_tensors_overlap(G, rd[i]) || tnd_tensors_overlap(U, rd[i]);
    if (clash)
        return false;
    *f = (tnd_op){.kind = TND_OP_MOE_GLU};
    f->p.mmid = g->p.mmid;
    f->in[0] = g->in[0];
    f->in[1] = g->in[1];
    f->in[2] = g->in[2];
    f->in[3] = u->in[0];
    f->out[0] = *G;
    f->out[1] = *U;
    return true;
}

void tnd_op_moe_ffn_split(const tnd_op *f, tnd_op part[2]) {
    part[0] = *f;
    part[0].kind = TND_OP_MOE_GLU;
    part[0].in[4] = part[0].out[2] = (tnd_tensor){0};
    tnd_op *d = &part[1];
    *d = (tnd_op){.kind = TND_OP_MATMUL_ID};
    d->p.mmid = f->p.mmid;
    d->in[0] = f->in[4];
    d->in[1] = f->out[0];
    d->in[2] = f->in[2];
    d->out[0] = f->out[2];
}

bool tnd_op_moe_ffn_fuse(const tnd_op part[2], tnd_op *f) {
    const tnd_op *g = &part[0], *d = &part[1];
    if (g->kind != TND_OP_MOE_GLU || d->kind != TND_OP_MATMUL_ID) return false;
    const tnd_tensor *G = &g->out[0], *W = &d->in[0], *Y = &d->out[0];
    if (!same_tensor(&d->in[1], G) || !same_tensor(&d->in[2], &g->in[2]) || d->p.mmid.skip != g->p.mmid.skip ||
        d->p.mmid.ids_host != g->p.mmid.ids_host || !W->data || !Y->data || Y->type != TND_TYPE_F32 ||
        W->ne[0] != g->in[0].ne[1] || G->ne[0] != W->ne[0] || G->ne[1] != g->in[2].ne[0] ||
        G->ne[2] != g->in[2].ne[1] || W->ne[2] != g->in[0].ne[2] || Y->ne[0] != W->ne[1] ||
        Y->ne[1] != G->ne[1] || Y->ne[2] != G->ne[2])
        return false;
    /* Y is written while x, the ids, G and U are read or written */
    const tnd_tensor *other[4] = {&g->in[1], &g->in[2], G, &g->out[1]};
    for (int i = 0; i < 4; i++)
        if (tnd_tensors_overlap(Y, other[i])) return false;
    *f = *g;
    f->kind = TND_OP_MOE_FFN;
    f->in[4] = *W;
    f->out[2] = *Y;
    return true;
}

void tnd_op_sum_norm_split(const tnd_op *f, tnd_op part[2]) {
    tnd_op *s = &part[0], *n = &part[1];
    *s = (tnd_op){.kind = TND_OP_MOE_SUM};
    s->in[0] = f->in[2];
    s->in[1] = f->in[3];
    s->out[0] = f->out[2];
    *n = (tnd_op){.kind = TND_OP_RMS_NORM};
    n->p.norm = f->p.norm;
    n->in[0] = f->in[0];
    n->in[1] = f->in[1];
    n->in[2] = f->out[2];
    n->out[0] = f->out[0];
    n->out[1] = f->out[1];
}

bool tnd_op_sum_norm_fuse(const tnd_op part[2], tnd_op *f) {
    const tnd_op *s = &part[0], *n = &part[1];
    if (s->kind != TND_OP_MOE_SUM || n->kind != TND_OP_RMS_NORM) return false;
    const tnd_tensor *o = &s->out[0], *x = &n->in[0];
    if (!o->data || !x->data || !n->out[0].data || !same_tensor(&n->in[2], o) || !same_tensor(&n->out[1], x) ||
        tnd_tensor_nelem(o) != tnd_tensor_nelem(x))
        return false;
    /* the sum, x and h are written while y and the weights are read, and
     * the sum while x and h are */
    const tnd_tensor *other[4] = {&s->in[0], &s->in[1], x, &n->out[0]};
    for (int i = 0; i < 4; i++)
        if (tnd_tensors_overlap(o, other[i]) || (i < 2 && (tnd_tensors_overlap(x, other[i]) ||
                                                           tnd_tensors_overlap(&n->out[0], other[i]))))
            return false;
    *f = (tnd_op){.kind = TND_OP_MOE_SUM_NORM};
    f->p.norm = n->p.norm;
    f->in[0] = *x;
    f->in[1] = n->in[1];
    f->in[2] = s->in[0];
    f->in[3] = s->in[1];
    f->out[0] = n->out[0];
    f->out[1] = n->out[1];
    f->out[2] = *o;
    return true;
}

void tnd_op_route_pair_split(const tnd_op *f, tnd_op part[2]) {
    for (int i = 0; i < 2; i++) {
        tnd_op *r = &part[i];
        *r = (tnd_op){.kind = TND_OP_MOE_ROUTE};
        r->p.route = f->p.route;
        r->in[0] = f->in[i];
        r->out[0] = f->out[2 * i];
        r->out[1] = f->out[2 * i + 1];
    }
}

bool tnd_op_route_pair_fuse(const tnd_op part[2], tnd_op *f) {
    const tnd_op *a = &part[0], *b = &part[1];
    if (a->kind != TND_OP_MOE_ROUTE || b->kind != TND_OP_MOE_ROUTE ||
        memcmp(&a->p.route, &b->p.route, sizeof a->p.route) != 0)
        return false;
    for (int i = 0; i < 2; i++)
        if (!a->out[i].data || !b->out[i].data || a->out[i].type != b->out[i].type ||
            memcmp(a->out[i].ne, b->out[i].ne, sizeof a->out[i].ne) != 0)
            return false;
    if (!a->in[0].data || !b->in[0].data || a->in[0].type != b->in[0].type ||
        memcmp(a->in[0].ne, b->in[0].ne, sizeof a->in[0].ne) != 0)
        return false;
    /* the four outputs are written while both logits are read */
    const tnd_tensor *t[6] = {&a->in[0], &b->in[0], &a->out[0], &a->out[1], &b->out[0], &b->out[1]};
    for (int i = 2; i < 6; i++)
        for (int j = 0; j < 6; j++)
            if (j != i && tnd_tensors_overlap(t[i], t[j])) return false;
    *f = (tnd_op){.kind = TND_OP_MOE_ROUTE_PAIR};
    f->p.route = a->p.route;
    f->in[0] = a->in[0];
    f->in[1] = b->in[0];
    f->out[0] = a->out[0];
    f->out[1] = a->out[1];
    f->out[2] = b->out[0];
    f->out[3] = b->out[1];
    return true;
}

void tnd_backend_free(tnd_backend *b) {
    if (b && b->iface && b->iface->free) b->iface->free(b);
}

const char *tnd_backend_name(const tnd_backend *b) { return b->iface->name; }
void tnd_backend_mem_info(tnd_backend *b, tnd_mem_info *out) { b->iface->mem_info(b, out); }
tnd_status tnd_backend_buf_alloc(tnd_backend *b, size_t size, void **out) { return b->iface->buf_alloc(b, size, out); }
void tnd_backend_buf_free(tnd_backend *b, void *ptr) { b->iface->buf_free(b, ptr); }

/* Fault injection (tests): every host_alloc fails while set. Atomic: a test
 * may set it while another thread allocates. */
static _Atomic bool pin_fault;

void tnd_backend_set_pin_fault(bool on) { pin_fault = on; }

tnd_status tnd_backend_host_alloc(tnd_backend *b, size_t size, void **host, void **dev) {
    if (!b->iface->host_alloc)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend has no pinned host memory", b->iface->name);
    if (pin_fault)
        return tnd_fail(TND_ERR_NOMEM, "%s: pinning %.1f MiB refused (injected fault)", b->iface->name,
                        size / 1048576.0);
    return b->iface->host_alloc(b, size, host, dev);
}

void tnd_backend_host_free(tnd_backend *b, void *host) {
    if (b->iface->host_free) b->iface->host_free(b, host);
}

static _Atomic bool register_fault;

void tnd_backend_set_register_fault(bool on) { register_fault = on; }

tnd_status tnd_backend_host_register(tnd_backend *b, void *p, size_t size) {
    if (!b->iface->host_register)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend cannot pin memory in place", b->iface->name);
    if (pin_fault || register_fault)
        return tnd_fail(TND_ERR_NOMEM, "%s: pinning %.1f MiB in place refused (injected fault)", b->iface->name,
                        size / 1048576.0);
    return b->iface->host_register(b, p, size);
}

bool tnd_backend_host_registered(tnd_backend *b, const void *p, size_t size) {
    return b->iface->host_registered && b->iface->host_registered(b, p, size);
}

void tnd_backend_host_unregister(tnd_backend *b, void *p) {
    if (b->iface->host_unregister) b->iface->host_unregister(b, p);
}

tnd_status tnd_backend_stream_new(tnd_backend *b, tnd_stream **out) { return b->iface->stream_new(b, out); }

void tnd_backend_stream_free(tnd_backend *b, tnd_stream *s) {
    if (s) b->iface->stream_free(b, s);
}

tnd_status tnd_backend_stream_sync(tnd_backend *b, tnd_stream *s) {
    b->cnt.host_syncs++;
    return b->iface->stream_sync(b, s);
}
tnd_status tnd_backend_event_new(tnd_backend *b, tnd_event **out) { return b->iface->event_new(b, out); }

void tnd_backend_event_free(tnd_backend *b, tnd_event *e) {
    if (e) b->iface->event_free(b, e);
}

tnd_status tnd_backend_event_record(tnd_backend *b, tnd_event *e, tnd_stream *s) {
    return b->iface->event_record(b, e, s);
}

tnd_status tnd_backend_stream_wait(tnd_backend *b, tnd_stream *s, tnd_event *e) {
    return b->iface->stream_wait(b, s, e);
}

tnd_status tnd_backend_event_sync(tnd_backend *b, tnd_event *e) {
    b->cnt.host_syncs++;
    return b->iface->event_sync(b, e);
}

tnd_status tnd_backend_event_done(tnd_backend *b, tnd_event *e, bool *done) {
    if (!b->iface->event_done)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend cannot query events", b->iface->name);
    return b->iface->event_done(b, e, done);
}

tnd_status tnd_backend_ping(tnd_backend *b, tnd_stream *s, double *secs) {
    if (!b->iface->ping) return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend has no ping", b->iface->name);
    b->cnt.host_syncs++;
    return b->iface->ping(b, s, secs);
}

tnd_status tnd_backend_event_elapsed(tnd_backend *b, tnd_event *start, tnd_event *end, float *ms) {
    if (!b->iface->event_elapsed)
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend does not time events", b->iface->name);
    return b->iface->event_elapsed(b, start, end, ms);
}

tnd_status tnd_backend_copy_h2d(tnd_backend *b, void *dst_dev, const void *src_host, size_t n, tnd_stream *s) {
    return b->iface->copy_h2d(b, dst_dev, src_host, n, s);
}

tnd_status tnd_backend_copy_d2h(tnd_backend *b, void *dst_host, const void *src_dev, size_t n, tnd_stream *s) {
    return b->iface->copy_d2h(b, dst_host, src_dev, n, s);
}

tnd_status tnd_backend_copy_d2d(tnd_backend *b, void *dst_dev, const void *src_dev, size_t n, tnd_stream *s) {
    return b->iface->copy_d2d(b, dst_dev, src_dev, n, s);
}

tnd_status tnd_backend_memset(tnd_backend *b, void *dst_dev, int v, size_t n, tnd_stream *s) {
    if (!b->iface->memset) return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend has no memset", b->iface->name);
    return b->iface->memset(b, dst_dev, v, n, s);
}

tnd_status tnd_backend_copy_mapped(tnd_backend *b, void *dst, const void *src, size_t n, tnd_stream *s) {
    if (!b->iface->graph_defer) b->cnt.launches++;
    return b->iface->copy_mapped ? b->iface->copy_mapped(b, dst, src, n, s) : b->iface->copy_d2d(b, dst, src, n, s);
}

tnd_status tnd_backend_op_supported(tnd_backend *b, const tnd_op *op) {
    if (b->iface->op_supported) return b->iface->op_supported(b, op);
    if (op->kind == TND_OP_MATMUL_PAIR || op->kind == TND_OP_ROPE_KV || op->kind == TND_OP_MOE_SUM_NORM ||
        op->kind == TND_OP_MOE_ROUTE_PAIR) /* the optional ones */
        return tnd_fail(TND_ERR_UNSUPPORTED, "the %s backend runs no %s", b->iface->name, tnd_op_name(op->kind));
    return TND_OK;
}

tnd_status tnd_backend_op_run(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    b->cnt.ops++;
    if (!b->iface->graph_defer) b->cnt.launches++; /* a backend that cannot collect launches each op */
    return b->iface->op_run(b, op, s);
}

tnd_status tnd_backend_graph_defer(tnd_backend *b, tnd_stream *s, bool on) {
    return b->iface->graph_defer ? b->iface->graph_defer(b, s, on) : TND_OK;
}

tnd_status tnd_backend_graph_flush(tnd_backend *b, tnd_stream *s) {
    return b->iface->graph_flush ? b->iface->graph_flush(b, s) : TND_OK;
}

tnd_backend_counters tnd_backend_counters_get(const tnd_backend *b) {
    tnd_backend_counters z;
    memset(&z, 0, sizeof z);
    return b ? b->cnt : z;
}

tnd_status tnd_backend_reserve(tnd_backend *b, const tnd_op *op, tnd_stream *s) {
    return b->iface->reserve ? b->iface->reserve(b, op, s) : TND_OK;
}

int64_t tnd_tensor_nelem(const tnd_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < TND_MAX_DIMS; i++) n *= t->ne[i] > 0 ? t->ne[i] : 1;
    return n;
}

size_t tnd_tensor_nbytes(const tnd_tensor *t) {
    for (int i = 0; i < TND_MAX_DIMS; i++)
        if (t->ne[i] < 0) return 0;
    size_t row = tnd_row_size(t->type, t->ne[0]);
    if (row == 0 && t->ne[0] != 0) return 0;
    uint64_t n = row;
    for (int i = 1; i < TND_MAX_DIMS; i++)
        if (!tnd_mul_ok(n, (uint64_t)(t->ne[i] > 0 ? t->ne[i] : 1), &n)) return 0;
    return (size_t)n;
}

#ifndef TND_HAVE_CUDA
int tnd_cuda_device_count(void) { return 0; }

const char *tnd_cuda_build_archs(void) { return ""; }

tnd_status tnd_cuda_device_get(int dev, tnd_cuda_device_info *out) {
    (void)dev;
    (void)out;
    return tnd_fail(TND_ERR_UNSUPPORTED, "this tandem was built without CUDA");
}

tnd_status tnd_backend_cuda_new(const tnd_cuda_params *p, tnd_backend **out) {
    (void)p;
    (void)out;
    return tnd_fail(TND_ERR_UNSUPPORTED, "this tandem was built without CUDA");
}

void *tnd_cuda_stream_handle(tnd_stream *s) {
    (void)s;
    return NULL;
}
#endif

tnd_status tnd_backend_weight_prepare(tnd_backend *b, const tnd_tensor *w, tnd_stream *s) {
    return b->iface->weight_prepare ? b->iface->weight_prepare(b, w, s) : TND_OK;
}

static int64_t ne_or_1(const tnd_tensor *t, int i) { return t->ne[i] > 0 ? t->ne[i] : 1; }

tnd_status tnd_op_check_positions(const tnd_op *op, const char *who) {
    const tnd_tensor *a = &op->in[0], *o = &op->out[0];
    if (op->kind == TND_OP_ATTN) {
        const tnd_tensor *k = &op->in[1], *v = &op->in[2];
        if (op->p.attn.slot_rows < 0 || (op->p.attn.slot_rows > 0 && !op->in[3].data))
            return tnd_fail(TND_ERR_ARG, "%s attn: slots need positions in memory", who);
        const int64_t nt = ne_or_1(a, 2), rows = ne_or_1(k, 1);
        if (ne_or_1(v, 1) < rows) return tnd_fail(TND_ERR_ARG, "%s attn: V has fewer rows than K", who);
        if (!op->in[3].data) {
            if (op->p.attn.pos0 < 0 || op->p.attn.pos0 + nt > rows)
                return tnd_fail(TND_ERR_LIMIT, "%s attn: positions past the cache", who);
            return TND_OK;
        }
        if (op->in[3].type != TND_TYPE_I32 || tnd_tensor_nelem(&op->in[3]) != nt)
            return tnd_fail(TND_ERR_ARG, "%s attn: pos must be i32 with one entry per token", who);
        const int32_t sr = op->p.attn.slot_rows;
        if (sr > 0) {
            if (rows % sr) return tnd_fail(TND_ERR_ARG, "%s attn: %lld cache rows are not slots of %d", who,
                                           (long long)rows, sr);
            if (op->p.attn.kv_cap < 1 || op->p.attn.kv_cap > sr)
                return tnd_fail(TND_ERR_LIMIT, "%s attn: kv_cap %d past a slot's %d rows", who, op->p.attn.kv_cap, sr);
        } else if (op->p.attn.kv_cap < nt || op->p.attn.kv_cap > rows) {
            return tnd_fail(TND_ERR_LIMIT, "%s attn: kv_cap %d past the cache", who, op->p.attn.kv_cap);
        }
    } else if (op->kind == TND_OP_CPY && op->in[1].data) {
        if (a->type != TND_TYPE_F32 || o->type != TND_TYPE_F16 || o->ne[0] < 1 || tnd_tensor_nelem(a) % o->ne[0] ||
            op->in[1].type != TND_TYPE_I32 || tnd_tensor_nelem(&op->in[1]) != tnd_tensor_nelem(a) / o->ne[0])
            return tnd_fail(TND_ERR_ARG, "%s cpy by position: f32 rows of out's width to f16, an i32 position a row",
                            who);
    }
    return TND_OK;
}
