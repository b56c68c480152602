/* Options and the generation loop shared by `run` and `chat`: streaming
 * output that never splits a UTF-8 character or shows part of a stop string,
 * timing, and the --dump file the reference tests read. */
#include "generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void gen_opts_init(gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_threads = 0;
    o->sp = tnd_sampler_default_params();
}

const char *gen_opts_help =
    "  -m, --model FILE       GGUF model (default: the default model)\n"
    "  -n, --n-predict N      tokens to generate (default 128; -1 = until end of text or context)\n"
    "  -t, --threads N        CPU threads (default: physical cores)\n"
    "  -c, --ctx-size N       context length (default: min(model, 4096))\n"
    "  -b, --batch-size N     prefill chunk size in tokens (default 512)\n"
    "      --temp T           temperature; 0 = greedy (default 0.8)\n"
    "      --top-k N          (default 40; 0 = off)\n"
    "      --top-p P          (default 0.95; 1 = off)\n"
    "      --min-p P          (default 0.05; 0 = off)\n"
    "      --repeat-penalty X (default 1.0 = off)\n"
    "      --repeat-last-n N  tokens the penalty looks at (default 64)\n"
    "  -s, --seed S           sampling seed (default: random)\n"
    "      --stop TEXT        stop when TEXT is generated (repeatable)\n"
    "      --chat-template NAME  override the model's template (chatml, llama3, gemma, ...)\n"
    "      --system TEXT      system message (chat mode)\n"
    "      --device cpu|cuda|sim  where to run (default cpu); cuda: the CPU and the GPU;\n"
    "                         sim: the CPU and SimGPU, a GPU simulated on CPU threads\n"
    "      --vram-budget X    GPU memory tandem may use in all: bytes (6G, 4523M) or a\n"
    "                         percentage of the model's weight bytes (50%)\n"
    "      --placement P      where weights run with a GPU: static (default: measured once,\n"
    "                         then ATSInfer's placement), layer (whole layers from the last\n"
    "                         while they fit), gpu, cpu, random:SEED, or a file of\n"
    "                         'PATTERN cpu|gpu|promote' lines (--policy: same)\n"
    "      --promote P        CPU weights copied to the GPU for a round: none (default),\n"
    "                         all, auto (when the copy pays: prefill), random:SEED\n"
    "      --hw PROFILE       SimGPU timing profile (rtx3060-laptop, rtx4090-desktop,\n"
    "                         h200-device, or a file)\n"
    "      --dry-run          print the placement and memory layout, run nothing\n"
    "      --check-weights    scan every weight for NaN and Inf at load (reads the whole file;\n"
    "                         by default small tensors are scanned and big ones sampled)\n"
    "  -v, --verbose          log loading details\n";

/* Returns 1 if argv[*i] was a shared option (consumed, with its value), 0 if
 * not, -1 on a bad value (message printed). */
int gen_opts_parse(gen_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
#define VAL() (*i + 1 < argc ? argv[++*i] : NULL)
#define BAD(what)                                                                    \
    do {                                                                             \
        fprintf(stderr, "tandem: error: %s needs %s\n", a, what);                    \
        return -1;                                                                   \
    } while (0)
    long lv;
    double dv;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (!(o->model = VAL())) BAD("a file");
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        if (!tools_parse_int(VAL(), -1, 1 << 30, &lv)) BAD("an integer >= -1");
        o->n_predict = (int)lv;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (!tools_parse_int(VAL(), 1, 1024, &lv)) BAD("an integer in 1..1024");
        o->n_threads = (int)lv;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        if (!tools_parse_int(VAL(), 1, TOOLS_MAX_CTX, &lv))
            BAD("an integer from 1 to " TOOLS_MAX_CTX_TEXT " (the most tandem supports; the model's own context "
                "length caps it too)");
        o->cp.n_ctx = (int)lv;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
        if (!tools_parse_int(VAL(), 1, 1 << 16, &lv)) BAD("a positive integer");
        o->cp.n_batch = (int)lv;
    } else if (!strcmp(a, "--temp")) {
        if (!tools_parse_float(VAL(), &dv) || dv < 0) BAD("a number >= 0");
        o->sp.temp = (float)dv;
    } else if (!strcmp(a, "--top-k")) {
        if (!tools_parse_int(VAL(), 0, 1 << 30, &lv)) BAD("an integer >= 0");
        o->sp.top_k = (int)lv;
    } else if (!strcmp(a, "--top-p")) {
        if (!tools_parse_float(VAL(), &dv) || dv <= 0 || dv > 1) BAD("a number in (0, 1]");
        o->sp.top_p = (float)dv;
    } else if (!strcmp(a, "--min-p")) {
        if (!tools_parse_float(VAL(), &dv) || dv < 0 || dv > 1) BAD("a number in [0, 1]");
        o->sp.min_p = (float)dv;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (!tools_parse_float(VAL(), &dv) || dv <= 0) BAD("a number > 0");
        o->sp.repeat_penalty = (float)dv;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (!tools_parse_int(VAL(), 0, 1 << 20, &lv)) BAD("an integer >= 0");
        o->sp.repeat_last_n = (int)lv;
    } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        if (!tools_parse_int(VAL(), 0, 0x7fffffffffffffffL, &lv)) BAD("an integer >= 0");
        o->sp.seed = (uint64_t)lv;
        o->seed_set = true;
    } else if (!strcmp(a, "--stop")) {
        const char *s = VAL();
        if (!s || !*s) BAD("a non-empty text");
        if (o->n_stop >= GEN_MAX_STOP) BAD("fewer values (too many --stop)");
        o->stop[o->n_stop++] = s;
    } else if (!strcmp(a, "--chat-template")) {
        if (!(o->chat_template = VAL())) BAD("a name");
    } else if (!strcmp(a, "--system")) {
        if (!(o->system = VAL())) BAD("a text");
    } else if (!strcmp(a, "--device")) {
        const char *d = VAL();
        if (!d || (strcmp(d, "cpu") && strcmp(d, "cuda") && strcmp(d, "sim"))) BAD("cpu, cuda or sim");
        o->cp.device = !strcmp(d, "cuda") ? TND_DEVICE_CUDA : !strcmp(d, "sim") ? TND_DEVICE_SIM : TND_DEVICE_CPU;
    } else if (!strcmp(a, "--placement") || !strcmp(a, "--policy")) {
        if (!(o->cp.placement = VAL())) BAD("layer, gpu, cpu, random:SEED or a placement file");
    } else if (!strcmp(a, "--promote")) {
        if (!(o->cp.promote = VAL())) BAD("none, all, auto or random:SEED");
    } else if (!strcmp(a, "--hw")) {
        if (!(o->cp.hw = VAL())) BAD("a hardware profile name or file");
    } else if (!strcmp(a, "--dry-run")) {
        o->dry_run = true;
    } else if (!strcmp(a, "--vram-budget")) {
        if (!(o->vram_budget = VAL())) BAD("a size (6G, 4523M) or a percentage of the weights (50%)");
        if (!tools_check_budget(o->vram_budget)) return -1;
    } else if (!strcmp(a, "--check-weights")) {
        o->check_weights = true;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        o->verbose = true;
        o->cp.verbose = true;
    } else {
        return 0;
    }
    return 1;
#undef VAL
#undef BAD
}

tnd_status gen_load(gen_opts *o, tnd_model **m, tnd_ctx **c, tnd_sampler **s) {
    *m = NULL;
    *c = NULL;
    *s = NULL;
    if (!o->model && !(o->model = tools_default_model())) return TND_ERR_ARG;
    if (o->verbose) tnd_log_set_level(TND_LOG_INFO);
    if (!o->seed_set) o->sp.seed = (uint64_t)(tnd_time_s() * 1e6);
    tnd_model_params mp = tnd_model_default_params();
    mp.n_threads = o->n_threads;
    mp.verbose = o->verbose;
    mp.check_weights = o->check_weights;
    tnd_status st = tnd_model_load(o->model, &mp, m);
    if (st) return st;
    if (o->vram_budget && (st = tnd_parse_budget(o->vram_budget, *m, &o->cp.vram_budget))) {
        tnd_fail_wrap(st, "--vram-budget: ");
        o->usage_error = true;
        tnd_model_free(*m);
        *m = NULL;
        return st;
    }
    if (o->dry_run) {
        char *text = NULL;
        if (!(st = tnd_ctx_plan_text(*m, &o->cp, &text))) fputs(text, stdout);
        free(text);
        tnd_model_free(*m);
        *m = NULL;
        return st; /* nothing loaded: the caller stops here (o->dry_run) */
    }
    if ((st = tnd_ctx_new(*m, &o->cp, c)) || (st = tnd_sampler_new(&o->sp, s))) {
        tnd_ctx_free(*c);
        tnd_model_free(*m);
        *c = NULL;
        *m = NULL;
        return st;
    }
    return TND_OK;
}

void gen_chat_warn(const gen_opts *o, const tnd_model *m) {
    if (!o->chat_template && !tnd_model_chat_template(m))
        fprintf(stderr, "tandem: warning: the model has no chat template; using chatml (--chat-template NAME "
                        "picks another)\n");
}

/* Bytes at the end of buf that could begin a stop string (held back). */
static size_t stop_holdback(const gen_opts *o, const char *buf, size_t n) {
    size_t hold = 0;
    for (int s = 0; s < o->n_stop; s++) {
        size_t ls = strlen(o->stop[s]);
        for (size_t k = ls - 1; k > hold && k > 0; k--)
            if (k <= n && !memcmp(buf + n - k, o->stop[s], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* --dump FILE (for the reference tests): "TNDD", u32 version 1, u32 n_vocab,
 * u32 n_prompt, u32 n_gen, i32 prompt[n_prompt], i32 gen[n_gen],
 * f32 logits[n_gen][n_vocab] (row i: the logits gen[i] was chosen from). */
static bool write_dump(const char *path, uint32_t nv, const int32_t *prompt, uint32_t n_prompt,
                       const int32_t *gen, uint32_t n_gen, const float *rows) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    uint32_t hdr[4] = {1, nv, n_prompt, n_gen};
    bool ok = fwrite("TNDD", 1, 4, f) == 4 && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
              fwrite(prompt, sizeof *prompt, n_prompt, f) == n_prompt &&
              fwrite(gen, sizeof *gen, n_gen, f) == n_gen &&
              fwrite(rows, sizeof(float) * nv, n_gen, f) == n_gen;
    return fclose(f) == 0 && ok;
}

/* Weights damaged where the load's samples did not look give NaN or Inf
 * logits; sampling from them would print nothing and "succeed". */
static bool logits_finite(const float *x, int n, int at) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            fprintf(stderr, "tandem: error: the model computed a NaN or Inf logit (%s); its weights may be damaged: "
                            "--check-weights scans them all\n", at ? "decoding" : "after the prompt");
            return false;
        }
    return true;
}

int gen_run(gen_opts *o, tnd_model *m, tnd_ctx *c, tnd_sampler *s, const int32_t *prompt, size_t n_prompt,
            FILE *out, gen_result *res) {
    memset(res, 0, sizeof *res);
    const tnd_tokenizer *tok = tnd_model_tokenizer(m);
    int nv = tnd_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    size_t text_cap = 4096, text_len = 0, shown = 0, gen_cap = 0;
    char *text = malloc(text_cap);
    int32_t *gen_ids = NULL;
    float *rows = NULL; /* logits rows kept for --dump */
    int rc = 1;
    if (!logits || !text) {
        fprintf(stderr, "tandem: error: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) tnd_sampler_accept(s, prompt[i]);
    double t0 = tnd_time_s();
    if (tnd_ctx_eval(c, prompt, (int)n_prompt, logits)) {
        tools_print_error("prompt");
        goto done;
    }
    double t1 = tnd_time_s();
    if (!logits_finite(logits, nv, 0)) goto done;
    res->n_prompt = (int)n_prompt;
    res->t_prompt = t1 - t0;
    for (int i = 0; o->n_predict < 0 || i < o->n_predict; i++) {
        if ((size_t)i >= gen_cap) {
            gen_cap = gen_cap ? gen_cap * 2 : 64;
            int32_t *g = realloc(gen_ids, gen_cap * sizeof *g);
            float *r = o->dump ? realloc(rows, gen_cap * sizeof(float) * (size_t)nv) : NULL;
            if (g) gen_ids = g;
            if (r) rows = r;
            if (!g || (o->dump && !r)) {
                fprintf(stderr, "tandem: error: out of memory\n");
                goto done;
            }
        }
        if (o->dump) memcpy(rows + (size_t)i * nv, logits, sizeof(float) * (size_t)nv);
        int32_t id = tnd_sampler_sample(s, logits, nv);
        gen_ids[res->n_gen++] = id;
        if (tnd_tokenizer_is_eog(tok, id)) {
            res->stopped_eog = true;
            break;
        }
        char piece[256];
        size_t pl = tnd_token_to_piece(tok, id, false, piece, sizeof piece);
        if (pl > sizeof piece) pl = sizeof piece;
        if (text_len + pl + 1 > text_cap) {
            while (text_len + pl + 1 > text_cap) text_cap *= 2;
            char *t = realloc(text, text_cap);
            if (!t) break;
            text = t;
        }
        memcpy(text + text_len, piece, pl);
        text_len += pl;
        text[text_len] = 0;
        for (int k = 0; k < o->n_stop; k++) { /* cut at the first stop string */
            char *hit = strstr(text + (shown > 64 ? shown - 64 : 0), o->stop[k]);
            if (hit) {
                text_len = (size_t)(hit - text);
                text[text_len] = 0;
                res->stopped_string = true;
            }
        }
        size_t show = res->stopped_string ? text_len
                                          : tnd_utf8_complete(text, text_len - stop_holdback(o, text, text_len));
        if (show > shown) {
            fwrite(text + shown, 1, show - shown, out);
            fflush(out);
            shown = show;
        }
        if (res->stopped_string) break;
        if (o->n_predict >= 0 && i + 1 >= o->n_predict) break;
        if (tnd_ctx_n_past(c) >= tnd_ctx_n_ctx(c)) {
            res->stopped_ctx = true;
            break;
        }
        if (tnd_ctx_eval(c, &id, 1, logits)) {
            tools_print_error("decode");
            goto done;
        }
        if (!logits_finite(logits, nv, 1)) goto done;
    }
    if (shown < text_len) fwrite(text + shown, 1, text_len - shown, out);
    fflush(out);
    res->t_gen = tnd_time_s() - t1;
    if (o->dump && !write_dump(o->dump, (uint32_t)nv, prompt, (uint32_t)n_prompt, gen_ids, (uint32_t)res->n_gen, rows)) {
        fprintf(stderr, "tandem: error: cannot write %s\n", o->dump);
        goto done;
    }
    res->text = text;
    text = NULL;
    rc = 0;
done:
    free(rows);
    free(gen_ids);
    free(logits);
    free(text);
    return rc;
}

void gen_print_stats(const gen_result *r) {
    fprintf(stderr, "\n[prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s]\n", r->n_prompt,
            r->t_prompt > 0 ? r->n_prompt / r->t_prompt : 0.0, r->n_gen,
            r->t_gen > 0 && r->n_gen > 1 ? (r->n_gen - 1) / r->t_gen : 0.0);
}
