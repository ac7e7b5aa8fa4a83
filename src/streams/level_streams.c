/* Streams per level on a device: one stream, a fork and a done event per
 * level, through the device operations (devops.h). */
#include "config.h"

#include "streams/level_streams.h"

#include "common/log.h"

#include <stdlib.h>

#define STREAMS_WHAT "level streams"

typedef struct streams_level {
    void *stream;
    void *fork;     /* recorded on a producer, waited for by stream */
    void *done;     /* recorded on stream */
    int   recorded; /* done was recorded at least once */
} streams_level_t;

struct nsp_dev_streams {
    const nsp_devops_t *ops;
    int                 nlevels;
    int                 device;
    streams_level_t    *levels;
};

static void streams_release(nsp_dev_streams_t *s, int upto)
{
    for (int l = 0; l < upto; ++l) {
        streams_level_t *L = &s->levels[l];
        s->ops->event_destroy(L->done);
        s->ops->event_destroy(L->fork);
        s->ops->stream_destroy(L->stream);
    }
}

/* Create one level's stream and events; on error nothing of it is left. */
static nsp_status_t streams_level_init(const nsp_devops_t *ops, void *ctx, streams_level_t *L,
                                       int priority)
{
    nsp_status_t status;

    NSP_CHECK(ops->stream_create(ctx, priority, &L->stream));
    NSP_CHECK_GOTO(ops->event_create(ctx, &L->fork), status, err_destroy_stream);
    NSP_CHECK_GOTO(ops->event_create(ctx, &L->done), status, err_destroy_fork);
    return NSP_OK;
err_destroy_fork:
    ops->event_destroy(L->fork);
err_destroy_stream:
    ops->stream_destroy(L->stream);
    L->stream = NULL;
    L->fork   = NULL;
    return status;
}

nsp_status_t nsp_dev_streams_create(const nsp_devops_t *ops, void *ctx, int nlevels,
                                    int prioritize, nsp_dev_streams_t **out)
{
    nsp_dev_streams_t *s;
    nsp_status_t       status;

    if (ops == NULL || nlevels < 1 || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: %d levels (need >= 1) or a NULL argument",
                         STREAMS_WHAT, nlevels);
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL || (s->levels = calloc((size_t)nlevels, sizeof(*s->levels))) == NULL) {
        free(s);
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for %d levels", STREAMS_WHAT,
                         nlevels);
    }
    s->ops     = ops;
    s->nlevels = nlevels;
    NSP_CHECK_GOTO(ops->device_current(ctx, &s->device), status, err_free);
    for (int l = 0; l < nlevels; ++l) {
        /* level 0 the most urgent, each next one a step less */
        status = streams_level_init(ops, ctx, &s->levels[l],
                                    prioritize ? l : NSP_DEV_PRIORITY_DEFAULT);
        if (status != NSP_OK) {
            streams_release(s, l);
            goto err_free;
        }
    }
    NSP_DEBUG("%s: %d %s streams on device %d%s", STREAMS_WHAT, nlevels, ops->name, s->device,
              prioritize ? " (lower levels first)" : "");
    *out = s;
    return NSP_OK;
err_free:
    free(s->levels);
    free(s);
    return status;
}

void nsp_dev_streams_free(nsp_dev_streams_t *s)
{
    if (s == NULL) {
        return;
    }
    streams_release(s, s->nlevels);
    free(s->levels);
    free(s);
}

int nsp_dev_streams_count(const nsp_dev_streams_t *s)
{
    return s != NULL ? s->nlevels : 0;
}

int nsp_dev_streams_device(const nsp_dev_streams_t *s)
{
    return s != NULL ? s->device : -1;
}

void *nsp_dev_streams_get(const nsp_dev_streams_t *s, int level)
{
    if (s == NULL || level < 0 || level >= s->nlevels) {
        return NULL;
    }
    return s->levels[level].stream;
}

static nsp_status_t streams_check(const nsp_dev_streams_t *s, int level, const char *fn)
{
    if (s == NULL || level < 0 || level >= s->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: level %d of %d", fn, level,
                         s != NULL ? s->nlevels : 0);
    }
    return NSP_OK;
}

nsp_status_t nsp_dev_streams_fork(nsp_dev_streams_t *s, int level, void *producer)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_dev_streams_fork"));
    L = &s->levels[level];
    NSP_CHECK(s->ops->event_record(L->fork, producer));
    return s->ops->stream_wait_event(L->stream, L->fork);
}

nsp_status_t nsp_dev_streams_record(nsp_dev_streams_t *s, int level)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_dev_streams_record"));
    L = &s->levels[level];
    NSP_CHECK(s->ops->event_record(L->done, L->stream));
    L->recorded = 1;
    return NSP_OK;
}

nsp_status_t nsp_dev_streams_query(const nsp_dev_streams_t *s, int level)
{
    NSP_CHECK(streams_check(s, level, "nsp_dev_streams_query"));
    if (!s->levels[level].recorded) {
        return NSP_OK;
    }
    return s->ops->event_query(s->levels[level].done);
}

nsp_status_t nsp_dev_streams_join(nsp_dev_streams_t *s, int level, void *consumer)
{
    streams_level_t *L;

    NSP_CHECK(streams_check(s, level, "nsp_dev_streams_join"));
    L = &s->levels[level];
    if (!L->recorded) {
        return NSP_OK;
    }
    return s->ops->stream_wait_event(consumer, L->done);
}

nsp_status_t nsp_dev_streams_step(void *arg)
{
    const nsp_dev_streams_wait_t *w = arg;

    return nsp_dev_streams_query(w->streams, w->level);
}
