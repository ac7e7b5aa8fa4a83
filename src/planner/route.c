/*
 * The routing engine: the nested planner (NSP tree routing, DESIGN §5.2) and,
 * in disjoint mode, a greedy of the disjoint planner. docs/planners.md has
 * the full description; in short:
 *
 * The tree: levels of degrees deg[0] < deg[1] < ... (each divides the next,
 * default 1, 2, 4, ... up to the largest valid degree); group j of level l is
 * ranks [j*deg[l], (j+1)*deg[l]). Every round has its own copy of the tree.
 *
 * Per-rank time is linear per branch: with C the compute and K the pipelined
 * exchange of a rank, max(C, K) + (1-eta)*min(C, K) = max(L1, L2) with
 * L1 = C + (1-eta)K and L2 = (1-eta)C + K. A group adds the same C and K to
 * each of its ranks, so every tree node keeps its own per-rank additions
 * (add1, add2, addm = memory) and the maximum of L1, L2 and memory over the
 * ranks below it (agg*, relative to its ancestors). A group's slowest rank is
 * agg + the adds of its ancestors: O(levels). To find "the least loaded group
 * of level l with memory for x bytes" each node also keeps, per lower level
 * l', the smallest max-L1 (mm1) and the smallest max-memory (mmm) of the
 * level-l' groups below it; a descent from the roots (a binary tree over the
 * roots on top) follows the child with room and the smallest mm1: O(levels)
 * per query, O(levels^2) per update, never a rescan of ranks.
 *
 * Routing, for R rounds:
 *  0. Memory-tight R (fewer rounds than kept activations need): the shortest
 *     sequences, whose recomputation frees memory at the lowest cost, are
 *     marked recomputed up front until the rest fits.
 *  1. Long sequences (those that would not sit comfortably on one leaf),
 *     longest first, through the tree: per round, the smallest level at
 *     which the sequence alone stays under the round's reference time
 *     (max(round's slowest rank, balanced target)), plus the next level when
 *     memory binds; the least loaded group with room there, kept or
 *     recomputed (a kept group may flip). Score: raise of the reference +
 *     area / N; ties to the most room left. Memory for the short sequences
 *     (recomputed) is kept free on every rank.
 *  2. Short sequences fill the leaves: per round and mode (kept, recomputed)
 *     a min tree of leaf loads over the leaves with room for the current
 *     need, plus a heap of the leaves waiting for the need to fall to them:
 *     exactly the least loaded leaf with room, O(log N) amortised.
 *  3. Recomputed groups that fit kept flip back; ranks holding a single
 *     exchanging level get a short leaf sequence so their exchange overlaps.
 * Candidates (R values, a retry with a higher target for coarse batches, the
 * static plan on the tree's levels for coarse batches) are compared by their
 * exact step; the best gets local moves (sequences of the slowest rank's
 * groups moved to where the step drops most).
 *
 * Ring levels (params.enable_ring; docs/cost-model.md): a level whose ring
 * degree r > 1 (d = u * r) prices its all-to-all at the subgroup's degree u
 * (bw, lat4), adds the ring exchange (rcoef, rlat: linear in the group's
 * tokens) to the group's exchange K, and its ring buffers to the memory per
 * token (ringm); the exact comparison (round_exact) counts the ring as
 * overlapping always. With r = 1 every term is the v1 one, bit for bit.
 *
 * Disjoint mode: the same engine with eta = 0 (nothing overlaps) and only
 * "compatible" groups offered: a used group (to join it) or one whose ranks
 * hold nothing yet in the round (no used group above or below it). Every
 * sequence goes through step 1 over all levels; the result is a set of
 * disjoint aligned groups per round.
 */
#include "planner/route.h"
#include "common/log.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    int     nnodes;
    int    *level;        /* [nnodes] */
    int    *parent;       /* [nnodes] node id, -1 for a root */
    int    *first_child;  /* [nnodes] node id of the first child, -1 on level 0 */
    int    *nchild;       /* [nnodes] */
    int     nroots;
    int    *roots;        /* [nroots] root node ids by rank */
    int    *vslot;        /* [nnodes] leaf index in the virtual tree, -1 if not a root */
    int     vsize;        /* power of two >= nroots */
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
    double      *mm1;    /* [nnodes * nl]: min over level-l' groups below of max L1 */
    double      *mmm;    /* [nnodes * nl]: min over level-l' groups below of max memory */
    double      *v1, *v2, *vm;   /* [2 * vsize] virtual tree over the roots: max aggs */
    double      *vmm1, *vmmm;    /* [2 * vsize * nl] and the min-max per level */
    /* leaf phase: a segment tree over the level-0 groups */
    double      *leaf1, *leaf2, *leafm;  /* [ng0] absolute L1, L2, memory of each leaf */
    /* Per mode (0: kept placement, 1: recomputed, flipping the leaf), a min
     * tree over the leaves of their L1, counting only leaves with at least
     * the mode's current need free (needs only fall: sequences come longest
     * first), and a max-heap of the other leaves by free memory, re-admitted
     * when the need falls to them. The descent then finds exactly the least
     * loaded leaf with room. */
    double      *key[2];      /* [2 * lsize] */
    double      *need[2];     /* current need of each mode */
    leaf_heap_t  wait[2];
    int         *stamp;       /* [ng0] bumped on every change of a leaf */
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
    double                     target;   /* (area placed + work left) / (N * R): the
                                            balanced round time, raised as comm and
                                            recomputation add area */
    double                     target_floor; /* the target never drops below this */
    double                     a_placed; /* rank-seconds per layer placed so far */
    double                     w_left;   /* least rank-seconds of the sequences left */
    long                       trials;   /* local-search trials left */
} nest_state_t;

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

/* ---- shape --------------------------------------------------------------- */

static void shape_free(nest_shape_t *sh)
{
    free(sh->level);
    free(sh->parent);
    free(sh->first_child);
    free(sh->nchild);
    free(sh->roots);
    free(sh->vslot);
    memset(sh, 0, sizeof(*sh));
}

typedef struct root_key {
    int rank0, id;
} root_key_t;

static int cmp_root(const void *a, const void *b)
{
    const root_key_t *x = a, *y = b;

    return (x->rank0 > y->rank0) - (x->rank0 < y->rank0);
}

static nsp_status_t shape_init(nest_shape_t *sh, const nsp_planner_input_t *in)
{
    const nsp_cost_t *cost = &in->cost;
    root_key_t       *keys = NULL;
    int               n = 0;

    memset(sh, 0, sizeof(*sh));
    sh->ranks = cost->cluster.ranks;
    sh->nl    = in->nlevels;
    for (int l = 0; l < sh->nl; ++l) {
        sh->deg[l]  = in->level_degrees[l];
        sh->ng[l]   = sh->ranks / sh->deg[l];
        sh->off[l]  = n;
        sh->ring[l] = in->level_ring[l] > 0 ? in->level_ring[l] : 1;
        {
            const int u = sh->deg[l] / sh->ring[l];
            sh->bw[l]   = nsp_cost_bw(cost, u);
            sh->lat4[l] = u > 1 ? NSP_COST_A2A_PER_LAYER * nsp_cost_lat(cost, u) : 0.0;
        }
        for (int rc = 0; rc <= 1; ++rc) {
            /* nsp_cost_ring_bytes is linear in s: its value at s = 1 */
            sh->rcoef[l][rc] = sh->ring[l] > 1 ?
                nsp_cost_ring_bytes(cost, 1.0, sh->deg[l], sh->ring[l], rc) /
                nsp_cost_bw(cost, sh->deg[l]) : 0.0;
            sh->rlat[l][rc] = nsp_cost_ring_messages(sh->ring[l], rc) *
                              nsp_cost_lat(cost, sh->deg[l]);
        }
        sh->ringm[l] = nsp_cost_ring_mem_per_token(cost, sh->deg[l], sh->ring[l]);
        n += sh->ng[l];
    }
    sh->nnodes      = n;
    sh->level       = malloc(sizeof(int) * (size_t)n);
    sh->parent      = malloc(sizeof(int) * (size_t)n);
    sh->first_child = malloc(sizeof(int) * (size_t)n);
    sh->nchild      = malloc(sizeof(int) * (size_t)n);
    sh->vslot       = malloc(sizeof(int) * (size_t)n);
    keys            = malloc(sizeof(*keys) * (size_t)n);
    if (sh->level == NULL || sh->parent == NULL || sh->first_child == NULL ||
        sh->nchild == NULL || sh->vslot == NULL || keys == NULL) {
        free(keys);
        shape_free(sh);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate a tree of %d "
                         "groups", n);
    }
    for (int l = 0; l < sh->nl; ++l) {
        for (int j = 0; j < sh->ng[l]; ++j) {
            const int id = sh->off[l] + j;
            sh->level[id] = l;
            sh->vslot[id] = -1;
            if (l > 0) {
                const int ratio = sh->deg[l] / sh->deg[l - 1];
                sh->first_child[id] = sh->off[l - 1] + j * ratio;
                sh->nchild[id]      = ratio;
            } else {
                sh->first_child[id] = -1;
                sh->nchild[id]      = 0;
            }
            sh->parent[id] = -1;
            if (l + 1 < sh->nl) {
                const int p = j * sh->deg[l] / sh->deg[l + 1];
                if (p < sh->ng[l + 1]) {
                    sh->parent[id] = sh->off[l + 1] + p;
                }
            }
            if (sh->parent[id] < 0) {
                keys[sh->nroots].rank0 = j * sh->deg[l];
                keys[sh->nroots].id    = id;
                sh->nroots++;
            }
        }
    }
    qsort(keys, (size_t)sh->nroots, sizeof(*keys), cmp_root);
    sh->roots = malloc(sizeof(int) * (size_t)(sh->nroots > 0 ? sh->nroots : 1));
    if (sh->roots == NULL) {
        free(keys);
        shape_free(sh);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate %d roots",
                         sh->nroots);
    }
    for (int k = 0; k < sh->nroots; ++k) {
        sh->roots[k] = keys[k].id;
        sh->vslot[keys[k].id] = k;
    }
    free(keys);
    sh->vsize = 1;
    while (sh->vsize < sh->nroots) {
        sh->vsize *= 2;
    }
    return NSP_OK;
}

/* ---- per-round state ----------------------------------------------------- */

static void round_free(nest_round_t *rd)
{
    free(rd->node);
    free(rd->mm1);
    free(rd->mmm);
    free(rd->v1);
    free(rd->v2);
    free(rd->vm);
    free(rd->vmm1);
    free(rd->vmmm);
    free(rd->leaf1);
    free(rd->leaf2);
    free(rd->leafm);
    for (int m = 0; m < 2; ++m) {
        free(rd->key[m]);
        free(rd->need[m]);
        free(rd->wait[m].free);
        free(rd->wait[m].leaf);
        free(rd->wait[m].stamp);
    }
    free(rd->stamp);
    memset(rd, 0, sizeof(*rd));
}

static nsp_status_t round_alloc(nest_state_t *st, nest_round_t *rd)
{
    const nest_shape_t *sh = &st->sh;
    const size_t        nn = (size_t)sh->nnodes, nl = (size_t)sh->nl;
    const size_t        vv = 2 * (size_t)sh->vsize, ls = 2 * (size_t)st->lsize;

    rd->node  = calloc(nn, sizeof(*rd->node));
    rd->mm1   = malloc(sizeof(double) * nn * nl);
    rd->mmm   = malloc(sizeof(double) * nn * nl);
    rd->v1    = malloc(sizeof(double) * vv);
    rd->v2    = malloc(sizeof(double) * vv);
    rd->vm    = malloc(sizeof(double) * vv);
    rd->vmm1  = malloc(sizeof(double) * vv * nl);
    rd->vmmm  = malloc(sizeof(double) * vv * nl);
    rd->leaf1 = malloc(sizeof(double) * (size_t)sh->ng[0]);
    rd->leaf2 = malloc(sizeof(double) * (size_t)sh->ng[0]);
    rd->leafm = malloc(sizeof(double) * (size_t)sh->ng[0]);
    for (int m = 0; m < 2; ++m) {
        rd->key[m]  = malloc(sizeof(double) * ls);
        rd->need[m] = malloc(sizeof(double));
    }
    rd->stamp = calloc((size_t)sh->ng[0], sizeof(int));
    if (rd->node == NULL || rd->mm1 == NULL || rd->mmm == NULL || rd->v1 == NULL ||
        rd->v2 == NULL || rd->vm == NULL || rd->vmm1 == NULL || rd->vmmm == NULL ||
        rd->leaf1 == NULL || rd->leaf2 == NULL || rd->leafm == NULL || rd->key[0] == NULL ||
        rd->key[1] == NULL || rd->need[0] == NULL || rd->need[1] == NULL || rd->stamp == NULL) {
        round_free(rd);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate a round of %d "
                         "groups", sh->nnodes);
    }
    return NSP_OK;
}

/* Ring exchange seconds per layer of a level-l group holding `tokens`
 * (sum of its sequences' lengths); 0 for a Ulysses level. */
static double ring_time(const nest_state_t *st, int l, double tokens, int rc)
{
    if (st->sh.ring[l] <= 1) {
        return 0.0;
    }
    return tokens * st->sh.rcoef[l][rc != 0] + st->sh.rlat[l][rc != 0];
}

/* Activation (+ ring buffer) bytes per token held at level l. */
static double mem_per_token(const nest_state_t *st, int l, int rc)
{
    return (rc ? st->a_rc : st->a_keep) + st->sh.ringm[l];
}

/* Per-rank additions of a group from its sums. */
static void node_adds(const nest_state_t *st, int l, nest_node_t *nd)
{
    const double rcf = nd->rc ? NSP_COST_RECOMPUTE_COMP : 1.0;
    const double rcb = nd->rc ? NSP_COST_RECOMPUTE_A2A : 1.0;
    const double d   = st->sh.deg[l];
    const double C   = (rcf * nd->comp + st->cost->ep_s_per_token * nd->tokens) / d;
    double       K   = (nd->nseq > 0 && st->sh.deg[l] > 1) ?
                       rcb * nd->bytes / st->sh.bw[l] + st->sh.lat4[l] : 0.0;

    if (st->sh.ring[l] > 1 && nd->nseq > 0) {
        K += ring_time(st, l, nd->tokens, nd->rc);   /* overlaps like a pipelined level */
    }
    nd->add1 = C + st->eta1 * K;
    nd->add2 = st->eta1 * C + K;
    nd->addm = nd->tokens / d * ((nd->rc ? st->a_rc : st->a_keep) + st->sh.ringm[l]);
}

/* Recompute a node's aggregates from its adds and its children. */
static void node_aggregate(const nest_state_t *st, nest_round_t *rd, int n)
{
    const nest_shape_t *sh = &st->sh;
    const int           l  = sh->level[n], nl = sh->nl;
    nest_node_t        *nd = &rd->node[n];
    double             *m1 = &rd->mm1[(size_t)n * nl], *mm = &rd->mmm[(size_t)n * nl];

    node_adds(st, l, nd);
    nd->occ = 0;
    if (l == 0) {
        nd->agg1 = nd->add1;
        nd->agg2 = nd->add2;
        nd->aggm = nd->addm;
    } else {
        const int c0 = sh->first_child[n], nc = sh->nchild[n];
        double    a1 = -NEST_INF, a2 = -NEST_INF, am = -NEST_INF;
        for (int lp = 0; lp < l; ++lp) {
            m1[lp] = NEST_INF;
            mm[lp] = NEST_INF;
        }
        for (int c = c0; c < c0 + nc; ++c) {
            const nest_node_t *cd  = &rd->node[c];
            const double      *cm1 = &rd->mm1[(size_t)c * nl], *cmm = &rd->mmm[(size_t)c * nl];
            a1 = dmax(a1, cd->agg1);
            a2 = dmax(a2, cd->agg2);
            am = dmax(am, cd->aggm);
            nd->occ += cd->occ + (cd->nseq > 0);
            for (int lp = 0; lp < l; ++lp) {
                m1[lp] = dmin(m1[lp], cm1[lp]);
                mm[lp] = dmin(mm[lp], cmm[lp]);
            }
        }
        nd->agg1 = nd->add1 + a1;
        nd->agg2 = nd->add2 + a2;
        nd->aggm = nd->addm + am;
        for (int lp = 0; lp < l; ++lp) {
            if (st->mode == NSP_ROUTE_DISJOINT && nd->nseq > 0) {
                m1[lp] = mm[lp] = NEST_INF;   /* used: nothing below may open */
            } else {
                m1[lp] += nd->add1;
                mm[lp] += nd->addm;
            }
        }
    }
    if (st->mode == NSP_ROUTE_DISJOINT && nd->occ > 0) {
        m1[l] = mm[l] = NEST_INF;   /* something below is used: not joinable */
    } else {
        m1[l] = nd->agg1;
        mm[l] = nd->aggm;
    }
    for (int lp = l + 1; lp < nl; ++lp) {
        m1[lp] = NEST_INF;
        mm[lp] = NEST_INF;
    }
}

/* Virtual tree: leaf k is root k; padding leaves hold nothing. */
static void vleaf_set(const nest_state_t *st, nest_round_t *rd, int k)
{
    const int    nl = st->sh.nl, v = st->sh.vsize + k;
    double      *vm1 = &rd->vmm1[(size_t)v * nl], *vmm = &rd->vmmm[(size_t)v * nl];

    if (k < st->sh.nroots) {
        const int          n  = st->sh.roots[k];
        const nest_node_t *nd = &rd->node[n];
        rd->v1[v] = nd->agg1;
        rd->v2[v] = nd->agg2;
        rd->vm[v] = nd->aggm;
        memcpy(vm1, &rd->mm1[(size_t)n * nl], sizeof(double) * (size_t)nl);
        memcpy(vmm, &rd->mmm[(size_t)n * nl], sizeof(double) * (size_t)nl);
    } else {
        rd->v1[v] = rd->v2[v] = rd->vm[v] = -NEST_INF;
        for (int l = 0; l < nl; ++l) {
            vm1[l] = vmm[l] = NEST_INF;
        }
    }
}

static void vnode_aggregate(const nest_state_t *st, nest_round_t *rd, int v)
{
    const int nl = st->sh.nl, a = 2 * v, b = 2 * v + 1;

    rd->v1[v] = dmax(rd->v1[a], rd->v1[b]);
    rd->v2[v] = dmax(rd->v2[a], rd->v2[b]);
    rd->vm[v] = dmax(rd->vm[a], rd->vm[b]);
    for (int l = 0; l < nl; ++l) {
        rd->vmm1[(size_t)v * nl + l] = dmin(rd->vmm1[(size_t)a * nl + l], rd->vmm1[(size_t)b * nl + l]);
        rd->vmmm[(size_t)v * nl + l] = dmin(rd->vmmm[(size_t)a * nl + l], rd->vmmm[(size_t)b * nl + l]);
    }
}

/* After a change of node n: refresh it, its ancestors and the virtual path. */
static void propagate(const nest_state_t *st, nest_round_t *rd, int n)
{
    int root = n, v;

    for (int p = n; p >= 0; p = st->sh.parent[p]) {
        node_aggregate(st, rd, p);
        root = p;
    }
    v = st->sh.vslot[root];
    vleaf_set(st, rd, v);
    for (v = (st->sh.vsize + v) / 2; v >= 1; v /= 2) {
        vnode_aggregate(st, rd, v);
    }
}

/* Rebuild every aggregate of a round from the node sums: O(nodes * levels). */
static void round_rebuild(const nest_state_t *st, nest_round_t *rd)
{
    for (int n = 0; n < st->sh.nnodes; ++n) {   /* level 0 first: ids ascend by level */
        node_aggregate(st, rd, n);
    }
    for (int k = 0; k < st->sh.vsize; ++k) {
        vleaf_set(st, rd, k);
    }
    for (int v = st->sh.vsize - 1; v >= 1; --v) {
        vnode_aggregate(st, rd, v);
    }
}

/* The round's slowest rank, per layer. */
static double round_max(const nest_state_t *st, const nest_round_t *rd)
{
    const double m = dmax(rd->v1[1], rd->v2[1]);

    (void)st;
    return m > 0.0 ? m : 0.0;
}

/* Absolute L1, L2, memory maxima over the ranks of group n. */
static void node_abs(const nest_state_t *st, const nest_round_t *rd, int n,
                     double *l1, double *l2, double *m)
{
    const nest_node_t *nd = &rd->node[n];
    double             a1 = nd->agg1, a2 = nd->agg2, am = nd->aggm;

    for (int p = st->sh.parent[n]; p >= 0; p = st->sh.parent[p]) {
        a1 += rd->node[p].add1;
        a2 += rd->node[p].add2;
        am += rd->node[p].addm;
    }
    *l1 = a1;
    *l2 = a2;
    *m  = am;
}

/* The least loaded group of level l in a round with `need` bytes of room on
 * each of its ranks (a descent along min-L1 children with room), or -1. */
static int find_group(const nest_state_t *st, const nest_round_t *rd, int l, double need)
{
    const nest_shape_t *sh = &st->sh;
    const int           nl = sh->nl;
    const double        room = st->cap - need;
    int                 v = 1, n;
    double              acc_m = 0.0;

    if (rd->vmmm[(size_t)1 * nl + l] > room) {
        return -1;
    }
    while (v < sh->vsize) {
        const int a = 2 * v, b = a + 1;
        const int ok_a = rd->vmmm[(size_t)a * nl + l] <= room;
        const int ok_b = rd->vmmm[(size_t)b * nl + l] <= room;
        if (ok_a && (!ok_b || rd->vmm1[(size_t)a * nl + l] <= rd->vmm1[(size_t)b * nl + l])) {
            v = a;
        } else {
            v = b;
        }
    }
    n = sh->roots[v - sh->vsize];
    while (sh->level[n] > l) {
        const int c0 = sh->first_child[n], nc = sh->nchild[n];
        int       best = -1;
        double    best1 = NEST_INF;
        acc_m += rd->node[n].addm;
        for (int c = c0; c < c0 + nc; ++c) {
            const double cm = rd->mmm[(size_t)c * nl + l] + acc_m;
            const double c1 = rd->mm1[(size_t)c * nl + l];
            if (cm <= room && c1 < best1) {
                best1 = c1;
                best  = c;
            }
        }
        if (best < 0) {
            return -1;   /* cannot happen: the parent's minimum came from a child */
        }
        n = best;
    }
    return n;
}

/* ---- sequences in groups ------------------------------------------------- */

static void node_link(nest_state_t *st, nest_node_t *nd, int i)
{
    st->prev[i] = -1;
    st->next[i] = nd->head;
    if (nd->head >= 0) {
        st->prev[nd->head] = i;
    }
    nd->head = i;
}

static void node_unlink(nest_state_t *st, nest_node_t *nd, int i)
{
    if (st->prev[i] >= 0) {
        st->next[st->prev[i]] = st->next[i];
    } else {
        nd->head = st->next[i];
    }
    if (st->next[i] >= 0) {
        st->prev[st->next[i]] = st->prev[i];
    }
    st->next[i] = st->prev[i] = -1;
}

/* Add (sign +1) or remove (-1) sequence i to/from the sums of node n. */
static void node_account(const nest_state_t *st, nest_node_t *nd, int l, int i, int sign)
{
    const double s = (double)st->in->lens[i];

    nd->comp   += sign * st->comp1[i];
    nd->tokens += sign * s;
    nd->bytes  += sign * nsp_cost_group_a2a_bytes(st->cost, s, st->sh.deg[l], st->sh.ring[l]);
    nd->nseq   += sign;
    if (nd->nseq == 0) {   /* exact zeros: no drift after many moves */
        nd->comp = nd->tokens = nd->bytes = 0.0;
    }
}

/* Place sequence i in node n of round r with the group's flag set to rc. */
static void place(nest_state_t *st, int i, int r, int n, int rc, int do_propagate)
{
    nest_round_t *rd = &st->round[r];
    nest_node_t  *nd = &rd->node[n];

    node_account(st, nd, st->sh.level[n], i, +1);
    nd->rc = rc;
    node_link(st, nd, i);
    st->loc[i] = r * st->sh.nnodes + n;
    if (do_propagate) {
        propagate(st, rd, n);
    } else {
        node_adds(st, st->sh.level[n], nd);
    }
}

static void unplace(nest_state_t *st, int i)
{
    const int     r  = st->loc[i] / st->sh.nnodes, n = st->loc[i] % st->sh.nnodes;
    nest_round_t *rd = &st->round[r];
    nest_node_t  *nd = &rd->node[n];

    node_account(st, nd, st->sh.level[n], i, -1);
    node_unlink(st, nd, i);
    st->loc[i] = -1;
    propagate(st, rd, n);
}

/* ---- option evaluation ---------------------------------------------------- */

/* Per-rank L1, L2 and memory a group would add after taking sequence i with
 * flag rc (nd is the group before). */
static void adds_after(const nest_state_t *st, const nest_node_t *nd, int l, int i, int rc,
                       double *a1, double *a2, double *am)
{
    nest_node_t tmp = *nd;

    node_account(st, &tmp, l, i, +1);
    tmp.rc = rc;
    node_adds(st, l, &tmp);
    *a1 = tmp.add1;
    *a2 = tmp.add2;
    *am = tmp.addm;
}

/* Score of an option against its round's reference time. The raise of the
 * reference is paid now; the area is paid by someone eventually, spread over
 * the N ranks. Ties go to the option with the most room left (the least
 * loaded group, the emptiest round relative to its reference). */
static void option_score(const nest_state_t *st, nest_option_t *opt, double ref)
{
    opt->delta = dmax(0.0, opt->peak - ref);
    opt->score = opt->delta + opt->area / st->sh.ranks;
    opt->slack = ref - opt->peak;
    opt->valid = 1;
}

/* Is a better than b: lower score, then more slack; exact ties keep the
 * earlier candidate (determinism). */
static int option_better(const nest_option_t *a, const nest_option_t *b)
{
    const double tol = 1e-12;

    if (!b->valid) {
        return a->valid;
    }
    if (!a->valid) {
        return 0;
    }
    if (fabs(a->score - b->score) > tol * (1.0 + fabs(b->score))) {
        return a->score < b->score;
    }
    return a->slack > b->slack + tol * (1.0 + fabs(b->slack));
}

/* Evaluate putting sequence i into group n of round r (flag rc after);
 * ref is the round's reference time. Returns 0 if memory does not hold. */
static int eval_option(const nest_state_t *st, int i, int r, int n, int rc, double ref,
                       nest_option_t *opt)
{
    const nest_round_t *rd = &st->round[r];
    const nest_node_t  *nd = &rd->node[n];
    const int           l  = st->sh.level[n];
    double              l1, l2, m, a1, a2, am;

    if (nd->rc && !rc) {
        rc = 1;   /* a recomputed group stays recomputed */
    }
    node_abs(st, rd, n, &l1, &l2, &m);
    adds_after(st, nd, l, i, rc, &a1, &a2, &am);
    if (m - nd->addm + am > st->cap) {
        return 0;
    }
    opt->r     = r;
    opt->node  = n;
    opt->rc    = rc;
    opt->peak  = dmax(l1 + a1 - nd->add1, l2 + a2 - nd->add2);
    opt->area  = st->sh.deg[l] * dmax(a1 - nd->add1, a2 - nd->add2);
    option_score(st, opt, ref);
    return 1;
}

/* Per-rank L1 of sequence i alone in an empty group of level l (kept). */
static double alone_time(const nest_state_t *st, int i, int l)
{
    const double s = (double)st->in->lens[i];
    const double d = st->sh.deg[l];
    const double C = (st->comp1[i] + st->cost->ep_s_per_token * s) / d;
    double       K = st->sh.deg[l] > 1 ?
                     nsp_cost_group_a2a_bytes(st->cost, s, st->sh.deg[l], st->sh.ring[l]) /
                     st->sh.bw[l] + st->sh.lat4[l] : 0.0;

    if (st->sh.ring[l] > 1) {
        K += ring_time(st, l, s, 0);
    }
    return C + st->eta1 * K;
}

/* Least area of sequence i: alone on one leaf, kept (rank-seconds per layer). */
static double least_area(const nest_state_t *st, int i)
{
    return st->comp1[i] + st->cost->ep_s_per_token * (double)st->in->lens[i];
}

/* Account a placement in the balanced target. */
static void target_update(nest_state_t *st, int i, double area)
{
    st->a_placed += area;
    st->w_left   -= least_area(st, i);
    st->target    = dmax(st->target_floor,
                         (st->a_placed + dmax(0.0, st->w_left)) / (st->sh.ranks * (double)st->R));
}

/* Reference time of round r: its slowest rank or the balanced target. */
static double round_ref(const nest_state_t *st, int r)
{
    return dmax(round_max(st, &st->round[r]), st->target);
}

/* Try sequence i at level l of round r, kept and recomputed. */
static void consider_level(const nest_state_t *st, int i, int r, int l, double ref,
                           nest_option_t *best)
{
    const double s = (double)st->in->lens[i];
    const double d = st->sh.deg[l];
    nest_option_t opt;
    int           n;

    n = st->in->lens[i] <= st->rc_below ? -1 :
        find_group(st, &st->round[r], l, s / d * mem_per_token(st, l, 0));
    if (n >= 0 && eval_option(st, i, r, n, 0, ref, &opt) && option_better(&opt, best)) {
        *best = opt;
    }
    if (best->valid && best->delta <= 0.0 && best->r == r && best->rc == 0) {
        return;   /* a kept place under the reference: recomputation cannot beat it */
    }
    n = find_group(st, &st->round[r], l, s / d * mem_per_token(st, l, 1));
    if (n >= 0) {
        /* flip the group if kept does not fit; eval checks memory exactly */
        if (eval_option(st, i, r, n, 1, ref, &opt) && option_better(&opt, best)) {
            *best = opt;
        }
    }
    /* The least loaded group of the level, recomputed: a kept group that is
     * full may make room by flipping. Without this, groups already
     * recomputed (roomy) would collect everything. */
    {
        const int m = find_group(st, &st->round[r], l, 0.0);
        if (m >= 0 && m != n && eval_option(st, i, r, m, 1, ref, &opt) &&
            option_better(&opt, best)) {
            *best = opt;
        }
    }
}

/* Route one long sequence through the tree (phase 1). */
static int route_long(nest_state_t *st, int i)
{
    const double  s = (double)st->in->lens[i];
    nest_option_t best;

    memset(&best, 0, sizeof(best));
    for (int r = 0; r < st->R; ++r) {
        const double ref = round_ref(st, r);
        int          l_time = -1, l_mem = -1, l_min = 0;
        double       t_min = NEST_INF;
        for (int l = 0; l < st->sh.nl; ++l) {
            const double t = alone_time(st, i, l);
            if (l_time < 0 && t <= ref) {
                l_time = l;
            }
            if (t < t_min) {
                t_min = t;
                l_min = l;
            }
            if (l_mem < 0 && s / st->sh.deg[l] * mem_per_token(st, l, 0) <= st->cap) {
                l_mem = l;
            }
        }
        if (l_time < 0) {
            l_time = l_min;
        }
        if (l_mem < 0) {
            l_mem = st->sh.nl - 1;
        }
        {
            int lo = l_time, hi = l_time > l_mem ? l_time : l_mem;
            if (hi + 1 < st->sh.nl && l_mem >= l_time) {
                ++hi;   /* memory is the binding reason: also try one level up */
            }
            if (st->mode == NSP_ROUTE_DISJOINT) {
                lo = 0;   /* joining a used group of any level may be the only place */
                hi = st->sh.nl - 1;
            }
            if (st->only_level >= 0) {
                lo = hi = st->only_level;
            }
            for (int l = lo; l <= hi; ++l) {
                consider_level(st, i, r, l, ref, &best);
            }
        }
    }
    if (!best.valid) {
        return 0;
    }
    place(st, i, best.r, best.node, best.rc, 1);
    target_update(st, i, best.area);
    return 1;
}

/* ---- phase 2: short sequences fill the leaves ----------------------------- */

/* Free memory of leaf j for a placement of mode m (1: as if recomputed). */
static double leaf_free(const nest_state_t *st, const nest_round_t *rd, int j, int m)
{
    const nest_node_t *nd = &rd->node[st->sh.off[0] + j];
    const double       free_keep = st->cap - rd->leafm[j];

    if (m == 0 || nd->rc) {
        return free_keep;
    }
    return free_keep + nd->tokens / st->sh.deg[0] * (st->a_keep - st->a_rc);
}

static int heap_push(leaf_heap_t *h, double free_bytes, int leaf, int stamp)
{
    int k;

    if (h->n == h->cap) {
        const int ncap = h->cap ? 2 * h->cap : 256;
        double   *nf = realloc(h->free, sizeof(double) * (size_t)ncap);
        int      *nl, *ns;
        if (nf == NULL) {
            return 0;
        }
        h->free = nf;
        nl = realloc(h->leaf, sizeof(int) * (size_t)ncap);
        if (nl == NULL) {
            return 0;
        }
        h->leaf = nl;
        ns = realloc(h->stamp, sizeof(int) * (size_t)ncap);
        if (ns == NULL) {
            return 0;
        }
        h->stamp = ns;
        h->cap = ncap;
    }
    for (k = h->n++; k > 0 && h->free[(k - 1) / 2] < free_bytes; k = (k - 1) / 2) {
        h->free[k]  = h->free[(k - 1) / 2];
        h->leaf[k]  = h->leaf[(k - 1) / 2];
        h->stamp[k] = h->stamp[(k - 1) / 2];
    }
    h->free[k]  = free_bytes;
    h->leaf[k]  = leaf;
    h->stamp[k] = stamp;
    return 1;
}

static void heap_pop(leaf_heap_t *h)
{
    const double f = h->free[--h->n];
    const int    l = h->leaf[h->n], t = h->stamp[h->n];
    int          k = 0;

    for (;;) {
        int c = 2 * k + 1;
        if (c >= h->n) {
            break;
        }
        if (c + 1 < h->n && h->free[c + 1] > h->free[c]) {
            ++c;
        }
        if (h->free[c] <= f) {
            break;
        }
        h->free[k]  = h->free[c];
        h->leaf[k]  = h->leaf[c];
        h->stamp[k] = h->stamp[c];
        k = c;
    }
    if (h->n > 0) {
        h->free[k]  = f;
        h->leaf[k]  = l;
        h->stamp[k] = t;
    }
}

/* Set leaf j's key in mode m's tree: its L1 if it has the mode's need free,
 * else infinity (and it waits in the heap). Returns 0 on no memory. */
static int leaf_key_set(nest_state_t *st, nest_round_t *rd, int j, int m)
{
    const double fr = leaf_free(st, rd, j, m);
    double      *key = rd->key[m];
    int          v = st->lsize + j;

    if (fr >= *rd->need[m]) {
        key[v] = rd->leaf1[j];
    } else {
        key[v] = NEST_INF;
        if (!heap_push(&rd->wait[m], fr, j, rd->stamp[j])) {
            return 0;
        }
    }
    /* refresh the minima upwards; once a node keeps its value, so do all
     * above it */
    for (v /= 2; v >= 1; v /= 2) {
        const double k = dmin(key[2 * v], key[2 * v + 1]);
        if (key[v] == k) {
            break;
        }
        key[v] = k;
    }
    return 1;
}

/* After a change of leaf j (its load, memory or flag). */
static int leaf_seg_set(nest_state_t *st, nest_round_t *rd, int j)
{
    rd->stamp[j]++;
    return leaf_key_set(st, rd, j, 0) && leaf_key_set(st, rd, j, 1);
}

/* Absolute leaf values from the tree (top-down sums), and the two trees with
 * every leaf admitted (the first need is set by the first query). */
static int leaf_phase_init(nest_state_t *st, nest_round_t *rd)
{
    const nest_shape_t *sh = &st->sh;

    for (int j = 0; j < sh->ng[0]; ++j) {
        const int n = sh->off[0] + j;
        double    l1 = 0.0, l2 = 0.0, m = 0.0;
        for (int p = n; p >= 0; p = sh->parent[p]) {
            l1 += rd->node[p].add1;
            l2 += rd->node[p].add2;
            m  += rd->node[p].addm;
        }
        rd->leaf1[j] = l1;
        rd->leaf2[j] = l2;
        rd->leafm[j] = m;
    }
    for (int m = 0; m < 2; ++m) {
        *rd->need[m] = -NEST_INF;
        rd->wait[m].n = 0;
        for (int v = 1; v < 2 * st->lsize; ++v) {
            rd->key[m][v] = NEST_INF;
        }
    }
    for (int j = 0; j < sh->ng[0]; ++j) {
        if (!leaf_seg_set(st, rd, j)) {
            return 0;
        }
    }
    return 1;
}

/* The least loaded leaf with `need` bytes free (flip: if recomputed), or -1.
 * Leaves short of `need` leave the tree for the heap; those the lower need
 * now fits come back. */
static int leaf_find(nest_state_t *st, nest_round_t *rd, double need, int flip)
{
    const int    m = flip ? 1 : 0;
    leaf_heap_t *h = &rd->wait[m];
    double      *key = rd->key[m];
    int          v;

    if (need > *rd->need[m]) {
        /* a larger need than before (first query): re-check every leaf */
        *rd->need[m] = need;
        h->n = 0;
        for (int j = 0; j < st->sh.ng[0]; ++j) {
            if (!leaf_key_set(st, rd, j, m)) {
                return -1;
            }
        }
    }
    *rd->need[m] = need;
    while (h->n > 0 && h->free[0] >= need) {
        const int j = h->leaf[0], t = h->stamp[0];
        heap_pop(h);
        if (t == rd->stamp[j] && key[st->lsize + j] >= NEST_INF) {
            (void)leaf_key_set(st, rd, j, m);   /* fits now: back in the tree */
        }
    }
    for (;;) {
        int j;
        if (key[1] >= NEST_INF) {
            return -1;
        }
        for (v = 1; v < st->lsize;) {
            v = key[2 * v] <= key[2 * v + 1] ? 2 * v : 2 * v + 1;
        }
        j = v - st->lsize;
        if (leaf_free(st, rd, j, m) >= need) {
            return j;
        }
        if (!leaf_key_set(st, rd, j, m)) {   /* cannot happen: needs only fall */
            return -1;
        }
    }
}

/* Evaluate sequence i on leaf j of round r with flag rc (leaf phase). */
static int eval_leaf(const nest_state_t *st, int i, int r, int j, int rc, double ref,
                     nest_option_t *opt)
{
    const nest_round_t *rd = &st->round[r];
    const int           n  = st->sh.off[0] + j;
    const nest_node_t  *nd = &rd->node[n];
    double              d1, d2, dm;

    if (nd->rc) {
        rc = 1;
    }
    if (st->sh.deg[0] == 1) {
        /* a leaf of one rank exchanges nothing: only compute and memory grow
         * (and a flip to recomputation adds a third of the leaf's compute) */
        const double s  = (double)st->in->lens[i];
        const double dc = (rc ? NSP_COST_RECOMPUTE_COMP : 1.0) * st->comp1[i] +
                          st->cost->ep_s_per_token * s +
                          ((rc && !nd->rc) ? (NSP_COST_RECOMPUTE_COMP - 1.0) * nd->comp : 0.0);
        d1 = dc;
        d2 = st->eta1 * dc;
        dm = rc ? (nd->tokens + s) * st->a_rc - nd->addm : s * st->a_keep;
    } else {
        double a1, a2, am;
        adds_after(st, nd, 0, i, rc, &a1, &a2, &am);
        d1 = a1 - nd->add1;
        d2 = a2 - nd->add2;
        dm = am - nd->addm;
    }
    if (rd->leafm[j] + dm > st->cap) {
        return 0;
    }
    opt->r     = r;
    opt->node  = n;
    opt->rc    = rc;
    opt->peak  = dmax(rd->leaf1[j] + d1, rd->leaf2[j] + d2);
    opt->area  = st->sh.deg[0] * dmax(d1, d2);
    option_score(st, opt, ref);
    return 1;
}

/* Round maxima during the leaf phase (the tree above is not refreshed). */
static int route_short(nest_state_t *st, int i, double *rmax)
{
    const double  s = (double)st->in->lens[i];
    const double  d = st->sh.deg[0];
    const int     rc_only = st->rc_leaves || st->in->lens[i] <= st->rc_below;
    nest_option_t best, opt;

    memset(&best, 0, sizeof(best));
    for (int r = 0; r < st->R && !rc_only; ++r) {
        const double ref = dmax(rmax[r], st->target);
        const int    j   = leaf_find(st, &st->round[r], s / d * mem_per_token(st, 0, 0), 0);
        if (j >= 0 && eval_leaf(st, i, r, j, 0, ref, &opt) && option_better(&opt, &best)) {
            best = opt;
        }
    }
    if (!best.valid || best.delta > 0.0) {
        for (int r = 0; r < st->R; ++r) {
            const double ref = dmax(rmax[r], st->target);
            const int    j   = leaf_find(st, &st->round[r], s / d * mem_per_token(st, 0, 1), 1);
            if (j >= 0 && eval_leaf(st, i, r, j, 1, ref, &opt) && option_better(&opt, &best)) {
                best = opt;
            }
        }
    }
    if (!best.valid) {
        return 0;
    }
    {
        nest_round_t *rd = &st->round[best.r];
        const int     j  = best.node - st->sh.off[0];
        nest_node_t  *nd = &rd->node[best.node];
        const double  o1 = nd->add1, o2 = nd->add2, om = nd->addm;
        place(st, i, best.r, best.node, best.rc, 0);
        rd->leaf1[j] += nd->add1 - o1;
        rd->leaf2[j] += nd->add2 - o2;
        rd->leafm[j] += nd->addm - om;
        if (!leaf_seg_set(st, rd, j)) {
            return 0;
        }
        rmax[best.r] = dmax(rmax[best.r], dmax(rd->leaf1[j], rd->leaf2[j]));
    }
    target_update(st, i, best.area);
    return 1;
}

/* ---- one routing pass for R rounds ---------------------------------------- */

static void state_clear(nest_state_t *st)
{
    for (int r = 0; r < st->R; ++r) {
        nest_round_t *rd = &st->round[r];
        for (int n = 0; n < st->sh.nnodes; ++n) {
            memset(&rd->node[n], 0, sizeof(rd->node[n]));
            rd->node[n].head = -1;
        }
        round_rebuild(st, rd);
    }
    for (int i = 0; i < st->in->nseqs; ++i) {
        st->loc[i] = st->next[i] = st->prev[i] = -1;
    }
}

/* Step of the current state, per layer (sum of round maxima). */
static double state_step(const nest_state_t *st)
{
    double step = 0.0;

    for (int r = 0; r < st->R; ++r) {
        const double m = round_max(st, &st->round[r]);
        step += m > 0.0 ? m + st->rfix : 0.0;   /* a used round pays its fixed cost */
    }
    return step;
}

/* Route the whole batch in R rounds; 0 if some sequence found no place. */
static int route_all(nest_state_t *st, int R, double work)
{
    const nsp_planner_input_t *in = st->in;
    const double               cap = st->cap;
    double                     rmax[NSP_PLANNER_DEFAULT_MAX_ROUNDS];
    double                     reserve = 0.0;
    int                        k, split = in->nseqs;

    st->R        = R;
    st->rc_below = 0;
    st->rc_leaves = 0;
    /* Memory-tight rounds (fewer than the kept activations need): the
     * sequences whose recomputation costs least per byte it frees (the
     * shortest: their extra forward is mostly linear work) are recomputed
     * up front, shortest first, until the rest fits NEST_MEM_FILL of the
     * memory kept. Deciding this per group as memory runs out instead fills
     * the ranks with kept medium sequences and leaves no room to balance. */
    {
        const double budget = NEST_MEM_FILL * cap * st->sh.ranks * (double)R;
        double       demand = 0.0;
        for (int q = 0; q < in->nseqs; ++q) {
            demand += (double)in->lens[q] * st->a_keep;
        }
        for (int q = in->nseqs - 1; q >= 0 && demand > budget; --q) {
            const int64_t len = in->lens[in->order[q]];
            demand -= (double)len * (st->a_keep - st->a_rc);
            st->rc_below = len;
        }
    }
    st->a_placed = 0.0;
    st->w_left   = work;
    st->target   = dmax(st->target_floor, work / (st->sh.ranks * (double)R));
    state_clear(st);
    /* Long sequences (phase 1) are those that would not sit comfortably on
     * one leaf. The short ones must fit somewhere afterwards: phase 1 leaves
     * every rank room for its share of them recomputed (the least they can
     * take), so memory-tight rounds recompute short sequences, whose extra
     * forward is cheap, rather than fail. */
    if (st->mode == NSP_ROUTE_NESTED && st->only_level < 0) {
        for (k = 0; k < in->nseqs; ++k) {
            const int    i = in->order[k];
            const double s = (double)in->lens[i];
            if (alone_time(st, i, 0) <= NEST_LONG_TIME_SHARE * st->target &&
                s / st->sh.deg[0] * st->a_keep <= NEST_LONG_MEM_SHARE * cap) {
                break;
            }
        }
        split = k;
        for (; k < in->nseqs; ++k) {
            reserve += (double)in->lens[in->order[k]] * st->a_rc;
        }
        reserve = dmin(NEST_RESERVE_MARGIN * reserve / (st->sh.ranks * (double)R), 0.5 * cap);
    }
    st->cap = cap - reserve;
    for (k = 0; k < split; ++k) {
        const int i = in->order[k];
        if (!route_long(st, i)) {
            NSP_DEBUG("routing: %d rounds: no place for sequence %d (%lld tokens) in the tree",
                      R, i, (long long)in->lens[i]);
            st->cap = cap;
            return 0;
        }
    }
    st->cap = cap;
    /* phase 2: the rest fill the leaves. When their kept activations
     * cannot fit in what phase 1 left free, they go recomputed from the
     * start: kept leaves would fill up first and the few recomputed ones,
     * roomy, would then collect everything. */
    {
        double left_free = 0.0, demand = 0.0;
        for (int r = 0; r < R; ++r) {
            if (!leaf_phase_init(st, &st->round[r])) {
                return 0;
            }
            rmax[r] = round_max(st, &st->round[r]);
            for (int j = 0; j < st->sh.ng[0]; ++j) {
                left_free += dmax(0.0, cap - st->round[r].leafm[j]) * st->sh.deg[0];
            }
        }
        for (int q = split; q < in->nseqs; ++q) {
            demand += (double)in->lens[in->order[q]] * st->a_keep;
        }
        st->rc_leaves = demand > NEST_LEAF_FILL * left_free;
        NSP_TRACE("routing: %d rounds: %d long sequences; the short ones need %.1f GB kept, "
                  "%.1f GB free on the leaves: %s", R, split, demand / 1e9, left_free / 1e9,
                  st->rc_leaves ? "recomputed" : "kept where they fit");
    }
    for (; k < in->nseqs; ++k) {
        if (!route_short(st, in->order[k], rmax)) {
            NSP_DEBUG("routing: %d rounds: no leaf for sequence %d (%lld tokens)", R,
                      in->order[k], (long long)in->lens[in->order[k]]);
            return 0;
        }
    }
    for (int r = 0; r < R; ++r) {
        round_rebuild(st, &st->round[r]);
    }
    return 1;
}

/* ---- local improvement ------------------------------------------------------ */

/* Flip recomputed groups back to kept where memory allows (never slower). */
static void unflip_groups(nest_state_t *st)
{
    for (int r = 0; r < st->R; ++r) {
        nest_round_t *rd = &st->round[r];
        for (int n = 0; n < st->sh.nnodes; ++n) {
            nest_node_t *nd = &rd->node[n];
            double       l1, l2, m;
            if (!nd->rc) {
                continue;
            }
            if (nd->nseq == 0) {
                nd->rc = 0;
                propagate(st, rd, n);
                continue;
            }
            node_abs(st, rd, n, &l1, &l2, &m);
            if (m + nd->tokens / st->sh.deg[st->sh.level[n]] * (st->a_keep - st->a_rc) <= st->cap) {
                nd->rc = 0;
                propagate(st, rd, n);
            }
        }
    }
}

/* The path (root first) to the slowest rank of round r; returns its length. */
static int slowest_path(const nest_state_t *st, const nest_round_t *rd, int *path)
{
    const nest_shape_t *sh = &st->sh;
    int                 v = 1, n, len = 0;
    double              acc1 = 0.0, acc2 = 0.0;

    while (v < sh->vsize) {
        const int a = 2 * v, b = a + 1;
        v = dmax(rd->v1[a], rd->v2[a]) >= dmax(rd->v1[b], rd->v2[b]) ? a : b;
    }
    n = sh->roots[v - sh->vsize];
    for (;;) {
        path[len++] = n;
        if (sh->level[n] == 0) {
            break;
        }
        acc1 += rd->node[n].add1;
        acc2 += rd->node[n].add2;
        {
            const int c0 = sh->first_child[n], nc = sh->nchild[n];
            int       best = c0;
            double    bv = -NEST_INF;
            for (int c = c0; c < c0 + nc; ++c) {
                const double cv = dmax(rd->node[c].agg1 + acc1, rd->node[c].agg2 + acc2);
                if (cv > bv) {
                    bv   = cv;
                    best = c;
                }
            }
            n = best;
        }
    }
    return len;
}

/* Best place for sequence i (already removed) over every round and level,
 * judged by the step it leads to; rmax[] are the current round maxima. */
static void best_insertion(const nest_state_t *st, int i, const double *rmax, double step,
                           nest_option_t *best)
{
    const double s = (double)st->in->lens[i];

    memset(best, 0, sizeof(*best));
    for (int r = 0; r < st->R; ++r) {
        for (int l = 0; l < st->sh.nl; ++l) {
            const double d = st->sh.deg[l];
            for (int rc = 0; rc <= 1; ++rc) {
                nest_option_t opt;
                const int     n = find_group(st, &st->round[r], l,
                                             s / d * mem_per_token(st, l, rc));
                if (n < 0 || !eval_option(st, i, r, n, rc, rmax[r], &opt)) {
                    continue;
                }
                opt.obj = step - rmax[r] + dmax(rmax[r], opt.peak);
                if (!best->valid || opt.obj < best->obj - 1e-15 ||
                    (opt.obj <= best->obj + 1e-15 && opt.area < best->area)) {
                    *best = opt;
                }
            }
        }
    }
}

/* Move sequences off the slowest rank of each round while the step drops. */
static void local_moves(nest_state_t *st)
{
    int path[NSP_PLANNER_MAX_LEVELS];

    for (int improved = 1; improved && st->trials > 0;) {
        improved = 0;
        for (int r = 0; r < st->R && st->trials > 0; ++r) {
            nest_round_t *rd  = &st->round[r];
            const int     len = slowest_path(st, rd, path);
            double        rmax[NSP_PLANNER_DEFAULT_MAX_ROUNDS];
            double        step;
            int           moved = 0;

            for (int q = len - 1; q >= 0 && !moved && st->trials > 0; --q) {
                const int n = path[q];
                int       tried = 0;
                for (int i = rd->node[n].head; i >= 0 && tried < NEST_MOVE_SEQS_PER_GROUP &&
                                               st->trials > 0; ++tried) {
                    const int     nexti = st->next[i];
                    const int     rc0   = rd->node[n].rc;
                    nest_option_t best;
                    double        before = state_step(st), mid;
                    --st->trials;
                    unplace(st, i);
                    for (int rr = 0; rr < st->R; ++rr) {
                        rmax[rr] = round_max(st, &st->round[rr]);
                    }
                    mid = 0.0;
                    for (int rr = 0; rr < st->R; ++rr) {
                        mid += rmax[rr];
                    }
                    step = mid;
                    best_insertion(st, i, rmax, step, &best);
                    if (best.valid && best.obj < before * (1.0 - 1e-9) &&
                        !(best.r == r && best.node == n)) {
                        place(st, i, best.r, best.node, best.rc, 1);
                        moved = improved = 1;
                        break;
                    }
                    place(st, i, r, n, rc0, 1);
                    i = nexti;
                }
            }
        }
    }
}

/* ---- pipelining: ranks that hold a single level ---------------------------- */

/* levels[rank]: nonempty groups holding the rank in round r. */
static void count_levels(const nest_state_t *st, const nest_round_t *rd, int *levels)
{
    const nest_shape_t *sh = &st->sh;

    memset(levels, 0, sizeof(int) * (size_t)sh->ranks);
    for (int n = 0; n < sh->nnodes; ++n) {
        if (rd->node[n].nseq > 0) {
            const int l = sh->level[n], r0 = (n - sh->off[l]) * sh->deg[l];
            for (int g = r0; g < r0 + sh->deg[l]; ++g) {
                levels[g]++;
            }
        }
    }
}

/* Exact per-layer time of round r with the pipelining rule of the final plan
 * (a group overlaps only if each of its ranks holds another level). */
static double round_exact(const nest_state_t *st, const nest_round_t *rd, int *levels,
                          double *C, double *Kp, double *Ks)
{
    const nest_shape_t *sh = &st->sh;
    double              worst = 0.0;

    count_levels(st, rd, levels);
    memset(C, 0, sizeof(double) * (size_t)sh->ranks);
    memset(Kp, 0, sizeof(double) * (size_t)sh->ranks);
    memset(Ks, 0, sizeof(double) * (size_t)sh->ranks);
    for (int n = 0; n < sh->nnodes; ++n) {
        const nest_node_t *nd = &rd->node[n];
        const int          l  = sh->level[n], r0 = (n - sh->off[l]) * sh->deg[l];
        const double       rcf = nd->rc ? NSP_COST_RECOMPUTE_COMP : 1.0;
        const double       rcb = nd->rc ? NSP_COST_RECOMPUTE_A2A : 1.0;
        double             c, k, kr;
        int                piped = 1;
        if (nd->nseq == 0) {
            continue;
        }
        c = (rcf * nd->comp + st->cost->ep_s_per_token * nd->tokens) / sh->deg[l];
        k = sh->deg[l] > 1 ? rcb * nd->bytes / sh->bw[l] + sh->lat4[l] : 0.0;
        kr = ring_time(st, l, nd->tokens, nd->rc);
        for (int g = r0; g < r0 + sh->deg[l]; ++g) {
            piped &= levels[g] >= 2;
        }
        for (int g = r0; g < r0 + sh->deg[l]; ++g) {
            C[g] += c;
            if (piped) {
                Kp[g] += k;
            } else {
                Ks[g] += k;
            }
            if (kr > 0.0) {
                Kp[g] += kr;   /* a ring always overlaps its level's compute */
            }
        }
    }
    for (int g = 0; g < sh->ranks; ++g) {
        worst = dmax(worst, nsp_cost_rank_time(st->cost, C[g], Kp[g], Ks[g]));
    }
    return worst;
}

typedef struct donor {
    int64_t len;
    int     i, leaf;
} donor_t;

/* Exact per-layer step of the state (pipelining only where each rank of a
 * group holds another level): the number the final plan will show. */
static double state_exact(const nest_state_t *st, int *levels, double *buf)
{
    const int n = st->sh.ranks;
    double    step = 0.0;

    for (int r = 0; r < st->R; ++r) {
        const double m = round_exact(st, &st->round[r], levels, buf, buf + n, buf + 2 * n);
        step += m > 0.0 ? m + st->rfix : 0.0;   /* a used round pays its fixed cost */
    }
    return step;
}

/* Give every rank that holds only an exchanging level one short leaf sequence
 * of the same round (the shortest first, from leaves that keep another one),
 * so its exchange overlaps; keep the moves only if the round's exact time
 * drops. */
static nsp_status_t fix_lonely_ranks(nest_state_t *st)
{
    const nest_shape_t *sh = &st->sh;
    const size_t        n  = (size_t)(st->in->nseqs > 0 ? st->in->nseqs : 1);
    int                *levels = malloc(sizeof(int) * (size_t)sh->ranks);
    int                *left   = malloc(sizeof(int) * (size_t)sh->ng[0]);
    double             *buf    = malloc(sizeof(double) * 3 * (size_t)sh->ranks);
    int                *moved  = malloc(sizeof(int) * 2 * (size_t)sh->ranks);
    donor_t            *donors = malloc(sizeof(donor_t) * n);
    nsp_status_t        status = NSP_OK;

    if (levels == NULL || left == NULL || buf == NULL || moved == NULL || donors == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate scratch for "
                           "%d ranks", sh->ranks);
        goto out_free;
    }
    if (sh->deg[0] != 1) {
        goto out_free;   /* leaves exchange too: nothing to gain */
    }
    for (int r = 0; r < st->R; ++r) {
        nest_round_t *rd = &st->round[r];
        const double  before = round_exact(st, rd, levels, buf, buf + sh->ranks,
                                           buf + 2 * sh->ranks);
        int           nmoved = 0, ndonors = 0, next_donor = 0;

        for (int j = 0; j < sh->ng[0]; ++j) {
            left[j] = rd->node[sh->off[0] + j].nseq;
        }
        /* leaf sequences of this round, shortest first (the batch order is
         * longest first), at most one per rank is needed */
        for (int k = st->in->nseqs - 1; k >= 0 && ndonors < sh->ranks; --k) {
            const int i = st->in->order[k];
            const int leaf = st->loc[i] - r * sh->nnodes;
            if (leaf >= 0 && leaf < sh->ng[0]) {   /* level-0 node ids come first */
                donors[ndonors].len  = st->in->lens[i];
                donors[ndonors].i    = i;
                donors[ndonors].leaf = leaf;
                ++ndonors;
            }
        }
        for (int g = 0; g < sh->ranks && next_donor < ndonors; ++g) {
            const int dst = sh->off[0] + g;
            if (levels[g] != 1 || rd->node[dst].nseq > 0) {
                continue;   /* not lonely, or its single level is the leaf itself */
            }
            while (next_donor < ndonors && left[donors[next_donor].leaf] < 2) {
                ++next_donor;
            }
            if (next_donor >= ndonors) {
                break;
            }
            {
                const donor_t *dn = &donors[next_donor];
                nest_node_t   *nd = &rd->node[dst];
                double         l1, l2, m, a1, a2, am;
                node_abs(st, rd, dst, &l1, &l2, &m);
                adds_after(st, nd, 0, dn->i, nd->rc, &a1, &a2, &am);
                if (m - nd->addm + am > st->cap) {
                    continue;
                }
                moved[2 * nmoved]     = dn->i;
                moved[2 * nmoved + 1] = sh->off[0] + dn->leaf;
                ++nmoved;
                left[dn->leaf]--;
                ++next_donor;
                unplace(st, dn->i);
                place(st, dn->i, r, dst, nd->rc, 1);
            }
        }
        if (nmoved > 0) {
            const double after = round_exact(st, rd, levels, buf, buf + sh->ranks,
                                             buf + 2 * sh->ranks);
            if (after >= before) {
                for (int k = nmoved - 1; k >= 0; --k) {
                    const int i = moved[2 * k];
                    unplace(st, i);
                    place(st, i, r, moved[2 * k + 1], rd->node[moved[2 * k + 1]].rc, 1);
                }
            }
            NSP_DEBUG("nested: round %d: %d sequences moved to single-level ranks "
                      "(%.6f -> %.6f s per layer)%s", r, nmoved, before, after,
                      after >= before ? ", undone" : "");
        }
    }
out_free:
    free(donors);
    free(moved);
    free(buf);
    free(left);
    free(levels);
    return status;
}

/* ---- state -------------------------------------------------------------------- */

static void state_free(nest_state_t *st)
{
    if (st->round != NULL) {
        for (int r = 0; r < st->nalloc; ++r) {
            round_free(&st->round[r]);
        }
    }
    free(st->round);
    free(st->loc);
    free(st->next);
    free(st->prev);
    free(st->comp1);
    shape_free(&st->sh);
}

static nsp_status_t state_init(nest_state_t *st, const nsp_planner_input_t *in,
                               nsp_route_mode_t mode, int Rcap)
{
    const size_t n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);

    memset(st, 0, sizeof(*st));
    st->only_level = -1;
    st->in     = in;
    st->cost   = &in->cost;
    st->mode   = mode;
    st->eta1   = mode == NSP_ROUTE_NESTED ? 1.0 - in->cost.cluster.overlap : 1.0;
    st->rfix   = in->cost.round_s / in->cost.model.layers;
    st->cap    = in->mem_cap;
    st->a_keep = in->cost.act_bytes_keep;
    st->a_rc   = in->cost.act_bytes_recompute;
    NSP_CHECK(shape_init(&st->sh, in));
    st->lsize = 1;
    while (st->lsize < st->sh.ng[0]) {
        st->lsize *= 2;
    }
    st->Rcap  = Rcap;
    st->round = calloc((size_t)Rcap, sizeof(*st->round));
    st->loc   = malloc(sizeof(int) * n);
    st->next  = malloc(sizeof(int) * n);
    st->prev  = malloc(sizeof(int) * n);
    st->comp1 = malloc(sizeof(double) * n);
    if (st->round == NULL || st->loc == NULL || st->next == NULL || st->prev == NULL ||
        st->comp1 == NULL) {
        state_free(st);
        return nsp_error(NSP_ERR_NO_MEMORY, "routing: cannot allocate state for %d sequences",
                         in->nseqs);
    }
    for (int i = 0; i < in->nseqs; ++i) {
        st->comp1[i] = nsp_cost_comp(st->cost, (double)in->lens[i], 1);
    }
    return NSP_OK;
}

/* Allocate rounds up to R (they are allocated on first use). */
static nsp_status_t ensure_rounds(nest_state_t *st, int R)
{
    for (; st->nalloc < R; ++st->nalloc) {
        NSP_CHECK(round_alloc(st, &st->round[st->nalloc]));
    }
    return NSP_OK;
}

/* Save / restore an assignment (round, node, flag per sequence). */
typedef struct nest_saved {
    int   *loc;
    int   *rc;
    int    R;
    double step;
} nest_saved_t;

static void save_assignment(const nest_state_t *st, nest_saved_t *sv)
{
    sv->R = st->R;
    for (int i = 0; i < st->in->nseqs; ++i) {
        const int r = st->loc[i] / st->sh.nnodes, n = st->loc[i] % st->sh.nnodes;
        sv->loc[i] = st->loc[i];
        sv->rc[i]  = st->round[r].node[n].rc;
    }
}

static void restore_assignment(nest_state_t *st, const nest_saved_t *sv)
{
    st->R = sv->R;
    state_clear(st);
    for (int i = 0; i < st->in->nseqs; ++i) {
        const int r = sv->loc[i] / st->sh.nnodes, n = sv->loc[i] % st->sh.nnodes;
        place(st, i, r, n, sv->rc[i], 0);
    }
    for (int r = 0; r < st->R; ++r) {
        round_rebuild(st, &st->round[r]);
    }
}

static void export_assignment(const nest_state_t *st, nsp_route_assign_t *a)
{
    const nest_shape_t *sh = &st->sh;

    a->nrounds = st->R;
    for (int i = 0; i < st->in->nseqs; ++i) {
        const int r = st->loc[i] / sh->nnodes, n = st->loc[i] % sh->nnodes;
        const int l = sh->level[n];
        a->round[i] = r;
        a->size[i]  = sh->deg[l];
        a->rank0[i] = (n - sh->off[l]) * sh->deg[l];
        a->rc[i]    = st->round[r].node[n].rc;
    }
}

/* The static planner's best plan on the tree's levels, as a candidate: it
 * replaces *best if exactly faster. */
static nsp_status_t static_candidate(nest_state_t *st, nest_saved_t *best, int *levels,
                                     double *buf)
{
    const nest_shape_t *sh = &st->sh;
    nsp_route_assign_t  a;
    nest_saved_t        cand = {NULL, NULL, 0, NEST_INF};
    double              step_s = 0.0, ex;
    nsp_status_t        status;

    NSP_CHECK(nsp_route_assign_alloc(&a, st->in->nseqs));
    status = nsp_static_assign(st->in, &a, &step_s);
    if (status == NSP_ERR_INFEASIBLE) {
        nsp_error_clear();
        status = NSP_OK;
        goto out;
    }
    if (status < 0 || a.nrounds > st->Rcap) {
        goto out;
    }
    cand.loc = malloc(sizeof(int) * (size_t)(st->in->nseqs > 0 ? st->in->nseqs : 1));
    cand.rc  = malloc(sizeof(int) * (size_t)(st->in->nseqs > 0 ? st->in->nseqs : 1));
    if (cand.loc == NULL || cand.rc == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "routing: cannot allocate %d sequences",
                           st->in->nseqs);
        goto out;
    }
    cand.R = a.nrounds;
    for (int i = 0; i < st->in->nseqs; ++i) {
        int l = 0;
        while (sh->deg[l] != a.size[i]) {
            ++l;
        }
        cand.loc[i] = a.round[i] * sh->nnodes + sh->off[l] + a.rank0[i] / a.size[i];
        cand.rc[i]  = a.rc[i];
    }
    NSP_CHECK_GOTO(ensure_rounds(st, cand.R), status, out);
    restore_assignment(st, &cand);
    ex = state_exact(st, levels, buf);
    NSP_DEBUG("routing (nested): the static plan on the tree's levels: %.6f s per layer", ex);
    if (ex < best->step) {
        best->step = ex;
        save_assignment(st, best);
    }
out:
    free(cand.loc);
    free(cand.rc);
    nsp_route_assign_free(&a);
    return status;
}

/* ---- entry points ------------------------------------------------------------------ */

/* What the search over rounds knows of the batch (per layer) and its
 * scratch for exact evaluations. */
typedef struct nest_search {
    nsp_route_mode_t mode;
    double           work;    /* all compute (MoE term included) on one rank */
    double           alone;   /* the longest sequence alone at the top degree */
    double           bound;   /* max(alone, work / N) + one round's fixed cost */
    int              r_keep;  /* fewest rounds that hold the batch kept */
    int              Rcap;    /* most rounds */
    int              coarse;  /* few whole sequences per rank */
    int             *levels;  /* [ranks] scratch of state_exact */
    double          *buf;     /* [3 * ranks] scratch of state_exact */
} nest_search_t;

/* Rounds. The search starts at the fewest rounds that hold the batch with
 * kept activations (r_keep) and adds rounds while the routed step (round
 * costs included) drops. When one sequence dominates (alone at the top
 * degree it takes more than NEST_ONE_ROUND_SHARE of the balanced time), a
 * single round with recomputation where memory needs it is tried first: the
 * others then fill the idle ranks of its round instead of waiting for
 * theirs. A trial within NEST_GOOD_ENOUGH of the bound ends the search. */
static void search_setup(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                         nest_search_t *se)
{
    const nsp_cost_t *cost = &in->cost;
    double            kept_bytes = 0.0, longest = 0.0;

    memset(se, 0, sizeof(*se));
    se->mode = mode;
    for (int i = 0; i < in->nseqs; ++i) {
        const double s = (double)in->lens[i];
        se->work   += nsp_cost_comp(cost, s, 1) + nsp_cost_ep_time(cost, s);
        kept_bytes += s * cost->act_bytes_keep;
        longest     = dmax(longest, s);
    }
    se->r_keep = (int)ceil(kept_bytes / (in->mem_cap * cost->cluster.ranks) - 1e-12);
    if (se->r_keep < 1) {
        se->r_keep = 1;
    }
    se->Rcap = in->max_rounds < NSP_PLANNER_DEFAULT_MAX_ROUNDS ? in->max_rounds :
               NSP_PLANNER_DEFAULT_MAX_ROUNDS;
    if (se->r_keep > se->Rcap) {
        se->r_keep = se->Rcap;
    }
    {
        const int dtop = in->level_degrees[in->nlevels - 1];
        se->alone = nsp_cost_comp(cost, longest, dtop) + nsp_cost_ep_time(cost, longest / dtop);
        /* per layer, with the fixed cost of the one round every plan has
         * (the steps compared against it include it) */
        se->bound = dmax(se->alone, se->work / cost->cluster.ranks) +
                    cost->round_s / cost->model.layers;
    }
    /* coarse: few whole sequences per rank (their granularity, not the
     * balanced target, sets the step) */
    se->coarse = in->nseqs <= NEST_STATIC_CANDIDATE_SEQS_PER_RANK * cost->cluster.ranks ||
                 cost->cluster.ranks <= NEST_STATIC_CANDIDATE_RANKS;
}

/* Route `trial` rounds (again with a higher target where the batch is
 * coarse); *step the best exact step of these routings, NEST_INF if none
 * held the batch; *best keeps the best assignment so far. */
static nsp_status_t route_trial(nest_state_t *st, nest_saved_t *best, const nest_search_t *se,
                                int trial, double *step)
{
    NSP_CHECK(ensure_rounds(st, trial));
    st->target_floor = 0.0;
    *step = NEST_INF;
    for (int retry = 0; retry <= NEST_RETRIES; ++retry) {
        double s1;
        if (!route_all(st, trial, se->work)) {
            NSP_DEBUG("routing: %d rounds cannot hold the batch", trial);
            break;
        }
        unflip_groups(st);
        if (se->mode == NSP_ROUTE_NESTED) {
            NSP_CHECK(fix_lonely_ranks(st));
        }
        /* candidates are compared as the plan will show them: a group
         * overlaps only where its ranks hold another level */
        s1 = state_exact(st, se->levels, se->buf);
        NSP_DEBUG("routing (%s): %d rounds, target floor %.6f: %.6f s per layer "
                  "(%.6f if every level overlapped)",
                  se->mode == NSP_ROUTE_NESTED ? "nested" : "disjoint", trial,
                  st->target_floor, s1, state_step(st));
        *step = dmin(*step, s1);
        if (s1 < best->step) {
            best->step = s1;
            save_assignment(st, best);
        }
        /* Far above the bound: the sequences are too coarse for the
         * balanced target (a few long ones on few ranks). Route again
         * with the time this routing reached per round as the target, so
         * long sequences take smaller groups and leave whole ranks to
         * the others. */
        if (best->step <= NEST_RETRY_GAP * se->bound || !se->coarse ||
            st->target_floor >= NEST_RETRY_SCALE * s1 / trial * 0.99) {
            break;
        }
        st->target_floor = NEST_RETRY_SCALE * s1 / trial;
    }
    return NSP_OK;
}

/* The search over round counts (see search_setup); the best in *best. */
static nsp_status_t search_rounds(nest_state_t *st, nest_saved_t *best, const nest_search_t *se)
{
    const int N = st->sh.ranks;
    double    prev = NEST_INF;
    int       tried_one = 0;

    for (int R = se->r_keep; R <= se->Rcap;) {
        int    trial = R;
        double step;
        /* R used rounds cost at least the bound plus R - 1 more round costs:
         * once that is above the best step, more rounds cannot pay */
        if (best->step < NEST_INF && R > 1 && se->bound + (R - 1) * st->rfix >= best->step) {
            NSP_DEBUG("routing: %d rounds cannot pay for their fixed cost", R);
            break;
        }
        if (!tried_one && se->r_keep > 1 && se->alone > NEST_ONE_ROUND_SHARE * se->work / N) {
            trial = 1;
        }
        tried_one |= trial == 1;
        NSP_CHECK(route_trial(st, best, se, trial, &step));
        if (step >= NEST_INF) {
            if (trial == R) {
                ++R;
            }
            continue;
        }
        if (best->step <= NEST_GOOD_ENOUGH * se->bound) {
            break;
        }
        if (trial == 1 && R > 1) {
            continue;    /* one round tried first: now the kept rounds */
        }
        if (tried_one && R == se->r_keep && best->step < step * NEST_ONE_ROUND_WINS) {
            break;       /* one round clearly beat the kept rounds: more will not help */
        }
        if (trial == R) {
            if (step >= prev * (1.0 - NEST_MORE_ROUNDS_GAIN)) {
                break;   /* one more round did not help: fewer will not either */
            }
            prev = step;
            ++R;
        }
    }
    return NSP_OK;
}

/* Local moves on the best assignment, kept only if exactly faster. */
static nsp_status_t polish_best(nest_state_t *st, const nest_saved_t *best,
                                const nest_search_t *se)
{
    const long   trials0 = (long)NEST_MOVE_TRIALS_PER_SEQ * st->in->nseqs + NEST_MOVE_TRIALS_MIN;
    double       step0, t0, after;

    restore_assignment(st, best);
    st->trials = trials0;
    step0 = state_step(st);
    t0    = nsp_wtime();
    if (best->step > NEST_LOCAL_GAP * se->bound) {
        local_moves(st);   /* near the bound there is nothing left to gain */
    }
    unflip_groups(st);
    if (se->mode == NSP_ROUTE_NESTED) {
        NSP_CHECK(fix_lonely_ranks(st));
    }
    after = state_exact(st, se->levels, se->buf);
    NSP_DEBUG("routing: local moves: %ld trials, %.6f -> %.6f s per layer (exact %.6f -> "
              "%.6f) in %.3f ms", trials0 - st->trials, step0, state_step(st), best->step,
              after, (nsp_wtime() - t0) * 1e3);
    if (after > best->step) {
        restore_assignment(st, best);   /* the moves did not pay off exactly */
    }
    return NSP_OK;
}

nsp_status_t nsp_route(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                       nsp_route_assign_t *a, double *step_s)
{
    const nsp_cost_t *cost = &in->cost;
    const size_t      n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);
    nest_state_t      st;
    nest_saved_t      best = {NULL, NULL, 0, NEST_INF};
    nest_search_t     se;
    nsp_status_t      status;

    search_setup(in, mode, &se);
    NSP_CHECK(state_init(&st, in, mode, se.Rcap));
    NSP_DEBUG("routing: work/N %.6f, longest alone %.6f s per layer, %d rounds hold it kept",
              se.work / cost->cluster.ranks, se.alone, se.r_keep);
    best.loc  = malloc(sizeof(int) * n);
    best.rc   = malloc(sizeof(int) * n);
    se.levels = malloc(sizeof(int) * (size_t)cost->cluster.ranks);
    se.buf    = malloc(sizeof(double) * 3 * (size_t)cost->cluster.ranks);
    if (best.loc == NULL || best.rc == NULL || se.levels == NULL || se.buf == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "routing: cannot allocate %d sequences",
                           in->nseqs);
        goto out_free;
    }
    NSP_CHECK_GOTO(search_rounds(&st, &best, &se), status, out_free);
    /* Few sequences per rank: whole sequences are coarse and the balanced
     * target misleads. The static planner's best plan over the tree's own
     * levels is then a candidate too (its groups are tree nodes), so the tree
     * never loses to one of its levels. Cheap at this size. */
    if (mode == NSP_ROUTE_NESTED && se.coarse) {
        NSP_CHECK_GOTO(static_candidate(&st, &best, se.levels, se.buf), status, out_free);
    }
    if (best.step >= NEST_INF) {
        status = nsp_error(NSP_ERR_INFEASIBLE, "%s planner: the batch does not fit in %d "
                           "rounds; raise params.max_rounds",
                           mode == NSP_ROUTE_NESTED ? "nested" : "disjoint", se.Rcap);
        goto out_free;
    }
    NSP_CHECK_GOTO(polish_best(&st, &best, &se), status, out_free);
    export_assignment(&st, a);
    if (step_s != NULL) {
        *step_s = state_step(&st) * cost->model.layers;
    }
    status = NSP_OK;

out_free:
    free(best.loc);
    free(best.rc);
    free(se.levels);
    free(se.buf);
    state_free(&st);
    return status;
}
