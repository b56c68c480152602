/* Shared by `run` and `chat`: generation options and loop. */
#ifndef TND_TOOLS_GENERATE_H
#define TND_TOOLS_GENERATE_H

#include <stdio.h>

#include "tandem.h"
#include "tools.h"

#define GEN_MAX_STOP 16

typedef struct gen_opts {
    const char *model;
    int n_predict;
    int n_threads;
    tnd_ctx_params cp;
    tnd_sampler_params sp;
    bool seed_set;
    const char *stop[GEN_MAX_STOP];
    int n_stop;
    const char *chat_template;
    const char *system;
    const char *dump;        /* --dump FILE (run only) */
    FILE *timing_log;        /* --timing-log FILE, open with its header written (run only) */
    const char *vram_budget; /* --vram-budget text, parsed once the model is loaded */
    bool verbose;
    bool check_weights;      /* --check-weights: scan every weight at load */
    bool dry_run;            /* --dry-run: gen_load prints the plan and loads no context */
    bool usage_error;        /* set by gen_load when it failed on a bad option value (exit 2) */
} gen_opts;

typedef struct gen_result {
    int n_prompt, n_gen;
    double t_prompt, t_gen;  /* seconds */
    bool stopped_eog, stopped_string, stopped_ctx;
    char *text;              /* generated text (malloc'd), without the stop string */
} gen_result;

extern const char *gen_opts_help;
void gen_opts_init(gen_opts *o);
/* 1: consumed argv[*i] (and its value); 0: not a shared option; -1: bad value. */
int gen_opts_parse(gen_opts *o, int argc, char **argv, int *i);
/* Loads model, context and sampler; on failure all are NULL. */
tnd_status gen_load(gen_opts *o, tnd_model **m, tnd_ctx **c, tnd_sampler **s);
/* Evaluates the prompt, then samples and streams up to n_predict tokens to
 * out. Returns 0 on success, 1 on failure (message printed). */
int gen_run(gen_opts *o, tnd_model *m, tnd_ctx *c, tnd_sampler *s, const int32_t *prompt, size_t n_prompt,
            FILE *out, gen_result *res);
void gen_print_stats(const gen_result *r);
/* Chat mode without --chat-template on a model with no template: says on
 * stderr that chatml is used. */
void gen_chat_warn(const gen_opts *o, const tnd_model *m);
/* Tokenizes a prompt or rendered chat (BOS per vocab, special texts parsed,
 * no double BOS). 0 on success, 1 on failure (message printed). */
int tools_tokenize_prompt(const tnd_tokenizer *tok, const char *text, int32_t **ids, size_t *n);

#endif
