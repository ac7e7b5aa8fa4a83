/*
 * Internal plan construction and evaluation shared by the planners, the JSON
 * reader and the simulator. Planners work on flat arrays (a group list and
 * the group of each sequence) and turn them into an nsp_plan_t at the end.
 */
#ifndef NSP_PLANNER_PLAN_INTERNAL_H_
#define NSP_PLANNER_PLAN_INTERNAL_H_

#include "nspcomm.h"
#include "planner/cost.h"

/** One group of one round, as a planner builds it. */
typedef struct nsp_group_desc {
    int round;      /**< round index, 0-based */
    int rank0;      /**< first rank */
    int size;       /**< degree d */
    int recompute;  /**< 0/1 */
    int pipelined;  /**< 0/1 */
    int ring;       /**< ring degree inside the group (1 = Ulysses only) */
} nsp_group_desc_t;

/**
 * Build a plan from flat arrays: `groups` [ngroups] (borrowed) and
 * `seq_group` [nseqs] (borrowed; the index into `groups` of each sequence).
 * Groups that hold no sequence are dropped; rounds are numbered 0..max and
 * empty rounds dropped; sequences keep the order of their indices inside a
 * group. The prediction is evaluated; plan_ms is left 0 for the caller.
 * Errors: NSP_ERR_INVALID_ARG (a sequence without a valid group),
 * NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_plan_build(const char *planner, const nsp_model_t *model,
                            const nsp_cluster_t *cluster, const int64_t *lens,
                            int nseqs, const nsp_group_desc_t *groups, int ngroups,
                            const int *seq_group, nsp_plan_t **plan);

/** Allocate an empty plan (no rounds) holding a copy of the inputs.
 *  Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_plan_alloc(const char *planner, const nsp_model_t *model,
                            const nsp_cluster_t *cluster, const int64_t *lens,
                            int nseqs, nsp_plan_t **plan);

/** Per-rank, per-round breakdown of a plan (per layer, seconds and bytes). */
typedef struct nsp_rank_round_cost {
    double comp_s;      /**< C: compute incl. recompute factor and MoE term */
    double ep_s;        /**< the MoE part of comp_s */
    double xcpu_s;      /**< the exchange CPU part of comp_s (nsp_cost_group_xfer_cpu) */
    double k_pipe_s;    /**< pipelined exchange time (ring exchanges included) */
    double k_seq_s;     /**< non-pipelined exchange time */
    double ring_s;      /**< ring exchange time (the part of k_pipe_s that is ring) */
    double time_s;      /**< nsp_cost_rank_time(C, K_pipe, K_seq) */
    double tokens;      /**< tokens held (sum of s/d) */
    double mem_bytes;   /**< memory in this round */
} nsp_rank_round_cost_t;

/**
 * Evaluate one round of a plan: fill out[ranks] (caller-owned) per layer and
 * return the round's max rank time per layer in *round_s. Optional
 * per-level detail: if level_comp/level_comm are not NULL they are
 * [ranks * nlevels] arrays (caller-owned, zeroed here) indexed by
 * rank * nlevels + level, where level = log2 of the group size (sizes must
 * be powers of two for this detail; others are put at the nearest lower
 * level). Errors: NSP_ERR_INVALID_ARG (a group out of range).
 */
nsp_status_t nsp_plan_eval_round(const nsp_cost_t *cost, const nsp_plan_t *plan, int round,
                                 nsp_rank_round_cost_t *out, double *round_s,
                                 int nlevels, double *level_comp, double *level_comm);

/** Lower bound with an initialised cost (seconds per step). enable_ring:
 *  term (b) puts the longest sequence on every rank (nsp_cost_top_degree)
 *  instead of the largest Ulysses degree (docs/reference/cost-model.md). */
double nsp_lower_bound_cost(const nsp_cost_t *cost, const int64_t *lens, int nseqs,
                            int enable_ring);

/** Wall clock in seconds (monotonic), for planning times. */
double nsp_wtime(void);

#endif /* NSP_PLANNER_PLAN_INTERNAL_H_ */
