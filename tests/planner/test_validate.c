/* nsp_plan_validate: valid plans pass; each kind of broken plan is caught and named. */
#include "common/log.h"
#include "planner/plan_internal.h"
#include "random_plan.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static nsp_model_t   qwen;
static nsp_cluster_t h100x64;

static int msg_has(const char *words)
{
    if (strstr(nsp_last_error(), words) != NULL) {
        return 1;
    }
    tap_diag("message \"%s\" lacks \"%s\"", nsp_last_error(), words);
    return 0;
}

static void expect_invalid(const nsp_plan_t *plan, const char *words, const char *what)
{
    nsp_status_t st = nsp_plan_validate(plan);

    tap_ok(st == NSP_ERR_INVALID_ARG && msg_has(words), "%s is caught (message names '%s')",
           what, words);
}

static void test_valid_plans(void)
{
    static const char *const kinds[] = {"nested", "static", "disjoint"};
    uint64_t st = 99;

    for (int kind = 0; kind < 3; ++kind) {
        int bad = 0, n = 0;
        for (int it = 0; it < 40; ++it) {
            nsp_plan_t *plan = NULL;
            if (rp_make(&st, (rp_kind_t)kind, &qwen, &h100x64, 50 + it * 10, 393216, &plan) !=
                NSP_OK) {
                ++bad;
                continue;
            }
            if (nsp_plan_validate(plan) != NSP_OK) {
                tap_diag("%s plan %d: %s", kinds[kind], it, nsp_last_error());
                ++bad;
            }
            ++n;
            nsp_plan_free(plan);
        }
        tap_is_int(bad, 0, "%d random valid %s plans pass", n, kinds[kind]);
    }
    {
        nsp_plan_t *empty = NULL;
        tap_ok(nsp_plan_build("nested", &qwen, &h100x64, NULL, 0, NULL, 0, NULL, &empty) ==
               NSP_OK && nsp_plan_validate(empty) == NSP_OK, "an empty plan is valid");
        nsp_plan_free(empty);
    }
    tap_is_int(nsp_plan_validate(NULL), NSP_ERR_INVALID_ARG, "NULL plan");
}

/* A fresh random plan of `kind` with at least two non-empty groups. */
static nsp_plan_t *fresh(rp_kind_t kind, uint64_t seed)
{
    nsp_plan_t *plan = NULL;
    uint64_t    st = seed;

    for (int tries = 0; tries < 20; ++tries) {
        if (rp_make(&st, kind, &qwen, &h100x64, 200, 65536, &plan) == NSP_OK &&
            plan->nrounds >= 1 && plan->rounds[0].ngroups >= 2) {
            return plan;
        }
        nsp_plan_free(plan);
        plan = NULL;
    }
    return NULL;
}

/* First group of round 0 whose size is > 1 (or group 0). */
static nsp_plan_group_t *wide_group(nsp_plan_t *plan)
{
    for (int g = 0; g < plan->rounds[0].ngroups; ++g) {
        if (plan->rounds[0].groups[g].size > 1) {
            return &plan->rounds[0].groups[g];
        }
    }
    return &plan->rounds[0].groups[0];
}

static void test_placement(void)
{
    nsp_plan_t *plan;

    plan = fresh(RP_NESTED, 1);
    plan->rounds[0].groups[1].seqs[0] = plan->rounds[0].groups[0].seqs[0];
    expect_invalid(plan, "exactly once", "a sequence placed twice");
    nsp_plan_free(plan);

    plan = fresh(RP_NESTED, 2);
    plan->rounds[0].groups[0].nseqs--;
    expect_invalid(plan, "is in no group", "a sequence placed nowhere");
    nsp_plan_free(plan);

    plan = fresh(RP_STATIC, 3);
    plan->rounds[0].groups[0].seqs[0] = plan->nseqs;
    expect_invalid(plan, "outside [0,", "a sequence index out of range");
    nsp_plan_free(plan);

    plan = fresh(RP_STATIC, 4);
    plan->seq_lens[0] = 0;
    expect_invalid(plan, "lengths must be positive", "a zero length");
    nsp_plan_free(plan);
}

static void test_groups(void)
{
    nsp_plan_t       *plan;
    nsp_plan_group_t *grp;

    plan = fresh(RP_DISJOINT, 5);
    grp = &plan->rounds[0].groups[0];
    grp->rank0 = h100x64.ranks - grp->size + 1;
    expect_invalid(plan, "not inside [0, 64)", "a group beyond the last rank");
    nsp_plan_free(plan);

    plan = fresh(RP_DISJOINT, 6);
    plan->rounds[0].groups[0].rank0 = -1;
    expect_invalid(plan, "not inside", "a negative rank0");
    nsp_plan_free(plan);

    plan = fresh(RP_NESTED, 7);
    grp = wide_group(plan);
    grp->size = 3;
    grp->rank0 = 0;
    grp->ring = 1;
    expect_invalid(plan, "Ulysses degree 3", "a degree that does not divide q_heads");
    nsp_plan_free(plan);

    plan = fresh(RP_NESTED, 8);
    grp = wide_group(plan);
    grp->ring = 3;
    expect_invalid(plan, "ring degree 3", "a ring degree that does not divide the group");
    nsp_plan_free(plan);

    plan = fresh(RP_NESTED, 9);
    plan->rounds[0].groups[0].recompute = 2;
    expect_invalid(plan, "must be 0 or 1", "a recompute flag of 2");
    nsp_plan_free(plan);

    plan = fresh(RP_NESTED, 10);
    grp = wide_group(plan);
    if (grp->rank0 + grp->size < h100x64.ranks) {
        grp->rank0 += 1;
    } else {
        grp->rank0 -= 1;
    }
    expect_invalid(plan, "not aligned", "a nested group with rank0 % size != 0");
    nsp_plan_free(plan);
}

/* A one-round plan from explicit groups, sequence i in group seq_group[i]. */
static nsp_plan_t *explicit_plan(const char *planner, const nsp_model_t *m,
                                 const nsp_cluster_t *c, const nsp_group_desc_t *groups,
                                 int ngroups, const int64_t *lens, const int *seq_group,
                                 int nseqs)
{
    nsp_plan_t *plan = NULL;

    if (nsp_plan_build(planner, m, c, lens, nseqs, groups, ngroups, seq_group, &plan) !=
        NSP_OK) {
        tap_diag("nsp_plan_build: %s", nsp_last_error());
        return NULL;
    }
    return plan;
}

static void test_shapes(void)
{
    static const int64_t lens[] = {1000, 2000, 3000};
    static const int     two[] = {0, 1, 1};
    nsp_model_t          m12;
    nsp_cluster_t        c12;
    nsp_plan_t          *plan;

    /* Degrees 4 and 6 (both divide 12 query heads and are multiples of 2 KV
     * heads) align but cross: [0, 6) and [4, 8). */
    nsp_model_preset("llama3-8b", &m12);
    m12.q_heads = 12;
    m12.kv_heads = 2;
    nsp_cluster_preset("h100", 64, &c12);
    c12.ranks = 12;
    c12.ranks_per_node = 4;
    {
        const nsp_group_desc_t g[] = {{0, 0, 6, 0, 1, 1}, {0, 4, 4, 0, 1, 1}};
        plan = explicit_plan("nested", &m12, &c12, g, 2, lens, two, 3);
        expect_invalid(plan, "overlap without nesting", "crossing nested groups");
        nsp_plan_free(plan);
    }
    {
        /* With 4 KV heads, Ulysses degree 6 (alone, or 12 = 6 x ring 2) still
         * divides 12 query heads but cannot shard the KV heads: 6 is neither a
         * divisor nor a multiple of 4, so no rank could run the group. */
        const nsp_group_desc_t g6[] = {{0, 0, 6, 0, 1, 1}, {0, 6, 6, 0, 1, 1}};
        const nsp_group_desc_t g12[] = {{0, 0, 12, 0, 1, 2}, {0, 0, 4, 0, 1, 1}};
        nsp_model_t            m12kv4 = m12;
        m12kv4.kv_heads = 4;
        plan = explicit_plan("static", &m12kv4, &c12, g6, 2, lens, two, 3);
        expect_invalid(plan, "kv_heads=4", "a Ulysses degree that cannot shard the KV heads");
        nsp_plan_free(plan);
        plan = explicit_plan("nested", &m12kv4, &c12, g12, 2, lens, two, 3);
        expect_invalid(plan, "kv_heads=4", "a ring group whose Ulysses degree cannot shard "
                       "the KV heads");
        nsp_plan_free(plan);
    }
    {
        const nsp_group_desc_t g[] = {{0, 0, 8, 0, 1, 1}, {0, 0, 8, 1, 1, 1}};
        plan = explicit_plan("nested", &qwen, &h100x64, g, 2, lens, two, 3);
        expect_invalid(plan, "same tree node", "one tree node twice in a round");
        nsp_plan_free(plan);
    }
    {
        const nsp_group_desc_t g[] = {{0, 0, 8, 0, 1, 1}, {0, 4, 4, 0, 1, 1}};
        plan = explicit_plan("nested", &qwen, &h100x64, g, 2, lens, two, 3);
        tap_is_int(nsp_plan_validate(plan), NSP_OK, "nested groups [0, 8) and [4, 8) are valid");
        nsp_plan_free(plan);
        plan = explicit_plan("static", &qwen, &h100x64, g, 2, lens, two, 3);
        expect_invalid(plan, "must be disjoint", "overlapping groups in a static plan");
        nsp_plan_free(plan);
        plan = explicit_plan("disjoint", &qwen, &h100x64, g, 2, lens, two, 3);
        expect_invalid(plan, "must be disjoint", "nested groups in a disjoint plan");
        nsp_plan_free(plan);
    }
    {
        /* Disjoint plans need not be aligned: [0, 2) and [2, 6). */
        const nsp_group_desc_t g[] = {{0, 0, 2, 0, 1, 1}, {0, 2, 4, 0, 1, 1}};
        plan = explicit_plan("disjoint", &qwen, &h100x64, g, 2, lens, two, 3);
        tap_is_int(nsp_plan_validate(plan), NSP_OK, "an unaligned disjoint plan is valid");
        nsp_plan_free(plan);
    }
    {
        /* The same groups in two rounds are fine. */
        const nsp_group_desc_t g[] = {{0, 0, 8, 0, 1, 1}, {1, 0, 8, 0, 1, 1}};
        plan = explicit_plan("static", &qwen, &h100x64, g, 2, lens, two, 3);
        tap_is_int(nsp_plan_validate(plan), NSP_OK, "the same group in two rounds is valid");
        nsp_plan_free(plan);
    }
}

static void test_memory(void)
{
    static const int64_t lens[] = {400000};
    static const int     zero[] = {0};
    nsp_plan_t          *plan;
    const nsp_group_desc_t kept[] = {{0, 0, 1, 0, 1, 1}};
    const nsp_group_desc_t spread[] = {{0, 0, 32, 1, 1, 1}};

    plan = explicit_plan("nested", &qwen, &h100x64, kept, 1, lens, zero, 1);
    expect_invalid(plan, "over mem_bytes", "400K tokens kept on one rank");
    tap_ok(msg_has("rank 0") && msg_has("round 0"), "the message names the rank and round");
    nsp_plan_free(plan);
    plan = explicit_plan("nested", &qwen, &h100x64, spread, 1, lens, zero, 1);
    tap_is_int(nsp_plan_validate(plan), NSP_OK, "400K tokens over 32 ranks with recompute fit");
    nsp_plan_free(plan);
    plan = explicit_plan("nested", &qwen, &h100x64, spread, 1, lens, zero, 1);
    plan->model.q_heads = 0;
    tap_is_int(nsp_plan_validate(plan), NSP_ERR_INVALID_ARG, "a model with 0 heads");
    tap_ok(msg_has("q_heads"), "the message names the field");
    nsp_plan_free(plan);
}

int main(void)
{
    nsp_model_preset("qwen3-30b-a3b", &qwen);
    nsp_cluster_preset("h100", 64, &h100x64);
    test_valid_plans();
    test_placement();
    test_groups();
    test_shapes();
    test_memory();
    return tap_done();
}
