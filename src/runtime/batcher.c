/* Continuous batching (include/tandem.h; docs/ARCHITECTURE.md: Continuous
 * batching): requests queue, take a sequence slot of the context when one
 * is free, go through tnd_ctx_step rounds with whatever else runs, and give
 * their slot back when they finish. The lock guards only the queue, the
 * cancel marks and the counters; the context and the slots belong to the
 * stepping thread, and callbacks run without the lock held (so a callback
 * may cancel or submit).
 *
 * Prompt caching: a finished request's sequence stays live, its slot
 * "kept" with the tokens its KV rows hold. A request whose prompt continues
 * a kept slot's tokens takes that slot, truncated to the common part, and
 * evaluates only the rest (a chat's next turn re-sends the whole
 * conversation); else it takes a free slot, else the least recently used
 * kept one, truncated to what it shares (take_slot). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "util.h"

typedef struct breq {
    uint64_t id;
    int32_t *prompt;
    int n_prompt, max_tokens, n_gen, seq;
    bool cancel;
    tnd_finish why; /* set when it finishes */
    tnd_sampler *smp;
    bool (*on_token)(void *user, int32_t token);
    void (*on_done)(void *user, tnd_finish why, int n_prompt, int n_gen);
    void *user;
} breq;

struct tnd_batcher {
    tnd_ctx *c;
    const tnd_tokenizer *tok;
    int n_vocab, n_ctx, n_seq_max, max_queue;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    breq **queue; /* FIFO: queue[qh .. qh + nq) mod max_queue */
    int qh, nq;
    breq **run; /* by sequence slot; NULL: free */
    int n_run;
    uint64_t next_id;
    uint64_t wakes; /* tnd_batcher_wake calls: a waiter returns when it changes */
    float *lg; /* a copy of one sequence's logits: the sampler changes them */
    tnd_batcher_stats st;
    /* prompt caching (stepping thread): per slot, the tokens its KV rows
     * hold or will once its queue is evaluated ([n_ctx], made on first use) */
    bool cache;
    bool *kept;         /* live sequence, no request: rows kept for a prompt that begins with held */
    int32_t **held;
    int *n_held;
    uint64_t *used_at;  /* admission clock of the slot's last request: the least recent is evicted */
    uint64_t clock;
};

/* Tokens a kept slot may lose and still count as continued by a prompt
 * (take_slot): its last REEVAL_MIN evaluated again, and what a chat
 * template writes otherwise around the reply it renders again (the end of
 * the turn, the reply's text tokenized anew). */
#define CONTINUE_SLACK 32
/* A prompt's last tokens are evaluated again even when a kept slot holds
 * them: as a chunk of 16 or more they take the prefill's kernels (on the
 * CPU a lone token's matvec, and below 16 tokens the non-AMX kernels,
 * round differently), so a request sent again gets the logits of its first
 * evaluation on the CPU when that one's last round also had 16 tokens or
 * more (a prompt of 16 to n_batch tokens run alone, say). */
#define REEVAL_MIN 16

static void req_free(breq *r) {
    if (!r) return;
    tnd_sampler_free(r->smp);
    free(r->prompt);
    free(r);
}

/* Calls r's on_done and frees it; outside the lock. */
static void finish(breq *r) {
    if (r->on_done) r->on_done(r->user, r->why, r->n_prompt, r->n_gen);
    req_free(r);
}

tnd_status tnd_batcher_new(tnd_ctx *c, int max_queue, tnd_batcher **out) {
    *out = NULL;
    if (!c) return tnd_fail(TND_ERR_ARG, "no context for the batcher");
    if (max_queue <= 0) return tnd_fail(TND_ERR_ARG, "the batcher's queue must hold at least one request (got %d)",
                                        max_queue);
    for (int s = 0; s < tnd_ctx_n_seq_max(c); s++)
        if (tnd_seq_n_past(c, s) >= 0)
            return tnd_fail(TND_ERR_ARG, "the context's sequence %d is in use: a batcher takes a context whose "
                            "sequences are all free", s);
    tnd_batcher *b = tnd_calloc(1, sizeof *b);
    if (!b) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    const tnd_model *m = tnd_ctx_model(c);
    b->c = c;
    b->tok = tnd_model_tokenizer(m);
    b->n_vocab = tnd_model_n_vocab(m);
    b->n_ctx = tnd_ctx_n_ctx(c);
    b->n_seq_max = tnd_ctx_n_seq_max(c);
    b->max_queue = max_queue;
    b->next_id = 1;
    b->queue = tnd_calloc((size_t)max_queue, sizeof *b->queue);
    b->run = tnd_calloc((size_t)b->n_seq_max, sizeof *b->run);
    b->lg = malloc(sizeof(float) * (size_t)b->n_vocab);
    b->cache = true;
    b->kept = tnd_calloc((size_t)b->n_seq_max, sizeof *b->kept);
    b->held = tnd_calloc((size_t)b->n_seq_max, sizeof *b->held);
    b->n_held = tnd_calloc((size_t)b->n_seq_max, sizeof *b->n_held);
    b->used_at = tnd_calloc((size_t)b->n_seq_max, sizeof *b->used_at);
    if (!b->queue || !b->run || !b->lg || !b->kept || !b->held || !b->n_held || !b->used_at) {
        free(b->queue);
        free(b->run);
        free(b->lg);
        free(b->kept);
        free(b->held);
        free(b->n_held);
        free(b->used_at);
        free(b);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->st.max_queue = max_queue;
    b->st.n_seq_max = b->n_seq_max;
    b->st.kv_rows_total = (int64_t)b->n_seq_max * b->n_ctx;
    *out = b;
    return TND_OK;
}

/* Publishes the running count and the KV rows the running sequences hold,
 * the one place either stat is set: counted from the slots, not kept up
 * to date apart. Under the lock, on the stepping thread (which owns the
 * context), so the two always change together: a reader never sees no
 * sequence running but rows still held. */
static void publish_running(tnd_batcher *b) {
    int64_t rows = 0;
    for (int s = 0; s < b->n_seq_max; s++)
        if (b->run[s]) rows += tnd_seq_n_past(b->c, s);
    b->st.running = b->n_run;
    b->st.kv_rows_used = rows;
}

/* Takes running request in slot s out; stepping thread. Its sequence is
 * kept for prompt caching with the rows evaluated so far: a cancelled
 * request has tokens queued (the rest of its prompt, or its last sampled
 * token), dropped here, so held keeps the first n_past. After a failed
 * round it is freed. */
static breq *retire(tnd_batcher *b, int s, tnd_finish why) {
    breq *r = b->run[s];
    r->why = why;
    const int past = tnd_seq_n_past(b->c, s);
    b->kept[s] = b->cache && why != TND_FINISH_ERROR && b->held[s] && past > 0 && past <= b->n_held[s] &&
                 !tnd_seq_truncate(b->c, s, past);
    if (b->kept[s]) b->n_held[s] = past;
    else tnd_seq_free(b->c, s);
    pthread_mutex_lock(&b->mu);
    b->run[s] = NULL;
    b->n_run--;
    publish_running(b);
    b->st.n_done++;
    pthread_mutex_unlock(&b->mu);
    return r;
}

void tnd_batcher_free(tnd_batcher *b) {
    if (!b) return;
    for (int s = 0; s < b->n_seq_max; s++)
        if (b->run[s]) finish(retire(b, s, TND_FINISH_CANCEL));
    for (int s = 0; s < b->n_seq_max; s++) {
        if (b->kept[s]) tnd_seq_free(b->c, s); /* the context's sequences all free again */
        free(b->held[s]);
    }
    for (int i = 0; i < b->nq; i++) {
        breq *r = b->queue[(b->qh + i) % b->max_queue];
        r->why = TND_FINISH_CANCEL;
        finish(r);
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b->queue);
    free(b->run);
    free(b->lg);
    free(b->kept);
    free(b->held);
    free(b->n_held);
    free(b->used_at);
    free(b);
}

void tnd_batcher_set_prompt_cache(tnd_batcher *b, bool on) {
    if (!b) return;
    b->cache = on;
    for (int s = 0; !on && s < b->n_seq_max; s++)
        if (b->kept[s]) {
            tnd_seq_free(b->c, s);
            b->kept[s] = false;
        }
}

/* The tokens kept slot s shares with the beginning of r's prompt, at most
 * n_prompt - REEVAL_MIN. */
static int common(const tnd_batcher *b, int s, const breq *r) {
    int n = 0;
    const int lim = TND_MIN(b->n_held[s], r->n_prompt - REEVAL_MIN);
    while (n < lim && b->held[s][n] == r->prompt[n]) n++;
    return n;
}

/* A slot for r (stepping thread, under the lock; *keep: the rows it keeps):
 *   1. the kept slot the prompt continues (it shares all the slot holds but
 *      CONTINUE_SLACK tokens at most) that shares the most;
 *   2. else a free slot, so that other conversations' rows stay;
 *   3. else the least recently used kept slot, truncated to what it shares
 *      (a common system prompt, say). */
static tnd_status take_slot(tnd_batcher *b, const breq *r, int *slot, int *keep) {
    int best = -1, lcp = 0, lru = -1, n_free = b->n_seq_max - b->n_run;
    for (int s = 0; s < b->n_seq_max; s++) {
        if (!b->kept[s]) continue;
        if (tnd_seq_n_past(b->c, s) != b->n_held[s]) { /* its rows changed outside the batcher: not to be trusted */
            tnd_seq_free(b->c, s);
            b->kept[s] = false;
            continue;
        }
        n_free--;
        if (lru < 0 || b->used_at[s] < b->used_at[lru]) lru = s;
        const int n = common(b, s, r);
        if (n > lcp && b->n_held[s] - n <= CONTINUE_SLACK) best = s, lcp = n;
    }
    if (best < 0 && n_free == 0 && lru >= 0) best = lru, lcp = common(b, lru, r);
    if (best >= 0) {
        b->kept[best] = false;
        if (!tnd_seq_truncate(b->c, best, lcp)) {
            *slot = best;
            *keep = lcp;
            return TND_OK;
        }
        tnd_seq_free(b->c, best); /* cannot be (checked above), but then afresh */
        tnd_clear_error();
    }
    *keep = 0;
    return tnd_seq_new(b->c, slot);
}

tnd_status tnd_batcher_submit(tnd_batcher *b, const tnd_request *q, uint64_t *id) {
    if (!b || !q) return tnd_fail(TND_ERR_ARG, "no batcher or no request");
    if (!q->prompt || q->n_prompt <= 0) return tnd_fail(TND_ERR_ARG, "the request has no prompt tokens");
    if (q->n_prompt >= b->n_ctx)
        return tnd_fail(TND_ERR_ARG, "the prompt has %d tokens but a sequence holds %d (the prompt and at least one "
                        "generated token)", q->n_prompt, b->n_ctx);
    if (q->max_tokens <= 0) return tnd_fail(TND_ERR_ARG, "max_tokens must be positive (got %d)", q->max_tokens);
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= b->n_vocab)
            return tnd_fail(TND_ERR_ARG, "prompt token %d: id %d out of range [0, %d)", i, q->prompt[i], b->n_vocab);
    breq *r = tnd_calloc(1, sizeof *r);
    if (!r || !(r->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt))) {
        free(r);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    tnd_status st = tnd_sampler_new(&q->sampling, &r->smp);
    if (st) {
        req_free(r);
        return st;
    }
    memcpy(r->prompt, q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
    r->n_prompt = q->n_prompt;
    r->max_tokens = q->max_tokens;
    r->seq = -1;
    r->on_token = q->on_token;
    r->on_done = q->on_done;
    r->user = q->user;
    pthread_mutex_lock(&b->mu);
    if (b->nq == b->max_queue) {
        pthread_mutex_unlock(&b->mu);
        req_free(r);
        return tnd_fail(TND_ERR_LIMIT, "the queue is full (%d requests wait for %d sequence slots)", b->max_queue,
                        b->n_seq_max);
    }
    r->id = b->next_id++;
    b->queue[(b->qh + b->nq++) % b->max_queue] = r;
    b->st.queued = b->nq;
    if (id) *id = r->id;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return TND_OK;
}

void tnd_batcher_cancel(tnd_batcher *b, uint64_t id) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < b->nq; i++) {
        breq *r = b->queue[(b->qh + i) % b->max_queue];
        if (r->id == id) r->cancel = true;
    }
    for (int s = 0; s < b->n_seq_max; s++)
        if (b->run[s] && b->run[s]->id == id) b->run[s]->cancel = true;
    pthread_mutex_unlock(&b->mu);
}

/* Takes the cancelled requests out of the queue (in order kept) into
 * out[*n]; under the lock. */
static void drop_cancelled(tnd_batcher *b, breq **out, int *n) {
    int k = 0;
    for (int i = 0; i < b->nq; i++) {
        breq *r = b->queue[(b->qh + i) % b->max_queue];
        if (r->cancel) {
            r->why = TND_FINISH_CANCEL;
            out[(*n)++] = r;
            b->st.n_done++;
        } else {
            b->queue[(b->qh + k++) % b->max_queue] = r;
        }
    }
    b->nq = k;
}

/* Retires cancelled running requests and fills free slots from the queue. */
static tnd_status admit(tnd_batcher *b) {
    breq **gone = malloc(sizeof(breq *) * (size_t)(b->max_queue + 1));
    if (!gone) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    int n_gone = 0;
    for (int s = 0; s < b->n_seq_max; s++) {
        if (!b->run[s]) continue;
        pthread_mutex_lock(&b->mu);
        bool cancel = b->run[s]->cancel;
        pthread_mutex_unlock(&b->mu);
        if (cancel) finish(retire(b, s, TND_FINISH_CANCEL));
    }
    tnd_status st = TND_OK;
    pthread_mutex_lock(&b->mu);
    drop_cancelled(b, gone, &n_gone);
    while (b->nq && b->n_run < b->n_seq_max) {
        breq *r = b->queue[b->qh];
        int s, keep;
        if ((st = take_slot(b, r, &s, &keep))) break; /* a slot freed outside the batcher: cannot be, but no crash */
        if (!b->held[s] && !(b->held[s] = malloc(sizeof(int32_t) * (size_t)b->n_ctx))) {
            tnd_seq_free(b->c, s);
            st = tnd_fail(TND_ERR_NOMEM, "out of memory");
            break;
        }
        if ((st = tnd_seq_feed(b->c, s, r->prompt + keep, r->n_prompt - keep))) {
            tnd_seq_free(b->c, s);
            break;
        }
        memcpy(b->held[s], r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
        b->n_held[s] = r->n_prompt;
        b->used_at[s] = ++b->clock;
        for (int i = 0; i < r->n_prompt; i++) tnd_sampler_accept(r->smp, r->prompt[i]);
        b->qh = (b->qh + 1) % b->max_queue;
        b->nq--;
        r->seq = s;
        b->run[s] = r;
        b->n_run++;
        b->st.n_prompt_tokens += (uint64_t)(r->n_prompt - keep);
        b->st.n_prompt_reused += (uint64_t)keep;
    }
    b->st.queued = b->nq;
    publish_running(b);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < n_gone; i++) finish(gone[i]);
    free(gone);
    return st;
}

tnd_status tnd_batcher_step(tnd_batcher *b) {
    if (!b) return tnd_fail(TND_ERR_ARG, "no batcher");
    tnd_status st = admit(b); /* its retirements and admissions are in the stats already */
    if (st || !b->n_run) return st;
    const double t0 = tnd_time_s();
    const tnd_status rs = tnd_ctx_step(b->c);
    const double dt = tnd_time_s() - t0;
    int n_sampled = 0, n_tok = 0;
    for (int s = 0; s < b->n_seq_max; s++) {
        if (rs && b->kept[s]) { /* a failed round (a plan swap's copies, say) leaves no rows to trust */
            tnd_seq_free(b->c, s);
            b->kept[s] = false;
        }
        breq *r = b->run[s];
        if (!r) continue;
        if (rs) {
            finish(retire(b, s, TND_FINISH_ERROR));
            continue;
        }
        const float *l = tnd_seq_logits(b->c, s);
        if (!l) continue; /* its prompt is still being evaluated in chunks */
        memcpy(b->lg, l, sizeof(float) * (size_t)b->n_vocab);
        int32_t t = tnd_sampler_sample(r->smp, b->lg, b->n_vocab);
        n_sampled++;
        if (b->tok && tnd_tokenizer_is_eog(b->tok, t)) {
            finish(retire(b, s, TND_FINISH_EOG));
            continue;
        }
        r->n_gen++;
        n_tok++;
        tnd_finish why = TND_FINISH_LENGTH;
        bool go = r->on_token ? r->on_token(r->user, t) : true;
        if (!go) why = TND_FINISH_STOP;
        else if (r->n_gen < r->max_tokens && tnd_seq_n_past(b->c, s) + 1 <= b->n_ctx) {
            if (!tnd_seq_feed(b->c, s, &t, 1)) { /* it goes on */
                b->held[s][b->n_held[s]++] = t;
                continue;
            }
            why = TND_FINISH_ERROR;                       /* cannot be (room was checked), but never silent */
            TND_WARN("request %llu: %s", (unsigned long long)r->id, tnd_last_error());
        }
        finish(retire(b, s, why));
    }
    pthread_mutex_lock(&b->mu);
    b->st.n_rounds++;
    b->st.round_s += dt;
    if (n_sampled) {
        b->st.n_gen_rounds++;
        b->st.decode_s += dt;
    }
    b->st.n_gen_tokens += (uint64_t)n_tok;
    publish_running(b); /* the round's sequences hold more rows now */
    pthread_mutex_unlock(&b->mu);
    return rs;
}

bool tnd_batcher_wait(tnd_batcher *b, double timeout_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double s = (double)until.tv_sec + until.tv_nsec * 1e-9 + (timeout_s > 0 ? timeout_s : 0);
    until.tv_sec = (time_t)s;
    until.tv_nsec = (long)((s - (double)until.tv_sec) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_nsec = 999999999L;
    pthread_mutex_lock(&b->mu);
    const uint64_t w0 = b->wakes;
    while (!b->nq && !b->n_run && b->wakes == w0)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &until)) break; /* timed out */
    bool work = b->nq || b->n_run;
    pthread_mutex_unlock(&b->mu);
    return work;
}

void tnd_batcher_wake(tnd_batcher *b) {
    pthread_mutex_lock(&b->mu);
    b->wakes++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}
void tnd_batcher_stats_get(tnd_batcher *b, tnd_batcher_stats *s) {
    pthread_mutex_lock(&b->mu);
    *s = b->st;
    pthread_mutex_unlock(&b->mu);
}
