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
 * The first routing of a nested search over a tree with ring levels, handed
 * to the search of the same batch over that tree's Ulysses levels alone
 * (nested.c routes both and keeps the faster plan). It is filled only when
 * that routing is provably the one the smaller tree would do (route.c, "The
 * first routing, shared"), so the smaller search takes it instead of
 * routing again and ends with the same plan. Zero it before the first use;
 * nsp_route_hint_free releases its arrays.
 */
typedef struct nsp_route_hint {
    int     valid;           /**< 1: filled and applicable */
    int     nlevels;         /**< the Ulysses levels of the tree it is for */
    int     trial;           /**< rounds of that routing */
    double  step;            /**< its exact step, seconds per layer */
    double  work, bound;     /**< the search constants it was routed under */
    int     r_keep, Rcap, coarse;
    int    *loc;             /**< [nseqs] round * nnodes + node in the smaller tree,
                                  by the engine's labels (longest first) */
    int    *rc;              /**< [nseqs] its group's flag */
} nsp_route_hint_t;

void nsp_route_hint_free(nsp_route_hint_t *h);

/**
 * nsp_route with a hint: make (not NULL) is filled from this search's first
 * routing where that routing can be shared; use (not NULL, valid) is taken
 * as this search's first routing where it applies. Either may be NULL.
 * Errors: as nsp_route.
 */
nsp_status_t nsp_route_shared(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                              nsp_route_hint_t *make, const nsp_route_hint_t *use,
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
