/* Tokenizer built from GGUF tokenizer.* metadata.
 *
 * Two models:
 *   - SPM ("llama"): spaces become U+2581, an optional U+2581 prefix, then
 *     adjacent pieces merge greedily by the score of the merged token (highest
 *     first, leftmost on ties); characters no token covers fall back to the
 *     <0xNN> byte tokens.
 *   - byte-level BPE ("gpt2"): a pre-tokenizer splits the text into pieces
 *     (the model family's split patterns, matched by hand-written code below),
 *     each byte of a piece becomes the code point that stands for it (GPT-2's
 *     byte mapping), and adjacent symbols merge by merge rank (lowest first,
 *     leftmost on ties).
 * Both run one priority queue of candidate pairs with lazy invalidation, so a
 * long input costs O(n log n), not O(n^2).
 *
 * Before either, the text is split on the texts of user-defined tokens
 * (always) and control tokens (when parse_special), leftmost-longest, and
 * those are emitted as their ids.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

enum {
    TT_UNDEF = 0,
    TT_NORMAL = 1,
    TT_UNKNOWN = 2,
    TT_CONTROL = 3,
    TT_USER = 4,
    TT_UNUSED = 5,
    TT_BYTE = 6,
};

typedef enum { TOK_SPM, TOK_BPE } tok_kind;

typedef struct merge_ent {
    uint64_t key;   /* (left id << 32) | right id; UINT64_MAX when empty */
    int32_t rank;
    int32_t res;    /* id of the merged token */
} merge_ent;

/* A slot of the text -> id table; the hash's high bits are kept so that most
 * probes that miss never touch the token text. */
typedef struct hslot {
    int32_t id;   /* -1: empty */
    uint32_t tag;
} hslot;

struct tnd_tokenizer {
    tok_kind kind;
    tok_pre pre;
    int32_t n_vocab;
    char *text;         /* all token texts, back to back */
    uint32_t *off;      /* (n_vocab + 1) offsets into text */
    float *scores;      /* n_vocab; 0 when the vocab has none */
    uint8_t *type;      /* n_vocab TT_* */
    uint8_t *eog;       /* n_vocab flags */
    hslot *htab;        /* open addressing text -> id */
    uint64_t hmask;
    merge_ent *mtab;    /* BPE merges */
    uint64_t mmask;
    int32_t byte_tok[256]; /* SPM: <0xNN>; BPE: the byte's one-character token; -1 */
    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool spm_split;     /* no piece has U+2581 after another character */
    /* Tokens matched in raw text (control + user-defined), bucketed by first
     * byte, longest first within a bucket. */
    int32_t *spec;
    uint32_t spec_start[257];
};

/* ---- small helpers -------------------------------------------------------- */

typedef struct ivec {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ivec;

static void ivec_push(ivec *a, int32_t x) {
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) {
            a->oom = true;
            return;
        }
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    const uint64_t h = tnd_fnv1a(TND_FNV_SEED, s, n);
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static inline const char *tok_text(const tnd_tokenizer *t, int32_t id, size_t *n) {
    *n = t->off[id + 1] - t->off[id];
    return t->text + t->off[id];
}

static int32_t lookup(const tnd_tokenizer *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & t->hmask;; i = (i + 1) & t->hmask) {
        int32_t id = t->htab[i].id;
        if (id < 0) return -1;
        if (t->htab[i].tag != tag) continue;
        size_t tn;
        const char *ts = tok_text(t, id, &tn);
        if (tn == n && !memcmp(ts, s, n)) return id;
    }
}

static const merge_ent *merge_find(const tnd_tokenizer *t, int32_t a, int32_t b) {
    if (!t->mtab || a < 0 || b < 0) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = hash_u64(key) & t->mmask;; i = (i + 1) & t->mmask) {
        if (t->mtab[i].key == UINT64_MAX) return NULL;
        if (t->mtab[i].key == key) return &t->mtab[i];
    }
}

/* ---- priority queue of candidate pairs ------------------------------------ */

typedef struct sym {
    uint32_t start, n; /* byte span in the working buffer; n == 0: merged away */
    int32_t prev, next;
    int32_t id;        /* BPE: token id (-1 unknown); SPM: unused */
} sym;

typedef struct cand {
    float score;       /* higher first */
    int32_t left, right;
    uint32_t size;     /* bytes of both at push time: stale if it changed */
    int32_t res;       /* BPE: merged id */
} cand;

typedef struct heap {
    cand *v;
    size_t n, cap;
    bool oom;
} heap;

static bool cand_before(const cand *a, const cand *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static void heap_push(heap *h, cand c) {
    if (h->oom) return;
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        cand *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv) {
            h->oom = true;
            return;
        }
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static cand heap_pop(heap *h) {
    cand top = h->v[0];
    cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < h->n && cand_before(&h->v[l], best)) { m = l; best = &h->v[l]; }
        if (r < h->n && cand_before(&h->v[r], best)) { m = r; }
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* ---- SPM ------------------------------------------------------------------ */

/* sentencepiece merges only into normal pieces (control, unknown, unused
 * and byte pieces never come out of merging; user-defined ones are matched
 * before). */
static int32_t spm_piece(const tnd_tokenizer *t, const char *p, size_t n) {
    int32_t id = lookup(t, p, n);
    return id >= 0 && (t->type[id] == TT_NORMAL || t->type[id] == TT_USER) ? id : -1;
}

static void spm_try_pair(const tnd_tokenizer *t, const char *buf, const sym *s, int32_t l, heap *h) {
    if (l < 0 || s[l].next < 0) return;
    int32_t r = s[l].next;
    uint32_t size = s[l].n + s[r].n;
    int32_t id = spm_piece(t, buf + s[l].start, size);
    if (id < 0) return;
    heap_push(h, (cand){t->scores[id], l, r, size, id});
}

static void emit_bytes_fallback(const tnd_tokenizer *t, const char *p, size_t n, ivec *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_tok[(uint8_t)p[i]];
        if (b >= 0) ivec_push(out, b);
        else if (t->unk >= 0 && (i == 0 || t->byte_tok[(uint8_t)p[i - 1]] >= 0)) ivec_push(out, t->unk);
    }
}

static bool is_meta(const char *p, size_t n) { return n >= 3 && !memcmp(p, "\xe2\x96\x81", 3); }

static tnd_status spm_encode(const tnd_tokenizer *t, const char *text, size_t len, bool prefix, ivec *out) {
    if (len > (UINT32_MAX - 3) / 3) return tnd_fail(TND_ERR_LIMIT, "tokenize: text of %zu bytes is too long", len);
    /* Escaped copy: each ' ' becomes U+2581 (3 bytes). */
    size_t cap = 3 * len + 3;
    char *buf = malloc(cap);
    sym *s = malloc((len + 2) * sizeof *s);
    heap h = {0};
    if (!buf || !s) {
        free(buf);
        free(s);
        return tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    }
    size_t bn = 0;
    if (prefix) { memcpy(buf, "\xe2\x96\x81", 3); bn = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + bn, "\xe2\x96\x81", 3); bn += 3; }
        else buf[bn++] = text[i];
    }
    int32_t ns = 0;
    for (size_t i = 0; i < bn;) {
        size_t n;
        uni_decode(buf + i, bn - i, &n);
        s[ns] = (sym){(uint32_t)i, (uint32_t)n, ns - 1, ns + 1, -1};
        ns++;
        i += n;
    }
    /* Segments: when no piece has U+2581 after another character, nothing
     * merges across the start of a word (a U+2581 after a non-U+2581), so
     * each word merges on its own: same result, small heaps. */
    for (int32_t a = 0; a < ns && !h.oom;) {
        int32_t b = a + 1;
        if (t->spm_split)
            while (b < ns && !(is_meta(buf + s[b].start, s[b].n) && !is_meta(buf + s[b - 1].start, s[b - 1].n))) b++;
        else
            b = ns;
        s[a].prev = -1;
        s[b - 1].next = -1;
        h.n = 0;
        for (int32_t i = a; i + 1 < b; i++) spm_try_pair(t, buf, s, i, &h);
        while (h.n && !h.oom) {
            cand c = heap_pop(&h);
            sym *l = &s[c.left], *r = &s[c.right];
            if (!l->n || !r->n || l->next != c.right || l->n + r->n != c.size) continue;
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) s[r->next].prev = c.left;
            spm_try_pair(t, buf, s, l->prev, &h);
            spm_try_pair(t, buf, s, c.left, &h);
        }
        for (int32_t i = a; i >= 0; i = s[i].next) {
            int32_t id = spm_piece(t, buf + s[i].start, s[i].n);
            if (id >= 0) ivec_push(out, id);
            else emit_bytes_fallback(t, buf + s[i].start, s[i].n, out);
        }
        a = b;
    }
    bool oom = h.oom;
    free(h.v);
    free(s);
    free(buf);
    return oom ? tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory") : TND_OK;
}

/* ---- pre-tokenizers ------------------------------------------------------- */
/* Each matcher returns the length (in code points) of the match of its
 * pattern at cp[i], inside the piece that ends at cp[end]; 0 if none. The
 * patterns are the split regexes of the model families' tokenizer.json;
 * alternatives are tried in order, as a backtracking regex engine would. */

typedef size_t (*match_fn)(const uint32_t *cp, size_t i, size_t end);
typedef bool (*cls_fn)(uint32_t c);

static size_t run_of(const uint32_t *cp, size_t i, size_t end, cls_fn f) {
    size_t j = i;
    while (j < end && f(cp[j])) j++;
    return j - i;
}

/* \s?X+ (space = any \s) or ' ?X+' (space = ' ' only). */
static size_t opt_lead_run(const uint32_t *cp, size_t i, size_t end, cls_fn f, bool any_space) {
    bool lead = any_space ? uni_is_space(cp[i]) : cp[i] == ' ';
    if (lead && i + 1 < end && f(cp[i + 1])) return 1 + run_of(cp, i + 1, end, f);
    return run_of(cp, i, end, f);
}

static bool c_letter(uint32_t c) { return uni_is_letter(c); }
static bool c_number(uint32_t c) { return uni_is_number(c); }
static bool c_space(uint32_t c) { return uni_is_space(c); }
static bool c_punct(uint32_t c) { return uni_is_punct(c); }
static bool c_other(uint32_t c) { return !uni_is_space(c) && !uni_is_letter(c) && !uni_is_number(c); }
static bool c_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

/* 's 't 're 've 'm 'll 'd, optionally case-insensitive (ASCII). */
static size_t contraction(const uint32_t *cp, size_t i, size_t end, bool icase) {
    if (cp[i] != '\'' || i + 1 >= end) return 0;
    uint32_t a = cp[i + 1], b = i + 2 < end ? cp[i + 2] : 0;
    if (icase) {
        if (a < 0x80) a |= 0x20 * (a >= 'A' && a <= 'Z');
        if (b < 0x80) b |= 0x20 * (b >= 'A' && b <= 'Z');
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ */
static size_t space_tail(const uint32_t *cp, size_t i, size_t end) {
    size_t k = run_of(cp, i, end, c_space);
    if (k == 0) return 0;
    if (i + k == end || k == 1) return k;
    return k - 1; /* leave the last space to prefix the next word */
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t m_gpt2(const uint32_t *cp, size_t i, size_t end) {
    size_t k;
    if ((k = contraction(cp, i, end, false))) return k;
    if ((k = opt_lead_run(cp, i, end, c_letter, false))) return k;
    if ((k = opt_lead_run(cp, i, end, c_number, false))) return k;
    if ((k = opt_lead_run(cp, i, end, c_other, false))) return k;
    return space_tail(cp, i, end);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}
 * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_like(const uint32_t *cp, size_t i, size_t end, size_t max_digits) {
    size_t k;
    if ((k = contraction(cp, i, end, true))) return k;
    uint32_t c = cp[i];
    if (!uni_is_letter(c) && !uni_is_number(c) && !c_crlf(c) && i + 1 < end && uni_is_letter(cp[i + 1]))
        return 1 + run_of(cp, i + 1, end, c_letter);
    if ((k = run_of(cp, i, end, c_letter))) return k;
    if ((k = run_of(cp, i, end, c_number))) return k < max_digits ? k : max_digits;
    if ((k = opt_lead_run(cp, i, end, c_other, false))) return k + run_of(cp, i + k, end, c_crlf);
    if ((k = run_of(cp, i, end, c_space))) {
        for (size_t j = i + k; j > i; j--)
            if (c_crlf(cp[j - 1])) return j - i;
    }
    return space_tail(cp, i, end);
}

static size_t m_llama3(const uint32_t *cp, size_t i, size_t end) { return llama3_like(cp, i, end, 3); }
static size_t m_qwen2(const uint32_t *cp, size_t i, size_t end) { return llama3_like(cp, i, end, 1); }

/* \p{N} */
static size_t m_digit(const uint32_t *cp, size_t i, size_t end) {
    (void)end;
    return uni_is_number(cp[i]) ? 1 : 0;
}

/* \p{N}+ */
static size_t m_digits(const uint32_t *cp, size_t i, size_t end) { return run_of(cp, i, end, c_number); }

/* \p{N}{1,3} */
static size_t m_digits3(const uint32_t *cp, size_t i, size_t end) {
    size_t k = run_of(cp, i, end, c_number);
    return k < 3 ? k : 3;
}

/* [\r\n] */
static size_t m_crlf(const uint32_t *cp, size_t i, size_t end) {
    (void)end;
    return c_crlf(cp[i]) ? 1 : 0;
}

/* DeepSeek LLM's letter class is an explicit list of ranges that is, up to a
 * few code points, ASCII letters plus the cased letters (Lu, Ll, Lt). */
static bool c_dsl_letter(uint32_t c) {
    if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return uni_is_cased(c);
}

/* [!-/:-~！-／：-～‘-‟　-。] */
static bool c_dsl_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x7e) || (c >= 0xff01 && c <= 0xff0f) ||
           (c >= 0xff1a && c <= 0xff5e) || (c >= 0x2018 && c <= 0x201f) || (c >= 0x3000 && c <= 0x3002);
}

/* [一-龥ࠀ-一가-퟿] */
static bool c_cjk(uint32_t c) {
    return (c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x0800 && c <= 0x4e00) || (c >= 0xac00 && c <= 0xd7ff);
}

static size_t m_dsl_letters(const uint32_t *cp, size_t i, size_t end) {
    return opt_lead_run(cp, i, end, c_dsl_letter, true);
}
static size_t m_dsl_punct(const uint32_t *cp, size_t i, size_t end) {
    return opt_lead_run(cp, i, end, c_dsl_punct, true);
}
/* \s+$ */
static size_t m_space_at_end(const uint32_t *cp, size_t i, size_t end) {
    size_t k = run_of(cp, i, end, c_space);
    return i + k == end ? k : 0;
}
static size_t m_cjk(const uint32_t *cp, size_t i, size_t end) { return run_of(cp, i, end, c_cjk); }
/* \s?\p{L}+ and \s?\p{P}+ */
static size_t m_sp_letters(const uint32_t *cp, size_t i, size_t end) {
    return opt_lead_run(cp, i, end, c_letter, true);
}
static size_t m_sp_punct(const uint32_t *cp, size_t i, size_t end) {
    return opt_lead_run(cp, i, end, c_punct, true);
}

/* Falcon: [\p{P}\$\+<=>\^~\|`]+ and [0-9][0-9][0-9] */
static bool c_falcon_punct(uint32_t c) {
    return uni_is_punct(c) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
           c == '~' || c == '|' || c == '`';
}
static size_t m_falcon_punct(const uint32_t *cp, size_t i, size_t end) {
    return run_of(cp, i, end, c_falcon_punct);
}
static size_t m_ascii3(const uint32_t *cp, size_t i, size_t end) {
    for (size_t j = 0; j < 3; j++)
        if (i + j >= end || cp[i + j] < '0' || cp[i + j] > '9') return 0;
    return 3;
}

/* DeepSeek V3: [一-龥぀-ゟ゠-ヿ]+ */
static bool c_cjk_kana(uint32_t c) {
    return (c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x3040 && c <= 0x30ff);
}
static size_t m_cjk_kana(const uint32_t *cp, size_t i, size_t end) { return run_of(cp, i, end, c_cjk_kana); }
static bool c_ascii_alpha(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z' && c < 0x80; }
static bool c_letter_mark(uint32_t c) { return uni_is_letter(c) || uni_is_mark(c); }
static bool c_punct_sym(uint32_t c) { return uni_is_punct(c) || uni_is_symbol(c); }
/* [!-/:-@\[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*
 * |\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t m_deepseek3(const uint32_t *cp, size_t i, size_t end) {
    uint32_t c = cp[i];
    bool ascii_punct = c < 0x80 && c > 0x20 && c != 0x7f && !c_ascii_alpha(c) && !(c >= '0' && c <= '9');
    if (ascii_punct && i + 1 < end && c_ascii_alpha(cp[i + 1])) return 1 + run_of(cp, i + 1, end, c_ascii_alpha);
    if (!c_crlf(c) && !uni_is_letter(c) && !c_punct_sym(c) && i + 1 < end && c_letter_mark(cp[i + 1]))
        return 1 + run_of(cp, i + 1, end, c_letter_mark);
    size_t k;
    if ((k = run_of(cp, i, end, c_letter_mark))) return k;
    if ((k = opt_lead_run(cp, i, end, c_punct_sym, false))) return k + run_of(cp, i + k, end, c_crlf);
    if ((k = run_of(cp, i, end, c_space))) {
        for (size_t j = i + k; j > i; j--)
            if (c_crlf(cp[j - 1])) return j - i;
    }
    return space_tail(cp, i, end);
}

/* GPT-4o (o200k, also Llama 4) and Tekken (Mistral):
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+C?
 *  |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*C?
 *  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with C = (?i:'s|'t|'re|'ve|'m|'ll|'d) for GPT-4o; Tekken has no C and
 * single digits. U (upper-ish) and W (lower-ish) share Lm, Lo and marks,
 * which is why U*W+ needs the backtracking below. */
static bool c_upperish(uint32_t c) {
    enum uni_cat k = uni_category(c);
    return k == UNI_Lu || k == UNI_Lt || k == UNI_Lm || k == UNI_Lo || (k >= UNI_Mn && k <= UNI_Me);
}
static bool c_lowerish(uint32_t c) {
    enum uni_cat k = uni_category(c);
    return (k >= UNI_Ll && k <= UNI_Lo && k != UNI_Lt) || (k >= UNI_Mn && k <= UNI_Me);
}
static bool c_slash_crlf(uint32_t c) { return c == '\r' || c == '\n' || c == '/'; }

/* U*W+ at s: the longest U* that still leaves a W, then W+ greedily. */
static size_t seq_u_star_w_plus(const uint32_t *cp, size_t s, size_t end) {
    size_t a = s + run_of(cp, s, end, c_upperish);
    size_t w = run_of(cp, a, end, c_lowerish);
    if (w) return a + w - s;
    for (size_t m = a; m > s; m--)
        if (c_lowerish(cp[m - 1])) return m - s;
    return 0;
}

/* U+W* at s. */
static size_t seq_u_plus_w_star(const uint32_t *cp, size_t s, size_t end) {
    size_t u = run_of(cp, s, end, c_upperish);
    return u ? u + run_of(cp, s + u, end, c_lowerish) : 0;
}

static size_t gpt4o_like(const uint32_t *cp, size_t i, size_t end, bool contractions, size_t max_digits) {
    uint32_t c = cp[i];
    bool pfx = !uni_is_letter(c) && !uni_is_number(c) && !c_crlf(c) && i + 1 < end;
    size_t (*const alts[2])(const uint32_t *, size_t, size_t) = {seq_u_star_w_plus, seq_u_plus_w_star};
    for (int a = 0; a < 2; a++) {
        size_t k = 0;
        if (pfx && (k = alts[a](cp, i + 1, end))) k++;
        else k = alts[a](cp, i, end);
        if (k) {
            if (contractions && i + k < end) k += contraction(cp, i + k, end, true);
            return k;
        }
    }
    size_t k;
    if ((k = run_of(cp, i, end, c_number))) return k < max_digits ? k : max_digits;
    if ((k = opt_lead_run(cp, i, end, c_other, false))) return k + run_of(cp, i + k, end, c_slash_crlf);
    if ((k = run_of(cp, i, end, c_space))) {
        for (size_t j = i + k; j > i; j--)
            if (c_crlf(cp[j - 1])) return j - i;
    }
    return space_tail(cp, i, end);
}

static size_t m_gpt4o(const uint32_t *cp, size_t i, size_t end) { return gpt4o_like(cp, i, end, true, 3); }
static size_t m_tekken(const uint32_t *cp, size_t i, size_t end) { return gpt4o_like(cp, i, end, false, 1); }

#define MAX_STAGES 6
static const match_fn pre_stages[TOK_PRE_COUNT][MAX_STAGES] = {
    [TOK_PRE_GPT2] = {m_gpt2},
    [TOK_PRE_LLAMA3] = {m_llama3},
    [TOK_PRE_QWEN2] = {m_qwen2},
    [TOK_PRE_STARCODER] = {m_digit, m_gpt2},
    [TOK_PRE_DEEPSEEK_LLM] = {m_crlf, m_dsl_letters, m_dsl_punct, m_space_at_end, m_cjk, m_digits},
    [TOK_PRE_DEEPSEEK_CODER] = {m_crlf, m_sp_letters, m_sp_punct, m_cjk, m_digit},
    [TOK_PRE_DEEPSEEK3] = {m_digits3, m_cjk_kana, m_deepseek3},
    [TOK_PRE_FALCON] = {m_falcon_punct, m_gpt2, m_ascii3},
    [TOK_PRE_GPT4O] = {m_gpt4o},
    [TOK_PRE_TEKKEN] = {m_tekken},
};

static const struct {
    const char *name;
    tok_pre pre;
} pre_names[] = {
    {"default", TOK_PRE_GPT2}, {"gpt-2", TOK_PRE_GPT2}, {"gpt2", TOK_PRE_GPT2},
    {"mpt", TOK_PRE_GPT2}, {"olmo", TOK_PRE_GPT2}, {"jais", TOK_PRE_GPT2},
    {"phi-2", TOK_PRE_GPT2}, {"roberta-bpe", TOK_PRE_GPT2},
    {"llama-bpe", TOK_PRE_LLAMA3}, {"llama3", TOK_PRE_LLAMA3}, {"llama-v3", TOK_PRE_LLAMA3},
    {"dbrx", TOK_PRE_LLAMA3}, {"smaug-bpe", TOK_PRE_LLAMA3}, {"chatglm-bpe", TOK_PRE_LLAMA3},
    {"falcon3", TOK_PRE_LLAMA3},
    {"qwen2", TOK_PRE_QWEN2}, {"deepseek-r1-qwen", TOK_PRE_QWEN2}, {"stablelm2", TOK_PRE_QWEN2},
    {"megrez", TOK_PRE_QWEN2}, {"hunyuan", TOK_PRE_QWEN2},
    {"starcoder", TOK_PRE_STARCODER}, {"smollm", TOK_PRE_STARCODER}, {"refact", TOK_PRE_STARCODER},
    {"command-r", TOK_PRE_STARCODER}, {"codeshell", TOK_PRE_STARCODER}, {"exaone", TOK_PRE_STARCODER},
    {"minerva-7b", TOK_PRE_STARCODER},
    {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM},
    {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER},
    {"deepseek-v3", TOK_PRE_DEEPSEEK3},
    {"falcon", TOK_PRE_FALCON},
    {"gpt-4o", TOK_PRE_GPT4O}, {"llama4", TOK_PRE_GPT4O},
    {"tekken", TOK_PRE_TEKKEN}, {"pixtral", TOK_PRE_TEKKEN},
};

int tok_pre_from_name(const char *name) {
    for (size_t i = 0; i < TND_ARRAY_LEN(pre_names); i++)
        if (!strcmp(pre_names[i].name, name)) return (int)pre_names[i].pre;
    return -1;
}

/* Code points of text with their byte offsets (boff[n] = len). */
typedef struct cps {
    uint32_t *cp;
    size_t *boff;
    size_t n;
} cps;

static bool cps_decode(const char *text, size_t len, cps *c) {
    c->cp = malloc((len + 1) * sizeof *c->cp);
    c->boff = malloc((len + 1) * sizeof *c->boff);
    if (!c->cp || !c->boff) {
        free(c->cp);
        free(c->boff);
        return false;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t k;
        c->cp[n] = uni_decode(text + i, len - i, &k);
        c->boff[n++] = i;
        i += k;
    }
    c->boff[n] = len;
    c->n = n;
    return true;
}

/* Runs the stages of pre over code points [0, n): *ends (malloc'd) gets the
 * code point index where each piece ends. Each stage splits every piece into
 * its matches and the gaps between them. */
static bool pre_split_cps(tok_pre pre, const cps *c, size_t **ends_out, size_t *n_out) {
    size_t cap = c->n + 1;
    size_t *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return false;
    }
    size_t na = 0;
    if (c->n) a[na++] = c->n;
    for (int s = 0; s < MAX_STAGES && pre_stages[pre][s]; s++) {
        match_fn m = pre_stages[pre][s];
        size_t nb = 0, start = 0;
        for (size_t p = 0; p < na; p++) {
            size_t end = a[p], gap = start, i = start;
            while (i < end) {
                size_t k = m(c->cp, i, end);
                if (!k) {
                    i++;
                    continue;
                }
                if (gap < i) b[nb++] = i;
                i += k;
                b[nb++] = i;
                gap = i;
            }
            if (gap < end) b[nb++] = end;
            start = end;
        }
        size_t *t = a;
        a = b;
        b = t;
        na = nb;
    }
    free(b);
    *ends_out = a;
    *n_out = na;
    return true;
}

tnd_status tok_pre_split(tok_pre pre, const char *text, size_t len, size_t **ends, size_t *n) {
    if ((unsigned)pre >= TOK_PRE_COUNT) return tnd_fail(TND_ERR_ARG, "tok_pre_split: bad pre-tokenizer %d", (int)pre);
    cps c;
    if (!cps_decode(text, len, &c)) return tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    size_t *e, ne;
    if (!pre_split_cps(pre, &c, &e, &ne)) {
        free(c.cp);
        free(c.boff);
        return tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    }
    for (size_t i = 0; i < ne; i++) e[i] = c.boff[e[i]];
    free(c.cp);
    free(c.boff);
    *ends = e;
    *n = ne;
    return TND_OK;
}

/* ---- byte-level BPE ------------------------------------------------------- */

static void bpe_try_pair(const tnd_tokenizer *t, const sym *s, int32_t l, heap *h) {
    if (l < 0 || s[l].next < 0) return;
    int32_t r = s[l].next;
    const merge_ent *m = merge_find(t, s[l].id, s[r].id);
    if (!m) return;
    heap_push(h, (cand){-(float)m->rank, l, r, s[l].n + s[r].n, m->res});
}

/* Encodes one piece (raw bytes). scratch holds at least 4*n+1 bytes, s n syms. */
static void bpe_word(const tnd_tokenizer *t, const char *p, size_t n, char *scratch, sym *s, heap *h, ivec *out) {
    if (t->ignore_merges) {
        /* Llama 3 style: a piece that is a whole token is taken as it is. */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += uni_encode(uni_byte_to_cp((uint8_t)p[i]), scratch + m);
        int32_t id = lookup(t, scratch, m);
        if (id >= 0) {
            ivec_push(out, id);
            return;
        }
    }
    for (size_t i = 0; i < n; i++)
        s[i] = (sym){(uint32_t)i, 1, (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, t->byte_tok[(uint8_t)p[i]]};
    h->n = 0;
    for (size_t i = 0; i + 1 < n; i++) bpe_try_pair(t, s, (int32_t)i, h);
    while (h->n && !h->oom) {
        cand c = heap_pop(h);
        sym *l = &s[c.left], *r = &s[c.right];
        if (!l->n || !r->n || l->next != c.right || l->n + r->n != c.size) continue;
        l->n += r->n;
        l->id = c.res;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.left;
        bpe_try_pair(t, s, l->prev, h);
        bpe_try_pair(t, s, c.left, h);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = s[i].next) {
        if (s[i].id >= 0) ivec_push(out, s[i].id);
        else if (t->unk >= 0) ivec_push(out, t->unk);
    }
}

static tnd_status bpe_encode(const tnd_tokenizer *t, const char *text, size_t len, ivec *out) {
    cps c;
    if (!cps_decode(text, len, &c)) return tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    size_t *ends = NULL, ne = 0;
    char *scratch = NULL;
    sym *s = NULL;
    heap h = {0};
    tnd_status st = TND_OK;
    if (!pre_split_cps(t->pre, &c, &ends, &ne)) goto oom;
    size_t maxw = 0, start = 0;
    for (size_t i = 0; i < ne; i++) {
        size_t w = c.boff[ends[i]] - c.boff[start];
        if (w > maxw) maxw = w;
        start = ends[i];
    }
    scratch = malloc(4 * maxw + 1);
    s = malloc((maxw + 1) * sizeof *s);
    if (!scratch || !s) goto oom;
    start = 0;
    for (size_t i = 0; i < ne; i++) {
        size_t a = c.boff[start], b = c.boff[ends[i]];
        bpe_word(t, text + a, b - a, scratch, s, &h, out);
        start = ends[i];
    }
    if (h.oom) goto oom;
    goto done;
oom:
    st = tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
done:
    free(h.v);
    free(s);
    free(scratch);
    free(ends);
    free(c.cp);
    free(c.boff);
    return st;
}

/* ---- tokenize ------------------------------------------------------------- */

/* Id of the special token whose text starts at text[i] (longest), or -1. */
static int32_t match_special(const tnd_tokenizer *t, const char *text, size_t len, size_t i,
                             bool parse_special, size_t *n) {
    uint8_t b = (uint8_t)text[i];
    for (uint32_t k = t->spec_start[b]; k < t->spec_start[b + 1]; k++) {
        int32_t id = t->spec[k];
        if (t->type[id] != TT_USER && !parse_special) continue;
        size_t tn;
        const char *ts = tok_text(t, id, &tn);
        if (tn <= len - i && !memcmp(text + i, ts, tn)) {
            *n = tn;
            return id;
        }
    }
    return -1;
}

static tnd_status encode_raw(const tnd_tokenizer *t, const char *text, size_t len, bool prefix, ivec *out) {
    if (t->kind == TOK_SPM) return spm_encode(t, text, len, prefix, out);
    return bpe_encode(t, text, len, out);
}

tnd_status tnd_tokenize(const tnd_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n_ids) {
    if (!t || (!text && len) || !ids || !n_ids) return tnd_fail(TND_ERR_ARG, "tnd_tokenize: NULL argument");
    ivec out = {0};
    tnd_status st = TND_OK;
    if (add_special && t->add_bos && t->bos >= 0) ivec_push(&out, t->bos);
    /* SPM's space prefix (a) starts the text, as sentencepiece's dummy
     * prefix does, even when a user-defined token comes first; (b) starts
     * the raw text after each control token, as Hugging Face's Llama
     * tokenizer and llama.cpp do (a chat template's "<s>[INST]" gives
     * "<s>", "▁[INST]"). User-defined tokens are part of the text and
     * start nothing. */
    bool prefix = t->add_space_prefix;
    size_t frag = 0;
    for (size_t i = 0; i < len && st == TND_OK;) {
        size_t n = 0;
        int32_t id = t->spec ? match_special(t, text, len, i, parse_special, &n) : -1;
        if (id < 0) {
            i++;
            continue;
        }
        if (frag < i || (prefix && i == 0 && t->kind == TOK_SPM)) {
            st = encode_raw(t, text + frag, i - frag, prefix, &out);
        }
        ivec_push(&out, id);
        prefix = t->add_space_prefix && t->type[id] == TT_CONTROL;
        i += n;
        frag = i;
    }
    if (st == TND_OK && frag < len) st = encode_raw(t, text + frag, len - frag, prefix, &out);
    if (st == TND_OK && add_special && t->add_eos && t->eos >= 0) ivec_push(&out, t->eos);
    if (st == TND_OK && out.oom) st = tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    if (st != TND_OK) {
        free(out.v);
        return st;
    }
    if (!out.v) out.v = malloc(sizeof *out.v); /* a valid pointer even for no tokens */
    if (!out.v) return tnd_fail(TND_ERR_NOMEM, "tokenize: out of memory");
    *ids = out.v;
    *n_ids = out.n;
    return TND_OK;
}

/* ---- detokenize ----------------------------------------------------------- */

static size_t put(char *buf, size_t cap, size_t at, const char *s, size_t n) {
    if (at < cap) memcpy(buf + at, s, at + n <= cap ? n : cap - at);
    return at + n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

size_t tnd_token_to_piece(const tnd_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    size_t n;
    const char *s = tok_text(t, id, &n);
    switch (t->type[id]) {
    case TT_CONTROL:
    case TT_UNKNOWN:
    case TT_UNUSED:
        return render_special ? put(buf, cap, 0, s, n) : 0;
    case TT_USER:
        return put(buf, cap, 0, s, n);
    case TT_BYTE:
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 &&
            hexval(s[4]) >= 0) {
            char c = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            return put(buf, cap, 0, &c, 1);
        }
        return put(buf, cap, 0, s, n);
    default:
        break;
    }
    size_t at = 0;
    if (t->kind == TOK_SPM) {
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                at = put(buf, cap, at, " ", 1);
                i += 3;
            } else {
                at = put(buf, cap, at, s + i, 1);
                i++;
            }
        }
        return at;
    }
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = uni_decode(s + i, n - i, &k);
        int b = uni_cp_to_byte(cp);
        if (b >= 0) {
            char c = (char)b;
            at = put(buf, cap, at, &c, 1);
        } else {
            at = put(buf, cap, at, s + i, k); /* not a byte stand-in: keep it */
        }
        i += k;
    }
    return at;
}

size_t tnd_utf8_complete(const char *buf, size_t len) {
    if (!buf) return 0;
    /* Find the last byte that is not a continuation byte, at most 3 back. */
    size_t back = 1;
    while (back <= len && back <= 4 && ((uint8_t)buf[len - back] & 0xc0) == 0x80) back++;
    if (back > len || back > 4) return len; /* stray continuation bytes: complete as they are */
    uint8_t c = (uint8_t)buf[len - back];
    size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 1;
    if (need <= back) return len;
    if (back >= 2) {
        /* These lead bytes restrict the second byte; out of range, the
         * sequence can never complete, so it is not held back. */
        uint8_t c1 = (uint8_t)buf[len - back + 1];
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
            (c == 0xf4 && c1 > 0x8f))
            return len;
    }
    return len - back;
}

/* ---- accessors ------------------------------------------------------------ */

int32_t tnd_tokenizer_n_vocab(const tnd_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t tnd_tokenizer_bos(const tnd_tokenizer *t) { return t ? t->bos : -1; }
int32_t tnd_tokenizer_eos(const tnd_tokenizer *t) { return t ? t->eos : -1; }

bool tnd_tokenizer_is_eog(const tnd_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->eog[id];
}

int32_t tnd_tokenizer_find(const tnd_tokenizer *t, const char *text) {
    if (!t || !text) return -1;
    return lookup(t, text, strlen(text));
}

void tnd_tokenizer_free(tnd_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->scores);
    free(t->type);
    free(t->eog);
    free(t->htab);
    free(t->mtab);
    free(t->spec);
    free(t);
}

/* ---- construction from GGUF ----------------------------------------------- */

static const gguf_kv *get_arr(const tnd_gguf *g, const char *key, gguf_vtype et, uint64_t n, bool *bad) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return NULL;
    if (kv->type != GGUF_ARRAY || kv->v.arr.type != et || (n != UINT64_MAX && kv->v.arr.n != n)) {
        *bad = true;
        if (n == UINT64_MAX)
            tnd_fail(TND_ERR_FORMAT, "%s: %s must be an array of %s", gguf_path(g), key, gguf_vtype_name(et));
        else
            tnd_fail(TND_ERR_FORMAT, "%s: %s must be an array of %" PRIu64 " %s (one per token)", gguf_path(g),
                     key, n, gguf_vtype_name(et));
        return NULL;
    }
    return kv;
}

/* Reads an optional token id key; -1 if absent or out of range. */
static int32_t get_id(const tnd_gguf *g, const char *key, int32_t n_vocab) {
    int64_t v;
    if (!gguf_get_i64(g, key, &v)) return -1;
    if (v < 0 || v >= n_vocab) {
        TND_WARN("%s: %s = %lld is not a token id; ignored", gguf_path(g), key, (long long)v);
        return -1;
    }
    return (int32_t)v;
}

static int cmp_spec(const void *pa, const void *pb, void *ctx) {
    const tnd_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint8_t fa = (uint8_t)t->text[t->off[a]], fb = (uint8_t)t->text[t->off[b]];
    if (fa != fb) return fa < fb ? -1 : 1;
    uint32_t la = t->off[a + 1] - t->off[a], lb = t->off[b + 1] - t->off[b];
    if (la != lb) return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static tnd_status build_specials(tnd_tokenizer *t) {
    uint32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER) && t->off[i + 1] > t->off[i]) n++;
    memset(t->spec_start, 0, sizeof t->spec_start);
    if (!n) return TND_OK;
    t->spec = malloc(n * sizeof *t->spec);
    if (!t->spec) return tnd_fail(TND_ERR_NOMEM, "tokenizer: out of memory");
    n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER) && t->off[i + 1] > t->off[i]) t->spec[n++] = i;
    qsort_r(t->spec, n, sizeof *t->spec, cmp_spec, t);
    uint32_t counts[256] = {0};
    for (uint32_t k = 0; k < n; k++) counts[(uint8_t)t->text[t->off[t->spec[k]]]]++;
    uint32_t acc = 0;
    for (int b = 0; b < 256; b++) {
        t->spec_start[b] = acc;
        acc += counts[b];
    }
    t->spec_start[256] = acc;
    return TND_OK;
}

static bool is_eog_text(const char *s, size_t n) {
    static const char *const names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
        "<EOT>", "<|end_of_text|>", "<\xef\xbd\x9c\x65nd\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<|return|>", "<|call|>",
    };
    for (size_t i = 0; i < TND_ARRAY_LEN(names); i++)
        if (strlen(names[i]) == n && !memcmp(names[i], s, n)) return true;
    return false;
}

static tnd_status load_merges(tnd_tokenizer *t, const tnd_gguf *g) {
    bool bad = false;
    const gguf_kv *kv = get_arr(g, "tokenizer.ggml.merges", GGUF_STRING, UINT64_MAX, &bad);
    if (bad) return TND_ERR_FORMAT;
    if (!kv) return tnd_fail(TND_ERR_FORMAT, "%s: BPE vocab without tokenizer.ggml.merges", gguf_path(g));
    uint64_t n = kv->v.arr.n, cap = 16;
    while (cap < 2 * n) cap *= 2;
    t->mtab = malloc(cap * sizeof *t->mtab);
    if (!t->mtab) return tnd_fail(TND_ERR_NOMEM, "tokenizer: out of memory");
    for (uint64_t i = 0; i < cap; i++) t->mtab[i].key = UINT64_MAX;
    t->mmask = cap - 1;
    uint64_t skipped = 0;
    char tmp[1024];
    for (uint64_t r = 0; r < n; r++) {
        gguf_str m = kv->v.arr.strs[r];
        /* "left right": the first space after the first byte separates them. */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp || m.len - 1 > sizeof tmp) {
            skipped++;
            continue;
        }
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        int32_t a = lookup(t, m.ptr, la), b = lookup(t, sp + 1, lb);
        memcpy(tmp, m.ptr, la);
        memcpy(tmp + la, sp + 1, lb);
        int32_t res = lookup(t, tmp, la + lb);
        if (a < 0 || b < 0 || res < 0) {
            skipped++;
            continue;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        uint64_t i = hash_u64(key) & t->mmask;
        while (t->mtab[i].key != UINT64_MAX && t->mtab[i].key != key) i = (i + 1) & t->mmask;
        if (t->mtab[i].key == key) continue; /* a repeated pair keeps its first rank */
        t->mtab[i] = (merge_ent){key, (int32_t)r, res};
    }
    if (skipped) TND_WARN("%s: %" PRIu64 " of %" PRIu64 " merges name unknown tokens; ignored", gguf_path(g), skipped, n);
    return TND_OK;
}

tnd_status tnd_tokenizer_new(const tnd_gguf *g, tnd_tokenizer **out) {
    if (!g || !out) return tnd_fail(TND_ERR_ARG, "tnd_tokenizer_new: NULL argument");
    const char *path = gguf_path(g);
    gguf_str model;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model))
        return tnd_fail(TND_ERR_FORMAT, "%s: no tokenizer (tokenizer.ggml.model missing)", path);
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) kind = TOK_SPM;
    else if (gguf_str_eq(model, "gpt2")) kind = TOK_BPE;
    else if (gguf_str_eq(model, "no_vocab") || gguf_str_eq(model, "none"))
        return tnd_fail(TND_ERR_UNSUPPORTED, "%s: the file has no vocabulary (tokenizer.ggml.model = %.*s)", path,
                        (int)model.len, model.ptr);
    else
        return tnd_fail(TND_ERR_UNSUPPORTED,
                        "%s: tokenizer model '%.*s' is not supported (supported: llama (SPM), gpt2 (BPE))", path,
                        (int)(model.len > 64 ? 64 : model.len), model.ptr);

    bool bad = false;
    const gguf_kv *toks = get_arr(g, "tokenizer.ggml.tokens", GGUF_STRING, UINT64_MAX, &bad);
    if (bad) return TND_ERR_FORMAT;
    if (!toks || toks->v.arr.n == 0) return tnd_fail(TND_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or empty", path);
    if (toks->v.arr.n > INT32_MAX / 2) return tnd_fail(TND_ERR_FORMAT, "%s: too many tokens", path);
    int32_t nv = (int32_t)toks->v.arr.n;
    const gguf_kv *scores = get_arr(g, "tokenizer.ggml.scores", GGUF_FLOAT32, (uint64_t)nv, &bad);
    if (bad) return TND_ERR_FORMAT;
    const gguf_kv *types = get_arr(g, "tokenizer.ggml.token_type", GGUF_INT32, (uint64_t)nv, &bad);
    if (bad) return TND_ERR_FORMAT;

    tnd_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tnd_fail(TND_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = kind;
    t->n_vocab = nv;
    tnd_status st = TND_OK;
    uint64_t total = 0;
    for (int32_t i = 0; i < nv; i++) total += toks->v.arr.strs[i].len;
    if (total > UINT32_MAX - 1) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: token texts too large", path);
        goto fail;
    }
    uint64_t hcap = 16;
    while (hcap < 2 * (uint64_t)nv) hcap *= 2;
    t->text = malloc(total + 1);
    t->off = malloc(((size_t)nv + 1) * sizeof *t->off);
    t->scores = calloc((size_t)nv, sizeof *t->scores);
    t->type = malloc((size_t)nv);
    t->eog = calloc((size_t)nv, 1);
    t->htab = malloc(hcap * sizeof *t->htab);
    if (!t->text || !t->off || !t->scores || !t->type || !t->eog || !t->htab) {
        st = tnd_fail(TND_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    t->hmask = hcap - 1;
    for (uint64_t i = 0; i < hcap; i++) t->htab[i].id = -1;
    uint32_t at = 0;
    for (int32_t i = 0; i < nv; i++) {
        gguf_str s = toks->v.arr.strs[i];
        t->off[i] = at;
        if (s.len) memcpy(t->text + at, s.ptr, s.len);
        at += (uint32_t)s.len;
    }
    t->off[nv] = at;
    if (scores) memcpy(t->scores, scores->v.arr.data, (size_t)nv * sizeof(float));
    for (int32_t i = 0; i < nv; i++) {
        int32_t ty = TT_NORMAL;
        if (types) memcpy(&ty, (const char *)types->v.arr.data + 4 * (size_t)i, 4);
        t->type[i] = ty >= TT_NORMAL && ty <= TT_BYTE ? (uint8_t)ty : TT_NORMAL;
        if (!isfinite(t->scores[i])) t->scores[i] = -1e30f;
    }
    /* Text -> id; on duplicate texts the lowest id wins (inserted first). */
    for (int32_t i = 0; i < nv; i++) {
        size_t n;
        const char *s = tok_text(t, i, &n);
        uint64_t hv = hash_bytes(s, n), h = hv & t->hmask;
        uint32_t tag = (uint32_t)(hv >> 32);
        bool dup = false;
        for (;; h = (h + 1) & t->hmask) {
            int32_t id = t->htab[h].id;
            if (id < 0) break;
            if (t->htab[h].tag != tag) continue;
            size_t tn;
            const char *ts = tok_text(t, id, &tn);
            if (tn == n && !memcmp(ts, s, n)) {
                dup = true;
                break;
            }
        }
        if (!dup) t->htab[h] = (hslot){i, tag};
    }

    for (int b = 0; b < 256; b++) {
        char name[8];
        if (kind == TOK_SPM) {
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_tok[b] = lookup(t, name, 6);
        } else {
            size_t n = uni_encode(uni_byte_to_cp((uint8_t)b), name);
            t->byte_tok[b] = lookup(t, name, n);
        }
    }

    if (kind == TOK_SPM) {
        t->spm_split = true;
        for (int32_t i = 0; i < nv && t->spm_split; i++) {
            if (t->type[i] != TT_NORMAL && t->type[i] != TT_USER) continue;
            size_t n;
            const char *p = tok_text(t, i, &n);
            for (size_t j = 1; j + 3 <= n; j++)
                if (is_meta(p + j, n - j) && !(j >= 3 && is_meta(p + j - 3, 3))) t->spm_split = false;
        }
    }
    if (kind == TOK_BPE) {
        char *pre = gguf_get_cstr(g, "tokenizer.ggml.pre");
        int p = pre ? tok_pre_from_name(pre) : TOK_PRE_GPT2;
        if (p < 0) {
            TND_WARN("%s: pre-tokenizer '%s' is not known; using gpt2's (tokens may differ from the reference)",
                     path, pre);
            p = TOK_PRE_GPT2;
        }
        free(pre);
        t->pre = (tok_pre)p;
        /* Vocabs converted from tiktoken take a piece that is a whole token
         * as it is (Hugging Face's ignore_merges). */
        t->ignore_merges = t->pre == TOK_PRE_LLAMA3 || t->pre == TOK_PRE_GPT4O || t->pre == TOK_PRE_TEKKEN;
        if ((st = load_merges(t, g)) != TND_OK) goto fail;
    }

    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", nv);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", nv);
    t->eot = get_id(g, "tokenizer.ggml.eot_token_id", nv);
    t->eom = get_id(g, "tokenizer.ggml.eom_token_id", nv);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", nv);
    t->pad = get_id(g, "tokenizer.ggml.padding_token_id", nv);
    if (kind == TOK_SPM) {
        /* sentencepiece's fixed ids when the file names none: <unk> 0, <s> 1, </s> 2. */
        if (t->unk < 0 && !gguf_find(g, "tokenizer.ggml.unknown_token_id") && nv > 0) t->unk = 0;
        if (t->bos < 0 && !gguf_find(g, "tokenizer.ggml.bos_token_id") && nv > 1) t->bos = 1;
        if (t->eos < 0 && !gguf_find(g, "tokenizer.ggml.eos_token_id") && nv > 2) t->eos = 2;
    }
    /* Defaults of the families when the flags are absent: sentencepiece
     * models start with BOS and a space; GPT-2 style ones do neither. */
    t->add_bos = kind == TOK_SPM;
    t->add_eos = false;
    t->add_space_prefix = kind == TOK_SPM;
    bool b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;
    /* BPE pieces never carry U+2581, so the prefix would be a literal space
     * that llama.cpp-converted files never ask for; only SPM honours it. */
    if (kind == TOK_BPE) t->add_space_prefix = false;

    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    for (int32_t i = 0; i < nv; i++) {
        if (t->type[i] != TT_CONTROL && t->type[i] != TT_USER) continue;
        size_t n;
        const char *s = tok_text(t, i, &n);
        if (is_eog_text(s, n)) t->eog[i] = 1;
    }
    if ((st = build_specials(t)) != TND_OK) goto fail;
    *out = t;
    return TND_OK;
fail:
    tnd_tokenizer_free(t);
    return st;
}
