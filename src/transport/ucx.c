/*
 * The UCX backend: host memory over the ucp tag API (shm on one host, tcp
 * across hosts; UCX_TLS and the other UCX_* variables are honoured).
 *
 * One ucp context and worker per world, one endpoint per peer, created at
 * init with peer error handling so a dead peer fails its operations instead
 * of hanging them. Sub-communicators share the world's worker and endpoints;
 * a 64-bit tag keeps them apart:
 *
 *     [ context id : 16 | source rank in the communicator : 16 | tag : 32 ]
 *
 * The context id is agreed at split (the largest next-free id of any parent
 * rank), so two communicators that share a rank never share an id.
 * Every message is sent, zero-byte ones included, so a receiver always learns
 * the sender's count and a disagreement is an error, never a silent hang or
 * truncation.
 *
 * Scattered runs (alltoallv_iov_post). UCX 1.13 sends its iov datatype by
 * rendezvous only through active-message fragments (two copies over shared
 * memory, no CMA), so between ranks on this host that may read each other
 * (ucx_cma_agree) one side describes its runs and the other copies them
 * with process_vm_readv / process_vm_writev: one copy per byte, like UCX's
 * own CMA rendezvous of a contiguous buffer. Other peers use UCX's iov.
 *
 * Failures. UCX 1.13's shared-memory transports have no peer failure
 * handler: asking for UCP_ERR_HANDLING_MODE_PEER to a rank on the same host
 * makes UCX fall back to tcp (about 3x slower on one host). So by default
 * (NSPCOMM_UCX_ERR_MODE=auto) endpoints to ranks on this host use no UCX
 * error handling, and this backend watches those ranks itself (when they
 * share its pid namespace): when a request stalls, it checks whether the
 * pids it waits for still exist, and a rank that has exited fails the
 * request with NSP_ERR_PEER_FAILED.
 * Endpoints to other hosts use UCP_ERR_HANDLING_MODE_PEER with an error
 * callback. Anything else that stops answering is caught by the request
 * timeout (request.c).
 */
#define _GNU_SOURCE /* process_vm_readv */
#include "transport/transport.h"

#include "common/log.h"
#include "transport/ucx_progress.h"
#include "transport/ucx_report.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define UCX_MAX_RANKS   65536
#define UCX_MAX_CONTEXT 0xffffu
/* How long destroy waits for endpoints to flush before it gives up on them. */
#define UCX_CLOSE_MAX_S 10.0
/* A request idle this long (seconds) checks whether its same-host peers live. */
#define UCX_LIVENESS_S 0.25
#define UCX_HOST_KEY_BYTES 96
/* Our mark on a peer whose process has exited (seen by the pid check). UCX
 * never reports this status for tag operations, so it cannot be confused. */
#define UCX_PEER_EXITED UCS_ERR_SOME_CONNECTS_FAILED

typedef struct ucx_world ucx_world_t;

typedef struct ucx_peer {
    ucx_world_t *world;
    int          rank;      /* world rank */
    ucp_ep_h     ep;        /* NULL for this rank */
    ucs_status_t failed;    /* UCS_OK, or what the error handler / liveness check saw */
    int          same_host; /* 1: on this host (shared memory possible) */
    int          watch_pid; /* 1: same host and pid namespace: pid says if it lives */
    int          peer_mode; /* 1: endpoint has UCP_ERR_HANDLING_MODE_PEER */
    int          flush_owed; /* 1: reached over shared memory alone (ucx_flush_owed) */
    size_t       rndv_thresh; /* tag sends of this many bytes or more go rendezvous */
    int          cma;       /* 1: each of us may read the other's memory (process_vm_readv) */
    uint64_t     cma_probe; /* the address of its world's cma_probe word */
    pid_t        pid;
} ucx_peer_t;

/* What each rank publishes besides its worker address. */
typedef struct ucx_rank_info {
    uint64_t address_len;
    int64_t  pid;
    char     host[UCX_HOST_KEY_BYTES]; /* the real host: hostname/boot id */
    char     pidns[32];                /* "pid:[inode]" of its pid namespace */
    uint64_t cma_probe;                /* &world->cma_probe: peers try to read it */
} ucx_rank_info_t;

/* One rank's view of one peer's part of a mapped region. */
typedef struct ucx_region_peer {
    uint64_t   base;  /* the region's address in the peer's process */
    uint64_t   len;   /* bytes */
    ucp_rkey_h rkey;  /* unpacked rkey, NULL if not mapped */
    void      *ptr;   /* the region in THIS process, NULL if not mapped */
    int32_t    lo, hi; /* world ranks [lo, hi] around the peer all mapped BY the peer */
} ucx_region_peer_t;

/* A region of nsp_mem_alloc: this rank's memory and its view of the peers'. */
typedef struct ucx_region {
    struct ucx_region *next;
    uint32_t           id;     /* allocation round, the same on every rank */
    void              *base;   /* this rank's memory (ucp_mem_map ALLOCATE) */
    size_t             len;
    ucp_mem_h          memh;
    ucx_region_peer_t *peers;  /* [nranks]; peers[me].ptr = base */
} ucx_region_t;

struct ucx_world {
    ucp_context_h context;
    ucp_worker_h  worker;
    int           nranks;
    ucx_peer_t   *peers;        /* [nranks] */
    uint32_t      next_context; /* next free context id on this rank */
    ucx_region_t *regions;      /* live nsp_mem_alloc regions, newest first */
    uint32_t      next_region;  /* id of the next region */
    int           abandoned;    /* 1: a request was freed with operations in flight */
    int           active;       /* this rank's requests not complete yet (ucx_req_settle) */
    nsp_ucx_progress_t *progress; /* progress thread (peers on other hosts), or NULL */
    nsp_tp_ucx_stats_t  stats;    /* what this rank did on the world (nsp_tp_ucx_stats) */
    uint64_t      cma_probe;    /* UCX_CMA_MAGIC: what peers read to learn they may */
    struct ucx_orphan *orphans; /* [norphans]: exposed runs of freed requests (ucx_orphan) */
    int           norphans, orphans_cap;
};

/* What a request freed unfinished leaves in flight for the world to wait
 * for at destroy: the acknowledgement receive of runs it exposed to a
 * same-host copier (kept posted until that peer answers or fails), or a
 * send of a cma pair (its descriptor, or a copier's answer) with the op's
 * descriptor buffer (buf, freed only after UCX's worker). */
typedef struct ucx_orphan {
    void *ucp_req;
    void *buf;  /* owned: the descriptor being sent, or NULL */
    int   rank; /* the peer's world rank */
} ucx_orphan_t;

/* What a peer finds in cma_probe when it may read this process. */
#define UCX_CMA_MAGIC 0x6e7370636d613031ull

typedef struct ucx_comm {
    nsp_tp_comm_t base;
    ucx_world_t  *world;
    int           owns_world;
    uint16_t      context;
} ucx_comm_t;

/* What the copying side of a cma pair (alltoallv_iov_post) is doing. */
typedef enum {
    UCX_PULL_NONE = 0,  /* not a copy: a plain send or receive */
    UCX_PULL_PROBE,     /* waiting for the peer's descriptor to arrive */
    UCX_PULL_DESC,      /* receiving the descriptor */
    UCX_PULL_ACK        /* copied; the acknowledgement is being sent */
} ucx_pull_stage_t;

/* One send or receive of a request. */
typedef struct ucx_op {
    void               *ucp_req; /* in flight; NULL once done */
    int                 peer;    /* rank in the communicator */
    int                 is_recv;
    int                 done;
    size_t              bytes;   /* sent, or expected */
    ucp_tag_recv_info_t info;    /* filled for receives */
    ucx_pull_stage_t    pull;    /* a copy: its stage */
    int                 push;    /* a copy: 1 writes my runs into the peer's, 0 reads */
    const nsp_tp_iov_t *iov;     /* a copy: this rank's runs, niov of them */
    size_t              niov;
    void               *desc;    /* a descriptor sent or received (owned; freed with it) */
    int                 ack;     /* the receive of a copying peer's acknowledgement */
    int                 replied; /* a copy: its ack or nack is sent (the peer's runs are free) */
} ucx_op_t;

typedef struct ucx_req {
    nsp_request_t base;
    ucx_comm_t   *comm;
    const char   *what;         /* "alltoallv" or "sendrecv" */
    uint32_t      tag;
    int           nops;
    int           ndone;
    double        last_done_t;  /* when a part last completed (or the post) */
    double        last_check_t; /* when the liveness check last ran */
    int           counted;      /* 1: counted in world->active (not complete yet) */
    nsp_status_t  error;        /* the first op's failure: the request drains (ucx_req_drain) */
    ucx_op_t      ops[];        /* [nops] */
} ucx_req_t;

static const nsp_tp_ops_t *ucx_ops(void);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static ucp_tag_t ucx_tag(const ucx_comm_t *comm, int src, uint32_t tag)
{
    return ((ucp_tag_t)comm->context << 48) | ((ucp_tag_t)(uint16_t)src << 32) | tag;
}

static ucx_peer_t *ucx_peer(const ucx_comm_t *comm, int rank)
{
    return &comm->world->peers[comm->base.world_rank0 + rank];
}

/* Statuses with which UCX reports a peer that is gone or unreachable. */
static int ucx_is_peer_failure(ucs_status_t st)
{
    switch (st) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED:
        return 1;
    default:
        return 0;
    }
}

/* peer->failed is set by the error callback, which may run in the progress
 * thread: read and set it atomically. */
static ucs_status_t ucx_failed(const ucx_peer_t *peer)
{
    return __atomic_load_n(&peer->failed, __ATOMIC_ACQUIRE);
}

/* Set peer->failed to status if it is UCS_OK; 1 if this call set it. */
static int ucx_set_failed(ucx_peer_t *peer, ucs_status_t status)
{
    ucs_status_t ok = UCS_OK;

    return __atomic_compare_exchange_n(&peer->failed, &ok, status, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

static void ucx_on_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_peer_t *peer = arg;

    (void)ep;
    if (ucx_set_failed(peer, status)) {
        NSP_DEBUG("ucx: endpoint to world rank %d failed: %s", peer->rank,
                  ucs_status_string(status));
    }
}

static nsp_status_t ucx_check_stream(const char *what, void *stream)
{
    if (stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED,
                         "ucx %s: a CUDA stream was given but the UCX backend moves host "
                         "memory only; pass NULL or use the nccl backend",
                         what);
    }
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

static nsp_status_t ucx_op_failed(ucx_req_t *req, const ucx_op_t *op, ucs_status_t st)
{
    int world_rank = req->comm->base.world_rank0 + op->peer;

    if (st == UCS_ERR_MESSAGE_TRUNCATED && op->ack) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "ucx %s (tag 0x%08x): rank %d, which copies between our runs, refused "
                         "to copy: it found that rank %d and it disagree on the bytes between "
                         "them, or its own operation failed (its error says which); ranks "
                         "disagree on sizes or layouts",
                         req->what, req->tag, world_rank,
                         req->comm->base.world_rank0 + req->comm->base.rank);
    }
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "ucx %s (tag 0x%08x): rank %d sent more than the %zu bytes rank %d "
                         "expected from it; ranks disagree on sizes or layouts",
                         req->what, req->tag, world_rank, op->bytes,
                         req->comm->base.world_rank0 + req->comm->base.rank);
    }
    if (st == UCX_PEER_EXITED) {
        return nsp_error(NSP_ERR_PEER_FAILED,
                         "ucx %s (tag 0x%08x): rank %d (pid %d on this host) has exited while "
                         "this rank waited to %s it",
                         req->what, req->tag, world_rank,
                         (int)req->comm->world->peers[world_rank].pid,
                         op->is_recv ? "receive from" : "send to");
    }
    return nsp_error(ucx_is_peer_failure(st) ? NSP_ERR_PEER_FAILED : NSP_ERR_BACKEND,
                     "ucx %s (tag 0x%08x): %s %s rank %d failed: %s", req->what, req->tag,
                     op->is_recv ? "receive" : "send", op->is_recv ? "from" : "to", world_rank,
                     ucs_status_string(st));
}

/* Is this same-host process gone (or a zombie nobody reaped yet)? */
static int ucx_pid_exited(pid_t pid)
{
    char  path[64];
    char  buf[256];
    FILE *f;
    char *close_paren;
    int   gone = 0;

    if (kill(pid, 0) != 0) {
        return errno == ESRCH;
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    /* "pid (comm) S ...": the state follows the last ')'. */
    if (fgets(buf, sizeof(buf), f) != NULL && (close_paren = strrchr(buf, ')')) != NULL) {
        gone = close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
    }
    fclose(f);
    return gone;
}

/* Mark a same-host peer whose process has exited as failed. */
static void ucx_mark_if_exited(ucx_peer_t *peer)
{
    if (peer->watch_pid && ucx_failed(peer) == UCS_OK && ucx_pid_exited(peer->pid) &&
        ucx_set_failed(peer, UCX_PEER_EXITED)) {
        NSP_DEBUG("ucx: world rank %d (pid %d) has exited", peer->rank, (int)peer->pid);
    }
}

/* The request is stalled: mark same-host peers it waits for that have exited. */
static void ucx_check_liveness(ucx_req_t *req)
{
    for (int i = 0; i < req->nops; ++i) {
        if (!req->ops[i].done) {
            ucx_mark_if_exited(ucx_peer(req->comm, req->ops[i].peer));
        }
    }
}

/* The op completed (immediately or later): check what arrived. */
static nsp_status_t ucx_op_complete(ucx_req_t *req, ucx_op_t *op)
{
    op->done = 1;
    ++req->ndone;
    ++req->base.progress;
    req->last_done_t = -1.0; /* refreshed lazily by the next idle test */
    if (op->is_recv && op->info.length != op->bytes) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "ucx %s (tag 0x%08x): rank %d sent %zu bytes but rank %d expected %zu; "
                         "ranks disagree on sizes or layouts",
                         req->what, req->tag, req->comm->base.world_rank0 + op->peer,
                         op->info.length, req->comm->base.world_rank0 + req->comm->base.rank,
                         op->bytes);
    }
    return NSP_OK;
}

static nsp_status_t ucx_pull_test(ucx_req_t *req, ucx_op_t *op);

/* What UCX said of op's request (st): NSP_INPROGRESS while it runs and its
 * peer lives; NSP_OK once it succeeded (the request freed); else the op
 * failed (freed, done, the error decided by ucx_op_failed). */
static nsp_status_t ucx_op_settle(ucx_req_t *req, ucx_op_t *op, ucs_status_t st)
{
    if (st == UCS_INPROGRESS) {
        ucs_status_t failed = ucx_failed(ucx_peer(req->comm, op->peer));
        return failed == UCS_OK ? NSP_INPROGRESS : ucx_op_failed(req, op, failed);
    }
    ucp_request_free(op->ucp_req);
    op->ucp_req = NULL;
    if (st != UCS_OK) {
        op->done = 1;
        return ucx_op_failed(req, op, st);
    }
    return NSP_OK;
}

static nsp_status_t ucx_op_test(ucx_req_t *req, ucx_op_t *op)
{
    ucs_status_t st;
    nsp_status_t s;

    if (op->pull != UCX_PULL_NONE) {
        return ucx_pull_test(req, op);
    }
    if (op->is_recv) {
        st = ucp_tag_recv_request_test(op->ucp_req, &op->info);
    } else {
        st = ucp_request_check_status(op->ucp_req);
    }
    s = ucx_op_settle(req, op, st);
    return s != NSP_OK ? s : ucx_op_complete(req, op);
}

/*
 * Nothing of this rank is in flight any more: hand to the wire what UCX
 * still holds for peers, before the rank leaves nspcomm. A receive completes
 * when its data has landed, but its sender's send completes only when this
 * rank's protocol reply (the rendezvous acknowledgement) reaches it, and UCX
 * queues that reply when the transport has no room (a full shared-memory
 * FIFO of the sender, a tcp socket that would block) for a later
 * ucp_worker_progress of this rank; tcp likewise keeps the unsent tail of a
 * completed eager send. A rank that went straight into another library's
 * collective (gloo's all-reduce) would not progress UCX again, and its peer
 * would wait in nspcomm until NSPCOMM_TIMEOUT (seen: "still waiting: send to
 * rank 5" while rank 5 was in gloo). Flushing every endpoint waits for
 * exactly those queues to drain into the peer's FIFO or the kernel's socket,
 * which needs only peers still inside nspcomm (those that wait for them).
 * (ucp_worker_flush would not do: it returns at once when every interface
 * is flushed, and the shared-memory one ignores its endpoints' queues.)
 * Only peers reached over shared memory alone (peer->flush_owed): flushing
 * a tcp endpoint can wait on UCX's own traffic to a peer that has moved on
 * (seen: 60 s in nsp_tree_create, over loopback tcp and across namespace
 * nodes). What is owed over tcp is sent by the progress thread, which a
 * world with peers on other hosts has (NSPCOMM_PROGRESS_THREAD=on gives
 * one to a single-host tcp world): it progresses the worker every
 * millisecond while nothing is in flight (ucx_progress.c).
 */
static nsp_status_t ucx_flush_owed(ucx_world_t *w, double timeout_s)
{
    double deadline = nsp_now_s() + timeout_s;

    for (int r = 0; r < w->nranks; ++r) {
        ucp_request_param_t param;
        void               *req;
        if (w->peers[r].ep == NULL || !w->peers[r].flush_owed ||
            ucx_failed(&w->peers[r]) != UCS_OK) {
            continue;
        }
        memset(&param, 0, sizeof(param));
        req = ucp_ep_flush_nbx(w->peers[r].ep, &param);
        while (req != NULL && !UCS_PTR_IS_ERR(req) &&
               ucp_request_check_status(req) == UCS_INPROGRESS) {
            if (nsp_now_s() > deadline) {
                ucp_request_free(req); /* UCX releases it when it completes */
                return nsp_error(NSP_ERR_TIMEOUT,
                                 "ucx: bytes for world rank %d still queued here after %.1f s "
                                 "(NSPCOMM_TIMEOUT): that rank takes none",
                                 r, timeout_s);
            }
            if (nsp_ucx_progress_rank(w->progress, w->worker) == 0) {
                sched_yield();
            }
        }
        if (req != NULL && !UCS_PTR_IS_ERR(req)) {
            ucp_request_free(req);
        }
        /* a failed flush means a failed peer: its own requests report that */
    }
    return NSP_OK;
}

/* The request completed: it no longer counts as in flight; the last one
 * flushes what the rank owes its peers (ucx_flush_owed) unless `flush` is 0. */
static nsp_status_t ucx_req_settle(ucx_req_t *req, int flush)
{
    ucx_world_t *w = req->comm->world;

    if (!req->counted) {
        return NSP_OK;
    }
    req->counted = 0;
    if (--w->active > 0 || !flush) {
        return NSP_OK;
    }
    return ucx_flush_owed(w, req->comm->base.timeout_s);
}

/* The rank progresses the worker (counted in w->stats). */
static unsigned ucx_progress_counted(ucx_world_t *w)
{
    unsigned n = nsp_ucx_progress_rank(w->progress, w->worker);

    ++w->stats.progress;
    w->stats.progress_idle += n == 0;
    return n;
}

/*
 * Draining a failed request. A cma pair exposes the runs of one side (the
 * one that sent its descriptor) to the other's process_vm_readv/writev
 * until the copier acknowledges. When one op of a request fails, the
 * others may still be exposed: reporting the failure at once would let the
 * caller free or reuse buffers a peer is still copying from or into (seen:
 * a receiver's heap written after it freed it, then abort()). So the
 * request first
 *   - tells every peer it copies for and has not answered that it will not
 *     copy (a one-byte nack; the peer's zero-byte acknowledgement receive
 *     fails as truncated, so the peer's own request fails fast), and
 *   - waits for every acknowledgement of its own exposed runs (a copier's
 *     ack or nack, or the copier's failure), within the request's timeout;
 * then it reports the first failure. Plain sends and receives are not
 * waited for: UCX owns their buffers until nsp_request_free cancels them.
 */
static void ucx_nack(ucx_req_t *req, ucx_op_t *op)
{
    static const char   nack = 1;
    ucx_peer_t         *peer = ucx_peer(req->comm, op->peer);
    ucp_request_param_t param;
    void               *r;

    op->replied = 1;
    if (ucx_failed(peer) != UCS_OK) {
        return;
    }
    memset(&param, 0, sizeof(param));
    r = ucp_tag_send_nbx(peer->ep, &nack, 1,
                         ucx_tag(req->comm, req->comm->base.rank,
                                 req->tag | NSP_TP_TAG_IOV_ACK),
                         &param);
    if (UCS_PTR_IS_PTR(r)) {
        ucp_request_free(r); /* a static byte: UCX completes the send on its own */
    }
}

/* Nack every copy of the request not answered yet. */
static void ucx_nack_copies(ucx_req_t *req)
{
    for (int i = 0; i < req->nops; ++i) {
        ucx_op_t *op = &req->ops[i];
        if (op->pull != UCX_PULL_NONE && !op->replied) {
            ucx_nack(req, op);
        }
    }
}

/* 1 while UCX request *r runs and its peer lives; else (done, or a failed
 * peer whose answer never comes) releases it, *r = NULL, and 0. */
static int ucx_awaiting(void **r, const ucx_peer_t *peer)
{
    if (ucp_request_check_status(*r) == UCS_INPROGRESS && ucx_failed(peer) == UCS_OK) {
        return 1;
    }
    ucp_request_free(*r);
    *r = NULL;
    return 0;
}

/* Exposed runs still waiting for their copier's answer (ack or nack). */
static int ucx_exposed(ucx_req_t *req)
{
    int left = 0;

    for (int i = 0; i < req->nops; ++i) {
        ucx_op_t *op = &req->ops[i];
        if (!op->ack || op->done) {
            continue;
        }
        if (op->ucp_req != NULL && ucx_awaiting(&op->ucp_req, ucx_peer(req->comm, op->peer))) {
            ++left;
            continue;
        }
        op->done = 1;
    }
    return left;
}

static nsp_status_t ucx_req_drain(ucx_req_t *req)
{
    if (ucx_exposed(req) > 0) {
        return NSP_INPROGRESS;
    }
    (void)ucx_req_settle(req, 0);
    return req->error;
}

static nsp_status_t ucx_req_test(nsp_request_t *base)
{
    ucx_req_t   *req = (ucx_req_t *)base;
    unsigned     n;

    n = ucx_progress_counted(req->comm->world);

    base->idle = n == 0;
    if (base->idle) {
        /* Read the clock only when idle: the busy path stays cheap. */
        double now = nsp_now_s();
        if (req->last_done_t < 0) {
            req->last_done_t = now;
        } else if (now - req->last_done_t > UCX_LIVENESS_S &&
                   now - req->last_check_t > UCX_LIVENESS_S) {
            req->last_check_t = now;
            ucx_check_liveness(req);
        }
    }
    if (req->error != NSP_OK) {
        return ucx_req_drain(req);
    }
    for (int i = 0; i < req->nops; ++i) {
        ucx_op_t *op = &req->ops[i];
        if (!op->done) {
            nsp_status_t status = ucx_op_test(req, op);
            if (status < 0) {
                req->error = status; /* logged where it was decided */
                ucx_nack_copies(req);
                return ucx_req_drain(req);
            }
        }
    }
    return req->ndone == req->nops ? ucx_req_settle(req, 1) : NSP_INPROGRESS;
}

static void ucx_req_describe(const nsp_request_t *base, char *buf, size_t len)
{
    const ucx_req_t *req  = (const ucx_req_t *)base;
    size_t           used = 0;
    int              n    = 0;

    buf[0] = '\0';
    for (int i = 0; i < req->nops && used + 24 < len; ++i) {
        const ucx_op_t *op = &req->ops[i];
        if (!op->done) {
            int w = snprintf(buf + used, len - used, "%s%s rank %d", n > 0 ? ", " : "",
                             op->pull != UCX_PULL_NONE ? (op->push ? "copy to" : "copy from")
                             : op->is_recv            ? "recv from"
                                                      : "send to",
                             req->comm->base.world_rank0 + op->peer);
            used += w > 0 ? (size_t)w : 0;
            ++n;
        }
    }
    snprintf(buf + used, len - used, " (ucx %s, tag 0x%08x, world ranks [%d, %d))", req->what,
             req->tag, req->comm->base.world_rank0,
             req->comm->base.world_rank0 + req->comm->base.size);
}

/* Keep op's acknowledgement receive, or its send and descriptor buffer
 * (request freed), for ucx_wait_orphans; 0 when it cannot (no memory, the
 * peer failed). */
static int ucx_adopt(ucx_req_t *req, ucx_op_t *op)
{
    ucx_world_t *w    = req->comm->world;
    ucx_peer_t  *peer = ucx_peer(req->comm, op->peer);

    if (ucx_failed(peer) != UCS_OK) {
        return 0;
    }
    if (w->norphans == w->orphans_cap) {
        int           cap   = w->orphans_cap * 2 + 8;
        ucx_orphan_t *grown = realloc(w->orphans, (size_t)cap * sizeof(*grown));
        if (grown == NULL) {
            return 0;
        }
        w->orphans     = grown;
        w->orphans_cap = cap;
    }
    w->orphans[w->norphans].ucp_req = op->ucp_req;
    w->orphans[w->norphans].buf     = op->is_recv ? NULL : op->desc;
    w->orphans[w->norphans].rank    = peer->rank;
    ++w->norphans;
    op->ucp_req = NULL;
    if (!op->is_recv) {
        op->desc = NULL;
    }
    return 1;
}

static void ucx_req_free(nsp_request_t *base)
{
    ucx_req_t *req = (ucx_req_t *)base;

    /* freed before it finished (a timeout, or another request's failure):
     * peers waiting for this rank's copies are told it will not copy; the
     * acknowledgements its own exposed runs wait for are handed to the
     * world, whose destroy waits for them (see nsp_request_free) */
    ucx_nack_copies(req);
    for (int i = 0; i < req->nops; ++i) {
        ucx_op_t *op = &req->ops[i];
        if (!op->done && op->ucp_req != NULL && (op->ack || (!op->is_recv && op->desc)) &&
            ucx_adopt(req, op)) {
            continue; /* the world waits for it at destroy */
        }
        if (op->ucp_req != NULL) {
            /* abandoned (e.g. after a timeout): close endpoints by force */
            if (ucp_request_check_status(op->ucp_req) == UCS_INPROGRESS) {
                req->comm->world->abandoned = 1;
            }
            if (op->is_recv) {
                ucp_request_cancel(req->comm->world->worker, op->ucp_req);
            }
            ucp_request_free(op->ucp_req);
        }
        free(op->desc);
    }
    (void)ucx_req_settle(req, 0); /* abandoned or failed: owes nothing worth waiting for */
    nsp_ucx_progress_busy(req->comm->world->progress, -1);
    free(req);
}

static const nsp_request_ops_t ucx_request_ops = {
    .name             = "ucx request",
    .test             = ucx_req_test,
    .describe_pending = ucx_req_describe,
    .free             = ucx_req_free,
};

static nsp_status_t ucx_req_alloc(ucx_comm_t *comm, const char *what, uint32_t tag, int nops,
                                  ucx_req_t **out)
{
    ucx_req_t *req = calloc(1, sizeof(*req) + (size_t)nops * sizeof(ucx_op_t));

    if (req == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx %s: no memory for a request of %d operations",
                         what, nops);
    }
    nsp_request_init(&req->base, &ucx_request_ops, comm->base.timeout_s);
    req->comm        = comm;
    req->what        = what;
    req->tag         = tag;
    req->last_done_t = -1.0;
    req->counted     = 1;
    ++comm->world->active;
    nsp_ucx_progress_busy(comm->world->progress, +1);
    *out      = req;
    return NSP_OK;
}

/* A request whose operations are all posted: done already if every one
 * completed in place. Returns its public handle. */
static nsp_request_t *ucx_req_posted(ucx_req_t *req)
{
    if (req->ndone == req->nops) {
        /* only sends to itself or none: no receive whose sender waits on us */
        (void)ucx_req_settle(req, 0);
        nsp_request_set_done(&req->base);
    }
    return &req->base;
}

/* Record what ucp_tag_{send,recv}_nbx returned for `op`: an error fails
 * it, NULL means it completed in place, anything else is the UCX request to
 * test later. */
static nsp_status_t ucx_op_posted(ucx_req_t *req, ucx_op_t *op, void *r)
{
    if (UCS_PTR_IS_ERR(r)) {
        op->done = 1;
        return ucx_op_failed(req, op, UCS_PTR_STATUS(r));
    }
    if (r == NULL) {
        return ucx_op_complete(req, op);
    }
    op->ucp_req = r;
    return NSP_OK;
}

static nsp_status_t ucx_post_recv_tag(ucx_req_t *req, void *buf, size_t bytes, int src,
                                      uint32_t tag)
{
    ucx_op_t           *op = &req->ops[req->nops++];
    ucp_request_param_t param;
    void               *r;

    op->peer    = src;
    op->is_recv = 1;
    op->bytes   = bytes;
    /* Always get a request: UCX 1.13 may complete a receive immediately from
     * its unexpected queue without filling recv_info, and we need the length
     * that arrived (ucp_tag_recv_request_test reports it). */
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    r = ucp_tag_recv_nbx(req->comm->world->worker, buf, bytes,
                         ucx_tag(req->comm, src, tag), (ucp_tag_t)-1, &param);
    ++req->comm->world->stats.recvs;
    return ucx_op_posted(req, op, r);
}

static nsp_status_t ucx_post_recv(ucx_req_t *req, void *buf, size_t bytes, int src)
{
    return ucx_post_recv_tag(req, buf, bytes, src, req->tag);
}

/* A send posted to `peer`: its protocol (by the endpoint's rendezvous
 * threshold) and whether it completed in place (UCX returned no request). */
static void ucx_count_send(ucx_world_t *w, const ucx_peer_t *peer, size_t bytes, const void *r)
{
    ++w->stats.sends;
    w->stats.send_bytes += bytes;
    w->stats.sends_rndv += bytes >= peer->rndv_thresh;
    w->stats.sends_in_place += r == NULL;
}

static nsp_status_t ucx_post_send(ucx_req_t *req, const void *buf, size_t bytes, int dst)
{
    ucx_op_t           *op   = &req->ops[req->nops++];
    ucx_peer_t         *peer = ucx_peer(req->comm, dst);
    ucp_request_param_t param;
    void               *r;

    op->peer  = dst;
    op->bytes = bytes;
    if (ucx_failed(peer) != UCS_OK) {
        op->done = 1;
        return ucx_op_failed(req, op, ucx_failed(peer));
    }
    memset(&param, 0, sizeof(param));
    r = ucp_tag_send_nbx(peer->ep, buf, bytes, ucx_tag(req->comm, req->comm->base.rank, req->tag),
                         &param);
    ucx_count_send(req->comm->world, peer, bytes, r);
    return ucx_op_posted(req, op, r);
}

/* ------------------------------------------------------------------------ */
/* Operations                                                               */
/* ------------------------------------------------------------------------ */

static nsp_status_t ucx_alltoallv_post(nsp_tp_comm_t *base, const nsp_tp_alltoallv_t *a,
                                       uint32_t tag, void *stream, nsp_request_t **out)
{
    ucx_comm_t  *comm = (ucx_comm_t *)base;
    int          n    = base->size;
    int          me   = base->rank;
    ucx_req_t   *req = NULL;
    nsp_status_t status;

    NSP_CHECK(ucx_check_stream("alltoallv", stream));
    if (a == NULL || a->sendcounts == NULL || a->sdispls == NULL || a->recvcounts == NULL ||
        a->rdispls == NULL || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ucx alltoallv: NULL argument");
    }
    if (a->sendcounts[me] != a->recvcounts[me]) {
        return nsp_error(NSP_ERR_MISMATCH,
                         "ucx alltoallv: rank %d sends itself %zu bytes but expects %zu",
                         base->world_rank0 + me, a->sendcounts[me], a->recvcounts[me]);
    }
    NSP_CHECK(ucx_req_alloc(comm, "alltoallv", tag, 2 * (n - 1), &req));
    if (a->sendcounts[me] > 0) {
        memcpy((char *)a->recvbuf + a->rdispls[me], (const char *)a->sendbuf + a->sdispls[me],
               a->sendcounts[me]);
    }
    /* Receives first, so most sends find them posted; staggered peers so
     * ranks do not all send to the same rank at once. */
    for (int k = 1; k < n; ++k) {
        int src = (me - k + n) % n;
        NSP_CHECK_GOTO(ucx_post_recv(req, (char *)a->recvbuf + a->rdispls[src],
                                     a->recvcounts[src], src),
                       status, err_free_req);
    }
    for (int k = 1; k < n; ++k) {
        int dst = (me + k) % n;
        NSP_CHECK_GOTO(ucx_post_send(req, (const char *)a->sendbuf + a->sdispls[dst],
                                     a->sendcounts[dst], dst),
                       status, err_free_req);
    }
    *out = ucx_req_posted(req);
    return NSP_OK;
err_free_req:
    ucx_req_free(&req->base);
    return status;
}

static nsp_status_t ucx_sendrecv_post(nsp_tp_comm_t *base, const void *sendbuf, size_t sendbytes,
                                      int dst, void *recvbuf, size_t recvbytes, int src,
                                      uint32_t tag, void *stream, nsp_request_t **out)
{
    ucx_comm_t  *comm = (ucx_comm_t *)base;
    int          me   = base->rank;
    ucx_req_t   *req = NULL;
    nsp_status_t status;

    NSP_CHECK(ucx_check_stream("sendrecv", stream));
    if (out == NULL || dst < 0 || dst >= base->size || src < 0 || src >= base->size ||
        (dst == me) != (src == me)) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "ucx sendrecv: dst %d and src %d must be ranks of the communicator "
                         "(size %d), both this rank (%d) or both others",
                         dst, src, base->size, me);
    }
    if (dst == me && sendbytes != recvbytes) {
        return nsp_error(NSP_ERR_MISMATCH, "ucx sendrecv: rank %d sends itself %zu bytes but "
                                           "expects %zu",
                         base->world_rank0 + me, sendbytes, recvbytes);
    }
    NSP_CHECK(ucx_req_alloc(comm, "sendrecv", tag, 2, &req));
    if (dst == me) {
        if (sendbytes > 0) {
            memcpy(recvbuf, sendbuf, sendbytes);
        }
    } else {
        NSP_CHECK_GOTO(ucx_post_recv(req, recvbuf, recvbytes, src), status, err_free_req);
        NSP_CHECK_GOTO(ucx_post_send(req, sendbuf, sendbytes, dst), status, err_free_req);
    }
    *out = ucx_req_posted(req);
    return NSP_OK;
err_free_req:
    ucx_req_free(&req->base);
    return status;
}


/* ------------------------------------------------------------------------ */
/* Scattered runs (alltoallv_iov_post)                                      */
/* ------------------------------------------------------------------------ */

/*
 * A cma pair (same host, each may read the other: ucx_cma_agree): one side
 * copies, the other describes its runs. args->push = 0: the receiver
 * copies (process_vm_readv), the sender describes; push = 1: the sender
 * copies (process_vm_writev), the receiver describes. The kernel pins the
 * remote runs page by page, call by call, and walks local runs cheaply, so
 * the side whose runs are scattered should copy. The describing side sends
 * [UCX_DESC_HEAD + 2 n] uint64: { total bytes, n, push, then n x (address
 * in its process, length) } with the operation's tag; the copying side
 * probes for it (its size is the other side's business), copies straight
 * between the two sets of runs, and sends a zero-byte acknowledgement
 * (tag | NSP_TP_TAG_IOV_ACK), after which the describing side's request
 * completes and its buffer is free again. With 0 bytes nobody
 * acknowledges (nothing to protect). Other peers: UCX's iov datatype on
 * both sides.
 */
#define UCX_DESC_HEAD  3
/* Runs per process_vm_readv call, each side (the kernel's limit). */
#define UCX_PULL_BATCH (IOV_MAX < 1024 ? IOV_MAX : 1024)

_Static_assert(sizeof(nsp_tp_iov_t) == sizeof(ucp_dt_iov_t) &&
                   offsetof(nsp_tp_iov_t, buf) == offsetof(ucp_dt_iov_t, buffer) &&
                   offsetof(nsp_tp_iov_t, len) == offsetof(ucp_dt_iov_t, length),
               "nsp_tp_iov_t is laid out as ucp_dt_iov_t, so runs go to UCX as they are");

static size_t ucx_iov_bytes(const nsp_tp_iov_t *iov, size_t n)
{
    size_t total = 0;

    for (size_t k = 0; k < n; ++k) {
        total += iov[k].len;
    }
    return total;
}

/* Copy the byte stream of the src runs into that of the dst runs (the
 * self part; equal totals, checked by the caller). */
static void ucx_iov_copy(const nsp_tp_iov_t *dst, size_t nd, const nsp_tp_iov_t *src,
                         size_t ns)
{
    size_t i = 0, j = 0, di = 0, sj = 0; /* run, and offset in it, on each side */

    while (i < nd && j < ns) {
        size_t n = dst[i].len - di < src[j].len - sj ? dst[i].len - di : src[j].len - sj;
        if (n > 0) {
            memcpy((char *)dst[i].buf + di, (const char *)src[j].buf + sj, n);
        }
        di += n;
        sj += n;
        if (di == dst[i].len) {
            ++i;
            di = 0;
        }
        if (sj == src[j].len) {
            ++j;
            sj = 0;
        }
    }
}

/* Append [p, p + len) to v[*n], extending the last entry when adjacent. */
static void ucx_iovec_add(struct iovec *v, int *n, char *p, size_t len)
{
    if (*n > 0 && (char *)v[*n - 1].iov_base + v[*n - 1].iov_len == p) {
        v[*n - 1].iov_len += len;
        return;
    }
    v[*n].iov_base = p;
    v[*n].iov_len  = len;
    ++*n;
}

/* Copy between the op's runs and the peer's (runs[2 k] its address,
 * runs[2 k + 1] the length), reading them (pull) or writing them (push),
 * at most UCX_PULL_BATCH entries a side per call. */
static nsp_status_t ucx_pull_copy(ucx_req_t *req, ucx_op_t *op, const uint64_t *runs,
                                  size_t nruns)
{
    struct iovec local[UCX_PULL_BATCH], remote[UCX_PULL_BATCH];
    ucx_peer_t  *peer = ucx_peer(req->comm, op->peer);
    size_t       i = 0, j = 0, li = 0, rj = 0; /* run, and offset in it, on each side */

    while (i < op->niov && j < nruns) {
        int     nl = 0, nr = 0;
        size_t  want = 0;
        ssize_t got;
        while (nl < UCX_PULL_BATCH && nr < UCX_PULL_BATCH && i < op->niov && j < nruns) {
            size_t llen = op->iov[i].len - li, rlen = (size_t)runs[2 * j + 1] - rj;
            size_t len  = llen < rlen ? llen : rlen;
            if (len > 0) {
                ucx_iovec_add(local, &nl, (char *)op->iov[i].buf + li, len);
                ucx_iovec_add(remote, &nr, (char *)(uintptr_t)runs[2 * j] + rj, len);
                want += len;
            }
            li += len;
            rj += len;
            if (li == op->iov[i].len) {
                ++i;
                li = 0;
            }
            if (rj == (size_t)runs[2 * j + 1]) {
                ++j;
                rj = 0;
            }
        }
        if (want == 0) {
            continue;
        }
        got = op->push ? process_vm_writev(peer->pid, local, (unsigned long)nl, remote,
                                           (unsigned long)nr, 0)
                       : process_vm_readv(peer->pid, local, (unsigned long)nl, remote,
                                          (unsigned long)nr, 0);
        if (got != (ssize_t)want) {
            int err = got < 0 ? errno : EFAULT;
            return nsp_error(err == ESRCH ? NSP_ERR_PEER_FAILED : NSP_ERR_BACKEND,
                             "ucx %s (tag 0x%08x): copying %zu bytes %s rank %d (pid %d) "
                             "with %s failed: %s",
                             req->what, req->tag, want, op->push ? "to" : "from",
                             req->comm->base.world_rank0 + op->peer, (int)peer->pid,
                             op->push ? "process_vm_writev" : "process_vm_readv",
                             got < 0 ? strerror(err) : "short copy");
        }
        req->comm->world->stats.iov_copy_bytes += want;
    }
    return NSP_OK;
}

/* The copying side got the peer's descriptor (op->desc, op->info.length
 * bytes): check it, copy, acknowledge. */
static nsp_status_t ucx_pull_land(ucx_req_t *req, ucx_op_t *op)
{
    const uint64_t *d     = op->desc;
    size_t          len   = op->info.length;
    ucx_peer_t     *peer  = ucx_peer(req->comm, op->peer);
    int             world = req->comm->base.world_rank0 + op->peer;
    ucp_request_param_t param;
    void           *r;

    if (len < UCX_DESC_HEAD * sizeof(uint64_t) ||
        len != (UCX_DESC_HEAD + 2 * (size_t)d[1]) * sizeof(uint64_t)) {
        return nsp_error(NSP_ERR_MISMATCH, "ucx %s (tag 0x%08x): rank %d sent %zu bytes where "
                         "a descriptor of runs was expected; ranks disagree on the operation",
                         req->what, req->tag, world, len);
    }
    if (d[2] != (uint64_t)op->push) {
        return nsp_error(NSP_ERR_MISMATCH, "ucx %s (tag 0x%08x): rank %d has the %s copy and "
                         "this rank the %s: ranks disagree on push", req->what, req->tag,
                         world, d[2] ? "receiver" : "sender", op->push ? "sender" : "receiver");
    }
    if (d[0] != op->bytes) {
        int me = req->comm->base.world_rank0 + req->comm->base.rank;
        if (d[0] > 0) { /* the peer waits for a zero-byte ack: one byte fails it too */
            static const char nack = 1;
            memset(&param, 0, sizeof(param));
            r = ucp_tag_send_nbx(peer->ep, &nack, 1,
                                 ucx_tag(req->comm, req->comm->base.rank,
                                         req->tag | NSP_TP_TAG_IOV_ACK),
                                 &param);
            op->ucp_req = UCS_PTR_IS_PTR(r) ? r : NULL; /* freed with the request */
            op->is_recv = 0;
        }
        op->replied = 1; /* the peer was told, or waits for nothing */
        return nsp_error(NSP_ERR_MISMATCH,
                         "ucx %s (tag 0x%08x): rank %d sent %llu bytes but rank %d expected "
                         "%zu; ranks disagree on sizes or layouts",
                         req->what, req->tag, op->push ? me : world,
                         (unsigned long long)(op->push ? op->bytes : d[0]),
                         op->push ? world : me, (size_t)(op->push ? d[0] : op->bytes));
    }
    NSP_CHECK(ucx_pull_copy(req, op, d + UCX_DESC_HEAD, (size_t)d[1]));
    ++req->comm->world->stats.iov_copies;
    op->replied = 1; /* copied: nothing more touches the peer's runs */
    op->is_recv = 0; /* from here on: the acknowledgement, a send */
    if (op->bytes == 0) {
        return ucx_op_complete(req, op);
    }
    memset(&param, 0, sizeof(param));
    r = ucp_tag_send_nbx(peer->ep, NULL, 0,
                         ucx_tag(req->comm, req->comm->base.rank, req->tag | NSP_TP_TAG_IOV_ACK),
                         &param);
    ucx_count_send(req->comm->world, peer, 0, r);
    op->pull = UCX_PULL_ACK;
    return ucx_op_posted(req, op, r);
}

/* Advance a pull one stage as far as it goes. */
static nsp_status_t ucx_pull_test(ucx_req_t *req, ucx_op_t *op)
{
    ucx_world_t        *w = req->comm->world;
    ucp_request_param_t param;
    ucp_tag_message_h   msg;
    ucs_status_t        st;
    void               *r;

    if (op->pull == UCX_PULL_PROBE) {
        msg = ucp_tag_probe_nb(w->worker, ucx_tag(req->comm, op->peer, req->tag),
                               (ucp_tag_t)-1, 1, &op->info);
        if (msg == NULL) {
            st = ucx_failed(ucx_peer(req->comm, op->peer));
            return st == UCS_OK ? NSP_INPROGRESS : ucx_op_failed(req, op, st);
        }
        op->desc = malloc(op->info.length > 0 ? op->info.length : 1);
        if (op->desc == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "ucx %s: no memory for a descriptor of %zu "
                             "bytes", req->what, op->info.length);
        }
        memset(&param, 0, sizeof(param));
        r = ucp_tag_msg_recv_nbx(w->worker, op->desc, op->info.length, msg, &param);
        if (UCS_PTR_IS_ERR(r)) {
            op->done = 1;
            return ucx_op_failed(req, op, UCS_PTR_STATUS(r));
        }
        op->ucp_req = r;
        op->pull    = UCX_PULL_DESC;
    }
    if (op->pull == UCX_PULL_DESC || op->pull == UCX_PULL_ACK) {
        if (op->ucp_req != NULL) {
            nsp_status_t s = ucx_op_settle(req, op, ucp_request_check_status(op->ucp_req));
            if (s != NSP_OK) {
                return s; /* in progress, or failed */
            }
        }
        if (op->pull == UCX_PULL_ACK) {
            return ucx_op_complete(req, op);
        }
        NSP_CHECK(ucx_pull_land(req, op));
    }
    return op->done ? NSP_OK : NSP_INPROGRESS;
}

/* The copy between this rank's runs and cma peer `peer`'s (the peer's
 * descriptor is probed for when the request is tested). */
static void ucx_post_pull(ucx_req_t *req, const nsp_tp_iov_t *iov, size_t n, int peer, int push)
{
    ucx_op_t *op = &req->ops[req->nops++];

    op->peer    = peer;
    op->is_recv = 1; /* first it receives the descriptor */
    op->bytes   = ucx_iov_bytes(iov, n);
    op->pull    = UCX_PULL_PROBE;
    op->push    = push;
    op->iov     = iov;
    op->niov    = n;
}

/* To cma peer `dst`: the descriptor of this rank's runs, and (when they
 * hold bytes) the receive of its acknowledgement. */
static nsp_status_t ucx_post_desc(ucx_req_t *req, const nsp_tp_iov_t *iov, size_t n, int dst,
                                  int push)
{
    size_t       total = ucx_iov_bytes(iov, n), m = 0;
    uint64_t    *d = malloc((UCX_DESC_HEAD + 2 * n) * sizeof(uint64_t));
    nsp_status_t status;

    if (d == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx %s: no memory for a descriptor of %zu runs",
                         req->what, n);
    }
    for (size_t k = 0; k < n; ++k) {
        if (iov[k].len > 0) {
            d[UCX_DESC_HEAD + 2 * m]     = (uint64_t)(uintptr_t)iov[k].buf;
            d[UCX_DESC_HEAD + 2 * m + 1] = iov[k].len;
            ++m;
        }
    }
    d[0]   = total;
    d[1]   = m;
    d[2]   = (uint64_t)push;
    status = ucx_post_send(req, d, (UCX_DESC_HEAD + 2 * m) * sizeof(uint64_t), dst);
    req->ops[req->nops - 1].desc = d; /* the op owns it, posted or not */
    if (status == NSP_OK && total > 0) {
        status = ucx_post_recv_tag(req, NULL, 0, dst, req->tag | NSP_TP_TAG_IOV_ACK);
        req->ops[req->nops - 1].ack = 1;
    }
    return status;
}

/* UCX's iov datatype, one side: runs sent to `peer` (recv = 0) or received
 * from it (recv = 1). */
static nsp_status_t ucx_post_iov(ucx_req_t *req, const nsp_tp_iov_t *iov, size_t n, int peer,
                                 int recv)
{
    ucx_op_t           *op = &req->ops[req->nops++];
    ucx_world_t        *w  = req->comm->world;
    ucx_peer_t         *pp = ucx_peer(req->comm, peer);
    ucp_request_param_t param;
    void               *r;

    op->peer    = peer;
    op->is_recv = recv;
    op->bytes   = ucx_iov_bytes(iov, n);
    if (!recv && ucx_failed(pp) != UCS_OK) {
        op->done = 1;
        return ucx_op_failed(req, op, ucx_failed(pp));
    }
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype     = n > 0 ? ucp_dt_make_iov() : ucp_dt_make_contig(1);
    if (recv) {
        param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL; /* as ucx_post_recv_tag */
        r = ucp_tag_recv_nbx(w->worker, n > 0 ? (void *)iov : NULL, n,
                             ucx_tag(req->comm, peer, req->tag), (ucp_tag_t)-1, &param);
        ++w->stats.recvs;
    } else {
        r = ucp_tag_send_nbx(pp->ep, n > 0 ? (const void *)iov : NULL, n,
                             ucx_tag(req->comm, req->comm->base.rank, req->tag), &param);
        ucx_count_send(w, pp, op->bytes, r);
        ++w->stats.iov_ucx;
    }
    return ucx_op_posted(req, op, r);
}

static nsp_status_t ucx_iov_check(const nsp_tp_comm_t *base, const nsp_tp_alltoallv_iov_t *a,
                                  uint32_t tag, nsp_request_t **out)
{
    int me = base->rank, n = base->size;

    if (a == NULL || a->sfirst == NULL || a->rfirst == NULL || out == NULL ||
        (a->sfirst[n] > 0 && a->send == NULL) || (a->rfirst[n] > 0 && a->recv == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ucx alltoallv_iov: NULL argument");
    }
    if (tag & NSP_TP_TAG_IOV_ACK) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ucx alltoallv_iov: tag 0x%08x has bit 0x%08x "
                         "set, which the transport keeps for its acknowledgements",
                         tag, NSP_TP_TAG_IOV_ACK);
    }
    for (int j = 0; j < n; ++j) {
        if (a->sfirst[j + 1] < a->sfirst[j] || a->rfirst[j + 1] < a->rfirst[j]) {
            return nsp_error(NSP_ERR_INVALID_ARG, "ucx alltoallv_iov: the first runs of peer "
                             "%d and %d are out of order", j, j + 1);
        }
    }
    if (ucx_iov_bytes(a->send + a->sfirst[me], a->sfirst[me + 1] - a->sfirst[me]) !=
        ucx_iov_bytes(a->recv + a->rfirst[me], a->rfirst[me + 1] - a->rfirst[me])) {
        return nsp_error(NSP_ERR_MISMATCH, "ucx alltoallv_iov: rank %d sends itself %zu bytes "
                         "but expects %zu", base->world_rank0 + me,
                         ucx_iov_bytes(a->send + a->sfirst[me], a->sfirst[me + 1] - a->sfirst[me]),
                         ucx_iov_bytes(a->recv + a->rfirst[me], a->rfirst[me + 1] - a->rfirst[me]));
    }
    return NSP_OK;
}

static nsp_status_t ucx_alltoallv_iov_post(nsp_tp_comm_t *base, const nsp_tp_alltoallv_iov_t *a,
                                           uint32_t tag, void *stream, nsp_request_t **out)
{
    ucx_comm_t  *comm = (ucx_comm_t *)base;
    int          n = base->size, me = base->rank;
    ucx_req_t   *req = NULL;
    nsp_status_t status;

    NSP_CHECK(ucx_check_stream("alltoallv_iov", stream));
    NSP_CHECK(ucx_iov_check(base, a, tag, out));
    /* a cma pair: descriptor + acknowledgement one way, the copy the other */
    NSP_CHECK(ucx_req_alloc(comm, "alltoallv_iov", tag, 3 * (n - 1), &req));
    ucx_iov_copy(a->recv + a->rfirst[me], a->rfirst[me + 1] - a->rfirst[me],
                 a->send + a->sfirst[me], a->sfirst[me + 1] - a->sfirst[me]);
    for (int k = 1; k < n; ++k) { /* receives first, staggered as ucx_alltoallv_post */
        int                 src = (me - k + n) % n;
        const nsp_tp_iov_t *iov = a->recv + a->rfirst[src];
        size_t              cnt = a->rfirst[src + 1] - a->rfirst[src];
        if (!ucx_peer(comm, src)->cma) {
            NSP_CHECK_GOTO(ucx_post_iov(req, iov, cnt, src, 1), status, err_free_req);
        } else if (a->push) {
            NSP_CHECK_GOTO(ucx_post_desc(req, iov, cnt, src, 1), status, err_free_req);
        } else {
            ucx_post_pull(req, iov, cnt, src, 0);
        }
    }
    for (int k = 1; k < n; ++k) {
        int                 dst = (me + k) % n;
        const nsp_tp_iov_t *iov = a->send + a->sfirst[dst];
        size_t              cnt = a->sfirst[dst + 1] - a->sfirst[dst];
        if (!ucx_peer(comm, dst)->cma) {
            NSP_CHECK_GOTO(ucx_post_iov(req, iov, cnt, dst, 0), status, err_free_req);
        } else if (a->push) {
            ucx_post_pull(req, iov, cnt, dst, 1);
        } else {
            NSP_CHECK_GOTO(ucx_post_desc(req, iov, cnt, dst, 0), status, err_free_req);
        }
    }
    *out = ucx_req_posted(req);
    return NSP_OK;
err_free_req:
    ucx_req_free(&req->base);
    return status;
}

static nsp_status_t ucx_progress(nsp_tp_comm_t *base, int *idle)
{
    ucx_comm_t *comm = (ucx_comm_t *)base;
    unsigned    n;

    n = ucx_progress_counted(comm->world);

    if (idle != NULL) {
        *idle = n == 0;
    }
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* World                                                                    */
/* ------------------------------------------------------------------------ */

static nsp_status_t ucx_status(ucs_status_t st, const char *call)
{
    return nsp_error(NSP_ERR_BACKEND, "ucx: %s failed: %s", call, ucs_status_string(st));
}

static nsp_status_t ucx_open(ucx_world_t *w, int multi)
{
    ucp_config_t       *config;
    ucp_params_t        params;
    ucp_worker_params_t wparams;
    ucs_status_t        st;

    /* NULL env prefix: UCX_TLS, UCX_NET_DEVICES ... are read as usual. */
    st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        return ucx_status(st, "ucp_config_read (check the UCX_* environment)");
    }
    /* A multi-threaded worker's lock: a mutex, not a spinlock (the rank and
     * the progress thread share oversubscribed cores); UCX_USE_MT_MUTEX wins. */
    if (multi && getenv("UCX_USE_MT_MUTEX") == NULL) {
        ucp_config_modify(config, "USE_MT_MUTEX", "y");
    }
    memset(&params, 0, sizeof(params));
    params.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features          = UCP_FEATURE_TAG;
    params.estimated_num_eps = (size_t)w->nranks;
    st                       = ucp_init(&params, config, &w->context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        return ucx_status(st, "ucp_init");
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = multi ? UCS_THREAD_MODE_MULTI : UCS_THREAD_MODE_SINGLE;
    st                  = ucp_worker_create(w->context, &wparams, &w->worker);
    if (st != UCS_OK) {
        ucp_cleanup(w->context);
        return ucx_status(st, "ucp_worker_create");
    }
    return NSP_OK;
}

/* 1 if the worker serializes calls from several threads itself. */
static int ucx_worker_is_multi(ucp_worker_h worker)
{
    ucp_worker_attr_t attr;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    return ucp_worker_query(worker, &attr) == UCS_OK && attr.thread_mode == UCS_THREAD_MODE_MULTI;
}

static void ucx_host_key(char key[UCX_HOST_KEY_BYTES]);

/*
 * NSPCOMM_PROGRESS_THREAD: auto (default: on when a peer is on another host,
 * where tcp moves bytes only while someone progresses), on, off. Collective
 * (an allgather of host keys) whatever the setting. *want = 1 for a thread.
 */
static nsp_status_t ucx_want_thread(nsp_bootstrap_t *bs, int *want)
{
    const char *text = getenv("NSPCOMM_PROGRESS_THREAD");
    char        mine[UCX_HOST_KEY_BYTES];
    char       *all = malloc((size_t)bs->nranks * UCX_HOST_KEY_BYTES);
    nsp_status_t status;

    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for %d host keys", bs->nranks);
    }
    ucx_host_key(mine);
    status = nsp_bootstrap_allgather(bs, mine, all, UCX_HOST_KEY_BYTES);
    *want  = 0;
    for (int r = 0; status == NSP_OK && r < bs->nranks; ++r) {
        *want |= memcmp(all + (size_t)r * UCX_HOST_KEY_BYTES, mine, UCX_HOST_KEY_BYTES) != 0;
    }
    free(all);
    if (text != NULL && (strcmp(text, "on") == 0 || strcmp(text, "1") == 0)) {
        *want = 1;
    } else if (text != NULL && (strcmp(text, "off") == 0 || strcmp(text, "0") == 0)) {
        *want = 0;
    } else if (text != NULL && text[0] != '\0' && strcmp(text, "auto") != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "NSPCOMM_PROGRESS_THREAD=%s: use auto, on or off",
                         text);
    }
    return status;
}

/* Start the progress thread when wanted and the worker allows it. */
static nsp_status_t ucx_start_thread(ucx_world_t *w, int want)
{
    if (!want) {
        return NSP_OK;
    }
    if (!ucx_worker_is_multi(w->worker)) {
        NSP_WARN("ucx: this UCX has no multi-threaded workers: no progress thread (tcp moves "
                 "bytes only while the rank calls into nspcomm)");
        return NSP_OK;
    }
    NSP_DEBUG("ucx: progress thread on");
    return nsp_ucx_progress_start(w->worker, &w->progress);
}

/* This host as UCX sees it: hostname and kernel boot id (not the
 * NSPCOMM_HOST_ID override, which only fakes placement). */
static void ucx_host_key(char key[UCX_HOST_KEY_BYTES])
{
    char  host[64] = "";
    char  boot[40] = "";
    FILE *f        = fopen("/proc/sys/kernel/random/boot_id", "r");

    gethostname(host, sizeof(host) - 1);
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL) {
            boot[0] = '\0';
        }
        boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    memset(key, 0, UCX_HOST_KEY_BYTES);
    snprintf(key, UCX_HOST_KEY_BYTES, "%s/%s", host, boot);
}

/*
 * Which peers this rank pulls scattered runs from (alltoallv_iov_post):
 * it reads the probe word of every peer on this host in its pid namespace
 * with process_vm_readv (which needs the right to ptrace it), then the
 * ranks allgather whether all their reads worked; a pair pulls when both
 * did. NSPCOMM_UCX_CMA=off (this rank's pairs go through UCX's iov
 * datatype instead) or auto (the default). Collective over the bootstrap.
 */
static nsp_status_t ucx_cma_agree(ucx_world_t *w, nsp_bootstrap_t *bs)
{
    const char    *env  = getenv("NSPCOMM_UCX_CMA");
    unsigned char  mine = 1, *all = malloc((size_t)w->nranks);
    int            npull = 0;
    nsp_status_t   status;

    if (all == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for %d flags", w->nranks);
    }
    if (env != NULL && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0)) {
        mine = 0;
    } else if (env != NULL && env[0] != '\0' && strcmp(env, "auto") != 0) {
        NSP_WARN("NSPCOMM_UCX_CMA=%s: use auto or off; using auto", env);
    }
    for (int r = 0; mine && r < w->nranks; ++r) {
        uint64_t     v = 0;
        struct iovec l = {&v, sizeof(v)}, rm = {(void *)(uintptr_t)w->peers[r].cma_probe,
                                                 sizeof(v)};
        if (r != bs->rank && w->peers[r].watch_pid &&
            (process_vm_readv(w->peers[r].pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof(v) ||
             v != UCX_CMA_MAGIC)) {
            NSP_DEBUG("ucx: cannot read world rank %d (pid %d) with process_vm_readv: %s",
                      r, (int)w->peers[r].pid, strerror(errno));
            mine = 0;
        }
    }
    status = nsp_bootstrap_allgather(bs, &mine, all, 1);
    for (int r = 0; status == NSP_OK && r < w->nranks; ++r) {
        w->peers[r].cma = r != bs->rank && w->peers[r].watch_pid && mine && all[r];
        npull += w->peers[r].cma;
    }
    free(all);
    NSP_DEBUG("ucx: scattered runs pulled from %d peer(s) with process_vm_readv", npull);
    return status;
}

/*
 * Allgather what every rank publishes: first fixed-size ucx_rank_info_t
 * (address length, pid, host), then the worker addresses padded to the
 * longest. *all gets [nranks][*stride] address bytes, owned by the caller.
 */
static nsp_status_t ucx_exchange_addresses(ucx_world_t *w, nsp_bootstrap_t *bs, char **all,
                                           size_t *stride)
{
    ucp_address_t   *addr;
    size_t           len;
    ucx_rank_info_t  mine = {0};
    ucx_rank_info_t *infos = NULL;
    uint64_t         max   = 0;
    char            *padded = NULL, *table = NULL;
    ucs_status_t     st;
    nsp_status_t     status;

    st = ucp_worker_get_address(w->worker, &addr, &len);
    if (st != UCS_OK) {
        return ucx_status(st, "ucp_worker_get_address");
    }
    mine.address_len = len;
    mine.pid         = (int64_t)getpid();
    mine.cma_probe   = (uint64_t)(uintptr_t)&w->cma_probe;
    ucx_host_key(mine.host);
    /* Containers may share the host but not the pid numbering. */
    if (readlink("/proc/self/ns/pid", mine.pidns, sizeof(mine.pidns) - 1) < 0) {
        mine.pidns[0] = '\0';
    }
    infos = calloc((size_t)w->nranks, sizeof(*infos));
    if (infos == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for %d rank infos", w->nranks);
        goto out_release;
    }
    NSP_CHECK_GOTO(nsp_bootstrap_allgather(bs, &mine, infos, sizeof(mine)), status, out_release);
    for (int r = 0; r < w->nranks; ++r) {
        max                 = infos[r].address_len > max ? infos[r].address_len : max;
        w->peers[r].world   = w;
        w->peers[r].rank    = r;
        w->peers[r].pid     = (pid_t)infos[r].pid;
        w->peers[r].cma_probe = infos[r].cma_probe;
        w->peers[r].same_host = memcmp(infos[r].host, mine.host, UCX_HOST_KEY_BYTES) == 0;
        w->peers[r].watch_pid = w->peers[r].same_host && mine.pidns[0] != '\0' &&
                                memcmp(infos[r].pidns, mine.pidns, sizeof(mine.pidns)) == 0;
    }
    padded = calloc(1, (size_t)max);
    table  = malloc((size_t)max * (size_t)w->nranks);
    if (padded == NULL || table == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for %d addresses of %llu bytes",
                           w->nranks, (unsigned long long)max);
        goto out_release;
    }
    memcpy(padded, addr, len);
    NSP_CHECK_GOTO(nsp_bootstrap_allgather(bs, padded, table, (size_t)max), status, out_release);
    *all    = table;
    *stride = (size_t)max;
    table   = NULL;
    status  = NSP_OK;
out_release:
    free(table);
    free(padded);
    free(infos);
    ucp_worker_release_address(w->worker, addr);
    return status;
}

/* NSPCOMM_UCX_ERR_MODE: which peers get UCX peer error handling. */
typedef enum { UCX_ERR_AUTO, UCX_ERR_PEER, UCX_ERR_NONE } ucx_err_choice_t;

static nsp_status_t ucx_err_choice(ucx_err_choice_t *choice)
{
    const char *text = getenv("NSPCOMM_UCX_ERR_MODE");

    *choice = UCX_ERR_AUTO;
    if (text == NULL || text[0] == '\0' || strcmp(text, "auto") == 0) {
        return NSP_OK;
    }
    if (strcmp(text, "peer") == 0) {
        *choice = UCX_ERR_PEER;
    } else if (strcmp(text, "none") == 0) {
        *choice = UCX_ERR_NONE;
    } else {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "NSPCOMM_UCX_ERR_MODE=%s: use auto (default: none on this host, peer "
                         "across hosts), peer (UCX detects failures; on one host that means "
                         "tcp) or none",
                         text);
    }
    return NSP_OK;
}

static nsp_status_t ucx_connect(ucx_world_t *w, int me, const char *table, size_t stride)
{
    ucx_err_choice_t choice;

    NSP_CHECK(ucx_err_choice(&choice));
    for (int r = 0; r < w->nranks; ++r) {
        ucp_ep_params_t params;
        ucs_status_t    st;
        int             peer_mode;

        w->peers[r].rndv_thresh = SIZE_MAX; /* learnt once wired up (ucx_mark_flush) */
        if (r == me) {
            continue;
        }
        peer_mode = choice == UCX_ERR_PEER || (choice == UCX_ERR_AUTO && !w->peers[r].same_host);
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.address         = (const ucp_address_t *)(const void *)(table + (size_t)r * stride);
        params.err_mode        = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
        w->peers[r].peer_mode  = peer_mode;
        params.err_handler.cb  = ucx_on_peer_error;
        params.err_handler.arg = &w->peers[r];
        st                     = ucp_ep_create(w->worker, &params, &w->peers[r].ep);
        if (st != UCS_OK) {
            return nsp_error(NSP_ERR_BACKEND, "ucx: ucp_ep_create to rank %d failed: %s (check "
                                              "UCX_TLS: it needs a transport that reaches "
                                              "every rank)",
                             r, ucs_status_string(st));
        }
    }
    return NSP_OK;
}

/* Close every endpoint: flush where the peer is alive, force where it failed
 * (only allowed with peer error handling), and give up waiting after a
 * bounded time. An endpoint without error handling to a dead peer is left
 * to ucp_worker_destroy: flushing it could wait for nothing. */
static void ucx_close_endpoints(ucx_world_t *w, double timeout_s)
{
    void  **pending = calloc((size_t)w->nranks, sizeof(*pending));
    double  limit   = timeout_s < UCX_CLOSE_MAX_S ? timeout_s : UCX_CLOSE_MAX_S;
    double  deadline = nsp_now_s() + limit;
    int     left    = 0;
    int     any_failed = 0;

    /* After any failure the world is broken (transport.h): sends to live
     * peers may still sit in UCX's protocol queues, and a flushing close
     * leaves them there, which UCX 1.13 asserts on in ucp_worker_destroy.
     * So once anything failed, force-close every endpoint that allows it. */
    any_failed = w->abandoned; /* a timed-out request left sends queued */
    for (int r = 0; r < w->nranks; ++r) {
        any_failed |= (ucx_failed(&w->peers[r]) != UCS_OK);
    }
    for (int r = 0; r < w->nranks; ++r) {
        ucp_request_param_t param;
        void               *req;
        if (w->peers[r].ep == NULL ||
            (ucx_failed(&w->peers[r]) != UCS_OK && !w->peers[r].peer_mode)) {
            continue;
        }
        memset(&param, 0, sizeof(param));
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags        = (any_failed && w->peers[r].peer_mode) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        req                = ucp_ep_close_nbx(w->peers[r].ep, &param);
        w->peers[r].ep     = NULL;
        if (req != NULL && !UCS_PTR_IS_ERR(req)) {
            if (pending != NULL) {
                pending[r] = req;
                ++left;
            } else {
                ucp_request_free(req);
            }
        }
    }
    while (left > 0 && nsp_now_s() < deadline) {
        if (ucp_worker_progress(w->worker) == 0) {
            sched_yield();
        }
        for (int r = 0; r < w->nranks; ++r) {
            if (pending[r] != NULL && ucp_request_check_status(pending[r]) != UCS_INPROGRESS) {
                ucp_request_free(pending[r]);
                pending[r] = NULL;
                --left;
            }
        }
    }
    if (left > 0) {
        NSP_DEBUG("ucx: %d endpoints did not finish closing within %.1f s; dropping them", left,
                  limit);
        for (int r = 0; r < w->nranks; ++r) {
            if (pending[r] != NULL) {
                ucp_request_free(pending[r]);
            }
        }
    }
    free(pending);
}

static void ucx_region_release(ucx_world_t *w, ucx_region_t *reg);

/* Regions with memory mapped, over every world of the process: worlds in
 * different threads map and unmap concurrently, so it is atomic. */
static int ucx_regions_live;

nsp_status_t nsp_tp_ucx_stats(nsp_tp_comm_t *comm, nsp_tp_ucx_stats_t *out)
{
    if (comm == NULL || out == NULL || comm->ops != ucx_ops()) {
        return NSP_ERR_NOT_FOUND; /* not a UCX communicator: nothing counted, nothing logged */
    }
    *out = ((ucx_comm_t *)comm)->world->stats;
    return NSP_OK;
}

nsp_status_t nsp_tp_ucx_regions_live(int *n)
{
    *n = __atomic_load_n(&ucx_regions_live, __ATOMIC_RELAXED);
    return NSP_OK;
}

/* Stop the progress thread; INFO: where this rank's progress went (the
 * thread's CPU, and how much of its polling found bytes to move while the
 * rank computed, against the rank's own polls). */
static void ucx_stop_thread(ucx_world_t *w)
{
    nsp_ucx_progress_stats_t st;

    if (w->progress == NULL) {
        return;
    }
    nsp_ucx_progress_stop(w->progress, &st);
    w->progress = NULL;
    NSP_INFO("ucx: progress thread: %.1f ms CPU, %llu of %llu polls moved bytes; the rank's "
             "own polls: %llu of %llu moved bytes, %llu found the thread inside",
             1e3 * st.thread_cpu_s, (unsigned long long)st.thread_moved,
             (unsigned long long)st.thread_polls, (unsigned long long)st.rank_moved,
             (unsigned long long)st.rank_polls, (unsigned long long)st.rank_skipped);
}

/* Orphans whose copier has not answered and lives; the others released. */
static int ucx_orphans_left(ucx_world_t *w, int check_pids)
{
    int left = 0;

    for (int i = 0; i < w->norphans; ++i) {
        ucx_orphan_t *o    = &w->orphans[i];
        ucx_peer_t   *peer = &w->peers[o->rank];
        if (o->ucp_req == NULL) {
            continue;
        }
        if (check_pids) {
            ucx_mark_if_exited(peer);
        }
        left += ucx_awaiting(&o->ucp_req, peer); /* buf: freed after the worker */
    }
    return left;
}

/* Before the world goes: wait (within timeout_s) until every copier of a
 * freed request's runs answered or failed, so that once nsp_comm_destroy
 * returns no peer copies into or out of this rank's buffers; past the
 * timeout say so, cancel, and go. */
static void ucx_wait_orphans(ucx_world_t *w, double timeout_s)
{
    double start = nsp_now_s(), last_check = start;

    for (;;) {
        int check = nsp_now_s() - last_check > UCX_LIVENESS_S; /* pids: now and then */
        int left;
        if (check) {
            last_check = nsp_now_s();
        }
        if ((left = ucx_orphans_left(w, check)) == 0) {
            break;
        }
        if (nsp_now_s() - start > timeout_s) {
            NSP_WARN("ucx: destroying the world with %d operation(s) of freed exchanges "
                     "still unanswered after %.1f s (NSPCOMM_TIMEOUT): a same-host peer may "
                     "still copy into or out of their buffers", left, timeout_s);
            break;
        }
        if (nsp_ucx_progress_rank(w->progress, w->worker) == 0) {
            sched_yield();
        }
    }
    for (int i = 0; i < w->norphans; ++i) {
        if (w->orphans[i].ucp_req != NULL) { /* past the timeout */
            ucp_request_cancel(w->worker, w->orphans[i].ucp_req);
            ucp_request_free(w->orphans[i].ucp_req);
            w->abandoned = 1; /* close by force (ucx_close_endpoints) */
            w->orphans[i].ucp_req = NULL;
        }
    }
}

static void ucx_world_free(ucx_world_t *w, double timeout_s)
{
    if (w->worker != NULL && w->norphans > 0) {
        ucx_wait_orphans(w, timeout_s);
    }
    while (w->regions != NULL) { /* regions the caller did not free */
        ucx_region_t *reg = w->regions;
        w->regions        = reg->next;
        ucx_region_release(w, reg);
    }
    ucx_stop_thread(w); /* before UCX is closed under it */
    if (w->peers != NULL) {
        ucx_close_endpoints(w, timeout_s);
    }
    if (w->worker != NULL) {
        ucp_worker_destroy(w->worker);
    }
    for (int i = 0; i < w->norphans; ++i) {
        free(w->orphans[i].buf); /* descriptors UCX may have read until now */
    }
    free(w->orphans);
    if (w->context != NULL) {
        ucp_cleanup(w->context);
    }
    free(w->peers);
    free(w);
}

/* Mark the peers ucx_flush_owed flushes: on this host and reached over
 * shared memory alone (the lanes UCX chose, transport/ucx_report.c); and
 * learn each endpoint's rendezvous threshold (for w->stats). */
static void ucx_mark_flush(ucx_world_t *w)
{
    char lanes[256];

    for (int r = 0; r < w->nranks; ++r) {
        if (w->peers[r].ep != NULL) {
            nsp_ucx_ep_tag_protocols(w->peers[r].ep, lanes, sizeof(lanes));
            w->peers[r].rndv_thresh = nsp_ucx_rndv_thresh_of(lanes);
            NSP_DEBUG("ucx: tag sends to world rank %d by size: %s", r, lanes);
        }
        if (w->peers[r].ep != NULL && w->peers[r].same_host) {
            nsp_ucx_ep_lanes(w->peers[r].ep, lanes, sizeof(lanes));
            w->peers[r].flush_owed = strstr(lanes, "memory") != NULL &&
                                     strstr(lanes, "tcp") == NULL;
        }
    }
}

/* INFO: which UCX transports reach each peer (transport/ucx_report.c). */
static void ucx_report(const ucx_world_t *w, int me)
{
    ucp_ep_h *eps  = calloc((size_t)w->nranks, sizeof(*eps));
    int      *same = calloc((size_t)w->nranks, sizeof(*same));

    if (eps != NULL && same != NULL && nsp_log_enabled(NSP_LOG_INFO)) {
        for (int r = 0; r < w->nranks; ++r) {
            eps[r]  = w->peers[r].ep;
            same[r] = w->peers[r].same_host;
        }
        nsp_ucx_report(me, w->nranks, eps, same);
    }
    free(eps);
    free(same);
}

static nsp_status_t ucx_world_create(nsp_bootstrap_t *bs, const nsp_tp_params_t *params,
                                     nsp_tp_comm_t **out)
{
    ucx_world_t *w;
    ucx_comm_t  *comm;
    char        *table  = NULL;
    size_t       stride = 0;
    nsp_status_t status;
    int          thread = 0;

    if (bs->nranks > UCX_MAX_RANKS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ucx: %d ranks; the UCX backend supports at most %d",
                         bs->nranks, UCX_MAX_RANKS);
    }
    w    = calloc(1, sizeof(*w));
    comm = calloc(1, sizeof(*comm));
    if (w == NULL || comm == NULL) {
        free(w);
        free(comm);
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for the world");
    }
    w->nranks       = bs->nranks;
    w->next_context = 1; /* 0 is the world */
    w->cma_probe    = UCX_CMA_MAGIC;
    w->peers        = calloc((size_t)bs->nranks, sizeof(*w->peers));
    if (w->peers == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "ucx: no memory for %d peers", bs->nranks);
        goto err_free_comm;
    }
    NSP_CHECK_GOTO(ucx_want_thread(bs, &thread), status, err_free_comm);
    NSP_CHECK_GOTO(ucx_open(w, thread), status, err_free_comm);
    NSP_CHECK_GOTO(ucx_exchange_addresses(w, bs, &table, &stride), status, err_free_world);
    NSP_CHECK_GOTO(ucx_cma_agree(w, bs), status, err_free_world);
    NSP_CHECK_GOTO(ucx_connect(w, bs->rank, table, stride), status, err_free_world);
    comm->base.ops         = ucx_ops();
    comm->base.rank        = bs->rank;
    comm->base.size        = bs->nranks;
    comm->base.world_rank0 = 0;
    comm->base.timeout_s   = params->timeout_s;
    comm->world            = w;
    comm->owns_world       = 1;
    comm->context          = 0;
    /* Wire every endpoint up now and prove all ranks reached this point. */
    NSP_CHECK_GOTO(nsp_tp_barrier_by_alltoallv(&comm->base), status, err_free_world);
    free(table);
    table = NULL;
    ucx_report(w, bs->rank);
    ucx_mark_flush(w);
    NSP_CHECK_GOTO(ucx_start_thread(w, thread), status, err_free_world);
    NSP_DEBUG("ucx: world of %d ranks up (rank %d, address %zu bytes)", w->nranks, bs->rank,
              stride);
    *out = &comm->base;
    return NSP_OK;
err_free_world:
    free(table);
    ucx_world_free(w, params->timeout_s);
    free(comm);
    return status;
err_free_comm:
    free(w->peers);
    free(w);
    free(comm);
    return status;
}

static nsp_status_t ucx_world_wrap(void *native, const nsp_tp_params_t *params,
                                   nsp_tp_comm_t **world)
{
    (void)native;
    (void)params;
    (void)world;
    return nsp_error(NSP_ERR_UNSUPPORTED,
                     "ucx: wrapping a native communicator is not supported (only the nccl "
                     "backend wraps an ncclComm_t)");
}

static nsp_status_t ucx_split(nsp_tp_comm_t *pbase, int rank0, int size, nsp_tp_comm_t **out)
{
    ucx_comm_t *parent = (ucx_comm_t *)pbase;
    ucx_comm_t *sub;
    uint32_t    context;

    if (out == NULL || size < 1 || rank0 < 0 || rank0 > pbase->rank ||
        pbase->rank >= rank0 + size || rank0 + size > pbase->size) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "ucx split: rank %d of %d cannot join ranks [%d, %d): the range must "
                         "hold it and lie inside the parent",
                         pbase->rank, pbase->size, rank0, rank0 + size);
    }
    NSP_CHECK(nsp_tp_split_agree(pbase, rank0, size, parent->world->next_context, &context));
    if (context > UCX_MAX_CONTEXT) {
        return nsp_error(NSP_ERR_NO_MEMORY,
                         "ucx split: out of communicator ids (%u created): destroy unused "
                         "trees",
                         context);
    }
    sub = calloc(1, sizeof(*sub));
    if (sub == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "ucx split: no memory");
    }
    parent->world->next_context = context + 1;
    sub->base.ops               = ucx_ops();
    sub->base.rank              = pbase->rank - rank0;
    sub->base.size              = size;
    sub->base.world_rank0       = pbase->world_rank0 + rank0;
    sub->base.timeout_s         = pbase->timeout_s;
    sub->world                  = parent->world;
    sub->owns_world             = 0;
    sub->context                = (uint16_t)context;
    *out                        = &sub->base;
    return NSP_OK;
}

static nsp_status_t ucx_destroy(nsp_tp_comm_t *base)
{
    ucx_comm_t *comm = (ucx_comm_t *)base;

    if (comm == NULL) {
        return NSP_OK;
    }
    if (comm->owns_world) {
        ucx_world_free(comm->world, base->timeout_s);
    }
    free(comm);
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Mapped memory                                                            */
/* ------------------------------------------------------------------------ */

/* What each rank publishes about its new region. */
typedef struct ucx_region_info {
    int32_t  failed;    /* 0, or 1: bytes was 0, 2: allocation or rkey pack failed */
    uint32_t pad;
    uint64_t base;
    uint64_t len;
    uint64_t rkey_len;
} ucx_region_info_t;

/* Unmap the peers' regions and free this rank's (local). */
static void ucx_region_release(ucx_world_t *w, ucx_region_t *reg)
{
    for (int r = 0; reg->peers != NULL && r < w->nranks; ++r) {
        if (reg->peers[r].rkey != NULL) {
            ucp_rkey_destroy(reg->peers[r].rkey);
        }
    }
    if (reg->memh != NULL) {
        ucp_mem_unmap(w->context, reg->memh);
        __atomic_sub_fetch(&ucx_regions_live, 1, __ATOMIC_RELAXED);
    }
    free(reg->peers);
    free(reg);
}

static ucx_region_t *ucx_region_by_id(const ucx_world_t *w, uint32_t id)
{
    ucx_region_t *reg = w->regions;

    while (reg != NULL && reg->id != id) {
        reg = reg->next;
    }
    return reg;
}

/* This rank's part: allocate through UCX (shared memory when it can) and
 * pack the rkey. Fills info; on failure info->failed says why. */
static void ucx_region_local(ucx_world_t *w, ucx_region_t *reg, size_t bytes,
                             ucx_region_info_t *info, void **rkey_buf, size_t *rkey_len)
{
    ucp_mem_map_params_t mp;
    ucp_mem_attr_t       attr;
    ucs_status_t         st;

    memset(info, 0, sizeof(*info));
    if (bytes == 0) {
        info->failed = 1;
        return;
    }
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                    UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
    mp.address    = NULL;
    mp.length     = bytes;
    mp.flags      = UCP_MEM_MAP_ALLOCATE;
    st = ucp_mem_map(w->context, &mp, &reg->memh);
    if (st != UCS_OK) {
        NSP_WARN("ucx: ucp_mem_map of %zu bytes failed: %s", bytes, ucs_status_string(st));
        reg->memh    = NULL;
        info->failed = 2;
        return;
    }
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    st = ucp_mem_query(reg->memh, &attr);
    if (st == UCS_OK) {
        st = ucp_rkey_pack(w->context, reg->memh, rkey_buf, rkey_len);
    }
    if (st != UCS_OK) {
        NSP_WARN("ucx: querying or packing the key of a %zu-byte region failed: %s", bytes,
                 ucs_status_string(st));
        ucp_mem_unmap(w->context, reg->memh);
        reg->memh    = NULL;
        info->failed = 2;
        return;
    }
    /* ucx_region_release() counts it down */
    __atomic_add_fetch(&ucx_regions_live, 1, __ATOMIC_RELAXED);
    reg->base      = attr.address;
    reg->len       = bytes;
    info->base     = (uint64_t)(uintptr_t)attr.address;
    info->len      = bytes;
    info->rkey_len = *rkey_len;
}

/* Map every same-host peer's region whose rkey gives a local pointer. */
static void ucx_region_map_peers(ucx_world_t *w, int me, ucx_region_t *reg,
                                 const char *blobs, size_t stride)
{
    for (int r = 0; r < w->nranks; ++r) {
        ucx_region_peer_t *p = &reg->peers[r];
        void              *ptr;
        ucs_status_t       st;
        if (r == me) {
            p->ptr = reg->base;
            continue;
        }
        if (!w->peers[r].same_host || w->peers[r].ep == NULL) {
            continue;
        }
        st = ucp_ep_rkey_unpack(w->peers[r].ep, blobs + (size_t)r * stride, &p->rkey);
        if (st != UCS_OK) {
            NSP_DEBUG("ucx: rkey of rank %d's region %u not unpacked: %s", r, reg->id,
                      ucs_status_string(st));
            p->rkey = NULL;
            continue;
        }
        st = ucp_rkey_ptr(p->rkey, p->base, &ptr);
        if (st != UCS_OK) {
            NSP_DEBUG("ucx: rank %d's region %u is not mappable here: %s", r, reg->id,
                      ucs_status_string(st));
            ucp_rkey_destroy(p->rkey);
            p->rkey = NULL;
            continue;
        }
        p->ptr = ptr;
    }
}

static nsp_status_t ucx_mem_alloc(nsp_tp_comm_t *base, size_t bytes, void **out)
{
    ucx_comm_t        *comm = (ucx_comm_t *)base;
    ucx_world_t       *w    = comm->world;
    int                n = base->size, me = base->rank, bad = -1;
    ucx_region_t      *reg;
    ucx_region_info_t  mine, *infos = NULL;
    void              *rkey = NULL;
    size_t             rkey_len = 0, stride = 0;
    char              *padded = NULL, *blobs = NULL;
    int32_t            range[2], *ranges = NULL;
    nsp_status_t       status;

    if (out == NULL || base->world_rank0 != 0 || n != w->nranks) {
        return nsp_error(NSP_ERR_INVALID_ARG, "ucx mem_alloc: NULL pointer or not the world "
                         "communicator");
    }
    reg = calloc(1, sizeof(*reg));
    if (reg == NULL || (reg->peers = calloc((size_t)n, sizeof(*reg->peers))) == NULL ||
        (infos = calloc((size_t)n, sizeof(*infos))) == NULL ||
        (ranges = calloc(2 * (size_t)n, sizeof(*ranges))) == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nsp_mem_alloc: no memory for the region "
                           "table of %d ranks", n);
        goto err_free_region; /* peers then find us silent: they time out */
    }
    reg->id = w->next_region;
    /* [nranks] ucx_region_info_t: every rank's address, length, key size */
    ucx_region_local(w, reg, bytes, &mine, &rkey, &rkey_len);
    NSP_CHECK_GOTO(base->ops->allgather(base, &mine, infos, sizeof(mine)), status,
                   err_release_local);
    for (int r = 0; r < n && bad < 0; ++r) {
        bad = infos[r].failed ? r : -1;
        stride = infos[r].rkey_len > stride ? (size_t)infos[r].rkey_len : stride;
    }
    if (bad >= 0) {
        status = nsp_error(infos[bad].failed == 1 ? NSP_ERR_INVALID_ARG : NSP_ERR_BACKEND,
                           "nsp_mem_alloc: rank %d %s; no rank allocated anything", bad,
                           infos[bad].failed == 1 ? "asked for 0 bytes (every rank must ask "
                                                    "for at least 1)"
                                                  : "could not allocate shareable memory "
                                                    "through UCX (see its warning; check "
                                                    "UCX_MEM_ALLOC_METHODS and /dev/shm)");
        goto err_release_local;
    }
    /* [nranks][stride] packed rkeys, each padded to the longest */
    padded = calloc(1, stride);
    blobs  = malloc(stride * (size_t)n);
    if (padded == NULL || blobs == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "nsp_mem_alloc: no memory for %d keys of %zu "
                           "bytes", n, stride);
        goto err_release_local;
    }
    memcpy(padded, rkey, rkey_len);
    NSP_CHECK_GOTO(base->ops->allgather(base, padded, blobs, stride), status,
                   err_release_local);
    for (int r = 0; r < n; ++r) {
        reg->peers[r].base = infos[r].base;
        reg->peers[r].len  = infos[r].len;
    }
    ucx_region_map_peers(w, me, reg, blobs, stride);
    /* the run of consecutive world ranks around me that I mapped */
    for (range[0] = me; range[0] > 0 && reg->peers[range[0] - 1].ptr != NULL; --range[0]) {
    }
    for (range[1] = me; range[1] + 1 < n && reg->peers[range[1] + 1].ptr != NULL; ++range[1]) {
    }
    NSP_CHECK_GOTO(base->ops->allgather(base, range, ranges, sizeof(range)), status,
                   err_release_local);
    for (int r = 0; r < n; ++r) {
        reg->peers[r].lo = ranges[2 * r];
        reg->peers[r].hi = ranges[2 * r + 1];
    }
    NSP_DEBUG("ucx: region %u of %zu bytes at %p; ranks [%d, %d] mapped here", reg->id, bytes,
              reg->base, range[0], range[1]);
    ++w->next_region;
    reg->next  = w->regions;
    w->regions = reg;
    *out       = reg->base;
    status     = NSP_OK;
    goto out_free;

err_release_local:
    ++w->next_region; /* every rank counted this round, failed or not */
    ucx_region_release(w, reg);
    goto out_free;
err_free_region:
    if (reg != NULL) {
        free(reg->peers);
    }
    free(reg);
out_free:
    if (rkey != NULL) {
        ucp_rkey_buffer_release(rkey);
    }
    free(padded);
    free(blobs);
    free(ranges);
    free(infos);
    return status;
}

static nsp_status_t ucx_mem_free(nsp_tp_comm_t *base, void *ptr)
{
    ucx_comm_t    *comm = (ucx_comm_t *)base;
    ucx_world_t   *w    = comm->world;
    ucx_region_t **at   = &w->regions;
    uint32_t       id, *ids;
    int            first_bad = -1, ndiff = 0;
    nsp_status_t   status;

    while (*at != NULL && (ptr == NULL || (*at)->base != ptr)) {
        at = &(*at)->next;
    }
    id  = *at != NULL ? (*at)->id : UINT32_MAX;
    ids = calloc((size_t)base->size, sizeof(*ids));
    if (ids == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_mem_free: no memory for %d ids", base->size);
    }
    NSP_CHECK_GOTO(base->ops->allgather(base, &id, ids, sizeof(id)), status, out_free_ids);
    for (int r = 0; r < base->size; ++r) {
        if (ids[r] == UINT32_MAX || ids[r] != ids[0]) {
            first_bad = first_bad < 0 ? r : first_bad;
            ++ndiff;
        }
    }
    if (first_bad >= 0) {
        status = nsp_error(NSP_ERR_INVALID_ARG, "nsp_mem_free: %d rank(s) (first: rank %d) "
                           "passed %s; every rank must pass the pointer nsp_mem_alloc gave it "
                           "in the same call; nothing was freed", ndiff, first_bad,
                           ids[first_bad] == UINT32_MAX
                               ? "NULL or a pointer nsp_mem_alloc did not return (or already "
                                 "freed)"
                               : "a region other than rank 0's");
        goto out_free_ids;
    }
    {
        ucx_region_t *reg = *at;
        /* drop my mappings of the peers first, then wait until every peer
         * dropped its mapping of mine before mine goes */
        for (int r = 0; r < w->nranks; ++r) {
            if (reg->peers[r].rkey != NULL) {
                ucp_rkey_destroy(reg->peers[r].rkey);
                reg->peers[r].rkey = NULL;
                reg->peers[r].ptr  = NULL;
            }
        }
        *at    = reg->next;
        status = base->ops->barrier(base);
        ucx_region_release(w, reg);
    }
out_free_ids:
    free(ids);
    return status;
}

static nsp_status_t ucx_mem_find(nsp_tp_comm_t *base, const void *ptr, size_t bytes,
                                 uint32_t *region, size_t *offset)
{
    const ucx_world_t *w = ((ucx_comm_t *)base)->world;
    uintptr_t          p = (uintptr_t)ptr;

    for (const ucx_region_t *reg = w->regions; ptr != NULL && reg != NULL; reg = reg->next) {
        uintptr_t b = (uintptr_t)reg->base;
        if (p >= b && p - b <= reg->len && bytes <= reg->len - (p - b)) {
            *region = reg->id;
            *offset = (size_t)(p - b);
            return NSP_OK;
        }
    }
    return NSP_ERR_NOT_FOUND;
}

static nsp_status_t ucx_mem_group_mapped(nsp_tp_comm_t *base, uint32_t region, int rank0,
                                         int size, int *yes)
{
    const ucx_world_t *w = ((ucx_comm_t *)base)->world;

    *yes = 0;
    if (rank0 < 0 || size < 1 || rank0 + size > w->nranks) {
        return NSP_OK;
    }
    for (const ucx_region_t *reg = w->regions; reg != NULL && !*yes; reg = reg->next) {
        int ok = region == NSP_TP_REGION_ANY || region == reg->id;
        for (int r = rank0; ok && r < rank0 + size; ++r) {
            ok = reg->peers[r].lo <= rank0 && reg->peers[r].hi >= rank0 + size - 1;
        }
        *yes = ok;
    }
    return NSP_OK;
}

static nsp_status_t ucx_mem_peer_ptr(nsp_tp_comm_t *base, int rank, uint32_t region,
                                     size_t offset, size_t bytes, const void **ptr)
{
    const ucx_world_t       *w   = ((ucx_comm_t *)base)->world;
    const ucx_region_t      *reg = ucx_region_by_id(w, region);
    const ucx_region_peer_t *p;

    if (reg == NULL || rank < 0 || rank >= w->nranks || reg->peers[rank].ptr == NULL) {
        return nsp_error(NSP_ERR_NOT_FOUND, "ucx: rank %d's mapped region %u is not mapped "
                         "in rank %d (freed, or not on this host)", rank, region, base->rank);
    }
    p = &reg->peers[rank];
    if (offset > p->len || bytes > p->len - offset) {
        return nsp_error(NSP_ERR_NOT_FOUND, "ucx: bytes [%zu, %zu) of rank %d's region %u "
                         "lie outside its %llu bytes; ranks disagree on their buffers", offset,
                         offset + bytes, rank, region, (unsigned long long)p->len);
    }
    *ptr = (const char *)p->ptr + offset;
    return NSP_OK;
}

const nsp_tp_ops_t nsp_tp_ucx_ops = {
    .name           = "ucx",
    .mem_type       = NSP_MEM_HOST,
    .world_create   = ucx_world_create,
    .world_wrap     = ucx_world_wrap,
    .split          = ucx_split,
    .destroy        = ucx_destroy,
    .alltoallv_post = ucx_alltoallv_post,
    .alltoallv_iov_post = ucx_alltoallv_iov_post,
    .sendrecv_post  = ucx_sendrecv_post,
    .progress       = ucx_progress,
    .allgather      = nsp_tp_allgather_by_alltoallv,
    .barrier        = nsp_tp_barrier_by_alltoallv,
    .mem_alloc      = ucx_mem_alloc,
    .mem_free       = ucx_mem_free,
    .mem_find       = ucx_mem_find,
    .mem_group_mapped = ucx_mem_group_mapped,
    .mem_peer_ptr   = ucx_mem_peer_ptr,
};

static const nsp_tp_ops_t *ucx_ops(void)
{
    return &nsp_tp_ucx_ops;
}
