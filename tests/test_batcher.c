/* Continuous batching (tnd_batcher; docs/ARCHITECTURE.md: Continuous
 * batching), on the default model in the CPU's exact mode, where a
 * sequence's tokens do not depend on what shares its rounds
 * (tests/test_batch.c):
 *   - more requests than sequence slots all finish, each with the greedy
 *     tokens it gives alone, and the queue gives the slots back as they free;
 *   - a full queue refuses (TND_ERR_LIMIT) and then takes again;
 *   - cancelling a queued and a running request ends them, the others go on
 *     undisturbed; on_token returning false stops one; the finish reasons;
 *   - bad requests fail with TND_ERR_ARG and queue nothing;
 *   - a thread submits while another steps (TSan's case);
 *   - prompt caching: a next turn reuses the slot holding the conversation
 *     so far and evaluates only the rest, with the same tokens (on the CPU
 *     and on SimGPU with a random placement); sent again, the slot is
 *     truncated to all but the prompt's last 16 tokens, the same tokens;
 *     a second conversation with a common beginning takes a free slot, not
 *     the first's; one cancelled while it generates keeps the rows it
 *     evaluated for its next turn; off, the same tokens with nothing
 *     reused; the batcher's free frees kept slots;
 *   - the counters add up, and freeing the batcher ends what is left.
 * Skips (77) without the default model.
 * TND_TSAN (scripts/test.sh: under ThreadSanitizer, where the threads are the
 * point and every op runs ~10x slower): on the tiny synthetic llama (`tandem
 * synth`, needs TND_BIN) instead, at the full sizes (N_REQ requests, prompts
 * longer than a round). */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"
#include "tandem.h"

#define N_REQ 7 /* requests at most; nreq of them run (fewer under sanitizers on the default model) */
#define MAX_GEN 6
#define N_CTX 96

typedef struct out {
    int32_t tok[N_CTX];
    int n, n_done, n_prompt, n_gen, stop_after; /* stop_after > 0: on_token says stop after that many */
    tnd_finish why;
} out;

static bool on_token(void *u, int32_t t) {
    out *o = u;
    if (o->n < N_CTX) o->tok[o->n] = t;
    o->n++;
    return !(o->stop_after && o->n >= o->stop_after);
}

static void on_done(void *u, tnd_finish why, int n_prompt, int n_gen) {
    out *o = u;
    o->why = why;
    o->n_done++;
    o->n_prompt = n_prompt;
    o->n_gen = n_gen;
}

typedef struct prompt {
    int32_t ids[80];
    int n;
} prompt;

static tnd_request request(const prompt *p, out *o, int max_tokens) {
    tnd_request r = {.prompt = p->ids, .n_prompt = p->n, .max_tokens = max_tokens, .on_token = on_token,
                     .on_done = on_done, .user = o};
    r.sampling = tnd_sampler_default_params();
    r.sampling.temp = 0; /* greedy */
    return r;
}

/* The greedy tokens of p alone (MAX_GEN, end tokens not stopping it). */
static tnd_status alone(tnd_model *m, const tnd_ctx_params *cp, const prompt *p, int32_t *tok) {
    tnd_ctx_params ap = *cp;
    ap.n_seq_max = 1;
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, &ap, &c);
    if (st) return st;
    int nv = tnd_model_n_vocab(m);
    float *lg = tc_xmalloc(sizeof(float) * (size_t)nv);
    st = tnd_ctx_eval(c, p->ids, p->n, lg);
    for (int i = 0; !st && i < MAX_GEN; i++) {
        tok[i] = tc_argmax(lg, nv);
        st = tnd_ctx_eval(c, &tok[i], 1, lg);
    }
    free(lg);
    tnd_ctx_free(c);
    return st;
}

/* o against alone's tokens a: the same tokens; a LENGTH finish after
 * max_tokens of them, an EOG where alone's next token ends the turn. */
static void check_same(const char *what, int i, const tnd_model *m, const out *o, const int32_t *a, int max_tokens) {
    CHECK(o->n_done == 1, "%s: request %d: on_done ran %d times", what, i, o->n_done);
    CHECK(o->n == o->n_gen && o->n <= max_tokens, "%s: request %d: %d tokens passed, %d counted", what, i, o->n,
          o->n_gen);
    CHECK(!memcmp(o->tok, a, sizeof(int32_t) * (size_t)(o->n < MAX_GEN ? o->n : MAX_GEN)),
          "%s: request %d: tokens differ from it alone", what, i);
    if (o->why == TND_FINISH_EOG)
        CHECK(o->n < MAX_GEN && tnd_tokenizer_is_eog(tnd_model_tokenizer(m), a[o->n]),
              "%s: request %d: ended its turn after %d tokens, alone goes on", what, i, o->n);
    else
        CHECK(o->why == TND_FINISH_LENGTH && o->n == max_tokens, "%s: request %d: finished (%d) after %d tokens", what,
              i, (int)o->why, o->n);
}

/* Steps b until every one of n outs is done (a bound on rounds: no hang). */
static void drain(tnd_batcher *b, out *o, int n) {
    for (int round = 0; round < 10000; round++) {
        int done = 0;
        for (int i = 0; i < n; i++) done += o[i].n_done;
        if (done == n) return;
        tnd_status st = tnd_batcher_step(b);
        CHECK(!st, "step: %s", tnd_last_error());
        if (st) return;
    }
    CHECK(false, "requests did not finish in 10000 rounds");
}

/* p through b alone, to its end (MAX_GEN tokens at most); b's counters
 * after it into st (may be NULL). */
static void one(tnd_batcher *b, const prompt *p, out *o, tnd_batcher_stats *st) {
    tnd_request r = request(p, o, MAX_GEN);
    CHECK_ST(tnd_batcher_submit(b, &r, NULL));
    drain(b, o, 1);
    if (st) tnd_batcher_stats_get(b, st);
}

typedef struct producer {
    tnd_batcher *b;
    const prompt *p;
    out *o;
    int n, refused;
    tnd_status st;
} producer;

static void *produce(void *arg) {
    producer *pr = arg;
    for (int i = 0; i < pr->n && !pr->st; i++) {
        tnd_request r = request(&pr->p[i], &pr->o[i], MAX_GEN);
        while ((pr->st = tnd_batcher_submit(pr->b, &r, NULL)) == TND_ERR_LIMIT) {
            pr->refused++;
            sched_yield(); /* back-pressure: wait for the stepping thread to take one */
        }
    }
    return NULL;
}

int main(void) {
    char path[4096];
    bool tiny;
    int rc = fx_test_model(path, sizeof path, &tiny);
    if (rc) return rc;
    tnd_model *m = fx_load(path, 2);
    if (tiny) unlink(path);
    if (!m) return 1;
    const int nv = tnd_model_n_vocab(m);
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.cpu_exact = true;
    cp.n_ctx = N_CTX;
    cp.n_batch = 32; /* prompts longer than a round's budget: prefill in chunks beside decodes */
    cp.n_seq_max = 3;

    const bool san = getenv("TND_SANITIZED") != NULL && !tiny; /* the tiny model affords the full sizes */
    const int nreq = san ? 5 : N_REQ; /* at least 5: the cancel part names requests 0, 1, 2 and the last */
    prompt p[N_REQ];
    int32_t ref[N_REQ][MAX_GEN];
    tc_rng = 7;
    for (int i = 0; i < nreq; i++) {
        p[i].n = san ? 4 + (5 * i) % 9 : 4 + (11 * i) % 37;
        for (int t = 0; t < p[i].n; t++) p[i].ids[t] = (int32_t)(tc_xorshift() % (uint64_t)nv);
        CHECK_ST(alone(m, &cp, &p[i], ref[i]));
    }

    tnd_ctx *c = NULL;
    tnd_batcher *b = NULL;
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    CHECK_ST(tnd_batcher_new(c, nreq, &b));
    if (!b) return tc_summary();

    /* more requests than slots: all finish, each as alone; the slots cycle */
    out o[N_REQ];
    memset(o, 0, sizeof o);
    uint64_t id[N_REQ];
    for (int i = 0; i < nreq; i++) {
        tnd_request r = request(&p[i], &o[i], MAX_GEN - (i % 3)); /* different lengths: slots free at other times */
        CHECK_ST(tnd_batcher_submit(b, &r, &id[i]));
    }
    tnd_batcher_stats s;
    tnd_batcher_stats_get(b, &s);
    CHECK(s.queued == nreq && s.running == 0, "queued %d running %d after submitting", s.queued, s.running);
    CHECK_ST(tnd_batcher_step(b));
    tnd_batcher_stats_get(b, &s);
    CHECK(s.running == cp.n_seq_max && s.queued == nreq - cp.n_seq_max, "after a step: running %d queued %d",
          s.running, s.queued);
    drain(b, o, nreq);
    uint64_t gen = 0, prompt_tok = 0;
    for (int i = 0; i < nreq; i++) {
        check_same("queued", i, m, &o[i], ref[i], MAX_GEN - (i % 3));
        CHECK(o[i].n_prompt == p[i].n, "request %d: n_prompt %d", i, o[i].n_prompt);
        gen += (uint64_t)o[i].n_gen;
        prompt_tok += (uint64_t)p[i].n;
    }
    tnd_batcher_stats_get(b, &s);
    CHECK(s.n_done == (uint64_t)nreq && s.n_gen_tokens >= gen && s.n_prompt_tokens + s.n_prompt_reused == prompt_tok &&
              s.running == 0 &&
              s.queued == 0 && s.kv_rows_used == 0 && s.n_gen_rounds <= s.n_rounds && s.decode_s <= s.round_s,
          "counters: done %llu gen %llu/%llu prompt %llu running %d queued %d kv %lld",
          (unsigned long long)s.n_done, (unsigned long long)s.n_gen_tokens, (unsigned long long)gen,
          (unsigned long long)s.n_prompt_tokens, s.running, s.queued, (long long)s.kv_rows_used);
    CHECK(s.kv_rows_total == (int64_t)cp.n_seq_max * N_CTX, "kv_rows_total %lld", (long long)s.kv_rows_total);
    CHECK(!tnd_batcher_wait(b, 0.001), "wait says there is work with nothing queued");

    /* a full queue refuses, takes again once a step admits */
    memset(o, 0, sizeof o);
    for (int i = 0; i < nreq; i++) {
        tnd_request r = request(&p[i], &o[i], MAX_GEN);
        CHECK_ST(tnd_batcher_submit(b, &r, &id[i]));
    }
    out extra = {0};
    tnd_request rx = request(&p[0], &extra, MAX_GEN);
    CHECK(tnd_batcher_submit(b, &rx, NULL) == TND_ERR_LIMIT, "a full queue took a request");
    CHECK(tnd_batcher_wait(b, 0), "wait says there is no work with a full queue");
    /* cancel: one queued, one running (after the first step) */
    tnd_batcher_cancel(b, id[nreq - 1]);
    CHECK_ST(tnd_batcher_step(b));
    tnd_batcher_cancel(b, id[1]);
    tnd_batcher_cancel(b, 999999); /* unknown: nothing */
    CHECK_ST(tnd_batcher_submit(b, &rx, NULL));
    o[2].stop_after = 2; /* set before its first token: it is running, tokens come only from steps */
    for (int round = 0; round < 10000; round++) {
        int done = extra.n_done;
        for (int i = 0; i < nreq; i++) done += o[i].n_done;
        if (done == nreq + 1) break;
        CHECK_ST(tnd_batcher_step(b));
    }
    CHECK(o[nreq - 1].why == TND_FINISH_CANCEL && o[nreq - 1].n_gen == 0 && o[nreq - 1].n_done == 1,
          "cancelled while queued: finish %d after %d tokens", (int)o[nreq - 1].why, o[nreq - 1].n_gen);
    CHECK(o[1].why == TND_FINISH_CANCEL && o[1].n_done == 1, "cancelled while running: finish %d", (int)o[1].why);
    CHECK(!memcmp(o[1].tok, ref[1], sizeof(int32_t) * (size_t)(o[1].n < MAX_GEN ? o[1].n : MAX_GEN)),
          "cancelled request's tokens before it ended");
    CHECK(o[2].why == TND_FINISH_STOP && o[2].n_gen == 2 && !memcmp(o[2].tok, ref[2], sizeof(int32_t) * 2),
          "on_token stop: finish %d after %d tokens", (int)o[2].why, o[2].n_gen);
    for (int i = 3; i < nreq - 1; i++) check_same("beside cancels", i, m, &o[i], ref[i], MAX_GEN);
    check_same("beside cancels", 0, m, &o[0], ref[0], MAX_GEN);
    check_same("after a refusal", 0, m, &extra, ref[0], MAX_GEN);

    /* bad requests: errors, nothing queued */
    out bad = {0};
    tnd_request rb = request(&p[0], &bad, 0);
    CHECK(tnd_batcher_submit(b, &rb, NULL) == TND_ERR_ARG, "max_tokens 0 taken");
    rb = request(&p[0], &bad, 4);
    rb.n_prompt = 0;
    CHECK(tnd_batcher_submit(b, &rb, NULL) == TND_ERR_ARG, "an empty prompt taken");
    int32_t big[N_CTX];
    for (int i = 0; i < N_CTX; i++) big[i] = i;
    rb.prompt = big;
    rb.n_prompt = N_CTX;
    CHECK(tnd_batcher_submit(b, &rb, NULL) == TND_ERR_ARG && strstr(tnd_last_error(), "96"),
          "a prompt of n_ctx tokens taken (%s)", tnd_last_error());
    big[3] = nv;
    rb.n_prompt = 8;
    CHECK(tnd_batcher_submit(b, &rb, NULL) == TND_ERR_ARG, "a token out of range taken");
    tnd_batcher_stats_get(b, &s);
    CHECK(s.queued == 0 && s.running == 0 && !bad.n_done, "bad requests left queued %d running %d", s.queued,
          s.running);

    /* a second thread submits while this one steps */
    memset(o, 0, sizeof o);
    producer pr = {.b = b, .p = p, .o = o, .n = nreq};
    pthread_t th;
    CHECK(!pthread_create(&th, NULL, produce, &pr), "pthread_create");
    for (int round = 0; round < 100000; round++) {
        int done = 0;
        for (int i = 0; i < nreq; i++) done += o[i].n_done; /* on_done runs on this thread */
        if (done == nreq) break;
        if (!tnd_batcher_wait(b, 0.01)) continue;
        CHECK_ST(tnd_batcher_step(b));
    }
    pthread_join(th, NULL);
    CHECK_ST(pr.st);
    for (int i = 0; i < nreq; i++) check_same("from a thread", i, m, &o[i], ref[i], MAX_GEN);

    /* prompt caching: a next turn (request 0's prompt, the tokens it
     * generated, 20 more) takes the slot that holds request 0's tokens and
     * evaluates only the rest (its last 16 tokens at least: tandem.h), with
     * the tokens it gives alone; with caching off, the same tokens, nothing
     * reused */
    {
        out o1 = {0}, o2 = {0}, o3 = {0};
        one(b, &p[0], &o1, NULL);
        check_same("before a next turn", 0, m, &o1, ref[0], MAX_GEN);
        prompt nx = p[0];
        for (int i = 0; i < o1.n && i < MAX_GEN; i++) nx.ids[nx.n++] = o1.tok[i];
        for (int i = 0; i < 20; i++) nx.ids[nx.n++] = (int32_t)(tc_xorshift() % (uint64_t)nv);
        int32_t ref_nx[MAX_GEN];
        CHECK_ST(alone(m, &cp, &nx, ref_nx));
        /* its rows: the prompt and every generated token but a LENGTH finish's last (sampled, never fed) */
        const int held = p[0].n + o1.n - (o1.why == TND_FINISH_LENGTH);
        CHECK(held <= nx.n - 16, "the next turn re-evaluates more than its last 16 tokens: %d held of %d", held, nx.n);
        tnd_batcher_stats s0, s1, s2;
        tnd_batcher_stats_get(b, &s0);
        one(b, &nx, &o2, &s1);
        check_same("next turn", 0, m, &o2, ref_nx, MAX_GEN);
        CHECK(s1.n_prompt_reused - s0.n_prompt_reused == (uint64_t)held &&
                  s1.n_prompt_tokens - s0.n_prompt_tokens == (uint64_t)(nx.n - held),
              "next turn of %d tokens: %llu reused, %llu evaluated; want %d reused", nx.n,
              (unsigned long long)(s1.n_prompt_reused - s0.n_prompt_reused),
              (unsigned long long)(s1.n_prompt_tokens - s0.n_prompt_tokens), held);
        tnd_batcher_set_prompt_cache(b, false);
        one(b, &nx, &o3, &s2);
        check_same("caching off", 0, m, &o3, ref_nx, MAX_GEN);
        CHECK(s2.n_prompt_reused == s1.n_prompt_reused && s2.n_prompt_tokens - s1.n_prompt_tokens == (uint64_t)nx.n,
              "caching off: %llu reused, %llu evaluated of %d", (unsigned long long)(s2.n_prompt_reused -
              s1.n_prompt_reused), (unsigned long long)(s2.n_prompt_tokens - s1.n_prompt_tokens), nx.n);
        for (int s3 = 0; s3 < cp.n_seq_max; s3++)
            CHECK(tnd_seq_n_past(c, s3) < 0, "caching off: sequence %d still live with no request", s3);
        tnd_batcher_set_prompt_cache(b, true);

        /* the same next turn twice: the second takes the first's slot truncated (its rows past the
         * prompt's last 16 tokens dropped and written again), with the same tokens */
        out o4 = {0}, o5 = {0};
        one(b, &nx, &o4, &s1);
        one(b, &nx, &o5, &s2);
        check_same("sent again", 0, m, &o5, ref_nx, MAX_GEN);
        CHECK(s2.n_prompt_reused - s1.n_prompt_reused == (uint64_t)(nx.n - 16),
              "sent again: %llu reused, want %d (all but the last 16)",
              (unsigned long long)(s2.n_prompt_reused - s1.n_prompt_reused), nx.n - 16);

        /* the same on SimGPU, a random placement (KV rows on both sides): the CPU's tokens */
        tnd_ctx_params sp = cp;
        sp.device = TND_DEVICE_SIM;
        sp.placement = "random:7";
        sp.n_seq_max = 1; /* no free slot: the kept one is taken for a common part under 16 */
        tnd_ctx *cs = NULL;
        tnd_batcher *bs = NULL;
        CHECK_ST(tnd_ctx_new(m, &sp, &cs));
        if (cs) CHECK_ST(tnd_batcher_new(cs, 2, &bs));
        if (bs) {
            out q1 = {0}, q2 = {0};
            one(bs, &p[0], &q1, NULL);
            one(bs, &nx, &q2, &s1);
            check_same("SimGPU, first turn", 0, m, &q1, ref[0], MAX_GEN);
            check_same("SimGPU, next turn", 0, m, &q2, ref_nx, MAX_GEN);
            CHECK(s1.n_prompt_reused == (uint64_t)held, "SimGPU: %llu reused, want %d",
                  (unsigned long long)s1.n_prompt_reused, held);
            tnd_batcher_free(bs);
        }
        tnd_ctx_free(cs);
    }

    /* two conversations with a common beginning (a system prompt), slots
     * free: the second takes a free slot, not the first's, so the first's
     * next turn finds all its rows; the batcher's free then frees the
     * kept slots too */
    {
        tnd_ctx *c2 = NULL;
        tnd_batcher *b2 = NULL;
        CHECK_ST(tnd_ctx_new(m, &cp, &c2));
        if (c2) CHECK_ST(tnd_batcher_new(c2, 4, &b2));
        if (b2) {
            prompt pa, pb;
            pa.n = pb.n = 50;
            for (int i = 0; i < 50; i++) {
                pa.ids[i] = (int32_t)(tc_xorshift() % (uint64_t)nv);
                pb.ids[i] = i < 20 ? pa.ids[i] : (int32_t)(tc_xorshift() % (uint64_t)nv);
            }
            out oa = {0}, ob = {0}, oa2 = {0};
            one(b2, &pa, &oa, NULL);
            one(b2, &pb, &ob, NULL);
            prompt pa2 = pa;
            for (int i = 0; i < oa.n && i < MAX_GEN; i++) pa2.ids[pa2.n++] = oa.tok[i];
            for (int i = 0; i < 20; i++) pa2.ids[pa2.n++] = (int32_t)(tc_xorshift() % (uint64_t)nv);
            int32_t ref_a2[MAX_GEN];
            CHECK_ST(alone(m, &cp, &pa2, ref_a2));
            tnd_batcher_stats s0, s1;
            tnd_batcher_stats_get(b2, &s0);
            one(b2, &pa2, &oa2, &s1);
            const int held_a = pa.n + oa.n - (oa.why == TND_FINISH_LENGTH);
            CHECK(s0.n_prompt_reused == 0, "the second conversation reused %llu tokens of the first's slot",
                  (unsigned long long)s0.n_prompt_reused);
            CHECK(s1.n_prompt_reused - s0.n_prompt_reused == (uint64_t)held_a,
                  "the first conversation's next turn reused %llu, want its %d",
                  (unsigned long long)(s1.n_prompt_reused - s0.n_prompt_reused), held_a);
            check_same("a conversation beside another", 0, m, &oa2, ref_a2, MAX_GEN);
            int live = 0;
            for (int s3 = 0; s3 < cp.n_seq_max; s3++) live += tnd_seq_n_past(c2, s3) >= 0;
            CHECK(live == 2, "%d sequences live: want the two conversations' kept slots", live);
            /* a third conversation cancelled after 3 tokens (a stop button) keeps the rows it
             * evaluated: its next turn reuses them */
            prompt pc;
            pc.n = 30;
            for (int i = 0; i < pc.n; i++) pc.ids[i] = (int32_t)(tc_xorshift() % (uint64_t)nv);
            out oc = {0}, oc2 = {0};
            uint64_t idc = 0;
            tnd_request r = request(&pc, &oc, MAX_GEN);
            CHECK_ST(tnd_batcher_submit(b2, &r, &idc));
            for (int k = 0; k < 100 && oc.n < 3 && !oc.n_done; k++) CHECK_ST(tnd_batcher_step(b2));
            tnd_batcher_cancel(b2, idc);
            CHECK_ST(tnd_batcher_step(b2));
            CHECK(oc.n_done == 1 && oc.why == TND_FINISH_CANCEL && oc.n == 3, "cancelled after %d tokens: finish %d",
                  oc.n, (int)oc.why);
            prompt pc2 = pc;
            for (int i = 0; i < oc.n; i++) pc2.ids[pc2.n++] = oc.tok[i];
            for (int i = 0; i < 20; i++) pc2.ids[pc2.n++] = (int32_t)(tc_xorshift() % (uint64_t)nv);
            int32_t ref_c2[MAX_GEN];
            CHECK_ST(alone(m, &cp, &pc2, ref_c2));
            tnd_batcher_stats_get(b2, &s0);
            one(b2, &pc2, &oc2, &s1);
            /* its rows: the prompt and the tokens fed before the last (which was queued when cancelled) */
            CHECK(s1.n_prompt_reused - s0.n_prompt_reused == (uint64_t)(pc.n + oc.n - 1),
                  "after a cancel: %llu reused, want %d", (unsigned long long)(s1.n_prompt_reused - s0.n_prompt_reused),
                  pc.n + oc.n - 1);
            check_same("after a cancel", 0, m, &oc2, ref_c2, MAX_GEN);
            tnd_batcher_free(b2);
            for (int s3 = 0; s3 < cp.n_seq_max; s3++)
                CHECK(tnd_seq_n_past(c2, s3) < 0, "sequence %d still live after the batcher's free", s3);
        }
        tnd_ctx_free(c2);
    }

    /* free ends what is queued and running */
    memset(o, 0, sizeof o);
    for (int i = 0; i < nreq; i++) {
        tnd_request r = request(&p[i], &o[i], MAX_GEN);
        CHECK_ST(tnd_batcher_submit(b, &r, NULL));
    }
    CHECK_ST(tnd_batcher_step(b));
    tnd_batcher_free(b);
    for (int i = 0; i < nreq; i++)
        CHECK(o[i].n_done == 1 && o[i].why == TND_FINISH_CANCEL, "request %d at free: done %d finish %d", i,
              o[i].n_done, (int)o[i].why);
    for (int s2 = 0; s2 < cp.n_seq_max; s2++)
        CHECK(tnd_seq_n_past(c, s2) < 0, "sequence %d still live after the batcher's free", s2);
    tnd_ctx_free(c);
    tnd_model_free(m);
    return tc_summary();
}
