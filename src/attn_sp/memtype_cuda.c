/*
 * The CUDA memory type (memtype.h; CUDA builds): buffers in device memory
 * of the current device, moved by a device transport (NCCL). The nested
 * all-to-all runs the device engine (nested_a2a_device.c) on the CUDA
 * runtime (devops_cuda.c) with the CUDA pack kernels (pack_cuda.h).
 * Nested attention: head-sharded buffers from cudaMalloc, the caller's
 * kernel on the caller's stream, Ulysses levels (and level 0) and ring
 * levels (ring_attn.c: KV blocks passed by NCCL on the caller's stream,
 * partials merged and gradients accumulated by the reduce kernels of
 * attn_reduce_cuda.c on it), dK/dV widened to float32 and rounded back by
 * the conversion kernel with dkv_f32.
 */
#include "config.h"

#include "attn_sp/memtype.h"

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
    (void)level; /* Ulysses and ring levels both run on device memory */
    (void)lv;
    return NSP_OK;
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

static nsp_status_t cuda_sync(void *stream)
{
    NSP_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream), AM_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    if (bytes > 0) {
        NSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                       (cudaStream_t)stream),
                       AM_WHAT);
    }
    return NSP_OK;
}

static nsp_status_t cuda_zero(void *dst, size_t bytes, void *stream)
{
    if (bytes > 0) {
        NSP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream), AM_WHAT);
    }
    return NSP_OK;
}

/* Nothing to bind: the caller's NULL stream is NULL, the kernel as given. */
static nsp_status_t cuda_bind(nsp_comm_t *world, const nsp_attn_params_t *attn,
                             nsp_attn_kernel_t *kernel, void **stream, void **state)
{
    (void)world;
    (void)attn;
    (void)kernel;
    *stream = NULL;
    *state  = NULL;
    return NSP_OK;
}

static void cuda_unbind(void *state)
{
    (void)state;
}

static const nsp_attn_mem_t cuda_attn = {
    .name         = "cuda",
    .check_kernel = cuda_check_kernel,
    .check_level  = cuda_check_level,
    .check_stream = cuda_check_stream,
    .buffer       = cuda_buffer,
    .release      = cuda_release,
    .sync         = cuda_sync,
    .copy         = cuda_copy,
    .zero         = cuda_zero,
    .bind         = cuda_bind,
    .unbind       = cuda_unbind,
};

/* No device context: the thread's current CUDA device. */
static nsp_status_t cuda_device(nsp_comm_t *world, void **ctx)
{
    (void)world;
    *ctx = NULL;
    return NSP_OK;
}

const nsp_memtype_t nsp_memtype_cuda = {
    .name   = "cuda",
    .mem    = NSP_MEM_CUDA,
    .engine = &nsp_a2a_engine_device,
    .devops = &nsp_devops_cuda,
    .pack   = &nsp_pack_ops_cuda,
    .reduce = &nsp_reduce_ops_cuda,
    .attn   = &cuda_attn,
    .device = cuda_device,
};
