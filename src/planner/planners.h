/*
 * Internal interface between nsp_plan_create() (planner.c) and the
 * planners: static.c, disjoint.c, nested.c (docs/design.md §5.2) and the megatron
 * baseline, megatron.c.
 *
 * nsp_plan_create() validates the input once, resolves the parameters to
 * their defaults and fills an nsp_planner_input_t; a planner reads it and
 * returns a plan built with nsp_plan_build() (prediction evaluated). Units
 * follow cost.h: seconds and bytes PER LAYER PER RANK, lengths in tokens.
 */
#ifndef NSP_PLANNER_PLANNERS_H_
#define NSP_PLANNER_PLANNERS_H_

#include "planner/plan_internal.h"

/** Most tree levels a nested plan may have (degrees 1 .. 2^15). */
#define NSP_PLANNER_MAX_LEVELS 16

/** Default MILP time limit per round of the disjoint planner, seconds. */
#define NSP_PLANNER_DEFAULT_TIME_LIMIT_S 1.0
/** Default most rounds of a plan. */
#define NSP_PLANNER_DEFAULT_MAX_ROUNDS 64

/** Validated input of one planning call. Everything is borrowed or copied. */
typedef struct nsp_planner_input {
    nsp_cost_t     cost;             /**< model, cluster and their constants */
    const int64_t *lens;             /**< [nseqs] tokens, borrowed */
    int            nseqs;
    const int     *order;            /**< [nseqs] indices, longest first (ties: index) */
    const int64_t *order_lens;       /**< [nseqs] lens[order[k]], or NULL (the routing
                                          engine relabels the batch longest first) */
    const int     *order_rank;       /**< [nseqs] k where order[k] = i, or NULL */
    const int     *order_ident;      /**< [nseqs] 0, 1, ..., or NULL */
    const double  *lens_comp1;       /**< [nseqs] nsp_cost_comp(lens[i], 1), or NULL */
    double         mem_cap;          /**< activation bytes a rank may hold in one
                                          round: M - 16P/N - W, less a safety margin */
    int            static_degree;    /**< static: 0 = search every valid degree */
    int            static_recompute; /**< static: -1 = search both, else 0/1 */
    double         time_limit_s;     /**< disjoint: MILP time limit per round */
    int            nlevels;          /**< nested: levels of the tree */
    int            level_degrees[NSP_PLANNER_MAX_LEVELS]; /**< ascending, each divides
                                                               the next */
    int            level_ring[NSP_PLANNER_MAX_LEVELS];    /**< ring degree of each level:
                                                               1 = Ulysses, > 1 only with
                                                               enable_ring */
    int            enable_ring;      /**< groups may be Ulysses x ring (params) */
    int            max_rounds;       /**< most rounds a plan may use */
    int64_t        max_seqlen_per_rank; /**< megatron: 0 = search, else the knob */
    int            plain_search;     /**< nested routing: 1 = evaluate every option
                                          and refresh every aggregate in full (no
                                          exact shortcuts, no incremental or lazy
                                          updates, no cached per-sequence times,
                                          no routing abandoned on a bound; tests
                                          compare the two), 0 = the default */
    long          *abandoned;        /**< nested routing: if not NULL, counts the
                                          routings abandoned on a bound (tests) */
    long          *shared;           /**< nested routing: if not NULL, counts the
                                          routings taken from the ring tree's
                                          search (nsp_route_hint_t; tests) */
} nsp_planner_input_t;

/** The three planners. Each returns a plan with its prediction evaluated
 *  (plan_ms is set by the caller). Errors: NSP_ERR_INFEASIBLE (no plan within
 *  max_rounds; the message says why), NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND
 *  (the MILP solver failed). */
nsp_status_t nsp_planner_static(const nsp_planner_input_t *in, nsp_plan_t **plan);
nsp_status_t nsp_planner_disjoint(const nsp_planner_input_t *in, nsp_plan_t **plan);
nsp_status_t nsp_planner_nested(const nsp_planner_input_t *in, nsp_plan_t **plan);
/** Megatron-Core's dynamic context parallelism policy (megatron.c); also
 *  NSP_ERR_INVALID_ARG for a fixed max_seqlen_per_rank that cannot plan. */
nsp_status_t nsp_planner_megatron(const nsp_planner_input_t *in, nsp_plan_t **plan);

/* ---- per-sequence costs (seq_cost.c) and aligned placement (assign.c) -- */

/** The batch's views in its order (order_lens, order_rank, order_ident and
 *  lens_comp1 of *in, from its lens and order), in one block returned in
 *  *block (the caller frees it after the last use of *in).
 *  Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_planner_order_views(nsp_planner_input_t *in, int64_t **block);

/** Per-rank cost of ONE sequence of s tokens at degree d (per layer):
 *  compute (with the recompute factor and the MoE term of its s/d tokens),
 *  a2a bytes (with the recompute factor; latency excluded: it is paid once
 *  per group) and activation bytes. */
typedef struct nsp_seq_cost {
    double comp_s;     /**< rcf * comp(s, d) + ep_time(s/d) */
    double bytes;      /**< rcb * a2a bytes (at B(u); a2a_bytes(s, d) for ring 1) */
    double ring_bytes; /**< ring bytes, recomputed forward included (0 for ring 1) */
    double mem_bytes;  /**< s/d * (activation + ring buffer) bytes per token */
} nsp_seq_cost_t;

/** The cost of a sequence in a Ulysses group of degree d (ring 1). */
void nsp_seq_cost(const nsp_cost_t *cost, double s, int d, int recompute,
                  nsp_seq_cost_t *out);

/** The same in a group of degree d with ring degree `ring` (d = u * ring). */
void nsp_seq_cost_ring(const nsp_cost_t *cost, double s, int d, int ring, int recompute,
                       nsp_seq_cost_t *out);

/** The ring degree of a group of degree d in this planning call: 1 without
 *  rings, else nsp_cost_ring_for_degree(). */
int nsp_planner_ring_of(const nsp_planner_input_t *in, int d);

/** Pack groups of the given sizes (powers of two, any order) into aligned
 *  ranges of [0, ranks): rank0_out[i] for size[i]. Largest first, so every
 *  offset is a multiple of the size placed there. Errors: NSP_ERR_INTERNAL
 *  (sizes do not fit). */
nsp_status_t nsp_pack_aligned(const int *size, int n, int ranks, int *rank0_out);

#endif /* NSP_PLANNER_PLANNERS_H_ */
