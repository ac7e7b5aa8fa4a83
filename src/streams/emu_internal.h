/*
 * The emulated device's state (emu_device.h), shared by its files:
 * emu_device.c (the device, its streams and their threads, running ops,
 * the trace), emu_enqueue.c (the entries that enqueue ops, events) and
 * emu_core.c (what both call: checks, ops, queues, event records).
 *
 * Locking: one mutex per device (dev->lock) guards everything below but
 * an op's payload while its stream's thread runs it. dev->changed is
 * broadcast whenever something others may wait for happened: an op
 * completed, the compute was released, an event record ran, the device was
 * cancelled. It uses CLOCK_MONOTONIC, so timed waits take the trace's clock.
 */
#ifndef NSP_STREAMS_EMU_INTERNAL_H_
#define NSP_STREAMS_EMU_INTERNAL_H_

#include "streams/emu_device.h"

#include <pthread.h>

#define EMU_MAGIC_STREAM 0x656d7553u /* "emuS" */
#define EMU_MAGIC_EVENT  0x656d7545u /* "emuE" */
#define EMU_MAGIC_DEAD   0x64656164u /* freed or destroyed */
#define EMU_WHAT         "emulated device"

/* One record of an event: done once the record op ran. Referenced by the
 * event (its latest), the record op and every wait op enqueued on it. */
typedef struct emu_mark {
    int done;
    int refs;
} emu_mark_t;

typedef struct emu_op {
    struct emu_op    *next;
    nsp_emu_op_kind_t kind;
    uint64_t          seq, tag;
    double            t_enqueue, t_start;
    nsp_emu_host_fn_t drop; /* kernels, host ops: drop(arg) when fn(arg) does not run */
    union {
        struct {
            double              seconds;
            nsp_emu_kernel_fn_t fn;
            void               *arg;
        } kernel;
        struct {
            void       *dst;
            const void *src;
            size_t      bytes;
        } copy;
        struct {
            nsp_emu_host_fn_t   fn;
            nsp_emu_kernel_fn_t op; /* nsp_emu_launch_host_op: a status (fn NULL) */
            void               *arg;
        } host;
        emu_mark_t *mark; /* record, wait */
        void       *ptr;  /* free */
    } u;
} emu_op_t;

typedef struct emu_stream {
    uint32_t               magic;
    struct nsp_emu_device *dev;
    struct emu_stream     *next;        /* the device's list */
    int                    id, priority;
    uint64_t               tag;
    emu_op_t              *head, *tail; /* the head runs; it leaves the queue when done */
    uint64_t               enqueued, done;
    int                    destroyed;   /* takes no more ops; exits once empty */
    int                    exited;      /* its thread left its loop */
    int                    want_compute; /* its head kernel waits for the compute */
    uint64_t               ticket;      /* ... since this ticket */
    pthread_cond_t         wake;        /* an op was enqueued, or destroy */
    pthread_t              thread;
} emu_stream_t;

typedef struct emu_event {
    uint32_t               magic;
    struct nsp_emu_device *dev;
    struct emu_event      *prev, *next; /* the device's list */
    emu_mark_t            *last;        /* the latest record; NULL: never recorded */
} emu_event_t;

struct nsp_emu_device {
    nsp_emu_params_t       params;      /* resolved: every field has its value */
    pthread_mutex_t        lock;
    pthread_cond_t         changed;
    emu_stream_t          *streams;     /* every stream, the default one last */
    emu_stream_t          *stream0;
    emu_event_t           *events;
    int                    next_stream_id;
    uint64_t               next_seq, next_ticket;
    int                    compute_busy; /* kernels holding the compute */
    int                    closing;     /* destroy began: threads exit once empty */
    int                    cancel;      /* destroy timed out: drop, cut short */
    nsp_status_t           error;       /* sticky: the first failed kernel */
    char                   error_msg[256];
    nsp_emu_trace_entry_t *trace;
    size_t                 trace_n;
    nsp_emu_stats_t        stats;
};

/** The stream `stream` is, or NULL (message recorded) when it is not a live
 *  stream. `fn` names the caller in the message. */
emu_stream_t *emu_stream_of(void *stream, const char *fn);

/** The event `ev` is, or NULL (message recorded). */
emu_event_t *emu_event_of(void *ev, const char *fn);

/** The sticky error as a status of the calling thread (quietly recorded:
 *  it was logged where it was decided), or NSP_OK. Under dev->lock. */
nsp_status_t emu_sticky(const nsp_emu_device_t *dev);

/** A zeroed op of `kind`, or NULL (NSP_ERR_NO_MEMORY recorded). */
emu_op_t *emu_op_new(nsp_emu_op_kind_t kind);

/** Append op to s's queue (under dev->lock): numbers, tags and timestamps
 *  it, wakes the stream's thread. */
void emu_enqueue_locked(emu_stream_t *s, emu_op_t *op);

/** Take a reference of mark (under dev->lock). */
void emu_mark_hold(emu_mark_t *mark);

/** Drop a reference of mark, freeing it with the last (under dev->lock). */
void emu_mark_drop(emu_mark_t *mark);

/** Unlink e from its device's list, drop its record, free it (under dev->lock). */
void emu_event_free(emu_event_t *e);

/** Free every event of dev (its destroy; under dev->lock or alone). */
void emu_events_free(nsp_emu_device_t *dev);

#endif /* NSP_STREAMS_EMU_INTERNAL_H_ */
