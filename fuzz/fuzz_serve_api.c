/* libFuzzer target for the server's request parser (src/server/api.c): any
 * body must give a request or an error with an HTTP status; an accepted
 * one's prompt, as generated text, must make a valid response and chunk
 * (any bytes: invalid UTF-8 is replaced). No model: chat renders with
 * chatml. The first byte picks chat (odd) or completions.
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DTND_FUZZ=ON
 * Run:   build-fuzz/fuzz_serve_api fuzz/corpus/serve_api -max_len=65536 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static srv_opts o;
    static srv s;
    if (!s.o) {
        o.sp = tnd_sampler_default_params();
        s.o = &o;
        strcpy(s.model_id, "m");
    }
    const bool chat = data[0] & 1;
    char *body = malloc(size - 1 ? size - 1 : 1); /* exact size: ASan sees a read past the end */
    memcpy(body, data + 1, size - 1);
    srv_params p;
    srv_error e = {0};
    if (srv_api_parse(&s, chat, body, size - 1, &p, &e)) {
        size_t n = strlen(p.prompt);
        free(srv_api_response(&s, chat, 1, p.prompt, n, TND_FINISH_STOP, 3, 4));
        free(srv_api_chunk(&s, chat, 1, p.prompt, n, true, true, TND_FINISH_LENGTH, 3, 4));
        srv_params_free(&p);
    } else if (e.status < 400 || e.status > 599 || !e.type) {
        abort();
    } else {
        free(srv_api_error_json(&e));
    }
    free(body);
    return 0;
}
