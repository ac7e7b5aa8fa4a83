/*
 * nsp_plan_validate: the invariants of a plan (docs/design.md §8), each with a
 * message that names the invariant and where it breaks.
 *
 *  1. inputs: lengths > 0, a model and cluster the cost model accepts;
 *  2. groups: inside [0, ranks), size a multiple of ring, the Ulysses degree
 *     size/ring valid for the model (divides n_q), flags 0/1, seq indices in
 *     range;
 *  3. every sequence in exactly one group of one round;
 *  4. per round: the groups of a planner with disjoint rounds (static,
 *     disjoint, megatron: NSP_PLANNER_CAP_DISJOINT_ROUNDS) pairwise disjoint;
 *     any other planner's (nested) groups aligned (rank0 % size == 0) and
 *     nested (two groups that overlap: one contains the other), and no tree
 *     node twice in a round;
 *  5. no rank over mem_bytes in any round (cost model memory).
 */
#include "planner/planners.h"
#include "common/log.h"

#include <stdlib.h>

/* Memory may exceed mem_bytes by this relative slack: planners sum the same
 * terms in another order and must not be failed for the last bit. */
#define NSP_VALIDATE_MEM_SLACK 1e-12

typedef struct group_ref {
    int rank0;
    int size;
    int index;   /* group index inside the round */
} group_ref_t;

/* Sort by rank0 ascending, larger groups first: a parent precedes its children. */
static int compare_groups(const void *a, const void *b)
{
    const group_ref_t *x = a, *y = b;

    if (x->rank0 != y->rank0) {
        return x->rank0 < y->rank0 ? -1 : 1;
    }
    if (x->size != y->size) {
        return x->size > y->size ? -1 : 1;
    }
    return x->index - y->index;
}

/* A planner of this build that says so (NSP_PLANNER_CAP_DISJOINT_ROUNDS):
 * static, disjoint, megatron. Any other name (a user's) is held to nesting. */
static int plan_has_disjoint_rounds(const nsp_plan_t *plan)
{
    const nsp_planner_entry_t *planner = nsp_planner_find_name(plan->planner);

    return planner != NULL && (planner->caps & NSP_PLANNER_CAP_DISJOINT_ROUNDS) != 0;
}

static nsp_status_t check_group(const nsp_cost_t *cost, const nsp_plan_t *plan, int r, int g)
{
    const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
    const int               ranks = plan->cluster.ranks;
    int                     ring = grp->ring;

    if (grp->size < 1 || grp->rank0 < 0 || grp->rank0 > ranks - grp->size) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d: ranks "
                         "[%d, %d) are not inside [0, %d) (groups must lie inside the cluster)",
                         r, g, grp->rank0, grp->rank0 + grp->size, ranks);
    }
    if (ring < 1 || grp->size % ring != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d (ranks [%d, %d)): "
                         "ring degree %d must be >= 1 and divide the group size %d", r, g,
                         grp->rank0, grp->rank0 + grp->size, ring, grp->size);
    }
    if (!nsp_cost_degree_valid(cost, grp->size / ring)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d (ranks [%d, %d)): "
                         "Ulysses degree %d (size %d / ring %d) is not valid for model %s: it "
                         "must divide q_heads=%d, and divide kv_heads=%d or be a multiple of "
                         "it", r, g, grp->rank0, grp->rank0 + grp->size, grp->size / ring,
                         grp->size, ring, plan->model.name, plan->model.q_heads,
                         plan->model.kv_heads);
    }
    if ((grp->recompute != 0 && grp->recompute != 1) ||
        (grp->pipelined != 0 && grp->pipelined != 1)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d: recompute=%d and "
                         "pipelined=%d must be 0 or 1", r, g, grp->recompute, grp->pipelined);
    }
    if (grp->nseqs < 0 || (grp->nseqs > 0 && grp->seqs == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d: %d sequences "
                         "without a list", r, g, grp->nseqs);
    }
    return NSP_OK;
}

/* Invariant 3: each sequence in exactly one (round, group). */
static nsp_status_t check_placement(const nsp_plan_t *plan)
{
    int         *where = malloc(sizeof(int) * 2 * (size_t)(plan->nseqs > 0 ? plan->nseqs : 1));
    nsp_status_t status = NSP_OK;

    if (where == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d sequence slots", plan->nseqs);
    }
    for (int i = 0; i < plan->nseqs; ++i) {
        where[2 * i] = -1;
    }
    for (int r = 0; r < plan->nrounds && status == NSP_OK; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups && status == NSP_OK; ++g) {
            const nsp_plan_group_t *grp = &plan->rounds[r].groups[g];
            for (int k = 0; k < grp->nseqs; ++k) {
                int s = grp->seqs[k];
                if (s < 0 || s >= plan->nseqs) {
                    status = nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d "
                                       "holds sequence index %d, outside [0, %d)", r, g, s,
                                       plan->nseqs);
                    break;
                }
                if (where[2 * s] >= 0) {
                    status = nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: sequence %d is in "
                                       "round %d group %d and again in round %d group %d (each "
                                       "sequence must appear exactly once)", s, where[2 * s],
                                       where[2 * s + 1], r, g);
                    break;
                }
                where[2 * s] = r;
                where[2 * s + 1] = g;
            }
        }
    }
    for (int i = 0; i < plan->nseqs && status == NSP_OK; ++i) {
        if (where[2 * i] < 0) {
            status = nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: sequence %d (length %lld) is "
                               "in no group (each sequence must appear exactly once)", i,
                               (long long)plan->seq_lens[i]);
        }
    }
    free(where);
    return status;
}

/* Invariant 4 for one round; refs is scratch of ngroups entries. */
static nsp_status_t check_round_shape(const nsp_plan_t *plan, int r, group_ref_t *refs)
{
    const nsp_plan_round_t *pr = &plan->rounds[r];
    const int               disjoint = plan_has_disjoint_rounds(plan);
    group_ref_t            *stack = refs + pr->ngroups;   /* open ancestors */
    int                     depth = 0;

    for (int g = 0; g < pr->ngroups; ++g) {
        refs[g].rank0 = pr->groups[g].rank0;
        refs[g].size = pr->groups[g].size;
        refs[g].index = g;
        if (!disjoint && refs[g].rank0 % refs[g].size != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d group %d (ranks [%d, "
                             "%d)) is not aligned: rank0 %% size must be 0 in a nested plan",
                             r, g, refs[g].rank0, refs[g].rank0 + refs[g].size);
        }
    }
    qsort(refs, (size_t)pr->ngroups, sizeof(*refs), compare_groups);
    for (int i = 0; i < pr->ngroups; ++i) {
        const group_ref_t *cur = &refs[i];
        /* Close the ancestors that end before this group starts. */
        while (depth > 0 && stack[depth - 1].rank0 + stack[depth - 1].size <= cur->rank0) {
            --depth;
        }
        if (depth > 0) {
            const group_ref_t *top = &stack[depth - 1];
            if (disjoint) {
                return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d groups %d (ranks "
                                 "[%d, %d)) and %d (ranks [%d, %d)) overlap; a %s plan's groups "
                                 "in one round must be disjoint", r, top->index, top->rank0,
                                 top->rank0 + top->size, cur->index, cur->rank0,
                                 cur->rank0 + cur->size, plan->planner);
            }
            if (top->rank0 == cur->rank0 && top->size == cur->size) {
                return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d groups %d and %d "
                                 "are the same tree node (ranks [%d, %d)); merge their "
                                 "sequences into one group", r, top->index, cur->index,
                                 cur->rank0, cur->rank0 + cur->size);
            }
            if (cur->rank0 + cur->size > top->rank0 + top->size) {
                return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d groups %d (ranks "
                                 "[%d, %d)) and %d (ranks [%d, %d)) overlap without nesting; "
                                 "nested groups must contain one another", r, top->index,
                                 top->rank0, top->rank0 + top->size, cur->index, cur->rank0,
                                 cur->rank0 + cur->size);
            }
        }
        stack[depth++] = *cur;
    }
    return NSP_OK;
}

/* Invariant 5: memory of every rank in every round. */
static nsp_status_t check_memory(const nsp_cost_t *cost, const nsp_plan_t *plan)
{
    const int              ranks = plan->cluster.ranks;
    nsp_rank_round_cost_t *rc = malloc(sizeof(*rc) * (size_t)ranks);
    nsp_status_t           status = NSP_OK;
    double                 round_s;
    const double           limit = plan->cluster.mem_bytes * (1.0 + NSP_VALIDATE_MEM_SLACK);

    if (rc == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d rank costs", ranks);
    }
    for (int r = 0; r < plan->nrounds && status == NSP_OK; ++r) {
        NSP_CHECK_GOTO(nsp_plan_eval_round(cost, plan, r, rc, &round_s, 0, NULL, NULL), status,
                       out_free_rc);
        for (int g = 0; g < ranks; ++g) {
            if (rc[g].mem_bytes > limit) {
                status = nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: rank %d needs %.4g GiB "
                                   "in round %d (%.0f tokens), over mem_bytes = %.4g GiB (no "
                                   "rank may exceed its memory in any round)", g,
                                   rc[g].mem_bytes / 1073741824.0, r, rc[g].tokens,
                                   plan->cluster.mem_bytes / 1073741824.0);
                break;
            }
        }
    }

out_free_rc:
    free(rc);
    return status;
}

nsp_status_t nsp_plan_validate(const nsp_plan_t *plan)
{
    nsp_cost_t   cost;
    group_ref_t *refs;
    int          max_groups = 0;
    nsp_status_t status = NSP_OK;

    if (plan == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_plan_validate: NULL plan");
    }
    if (plan->nseqs < 0 || plan->nrounds < 0 || (plan->nseqs > 0 && plan->seq_lens == NULL) ||
        (plan->nrounds > 0 && plan->rounds == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: %d sequences, %d rounds and "
                         "missing arrays", plan->nseqs, plan->nrounds);
    }
    for (int i = 0; i < plan->nseqs; ++i) {
        if (plan->seq_lens[i] <= 0) {
            return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: sequence %d has length %lld; "
                             "lengths must be positive", i, (long long)plan->seq_lens[i]);
        }
    }
    NSP_CHECK(nsp_cost_init(&cost, &plan->model, &plan->cluster));
    for (int r = 0; r < plan->nrounds; ++r) {
        if (plan->rounds[r].ngroups < 0 ||
            (plan->rounds[r].ngroups > 0 && plan->rounds[r].groups == NULL)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "invalid plan: round %d has %d groups and no "
                             "list", r, plan->rounds[r].ngroups);
        }
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            NSP_CHECK(check_group(&cost, plan, r, g));
        }
        if (plan->rounds[r].ngroups > max_groups) {
            max_groups = plan->rounds[r].ngroups;
        }
    }
    NSP_CHECK(check_placement(plan));
    refs = malloc(sizeof(*refs) * 2 * (size_t)(max_groups > 0 ? max_groups : 1));
    if (refs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot allocate %d group slots", max_groups);
    }
    for (int r = 0; r < plan->nrounds && status == NSP_OK; ++r) {
        status = check_round_shape(plan, r, refs);
    }
    free(refs);
    NSP_CHECK(status);
    return check_memory(&cost, plan);
}
