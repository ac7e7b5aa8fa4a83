/*
 * Put a forked rank on its node of a namespace cluster (scripts/netcluster.sh).
 *
 * When NSP_NETCLUSTER names a cluster's state directory (netcluster.sh sets
 * it), rank r of n goes to node r * K / n (K nodes: consecutive ranks share a
 * node, n / K per node when K divides n): it enters that node's network, UTS
 * (hostname) and mount (boot id) namespaces, so the library and UCX see a
 * different host per node and bytes between nodes cross the node's shaped
 * veth. Call it in a freshly forked, single-threaded child, before anything
 * opens a socket or starts UCX. Used by the tests' and the tools' forking
 * launchers.
 */
#ifndef NSP_TOOLS_NC_ENTER_H_
#define NSP_TOOLS_NC_ENTER_H_

#include <stddef.h>

/**
 * Enter rank `rank`'s node (of `nranks` ranks) when NSP_NETCLUSTER is set;
 * nothing otherwise. Returns 0, or -1 with the reason in why[whylen] (state
 * files missing or unreadable, setns refused: not root). *node gets the node
 * index (-1 when NSP_NETCLUSTER is unset); node may be NULL.
 */
int nc_enter_node(int rank, int nranks, int *node, char *why, size_t whylen);

/** Node count of the cluster NSP_NETCLUSTER names; 0 when unset or unreadable. */
int nc_nodes(void);

#endif /* NSP_TOOLS_NC_ENTER_H_ */
