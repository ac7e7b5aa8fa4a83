/*
 * Streams per level on a device (devops.h): the device side of inter-level
 * pipelining (docs/design.md §6). Level l of a nested exchange runs on its
 * own stream, so level l's pack -> exchange -> unpack completes on its own
 * while level l+1's is still in flight, and a caller computes on a level
 * as soon as its event fired.
 *
 *   nsp_dev_streams_fork(s, l, producer)   level l's stream waits for all
 *                                          work queued so far on `producer`
 *                                          (where the input was written)
 *   ... enqueue the level's kernels and exchange on nsp_dev_streams_get(s, l)
 *   nsp_dev_streams_record(s, l)           mark the end of level l's work
 *   nsp_dev_streams_query(s, l)            NSP_OK once it ran (never blocks)
 *   nsp_dev_streams_join(s, l, consumer)   `consumer` waits for level l on
 *                                          the device, without the host
 *
 * The query fits the host step model of levels.h: nsp_dev_streams_step()
 * is a step function ("wait for level l's event"), so a level's queue on
 * a device is [enqueue pack + exchange + unpack, record] -> [step].
 *
 * Written against the device operations only (devops.h): the same code
 * runs on every kind of device. Streams are non-blocking (no implicit
 * order with the default stream). Not thread-safe.
 */
#ifndef NSP_STREAMS_LEVEL_STREAMS_H_
#define NSP_STREAMS_LEVEL_STREAMS_H_

#include "nspcomm.h"
#include "streams/devops.h"

/** One stream and two events (fork, done) per level (opaque). */
typedef struct nsp_dev_streams nsp_dev_streams_t;

/**
 * Create `nlevels` streams on the device `ctx` of `ops` (devops.h: NULL
 * on CUDA, the current device; the emulated device's handle). With
 * `prioritize`, lower levels get more urgent streams where the device has
 * priorities (level 0 needs no traffic and feeds compute first). `ops` is
 * borrowed until nsp_dev_streams_free. On success *streams is owned by the
 * caller. Errors: NSP_ERR_INVALID_ARG (nlevels < 1, NULL), NSP_ERR_BACKEND
 * (the device; no device), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_dev_streams_create(const nsp_devops_t *ops, void *ctx, int nlevels,
                                    int prioritize, nsp_dev_streams_t **streams);

/** Release the streams and events (work already queued still runs). NULL
 *  is a no-op. */
void nsp_dev_streams_free(nsp_dev_streams_t *streams);

/** Number of levels. */
int nsp_dev_streams_count(const nsp_dev_streams_t *streams);

/** The device of the streams (devops device_current at create). */
int nsp_dev_streams_device(const nsp_dev_streams_t *streams);

/** Level l's stream, or NULL when l is out of range. */
void *nsp_dev_streams_get(const nsp_dev_streams_t *streams, int level);

/** Level l's stream waits for the work queued on `producer` (a stream of
 *  the same device; NULL = its default stream). Errors:
 *  NSP_ERR_INVALID_ARG, NSP_ERR_BACKEND. */
nsp_status_t nsp_dev_streams_fork(nsp_dev_streams_t *streams, int level, void *producer);

/** Record level l's done event after the work queued on its stream. */
nsp_status_t nsp_dev_streams_record(nsp_dev_streams_t *streams, int level);

/** NSP_OK when level l's recorded work ran (or nothing was recorded),
 *  NSP_INPROGRESS, or NSP_ERR_BACKEND (a kernel failed: the device's
 *  message). */
nsp_status_t nsp_dev_streams_query(const nsp_dev_streams_t *streams, int level);

/** `consumer` (a stream; NULL = the default one) waits on the device for
 *  level l's recorded work. */
nsp_status_t nsp_dev_streams_join(nsp_dev_streams_t *streams, int level, void *consumer);

/** Arguments of nsp_dev_streams_step(). */
typedef struct nsp_dev_streams_wait {
    nsp_dev_streams_t *streams;
    int                level;
} nsp_dev_streams_wait_t;

/** A levels.h step: NSP_INPROGRESS until level arg->level's event fired. */
nsp_status_t nsp_dev_streams_step(void *arg);

#endif /* NSP_STREAMS_LEVEL_STREAMS_H_ */
