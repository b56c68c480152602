/* Tokenizer unit tests: Unicode classes, UTF-8 helpers, pre-tokenizer splits
 * (hand-derived from the patterns), BPE merge order and SPM score order on
 * tiny synthetic vocabs, special tokens, flags, detokenization (whole and
 * streamed), errors; and the SmolLM2 vocab when the default model is there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

/* ---- unicode ---- */

static void test_unicode(void) {
    CHECK(uni_category('A') == UNI_Lu);
    CHECK(uni_category('z') == UNI_Ll);
    CHECK(uni_category(0xe9) == UNI_Ll);   /* é */
    CHECK(uni_category(0x663) == UNI_Nd);  /* ARABIC-INDIC DIGIT THREE */
    CHECK(uni_category(0x4e2d) == UNI_Lo); /* 中 */
    CHECK(uni_category(0x301) == UNI_Mn);  /* combining acute */
    CHECK(uni_category('!') == UNI_Po);
    CHECK(uni_category('+') == UNI_Sm);
    CHECK(uni_category(0x1c5) == UNI_Lt);  /* ǅ */
    CHECK(uni_category(0x2160) == UNI_Nl); /* Ⅰ */
    CHECK(uni_category(0xbd) == UNI_No);   /* ½ */
    CHECK(uni_category(0x1f999) == UNI_So); /* 🦙 */
    CHECK(uni_category(0x10ffff) == UNI_Cn);
    CHECK(uni_category(UNI_INVALID) == UNI_Cn);
    /* The lookup lands in the right run at every run's edges. */
    CHECK(uni_n_runs > 1000 && (uni_runs[0] >> 5) == 0);
    for (uint32_t r = 1; r < uni_n_runs; r++) {
        uint32_t start = uni_runs[r] >> 5;
        CHECK(start > (uni_runs[r - 1] >> 5));
        CHECK(uni_category(start) == (enum uni_cat)(uni_runs[r] & 31));
        CHECK(uni_category(start - 1) == (enum uni_cat)(uni_runs[r - 1] & 31));
    }
    CHECK(uni_is_space(' ') && uni_is_space('\t') && uni_is_space(0x3000) && uni_is_space(0x85));
    CHECK(!uni_is_space(0x200b)); /* zero width space is not White_Space */
    CHECK(uni_is_letter(0x4e2d) && !uni_is_letter('1') && uni_is_number(0xbd));
    CHECK(uni_is_punct(0x3002) && uni_is_symbol('$') && uni_is_mark(0x301));

    /* Byte mapping: a bijection onto 256 code points, printable ASCII fixed,
     * space -> U+0120 (Ġ), newline -> U+010A (Ċ). */
    CHECK(uni_byte_to_cp('a') == 'a');
    CHECK(uni_byte_to_cp(' ') == 0x120);
    CHECK(uni_byte_to_cp('\n') == 0x10a);
    CHECK(uni_byte_to_cp(0) == 0x100);
    for (int b = 0; b < 256; b++) CHECK(uni_cp_to_byte(uni_byte_to_cp((uint8_t)b)) == b);
    CHECK(uni_cp_to_byte(0x20) == -1 && uni_cp_to_byte(0x144) == -1);

    size_t n;
    CHECK(uni_decode("\xe2\x82\xac", 3, &n) == 0x20ac && n == 3);
    CHECK(uni_decode("\xe2\x82", 2, &n) == UNI_INVALID && n == 1);
    CHECK(uni_decode("\xc0\xaf", 2, &n) == UNI_INVALID && n == 1); /* overlong */
    CHECK(uni_decode("\xed\xa0\x80", 3, &n) == UNI_INVALID && n == 1); /* surrogate */
    CHECK(uni_decode("\xf0\x9f\xa6\x99", 4, &n) == 0x1f999 && n == 4);
    char buf[4];
    CHECK(uni_encode(0x1f999, buf) == 4 && !memcmp(buf, "\xf0\x9f\xa6\x99", 4));
    CHECK(uni_encode(0x2581, buf) == 3 && !memcmp(buf, "\xe2\x96\x81", 3));

    CHECK(tnd_utf8_complete("abc", 3) == 3);
    CHECK(tnd_utf8_complete("a\xe2\x82", 3) == 1);
    CHECK(tnd_utf8_complete("a\xe2\x82\xac", 4) == 4);
    CHECK(tnd_utf8_complete("\xf0\x9f", 2) == 0);
    CHECK(tnd_utf8_complete("\xf0\x9f\xa6", 3) == 0);
    CHECK(tnd_utf8_complete("a\xc3", 2) == 1);
    CHECK(tnd_utf8_complete("\x80\x80", 2) == 2);   /* stray continuations pass */
    CHECK(tnd_utf8_complete("\xe0\x80", 2) == 2);   /* can never complete */
    CHECK(tnd_utf8_complete("a\xff", 2) == 2);
    CHECK(tnd_utf8_complete("", 0) == 0);
}

/* ---- pre-tokenizers ---- */

/* Checks that pre splits text into exactly the '|'-separated pieces of want. */
static void check_split(tok_pre pre, const char *text, const char *want, int line) {
    size_t *ends = NULL, n = 0;
    if (tok_pre_split(pre, text, strlen(text), &ends, &n) != TND_OK) {
        fprintf(stderr, "line %d: split failed: %s\n", line, tnd_last_error());
        tc_count(false);
        return;
    }
    char got[512];
    size_t g = 0, start = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) got[g++] = '|';
        memcpy(got + g, text + start, ends[i] - start);
        g += ends[i] - start;
        start = ends[i];
    }
    got[g] = 0;
    if (!tc_count(!strcmp(got, want)))
        fprintf(stderr, "line %d: pre %d split of \"%s\": got \"%s\", want \"%s\"\n", line, (int)pre, text, got, want);
    free(ends);
}
#define SPLIT(pre, text, want) check_split(pre, text, want, __LINE__)

static void test_pre(void) {
    CHECK(tok_pre_from_name("smollm") == TOK_PRE_STARCODER);
    CHECK(tok_pre_from_name("llama-bpe") == TOK_PRE_LLAMA3);
    CHECK(tok_pre_from_name("qwen2") == TOK_PRE_QWEN2);
    CHECK(tok_pre_from_name("gpt-2") == TOK_PRE_GPT2);
    CHECK(tok_pre_from_name("no-such-pre") == -1);

    /* gpt2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    SPLIT(TOK_PRE_GPT2, "Hello world", "Hello| world");
    SPLIT(TOK_PRE_GPT2, "  Hello", " | Hello");
    SPLIT(TOK_PRE_GPT2, "a\n\nb", "a|\n|\n|b");
    SPLIT(TOK_PRE_GPT2, "it's 2024!!", "it|'s| 2024|!!");
    SPLIT(TOK_PRE_GPT2, "I'VE", "I|'|VE");
    SPLIT(TOK_PRE_GPT2, "x   ", "x|   ");
    SPLIT(TOK_PRE_GPT2, "$x", "$|x");
    SPLIT(TOK_PRE_GPT2, "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87", "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87");
    SPLIT(TOK_PRE_GPT2, "a\xff" "b", "a|\xff|b"); /* an invalid byte is "other" */
    SPLIT(TOK_PRE_GPT2, "", "");

    /* llama3: case-insensitive contractions, [^\r\n\p{L}\p{N}]?\p{L}+,
     * \p{N}{1,3}, ' ?[^\s\p{L}\p{N}]+[\r\n]*', \s*[\r\n]+, \s+(?!\S), \s+ */
    SPLIT(TOK_PRE_LLAMA3, "I'VE 12345", "I|'VE| |123|45");
    SPLIT(TOK_PRE_LLAMA3, "Hello\n\nworld", "Hello|\n\n|world");
    SPLIT(TOK_PRE_LLAMA3, "x ?!?\n\ny", "x| ?!?\n\n|y");
    SPLIT(TOK_PRE_LLAMA3, "hi  there", "hi| | there");
    SPLIT(TOK_PRE_LLAMA3, "$x", "$x");
    SPLIT(TOK_PRE_LLAMA3, "a \n b", "a| \n| b");
    SPLIT(TOK_PRE_LLAMA3, "\nword", "\n|word");
    /* qwen2: the same with single digits */
    SPLIT(TOK_PRE_QWEN2, "I'VE 12345", "I|'VE| |1|2|3|4|5");
    /* starcoder / smollm: digits isolated first, then gpt2 on each piece */
    SPLIT(TOK_PRE_STARCODER, "a 12b", "a| |1|2|b");
    SPLIT(TOK_PRE_STARCODER, "x2024 y", "x|2|0|2|4| y");
    /* falcon: punctuation runs, gpt2, then groups of three ASCII digits */
    SPLIT(TOK_PRE_FALCON, "ab, 12345", "ab|,| |123|45");
    /* gpt-4o: case-shaped words with an optional contraction; tekken: no
     * contraction, single digits */
    SPLIT(TOK_PRE_GPT4O, "HELLOworld CamelCase", "HELLOworld| Camel|Case");
    SPLIT(TOK_PRE_GPT4O, "helloWORLD I'M 12345/", "hello|WORLD| I'M| |123|45|/");
    SPLIT(TOK_PRE_GPT4O, "a ?!/\nb", "a| ?!/\n|b");
    SPLIT(TOK_PRE_TEKKEN, "I'M 12", "I|'M| |1|2");
    /* deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK, \p{N} */
    SPLIT(TOK_PRE_DEEPSEEK_CODER, "a\nb 12, x", "a|\n|b| |1|2|,| x");
}

/* ---- synthetic vocabs ---- */

static char g_tmp[256];

/* Writes a vocab GGUF with the given tokens (types all normal unless types
 * given) and opens a tokenizer on it. */
static tnd_status make_tok(const char *model, const char *pre, const char *const *toks, int n,
                           const float *scores, const int32_t *types, const char *const *merges, int n_merges,
                           void (*extra)(gguf_writer *), tnd_tokenizer **out) {
    gguf_writer *w = gguf_writer_new();
    gguf_set_str(w, "general.architecture", "llama");
    if (model) gguf_set_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_str *s = calloc((size_t)(n > n_merges ? n : n_merges) + 1, sizeof *s);
    for (int i = 0; i < n; i++) s[i] = (gguf_str){strlen(toks[i]), toks[i]};
    if (n) gguf_set_arr_str(w, "tokenizer.ggml.tokens", s, (uint64_t)n);
    if (scores) gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n);
    if (types) gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    for (int i = 0; i < n_merges; i++) s[i] = (gguf_str){strlen(merges[i]), merges[i]};
    if (merges) gguf_set_arr_str(w, "tokenizer.ggml.merges", s, (uint64_t)n_merges);
    if (extra) extra(w);
    free(s);
    tnd_status st = gguf_writer_write(w, g_tmp, NULL, NULL);
    gguf_writer_free(w);
    if (st != TND_OK) return st;
    tnd_gguf *g;
    if ((st = tnd_gguf_open(g_tmp, &g)) != TND_OK) return st;
    st = tnd_tokenizer_new(g, out);
    tnd_gguf_free(g); /* the tokenizer must not depend on the file */
    return st;
}

/* Tokenizes text and compares the ids with want (n_want of them). */
static void check_ids(const tnd_tokenizer *t, const char *text, bool add, bool special, const int32_t *want,
                      size_t n_want, int line) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tnd_tokenize(t, text, strlen(text), add, special, &ids, &n) != TND_OK) {
        fprintf(stderr, "line %d: tokenize failed: %s\n", line, tnd_last_error());
        tc_count(false);
        return;
    }
    bool ok = n == n_want && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    if (!tc_count(ok)) {
        fprintf(stderr, "line %d: \"%s\": got", line, text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
}
#define IDS(t, text, add, special, ...)                                                            \
    do {                                                                                           \
        const int32_t w_[] = {__VA_ARGS__};                                                        \
        check_ids(t, text, add, special, w_[0] < 0 ? NULL : w_, w_[0] < 0 ? 0 : TND_ARRAY_LEN(w_), \
                  __LINE__);                                                                       \
    } while (0)
#define NONE (-1)

static void bos_extra(gguf_writer *w) {
    gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 5);
    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 6);
    gguf_set_bool(w, "tokenizer.ggml.add_eos_token", true);
}

static void test_bpe_synthetic(void) {
    /* Byte-level: 'a' 'b' 'c' stand for themselves, Ġ for space. */
    const char *toks[] = {"a", "b", "c", "ab", "bc", "<s>", "</s>", "\xc4\xa0", "\xc4\xa0\x61", "<x>"};
    const int32_t types[] = {1, 1, 1, 1, 1, 3, 3, 1, 1, 4};
    const char *m1[] = {"b c", "a b", "\xc4\xa0 a"};
    const char *m2[] = {"a b", "b c", "\xc4\xa0 a"};
    tnd_tokenizer *t = NULL;
    CHECK(make_tok("gpt2", "gpt-2", toks, 10, NULL, types, m1, 3, bos_extra, &t) == TND_OK);
    if (!t) return;
    IDS(t, "abc", false, false, 0, 4);  /* "b c" ranks first */
    IDS(t, "bbc", false, false, 1, 4);
    IDS(t, " ab", false, false, 7, 3);  /* "a b" outranks "Ġ a" */
    IDS(t, " a", false, false, 8);
    IDS(t, "abc", true, false, 0, 4, 6); /* EOS by its flag; no BOS: BPE's default */
    IDS(t, "", false, false, NONE);
    /* Control tokens only with parse_special; user-defined always. */
    IDS(t, "a<s>", false, true, 0, 5);
    IDS(t, "a<x>c", false, false, 0, 9, 2);
    CHECK(tnd_tokenizer_find(t, "bc") == 4 && tnd_tokenizer_find(t, "zz") == -1);
    CHECK(tnd_tokenizer_bos(t) == 5 && tnd_tokenizer_eos(t) == 6 && tnd_tokenizer_n_vocab(t) == 10);
    CHECK(tnd_tokenizer_is_eog(t, 6) && !tnd_tokenizer_is_eog(t, 5));
    char buf[16];
    CHECK(tnd_token_to_piece(t, 8, false, buf, sizeof buf) == 2 && !memcmp(buf, " a", 2));
    CHECK(tnd_token_to_piece(t, 5, false, buf, sizeof buf) == 0);
    CHECK(tnd_token_to_piece(t, 5, true, buf, sizeof buf) == 3 && !memcmp(buf, "<s>", 3));
    CHECK(tnd_token_to_piece(t, 9, false, buf, sizeof buf) == 3); /* user-defined: shown */
    CHECK(tnd_token_to_piece(t, 8, false, buf, 1) == 2 && buf[0] == ' '); /* short buffer */
    CHECK(tnd_token_to_piece(t, 99, true, buf, sizeof buf) == 0);
    tnd_tokenizer_free(t);
    t = NULL;
    CHECK(make_tok("gpt2", "gpt-2", toks, 10, NULL, types, m2, 3, NULL, &t) == TND_OK);
    if (!t) return;
    IDS(t, "abc", false, false, 3, 2); /* now "a b" ranks first */
    IDS(t, "abc", true, false, 3, 2);  /* no add flags and no ids: nothing added */
    tnd_tokenizer_free(t);

    /* Leftmost first on equal ranks: "aaa" with the one merge "a a". */
    const char *toks2[] = {"a", "aa"};
    const char *m3[] = {"a a"};
    t = NULL;
    CHECK(make_tok("gpt2", NULL, toks2, 2, NULL, NULL, m3, 1, NULL, &t) == TND_OK);
    if (!t) return;
    IDS(t, "aaa", false, false, 1, 0);
    IDS(t, "aaaa", false, false, 1, 1);
    tnd_tokenizer_free(t);
}

static void test_spm_synthetic(void) {
    /* ▁ = U+2581. Scores decide the merge order. */
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81\x61", "<0x0A>", "<0x41>"};
    const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 6, 6};
    const float s1[] = {0, 0, 0, -1, -2, -2, -3, -5, 0, 0};
    const float s2[] = {0, 0, 0, -1, -2, -2, -5, -3, 0, 0};
    tnd_tokenizer *t = NULL;
    CHECK(make_tok("llama", "default", toks, 10, s1, types, NULL, 0, NULL, &t) == TND_OK);
    if (!t) return;
    IDS(t, "ab", false, false, 3, 6);      /* "ab" scores higher than "▁a" */
    IDS(t, "ab", true, false, 1, 3, 6);    /* SPM adds BOS by default */
    IDS(t, "a\nA", false, false, 7, 8, 9); /* byte fallback */
    IDS(t, "a\xc3\xa9", false, false, 7, 0); /* é: no byte tokens for C3/A9: one unk */
    IDS(t, "", false, false, NONE);
    char buf[16];
    CHECK(tnd_token_to_piece(t, 7, false, buf, sizeof buf) == 2 && !memcmp(buf, " a", 2));
    CHECK(tnd_token_to_piece(t, 8, false, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(tnd_token_to_piece(t, 1, false, buf, sizeof buf) == 0);
    tnd_tokenizer_free(t);
    t = NULL;
    CHECK(make_tok("llama", "default", toks, 10, s2, types, NULL, 0, NULL, &t) == TND_OK);
    if (!t) return;
    IDS(t, "ab", false, false, 7, 5); /* now "▁a" wins */
    IDS(t, "ab ab", false, false, 7, 5, 7, 5);
    tnd_tokenizer_free(t);
}

/* A piece with U+2581 inside ("a▁") makes merges cross word starts, so
 * words may not be merged one by one. */
static void test_spm_cross_word(void) {
    const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "\xe2\x96\x81\x61", "a\xe2\x96\x81"};
    const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1};
    const float sc[] = {0, 0, 0, -3, -3, -3, -1, -0.5f};
    tnd_tokenizer *t = NULL;
    CHECK(make_tok("llama", NULL, toks, 8, sc, types, NULL, 0, NULL, &t) == TND_OK);
    if (!t) return;
    IDS(t, "a b", false, false, 3, 7, 5); /* "a▁" outscores "▁a" */
    tnd_tokenizer_free(t);
}

static void test_errors(void) {
    const char *toks[] = {"a"};
    tnd_tokenizer *t = NULL;
    CHECK(make_tok("no_vocab", NULL, toks, 1, NULL, NULL, NULL, 0, NULL, &t) == TND_ERR_UNSUPPORTED);
    CHECK(strstr(tnd_last_error(), "no vocabulary") != NULL);
    CHECK(make_tok("bert", NULL, toks, 1, NULL, NULL, NULL, 0, NULL, &t) == TND_ERR_UNSUPPORTED);
    CHECK(make_tok(NULL, NULL, toks, 1, NULL, NULL, NULL, 0, NULL, &t) == TND_ERR_FORMAT);
    CHECK(make_tok("gpt2", NULL, toks, 1, NULL, NULL, NULL, 0, NULL, &t) == TND_ERR_FORMAT); /* no merges */
    CHECK(make_tok("llama", NULL, toks, 0, NULL, NULL, NULL, 0, NULL, &t) == TND_ERR_FORMAT); /* no tokens */
    CHECK(t == NULL);
}

/* ---- SmolLM2 (the default model) ---- */

static char *detok(const tnd_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 16 * n + 16, at = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) at += tnd_token_to_piece(t, ids[i], false, out + at, cap - at);
    *len = at;
    return out;
}

static void test_smollm(const char *src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src);
    if (access(path, R_OK)) {
        printf("SmolLM2 model missing (%s): its checks skipped\n", path);
        return;
    }
    tnd_gguf *g = NULL;
    tnd_tokenizer *t = NULL;
    CHECK(tnd_gguf_open(path, &g) == TND_OK);
    if (!g) return;
    CHECK(tnd_tokenizer_new(g, &t) == TND_OK);
    tnd_gguf_free(g);
    if (!t) return;
    CHECK(tnd_tokenizer_n_vocab(t) == 49152);
    int32_t hello = tnd_tokenizer_find(t, "Hello"), world = tnd_tokenizer_find(t, "\xc4\xa0world");
    int32_t im_start = tnd_tokenizer_find(t, "<|im_start|>"), im_end = tnd_tokenizer_find(t, "<|im_end|>");
    int32_t d[10];
    for (int i = 0; i < 10; i++) {
        char s[2] = {(char)('0' + i), 0};
        d[i] = tnd_tokenizer_find(t, s);
    }
    int32_t sp = tnd_tokenizer_find(t, "\xc4\xa0"), user = tnd_tokenizer_find(t, "user");
    CHECK(hello >= 0 && world >= 0 && im_start == 1 && im_end == 2 && sp >= 0 && user >= 0);
    IDS(t, "Hello world", false, false, hello, world);
    IDS(t, "Hello world", true, false, hello, world); /* add_bos_token is false */
    IDS(t, "2024", false, false, d[2], d[0], d[2], d[4]);  /* digits one by one */
    IDS(t, " 42", false, false, sp, d[4], d[2]);
    IDS(t, "<|im_start|>user", false, true, im_start, user);
    CHECK(tnd_tokenizer_is_eog(t, im_end) && tnd_tokenizer_is_eog(t, 0) && !tnd_tokenizer_is_eog(t, im_start));
    CHECK(tnd_tokenizer_eos(t) == 2);

    /* Without parse_special the marker is plain text: several tokens that
     * detokenize back to it. */
    const char *texts[] = {
        "<|im_start|>user",
        ("Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8"
         "apple\xe5\xb7\xa5\xe4\xbd\x9c" "1314151" "\xe5\xa4\xa9\xef\xbd\x9e"),
        "    def f(x):\n\treturn x**2  # \xce\xbb\n\n\n",
        "\xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 3.14159 caf\xc3\xa9 \xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe",
        /* Invalid UTF-8 survives too: every byte that can occur in UTF-8
         * has a token (SmolLM2 has none for C0, C1, F5..FF). */
        ("a\x80" "b\xe2\x82 \xc3("),
    };
    for (size_t k = 0; k < TND_ARRAY_LEN(texts); k++) {
        int32_t *ids = NULL;
        size_t n = 0, len;
        CHECK(tnd_tokenize(t, texts[k], strlen(texts[k]), false, false, &ids, &n) == TND_OK);
        if (k == 0) CHECK(n > 1 && ids[0] != im_start);
        char *back = detok(t, ids, n, &len);
        CHECK(len == strlen(texts[k]) && !memcmp(back, texts[k], len));
        /* Streaming: emit pieces as they come, holding back incomplete UTF-8;
         * every chunk emitted is whole UTF-8 and the chunks add up. */
        char pend[64], acc[512];
        size_t np = 0, na = 0;
        for (size_t i = 0; i < n; i++) {
            np += tnd_token_to_piece(t, ids[i], false, pend + np, sizeof pend - np);
            size_t ok = tnd_utf8_complete(pend, np);
            if (k != 4) {
                for (size_t j = 0; j < ok;) {
                    size_t m;
                    CHECK(uni_decode(pend + j, ok - j, &m) != UNI_INVALID);
                    j += m;
                }
            }
            memcpy(acc + na, pend, ok);
            na += ok;
            memmove(pend, pend + ok, np - ok);
            np -= ok;
        }
        memcpy(acc + na, pend, np);
        na += np;
        CHECK(na == strlen(texts[k]) && !memcmp(acc, texts[k], na));
        free(back);
        free(ids);
    }
    /* An emoji that is not a token comes out as byte tokens whose pieces are
     * partial UTF-8. */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tnd_tokenize(t, "\xf0\x9f\xa6\x99", 4, false, false, &ids, &n) == TND_OK);
    CHECK(n >= 2);
    char buf[8];
    if (n >= 2) CHECK(tnd_utf8_complete(buf, tnd_token_to_piece(t, ids[0], false, buf, sizeof buf)) == 0);
    free(ids);
    tnd_tokenizer_free(t);
}

int main(void) {
    const char *src = getenv("TND_SRC");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tnd_test_tokenizer_%d.gguf", (int)getpid());
    test_unicode();
    test_pre();
    test_bpe_synthetic();
    test_spm_synthetic();
    test_spm_cross_word();
    test_errors();
    test_smollm(src ? src : ".");
    unlink(g_tmp);
    return tc_summary();
}
