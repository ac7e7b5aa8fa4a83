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

struct nsp_comm {
    const nsp_tp_ops_t *ops;     /**< the backend */
    nsp_tp_comm_t      *world;   /**< owned */
    int                 rank;
    int                 size;
    double              timeout_s;
    int                 nnodes;
    nsp_topo_place_t   *places;  /**< [size], owned */
    unsigned            ntrees;  /**< live trees built on it (destroy checks) */
};

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
