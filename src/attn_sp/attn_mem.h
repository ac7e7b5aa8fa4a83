/*
 * Memory ops of nested attention (nested_attn.c): what the driver does
 * differently on host and on device memory, one table per memory type, in
 * the memory type's entry (memtype.h; its conversions are the entry's
 * reduce ops, attn_reduce.h):
 *
 *   host   buffers from malloc; the kernel and every merge on the CPU; no
 *          stream (memtype_host.c)
 *   cuda   buffers from cudaMalloc on the current device; the kernel gets
 *          the caller's stream (nsp_nested_attn_set_stream), the
 *          exchanges run on the device engine's level streams and wait for
 *          that stream on the GPU (memtype_cuda.c, CUDA builds)
 *   emu    host buffers; the kernel is the emulated device's timed kernel
 *          on the caller's stream (the world's default emulated stream
 *          unless set), in math mode also running the given kernel
 *          (memtype_emu.c)
 *
 * Every entry of every table is set; what a memory type cannot do returns
 * NSP_ERR_UNSUPPORTED with a message that says why and what to use, as
 * the transport and all-to-all engine tables do. The layout and index
 * math (levels, head rows, slices, offsets, element counts) is the
 * driver's and the same for every memory type; the entries do elementwise
 * work only.
 */
#ifndef NSP_ATTN_SP_ATTN_MEM_H_
#define NSP_ATTN_SP_ATTN_MEM_H_

#include "nspcomm.h"
#include "attn_sp/layout.h"
#include "common/table.h"

#include <stddef.h>

typedef struct nsp_attn_mem {
    const char *name;
    /** The kernel of params (reference = 1: the built-in host reference,
     *  which reads host memory). */
    nsp_status_t (*check_kernel)(int reference);
    /** Can level `level` (its layout entry lv) run on this memory? */
    nsp_status_t (*check_level)(int level, const nsp_layout_level_t *lv);
    /** The caller's stream for kernels and exchanges (NULL: none / the
     *  legacy default stream). */
    nsp_status_t (*check_stream)(void *stream);
    /** Make *ptr (capacity *cap bytes, NULL/0 at first) hold at least
     *  `bytes` (at least 1); contents are not kept. On error *ptr and
     *  *cap are unchanged. */
    nsp_status_t (*buffer)(void **ptr, size_t *cap, size_t bytes);
    /** Free a buffer of buffer() (NULL: no-op; nothing may use it). */
    void (*release)(void *ptr);
    /** Wait until the work enqueued on `stream` so far ran (host: no-op;
     *  cuda: cudaStreamSynchronize), so results are in the caller's
     *  buffers when a call returns. Errors: NSP_ERR_BACKEND. */
    nsp_status_t (*sync)(void *stream);
    /** Copy `bytes` from src to dst (both this memory, not overlapping),
     *  in order on `stream` (host: done on return). Errors: NSP_ERR_BACKEND. */
    nsp_status_t (*copy)(void *dst, const void *src, size_t bytes, void *stream);
    /** Set `bytes` of dst to zero, in order on `stream`. Errors: as copy. */
    nsp_status_t (*zero)(void *dst, size_t bytes, void *stream);
    /** At create, once the kernel is chosen: *stream = the stream the
     *  caller's NULL stands for (host, cuda: NULL; emu: the world's default
     *  emulated stream), and *kernel as it runs on this memory (emu: the
     *  timed kernel, wrapping the given one for math mode, with what it
     *  needs in *state). `attn` holds the model's heads. On error nothing
     *  is changed. *state (NULL where nothing is kept) goes to unbind. */
    nsp_status_t (*bind)(nsp_comm_t *world, const nsp_attn_params_t *attn,
                         nsp_attn_kernel_t *kernel, void **stream, void **state);
    /** Free what bind kept (NULL: no-op), once no kernel of it is queued. */
    void (*unbind)(void *state);
} nsp_attn_mem_t;

#define NSP_ATTN_MEM_ENTRIES(X)                                                     \
    X(check_kernel) X(check_level) X(check_stream) X(buffer) X(release) X(sync)     \
    X(copy) X(zero) X(bind) X(unbind)
NSP_TABLE_COMPLETE(nsp_attn_mem_t, check_kernel, NSP_ATTN_MEM_ENTRIES);

#endif /* NSP_ATTN_SP_ATTN_MEM_H_ */
