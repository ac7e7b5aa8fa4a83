/*
 * The internal transport interface: what every backend (UCX now, NCCL
 * later) implements, as an ops table in the style of UCT transports and UCC
 * TLs. Layers above (the communicator, the tree, the nested all-to-all, the
 * ring) see only this header and never a backend's own types.
 *
 * Objects
 *   nsp_tp_comm_t  a backend communicator: the world, or a sub-communicator
 *                  of consecutive parent ranks [rank0, rank0 + size). A
 *                  backend allocates its own struct with nsp_tp_comm_t as the
 *                  FIRST member.
 *   nsp_request_t  one completion (src/transport/request.h). Backend
 *                  requests embed it first; test/wait/free go through the
 *                  generic nsp_request_* calls, which own the timeout.
 *
 * Rules every backend follows
 *   - Buffers live in ops->mem_type memory (host for UCX, device for NCCL).
 *   - Counts and displacements are BYTES (size_t), one entry per peer of the
 *     communicator, in that communicator's rank numbering.
 *   - Everything passed to a *_post is borrowed until the request completes
 *     (or is freed): buffers AND the count/displacement arrays.
 *   - Posts never block on peers. Several posts may be in flight on one
 *     communicator (one per level, several ring steps) as long as their tags
 *     differ; a (comm, tag) pair may be reused once its request completed.
 *     Messages between the same two ranks with the same tag are matched in
 *     posting order.
 *   - Collectives on one communicator (split, allgather, barrier, every
 *     alltoallv) are posted by all its ranks in the same order; communicators
 *     sharing ranks (the levels of a tree) are driven in one agreed order,
 *     level by level (docs/design.md §4), or NCCL may deadlock.
 *   - `stream` is a cudaStream_t for a stream-ordered backend (NCCL: the post
 *     enqueues onto the stream and records an event; test queries the event).
 *     Host backends require stream == NULL and return NSP_ERR_UNSUPPORTED
 *     otherwise.
 *   - An entry a backend cannot do is set to a function returning
 *     NSP_ERR_UNSUPPORTED with a message naming the backend; no entry is NULL.
 *   - A dead or unresponsive peer makes requests fail with
 *     NSP_ERR_PEER_FAILED or NSP_ERR_TIMEOUT, never hang. After such an
 *     error the communicator (and every communicator split from the same
 *     world) is broken: free requests and destroy, nothing else.
 *   - Not thread-safe: one thread drives a world and its sub-communicators.
 */
#ifndef NSP_TRANSPORT_TRANSPORT_H_
#define NSP_TRANSPORT_TRANSPORT_H_

#include "nspcomm.h"
#include "transport/bootstrap.h"
#include "transport/request.h"

#include <stddef.h>
#include <stdint.h>

/** Where a backend's buffers must live. */
typedef enum {
    NSP_MEM_HOST = 0,
    NSP_MEM_CUDA = 1
} nsp_mem_type_t;

/*
 * Tags: 32 bits chosen by the caller; the top bit is reserved for the
 * transport's own collectives (split, allgather, barrier). Callers put a
 * class in bits 24..30 and a sequence in bits 0..23 so users of one
 * communicator never collide: the all-to-all uses NSP_TP_TAG_CLASS_A2A with
 * a per-level sequence, the ring NSP_TP_TAG_CLASS_RING with the step.
 */
#define NSP_TP_TAG_INTERNAL   0x80000000u
#define NSP_TP_TAG_SEQ_MASK   0x00ffffffu
#define NSP_TP_TAG_CLASS_A2A  1u
#define NSP_TP_TAG_CLASS_RING 2u
#define NSP_TP_TAG_CLASS_USER 3u  /**< tests and perf tools */
/* The transport's own acknowledgements of alltoallv_iov_post carry the
 * caller's tag with this bit set: callers' classes stay below 0x40. */
#define NSP_TP_TAG_IOV_ACK    0x40000000u
#define NSP_TP_TAG(cls, seq) ((((uint32_t)(cls) & 0x7fu) << 24) | ((uint32_t)(seq) & NSP_TP_TAG_SEQ_MASK))

/** mem_group_mapped: any live region. */
#define NSP_TP_REGION_ANY UINT32_MAX

typedef struct nsp_tp_ops nsp_tp_ops_t;

/** Common head of every backend communicator. Read-only above the backend. */
typedef struct nsp_tp_comm {
    const nsp_tp_ops_t *ops;
    int    rank;        /**< this rank in this communicator */
    int    size;        /**< ranks in this communicator */
    int    world_rank0; /**< world rank of rank 0 (ranks are consecutive in the world) */
    double timeout_s;   /**< stall limit of every request on it, seconds */
    uint32_t coll_seq;  /**< sequence of the transport's own collectives (helpers below) */
} nsp_tp_comm_t;

/** What a world needs besides the bootstrap (resolved from nsp_config_t). */
typedef struct nsp_tp_params {
    double timeout_s;   /**< > 0 */
    int    cuda_device; /**< NCCL: device to bind; -1: the current one */
} nsp_tp_params_t;

/** Arguments of a variable-length all-to-all, all borrowed until completion. */
typedef struct nsp_tp_alltoallv {
    const void   *sendbuf;     /**< bytes; peer j's part at sendbuf + sdispls[j] */
    const size_t *sendcounts;  /**< [size] bytes to send to each peer */
    const size_t *sdispls;     /**< [size] byte offsets into sendbuf (may repeat: allgather) */
    void         *recvbuf;     /**< bytes; peer j's part lands at recvbuf + rdispls[j] */
    const size_t *recvcounts;  /**< [size] bytes expected from each peer */
    const size_t *rdispls;     /**< [size] byte offsets into recvbuf; parts must not overlap */
} nsp_tp_alltoallv_t;

/** One contiguous run of bytes (host memory). */
typedef struct nsp_tp_iov {
    void  *buf;
    size_t len;
} nsp_tp_iov_t;

/**
 * Arguments of an all-to-all of scattered runs, all borrowed until
 * completion. Peer j's send runs are send[sfirst[j] .. sfirst[j+1]) (in
 * that order they make one byte stream), its receive runs
 * recv[rfirst[j] .. rfirst[j+1]); the receive runs of one request must not
 * overlap. The bytes peer j sends this rank (the sum of its runs' len) must
 * equal what this rank's runs for j hold: a difference is NSP_ERR_MISMATCH.
 * Sender and receiver cut their streams independently.
 */
typedef struct nsp_tp_alltoallv_iov {
    const nsp_tp_iov_t *send;    /**< runs to send, peer by peer (buf read only) */
    const size_t       *sfirst;  /**< [size + 1] first run of each peer; sfirst[size] = total */
    const nsp_tp_iov_t *recv;    /**< runs to receive into, peer by peer */
    const size_t       *rfirst;  /**< [size + 1] */
    int                 push;    /**< a hint, the same on every rank: 1 when the send runs
                                      are the scattered ones (the sender copies where it
                                      can), 0 the receive runs (the receiver copies) */
} nsp_tp_alltoallv_iov_t;

struct nsp_tp_ops {
    const char     *name;      /**< "ucx", "nccl": what NSPCOMM_BACKEND / config.backend name */
    nsp_mem_type_t  mem_type;  /**< where buffers must live */

    /**
     * Create the world communicator of bs->nranks ranks, this one being
     * bs->rank. Collective over the bootstrap (uses it to exchange addresses;
     * does not keep it). On success *world is owned by the caller (destroy).
     * Errors: NSP_ERR_BACKEND (the library's own message inside),
     * NSP_ERR_TIMEOUT / NSP_ERR_PEER_FAILED (from the bootstrap),
     * NSP_ERR_NO_MEMORY.
     */
    nsp_status_t (*world_create)(nsp_bootstrap_t *bs, const nsp_tp_params_t *params,
                                 nsp_tp_comm_t **world);

    /**
     * Wrap an existing native communicator (NCCL: a ncclComm_t passed as
     * void *; not owned, not destroyed by destroy). UCX: NSP_ERR_UNSUPPORTED.
     */
    nsp_status_t (*world_wrap)(void *native, const nsp_tp_params_t *params,
                               nsp_tp_comm_t **world);

    /**
     * Split `parent` into sub-communicators of consecutive parent ranks:
     * this rank joins [rank0, rank0 + size), which must contain it; ranks of
     * one group pass the same (rank0, size). Collective over ALL ranks of
     * the parent, called in one agreed order (NCCL: ncclCommSplit with
     * color = rank0, key = rank). The sub-communicator borrows the parent's
     * resources: destroy it before the parent.
     * Errors: NSP_ERR_INVALID_ARG (range), NSP_ERR_MISMATCH (members of a
     * group disagree), NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED, NSP_ERR_BACKEND.
     */
    nsp_status_t (*split)(nsp_tp_comm_t *parent, int rank0, int size, nsp_tp_comm_t **sub);

    /**
     * Destroy a communicator (sub-communicators before their world). Local:
     * does not wait for peers beyond the timeout, so it also works after a
     * peer failed. Outstanding requests must be freed first.
     */
    nsp_status_t (*destroy)(nsp_tp_comm_t *comm);

    /**
     * Post a variable-length all-to-all (every peer, self included, in the
     * communicator's numbering; zero counts allowed). sendcounts[j] here
     * must equal recvcounts[me] on peer j: a difference is reported as
     * NSP_ERR_MISMATCH by the request (never silently truncated).
     * On success *req is owned by the caller (nsp_request_free).
     * Errors: NSP_ERR_INVALID_ARG, NSP_ERR_UNSUPPORTED (stream on a host
     * backend), NSP_ERR_PEER_FAILED, NSP_ERR_BACKEND, NSP_ERR_NO_MEMORY.
     */
    nsp_status_t (*alltoallv_post)(nsp_tp_comm_t *comm, const nsp_tp_alltoallv_t *args,
                                   uint32_t tag, void *stream, nsp_request_t **req);

    /**
     * Post an all-to-all of scattered runs (nsp_tp_alltoallv_iov_t): the
     * strided data of a layout sent from where it lies and received into
     * where it belongs, with no pack or unpack by the caller. UCX: between
     * two ranks on this host that may read each other's memory, one side
     * sends a descriptor of its runs and the other copies between both
     * sets of runs with process_vm_readv / process_vm_writev (the receiver
     * when push = 0, the sender when push = 1; one copy per byte, at most
     * IOV_MAX runs a call) and acknowledges (tag | NSP_TP_TAG_IOV_ACK) so
     * the describing side's request completes; other peers go through
     * UCX's iov datatype (its protocols may copy through bounce buffers).
     * A pair with 0 bytes still exchanges its (empty) descriptor, so sizes
     * are checked. NCCL: NSP_ERR_UNSUPPORTED. Errors as alltoallv_post.
     */
    nsp_status_t (*alltoallv_iov_post)(nsp_tp_comm_t *comm, const nsp_tp_alltoallv_iov_t *args,
                                       uint32_t tag, void *stream, nsp_request_t **req);

    /**
     * Post one send and one receive as one operation (the ring step): send
     * `sendbytes` from sendbuf to rank `dst`, receive `recvbytes` from rank
     * `src` into recvbuf (dst or src may be this rank: a local copy). NCCL:
     * one ncclGroupStart/End with ncclSend + ncclRecv, so a ring of these
     * cannot deadlock. Errors as alltoallv_post.
     */
    nsp_status_t (*sendrecv_post)(nsp_tp_comm_t *comm, const void *sendbuf, size_t sendbytes,
                                  int dst, void *recvbuf, size_t recvbytes, int src,
                                  uint32_t tag, void *stream, nsp_request_t **req);

    /**
     * Advance outstanding operations of the communicator's world without
     * testing any request. Sets *idle to 1 when there was nothing to do.
     */
    nsp_status_t (*progress)(nsp_tp_comm_t *comm, int *idle);

    /**
     * Blocking allgather of `bytes` host bytes per rank into
     * recvbuf[size][bytes] (small: layout checks, split agreement). Host
     * memory on every backend. Errors: NSP_ERR_TIMEOUT, NSP_ERR_PEER_FAILED,
     * NSP_ERR_BACKEND.
     */
    nsp_status_t (*allgather)(nsp_tp_comm_t *comm, const void *sendbuf, void *recvbuf,
                              size_t bytes);

    /** Blocking barrier. Errors as allgather. */
    nsp_status_t (*barrier)(nsp_tp_comm_t *comm);

    /*
     * Mapped memory (nsp_mem_alloc): regions every rank of the world
     * allocates together, which peers on the same host can read directly.
     * All entries take the WORLD communicator. Regions are numbered in
     * allocation order (ids never reused), the same on every rank.
     */

    /**
     * Allocate `bytes` (> 0; may differ between ranks) of host memory that
     * same-host peers can map, and map every peer's region of this round
     * where the backend can. Collective over the world; every rank learns
     * whether any rank failed, so all return the same status. On success
     * *ptr is owned by the backend until mem_free.
     * Errors: NSP_ERR_INVALID_ARG (bytes 0 on some rank: the message names
     * it), NSP_ERR_NO_MEMORY, NSP_ERR_BACKEND (some rank could not allocate),
     * NSP_ERR_TIMEOUT / NSP_ERR_PEER_FAILED, NSP_ERR_UNSUPPORTED (NCCL).
     */
    nsp_status_t (*mem_alloc)(nsp_tp_comm_t *world, size_t bytes, void **ptr);

    /**
     * Unmap the peers' regions of the round that allocated `ptr` and free
     * this rank's. Collective: every rank passes its pointer of the same
     * round; a NULL or unknown pointer, or ranks naming different rounds,
     * give NSP_ERR_INVALID_ARG on every rank and free nothing.
     * Errors: also NSP_ERR_TIMEOUT / NSP_ERR_PEER_FAILED, NSP_ERR_UNSUPPORTED.
     */
    nsp_status_t (*mem_free)(nsp_tp_comm_t *world, void *ptr);

    /**
     * Does [ptr, ptr + bytes) lie in one of this rank's live regions? NSP_OK
     * with its id and the byte offset of ptr in it, or NSP_ERR_NOT_FOUND
     * (not an error: nothing is logged). Local.
     */
    nsp_status_t (*mem_find)(nsp_tp_comm_t *world, const void *ptr, size_t bytes,
                             uint32_t *region, size_t *offset);

    /**
     * Can every rank of world ranks [rank0, rank0 + size) read region
     * `region` of every other one (NSP_TP_REGION_ANY: some live region)?
     * Answered from what the allocations allgathered, so every rank gives
     * the same answer. Sets *yes (0 for an unknown region). Local.
     */
    nsp_status_t (*mem_group_mapped)(nsp_tp_comm_t *world, uint32_t region, int rank0,
                                     int size, int *yes);

    /**
     * This process's pointer to [offset, offset + bytes) of world rank
     * `rank`'s region `region` (this rank's own: its own pointer). Local.
     * Errors: NSP_ERR_NOT_FOUND (no such region, not mapped from here, or
     * the range leaves the region; the message says which).
     */
    nsp_status_t (*mem_peer_ptr)(nsp_tp_comm_t *world, int rank, uint32_t region,
                                 size_t offset, size_t bytes, const void **ptr);
};

/**
 * The backend called `name` ("ucx", "nccl"). Errors: NSP_ERR_NOT_FOUND
 * (unknown name: the message lists the known ones), NSP_ERR_UNSUPPORTED
 * (known but not built into this library: the message says how to build it).
 */
nsp_status_t nsp_tp_find(const char *name, const nsp_tp_ops_t **ops);

/** The backends built into this library, in registry order (for the tests
 *  that walk every table); nsp_tp_at gives NULL out of range. */
int                 nsp_tp_count(void);
const nsp_tp_ops_t *nsp_tp_at(int i);

/** The UCX backend (src/transport/ucx.c). */
extern const nsp_tp_ops_t nsp_tp_ucx_ops;

/** Mapped regions (nsp_mem_alloc) this process holds, over every UCX world:
 *  what tests check after nsp_mem_free / nsp_comm_destroy. Sets *n. */
nsp_status_t nsp_tp_ucx_regions_live(int *n);

/** What one rank did on one UCX world since it was created (per world,
 *  over the world and its sub-communicators; perf/ reads the difference
 *  around a call). */
typedef struct nsp_tp_ucx_stats {
    uint64_t sends;          /**< tag sends posted (zero-byte ones included) */
    uint64_t sends_rndv;     /**< of them at or above their endpoint's rendezvous threshold
                                  (zero-copy where UCX has it: CMA on one host); the rest
                                  go eagerly (copied through the shared-memory FIFO) */
    uint64_t sends_in_place; /**< of them complete when posted (eager, buffer reusable) */
    uint64_t send_bytes;
    uint64_t recvs;          /**< tag receives posted */
    uint64_t iov_copies;     /**< alltoallv_iov_post peers whose runs this rank copied
                                  itself (process_vm_readv / process_vm_writev) */
    uint64_t iov_copy_bytes; /**< bytes copied so */
    uint64_t iov_ucx;        /**< alltoallv_iov_post sends through UCX's iov datatype */
    uint64_t progress;       /**< ucp_worker_progress calls of the rank (tests and progress) */
    uint64_t progress_idle;  /**< of them that moved nothing */
} nsp_tp_ucx_stats_t;

/** The counters of the UCX world `comm` belongs to into *out. Returns
 *  NSP_ERR_NOT_FOUND, logging nothing, when `comm` is not a UCX
 *  communicator (*out untouched). Local. */
nsp_status_t nsp_tp_ucx_stats(nsp_tp_comm_t *comm, nsp_tp_ucx_stats_t *out);

/*
 * Helpers any backend may use for its ops (transport.c).
 */

/** allgather built on the comm's own alltoallv_post with an internal tag. */
nsp_status_t nsp_tp_allgather_by_alltoallv(nsp_tp_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t bytes);
/** barrier = a zero-byte allgather on the same path. */
nsp_status_t nsp_tp_barrier_by_alltoallv(nsp_tp_comm_t *comm);
/**
 * The agreement every split makes before building anything: allgather
 * (rank0, size, key) over the parent and check that the members of this
 * rank's group all name the same group. Writes into *key_max the largest
 * `key` any parent rank passed (UCX: its next free context id).
 */
nsp_status_t nsp_tp_split_agree(nsp_tp_comm_t *parent, int rank0, int size, uint32_t key,
                                uint32_t *key_max);
/** Post-with-wait convenience for blocking internal collectives. */
nsp_status_t nsp_tp_alltoallv(nsp_tp_comm_t *comm, const nsp_tp_alltoallv_t *args,
                              uint32_t tag);

#endif /* NSP_TRANSPORT_TRANSPORT_H_ */
