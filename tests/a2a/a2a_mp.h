/*
 * What the multi-rank all-to-all tests (test_a2a_mp, test_a2a_mapped) pass
 * to every forked rank and what a rank holds while it runs.
 */
#ifndef NSP_TESTS_A2A_MP_H_
#define NSP_TESTS_A2A_MP_H_

#include "nspcomm.h"

#include <stdint.h>

/* One case, the same in every rank (copied into the child at fork). */
typedef struct mp_case {
    nsp_unique_id_t id;        /* the world's rendezvous */
    int             kind;      /* the test's CASE_* */
    uint64_t        seed;      /* of the random batches */
    int             nplans;    /* batches to run */
    double          timeout_s; /* NSPCOMM_TIMEOUT of the world */
} mp_case_t;

/* One rank's world and tree. */
typedef struct rank_ctx {
    nsp_comm_t *comm;
    nsp_tree_t *tree;
    int         rank, nranks;
    int         checks; /* levels and buffers compared */
} rank_ctx_t;

#endif /* NSP_TESTS_A2A_MP_H_ */
