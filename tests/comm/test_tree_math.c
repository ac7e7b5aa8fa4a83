/*
 * Pure index math of the tree and the ring (no processes): group starts,
 * ring neighbours for every index, shift and degree, the degree rules, and
 * the group lookup (which communicator carries a group, its base rank and
 * rank map) for every (rank0, degree) and every rank of several trees.
 */
#include "../tap.h"
#include "nested_groups/tree.h"

#include <limits.h>

static void test_group_rank0(void)
{
    int ok = 1;

    for (int d = 1; d <= 64; d *= 2) {
        for (int r = 0; r < 256; ++r) {
            int r0 = nsp_tree_group_rank0(r, d);
            ok &= r0 % d == 0 && r0 <= r && r < r0 + d;
        }
    }
    tap_ok(ok, "group rank0: aligned, holds the rank, for degrees 1..64 and ranks 0..255");
    tap_is_int(nsp_tree_group_rank0(13, 6), 12, "rank 13 in groups of 6 starts at 12");
}

static void test_ring_index(void)
{
    int ok = 1;

    for (int d = 1; d <= 9; ++d) {
        for (int i = 0; i < d; ++i) {
            for (int shift = -20; shift <= 20; ++shift) {
                int to   = nsp_ring_index(i, shift, d);
                int back = nsp_ring_index(to, -shift, d);
                /* Independent: ((i + shift) mod d) with a non-negative result. */
                int want = ((i + shift) % d + d) % d;
                ok &= to == want && back == i && to >= 0 && to < d;
            }
        }
    }
    tap_ok(ok, "ring index: (i + shift) mod d in [0, d), and -shift undoes it (d 1..9)");
    tap_is_int(nsp_ring_index(0, -1, 4), 3, "index 0 shifted by -1 in 4 is 3");
    tap_is_int(nsp_ring_index(3, 1, 4), 0, "index 3 shifted by +1 in 4 wraps to 0");
    tap_is_int(nsp_ring_index(2, INT_MAX, 7), (int)((2 + (long long)INT_MAX) % 7),
               "INT_MAX shift does not overflow");
    tap_is_int(nsp_ring_index(2, INT_MIN, 7), (int)((((2 + (long long)INT_MIN) % 7) + 7) % 7),
               "INT_MIN shift does not overflow");
}

static void test_degrees(void)
{
    const int good[] = {1, 2, 4, 8};
    const int forest[] = {1, 2};
    const int six[] = {1, 3, 6};
    const int no_one[] = {2, 4};
    const int not_dividing[] = {1, 3};
    const int descending[] = {1, 4, 2};
    const int repeated[] = {1, 2, 2};
    const int too_big[] = {1, 16};
    const int skip[] = {1, 2, 6, 12};

    tap_is_int(nsp_tree_check_degrees(good, 4, 8), NSP_OK, "1,2,4,8 on 8 ranks");
    tap_is_int(nsp_tree_check_degrees(good, 4, 32), NSP_OK, "1,2,4,8 on 32 ranks (forest)");
    tap_is_int(nsp_tree_check_degrees(forest, 2, 6), NSP_OK, "1,2 on 6 ranks");
    tap_is_int(nsp_tree_check_degrees(six, 3, 6), NSP_OK, "1,3,6 on 6 ranks");
    tap_is_int(nsp_tree_check_degrees(skip, 4, 24), NSP_OK, "1,2,6,12 on 24 ranks");
    tap_is_int(nsp_tree_check_degrees(good, 1, 5), NSP_OK, "1 alone on 5 ranks");
    tap_is_int(nsp_tree_check_degrees(no_one, 2, 8), NSP_ERR_INVALID_ARG, "2,4: no level 0");
    tap_is_int(nsp_tree_check_degrees(not_dividing, 2, 8), NSP_ERR_INVALID_ARG,
               "1,3 on 8 ranks: 3 does not divide 8");
    tap_is_int(nsp_tree_check_degrees(descending, 3, 8), NSP_ERR_INVALID_ARG, "1,4,2: descends");
    tap_is_int(nsp_tree_check_degrees(repeated, 3, 8), NSP_ERR_INVALID_ARG, "1,2,2: repeats");
    tap_is_int(nsp_tree_check_degrees(too_big, 2, 8), NSP_ERR_INVALID_ARG, "1,16 on 8 ranks");
    tap_is_int(nsp_tree_check_degrees(six, 3, 12), NSP_OK, "1,3,6 on 12 ranks");
    tap_is_int(nsp_tree_check_degrees(skip, 4, 18), NSP_ERR_INVALID_ARG,
               "1,2,6,12 on 18 ranks: 12 does not divide 18");
    tap_is_int(nsp_tree_check_degrees(NULL, 2, 8), NSP_ERR_INVALID_ARG, "NULL degrees");
    tap_is_int(nsp_tree_check_degrees(good, 0, 8), NSP_ERR_INVALID_ARG, "0 levels");
    tap_is_int(nsp_tree_check_degrees(good, NSP_TREE_MAX_LEVELS + 1, 8), NSP_ERR_INVALID_ARG,
               "more than NSP_TREE_MAX_LEVELS levels");
}

/* The carrier of [rank0, rank0 + d) for `rank`, found independently: a
 * level of degree d carries it when its groups [k*d, (k+1)*d) include this
 * range exactly, i.e. rank0 is a multiple of d. -1: the world. */
static int want_level(const int *degrees, int nlevels, int rank0, int d)
{
    for (int l = 0; l < nlevels; ++l) {
        if (degrees[l] == d && rank0 % d == 0) {
            return l;
        }
    }
    return -1;
}

/* Every (rank0, degree) of a tree on `nranks`, every rank: the map against
 * want_level; ranges that leave the world or miss the rank refused. */
static void test_group_map_tree(const int *degrees, int nlevels, int nranks, const char *what)
{
    int checked = 0, bad = 0, over_world = 0, refused = 0;

    nsp_log_set_level(NSP_LOG_NONE); /* thousands of refusals, each logged */
    for (int rank = 0; rank < nranks; ++rank) {
        for (int d = 0; d <= nranks + 1; ++d) {
            for (int r0 = -1; r0 <= nranks; ++r0) {
                nsp_group_map_t m = {-2, -2, -2};
                nsp_status_t    st = nsp_group_map(degrees, nlevels, nranks, rank, r0, d, &m);
                int inside = d >= 1 && r0 >= 0 && r0 + d <= nranks && r0 <= rank &&
                             rank < r0 + d;
                if (!inside) {
                    bad += st != NSP_ERR_INVALID_ARG || m.level != -2;
                    refused += st == NSP_ERR_INVALID_ARG;
                    continue;
                }
                int l = want_level(degrees, nlevels, r0, d);
                bad += st != NSP_OK || m.level != l || m.index != rank - r0 ||
                       m.base != (l >= 0 ? 0 : r0) ||
                       nsp_group_level(degrees, nlevels, rank, r0, d) != l;
                /* the rank map: index i is carrier rank base + i, world rank r0 + i */
                bad += m.base + m.index != (l >= 0 ? rank - r0 : rank);
                over_world += l < 0;
                ++checked;
            }
        }
    }
    nsp_log_set_level(NSP_LOG_WARN);
    tap_ok(bad == 0 && checked > 0 && over_world > 0 && refused > 0,
           "group map, %s: %d (rank, rank0, degree) checked, %d over the world, %d refused, "
           "%d wrong",
           what, checked, over_world, refused, bad);
}

static void test_group_map(void)
{
    static const int d8[] = {1, 2, 4, 8}, forest[] = {1, 2}, d12[] = {1, 3, 6, 12},
                     d24[] = {1, 2, 6, 12}, sparse[] = {1, 8}, alone[] = {1};
    nsp_group_map_t  m;

    test_group_map_tree(d8, 4, 8, "tree 1,2,4,8 on 8 ranks");
    test_group_map_tree(forest, 2, 8, "forest 1,2 on 8 ranks");
    test_group_map_tree(d12, 4, 12, "tree 1,3,6,12 on 12 ranks");
    test_group_map_tree(d24, 4, 24, "tree 1,2,6,12 on 24 ranks (forest of 2)");
    test_group_map_tree(sparse, 2, 8, "tree 1,8 on 8 ranks");
    test_group_map_tree(alone, 1, 5, "degree 1 only on 5 ranks");
    tap_is_int(nsp_group_level(d8, 4, 5, 4, 2), 1, "rank 5: [4, 6) is level 1 of 1,2,4,8");
    tap_is_int(nsp_group_level(d8, 4, 5, 5, 2), -1, "rank 5: [5, 7) is over the world");
    tap_is_int(nsp_group_level(d8, 4, 5, 4, 4), 2, "rank 5: [4, 8) is level 2 of 1,2,4,8");
    tap_is_int(nsp_group_level(d8, 4, 5, 2, 4), -1, "rank 5: [2, 6) is over the world");
    tap_is_int(nsp_group_map(d8, 4, 8, 5, 2, 4, NULL), NSP_ERR_INVALID_ARG, "NULL map");
    tap_ok(nsp_group_map(d8, 4, 8, 5, 2, 4, &m) == NSP_OK && m.level == -1 && m.base == 2 &&
               m.index == 3,
           "rank 5 in [2, 6): over the world, base 2, index 3");
}

int main(void)
{
    test_group_rank0();
    test_ring_index();
    test_degrees();
    test_group_map();
    return tap_done();
}
