/* The fused op forms of the forward recipe (backend.h) on the CPU backend,
 * against the unfused pairs they replace, bit for bit: the recipe's
 * reference and greedy-token results must not move.
 *   - ROPE with a per-head norm (in[2]) == RMS_NORM on rows of head_dim,
 *     then ROPE;
 *   - RMS_NORM with a residual (in[2], sum in out[1]) == ADD, then RMS_NORM.
 * Head counts and dims of the model families (64..256, partial rotation),
 * both RoPE modes, one token and many (past the size where the rows split
 * over the pool), in place and out of place, with and without a weight or a
 * norm, each with the vector paths and with them forced scalar.
 * Then the whole recipe (model/forward.c) with TND_FUSE=1 against =0 on
 * synth tiny-qwen3, tiny-qwen3moe and tiny-llama, on the CPU and on
 * SimGPU (all on the GPU, and a random placement): a prompt in chunks, greedy
 * steps, and batched rounds of three sequences, every logit bit for bit;
 * on the simulated GPU that includes the executor's ROPE_KV (a decode
 * step's ropes and K/V stores as one op), which TND_FUSE=0 leaves out.
 * MOE_GLU (an MoE FFN's gate and up expert matmuls and SILU_MUL as one op,
 * the executor's fusion on the CPU and on SimGPU): its three ops fused and
 * split back; the CPU backend's op against the three ops, every byte of G
 * and U, with skipped pairs (negative ids, whose rows SILU_MUL still
 * covers), one token and many, Q8 and f32 activations, rows not a multiple
 * of the grain; and the recipe's MoE logits with the fusion counted.
 * MOE_SUM_NORM and MOE_ROUTE_PAIR (the executor's fusions of an MoE
 * layer's sum with the add + norm after it, and of its two routings, for
 * the GPU): fused and split back, other forms refused, the CPU backend's
 * runs of them (the simulated GPU's) against the two ops, and counted in the
 * recipe's SimGPU runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "config.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "model/model.h"
#include "model_fixture.h"
#include "quant/quant.h"
#include "runtime/runtime.h"
#include "util.h"

static tnd_backend *CPU;

static tnd_tensor tens(void *data, int64_t n0, int64_t n1, int64_t n2) {
    return (tnd_tensor){.data = data, .type = TND_TYPE_F32, .ne = {n0, n1, n2, 1}};
}

static float *rnd(int64_t n, float lo, float hi) {
    float *p = tc_xmalloc(sizeof(float) * (size_t)n);
    tc_fill_unif(p, (size_t)n, lo, hi);
    return p;
}

static float *copy_of(const float *x, int64_t n) {
    float *p = tc_xmalloc(sizeof(float) * (size_t)n);
    memcpy(p, x, sizeof(float) * (size_t)n);
    return p;
}

static void run(const tnd_op *op) { CHECK_ST(CPU->iface->op_run(CPU, op, NULL)); }

/* The first differing element of a and b, or -1. */
static int64_t differs(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return -1;
}

static void check_same(const float *got, const float *want, int64_t n, const char *what) {
    int64_t i = differs(got, want, n);
    if (i < 0) tc_report(true, "%s", what);
    else tc_report(false, "%s: element %lld is %a, unfused %a", what, (long long)i, (double)got[i], (double)want[i]);
}

/* ROPE over {hd, nh, nt} with the norm weight w (NULL: none) fused, against
 * RMS_NORM on rows of hd then ROPE (w NULL: ROPE alone). */
static void test_rope_norm(int nh, int hd, int n_rot, int mode, int nt, bool norm, bool inplace) {
    const int64_t n = (int64_t)hd * nh * nt;
    const float eps = 1e-6f;
    float *x = rnd(n, -3, 3), *w = rnd(hd, 0.2f, 1.8f);
    int32_t *pos = tc_xmalloc(sizeof(int32_t) * (size_t)nt);
    for (int t = 0; t < nt; t++) pos[t] = t == 0 ? 0 : (int32_t)(tc_xorshift() % 40000);
    /* unfused: the recipe's two ops, in place */
    float *ref = copy_of(x, n);
    tnd_op nm = {.kind = TND_OP_RMS_NORM, .p.norm.eps = eps};
    nm.in[0] = tens(ref, hd, (int64_t)nh * nt, 1);
    nm.in[1] = tens(w, hd, 1, 1);
    nm.out[0] = nm.in[0];
    tnd_op rp = {.kind = TND_OP_ROPE};
    rp.p.rope.n_rot = n_rot;
    rp.p.rope.mode = mode;
    rp.p.rope.freq_base = 1e6f;
    rp.p.rope.freq_scale = 1.0f;
    rp.in[0] = tens(ref, hd, nh, nt);
    rp.in[1] = (tnd_tensor){.data = pos, .type = TND_TYPE_I32, .ne = {nt, 1, 1, 1}};
    rp.out[0] = rp.in[0];
    if (norm) run(&nm);
    run(&rp);
    /* fused */
    float *in = copy_of(x, n), *out = inplace ? in : tc_xmalloc(sizeof(float) * (size_t)n);
    if (!inplace) memset(out, 0xff, sizeof(float) * (size_t)n);
    tnd_op f = rp;
    f.in[0] = tens(in, hd, nh, nt);
    f.out[0] = tens(out, hd, nh, nt);
    if (norm) {
        f.in[2] = tens(w, hd, 1, 1);
        f.p.rope.eps = eps;
    }
    run(&f);
    char what[160];
    snprintf(what, sizeof what, "rope%s %s heads=%d head_dim=%d n_rot=%d n_tok=%d%s%s", norm ? "+norm" : "",
             mode == TND_ROPE_NEOX ? "neox" : "normal", nh, hd, n_rot, nt, inplace ? " in place" : "",
             tnd_cpu_ops_scalar ? " (scalar)" : "");
    check_same(out, ref, n, what);
    if (!inplace) CHECK(differs(in, x, n) < 0, "%s: the input was written", what);
    free(x), free(w), free(pos), free(ref), free(in);
    if (!inplace) free(out);
}

/* RMS_NORM of x + o over rows of n (weight or not) with the add fused,
 * against ADD then RMS_NORM. sum_in_x: the sum written back into x (the
 * recipe's form), else to a buffer of its own, x left alone. */
static void test_add_norm(int64_t n, int64_t rows, bool weight, bool sum_in_x) {
    const int64_t m = n * rows;
    const float eps = 1e-5f;
    float *x = rnd(m, -4, 4), *o = rnd(m, -4, 4), *w = rnd(n, 0.2f, 1.8f);
    /* unfused: x += o, then h = norm(x) */
    float *rx = copy_of(x, m), *rh = tc_xmalloc(sizeof(float) * (size_t)m);
    tnd_op add = {.kind = TND_OP_ADD};
    add.in[0] = tens(rx, m, 1, 1);
    add.in[1] = tens(o, m, 1, 1);
    add.out[0] = add.in[0];
    run(&add);
    tnd_op nm = {.kind = TND_OP_RMS_NORM, .p.norm.eps = eps};
    nm.in[0] = tens(rx, n, rows, 1);
    nm.in[1] = tens(weight ? w : NULL, n, 1, 1);
    nm.out[0] = tens(rh, n, rows, 1);
    run(&nm);
    /* fused */
    float *fx = copy_of(x, m), *fs = sum_in_x ? fx : tc_xmalloc(sizeof(float) * (size_t)m);
    float *fh = tc_xmalloc(sizeof(float) * (size_t)m);
    memset(fh, 0xff, sizeof(float) * (size_t)m);
    if (!sum_in_x) memset(fs, 0xff, sizeof(float) * (size_t)m);
    tnd_op f = nm;
    f.in[0] = tens(fx, n, rows, 1);
    f.in[2] = tens(o, n, rows, 1);
    f.out[0] = tens(fh, n, rows, 1);
    f.out[1] = tens(fs, n, rows, 1);
    run(&f);
    char what[160];
    snprintf(what, sizeof what, "add+rms_norm n=%lld rows=%lld%s%s%s", (long long)n, (long long)rows,
             weight ? " weight" : "", sum_in_x ? " sum into x" : " sum apart", tnd_cpu_ops_scalar ? " (scalar)" : "");
    check_same(fh, rh, m, what);
    char what2[200];
    snprintf(what2, sizeof what2, "%s: the sum", what);
    check_same(fs, rx, m, what2);
    if (!sum_in_x) CHECK(differs(fx, x, m) < 0, "%s: x was written", what);
    free(x), free(o), free(w), free(rx), free(rh), free(fx), free(fh);
    if (!sum_in_x) free(fs);
}

/* ROPE_KV's four ops (tnd_op_rope_kv_split) fused back (tnd_op_rope_kv_fuse)
 * give the op again, with and without the norms; ops of another form
 * (a rope not in place, the stored k not the roped one, K and V rows of
 * different widths) do not fuse. */
static void test_rope_kv_form(bool norm) {
    static char buf[8][64];
    tnd_op f = {.kind = TND_OP_ROPE_KV};
    f.in[0] = f.out[0] = tens(buf[0], 4, 2, 1);
    f.in[1] = (tnd_tensor){.data = buf[1], .type = TND_TYPE_I32, .ne = {1, 1, 1, 1}};
    f.in[3] = f.out[1] = tens(buf[3], 4, 1, 1);
    f.in[5] = tens(buf[5], 4, 1, 1);
    if (norm) f.in[2] = tens(buf[2], 4, 1, 1), f.in[4] = tens(buf[4], 4, 1, 1);
    f.out[2] = (tnd_tensor){.data = buf[6], .type = TND_TYPE_F16, .ne = {4, 8, 1, 1}};
    f.out[3] = (tnd_tensor){.data = buf[7], .type = TND_TYPE_F16, .ne = {4, 8, 1, 1}};
    f.p.rope.n_rot = 4, f.p.rope.mode = TND_ROPE_NEOX, f.p.rope.freq_base = 1e4f, f.p.rope.eps = 1e-6f;
    tnd_op part[4], g;
    tnd_op_rope_kv_split(&f, part);
    bool ok = part[0].kind == TND_OP_ROPE && part[1].in[0].data == buf[3] &&
              part[1].in[2].data == (norm ? buf[4] : NULL) && part[2].in[0].data == buf[3] &&
              part[3].in[0].data == buf[5] && part[3].out[0].data == buf[7];
    ok = ok && tnd_op_rope_kv_fuse(part, &g) && g.kind == f.kind && g.p.rope.n_rot == f.p.rope.n_rot &&
         g.p.rope.mode == f.p.rope.mode && g.p.rope.freq_base == f.p.rope.freq_base && g.p.rope.eps == f.p.rope.eps;
    for (int i = 0; i < TND_OP_MAX_IN + TND_OP_MAX_OUT; i++) { /* field by field: no padding compared */
        const tnd_tensor *a = i < TND_OP_MAX_IN ? &g.in[i] : &g.out[i - TND_OP_MAX_IN];
        const tnd_tensor *b = i < TND_OP_MAX_IN ? &f.in[i] : &f.out[i - TND_OP_MAX_IN];
        ok = ok && a->data == b->data && (!a->data || (a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne)));
    }
    tc_report(ok, "rope_kv%s: split into its four ops and fused back", norm ? " with norms" : "");
    tnd_op bad[4];
    memcpy(bad, part, sizeof bad);
    bad[0].out[0].data = buf[2];
    bool refused = !tnd_op_rope_kv_fuse(bad, &g);
    memcpy(bad, part, sizeof bad);
    bad[2].in[0].data = buf[5];
    refused = refused && !tnd_op_rope_kv_fuse(bad, &g);
    memcpy(bad, part, sizeof bad);
    bad[3].out[0].ne[0] = 8, bad[3].out[0].ne[1] = 4;
    refused = refused && !tnd_op_rope_kv_fuse(bad, &g);
    tc_report(refused, "rope_kv%s: ops of another form are not fused", norm ? " with norms" : "");
}

static tnd_tensor tens_t(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    return (tnd_tensor){.data = data, .type = t, .ne = {n0, n1, n2, 1}};
}

/* ---- MOE_SUM_NORM and MOE_ROUTE_PAIR ---------------------------------------------- */

/* Whether two ops name the same tensors (field by field: no padding compared). */
static bool same_op_tensors(const tnd_op *a, const tnd_op *b) {
    bool ok = a->kind == b->kind;
    for (int i = 0; i < TND_OP_MAX_IN + TND_OP_MAX_OUT; i++) {
        const tnd_tensor *s = i < TND_OP_MAX_IN ? &a->in[i] : &a->out[i - TND_OP_MAX_IN];
        const tnd_tensor *t = i < TND_OP_MAX_IN ? &b->in[i] : &b->out[i - TND_OP_MAX_IN];
        ok = ok && s->data == t->data && (!s->data || (s->type == t->type && !memcmp(s->ne, t->ne, sizeof s->ne)));
    }
    return ok;
}

/* The recipe's MOE_SUM then fused-add RMS_NORM (model/forward.c: the sum
 * into A_O, x += A_O, h = norm(x)), and its routing then the predicted
 * one: fused, split back into the same ops, the CPU backend's run of the
 * fused op (the simulated GPU's) equal to the two ops', and other forms
 * refused. */
static void test_two_forms(void) {
    enum { N = 64, K = 4, T = 2, E = 16 };
    static float y[K * N * T], wt[K * T], x[N * T], x2[N * T], w[N], h[N * T], h2[N * T], o[N * T], o2[N * T];
    tc_fill_unif(y, K * N * T, -1, 1);
    tc_fill_unif(wt, K * T, 0, 1);
    tc_fill_unif(x, N * T, -1, 1);
    tc_fill_unif(w, N, 0.5f, 1.5f);
    memcpy(x2, x, sizeof x);
    tnd_op part[2], f, back[2];
    part[0] = (tnd_op){.kind = TND_OP_MOE_SUM};
    part[0].in[0] = tens(y, N, K, T);
    part[0].in[1] = tens(wt, K, T, 1);
    part[0].out[0] = tens(o, N, T, 1);
    part[1] = (tnd_op){.kind = TND_OP_RMS_NORM, .p.norm.eps = 1e-5f};
    part[1].in[0] = part[1].out[1] = tens(x, N, T, 1);
    part[1].in[1] = tens(w, N, 1, 1);
    part[1].in[2] = part[0].out[0];
    part[1].out[0] = tens(h, N, T, 1);
    bool ok = tnd_op_sum_norm_fuse(part, &f) && f.kind == TND_OP_MOE_SUM_NORM && f.p.norm.eps == 1e-5f;
    tnd_op_sum_norm_split(&f, back);
    ok = ok && same_op_tensors(&back[0], &part[0]) && same_op_tensors(&back[1], &part[1]) &&
         back[1].p.norm.eps == part[1].p.norm.eps;
    tc_report(ok, "moe_sum_norm: fused and split back into its two ops");
    /* the fused op on the CPU backend (x2, h2, o2) against the two ops (x, h, o) */
    tnd_op g = f;
    g.in[0] = g.out[1] = tens(x2, N, T, 1), g.out[0] = tens(h2, N, T, 1), g.out[2] = tens(o2, N, T, 1);
    CHECK_ST(CPU->iface->op_run(CPU, &g, NULL));
    for (int i = 0; i < 2; i++) CHECK_ST(CPU->iface->op_run(CPU, &part[i], NULL));
    tc_report(!memcmp(x, x2, sizeof x) && !memcmp(h, h2, sizeof h) && !memcmp(o, o2, sizeof o),
              "moe_sum_norm on the CPU backend: x, h and the sum as its two ops give them");
    tnd_op bad[2];
    memcpy(bad, part, sizeof bad);
    bad[1].in[2].data = y; /* the residual is not the sum */
    bool refused = !tnd_op_sum_norm_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[1].out[1] = tens(x2, N, T, 1); /* the sum of x not written into x */
    refused = refused && !tnd_op_sum_norm_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[0].out[0] = bad[1].in[2] = tens(y + N, N, T, 1); /* the sum over the expert outputs */
    refused = refused && !tnd_op_sum_norm_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[1].out[0] = tens(y, N, T, 1); /* h over the expert outputs */
    refused = refused && !tnd_op_sum_norm_fuse(bad, &f);
    tc_report(refused, "moe_sum_norm: ops of another form are not fused");

    static float l[2 * E * T], rw[4 * K * T];
    static int32_t ri[4 * K * T];
    tc_fill_unif(l, 2 * E * T, -3, 3);
    for (int k = 0; k < 2; k++) {
        part[k] = (tnd_op){.kind = TND_OP_MOE_ROUTE};
        part[k].p.route.n_used = K, part[k].p.route.mode = TND_ROUTE_SOFTMAX_TOPK, part[k].p.route.norm = true;
        part[k].in[0] = tens(l + k * E * T, E, T, 1);
        part[k].out[0] = tens(rw + k * K * T, K, T, 1);
        part[k].out[1] = tens_t(ri + k * K * T, TND_TYPE_I32, K, T, 1);
    }
    ok = tnd_op_route_pair_fuse(part, &f) && f.kind == TND_OP_MOE_ROUTE_PAIR && f.p.route.n_used == K;
    tnd_op_route_pair_split(&f, back);
    ok = ok && same_op_tensors(&back[0], &part[0]) && same_op_tensors(&back[1], &part[1]) &&
         !memcmp(&back[1].p.route, &part[1].p.route, sizeof part[1].p.route);
    tc_report(ok, "moe_route_pair: fused and split back into its two ops");
    g = f;
    for (int k = 0; k < 2; k++) {
        g.out[2 * k] = tens(rw + (2 + k) * K * T, K, T, 1);
        g.out[2 * k + 1] = tens_t(ri + (2 + k) * K * T, TND_TYPE_I32, K, T, 1);
    }
    CHECK_ST(CPU->iface->op_run(CPU, &g, NULL));
    for (int i = 0; i < 2; i++) CHECK_ST(CPU->iface->op_run(CPU, &part[i], NULL));
    tc_report(!memcmp(rw, rw + 2 * K * T, sizeof rw / 2) && !memcmp(ri, ri + 2 * K * T, sizeof ri / 2),
              "moe_route_pair on the CPU backend: both routings as two MOE_ROUTEs give them");
    memcpy(bad, part, sizeof bad);
    bad[1].p.route.norm = false;
    refused = !tnd_op_route_pair_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[1].in[0] = tens(l + E * T, E / 2, 2 * T, 1); /* logits of another shape */
    refused = refused && !tnd_op_route_pair_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[0].out[0] = tens(l + E * T, K, T, 1); /* the first's weights over the second's logits */
    refused = refused && !tnd_op_route_pair_fuse(bad, &f);
    memcpy(bad, part, sizeof bad);
    bad[1].out[0] = tens(rw, K, T, 1); /* both weights in one place */
    refused = refused && !tnd_op_route_pair_fuse(bad, &f);
    tc_report(refused, "moe_route_pair: ops of another form are not fused");
}

/* ---- MOE_GLU ------------------------------------------------------------------------- */

/* The recipe's three ops (model/forward.c moe_ffn): gate and up MATMUL_IDs
 * into G and U, then SILU_MUL in place over all of G. */
static void glu_parts(tnd_op part[3], const tnd_tensor *wg, const tnd_tensor *wu, float *x, int32_t *ids, float *G,
                      float *U, int64_t n_used, int64_t n_tok, bool skip) {
    const int64_t n_in = wg->ne[0], n_ff = wg->ne[1];
    for (int i = 0; i < 2; i++) {
        part[i] = (tnd_op){.kind = TND_OP_MATMUL_ID, .p.mmid.skip = skip};
        part[i].in[0] = i ? *wu : *wg;
        part[i].in[1] = tens(x, n_in, 1, n_tok);
        part[i].in[2] = tens_t(ids, TND_TYPE_I32, n_used, n_tok, 1);
        part[i].out[0] = tens(i ? U : G, n_ff, n_used, n_tok);
    }
    part[2] = (tnd_op){.kind = TND_OP_SILU_MUL};
    part[2].in[0] = tens(G, n_ff * n_used * n_tok, 1, 1);
    part[2].in[1] = tens(U, n_ff * n_used * n_tok, 1, 1);
    part[2].out[0] = part[2].in[0];
}

/* The recipe's three ops fused (tnd_op_moe_glu_fuse) and split back
 * (tnd_op_moe_glu_split) give themselves again; ops of another form do
 * not fuse. */
static void test_moe_glu_form(void) {
    static float buf[6][64];
    static int32_t ids[4];
    const tnd_tensor wg = tens_t(buf[0], TND_TYPE_F32, 4, 8, 2), wu = tens_t(buf[1], TND_TYPE_F32, 4, 8, 2);
    tnd_op part[3], f, back[3];
    glu_parts(part, &wg, &wu, buf[2], ids, buf[3], buf[4], 2, 2, true);
    bool ok = tnd_op_moe_glu_fuse(part, &f) && f.kind == TND_OP_MOE_GLU && f.p.mmid.skip;
    if (ok) tnd_op_moe_glu_split(&f, back);
    for (int k = 0; ok && k < 3; k++) {
        ok = back[k].kind == part[k].kind && back[k].p.mmid.skip == part[k].p.mmid.skip;
        for (int i = 0; i < TND_OP_MAX_IN + TND_OP_MAX_OUT; i++) { /* field by field: no padding compared */
            const tnd_tensor *a = i < TND_OP_MAX_IN ? &back[k].in[i] : &back[k].out[i - TND_OP_MAX_IN];
            const tnd_tensor *b = i < TND_OP_MAX_IN ? &part[k].in[i] : &part[k].out[i - TND_OP_MAX_IN];
            ok = ok && a->data == b->data && (!a->data || (a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne)));
        }
    }
    tc_report(ok, "moe_glu: fused from its three ops and split back");
    tnd_op bad[3];
    bool refused = true;
    for (int k = 0; k < 7; k++) {
        memcpy(bad, part, sizeof bad);
        switch (k) {
        case 0: bad[1].in[1].data = buf[5]; break;  /* another x */
        case 1: bad[1].p.mmid.skip = false; break;  /* another skip */
        case 2: bad[2].out[0].data = buf[5]; break; /* the SILU_MUL not in place */
        case 3: bad[2].in[0].ne[0] = 16; break;     /* over part of G */
        case 4: bad[2].in[1].data = buf[2]; break;  /* times something other than U */
        case 5: bad[1].out[0].data = bad[2].in[1].data = buf[3] + 8; break; /* U overlaps G */
        default: bad[1].in[0].ne[1] = 4; break;     /* weights of two shapes */
        }
        refused = refused && !tnd_op_moe_glu_fuse(bad, &f);
    }
    tc_report(refused, "moe_glu: ops of another form are not fused");

    /* MOE_FFN: the MOE_GLU and the down MATMUL_ID over its G */
    const tnd_tensor wd = tens_t(buf[5], TND_TYPE_F32, 8, 4, 2);
    tnd_op gd[2], ff, back2[2];
    ok = tnd_op_moe_glu_fuse(part, &gd[0]);
    gd[1] = (tnd_op){.kind = TND_OP_MATMUL_ID, .p.mmid.skip = true};
    gd[1].in[0] = wd, gd[1].in[1] = part[0].out[0], gd[1].in[2] = part[0].in[2];
    static float y[4 * 2 * 2];
    gd[1].out[0] = tens(y, 4, 2, 2);
    ok = ok && tnd_op_moe_ffn_fuse(gd, &ff) && ff.kind == TND_OP_MOE_FFN;
    if (ok) tnd_op_moe_ffn_split(&ff, back2);
    for (int k = 0; ok && k < 2; k++) {
        ok = back2[k].kind == gd[k].kind && back2[k].p.mmid.skip == gd[k].p.mmid.skip;
        for (int i = 0; i < TND_OP_MAX_IN + TND_OP_MAX_OUT; i++) {
            const tnd_tensor *a = i < TND_OP_MAX_IN ? &back2[k].in[i] : &back2[k].out[i - TND_OP_MAX_IN];
            const tnd_tensor *b = i < TND_OP_MAX_IN ? &gd[k].in[i] : &gd[k].out[i - TND_OP_MAX_IN];
            ok = ok && a->data == b->data && (!a->data || (a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne)));
        }
    }
    tc_report(ok, "moe_ffn: fused from MOE_GLU and its down, and split back");
    refused = true;
    for (int k = 0; k < 9; k++) {
        tnd_op b2[2];
        memcpy(b2, gd, sizeof b2);
        switch (k) {
        case 0: b2[1].in[1].data = buf[4]; break;        /* the down reads U, not G */
        case 1: b2[1].p.mmid.skip = false; break;        /* another skip */
        case 2: b2[1].out[0].data = buf[3]; break;       /* Y over G */
        case 3: b2[1].in[0].ne[0] = 16; break;           /* the down's inputs are not n_ff */
        case 4: b2[1].in[0].ne[2] = 3; break;            /* another count of experts */
        case 5: b2[1].out[0].data = buf[2]; break;       /* Y over x */
        case 6: b2[1].out[0].data = (float *)ids; break; /* Y over the ids */
        case 7: b2[1].in[1].ne[1] = 4, b2[1].in[1].ne[2] = 1; /* G read as other rows */
            b2[0].out[0].ne[1] = 4, b2[0].out[0].ne[2] = 1; break;
        default: b2[1].in[2].data = buf[4]; break;       /* other ids */
        }
        refused = refused && !tnd_op_moe_ffn_fuse(b2, &ff);
    }
    tc_report(refused, "moe_ffn: ops of another form are not fused");
}

/* The CPU backend's MOE_GLU against its three ops: n_exp experts of gate
 * and up (types gt, ut) {n_in, n_ff}, n_used of them a token for n_tok
 * tokens, each pair skipped with probability skip_pct / 100; G and U start
 * from random values (a skipped pair's rows of G still go through SILU_MUL).
 * Every byte of G and U must match. */
static void test_moe_glu_op(tnd_type gt, tnd_type ut, int64_t n_in, int64_t n_ff, int64_t n_exp, int64_t n_used,
                            int64_t n_tok, int skip_pct, bool int8) {
    tnd_backend_cpu_set_int8(CPU, int8);
    const tnd_type ty[2] = {gt, ut};
    void *w[2];
    float *row = tc_xmalloc(sizeof(float) * (size_t)n_in);
    for (int i = 0; i < 2; i++) {
        const size_t rs = tnd_row_size(ty[i], n_in);
        char *p = tc_xmalloc(rs * (size_t)(n_ff * n_exp));
        for (int64_t r = 0; r < n_ff * n_exp; r++) {
            tc_fill_unif(row, (size_t)n_in, -1, 1);
            tnd_type_traits_get(ty[i])->from_float(row, p + (size_t)r * rs, n_in);
        }
        w[i] = p;
    }
    free(row);
    const tnd_tensor wg = tens_t(w[0], gt, n_in, n_ff, n_exp), wu = tens_t(w[1], ut, n_in, n_ff, n_exp);
    /* MOE_FFN's down {n_ff, n_in}: as Qwen3's Q6_K where the rows allow */
    const tnd_type dt = n_ff % 256 == 0 ? TND_TYPE_Q6_K : n_ff % 32 == 0 ? TND_TYPE_Q8_0 : TND_TYPE_F16;
    const size_t drs = tnd_row_size(dt, n_ff);
    char *wdp = tc_xmalloc(drs * (size_t)(n_in * n_exp));
    float *drow = tc_xmalloc(sizeof(float) * (size_t)n_ff);
    for (int64_t r = 0; r < n_in * n_exp; r++) {
        tc_fill_unif(drow, (size_t)n_ff, -1, 1);
        tnd_type_traits_get(dt)->from_float(drow, wdp + (size_t)r * drs, n_ff);
    }
    free(drow);
    const tnd_tensor wd = tens_t(wdp, dt, n_ff, n_in, n_exp);
    const int64_t pairs = n_used * n_tok, ny = n_ff * pairs;
    float *x = rnd(n_in * n_tok, -1, 1);
    int32_t *ids = tc_xmalloc(sizeof(int32_t) * (size_t)pairs);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t u = 0; u < n_used; u++) {
            int32_t e;
            bool dup;
            do { /* distinct experts a token, the low ones hot (several tokens share them) */
                const uint64_t r = tc_xorshift();
                e = (int32_t)((r % (uint64_t)n_exp) * ((r >> 32) % (uint64_t)n_exp) / (uint64_t)n_exp);
                dup = false;
                for (int64_t v = 0; v < u; v++) dup |= ids[t * n_used + v] == e;
            } while (dup);
            ids[t * n_used + u] = (int)(tc_xorshift() % 100) < skip_pct ? -1 : e;
        }
    float *G0 = rnd(ny, -4, 4), *U0 = rnd(ny, -4, 4);
    float *rG = copy_of(G0, ny), *rU = copy_of(U0, ny), *fG = copy_of(G0, ny), *fU = copy_of(U0, ny);
    tnd_op part[3], f;
    glu_parts(part, &wg, &wu, x, ids, rG, rU, n_used, n_tok, skip_pct > 0);
    for (int i = 0; i < 3; i++) run(&part[i]);
    glu_parts(part, &wg, &wu, x, ids, fG, fU, n_used, n_tok, skip_pct > 0);
    int n_skip = 0;
    for (int64_t i = 0; i < pairs; i++) n_skip += ids[i] < 0;
    char what[200];
    snprintf(what, sizeof what, "moe_glu %s/%s n_in=%lld n_ff=%lld, %lld experts, %lld used x %lld tokens, %d of %lld "
             "pairs skipped, %s", tnd_type_name(gt), tnd_type_name(ut), (long long)n_in, (long long)n_ff,
             (long long)n_exp, (long long)n_used, (long long)n_tok, n_skip, (long long)pairs, int8 ? "q8" : "f32");
    if (!tnd_op_moe_glu_fuse(part, &f)) {
        tc_report(false, "%s: the three ops did not fuse", what);
    } else {
        CHECK_ST(tnd_backend_op_supported(CPU, &f));
        run(&f);
        check_same(fG, rG, ny, what);
        char w2[240];
        snprintf(w2, sizeof w2, "%s: U", what);
        check_same(fU, rU, ny, w2);
        /* MOE_FFN: the same G and U, and the down's Y as MATMUL_ID's after the three ops */
        const int64_t nyd = n_in * pairs;
        float *Y0 = rnd(nyd, -4, 4), *rY = copy_of(Y0, nyd), *fY = copy_of(Y0, nyd);
        tnd_op d = {.kind = TND_OP_MATMUL_ID, .p.mmid.skip = skip_pct > 0}, gd[2], ff;
        d.in[0] = wd, d.in[1] = part[0].out[0], d.in[2] = part[0].in[2];
        d.out[0] = tens(rY, n_in, n_used, n_tok);
        d.in[1].data = rG;
        run(&d); /* over the three ops' G */
        memcpy(fG, G0, sizeof(float) * (size_t)ny), memcpy(fU, U0, sizeof(float) * (size_t)ny);
        gd[0] = f, gd[1] = d;
        gd[1].in[1].data = fG, gd[1].out[0].data = fY;
        char w3[240];
        if (!tnd_op_moe_ffn_fuse(gd, &ff)) {
            tc_report(false, "%s: MOE_GLU and its down did not fuse", what);
        } else {
            CHECK_ST(tnd_backend_op_supported(CPU, &ff));
            run(&ff);
            snprintf(w3, sizeof w3, "%s: moe_ffn G", what);
            check_same(fG, rG, ny, w3);
            snprintf(w3, sizeof w3, "%s: moe_ffn U", what);
            check_same(fU, rU, ny, w3);
            snprintf(w3, sizeof w3, "%s: moe_ffn Y (down %s)", what, tnd_type_name(dt));
            check_same(fY, rY, nyd, w3);
        }
        /* an id past the experts: the three ops' error, nothing written */
        if (skip_pct == 0) {
            ids[pairs - 1] = (int32_t)n_exp;
            memcpy(fG, G0, sizeof(float) * (size_t)ny), memcpy(fU, U0, sizeof(float) * (size_t)ny);
            memcpy(fY, Y0, sizeof(float) * (size_t)nyd);
            tnd_status st = CPU->iface->op_run(CPU, &f, NULL);
            tnd_clear_error();
            tc_report(st == TND_ERR_ARG && differs(fG, G0, ny) < 0 && differs(fU, U0, ny) < 0,
                      "%s: an id out of range fails (%d) before writing", what, (int)st);
            st = CPU->iface->op_run(CPU, &ff, NULL);
            tnd_clear_error();
            tc_report(st == TND_ERR_ARG && differs(fG, G0, ny) < 0 && differs(fU, U0, ny) < 0 &&
                          differs(fY, Y0, nyd) < 0,
                      "%s: moe_ffn: an id out of range fails (%d) before writing", what, (int)st);
        }
        free(Y0), free(rY), free(fY);
    }
    free(w[0]), free(w[1]), free(wdp), free(x), free(ids), free(G0), free(U0), free(rG), free(rU), free(fG), free(fU);
}

static void test_moe_glu(void) {
    test_moe_glu_form();
    static const struct {
        tnd_type gt, ut;
        int64_t n_in, n_ff, n_exp, n_used, n_tok;
    } cases[] = {
        {TND_TYPE_Q4_K, TND_TYPE_Q4_K, 256, 200, 16, 4, 1}, /* 200 rows: not a multiple of a grain */
        {TND_TYPE_Q4_K, TND_TYPE_Q4_K, 512, 768, 32, 8, 1}, /* a decode step's rows, items of several grains */
        {TND_TYPE_Q4_K, TND_TYPE_Q6_K, 256, 72, 8, 2, 3},   /* gate and up of two types */
        {TND_TYPE_Q8_0, TND_TYPE_Q8_0, 96, 40, 6, 3, 5},
        {TND_TYPE_Q4_K, TND_TYPE_Q4_K, 256, 100, 16, 8, 8}, /* a batched decode round */
        {TND_TYPE_Q8_0, TND_TYPE_Q8_0, 64, 48, 4, 2, 64},   /* many tokens an expert: the three ops */
        {TND_TYPE_F16, TND_TYPE_F16, 64, 24, 5, 2, 2},
    };
    static const int skips[] = {0, 35, 100};
    for (size_t k = 0; k < TND_ARRAY_LEN(cases); k++)
        for (size_t sk = 0; sk < TND_ARRAY_LEN(skips); sk++)
            for (int q8 = 0; q8 < 2; q8++)
                test_moe_glu_op(cases[k].gt, cases[k].ut, cases[k].n_in, cases[k].n_ff, cases[k].n_exp,
                                cases[k].n_used, cases[k].n_tok, skips[sk], q8);
    tnd_backend_cpu_set_int8(CPU, tnd_cpu_int8_env());
}

/* ---- the whole recipe ---------------------------------------------------------------- */

#define N_GEN 6
#define N_SEQ 3

/* A prompt of n in chunks of 5, N_GEN greedy steps, then N_SEQ sequences
 * in batched rounds (prefill, one decode round): every logit into lg. */
static tnd_status run_recipe(tnd_model *m, const tnd_ctx_params *cp, const int32_t *ids, int n, float *lg,
                             uint64_t *n_rope_kv, uint64_t *n_glu, uint64_t *n_ffn, uint64_t *n_two) {
    const int nv = tnd_model_n_vocab(m);
    tnd_ctx *c;
    int32_t out[N_GEN];
    tnd_status st = tnd_ctx_new(m, cp, &c);
    if (st) return st;
    st = fx_greedy(c, ids, n, N_GEN, out, lg);
    tnd_ctx_stats cs;
    tnd_ctx_get_stats(c, &cs);
    *n_rope_kv = cs.n_rope_kv;
    *n_glu = cs.n_glu;
    *n_ffn = cs.n_ffn;
    *n_two = cs.n_two;
    tnd_ctx_free(c);
    if (st || (st = tnd_ctx_new(m, cp, &c))) return st;
    float *bl = lg + (size_t)(N_GEN + 1) * nv;
    int seq[N_SEQ];
    for (int s = 0; !st && s < N_SEQ; s++) {
        st = tnd_seq_new(c, &seq[s]);
        if (!st) st = tnd_seq_feed(c, seq[s], ids + s, n - s);
    }
    for (int round = 0; !st && round < 2; round++) {
        for (int guard = 0; !st && guard < 64; guard++) {
            int left = 0;
            for (int s = 0; s < N_SEQ; s++) left += tnd_seq_n_queued(c, seq[s]);
            if (!left) break;
            st = tnd_ctx_step(c);
        }
        for (int s = 0; !st && s < N_SEQ; s++) {
            const float *l = tnd_seq_logits(c, seq[s]);
            if (!l) st = tnd_fail(TND_ERR_INTERNAL, "sequence %d has no logits", s);
            else memcpy(bl + ((size_t)round * N_SEQ + s) * nv, l, sizeof(float) * nv);
            int32_t t = l ? tc_argmax(l, nv) : 0;
            if (!st && round == 0) st = tnd_seq_feed(c, seq[s], &t, 1);
        }
    }
    tnd_ctx_free(c);
    return st;
}

static int test_recipe(const char *shape) {
    char path[64];
    int rc = fx_synth(shape, "--seed 5", path, sizeof path);
    if (rc) return rc;
    tnd_model *m = fx_load(path, 2);
    if (!m) {
        unlink(path);
        return 1;
    }
    const int nv = tnd_model_n_vocab(m), n = 13;
    int32_t ids[13];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((3 + 97 * i) % nv);
    const size_t nl = (size_t)(N_GEN + 1 + 2 * N_SEQ) * nv;
    /* the CPU in both activation modes; SimGPU alone, and split with some
     * slices promoted (the MOE_GLU's side, and no fusion over a promoted matmul) */
    static const struct {
        tnd_device dev;
        const char *placement, *promote;
        bool exact;
    } runs[] = {{TND_DEVICE_CPU, NULL, NULL, false}, {TND_DEVICE_CPU, NULL, NULL, true},
                {TND_DEVICE_SIM, "gpu", NULL, false}, {TND_DEVICE_SIM, "random:3", NULL, false},
                {TND_DEVICE_SIM, "random:3", "random:7", false}};
    const bool moe = m->hp.n_expert > 1;
    for (size_t r = 0; r < TND_ARRAY_LEN(runs); r++) {
        if ((runs[r].exact || runs[r].promote) && !moe) continue; /* the runs for MOE_GLU */
        tnd_ctx_params cp = tnd_ctx_default_params();
        cp.device = runs[r].dev;
        cp.placement = runs[r].placement;
        cp.promote = runs[r].promote;
        cp.cpu_exact = runs[r].exact;
        cp.n_ctx = 64;
        cp.n_batch = 5;
        cp.n_seq_max = N_SEQ;
        float *lg[2] = {calloc(nl, sizeof(float)), calloc(nl, sizeof(float))};
        tnd_status st = TND_OK;
        uint64_t n_kv[2] = {0, 0}, n_glu[2] = {0, 0}, n_ffn[2] = {0, 0}, n_two[2] = {0, 0};
        for (int f = 0; !st && f < 2; f++) {
            tnd_config_set("TND_FUSE", f ? "1" : "0");
            st = run_recipe(m, &cp, ids, n, lg[f], &n_kv[f], &n_glu[f], &n_ffn[f], &n_two[f]);
        }
        char run_name[96];
        snprintf(run_name, sizeof run_name, "%s %s%s%s%s%s", shape, runs[r].dev == TND_DEVICE_CPU ? "cpu" : "sim",
                 runs[r].placement ? " " : "", runs[r].placement ? runs[r].placement : "",
                 runs[r].promote ? " promote " : "", runs[r].promote ? runs[r].promote : "");
        if (runs[r].exact) snprintf(run_name + strlen(run_name), sizeof run_name - strlen(run_name), " exact");
        /* every MoE layer's FFN of the greedy run (a prompt in chunks, then
         * steps: each side's part of a split layer) as one MOE_GLU */
        if (!st)
            tc_report(n_glu[0] == 0 &&
                          (moe ? n_glu[1] >= (uint64_t)(N_GEN + 1) * (uint64_t)m->hp.n_layer : n_glu[1] == 0),
                      "%s: MOE_GLU fused %llu times (TND_FUSE=0: %llu)", run_name, (unsigned long long)n_glu[1],
                      (unsigned long long)n_glu[0]);
        /* ... with its down as one MOE_FFN wherever the CPU runs it: all on
         * the CPU, the CPU's experts of split layers (SimGPU takes no MOE_FFN) */
        const bool on_cpu = runs[r].dev == TND_DEVICE_CPU, split = runs[r].placement && strcmp(runs[r].placement, "gpu");
        if (!st && moe)
            tc_report(n_ffn[0] == 0 && (on_cpu ? n_ffn[1] == n_glu[1] : split ? n_ffn[1] > 0 : n_ffn[1] == 0),
                      "%s: MOE_FFN fused %llu times of %llu MOE_GLU (TND_FUSE=0: %llu)", run_name,
                      (unsigned long long)n_ffn[1], (unsigned long long)n_glu[1], (unsigned long long)n_ffn[0]);
        /* all on the simulated GPU, each greedy step's layers run their ropes
         * and K/V stores as one ROPE_KV (the executor's fusion) */
        if (!st && runs[r].placement && !strcmp(runs[r].placement, "gpu"))
            tc_report(n_kv[0] == 0 && n_kv[1] >= (uint64_t)N_GEN * (uint64_t)m->hp.n_layer,
                      "%s sim gpu: ROPE_KV fused %llu times (TND_FUSE=0: %llu)", shape, (unsigned long long)n_kv[1],
                      (unsigned long long)n_kv[0]);
        /* on the simulated GPU, an MoE layer's sum and the add + norm after
         * it as one MOE_SUM_NORM (every layer of every greedy step when all
         * is there), and split layers' routing pairs as MOE_ROUTE_PAIRs */
        if (!st && moe && !on_cpu)
            tc_report(n_two[0] == 0 && (split ? n_two[1] > 0 : n_two[1] >= (uint64_t)N_GEN * (uint64_t)m->hp.n_layer),
                      "%s: MOE_SUM_NORM and MOE_ROUTE_PAIR fused %llu times (TND_FUSE=0: %llu)", run_name,
                      (unsigned long long)n_two[1], (unsigned long long)n_two[0]);
        if (!st && (!moe || on_cpu))
            tc_report(n_two[0] == 0 && n_two[1] == 0, "%s: no MOE_SUM_NORM or MOE_ROUTE_PAIR (%llu)", run_name,
                      (unsigned long long)n_two[1]);
        tnd_config_set("TND_FUSE", NULL);
        if (st) {
            tc_report(false, "%s: %s", run_name, tnd_last_error());
        } else {
            int64_t d = differs(lg[1], lg[0], (int64_t)nl);
            tc_report(d < 0, "%s: every logit fused == unfused, bit for bit (first difference: %lld)", run_name,
                      (long long)d);
        }
        free(lg[0]), free(lg[1]);
    }
    tnd_model_free(m);
    unlink(path);
    return 0;
}

int main(void) {
    tc_rng = 0x51f15eedull;
    tnd_pool *pool = tnd_pool_new(4);
    CHECK_ST(tnd_backend_cpu_new(pool, 0, &CPU));
    static const struct {
        int nh, hd, n_rot;
    } heads[] = {
        {1, 64, 64}, {8, 128, 128}, {32, 128, 128}, {5, 80, 80}, {3, 256, 256}, {4, 128, 64}, {2, 96, 32},
    };
    static const int toks[] = {1, 3, 17, 200}; /* 200: the rows split over the pool */
    for (int sc = 0; sc < 2; sc++) {
        tnd_cpu_ops_scalar = sc;
        for (size_t h = 0; h < TND_ARRAY_LEN(heads); h++)
            for (size_t k = 0; k < TND_ARRAY_LEN(toks); k++)
                for (int mode = 0; mode <= TND_ROPE_NEOX; mode += TND_ROPE_NEOX) {
                    test_rope_norm(heads[h].nh, heads[h].hd, heads[h].n_rot, mode, toks[k], true, true);
                    if (k < 2) {
                        test_rope_norm(heads[h].nh, heads[h].hd, heads[h].n_rot, mode, toks[k], true, false);
                        test_rope_norm(heads[h].nh, heads[h].hd, heads[h].n_rot, mode, toks[k], false, true);
                        test_rope_norm(heads[h].nh, heads[h].hd, heads[h].n_rot, mode, toks[k], false, false);
                    }
                }
        static const int64_t ns[] = {37, 128, 2048, 4096, 5120};
        static const int64_t rows[] = {1, 2, 17, 40}; /* 4096 x 17 and up: split over the pool */
        for (size_t i = 0; i < TND_ARRAY_LEN(ns); i++)
            for (size_t r = 0; r < TND_ARRAY_LEN(rows); r++)
                for (int wt = 0; wt < 2; wt++)
                    for (int into = 0; into < 2; into++) test_add_norm(ns[i], rows[r], wt, into);
    }
    tnd_cpu_ops_scalar = false;
    test_rope_kv_form(false);
    test_rope_kv_form(true);
    test_two_forms();
    test_moe_glu();
    tnd_backend_free(CPU);
    tnd_pool_free(pool);
    static const char *const shapes[] = {"tiny-qwen3", "tiny-qwen3moe", "tiny-llama"};
    for (size_t i = 0; i < TND_ARRAY_LEN(shapes); i++) {
        int rc = test_recipe(shapes[i]);
        if (rc == 77) break; /* no tandem binary: the op checks above still count */
        if (rc) return rc;
    }
    return tc_summary();
}
