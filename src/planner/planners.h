/*
 * Internal interface between nsp_plan_create() (planner.c) and the
 * planners (docs/design.md §5.2): static.c, disjoint.c, nested.c and the
 * megatron baseline, megatron.c. Each planner is one entry
 * (nsp_planner_entry_t) defined in its own file and listed by one line of
 * planner_table.c (docs/design/extending.md, "A planner").
 *
 * nsp_plan_create() validates the input once, resolves the parameters to
 * their defaults (planner_params.c) and fills an nsp_planner_input_t; a
 * planner reads it and returns a plan built with nsp_plan_build()
 * (prediction evaluated). Units follow cost.h: seconds and bytes PER LAYER
 * PER RANK, lengths in tokens.
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

/* ---- the planners' table (planner_table.c) ------------------------------ */

/** What a planner does beyond the common contract (nsp_planner_entry_t.caps). */
enum {
    /** The groups of one round of its plans are pairwise disjoint (and need
     *  not align): nsp_plan_validate() checks that for plans of this name;
     *  any other plan's groups must nest and align. */
    NSP_PLANNER_CAP_DISJOINT_ROUNDS = 1u << 0,
    /** With params.enable_ring its tree (params.level_degrees, or the
     *  default one) may have Ulysses x ring levels up to the ranks; without
     *  it the tree stays Ulysses-only, ring 1 (the disjoint planner). */
    NSP_PLANNER_CAP_RING_LEVELS = 1u << 1
};

/** One planner, as nsp_plan_create() runs it. Defined (const) in the
 *  planner's own file as nsp_planner_NAME_entry; no member is NULL. */
typedef struct nsp_planner_entry {
    const char        *name;    /**< its plans' nsp_plan_t.planner (< 32 bytes),
                                     what nsp_planner_kind_from_name() takes */
    nsp_planner_kind_t kind;    /**< params.kind selecting it, unique */
    unsigned           caps;    /**< NSP_PLANNER_CAP_* */
    /** The largest degree it may put a sequence at with these resolved
     *  parameters: every sequence must fit there alone, recomputed, or
     *  nsp_plan_create() fails before planning (NSP_ERR_INFEASIBLE). */
    int (*top_degree)(const nsp_planner_input_t *in);
    /** Plan the batch: a plan with its prediction evaluated (nsp_plan_build;
     *  plan_ms, the name, the ring flag and bound are set by the caller).
     *  Errors: NSP_ERR_INFEASIBLE (no plan within max_rounds; the message
     *  says why), NSP_ERR_INVALID_ARG (a parameter this planner cannot plan
     *  with), NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND (the MILP solver failed). */
    nsp_status_t (*plan)(const nsp_planner_input_t *in, nsp_plan_t **plan);
} nsp_planner_entry_t;

/** The entry of `kind`, or NULL when this build has none. */
const nsp_planner_entry_t *nsp_planner_find_kind(nsp_planner_kind_t kind);

/** The entry named `name` (borrowed), or NULL when none is (a plan of a
 *  user's planner, read from JSON). */
const nsp_planner_entry_t *nsp_planner_find_name(const char *name);

/** top_degree of the tree planners (nested, disjoint): the tree's top level. */
int nsp_planner_tree_top_degree(const nsp_planner_input_t *in);

/* ---- parameters (planner_params.c) --------------------------------------- */

/** Resolve params (borrowed) for `planner` into in's parameter fields, with
 *  their defaults; in->cost must be initialised. Errors: NSP_ERR_INVALID_ARG
 *  (a parameter out of range: the message names it and the rule). */
nsp_status_t nsp_planner_resolve_params(const nsp_planner_params_t *p,
                                        const nsp_planner_entry_t *planner,
                                        nsp_planner_input_t *in);

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
