/*
 * The pack/unpack kernels of one level as a table per memory type
 * (memtype.h): what the device engine of the nested all-to-all
 * (nested_a2a_device.c) enqueues on a level's stream. Same operations,
 * counts and displacements as the host pack of pack.h (nsp_pack_counts with
 * NSP_PACK_SKIP_SELF), on whole levels:
 *
 *   cuda   the CUDA kernels (pack_cuda.h; CUDA builds)
 *   host   the kernels' own unit maps (pack_map.h) run at once on the
 *          calling thread, in host memory (pack_host_ops.c): the device
 *          engine's index path on a CPU, bit for bit what a kernel does
 *
 * `tables` is what level_create made for a level view (device tables,
 * count patterns; owned by the caller until level_release). Buffers are in
 * the memory type's memory. Every op is enqueued on `stream` (a stream of
 * the memory type's devops; "host" runs it before returning and reads no
 * stream). Errors: NSP_ERR_INVALID_ARG (heads and degree do not divide one
 * another, NULL buffers where bytes move, float32 ops on misaligned
 * buffers), NSP_ERR_BACKEND (a launch failed), NSP_ERR_NO_MEMORY.
 */
#ifndef NSP_ATTN_SP_PACK_OPS_H_
#define NSP_ATTN_SP_PACK_OPS_H_

#include "nspcomm.h"
#include "attn_sp/layout.h"
#include "common/table.h"

#include <stddef.h>

typedef struct nsp_pack_ops {
    const char *name;
    /** Build (and upload) the tables of a level; `view` is only read
     *  during the call. On success *tables is owned by the caller. */
    nsp_status_t (*level_create)(const nsp_level_view_t *view, void **tables);
    /** Free a level's tables once the work queued so far on `stream` ran
     *  (NULL tables: no-op). */
    void (*level_release)(void *tables, void *stream);
    /** s2h: chunks [L, H, D] -> the send blocks (pack.h nsp_pack_s2h). */
    nsp_status_t (*pack_s2h)(void *tables, int heads, size_t row_bytes, const void *chunks,
                             void *send, const size_t *send_bytes, const size_t *send_displs,
                             void *stream);
    /** s2h: the received blocks -> block [T, h_me, D] (nsp_unpack_s2h). */
    nsp_status_t (*unpack_s2h)(void *tables, int heads, size_t row_bytes, const void *recv,
                               const size_t *recv_bytes, const size_t *recv_displs,
                               void *block, void *stream);
    /** h2s: block [T, h_me, D] -> the send blocks (nsp_pack_h2s). */
    nsp_status_t (*pack_h2s)(void *tables, int heads, size_t row_bytes, const void *block,
                             void *send, const size_t *send_bytes, const size_t *send_displs,
                             void *stream);
    /** h2s: the received blocks -> chunks [L, H, D] (nsp_unpack_h2s). */
    nsp_status_t (*unpack_h2s)(void *tables, int heads, size_t row_bytes,
                               nsp_a2a_replicas_t replicas, const void *recv,
                               const size_t *recv_bytes, const size_t *recv_displs,
                               void *chunks, void *stream);
    /** The block this rank keeps for itself (nsp_pack_copy_self). */
    nsp_status_t (*copy_self)(void *tables, nsp_a2a_dir_t dir, int heads, size_t row_bytes,
                              nsp_a2a_replicas_t replicas, const void *src, void *dst,
                              void *stream);
} nsp_pack_ops_t;

#define NSP_PACK_OPS_ENTRIES(X)                                                      \
    X(level_create) X(level_release) X(pack_s2h) X(unpack_s2h) X(pack_h2s)           \
    X(unpack_h2s) X(copy_self)
NSP_TABLE_COMPLETE(nsp_pack_ops_t, level_create, NSP_PACK_OPS_ENTRIES);

/** The kernels' unit maps on the host (pack_host_ops.c). */
extern const nsp_pack_ops_t nsp_pack_ops_host;
/** The CUDA kernels (pack_cuda.c; CUDA builds only). */
extern const nsp_pack_ops_t nsp_pack_ops_cuda;

#endif /* NSP_ATTN_SP_PACK_OPS_H_ */
