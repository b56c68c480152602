/* Pinning that fails (docs/ARCHITECTURE.md: Memory layout). A SimGPU
 * context pins the model's weights where they are when the CPU holds at
 * least half of them (the MoE cases here), else it fills a pinned store of
 * the CPU's share (the dense ones). With pinning in place refused
 * (tnd_backend_set_register_fault) it fills the store, without a warning. With every pinning refused (tnd_backend_set_pin_fault) it falls
 * back to pageable memory for the weights and the activations and warns
 * exactly once. All three give the same logits and tokens: dense (the
 * default model, promotions from the mapped file) and split MoE layers
 * (tiny-qwen3moe from `tandem synth`, whose GPU part's rows of A_EY then
 * reach the host by copy). Skips (77) when neither model is at hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "exec/exec.h"
#include "model_fixture.h"
#include "tandem.h"

#define N_GEN 8

/* How a context holds the weights the CPU computes from. */
typedef enum { W_IN_PLACE, W_STORE, W_PAGEABLE } held;
static const char *held_name[] = {"pinned in place", "in a pinned store", "pageable"};

/* Lines of file f that contain s. */
static int count_lines(FILE *f, const char *s) {
    char line[4096];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) n += strstr(line, s) != NULL;
    return n;
}

/* Prefill ids, then N_GEN greedy steps with the fault set (0: none, 1: the
 * weights cannot be pinned in place, 2: nothing can be pinned); tokens into
 * out, every step's logits into lg ((N_GEN + 1) x n_vocab). *how: the
 * weights' pinning, *acts: the activations are pinned; *warnings and *pin:
 * the warnings, and those about pinning, the context gave. */
static tnd_status generate(tnd_model *m, const tnd_ctx_params *p, int fault, const int32_t *ids, int n, int32_t *out,
                           float *lg, held *how, bool *acts, int *warnings, int *pin) {
    /* stderr into a file, to count the warnings */
    FILE *log = tmpfile();
    fflush(stderr);
    int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0) {
        CHECK(0, "redirecting stderr");
        exit(1);
    }
    tnd_backend_set_register_fault(fault == 1);
    tnd_backend_set_pin_fault(fault == 2);
    tnd_ctx *c;
    tnd_status st = tnd_ctx_new(m, p, &c);
    tnd_backend_set_register_fault(false);
    tnd_backend_set_pin_fault(false);
    if (!st) {
        *how = c->w_locked ? W_IN_PLACE : c->n_pins ? W_STORE : W_PAGEABLE;
        *acts = c->act_dev[A_X] != NULL;
        st = fx_greedy(c, ids, n, N_GEN, out, lg);
        tnd_ctx_free(c);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    *warnings = count_lines(log, "tandem: warning:");
    *pin = count_lines(log, "could not pin");
    fclose(log);
    return st;
}

static int n_in_place; /* cases whose weights were pinned in place by default */

/* One placement pinned as it comes (in place or in a store), then in a
 * store, and pageable: the same output, one warning for pageable memory. */
static void check_case(tnd_model *m, const tnd_ctx_params *p, const char *what) {
    const int32_t ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190, 8, 400, 11, 23};
    const int n = (int)(sizeof ids / sizeof *ids);
    int nv = tnd_model_n_vocab(m);
    size_t nl = (size_t)(N_GEN + 1) * (size_t)nv;
    float *ref = tc_xmalloc(sizeof(float) * nl), *got = tc_xmalloc(sizeof(float) * nl);
    int32_t ref_tok[N_GEN], tok[N_GEN];
    held how = W_PAGEABLE;
    bool acts = false;
    int warnings = 0, pin = 0;
    tnd_status st = generate(m, p, 0, ids, n, ref_tok, ref, &how, &acts, &warnings, &pin);
    /* in place where the CPU holds at least half the weights, else a store */
    CHECK(st == TND_OK && how != W_PAGEABLE && acts && warnings == 0, "%s: weights %s, activations %s, %d warnings: %s",
          what, held_name[how], acts ? "pinned" : "pageable", warnings, st ? tnd_last_error() : "want them pinned");
    n_in_place += how == W_IN_PLACE;
    printf("%s: weights %s\n", what, held_name[how]);
    for (int fault = 1; fault <= 2; fault++) {
        const held want = fault == 1 ? W_STORE : W_PAGEABLE;
        st = generate(m, p, fault, ids, n, tok, got, &how, &acts, &warnings, &pin);
        const char *refused = fault == 1 ? "pinning in place refused" : "every pinning refused";
        CHECK(st == TND_OK, "%s, %s: %s", what, refused, tnd_last_error());
        CHECK(how == want && acts == (fault == 1), "%s, %s: weights %s, activations %s", what, refused, held_name[how],
              acts ? "pinned" : "pageable");
        CHECK(warnings == fault - 1 && pin == fault - 1, "%s, %s: %d warnings (%d about pinning), want %d", what,
              refused, warnings, pin, fault - 1);
        CHECK(!st && !memcmp(tok, ref_tok, sizeof tok), "%s, %s: tokens differ from pinning in place", what, refused);
        CHECK(!st && !memcmp(got, ref, sizeof(float) * nl), "%s, %s: logits differ from pinning in place", what,
              refused);
        printf("%s, %s: weights %s, %d warning, same %d tokens and logits\n", what, refused, held_name[how], warnings,
               N_GEN);
    }
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
            const int before = n_in_place;
            check_case(m, &p, "moe random:50");
            p.promote = "all";
            check_case(m, &p, "moe random:50 promote all");
            /* (the experts' CPU halves are over half the weights) */
            CHECK(n_in_place == before + 2, "moe random:50: weights pinned in place in %d of 2 cases",
                  n_in_place - before);
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
