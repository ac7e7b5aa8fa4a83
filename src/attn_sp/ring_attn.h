/*
 * Ring attention of one ring level of one rank (docs/design/attention.md §3),
 * the part of nested attention that runs between a ring level's
 * sequence-to-head and head-to-sequence.
 *
 * Decomposition of a ring group of degree d = u * r at rank0 (the layout's
 * rules, include/nspcomm.h section 7): index i of the group is ring index
 * j = i / u and Ulysses index i % u. After the Ulysses all-to-all inside
 * ranks [rank0 + j*u, rank0 + (j+1)*u), the rank holds, for its share of the
 * heads, zigzag chunks j and 2r-1-j of every sequence of the group whole:
 *
 *   block of ring member m   [T_m, heads, D]   sequence by sequence, chunk m
 *                                               then chunk 2r-1-m
 *
 * The r ranks rank0 + m*u + (i % u), m = 0..r-1, form the ring: KV blocks
 * move to ring index j+1 each step, the ring step of the level's group
 * (nsp_tree_group_get decides its communicator) with shift u.
 *
 * Forward, step t = 0..r-1, src = (j - t) mod r (whose KV block is held):
 *   t = 0      one causal kernel call over the rank's own block: per
 *              sequence its two chunks are consecutive rows and chunk j
 *              precedes chunk 2r-1-j, so the causal mask of the
 *              concatenation is exactly the zigzag mask;
 *   src < j    both query chunks see chunk src of the KV block fully: per
 *              sequence one full (non-causal) call, queries = both chunks,
 *              keys = chunk src; chunk 2r-1-src is later than both: skipped;
 *   src > j    only query chunk 2r-1-j sees anything, and it sees both KV
 *              chunks fully: per sequence one full call.
 * Partials merge into (o, lse) by log-sum-exp (nsp_attn_merge). The block
 * for step t+1 is received while step t computes (two KV buffers).
 *
 * Backward: the same pairs; dq accumulates locally, the dK/dV of each KV
 * block travel with it: step t computes the contribution to block src into
 * a scratch buffer while the travelling sum of block src (from ring index
 * j-1) arrives, adds it and sends it on; after the last step the sum of the
 * rank's own block arrives from j-1. Messages: forward r-1 KV blocks,
 * backward r-1 KV blocks and r dKV blocks, per rank.
 *
 * Memory: the world's memory type's (memtype.h), given at create: host
 * memory (UCX), or device memory (NCCL), where every step is enqueued on
 * the caller's stream (io->proto.stream): the kernel callbacks, the KV
 * copies and zeroing (attn_mem.h), the merges, accumulations and
 * conversions (the reduce ops, attn_reduce.h), and the ring's NCCL
 * send/receive (the group's ring post on that stream); the host waits for
 * a step's request before it reuses that step's buffers.
 *
 * Dtypes (io->proto.dtype): float32, bfloat16 or float16. The
 * kernel reads and writes the wire dtype; KV blocks travel in it. Partials
 * are read in it and accumulated in float32 (attn_reduce.h): the running o
 * and dq in scratch of the ring, the travelling dK/dV sums in float32 on
 * the wire too (twice the bytes of a block for bf16 / fp16); each output is
 * rounded once at the end. For float32 the outputs are their own
 * accumulators. The scratch belongs to the ring, is sized by its first call
 * and kept until nsp_ring_level_free().
 */
#ifndef NSP_ATTN_SP_RING_ATTN_H_
#define NSP_ATTN_SP_RING_ATTN_H_

#include "nspcomm.h"
#include "attn_sp/attn_mem.h"
#include "attn_sp/attn_reduce.h"

#include <stdint.h>

/** One rank's ring of one level (opaque). */
typedef struct nsp_ring_level nsp_ring_level_t;

/**
 * Called while the ring waits and between its kernel calls, so the other
 * levels' exchanges progress. Sets *idle to 1 when nothing moved.
 */
typedef nsp_status_t (*nsp_ring_progress_fn)(void *ctx, int *idle);

/** What one ring call needs and what it measured. */
typedef struct nsp_ring_level_io {
    const nsp_attn_kernel_t *kernel;
    nsp_attn_batch_t         proto;     /**< params (the rank's heads, resolved scale,
                                             causal), dtype, head0s, level; the
                                             offsets are filled per call */
    nsp_ring_progress_fn     progress;  /**< may be NULL */
    void                    *progress_ctx;
    double                   compute_s; /**< out: += thread CPU seconds of kernels, merges */
    double                   wait_s;    /**< out: += wall seconds waiting for the ring */
    uint64_t                 bytes_sent;/**< out: += bytes sent around the ring */
} nsp_ring_level_io_t;

/**
 * Set up the ring of the ring level `lv` (ring > 1; borrowed only during
 * the call) for blocks of `kv_heads` KV heads of `head_dim` elements, in
 * the memory of `mem` and `reduce` (the world's memory type's tables,
 * borrowed until nsp_ring_level_free). The level's spans must be those of
 * the layout rules. Errors: NSP_ERR_INVALID_ARG (not a ring level, spans
 * not zigzag, NULL tables), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_ring_level_create(nsp_tree_t *tree, const nsp_layout_level_t *lv,
                                   int kv_heads, int head_dim, const nsp_attn_mem_t *mem,
                                   const nsp_reduce_ops_t *reduce, nsp_ring_level_t **ring);

/**
 * Forward of the level: q [T_j, n_q', D], k and v [T_j, n_kv', D] (the
 * rank's head-sharded block, read only) -> o [T_j, n_q', D], lse [T_j, n_q'].
 * Buffers of io->proto.dtype except lse (float32).
 * Collective over the ring. Errors: a kernel's error, NSP_ERR_TIMEOUT,
 * NSP_ERR_PEER_FAILED, NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_ring_level_fwd(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                                const void *q, const void *k, const void *v, void *o,
                                float *lse);

/**
 * Backward of the level from the forward's final o and lse and dout (all
 * the rank's block) -> dq [T_j, n_q', D], dk and dv [T_j, n_kv', D]
 * (written): the rank's queries' gradient and the full gradient of its
 * own KV block over every query of the ring. Errors: as the forward.
 */
nsp_status_t nsp_ring_level_bwd(nsp_ring_level_t *ring, nsp_ring_level_io_t *io,
                                const void *q, const void *k, const void *v, const void *o,
                                const float *lse, const void *dout, void *dq, void *dk,
                                void *dv);

/** Free a ring. NULL is a no-op. */
void nsp_ring_level_free(nsp_ring_level_t *ring);

/** Thread CPU time in seconds (CLOCK_THREAD_CPUTIME_ID). */
double nsp_thread_cpu_s(void);

#endif /* NSP_ATTN_SP_RING_ATTN_H_ */
