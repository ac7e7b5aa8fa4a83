/*
 * The routing engine's load tree (route_internal.h): the tree's shape, each
 * round's node aggregates (per-rank adds, maxima of L1, L2 and memory below a
 * node, and per lower level the least loaded and the least full group below
 * it), the least-loaded-group-with-room query, and placing or removing a
 * sequence with the updates along its path. O(levels) per query,
 * O(levels^2) per update.
 */
#include "planner/route_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shape --------------------------------------------------------------- */

void nsp_nest_shape_free(nest_shape_t *sh)
{
    free(sh->level);
    free(sh->parent);
    free(sh->first_child);
    free(sh->nchild);
    free(sh->roots);
    free(sh->vslot);
    free(sh->moff);
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

nsp_status_t nsp_nest_shape_init(nest_shape_t *sh, const nsp_planner_input_t *in)
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
        for (int rc = 0; rc <= 1; ++rc) {
            /* a2a bytes are linear in s: their value at s = 1 */
            sh->kcoef[l][rc] = sh->deg[l] > 1 ?
                (rc ? NSP_COST_RECOMPUTE_A2A : 1.0) *
                nsp_cost_group_a2a_bytes(cost, 1.0, sh->deg[l], sh->ring[l]) / sh->bw[l] +
                sh->rcoef[l][rc] : 0.0;
        }
        n += sh->ng[l];
    }
    sh->nnodes      = n;
    sh->level       = malloc(sizeof(int) * (size_t)n);
    sh->parent      = malloc(sizeof(int) * (size_t)n);
    sh->first_child = malloc(sizeof(int) * (size_t)n);
    sh->nchild      = malloc(sizeof(int) * (size_t)n);
    sh->vslot       = malloc(sizeof(int) * (size_t)n);
    sh->moff        = malloc(sizeof(int) * (size_t)n);
    keys            = malloc(sizeof(*keys) * (size_t)n);
    if (sh->level == NULL || sh->parent == NULL || sh->first_child == NULL ||
        sh->nchild == NULL || sh->vslot == NULL || sh->moff == NULL || keys == NULL) {
        free(keys);
        nsp_nest_shape_free(sh);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate a tree of %d "
                         "groups", n);
    }
    for (int l = 0; l < sh->nl; ++l) {
        for (int j = 0; j < sh->ng[l]; ++j) {
            const int id = sh->off[l] + j;
            sh->level[id] = l;
            sh->vslot[id] = -1;
            sh->moff[id]  = (int)sh->mtotal;
            sh->mtotal   += (size_t)l + 1;
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
        nsp_nest_shape_free(sh);
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

void nsp_nest_round_free(nest_round_t *rd)
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
        free(rd->lkey[m]);
        free(rd->win[m]);
        free(rd->dirty[m]);
        free(rd->is_dirty[m]);
        free(rd->need[m]);
        free(rd->wait[m].free);
        free(rd->wait[m].leaf);
        free(rd->wait[m].stamp);
    }
    free(rd->stamp);
    memset(rd, 0, sizeof(*rd));
}

nsp_status_t nsp_nest_round_alloc(nest_state_t *st, nest_round_t *rd)
{
    const nest_shape_t *sh = &st->sh;
    const size_t        nn = (size_t)sh->nnodes, nl = (size_t)sh->nl;
    const size_t        vv = 2 * (size_t)sh->vsize, ls = 2 * (size_t)st->lsize;
    int                 ok = 1;

    rd->node  = calloc(nn, sizeof(*rd->node));
    rd->mm1   = malloc(sizeof(double) * sh->mtotal);
    rd->mmm   = malloc(sizeof(double) * sh->mtotal);
    rd->v1    = malloc(sizeof(double) * vv);
    rd->v2    = malloc(sizeof(double) * vv);
    rd->vm    = malloc(sizeof(double) * vv);
    rd->vmm1  = malloc(sizeof(double) * vv * nl);
    rd->vmmm  = malloc(sizeof(double) * vv * nl);
    rd->leaf1 = malloc(sizeof(double) * (size_t)sh->ng[0]);
    rd->leaf2 = malloc(sizeof(double) * (size_t)sh->ng[0]);
    rd->leafm = malloc(sizeof(double) * (size_t)sh->ng[0]);
    for (int m = 0; m < 2; ++m) {
        rd->lkey[m]     = malloc(sizeof(double) * (size_t)st->lsize);
        rd->win[m]      = malloc(sizeof(int) * ls);
        ok &= rd->lkey[m] != NULL && rd->win[m] != NULL;
        rd->dirty[m]    = malloc(sizeof(int) * (size_t)sh->ng[0]);
        rd->is_dirty[m] = calloc((size_t)sh->ng[0], 1);
        rd->need[m]     = malloc(sizeof(double));
        ok &= rd->dirty[m] != NULL && rd->is_dirty[m] != NULL && rd->need[m] != NULL;
    }
    rd->stamp = calloc((size_t)sh->ng[0], sizeof(int));
    if (!ok || rd->node == NULL || rd->mm1 == NULL || rd->mmm == NULL || rd->v1 == NULL ||
        rd->v2 == NULL || rd->vm == NULL || rd->vmm1 == NULL || rd->vmmm == NULL ||
        rd->leaf1 == NULL || rd->leaf2 == NULL || rd->leafm == NULL || rd->stamp == NULL) {
        nsp_nest_round_free(rd);
        return nsp_error(NSP_ERR_NO_MEMORY, "nested planner: cannot allocate a round of %d "
                         "groups", sh->nnodes);
    }
    return NSP_OK;
}

/* Ring exchange seconds per layer of a level-l group holding `tokens`
 * (sum of its sequences' lengths); 0 for a Ulysses level. */
double nsp_nest_ring_time(const nest_state_t *st, int l, double tokens, int rc)
{
    if (st->sh.ring[l] <= 1) {
        return 0.0;
    }
    return tokens * st->sh.rcoef[l][rc != 0] + st->sh.rlat[l][rc != 0];
}

/* Activation (+ ring buffer) bytes per token held at level l. */
double nsp_nest_mem_per_token(const nest_state_t *st, int l, int rc)
{
    return (rc ? st->a_rc : st->a_keep) + st->sh.ringm[l];
}

/* Per-rank additions of a group from its sums. */
void nsp_nest_node_adds(const nest_state_t *st, int l, nest_node_t *nd)
{
    const double rcf = nd->rc ? NSP_COST_RECOMPUTE_COMP : 1.0;
    const double rcb = nd->rc ? NSP_COST_RECOMPUTE_A2A : 1.0;
    const double d   = st->sh.deg[l];
    const double C   = (rcf * nd->comp + st->cost->ep_s_per_token * nd->tokens) / d;
    double       K   = (nd->nseq > 0 && st->sh.deg[l] > 1) ?
                       rcb * nd->bytes / st->sh.bw[l] + st->sh.lat4[l] : 0.0;

    if (st->sh.ring[l] > 1 && nd->nseq > 0) {
        K += nsp_nest_ring_time(st, l, nd->tokens, nd->rc);   /* overlaps like a pipelined level */
    }
    nd->add1 = C + st->eta1 * K;
    nd->add2 = st->eta1 * C + K;
    nd->addm = nd->tokens / d * ((nd->rc ? st->a_rc : st->a_keep) + st->sh.ringm[l]);
}

/* The maxima of the children c0.. c0+nc-1's aggregates (L1, L2, memory). */
static void children_max(const nest_round_t *rd, int c0, int nc, double *a1, double *a2,
                         double *am)
{
    *a1 = *a2 = *am = -NEST_INF;
    for (int c = c0; c < c0 + nc; ++c) {
        const nest_node_t *cd = &rd->node[c];
        *a1 = dmax(*a1, cd->agg1);
        *a2 = dmax(*a2, cd->agg2);
        *am = dmax(*am, cd->aggm);
    }
}

/* Minimum over the children c0.. c0+nc-1 of their entry e of arr (mm1 or
 * mmm): as node_aggregate takes it. */
static double child_min(const nest_shape_t *sh, const double *arr, int c0, int nc, int e)
{
    double v = NEST_INF;

    if (nc == 2) {
        return dmin(arr[sh->moff[c0] + e], arr[sh->moff[c0 + 1] + e]);
    }
    for (int c = c0; c < c0 + nc; ++c) {
        v = dmin(v, arr[sh->moff[c] + e]);
    }
    return v;
}

/* Recompute a node's aggregates from its adds and its children; its adds
 * too if with_adds (its sums changed). Per lower level l': the minimum over
 * the children, then plus the node's own add (in that order: the values are
 * those of a minimum taken child by child from infinity). */
static void node_aggregate(const nest_state_t *st, nest_round_t *rd, int n, int with_adds)
{
    const nest_shape_t *sh = &st->sh;
    const int           l  = sh->level[n];
    nest_node_t        *nd = &rd->node[n];
    double             *m1 = &rd->mm1[sh->moff[n]], *mm = &rd->mmm[sh->moff[n]];

    if (with_adds) {
        nsp_nest_node_adds(st, l, nd);
    }
    nd->occ = 0;
    if (l == 0) {
        nd->agg1 = nd->add1;
        nd->agg2 = nd->add2;
        nd->aggm = nd->addm;
    } else {
        const int c0 = sh->first_child[n], nc = sh->nchild[n];
        const int closed = st->mode == NSP_ROUTE_DISJOINT && nd->nseq > 0;
        double    a1, a2, am;
        children_max(rd, c0, nc, &a1, &a2, &am);
        for (int c = c0; st->mode == NSP_ROUTE_DISJOINT && c < c0 + nc; ++c) {
            nd->occ += rd->node[c].occ + (rd->node[c].nseq > 0);   /* read in disjoint mode only */
        }
        nd->agg1 = nd->add1 + a1;
        nd->agg2 = nd->add2 + a2;
        nd->aggm = nd->addm + am;
        if (closed) {
            for (int lp = 0; lp < l; ++lp) {
                m1[lp] = mm[lp] = NEST_INF;   /* used: nothing below may open */
            }
        } else {
            for (int lp = 0; lp < l; ++lp) {
                m1[lp] = child_min(sh, rd->mm1, c0, nc, lp) + nd->add1;
                mm[lp] = child_min(sh, rd->mmm, c0, nc, lp) + nd->addm;
            }
        }
    }
    if (st->mode == NSP_ROUTE_DISJOINT && nd->occ > 0) {
        m1[l] = mm[l] = NEST_INF;   /* something below is used: not joinable */
    } else {
        m1[l] = nd->agg1;
        mm[l] = nd->aggm;
    }
}

/* Virtual tree: leaf k is root k; padding leaves hold nothing. */
static void vleaf_set(const nest_state_t *st, nest_round_t *rd, int k)
{
    const int    nl = st->sh.nl, v = st->sh.vsize + k;
    double      *vm1 = &rd->vmm1[(size_t)v * nl], *vmm = &rd->vmmm[(size_t)v * nl];

    if (k < st->sh.nroots) {
        const int          n  = st->sh.roots[k];
        const int          lr = st->sh.level[n];
        const nest_node_t *nd = &rd->node[n];
        rd->v1[v] = nd->agg1;
        rd->v2[v] = nd->agg2;
        rd->vm[v] = nd->aggm;
        memcpy(vm1, &rd->mm1[st->sh.moff[n]], sizeof(double) * (size_t)(lr + 1));
        memcpy(vmm, &rd->mmm[st->sh.moff[n]], sizeof(double) * (size_t)(lr + 1));
        for (int l = lr + 1; l < nl; ++l) {
            vm1[l] = vmm[l] = NEST_INF;   /* nothing of a higher level below a root */
        }
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

/* Nested mode, ancestor p of a changed node whose entries chg[0..level(p)-1]
 * may have changed (the others did not): its maxima from its children and
 * those entries and its own level's, as node_aggregate computes them; chg
 * becomes what changed at p. Returns 0 if nothing of p changed. */
static int ancestor_update(const nest_state_t *st, nest_round_t *rd, int p, unsigned char *chg)
{
    const nest_shape_t *sh = &st->sh;
    const int           l = sh->level[p], c0 = sh->first_child[p], nc = sh->nchild[p];
    nest_node_t        *nd = &rd->node[p];
    double             *m1 = &rd->mm1[sh->moff[p]], *mm = &rd->mmm[sh->moff[p]];
    double              a1, a2, am;
    int                 any;

    children_max(rd, c0, nc, &a1, &a2, &am);
    any = nd->agg1 != nd->add1 + a1 || nd->agg2 != nd->add2 + a2 || nd->aggm != nd->addm + am;
    nd->agg1 = nd->add1 + a1;
    nd->agg2 = nd->add2 + a2;
    nd->aggm = nd->addm + am;
    for (int e = 0; e < l; ++e) {
        if (chg[e]) {
            const double v1 = child_min(sh, rd->mm1, c0, nc, e) + nd->add1;
            const double vm = child_min(sh, rd->mmm, c0, nc, e) + nd->addm;
            chg[e] = v1 != m1[e] || vm != mm[e];
            m1[e]  = v1;
            mm[e]  = vm;
            any |= chg[e];
        }
    }
    chg[l] = m1[l] != nd->agg1 || mm[l] != nd->aggm;
    m1[l]  = nd->agg1;
    mm[l]  = nd->aggm;
    return any | chg[l];
}

/* The virtual path above root slot k; stops where a node keeps its values. */
static void vpath_update(const nest_state_t *st, nest_round_t *rd, int k)
{
    const int nl = st->sh.nl;

    vleaf_set(st, rd, k);
    for (int v = (st->sh.vsize + k) / 2; v >= 1; v /= 2) {
        const double o1 = rd->v1[v], o2 = rd->v2[v], om = rd->vm[v];
        double       old[2 * NSP_PLANNER_MAX_LEVELS];
        memcpy(old, &rd->vmm1[(size_t)v * nl], sizeof(double) * (size_t)nl);
        memcpy(old + nl, &rd->vmmm[(size_t)v * nl], sizeof(double) * (size_t)nl);
        vnode_aggregate(st, rd, v);
        if (o1 == rd->v1[v] && o2 == rd->v2[v] && om == rd->vm[v] &&
            memcmp(old, &rd->vmm1[(size_t)v * nl], sizeof(double) * (size_t)nl) == 0 &&
            memcmp(old + nl, &rd->vmmm[(size_t)v * nl], sizeof(double) * (size_t)nl) == 0) {
            return;   /* the same values: nothing above changes */
        }
    }
}

/* After a change of node n: refresh it, its ancestors and the virtual path.
 * Nested mode: an ancestor recomputes only the entries that changed below
 * it, and the walk stops at the first one that keeps all its values (what
 * is above it is then unchanged too): the values of the full refresh. */
void nsp_nest_propagate(const nest_state_t *st, nest_round_t *rd, int n)
{
    const nest_shape_t *sh = &st->sh;
    unsigned char       chg[NSP_PLANNER_MAX_LEVELS];
    int                 root = n;

    if (st->mode != NSP_ROUTE_NESTED || st->in->plain_search) {
        /* only node n's sums changed: its ancestors keep their adds */
        for (int p = n; p >= 0; p = sh->parent[p]) {
            node_aggregate(st, rd, p, p == n);
            root = p;
        }
        vpath_update(st, rd, sh->vslot[root]);
        return;
    }
    memset(chg, 1, sizeof(chg));
    node_aggregate(st, rd, n, 1);
    for (int p = sh->parent[n]; p >= 0; p = sh->parent[p]) {
        if (!ancestor_update(st, rd, p, chg)) {
            return;
        }
        root = p;
    }
    vpath_update(st, rd, sh->vslot[root]);
}

static void vtree_rebuild(const nest_state_t *st, nest_round_t *rd)
{
    for (int k = 0; k < st->sh.vsize; ++k) {
        vleaf_set(st, rd, k);
    }
    for (int v = st->sh.vsize - 1; v >= 1; --v) {
        vnode_aggregate(st, rd, v);
    }
}

/* Rebuild every aggregate of a round from the node adds (from the sums too
 * if with_adds): O(mtotal). */
void nsp_nest_round_rebuild(const nest_state_t *st, nest_round_t *rd, int with_adds)
{
    for (int n = 0; n < st->sh.nnodes; ++n) {   /* level 0 first: ids ascend by level */
        node_aggregate(st, rd, n, with_adds);
    }
    vtree_rebuild(st, rd);
}

/* Empty a round: what nsp_nest_round_rebuild computes for empty groups
 * (every add, aggregate and minimum is +0.0), without the pass (with it
 * under plain_search). */
void nsp_nest_round_clear(const nest_state_t *st, nest_round_t *rd)
{
    memset(rd->node, 0, sizeof(*rd->node) * (size_t)st->sh.nnodes);
    for (int n = 0; n < st->sh.nnodes; ++n) {
        rd->node[n].head = -1;
    }
    if (st->in->plain_search) {
        nsp_nest_round_rebuild(st, rd, 1);
        return;
    }
    memset(rd->mm1, 0, sizeof(double) * st->sh.mtotal);
    memset(rd->mmm, 0, sizeof(double) * st->sh.mtotal);
    vtree_rebuild(st, rd);
}

/* The round's slowest rank, per layer. */
double nsp_nest_round_max(const nest_state_t *st, const nest_round_t *rd)
{
    const double m = dmax(rd->v1[1], rd->v2[1]);

    (void)st;
    return m > 0.0 ? m : 0.0;
}

/* Absolute L1, L2, memory maxima over the ranks of group n. */
void nsp_nest_node_abs(const nest_state_t *st, const nest_round_t *rd, int n,
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
int nsp_nest_find_group(const nest_state_t *st, const nest_round_t *rd, int l, double need)
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
        if (nc == 2) {   /* the usual binary tree: the loop below, unrolled */
            const size_t ia = (size_t)sh->moff[c0] + l, ib = (size_t)sh->moff[c0 + 1] + l;
            if (rd->mmm[ia] + acc_m <= room && rd->mm1[ia] < best1) {
                best1 = rd->mm1[ia];
                best  = c0;
            }
            if (rd->mmm[ib] + acc_m <= room && rd->mm1[ib] < best1) {
                best = c0 + 1;
            }
        }
        for (int c = c0; nc != 2 && c < c0 + nc; ++c) {   /* least loaded child with room */
            const double cm = rd->mmm[sh->moff[c] + l] + acc_m;
            const double c1 = rd->mm1[sh->moff[c] + l];
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

/* Add (sign +1) or remove (-1) a sequence of length s and comp(s, 1) comp1
 * to/from the sums of node nd (level l). */
static void node_account_of(const nest_state_t *st, nest_node_t *nd, int l, double s,
                            double comp1, int sign)
{
    nd->comp   += sign * comp1;
    nd->tokens += sign * s;
    nd->bytes  += sign * nsp_cost_group_a2a_bytes(st->cost, s, st->sh.deg[l], st->sh.ring[l]);
    nd->nseq   += sign;
    if (nd->nseq == 0) {   /* exact zeros: no drift after many moves */
        nd->comp = nd->tokens = nd->bytes = 0.0;
    }
}

/* Sequence i into node n of round r, flag rc: sums, links, location. */
void nsp_nest_node_account(const nest_state_t *st, nest_node_t *nd, int l, int i, int sign)
{
    node_account_of(st, nd, l, (double)st->in->lens[i], st->comp1[i], sign);
}

void nsp_nest_place_sums(nest_state_t *st, int i, int r, int n, int rc)
{
    nsp_nest_place_sums_of(st, i, r, n, rc, st->in->lens[i], st->comp1[i]);
}

void nsp_nest_place_sums_of(nest_state_t *st, int i, int r, int n, int rc, int64_t len,
                            double comp1)
{
    nest_node_t *nd = &st->round[r].node[n];

    node_account_of(st, nd, st->sh.level[n], (double)len, comp1, +1);
    nd->rc = rc;
    node_link(st, nd, i);
    st->loc[i] = r * st->sh.nnodes + n;
}

/* Place sequence i in node n of round r with the group's flag set to rc. */
void nsp_nest_place(nest_state_t *st, int i, int r, int n, int rc, int do_propagate)
{
    nest_round_t *rd = &st->round[r];

    nsp_nest_place_sums(st, i, r, n, rc);
    if (do_propagate) {
        nsp_nest_propagate(st, rd, n);
    } else {
        nsp_nest_node_adds(st, st->sh.level[n], &rd->node[n]);
    }
}

void nsp_nest_unplace(nest_state_t *st, int i)
{
    const int     r  = st->loc[i] / st->sh.nnodes, n = st->loc[i] % st->sh.nnodes;
    nest_round_t *rd = &st->round[r];
    nest_node_t  *nd = &rd->node[n];

    nsp_nest_node_account(st, nd, st->sh.level[n], i, -1);
    node_unlink(st, nd, i);
    st->loc[i] = -1;
    nsp_nest_propagate(st, rd, n);
}

/* ---- the state: the tree of every round and where each sequence is ---- */

void nsp_nest_state_free(nest_state_t *st)
{
    if (st->round != NULL) {
        for (int r = 0; r < st->nalloc; ++r) {
            nsp_nest_round_free(&st->round[r]);
        }
    }
    free(st->round);
    free(st->loc);
    free(st->next);
    free(st->prev);
    free(st->comp1);
    free(st->alone);
    free(st->xlev);
    free(st->xterm);
    nsp_nest_shape_free(&st->sh);
}

nsp_status_t nsp_nest_state_init(nest_state_t *st, const nsp_planner_input_t *in,
                                 nsp_route_mode_t mode, int Rcap)
{
    const size_t n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);

    memset(st, 0, sizeof(*st));
    st->only_level = -1;
    st->cutoff     = NEST_INF;
    st->in     = in;
    st->cost   = &in->cost;
    st->mode   = mode;
    st->eta1   = mode == NSP_ROUTE_NESTED ? 1.0 - in->cost.cluster.overlap : 1.0;
    st->rfix   = in->cost.round_s / in->cost.model.layers;
    st->cap    = in->mem_cap;
    st->a_keep = in->cost.act_bytes_keep;
    st->a_rc   = in->cost.act_bytes_recompute;
    NSP_CHECK(nsp_nest_shape_init(&st->sh, in));
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
    st->alone = malloc(sizeof(double) * (size_t)st->sh.nl * n);
    st->xlev  = malloc(sizeof(int) * (size_t)st->sh.ranks);
    st->xterm = malloc(sizeof(double) * 3 * (size_t)st->sh.ranks);
    if (st->round == NULL || st->loc == NULL || st->next == NULL || st->prev == NULL ||
        st->comp1 == NULL || st->alone == NULL || st->xlev == NULL || st->xterm == NULL) {
        nsp_nest_state_free(st);
        return nsp_error(NSP_ERR_NO_MEMORY, "routing: cannot allocate state for %d sequences",
                         in->nseqs);
    }
    st->kept_demand = 0.0;
    for (int i = 0; i < in->nseqs; ++i) {
        st->comp1[i] = nsp_cost_comp(st->cost, (double)in->lens[i], 1);
        st->kept_demand += (double)in->lens[i] * st->a_keep;
    }
    return NSP_OK;
}

/* Allocate rounds up to R (they are allocated on first use). */
nsp_status_t nsp_nest_ensure_rounds(nest_state_t *st, int R)
{
    for (; st->nalloc < R; ++st->nalloc) {
        NSP_CHECK(nsp_nest_round_alloc(st, &st->round[st->nalloc]));
    }
    return NSP_OK;
}
