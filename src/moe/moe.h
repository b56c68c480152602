/* MoE routing recording and the next-layer expert predictor (LayerScope's
 * LLaPor, §4.2; docs/ARCHITECTURE.md: The expert predictor).
 *
 *   record.c     the executor's routing hook: per MoE layer and token, the
 *                normed input of the router and the top-k experts; the
 *                routing file (.tndr) that `tandem profile --record-routing`
 *                writes and the trainer reads
 *   pca.c        principal components of a layer's router inputs
 *   predictor.c  per layer l, a small MLP from (PCA(h_l), experts of l) to
 *                scores over l+1's experts; offline training (AdamW),
 *                online fine-tuning, the predictor file (.tndp), and the
 *                held-out evaluation against popularity, same_as_current
 *                and next_router
 *   presched.c   PreSched (§4.3): at a split layer's routing, which of its
 *                CPU-side experts load on demand and how many of the next
 *                layer's to copy ahead
 */
#ifndef TND_MOE_H
#define TND_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "tandem.h"

/* ---- routing records ------------------------------------------------------ */

/* Routing of n_tok tokens through n_layer MoE layers: per layer l, token t,
 * the router input h (n_embd floats) and the chosen k experts. Layer-major,
 * so that a layer's rows are one matrix. */
typedef struct tnd_route_rec {
    int n_layer, n_embd, n_expert, k;
    int64_t cap;        /* tokens each layer can hold */
    int64_t *n_at;      /* [n_layer] tokens recorded so far per layer */
    float *h;           /* [n_layer][cap][n_embd] */
    int32_t *ids;       /* [n_layer][cap][k] */
} tnd_route_rec;

/* A record for up to cap tokens of model m's shape (m must be MoE). */
tnd_status tnd_route_rec_new(const tnd_model *m, int64_t cap, tnd_route_rec **out);
/* The same from explicit dimensions (tests, the loader). */
tnd_status tnd_route_rec_new_dims(int n_layer, int n_embd, int n_expert, int k, int64_t cap, tnd_route_rec **out);
void tnd_route_rec_free(tnd_route_rec *r);
/* Tokens recorded through every layer. */
int64_t tnd_route_rec_n_tok(const tnd_route_rec *r);
/* Appends nt tokens of layer l (h: [nt][n_embd], ids: [nt][k]); tokens past
 * cap are dropped. The executor calls it at every MOE_ROUTE node. */
void tnd_route_rec_add(tnd_route_rec *r, int l, const float *h, const int32_t *ids, int64_t nt);
/* Layer l's row t. */
static inline const float *tnd_route_rec_h(const tnd_route_rec *r, int l, int64_t t) {
    return r->h + ((size_t)l * (size_t)r->cap + (size_t)t) * (size_t)r->n_embd;
}
static inline const int32_t *tnd_route_rec_ids(const tnd_route_rec *r, int l, int64_t t) {
    return r->ids + ((size_t)l * (size_t)r->cap + (size_t)t) * (size_t)r->k;
}
/* The routing file: "TNDROUTE", version, dimensions, then per layer the
 * h rows (f32) and per layer the ids (i32), little-endian. load checks every
 * field, the exact file size, the ids' range and that h is finite. */
tnd_status tnd_route_rec_save(const tnd_route_rec *r, const char *path);
tnd_status tnd_route_rec_load(const char *path, tnd_route_rec **out);
/* Sets (r) or clears (NULL) the recorder of context c: from its next round
 * on, every MOE_ROUTE node appends to r (runtime/context.c: moe/ stays
 * below the executor, which includes this header). */
void tnd_ctx_set_route_rec(tnd_ctx *c, tnd_route_rec *r);
/* Runs n tokens through a CPU context of m, as sequences of TND_ROUTE_SEQ
 * tokens (each from an empty cache; chunks of 64), and records their
 * routing into r; cpu_exact as tnd_ctx_params. */
#define TND_ROUTE_SEQ 512
tnd_status tnd_route_record_tokens(tnd_model *m, const int32_t *toks, int n, bool cpu_exact, tnd_route_rec *r);

/* ---- PCA -------------------------------------------------------------------- */

typedef struct tnd_pca {
    int d, p;           /* input and reduced dimensions */
    float *mean;        /* [d] */
    float *comp;        /* [p][d] orthonormal rows, by decreasing variance */
    float *var;         /* [p] the variance along each (eigenvalues) */
} tnd_pca;

/* Fits p components to n rows x[n][d] (stride: floats between rows) by
 * subspace iteration on the covariance (on the Gram matrix when n <= d, and
 * then at most n-1 components: out->p); deterministic. p <= d, n >= 2. */
tnd_status tnd_pca_fit(const float *x, int64_t n, int d, size_t stride, int p, tnd_pca *out);
void tnd_pca_free(tnd_pca *p);
/* z[p] = whitened projection: comp (x - mean) / sqrt(var + eps). */
void tnd_pca_apply(const tnd_pca *p, const float *x, float *z);

/* ---- the predictor ---------------------------------------------------------- */

enum { TND_GROUP_INPUT = 0, TND_GROUP_MIDDLE = 1, TND_GROUP_OUTPUT = 2, TND_GROUP_COUNT = 3 };
/* The group of predictor l (layer l -> l+1) among n_layer - 1: the first
 * and last quarter are the input and output groups, the rest the middle. */
int tnd_moe_group(int l, int n_layer);
const char *tnd_moe_group_name(int g);

typedef struct tnd_pred_params {
    int pca_io, pca_mid;   /* PCA dimensions, input/output groups and middle (0: n_embd/16 and
                              n_embd/8, the paper's ratios, at least 32 and 64) */
    int hidden;            /* hidden width (0: 2 n_expert, within 64..256) */
    int epochs;            /* offline epochs (0: 30, the paper's) */
    int batch;             /* mini-batch (0: 64) */
    float lr;              /* AdamW learning rate of the input/output groups (0: 3e-3; middle 1.5x) */
    float dropout;         /* dropout after each GELU while training (<0: none; 0: 0.1) */
    float gamma;           /* focal exponent of the input/output groups' loss (0: 2) */
    float focal_w;         /* weight of the focal term (lambda; 0: 1) */
    uint64_t seed;         /* initialization, shuffling and dropout (0: 1) */
    double flop_budget;    /* > 0: fewer epochs (1 at least) where training would take more
                              flops than this (bench on wide models) */
    int pca_rows;          /* > 0: fit the PCA on at most this many tokens, evenly spaced (its
                              cost grows with tokens x width^2, or tokens^2 x width) */
    int verbose;           /* print each predictor's loss per epoch to stderr */
} tnd_pred_params;

typedef struct tnd_predictor tnd_predictor;

tnd_pred_params tnd_pred_default_params(void);
/* Trains one predictor per layer l < n_layer-1 on the first n_train tokens
 * of rec (n_train <= 0: all): PCA of l's router inputs, then AdamW on the
 * layer group's loss. Deterministic for a seed. */
tnd_status tnd_predictor_train(const tnd_route_rec *rec, int64_t n_train, const tnd_pred_params *p,
                               tnd_predictor **out);
void tnd_predictor_free(tnd_predictor *P);
int tnd_predictor_n_layer(const tnd_predictor *P);
/* Scores over layer l+1's experts for a token with router input h of layer l
 * and its experts ids_l (k of them); top: the k best, best first. */
void tnd_predictor_predict(const tnd_predictor *P, int l, const float *h, const int32_t *ids_l, int32_t *top);
/* The mean loss of predictor l over tokens [t0, t1) of rec (tests). */
double tnd_predictor_loss(const tnd_predictor *P, int l, const tnd_route_rec *rec, int64_t t0, int64_t t1);

/* Online fine-tuning (§4.2.3): feeds one observed token of layer l: its
 * router input h, its experts ids_l and the experts layer l+1 then chose.
 * The predictor keeps the last 128 such tokens and the top-k error of its
 * predictions over the last 64; when that error passes the threshold (10%)
 * it runs a few AdamW steps on the 128 and starts a new window. *tuned (may
 * be NULL): whether this call fine-tuned. */
tnd_status tnd_predictor_observe(tnd_predictor *P, int l, const float *h, const int32_t *ids_l,
                                 const int32_t *ids_next, bool *tuned);
/* Fine-tuning cycles run so far, over all layers. */
int64_t tnd_predictor_n_tunes(const tnd_predictor *P);
void tnd_predictor_set_threshold(tnd_predictor *P, float err);

/* The predictor file: "TNDPRED1", version, dimensions, per layer its PCA,
 * network and popularity. load checks every field and the file size. */
tnd_status tnd_predictor_save(const tnd_predictor *P, const char *path);
tnd_status tnd_predictor_load(const char *path, tnd_predictor **out);

/* Top-k hit rate (|predicted ∩ actual| / k, averaged over tokens and
 * predictors): [0] all layers, [1 + g] layer group g; -1 where nothing was
 * measured (next_router without a model). */
typedef struct tnd_pred_eval {
    int64_t n_tok;               /* tokens evaluated */
    double hit[1 + TND_GROUP_COUNT];
    double popularity[1 + TND_GROUP_COUNT];
    double same[1 + TND_GROUP_COUNT];   /* same_as_current */
    double router[1 + TND_GROUP_COUNT]; /* next_router */
} tnd_pred_eval;

/* Evaluates P on tokens [t0, t1) of rec (held out from training) with the
 * paper's baselines: the most popular experts of l+1 in P's training data,
 * the same ids as layer l, and layer l+1's router applied to layer l's
 * router input (m: the model, for its router weights; NULL: not measured). */
tnd_status tnd_predictor_eval(const tnd_predictor *P, const tnd_route_rec *rec, int64_t t0, int64_t t1,
                              const tnd_model *m, tnd_pred_eval *out);
/* Tests: the largest relative gap between the backward pass's gradient and
 * central differences of the loss, over every parameter of a small net of
 * layer group `group` (dropout off); -1 when out of memory. */
double tnd_predictor_grad_check(int group, uint64_t seed);

/* Writes e as a JSON object {"n_tokens", "hit_rate", "baselines"}; each rate
 * an object {"all", "input", "middle", "output"}. */
void tnd_pred_eval_json(const tnd_pred_eval *e, FILE *f);
/* The same as a Markdown table. */
void tnd_pred_eval_print(const tnd_pred_eval *e, FILE *f);

/* ---- PreSched -------------------------------------------------------------- */

#define TND_PRESCHED_MAX 256 /* experts a list may hold */

/* One split layer's lists and costs (presched.c: the paper's names). */
typedef struct tnd_presched_in {
    const int *m_cur; /* pending tokens of the current layer's experts not on the GPU, ascending */
    int n_cur;
    const int *m_next; /* the same of the next layer's predicted experts not on the GPU */
    int n_next;
    const int *m_next2; /* the same two layers ahead (Q4's wider window), or NULL */
    int n_next2;
    int max_load;      /* at most this many of m_cur may load on demand (the room for them) */
    double beta, c0;   /* an expert's CPU time for m tokens: beta m + c0 (s; eq. 2) */
    double t_io;       /* an expert's copy to the GPU (s; > 0, else nothing is decided) */
    double t_g;        /* an expert's GPU compute (s) */
    double t_attn;     /* the layer's time besides its experts, the link's to use (s) */
    double alpha;      /* how long copies already queued hold the link (s) */
    double r_hit;      /* the share of experts copied ahead that their layer used */
    double r_hit2;     /* ... of those copied two layers ahead (Q4's eq. 6) */
} tnd_presched_in;

typedef struct tnd_presched_out {
    int n_load;     /* the last (most loaded) n_load of m_cur: load on demand */
    int n_prefetch; /* the last n_prefetch of m_next: copy ahead */
    double f;       /* eq. 5's prefetch count before rounding (0: no prefetch asked) */
    int n_prefetch2; /* Q4, when GPU_Q holds nothing of m_next: the last n_prefetch2 of m_next2 */
    double f2;       /* ... and its eq. 5 count */
} tnd_presched_out;

void tnd_presched(const tnd_presched_in *in, tnd_presched_out *out);

#endif
