/*
 * SVG picture of one batch for perf/nsp_sim: one panel per planner, per-rank
 * bars stacked by tree level (compute dark, all-to-all light, per level),
 * the rank's modelled time after overlap as a black step line, the step time
 * and a dashed line at the lower bound, and a legend. All panels share one
 * time axis so they compare at a glance; readable for 8 to 1024+ ranks
 * (ranks with equal bars are drawn as one rectangle).
 */
#ifndef NSP_PERF_SIM_SVG_H_
#define NSP_PERF_SIM_SVG_H_

#include "nspcomm.h"

/**
 * Write the picture of `nplans` plans of the same batch (borrowed) to
 * `path`. `caption` (borrowed) is printed under the title (the run's config).
 * Errors: NSP_ERR_IO (cannot write), NSP_ERR_NO_MEMORY, NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_sim_svg_write(const char *path, nsp_plan_t *const *plans, int nplans,
                               double lower_bound_s, const char *caption);

#endif /* NSP_PERF_SIM_SVG_H_ */
