/*
 * The parameters of one nsp_plan_create() call (nsp_planner_params_t)
 * checked and resolved to their defaults into the planner's input: the
 * static degree and recomputation, the MILP time limit, the rounds, the
 * megatron knob, and the tree (params.level_degrees or the default one,
 * with ring levels for a planner that has them).
 */
#include "planner/planners.h"
#include "common/log.h"

#include <math.h>

/* The default tree: 1, 2, 4, ... while valid, then the largest valid degree
 * if it is a multiple of the last (e.g. 1, 2, 4, 8, 24 for 24 heads). With
 * rings (for a planner with ring levels; the disjoint planner's tree stays
 * Ulysses-only), the tree
 * goes on doubling up to the ranks, then the ranks themselves if they are a
 * multiple of the last (e.g. 1, 2, ..., 32, 64, 128), each level above the
 * Ulysses limit Ulysses x ring (nsp_cost_ring_for_degree). */
static void default_levels(const nsp_cost_t *cost, int ring, nsp_planner_input_t *in)
{
    const int N = cost->cluster.ranks;
    int       n = 0;

    for (int d = 1; d <= cost->max_degree && n < NSP_PLANNER_MAX_LEVELS; d *= 2) {
        if (nsp_cost_degree_valid(cost, d)) {
            in->level_degrees[n++] = d;
        }
    }
    if (n < NSP_PLANNER_MAX_LEVELS && in->level_degrees[n - 1] != cost->max_degree &&
        cost->max_degree % in->level_degrees[n - 1] == 0) {
        in->level_degrees[n++] = cost->max_degree;
    }
    if (ring) {
        for (int d = 2 * in->level_degrees[n - 1]; d <= N && n < NSP_PLANNER_MAX_LEVELS; d *= 2) {
            in->level_degrees[n++] = d;
        }
        if (n < NSP_PLANNER_MAX_LEVELS && in->level_degrees[n - 1] != N &&
            N % in->level_degrees[n - 1] == 0) {
            in->level_degrees[n++] = N;
        }
    }
    in->nlevels = n;
}

/* The tree: params.level_degrees checked, or the default one. Ring levels
 * only for a planner with NSP_PLANNER_CAP_RING_LEVELS. */
static nsp_status_t resolve_levels(const nsp_planner_params_t *p,
                                   const nsp_planner_entry_t *planner, nsp_planner_input_t *in)
{
    const nsp_cost_t *cost        = &in->cost;
    const int         ring_levels = (planner->caps & NSP_PLANNER_CAP_RING_LEVELS) != 0;

    if (!(p->field_mask & NSP_PLANNER_FIELD_LEVEL_DEGREES)) {
        default_levels(cost, in->enable_ring && ring_levels, in);
        for (int l = 0; l < in->nlevels; ++l) {
            in->level_ring[l] = nsp_planner_ring_of(in, in->level_degrees[l]);
        }
        return NSP_OK;
    }
    if (p->nlevels < 1 || p->nlevels > NSP_PLANNER_MAX_LEVELS || p->level_degrees == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "params.nlevels=%d must be in [1, %d] with "
                         "params.level_degrees set", p->nlevels, NSP_PLANNER_MAX_LEVELS);
    }
    for (int l = 0; l < p->nlevels; ++l) {
        const int d = p->level_degrees[l];
        if (in->enable_ring && ring_levels) {
            if (d < 1 || d > cost->cluster.ranks) {
                return nsp_error(NSP_ERR_INVALID_ARG, "params.level_degrees[%d]=%d is not a "
                                 "valid degree: with rings it must be in [1, ranks=%d]", l, d,
                                 cost->cluster.ranks);
            }
        } else if (!nsp_cost_degree_valid(cost, d)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.level_degrees[%d]=%d is not a valid "
                             "degree: it must divide q_heads=%d, divide kv_heads=%d or be a "
                             "multiple of it, and be <= ranks=%d%s%s%s", l, d,
                             cost->model.q_heads, cost->model.kv_heads, cost->cluster.ranks,
                             in->enable_ring ? " (the " : "", in->enable_ring ? planner->name : "",
                             in->enable_ring ? " planner uses Ulysses degrees only)" : "");
        }
        if (l > 0 && (d <= p->level_degrees[l - 1] || d % p->level_degrees[l - 1] != 0)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.level_degrees must ascend and each "
                             "divide the next so groups nest; got %d after %d", d,
                             p->level_degrees[l - 1]);
        }
        in->level_degrees[l] = d;
        in->level_ring[l]    = ring_levels ? nsp_planner_ring_of(in, d) : 1;
    }
    in->nlevels = p->nlevels;
    return NSP_OK;
}

nsp_status_t nsp_planner_resolve_params(const nsp_planner_params_t *p,
                                        const nsp_planner_entry_t *planner,
                                        nsp_planner_input_t *in)
{
    const nsp_cost_t *cost = &in->cost;

    in->static_degree    = 0;
    in->static_recompute = -1;
    in->time_limit_s     = NSP_PLANNER_DEFAULT_TIME_LIMIT_S;
    in->max_rounds       = NSP_PLANNER_DEFAULT_MAX_ROUNDS;
    in->enable_ring      = (p->field_mask & NSP_PLANNER_FIELD_ENABLE_RING) && p->enable_ring;
    if (p->field_mask & NSP_PLANNER_FIELD_ENABLE_RING &&
        p->enable_ring != 0 && p->enable_ring != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "params.enable_ring=%d must be 0 or 1",
                         p->enable_ring);
    }
    if (p->field_mask & NSP_PLANNER_FIELD_STATIC_DEGREE) {
        const int d = p->static_degree;
        if (!nsp_cost_degree_valid(cost, d) &&
            !(in->enable_ring && d > cost->max_degree && d <= cost->cluster.ranks &&
              cost->cluster.ranks % d == 0)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.static_degree=%d is not a valid "
                             "degree: it must divide q_heads=%d, divide kv_heads=%d or be a "
                             "multiple of it, and be <= ranks=%d%s", d,
                             cost->model.q_heads, cost->model.kv_heads, cost->cluster.ranks,
                             in->enable_ring ? ", or (with rings) be above the largest "
                             "Ulysses degree and divide the ranks" : "");
        }
        in->static_degree = d;
    }
    if (p->field_mask & NSP_PLANNER_FIELD_STATIC_RECOMPUTE) {
        if (p->static_recompute != 0 && p->static_recompute != 1) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.static_recompute=%d must be 0 or 1",
                             p->static_recompute);
        }
        in->static_recompute = p->static_recompute;
    }
    if (p->field_mask & NSP_PLANNER_FIELD_TIME_LIMIT) {
        if (!(p->time_limit_s > 0.0) || !isfinite(p->time_limit_s)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.time_limit_s=%g must be a positive "
                             "number of seconds", p->time_limit_s);
        }
        in->time_limit_s = p->time_limit_s;
    }
    if (p->field_mask & NSP_PLANNER_FIELD_MAX_SEQLEN) {
        if (p->max_seqlen_per_rank < 1) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.max_seqlen_per_rank=%lld must be a "
                             "positive number of tokens", (long long)p->max_seqlen_per_rank);
        }
        in->max_seqlen_per_rank = p->max_seqlen_per_rank;
    }
    if (p->field_mask & NSP_PLANNER_FIELD_MAX_ROUNDS) {
        if (p->max_rounds < 1) {
            return nsp_error(NSP_ERR_INVALID_ARG, "params.max_rounds=%d must be >= 1",
                             p->max_rounds);
        }
        in->max_rounds = p->max_rounds;
    }
    return resolve_levels(p, planner, in);
}
