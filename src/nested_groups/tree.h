/*
 * The nested tree, seen from inside the library (internal): what the nested
 * all-to-all and the ring need beyond the public queries.
 */
#ifndef NSP_NESTED_GROUPS_TREE_H_
#define NSP_NESTED_GROUPS_TREE_H_

#include "nspcomm.h"
#include "transport/transport.h"

/**
 * The transport sub-communicator of this rank's group at `level` (borrowed
 * from the tree; rank numbering: index in the group). Level 0 is a
 * communicator of size 1. Errors: NSP_ERR_INVALID_ARG (NULL, level out of
 * range).
 */
nsp_status_t nsp_tree_level_tp(const nsp_tree_t *tree, int level, nsp_tp_comm_t **comm);

/**
 * The transport sub-communicator of this rank's group of `degree` when that
 * group starts at world rank `rank0` (borrowed, as nsp_tree_level_tp), or
 * NULL when the tree has no such group (a plan's group the tree does not
 * hold: callers then go over the world). Errors: NSP_ERR_INVALID_ARG (NULL).
 */
nsp_status_t nsp_tree_group_tp(const nsp_tree_t *tree, int degree, int rank0,
                               nsp_tp_comm_t **comm);

/*
 * Pure index math of the tree and the ring (tree_math.c): no communicator,
 * so one process can test every rank.
 */

/** First rank of the group of `degree` holding `rank`: (rank / degree) * degree. */
int nsp_tree_group_rank0(int rank, int degree);

/** Index of the peer `shift` places after `index` in a ring of `degree`. */
int nsp_ring_index(int index, int shift, int degree);

/**
 * Check a degree list for a world of `nranks`: starts at 1, ascends
 * strictly, each divides the next and nranks, at most NSP_TREE_MAX_LEVELS.
 * Errors: NSP_ERR_INVALID_ARG (the message names the rule and the value).
 */
nsp_status_t nsp_tree_check_degrees(const int *degrees, int nlevels, int nranks);

#endif /* NSP_NESTED_GROUPS_TREE_H_ */
