/* tandem — hybrid CPU-GPU inference for GGUF language models.
 *
 * The one public header. Conventions (docs/ARCHITECTURE.md):
 *   - every symbol starts with tnd_; handles are opaque;
 *   - tnd_x_new / tnd_x_free pairs; *_free(NULL) is a no-op;
 *   - a function that can fail returns tnd_status and leaves a message that
 *     tnd_last_error() returns on the same thread; outputs are written only on
 *     success; the library never exits the process.
 */
#ifndef TANDEM_H
#define TANDEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TND_VERSION "0.1.0"
/* The most sequences a context may hold (tnd_ctx_params.n_seq_max). */
#define TND_SEQ_MAX 256

typedef enum tnd_status {
    TND_OK = 0,
    TND_ERR_IO,          /* open/read/write/mmap failed */
    TND_ERR_FORMAT,      /* malformed input file or data */
    TND_ERR_UNSUPPORTED, /* valid, but not supported (architecture, type, ...) */
    TND_ERR_NOMEM,       /* an allocation failed or a budget is too small */
    TND_ERR_ARG,         /* bad argument from the caller */
    TND_ERR_LIMIT,       /* a configured limit was hit (context length, ...) */
    TND_ERR_BACKEND,     /* the CUDA runtime or another backend failed */
    TND_ERR_INTERNAL,    /* a bug in tandem */
} tnd_status;

/* Message of the last failure on this thread ("" if none). Valid until the
 * next failing call on this thread. */
const char *tnd_last_error(void);
/* Short stable name of a status, e.g. "format". */
const char *tnd_status_name(tnd_status st);

/* ---- GGUF files ---------------------------------------------------------- */

typedef struct tnd_gguf tnd_gguf;

/* Opens and validates a GGUF v2/v3 file (mmapped, read-only). On failure the
 * message names the file, the violated rule and the byte offset. */
tnd_status tnd_gguf_open(const char *path, tnd_gguf **out);
void tnd_gguf_free(tnd_gguf *g);

/* ---- tokenizer ----------------------------------------------------------- */

typedef struct tnd_tokenizer tnd_tokenizer;

/* Builds the tokenizer described by a GGUF's tokenizer.* metadata (works on
 * vocab-only files). */
tnd_status tnd_tokenizer_new(const tnd_gguf *g, tnd_tokenizer **out);
void tnd_tokenizer_free(tnd_tokenizer *t);

/* Tokenizes len bytes of text. add_special: prepend BOS / append EOS as the
 * vocab's flags say. parse_special: recognise special/control token texts
 * (e.g. "<|im_start|>") in the input. *ids is malloc'd; caller frees. */
tnd_status tnd_tokenize(const tnd_tokenizer *t, const char *text, size_t len,
                        bool add_special, bool parse_special,
                        int32_t **ids, size_t *n_ids);
/* Bytes of one token's text as it appears in output (byte tokens decoded,
 * SPM's U+2581 as space, BPE byte-level mapping undone). Control tokens give
 * "" unless render_special. Returns the byte count; buf may be short (the
 * count is still returned, nothing beyond cap written). */
size_t tnd_token_to_piece(const tnd_tokenizer *t, int32_t id, bool render_special,
                          char *buf, size_t cap);
int32_t tnd_tokenizer_n_vocab(const tnd_tokenizer *t);
int32_t tnd_tokenizer_bos(const tnd_tokenizer *t); /* -1 if none */
int32_t tnd_tokenizer_eos(const tnd_tokenizer *t); /* -1 if none */
/* True for end-of-generation tokens (EOS, EOT, <|im_end|>, <end_of_turn>...). */
bool tnd_tokenizer_is_eog(const tnd_tokenizer *t, int32_t id);
/* Looks up the id of an exact token text; -1 if absent. */
int32_t tnd_tokenizer_find(const tnd_tokenizer *t, const char *text);
/* Streaming detokenization: the length of the longest prefix of buf[0..len)
 * that does not end inside a UTF-8 sequence more bytes could still complete;
 * print that much now and keep the rest (at most 3 bytes) for the next piece.
 * Invalid bytes count as complete. */
size_t tnd_utf8_complete(const char *buf, size_t len);

/* ---- CUDA devices and this build ---------------------------------------- */

/* Number of usable CUDA devices; 0 when built without CUDA, when there is no
 * driver or no device. Never fails. */
int tnd_cuda_device_count(void);
/* The CUDA architectures this build carries code for, as configured
 * (CMAKE_CUDA_ARCHITECTURES, space-separated, e.g. "90-real 90-virtual");
 * "" when built without CUDA. */
const char *tnd_cuda_build_archs(void);

typedef struct tnd_cuda_device_info {
    char name[256];
    int arch;            /* the device's compute capability, 100*major + 10*minor: 900 = sm_90 */
    int code_arch;       /* the architecture of the code this build runs on it: arch when the
                            build has code for it; lower when the driver compiled an older PTX,
                            and then tandem leaves the kernels that need newer features off
                            (slower; rebuild with -DCMAKE_CUDA_ARCHITECTURES=arch/10) */
    uint64_t mem_total;  /* bytes */
    uint64_t mem_free;   /* bytes free now */
} tnd_cuda_device_info;

/* Describes CUDA device `dev` (0 .. tnd_cuda_device_count() - 1).
 * TND_ERR_UNSUPPORTED without CUDA, TND_ERR_ARG for no such device,
 * TND_ERR_BACKEND if the runtime fails. */
tnd_status tnd_cuda_device_get(int dev, tnd_cuda_device_info *out);

/* ---- models and contexts ------------------------------------------------- */

typedef struct tnd_model tnd_model;
typedef struct tnd_ctx tnd_ctx;
typedef struct tnd_plan tnd_plan;

typedef struct tnd_model_params {
    int n_threads;           /* CPU threads; 0 = physical cores */
    bool verbose;            /* print the hyperparameters and what the load checked (stderr) */
    bool check_weights;      /* scan every weight for NaN and Inf (reads the whole file);
                                without it small tensors are scanned and big ones sampled */
} tnd_model_params;

typedef enum tnd_device {
    TND_DEVICE_CPU = 0,      /* everything on the CPU */
    TND_DEVICE_CUDA = 1,     /* the CPU and a CUDA GPU, slices placed by `placement` */
    TND_DEVICE_SIM = 2,      /* the CPU and SimGPU, a GPU simulated on CPU threads (tests, studies) */
} tnd_device;

typedef struct tnd_ctx_params {
    int n_ctx;               /* context length in tokens (of each sequence); 0 = min(model, 4096) */
    int n_batch;             /* tokens per round (a prefill chunk, or a batched round of several
                                sequences' tokens); 0 = 512; at most n_ctx x n_seq_max (a
                                sequence's prefill chunk: at most n_ctx) */
    int n_seq_max;           /* sequences the context holds at once (tnd_seq_new), each with its
                                own n_ctx rows of KV cache in every layer, counted in the plan's
                                memory; 0 = 1, at most TND_SEQ_MAX */
    tnd_device device;
    uint64_t vram_budget;    /* bytes the GPU may hold in all (weights, KV
                                cache, scratch); 0 = driver's free memory less a margin
                                (SimGPU: the --hw profile's memory, else unlimited) */
    const char *placement;   /* where weight slices run, with a GPU: NULL or "static" (the
                                default: the machine is measured once, cached, then the
                                knapsack placement), "layer" (whole layers from the last
                                while they fit the budget), "gpu", "cpu", "random:SEED", or
                                a placement file */
    const char *promote;     /* CPU slices copied to the GPU for a round: "none", "all",
                                "auto" (those ATSInfer's Algorithm 2 finds pay, chosen before
                                each round, decode and prefill), "random:SEED" (or "promote"
                                lines of a file); NULL: "auto" for the static and layer
                                placements with a GPU, else "none" */
    const char *hw;          /* SimGPU timing profile: a built-in name or a file; NULL = none */
    bool verbose;            /* print the memory layout and per-round statistics */
    bool reprofile;          /* static placement: measure the machine anew even if a
                                cached perf DB exists (tandem profile) */
    bool cpu_exact;          /* CPU matmuls with f32 activations (exact, slower) instead of
                                Q8-quantized activations and integer dots (the default);
                                tnd_ctx_default_params sets it when TND_CPU_INT8=0 */
    bool predict;            /* tnd_plan_build: fetch the perf DB for the predicted times even
                                when the placement needs none (it may profile the machine) */
    bool no_adapt;           /* promote=auto from the perf DB's times alone (ATSInfer's static
                                policy); default: corrected by the times measured while running,
                                re-deciding when the machine's load changes (Algorithm 3) */
    const char *trace;       /* tnd_ctx_new: write every round the context runs to this file as
                                a Chrome/Perfetto trace (JSON: CPU ops, GPU ops, copies, syncs,
                                the plan's predicted round times), completed by tnd_ctx_free;
                                NULL = none */
    unsigned moe_ablate;     /* MoE mechanisms switched off, for ablation studies (TND_ABLATE_*,
                                or'ed; bench --ablate); 0 = all on */
    bool moe_presched;       /* MoE: LayerScope's PreSched decides, at each split layer's routing,
                                which CPU-side experts load to the GPU on demand and how many of
                                the next layer's are copied ahead (or, when its GPU queue holds
                                none of those, of the layer after's); false (default): nothing
                                loads on demand and the balance (Algorithm 2 a layer ahead) sets
                                the count (docs/DECISIONS.md, "PreSched: measured, opt-in") */
} tnd_ctx_params;

/* tnd_ctx_params.moe_ablate: what an MoE context runs without. */
enum {
    TND_ABLATE_HOT = 1u << 0,      /* no hot-expert table: the placement takes every expert as equally
                                      popular, and the live table does not re-place them */
    TND_ABLATE_PREFETCH = 1u << 1, /* no experts copied a layer ahead: what is not resident runs
                                      on the CPU (greedy, layer by layer) */
    TND_ABLATE_FIXED2 = 1u << 2,   /* a layer ahead, the two most chosen predicted experts, whatever
                                      the link and the CPU take (HybriMoE-like), not the balance */
    TND_ABLATE_SYNC = 1u << 3,     /* weight copies synchronous: the host waits for each as it is
                                      queued, before the CPU's work goes on (GPU kernels queued
                                      before it still run beside it) */
};

tnd_model_params tnd_model_default_params(void);
tnd_ctx_params tnd_ctx_default_params(void);

/* Loads a model: validates the GGUF, checks the architecture, the
 * hyperparameters (eps > 0, rope base > 0, context length > 0) and tensor
 * shapes, checks weights for NaN and Inf (see check_weights), builds the
 * tokenizer. Weights stay mmapped. A damaged file fails with TND_ERR_FORMAT. */
tnd_status tnd_model_load(const char *path, const tnd_model_params *p, tnd_model **out);
void tnd_model_free(tnd_model *m);
const tnd_tokenizer *tnd_model_tokenizer(const tnd_model *m);
int32_t tnd_model_n_vocab(const tnd_model *m);
int32_t tnd_model_n_ctx_train(const tnd_model *m);
/* The chat template text stored in the GGUF, or NULL. */
const char *tnd_model_chat_template(const tnd_model *m);
/* One-line description, e.g. "llama 135M Q4_1, 30 layers". */
const char *tnd_model_desc(const tnd_model *m);

/* A plan: where every weight slice runs (the placement), what the GPU and
 * the host hold (the memory layout) and, when a perf DB is at hand, the
 * predicted round times; decided from the model, the perf DB (cached, or
 * measured now), the GPU budget and the placement policy of p, without
 * allocating weights, caches or buffers. Fails when the placement does not
 * fit the budget; a budget too small for any GPU placement gives a CPU plan
 * (with a warning). */
tnd_status tnd_plan_build(tnd_model *m, const tnd_ctx_params *p, tnd_plan **out);
void tnd_plan_free(tnd_plan *pl);
/* The plan as text: the placement per layer and tensor role, the memory
 * breakdown and the predictions (tandem plan's table). */
void tnd_plan_print(const tnd_plan *pl, FILE *f);
/* The same as one JSON object (and a newline); model: the path it names. */
void tnd_plan_print_json(const tnd_plan *pl, const char *model, FILE *f);
/* The placement as an SVG picture (layers x tensor roles) at path. */
tnd_status tnd_plan_write_svg(const tnd_plan *pl, const char *path);
/* The placement as a placement file (for tnd_ctx_params.placement). */
tnd_status tnd_plan_write_placement(const tnd_plan *pl, FILE *f);
/* The short summary run --dry-run prints (model, placement, memory), as
 * text (malloc'd). */
tnd_status tnd_plan_text(const tnd_plan *pl, char **text);

/* A context running plan pl (copied: pl may be freed). Fails when the GPU
 * budget no longer holds the plan's layout. */
tnd_status tnd_ctx_new_from_plan(const tnd_plan *pl, tnd_ctx **out);
/* tnd_plan_build then tnd_ctx_new_from_plan, on the same GPU backend (so a
 * budget taken from the driver's free memory is read once). */
tnd_status tnd_ctx_new(tnd_model *m, const tnd_ctx_params *p, tnd_ctx **out);
/* Runs c under plan pl (copied) from the next round on: everything laid
 * out for the old plan is freed, the new layout allocated and uploaded, and
 * the KV cache's n_past positions moved to where pl keeps each layer's;
 * the tokens that follow are those the old plan would have given. pl must
 * be for c's model, context length and chunk size, and for its device (a
 * CPU plan for a CPU context, a GPU plan for a GPU one). On failure c can
 * only be freed. */
tnd_status tnd_ctx_set_plan(tnd_ctx *c, const tnd_plan *pl);
/* tnd_plan_build then tnd_plan_text: what tnd_ctx_new would place and
 * allocate. */
tnd_status tnd_ctx_plan_text(tnd_model *m, const tnd_ctx_params *p, char **text);
void tnd_ctx_free(tnd_ctx *c);
/* Parses a --vram-budget value: a size ("6G", "4523M", "1.5GiB", "123456"
 * bytes) or a percentage of the model's weight bytes ("50%"). Refused with
 * TND_ERR_ARG and a message: 0, a plain number with a fraction ("0.4": a
 * share or a size?), 1024T or more, anything malformed. m may be NULL to
 * check the text alone (a percentage then gives 0). */
tnd_status tnd_parse_budget(const char *s, const tnd_model *m, uint64_t *out);
/* Bytes of the model's weights (all tensors). */
uint64_t tnd_model_weight_bytes(const tnd_model *m);
/* Context length (tokens the KV cache holds, per sequence). */
int tnd_ctx_n_ctx(const tnd_ctx *c);
/* Number of tokens in the KV cache (sequence 0's). */
int tnd_ctx_n_past(const tnd_ctx *c);
/* Times the context has re-decided its promotions because the measured
 * speeds moved away from those it planned with (Algorithm 3; 0 with no_adapt). */
uint64_t tnd_ctx_n_replans(const tnd_ctx *c);
/* Drops the KV cache of sequence 0 past n tokens (n <= n_past). */
tnd_status tnd_ctx_truncate(tnd_ctx *c, int n);
/* Appends n tokens to sequence 0 (prefill in chunks of n_batch) and writes
 * the logits of the last one (n_vocab floats) to logits (may be NULL). Fails
 * with TND_ERR_LIMIT when the context would overflow, leaving the cache
 * unchanged, and with TND_ERR_ARG while sequence 0 has tokens queued
 * (tnd_seq_feed). */
tnd_status tnd_ctx_eval(tnd_ctx *c, const int32_t *tokens, int n, float *logits);

/* ---- sequences: many users of one context -------------------------------
 *
 * A context holds up to n_seq_max sequences, each with its own positions
 * and its own slot of n_ctx rows in every layer's KV cache (on the side the
 * plan runs that layer's attention). Feed each sequence tokens, then
 * tnd_ctx_step runs one round over the tokens queued in all of them: every
 * weight is read once for the round, attention runs per sequence. Sequence
 * 0 is the one tnd_ctx_eval evaluates; the two APIs may be mixed as long as
 * sequence 0 has no queued tokens when tnd_ctx_eval runs. */

/* Makes a sequence (empty) in a free slot; *seq: its id, 0 .. n_seq_max-1.
 * TND_ERR_LIMIT when every slot is in use (back-pressure: free one, or make
 * the context with a larger n_seq_max). */
tnd_status tnd_seq_new(tnd_ctx *c, int *seq);
/* Queues n tokens for sequence seq (evaluated by the following steps);
 * the logits of its previous tokens are no longer readable. TND_ERR_ARG
 * for an unknown or freed sequence or a token id out of range,
 * TND_ERR_LIMIT when its n_ctx rows could not hold them (nothing queued). */
tnd_status tnd_seq_feed(tnd_ctx *c, int seq, const int32_t *tokens, int n);
/* One round over the queued tokens of every sequence: at most n_batch
 * tokens, one at least from each sequence with tokens queued (as many as
 * fit, the first offered in turn), then the rest of each queue in sequence
 * order while the budget lasts. A sequence whose queue this round empties
 * gets the logits of its last token (tnd_seq_logits). Nothing queued: does
 * nothing. On failure no sequence advances. */
tnd_status tnd_ctx_step(tnd_ctx *c);
/* Tokens queued for seq and not yet evaluated (-1: no such sequence). */
int tnd_seq_n_queued(const tnd_ctx *c, int seq);
/* Tokens in seq's KV cache (-1: no such sequence). */
int tnd_seq_n_past(const tnd_ctx *c, int seq);
/* Drops seq's KV cache past its first n tokens (0 <= n <= n_past) and its
 * queued tokens, so the tokens fed next continue at position n: a prompt
 * that begins with what seq holds evaluates only the rest. Its logits are
 * no longer readable. TND_ERR_ARG for an unknown sequence or n out of
 * range (nothing changed). */
tnd_status tnd_seq_truncate(tnd_ctx *c, int seq, int n);
/* The n_vocab logits after seq's last fed token, once a step has
 * evaluated it; NULL before that, or for no such sequence. Valid until the
 * next step or feed of seq. */
const float *tnd_seq_logits(const tnd_ctx *c, int seq);
/* Removes sequence seq: its slot becomes free, its queue is dropped, the
 * other sequences are untouched. TND_ERR_ARG for an unknown or freed one. */
tnd_status tnd_seq_free(tnd_ctx *c, int seq);
/* The context's sequence slots (tnd_ctx_params.n_seq_max). */
int tnd_ctx_n_seq_max(const tnd_ctx *c);

/* ---- sampling ------------------------------------------------------------ */

typedef struct tnd_sampler tnd_sampler;

typedef struct tnd_sampler_params {
    float temp;              /* <= 0: greedy */
    int top_k;               /* 0: off */
    float top_p;             /* 1: off */
    float min_p;             /* 0: off */
    float repeat_penalty;    /* 1: off */
    int repeat_last_n;       /* tokens considered by the penalty */
    uint64_t seed;
} tnd_sampler_params;

tnd_sampler_params tnd_sampler_default_params(void);
tnd_status tnd_sampler_new(const tnd_sampler_params *p, tnd_sampler **out);
void tnd_sampler_free(tnd_sampler *s);
/* Picks a token from logits (modified in place); remembers it for the
 * repetition penalty. */
int32_t tnd_sampler_sample(tnd_sampler *s, float *logits, int32_t n_vocab);
/* Feeds a token the sampler did not pick (the prompt), for the penalty. */
void tnd_sampler_accept(tnd_sampler *s, int32_t tok);

/* ---- continuous batching: requests over the sequences of a context -------
 *
 * A batcher runs requests (a prompt, how many tokens to generate, how to
 * sample) over the sequence slots of one context: a step admits queued
 * requests into free slots, runs one round over every running sequence
 * (prefill chunks and decode tokens together, under the context's n_batch
 * tokens: tnd_ctx_step), samples each sequence that got logits, and retires
 * the ones that finished, giving their slot to the queue.
 * A finished request's slot keeps its KV rows until a request needs the
 * slot (prompt caching; tnd_batcher_set_prompt_cache turns it off): a
 * prompt that continues what a kept slot holds (a chat's next turn) takes
 * that slot and evaluates only the rest, its last 16 tokens at least;
 * other prompts take a free slot, else the least recently used kept one,
 * keeping what they share with it. The logits are a fresh evaluation's up
 * to float rounding: the same bits in the CPU's exact mode; with Q8
 * activations or a GPU, near-ties may sample differently, as they may when
 * other requests share the rounds. A request cancelled while it runs keeps
 * the rows evaluated so far (its queue dropped).
 * A request waits in the queue while every slot is taken; a full queue
 * refuses more (TND_ERR_LIMIT): back-pressure, never a failure inside.
 * Submit, cancel, wait and stats may be called from any thread; step from
 * one thread at a time, which is where the callbacks run. */

typedef struct tnd_batcher tnd_batcher;

typedef enum tnd_finish {
    TND_FINISH_LENGTH = 0, /* max_tokens generated, or the sequence's n_ctx rows are full */
    TND_FINISH_EOG = 1,    /* the model ended its turn (an end-of-generation token; not passed to on_token) */
    TND_FINISH_STOP = 2,   /* on_token returned false (a stop string, say) */
    TND_FINISH_CANCEL = 3, /* tnd_batcher_cancel or tnd_batcher_free */
    TND_FINISH_ERROR = 4,  /* a round failed (tnd_batcher_step returned its error) */
} tnd_finish;

typedef struct tnd_request {
    const int32_t *prompt; /* copied by submit; at least one token, fewer than n_ctx */
    int n_prompt;
    int max_tokens;        /* tokens to generate at most (> 0) */
    tnd_sampler_params sampling;
    /* On the stepping thread, for each generated token; false ends the
     * request (TND_FINISH_STOP) after this token. May be NULL. */
    bool (*on_token)(void *user, int32_t token);
    /* Exactly once for each accepted request, on the stepping thread (or in
     * tnd_batcher_free); the batcher does not touch user after it. May be NULL. */
    void (*on_done)(void *user, tnd_finish why, int n_prompt, int n_gen);
    void *user;
} tnd_request;

typedef struct tnd_batcher_stats {
    int queued, running;        /* requests waiting for a slot / in a slot */
    int max_queue, n_seq_max;
    int64_t kv_rows_used;       /* KV rows (tokens) the running sequences hold */
    int64_t kv_rows_total;      /* n_seq_max * n_ctx */
    uint64_t n_done;            /* requests finished, any reason */
    uint64_t n_prompt_tokens;   /* prompt tokens evaluated */
    uint64_t n_prompt_reused;   /* prompt tokens not evaluated: a kept slot held them */
    uint64_t n_gen_tokens;      /* tokens generated */
    uint64_t n_rounds;
    double round_s;             /* time inside rounds */
    double decode_s;            /* time inside rounds that generated tokens: decode_s / n_gen_rounds is the TPOT */
    uint64_t n_gen_rounds;      /* rounds that generated at least one token */
} tnd_batcher_stats;

/* A batcher over c, whose sequences it then owns (do not make, feed or
 * evaluate any on c while it lives; TND_ERR_ARG when one is in use now).
 * max_queue: requests waiting at most (> 0). */
tnd_status tnd_batcher_new(tnd_ctx *c, int max_queue, tnd_batcher **out);
/* Ends every request with TND_FINISH_CANCEL (its on_done runs here), frees
 * their sequences and the batcher; not the context. */
void tnd_batcher_free(tnd_batcher *b);
/* Queues a request; *id (may be NULL) names it for tnd_batcher_cancel.
 * TND_ERR_LIMIT: the queue is full. TND_ERR_ARG: no prompt, a token out of
 * range, max_tokens <= 0, or a prompt the context cannot hold (the message
 * has the numbers). Nothing is queued on failure. */
tnd_status tnd_batcher_submit(tnd_batcher *b, const tnd_request *r, uint64_t *id);
/* Ends request id with TND_FINISH_CANCEL at the next step, whether queued
 * or running; an unknown or finished id: nothing. */
void tnd_batcher_cancel(tnd_batcher *b, uint64_t id);
/* Retires cancelled requests, admits queued ones into free slots, runs one
 * round, samples, calls back, retires finished ones. Nothing to do: returns
 * at once. A failed round ends every running request with
 * TND_FINISH_ERROR and returns the error; queued ones stay queued. */
tnd_status tnd_batcher_step(tnd_batcher *b);
/* Blocks until a request is queued or running (true) or timeout_s passes
 * (false). */
bool tnd_batcher_wait(tnd_batcher *b, double timeout_s);
/* Wakes every tnd_batcher_wait now (a server shutting down). */
void tnd_batcher_wake(tnd_batcher *b);
void tnd_batcher_stats_get(tnd_batcher *b, tnd_batcher_stats *s);
/* Prompt caching on (the default) or off: off, a finished request's slot
 * is freed at once and every prompt is evaluated whole. From the stepping
 * thread, between steps. */
void tnd_batcher_set_prompt_cache(tnd_batcher *b, bool on);

/* ---- generation ---------------------------------------------------------- */

/* The model a context runs. */
tnd_model *tnd_ctx_model(const tnd_ctx *c);

typedef enum tnd_stop_reason {
    TND_STOP_LENGTH = 0,     /* n_predict tokens generated */
    TND_STOP_EOG,            /* an end-of-generation token (not shown) */
    TND_STOP_STRING,         /* a stop string (cut from the text, not shown) */
    TND_STOP_CONTEXT,        /* the context is full */
    TND_STOP_CANCELLED,      /* the callback returned false */
} tnd_stop_reason;

typedef struct tnd_generate_params {
    int n_predict;                  /* tokens to generate at most; < 0: until a stop */
    tnd_sampler_params sampling;    /* tnd_sampler_default_params() by default */
    const char *const *stop;        /* n_stop stop strings (may be NULL) */
    int n_stop;
    bool parse_special;             /* special-token texts in the prompt (chat markup)
                                       are those tokens; BOS is added as the vocab says
                                       when the context is empty */
    bool with_logits;               /* each event carries the logits (a copy per token) */
    tnd_sampler *sampler;           /* NULL: one made from `sampling` for this call; else
                                       this one (its repetition history spans calls) */
} tnd_generate_params;

/* One generated token, as tnd_generate hands it to the callback. */
typedef struct tnd_token_event {
    int32_t token;
    int index;                      /* 0, 1, ... */
    const char *text;               /* text that became final with this token (UTF-8
                                       complete, past any stop string it could start);
                                       may be empty, not NUL-terminated */
    size_t len;
    const float *logits;            /* with_logits: the n_vocab logits the token was
                                       sampled from; else NULL */
} tnd_token_event;

/* Returns false to cancel the generation (then TND_STOP_CANCELLED). */
typedef bool (*tnd_token_cb)(const tnd_token_event *ev, void *user);

typedef struct tnd_generate_result {
    int n_prompt, n_gen;            /* tokens evaluated from the prompt, tokens generated */
    double t_prompt, t_gen;         /* seconds */
    tnd_stop_reason stop;
} tnd_generate_result;

tnd_generate_params tnd_generate_default_params(void);
/* Appends the prompt to the context (after what it holds: a chat continues),
 * then samples up to p->n_predict tokens, calling on_token (may be NULL)
 * once per token; the last call's text ends the output. The final text is
 * the concatenation of every event's text. Each token but the last is fed
 * back: the context then holds the prompt and all generated tokens but the
 * last (sampled, never evaluated), so a caller that continues puts that
 * token's text at the start of its next prompt. Fails like
 * tnd_ctx_eval (TND_ERR_LIMIT: the prompt does not fit), and with
 * TND_ERR_FORMAT when a logit comes out NaN or Inf (damaged weights); res
 * (may be NULL) is filled either way. */
tnd_status tnd_generate(tnd_ctx *ctx, const char *prompt, const tnd_generate_params *p, tnd_token_cb on_token,
                        void *user, tnd_generate_result *res);
/* The same from tokens (n >= 1) instead of text: for callers that tokenize
 * themselves, e.g. to reuse a cached prefix of a conversation. */
tnd_status tnd_generate_tokens(tnd_ctx *ctx, const int32_t *tokens, size_t n, const tnd_generate_params *p,
                               tnd_token_cb on_token, void *user, tnd_generate_result *res);

/* ---- chat templates ------------------------------------------------------ */

typedef struct tnd_chat_msg {
    const char *role;        /* "system", "user", "assistant" */
    const char *content;
} tnd_chat_msg;

/* Renders messages with the named template ("chatml", "llama3", "gemma", ...)
 * or, if name is NULL, the one detected from the GGUF template text (tmpl may
 * be NULL: then chatml; a text that matches no known format:
 * TND_ERR_UNSUPPORTED, name one). add_assistant: end with the assistant's
 * turn opened. *out is malloc'd. Unknown name: TND_ERR_ARG listing the known ones. */
tnd_status tnd_chat_render(const char *name, const char *tmpl,
                           const tnd_chat_msg *msgs, int n_msgs,
                           bool add_assistant, char **out);
/* Name of the template detected from GGUF template text ("chatml" when
 * tmpl is NULL or matches no known format). */
const char *tnd_chat_detect(const char *tmpl);

#ifdef __cplusplus
}
#endif
#endif
