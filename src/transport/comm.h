/*
 * The public communicator object, seen from inside the library (internal).
 *
 * nsp_comm_t owns the world nsp_tp_comm_t of its backend plus what the
 * communicator knows about placement (allgathered at init). Layers above the
 * transport reach the backend only through nsp_comm_tp() and the ops table.
 */
#ifndef NSP_TRANSPORT_COMM_H_
#define NSP_TRANSPORT_COMM_H_

#include "nspcomm.h"
#include "topology/topology.h"
#include "transport/transport.h"

/*
 * State an upper layer keeps per world (e.g. the nested all-to-all's scratch
 * pool): `ptr` is owned by the slot and released by nsp_comm_destroy() with
 * `release`, before the transport goes. One id per user, below.
 */
enum {
    NSP_COMM_SLOT_A2A_HOST = 0, /* the host engine of the nested all-to-all */
    NSP_COMM_SLOT_A2A_DEVICE = 1, /* its device engine */
    NSP_COMM_SLOT_EMU = 2, /* the emulated device (memtype_emu.c): after the engines,
                              whose streams and events are its own */
    NSP_COMM_NSLOTS
};
typedef struct nsp_comm_slot {
    void *ptr;
    void (*release)(void *ptr);
} nsp_comm_slot_t;

struct nsp_comm {
    const nsp_tp_ops_t *ops;     /**< the backend */
    nsp_tp_comm_t      *world;   /**< owned */
    int                 rank;
    int                 size;
    double              timeout_s;
    int                 nnodes;
    nsp_topo_place_t   *places;  /**< [size], owned */
    unsigned            ntrees;  /**< live trees built on it (destroy checks) */
    uint32_t            seq;     /**< operations started on this world so far: their
                                      tags and part of their agreement (every rank
                                      counts alike) */
    nsp_comm_slot_t     slots[NSP_COMM_NSLOTS]; /**< upper layers' state of this world */
};

/** The slot `id` of comm (NSP_COMM_SLOT_*): its pointer is NULL until a
 *  user sets it (and its release function). */
nsp_comm_slot_t *nsp_comm_slot(nsp_comm_t *comm, int id);

/** The number of the next operation on comm; nsp_comm_seq_next() takes it
 *  (call it once the operation is committed on this rank, after any check
 *  that could fail on one rank alone). */
uint32_t nsp_comm_seq(const nsp_comm_t *comm);
void     nsp_comm_seq_next(nsp_comm_t *comm);

/** The world transport communicator (borrowed from comm). */
nsp_tp_comm_t *nsp_comm_tp(const nsp_comm_t *comm);

/**
 * Resolve a caller's config (NULL allowed) into a full one: check magic and
 * size, copy the first `size` bytes over the defaults, then fill backend and
 * timeout from the environment where unset. Errors: NSP_ERR_INVALID_ARG (bad
 * magic, size too small, malformed NSPCOMM_TIMEOUT).
 */
nsp_status_t nsp_config_resolve(const nsp_config_t *user, nsp_config_t *out);

#endif /* NSP_TRANSPORT_COMM_H_ */
