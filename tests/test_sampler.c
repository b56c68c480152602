/* Sampler: greedy argmax and ties, top-k=1 == greedy, top-p/min-p never leave
 * the nucleus (computed here independently), chi-square goodness of fit at
 * temperature 1 and 2 against the softmax, the same over a large vocabulary
 * with top-k off (ranked in growing prefixes), seed reproducibility,
 * repetition penalty and its window, parameter validation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tandem.h"

/* test-side generator, independent of the sampler's */
static double rnd(void) { return tc_unit(tc_splitmix()); }

static tnd_sampler_params plain(float temp, uint64_t seed) {
    tnd_sampler_params p = tnd_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = seed;
    return p;
}

static tnd_sampler *make(const tnd_sampler_params *p) {
    tnd_sampler *s = NULL;
    tnd_status st = tnd_sampler_new(p, &s);
    if (st != TND_OK) {
        fprintf(stderr, "tnd_sampler_new: %s\n", tnd_last_error());
        exit(1);
    }
    return s;
}

/* Draws one token from a fresh copy of l (the sampler modifies its input). */
static int32_t draw(tnd_sampler *s, const float *l, int n) {
    float buf[512];
    memcpy(buf, l, (size_t)n * sizeof *l);
    return tnd_sampler_sample(s, buf, n);
}

static void softmax(const float *l, int n, double temp, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, l[i]);
    for (int i = 0; i < n; i++)
        sum += p[i] = exp((l[i] - mx) / temp);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

/* The kept set's size over probabilities pr[k] sorted best first: the
 * shortest prefix with mass >= top_p, then those >= min_p * pr[0]. */
static int kept(const double *pr, int k, float top_p, float min_p) {
    int n = k;
    double cum = 0;
    for (int i = 0; i < k; i++)
        if ((cum += pr[i]) >= top_p) {
            n = i + 1;
            break;
        }
    int m = 1;
    while (m < n && pr[m] >= min_p * pr[0])
        m++;
    return m;
}

static void test_greedy(void) {
    tnd_sampler_params p = plain(0.0f, 1);
    tnd_sampler *s = make(&p);
    for (int trial = 0; trial < 200; trial++) {
        float l[97];
        int best = 0;
        for (int i = 0; i < 97; i++) {
            l[i] = (float)(rnd() * 20 - 10);
            if (l[i] > l[best])
                best = i;
        }
        CHECK(draw(s, l, 97) == best, "trial %d", trial);
    }
    float tie[6] = {1, 3, -2, 3, 3, 0};
    CHECK(draw(s, tie, 6) == 1, "exact tie must pick the lowest id");
    p.temp = -1.0f;
    tnd_sampler *s2 = make(&p);
    CHECK(draw(s2, tie, 6) == 1, "negative temp is greedy too");
    tnd_sampler_free(s);
    tnd_sampler_free(s2);
}

static void test_topk1(void) {
    const float temps[] = {0.3f, 1.0f, 5.0f, 100.0f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        tnd_sampler_params p = plain(temps[t], 7 + t);
        p.top_k = 1;
        tnd_sampler *s = make(&p);
        for (int trial = 0; trial < 300; trial++) {
            float l[50];
            int best = 0;
            for (int i = 0; i < 50; i++) {
                l[i] = (float)(rnd() * 4);
                if (l[i] > l[best])
                    best = i;
            }
            CHECK(draw(s, l, 50) == best, "temp %g trial %d", (double)temps[t], trial);
        }
        tnd_sampler_free(s);
    }
}

/* Every draw lies in the set the test computes itself (sorted probabilities,
 * smallest prefix with mass >= top_p, then prob >= min_p * max), and every
 * member of that set with probability >= 1% shows up. */
static void check_nucleus(float top_p, float min_p, float temp, int top_k) {
    enum { N = 64, DRAWS = 20000 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)(rnd() * 6 - 3);
    /* independent nucleus: order by probability */
    int order[N];
    for (int i = 0; i < N; i++)
        order[i] = i;
    for (int i = 0; i < N; i++) /* selection sort, ties by id */
        for (int j = i + 1; j < N; j++)
            if (l[order[j]] > l[order[i]] || (l[order[j]] == l[order[i]] && order[j] < order[i])) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    int k = top_k > 0 && top_k < N ? top_k : N;
    float lk[N];
    for (int i = 0; i < k; i++)
        lk[i] = l[order[i]];
    double pr[N];
    softmax(lk, k, temp, pr);
    const int n = kept(pr, k, top_p, min_p);
    bool in[N] = {false};
    for (int i = 0; i < n; i++)
        in[order[i]] = true;

    tnd_sampler_params p = plain(temp, 99);
    p.top_p = top_p;
    p.min_p = min_p;
    p.top_k = top_k;
    tnd_sampler *s = make(&p);
    int count[N] = {0};
    for (int d = 0; d < DRAWS; d++) {
        int32_t t = draw(s, l, N);
        CHECK(t >= 0 && t < N && in[t], "top_p %g min_p %g: drew %d outside the nucleus (size %d)",
              (double)top_p, (double)min_p, t, n);
        if (t >= 0 && t < N)
            count[t]++;
    }
    double mass = 0;
    for (int i = 0; i < n; i++)
        mass += pr[i];
    for (int i = 0; i < n; i++)
        if (pr[i] / mass >= 0.01)
            CHECK(count[order[i]] > 0, "nucleus member %d (p %.3f) never drawn", order[i], pr[i] / mass);
    tnd_sampler_free(s);
}

/* Chi-square goodness of fit, 8 categories (7 degrees of freedom), 200000
 * draws: the statistic exceeds 29.88 with probability 1e-4 for a correct
 * sampler (7-dof quantile). The seed is fixed, so the outcome is
 * deterministic; a biased sampler (e.g. off-by-one in the cumulative walk,
 * temperature ignored) gives a statistic in the thousands. */
static void test_chi_square(float temp) {
    enum { N = 8, DRAWS = 200000 };
    const float l[N] = {1.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -0.5f, 0.25f};
    double pr[N];
    softmax(l, N, temp, pr);
    tnd_sampler_params p = plain(temp, 2024);
    tnd_sampler *s = make(&p);
    long count[N] = {0};
    for (int d = 0; d < DRAWS; d++) {
        int32_t t = draw(s, l, N);
        if (t >= 0 && t < N)
            count[t]++;
    }
    double chi2 = 0;
    for (int i = 0; i < N; i++) {
        double e = pr[i] * DRAWS;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    CHECK(chi2 < 29.88, "temp %g: chi-square %.2f over the 1e-4 critical value 29.88", (double)temp, chi2);
    printf("chi-square at temp %g: %.2f (7 dof, critical 29.88)\n", (double)temp, chi2);
    tnd_sampler_free(s);
}

/* A large vocabulary with top-k off, where the sampler ranks only a
 * growing prefix (64, 512, all): over the kept set the test computes
 * itself (a full sort), no draw outside it, and a chi-square over 8
 * buckets of ranks within it against its renormalized softmax. The logits
 * are flat (uniform over 2 nats), so the cuts and draws fall past the
 * first prefixes. cut_at >= 0: top_p put between the masses of the first
 * cut_at and cut_at + 1 tokens, so that top-p keeps exactly cut_at + 1
 * (the last ranked of a prefix, 63 or 511, is where the draw's mass once
 * went wrong). */
static int cmp_desc(const void *a, const void *b) {
    const float *x = a, *y = b; /* {logit, id} pairs */
    return x[0] != y[0] ? (x[0] < y[0]) - (x[0] > y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

static void test_large_vocab(float top_p, float min_p, int cut_at) {
    enum { N = 2000, DRAWS = 5000, B = 8 };
    float *l = tc_xmalloc(sizeof(float) * N), *buf = tc_xmalloc(sizeof(float) * N);
    float(*pair)[2] = tc_xmalloc(sizeof(float[2]) * N);
    double *pr = tc_xmalloc(sizeof(double) * N);
    bool *in = tc_xmalloc(sizeof(bool) * N);
    for (int i = 0; i < N; i++) {
        l[i] = (float)(rnd() * 2);
        pair[i][0] = l[i], pair[i][1] = (float)i;
    }
    qsort(pair, N, sizeof *pair, cmp_desc);
    float *ls = tc_xmalloc(sizeof(float) * N);
    for (int i = 0; i < N; i++)
        ls[i] = pair[i][0];
    softmax(ls, N, 1.0, pr);
    if (cut_at >= 0) {
        double below = 0;
        for (int i = 0; i < cut_at; i++)
            below += pr[i];
        top_p = (float)(below + 0.5 * pr[cut_at]);
    }
    const int n = kept(pr, N, top_p, min_p);
    double want[B] = {0}, mass = 0;
    int *rank = tc_xmalloc(sizeof(int) * N);
    memset(in, 0, sizeof(bool) * N);
    for (int i = 0; i < n; i++) {
        int id = (int)pair[i][1];
        in[id] = true;
        rank[id] = i;
        want[(int64_t)i * B / n] += pr[i];
        mass += pr[i];
    }
    tnd_sampler_params p = plain(1.0f, 77);
    p.top_p = top_p;
    p.min_p = min_p;
    tnd_sampler *s = make(&p);
    long count[B] = {0};
    int outside = 0;
    for (int d = 0; d < DRAWS; d++) {
        memcpy(buf, l, sizeof(float) * N);
        int32_t t = tnd_sampler_sample(s, buf, N);
        if (t < 0 || t >= N || !in[t])
            outside++;
        else
            count[(int64_t)rank[t] * B / n]++;
    }
    double chi2 = 0;
    for (int b = 0; b < B; b++) {
        double e = want[b] / mass * DRAWS;
        chi2 += (count[b] - e) * (count[b] - e) / e;
    }
    CHECK(outside == 0, "top_p %g min_p %g, %d tokens: %d draws outside the kept %d", (double)top_p, (double)min_p, N,
          outside, n);
    CHECK(chi2 < 29.88, "top_p %g min_p %g, %d tokens (kept %d): chi-square %.2f over 29.88", (double)top_p,
          (double)min_p, N, n, chi2);
    printf("top-k off, %d tokens, top_p %g min_p %g: kept %d, chi-square %.2f\n", N, (double)top_p, (double)min_p, n,
           chi2);
    tnd_sampler_free(s);
    free(l), free(buf), free(pair), free(pr), free(in), free(ls), free(rank);
}

static void test_seed(void) {
    enum { N = 40, STEPS = 300 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)(rnd() * 3);
    tnd_sampler_params p = tnd_sampler_default_params();
    p.temp = 1.2f;
    p.seed = 42;
    tnd_sampler *a = make(&p), *b = make(&p);
    p.seed = 43;
    tnd_sampler *c = make(&p);
    int same = 1, diff = 0;
    for (int i = 0; i < STEPS; i++) {
        int32_t ta = draw(a, l, N), tb = draw(b, l, N), tc = draw(c, l, N);
        same &= ta == tb;
        diff += ta != tc;
    }
    CHECK(same, "same seed must give the same tokens");
    CHECK(diff > 0, "different seeds gave identical %d-token runs", STEPS);
    tnd_sampler_free(a);
    tnd_sampler_free(b);
    tnd_sampler_free(c);
    /* default params pick different seeds from the clock */
    tnd_sampler_params d1 = tnd_sampler_default_params();
    CHECK(d1.temp > 0.79f && d1.temp < 0.81f && d1.top_k == 40 && d1.top_p > 0.94f && d1.min_p > 0.04f &&
              d1.repeat_penalty == 1.0f && d1.repeat_last_n == 64,
          "default params");
}

static void test_penalty(void) {
    tnd_sampler_params p = plain(0.0f, 5);
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 3;
    tnd_sampler *s = make(&p);
    /* positive logit divided: 2.0/1.5 = 1.33 < 1.9 */
    const float pos[4] = {2.0f, 1.9f, -1.0f, -1.05f};
    CHECK(draw(s, pos, 4) == 0, "first pick");     /* accepts 0 */
    CHECK(draw(s, pos, 4) == 1, "penalised 0 -> 1");  /* accepts 1 */
    /* both penalised now: 1.33 vs 1.27 -> 0 */
    CHECK(draw(s, pos, 4) == 0, "both penalised");
    float buf[4];
    memcpy(buf, pos, sizeof buf);
    tnd_sampler_sample(s, buf, 4);
    CHECK(fabsf(buf[0] - 2.0f / 1.5f) < 1e-6f && fabsf(buf[1] - 1.9f / 1.5f) < 1e-6f && buf[2] == -1.0f,
          "logits modified in place: %g %g %g", (double)buf[0], (double)buf[1], (double)buf[2]);
    tnd_sampler_free(s);

    /* negative logit multiplied: -1 * 1.5 = -1.5 < -1.2 */
    s = make(&p);
    const float neg[3] = {-1.0f, -1.2f, -3.0f};
    tnd_sampler_accept(s, 0);
    tnd_sampler_accept(s, 0); /* a repeated token is penalised once, not twice */
    CHECK(draw(s, neg, 3) == 1, "negative logit must be multiplied");
    tnd_sampler_free(s);

    /* window: token 0 falls out of the last 3 */
    s = make(&p);
    tnd_sampler_accept(s, 0);
    CHECK(draw(s, pos, 4) == 1, "in window");
    tnd_sampler_accept(s, 2);
    tnd_sampler_accept(s, 3);
    tnd_sampler_accept(s, 3);
    CHECK(draw(s, pos, 4) == 0, "token 0 left the window (last 3: 2,3,3)");
    tnd_sampler_free(s);

    /* penalty 1 leaves logits alone */
    p.repeat_penalty = 1.0f;
    s = make(&p);
    tnd_sampler_accept(s, 0);
    CHECK(draw(s, pos, 4) == 0, "penalty off");
    tnd_sampler_free(s);
}

static void test_params(void) {
    tnd_sampler *s = NULL;
    tnd_sampler_params p = plain(1.0f, 1);
    p.top_p = 0.0f;
    CHECK(tnd_sampler_new(&p, &s) == TND_ERR_ARG && s == NULL, "top_p 0 rejected");
    p = plain(1.0f, 1);
    p.top_k = -1;
    CHECK(tnd_sampler_new(&p, &s) == TND_ERR_ARG, "top_k -1 rejected");
    p = plain(1.0f, 1);
    p.repeat_penalty = 0.0f;
    CHECK(tnd_sampler_new(&p, &s) == TND_ERR_ARG, "penalty 0 rejected");
    p = plain(1.0f, 1);
    p.min_p = 1.5f;
    CHECK(tnd_sampler_new(&p, &s) == TND_ERR_ARG && strstr(tnd_last_error(), "min_p"), "min_p 1.5 rejected");
    tnd_sampler_free(NULL);
    /* all logits -inf or NaN: still a valid id */
    p = plain(1.0f, 1);
    s = make(&p);
    float bad[3] = {-INFINITY, NAN, -INFINITY};
    int32_t t = tnd_sampler_sample(s, bad, 3);
    CHECK(t >= 0 && t < 3, "degenerate logits gave %d", t);
    float one[3] = {-INFINITY, 0.0f, NAN};
    CHECK(draw(s, one, 3) == 1, "only finite token");
    tnd_sampler_free(s);
}

int main(void) {
    tc_rng = 0x1234567887654321ull;
    test_greedy();
    test_topk1();
    check_nucleus(0.9f, 0.0f, 1.0f, 0);
    check_nucleus(0.5f, 0.0f, 0.7f, 0);
    check_nucleus(1.0f, 0.2f, 1.0f, 0);
    check_nucleus(0.95f, 0.05f, 0.8f, 40);
    check_nucleus(0.3f, 0.3f, 2.0f, 10);
    test_chi_square(1.0f);
    test_chi_square(2.0f);
    test_large_vocab(1.0f, 0.0f, -1);
    test_large_vocab(0.5f, 0.0f, -1);
    test_large_vocab(1.0f, 0.7f, -1);
    test_large_vocab(0.02f, 0.0f, -1);
    test_large_vocab(0, 0.0f, 63);
    test_large_vocab(0, 0.0f, 511);
    test_large_vocab(0, 0.0f, 64);
    test_large_vocab(0, 0.01f, 63);
    test_seed();
    test_penalty();
    test_params();
    return tc_summary();
}
