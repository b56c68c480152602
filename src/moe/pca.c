/* PCA of a layer's router inputs (moe.h): the covariance (or, with fewer
 * rows than dimensions, the Gram matrix) in double, then subspace iteration
 * with Gram-Schmidt and a Rayleigh-Ritz step (a small Jacobi eigensolve)
 * for the top p eigenvectors. At most 2048^2 doubles (32 MiB) for
 * Qwen3-30B-A3B, so no LAPACK is needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "util.h"

#define PCA_ITERS 60
/* fewer iterations for wide inputs: an iteration costs p d^2 flops, and a
 * subspace near the top one serves the predictor as well */
#define PCA_FLOP_BUDGET 1e9
#define WHITEN_EPS 1e-6f

/* Orthonormalizes the p rows of q[p][d] in place (modified Gram-Schmidt); a
 * row that vanishes is replaced by a unit vector not yet spanned. */
static void orthonormalize(double *q, int p, int d) {
    int retry = 0;
    for (int i = 0; i < p; i++) {
        double *a = q + (size_t)i * d;
        for (int pass = 0; pass < 2; pass++) /* twice: stable enough in double */
            for (int j = 0; j < i; j++) {
                const double *b = q + (size_t)j * d;
                double dot = 0;
                for (int x = 0; x < d; x++) dot += a[x] * b[x];
                for (int x = 0; x < d; x++) a[x] -= dot * b[x];
            }
        double nn = 0;
        for (int x = 0; x < d; x++) nn += a[x] * a[x];
        if (nn < 1e-24) { /* degenerate: restart from an axis and orthogonalize again */
            memset(a, 0, sizeof(double) * (size_t)d);
            a[(i * 7919 + retry++) % d] = 1;
            i--;
            continue;
        }
        nn = 1 / sqrt(nn);
        for (int x = 0; x < d; x++) a[x] *= nn;
    }
}

/* Eigenvalues (w) and eigenvectors (columns of v) of the symmetric n x n a
 * (destroyed), by cyclic Jacobi rotations. */
static void jacobi(double *a, int n, double *w, double *v) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) v[i * n + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double th = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; k < n; k++) {
                    double vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = a[i * n + i];
}

/* The top p eigenpairs of the symmetric m x m matrix S: vectors as the rows
 * of vec[p][m] (a fixed sign: the largest entry positive), values in val[p],
 * by decreasing value. Subspace iteration, then Rayleigh-Ritz. */
static tnd_status top_eigen(const double *S, int m, int p, double *vec, double *val) {
    double *q = tnd_calloc((size_t)p * m, sizeof(double)), *y = tnd_calloc((size_t)p * m, sizeof(double));
    double *small = tnd_calloc((size_t)p * p, sizeof(double)), *ev = tnd_calloc((size_t)p * p, sizeof(double));
    double *w = tnd_calloc((size_t)p, sizeof(double));
    bool *used = tnd_calloc((size_t)p, sizeof(bool));
    tnd_status st = TND_OK;
    if (!q || !y || !small || !ev || !w || !used) {
        st = tnd_fail(TND_ERR_NOMEM, "PCA: out of memory (%d dimensions)", m);
        goto done;
    }
    uint64_t s = 0x2545F4914F6CDD1Dull; /* a fixed start (deterministic): pseudo-random rows */
    for (size_t i = 0; i < (size_t)p * m; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        q[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    orthonormalize(q, p, m);
    const int iters = (int)TND_MAX(6.0, TND_MIN((double)PCA_ITERS, PCA_FLOP_BUDGET / ((double)p * m * m)));
    for (int it = 0; it <= iters; it++) {
        for (int i = 0; i < p; i++) { /* y_i = S q_i */
            const double *qi = q + (size_t)i * m;
            double *yi = y + (size_t)i * m;
            for (int a = 0; a < m; a++) {
                const double *c = S + (size_t)a * m;
                double acc = 0;
                for (int b = 0; b < m; b++) acc += c[b] * qi[b];
                yi[a] = acc;
            }
        }
        if (it == iters) break; /* y = S q for the Ritz step */
        memcpy(q, y, sizeof(double) * (size_t)p * m);
        orthonormalize(q, p, m);
    }
    /* Rayleigh-Ritz: eigen-decompose Q S Q^T and rotate Q, which separates
     * components of close variance that plain iteration leaves mixed */
    for (int i = 0; i < p; i++)
        for (int j = 0; j < p; j++) {
            double acc = 0;
            for (int a = 0; a < m; a++) acc += q[(size_t)i * m + a] * y[(size_t)j * m + a];
            small[i * p + j] = acc;
        }
    for (int i = 0; i < p; i++) /* symmetric up to rounding */
        for (int j = i + 1; j < p; j++) small[i * p + j] = small[j * p + i] = 0.5 * (small[i * p + j] + small[j * p + i]);
    jacobi(small, p, w, ev);
    for (int o = 0; o < p; o++) { /* by decreasing value */
        int b = -1;
        for (int j = 0; j < p; j++)
            if (!used[j] && (b < 0 || w[j] > w[b])) b = j;
        used[b] = true;
        double *v = vec + (size_t)o * m;
        for (int a = 0; a < m; a++) {
            double acc = 0;
            for (int j = 0; j < p; j++) acc += ev[j * p + b] * q[(size_t)j * m + a];
            v[a] = acc;
        }
        val[o] = w[b] > 0 ? w[b] : 0;
    }
done:
    free(q);
    free(y);
    free(small);
    free(ev);
    free(w);
    free(used);
    return st;
}

/* Makes v[d] unit length with its largest entry positive. */
static void normalize_sign(double *v, int d) {
    double nn = 0;
    int big = 0;
    for (int a = 0; a < d; a++) {
        nn += v[a] * v[a];
        big = fabs(v[a]) > fabs(v[big]) ? a : big;
    }
    double k = (v[big] < 0 ? -1 : 1) / (nn > 0 ? sqrt(nn) : 1);
    for (int a = 0; a < d; a++) v[a] *= k;
}

/* With fewer rows than dimensions the covariance (d x d) has rank n-1 at
 * most: the eigenvectors come cheaper from the n x n Gram matrix G = X X^T
 * of the centred rows, as X^T u. p is then at most n-1. */
tnd_status tnd_pca_fit(const float *x, int64_t n, int d, size_t stride, int p, tnd_pca *out) {
    if (d < 1 || p < 1 || p > d || n < 2 || n > (1 << 20))
        return tnd_fail(TND_ERR_ARG, "PCA: %d of %d dimensions from %lld rows", p, d, (long long)n);
    const bool gram = n <= d;
    const int m = gram ? (int)n : d;
    if (gram) p = TND_MIN(p, (int)n - 1);
    double *mean = tnd_calloc((size_t)d, sizeof(double)), *S = tnd_calloc((size_t)m * m, sizeof(double));
    double *xc = gram ? tnd_calloc((size_t)n * d, sizeof(double)) : tnd_calloc((size_t)d, sizeof(double));
    double *vec = tnd_calloc((size_t)p * m, sizeof(double)), *val = tnd_calloc((size_t)p, sizeof(double));
    double *v = tnd_calloc((size_t)d, sizeof(double));
    tnd_pca r = {.d = d, .p = p};
    r.mean = tnd_malloc(sizeof(float) * (size_t)d);
    r.comp = tnd_malloc(sizeof(float) * (size_t)p * d);
    r.var = tnd_malloc(sizeof(float) * (size_t)p);
    tnd_status st = TND_OK;
    if (!mean || !S || !xc || !vec || !val || !v || !r.mean || !r.comp || !r.var) {
        st = tnd_fail(TND_ERR_NOMEM, "PCA: out of memory (%d dimensions, %lld rows)", d, (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        for (int a = 0; a < d; a++) mean[a] += x[(size_t)i * stride + a];
    for (int a = 0; a < d; a++) mean[a] /= (double)n;
    if (gram) {
        for (int64_t i = 0; i < n; i++)
            for (int a = 0; a < d; a++) xc[(size_t)i * d + a] = x[(size_t)i * stride + a] - mean[a];
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i; j < n; j++) {
                const double *xi = xc + (size_t)i * d, *xj = xc + (size_t)j * d;
                double acc = 0;
                for (int a = 0; a < d; a++) acc += xi[a] * xj[a];
                S[(size_t)i * m + j] = S[(size_t)j * m + i] = acc / (double)(n - 1);
            }
    } else {
        for (int64_t i = 0; i < n; i++) { /* upper triangle, mirrored below */
            for (int a = 0; a < d; a++) xc[a] = x[(size_t)i * stride + a] - mean[a];
            for (int a = 0; a < d; a++) {
                double ra = xc[a], *c = S + (size_t)a * d;
                for (int b = a; b < d; b++) c[b] += ra * xc[b];
            }
        }
        for (int a = 0; a < d; a++)
            for (int b = a; b < d; b++) S[(size_t)b * d + a] = S[(size_t)a * d + b] /= (double)(n - 1);
    }
    if ((st = top_eigen(S, m, p, vec, val))) goto done;
    for (int o = 0; o < p; o++) {
        if (gram) { /* the covariance's eigenvector X^T u, same eigenvalue */
            memset(v, 0, sizeof(double) * (size_t)d);
            for (int64_t i = 0; i < n; i++) {
                const double ui = vec[(size_t)o * m + i], *xi = xc + (size_t)i * d;
                for (int a = 0; a < d; a++) v[a] += ui * xi[a];
            }
        } else {
            memcpy(v, vec + (size_t)o * m, sizeof(double) * (size_t)d);
        }
        normalize_sign(v, d);
        for (int a = 0; a < d; a++) r.comp[(size_t)o * d + a] = (float)v[a];
        r.var[o] = (float)val[o];
    }
    for (int a = 0; a < d; a++) r.mean[a] = (float)mean[a];
done:
    if (st) tnd_pca_free(&r);
    else *out = r;
    free(mean);
    free(S);
    free(xc);
    free(vec);
    free(val);
    free(v);
    return st;
}

void tnd_pca_free(tnd_pca *p) {
    if (!p) return;
    free(p->mean);
    free(p->comp);
    free(p->var);
    p->mean = p->comp = p->var = NULL;
}

void tnd_pca_apply(const tnd_pca *p, const float *x, float *z) {
    for (int o = 0; o < p->p; o++) {
        const float *c = p->comp + (size_t)o * p->d;
        float acc = 0;
        for (int a = 0; a < p->d; a++) acc += c[a] * (x[a] - p->mean[a]);
        z[o] = acc / sqrtf(p->var[o] + WHITEN_EPS);
    }
}
