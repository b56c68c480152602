/* GPU memory another process takes between the plan and the allocation
 * (SimGPU's tnd_sim_set_taken: the budget read stays, the device fills):
 * tnd_ctx_new re-plans for what is free, with one warning, and gives the
 * CPU's tokens; when even the re-plan cannot fit, or a plan made earlier no
 * longer fits (tnd_ctx_new_from_plan), it fails with a message naming the
 * sizes, never a crash. Skips (77) when the default model is absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model_fixture.h"
#include "runtime/runtime.h"
#include "sim/sim.h"
#include "tandem.h"

#define N_GEN 6
#define MIB (1024.0 * 1024.0)

static const int32_t ids[] = {1, 17, 33, 250, 7, 99, 3, 480, 12, 64, 5, 301, 77, 2, 190, 8, 400, 11, 23};
#define N_IDS ((int)(sizeof ids / sizeof *ids))

/* Prefill, then N_GEN greedy tokens into out. */
static tnd_status greedy(tnd_ctx *c, int nv, int32_t *out) {
    float *lg = tc_xmalloc(sizeof(float) * (size_t)nv);
    tnd_status st = tnd_ctx_eval(c, ids, N_IDS, lg);
    for (int i = 0; !st && i < N_GEN; i++) {
        out[i] = tc_argmax(lg, nv);
        st = tnd_ctx_eval(c, &out[i], 1, lg);
    }
    free(lg);
    return st;
}

/* stderr into a temporary file between capture_begin and capture_end,
 * which returns how many lines contain s. */
static FILE *cap;
static int cap_saved = -1;

static void capture_begin(void) {
    fflush(stderr);
    cap = tmpfile();
    cap_saved = dup(2);
    if (!cap || cap_saved < 0 || dup2(fileno(cap), 2) < 0) {
        fprintf(stdout, "FAIL: cannot redirect stderr\n");
        exit(1);
    }
}

static int capture_end(const char *s) {
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    char line[4096];
    int n = 0;
    rewind(cap);
    while (fgets(line, sizeof line, cap)) {
        n += strstr(line, s) != NULL;
        fputs(line, stdout); /* shown in the test's log */
    }
    fclose(cap);
    return n;
}

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, true)) return 77;
    tnd_model *m = fx_load(path, 2);
    if (!m) return 1;
    const int nv = tnd_model_n_vocab(m);
    tnd_ctx_params base = tnd_ctx_default_params();
    base.n_ctx = 4096; /* a KV cache worth placing: 3 MiB a layer */
    base.n_batch = 64;
    base.cpu_exact = true; /* any placement gives the CPU's tokens bit for bit */
    int32_t ref[N_GEN], tok[N_GEN];
    tnd_ctx *c = NULL;
    CHECK_ST(tnd_ctx_new(m, &base, &c));
    CHECK_ST(greedy(c, nv, ref));
    tnd_ctx_free(c);

    tnd_ctx_params p = base;
    p.device = TND_DEVICE_SIM;
    p.hw = "rtx3060-laptop";
    p.placement = "layer"; /* whole layers while they fit: needs no perf DB */
    tnd_plan *full = NULL;
    CHECK_ST(tnd_plan_build(m, &p, &full));
    const tnd_layout *fl = tnd_plan_layout(full);
    const uint64_t need = fl->gpu_total, fixed = fl->act_gpu + fl->scratch_gpu + fl->small_gpu;
    const uint64_t vram = fl->budget;
    /* what SimGPU allocates of it: the scratch is the CUDA backend's (cuBLAS), not SimGPU's */
    const uint64_t sim_alloc = need - fl->scratch_gpu;
    CHECK(tnd_plan_gpu(full) && need < vram && sim_alloc > fixed + (20u << 20),
          "the plan puts %.1f MiB on the GPU, SimGPU allocates %.1f MiB, %.1f MiB fixed", need / MIB,
          sim_alloc / MIB, fixed / MIB);

    /* 1. room for the activations, the scratch and some layers, not for what the plan
     * allocates: a re-plan */
    const uint64_t free1 = fixed + (sim_alloc - fixed) / 2;
    tnd_sim_set_taken(vram - free1);
    capture_begin();
    tnd_status st = tnd_ctx_new(m, &p, &c);
    int warned = capture_end("re-planned");
    CHECK(st == TND_OK, "re-plan for %.1f MiB free: %s", free1 / MIB, tnd_last_error());
    CHECK(warned == 1, "%d warnings about the re-plan, want one", warned);
    if (!st) {
        const tnd_plan *pl = tnd_ctx_plan(c);
        const tnd_layout *l = tnd_plan_layout(pl);
        printf("re-planned: %.1f MiB on the GPU (the first plan %.1f MiB, %.1f MiB free)\n", l->gpu_total / MIB,
               need / MIB, free1 / MIB);
        CHECK(tnd_plan_gpu(pl) && l->gpu_total <= free1 && l->gpu_total < need,
              "the new plan holds %.1f MiB on the GPU, %.1f MiB free", l->gpu_total / MIB, free1 / MIB);
        CHECK(greedy(c, nv, tok) == TND_OK && !memcmp(tok, ref, sizeof tok), "re-planned tokens differ from the CPU's");
        tnd_ctx_free(c);
    }

    /* 2. a fixed placement the free memory cannot hold: a clear error */
    tnd_ctx_params pg = p;
    pg.placement = "gpu";
    c = NULL;
    st = tnd_ctx_new(m, &pg, &c);
    const char *e = tnd_last_error();
    printf("placement gpu, %.1f MiB free: %s\n", free1 / MIB, e);
    CHECK(st != TND_OK && !c, "placement gpu fits %.1f MiB free", free1 / MIB);
    CHECK(strstr(e, "ran out of memory") && strstr(e, "MiB") && strstr(e, "re-planning"),
          "the error names what happened: %s", e);

    /* 3. a plan made before the memory was taken: refused with the sizes */
    c = NULL;
    st = tnd_ctx_new_from_plan(full, &c);
    e = tnd_last_error();
    printf("plan made earlier: %s\n", e);
    CHECK(st == TND_ERR_NOMEM && !c && strstr(e, "free now"), "from_plan: %s", e);

    /* 4. nothing free at all */
    tnd_sim_set_taken(vram);
    c = NULL;
    st = tnd_ctx_new(m, &p, &c);
    e = tnd_last_error();
    printf("nothing free: %s\n", st ? e : "ok");
    CHECK(st != TND_OK && !c && strstr(e, "MiB"), "nothing free: %s", st ? e : "a context");

    /* and all is well again once the memory is back */
    tnd_sim_set_taken(0);
    CHECK(tnd_ctx_new_from_plan(full, &c) == TND_OK, "the plan after the memory came back: %s", tnd_last_error());
    if (c) {
        CHECK(greedy(c, nv, tok) == TND_OK && !memcmp(tok, ref, sizeof tok), "tokens differ from the CPU's");
        tnd_ctx_free(c);
    }
    tnd_plan_free(full);
    tnd_model_free(m);
    return tc_summary();
}
