/* HTTP over libmicrohttpd: one thread per connection (a streamed reply
 * blocks its thread while it waits for tokens, which is the simple and
 * cheap way at the few hundred connections a local server sees), routing,
 * the API key, body limits, and the streamed replies (SSE) whose client
 * going away cancels the request. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/server.h"
#include "util.h"

struct srv_http {
    struct MHD_Daemon *d;
    srv *s;
};

/* One request's body as it arrives. */
typedef struct conn {
    char *body;
    size_t n, cap;
    uint64_t seen;      /* bytes received, kept or not */
    bool too_big;
} conn;

/* A streamed reply: the SSE bytes made and not yet handed to MHD. */
typedef struct stream {
    srv *s;
    srv_req *r;
    int fd;
    bool chat, include_usage, first, finished;
    char *buf;
    size_t n, off;
} stream;

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *c, int status, const char *ctype, char *body,
                                  size_t n) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, body ? body : (char *)"",
                                                                body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (status >= 100 && status < 600) atomic_fetch_add(&s->n_http[status / 100], 1);
    return ret;
}

static enum MHD_Result send_json(srv *s, struct MHD_Connection *c, int status, char *json) {
    if (!json) return send_reply(s, c, 500, "text/plain", strdup("out of memory"), 13);
    return send_reply(s, c, status, "application/json", json, strlen(json));
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *c, const srv_error *e) {
    return send_json(s, c, e->status, srv_api_error_json(e));
}

static enum MHD_Result send_err(srv *s, struct MHD_Connection *c, int status, const char *type, const char *code,
                                const char *msg) {
    srv_error e = {.status = status, .type = type, .code = code};
    snprintf(e.message, sizeof e.message, "%s", msg);
    return send_error(s, c, &e);
}

/* The client closed its end (or the socket failed): nobody reads the reply. */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Appends an event (malloc'd, consumed) to the stream's bytes. */
static void stream_add(stream *st, char *ev) {
    if (!ev) return;
    size_t n = strlen(ev);
    char *b = realloc(st->buf, st->n + n);
    if (b) {
        memcpy(b + st->n, ev, n);
        st->buf = b;
        st->n += n;
    }
    free(ev);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->off == st->n) {
        free(st->buf);
        st->buf = NULL;
        st->n = st->off = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        char *t;
        size_t tn;
        const bool end = srv_req_take(st->r, 0.1, &t, &tn);
        if (!t && !end) {
            if (peer_gone(st->fd)) {
                srv_req_cancel(st->r);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            continue;
        }
        srv_req *r = st->r;
        if (t) {
            stream_add(st, srv_api_chunk(st->s, st->chat, r->id, t, tn, st->first, false, 0, 0, 0));
            st->first = false;
            free(t);
        }
        if (end) {
            /* done is set under r->mu before end is seen: these are final */
            const int np = st->include_usage ? -1 : r->n_prompt;
            stream_add(st, srv_api_chunk(st->s, st->chat, r->id, "", 0, st->first, true, r->why, np, r->n_gen));
            if (st->include_usage) stream_add(st, srv_api_usage_chunk(st->s, st->chat, r->id, r->n_prompt, r->n_gen));
            stream_add(st, strdup("data: [DONE]\n\n"));
            st->finished = true;
        }
    }
    size_t k = st->n - st->off < max ? st->n - st->off : max;
    memcpy(out, st->buf + st->off, k);
    st->off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls) {
    stream *st = cls;
    srv_req_cancel(st->r); /* the client went away mid-stream: free its slot */
    srv_req_unref(st->r);
    free(st->buf);
    free(st);
}

/* POST /v1/chat/completions and /v1/completions. */
static enum MHD_Result generate(srv *s, struct MHD_Connection *c, conn *k, bool chat) {
    srv_params p;
    srv_error e = {0};
    if (!srv_api_parse(s, chat, k->body ? k->body : "", k->n, &p, &e)) return send_error(s, c, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    if (tnd_tokenize(s->tok, p.prompt, strlen(p.prompt), true, true, &ids, &n)) {
        srv_params_free(&p);
        return send_err(s, c, 400, "invalid_request_error", NULL, tnd_last_error());
    }
    /* a template that writes BOS itself, then the vocab's BOS: keep one */
    const int32_t bos = tnd_tokenizer_bos(s->tok);
    if (n >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) memmove(ids, ids + 1, (--n) * sizeof *ids);
    const int n_ctx = tnd_ctx_n_ctx(s->c);
    if (n == 0 || (chat ? false : !p.prompt[0])) {
        free(ids);
        srv_params_free(&p);
        return send_err(s, c, 400, "invalid_request_error", NULL, "the prompt is empty");
    }
    if ((long)n >= n_ctx) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "this model's context holds %d tokens; the prompt has %zu (and at least 1 is generated)", n_ctx, n);
        free(ids);
        srv_params_free(&p);
        return send_err(s, c, 400, "invalid_request_error", "context_length_exceeded", msg);
    }
    int max = p.max_tokens ? p.max_tokens : s->o->max_tokens_default > 0 ? s->o->max_tokens_default : n_ctx;
    srv_req *r = srv_req_new(s, p.stop, p.n_stop);
    if (!r) {
        free(ids);
        srv_params_free(&p);
        return send_err(s, c, 500, "server_error", NULL, "out of memory");
    }
    tnd_status st = srv_req_submit(r, ids, (int)n, max, &p.sp);
    free(ids);
    const bool stream_it = p.stream, include_usage = p.include_usage;
    srv_params_free(&p);
    if (st) {
        srv_req_unref(r);
        if (st == TND_ERR_LIMIT) {
            atomic_fetch_add(&s->n_rejected_full, 1);
            return send_err(s, c, 503, "server_error", "queue_full", "the server is busy: every slot is taken and "
                                                                     "the queue is full; retry later");
        }
        if (st == TND_ERR_ARG) return send_err(s, c, 400, "invalid_request_error", NULL, tnd_last_error());
        return send_err(s, c, 503, "server_error", "shutting_down", "the server is shutting down");
    }
    const int fd = conn_fd(c);
    if (stream_it) {
        stream *sm = calloc(1, sizeof *sm);
        if (!sm) {
            srv_req_cancel(r);
            srv_req_unref(r);
            return send_err(s, c, 500, "server_error", NULL, "out of memory");
        }
        *sm = (stream){.s = s, .r = r, .fd = fd, .chat = chat, .include_usage = include_usage, .first = true};
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, sm,
                                                                      stream_free);
        if (!resp) {
            stream_free(sm);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        atomic_fetch_add(&s->n_http[2], 1);
        return ret;
    }
    /* not streamed: gather the text on this connection's thread */
    char *text = NULL;
    size_t tn = 0;
    for (;;) {
        char *t;
        size_t k2;
        const bool end = srv_req_take(r, 0.1, &t, &k2);
        if (t) {
            char *b = realloc(text, tn + k2);
            if (b) {
                memcpy(b + tn, t, k2);
                text = b;
                tn += k2;
            }
            free(t);
        }
        if (end) break;
        if (!t && peer_gone(fd)) {
            srv_req_cancel(r);
            srv_req_unref(r);
            free(text);
            return MHD_NO; /* nobody to answer */
        }
    }
    char *body = srv_api_response(s, chat, r->id, text, tn, r->why, r->n_prompt, r->n_gen);
    free(text);
    const bool err = r->why == TND_FINISH_ERROR;
    srv_req_unref(r);
    if (err) {
        free(body);
        return send_err(s, c, 500, "server_error", NULL, "the engine failed while generating (see the server's log)");
    }
    return send_json(s, c, 200, body);
}

/* The API key, compared in time independent of where it differs. */
static bool authorized(srv *s, struct MHD_Connection *c) {
    const char *key = s->o->api_key;
    if (!key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    const size_t n = strlen(key);
    if (strlen(h) != n) return false;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(h[i] ^ key[i]);
    return d == 0;
}

static enum MHD_Result route(srv *s, struct MHD_Connection *c, const char *url, const char *method, conn *k) {
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    const bool v1 = !strncmp(url, "/v1/", 4);
    const int state = atomic_load(&s->state);
    if (!strcmp(url, "/metrics")) {
        if (!get) return send_err(s, c, 405, "invalid_request_error", NULL, "GET only");
        char *m = srv_metrics_text(s);
        return send_reply(s, c, 200, "text/plain; version=0.0.4", m, m ? strlen(m) : 0);
    }
    if (!strcmp(url, "/health")) {
        if (state == SRV_LOADING)
            return send_err(s, c, 503, "unavailable_error", "model_loading", "the model is loading");
        if (state == SRV_STOPPING)
            return send_err(s, c, 503, "unavailable_error", "shutting_down", "the server is shutting down");
        return send_json(s, c, 200, strdup("{\"status\":\"ok\"}"));
    }
    if (!v1) return send_err(s, c, 404, "invalid_request_error", "not_found", "no such route");
    if (!authorized(s, c))
        return send_err(s, c, 401, "invalid_request_error", "invalid_api_key",
                        "a missing or wrong API key (send the header 'Authorization: Bearer KEY')");
    const bool chat = !strcmp(url, "/v1/chat/completions"), cmpl = !strcmp(url, "/v1/completions"),
               models = !strcmp(url, "/v1/models");
    if (!chat && !cmpl && !models) return send_err(s, c, 404, "invalid_request_error", "not_found", "no such route");
    if ((models && !get) || (!models && !post))
        return send_err(s, c, 405, "invalid_request_error", NULL, models ? "GET only" : "POST only");
    if (k->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body has %llu bytes; this server takes at most %zu (--max-body)",
                 (unsigned long long)k->seen, s->o->max_body);
        return send_err(s, c, 413, "invalid_request_error", "body_too_large", msg);
    }
    if (state == SRV_LOADING) return send_err(s, c, 503, "unavailable_error", "model_loading", "the model is loading");
    if (state == SRV_STOPPING)
        return send_err(s, c, 503, "unavailable_error", "shutting_down", "the server is shutting down");
    if (models) return send_json(s, c, 200, srv_api_models(s));
    return generate(s, c, k, chat);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_n, void **con_cls) {
    (void)version;
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) {
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        return MHD_YES; /* headers only so far; the body follows */
    }
    if (*upload_n) {
        k->seen += *upload_n;
        /* far past the limit: not worth reading to the end for a 413 */
        if (k->seen > 16 * (uint64_t)s->o->max_body) return MHD_NO;
        if (!k->too_big && k->n + *upload_n > s->o->max_body) {
            k->too_big = true; /* kept reading, not kept: the 413 goes out after the body */
            free(k->body);
            k->body = NULL;
            k->n = k->cap = 0;
        }
        if (!k->too_big) {
            if (k->n + *upload_n + 1 > k->cap) {
                size_t nc = k->cap ? k->cap : 4096;
                while (nc < k->n + *upload_n + 1) nc *= 2;
                char *b = realloc(k->body, nc);
                if (!b) return MHD_NO;
                k->body = b;
                k->cap = nc;
            }
            memcpy(k->body + k->n, upload, *upload_n);
            k->n += *upload_n;
            k->body[k->n] = 0;
        }
        *upload_n = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (strcmp(method, "GET") && strcmp(method, "HEAD"))
            return send_err(s, c, 405, "invalid_request_error", NULL, "GET only");
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(srv_page_html_len, (void *)srv_page_html, MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        atomic_fetch_add(&s->n_http[2], 1);
        return ret;
    }
    return route(s, c, url, method, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *k = *con_cls;
    if (k) free(k->body);
    free(k);
    *con_cls = NULL;
}

srv_http *srv_http_start(srv *s, const char *host, int port, int *port_out) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "tandem serve: error: --host '%s' is not an IPv4 or IPv6 address (or localhost)\n", host);
        return NULL;
    }
    if (s->o->verbose) flags |= MHD_USE_ERROR_LOG;
    srv_http *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->s = s;
    h->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)120, MHD_OPTION_END);
    if (!h->d) {
        fprintf(stderr, "tandem serve: error: cannot listen on %s:%d (in use, or not allowed)\n", host, port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port_out = di ? di->port : port;
    return h;
}

void srv_http_quiesce(srv_http *h) {
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
