/*
 * The request object behind the public nsp_request_t (internal).
 *
 * One request is one completion: an all-to-all on one level, one ring step,
 * one blocking collective's wait. Every layer that hands out requests
 * (transport backends, the nested all-to-all, the ring) embeds
 * nsp_request_t as the FIRST member of its own struct and fills in an ops
 * table, so nsp_request_test/wait/free work on all of them (UCC's
 * post/test/finalize lifecycle).
 *
 * Timeouts are decided here, once, for every kind of request: a request
 * fails with NSP_ERR_TIMEOUT when it has been tested or waited on for
 * timeout_s seconds without anything advancing (ops->test bumps `progress`
 * when a part completes). Time the caller spends elsewhere between two tests
 * (computing on another level) does not count: a gap of more than
 * NSP_REQUEST_TEST_GAP_S between two tests restarts the stall clock.
 */
#ifndef NSP_TRANSPORT_REQUEST_H_
#define NSP_TRANSPORT_REQUEST_H_

#include "nspcomm.h"

#include <stdint.h>

/** Two tests further apart than this (seconds) do not count as stalled time. */
#define NSP_REQUEST_TEST_GAP_S 1.0

typedef struct nsp_request_ops {
    /** Short name for messages, e.g. "ucx alltoallv". */
    const char *name;
    /**
     * Drive progress of whatever the request waits on and test it. Returns
     * NSP_OK when complete, NSP_INPROGRESS, or an error it decided with
     * nsp_error() (called at most once per request: the result is cached).
     * Sets req->idle = 1 when the underlying progress call found nothing to
     * do (the wait loop then yields the core), and increments req->progress
     * whenever a part of the request completed.
     */
    nsp_status_t (*test)(nsp_request_t *req);
    /**
     * Optional (may be NULL): write who the request is still waiting for,
     * e.g. "recv from ranks 3,5", for the timeout message.
     */
    void (*describe_pending)(const nsp_request_t *req, char *buf, size_t len);
    /**
     * Release the request and everything it owns. Called exactly once. If the
     * request has not completed, cancel what can be cancelled; buffers of an
     * abandoned send may still be read by the backend until the communicator
     * is destroyed.
     */
    void (*free)(nsp_request_t *req);
} nsp_request_ops_t;

struct nsp_request {
    const nsp_request_ops_t *ops;
    nsp_status_t status;     /**< NSP_INPROGRESS until final, then cached */
    double       timeout_s;  /**< stall limit, seconds (> 0) */
    uint64_t     progress;   /**< bumped by ops->test when a part completed */
    int          idle;       /**< set by ops->test: last progress call did nothing */
    /* Private to request.c: the stall clock. */
    uint64_t     seen_progress_;
    double       stalled_s_;
    double       last_test_t_;
};

/** Initialise the common part of a request (status NSP_INPROGRESS). */
void nsp_request_init(nsp_request_t *req, const nsp_request_ops_t *ops, double timeout_s);

/** Mark a request complete at post time (e.g. every part was local). */
void nsp_request_set_done(nsp_request_t *req);

/** Monotonic clock, seconds. */
double nsp_now_s(void);

#endif /* NSP_TRANSPORT_REQUEST_H_ */
