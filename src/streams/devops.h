/*
 * Device operations: the few stream, event, copy and stream-ordered memory
 * calls the orchestration of device memory needs (the level streams of
 * level_streams.h and the device engine of the nested all-to-all,
 * src/attn_sp/nested_a2a_device.c), as one table per kind of device, so
 * the same ordering, gating and completion code runs on every kind:
 *
 *   cuda   the CUDA runtime (devops_cuda.c, CUDA builds)
 *   emu    the emulated device of emu_device.h (devops_emu.c): streams on
 *          host threads, host memory, timed kernels
 *
 * A memory type's entry (src/attn_sp/memtype.h) names its table; kernels
 * that are specific to a device (pack, reductions) are in that entry, not
 * here. Every entry is set; what a device cannot do returns
 * NSP_ERR_UNSUPPORTED with a message.
 *
 * The model, which every entry keeps:
 *
 *   stream   an ordered queue of work on the device (void *; NULL is the
 *            device's default stream: CUDA's legacy default stream). Work
 *            enqueued on one stream runs in the order it was enqueued and
 *            never before the call that enqueued it; enqueuing returns at
 *            once (asynchronous). Streams run concurrently with each other
 *            unless a wait orders them.
 *   event    a marker (void *). event_record(ev, s) captures the work
 *            enqueued on s so far (replacing what ev captured before);
 *            event_query says whether that work ran; stream_wait_event(s,
 *            ev) makes later work of s wait for it, on the device, without
 *            blocking the caller. An event never recorded counts as done.
 *   memory   device memory of the current device: what a device's kernels
 *            and its transport read. A pool (pool_create) gives and takes
 *            back memory in stream order: alloc_async's memory may be used
 *            by work enqueued on `stream` after it; free_async returns it
 *            once the work enqueued on `stream` before it ran.
 *
 * The device: the four entries that make something or name the device
 * (device_current, stream_create, event_create, pool_create) take `ctx`,
 * the device context the memory type gives for a world (memtype.h
 * `device`): NULL on CUDA, which has a current device per thread; the
 * nsp_emu_device_t of the world on the emulated device. The other entries
 * find the device from the stream, event or pointer they are given; a NULL
 * stream (the default stream) is found from the event where there is one
 * (event_record, stream_wait_event), and refused by the emulated entries
 * that have none to find it from (memcpy_async, alloc_async, free_async,
 * stream_sync, launch_host): callers pass the default stream's handle.
 *
 * Ownership: what a *_create makes is owned by the caller until its
 * *_destroy; a destroy may be called while recorded or enqueued work is
 * still pending (that work still runs; resources go when it is done).
 * Thread-safety: every entry may be called from any thread, as the CUDA
 * runtime's; calls that enqueue onto one stream must be ordered by the
 * caller (one thread drives a world and its streams, transport.h).
 * Errors: NSP_ERR_BACKEND (the device's own message inside, logged once
 * where it is decided), NSP_ERR_NO_MEMORY, NSP_ERR_INVALID_ARG,
 * NSP_ERR_UNSUPPORTED.
 */
#ifndef NSP_STREAMS_DEVOPS_H_
#define NSP_STREAMS_DEVOPS_H_

#include "nspcomm.h"
#include "common/table.h"

#include <stddef.h>

/** stream_create(): the device's default priority (its least urgent). */
#define NSP_DEV_PRIORITY_DEFAULT (-1)

typedef struct nsp_devops {
    const char *name;
    /** The device this thread's work goes to (CUDA: cudaGetDevice), so a
     *  caller can tell when it moved. */
    nsp_status_t (*device_current)(void *ctx, int *device);
    /** A new non-blocking stream on the current device (no implicit order
     *  with the default stream). priority >= 0 counts down from the most
     *  urgent the device offers (0: the most urgent, k: k steps less,
     *  clamped at its least urgent); NSP_DEV_PRIORITY_DEFAULT: the least
     *  urgent. */
    nsp_status_t (*stream_create)(void *ctx, int priority, void **stream);
    /** Destroy a stream (NULL: no-op); its enqueued work still runs. */
    void (*stream_destroy)(void *stream);
    /** A new event, never recorded. */
    nsp_status_t (*event_create)(void *ctx, void **event);
    /** Destroy an event (NULL: no-op), also while recorded work is pending. */
    void (*event_destroy)(void *event);
    /** Capture the work enqueued on `stream` so far in `event`. */
    nsp_status_t (*event_record)(void *event, void *stream);
    /** NSP_OK when the captured work ran (or nothing was recorded),
     *  NSP_INPROGRESS while it runs, or the error of that work (a kernel
     *  that failed: the device's message). Never blocks. */
    nsp_status_t (*event_query)(void *event);
    /** Later work of `stream` waits for what `event` captured (on the
     *  device: the caller does not block). */
    nsp_status_t (*stream_wait_event)(void *stream, void *event);
    /** Block until the work enqueued on `stream` so far ran; its error if
     *  some of it failed. */
    nsp_status_t (*stream_sync)(void *stream);
    /** Enqueue a copy of `bytes` bytes from src to dst, both in the
     *  device's memory (not overlapping), on `stream`. */
    nsp_status_t (*memcpy_async)(void *dst, const void *src, size_t bytes, void *stream);
    /** A pool of device memory on device `device` that keeps what is freed
     *  for the next allocations (scratch of every exchange of a world). */
    nsp_status_t (*pool_create)(void *ctx, int device, void **pool);
    /** Destroy a pool (NULL: no-op); memory still allocated or pending a
     *  free is released once its frees completed. */
    void (*pool_destroy)(void *pool);
    /** *ptr = `bytes` (> 0) of `pool`'s memory, usable by work enqueued
     *  on `stream` from now on. On error *ptr is not written. */
    nsp_status_t (*alloc_async)(void *pool, void **ptr, size_t bytes, void *stream);
    /** Give `ptr` (from alloc_async; NULL: no-op) back once the work
     *  enqueued on `stream` so far ran. */
    nsp_status_t (*free_async)(void *ptr, void *stream);
    /** Enqueue fn(arg) on `stream`: it runs on a thread of the device's
     *  own, after the work enqueued before it and before the work enqueued
     *  after it (CUDA: cudaLaunchHostFunc). fn must not call the device. */
    nsp_status_t (*launch_host)(void *stream, void (*fn)(void *arg), void *arg);
} nsp_devops_t;

#define NSP_DEVOPS_ENTRIES(X)                                                         \
    X(device_current) X(stream_create) X(stream_destroy) X(event_create)              \
    X(event_destroy) X(event_record) X(event_query) X(stream_wait_event)              \
    X(stream_sync) X(memcpy_async) X(pool_create) X(pool_destroy) X(alloc_async)      \
    X(free_async) X(launch_host)
NSP_TABLE_COMPLETE(nsp_devops_t, device_current, NSP_DEVOPS_ENTRIES);

/** The CUDA runtime (CUDA builds only). */
extern const nsp_devops_t nsp_devops_cuda;
/** The emulated device (emu_device.h; ctx: its nsp_emu_device_t). */
extern const nsp_devops_t nsp_devops_emu;

#endif /* NSP_STREAMS_DEVOPS_H_ */
