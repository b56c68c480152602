/* Chat templates: the exact rendering of a system+user+assistant+user
 * conversation in every template (expected strings written from each model
 * family's published chat format), detection from template text (the real
 * SmolLM2 template, read from the default model when present, else the copy
 * below), SmolLM2's and Qwen2.5's default system prompts, unknown names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gguf.h"
#include "tandem.h"

/* tokenizer.chat_template of SmolLM2-135M-Instruct (HuggingFaceTB). */
static const char smollm2_tmpl[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}";

/* Qwen2.5-style: an expression after the first "<|im_start|>system" (the
 * tools branch), the default as an escaped literal later. */
static const char qwen25_tmpl[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- endif %}{{- '<|im_end|>\\n' }}{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- endif %}";

static const tnd_chat_msg conv[] = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "What is 2+2?"},
};

static void expect(const char *name, const char *tmpl, const tnd_chat_msg *m, int n, bool add, const char *want) {
    char *got = NULL;
    tnd_status st = tnd_chat_render(name, tmpl, m, n, add, &got);
    CHECK(st == TND_OK, "%s: %s", name ? name : "(detected)", tnd_last_error());
    if (st != TND_OK)
        return;
    CHECK(!strcmp(got, want), "%s:\n got: [%s]\nwant: [%s]", name ? name : "(detected)", got, want);
    free(got);
}

static void test_render(void) {
    expect("chatml", NULL, conv, 4, true,
           "<|im_start|>system\nYou are terse.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n"
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect("chatml", NULL, conv, 4, false,
           "<|im_start|>system\nYou are terse.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n"
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
    expect("llama3", NULL, conv, 4, true,
           "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect("gemma", NULL, conv, 4, true,
           "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n"
           "<start_of_turn>model\nHello!<end_of_turn>\n"
           "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
           "<start_of_turn>model\n");
    expect("gemma", NULL, conv + 1, 1, true, "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    expect("llama2", NULL, conv, 4, true,
           "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
           "<s>[INST] What is 2+2? [/INST]");
    expect("mistral", NULL, conv, 4, true, "[INST] You are terse.\n\nHi [/INST]Hello!</s>[INST] What is 2+2? [/INST]");
    expect("phi3", NULL, conv, 4, true,
           "<|system|>\nYou are terse.<|end|>\n"
           "<|user|>\nHi<|end|>\n"
           "<|assistant|>\nHello!<|end|>\n"
           "<|user|>\nWhat is 2+2?<|end|>\n"
           "<|assistant|>\n");
    expect("deepseek3", NULL, conv, 4, true,
           "You are terse."
           "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
           "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Hello!<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
           "<\xef\xbd\x9cUser\xef\xbd\x9c>What is 2+2?"
           "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
    /* R1's reasoning is dropped from past assistant turns; its updated
     * template opens the answer with <think>. */
    const tnd_chat_msg r1[] = {{"user", "Hi"}, {"assistant", "<think>\nhm\n</think>Hello!"}, {"user", "Bye"}};
    expect("deepseek3",
           "{% if add_generation_prompt %}{{'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\\n'}}{% endif %}",
           r1, 3, true,
           "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Hello!"
           "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
           "<\xef\xbd\x9cUser\xef\xbd\x9c>Bye<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>\n");
    expect("chatml", NULL, NULL, 0, false, "");
}

static void test_default_system(const char *tmpl) {
    /* SmolLM2: no system message -> its default one, detected by name NULL */
    expect(NULL, tmpl, conv + 1, 1, true,
           "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* with a system message the default is not added */
    expect(NULL, tmpl, conv, 2, true,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Qwen2.5: the escaped literal, not the expression */
    expect(NULL, qwen25_tmpl, conv + 1, 1, true,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* no template text: plain chatml, no default */
    expect(NULL, NULL, conv + 1, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

static void test_detect(const char *smol) {
    CHECK(!strcmp(tnd_chat_detect(smol), "chatml"), "smollm2 -> %s", tnd_chat_detect(smol));
    CHECK(!strcmp(tnd_chat_detect(NULL), "chatml"), "NULL");
    CHECK(!strcmp(tnd_chat_detect(qwen25_tmpl), "chatml"), "qwen2.5");
    CHECK(!strcmp(tnd_chat_detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"),
                  "llama3"), "llama3");
    CHECK(!strcmp(tnd_chat_detect("{{ '<start_of_turn>' + role + '\n' }}"), "gemma"), "gemma");
    CHECK(!strcmp(tnd_chat_detect("{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}"), "deepseek3"),
          "deepseek3");
    CHECK(!strcmp(tnd_chat_detect("{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}"), "llama2"), "llama2");
    CHECK(!strcmp(tnd_chat_detect("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), "mistral"), "mistral");
    CHECK(!strcmp(tnd_chat_detect("{{'<|user|>' + '\n' + message['content'] + '<|end|>'}}"), "phi3"), "phi3");
    CHECK(!strcmp(tnd_chat_detect("something else"), "chatml"), "fallback");
}

static void test_errors(void) {
    char *out = NULL;
    tnd_status st = tnd_chat_render("vicuna", NULL, conv, 4, true, &out);
    CHECK(st == TND_ERR_ARG && out == NULL, "unknown name: status %d", st);
    const char *e = tnd_last_error();
    CHECK(strstr(e, "vicuna") && strstr(e, "chatml") && strstr(e, "llama3") && strstr(e, "gemma") &&
              strstr(e, "phi3") && strstr(e, "deepseek3"),
          "message should list the known names: %s", e);
    const tnd_chat_msg bad[] = {{"user", NULL}};
    CHECK(tnd_chat_render("chatml", NULL, bad, 1, true, &out) == TND_ERR_ARG, "NULL content");
    const tnd_chat_msg tool[] = {{"tool", "x"}};
    CHECK(tnd_chat_render("gemma", NULL, tool, 1, true, &out) == TND_ERR_ARG, "gemma has no tool role");
    CHECK(tnd_chat_render("chatml", NULL, conv, -1, true, &out) == TND_ERR_ARG, "negative count");
}

/* The real template from the default model, if it is there. */
static char *model_template(void) {
    const char *src = getenv("TND_SRC");
    if (!src)
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src);
    tnd_gguf *g = NULL;
    if (tnd_gguf_open(path, &g) != TND_OK)
        return NULL;
    char *t = gguf_get_cstr(g, "tokenizer.chat_template");
    tnd_gguf_free(g);
    return t;
}

int main(void) {
    test_render();
    test_default_system(smollm2_tmpl);
    test_detect(smollm2_tmpl);
    char *real = model_template();
    if (real) {
        CHECK(!strcmp(real, smollm2_tmpl), "the embedded copy differs from the model's template");
        test_default_system(real);
        test_detect(real);
        printf("checked against the template read from the default model\n");
        free(real);
    } else {
        printf("default model not found: embedded template copy only\n");
    }
    test_errors();
    return tc_summary();
}
