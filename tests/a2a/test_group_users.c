/*
 * The two users of a group take the same decision (4 forked ranks over
 * UCX): a plan whose degree-2 groups are a ring group in one round and a
 * Ulysses group in the other, run by nested attention (ring attention for
 * the ring group, the nested all-to-all for the Ulysses one). On a tree
 * {1, 4}, which lacks degree 2, both rounds must run on one and the same
 * group of the tree, carried by the world; on a tree {1, 2, 4} on the
 * tree's level-1 group. The group's counters say who used it: ring steps in
 * the ring round, all-to-alls in the Ulysses round, and nothing else.
 */
#include "../mp.h"
#include "../tap.h"
#include "../nested_attn/nattn_test.h"
#include "nested_groups/group.h"
#include "transport/comm.h"

#include <stdlib.h>
#include <string.h>

#define NQ 4
#define NKV 2
#define HD 16

typedef struct users_case {
    nsp_unique_id_t id;
    nsp_plan_t     *plan;    /* 2 rounds; built in the parent */
    int             sparse;  /* tree {1, 4} instead of the topology's */
} users_case_t;

/* One forward of round r on this rank's layout (inputs of no importance:
 * the numbers are checked by test_nested_attn_mp). 0 or -1 with a note. */
static int run_round(nsp_tree_t *tree, const users_case_t *c, int rank, int r)
{
    nsp_layout_t            *lay = NULL;
    nsp_layout_info_t        info;
    nsp_nested_attn_t       *attn = NULL;
    nsp_nested_attn_params_t ap;
    float                   *q = NULL, *kv = NULL, *o = NULL, *lse = NULL;
    size_t                   T;
    int                      rc = -1;

    memset(&ap, 0, sizeof(ap));
    ap.attn = (nsp_attn_params_t)NSP_ATTN_PARAMS_INIT(NQ, NKV, HD);
    if (nsp_layout_create(c->plan, r, rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK) {
        mp_note("round %d layout: %s", r, nsp_last_error());
        goto out;
    }
    T   = (size_t)info.local_tokens + 1;
    q   = calloc(T * NQ * HD, sizeof(float)), o = calloc(T * NQ * HD, sizeof(float));
    kv  = calloc(2 * T * NKV * HD, sizeof(float)), lse = calloc(T * NQ, sizeof(float));
    if (q == NULL || o == NULL || kv == NULL || lse == NULL ||
        nsp_nested_attn_create(tree, lay, &ap, &attn) != NSP_OK ||
        nsp_nested_attn_fwd(attn, q, kv, kv + T * NKV * HD, o, lse, NULL, NULL) != NSP_OK) {
        mp_note("round %d forward: %s", r, nsp_last_error());
        goto out;
    }
    rc = 0;
out:
    nsp_nested_attn_destroy(attn);
    nsp_layout_free(lay);
    free(q), free(kv), free(o), free(lse);
    return rc;
}

static int rank_users(int rank, int nranks, void *arg)
{
    const users_case_t *c = arg;
    nsp_comm_t         *comm = NULL;
    nsp_tree_t         *tree = NULL;
    nsp_group_t        *g[2] = {NULL, NULL};
    nsp_group_stats_t   s[3];
    int                 rc = 1, ring_round = rank < 2 ? 0 : 1, want_level = c->sparse ? -1 : 1;

    if (mp_comm_tree(&c->id, rank, nranks, 30.0, c->sparse, &comm, &tree) != 0) {
        return 2;
    }
    for (int r = 0; r < 2; ++r) {
        if (nsp_tree_group_get(tree, rank / 2 * 2, 2, &g[r]) != NSP_OK) {
            mp_note("group lookup: %s", nsp_last_error());
            goto out;
        }
        s[r] = g[r]->stats;
        if (run_round(tree, c, rank, r) != 0) {
            goto out;
        }
    }
    s[2] = g[1]->stats;
    /* ring round: ring steps and no all-to-all; Ulysses round: the reverse */
    uint64_t ring_steps = s[ring_round + 1].ring_posts - s[ring_round].ring_posts;
    uint64_t ring_a2as  = s[ring_round + 1].alltoallv_posts - s[ring_round].alltoallv_posts;
    uint64_t uly_a2as   = s[2 - ring_round].alltoallv_posts - s[1 - ring_round].alltoallv_posts;
    uint64_t uly_steps  = s[2 - ring_round].ring_posts - s[1 - ring_round].ring_posts;
    if (g[0] != g[1] || g[0]->level != want_level ||
        (want_level < 0 && g[0]->tp != nsp_comm_tp(comm)) || ring_steps == 0 ||
        ring_a2as != 0 || uly_a2as == 0 || uly_steps != 0) {
        mp_note("group [%d, +2): %s pointer, level %d (want %d); ring round %llu steps %llu "
                "all-to-alls, Ulysses round %llu all-to-alls %llu steps",
                rank / 2 * 2, g[0] == g[1] ? "one" : "two", g[0]->level, want_level,
                (unsigned long long)ring_steps, (unsigned long long)ring_a2as,
                (unsigned long long)uly_a2as, (unsigned long long)uly_steps);
        goto out;
    }
    mp_set_value(0, (double)ring_steps);
    mp_set_value(1, (double)uly_a2as);
    rc = 0;
out:
    mp_comm_tree_free(comm, tree);
    return rc;
}

/* Round 0: ranks 0-1 a ring group (r 2), ranks 2-3 a Ulysses group; round
 * 1 the other way round. One sequence per group. */
static nsp_plan_t *users_plan(void)
{
    static const nt_group_t groups[] = {{0, 0, 2, 2}, {0, 2, 2, 1}, {1, 0, 2, 1}, {1, 2, 2, 2}};
    static const int64_t    lens[]   = {44, 40, 40, 44};
    static const int        sg[]     = {0, 1, 2, 3};
    nsp_model_t             model;
    nsp_cluster_t           cluster;

    nt_model(NQ, NKV, HD, &model);
    nt_cluster(4, &cluster);
    return nt_plan(&model, &cluster, lens, 4, groups, 4, sg);
}

static void test_users(nsp_plan_t *plan, int sparse)
{
    users_case_t c = {.plan = plan, .sparse = sparse};
    mp_result_t  res;
    double       steps = 0, a2as = 0;

    fflush(stdout);
    mp_run_uid(4, 55.0, rank_users, &c, &c.id, &res);
    for (int r = 0; r < 4; ++r) {
        steps += res.rank[r].value[0], a2as += res.rank[r].value[1];
    }
    tap_ok(mp_all_ok(&res),
           "4 ranks, tree %s: ring attention and the nested all-to-all ran on one group of "
           "degree 2 per rank, %s (%.0f ring steps, %.0f all-to-alls)",
           sparse ? "{1, 4}" : "{1, 2, 4}",
           sparse ? "carried by the world" : "the tree's level 1", steps, a2as);
}

int main(void)
{
    nsp_plan_t *plan;

    setenv("UCX_LOG_FILE", "stderr", 0);
    plan = users_plan();
    if (plan == NULL) {
        tap_ok(0, "plan: %s", nsp_last_error());
        return tap_done();
    }
    test_users(plan, 1);
    test_users(plan, 0);
    nsp_plan_free(plan);
    return tap_done();
}
