/* tandem run: one prompt in, streamed text out, speeds at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "util.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem run [options] -p TEXT | -f FILE\n\n"
               "Generates text from a prompt and prints prompt and generation speed.\n\n"
               "  -p, --prompt TEXT      the prompt\n"
               "  -f, --file FILE        read the prompt from a file\n"
               "      --chat             wrap the prompt in the model's chat template\n"
               "      --dump FILE        write prompt ids, generated ids and logits (tests)\n"
               "      --timing-log FILE  write a TSV line per generated token: token, t_s (seconds since\n"
               "                         generation start; token 0 includes the prompt), ms (the token's\n"
               "                         time), replans (tnd_ctx_n_replans so far), clock_s (CLOCK_MONOTONIC)\n"
               "%s", gen_opts_help);
}

/* Tokenizes a prompt: BOS as the vocab says, special-token texts recognised
 * (chat markup), never two BOS when the template already wrote one. */
int tools_tokenize_prompt(const tnd_tokenizer *tok, const char *text, int32_t **ids, size_t *n) {
    if (tnd_tokenize(tok, text, strlen(text), true, true, ids, n)) {
        tools_print_error("tokenize");
        return 1;
    }
    int32_t bos = tnd_tokenizer_bos(tok);
    if (*n >= 2 && bos >= 0 && (*ids)[0] == bos && (*ids)[1] == bos) {
        memmove(*ids, *ids + 1, (*n - 1) * sizeof **ids);
        (*n)--;
    }
    return 0;
}

/* Closes --timing-log's file, if any: rc, or 1 when a write failed. */
static int close_timing_log(gen_opts *o, const char *path, int rc) {
    if (!o->timing_log) return rc;
    const bool bad = ferror(o->timing_log) != 0;
    if ((fclose(o->timing_log) != 0 || bad) && rc == 0) {
        fprintf(stderr, "tandem: error: --timing-log: cannot write '%s'\n", path);
        rc = 1;
    }
    o->timing_log = NULL;
    return rc;
}

int cmd_run(int argc, char **argv) {
    gen_opts o;
    gen_opts_init(&o);
    const char *prompt = NULL, *pfile = NULL, *tlog = NULL;
    bool chat = false;
    for (int i = 1; i < argc; i++) {
        int r = gen_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *a = argv[i];
        if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) prompt = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) pfile = argv[++i];
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--dump") && i + 1 < argc) o.dump = argv[++i];
        else if (!strcmp(a, "--timing-log") && i + 1 < argc) tlog = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "tandem run: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    char *file_text = NULL;
    if (pfile) {
        size_t len;
        /* 64 MiB: more text than the longest context holds */
        if (tnd_read_regular(pfile, "prompt file", 64u << 20, &file_text, &len)) {
            tools_print_error(NULL);
            return 1;
        }
        if (strlen(file_text) != len) {
            fprintf(stderr, "tandem: error: prompt file '%s' holds a NUL byte (is it text?)\n", pfile);
            free(file_text);
            return 1;
        }
        prompt = file_text;
    }
    if (!prompt) {
        fprintf(stderr, "tandem run: a prompt is needed (-p TEXT or -f FILE)\n\n");
        usage(stderr);
        return 2;
    }
    /* created before the model loads: a bad path fails in a moment, not
     * after a big model's load */
    if (tlog) {
        if (!(o.timing_log = fopen(tlog, "w"))) {
            fprintf(stderr, "tandem: error: --timing-log: cannot create '%s': %s\n", tlog, strerror(errno));
            free(file_text);
            return 1;
        }
        fputs("token\tt_s\tms\treplans\tclock_s\n", o.timing_log);
    }
    tnd_model *m;
    tnd_ctx *c;
    tnd_sampler *s;
    if (gen_load(&o, &m, &c, &s)) {
        if (*tnd_last_error()) tools_print_error(NULL);
        free(file_text);
        return close_timing_log(&o, tlog, o.usage_error ? 2 : 1);
    }
    if (o.dry_run) {
        free(file_text);
        return close_timing_log(&o, tlog, 0);
    }
    int rc = 1;
    char *rendered = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (chat) {
        tnd_chat_msg msgs[2];
        int nm = 0;
        if (o.system) msgs[nm++] = (tnd_chat_msg){"system", o.system};
        msgs[nm++] = (tnd_chat_msg){"user", prompt};
        gen_chat_warn(&o, m);
        if (tnd_chat_render(o.chat_template, tnd_model_chat_template(m), msgs, nm, true, &rendered)) {
            tools_print_error("chat template");
            goto out;
        }
    }
    if (tools_tokenize_prompt(tnd_model_tokenizer(m), rendered ? rendered : prompt, &ids, &n)) goto out;
    if (n == 0) {
        fprintf(stderr, "tandem: error: the prompt is empty after tokenization\n");
        goto out;
    }
    gen_result res;
    rc = gen_run(&o, m, c, s, ids, n, stdout, &res);
    if (rc == 0) {
        printf("\n");
        gen_print_stats(&res);
        free(res.text);
    }
out:
    free(ids);
    free(rendered);
    free(file_text);
    tnd_sampler_free(s);
    tnd_ctx_free(c);
    tnd_model_free(m);
    return close_timing_log(&o, tlog, rc);
}
