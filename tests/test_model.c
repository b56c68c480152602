/* Model and context behaviour on the default model: chunked prefill equals
 * one-token-at-a-time evaluation (to float rounding in the CPU's exact mode,
 * within the Q8 noise in the default mode), truncation rewinds exactly,
 * limits and bad inputs fail cleanly. Skips (77) when the default model is
 * absent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_fixture.h"
#include "tandem.h"

/* The default mode (Q8 activations): chunked, single-token and whole-prompt
 * prefill take different kernels (token counts), and the rounding makes the
 * logits chaotic in their float summation order (tests/test_ref_logits.py);
 * they agree within test_ref_logits' bound against the reference, max |d| <=
 * 1.0 std of the logits (measured 0.85 / 3.4 ~ 0.25), with the same argmax. */
static void check_q8_chunking(tnd_model *m, const int32_t *ids, size_t n, int nv) {
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 128;
    cp.cpu_exact = false;
    tnd_ctx *whole = NULL, *single = NULL;
    CHECK(a && b && tnd_ctx_new(m, &cp, &whole) == TND_OK, "ctx");
    cp.n_batch = 1;
    CHECK(tnd_ctx_new(m, &cp, &single) == TND_OK, "ctx");
    if (a && b && whole && single) {
        CHECK(tnd_ctx_eval(whole, ids, (int)n, a) == TND_OK, "q8 eval whole: %s", tnd_last_error());
        for (size_t i = 0; i < n; i++) CHECK(tnd_ctx_eval(single, &ids[i], 1, b) == TND_OK, "q8 eval single");
        double s = 0, s2 = 0;
        for (int i = 0; i < nv; i++) s += a[i], s2 += (double)a[i] * a[i];
        float sd = (float)sqrt(s2 / nv - (s / nv) * (s / nv)), d = tc_max_abs_diff(a, b, nv);
        CHECK(d <= sd, "q8: single-token prefill differs by %g (logits' std %g)", d, sd);
        CHECK(tc_argmax(a, nv) == tc_argmax(b, nv), "q8: argmax differs");
        printf("default mode: whole vs single-token prefill max |d| %.3f, logits' std %.3f\n", d, sd);
    }
    tnd_ctx_free(whole);
    tnd_ctx_free(single);
    free(a);
    free(b);
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, false)) return 77;
    tnd_model *m = fx_load(path, 2);
    if (!m) return 1;
    int nv = tnd_model_n_vocab(m);
    const tnd_tokenizer *tok = tnd_model_tokenizer(m);
    const char *text = "The quick brown fox jumps over the lazy dog. Paris is the capital of";
    int32_t *ids;
    size_t n;
    CHECK(tnd_tokenize(tok, text, strlen(text), true, false, &ids, &n) == TND_OK && n > 8, "tokenize");

    /* Prefill in chunks of 5 vs one token at a time vs all at once, in the
     * exact mode: the same arithmetic per token, in the same order, so logits
     * agree to float rounding of accumulation order. */
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv), *c1 = malloc(sizeof(float) * nv);
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.n_ctx = 128;
    cp.cpu_exact = true;
    tnd_ctx *whole, *chunked, *single;
    CHECK(tnd_ctx_new(m, &cp, &whole) == TND_OK, "ctx");
    cp.n_batch = 5;
    CHECK(tnd_ctx_new(m, &cp, &chunked) == TND_OK, "ctx");
    cp.n_batch = 1;
    CHECK(tnd_ctx_new(m, &cp, &single) == TND_OK, "ctx");
    CHECK(tnd_ctx_eval(whole, ids, (int)n, a) == TND_OK, "eval whole: %s", tnd_last_error());
    CHECK(tnd_ctx_eval(chunked, ids, (int)n, b) == TND_OK, "eval chunked");
    for (size_t i = 0; i < n; i++) CHECK(tnd_ctx_eval(single, &ids[i], 1, c1) == TND_OK, "eval single");
    float d1 = tc_max_abs_diff(a, b, nv), d2 = tc_max_abs_diff(a, c1, nv);
    CHECK(d1 < 1e-3f && d2 < 1e-3f, "chunked prefill differs: %g %g", d1, d2);
    CHECK(tc_argmax(a, nv) == tc_argmax(b, nv) && tc_argmax(a, nv) == tc_argmax(c1, nv), "argmax differs");
    CHECK(tnd_ctx_n_past(whole) == (int)n, "n_past %d != %zu", tnd_ctx_n_past(whole), n);

    /* Truncate and re-evaluate the last token: identical logits. */
    CHECK(tnd_ctx_truncate(whole, (int)n - 1) == TND_OK, "truncate");
    CHECK(tnd_ctx_eval(whole, &ids[n - 1], 1, b) == TND_OK, "re-eval");
    CHECK(tc_max_abs_diff(a, b, nv) < 1e-3f, "truncate + re-eval differs: %g", tc_max_abs_diff(a, b, nv));
    CHECK(tnd_ctx_truncate(whole, (int)n + 5) == TND_ERR_ARG, "truncate beyond n_past must fail");

    /* Context limit: fails cleanly and leaves the cache unchanged. */
    int32_t many[200];
    for (int i = 0; i < 200; i++) many[i] = ids[i % n];
    int before = tnd_ctx_n_past(whole);
    CHECK(tnd_ctx_eval(whole, many, 200, NULL) == TND_ERR_LIMIT, "overflow must fail with LIMIT");
    CHECK(strstr(tnd_last_error(), "context") != NULL, "message: %s", tnd_last_error());
    CHECK(tnd_ctx_n_past(whole) == before, "failed eval changed the cache");

    /* Bad token ids and empty input. */
    int32_t bad = nv;
    CHECK(tnd_ctx_eval(whole, &bad, 1, NULL) == TND_ERR_ARG, "id == n_vocab must fail");
    bad = -1;
    CHECK(tnd_ctx_eval(whole, &bad, 1, NULL) == TND_ERR_ARG, "negative id must fail");
    CHECK(tnd_ctx_eval(whole, ids, 0, NULL) == TND_ERR_ARG, "no tokens must fail");

    /* A context longer than the model was trained for is refused. */
    tnd_ctx *huge;
    cp.n_ctx = tnd_model_n_ctx_train(m) + 1;
    CHECK(tnd_ctx_new(m, &cp, &huge) == TND_ERR_LIMIT, "n_ctx > training context must fail");

    /* Loading garbage fails with a message naming the file. */
    tnd_model_params mp = tnd_model_default_params();
    tnd_model *bad_m;
    char junk[4096];
    const char *src = getenv("TND_SRC");
    snprintf(junk, sizeof junk, "%s/CMakeLists.txt", src ? src : ".");
    CHECK(tnd_model_load(junk, &mp, &bad_m) != TND_OK, "loading a non-GGUF must fail");
    CHECK(strstr(tnd_last_error(), "CMakeLists.txt") != NULL, "message should name the file: %s", tnd_last_error());

    tnd_ctx_free(whole);
    tnd_ctx_free(chunked);
    tnd_ctx_free(single);
    check_q8_chunking(m, ids, n, nv);
    tnd_model_free(m);
    free(ids);
    free(a);
    free(b);
    free(c1);
    return tc_summary();
}
