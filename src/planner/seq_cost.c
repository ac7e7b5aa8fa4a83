/*
 * Per-sequence costs the planners build their packings from (planners.h):
 * one sequence on a group of degree d, kept or recomputed, Ulysses or
 * Ulysses x ring, per layer per rank (cost.h units).
 */
#include "planner/planners.h"

void nsp_seq_cost_ring(const nsp_cost_t *cost, double s, int d, int ring, int recompute,
                       nsp_seq_cost_t *out)
{
    const double rcf = recompute ? NSP_COST_RECOMPUTE_COMP : 1.0;
    const double rcb = recompute ? NSP_COST_RECOMPUTE_A2A : 1.0;

    out->comp_s     = rcf * nsp_cost_comp(cost, s, d) + nsp_cost_ep_time(cost, s / d);
    out->bytes      = rcb * nsp_cost_group_a2a_bytes(cost, s, d, ring);
    out->ring_bytes = ring > 1 ? nsp_cost_ring_bytes(cost, s, d, ring, recompute) : 0.0;
    /* the exchanges' CPU per byte is compute (the per-call part is per
     * group, like the latency: the plan's evaluation adds it) */
    out->comp_s    += nsp_cost_xfer_cpu(cost, out->bytes, d / ring, 0.0) +
                      nsp_cost_xfer_cpu(cost, out->ring_bytes, d, 0.0);
    out->mem_bytes  = s / d * (nsp_cost_act_bytes(cost, recompute) +
                               nsp_cost_ring_mem_per_token(cost, d, ring));
}

void nsp_seq_cost(const nsp_cost_t *cost, double s, int d, int recompute,
                  nsp_seq_cost_t *out)
{
    nsp_seq_cost_ring(cost, s, d, 1, recompute, out);
}

int nsp_planner_ring_of(const nsp_planner_input_t *in, int d)
{
    return in->enable_ring ? nsp_cost_ring_for_degree(&in->cost, d) : 1;
}
