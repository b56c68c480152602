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

#endif
