/*
 * Nested sequence-parallel attention (public API: include/nspcomm.h
 * section 9; docs/reference/attention.md), internal helpers shared with the
 * tests.
 *
 * One call (forward or backward) runs, over the levels of a layout:
 *
 *   post sequence-to-head of the inputs (every level; gated in serial mode)
 *   post head-to-sequence of the outputs (every level, gated)
 *   for each level l, ascending:
 *       wait for l's inputs, testing every other exchange meanwhile
 *       compute l: the kernel in slices (Ulysses level) or the ring
 *       open l's head-to-sequence
 *   wait for the head-to-sequences
 *
 * The head-sharded buffers live in the nsp_nested_attn_t between calls
 * (or move into an nsp_nested_attn_saved_t).
 */
#ifndef NSP_ATTN_SP_NESTED_ATTN_H_
#define NSP_ATTN_SP_NESTED_ATTN_H_

#include "nspcomm.h"

#include <stdint.h>

/**
 * Cut `n` kernel sequences, sequence x being rows [cu[x], cu[x+1]), into at
 * most `max_slices` runs of consecutive sequences of similar work (length
 * squared): bounds[0] = 0 < bounds[1] < ... < bounds[nslices] = n
 * (caller-owned, max_slices + 1 entries). Returns nslices (0 when n == 0).
 * Pure; max_slices >= 1.
 */
int nsp_nested_attn_slices(const int64_t *cu, int n, int max_slices, int *bounds);

#endif /* NSP_ATTN_SP_NESTED_ATTN_H_ */
