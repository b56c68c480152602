/* tandem serve: the command line of the OpenAI-compatible server
 * (src/server/). Built always, so that a build without libmicrohttpd or
 * jansson still explains itself instead of knowing no `serve`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "tools.h"
#include "util.h"
#ifdef TND_HAVE_SERVER
#include "server/server.h"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem serve [options]\n\n"
            "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions\n"
            "(streamed with \"stream\": true), GET /v1/models, /health, /metrics (Prometheus) and\n"
            "a chat page at /. SIGTERM or Ctrl-C stops it (exit 0).\n\n"
            "  -m, --model FILE       GGUF model (default: the default model)\n"
            "      --host ADDR        address to listen on (default 127.0.0.1: this machine only;\n"
            "                         0.0.0.0 or :: for every interface)\n"
            "      --port N           TCP port (default 8080; 0: any free one, printed at start)\n"
            "      --api-key KEY      require 'Authorization: Bearer KEY' on /v1/* (default: none)\n"
            "      --parallel N       requests generated at once, each with its own sequence slot\n"
            "                         and -c tokens of KV cache (default 4)\n"
            "      --queue N          requests waiting for a slot before 503 (default 64)\n"
            "      --max-body BYTES   largest request body, larger gets 413 (default 8M)\n"
            "      --name ID          the model id /v1/models lists and requests name (default: the\n"
            "                         file's name without .gguf)\n"
            "      --shutdown-grace S seconds SIGTERM lets running requests finish (default 10)\n"
            "      --no-prompt-cache  evaluate every prompt whole (default: a prompt that begins\n"
            "                         with what a finished request's slot holds, such as a chat's\n"
            "                         next turn, reuses those KV rows)\n"
            "  -n, --n-predict N      max_tokens of a request that gives none (default: up to the\n"
            "                         context's end)\n"
            "  -c, --ctx-size N       context length of each slot (default: min(model, 4096))\n"
            "  -b, --batch-size N     tokens per batched round (default 512)\n"
            "  -t, --threads N        CPU threads (default: physical cores)\n"
            "  defaults for the sampling fields a request leaves out:\n"
            TOOLS_SAMPLING_HELP
            "  -s, --seed S           seed of requests without one (default: a new one per request)\n"
            "      --chat-template NAME  override the model's template (chatml, llama3, gemma, ...)\n"
            "      --device cpu|cuda|sim  where to run (default cpu)\n"
            "      --vram-budget X    GPU memory tandem may use in all: bytes (6G) or a share of\n"
            "                         the weights (50%%)\n"
            "      --placement P      static, layer, gpu, cpu, random:SEED or a file (tandem run --help)\n"
            "      --promote P        auto, none, all, random:SEED\n"
            "      --no-adapt         promotions from the profile alone; the placement kept\n"
            "                         when another process shares the GPU\n"
            "      --presched         MoE: PreSched's on-demand expert loads (tandem run --help)\n"
            "      --hw PROFILE       SimGPU timing profile\n"
            "      --trace FILE       write the rounds as a Chrome/Perfetto trace\n"
            "      --cpu-exact        CPU matmuls with f32 activations\n"
            "      --check-weights    scan every weight for NaN and Inf at load\n"
            "  -v, --verbose          log loading details and HTTP errors\n");
}

#ifndef TND_HAVE_SERVER
#define TND_NO_SERVER_WHY "libmicrohttpd and jansson were not found (pkg-config) when this build was configured"
#endif

int cmd_serve(int argc, char **argv) {
    gen_opts o;
    gen_opts_init(&o);
    o.n_predict = -1;
    const char *host = "127.0.0.1", *api_key = NULL, *name = NULL;
    long port = 8080, parallel = 4, queue = 64;
    double grace = 10;
    uint64_t max_body = 8u << 20;
    bool prompt_cache = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
#ifndef TND_HAVE_SERVER
            printf("\nThis build has no server: " TND_NO_SERVER_WHY ".\n");
#endif
            return 0;
        }
        /* run's options that mean nothing to a server */
        if (!strcmp(a, "--stop") || !strcmp(a, "--system") || !strcmp(a, "--dry-run") || !strcmp(a, "--dump") ||
            !strcmp(a, "-p") || !strcmp(a, "--prompt"))
            return tools_bad_option("serve", a, true, usage);
        if (!strcmp(a, "--host")) {
            if (!v || !*v) return tools_bad_option("serve", a, false, usage);
            host = v, i++;
        } else if (!strcmp(a, "--port")) {
            if (!tools_parse_int(v, 0, 65535, &port)) return tools_bad_option("serve", a, false, usage);
            i++;
        } else if (!strcmp(a, "--api-key")) {
            if (!v || !*v) return tools_bad_option("serve", a, false, usage);
            api_key = v, i++;
        } else if (!strcmp(a, "--parallel")) {
            if (!tools_parse_int(v, 1, TND_SEQ_MAX, &parallel)) return tools_bad_option("serve", a, false, usage);
            i++;
        } else if (!strcmp(a, "--queue")) {
            if (!tools_parse_int(v, 1, 1 << 20, &queue)) return tools_bad_option("serve", a, false, usage);
            i++;
        } else if (!strcmp(a, "--max-body")) {
            if (!tools_parse_size(v, &max_body) || max_body < 1 || max_body > (1ull << 32))
                return tools_bad_option("serve", a, false, usage);
            i++;
        } else if (!strcmp(a, "--name")) {
            if (!v || !*v) return tools_bad_option("serve", a, false, usage);
            name = v, i++;
        } else if (!strcmp(a, "--no-prompt-cache")) {
            prompt_cache = false;
        } else if (!strcmp(a, "--shutdown-grace")) {
            if (!tools_parse_float(v, &grace) || grace < 0 || grace > 86400)
                return tools_bad_option("serve", a, false, usage);
            i++;
        } else {
            int r = gen_opts_parse(&o, argc, argv, &i);
            if (r < 0) return 2;
            if (r == 0) return tools_bad_option("serve", a, true, usage);
        }
    }
#ifndef TND_HAVE_SERVER
    (void)host, (void)api_key, (void)name, (void)queue, (void)grace, (void)prompt_cache;
    fprintf(stderr, "tandem: error: this build has no server: " TND_NO_SERVER_WHY ";\n"
                    "        install libmicrohttpd-dev and libjansson-dev (scripts/setup.sh) and build again\n");
    return 1;
#else
    if (!o.model && !(o.model = tools_default_model())) return 1;
    if (o.verbose) tnd_log_set_level(TND_LOG_INFO);
    srv_opts so = {
        .model_path = o.model,
        .mp = tnd_model_default_params(),
        .cp = o.cp,
        .vram_budget = o.vram_budget,
        .sp = o.sp,
        .max_tokens_default = o.n_predict,
        .host = host,
        .port = (int)port,
        .api_key = api_key,
        .chat_template = o.chat_template,
        .model_name = name,
        .max_queue = (int)queue,
        .max_body = (size_t)max_body,
        .shutdown_grace_s = grace,
        .prompt_cache = prompt_cache,
        .verbose = o.verbose,
    };
    so.mp.n_threads = o.n_threads;
    so.mp.verbose = o.verbose;
    so.mp.check_weights = o.check_weights;
    so.cp.n_seq_max = (int)parallel;
    so.seed_set = o.seed_set; /* else each request without a seed draws its own (api.c) */
    return srv_main(&so);
#endif
}
