/*
 * Unit test of the routing engine's load tree (src/planner/route_tree.c)
 * against a brute force over the ranks: on trees of 1, 2, 4, ... up to 16 or
 * 32 ranks (a forest when the top degree is below the ranks), thousands of
 * random placements and removals of sequences (any level, kept or
 * recomputed), and after each:
 *
 *  - the round's slowest rank (nsp_nest_round_max) equals the maximum over
 *    ranks of max(L1, L2), with L1 = C + (1-eta) K and L2 = (1-eta) C + K
 *    summed over the groups holding the rank;
 *  - a group's absolute maxima (nsp_nest_node_abs) equal those of its ranks;
 *  - every aggregate of the round (nodes, the per-level minima, the virtual
 *    tree over the roots) equals bit for bit what a full rebuild of the
 *    round from its sums gives (nsp_nest_round_rebuild): the incremental
 *    refresh along a path, which recomputes only the entries that changed
 *    below and stops where nothing changes, is the full computation; and an
 *    emptied round (nsp_nest_round_clear) equals the rebuild of empty groups;
 *  - the least-loaded-group query (nsp_nest_find_group) returns a group of
 *    the level with the memory free on all its ranks, or -1 exactly when
 *    none has it; the least loaded group when that one has room, and the
 *    least loaded with room in at least 98% of the queries (the descent
 *    follows the subtree whose least loaded group is least loaded among the
 *    subtrees with some room: where the least loaded group is full it may
 *    end in a roomy group that is not the least loaded with room).
 *
 * Per group the brute force sums the cost model itself (cost.h): compute
 * (rcf * comp(s,1) + MoE) / d, exchange rcb * a2a_bytes(s, d) / B(d) + 4a(d),
 * memory s/d * bytes per token.
 */
#include "planner/route_internal.h"
#include "check.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NSEQS 64
#define STEPS 1500

typedef struct brute {
    double l1[64], l2[64], mem[64];   /* per rank */
} brute_t;

/* Per-rank L1, L2 and memory from the sequences the state has placed. */
static void brute_ranks(const nest_state_t *st, brute_t *b)
{
    const nest_shape_t *sh = &st->sh;
    const nest_round_t *rd = &st->round[0];

    memset(b, 0, sizeof(*b));
    for (int n = 0; n < sh->nnodes; ++n) {
        const int    l = sh->level[n], d = sh->deg[l], r0 = (n - sh->off[l]) * d;
        const int    rc = rd->node[n].rc;
        double       comp = 0.0, tokens = 0.0, bytes = 0.0, C, K = 0.0;
        int          cnt = 0;
        for (int i = 0; i < st->in->nseqs; ++i) {
            if (st->loc[i] == n) {
                const double s = (double)st->in->lens[i];
                comp   += nsp_cost_comp(st->cost, s, 1);
                tokens += s;
                bytes  += nsp_cost_a2a_bytes(st->cost, s, d);
                ++cnt;
            }
        }
        if (cnt == 0) {
            continue;
        }
        C = ((rc ? NSP_COST_RECOMPUTE_COMP : 1.0) * comp + st->cost->ep_s_per_token * tokens) /
            d;
        if (d > 1) {
            K = (rc ? NSP_COST_RECOMPUTE_A2A : 1.0) * bytes / nsp_cost_bw(st->cost, d) +
                NSP_COST_A2A_PER_LAYER * nsp_cost_lat(st->cost, d);
        }
        for (int g = r0; g < r0 + d; ++g) {
            b->l1[g]  += C + st->eta1 * K;
            b->l2[g]  += st->eta1 * C + K;
            b->mem[g] += tokens / d * nsp_cost_act_bytes(st->cost, rc);
        }
    }
}

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-300;
}

/* Group n's maxima over its ranks. */
static void brute_group(const nest_state_t *st, const brute_t *b, int n, double *l1,
                        double *l2, double *m)
{
    const int l = st->sh.level[n], d = st->sh.deg[l], r0 = (n - st->sh.off[l]) * d;

    *l1 = *l2 = *m = 0.0;
    for (int g = r0; g < r0 + d; ++g) {
        *l1 = fmax(*l1, b->l1[g]);
        *l2 = fmax(*l2, b->l2[g]);
        *m  = fmax(*m, b->mem[g]);
    }
}

/* One query of level l for `need` bytes against the brute force: 0 if the
 * answer is wrong (a group without the room, or none although one has it,
 * or not the least loaded although the least loaded group has room), 1 if
 * exact, 2 if a group with room but not the least loaded of those with room
 * (the descent follows the subtree whose least loaded group is least loaded
 * among those with some group with room: exact when memory does not bind). */
static int check_find(const nest_state_t *st, const brute_t *b, int l, double need)
{
    const int    n = nsp_nest_find_group(st, &st->round[0], l, need);
    const double room = st->cap * (1 + 1e-12);
    double       best = INFINITY, least = INFINITY, least_mem = 0.0, l1, l2, m;

    for (int j = 0; j < st->sh.ng[l]; ++j) {
        brute_group(st, b, st->sh.off[l] + j, &l1, &l2, &m);
        if (m + need <= room) {
            best = fmin(best, l1);
        }
        if (l1 < least) {
            least     = l1;
            least_mem = m;
        }
    }
    if (n < 0) {
        return best == INFINITY;
    }
    brute_group(st, b, n, &l1, &l2, &m);
    if (st->sh.level[n] != l || m + need > room) {
        return 0;
    }
    if (close_to(l1, best)) {
        return 1;
    }
    return least_mem + need <= room ? 0 : 2;
}

typedef struct counts {
    int steps, max_ok, abs_ok, find_ok, find_exact, finds, found, full_ok, clear_ok, clears;
} counts_t;

/* Does round 0 equal, bit for bit, a copy rebuilt from its nodes' sums? */
static int same_as_rebuild(nest_state_t *st)
{
    const nest_round_t *rd = &st->round[0];
    const size_t        vv = 2 * (size_t)st->sh.vsize, nl = (size_t)st->sh.nl;
    nest_round_t        cp;
    int                 same;

    memset(&cp, 0, sizeof(cp));
    if (nsp_nest_round_alloc(st, &cp) != NSP_OK) {
        return 0;
    }
    memcpy(cp.node, rd->node, sizeof(*rd->node) * (size_t)st->sh.nnodes);
    nsp_nest_round_rebuild(st, &cp, 1);
    same = memcmp(cp.node, rd->node, sizeof(*rd->node) * (size_t)st->sh.nnodes) == 0 &&
           memcmp(cp.mm1, rd->mm1, sizeof(double) * st->sh.mtotal) == 0 &&
           memcmp(cp.mmm, rd->mmm, sizeof(double) * st->sh.mtotal) == 0 &&
           memcmp(cp.v1 + 1, rd->v1 + 1, sizeof(double) * (vv - 1)) == 0 &&
           memcmp(cp.v2 + 1, rd->v2 + 1, sizeof(double) * (vv - 1)) == 0 &&
           memcmp(cp.vm + 1, rd->vm + 1, sizeof(double) * (vv - 1)) == 0 &&
           memcmp(cp.vmm1 + nl, rd->vmm1 + nl, sizeof(double) * (vv - 1) * nl) == 0 &&
           memcmp(cp.vmmm + nl, rd->vmmm + nl, sizeof(double) * (vv - 1) * nl) == 0;
    nsp_nest_round_free(&cp);
    return same;
}

static void check_state(const nest_state_t *st, uint64_t *rng, counts_t *c)
{
    brute_t b;
    double  worst = 0.0, l1, l2, m, a1, a2, am;
    int     ok = 1;

    brute_ranks(st, &b);
    for (int g = 0; g < st->sh.ranks; ++g) {
        worst = fmax(worst, fmax(b.l1[g], b.l2[g]));
    }
    c->max_ok += close_to(nsp_nest_round_max(st, &st->round[0]), worst);
    for (int n = 0; n < st->sh.nnodes; ++n) {
        nsp_nest_node_abs(st, &st->round[0], n, &a1, &a2, &am);
        brute_group(st, &b, n, &l1, &l2, &m);
        ok &= close_to(a1, l1) && close_to(a2, l2) && close_to(am, m);
    }
    c->abs_ok += ok;
    c->full_ok += same_as_rebuild((nest_state_t *)st);
    for (int q = 0; q < 3; ++q) {
        const int    l = (int)(pc_next(rng) % (uint64_t)st->sh.nl);
        const double need = pc_unit(rng) * st->cap * (q == 0 ? 1.0 : 0.2);
        const int    v = check_find(st, &b, l, need);
        c->finds++;
        c->find_ok += v > 0;
        c->find_exact += v == 1;
        c->found += nsp_nest_find_group(st, &st->round[0], l, need) >= 0;
    }
    c->steps++;
}

/* Random placements and removals on a tree of `ranks` ranks, top degree
 * `top`, each degree `ratio` times the one below. */
static void run_tree(int ranks, int top, int ratio, uint64_t seed, counts_t *c)
{
    nsp_planner_input_t in;
    nest_state_t        st;
    int64_t             lens[NSEQS];
    int                 order[NSEQS];
    nsp_model_t         m;
    nsp_cluster_t       cl;
    uint64_t            rng = seed;

    nsp_model_preset("qwen3-30b-a3b", &m);
    nsp_cluster_preset("h100", 8, &cl);
    cl.ranks = ranks;
    cl.mem_bytes = 2e12;   /* room for the model states at any ranks: the test is the tree */
    memset(&in, 0, sizeof(in));
    if (nsp_cost_init(&in.cost, &m, &cl) != NSP_OK) {
        return;
    }
    for (int i = 0; i < NSEQS; ++i) {
        lens[i]  = 64 + (int64_t)(pc_next(&rng) % 60000);
        order[i] = i;
    }
    in.lens = lens;
    in.nseqs = NSEQS;
    in.order = order;
    in.mem_cap = 2.0e11;   /* activations a rank holds: some groups fill up */
    in.max_rounds = 1;
    in.static_recompute = -1;
    for (int d = 1; d <= top; d *= ratio) {
        in.level_degrees[in.nlevels] = d;
        in.level_ring[in.nlevels++]  = 1;
    }
    if (nsp_nest_state_init(&st, &in, NSP_ROUTE_NESTED, 1) != NSP_OK ||
        nsp_nest_ensure_rounds(&st, 1) != NSP_OK) {
        return;
    }
    st.R = 1;   /* the round in use (a routing pass sets it) */
    nsp_nest_state_clear(&st);
    c->clear_ok += same_as_rebuild(&st);
    c->clears++;
    for (int k = 0; k < STEPS / 5; ++k) {
        const int i = (int)(pc_next(&rng) % NSEQS);
        if (st.loc[i] < 0) {
            const int l = (int)(pc_next(&rng) % (uint64_t)st.sh.nl);
            const int n = st.sh.off[l] + (int)(pc_next(&rng) % (uint64_t)st.sh.ng[l]);
            nsp_nest_place(&st, i, 0, n, (int)(pc_next(&rng) % 2), 1);
        } else {
            nsp_nest_unplace(&st, i);
        }
        check_state(&st, &rng, c);
    }
    nsp_nest_state_clear(&st);
    c->clear_ok += same_as_rebuild(&st);
    c->clears++;
    nsp_nest_state_free(&st);
}

int main(void)
{
    counts_t c;

    memset(&c, 0, sizeof(c));
    tap_plan(7);
    run_tree(16, 16, 2, 11, &c);   /* one tree: 1, 2, 4, 8, 16 */
    run_tree(32, 8, 2, 12, &c);    /* a forest of four trees of 8 */
    run_tree(32, 32, 2, 13, &c);   /* across nodes: degree 16 and 32 at B_inter */
    run_tree(64, 16, 2, 14, &c);
    run_tree(64, 64, 4, 15, &c);   /* 1, 4, 16, 64: four children per group */
    tap_ok(c.steps == STEPS / 5 * 5 && c.max_ok == c.steps,
           "the round's slowest rank = the brute force after %d of %d changes", c.max_ok,
           c.steps);
    tap_ok(c.abs_ok == c.steps, "every group's L1, L2 and memory maxima = its ranks' (%d of %d)",
           c.abs_ok, c.steps);
    tap_ok(c.find_ok == c.finds, "the query returns a group with the room, none only when no "
           "group has it, and the least loaded when that one has room (%d of %d queries)",
           c.find_ok, c.finds);
    tap_ok(c.find_exact >= c.finds * 0.98, "the least loaded group with room in %d of %d "
           "queries (the rest: a roomy group of a subtree whose least loaded group is full)",
           c.find_exact, c.finds);
    tap_ok(c.found > c.finds / 4 && c.found < c.finds,
           "queries both found a group and found none (%d of %d found one)", c.found, c.finds);
    tap_ok(c.full_ok == c.steps, "the incremental refresh = a full rebuild, bit for bit, after "
           "%d of %d changes", c.full_ok, c.steps);
    tap_ok(c.clears == 10 && c.clear_ok == c.clears, "an emptied round = the rebuild of empty "
           "groups, bit for bit (%d of %d)", c.clear_ok, c.clears);
    return tap_done();
}
