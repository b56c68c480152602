/* Embedding tandem: load a GGUF model, generate a continuation of a prompt,
 * print it as it streams, stop at a stop string or after n tokens.
 *
 *   cc generate.c $(pkg-config --cflags --libs tandem) -o generate
 *   ./generate MODEL.gguf "The capital of France is" [n_tokens] [stop]
 *
 * Uses only include/tandem.h: tnd_model_load, tnd_ctx_new, tnd_generate. */
#include <stdio.h>
#include <stdlib.h>

#include <tandem.h>

/* Prints each piece of text as it becomes final; returning false would
 * cancel the generation. */
static bool on_token(const tnd_token_event *ev, void *user) {
    int *count = user;
    fwrite(ev->text, 1, ev->len, stdout);
    fflush(stdout);
    (*count)++;
    return true;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS] [STOP]\n", argv[0]);
        return 2;
    }
    tnd_model_params mp = tnd_model_default_params();
    tnd_model *model = NULL;
    if (tnd_model_load(argv[1], &mp, &model) != TND_OK) {
        fprintf(stderr, "error: %s\n", tnd_last_error());
        return 1;
    }
    tnd_ctx_params cp = tnd_ctx_default_params(); /* the CPU; set cp.device for a GPU */
    tnd_ctx *ctx = NULL;
    if (tnd_ctx_new(model, &cp, &ctx) != TND_OK) {
        fprintf(stderr, "error: %s\n", tnd_last_error());
        tnd_model_free(model);
        return 1;
    }
    tnd_generate_params gp = tnd_generate_default_params();
    gp.n_predict = argc > 3 ? atoi(argv[3]) : 32;
    gp.sampling.temp = 0; /* greedy */
    const char *stop[1] = {argc > 4 ? argv[4] : NULL};
    gp.stop = stop;
    gp.n_stop = argc > 4 ? 1 : 0;
    int count = 0;
    tnd_generate_result r;
    printf("%s", argv[2]);
    tnd_status st = tnd_generate(ctx, argv[2], &gp, on_token, &count, &r);
    printf("\n");
    if (st != TND_OK) fprintf(stderr, "error: %s\n", tnd_last_error());
    else
        fprintf(stderr, "[%d prompt tokens, %d generated, %d callbacks, stop reason %d]\n", r.n_prompt, r.n_gen,
                count, (int)r.stop);
    tnd_ctx_free(ctx);
    tnd_model_free(model);
    return st == TND_OK ? 0 : 1;
}
