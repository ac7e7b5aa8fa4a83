/*
 * The host memory type (memtype.h): buffers in host memory moved by a host
 * transport (UCX). The nested all-to-all runs the host engine (pack,
 * exchange, unpack on the CPU; mapped sources); nested attention uses
 * malloc'd buffers, any kernel, every level and no stream; its reductions
 * are the host ones (attn_reduce.h). Host memory has no device streams:
 * its device operations say so. Its level kernels are the CUDA kernels'
 * unit maps run on the CPU (pack_host_ops.c), for engines that drive a
 * device over host memory.
 */
#include "config.h"

#include "attn_sp/memtype.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- nested attention's memory ops ---------------------------------------- */

static nsp_status_t host_check_kernel(int reference)
{
    (void)reference;
    return NSP_OK;
}

static nsp_status_t host_check_level(int level, const nsp_layout_level_t *lv)
{
    (void)level;
    (void)lv;
    return NSP_OK;
}

static nsp_status_t host_check_stream(void *stream)
{
    if (stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested attention: a CUDA stream was given but "
                         "the world moves host memory (UCX); pass stream = NULL");
    }
    return NSP_OK;
}

static nsp_status_t host_buffer(void **ptr, size_t *cap, size_t bytes)
{
    void *p;

    bytes = bytes > 0 ? bytes : 1;
    if (*ptr != NULL && *cap >= bytes) {
        return NSP_OK;
    }
    p = realloc(*ptr, bytes);
    if (p == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested attention: cannot allocate %zu bytes "
                         "of head-sharded buffers", bytes);
    }
    *ptr = p;
    *cap = bytes;
    return NSP_OK;
}

static void host_release(void *ptr)
{
    free(ptr);
}

static nsp_status_t host_sync(void *stream)
{
    (void)stream; /* everything ran when it returned */
    return NSP_OK;
}

static nsp_status_t host_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes > 0) {
        memcpy(dst, src, bytes);
    }
    return NSP_OK;
}

static nsp_status_t host_zero(void *dst, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes > 0) {
        memset(dst, 0, bytes);
    }
    return NSP_OK;
}

/* Nothing to bind: the caller's NULL stream is NULL, the kernel as given. */
static nsp_status_t host_bind(nsp_comm_t *world, const nsp_attn_params_t *attn,
                             nsp_attn_kernel_t *kernel, void **stream, void **state)
{
    (void)world;
    (void)attn;
    (void)kernel;
    *stream = NULL;
    *state  = NULL;
    return NSP_OK;
}

static void host_unbind(void *state)
{
    (void)state;
}

static const nsp_attn_mem_t host_attn = {
    .name         = "host",
    .check_kernel = host_check_kernel,
    .check_level  = host_check_level,
    .check_stream = host_check_stream,
    .buffer       = host_buffer,
    .release      = host_release,
    .sync         = host_sync,
    .copy         = host_copy,
    .zero         = host_zero,
    .bind         = host_bind,
    .unbind       = host_unbind,
};

/* ---- device operations: none on host memory ------------------------------- */

static nsp_status_t no_device(const char *what)
{
    return nsp_error(NSP_ERR_UNSUPPORTED, "host memory has no device streams (%s): its "
                     "work runs on the calling thread", what);
}

static nsp_status_t none_device_current(void *ctx, int *device)
{
    (void)ctx;
    (void)device;
    return no_device("device_current");
}

static nsp_status_t none_stream_create(void *ctx, int priority, void **stream)
{
    (void)ctx;
    (void)priority;
    (void)stream;
    return no_device("stream_create");
}

static void none_destroy(void *object)
{
    (void)object; /* no create ever gave one */
}

static nsp_status_t none_event_create(void *ctx, void **event)
{
    (void)ctx;
    (void)event;
    return no_device("event_create");
}

static nsp_status_t none_event_record(void *event, void *stream)
{
    (void)event;
    (void)stream;
    return no_device("event_record");
}

static nsp_status_t none_event_query(void *event)
{
    (void)event;
    return no_device("event_query");
}

static nsp_status_t none_stream_wait_event(void *stream, void *event)
{
    (void)stream;
    (void)event;
    return no_device("stream_wait_event");
}

static nsp_status_t none_stream_sync(void *stream)
{
    (void)stream;
    return no_device("stream_sync");
}

static nsp_status_t none_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)stream;
    return no_device("memcpy_async");
}

static nsp_status_t none_pool_create(void *ctx, int device, void **pool)
{
    (void)ctx;
    (void)device;
    (void)pool;
    return no_device("pool_create");
}

static nsp_status_t none_alloc_async(void *pool, void **ptr, size_t bytes, void *stream)
{
    (void)pool;
    (void)ptr;
    (void)bytes;
    (void)stream;
    return no_device("alloc_async");
}

static nsp_status_t none_free_async(void *ptr, void *stream)
{
    (void)ptr;
    (void)stream;
    return no_device("free_async");
}

static nsp_status_t none_launch_host(void *stream, void (*fn)(void *arg), void *arg)
{
    (void)stream;
    (void)fn;
    (void)arg;
    return no_device("launch_host");
}

static const nsp_devops_t host_devops = {
    .name              = "none (host memory)",
    .device_current    = none_device_current,
    .stream_create     = none_stream_create,
    .stream_destroy    = none_destroy,
    .event_create      = none_event_create,
    .event_destroy     = none_destroy,
    .event_record      = none_event_record,
    .event_query       = none_event_query,
    .stream_wait_event = none_stream_wait_event,
    .stream_sync       = none_stream_sync,
    .memcpy_async      = none_memcpy_async,
    .pool_create       = none_pool_create,
    .pool_destroy      = none_destroy,
    .alloc_async       = none_alloc_async,
    .free_async        = none_free_async,
    .launch_host       = none_launch_host,
};

/* No device context: host memory has no device. */
static nsp_status_t host_device(nsp_comm_t *world, void **ctx)
{
    (void)world;
    *ctx = NULL;
    return NSP_OK;
}

const nsp_memtype_t nsp_memtype_host = {
    .name   = "host",
    .mem    = NSP_MEM_HOST,
    .engine = &nsp_a2a_engine_host,
    .devops = &host_devops,
    .pack   = &nsp_pack_ops_host,
    .reduce = &nsp_reduce_ops_host,
    .attn   = &host_attn,
    .device = host_device,
};
