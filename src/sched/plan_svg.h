/* The placement as a picture (`tandem plan`): layers x tensor roles. */
#ifndef TND_SCHED_PLAN_SVG_H
#define TND_SCHED_PLAN_SVG_H

#include "tandem.h"

/* Writes an SVG of a placement: one row per layer, one column per tensor role (role names given),
 * each cell colored by backend (GPU / CPU / mixed for expert tensors split across both, with the
 * fraction of experts on the GPU shown as a partial fill), a legend, a title line. cells[row*n_roles+role]
 * = fraction on GPU in [0,1], or -1 (any negative) if the role is absent in that row. Non-layer rows
 * (embedding, output) may be passed as extra rows with their own labels. Every cell is one
 * <rect class="cell">; partial fills are extra <rect class="frac">, legend swatches <rect class="legend">.
 * Writes to path.tmp.PID then renames; TND_ERR_IO (nothing left behind) or TND_ERR_ARG on bad input. */
tnd_status tnd_plan_svg(const char *path, const char *title, int n_rows, const char *const *row_labels,
                        int n_roles, const char *const *role_names, const float *cells);

#endif
