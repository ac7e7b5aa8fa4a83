/*
 * Nested attention's memory ops on device memory (attn_mem.h; CUDA
 * builds): head-sharded buffers from cudaMalloc on the current device,
 * the caller's kernel on the caller's stream, Ulysses levels (and level 0).
 * Ring levels are refused: their partial merges and KV passing run on the
 * host (ring_attn.c).
 */
#include "config.h"

#include "attn_sp/attn_mem.h"
#include "common/log.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>

#define AM_WHAT "nested attention (device memory)"

static nsp_status_t cuda_check_kernel(int reference)
{
    if (reference) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: the built-in reference kernel reads host "
                         "memory; give params.kernel (NSP_NESTED_ATTN_FIELD_KERNEL) with "
                         "callbacks that compute on the device, on batch->stream", AM_WHAT);
    }
    return NSP_OK;
}

static nsp_status_t cuda_check_level(int level, const nsp_layout_level_t *lv)
{
    if (lv->ring > 1) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: level %d is a ring group (degree %d, ring "
                         "%d), and ring levels merge partial results on the host; plan "
                         "without rings (Ulysses groups) or use the UCX backend with host "
                         "buffers", AM_WHAT, level, lv->degree, lv->ring);
    }
    return NSP_OK;
}

static nsp_status_t cuda_check_widen_dkv(void)
{
    return nsp_error(NSP_ERR_UNSUPPORTED, "%s: a backward in bfloat16/float16 with KV heads "
                     "replicated by some rank (a Ulysses degree above n_kv) widens dK/dV to "
                     "float32 on the host; use dtype NSP_ATTN_FP32, degrees up to n_kv, or the "
                     "UCX backend with host buffers", AM_WHAT);
}

static nsp_status_t cuda_check_stream(void *stream)
{
    (void)stream; /* any stream of the current device, or NULL (legacy default) */
    return NSP_OK;
}

static nsp_status_t cuda_buffer(void **ptr, size_t *cap, size_t bytes)
{
    void *p = NULL;

    bytes = bytes > 0 ? bytes : 1;
    if (*ptr != NULL && *cap >= bytes) {
        return NSP_OK;
    }
    NSP_CUDA_CHECK(cudaMalloc(&p, bytes), AM_WHAT);
    if (*ptr != NULL) {
        cudaFree(*ptr); /* waits for the device: only when a buffer grows */
    }
    *ptr = p;
    *cap = bytes;
    return NSP_OK;
}

static void cuda_release(void *ptr)
{
    if (ptr != NULL) {
        cudaFree(ptr);
    }
}

const nsp_attn_mem_t nsp_attn_mem_cuda = {
    .name         = "cuda",
    .check_kernel = cuda_check_kernel,
    .check_level  = cuda_check_level,
    .check_widen_dkv = cuda_check_widen_dkv,
    .check_stream = cuda_check_stream,
    .buffer       = cuda_buffer,
    .release      = cuda_release,
};
