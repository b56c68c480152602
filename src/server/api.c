/* The OpenAI JSON: request bodies in (checked field by field, each fault a
 * 400 that names the field), responses, stream chunks and errors out. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "util.h"

static bool fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));
static bool fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                 ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}
#define BAD(param, ...) fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* Generated text as JSON wants it: valid UTF-8, each invalid byte (a model
 * can emit a lone byte token) as U+FFFD. Malloc'd; *out_n its length. */
static char *utf8_clean(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = tnd_utf8_seq_len((const unsigned char *)s + i, n - i < 4 ? n - i : 4);
        if (l == 0) {
            memcpy(o + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
            continue;
        }
        memcpy(o + k, s + i, l);
        k += l;
        i += l;
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

static json_t *text_json(const char *s, size_t n) {
    size_t k;
    char *c = utf8_clean(s ? s : "", s ? n : 0, &k);
    json_t *j = c ? json_stringn(c, k) : NULL;
    free(c);
    return j ? j : json_string("");
}

/* A number field: absent or null leaves *v; else it must be a number in
 * [lo, hi] (lo_open: lo excluded). */
static bool get_num(json_t *o, const char *key, double lo, bool lo_open, double hi, double *v, srv_error *e) {
    json_t *j = json_object_get(o, key);
    if (!j || json_is_null(j)) return true;
    if (!json_is_number(j)) return BAD(key, "'%s' must be a number", key);
    double x = json_number_value(j);
    if (x < lo || (lo_open && x == lo) || x > hi)
        return BAD(key, "'%s' is %g; it must be in %s%g, %g]", key, x, lo_open ? "(" : "[", lo, hi);
    *v = x;
    return true;
}

static bool get_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *v, srv_error *e) {
    json_t *j = json_object_get(o, key);
    if (!j || json_is_null(j)) return true;
    if (!json_is_integer(j)) return BAD(key, "'%s' must be an integer", key);
    json_int_t x = json_integer_value(j);
    if (x < lo || x > hi)
        return BAD(key, "'%s' is %lld; it must be in [%lld, %lld]", key, (long long)x, (long long)lo, (long long)hi);
    *v = x;
    return true;
}

/* A message's content: a string, or a list of {"type": "text", "text": ...}
 * parts (joined), or null. Malloc'd. */
static char *content_text(json_t *c, int i, srv_error *e) {
    if (!c || json_is_null(c)) return strdup("");
    if (json_is_string(c)) return strndup(json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) {
        BAD("messages", "messages[%d].content must be a string or a list of text parts", i);
        return NULL;
    }
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        json_t *ty = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
            !json_is_string(t)) {
            BAD("messages", "messages[%d].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported",
                i, k);
            return NULL;
        }
        total += json_string_length(t);
    }
    char *out = malloc(total), *w = out;
    if (!out) return NULL;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(w, json_string_value(t), json_string_length(t));
        w += json_string_length(t);
    }
    *w = 0;
    return out;
}

static bool render_chat(srv *s, json_t *msgs, srv_params *p, srv_error *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "'messages' must be a non-empty list of {\"role\", \"content\"} objects");
    const size_t n = json_array_size(msgs);
    if (n > 4096) return BAD("messages", "%zu messages; at most 4096", n);
    tnd_chat_msg *m = calloc(n, sizeof *m);
    char **own = calloc(n, sizeof *own);
    bool ok = m && own;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *msg = json_array_get(msgs, i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role)) {
            ok = BAD("messages", "messages[%zu] must be an object with a string 'role'", i);
            break;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for it */
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            ok = BAD("messages", "messages[%zu].role is '%s'; system, developer, user or assistant", i, r);
            break;
        }
        if (!(own[i] = content_text(json_object_get(msg, "content"), (int)i, e))) {
            ok = false;
            break;
        }
        m[i] = (tnd_chat_msg){r, own[i]};
    }
    if (ok && tnd_chat_render(s->o->chat_template, s->chat_tmpl, m, (int)n, true, &p->prompt))
        ok = fail(e, 500, "server_error", NULL, NULL, "chat template: %s", tnd_last_error());
    for (size_t i = 0; own && i < n; i++) free(own[i]);
    free(own);
    free(m);
    return ok;
}

static bool get_stop(json_t *o, srv_params *p, srv_error *e) {
    json_t *j = json_object_get(o, "stop");
    if (!j || json_is_null(j)) return true;
    if (json_is_string(j)) {
        if (!json_string_length(j)) return BAD("stop", "'stop' must not be empty");
        p->stop[p->n_stop++] = strndup(json_string_value(j), json_string_length(j));
        return true;
    }
    if (!json_is_array(j)) return BAD("stop", "'stop' must be a string or a list of strings");
    if (json_array_size(j) > SRV_MAX_STOP) return BAD("stop", "at most %d stop strings", SRV_MAX_STOP);
    size_t i;
    json_t *x;
    json_array_foreach(j, i, x) {
        if (!json_is_string(x) || !json_string_length(x))
            return BAD("stop", "stop[%zu] must be a non-empty string", i);
        p->stop[p->n_stop++] = strndup(json_string_value(x), json_string_length(x));
    }
    return true;
}

bool srv_api_parse(srv *s, bool chat, const char *body, size_t n, srv_params *p, srv_error *e) {
    memset(p, 0, sizeof *p);
    p->chat = chat;
    p->sp = s->o->sp;
    json_error_t je;
    json_t *o = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!o) return BAD(NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    bool ok = false;
    if (!json_is_object(o)) {
        BAD(NULL, "the body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            BAD("model", "'model' must be a string");
            goto out;
        }
        if (strcmp(json_string_value(model), s->model_id)) {
            fail(e, 404, "invalid_request_error", "model_not_found", "model",
                 "the model '%s' does not exist; this server has '%s'", json_string_value(model), s->model_id);
            goto out;
        }
    }
    json_t *st = json_object_get(o, "stream");
    if (st && !json_is_null(st) && !json_is_boolean(st)) {
        BAD("stream", "'stream' must be true or false");
        goto out;
    }
    p->stream = json_is_true(st);
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        json_t *iu = json_object_get(so, "include_usage");
        if (!json_is_object(so) || (iu && !json_is_boolean(iu))) {
            BAD("stream_options", "'stream_options' must be an object with a boolean 'include_usage'");
            goto out;
        }
        p->include_usage = json_is_true(iu);
    }
    json_int_t mt = 0, nn = 1, topk = p->sp.top_k, seed = -1;
    double temp = p->sp.temp, topp = p->sp.top_p, minp = p->sp.min_p;
    if (!get_int(o, "max_tokens", 1, 1 << 24, &mt, e) || !get_int(o, "max_completion_tokens", 1, 1 << 24, &mt, e) ||
        !get_int(o, "n", 1, 1, &nn, e) || !get_int(o, "top_k", 0, 1 << 24, &topk, e) ||
        !get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, e) || !get_num(o, "temperature", 0, false, 2, &temp, e) ||
        !get_num(o, "top_p", 0, true, 1, &topp, e) || !get_num(o, "min_p", 0, false, 1, &minp, e) ||
        !get_stop(o, p, e))
        goto out;
    p->max_tokens = (int)mt;
    p->sp.top_k = (int)topk;
    p->sp.temp = (float)temp;
    p->sp.top_p = (float)topp;
    p->sp.min_p = (float)minp;
    json_t *js = json_object_get(o, "seed");
    if (js && !json_is_null(js)) p->sp.seed = (uint64_t)seed;
    else if (!s->o->seed_set) p->sp.seed = (uint64_t)(tnd_time_s() * 1e9) ^ (atomic_fetch_add(&s->next_id, 1) * 0x9e3779b97f4a7c15ull);
    if (chat) {
        if (!render_chat(s, json_object_get(o, "messages"), p, e)) goto out;
    } else {
        json_t *pr = json_object_get(o, "prompt");
        if (json_is_array(pr) && json_array_size(pr) == 1) pr = json_array_get(pr, 0);
        if (!json_is_string(pr)) {
            BAD("prompt", "'prompt' must be a string (or a list of one string)");
            goto out;
        }
        p->prompt = strndup(json_string_value(pr), json_string_length(pr));
    }
    ok = p->prompt != NULL;
    if (!ok && e->status == 0) fail(e, 500, "server_error", NULL, NULL, "out of memory");
out:
    json_decref(o);
    if (!ok) srv_params_free(p);
    return ok;
}

void srv_params_free(srv_params *p) {
    free(p->prompt);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

static char *dump(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

char *srv_api_error_json(const srv_error *e) {
    return dump(json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->message, "type", e->type, "param",
                          e->param, "code", e->code));
}

const char *srv_finish_name(tnd_finish why) {
    switch (why) {
    case TND_FINISH_LENGTH: return "length";
    case TND_FINISH_EOG:
    case TND_FINISH_STOP: return "stop";
    case TND_FINISH_CANCEL: return "cancelled";
    default: return "error";
    }
}

static json_t *usage(int n_prompt, int n_gen) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", n_prompt, "completion_tokens", n_gen, "total_tokens",
                     n_prompt + n_gen);
}

static void ids(bool chat, uint64_t id, char *buf, size_t cap) {
    snprintf(buf, cap, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)id);
}

char *srv_api_response(srv *s, bool chat, uint64_t id, const char *text, size_t n, tnd_finish why, int n_prompt,
                       int n_gen) {
    char idb[64];
    ids(chat, id, idb, sizeof idb);
    json_t *choice = chat ? json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0, "message", "role", "assistant",
                                      "content", text_json(text, n), "logprobs", "finish_reason", srv_finish_name(why))
                          : json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", text_json(text, n), "logprobs",
                                      "finish_reason", srv_finish_name(why));
    return dump(json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", idb, "object",
                          chat ? "chat.completion" : "text_completion", "created", (json_int_t)time(NULL), "model",
                          s->model_id, "choices", choice, "usage", usage(n_prompt, n_gen)));
}

static char *sse(json_t *j) {
    char *body = dump(j);
    if (!body) return NULL;
    size_t n = strlen(body);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, body, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(body);
    return ev;
}

char *srv_api_chunk(srv *s, bool chat, uint64_t id, const char *text, size_t n, bool first, bool done,
                    tnd_finish why, int n_prompt, int n_gen) {
    char idb[64];
    ids(chat, id, idb, sizeof idb);
    json_t *choice;
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (n || !done) json_object_set_new(delta, "content", text_json(text, n));
        choice = json_pack("{s:i, s:o, s:n}", "index", 0, "delta", delta, "logprobs");
    } else {
        choice = json_pack("{s:i, s:o, s:n}", "index", 0, "text", text_json(text, n), "logprobs");
    }
    json_object_set_new(choice, "finish_reason", done ? json_string(srv_finish_name(why)) : json_null());
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", idb, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)time(NULL),
                          "model", s->model_id, "choices", choice);
    /* usage in every response: the last chunk carries it (n_prompt < 0: a
     * usage-only chunk follows, as stream_options.include_usage asks) */
    if (j && done && n_prompt >= 0) json_object_set_new(j, "usage", usage(n_prompt, n_gen));
    return sse(j);
}

char *srv_api_usage_chunk(srv *s, bool chat, uint64_t id, int n_prompt, int n_gen) {
    char idb[64];
    ids(chat, id, idb, sizeof idb);
    return sse(json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", idb, "object",
                         chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)time(NULL),
                         "model", s->model_id, "choices", "usage", usage(n_prompt, n_gen)));
}

char *srv_api_models(srv *s) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", s->model_id, "object",
                          "model", "created", (json_int_t)s->t_start, "owned_by", "tandem"));
}
