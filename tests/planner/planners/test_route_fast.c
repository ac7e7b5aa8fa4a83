/*
 * The routing engine's exact shortcuts (src/planner/route.c and
 * route_fill.c: options whose lower bound cannot beat the best one so far
 * are not evaluated; aggregates refreshed incrementally along a path; the
 * leaf phase's min trees brought up to date when queried; each sequence's
 * time alone per level kept for the state's routings; empty rounds and
 * restored states without recomputing what is current; rounds without a
 * lonely rank not evaluated) against the straightforward search that
 * evaluates every option and recomputes everything
 * (nsp_planner_input_t.plain_search = 1).
 *
 * On random long-tailed batches (8..512 ranks, sequences up to 384K or 1M
 * tokens, with and without ring levels) the nested planner must give the
 * same plan both ways (same rounds, groups, flags, sequences in order) with
 * the same predicted step bit for bit, and the routing engine in disjoint
 * mode (the disjoint planner's greedy) the same assignment and step. It
 * times nothing.
 *
 * The Ulysses tree's first routing taken from the ring tree's search
 * (nsp_route_hint_t): the comparison above covers it too (plain_search
 * shares nothing) and counts the routings taken.
 *
 * The routing abandoned on a bound (nsp_nest_route_all with a cutoff): the
 * comparison above covers it (plain_search routes to the end) and counts the
 * abandoned routings; on every routed batch, 1-3 round counts and round
 * costs 0, 1x and 4x the model's, the bound never exceeds the routing's
 * exact step, and a routing abandoned below it is one that holds the batch.
 *
 * The local moves, one trial at a time from a routed state, never raise the
 * step the state reports (round fixed costs included): a move's step before
 * and after are counted the same way.
 *
 * Usage: test_route_fast [seeds]   (default 60; $NSP_TEST_SEEDS)
 */
#include "planner/route_internal.h"
#include "check.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_SEEDS 16
#else
#define DEFAULT_SEEDS 60
#endif

static const int     ranks_choices[] = {8, 16, 64, 128, 256, 512};
static const int64_t tpr_choices[] = {2048, 8192, 16384};

static const int64_t *sort_lens;

/* Longest first, ties by index (the order nsp_plan_create gives). */
static int cmp_longest(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;

    if (sort_lens[x] != sort_lens[y]) {
        return sort_lens[x] < sort_lens[y] ? 1 : -1;
    }
    return (x > y) - (x < y);
}

/* The input nsp_plan_create builds for the nested planner (default tree:
 * 1, 2, 4, ... up to the largest valid degree, then with rings up to the
 * ranks). 0 if the model states do not fit. */
static int make_input(int ranks, int ring, const int64_t *lens, int n, int *order,
                      nsp_planner_input_t *in)
{
    nsp_model_t   m;
    nsp_cluster_t cl;

    memset(in, 0, sizeof(*in));
    if (nsp_model_preset("qwen3-30b-a3b", &m) != NSP_OK ||
        nsp_cluster_preset("h100", ranks, &cl) != NSP_OK ||
        nsp_cost_init(&in->cost, &m, &cl) != NSP_OK) {
        return 0;
    }
    in->lens = lens;
    in->nseqs = n;
    in->enable_ring = ring;
    in->static_recompute = -1;
    in->max_rounds = NSP_PLANNER_DEFAULT_MAX_ROUNDS;
    in->time_limit_s = NSP_PLANNER_DEFAULT_TIME_LIMIT_S;
    in->mem_cap = (cl.mem_bytes - in->cost.fixed_mem_bytes) * (1.0 - 1e-6);
    for (int d = 1; d <= in->cost.max_degree; d *= 2) {
        if (nsp_cost_degree_valid(&in->cost, d)) {
            in->level_degrees[in->nlevels++] = d;
        }
    }
    for (int d = 2 * in->level_degrees[in->nlevels - 1]; ring && d <= ranks; d *= 2) {
        in->level_degrees[in->nlevels++] = d;
    }
    for (int l = 0; l < in->nlevels; ++l) {
        in->level_ring[l] = nsp_planner_ring_of(in, in->level_degrees[l]);
    }
    for (int i = 0; i < n; ++i) {
        order[i] = i;
    }
    sort_lens = lens;
    qsort(order, (size_t)n, sizeof(int), cmp_longest);
    in->order = order;
    return in->mem_cap > 0.0;
}

/* Every sequence fits its top level recomputed (what nsp_plan_create checks). */
static int batch_fits(const nsp_planner_input_t *in)
{
    const int    top = in->level_degrees[in->nlevels - 1];
    const double a = in->cost.act_bytes_recompute +
                     nsp_cost_ring_mem_per_token(&in->cost, top, in->level_ring[in->nlevels - 1]);

    for (int i = 0; i < in->nseqs; ++i) {
        if ((double)in->lens[i] / top * a > in->mem_cap) {
            return 0;
        }
    }
    return 1;
}

/* Nested both ways: 1 if the plans are the same (or both fail alike);
 * *abandoned counts the fast search's routings abandoned on a bound,
 * *shared those the Ulysses tree took from the ring tree's search. */
static int same_nested(nsp_planner_input_t *in, long *abandoned, long *shared)
{
    const nsp_planner_entry_t *nested = nsp_planner_find_kind(NSP_PLANNER_NESTED);
    nsp_plan_t                *fast = NULL, *plain = NULL;
    nsp_status_t               sf, sp;
    int                        ok;

    in->plain_search = 0;
    in->abandoned    = abandoned;
    in->shared       = shared;
    sf = nested->plan(in, &fast);
    in->abandoned    = NULL;
    in->shared       = NULL;
    in->plain_search = 1;
    sp = nested->plan(in, &plain);
    in->plain_search = 0;
    ok = sf == sp && (sf < 0 || (pc_same_plan(fast, plain) &&
                                 fast->predicted.step_s == plain->predicted.step_s));
    nsp_plan_free(fast);
    nsp_plan_free(plain);
    return ok;
}

/* The routing engine in disjoint mode both ways: the same assignment and step. */
static int same_disjoint(nsp_planner_input_t *in)
{
    nsp_route_assign_t a, b;
    double             sa = 0.0, sb = 0.0;
    nsp_status_t       ra, rb;
    int                ok;
    const size_t       bytes = sizeof(int) * (size_t)in->nseqs;

    if (nsp_route_assign_alloc(&a, in->nseqs) != NSP_OK) {
        return 0;
    }
    if (nsp_route_assign_alloc(&b, in->nseqs) != NSP_OK) {
        nsp_route_assign_free(&a);
        return 0;
    }
    in->plain_search = 0;
    ra = nsp_route(in, NSP_ROUTE_DISJOINT, &a, &sa);
    in->plain_search = 1;
    rb = nsp_route(in, NSP_ROUTE_DISJOINT, &b, &sb);
    in->plain_search = 0;
    ok = ra == rb && (ra < 0 || (a.nrounds == b.nrounds && sa == sb &&
                                 memcmp(a.round, b.round, bytes) == 0 &&
                                 memcmp(a.rank0, b.rank0, bytes) == 0 &&
                                 memcmp(a.size, b.size, bytes) == 0 &&
                                 memcmp(a.rc, b.rc, bytes) == 0));
    nsp_route_assign_free(&a);
    nsp_route_assign_free(&b);
    return ok;
}

/* The batch's work (all compute on one rank, per layer) in *work; returns
 * the fewest rounds that hold it kept (at least 1). */
static int batch_work(const nsp_planner_input_t *in, double *work)
{
    double kept = 0.0;
    int    R;

    *work = 0.0;
    for (int i = 0; i < in->nseqs; ++i) {
        const double s = (double)in->lens[i];
        *work += nsp_cost_comp(&in->cost, s, 1) + nsp_cost_ep_time(&in->cost, s);
        kept  += s * in->cost.act_bytes_keep;
    }
    R = (int)ceil(kept / (in->mem_cap * in->cost.cluster.ranks) - 1e-12);
    return R < 1 ? 1 : R;
}

/* The bound that abandons a routing (nsp_nest_route_all with st->cutoff):
 * for R = the fewest rounds that hold the batch kept .. 2 more, route to
 * the end and finish as the search does (unflip, single-level fix): S, its
 * exact step. Route again with the cutoff just above S: a bound above S
 * would abandon it (it must not: the bound is <= S at every check); with the
 * cutoff at 0.995 S and 0.98 S an abandoned routing must be one that held
 * the batch. b->tried counts routings checked, b->low those abandoned below
 * S, b->bad the violations. */
typedef struct bound_count {
    int tried, low, bad;
} bound_count_t;

static void bound_holds(const nsp_planner_input_t *in, bound_count_t *b)
{
    static const double below[] = {0.995, 0.98};
    nest_state_t        st;
    double              work;
    const int           R0 = batch_work(in, &work);

    if (nsp_nest_state_init(&st, in, NSP_ROUTE_NESTED, NSP_PLANNER_DEFAULT_MAX_ROUNDS) != NSP_OK) {
        ++b->bad;
        return;
    }
    for (int R = R0; R < R0 + 3 && R <= NSP_PLANNER_DEFAULT_MAX_ROUNDS; ++R) {
        double S;
        int    held;
        st.target_floor = 0.0;
        st.cutoff       = NEST_INF;
        if (nsp_nest_ensure_rounds(&st, R) != NSP_OK) {
            ++b->bad;
            break;
        }
        held = nsp_nest_route_all(&st, R, work);
        if (held != 1) {
            continue;
        }
        nsp_nest_unflip_groups(&st);
        if (nsp_nest_fix_lonely_ranks(&st) != NSP_OK) {
            ++b->bad;
            break;
        }
        S = nsp_nest_state_exact(&st);
        ++b->tried;
        st.cutoff = S * (1.0 + 1e-12);
        b->bad += nsp_nest_route_all(&st, R, work) < 0;
        for (int c = 0; c < 2; ++c) {
            int got;
            st.cutoff = below[c] * S;
            got       = nsp_nest_route_all(&st, R, work);
            b->low   += got < 0;
            b->bad   += got == 0;   /* the same routing held the batch above */
        }
    }
    nsp_nest_state_free(&st);
}

/* Route in[]'s batch (nested, the fewest rounds that hold it kept, or up
 * to 3 more), then run the local moves one trial at a time: *moves counts
 * the trials that changed the step, *raised those that made it larger. 0 if
 * the batch could not be routed. */
#define MOVE_TRIALS 300
static int moves_lower_step(const nsp_planner_input_t *in, int *moves, int *raised)
{
    nest_state_t st;
    double       work;
    const int    R = batch_work(in, &work);
    int          routed = 0;

    if (nsp_nest_state_init(&st, in, NSP_ROUTE_NESTED, NSP_PLANNER_DEFAULT_MAX_ROUNDS) != NSP_OK) {
        return 0;
    }
    for (int r = R; r < R + 4 && r <= NSP_PLANNER_DEFAULT_MAX_ROUNDS && !routed; ++r) {
        st.target_floor = 0.0;
        routed = nsp_nest_ensure_rounds(&st, r) == NSP_OK && nsp_nest_route_all(&st, r, work);
    }
    for (int t = 0; routed && t < MOVE_TRIALS; ++t) {
        const double before = nsp_nest_state_step(&st);
        double       after;
        st.trials = 1;
        nsp_nest_local_moves(&st);
        after = nsp_nest_state_step(&st);
        *moves += after != before;
        *raised += after > before * (1.0 + 1e-12);
    }
    nsp_nest_state_free(&st);
    return routed;
}

int main(int argc, char **argv)
{
    const int seeds = pc_seed_count(argc, argv, DEFAULT_SEEDS);
    int       batches = 0, nested_same = 0, ring_same = 0, disjoint_same = 0;
    int       nested_runs = 0, ring_runs = 0, disjoint_runs = 0;
    int       move_runs = 0, moves = 0, raised = 0;
    long      abandoned = 0, shared = 0;
    bound_count_t bound = {0, 0, 0};

    tap_plan(8);
    for (int seed = 1; seed <= seeds; ++seed) {
        uint64_t            state = 0x5eedf00dULL * (uint64_t)seed;
        const int           ranks = ranks_choices[pc_next(&state) % 6];
        const int64_t       tpr = tpr_choices[pc_next(&state) % 3];
        const int64_t       max_len = (pc_next(&state) % 2) ? 393216 : 1048576;
        int64_t            *lens = NULL;
        int                *order;
        nsp_planner_input_t in;
        const int           n = pc_batch(&state, ranks, tpr, max_len, &lens);

        order = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
        if (n <= 0 || order == NULL) {
            free(lens);
            free(order);
            continue;
        }
        ++batches;
        /* the fixed cost of a round: the model's, none, or four times it
         * (more rounds are then tried, and abandoned) */
        const double        round_scale = (double)(seed % 3 == 0 ? 0 : seed % 3 == 1 ? 1 : 4);
        if (make_input(ranks, 0, lens, n, order, &in) && batch_fits(&in)) {
            in.cost.round_s *= round_scale;
            ++nested_runs;
            nested_same += same_nested(&in, &abandoned, &shared);
            ++disjoint_runs;
            disjoint_same += same_disjoint(&in);
            move_runs += moves_lower_step(&in, &moves, &raised);
            bound_holds(&in, &bound);
        }
        if (make_input(ranks, 1, lens, n, order, &in) && batch_fits(&in)) {
            in.cost.round_s *= round_scale;
            ++ring_runs;
            ring_same += same_nested(&in, &abandoned, &shared);
            move_runs += moves_lower_step(&in, &moves, &raised);
            bound_holds(&in, &bound);
        }
        free(lens);
        free(order);
    }
    tap_ok(batches == seeds && nested_runs > seeds / 2 && ring_runs > seeds / 2,
           "%d random batches: %d planned without rings, %d with", batches, nested_runs,
           ring_runs);
    tap_ok(nested_same == nested_runs,
           "nested, Ulysses tree: the shortcuts give the plain search's plan on %d of %d",
           nested_same, nested_runs);
    tap_ok(ring_same == ring_runs,
           "nested with ring levels: the shortcuts give the plain search's plan on %d of %d",
           ring_same, ring_runs);
    tap_ok(disjoint_same == disjoint_runs,
           "routing in disjoint mode: the same assignment and step on %d of %d",
           disjoint_same, disjoint_runs);
    tap_ok(move_runs > 0 && moves > 0 && raised == 0,
           "local moves on %d routed batches (with and without rings): %d of %d moves raised "
           "the step (round fixed costs included)", move_runs, raised, moves);
    tap_ok(abandoned > 0, "the shortcuts' plans above include %ld routings abandoned on a "
           "bound (the plain search routes them to the end)", abandoned);
    tap_ok(shared > 0, "the shortcuts' plans with ring levels above include %ld Ulysses-tree "
           "routings taken from the ring tree's search (the plain search routes them)", shared);
    tap_ok(bound.tried > 0 && bound.low > 0 && bound.bad == 0,
           "the bound that abandons a routing is <= its exact step: %d routings (the fewest "
           "rounds and 2 more, with and without rings, round costs 0, 1x, 4x): none abandoned "
           "at its step, %d abandoned at 0.995 or 0.98 of it and held the batch, %d violations",
           bound.tried, bound.low, bound.bad);
    return tap_done();
}
