/*
 * A planner added the way docs/design/extending.md ("A planner") says: this one
 * file and one line of src/planner/planner_table.c (X(dummy), compiled in
 * by dummy_table.c for test_planner_dummy only). It puts sequence i in
 * group i mod G of the tree's top degree d (G = ranks / d aligned groups),
 * all in one round, kept, not pipelined: a plan any validator accepts
 * while memory holds, and one the test can re-derive by hand.
 */
#include "planner/planners.h"
#include "common/log.h"

#include <stdlib.h>

/* A kind no built-in planner has. */
#define DUMMY_KIND 100

static nsp_status_t dummy_plan(const nsp_planner_input_t *in, nsp_plan_t **plan)
{
    const int         d      = nsp_planner_tree_top_degree(in);
    const int         groups = in->cost.cluster.ranks / d;
    nsp_group_desc_t *desc   = malloc(sizeof(*desc) * (size_t)groups);
    int              *seq_group = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    nsp_status_t      status;

    if (desc == NULL || seq_group == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "dummy planner: cannot allocate %d groups",
                           groups);
        goto out_free;
    }
    for (int g = 0; g < groups; ++g) {
        desc[g] = (nsp_group_desc_t){.round = 0, .rank0 = g * d, .size = d, .recompute = 0,
                                     .pipelined = 0, .ring = nsp_planner_ring_of(in, d)};
    }
    for (int i = 0; i < in->nseqs; ++i) {
        seq_group[i] = i % groups;
    }
    status = nsp_plan_build("dummy", &in->cost.model, &in->cost.cluster, in->lens, in->nseqs,
                            desc, groups, seq_group, plan);
out_free:
    free(seq_group);
    free(desc);
    return status;
}

const nsp_planner_entry_t nsp_planner_dummy_entry = {
    .name       = "dummy",
    .kind       = (nsp_planner_kind_t)DUMMY_KIND,
    .caps       = NSP_PLANNER_CAP_DISJOINT_ROUNDS,
    .top_degree = nsp_planner_tree_top_degree,
    .plan       = dummy_plan,
};
