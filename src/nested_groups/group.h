/*
 * Groups of the nested tree (internal): the ranks an exchange runs on, the
 * communicator that carries them, and the operations on them.
 *
 * A group is the world ranks [rank0, rank0 + degree) as seen from one of
 * them. nsp_tree_group_get() is the one place that decides how a group is
 * carried: by the tree's own sub-communicator when the tree has a level of
 * that degree whose group starts at rank0, else by the world (peers
 * addressed by world rank, an all-to-all as pairwise sends). The nested
 * all-to-all and ring attention both take their groups from it, so a group
 * a plan needs and the tree lacks gets the same decision in both.
 *
 * Ownership: the tree owns its groups, level groups and groups over the
 * world alike; a group handed out stays valid (the same pointer for the same
 * (rank0, degree)) until nsp_tree_destroy(). Its communicator is borrowed
 * from the tree (or the tree's world). Fields are read-only outside group.c
 * and tree.c. Like the tree, a group is driven by one thread.
 */
#ifndef NSP_NESTED_GROUPS_GROUP_H_
#define NSP_NESTED_GROUPS_GROUP_H_

#include "nspcomm.h"
#include "transport/transport.h"

#include <stddef.h>
#include <stdint.h>

/** What was posted on a group (counted on success; this rank only). */
typedef struct nsp_group_stats {
    uint64_t alltoallv_posts;  /**< nsp_group_alltoallv_post calls */
    uint64_t sendrecv_posts;   /**< nsp_group_sendrecv_post calls */
    uint64_t ring_posts;       /**< nsp_group_ring_post calls */
    uint64_t bytes_sent;       /**< bytes this rank handed to the transport */
} nsp_group_stats_t;

/** One group of the tree, seen from this rank (owned by the tree). */
typedef struct nsp_group {
    nsp_tp_comm_t    *tp;       /**< carrier: the level's sub-communicator or the world */
    int               rank0;    /**< world rank of index 0 */
    int               degree;   /**< ranks of the group */
    int               index;    /**< this rank's index: world rank - rank0 */
    int               base;     /**< rank map: index i is tp rank base + i (0 on the level's
                                     own communicator, rank0 on the world) */
    int               level;    /**< the tree level carrying it, or -1: over the world */
    uint32_t          ring_seq; /**< ring steps posted on the group so far: their tags */
    nsp_group_stats_t stats;
} nsp_group_t;

/** Ring tags: NSP_TP_TAG_CLASS_RING, then the step's 4-bit label (bits
 *  20..23), the degree modulo 256 (12..19: groups sharing the world differ)
 *  and the group's ring sequence modulo 4096 (0..11). */
#define NSP_GROUP_RING_INFLIGHT 4096u
#define NSP_GROUP_RING_LABELS   16u

/**
 * This rank's group [rank0, rank0 + degree) of `tree`, made on first use
 * (the tree owns it, see above). Local: no traffic.
 * Errors: NSP_ERR_INVALID_ARG (NULL; the range leaves the world or does not
 * hold this rank: the message names both), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_tree_group_get(nsp_tree_t *tree, int rank0, int degree, nsp_group_t **group);

/** The group of this rank at `level` (owned by the tree, as above).
 *  Errors: NSP_ERR_INVALID_ARG (NULL, level out of range). */
nsp_status_t nsp_tree_level_group(nsp_tree_t *tree, int level, nsp_group_t **group);

/** Most requests nsp_group_alltoallv_post() makes on `g`: 1 on the level's
 *  own communicator, `degree` over the world. */
int nsp_group_alltoallv_max_reqs(const nsp_group_t *g);

/**
 * Post a variable-length all-to-all over the group; counts and
 * displacements ([degree] bytes each, by group index) and buffers as
 * nsp_tp_alltoallv_t, borrowed until every request completes. On the
 * level's own communicator: one alltoallv; over the world: one sendrecv per
 * peer (step i sends to index me+i and receives from me-i, so every pair
 * meets once) and one for the self part when its counts are not 0. `tag`
 * as the transport's (the caller's class and sequence). On success reqs[0..
 * *nreqs) (room for nsp_group_alltoallv_max_reqs) are owned by the caller;
 * on error nothing is left posted or set.
 * Errors: those of the transport's alltoallv_post / sendrecv_post.
 */
nsp_status_t nsp_group_alltoallv_post(nsp_group_t *g, const nsp_tp_alltoallv_t *args,
                                      uint32_t tag, void *stream, nsp_request_t **reqs,
                                      int *nreqs);

/**
 * Post an all-to-all of scattered runs over the group (the transport's
 * alltoallv_iov_post; runs by group index, borrowed until the request
 * completes). Only on the level's own communicator (g->level >= 0): over
 * the world it is NSP_ERR_UNSUPPORTED (callers pack there). On success
 * *req is owned by the caller. Errors: those of alltoallv_iov_post.
 */
nsp_status_t nsp_group_alltoallv_iov_post(nsp_group_t *g, const nsp_tp_alltoallv_iov_t *args,
                                          uint32_t tag, void *stream, nsp_request_t **req);

/**
 * Post one send to group index `to` and one receive from index `from` as
 * one operation (either may be this rank: a copy), buffers borrowed until
 * the request completes, `tag` as the transport's. On success *req is owned
 * by the caller. Errors: NSP_ERR_INVALID_ARG (an index outside [0, degree)),
 * those of the transport's sendrecv_post.
 */
nsp_status_t nsp_group_sendrecv_post(nsp_group_t *g, const void *sendbuf, size_t sendbytes,
                                     int to, void *recvbuf, size_t recvbytes, int from,
                                     uint32_t tag, void *stream, nsp_request_t **req);

/** One ring step: what goes to index (me + shift) mod degree and what comes
 *  from index (me - shift) mod degree. Byte counts are per step and per
 *  direction: a rank may send another count than it receives (ring
 *  attention's blocks differ in size), as long as each receiver expects what
 *  its sender sends. */
typedef struct nsp_group_ring_step {
    const void *sendbuf;
    size_t      sendbytes;
    void       *recvbuf;
    size_t      recvbytes;  /**< what the rank `shift` behind sends at this step */
    int         shift;      /**< any int, reduced modulo the degree */
    uint32_t    label;      /**< < NSP_GROUP_RING_LABELS: what the step is, in the tag, so a
                                 rank posting another kind of step at this point does not
                                 match */
} nsp_group_ring_step_t;

/**
 * The ring implementation: post one step around the group. The tag comes
 * from the group's ring sequence (taken only when the post succeeded), so
 * every rank of a ring posts its steps on the group in the same order; up
 * to NSP_GROUP_RING_INFLIGHT steps may be in flight. Buffers borrowed until
 * the request completes; on success *req is owned by the caller.
 * Errors: NSP_ERR_INVALID_ARG (NULL, a label out of range, send and receive
 * ranges that overlap), those of the transport's sendrecv_post; a sender
 * whose byte count differs from recvbytes fails the request with
 * NSP_ERR_MISMATCH.
 */
nsp_status_t nsp_group_ring_post(nsp_group_t *g, const nsp_group_ring_step_t *step,
                                 void *stream, nsp_request_t **req);

#endif /* NSP_NESTED_GROUPS_GROUP_H_ */
