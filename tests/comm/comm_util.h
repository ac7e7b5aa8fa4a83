/*
 * Helpers shared by the comm tests: an out-of-band allgather over shared
 * memory (what a framework's store would provide), deterministic byte
 * patterns and message sizes every rank can compute on its own, and small
 * conveniences around mp_run.
 */
#ifndef NSP_TESTS_COMM_UTIL_H_
#define NSP_TESTS_COMM_UTIL_H_

#include "nspcomm.h"
#include "../mp.h"

#include <stddef.h>
#include <stdint.h>

/* ---- out-of-band allgather over shared memory ---- */

/** Shared state of one OOB world; create in the parent before mp_run. */
typedef struct shm_oob shm_oob_t;

/** Allocate for `nranks` ranks and contributions up to `max_bytes`. NULL on failure. */
shm_oob_t *shm_oob_create(int nranks, size_t max_bytes);
void       shm_oob_destroy(shm_oob_t *oob);

/**
 * In a rank: fill *coll with callbacks over `oob` for endpoint `rank`.
 * `state` is per-rank storage that must outlive the init call.
 */
typedef struct shm_oob_rank {
    shm_oob_t *oob;
    int        rank;
    uint64_t   round;
    void      *rbuf;
    size_t     len;
} shm_oob_rank_t;
void shm_oob_coll(shm_oob_t *oob, int rank, shm_oob_rank_t *state, nsp_oob_coll_t *coll);

/* ---- patterns ---- */

/** A 64-bit mix of the arguments (splitmix64-style), for sizes and bytes. */
uint64_t cu_hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/** Byte i of the message from src to dst in exchange `iter`. */
static inline unsigned char cu_byte(int iter, int src, int dst, size_t i)
{
    return (unsigned char)(cu_hash((uint64_t)iter, (uint64_t)src, (uint64_t)dst, i / 8) >>
                           (8 * (i % 8)));
}

/** Fill buf[bytes] with the pattern of (iter, src, dst). */
void cu_fill(unsigned char *buf, size_t bytes, int iter, int src, int dst);

/** Index of the first byte that differs from the pattern, or -1. */
long cu_check(const unsigned char *buf, size_t bytes, int iter, int src, int dst);

/** Bytes from src to dst in exchange `iter`: 0 .. max_bytes, with ~1/8 zeros. */
size_t cu_count(int iter, int src, int dst, size_t max_bytes);

/* ---- communicators ---- */

/** A config with timeout_s set (others default). */
nsp_config_t cu_config(double timeout_s);

/** Report a failed nspcomm call in a rank (mp_note) and return its exit code 10. */
int cu_fail(const char *what, nsp_status_t status);

/** In a rank: join the world of `id` (cu_config(timeout_s)) and build its
 *  tree of degrees[nlevels]. 0, or cu_fail's code with nothing left made. */
int cu_world_tree(const nsp_unique_id_t *id, int rank, int nranks, double timeout_s,
                  const int *degrees, int nlevels, nsp_comm_t **comm, nsp_tree_t **tree);

#endif /* NSP_TESTS_COMM_UTIL_H_ */
