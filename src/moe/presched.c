/* PreSched (LayerScope §4.3, its Algorithm 1 and eq. 2-6): one split
 * layer's decision, at its routing, of which of its CPU-side experts load
 * to the GPU on demand and how many of the next layer's predicted experts
 * to copy ahead. A pure function of the lists and the costs; the executor
 * (exec/prefetch.c) measures the costs and carries the decision out.
 *
 * The paper's model, with its names:
 *   E_cur[0..n]        the current layer's experts not on the GPU, by
 *                      pending tokens, ascending (n_cur = n + 1 of them);
 *   E_next[0..n'-1]    the next layer's predicted ones, the same way;
 *   E_all              both merged by tokens (cross-layer sorting);
 *   t_c(m) = beta m + C  an expert's CPU time for m tokens (eq. 2);
 *   t_io, t_g, t_attn  an expert's copy, its GPU compute, attention;
 *   alpha              how long copies already queued keep the link.
 * Q1 (eq. 3): GPU_Q holds E_all[k..] from the first k where loading
 * E_all[k..] (alpha + its copies + t_g) beats computing E_all[0..k] on the
 * CPU (plus attention). The on-demand loop (eq. 4) takes the first expert
 * of the current layer in GPU_Q whose index i' has T_G(i') < T_C(i'), and
 * loads E_cur[i'..n], at most as many as there is room for (none when no
 * i' qualifies: Algorithm 1 read literally starts at i = n and would
 * always load E_cur[n]; eq. 4's text does not). The prefetch count (eq. 5)
 * is the CPU's gap over t_io, rounded to the nearest, then one fewer when
 * the critical copy's
 * expected gain (eq. 6, R_hit and R_miss = 1 - R_hit; the caller's R_hit
 * is the share over all copies a layer ahead, not the critical one's,
 * which the predictor's ranking would put lower) is not positive.
 * Q4: when GPU_Q holds nothing of the next layer (nothing of it is worth a
 * copy, or nothing of it is left to copy), the window moves one layer
 * further: the layer after next's predicted experts (E_next2) take E_next's
 * place in the cross-layer sorting, and the same eq. 3 and eq. 5-6, with
 * the gap the on-demand decision left, give how many of them to copy ahead,
 * eq. 6 with the hit rate of copies made two layers ahead (r_hit2: the
 * prediction comes from further back). The on-demand loads stay the first
 * window's.
 *
 * Ties in E_all put the current layer's experts first: with equal tokens
 * a copy a layer ahead overlaps this layer's work, an on-demand one the
 * layer waits for. */
#include <math.h>

#include "moe/moe.h"

/* An expert's CPU time for m tokens (eq. 2). */
static double t_c(const tnd_presched_in *in, int m) { return in->beta * m + in->c0; }

/* E_all: E_cur (nc) and another layer's list m (nn) merged by tokens, the
 * current layer first at ties; all_cur[k]: E_cur's index, -1 for the other
 * list's. Returns Q1's (eq. 3) k: GPU_Q = E_all[k..nc + nn - 1]. */
static int gpu_queue(const tnd_presched_in *in, const int *m, int nn, int *all_cur) {
    const int nc = in->n_cur, N = nc + nn;
    int all_m[2 * TND_PRESCHED_MAX];
    for (int a = 0, b = 0, k = 0; k < N; k++) {
        const bool take_cur = a < nc && (b >= nn || in->m_cur[a] <= m[b]);
        all_m[k] = take_cur ? in->m_cur[a] : m[b];
        all_cur[k] = take_cur ? a++ : (b++, -1);
    }
    double pre = 0; /* t_c(E_all[0..k]) */
    for (int k = 0; k < N; k++) {
        pre += t_c(in, all_m[k]);
        if (in->alpha + (N - k) * in->t_io + in->t_g < pre + in->t_attn) return k;
    }
    return N;
}

/* Whether GPU_Q (from q) holds an expert of the other list. */
static bool other_in_queue(const int *all_cur, int q, int N) {
    for (int k = q; k < N; k++)
        if (all_cur[k] < 0) return true;
    return false;
}

/* Eq. 5 and 6: of a list of nn, how many to copy ahead in the CPU's gap,
 * the critical copy's hit rate r_hit; *f_out: eq. 5's f. */
static int prefetch_count(const tnd_presched_in *in, double gap, int nn, double r_hit, double *f_out) {
    double f = (gap + in->t_attn) / in->t_io;
    if (!(f > 0)) f = 0;
    *f_out = f;
    if (f > nn + 1) f = nn + 1; /* more than the list holds: all of it (and no overflow below) */
    int F = (int)lround(f);
    /* Q3 (eq. 6): the critical copy F stays if its expected gain is positive */
    r_hit = r_hit < 0 ? 0 : r_hit > 1 ? 1 : r_hit;
    const double xi = r_hit * (f - F + 1) - (1 - r_hit) * (F - f);
    if (!(xi > 0)) F--;
    return F < 0 ? 0 : F > nn ? nn : F;
}

void tnd_presched(const tnd_presched_in *in, tnd_presched_out *out) {
    *out = (tnd_presched_out){0};
    const int nc = in->n_cur, nn = in->n_next, N = nc + nn;
    const int n2 = in->n_next2 <= TND_PRESCHED_MAX && in->m_next2 ? in->n_next2 : 0; /* Q4's list, else none */
    if (N + n2 <= 0 || nc > TND_PRESCHED_MAX || nn > TND_PRESCHED_MAX || !(in->t_io > 0)) return;
    int all_cur[2 * TND_PRESCHED_MAX]; /* E_cur's index, else -1 */
    const int q = gpu_queue(in, in->m_next, nn, all_cur);
    /* prefix sums of E_cur's CPU times: T_C(i) = cum[i] */
    double cum[TND_PRESCHED_MAX + 1];
    cum[0] = 0;
    for (int i = 0; i < nc; i++) cum[i + 1] = cum[i] + t_c(in, in->m_cur[i]);
    /* the on-demand loop (eq. 4) over GPU_Q's current-layer experts */
    int i_load = nc;
    for (int k = q; k < N && i_load == nc; k++) {
        const int ip = all_cur[k];
        if (ip >= 0 && in->alpha + (nc - ip) * in->t_io + in->t_g < cum[ip]) i_load = ip;
    }
    const int room = in->max_load > 0 ? in->max_load : 0;
    if (nc - i_load > room) i_load = nc - room; /* the heaviest that have room; the gap below counts only them */
    out->n_load = nc - i_load;
    /* Q2 (eq. 5): the gap the CPU's share leaves the link */
    const double gap = cum[i_load] - in->alpha - (nc - i_load) * in->t_io;
    if (nn > 0 && other_in_queue(all_cur, q, N)) {
        out->n_prefetch = prefetch_count(in, gap, nn, in->r_hit, &out->f);
        return;
    }
    /* Q4: nothing of the next layer in GPU_Q: the layer after it */
    if (n2 <= 0) return;
    const int q2 = gpu_queue(in, in->m_next2, n2, all_cur);
    if (other_in_queue(all_cur, q2, nc + n2)) out->n_prefetch2 = prefetch_count(in, gap, n2, in->r_hit2, &out->f2);
}
