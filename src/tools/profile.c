/* tandem profile: measures this machine for a model (docs/ARCHITECTURE.md: The perf DB): per
 * weight slice, CPU and GPU seconds for a decode step and prefill chunks of
 * 512 and 2048 tokens; attention and the other ops of a layer; pinned PCIe,
 * CPU read and GPU memory bandwidths; the latency of a backend switch. The
 * result is cached, keyed by model and hardware, for static placement: it is
 * the perf DB of a static plan built with the cache bypassed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "runtime/runtime.h"
#include "tandem.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem profile [options]\n\n"
               "  -m, --model FILE       GGUF model (default: the default model)\n"
               "      --device cuda|sim  (default: cuda if present, else sim)\n"
               "      --hw PROFILE       SimGPU: take times from this hardware profile's cost model\n"
               "  -t, --threads N        CPU threads (default: physical cores)\n"
               "      --json             JSON instead of the table\n"
               "      --cpu-exact        measure CPU matmuls with f32 activations (the exact mode;\n"
               "                         its own perf DB, apart from the default Q8 activations')\n"
               "The result is cached (in $TANDEM_CACHE, else $XDG_CACHE_HOME/tandem or\n"
               "~/.cache/tandem) and reused by the static placement of run, bench and plan.\n\n"
               "MoE routing and the next-layer expert predictor (no machine profile then):\n"
               "      --record-routing FILE  run tokens through the model on the CPU and save, per MoE\n"
               "                         layer and token, the router input and the top-k experts\n"
               "      --train-predictor FILE  train the next-layer expert predictor (LLaPor) on\n"
               "                         recorded routing, print its held-out top-k hit rate against\n"
               "                         the baselines, save it to FILE\n"
               "      --routing FILE     train from this routing file instead of recording now\n"
               "      --routing-tokens N tokens to record, as sequences of 512 (default 4096)\n"
               "      --text FILE        record over this text (repeated to N tokens); default:\n"
               "                         pseudo-random token ids from --seed\n"
               "      --holdout F        share of the tokens held out for the evaluation (default 0.25)\n"
               "      --epochs N         training epochs (default 30)\n"
               "      --pca IO,MID       PCA dimensions of the input/output and middle layer groups\n"
               "                         (default: 1/16 and 1/8 of the width, at least 32 and 64)\n"
               "      --hidden N         hidden width of the networks (default 2 x experts, 64..256)\n"
               "      --seed N           token, initialization and shuffling seed (default 1)\n");
}

/* Pseudo-random token ids (xorshift from seed), the same for a seed. */
static void random_tokens(int32_t *t, int n, int nv, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t[i] = (int32_t)(x % (uint64_t)nv);
    }
}

/* --record-routing / --train-predictor */
static int routing_cmd(tnd_model *m, const char *rec_out, const char *pred_out, const char *rec_in, const char *text,
                       long n_tok, double holdout, long epochs, long seed, bool json, bool cpu_exact,
                       const tnd_pred_params *base) {
    tnd_route_rec *r = NULL;
    tnd_predictor *P = NULL;
    int32_t *toks = NULL;
    int rc = 1;
    if (rec_in) {
        if (tnd_route_rec_load(rec_in, &r)) goto fail;
        if (r->n_layer != m->hp.n_layer || r->n_embd != m->hp.n_embd || r->n_expert != m->hp.n_expert ||
            r->k != m->hp.n_expert_used) {
            fprintf(stderr, "tandem: error: %s: recorded from a model of another shape than %s\n", rec_in, m->desc);
            goto out;
        }
    } else {
        if (!(toks = malloc(sizeof(int32_t) * (size_t)n_tok))) {
            fprintf(stderr, "tandem: error: out of memory\n");
            goto out;
        }
        long have = 0;
        if (text) {
            char *buf;
            size_t len, k = 0;
            int32_t *ids = NULL;
            if (tnd_read_regular(text, "text file", 64u << 20, &buf, &len)) goto fail;
            tnd_status st = tnd_tokenize(tnd_model_tokenizer(m), buf, len, true, false, &ids, &k);
            free(buf);
            if (st) goto fail;
            for (; k && have < n_tok; have++) toks[have] = ids[(size_t)have % k];
            free(ids);
            if (!have) {
                fprintf(stderr, "tandem: error: %s: no tokens in the text\n", text);
                goto out;
            }
        } else {
            random_tokens(toks, (int)n_tok, tnd_model_n_vocab(m), (uint64_t)seed);
        }
        if (tnd_route_rec_new(m, n_tok, &r) || tnd_route_record_tokens(m, toks, (int)n_tok, cpu_exact, r)) goto fail;
        if (rec_out && tnd_route_rec_save(r, rec_out)) goto fail;
        if (rec_out) fprintf(stderr, "routing of %lld tokens through %d MoE layers saved to %s\n",
                             (long long)tnd_route_rec_n_tok(r), r->n_layer, rec_out);
    }
    if (pred_out) {
        const int64_t n = tnd_route_rec_n_tok(r), n_test = (int64_t)(holdout * (double)n), n_train = n - n_test;
        tnd_pred_params pp = *base;
        pp.epochs = (int)epochs;
        pp.seed = (uint64_t)seed;
        double t0 = tnd_time_s();
        if (tnd_predictor_train(r, n_train, &pp, &P)) goto fail;
        double took = tnd_time_s() - t0;
        if (tnd_predictor_save(P, pred_out)) goto fail;
        tnd_pred_eval e;
        if (n_test > 0 && tnd_predictor_eval(P, r, n_train, n, m, &e)) goto fail;
        if (json) {
            printf("{\"model\": ");
            tnd_json_str(stdout, m->desc, strlen(m->desc));
            printf(", \"train_tokens\": %lld, \"train_s\": %.2f, \"predictor\": ", (long long)n_train, took);
            if (n_test > 0) tnd_pred_eval_json(&e, stdout);
            else printf("null");
            printf("}\n");
        } else {
            printf("model: %s\npredictor: %d layers, trained on %lld tokens in %.1f s, saved to %s\n\n", m->desc,
                   r->n_layer - 1, (long long)n_train, took, pred_out);
            if (n_test > 0) tnd_pred_eval_print(&e, stdout);
        }
    }
    rc = 0;
    goto out;
fail:
    tools_print_error("profile");
out:
    tnd_predictor_free(P);
    tnd_route_rec_free(r);
    free(toks);
    return rc;
}

int cmd_profile(int argc, char **argv) {
    const char *model = NULL, *hw_name = NULL;
    const char *rec_out = NULL, *pred_out = NULL, *rec_in = NULL, *text = NULL;
    bool json = false, cpu_exact = false;
    long threads = 0, n_tok = 4096, epochs = 30, seed = 1;
    double holdout = 0.25;
    tnd_pred_params pp = tnd_pred_default_params();
    tnd_device dev = tnd_cuda_device_count() > 0 ? TND_DEVICE_CUDA : TND_DEVICE_SIM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (!strcmp(a, "--cpu-exact")) {
            cpu_exact = true;
            continue;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = (model = v) != NULL;
        else if (!strcmp(a, "--device")) {
            ok = v && (!strcmp(v, "cuda") || !strcmp(v, "sim"));
            if (ok) dev = strcmp(v, "cuda") ? TND_DEVICE_SIM : TND_DEVICE_CUDA;
        } else if (!strcmp(a, "--hw")) ok = (hw_name = v) != NULL;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = tools_parse_int(v, 1, 1024, &threads);
        else if (!strcmp(a, "--record-routing")) ok = (rec_out = v) != NULL;
        else if (!strcmp(a, "--train-predictor")) ok = (pred_out = v) != NULL;
        else if (!strcmp(a, "--routing")) ok = (rec_in = v) != NULL;
        else if (!strcmp(a, "--text")) ok = (text = v) != NULL;
        else if (!strcmp(a, "--routing-tokens")) ok = tools_parse_int(v, 32, 1 << 20, &n_tok);
        else if (!strcmp(a, "--epochs")) ok = tools_parse_int(v, 1, 10000, &epochs);
        else if (!strcmp(a, "--pca")) {
            int io = 0, mid = 0, used = 0;
            ok = v && sscanf(v, "%d,%d%n", &io, &mid, &used) == 2 && !v[used] && io >= 1 && io <= 4096 && mid >= 1 &&
                 mid <= 4096;
            pp.pca_io = io, pp.pca_mid = mid;
        } else if (!strcmp(a, "--hidden")) {
            long h = 0;
            ok = tools_parse_int(v, 4, 4096, &h);
            pp.hidden = (int)h;
        }
        else if (!strcmp(a, "--seed")) ok = tools_parse_int(v, 1, (1L << 31) - 1, &seed);
        else if (!strcmp(a, "--holdout")) ok = tools_parse_float(v, &holdout) && holdout >= 0 && holdout < 1;
        else return tools_bad_option("profile", a, true, usage);
        if (!ok) return tools_bad_option("profile", a, false, usage);
        i++;
    }
    if (rec_in && rec_out) {
        fprintf(stderr, "tandem: error: --routing reads a routing file, --record-routing writes one: not both\n");
        return 2;
    }
    if ((rec_in || text) && !rec_out && !pred_out) {
        fprintf(stderr, "tandem: error: --routing and --text go with --record-routing or --train-predictor\n");
        return 2;
    }
    tnd_model *m;
    if (!tools_load_model(&model, threads, &m)) return 1;
    if (rec_out || pred_out) {
        int rc = 1;
        if (!m->arch->moe || m->hp.n_expert < 2 || m->hp.n_layer < 2)
            fprintf(stderr, "tandem: error: %s: routing needs an MoE model of 2 layers at least\n", model);
        else
            rc = routing_cmd(m, rec_out, pred_out, rec_in, text, n_tok, holdout, epochs, seed, json, cpu_exact, &pp);
        tnd_model_free(m);
        return rc;
    }
    /* a fresh measurement (then cached): the perf DB of a static plan, with
     * the cache bypassed */
    tnd_ctx_params cp = tnd_ctx_default_params();
    cp.reprofile = true;
    cp.cpu_exact |= cpu_exact;
    cp.device = dev;
    cp.hw = hw_name;
    cp.placement = "static";
    cp.n_ctx = 256;
    cp.n_batch = 256;
    tnd_plan *pl;
    double t0 = tnd_time_s();
    if (tnd_plan_build(m, &cp, &pl)) {
        tools_print_error("profile");
        tnd_model_free(m);
        return 1;
    }
    const tnd_perf *pf = tnd_plan_perf(pl);
    if (!pf) {
        fprintf(stderr, "tandem: error: profiling needs a GPU (--device cuda, or --device sim)\n");
        tnd_plan_free(pl);
        tnd_model_free(m);
        return 1;
    }
    double took = tnd_time_s() - t0;
    if (json) {
        printf("{\"model\": ");
        tnd_json_str(stdout, model, strlen(model));
        printf(", \"source\": ");
        tnd_json_str(stdout, pf->source, strlen(pf->source));
        printf(", \"seconds\": %.2f, \"b_pcie\": %.4e, \"b_cpu\": %.4e, "
               "\"b_hbm\": %.4e, \"switch_latency_s\": %.4e, \"launch_s\": %.4e, \"decode_calibration\": %.4f, "
               "\"switch_host_s\": %.4e, \"disturbed\": %s, "
               "\"tokens\": [%d, %d, %d], "
               "\"attn_cpu_s\": [%.4e, %.4e, %.4e], \"attn_gpu_s\": [%.4e, %.4e, %.4e], \"slices\": [",
               took, pf->b_pcie, pf->b_cpu, pf->b_hbm, pf->lat, pf->launch, pf->cal_decode, pf->sw_host,
               strstr(pf->source, TND_PERF_DISTURBED) ? "true" : "false",
               tnd_perf_nt[0], tnd_perf_nt[1],
               tnd_perf_nt[2], pf->attn_cpu[0], pf->attn_cpu[1], pf->attn_cpu[2], pf->attn_gpu[0], pf->attn_gpu[1],
               pf->attn_gpu[2]);
        int first = 1;
        for (int i = 0; i < m->n_slices; i++) {
            const tnd_weight *w = m->slices[i];
            if (tnd_slice_small(w)) continue;
            printf("%s{\"name\": ", first ? "" : ", ");
            tnd_json_str(stdout, w->t->name.ptr, w->t->name.len);
            printf(", \"bytes\": %llu, \"t_cpu_s\": [%.4e, %.4e, %.4e], \"t_gpu_s\": [%.4e, %.4e, %.4e]}",
                   (unsigned long long)w->t->nbytes,
                   pf->t_cpu[i * 3], pf->t_cpu[i * 3 + 1], pf->t_cpu[i * 3 + 2], pf->t_gpu[i * 3], pf->t_gpu[i * 3 + 1],
                   pf->t_gpu[i * 3 + 2]);
            first = 0;
        }
        printf("]");
        if (pf->pop) {
            printf(", \"expert_popularity\": [");
            for (int l = 0; l < pf->n_layer; l++) {
                printf("%s[", l ? ", " : "");
                for (int e = 0; e < pf->n_expert; e++) printf("%s%.4f", e ? ", " : "", pf->pop[(size_t)l * pf->n_expert + e]);
                printf("]");
            }
            printf("]");
        }
        printf("}\n");
    } else {
        printf("model: %s\nperf DB: %s (%.1f s)\n", m->desc, pf->source, took);
        printf("bandwidth: pinned PCIe %.1f GB/s, CPU read %.1f GB/s, GPU memory %.1f GB/s; switch latency %.1f us; "
               "queuing a GPU op %.1f us\n\n",
               pf->b_pcie / 1e9, pf->b_cpu / 1e9, pf->b_hbm / 1e9, pf->lat * 1e6, pf->launch * 1e6);
        if (pf->cal_decode > 0)
            printf("decode calibration: a real CPU decode step took %.2fx the sum of its ops timed alone; the CPU "
                   "decode times below include that factor\n\n",
                   pf->cal_decode);
        if (pf->note[0]) printf("%s\n", pf->note);
        if (pf->sw_host > 0)
            printf("hybrid calibration: in real hybrid decode steps each move between the CPU and the GPU cost the "
                   "host %.1f us more than the switch latency above; the model adds it\n\n",
                   pf->sw_host * 1e6);
        printf("| slice (first of its shape) | MiB | CPU ms: 1 / %d / %d | GPU ms: 1 / %d / %d | k_cpu ms/MB | k_gpu ms/MB |\n"
               "|---|---:|---|---|---:|---:|\n",
               tnd_perf_nt[1], tnd_perf_nt[2], tnd_perf_nt[1], tnd_perf_nt[2]);
        for (int i = 0; i < m->n_slices; i++) {
            const tnd_weight *w = m->slices[i];
            if (tnd_slice_small(w) || pf->t_cpu[i * 3] == 0) continue;
            bool seen = false; /* one row per distinct timing */
            for (int j = 0; j < i && !seen; j++)
                seen = !memcmp(&pf->t_cpu[j * 3], &pf->t_cpu[i * 3], 3 * sizeof(double)) &&
                       !memcmp(&pf->t_gpu[j * 3], &pf->t_gpu[i * 3], 3 * sizeof(double));
            if (seen) continue;
            double mb = w->t->nbytes / 1e6;
            printf("| %.*s | %.1f | %.3f / %.1f / %.1f | %.3f / %.2f / %.2f | %.4f | %.4f |\n", (int)w->t->name.len,
                   w->t->name.ptr, w->t->nbytes / 1048576.0, 1e3 * pf->t_cpu[i * 3], 1e3 * pf->t_cpu[i * 3 + 1],
                   1e3 * pf->t_cpu[i * 3 + 2], 1e3 * pf->t_gpu[i * 3], 1e3 * pf->t_gpu[i * 3 + 1], 1e3 * pf->t_gpu[i * 3 + 2],
                   1e3 * pf->t_cpu[i * 3] / mb, 1e3 * pf->t_gpu[i * 3] / mb);
        }
        printf("| attention (one layer) | | %.3f / %.1f / %.1f | %.3f / %.2f / %.2f | | |\n", 1e3 * pf->attn_cpu[0],
               1e3 * pf->attn_cpu[1], 1e3 * pf->attn_cpu[2], 1e3 * pf->attn_gpu[0], 1e3 * pf->attn_gpu[1],
               1e3 * pf->attn_gpu[2]);
        if (pf->pop) { /* the hot-expert table, summarized */
            int E = pf->n_expert, top = E / 8 > 0 ? E / 8 : 1;
            double share = 0;
            for (int l = 0; l < pf->n_layer; l++) {
                double tot = 0, hot = 0, *v = malloc(sizeof(double) * (size_t)E);
                memcpy(v, pf->pop + (size_t)l * E, sizeof(double) * (size_t)E);
                for (int e = 0; e < E; e++) tot += v[e];
                for (int t = 0; t < top; t++) { /* the top experts by selection */
                    int b = 0;
                    for (int e = 1; e < E; e++) b = v[e] > v[b] ? e : b;
                    hot += v[b];
                    v[b] = -1;
                }
                share += tot > 0 ? hot / tot : 0;
                free(v);
            }
            printf("\nexpert popularity (calibration run): the hottest %d of %d experts of a layer take %.0f%% of its "
                   "routings on average (uniform: %.0f%%)\n",
                   top, E, 100.0 * share / pf->n_layer, 100.0 * top / E);
        }
    }
    tnd_plan_free(pl);
    tnd_model_free(m);
    return 0;
}
