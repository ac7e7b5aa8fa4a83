/*
 * The test device of sync_device.h: checked objects, work at once, counted.
 */
#include "sync_device.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJ_STREAM 0x5354524du /* "STRM" */
#define OBJ_EVENT  0x4556454eu /* "EVEN" */
#define OBJ_POOL   0x504f4f4cu /* "POOL" */
#define OBJ_DEAD   0xdeadbeefu

typedef struct sync_obj {
    uint32_t magic;
    uint64_t recorded; /* events: records so far */
} sync_obj_t;

static sync_device_counts_t counts;
static int                  current_device;

void sync_device_counts(sync_device_counts_t *out)
{
    *out = counts;
}

void sync_device_set_current(int device)
{
    current_device = device;
}

/* A stale or foreign object is a bug of the engine: stop the test. */
static void obj_check(const void *p, uint32_t magic, const char *what)
{
    if (p == NULL || ((const sync_obj_t *)p)->magic != magic) {
        fprintf(stderr, "sync device: %s %p is not a live one\n", what, p);
        abort();
    }
}

static void stream_check(const void *stream)
{
    if (stream != NULL) { /* NULL: the default stream */
        obj_check(stream, OBJ_STREAM, "stream");
    }
}

static nsp_status_t obj_new(uint32_t magic, void **out)
{
    sync_obj_t *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        return NSP_ERR_NO_MEMORY;
    }
    o->magic = magic;
    *out     = o;
    return NSP_OK;
}

static void obj_free(void *p, uint32_t magic, const char *what)
{
    if (p == NULL) {
        return;
    }
    obj_check(p, magic, what);
    ((sync_obj_t *)p)->magic = OBJ_DEAD;
    free(p);
}

static nsp_status_t sd_device_current(void *ctx, int *device)
{
    (void)ctx;
    *device = current_device;
    return NSP_OK;
}

static nsp_status_t sd_stream_create(void *ctx, int priority, void **stream)
{
    (void)ctx;
    (void)priority;
    ++counts.streams_created;
    ++counts.streams_live;
    return obj_new(OBJ_STREAM, stream);
}

static void sd_stream_destroy(void *stream)
{
    counts.streams_live -= stream != NULL;
    obj_free(stream, OBJ_STREAM, "stream");
}

static nsp_status_t sd_event_create(void *ctx, void **event)
{
    (void)ctx;
    ++counts.events_created;
    ++counts.events_live;
    return obj_new(OBJ_EVENT, event);
}

static void sd_event_destroy(void *event)
{
    counts.events_live -= event != NULL;
    obj_free(event, OBJ_EVENT, "event");
}

static nsp_status_t sd_event_record(void *event, void *stream)
{
    obj_check(event, OBJ_EVENT, "event");
    stream_check(stream);
    ++counts.records;
    ++((sync_obj_t *)event)->recorded;
    return NSP_OK;
}

static nsp_status_t sd_event_query(void *event)
{
    obj_check(event, OBJ_EVENT, "event");
    return NSP_OK; /* the captured work ran when it was enqueued */
}

static nsp_status_t sd_stream_wait_event(void *stream, void *event)
{
    stream_check(stream);
    obj_check(event, OBJ_EVENT, "event");
    ++counts.waits;
    return NSP_OK;
}

static nsp_status_t sd_stream_sync(void *stream)
{
    stream_check(stream);
    return NSP_OK;
}

static nsp_status_t sd_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    stream_check(stream);
    ++counts.copies;
    memcpy(dst, src, bytes);
    return NSP_OK;
}

static nsp_status_t sd_pool_create(void *ctx, int device, void **pool)
{
    (void)ctx;
    (void)device;
    ++counts.pools_created;
    return obj_new(OBJ_POOL, pool);
}

static void sd_pool_destroy(void *pool)
{
    obj_free(pool, OBJ_POOL, "pool");
}

static nsp_status_t sd_alloc_async(void *pool, void **ptr, size_t bytes, void *stream)
{
    void *p;

    obj_check(pool, OBJ_POOL, "pool");
    stream_check(stream);
    p = malloc(bytes);
    if (p == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "sync device: no memory for %zu bytes", bytes);
    }
    ++counts.allocs;
    ++counts.allocs_live;
    *ptr = p;
    return NSP_OK;
}

static nsp_status_t sd_free_async(void *ptr, void *stream)
{
    stream_check(stream);
    if (ptr != NULL) {
        ++counts.frees;
        --counts.allocs_live;
        free(ptr);
    }
    return NSP_OK;
}

static nsp_status_t sd_launch_host(void *stream, void (*fn)(void *arg), void *arg)
{
    stream_check(stream);
    ++counts.launches;
    fn(arg);
    return NSP_OK;
}

const nsp_devops_t sync_devops = {
    .name              = "sync (tests)",
    .device_current    = sd_device_current,
    .stream_create     = sd_stream_create,
    .stream_destroy    = sd_stream_destroy,
    .event_create      = sd_event_create,
    .event_destroy     = sd_event_destroy,
    .event_record      = sd_event_record,
    .event_query       = sd_event_query,
    .stream_wait_event = sd_stream_wait_event,
    .stream_sync       = sd_stream_sync,
    .memcpy_async      = sd_memcpy_async,
    .pool_create       = sd_pool_create,
    .pool_destroy      = sd_pool_destroy,
    .alloc_async       = sd_alloc_async,
    .free_async        = sd_free_async,
    .launch_host       = sd_launch_host,
};

/* ---- the host pack ops, counted, streams checked ---------------------------- */

static nsp_status_t pk_level_create(const nsp_level_view_t *view, void **tables)
{
    nsp_status_t st = nsp_pack_ops_host.level_create(view, tables);

    counts.tables_created += st == NSP_OK;
    counts.tables_live += st == NSP_OK;
    return st;
}

static void pk_level_release(void *tables, void *stream)
{
    stream_check(stream);
    counts.tables_live -= tables != NULL;
    nsp_pack_ops_host.level_release(tables, stream);
}

static nsp_status_t pk_pack_s2h(void *t, int heads, size_t rb, const void *chunks, void *send,
                                const size_t *sb, const size_t *sd, void *stream)
{
    stream_check(stream);
    ++counts.kernels;
    return nsp_pack_ops_host.pack_s2h(t, heads, rb, chunks, send, sb, sd, stream);
}

static nsp_status_t pk_unpack_s2h(void *t, int heads, size_t rb, const void *recv,
                                  const size_t *rbytes, const size_t *rd, void *block,
                                  void *stream)
{
    stream_check(stream);
    ++counts.kernels;
    return nsp_pack_ops_host.unpack_s2h(t, heads, rb, recv, rbytes, rd, block, stream);
}

static nsp_status_t pk_pack_h2s(void *t, int heads, size_t rb, const void *block, void *send,
                                const size_t *sb, const size_t *sd, void *stream)
{
    stream_check(stream);
    ++counts.kernels;
    return nsp_pack_ops_host.pack_h2s(t, heads, rb, block, send, sb, sd, stream);
}

static nsp_status_t pk_unpack_h2s(void *t, int heads, size_t rb, nsp_a2a_replicas_t rep,
                                  const void *recv, const size_t *rbytes, const size_t *rd,
                                  void *chunks, void *stream)
{
    stream_check(stream);
    ++counts.kernels;
    return nsp_pack_ops_host.unpack_h2s(t, heads, rb, rep, recv, rbytes, rd, chunks, stream);
}

static nsp_status_t pk_copy_self(void *t, nsp_a2a_dir_t dir, int heads, size_t rb,
                                 nsp_a2a_replicas_t rep, const void *src, void *dst,
                                 void *stream)
{
    stream_check(stream);
    ++counts.kernels;
    return nsp_pack_ops_host.copy_self(t, dir, heads, rb, rep, src, dst, stream);
}

static const nsp_pack_ops_t sync_pack = {
    .name          = "host (counted)",
    .level_create  = pk_level_create,
    .level_release = pk_level_release,
    .pack_s2h      = pk_pack_s2h,
    .unpack_s2h    = pk_unpack_s2h,
    .pack_h2s      = pk_pack_h2s,
    .unpack_h2s    = pk_unpack_h2s,
    .copy_self     = pk_copy_self,
};

const nsp_memtype_t *sync_device_memtype(void)
{
    static nsp_memtype_t mt;

    mt        = nsp_memtype_host; /* its reductions and nested attention's ops */
    mt.name   = "sync-device";
    mt.engine = &nsp_a2a_engine_device;
    mt.devops = &sync_devops;
    mt.pack   = &sync_pack;
    return &mt;
}
