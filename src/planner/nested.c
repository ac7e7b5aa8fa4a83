/*
 * The nested planner (docs/design.md §5.2): NSP tree routing. The routing engine is
 * route.c (shared with the disjoint planner's greedy); this file runs it in
 * nested mode and turns its assignment into a plan whose groups nest and
 * align, with a group pipelined where each of its ranks holds another level.
 *
 * With rings (params.enable_ring) the tree has levels above the Ulysses
 * limit (Ulysses x ring). The routing is greedy, so a larger tree is not
 * guaranteed to route better: the tree without its ring levels is routed
 * too and the faster plan kept, so enabling rings never makes a plan slower.
 */
#include "planner/route.h"
#include "common/log.h"

#include <string.h>

static nsp_status_t route_tree(const nsp_planner_input_t *in, nsp_route_hint_t *make,
                               const nsp_route_hint_t *use, nsp_plan_t **plan)
{
    nsp_route_assign_t a;
    nsp_status_t       status;
    double             step_s = 0.0;

    NSP_CHECK(nsp_route_assign_alloc(&a, in->nseqs));
    NSP_CHECK_GOTO(nsp_route_shared(in, NSP_ROUTE_NESTED, make, use, &a, &step_s), status,
                   out_free);
    status = nsp_route_plan(in, "nested", &a, 1, 0u, plan);
out_free:
    nsp_route_assign_free(&a);
    return status;
}

/* The same tree without its ring levels; 0 if it has none left or none to
 * drop, or if its top level cannot hold the longest sequence (recomputed). */
static int ulysses_subtree(const nsp_planner_input_t *in, nsp_planner_input_t *out)
{
    int64_t longest = 0;
    int     n = 0;

    for (int i = 0; i < in->nseqs; ++i) {
        longest = in->lens[i] > longest ? in->lens[i] : longest;
    }

    *out = *in;
    for (int l = 0; l < in->nlevels; ++l) {
        if (in->level_ring[l] <= 1) {
            out->level_degrees[n] = in->level_degrees[l];
            out->level_ring[n]    = 1;
            ++n;
        }
    }
    out->nlevels = n;
    return n > 0 && n < in->nlevels &&
           (double)longest / out->level_degrees[n - 1] * in->cost.act_bytes_recompute <=
           in->mem_cap;
}

static nsp_status_t nested_plan(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    nsp_planner_input_t uly;
    nsp_plan_t         *ring_plan = NULL, *uly_plan = NULL;
    nsp_route_hint_t    hint;
    nsp_status_t        ring_status, uly_status;

    if (!in->enable_ring || !ulysses_subtree(in, &uly)) {
        return route_tree(in, NULL, NULL, plan);
    }
    /* the ring tree's first routing, where it is the Ulysses tree's too,
     * is handed over (nsp_route_hint_t): same plans, one routing less */
    memset(&hint, 0, sizeof(hint));
    ring_status = route_tree(in, &hint, NULL, &ring_plan);
    if (ring_status < 0 && ring_status != NSP_ERR_INFEASIBLE) {
        nsp_route_hint_free(&hint);
        return ring_status;
    }
    /* No Ulysses-only plan can beat the ring tree's if the batch's bound
     * without rings (the longest sequence alone at the largest Ulysses
     * degree) is above its step: skip that routing (same plan, less time). */
    if (ring_status == NSP_OK &&
        nsp_lower_bound_cost(&in->cost, in->lens, in->nseqs, 0) > ring_plan->predicted.step_s) {
        NSP_DEBUG("nested: ring tree %.6f s is below the Ulysses-only bound: kept",
                  ring_plan->predicted.step_s);
        nsp_route_hint_free(&hint);
        *plan = ring_plan;
        return NSP_OK;
    }
    /* a sequence too long for the Ulysses levels' memory: only the ring tree */
    uly_status = route_tree(&uly, NULL, &hint, &uly_plan);
    nsp_route_hint_free(&hint);
    if (uly_status < 0 && uly_status != NSP_ERR_INFEASIBLE) {
        nsp_plan_free(ring_plan);
        return uly_status;
    }
    if (ring_status < 0 && uly_status < 0) {
        return ring_status;
    }
    if (ring_status == NSP_OK && uly_status == NSP_OK) {
        NSP_DEBUG("nested: ring tree %.6f s, Ulysses-only tree %.6f s per step",
                  ring_plan->predicted.step_s, uly_plan->predicted.step_s);
        if (uly_plan->predicted.step_s <= ring_plan->predicted.step_s) {
            nsp_plan_free(ring_plan);
            ring_plan = NULL;
        } else {
            nsp_plan_free(uly_plan);
            uly_plan = NULL;
        }
    }
    nsp_error_clear();
    *plan = ring_plan != NULL ? ring_plan : uly_plan;
    return NSP_OK;
}

const nsp_planner_entry_t nsp_planner_nested_entry = {
    .name       = "nested",
    .kind       = NSP_PLANNER_NESTED,
    .caps       = NSP_PLANNER_CAP_RING_LEVELS,
    .top_degree = nsp_planner_tree_top_degree,
    .plan       = nested_plan,
};
