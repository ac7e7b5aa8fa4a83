/*
 * Level queues: the host machinery that keeps several levels of a nested
 * exchange in flight and completes them one by one (docs/design.md §6, pipelining).
 *
 * Each level has one queue of steps run in order. A step is a function that
 * is polled until it says it is done: it returns NSP_OK (done: the queue
 * moves on to the next step), NSP_INPROGRESS (not yet: the engine moves to
 * the next level and polls again later) or an error (the level fails; its
 * remaining steps are dropped, other levels go on). A level is complete when
 * its queue is empty.
 *
 * Typical level of the nested all-to-all on the host:
 *   [pack + post the transport exchange] -> [test the exchange] -> [unpack]
 * A device (devops.h) fits the same model with one stream and one event per
 * level: [enqueue pack kernel + grouped send/recv on the level's stream,
 * record its event] -> [query the event until done]
 * so completion per level is "queue empty" in both cases.
 *
 * Ordering. Steps of all levels are started in ascending level order, the
 * one agreed order of docs/design.md §4: in one progress call, level l's head step
 * is polled before level l+1's. In NSP_LEVELS_PIPELINED mode every level
 * starts at once (its first step runs in the first progress call); in
 * NSP_LEVELS_SERIAL mode level l+1 starts only once level l is complete
 * (levels one after another, for measuring what pipelining buys).
 *
 * Not thread-safe; one thread drives a queue set. Steps must not call back
 * into the queue set that runs them.
 */
#ifndef NSP_STREAMS_LEVELS_H_
#define NSP_STREAMS_LEVELS_H_

#include "nspcomm.h"

/** A step: polled until it returns NSP_OK or an error (see above). */
typedef nsp_status_t (*nsp_step_fn_t)(void *arg);

typedef enum nsp_levels_mode {
    NSP_LEVELS_PIPELINED = 0, /**< all levels in flight together */
    NSP_LEVELS_SERIAL    = 1  /**< level l+1 starts when level l is complete */
} nsp_levels_mode_t;

/** A set of per-level step queues (opaque). */
typedef struct nsp_levels nsp_levels_t;

/**
 * Create `nlevels` empty queues, each able to hold `max_steps` steps.
 * On success *levels is owned by the caller (nsp_levels_free).
 * Errors: NSP_ERR_INVALID_ARG (nlevels < 1, max_steps < 1), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_levels_create(int nlevels, int max_steps, nsp_levels_mode_t mode,
                               nsp_levels_t **levels);

/**
 * Append a step to level `level`'s queue; `arg` is borrowed until the step
 * is done or the set is freed; `name` (static string) is used in messages.
 * Push all steps before the first progress call. Errors: NSP_ERR_INVALID_ARG
 * (level out of range, queue full, already started).
 */
nsp_status_t nsp_levels_push(nsp_levels_t *levels, int level, nsp_step_fn_t fn, void *arg,
                             const char *name);

/**
 * Poll every started level once, in ascending order: run its head step and
 * every next one while they complete. *advanced (may be NULL) gets the
 * number of steps completed. Returns NSP_OK even when a level failed (see
 * nsp_levels_status); errors only for invalid arguments.
 */
nsp_status_t nsp_levels_progress(nsp_levels_t *levels, int *advanced);

/**
 * Status of one level: NSP_OK (complete), NSP_INPROGRESS, or the error its
 * failing step returned. Does not progress. Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_levels_status(const nsp_levels_t *levels, int level);

/** Name of the step `level` is at ("done" when complete). */
const char *nsp_levels_pending_step(const nsp_levels_t *levels, int level);

/** Number of levels. */
int nsp_levels_count(const nsp_levels_t *levels);

/** Empty every queue (steps not run are dropped, their args are not
 *  touched), so the set takes pushes again as if new: a persistent exchange
 *  keeps one set from create to destroy. NULL is a no-op. */
void nsp_levels_reset(nsp_levels_t *levels);

/** Free the queues (steps not run are dropped; their args are not touched).
 *  NULL is a no-op. */
void nsp_levels_free(nsp_levels_t *levels);

#endif /* NSP_STREAMS_LEVELS_H_ */
