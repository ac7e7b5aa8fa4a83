/*
 * CUDA pack/unpack of one level of the nested all-to-all (CUDA builds).
 *
 * The same five operations as the host pack.h, with the same arguments
 * (counts and displacements from nsp_pack_counts(), in host memory) plus a
 * level object and a stream; buffers are device memory. The results are
 * bit-identical to the host functions: copies move whole rows, and the
 * float32 replica sum adds in the host's order (first replica, then the
 * others in ascending index). Element sizes: any whose rows the host
 * accepts (2 and 4 bytes are what the tests and perf/gpu_check.sh cover);
 * copies use 16-byte vectors when rows and addresses allow (8, 4, 2, 1
 * otherwise).
 *
 * Everything is enqueued on `stream` (a cudaStream_t; NULL = the legacy
 * default stream) and returns at once; nothing here synchronises with the
 * device except the uploads of a level's index tables (once, at create) and
 * of a new count pattern (once per distinct counts/displacements, cached in
 * the level): see nsp_cuda_level_t. Device memory of a level comes from
 * CUDA's stream-ordered allocator (cudaMallocAsync), so freeing it never
 * stalls the device.
 */
#ifndef NSP_ATTN_SP_PACK_CUDA_H_
#define NSP_ATTN_SP_PACK_CUDA_H_

#include "attn_sp/pack.h"

/**
 * A level's index tables on the device (pack_map.h: seq_len, seq_off and
 * cum, uploaded once), and a cache of the count patterns the level has
 * been used with (each uploaded once, on first use; a pattern is the pair
 * counts[d], displs[d] of one side). Cached patterns are kept until
 * nsp_cuda_level_free(), so a level may serve several tensors (heads) and
 * both directions. Not thread-safe; use a level from one host thread.
 */
typedef struct nsp_cuda_level nsp_cuda_level_t;

/**
 * Upload the tables of `view` (borrowed during the call) to the current
 * device. Synchronous (a private stream, waited for). On success *level is
 * owned by the caller (nsp_cuda_level_free).
 * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_BACKEND (CUDA: no device, out of
 * device memory; the CUDA message inside), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_cuda_level_create(const nsp_level_view_t *view, nsp_cuda_level_t **level);

/** Free a level whose kernels have all run (e.g. after the stream was
 *  synchronised); waits for nothing. NULL is a no-op. */
void nsp_cuda_level_free(nsp_cuda_level_t *level);

/** Free a level in stream order: its device memory is released after the
 *  work queued so far on `stream` (a cudaStream_t; the one its last kernels
 *  ran on), without blocking the host. NULL level is a no-op. */
void nsp_cuda_level_release(nsp_cuda_level_t *level, void *stream);

/** Sequence-to-head pack: chunks [L, H, D] -> send blocks (device). */
nsp_status_t nsp_cuda_pack_s2h(nsp_cuda_level_t *level, int heads, size_t row_bytes,
                               const void *chunks, void *send, const size_t *send_bytes,
                               const size_t *send_displs, void *stream);

/** Sequence-to-head unpack: received blocks -> block [T, h_me, D] (device). */
nsp_status_t nsp_cuda_unpack_s2h(nsp_cuda_level_t *level, int heads, size_t row_bytes,
                                 const void *recv, const size_t *recv_bytes,
                                 const size_t *recv_displs, void *block, void *stream);

/** Head-to-sequence pack: block [T, h_me, D] -> send blocks (device). */
nsp_status_t nsp_cuda_pack_h2s(nsp_cuda_level_t *level, int heads, size_t row_bytes,
                               const void *block, void *send, const size_t *send_bytes,
                               const size_t *send_displs, void *stream);

/** Head-to-sequence unpack: received blocks -> chunks [L, H, D] (device);
 *  SUM_F32: the first replica's rows copied, the others added. */
nsp_status_t nsp_cuda_unpack_h2s(nsp_cuda_level_t *level, int heads, size_t row_bytes,
                                 nsp_a2a_replicas_t replicas, const void *recv,
                                 const size_t *recv_bytes, const size_t *recv_displs,
                                 void *chunks, void *stream);

/** The self block (use with NSP_PACK_SKIP_SELF), as nsp_pack_copy_self(),
 *  including its ordering rule for SUM_F32 (nsp_pack_self_is_first()). */
nsp_status_t nsp_cuda_pack_copy_self(nsp_cuda_level_t *level, nsp_a2a_dir_t dir, int heads,
                                     size_t row_bytes, nsp_a2a_replicas_t replicas,
                                     const void *src, void *dst, void *stream);

/** Tokens of this index's chunks (L) and of the whole sequences (T). */
nsp_status_t nsp_cuda_level_tokens(const nsp_cuda_level_t *level, int64_t *mine,
                                   int64_t *total);

#endif /* NSP_ATTN_SP_PACK_CUDA_H_ */
