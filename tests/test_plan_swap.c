/* Plans as objects (tandem.h: tnd_plan_build, tnd_ctx_new_from_plan,
 * tnd_ctx_set_plan). A context made from a plan gives the tokens a context
 * made from its parameters gives; swapping a different plan into a live
 * context between rounds (new placement, new layout, the KV cache moved)
 * gives exactly the CPU-only logits and tokens on SimGPU, and on the CPU.
 * Skips (77) when the default model is absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "runtime/runtime.h"
#include "tandem.h"

#define N_GEN 10

typedef struct swap_case {
    const char *a, *a_prom, *b, *b_prom; /* placement and promotion of the first and the second plan */
    int at;                              /* generated tokens before the swap (then back to a at N_GEN - 2) */
} swap_case;

static tnd_status build(tnd_model *m, const tnd_ctx_params *base, const char *spec, const char *prom, tnd_plan **out) {
    tnd_ctx_params p = *base;
    p.placement = spec;
    p.promote = prom;
    return tnd_plan_build(m, &p, out);
}

/* Prefill, then N_GEN greedy steps with plan b swapped in after `at` of
 * them and a back again before the last two; every step's logits into lg. */
static tnd_status run_swaps(tnd_model *m, const tnd_plan *a, const tnd_plan *b, int at, const int32_t *ids, int n,
                            int32_t *out, float *lg) {
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new_from_plan(a, &c);
    if (st) return st;
    int nv = tnd_model_n_vocab(m);
    st = tnd_ctx_eval(c, ids, n, lg);
    for (int i = 0; !st && i < N_GEN; i++) {
        if (i == at) st = tnd_ctx_set_plan(c, b);
        if (!st && i == at && strcmp(tnd_plan_placement(tnd_ctx_plan(c))->desc, tnd_plan_placement(b)->desc))
            st = tnd_fail(TND_ERR_INTERNAL, "the context does not report the plan swapped in");
        if (!st && i == N_GEN - 2) st = tnd_ctx_set_plan(c, a);
        if (st) break;
        out[i] = tc_argmax(lg + (size_t)i * nv, nv);
        st = tnd_ctx_eval(c, &out[i], 1, lg + (size_t)(i + 1) * nv);
    }
    tnd_ctx_free(c);
    return st;
}

/* The CPU-only reference through tnd_ctx_new (the convenience path). */
static tnd_status reference(tnd_model *m, const tnd_ctx_params *cp, const int32_t *ids, int n, int32_t *out,
                            float *lg) {
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, cp, &c);
    if (st) return st;
    st = fx_greedy(c, ids, n, N_GEN, out, lg);
    tnd_ctx_free(c);
    return st;
}

static void check_cases(const char *what, tnd_model *m, const tnd_ctx_params *cp, const swap_case *cases, int n_cases,
                        const int32_t *ids, int n) {
    int nv = tnd_model_n_vocab(m);
    size_t nl = (size_t)(N_GEN + 1) * nv;
    float *ref = malloc(sizeof(float) * nl), *got = malloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];
    tnd_ctx_params rp = *cp;
    rp.device = TND_DEVICE_CPU;
    CHECK(ref && got && reference(m, &rp, ids, n, ref_tok, ref) == TND_OK, "%s: cpu reference: %s", what,
          tnd_last_error());
    for (int k = 0; ref && got && k < n_cases; k++) {
        const swap_case *sc = &cases[k];
        tnd_plan *a = NULL, *b = NULL;
        tnd_status st = build(m, cp, sc->a, sc->a_prom, &a);
        if (!st) st = build(m, cp, sc->b, sc->b_prom, &b);
        memset(tok, -1, sizeof tok);
        if (!st) st = run_swaps(m, a, b, sc->at, ids, n, tok, got);
        CHECK(st == TND_OK, "%s: %s -> %s: %s", what, sc->a, sc->b, tnd_last_error());
        if (!st) {
            CHECK(!memcmp(tok, ref_tok, sizeof tok), "%s: %s -> %s: tokens differ from the CPU's", what, sc->a, sc->b);
            CHECK(!memcmp(got, ref, sizeof(float) * nl), "%s: %s -> %s: logits differ from the CPU's", what, sc->a,
                  sc->b);
        }
        tnd_plan_free(a);
        tnd_plan_free(b);
    }
    free(ref);
    free(got);
}

/* A plan is for one context size and one device: other ones are refused,
 * and the context runs on. */
static void check_refusals(tnd_model *m, const tnd_ctx_params *cp, const int32_t *ids, int n) {
    tnd_plan *a = NULL, *other = NULL, *cpu = NULL, *mode = NULL, *bad = NULL;
    tnd_ctx_params p = *cp;
    p.n_ctx = cp->n_ctx / 2;
    tnd_ctx_params q = *cp;
    q.device = TND_DEVICE_CPU;
    tnd_ctx_params e = *cp; /* the other CPU activation mode */
    e.cpu_exact = !cp->cpu_exact;
    tnd_ctx_params neg = *cp;
    neg.n_ctx = -5;
    CHECK_ST(build(m, cp, "random:9", NULL, &a));
    CHECK_ST(build(m, &p, "random:9", NULL, &other));
    CHECK_ST(build(m, &q, "cpu", NULL, &cpu));
    CHECK_ST(build(m, &e, "random:9", NULL, &mode));
    CHECK(build(m, &neg, "random:9", NULL, &bad) == TND_ERR_ARG && !bad, "a negative context size is refused");
    tnd_ctx *c = NULL;
    if (a && other && cpu && tnd_ctx_new_from_plan(a, &c) == TND_OK) {
        CHECK(tnd_ctx_eval(c, ids, n, NULL) == TND_OK, "eval: %s", tnd_last_error());
        CHECK(tnd_ctx_set_plan(c, other) == TND_ERR_ARG, "a plan of another context length is refused");
        CHECK(tnd_ctx_set_plan(c, cpu) == TND_ERR_ARG, "a CPU plan is refused by a GPU context");
        CHECK(tnd_ctx_set_plan(c, mode) == TND_ERR_ARG, "a plan for the other CPU mode is refused");
        CHECK(tnd_ctx_n_past(c) == n && tnd_ctx_eval(c, ids, 1, NULL) == TND_OK, "the context runs on after refusals");
    } else {
        CHECK(0, "plans for the refusals: %s", tnd_last_error());
    }
    tnd_ctx_free(c);
    tnd_plan_free(a);
    tnd_plan_free(other);
    tnd_plan_free(cpu);
    tnd_plan_free(mode);
}

static const swap_case dense_cases[] = {
    {"random:1", NULL, "random:2", "all", 3},
    {"gpu", NULL, "cpu", NULL, 2},
    {"cpu", NULL, "gpu", NULL, 4},
    {"random:5", "random:6", "gpu", NULL, 1},
};

static const swap_case moe_cases[] = {
    {"random:3", NULL, "random:4", "all", 3},
    {"gpu", NULL, "random:8", NULL, 2},
};

static void test_moe(void) {
    char path[64];
    int rc = fx_synth("tiny-qwen3moe", "", path, sizeof path);
    if (rc == 77) return; /* no tandem binary: this part skipped, not passed */
    CHECK(rc == 0, "synth tiny-qwen3moe");
    if (rc) return;
    tnd_model *m = fx_load(path, 2);
    if (m) {
        const int32_t ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190};
        tnd_ctx_params cp = tnd_ctx_default_params();
        cp.n_ctx = 64;
        cp.n_batch = 4;
        cp.device = TND_DEVICE_SIM;
        check_cases("moe", m, &cp, moe_cases, (int)(sizeof moe_cases / sizeof *moe_cases), ids,
                    (int)(sizeof ids / sizeof *ids));
    } else {
        CHECK(0, "load moe");
    }
    tnd_model_free(m);
    unlink(path);
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, false)) return 77;
    tnd_model *m = fx_load(path, 2);
    if (!m) return 1;
    const char *text = "The capital of France is Paris, and the capital of Italy is";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tnd_tokenize(tnd_model_tokenizer(m), text, strlen(text), true, false, &ids, &n) == TND_OK && n > 8,
          "tokenize");
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 96;
    cp.n_batch = 5;
    cp.device = TND_DEVICE_SIM;
    check_cases("sim", m, &cp, dense_cases, (int)(sizeof dense_cases / sizeof *dense_cases), ids, (int)n);
    /* on the CPU alone a swap still re-lays everything out and moves the cache */
    tnd_ctx_params cpu = cp;
    cpu.device = TND_DEVICE_CPU;
    const swap_case cpu_case = {"cpu", NULL, "cpu", NULL, 3};
    check_cases("cpu", m, &cpu, &cpu_case, 1, ids, (int)n);
    check_refusals(m, &cp, ids, (int)n);
    test_moe();
    free(ids);
    tnd_model_free(m);
    return tc_summary();
}
