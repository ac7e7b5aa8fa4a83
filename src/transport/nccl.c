/*
 * The NCCL backend: GPU memory, stream-ordered posts, one ncclComm_t per
 * communicator of more than one rank. See nccl.h for how every op maps onto
 * NCCL, the count check and the environment it reads.
 *
 * NCCL and CUDA codes are translated here, at the boundary: ncclResult_t
 * with ncclGetErrorString and ncclGetLastError, cudaError_t through
 * nsp_cuda_status (src/streams/cuda_util.h).
 */
#include "config.h"

#include "transport/nccl.h"

#include "common/log.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>
/* nccl.h declares ncclGroupStart() and a few others without (void). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl backend needs NCCL >= 2.18 (ncclCommSplit, non-blocking ncclConfig_t)"
#endif
/* ncclAlltoAll appeared in NCCL 2.28.3. */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 3)
#define NCCL_HAS_ALLTOALL 1
#else
#define NCCL_HAS_ALLTOALL 0
#endif

/* Device and pinned staging of the host collectives, bytes (grown on demand). */
#define NCCL_STAGE_MIN (64u << 10)
/* Count-check slots allocated with a communicator (more are added on demand). */
#define NCCL_SLOTS_INITIAL 4

/* ------------------------------------------------------------------------ */
/* Objects                                                                  */
/* ------------------------------------------------------------------------ */

/* What the communicators of one world share (owned by the world). */
typedef struct nccl_world {
    int device;      /* CUDA ordinal of every communicator of the world */
    int broken;      /* an operation failed or was abandoned: destroy aborts */
    int check;       /* NSPCOMM_NCCL_CHECK: exchange counts before data */
    int self_comms;  /* NSPCOMM_NCCL_SELF: one-rank groups without NCCL */
    int alltoall;    /* NSPCOMM_NCCL_ALLTOALL: uniform counts are uniform everywhere */
    int self_p2p;    /* NSPCOMM_NCCL_SELF_P2P: self blocks through ncclSend/ncclRecv */
} nccl_world_t;

/*
 * Count-check space of one request, for a communicator of n ranks:
 *   host  pinned [2][n] uint64: [0][j] bytes I send to j, [1][j] bytes j sends me
 *   dev   device [2][n] uint64: the same, what NCCL moves
 */
typedef struct nccl_slot {
    struct nccl_slot *next_free;
    struct nccl_slot *next_all;
    uint64_t         *host;
    uint64_t         *dev;
} nccl_slot_t;

typedef struct nccl_comm {
    nsp_tp_comm_t base;          /* FIRST */
    nccl_world_t *world;         /* shared; owned when owns_world */
    int           owns_world;
    ncclComm_t    nccl;          /* NULL: one-rank group (copies), or aborted */
    int           owns_nccl;     /* 0: wrapped from the caller, never destroyed here */
    cudaStream_t  stream;        /* posts without a stream; host collectives */
    cudaEvent_t   stage_done;    /* host collectives' completion */
    char         *stage_dev;     /* device staging [stage_cap] bytes */
    char         *stage_host;    /* pinned staging [stage_cap] bytes */
    size_t        stage_cap;
    nccl_slot_t  *slots_free;
    nccl_slot_t  *slots_all;
    char          label[64];     /* "nccl world", "nccl group [4, 8)" for messages */
} nccl_comm_t;

typedef struct nccl_req {
    nsp_request_t base;          /* FIRST */
    nccl_comm_t  *comm;
    const char   *what;          /* "alltoallv" or "sendrecv" */
    uint32_t      tag;
    cudaEvent_t   done;          /* after the data */
    cudaEvent_t   counts_landed; /* after the peers' counts reached slot->host; or NULL */
    nccl_slot_t  *slot;
    const size_t *expect;        /* alltoallv: recvcounts [size] (borrowed) */
    size_t        expect_one;    /* sendrecv: bytes expected from expect_peer */
    int           expect_peer;   /* sendrecv: the source; -1 for alltoallv */
    int           counts_ok;     /* the count check passed (or was not asked) */
    int           complete;
} nccl_req_t;

static const nsp_tp_ops_t *nccl_ops(void);

/* ------------------------------------------------------------------------ */
/* Errors and waiting                                                       */
/* ------------------------------------------------------------------------ */

/* Translate an NCCL result of `call`. `running` = 1 for the asynchronous
 * error of operations in flight, where a system error is a peer gone. */
static nsp_status_t nccl_status(ncclResult_t r, const nccl_comm_t *c, ncclComm_t nc,
                                const char *call, int running)
{
    const char  *last = ncclGetLastError(nc);
    nsp_status_t st   = NSP_ERR_BACKEND;
    const char  *hint = "";

    if (r == ncclRemoteError || (running && r == ncclSystemError)) {
        st   = NSP_ERR_PEER_FAILED;
        hint = "; a peer process died, aborted or lost its network: destroy the communicator";
    } else if (r == ncclUnhandledCudaError) {
        hint = "; check the CUDA device (NCCL_DEBUG=WARN shows more)";
    } else if (r == ncclInvalidUsage || r == ncclInvalidArgument) {
        hint = "; NCCL_DEBUG=WARN shows which argument (duplicate GPU: give every rank its "
               "own device with config.cuda_device)";
    }
    if (last == NULL) {
        last = "";
    }
    return nsp_error(st, "%s: %s failed: %s%s%s%s%s", c != NULL ? c->label : "nccl", call,
                     ncclGetErrorString(r), last[0] != '\0' ? " (" : "", last,
                     last[0] != '\0' ? ")" : "", hint);
}

/* Abort an NCCL communicator we own after an error; mark the world broken
 * either way. A wrapped (caller's) communicator is only marked. */
static void nccl_abort(nccl_comm_t *c)
{
    c->world->broken = 1;
    if (c->nccl != NULL && c->owns_nccl) {
        NSP_DEBUG("%s: ncclCommAbort", c->label);
        (void)ncclCommAbort(c->nccl);
        c->nccl = NULL;
    }
}

/*
 * A non-blocking communicator answers ncclInProgress until an init, split,
 * finalize or group launch settled: poll ncclCommGetAsyncError until it
 * does, at most the timeout. `nc` is the communicator the call concerns
 * (the new one for init and split).
 */
static nsp_status_t nccl_settle(nccl_comm_t *c, ncclComm_t nc, ncclResult_t r,
                                const char *call)
{
    double deadline = nsp_now_s() + c->base.timeout_s;

    while (r == ncclInProgress) {
        ncclResult_t q;
        if (nsp_now_s() > deadline) {
            return nsp_error(NSP_ERR_TIMEOUT,
                             "%s: %s did not finish within %.1f s: a peer did not take part "
                             "or hangs (raise NSPCOMM_TIMEOUT if peers are only slow)",
                             c->label, call, c->base.timeout_s);
        }
        sched_yield();
        q = ncclCommGetAsyncError(nc, &r);
        if (q != ncclSuccess) {
            r = q;
        }
    }
    if (r != ncclSuccess) {
        return nccl_status(r, c, nc, call, 0);
    }
    return NSP_OK;
}

/* Wait for an event of a blocking host collective: poll, watch NCCL's
 * asynchronous error, give up after the timeout. */
static nsp_status_t nccl_wait_event(nccl_comm_t *c, cudaEvent_t ev, const char *what)
{
    double deadline = nsp_now_s() + c->base.timeout_s;

    for (;;) {
        cudaError_t  e = cudaEventQuery(ev);
        ncclResult_t r = ncclSuccess;
        if (e == cudaSuccess) {
            return NSP_OK;
        }
        if (e != cudaErrorNotReady) {
            return nsp_cuda_status(e, c->label, what);
        }
        if (c->nccl != NULL && ncclCommGetAsyncError(c->nccl, &r) == ncclSuccess &&
            r != ncclSuccess && r != ncclInProgress) {
            return nccl_status(r, c, c->nccl, what, 1);
        }
        if (nsp_now_s() > deadline) {
            return nsp_error(NSP_ERR_TIMEOUT,
                             "%s: %s did not complete within %.1f s: a peer died, hangs or did "
                             "not call it (raise NSPCOMM_TIMEOUT if peers are only slow)",
                             c->label, what, c->base.timeout_s);
        }
        sched_yield();
    }
}

/* ------------------------------------------------------------------------ */
/* Pure helpers                                                             */
/* ------------------------------------------------------------------------ */

int nsp_nccl_uniform_count(const nsp_tp_alltoallv_t *a, int n, size_t *count)
{
    size_t c;

    if (a == NULL || n < 1) {
        return 0;
    }
    c = a->sendcounts[0];
    if (c == 0) {
        return 0;
    }
    for (int j = 0; j < n; ++j) {
        if (a->sendcounts[j] != c || a->recvcounts[j] != c || a->sdispls[j] != (size_t)j * c ||
            a->rdispls[j] != (size_t)j * c) {
            return 0;
        }
    }
    *count = c;
    return 1;
}

size_t nsp_nccl_elem_width(size_t bytes, const void *a, const void *b)
{
    uintptr_t bits = (uintptr_t)bytes | (uintptr_t)a | (uintptr_t)b;

    for (size_t w = 8; w > 1; w /= 2) {
        if ((bits & (w - 1)) == 0) {
            return w;
        }
    }
    return 1;
}

#if NCCL_HAS_ALLTOALL
static ncclDataType_t nccl_type_of_width(size_t w)
{
    switch (w) {
    case 8:
        return ncclUint64;
    case 4:
        return ncclUint32;
    case 2:
        return ncclFloat16; /* any 2-byte type moves the same bits */
    default:
        return ncclUint8;
    }
}
#endif

/* An environment switch: 1 / 0, or `dflt` when unset. */
static int nccl_env_flag(const char *name, int dflt)
{
    const char *v = getenv(name);

    if (v == NULL || v[0] == '\0') {
        return dflt;
    }
    return !(v[0] == '0' || v[0] == 'n' || v[0] == 'N' || v[0] == 'f' || v[0] == 'F');
}

/* ------------------------------------------------------------------------ */
/* Communicator objects                                                     */
/* ------------------------------------------------------------------------ */

static nsp_status_t nccl_slot_add(nccl_comm_t *c)
{
    nccl_slot_t *s     = calloc(1, sizeof(*s));
    size_t       bytes = 2 * (size_t)c->base.size * sizeof(uint64_t);
    nsp_status_t status;

    if (s == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a count-check slot", c->label);
    }
    NSP_CUDA_GOTO(cudaMallocHost((void **)&s->host, bytes), c->label, status, err_free_slot);
    NSP_CUDA_GOTO(cudaMalloc((void **)&s->dev, bytes), c->label, status, err_free_host);
    s->next_all   = c->slots_all;
    c->slots_all  = s;
    s->next_free  = c->slots_free;
    c->slots_free = s;
    return NSP_OK;
err_free_host:
    cudaFreeHost(s->host);
err_free_slot:
    free(s);
    return status;
}

static nsp_status_t nccl_slot_get(nccl_comm_t *c, nccl_slot_t **out)
{
    if (c->slots_free == NULL) {
        NSP_CHECK(nccl_slot_add(c));
    }
    *out          = c->slots_free;
    c->slots_free = (*out)->next_free;
    return NSP_OK;
}

static void nccl_slot_put(nccl_comm_t *c, nccl_slot_t *s)
{
    if (s != NULL) {
        s->next_free  = c->slots_free;
        c->slots_free = s;
    }
}

/* Make the staging of the host collectives hold `bytes`. */
static nsp_status_t nccl_stage_reserve(nccl_comm_t *c, size_t bytes)
{
    size_t cap = c->stage_cap > 0 ? c->stage_cap : NCCL_STAGE_MIN;

    if (bytes <= c->stage_cap) {
        return NSP_OK;
    }
    while (cap < bytes) {
        cap *= 2;
    }
    if (c->stage_dev != NULL) {
        /* Only reached for host collectives larger than any before; the
         * previous one completed (they are blocking). */
        cudaFree(c->stage_dev);
        cudaFreeHost(c->stage_host);
        c->stage_dev  = NULL;
        c->stage_host = NULL;
        c->stage_cap  = 0;
    }
    NSP_CUDA_CHECK(cudaMalloc((void **)&c->stage_dev, cap), c->label);
    if (cudaMallocHost((void **)&c->stage_host, cap) != cudaSuccess) {
        nsp_status_t status = nsp_cuda_status(cudaGetLastError(), c->label, "cudaMallocHost");
        cudaFree(c->stage_dev);
        c->stage_dev = NULL;
        return status != NSP_OK ? status
                                : nsp_error(NSP_ERR_BACKEND, "%s: cudaMallocHost(%zu) failed",
                                            c->label, cap);
    }
    c->stage_cap = cap;
    return NSP_OK;
}

/* Allocate a communicator of this backend with its stream and event. */
static nsp_status_t nccl_comm_new(nccl_world_t *world, int rank, int size, int world_rank0,
                                  double timeout_s, const char *label, nccl_comm_t **out)
{
    nccl_comm_t *c = calloc(1, sizeof(*c));
    nsp_status_t status;

    if (c == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s: no memory for a communicator", label);
    }
    c->base.ops         = nccl_ops();
    c->base.rank        = rank;
    c->base.size        = size;
    c->base.world_rank0 = world_rank0;
    c->base.timeout_s   = timeout_s;
    c->world            = world;
    snprintf(c->label, sizeof(c->label), "%s", label);
    NSP_CHECK_GOTO(nsp_cuda_use_device(world->device, c->label), status, err_free);
    NSP_CUDA_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), c->label, status,
                  err_free);
    NSP_CUDA_GOTO(cudaEventCreateWithFlags(&c->stage_done, cudaEventDisableTiming), c->label,
                  status, err_destroy_stream);
    if (world->check && size > 1) {
        for (int k = 0; k < NCCL_SLOTS_INITIAL; ++k) {
            NSP_CHECK_GOTO(nccl_slot_add(c), status, err_free_slots);
        }
    }
    *out = c;
    return NSP_OK;
err_free_slots:
    while (c->slots_all != NULL) {
        nccl_slot_t *s = c->slots_all;
        c->slots_all   = s->next_all;
        cudaFree(s->dev);
        cudaFreeHost(s->host);
        free(s);
    }
    cudaEventDestroy(c->stage_done);
err_destroy_stream:
    cudaStreamDestroy(c->stream);
err_free:
    free(c);
    return status;
}

/* Finalize (or abort) the NCCL communicator we own, then free everything. */
static nsp_status_t nccl_destroy(nsp_tp_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    nsp_status_t status = NSP_OK;

    if (c == NULL) {
        return NSP_OK;
    }
    (void)nsp_cuda_use_device(c->world->device, c->label);
    if (c->nccl != NULL && c->owns_nccl) {
        if (c->world->broken) {
            nccl_abort(c);
        } else {
            status = nccl_settle(c, c->nccl, ncclCommFinalize(c->nccl), "ncclCommFinalize");
            if (status != NSP_OK) {
                nccl_abort(c); /* finalize failed or timed out: do not wait on peers */
            } else {
                /* Finalized: destroy only frees (the handle is gone after it,
                 * so it is never polled). */
                ncclResult_t r = ncclCommDestroy(c->nccl);
                if (r != ncclSuccess && r != ncclInProgress) {
                    status = nccl_status(r, c, NULL, "ncclCommDestroy", 0);
                }
                c->nccl = NULL;
            }
        }
    }
    while (c->slots_all != NULL) {
        nccl_slot_t *s = c->slots_all;
        c->slots_all   = s->next_all;
        cudaFree(s->dev);
        cudaFreeHost(s->host);
        free(s);
    }
    if (c->stage_dev != NULL) {
        cudaFree(c->stage_dev);
        cudaFreeHost(c->stage_host);
    }
    cudaEventDestroy(c->stage_done);
    cudaStreamDestroy(c->stream);
    if (c->owns_world) {
        free(c->world);
    }
    free(c);
    return status;
}

/* A new world state from the environment. */
static nsp_status_t nccl_world_new(int device, nccl_world_t **out)
{
    nccl_world_t *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nccl: no memory for the world");
    }
    w->device     = device;
    w->check      = nccl_env_flag("NSPCOMM_NCCL_CHECK", 1);
    w->self_comms = nccl_env_flag("NSPCOMM_NCCL_SELF", 1);
    w->alltoall   = nccl_env_flag("NSPCOMM_NCCL_ALLTOALL", 0);
    w->self_p2p   = nccl_env_flag("NSPCOMM_NCCL_SELF_P2P", 0);
    *out          = w;
    return NSP_OK;
}

/* A non-blocking config, so every wait can time out. */
static ncclConfig_t nccl_config(const char *name)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;

    cfg.blocking = 0;
    cfg.commName = name;
    return cfg;
}

/* ------------------------------------------------------------------------ */
/* World                                                                    */
/* ------------------------------------------------------------------------ */

/* What every rank contributes at world creation. */
typedef struct nccl_hello {
    int32_t      ok;      /* 1: this rank's CUDA device is usable */
    int32_t      device;
    ncclUniqueId id;      /* meaningful from rank 0 only */
} nccl_hello_t;

/* Bind the device and touch it, so a rank without a usable GPU finds out
 * before anyone waits on it. */
static nsp_status_t nccl_bind_device(int want, int *device)
{
    int  dev = 0, count = 0;
    char why[256];

    if (nsp_cuda_device_probe(&count) != NSP_OK) {
        /* No GPU or no driver: this backend cannot run here at all. */
        snprintf(why, sizeof(why), "%s", nsp_last_error());
        return nsp_error(NSP_ERR_UNSUPPORTED,
                         "nccl world: no usable CUDA device here (%s); the nccl backend needs "
                         "one GPU per rank: run on a GPU machine or use the ucx backend",
                         why);
    }
    NSP_CHECK(nsp_cuda_use_device(want, "nccl world"));
    NSP_CUDA_CHECK(cudaGetDevice(&dev), "nccl world");
    NSP_CUDA_CHECK(cudaFree(NULL), "nccl world (creating the CUDA context)");
    *device = dev;
    return NSP_OK;
}

static nsp_status_t nccl_world_create(nsp_bootstrap_t *bs, const nsp_tp_params_t *params,
                                      nsp_tp_comm_t **out)
{
    nccl_hello_t  mine;
    nccl_hello_t *all    = NULL;
    nccl_world_t *world  = NULL;
    nccl_comm_t  *c      = NULL;
    nsp_status_t  local  = NSP_OK, status;
    ncclConfig_t  cfg    = nccl_config("nspcomm world");
    int           device = -1;
    int           bad    = -1;

    memset(&mine, 0, sizeof(mine));
    local = nccl_bind_device(params->cuda_device, &device);
    if (local == NSP_OK && bs->rank == 0) {
        local = nsp_nccl_unique_id(&mine.id, sizeof(mine.id));
    }
    mine.ok     = local == NSP_OK;
    mine.device = device;
    all         = calloc((size_t)bs->nranks, sizeof(*all));
    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nccl world: no memory for %d ranks", bs->nranks);
    }
    /* Collective even when this rank failed, so the others learn it now. */
    NSP_CHECK_GOTO(nsp_bootstrap_allgather(bs, &mine, all, sizeof(mine)), status, out_free_all);
    if (local != NSP_OK) {
        status = local; /* decided and logged above */
        goto out_free_all;
    }
    for (int r = 0; r < bs->nranks && bad < 0; ++r) {
        bad = all[r].ok ? -1 : r;
    }
    if (bad >= 0) {
        status = nsp_error(NSP_ERR_BACKEND,
                           "nccl world: rank %d has no usable CUDA device (its log says why); "
                           "every rank of the nccl backend needs a GPU",
                           bad);
        goto out_free_all;
    }
    NSP_CHECK_GOTO(nccl_world_new(device, &world), status, out_free_all);
    NSP_CHECK_GOTO(nccl_comm_new(world, bs->rank, bs->nranks, 0, params->timeout_s, "nccl world",
                                 &c),
                   status, err_free_world);
    c->owns_world = 1;
    c->owns_nccl  = 1;
    {
        ncclComm_t   nc = NULL;
        ncclResult_t r  = ncclCommInitRankConfig(&nc, bs->nranks, all[0].id, bs->rank, &cfg);
        if (nc == NULL && r != ncclSuccess && r != ncclInProgress) {
            status = nccl_status(r, c, NULL, "ncclCommInitRankConfig", 0);
            goto err_destroy_comm;
        }
        c->nccl = nc;
        NSP_CHECK_GOTO(nccl_settle(c, nc, r, "ncclCommInitRankConfig"), status,
                       err_destroy_comm);
    }
    NSP_DEBUG("nccl world: rank %d of %d on CUDA device %d (count check %s, one-rank groups %s)",
              bs->rank, bs->nranks, device, world->check ? "on" : "off",
              world->self_comms ? "without NCCL" : "with NCCL");
    free(all);
    *out = &c->base;
    return NSP_OK;
err_destroy_comm:
    world->broken = 1;
    nccl_destroy(&c->base); /* frees the world too */
    free(all);
    return status;
err_free_world:
    free(world);
out_free_all:
    free(all);
    return status;
}

static nsp_status_t nccl_world_wrap(void *native, const nsp_tp_params_t *params,
                                    nsp_tp_comm_t **out)
{
    ncclComm_t    nc = native;
    nccl_world_t *world;
    nccl_comm_t  *c;
    ncclResult_t  r, state = ncclSuccess;
    int           nranks = 0, rank = 0, device = 0;
    nsp_status_t  status;

    if (nc == NULL || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nccl wrap: the ncclComm_t is NULL");
    }
    r = ncclCommGetAsyncError(nc, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
        return nccl_status(r != ncclSuccess ? r : state, NULL, nc,
                           "ncclCommGetAsyncError on the wrapped communicator (it must be "
                           "initialised and healthy)",
                           0);
    }
    if ((r = ncclCommCount(nc, &nranks)) != ncclSuccess ||
        (r = ncclCommUserRank(nc, &rank)) != ncclSuccess ||
        (r = ncclCommCuDevice(nc, &device)) != ncclSuccess) {
        return nccl_status(r, NULL, nc, "ncclCommCount/UserRank/CuDevice", 0);
    }
    (void)params->cuda_device; /* the communicator's own device wins */
    NSP_CHECK(nccl_world_new(device, &world));
    NSP_CHECK_GOTO(nccl_comm_new(world, rank, nranks, 0, params->timeout_s, "nccl world (wrapped)",
                                 &c),
                   status, err_free_world);
    c->owns_world = 1;
    c->owns_nccl  = 0;
    c->nccl       = nc;
    if (state == ncclInProgress) {
        NSP_CHECK_GOTO(nccl_settle(c, nc, state, "the wrapped communicator's pending init"),
                       status, err_destroy_comm);
    }
    NSP_DEBUG("nccl wrap: rank %d of %d on CUDA device %d", rank, nranks, device);
    *out = &c->base;
    return NSP_OK;
err_destroy_comm:
    nccl_destroy(&c->base);
    return status;
err_free_world:
    free(world);
    return status;
}

static nsp_status_t nccl_split(nsp_tp_comm_t *pbase, int rank0, int size, nsp_tp_comm_t **out)
{
    nccl_comm_t *parent = (nccl_comm_t *)pbase;
    nccl_comm_t *sub    = NULL;
    uint32_t     any_group = 0;
    char         label[64];
    char         name[96];
    nsp_status_t status;

    if (out == NULL || size < 1 || rank0 < 0 || rank0 > pbase->rank ||
        pbase->rank >= rank0 + size || rank0 + size > pbase->size) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "nccl split: rank %d of %d cannot join ranks [%d, %d): the range must "
                         "hold it and lie inside the parent",
                         pbase->rank, pbase->size, rank0, rank0 + size);
    }
    /* key = 1 when this rank's group needs NCCL: the largest key tells
     * whether any rank calls ncclCommSplit (then every rank must). */
    NSP_CHECK(nsp_tp_split_agree(pbase, rank0, size,
                                 size > 1 || !parent->world->self_comms ? 1u : 0u, &any_group));
    snprintf(label, sizeof(label), "nccl group [%d, %d)", pbase->world_rank0 + rank0,
             pbase->world_rank0 + rank0 + size);
    NSP_CHECK(nccl_comm_new(parent->world, pbase->rank - rank0, size, pbase->world_rank0 + rank0,
                            pbase->timeout_s, label, &sub));
    sub->owns_nccl = 1;
    if (any_group != 0) {
        ncclComm_t   nc    = NULL;
        int          color = size > 1 || !parent->world->self_comms ? rank0 : NCCL_SPLIT_NOCOLOR;
        ncclConfig_t cfg;
        ncclResult_t r;
        if (parent->nccl == NULL) {
            status = nsp_error(NSP_ERR_INVALID_ARG,
                               "%s: cannot split a communicator without NCCL (a one-rank group, "
                               "or one aborted after an error)",
                               parent->label);
            goto err_destroy_sub;
        }
        snprintf(name, sizeof(name), "nspcomm %s", label);
        cfg = nccl_config(name);
        r   = ncclCommSplit(parent->nccl, color, pbase->rank, &nc, &cfg);
        if (nc != NULL) {
            sub->nccl = nc;
        }
        NSP_CHECK_GOTO(nccl_settle(parent, nc != NULL ? nc : parent->nccl, r, "ncclCommSplit"),
                       status, err_destroy_sub);
        /* The parent takes part in the split too: let it settle as well. */
        NSP_CHECK_GOTO(nccl_settle(parent, parent->nccl, ncclInProgress,
                                   "ncclCommSplit (parent)"),
                       status, err_destroy_sub);
        if (color != NCCL_SPLIT_NOCOLOR && sub->nccl == NULL) {
            status = nsp_error(NSP_ERR_BACKEND, "%s: ncclCommSplit returned no communicator",
                               label);
            goto err_destroy_sub;
        }
    }
    NSP_DEBUG("%s: rank %d of %d%s", label, sub->base.rank, size,
              sub->nccl == NULL ? " (one rank: copies, no NCCL communicator)" : "");
    *out = &sub->base;
    return NSP_OK;
err_destroy_sub:
    if (status == NSP_ERR_TIMEOUT) {
        nccl_abort(parent);
    }
    parent->world->broken = parent->world->broken || sub->nccl != NULL;
    nccl_destroy(&sub->base);
    return status;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

/* Compare the counts the peers announced with what this rank expects. */
static nsp_status_t nccl_req_compare_counts(nccl_req_t *req)
{
    nccl_comm_t    *c    = req->comm;
    int             n    = c->base.size, me = c->base.rank;
    const uint64_t *sent = req->slot->host + n; /* [j]: bytes j sends me */

    for (int j = 0; j < n; ++j) {
        size_t want;
        if ((j == me && !c->world->self_p2p) ||
            (req->expect_peer >= 0 && j != req->expect_peer)) {
            continue;
        }
        want = req->expect_peer >= 0 ? req->expect_one : req->expect[j];
        if (sent[j] != (uint64_t)want) {
            c->world->broken = 1;
            return nsp_error(NSP_ERR_MISMATCH,
                             "%s %s (tag 0x%08x): rank %d sends %llu bytes but rank %d expects "
                             "%zu; ranks disagree on sizes or layouts",
                             c->label, req->what, req->tag, c->base.world_rank0 + j,
                             (unsigned long long)sent[j], c->base.world_rank0 + me, want);
        }
    }
    return NSP_OK;
}

static nsp_status_t nccl_req_test(nsp_request_t *base)
{
    nccl_req_t  *req = (nccl_req_t *)base;
    nccl_comm_t *c   = req->comm;
    cudaError_t  e;
    ncclResult_t r = ncclSuccess;

    base->idle = 1;
    if (c->base.size > 1 && c->nccl == NULL) {
        return nsp_error(NSP_ERR_PEER_FAILED,
                         "%s %s (tag 0x%08x): the communicator was aborted after an earlier "
                         "error (the first error logged says which); destroy it",
                         c->label, req->what, req->tag);
    }
    if (!req->counts_ok) {
        e = cudaEventQuery(req->counts_landed);
        if (e == cudaSuccess) {
            NSP_CHECK(nccl_req_compare_counts(req));
            req->counts_ok = 1;
            ++base->progress;
            base->idle = 0;
        } else if (e != cudaErrorNotReady) {
            c->world->broken = 1;
            return nsp_cuda_status(e, c->label, "cudaEventQuery (count check)");
        }
    }
    e = cudaEventQuery(req->done);
    if (e == cudaSuccess && req->counts_ok) {
        req->complete = 1;
        ++base->progress;
        base->idle = 0;
        return NSP_OK;
    }
    if (e != cudaSuccess && e != cudaErrorNotReady) {
        c->world->broken = 1;
        return nsp_cuda_status(e, c->label, "cudaEventQuery");
    }
    if (c->nccl != NULL && ncclCommGetAsyncError(c->nccl, &r) == ncclSuccess &&
        r != ncclSuccess && r != ncclInProgress) {
        nsp_status_t st = nccl_status(r, c, c->nccl, req->what, 1);
        nccl_abort(c);
        return st;
    }
    return NSP_INPROGRESS;
}

static void nccl_req_describe(const nsp_request_t *base, char *buf, size_t len)
{
    const nccl_req_t *req = (const nccl_req_t *)base;

    snprintf(buf, len, "%s %s (tag 0x%08x, world ranks [%d, %d)) %s", req->comm->label,
             req->what, req->tag, req->comm->base.world_rank0,
             req->comm->base.world_rank0 + req->comm->base.size,
             req->counts_ok ? "moving data on the GPU" : "waiting for the peers' byte counts");
}

static void nccl_req_free(nsp_request_t *base)
{
    nccl_req_t  *req = (nccl_req_t *)base;
    nccl_comm_t *c   = req->comm;

    if (!req->complete && cudaEventQuery(req->done) != cudaSuccess) {
        /* Abandoned (or failed) while NCCL may still run: abort, so a hung
         * kernel does not block the stream and later work forever. */
        NSP_DEBUG("%s: %s (tag 0x%08x) freed before completion: aborting the communicator",
                  c->label, req->what, req->tag);
        nccl_abort(c);
        (void)cudaGetLastError();
    }
    if (req->counts_landed != NULL) {
        cudaEventDestroy(req->counts_landed);
    }
    cudaEventDestroy(req->done);
    nccl_slot_put(c, req->slot);
    free(req);
}

static const nsp_request_ops_t nccl_request_ops = {
    .name             = "nccl request",
    .test             = nccl_req_test,
    .describe_pending = nccl_req_describe,
    .free             = nccl_req_free,
};

static nsp_status_t nccl_req_new(nccl_comm_t *c, const char *what, uint32_t tag, int check,
                                 nccl_req_t **out)
{
    nccl_req_t  *req = calloc(1, sizeof(*req));
    nsp_status_t status;

    if (req == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "%s %s: no memory for a request", c->label, what);
    }
    nsp_request_init(&req->base, &nccl_request_ops, c->base.timeout_s);
    req->comm        = c;
    req->what        = what;
    req->tag         = tag;
    req->expect_peer = -1;
    req->counts_ok   = !check;
    NSP_CUDA_GOTO(cudaEventCreateWithFlags(&req->done, cudaEventDisableTiming), c->label, status,
                  err_free);
    if (check) {
        NSP_CUDA_GOTO(cudaEventCreateWithFlags(&req->counts_landed, cudaEventDisableTiming),
                      c->label, status, err_destroy_done);
        NSP_CHECK_GOTO(nccl_slot_get(c, &req->slot), status, err_destroy_counts);
    }
    *out = req;
    return NSP_OK;
err_destroy_counts:
    cudaEventDestroy(req->counts_landed);
err_destroy_done:
    cudaEventDestroy(req->done);
err_free:
    free(req);
    return status;
}

/* Release a request whose post failed (nothing of it may be left running:
 * the communicator is aborted when NCCL calls were made). */
static void nccl_req_discard(nccl_req_t *req, int nccl_called)
{
    if (nccl_called) {
        nccl_abort(req->comm);
    }
    req->complete = 1;
    nccl_req_free(&req->base);
}

/* ------------------------------------------------------------------------ */
/* Posts                                                                    */
/* ------------------------------------------------------------------------ */

/* Validate and pick the stream; make the world's device current. */
static nsp_status_t nccl_post_begin(nccl_comm_t *c, const char *what, void *stream,
                                    cudaStream_t *s)
{
    if (c->world->broken && c->base.size > 1) {
        return nsp_error(NSP_ERR_PEER_FAILED,
                         "%s %s: the communicator is broken after an earlier error or an "
                         "abandoned request; destroy it",
                         c->label, what);
    }
    NSP_CHECK(nsp_cuda_use_device(c->world->device, c->label));
    *s = stream != NULL ? (cudaStream_t)stream : c->stream;
    return NSP_OK;
}

/* Enqueue the count exchange of an alltoallv: every rank tells each peer
 * how many bytes it is about to send it; the answers land in
 * slot->host[n + j] and req->counts_landed fires. */
static nsp_status_t nccl_post_counts_alltoallv(nccl_req_t *req, const size_t *sendcounts,
                                               cudaStream_t s)
{
    nccl_comm_t *c    = req->comm;
    int          n    = c->base.size;
    uint64_t    *host = req->slot->host, *dev = req->slot->dev;
    ncclResult_t r;

    for (int j = 0; j < n; ++j) {
        host[j] = sendcounts[j];
    }
    NSP_CUDA_CHECK(cudaMemcpyAsync(dev, host, (size_t)n * sizeof(uint64_t),
                                   cudaMemcpyHostToDevice, s),
                   c->label);
#if NCCL_HAS_ALLTOALL
    /* Uniform on every rank by construction: one uint64 per peer. */
    r = ncclAlltoAll(dev, dev + n, 1, ncclUint64, c->nccl, s);
    NSP_CHECK(nccl_settle(c, c->nccl, r, "ncclAlltoAll (byte counts)"));
#else
    NSP_CHECK(nccl_settle(c, c->nccl, ncclGroupStart(), "ncclGroupStart"));
    for (int j = 0; j < n; ++j) {
        if (j == c->base.rank && !c->world->self_p2p) {
            continue;
        }
        r = ncclRecv(dev + n + j, 1, ncclUint64, j, c->nccl, s);
        if (r == ncclSuccess || r == ncclInProgress) {
            r = ncclSend(dev + j, 1, ncclUint64, j, c->nccl, s);
        }
        if (r != ncclSuccess && r != ncclInProgress) {
            (void)ncclGroupEnd();
            return nccl_status(r, c, c->nccl, "ncclSend/ncclRecv (byte counts)", 0);
        }
    }
    NSP_CHECK(nccl_settle(c, c->nccl, ncclGroupEnd(), "ncclGroupEnd (byte counts)"));
#endif
    NSP_CUDA_CHECK(cudaMemcpyAsync(host + n, dev + n, (size_t)n * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost, s),
                   c->label);
    NSP_CUDA_CHECK(cudaEventRecord(req->counts_landed, s), c->label);
    return NSP_OK;
}

/* The data of an alltoallv as one group of sends and receives; peers
 * staggered (receive from me-k, send to me+k) as the UCX backend does. */
static nsp_status_t nccl_post_group_alltoallv(nccl_comm_t *c, const nsp_tp_alltoallv_t *a,
                                              cudaStream_t s)
{
    int          n = c->base.size, me = c->base.rank;
    int          k0 = c->world->self_p2p ? 0 : 1; /* 0: the self block too */
    ncclResult_t r = ncclSuccess;
    int          nops = 0;

    for (int j = 0; j < n; ++j) {
        nops += (j != me || k0 == 0) && (a->sendcounts[j] > 0 || a->recvcounts[j] > 0);
    }
    if (nops == 0) {
        return NSP_OK;
    }
    NSP_CHECK(nccl_settle(c, c->nccl, ncclGroupStart(), "ncclGroupStart"));
    for (int k = k0; k < n && (r == ncclSuccess || r == ncclInProgress); ++k) {
        int src = (me - k + n) % n, dst = (me + k) % n;
        if (a->recvcounts[src] > 0) {
            r = ncclRecv((char *)a->recvbuf + a->rdispls[src], a->recvcounts[src], ncclUint8, src,
                         c->nccl, s);
        }
        if (a->sendcounts[dst] > 0 && (r == ncclSuccess || r == ncclInProgress)) {
            r = ncclSend((const char *)a->sendbuf + a->sdispls[dst], a->sendcounts[dst],
                         ncclUint8, dst, c->nccl, s);
        }
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        (void)ncclGroupEnd();
        return nccl_status(r, c, c->nccl, "ncclSend/ncclRecv", 0);
    }
    return nccl_settle(c, c->nccl, ncclGroupEnd(), "ncclGroupEnd (alltoallv)");
}

static nsp_status_t nccl_copy_self(nccl_comm_t *c, void *dst, const void *src, size_t bytes,
                                   cudaStream_t s)
{
    if (bytes == 0 || dst == src) {
        return NSP_OK;
    }
    NSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), c->label);
    return NSP_OK;
}

/* One receive (count elements of `type` from src, none when 0) and one
 * send (to dst) as one NCCL group. `what_ops` and `what_end` name the posts
 * and the group end in an error. */
static nsp_status_t nccl_group_recv_send(nccl_comm_t *c, void *recvbuf, size_t recvcount,
                                         int src, const void *sendbuf, size_t sendcount,
                                         int dst, ncclDataType_t type, cudaStream_t s,
                                         const char *what_ops, const char *what_end)
{
    ncclResult_t r = ncclSuccess;

    NSP_CHECK(nccl_settle(c, c->nccl, ncclGroupStart(), "ncclGroupStart"));
    if (recvcount > 0) {
        r = ncclRecv(recvbuf, recvcount, type, src, c->nccl, s);
    }
    if (sendcount > 0 && (r == ncclSuccess || r == ncclInProgress)) {
        r = ncclSend(sendbuf, sendcount, type, dst, c->nccl, s);
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        (void)ncclGroupEnd();
        return nccl_status(r, c, c->nccl, what_ops, 0);
    }
    return nccl_settle(c, c->nccl, ncclGroupEnd(), what_end);
}

/* The last step of a post: mark the end of its work on s and hand the
 * request out. On an error the caller aborts the request. */
static nsp_status_t nccl_post_end(nccl_comm_t *c, nccl_req_t *req, cudaStream_t s,
                                  nsp_request_t **out)
{
    NSP_CUDA_CHECK(cudaEventRecord(req->done, s), c->label);
    *out = &req->base;
    return NSP_OK;
}

static nsp_status_t nccl_alltoallv_post(nsp_tp_comm_t *base, const nsp_tp_alltoallv_t *a,
                                        uint32_t tag, void *stream, nsp_request_t **out)
{
    nccl_comm_t *c  = (nccl_comm_t *)base;
    int          n  = base->size, me = base->rank;
    int          check;
    size_t       uniform = 0;
    cudaStream_t s;
    nccl_req_t  *req = NULL;
    nsp_status_t status;

    if (a == NULL || a->sendcounts == NULL || a->sdispls == NULL || a->recvcounts == NULL ||
        a->rdispls == NULL || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s alltoallv: NULL argument", c->label);
    }
    if (a->sendcounts[me] != a->recvcounts[me]) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "%s alltoallv: rank %d sends itself %zu bytes but expects %zu", c->label,
                         base->world_rank0 + me, a->sendcounts[me], a->recvcounts[me]);
    }
    NSP_CHECK(nccl_post_begin(c, "alltoallv", stream, &s));
    check = c->world->check && c->nccl != NULL && (n > 1 || c->world->self_p2p);
    NSP_CHECK(nccl_req_new(c, "alltoallv", tag, check, &req));
    req->expect = a->recvcounts;
    if (c->nccl == NULL) { /* one rank: a copy */
        NSP_CHECK_GOTO(nccl_copy_self(c, (char *)a->recvbuf + a->rdispls[0],
                                      (const char *)a->sendbuf + a->sdispls[0], a->sendcounts[0],
                                      s),
                       status, err_discard);
    } else {
        if (check) {
            NSP_CHECK_GOTO(nccl_post_counts_alltoallv(req, a->sendcounts, s), status, err_abort);
        }
        if (NCCL_HAS_ALLTOALL && c->world->alltoall && nsp_nccl_uniform_count(a, n, &uniform)) {
#if NCCL_HAS_ALLTOALL
            size_t w = nsp_nccl_elem_width(uniform, a->sendbuf, a->recvbuf);
            NSP_CHECK_GOTO(nccl_settle(c, c->nccl,
                                       ncclAlltoAll(a->sendbuf, a->recvbuf, uniform / w,
                                                    nccl_type_of_width(w), c->nccl, s),
                                       "ncclAlltoAll"),
                           status, err_abort);
#endif
        } else {
            if (!c->world->self_p2p) {
                NSP_CHECK_GOTO(nccl_copy_self(c, (char *)a->recvbuf + a->rdispls[me],
                                              (const char *)a->sendbuf + a->sdispls[me],
                                              a->sendcounts[me], s),
                               status, err_abort);
            }
            NSP_CHECK_GOTO(nccl_post_group_alltoallv(c, a, s), status, err_abort);
        }
    }
    NSP_CHECK_GOTO(nccl_post_end(c, req, s, out), status, err_abort);
    return NSP_OK;
err_abort:
    nccl_req_discard(req, 1);
    return status;
err_discard:
    nccl_req_discard(req, 0);
    return status;
}

/* NCCL moves device memory with its own kernels; scattered runs are the
 * device engine's pack kernels' business (nested_a2a_device.c). */
static nsp_status_t nccl_alltoallv_iov_post(nsp_tp_comm_t *base,
                                            const nsp_tp_alltoallv_iov_t *args, uint32_t tag,
                                            void *stream, nsp_request_t **req)
{
    (void)base;
    (void)args;
    (void)tag;
    (void)stream;
    (void)req;
    return nsp_error(NSP_ERR_UNSUPPORTED, "nccl: alltoallv of scattered runs is not "
                     "supported; pack on the device (the device engine does)");
}

static nsp_status_t nccl_sendrecv_post(nsp_tp_comm_t *base, const void *sendbuf,
                                       size_t sendbytes, int dst, void *recvbuf, size_t recvbytes,
                                       int src, uint32_t tag, void *stream, nsp_request_t **out)
{
    nccl_comm_t *c  = (nccl_comm_t *)base;
    int          me = base->rank;
    int          check, local;
    cudaStream_t s;
    nccl_req_t  *req = NULL;
    nsp_status_t status;

    if (out == NULL || dst < 0 || dst >= base->size || src < 0 || src >= base->size ||
        (dst == me) != (src == me)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "%s sendrecv: dst %d and src %d must be ranks of the communicator "
                         "(size %d), both this rank (%d) or both others",
                         c->label, dst, src, base->size, me);
    }
    if (dst == me && sendbytes != recvbytes) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "%s sendrecv: rank %d sends itself %zu bytes but expects %zu", c->label,
                         base->world_rank0 + me, sendbytes, recvbytes);
    }
    NSP_CHECK(nccl_post_begin(c, "sendrecv", stream, &s));
    /* To itself: a copy, unless NSPCOMM_NCCL_SELF_P2P sends it through NCCL. */
    local = dst == me && (c->nccl == NULL || !c->world->self_p2p);
    check = c->world->check && !local;
    NSP_CHECK(nccl_req_new(c, "sendrecv", tag, check, &req));
    req->expect_peer = src;
    req->expect_one  = recvbytes;
    if (local) {
        NSP_CHECK_GOTO(nccl_copy_self(c, recvbuf, sendbuf, sendbytes, s), status, err_discard);
    } else {
        int       n   = base->size;
        uint64_t *dev = check ? req->slot->dev : NULL;
        if (check) {
            /* The byte count first, in its own group, so it lands even if
             * the data below cannot match. */
            req->slot->host[dst] = sendbytes;
            NSP_CUDA_GOTO(cudaMemcpyAsync(dev + dst, req->slot->host + dst, sizeof(uint64_t),
                                          cudaMemcpyHostToDevice, s),
                          c->label, status, err_discard);
            NSP_CHECK_GOTO(nccl_group_recv_send(c, dev + n + src, 1, src, dev + dst, 1, dst,
                                                ncclUint64, s, "ncclSend/ncclRecv (byte count)",
                                                "ncclGroupEnd (byte count)"),
                           status, err_abort);
            NSP_CUDA_GOTO(cudaMemcpyAsync(req->slot->host + n + src, dev + n + src,
                                          sizeof(uint64_t), cudaMemcpyDeviceToHost, s),
                          c->label, status, err_abort);
            NSP_CUDA_GOTO(cudaEventRecord(req->counts_landed, s), c->label, status, err_abort);
        }
        if (sendbytes > 0 || recvbytes > 0) {
            NSP_CHECK_GOTO(nccl_group_recv_send(c, recvbuf, recvbytes, src, sendbuf, sendbytes,
                                                dst, ncclUint8, s, "ncclSend/ncclRecv",
                                                "ncclGroupEnd (sendrecv)"),
                           status, err_abort);
        }
    }
    NSP_CHECK_GOTO(nccl_post_end(c, req, s, out), status, err_abort);
    return NSP_OK;
err_abort:
    nccl_req_discard(req, 1);
    return status;
err_discard:
    nccl_req_discard(req, 0);
    return status;
}

static nsp_status_t nccl_progress(nsp_tp_comm_t *base, int *idle)
{
    (void)base; /* NCCL progresses on the GPU and in its own proxy thread */
    if (idle != NULL) {
        *idle = 1;
    }
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Host collectives                                                         */
/* ------------------------------------------------------------------------ */

static nsp_status_t nccl_allgather(nsp_tp_comm_t *base, const void *sendbuf, void *recvbuf,
                                   size_t bytes)
{
    nccl_comm_t *c     = (nccl_comm_t *)base;
    int          n     = base->size, me = base->rank;
    size_t       total = (size_t)n * bytes;
    nsp_status_t status;

    if (bytes > 0 && (sendbuf == NULL || recvbuf == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s allgather: NULL buffer", c->label);
    }
    if (c->nccl == NULL) {
        if (n > 1 || c->world->broken) {
            return nsp_error(NSP_ERR_PEER_FAILED,
                             "%s allgather: the communicator was aborted after an earlier error",
                             c->label);
        }
        if (bytes > 0) {
            memmove(recvbuf, sendbuf, bytes);
        }
        return NSP_OK;
    }
    if (bytes == 0) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_cuda_use_device(c->world->device, c->label));
    NSP_CHECK(nccl_stage_reserve(c, total));
    memcpy(c->stage_host + (size_t)me * bytes, sendbuf, bytes);
    /* Pinned staging: every copy is asynchronous, so the wait below is the
     * only place that blocks, and it has the timeout. */
    NSP_CUDA_GOTO(cudaMemcpyAsync(c->stage_dev + (size_t)me * bytes,
                                  c->stage_host + (size_t)me * bytes, bytes,
                                  cudaMemcpyHostToDevice, c->stream),
                  c->label, status, err_abort);
    NSP_CHECK_GOTO(nccl_settle(c, c->nccl,
                               ncclAllGather(c->stage_dev + (size_t)me * bytes, c->stage_dev,
                                             bytes, ncclUint8, c->nccl, c->stream),
                               "ncclAllGather"),
                   status, err_abort);
    NSP_CUDA_GOTO(cudaMemcpyAsync(c->stage_host, c->stage_dev, total, cudaMemcpyDeviceToHost,
                                  c->stream),
                  c->label, status, err_abort);
    NSP_CUDA_GOTO(cudaEventRecord(c->stage_done, c->stream), c->label, status, err_abort);
    NSP_CHECK_GOTO(nccl_wait_event(c, c->stage_done, "allgather"), status, err_abort);
    memcpy(recvbuf, c->stage_host, total);
    return NSP_OK;
err_abort:
    nccl_abort(c);
    return status;
}

static nsp_status_t nccl_barrier(nsp_tp_comm_t *base)
{
    char  one = 1;
    char *all = malloc((size_t)base->size);
    nsp_status_t status;

    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nccl barrier: no memory for %d bytes", base->size);
    }
    /* One byte, not zero: a zero-byte ncclAllGather synchronises nothing. */
    status = nccl_allgather(base, &one, all, 1);
    free(all);
    return status;
}

/* ------------------------------------------------------------------------ */
/* Small public helpers of nccl.h                                           */
/* ------------------------------------------------------------------------ */

nsp_status_t nsp_nccl_versions(int *compiled, int *linked)
{
    int          v = 0;
    ncclResult_t r = ncclGetVersion(&v);

    if (r != ncclSuccess) {
        return nccl_status(r, NULL, NULL, "ncclGetVersion", 0);
    }
    if (compiled != NULL) {
        *compiled = NCCL_VERSION_CODE;
    }
    if (linked != NULL) {
        *linked = v;
    }
    return NSP_OK;
}

nsp_status_t nsp_nccl_unique_id(void *id, size_t len)
{
    ncclUniqueId u;
    ncclResult_t r;

    if (id == NULL || len < sizeof(u)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_nccl_unique_id: need %zu bytes at a non-NULL "
                                              "address (got %zu)",
                         sizeof(u), len);
    }
    r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        return nccl_status(r, NULL, NULL,
                           "ncclGetUniqueId (check NCCL_SOCKET_IFNAME: it needs a network "
                           "interface to listen on)",
                           0);
    }
    memcpy(id, &u, sizeof(u));
    return NSP_OK;
}

void *nsp_nccl_native(const nsp_tp_comm_t *base)
{
    if (base == NULL || base->ops != nccl_ops()) {
        return NULL;
    }
    return ((const nccl_comm_t *)base)->nccl;
}

/* Mapped host memory (nsp_mem_alloc) is a host-path feature of the UCX
 * backend; device buffers would want ncclMemAlloc + ncclCommRegister. */
static nsp_status_t nccl_mem_alloc(nsp_tp_comm_t *world, size_t bytes, void **ptr)
{
    (void)world;
    (void)bytes;
    (void)ptr;
    return nsp_error(NSP_ERR_UNSUPPORTED, "nccl: nsp_mem_alloc maps host memory between "
                     "ranks of one host and is implemented by the ucx backend only");
}

static nsp_status_t nccl_mem_free(nsp_tp_comm_t *world, void *ptr)
{
    (void)world;
    (void)ptr;
    return nsp_error(NSP_ERR_UNSUPPORTED, "nccl: nsp_mem_free: the nccl backend allocates no "
                     "mapped memory (ucx only)");
}

static nsp_status_t nccl_mem_find(nsp_tp_comm_t *world, const void *ptr, size_t bytes,
                                  uint32_t *region, size_t *offset)
{
    (void)world;
    (void)ptr;
    (void)bytes;
    (void)region;
    (void)offset;
    return NSP_ERR_NOT_FOUND;
}

static nsp_status_t nccl_mem_group_mapped(nsp_tp_comm_t *world, uint32_t region, int rank0,
                                          int size, int *yes)
{
    (void)world;
    (void)region;
    (void)rank0;
    (void)size;
    *yes = 0;
    return NSP_OK;
}

static nsp_status_t nccl_mem_peer_ptr(nsp_tp_comm_t *world, int rank, uint32_t region,
                                      size_t offset, size_t bytes, const void **ptr)
{
    (void)world;
    (void)offset;
    (void)bytes;
    (void)ptr;
    return nsp_error(NSP_ERR_NOT_FOUND, "nccl: rank %d's region %u: the nccl backend maps no "
                     "peer memory", rank, region);
}

const nsp_tp_ops_t nsp_tp_nccl_ops = {
    .name           = "nccl",
    .mem_type       = NSP_MEM_CUDA,
    .world_create   = nccl_world_create,
    .world_wrap     = nccl_world_wrap,
    .split          = nccl_split,
    .destroy        = nccl_destroy,
    .alltoallv_post = nccl_alltoallv_post,
    .alltoallv_iov_post = nccl_alltoallv_iov_post,
    .sendrecv_post  = nccl_sendrecv_post,
    .progress       = nccl_progress,
    .allgather      = nccl_allgather,
    .barrier        = nccl_barrier,
    .mem_alloc      = nccl_mem_alloc,
    .mem_free       = nccl_mem_free,
    .mem_find       = nccl_mem_find,
    .mem_group_mapped = nccl_mem_group_mapped,
    .mem_peer_ptr   = nccl_mem_peer_ptr,
};

static const nsp_tp_ops_t *nccl_ops(void)
{
    return &nsp_tp_nccl_ops;
}
