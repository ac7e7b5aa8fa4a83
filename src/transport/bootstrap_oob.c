/*
 * Bootstrap over a framework's out-of-band allgather (UCC's ucc_oob_coll_t
 * shape), and the generic bootstrap wrappers.
 */
#include "transport/bootstrap.h"

#include "common/log.h"
#include "transport/request.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

nsp_status_t nsp_bootstrap_allgather(nsp_bootstrap_t *bs, const void *sendbuf, void *recvbuf,
                                     size_t bytes)
{
    return bs->ops->allgather(bs, sendbuf, recvbuf, bytes);
}

nsp_status_t nsp_bootstrap_close(nsp_bootstrap_t *bs, int done)
{
    return bs == NULL ? NSP_OK : bs->ops->close(bs, done);
}

typedef struct oob_bootstrap {
    nsp_bootstrap_t base;
    nsp_oob_coll_t  oob; /* a copy: the callbacks and coll_info stay the caller's */
} oob_bootstrap_t;

/* Poll the framework's request until done or the deadline; sleep a little
 * between polls (its store may be a remote key-value server). */
static nsp_status_t oob_wait(oob_bootstrap_t *bs, void *req)
{
    double          deadline = nsp_now_s() + bs->base.timeout_s;
    struct timespec nap      = {0, 20 * 1000};
    unsigned        polls    = 0;

    for (;;) {
        nsp_status_t status = bs->oob.req_test(req);
        if (status == NSP_OK) {
            return NSP_OK;
        }
        if (status != NSP_INPROGRESS) {
            return nsp_error(status < 0 ? status : NSP_ERR_INTERNAL,
                             "rank %d: the out-of-band allgather's req_test callback returned "
                             "%s",
                             bs->base.rank, nsp_status_string(status));
        }
        if (nsp_now_s() >= deadline) {
            return nsp_error(NSP_ERR_TIMEOUT,
                             "rank %d of %d: the out-of-band allgather did not complete within "
                             "%.1f s (NSPCOMM_TIMEOUT): a rank did not call nsp_comm_init_oob, "
                             "died, or the framework's store is stuck",
                             bs->base.rank, bs->base.nranks, bs->base.timeout_s);
        }
        /* Spin briefly first (a local store answers fast), then nap. */
        if (++polls < 1000) {
            sched_yield();
        } else {
            nanosleep(&nap, NULL);
        }
    }
}

static nsp_status_t oob_allgather(nsp_bootstrap_t *base, const void *sendbuf, void *recvbuf,
                                  size_t bytes)
{
    oob_bootstrap_t *bs  = (oob_bootstrap_t *)base;
    void            *req = NULL;
    nsp_status_t     status;

    /* The callback takes a non-const buffer (UCC's signature); it only reads it. */
    status = bs->oob.allgather((void *)(uintptr_t)sendbuf, recvbuf, bytes, bs->oob.coll_info,
                               &req);
    if (status != NSP_OK) {
        return nsp_error(status < 0 ? status : NSP_ERR_INTERNAL,
                         "rank %d: the out-of-band allgather callback returned %s", base->rank,
                         nsp_status_string(status));
    }
    status = oob_wait(bs, req);
    (void)bs->oob.req_free(req);
    return status;
}

static nsp_status_t oob_close(nsp_bootstrap_t *base, int done)
{
    (void)done;
    free(base);
    return NSP_OK;
}

static const nsp_bootstrap_ops_t oob_bootstrap_ops = {
    .name      = "oob",
    .allgather = oob_allgather,
    .close     = oob_close,
};

nsp_status_t nsp_bootstrap_oob_create(const nsp_oob_coll_t *oob, double timeout_s,
                                      nsp_bootstrap_t **out)
{
    oob_bootstrap_t *bs;

    if (oob == NULL || oob->allgather == NULL || oob->req_test == NULL ||
        oob->req_free == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_comm_init_oob: oob and its allgather, req_test and req_free "
                         "callbacks must all be set");
    }
    if (oob->n_oob_eps < 1 || oob->n_oob_eps > (1u << 24) || oob->oob_ep >= oob->n_oob_eps) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nsp_comm_init_oob: oob_ep %u of n_oob_eps %u: need 0 <= oob_ep < "
                         "n_oob_eps",
                         oob->oob_ep, oob->n_oob_eps);
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_comm_init_oob: no memory");
    }
    bs->base.ops       = &oob_bootstrap_ops;
    bs->base.rank      = (int)oob->oob_ep;
    bs->base.nranks    = (int)oob->n_oob_eps;
    bs->base.timeout_s = timeout_s;
    bs->oob            = *oob;
    *out               = &bs->base;
    return NSP_OK;
}
