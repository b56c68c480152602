/* Dynamic transfer (ATSInfer §4.4, Algorithm 2; docs/ARCHITECTURE.md:
 * Dynamic transfer): before a round, which CPU-default weight slices to
 * copy to a GPU slot and run there, so that the copy engine moves weights
 * while the CPU computes others and only the exposed part of a copy adds to
 * the round.
 *
 * The round is a sequence of items in execution order. The paper's DP keeps
 * the side of the last item as state and charges a promoted item the copy
 * time its preceding segment does not hide, each copy on its own. Copies
 * share one transfer stream and a few slots, so tandem adds the stream to
 * the state: the "credit" a, how long the stream has been free to copy
 * ahead when an item starts (at most cap: what the executor's ring of
 * slots holds ahead). A promoted item waits max(w - a, 0); the rest of the
 * credit carries on.
 * With every copy hidden this is the paper's objective; where copies
 * crowd, it sees that the stream is busy. Pure functions: no model, no
 * backend (tnd_xfer_choose below builds the items from the perf DB). */
#ifndef TND_SCHED_TRANSFER_H
#define TND_SCHED_TRANSFER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "sched/perf.h"
#include "sched/placement.h"
#include "tandem.h"

/* One op of a round, in execution order. */
typedef struct tnd_xfer_item {
    double t_cpu, t_gpu; /* seconds on each side (GPU: at least the host's queuing of it) */
    double w;            /* seconds to copy its weights to a slot (latency + bytes / PCIe) */
    double c_switch;     /* cost of a change of side just before it */
    int8_t side;         /* where it runs by default: TND_SIDE_CPU or TND_SIDE_GPU */
    bool candidate;      /* a CPU-default item that may be promoted */
    bool no_prefetch;    /* its copy cannot start before it is reached (an expert tensor waits
                            for the routing that chooses what to copy, unless the round copies
                            experts ahead: tnd_perf_experts_ahead) */
    int sid;             /* the slice it stands for (the caller's), or -1 */
} tnd_xfer_item;

/* The round time of promotion set prom[n] (1: promoted; only candidates may
 * be) under the model above: first_side before item 0, and a switch back
 * to last_side (>= 0) costing c_last after the last item. */
double tnd_xfer_eval(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                     const uint8_t *prom);

/* Algorithm 2: the promotion set minimizing tnd_xfer_eval, by a DP over
 * (item, side of the last item, credit in buckets of cap / 256), keeping
 * per cell the least time and its exact credit, then backtracking. The
 * buckets merge states whose credits differ by under cap / 256, so the
 * result can be that much per copy from the optimum (tests state it).
 * O(n * 2 * 257) time and memory. Writes prom[n] and *t (may be NULL).
 * TND_ERR_ARG for bad input (n < 0, non-finite or negative times),
 * TND_ERR_NOMEM. */
tnd_status tnd_xfer_dp(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                       uint8_t *prom, double *t);

/* Exhaustive search over the candidates' 2^k sets (k <= 20), for tests. */
tnd_status tnd_xfer_brute(const tnd_xfer_item *it, int n, double cap, int first_side, int last_side, double c_last,
                          uint8_t *prom, double *t);

/* The live corrections of the perf DB's times (sched/adapt.h): CPU times
 * and copy times multiplied by these; {1, 1} the DB as profiled. */
typedef struct tnd_xfer_scale {
    double cpu, pcie;
} tnd_xfer_scale;

/* The round of nt tokens at positions pos0.. under placement p as items
 * (the perf DB's times, scaled by sc (NULL: as profiled); the order and the
 * costs of tnd_perf_predict): writes up to cap_items items into it (NULL:
 * counts), returns how many. A split layer is one fixed item, its
 * promotion left to its own rule. */
int tnd_xfer_items(const tnd_model *m, const tnd_perf *pf, const tnd_xfer_scale *sc, const tnd_placement *p, int nt,
                   int pos0, tnd_xfer_item *it, int cap_items);

/* promote=auto's choice for one round: round_prom[sid] = 1 for each
 * candidate slice Algorithm 2 promotes, with n_slots slots (each the size
 * of the largest candidate, as exec/layout.c makes them; split layers'
 * expert tensors: tnd_perf_split_pays_to_promote's rule). *t (may be
 * NULL): the DP's round time. sc as for tnd_xfer_items. */
tnd_status tnd_xfer_choose(const tnd_model *m, const tnd_perf *pf, const tnd_xfer_scale *sc, const tnd_placement *p,
                           int n_slots, int nt, int pos0, uint8_t *round_prom, double *t);

#endif
