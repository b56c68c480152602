/* The position-in-memory forms of the KV store and attention (backend.h:
 * CPY with in[1], ATTN with in[3]; model/forward.c emits them in rounds of
 * up to TND_GRAPH_MAX_TOK tokens so that a GPU backend can replay a decode
 * step's launches) on the CPU backend, against the forms with the position
 * in the op, bit for bit:
 *   - CPY by position writes each row at its position (out of order too)
 *     and leaves every other row of the cache as it was; a position outside
 *     the cache is a clear error that writes nothing past it;
 *   - ATTN reading pos[0] equals ATTN with p.attn.pos0, for decode shapes
 *     with GQA, a sliding window and soft-capping; a position past the
 *     cache is a clear error;
 *   - ATTN over slots (a batched round's decode tokens in one op) equals
 *     each query alone over its own slot; bad rows and shapes are errors;
 *   - ROPE over tokens at positions out of order, repeated, far apart and
 *     negative (the backend's table of angles, grown per parameter set, or
 *     computed in place) equals tnd_cpu_rope computing each in place.
 * The whole recipe with these forms is checked by the reference-logit and
 * hybrid tests (decode steps use them on every backend). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu/ops.h"
#include "cpu/pool.h"
#include "quant/quant.h"
#include "util.h"

static tnd_backend *CPU;

static tnd_tensor tens(void *data, tnd_type t, int64_t n0, int64_t n1, int64_t n2) {
    return (tnd_tensor){.data = data, .type = t, .ne = {n0, n1, n2, 1}};
}

static void test_cpy_at(int64_t rl, int n, int64_t cap) {
    float *x = tc_xmalloc(sizeof(float) * (size_t)(rl * n));
    tc_fill_unif(x, (size_t)(rl * n), -3, 3);
    int32_t *pos = tc_xmalloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) pos[i] = (int32_t)((cap - 1 - 5 * i) % cap);
    uint16_t *got = tc_xmalloc(2 * (size_t)(rl * cap)), *want = tc_xmalloc(2 * (size_t)(rl * cap));
    for (int64_t i = 0; i < rl * cap; i++) got[i] = want[i] = (uint16_t)(0x7e00 | (i & 0xff)); /* NaNs, each its own */
    /* the reference: a plain CPY of each row at its place */
    for (int i = 0; i < n; i++) {
        tnd_op op = {.kind = TND_OP_CPY};
        op.in[0] = tens(x + (int64_t)i * rl, TND_TYPE_F32, rl, 1, 1);
        op.out[0] = tens(want + (int64_t)pos[i] * rl, TND_TYPE_F16, rl, 1, 1);
        CHECK_ST(CPU->iface->op_run(CPU, &op, NULL));
    }
    tnd_op op = {.kind = TND_OP_CPY};
    op.in[0] = tens(x, TND_TYPE_F32, rl, n, 1);
    op.in[1] = tens(pos, TND_TYPE_I32, n, 1, 1);
    op.out[0] = tens(got, TND_TYPE_F16, rl, cap, 1);
    CHECK_ST(CPU->iface->op_run(CPU, &op, NULL));
    CHECK(!memcmp(got, want, 2 * (size_t)(rl * cap)), "cpy by position, %d rows of %lld into %lld: as row by row",
          n, (long long)rl, (long long)cap);
    /* a position past the cache: refused, and no row written past it */
    pos[n - 1] = (int32_t)cap;
    tnd_status st = CPU->iface->op_run(CPU, &op, NULL);
    CHECK(st == TND_ERR_ARG && strstr(tnd_last_error(), "row"), "cpy by position: row %lld of %lld refused (%s)",
          (long long)cap, (long long)cap, tnd_last_error());
    tnd_clear_error();
    free(x);
    free(pos);
    free(got);
    free(want);
}

/* Queries (nq values) and caches (n f16 values each), uniform in [-1, 1]. */
static void fill_qkv(float *q, int64_t nq, uint16_t *K, uint16_t *V, int64_t n) {
    tc_fill_unif(q, (size_t)nq, -1, 1);
    for (int64_t i = 0; i < n; i++) {
        K[i] = tnd_fp32_to_fp16(tc_unif(-1, 1));
        V[i] = tnd_fp32_to_fp16(tc_unif(-1, 1));
    }
}

/* An ATTN's parameters (scale 1/sqrt(hd)); tensors and positions to fill. */
static tnd_op attn_op(int n_head, int n_kv, int hd, float softcap, int window) {
    tnd_op op = {.kind = TND_OP_ATTN};
    op.p.attn.n_head = n_head;
    op.p.attn.n_head_kv = n_kv;
    op.p.attn.head_dim = hd;
    op.p.attn.scale = 1.0f / sqrtf((float)hd);
    op.p.attn.softcap = softcap;
    op.p.attn.window = window;
    return op;
}

static void test_attn_pos(int n_tok, int n_head, int n_kv, int hd, int pos0, float softcap, int window) {
    const int64_t n_ctx = pos0 + n_tok + 40, row = (int64_t)n_kv * hd, nq = (int64_t)n_tok * n_head * hd;
    float *q = tc_xmalloc(sizeof(float) * (size_t)nq), *a = tc_xmalloc(sizeof(float) * (size_t)nq),
          *b = tc_xmalloc(sizeof(float) * (size_t)nq);
    uint16_t *K = tc_xmalloc(2 * (size_t)(n_ctx * row)), *V = tc_xmalloc(2 * (size_t)(n_ctx * row));
    fill_qkv(q, nq, K, V, n_ctx * row);
    int32_t *pos = tc_xmalloc(sizeof(int32_t) * (size_t)n_tok);
    for (int t = 0; t < n_tok; t++) pos[t] = pos0 + t;
    tnd_op op = attn_op(n_head, n_kv, hd, softcap, window);
    op.p.attn.pos0 = pos0;
    op.in[0] = tens(q, TND_TYPE_F32, hd, n_head, n_tok);
    op.in[1] = tens(K, TND_TYPE_F16, row, n_ctx, 1);
    op.in[2] = tens(V, TND_TYPE_F16, row, n_ctx, 1);
    op.out[0] = tens(a, TND_TYPE_F32, hd, n_head, n_tok);
    CHECK_ST(CPU->iface->op_run(CPU, &op, NULL));
    tnd_op pm = op;
    pm.p.attn.pos0 = 0;
    pm.p.attn.kv_cap = (int32_t)n_ctx;
    pm.in[3] = tens(pos, TND_TYPE_I32, n_tok, 1, 1);
    pm.out[0] = tens(b, TND_TYPE_F32, hd, n_head, n_tok);
    CHECK_ST(CPU->iface->op_run(CPU, &pm, NULL));
    CHECK(!memcmp(a, b, sizeof(float) * (size_t)nq),
          "attn, positions in memory == pos0: %d tokens at %d, %d/%d heads, head_dim %d, softcap %g, window %d", n_tok,
          pos0, n_head, n_kv, hd, softcap, window);
    pos[0] = (int32_t)n_ctx; /* queries past the cache */
    tnd_status st = CPU->iface->op_run(CPU, &pm, NULL);
    CHECK(st == TND_ERR_ARG, "attn: a position past the cache refused (%s)", tnd_last_error());
    tnd_clear_error();
    free(q);
    free(a);
    free(b);
    free(K);
    free(V);
    free(pos);
}

/* ATTN over slots (p.attn.slot_rows): queries of several sequences in one
 * op, each at its row slot * slot_rows + position, as that query alone over
 * its slot's rows, bit for bit; rows and shapes the op cannot take are
 * clear errors. */
static void test_attn_slots(int n_head, int n_kv, int hd, float softcap, int window) {
    enum { N_SLOT = 4, SR = 48, NT = 6 };
    const int64_t row = (int64_t)n_kv * hd, nq = (int64_t)NT * n_head * hd;
    /* slot 2 at 5; slot 0 at 0 and 1 (one run); slot 3 at 17; slot 1 at the slot's last row; slot 0 at 9 */
    const int32_t slot[NT] = {2, 0, 0, 3, 1, 0}, at[NT] = {5, 0, 1, 17, SR - 1, 9};
    float *q = tc_xmalloc(sizeof(float) * (size_t)nq), *a = tc_xmalloc(sizeof(float) * (size_t)nq),
          *b = tc_xmalloc(sizeof(float) * (size_t)nq);
    uint16_t *K = tc_xmalloc(2 * (size_t)(N_SLOT * SR * row)), *V = tc_xmalloc(2 * (size_t)(N_SLOT * SR * row));
    fill_qkv(q, nq, K, V, N_SLOT * SR * row);
    int32_t rows[NT];
    tnd_op op = attn_op(n_head, n_kv, hd, softcap, window);
    for (int t = 0; t < NT; t++) { /* the reference: each query alone over its slot */
        tnd_op one = op;
        one.p.attn.pos0 = at[t];
        one.in[0] = tens(q + (int64_t)t * n_head * hd, TND_TYPE_F32, hd, n_head, 1);
        one.in[1] = tens(K + (int64_t)slot[t] * SR * row, TND_TYPE_F16, row, SR, 1);
        one.in[2] = tens(V + (int64_t)slot[t] * SR * row, TND_TYPE_F16, row, SR, 1);
        one.out[0] = tens(a + (int64_t)t * n_head * hd, TND_TYPE_F32, hd, n_head, 1);
        CHECK_ST(CPU->iface->op_run(CPU, &one, NULL));
        rows[t] = slot[t] * SR + at[t];
    }
    op.p.attn.slot_rows = SR;
    op.p.attn.kv_cap = SR;
    op.in[0] = tens(q, TND_TYPE_F32, hd, n_head, NT);
    op.in[1] = tens(K, TND_TYPE_F16, row, N_SLOT * SR, 1);
    op.in[2] = tens(V, TND_TYPE_F16, row, N_SLOT * SR, 1);
    op.in[3] = tens(rows, TND_TYPE_I32, NT, 1, 1);
    op.out[0] = tens(b, TND_TYPE_F32, hd, n_head, NT);
    CHECK_ST(CPU->iface->op_run(CPU, &op, NULL));
    CHECK(!memcmp(a, b, sizeof(float) * (size_t)nq),
          "attn over slots == each query alone: %d/%d heads, head_dim %d, softcap %g, window %d", n_head, n_kv, hd,
          softcap, window);
    /* what the op refuses */
    struct {
        const char *what;
        int32_t row3, kv_cap, slot_rows;
        int64_t cache_rows;
        bool pos;
    } bad[] = {
        {"a row past the slots", N_SLOT * SR, SR, SR, N_SLOT * SR, true},
        {"a position at kv_cap", 3 * SR + 20, 20, SR, N_SLOT * SR, true},
        {"kv_cap past a slot", 17, SR + 1, SR, N_SLOT * SR, true},
        {"a cache of part of a slot", 17, SR, SR, N_SLOT * SR - 1, true},
        {"slots without positions in memory", 17, SR, SR, N_SLOT * SR, false},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tnd_op x = op;
        int32_t r2[NT];
        memcpy(r2, rows, sizeof r2);
        r2[3] = bad[i].row3;
        x.in[3] = bad[i].pos ? tens(r2, TND_TYPE_I32, NT, 1, 1) : (tnd_tensor){0};
        x.p.attn.kv_cap = bad[i].kv_cap;
        x.p.attn.slot_rows = bad[i].slot_rows;
        x.in[1].ne[1] = x.in[2].ne[1] = bad[i].cache_rows;
        tnd_status st = CPU->iface->op_run(CPU, &x, NULL);
        CHECK(st != TND_OK && *tnd_last_error(), "attn over slots: %s refused (%s)", bad[i].what, tnd_last_error());
        tnd_clear_error();
    }
    free(q), free(a), free(b), free(K), free(V);
}

/* One ROPE op of n_tok tokens at pos[] (threads split the tokens when
 * large), against each token rotated in place, bit for bit. */
static void test_rope_positions(int n_head, int hd, int n_rot, bool neox, float base, const int32_t *pos,
                                int n_tok) {
    const int64_t n = (int64_t)hd * n_head * n_tok;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    tc_fill_unif(x, (size_t)n, -2, 2);
    memcpy(y, x, sizeof(float) * (size_t)n);
    tnd_op op = {.kind = TND_OP_ROPE};
    op.p.rope.n_rot = n_rot;
    op.p.rope.mode = neox ? TND_ROPE_NEOX : TND_ROPE_NORMAL;
    op.p.rope.freq_base = base;
    op.p.rope.freq_scale = 1.0f;
    op.in[0] = tens(x, TND_TYPE_F32, hd, n_head, n_tok);
    op.in[1] = tens((void *)pos, TND_TYPE_I32, n_tok, 1, 1);
    op.out[0] = op.in[0];
    CHECK_ST(CPU->iface->op_run(CPU, &op, NULL));
    int bad = 0;
    for (int t = 0; t < n_tok; t++) {
        float *v = y + (int64_t)t * hd * n_head;
        tnd_cpu_rope(v, n_head, hd, n_rot, pos[t], base, 1.0f, neox, NULL);
        bad += memcmp(v, x + (int64_t)t * hd * n_head, sizeof(float) * (size_t)(hd * n_head)) != 0;
    }
    CHECK(!bad, "rope %d tokens, n_rot %d %s base %g: %d tokens differ from in place", n_tok, n_rot,
          neox ? "neox" : "pairs", (double)base, bad);
    free(x), free(y);
}

int main(void) {
    tnd_pool *pool = tnd_pool_new(2);
    CHECK(pool && tnd_backend_cpu_new(pool, 0, &CPU) == TND_OK, "cpu backend");
    if (!CPU) return tc_summary();
    test_cpy_at(64, 1, 9);
    test_cpy_at(512, 3, 100);
    test_cpy_at(1024, 8, 4096);
    test_attn_pos(1, 4, 4, 64, 0, 0, 0);
    test_attn_pos(1, 32, 4, 128, 700, 0, 0);
    test_attn_pos(3, 16, 8, 128, 95, 0, 0);
    test_attn_pos(8, 8, 2, 80, 31, 50.0f, 0);
    test_attn_pos(2, 8, 4, 256, 400, 0, 64);
    test_attn_slots(4, 4, 64, 0, 0);
    test_attn_slots(32, 4, 128, 0, 0);
    test_attn_slots(8, 2, 80, 50.0f, 0);
    test_attn_slots(8, 4, 256, 0, 7);
    {
        const int32_t dec[1] = {5}, far[3] = {3000, 7, 3000}, neg[2] = {4, -3};
        int32_t many[300];
        for (int i = 0; i < 300; i++) many[i] = (i * 37) % 450; /* out of order, past the first rows, to split */
        test_rope_positions(4, 64, 64, false, 10000.0f, dec, 1);
        test_rope_positions(4, 64, 64, false, 10000.0f, far, 3);
        test_rope_positions(4, 64, 64, true, 10000.0f, many, 300);
        test_rope_positions(2, 256, 256, true, 1e6f, many, 300);
        test_rope_positions(3, 128, 64, true, 5e5f, neg, 2);
        for (int k = 0; k < 5; k++) /* more parameter sets than the table keeps: in place */
            test_rope_positions(2, 64, 32, k % 2, 100.0f * (float)(k + 1), far, 3);
    }
    tnd_backend_free(CPU);
    tnd_pool_free(pool);
    return tc_summary();
}
