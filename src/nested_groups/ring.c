/*
 * The public ring exchange on one level of the tree (nsp_ring_*): the
 * level's group and its ring step (group.c, the one ring implementation),
 * the same byte count each way, the step number's low bits as the label.
 */
#include "nested_groups/tree.h"

#include "common/log.h"
#include "nested_groups/group.h"

#include <stdint.h>

nsp_status_t nsp_ring_peers(const nsp_tree_t *tree, int level, int shift, int *send_to,
                            int *recv_from)
{
    int rank0, index, degree;

    NSP_CHECK(nsp_tree_group(tree, level, &rank0, &index));
    NSP_CHECK(nsp_tree_degree(tree, level, &degree));
    if (send_to != NULL) {
        *send_to = rank0 + nsp_ring_index(index, shift, degree);
    }
    if (recv_from != NULL) {
        *recv_from = rank0 + nsp_ring_index(index, -(shift % degree), degree);
    }
    return NSP_OK;
}

nsp_status_t nsp_ring_post(nsp_tree_t *tree, int level, const void *sendbuf, void *recvbuf,
                           size_t bytes, int shift, uint32_t step, void *stream,
                           nsp_request_t **req)
{
    nsp_group_t          *g;
    nsp_group_ring_step_t st = {.sendbuf = sendbuf, .sendbytes = bytes, .recvbuf = recvbuf,
                                .recvbytes = bytes, .shift = shift,
                                .label = step % NSP_GROUP_RING_LABELS};

    NSP_CHECK(nsp_tree_level_group(tree, level, &g));
    return nsp_group_ring_post(g, &st, stream, req);
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
