/*
 * Mapped sources (nsp_mem_alloc + nsp_a2a_params_t.mapped) with 2, 4 and 8
 * real processes over UCX on loopback (every rank on one host, so every
 * group can map its peers):
 *  - random long-tailed nested plans: sequence-to-head with mapped = 1 from
 *    nsp_mem_alloc buffers equals the independent reference
 *    (tests/a2a/a2a_ref.c), head-to-sequence gives back the input exactly,
 *    and the levels did read in place (the library's counters);
 *  - the same buffers with mapped = 0: the same results, and no level
 *    announces or reads in place;
 *  - one rank passes malloc'ed buffers with mapped = 1: no hang, results
 *    still right on every rank, the levels of its groups fall back;
 *  - nsp_mem_free of NULL, of an unknown pointer, of different regions on
 *    different ranks, and nsp_mem_alloc of 0 bytes on one rank:
 *    NSP_ERR_INVALID_ARG on every rank, nothing allocated or freed; a
 *    round trip frees what it allocated; ranks disagreeing on `mapped` get
 *    NSP_ERR_MISMATCH;
 *  - nsp_comm_destroy with regions still allocated frees them (the live
 *    region count, and no leak under ASan);
 *  - a level large enough that the in-place reads stream around the cache
 *    (attn_sp/copy_rows.h), rows not whole cache lines: the same results.
 */
#include "a2a_mp.h"
#include "a2a_ref.h"
#include "attn_sp/copy_rows.h"
#include "attn_sp/nested_a2a.h"
#include "transport/transport.h"
#include "../mp.h"
#include "../tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CASE_MAPPED = 0, CASE_PLAIN = 1, CASE_FALLBACK = 2, CASE_MEM_API = 3,
       CASE_DESTROY = 4, CASE_LARGE = 5 };

/* One tensor: the reference buffers (malloc) and what the post uses:
 * seq [T, H, D] and head [rows, D] from nsp_mem_alloc (or malloc copies on
 * a rank that passes unmapped buffers), back [T, H, D] for head-to-sequence. */
typedef struct tensor {
    int            heads;
    size_t         seq_bytes, head_bytes;
    void          *seq_ref, *head_ref;   /* malloc: the reference */
    void          *seq_mem, *head_mem;   /* nsp_mem_alloc, every rank */
    void          *seq_own, *head_own;   /* malloc: an unmapped rank's buffers */
    void          *seq, *head, *back;    /* what the posts use */
    nsp_request_t *req[64];
} tensor_t;

static void tensor_free(rank_ctx_t *c, tensor_t *t)
{
    if (t->head_mem != NULL) { /* collective, same order on every rank */
        nsp_mem_free(c->comm, t->head_mem);
    }
    if (t->seq_mem != NULL) {
        nsp_mem_free(c->comm, t->seq_mem);
    }
    free(t->seq_ref);
    free(t->head_ref);
    free(t->seq_own);
    free(t->head_own);
    free(t->back);
    memset(t, 0, sizeof(*t));
}

/* unmapped: this rank passes malloc'ed buffers (it still takes part in the
 * collective nsp_mem_alloc calls). Returns 0 or -1 with a note. */
static int tensor_init(rank_ctx_t *c, tensor_t *t, const nsp_plan_t *plan, int round,
                       int heads, int D, size_t elem, int unmapped)
{
    int64_t T = 0, rows = 0;

    memset(t, 0, sizeof(*t));
    t->heads = heads;
    if (a2a_ref_seq_sharded(plan, round, c->rank, heads, D, elem, 0, &t->seq_ref, &T) ||
        a2a_ref_head_sharded(plan, round, c->rank, heads, D, elem, 0, &t->head_ref, &rows)) {
        mp_note("round %d: no memory for the reference", round);
        return -1;
    }
    t->seq_bytes  = (size_t)T * (size_t)heads * (size_t)D * elem;
    t->head_bytes = (size_t)rows * (size_t)D * elem;
    /* +1: every rank asks for at least one byte */
    if (nsp_mem_alloc(c->comm, t->seq_bytes + 1, &t->seq_mem) != NSP_OK ||
        nsp_mem_alloc(c->comm, t->head_bytes + 1, &t->head_mem) != NSP_OK) {
        mp_note("round %d: nsp_mem_alloc: %s", round, nsp_last_error());
        return -1;
    }
    t->back     = malloc(t->seq_bytes + 1);
    t->seq_own  = malloc(t->seq_bytes + 1);
    t->head_own = malloc(t->head_bytes + 1);
    if (t->back == NULL || t->seq_own == NULL || t->head_own == NULL) {
        mp_note("round %d: no memory", round);
        return -1;
    }
    t->seq  = unmapped ? t->seq_own : t->seq_mem;
    t->head = unmapped ? t->head_own : t->head_mem;
    memcpy(t->seq, t->seq_ref, t->seq_bytes);
    memset(t->head, 0xab, t->head_bytes);
    memset(t->back, 0xcd, t->seq_bytes);
    return 0;
}

static nsp_status_t post(rank_ctx_t *c, const nsp_layout_t *lay, tensor_t *t, nsp_a2a_dir_t dir,
                         int D, size_t elem, int serial, int mapped)
{
    nsp_a2a_params_t p;

    (void)c;
    memset(&p, 0, sizeof(p));
    p.field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_MAPPED;
    p.direction  = dir;
    p.heads      = t->heads;
    p.head_dim   = D;
    p.elem_size  = elem;
    p.src        = dir == NSP_A2A_SEQ_TO_HEAD ? t->seq : t->head;
    p.dst        = dir == NSP_A2A_SEQ_TO_HEAD ? t->head : t->back;
    p.serial     = serial;
    p.mapped     = mapped;
    return nsp_a2a_post(c->tree, lay, &p, t->req);
}

static nsp_status_t wait_free(nsp_request_t **req, int n)
{
    nsp_status_t st = nsp_request_wait_all(req, n);

    for (int l = 0; l < n; ++l) {
        nsp_request_free(req[l]);
        req[l] = NULL;
    }
    return st;
}

/* One round: a query-like and a KV-like tensor, s2h both in flight, then
 * h2s both; mapped = 0 for CASE_PLAIN; the last rank unmapped for
 * CASE_FALLBACK. Returns 0, or 1 with a note. */
/* The shape of one round's tensors: hq query heads (the KV-like one has
 * 1), D elements of elem bytes per head, levels serial or pipelined. */
typedef struct round_shape {
    int    hq, D, serial;
    size_t elem;
} round_shape_t;

static round_shape_t random_shape(uint64_t *rng, const a2a_plan_opts_t *o)
{
    round_shape_t sh;

    sh.D      = 1 + (int)(a2a_rand(rng) % 6);
    sh.serial = (int)(a2a_rand(rng) % 3 == 0);
    sh.elem   = (a2a_rand(rng) % 2) ? 2 : 4;
    sh.hq     = a2a_random_heads(rng, o);
    return sh;
}

static int run_round(rank_ctx_t *c, int kind, const nsp_plan_t *plan, int round,
                     round_shape_t sh)
{
    nsp_layout_t     *lay = NULL;
    nsp_layout_info_t info;
    tensor_t          t[2];
    int               D = sh.D, serial = sh.serial, hq = sh.hq, rc = 1;
    size_t            elem = sh.elem;
    int               mapped = kind != CASE_PLAIN;
    int               unmapped = kind == CASE_FALLBACK && c->rank == c->nranks - 1;
    nsp_status_t      st;

    memset(t, 0, sizeof(t));
    if (nsp_layout_create(plan, round, c->rank, &lay) != NSP_OK ||
        nsp_layout_query(lay, &info) != NSP_OK || info.nlevels > 64) {
        FAIL("round %d: layout: %s", round, nsp_last_error());
    }
    if (tensor_init(c, &t[0], plan, round, hq, D, elem, unmapped) ||
        tensor_init(c, &t[1], plan, round, 1, D, elem, unmapped)) {
        goto out;
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = post(c, lay, &t[k], NSP_A2A_SEQ_TO_HEAD, D, elem, serial, mapped)) != NSP_OK) {
            FAIL("round %d: s2h post (H=%d): %s", round, t[k].heads, nsp_last_error());
        }
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = wait_free(t[k].req, info.nlevels)) != NSP_OK) {
            FAIL("round %d: s2h (H=%d): %s", round, t[k].heads, nsp_last_error());
        }
        if (memcmp(t[k].head, t[k].head_ref, t[k].head_bytes) != 0) {
            FAIL("round %d (H=%d, D=%d, elem %zu, mapped %d, unmapped here %d): head-sharded "
                 "buffer differs from the reference", round, t[k].heads, D, elem, mapped,
                 unmapped);
        }
        c->checks++;
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = post(c, lay, &t[k], NSP_A2A_HEAD_TO_SEQ, D, elem, serial, mapped)) != NSP_OK) {
            FAIL("round %d: h2s post: %s", round, nsp_last_error());
        }
    }
    for (int k = 0; k < 2; ++k) {
        if ((st = wait_free(t[k].req, info.nlevels)) != NSP_OK) {
            FAIL("round %d: h2s (H=%d): %s", round, t[k].heads, nsp_last_error());
        }
        if (memcmp(t[k].back, t[k].seq_ref, t[k].seq_bytes) != 0) {
            FAIL("round %d (H=%d, mapped %d): head-to-sequence did not give back the input",
                 round, t[k].heads, mapped);
        }
        c->checks++;
    }
    rc = 0;
out:
    tensor_free(c, &t[1]);
    tensor_free(c, &t[0]);
    nsp_layout_free(lay);
    return rc;
}

static int setup(rank_ctx_t *c, const mp_case_t *mc, int rank, int nranks)
{
    memset(c, 0, sizeof(*c));
    c->rank   = rank;
    c->nranks = nranks;
    return mp_comm_tree(&mc->id, rank, nranks, mc->timeout_s, 0, &c->comm, &c->tree);
}

/* Random nested plans. value[0] = buffers compared, value[1] / value[2] =
 * levels that read in place / fell back on this rank. */
static int rank_roundtrip(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    uint64_t         m0 = 0, f0 = 0, m1 = 0, f1 = 0;
    int              rc = 1;

    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    nsp_a2a_mapped_counts(c.comm, &m0, &f0);
    for (int p = 0; p < mc->nplans; ++p) {
        a2a_plan_opts_t o;
        uint64_t        rng = mc->seed + 7919u * (uint64_t)p;
        nsp_plan_t     *plan;
        memset(&o, 0, sizeof(o));
        o.nranks         = nranks;
        o.nrounds        = 1 + (int)(a2a_rand(&rng) % 2);
        o.seqs_per_round = 1 + (int)(a2a_rand(&rng) % 10);
        o.max_len        = 2 + (int64_t)(a2a_rand(&rng) % 6000);
        o.messy          = p % 2;
        a2a_random_degrees(&rng, nranks, &o);
        plan = a2a_random_plan(&rng, &o);
        if (plan == NULL) {
            FAIL("plan %d: no memory", p);
        }
        for (int r = 0; r < plan->nrounds; ++r) {
            if (run_round(&c, mc->kind, plan, r, random_shape(&rng, &o)) != 0) {
                nsp_plan_free(plan);
                goto out;
            }
        }
        nsp_plan_free(plan);
    }
    nsp_a2a_mapped_counts(c.comm, &m1, &f1);
    mp_set_value(0, c.checks);
    mp_set_value(1, (double)(m1 - m0));
    mp_set_value(2, (double)(f1 - f0));
    rc = 0;
out:
    mp_comm_tree_free(c.comm, c.tree);
    return rc;
}

static int live_regions(void)
{
    int n = -1;

    nsp_tp_ucx_regions_live(&n);
    return n;
}

/* A hand-made plan: one sequence of `len` tokens over all ranks. */
typedef struct one_seq_plan {
    nsp_plan_t       plan;
    nsp_plan_round_t round;
    nsp_plan_group_t group;
    int64_t          len;
    int              seq;
} one_seq_plan_t;

static void one_seq_plan(one_seq_plan_t *p, int nranks, int64_t len)
{
    memset(p, 0, sizeof(*p));
    p->len                = len;
    p->group              = (nsp_plan_group_t){.rank0 = 0, .size = nranks, .nseqs = 1,
                                               .seqs = &p->seq, .ring = 1};
    p->round              = (nsp_plan_round_t){.ngroups = 1, .groups = &p->group};
    p->plan.cluster.ranks = nranks;
    p->plan.nseqs         = 1;
    p->plan.seq_lens      = &p->len;
    p->plan.nrounds       = 1;
    p->plan.rounds        = &p->round;
}

/* Levels large enough that the direct reads stream around the cache
 * (copy_rows.h): one sequence over all ranks, 8 heads of 136 bf16
 * elements (272-byte rows, not whole cache lines), serial and pipelined.
 * value[0] = buffers compared, value[1] = levels read in place, value[3] =
 * the bytes of this rank's head-sharded output. */
static int rank_large(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    one_seq_plan_t   op;
    uint64_t         m0 = 0, f0 = 0, m1 = 0, f1 = 0;
    int              rc = 1;

    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    one_seq_plan(&op, nranks, 4096 * (int64_t)nranks + 3); /* +3: uneven chunks */
    nsp_a2a_mapped_counts(c.comm, &m0, &f0);
    for (int serial = 0; serial < 2; ++serial) {
        round_shape_t sh = {.hq = 8, .D = 136, .serial = serial, .elem = 2};
        if (run_round(&c, mc->kind, &op.plan, 0, sh) != 0) {
            goto out;
        }
    }
    nsp_a2a_mapped_counts(c.comm, &m1, &f1);
    mp_set_value(0, c.checks);
    mp_set_value(1, (double)(m1 - m0));
    mp_set_value(3, (double)((op.len / nranks) * 8 * 136 * 2)); /* <= T * h_me * row too */
    rc = 0;
out:
    mp_comm_tree_free(c.comm, c.tree);
    return rc;
}

/* The memory API's errors, on every rank alike, and a round trip. */
static int rank_mem_api(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    void            *p = NULL, *q = NULL, *own = malloc(64);
    int              rc = 1, live0;
    nsp_status_t     st;
    one_seq_plan_t   op;
    nsp_layout_t    *lay = NULL;
    tensor_t         t;

    memset(&t, 0, sizeof(t));
    if (setup(&c, mc, rank, nranks) != 0) {
        free(own);
        return 2;
    }
    live0 = live_regions();
    if ((st = nsp_mem_free(c.comm, NULL)) != NSP_ERR_INVALID_ARG) {
        FAIL("nsp_mem_free(NULL) gave %s", nsp_status_string(st));
    }
    if ((st = nsp_mem_free(c.comm, own)) != NSP_ERR_INVALID_ARG) {
        FAIL("nsp_mem_free(a malloc'ed pointer) gave %s", nsp_status_string(st));
    }
    if ((st = nsp_mem_alloc(c.comm, rank == 1 ? 0 : 4096, &p)) != NSP_ERR_INVALID_ARG ||
        p != NULL || live_regions() != live0) {
        FAIL("nsp_mem_alloc with 0 bytes on rank 1 gave %s, ptr %p, %d live regions (%d "
             "before)", nsp_status_string(st), p, live_regions(), live0);
    }
    /* round trip: rank-dependent sizes, written and read back */
    if ((st = nsp_mem_alloc(c.comm, 4096 + (size_t)rank * 100, &p)) != NSP_OK || p == NULL ||
        (st = nsp_mem_alloc(c.comm, 1, &q)) != NSP_OK || live_regions() != live0 + 2) {
        FAIL("nsp_mem_alloc: %s (%d live regions, %d before)", nsp_last_error(),
             live_regions(), live0);
    }
    memset(p, rank, 4096 + (size_t)rank * 100);
    /* ranks naming different regions, then one rank passing NULL: refused
     * everywhere, nothing freed */
    if ((st = nsp_mem_free(c.comm, rank == 0 ? q : p)) != NSP_ERR_INVALID_ARG ||
        live_regions() != live0 + 2) {
        FAIL("nsp_mem_free of different regions gave %s", nsp_status_string(st));
    }
    if ((st = nsp_mem_free(c.comm, rank == nranks - 1 ? NULL : p)) != NSP_ERR_INVALID_ARG ||
        live_regions() != live0 + 2) {
        FAIL("nsp_mem_free with NULL on the last rank gave %s", nsp_status_string(st));
    }
    for (size_t k = 0; k < 4096 + (size_t)rank * 100; ++k) {
        if (((unsigned char *)p)[k] != (unsigned char)rank) {
            FAIL("region byte %zu changed", k);
        }
    }
    if ((st = nsp_mem_free(c.comm, p)) != NSP_OK || (st = nsp_mem_free(c.comm, q)) != NSP_OK ||
        live_regions() != live0) {
        FAIL("nsp_mem_free: %s (%d live regions, %d before)", nsp_status_string(st),
             live_regions(), live0);
    }
    if ((st = nsp_mem_free(c.comm, p)) != NSP_ERR_INVALID_ARG) {
        FAIL("a second nsp_mem_free of one region gave %s", nsp_status_string(st));
    }
    p = q = NULL;
    /* ranks disagreeing on `mapped`: NSP_ERR_MISMATCH everywhere (check on) */
    one_seq_plan(&op, nranks, 1000);
    if (nsp_layout_create(&op.plan, 0, rank, &lay) != NSP_OK ||
        tensor_init(&c, &t, &op.plan, 0, nranks, 4, 4, 0) != 0) {
        FAIL("mismatch setup: %s", nsp_last_error());
    }
    {
        nsp_a2a_params_t pp;
        memset(&pp, 0, sizeof(pp));
        pp.field_mask = NSP_A2A_FIELD_MAPPED;
        pp.direction  = NSP_A2A_SEQ_TO_HEAD;
        pp.heads      = nranks;
        pp.head_dim   = 4;
        pp.elem_size  = 4;
        pp.src        = t.seq;
        pp.dst        = t.head;
        pp.mapped     = rank == 0;
        if ((st = nsp_a2a_post(c.tree, lay, &pp, t.req)) != NSP_ERR_MISMATCH) {
            nsp_layout_info_t li;
            if (st == NSP_OK && nsp_layout_query(lay, &li) == NSP_OK) {
                wait_free(t.req, li.nlevels);
            }
            FAIL("ranks disagreeing on mapped gave %s", nsp_status_string(st));
        }
        pp.mapped = 2;
        if ((st = nsp_a2a_post(c.tree, lay, &pp, t.req)) != NSP_ERR_INVALID_ARG) {
            FAIL("mapped = 2 gave %s", nsp_status_string(st));
        }
    }
    rc = 0;
out:
    tensor_free(&c, &t);
    nsp_layout_free(lay);
    free(own);
    mp_comm_tree_free(c.comm, c.tree);
    return rc;
}

/* Regions left allocated are freed by nsp_comm_destroy. */
static int rank_destroy(int rank, int nranks, void *arg)
{
    const mp_case_t *mc = arg;
    rank_ctx_t       c;
    void            *p = NULL, *q = NULL;
    int              live0;

    (void)nranks;
    if (setup(&c, mc, rank, nranks) != 0) {
        return 2;
    }
    live0 = live_regions();
    if (nsp_mem_alloc(c.comm, 1 << 20, &p) != NSP_OK ||
        nsp_mem_alloc(c.comm, 100 + (size_t)rank, &q) != NSP_OK ||
        live_regions() != live0 + 2) {
        mp_note("nsp_mem_alloc: %s", nsp_last_error());
        mp_comm_tree_free(c.comm, c.tree);
        return 1;
    }
    memset(p, 1, 1 << 20);
    mp_comm_tree_free(c.comm, c.tree);
    if (live_regions() != 0) {
        mp_note("%d regions still live after nsp_comm_destroy", live_regions());
        return 1;
    }
    return 0;
}

static void run_case(int nranks, int kind, int nplans, const char *what)
{
    mp_case_t   mc;
    mp_result_t res;
    double      checks = 0, mapped = 0, fell_back = 0;
    double      out_min = 0;
    mp_fn_t     fn = kind == CASE_MEM_API ? rank_mem_api
                   : kind == CASE_DESTROY ? rank_destroy
                   : kind == CASE_LARGE   ? rank_large : rank_roundtrip;

    memset(&mc, 0, sizeof(mc));
    mc.kind      = kind;
    mc.seed      = 5000u * (uint64_t)nranks + (uint64_t)kind;
    mc.nplans    = nplans;
    mc.timeout_s = 30.0;
    fflush(stdout);
    mp_run_uid(nranks, 100.0, fn, &mc, &mc.id, &res);
    for (int r = 0; r < nranks; ++r) {
        checks += res.rank[r].value[0];
        mapped += res.rank[r].value[1];
        fell_back += res.rank[r].value[2];
        out_min = r == 0 || res.rank[r].value[3] < out_min ? res.rank[r].value[3] : out_min;
    }
    if (!tap_ok(mp_all_ok(&res), "%d ranks, %s (%.1f s)", nranks, what, res.elapsed_s)) {
        mp_diag(&res);
        return;
    }
    if (kind == CASE_MAPPED) {
        tap_ok(checks > 0 && mapped > 0 && fell_back == 0, "%d ranks, %s: %.0f buffers "
               "compared, %.0f levels read in place, %.0f fell back (want > 0, > 0, 0)",
               nranks, what, checks, mapped, fell_back);
    } else if (kind == CASE_PLAIN) {
        tap_ok(checks > 0 && mapped == 0 && fell_back == 0, "%d ranks, %s: %.0f buffers "
               "compared, %.0f levels read in place, %.0f fell back (want > 0, 0, 0)", nranks,
               what, checks, mapped, fell_back);
    } else if (kind == CASE_LARGE) {
        tap_ok(checks > 0 && mapped > 0 && out_min >= (double)nsp_copy_stream_min_bytes(),
               "%d ranks, %s: %.0f buffers compared, %.0f levels read in place, at least %.0f "
               "bytes out per rank (streamed from %zu)", nranks, what, checks, mapped, out_min,
               nsp_copy_stream_min_bytes());
    } else if (kind == CASE_FALLBACK) {
        tap_ok(checks > 0 && fell_back > 0, "%d ranks, %s: %.0f buffers compared, %.0f levels "
               "read in place, %.0f fell back (want > 0, any, > 0)", nranks, what, checks,
               mapped, fell_back);
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
        run_case(n, CASE_MAPPED, n == 8 ? 4 : 8, "random nested plans, mapped sources: "
                 "s2h equals the reference, h2s gives back the input");
        run_case(n, CASE_PLAIN, 2, "the same buffers with mapped = 0: ordinary exchange");
        run_case(n, CASE_FALLBACK, n == 8 ? 3 : 4, "the last rank's buffers not from "
                 "nsp_mem_alloc: its groups fall back, results right everywhere");
        run_case(n, CASE_LARGE, 0, "one long sequence, 272-byte rows, large enough that "
                 "the reads stream around the cache: s2h equals the reference, h2s gives "
                 "back the input");
    }
    if (!only || only == 2 || only == 4) {
        int n = only ? only : 4;
        run_case(n, CASE_MEM_API, 0, "nsp_mem_free of NULL / unknown / different regions, "
                 "alloc of 0 bytes: NSP_ERR_INVALID_ARG everywhere; round trip; mapped "
                 "mismatch");
        run_case(n, CASE_DESTROY, 0, "nsp_comm_destroy frees regions left allocated");
    }
    return tap_done();
}
