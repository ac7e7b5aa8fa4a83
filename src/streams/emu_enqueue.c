/*
 * The emulated device's entries that enqueue work (emu_device.h), and the
 * entries of its events. Every entry checks its handles, takes the device's lock, refuses
 * work after a sticky error (but frees), and appends one op to the stream.
 */
#include "streams/emu_internal.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>

#define EMU_ALIGN 256 /* bytes, as cudaMalloc's */

/* ---- events ---------------------------------------------------------------------- */

nsp_status_t nsp_emu_event_create(nsp_emu_device_t *dev, void **ev)
{
    emu_event_t *e;
    nsp_status_t status;

    if (dev == NULL || ev == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_event_create: NULL %s",
                         dev == NULL ? "device" : "event");
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for an event", EMU_WHAT);
    }
    e->magic = EMU_MAGIC_EVENT;
    e->dev   = dev;
    pthread_mutex_lock(&dev->lock);
    status = emu_sticky(dev);
    if (status == NSP_OK) {
        e->next = dev->events;
        if (dev->events != NULL) {
            dev->events->prev = e;
        }
        dev->events = e;
    }
    pthread_mutex_unlock(&dev->lock);
    if (status != NSP_OK) {
        free(e);
        return status;
    }
    *ev = e;
    return NSP_OK;
}

void nsp_emu_event_destroy(void *ev)
{
    emu_event_t      *e = ev;
    nsp_emu_device_t *dev;

    if (e == NULL || e->magic != EMU_MAGIC_EVENT) {
        return;
    }
    dev = e->dev;
    pthread_mutex_lock(&dev->lock);
    emu_event_free(e); /* waits enqueued on its record hold the record */
    pthread_mutex_unlock(&dev->lock);
}

nsp_status_t nsp_emu_event_query(void *ev)
{
    emu_event_t *e = emu_event_of(ev, "nsp_emu_event_query");
    nsp_status_t status;

    if (e == NULL) {
        return NSP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&e->dev->lock);
    status = emu_sticky(e->dev);
    if (status == NSP_OK && e->last != NULL && !e->last->done) {
        status = NSP_INPROGRESS;
    }
    pthread_mutex_unlock(&e->dev->lock);
    return status;
}

/* ---- enqueueing ---------------------------------------------------------------- */

/* Lock the device of `stream` for an enqueue: a live stream, not destroyed,
 * and (with `sticky`) no sticky error. On NSP_OK the lock is held. */
static nsp_status_t emu_begin(void *stream, const char *fn, int sticky, emu_stream_t **out)
{
    emu_stream_t *s = emu_stream_of(stream, fn);
    nsp_status_t  status = NSP_OK;

    if (s == NULL) {
        return NSP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&s->dev->lock);
    if (s->destroyed) {
        status = nsp_error(NSP_ERR_INVALID_ARG, "%s: stream %d was destroyed", fn, s->id);
    } else if (sticky) {
        status = emu_sticky(s->dev);
    }
    if (status != NSP_OK) {
        pthread_mutex_unlock(&s->dev->lock);
        return status;
    }
    *out = s;
    return NSP_OK;
}

/* Enqueue op on stream (op may be NULL: no memory, already recorded). */
static nsp_status_t emu_submit(void *stream, emu_op_t *op, const char *fn, int sticky)
{
    emu_stream_t *s = NULL;
    nsp_status_t  status;

    if (op == NULL) {
        return NSP_ERR_NO_MEMORY;
    }
    status = emu_begin(stream, fn, sticky, &s);
    if (status != NSP_OK) {
        free(op);
        return status;
    }
    emu_enqueue_locked(s, op);
    pthread_mutex_unlock(&s->dev->lock);
    return NSP_OK;
}

/* Lock for an op between an event and a stream of one device. */
static nsp_status_t emu_begin_pair(void *ev, void *stream, const char *fn, emu_event_t **e,
                                   emu_stream_t **s)
{
    *e = emu_event_of(ev, fn);
    if (*e == NULL) {
        return NSP_ERR_INVALID_ARG;
    }
    NSP_CHECK(emu_begin(stream, fn, 1, s));
    if ((*s)->dev != (*e)->dev) {
        pthread_mutex_unlock(&(*s)->dev->lock);
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: the event and stream %d belong to different "
                         "emulated devices", fn, (*s)->id);
    }
    return NSP_OK;
}

nsp_status_t nsp_emu_event_record(void *ev, void *stream)
{
    emu_op_t     *op   = emu_op_new(NSP_EMU_OP_RECORD);
    emu_mark_t   *mark = calloc(1, sizeof(*mark));
    emu_event_t  *e;
    emu_stream_t *s;
    nsp_status_t  status = NSP_ERR_NO_MEMORY;

    if (op == NULL || mark == NULL) {
        nsp_error(status, "%s: no memory to record an event", EMU_WHAT);
        goto err_free;
    }
    NSP_CHECK_GOTO(emu_begin_pair(ev, stream, "nsp_emu_event_record", &e, &s), status, err_free);
    emu_mark_hold(mark); /* the op's */
    emu_mark_hold(mark); /* the event's: its latest record from now on */
    emu_mark_drop(e->last);
    e->last     = mark;
    op->u.mark  = mark;
    emu_enqueue_locked(s, op);
    pthread_mutex_unlock(&s->dev->lock);
    return NSP_OK;
err_free:
    free(mark);
    free(op);
    return status;
}

nsp_status_t nsp_emu_stream_wait_event(void *stream, void *ev)
{
    emu_op_t     *op = emu_op_new(NSP_EMU_OP_WAIT);
    emu_event_t  *e;
    emu_stream_t *s;
    nsp_status_t  status;

    if (op == NULL) {
        return NSP_ERR_NO_MEMORY;
    }
    NSP_CHECK_GOTO(emu_begin_pair(ev, stream, "nsp_emu_stream_wait_event", &e, &s), status,
                   err_free);
    if (e->last == NULL) {
        pthread_mutex_unlock(&s->dev->lock); /* never recorded: nothing to wait for */
        free(op);
        return NSP_OK;
    }
    emu_mark_hold(e->last); /* the record as it is now, whatever is recorded later */
    op->u.mark = e->last;
    emu_enqueue_locked(s, op);
    pthread_mutex_unlock(&s->dev->lock);
    return NSP_OK;
err_free:
    free(op);
    return status;
}

nsp_status_t nsp_emu_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    emu_op_t *op;

    if (bytes > 0 && (dst == NULL || src == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_memcpy_async: NULL %s for %zu bytes",
                         dst == NULL ? "dst" : "src", bytes);
    }
    op = emu_op_new(NSP_EMU_OP_COPY);
    if (op != NULL) {
        op->u.copy.dst   = dst;
        op->u.copy.src   = src;
        op->u.copy.bytes = bytes;
    }
    return emu_submit(stream, op, "nsp_emu_memcpy_async", 1);
}

nsp_status_t nsp_emu_alloc_async(void **p, size_t bytes, void *stream)
{
    emu_stream_t *s;
    void         *mem = NULL;

    if (p == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_alloc_async: NULL pointer");
    }
    NSP_CHECK(emu_begin(stream, "nsp_emu_alloc_async", 1, &s));
    pthread_mutex_unlock(&s->dev->lock);
    if (bytes > 0 && posix_memalign(&mem, EMU_ALIGN, bytes) != 0) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", EMU_WHAT, bytes);
    }
    *p = mem;
    return NSP_OK;
}

nsp_status_t nsp_emu_free_async(void *p, void *stream)
{
    emu_op_t *op;

    if (p == NULL) {
        return NSP_OK;
    }
    op = emu_op_new(NSP_EMU_OP_FREE);
    if (op != NULL) {
        op->u.ptr = p;
    }
    return emu_submit(stream, op, "nsp_emu_free_async", 0);
}

nsp_status_t nsp_emu_launch_host(void *stream, nsp_emu_host_fn_t fn, void *arg)
{
    emu_op_t *op;

    if (fn == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_launch_host: NULL function");
    }
    op = emu_op_new(NSP_EMU_OP_HOST);
    if (op != NULL) {
        op->u.host.fn  = fn;
        op->u.host.arg = arg;
    }
    return emu_submit(stream, op, "nsp_emu_launch_host", 1);
}

nsp_status_t nsp_emu_launch_host_op_owned(void *stream, nsp_emu_kernel_fn_t fn,
                                          nsp_emu_host_fn_t drop, void *arg)
{
    emu_op_t *op;

    if (fn == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_launch_host_op: NULL function");
    }
    op = emu_op_new(NSP_EMU_OP_HOST);
    if (op != NULL) {
        op->u.host.op  = fn;
        op->u.host.arg = arg;
        op->drop       = drop;
    }
    return emu_submit(stream, op, "nsp_emu_launch_host_op", 1);
}

nsp_status_t nsp_emu_launch_host_op(void *stream, nsp_emu_kernel_fn_t fn, void *arg)
{
    return nsp_emu_launch_host_op_owned(stream, fn, NULL, arg);
}

nsp_emu_device_t *nsp_emu_stream_device(void *stream)
{
    const emu_stream_t *s = stream;

    return s != NULL && s->magic == EMU_MAGIC_STREAM ? s->dev : NULL;
}

nsp_emu_device_t *nsp_emu_event_device(void *ev)
{
    const emu_event_t *e = ev;

    return e != NULL && e->magic == EMU_MAGIC_EVENT ? e->dev : NULL;
}

nsp_status_t nsp_emu_launch_timed_owned(void *stream, double seconds, nsp_emu_kernel_fn_t fn,
                                        nsp_emu_host_fn_t drop, void *arg)
{
    emu_op_t *op;

    if (!(seconds >= 0) || !isfinite(seconds)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_launch_timed: %g seconds (need a finite "
                         "value >= 0)", seconds);
    }
    op = emu_op_new(NSP_EMU_OP_KERNEL);
    if (op != NULL) {
        op->u.kernel.seconds = seconds;
        op->u.kernel.fn      = fn;
        op->u.kernel.arg     = arg;
        op->drop             = drop;
    }
    return emu_submit(stream, op, "nsp_emu_launch_timed", 1);
}

nsp_status_t nsp_emu_launch_timed(void *stream, double seconds, nsp_emu_kernel_fn_t fn,
                                  void *arg)
{
    return nsp_emu_launch_timed_owned(stream, seconds, fn, NULL, arg);
}
