/*
 * Per-sequence costs the planners build their packings from (planners.h):
 * one sequence on a group of degree d, kept or recomputed, Ulysses or
 * Ulysses x ring, per layer per rank (cost.h units); the batch's views
 * in its order that the routing engine reads (nsp_planner_order_views);
 * and what the tree of the input gives (ring degrees, the top degree).
 */
#include "planner/planners.h"
#include "common/log.h"

#include <stdlib.h>

nsp_status_t nsp_planner_order_views(nsp_planner_input_t *in, int64_t **block)
{
    const size_t n = (size_t)(in->nseqs > 0 ? in->nseqs : 1);
    int64_t     *lens = malloc((sizeof(int64_t) + sizeof(double) + 2 * sizeof(int)) * n);
    double      *comp1;
    int         *rank, *ident;

    if (lens == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the order of %d sequences",
                         in->nseqs);
    }
    comp1 = (double *)(lens + n);   /* [n] comp(s, 1) by index */
    rank  = (int *)(comp1 + n);     /* [n] inverse of the order */
    ident = rank + n;               /* [n] 0, 1, ... */
    for (int k = 0; k < in->nseqs; ++k) {
        lens[k]            = in->lens[in->order[k]];
        rank[in->order[k]] = k;
        ident[k]           = k;
        comp1[k]           = nsp_cost_comp(&in->cost, (double)in->lens[k], 1);
    }
    in->order_lens  = lens;
    in->order_rank  = rank;
    in->order_ident = ident;
    in->lens_comp1  = comp1;
    *block          = lens;
    return NSP_OK;
}

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

int nsp_planner_tree_top_degree(const nsp_planner_input_t *in)
{
    return in->level_degrees[in->nlevels - 1];
}
