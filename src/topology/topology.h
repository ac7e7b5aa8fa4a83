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
 * host; at most NSP_HOST_ID_BYTES - 1 characters). Errors:
 * NSP_ERR_INVALID_ARG (id NULL, NSPCOMM_HOST_ID too long), NSP_ERR_IO
 * (gethostname failed).
 */
nsp_status_t nsp_topo_host_id(char id[NSP_HOST_ID_BYTES]);

/** Longest boot id kept in a host identity (a UUID has 36 characters). */
#define NSP_TOPO_BOOT_ID_MAX 40

/**
 * Compose "host/boot_id" into id (NUL-padded). A hostname too long to fit is
 * cut and ends in "~" plus 16 hex digits of a hash of the whole name, so long
 * names that share a prefix stay distinct; boot_id is cut to
 * NSP_TOPO_BOOT_ID_MAX; an empty boot_id gives the hostname alone. Used by
 * nsp_topo_host_id(); exposed for tests. Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_topo_format_host_id(const char *host, const char *boot_id,
                                     char id[NSP_HOST_ID_BYTES]);

/**
 * From the allgathered identities `ids` ([nranks][NSP_HOST_ID_BYTES],
 * borrowed), fill places[nranks] (caller-owned) and *nnodes. Identities
 * compare as NUL-terminated strings. O(nranks log nranks).
 * Errors: NSP_ERR_INVALID_ARG (an empty or unterminated identity: the
 * message names the rank), NSP_ERR_NO_MEMORY.
 */
nsp_status_t nsp_topo_place_ranks(const char *ids, int nranks, nsp_topo_place_t *places,
                                  int *nnodes);

/**
 * The node block of a placement: the largest `block` such that every group of
 * `block` consecutive ranks [k*block, (k+1)*block) is complete (block divides
 * nranks) and lies inside one node. It is gcd(nranks, every rank r whose node
 * differs from rank r-1's): the node size for uniform nodes with ranks
 * numbered node by node; smaller for non-uniform nodes (sizes 8,8,4 -> 4;
 * 8,6 -> 2); 1 when ranks alternate between nodes. Pass it as ranks_per_node
 * to nsp_topology_suggest_levels(). places is [nranks], borrowed.
 * Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_topo_node_block(const nsp_topo_place_t *places, int nranks, int *block);

/**
 * nsp_topology_suggest_levels() for a placement: the node block from
 * nsp_topo_node_block(), then the suggestion. Warns when ranks are not
 * numbered node by node (levels above the block then cross nodes). places is
 * [nranks], borrowed; degrees[capacity] caller-owned. Errors: as the two.
 */
nsp_status_t nsp_topo_levels_for_places(const nsp_topo_place_t *places, int nranks,
                                        int gpus_per_domain, int max_degree, int *degrees,
                                        int capacity, int *nlevels);

#endif /* NSP_TOPOLOGY_TOPOLOGY_H_ */
