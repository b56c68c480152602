/* SimGPU (src/sim/): every op through the sim against the CPU backend, bit
 * for bit, on small odd shapes; stream/event semantics under random jitter
 * (a two-stream pipeline that is only right if waits really wait); pointer
 * checks; asynchronous failures; the budget; the timing model (copy engine,
 * events, waits) and the profile loader (files, errors, drift of the hw profile files
 * from the built-ins).
 *
 * Prints one line per check and "N passed, N failed"; exit 1 on failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "quant/quant.h"
#include "sim/hw.h"
#include "sim/sim.h"
#include "util.h"

static float *rnd_f32(int64_t n, float lo, float hi) {
    float *p = tc_xmalloc(sizeof(float) * (size_t)n);
    tc_fill_unif(p, (size_t)n, lo, hi);
    return p;
}
static uint16_t *rnd_f16(int64_t n) {
    uint16_t *p = tc_xmalloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = tnd_fp32_to_fp16(tc_unif(-1, 1));
    return p;
}
/* Output buffer, poisoned with all bits set. */
static void *poisoned(size_t n) {
    void *p = tc_xmalloc(n);
    memset(p, 0xff, n);
    return p;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = tnd_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Random blocks of type t with sane scales (no NaN/Inf patterns). */
static void *make_weights(tnd_type t, int64_t n_in, int64_t rows) {
    size_t n = tnd_row_size(t, n_in) * (size_t)rows;
    uint8_t *w = tc_xmalloc(n);
    if (t == TND_TYPE_F32 || t == TND_TYPE_F16) {
        for (int64_t i = 0; i < n_in * rows; i++) {
            float v = tc_unif(-1, 1);
            if (t == TND_TYPE_F32) memcpy(w + 4 * i, &v, 4);
            else put_f16(w + 2 * i, v);
        }
        return w;
    }
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)(tc_xorshift() >> 24);
    const tnd_type_traits *tr = tnd_type_traits_get(t);
    for (size_t b = 0; b < n / tr->type_size; b++) {
        uint8_t *p = w + b * tr->type_size;
        float d = tc_unif(0.002f, 0.02f), m = tc_unif(0.0005f, 0.01f);
        switch (t) {
        case TND_TYPE_Q4_0: case TND_TYPE_Q8_0: put_f16(p, d); break;
        case TND_TYPE_Q4_K: put_f16(p, d * 0.1f); put_f16(p + 2, m * 0.1f); break;
        case TND_TYPE_Q6_K: put_f16(p + 208, d * 0.05f); break;
        default: fprintf(stderr, "make_weights: type %s not handled\n", tnd_type_name(t)); exit(1);
        }
    }
    return w;
}

/* A tensor of type t over data, shape (n0, n1, n2, 1), other fields zero. */
static tnd_tensor tens(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    return (tnd_tensor){.data = data, .type = t, .ne = {n0, n1, n2, 1}};
}

/* ---- ops: sim vs CPU, bit for bit ------------------------------------------------------ */

static tnd_backend *CPU, *SIM;
static tnd_stream *S;

/* Uploads op's tensors (host pointers) to the sim (a pointer used by two
 * slots, as an in-place op's in and out, maps to one buffer), runs op on
 * the CPU backend over the host copies and on the sim, and compares every
 * output byte for byte. */
static void both(const tnd_op *op, const char *what) {
    enum { NS = TND_OP_MAX_IN + TND_OP_MAX_OUT };
    tnd_op dop = *op;
    void *hp[NS], *dp[NS];
    size_t nb[NS];
    int n = 0;
    for (int j = 0; j < NS; j++) {
        tnd_tensor *t = j < TND_OP_MAX_IN ? &dop.in[j] : &dop.out[j - TND_OP_MAX_IN];
        if (!t->data) continue;
        int k = 0;
        while (k < n && hp[k] != t->data) k++;
        if (k == n) {
            hp[n] = t->data;
            nb[n] = tnd_tensor_nbytes(t);
            CHECK_ST(SIM->iface->buf_alloc(SIM, nb[n], &dp[n]));
            CHECK_ST(SIM->iface->copy_h2d(SIM, dp[n], hp[n], nb[n], S));
            n++;
        }
        t->data = dp[k];
    }
    CHECK_ST(SIM->iface->stream_sync(SIM, S));
    tnd_status st = CPU->iface->op_run(CPU, op, NULL);
    if (st) {
        tc_report(false, "%s: cpu op_run: %s", what, tnd_last_error());
        return;
    }
    st = SIM->iface->op_run(SIM, &dop, S);
    if (st == TND_OK) st = SIM->iface->stream_sync(SIM, S);
    if (st) {
        tc_report(false, "%s: sim op_run: %s", what, tnd_last_error());
        return;
    }
    bool ok = true;
    size_t bad_at = 0;
    for (int j = 0; j < TND_OP_MAX_OUT && ok; j++) {
        const tnd_tensor *t = &op->out[j];
        if (!t->data) continue;
        size_t m = tnd_tensor_nbytes(t);
        uint8_t *got = tc_xmalloc(m);
        CHECK_ST(SIM->iface->copy_d2h(SIM, got, dop.out[j].data, m, S));
        CHECK_ST(SIM->iface->stream_sync(SIM, S));
        for (size_t i = 0; i < m && ok; i++)
            if (got[i] != ((const uint8_t *)t->data)[i]) ok = false, bad_at = i;
        free(got);
    }
    for (int k = 0; k < n; k++) SIM->iface->buf_free(SIM, dp[k]);
    if (ok) tc_report(true, "%s: sim == cpu bit for bit", what);
    else tc_report(false, "%s: sim differs from cpu at byte %zu", what, bad_at);
}

static void test_matmul(tnd_type t, int64_t n_in, int64_t n_out, int64_t n_tok) {
    void *w = make_weights(t, n_in, n_out);
    float *x = rnd_f32(n_in * n_tok, -1, 1);
    float *y = poisoned(sizeof(float) * (size_t)(n_out * n_tok));
    tnd_op op = {.kind = TND_OP_MATMUL};
    op.in[0] = tens(w, t, n_in, n_out, 1);
    op.in[1] = tens(x, TND_TYPE_F32, n_in, n_tok, 1);
    op.out[0] = tens(y, TND_TYPE_F32, n_out, n_tok, 1);
    char what[96];
    snprintf(what, sizeof what, "matmul %s %lldx%lld n_tok %lld", tnd_type_name(t), (long long)n_in, (long long)n_out,
             (long long)n_tok);
    both(&op, what);
    free(w), free(x), free(y);
}

static void test_matmul_id(tnd_type t, int64_t n_in, int64_t n_out, int64_t n_exp, int n_used, int64_t n_tok, bool per_slot) {
    void *w = make_weights(t, n_in, n_out * n_exp);
    int64_t n_x = per_slot ? n_used : 1;
    float *x = rnd_f32(n_in * n_x * n_tok, -1, 1);
    int32_t *ids = tc_xmalloc(sizeof(int32_t) * (size_t)(n_used * n_tok));
    for (int64_t tk = 0; tk < n_tok; tk++)
        for (int u = 0; u < n_used; u++) {
            int32_t e;
            bool dup;
            do { /* distinct per token, as routing gives */
                e = (int32_t)(tc_xorshift() % (uint64_t)n_exp);
                dup = false;
                for (int v = 0; v < u; v++) dup |= ids[tk * n_used + v] == e;
            } while (dup);
            ids[tk * n_used + u] = e;
        }
    float *y = poisoned(sizeof(float) * (size_t)(n_out * n_used * n_tok));
    tnd_op op = {.kind = TND_OP_MATMUL_ID};
    op.in[0] = tens(w, t, n_in, n_out, n_exp);
    op.in[1] = tens(x, TND_TYPE_F32, n_in, n_x, n_tok);
    op.in[2] = tens(ids, TND_TYPE_I32, n_used, n_tok, 1);
    op.out[0] = tens(y, TND_TYPE_F32, n_out, n_used, n_tok);
    char what[128];
    snprintf(what, sizeof what, "matmul_id %s %lldx%lld x%lld experts, %d used, n_tok %lld, x %s", tnd_type_name(t),
             (long long)n_in, (long long)n_out, (long long)n_exp, n_used, (long long)n_tok, per_slot ? "per slot" : "shared");
    both(&op, what);
    free(w), free(x), free(ids), free(y);
}

static void test_ops(void) {
    test_matmul(TND_TYPE_Q4_0, 96, 37, 1);
    test_matmul(TND_TYPE_Q4_0, 96, 37, 17);
    test_matmul(TND_TYPE_Q4_K, 512, 19, 3);
    test_matmul(TND_TYPE_Q8_0, 160, 23, 5);
    test_matmul(TND_TYPE_Q6_K, 256, 11, 2);
    test_matmul(TND_TYPE_F16, 67, 29, 3);
    test_matmul(TND_TYPE_F32, 45, 13, 4);
    test_matmul_id(TND_TYPE_Q4_0, 64, 19, 5, 2, 3, false);
    test_matmul_id(TND_TYPE_Q8_0, 96, 13, 7, 3, 4, true);
    test_matmul_id(TND_TYPE_Q4_K, 256, 9, 4, 2, 1, false);

    { /* get_rows */
        int64_t n = 256, rows = 7, k = 5;
        void *tab = make_weights(TND_TYPE_Q4_K, n, rows);
        int32_t ids[5] = {6, 0, 3, 3, 1};
        float *out = poisoned(sizeof(float) * (size_t)(n * k));
        tnd_op op = {.kind = TND_OP_GET_ROWS};
        op.in[0] = tens(tab, TND_TYPE_Q4_K, n, rows, 1);
        op.in[1] = tens(ids, TND_TYPE_I32, k, 1, 1);
        op.out[0] = tens(out, TND_TYPE_F32, n, k, 1);
        both(&op, "get_rows Q4_K 256 x 7, 5 ids");
        free(tab), free(out);
    }
    for (int with_w = 0; with_w < 2; with_w++) { /* rms_norm */
        int64_t n = 37, rows = 5;
        float *x = rnd_f32(n * rows, -2, 2), *w = rnd_f32(n, 0.5f, 1.5f);
        float *y = poisoned(sizeof(float) * (size_t)(n * rows));
        tnd_op op = {.kind = TND_OP_RMS_NORM};
        op.p.norm.eps = 1e-5f;
        op.in[0] = tens(x, TND_TYPE_F32, n, rows, 1);
        op.in[1] = tens(with_w ? w : NULL, TND_TYPE_F32, n, 1, 1);
        op.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
        both(&op, with_w ? "rms_norm 37 x 5 with weight" : "rms_norm 37 x 5 without weight");
        free(x), free(w), free(y);
    }
    for (int mode = 0; mode < 2; mode++) { /* rope, in place */
        int hd = 12, nh = 3, nt = 5;
        float *x = rnd_f32(hd * nh * nt, -1, 1);
        int32_t pos[5];
        for (int i = 0; i < nt; i++) pos[i] = 7 + 3 * i;
        tnd_op op = {.kind = TND_OP_ROPE};
        op.p.rope.n_rot = 8;
        op.p.rope.mode = mode ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
        op.p.rope.freq_base = 10000.0f;
        op.p.rope.freq_scale = 1.0f;
        op.in[0] = tens(x, TND_TYPE_F32, hd, nh, nt);
        op.in[1] = tens(pos, TND_TYPE_I32, nt, 1, 1);
        op.out[0] = op.in[0];
        both(&op, mode ? "rope neox 12x3x5 n_rot 8, in place" : "rope normal 12x3x5 n_rot 8, in place");
        free(x);
    }
    for (int with_w = 0; with_w < 2; with_w++) { /* rms_norm with the fused residual add, the sum into x */
        int64_t n = 37, rows = 5;
        float *x = rnd_f32(n * rows, -2, 2), *r = rnd_f32(n * rows, -2, 2), *w = rnd_f32(n, 0.5f, 1.5f);
        float *y = poisoned(sizeof(float) * (size_t)(n * rows));
        tnd_op op = {.kind = TND_OP_RMS_NORM};
        op.p.norm.eps = 1e-5f;
        op.in[0] = tens(x, TND_TYPE_F32, n, rows, 1);
        op.in[1] = tens(with_w ? w : NULL, TND_TYPE_F32, n, 1, 1);
        op.in[2] = tens(r, TND_TYPE_F32, n, rows, 1);
        op.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
        op.out[1] = op.in[0];
        both(&op, with_w ? "add+rms_norm 37 x 5 with weight" : "add+rms_norm 37 x 5 without weight");
        free(x), free(r), free(w), free(y);
    }
    for (int mode = 0; mode < 2; mode++) { /* rope with the fused per-head norm, in place */
        int hd = 16, nh = 3, nt = 5;
        float *x = rnd_f32(hd * nh * nt, -1, 1), *w = rnd_f32(hd, 0.5f, 1.5f);
        int32_t pos[5];
        for (int i = 0; i < nt; i++) pos[i] = 7 + 3 * i;
        tnd_op op = {.kind = TND_OP_ROPE};
        op.p.rope.n_rot = 16;
        op.p.rope.mode = mode ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
        op.p.rope.freq_base = 10000.0f;
        op.p.rope.freq_scale = 1.0f;
        op.p.rope.eps = 1e-6f;
        op.in[0] = tens(x, TND_TYPE_F32, hd, nh, nt);
        op.in[1] = tens(pos, TND_TYPE_I32, nt, 1, 1);
        op.in[2] = tens(w, TND_TYPE_F32, hd, 1, 1);
        op.out[0] = op.in[0];
        both(&op, mode ? "rope+norm neox 16x3x5, in place" : "rope+norm normal 16x3x5, in place");
        free(x), free(w);
    }
    for (int variant = 0; variant < 2; variant++) { /* attention, pos0 > 0 */
        int hd = 16, nh = 6, nkv = 2, nt = 3, pos0 = 5, n_ctx = 11;
        float *q = rnd_f32(hd * nh * nt, -1, 1);
        uint16_t *k = rnd_f16(nkv * hd * n_ctx), *v = rnd_f16(nkv * hd * n_ctx);
        float *o = poisoned(sizeof(float) * (size_t)(hd * nh * nt));
        tnd_op op = {.kind = TND_OP_ATTN};
        op.p.attn.n_head = nh;
        op.p.attn.n_head_kv = nkv;
        op.p.attn.head_dim = hd;
        op.p.attn.pos0 = pos0;
        op.p.attn.scale = 0.25f;
        op.p.attn.window = variant ? 4 : 0;
        op.p.attn.softcap = variant ? 30.0f : 0;
        op.in[0] = tens(q, TND_TYPE_F32, hd, nh, nt);
        op.in[1] = tens(k, TND_TYPE_F16, nkv * hd, n_ctx, 1);
        op.in[2] = tens(v, TND_TYPE_F16, nkv * hd, n_ctx, 1);
        op.out[0] = tens(o, TND_TYPE_F32, hd, nh, nt);
        both(&op, variant ? "attn GQA 6/2 heads pos0 5 n_tok 3, window 4, softcap" : "attn GQA 6/2 heads pos0 5 n_tok 3");
        free(q), free(k), free(v), free(o);
    }
    { /* softmax, silu_mul, gelu_mul, add (full and bias), scale */
        int64_t n = 13, rows = 3, m = n * rows;
        float *a = rnd_f32(m, -3, 3), *b = rnd_f32(m, -3, 3), *bias = rnd_f32(n, -1, 1);
        float *y = poisoned(sizeof(float) * (size_t)m);
        tnd_op op = {.kind = TND_OP_SOFTMAX};
        op.p.scale.s = 0.7f;
        op.in[0] = tens(a, TND_TYPE_F32, n, rows, 1);
        op.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
        both(&op, "softmax 13 x 3, scale 0.7");
        tnd_op_kind bin[3] = {TND_OP_SILU_MUL, TND_OP_GELU_MUL, TND_OP_ADD};
        for (int i = 0; i < 3; i++) {
            memset(y, 0xff, sizeof(float) * (size_t)m);
            tnd_op o2 = {.kind = bin[i]};
            o2.in[0] = tens(a, TND_TYPE_F32, n, rows, 1);
            o2.in[1] = tens(b, TND_TYPE_F32, n, rows, 1);
            o2.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
            char what[64];
            snprintf(what, sizeof what, "%s 13 x 3", tnd_op_name(bin[i]));
            both(&o2, what);
        }
        tnd_op o3 = {.kind = TND_OP_ADD};
        o3.in[0] = tens(a, TND_TYPE_F32, n, rows, 1);
        o3.in[1] = tens(bias, TND_TYPE_F32, n, 1, 1);
        o3.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
        both(&o3, "add 13 x 3 + bias row");
        tnd_op o4 = {.kind = TND_OP_SCALE};
        o4.p.scale.s = -1.75f;
        o4.in[0] = tens(a, TND_TYPE_F32, n, rows, 1);
        o4.out[0] = tens(y, TND_TYPE_F32, n, rows, 1);
        both(&o4, "scale 13 x 3");
        free(a), free(b), free(bias), free(y);
    }
    { /* cpy f32->f16, f16->f32, f32->f32 */
        int64_t n = 41;
        float *a = rnd_f32(n, -100, 100);
        uint16_t *h = rnd_f16(n);
        void *o = poisoned(4 * (size_t)n);
        tnd_type from[3] = {TND_TYPE_F32, TND_TYPE_F16, TND_TYPE_F32}, to[3] = {TND_TYPE_F16, TND_TYPE_F32, TND_TYPE_F32};
        for (int i = 0; i < 3; i++) {
            memset(o, 0xff, 4 * (size_t)n);
            tnd_op op = {.kind = TND_OP_CPY};
            op.in[0] = tens(from[i] == TND_TYPE_F32 ? (void *)a : (void *)h, from[i], n, 1, 1);
            op.out[0] = tens(o, to[i], n, 1, 1);
            char what[64];
            snprintf(what, sizeof what, "cpy %s -> %s, 41", tnd_type_name(from[i]), tnd_type_name(to[i]));
            both(&op, what);
        }
        free(a), free(h), free(o);
    }
    for (int mode = 0; mode < 2; mode++) { /* moe_route */
        int ne = 9, nu = 3, nt = 4;
        float *lg = rnd_f32(ne * nt, -2, 2);
        float *w = poisoned(sizeof(float) * (size_t)(nu * nt));
        int32_t *ids = poisoned(sizeof(int32_t) * (size_t)(nu * nt));
        tnd_op op = {.kind = TND_OP_MOE_ROUTE};
        op.p.route.n_used = nu;
        op.p.route.mode = mode ? TND_ROUTE_TOPK_SOFTMAX : TND_ROUTE_SOFTMAX_TOPK;
        op.p.route.norm = true;
        op.in[0] = tens(lg, TND_TYPE_F32, ne, nt, 1);
        op.out[0] = tens(w, TND_TYPE_F32, nu, nt, 1);
        op.out[1] = tens(ids, TND_TYPE_I32, nu, nt, 1);
        both(&op, mode ? "moe_route topk_softmax 9 experts, 3 used" : "moe_route softmax_topk norm 9 experts, 3 used");
        free(lg), free(w), free(ids);
    }
    { /* moe_sum */
        int64_t n = 13, nu = 2, nt = 3;
        float *y = rnd_f32(n * nu * nt, -1, 1), *w = rnd_f32(nu * nt, 0, 1);
        float *o = poisoned(sizeof(float) * (size_t)(n * nt));
        tnd_op op = {.kind = TND_OP_MOE_SUM};
        op.in[0] = tens(y, TND_TYPE_F32, n, nu, nt);
        op.in[1] = tens(w, TND_TYPE_F32, nu, nt, 1);
        op.out[0] = tens(o, TND_TYPE_F32, n, nt, 1);
        both(&op, "moe_sum 13 x 2 used x 3 tokens");
        free(y), free(w), free(o);
    }
}

/* ---- checks of what is queued, and asynchronous failures --------------------------------- */

static void test_validation(void) {
    float *hx = rnd_f32(64, -1, 1);
    void *d = NULL;
    CHECK_ST(SIM->iface->buf_alloc(SIM, 64 * sizeof(float), &d));
    tnd_op op = {.kind = TND_OP_SCALE};
    op.p.scale.s = 2;
    op.in[0] = tens(hx, TND_TYPE_F32, 64, 1, 1); /* a host pointer: a GPU would fault */
    op.out[0] = tens(d, TND_TYPE_F32, 64, 1, 1);
    tnd_status st = SIM->iface->op_run(SIM, &op, S);
    tc_report(st == TND_ERR_ARG && strstr(tnd_last_error(), "in[0]"), "op reading host memory refused (%s: %s)",
           tnd_status_name(st), tnd_last_error());
    op.in[0] = tens((float *)d + 1, TND_TYPE_F32, 64, 1, 1); /* one float past the end */
    st = SIM->iface->op_run(SIM, &op, S);
    tc_report(st == TND_ERR_ARG, "op reading past its buffer refused (%s)", tnd_last_error());
    op.in[0] = tens(d, TND_TYPE_F32, 32, 1, 1); /* 32 in, 64 out */
    st = SIM->iface->op_run(SIM, &op, S);
    tc_report(st == TND_ERR_ARG, "op with mismatched shapes refused (%s)", tnd_last_error());
    st = SIM->iface->copy_h2d(SIM, hx, hx + 32, 16, S);
    tc_report(st == TND_ERR_ARG, "h2d into host memory refused (%s)", tnd_last_error());
    st = SIM->iface->copy_d2h(SIM, d, hx, 16, S);
    tc_report(st == TND_ERR_ARG, "d2h from host memory refused (%s)", tnd_last_error());
    st = SIM->iface->copy_h2d(SIM, d, d, 16, S);
    tc_report(st == TND_ERR_ARG, "h2d from device memory refused (%s)", tnd_last_error());
    CHECK_ST(SIM->iface->stream_sync(SIM, S));

    /* a bad id is only seen when the op runs: reported by stream_sync, once */
    int64_t n = 32;
    void *tab = make_weights(TND_TYPE_Q8_0, n, 4), *dt = NULL, *di = NULL, *dout = NULL;
    int32_t ids[2] = {1, 9};
    CHECK_ST(SIM->iface->buf_alloc(SIM, tnd_row_size(TND_TYPE_Q8_0, n) * 4, &dt));
    CHECK_ST(SIM->iface->buf_alloc(SIM, sizeof ids, &di));
    CHECK_ST(SIM->iface->buf_alloc(SIM, sizeof(float) * 2 * (size_t)n, &dout));
    CHECK_ST(SIM->iface->copy_h2d(SIM, dt, tab, tnd_row_size(TND_TYPE_Q8_0, n) * 4, S));
    CHECK_ST(SIM->iface->copy_h2d(SIM, di, ids, sizeof ids, S));
    tnd_op g = {.kind = TND_OP_GET_ROWS};
    g.in[0] = tens(dt, TND_TYPE_Q8_0, n, 4, 1);
    g.in[1] = tens(di, TND_TYPE_I32, 2, 1, 1);
    g.out[0] = tens(dout, TND_TYPE_F32, n, 2, 1);
    st = SIM->iface->op_run(SIM, &g, S);
    tc_report(st == TND_OK, "get_rows with a bad id is queued (checked when it runs)");
    st = SIM->iface->stream_sync(SIM, S);
    tc_report(st == TND_ERR_BACKEND && strstr(tnd_last_error(), "out of range"), "stream_sync reports the failure (%s: %s)",
           tnd_status_name(st), tnd_last_error());
    st = SIM->iface->stream_sync(SIM, S);
    tc_report(st == TND_OK, "the failure is reported once");
    SIM->iface->buf_free(SIM, dt);
    SIM->iface->buf_free(SIM, di);
    SIM->iface->buf_free(SIM, dout);
    SIM->iface->buf_free(SIM, d);
    free(tab);
    free(hx);
}

/* ---- streams and events under jitter ------------------------------------------------------ */

/* A two-slot pipeline across two streams, as the executor runs one: A waits
 * until B has consumed the slot, copies new input in and scales it, records
 * "ready"; B waits for "ready", scales again into its own buffer, records
 * "free", copies the result out. The host syncs only at the end. Each
 * iteration's data differs, so a wait that does not wait shows as wrong
 * values once jitter reorders the threads. */
static void test_pipeline(int iters, int max_n, bool pinned) {
    tnd_stream *A = NULL, *Bs = NULL;
    CHECK_ST(SIM->iface->stream_new(SIM, &A));
    CHECK_ST(SIM->iface->stream_new(SIM, &Bs));
    tnd_event *ready[2], *freed[2];
    void *din[2], *dmid[2], *dout[2];
    size_t cap = sizeof(float) * (size_t)max_n;
    for (int i = 0; i < 2; i++) {
        CHECK_ST(SIM->iface->event_new(SIM, &ready[i]));
        CHECK_ST(SIM->iface->event_new(SIM, &freed[i]));
        CHECK_ST(SIM->iface->buf_alloc(SIM, cap, &din[i]));
        CHECK_ST(SIM->iface->buf_alloc(SIM, cap, &dmid[i]));
        CHECK_ST(SIM->iface->buf_alloc(SIM, cap, &dout[i]));
    }
    /* host side: one region for all iterations' inputs and outputs */
    size_t host_bytes = 2 * cap * (size_t)iters;
    float *host = NULL;
    void *hdev = NULL;
    if (pinned) CHECK_ST(SIM->iface->host_alloc(SIM, host_bytes, (void **)&host, &hdev));
    else host = tc_xmalloc(host_bytes);
    int *ns = tc_xmalloc(sizeof(int) * (size_t)iters);
    for (int it = 0; it < iters; it++) {
        int sl = it & 1, n = 1 + (int)(tc_xorshift() % (uint64_t)max_n);
        ns[it] = n;
        float *src = host + (size_t)it * 2 * (size_t)max_n, *dst = src + max_n;
        for (int i = 0; i < n; i++) src[i] = (float)(it * 7 + i % 97), dst[i] = -1;
        /* stream A: the slot must have been consumed by B (a never-recorded
         * event passes at once: the first two iterations) */
        CHECK_ST(SIM->iface->stream_wait(SIM, A, freed[sl]));
        CHECK_ST(SIM->iface->copy_h2d(SIM, din[sl], src, sizeof(float) * (size_t)n, A));
        tnd_op op = {.kind = TND_OP_SCALE};
        op.p.scale.s = 2;
        op.in[0] = tens(din[sl], TND_TYPE_F32, n, 1, 1);
        op.out[0] = tens(dmid[sl], TND_TYPE_F32, n, 1, 1);
        CHECK_ST(SIM->iface->op_run(SIM, &op, A));
        CHECK_ST(SIM->iface->event_record(SIM, ready[sl], A));
        /* stream B */
        CHECK_ST(SIM->iface->stream_wait(SIM, Bs, ready[sl]));
        op.p.scale.s = 3;
        op.in[0] = tens(dmid[sl], TND_TYPE_F32, n, 1, 1);
        op.out[0] = tens(dout[sl], TND_TYPE_F32, n, 1, 1);
        CHECK_ST(SIM->iface->op_run(SIM, &op, Bs));
        CHECK_ST(SIM->iface->event_record(SIM, freed[sl], Bs));
        CHECK_ST(SIM->iface->copy_d2h(SIM, dst, dout[sl], sizeof(float) * (size_t)n, Bs));
    }
    tnd_event *last = NULL;
    CHECK_ST(SIM->iface->event_new(SIM, &last));
    CHECK_ST(SIM->iface->event_record(SIM, last, Bs));
    CHECK_ST(SIM->iface->event_sync(SIM, last)); /* waits for all of B's queue */
    int bad = -1;
    for (int it = 0; it < iters && bad < 0; it++) {
        const float *dst = host + (size_t)it * 2 * (size_t)max_n + max_n;
        for (int i = 0; i < ns[it] && bad < 0; i++)
            if (dst[i] != 6.0f * (float)(it * 7 + i % 97)) bad = it;
    }
    tc_report(bad < 0, "pipeline over two streams, %d iterations, %s host memory, jitter: %s", iters,
           pinned ? "pinned" : "pageable", bad < 0 ? "all values right" : "wrong values");
    if (bad >= 0) printf("     first wrong iteration %d\n", bad);
    CHECK_ST(SIM->iface->stream_sync(SIM, A));
    CHECK_ST(SIM->iface->stream_sync(SIM, Bs));
    SIM->iface->event_free(SIM, last);
    for (int i = 0; i < 2; i++) {
        SIM->iface->event_free(SIM, ready[i]);
        SIM->iface->event_free(SIM, freed[i]);
        SIM->iface->buf_free(SIM, din[i]);
        SIM->iface->buf_free(SIM, dmid[i]);
        SIM->iface->buf_free(SIM, dout[i]);
    }
    if (pinned) SIM->iface->host_free(SIM, host);
    else free(host);
    free(ns);
    SIM->iface->stream_free(SIM, A);
    SIM->iface->stream_free(SIM, Bs);
}

/* stream_sync drains a long queue; an event freed while a wait on it is
 * still queued; a stream freed with work queued finishes it first. */
static void test_stream_misc(void) {
    enum { N = 200, LEN = 257 };
    tnd_stream *A = NULL, *Bs = NULL;
    CHECK_ST(SIM->iface->stream_new(SIM, &A));
    CHECK_ST(SIM->iface->stream_new(SIM, &Bs));
    float *src = rnd_f32((int64_t)N * LEN, -1, 1), *dst = poisoned(sizeof(float) * N * LEN);
    void *d = NULL;
    CHECK_ST(SIM->iface->buf_alloc(SIM, sizeof(float) * N * LEN, &d));
    for (int i = 0; i < N; i++) {
        size_t off = (size_t)i * LEN;
        CHECK_ST(SIM->iface->copy_h2d(SIM, (float *)d + off, src + off, sizeof(float) * LEN, A));
    }
    for (int i = 0; i < N; i++) {
        size_t off = (size_t)i * LEN;
        CHECK_ST(SIM->iface->copy_d2h(SIM, dst + off, (float *)d + off, sizeof(float) * LEN, A));
    }
    CHECK_ST(SIM->iface->stream_sync(SIM, A));
    tc_report(memcmp(src, dst, sizeof(float) * N * LEN) == 0, "stream_sync drains %d queued copies", 2 * N);

    /* event_done: a new event counts as passed; one recorded behind a
     * queue is reported passed once it is, stays so, and is passed after
     * event_sync (jitter keeps the queue running while it is polled) */
    tnd_event *q = NULL;
    bool done = false, again = true;
    CHECK_ST(SIM->iface->event_new(SIM, &q));
    CHECK_ST(tnd_backend_event_done(SIM, q, &done));
    tc_report(done, "event_done: an event never recorded counts as passed");
    for (int i = 0; i < N; i++)
        CHECK_ST(SIM->iface->copy_h2d(SIM, (float *)d + (size_t)i * LEN, src + (size_t)i * LEN, sizeof(float) * LEN, A));
    CHECK_ST(SIM->iface->event_record(SIM, q, A));
    long polls = 0, before = -1;
    do {
        CHECK_ST(tnd_backend_event_done(SIM, q, &done));
        if (!done) before = polls;
    } while (!done && ++polls < 100000000L);
    for (int i = 0; i < 100; i++) {
        bool d2 = false;
        CHECK_ST(tnd_backend_event_done(SIM, q, &d2));
        again &= d2;
    }
    tc_report(done && again, "event_done: passed after %ld polls (%s), and stays passed", polls,
              before >= 0 ? "not passed before" : "passed at the first");
    CHECK_ST(SIM->iface->event_sync(SIM, q));
    CHECK_ST(tnd_backend_event_done(SIM, q, &done));
    tc_report(done, "event_done: passed after event_sync");
    SIM->iface->event_free(SIM, q);
    CHECK_ST(CPU->iface->event_new(CPU, &q));
    CHECK_ST(tnd_backend_event_done(CPU, q, &done));
    tc_report(done, "event_done: the CPU backend's events are always passed");
    CPU->iface->event_free(CPU, q);

    /* B waits on an event that is freed right after the wait is queued */
    tnd_event *e = NULL;
    CHECK_ST(SIM->iface->event_new(SIM, &e));
    memset(dst, 0xff, sizeof(float) * N * LEN);
    for (int i = 0; i < 20; i++)
        CHECK_ST(SIM->iface->memset(SIM, (float *)d + (size_t)i * LEN, 0, sizeof(float) * LEN, A));
    CHECK_ST(SIM->iface->event_record(SIM, e, A));
    CHECK_ST(SIM->iface->stream_wait(SIM, Bs, e));
    SIM->iface->event_free(SIM, e);
    CHECK_ST(SIM->iface->copy_d2h(SIM, dst, d, sizeof(float) * 20 * LEN, Bs));
    CHECK_ST(SIM->iface->stream_sync(SIM, Bs));
    bool zero = true;
    for (int i = 0; i < 20 * LEN; i++) zero &= dst[i] == 0.0f;
    tc_report(zero, "a wait survives its event being freed, and orders B after A's memsets");

    /* copy_mapped between device memory and mapped pinned memory, both ways */
    void *hp = NULL, *hd = NULL;
    CHECK_ST(SIM->iface->host_alloc(SIM, sizeof(float) * LEN, &hp, &hd));
    memcpy(hp, src, sizeof(float) * LEN);
    CHECK_ST(SIM->iface->copy_mapped(SIM, (float *)d + LEN, hd, sizeof(float) * LEN, Bs));
    CHECK_ST(SIM->iface->copy_d2d(SIM, d, (float *)d + LEN, sizeof(float) * LEN, Bs));
    memset(dst, 0, sizeof(float) * LEN);
    CHECK_ST(SIM->iface->copy_d2h(SIM, dst, d, sizeof(float) * LEN, Bs));
    CHECK_ST(SIM->iface->stream_sync(SIM, Bs));
    tc_report(memcmp(dst, src, sizeof(float) * LEN) == 0, "copy_mapped from pinned memory, then d2d, then d2h");

    /* freeing a stream with queued work: the work finishes first */
    memset(dst, 0, sizeof(float) * N * LEN);
    CHECK_ST(SIM->iface->copy_h2d(SIM, d, src, sizeof(float) * N * LEN, A));
    CHECK_ST(SIM->iface->copy_d2h(SIM, dst, d, sizeof(float) * N * LEN, A));
    SIM->iface->stream_free(SIM, A);
    tc_report(memcmp(src, dst, sizeof(float) * N * LEN) == 0, "stream_free drains its queue first");
    SIM->iface->host_free(SIM, hp);
    SIM->iface->buf_free(SIM, d);
    SIM->iface->stream_free(SIM, Bs);
    free(src), free(dst);
}

/* ---- budget -------------------------------------------------------------------------------- */

static void test_budget(void) {
    tnd_backend *b = NULL;
    tnd_sim_params p = {.budget = 1 << 20, .n_threads = 1};
    CHECK_ST(tnd_backend_sim_new(&p, &b));
    void *x = NULL, *y = NULL, *h = NULL, *hd = NULL;
    CHECK_ST(b->iface->buf_alloc(b, 600000, &x));
    void *before = y;
    tnd_status st = b->iface->buf_alloc(b, 500000, &y);
    tnd_mem_info mi;
    b->iface->mem_info(b, &mi);
    tc_report(st == TND_ERR_NOMEM && y == before && strstr(tnd_last_error(), "500000") && strstr(tnd_last_error(), "1048576") &&
               strstr(tnd_last_error(), "600000"),
           "allocation beyond the budget: NOMEM naming request, budget, in use (%s)", tnd_last_error());
    tc_report(mi.used == 600000 && mi.peak == 600000 && mi.budget == 1 << 20, "refusal changes nothing (used %llu, peak %llu)",
           (unsigned long long)mi.used, (unsigned long long)mi.peak);
    tc_report((uintptr_t)x % 256 == 0, "device buffers are 256-byte aligned");
    CHECK_ST(b->iface->host_alloc(b, 4 << 20, &h, &hd));
    b->iface->mem_info(b, &mi);
    tc_report(mi.used == 600000 && h == hd, "pinned host memory is not counted and is mapped at the same address");
    b->iface->buf_free(b, x);
    b->iface->mem_info(b, &mi);
    tc_report(mi.used == 0 && mi.peak == 600000, "freeing returns the memory (used %llu, peak %llu)", (unsigned long long)mi.used,
           (unsigned long long)mi.peak);
    st = b->iface->buf_alloc(b, 1 << 20, &x);
    b->iface->mem_info(b, &mi);
    tc_report(st == TND_OK && mi.used == 1 << 20 && mi.peak == 1 << 20, "the whole budget can be allocated");
    st = b->iface->buf_alloc(b, 1, &y);
    tc_report(st == TND_ERR_NOMEM, "one byte more is refused");
    b->iface->buf_free(b, x);
    b->iface->host_free(b, h);
    /* the caller's memory registered in place: counted, and asked about */
    const size_t pg = 4096, rn = 4 * pg;
    void *r = tnd_aligned_alloc(rn);
    CHECK(r != NULL, "alloc");
    const bool before_reg = tnd_backend_host_registered(b, r, rn);
    CHECK_ST(tnd_backend_host_register(b, r, rn));
    const bool once = tnd_backend_host_registered(b, r, rn), other = tnd_backend_host_registered(b, r, rn - pg);
    CHECK_ST(tnd_backend_host_register(b, r, rn));
    tnd_backend_host_unregister(b, r);
    const bool still = tnd_backend_host_registered(b, r, rn);
    tnd_backend_host_unregister(b, r);
    tc_report(!before_reg && once && !other && still && !tnd_backend_host_registered(b, r, rn),
              "host_registered: no, yes, not another size, yes while counted twice and unregistered once, then no");
    tnd_aligned_free(r);
    tnd_backend_free(b);
}

/* ---- timing model ---------------------------------------------------------------------------- */

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void test_timing(void) {
    tnd_hw hw;
    CHECK_ST(tnd_hw_load("h200-device", &hw));
    tnd_backend *b = NULL;
    tnd_sim_params p = {.budget = 0, .n_threads = 1, .hw = &hw};
    CHECK_ST(tnd_backend_sim_new(&p, &b));
    const size_t big = 64u << 20; /* 64 MiB: a GiB would only cost the test time */
    void *d1 = NULL, *d2 = NULL, *h = NULL, *hd = NULL;
    CHECK_ST(b->iface->buf_alloc(b, big, &d1));
    CHECK_ST(b->iface->buf_alloc(b, big, &d2));
    CHECK_ST(b->iface->host_alloc(b, big, &h, &hd));
    memset(h, 1, big);
    tnd_stream *A = NULL, *Bs = NULL;
    CHECK_ST(b->iface->stream_new(b, &A));
    CHECK_ST(b->iface->stream_new(b, &Bs));
    tnd_event *e0 = NULL, *e1 = NULL;
    CHECK_ST(b->iface->event_new(b, &e0));
    CHECK_ST(b->iface->event_new(b, &e1));

    /* one pinned copy: 64 MiB at the device's measured 55 GB/s */
    double want = (double)big / 55e9;
    CHECK_ST(b->iface->event_record(b, e0, A));
    CHECK_ST(b->iface->copy_h2d(b, d1, h, big, A));
    CHECK_ST(b->iface->event_record(b, e1, A));
    double t1 = tnd_sim_stream_clock(b, A);
    tc_report(near(t1, want, 0.02), "pinned h2d of 64 MiB takes %.3f ms virtual (64 MiB / 55 GB/s = %.3f ms)", t1 * 1e3, want * 1e3);
    CHECK_ST(b->iface->stream_sync(b, A));
    float ms = 0;
    CHECK_ST(b->iface->event_elapsed(b, e0, e1, &ms));
    tc_report(near(ms, t1 * 1e3, 1e-4), "event_elapsed reports the virtual time (%.3f ms)", ms);

    /* two copies on two streams share the copy engine */
    double a0 = tnd_sim_stream_clock(b, A);
    CHECK_ST(b->iface->copy_h2d(b, d1, h, big, A));
    CHECK_ST(b->iface->copy_h2d(b, d2, h, big, Bs));
    double ta = tnd_sim_stream_clock(b, A), tb = tnd_sim_stream_clock(b, Bs);
    tc_report(near(ta - a0, t1, 1e-9) && near(tb - a0, 2 * t1, 1e-9),
           "two h2d copies on two streams serialize on the copy engine (A ends at +%.3f ms, B at +%.3f ms)",
           (ta - a0) * 1e3, (tb - a0) * 1e3);

    /* an SM copy over mapped memory is not behind the copy engine (into d2
     * once B's copy there is done: streams do race, as TSan would tell) */
    CHECK_ST(b->iface->stream_sync(b, Bs));
    double c0 = tnd_sim_stream_clock(b, Bs);
    tnd_stream *Cs = NULL;
    CHECK_ST(b->iface->stream_new(b, &Cs));
    CHECK_ST(b->iface->copy_mapped(b, d2, hd, 4096, Cs));
    double tc = tnd_sim_stream_clock(b, Cs);
    tc_report(tc < 1e-4 && tc < c0, "copy_mapped of 4 KiB is not queued behind the copy engine (%.1f us)", tc * 1e6);

    /* an op on B that waits on A starts after A's clock */
    int64_t n_in = 4096, n_out = 4096;
    size_t wbytes = tnd_row_size(TND_TYPE_Q4_K, n_in) * (size_t)n_out;
    void *dw = NULL, *dx = NULL, *dy = NULL;
    CHECK_ST(b->iface->buf_alloc(b, wbytes, &dw));
    CHECK_ST(b->iface->buf_alloc(b, sizeof(float) * (size_t)n_in, &dx));
    CHECK_ST(b->iface->buf_alloc(b, sizeof(float) * (size_t)n_out, &dy));
    CHECK_ST(b->iface->memset(b, dw, 0, wbytes, Bs));
    CHECK_ST(b->iface->memset(b, dx, 0, sizeof(float) * (size_t)n_in, Bs));
    CHECK_ST(b->iface->copy_h2d(b, d1, h, big, A));
    CHECK_ST(b->iface->event_record(b, e1, A));
    double ta2 = tnd_sim_stream_clock(b, A);
    CHECK_ST(b->iface->stream_wait(b, Bs, e1));
    tnd_op op = {.kind = TND_OP_MATMUL};
    op.in[0] = tens(dw, TND_TYPE_Q4_K, n_in, n_out, 1);
    op.in[1] = tens(dx, TND_TYPE_F32, n_in, 1, 1);
    op.out[0] = tens(dy, TND_TYPE_F32, n_out, 1, 1);
    CHECK_ST(b->iface->op_run(b, &op, Bs));
    double tb2 = tnd_sim_stream_clock(b, Bs);
    /* independent figure: Q4_K is 144 bytes per 256 weights, read at 4.2 TB/s, plus a 5.5 us launch */
    double op_want = ((double)n_in * n_out * 144 / 256 + 4.0 * (n_in + n_out)) / 4.2e12 + 5.5e-6;
    tc_report(tb2 > ta2 && near(tb2 - ta2, op_want, 0.01),
           "matmul on B waiting on A's event starts at A's clock %.3f ms and takes %.2f us (want %.2f)", ta2 * 1e3,
           (tb2 - ta2) * 1e6, op_want * 1e6);
    CHECK_ST(b->iface->stream_sync(b, Bs));

    /* pageable copies are slower */
    void *ph = tc_xmalloc(8u << 20);
    memset(ph, 0, 8u << 20);
    double p0 = tnd_sim_stream_clock(b, Cs);
    double p0e = p0 > ta2 ? p0 : ta2; /* the engine is busy until A's last copy ends */
    CHECK_ST(b->iface->copy_h2d(b, d2, ph, 8u << 20, Cs));
    double pt = tnd_sim_stream_clock(b, Cs) - p0e;
    tc_report(near(pt, (8u << 20) / 6e9, 0.02), "pageable h2d of 8 MiB: %.3f ms (8 MiB / 6 GB/s = %.3f ms)", pt * 1e3,
           (8u << 20) / 6e9 * 1e3);
    CHECK_ST(b->iface->stream_sync(b, Cs));
    free(ph);

    b->iface->event_free(b, e0);
    b->iface->event_free(b, e1);
    tnd_backend_free(b); /* frees streams, buffers and pinned memory */

    /* the cost model on its own */
    tnd_op mm = {.kind = TND_OP_MATMUL};
    mm.in[0] = tens(NULL, TND_TYPE_Q4_K, 4096, 4096, 1);
    mm.in[1] = tens(NULL, TND_TYPE_F32, 4096, 512, 1);
    mm.out[0] = tens(NULL, TND_TYPE_F32, 4096, 512, 1);
    double g = tnd_hw_op_time_gpu(&hw, &mm), c = tnd_hw_op_time_cpu(&hw, &mm);
    double flops = 2.0 * 4096 * 4096 * 512;
    tc_report(near(g, flops / 690e12 + 5.5e-6, 0.01) && near(c, flops / 0.5e12 + 3e-6, 0.01),
           "prefill matmul is compute-bound: GPU %.1f us, CPU %.1f ms", g * 1e6, c * 1e3);
    int32_t same[8] = {3, 3, 3, 3, 3, 3, 3, 3}, spread[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    tnd_op mi = {.kind = TND_OP_MATMUL_ID};
    mi.in[0] = tens(NULL, TND_TYPE_Q8_0, 2048, 768, 64);
    mi.in[1] = tens(NULL, TND_TYPE_F32, 2048, 1, 4);
    mi.in[2] = tens(same, TND_TYPE_I32, 2, 4, 1);
    mi.out[0] = tens(NULL, TND_TYPE_F32, 768, 2, 4);
    double t_same = tnd_hw_op_time_gpu(&hw, &mi);
    mi.in[2].data = spread;
    double t_spread = tnd_hw_op_time_gpu(&hw, &mi);
    mi.in[2].data = NULL;
    double t_unknown = tnd_hw_op_time_gpu(&hw, &mi);
    double slice = 2048.0 / 32 * 34 * 768;
    tc_report(near(t_spread - t_same, 7 * slice / 4.2e12, 0.01) && t_unknown == t_spread,
           "matmul_id reads only the experts used (1 expert %.2f us, 8 experts %.2f us, ids unknown %.2f us)", t_same * 1e6,
           t_spread * 1e6, t_unknown * 1e6);
    tc_report(near(tnd_hw_copy_time(&hw, 1u << 30, true), (double)(1u << 30) / 55e9, 0.001),
           "copy time of 1 GiB pinned: %.2f ms", tnd_hw_copy_time(&hw, 1u << 30, true) * 1e3);
}

/* ---- profiles --------------------------------------------------------------------------------- */

static const char *write_tmp(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/test_sim_%d.hw", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_profiles(void) {
    const char *names[] = {"rtx3060-laptop", "rtx4090-desktop", "h200-device"};
    for (int i = 0; i < 3; i++) {
        tnd_hw hw;
        tnd_status st = tnd_hw_load(names[i], &hw);
        tc_report(st == TND_OK && strcmp(hw.name, names[i]) == 0 && hw.vram > 0 && hw.hbm_bw > hw.pcie_bw && hw.cpu_threads > 0 &&
                   strstr(tnd_hw_names(), names[i]),
               "built-in profile %s", names[i]);
    }
    tnd_hw hw;
    const char *path = write_tmp("# a test machine\n"
                                 "name = test-box\n"
                                 "gpu = \"RTX #7\"   # quoted, with a hash\n"
                                 "cpu = some cpu\n"
                                 "vram = 12 GiB\n"
                                 "hbm_bw = 504 GB/s\n"
                                 "gpu_flops = 80 TFLOPS\n"
                                 "pcie_bw = 25e9\n"
                                 "pcie_pageable_bw = 8 GB/s\n"
                                 "pcie_lat = 10 us\n"
                                 "launch = 0.004 ms\n"
                                 "cpu_bw = 60 GB/s\n"
                                 "cpu_flops = 500 GFLOPS\n"
                                 "cpu_op = 2e-6\n"
                                 "cpu_threads = 12\n");
    tnd_status st = tnd_hw_load(path, &hw);
    tc_report(st == TND_OK && strcmp(hw.name, "test-box") == 0 && strcmp(hw.gpu, "RTX #7") == 0 && hw.vram == 12ull << 30 &&
               hw.hbm_bw == 504e9 && hw.gpu_flops == 80e12 && hw.pcie_bw == 25e9 && near(hw.pcie_lat, 10e-6, 1e-12) &&
               near(hw.launch, 4e-6, 1e-12) && hw.cpu_flops == 500e9 && hw.cpu_threads == 12,
           "profile file with units parses (%s)", st ? tnd_last_error() : "ok");
    path = write_tmp("base = h200-device\npcie_bw = 30 GB/s\n");
    st = tnd_hw_load(path, &hw);
    tnd_hw ref;
    CHECK_ST(tnd_hw_load("h200-device", &ref));
    tc_report(st == TND_OK && hw.pcie_bw == 30e9 && hw.hbm_bw == ref.hbm_bw && hw.vram == ref.vram && strcmp(hw.name, "h200-device") != 0,
           "profile file based on a built-in (named %s)", hw.name);
    path = write_tmp("name = x\n\nhbm_bw = fast\n");
    st = tnd_hw_load(path, &hw);
    char want[96];
    snprintf(want, sizeof want, "%s:3:", path);
    tc_report(st == TND_ERR_ARG && strstr(tnd_last_error(), want), "bad value is an error naming file and line (%s)", tnd_last_error());
    path = write_tmp("base = rtx3060-laptop\nvram = 6 GB/s\n");
    st = tnd_hw_load(path, &hw);
    tc_report(st == TND_ERR_ARG && strstr(tnd_last_error(), ":2:"), "unit of the wrong kind is an error (%s)", tnd_last_error());
    path = write_tmp("base = rtx3060-laptop\nhbm_bandwidth = 3 GB/s\n");
    st = tnd_hw_load(path, &hw);
    tc_report(st == TND_ERR_ARG && strstr(tnd_last_error(), "unknown key") && strstr(tnd_last_error(), ":2:"),
           "unknown key is an error (%s)", tnd_last_error());
    path = write_tmp("name = x\nvram = 1 GiB\n");
    st = tnd_hw_load(path, &hw);
    tc_report(st == TND_ERR_ARG && strstr(tnd_last_error(), "missing key"), "missing keys are an error (%s)", tnd_last_error());
    unlink(path);
    st = tnd_hw_load("/nonexistent/dir/x.hw", &hw);
    tc_report(st == TND_ERR_IO && strstr(tnd_last_error(), "h200-device"), "missing file: IO error listing the built-ins (%s)",
           tnd_last_error());

    /* hw/NAME.hw, where present, must equal the built-in of that name */
    const char *src = getenv("TND_SRC");
    for (int i = 0; src && i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/hw/%s.hw", src, names[i]);
        if (access(p, R_OK) != 0) continue;
        CHECK_ST(tnd_hw_load(names[i], &ref));
        st = tnd_hw_load(p, &hw);
        bool same = st == TND_OK && strcmp(hw.name, ref.name) == 0 && strcmp(hw.gpu, ref.gpu) == 0 &&
                    strcmp(hw.cpu, ref.cpu) == 0 && hw.vram == ref.vram && near(hw.hbm_bw, ref.hbm_bw, 1e-12) &&
                    near(hw.gpu_flops, ref.gpu_flops, 1e-12) && near(hw.pcie_bw, ref.pcie_bw, 1e-12) &&
                    near(hw.pcie_pageable_bw, ref.pcie_pageable_bw, 1e-12) && near(hw.pcie_lat, ref.pcie_lat, 1e-12) &&
                    near(hw.launch, ref.launch, 1e-12) && near(hw.cpu_bw, ref.cpu_bw, 1e-12) &&
                    near(hw.cpu_flops, ref.cpu_flops, 1e-12) && near(hw.cpu_op, ref.cpu_op, 1e-12) &&
                    hw.cpu_threads == ref.cpu_threads;
        tc_report(same, "hw/%s.hw equals the built-in (%s)", names[i], st ? tnd_last_error() : "ok");
    }
}

int main(void) {
    double t0 = tnd_time_s();
    tc_rng = 0x2545f4914f6cdd1dull;
    CHECK_ST(tnd_backend_cpu_new(NULL, 0, &CPU));
    tnd_sim_params p = {.budget = 0, .n_threads = 2, .hw = NULL};
    CHECK_ST(tnd_backend_sim_new(&p, &SIM));
    tc_report(strcmp(SIM->iface->name, "sim") == 0, "backend name is sim");
    CHECK_ST(SIM->iface->stream_new(SIM, &S));
    test_ops();
    test_validation();
    tnd_sim_set_jitter(SIM, 50, 12345);
    test_pipeline(300, 700, true);
    test_pipeline(100, 3000, false);
    test_stream_misc();
    tnd_sim_set_jitter(SIM, 0, 0);
    SIM->iface->stream_free(SIM, S);
    tnd_backend_free(SIM);
    tnd_backend_free(CPU);
    test_budget();
    test_timing();
    test_profiles();
    printf("%.1f s\n", tnd_time_s() - t0);
    return tc_summary();
}
