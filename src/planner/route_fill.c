/*
 * Filling the routing engine's tree (route_internal.h): option scores, the
 * long sequences through the tree (phase 1), the short ones on the leaves
 * with their min trees and waiting heaps (phase 2), one routing pass for R
 * rounds, the exact step of a state (pipelining only where a rank holds
 * another level) and the fix that gives single-level ranks a leaf sequence.
 */
#include "planner/route_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- option evaluation ---------------------------------------------------- */

/* Per-rank L1, L2 and memory a group would add after taking sequence i with
 * flag rc (nd is the group before). */
static void adds_after(const nest_state_t *st, const nest_node_t *nd, int l, int i, int rc,
                       double *a1, double *a2, double *am)
{
    nest_node_t tmp = *nd;

    nsp_nest_node_account(st, &tmp, l, i, +1);
    tmp.rc = rc;
    nsp_nest_node_adds(st, l, &tmp);
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
int nsp_nest_eval_option(const nest_state_t *st, int i, int r, int n, int rc, double ref,
                       nest_option_t *opt)
{
    const nest_round_t *rd = &st->round[r];
    const nest_node_t  *nd = &rd->node[n];
    const int           l  = st->sh.level[n];
    double              l1, l2, m, a1, a2, am;

    if (nd->rc && !rc) {
        rc = 1;   /* a recomputed group stays recomputed */
    }
    nsp_nest_node_abs(st, rd, n, &l1, &l2, &m);
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

/* A lower bound of the per-rank L1 that sequence i adds to any group of
 * level l (rc: recomputed): its compute and, pipelined, its exchange
 * (without the latency of an empty group or a flip's extra forward), made
 * a little smaller so that it stays below the value evaluated in floating
 * point. Seconds per layer. */
double nsp_nest_d1_bound(const nest_state_t *st, int i, int l, int rc)
{
    const nest_shape_t *sh = &st->sh;
    const double        s = (double)st->in->lens[i];
    const double        rcf = rc ? NSP_COST_RECOMPUTE_COMP : 1.0;

    return ((rcf * st->comp1[i] + st->cost->ep_s_per_token * s) / sh->deg[l] +
            st->eta1 * s * sh->kcoef[l][rc]) * (1.0 - 1e-6);
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
        K += nsp_nest_ring_time(st, l, s, 0);
    }
    return C + st->eta1 * K;
}

/* Row k of st->alone: alone_time of the k-th sequence of the batch order
 * at every level. */
static void alone_fill(nest_state_t *st, int k)
{
    const int i = st->in->order[k], nl = st->sh.nl;

    for (int l = 0; l < nl; ++l) {
        st->alone[(size_t)k * nl + l] = alone_time(st, i, l);
    }
}

/* alone_time of the k-th sequence of the batch order at every level
 * ([nl], kept in the state: it depends on neither the rounds nor the
 * target, and every routing of the state asks for the same prefix). */
static const double *alone_row(nest_state_t *st, int k)
{
    const int nl = st->sh.nl;

    if (st->in->plain_search) {
        alone_fill(st, k);   /* computed every time */
    } else {
        for (; st->nalone <= k; ++st->nalone) {
            alone_fill(st, st->nalone);
        }
    }
    return &st->alone[(size_t)k * nl];
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
    return dmax(nsp_nest_round_max(st, &st->round[r]), st->target);
}

/* Can no option of level l of round r (rc: recomputed) be better than
 * *best (option_better)? Its score is at least the one of the level's
 * least loaded group plus nsp_nest_d1_bound, with d times that bound as
 * its area: when that is above best's score by more than the comparison's
 * tolerance, evaluating it changes nothing (exact). */
static int option_cut(const nest_state_t *st, int i, int r, int l, int rc, double ref,
                      const nest_option_t *best)
{
    const double m1 = st->round[r].vmm1[(size_t)1 * st->sh.nl + l];
    double       d1, score_lb;

    if (!best->valid || st->in->plain_search) {
        return 0;
    }
    if (m1 >= NEST_INF) {
        return 1;   /* no group of the level can take anything */
    }
    d1       = nsp_nest_d1_bound(st, i, l, rc);
    score_lb = dmax(0.0, m1 * (1.0 - 1e-12) + d1 - ref) + st->sh.deg[l] * d1 / st->sh.ranks;
    return score_lb - best->score > 2e-12 * (1.0 + fabs(best->score));
}

/* Try sequence i at level l of round r, kept and recomputed. */
static void consider_level(const nest_state_t *st, int i, int r, int l, double ref,
                           nest_option_t *best)
{
    const double s = (double)st->in->lens[i];
    const double d = st->sh.deg[l];
    nest_option_t opt;
    int           n;

    n = (st->in->lens[i] <= st->rc_below || option_cut(st, i, r, l, 0, ref, best)) ? -1 :
        nsp_nest_find_group(st, &st->round[r], l, s / d * nsp_nest_mem_per_token(st, l, 0));
    if (n >= 0 && nsp_nest_eval_option(st, i, r, n, 0, ref, &opt) && option_better(&opt, best)) {
        *best = opt;
    }
    if (best->valid && best->delta <= 0.0 && best->r == r && best->rc == 0) {
        return;   /* a kept place under the reference: recomputation cannot beat it */
    }
    if (option_cut(st, i, r, l, 1, ref, best)) {
        return;   /* neither recomputed option below can be better */
    }
    n = nsp_nest_find_group(st, &st->round[r], l, s / d * nsp_nest_mem_per_token(st, l, 1));
    if (n >= 0) {
        /* flip the group if kept does not fit; eval checks memory exactly */
        if (nsp_nest_eval_option(st, i, r, n, 1, ref, &opt) && option_better(&opt, best)) {
            *best = opt;
        }
    }
    /* The least loaded group of the level, recomputed: a kept group that is
     * full may make room by flipping. Without this, groups already
     * recomputed (roomy) would collect everything. */
    if (!option_cut(st, i, r, l, 1, ref, best)) {
        const int m = nsp_nest_find_group(st, &st->round[r], l, 0.0);
        if (m >= 0 && m != n && nsp_nest_eval_option(st, i, r, m, 1, ref, &opt) &&
            option_better(&opt, best)) {
            *best = opt;
        }
    }
}

/* The fastest level alone (the first on ties) and the first level whose
 * memory holds sequence k kept (else the top), among the tree's first nl. */
static void level_picks(const nest_state_t *st, int k, const double *alone, int nl,
                        int *l_min, int *l_mem)
{
    const double s = (double)st->in->lens[st->in->order[k]];
    double       t_min = NEST_INF;

    *l_min = 0;
    *l_mem = -1;
    for (int l = 0; l < nl; ++l) {
        if (alone[l] < t_min) {
            t_min  = alone[l];
            *l_min = l;
        }
        if (*l_mem < 0 && s / st->sh.deg[l] * nsp_nest_mem_per_token(st, l, 0) <= st->cap) {
            *l_mem = l;
        }
    }
    if (*l_mem < 0) {
        *l_mem = nl - 1;
    }
}

/* The levels route_long tries in a round of reference ref, [*lo, *hi],
 * among the tree's first nl: from the first whose time alone is within ref
 * (else the fastest) up to the first whose memory holds it, and one more
 * where memory binds. */
static void level_range(const double *alone, int nl, int l_min, int l_mem, double ref,
                        int *lo, int *hi)
{
    int l_time = -1;

    for (int l = 0; l < nl && l_time < 0; ++l) {
        if (alone[l] <= ref) {
            l_time = l;
        }
    }
    if (l_time < 0) {
        l_time = l_min;
    }
    *lo = l_time;
    *hi = l_time > l_mem ? l_time : l_mem;
    if (*hi + 1 < nl && l_mem >= l_time) {
        ++*hi;   /* memory is the binding reason: also try one level up */
    }
}

/* Route the k-th sequence of the batch order, a long one, through the tree
 * (phase 1). Watched for a hint (st->share_nu > 0): the tree of the Ulysses
 * levels alone would try the same of those levels, and no other level may
 * change the best option, else the routing is marked share_broken. */
static int route_long(nest_state_t *st, int k)
{
    const int     i = st->in->order[k];
    const double *alone = alone_row(st, k);
    const int     nu = st->share_nu;
    nest_option_t best;
    int           l_mem, l_min, u_mem = 0, u_min = 0;

    memset(&best, 0, sizeof(best));
    /* what does not depend on the round: the fastest level and the first
     * level whose memory holds it kept */
    level_picks(st, k, alone, st->sh.nl, &l_min, &l_mem);
    if (nu > 0) {
        level_picks(st, k, alone, nu, &u_min, &u_mem);
    }
    for (int r = 0; r < st->R; ++r) {
        const double ref = round_ref(st, r);
        int          lo, hi;
        level_range(alone, st->sh.nl, l_min, l_mem, ref, &lo, &hi);
        if (st->mode == NSP_ROUTE_DISJOINT) {
            lo = 0;   /* joining a used group of any level may be the only place */
            hi = st->sh.nl - 1;
        }
        if (st->only_level >= 0) {
            lo = hi = st->only_level;
        }
        if (nu > 0) {
            int ulo, uhi;
            level_range(alone, nu, u_min, u_mem, ref, &ulo, &uhi);
            st->share_broken |= ulo != lo || uhi != (hi < nu ? hi : nu - 1);
        }
        for (int l = lo; l <= hi; ++l) {
            const int was_valid = best.valid, was_node = best.node, was_r = best.r;
            consider_level(st, i, r, l, ref, &best);
            if (l >= nu && nu > 0) {
                st->share_broken |= best.valid != was_valid || best.node != was_node ||
                                    best.r != was_r;
            }
        }
    }
    if (!best.valid) {
        return 0;
    }
    nsp_nest_place(st, i, best.r, best.node, best.rc, 1);
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

/* After leaf j's key in mode m changed: refresh the winners from its node
 * upwards. Where a node keeps its winner and that is not j, nothing above
 * changes (its key did not either). */
static void leaf_tree_up(const nest_state_t *st, nest_round_t *rd, int m, int j)
{
    const double *key = rd->lkey[m];
    int          *win = rd->win[m];

    for (int v = (st->lsize + j) / 2; v >= 1; v /= 2) {
        const int a = win[2 * v], b = win[2 * v + 1];
        const int w = key[a] <= key[b] ? a : b;
        if (win[v] == w && w != j) {
            break;
        }
        win[v] = w;
    }
}

/* Mode m's tree from its leaves' keys, bottom-up: the same tree as the
 * walks up give, in O(lsize). */
static void leaf_tree_build(const nest_state_t *st, nest_round_t *rd, int m)
{
    const double *key = rd->lkey[m];
    int          *win = rd->win[m];

    for (int v = st->lsize - 1; v >= 1; --v) {
        const int a = win[2 * v], b = win[2 * v + 1];
        win[v] = key[a] <= key[b] ? a : b;
    }
}

/* Leaf j's key in mode m: its L1 if it has the mode's need free, else
 * infinity (and it waits in the heap). Returns 0 on no memory. */
static int leaf_key(nest_state_t *st, nest_round_t *rd, int j, int m)
{
    const double fr = leaf_free(st, rd, j, m);

    if (fr >= *rd->need[m]) {
        rd->lkey[m][j] = rd->leaf1[j];
        return 1;
    }
    rd->lkey[m][j] = NEST_INF;
    return heap_push(&rd->wait[m], fr, j, rd->stamp[j]);
}

/* Set leaf j's key in mode m's tree. Returns 0 on no memory. */
static int leaf_key_set(nest_state_t *st, nest_round_t *rd, int j, int m)
{
    if (!leaf_key(st, rd, j, m)) {
        return 0;
    }
    leaf_tree_up(st, rd, m, j);
    return 1;
}

/* Bring mode m's tree up to date with the leaves changed since it was last
 * read (refresh: 0 when every leaf is about to be set anyway). Returns 0 on
 * no memory. */
static int leaf_flush(nest_state_t *st, nest_round_t *rd, int m, int refresh)
{
    int ok = 1;

    for (int k = 0; k < rd->ndirty[m]; ++k) {
        const int j = rd->dirty[m][k];
        rd->is_dirty[m][j] = 0;
        if (refresh && ok) {
            ok = leaf_key_set(st, rd, j, m);
        }
    }
    rd->ndirty[m] = 0;
    return ok;
}

/* After a change of leaf j (its load, memory or flag): both trees take it
 * when they are next queried (leaf_find; at once under plain_search).
 * Returns 0 on no memory. */
static int leaf_seg_set(nest_state_t *st, nest_round_t *rd, int j)
{
    int ok = 1;

    rd->stamp[j]++;
    for (int m = 0; m < 2; ++m) {
        if (!rd->is_dirty[m][j]) {
            rd->is_dirty[m][j] = 1;
            rd->dirty[m][rd->ndirty[m]++] = j;
        }
        if (st->in->plain_search) {
            ok &= leaf_flush(st, rd, m, 1);
        }
    }
    return ok;
}

/* Absolute leaf values from the tree (top-down sums), and the two trees with
 * every leaf admitted (the first need is set by the first query), built
 * bottom-up. */
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
        rd->stamp[j]++;
    }
    for (int m = 0; m < 2; ++m) {
        *rd->need[m] = -NEST_INF;
        rd->wait[m].n = 0;
        (void)leaf_flush(st, rd, m, 0);
    }
    for (int m = 0; m < 2; ++m) {
        double *key = rd->lkey[m];
        int    *win = rd->win[m];
        for (int j = 0; j < st->lsize; ++j) {
            key[j] = j < sh->ng[0] ? rd->leaf1[j] : NEST_INF;
            win[st->lsize + j] = j;
        }
        leaf_tree_build(st, rd, m);
    }
    return 1;
}

/* The least loaded leaf with `need` bytes free (flip: if recomputed), or -1.
 * Leaves short of `need` leave the tree for the heap; those the lower need
 * now fits come back. */
static int leaf_find(nest_state_t *st, nest_round_t *rd, double need, int flip)
{
    const int         m = flip ? 1 : 0;
    leaf_heap_t      *h = &rd->wait[m];
    const double     *key = rd->lkey[m];

    if (!leaf_flush(st, rd, m, need <= *rd->need[m])) {
        return -1;
    }
    if (need > *rd->need[m]) {
        /* a larger need than before (first query): re-check every leaf,
         * then rebuild the tree at once */
        *rd->need[m] = need;
        h->n = 0;
        for (int j = 0; j < st->sh.ng[0]; ++j) {
            if (!leaf_key(st, rd, j, m)) {
                return -1;
            }
        }
        leaf_tree_build(st, rd, m);
    }
    *rd->need[m] = need;
    while (h->n > 0 && h->free[0] >= need) {
        const int j = h->leaf[0], t = h->stamp[0];
        heap_pop(h);
        if (t == rd->stamp[j] && key[j] >= NEST_INF) {
            (void)leaf_key_set(st, rd, j, m);   /* fits now: back in the tree */
        }
    }
    for (;;) {
        const int j = rd->win[m][1];
        if (key[j] >= NEST_INF) {
            return -1;
        }
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
        const int    j   = leaf_find(st, &st->round[r], s / d * nsp_nest_mem_per_token(st, 0, 0), 0);
        if (j >= 0 && eval_leaf(st, i, r, j, 0, ref, &opt) && option_better(&opt, &best)) {
            best = opt;
        }
    }
    if (!best.valid || best.delta > 0.0) {
        for (int r = 0; r < st->R; ++r) {
            const double ref = dmax(rmax[r], st->target);
            const int    j   = leaf_find(st, &st->round[r], s / d * nsp_nest_mem_per_token(st, 0, 1), 1);
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
        nsp_nest_place(st, i, best.r, best.node, best.rc, 0);
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

void nsp_nest_state_clear(nest_state_t *st)
{
    for (int r = 0; r < st->R; ++r) {
        nsp_nest_round_clear(st, &st->round[r]);
    }
    for (int i = 0; i < st->in->nseqs; ++i) {
        st->loc[i] = st->next[i] = st->prev[i] = -1;
    }
}

/* Step of the current state, per layer (sum of round maxima). */
double nsp_nest_state_step(const nest_state_t *st)
{
    double step = 0.0;

    for (int r = 0; r < st->R; ++r) {
        step += nest_round_term(st, nsp_nest_round_max(st, &st->round[r]));
    }
    return step;
}

/* The least per-rank L1 sequence i adds at level l, kept or recomputed. */
static double d1_least(const nest_state_t *st, int i, int l)
{
    return dmin(nsp_nest_d1_bound(st, i, l, 0), nsp_nest_d1_bound(st, i, l, 1));
}

/* A lower bound of round r's slowest rank at the end of this routing, after
 * phase 1: the largest sum over a rank's path of the groups' per-rank L1 at
 * the flag that makes it least (round_exact's compute, exchange and ring of
 * a group are at least its add1 at its final flag, a rank's time is at least
 * the sum of its groups' L1, and groups only gain sequences until
 * nsp_nest_fix_lonely_ranks). That fix moves leaf sequences of the round,
 * shortest first and never a leaf's last one, so a leaf keeps its longest
 * (the first it got: the batch order is longest first): a leaf counts only
 * that one, at least d1_least. The groups above the leaves keep their
 * members (see routing_bound). Scratch:
 * st->xterm (nnodes <= 2 ranks: each degree divides the next and is larger). */
static double round_floor(const nest_state_t *st, int r)
{
    const nest_shape_t *sh = &st->sh;
    const nest_round_t *rd = &st->round[r];
    double             *up = st->xterm;
    double              worst = 0.0;

    for (int n = sh->off[0]; n < sh->off[0] + sh->ng[0]; ++n) {
        up[n] = 0.0;
        for (int i = rd->node[n].head; i >= 0; i = st->next[i]) {
            up[n] = dmax(up[n], d1_least(st, i, 0));   /* its longest stays */
        }
    }
    for (int l = 1; l < sh->nl; ++l) {
        for (int n = sh->off[l]; n < sh->off[l] + sh->ng[l]; ++n) {
            nest_node_t k = rd->node[n], c = rd->node[n];
            double      below = 0.0;
            k.rc = 0;
            c.rc = 1;
            nsp_nest_node_adds(st, l, &k);
            nsp_nest_node_adds(st, l, &c);
            for (int q = sh->first_child[n]; q < sh->first_child[n] + sh->nchild[n]; ++q) {
                below = dmax(below, up[q]);
            }
            up[n] = dmin(k.add1, c.add1) + below;
        }
    }
    for (int q = 0; q < sh->nroots; ++q) {
        worst = dmax(worst, up[sh->roots[q]]);
    }
    return worst;
}

/* What routing_bound takes from the state after phase 1 (it does not change
 * during phase 2: the rest go on the leaves). */
typedef struct nest_bound {
    double area;                                   /* A, rank-seconds per layer */
    double a_r[NSP_PLANNER_DEFAULT_MAX_ROUNDS];    /* the placed ones' part per round */
    double floor[NSP_PLANNER_DEFAULT_MAX_ROUNDS];  /* round_floor after phase 1 */
    int    nused;                                  /* max(U, 1) */
} nest_bound_t;

/* A lower bound of the exact step (nsp_nest_state_exact) that this routing
 * of R rounds can end with, after phase 1 (the first `split` sequences of
 * the batch order placed; the others will go on the leaves), seconds per
 * layer. Why it is one:
 *  - a rank's exact time in a round is nsp_cost_rank_time(C, Kp, Ks) =
 *    max(C, Kp) + (1-eta) min(C, Kp) + Ks >= C + (1-eta)(Kp + Ks), and a
 *    round's slowest rank M_r is at least the mean over the N ranks, so at
 *    least X_r = (the sum over its groups of deg * (C + (1-eta) K)) / N;
 *  - a group's C + (1-eta) K per rank (round_exact: compute, ep, transfer
 *    CPU >= 0, a2a bytes / B(u) + latency >= 0, ring time linear in its
 *    tokens + latency >= 0) is at least the sum over its sequences of
 *    nsp_nest_d1_bound at its flag, so at least d1_least (the flag may
 *    still change: flips, unflip_groups);
 *  - a sequence keeps its round and level from its placement to the end of
 *    the routing (phase 1 places each long sequence once, flips change only
 *    the flag; phase 2 and nsp_nest_fix_lonely_ranks place and move only on
 *    the leaves of one round), so with A the sum over placed ones of
 *    deg(l) * d1_least(l) and over the others of deg[0] * d1_least(0), the
 *    X_r sum to at least A / N, and X_r >= a_r (round r's placed ones / N);
 *  - M_r >= m_r = round_floor(r); so sum M_r >= sum max(m_r, X_r) >=
 *    max(sum max(m_r, a_r), A / N);
 *  - a round used now stays used (sequences are only added; the single-level
 *    fix takes a sequence only from a leaf that keeps another one), and each
 *    used round costs rfix: at least max(U, 1) of them (U used now, one if
 *    any sequence is left).
 * The 1e-6 margin of nsp_nest_d1_bound and the final 1e-9 cover rounding.
 * This part fills bd once, after phase 1; routing_bound combines. */
static void routing_bound_init(const nest_state_t *st, int split, nest_bound_t *bd)
{
    const nsp_planner_input_t *in = st->in;
    const nest_shape_t        *sh = &st->sh;

    memset(bd, 0, sizeof(*bd));
    for (int k = 0; k < in->nseqs; ++k) {
        const int i = in->order[k];
        if (k < split) {
            const int    r = st->loc[i] / sh->nnodes, l = sh->level[st->loc[i] % sh->nnodes];
            const double ai = sh->deg[l] * d1_least(st, i, l);
            bd->nused += bd->a_r[r] == 0.0;
            bd->a_r[r] += ai;
            bd->area   += ai;
        } else {
            bd->area += sh->deg[0] * d1_least(st, i, 0);
        }
    }
    if (bd->nused == 0 && split < in->nseqs) {
        bd->nused = 1;
    }
    for (int r = 0; r < st->R; ++r) {
        bd->floor[r] = round_floor(st, r);
    }
}

/* The bound itself, with each round's floor raised to floors[r] (a lower
 * bound of its final slowest rank known later, or bd->floor). */
static double routing_bound(const nest_state_t *st, const nest_bound_t *bd,
                            const double *floors)
{
    double peaks = 0.0;

    for (int r = 0; r < st->R; ++r) {
        peaks += dmax(floors[r], bd->a_r[r] / st->sh.ranks);
    }
    return (dmax(peaks, bd->area / st->sh.ranks) + bd->nused * st->rfix) * (1.0 - 1e-9);
}

/* Will phase 2 place every short sequence (k >= split)? Sufficient, on
 * leaves of one rank: a leaf with cap - leafm >= s a_rc free takes s
 * recomputed (flipping it only frees memory), route_short tries that in
 * every round when nothing kept fits, and a placement lowers a leaf's free
 * memory by at most s a_keep. So if the free memory over the R * ng0 leaves
 * (`left_free`), less every short sequence's kept bytes (`demand`), is
 * above R * ng0 times the largest short need recomputed, some leaf still
 * has that need free when each sequence comes (pigeonhole). */
static int leaves_hold(const nest_state_t *st, int split, double left_free, double demand)
{
    const nsp_planner_input_t *in = st->in;
    double                     need;

    if (st->sh.deg[0] != 1) {
        return 0;
    }
    /* the batch order is longest first: the first short sequence needs most */
    need = split < in->nseqs
               ? (double)in->lens[in->order[split]] * nsp_nest_mem_per_token(st, 0, 1)
               : 0.0;
    return (left_free - demand) * (1.0 - 1e-9) >
           (1.0 + 1e-6) * need * st->sh.ng[0] * (double)st->R;
}

/* Phase 2 checks whether it can stop every this many placements. */
#define NEST_WATCH_EVERY 64

/* What phase 2 keeps to abandon a routing whose step cannot reach below
 * st->cutoff (nsp_nest_route_all). */
typedef struct nest_watch {
    int          on;    /* 1: the routing holds the batch and nothing is recomputed */
    nest_bound_t bd;
    int    empty[NSP_PLANNER_DEFAULT_MAX_ROUNDS];  /* empty leaves of each round */
    int    top[NSP_PLANNER_DEFAULT_MAX_ROUNDS];    /* leaf that set rmax last, -1 */
} nest_watch_t;

/* After phase 1: is the watch on, and abandon at once? Only without
 * recomputation (rc_below, rc_leaves, a recomputed group: unflip_groups could
 * lower a load) and where leaves_hold proves phase 2 will place everything. */
static void watch_init(const nest_state_t *st, nest_watch_t *w, int split, double left_free,
                       double demand)
{
    const nest_shape_t *sh = &st->sh;

    w->on = st->cutoff < NEST_INF && !st->in->plain_search && st->rc_below == 0 &&
            !st->rc_leaves && leaves_hold(st, split, left_free, demand);
    for (int r = 0; r < st->R && w->on; ++r) {
        const nest_round_t *rd = &st->round[r];
        w->empty[r] = 0;
        w->top[r]   = -1;
        for (int n = 0; n < sh->nnodes; ++n) {
            w->on &= !rd->node[n].rc;
            w->empty[r] += sh->level[n] == 0 && rd->node[n].nseq == 0;
        }
    }
    if (w->on) {
        routing_bound_init(st, split, &w->bd);
    }
}

/* After sequence i went on a leaf: empty leaves, the slowest leaf, flags. */
static void watch_placed(const nest_state_t *st, nest_watch_t *w, int i, const double *rmax)
{
    const int           r = st->loc[i] / st->sh.nnodes, n = st->loc[i] % st->sh.nnodes;
    const nest_round_t *rd = &st->round[r];
    const int           j = n - st->sh.off[0];

    w->on &= !rd->node[n].rc;
    w->empty[r] -= rd->node[n].nseq == 1;
    if (dmax(rd->leaf1[j], rd->leaf2[j]) >= rmax[r]) {
        w->top[r] = j;
    }
}

/* A lower bound of the final time of leaf j's rank in round r: its L1 and L2
 * now (the leaf phase's absolute values: loads only grow until the end of
 * phase 2) less what nsp_nest_fix_lonely_ranks can take from its leaf: the
 * leaf's shortest sequences, never its last one, at most one per empty leaf
 * of the round (a lonely rank's leaf is empty; leaves only fill), so at
 * most min(all but the longest, E / cnt of the total) of the compute on it
 * now (the E shortest average at most the mean; sequences still to come
 * are shorter than any there and only add to what is left). */
static double leaf_floor(const nest_state_t *st, const nest_watch_t *w, int r, int j)
{
    const nest_round_t *rd = &st->round[r];
    const nest_node_t  *nd = &rd->node[st->sh.off[0] + j];
    double              total = 0.0, longest = 0.0, take;

    for (int i = nd->head; i >= 0; i = st->next[i]) {
        const double c = least_area(st, i);   /* its compute on one rank */
        total  += c;
        longest = dmax(longest, c);
    }
    take = dmin(total - longest, nd->nseq > 0 ? w->empty[r] * total / nd->nseq : 0.0);
    return dmax(rd->leaf1[j], rd->leaf2[j]) - take * (1.0 + 1e-9);
}

/* Abandon now (before the k-th sequence of the batch order)? The bound of
 * routing_bound with each round's floor raised to its slowest leaf's
 * leaf_floor. */
static int watch_abandon(const nest_state_t *st, const nest_watch_t *w, int k)
{
    double floors[NSP_PLANNER_DEFAULT_MAX_ROUNDS], lb;

    for (int r = 0; r < st->R; ++r) {
        floors[r] = w->bd.floor[r];
        if (w->top[r] >= 0) {
            floors[r] = dmax(floors[r], leaf_floor(st, w, r, w->top[r]));
        }
    }
    lb = routing_bound(st, &w->bd, floors);
    if (lb < st->cutoff) {
        return 0;
    }
    NSP_DEBUG("routing: %d rounds: bound %.6f >= %.6f s per layer: abandoned before "
              "sequence %d of %d", st->R, lb, st->cutoff, k, st->in->nseqs);
    return 1;
}

/* Route the whole batch in R rounds; 0 if some sequence found no place, -1
 * if abandoned after phase 1 (st->cutoff). */
int nsp_nest_route_all(nest_state_t *st, int R, double work)
{
    const nsp_planner_input_t *in = st->in;
    const double               cap = st->cap;
    double                     rmax[NSP_PLANNER_DEFAULT_MAX_ROUNDS];
    double                     reserve = 0.0;
    int                        k, split = in->nseqs;
    nest_watch_t               w;

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
        double       demand = st->kept_demand;
        for (int q = in->nseqs - 1; q >= 0 && demand > budget; --q) {
            const int64_t len = in->lens[in->order[q]];
            demand -= (double)len * (st->a_keep - st->a_rc);
            st->rc_below = len;
        }
    }
    st->a_placed = 0.0;
    st->w_left   = work;
    st->target   = dmax(st->target_floor, work / (st->sh.ranks * (double)R));
    nsp_nest_state_clear(st);
    /* Long sequences (phase 1) are those that would not sit comfortably on
     * one leaf. The short ones must fit somewhere afterwards: phase 1 leaves
     * every rank room for its share of them recomputed (the least they can
     * take), so memory-tight rounds recompute short sequences, whose extra
     * forward is cheap, rather than fail. */
    if (st->mode == NSP_ROUTE_NESTED && st->only_level < 0) {
        for (k = 0; k < in->nseqs; ++k) {
            const int    i = in->order[k];
            const double s = (double)in->lens[i];
            if (alone_row(st, k)[0] <= NEST_LONG_TIME_SHARE * st->target &&
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
        if (!route_long(st, k)) {
            NSP_DEBUG("routing: %d rounds: no place in the tree for sequence #%d by length "
                      "(%lld tokens)", R, i, (long long)in->lens[i]);
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
            rmax[r] = nsp_nest_round_max(st, &st->round[r]);
            for (int j = 0; j < st->sh.ng[0]; ++j) {
                left_free += dmax(0.0, cap - st->round[r].leafm[j]) * st->sh.deg[0];
            }
        }
        for (int q = split; q < in->nseqs; ++q) {
            demand += (double)in->lens[in->order[q]] * st->a_keep;
        }
        st->rc_leaves = demand > NEST_LEAF_FILL * left_free;
        watch_init(st, &w, split, left_free, demand);
        NSP_TRACE("routing: %d rounds: %d long sequences; the short ones need %.1f GB kept, "
                  "%.1f GB free on the leaves: %s", R, split, demand / 1e9, left_free / 1e9,
                  st->rc_leaves ? "recomputed" : "kept where they fit");
    }
    for (; k < in->nseqs; ++k) {
        if (w.on && (k - split) % NEST_WATCH_EVERY == 0 && watch_abandon(st, &w, k)) {
            return -1;
        }
        if (!route_short(st, in->order[k], rmax)) {
            NSP_DEBUG("routing: %d rounds: no leaf for sequence #%d by length (%lld tokens)",
                      R, in->order[k], (long long)in->lens[in->order[k]]);
            return 0;
        }
        if (w.on) {
            watch_placed(st, &w, in->order[k], rmax);
        }
    }
    for (int r = 0; r < R; ++r) {
        /* every add is current (recomputed under plain_search) */
        nsp_nest_round_rebuild(st, &st->round[r], st->in->plain_search);
    }
    return 1;
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
 * (a group overlaps only if each of its ranks holds another level); fills
 * st->xlev (nonempty groups holding each rank). */
static double round_exact(const nest_state_t *st, const nest_round_t *rd)
{
    const nest_shape_t *sh = &st->sh;
    int                *levels = st->xlev;
    double             *C = st->xterm, *Kp = C + sh->ranks, *Ks = Kp + sh->ranks;
    double              worst = 0.0;

    count_levels(st, rd, levels);
    memset(st->xterm, 0, sizeof(double) * 3 * (size_t)sh->ranks);
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
        c += nsp_cost_group_xfer_cpu(st->cost, rcb * nd->bytes, nsp_cost_ring_bytes(st->cost,
                 nd->tokens, sh->deg[l], sh->ring[l], nd->rc), sh->deg[l], sh->ring[l], nd->rc);
        k = sh->deg[l] > 1 ? rcb * nd->bytes / sh->bw[l] + sh->lat4[l] : 0.0;
        kr = nsp_nest_ring_time(st, l, nd->tokens, nd->rc);
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
double nsp_nest_state_exact(const nest_state_t *st)
{
    double step = 0.0;

    for (int r = 0; r < st->R; ++r) {
        step += nest_round_term(st, round_exact(st, &st->round[r]));
    }
    return step;
}

/* Does a rank of round rd hold a single level that is not its leaf (fills
 * st->xlev)? */
static int round_has_lonely(const nest_state_t *st, const nest_round_t *rd)
{
    count_levels(st, rd, st->xlev);
    for (int g = 0; g < st->sh.ranks; ++g) {
        if (st->xlev[g] == 1 && rd->node[st->sh.off[0] + g].nseq == 0) {
            return 1;
        }
    }
    return 0;
}

/* Give every rank that holds only an exchanging level one short leaf sequence
 * of the same round (the shortest first, from leaves that keep another one),
 * so its exchange overlaps; keep the moves only if the round's exact time
 * drops. */
nsp_status_t nsp_nest_fix_lonely_ranks(nest_state_t *st)
{
    const nest_shape_t *sh = &st->sh;
    const size_t        n  = (size_t)(st->in->nseqs > 0 ? st->in->nseqs : 1);
    int                *left   = malloc(sizeof(int) * (size_t)sh->ng[0]);
    int                *moved  = malloc(sizeof(int) * 2 * (size_t)sh->ranks);
    donor_t            *donors = malloc(sizeof(donor_t) * n);
    nsp_status_t        status = NSP_OK;

    if (left == NULL || moved == NULL || donors == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate scratch for "
                           "%d ranks", sh->ranks);
        goto out_free;
    }
    if (sh->deg[0] != 1) {
        goto out_free;   /* leaves exchange too: nothing to gain */
    }
    for (int r = 0; r < st->R; ++r) {
        nest_round_t *rd = &st->round[r];
        int           nmoved = 0, ndonors = 0, next_donor = 0;
        double        before;

        if (!round_has_lonely(st, rd) && !st->in->plain_search) {
            continue;   /* no rank to give a sequence: nothing would move */
        }
        before = round_exact(st, rd);

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
            if (st->xlev[g] != 1 || rd->node[dst].nseq > 0) {
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
                nsp_nest_node_abs(st, rd, dst, &l1, &l2, &m);
                adds_after(st, nd, 0, dn->i, nd->rc, &a1, &a2, &am);
                if (m - nd->addm + am > st->cap) {
                    continue;
                }
                moved[2 * nmoved]     = dn->i;
                moved[2 * nmoved + 1] = sh->off[0] + dn->leaf;
                ++nmoved;
                left[dn->leaf]--;
                ++next_donor;
                nsp_nest_unplace(st, dn->i);
                nsp_nest_place(st, dn->i, r, dst, nd->rc, 1);
            }
        }
        if (nmoved > 0) {
            const double after = round_exact(st, rd);
            if (after >= before) {
                for (int k = nmoved - 1; k >= 0; --k) {
                    const int i = moved[2 * k];
                    nsp_nest_unplace(st, i);
                    nsp_nest_place(st, i, r, moved[2 * k + 1], rd->node[moved[2 * k + 1]].rc, 1);
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
    free(left);
    return status;
}
