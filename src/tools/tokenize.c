/* tandem tokenize: the token ids of a text, one line, separated by spaces. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"
#include "tools.h"
#include "util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem tokenize [-m FILE] (-p TEXT | -f TEXTFILE) [--bos] [--special] [--pieces | --detok | --cases]\n\n"
            "Prints the token ids of the exact bytes of TEXT or TEXTFILE (nothing stripped)\n"
            "on one line, separated by spaces. Works on vocab-only GGUF files.\n\n"
            "  -m FILE      GGUF model or vocab (default: the default model)\n"
            "  -p TEXT      text to tokenize\n"
            "  -f TEXTFILE  file whose bytes to tokenize ('-' for stdin)\n"
            "  --bos        add BOS/EOS as the vocab's flags say (default: none)\n"
            "  --special    recognise control-token texts such as <|im_start|> in the input\n"
            "  --pieces     also print each token's text, one per line, after the ids\n"
            "  --detok      after the ids line, write the detokenized bytes (no newline added)\n"
            "  --cases      the text holds cases separated by lines '__ggml_vocab_test__' (the\n"
            "               vocab test format): print one line of ids per case\n");
}

/* A text to tokenize may be large (vocab test files), not endless: stdin
 * and files alike stop at this many bytes with a message. */
#define TEXT_MAX ((size_t)256 << 20)

/* Reads a whole regular file, or stdin for "-"; *out malloc'd. */
static bool read_all(const char *path, char **out, size_t *n_out) {
    if (strcmp(path, "-")) {
        if (tnd_read_regular(path, "text file", TEXT_MAX, out, n_out)) {
            tools_print_error(NULL);
            return false;
        }
        return true;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap) break;
        if (cap > TEXT_MAX) {
            fprintf(stderr, "tandem: error: stdin holds more than %zu MiB of text\n", TEXT_MAX >> 20);
            free(buf);
            return false;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (!buf || ferror(stdin)) {
        fprintf(stderr, "tandem: error: reading stdin failed\n");
        free(buf);
        return false;
    }
    *out = buf;
    *n_out = n;
    return true;
}

/* --cases: each case ends with "\n__ggml_vocab_test__\n" (the last one may
 * end without it). */
static int print_cases(const tnd_tokenizer *t, const char *text, size_t len, bool bos, bool special) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sl = sizeof sep - 1;
    size_t at = 0;
    while (at < len) {
        const char *e = memmem(text + at, len - at, sep, sl);
        size_t n_text = e ? (size_t)(e - (text + at)) : len - at;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tnd_tokenize(t, text + at, n_text, bos, special, &ids, &n) != TND_OK) {
            tools_print_error("tokenize");
            return 1;
        }
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        printf("\n");
        free(ids);
        at += n_text + (e ? sl : 0);
    }
    return fflush(stdout) ? 1 : 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool bos = false, special = false, pieces = false, detok = false, cases = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            model = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            text = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(a, "--bos")) {
            bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--pieces")) {
            pieces = true;
        } else if (!strcmp(a, "--detok")) {
            detok = true;
        } else if (!strcmp(a, "--cases")) {
            cases = true;
        } else {
            fprintf(stderr, "tandem tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!!text == !!file) {
        fprintf(stderr, "tandem tokenize: give exactly one of -p TEXT and -f TEXTFILE\n");
        usage(stderr);
        return 2;
    }
    if (!model && !(model = tools_default_model())) return 1;

    char *buf = NULL;
    size_t len;
    if (file) {
        if (!read_all(file, &buf, &len)) return 1;
    } else {
        len = strlen(text);
    }
    int rc = 1;
    tnd_gguf *g = NULL;
    tnd_tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    if (tnd_gguf_open(model, &g) != TND_OK) {
        tools_print_error(NULL);
        goto done;
    }
    if (tnd_tokenizer_new(g, &t) != TND_OK) {
        tools_print_error(NULL);
        goto done;
    }
    if (cases) {
        rc = print_cases(t, file ? buf : text, len, bos, special);
        goto done;
    }
    if (tnd_tokenize(t, file ? buf : text, len, bos, special, &ids, &n) != TND_OK) {
        tools_print_error("tokenize");
        goto done;
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    if (pieces) {
        char piece[256];
        for (size_t i = 0; i < n; i++) {
            size_t k = tnd_token_to_piece(t, ids[i], true, piece, sizeof piece);
            printf("%6d '%.*s'\n", (int)ids[i], (int)(k < sizeof piece ? k : sizeof piece), piece);
        }
    }
    if (detok) {
        char piece[256];
        for (size_t i = 0; i < n; i++) {
            size_t k = tnd_token_to_piece(t, ids[i], false, piece, sizeof piece);
            fwrite(piece, 1, k < sizeof piece ? k : sizeof piece, stdout);
        }
    }
    rc = fflush(stdout) ? 1 : 0;
done:
    free(ids);
    tnd_tokenizer_free(t);
    tnd_gguf_free(g);
    free(buf);
    return rc;
}
