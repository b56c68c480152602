/* tandem plan: where every weight slice would run, what the GPU would hold,
 * and the predicted round times — as a table, JSON and an SVG picture —
 * without loading anything big. Needs no GPU with --device sim --hw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "sched/perf.h"
#include "sched/plan_svg.h"
#include "tandem.h"
#include "tools.h"
#include "util.h"

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
               "      --promote P        none (default), all, auto, random:SEED\n"
               "  -c, --ctx-size N       context length (default: min(model, 4096))\n"
               "  -b, --batch-size N     prefill chunk (default 512)\n"
               "  -t, --threads N        CPU threads (default: physical cores)\n"
               "      --json             JSON instead of the table\n"
               "      --svg FILE         also draw the placement (layers x tensor roles)\n"
               "      --save FILE        also write the placement as a file for --placement\n"
               "      --cpu-exact        plan for CPU matmuls with f32 activations (its own perf DB)\n",
            tnd_hw_names());
}

/* Tensor roles, the columns of the table and the picture. */
static const char *const roles[] = {"attn_q", "attn_k", "attn_v", "kv", "attn_output", "ffn_gate_inp",
                                    "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
#define N_ROLES ((int)(sizeof roles / sizeof *roles))

static const tnd_weight *role_weight(const tnd_layer *L, int r) {
    const tnd_weight *w[] = {&L->wq, &L->wk, &L->wv, NULL, &L->wo, &L->router, &L->ffn_gate, &L->ffn_up,
                             &L->ffn_down, &L->gate_exps, &L->up_exps, &L->down_exps};
    return w[r];
}

static const char *side_name(const tnd_ctx *c, int sid) {
    if (!c->gpu) return "cpu";
    if (c->pl.promote[sid] && c->lay.n_slots) return c->pl.promote_auto ? "auto" : "promote";
    return c->pl.where[sid] ? "gpu" : "cpu";
}

/* Layer l's experts on the GPU: how many, and their share of the routings
 * (the perf DB's hot-expert table; the count's share without one). */
static int gpu_experts(const tnd_ctx *c, const tnd_perf *pf, int l, double *share) {
    const tnd_model *m = c->m;
    int E = c->pl.n_expert, g = c->gpu ? tnd_placement_gpu_experts(m, &c->pl, l) : 0;
    *share = E ? (double)g / E : 0;
    if (!E || !pf || !pf->pop || pf->n_expert != E || g == 0 || g == E) return g;
    double on = 0, all = 0;
    for (int e = 0; e < E; e++) {
        double x = pf->pop[(size_t)l * E + e];
        all += x;
        if (c->pl.split[l] ? c->pl.exp[(size_t)l * E + e] == TND_SIDE_GPU : g == E) on += x;
    }
    if (all > 0) *share = on / all;
    return g;
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
    tnd_ctx *c;
    if (tnd_ctx_plan_only(m, &cp, &c)) {
        tools_print_error("plan");
        tnd_model_free(m);
        return 1;
    }
    /* predictions need a perf DB: the static placement's, or this machine's */
    tnd_perf *pf_own = NULL, *pf = c->perf;
    if (!pf && c->gpu) {
        if (!tnd_ctx_get_perf(c, &cp, &pf_own)) pf = pf_own;
        else tnd_clear_error();
    }
    double t_dec = 0, t_pp = 0, t_pp2 = 0;
    if (pf) {
        t_dec = tnd_perf_predict(m, pf, &c->pl, c->lay.n_slots, 1, c->n_ctx / 2);
        t_pp = tnd_perf_predict(m, pf, &c->pl, c->lay.n_slots, TND_MIN(512, c->n_batch), 0);
        t_pp2 = tnd_perf_predict(m, pf, &c->pl, c->lay.n_slots, TND_MIN(2048, c->n_batch), 0);
    }
    const tnd_layout *l = &c->lay;
    const tnd_hparams *hp = &m->hp;
    uint64_t kv_layer = 2ull * c->n_ctx * (uint64_t)c->kv_dim * sizeof(uint16_t);
    if (json) {
        printf("{\"model\": ");
        tnd_json_str(stdout, model, strlen(model));
        printf(", \"placement\": ");
        tnd_json_str(stdout, c->pl.desc, strlen(c->pl.desc));
        printf(", \"device\": \"%s\", \"n_ctx\": %d, \"n_batch\": %d", c->gpu ? c->side[1].be->iface->name : "cpu",
               c->n_ctx, c->n_batch);
        printf(", \"budget_bytes\": %llu, \"gpu_bytes\": %llu", (unsigned long long)c->budget_asked,
               (unsigned long long)(c->gpu ? l->gpu_total : 0));
        printf(", \"gpu\": {\"weights\": %llu, \"norms\": %llu, \"kv_cache\": %llu, \"activations\": %llu, "
               "\"slots\": %llu, \"n_slots\": %d, \"scratch\": %llu}",
               (unsigned long long)l->w_gpu, (unsigned long long)l->small_gpu, (unsigned long long)l->kv_gpu,
               (unsigned long long)l->act_gpu, (unsigned long long)l->slots_gpu, l->n_slots,
               (unsigned long long)l->scratch_gpu);
        printf(", \"host\": {\"pinned\": %llu, \"kv_cache\": %llu}", (unsigned long long)l->pinned_host,
               (unsigned long long)l->kv_cpu);
        if (pf) {
            printf(", \"predicted\": {\"source\": ");
            tnd_json_str(stdout, pf->source, strlen(pf->source));
            printf(", \"decode_ms\": %.4f, \"prefill%d_ms\": %.4f, \"prefill%d_ms\": %.4f}", 1e3 * t_dec, TND_MIN(512, c->n_batch), 1e3 * t_pp, TND_MIN(2048, c->n_batch), 1e3 * t_pp2);
        }
        printf(", \"slices\": [");
        for (int i = 0; i < m->n_slices; i++) {
            const tnd_weight *w = m->slices[i];
            int sl;
            if (c->gpu && tnd_slice_split(m, &c->pl, i, &sl)) {
                /* one entry per expert: "blk.3.ffn_up_exps[17]" */
                size_t nl = w->t->name.len;
                if (nl > 7 && !memcmp(w->t->name.ptr + nl - 7, ".weight", 7)) nl -= 7;
                for (int e = 0; e < c->pl.n_expert; e++) {
                    char nm[300];
                    snprintf(nm, sizeof nm, "%.*s[%d]", (int)nl, w->t->name.ptr, e);
                    printf("%s{\"name\": ", i || e ? ", " : "");
                    tnd_json_str(stdout, nm, strlen(nm));
                    bool on = c->pl.exp[(size_t)sl * c->pl.n_expert + e] == TND_SIDE_GPU;
                    printf(", \"bytes\": %llu, \"backend\": \"%s\"}",
                           (unsigned long long)(w->t->nbytes / (uint64_t)w->n_expert), on ? "gpu" : side_name(c, i));
                }
                continue;
            }
            printf("%s{\"name\": ", i ? ", " : "");
            tnd_json_str(stdout, w->t->name.ptr, w->t->name.len);
            printf(", \"bytes\": %llu, \"backend\": \"%s\"", (unsigned long long)w->t->nbytes,
                   tnd_slice_small(w) && c->gpu ? "both" : side_name(c, i));
            if (pf && !tnd_slice_small(w))
                printf(", \"t_cpu_ms\": %.4f, \"t_gpu_ms\": %.4f", 1e3 * tnd_perf_slice_time(pf, i, 0, 1),
                       1e3 * tnd_perf_slice_time(pf, i, 1, 1));
            printf("}");
        }
        printf("], \"experts\": [");
        for (int il = 0, k = 0; c->pl.n_expert && il < hp->n_layer; il++) {
            double share;
            int g = gpu_experts(c, pf, il, &share);
            if (!m->layers[il].gate_exps.t) continue;
            printf("%s{\"layer\": %d, \"n_expert\": %d, \"gpu\": %d, \"gpu_routing_share\": %.4f}", k++ ? ", " : "",
                   il, c->pl.n_expert, g, share);
        }
        printf("], \"kv\": [");
        for (int il = 0; il < hp->n_layer; il++)
            printf("%s{\"layer\": %d, \"bytes\": %llu, \"backend\": \"%s\"}", il ? ", " : "", il,
                   (unsigned long long)kv_layer, c->gpu && c->pl.kv[il] ? "gpu" : "cpu");
        printf("]}\n");
    } else {
        printf("model: %s\nplacement: %s\n", m->desc, c->pl.desc);
        if (budget) printf("GPU budget: %.1f MiB (--vram-budget %s)\n\n", cp.vram_budget / 1048576.0, budget);
        else if (cp.device == TND_DEVICE_SIM) printf("GPU budget: the %s profile's memory\n\n", cp.hw);
        else printf("GPU budget: the driver's free memory less 512 MiB\n\n");
        printf("layer");
        for (int r = 0; r < N_ROLES; r++) {
            bool any = false;
            for (int il = 0; il < hp->n_layer && !any; il++) any = r == 3 || (role_weight(&m->layers[il], r)->t != NULL);
            if (any) printf(" %s", roles[r]);
        }
        if (c->pl.n_expert) printf(" gpu_experts");
        printf("   (G gpu, C cpu, P promoted every round, A promoted when it pays; lower case: split expert by "
               "expert, the letter for the CPU's experts; gpu_experts: how many are on the GPU and their share of "
               "the routings)\n");
        for (int il = 0; il < hp->n_layer; il++) {
            printf("%5d", il);
            for (int r = 0; r < N_ROLES; r++) {
                const tnd_weight *w = role_weight(&m->layers[il], r);
                bool any = false;
                for (int j = 0; j < hp->n_layer && !any; j++) any = r == 3 || (role_weight(&m->layers[j], r)->t != NULL);
                if (!any) continue;
                char ch = r == 3 ? (c->gpu && c->pl.kv[il] ? 'G' : 'C')
                          : !w->t ? '-'
                                  : (side_name(c, w->id)[0] - 32);
                /* split: lower case, the side of the CPU's experts (the GPU's are resident) */
                if (w && w->t && c->gpu && tnd_slice_split(m, &c->pl, w->id, NULL)) ch = (char)(ch + 32);
                printf(" %*c", (int)strlen(roles[r]), ch);
            }
            double share;
            int g = gpu_experts(c, pf, il, &share);
            if (c->pl.n_expert && m->layers[il].gate_exps.t) printf(" %4d/%d %3.0f%%", g, c->pl.n_expert, 100 * share);
            printf("\n");
        }
        printf("output: %s   token_embd: %s\n\n", m->output.id >= 0 ? side_name(c, m->output.id) : "-",
               side_name(c, m->tok_embd.id));
        tnd_layout_print(l, stdout);
        if (pf) {
            int b1 = TND_MIN(512, c->n_batch), b2 = TND_MIN(2048, c->n_batch);
            printf("\npredicted (%s):\n  decode at half the context %.2f ms/token (%.1f tok/s)\n  prefill chunk of %d: %.1f ms (%.0f tok/s)\n",
                   pf->source, 1e3 * t_dec, 1 / t_dec, b1, 1e3 * t_pp, b1 / t_pp);
            if (b2 != b1) printf("  prefill chunk of %d: %.1f ms (%.0f tok/s)\n", b2, 1e3 * t_pp2, b2 / t_pp2);
        }
    }
    int rc = 0;
    if (svg) {
        int rows = hp->n_layer + 1;
        float *cells = malloc(sizeof(float) * (size_t)rows * N_ROLES);
        const char **labels = malloc(sizeof(char *) * (size_t)rows);
        char *lab = malloc((size_t)rows * 16);
        if (!cells || !labels || !lab) {
            fprintf(stderr, "tandem: error: out of memory\n");
            free(cells), free(labels), free(lab);
            tnd_ctx_free(c);
            tnd_model_free(m);
            return 1;
        }
        for (int il = 0; il < hp->n_layer; il++) {
            snprintf(lab + il * 16, 16, "blk.%d", il);
            labels[il] = lab + il * 16;
            for (int r = 0; r < N_ROLES; r++) {
                const tnd_weight *w = role_weight(&m->layers[il], r);
                cells[il * N_ROLES + r] = r == 3 ? (float)(c->gpu && c->pl.kv[il]) : !w->t ? -1.0f
                                                   : (float)(c->gpu && c->pl.where[w->id]);
                double share;
                /* a split expert tensor: the share of the routings its GPU experts take */
                if (w && w->t && c->gpu && tnd_slice_split(m, &c->pl, w->id, NULL)) {
                    gpu_experts(c, pf, il, &share);
                    cells[il * N_ROLES + r] = (float)share;
                }
            }
        }
        labels[hp->n_layer] = "output";
        for (int r = 0; r < N_ROLES; r++) cells[hp->n_layer * N_ROLES + r] = -1;
        cells[hp->n_layer * N_ROLES + 8] = m->output.id >= 0 && c->gpu ? (float)c->pl.where[m->output.id] : 0;
        char title[320];
        snprintf(title, sizeof title, "%s: %s", m->desc, c->pl.desc);
        if (tnd_plan_svg(svg, title, rows, labels, N_ROLES, roles, cells)) {
            tools_print_error("svg");
            rc = 1;
        } else if (!json) {
            printf("\npicture: %s\n", svg);
        }
        free(cells);
        free(labels);
        free(lab);
    }
    if (save) {
        FILE *f = fopen(save, "w");
        if (!f || tnd_placement_write(m, &c->pl, f)) {
            fprintf(stderr, "tandem: error: cannot write %s\n", save);
            rc = 1;
        }
        if (f) fclose(f);
    }
    if (pf_own) {
        tnd_perf_free(pf_own);
        free(pf_own);
    }
    tnd_ctx_free(c);
    tnd_model_free(m);
    return rc;
}
