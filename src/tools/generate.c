/* Options and the generation loop shared by `run` and `chat`: streaming
 * output that never splits a UTF-8 character or shows part of a stop string,
 * timing, and the --dump file the reference tests read. */
#include "generate.h"

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
    TOOLS_SAMPLING_HELP
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
    "      --no-adapt         choose the promotions from the profile alone, not from the\n"
    "                         speeds measured while running, and keep the placement when\n"
    "                         another process shares the GPU (ATSInfer's static policy)\n"
    "      --presched         MoE: LayerScope's PreSched loads CPU-side experts to the GPU\n"
    "                         on demand where its cost model finds it pays, and sets how\n"
    "                         many are copied a layer ahead, or two when its queue holds\n"
    "                         none of the next layer's (default: no on-demand loads)\n"
    "      --promote P        CPU weights copied to the GPU for a round: auto (default\n"
    "                         with static/layer: where Algorithm 2 finds the copy pays,\n"
    "                         each round), none, all, random:SEED\n"
    "      --hw PROFILE       SimGPU timing profile (rtx3060-laptop, rtx4090-desktop,\n"
    "                         h200-device, or a file)\n"
    "      --dry-run          print the placement and memory layout, run nothing\n"
    "      --trace FILE       write the rounds as a Chrome/Perfetto trace (JSON): CPU ops,\n"
    "                         GPU ops, copies, syncs, and the plan's predicted round times\n"
    "      --cpu-exact        CPU matmuls with f32 activations: exact, slower (default: Q8\n"
    "                         activations and integer dots, like llama.cpp; TND_CPU_INT8=0)\n"
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
    } else if (!strcmp(a, "--trace")) {
        if (!(o->cp.trace = VAL()) || !*o->cp.trace) BAD("a file name");
        o->cp.predict = true; /* the trace's second track: the plan's predicted rounds */
    } else if (!strcmp(a, "--cpu-exact")) {
        o->cp.cpu_exact = true;
    } else if (!strcmp(a, "--no-adapt")) {
        o->cp.no_adapt = true;
    } else if (!strcmp(a, "--presched")) {
        o->cp.moe_presched = true;
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

/* What gen_run's callback keeps: the streamed text, and for --dump each
 * token with the logits it was chosen from. */
typedef struct {
    FILE *out;
    FILE *tlog;              /* --timing-log: one line per token */
    const tnd_ctx *ctx;
    double t0, t_prev;       /* tnd_time_s() at the start, at the previous token */
    char *text;
    size_t len, cap;
    int32_t *ids;
    float *rows;
    size_t n, cap_ids;
    int nv;
    bool dump, oom;
} gen_sink;

static bool gen_emit(const tnd_token_event *ev, void *user) {
    gen_sink *k = user;
    if (k->tlog) {
        /* flushed per token: a run stopped by a signal keeps its lines; the
         * absolute CLOCK_MONOTONIC time lines them up with another process's
         * log (dev/stress.c) */
        const double now = tnd_time_s();
        fprintf(k->tlog, "%d\t%.6f\t%.3f\t%llu\t%.6f\n", ev->index, now - k->t0, (now - k->t_prev) * 1e3,
                (unsigned long long)tnd_ctx_n_replans(k->ctx), now);
        fflush(k->tlog);
        k->t_prev = now;
    }
    if (ev->len) {
        fwrite(ev->text, 1, ev->len, k->out);
        fflush(k->out);
    }
    if (k->len + ev->len + 1 > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 4096;
        while (k->len + ev->len + 1 > cap) cap *= 2;
        char *t = realloc(k->text, cap);
        if (!t) return !(k->oom = true);
        k->text = t;
        k->cap = cap;
    }
    memcpy(k->text + k->len, ev->text, ev->len);
    k->len += ev->len;
    k->text[k->len] = 0;
    if (!k->dump) return true;
    if (k->n == k->cap_ids) {
        size_t cap = k->cap_ids ? k->cap_ids * 2 : 64;
        int32_t *g = realloc(k->ids, cap * sizeof *g);
        if (g) k->ids = g;
        float *r = realloc(k->rows, cap * sizeof(float) * (size_t)k->nv);
        if (r) k->rows = r;
        if (!g || !r) return !(k->oom = true);
        k->cap_ids = cap;
    }
    k->ids[k->n] = ev->token;
    memcpy(k->rows + k->n * (size_t)k->nv, ev->logits, sizeof(float) * (size_t)k->nv);
    k->n++;
    return true;
}

int gen_run(gen_opts *o, tnd_model *m, tnd_ctx *c, tnd_sampler *s, const int32_t *prompt, size_t n_prompt,
            FILE *out, gen_result *res) {
    memset(res, 0, sizeof *res);
    gen_sink k = {.out = out, .tlog = o->timing_log, .ctx = c, .nv = tnd_model_n_vocab(m), .dump = o->dump != NULL};
    tnd_generate_params gp = tnd_generate_default_params();
    gp.n_predict = o->n_predict;
    gp.stop = o->stop;
    gp.n_stop = o->n_stop;
    gp.sampler = s;
    gp.with_logits = k.dump;
    tnd_generate_result r;
    k.t0 = k.t_prev = tnd_time_s();
    tnd_status st = tnd_generate_tokens(c, prompt, n_prompt, &gp, gen_emit, &k, &r);
    fflush(out);
    int rc = 1;
    if (st) tools_print_error(r.n_prompt ? "decode" : "prompt");
    else if (k.oom) fprintf(stderr, "tandem: error: out of memory\n");
    else if (k.dump && !write_dump(o->dump, (uint32_t)k.nv, prompt, (uint32_t)n_prompt, k.ids, (uint32_t)k.n, k.rows))
        fprintf(stderr, "tandem: error: cannot write %s\n", o->dump);
    else rc = 0;
    res->n_prompt = r.n_prompt;
    res->n_gen = r.n_gen;
    res->t_prompt = r.t_prompt;
    res->t_gen = r.t_gen;
    res->stopped_eog = r.stop == TND_STOP_EOG;
    res->stopped_string = r.stop == TND_STOP_STRING;
    res->stopped_ctx = r.stop == TND_STOP_CONTEXT;
    if (rc == 0) {
        res->text = k.text ? k.text : strdup("");
        k.text = NULL;
    }
    free(k.text);
    free(k.ids);
    free(k.rows);
    return rc;
}

void gen_print_stats(const gen_result *r) {
    fprintf(stderr, "\n[prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s]\n", r->n_prompt,
            r->t_prompt > 0 ? r->n_prompt / r->t_prompt : 0.0, r->n_gen,
            r->t_gen > 0 && r->n_gen > 1 ? (r->n_gen - 1) / r->t_gen : 0.0);
}
