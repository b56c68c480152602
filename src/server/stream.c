/* A request's text between the engine thread and the connection's thread:
 * tokens become text on the engine thread (on_token), with an incomplete
 * UTF-8 character and any tail that could begin a stop string held back,
 * so a client never sees half a character or part of a stop string; the
 * connection thread takes what was released (srv_req_take). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"

srv_req *srv_req_new(srv *s, char **stop, int n_stop) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->s = s;
    r->tok = s->tok;
    for (int i = 0; i < n_stop && i < SRV_MAX_STOP; i++) {
        r->stop[i] = stop[i]; /* ownership moves here */
        stop[i] = NULL;
        r->n_stop++;
    }
    return r;
}

void srv_req_unref(srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->pend);
    free(r->out);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static bool grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    char *b = realloc(*buf, nc);
    if (!b) return false;
    *buf = b;
    *cap = nc;
    return true;
}

/* Moves pend[0..n) to the connection's queue (engine thread). */
static void release(srv_req *r, size_t n) {
    if (!n) return;
    pthread_mutex_lock(&r->mu);
    if (grow(&r->out, &r->cap_out, r->n_out + n)) {
        memcpy(r->out + r->n_out, r->pend, n);
        r->n_out += n;
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    memmove(r->pend, r->pend + n, r->n_pend - n);
    r->n_pend -= n;
}

/* The longest tail of pend that is a proper prefix of some stop string:
 * it must wait for the next token to tell. */
static size_t stop_holdback(const srv_req *r) {
    size_t best = 0;
    for (int i = 0; i < r->n_stop; i++) {
        const size_t ls = strlen(r->stop[i]);
        for (size_t k = ls - 1 < r->n_pend ? ls - 1 : r->n_pend; k > best; k--)
            if (!memcmp(r->pend + r->n_pend - k, r->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

static bool on_token(void *user, int32_t token) {
    srv_req *r = user;
    char piece[256];
    size_t n = tnd_token_to_piece(r->tok, token, false, piece, sizeof piece);
    if (n > sizeof piece) n = sizeof piece; /* no token's text is that long; never overrun */
    if (!grow(&r->pend, &r->cap_pend, r->n_pend + n + 1)) return false;
    memcpy(r->pend + r->n_pend, piece, n);
    r->n_pend += n;
    r->pend[r->n_pend] = 0;
    /* a stop string anywhere in what is held back: release what precedes
     * the earliest one, drop the rest, end the request */
    size_t cut = SIZE_MAX;
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->pend, r->n_pend, r->stop[i], strlen(r->stop[i]));
        if (hit && (size_t)(hit - r->pend) < cut) cut = (size_t)(hit - r->pend);
    }
    if (cut != SIZE_MAX) {
        release(r, cut);
        r->n_pend = 0;
        r->hit_stop = true;
        return false;
    }
    size_t keep = stop_holdback(r);
    size_t ready = tnd_utf8_complete(r->pend, r->n_pend - keep);
    release(r, ready);
    return true;
}

static void on_done(void *user, tnd_finish why, int n_prompt, int n_gen) {
    srv_req *r = user;
    srv *s = r->s;
    /* what was held for a stop string that never came is text after all */
    if (!r->hit_stop && why != TND_FINISH_CANCEL) release(r, r->n_pend);
    if ((unsigned)why < 5) atomic_fetch_add(&s->n_finish[why], 1);
    if (why == TND_FINISH_CANCEL) atomic_fetch_add(&s->n_req_cancelled, 1);
    else if (why == TND_FINISH_ERROR) atomic_fetch_add(&s->n_req_error, 1);
    else atomic_fetch_add(&s->n_req_ok, 1);
    pthread_mutex_lock(&r->mu);
    r->done = true;
    r->why = why;
    r->n_prompt = n_prompt;
    r->n_gen = n_gen;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    srv_req_unref(r); /* the engine's reference */
}

tnd_status srv_req_submit(srv_req *r, const int32_t *prompt, int n_prompt, int max_tokens,
                          const tnd_sampler_params *sp) {
    srv *s = r->s;
    tnd_request q = {
        .prompt = prompt, .n_prompt = n_prompt, .max_tokens = max_tokens, .sampling = *sp,
        .on_token = on_token, .on_done = on_done, .user = r,
    };
    r->refs++; /* the engine's, given back by on_done; nobody else sees r yet */
    pthread_mutex_lock(&s->bmu);
    tnd_status st = s->b && atomic_load(&s->state) == SRV_READY
                        ? tnd_batcher_submit(s->b, &q, &r->id)
                        : TND_ERR_INTERNAL;
    pthread_mutex_unlock(&s->bmu);
    if (st) r->refs--;
    return st;
}

void srv_req_cancel(srv_req *r) {
    srv *s = r->s;
    pthread_mutex_lock(&r->mu);
    const bool done = r->done;
    pthread_mutex_unlock(&r->mu);
    if (done) return;
    pthread_mutex_lock(&s->bmu);
    if (s->b) tnd_batcher_cancel(s->b, r->id);
    pthread_mutex_unlock(&s->bmu);
}

bool srv_req_take(srv_req *r, double timeout_s, char **buf, size_t *n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long ns = ts.tv_nsec + (long)(timeout_s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    *buf = NULL;
    *n = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->n_out && !r->done)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT) break;
    if (r->n_out) {
        *buf = r->out;
        *n = r->n_out;
        r->out = NULL;
        r->n_out = r->cap_out = 0;
    }
    const bool end = r->done && !r->n_out;
    pthread_mutex_unlock(&r->mu);
    return end;
}
