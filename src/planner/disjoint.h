/*
 * Internal pieces of the disjoint planner: the exact cost of an assignment
 * and the polish (dj_round.c, shared by the greedy and the MILP) and the MILP
 * improvement per round (milp.c).
 */
#ifndef NSP_PLANNER_DISJOINT_H_
#define NSP_PLANNER_DISJOINT_H_

#include "planner/route.h"

/** The latency a group of degree d adds per layer: 4 a(d), 0 for d = 1. */
double nsp_dj_group_lat(const nsp_cost_t *cost, int d);

/**
 * Per-layer time of each round of a disjoint assignment (groups take C + K;
 * round_s[nrounds], caller-owned) and whether every group stays within
 * memory. Errors: NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_dj_round_times(const nsp_planner_input_t *in, const nsp_route_assign_t *a,
                                double *round_s, int *mem_ok);

/**
 * Polish a disjoint assignment: per round, move sequences off the slowest
 * group while that lowers it (memory kept, no group emptied).
 * Errors: NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_dj_polish(const nsp_planner_input_t *in, nsp_route_assign_t *a);

/**
 * Re-solve each round of `a` as a MILP (CBC or GLPK, params.time_limit_s per
 * round) starting from `a`'s groups; a round is replaced only if the solver's
 * answer is faster. Sets NSP_PLAN_FLAG_GREEDY_FALLBACK in *flags without a
 * solver (warning once) and NSP_PLAN_FLAG_SOLVER_TIMEOUT if a round hit the
 * limit. Errors: NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND (the solver failed).
 */
nsp_status_t nsp_dj_milp_improve(const nsp_planner_input_t *in, nsp_route_assign_t *a,
                                 unsigned *flags);

#endif /* NSP_PLANNER_DISJOINT_H_ */
