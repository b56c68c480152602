/* libFuzzer target for the tokenizer: any bytes, under every pre-tokenizer
 * and SPM, with and without special-token parsing, must tokenize to ids
 * inside the vocab, and (byte-level BPE, no specials) detokenize back to the
 * exact input. The vocabs are small synthetic ones written once at start-up
 * (every byte has a token; a few merges, control and user-defined tokens).
 *
 * Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DTND_FUZZ=ON
 * Run:   build-fuzz/fuzz_tokenizer -max_len=4096 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

#define FUZZ_ASSERT(c)     \
    do {                   \
        if (!(c)) abort(); \
    } while (0)

static const char *const pre_names[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "deepseek-llm",
                                        "deepseek-coder", "deepseek-v3", "falcon", "gpt-4o", "tekken"};
#define N_BPE (sizeof pre_names / sizeof pre_names[0])
static tnd_tokenizer *g_tok[N_BPE + 1]; /* the last one is SPM */

static tnd_tokenizer *build(const char *model, const char *pre) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_tok_%d.gguf", (int)getpid());
    gguf_writer *w = gguf_writer_new();
    FUZZ_ASSERT(w);
    gguf_set_str(w, "general.architecture", "llama");
    gguf_set_str(w, "tokenizer.ggml.model", model);
    enum { N = 256 + 9 };
    static char store[N][16];
    gguf_str toks[N];
    float scores[N];
    int32_t types[N];
    int n = 0;
    bool spm = !strcmp(model, "llama");
    for (int b = 0; b < 256; b++, n++) {
        size_t len = spm ? (size_t)snprintf(store[n], 16, "<0x%02X>", b) : uni_encode(uni_byte_to_cp((uint8_t)b), store[n]);
        toks[n] = (gguf_str){len, store[n]};
        types[n] = spm ? 6 : 1;
        scores[n] = 0;
    }
    /* SPM vocabs always hold U+2581 itself: as byte pieces it would not
     * detokenize to a space. */
    static const char *const extra[] = {"<s>", "</s>", "<|x|>", "\xc4\xa0t", "th", "the", "\xe2\x96\x81t", "he",
                                        "\xe2\x96\x81"};
    static const int32_t extra_types[] = {3, 3, 4, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < 9; i++, n++) {
        toks[n] = (gguf_str){strlen(extra[i]), extra[i]};
        types[n] = extra_types[i];
        scores[n] = (float)-i;
    }
    gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, (uint64_t)n);
    gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    if (spm) {
        gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n);
    } else {
        gguf_set_str(w, "tokenizer.ggml.pre", pre);
        static const char *const m[] = {"\xc4\xa0 t", "t h", "th e", "h e"};
        gguf_str ms[4];
        for (int i = 0; i < 4; i++) ms[i] = (gguf_str){strlen(m[i]), m[i]};
        gguf_set_arr_str(w, "tokenizer.ggml.merges", ms, 4);
    }
    FUZZ_ASSERT(gguf_writer_write(w, path, NULL, NULL) == TND_OK);
    gguf_writer_free(w);
    tnd_gguf *g;
    FUZZ_ASSERT(tnd_gguf_open(path, &g) == TND_OK);
    tnd_tokenizer *t;
    FUZZ_ASSERT(tnd_tokenizer_new(g, &t) == TND_OK);
    tnd_gguf_free(g);
    unlink(path);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok[0]) {
        for (size_t i = 0; i < N_BPE; i++) g_tok[i] = build("gpt2", pre_names[i]);
        g_tok[N_BPE] = build("llama", NULL);
    }
    if (size < 1) return 0;
    unsigned sel = data[0];
    const tnd_tokenizer *t = g_tok[(sel & 0x7f) % (N_BPE + 1)];
    bool special = sel & 0x80;
    bool is_spm = t == g_tok[N_BPE];
    char *text = malloc(size); /* exact size, so ASan sees reads past the end */
    FUZZ_ASSERT(text);
    memcpy(text, data + 1, size - 1);
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    FUZZ_ASSERT(tnd_tokenize(t, text, len, false, special, &ids, &n) == TND_OK);
    int32_t nv = tnd_tokenizer_n_vocab(t);
    size_t cap = 16 * n + 16, at = 0;
    char *back = malloc(cap);
    FUZZ_ASSERT(back);
    for (size_t i = 0; i < n; i++) {
        FUZZ_ASSERT(ids[i] >= 0 && ids[i] < nv);
        size_t k = tnd_token_to_piece(t, ids[i], false, back + at, cap - at);
        FUZZ_ASSERT(at + k <= cap);
        at += k;
    }
    /* Control tokens render as "", so compare only when none can appear; a
     * literal U+2581 in SPM input comes back as a space, as in sentencepiece. */
    if (!special) {
        if (is_spm && !memmem(text, len, "\xe2\x96\x81", 3)) FUZZ_ASSERT(len == 0 ? at == 0 : (at == len + 1 && back[0] == ' ' && !memcmp(back + 1, text, len)));
        else if (!is_spm) FUZZ_ASSERT(at == len && !memcmp(back, text, len));
    }
    size_t c = tnd_utf8_complete(text, len);
    FUZZ_ASSERT(c <= len && len - c <= 3);
    free(back);
    free(ids);
    free(text);
    return 0;
}
