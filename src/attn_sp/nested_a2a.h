/*
 * The nested variable-length all-to-all (public API in include/nspcomm.h
 * section 7), internal helpers shared with the perf tool and the tests.
 *
 * One engine-neutral handle (nested_a2a_common.h, nested_a2a_handle.c)
 * derives everything once at create and runs the engine of the world's
 * memory type (memtype.h, nested_a2a_engine.h): the host engine
 * (nested_a2a_host.c, mapped sources in nested_a2a_mapped.c) or the device
 * engine (nested_a2a_device.c). Every start queues each level's steps in
 * the level queues of src/streams; testing any level's request polls every
 * level (ascending), so all levels move, and each completes on its own.
 * When the caller has freed every level's request the handle may start
 * again (nsp_a2a_post: it is freed).
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_H_
#define NSP_ATTN_SP_NESTED_A2A_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/**
 * The tag the nested all-to-all uses for the level of degree `degree` of
 * its post number `post_seq` (every rank counts its posts the same way).
 */
uint32_t nsp_a2a_tag(uint32_t post_seq, int degree);

/**
 * Chunk bytes per peer from which a sequence of a multi-sequence level moves
 * in its own in-place part: $NSPCOMM_A2A_DIRECT_MIN (bytes, read once) or
 * NSP_PACK_DIRECT_MIN_BYTES. Part of the agreement hash, so ranks that set it
 * differently get NSP_ERR_MISMATCH.
 */
size_t nsp_a2a_direct_min(void);

/** Default shortest run (bytes) from which a level moves as runs, with no
 *  pack or unpack (NSPCOMM_A2A_IOV_MIN overrides it). */
#define NSP_A2A_IOV_MIN_BYTES ((size_t)1024)

/**
 * The shortest run of a level (nsp_pack_run_min: the heads of one index
 * times D * elem_size) from which the host engine sends the level as runs
 * of its buffers (the transport's alltoallv_iov_post) instead of packing
 * and unpacking: $NSPCOMM_A2A_IOV_MIN (bytes; 0 always, "off" never; read
 * once) or NSP_A2A_IOV_MIN_BYTES. Part of the agreement hash.
 */
size_t nsp_a2a_iov_min(void);

/**
 * The tag of part `part` (0..255) of the level whose degree has id
 * `degree_id` (nsp_layout_degree_id) in post number `post_seq`: distinct for
 * every exchange that can be in flight on one communicator at once.
 */
uint32_t nsp_a2a_part_tag(uint32_t post_seq, int degree_id, int part);

/**
 * The value every rank allgathers at post: the round's plan hash mixed with
 * the exchange parameters. Pure.
 */
uint64_t nsp_a2a_check_hash(uint64_t plan_hash, nsp_a2a_dir_t dir, int heads, int head_dim,
                            size_t elem_size, nsp_a2a_replicas_t replicas, int mapped);

/**
 * Compare the allgathered hashes[nranks]: NSP_OK when all equal, else
 * NSP_ERR_MISMATCH with a message naming the ranks that differ from rank 0
 * (`what` says what was compared). Pure.
 */
nsp_status_t nsp_a2a_compare_hashes(const uint64_t *hashes, int nranks, const char *what);

/**
 * As nsp_a2a_post() (host path), but every level, level 0 included, waits
 * until the caller opens it with nsp_a2a_level_open(reqs[l]); a level never
 * opened never completes (free it like an abandoned one). Lets a caller
 * start the head-to-sequence of a level as soon as that level's data is
 * computed, or run levels strictly one after another. Every rank posts the
 * same gated exchanges in the same order as any other post. Errors: as
 * nsp_a2a_post(); NSP_ERR_UNSUPPORTED on the device engine (use
 * nsp_a2a_create_gated and nsp_a2a_open there).
 */
nsp_status_t nsp_a2a_post_gated(nsp_tree_t *tree, const nsp_layout_t *layout,
                                const nsp_a2a_params_t *params, nsp_request_t **reqs);

/**
 * nsp_a2a_create() of an exchange whose every start is gated as
 * nsp_a2a_post_gated(): level l of a start moves once nsp_a2a_open(a2a, l)
 * (or nsp_a2a_level_open() of its request) was called. The device engine
 * enqueues level l at open, after the work queued so far on the start's
 * stream (nested_a2a_device.c).
 */
nsp_status_t nsp_a2a_create_gated(nsp_tree_t *tree, const nsp_layout_t *layout,
                                  const nsp_a2a_params_t *params, nsp_a2a_t **a2a);

/** Open level `level` of the running start of a gated handle.
 *  Errors: NSP_ERR_INVALID_ARG (no start running, level out of range). */
nsp_status_t nsp_a2a_open(nsp_a2a_t *a2a, int level);

/**
 * Open one level of a gated post or start (`req` is one of its level
 * requests) and start it at once (pack and post), as nsp_a2a_open().
 * Opening twice is a no-op. Errors: NSP_ERR_INVALID_ARG (not a level
 * request of a running gated nested all-to-all).
 */
nsp_status_t nsp_a2a_level_open(nsp_request_t *req);

#endif /* NSP_ATTN_SP_NESTED_A2A_H_ */
