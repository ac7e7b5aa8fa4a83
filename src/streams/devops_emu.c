/*
 * The device operations of devops.h on the emulated device (emu_device.h):
 * the second entry of the table, so the device engine's orchestration (a
 * stream per level, waits on the caller's stream, gated opens, done events)
 * runs without a GPU. `ctx` is the world's nsp_emu_device_t (memtype_emu.c);
 * the other entries find the device from the stream or event. A NULL stream
 * is the device's default stream where an event names the device
 * (event_record, stream_wait_event); the entries without one refuse it
 * (callers pass the default stream's handle, which nested attention binds
 * at create). Memory is host memory: the "pool" is the device itself, and
 * alloc_async / free_async are the device's stream-ordered host memory.
 */
#include "config.h"

#include "streams/devops.h"

#include "common/log.h"
#include "streams/emu_device.h"

#include <limits.h>

#define EDEV_WHAT "emulated device (devops)"

/* NSP_DEV_PRIORITY_DEFAULT: after every numbered priority. */
#define EDEV_PRIORITY_LEAST INT_MAX

static nsp_status_t edev_need(void *ctx, const char *fn)
{
    if (ctx == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s without the world's emulated device "
                         "(ctx NULL)", EDEV_WHAT, fn);
    }
    return NSP_OK;
}

/* The stream, or the default stream of ev's device for NULL. */
static void *edev_stream_or_default(void *stream, void *ev)
{
    return stream != NULL ? stream : nsp_emu_default_stream(nsp_emu_event_device(ev));
}

static nsp_status_t edev_no_null(void *stream, const char *fn)
{
    if (stream == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s on the NULL stream: pass the emulated "
                         "device's default stream (nothing names the device here)",
                         EDEV_WHAT, fn);
    }
    return NSP_OK;
}

static nsp_status_t edev_device_current(void *ctx, int *device)
{
    NSP_CHECK(edev_need(ctx, "device_current"));
    *device = 0; /* one emulated device per world */
    return NSP_OK;
}

static nsp_status_t edev_stream_create(void *ctx, int priority, void **stream)
{
    NSP_CHECK(edev_need(ctx, "stream_create"));
    /* devops: 0 the most urgent, k steps less; emu: smaller first (CUDA's) */
    return nsp_emu_stream_create(ctx, priority >= 0 ? priority : EDEV_PRIORITY_LEAST, stream);
}

static void edev_stream_destroy(void *stream)
{
    nsp_emu_stream_destroy(stream); /* NULL and the default stream are ignored */
}

static nsp_status_t edev_event_create(void *ctx, void **event)
{
    NSP_CHECK(edev_need(ctx, "event_create"));
    return nsp_emu_event_create(ctx, event);
}

static void edev_event_destroy(void *event)
{
    nsp_emu_event_destroy(event);
}

static nsp_status_t edev_event_record(void *event, void *stream)
{
    return nsp_emu_event_record(event, edev_stream_or_default(stream, event));
}

static nsp_status_t edev_event_query(void *event)
{
    return nsp_emu_event_query(event);
}

static nsp_status_t edev_stream_wait_event(void *stream, void *event)
{
    return nsp_emu_stream_wait_event(edev_stream_or_default(stream, event), event);
}

static nsp_status_t edev_stream_sync(void *stream)
{
    NSP_CHECK(edev_no_null(stream, "stream_sync"));
    return nsp_emu_stream_sync(stream);
}

static nsp_status_t edev_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    NSP_CHECK(edev_no_null(stream, "memcpy_async"));
    return nsp_emu_memcpy_async(dst, src, bytes, stream);
}

/* The pool is the device: its memory is host memory, allocated at once. */
static nsp_status_t edev_pool_create(void *ctx, int device, void **pool)
{
    (void)device;
    NSP_CHECK(edev_need(ctx, "pool_create"));
    *pool = ctx;
    return NSP_OK;
}

static void edev_pool_destroy(void *pool)
{
    (void)pool; /* the device is the world's; what was freed async is freed */
}

static nsp_status_t edev_alloc_async(void *pool, void **ptr, size_t bytes, void *stream)
{
    (void)pool;
    NSP_CHECK(edev_no_null(stream, "alloc_async"));
    return nsp_emu_alloc_async(ptr, bytes, stream);
}

static nsp_status_t edev_free_async(void *ptr, void *stream)
{
    if (ptr == NULL) {
        return NSP_OK;
    }
    NSP_CHECK(edev_no_null(stream, "free_async"));
    return nsp_emu_free_async(ptr, stream);
}

static nsp_status_t edev_launch_host(void *stream, void (*fn)(void *arg), void *arg)
{
    NSP_CHECK(edev_no_null(stream, "launch_host"));
    return nsp_emu_launch_host(stream, fn, arg);
}

const nsp_devops_t nsp_devops_emu = {
    .name              = "emu",
    .device_current    = edev_device_current,
    .stream_create     = edev_stream_create,
    .stream_destroy    = edev_stream_destroy,
    .event_create      = edev_event_create,
    .event_destroy     = edev_event_destroy,
    .event_record      = edev_event_record,
    .event_query       = edev_event_query,
    .stream_wait_event = edev_stream_wait_event,
    .stream_sync       = edev_stream_sync,
    .memcpy_async      = edev_memcpy_async,
    .pool_create       = edev_pool_create,
    .pool_destroy      = edev_pool_destroy,
    .alloc_async       = edev_alloc_async,
    .free_async        = edev_free_async,
    .launch_host       = edev_launch_host,
};
