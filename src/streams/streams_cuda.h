/*
 * CUDA streams per level (CUDA builds): the device side of inter-level
 * pipelining (docs/design.md §6). Level l of a nested exchange runs on its own
 * stream, so level l's pack -> NCCL exchange -> unpack completes on its own
 * while level l+1's is still in flight, and a caller computes on a level
 * as soon as its event fired.
 *
 *   nsp_cuda_streams_fork(s, l, producer)   level l's stream waits for all
 *                                           work queued so far on `producer`
 *                                           (where the input was written)
 *   ... enqueue the level's kernels and NCCL calls on nsp_cuda_streams_get(s, l)
 *   nsp_cuda_streams_record(s, l)           mark the end of level l's work
 *   nsp_cuda_streams_query(s, l)            NSP_OK once it ran (never blocks)
 *   nsp_cuda_streams_join(s, l, consumer)   `consumer` waits for level l on
 *                                           the GPU, without the host
 *
 * The query fits the host step model of levels.h: nsp_cuda_streams_step()
 * is a step function ("wait for level l's event"), so a level's queue on
 * the CUDA path is [enqueue pack + exchange + unpack, record] -> [step].
 *
 * Streams are created non-blocking (no implicit sync with the legacy
 * default stream). Not thread-safe.
 */
#ifndef NSP_STREAMS_STREAMS_CUDA_H_
#define NSP_STREAMS_STREAMS_CUDA_H_

#include "nspcomm.h"

/** One stream and two events (fork, done) per level (opaque). */
typedef struct nsp_cuda_streams nsp_cuda_streams_t;

/**
 * Create `nlevels` streams on CUDA device `device` (-1: the current one).
 * With `prioritize`, lower levels get higher stream priority where the
 * device has priorities (level 0 needs no traffic and feeds compute first).
 * On success *streams is owned by the caller (nsp_cuda_streams_free).
 * Errors: NSP_ERR_INVALID_ARG (nlevels < 1), NSP_ERR_BACKEND (CUDA; no
 * device), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_cuda_streams_create(int nlevels, int device, int prioritize,
                                     nsp_cuda_streams_t **streams);

/** Release the streams and events (work already queued still runs). NULL
 *  is a no-op. */
void nsp_cuda_streams_free(nsp_cuda_streams_t *streams);

/** Number of levels. */
int nsp_cuda_streams_count(const nsp_cuda_streams_t *streams);

/** The CUDA device of the streams. */
int nsp_cuda_streams_device(const nsp_cuda_streams_t *streams);

/** Level l's cudaStream_t (as void *), or NULL when l is out of range. */
void *nsp_cuda_streams_get(const nsp_cuda_streams_t *streams, int level);

/** Level l's stream waits for the work queued on `producer` (a
 *  cudaStream_t; NULL = the legacy default stream). Errors:
 *  NSP_ERR_INVALID_ARG, NSP_ERR_BACKEND. */
nsp_status_t nsp_cuda_streams_fork(nsp_cuda_streams_t *streams, int level, void *producer);

/** Record level l's done event after the work queued on its stream. */
nsp_status_t nsp_cuda_streams_record(nsp_cuda_streams_t *streams, int level);

/** NSP_OK when level l's recorded work ran (or nothing was recorded),
 *  NSP_INPROGRESS, or NSP_ERR_BACKEND (a kernel failed: CUDA's message). */
nsp_status_t nsp_cuda_streams_query(const nsp_cuda_streams_t *streams, int level);

/** `consumer` (a cudaStream_t; NULL = legacy default) waits on the GPU for
 *  level l's recorded work. */
nsp_status_t nsp_cuda_streams_join(nsp_cuda_streams_t *streams, int level, void *consumer);

/** Arguments of nsp_cuda_streams_step(). */
typedef struct nsp_cuda_streams_wait {
    nsp_cuda_streams_t *streams;
    int                 level;
} nsp_cuda_streams_wait_t;

/** A levels.h step: NSP_INPROGRESS until level arg->level's event fired. */
nsp_status_t nsp_cuda_streams_step(void *arg);

#endif /* NSP_STREAMS_STREAMS_CUDA_H_ */
