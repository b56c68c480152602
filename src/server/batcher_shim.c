/* Temporary stand-in for the lead's tnd_batcher (see batcher_shim.h): a
 * mutex-guarded FIFO, one sequence slot per running request, one
 * tnd_ctx_step per round. */
#include "server/batcher_shim.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

typedef struct job {
    tnd_request r;
    int32_t *prompt;
    uint64_t id;
    int seq;            /* -1 while queued */
    int n_gen;
    bool cancel;
    tnd_sampler *smp;
    struct job *next;
} job;

struct tnd_batcher {
    tnd_ctx *c;
    int max_queue, n_queued;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *queue, *run;   /* FIFO of waiting jobs; running jobs */
    uint64_t next_id;
    tnd_batcher_stats st;
};

tnd_status tnd_batcher_new(tnd_ctx *c, int max_queue, tnd_batcher **out) {
    tnd_batcher *b = calloc(1, sizeof *b);
    if (!b) return tnd_fail(TND_ERR_NOMEM, "out of memory");
    b->c = c;
    b->max_queue = max_queue;
    b->next_id = 1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return TND_OK;
}

static void job_end(tnd_batcher *b, job *j, tnd_finish why) {
    if (j->seq >= 0) tnd_seq_free(b->c, j->seq);
    j->r.on_done(j->r.user, why, j->r.n_prompt, j->n_gen);
    b->st.n_done++;
    tnd_sampler_free(j->smp);
    free(j->prompt);
    free(j);
}

void tnd_batcher_free(tnd_batcher *b) {
    if (!b) return;
    for (job *j = b->queue, *n; j; j = n) n = j->next, job_end(b, j, TND_FINISH_CANCEL);
    for (job *j = b->run, *n; j; j = n) n = j->next, job_end(b, j, TND_FINISH_CANCEL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

tnd_status tnd_batcher_submit(tnd_batcher *b, const tnd_request *r, uint64_t *id) {
    const int n_ctx = tnd_ctx_n_ctx(b->c);
    if (!r->prompt || r->n_prompt < 1 || r->max_tokens < 1 || !r->on_done)
        return tnd_fail(TND_ERR_ARG, "bad request (empty prompt or max_tokens < 1)");
    if (r->n_prompt >= n_ctx)
        return tnd_fail(TND_ERR_ARG, "the prompt has %d tokens; the context holds %d (and one generated token)",
                        r->n_prompt, n_ctx);
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->prompt = malloc(sizeof(int32_t) * (size_t)r->n_prompt))) {
        free(j);
        return tnd_fail(TND_ERR_NOMEM, "out of memory");
    }
    memcpy(j->prompt, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    j->r = *r;
    j->r.prompt = j->prompt;
    j->seq = -1;
    if (tnd_sampler_new(&r->sampling, &j->smp)) {
        free(j->prompt);
        free(j);
        return TND_ERR_ARG;
    }
    pthread_mutex_lock(&b->mu);
    if (b->n_queued >= b->max_queue) {
        pthread_mutex_unlock(&b->mu);
        tnd_sampler_free(j->smp);
        free(j->prompt);
        free(j);
        return tnd_fail(TND_ERR_LIMIT, "the queue is full (%d requests waiting)", b->max_queue);
    }
    j->id = b->next_id++;
    job **t = &b->queue;
    while (*t) t = &(*t)->next;
    *t = j;
    b->n_queued++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    *id = j->id;
    return TND_OK;
}

void tnd_batcher_cancel(tnd_batcher *b, uint64_t id) {
    pthread_mutex_lock(&b->mu);
    for (job *j = b->queue; j; j = j->next) if (j->id == id) j->cancel = true;
    for (job *j = b->run; j; j = j->next) if (j->id == id) j->cancel = true;
    pthread_mutex_unlock(&b->mu);
}

bool tnd_batcher_wait(tnd_batcher *b, double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&b->mu);
    while (!b->queue && !b->run)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &ts)) break;
    bool any = b->queue || b->run;
    pthread_mutex_unlock(&b->mu);
    return any;
}

tnd_status tnd_batcher_step(tnd_batcher *b) {
    const tnd_tokenizer *tok = tnd_model_tokenizer(tnd_ctx_model(b->c));
    const int n_ctx = tnd_ctx_n_ctx(b->c);
    pthread_mutex_lock(&b->mu);
    /* retire the cancelled */
    for (job **p = &b->run; *p;) {
        job *j = *p;
        if (!j->cancel) { p = &j->next; continue; }
        *p = j->next;
        pthread_mutex_unlock(&b->mu);
        job_end(b, j, TND_FINISH_CANCEL);
        pthread_mutex_lock(&b->mu);
    }
    for (job **p = &b->queue; *p;) {
        job *j = *p;
        if (!j->cancel) { p = &j->next; continue; }
        *p = j->next;
        b->n_queued--;
        pthread_mutex_unlock(&b->mu);
        job_end(b, j, TND_FINISH_CANCEL);
        pthread_mutex_lock(&b->mu);
    }
    /* admit */
    while (b->queue) {
        int s;
        if (tnd_seq_new(b->c, &s)) break;
        job *j = b->queue;
        b->queue = j->next;
        b->n_queued--;
        j->seq = s;
        j->next = b->run;
        b->run = j;
        tnd_seq_feed(b->c, s, j->prompt, j->r.n_prompt);
        b->st.n_prompt_tokens += (uint64_t)j->r.n_prompt;
    }
    pthread_mutex_unlock(&b->mu);
    if (!b->run) return TND_OK;
    double t0 = tnd_time_s();
    tnd_status st = tnd_ctx_step(b->c);
    b->st.n_rounds++;
    bool gen = false;
    pthread_mutex_lock(&b->mu);
    for (job **p = &b->run; *p;) {
        job *j = *p;
        const float *lg = st ? NULL : tnd_seq_logits(b->c, j->seq);
        if (!st && !lg) { p = &j->next; continue; }
        tnd_finish why = TND_FINISH_ERROR;
        bool end = st != TND_OK;
        if (!end) {
            gen = true;
            int nv = tnd_model_n_vocab(tnd_ctx_model(b->c));
            float *l = malloc(sizeof(float) * (size_t)nv);
            memcpy(l, lg, sizeof(float) * (size_t)nv);
            int32_t t = tnd_sampler_sample(j->smp, l, nv);
            free(l);
            j->n_gen++;
            b->st.n_gen_tokens++;
            if (tnd_tokenizer_is_eog(tok, t)) end = true, why = TND_FINISH_EOG;
            else if (!j->r.on_token(j->r.user, t)) end = true, why = TND_FINISH_STOP;
            else if (j->n_gen >= j->r.max_tokens || tnd_seq_n_past(b->c, j->seq) + 1 >= n_ctx)
                end = true, why = TND_FINISH_LENGTH;
            else tnd_seq_feed(b->c, j->seq, &t, 1);
        }
        if (!end) { p = &j->next; continue; }
        *p = j->next;
        job_end(b, j, why);
    }
    if (gen) b->st.decode_s += tnd_time_s() - t0;
    pthread_mutex_unlock(&b->mu);
    return st;
}

void tnd_batcher_stats_get(tnd_batcher *b, tnd_batcher_stats *s) {
    pthread_mutex_lock(&b->mu);
    *s = b->st;
    s->queued = b->n_queued;
    s->running = 0;
    s->kv_rows_used = 0;
    for (job *j = b->run; j; j = j->next) {
        s->running++;
        s->kv_rows_used += tnd_seq_n_past(b->c, j->seq);
    }
    s->max_queue = b->max_queue;
    s->n_seq_max = tnd_ctx_n_seq_max(b->c);
    s->kv_rows_total = (int64_t)s->n_seq_max * tnd_ctx_n_ctx(b->c);
    pthread_mutex_unlock(&b->mu);
}
