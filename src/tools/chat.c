/* tandem chat: interactive conversation. Each turn re-renders the whole
 * conversation with the template and evaluates only the tokens past the
 * longest prefix already in the KV cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate.h"

#define MAX_TURNS 512

static void usage(FILE *f) {
    fprintf(f, "usage: tandem chat [options]\n\n"
               "Interactive chat with the model's template. Type a message and press\n"
               "Enter; /reset starts over, /quit (or end of input) leaves.\n\n%s", gen_opts_help);
}

/* A message longer than this is refused: more text than any context holds,
 * and stdin from /dev/zero or a runaway pipe must not fill the memory. */
#define LINE_MAX_BYTES ((size_t)16 << 20)

/* Reads one line of stdin into *line (grown as needed, NUL-terminated, the
 * newline dropped). Returns its length, -1 at end of input, -2 when the line
 * passed LINE_MAX_BYTES (the rest of the input is not read). */
static long read_line(char **line, size_t *cap) {
    size_t n = 0;
    int ch;
    while ((ch = getchar()) != EOF && ch != '\n') {
        if (n + 2 > *cap) {
            if (*cap >= LINE_MAX_BYTES) return -2;
            size_t nc = *cap ? *cap * 2 : 256;
            char *b = realloc(*line, nc);
            if (!b) return -2;
            *line = b;
            *cap = nc;
        }
        (*line)[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) return -1;
    if (!*line && !(*line = malloc(*cap = 256))) return -2;
    (*line)[n] = 0;
    return (long)n;
}

int cmd_chat(int argc, char **argv) {
    gen_opts o;
    gen_opts_init(&o);
    o.n_predict = -1;
    for (int i = 1; i < argc; i++) {
        int r = gen_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        fprintf(stderr, "tandem chat: unknown or incomplete option '%s'\n\n", argv[i]);
        usage(stderr);
        return 2;
    }
    tnd_model *m;
    tnd_ctx *c;
    tnd_sampler *s;
    if (gen_load(&o, &m, &c, &s)) {
        if (*tnd_last_error()) tools_print_error(NULL);
        return o.usage_error ? 2 : 1;
    }
    if (o.dry_run) return 0;
    const tnd_tokenizer *tok = tnd_model_tokenizer(m);
    gen_chat_warn(&o, m);
    bool tty = isatty(0);
    if (tty) fprintf(stderr, "%s\n/reset to start over, /quit to leave\n", tnd_model_desc(m));
    tnd_chat_msg msgs[MAX_TURNS];
    char *owned[MAX_TURNS];
    int nm = 0, rc = 0;
    if (o.system) msgs[nm] = (tnd_chat_msg){"system", o.system}, owned[nm++] = NULL;
    int32_t *cached = NULL; /* tokens now in the KV cache */
    size_t n_cached = 0;
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) fprintf(stderr, "\n> ");
        long len = read_line(&line, &cap);
        if (len == -2) {
            fprintf(stderr, "tandem: error: an input line is longer than %zu MiB (or memory ran out)\n",
                    LINE_MAX_BYTES >> 20);
            rc = 1;
            break;
        }
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            for (int i = 0; i < nm; i++) free(owned[i]);
            nm = 0;
            if (o.system) msgs[nm] = (tnd_chat_msg){"system", o.system}, owned[nm++] = NULL;
            tnd_ctx_truncate(c, 0);
            n_cached = 0;
            continue;
        }
        if (nm + 2 > MAX_TURNS) {
            fprintf(stderr, "tandem: the conversation is too long; /reset to start over\n");
            continue;
        }
        owned[nm] = strdup(line);
        msgs[nm] = (tnd_chat_msg){"user", owned[nm]};
        nm++;
        char *rendered = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tnd_chat_render(o.chat_template, tnd_model_chat_template(m), msgs, nm, true, &rendered)) {
            tools_print_error("chat template");
            rc = 1;
            break;
        }
        int bad = tools_tokenize_prompt(tok, rendered, &ids, &n);
        free(rendered);
        if (bad) {
            rc = 1;
            break;
        }
        /* Reuse the cached prefix; keep at least one token to evaluate. */
        size_t keep = 0;
        while (keep < n_cached && keep + 1 < n && cached[keep] == ids[keep]) keep++;
        tnd_ctx_truncate(c, (int)keep);
        gen_result res;
        if (gen_run(&o, m, c, s, ids + keep, n - keep, stdout, &res)) {
            /* context full or failure: drop this turn */
            free(ids);
            free(owned[--nm]);
            tnd_ctx_truncate(c, 0);
            n_cached = 0;
            continue;
        }
        printf("\n");
        if (tty) gen_print_stats(&res);
        owned[nm] = res.text;
        msgs[nm] = (tnd_chat_msg){"assistant", res.text};
        nm++;
        free(cached);
        cached = ids; /* the generated tokens are re-tokenized from text next turn */
        n_cached = n;
    }
    free(line);
    free(cached);
    for (int i = 0; i < nm; i++) free(owned[i]);
    tnd_sampler_free(s);
    tnd_ctx_free(c);
    tnd_model_free(m);
    return rc;
}
