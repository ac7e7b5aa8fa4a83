/* Plan allocation, construction from flat arrays, and freeing. */
#include "planner/plan_internal.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double nsp_wtime(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nsp_plan_free(nsp_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    for (int r = 0; r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            free(plan->rounds[r].groups[g].seqs);
        }
        free(plan->rounds[r].groups);
    }
    free(plan->rounds);
    free(plan->seq_lens);
    free(plan->predicted.rank_s);
    free(plan->predicted.rank_mem_bytes);
    free(plan);
}

nsp_status_t nsp_plan_alloc(const char *planner, const nsp_model_t *model,
                            const nsp_cluster_t *cluster, const int64_t *lens,
                            int nseqs, nsp_plan_t **plan_p)
{
    nsp_plan_t *plan;

    if (planner == NULL || model == NULL || cluster == NULL || plan_p == NULL ||
        nseqs < 0 || (nseqs > 0 && lens == NULL) || cluster->ranks < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_alloc: invalid argument "
                         "(nseqs=%d, ranks=%d)", nseqs, cluster ? cluster->ranks : -1);
    }
    plan = calloc(1, sizeof(*plan));
    if (plan == NULL) {
        goto err_no_memory;
    }
    snprintf(plan->planner, sizeof(plan->planner), "%s", planner);
    plan->model   = *model;
    plan->cluster = *cluster;
    plan->nseqs   = nseqs;
    plan->seq_lens = malloc(sizeof(*plan->seq_lens) * (size_t)(nseqs > 0 ? nseqs : 1));
    plan->predicted.rank_s = calloc((size_t)cluster->ranks, sizeof(double));
    plan->predicted.rank_mem_bytes = calloc((size_t)cluster->ranks, sizeof(double));
    if (plan->seq_lens == NULL || plan->predicted.rank_s == NULL ||
        plan->predicted.rank_mem_bytes == NULL) {
        goto err_free_plan;
    }
    if (nseqs > 0) {
        memcpy(plan->seq_lens, lens, sizeof(*lens) * (size_t)nseqs);
    }
    *plan_p = plan;
    return NSP_OK;

err_free_plan:
    nsp_plan_free(plan);
err_no_memory:
    return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate a plan for %d sequences and %d ranks",
                     nseqs, cluster->ranks);
}

/* Fill plan->rounds from the flat arrays; new_index[g] is the compacted index
 * of group g inside its round (-1 if empty), round_of[g] its compacted round. */
static nsp_status_t plan_fill_rounds(nsp_plan_t *plan, const nsp_group_desc_t *groups,
                                     int ngroups, const int *seq_group)
{
    int         *count    = calloc((size_t)ngroups + 1, sizeof(int));
    int         *new_idx  = malloc(sizeof(int) * ((size_t)ngroups + 1));
    int         *round_map = NULL;
    int          max_round = -1, nrounds = 0;
    nsp_status_t status   = NSP_ERR_NO_MEMORY;

    if (count == NULL || new_idx == NULL) {
        goto out_free;
    }
    for (int i = 0; i < plan->nseqs; ++i) {
        count[seq_group[i]]++;
    }
    for (int g = 0; g < ngroups; ++g) {
        if (count[g] > 0 && groups[g].round > max_round) {
            max_round = groups[g].round;
        }
    }
    round_map = malloc(sizeof(int) * (size_t)(max_round + 2));
    if (round_map == NULL) {
        goto out_free;
    }
    for (int r = 0; r <= max_round; ++r) {
        round_map[r] = -1;
    }
    for (int g = 0; g < ngroups; ++g) {
        if (count[g] > 0) {
            round_map[groups[g].round] = 0;
        }
    }
    for (int r = 0; r <= max_round; ++r) {
        if (round_map[r] == 0) {
            round_map[r] = nrounds++;
        }
    }
    plan->rounds = calloc((size_t)(nrounds > 0 ? nrounds : 1), sizeof(*plan->rounds));
    if (plan->rounds == NULL) {
        goto out_free;
    }
    plan->nrounds = nrounds;
    for (int g = 0; g < ngroups; ++g) {
        new_idx[g] = -1;
        if (count[g] > 0) {
            new_idx[g] = plan->rounds[round_map[groups[g].round]].ngroups++;
        }
    }
    for (int r = 0; r < nrounds; ++r) {
        plan->rounds[r].groups = calloc((size_t)plan->rounds[r].ngroups,
                                        sizeof(nsp_plan_group_t));
        if (plan->rounds[r].groups == NULL) {
            goto out_free;
        }
    }
    for (int g = 0; g < ngroups; ++g) {
        nsp_plan_group_t *pg;
        if (new_idx[g] < 0) {
            continue;
        }
        pg = &plan->rounds[round_map[groups[g].round]].groups[new_idx[g]];
        pg->rank0     = groups[g].rank0;
        pg->size      = groups[g].size;
        pg->recompute = groups[g].recompute;
        pg->pipelined = groups[g].pipelined;
        pg->ring      = groups[g].ring > 0 ? groups[g].ring : 1;
        pg->seqs      = malloc(sizeof(int) * (size_t)count[g]);
        if (pg->seqs == NULL) {
            goto out_free;
        }
    }
    for (int i = 0; i < plan->nseqs; ++i) {
        int               g  = seq_group[i];
        nsp_plan_group_t *pg = &plan->rounds[round_map[groups[g].round]].groups[new_idx[g]];
        pg->seqs[pg->nseqs++] = i;
    }
    status = NSP_OK;

out_free:
    free(round_map);
    free(new_idx);
    free(count);
    if (status != NSP_OK) {
        return nsp_error(status, "cannot allocate the rounds of a plan (%d groups)", ngroups);
    }
    return NSP_OK;
}

nsp_status_t nsp_plan_build(const char *planner, const nsp_model_t *model,
                            const nsp_cluster_t *cluster, const int64_t *lens,
                            int nseqs, const nsp_group_desc_t *groups, int ngroups,
                            const int *seq_group, nsp_plan_t **plan_p)
{
    nsp_plan_t  *plan = NULL;
    nsp_status_t status;

    for (int i = 0; i < nseqs; ++i) {
        if (seq_group[i] < 0 || seq_group[i] >= ngroups || groups[seq_group[i]].round < 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "planner '%s' left sequence %d (length %lld) "
                             "without a valid group (%d)", planner, i, (long long)lens[i],
                             seq_group[i]);
        }
    }
    NSP_CHECK_GOTO(nsp_plan_alloc(planner, model, cluster, lens, nseqs, &plan), status, err);
    NSP_CHECK_GOTO(plan_fill_rounds(plan, groups, ngroups, seq_group), status, err_free_plan);
    NSP_CHECK_GOTO(nsp_plan_evaluate(plan), status, err_free_plan);
    *plan_p = plan;
    return NSP_OK;

err_free_plan:
    nsp_plan_free(plan);
err:
    return status;
}
