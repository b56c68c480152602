/* Rewrites a GGUF with its 4-bit weights (Q4_K, Q4_1) in another format,
 * to time the CPU kernels of formats `tandem synth` does not write on a
 * model of a real shape (a synth file in, the same model in Q2_K / Q3_K /
 * Q5_K out; the default model in Q5_0 / Q5_1).
 *
 *   build/dev_retype IN.gguf OUT.gguf TYPE
 *
 * TYPE: a type name as tnd_type_name writes it (Q2_K, Q3_K, Q5_K, Q6_K,
 * Q5_0, Q5_1, ...) with a quantizer. Every Q4_K and Q4_1 tensor but
 * token_embd whose rows hold whole blocks of TYPE is dequantized and
 * quantized again (the reference quantizer, ~4 us a 256-block: about two
 * minutes for an 8B model); the others and all metadata are copied.
 * general.file_type is left as it was. The output is a speed probe: the
 * weights are the input's up to the new format's rounding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_check.h"
#include "gguf.h"
#include "quant/quant.h"
#include "util.h"

typedef struct conv {
    const gguf_tensor *src;
    tnd_type to; /* the source's own type: copied */
} conv;

static float g_buf[256]; /* fill's scratch (the writer calls it from one thread) */

/* Elements [e, e + k) of src as floats into g_buf (block sizes of 32 and
 * 256 divide one another: e is a multiple of the smaller). */
static void dequant(const gguf_tensor *src, const tnd_type_traits *ft, uint64_t e, int k) {
    const uint64_t fb = (uint64_t)ft->block_size;
    float tmp[256];
    for (int got = 0; got < k;) {
        const uint64_t b = (e + (uint64_t)got) / fb, in = (e + (uint64_t)got) % fb;
        ft->to_float((const char *)src->data + b * ft->type_size, tmp, (int64_t)fb);
        const int take = (int)TND_MIN(fb - in, (uint64_t)(k - got));
        memcpy(g_buf + got, tmp + in, sizeof(float) * (size_t)take);
        got += take;
    }
}

/* The output tensor's bytes [off, off + n): converted block by block. */
static bool fill(void *user, uint64_t off, void *buf, size_t n) {
    const conv *c = user;
    if (c->to == c->src->type) {
        memcpy(buf, (const char *)c->src->data + off, n);
        return true;
    }
    const tnd_type_traits *ft = tnd_type_traits_get(c->src->type), *tt = tnd_type_traits_get(c->to);
    uint8_t blk[512];
    const int tb = tt->block_size;
    for (uint64_t b = off / tt->type_size; n > 0; b++) {
        dequant(c->src, ft, b * (uint64_t)tb, tb);
        tt->from_float(g_buf, blk, tb);
        const uint64_t in = off - b * tt->type_size, k = TND_MIN((uint64_t)n, tt->type_size - in);
        memcpy(buf, blk + in, (size_t)k);
        buf = (char *)buf + k;
        off += k;
        n -= (size_t)k;
    }
    return true;
}

static void progress(void *user, uint64_t done, uint64_t total) {
    (void)user;
    fprintf(stderr, "\rwritten %5.1f%%", total ? 100.0 * (double)done / (double)total : 100.0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE (Q2_K, Q3_K, Q5_K, Q5_0, Q5_1, ...)\n", argv[0]);
        return 2;
    }
    tnd_type g_to = TND_TYPE_COUNT;
    for (int t = 0; t < TND_TYPE_COUNT; t++) {
        const tnd_type_traits *tr = tnd_type_traits_get((tnd_type)t);
        if (tr && tr->name && !strcmp(tr->name, argv[3]) && (tr->block_size == 256 || tr->block_size == 32) &&
            tr->from_float)
            g_to = (tnd_type)t;
    }
    if (g_to == TND_TYPE_COUNT) {
        fprintf(stderr, "%s: not a 32- or 256-element block type with a quantizer\n", argv[3]);
        return 2;
    }
    tnd_gguf *g = NULL;
    CK(tnd_gguf_open(argv[1], &g));
    gguf_writer *w = gguf_writer_new();
    if (!w) return 1;
    CK(gguf_copy_kvs(w, g, ""));
    const int64_t n = gguf_n_tensors(g);
    conv *cv = calloc((size_t)n, sizeof *cv);
    if (!cv) return 1;
    int64_t n_conv = 0;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        cv[i].src = t;
        const bool four = t->type == TND_TYPE_Q4_K || t->type == TND_TYPE_Q4_1;
        const int64_t tb = tnd_type_traits_get(g_to)->block_size;
        cv[i].to = four && t->n_dims >= 2 && t->ne[0] % tb == 0 && strcmp(name, "token_embd.weight") ? g_to : t->type;
        n_conv += cv[i].to != t->type;
        CK(gguf_add_tensor_fill(w, name, cv[i].to, t->n_dims, t->ne, fill, &cv[i]));
    }
    fprintf(stderr, "%lld of %lld tensors Q4_K/Q4_1 -> %s\n", (long long)n_conv, (long long)n, argv[3]);
    CK(gguf_writer_write(w, argv[2], progress, NULL));
    fprintf(stderr, "\n");
    gguf_writer_free(w);
    free(cv);
    tnd_gguf_free(g);
    return 0;
}
