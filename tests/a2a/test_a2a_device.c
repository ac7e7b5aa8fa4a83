/*
 * The device engine of the nested all-to-all (src/attn_sp/nested_a2a_device.c),
 * the CUDA memory type's engine, on a CPU: 2 and 4 real processes over UCX,
 * each driving the engine through the test device of sync_device.h (work at
 * once, every call counted) with the host pack ops (the CUDA kernels' unit
 * maps on the CPU), against the single-process reference (a2a_ref.h):
 *
 *   derived once  a persistent handle started three times: its levels are
 *                 derived at create only (nsp_a2a_stats), a start makes no
 *                 stream, event, pool or device table (the device's
 *                 counts), and every start gives its scratch back
 *   data          s2h level blocks equal the reference as each level
 *                 completes, h2s gives back the input, h2s with SUM_F32 sums
 *                 the replicas: random nested plans (tree of every degree,
 *                 and tree {1, N}: missing levels pairwise) and random
 *                 disjoint plans with unaligned groups, pipelined and serial
 *   gated         no level completes before it is opened; opened in
 *                 ascending order each completes with the right block
 *   errors        a start or destroy while requests are held, an open on an
 *                 ungated handle, mapped = 1, a start after the current
 *                 device moved
 */
#include "nspcomm.h"

#include "attn_sp/nested_a2a_common.h"
#include "a2a_mp.h"
#include "a2a_ref.h"
#include "sync_device.h"
#include "../mp.h"
#include "../tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CASE_NESTED = 0, CASE_SPARSE_TREE = 1, CASE_DISJOINT = 2 };

#define STARTS 3

typedef a2a_tensor_t tensor_t;

static void params(nsp_a2a_params_t *p, const tensor_t *t, nsp_a2a_dir_t dir, int serial,
                   nsp_a2a_replicas_t replicas)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_REPLICAS;
    p->direction  = dir;
    p->heads      = t->heads;
    p->head_dim   = t->head_dim;
    p->elem_size  = t->elem;
    p->serial     = serial;
    p->replicas   = replicas;
}

static nsp_status_t create(rank_ctx_t *c, const nsp_layout_t *lay, const nsp_a2a_params_t *p,
                           int gated, nsp_a2a_t **h)
{
    return nsp_a2a_handle_create(c->tree, lay, p, sync_device_memtype(), gated, h);
}

static void free_all(nsp_request_t **req, int n)
{
    for (int l = 0; l < n; ++l) {
        nsp_request_free(req[l]);
        req[l] = NULL;
    }
}

/* Start h from src to dst and wait for every level (checking each s2h
 * block against the reference as it completes when `t` is given). */
static int run_start(rank_ctx_t *c, nsp_a2a_t *h, const nsp_layout_t *lay, int nlevels,
                     const void *src, void *dst, const tensor_t *t)
{
    nsp_request_t *req[64] = {NULL};
    int            rc = 1;

    if (nsp_a2a_start(h, src, dst, NULL, req) != NSP_OK) {
        FAIL("start: %s", nsp_last_error());
    }
    for (int l = 0; l < nlevels; ++l) {
        nsp_layout_heads_t hs;
        if (nsp_request_wait(req[l]) != NSP_OK) {
            FAIL("level %d: %s", l, nsp_last_error());
        }
        if (t == NULL) {
            continue;
        }
        nsp_layout_heads(lay, l, t->heads, &hs);
        if (memcmp((char *)t->head + (size_t)hs.row_offset * t->row,
                   (char *)t->ref + (size_t)hs.row_offset * t->row, (size_t)hs.rows * t->row)) {
            FAIL("level %d (H=%d, D=%d, elem %zu, replicas %d): head-sharded block differs "
                 "from the reference", l, t->heads, t->head_dim, t->elem, hs.replicas);
        }
        c->checks++;
    }
    rc = 0;
out:
    free_all(req, nlevels);
    return rc;
}

/* Nothing but the buffers may change in a start: the levels stay derived,
 * no stream, event, pool or table is made, the scratch comes back. */
static int check_derived_once(const nsp_a2a_t *h, const nsp_a2a_stats_t *s0,
                              const sync_device_counts_t *c0, int starts)
{
    nsp_a2a_stats_t      s;
    sync_device_counts_t c;

    nsp_a2a_stats(h, &s);
    sync_device_counts(&c);
    if (s.levels_derived != s0->levels_derived || s.starts != s0->starts + (uint64_t)starts) {
        mp_note("after %d starts: %llu levels derived (%llu at create), %llu starts", starts,
                (unsigned long long)s.levels_derived, (unsigned long long)s0->levels_derived,
                (unsigned long long)s.starts);
        return 1;
    }
    if (c.streams_created != c0->streams_created || c.events_created != c0->events_created ||
        c.pools_created != c0->pools_created || c.tables_created != c0->tables_created ||
        c.allocs_live != 0) {
        mp_note("after %d starts: streams %llu -> %llu, events %llu -> %llu, pools %llu -> "
                "%llu, tables %llu -> %llu, scratch held %lld", starts,
                (unsigned long long)c0->streams_created, (unsigned long long)c.streams_created,
                (unsigned long long)c0->events_created, (unsigned long long)c.events_created,
                (unsigned long long)c0->pools_created, (unsigned long long)c.pools_created,
                (unsigned long long)c0->tables_created, (unsigned long long)c.tables_created,
                (long long)c.allocs_live);
        return 1;
    }
    return 0;
}

/* A persistent s2h handle and an h2s one, each started STARTS times. */
static int persistent(rank_ctx_t *c, const nsp_layout_t *lay, int nlevels, tensor_t *t,
                      int serial)
{
    nsp_a2a_params_t     p;
    nsp_a2a_t           *h[2] = {NULL, NULL};
    nsp_a2a_stats_t      s0[2];
    sync_device_counts_t c0;
    int                  rc = 1;

    for (int k = 0; k < 2; ++k) {
        params(&p, t, k == 0 ? NSP_A2A_SEQ_TO_HEAD : NSP_A2A_HEAD_TO_SEQ, serial, 0);
        if (create(c, lay, &p, 0, &h[k]) != NSP_OK) {
            FAIL("create %s: %s", k == 0 ? "s2h" : "h2s", nsp_last_error());
        }
        nsp_a2a_stats(h[k], &s0[k]);
    }
    sync_device_counts(&c0);
    for (int i = 0; i < STARTS; ++i) {
        memset(t->head, 0xab, (size_t)t->rows * t->row);
        memset(t->back, 0xcd, (size_t)t->T * (size_t)t->heads * t->row);
        if (run_start(c, h[0], lay, nlevels, t->seq, t->head, t) ||
            run_start(c, h[1], lay, nlevels, t->head, t->back, NULL)) {
            goto out;
        }
        if (memcmp(t->back, t->seq, (size_t)t->T * (size_t)t->heads * t->row) != 0) {
            FAIL("start %d: head-to-sequence (H=%d) did not give back the input", i, t->heads);
        }
        c->checks++;
    }
    if (check_derived_once(h[0], &s0[0], &c0, STARTS) ||
        check_derived_once(h[1], &s0[1], &c0, STARTS)) {
        goto out;
    }
    c->checks++;
    rc = 0;
out:
    nsp_a2a_destroy(h[0]);
    nsp_a2a_destroy(h[1]);
    return rc;
}

/* float32 KV heads: s2h, then h2s with SUM_F32 sums the replicas. */
static int replica_sum(rank_ctx_t *c, const nsp_plan_t *plan, int round,
                       const nsp_layout_t *lay, int nlevels, int heads, int D, int serial)
{
    tensor_t         t;
    nsp_a2a_params_t p;
    nsp_a2a_t       *h[2] = {NULL, NULL};
    int              rc = 1;

    if (a2a_tensor_init(&t, plan, round, c->rank, heads, D, 4, 1) != 0) {
        FAIL("no memory");
    }
    params(&p, &t, NSP_A2A_SEQ_TO_HEAD, serial, 0);
    if (create(c, lay, &p, 0, &h[0]) != NSP_OK ||
        run_start(c, h[0], lay, nlevels, t.seq, t.head, &t) != 0) {
        FAIL("f32 s2h: %s", nsp_last_error());
    }
    free(t.seq); /* compare h2s against the summed reference now */
    t.seq = NULL;
    params(&p, &t, NSP_A2A_HEAD_TO_SEQ, serial, NSP_A2A_REPLICAS_SUM_F32);
    if (a2a_ref_seq_sharded_summed(plan, round, c->rank, heads, D, A2A_NUM_F32, &t.seq,
                                   &t.T) != 0 ||
        create(c, lay, &p, 0, &h[1]) != NSP_OK ||
        run_start(c, h[1], lay, nlevels, t.head, t.back, NULL) != 0) {
        FAIL("f32 h2s sum: %s", nsp_last_error());
    }
    if (memcmp(t.back, t.seq, (size_t)t.T * (size_t)heads * (size_t)D * 4) != 0) {
        FAIL("h2s SUM_F32 (H=%d) is not the sum over replicas", heads);
    }
    c->checks++;
    rc = 0;
out:
    nsp_a2a_destroy(h[0]);
    nsp_a2a_destroy(h[1]);
    a2a_tensor_free(&t);
    return rc;
}

/* A gated s2h start: nothing completes before its open; opened ascending,
 * each level completes with the reference's block. */
static int gated(rank_ctx_t *c, const nsp_layout_t *lay, int nlevels, tensor_t *t, int serial)
{
    nsp_a2a_params_t p;
    nsp_a2a_t       *h = NULL;
    nsp_request_t   *req[64] = {NULL};
    int              rc = 1;

    params(&p, t, NSP_A2A_SEQ_TO_HEAD, serial, 0);
    memset(t->head, 0xab, (size_t)t->rows * t->row);
    if (create(c, lay, &p, 1, &h) != NSP_OK || nsp_a2a_start(h, t->seq, t->head, NULL, req)) {
        FAIL("gated create / start: %s", nsp_last_error());
    }
    for (int i = 0; i < 20; ++i) {
        for (int l = 0; l < nlevels; ++l) {
            if (nsp_request_test(req[l]) != NSP_INPROGRESS) {
                FAIL("gated level %d completed before it was opened", l);
            }
        }
    }
    for (int l = 0; l < nlevels; ++l) {
        nsp_layout_heads_t hs;
        if (nsp_a2a_open(h, l) != NSP_OK || nsp_a2a_open(h, l) != NSP_OK ||
            nsp_request_wait(req[l]) != NSP_OK) {
            FAIL("gated level %d: %s", l, nsp_last_error());
        }
        nsp_layout_heads(lay, l, t->heads, &hs);
        if (memcmp((char *)t->head + (size_t)hs.row_offset * t->row,
                   (char *)t->ref + (size_t)hs.row_offset * t->row, (size_t)hs.rows * t->row)) {
            FAIL("gated level %d: block differs from the reference", l);
        }
        c->checks++;
    }
    rc = 0;
out:
    free_all(req, nlevels);
    nsp_a2a_destroy(h);
    return rc;
}

/* What a handle refuses (every rank alike, so no collective is left half
 * done): start and destroy while its requests are held, open when not
 * gated, mapped = 1, a start after the current device moved. */
static int refusals(rank_ctx_t *c, const nsp_layout_t *lay, int nlevels, tensor_t *t)
{
    nsp_a2a_params_t p;
    nsp_a2a_t       *h = NULL, *m = NULL;
    nsp_request_t   *req[64] = {NULL}, *req2[64] = {NULL};
    int              rc = 1;

    params(&p, t, NSP_A2A_SEQ_TO_HEAD, 0, 0);
    if (create(c, lay, &p, 0, &h) != NSP_OK || nsp_a2a_start(h, t->seq, t->head, NULL, req)) {
        FAIL("create / start: %s", nsp_last_error());
    }
    if (nsp_a2a_start(h, t->seq, t->head, NULL, req2) != NSP_ERR_INVALID_ARG ||
        nsp_a2a_destroy(h) != NSP_ERR_INVALID_ARG || nsp_a2a_open(h, 0) != NSP_ERR_INVALID_ARG) {
        FAIL("a start / destroy while held, or an open of an ungated handle, was taken");
    }
    if (nsp_request_wait_all(req, nlevels) != NSP_OK) {
        FAIL("the held start: %s", nsp_last_error());
    }
    free_all(req, nlevels);
    sync_device_set_current(1);
    if (nsp_a2a_start(h, t->seq, t->head, NULL, req) != NSP_ERR_INVALID_ARG ||
        strstr(nsp_last_error(), "device") == NULL) {
        sync_device_set_current(0);
        FAIL("a start after the device moved was taken: %s", nsp_last_error());
    }
    sync_device_set_current(0);
    p.field_mask |= NSP_A2A_FIELD_MAPPED;
    p.mapped = 1;
    if (create(c, lay, &p, 0, &m) != NSP_ERR_UNSUPPORTED) {
        FAIL("mapped = 1 on the device engine was taken");
    }
    c->checks++;
    rc = 0;
out:
    free_all(req, nlevels);
    nsp_a2a_destroy(h);
    nsp_a2a_destroy(m);
    return rc;
}

static int run_round(rank_ctx_t *c, const nsp_plan_t *plan, int round, uint64_t *rng,
                     const a2a_plan_opts_t *o, int first)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    tensor_t          t;
    int               D = 1 + (int)(a2a_rand(rng) % 6), serial = (int)(a2a_rand(rng) % 3 == 0);
    size_t            elem = (a2a_rand(rng) % 2) ? 2 : 4;
    int               hq = a2a_random_heads(rng, o), rc = 1;

    memset(&t, 0, sizeof(t));
    if (nsp_layout_create(plan, round, c->rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || info.nlevels > 64) {
        FAIL("round %d: layout: %s", round, nsp_last_error());
    }
    if (a2a_tensor_init(&t, plan, round, c->rank, hq, D, elem, 0) != 0) {
        FAIL("round %d: no memory for the reference", round);
    }
    if (persistent(c, lay, info.nlevels, &t, serial) ||
        gated(c, lay, info.nlevels, &t, serial) ||
        replica_sum(c, plan, round, lay, info.nlevels, 1, D, serial) ||
        (first && refusals(c, lay, info.nlevels, &t))) {
        goto out;
    }
    rc = 0;
out:
    a2a_tensor_free(&t);
    nsp_layout_free(lay);
    return rc;
}

static int rank_main(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    int              rc = 1;

    memset(&c, 0, sizeof(c));
    c.rank = rank, c.nranks = nranks;
    if (mp_comm_tree(&mc->id, rank, nranks, mc->timeout_s, mc->kind == CASE_SPARSE_TREE,
                     &c.comm, &c.tree) != 0) {
        return 2;
    }
    for (int p = 0; p < mc->nplans; ++p) {
        a2a_plan_opts_t o;
        uint64_t        rng;
        nsp_plan_t     *plan = a2a_case_plan(mc->seed, p, nranks, mc->kind == CASE_DISJOINT,
                                             &o, &rng);
        if (plan == NULL) {
            FAIL("plan %d: no memory", p);
        }
        for (int r = 0; r < plan->nrounds; ++r) {
            if (run_round(&c, plan, r, &rng, &o, p == 0 && r == 0) != 0) {
                nsp_plan_free(plan);
                goto out;
            }
        }
        nsp_plan_free(plan);
    }
    mp_set_value(0, c.checks);
    rc = 0;
out:
    mp_comm_tree_free(c.comm, c.tree);
    return rc;
}

static void run_case(int nranks, int kind, int nplans, const char *what)
{
    mp_case_t   mc;
    mp_result_t res;
    double      checks = 0;

    memset(&mc, 0, sizeof(mc));
    mc.kind      = kind;
    mc.seed      = 5000u * (uint64_t)nranks + (uint64_t)kind;
    mc.nplans    = nplans;
    mc.timeout_s = 30.0;
    fflush(stdout);
    mp_run_uid(nranks, 110.0, rank_main, &mc, &mc.id, &res);
    for (int r = 0; r < nranks; ++r) {
        checks += res.rank[r].value[0];
    }
    if (!tap_ok(mp_all_ok(&res), "%d ranks, device engine on the test device, %s (%.1f s)",
                nranks, what, res.elapsed_s)) {
        mp_diag(&res);
    } else {
        tap_ok(checks > 0, "%d ranks, %s: %.0f level blocks, buffers and counts compared",
               nranks, what, checks);
    }
}

int main(int argc, char **argv)
{
    /* argv[1] = a rank count runs only that one (for debugging). */
    int only = argc > 1 ? atoi(argv[1]) : 0;
    int sizes[] = {2, 4};

    for (int k = 0; k < 2; ++k) {
        int n = sizes[k];
        if (only && n != only) {
            continue;
        }
        run_case(n, CASE_NESTED, 6, "random nested plans, tree of every degree");
        run_case(n, CASE_SPARSE_TREE, 3, "random nested plans, tree {1, N}: missing levels "
                 "pairwise");
        run_case(n, CASE_DISJOINT, 3, "random disjoint plans, unaligned groups pairwise");
    }
    return tap_done();
}
