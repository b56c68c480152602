/* Load awareness (ATSInfer §4.4, Algorithm 3; docs/ARCHITECTURE.md:
 * Adaptation): a recorder of live speeds and the rule for re-deciding.
 *
 * Each round reports what its CPU weight ops took against what the perf DB
 * predicts for them, and the same for its weight copies. The recorder keeps
 * EWMAs of the two ratios (the CPU's and the link's slowdown). The
 * promotions of a round were chosen with some factors (1 at the start);
 * when a ratio stays more than eps (15%) away from the one planned with,
 * in its average and in each round, for longer than tau (5 times the
 * recent time per token), the rule asks for a new choice with the average
 * ratios, once the average agrees with the round within eps (not while it
 * is still on its way from the old level). A new choice resets the comparison,
 * so noise inside eps, or deviations shorter than tau, change nothing, and
 * a factor within eps of 1 is taken as 1 (the unloaded plan comes back
 * exactly). Pure state: no model, no backend, no clock of its own. */
#ifndef TND_SCHED_ADAPT_H
#define TND_SCHED_ADAPT_H

#include <stdbool.h>

#define TND_ADAPT_EPS 0.15   /* relative deviation that counts */
#define TND_ADAPT_TAU 5.0    /* ... for this many recent times per token */
#define TND_ADAPT_ALPHA 0.3  /* EWMA weight of the newest round */

typedef struct tnd_adapt {
    double cpu, pcie;           /* EWMAs of measured / predicted (0: nothing measured yet) */
    double plan_cpu, plan_pcie; /* the factors the current choice was made with */
    double tpot;                /* EWMA of the round's wall time, s */
    double since;               /* when the deviation began (seconds, the caller's clock), < 0: none */
    int n_replans;
} tnd_adapt;

void tnd_adapt_init(tnd_adapt *a);

/* Reports one round finished at time now (seconds) that took round_s: its
 * CPU weight ops took cpu_meas seconds where cpu_pred were predicted, its
 * copies copy_meas where copy_pred (a pair of 0: not measured this round).
 * Returns true when the promotions should be chosen again, with
 * a->plan_cpu and a->plan_pcie, which it has set (and n_replans counted). */
bool tnd_adapt_observe(tnd_adapt *a, double now, double round_s, double cpu_meas, double cpu_pred, double copy_meas,
                       double copy_pred);

/* The GPU shared with another process. Its kernels time-share the GPU with
 * ours (no MPS), so each move of a round to the GPU waits for a time slice,
 * milliseconds where the profile measured microseconds, and a placement of
 * many switches collapses. Neither the CPU's nor the link's factor sees
 * it. Between rounds the context pings the GPU (a kernel that does
 * nothing, on the idle stream: backend.h) every TND_ADAPT_PING_S; when
 * every ping over tau is more than TND_ADAPT_GPU_HI times the profile's
 * switch latency, the weights are placed again (Algorithm 1) with the
 * measured latency, which gives few switches; when every ping over tau is
 * under TND_ADAPT_GPU_LO times it, the placement for an idle GPU comes
 * back. The two thresholds are the hysteresis: a shared GPU's pings sit
 * 100x and more above the profile, an idle one's within 2x of it. tau is
 * 5 recent times per token as above, those from before the pings began to
 * deviate, and at most TND_ADAPT_GPU_TAU_MAX: a shared GPU's times per
 * token are long, and the signal is strong. */
#define TND_ADAPT_GPU_HI 8.0
#define TND_ADAPT_GPU_LO 3.0
#define TND_ADAPT_GPU_TAU_MAX 1.0 /* s */
#define TND_ADAPT_PING_S 0.1      /* s between pings (0.25 s while shared: each costs a time slice) */

typedef struct tnd_adapt_gpu {
    double tpot;       /* EWMA of the round's wall time, s */
    double tpot_calm;  /* ... as of the last ping that did not deviate (0: none yet) */
    double last;       /* when the last ping was taken, < 0: never */
    double since;      /* when the pings began to deviate, < 0: they do not */
    double sum;        /* the deviating pings' sum, s, and their count */
    int n;
    bool shared;       /* the placement is the one for a shared GPU */
    double lat;        /* ... made with this switch latency, s */
    int n_moves;       /* placements changed, either way */
} tnd_adapt_gpu;

void tnd_adapt_gpu_init(tnd_adapt_gpu *g);
/* A round of round_s seconds ended at now; true when a ping is due. */
bool tnd_adapt_gpu_round(tnd_adapt_gpu *g, double now, double round_s);
/* A ping of secs at now, against the profile's switch latency lat (s).
 * Returns 1: place for a shared GPU, with g->lat (the mean of the
 * deviating pings); -1: back to the placement for an idle GPU; 0: keep. */
int tnd_adapt_gpu_observe(tnd_adapt_gpu *g, double now, double secs, double lat);

#endif
