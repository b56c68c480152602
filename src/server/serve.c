/* The server's life: bind first (so a client can connect and be told
 * "loading" with 503 at once), then load the model and make the context
 * and the batcher, then the engine thread; SIGTERM or SIGINT stops taking
 * requests, gives the running ones --shutdown-grace seconds, cancels the
 * rest and exits 0. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "util.h"

typedef struct engine {
    srv *s;
    pthread_t th;
    atomic_bool stop;        /* the signal came: finish (or cancel) and end */
    double grace_end;        /* tnd_time_s() after which running requests are cancelled */
} engine;

static void *engine_main(void *arg) {
    engine *e = arg;
    srv *s = e->s;
    for (;;) {
        const bool busy = tnd_batcher_wait(s->b, 0.05);
        if (atomic_load(&e->stop) && (!busy || tnd_time_s() > e->grace_end)) break;
        if (!busy) continue;
        if (tnd_batcher_step(s->b)) fprintf(stderr, "tandem serve: error: a round failed: %s\n", tnd_last_error());
    }
    /* cancels whatever still runs or waits: on_done wakes its connection */
    pthread_mutex_lock(&s->bmu);
    tnd_batcher_free(s->b);
    s->b = NULL;
    pthread_mutex_unlock(&s->bmu);
    return NULL;
}

static void base_name(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    memcpy(out, b, n);
    out[n] = 0;
}

static bool load(srv *s) {
    const srv_opts *o = s->o;
    if (tnd_model_load(o->model_path, &o->mp, &s->m)) return false;
    tnd_ctx_params cp = o->cp;
    if (o->vram_budget && tnd_parse_budget(o->vram_budget, s->m, &cp.vram_budget)) {
        tnd_fail_wrap(TND_ERR_ARG, "--vram-budget: ");
        return false;
    }
    if (tnd_ctx_new(s->m, &cp, &s->c)) return false;
    s->tok = tnd_model_tokenizer(s->m);
    s->chat_tmpl = tnd_model_chat_template(s->m);
    tnd_batcher *b;
    if (tnd_batcher_new(s->c, o->max_queue, &b)) return false;
    tnd_batcher_set_prompt_cache(b, o->prompt_cache);
    pthread_mutex_lock(&s->bmu);
    s->b = b;
    pthread_mutex_unlock(&s->bmu);
    return true;
}

int srv_main(const srv_opts *o) {
    srv s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.t_start = (double)time(NULL);
    atomic_store(&s.state, SRV_LOADING);
    pthread_mutex_init(&s.bmu, NULL);
    if (o->model_name) snprintf(s.model_id, sizeof s.model_id, "%s", o->model_name);
    else base_name(o->model_path, s.model_id, sizeof s.model_id);
    /* blocked in every thread (they inherit the mask), taken by sigwait here */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a death */
    int port = 0;
    srv_http *h = srv_http_start(&s, o->host, o->port, &port);
    if (!h) {
        pthread_mutex_destroy(&s.bmu);
        return 1;
    }
    fprintf(stderr, "tandem serve: listening on http://%s%s%s:%d/ (loading %s)\n", strchr(o->host, ':') ? "[" : "",
            o->host, strchr(o->host, ':') ? "]" : "", port, o->model_path);
    int rc = 0;
    engine e = {.s = &s};
    bool engine_on = false;
    if (!load(&s)) {
        fprintf(stderr, "tandem serve: error: %s\n", *tnd_last_error() ? tnd_last_error() : "loading failed");
        rc = 1;
    } else if (pthread_create(&e.th, NULL, engine_main, &e)) {
        fprintf(stderr, "tandem serve: error: cannot start the engine thread\n");
        rc = 1;
    } else {
        engine_on = true;
        atomic_store(&s.state, SRV_READY);
        fprintf(stderr, "tandem serve: ready: %s as '%s', %d slots, context %d (SIGTERM or Ctrl-C stops)\n",
                tnd_model_desc(s.m), s.model_id, tnd_ctx_n_seq_max(s.c), tnd_ctx_n_ctx(s.c));
        int sig = 0;
        sigwait(&sigs, &sig);
        fprintf(stderr, "tandem serve: %s: no new requests; finishing the running ones (at most %g s)\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", o->shutdown_grace_s);
    }
    atomic_store(&s.state, SRV_STOPPING);
    srv_http_quiesce(h);
    if (engine_on) {
        e.grace_end = tnd_time_s() + o->shutdown_grace_s;
        atomic_store(&e.stop, true);
        pthread_join(e.th, NULL);
    } else {
        pthread_mutex_lock(&s.bmu);
        tnd_batcher_free(s.b);
        s.b = NULL;
        pthread_mutex_unlock(&s.bmu);
    }
    srv_http_stop(h); /* every connection's request has ended: their threads return */
    tnd_ctx_free(s.c);
    tnd_model_free(s.m);
    pthread_mutex_destroy(&s.bmu);
    if (!rc) fprintf(stderr, "tandem serve: stopped\n");
    return rc;
}
