/*
 * The nested planner (DESIGN §5.2): NSP tree routing. The routing engine is
 * route.c (shared with the disjoint planner's greedy); this file runs it in
 * nested mode and turns its assignment into a plan whose groups nest and
 * align, with a group pipelined where each of its ranks holds another level.
 */
#include "planner/route.h"
#include "common/log.h"

nsp_status_t nsp_planner_nested(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    nsp_route_assign_t a;
    nsp_status_t       status;
    double             step_s = 0.0;

    NSP_CHECK(nsp_route_assign_alloc(&a, in->nseqs));
    NSP_CHECK_GOTO(nsp_route(in, NSP_ROUTE_NESTED, &a, &step_s), status, out_free);
    status = nsp_route_plan(in, "nested", &a, 1, 0u, plan);
out_free:
    nsp_route_assign_free(&a);
    return status;
}
