/* Activation memory: a round computes the logits of its last token only
 * (model/forward.c), so the GPU's activation buffers at n_batch 512 hold
 * n_batch rows of the hidden states and one row of logits, never n_batch
 * rows of logits. The bound is computed from the model's hyperparameters:
 * the widths of the per-token activations times n_batch, one row of
 * logits, and the driver's rounding of each buffer. Skips (77) when the
 * default model is absent. */
#include <stdio.h>

#include "check.h"
#include "model_fixture.h"
#include "runtime/runtime.h"
#include "tandem.h"

#define NB 512
#define MIB (1024.0 * 1024.0)

int main(void) {
    char path[4096];
    if (!fx_default_model(path, sizeof path, true)) return 77;
    tnd_model *m = fx_load(path, 1);
    if (!m) return 1;
    const tnd_hparams *hp = &m->hp;

    /* the buffers' sizes: one row of logits per sequence, whatever the chunk */
    size_t sz[A_COUNT];
    for (int nb = 1; nb <= NB; nb *= 8)
        for (int ns = 1; ns <= 4; ns *= 4) {
            tnd_act_sizes(hp, nb, ns, sz);
            const size_t rows = (size_t)(nb < ns ? nb : ns);
            CHECK(sz[A_LOGITS] == sizeof(float) * (size_t)hp->n_vocab * rows, "n_batch %d, %d sequences: %zu bytes "
                  "of logits", nb, ns, sz[A_LOGITS]);
        }

    tnd_ctx_params p = tnd_ctx_default_params();
    p.device = TND_DEVICE_SIM;
    p.hw = "rtx3060-laptop";
    p.n_batch = NB;
    p.placement = "gpu"; /* every weight on the GPU: the output head's scratch counts too */
    tnd_plan *pl = NULL;
    CHECK_ST(tnd_plan_build(m, &p, &pl));
    if (pl) {
        const tnd_layout *l = tnd_plan_layout(pl);
        int64_t E = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
        int64_t used = hp->n_expert ? hp->n_expert_used : 1, ff = hp->n_expert ? hp->n_ff_exp : hp->n_ff;
        /* floats per token: x, h, o; q and attention; k, v; gate and up; MoE: routing and expert outputs */
        int64_t per_tok = 3 * E + 2 * qd + 2 * kvd + 2 * used * ff + 2 /* ids, positions */;
        if (hp->n_expert) per_tok += used * E + hp->n_expert + 4 * used;
        uint64_t one_row = 4ull * (uint64_t)hp->n_vocab;
        uint64_t bound = 4ull * NB * (uint64_t)per_tok + one_row + (uint64_t)A_COUNT * (2u << 20);
        uint64_t all_rows = (uint64_t)NB * one_row;
        printf("n_batch %d: activations %.1f MiB, scratch %.1f MiB; bound %.1f MiB; %d rows of logits would be %.1f MiB\n",
               NB, l->act_gpu / MIB, l->scratch_gpu / MIB, bound / MIB, NB, all_rows / MIB);
        CHECK(l->act_gpu > 0 && l->act_gpu <= bound, "%.1f MiB of activations > bound %.1f MiB", l->act_gpu / MIB,
              bound / MIB);
        /* a model whose vocabulary is wider than its hidden states (all of them): less than
         * the logits of every token alone */
        if ((int64_t)hp->n_vocab > per_tok)
            CHECK(l->act_gpu < all_rows, "%.1f MiB of activations, all-token logits %.1f MiB", l->act_gpu / MIB,
                  all_rows / MIB);
        tnd_plan_free(pl);
    }
    tnd_model_free(m);
    return tc_summary();
}
