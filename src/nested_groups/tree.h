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
 * NULL when no level of the tree carries that group (nsp_group_level). A
 * query only: exchanges take their group and its carrier from
 * nsp_tree_group_get() (nested_groups/group.h). Errors: NSP_ERR_INVALID_ARG
 * (NULL).
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
 * The level of a tree of degrees[nlevels] that carries the group of world
 * ranks [rank0, rank0 + degree) for `rank`: the level of that degree whose
 * group of `rank` starts at rank0, or -1 (the tree lacks the group, or rank
 * is not in it).
 */
int nsp_group_level(const int *degrees, int nlevels, int rank, int rank0, int degree);

/** Where a group sits for one rank (nsp_group_map). */
typedef struct nsp_group_map {
    int level; /**< nsp_group_level(): the tree level carrying it, or -1: the world */
    int index; /**< rank - rank0 */
    int base;  /**< rank of index 0 in the carrier: 0 on a level, rank0 on the world */
} nsp_group_map_t;

/**
 * How the group [rank0, rank0 + degree) of a world of `nranks` is carried
 * for `rank` on a tree of degrees[nlevels]: the decision nsp_tree_group_get
 * makes. Errors: NSP_ERR_INVALID_ARG (degree < 1, the range leaves
 * [0, nranks), rank not in it; the message names them).
 */
nsp_status_t nsp_group_map(const int *degrees, int nlevels, int nranks, int rank, int rank0,
                           int degree, nsp_group_map_t *map);

/**
 * Check a degree list for a world of `nranks`: starts at 1, ascends
 * strictly, each divides the next and nranks, at most NSP_TREE_MAX_LEVELS.
 * Errors: NSP_ERR_INVALID_ARG (the message names the rule and the value).
 */
nsp_status_t nsp_tree_check_degrees(const int *degrees, int nlevels, int nranks);

#endif /* NSP_NESTED_GROUPS_TREE_H_ */
