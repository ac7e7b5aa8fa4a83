/*
 * A multi-process launcher for tests: fork N real processes (ranks), run one
 * function in each, collect exit codes with a timeout, kill stragglers.
 *
 * The parent speaks TAP; the ranks must not: mp_run() points each child's
 * stdout at stderr, so a stray printf cannot corrupt the TAP stream. A rank
 * reports back through its exit code and its slot in shared memory
 * (mp_note() for a message, mp_set_value() for numbers), which the parent
 * reads after the run.
 *
 * Typical use:
 *     nsp_unique_id_t id;  nsp_get_unique_id(&id);          // parent serves
 *     mp_result_t res;
 *     mp_run(4, 30.0, rank_fn, &id, &res);
 *     tap_ok(mp_all_ok(&res), "4 ranks ...");               // diag on failure
 * where rank_fn(rank, nranks, arg) returns 0 on success. Do not initialise
 * UCX in the parent before forking.
 */
#ifndef NSP_TESTS_MP_H_
#define NSP_TESTS_MP_H_

#include <stddef.h>

#define MP_MAX_RANKS 64
#define MP_NOTE_BYTES 512
#define MP_VALUES 16

/** What one rank did, as the parent saw it. */
typedef struct mp_rank_result {
    int    exited;      /**< 1: exited normally (exit_code valid) */
    int    exit_code;
    int    signal;      /**< signal that killed it, 0 if none */
    int    timed_out;   /**< 1: still running at the timeout, killed by mp_run */
    double elapsed_s;   /**< from the fork to its exit as seen by the parent */
    char   note[MP_NOTE_BYTES];   /**< last mp_note() of the rank */
    double value[MP_VALUES];      /**< mp_set_value() slots, 0 by default */
} mp_rank_result_t;

typedef struct mp_result {
    int              nranks;
    double           elapsed_s;   /**< whole run */
    mp_rank_result_t rank[MP_MAX_RANKS];
} mp_result_t;

/** A rank's body: return 0 on success, any other value is its exit code. */
typedef int (*mp_fn_t)(int rank, int nranks, void *arg);

/**
 * Fork `nranks` processes running fn(rank, nranks, arg); wait up to
 * timeout_s for all, then SIGKILL the rest. Fills *res. Returns the number
 * of ranks that did not exit with code 0 (killed ones included), or -1 if
 * the launch itself failed (res->rank[0].note says why).
 */
int mp_run(int nranks, double timeout_s, mp_fn_t fn, void *arg, mp_result_t *res);

/** 1 if every rank exited with 0; otherwise prints "# rank r: ..." diagnostics. */
int mp_all_ok(const mp_result_t *res);

/** Print one "# rank r: exit/signal/timeout, elapsed, note" line per rank. */
void mp_diag(const mp_result_t *res);

/** In a rank: the rank mp_run gave this process (-1 in the parent). */
int mp_rank(void);

/** In a rank: record a message for the parent (printf-style; last one wins). */
void mp_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** In a rank: record a number in slot i (0 <= i < MP_VALUES). */
void mp_set_value(int i, double v);

/**
 * Memory shared by the parent and every rank forked after this call (zeroed,
 * MAP_SHARED | MAP_ANONYMOUS). Free with mp_shared_free. NULL on failure.
 */
void *mp_shared_alloc(size_t bytes);
void  mp_shared_free(void *p, size_t bytes);

/** Monotonic seconds. */
double mp_now(void);

#endif /* NSP_TESTS_MP_H_ */
