/*
 * Ring exchange on tree levels over real processes: full rotations (after k
 * steps of shift s a rank holds the block of the rank k*s places behind it
 * in its group), shifts +1, -1 and 3, several steps in flight with distinct
 * step tags, degree-1 copies, peers queries, and refusals (overlapping
 * buffers, a byte count the neighbour disagrees with).
 */
#include "comm_util.h"
#include "../mp.h"
#include "../tap.h"
#include "nested_groups/tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TIMEOUT_S 50.0
#define BLOCK         (48 * 1024 + 7) /* bytes per ring block: odd, eager/rndv boundary */
#define INFLIGHT      4

typedef struct ring_case {
    nsp_unique_id_t id;
    int             nlevels;
    int             degrees[8];
} ring_case_t;

/* The block that originates on world rank `owner` for test `tag`. */
static void fill_block(unsigned char *buf, int tag, int owner)
{
    cu_fill(buf, BLOCK, tag, owner, 0);
}

static int check_block(const unsigned char *buf, int tag, int owner, const char *what)
{
    long bad = cu_check(buf, BLOCK, tag, owner, 0);

    if (bad >= 0) {
        mp_note("%s: byte %ld differs from world rank %d's block", what, bad, owner);
        return 1;
    }
    return 0;
}

/* Rotate d-1 steps with `shift`, checking the holder after every step. */
static int full_rotation(nsp_tree_t *tree, int level, int shift, int tag)
{
    unsigned char *a = malloc(BLOCK), *b = malloc(BLOCK);
    int            d, r0, idx, rc = 0;

    nsp_tree_degree(tree, level, &d);
    nsp_tree_group(tree, level, &r0, &idx);
    fill_block(a, tag, r0 + idx);
    for (int k = 1; k < d + 1 && rc == 0; ++k) {
        nsp_status_t st = nsp_ring_step(tree, level, a, b, BLOCK, shift, (uint32_t)(tag + k));
        char         what[96];
        /* After k steps of `shift` this rank holds the block of index i - k*shift. */
        int owner = r0 + nsp_ring_index(idx, (int)(-(long long)k * shift % d), d);
        if (st != NSP_OK) {
            rc = cu_fail("nsp_ring_step", st);
            break;
        }
        snprintf(what, sizeof(what), "degree %d shift %d step %d", d, shift, k);
        rc = check_block(b, tag, owner, what);
        unsigned char *t = a;
        a                = b;
        b                = t;
    }
    free(a);
    free(b);
    return rc;
}

/* INFLIGHT independent steps posted before any wait (distinct step tags),
 * each sending a different block; waited newest first. */
static int steps_in_flight(nsp_tree_t *tree, int level, int tag)
{
    unsigned char *send[INFLIGHT], *recv[INFLIGHT];
    nsp_request_t *reqs[INFLIGHT] = {NULL};
    int            d, r0, idx, rc = 0, from;

    nsp_tree_degree(tree, level, &d);
    nsp_tree_group(tree, level, &r0, &idx);
    nsp_ring_peers(tree, level, 1, NULL, &from);
    for (int k = 0; k < INFLIGHT; ++k) {
        send[k] = malloc(BLOCK);
        recv[k] = malloc(BLOCK);
        fill_block(send[k], tag + k, r0 + idx);
        nsp_status_t st = nsp_ring_post(tree, level, send[k], recv[k], BLOCK, 1,
                                        (uint32_t)(tag + k), NULL, &reqs[k]);
        if (st != NSP_OK) {
            rc = cu_fail("nsp_ring_post", st);
        }
    }
    for (int k = INFLIGHT - 1; k >= 0; --k) {
        if (reqs[k] != NULL) {
            nsp_status_t st = nsp_request_wait(reqs[k]);
            if (st != NSP_OK && rc == 0) {
                rc = cu_fail("wait", st);
            }
            if (rc == 0) {
                rc = check_block(recv[k], tag + k, from, "in flight");
            }
            nsp_request_free(reqs[k]);
        }
        free(send[k]);
        free(recv[k]);
    }
    return rc;
}

static int check_peers(nsp_tree_t *tree, int level, int rank)
{
    int d, r0, idx, to, from;

    nsp_tree_degree(tree, level, &d);
    nsp_tree_group(tree, level, &r0, &idx);
    for (int shift = -3; shift <= 3; ++shift) {
        nsp_ring_peers(tree, level, shift, &to, &from);
        if (to != r0 + ((idx + shift) % d + d) % d || from != r0 + ((idx - shift) % d + d) % d) {
            mp_note("rank %d level %d shift %d: peers %d/%d", rank, level, shift, to, from);
            return 1;
        }
    }
    return 0;
}

static int rank_ring(int rank, int nranks, void *arg)
{
    const ring_case_t *c = arg;
    nsp_comm_t        *comm;
    nsp_tree_t        *tree;
    int                rc = cu_world_tree(&c->id, rank, nranks, 20.0, c->degrees, c->nlevels,
                                          &comm, &tree);

    if (rc != 0) {
        return rc;
    }
    /* Levels in the agreed (ascending) order, every rank the same steps. */
    for (int l = 0; l < c->nlevels && rc == 0; ++l) {
        rc = check_peers(tree, l, rank);
        if (rc == 0) {
            rc = full_rotation(tree, l, 1, 1000 * (l + 1));
        }
        if (rc == 0) {
            rc = full_rotation(tree, l, -1, 1000 * (l + 1) + 100);
        }
        if (rc == 0) {
            rc = full_rotation(tree, l, 3, 1000 * (l + 1) + 200);
        }
        if (rc == 0) {
            rc = steps_in_flight(tree, l, 1000 * (l + 1) + 300);
        }
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    return rc;
}

static void test_ring(int nranks, int nlevels, const int *degrees, const char *what)
{
    ring_case_t c = {.nlevels = nlevels};
    mp_result_t res;

    memcpy(c.degrees, degrees, sizeof(int) * (size_t)nlevels);
    mp_run_uid(nranks, RUN_TIMEOUT_S, rank_ring, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res), "%d ranks, %s: rotations with shifts +1, -1, 3 and %d steps in "
                            "flight on every level (%.2f s)",
           nranks, what, INFLIGHT, res.elapsed_s);
}

/* Refusals: overlapping buffers; rank 1 sends fewer bytes than rank 0 expects. */
static int rank_ring_errors(int rank, int nranks, void *arg)
{
    const ring_case_t *c   = arg;
    nsp_comm_t        *comm;
    nsp_tree_t        *tree;
    nsp_request_t     *req = NULL;
    unsigned char      buf[256] = {0};
    int                fake_stream;
    int                rc = cu_world_tree(&c->id, rank, nranks, 5.0, c->degrees, c->nlevels,
                                          &comm, &tree);
    nsp_status_t       st;

    if (rc != 0) {
        return rc;
    }
    if (nsp_ring_post(tree, 1, buf, buf + 8, 64, 1, 0, NULL, &req) != NSP_ERR_INVALID_ARG ||
        nsp_ring_post(tree, 7, buf, buf + 128, 64, 1, 0, NULL, &req) != NSP_ERR_INVALID_ARG ||
        nsp_ring_post(tree, 1, buf, buf + 128, 64, 1, 0, &fake_stream, &req) !=
            NSP_ERR_UNSUPPORTED ||
        req != NULL) {
        mp_note("overlap / bad level / stream on ucx not refused");
        rc = 2;
    }
    /* Level 1 has degree 2: rank 0 and 1 exchange; rank 1 sends 32, rank 0 expects 64. */
    st = nsp_ring_post(tree, 1, buf, buf + 128, rank == 1 ? 32 : 64, 1, 9, NULL, &req);
    if (st == NSP_OK) {
        st = nsp_request_wait(req);
        nsp_request_free(req);
    }
    if (rc == 0 && rank == 0 && st != NSP_ERR_MISMATCH) {
        rc = cu_fail("rank 0 expected MISMATCH", st);
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    return rc;
}

static void test_ring_errors(void)
{
    ring_case_t c = {.nlevels = 2, .degrees = {1, 2}};
    mp_result_t res;

    mp_run_uid(2, RUN_TIMEOUT_S, rank_ring_errors, &c, &c.id, &res);
    tap_ok(mp_all_ok(&res), "ring refuses overlapping buffers, a bad level and a stream on "
                            "ucx; a byte count the neighbour disagrees with is MISMATCH");
}

int main(void)
{
    static const int d8[] = {1, 2, 4, 8}, d6[] = {1, 3, 6}, d4[] = {1, 2};

    setenv("UCX_LOG_FILE", "stderr", 0);
    test_ring(8, 4, d8, "degrees 1,2,4,8");
    test_ring(6, 3, d6, "degrees 1,3,6");
    test_ring(4, 2, d4, "degrees 1,2 (forest)");
    test_ring_errors();
    return tap_done();
}
