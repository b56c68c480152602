/* tandem synth: writes a random-weight GGUF with the exact tensor shapes and
 * a Q4_K_M-like type mix of a real model (model/shapes.c), so speed can be
 * measured without downloading tens of GB.
 *
 * Weights are produced block by block straight into their quantized bytes
 * (no float tensor ever exists), on worker threads that run ahead of the
 * writer through a ring of pieces, and streamed through gguf_add_tensor_fill:
 * memory stays at a few MiB per thread whatever the model size. Every block
 * is a pure function of (seed, tensor, block), so the file does not depend on
 * the number of threads.
 *
 * Scales (why the output stays finite and routing has structure):
 *   - input-side projections (q, k, v, gate, up, experts' gate/up, output):
 *     std 1/sqrt(n_in) (0.011..0.022 for the real shapes), so their outputs
 *     have RMS ~1 for an RMS-normed input;
 *   - residual projections (attn_output, ffn_down, ffn_down_exps): std
 *     g/sqrt(n_in) with g = 0.5/sqrt(n_layer) (the GPT-2 idea of scaling
 *     residual branches by depth): all layers together move the residual
 *     stream by RMS ~0.6, whatever the depth;
 *   - token embeddings RMS 1; norms 1 +- 0.025.
 *
 * MoE routing (qwen3moe shapes). Embedding space has a common direction u and
 * K = n_expert / n_expert_used "topic" directions t_k. Token v has a topic
 * k(v) drawn with Zipf(skew) popularity and embedding
 *     x_v = sqrt(n_embd) (a_u u + a_t t_k(v)) + a_n z_v      (z_v ~ N(0, 1) per element)
 * Expert e of layer l has a popularity rank rank_l(e) and a topic
 * topic_l(e) (each topic owns n_expert_used experts; both are per-layer
 * permutations, so hot experts differ between layers as in real models).
 * Its router row is built so that, for the normed hidden state h ~ x,
 *     <r_e, h> ~ -skew log(1 + rank_l(e)) + corr T [k(v) = topic_l(e)] + N(0, 1.28^2)
 * (the noise std of a Gumbel, so the skew term acts like log popularity).
 * Since the residual stream keeps most of the embedding, the experts of the
 * token's topic fire together in layer l and in layer l+1: choices in one
 * layer predict the next. --moe-skew 0 gives no popularity bias, --moe-corr 0
 * no cross-layer structure beyond it.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "gguf.h"
#include "model/shapes.h"
#include "quant/quant.h"
#include "tools.h"
#include "util.h"

#define TOPIC_GAIN 8.0     /* logit boost of a token's topic experts at corr = 1 */
#define ROUTER_NOISE 1.28  /* std of the per-token router logit noise (Gumbel-like) */
#define A_U 0.5            /* embedding mix: common direction, topic, token noise */
#define A_T 0.6
#define PIECE_BYTES (1u << 20)

/* ---- random numbers --------------------------------------------------------- */

static inline uint64_t splitmix(uint64_t *s) { return tnd_splitmix64(s); }

/* A generator state for one (seed, a, b) triple: independent streams per
 * tensor and block. */
static inline uint64_t rng_for(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t s = seed ^ (a * 0xd1b54a32d192ed03ull) ^ (b * 0x8cb92ba72f3d8dd7ull);
    splitmix(&s);
    return s;
}

static inline double rng_unit(uint64_t *s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Approximately N(0,1): the sum of three U(-1,1) has variance 1. Cheap, and
 * bounded, which is all random weights need. */
static inline float rng_normal(uint64_t *s) {
    uint64_t r = splitmix(s);
    float a = (float)(r & 0x1fffff), b = (float)((r >> 21) & 0x1fffff), c = (float)((r >> 42) & 0x1fffff);
    return (a + b + c) * (2.0f / 2097152.0f) - 3.0f;
}

/* ---- block generators --------------------------------------------------------- */

/* Per-tensor constants of a random K-quant, tabulated so a block costs little
 * more than its random bytes: 16 variants of the super-block scale d (within
 * +-10%, as real blocks vary), and for Q4_K the matching dmin and, per
 * variant and 6-bit scale, the min that centres the sub-block on zero. */
typedef struct qparams {
    uint16_t d[16], dmin[16];   /* fp16 */
    uint8_t m[16][64];          /* Q4_K: min for (variant, scale) */
} qparams;

/* Q4_K: w = d * sc_j * q - dmin * m_j, q uniform in 0..15 (std 4.61), sc_j in
 * 32..47; m_j chosen so each sub-block has mean ~0. */
#define Q4K_SC_LO 32
#define Q4K_SC_SPAN 16
#define Q4K_SPREAD 4.6098f
/* Q6_K: w = d * sc_j * (q - 32), q uniform in 0..63 (std 18.47), |sc_j| in
 * 48..79 with a random sign, so the mean is 0. */
#define Q6K_SC_LO 48
#define Q6K_SC_SPAN 32
#define Q6K_SPREAD 18.473f

static float fp16_round(float x) {
    float r = tnd_fp16_to_fp32(tnd_fp32_to_fp16(x));
    return r > 0 ? r : 5.9604644775390625e-8f; /* smallest subnormal: never a zero scale */
}

static void qparams_init(qparams *p, tnd_type t, double std) {
    memset(p, 0, sizeof *p);
    double centre = t == TND_TYPE_Q4_K ? Q4K_SPREAD * (Q4K_SC_LO + Q4K_SC_SPAN / 2)
                                       : Q6K_SPREAD * (Q6K_SC_LO + Q6K_SC_SPAN / 2);
    for (int v = 0; v < 16; v++) {
        float d = fp16_round((float)(std / centre * (0.9 + 0.2 * v / 15.0)));
        p->d[v] = tnd_fp32_to_fp16(d);
        if (t != TND_TYPE_Q4_K) continue;
        float dmin = fp16_round(d * 7.5f * 40.0f / 48.0f); /* m ~ 1.2 sc <= 57 */
        p->dmin[v] = tnd_fp32_to_fp16(dmin);
        for (int sc = 0; sc < 64; sc++) {
            long m = lrintf((float)sc * 7.5f * d / dmin);
            p->m[v][sc] = (uint8_t)(m < 0 ? 0 : m > 63 ? 63 : m);
        }
    }
}

static void fill_random_bytes(uint64_t *s, uint8_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = splitmix(s);
        memcpy(dst + i, &r, 8);
    }
    if (i < n) {
        uint64_t r = splitmix(s);
        memcpy(dst + i, &r, n - i);
    }
}

static void gen_q4k_random(uint64_t *s, const qparams *p, block_q4_K *b) {
    uint64_t r = splitmix(s);
    int v = (int)(r >> 60);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(Q4K_SC_LO + ((r >> (4 * j)) & (Q4K_SC_SPAN - 1)));
        mn[j] = p->m[v][sc[j]];
    }
    b->d = p->d[v];
    b->dmin = p->dmin[v];
    tnd_pack_scale_min_k4(sc, mn, b->scales);
    fill_random_bytes(s, b->qs, sizeof b->qs);
}

static void gen_q6k_random(uint64_t *s, const qparams *p, block_q6_K *b) {
    uint64_t r = splitmix(s), r2 = splitmix(s);
    for (int j = 0; j < 16; j++) {
        int mag = Q6K_SC_LO + (int)((r >> (4 * j)) & (Q6K_SC_SPAN / 2 - 1)) * 2 + (int)((r2 >> j) & 1);
        b->scales[j] = (int8_t)((r2 >> (16 + j)) & 1 ? -mag : mag);
    }
    b->d = p->d[r2 >> 60];
    fill_random_bytes(s, b->ql, sizeof b->ql);
    fill_random_bytes(s, b->qh, sizeof b->qh);
}

/* ---- the model being generated ---------------------------------------------- */

typedef enum gen_kind {
    GEN_QUANT_RANDOM,   /* random K-quant blocks of a given std */
    GEN_NORM,           /* F32 1 +- 0.025 */
    GEN_ROUTER,         /* F32 structured MoE router */
    GEN_EMBD_TOPIC,     /* Q4_K quantized structured embeddings (MoE) */
} gen_kind;

typedef struct synth synth;

typedef struct stensor {
    tnd_shape_tensor info;
    synth *S;
    int index;               /* position in the file */
    gen_kind kind;
    qparams qp;
    uint64_t n_units;        /* blocks (quantized) or elements (F32) */
    size_t unit_bytes;
    uint64_t units_per_piece;
    uint64_t piece_first;    /* global index of its first piece */
    uint64_t n_pieces;
} stensor;

struct synth {
    tnd_shape shape;
    uint64_t seed;
    double skew, corr;
    int n_threads;
    stensor *ts;
    int64_t n_t;
    /* MoE structure */
    int n_topics;
    float *dirs;             /* [1 + n_topics][n_embd]: u, then t_k; unit vectors */
    double *topic_cdf;       /* [n_topics] Zipf(skew) cumulative */
    float *bias;             /* [n_layer][n_expert] popularity logit */
    int *topic_of;           /* [n_layer][n_expert] */
    float *router;           /* [n_layer][n_expert][n_embd], built up front (small) */
    /* the pipeline: pieces generated ahead of the writer into a ring */
    uint64_t n_pieces;
    int ring;                /* slots */
    uint8_t **slot;
    uint64_t *slot_piece;    /* which piece a slot holds (UINT64_MAX = none yet) */
    uint64_t next_piece;     /* next piece a worker takes */
    uint64_t consumed;       /* pieces the writer has finished */
    bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *workers;
    int n_workers;
    /* progress */
    bool tty;
    double t0, last_report;
};

/* Topic of token v (Zipf over topics, so some topics, hence experts, are hot). */
static int token_topic(const synth *S, int64_t v) {
    uint64_t s = rng_for(S->seed, 0x70b1c, (uint64_t)v);
    double u = rng_unit(&s);
    for (int k = 0; k < S->n_topics; k++)
        if (u < S->topic_cdf[k]) return k;
    return S->n_topics - 1;
}

static tnd_status moe_setup(synth *S) {
    const tnd_shape *sh = &S->shape;
    int E = sh->n_embd, NE = sh->n_expert, L = sh->n_layer;
    S->n_topics = TND_MAX(1, NE / TND_MAX(1, sh->n_expert_used));
    int K = S->n_topics;
    S->dirs = tnd_malloc(sizeof(float) * (size_t)(K + 1) * (size_t)E);
    S->topic_cdf = tnd_malloc(sizeof(double) * (size_t)K);
    S->bias = tnd_malloc(sizeof(float) * (size_t)L * (size_t)NE);
    S->topic_of = tnd_malloc(sizeof(int) * (size_t)L * (size_t)NE);
    S->router = tnd_malloc(sizeof(float) * (size_t)L * (size_t)NE * (size_t)E);
    double *w = tnd_malloc(sizeof(double) * (size_t)E);
    int *perm = tnd_malloc(sizeof(int) * (size_t)NE);
    if (!S->dirs || !S->topic_cdf || !S->bias || !S->topic_of || !S->router || !w || !perm) {
        free(perm);
        free(w);
        return TND_ERR_NOMEM;
    }
    for (int k = 0; k <= K; k++) {
        uint64_t s = rng_for(S->seed, 0xd1a5, (uint64_t)k);
        float *v = S->dirs + (size_t)k * E;
        for (int i = 0; i < E; i++) v[i] = rng_normal(&s);
        /* Gram-Schmidt against the earlier directions: u and the topics are
         * exactly orthonormal, so the router noise can be made orthogonal to
         * all of them (below). */
        for (int j = 0; j < k; j++) {
            const float *o = S->dirs + (size_t)j * E;
            double dot = 0;
            for (int i = 0; i < E; i++) dot += (double)v[i] * o[i];
            for (int i = 0; i < E; i++) v[i] -= (float)(dot * o[i]);
        }
        double n2 = 0;
        for (int i = 0; i < E; i++) n2 += (double)v[i] * v[i];
        float inv = (float)(1.0 / sqrt(n2));
        for (int i = 0; i < E; i++) v[i] *= inv;
    }
    double tot = 0;
    for (int k = 0; k < K; k++) tot += pow(k + 1.0, -S->skew);
    double acc = 0;
    for (int k = 0; k < K; k++) S->topic_cdf[k] = (acc += pow(k + 1.0, -S->skew) / tot);
    for (int l = 0; l < L; l++) {
        /* Two independent permutations per layer: popularity ranks, topics. */
        for (int pass = 0; pass < 2; pass++) {
            uint64_t s = rng_for(S->seed, 0xe4e + (uint64_t)pass, (uint64_t)l);
            for (int e = 0; e < NE; e++) perm[e] = e;
            for (int e = NE - 1; e > 0; e--) {
                int j = (int)(splitmix(&s) % (uint64_t)(e + 1));
                int t = perm[e];
                perm[e] = perm[j];
                perm[j] = t;
            }
            if (pass == 0) {
                double mean = 0;
                for (int e = 0; e < NE; e++) mean += log(1.0 + perm[e]);
                mean /= NE;
                for (int e = 0; e < NE; e++)
                    S->bias[(size_t)l * NE + e] = (float)(-S->skew * (log(1.0 + perm[e]) - mean));
            } else {
                for (int e = 0; e < NE; e++) S->topic_of[(size_t)l * NE + e] = perm[e] % K;
            }
        }
    }
    /* Router rows (see the file comment). The noise part is orthogonal to u
     * and the topics: otherwise its projection on u, which every token
     * carries, would be a random per-expert bias, i.e. popularity skew even
     * at --moe-skew 0. */
    double ku = 1.0 / (A_U * sqrt((double)E)), kt = S->corr * TOPIC_GAIN / (A_T * sqrt((double)E));
    double kn = ROUTER_NOISE / sqrt((double)E);
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < NE; e++) {
            uint64_t s = rng_for(S->seed, 0x7007 + (uint64_t)l, (uint64_t)e);
            for (int i = 0; i < E; i++) w[i] = rng_normal(&s);
            for (int k = 0; k <= K; k++) {
                const float *o = S->dirs + (size_t)k * E;
                double dot = 0;
                for (int i = 0; i < E; i++) dot += w[i] * o[i];
                for (int i = 0; i < E; i++) w[i] -= dot * o[i];
            }
            const float *u = S->dirs, *tk = S->dirs + (size_t)(1 + S->topic_of[(size_t)l * NE + e]) * E;
            float *r = S->router + ((size_t)l * NE + e) * E;
            double b = S->bias[(size_t)l * NE + e];
            for (int i = 0; i < E; i++) r[i] = (float)(b * ku * u[i] + kt * tk[i] + kn * w[i]);
        }
    }
    free(perm);
    free(w);
    return TND_OK;
}

/* Generates units [u0, u0+n) of tensor t into out (n * unit_bytes bytes). */
static void gen_units(const stensor *t, uint64_t u0, uint64_t n, uint8_t *out) {
    const synth *S = t->S;
    const tnd_shape *sh = &S->shape;
    switch (t->kind) {
    case GEN_QUANT_RANDOM:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t s = rng_for(S->seed, (uint64_t)t->index + 1, u0 + i);
            if (t->info.type == TND_TYPE_Q4_K) gen_q4k_random(&s, &t->qp, (block_q4_K *)(out + i * t->unit_bytes));
            else gen_q6k_random(&s, &t->qp, (block_q6_K *)(out + i * t->unit_bytes));
        }
        break;
    case GEN_NORM:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t s = rng_for(S->seed, (uint64_t)t->index + 1, u0 + i);
            float v = 1.0f + 0.05f * ((float)rng_unit(&s) - 0.5f);
            memcpy(out + 4 * i, &v, 4);
        }
        break;
    case GEN_ROUTER: {
        size_t per_layer = (size_t)sh->n_expert * (size_t)sh->n_embd;
        memcpy(out, S->router + (size_t)t->info.layer * per_layer + u0, 4 * n);
        break;
    }
    case GEN_EMBD_TOPIC: {
        int E = sh->n_embd;
        uint64_t per_row = (uint64_t)E / TND_QK_K;
        float x[TND_QK_K];
        const float a_n = (float)sqrt(1.0 - A_U * A_U - A_T * A_T), sq = sqrtf((float)E);
        int64_t cached_row = -1;
        const float *tk = NULL;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t blk = u0 + i;
            int64_t row = (int64_t)(blk / per_row);
            int col0 = (int)(blk % per_row) * TND_QK_K;
            if (row != cached_row) {
                tk = S->dirs + (size_t)(1 + token_topic(S, row)) * E;
                cached_row = row;
            }
            uint64_t s = rng_for(S->seed, (uint64_t)t->index + 1, blk);
            for (int j = 0; j < TND_QK_K; j++)
                x[j] = sq * ((float)A_U * S->dirs[col0 + j] + (float)A_T * tk[col0 + j]) + a_n * rng_normal(&s);
            tnd_ref_from_float_q4_K(x, out + i * t->unit_bytes, TND_QK_K); /* quant/'s quantizer */
        }
        break;
    }
    }
}

/* Bytes [off, off+n) of tensor t, generated directly (any alignment). */
static void gen_bytes(const stensor *t, uint64_t off, uint8_t *buf, size_t n) {
    uint8_t tmp[256];
    while (n) {
        uint64_t u = off / t->unit_bytes, in = off % t->unit_bytes;
        if (in == 0 && n >= t->unit_bytes) {
            uint64_t k = n / t->unit_bytes;
            gen_units(t, u, k, buf);
            off += k * t->unit_bytes;
            buf += k * t->unit_bytes;
            n -= (size_t)(k * t->unit_bytes);
        } else {
            gen_units(t, u, 1, tmp);
            size_t c = TND_MIN(n, (size_t)(t->unit_bytes - in));
            memcpy(buf, tmp + in, c);
            off += c;
            buf += c;
            n -= c;
        }
    }
}

/* ---- the pipeline ------------------------------------------------------------ */

/* Tensor of global piece k (binary search over piece_first). */
static const stensor *piece_tensor(const synth *S, uint64_t k) {
    int64_t lo = 0, hi = S->n_t - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (S->ts[mid].piece_first <= k) lo = mid;
        else hi = mid - 1;
    }
    return &S->ts[lo];
}

static void piece_range(const stensor *t, uint64_t k, uint64_t *u0, uint64_t *n) {
    uint64_t j = k - t->piece_first;
    *u0 = j * t->units_per_piece;
    *n = TND_MIN(t->units_per_piece, t->n_units - *u0);
}

static void *worker_main(void *arg) {
    synth *S = arg;
    for (;;) {
        pthread_mutex_lock(&S->mu);
        /* Re-read next_piece after every wait: another worker may have taken it. */
        uint64_t k;
        while (!S->stop && (k = S->next_piece) < S->n_pieces && k >= S->consumed + (uint64_t)S->ring)
            pthread_cond_wait(&S->cv, &S->mu);
        k = S->next_piece;
        if (S->stop || k >= S->n_pieces) {
            pthread_mutex_unlock(&S->mu);
            return NULL;
        }
        S->next_piece++;
        pthread_mutex_unlock(&S->mu);
        const stensor *t = piece_tensor(S, k);
        uint64_t u0, n;
        piece_range(t, k, &u0, &n);
        gen_units(t, u0, n, S->slot[k % (uint64_t)S->ring]);
        pthread_mutex_lock(&S->mu);
        S->slot_piece[k % (uint64_t)S->ring] = k;
        pthread_cond_broadcast(&S->cv);
        pthread_mutex_unlock(&S->mu);
    }
}

/* gguf_fill_fn: copies from the ring when the writer asks for the next piece
 * in order (always, with this writer); anything else is generated here. */
static bool fill_tensor(void *user, uint64_t off, void *buf, size_t n) {
    stensor *t = user;
    synth *S = t->S;
    uint8_t *dst = buf;
    uint64_t pbytes = t->units_per_piece * t->unit_bytes;
    while (n) {
        uint64_t k = t->piece_first + off / pbytes, in = off % pbytes;
        uint64_t u0, nu;
        piece_range(t, k, &u0, &nu);
        size_t plen = (size_t)(nu * t->unit_bytes);
        size_t c = TND_MIN(n, plen - (size_t)in);
        pthread_mutex_lock(&S->mu);
        bool in_order = S->workers && k == S->consumed;
        if (in_order)
            while (S->slot_piece[k % (uint64_t)S->ring] != k) pthread_cond_wait(&S->cv, &S->mu);
        pthread_mutex_unlock(&S->mu);
        if (in_order) {
            memcpy(dst, S->slot[k % (uint64_t)S->ring] + in, c);
            if (in + c == plen) {
                pthread_mutex_lock(&S->mu);
                S->consumed = k + 1;
                pthread_cond_broadcast(&S->cv);
                pthread_mutex_unlock(&S->mu);
            }
        } else {
            gen_bytes(t, off, dst, c);
        }
        dst += c;
        off += c;
        n -= c;
    }
    return true;
}

static tnd_status pipeline_start(synth *S) {
    S->ring = 4 * S->n_threads + 4;
    S->slot = tnd_calloc((size_t)S->ring, sizeof *S->slot);
    S->slot_piece = tnd_malloc(sizeof *S->slot_piece * (size_t)S->ring);
    S->workers = tnd_calloc((size_t)S->n_threads, sizeof *S->workers);
    if (!S->slot || !S->slot_piece || !S->workers) return TND_ERR_NOMEM;
    size_t cap = 0;
    for (int64_t i = 0; i < S->n_t; i++) cap = TND_MAX(cap, (size_t)(S->ts[i].units_per_piece * S->ts[i].unit_bytes));
    for (int i = 0; i < S->ring; i++) {
        S->slot_piece[i] = UINT64_MAX;
        if (!(S->slot[i] = tnd_malloc(cap))) return TND_ERR_NOMEM;
    }
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    for (int i = 0; i < S->n_threads; i++) {
        if (pthread_create(&S->workers[i], NULL, worker_main, S) != 0) {
            S->n_workers = i;
            return tnd_fail(TND_ERR_NOMEM, "cannot start generator threads");
        }
        S->n_workers = i + 1;
    }
    return TND_OK;
}

static void pipeline_stop(synth *S) {
    if (S->n_workers) {
        pthread_mutex_lock(&S->mu);
        S->stop = true;
        pthread_cond_broadcast(&S->cv);
        pthread_mutex_unlock(&S->mu);
        for (int i = 0; i < S->n_workers; i++) pthread_join(S->workers[i], NULL);
        pthread_mutex_destroy(&S->mu);
        pthread_cond_destroy(&S->cv);
        S->n_workers = 0;
    }
    if (S->slot)
        for (int i = 0; i < S->ring; i++) free(S->slot[i]);
    free(S->slot);
    free(S->slot_piece);
    free(S->workers);
    S->slot = NULL;
    S->slot_piece = NULL;
    S->workers = NULL;
}

/* ---- setup ------------------------------------------------------------------- */

static double role_std(const tnd_shape *sh, const tnd_shape_tensor *ti) {
    double gain = 0.5 / sqrt((double)sh->n_layer);
    switch (ti->role) {
    case TND_ROLE_TOKEN_EMBD: return 1.0;
    case TND_ROLE_ATTN_OUTPUT:
    case TND_ROLE_FFN_DOWN:
    case TND_ROLE_FFN_DOWN_EXPS: return gain / sqrt((double)ti->ne[0]);
    default: return 1.0 / sqrt((double)ti->ne[0]);
    }
}

static tnd_status synth_build(synth *S) {
    const tnd_shape *sh = &S->shape;
    S->n_t = tnd_shape_n_tensors(sh);
    S->ts = tnd_calloc((size_t)S->n_t, sizeof *S->ts);
    if (!S->ts) return TND_ERR_NOMEM;
    uint64_t pieces = 0;
    for (int64_t i = 0; i < S->n_t; i++) {
        stensor *t = &S->ts[i];
        if (!tnd_shape_tensor_at(sh, i, &t->info))
            return tnd_fail(TND_ERR_ARG, "shape %s: tensor %" PRId64 " has an invalid size", sh->name, i);
        t->S = S;
        t->index = (int)i;
        int64_t bs;
        size_t ts;
        gguf_type_size(t->info.type, &bs, &ts);
        t->unit_bytes = ts;
        t->n_units = t->info.n_params / (uint64_t)bs;
        if (t->info.type == TND_TYPE_F32) {
            t->kind = t->info.role == TND_ROLE_FFN_GATE_INP ? GEN_ROUTER : GEN_NORM;
        } else if (t->info.role == TND_ROLE_TOKEN_EMBD && sh->n_expert) {
            t->kind = GEN_EMBD_TOPIC;
        } else {
            t->kind = GEN_QUANT_RANDOM;
            qparams_init(&t->qp, t->info.type, role_std(sh, &t->info));
        }
        /* Pieces: ~1 MiB, but smaller for small tensors' sake of nothing; the
         * structured embedding is slower per byte, so its pieces are smaller. */
        uint64_t target = t->kind == GEN_EMBD_TOPIC ? PIECE_BYTES / 4 : PIECE_BYTES;
        t->units_per_piece = TND_MAX(1, target / t->unit_bytes);
        t->n_pieces = (t->n_units + t->units_per_piece - 1) / t->units_per_piece;
        t->piece_first = pieces;
        pieces += t->n_pieces;
    }
    S->n_pieces = pieces;
    if (sh->n_expert) return moe_setup(S);
    return TND_OK;
}

static void synth_free(synth *S) {
    pipeline_stop(S);
    free(S->ts);
    free(S->dirs);
    free(S->topic_cdf);
    free(S->bias);
    free(S->topic_of);
    free(S->router);
}

/* ---- metadata and vocabulary ------------------------------------------------- */

/* The GPT-2 byte-to-unicode map: printable bytes stand for themselves, the
 * others for code points 256 + i in byte order. Writes UTF-8 into out. */
static int byte_token(int b, char *out) {
    int cp;
    bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    if (printable) cp = b;
    else {
        int n = 0;
        for (int c = 0; c < b; c++) {
            bool p = (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
            if (!p) n++;
        }
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_UNUSED = 5 };

/* Token strings of the padded vocabulary: src (n_src) then pads up to nv. */
static tnd_status set_tokens(gguf_writer *w, const gguf_str *src, int64_t n_src, int64_t nv) {
    gguf_str *all = tnd_calloc((size_t)nv, sizeof *all);
    char *pads = tnd_malloc((size_t)(nv - n_src) * 32 + 1);
    if (!all || !pads) {
        free(all);
        free(pads);
        return TND_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n_src; i++) all[i] = src[i];
    char *p = pads;
    for (int64_t i = n_src; i < nv; i++) {
        int len = snprintf(p, 32, "<|synth_pad_%" PRId64 "|>", i - n_src);
        all[i] = (gguf_str){(uint64_t)len, p};
        p += len;
    }
    tnd_status st = gguf_set_arr_str(w, "tokenizer.ggml.tokens", all, (uint64_t)nv);
    free(all);
    free(pads);
    return st;
}

/* A minimal byte-level BPE vocabulary: the 256 byte tokens, <|endoftext|>,
 * pads. No merges, so text tokenizes to bytes; enough to run the model. */
static tnd_status set_default_vocab(gguf_writer *w, int64_t nv) {
    if (nv < 257) return tnd_fail(TND_ERR_ARG, "vocabulary size %" PRId64 " < 257 (256 bytes + end of text)", nv);
    gguf_str base[257];
    char text[256][2];
    for (int b = 0; b < 256; b++) base[b] = (gguf_str){(uint64_t)byte_token(b, text[b]), text[b]};
    base[256] = (gguf_str){13, "<|endoftext|>"};
    tnd_status st;
    if ((st = gguf_set_str(w, "tokenizer.ggml.model", "gpt2")) || (st = gguf_set_str(w, "tokenizer.ggml.pre", "default")) ||
        (st = set_tokens(w, base, 257, nv)))
        return st;
    int32_t *types = tnd_malloc(sizeof(int32_t) * (size_t)nv);
    if (!types) return TND_ERR_NOMEM;
    for (int64_t i = 0; i < nv; i++) types[i] = i < 256 ? TT_NORMAL : i == 256 ? TT_CONTROL : TT_UNUSED;
    st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)nv);
    free(types);
    if (st || (st = gguf_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0)) ||
        (st = gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 256)) ||
        (st = gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 256)) ||
        (st = gguf_set_bool(w, "tokenizer.ggml.add_bos_token", false)))
        return st;
    return TND_OK;
}

/* Copies tokenizer.* from a vocab file and pads tokens/types/scores to nv. */
static tnd_status set_vocab_from(gguf_writer *w, const char *path, int64_t nv) {
    tnd_gguf *g = NULL;
    tnd_status st = tnd_gguf_open(path, &g);
    if (st) return st;
    const gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARRAY || toks->v.arr.type != GGUF_STRING || toks->v.arr.n == 0) {
        tnd_gguf_free(g);
        return tnd_fail(TND_ERR_FORMAT, "%s: no tokenizer.ggml.tokens string array (not a vocabulary file?)", path);
    }
    int64_t n_src = (int64_t)toks->v.arr.n;
    if (n_src > nv) {
        tnd_gguf_free(g);
        return tnd_fail(TND_ERR_ARG, "%s has %" PRId64 " tokens, more than the shape's vocabulary of %" PRId64
                        " (pass --n-vocab %" PRId64 " or more)", path, n_src, nv, n_src);
    }
    if ((st = gguf_copy_kvs(w, g, "tokenizer.")) || (st = set_tokens(w, toks->v.arr.strs, n_src, nv))) goto done;
    const gguf_kv *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (types && types->type == GGUF_ARRAY && (int64_t)types->v.arr.n == n_src) {
        int32_t *ty = tnd_malloc(sizeof(int32_t) * (size_t)nv);
        if (!ty) {
            st = TND_ERR_NOMEM;
            goto done;
        }
        for (int64_t i = 0; i < nv; i++) {
            int64_t v = TT_UNUSED;
            if (i < n_src && !gguf_arr_i64(types, (uint64_t)i, &v)) v = TT_NORMAL;
            ty[i] = (int32_t)v;
        }
        st = gguf_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, ty, (uint64_t)nv);
        free(ty);
        if (st) goto done;
    }
    const gguf_kv *scores = gguf_find(g, "tokenizer.ggml.scores");
    if (scores && scores->type == GGUF_ARRAY && (int64_t)scores->v.arr.n == n_src) {
        float *sc = tnd_malloc(sizeof(float) * (size_t)nv);
        if (!sc) {
            st = TND_ERR_NOMEM;
            goto done;
        }
        for (int64_t i = 0; i < nv; i++) {
            double v = -1e9;
            if (i < n_src && !gguf_arr_f64(scores, (uint64_t)i, &v)) v = 0;
            sc[i] = (float)v;
        }
        st = gguf_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, sc, (uint64_t)nv);
        free(sc);
    }
done:
    tnd_gguf_free(g);
    return st;
}

static tnd_status set_metadata(gguf_writer *w, const synth *S, const char *vocab) {
    const tnd_shape *sh = &S->shape;
    const char *a = sh->arch;
    char key[128], name[96];
    tnd_status st;
#define U32(k, v)                                                               \
    do {                                                                        \
        snprintf(key, sizeof key, "%s.%s", a, k);                               \
        if ((st = gguf_set_u32(w, key, (uint32_t)(v)))) return st;              \
    } while (0)
#define F32(k, v)                                                               \
    do {                                                                        \
        snprintf(key, sizeof key, "%s.%s", a, k);                               \
        if ((st = gguf_set_f32(w, key, (float)(v)))) return st;                 \
    } while (0)
    snprintf(name, sizeof name, "synth %s", sh->name);
    if ((st = gguf_set_str(w, "general.architecture", a)) || (st = gguf_set_str(w, "general.name", name)) ||
        (st = gguf_set_str(w, "general.type", "model")) || (st = gguf_set_u32(w, "general.file_type", 15)) ||
        (st = gguf_set_u32(w, "general.quantization_version", 2)) ||
        (st = gguf_set_str(w, "synth.shape", sh->name)) || (st = gguf_set_u64(w, "synth.seed", S->seed)))
        return st;
    U32("vocab_size", sh->n_vocab);
    U32("context_length", sh->n_ctx_train);
    U32("embedding_length", sh->n_embd);
    U32("block_count", sh->n_layer);
    U32("feed_forward_length", sh->n_ff);
    U32("attention.head_count", sh->n_head);
    U32("attention.head_count_kv", sh->n_head_kv);
    U32("attention.key_length", sh->head_dim);
    U32("attention.value_length", sh->head_dim);
    U32("rope.dimension_count", sh->head_dim);
    F32("rope.freq_base", sh->rope_base);
    F32("attention.layer_norm_rms_epsilon", sh->eps);
    if (sh->n_expert) {
        U32("expert_count", sh->n_expert);
        U32("expert_used_count", sh->n_expert_used);
        U32("expert_feed_forward_length", sh->n_ff_exp);
        if ((st = gguf_set_f32(w, "synth.moe_skew", (float)S->skew)) ||
            (st = gguf_set_f32(w, "synth.moe_corr", (float)S->corr)))
            return st;
    }
#undef U32
#undef F32
    return vocab ? set_vocab_from(w, vocab, sh->n_vocab) : set_default_vocab(w, sh->n_vocab);
}

/* "8.19B" / "26.2M"; "4.91 GiB" / "20.3 MiB", into buf. */
static const char *fmt_params(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull) snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    return buf;
}

static const char *fmt_bytes(uint64_t n, char *buf, size_t cap) {
    if (n >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)n / (1 << 30));
    else snprintf(buf, cap, "%.1f MiB", (double)n / (1 << 20));
    return buf;
}

/* ---- progress ----------------------------------------------------------------- */

static void on_progress(void *user, uint64_t done, uint64_t total) {
    synth *S = user;
    if (!S->tty) return;
    double now = tnd_time_s();
    if (done < total && now - S->last_report < 0.25) return;
    S->last_report = now;
    double el = now - S->t0, gib = 1024.0 * 1024 * 1024;
    double rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    fprintf(stderr, "\rsynth: %s  %.2f / %.2f GiB  %3.0f%%  %.2f GiB/s  ETA %.0f s   ", S->shape.name,
            (double)done / gib, (double)total / gib, total ? 100.0 * (double)done / (double)total : 100.0,
            rate / gib, done < total ? eta : 0.0);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

/* ---- the command ----------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem synth --shape NAME -o FILE [options]\n"
            "       tandem synth --list [--json]\n"
            "       tandem synth --shape NAME --dry-run [--json]\n"
            "\n"
            "Writes a random-weight GGUF with the exact tensor shapes and a Q4_K_M-like\n"
            "type mix of a real model, to measure speed without downloading it.\n"
            "\n"
            "  --shape NAME      model shape (--list shows them)\n"
            "  -o, --output FILE output path (refuses to overwrite without --force)\n"
            "  --vocab GGUF      copy the tokenizer from this file, padded to the shape's\n"
            "                    vocabulary with <|synth_pad_N|> tokens (default: a\n"
            "                    byte-level vocabulary of 256 bytes + <|endoftext|>)\n"
            "  --n-vocab N       override the shape's vocabulary size (e.g. to fit --vocab)\n"
            "  --seed N          random seed (default 42); same seed, same file\n"
            "  --moe-skew S      MoE: Zipf exponent of expert popularity (default 1.0)\n"
            "  --moe-corr C      MoE: 0..1, how strongly layer l's experts predict layer\n"
            "                    l+1's (default 0.6)\n"
            "  -t, --threads N   generator threads (default: physical cores)\n"
            "  --force           overwrite an existing file\n"
            "  --list            list the known shapes with parameters and sizes\n"
            "  --dry-run         print the tensor table and totals, write nothing\n"
            "  --json            machine-readable output for --list and --dry-run\n"
            "  -h, --help        this help\n");
}

static void print_list(bool json) {
    if (!json) printf("%-16s %-9s %8s %8s %10s  %s\n", "shape", "arch", "params", "tensors", "size", "description");
    else printf("[");
    for (int i = 0; i < tnd_shape_count(); i++) {
        const tnd_shape *s = tnd_shape_at(i);
        uint64_t p, b;
        tnd_shape_totals(s, &p, &b);
        if (json)
            printf("%s\n {\"name\": \"%s\", \"arch\": \"%s\", \"test_only\": %s, \"n_params\": %" PRIu64
                   ", \"n_tensors\": %" PRId64 ", \"data_bytes\": %" PRIu64 ", \"n_vocab\": %d, \"n_embd\": %d"
                   ", \"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d, \"head_dim\": %d, \"n_ff\": %d"
                   ", \"n_expert\": %d, \"n_expert_used\": %d, \"n_ff_exp\": %d, \"n_ctx_train\": %d"
                   ", \"rope_base\": %.1f, \"eps\": %g}",
                   i ? "," : "", s->name, s->arch, s->test_only ? "true" : "false", p, tnd_shape_n_tensors(s), b,
                   s->n_vocab, s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->head_dim, s->n_ff, s->n_expert,
                   s->n_expert_used, s->n_ff_exp, s->n_ctx_train, (double)s->rope_base, (double)s->eps);
        else {
            char pb[32], bb[32];
            printf("%-16s %-9s %8s %8" PRId64 " %10s  %s\n", s->name, s->arch, fmt_params(p, pb, sizeof pb),
                   tnd_shape_n_tensors(s), fmt_bytes(b, bb, sizeof bb), s->desc);
        }
    }
    if (json) printf("\n]\n");
}

static void print_dry_run(const tnd_shape *s, bool json) {
    uint64_t p, b;
    tnd_shape_totals(s, &p, &b);
    int64_t n = tnd_shape_n_tensors(s);
    if (json) printf("{\"name\": \"%s\", \"arch\": \"%s\", \"n_vocab\": %d, \"n_params\": %" PRIu64
                     ", \"n_tensors\": %" PRId64 ", \"data_bytes\": %" PRIu64 ", \"tensors\": [",
                     s->name, s->arch, s->n_vocab, p, n, b);
    for (int64_t i = 0; i < n; i++) {
        tnd_shape_tensor t;
        if (!tnd_shape_tensor_at(s, i, &t)) continue;
        if (json)
            printf("%s\n {\"name\": \"%s\", \"type\": \"%s\", \"ne\": [%" PRId64 ", %" PRId64 ", %" PRId64 "], "
                   "\"n_dims\": %u, \"nbytes\": %" PRIu64 "}",
                   i ? "," : "", t.name, gguf_type_name(t.type), t.ne[0], t.ne[1], t.ne[2], t.n_dims, t.nbytes);
        else
            printf("%-28s %-5s [%6" PRId64 " %6" PRId64 " %4" PRId64 "] %12" PRIu64 "\n", t.name,
                   gguf_type_name(t.type), t.ne[0], t.ne[1], t.ne[2], t.nbytes);
    }
    if (json) printf("\n]}\n");
    else {
        char pb[32], bb[32];
        printf("%s: %" PRId64 " tensors, %s params, %s of tensor data\n", s->name, n, fmt_params(p, pb, sizeof pb),
               fmt_bytes(b, bb, sizeof bb));
    }
}

/* Free bytes on the file system that will hold path. */
static bool free_bytes(const char *path, uint64_t *out) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return false;
    *out = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    return true;
}

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *out = NULL, *vocab = NULL;
    bool list = false, json = false, dry = false, force = false;
    long seed = 42, threads = 0, n_vocab = 0;
    double skew = 1.0, corr = 0.6;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
#define NEXT() (has ? argv[++i] : NULL)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list")) list = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--dry-run")) dry = true;
        else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "--shape") && has) shape_name = NEXT();
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has) out = NEXT();
        else if (!strcmp(a, "--vocab") && has) vocab = NEXT();
        else if (!strcmp(a, "--seed") && has) {
            if (!tools_parse_int(NEXT(), 0, 0x7fffffffL, &seed)) goto bad_value;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) {
            if (!tools_parse_int(NEXT(), 1, 1024, &threads)) goto bad_value;
        } else if (!strcmp(a, "--n-vocab") && has) {
            if (!tools_parse_int(NEXT(), 257, 1 << 24, &n_vocab)) goto bad_value;
        } else if (!strcmp(a, "--moe-skew") && has) {
            if (!tools_parse_float(NEXT(), &skew) || skew < 0 || skew > 4) goto bad_value;
        } else if (!strcmp(a, "--moe-corr") && has) {
            if (!tools_parse_float(NEXT(), &corr) || corr < 0 || corr > 1) goto bad_value;
        } else {
            fprintf(stderr, "tandem synth: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        continue;
    bad_value:
        fprintf(stderr, "tandem synth: bad value for %s: '%s'\n", a, argv[i]);
        return 2;
#undef NEXT
    }
    if (list) {
        print_list(json);
        return 0;
    }
    if (!shape_name) {
        fprintf(stderr, "tandem synth: --shape NAME is required (tandem synth --list shows the shapes)\n");
        return 2;
    }
    const tnd_shape *base = tnd_shape_find(shape_name);
    if (!base) {
        fprintf(stderr, "tandem synth: unknown shape '%s'; known:", shape_name);
        for (int i = 0; i < tnd_shape_count(); i++) fprintf(stderr, " %s", tnd_shape_at(i)->name);
        fputc('\n', stderr);
        return 2;
    }
    synth S;
    memset(&S, 0, sizeof S);
    S.shape = *base;
    if (n_vocab) S.shape.n_vocab = (int)n_vocab;
    if (dry) {
        print_dry_run(&S.shape, json);
        return 0;
    }
    if (!out) {
        fprintf(stderr, "tandem synth: -o FILE is required\n");
        return 2;
    }
    struct stat st_out;
    if (!force && stat(out, &st_out) == 0) {
        fprintf(stderr, "tandem: error: %s exists (use --force to overwrite)\n", out);
        return 1;
    }
    S.seed = (uint64_t)seed;
    S.skew = skew;
    S.corr = corr;
    S.n_threads = threads > 0 ? (int)threads : tnd_physical_cores();
    S.tty = isatty(fileno(stderr));

    int rc = 1;
    gguf_writer *w = NULL;
    uint64_t n_params, data_bytes, avail;
    tnd_shape_totals(&S.shape, &n_params, &data_bytes);
    /* File = data + alignment padding + metadata (the vocabulary dominates). */
    uint64_t need = data_bytes + (uint64_t)tnd_shape_n_tensors(&S.shape) * (GGUF_DEFAULT_ALIGNMENT + 128) +
                    (uint64_t)S.shape.n_vocab * 96 + (32u << 20);
    if (free_bytes(out, &avail) && avail < need) {
        char nb[32], ab[32];
        fprintf(stderr, "tandem: error: not enough disk space for %s: need about %s, %s free\n", out,
                fmt_bytes(need, nb, sizeof nb), fmt_bytes(avail, ab, sizeof ab));
        return 1;
    }
    tnd_status st;
    if ((st = synth_build(&S)) || !(w = gguf_writer_new()) || (st = set_metadata(w, &S, vocab))) {
        tools_print_error("synth");
        goto done;
    }
    for (int64_t i = 0; i < S.n_t; i++) {
        stensor *t = &S.ts[i];
        if ((st = gguf_add_tensor_fill(w, t->info.name, t->info.type, t->info.n_dims, t->info.ne, fill_tensor, t))) {
            tools_print_error("synth");
            goto done;
        }
    }
    if ((st = pipeline_start(&S))) {
        tools_print_error("synth");
        goto done;
    }
    S.t0 = S.last_report = tnd_time_s();
    st = gguf_writer_write(w, out, on_progress, &S);
    double el = tnd_time_s() - S.t0;
    if (st) {
        if (S.tty) fputc('\n', stderr);
        tools_print_error("synth");
        goto done;
    }
    struct stat fs;
    uint64_t size = stat(out, &fs) == 0 ? (uint64_t)fs.st_size : data_bytes;
    char pb[32], bb[32];
    fprintf(stderr, "synth: wrote %s: %s, %" PRId64 " tensors, %s params, %s in %.1f s (%.2f GiB/s, %d threads)\n",
            out, S.shape.name, S.n_t, fmt_params(n_params, pb, sizeof pb), fmt_bytes(size, bb, sizeof bb), el,
            el > 0 ? (double)size / (1 << 30) / el : 0.0, S.n_threads);
    rc = 0;
done:
    gguf_writer_free(w);
    synth_free(&S);
    return rc;
}
