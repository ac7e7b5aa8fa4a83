/*
 * A progress thread for a UCX worker: moves bytes while the rank computes.
 *
 * UCX's tcp transport sends and receives only inside ucp_worker_progress; a
 * rank busy in its attention kernel would leave the wire idle (socket buffers
 * hide a few MiB at most). The thread progresses the worker while requests
 * are in flight (nsp_ucx_progress_busy) and the rank is not progressing it
 * itself (nsp_ucx_progress_rank); while nothing is in flight it progresses
 * once a millisecond (what the rank owes its peers after a collective must
 * leave even if the rank is in another library by then). The worker must
 * be created with UCS_THREAD_MODE_MULTI.
 */
#ifndef NSP_TRANSPORT_UCX_PROGRESS_H_
#define NSP_TRANSPORT_UCX_PROGRESS_H_

#include "nspcomm.h"

#include <stdint.h>
#include <ucp/api/ucp.h>

typedef struct nsp_ucx_progress nsp_ucx_progress_t;

/** Start a thread progressing `worker` (borrowed; it must outlive the thread).
 *  *out is owned by the caller (nsp_ucx_progress_stop). Errors:
 *  NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND (pthread_create failed). */
nsp_status_t nsp_ucx_progress_start(ucp_worker_h worker, nsp_ucx_progress_t **out);

/** Requests in flight change by delta (+1 posted, -1 freed); the thread polls
 *  while the count is above 0. NULL p is a no-op. Thread-safe. */
void nsp_ucx_progress_busy(nsp_ucx_progress_t *p, int delta);

/**
 * The rank's own progress call: ucp_worker_progress(worker), unless the
 * thread is inside one right now (then 0: it moves the bytes, and the rank
 * does not wait for the worker's lock). Keeps the thread away for a while
 * (it progresses only while the rank computes). NULL p: plain progress.
 */
unsigned nsp_ucx_progress_rank(nsp_ucx_progress_t *p, ucp_worker_h worker);

/** Where a rank's progress went over the thread's life (counts of
 *  ucp_worker_progress calls; CPU in seconds). */
typedef struct nsp_ucx_progress_stats {
    uint64_t thread_polls; /* the thread's calls (only while the rank was away) */
    uint64_t thread_moved; /* ... that moved something */
    uint64_t rank_polls;   /* the rank's own calls that got the worker */
    uint64_t rank_moved;   /* ... that moved something */
    uint64_t rank_skipped; /* the rank's calls that found the thread inside */
    double   thread_cpu_s; /* the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) */
} nsp_ucx_progress_stats_t;

/** Stop and join the thread, free p; *stats (may be NULL) gets where the
 *  progress went. NULL p is a no-op (*stats untouched). */
void nsp_ucx_progress_stop(nsp_ucx_progress_t *p, nsp_ucx_progress_stats_t *stats);

#endif /* NSP_TRANSPORT_UCX_PROGRESS_H_ */
