/* tandem: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "tandem.h"
#include "tools.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive chat"},
    {"info", cmd_info, "print a GGUF file's metadata and tensor table"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"bench", cmd_bench, "prefill and decode throughput (pp512, tg128)"},
    {"synth", cmd_synth, "write a random-weight GGUF with a real model's shapes"},
    {"profile", cmd_profile, "measure this machine for a model"},
    {"plan", cmd_plan, "show where every weight slice is placed"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
};

static void usage(FILE *f) {
    fprintf(f, "tandem %s — hybrid CPU-GPU inference for GGUF models\n\n"
               "usage: tandem COMMAND [options]   (tandem COMMAND --help for its options)\n\ncommands:\n",
            TND_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].fn) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tandem %s\n", TND_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name)) continue;
        if (!commands[i].fn) {
            fprintf(stderr, "tandem: '%s' is not available in this build yet\n", argv[1]);
            return 2;
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "tandem: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
