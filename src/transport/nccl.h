/*
 * The NCCL backend (internal): GPU memory, one ncclComm_t per communicator,
 * stream-ordered posts. It implements the ops of transport.h; this header
 * adds what the public nsp_comm_from_nccl() and the tests need.
 *
 * How the ops map onto NCCL (docs/design/gpu.md has the long form):
 *   world_create   rank 0 calls ncclGetUniqueId; the id, with every rank's
 *                  "my CUDA device is usable" flag, goes round the
 *                  bootstrap's allgather; then ncclCommInitRankConfig with a
 *                  NON-BLOCKING config, polled with ncclCommGetAsyncError so
 *                  a rank that never joins gives NSP_ERR_TIMEOUT (and
 *                  ncclCommAbort) instead of a hang.
 *   world_wrap     an existing ncclComm_t: not owned, never finalized,
 *                  destroyed or aborted by nspcomm.
 *   split          the transport's split agreement (nsp_tp_split_agree),
 *                  then ncclCommSplit(color = rank0, key = rank). A group of
 *                  one rank gets no NCCL communicator (color
 *                  NCCL_SPLIT_NOCOLOR; when every group has one rank the
 *                  split is skipped): its operations are cudaMemcpyAsync.
 *                  NSPCOMM_NCCL_SELF=0 makes one-rank groups real NCCL
 *                  communicators too (perf/gpu_check.sh uses it to test
 *                  ncclCommSplit on one GPU).
 *   alltoallv      one ncclGroupStart/End of ncclSend/ncclRecv (zero counts
 *                  skipped, the self block a cudaMemcpyAsync), on the
 *                  caller's stream (NULL: the communicator's own stream),
 *                  then a cudaEvent recorded. ncclAlltoAll (NCCL >= 2.28.3)
 *                  carries the count check below, and the data when the
 *                  counts are uniform and NSPCOMM_NCCL_ALLTOALL=1 says every
 *                  rank's are (see nsp_nccl_uniform_count()).
 *   sendrecv       one group of ncclSend + ncclRecv (a ring cannot deadlock).
 *   request test   cudaEventQuery; while not ready, ncclCommGetAsyncError:
 *                  ncclRemoteError / ncclSystemError become
 *                  NSP_ERR_PEER_FAILED; a stall becomes NSP_ERR_TIMEOUT by
 *                  the generic request timeout. Freeing a request that did
 *                  not complete aborts its communicator (ncclCommAbort), so
 *                  a hung kernel does not block the stream forever.
 *   allgather,     host bytes through a small device buffer: pinned host
 *   barrier        staging, ncclAllGather on the communicator's own stream,
 *                  polled with the timeout (the bootstrap is gone by then).
 *   destroy        ncclCommFinalize polled with the timeout, then
 *                  ncclCommDestroy; ncclCommAbort after any error.
 *
 * Count check (NSPCOMM_NCCL_CHECK, default 1): NCCL cannot tell a receiver
 * that a sender sent another size (it hangs or truncates), so before the
 * data every rank sends each peer the byte count it is about to send (8
 * bytes per peer, stream-ordered before the data); the request compares
 * them with what it expects as soon as they land and fails with
 * NSP_ERR_MISMATCH instead of hanging. NSPCOMM_NCCL_CHECK=0 saves that small
 * exchange when the layouts are known to agree (nsp_a2a_post checks the
 * plan hash on its own).
 */
#ifndef NSP_TRANSPORT_NCCL_H_
#define NSP_TRANSPORT_NCCL_H_

#include "transport/transport.h"

#include <stddef.h>

/** The NCCL backend ops (only in libraries built --with-nccl). */
extern const nsp_tp_ops_t nsp_tp_nccl_ops;

/**
 * NCCL_VERSION_CODE nspcomm was compiled against and the one of the linked
 * library (ncclGetVersion). Either pointer may be NULL. Errors:
 * NSP_ERR_BACKEND.
 */
nsp_status_t nsp_nccl_versions(int *compiled, int *linked);

/**
 * ncclGetUniqueId into `id` (borrowed, `len` >= 128 bytes). Works without a
 * GPU (it only opens the bootstrap socket). Errors: NSP_ERR_INVALID_ARG,
 * NSP_ERR_BACKEND (NCCL's message inside).
 */
nsp_status_t nsp_nccl_unique_id(void *id, size_t len);

/**
 * The ncclComm_t behind a communicator of this backend (borrowed), or NULL
 * for a one-rank group without NCCL or a communicator of another backend.
 */
void *nsp_nccl_native(const nsp_tp_comm_t *comm);

/**
 * Is an alltoallv of `n` ranks uniform here: every send and receive count
 * equal to one value c > 0 and the blocks contiguous in rank order
 * (displacement j*c on both sides)? Then *count = c. Pure. Only a
 * necessary condition for ncclAlltoAll: every rank must be uniform with the
 * same c, which one rank cannot see, hence NSPCOMM_NCCL_ALLTOALL.
 */
int nsp_nccl_uniform_count(const nsp_tp_alltoallv_t *args, int n, size_t *count);

/**
 * Widest element (8, 4, 2 or 1 bytes) that divides `bytes` and the
 * addresses `a` and `b`: the NCCL datatype a byte count is moved as. Pure.
 */
size_t nsp_nccl_elem_width(size_t bytes, const void *a, const void *b);

#endif /* NSP_TRANSPORT_NCCL_H_ */
