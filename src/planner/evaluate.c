/*
 * Evaluate a plan with the cost model (docs/design.md §5.1) and the lower bound
 * (docs/design.md §5.2). Per layer per rank inside, times L for a step.
 */
#include "planner/plan_internal.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* floor(log2(size)): the level index of a group in the per-level detail. */
static int level_of_size(int size)
{
    int level = 0;

    while ((2 << level) <= size) {
        ++level;
    }
    return level;
}

nsp_status_t nsp_plan_eval_round(const nsp_cost_t *cost, const nsp_plan_t *plan, int round,
                                 nsp_rank_round_cost_t *out, double *round_s,
                                 int nlevels, double *level_comp, double *level_comm)
{
    const int               ranks = plan->cluster.ranks;
    const nsp_plan_round_t *pr    = &plan->rounds[round];
    double                  worst = 0.0;

    memset(out, 0, sizeof(*out) * (size_t)ranks);
    if (level_comp != NULL) {
        memset(level_comp, 0, sizeof(double) * (size_t)ranks * (size_t)nlevels);
    }
    if (level_comm != NULL) {
        memset(level_comm, 0, sizeof(double) * (size_t)ranks * (size_t)nlevels);
    }
    for (int g = 0; g < pr->ngroups; ++g) {
        const nsp_plan_group_t *grp = &pr->groups[g];
        const int               d   = grp->size;
        const int               ring = grp->ring;
        const double            rcf = grp->recompute ? NSP_COST_RECOMPUTE_COMP : 1.0;
        const double            rcb = grp->recompute ? NSP_COST_RECOMPUTE_A2A : 1.0;
        double                  comp = 0.0, tokens = 0.0, bytes = 0.0, rbytes = 0.0;
        double                  k = 0.0, kr = 0.0, xcpu = 0.0, per_tok;
        int                     lvl;

        if (d < 1 || grp->rank0 < 0 || grp->rank0 + d > ranks) {
            return nsp_error(NSP_ERR_INVALID_ARG, "round %d group %d: ranks [%d, %d) are "
                             "outside [0, %d)", round, g, grp->rank0, grp->rank0 + d, ranks);
        }
        if (ring < 1 || d % ring != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "round %d group %d (ranks [%d, %d)): ring "
                             "degree %d must be >= 1 and divide the group size %d", round, g,
                             grp->rank0, grp->rank0 + d, ring, d);
        }
        for (int i = 0; i < grp->nseqs; ++i) {
            const double s = (double)plan->seq_lens[grp->seqs[i]];
            comp   += rcf * nsp_cost_comp(cost, s, d);       /* s per layer per rank */
            tokens += s / d;                                 /* tokens per rank      */
            /* bytes per rank: the all-to-all inside the Ulysses subgroup, and
             * the KV blocks around the ring (none when ring == 1) */
            bytes  += rcb * nsp_cost_group_a2a_bytes(cost, s, d, ring);
            if (ring > 1) {
                rbytes += nsp_cost_ring_bytes(cost, s, d, ring, grp->recompute);
            }
        }
        if (grp->nseqs > 0) {
            k  = nsp_cost_group_a2a_time(cost, bytes, d, ring);
            kr = nsp_cost_ring_time(cost, rbytes, d, ring, grp->recompute);
            /* the CPU the exchanges cost the rank: compute, not hidden */
            xcpu = nsp_cost_group_xfer_cpu(cost, bytes, rbytes, d, ring, grp->recompute);
        }
        per_tok = nsp_cost_act_bytes(cost, grp->recompute) +
                  nsp_cost_ring_mem_per_token(cost, d, ring);
        lvl = level_of_size(d);
        if (lvl >= nlevels) {
            lvl = nlevels - 1;
        }
        for (int r = grp->rank0; r < grp->rank0 + d; ++r) {
            out[r].comp_s += comp;
            out[r].comp_s += xcpu;
            out[r].xcpu_s += xcpu;
            out[r].tokens += tokens;
            out[r].mem_bytes += tokens * per_tok;
            if (grp->pipelined) {
                out[r].k_pipe_s += k;
            } else {
                out[r].k_seq_s += k;
            }
            /* the ring overlaps compute always: each KV step travels while
             * the previous step computes (docs/reference/cost-model.md) */
            out[r].k_pipe_s += kr;
            out[r].ring_s   += kr;
            if (level_comp != NULL && nlevels > 0) {
                level_comp[(size_t)r * nlevels + lvl] += comp + nsp_cost_ep_time(cost, tokens);
            }
            if (level_comm != NULL && nlevels > 0) {
                level_comm[(size_t)r * nlevels + lvl] += k + kr;
            }
        }
    }
    for (int r = 0; r < ranks; ++r) {
        out[r].ep_s       = nsp_cost_ep_time(cost, out[r].tokens);
        out[r].comp_s    += out[r].ep_s;
        out[r].mem_bytes += cost->fixed_mem_bytes;
        out[r].time_s     = nsp_cost_rank_time(cost, out[r].comp_s, out[r].k_pipe_s,
                                               out[r].k_seq_s);
        if (out[r].time_s > worst) {
            worst = out[r].time_s;
        }
    }
    *round_s = worst;
    return NSP_OK;
}

nsp_status_t nsp_plan_evaluate(nsp_plan_t *plan)
{
    nsp_rank_round_cost_t *rc;
    nsp_cost_t             cost;
    nsp_status_t           status;
    double                 step = 0.0, round_s;
    int                    ranks;

    if (plan == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_evaluate: NULL plan");
    }
    NSP_CHECK(nsp_cost_init(&cost, &plan->model, &plan->cluster));
    ranks = plan->cluster.ranks;
    rc    = malloc(sizeof(*rc) * (size_t)ranks);
    if (rc == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d rank costs", ranks);
    }
    memset(plan->predicted.rank_s, 0, sizeof(double) * (size_t)ranks);
    memset(plan->predicted.rank_mem_bytes, 0, sizeof(double) * (size_t)ranks);
    for (int r = 0; r < plan->nrounds; ++r) {
        NSP_CHECK_GOTO(nsp_plan_eval_round(&cost, plan, r, rc, &round_s, 0, NULL, NULL),
                       status, out_free_rc);
        /* a round is a micro-batch: its fixed cost (weights, launches) is
         * paid by every rank whatever the round holds */
        step += plan->model.layers * round_s + cost.round_s;
        for (int g = 0; g < ranks; ++g) {
            plan->predicted.rank_s[g] += plan->model.layers * rc[g].time_s + cost.round_s;
            if (rc[g].mem_bytes > plan->predicted.rank_mem_bytes[g]) {
                plan->predicted.rank_mem_bytes[g] = rc[g].mem_bytes;
            }
        }
    }
    plan->predicted.step_s        = step;
    plan->predicted.round_s       = cost.round_s;
    plan->predicted.lower_bound_s = nsp_lower_bound_cost(&cost, plan->seq_lens, plan->nseqs,
                                                         (plan->flags & NSP_PLAN_FLAG_RING) != 0);
    status = NSP_OK;

out_free_rc:
    free(rc);
    return status;
}

double nsp_lower_bound_cost(const nsp_cost_t *cost, const int64_t *lens, int nseqs,
                            int enable_ring)
{
    const int dmax  = nsp_cost_top_degree(cost, enable_ring);
    double    total = 0.0, tokens = 0.0, longest = 0.0, alone;

    for (int i = 0; i < nseqs; ++i) {
        const double s = (double)lens[i];
        total  += nsp_cost_comp(cost, s, 1);
        tokens += s;
        if (s > longest) {
            longest = s;
        }
    }
    /* (a) all compute (with the MoE term) spread evenly over N ranks */
    total = (total + nsp_cost_ep_time(cost, tokens)) / cost->cluster.ranks;
    /* (b) the longest sequence alone at the largest degree a plan may use:
     * the largest Ulysses degree, or every rank when rings are allowed */
    alone = nsp_cost_comp(cost, longest, dmax) + nsp_cost_ep_time(cost, longest / dmax);
    /* every plan of a nonempty batch has at least one round: its fixed cost */
    return cost->model.layers * (total > alone ? total : alone) +
           (nseqs > 0 ? cost->round_s : 0.0);
}

static nsp_status_t lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                                const int64_t *lens, int nseqs, int enable_ring,
                                double *bound_s)
{
    nsp_cost_t cost;

    if (bound_s == NULL || nseqs < 0 || (nseqs > 0 && lens == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_lower_bound: invalid argument");
    }
    for (int i = 0; i < nseqs; ++i) {
        if (lens[i] <= 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "sequence %d has length %lld; lengths must "
                             "be positive", i, (long long)lens[i]);
        }
    }
    NSP_CHECK(nsp_cost_init(&cost, model, cluster));
    *bound_s = nsp_lower_bound_cost(&cost, lens, nseqs, enable_ring);
    return NSP_OK;
}

nsp_status_t nsp_lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs, double *bound_s)
{
    return lower_bound(model, cluster, lens, nseqs, 0, bound_s);
}

nsp_status_t nsp_planner_lower_bound(const nsp_model_t *model, const nsp_cluster_t *cluster,
                                     const int64_t *lens, int nseqs,
                                     const nsp_planner_params_t *params, double *bound_s)
{
    if (params == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_planner_lower_bound: NULL params");
    }
    return lower_bound(model, cluster, lens, nseqs,
                       (params->field_mask & NSP_PLANNER_FIELD_ENABLE_RING) &&
                       params->enable_ring, bound_s);
}
