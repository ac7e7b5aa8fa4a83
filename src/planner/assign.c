/*
 * Assignments (where each sequence goes, as flat arrays) and the plans built
 * from them: the routing engine and the static planner fill assignments
 * (route.h), nsp_route_plan turns one into a plan, and nsp_pack_aligned
 * places a round's disjoint groups as aligned blocks (planners.h).
 */
#include "planner/route.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- aligned placement of disjoint groups --------------------------------- */

nsp_status_t nsp_pack_aligned(const int *size, int n, int ranks, int *rank0_out)
{
    int *idx = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int  next = 0;

    if (idx == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d group indices", n);
    }
    /* Sort indices by size, largest first (stable by index: sizes are small
     * integers, so a counting pass over distinct sizes would do as well). */
    for (int i = 0; i < n; ++i) {
        idx[i] = i;
    }
    for (int i = 1; i < n; ++i) {
        int j = i, v = idx[i];
        while (j > 0 && (size[idx[j - 1]] < size[v] ||
                         (size[idx[j - 1]] == size[v] && idx[j - 1] > v))) {
            idx[j] = idx[j - 1];
            --j;
        }
        idx[j] = v;
    }
    for (int k = 0; k < n; ++k) {
        const int i = idx[k];
        if (next % size[i] != 0 || next + size[i] > ranks) {
            free(idx);
            return nsp_error(NSP_ERR_INTERNAL, "groups of %d ranks do not pack aligned into "
                             "%d ranks at offset %d", size[i], ranks, next);
        }
        rank0_out[i] = next;
        next += size[i];
    }
    free(idx);
    return NSP_OK;
}

/* ---- assignments ---------------------------------------------------------- */

nsp_status_t nsp_route_assign_alloc(nsp_route_assign_t *a, int nseqs)
{
    const size_t n = (size_t)(nseqs > 0 ? nseqs : 1);

    memset(a, 0, sizeof(*a));
    a->nseqs = nseqs;
    a->round = malloc(sizeof(int) * n);
    a->rank0 = malloc(sizeof(int) * n);
    a->size  = malloc(sizeof(int) * n);
    a->rc    = malloc(sizeof(int) * n);
    if (a->round == NULL || a->rank0 == NULL || a->size == NULL || a->rc == NULL) {
        nsp_route_assign_free(a);
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate an assignment of %d sequences",
                         nseqs);
    }
    return NSP_OK;
}

void nsp_route_assign_free(nsp_route_assign_t *a)
{
    free(a->round);
    free(a->rank0);
    free(a->size);
    free(a->rc);
    memset(a, 0, sizeof(*a));
}

/* ---- plans from assignments ----------------------------------------------------- */

nsp_status_t nsp_route_plan(const nsp_planner_input_t *in, const char *planner,
                            const nsp_route_assign_t *a, int pipeline_rule, unsigned flags,
                            nsp_plan_t **plan)
{
    const int         N = in->cost.cluster.ranks, n = in->nseqs, nl = in->nlevels;
    int               off[NSP_PLANNER_MAX_LEVELS + 1];
    int               nnodes = 0, nkeys, ngroups = 0;
    int              *key_group = NULL, *seq_group = NULL, *count = NULL;
    nsp_group_desc_t *desc = NULL;
    nsp_status_t      status;

    /* Groups are tree nodes: a counting sort on (round, node) gives them in
     * O(n + rounds * nodes); larger levels first inside a round. */
    for (int l = nl - 1; l >= 0; --l) {
        off[l] = nnodes;
        nnodes += N / in->level_degrees[l];
    }
    nkeys     = a->nrounds * nnodes;
    key_group = malloc(sizeof(int) * (size_t)(nkeys > 0 ? nkeys : 1));
    seq_group = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    desc      = malloc(sizeof(*desc) * (size_t)(n > 0 ? n : 1));
    count     = calloc((size_t)N, sizeof(int));
    if (key_group == NULL || seq_group == NULL || desc == NULL || count == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate the groups of %d sequences", n);
        goto out_free;
    }
    for (int k = 0; k < nkeys; ++k) {
        key_group[k] = -1;
    }
    for (int i = 0; i < n; ++i) {
        int l = 0;
        while (l < nl && in->level_degrees[l] != a->size[i]) {
            ++l;
        }
        if (l == nl || a->rank0[i] % a->size[i] != 0 || a->round[i] < 0 ||
            a->round[i] >= a->nrounds) {
            status = nsp_error(NSP_ERR_INTERNAL, "planner '%s' put sequence %d in a group "
                               "[%d, +%d) of round %d that is not a tree node", planner, i,
                               a->rank0[i], a->size[i], a->round[i]);
            goto out_free;
        }
        seq_group[i] = a->round[i] * nnodes + off[l] + a->rank0[i] / a->size[i];
        key_group[seq_group[i]] = 0;
    }
    for (int k = 0; k < nkeys; ++k) {
        if (key_group[k] == 0) {
            key_group[k] = ngroups++;
        }
    }
    for (int i = 0; i < n; ++i) {
        nsp_group_desc_t *gd;
        const int         g = key_group[seq_group[i]];
        seq_group[i] = g;
        gd = &desc[g];
        gd->round     = a->round[i];
        gd->rank0     = a->rank0[i];
        gd->size      = a->size[i];
        gd->recompute = a->rc[i];
        gd->pipelined = 0;
        gd->ring      = 1;
        for (int l = 0; l < nl; ++l) {
            if (in->level_degrees[l] == a->size[i]) {
                gd->ring = in->level_ring[l] > 0 ? in->level_ring[l] : 1;
            }
        }
    }
    if (pipeline_rule) {
        /* groups are in round order: count each round's groups per rank */
        for (int g0 = 0; g0 < ngroups;) {
            int g1 = g0;
            while (g1 < ngroups && desc[g1].round == desc[g0].round) {
                ++g1;
            }
            memset(count, 0, sizeof(int) * (size_t)N);
            for (int g = g0; g < g1; ++g) {
                for (int q = desc[g].rank0; q < desc[g].rank0 + desc[g].size; ++q) {
                    count[q]++;
                }
            }
            for (int g = g0; g < g1; ++g) {
                desc[g].pipelined = 1;
                for (int q = desc[g].rank0; q < desc[g].rank0 + desc[g].size; ++q) {
                    desc[g].pipelined &= count[q] >= 2;
                }
            }
            g0 = g1;
        }
    }
    status = nsp_plan_build(planner, &in->cost.model, &in->cost.cluster, in->lens, n, desc,
                            ngroups, seq_group, plan);
    if (status == NSP_OK) {
        (*plan)->flags = flags;
    }
out_free:
    free(count);
    free(desc);
    free(seq_group);
    free(key_group);
    return status;
}
