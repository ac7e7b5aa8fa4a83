/*
 * The device operations of devops.h on the CUDA runtime (CUDA builds):
 * streams and events without timing, copies device to device, a private
 * stream-ordered memory pool per world that keeps what is freed.
 */
#include "config.h"

#include "streams/devops.h"

#include "common/log.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#define DEV_WHAT "cuda device"

static nsp_status_t cuda_device_current(void *ctx, int *device)
{
    (void)ctx; /* the thread's current device */
    NSP_CUDA_CHECK(cudaGetDevice(device), DEV_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_stream_create(void *ctx, int priority, void **stream)
{
    int          least = 0, greatest = 0, prio;
    cudaStream_t s;

    (void)ctx;

    /* Lower numbers are higher priorities: greatest <= least. */
    NSP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), DEV_WHAT);
    prio = least;
    if (priority >= 0) {
        prio = greatest + (priority < least - greatest ? priority : least - greatest);
    }
    NSP_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, prio), DEV_WHAT);
    *stream = (void *)s;
    return NSP_OK;
}

static void cuda_stream_destroy(void *stream)
{
    if (stream != NULL) {
        cudaStreamDestroy((cudaStream_t)stream); /* returns at once; queued work runs */
    }
}

static nsp_status_t cuda_event_create(void *ctx, void **event)
{
    cudaEvent_t e;

    (void)ctx;

    NSP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), DEV_WHAT);
    *event = (void *)e;
    return NSP_OK;
}

static void cuda_event_destroy(void *event)
{
    if (event != NULL) {
        cudaEventDestroy((cudaEvent_t)event); /* safe while recorded work is pending */
    }
}

static nsp_status_t cuda_event_record(void *event, void *stream)
{
    NSP_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream), DEV_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_event_query(void *event)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);

    if (e == cudaSuccess) {
        return NSP_OK;
    }
    if (e == cudaErrorNotReady) {
        return NSP_INPROGRESS;
    }
    return nsp_cuda_status(e, DEV_WHAT, "cudaEventQuery (work before the event failed)");
}

static nsp_status_t cuda_stream_wait_event(void *stream, void *event)
{
    NSP_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0), DEV_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_stream_sync(void *stream)
{
    NSP_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream), DEV_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    NSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                   (cudaStream_t)stream),
                   DEV_WHAT);
    return NSP_OK;
}

static nsp_status_t cuda_pool_create(void *ctx, int device, void **pool)
{
    struct cudaMemPoolProps props;
    cudaMemPool_t           p;
    uint64_t                keep = UINT64_MAX;
    nsp_status_t            status;

    (void)ctx;
    memset(&props, 0, sizeof(props));
    props.allocType     = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id   = device;
    NSP_CUDA_CHECK(cudaMemPoolCreate(&p, &props), DEV_WHAT);
    /* Keep freed scratch for the next exchange instead of returning it. */
    NSP_CUDA_GOTO(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep), DEV_WHAT,
                  status, err_destroy_pool);
    *pool = (void *)p;
    return NSP_OK;
err_destroy_pool:
    cudaMemPoolDestroy(p);
    return status;
}

static void cuda_pool_destroy(void *pool)
{
    if (pool != NULL) {
        cudaMemPoolDestroy((cudaMemPool_t)pool); /* released once its frees completed */
    }
}

static nsp_status_t cuda_alloc_async(void *pool, void **ptr, size_t bytes, void *stream)
{
    void *p = NULL;

    NSP_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, (cudaMemPool_t)pool, (cudaStream_t)stream),
                   DEV_WHAT " (scratch)");
    *ptr = p;
    return NSP_OK;
}

static nsp_status_t cuda_free_async(void *ptr, void *stream)
{
    if (ptr != NULL) {
        NSP_CUDA_CHECK(cudaFreeAsync(ptr, (cudaStream_t)stream), DEV_WHAT " (scratch)");
    }
    return NSP_OK;
}

static nsp_status_t cuda_launch_host(void *stream, void (*fn)(void *arg), void *arg)
{
    NSP_CUDA_CHECK(cudaLaunchHostFunc((cudaStream_t)stream, fn, arg), DEV_WHAT);
    return NSP_OK;
}

const nsp_devops_t nsp_devops_cuda = {
    .name              = "cuda",
    .device_current    = cuda_device_current,
    .stream_create     = cuda_stream_create,
    .stream_destroy    = cuda_stream_destroy,
    .event_create      = cuda_event_create,
    .event_destroy     = cuda_event_destroy,
    .event_record      = cuda_event_record,
    .event_query       = cuda_event_query,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_sync       = cuda_stream_sync,
    .memcpy_async      = cuda_memcpy_async,
    .pool_create       = cuda_pool_create,
    .pool_destroy      = cuda_pool_destroy,
    .alloc_async       = cuda_alloc_async,
    .free_async        = cuda_free_async,
    .launch_host       = cuda_launch_host,
};
