/*
 * Ring exchange on one level of the tree: every rank of a group sends to the
 * rank `shift` places ahead and receives from the one `shift` places behind,
 * one transport sendrecv per step, the step number as the tag.
 */
#include "nested_groups/tree.h"

#include "common/log.h"

#include <stdint.h>

/* The index that sends to `index` for this shift: shift places behind.
 * Reducing the shift first keeps -shift in range for any int. */
static int ring_from(int index, int shift, int degree)
{
    return nsp_ring_index(index, -(shift % degree), degree);
}

nsp_status_t nsp_ring_peers(const nsp_tree_t *tree, int level, int shift, int *send_to,
                            int *recv_from)
{
    nsp_tp_comm_t *comm;

    NSP_CHECK(nsp_tree_level_tp(tree, level, &comm));
    if (send_to != NULL) {
        *send_to = comm->world_rank0 + nsp_ring_index(comm->rank, shift, comm->size);
    }
    if (recv_from != NULL) {
        *recv_from = comm->world_rank0 + ring_from(comm->rank, shift, comm->size);
    }
    return NSP_OK;
}

/* Two byte ranges overlap. */
static int ring_overlap(const void *a, const void *b, size_t bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

    return bytes > 0 && x < y + bytes && y < x + bytes;
}

nsp_status_t nsp_ring_post(nsp_tree_t *tree, int level, const void *sendbuf, void *recvbuf,
                           size_t bytes, int shift, uint32_t step, void *stream,
                           nsp_request_t **req)
{
    nsp_tp_comm_t *comm;
    int            dst, src;

    NSP_CHECK(nsp_tree_level_tp(tree, level, &comm));
    if (req == NULL || (bytes > 0 && (sendbuf == NULL || recvbuf == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_ring_post: NULL buffer or request");
    }
    if (ring_overlap(sendbuf, recvbuf, bytes)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_ring_post: send and receive buffers overlap (%zu bytes at %p and "
                         "%p): use two buffers",
                         bytes, sendbuf, recvbuf);
    }
    dst = nsp_ring_index(comm->rank, shift, comm->size);
    src = ring_from(comm->rank, shift, comm->size);
    return comm->ops->sendrecv_post(comm, sendbuf, bytes, dst, recvbuf, bytes, src,
                                    NSP_TP_TAG(NSP_TP_TAG_CLASS_RING, step), stream, req);
}

nsp_status_t nsp_ring_step(nsp_tree_t *tree, int level, const void *sendbuf, void *recvbuf,
                           size_t bytes, int shift, uint32_t step)
{
    nsp_request_t *req = NULL;
    nsp_status_t   status;

    NSP_CHECK(nsp_ring_post(tree, level, sendbuf, recvbuf, bytes, shift, step, NULL, &req));
    status = nsp_request_wait(req);
    nsp_request_free(req);
    return status;
}
