/*
 * What the host path (nested_a2a.c) and the CUDA path (nested_a2a_cuda.c)
 * of the nested all-to-all do alike: the checks and defaults of a post, the
 * agreement over the world, where a level's data sits, and the transport
 * requests of a level. Which communicator carries a level is the tree's
 * decision (nsp_tree_group_get, nested_groups/group.h). Defined in
 * nested_a2a.c (built in every configuration with the comm layer). `what`
 * arguments start error messages ("nested all-to-all", "... (cuda)").
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_COMMON_H_
#define NSP_ATTN_SP_NESTED_A2A_COMMON_H_

#include "nspcomm.h"
#include "attn_sp/layout.h"
#include "nested_groups/group.h"
#include "streams/levels.h"
#include "transport/comm.h"

#include <stddef.h>
#include <stdint.h>

/** A post's arguments as both paths use them, from nsp_a2a_prepare(). */
typedef struct nsp_a2a_prep {
    nsp_layout_info_t  info;
    nsp_comm_t        *world;    /* the tree's world, checked against the layout */
    int                serial;   /* NSP_A2A_FIELD_SERIAL (default 0) */
    int                check;    /* NSP_A2A_FIELD_CHECK (default 1) */
    nsp_a2a_replicas_t replicas; /* NSP_A2A_FIELD_REPLICAS (default REPLICAS_FIRST) */
    int                mapped;   /* NSP_A2A_FIELD_MAPPED (default 0): 0 or 1 */
    int64_t            head_rows; /* rows of D of the head-sharded block */
} nsp_a2a_prep_t;

/**
 * The start of a post on either path: NULL arguments, the layout's info,
 * the parameter checks both paths make (elem_size, heads, head_dim,
 * direction, REPLICAS_SUM_F32 on float32; nsp_a2a_check_bufs checks src and
 * dst), the world of `tree` (the layout must be for this rank of this
 * world) and the optional fields with their defaults. Local: no traffic.
 */
nsp_status_t nsp_a2a_prepare(nsp_tree_t *tree, const nsp_layout_t *layout,
                             const nsp_a2a_params_t *params, const char *what,
                             nsp_a2a_prep_t *prep);

/** src and dst for a rank holding data (tokens or head rows) must not be
 *  NULL: NSP_ERR_INVALID_ARG. */
nsp_status_t nsp_a2a_check_bufs(const nsp_a2a_prep_t *prep, const void *src, const void *dst,
                                const char *what);

/** Allgather `hash` over `world` and compare (nsp_a2a_compare_hashes names
 *  the ranks that differ). Collective. */
nsp_status_t nsp_a2a_allgather_check(nsp_comm_t *world, uint64_t hash, const char *what);

/** When prep->check: the agreement of an exchange (nsp_a2a_check_hash of
 *  the round's plan hash and the parameters, mixed with the world's next
 *  operation number) over the world. Collective. */
nsp_status_t nsp_a2a_agree(const nsp_a2a_prep_t *prep, const nsp_a2a_params_t *params,
                           const char *what);

/**
 * Where level `lv` reads and writes (bytes): s2h reads its chunks of the
 * sequence-sharded buffer [T_local, heads, D] at lv->local_offset tokens and
 * writes the head-sharded block at hs->row_offset rows of D; h2s the other
 * way round. row_bytes = D * elem_size.
 */
void nsp_a2a_level_bufs(nsp_a2a_dir_t dir, const char *src, char *dst, int heads,
                        size_t row_bytes, const nsp_layout_level_t *lv,
                        const nsp_layout_heads_t *hs, const char **level_src,
                        char **level_dst);

/** Sum of v[n]. */
size_t nsp_a2a_sum(const size_t *v, int n);

/** The transport requests of one level: reqs[n] in flight (NULL once done),
 *  seen[n] their progress counters at the last test. */
typedef struct nsp_a2a_tps {
    nsp_request_t **reqs;
    uint64_t       *seen;
    int             n;
} nsp_a2a_tps_t;

/** Room for `max` requests. Errors: NSP_ERR_NO_MEMORY (no message: the
 *  caller says what it was allocating). */
nsp_status_t nsp_a2a_tps_alloc(nsp_a2a_tps_t *t, size_t max);

/** Free every request (abandoning what is still in flight); keep the room. */
void nsp_a2a_tps_reset(nsp_a2a_tps_t *t);

/** Free every request (abandoning what is still in flight) and the room. */
void nsp_a2a_tps_free(nsp_a2a_tps_t *t);

/**
 * Post one exchange of a level on its group (nsp_group_alltoallv_post: one
 * alltoallv on a tree group, pairwise sendrecv steps over the world).
 * sb/sd/rb/rd [d]: bytes and displacements per group index. `stream`: the
 * transport's stream (NULL on the host). Appends the requests to t (room
 * for nsp_group_alltoallv_max_reqs more).
 */
nsp_status_t nsp_a2a_tps_post(nsp_a2a_tps_t *t, nsp_group_t *group, const void *send,
                              const size_t *sb, const size_t *sd, void *recv, const size_t *rb,
                              const size_t *rd, uint32_t tag, void *stream);

/**
 * Test every request of t: adds what they progressed (and one per request
 * done) to *progress, clears *idle when one in flight is not idle. NSP_OK
 * when all are done, NSP_INPROGRESS, or the error of a request (decided
 * and logged by the transport).
 */
nsp_status_t nsp_a2a_tps_test(nsp_a2a_tps_t *t, uint64_t *progress, int *idle);

/**
 * The test of a level's public request `req` (level `level`): progress
 * every level's queue, count the steps that advanced into *progress, and
 * report the level's status. *idle is set before the queues run (their
 * steps clear it) and req->idle says whether nothing moved.
 */
nsp_status_t nsp_a2a_queues_test(nsp_levels_t *queues, int level, uint64_t *progress,
                                 int *idle, nsp_request_t *req);

#endif /* NSP_ATTN_SP_NESTED_A2A_COMMON_H_ */
