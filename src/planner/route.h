/*
 * The tree routing engine shared by the nested planner and the greedy of the
 * disjoint planner (route.c; algorithm and data structures described there).
 *
 * Nested mode: groups of all levels may share ranks (they nest); exchanges of
 * a rank's levels overlap. Disjoint mode: each rank belongs to at most one
 * used group per round (FlexSP's disjoint groups), nothing overlaps.
 */
#ifndef NSP_PLANNER_ROUTE_H_
#define NSP_PLANNER_ROUTE_H_

#include "planner/planners.h"

typedef enum {
    NSP_ROUTE_NESTED   = 0,
    NSP_ROUTE_DISJOINT = 1
} nsp_route_mode_t;

/** Where each sequence goes: flat arrays, all [nseqs]. */
typedef struct nsp_route_assign {
    int  nseqs;
    int  nrounds;
    int *round;   /**< round of each sequence */
    int *rank0;   /**< first rank of its group */
    int *size;    /**< degree of its group */
    int *rc;      /**< 1 if its group is recomputed */
} nsp_route_assign_t;

/* ---- assignments and plans from them (assign.c) ---- */

/** Allocate the arrays of an assignment for nseqs sequences.
 *  Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_route_assign_alloc(nsp_route_assign_t *a, int nseqs);
void         nsp_route_assign_free(nsp_route_assign_t *a);

/* ---- the routing engine (route.c) ---- */

/**
 * Route a batch (longest first down the tree, short ones on the leaves, local
 * moves; nested mode also gives single-level ranks a leaf sequence so their
 * exchange overlaps). Fills *a (allocated by the caller with
 * nsp_route_assign_alloc). *step_s: the engine's estimate, seconds per step.
 * Errors: NSP_ERR_INFEASIBLE (no routing within max_rounds), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_route(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                       nsp_route_assign_t *a, double *step_s);

/**
 * Build a plan from an assignment: sequences with the same (round, rank0,
 * size) share a group, whose ring degree is its level's (in->level_ring). pipeline_rule 1: a group is pipelined iff each of its
 * ranks holds another group in the round (nested); 0: nothing is pipelined.
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_route_plan(const nsp_planner_input_t *in, const char *planner,
                            const nsp_route_assign_t *a, int pipeline_rule, unsigned flags,
                            nsp_plan_t **plan);

/**
 * The static planner's best plan over the tree's degrees (in->level_degrees)
 * as an assignment (static.c); *step_s is its step in seconds (all layers).
 * Errors: NSP_ERR_INFEASIBLE (quiet: no level holds the batch),
 * NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_static_assign(const nsp_planner_input_t *in, nsp_route_assign_t *a,
                               double *step_s);

#endif /* NSP_PLANNER_ROUTE_H_ */
