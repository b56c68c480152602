/* Helper for tests/test_quant_oracle.py: runs the reference kernels of
 * src/quant on raw bytes from stdin, writes raw results to stdout.
 *   quant_tool dequant TYPE   blocks of TYPE -> f32 values
 *   quant_tool quant TYPE     f32 values -> blocks of TYPE
 *   quant_tool dot TYPE N     N-element row of TYPE, then N f32 activations ->
 *                             f32 vec_dot (activations quantized to the
 *                             vec_dot_type), then the N dequantized activations
 * TYPE is the GGML type id. Exit 0 ok, 1 failure, 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>

#include "quant/quant.h"

static unsigned char *read_all(size_t *n) {
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) return NULL;
        len += fread(buf + len, 1, cap - len, stdin);
        if (len < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    *n = len;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: quant_tool dequant|quant|dot TYPE [N]\n");
        return 2;
    }
    const tnd_type_traits *tr = tnd_type_traits_get(atoi(argv[2]));
    if (!tr || !tr->supported) {
        fprintf(stderr, "quant_tool: unsupported type %s\n", argv[2]);
        return 1;
    }
    size_t len;
    unsigned char *in = read_all(&len);
    if (!in) return 1;
    int rc = 0;
    if (!strcmp(argv[1], "dequant")) {
        if (len % tr->type_size) { fprintf(stderr, "quant_tool: partial block\n"); return 1; }
        int64_t k = (int64_t)(len / tr->type_size) * tr->block_size;
        float *y = malloc((size_t)k * sizeof(float) + 1);
        tr->to_float(in, y, k);
        fwrite(y, sizeof(float), (size_t)k, stdout);
        free(y);
    } else if (!strcmp(argv[1], "quant")) {
        int64_t k = (int64_t)(len / sizeof(float));
        if (len % sizeof(float) || k % tr->block_size) { fprintf(stderr, "quant_tool: bad length\n"); return 1; }
        size_t out = tnd_row_size((tnd_type)atoi(argv[2]), k);
        void *y = malloc(out + 1);
        float *x = malloc(len + 1);
        memcpy(x, in, len); /* aligned copy */
        tr->from_float(x, y, k);
        fwrite(y, 1, out, stdout);
        free(x);
        free(y);
    } else if (!strcmp(argv[1], "dot") && argc == 4) {
        int64_t n = atoll(argv[3]);
        size_t wsz = tnd_row_size((tnd_type)atoi(argv[2]), n);
        const tnd_type_traits *at = tnd_type_traits_get(tr->vec_dot_type);
        if (!wsz || len != wsz + (size_t)n * sizeof(float) || !at) { fprintf(stderr, "quant_tool: bad length\n"); return 1; }
        void *w = malloc(wsz);
        float *x = malloc((size_t)n * sizeof(float));
        memcpy(w, in, wsz);
        memcpy(x, in + wsz, (size_t)n * sizeof(float));
        void *a = malloc(tnd_row_size(tr->vec_dot_type, n));
        at->from_float(x, a, n);
        float r = tr->vec_dot(n, w, a);
        at->to_float(a, x, n);
        fwrite(&r, sizeof(float), 1, stdout);
        fwrite(x, sizeof(float), (size_t)n, stdout);
        free(w);
        free(x);
        free(a);
    } else {
        fprintf(stderr, "quant_tool: unknown command %s\n", argv[1]);
        rc = 2;
    }
    free(in);
    return rc;
}
