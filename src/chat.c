/* Chat templates: a fixed renderer per template family, chosen by name or
 * detected from the GGUF's Jinja template by distinctive substrings. No Jinja
 * interpreter: the families differ only in a handful of literal markers.
 *
 * BOS: the renderer never emits the leading BOS ("<|begin_of_text|>",
 * "<bos>", "<s>", "<｜begin▁of▁sentence｜>"); the caller tokenizes the result
 * with add_special=true, so the tokenizer adds it exactly once, as the
 * vocab's add_bos flag says, and parse_special=true so the markers below
 * become their control tokens. Markers that repeat inside the conversation
 * (llama2's "</s><s>" between turns) are emitted as text. */
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- growable string ------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_put(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Appends s without leading/trailing whitespace (Jinja's |trim). */
static void sb_put_trim(sbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    while (n && is_space(s[n - 1]))
        n--;
    sb_putn(b, s, n);
}

/* ---- templates ------------------------------------------------------------ */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_OTHER } role_kind;

static role_kind role_of(const char *r) {
    if (!strcmp(r, "system"))
        return ROLE_SYSTEM;
    if (!strcmp(r, "user"))
        return ROLE_USER;
    if (!strcmp(r, "assistant"))
        return ROLE_ASSISTANT;
    return ROLE_OTHER;
}

/* The default system prompt a chatml template inserts when the conversation
 * has none (SmolLM2: "You are a helpful AI assistant named SmolLM, ...";
 * Qwen2.5: "You are Qwen, ..."): the first "<|im_start|>system" + newline
 * (real, or the two characters \n inside a Jinja string literal) followed by
 * literal text up to "<|im_end|>". Text with Jinja syntax or quotes in it is
 * an expression (e.g. messages[0]['content']), not a default. malloc'd or
 * NULL. */
static char *chatml_default_system(const char *tmpl) {
    static const char open[] = "<|im_start|>system";
    if (!tmpl)
        return NULL;
    for (const char *p = strstr(tmpl, open); p; p = strstr(p + 1, open)) {
        const char *s = p + sizeof open - 1;
        if (*s == '\n')
            s += 1;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *e = strstr(s, "<|im_end|>");
        if (!e || e == s)
            continue;
        size_t n = (size_t)(e - s);
        if (memchr(s, '{', n) || memchr(s, '}', n) || memchr(s, '\'', n) || memchr(s, '"', n) ||
            memchr(s, '+', n))
            continue;
        char *out = malloc(n + 1);
        if (!out)
            return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) { /* undo the \n escape of a literal */
            if (s[i] == '\\' && i + 1 < n && s[i + 1] == 'n') {
                out[k++] = '\n';
                i++;
            } else {
                out[k++] = s[i];
            }
        }
        out[k] = '\0';
        return out;
    }
    return NULL;
}

/* "<|im_start|>role\ncontent<|im_end|>\n" */
static tnd_status render_chatml(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    if (n == 0 || role_of(m[0].role) != ROLE_SYSTEM) {
        char *def = chatml_default_system(tmpl);
        if (def) {
            sb_put(b, "<|im_start|>system\n");
            sb_put(b, def);
            sb_put(b, "<|im_end|>\n");
            free(def);
        }
    }
    for (int i = 0; i < n; i++) {
        sb_put(b, "<|im_start|>");
        sb_put(b, m[i].role);
        sb_put(b, "\n");
        sb_put(b, m[i].content);
        sb_put(b, "<|im_end|>\n");
    }
    if (add_assistant)
        sb_put(b, "<|im_start|>assistant\n");
    return TND_OK;
}

/* "<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>", content
 * trimmed as Meta's template does. */
static tnd_status render_llama3(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    (void)tmpl;
    for (int i = 0; i < n; i++) {
        sb_put(b, "<|start_header_id|>");
        sb_put(b, m[i].role);
        sb_put(b, "<|end_header_id|>\n\n");
        sb_put_trim(b, m[i].content);
        sb_put(b, "<|eot_id|>");
    }
    if (add_assistant)
        sb_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return TND_OK;
}

/* Gemma 2/3: "<start_of_turn>user\ncontent<end_of_turn>\n", assistant is
 * "model", a leading system message is prepended to the first turn + "\n\n". */
static tnd_status render_gemma(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    (void)tmpl;
    const char *sys = NULL;
    int i = 0;
    if (n > 0 && role_of(m[0].role) == ROLE_SYSTEM) {
        sys = m[0].content;
        i = 1;
    }
    for (bool first = true; i < n; i++, first = false) {
        role_kind r = role_of(m[i].role);
        if (r != ROLE_USER && r != ROLE_ASSISTANT)
            return tnd_fail(TND_ERR_ARG, "chat: gemma takes user/assistant turns after one leading system "
                                         "message, got '%s' at %d", m[i].role, i);
        sb_put(b, r == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (first && sys) {
            sb_put(b, sys);
            sb_put(b, "\n\n");
        }
        sb_put_trim(b, m[i].content);
        sb_put(b, "<end_of_turn>\n");
    }
    if (add_assistant)
        sb_put(b, "<start_of_turn>model\n");
    return TND_OK;
}

/* Llama 2 chat: "[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ..."
 * (first BOS left to the tokenizer; later ones are text; content stripped).
 * mistral (the v0.2 instruct template): "[INST] user [/INST]answer</s>[INST] ...",
 * system text prepended to the first user message + "\n\n". */
static tnd_status render_inst(bool llama2, const tnd_chat_msg *m, int n, sbuf *b) {
    const char *sys = NULL;
    int i = 0;
    if (n > 0 && role_of(m[0].role) == ROLE_SYSTEM) {
        sys = m[0].content;
        i = 1;
    }
    bool first = true;
    for (; i < n; i++) {
        role_kind r = role_of(m[i].role);
        if (r == ROLE_USER) {
            if (!first)
                sb_put(b, llama2 ? "<s>" : "");
            sb_put(b, "[INST] ");
            if (first && sys) {
                if (llama2) {
                    sb_put(b, "<<SYS>>\n");
                    sb_put(b, sys);
                    sb_put(b, "\n<</SYS>>\n\n");
                } else {
                    sb_put(b, sys);
                    sb_put(b, "\n\n");
                }
            }
            if (llama2)
                sb_put_trim(b, m[i].content);
            else
                sb_put(b, m[i].content);
            sb_put(b, " [/INST]");
        } else if (r == ROLE_ASSISTANT) {
            if (llama2) {
                sb_put(b, " ");
                sb_put_trim(b, m[i].content);
                sb_put(b, " </s>");
            } else {
                sb_put(b, m[i].content);
                sb_put(b, "</s>");
            }
        } else {
            return tnd_fail(TND_ERR_ARG, "chat: %s takes user/assistant turns after one leading system "
                                         "message, got '%s' at %d", llama2 ? "llama2" : "mistral", m[i].role, i);
        }
        first = false;
    }
    /* A prompt ending in a user turn already ends with "[/INST]": the
     * assistant's turn is open, so add_assistant adds nothing. */
    return TND_OK;
}

static tnd_status render_llama2(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    (void)tmpl;
    (void)add_assistant;
    return render_inst(true, m, n, b);
}

static tnd_status render_mistral(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    (void)tmpl;
    (void)add_assistant;
    return render_inst(false, m, n, b);
}

/* Phi-3: "<|role|>\ncontent<|end|>\n", then "<|assistant|>\n". */
static tnd_status render_phi3(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    (void)tmpl;
    for (int i = 0; i < n; i++) {
        if (role_of(m[i].role) == ROLE_OTHER)
            return tnd_fail(TND_ERR_ARG, "chat: phi3 has no role '%s'", m[i].role);
        sb_put(b, "<|");
        sb_put(b, m[i].role);
        sb_put(b, "|>\n");
        sb_put(b, m[i].content);
        sb_put(b, "<|end|>\n");
    }
    if (add_assistant)
        sb_put(b, "<|assistant|>\n");
    return TND_OK;
}

/* DeepSeek V3 / R1 (and the R1 distills): system text first, bare; then
 * "<｜User｜>content" and "<｜Assistant｜>content<｜end▁of▁sentence｜>",
 * an assistant's reasoning (up to "</think>") dropped as the template does.
 * The generation prompt is "<｜Assistant｜>", plus "<think>\n" when the
 * template's own generation prompt has it (the updated R1 templates). */
static tnd_status render_deepseek3(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b) {
    for (int i = 0; i < n; i++)
        if (role_of(m[i].role) == ROLE_SYSTEM)
            sb_put(b, m[i].content);
    for (int i = 0; i < n; i++) {
        switch (role_of(m[i].role)) {
        case ROLE_SYSTEM:
            break;
        case ROLE_USER:
            sb_put(b, "<\xef\xbd\x9cUser\xef\xbd\x9c>");
            sb_put(b, m[i].content);
            break;
        case ROLE_ASSISTANT: {
            const char *c = m[i].content, *t = strstr(c, "</think>");
            if (t)
                c = t + strlen("</think>");
            sb_put(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
            sb_put(b, c);
            sb_put(b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
            break;
        }
        default:
            return tnd_fail(TND_ERR_ARG, "chat: deepseek3 has no role '%s'", m[i].role);
        }
    }
    if (add_assistant) {
        sb_put(b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
        if (tmpl && (strstr(tmpl, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n") ||
                     strstr(tmpl, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n")))
            sb_put(b, "<think>\n");
    }
    return TND_OK;
}

typedef tnd_status (*render_fn)(const char *tmpl, const tnd_chat_msg *m, int n, bool add_assistant, sbuf *b);

static const struct {
    const char *name;
    render_fn fn;
} templates[] = {
    {"chatml", render_chatml},   {"llama3", render_llama3}, {"gemma", render_gemma},
    {"llama2", render_llama2},   {"mistral", render_mistral}, {"phi3", render_phi3},
    {"deepseek3", render_deepseek3},
};

/* The format a GGUF template text is written for; NULL if none matches. */
static const char *detect_known(const char *tmpl) {
    if (strstr(tmpl, "<|im_start|>"))
        return "chatml";
    if (strstr(tmpl, "<|start_header_id|>"))
        return "llama3";
    if (strstr(tmpl, "<start_of_turn>"))
        return "gemma";
    if (strstr(tmpl, "<\xef\xbd\x9cUser\xef\xbd\x9c>"))
        return "deepseek3";
    if (strstr(tmpl, "[INST]"))
        return strstr(tmpl, "<<SYS>>") ? "llama2" : "mistral";
    if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>"))
        return "phi3";
    return NULL;
}

const char *tnd_chat_detect(const char *tmpl) {
    const char *k = tmpl ? detect_known(tmpl) : NULL;
    return k ? k : "chatml"; /* the most common format */
}

tnd_status tnd_chat_render(const char *name, const char *tmpl, const tnd_chat_msg *msgs, int n_msgs,
                           bool add_assistant, char **out) {
    if (!out || n_msgs < 0 || (n_msgs > 0 && !msgs))
        return tnd_fail(TND_ERR_ARG, "chat: bad arguments");
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return tnd_fail(TND_ERR_ARG, "chat: message %d has a NULL role or content", i);
    /* A template that matches no known format is an error, not chatml: the
     * wrong markup still yields fluent text, only worse, and nothing would
     * tell the user why; naming the format (--chat-template) is one flag.
     * No template at all (a base model) gets chatml, which the caller says. */
    if (!name && tmpl && !detect_known(tmpl)) {
        char known[256] = "";
        for (size_t i = 0; i < TND_ARRAY_LEN(templates); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", templates[i].name);
        return tnd_fail(TND_ERR_UNSUPPORTED, "chat: the model's chat template matches none of the formats tandem "
                        "knows (%s); name the one it uses (--chat-template NAME)", known);
    }
    if (!name)
        name = tnd_chat_detect(tmpl);
    render_fn fn = NULL;
    for (size_t i = 0; i < TND_ARRAY_LEN(templates); i++)
        if (!strcmp(name, templates[i].name))
            fn = templates[i].fn;
    if (!fn) {
        char known[256] = "";
        for (size_t i = 0; i < TND_ARRAY_LEN(templates); i++) {
            if (i)
                strcat(known, ", ");
            strcat(known, templates[i].name);
        }
        return tnd_fail(TND_ERR_ARG, "chat: unknown template '%s' (known: %s)", name, known);
    }
    sbuf b = {0};
    sb_put(&b, ""); /* an empty conversation still yields "" */
    tnd_status st = fn(tmpl, msgs, n_msgs, add_assistant, &b);
    if (st != TND_OK) {
        free(b.p);
        return st;
    }
    if (b.oom) {
        free(b.p);
        return tnd_fail(TND_ERR_NOMEM, "chat: out of memory rendering %d messages", n_msgs);
    }
    *out = b.p;
    return TND_OK;
}
