/* The next-layer expert predictor (moe/): PCA against a Jacobi
 * eigen-decomposition written here; the networks' gradients against
 * central differences; training lowers the loss and learns a routing that
 * popularity and same_as_current cannot; online fine-tuning recovers when
 * the routing shifts; the routing and predictor files round-trip and a
 * damaged file is refused with a message. The synth-model figures are
 * tests/test_predictor_synth.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moe/moe.h"
#include "util.h"

/* ---- PCA ------------------------------------------------------------------ */

/* The reference: cyclic Jacobi on the n x n symmetric a (destroyed). */
static void ref_eigen(double *a, int n, double *w, double *v) {
    for (int i = 0; i < n * n; i++) v[i] = i % (n + 1) == 0;
    for (int sweep = 0; sweep < 200; sweep++)
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                if (fabs(a[p * n + q]) < 1e-300) continue;
                double th = 0.5 * atan2(2 * a[p * n + q], a[q * n + q] - a[p * n + p]);
                double c = cos(th), s = sin(th);
                for (int k = 0; k < n; k++) {
                    double x = a[k * n + p], y = a[k * n + q];
                    a[k * n + p] = c * x - s * y, a[k * n + q] = s * x + c * y;
                }
                for (int k = 0; k < n; k++) {
                    double x = a[p * n + k], y = a[q * n + k];
                    a[p * n + k] = c * x - s * y, a[q * n + k] = s * x + c * y;
                }
                for (int k = 0; k < n; k++) {
                    double x = v[k * n + p], y = v[k * n + q];
                    v[k * n + p] = c * x - s * y, v[k * n + q] = s * x + c * y;
                }
            }
    for (int i = 0; i < n; i++) w[i] = a[i * n + i];
}

/* tnd_pca_fit on nr rows of d dimensions (spreads sd[i] = 3 * 0.7^i along
 * a rotated basis, shifted) against the reference on their covariance;
 * nr <= d takes the Gram path. */
static void pca_case(int d, int nr, int p) {
    float *x = tc_xmalloc(sizeof(float) * (size_t)nr * d);
    for (int r = 0; r < nr; r++) {
        double y[64];
        for (int i = 0; i < d; i++) y[i] = 3 * pow(0.7, i) * (2 * tc_unit(tc_splitmix()) - 1) * 1.7320508;
        for (int rot = 0; rot < d - 1; rot++) {
            double c = cos(0.3 + rot), s = sin(0.3 + rot), a = y[rot], b = y[rot + 1];
            y[rot] = c * a - s * b, y[rot + 1] = s * a + c * b;
        }
        for (int i = 0; i < d; i++) x[r * d + i] = (float)(y[i] + 0.5 * i);
    }
    tnd_pca pc;
    CHECK_ST(tnd_pca_fit(x, nr, d, (size_t)d, p, &pc));
    CHECK(pc.p == (nr <= d ? TND_MIN(p, nr - 1) : p), "%d x %d: %d components", nr, d, pc.p);
    double *mean = calloc((size_t)d, sizeof(double)), *cov = calloc((size_t)d * d, sizeof(double));
    double *w = calloc((size_t)d, sizeof(double)), *v = calloc((size_t)d * d, sizeof(double));
    bool *used = calloc((size_t)d, sizeof(bool));
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < d; i++) mean[i] += x[r * d + i] / (double)nr;
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) cov[i * d + j] += (x[r * d + i] - mean[i]) * (x[r * d + j] - mean[j]) / (nr - 1.0);
    ref_eigen(cov, d, w, v);
    for (int o = 0; o < pc.p; o++) {
        int b = -1;
        for (int j = 0; j < d; j++)
            if (!used[j] && (b < 0 || w[j] > w[b])) b = j;
        used[b] = true;
        double dot = 0;
        for (int i = 0; i < d; i++) dot += v[i * d + b] * pc.comp[o * d + i];
        CHECK(fabs(fabs(dot) - 1) < 1e-4, "%d x %d: component %d: |cos| %.6f with the reference", nr, d, o, fabs(dot));
        CHECK(fabs(pc.var[o] - w[b]) < 1e-4 * w[b], "%d x %d: variance %d: %.6f, reference %.6f", nr, d, o, pc.var[o], w[b]);
    }
    for (int i = 0; i < d; i++) CHECK(fabs(pc.mean[i] - mean[i]) < 1e-4, "mean %d", i);
    /* whitened: unit variance along each component */
    double s2[64] = {0};
    float z[64];
    for (int r = 0; r < nr; r++) {
        tnd_pca_apply(&pc, x + r * d, z);
        for (int o = 0; o < pc.p; o++) s2[o] += (double)z[o] * z[o] / (nr - 1.0);
    }
    for (int o = 0; o < pc.p; o++) CHECK(fabs(s2[o] - 1) < 5e-3, "%d x %d: whitened variance %d: %.5f", nr, d, o, s2[o]);
    tnd_pca_free(&pc);
    free(x);
    free(mean);
    free(cov);
    free(w);
    free(v);
    free(used);
}

static void test_pca(void) {
    pca_case(7, 500, 3);  /* the covariance */
    pca_case(40, 24, 6);  /* the Gram matrix */
    pca_case(30, 12, 20); /* more components asked than the rows carry */
    float x[14] = {0};
    tnd_pca pc;
    CHECK(tnd_pca_fit(x, 1, 7, 7, 3, &pc) == TND_ERR_ARG, "one row is refused");
}

/* ---- a synthetic routing: topics -------------------------------------------------
 * Token t has a topic c (skewed); its router input at layer l is a topic
 * direction plus noise, and layer l picks the two experts perm_l assigns to
 * c (the second one replaced by a random expert 10% of the time). Layer
 * l+1's experts are a function of the topic only a learned map recovers:
 * perm_l differs per layer, so same_as_current fails. */
enum { NL = 4, DIM = 24, NE = 16, K = 2, NT = 8 };
static float dirs[NT][DIM];
static int perm[NL][NE];

static void topics_init(void) {
    for (int c = 0; c < NT; c++)
        for (int i = 0; i < DIM; i++) dirs[c][i] = (float)(2 * tc_unit(tc_splitmix()) - 1);
    for (int l = 0; l < NL; l++) {
        for (int e = 0; e < NE; e++) perm[l][e] = e;
        for (int e = NE - 1; e > 0; e--) {
            int j = (int)(tc_splitmix() % (uint64_t)(e + 1)), t = perm[l][e];
            perm[l][e] = perm[l][j], perm[l][j] = t;
        }
    }
}

/* One token: h[NL][DIM], ids[NL][K]. */
static void topics_token(float *h, int32_t *ids) {
    double u = tc_unit(tc_splitmix());
    int c = (int)(NT * u * u); /* skewed: low topics more often */
    float base[DIM];
    for (int i = 0; i < DIM; i++) base[i] = 2 * dirs[c][i] + 0.4f * (float)(2 * tc_unit(tc_splitmix()) - 1);
    for (int l = 0; l < NL; l++) {
        for (int i = 0; i < DIM; i++) h[l * DIM + i] = base[i] + 0.1f * (float)(2 * tc_unit(tc_splitmix()) - 1);
        ids[l * K] = perm[l][2 * c];
        ids[l * K + 1] = perm[l][2 * c + 1];
        if (tc_unit(tc_splitmix()) < 0.1) {
            int r = (int)(tc_splitmix() % NE);
            if (r != ids[l * K]) ids[l * K + 1] = r;
        }
    }
}

static tnd_route_rec *topics_record(int64_t n) {
    tnd_route_rec *r;
    CHECK_ST(tnd_route_rec_new_dims(NL, DIM, NE, K, n, &r));
    float h[NL * DIM];
    int32_t ids[NL * K];
    for (int64_t t = 0; t < n; t++) {
        topics_token(h, ids);
        for (int l = 0; l < NL; l++) tnd_route_rec_add(r, l, h + l * DIM, ids + l * K, 1);
    }
    return r;
}

static void test_grad(void) {
    for (int g = 0; g < TND_GROUP_COUNT; g++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            double e = tnd_predictor_grad_check(g, seed);
            CHECK(e >= 0 && e < 2e-2, "group %s seed %d: gradient vs central differences: worst relative gap %.2e",
                  tnd_moe_group_name(g), (int)seed, e);
        }
}

static void test_train(void) {
    tnd_route_rec *r = topics_record(1200);
    CHECK(tnd_route_rec_n_tok(r) == 1200, "recorded %lld", (long long)tnd_route_rec_n_tok(r));
    tnd_pred_params p = tnd_pred_default_params();
    p.epochs = 1;
    tnd_predictor *P1, *P2, *P3;
    CHECK_ST(tnd_predictor_train(r, 900, &p, &P1));
    p.epochs = 12;
    CHECK_ST(tnd_predictor_train(r, 900, &p, &P2));
    CHECK_ST(tnd_predictor_train(r, 900, &p, &P3));
    for (int l = 0; l < NL - 1; l++) {
        double l1 = tnd_predictor_loss(P1, l, r, 0, 900), l2 = tnd_predictor_loss(P2, l, r, 0, 900);
        CHECK(l2 < 0.8 * l1, "layer %d: 12 epochs' loss %.4f below 0.8x one epoch's %.4f", l, l2, l1);
        CHECK(tnd_predictor_loss(P3, l, r, 0, 900) == l2, "layer %d: same seed, same predictor", l);
    }
    tnd_pred_eval e;
    CHECK_ST(tnd_predictor_eval(P2, r, 900, 1200, NULL, &e));
    printf("topics: hit %.3f, popularity %.3f, same %.3f (held out)\n", e.hit[0], e.popularity[0], e.same[0]);
    CHECK(e.n_tok == 300, "held-out tokens %lld", (long long)e.n_tok);
    CHECK(e.hit[0] > 0.85, "held-out hit rate %.3f", e.hit[0]);
    CHECK(e.hit[0] > e.popularity[0] + 0.3 && e.hit[0] > e.same[0] + 0.3, "beats the baselines");
    CHECK(e.router[0] == -1, "no model: next_router not measured");
    for (int g = 1; g <= TND_GROUP_COUNT; g++) CHECK(e.hit[g] >= 0, "group %d measured", g - 1);

    /* files round-trip; damaged ones are refused with a message */
    char dir[] = "/tmp/tnd_pred_XXXXXX", path[256], bad[256];
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(path, sizeof path, "%s/p.tndp", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    CHECK_ST(tnd_predictor_save(P2, path));
    tnd_predictor *Q;
    CHECK_ST(tnd_predictor_load(path, &Q));
    int32_t a[K], b[K];
    for (int64_t t = 900; t < 1000; t++)
        for (int l = 0; l < NL - 1; l++) {
            tnd_predictor_predict(P2, l, tnd_route_rec_h(r, l, t), tnd_route_rec_ids(r, l, t), a);
            tnd_predictor_predict(Q, l, tnd_route_rec_h(r, l, t), tnd_route_rec_ids(r, l, t), b);
            if (memcmp(a, b, sizeof a)) CHECK(false, "loaded predictor differs at token %lld layer %d", (long long)t, l);
        }
    tnd_predictor_free(Q);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size);
    CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size, "read back");
    fclose(f);
    struct {
        long len, at;
        char byte;
        const char *what;
    } cases[] = {{size - 5, -1, 0, "truncated"}, {size, 0, 'X', "magic"}, {size, 8, 9, "version"},
                 {size, 12, 0, "layers"}, {20, -1, 0, "header only"}, {0, -1, 0, "empty"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f = fopen(bad, "wb");
        char save = cases[i].at >= 0 ? buf[cases[i].at] : 0;
        if (cases[i].at >= 0) buf[cases[i].at] = cases[i].byte;
        fwrite(buf, 1, (size_t)cases[i].len, f);
        if (cases[i].at >= 0) buf[cases[i].at] = save;
        fclose(f);
        tnd_status st = tnd_predictor_load(bad, &Q);
        CHECK(st == TND_ERR_FORMAT && strstr(tnd_last_error(), bad), "%s: refused (%d: %s)", cases[i].what, st,
              tnd_last_error());
    }
    /* a NaN weight */
    float nan = NAN;
    memcpy(buf + size - 4, &nan, 4);
    f = fopen(bad, "wb");
    fwrite(buf, 1, (size_t)size, f);
    fclose(f);
    CHECK(tnd_predictor_load(bad, &Q) == TND_ERR_FORMAT, "NaN refused: %s", tnd_last_error());
    free(buf);
    /* the routing file */
    snprintf(path, sizeof path, "%s/r.tndr", dir);
    CHECK_ST(tnd_route_rec_save(r, path));
    tnd_route_rec *r2;
    CHECK_ST(tnd_route_rec_load(path, &r2));
    CHECK(tnd_route_rec_n_tok(r2) == 1200 && !memcmp(r2->h, r->h, sizeof(float) * NL * DIM * 1200) &&
              !memcmp(r2->ids, r->ids, sizeof(int32_t) * NL * K * 1200),
          "routing file round-trips");
    tnd_route_rec_free(r2);
    CHECK(truncate(path, 4000) == 0, "truncate");
    CHECK(tnd_route_rec_load(path, &r2) == TND_ERR_FORMAT && strstr(tnd_last_error(), "truncated"), "%s",
          tnd_last_error());
    f = fopen(path, "r+b");
    fwrite("TNDROUTE\x07", 1, 9, f); /* version 7 */
    fclose(f);
    CHECK(tnd_route_rec_load(path, &r2) == TND_ERR_FORMAT && strstr(tnd_last_error(), "version"), "%s", tnd_last_error());
    unlink(path);
    snprintf(path, sizeof path, "%s/p.tndp", dir);
    unlink(path);
    unlink(bad);
    rmdir(dir);
    tnd_predictor_free(P1);
    tnd_predictor_free(P2);
    tnd_predictor_free(P3);
    tnd_route_rec_free(r);
}

/* Offline on one routing, then the routing of layer l+1 shifts (a new
 * topic -> experts map): the error window triggers fine-tuning, and the
 * hit rate comes back. */
static void test_online(void) {
    tnd_route_rec *r = topics_record(800);
    tnd_pred_params p = tnd_pred_default_params();
    p.epochs = 12;
    tnd_predictor *P;
    CHECK_ST(tnd_predictor_train(r, 800, &p, &P));
    tnd_route_rec_free(r);
    int l = 0; /* predictor 0 (input group): the paper's monitored group */
    for (int e = NE - 1; e > 0; e--) { /* the shift: layer 1 routes anew */
        int j = (int)(tc_splitmix() % (uint64_t)(e + 1)), t = perm[1][e];
        perm[1][e] = perm[1][j], perm[1][j] = t;
    }
    float h[NL * DIM];
    int32_t ids[NL * K], top[K];
    double early = 0, late = 0;
    int64_t tunes_first = -1;
    const int n_obs = 1500;
    for (int t = 0; t < n_obs; t++) {
        topics_token(h, ids);
        tnd_predictor_predict(P, l, h, ids, top);
        int hit = 0;
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++) hit += top[a] == ids[K + b];
        if (t < 64) early += hit / (double)K / 64;
        if (t >= n_obs - 200) late += hit / (double)K / 200;
        bool tuned;
        CHECK_ST(tnd_predictor_observe(P, l, h, ids, ids + K, &tuned));
        if (tuned && tunes_first < 0) tunes_first = t;
    }
    printf("online: hit %.3f over the first 64 tokens after the shift, %.3f over the last 200; %lld tuning cycles, the "
           "first after %lld tokens\n",
           early, late, (long long)tnd_predictor_n_tunes(P), (long long)tunes_first + 1);
    CHECK(early < 0.5, "the shift hurts: %.3f", early);
    CHECK(tunes_first == 63, "the first cycle at the 64th token (%lld)", (long long)tunes_first + 1);
    CHECK(late > 0.8 && late > early + 0.3, "recovered: %.3f from %.3f", late, early);
    CHECK(tnd_predictor_observe(P, NL - 1, h, ids, ids, NULL) == TND_ERR_ARG, "no predictor for the last layer");
    tnd_predictor_free(P);
}

int main(void) {
    topics_init();
    test_pca();
    test_grad();
    test_train();
    test_online();
    return tc_summary();
}
