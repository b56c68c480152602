/* tandem: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "config.h"
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

/* The version, the CUDA code built in and, per GPU, the code that runs on
 * it: a build without code for the GPU's own architecture runs slower
 * fallbacks, and this is where a user sees why. */
static void print_version(void) {
    printf("tandem %s\n", TND_VERSION);
    /* both key the perf DB: what a user compares when a profile is redone */
    char key[320];
    printf("build: %s\ntuning: %s\n", tnd_build_id(), tnd_config_key(key, sizeof key));
    const char *archs = tnd_cuda_build_archs();
    if (!*archs) {
        printf("CUDA: not built (CPU only)\n");
        return;
    }
    printf("CUDA: code for %s\n", archs);
    const int n = tnd_cuda_device_count();
    if (n == 0) printf("GPU: none visible\n");
    for (int i = 0; i < n; i++) {
        tnd_cuda_device_info d;
        if (tnd_cuda_device_get(i, &d) != TND_OK) {
            printf("GPU %d: %s\n", i, tnd_last_error());
            continue;
        }
        printf("GPU %d: %s, sm_%d, %.1f GiB; runs sm_%d code", i, d.name, d.arch / 10, d.mem_total / 1073741824.0,
               d.code_arch / 10);
        if (d.code_arch < d.arch)
            printf(" (no code for its own architecture in this build: slower kernels; rebuild with "
                   "-DCMAKE_CUDA_ARCHITECTURES=%d)", d.arch / 10);
        printf("\n");
    }
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
        print_version();
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
