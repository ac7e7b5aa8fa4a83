/*
 * Helpers of the planners' tests (tests/planner/planners/): random
 * long-tailed batches and an independent check of a plan's invariants
 * (written from docs/design.md §5.1 and §8 alone, not from the planner's
 * code).
 */
#ifndef NSP_TESTS_PLANNERS_CHECK_H_
#define NSP_TESTS_PLANNERS_CHECK_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** The seeds a randomized test runs: its first argument, else
 * $NSP_TEST_SEEDS, else `fallback`. */
int pc_seed_count(int argc, char **argv, int fallback);

/** splitmix64: deterministic, portable. */
uint64_t pc_next(uint64_t *state);
double   pc_unit(uint64_t *state);

/**
 * A long-tailed batch of about ranks * tokens_per_rank tokens: most lengths
 * log-normal around a few hundred tokens, a few from a Pareto tail up to
 * max_len (like the shipped corpora). *lens is malloc'ed (caller frees).
 */
int pc_batch(uint64_t *state, int ranks, int64_t tokens_per_rank, int64_t max_len,
             int64_t **lens);

/**
 * Check a plan: every sequence in exactly one group of one round; groups
 * inside the ranks with a valid degree (size / ring a Ulysses degree); per
 * round, groups pairwise disjoint
 * (disjoint = 1) or aligned and nested (disjoint = 0) with no tree node
 * twice; no rank over memory (16P/N + W + sum of s/d * (activation + ring
 * buffer) bytes, docs/reference/cost-model.md) in any round; the prediction
 * equal to a fresh evaluation. Returns 1 if all hold, else 0 with the first
 * problem in why[len].
 */
int pc_check_plan(const nsp_plan_t *plan, int disjoint, char *why, size_t len);

/** Same plan (rounds, groups, flags, sequences in order)? */
int pc_same_plan(const nsp_plan_t *a, const nsp_plan_t *b);

#endif /* NSP_TESTS_PLANNERS_CHECK_H_ */
