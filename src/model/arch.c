/* Supported architectures, as data. Adding one is a row here (plus, if its
 * block does something new, a feature flag the forward pass honours). */
#include <string.h>

#include "model/model.h"

static const tnd_arch archs[] = {
    /* name        neox   bias   qknorm post   gelu   escale moe    swa */
    {"llama",      false, false, false, false, false, false, false, false},
    {"qwen2",      true,  true,  false, false, false, false, false, false},
    {"qwen3",      true,  false, true,  false, false, false, false, false},
    {"qwen3moe",   true,  false, true,  false, false, false, true,  false},
    {"gemma3",     true,  false, true,  true,  true,  true,  false, true},
};

const tnd_arch *tnd_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *tnd_arch_list(void) { return "llama, qwen2, qwen3, qwen3moe, gemma3"; }
