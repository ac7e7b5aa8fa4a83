/*
 * The routing engine: the nested planner (NSP tree routing, docs/design.md §5.2) and,
 * in disjoint mode, a greedy of the disjoint planner. docs/reference/planners.md and
 * docs/design/planner-internals.md have the full description; in short:
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
 * Ring levels (params.enable_ring; docs/reference/cost-model.md): a level whose ring
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
#include "planner/route_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- local improvement ------------------------------------------------------ */

/* Flip recomputed groups back to kept where memory allows (never slower). */
void nsp_nest_unflip_groups(nest_state_t *st)
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
                nsp_nest_propagate(st, rd, n);
                continue;
            }
            nsp_nest_node_abs(st, rd, n, &l1, &l2, &m);
            if (m + nd->tokens / st->sh.deg[st->sh.level[n]] * (st->a_keep - st->a_rc) <= st->cap) {
                nd->rc = 0;
                nsp_nest_propagate(st, rd, n);
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

/* Can no option of level l of round r (rc: recomputed) replace *best in
 * best_insertion's comparison? Its step is at least that of the level's
 * least loaded group plus the bound above, its area at least d times the
 * bound: if the first is above best's (or equal within the tolerance, and
 * the second not below best's area), evaluating it changes nothing. The
 * shortcut is exact: it skips only options the comparison would reject. */
static int insertion_cut(const nest_state_t *st, int i, int r, int l, int rc,
                         const double *rmax, double step, const nest_option_t *best)
{
    const int    nl = st->sh.nl;
    const double m1 = st->round[r].vmm1[(size_t)1 * nl + l];
    double       d1, peak_lb, obj_lb;

    if (!best->valid || st->in->plain_search) {
        return 0;
    }
    if (m1 >= NEST_INF) {
        return 1;   /* no group of the level can take anything */
    }
    d1      = nsp_nest_d1_bound(st, i, l, rc);
    peak_lb = m1 * (1.0 - 1e-12) + d1;
    obj_lb  = step - nest_round_term(st, rmax[r]) +
              nest_round_term(st, dmax(rmax[r], peak_lb));
    if (obj_lb < best->obj - 1e-15) {
        return 0;
    }
    return obj_lb > best->obj + 1e-15 || st->sh.deg[l] * d1 >= best->area;
}

/* Best place for sequence i (already removed) over every round and level,
 * judged by the step it leads to (round fixed costs included, as in `step`:
 * the step without i); rmax[] are the current round maxima. */
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
                int           n;
                if (insertion_cut(st, i, r, l, rc, rmax, step, best)) {
                    continue;
                }
                n = nsp_nest_find_group(st, &st->round[r], l,
                                        s / d * nsp_nest_mem_per_token(st, l, rc));
                if (n < 0 || !nsp_nest_eval_option(st, i, r, n, rc, rmax[r], &opt)) {
                    continue;
                }
                opt.obj = step - nest_round_term(st, rmax[r]) +
                          nest_round_term(st, dmax(rmax[r], opt.peak));
                if (!best->valid || opt.obj < best->obj - 1e-15 ||
                    (opt.obj <= best->obj + 1e-15 && opt.area < best->area)) {
                    *best = opt;
                }
            }
        }
    }
}

/* Move sequences off the slowest rank of each round while the step drops.
 * `before` (the step with i in place) and the options' steps (without it,
 * then with it elsewhere) all count each used round's fixed cost: a move is
 * taken only if it lowers the step the state reports. */
void nsp_nest_local_moves(nest_state_t *st)
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
                    const double  before = nsp_nest_state_step(st);
                    --st->trials;
                    nsp_nest_unplace(st, i);
                    for (int rr = 0; rr < st->R; ++rr) {
                        rmax[rr] = nsp_nest_round_max(st, &st->round[rr]);
                    }
                    step = 0.0;
                    for (int rr = 0; rr < st->R; ++rr) {
                        step += nest_round_term(st, rmax[rr]);
                    }
                    best_insertion(st, i, rmax, step, &best);
                    if (best.valid && best.obj < before * (1.0 - 1e-9) &&
                        !(best.r == r && best.node == n)) {
                        nsp_nest_place(st, i, best.r, best.node, best.rc, 1);
                        moved = improved = 1;
                        break;
                    }
                    nsp_nest_place(st, i, r, n, rc0, 1);
                    i = nexti;
                }
            }
        }
    }
}

/* ---- state -------------------------------------------------------------------- */




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

/* The sequences go back in the caller's order: the groups' sums and links
 * come out as the caller's labels would make them. */
static void restore_assignment(nest_state_t *st, const nest_saved_t *sv)
{
    st->R = sv->R;
    nsp_nest_state_clear(st);
    for (int c = 0; c < st->in->nseqs; ++c) {
        const int i = st->by_caller != NULL ? st->by_caller[c] : c;
        const int r = sv->loc[i] / st->sh.nnodes, n = sv->loc[i] % st->sh.nnodes;
        if (st->in->plain_search) {
            nsp_nest_place(st, i, r, n, sv->rc[i], 0);
        } else if (st->by_caller != NULL) {
            /* the rebuild sets the adds */
            nsp_nest_place_sums_of(st, i, r, n, sv->rc[i], st->caller_lens[c],
                                   st->caller_comp1[c]);
        } else {
            nsp_nest_place_sums(st, i, r, n, sv->rc[i]);
        }
    }
    for (int r = 0; r < st->R; ++r) {
        nsp_nest_round_rebuild(st, &st->round[r], 1);
    }
}

/* The state's assignment into *a, in the caller's labels (st->by_caller):
 * written in order, read where the state keeps each sequence. */
static void export_assignment(const nest_state_t *st, nsp_route_assign_t *a)
{
    const nest_shape_t *sh = &st->sh;

    a->nrounds = st->R;
    for (int c = 0; c < st->in->nseqs; ++c) {
        const int k = st->by_caller != NULL ? st->by_caller[c] : c;
        const int r = st->loc[k] / sh->nnodes, n = st->loc[k] % sh->nnodes;
        const int l = sh->level[n];
        a->round[c] = r;
        a->size[c]  = sh->deg[l];
        a->rank0[c] = (n - sh->off[l]) * sh->deg[l];
        a->rc[c]    = st->round[r].node[n].rc;
    }
}

/* The static planner's best plan on the tree's levels (planned on the
 * caller's batch, caller_in), as a candidate: it replaces *best if exactly
 * faster. */
static nsp_status_t static_candidate(nest_state_t *st, const nsp_planner_input_t *caller_in,
                                     nest_saved_t *best)
{
    const nest_shape_t *sh = &st->sh;
    nsp_route_assign_t  a;
    nest_saved_t        cand = {NULL, NULL, 0, NEST_INF};
    double              step_s = 0.0, ex;
    nsp_status_t        status;

    NSP_CHECK(nsp_route_assign_alloc(&a, st->in->nseqs));
    status = nsp_static_assign(caller_in, &a, &step_s);
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
    for (int c = 0; c < st->in->nseqs; ++c) {
        const int i = st->by_caller != NULL ? st->by_caller[c] : c;
        int       l = 0;
        while (sh->deg[l] != a.size[c]) {
            ++l;
        }
        cand.loc[i] = a.round[c] * sh->nnodes + sh->off[l] + a.rank0[c] / a.size[c];
        cand.rc[i]  = a.rc[c];
    }
    NSP_CHECK_GOTO(nsp_nest_ensure_rounds(st, cand.R), status, out);
    restore_assignment(st, &cand);
    ex = nsp_nest_state_exact(st);
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
    double           kept;    /* activation bytes of the batch kept, summed in the
                                 caller's order */
    int              first;   /* 1 until the first trial is routed */
    int              nu;      /* > 0: the first routing is watched for make, whose
                                 tree of Ulysses levels alone has nu levels */
    nsp_route_hint_t       *make;  /* filled from the first routing if it is shared */
    const nsp_route_hint_t *use;   /* taken as the first routing if it applies */
} nest_search_t;

/* Rounds. The search starts at the fewest rounds that hold the batch with
 * kept activations (r_keep) and adds rounds while the routed step (round
 * costs included) drops. When one sequence dominates (alone at the top
 * degree it takes more than NEST_ONE_ROUND_SHARE of the balanced time), a
 * single round with recomputation where memory needs it is tried first: the
 * others then fill the idle ranks of its round instead of waiting for
 * theirs. A trial within NEST_GOOD_ENOUGH of the bound ends the search.
 * comp1: [nseqs] comp(s, 1) of in's sequences. */
static void search_setup(const nsp_planner_input_t *in, const double *comp1,
                         nsp_route_mode_t mode, nest_search_t *se)
{
    const nsp_cost_t *cost = &in->cost;
    double            longest = 0.0;

    memset(se, 0, sizeof(*se));
    se->mode = mode;
    for (int i = 0; i < in->nseqs; ++i) {
        const double s = (double)in->lens[i];
        se->work   += comp1[i] + nsp_cost_ep_time(cost, s);
        se->kept   += s * cost->act_bytes_keep;
        longest     = dmax(longest, s);
    }
    se->r_keep = (int)ceil(se->kept / (in->mem_cap * cost->cluster.ranks) - 1e-12);
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
 * held the batch; *best keeps the best assignment so far. With a cutoff
 * below NEST_INF (only where no retry can follow: see search_rounds) the
 * routing may be abandoned: *step is then the cutoff, a value the routing
 * would have reached or passed, and it would have held the batch. */
static nsp_status_t route_passes(nest_state_t *st, nest_saved_t *best, const nest_search_t *se,
                                 int trial, double cutoff, double *step, int *passes)
{
    NSP_CHECK(nsp_nest_ensure_rounds(st, trial));
    st->target_floor = 0.0;
    *step   = NEST_INF;
    *passes = 0;
    for (int retry = 0; retry <= NEST_RETRIES; ++retry) {
        double s1;
        int    routed;
        ++*passes;
        st->cutoff = cutoff;
        routed     = nsp_nest_route_all(st, trial, se->work);
        st->cutoff = NEST_INF;
        if (routed < 0) {
            if (st->in->abandoned != NULL) {
                ++*st->in->abandoned;
            }
            *step = cutoff;
            break;
        }
        if (!routed) {
            NSP_DEBUG("routing: %d rounds cannot hold the batch", trial);
            break;
        }
        nsp_nest_unflip_groups(st);
        if (se->mode == NSP_ROUTE_NESTED) {
            NSP_CHECK(nsp_nest_fix_lonely_ranks(st));
        }
        /* candidates are compared as the plan will show them: a group
         * overlaps only where its ranks hold another level */
        s1 = nsp_nest_state_exact(st);
        NSP_DEBUG("routing (%s): %d rounds, target floor %.6f: %.6f s per layer "
                  "(%.6f if every level overlapped)",
                  se->mode == NSP_ROUTE_NESTED ? "nested" : "disjoint", trial,
                  st->target_floor, s1, nsp_nest_state_step(st));
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

/* ---- The first routing, shared ---------------------------------------------
 *
 * nested.c routes a tree with ring levels and then the same batch over its
 * Ulysses levels alone. The smaller tree's first routing is the larger's
 * when the larger never let a ring level matter, so the smaller search can
 * take it instead of routing again (at 4096 ranks, a third of the planning
 * time where both trees give the same plan). Why it is the same routing:
 *  - the shapes: the ring levels are the top ones, each twice the degree
 *    below and the top one all ranks, over a power of two of top Ulysses
 *    groups (ring_levels_shareable). The larger tree's ring levels then
 *    form the same complete binary tree over those groups as the smaller
 *    tree's virtual tree over its roots, in the same order, so every
 *    aggregate and every descent (nsp_nest_find_group, the round maxima)
 *    reads the same values while the ring groups are empty (their adds are
 *    exact zeros, and x + 0.0 is x). The Ulysses levels have the same
 *    degrees, costs and node numbers (level by level from the leaves);
 *  - the search: the same batch and order, the same constants (work,
 *    bound, r_keep, Rcap, coarse: checked) and the same first trial, so
 *    the same target, reserve, split and recomputation threshold, and the
 *    same retries (none: the routing is shared only if it had one pass);
 *  - the routing: phase 1 (route_long) is the only place a ring level can
 *    be chosen. Watched (st->share_nu), it must try the same Ulysses levels
 *    as the smaller tree would (its level range clipped to them equals the
 *    smaller tree's range), and no option at a ring level may change the
 *    best one at any point of the scan: removing options that never became
 *    the running best leaves every comparison of the scan as it was.
 *    Phase 2, the single-level fix and unflip_groups act on leaves and
 *    nonempty groups only; the exact evaluation walks the nonempty groups
 *    in node order.
 * The exact step is taken as the larger tree computed it (the same groups
 * summed in the same order). plain_search shares nothing (tests compare). */

/* Can the tree's first routing be shared with its Ulysses levels alone?
 * Returns their number, 0 if not (see above). */
static int ring_levels_shareable(const nest_shape_t *sh)
{
    int nu = 0;

    while (nu < sh->nl && sh->ring[nu] <= 1) {
        ++nu;
    }
    if (nu == 0 || nu == sh->nl || sh->ng[sh->nl - 1] != 1 ||
        (sh->ng[nu - 1] & (sh->ng[nu - 1] - 1)) != 0) {
        return 0;
    }
    for (int l = nu; l < sh->nl; ++l) {
        if (sh->ring[l] <= 1 || sh->deg[l] != 2 * sh->deg[l - 1]) {
            return 0;
        }
    }
    return nu;
}

static int hint_applies(const nest_state_t *st, const nest_search_t *se, int trial)
{
    const nsp_route_hint_t *h = se->use;

    return h != NULL && h->valid && se->first && se->mode == NSP_ROUTE_NESTED &&
           !st->in->plain_search && st->only_level < 0 && h->nlevels == st->sh.nl &&
           h->trial == trial && h->work == se->work && h->bound == se->bound &&
           h->r_keep == se->r_keep && h->Rcap == se->Rcap && h->coarse == se->coarse;
}

/* The routing the hint holds, as if routed here. */
static nsp_status_t take_hint(nest_state_t *st, nest_saved_t *best, const nest_search_t *se,
                              int trial, double *step)
{
    const nsp_route_hint_t *h = se->use;

    NSP_CHECK(nsp_nest_ensure_rounds(st, trial));
    *step = h->step;
    if (h->step < best->step) {
        best->step = h->step;
        best->R    = trial;
        memcpy(best->loc, h->loc, sizeof(int) * (size_t)st->in->nseqs);
        memcpy(best->rc, h->rc, sizeof(int) * (size_t)st->in->nseqs);
    }
    NSP_DEBUG("routing (nested): %d rounds: the ring tree's routing, shared: %.6f s per layer",
              trial, h->step);
    return NSP_OK;
}

/* Fill se->make from the first routing (its assignment is *best). */
static nsp_status_t make_hint(const nest_state_t *st, const nest_saved_t *best,
                              const nest_search_t *se, int trial, double step)
{
    nsp_route_hint_t *h = se->make;
    const size_t      n = (size_t)(st->in->nseqs > 0 ? st->in->nseqs : 1);
    const int         nn = st->sh.off[se->nu - 1] + st->sh.ng[se->nu - 1];  /* its nodes */

    nsp_route_hint_free(h);
    h->loc = malloc(sizeof(int) * n);
    h->rc  = malloc(sizeof(int) * n);
    if (h->loc == NULL || h->rc == NULL) {
        nsp_route_hint_free(h);
        return nsp_error(NSP_ERR_NO_MEMORY, "routing: cannot allocate %d sequences",
                         st->in->nseqs);
    }
    for (int k = 0; k < st->in->nseqs; ++k) {
        h->loc[k] = best->loc[k] / st->sh.nnodes * nn + best->loc[k] % st->sh.nnodes;
        h->rc[k]  = best->rc[k];
    }
    h->nlevels     = se->nu;
    h->trial       = trial;
    h->step        = step;
    h->work        = se->work;
    h->bound       = se->bound;
    h->r_keep      = se->r_keep;
    h->Rcap        = se->Rcap;
    h->coarse      = se->coarse;
    h->valid       = 1;
    return NSP_OK;
}

void nsp_route_hint_free(nsp_route_hint_t *h)
{
    free(h->loc);
    free(h->rc);
    memset(h, 0, sizeof(*h));
}

/* One trial of search_rounds (route_passes), its first taken from or shared
 * with a hint where that is exact. */
static nsp_status_t route_trial(nest_state_t *st, nest_saved_t *best, const nest_search_t *se,
                                int trial, double cutoff, double *step)
{
    const int watch = se->first && se->make != NULL && se->nu > 0 && cutoff >= NEST_INF;
    int       passes;

    if (hint_applies(st, se, trial)) {
        if (st->in->shared != NULL) {
            ++*st->in->shared;
        }
        return take_hint(st, best, se, trial, step);
    }
    st->share_nu     = watch ? se->nu : 0;
    st->share_broken = 0;
    NSP_CHECK(route_passes(st, best, se, trial, cutoff, step, &passes));
    st->share_nu = 0;
    if (watch && passes == 1 && !st->share_broken && *step < NEST_INF && best->step == *step) {
        NSP_CHECK(make_hint(st, best, se, trial, *step));
    }
    return NSP_OK;
}

/* The cutoff of the `trial`-round routing of search_rounds: a step at or
 * above it changes nothing. Only for the next round count (trial = R) after
 * one that held the batch (prev): a step >= prev (1 - NEST_MORE_ROUNDS_GAIN)
 * ends the search, and a step >= best->step does not replace the best; and
 * only where no retry with a higher target can follow (retries need a
 * coarse batch over NEST_RETRY_GAP times the bound, and the best step does
 * not change here). The routing then need not finish: abandoning it once a
 * bound of its final step is at the cutoff gives the same plan. NEST_INF:
 * route to the end. */
static double rounds_cutoff(const nest_state_t *st, const nest_saved_t *best,
                            const nest_search_t *se, int trial, int R, double prev)
{
    if (st->in->plain_search || se->mode != NSP_ROUTE_NESTED || trial != R ||
        prev >= NEST_INF || best->step >= NEST_INF ||
        (se->coarse && best->step > NEST_RETRY_GAP * se->bound)) {
        return NEST_INF;
    }
    return dmax(best->step, prev * (1.0 - NEST_MORE_ROUNDS_GAIN));
}

/* The search over round counts (see search_setup); the best in *best. */
static nsp_status_t search_rounds(nest_state_t *st, nest_saved_t *best, nest_search_t *se)
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
        NSP_CHECK(route_trial(st, best, se, trial, rounds_cutoff(st, best, se, trial, R, prev),
                              &step));
        se->first = 0;
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
    step0 = nsp_nest_state_step(st);
    t0    = nsp_wtime();
    if (best->step > NEST_LOCAL_GAP * se->bound) {
        nsp_nest_local_moves(st);   /* near the bound there is nothing left to gain */
    }
    nsp_nest_unflip_groups(st);
    if (se->mode == NSP_ROUTE_NESTED) {
        NSP_CHECK(nsp_nest_fix_lonely_ranks(st));
    }
    after = nsp_nest_state_exact(st);
    NSP_DEBUG("routing: local moves: %ld trials, %.6f -> %.6f s per layer (exact %.6f -> "
              "%.6f) in %.3f ms", trials0 - st->trials, step0, nsp_nest_state_step(st), best->step,
              after, (nsp_wtime() - t0) * 1e3);
    if (after > best->step) {
        restore_assignment(st, best);   /* the moves did not pay off exactly */
    }
    return NSP_OK;
}

/* nsp_route on the caller's batch caller_in relabeled longest first as in
 * (its order the identity): the state's sequence of the caller's c-th is
 * by_caller[c]. Sums over the whole batch are taken in the caller's order,
 * so that every value is what the caller's labels give. */
static nsp_status_t route_batch(const nsp_planner_input_t *caller_in,
                                const nsp_planner_input_t *in, const int *by_caller,
                                nsp_route_mode_t mode, nsp_route_hint_t *make,
                                const nsp_route_hint_t *use, nsp_route_assign_t *a,
                                double *step_s)
{
    const nsp_cost_t *cost = &in->cost;
    const size_t      n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);
    nest_state_t      st;
    nest_saved_t      best = {NULL, NULL, 0, NEST_INF};
    nest_search_t     se;
    nsp_status_t      status;

    search_setup(caller_in, in->lens_comp1, mode, &se);
    NSP_CHECK(nsp_nest_state_init(&st, in, mode, se.Rcap));
    st.by_caller    = by_caller;
    st.caller_lens  = caller_in->lens;
    st.caller_comp1 = in->lens_comp1;
    se.first = 1;
    se.make  = make;
    se.use   = use;
    se.nu    = make != NULL && mode == NSP_ROUTE_NESTED && !in->plain_search &&
               st.only_level < 0 ? ring_levels_shareable(&st.sh) : 0;
    st.kept_demand = se.kept;   /* the state's own sum is in its order */
    NSP_DEBUG("routing: work/N %.6f, longest alone %.6f s per layer, %d rounds hold it kept",
              se.work / cost->cluster.ranks, se.alone, se.r_keep);
    best.loc  = malloc(sizeof(int) * n);
    best.rc   = malloc(sizeof(int) * n);
    if (best.loc == NULL || best.rc == NULL) {
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
        NSP_CHECK_GOTO(static_candidate(&st, caller_in, &best), status, out_free);
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
        *step_s = nsp_nest_state_step(&st) * cost->model.layers;
    }
    status = NSP_OK;

out_free:
    free(best.loc);
    free(best.rc);
    nsp_nest_state_free(&st);
    return status;
}

/* The engine routes the batch relabeled longest first: its sequence k is the
 * caller's in->order[k]. It walks its per-sequence arrays (lengths, times,
 * locations, the groups' links) in batch order, so they are now read and
 * written in sequence rather than at random: at 4096 ranks and 134K
 * sequences the random walk missed the first-level cache on most of those
 * accesses. Ties keep their order (the order breaks them by index), so the
 * engine sees the same batch in the same order; export maps back. */
nsp_status_t nsp_route(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                       nsp_route_assign_t *a, double *step_s)
{
    return nsp_route_shared(in, mode, NULL, NULL, a, step_s);
}

nsp_status_t nsp_route_shared(const nsp_planner_input_t *in, nsp_route_mode_t mode,
                              nsp_route_hint_t *make, const nsp_route_hint_t *use,
                              nsp_route_assign_t *a, double *step_s)
{
    nsp_planner_input_t sorted = *in;
    int64_t            *own = NULL;   /* the views, where the caller gave none */
    nsp_status_t        status;

    if (in->order_lens == NULL || in->order_rank == NULL || in->order_ident == NULL ||
        in->lens_comp1 == NULL) {
        NSP_CHECK(nsp_planner_order_views(&sorted, &own));
    }
    sorted.lens  = sorted.order_lens;
    sorted.order = sorted.order_ident;
    status = route_batch(in, &sorted, sorted.order_rank, mode, make, use, a, step_s);
    free(own);
    return status;
}
