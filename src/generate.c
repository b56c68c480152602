/* The generation loop of the public API (tandem.h): prompt in, tokens out
 * through a callback, with stop strings and cancellation. The tools and
 * embedders share it, so the streaming rules live in one place: text is
 * handed out only once it is UTF-8 complete and cannot be the start of a
 * stop string; a stop string is cut and never shown. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"
#include "util.h"

tnd_generate_params tnd_generate_default_params(void) {
    tnd_generate_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.sampling = tnd_sampler_default_params();
    p.parse_special = true;
    return p;
}

/* Bytes at the end of text[0..n) that could begin a stop string. */
static size_t stop_holdback(const tnd_generate_params *p, const char *text, size_t n) {
    size_t hold = 0;
    for (int s = 0; s < p->n_stop; s++) {
        const size_t ls = strlen(p->stop[s]);
        for (size_t k = ls > 0 ? ls - 1 : 0; k > hold; k--)
            if (k <= n && !memcmp(text + n - k, p->stop[s], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* The growing output text. */
typedef struct {
    char *s;
    size_t len, cap;
} gen_text;

static bool text_append(gen_text *t, const char *piece, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (t->len + n + 1 > cap) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) return false;
        t->s = s;
        t->cap = cap;
    }
    memcpy(t->s + t->len, piece, n);
    t->len += n;
    t->s[t->len] = 0;
    return true;
}

tnd_status tnd_generate(tnd_ctx *ctx, const char *prompt, const tnd_generate_params *p, tnd_token_cb on_token,
                        void *user, tnd_generate_result *res) {
    if (res) memset(res, 0, sizeof *res);
    if (!ctx || !prompt) return tnd_fail(TND_ERR_ARG, "generate: no context or no prompt");
    const tnd_generate_params dp = tnd_generate_default_params();
    if (!p) p = &dp;
    const tnd_tokenizer *tok = tnd_model_tokenizer(tnd_ctx_model(ctx));
    int32_t *ids = NULL;
    size_t n_ids = 0;
    tnd_status st = tnd_tokenize(tok, prompt, strlen(prompt), tnd_ctx_n_past(ctx) == 0, p->parse_special, &ids, &n_ids);
    if (st) return tnd_fail_wrap(st, "generate: tokenizing the prompt: ");
    const int32_t bos = tnd_tokenizer_bos(tok);
    if (n_ids >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos) { /* a template that wrote its own BOS */
        memmove(ids, ids + 1, (n_ids - 1) * sizeof *ids);
        n_ids--;
    }
    st = n_ids ? tnd_generate_tokens(ctx, ids, n_ids, p, on_token, user, res)
               : tnd_fail(TND_ERR_ARG, "generate: the prompt is empty after tokenization");
    free(ids);
    return st;
}

/* Weights damaged where the load's samples did not look give NaN or Inf
 * logits; sampling from them would emit arbitrary tokens and "succeed". */
static tnd_status logits_check(const float *x, int n, bool prompt) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return tnd_fail(TND_ERR_FORMAT, "the model computed a NaN or Inf logit (%s); its weights may be damaged: "
                            "--check-weights (tnd_model_params.check_weights) scans them all",
                            prompt ? "after the prompt" : "decoding");
    return TND_OK;
}

tnd_status tnd_generate_tokens(tnd_ctx *ctx, const int32_t *ids, size_t n_ids, const tnd_generate_params *p,
                               tnd_token_cb on_token, void *user, tnd_generate_result *res) {
    tnd_generate_result r;
    memset(&r, 0, sizeof r);
    if (res) *res = r;
    if (!ctx || !ids || n_ids == 0) return tnd_fail(TND_ERR_ARG, "generate: no context or no prompt tokens");
    if (n_ids > INT32_MAX) return tnd_fail(TND_ERR_LIMIT, "generate: %zu prompt tokens", n_ids);
    const tnd_generate_params dp = tnd_generate_default_params();
    if (!p) p = &dp;
    size_t max_stop = 0;
    for (int s = 0; s < p->n_stop; s++) {
        if (!p->stop || !p->stop[s] || !p->stop[s][0])
            return tnd_fail(TND_ERR_ARG, "generate: stop string %d is empty", s);
        max_stop = TND_MAX(max_stop, strlen(p->stop[s]));
    }
    tnd_model *m = tnd_ctx_model(ctx);
    const tnd_tokenizer *tok = tnd_model_tokenizer(m);
    const int nv = tnd_model_n_vocab(m);
    tnd_status st = TND_OK;

    tnd_sampler *smp = p->sampler, *own = NULL;
    float *logits = malloc(sizeof(float) * (size_t)nv), *kept = NULL;
    gen_text text = {0};
    if (!logits || (p->with_logits && !(kept = malloc(sizeof(float) * (size_t)nv)))) {
        st = tnd_fail(TND_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    if (!smp && (st = tnd_sampler_new(&p->sampling, &own))) goto done;
    if (own) smp = own;
    for (size_t i = 0; i < n_ids; i++) tnd_sampler_accept(smp, ids[i]);
    double t0 = tnd_time_s();
    if ((st = tnd_ctx_eval(ctx, ids, (int)n_ids, logits)) || (st = logits_check(logits, nv, true))) goto done;
    double t1 = tnd_time_s();
    r.n_prompt = (int)n_ids;
    r.t_prompt = t1 - t0;

    size_t shown = 0;
    for (int i = 0; p->n_predict < 0 || i < p->n_predict; i++) {
        if (kept) memcpy(kept, logits, sizeof(float) * (size_t)nv);
        const int32_t id = tnd_sampler_sample(smp, logits, nv);
        r.n_gen++;
        tnd_token_event ev = {id, i, "", 0, kept};
        bool last = false;
        if (tnd_tokenizer_is_eog(tok, id)) {
            r.stop = TND_STOP_EOG;
            last = true;
        } else {
            char piece[256];
            size_t pl = tnd_token_to_piece(tok, id, false, piece, sizeof piece);
            if (pl > sizeof piece) pl = sizeof piece;
            if (!text_append(&text, piece, pl)) {
                st = tnd_fail(TND_ERR_NOMEM, "generate: out of memory");
                goto done;
            }
            /* cut at the earliest stop string; a new one can only end in the
             * new piece (memmem: a byte piece may hold a NUL) */
            const size_t from = text.len > pl + max_stop ? text.len - pl - max_stop : 0;
            size_t cut = text.len;
            for (int k = 0; k < p->n_stop; k++) {
                const char *hit = memmem(text.s + from, text.len - from, p->stop[k], strlen(p->stop[k]));
                if (hit && (size_t)(hit - text.s) < cut) cut = (size_t)(hit - text.s);
            }
            if (cut < text.len) {
                text.len = cut;
                text.s[cut] = 0;
                r.stop = TND_STOP_STRING;
                last = true;
            }
            if (!last && p->n_predict >= 0 && i + 1 >= p->n_predict) {
                r.stop = TND_STOP_LENGTH;
                last = true;
            }
            if (!last && tnd_ctx_n_past(ctx) >= tnd_ctx_n_ctx(ctx)) {
                r.stop = TND_STOP_CONTEXT;
                last = true;
            }
        }
        /* the last event flushes what was held back */
        const size_t show = last ? text.len : tnd_utf8_complete(text.s, text.len - stop_holdback(p, text.s, text.len));
        if (show > shown) {
            ev.text = text.s + shown;
            ev.len = show - shown;
            shown = show;
        }
        if (on_token && !on_token(&ev, user)) {
            r.stop = TND_STOP_CANCELLED;
            break;
        }
        if (last) break;
        if ((st = tnd_ctx_eval(ctx, &id, 1, logits)) || (st = logits_check(logits, nv, false))) goto done;
    }
    if (p->n_predict == 0) r.stop = TND_STOP_LENGTH;
    r.t_gen = tnd_time_s() - t1;
done:
    if (res) *res = r;
    tnd_sampler_free(own);
    free(text.s);
    free(kept);
    free(logits);
    return st;
}
