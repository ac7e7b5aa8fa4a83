/*
 * The emulated accelerator (internal): a per-rank "device" with streams and
 * events on host threads, for runs with more ranks than cores and for
 * running the GPU path's ordering and completion logic without a GPU
 * (docs/design/emulated-device.md).
 *
 * What it keeps of a GPU runtime:
 *   - launch is asynchronous: every enqueue returns at once; each stream
 *     has one host thread that runs its ops in the order they were
 *     enqueued (stream order);
 *   - nsp_emu_stream_wait_event(): the stream's later ops wait until the
 *     event's latest record (when the wait was enqueued) has run, as
 *     cudaStreamWaitEvent; waiting on an event never recorded is a no-op;
 *   - an event completes when the op after which it was recorded ran; its
 *     query sees its latest record (cudaEventQuery);
 *   - timed kernels (nsp_emu_launch_timed) occupy the device's compute for
 *     a given number of seconds and do no math ("timing" mode), or also
 *     run their function ("math" mode, for correctness tests). The device's
 *     compute is one shared resource, as a GPU's SMs are: by default a
 *     kernel holds ALL of it, so timed kernels of different streams of one
 *     device SERIALISE (they never overlap; a kernel that fills the GPU
 *     leaves no SM to another). When several wait, the stream with the
 *     higher priority (the smaller number, as CUDA) goes first, then the
 *     one that asked first. `compute_slots` > 1 lets that many run at once,
 *     each at full speed (not a model of a real GPU; for tests);
 *   - copies (nsp_emu_memcpy_async), host functions (nsp_emu_launch_host),
 *     stream-ordered frees run in stream order on the stream's thread and do
 *     not take the compute: a GPU's copy engines and host callbacks are
 *     apart from its SMs. Copies take what memmove takes on this host.
 *   - errors are sticky: once a kernel's function failed (math mode), the
 *     device drops every op not yet run (frees still free, records still
 *     complete, so nothing waits forever) and every later call returns that
 *     error, as a CUDA context after a failed kernel.
 * Memory is host memory (nsp_emu_alloc_async allocates at once; the
 * stream-ordered free frees when the stream reaches it).
 *
 * Every op can be traced (params.trace_capacity): kind, stream, enqueue
 * order, the caller's tag, and CLOCK_MONOTONIC timestamps of enqueue, start
 * and end (comparable across processes of one host), so a test can check
 * that a kernel never started before the op that delivered its input ended.
 *
 * Streams and events are `void *` handles, the shapes of the device-ops
 * table's entries (src/streams/devops.h), validated on every call (a stream
 * passed as an event is NSP_ERR_INVALID_ARG). They belong to their device.
 *
 * Threads: every function may be called from any thread (one mutex per
 * device); two devices share nothing. No process globals.
 *
 * Destroy drains: nsp_emu_device_destroy() waits until every op enqueued
 * has run, at most params.drain_timeout_s; past it the device cancels (ops
 * not started are dropped, running kernels and waits end at once, running
 * host functions are waited for another drain_timeout_s) and returns
 * NSP_ERR_TIMEOUT. A host function that still has not returned then is
 * left running on its detached thread and the device's memory is left
 * allocated for it (a leak, said in the message), never a hang.
 */
#ifndef NSP_STREAMS_EMU_DEVICE_H_
#define NSP_STREAMS_EMU_DEVICE_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** An emulated device (opaque). */
typedef struct nsp_emu_device nsp_emu_device_t;

/** A timed kernel's function (math mode): returns NSP_OK or an error, which
 *  becomes the device's sticky error. Runs on the stream's thread. */
typedef nsp_status_t (*nsp_emu_kernel_fn_t)(void *arg);

/** A host function (nsp_emu_launch_host), as cudaHostFn_t. */
typedef void (*nsp_emu_host_fn_t)(void *arg);

/** Which optional fields of nsp_emu_params_t are set. */
enum {
    NSP_EMU_FIELD_MATH          = 1u << 0,
    NSP_EMU_FIELD_COMPUTE_SLOTS = 1u << 1,
    NSP_EMU_FIELD_TRACE         = 1u << 2,
    NSP_EMU_FIELD_DRAIN_TIMEOUT = 1u << 3
};

typedef struct nsp_emu_params {
    uint64_t field_mask;      /**< NSP_EMU_FIELD_* that are set */
    int      math;            /**< 1: timed kernels run their function too (default 0:
                                   timing only, the function is never called) */
    int      compute_slots;   /**< timed kernels running at once (default 1: serialised) */
    size_t   trace_capacity;  /**< ops the trace keeps, the first ones (default 0: none) */
    double   drain_timeout_s; /**< destroy's wait for queued work (default 30 s) */
} nsp_emu_params_t;

/** What an op was (the trace). */
typedef enum nsp_emu_op_kind {
    NSP_EMU_OP_KERNEL = 0, /**< nsp_emu_launch_timed */
    NSP_EMU_OP_COPY   = 1, /**< nsp_emu_memcpy_async */
    NSP_EMU_OP_HOST   = 2, /**< nsp_emu_launch_host */
    NSP_EMU_OP_RECORD = 3, /**< nsp_emu_event_record */
    NSP_EMU_OP_WAIT   = 4, /**< nsp_emu_stream_wait_event */
    NSP_EMU_OP_FREE   = 5  /**< nsp_emu_free_async */
} nsp_emu_op_kind_t;

/** One op that ran (or was dropped). Times: CLOCK_MONOTONIC seconds. */
typedef struct nsp_emu_trace_entry {
    nsp_emu_op_kind_t kind;
    int               stream;    /**< the stream's number on its device (0: the default) */
    uint64_t          seq;       /**< enqueue order on the device, from 0 */
    uint64_t          tag;       /**< the stream's tag when the op was enqueued */
    double            seconds;   /**< kernels: the time asked for */
    size_t            bytes;     /**< copies: bytes */
    double            t_enqueue; /**< when the call enqueued it */
    double            t_start;   /**< kernels: when the compute was taken; others: when
                                      the stream's thread began it */
    double            t_end;     /**< when it completed */
    nsp_status_t      status;    /**< NSP_OK; a kernel's error; the sticky error or
                                      NSP_ERR_TIMEOUT (cancelled) for an op dropped */
} nsp_emu_trace_entry_t;

/** Counters of a device. */
typedef struct nsp_emu_stats {
    uint64_t ops_done;      /**< ops run or dropped */
    uint64_t kernels;       /**< timed kernels run */
    double   kernel_busy_s; /**< sum of the kernels' durations (start to end), seconds */
    uint64_t trace_dropped; /**< ops not traced: the trace was full */
} nsp_emu_stats_t;

/**
 * Create a device with its default stream (number 0, priority 0).
 * `params` may be NULL (all defaults); it is copied. On success *dev is
 * owned by the caller (nsp_emu_device_destroy).
 * Errors: NSP_ERR_INVALID_ARG (NULL dev; compute_slots < 1; a negative or
 * non-finite drain_timeout_s; math not 0 or 1), NSP_ERR_NO_MEMORY,
 * NSP_ERR_INTERNAL (a thread could not be started).
 */
nsp_status_t nsp_emu_device_create(const nsp_emu_params_t *params, nsp_emu_device_t **dev);

/**
 * Drain and free the device, its streams and its events (see the header
 * comment): NSP_OK when everything enqueued ran within drain_timeout_s;
 * NSP_ERR_TIMEOUT when it was cancelled (the message says how many ops were
 * dropped, and whether a host function was left running). Memory from
 * nsp_emu_alloc_async not freed is the caller's. NULL is a no-op (NSP_OK).
 */
nsp_status_t nsp_emu_device_destroy(nsp_emu_device_t *dev);

/** The default stream (never destroyed before the device). NULL for NULL. */
void *nsp_emu_default_stream(nsp_emu_device_t *dev);

/** CLOCK_MONOTONIC seconds, the clock of the trace. */
double nsp_emu_now(void);

/* ---- the device-ops entries (src/streams/devops.h shapes) --------------- */

/**
 * A new stream of `dev` with its thread. `priority`: smaller first when
 * timed kernels wait for the compute (any int; CUDA's convention). On
 * success *stream belongs to dev (nsp_emu_stream_destroy, or the device's
 * destroy). Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY,
 * NSP_ERR_INTERNAL (thread), the sticky error.
 */
nsp_status_t nsp_emu_stream_create(nsp_emu_device_t *dev, int priority, void **stream);

/** Destroy a stream: it takes no more work; what it holds still runs
 *  (cudaStreamDestroy), then its thread ends. The default stream and NULL
 *  are ignored. */
void nsp_emu_stream_destroy(void *stream);

/** A new event of `dev` (never recorded: queries NSP_OK). Belongs to dev.
 *  Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY, the sticky error. */
nsp_status_t nsp_emu_event_create(nsp_emu_device_t *dev, void **ev);

/** Destroy an event (safe while its record is pending: waits enqueued on
 *  it still wait for that record). NULL is a no-op. */
void nsp_emu_event_destroy(void *ev);

/** Record `ev` after the ops enqueued so far on `stream` (both of one
 *  device). Errors: NSP_ERR_INVALID_ARG (NULL, not an event or a stream,
 *  different devices, a destroyed stream), the sticky error. */
nsp_status_t nsp_emu_event_record(void *ev, void *stream);

/** NSP_OK once the latest record of `ev` ran (or it was never recorded),
 *  NSP_INPROGRESS before, or the device's sticky error. Never blocks.
 *  Errors: NSP_ERR_INVALID_ARG. */
nsp_status_t nsp_emu_event_query(void *ev);

/** Later ops of `stream` wait until `ev`'s latest record ran (on the
 *  device, the caller does not wait). Errors: as nsp_emu_event_record. */
nsp_status_t nsp_emu_stream_wait_event(void *stream, void *ev);

/** Block the caller until every op enqueued on `stream` before the call ran.
 *  Errors: NSP_ERR_INVALID_ARG, the sticky error, NSP_ERR_TIMEOUT (the
 *  device was cancelled by its destroy meanwhile). */
nsp_status_t nsp_emu_stream_sync(void *stream);

/** memmove(dst, src, bytes) in stream order. dst and src are borrowed until
 *  it ran. Errors: NSP_ERR_INVALID_ARG (NULL with bytes > 0), NSP_ERR_NO_MEMORY,
 *  the sticky error. */
nsp_status_t nsp_emu_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);

/** Allocate `bytes` (256-byte aligned host memory) at once; usable by ops
 *  enqueued on any stream from now on. *p = NULL for 0 bytes. Owned by the
 *  caller (nsp_emu_free_async, or free()). Errors: NSP_ERR_INVALID_ARG,
 *  NSP_ERR_NO_MEMORY, the sticky error. */
nsp_status_t nsp_emu_alloc_async(void **p, size_t bytes, void *stream);

/** free(p) when `stream` reaches it (after every op enqueued before). NULL
 *  is a no-op. Errors: NSP_ERR_INVALID_ARG, NSP_ERR_NO_MEMORY (then p was
 *  not freed). Not refused after a sticky error (memory is still freed). */
nsp_status_t nsp_emu_free_async(void *p, void *stream);

/** fn(arg) in stream order on the stream's thread (cudaLaunchHostFunc).
 *  It must return; it may call this API (not nsp_emu_stream_sync of its own
 *  stream, which would wait for itself). Errors: NSP_ERR_INVALID_ARG (NULL
 *  fn), NSP_ERR_NO_MEMORY, the sticky error. */
nsp_status_t nsp_emu_launch_host(void *stream, nsp_emu_host_fn_t fn, void *arg);

/** A host op in stream order: fn(arg) on the stream's thread, as
 *  nsp_emu_launch_host, whose status counts: an error becomes the device's
 *  sticky error (as a failed kernel's; the message names the op), so work
 *  that depends on it is dropped and its events report it. Runs in timing
 *  mode too (the exchanges' pack and unpack). Errors: as
 *  nsp_emu_launch_host. */
nsp_status_t nsp_emu_launch_host_op(void *stream, nsp_emu_kernel_fn_t fn, void *arg);

/** nsp_emu_launch_host_op for an `arg` the op owns (fn frees it): when the
 *  op is dropped instead of run (a sticky error, a cancel at destroy),
 *  drop(arg) runs on the stream's thread in its place, so nothing leaks.
 *  drop may be NULL (nothing to free). When the launch itself fails the
 *  caller still owns arg. Errors: as nsp_emu_launch_host. */
nsp_status_t nsp_emu_launch_host_op_owned(void *stream, nsp_emu_kernel_fn_t fn,
                                          nsp_emu_host_fn_t drop, void *arg);

/** The device of a live stream or event, or NULL when it is not one (the
 *  devops entries map a NULL stream to that device's default stream). */
nsp_emu_device_t *nsp_emu_stream_device(void *stream);
nsp_emu_device_t *nsp_emu_event_device(void *ev);

/**
 * A timed kernel in stream order: it waits for the compute (see the header
 * comment), holds it `seconds` (>= 0), in math mode calls fn(arg) (may be
 * NULL) at its start and then holds the compute until max(start + seconds,
 * fn's return). Timing mode never calls fn. Errors: NSP_ERR_INVALID_ARG
 * (negative or non-finite seconds), NSP_ERR_NO_MEMORY, the sticky error.
 */
nsp_status_t nsp_emu_launch_timed(void *stream, double seconds, nsp_emu_kernel_fn_t fn,
                                  void *arg);

/** nsp_emu_launch_timed for an `arg` the op owns: drop(arg) (may be NULL)
 *  runs on the stream's thread whenever fn(arg) does not (timing mode, or
 *  the kernel dropped), after the kernel's hold. When the launch itself
 *  fails the caller still owns arg. Errors: as nsp_emu_launch_timed. */
nsp_status_t nsp_emu_launch_timed_owned(void *stream, double seconds, nsp_emu_kernel_fn_t fn,
                                        nsp_emu_host_fn_t drop, void *arg);

/* ---- trace, tags, counters ------------------------------------------------ */

/** Ops enqueued on `stream` from now on carry `tag` in the trace (default 0).
 *  Errors: NSP_ERR_INVALID_ARG. */
nsp_status_t nsp_emu_stream_set_tag(void *stream, uint64_t tag);

/** The stream's number on its device (0: the default stream), or -1. */
int nsp_emu_stream_id(void *stream);

/**
 * Copy trace entries [first, first + cap) (in the order the ops completed)
 * into out[]; *count gets how many were copied (0 past the end). Entries
 * are complete ops only: sync the streams first to read all. Errors:
 * NSP_ERR_INVALID_ARG (NULL dev or count; NULL out with cap > 0).
 */
nsp_status_t nsp_emu_trace_read(nsp_emu_device_t *dev, size_t first, nsp_emu_trace_entry_t *out,
                                size_t cap, size_t *count);

/** The device's counters. Errors: NSP_ERR_INVALID_ARG (NULL). */
nsp_status_t nsp_emu_device_stats(nsp_emu_device_t *dev, nsp_emu_stats_t *stats);

/** "kernel", "copy", "host", "record", "wait", "free" ("?" otherwise). */
const char *nsp_emu_op_name(nsp_emu_op_kind_t kind);

#endif /* NSP_STREAMS_EMU_DEVICE_H_ */
