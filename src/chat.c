/* Chat templates: the families' turn markup, chosen from the GGUF's Jinja
 * template by its distinctive markers (tandem does not run Jinja). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s) {
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *p = realloc(b->buf, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->buf = p;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n + 1);
    b->len += n;
}

static const char *const k_names[] = {"chatml", "llama3", "gemma", "llama2", "phi3", "deepseek-r1"};

const char *tnd_chat_detect(const char *t) {
    if (!t) return "chatml";
    if (strstr(t, "<|im_start|>")) return "chatml";
    if (strstr(t, "<|start_header_id|>")) return "llama3";
    if (strstr(t, "<start_of_turn>")) return "gemma";
    if (strstr(t, "<\xef\xbd\x9c" "User\xef\xbd\x9c>")) return "deepseek-r1"; /* <｜User｜> */
    if (strstr(t, "<|user|>") && strstr(t, "<|end|>")) return "phi3";
    if (strstr(t, "[INST]")) return "llama2";
    return "chatml";
}

/* SmolLM2's template adds this system turn when the conversation has none;
 * the model was tuned with it. */
#define SMOLLM_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

tnd_status tnd_chat_render(const char *name, const char *tmpl, const tnd_chat_msg *msgs, int n_msgs,
                           bool add_assistant, char **out) {
    if (!name) name = tnd_chat_detect(tmpl);
    int kind = -1;
    for (size_t i = 0; i < TND_ARRAY_LEN(k_names); i++)
        if (!strcmp(name, k_names[i])) kind = (int)i;
    if (kind < 0)
        return tnd_fail(TND_ERR_ARG, "unknown chat template '%s' (known: chatml, llama3, gemma, llama2, phi3, deepseek-r1)",
                        name);
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content) return tnd_fail(TND_ERR_ARG, "chat message %d has no role or content", i);
    sbuf b = {0};
    put(&b, "");
    bool has_system = n_msgs > 0 && !strcmp(msgs[0].role, "system");
    switch (kind) {
    case 0: /* chatml */
        if (!has_system && tmpl && strstr(tmpl, "named SmolLM"))
            put(&b, "<|im_start|>system\n" SMOLLM_SYSTEM "<|im_end|>\n");
        for (int i = 0; i < n_msgs; i++) {
            put(&b, "<|im_start|>");
            put(&b, msgs[i].role);
            put(&b, "\n");
            put(&b, msgs[i].content);
            put(&b, "<|im_end|>\n");
        }
        if (add_assistant) put(&b, "<|im_start|>assistant\n");
        break;
    case 1: /* llama3: BOS comes from the tokenizer's add-BOS flag */
        for (int i = 0; i < n_msgs; i++) {
            put(&b, "<|start_header_id|>");
            put(&b, msgs[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put(&b, msgs[i].content);
            put(&b, "<|eot_id|>");
        }
        if (add_assistant) put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case 2: /* gemma: no system role; it is prepended to the first user turn */
        for (int i = has_system ? 1 : 0; i < n_msgs; i++) {
            put(&b, "<start_of_turn>");
            put(&b, strcmp(msgs[i].role, "assistant") ? "user" : "model");
            put(&b, "\n");
            if (has_system && i == 1) {
                put(&b, msgs[0].content);
                put(&b, "\n\n");
            }
            put(&b, msgs[i].content);
            put(&b, "<end_of_turn>\n");
        }
        if (add_assistant) put(&b, "<start_of_turn>model\n");
        break;
    case 3: /* llama2 */
        for (int i = has_system ? 1 : 0; i < n_msgs; i++) {
            if (!strcmp(msgs[i].role, "assistant")) {
                put(&b, " ");
                put(&b, msgs[i].content);
                put(&b, " </s>");
                continue;
            }
            put(&b, "<s>[INST] ");
            if (has_system && i == 1) {
                put(&b, "<<SYS>>\n");
                put(&b, msgs[0].content);
                put(&b, "\n<</SYS>>\n\n");
            }
            put(&b, msgs[i].content);
            put(&b, " [/INST]");
        }
        break;
    case 4: /* phi3 */
        for (int i = 0; i < n_msgs; i++) {
            put(&b, "<|");
            put(&b, msgs[i].role);
            put(&b, "|>\n");
            put(&b, msgs[i].content);
            put(&b, "<|end|>\n");
        }
        if (add_assistant) put(&b, "<|assistant|>\n");
        break;
    case 5: /* deepseek-r1 distills: <｜User｜>...<｜Assistant｜> */
        if (has_system) put(&b, msgs[0].content);
        for (int i = has_system ? 1 : 0; i < n_msgs; i++) {
            if (!strcmp(msgs[i].role, "assistant")) {
                put(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
                put(&b, msgs[i].content);
                put(&b, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
            } else {
                put(&b, "<\xef\xbd\x9c" "User\xef\xbd\x9c>");
                put(&b, msgs[i].content);
            }
        }
        if (add_assistant) put(&b, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
        break;
    }
    if (b.oom) {
        free(b.buf);
        return tnd_fail(TND_ERR_NOMEM, "out of memory rendering the chat");
    }
    *out = b.buf;
    return TND_OK;
}
