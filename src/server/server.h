/* tandem serve: an OpenAI-compatible HTTP server over the batching engine.
 *
 * Threads: libmicrohttpd runs one thread per connection; each parses and
 * validates its request (api.c), tokenizes it and submits it to the
 * batcher. One engine thread (serve.c) loops tnd_batcher_wait +
 * tnd_batcher_step; its per-token callback turns tokens into text (UTF-8
 * kept whole, stop strings held back and cut: stream.c) and hands the text
 * to the connection's thread through the request's queue (srv_req). A
 * client that goes away cancels its request. Internal to the server; the
 * one entry point for the CLI is srv_main. */
#ifndef TND_SERVER_H
#define TND_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem.h"

#define SRV_MAX_STOP 16

/* What `tandem serve` was told (src/tools/serve.c fills it). */
typedef struct srv_opts {
    const char *model_path;          /* resolved by the CLI (never NULL) */
    tnd_model_params mp;
    tnd_ctx_params cp;               /* n_seq_max = --parallel */
    const char *vram_budget;         /* text, parsed once the model is loaded */
    tnd_sampler_params sp;           /* defaults for the sampling fields a request leaves out */
    bool seed_set;                   /* -s: sp.seed for requests without one; else a new seed each */
    int max_tokens_default;          /* a request without max_tokens: this many (<= 0: up to the context) */
    const char *host;
    int port;                        /* 0: any free port (printed) */
    const char *api_key;             /* NULL: none required */
    const char *chat_template;       /* NULL: the model's */
    const char *model_name;          /* the id /v1/models lists; NULL: the file's base name */
    int max_queue;                   /* requests waiting for a slot before 503 */
    size_t max_body;                 /* bytes; larger bodies get 413 */
    double shutdown_grace_s;         /* SIGTERM: seconds running requests get to finish */
    bool prompt_cache;               /* tnd_batcher_set_prompt_cache */
    bool verbose;
} srv_opts;

enum { SRV_LOADING, SRV_READY, SRV_STOPPING };

/* The server: what every thread shares. */
typedef struct srv {
    const srv_opts *o;
    char model_id[256];
    atomic_int state;                /* SRV_* */
    tnd_model *m;
    tnd_ctx *c;
    const tnd_tokenizer *tok;
    const char *chat_tmpl;           /* the model's template text (NULL: none, chatml) */
    /* the batcher is taken under bmu by the HTTP threads (submit, cancel,
     * stats) so the engine thread can free it at shutdown while they run;
     * lock order: bmu, then the batcher's own lock, then a request's mu */
    pthread_mutex_t bmu;
    tnd_batcher *b;
    /* counters for /metrics (atomics: bumped by every connection thread) */
    atomic_uint_fast64_t n_http[6];  /* responses by status class: 1xx..5xx, [0] unused */
    atomic_uint_fast64_t n_req_ok, n_req_cancelled, n_req_error, n_rejected_full;
    atomic_uint_fast64_t n_finish[5]; /* by tnd_finish */
    atomic_uint_fast64_t next_id;
    double t_start;
} srv;

/* ---- one generation request and its text queue (stream.c) ----
 * Shared by the connection thread and the engine thread, freed by the
 * last of the two to let go (refs). */
typedef struct srv_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    const tnd_tokenizer *tok;
    char *stop[SRV_MAX_STOP];        /* owned */
    int n_stop;
    /* engine side: text generated but not released yet (an incomplete UTF-8
     * character, or a tail that may begin a stop string) */
    char *pend;
    size_t n_pend, cap_pend;
    bool hit_stop;
    /* under mu: released text the connection has not taken yet */
    char *out;
    size_t n_out, cap_out;
    bool done;
    tnd_finish why;
    int n_prompt, n_gen;
    uint64_t id;                     /* the batcher's */
    srv *s;
} srv_req;

/* A request with refs = 1 (the caller's); NULL when out of memory. */
srv_req *srv_req_new(srv *s, char **stop, int n_stop);
void srv_req_unref(srv_req *r);
/* Fills the batcher's callbacks for r and submits (taking a second ref for
 * the engine). TND_ERR_LIMIT: queue full; TND_ERR_ARG: prompt too long etc.
 * (message set); TND_ERR_INTERNAL when the server is shutting down. */
tnd_status srv_req_submit(srv_req *r, const int32_t *prompt, int n_prompt, int max_tokens,
                          const tnd_sampler_params *sp);
/* Waits up to timeout_s for text or the end; moves the released text into
 * *buf (malloc'd, *n bytes; NULL when none) and returns true once the
 * request is done and everything was taken. */
bool srv_req_take(srv_req *r, double timeout_s, char **buf, size_t *n);
void srv_req_cancel(srv_req *r);

/* ---- OpenAI JSON (api.c) ---- */
typedef struct srv_error {
    int status;                      /* HTTP status */
    const char *type;                /* "invalid_request_error", ... */
    const char *code;                /* may be NULL */
    const char *param;               /* may be NULL */
    char message[512];
} srv_error;

typedef struct srv_params {
    bool chat, stream, include_usage;
    char *prompt;                    /* rendered chat or the completion prompt (malloc'd) */
    int max_tokens;                  /* 0: not given */
    tnd_sampler_params sp;
    char *stop[SRV_MAX_STOP];        /* malloc'd */
    int n_stop;
} srv_params;

/* Parses and checks a request body; false with *e filled on a bad one. */
bool srv_api_parse(srv *s, bool chat, const char *body, size_t n, srv_params *p, srv_error *e);
void srv_params_free(srv_params *p);
/* The error body {"error": {...}} (malloc'd). */
char *srv_api_error_json(const srv_error *e);
/* A whole (non-streamed) response (malloc'd). */
char *srv_api_response(srv *s, bool chat, uint64_t id, const char *text, size_t n, tnd_finish why,
                       int n_prompt, int n_gen);
/* One SSE event "data: {...}\n\n" (malloc'd) with text (may be empty);
 * first: the chat chunk carries the role; done: finish_reason and usage
 * (unless n_prompt < 0) are set. */
char *srv_api_chunk(srv *s, bool chat, uint64_t id, const char *text, size_t n, bool first, bool done,
                    tnd_finish why, int n_prompt, int n_gen);
/* An SSE event of only usage (stream_options.include_usage). */
char *srv_api_usage_chunk(srv *s, bool chat, uint64_t id, int n_prompt, int n_gen);
/* GET /v1/models (malloc'd). */
char *srv_api_models(srv *s);
/* finish_reason text. */
const char *srv_finish_name(tnd_finish why);

/* ---- /metrics (metrics.c) ---- */
/* The Prometheus text exposition (malloc'd). */
char *srv_metrics_text(srv *s);

/* ---- the chat page (page.c) ---- */
extern const char srv_page_html[];
extern const size_t srv_page_html_len;

/* ---- HTTP (http.c) ---- */
typedef struct srv_http srv_http;
/* Binds host:port and starts serving (requests answered 503 while s is
 * loading); *port_out: the port bound. NULL with a message on stderr. */
srv_http *srv_http_start(srv *s, const char *host, int port, int *port_out);
/* Stops accepting connections (the running ones go on). */
void srv_http_quiesce(srv_http *h);
/* Waits for the connections to end and frees. */
void srv_http_stop(srv_http *h);

/* ---- the whole server (serve.c) ---- */
/* Runs until SIGTERM or SIGINT; returns the exit status (0 after a clean
 * shutdown, 1 when the model or the socket fails). */
int srv_main(const srv_opts *o);

#endif
