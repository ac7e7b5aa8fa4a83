/*
 * Pure index math of the tree and the ring (no processes): group starts,
 * ring neighbours for every index, shift and degree, and the degree rules.
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

int main(void)
{
    test_group_rank0();
    test_ring_index();
    test_degrees();
    return tap_done();
}
