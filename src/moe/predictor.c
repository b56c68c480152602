/* The next-layer expert predictor (moe.h), LayerScope's LLaPor (§4.2).
 *
 * Predictor l maps (a, e) of MoE layer l, a the router input and e its top-k
 * experts, to scores over layer l+1's experts:
 *
 *   x  = [ PCA(a) (whitened, p dims) ; multi-hot(e) (n_expert) ]
 *   h1 = drop(GELU(W1 x + b1))                               (hidden H)
 *   shallow (input and output groups):   u = h1
 *   deep (middle group), a residual block the hidden state gates:
 *        r = W3 drop(GELU(W2 h1 + b2)) + b3;  g = sigmoid(Wg PCA(a) + bg)
 *        u = h1 + g * r
 *   s  = Wo u + bo                                           (n_expert of l+1)
 *
 * Loss (§4.2.3): the input and output groups' hybrid loss, BCE weighted by
 * inverse expert frequency plus lambda times a focal BCE; the middle
 * group's plain BCE. AdamW, a linear warm-up then cosine decay; the middle
 * group with a higher learning rate and weight decay. Everything in plain
 * C, one sample at a time within a mini-batch: the nets are a few hundred
 * thousand weights at most.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "moe/moe.h"
#include "quant/quant.h"
#include "util.h"

#define PRED_MAGIC "TNDPRED1"
#define PRED_VERSION 1u
#define RING 128         /* tokens kept for online fine-tuning (the paper's 128) */
#define WINDOW 64        /* tokens of the error window (the paper's 64) */
#define TUNE_EPOCHS 4    /* passes over the ring per fine-tuning cycle */
#define TUNE_BATCH 32

typedef struct net {
    int group, deep, p, H, N, Nn, k; /* N: experts of layer l (input), Nn: of l+1 */
    tnd_pca pca;
    float *w;                        /* every parameter, contiguous (n_w) */
    size_t n_w;
    size_t oW1, ob1, oW2, ob2, oW3, ob3, oWg, obg, oWo, obo; /* offsets into w */
    float *g, *m1, *m2;              /* gradient and Adam moments [n_w] */
    int64_t t_adam;
    float lr, wd, gamma, focal_w, dropout;
    float *inv_f;                    /* [Nn] expert-balancing weights, mean 1 */
    float *pop;                      /* [Nn] l+1's routing counts in training */
    /* online fine-tuning */
    float *ring_z;                   /* [RING][p] */
    int32_t *ring_e, *ring_n;        /* [RING][k] experts of l and of l+1 */
    int ring_len, ring_at;
    float err[WINDOW];
    int err_len, err_at;
    uint64_t rng;
} net;

struct tnd_predictor {
    int n_layer, n_embd, n_expert, k;
    net *nets;                       /* [n_layer - 1] */
    float thresh;                    /* online: error that triggers fine-tuning */
    int64_t n_tunes;
};

/* per-sample scratch of a forward and backward pass */
typedef struct work {
    float *x, *a1, *h1, *d1, *a2, *h2, *d2, *r, *ag, *gt, *u, *s;
    float *dy, *du, *dh1, *dh2, *dr;
} work;

int tnd_moe_group(int l, int n_layer) {
    int n = n_layer - 1, q = TND_MAX(1, n / 4);
    if (l < q) return TND_GROUP_INPUT;
    if (l >= n - q) return TND_GROUP_OUTPUT;
    return TND_GROUP_MIDDLE;
}

const char *tnd_moe_group_name(int g) {
    static const char *const names[] = {"input", "middle", "output"};
    return g >= 0 && g < TND_GROUP_COUNT ? names[g] : "?";
}

tnd_pred_params tnd_pred_default_params(void) {
    tnd_pred_params p = {0};
    return p;
}

/* the defaults behind the zeros */
static tnd_pred_params resolve(const tnd_pred_params *in, int n_embd, int n_expert) {
    tnd_pred_params p = in ? *in : tnd_pred_default_params();
    /* the paper's ratios (4096 -> 256 and -> 512): 1/16 of the width for the
     * input and output groups, 1/8 for the middle */
    if (p.pca_io <= 0) p.pca_io = TND_MAX(32, n_embd / 16);
    if (p.pca_mid <= 0) p.pca_mid = TND_MAX(64, n_embd / 8);
    if (p.hidden <= 0) p.hidden = TND_MAX(64, TND_MIN(256, 2 * n_expert));
    if (p.epochs <= 0) p.epochs = 30;
    if (p.batch <= 0) p.batch = 64;
    if (p.lr <= 0) p.lr = 3e-3f;
    if (p.dropout == 0) p.dropout = 0.1f;
    if (p.dropout < 0) p.dropout = 0;
    if (p.gamma <= 0) p.gamma = 2;
    if (p.focal_w <= 0) p.focal_w = 1;
    if (!p.seed) p.seed = 1;
    return p;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_unit(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0); }
static float rng_normal(uint64_t *s) {
    float u1 = rng_unit(s), u2 = rng_unit(s);
    return sqrtf(-2.0f * logf(u1 + 1e-12f)) * cosf(6.2831853f * u2);
}

static inline float gelu(float a) { return 0.5f * a * (1 + tanhf(0.7978845608f * (a + 0.044715f * a * a * a))); }
static inline float gelu_d(float a) {
    float u = 0.7978845608f * (a + 0.044715f * a * a * a), t = tanhf(u);
    return 0.5f * (1 + t) + 0.5f * a * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * a * a);
}
static inline float sigm(float a) { return 1 / (1 + expf(-a)); }

/* y[o] = b[o] + W[o] . x */
static void linear(const float *W, const float *b, const float *x, int in, int out, float *y) {
    for (int o = 0; o < out; o++) {
        const float *w = W + (size_t)o * in;
        float acc = b[o];
        for (int i = 0; i < in; i++) acc += w[i] * x[i];
        y[o] = acc;
    }
}

/* dW += dy x^T, db += dy, and (dx != NULL) dx = W^T dy */
static void linear_back(const float *W, float *dW, float *db, const float *x, const float *dy, int in, int out, float *dx) {
    if (dx) memset(dx, 0, sizeof(float) * (size_t)in);
    for (int o = 0; o < out; o++) {
        const float d = dy[o];
        if (d == 0) continue;
        float *gw = dW + (size_t)o * in;
        const float *w = W + (size_t)o * in;
        for (int i = 0; i < in; i++) gw[i] += d * x[i];
        db[o] += d;
        if (dx)
            for (int i = 0; i < in; i++) dx[i] += w[i] * d;
    }
}

static void net_free(net *n) {
    tnd_pca_free(&n->pca);
    free(n->w);
    free(n->g);
    free(n->m1);
    free(n->m2);
    free(n->inv_f);
    free(n->pop);
    free(n->ring_z);
    free(n->ring_e);
    free(n->ring_n);
}

/* Lays out n's parameters (p, H, N, Nn, deep set) and allocates its buffers. */
static tnd_status net_alloc(net *n) {
    int in = n->p + n->N, H = n->H;
    size_t o = 0;
    n->oW1 = o, o += (size_t)H * in, n->ob1 = o, o += (size_t)H;
    if (n->deep) {
        n->oW2 = o, o += (size_t)H * H, n->ob2 = o, o += (size_t)H;
        n->oW3 = o, o += (size_t)H * H, n->ob3 = o, o += (size_t)H;
        n->oWg = o, o += (size_t)H * n->p, n->obg = o, o += (size_t)H;
    }
    n->oWo = o, o += (size_t)n->Nn * H, n->obo = o, o += (size_t)n->Nn;
    n->n_w = o;
    n->w = tnd_calloc(o, sizeof(float));
    n->g = tnd_calloc(o, sizeof(float));
    n->m1 = tnd_calloc(o, sizeof(float));
    n->m2 = tnd_calloc(o, sizeof(float));
    n->inv_f = tnd_calloc((size_t)n->Nn, sizeof(float));
    n->pop = tnd_calloc((size_t)n->Nn, sizeof(float));
    n->ring_z = tnd_calloc((size_t)RING * n->p, sizeof(float));
    n->ring_e = tnd_calloc((size_t)RING * n->k, sizeof(int32_t));
    n->ring_n = tnd_calloc((size_t)RING * n->k, sizeof(int32_t));
    if (!n->w || !n->g || !n->m1 || !n->m2 || !n->inv_f || !n->pop || !n->ring_z || !n->ring_e || !n->ring_n)
        return tnd_fail(TND_ERR_NOMEM, "predictor: out of memory");
    return TND_OK;
}

static void net_init(net *n, uint64_t *rng) {
    int in = n->p + n->N, H = n->H;
    float *w = n->w;
    for (size_t i = 0; i < (size_t)H * in; i++) w[n->oW1 + i] = rng_normal(rng) * sqrtf(2.0f / (float)in);
    if (n->deep) {
        for (size_t i = 0; i < (size_t)H * H; i++) w[n->oW2 + i] = rng_normal(rng) * sqrtf(2.0f / (float)H);
        /* the residual branch starts small: the block begins near identity */
        for (size_t i = 0; i < (size_t)H * H; i++) w[n->oW3 + i] = 0.1f * rng_normal(rng) / sqrtf((float)H);
        for (size_t i = 0; i < (size_t)H * n->p; i++) w[n->oWg + i] = rng_normal(rng) / sqrtf((float)n->p);
    }
    for (size_t i = 0; i < (size_t)n->Nn * H; i++) w[n->oWo + i] = rng_normal(rng) / sqrtf((float)H);
}

static tnd_status work_new(const net *n, work *wk) {
    int in = n->p + n->N, H = n->H, M = TND_MAX(TND_MAX(in, H), n->Nn);
    float *b = tnd_calloc((size_t)17 * M, sizeof(float));
    if (!b) return TND_ERR_NOMEM;
    float **f[] = {&wk->x, &wk->a1, &wk->h1, &wk->d1, &wk->a2, &wk->h2, &wk->d2, &wk->r, &wk->ag,
                   &wk->gt, &wk->u, &wk->s, &wk->dy, &wk->du, &wk->dh1, &wk->dh2, &wk->dr};
    for (int i = 0; i < 17; i++) *f[i] = b + (size_t)i * M;
    return TND_OK;
}
static void work_free(work *wk) { free(wk->x); }

/* x = [z ; multi-hot(e)] */
static void make_input(const net *n, const float *z, const int32_t *e, float *x) {
    memcpy(x, z, sizeof(float) * (size_t)n->p);
    memset(x + n->p, 0, sizeof(float) * (size_t)n->N);
    for (int j = 0; j < n->k; j++)
        if (e[j] >= 0 && e[j] < n->N) x[n->p + e[j]] = 1;
}

/* Forward of wk->x into wk->s; train: dropout masks drawn from n->rng. */
static void forward(net *n, work *wk, bool train) {
    int in = n->p + n->N, H = n->H;
    const float *w = n->w;
    const float keep = 1 - n->dropout, inv = keep > 0 ? 1 / keep : 0;
    linear(w + n->oW1, w + n->ob1, wk->x, in, H, wk->a1);
    for (int i = 0; i < H; i++) {
        wk->d1[i] = train && n->dropout > 0 ? (rng_unit(&n->rng) < keep ? inv : 0) : 1;
        wk->h1[i] = gelu(wk->a1[i]) * wk->d1[i];
    }
    if (n->deep) {
        linear(w + n->oW2, w + n->ob2, wk->h1, H, H, wk->a2);
        for (int i = 0; i < H; i++) {
            wk->d2[i] = train && n->dropout > 0 ? (rng_unit(&n->rng) < keep ? inv : 0) : 1;
            wk->h2[i] = gelu(wk->a2[i]) * wk->d2[i];
        }
        linear(w + n->oW3, w + n->ob3, wk->h2, H, H, wk->r);
        linear(w + n->oWg, w + n->obg, wk->x, n->p, H, wk->ag); /* the gate reads the hidden state only */
        for (int i = 0; i < H; i++) {
            wk->gt[i] = sigm(wk->ag[i]);
            wk->u[i] = wk->h1[i] + wk->gt[i] * wk->r[i];
        }
    } else {
        memcpy(wk->u, wk->h1, sizeof(float) * (size_t)H);
    }
    linear(w + n->oWo, w + n->obo, wk->u, H, n->Nn, wk->s);
}

/* Loss of scores s against the targets (multi-hot of next, k ids), and its
 * gradient into dy (may be NULL). */
static double loss_grad(const net *n, const float *s, const int32_t *next, float *dy) {
    double L = 0;
    const int Nn = n->Nn;
    const bool hybrid = n->group != TND_GROUP_MIDDLE;
    for (int i = 0; i < Nn; i++) {
        float y = 0;
        for (int j = 0; j < n->k; j++) y = next[j] == i ? 1 : y;
        float sg = y > 0 ? 1.0f : -1.0f, q = sigm(sg * s[i]); /* q: probability of the true label */
        float lq = logf(q + 1e-12f), bce = -lq, g = sg * -(1 - q); /* d BCE / d s */
        if (hybrid) {
            float fw = n->inv_f[i], om = 1 - q, omg = powf(om, n->gamma);
            float focal = -omg * lq;
            L += fw * bce + n->focal_w * focal;
            /* d focal / d s = sg [gamma q (1-q)^gamma log q - (1-q)^(gamma+1)] */
            float gf = sg * (n->gamma * q * omg * lq - omg * om);
            if (dy) dy[i] = (fw * g + n->focal_w * gf) / (float)Nn;
        } else {
            L += bce;
            if (dy) dy[i] = g / (float)Nn;
        }
    }
    return L / Nn;
}

/* Backward from wk->dy (after forward), accumulating into n->g. */
static void backward(net *n, work *wk) {
    int in = n->p + n->N, H = n->H;
    const float *w = n->w;
    float *g = n->g;
    linear_back(w + n->oWo, g + n->oWo, g + n->obo, wk->u, wk->dy, H, n->Nn, wk->du);
    if (n->deep) {
        for (int i = 0; i < H; i++) {
            wk->dr[i] = wk->du[i] * wk->gt[i];
            wk->ag[i] = wk->du[i] * wk->r[i] * wk->gt[i] * (1 - wk->gt[i]); /* d ag, in place */
        }
        linear_back(w + n->oWg, g + n->oWg, g + n->obg, wk->x, wk->ag, n->p, H, NULL);
        linear_back(w + n->oW3, g + n->oW3, g + n->ob3, wk->h2, wk->dr, H, H, wk->dh2);
        for (int i = 0; i < H; i++) wk->dh2[i] *= wk->d2[i] * gelu_d(wk->a2[i]);
        linear_back(w + n->oW2, g + n->oW2, g + n->ob2, wk->h1, wk->dh2, H, H, wk->dh1);
        for (int i = 0; i < H; i++) wk->dh1[i] += wk->du[i];
    } else {
        memcpy(wk->dh1, wk->du, sizeof(float) * (size_t)H);
    }
    for (int i = 0; i < H; i++) wk->dh1[i] *= wk->d1[i] * gelu_d(wk->a1[i]);
    linear_back(w + n->oW1, g + n->oW1, g + n->ob1, wk->x, wk->dh1, in, H, NULL);
}

/* One AdamW step from n->g (the sum over bs samples), then zeroes n->g. */
static void adam_step(net *n, float lr, int bs) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, sc = 1.0f / (float)bs;
    n->t_adam++;
    const float c1 = 1 - powf(b1, (float)n->t_adam), c2 = 1 - powf(b2, (float)n->t_adam);
    for (size_t i = 0; i < n->n_w; i++) {
        float gi = n->g[i] * sc;
        n->m1[i] = b1 * n->m1[i] + (1 - b1) * gi;
        n->m2[i] = b2 * n->m2[i] + (1 - b2) * gi * gi;
        n->w[i] -= lr * ((n->m1[i] / c1) / (sqrtf(n->m2[i] / c2) + eps) + n->wd * n->w[i]);
    }
    memset(n->g, 0, sizeof(float) * n->n_w);
}

/* The k best of s[n], best first (ties: the lower id). */
static void topk(const float *s, int n, int k, int32_t *top) {
    for (int j = 0; j < k; j++) {
        int b = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int q = 0; q < j && !taken; q++) taken = top[q] == i;
            if (!taken && (b < 0 || s[i] > s[b])) b = i;
        }
        top[j] = b;
    }
}

static double overlap(const int32_t *a, const int32_t *b, int k) {
    int hit = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) hit += a[i] == b[j];
    return (double)hit / k;
}

/* Trains n over samples z[ns][p], e[ns][k], next[ns][k] for `epochs`
 * passes: warm-up then cosine when sched, else a constant lr. */
static tnd_status train_net(net *n, const float *z, const int32_t *e, const int32_t *next, int64_t ns, int epochs,
                            int batch, float lr0, bool sched, int verbose, int layer) {
    work wk;
    int64_t *order = tnd_malloc(sizeof(int64_t) * (size_t)TND_MAX(ns, 1));
    if (!order || work_new(n, &wk)) {
        free(order);
        return tnd_fail(TND_ERR_NOMEM, "predictor: out of memory");
    }
    for (int64_t i = 0; i < ns; i++) order[i] = i;
    const int warm = sched ? TND_MAX(1, epochs / 6) : 0; /* the paper's 5 of 30 */
    const int64_t steps_per = (ns + batch - 1) / batch, total = steps_per * epochs;
    int64_t step = 0;
    for (int ep = 0; ep < epochs; ep++) {
        for (int64_t i = ns - 1; i > 0; i--) { /* shuffle */
            int64_t j = (int64_t)(rng_next(&n->rng) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double L = 0;
        for (int64_t b0 = 0; b0 < ns; b0 += batch, step++) {
            float lr = lr0;
            if (sched) {
                if (step < warm * steps_per) lr = lr0 * (float)(step + 1) / (float)(warm * steps_per);
                else {
                    double t = (double)(step - warm * steps_per) / (double)TND_MAX(1, total - warm * steps_per);
                    lr = (float)(lr0 * (0.05 + 0.95 * 0.5 * (1 + cos(3.14159265358979 * t))));
                }
            }
            int bs = (int)TND_MIN((int64_t)batch, ns - b0);
            for (int q = 0; q < bs; q++) {
                int64_t i = order[b0 + q];
                make_input(n, z + (size_t)i * n->p, e + (size_t)i * n->k, wk.x);
                forward(n, &wk, true);
                L += loss_grad(n, wk.s, next + (size_t)i * n->k, wk.dy);
                backward(n, &wk);
            }
            adam_step(n, lr, bs);
        }
        if (verbose) fprintf(stderr, "predictor %d (%s): epoch %d loss %.5f\n", layer, tnd_moe_group_name(n->group), ep + 1, L / (double)ns);
    }
    work_free(&wk);
    free(order);
    return TND_OK;
}

void tnd_predictor_free(tnd_predictor *P) {
    if (!P) return;
    for (int l = 0; P->nets && l < P->n_layer - 1; l++) net_free(&P->nets[l]);
    free(P->nets);
    free(P);
}

static tnd_status pred_new(int n_layer, int n_embd, int n_expert, int k, tnd_predictor **out) {
    if (n_layer < 2) return tnd_fail(TND_ERR_ARG, "predictor: needs 2 MoE layers at least (%d)", n_layer);
    tnd_predictor *P = tnd_calloc(1, sizeof *P);
    if (!P) return TND_ERR_NOMEM;
    P->n_layer = n_layer, P->n_embd = n_embd, P->n_expert = n_expert, P->k = k, P->thresh = 0.10f;
    if (!(P->nets = tnd_calloc((size_t)n_layer - 1, sizeof(net)))) {
        free(P);
        return TND_ERR_NOMEM;
    }
    *out = P;
    return TND_OK;
}

int tnd_predictor_n_layer(const tnd_predictor *P) { return P->n_layer; }
int64_t tnd_predictor_n_tunes(const tnd_predictor *P) { return P->n_tunes; }
void tnd_predictor_set_threshold(tnd_predictor *P, float err) { P->thresh = err; }

/* Group-dependent settings of net l (§4.2.3). */
static void net_setup(net *n, int l, int n_layer, int d, int n_expert, int k, const tnd_pred_params *p) {
    n->group = tnd_moe_group(l, n_layer);
    n->deep = n->group == TND_GROUP_MIDDLE;
    n->p = TND_MIN(d, n->deep ? p->pca_mid : p->pca_io);
    n->H = p->hidden;
    n->N = n->Nn = n_expert;
    n->k = k;
    n->lr = n->deep ? 1.5f * p->lr : p->lr;
    n->wd = n->deep ? 1e-3f : 1e-4f;
    n->gamma = p->gamma;
    n->focal_w = p->focal_w;
    n->dropout = p->dropout;
}

tnd_status tnd_predictor_train(const tnd_route_rec *rec, int64_t n_train, const tnd_pred_params *pp,
                               tnd_predictor **out) {
    const int64_t have = tnd_route_rec_n_tok(rec);
    if (n_train <= 0 || n_train > have) n_train = have;
    if (n_train < 16) return tnd_fail(TND_ERR_ARG, "predictor: %lld tokens recorded, 16 at least needed", (long long)n_train);
    tnd_pred_params p = resolve(pp, rec->n_embd, rec->n_expert);
    tnd_predictor *P = NULL;
    tnd_status st = pred_new(rec->n_layer, rec->n_embd, rec->n_expert, rec->k, &P);
    if (st) return st;
    const int d = rec->n_embd, k = rec->k;
    if (p.flop_budget > 0) { /* forward + backward: about 6 flops per weight and sample */
        double per = 0;
        for (int l = 0; l < rec->n_layer - 1; l++) {
            net n = {0};
            net_setup(&n, l, rec->n_layer, d, rec->n_expert, k, &p);
            double w = (double)n.H * (n.p + n.N) + (double)n.Nn * n.H;
            if (n.deep) w += 2.0 * n.H * n.H + (double)n.H * n.p;
            per += 6 * w * (double)n_train;
        }
        p.epochs = (int)TND_MAX(1.0, TND_MIN((double)p.epochs, p.flop_budget / per));
    }
    float *z = NULL;
    for (int l = 0; !st && l < rec->n_layer - 1; l++) {
        net *n = &P->nets[l];
        net_setup(n, l, rec->n_layer, d, rec->n_expert, k, &p);
        n->rng = p.seed * 0x9E3779B97F4A7C15ull + (uint64_t)l;
        /* the PCA first: with fewer tokens than dimensions it gives fewer components */
        const int64_t step = p.pca_rows > 0 ? TND_MAX((int64_t)1, n_train / p.pca_rows) : 1;
        if ((st = tnd_pca_fit(tnd_route_rec_h(rec, l, 0), n_train / step, d, (size_t)d * (size_t)step, n->p, &n->pca)))
            break;
        n->p = n->pca.p;
        if ((st = net_alloc(n))) break;
        net_init(n, &n->rng);
        /* popularity of l+1's experts, and the balancing weights 1/f (mean 1) */
        for (int64_t t = 0; t < n_train; t++)
            for (int j = 0; j < k; j++) n->pop[tnd_route_rec_ids(rec, l + 1, t)[j]] += 1;
        double sum = 0;
        for (int i = 0; i < n->Nn; i++) sum += (n->inv_f[i] = 1.0f / (n->pop[i] + 1.0f));
        for (int i = 0; i < n->Nn; i++) n->inv_f[i] *= (float)(n->Nn / sum);
        free(z);
        if (!(z = tnd_malloc(sizeof(float) * (size_t)n_train * n->p))) {
            st = TND_ERR_NOMEM;
            break;
        }
        for (int64_t t = 0; t < n_train; t++) tnd_pca_apply(&n->pca, tnd_route_rec_h(rec, l, t), z + (size_t)t * n->p);
        st = train_net(n, z, tnd_route_rec_ids(rec, l, 0), tnd_route_rec_ids(rec, l + 1, 0), n_train, p.epochs,
                       p.batch, n->lr, true, p.verbose, l);
    }
    free(z);
    if (st) {
        tnd_predictor_free(P);
        return st;
    }
    *out = P;
    return TND_OK;
}

/* Scores of net n for (h, e) into wk->s. */
static void scores(net *n, work *wk, const float *h, const int32_t *e) {
    float *z = wk->dr; /* free during inference */
    tnd_pca_apply(&n->pca, h, z);
    make_input(n, z, e, wk->x);
    forward(n, wk, false);
}

void tnd_predictor_predict(const tnd_predictor *P, int l, const float *h, const int32_t *ids_l, int32_t *top) {
    net *n = &P->nets[l];
    work wk;
    if (work_new(n, &wk)) { /* no memory: the popularity guess */
        topk(n->pop, n->Nn, n->k, top);
        return;
    }
    scores(n, &wk, h, ids_l); /* forward without dropout leaves n unchanged */
    topk(wk.s, n->Nn, n->k, top);
    work_free(&wk);
}

double tnd_predictor_loss(const tnd_predictor *P, int l, const tnd_route_rec *rec, int64_t t0, int64_t t1) {
    net *n = &P->nets[l];
    work wk;
    if (work_new(n, &wk)) return NAN;
    double L = 0;
    for (int64_t t = t0; t < t1; t++) {
        scores(n, &wk, tnd_route_rec_h(rec, l, t), tnd_route_rec_ids(rec, l, t));
        L += loss_grad(n, wk.s, tnd_route_rec_ids(rec, l + 1, t), NULL);
    }
    work_free(&wk);
    return t1 > t0 ? L / (double)(t1 - t0) : 0;
}

/* ---- online fine-tuning ------------------------------------------------------ */

tnd_status tnd_predictor_observe(tnd_predictor *P, int l, const float *h, const int32_t *ids_l,
                                 const int32_t *ids_next, bool *tuned) {
    if (tuned) *tuned = false;
    if (l < 0 || l >= P->n_layer - 1) return tnd_fail(TND_ERR_ARG, "predictor: no predictor for layer %d", l);
    net *n = &P->nets[l];
    work wk;
    if (work_new(n, &wk)) return tnd_fail(TND_ERR_NOMEM, "predictor: out of memory");
    int32_t top[TND_MAX(1, 64)];
    int32_t *pt = n->k <= 64 ? top : tnd_malloc(sizeof(int32_t) * (size_t)n->k);
    if (!pt) {
        work_free(&wk);
        return TND_ERR_NOMEM;
    }
    scores(n, &wk, h, ids_l);
    topk(wk.s, n->Nn, n->k, pt);
    n->err[n->err_at] = (float)(1 - overlap(pt, ids_next, n->k));
    n->err_at = (n->err_at + 1) % WINDOW;
    n->err_len = TND_MIN(n->err_len + 1, WINDOW);
    memcpy(n->ring_z + (size_t)n->ring_at * n->p, wk.dr, sizeof(float) * (size_t)n->p); /* z from scores() */
    memcpy(n->ring_e + (size_t)n->ring_at * n->k, ids_l, sizeof(int32_t) * (size_t)n->k);
    memcpy(n->ring_n + (size_t)n->ring_at * n->k, ids_next, sizeof(int32_t) * (size_t)n->k);
    n->ring_at = (n->ring_at + 1) % RING;
    n->ring_len = TND_MIN(n->ring_len + 1, RING);
    if (pt != top) free(pt);
    work_free(&wk);
    if (n->err_len < WINDOW) return TND_OK;
    float e = 0;
    for (int i = 0; i < WINDOW; i++) e += n->err[i];
    if (e / WINDOW <= P->thresh) return TND_OK;
    /* a short cycle on the ring (the last 128 tokens), then a fresh window */
    tnd_status st = train_net(n, n->ring_z, n->ring_e, n->ring_n, n->ring_len, TUNE_EPOCHS, TUNE_BATCH, 0.5f * n->lr,
                              false, 0, l);
    if (st) return st;
    n->err_len = n->err_at = 0;
    P->n_tunes++;
    if (tuned) *tuned = true;
    return TND_OK;
}

/* ---- evaluation ---------------------------------------------------------------- */

tnd_status tnd_predictor_eval(const tnd_predictor *P, const tnd_route_rec *rec, int64_t t0, int64_t t1,
                              const tnd_model *m, tnd_pred_eval *out) {
    if (rec->n_layer != P->n_layer || rec->n_embd != P->n_embd || rec->n_expert != P->n_expert || rec->k != P->k)
        return tnd_fail(TND_ERR_ARG, "predictor: the routing record is of another model's shape");
    t1 = TND_MIN(t1, tnd_route_rec_n_tok(rec));
    if (t0 < 0 || t0 >= t1) return tnd_fail(TND_ERR_ARG, "predictor: no held-out tokens to evaluate");
    if (m && (m->hp.n_layer != P->n_layer || m->hp.n_embd != P->n_embd || m->hp.n_expert != P->n_expert)) m = NULL;
    const int E = P->n_embd, N = P->n_expert, k = P->k;
    double sum[4][1 + TND_GROUP_COUNT] = {{0}};
    int64_t cnt[1 + TND_GROUP_COUNT] = {0};
    float *router = m ? tnd_malloc(sizeof(float) * (size_t)N * E) : NULL, *rs = tnd_malloc(sizeof(float) * (size_t)N);
    int32_t *top = tnd_malloc(sizeof(int32_t) * (size_t)k * 3);
    tnd_status st = TND_OK;
    if ((m && !router) || !rs || !top) {
        st = tnd_fail(TND_ERR_NOMEM, "predictor: out of memory");
        goto done;
    }
    bool have_router = m != NULL;
    for (int l = 0; l < P->n_layer - 1; l++) {
        net *n = &P->nets[l];
        const int g = 1 + n->group;
        int32_t *pop_top = top + k, *rt = top + 2 * k;
        topk(n->pop, N, k, pop_top);
        if (have_router) { /* layer l+1's router weights, as floats */
            const tnd_weight *w = &m->layers[l + 1].router;
            const tnd_type_traits *tt = tnd_type_traits_get(w->type);
            if (!w->data || !tt || !tt->to_float || w->n_in != E || w->n_out != N) have_router = false;
            else tt->to_float(w->data, router, (int64_t)N * E);
        }
        work wk;
        if (work_new(n, &wk)) {
            st = TND_ERR_NOMEM;
            goto done;
        }
        for (int64_t t = t0; t < t1; t++) {
            const float *h = tnd_route_rec_h(rec, l, t);
            const int32_t *cur = tnd_route_rec_ids(rec, l, t), *next = tnd_route_rec_ids(rec, l + 1, t);
            scores(n, &wk, h, cur);
            topk(wk.s, N, k, top);
            double v[4] = {overlap(top, next, k), overlap(pop_top, next, k), overlap(cur, next, k), 0};
            if (have_router) {
                for (int e = 0; e < N; e++) {
                    const float *r = router + (size_t)e * E;
                    float acc = 0;
                    for (int i = 0; i < E; i++) acc += r[i] * h[i];
                    rs[e] = acc;
                }
                topk(rs, N, k, rt);
                v[3] = overlap(rt, next, k);
            }
            for (int q = 0; q < 4; q++) sum[q][0] += v[q], sum[q][g] += v[q];
            cnt[0]++, cnt[g]++;
        }
        work_free(&wk);
    }
    tnd_pred_eval e = {.n_tok = t1 - t0};
    for (int g = 0; g <= TND_GROUP_COUNT; g++) {
        double c = (double)cnt[g];
        e.hit[g] = c ? sum[0][g] / c : -1;
        e.popularity[g] = c ? sum[1][g] / c : -1;
        e.same[g] = c ? sum[2][g] / c : -1;
        e.router[g] = c && have_router ? sum[3][g] / c : -1;
    }
    *out = e;
done:
    free(router);
    free(rs);
    free(top);
    return st;
}

static void json_groups(const double *v, FILE *f) {
    fprintf(f, "{");
    for (int g = 0; g <= TND_GROUP_COUNT; g++) {
        fprintf(f, "%s\"%s\": ", g ? ", " : "", g ? tnd_moe_group_name(g - 1) : "all");
        if (v[g] >= 0) fprintf(f, "%.4f", v[g]);
        else fprintf(f, "null");
    }
    fprintf(f, "}");
}

void tnd_pred_eval_json(const tnd_pred_eval *e, FILE *f) {
    fprintf(f, "{\"n_tokens\": %lld, \"hit_rate\": ", (long long)e->n_tok);
    json_groups(e->hit, f);
    fprintf(f, ", \"baselines\": {\"popularity\": ");
    json_groups(e->popularity, f);
    fprintf(f, ", \"same_as_current\": ");
    json_groups(e->same, f);
    fprintf(f, ", \"next_router\": ");
    json_groups(e->router, f);
    fprintf(f, "}}");
}

void tnd_pred_eval_print(const tnd_pred_eval *e, FILE *f) {
    static const char *const rows[] = {"predictor", "popularity", "same_as_current", "next_router"};
    const double *v[] = {e->hit, e->popularity, e->same, e->router};
    fprintf(f, "| top-k hit rate (%lld held-out tokens) | all | input | middle | output |\n|---|---:|---:|---:|---:|\n",
            (long long)e->n_tok);
    for (int r = 0; r < 4; r++) {
        fprintf(f, "| %s |", rows[r]);
        for (int g = 0; g <= TND_GROUP_COUNT; g++) {
            if (v[r][g] >= 0) fprintf(f, " %.1f%% |", 100 * v[r][g]);
            else fprintf(f, " - |");
        }
        fprintf(f, "\n");
    }
}

/* ---- the predictor file --------------------------------------------------------- */

typedef struct pred_header {
    char magic[8];
    uint32_t version, n_layer, n_embd, n_expert, k, reserved;
} pred_header;

/* per net: group, deep, p, H; then floats: lr, wd, gamma, focal_w, dropout,
 * PCA mean [d], comp [p][d], var [p], the parameters, pop [Nn], inv_f [Nn] */
typedef struct net_header {
    uint32_t group, deep, p, H;
    float lr, wd, gamma, focal_w, dropout;
} net_header;

tnd_status tnd_predictor_save(const tnd_predictor *P, const char *path) {
    pred_header hd = {.version = PRED_VERSION, .n_layer = (uint32_t)P->n_layer, .n_embd = (uint32_t)P->n_embd,
                      .n_expert = (uint32_t)P->n_expert, .k = (uint32_t)P->k};
    memcpy(hd.magic, PRED_MAGIC, 8);
    FILE *f = fopen(path, "wb");
    if (!f) return tnd_fail(TND_ERR_IO, "%s: cannot create the predictor file", path);
    bool ok = fwrite(&hd, sizeof hd, 1, f) == 1;
    for (int l = 0; ok && l < P->n_layer - 1; l++) {
        const net *n = &P->nets[l];
        net_header nh = {(uint32_t)n->group, (uint32_t)n->deep, (uint32_t)n->p, (uint32_t)n->H,
                         n->lr, n->wd, n->gamma, n->focal_w, n->dropout};
        const size_t d = (size_t)P->n_embd;
        ok = fwrite(&nh, sizeof nh, 1, f) == 1 && fwrite(n->pca.mean, sizeof(float), d, f) == d &&
             fwrite(n->pca.comp, sizeof(float), (size_t)n->p * d, f) == (size_t)n->p * d &&
             fwrite(n->pca.var, sizeof(float), (size_t)n->p, f) == (size_t)n->p &&
             fwrite(n->w, sizeof(float), n->n_w, f) == n->n_w &&
             fwrite(n->pop, sizeof(float), (size_t)n->Nn, f) == (size_t)n->Nn &&
             fwrite(n->inv_f, sizeof(float), (size_t)n->Nn, f) == (size_t)n->Nn;
    }
    if (fclose(f) || !ok) return tnd_fail(TND_ERR_IO, "%s: writing the predictor file failed", path);
    return TND_OK;
}

static bool read_floats(FILE *f, float *v, size_t n) {
    if (fread(v, sizeof(float), n, f) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return false;
    return true;
}

tnd_status tnd_predictor_load(const char *path, tnd_predictor **out) {
    FILE *f;
    tnd_status st = tnd_open_regular(path, "predictor file", UINT64_MAX, &f);
    if (st) return st;
    pred_header hd;
    tnd_predictor *P = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        st = tnd_fail(TND_ERR_IO, "%s: cannot seek", path);
        goto done;
    }
    if (fread(&hd, sizeof hd, 1, f) != 1 || memcmp(hd.magic, PRED_MAGIC, 8)) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: not a predictor file (no %s header)", path, PRED_MAGIC);
        goto done;
    }
    if (hd.version != PRED_VERSION) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: predictor file version %u, this build reads %u", path, hd.version, PRED_VERSION);
        goto done;
    }
    if (hd.n_layer < 2 || hd.n_layer > 4096 || hd.n_embd < 1 || hd.n_embd > 65536 || hd.n_expert < 2 ||
        hd.n_expert > 4096 || hd.k < 1 || hd.k > hd.n_expert) {
        st = tnd_fail(TND_ERR_FORMAT, "%s: bad dimensions (%u layers, %u wide, %u experts, top-%u)", path, hd.n_layer,
                      hd.n_embd, hd.n_expert, hd.k);
        goto done;
    }
    if ((st = pred_new((int)hd.n_layer, (int)hd.n_embd, (int)hd.n_expert, (int)hd.k, &P))) goto done;
    uint64_t used = sizeof hd;
    for (int l = 0; l < P->n_layer - 1; l++) {
        net *n = &P->nets[l];
        net_header nh;
        if (fread(&nh, sizeof nh, 1, f) != 1) {
            st = tnd_fail(TND_ERR_FORMAT, "%s: truncated at predictor %d", path, l);
            goto done;
        }
        if (nh.group != (uint32_t)tnd_moe_group(l, P->n_layer) || nh.deep != (nh.group == TND_GROUP_MIDDLE) ||
            nh.p < 1 || nh.p > hd.n_embd || nh.H < 1 || nh.H > 4096 || !(nh.lr > 0 && nh.lr < 1) ||
            !(nh.wd >= 0 && nh.wd < 1) || !(nh.gamma >= 0 && nh.gamma <= 10) || !(nh.focal_w >= 0 && nh.focal_w <= 100) ||
            !(nh.dropout >= 0 && nh.dropout < 1)) {
            st = tnd_fail(TND_ERR_FORMAT, "%s: predictor %d has a bad header", path, l);
            goto done;
        }
        n->group = (int)nh.group, n->deep = (int)nh.deep, n->p = (int)nh.p, n->H = (int)nh.H;
        n->N = n->Nn = P->n_expert, n->k = P->k;
        n->lr = nh.lr, n->wd = nh.wd, n->gamma = nh.gamma, n->focal_w = nh.focal_w, n->dropout = nh.dropout;
        n->rng = 0x5DEECE66Dull + (uint64_t)l;
        const size_t d = hd.n_embd;
        /* the size this net needs, against what is left, before allocating */
        uint64_t need = (uint64_t)(d + (uint64_t)n->p * d + (uint64_t)n->p) * 4;
        int in = n->p + n->N;
        uint64_t nw = (uint64_t)n->H * in + n->H + (uint64_t)n->Nn * n->H + n->Nn;
        if (n->deep) nw += 2 * ((uint64_t)n->H * n->H + n->H) + (uint64_t)n->H * n->p + n->H;
        need += nw * 4 + 8ull * n->Nn + sizeof nh;
        if (used + need > (uint64_t)size) {
            st = tnd_fail(TND_ERR_FORMAT, "%s: truncated (predictor %d needs %llu bytes more than the file has)", path, l,
                          (unsigned long long)(used + need - (uint64_t)size));
            goto done;
        }
        used += need;
        if ((st = net_alloc(n))) goto done;
        n->pca.d = (int)d, n->pca.p = n->p;
        n->pca.mean = tnd_malloc(sizeof(float) * d);
        n->pca.comp = tnd_malloc(sizeof(float) * (size_t)n->p * d);
        n->pca.var = tnd_malloc(sizeof(float) * (size_t)n->p);
        if (!n->pca.mean || !n->pca.comp || !n->pca.var) {
            st = TND_ERR_NOMEM;
            goto done;
        }
        if (!read_floats(f, n->pca.mean, d) || !read_floats(f, n->pca.comp, (size_t)n->p * d) ||
            !read_floats(f, n->pca.var, (size_t)n->p) || !read_floats(f, n->w, n->n_w) ||
            !read_floats(f, n->pop, (size_t)n->Nn) || !read_floats(f, n->inv_f, (size_t)n->Nn)) {
            st = tnd_fail(TND_ERR_FORMAT, "%s: predictor %d: short read or a NaN/Inf value", path, l);
            goto done;
        }
        for (int i = 0; i < n->p; i++)
            if (n->pca.var[i] < 0) {
                st = tnd_fail(TND_ERR_FORMAT, "%s: predictor %d: a negative PCA variance", path, l);
                goto done;
            }
    }
    if (used != (uint64_t)size)
        st = tnd_fail(TND_ERR_FORMAT, "%s: %llu bytes of trailing data", path, (unsigned long long)((uint64_t)size - used));
done:
    fclose(f);
    if (st) {
        tnd_predictor_free(P);
        return st;
    }
    *out = P;
    return TND_OK;
}

/* ---- tests ------------------------------------------------------------------------ */

double tnd_predictor_grad_check(int group, uint64_t seed) {
    net n = {0};
    n.group = group, n.deep = group == TND_GROUP_MIDDLE, n.p = 3, n.H = 5, n.N = n.Nn = 6, n.k = 2;
    n.gamma = 2, n.focal_w = 0.7f, n.dropout = 0, n.rng = seed;
    work wk = {0};
    double worst = -1;
    if (net_alloc(&n) || work_new(&n, &wk)) goto out;
    for (size_t i = 0; i < n.n_w; i++) n.w[i] = 0.8f * rng_normal(&n.rng); /* biases too: every path live */
    for (int i = 0; i < n.Nn; i++) n.inv_f[i] = 0.5f + rng_unit(&n.rng);
    float z[3];
    for (int i = 0; i < 3; i++) z[i] = rng_normal(&n.rng);
    const int32_t e[2] = {1, 4}, next[2] = {0, 3};
    make_input(&n, z, e, wk.x);
    forward(&n, &wk, false);
    loss_grad(&n, wk.s, next, wk.dy);
    backward(&n, &wk);
    worst = 0;
    const float eps = 2e-3f;
    /* float central differences carry ~1e-5 of rounding: gaps count relative
     * to the gradient, floored at 1% of its largest entry */
    double gmax = 0;
    for (size_t i = 0; i < n.n_w; i++) gmax = TND_MAX(gmax, fabs((double)n.g[i]));
    for (size_t i = 0; i < n.n_w; i++) {
        float w0 = n.w[i];
        n.w[i] = w0 + eps;
        forward(&n, &wk, false);
        double lp = loss_grad(&n, wk.s, next, NULL);
        n.w[i] = w0 - eps;
        forward(&n, &wk, false);
        double lm = loss_grad(&n, wk.s, next, NULL);
        n.w[i] = w0;
        double num = (lp - lm) / (2.0 * eps), ana = n.g[i];
        double rel = fabs(num - ana) / TND_MAX(0.01 * gmax, fabs(num) + fabs(ana));
        worst = TND_MAX(worst, rel);
    }
out:
    work_free(&wk);
    net_free(&n);
    return worst;
}
