/*
 * Requests: the public test/wait/free calls and the one place where a stalled
 * request becomes NSP_ERR_TIMEOUT (see request.h for the rule).
 */
#include "transport/request.h"

#include "common/log.h"

#include <sched.h>
#include <string.h>
#include <time.h>

double nsp_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nsp_request_init(nsp_request_t *req, const nsp_request_ops_t *ops, double timeout_s)
{
    memset(req, 0, sizeof(*req));
    req->ops       = ops;
    req->status    = NSP_INPROGRESS;
    req->timeout_s = timeout_s;
}

void nsp_request_set_done(nsp_request_t *req)
{
    req->status = NSP_OK;
}

static nsp_status_t request_timed_out(nsp_request_t *req)
{
    char pending[256] = "";

    if (req->ops->describe_pending != NULL) {
        req->ops->describe_pending(req, pending, sizeof(pending));
    }
    return nsp_error(NSP_ERR_TIMEOUT,
                     "%s: nothing completed for %.1f s%s%s; a peer died, hangs or did not "
                     "post the matching operation (raise NSPCOMM_TIMEOUT if peers are only "
                     "slow)",
                     req->ops->name, req->timeout_s, pending[0] != '\0' ? "; still waiting: " : "",
                     pending);
}

/*
 * Advance the stall clock after a test that left the request in progress.
 * Only time between tests that follow each other closely counts, so a caller
 * who computes for minutes between two tests is not timed out.
 */
static int request_stalled(nsp_request_t *req)
{
    double now = nsp_now_s();

    if (req->progress != req->seen_progress_) {
        req->seen_progress_ = req->progress;
        req->stalled_s_     = 0.0;
    } else if (req->last_test_t_ > 0.0 && now - req->last_test_t_ < NSP_REQUEST_TEST_GAP_S) {
        req->stalled_s_ += now - req->last_test_t_;
    }
    req->last_test_t_ = now;
    return req->stalled_s_ >= req->timeout_s;
}

nsp_status_t nsp_request_test(nsp_request_t *req)
{
    nsp_status_t status;

    if (req == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_request_test: request is NULL");
    }
    if (req->status != NSP_INPROGRESS) {
        return req->status;
    }
    status = req->ops->test(req);
    if (status != NSP_INPROGRESS) {
        req->status = status;
        return status;
    }
    if (request_stalled(req)) {
        req->status = request_timed_out(req);
    }
    return req->status;
}

/* Idle polls of a wait before it naps REQUEST_WAIT_NAP_NS between polls (as
 * the nested attention's wait does). */
#define REQUEST_WAIT_SPINS  64
#define REQUEST_WAIT_NAP_NS (50 * 1000)

nsp_status_t nsp_request_wait(nsp_request_t *req)
{
    nsp_status_t status;
    int          spins = 0;

    if (req == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_request_wait: request is NULL");
    }

    while ((status = nsp_request_test(req)) == NSP_INPROGRESS) {
        spins = req->idle ? spins + 1 : 0;
        if (spins > REQUEST_WAIT_SPINS) {
            /* A long wait (a peer still computing): sleep. With more ranks
             * than cores a yielding rank keeps most of its core (CFS) and
             * its spin counts as its CPU time. */
            nanosleep(&(struct timespec){0, REQUEST_WAIT_NAP_NS}, NULL);
        } else if (spins > 0) {
            sched_yield(); /* more ranks than cores: let the peer we wait for run */
        }
    }
    return status;
}

nsp_status_t nsp_request_wait_all(nsp_request_t **reqs, int n)
{
    if (n < 0 || (reqs == NULL && n > 0)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_request_wait_all: %d requests at %p", n,
                         (void *)reqs);
    }
    for (int i = 0; i < n; ++i) {
        if (reqs[i] != NULL) {
            NSP_CHECK(nsp_request_wait(reqs[i]));
        }
    }
    return NSP_OK;
}

nsp_status_t nsp_request_free(nsp_request_t *req)
{
    if (req != NULL) {
        req->ops->free(req);
    }
    return NSP_OK;
}
