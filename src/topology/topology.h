/*
 * Internal topology interface used by the communicator layer.
 *
 * Contract between src/topology (owner) and the communicator (user): the
 * communicator allgathers each rank's host identity at init and asks this
 * layer where every rank sits (node, local rank) and which level degrees suit
 * the machine. Pure functions where possible, so one process can test any
 * cluster shape from XML fixtures.
 */
#ifndef NSP_TOPOLOGY_TOPOLOGY_H_
#define NSP_TOPOLOGY_TOPOLOGY_H_

#include "nspcomm.h"

/** Bytes of one host identity (NUL-padded text, e.g. "hostname/boot-id"). */
#define NSP_HOST_ID_BYTES 64

/** Where one rank sits. */
typedef struct nsp_topo_place {
    int node;        /**< node index, 0-based, in order of first appearance by rank */
    int local_rank;  /**< index among the ranks of its node, by rank order */
    int local_size;  /**< ranks on its node */
} nsp_topo_place_t;

/**
 * This host's identity: the same string for every process on one host, and
 * different across hosts (hostname plus the kernel boot id). NSPCOMM_HOST_ID
 * in the environment overrides it (tests use it to fake several nodes on one
 * host). Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_topo_host_id(char id[NSP_HOST_ID_BYTES]);

/**
 * From the allgathered identities `ids` ([nranks][NSP_HOST_ID_BYTES],
 * borrowed), fill places[nranks] (caller-owned) and *nnodes.
 * Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_topo_place_ranks(const char *ids, int nranks, nsp_topo_place_t *places,
                                  int *nnodes);

#endif /* NSP_TOPOLOGY_TOPOLOGY_H_ */
