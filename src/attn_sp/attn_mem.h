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
 * math (levels, head rows, slices, offsets) is the driver's and the same
 * for every memory type.
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
    /** Can a backward in a 16-bit dtype with replicated KV heads widen
     *  each level's dK/dV to float32 (nested_attn.c dkv_f32)? */
    nsp_status_t (*check_widen_dkv)(void);
    /** The caller's stream for kernels and exchanges (NULL: none / the
     *  legacy default stream). */
    nsp_status_t (*check_stream)(void *stream);
    /** Make *ptr (capacity *cap bytes, NULL/0 at first) hold at least
     *  `bytes` (at least 1); contents are not kept. On error *ptr and
     *  *cap are unchanged. */
    nsp_status_t (*buffer)(void **ptr, size_t *cap, size_t bytes);
    /** Free a buffer of buffer() (NULL: no-op; nothing may use it). */
    void (*release)(void *ptr);
} nsp_attn_mem_t;

extern const nsp_attn_mem_t nsp_attn_mem_host;
extern const nsp_attn_mem_t nsp_attn_mem_cuda;

#endif /* NSP_ATTN_SP_ATTN_MEM_H_ */
