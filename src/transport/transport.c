/*
 * The helpers any backend may use to implement its small collectives
 * (allgather, barrier, split agreement) on top of its own alltoallv_post.
 * The registry of backends is registry.c (it names the backends, which call
 * these: no call goes back).
 */
#include "config.h"

#include "transport/transport.h"

#include "common/log.h"

#include <stdlib.h>

nsp_status_t nsp_tp_alltoallv(nsp_tp_comm_t *comm, const nsp_tp_alltoallv_t *args,
                              uint32_t tag)
{
    nsp_request_t *req = NULL;
    nsp_status_t   status;

    NSP_CHECK(comm->ops->alltoallv_post(comm, args, tag, NULL, &req));
    status = nsp_request_wait(req);
    nsp_request_free(req);
    return status;
}

/* The next internal tag of a communicator: collectives run in one order on
 * every rank, so the sequence agrees everywhere. */
static uint32_t tp_internal_tag(nsp_tp_comm_t *comm)
{
    uint32_t seq = comm->coll_seq++;

    return NSP_TP_TAG_INTERNAL | (seq & 0x7fffffffu);
}

nsp_status_t nsp_tp_allgather_by_alltoallv(nsp_tp_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t bytes)
{
    size_t            *arrays;
    nsp_tp_alltoallv_t args;
    nsp_status_t       status;
    int                n = comm->size;

    /* [4][n]: sendcounts, sdispls (all 0: every peer gets the same bytes),
     * recvcounts, rdispls (rank order). */
    arrays = calloc(4 * (size_t)n, sizeof(*arrays));
    if (arrays == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "allgather: no memory for %d counts", 4 * n);
    }
    for (int j = 0; j < n; ++j) {
        arrays[j]         = bytes;
        arrays[2 * n + j] = bytes;
        arrays[3 * n + j] = (size_t)j * bytes;
    }
    args.sendbuf    = sendbuf;
    args.sendcounts = arrays;
    args.sdispls    = arrays + n;
    args.recvbuf    = recvbuf;
    args.recvcounts = arrays + 2 * n;
    args.rdispls    = arrays + 3 * n;
    status          = nsp_tp_alltoallv(comm, &args, tp_internal_tag(comm));
    free(arrays);
    return status;
}

nsp_status_t nsp_tp_barrier_by_alltoallv(nsp_tp_comm_t *comm)
{
    char none = 0;

    return nsp_tp_allgather_by_alltoallv(comm, &none, &none, 0);
}

/* What each parent rank says about the group it joins. */
typedef struct tp_split_vote {
    int32_t  rank0;
    int32_t  size;
    uint32_t key;
} tp_split_vote_t;

nsp_status_t nsp_tp_split_agree(nsp_tp_comm_t *parent, int rank0, int size, uint32_t key,
                                uint32_t *key_max)
{
    tp_split_vote_t  mine = {rank0, size, key};
    tp_split_vote_t *votes;
    nsp_status_t     status;
    uint32_t         max  = 0;

    votes = calloc((size_t)parent->size, sizeof(*votes));
    if (votes == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "split: no memory for %d votes", parent->size);
    }
    NSP_CHECK_GOTO(parent->ops->allgather(parent, &mine, votes, sizeof(mine)), status,
                   out_free_votes);
    for (int j = 0; j < parent->size; ++j) {
        max = votes[j].key > max ? votes[j].key : max;
    }
    for (int j = rank0; j < rank0 + size; ++j) {
        if (votes[j].rank0 != rank0 || votes[j].size != size) {
            status = nsp_error(NSP_ERR_MISMATCH,
                               "split: rank %d joins ranks [%d, %d) but rank %d, a member of "
                               "that group, joins [%d, %d); every rank of a group must pass "
                               "the same range (same degrees on every rank)",
                               parent->rank, rank0, rank0 + size, j, (int)votes[j].rank0,
                               (int)(votes[j].rank0 + votes[j].size));
            goto out_free_votes;
        }
    }
    *key_max = max;
    status   = NSP_OK;
out_free_votes:
    free(votes);
    return status;
}
