/* tandem plan: where every weight slice would run, what the GPU would hold,
 * and the predicted round times — as a table, JSON and an SVG picture —
 * without loading anything big. Needs no GPU with --device sim --hw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tandem.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem plan [options]\n\n"
               "Prints the placement of every weight slice, the GPU memory breakdown and the\n"
               "predicted decode and prefill times, without running the model.\n\n"
               "  -m, --model FILE       GGUF model (default: the default model)\n"
               "      --device cuda|sim  the GPU to plan for (default: cuda if present, else sim)\n"
               "      --hw PROFILE       SimGPU hardware profile: %s, or a file\n"
               "      --vram-budget X    bytes (6G) or percent of the weights (50%%); default: the GPU's free\n"
               "                         memory less 512 MiB, SimGPU: the --hw profile's memory\n"
               "                         (SimGPU needs --hw or --vram-budget)\n"
               "      --placement P      static (default), layer, gpu, cpu, random:SEED or a file\n"
               "      --promote P        auto (default with static/layer), none, all, random:SEED\n"
               "  -c, --ctx-size N       context length (default: min(model, 4096))\n"
               "  -b, --batch-size N     prefill chunk (default 512)\n"
               "  -t, --threads N        CPU threads (default: physical cores)\n"
               "      --json             JSON instead of the table\n"
               "      --svg FILE         also draw the placement (layers x tensor roles)\n"
               "      --save FILE        also write the placement as a file for --placement\n"
               "      --cpu-exact        plan for CPU matmuls with f32 activations (its own perf DB)\n",
            tnd_hw_names());
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *budget = NULL, *svg = NULL, *save = NULL;
    bool json = false;
    long threads = 0, n_ctx = 0, n_batch = 0;
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.device = tnd_cuda_device_count() > 0 ? TND_DEVICE_CUDA : TND_DEVICE_SIM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = true, takes = false;
        else if (!strcmp(a, "--cpu-exact")) cp.cpu_exact = true, takes = false;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (model = v) != NULL;
        else if (!strcmp(a, "--device")) {
            ok = v && (!strcmp(v, "cuda") || !strcmp(v, "sim"));
            if (ok) cp.device = strcmp(v, "cuda") ? TND_DEVICE_SIM : TND_DEVICE_CUDA;
        } else if (!strcmp(a, "--hw")) ok = (cp.hw = v) != NULL;
        else if (!strcmp(a, "--vram-budget")) {
            if ((ok = (budget = v) != NULL) && !tools_check_budget(v)) return 2;
        }
        else if (!strcmp(a, "--placement") || !strcmp(a, "--policy")) ok = (cp.placement = v) != NULL;
        else if (!strcmp(a, "--promote")) ok = (cp.promote = v) != NULL;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!tools_parse_int(v, 1, TOOLS_MAX_CTX, &n_ctx)) {
                fprintf(stderr, "tandem plan: %s needs an integer from 1 to " TOOLS_MAX_CTX_TEXT " (the most tandem "
                                "supports; the model's own context length caps it too)\n", a);
                return 2;
            }
        }
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) ok = tools_parse_int(v, 1, 1 << 16, &n_batch);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = tools_parse_int(v, 1, 1024, &threads);
        else if (!strcmp(a, "--svg")) ok = (svg = v) != NULL;
        else if (!strcmp(a, "--save")) ok = (save = v) != NULL;
        else return tools_bad_option("plan", a, true, usage);
        if (!ok) return tools_bad_option("plan", a, false, usage);
        if (takes) i++;
    }
    /* SimGPU alone has no memory size (all would fit) and no speed but this
     * CPU's: such a plan says nothing, and profiling for it takes a while */
    if (cp.device == TND_DEVICE_SIM && !cp.hw && !budget) {
        fprintf(stderr, "tandem plan: no GPU to plan for: give --hw PROFILE (%s, or a file: a GPU's memory and "
                        "speed) or --vram-budget X (SimGPU has no memory size of its own)\n", tnd_hw_names());
        return 2;
    }
    cp.n_ctx = (int)n_ctx;
    cp.n_batch = (int)n_batch;
    tnd_model *m;
    if (!tools_load_model(&model, threads, &m)) return 1;
    if (budget && tnd_parse_budget(budget, m, &cp.vram_budget)) {
        tools_print_error("--vram-budget");
        tnd_model_free(m);
        return 2;
    }
    /* predictions need a perf DB: the static placement's, or this machine's */
    cp.predict = true;
    tnd_plan *pl;
    if (tnd_plan_build(m, &cp, &pl)) {
        tools_print_error("plan");
        tnd_model_free(m);
        return 1;
    }
    if (json) {
        tnd_plan_print_json(pl, model, stdout);
    } else {
        /* where the budget came from: a number alone does not say */
        if (budget) printf("GPU budget: %.1f MiB (--vram-budget %s)\n", cp.vram_budget / 1048576.0, budget);
        else if (cp.device == TND_DEVICE_SIM) printf("GPU budget: the %s profile's memory\n", cp.hw);
        else printf("GPU budget: the driver's free memory less 512 MiB\n");
        tnd_plan_print(pl, stdout);
    }
    int rc = 0;
    if (svg) {
        if (tnd_plan_write_svg(pl, svg)) {
            tools_print_error("svg");
            rc = 1;
        } else if (!json) {
            printf("\npicture: %s\n", svg);
        }
    }
    if (save) {
        FILE *f = fopen(save, "w");
        if (!f || tnd_plan_write_placement(pl, f)) {
            fprintf(stderr, "tandem: error: cannot write %s\n", save);
            rc = 1;
        }
        if (f) fclose(f);
    }
    tnd_plan_free(pl);
    tnd_model_free(m);
    return rc;
}
