/* Sequences and the batched round (docs/ARCHITECTURE.md: Sequences): each
 * sequence of a batch of 1, 4 and 16 with different prompts, greedy, gives
 * the tokens it gives alone (tnd_ctx_eval on a context of its own), on the
 * CPU and on SimGPU with random placements; sequences added and removed
 * mid-run leave the others alone; the errors; the plan counts every slot.
 *
 * Exactness: in the CPU's exact mode (cpu_exact) a token's result does not
 * depend on which other tokens share its round (tests/test_hybrid.c), so
 * batched and alone agree bit for bit, logits included, and SimGPU agrees
 * with the CPU bit for bit. In the default Q8 mode a batched decode step
 * takes the many-token kernels, which sum in another order, and the 8-bit
 * rounding of every matmul's input makes the result chaotic in that order
 * (tests/test_ref_logits.py: per-logit differences of ~0.1-0.2 between
 * equally valid orders). So there the logits agree within REL_MAX times
 * the row's standard deviation (measured here: up to ~0.4 at batch 16 on the
 * default model) and the tokens up to near-ties: where the greedy tokens
 * first differ, the alone run's logit of the batch's token must be within
 * TIE_TOL of its best (the runs then go apart; the rest is not compared).
 * Both bounds are test_ref_logits.py's for this mode.
 * Skips (77) when neither the default model nor the tandem binary (for the
 * synthetic models) is at hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "runtime/runtime.h"
#include "tandem.h"

#define N_GEN 8
#define MAX_SEQ 16
#define REL_MAX 1.0 /* Q8 mode: max |batched - alone| / std(alone's row) before the tokens part */
#define TIE_TOL 1.0f /* Q8 mode: a divergence must be a near-tie this close (logits; ~5 sigma) */

static double worst_rel; /* the largest relative logit difference seen in Q8 mode (printed) */
static bool san;         /* under sanitizers (TND_SANITIZED): fewer and smaller SimGPU runs, every op ~10x slower */

typedef struct prompt {
    int32_t ids[64];
    int n;
} prompt;

/* Different prompts: lengths 3 + 5i mod 29, ids from a fixed generator. */
static void make_prompts(prompt *p, int n, int nv, uint64_t seed) {
    tc_rng = seed;
    for (int i = 0; i < n; i++) {
        p[i].n = 3 + (5 * i) % 29;
        for (int t = 0; t < p[i].n; t++) p[i].ids[t] = (int32_t)(tc_xorshift() % (uint64_t)nv);
    }
}

/* One sequence alone: the prompt, then N_GEN greedy tokens; the logits of
 * every step (N_GEN + 1) into lg. */
static tnd_status run_alone(tnd_model *m, const tnd_ctx_params *cp, const prompt *p, int32_t *tok, float *lg) {
    tnd_ctx_params ap = *cp;
    ap.n_seq_max = 1;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &ap, &c);
    if (st) return st;
    int nv = tnd_model_n_vocab(m);
    st = tnd_ctx_eval(c, p->ids, p->n, lg);
    for (int i = 0; !st && i < N_GEN; i++) {
        tok[i] = tc_argmax(lg + (size_t)i * nv, nv);
        st = tnd_ctx_eval(c, &tok[i], 1, lg + (size_t)(i + 1) * nv);
    }
    tnd_ctx_free(c);
    return st;
}

/* Steps until no sequence of c has tokens queued. */
static tnd_status drain(tnd_ctx *c, int *rounds) {
    tnd_status st = TND_OK;
    for (;;) {
        int q = 0;
        for (int s = 0; s < tnd_ctx_n_seq_max(c); s++) q += tnd_seq_n_queued(c, s) > 0;
        if (!q || (st = tnd_ctx_step(c))) return st;
        if (rounds) (*rounds)++;
    }
}

/* n sequences in one context: all prompts fed, then N_GEN greedy tokens
 * each, every sequence fed its token before the step; tok[i][..], lg[i][..]
 * as run_alone's. */
static tnd_status run_batch(tnd_model *m, const tnd_ctx_params *cp, const prompt *p, int n, int32_t (*tok)[N_GEN],
                            float **lg, int *rounds) {
    tnd_ctx_params bp = *cp;
    bp.n_seq_max = n;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &bp, &c);
    if (st) return st;
    int nv = tnd_model_n_vocab(m), seq[MAX_SEQ];
    for (int i = 0; !st && i < n; i++) {
        st = tnd_seq_new(c, &seq[i]);
        if (!st) st = tnd_seq_feed(c, seq[i], p[i].ids, p[i].n);
    }
    if (!st) st = drain(c, rounds);
    for (int g = 0; !st && g <= N_GEN; g++) {
        for (int i = 0; !st && i < n; i++) {
            const float *l = tnd_seq_logits(c, seq[i]);
            if (!l) {
                st = tnd_fail(TND_ERR_INTERNAL, "sequence %d has no logits after step %d", i, g);
                break;
            }
            memcpy(lg[i] + (size_t)g * nv, l, sizeof(float) * (size_t)nv);
            if (g == N_GEN) continue;
            tok[i][g] = tc_argmax(l, nv);
            st = tnd_seq_feed(c, seq[i], &tok[i][g], 1);
        }
        if (!st && g < N_GEN) st = drain(c, rounds);
    }
    tnd_ctx_free(c);
    return st;
}

/* Sequence i's batched tokens and logits against alone's: bit for bit when
 * exact, else within LOGIT_TOL up to a near-tie divergence. */
static void compare(const char *what, int i, bool exact, int nv, const int32_t *tb, const float *lb, const int32_t *ta,
                    const float *la) {
    if (exact) {
        CHECK(!memcmp(tb, ta, sizeof(int32_t) * N_GEN) && !memcmp(lb, la, sizeof(float) * (N_GEN + 1) * (size_t)nv),
              "%s: sequence %d differs from it alone", what, i);
        return;
    }
    for (int g = 0; g <= N_GEN; g++) {
        const float *b = lb + (size_t)g * nv, *a = la + (size_t)g * nv;
        double mean = 0, var = 0;
        for (int v = 0; v < nv; v++) mean += a[v];
        mean /= nv;
        for (int v = 0; v < nv; v++) var += (a[v] - mean) * (a[v] - mean);
        double rel = tc_max_abs_diff(b, a, nv) / sqrt(var / nv);
        CHECK(rel <= REL_MAX, "%s: sequence %d step %d: logits differ by %.3g row std", what, i, g, rel);
        if (rel > worst_rel) worst_rel = rel;
        if (g == N_GEN || tb[g] == ta[g]) continue;
        float gap = a[ta[g]] - a[tb[g]];
        CHECK(gap <= TIE_TOL, "%s: sequence %d step %d: token %d against %d alone, %g below its best", what, i, g,
              tb[g], ta[g], gap);
        printf("%s: sequence %d parts at step %d, a near-tie of %.3g logits\n", what, i, g, gap);
        return;
    }
}

/* Batches of 1, 4 and 16 against each sequence alone, in cp's mode and
 * placement; r: the alone runs (made once, on the CPU: the SimGPU runs
 * compare with the CPU's). */
/* MAX_SEQ prompts, the first n_alone run alone (tokens ta, logits la) and
 * room for the batched runs' (tb, lb). */
typedef struct refs {
    int nv;
    prompt p[MAX_SEQ];
    int32_t ta[MAX_SEQ][N_GEN], tb[MAX_SEQ][N_GEN];
    float *la[MAX_SEQ], *lb[MAX_SEQ];
} refs;

static refs *refs_make(tnd_model *m, const tnd_ctx_params *cp, uint64_t seed, int n_alone, const char *name) {
    refs *r = tc_xmalloc(sizeof *r);
    r->nv = tnd_model_n_vocab(m);
    make_prompts(r->p, MAX_SEQ, r->nv, seed + (uint64_t)r->nv);
    size_t nl = (size_t)(N_GEN + 1) * r->nv;
    for (int i = 0; i < MAX_SEQ; i++) r->la[i] = tc_xmalloc(sizeof(float) * nl), r->lb[i] = tc_xmalloc(sizeof(float) * nl);
    for (int i = 0; i < n_alone; i++)
        CHECK(run_alone(m, cp, &r->p[i], r->ta[i], r->la[i]) == TND_OK, "%s alone %d: %s", name, i, tnd_last_error());
    return r;
}

static void refs_free(refs *r) {
    for (int i = 0; i < MAX_SEQ; i++) free(r->la[i]), free(r->lb[i]);
    free(r);
}

static void check_batches(tnd_model *m, const tnd_ctx_params *cp, refs *r, const char *name, bool exact,
                          int max_batch) {
    const int sizes[] = {1, 4, 16};
    for (int k = 0; k < 3 && sizes[k] <= max_batch; k++) {
        int n = sizes[k], rounds = 0;
        char what[128];
        snprintf(what, sizeof what, "%s batch %d", name, n);
        tnd_status st = run_batch(m, cp, r->p, n, r->tb, r->lb, &rounds);
        CHECK(st == TND_OK, "%s: %s", what, tnd_last_error());
        if (st) continue;
        /* one decode round per generated token: the batch runs together */
        CHECK(rounds >= N_GEN && rounds <= N_GEN + 1 + (16 * 29 + 3) / TND_MAX(cp->n_batch, 1), "%s: %d rounds",
              what, rounds);
        for (int i = 0; i < n; i++) compare(what, i, exact, r->nv, r->tb[i], r->lb[i], r->ta[i], r->la[i]);
    }
}

/* Sequences added and removed while others run: each sequence's tokens are
 * its tokens alone. Slot 1 is freed mid-run and reused by a new sequence
 * (whose cache rows start over at 0); a small n_batch splits prompts
 * across rounds and leaves some sequences out of some rounds. */
static void check_churn(tnd_model *m, const tnd_ctx_params *cp, const char *name) {
    int nv = tnd_model_n_vocab(m);
    prompt p[5];
    make_prompts(p, 5, nv, 0xc0ffee);
    int32_t ta[5][N_GEN];
    float *la[5];
    size_t nl = (size_t)(N_GEN + 1) * nv;
    for (int i = 0; i < 5; i++) {
        la[i] = tc_xmalloc(sizeof(float) * nl);
        CHECK(run_alone(m, cp, &p[i], ta[i], la[i]) == TND_OK, "%s churn alone: %s", name, tnd_last_error());
    }
    tnd_ctx_params bp = *cp;
    bp.n_seq_max = 3;
    bp.n_batch = 7;
    tnd_ctx *c;
    if (tnd_ctx_new(m, &bp, &c) != TND_OK) {
        CHECK(0, "%s churn: %s", name, tnd_last_error());
        for (int i = 0; i < 5; i++) free(la[i]);
        return;
    }
    /* who: the prompt each slot runs (-1: none), done: tokens it generated */
    int who[3] = {-1, -1, -1}, done[3] = {0}, started = 0, finished = 0;
    int32_t got[5][N_GEN];
    tnd_status st = TND_OK;
    for (int round = 0; !st && finished < 5 && round < 400; round++) {
        /* start prompts while slots are free, one per round, from round 0, 3, 6, ... */
        if (started < 5 && round % 3 == 0) {
            int s;
            tnd_status ns = tnd_seq_new(c, &s);
            if (ns == TND_OK) {
                CHECK(who[s] < 0, "slot %d handed out twice", s);
                who[s] = started;
                done[s] = 0;
                st = tnd_seq_feed(c, s, p[started].ids, p[started].n);
                started++;
            } else {
                CHECK(ns == TND_ERR_LIMIT, "a full context answers TND_ERR_LIMIT");
                tnd_clear_error();
            }
        }
        for (int s = 0; !st && s < 3; s++) {
            const float *l = who[s] >= 0 && tnd_seq_n_queued(c, s) == 0 ? tnd_seq_logits(c, s) : NULL;
            if (!l) continue;
            int i = who[s];
            CHECK(!memcmp(l, la[i] + (size_t)done[s] * nv, sizeof(float) * (size_t)nv),
                  "%s churn: prompt %d step %d: logits differ from it alone", name, i, done[s]);
            if (done[s] == N_GEN) { /* finished: its slot goes back */
                CHECK(tnd_seq_free(c, s) == TND_OK, "free %d", s);
                CHECK(!memcmp(got[i], ta[i], sizeof got[i]), "%s churn: prompt %d's tokens differ from alone", name, i);
                who[s] = -1;
                finished++;
                continue;
            }
            got[i][done[s]] = tc_argmax(l, nv);
            st = tnd_seq_feed(c, s, &got[i][done[s]], 1);
            done[s]++;
        }
        if (!st) st = tnd_ctx_step(c);
    }
    CHECK(st == TND_OK && finished == 5, "%s churn: %d of 5 finished (%s)", name, finished, st ? tnd_last_error() : "");
    tnd_ctx_free(c);
    for (int i = 0; i < 5; i++) free(la[i]);
}

/* A plan swapped into a live context of three sequences (tnd_ctx_set_plan):
 * every slot's rows move to where the new plan keeps each layer's cache,
 * and each sequence goes on as it would alone. SimGPU, exact mode. */
static void check_swap(tnd_model *m, const tnd_ctx_params *cpu, const char *name) {
    int nv = tnd_model_n_vocab(m);
    prompt p[3];
    make_prompts(p, 3, nv, 0xabc);
    int32_t ta[3][N_GEN], got[3][N_GEN];
    float *la[3];
    for (int i = 0; i < 3; i++) {
        la[i] = tc_xmalloc(sizeof(float) * (size_t)(N_GEN + 1) * nv);
        CHECK(run_alone(m, cpu, &p[i], ta[i], la[i]) == TND_OK, "%s swap alone: %s", name, tnd_last_error());
    }
    tnd_ctx_params sp = *cpu;
    sp.device = TND_DEVICE_SIM;
    sp.n_seq_max = 3;
    sp.placement = "random:41";
    tnd_ctx *c = NULL;
    tnd_plan *pl = NULL;
    tnd_status st = tnd_ctx_new(m, &sp, &c);
    sp.placement = "random:42";
    if (!st) st = tnd_plan_build(m, &sp, &pl);
    int seq[3];
    for (int i = 0; !st && i < 3; i++)
        if (!(st = tnd_seq_new(c, &seq[i]))) st = tnd_seq_feed(c, seq[i], p[i].ids, p[i].n);
    if (!st) st = drain(c, NULL);
    for (int g = 0; !st && g < N_GEN; g++) {
        if (g == N_GEN / 2) st = tnd_ctx_set_plan(c, pl);
        for (int i = 0; !st && i < 3; i++) {
            const float *l = tnd_seq_logits(c, seq[i]);
            got[i][g] = l ? tc_argmax(l, nv) : -1;
            st = tnd_seq_feed(c, seq[i], &got[i][g], 1);
        }
        if (!st) st = drain(c, NULL);
    }
    CHECK(st == TND_OK, "%s swap: %s", name, tnd_last_error());
    for (int i = 0; !st && i < 3; i++)
        CHECK(!memcmp(got[i], ta[i], sizeof got[i]) &&
                  !memcmp(tnd_seq_logits(c, seq[i]), la[i] + (size_t)N_GEN * nv, sizeof(float) * (size_t)nv),
              "%s swap: sequence %d differs from it alone", name, i);
    tnd_plan_free(pl);
    tnd_ctx_free(c);
    for (int i = 0; i < 3; i++) free(la[i]);
}

/* The errors: clear statuses, never a crash, nothing changed by a refusal. */
static void check_errors(tnd_model *m) {
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_seq_max = 2;
    tnd_ctx *c;
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    int a = -1, b = -1, x = -1;
    const int32_t t[20] = {1, 2, 3};
    CHECK(tnd_ctx_step(c) == TND_OK, "a step with nothing queued does nothing");
    CHECK(tnd_seq_feed(c, 0, t, 1) == TND_ERR_ARG && strstr(tnd_last_error(), "does not exist"), "feed before new");
    CHECK(tnd_seq_new(c, &a) == TND_OK && tnd_seq_new(c, &b) == TND_OK && a != b, "two slots");
    CHECK(tnd_seq_new(c, &x) == TND_ERR_LIMIT && strstr(tnd_last_error(), "in use"), "no free slot: back-pressure");
    CHECK(tnd_seq_logits(c, a) == NULL, "no logits before a step");
    CHECK(tnd_seq_feed(c, a, t, 0) == TND_ERR_ARG, "no tokens");
    int32_t bad = tnd_model_n_vocab(m);
    CHECK(tnd_seq_feed(c, a, &bad, 1) == TND_ERR_ARG && tnd_seq_n_queued(c, a) == 0, "token out of range");
    CHECK(tnd_seq_feed(c, a, t, 10) == TND_OK, "feed 10");
    CHECK(tnd_seq_feed(c, a, t, 7) == TND_ERR_LIMIT && strstr(tnd_last_error(), "full") && tnd_seq_n_queued(c, a) == 10,
          "a sequence's context full: nothing queued");
    CHECK(tnd_seq_feed(c, 7, t, 1) == TND_ERR_ARG && tnd_seq_feed(c, -1, t, 1) == TND_ERR_ARG, "no such id");
    if (a == 0) CHECK(tnd_ctx_eval(c, t, 1, NULL) == TND_ERR_ARG, "eval while sequence 0 has tokens queued");
    CHECK(tnd_ctx_step(c) == TND_OK && tnd_seq_n_past(c, a) == 10 && tnd_seq_logits(c, a), "step");
    CHECK(tnd_seq_n_past(c, b) == 0 && tnd_seq_logits(c, b) == NULL, "the idle sequence is untouched");
    /* truncation: bounds (nothing changed), the queue dropped with the rows, then the rows past it fed again */
    CHECK(tnd_seq_feed(c, a, t, 1) == TND_OK && tnd_seq_truncate(c, a, 11) == TND_ERR_ARG &&
              tnd_seq_truncate(c, a, -1) == TND_ERR_ARG && tnd_seq_truncate(c, 7, 0) == TND_ERR_ARG &&
              tnd_seq_n_past(c, a) == 10 && tnd_seq_n_queued(c, a) == 1,
          "truncate out of range");
    CHECK(tnd_seq_truncate(c, a, 4) == TND_OK && tnd_seq_n_past(c, a) == 4 && tnd_seq_n_queued(c, a) == 0 &&
              !tnd_seq_logits(c, a) && tnd_ctx_step(c) == TND_OK && tnd_seq_n_past(c, a) == 4,
          "truncated to 4 with a token queued: the queue dropped too");
    CHECK(tnd_seq_feed(c, a, t, 12) == TND_OK && tnd_ctx_step(c) == TND_OK && tnd_seq_n_past(c, a) == 16,
          "truncated to 4, then 12 more: the context's 16 rows");
    CHECK(tnd_seq_free(c, b) == TND_OK && tnd_seq_free(c, b) == TND_ERR_ARG, "free twice");
    CHECK(tnd_seq_feed(c, b, t, 1) == TND_ERR_ARG && tnd_seq_n_past(c, b) == -1 && !tnd_seq_logits(c, b),
          "a freed sequence is gone");
    CHECK(tnd_seq_new(c, &x) == TND_OK && x == b && tnd_seq_n_past(c, x) == 0, "its slot comes back empty");
    tnd_ctx_free(c);
    cp.n_seq_max = TND_SEQ_MAX + 1;
    CHECK(tnd_ctx_new(m, &cp, &c) == TND_ERR_ARG, "n_seq_max out of range");
    cp.n_seq_max = -1;
    CHECK(tnd_ctx_new(m, &cp, &c) == TND_ERR_ARG, "n_seq_max negative");
    tnd_clear_error();
    /* the plan counts every slot's KV rows */
    cp.n_ctx = 64;
    tnd_plan *p1, *p4;
    cp.n_seq_max = 1;
    CHECK_ST(tnd_plan_build(m, &cp, &p1));
    cp.n_seq_max = 4;
    CHECK_ST(tnd_plan_build(m, &cp, &p4));
    CHECK(tnd_plan_layout(p4)->kv_cpu == 4 * tnd_plan_layout(p1)->kv_cpu && tnd_plan_layout(p1)->kv_cpu > 0,
          "KV bytes for 4 sequences: %llu, for 1: %llu", (unsigned long long)tnd_plan_layout(p4)->kv_cpu,
          (unsigned long long)tnd_plan_layout(p1)->kv_cpu);
    tnd_plan_free(p1);
    tnd_plan_free(p4);
}

/* Rounds longer than a sequence's context: n_batch may reach n_ctx times
 * n_seq_max, so 16 prompts (242 tokens, each within n_ctx 40) go through
 * one round, and each sequence is as alone; a single sequence's chunks
 * stay within n_ctx. On the CPU, then SimGPU (a random placement), exact;
 * then on a CUDA GPU where there is one (the device machine), in Q8 mode
 * against the CPU's Q8 runs alone, within compare's bounds. */
static void check_long_rounds(tnd_model *m, const tnd_ctx_params *base, const char *name) {
    tnd_ctx_params cp = *base;
    const bool exact = cp.cpu_exact;
    if (!exact && tnd_cuda_device_count() <= 0) return; /* Q8: only the CUDA run */
    cp.n_ctx = 40;
    cp.n_batch = 256;
    cp.n_seq_max = 1;
    tnd_plan *pl;
    CHECK_ST(tnd_plan_build(m, &cp, &pl));
    CHECK(tnd_plan_n_batch(pl) == 40, "%s: one sequence's rounds capped at n_ctx: %d", name, tnd_plan_n_batch(pl));
    tnd_plan_free(pl);
    cp.n_seq_max = 4;
    CHECK_ST(tnd_plan_build(m, &cp, &pl));
    CHECK(tnd_plan_n_batch(pl) == 160, "%s: 4 sequences' rounds capped at 4 x n_ctx: %d", name, tnd_plan_n_batch(pl));
    tnd_plan_free(pl);
    refs *r = refs_make(m, &cp, 0x1e6, MAX_SEQ, name);
    static const tnd_device dev[3] = {TND_DEVICE_CPU, TND_DEVICE_SIM, TND_DEVICE_CUDA};
    for (int k = exact ? 0 : 2; k < (exact ? 2 : 3); k++) {
        tnd_ctx_params bp = cp;
        bp.device = dev[k];
        if (k) bp.placement = "random:77", bp.promote = "all";
        char what[96];
        snprintf(what, sizeof what, "%s long rounds %s", name, k == 0 ? "cpu" : k == 1 ? "sim random:77" : "cuda random:77");
        int rounds = 0;
        tnd_status st = run_batch(m, &bp, r->p, MAX_SEQ, r->tb, r->lb, &rounds);
        CHECK(st == TND_OK, "%s: %s", what, tnd_last_error());
        if (st) continue;
        CHECK(rounds == N_GEN + 1, "%s: the prompts in one round, then a round a token: %d rounds", what, rounds);
        for (int i = 0; i < MAX_SEQ; i++) compare(what, i, exact, r->nv, r->tb[i], r->lb[i], r->ta[i], r->la[i]);
    }
    refs_free(r);
}

/* SimGPU, random placements of weights and KV caches, random or all
 * promotions, exact mode: every sequence of the batch as on the CPU alone. */
static void check_sim(tnd_model *m, const tnd_ctx_params *cpu, refs *r, const char *name, int n_place, int max_batch) {
    char spec[32], prom[32];
    for (int k = 0; k < n_place; k++) {
        tnd_ctx_params sp = *cpu;
        sp.device = TND_DEVICE_SIM;
        snprintf(spec, sizeof spec, "random:%d", 300 + k);
        snprintf(prom, sizeof prom, "random:%d", 900 + k);
        sp.placement = spec;
        sp.promote = k % 3 == 0 ? "none" : k % 3 == 1 ? "all" : prom;
        char what[96];
        snprintf(what, sizeof what, "%s sim %s promote %s", name, spec, sp.promote);
        check_batches(m, &sp, r, what, true, max_batch);
    }
}

static void model_checks(const char *path, const char *name, int max_batch, int n_place) {
    tnd_model *m = fx_load(path, 2);
    CHECK(m != NULL, "load %s", name);
    if (!m) return;
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.cpu_exact = true;
    char what[64];
    snprintf(what, sizeof what, "%s exact", name);
    refs *r = refs_make(m, &cp, 0x5eed, max_batch, what);
    check_batches(m, &cp, r, what, true, max_batch);
    check_churn(m, &cp, what);
    check_swap(m, &cp, what);
    if (!san || max_batch >= 16) check_long_rounds(m, &cp, what);
    check_sim(m, &cp, r, name, n_place, san ? TND_MIN(max_batch, 4) : max_batch);
    refs_free(r);
    cp.cpu_exact = false;
    snprintf(what, sizeof what, "%s q8", name);
    worst_rel = 0;
    r = refs_make(m, &cp, 0x5eed, max_batch, what);
    check_batches(m, &cp, r, what, false, max_batch);
    refs_free(r);
    if (!san || max_batch >= 16) check_long_rounds(m, &cp, what);
    printf("%s: batched against alone, logits within %.3f row std\n", what, worst_rel);
    check_errors(m);
    tnd_model_free(m);
}

int main(void) {
    int ran = 0;
    san = getenv("TND_SANITIZED") != NULL;
    const char *shapes[] = {"tiny-llama", "tiny-qwen3moe"};
    for (int i = 0; i < 2; i++) {
        char path[64];
        int rc = fx_synth(shapes[i], "", path, sizeof path);
        if (rc == 77) break;
        CHECK(rc == 0, "synth %s", shapes[i]);
        if (rc) continue;
        model_checks(path, shapes[i], 16, san ? 2 : 6);
        unlink(path);
        ran++;
    }
    char path[4096];
    if (fx_default_model(path, sizeof path, false)) {
        /* sanitized: batches of 1 and 4 on it, 16 on the tiny models above (the same code at other sizes) */
        model_checks(path, "default", san ? 4 : 16, 1);
        ran++;
    }
    if (!ran) return 77;
    return tc_summary();
}
