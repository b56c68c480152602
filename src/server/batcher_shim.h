/* Temporary: the continuous-batching scheduler's API (tnd_batcher_*) as the
 * lead is adding it to include/tandem.h, over tnd_seq_*, so the server can
 * be built and tested before it lands. Deleted by the merge that brings the
 * real one. */
#ifndef TND_SERVER_BATCHER_SHIM_H
#define TND_SERVER_BATCHER_SHIM_H

#include "tandem.h"

typedef struct tnd_batcher tnd_batcher;
typedef enum tnd_finish { TND_FINISH_LENGTH, TND_FINISH_EOG, TND_FINISH_STOP, TND_FINISH_CANCEL, TND_FINISH_ERROR } tnd_finish;
typedef struct tnd_request {
    const int32_t *prompt;
    int n_prompt;
    int max_tokens;
    tnd_sampler_params sampling;
    bool (*on_token)(void *user, int32_t token);
    void (*on_done)(void *user, tnd_finish why, int n_prompt, int n_gen);
    void *user;
} tnd_request;
typedef struct tnd_batcher_stats {
    int queued, running, max_queue, n_seq_max;
    int64_t kv_rows_used, kv_rows_total;
    uint64_t n_done, n_prompt_tokens, n_gen_tokens, n_rounds;
    double decode_s;
} tnd_batcher_stats;
tnd_status tnd_batcher_new(tnd_ctx *c, int max_queue, tnd_batcher **out);
void tnd_batcher_free(tnd_batcher *b);
tnd_status tnd_batcher_submit(tnd_batcher *b, const tnd_request *r, uint64_t *id);
void tnd_batcher_cancel(tnd_batcher *b, uint64_t id);
tnd_status tnd_batcher_step(tnd_batcher *b);
bool tnd_batcher_wait(tnd_batcher *b, double timeout_s);
void tnd_batcher_stats_get(tnd_batcher *b, tnd_batcher_stats *s);

#endif
