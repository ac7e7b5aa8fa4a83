/*
 * Internals of the routing engine (route.h), shared by its three files: the
 * load tree (route_tree.c: the tree's shape, per-round node aggregates, the
 * least-loaded-group query, placing sequences), filling it (route_fill.c:
 * option scores, the long sequences through the tree, the short ones on the
 * leaves, one routing pass, the exact step and the single-level fix), and
 * the search (route.c: state, rounds, candidates, local moves). Units: seconds
 * and bytes per layer per rank (cost.h).
 */
#ifndef NSP_PLANNER_ROUTE_INTERNAL_H_
#define NSP_PLANNER_ROUTE_INTERNAL_H_

#include "planner/route.h"
#include "common/log.h"

#define NEST_INF 1e300

/* libm's fmax/fmin are calls (NaN rules); these values are never NaN. */
static inline double dmax(double a, double b)
{
    return a > b ? a : b;
}

static inline double dmin(double a, double b)
{
    return a < b ? a : b;
}
/* A sequence is "long" (routed through the whole tree) if alone on a leaf it
 * would take more than this share of the round's target time ... */
#define NEST_LONG_TIME_SHARE 0.25
/* ... or more than this share of a rank's activation memory. */
#define NEST_LONG_MEM_SHARE 0.25
/* Phase 1 keeps this many times the short sequences' recomputed share of
 * memory free on every rank. */
#define NEST_RESERVE_MARGIN 1.25
/* Short sequences go recomputed when kept they would need more than this
 * share of the memory left on the leaves. */
#define NEST_LEAF_FILL 0.9
/* Share of the memory that kept activations may fill in memory-tight
 * rounds (the rest absorbs the packing). */
#define NEST_MEM_FILL 0.9
/* Local search budget: move trials per sequence of the batch (plus a floor). */
#define NEST_MOVE_TRIALS_PER_SEQ 2
#define NEST_MOVE_TRIALS_MIN 2000
/* Round search: try one round first when the longest sequence alone takes
 * more than this share of the balanced time; stop adding rounds when one more
 * gains less than NEST_MORE_ROUNDS_GAIN; stop at once within NEST_GOOD_ENOUGH
 * of the bound. */
#define NEST_ONE_ROUND_SHARE 0.6
#define NEST_MORE_ROUNDS_GAIN 0.001
#define NEST_GOOD_ENOUGH 1.03
/* ... and stop after r_keep rounds if one round was this much faster. */
#define NEST_ONE_ROUND_WINS 0.95
/* Route again with a higher target when the step is over NEST_RETRY_GAP
 * times the bound (at most NEST_RETRIES times, target = NEST_RETRY_SCALE x
 * the time reached per round). */
#define NEST_RETRY_GAP 1.08
#define NEST_RETRIES 2
#define NEST_RETRY_SCALE 0.95
/* The static planner's plan on the tree's levels is a candidate for batches
 * of at most this many sequences per rank ... */
#define NEST_STATIC_CANDIDATE_SEQS_PER_RANK 4
/* ... and always on at most this many ranks (a handful of groups). */
#define NEST_STATIC_CANDIDATE_RANKS 16
/* Local moves run only when the step is over this multiple of the bound. */
#define NEST_LOCAL_GAP 1.01
/* Sequences tried per group on the slowest rank's path in one local step. */
#define NEST_MOVE_SEQS_PER_GROUP 24

/* ---- the tree shape (shared by all rounds) ------------------------------ */

typedef struct nest_shape {
    int     ranks;
    int     nl;                               /* levels */
    int     deg[NSP_PLANNER_MAX_LEVELS];      /* degree of each level */
    int     ng[NSP_PLANNER_MAX_LEVELS];       /* groups of each level */
    int     off[NSP_PLANNER_MAX_LEVELS];      /* first node id of each level */
    double  bw[NSP_PLANNER_MAX_LEVELS];       /* a2a bandwidth B(u), bytes/s (u = d/ring) */
    double  lat4[NSP_PLANNER_MAX_LEVELS];     /* 4a(u), seconds (0 for u = 1) */
    int     ring[NSP_PLANNER_MAX_LEVELS];     /* ring degree of each level (1: Ulysses) */
    double  rcoef[NSP_PLANNER_MAX_LEVELS][2]; /* ring seconds per token of the group's
                                                 sequences (kept, recomputed): ring bytes
                                                 per token / B(d) */
    double  rlat[NSP_PLANNER_MAX_LEVELS][2];  /* ring latency: messages * a(d) */
    double  ringm[NSP_PLANNER_MAX_LEVELS];    /* ring buffer bytes per token held */
    double  kcoef[NSP_PLANNER_MAX_LEVELS][2]; /* exchange seconds per token of one of the
                                                 group's sequences (kept, recomputed):
                                                 rcb * a2a bytes / B(u) + rcoef; the
                                                 bounds of the exact shortcuts */
    int     nnodes;
    int    *level;        /* [nnodes] */
    int    *parent;       /* [nnodes] node id, -1 for a root */
    int    *first_child;  /* [nnodes] node id of the first child, -1 on level 0 */
    int    *nchild;       /* [nnodes] */
    int     nroots;
    int    *roots;        /* [nroots] root node ids by rank */
    int    *vslot;        /* [nnodes] leaf index in the virtual tree, -1 if not a root */
    int     vsize;        /* power of two >= nroots */
    int    *moff;         /* [nnodes] first entry of node n in a round's mm1 / mmm: a node
                             of level l has the entries of the levels 0..l (above its own
                             level there is nothing below it) */
    size_t  mtotal;       /* entries of mm1 (and of mmm) per round */
} nest_shape_t;

/* One group of one round. Sums are over its sequences, for the whole
 * sequence (comp, tokens) or per rank (bytes); adds are per rank. */
typedef struct nest_node {
    double comp;     /* sum of comp(s, 1): lin + attn seconds per layer */
    double tokens;   /* sum of s */
    double bytes;    /* sum of the group's a2a bytes (a2a_bytes(s, d) for ring 1): bytes
                        per rank, no recompute factor */
    double add1, add2, addm;   /* per-rank L1, L2, activation bytes this group adds */
    double agg1, agg2, aggm;   /* max over the ranks below of the sum down from here */
    int    nseq;
    int    occ;      /* used groups strictly below (disjoint mode) */
    int    rc;       /* 1: recomputed */
    int    head;     /* first sequence of the group, -1 if empty */
} nest_node_t;

/* Leaves waiting for the need to fall to their free memory (lazy entries:
 * an entry whose stamp is old is dropped). */
typedef struct leaf_heap {
    double *free;
    int    *leaf, *stamp;
    int     n, cap;
} leaf_heap_t;

typedef struct nest_round {
    nest_node_t *node;   /* [nnodes] */
    double      *mm1;    /* [mtotal]: at moff[n] + l' (l' <= level of n) the min over the
                            level-l' groups below of max L1 */
    double      *mmm;    /* [mtotal]: the same for max memory */
    double      *v1, *v2, *vm;   /* [2 * vsize] virtual tree over the roots: max aggs */
    double      *vmm1, *vmmm;    /* [2 * vsize * nl] and the min-max per level */
    /* leaf phase: a segment tree over the level-0 groups */
    double      *leaf1, *leaf2, *leafm;  /* [ng0] absolute L1, L2, memory of each leaf */
    /* Per mode (0: kept placement, 1: recomputed, flipping the leaf), a min
     * tree over the leaves of their L1, counting only leaves with at least
     * the mode's current need free (needs only fall: sequences come longest
     * first), and a max-heap of the other leaves by free memory, re-admitted
     * when the need falls to them. The query then finds exactly the least
     * loaded leaf with room at the root. */
    double      *lkey[2];     /* [lsize] per leaf: its L1 if it has the mode's need
                                 free, else NEST_INF (also for the padding leaves) */
    int         *win[2];      /* [2 * lsize] the leaf of the least key below tree node v
                                 (the leftmost on ties; node v's children are 2v and
                                 2v + 1, leaf j is node lsize + j and win = j there) */
    double      *need[2];     /* current need of each mode */
    leaf_heap_t  wait[2];
    int         *stamp;       /* [ng0] bumped on every change of a leaf */
    /* Leaves changed since mode m's tree was last read: the tree takes them
     * at its next query (a tree is a function of its leaves' keys, so the
     * order of the updates does not matter). */
    int         *dirty[2];    /* [ng0] leaf indices */
    int          ndirty[2];
    unsigned char *is_dirty[2]; /* [ng0] 1 if the leaf is in dirty[m] */
} nest_round_t;

typedef struct nest_state {
    const nsp_planner_input_t *in;
    const nsp_cost_t          *cost;
    nsp_route_mode_t           mode;
    int                        only_level; /* >= 0: every sequence at this level */
    int                        rc_leaves;  /* 1: short sequences go recomputed */
    int64_t                    rc_below;   /* sequences this short or shorter go
                                              recomputed (memory-tight rounds) */
    nest_shape_t               sh;
    double                     eta1;     /* 1 - eta */
    double                     rfix;     /* fixed cost of a used round, seconds per
                                            layer (round_s / L) */
    double                     cap;      /* activation bytes per rank per round */
    double                     a_keep, a_rc;
    int                        R;        /* rounds in use */
    int                        Rcap;     /* most rounds */
    int                        nalloc;   /* rounds allocated so far (lazily) */
    nest_round_t              *round;    /* [Rcap] */
    int                        lsize;    /* power of two >= ng[0] */
    int                       *loc;      /* [nseqs] round * nnodes + node, -1 if unplaced */
    int                       *next, *prev;  /* [nseqs] links inside a group */
    double                    *comp1;    /* [nseqs] comp(s, 1) */
    double                    *alone;    /* [nseqs * nl]: row k, the k-th sequence of the
                                            batch order alone at each level (per-rank L1,
                                            kept), for k < nalone */
    int                        nalone;
    double                     target;   /* (area placed + work left) / (N * R): the
                                            balanced round time, raised as comm and
                                            recomputation add area */
    double                     target_floor; /* the target never drops below this */
    double                     cutoff;   /* abandon a routing whose exact step cannot be
                                            below this (nsp_nest_route_all), per layer */
    double                     a_placed; /* rank-seconds per layer placed so far */
    double                     w_left;   /* least rank-seconds of the sequences left */
    long                       trials;   /* local-search trials left */
    int                       *xlev;     /* [ranks] scratch of the exact evaluation: the
                                            nonempty groups holding each rank */
    double                    *xterm;    /* [3 * ranks] its per-rank C, Kp, Ks */
    double                     kept_demand; /* activation bytes of the batch kept, summed
                                               in the caller's order */
    int                        share_nu; /* > 0 while a routing is watched for an
                                            nsp_route_hint_t: the tree's Ulysses levels
                                            (those below share_nu) */
    int                        share_broken; /* 1 once that routing did what the tree of
                                                its Ulysses levels alone would not */
    const int                 *by_caller; /* [nseqs] where nsp_route relabeled the batch
                                             longest first: the state's sequence of the
                                             caller's c-th (borrowed); NULL: the same */
    const int64_t             *caller_lens;  /* [nseqs] with by_caller: the caller's lengths
                                                and their comp(s, 1), read in the caller's */
    const double              *caller_comp1; /* order by the restore (borrowed) */
} nest_state_t;

/* What a round whose slowest rank takes m adds to the step, per layer: m and
 * its fixed cost if it is used, nothing if empty. Every step the search
 * compares (the state's, a move's before and after) sums these. */
static inline double nest_round_term(const nest_state_t *st, double m)
{
    return m > 0.0 ? m + st->rfix : 0.0;
}

/* A candidate place for one sequence. */
typedef struct nest_option {
    int    r, node, rc;    /* round, group, recompute flag of the group afterwards */
    double peak;           /* slowest rank of the group afterwards */
    double delta;          /* raise of the round's reference time */
    double area;           /* ranks x added per-rank time (cost in rank-seconds) */
    double score;          /* delta + area / N: the raise now plus the share it adds */
    double slack;          /* reference - peak: room left in the round */
    double obj;            /* local search: the step afterwards */
    int    valid;
} nest_option_t;

/* ---- the load tree (route_tree.c) ---- */

/** Free a shape built by nsp_nest_shape_init. */
void nsp_nest_shape_free(nest_shape_t *sh);
/** The tree of in->level_degrees over the ranks (levels, nodes, parents,
 *  children, roots and the binary tree over them). Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_nest_shape_init(nest_shape_t *sh, const nsp_planner_input_t *in);
/** Free one round's arrays. */
void nsp_nest_round_free(nest_round_t *rd);
/** Allocate one round's nodes, leaf arrays and min trees for st's shape.
 *  Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_nest_round_alloc(nest_state_t *st, nest_round_t *rd);
/** Ring exchange seconds of level l's group holding `tokens` (0 for ring 1). */
double nsp_nest_ring_time(const nest_state_t *st, int l, double tokens, int rc);
/** Activation (+ ring buffer) bytes per token held at level l, kept or recomputed. */
double nsp_nest_mem_per_token(const nest_state_t *st, int l, int rc);
/** Recompute a node's per-rank adds (add1, add2, addm) from its sums. */
void nsp_nest_node_adds(const nest_state_t *st, int l, nest_node_t *nd);
/** Refresh the aggregates on the path from node n to its root. */
void nsp_nest_propagate(const nest_state_t *st, nest_round_t *rd, int n);
/** Rebuild every aggregate of a round bottom-up from the nodes' adds; the
 *  adds from the nodes' sums first if with_adds. */
void nsp_nest_round_rebuild(const nest_state_t *st, nest_round_t *rd, int with_adds);
/** Empty round rd (the values a rebuild of empty groups gives). */
void nsp_nest_round_clear(const nest_state_t *st, nest_round_t *rd);
/** The round's slowest rank, per layer (0 if empty). */
double nsp_nest_round_max(const nest_state_t *st, const nest_round_t *rd);
/** Absolute L1, L2 and memory maxima over the ranks of node n. */
void nsp_nest_node_abs(const nest_state_t *st, const nest_round_t *rd, int n,
                       double *l1, double *l2, double *m);
/** The least loaded group of level l with `need` bytes free on all its
 *  ranks (in disjoint mode only compatible groups), or -1. */
int nsp_nest_find_group(const nest_state_t *st, const nest_round_t *rd, int l, double need);
/** Add (sign 1) or remove (-1) sequence i's sums at node nd of level l. */
void nsp_nest_node_account(const nest_state_t *st, nest_node_t *nd, int l, int i, int sign);
/** Put sequence i into node n of round r with flag rc: its sums, links and
 *  location only (the adds and aggregates wait for a rebuild). */
void nsp_nest_place_sums(nest_state_t *st, int i, int r, int n, int rc);
/** The same with sequence i's length and comp(s, 1) given (they are read
 *  in another order, e.g. the caller's, where that is in sequence). */
void nsp_nest_place_sums_of(nest_state_t *st, int i, int r, int n, int rc, int64_t len,
                            double comp1);
/** Put sequence i into node n of round r, recomputed if rc; refresh the
 *  path if do_propagate, else the node's adds only. */
void nsp_nest_place(nest_state_t *st, int i, int r, int n, int rc, int do_propagate);
/** Take sequence i out of its node (the path is refreshed). */
void nsp_nest_unplace(nest_state_t *st, int i);

/** A routing state for in's batch and tree, mode, up to Rcap rounds (none
 *  allocated yet). Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_nest_state_init(nest_state_t *st, const nsp_planner_input_t *in,
                                 nsp_route_mode_t mode, int Rcap);
/** Free a state (every round allocated so far). */
void nsp_nest_state_free(nest_state_t *st);
/** Allocate rounds up to R (lazily: large trees cost memory per round).
 *  Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_nest_ensure_rounds(nest_state_t *st, int R);

/* ---- filling (route_fill.c) ---- */

/** A lower bound of the per-rank L1 that sequence i adds to any group of
 *  level l (rc: recomputed), seconds per layer, kept a little below what
 *  floating point evaluates: the exact shortcuts of the option searches. */
double nsp_nest_d1_bound(const nest_state_t *st, int i, int l, int rc);
/** Evaluate sequence i in node n of round r (rc: recomputed) against the
 *  round's reference time; 0 if it does not fit. */
int nsp_nest_eval_option(const nest_state_t *st, int i, int r, int n, int rc, double ref,
                             nest_option_t *opt);
/** Empty every round of the state. */
void nsp_nest_state_clear(nest_state_t *st);
/** Step of the state per layer: sum of the used rounds' maxima and fixed costs. */
double nsp_nest_state_step(const nest_state_t *st);
/** Route the whole batch in R rounds: 1 if routed, 0 if some sequence found
 *  no place, -1 if abandoned after its long sequences because a bound shows
 *  that it holds the batch and ends with an exact step >= st->cutoff
 *  (NEST_INF: never; nor under plain_search). */
int nsp_nest_route_all(nest_state_t *st, int R, double work);
/** Exact per-layer step (pipelined only where each rank holds another
 *  level), round fixed costs included (scratch: st->xlev, st->xterm). */
double nsp_nest_state_exact(const nest_state_t *st);
/** Flip recomputed groups back to kept where memory allows (route.c; never
 *  slower). */
void nsp_nest_unflip_groups(nest_state_t *st);
/** Local moves (route.c): move sequences off each round's slowest rank to
 *  the place that lowers the step (round fixed costs included on both
 *  sides) most, while it drops and st->trials lasts; every accepted move
 *  lowers nsp_nest_state_step. */
void nsp_nest_local_moves(nest_state_t *st);
/** Give ranks that hold a single exchanging level a short leaf sequence of
 *  the round, kept where the round's exact time drops. Errors: NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_nest_fix_lonely_ranks(nest_state_t *st);

#endif /* NSP_PLANNER_ROUTE_INTERNAL_H_ */
