/*
 * Pure index math of the tree and the ring: no communicator, so one process
 * can check every rank (tests/comm/test_tree_math).
 */
#include "nested_groups/tree.h"

#include "common/log.h"

int nsp_tree_group_rank0(int rank, int degree)
{
    return (rank / degree) * degree;
}

int nsp_ring_index(int index, int shift, int degree)
{
    /* 64-bit so index + shift cannot overflow; the double modulo handles
     * negative shifts. */
    long long r = ((long long)index + (long long)shift) % degree;

    return (int)(r < 0 ? r + degree : r);
}

nsp_status_t nsp_tree_check_degrees(const int *degrees, int nlevels, int nranks)
{
    if (degrees == NULL || nlevels < 1 || nlevels > NSP_TREE_MAX_LEVELS) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "tree: %d levels (degrees %p): need 1 to %d levels and a degree array",
                         nlevels, (const void *)degrees, NSP_TREE_MAX_LEVELS);
    }
    if (degrees[0] != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "tree: degrees[0] is %d; level 0 must have degree 1 (a rank alone): "
                         "start the list with 1",
                         degrees[0]);
    }
    for (int l = 1; l < nlevels; ++l) {
        if (degrees[l] <= degrees[l - 1] || degrees[l] % degrees[l - 1] != 0) {
            return nsp_error(NSP_ERR_INVALID_ARG,
                             "tree: degrees[%d] = %d after %d: degrees must ascend and each "
                             "divide the next, so groups nest",
                             l, degrees[l], degrees[l - 1]);
        }
    }
    if (nranks % degrees[nlevels - 1] != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "tree: top degree %d does not divide the %d ranks of the world: every "
                         "degree must divide the world size",
                         degrees[nlevels - 1], nranks);
    }
    return NSP_OK;
}

int nsp_group_level(const int *degrees, int nlevels, int rank, int rank0, int degree)
{
    if (degree < 1 || rank < rank0 || rank - rank0 >= degree) {
        return -1;
    }
    for (int l = 0; l < nlevels; ++l) {
        if (degrees[l] == degree && nsp_tree_group_rank0(rank, degree) == rank0) {
            return l;
        }
    }
    return -1;
}

nsp_status_t nsp_group_map(const int *degrees, int nlevels, int nranks, int rank, int rank0,
                           int degree, nsp_group_map_t *map)
{
    if (map == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_group_map: map is NULL");
    }
    if (degree < 1 || rank0 < 0 || rank0 > nranks - degree || rank < rank0 ||
        rank - rank0 >= degree) {
        return nsp_error(NSP_ERR_INVALID_ARG,
                         "group [%d, %d + %d) of a world of %d ranks, seen from rank %d: a "
                         "group must lie in the world and hold the rank",
                         rank0, rank0, degree, nranks, rank);
    }
    map->level = nsp_group_level(degrees, nlevels, rank, rank0, degree);
    map->index = rank - rank0;
    map->base  = map->level >= 0 ? 0 : rank0;
    return NSP_OK;
}
