/* Getting a model for the whole-model tests (header-only): the default
 * model's path, a synthetic tiny model from `tandem synth`, loading; and a
 * greedy continuation, what most of them compare. */
#ifndef TND_TESTS_MODEL_FIXTURE_H
#define TND_TESTS_MODEL_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tandem.h"

/* The default model's path into path: $TND_MODEL when use_env and it is
 * set, else $TND_SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf (TND_SRC unset:
 * "."). Returns false, after printing "skipped: PATH missing", when the file
 * cannot be read (the caller exits 77). */
static inline bool fx_default_model(char *path, size_t size, bool use_env) {
    const char *src = getenv("TND_SRC"), *env = use_env ? getenv("TND_MODEL") : NULL;
    if (env) snprintf(path, size, "%s", env);
    else snprintf(path, size, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    if (access(path, R_OK) != 0) {
        printf("skipped: %s missing\n", path);
        return false;
    }
    return true;
}

/* Loads path (n_threads 0: the default); NULL, after printing
 * "load PATH: MESSAGE" on stderr, when it fails. */
static inline tnd_model *fx_load(const char *path, int n_threads) {
    tnd_model_params mp = tnd_model_default_params();
    if (n_threads) mp.n_threads = n_threads;
    tnd_model *m = NULL;
    if (tnd_model_load(path, &mp, &m) != TND_OK) {
        fprintf(stderr, "load %s: %s\n", path, tnd_last_error());
        return NULL;
    }
    return m;
}

/* Writes a synthetic model, `$TND_BIN synth --force --shape SHAPE EXTRA`
 * (EXTRA may be ""), to a new temporary file; its path goes into path
 * (size >= 32). Returns 0; 77 when TND_BIN (the tandem binary) is not set,
 * after printing "skipped: ..." (nothing written); 1 when synth fails,
 * after printing the command and synth's messages (the file removed). */
static inline int fx_synth(const char *shape, const char *extra, char *path, size_t size) {
    const char *bin = getenv("TND_BIN");
    if (!bin || !*bin) {
        printf("skipped: TND_BIN (the tandem binary, for synth) not set\n");
        return 77;
    }
    snprintf(path, size, "/tmp/tnd_%s_XXXXXX", shape);
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    char cmd[8192], log[4096];
    snprintf(log, sizeof log, "%s.log", path);
    snprintf(cmd, sizeof cmd, "'%s' synth --force --shape %s -o '%s' %s > '%s' 2>&1", bin, shape, path, extra, log);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "FAIL: %s (exit %d)\n", cmd, rc);
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
        if (f) fclose(f);
        unlink(path);
    }
    unlink(log);
    return rc != 0;
}

/* The model of a whole-model test into path: the default model, or under
 * TND_TSAN (the ThreadSanitizer stage: races need no 135M model) a synth
 * tiny-llama in a temporary file (*tmp set: the caller removes it).
 * Returns 0; 77 to skip; 1 on a failure, reported. */
static inline int fx_test_model(char *path, size_t size, bool *tmp) {
    *tmp = getenv("TND_TSAN") != NULL;
    if (!*tmp) return fx_default_model(path, size, false) ? 0 : 77;
    char t[64]; /* fx_synth formats it into buffers of 4096: this size keeps -Wformat-truncation quiet */
    int rc = fx_synth("tiny-llama", "", t, sizeof t);
    if (!rc) snprintf(path, size, "%s", t);
    return rc;
}

/* `tandem synth --shape SHAPE`, loaded on n_threads into *out, the file
 * removed: 0; 77 to skip (fx_synth); 1 on a failure, reported. */
static inline int fx_synth_load(const char *shape, int n_threads, tnd_model **out) {
    char path[64];
    *out = NULL;
    int rc = fx_synth(shape, "", path, sizeof path);
    if (rc == 77) return 77;
    CHECK(rc == 0, "synth %s", shape);
    if (rc) return 1;
    *out = fx_load(path, n_threads);
    unlink(path);
    return *out ? 0 : 1;
}

/* n token ids of m's vocabulary, drawn from check.h's generator seeded with seed. */
static inline void fx_random_tokens(const tnd_model *m, uint64_t seed, int32_t *ids, int n) {
    const int nv = tnd_model_n_vocab(m);
    tc_rng = seed;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(tc_xorshift() % (uint64_t)nv);
}

/* Prefill ids on c, then n_gen greedy steps: token i into out[i], and
 * into lg ((n_gen + 1) x n_vocab floats) the logits it was chosen from,
 * then those after the last token. */
static inline tnd_status fx_greedy(tnd_ctx *c, const int32_t *ids, int n, int n_gen, int32_t *out, float *lg) {
    const int nv = tnd_model_n_vocab(tnd_ctx_model(c));
    tnd_status st = tnd_ctx_eval(c, ids, n, lg);
    for (int i = 0; !st && i < n_gen; i++) {
        out[i] = tc_argmax(lg + (size_t)i * nv, nv);
        st = tnd_ctx_eval(c, &out[i], 1, lg + (size_t)(i + 1) * nv);
    }
    return st;
}

/* Prefill ids on c (its logits into lg), then n_gen steps: step i feeds
 * tok[i] (greedy: the argmax of the logits before it, written there) and
 * writes its logits over lg[i] (lg: n_gen x n_vocab floats), so teacher-
 * forced runs of other placements compare step by step with a greedy one. */
static inline tnd_status fx_steps(tnd_ctx *c, const int32_t *ids, int n, int n_gen, int32_t *tok, bool greedy,
                                  float *lg) {
    const int nv = tnd_model_n_vocab(tnd_ctx_model(c));
    tnd_status st = tnd_ctx_eval(c, ids, n, lg);
    for (int i = 0; !st && i < n_gen; i++) {
        const float *last = i ? lg + (size_t)(i - 1) * nv : lg;
        if (greedy) tok[i] = tc_argmax(last, nv);
        st = tnd_ctx_eval(c, &tok[i], 1, lg + (size_t)i * nv);
    }
    return st;
}

#endif
