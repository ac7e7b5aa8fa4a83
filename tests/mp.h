/*
 * A multi-process launcher for tests: fork N real processes (ranks), run one
 * function in each, collect exit codes with a timeout, kill stragglers. It
 * runs on the fork launcher the tools share (tools/nsp_launch.h): ranks die
 * with the parent, stragglers get SIGTERM with SIGCONT (a stopped rank
 * too), then SIGKILL, every rank is reaped and the System V segments the
 * ranks left are removed.
 *
 * The parent speaks TAP; the ranks must not: mp_run() points each child's
 * stdout at stderr, so a stray printf cannot corrupt the TAP stream. A rank
 * reports back through its exit code and its slot in shared memory
 * (mp_note() for a message, mp_set_value() for numbers), which the parent
 * reads after the run.
 *
 * Typical use, for ranks that meet through a unique id:
 *     nsp_unique_id_t id;                                   // made by mp_run_uid
 *     mp_result_t res;
 *     mp_run_uid(4, 30.0, rank_fn, &id, &id, &res);
 *     tap_ok(mp_all_ok(&res), "4 ranks ...");               // diag on failure
 * where rank_fn(rank, nranks, arg) returns 0 on success. mp_run_uid forks
 * first and creates the id after (see there why); mp_run is for runs that
 * need no id made in the parent. Do not initialise UCX (or anything that
 * starts threads) in the parent before forking.
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
    int    timed_out;   /**< 1: still running when mp_run stopped it (the timeout, or
                             the grace after another rank failed) */
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
 * timeout_s for all, then stop the rest (SIGTERM + SIGCONT, SIGKILL 2 s
 * later; timed_out = 1). Once a rank failed, the others are stopped the same
 * way NSPCOMM_TIMEOUT (default 60 s) + 2 s later. Fills *res. Returns the number
 * of ranks that did not exit with code 0 (killed ones included), or -1 if
 * the launch itself failed (res->rank[0].note says why). Before forking it
 * waits up to 2 s for this process to have one thread (the rendezvous
 * thread of an earlier run ending) and warns on stderr if it still has
 * more (see mp_run_made for why).
 */
int mp_run(int nranks, double timeout_s, mp_fn_t fn, void *arg, mp_result_t *res);

/**
 * Makes, in the parent, what every rank needs before it starts (for
 * mp_run_made): write `bytes` bytes at `out`; return 0, or nonzero with the
 * reason in why[whylen].
 */
typedef int (*mp_make_fn_t)(void *out, size_t bytes, char *why, size_t whylen);

/** Exit code of a rank that never started fn (mp_run_made: nothing to start with). */
#define MP_EXIT_NOT_STARTED 120

/**
 * mp_run, but `field` (`bytes` bytes inside *arg, e.g. &arg->id) is made by
 * make() in the parent AFTER every rank is forked: the ranks wait (up to
 * timeout_s, or until the parent is gone: then they exit with
 * MP_EXIT_NOT_STARTED and a note), copy the parent's bytes into their own
 * copy of `field`, and only then run fn. The parent's *field holds the same
 * bytes. If make fails, the ranks are killed and -1 is returned with the
 * reason in res->rank[0].note.
 *
 * Why: make may start a thread (nsp_get_unique_id starts the rendezvous
 * server), and a process forked while another of its threads holds a lock
 * inherits that lock held forever. glibc's malloc takes care of that around
 * fork; the ASan allocator of GCC 12's libasan does not: a rank forked while
 * the server thread was allocating hung at its next allocation (in UCX's
 * init, after it had said hello to the rendezvous), and the others failed
 * with "rank(s) N did not take part in a bootstrap allgather".
 */
int mp_run_made(int nranks, double timeout_s, mp_fn_t fn, void *arg, void *field, size_t bytes,
                mp_make_fn_t make, mp_result_t *res);

struct nsp_unique_id;
/**
 * mp_run_made with nsp_get_unique_id() as make (tests/mp_uid.c; link
 * libnspcomm): the ranks meet through a fresh id at `id`, a field of *arg.
 * Its rendezvous thread runs in the parent until the ranks finished
 * bootstrap, so nothing forks while it is alive.
 */
int mp_run_uid(int nranks, double timeout_s, mp_fn_t fn, void *arg, struct nsp_unique_id *id,
               mp_result_t *res);

struct nsp_comm;
struct nsp_tree;
/**
 * In a rank (tests/mp_uid.c; link libnspcomm): join the world of `nranks`
 * ranks through `id` (config timeout_s) and create its tree: levels from the
 * topology, or only {1, nranks} when `sparse` (other degrees then run over
 * the world). 0, or -1 with the error in mp_note() and nothing left created.
 */
int mp_comm_tree(const struct nsp_unique_id *id, int rank, int nranks, double timeout_s,
                 int sparse, struct nsp_comm **comm, struct nsp_tree **tree);

/** In a rank: destroy what mp_comm_tree created and release the nested
 *  all-to-all's cache (so leak checks see none of it). */
void mp_comm_tree_free(struct nsp_comm *comm, struct nsp_tree *tree);

/** 1 if every rank exited with 0; otherwise prints "# rank r: ..." diagnostics. */
int mp_all_ok(const mp_result_t *res);

/** Print one "# rank r: exit/signal/timeout, elapsed, note" line per rank. */
void mp_diag(const mp_result_t *res);

/** In a rank: the rank mp_run gave this process (-1 in the parent). */
int mp_rank(void);

/** In a rank: record a message for the parent (printf-style; last one wins). */
void mp_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* In a rank function: note why the check failed (mp_note) and jump to the
 * function's `out` label, where it releases what it holds. */
#define FAIL(...)             \
    do {                      \
        mp_note(__VA_ARGS__); \
        goto out;             \
    } while (0)

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
