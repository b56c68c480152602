/* Load awareness, Algorithm 3 (adapt.h). */
#include "sched/adapt.h"

#include <math.h>

void tnd_adapt_init(tnd_adapt *a) { *a = (tnd_adapt){0, 0, 1, 1, 0, -1, 0}; }

static void ewma(double *x, double v) { *x = *x > 0 ? *x + TND_ADAPT_ALPHA * (v - *x) : v; }

/* The factor to plan with: the measured one, or exactly 1 near 1. */
static double settle(double f) { return f > 0 && fabs(f - 1) > TND_ADAPT_EPS ? f : 1; }

/* The average x and this round's r (0: not measured) both lie more than
 * eps from the planned factor, on the same side. */
static bool off(double x, double r, double plan) {
    if (x <= 0 || r <= 0) return false;
    double dx = settle(x) / plan - 1, dr = r / plan - 1;
    return fabs(dx) > TND_ADAPT_EPS && fabs(dr) > TND_ADAPT_EPS && (dx > 0) == (dr > 0);
}

bool tnd_adapt_observe(tnd_adapt *a, double now, double round_s, double cpu_meas, double cpu_pred, double copy_meas,
                       double copy_pred) {
    if (round_s > 0 && isfinite(round_s)) ewma(&a->tpot, round_s);
    /* rounds too short to time (a few microseconds of CPU work) say nothing */
    double rc = cpu_pred > 1e-5 && cpu_meas > 0 && isfinite(cpu_meas) ? cpu_meas / cpu_pred : 0;
    double rp = copy_pred > 1e-5 && copy_meas > 0 && isfinite(copy_meas) ? copy_meas / copy_pred : 0;
    if (rc > 0) ewma(&a->cpu, rc);
    if (rp > 0) ewma(&a->pcie, rp);
    /* A deviation counts while the average and this round both show it:
     * the average alone would carry a short spike on for several rounds. */
    bool dev = off(a->cpu, rc, a->plan_cpu) || off(a->pcie, rp, a->plan_pcie);
    if (!dev) {
        a->since = -1;
        return false;
    }
    if (a->since < 0) a->since = now;
    if (now - a->since < TND_ADAPT_TAU * a->tpot) return false;
    /* and plan once the average has caught up with the rounds, not on its way */
    if ((rc > 0 && fabs(settle(a->cpu) / rc - 1) > TND_ADAPT_EPS) || (rp > 0 && fabs(settle(a->pcie) / rp - 1) > TND_ADAPT_EPS))
        return false;
    if (a->cpu > 0) a->plan_cpu = settle(a->cpu);
    if (a->pcie > 0) a->plan_pcie = settle(a->pcie);
    a->since = -1;
    a->n_replans++;
    return true;
}

void tnd_adapt_gpu_init(tnd_adapt_gpu *g) { *g = (tnd_adapt_gpu){0, 0, -1, -1, 0, 0, false, 0, 0}; }

bool tnd_adapt_gpu_round(tnd_adapt_gpu *g, double now, double round_s) {
    if (round_s > 0 && isfinite(round_s)) ewma(&g->tpot, round_s);
    return g->last < 0 || now - g->last >= (g->shared ? 2.5 : 1) * TND_ADAPT_PING_S * 0.999;
}

int tnd_adapt_gpu_observe(tnd_adapt_gpu *g, double now, double secs, double lat) {
    g->last = now;
    if (!(secs >= 0) || !isfinite(secs) || !(lat > 0)) return 0;
    /* each ping must agree: one the host thread was descheduled in is noise */
    const bool dev = g->shared ? secs < TND_ADAPT_GPU_LO * lat : secs > TND_ADAPT_GPU_HI * lat;
    if (!dev) {
        g->since = -1;
        g->sum = 0;
        g->n = 0;
        g->tpot_calm = g->tpot;
        return 0;
    }
    if (g->since < 0) g->since = now;
    g->sum += secs;
    g->n++;
    /* tau counts in the times per token from before the deviation: a shared
     * GPU stretches them several times, which would only delay the move */
    const double tpot = g->tpot_calm > 0 ? g->tpot_calm : g->tpot;
    if (now - g->since < fmin(TND_ADAPT_TAU * tpot, TND_ADAPT_GPU_TAU_MAX) || g->n < 2) return 0;
    g->shared = !g->shared;
    g->lat = g->shared ? g->sum / g->n : 0;
    g->since = -1;
    g->sum = 0;
    g->n = 0;
    g->n_moves++;
    return g->shared ? 1 : -1;
}
