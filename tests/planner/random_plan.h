/*
 * Random valid plans for the planner tests, built with nsp_plan_build() the
 * way a planner would: nested (aligned power-of-two tree nodes, per-level
 * recompute), static (one degree, consecutive groups) and disjoint (a random
 * partition of the ranks per round). Every plan respects memory. Also the
 * test helpers shared by tests/planner/.
 */
#ifndef NSP_TESTS_PLANNER_RANDOM_PLAN_H_
#define NSP_TESTS_PLANNER_RANDOM_PLAN_H_

#include "nspcomm.h"

#include <stdint.h>

typedef enum { RP_NESTED = 0, RP_STATIC = 1, RP_DISJOINT = 2 } rp_kind_t;

/** splitmix64 step and helpers (deterministic, portable). */
uint64_t rp_next(uint64_t *state);
/** Uniform integer in [lo, hi]. */
int64_t rp_range(uint64_t *state, int64_t lo, int64_t hi);
/** Uniform double in [0, 1). */
double rp_unit(uint64_t *state);

/** A long-tailed length in [lo, hi]: log-uniform. */
int64_t rp_length(uint64_t *state, int64_t lo, int64_t hi);

/**
 * A random valid plan of `kind` over nseqs random long-tailed lengths in
 * [16, max_len], drawn first from *state (so the same state gives the same
 * lengths for every kind). On success *plan is owned by the caller.
 */
nsp_status_t rp_make(uint64_t *state, rp_kind_t kind, const nsp_model_t *model,
                     const nsp_cluster_t *cluster, int nseqs, int64_t max_len,
                     nsp_plan_t **plan);

/**
 * The same with rings allowed (docs/reference/cost-model.md): group sizes are the
 * powers of two up to the ranks, each group gets a random valid ring degree
 * (size / ring a valid Ulysses degree; sizes above the head count always
 * ring), and the plan carries NSP_PLAN_FLAG_RING (the lower bound with
 * rings). Every plan respects memory, ring buffers included.
 */
nsp_status_t rp_make_ring(uint64_t *state, rp_kind_t kind, const nsp_model_t *model,
                          const nsp_cluster_t *cluster, int nseqs, int64_t max_len,
                          nsp_plan_t **plan);

/** Path of a file under the source tree: $NSP_TOP_SRCDIR/rel (or the
 *  configured source dir). Returns a static buffer. */
const char *rp_srcdir_path(const char *rel);

/** Whole file as a malloc'ed NUL-terminated string, or NULL. */
char *rp_read_text(const char *path);

/** Write `text` to a new temporary file; returns its path (static buffer
 *  per call slot 0..7) or NULL. The caller unlinks it. */
const char *rp_temp_file(const char *text);

#endif /* NSP_TESTS_PLANNER_RANDOM_PLAN_H_ */
