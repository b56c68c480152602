/* Sampling: repetition penalty -> top-k -> temperature softmax -> top-p ->
 * min-p -> draw. Greedy when temp <= 0. The PRNG is splitmix64, seeded, so a
 * seed reproduces a run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct tnd_sampler {
    tnd_sampler_params p;
    uint64_t rng;
    int32_t *recent; /* ring of the last repeat_last_n accepted tokens */
    int n_recent, head;
    int *idx;        /* candidate ids, sorted by logit */
    int cap;
};

tnd_sampler_params tnd_sampler_default_params(void) {
    tnd_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                            .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0};
    return p;
}

tnd_status tnd_sampler_new(const tnd_sampler_params *p, tnd_sampler **out) {
    if (!p) return tnd_fail(TND_ERR_ARG, "sampler: no parameters");
    if (p->top_k < 0 || p->top_p <= 0 || p->top_p > 1 || p->min_p < 0 || p->min_p > 1 || p->repeat_penalty <= 0 ||
        p->repeat_last_n < 0 || !isfinite(p->temp))
        return tnd_fail(TND_ERR_ARG, "sampler: parameter out of range");
    tnd_sampler *s = tnd_calloc(1, sizeof *s);
    if (!s) return TND_ERR_NOMEM;
    s->p = *p;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    if (p->repeat_last_n > 0 && !(s->recent = tnd_calloc((size_t)p->repeat_last_n, sizeof *s->recent))) {
        free(s);
        return TND_ERR_NOMEM;
    }
    *out = s;
    return TND_OK;
}

void tnd_sampler_free(tnd_sampler *s) {
    if (!s) return;
    free(s->recent);
    free(s->idx);
    free(s);
}

void tnd_sampler_accept(tnd_sampler *s, int32_t tok) {
    if (!s->p.repeat_last_n) return;
    s->recent[s->head] = tok;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

static double next_uniform(tnd_sampler *s) {
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static const float *g_sort_logits; /* qsort has no context argument in C11 */
static int by_logit_desc(const void *a, const void *b) {
    float x = g_sort_logits[*(const int *)a], y = g_sort_logits[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

int32_t tnd_sampler_sample(tnd_sampler *s, float *logits, int32_t n_vocab) {
    const tnd_sampler_params *p = &s->p;
    if (p->repeat_penalty != 1.0f)
        for (int i = 0; i < s->n_recent; i++) {
            int32_t t = s->recent[i];
            if (t < 0 || t >= n_vocab) continue;
            logits[t] = logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
        }
    int32_t pick = 0;
    if (p->temp <= 0) {
        for (int32_t i = 1; i < n_vocab; i++)
            if (logits[i] > logits[pick]) pick = i;
        tnd_sampler_accept(s, pick);
        return pick;
    }
    if (s->cap < n_vocab) {
        int *idx = realloc(s->idx, sizeof *idx * (size_t)n_vocab);
        if (!idx) return 0;
        s->idx = idx;
        s->cap = n_vocab;
    }
    /* Candidates: the top k (or all), sorted by logit. */
    int n = n_vocab;
    for (int i = 0; i < n; i++) s->idx[i] = i;
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (k < n) { /* partial selection: keep the k best at the front */
        for (int i = 0; i < k; i++) {
            int best = i;
            for (int j = i + 1; j < n; j++)
                if (logits[s->idx[j]] > logits[s->idx[best]] ||
                    (logits[s->idx[j]] == logits[s->idx[best]] && s->idx[j] < s->idx[best]))
                    best = j;
            int t = s->idx[i];
            s->idx[i] = s->idx[best];
            s->idx[best] = t;
        }
        n = k;
    } else {
        g_sort_logits = logits;
        qsort(s->idx, (size_t)n, sizeof *s->idx, by_logit_desc);
    }
    /* Softmax with temperature over the candidates (reusing logits as probs). */
    float mx = logits[s->idx[0]];
    double sum = 0;
    for (int i = 0; i < n; i++) sum += logits[s->idx[i]] = expf((logits[s->idx[i]] - mx) / p->temp);
    for (int i = 0; i < n; i++) logits[s->idx[i]] = (float)(logits[s->idx[i]] / sum);
    /* Top-p: the smallest prefix whose mass reaches top_p. */
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += logits[s->idx[i]];
            if (acc >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    /* Min-p: drop candidates below min_p times the best one's probability. */
    if (p->min_p > 0) {
        float floor_p = p->min_p * logits[s->idx[0]];
        int m = 1;
        while (m < n && logits[s->idx[m]] >= floor_p) m++;
        n = m;
    }
    double mass = 0;
    for (int i = 0; i < n; i++) mass += logits[s->idx[i]];
    double r = next_uniform(s) * mass, acc = 0;
    pick = s->idx[n - 1];
    for (int i = 0; i < n; i++) {
        acc += logits[s->idx[i]];
        if (r < acc) {
            pick = s->idx[i];
            break;
        }
    }
    tnd_sampler_accept(s, pick);
    return pick;
}
