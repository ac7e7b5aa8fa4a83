/*
 * The nested all-to-all with 2, 4 and 8 real processes over UCX on loopback.
 * Every rank builds the same random plans from a shared seed and, for each
 * round:
 *  - posts sequence-to-head of a query-like tensor (H >= d) and a KV-like
 *    tensor (H < d: replicated heads) at once, and checks each level's
 *    block as soon as that level completes against the head-sharded buffer
 *    computed independently from the global tensor (tests/a2a/a2a_ref.c);
 *  - posts head-to-sequence of both and checks it gives back the input
 *    exactly; and, with float32, bfloat16 and float16 numbers,
 *    head-to-sequence with SUM_F32, SUM_BF16 and SUM_FP16 gives the replica
 *    sums.
 * Plans: random nested (long-tailed, uneven lengths, skipped/empty levels,
 * messy group order), and random disjoint plans with unaligned groups (which
 * run pairwise over the world); trees with every degree and with only {1, N}
 * (levels missing from the tree run pairwise); pipelined and serial levels.
 * Failures: ranks reading different plans or passing a different head_dim
 * get NSP_ERR_MISMATCH on every rank; a rank that never posts makes the
 * others fail within the timeout instead of hanging.
 */
#include "a2a_mp.h"
#include "a2a_ref.h"
#include "../mp.h"
#include "../tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CASE_NESTED = 0, CASE_SPARSE_TREE = 1, CASE_DISJOINT = 2, CASE_MISMATCH = 3,
       CASE_DEAD_PEER = 4 };

/* One tensor in flight: its buffers, the reference and its level requests. */
typedef struct tensor {
    a2a_tensor_t   b;
    nsp_request_t *req[64];
} tensor_t;

static void tensor_free(tensor_t *t)
{
    a2a_tensor_free(&t->b);
}

static int tensor_init(tensor_t *t, const nsp_plan_t *plan, int round, int rank, int heads,
                       int head_dim, size_t elem, int f32)
{
    memset(t->req, 0, sizeof(t->req));
    return a2a_tensor_init(&t->b, plan, round, rank, heads, head_dim, elem, f32);
}

static nsp_status_t post(rank_ctx_t *c, const nsp_layout_t *lay, tensor_t *t, nsp_a2a_dir_t dir,
                         int head_dim, int serial, nsp_a2a_replicas_t replicas)
{
    nsp_a2a_params_t p;

    memset(&p, 0, sizeof(p));
    p.field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_REPLICAS;
    p.direction  = dir;
    p.heads      = t->b.heads;
    p.head_dim   = head_dim;
    p.elem_size  = t->b.elem;
    p.src        = dir == NSP_A2A_SEQ_TO_HEAD ? t->b.seq : t->b.head;
    p.dst        = dir == NSP_A2A_SEQ_TO_HEAD ? t->b.head : t->b.back;
    p.serial     = serial;
    p.replicas   = replicas;
    return nsp_a2a_post(c->tree, lay, &p, t->req);
}

/* One round: two tensors s2h (checked level by level), then h2s; returns 0. */
static int run_round(rank_ctx_t *c, const nsp_plan_t *plan, int round, uint64_t *rng,
                     const a2a_plan_opts_t *o)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    tensor_t          t[2];
    int               D = 1 + (int)(a2a_rand(rng) % 6), serial = (int)(a2a_rand(rng) % 3 == 0);
    size_t            elem = (a2a_rand(rng) % 2) ? 2 : 4;
    int               hq = a2a_random_heads(rng, o), hkv = 1, rc = 1;
    nsp_status_t      st;

    memset(t, 0, sizeof(t));
    for (int k = 0; k < o->ndegrees; ++k) { /* 2 KV heads when every degree allows it */
        hkv = (o->degrees[k] % 2 == 0 || o->degrees[k] == 1) ? hkv : 0;
    }
    hkv = (hkv && a2a_rand(rng) % 2) ? 2 : 1;
    if (nsp_layout_create(plan, round, c->rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || info.nlevels > 64) {
        FAIL("round %d: layout: %s", round, nsp_last_error());
    }
    if (tensor_init(&t[0], plan, round, c->rank, hq, D, elem, 0) ||
        tensor_init(&t[1], plan, round, c->rank, hkv, D, elem, 0)) {
        FAIL("round %d: no memory for the reference", round);
    }
    for (int k = 0; k < 2; ++k) { /* both in flight together */
        if ((st = post(c, lay, &t[k], NSP_A2A_SEQ_TO_HEAD, D, serial, 0)) != NSP_OK) {
            FAIL("round %d: s2h post (H=%d): %s", round, t[k].b.heads, nsp_last_error());
        }
    }
    for (int k = 0; k < 2; ++k) {
        if (nsp_request_test(t[k].req[0]) != NSP_OK) {
            FAIL("round %d: level 0 not complete at post", round);
        }
    }
    for (int l = 0; l < info.nlevels; ++l) {
        for (int k = 0; k < 2; ++k) {
            nsp_layout_heads_t hs;
            size_t             row = (size_t)D * elem;
            if ((st = nsp_request_wait(t[k].req[l])) != NSP_OK) {
                FAIL("round %d level %d (H=%d): %s", round, l, t[k].b.heads,
                     nsp_last_error());
            }
            nsp_request_free(t[k].req[l]);
            t[k].req[l] = NULL;
            nsp_layout_heads(lay, l, t[k].b.heads, &hs);
            /* This level's block must be right now, whatever the others do. */
            if (memcmp((char *)t[k].b.head + (size_t)hs.row_offset * row,
                       (char *)t[k].b.ref + (size_t)hs.row_offset * row,
                       (size_t)hs.rows * row) != 0) {
                FAIL("round %d level %d (replicas %d, H=%d, D=%d, elem %zu): head-sharded block "
                     "differs from the reference", round, l, hs.replicas, t[k].b.heads, D,
                     elem);
            }
            c->checks++;
        }
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = post(c, lay, &t[k], NSP_A2A_HEAD_TO_SEQ, D, serial, 0)) != NSP_OK) {
            FAIL("round %d: h2s post: %s", round, nsp_last_error());
        }
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = nsp_request_wait_all(t[k].req, info.nlevels)) != NSP_OK) {
            FAIL("round %d: h2s: %s", round, nsp_last_error());
        }
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_request_free(t[k].req[l]);
            t[k].req[l] = NULL;
        }
        if (memcmp(t[k].b.back, t[k].b.seq,
                   (size_t)t[k].b.T * (size_t)t[k].b.heads * (size_t)D * elem)) {
            FAIL("round %d: head-to-sequence (H=%d) did not give back the input", round,
                 t[k].b.heads);
        }
        c->checks++;
    }
    /* KV heads as numbers: head-to-sequence with SUM_F32, and SUM_BF16 or
     * SUM_FP16 (by round), sums the replicas. */
    for (int k = 0; k < 2; ++k) {
        static const nsp_a2a_replicas_t modes[] = {NSP_A2A_REPLICAS_SUM_F32,
                                                   NSP_A2A_REPLICAS_SUM_BF16,
                                                   NSP_A2A_REPLICAS_SUM_FP16};
        int    kind = k == 0 ? A2A_NUM_F32 : A2A_NUM_BF16 + round % 2;
        size_t es   = kind == A2A_NUM_F32 ? 4 : 2;
        tensor_free(&t[1]);
        if (tensor_init(&t[1], plan, round, c->rank, hkv, D, es, kind) != 0) {
            FAIL("round %d: no memory", round);
        }
        if (post(c, lay, &t[1], NSP_A2A_SEQ_TO_HEAD, D, serial, 0) != NSP_OK ||
            nsp_request_wait_all(t[1].req, info.nlevels) != NSP_OK) {
            FAIL("round %d: numbers s2h: %s", round, nsp_last_error());
        }
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_request_free(t[1].req[l]);
        }
        free(t[1].b.seq); /* now compare h2s against the summed reference */
        t[1].b.seq = NULL;
        if (a2a_ref_seq_sharded_summed(plan, round, c->rank, hkv, D, kind, &t[1].b.seq,
                                       &t[1].b.T) != 0 ||
            post(c, lay, &t[1], NSP_A2A_HEAD_TO_SEQ, D, serial, modes[kind - 1]) != NSP_OK ||
            nsp_request_wait_all(t[1].req, info.nlevels) != NSP_OK) {
            FAIL("round %d: h2s sum (mode %d): %s", round, (int)modes[kind - 1],
                 nsp_last_error());
        }
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_request_free(t[1].req[l]);
        }
        if (memcmp(t[1].b.back, t[1].b.seq, (size_t)t[1].b.T * (size_t)hkv * (size_t)D * es)) {
            FAIL("round %d: h2s with replicas mode %d (H=%d) is not the sum over replicas",
                 round, (int)modes[kind - 1], hkv);
        }
        c->checks++;
    }
    rc = 0;
out:
    tensor_free(&t[0]);
    tensor_free(&t[1]);
    nsp_layout_free(lay);
    return rc;
}

static int setup(rank_ctx_t *c, const mp_case_t *mc, int rank, int nranks)
{
    memset(c, 0, sizeof(*c));
    c->rank   = rank;
    c->nranks = nranks;
    return mp_comm_tree(&mc->id, rank, nranks, mc->timeout_s, mc->kind == CASE_SPARSE_TREE,
                        &c->comm, &c->tree);
}

static void teardown(rank_ctx_t *c)
{
    mp_comm_tree_free(c->comm, c->tree);
}

static nsp_plan_t *case_plan(const mp_case_t *mc, int p, int nranks, a2a_plan_opts_t *o,
                             uint64_t *rng)
{
    return a2a_case_plan(mc->seed, p, nranks, mc->kind == CASE_DISJOINT, o, rng);
}

static int rank_roundtrip(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    int              rc = 1;

    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    for (int p = 0; p < mc->nplans; ++p) {
        a2a_plan_opts_t o;
        uint64_t        rng;
        nsp_plan_t     *plan = case_plan(mc, p, nranks, &o, &rng);
        if (plan == NULL) {
            mp_note("plan %d: no memory", p);
            goto out;
        }
        for (int r = 0; r < plan->nrounds; ++r) {
            if (run_round(&c, plan, r, &rng, &o) != 0) {
                nsp_plan_free(plan);
                goto out;
            }
        }
        nsp_plan_free(plan);
    }
    mp_set_value(0, c.checks);
    rc = 0;
out:
    teardown(&c);
    return rc;
}

/* Rank 1 reads a plan with one length changed; then rank 0 passes another
 * head_dim. Every rank must see NSP_ERR_MISMATCH both times, and a correct
 * exchange must still work afterwards. */
static int rank_mismatch(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    a2a_plan_opts_t  o;
    uint64_t         rng;
    nsp_plan_t      *plan = NULL;
    nsp_layout_t    *lay = NULL;
    tensor_t         t;
    nsp_status_t     st;
    int              rc = 1;

    memset(&t, 0, sizeof(t));
    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    plan = case_plan(mc, 0, nranks, &o, &rng);
    if (plan == NULL) {
        FAIL("no plan");
    }
    if (rank == 1) {
        plan->seq_lens[plan->rounds[0].groups[0].seqs[0]] += 1;
    }
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK ||
        tensor_init(&t, plan, 0, rank, 1, 4, 2, 0) != 0) {
        FAIL("setup: %s", nsp_last_error());
    }
    st = nsp_layout_check(c.tree, lay);
    if (st != NSP_ERR_MISMATCH) {
        FAIL("nsp_layout_check with rank 1 on another plan gave %s", nsp_status_string(st));
    }
    st = post(&c, lay, &t, NSP_A2A_SEQ_TO_HEAD, 4, 0, 0);
    if (st != NSP_ERR_MISMATCH || strstr(nsp_last_error(), "(1)") == NULL) {
        FAIL("post with rank 1 on another plan gave %s: %s", nsp_status_string(st),
             nsp_last_error());
    }
    /* Same plan everywhere now, but rank 0 passes head_dim 3 instead of 4
     * (its buffers are large enough either way). */
    nsp_layout_free(lay);
    lay = NULL;
    if (rank == 1) {
        plan->seq_lens[plan->rounds[0].groups[0].seqs[0]] -= 1;
    }
    tensor_free(&t);
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK ||
        tensor_init(&t, plan, 0, rank, 1, 4, 2, 0) != 0) {
        FAIL("setup 2: %s", nsp_last_error());
    }
    st = post(&c, lay, &t, NSP_A2A_SEQ_TO_HEAD, rank == 0 ? 3 : 4, 0, 0);
    if (st != NSP_ERR_MISMATCH) {
        FAIL("post with another head_dim on rank 0 gave %s", nsp_status_string(st));
    }
    /* The communicator is still fine: a matching exchange works. */
    if (nsp_layout_check(c.tree, lay) != NSP_OK ||
        post(&c, lay, &t, NSP_A2A_SEQ_TO_HEAD, 4, 0, 0) != NSP_OK) {
        FAIL("matching exchange after a mismatch: %s", nsp_last_error());
    }
    {
        nsp_layout_info_t info;
        nsp_layout_query(lay, &info);
        if (nsp_request_wait_all(t.req, info.nlevels) != NSP_OK) {
            FAIL("matching exchange after a mismatch: %s", nsp_last_error());
        }
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_request_free(t.req[l]);
        }
        if (memcmp(t.b.head, t.b.ref, (size_t)t.b.rows * 4 * 2) != 0) {
            FAIL("matching exchange after a mismatch gave wrong data");
        }
    }
    rc = 0;
out:
    tensor_free(&t);
    nsp_layout_free(lay);
    nsp_plan_free(plan);
    teardown(&c);
    return rc;
}

/* The last rank leaves before posting; the others post (without the
 * agreement check, which would already catch it) and must get an error
 * within the timeout instead of hanging. value[0] = seconds waited. */
static int rank_dead_peer(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    nsp_plan_t      *plan = NULL;
    nsp_layout_t    *lay = NULL;
    tensor_t         t;
    nsp_a2a_params_t p;
    nsp_layout_info_t info;
    nsp_status_t     st = NSP_OK;
    double           t0;
    int              rc = 1;
    int64_t          lens[1] = {4096};
    int              s0[1] = {0};
    nsp_plan_group_t g = {.rank0 = 0, .size = nranks, .nseqs = 1, .seqs = s0, .ring = 1};
    nsp_model_t      model;
    nsp_cluster_t    cluster;

    memset(&t, 0, sizeof(t));
    memset(&model, 0, sizeof(model));
    memset(&cluster, 0, sizeof(cluster));
    cluster.ranks = nranks;
    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    /* One sequence over all ranks: a plan built by hand (plan_internal). */
    plan = calloc(1, sizeof(*plan));
    plan->cluster  = cluster;
    plan->nseqs    = 1;
    plan->seq_lens = lens;
    plan->nrounds  = 1;
    plan->rounds   = &(nsp_plan_round_t){.ngroups = 1, .groups = &g};
    if (nsp_layout_create(plan, 0, rank, &lay) != NSP_OK ||
        tensor_init(&t, plan, 0, rank, nranks, 16, 4, 0) != 0 ||
        nsp_layout_query(lay, &info) != NSP_OK || nsp_layout_check(c.tree, lay) != NSP_OK) {
        FAIL("setup: %s", nsp_last_error());
    }
    if (rank == nranks - 1) {
        rc = 0; /* leaves without posting; its exit tears its endpoints down */
        goto out;
    }
    memset(&p, 0, sizeof(p));
    p.field_mask = NSP_A2A_FIELD_CHECK;
    p.check      = 0;
    p.direction  = NSP_A2A_SEQ_TO_HEAD;
    p.heads      = nranks;
    p.head_dim   = 16;
    p.elem_size  = 4;
    p.src        = t.b.seq;
    p.dst        = t.b.head;
    t0 = mp_now();
    st = nsp_a2a_post(c.tree, lay, &p, t.req);
    if (st == NSP_OK) {
        st = nsp_request_wait_all(t.req, info.nlevels);
        for (int l = 0; l < info.nlevels; ++l) {
            nsp_request_free(t.req[l]);
        }
    }
    mp_set_value(0, mp_now() - t0);
    if (st != NSP_ERR_TIMEOUT && st != NSP_ERR_PEER_FAILED) {
        FAIL("exchange with a missing peer gave %s: %s", nsp_status_string(st),
             nsp_last_error());
    }
    mp_note("got %s after %.1f s: %s", nsp_status_string(st), mp_now() - t0, nsp_last_error());
    rc = 0;
out:
    /* After a failed exchange the transport may still write into the
     * abandoned buffers until the communicator is gone: destroy first. */
    nsp_tree_destroy(c.tree);
    nsp_comm_destroy(c.comm);
    nsp_a2a_release_cache();
    tensor_free(&t);
    nsp_layout_free(lay);
    free(plan);
    return rc;
}

/* direct_min: NSPCOMM_A2A_DIRECT_MIN for the ranks ("1": every sequence of a
 * multi-sequence level in its own in-place part; NULL: the default). */
static void run_case(int nranks, int kind, int nplans, const char *direct_min, const char *what)
{
    mp_case_t   mc;
    mp_result_t res;
    double      checks = 0;
    mp_fn_t     fn = kind == CASE_MISMATCH ? rank_mismatch
                   : kind == CASE_DEAD_PEER ? rank_dead_peer : rank_roundtrip;

    memset(&mc, 0, sizeof(mc));
    mc.kind      = kind;
    mc.seed      = 1000u * (uint64_t)nranks + (uint64_t)kind + (direct_min ? 77u : 0u);
    mc.nplans    = nplans;
    mc.timeout_s = kind == CASE_DEAD_PEER ? 3.0 : 30.0;
    if (direct_min != NULL) {
        setenv("NSPCOMM_A2A_DIRECT_MIN", direct_min, 1);
    } else {
        unsetenv("NSPCOMM_A2A_DIRECT_MIN");
    }
    fflush(stdout);
    mp_run_uid(nranks, 55.0, fn, &mc, &mc.id, &res); /* res notes a failed unique id */
    for (int r = 0; r < nranks; ++r) {
        checks += res.rank[r].value[0];
    }
    if (!tap_ok(mp_all_ok(&res), "%d ranks, %s (%.1f s)", nranks, what, res.elapsed_s)) {
        mp_diag(&res);
    } else if (kind == CASE_DEAD_PEER) {
        double worst = 0;
        for (int r = 0; r + 1 < nranks; ++r) {
            worst = res.rank[r].value[0] > worst ? res.rank[r].value[0] : worst;
        }
        tap_ok(worst < 3.0 + 10.0, "%d ranks: error within the 3 s timeout (+ slack): %.1f s",
               nranks, worst);
    } else if (kind != CASE_MISMATCH) {
        tap_ok(checks > 0, "%d ranks, %s: %.0f level blocks and buffers compared", nranks,
               what, checks);
    }
}

int main(int argc, char **argv)
{
    /* argv[1] = a rank count runs only that one (for debugging). */
    int only = argc > 1 ? atoi(argv[1]) : 0;
    int sizes[] = {2, 4, 8};

    for (int k = 0; k < 3; ++k) {
        int n = sizes[k];
        if (only && n != only) {
            continue;
        }
        run_case(n, CASE_NESTED, 16, NULL, "random nested plans, tree of every degree");
        run_case(n, CASE_NESTED, 8, "1", "random nested plans, every sequence of a "
                 "multi-sequence level in its own in-place part");
        run_case(n, CASE_SPARSE_TREE, 8, "1", "random nested plans, tree {1, N}: missing "
                 "levels pairwise, in-place parts");
        run_case(n, CASE_DISJOINT, 8, "2000", "random disjoint plans, unaligned groups "
                 "pairwise, batched and in-place parts mixed");
        run_case(n, CASE_MISMATCH, 1, NULL, "mismatched plans / head_dim give "
                 "NSP_ERR_MISMATCH");
    }
    if (!only || only == 4) {
        run_case(4, CASE_DEAD_PEER, 1, NULL, "a rank that never posts: the others fail, no "
                 "hang");
    }
    return tap_done();
}
