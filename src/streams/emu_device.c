/*
 * The emulated device (emu_device.h): the device, its streams and their
 * threads, running the ops, the trace. The entries that enqueue ops and the
 * events are in emu_enqueue.c, what both use in emu_core.c.
 */
#define _GNU_SOURCE
#include "streams/emu_internal.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EMU_DRAIN_DEFAULT_S 30.0

static struct timespec emu_timespec(double t)
{
    struct timespec ts;
    double          sec = floor(t);

    ts.tv_sec  = (time_t)sec;
    ts.tv_nsec = (long)((t - sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Wait on dev->changed until `deadline` (CLOCK_MONOTONIC seconds) at most. */
static void emu_wait_changed(nsp_emu_device_t *dev, double deadline)
{
    struct timespec ts = emu_timespec(deadline);

    pthread_cond_timedwait(&dev->changed, &dev->lock, &ts);
}

/* ---- the trace and the sticky error (under dev->lock) ----------------------- */

static void emu_trace_add(nsp_emu_device_t *dev, const emu_stream_t *s, const emu_op_t *op,
                          nsp_status_t status)
{
    nsp_emu_trace_entry_t *e;

    if (dev->trace_n >= dev->params.trace_capacity) {
        dev->stats.trace_dropped += dev->params.trace_capacity > 0;
        return;
    }
    e            = &dev->trace[dev->trace_n++];
    e->kind      = op->kind;
    e->stream    = s->id;
    e->seq       = op->seq;
    e->tag       = op->tag;
    e->seconds   = op->kind == NSP_EMU_OP_KERNEL ? op->u.kernel.seconds : 0.0;
    e->bytes     = op->kind == NSP_EMU_OP_COPY ? op->u.copy.bytes : 0;
    e->t_enqueue = op->t_enqueue;
    e->t_start   = op->t_start;
    e->t_end     = nsp_emu_now();
    e->status    = status;
}

/* The first failed kernel (or host op) decides the device's error (logged
 * here, once). */
static void emu_set_error(nsp_emu_device_t *dev, const emu_stream_t *s, nsp_status_t status,
                          const char *what)
{
    const char *why = nsp_last_error(); /* the kernel's, in this thread */

    if (dev->error != NSP_OK) {
        return;
    }
    snprintf(dev->error_msg, sizeof(dev->error_msg),
             "%s: a %s on stream %d failed (%s: %s); the device drops what is "
             "queued, destroy it", EMU_WHAT, what, s->id, nsp_status_string(status),
             why != NULL && why[0] != '\0' ? why : "no message");
    dev->error = nsp_error(status, "%s", dev->error_msg);
    pthread_cond_broadcast(&dev->changed);
}

/* ---- running ops on a stream's thread (under dev->lock) -------------------- */

/* May stream s's head kernel take the compute now? A free slot, and no
 * other waiting stream before it (smaller priority, then earlier ticket). */
static int emu_compute_mine(const nsp_emu_device_t *dev, const emu_stream_t *s)
{
    if (dev->compute_busy >= dev->params.compute_slots) {
        return 0;
    }
    for (const emu_stream_t *o = dev->streams; o != NULL; o = o->next) {
        if (o != s && o->want_compute &&
            (o->priority < s->priority || (o->priority == s->priority && o->ticket < s->ticket))) {
            return 0;
        }
    }
    return 1;
}

/* Why ops are dropped now (NSP_OK: they run). */
static nsp_status_t emu_dropping(const nsp_emu_device_t *dev)
{
    return dev->cancel ? NSP_ERR_TIMEOUT : dev->error;
}

/* An op whose function will not run: its drop(arg) in its place, outside
 * the lock (it frees what the op owned). */
static void emu_drop_payload(nsp_emu_device_t *dev, emu_op_t *op)
{
    void *arg;

    if (op->drop == NULL) {
        return;
    }
    arg = op->kind == NSP_EMU_OP_KERNEL ? op->u.kernel.arg : op->u.host.arg;
    pthread_mutex_unlock(&dev->lock);
    op->drop(arg);
    pthread_mutex_lock(&dev->lock);
    op->drop = NULL; /* once */
}

static nsp_status_t emu_run_kernel(emu_stream_t *s, emu_op_t *op)
{
    nsp_emu_device_t *dev = s->dev;
    nsp_status_t      status = NSP_OK;
    double            deadline;

    s->want_compute = 1;
    s->ticket       = dev->next_ticket++;
    while (emu_dropping(dev) == NSP_OK && !emu_compute_mine(dev, s)) {
        pthread_cond_wait(&dev->changed, &dev->lock);
    }
    s->want_compute = 0;
    if (emu_dropping(dev) != NSP_OK) {
        status = emu_dropping(dev);
        pthread_cond_broadcast(&dev->changed); /* the next in line may go */
        emu_drop_payload(dev, op);
        return status;
    }
    dev->compute_busy++;
    op->t_start = nsp_emu_now();
    if (dev->params.math && op->u.kernel.fn != NULL) {
        pthread_mutex_unlock(&dev->lock);
        status = op->u.kernel.fn(op->u.kernel.arg);
        pthread_mutex_lock(&dev->lock);
        op->drop = NULL; /* fn ran: it owned arg */
    }
    /* Hold the compute for the time asked (cut short by a cancel). */
    deadline = op->t_start + op->u.kernel.seconds;
    while (!dev->cancel && nsp_emu_now() < deadline) {
        emu_wait_changed(dev, deadline);
    }
    dev->compute_busy--;
    dev->stats.kernels++;
    dev->stats.kernel_busy_s += nsp_emu_now() - op->t_start;
    pthread_cond_broadcast(&dev->changed);
    emu_drop_payload(dev, op); /* timing mode: fn never ran */
    if (status != NSP_OK) {
        emu_set_error(dev, s, status, "timed kernel");
    }
    return status;
}

static nsp_status_t emu_run_wait(nsp_emu_device_t *dev, const emu_mark_t *mark)
{
    while (!mark->done && emu_dropping(dev) == NSP_OK) {
        pthread_cond_wait(&dev->changed, &dev->lock);
    }
    return mark->done ? NSP_OK : emu_dropping(dev);
}

/* Run the payload of op outside the lock: its status (a host op's). */
static nsp_status_t emu_run_unlocked(nsp_emu_device_t *dev, emu_op_t *op)
{
    nsp_status_t status = NSP_OK;

    pthread_mutex_unlock(&dev->lock);
    if (op->kind == NSP_EMU_OP_COPY) {
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
    } else if (op->kind == NSP_EMU_OP_HOST && op->u.host.op != NULL) {
        status = op->u.host.op(op->u.host.arg);
    } else if (op->kind == NSP_EMU_OP_HOST) {
        op->u.host.fn(op->u.host.arg);
    } else {
        free(op->u.ptr);
    }
    pthread_mutex_lock(&dev->lock);
    return status;
}

/* Run the head op of s: its status (the reason when it was dropped). Frees
 * always free and records always complete, so nothing waits forever. */
static nsp_status_t emu_run(emu_stream_t *s, emu_op_t *op)
{
    nsp_emu_device_t *dev = s->dev;

    nsp_status_t      status;

    op->t_start = nsp_emu_now();
    if (op->kind == NSP_EMU_OP_FREE) {
        (void)emu_run_unlocked(dev, op);
        return NSP_OK;
    }
    if (op->kind == NSP_EMU_OP_RECORD) {
        op->u.mark->done = 1;
        return emu_dropping(dev);
    }
    if (emu_dropping(dev) != NSP_OK) {
        status = emu_dropping(dev);
        emu_drop_payload(dev, op); /* kernels and host ops only have one */
        return status;
    }
    if (op->kind == NSP_EMU_OP_KERNEL) {
        return emu_run_kernel(s, op);
    }
    if (op->kind == NSP_EMU_OP_WAIT) {
        return emu_run_wait(dev, op->u.mark);
    }
    status = emu_run_unlocked(dev, op);
    if (status != NSP_OK) {
        emu_set_error(dev, s, status, "host op");
    }
    return status;
}

static void emu_complete(emu_stream_t *s, emu_op_t *op, nsp_status_t status)
{
    nsp_emu_device_t *dev = s->dev;

    s->head = op->next;
    if (s->head == NULL) {
        s->tail = NULL;
    }
    s->done++;
    dev->stats.ops_done++;
    emu_trace_add(dev, s, op, status);
    if (op->kind == NSP_EMU_OP_RECORD || op->kind == NSP_EMU_OP_WAIT) {
        emu_mark_drop(op->u.mark);
    }
    free(op);
    pthread_cond_broadcast(&dev->changed);
}

/* A stream's thread: run the queue in order until destroyed (or the device
 * closes) with nothing left. */
static void *emu_stream_main(void *arg)
{
    emu_stream_t     *s   = arg;
    nsp_emu_device_t *dev = s->dev;

    pthread_mutex_lock(&dev->lock);
    for (;;) {
        emu_op_t *op;
        while (s->head == NULL && !s->destroyed && !dev->closing) {
            pthread_cond_wait(&s->wake, &dev->lock);
        }
        op = s->head;
        if (op == NULL) {
            break;
        }
        emu_complete(s, op, emu_run(s, op));
    }
    s->exited = 1;
    pthread_cond_broadcast(&dev->changed);
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

/* ---- streams ------------------------------------------------------------------ */

static void emu_stream_free(emu_stream_t *s)
{
    pthread_cond_destroy(&s->wake);
    s->magic = EMU_MAGIC_DEAD;
    free(s);
}

/* Start the thread of s with every signal blocked (signals go to the
 * process's own threads, not to the device's). */
static int emu_thread_start(emu_stream_t *s)
{
    sigset_t all, old;
    int      rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&s->thread, NULL, emu_stream_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Join and free destroyed streams whose threads ended (under dev->lock:
 * an exited thread no longer takes it). */
static void emu_reap_locked(nsp_emu_device_t *dev)
{
    emu_stream_t **pp = &dev->streams;

    while (*pp != NULL) {
        emu_stream_t *s = *pp;
        if (s->destroyed && s->exited) {
            *pp = s->next;
            pthread_join(s->thread, NULL);
            emu_stream_free(s);
        } else {
            pp = &s->next;
        }
    }
}

/* A new stream with its thread, linked first into dev's list (under the lock). */
static nsp_status_t emu_stream_new_locked(nsp_emu_device_t *dev, int priority,
                                          emu_stream_t **out)
{
    emu_stream_t *s = calloc(1, sizeof(*s));
    int           rc;

    if (s == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a stream", EMU_WHAT);
    }
    s->magic    = EMU_MAGIC_STREAM;
    s->dev      = dev;
    s->id       = dev->next_stream_id;
    s->priority = priority;
    pthread_cond_init(&s->wake, NULL);
    rc = emu_thread_start(s);
    if (rc != 0) {
        emu_stream_free(s);
        return nsp_error(NSP_ERR_INTERNAL, "%s: cannot start a stream's thread: %s", EMU_WHAT,
                         strerror(rc));
    }
    dev->next_stream_id++;
    s->next      = dev->streams;
    dev->streams = s;
    *out         = s;
    return NSP_OK;
}

nsp_status_t nsp_emu_stream_create(nsp_emu_device_t *dev, int priority, void **stream)
{
    emu_stream_t *s = NULL;
    nsp_status_t  status;

    if (dev == NULL || stream == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_stream_create: NULL %s",
                         dev == NULL ? "device" : "stream");
    }
    pthread_mutex_lock(&dev->lock);
    emu_reap_locked(dev);
    status = emu_sticky(dev);
    if (status == NSP_OK) {
        status = emu_stream_new_locked(dev, priority, &s);
    }
    pthread_mutex_unlock(&dev->lock);
    if (status == NSP_OK) {
        *stream = s;
    }
    return status;
}

void nsp_emu_stream_destroy(void *stream)
{
    emu_stream_t *s = stream;

    if (s == NULL || s->magic != EMU_MAGIC_STREAM || s == s->dev->stream0) {
        return;
    }
    pthread_mutex_lock(&s->dev->lock);
    s->destroyed = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->dev->lock);
}

void *nsp_emu_default_stream(nsp_emu_device_t *dev)
{
    return dev != NULL ? dev->stream0 : NULL;
}

int nsp_emu_stream_id(void *stream)
{
    emu_stream_t *s = stream;

    return s != NULL && s->magic == EMU_MAGIC_STREAM ? s->id : -1;
}

nsp_status_t nsp_emu_stream_set_tag(void *stream, uint64_t tag)
{
    emu_stream_t *s = emu_stream_of(stream, "nsp_emu_stream_set_tag");

    if (s == NULL) {
        return NSP_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&s->dev->lock);
    s->tag = tag;
    pthread_mutex_unlock(&s->dev->lock);
    return NSP_OK;
}

nsp_status_t nsp_emu_stream_sync(void *stream)
{
    emu_stream_t     *s = emu_stream_of(stream, "nsp_emu_stream_sync");
    nsp_emu_device_t *dev;
    nsp_status_t      status;
    uint64_t          target;

    if (s == NULL) {
        return NSP_ERR_INVALID_ARG;
    }
    dev = s->dev;
    if (pthread_equal(pthread_self(), s->thread)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_stream_sync: called by a host function "
                         "of stream %d on its own stream (it would wait for itself)", s->id);
    }
    pthread_mutex_lock(&dev->lock);
    target = s->enqueued;
    while (s->done < target && !dev->cancel) {
        pthread_cond_wait(&dev->changed, &dev->lock);
    }
    status = s->done < target ? nsp_error(NSP_ERR_TIMEOUT, "nsp_emu_stream_sync: the device "
                                          "was cancelled by its destroy")
                              : emu_sticky(dev);
    pthread_mutex_unlock(&dev->lock);
    return status;
}

/* ---- the device ------------------------------------------------------------------ */

static nsp_status_t emu_params_resolve(const nsp_emu_params_t *in, nsp_emu_params_t *out)
{
    uint64_t m = in != NULL ? in->field_mask : 0;

    memset(out, 0, sizeof(*out));
    out->field_mask      = m;
    out->compute_slots   = 1;
    out->drain_timeout_s = EMU_DRAIN_DEFAULT_S;
    out->math            = (m & NSP_EMU_FIELD_MATH) ? in->math : 0;
    if (m & NSP_EMU_FIELD_COMPUTE_SLOTS) {
        out->compute_slots = in->compute_slots;
    }
    if (m & NSP_EMU_FIELD_TRACE) {
        out->trace_capacity = in->trace_capacity;
    }
    if (m & NSP_EMU_FIELD_DRAIN_TIMEOUT) {
        out->drain_timeout_s = in->drain_timeout_s;
    }
    if (out->math != 0 && out->math != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: math = %d (0 or 1)", EMU_WHAT, out->math);
    }
    if (out->compute_slots < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: compute_slots = %d (need >= 1)", EMU_WHAT,
                         out->compute_slots);
    }
    if (!(out->drain_timeout_s >= 0) || !isfinite(out->drain_timeout_s)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: drain_timeout_s = %g (need a finite value "
                         ">= 0)", EMU_WHAT, out->drain_timeout_s);
    }
    return NSP_OK;
}

/* The lock, the condition on the trace's clock, the trace. */
static nsp_status_t emu_device_init(nsp_emu_device_t *dev)
{
    pthread_condattr_t ca;

    if (dev->params.trace_capacity > 0) {
        dev->trace = calloc(dev->params.trace_capacity, sizeof(*dev->trace));
        if (dev->trace == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a trace of %zu ops",
                             EMU_WHAT, dev->params.trace_capacity);
        }
    }
    pthread_mutex_init(&dev->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&dev->changed, &ca);
    pthread_condattr_destroy(&ca);
    return NSP_OK;
}

static void emu_device_free(nsp_emu_device_t *dev)
{
    while (dev->streams != NULL) {
        emu_stream_t *s = dev->streams;
        dev->streams    = s->next;
        emu_stream_free(s);
    }
    emu_events_free(dev);
    pthread_cond_destroy(&dev->changed);
    pthread_mutex_destroy(&dev->lock);
    free(dev->trace);
    free(dev);
}

nsp_status_t nsp_emu_device_create(const nsp_emu_params_t *params, nsp_emu_device_t **out)
{
    nsp_emu_device_t *dev;
    nsp_status_t      status;

    if (out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_device_create: NULL device");
    }
    dev = calloc(1, sizeof(*dev));
    if (dev == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: cannot allocate", EMU_WHAT);
    }
    NSP_CHECK_GOTO(emu_params_resolve(params, &dev->params), status, err_free);
    NSP_CHECK_GOTO(emu_device_init(dev), status, err_free);
    pthread_mutex_lock(&dev->lock);
    status = emu_stream_new_locked(dev, 0, &dev->stream0);
    pthread_mutex_unlock(&dev->lock);
    if (status != NSP_OK) {
        emu_device_free(dev);
        return status;
    }
    NSP_DEBUG("%s: created (%s mode, %d compute slot%s, trace %zu ops)", EMU_WHAT,
              dev->params.math ? "math" : "timing", dev->params.compute_slots,
              dev->params.compute_slots == 1 ? "" : "s", dev->params.trace_capacity);
    *out = dev;
    return NSP_OK;
err_free:
    free(dev->trace);
    free(dev);
    return status;
}

/* Ops enqueued and not yet completed, and threads not yet out of their loop. */
static uint64_t emu_pending_ops(const nsp_emu_device_t *dev, int *running)
{
    uint64_t n = 0;

    *running = 0;
    for (const emu_stream_t *s = dev->streams; s != NULL; s = s->next) {
        n += s->enqueued - s->done;
        *running += !s->exited;
    }
    return n;
}

/* Wait (under the lock) until every stream's thread left its loop, at most
 * `seconds`; returns the threads still in it. */
static int emu_wait_exited(nsp_emu_device_t *dev, double seconds)
{
    double deadline = nsp_emu_now() + seconds;
    int    running;

    for (emu_pending_ops(dev, &running); running > 0 && nsp_emu_now() < deadline;
         emu_pending_ops(dev, &running)) {
        emu_wait_changed(dev, deadline);
    }
    return running;
}

/* Close: drain, cancel past the timeout; the ops dropped into *dropped and
 * the threads still running (a host function that did not return). */
static int emu_close_locked(nsp_emu_device_t *dev, uint64_t *dropped)
{
    int running;

    dev->closing = 1;
    for (emu_stream_t *s = dev->streams; s != NULL; s = s->next) {
        pthread_cond_signal(&s->wake);
    }
    *dropped = 0;
    if (emu_wait_exited(dev, dev->params.drain_timeout_s) == 0) {
        return 0;
    }
    *dropped    = emu_pending_ops(dev, &running);
    dev->cancel = 1;
    pthread_cond_broadcast(&dev->changed);
    return emu_wait_exited(dev, dev->params.drain_timeout_s);
}

nsp_status_t nsp_emu_device_destroy(nsp_emu_device_t *dev)
{
    uint64_t dropped = 0;
    int      running, cancelled;

    if (dev == NULL) {
        return NSP_OK;
    }
    pthread_mutex_lock(&dev->lock);
    running   = emu_close_locked(dev, &dropped);
    cancelled = dev->cancel;
    pthread_mutex_unlock(&dev->lock);
    if (running > 0) {
        /* A host function never returned: its thread keeps the device. */
        for (emu_stream_t *s = dev->streams; s != NULL; s = s->next) {
            pthread_detach(s->thread);
        }
        return nsp_error(NSP_ERR_TIMEOUT, "%s: destroy: %d stream(s) still in a host function "
                         "%.0f s after the device was cancelled; left running, the device's "
                         "memory is kept for them", EMU_WHAT, running,
                         dev->params.drain_timeout_s);
    }
    for (emu_stream_t *s = dev->streams; s != NULL; s = s->next) {
        pthread_join(s->thread, NULL);
    }
    emu_device_free(dev);
    if (cancelled) {
        return nsp_error(NSP_ERR_TIMEOUT, "%s: destroy: the queued work did not drain within "
                         "the drain timeout; %llu op(s) dropped", EMU_WHAT,
                         (unsigned long long)dropped);
    }
    return NSP_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

nsp_status_t nsp_emu_trace_read(nsp_emu_device_t *dev, size_t first, nsp_emu_trace_entry_t *out,
                                size_t cap, size_t *count)
{
    size_t n = 0;

    if (dev == NULL || count == NULL || (out == NULL && cap > 0)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_trace_read: NULL %s",
                         dev == NULL ? "device" : count == NULL ? "count" : "out");
    }
    pthread_mutex_lock(&dev->lock);
    if (first < dev->trace_n) {
        n = dev->trace_n - first < cap ? dev->trace_n - first : cap;
        memcpy(out, dev->trace + first, n * sizeof(*out));
    }
    pthread_mutex_unlock(&dev->lock);
    *count = n;
    return NSP_OK;
}

nsp_status_t nsp_emu_device_stats(nsp_emu_device_t *dev, nsp_emu_stats_t *stats)
{
    if (dev == NULL || stats == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_emu_device_stats: NULL argument");
    }
    pthread_mutex_lock(&dev->lock);
    *stats = dev->stats;
    pthread_mutex_unlock(&dev->lock);
    return NSP_OK;
}
