/* The environment's knobs (src/config.h, issue 24): read once per process,
 * from several threads at once too, and never again (a later setenv
 * changes nothing); a refused value keeps the default and fails model
 * loading with one line naming the variable and what it accepts; the
 * config key names exactly the timing knobs that differ from their
 * defaults (it keys the perf DB), and tnd_config_set changes one knob
 * (a refused value changes nothing). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "tandem.h"
#include "util.h"

static void *get_config(void *arg) {
    (void)arg;
    return (void *)tnd_config_get();
}

int main(void) {
    /* before the first read: one refused value, one tuning knob, one that
     * does not change timings */
    setenv("TND_CPU_PF_DIST", "abc", 1);
    setenv("TND_CUDA_TILE_DEPTH", "3", 1);
    setenv("TND_LOG", "1", 1);
    unsetenv("TND_CUDA_MV");
    unsetenv("TND_POOL_SPIN");

    pthread_t th[4];
    void *seen[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, get_config, NULL);
    for (int i = 0; i < 4; i++) pthread_join(th[i], &seen[i]);
    const tnd_config *c = tnd_config_get();
    for (int i = 0; i < 4; i++) CHECK(seen[i] == c, "thread %d saw another config", i);

    /* (a) the refused value: the default stays, and loading fails clearly */
    CHECK(c->cpu_pf_dist == 3072, "TND_CPU_PF_DIST=abc gave %d, not the default 3072", c->cpu_pf_dist);
    CHECK(c->cuda_tile_depth == 3, "TND_CUDA_TILE_DEPTH=3 read as %d", c->cuda_tile_depth);
    CHECK(tnd_config_check() == TND_ERR_ARG, "a refused value passes the check");
    const char *e = tnd_last_error();
    CHECK(strstr(e, "TND_CPU_PF_DIST=abc") && strstr(e, "64 .. 16384") && !strchr(e, '\n'),
          "the message names the variable and the accepted values on one line: %s", e);
    tnd_model *m = NULL;
    CHECK(tnd_model_load("/nonexistent.gguf", NULL, &m) == TND_ERR_ARG && !m,
          "model loading fails on the refused value first");
    CHECK(strstr(tnd_last_error(), "TND_CPU_PF_DIST"), "load error: %s", tnd_last_error());

    /* (c) read once: the environment changed after the first read is ignored */
    setenv("TND_CUDA_TILE_DEPTH", "1", 1);
    setenv("TND_POOL_SPIN", "7", 1);
    setenv("TND_CPU_PF_DIST", "512", 1);
    CHECK(tnd_config_get()->cuda_tile_depth == 3 && tnd_config_get()->pool_spin == 200000 &&
              tnd_config_get()->cpu_pf_dist == 3072,
          "a setenv after the first read changed the config");
    CHECK(tnd_config_check() == TND_ERR_ARG, "the refused value is still reported");

    /* (b) the key: the timing knobs off their defaults, in a fixed order */
    char key[320];
    tnd_config_key(key, sizeof key);
    CHECK(!strcmp(key, "TND_CUDA_TILE_DEPTH=3"), "key '%s'", key);
    CHECK(tnd_config_set("TND_CPU_PF_DIST", "512") == TND_OK, "set: %s", tnd_last_error());
    CHECK(tnd_config_check() == TND_OK, "a knob set anew passes: %s", tnd_last_error());
    tnd_config_key(key, sizeof key);
    CHECK(!strcmp(key, "TND_CPU_PF_DIST=512 TND_CUDA_TILE_DEPTH=3"), "key '%s'", key);
    CHECK(tnd_config_set("TND_LOG", "3") == TND_OK && tnd_config_get()->log_level == 3, "TND_LOG=3");
    tnd_config_key(key, sizeof key);
    CHECK(!strcmp(key, "TND_CPU_PF_DIST=512 TND_CUDA_TILE_DEPTH=3"), "TND_LOG entered the key: '%s'", key);
    CHECK(tnd_config_set("TND_CPU_PF_DIST", "3072") == TND_OK && tnd_config_set("TND_CUDA_TILE_DEPTH", NULL) == TND_OK,
          "back to the defaults");
    tnd_config_key(key, sizeof key);
    CHECK(!strcmp(key, "default"), "a knob set to its default is the default: '%s'", key);
    CHECK(tnd_config_set("TND_CUDA_MV", "i8mma") == TND_OK && tnd_config_get()->cuda_mv == TND_CFG_MV_I8MMA, "mv");
    tnd_config_key(key, sizeof key);
    CHECK(!strcmp(key, "TND_CUDA_MV=i8mma"), "key '%s'", key);

    /* refused values and names through tnd_config_set keep the field */
    static const char *bad[][2] = {{"TND_CUDA_MV", "bogus"},  {"TND_CPU_PF_DIST", "100"}, {"TND_CPU_PF_DIST", "1024x"},
                                   {"TND_CUDA_TILE_I8_NS", "3"}, {"TND_CPU_ISA", "sse"},    {"TND_POOL_SPIN", "-1"},
                                   {"TND_TRACE", "yes"},        {"TND_CUDA_PDL", "2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(tnd_config_set(bad[i][0], bad[i][1]) == TND_ERR_ARG, "%s=%s accepted", bad[i][0], bad[i][1]);
        CHECK(strstr(tnd_last_error(), bad[i][0]) && strstr(tnd_last_error(), "accepted:"), "message: %s",
              tnd_last_error());
    }
    CHECK(tnd_config_get()->cuda_mv == TND_CFG_MV_I8MMA && tnd_config_get()->cpu_pf_dist == 3072 &&
              tnd_config_get()->pool_spin == 200000,
          "a refused value changes nothing");
    CHECK(tnd_config_set("TND_NO_SUCH_KNOB", "1") == TND_ERR_ARG, "an unknown name is refused");
    CHECK(tnd_config_set("TND_CUDA_MV", "") == TND_OK && tnd_config_get()->cuda_mv == TND_CFG_MV_AUTO,
          "empty: the default");

    const char *id = tnd_build_id();
    CHECK(id && strstr(id, TND_VERSION), "build id '%s' names the version", id ? id : "(null)");
    printf("build id: %s\n", id);
    return tc_summary();
}
