/*
 * The emulated device's shared pieces (emu_internal.h): the clock, handle
 * checks, the sticky error as a status, ops and how they are queued, event
 * records (marks) and freeing events. Called by emu_device.c (the threads
 * and the device) and emu_enqueue.c (the entries), calling neither.
 */
#include "streams/emu_internal.h"

#include "common/log.h"

#include <stdlib.h>
#include <time.h>

double nsp_emu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *nsp_emu_op_name(nsp_emu_op_kind_t kind)
{
    static const char *const names[] = {"kernel", "copy", "host", "record", "wait", "free"};

    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

nsp_status_t emu_sticky(const nsp_emu_device_t *dev)
{
    if (dev->error == NSP_OK) {
        return NSP_OK;
    }
    return nsp_error_quiet(dev->error, "%s", dev->error_msg);
}

emu_stream_t *emu_stream_of(void *stream, const char *fn)
{
    emu_stream_t *s = stream;

    if (s == NULL || s->magic != EMU_MAGIC_STREAM) {
        nsp_error(NSP_ERR_INVALID_ARG, "%s: %s is not a stream of an emulated device", fn,
                  s == NULL ? "NULL" : "the handle");
        return NULL;
    }
    return s;
}

/* ---- ops ------------------------------------------------------------------------ */

emu_op_t *emu_op_new(nsp_emu_op_kind_t kind)
{
    emu_op_t *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a %s op", EMU_WHAT,
                  nsp_emu_op_name(kind));
        return NULL;
    }
    op->kind = kind;
    return op;
}

void emu_enqueue_locked(emu_stream_t *s, emu_op_t *op)
{
    op->seq       = s->dev->next_seq++;
    op->tag       = s->tag;
    op->t_enqueue = nsp_emu_now();
    if (s->tail != NULL) {
        s->tail->next = op;
    } else {
        s->head = op;
    }
    s->tail = op;
    s->enqueued++;
    pthread_cond_signal(&s->wake);
}

/* ---- marks and events ------------------------------------------------------------ */

void emu_mark_hold(emu_mark_t *mark)
{
    mark->refs++;
}

void emu_mark_drop(emu_mark_t *mark)
{
    if (mark != NULL && --mark->refs == 0) {
        free(mark);
    }
}

emu_event_t *emu_event_of(void *ev, const char *fn)
{
    emu_event_t *e = ev;

    if (e == NULL || e->magic != EMU_MAGIC_EVENT) {
        nsp_error(NSP_ERR_INVALID_ARG, "%s: %s is not an event of an emulated device", fn,
                  e == NULL ? "NULL" : "the handle");
        return NULL;
    }
    return e;
}

void emu_event_free(emu_event_t *e)
{
    if (e->prev != NULL) {
        e->prev->next = e->next;
    } else {
        e->dev->events = e->next;
    }
    if (e->next != NULL) {
        e->next->prev = e->prev;
    }
    emu_mark_drop(e->last);
    e->magic = EMU_MAGIC_DEAD;
    free(e);
}

void emu_events_free(nsp_emu_device_t *dev)
{
    while (dev->events != NULL) {
        emu_event_free(dev->events);
    }
}

