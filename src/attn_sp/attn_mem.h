/*
 * Memory ops of nested attention (nested_attn.c): what the driver does
 * differently on host and on device memory, one table per memory type of
 * the world's transport, chosen at create (nsp_tp_ops_t mem_type):
 *
 *   host   buffers from malloc; the kernel and every merge on the CPU; no
 *          stream (attn_mem_host.c)
 *   cuda   buffers from cudaMalloc on the current device; the kernel gets
 *          the caller's stream (nsp_nested_attn_set_stream), the
 *          exchanges run on the CUDA engine's level streams and wait for
 *          that stream on the GPU (attn_mem_cuda.c; in a build without
 *          CUDA an UNSUPPORTED table, attn_mem_nocuda.c)
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
    /** dst[i] = src[i] widened from `dtype` to float32 (exact), i < n;
     *  src: n elements of dtype, dst: n float32, buffers of buffer(), not
     *  overlapping. Host: done on return; cuda: enqueued on `stream` (a
     *  backward with dkv_f32 widens each level's dK/dV after its kernel,
     *  before its summing exchange opens). Errors: NSP_ERR_INVALID_ARG,
     *  NSP_ERR_BACKEND (the launch failed). */
    nsp_status_t (*to_f32)(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                           void *stream);
    /** dst[i] = src[i] rounded from float32 to `dtype` (nearest even, one
     *  rounding), i < n; as to_f32() otherwise (the float32 dK/dV sums
     *  into the caller's dk, dv). */
    nsp_status_t (*from_f32)(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                             void *stream);
    /** Wait until the work enqueued on `stream` so far ran (host: no-op;
     *  cuda: cudaStreamSynchronize), so results are in the caller's
     *  buffers when a call returns. Errors: NSP_ERR_BACKEND. */
    nsp_status_t (*sync)(void *stream);
} nsp_attn_mem_t;

extern const nsp_attn_mem_t nsp_attn_mem_host;
extern const nsp_attn_mem_t nsp_attn_mem_cuda;

#endif /* NSP_ATTN_SP_ATTN_MEM_H_ */
