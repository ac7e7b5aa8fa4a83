/*
 * nsp_plan_create(): validate one batch, resolve the planner parameters to
 * their defaults (planner_params.c), run the planner params.kind selects
 * (planner_table.c), time it and log a one-line summary of the plan at
 * INFO.
 */
#include "planner/planners.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Relative safety margin on the memory a planner may fill, so that a plan
 * packed to the limit stays under it when re-evaluated in another order. */
#define NSP_PLANNER_MEM_MARGIN 1e-6

/* ---- input validation -------------------------------------------------- */

static nsp_status_t check_lengths(const int64_t *lens, int nseqs)
{
    for (int i = 0; i < nseqs; ++i) {
        if (lens[i] <= 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "sequence %d has length %lld; every length "
                             "must be a positive number of tokens", i, (long long)lens[i]);
        }
    }
    return NSP_OK;
}

/* Every sequence must fit on its own at the largest degree with recompute. */
static nsp_status_t check_memory(const nsp_planner_input_t *in, int dmax)
{
    const nsp_cost_t *cost  = &in->cost;
    const double      fixed = cost->fixed_mem_bytes;
    const double      M     = cost->cluster.mem_bytes;
    const double      a_rc  = cost->act_bytes_recompute +
                              nsp_cost_ring_mem_per_token(cost, dmax, nsp_planner_ring_of(in, dmax));

    if (in->mem_cap <= 0.0) {
        return nsp_error(NSP_ERR_INFEASIBLE, "model states and workspace need %.2f GiB per "
                         "rank (16*P/N = %.2f GiB + W = %.2f GiB) but a rank has %.2f GiB: "
                         "use more ranks or a smaller model", fixed / GIB,
                         16.0 * cost->model.params / cost->cluster.ranks / GIB,
                         cost->cluster.workspace_bytes / GIB, M / GIB);
    }
    for (int i = 0; i < in->nseqs; ++i) {
        const double act = (double)in->lens[i] / dmax * a_rc;
        if (act > in->mem_cap) {
            const double fit = floor(in->mem_cap / a_rc * dmax);
            return nsp_error(NSP_ERR_INFEASIBLE, "sequence %d (length %lld tokens) cannot be "
                             "placed: even at the largest degree %d with recomputation it "
                             "needs %.2f GiB per rank (%.2f GiB of activations + %.2f GiB of "
                             "model states and workspace) but a rank has %.2f GiB; cut "
                             "sequences to at most %.0f tokens or use a model/cluster with a "
                             "larger valid degree", i, (long long)in->lens[i], dmax,
                             (act + fixed) / GIB, act / GIB, fixed / GIB, M / GIB, fit);
        }
    }
    return NSP_OK;
}

/* Longest first; equal lengths by index, so the order is deterministic. A
 * stable LSD radix sort on (longest - length), 11 bits a pass: O(n). Each
 * pass moves the keys with the indices, so it streams two arrays instead
 * of reading the lengths at random through the order (at 134K sequences
 * those reads missed the caches). */
#define ORDER_RADIX_BITS 11
static nsp_status_t make_order(const int64_t *lens, int nseqs, int **order_p)
{
    const size_t nb = (size_t)1 << ORDER_RADIX_BITS;
    const size_t n  = (size_t)(nseqs > 0 ? nseqs : 1);
    int         *order = malloc(sizeof(int) * n), *tmp = malloc(sizeof(int) * n);
    uint64_t    *key = malloc(sizeof(uint64_t) * n), *ktmp = malloc(sizeof(uint64_t) * n);
    size_t      *cnt = malloc(sizeof(size_t) * nb);
    int64_t      longest = 0;
    nsp_status_t status = NSP_OK;

    if (order == NULL || tmp == NULL || key == NULL || ktmp == NULL || cnt == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the order of %d sequences",
                           nseqs);
        goto out_free;
    }
    for (int i = 0; i < nseqs; ++i) {
        longest = lens[i] > longest ? lens[i] : longest;
    }
    for (int i = 0; i < nseqs; ++i) {
        order[i] = i;
        key[i]   = (uint64_t)(longest - lens[i]);
    }
    for (int shift = 0; shift < 63 && (longest >> shift) > 0; shift += ORDER_RADIX_BITS) {
        size_t sum = 0;
        memset(cnt, 0, sizeof(size_t) * nb);
        for (int k = 0; k < nseqs; ++k) {
            cnt[key[k] >> shift & (nb - 1)]++;
        }
        for (size_t b = 0; b < nb; ++b) {
            const size_t c = cnt[b];
            cnt[b] = sum;
            sum += c;
        }
        for (int k = 0; k < nseqs; ++k) {
            const size_t d = cnt[key[k] >> shift & (nb - 1)]++;
            tmp[d]  = order[k];
            ktmp[d] = key[k];
        }
        {
            int      *o = order;
            uint64_t *q = key;
            order = tmp;
            tmp   = o;
            key   = ktmp;
            ktmp  = q;
        }
    }
    *order_p = order;
    order    = NULL;
out_free:
    free(cnt);
    free(ktmp);
    free(key);
    free(tmp);
    free(order);
    return status;
}

/* ---- the summary line --------------------------------------------------- */

static void log_summary(const nsp_plan_t *plan)
{
    int    groups = 0, rc_groups = 0, max_size = 0;
    double tokens = 0.0;

    if (!nsp_log_enabled(NSP_LOG_INFO)) {
        return;
    }
    for (int r = 0; r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
            ++groups;
            rc_groups += grp->recompute != 0;
            if (grp->size > max_size) {
                max_size = grp->size;
            }
        }
    }
    for (int i = 0; i < plan->nseqs; ++i) {
        tokens += (double)plan->seq_lens[i];
    }
    NSP_INFO("plan %s: %d seqs, %.0f tokens on %d ranks -> %d rounds, %d groups (largest %d, "
             "%d recomputed); step %.4f s, lower bound %.4f s (x%.3f), planned in %.3f ms%s%s",
             plan->planner, plan->nseqs, tokens, plan->cluster.ranks, plan->nrounds, groups,
             max_size, rc_groups, plan->predicted.step_s, plan->predicted.lower_bound_s,
             plan->predicted.lower_bound_s > 0 ?
                 plan->predicted.step_s / plan->predicted.lower_bound_s : 0.0,
             plan->predicted.plan_ms,
             (plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK) ? ", greedy fallback (no MILP solver)" : "",
             (plan->flags & NSP_PLAN_FLAG_SOLVER_TIMEOUT) ? ", solver hit its time limit" : "");
}

/* ---- the public entry point -------------------------------------------- */

/* params.kind names no planner of this build: say which kinds do. */
static nsp_status_t unknown_kind(nsp_planner_kind_t kind)
{
    char known[256] = "";
    int  n = 0;

    NSP_CHECK(nsp_planner_count(&n));
    for (int i = 0; i < n; ++i) {
        nsp_planner_kind_t k;
        const char        *name;
        size_t             len = strlen(known);
        NSP_CHECK(nsp_planner_at(i, &k, &name));
        snprintf(known + len, sizeof(known) - len, "%s%s=%d", i > 0 ? ", " : "", name, (int)k);
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "params.kind=%d is not a planner (%s)", (int)kind,
                     known);
}

nsp_status_t nsp_plan_create(const nsp_model_t *model, const nsp_cluster_t *cluster,
                             const int64_t *lens, int nseqs,
                             const nsp_planner_params_t *params, nsp_plan_t **plan_p)
{
    const nsp_planner_entry_t *planner;
    nsp_planner_input_t        in;
    nsp_plan_t                *plan  = NULL;
    int                       *order = NULL;
    int64_t                   *views = NULL;
    nsp_status_t               status;
    double                     t0 = nsp_wtime();

    if (model == NULL || cluster == NULL || params == NULL || plan_p == NULL || nseqs < 0 ||
        (nseqs > 0 && lens == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_create: NULL argument or negative "
                         "nseqs (%d)", nseqs);
    }
    planner = nsp_planner_find_kind(params->kind);
    if (planner == NULL) {
        return unknown_kind(params->kind);
    }
    if (cluster->ranks < 1 || cluster->ranks > NSP_MAX_RANKS || nseqs > NSP_MAX_BATCH_SEQS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_create: cluster '%s' has %d ranks and "
                         "the batch %d sequences; at most %d ranks (NSP_MAX_RANKS) and %d "
                         "sequences (NSP_MAX_BATCH_SEQS)", cluster->name, cluster->ranks, nseqs,
                         NSP_MAX_RANKS, NSP_MAX_BATCH_SEQS);
    }
    /* whole nodes, or part of one node (as nsp_cost_init accepts) */
    if (cluster->ranks_per_node >= 1 && cluster->ranks > cluster->ranks_per_node &&
        cluster->ranks % cluster->ranks_per_node != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cluster '%s': ranks=%d is not a multiple of "
                         "ranks_per_node=%d; plans need whole nodes", cluster->name,
                         cluster->ranks, cluster->ranks_per_node);
    }
    NSP_CHECK(check_lengths(lens, nseqs));
    memset(&in, 0, sizeof(in));
    NSP_CHECK(nsp_cost_init(&in.cost, model, cluster));
    NSP_CHECK(nsp_planner_resolve_params(params, planner, &in));
    in.lens    = lens;
    in.nseqs   = nseqs;
    in.mem_cap = (cluster->mem_bytes - in.cost.fixed_mem_bytes) * (1.0 - NSP_PLANNER_MEM_MARGIN);
    NSP_CHECK(check_memory(&in, planner->top_degree(&in)));
    NSP_CHECK(make_order(lens, nseqs, &order));
    in.order = order;
    /* the batch in its order, for every routing of this plan (made per
     * routing, arrays this large came fresh from the system each time:
     * page faults) */
    status = nsp_planner_order_views(&in, &views);
    if (status < 0) {
        free(order);
        return status;
    }

    status = planner->plan(&in, &plan);
    free(views);
    free(order);
    if (status < 0) {
        return status;
    }
    if (in.enable_ring) {
        /* the bound of a batch with rings allowed (docs/reference/cost-model.md); it
         * is what nsp_plan_evaluate() derives from the flag */
        plan->flags |= NSP_PLAN_FLAG_RING;
        plan->predicted.lower_bound_s = nsp_lower_bound_cost(&in.cost, lens, nseqs, 1);
    }
    plan->predicted.plan_ms = (nsp_wtime() - t0) * 1e3;
    snprintf(plan->planner, sizeof(plan->planner), "%s", planner->name);
    log_summary(plan);
    *plan_p = plan;
    return NSP_OK;
}
