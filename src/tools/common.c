/* Helpers shared by the subcommands: default model, number parsing, errors. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tandem.h"
#include "tools.h"

#define DEFAULT_MODEL_FILE "models/SmolLM2-135M-Instruct.Q4_1.gguf"

const char *tools_default_model(void) {
    const char *env = getenv("TANDEM_MODEL");
    if (env && *env) return env;
    if (access(DEFAULT_MODEL_FILE, R_OK) == 0) return DEFAULT_MODEL_FILE;
#ifdef TND_SOURCE_DIR
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", TND_SOURCE_DIR, DEFAULT_MODEL_FILE);
    if (access(path, R_OK) == 0) return path;
#endif
    fprintf(stderr, "tandem: error: no model given (-m FILE) and the default model %s is missing;\n"
                    "        fetch it with: scripts/fetch-default-model.sh\n", DEFAULT_MODEL_FILE);
    return NULL;
}

bool tools_load_model(const char **path, long n_threads, tnd_model **m) {
    *m = NULL;
    if (!*path && !(*path = tools_default_model())) return false;
    tnd_model_params mp = tnd_model_default_params();
    mp.n_threads = (int)n_threads;
    if (tnd_model_load(*path, &mp, m)) {
        tools_print_error(NULL);
        return false;
    }
    return true;
}

bool tools_parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool tools_parse_float(const char *s, double *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool tools_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return false;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib"))) end += strlen(end);
    else if (mul == 1 && !strcmp(end, "B")) end++;
    if (*end) return false;
    v *= mul;
    if (v > 1.8e19) return false;
    *out = (uint64_t)v;
    return true;
}

bool tools_check_budget(const char *s) {
    uint64_t b;
    if (!tnd_parse_budget(s, NULL, &b)) return true;
    fprintf(stderr, "tandem: error: --vram-budget: %s\n", tnd_last_error());
    return false;
}

int tools_bad_option(const char *cmd, const char *opt, bool unknown, void (*usage)(FILE *)) {
    if (!unknown) {
        fprintf(stderr, "tandem %s: bad or missing value for %s\n", cmd, opt);
        return 2;
    }
    fprintf(stderr, "tandem %s: unknown option '%s'\n\n", cmd, opt);
    usage(stderr);
    return 2;
}

void tools_print_error(const char *what) {
    const char *msg = tnd_last_error();
    if (what) fprintf(stderr, "tandem: error: %s: %s\n", what, *msg ? msg : "unknown error");
    else fprintf(stderr, "tandem: error: %s\n", *msg ? msg : "unknown error");
}
