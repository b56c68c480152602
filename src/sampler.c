/* Token sampler: repetition penalty -> top-k -> temperature softmax -> top-p
 * -> min-p -> draw. temp <= 0 is greedy (argmax, lowest id on exact ties).
 * The random source is xoshiro256** seeded through splitmix64, so a seed
 * gives the same tokens on every platform. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

struct tnd_sampler {
    tnd_sampler_params p;
    uint64_t rng[4];      /* xoshiro256** state */
    int32_t *hist;        /* ring of the last repeat_last_n accepted tokens */
    int n_hist, hist_pos;
    /* scratch, grown to n_vocab on demand */
    int32_t cap;
    int32_t *idx;         /* candidate ids, best first */
    double *prob;         /* candidate probabilities */
    uint8_t *seen;        /* penalty dedup flags, all zero between calls */
};


static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1) from the top 53 bits. */
static double rng_uniform(tnd_sampler *s) {
    return (double)(xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0);
}

tnd_sampler_params tnd_sampler_default_params(void) {
    tnd_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    /* A fresh seed per run unless the caller sets one. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    p.seed = tnd_splitmix64(&x);
    return p;
}

tnd_status tnd_sampler_new(const tnd_sampler_params *p, tnd_sampler **out) {
    if (!p || !out)
        return tnd_fail(TND_ERR_ARG, "sampler: NULL argument");
    if (isnan(p->temp))
        return tnd_fail(TND_ERR_ARG, "sampler: temp is NaN");
    if (p->top_k < 0)
        return tnd_fail(TND_ERR_ARG, "sampler: top_k %d < 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tnd_fail(TND_ERR_ARG, "sampler: top_p %g not in (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return tnd_fail(TND_ERR_ARG, "sampler: min_p %g not in [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return tnd_fail(TND_ERR_ARG, "sampler: repeat_penalty %g must be > 0", (double)p->repeat_penalty);
    if (p->repeat_last_n < 0 || p->repeat_last_n > (1 << 24))
        return tnd_fail(TND_ERR_ARG, "sampler: repeat_last_n %d not in [0, 2^24]", p->repeat_last_n);
    tnd_sampler *s = tnd_calloc(1, sizeof *s);
    if (!s)
        return TND_ERR_NOMEM;
    s->p = *p;
    if (p->repeat_last_n > 0) {
        s->hist = tnd_malloc((size_t)p->repeat_last_n * sizeof *s->hist);
        if (!s->hist) {
            free(s);
            return TND_ERR_NOMEM;
        }
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = tnd_splitmix64(&x);
    *out = s;
    return TND_OK;
}

void tnd_sampler_free(tnd_sampler *s) {
    if (!s)
        return;
    free(s->hist);
    free(s->idx);
    free(s->prob);
    free(s->seen);
    free(s);
}

void tnd_sampler_accept(tnd_sampler *s, int32_t tok) {
    if (!s || s->p.repeat_last_n <= 0)
        return;
    s->hist[s->hist_pos] = tok;
    s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
    if (s->n_hist < s->p.repeat_last_n)
        s->n_hist++;
}

static bool grow(tnd_sampler *s, int32_t n) {
    if (n <= s->cap)
        return true;
    int32_t *idx = realloc(s->idx, (size_t)n * sizeof *idx);
    if (idx)
        s->idx = idx;
    double *prob = realloc(s->prob, (size_t)n * sizeof *prob);
    if (prob)
        s->prob = prob;
    uint8_t *seen = realloc(s->seen, (size_t)n);
    if (seen) {
        s->seen = seen;
        memset(seen + s->cap, 0, (size_t)(n - s->cap));
    }
    if (!idx || !prob || !seen)
        return false;
    s->cap = n;
    return true;
}

/* Order "a before b": higher logit first, lower id on ties. */
static bool better(const float *l, int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* Min-heap on "better" (root = worst kept), for top-k selection. */
static void heap_down(const float *l, int32_t *h, int n, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && better(l, h[c], h[c + 1]))
            c++;
        if (!better(l, h[i], h[c]))
            return;
        int32_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* Puts the k best ids (k <= n) of l into idx, best first: a heap of the k
 * best seen so far (root = worst of them), then heapsort, which moves the
 * worst to the back one by one. O(n log k). */
static void select_top(const float *l, int32_t n, int32_t k, int32_t *idx) {
    for (int32_t i = 0; i < k; i++)
        idx[i] = i;
    for (int32_t i = k / 2 - 1; i >= 0; i--)
        heap_down(l, idx, k, i);
    for (int32_t i = k; i < n; i++) {
        if (better(l, i, idx[0])) {
            idx[0] = i;
            heap_down(l, idx, k, 0);
        }
    }
    for (int32_t m = k - 1; m > 0; m--) {
        int32_t t = idx[0];
        idx[0] = idx[m];
        idx[m] = t;
        heap_down(l, idx, m, 0);
    }
}

static int32_t argmax(const float *l, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* Steps 2-6: top-k, the softmax at temperature (in double), top-p, min-p,
 * and the draw, walking the candidates best first. With top-k off the
 * candidates are the whole vocabulary, yet only a prefix of them matters:
 * the softmax's sum runs over every logit, and just the best m are ranked,
 * m growing (x8 from 64) until the top-p cut, the min-p cut and the draw
 * all fall inside them. (Ranking all of a 262,144-token vocabulary took
 * ~40 ms a token, Gemma 3 270M's whole decode step ~7.) The token is the
 * one the walk over the fully sorted vocabulary gives. */
static int32_t draw_ranked(tnd_sampler *s, const float *logits, int32_t n_vocab) {
    const tnd_sampler_params *p = &s->p;
    const bool all = !(p->top_k > 0 && p->top_k < n_vocab);
    int32_t *idx = s->idx;
    double *prob = s->prob;
    const double u = rng_uniform(s);
    double mx = 0, sum = 0;
    int32_t m = all ? TND_MIN(n_vocab, 64) : p->top_k;
    if (all) {
        const int32_t b = argmax(logits, n_vocab); /* the first best: "better"'s first */
        mx = logits[b];
        if (isinf(mx)) /* +inf takes it all; all -inf: the first */
            return b;
        for (int32_t i = 0; i < n_vocab; i++)
            sum += exp(((double)logits[i] - mx) / p->temp);
    }
    for (;;) {
        select_top(logits, n_vocab, m, idx);
        if (!all) { /* top-k: the softmax over the k */
            mx = logits[idx[0]];
            sum = 0.0;
        }
        for (int32_t i = 0; i < m; i++) {
            double e = isinf(mx) ? (i == 0) : exp(((double)logits[idx[i]] - mx) / p->temp);
            prob[i] = e;
            if (!all)
                sum += e;
        }
        for (int32_t i = 0; i < m; i++)
            prob[i] /= sum;
        /* candidates past the m ranked: their cut or draw needs more ranked */
        const bool open = all && m < n_vocab;
        bool more = false, cut = false; /* cut: top-p ended the candidates inside the ranked m */
        /* top-p: the shortest prefix whose mass reaches top_p */
        int32_t n = m;
        if (p->top_p < 1.0f) {
            double cum = 0.0;
            int32_t i = 0;
            while (i < m && (cum += prob[i]) < p->top_p)
                i++;
            if (i < m)
                n = i + 1, cut = true;
            else
                more = open;
        }
        /* min-p: drop tokens below min_p times the most likely one */
        if (!more && p->min_p > 0.0f) {
            double floor_p = p->min_p * prob[0];
            int32_t k = 1;
            while (k < n && prob[k] >= floor_p)
                k++;
            more = k == m && open && !cut;
            n = k;
        }
        if (!more) {
            /* the draw, from what is left (all of it: mass 1) */
            const bool whole = n == m && open && !cut;
            double mass = 0.0;
            for (int32_t i = 0; i < n && !whole; i++)
                mass += prob[i];
            const double target = u * (whole ? 1.0 : mass);
            double cum = 0.0;
            for (int32_t i = 0; i < n; i++) {
                cum += prob[i];
                if (target < cum)
                    return idx[i];
            }
            if (!whole)
                return idx[n - 1];
        }
        m = (int32_t)TND_MIN((int64_t)n_vocab, 8 * (int64_t)m);
    }
}

int32_t tnd_sampler_sample(tnd_sampler *s, float *logits, int32_t n_vocab) {
    if (!s || !logits || n_vocab <= 0)
        return -1;
    const tnd_sampler_params *p = &s->p;
    /* NaN would break every comparison below; treat it as impossible. */
    for (int32_t i = 0; i < n_vocab; i++)
        if (isnan(logits[i]))
            logits[i] = -INFINITY;
    if (!grow(s, n_vocab)) {
        /* Out of scratch memory: greedy still works without it. */
        int32_t t = argmax(logits, n_vocab);
        tnd_sampler_accept(s, t);
        return t;
    }

    /* 1. repetition penalty, once per distinct recent token */
    if (p->repeat_penalty != 1.0f && s->n_hist > 0) {
        for (int i = 0; i < s->n_hist; i++) {
            int32_t t = s->hist[i];
            if (t < 0 || t >= n_vocab || s->seen[t])
                continue;
            s->seen[t] = 1;
            logits[t] = logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
        }
        for (int i = 0; i < s->n_hist; i++) {
            int32_t t = s->hist[i];
            if (t >= 0 && t < n_vocab)
                s->seen[t] = 0;
        }
    }

    const int32_t tok = p->temp <= 0.0f ? argmax(logits, n_vocab) : draw_ranked(s, logits, n_vocab);
    tnd_sampler_accept(s, tok);
    return tok;
}
