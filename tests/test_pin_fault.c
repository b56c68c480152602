/* Pinning that fails (docs/ARCHITECTURE.md: Memory layout). With every
 * pinned host allocation refused (tnd_backend_set_pin_fault), a SimGPU
 * context falls back to pageable memory for the weight store and the
 * activations, warns exactly once, and gives the logits and tokens of the
 * same placement with pinning: dense (the default model, promotions from
 * the mapped file) and split MoE layers (tiny-qwen3moe from `tandem
 * synth`, whose GPU part's rows of A_EY then reach the host by copy).
 * Skips (77) when neither model is at hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "tandem.h"

#define N_GEN 8

/* Prefill ids, then N_GEN greedy steps; tokens into out, every step's
 * logits into lg ((N_GEN + 1) x n_vocab). *pageable: the context's
 * activations and store were not pinned. */
static tnd_status generate(tnd_model *m, const tnd_ctx_params *p, const int32_t *ids, int n, int32_t *out, float *lg,
                           bool *pageable) {
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, p, &c);
    if (st) return st;
    *pageable = c->gpu && !c->act_dev[A_X] && !c->n_pins;
    st = fx_greedy(c, ids, n, N_GEN, out, lg);
    tnd_ctx_free(c);
    return st;
}

/* Lines of file f that contain s. */
static int count_lines(FILE *f, const char *s) {
    char line[4096];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) n += strstr(line, s) != NULL;
    return n;
}

/* One placement with and without the fault: same output, one warning. */
static void check_case(tnd_model *m, const tnd_ctx_params *p, const char *what) {
    const int32_t ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190, 8, 400, 11, 23};
    const int n = (int)(sizeof ids / sizeof *ids);
    int nv = tnd_model_n_vocab(m);
    size_t nl = (size_t)(N_GEN + 1) * (size_t)nv;
    float *ref = tc_xmalloc(sizeof(float) * nl), *got = tc_xmalloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];
    bool pageable = true;
    tnd_status st = generate(m, p, ids, n, ref_tok, ref, &pageable);
    CHECK(st == TND_OK && !pageable, "%s, pinned: %s", what, st ? tnd_last_error() : "pageable without a fault");

    /* stderr into a file while the fault is on, to count the warnings */
    FILE *log = tmpfile();
    fflush(stderr);
    int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0) {
        CHECK(0, "redirecting stderr");
        exit(1);
    }
    tnd_backend_set_pin_fault(true);
    st = generate(m, p, ids, n, tok, got, &pageable);
    tnd_backend_set_pin_fault(false);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    int warnings = count_lines(log, "tandem: warning:"), pin = count_lines(log, "could not pin");
    fclose(log);
    CHECK(st == TND_OK, "%s, pinning refused: %s", what, tnd_last_error());
    CHECK(pageable, "%s: the context pinned memory though every pinning was refused", what);
    CHECK(warnings == 1 && pin == 1, "%s: %d warnings (%d about pinning), want exactly one", what, warnings, pin);
    CHECK(!st && !memcmp(tok, ref_tok, sizeof tok), "%s: tokens differ from the pinned run", what);
    CHECK(!st && !memcmp(got, ref, sizeof(float) * nl), "%s: logits differ from the pinned run", what);
    printf("%s: %d warning, same %d tokens and logits\n", what, warnings, N_GEN);
    free(ref);
    free(got);
}

int main(void) {
    int ran = 0;
    char path[4096];
    if (fx_default_model(path, sizeof path, true)) {
        tnd_model *m = fx_load(path, 2);
        CHECK(m != NULL, "load %s", path);
        if (m) {
            tnd_ctx_params p = tnd_ctx_default_params();
            p.device = TND_DEVICE_SIM;
            p.n_ctx = 64;
            p.n_batch = 8;
            p.placement = "random:7";
            p.promote = "all"; /* promoted weights copy out of the store: here, the mapped file */
            check_case(m, &p, "dense random:7 promote all");
            tnd_model_free(m);
            ran++;
        }
    }
    char moe[64];
    int rc = fx_synth("tiny-qwen3moe", "", moe, sizeof moe);
    CHECK(rc == 0 || rc == 77, "synth tiny-qwen3moe");
    if (rc == 0) {
        tnd_model *m = fx_load(moe, 2);
        CHECK(m != NULL, "load tiny-qwen3moe");
        if (m) {
            tnd_ctx_params p = tnd_ctx_default_params();
            p.device = TND_DEVICE_SIM;
            p.n_ctx = 64;
            p.n_batch = 6;
            p.cpu_exact = true;
            p.placement = "random:50"; /* splits most layers expert by expert */
            check_case(m, &p, "moe random:50");
            p.promote = "all";
            check_case(m, &p, "moe random:50 promote all");
            tnd_model_free(m);
            ran++;
        }
        unlink(moe);
    }
    if (!ran) {
        printf("skipped: no model\n");
        return 77;
    }
    return tc_summary();
}
