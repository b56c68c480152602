/* The tandem command: one file per subcommand (cmd_NAME in NAME.c). Each
 * returns the process exit status: 0 ok, 1 failure, 2 bad usage. */
#ifndef TND_TOOLS_H
#define TND_TOOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tandem.h"

/* Weak, so a subcommand whose file is not built yet is reported as missing
 * instead of breaking the link. */
#define TND_CMD(name) int cmd_##name(int argc, char **argv) __attribute__((weak))
TND_CMD(info);
TND_CMD(tokenize);
TND_CMD(run);
TND_CMD(chat);
TND_CMD(bench);
TND_CMD(synth);
TND_CMD(profile);
TND_CMD(plan);
TND_CMD(serve);
#undef TND_CMD

/* Path of the default model (SmolLM2-135M-Instruct Q4_1): $TANDEM_MODEL if
 * set, else models/ under the current directory, else under the source tree
 * this binary was built from. Returns NULL (message printed) if none exists. */
const char *tools_default_model(void);
/* Loads the model at *path (NULL: the default model, whose path it then
 * stores there) with n_threads (0: the default) into *m; on failure prints
 * the error and returns false. */
bool tools_load_model(const char **path, long n_threads, tnd_model **m);

/* The largest -c tandem takes (2^24 tokens, beyond any model's own context
 * length, which ctx_new checks as well). */
#define TOOLS_MAX_CTX (1 << 24)
#define TOOLS_MAX_CTX_TEXT "16777216"
/* The sampling options' help lines (run, chat; serve's request defaults):
 * one text, as they are parsed by one function (generate.c) */
#define TOOLS_SAMPLING_HELP                                                                \
    "      --temp T           temperature; 0 = greedy (default 0.8)\n"                     \
    "      --top-k N          (default 40; 0 = off)\n"                                     \
    "      --top-p P          (default 0.95; 1 = off)\n"                                   \
    "      --min-p P          (default 0.05; 0 = off)\n"                                   \
    "      --repeat-penalty X (default 1.0 = off)\n"                                       \
    "      --repeat-last-n N  tokens the penalty looks at (default 64)\n"

/* Parses "123", "4k", "512M", "6G", "6GiB" into bytes; false if malformed. */
bool tools_parse_size(const char *s, uint64_t *out);
/* Parses a whole decimal integer in [lo, hi]; false if malformed or out of range. */
bool tools_parse_int(const char *s, long lo, long hi, long *out);
bool tools_parse_float(const char *s, double *out);

/* Checks a --vram-budget value before the model is loaded; on a bad one
 * prints "tandem: error: --vram-budget: ..." and returns false (the caller
 * exits 2, bad usage). */
bool tools_check_budget(const char *s);

/* A command-line option the command `cmd` cannot take: unknown (the
 * message, then usage) or missing/bad value. Returns 2, the exit code. */
int tools_bad_option(const char *cmd, const char *opt, bool unknown, void (*usage)(FILE *));

/* Prints "tandem: error: <msg>" for the last library failure. */
void tools_print_error(const char *what);

#endif
