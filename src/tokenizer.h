/* Tokenizer internals exposed for tests (the API is in tandem.h). */
#ifndef TND_TOKENIZER_H
#define TND_TOKENIZER_H

#include <stddef.h>

#include "tandem.h"

/* Pre-tokenizers of byte-level BPE vocabs (tokenizer.ggml.pre names map to these). */
typedef enum tok_pre {
    TOK_PRE_GPT2,           /* gpt-2, mpt, olmo, jais, default */
    TOK_PRE_LLAMA3,         /* llama-bpe, llama3, dbrx, smaug-bpe, chatglm-bpe, falcon3 */
    TOK_PRE_QWEN2,          /* qwen2, deepseek-r1-qwen, stablelm2, megrez, hunyuan */
    TOK_PRE_STARCODER,      /* starcoder, smollm, refact, command-r, codeshell, exaone */
    TOK_PRE_DEEPSEEK_LLM,
    TOK_PRE_DEEPSEEK_CODER,
    TOK_PRE_DEEPSEEK3,      /* deepseek-v3 */
    TOK_PRE_FALCON,
    TOK_PRE_COUNT
} tok_pre;

/* Maps a tokenizer.ggml.pre name to its pre-tokenizer; -1 if unknown. */
int tok_pre_from_name(const char *name);

/* Splits text[0..len) into the pieces pre-tokenizer pre makes. *ends gets
 * the byte offset where each piece ends (malloc'd, caller frees), *n their
 * count; pieces are contiguous and cover the text. */
tnd_status tok_pre_split(tok_pre pre, const char *text, size_t len, size_t **ends, size_t *n);

#endif
