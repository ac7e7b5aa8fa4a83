/*
 * Operations on a group of the tree (group.h): the all-to-all, one
 * send/receive pair and the ring step, by group index, on whichever
 * communicator nsp_tree_group_get() chose for the group.
 */
#include "nested_groups/group.h"

#include "common/log.h"
#include "nested_groups/tree.h"

#include <stdint.h>

int nsp_group_alltoallv_max_reqs(const nsp_group_t *g)
{
    return g->level >= 0 ? 1 : g->degree;
}

/* Free reqs[0..n) (abandoning them: only after a post failed). */
static void group_abandon(nsp_request_t **reqs, int n)
{
    for (int k = 0; k < n; ++k) {
        nsp_request_free(reqs[k]);
        reqs[k] = NULL;
    }
}

/* Over the world: peer i places ahead and behind at step i, then the self
 * part if it moves bytes. Sets *n to the requests posted, also on error. */
static nsp_status_t group_pairwise(nsp_group_t *g, const nsp_tp_alltoallv_t *a, uint32_t tag,
                                   void *stream, nsp_request_t **reqs, int *n)
{
    const char *send = a->sendbuf;
    char       *recv = a->recvbuf;
    int         d = g->degree, me = g->index;

    *n = 0;
    for (int i = 1; i <= d; ++i) {
        int to = (me + i) % d, from = (me - i % d + d) % d;
        if (i == d && a->sendcounts[me] == 0 && a->recvcounts[me] == 0) {
            break; /* no self part */
        }
        NSP_CHECK(g->tp->ops->sendrecv_post(g->tp, send + a->sdispls[to], a->sendcounts[to],
                                            g->base + to, recv + a->rdispls[from],
                                            a->recvcounts[from], g->base + from, tag, stream,
                                            &reqs[*n]));
        ++*n;
    }
    return NSP_OK;
}

nsp_status_t nsp_group_alltoallv_post(nsp_group_t *g, const nsp_tp_alltoallv_t *args,
                                      uint32_t tag, void *stream, nsp_request_t **reqs,
                                      int *nreqs)
{
    nsp_status_t status;
    int          n = 0;

    if (g->level >= 0) {
        NSP_CHECK(g->tp->ops->alltoallv_post(g->tp, args, tag, stream, &reqs[0]));
        n = 1;
    } else {
        status = group_pairwise(g, args, tag, stream, reqs, &n);
        if (status != NSP_OK) {
            group_abandon(reqs, n);
            return status;
        }
    }
    for (int j = 0; j < g->degree; ++j) {
        g->stats.bytes_sent += args->sendcounts[j];
    }
    ++g->stats.alltoallv_posts;
    *nreqs = n;
    return NSP_OK;
}

nsp_status_t nsp_group_alltoallv_iov_post(nsp_group_t *g, const nsp_tp_alltoallv_iov_t *args,
                                          uint32_t tag, void *stream, nsp_request_t **req)
{
    if (g->level < 0) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "group of degree %d at rank %d: runs go only on "
                         "a tree group's own communicator", g->degree, g->rank0);
    }
    NSP_CHECK(g->tp->ops->alltoallv_iov_post(g->tp, args, tag, stream, req));
    for (int j = 0; j < g->degree; ++j) {
        for (size_t k = args->sfirst[j]; k < args->sfirst[j + 1]; ++k) {
            g->stats.bytes_sent += args->send[k].len;
        }
    }
    ++g->stats.alltoallv_posts;
    return NSP_OK;
}

nsp_status_t nsp_group_sendrecv_post(nsp_group_t *g, const void *sendbuf, size_t sendbytes,
                                     int to, void *recvbuf, size_t recvbytes, int from,
                                     uint32_t tag, void *stream, nsp_request_t **req)
{
    if (to < 0 || to >= g->degree || from < 0 || from >= g->degree) {
        return nsp_error(NSP_ERR_INVALID_ARG, "group of degree %d at rank %d: sendrecv to "
                         "index %d from index %d", g->degree, g->rank0, to, from);
    }
    NSP_CHECK(g->tp->ops->sendrecv_post(g->tp, sendbuf, sendbytes, g->base + to, recvbuf,
                                        recvbytes, g->base + from, tag, stream, req));
    g->stats.bytes_sent += sendbytes;
    ++g->stats.sendrecv_posts;
    return NSP_OK;
}

/* Two byte ranges overlap. */
static int ranges_overlap(const void *a, size_t abytes, const void *b, size_t bbytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;

    return abytes > 0 && bbytes > 0 && x < y + bbytes && y < x + abytes;
}

/* The tag of the group's next ring step (group.h: label, degree, sequence). */
static uint32_t ring_tag(const nsp_group_t *g, uint32_t label)
{
    uint32_t seq = (label << 20) | (((uint32_t)g->degree & 0xffu) << 12) |
                   (g->ring_seq % NSP_GROUP_RING_INFLIGHT);

    return NSP_TP_TAG(NSP_TP_TAG_CLASS_RING, seq);
}

nsp_status_t nsp_group_ring_post(nsp_group_t *g, const nsp_group_ring_step_t *step,
                                 void *stream, nsp_request_t **req)
{
    int to, from;

    if (g == NULL || step == NULL || req == NULL || step->label >= NSP_GROUP_RING_LABELS ||
        (step->sendbytes > 0 && step->sendbuf == NULL) ||
        (step->recvbytes > 0 && step->recvbuf == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ring step: NULL group, step, buffer or "
                         "request, or label %u (at most %u)", step != NULL ? step->label : 0,
                         NSP_GROUP_RING_LABELS - 1);
    }
    if (ranges_overlap(step->sendbuf, step->sendbytes, step->recvbuf, step->recvbytes)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "ring step: send and receive buffers overlap (%zu bytes at %p and "
                         "%zu at %p): use two buffers",
                         step->sendbytes, step->sendbuf, step->recvbytes, step->recvbuf);
    }
    to   = nsp_ring_index(g->index, step->shift, g->degree);
    from = nsp_ring_index(g->index, -(step->shift % g->degree), g->degree);
    NSP_CHECK(g->tp->ops->sendrecv_post(g->tp, step->sendbuf, step->sendbytes, g->base + to,
                                        step->recvbuf, step->recvbytes, g->base + from,
                                        ring_tag(g, step->label), stream, req));
    ++g->ring_seq;
    g->stats.bytes_sent += step->sendbytes;
    ++g->stats.ring_posts;
    return NSP_OK;
}
