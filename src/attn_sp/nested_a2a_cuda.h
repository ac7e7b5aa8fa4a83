/*
 * The CUDA path of the nested all-to-all (CUDA builds; internal).
 *
 * The engine nsp_a2a_create() chooses when the tree's world moves device
 * memory (the nccl backend). Same contract as the public nsp_a2a_create()
 * and nsp_a2a_start() (include/nspcomm.h section 7), with src and dst
 * in device memory and params->stream (NSP_A2A_FIELD_STREAM) the stream
 * where src was written (NULL: the legacy default stream). Per level l:
 *
 *   level stream l waits for params->stream (an event, on the GPU)
 *   [l == 0]  cudaMemcpyAsync of the level-0 block
 *   [l  > 0]  pack kernel -> the level's transport alltoallv (NCCL, on the
 *             level stream; pairwise ncclSend/ncclRecv over the world for a
 *             group the tree lacks) -> self-block kernel -> unpack kernel,
 *             scratch from a private stream-ordered memory pool
 *   record this post's event of level l
 *
 * all enqueued by the call, in ascending level order (the agreed order of
 * docs/design.md §4), so every level is in flight at return (serial mode: level
 * l+1's stream also waits for level l's event). Level l's request completes
 * when its event fired and its transport requests did: then dst holds the
 * level's block. Testing any request polls every level (the host
 * src/streams/levels.h queue with one step per level: [exchange done] ->
 * [event fired]). Errors of NCCL (a peer gone), timeouts and count
 * mismatches come from the transport's requests.
 *
 * Gated handles (nsp_a2a_create_gated): start sets every level up and
 * queues its steps [opened] -> [exchange] -> [event] but enqueues nothing;
 * nsp_a2a_open(a2a, l) makes level l's stream wait for the work queued so
 * far on the start's stream (an event on the GPU: the caller's kernels
 * that wrote the level's source), then enqueues the level as above. The
 * condition the sends wait for is thus on the GPU, the order of the NCCL
 * calls is the order of the opens (the same on every rank). One-shot gated
 * posts (nsp_a2a_post_gated) are refused: nsp_a2a_level_open() takes host
 * requests only.
 *
 * Device tables of a layout's levels (pack_map.h) are uploaded at create
 * and held by the handle; the world keeps them (key: plan hash and rank)
 * for the next handles of the same layout, with the level streams and the
 * scratch pool, until nsp_comm_destroy().
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_CUDA_H_
#define NSP_ATTN_SP_NESTED_A2A_CUDA_H_

#include "attn_sp/nested_a2a_engine.h" /* nsp_a2a_engine_cuda */

#endif /* NSP_ATTN_SP_NESTED_A2A_CUDA_H_ */
