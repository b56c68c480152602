/* tnd_generate (the embeddable API) on the default model, greedy, CPU:
 * - the events' texts concatenate to the text that tnd_ctx_eval and greedy
 *   argmax give token by token (an independent loop here);
 * - n_predict is honoured (TND_STOP_LENGTH), with one event per token;
 * - a stop string taken from that text cuts it there (TND_STOP_STRING), and
 *   no event ever shows any part of the stop string;
 * - the callback returning false cancels after that token;
 * - a second call continues the context (n_past grows) without a new BOS;
 * - with_logits passes the logits the token was picked from;
 * - bad arguments fail cleanly. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"

typedef struct {
    char text[8192];
    size_t len;
    int events, cancel_after;
    bool logits_ok;
    int n_vocab;
} sink;

static bool collect(const tnd_token_event *ev, void *user) {
    sink *s = user;
    if (s->len + ev->len < sizeof s->text) {
        memcpy(s->text + s->len, ev->text, ev->len);
        s->len += ev->len;
        s->text[s->len] = 0;
    }
    if (ev->index != s->events) s->logits_ok = false; /* indices run 0, 1, ... */
    s->events++;
    if (ev->logits) { /* the token is the argmax of its logits (greedy) */
        int best = 0;
        for (int i = 1; i < s->n_vocab; i++)
            if (ev->logits[i] > ev->logits[best]) best = i;
        if (best != ev->token) s->logits_ok = false;
    }
    return s->cancel_after <= 0 || s->events < s->cancel_after;
}

/* Greedy text of n tokens after prompt, by tnd_ctx_eval and argmax. */
static void greedy_text(tnd_model *m, const char *prompt, int n, char *out, size_t cap) {
    tnd_ctx_params cp = tnd_ctx_default_params();
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    const tnd_tokenizer *tok = tnd_model_tokenizer(m);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK_ST(tnd_tokenize(tok, prompt, strlen(prompt), true, true, &ids, &n_ids));
    const int nv = tnd_model_n_vocab(m);
    float *logits = tc_xmalloc(sizeof(float) * (size_t)nv);
    CHECK_ST(tnd_ctx_eval(c, ids, (int)n_ids, logits));
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t best = 0;
        for (int k = 1; k < nv; k++)
            if (logits[k] > logits[best]) best = k;
        if (tnd_tokenizer_is_eog(tok, best)) break;
        char piece[256];
        size_t pl = tnd_token_to_piece(tok, best, false, piece, sizeof piece);
        if (len + pl < cap) {
            memcpy(out + len, piece, pl);
            len += pl;
            out[len] = 0;
        }
        CHECK_ST(tnd_ctx_eval(c, &best, 1, logits));
    }
    free(logits);
    free(ids);
    tnd_ctx_free(c);
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, true)) return 77;
    tnd_model *m = fx_load(path, 2);
    if (!m) return 1;
    const char *prompt = "The three primary colors are";
    const int n = 24;
    static char want[8192];
    greedy_text(m, prompt, n, want, sizeof want);
    printf("greedy: %s\n", want);
    CHECK(strlen(want) > 10, " the reference continuation is too short to test stop strings");

    tnd_ctx_params cp = tnd_ctx_default_params();
    tnd_generate_params gp = tnd_generate_default_params();
    gp.sampling.temp = 0;
    gp.n_predict = n;
    gp.with_logits = true;
    tnd_generate_result r;

    /* the whole continuation, one event per token */
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    sink s = {.logits_ok = true, .n_vocab = tnd_model_n_vocab(m)};
    CHECK_ST(tnd_generate(c, prompt, &gp, collect, &s, &r));
    CHECK(strcmp(s.text, want) == 0, " generate: '%s' against '%s'", s.text, want);
    CHECK(r.n_gen == n && s.events == n && r.stop == TND_STOP_LENGTH, " %d tokens, %d events, stop %d", r.n_gen,
          s.events, (int)r.stop);
    CHECK(s.logits_ok, " event logits and indices");
    CHECK(r.n_prompt > 0 && tnd_ctx_n_past(c) == r.n_prompt + n - 1, " n_past %d after %d + %d", tnd_ctx_n_past(c),
          r.n_prompt, n);

    /* a second call continues: the prompt's tokens are appended without BOS */
    const int past = tnd_ctx_n_past(c);
    sink s2 = {.logits_ok = true, .n_vocab = s.n_vocab};
    gp.n_predict = 2;
    CHECK_ST(tnd_generate(c, " and", &gp, collect, &s2, &r));
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK_ST(tnd_tokenize(tnd_model_tokenizer(m), " and", 4, false, true, &ids, &n_ids));
    CHECK(r.n_prompt == (int)n_ids && tnd_ctx_n_past(c) == past + r.n_prompt + 1, " continued: %d prompt tokens",
          r.n_prompt);
    free(ids);
    tnd_ctx_free(c);

    /* a stop string from the middle of the text: cut there, never shown */
    const size_t cut = strlen(want) / 2;
    char stop[8];
    snprintf(stop, sizeof stop, "%.4s", want + cut);
    const char *stops[] = {"no such text \x01", stop};
    const char *first = strstr(want, stop); /* where the text stops: its first occurrence */
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    sink s3 = {.logits_ok = true, .n_vocab = s.n_vocab};
    gp.n_predict = n;
    gp.stop = stops;
    gp.n_stop = 2;
    CHECK_ST(tnd_generate(c, prompt, &gp, collect, &s3, &r));
    CHECK(r.stop == TND_STOP_STRING, " stop reason %d", (int)r.stop);
    CHECK(first && s3.len == (size_t)(first - want) && !strncmp(s3.text, want, s3.len),
          " stop '%s': got '%s'", stop, s3.text);
    tnd_ctx_free(c);

    /* cancellation after 3 tokens */
    CHECK_ST(tnd_ctx_new(m, &cp, &c));
    sink s4 = {.cancel_after = 3, .logits_ok = true, .n_vocab = s.n_vocab};
    gp.n_stop = 0;
    CHECK_ST(tnd_generate(c, prompt, &gp, collect, &s4, &r));
    CHECK(r.stop == TND_STOP_CANCELLED && s4.events == 3 && r.n_gen == 3, " cancel: %d events, stop %d", s4.events,
          (int)r.stop);

    /* bad arguments */
    const char *empty[] = {""};
    gp.stop = empty;
    gp.n_stop = 1;
    CHECK(tnd_generate(c, prompt, &gp, NULL, NULL, &r) == TND_ERR_ARG, " an empty stop string");
    gp.n_stop = 0;
    CHECK(tnd_generate(c, NULL, &gp, NULL, NULL, &r) == TND_ERR_ARG, " no prompt");
    CHECK(tnd_generate(NULL, prompt, &gp, NULL, NULL, &r) == TND_ERR_ARG, " no context");
    tnd_ctx_free(c);
    tnd_model_free(m);
    return tc_summary();
}
