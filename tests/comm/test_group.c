/*
 * Groups of the tree over real processes (UCX on loopback). On each rank:
 * nsp_tree_group_get for every (rank0, degree) that holds the rank against
 * the pure map (level or world, base, index, the carrier, the same pointer
 * twice), refusals for ranges that miss the rank; then, for partitions of
 * the world into consecutive groups (some the tree has, some it lacks and
 * the world carries), the group operations: alltoallv with uneven counts
 * (zeros, self parts), a sendrecv two indices away, and ring rotations
 * with shifts 1, -1 and 3 whose byte counts follow the travelling block,
 * plus steps in flight. Every byte received is checked against the pattern
 * of its world sender and receiver (cu_fill), computed independently of
 * the group code.
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "nested_groups/group.h"
#include "nested_groups/tree.h"
#include "transport/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TIMEOUT_S 50.0
#define MAX_PARTS     8
#define INFLIGHT      3

typedef struct group_case {
    nsp_unique_id_t id;
    int             nlevels;
    int             degrees[8];
    int             nparts;               /* partitions of the world */
    int             parts[6][MAX_PARTS];  /* group sizes, consecutive, 0-terminated */
} group_case_t;

/* The group of `rank` in partition `sizes`: its rank0 and degree. */
static void part_group(const int *sizes, int rank, int *rank0, int *degree)
{
    int r0 = 0;

    for (int k = 0; k < MAX_PARTS && sizes[k] > 0; ++k) {
        if (rank < r0 + sizes[k]) {
            *rank0  = r0;
            *degree = sizes[k];
            return;
        }
        r0 += sizes[k];
    }
    *rank0 = *degree = -1;
}

/* Every (rank0, degree) holding the rank: the tree's group against the map. */
static int check_lookups(nsp_tree_t *tree, nsp_comm_t *world, const group_case_t *c, int rank,
                         int nranks)
{
    for (int d = 1; d <= nranks; ++d) {
        for (int r0 = rank - d + 1; r0 <= rank; ++r0) {
            nsp_group_t    *g = NULL, *again = NULL, *lvl = NULL;
            nsp_tp_comm_t  *tp = NULL;
            nsp_group_map_t m;
            if (r0 < 0 || r0 + d > nranks) {
                continue;
            }
            nsp_group_map(c->degrees, c->nlevels, nranks, rank, r0, d, &m);
            if (nsp_tree_group_get(tree, r0, d, &g) != NSP_OK ||
                nsp_tree_group_get(tree, r0, d, &again) != NSP_OK || g != again) {
                mp_note("group [%d, +%d): lookup failed or gave two pointers", r0, d);
                return 1;
            }
            if (m.level >= 0) {
                nsp_tree_level_tp(tree, m.level, &tp);
                nsp_tree_level_group(tree, m.level, &lvl);
            } else {
                tp = nsp_comm_tp(world), lvl = g;
            }
            if (g->level != m.level || g->base != m.base || g->index != m.index ||
                g->rank0 != r0 || g->degree != d || g->tp != tp || lvl != g ||
                g->tp->rank != g->base + g->index) {
                mp_note("group [%d, +%d): level %d base %d index %d, want %d %d %d", r0, d,
                        g->level, g->base, g->index, m.level, m.base, m.index);
                return 1;
            }
        }
    }
    {
        nsp_group_t *g = NULL;
        int          r0 = rank + 1 < nranks ? rank + 1 : 0;
        if (nsp_tree_group_get(tree, r0, 1, &g) != NSP_ERR_INVALID_ARG || g != NULL ||
            nsp_tree_group_get(tree, 0, nranks + 1, &g) != NSP_ERR_INVALID_ARG) {
            mp_note("a group without the rank, or larger than the world, was not refused");
            return 1;
        }
    }
    return 0;
}

/* Wait for and free reqs[n]; the first error. */
static nsp_status_t wait_all(nsp_request_t **reqs, int n)
{
    nsp_status_t status = NSP_OK;

    for (int k = 0; k < n; ++k) {
        nsp_status_t st = nsp_request_wait(reqs[k]);
        status          = status == NSP_OK ? st : status;
        nsp_request_free(reqs[k]);
    }
    return status;
}

/* Bytes world rank s sends world rank t in exchange `iter` (self included). */
static size_t a2a_count(int iter, int s, int t)
{
    return cu_count(iter, s, t, 3000);
}

/* An alltoallv over g: counts and patterns by world ranks; receive slots in
 * reverse index order, so displacements are not the send side's. */
static int group_alltoallv(nsp_group_t *g, int iter)
{
    int            d = g->degree, me = g->rank0 + g->index, n = 0, rc = 0;
    size_t        *a = calloc(4 * (size_t)d, sizeof(size_t)), sb = 0, rb = 0;
    nsp_request_t *reqs[64];
    unsigned char *send = NULL, *recv = NULL;
    nsp_status_t   st;

    for (int j = 0; j < d; ++j) {
        a[j] = a2a_count(iter, me, g->rank0 + j), a[d + j] = sb, sb += a[j];
    }
    for (int j = d - 1; j >= 0; --j) {
        a[2 * d + j] = a2a_count(iter, g->rank0 + j, me), a[3 * d + j] = rb, rb += a[2 * d + j];
    }
    send = malloc(sb + 1), recv = malloc(rb + 1);
    for (int j = 0; j < d; ++j) {
        cu_fill(send + a[d + j], a[j], iter, me, g->rank0 + j);
    }
    nsp_tp_alltoallv_t args = {send, a, a + d, recv, a + 2 * d, a + 3 * d};
    st = nsp_group_alltoallv_post(g, &args, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter), NULL, reqs,
                                  &n);
    if (st == NSP_OK && n > nsp_group_alltoallv_max_reqs(g)) {
        mp_note("alltoallv: %d requests, at most %d promised", n,
                nsp_group_alltoallv_max_reqs(g));
        rc = 1;
    }
    st = st == NSP_OK ? wait_all(reqs, n) : st;
    rc = rc != 0 ? rc : st != NSP_OK ? cu_fail("group alltoallv", st) : 0;
    for (int j = 0; j < d && rc == 0; ++j) {
        long bad = cu_check(recv + a[3 * d + j], a[2 * d + j], iter, g->rank0 + j, me);
        if (bad >= 0) {
            mp_note("alltoallv [%d, +%d): byte %ld from world rank %d differs", g->rank0, d,
                    bad, g->rank0 + j);
            rc = 1;
        }
    }
    free(a), free(send), free(recv);
    return rc;
}

/* One sendrecv: to index me+2, from me-2, byte counts by the sender. */
static int group_sendrecv(nsp_group_t *g, int iter)
{
    int            d = g->degree, to = (g->index + 2) % d, from = (g->index - 2 % d + d) % d;
    int            me = g->rank0 + g->index, src = g->rank0 + from, rc = 0;
    size_t         sbytes = 1000 + 13 * (size_t)me, rbytes = 1000 + 13 * (size_t)src;
    unsigned char *send = malloc(sbytes), *recv = malloc(rbytes);
    nsp_request_t *req = NULL;
    nsp_status_t   st;

    cu_fill(send, sbytes, iter, me, g->rank0 + to);
    st = nsp_group_sendrecv_post(g, send, sbytes, to, recv, rbytes, from,
                                 NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, iter), NULL, &req);
    st = st == NSP_OK ? wait_all(&req, 1) : st;
    if (st != NSP_OK) {
        rc = cu_fail("group sendrecv", st);
    } else if (cu_check(recv, rbytes, iter, src, me) >= 0) {
        mp_note("sendrecv [%d, +%d): the block from world rank %d differs", g->rank0, d, src);
        rc = 1;
    }
    if (rc == 0 && (nsp_group_sendrecv_post(g, send, 1, d, recv, 1, 0, 0, NULL, &req) !=
                        NSP_ERR_INVALID_ARG)) {
        mp_note("sendrecv to index %d of a group of %d was not refused", d, d);
        rc = 1;
    }
    free(send), free(recv);
    return rc;
}

/* Bytes of the block that starts on world rank `owner`: it keeps its size
 * as it travels, so every step of a ring moves other byte counts. */
static size_t block_bytes(int owner)
{
    return 500 + 97 * (size_t)owner;
}

/* A full rotation with `shift`: after k steps the rank holds the block of
 * index i - k*shift; each step sends the held block and receives the next. */
static int group_rotation(nsp_group_t *g, int shift, int iter)
{
    int            d = g->degree, me = g->index, rc = 0;
    size_t         most = block_bytes(g->rank0 + d - 1);
    unsigned char *a = malloc(most), *b = malloc(most);

    cu_fill(a, block_bytes(g->rank0 + me), iter, g->rank0 + me, 0);
    for (int k = 0; k < d + 1 && rc == 0; ++k) {
        int held = nsp_ring_index(me, (int)(-(long long)k * shift % d), d);
        int next = nsp_ring_index(me, (int)(-(long long)(k + 1) * shift % d), d);
        nsp_group_ring_step_t step = {a, block_bytes(g->rank0 + held), b,
                                      block_bytes(g->rank0 + next), shift, (uint32_t)k % 16};
        nsp_request_t *req = NULL;
        nsp_status_t   st  = nsp_group_ring_post(g, &step, NULL, &req);
        st = st == NSP_OK ? wait_all(&req, 1) : st;
        if (st != NSP_OK) {
            rc = cu_fail("group ring step", st);
        } else if (cu_check(b, step.recvbytes, iter, g->rank0 + next, 0) >= 0) {
            mp_note("ring [%d, +%d) shift %d step %d: not world rank %d's block", g->rank0, d,
                    shift, k, g->rank0 + next);
            rc = 1;
        }
        unsigned char *t = a;
        a = b, b = t;
    }
    free(a), free(b);
    return rc;
}

/* INFLIGHT steps of shift 1 posted before any wait, each its own block of
 * its own size; waited newest first. */
static int group_inflight(nsp_group_t *g, int iter)
{
    int            d = g->degree, me = g->rank0 + g->index, rc = 0;
    int            from = g->rank0 + nsp_ring_index(g->index, -1, d);
    unsigned char *send[INFLIGHT], *recv[INFLIGHT];
    nsp_request_t *reqs[INFLIGHT];
    int            n = 0;

    for (int k = 0; k < INFLIGHT; ++k) {
        nsp_group_ring_step_t step = {NULL, block_bytes(me) + (size_t)k, NULL,
                                      block_bytes(from) + (size_t)k, 1, 5};
        send[k] = malloc(step.sendbytes), recv[k] = malloc(step.recvbytes);
        step.sendbuf = send[k], step.recvbuf = recv[k];
        cu_fill(send[k], step.sendbytes, iter + k, me, 1);
        if (rc == 0) {
            nsp_status_t st = nsp_group_ring_post(g, &step, NULL, &reqs[k]);
            n += st == NSP_OK;
            rc = st == NSP_OK ? 0 : cu_fail("ring step in flight", st);
        }
    }
    for (int k = n - 1; k >= 0; --k) {
        nsp_status_t st = wait_all(&reqs[k], 1);
        if (rc == 0 && (st != NSP_OK ||
                        cu_check(recv[k], block_bytes(from) + (size_t)k, iter + k, from, 1) >= 0)) {
            mp_note("ring step %d in flight: %s", k, nsp_status_string(st));
            rc = 1;
        }
    }
    for (int k = 0; k < INFLIGHT; ++k) {
        free(send[k]), free(recv[k]);
    }
    return rc;
}

/* Every operation on this rank's group of partition p; the counters. */
static int group_ops(nsp_tree_t *tree, const group_case_t *c, int p, int rank)
{
    static const int  shifts[] = {1, -1, 3};
    nsp_group_t      *g = NULL;
    nsp_group_stats_t before;
    int               r0, d, rc = 0, iter = 100 * (p + 1);

    part_group(c->parts[p], rank, &r0, &d);
    nsp_status_t st = nsp_tree_group_get(tree, r0, d, &g);
    if (st != NSP_OK) {
        return cu_fail("group lookup", st);
    }
    before = g->stats;
    rc     = group_alltoallv(g, iter);
    rc     = rc != 0 ? rc : group_sendrecv(g, iter + 1);
    for (int s = 0; s < 3 && rc == 0; ++s) {
        rc = group_rotation(g, shifts[s], iter + 10 + s);
    }
    rc = rc != 0 ? rc : group_inflight(g, iter + 20);
    if (rc == 0 && (g->stats.alltoallv_posts != before.alltoallv_posts + 1 ||
                    g->stats.sendrecv_posts != before.sendrecv_posts + 1 ||
                    g->stats.ring_posts != before.ring_posts + 3 * ((uint64_t)d + 1) + INFLIGHT ||
                    g->stats.bytes_sent <= before.bytes_sent)) {
        mp_note("group [%d, +%d): counters %llu alltoallv, %llu sendrecv, %llu ring", r0, d,
                (unsigned long long)g->stats.alltoallv_posts,
                (unsigned long long)g->stats.sendrecv_posts,
                (unsigned long long)g->stats.ring_posts);
        rc = 1;
    }
    mp_set_value(p, g->level < 0 ? 1.0 : 0.0); /* carried by the world? */
    return rc;
}

static int rank_groups(int rank, int nranks, void *arg)
{
    const group_case_t *c = arg;
    nsp_comm_t         *comm;
    nsp_tree_t         *tree;
    int                 rc = cu_world_tree(&c->id, rank, nranks, 20.0, c->degrees, c->nlevels,
                                           &comm, &tree);

    if (rc != 0) {
        return rc;
    }
    nsp_log_set_level(NSP_LOG_NONE); /* the refusals below are logged */
    rc = check_lookups(tree, comm, c, rank, nranks);
    nsp_log_set_level(NSP_LOG_WARN);
    /* partitions one after another, on every rank in the same order */
    for (int p = 0; p < c->nparts && rc == 0; ++p) {
        rc = group_ops(tree, c, p, rank);
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    return rc;
}

static void test_groups(int nranks, group_case_t *c, const char *what)
{
    mp_result_t res;
    int         world = 0;

    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_groups, c, &c->id, &res);
    for (int r = 0; r < nranks; ++r) {
        for (int p = 0; p < c->nparts; ++p) {
            world += res.rank[r].value[p] > 0.5;
        }
    }
    tap_ok(mp_all_ok(&res) && world > 0,
           "%d ranks, %s: every group lookup matches the map; alltoallv, sendrecv, ring "
           "rotations (shifts 1, -1, 3, per-step byte counts) and %d steps in flight on %d "
           "partitions equal the reference (%d rank-groups over the world, %.2f s)",
           nranks, what, INFLIGHT, c->nparts, world, res.elapsed_s);
}

int main(void)
{
    group_case_t full   = {.nlevels = 4, .degrees = {1, 2, 4, 8}, .nparts = 5,
                           .parts = {{2, 2, 2, 2}, {4, 4}, {8}, {3, 3, 2}, {1, 5, 2}}};
    group_case_t sparse = {.nlevels = 2, .degrees = {1, 4}, .nparts = 4,
                           .parts = {{2, 2, 2, 2}, {4, 4}, {8}, {1, 1, 6}}};
    group_case_t six    = {.nlevels = 3, .degrees = {1, 3, 6}, .nparts = 4,
                           .parts = {{3, 3}, {2, 2, 2}, {6}, {4, 2}}};

    setenv("UCX_LOG_FILE", "stderr", 0);
    test_groups(8, &full, "degrees 1,2,4,8");
    test_groups(8, &sparse, "degrees 1,4 (degrees 2 and 8 over the world)");
    test_groups(6, &six, "degrees 1,3,6");
    return tap_done();
}
