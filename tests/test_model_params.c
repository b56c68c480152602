/* The public parameters do what include/tandem.h says (issue 30):
 * tnd_model_params.verbose prints what the load found and checked (it was
 * never read), check_weights scans every weight, the default placement with
 * a GPU is "static", and tnd_parse_budget refuses 0, plain fractions and
 * values past 2^64 bytes. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "tandem.h"

/* Runs load(path, p) with stderr sent to a file; returns what it printed (malloc'd). */
static char *load_capture(const char *path, const tnd_model_params *p, tnd_status *st) {
    char name[] = "/tmp/tnd_params_XXXXXX";
    int fd = mkstemp(name);
    if (fd < 0) return NULL;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    tnd_model *m = NULL;
    *st = tnd_model_load(path, p, &m);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    tnd_model_free(m);
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = tc_xmalloc((size_t)n + 1);
    ssize_t got = pread(fd, buf, (size_t)n, 0);
    buf[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(name);
    return buf;
}

static void test_budget(const tnd_model *m) {
    uint64_t b = 0;
    static const char *bad[] = {"0", "0G", "0.4", "1.5", "99999999999999999999", "17179869184G", "1024T", "", "abc",
                                "-1G", "1e9", "nan", "0%", "1001%", "5GB5"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(tnd_parse_budget(bad[i], m, &b) == TND_ERR_ARG, "'%s' accepted (%llu)", bad[i], (unsigned long long)b);
        CHECK(tnd_parse_budget(bad[i], NULL, &b) != TND_OK, "'%s' accepted without a model", bad[i]);
    }
    CHECK(tnd_parse_budget("0.4", m, &b) && strstr(tnd_last_error(), "40%"), "0.4: %s", tnd_last_error());
    struct {
        const char *s;
        uint64_t want;
    } good[] = {{"6G", 6ull << 30}, {"4523M", 4523ull << 20}, {"1.5GiB", 3ull << 29}, {"123456", 123456},
                {"512kB", 512ull << 10}, {"1023T", 1023ull << 40}, {"2t", 2ull << 40}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        b = 0;
        CHECK(tnd_parse_budget(good[i].s, m, &b) == TND_OK && b == good[i].want, "'%s': %llu (%s)", good[i].s,
              (unsigned long long)b, tnd_last_error());
    }
    CHECK(tnd_parse_budget("50%", m, &b) == TND_OK && b == tnd_model_weight_bytes(m) / 2, "50%%: %llu",
          (unsigned long long)b);
    CHECK(tnd_parse_budget("50%", NULL, &b) == TND_OK, "50%% without a model: %s", tnd_last_error());
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, false)) return 77;
    char cache[] = "/tmp/tnd_params_cache_XXXXXX";
    if (!mkdtemp(cache)) return 1;
    setenv("TANDEM_CACHE", cache, 1);

    tnd_model_params p = tnd_model_default_params();
    CHECK(!p.verbose && !p.check_weights, "defaults");
    p.n_threads = 2;
    tnd_status st;
    char *quiet = load_capture(path, &p, &st);
    CHECK(st == TND_OK && quiet && !strstr(quiet, "layers 30"), "quiet load printed: [%s]", quiet ? quiet : "");
    p.verbose = true;
    char *loud = load_capture(path, &p, &st);
    CHECK(st == TND_OK && loud && strstr(loud, "layers 30, embd 576") && strstr(loud, "rms eps"),
          "verbose load printed: [%s]", loud ? loud : "");
    p.verbose = false;
    p.check_weights = true;
    free(load_capture(path, &p, &st));
    CHECK(st == TND_OK, "check_weights: %s", tnd_last_error());
    free(quiet);
    free(loud);

    tnd_model *m = fx_load(path, 2);
    if (!m) return 1;
    test_budget(m);
    /* the default placement with a GPU: static (SimGPU with a profile: no measuring) */
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.device = TND_DEVICE_SIM;
    cp.hw = "rtx3060-laptop";
    char *text = NULL;
    CHECK(tnd_ctx_plan_text(m, &cp, &text) == TND_OK && text && strstr(text, "placement: static"), "plan: %s",
          text ? text : tnd_last_error());
    free(text);
    tnd_model_free(m);
    return tc_summary();
}
