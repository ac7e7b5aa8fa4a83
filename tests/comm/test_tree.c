/*
 * The nested tree over real processes: several degree sets (full tree,
 * forest, non-powers of two, the default from the placement), every query
 * against the pure index math, a variable all-to-all on every level driven
 * in the agreed order (one level at a time, then all levels in flight), and
 * the errors: bad degrees, ranks passing different degrees, destroying a
 * world that still has a tree.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "nested_groups/tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TIMEOUT_S 50.0
#define MAX_DEG 8

typedef struct tree_case {
    nsp_unique_id_t id;
    int             nlevels;            /* 0: NULL degrees (the default) */
    int             degrees[MAX_DEG];
    int             want_default[MAX_DEG]; /* with nlevels 0: the degrees expected */
    int             want_default_n;
    int             nodes;              /* > 1: fake this many nodes with NSPCOMM_HOST_ID */
} tree_case_t;

/* Check every query of level l against the math. */
static int check_queries(const nsp_tree_t *tree, nsp_comm_t *world, int rank, int l, int degree)
{
    int            d = -1, r0 = -1, idx = -1, lvl = -1;
    int            ranks[64];
    nsp_comm_t    *w  = NULL;
    nsp_tp_comm_t *tp = NULL;

    nsp_tree_degree(tree, l, &d);
    nsp_tree_group(tree, l, &r0, &idx);
    nsp_tree_level_of_degree(tree, degree, &lvl);
    nsp_tree_world(tree, &w);
    nsp_tree_level_tp(tree, l, &tp);
    if (d != degree || r0 != (rank / degree) * degree || idx != rank % degree || lvl != l ||
        w != world || tp == NULL || tp->size != degree || tp->rank != idx ||
        tp->world_rank0 != r0) {
        mp_note("level %d: degree %d group [%d) index %d level_of_degree %d tp %d/%d@%d", l, d,
                r0, idx, lvl, tp != NULL ? tp->rank : -1, tp != NULL ? tp->size : -1,
                tp != NULL ? tp->world_rank0 : -1);
        return 1;
    }
    if (nsp_tree_group_ranks(tree, l, ranks) != NSP_OK) {
        return 1;
    }
    for (int i = 0; i < degree; ++i) {
        if (ranks[i] != r0 + i) {
            mp_note("level %d: group rank %d is %d", l, i, ranks[i]);
            return 1;
        }
    }
    {   /* by (degree, first rank): this level's communicator; another start: none */
        nsp_tp_comm_t *own = NULL, *other = tp;
        nsp_tree_group_tp(tree, degree, r0, &own);
        nsp_tree_group_tp(tree, degree, r0 + 1, &other);
        if (own != tp || other != NULL) {
            mp_note("level %d: group_tp(%d, %d) %s, group_tp(%d, %d) %s", l, degree, r0,
                    own == tp ? "is the level's" : "is not the level's", degree, r0 + 1,
                    other == NULL ? "NULL" : "not NULL");
            return 1;
        }
    }
    return 0;
}

/* One level's exchange: counts and bytes are functions of world ranks. */
typedef struct level_xchg {
    size_t            *arrays; /* [4][d] */
    unsigned char     *send, *recv;
    nsp_tp_alltoallv_t args;
    nsp_request_t     *req;
} level_xchg_t;

static int xchg_post(level_xchg_t *x, nsp_tp_comm_t *tp, int iter)
{
    int    d = tp->size, me = tp->world_rank0 + tp->rank;
    size_t soff = 0, roff = 0;

    x->arrays = calloc(4 * (size_t)d, sizeof(size_t));
    for (int j = 0; j < d; ++j) {
        int peer              = tp->world_rank0 + j;
        x->arrays[j]          = cu_count(iter, me, peer, 3000);
        x->arrays[d + j]      = soff;
        soff += x->arrays[j];
        x->arrays[2 * d + j]  = cu_count(iter, peer, me, 3000);
        x->arrays[3 * d + j]  = roff;
        roff += x->arrays[2 * d + j];
    }
    x->send = malloc(soff + 1);
    x->recv = malloc(roff + 1);
    for (int j = 0; j < d; ++j) {
        cu_fill(x->send + x->arrays[d + j], x->arrays[j], iter, me, tp->world_rank0 + j);
    }
    x->args = (nsp_tp_alltoallv_t){x->send, x->arrays, x->arrays + d, x->recv,
                                   x->arrays + 2 * d, x->arrays + 3 * d};
    x->req  = NULL;
    return tp->ops->alltoallv_post(tp, &x->args, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter), NULL,
                                   &x->req);
}

static int xchg_finish(level_xchg_t *x, nsp_tp_comm_t *tp, int iter)
{
    int          d  = tp->size, me = tp->world_rank0 + tp->rank, rc = 0;
    nsp_status_t st = nsp_request_wait(x->req);

    if (st != NSP_OK) {
        rc = cu_fail("level alltoallv", st);
    }
    for (int j = 0; j < d && rc == 0; ++j) {
        if (cu_check(x->recv + x->arrays[3 * d + j], x->arrays[2 * d + j], iter,
                     tp->world_rank0 + j, me) >= 0) {
            mp_note("level of degree %d, iteration %d: wrong bytes from world rank %d", d, iter,
                    tp->world_rank0 + j);
            rc = 2;
        }
    }
    nsp_request_free(x->req);
    free(x->arrays);
    free(x->send);
    free(x->recv);
    return rc;
}

static int rank_tree(int rank, int nranks, void *arg)
{
    const tree_case_t *c    = arg;
    nsp_config_t       cfg  = cu_config(20.0);
    nsp_comm_t        *comm = NULL;
    nsp_tree_t        *tree = NULL;
    nsp_status_t       st;
    int                nlevels = 0, rc = 0;
    int                degrees[NSP_TREE_MAX_LEVELS];

    if (c->nodes > 1) {
        char host[32];
        snprintf(host, sizeof(host), "fake-node-%d", rank / (nranks / c->nodes));
        setenv("NSPCOMM_HOST_ID", host, 1);
    }
    st = nsp_comm_init_rank(&comm, nranks, c->id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    st = nsp_tree_create(comm, c->nlevels > 0 ? c->degrees : NULL, c->nlevels, &tree);
    if (st != NSP_OK) {
        rc = cu_fail("nsp_tree_create", st);
        goto out;
    }
    nsp_tree_nlevels(tree, &nlevels);
    for (int l = 0; l < nlevels; ++l) {
        nsp_tree_degree(tree, l, &degrees[l]);
    }
    if (c->nlevels > 0) {
        if (nlevels != c->nlevels || memcmp(degrees, c->degrees, sizeof(int) * (size_t)nlevels)) {
            mp_note("tree has %d levels, want %d", nlevels, c->nlevels);
            rc = 3;
            goto out;
        }
    } else if (nlevels != c->want_default_n ||
               memcmp(degrees, c->want_default, sizeof(int) * (size_t)nlevels) != 0) {
        mp_note("default tree: %d levels, top degree %d; want %d levels, top %d", nlevels,
                degrees[nlevels - 1], c->want_default_n, c->want_default[c->want_default_n - 1]);
        rc = 4;
        goto out;
    }
    if (nsp_comm_destroy(comm) != NSP_ERR_INVALID_ARG) {
        mp_note("nsp_comm_destroy with a live tree did not refuse");
        rc = 5;
        goto out;
    }
    for (int l = 0; l < nlevels && rc == 0; ++l) {
        rc = check_queries(tree, comm, rank, l, degrees[l]);
    }
    /* Level by level, ascending: the agreed order. */
    for (int l = 0; l < nlevels && rc == 0; ++l) {
        nsp_tp_comm_t *tp;
        level_xchg_t   x;
        nsp_tree_level_tp(tree, l, &tp);
        st = xchg_post(&x, tp, 10 + l);
        rc = st != NSP_OK ? cu_fail("post", st) : xchg_finish(&x, tp, 10 + l);
    }
    /* All levels in flight at once (posted ascending), completed descending. */
    if (rc == 0) {
        level_xchg_t   xs[NSP_TREE_MAX_LEVELS];
        nsp_tp_comm_t *tps[NSP_TREE_MAX_LEVELS];
        int            posted = 0;
        for (int l = 0; l < nlevels && rc == 0; ++l, ++posted) {
            nsp_tree_level_tp(tree, l, &tps[l]);
            st = xchg_post(&xs[l], tps[l], 50 + l);
            if (st != NSP_OK) {
                rc = cu_fail("post in flight", st);
            }
        }
        for (int l = posted - 1; l >= 0; --l) {
            int r = xchg_finish(&xs[l], tps[l], 50 + l);
            rc    = rc != 0 ? rc : r;
        }
    }
out:
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    return rc;
}

static void run_tree(int nranks, tree_case_t *c, const char *what)
{
    mp_result_t res;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_tree, c, &c->id, &res);
    tap_ok(mp_all_ok(&res), "%d ranks, %s: queries match the math; per-level alltoallv in "
                            "order and all in flight (%.2f s)",
           nranks, what, res.elapsed_s);
}

static void test_degree_sets(void)
{
    static const struct {
        int nranks, nlevels, degrees[MAX_DEG];
        const char *what;
    } cases[] = {
        {8, 4, {1, 2, 4, 8}, "degrees 1,2,4,8"},
        {8, 2, {1, 2}, "degrees 1,2 (forest of 4 trees)"},
        {8, 2, {1, 4}, "degrees 1,4"},
        {8, 3, {1, 2, 8}, "degrees 1,2,8"},
        {8, 1, {1}, "degree 1 only"},
        {6, 3, {1, 3, 6}, "degrees 1,3,6"},
        {6, 2, {1, 2}, "degrees 1,2 on 6"},
        {2, 2, {1, 2}, "degrees 1,2"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        tree_case_t c = {.nlevels = cases[i].nlevels};
        memcpy(c.degrees, cases[i].degrees, sizeof(c.degrees));
        run_tree(cases[i].nranks, &c, cases[i].what);
    }
}

static void test_defaults(void)
{
    tree_case_t one_node = {.nlevels = 0, .want_default = {1, 2, 4, 8}, .want_default_n = 4};
    tree_case_t two_nodes = {.nlevels = 0, .want_default = {1, 3, 6}, .want_default_n = 3,
                             .nodes = 2};
    tree_case_t four_nodes = {.nlevels = 0, .want_default = {1, 2, 4, 8}, .want_default_n = 4,
                              .nodes = 4};

    run_tree(8, &one_node, "default degrees on one host (want 1,2,4,8)");
    run_tree(6, &two_nodes, "default degrees on 2 fake nodes of 3 (want 1,3,6)");
    run_tree(8, &four_nodes, "default degrees on 4 fake nodes of 2 (want 1,2,4,8)");
}

/* Errors: bad degrees everywhere, then rank 1 alone passes other degrees. */
static int rank_errors(int rank, int nranks, void *arg)
{
    const nsp_unique_id_t *id   = arg;
    nsp_config_t           cfg  = cu_config(10.0);
    nsp_comm_t            *comm = NULL;
    nsp_tree_t            *tree = NULL;
    static const int       no_one[] = {2, 4}, three[] = {1, 3}, down[] = {1, 4, 2};
    static const int       a[] = {1, 2, 4}, b[] = {1, 4};
    nsp_status_t           st;
    int                    rc = 0;

    st = nsp_comm_init_rank(&comm, nranks, *id, rank, &cfg);
    if (st != NSP_OK) {
        return cu_fail("init", st);
    }
    if (nsp_tree_create(comm, no_one, 2, &tree) != NSP_ERR_INVALID_ARG ||
        nsp_tree_create(comm, three, 2, &tree) != NSP_ERR_INVALID_ARG ||
        nsp_tree_create(comm, down, 3, &tree) != NSP_ERR_INVALID_ARG ||
        nsp_tree_create(NULL, a, 3, &tree) != NSP_ERR_INVALID_ARG || tree != NULL) {
        mp_note("bad degrees were not refused with INVALID_ARG");
        rc = 2;
    }
    /* Every rank reaches the same collective with different degrees. */
    st = nsp_tree_create(comm, rank == 1 ? b : a, rank == 1 ? 2 : 3, &tree);
    if (rc == 0 && (st != NSP_ERR_MISMATCH || tree != NULL)) {
        rc = cu_fail("different degrees on rank 1: expected MISMATCH", st);
    }
    /* The world is still usable after a refused tree. */
    st = nsp_tree_create(comm, a, 3, &tree);
    if (rc == 0 && st != NSP_OK) {
        rc = cu_fail("tree after the refusals", st);
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    return rc;
}

static void test_errors(void)
{
    nsp_unique_id_t id;
    mp_result_t     res;

    mp_run_uid(4, RUN_TIMEOUT_S, rank_errors, &id, &id, &res);
    tap_ok(mp_all_ok(&res), "bad degrees refused (INVALID_ARG); ranks passing different "
                            "degrees all get MISMATCH; the world stays usable");
}

int main(void)
{
    setenv("UCX_LOG_FILE", "stderr", 0);
    test_degree_sets();
    test_defaults();
    test_errors();
    return tap_done();
}
