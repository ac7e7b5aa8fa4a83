/*
 * The fork launcher of nspcomm's tests, examples and perf tools: one copy
 * of "fork N local ranks, run a function in each, watch them, leave nothing
 * behind".
 *
 *  - Ranks are real processes (fork). Each dies with the launcher
 *    (PR_SET_PDEATHSIG), so a killed launcher leaves no rank behind.
 *  - With `make`, the launcher forks first and then makes `bytes` bytes at
 *    `field` (e.g. nsp_get_unique_id, which starts a thread: forking beside
 *    a live thread may hand a child a lock held forever); the ranks wait for
 *    them (up to timeout_s, or until the launcher is gone) and copy them
 *    into their own `field` before fn runs.
 *  - Watching: when a rank fails (a nonzero exit or a signal), the others get
 *    grace_s to fail on their own (with their own message, which names the
 *    peer they waited for), then are stopped; a stopped rank prints the
 *    launcher's notice naming the rank that failed first (SIGTERM handler),
 *    and with `notify` every rank prints it at once (SIGUSR1). At timeout_s every rank still running is
 *    stopped. Stopping is SIGTERM plus SIGCONT (a SIGSTOPped rank acts on
 *    neither until it is continued), then SIGKILL after term_s. Every rank is
 *    reaped before nsp_launch_run returns.
 *  - Pinning: with NSP_LAUNCH_CPUS set (a CPU list, e.g. "0,1" or "0-3"),
 *    rank r runs on the (r mod n)-th CPU of the list (sched_setaffinity
 *    before fn, so every thread the rank starts, UCX's progress thread too,
 *    stays on that CPU): one core per rank for wall-time measurements. A
 *    list that does not parse, or names a CPU the process may not use, is
 *    a rank not started, with the reason on stderr.
 *  - Leftovers: the System V shared-memory segments the ranks created (UCX's
 *    sysv transport makes them; a rank that is killed or stopped cannot
 *    remove them) are removed once every rank is reaped.
 *
 * Not part of libnspcomm: linked into tests, examples and perf only.
 */
#ifndef NSP_TOOLS_LAUNCH_H_
#define NSP_TOOLS_LAUNCH_H_

#include "nspcomm.h"

#include <stddef.h>
#include <sys/types.h>

#define NSP_LAUNCH_MAX_RANKS 256

/** Exit code of a rank that never started fn (no field from the launcher). */
#define NSP_LAUNCH_EXIT_NOT_STARTED 120

/** A rank's body: return 0 on success, any other value is its exit code. */
typedef int (*nsp_launch_fn_t)(int rank, int nranks, void *arg);

/** Makes, after the fork, what every rank needs: write `bytes` bytes at
 *  `out`; 0, or nonzero with the reason in why[whylen]. */
typedef int (*nsp_launch_make_fn_t)(void *out, size_t bytes, char *why, size_t whylen);

/** Called by the launcher every few ms while ranks run, `elapsed_s` after
 *  the fork: 0 to go on, nonzero to stop every rank (reason in why[whylen]). */
typedef int (*nsp_launch_watch_fn_t)(void *arg, double elapsed_s, char *why, size_t whylen);

/** Where a rank's stdout goes. */
typedef enum nsp_launch_stdout {
    NSP_LAUNCH_STDOUT_KEEP   = 0, /**< shared with the launcher */
    NSP_LAUNCH_STDOUT_STDERR = 1, /**< to stderr (the launcher owns stdout, e.g. TAP) */
    NSP_LAUNCH_STDOUT_RANK0  = 2  /**< rank 0 keeps it, the others write to /dev/null */
} nsp_launch_stdout_t;

/** What to launch. Zero-initialise, then set fields; 0 means the default. */
typedef struct nsp_launch {
    int                   nranks;    /**< 1..NSP_LAUNCH_MAX_RANKS */
    double                timeout_s; /**< the whole run (default 600) */
    double                grace_s;   /**< after a failure (default nsp_launch_grace_s()) */
    double                term_s;    /**< SIGTERM to SIGKILL (default 2) */
    nsp_launch_fn_t       fn;
    void                 *arg;
    nsp_launch_make_fn_t  make;      /**< optional, with field and bytes */
    void                 *field;     /**< inside *arg: where each rank gets the made bytes */
    size_t                bytes;
    nsp_launch_watch_fn_t watch;     /**< optional */
    void                 *watch_arg;
    nsp_launch_stdout_t   out;
    int                   notify;    /**< 1: at the first failure, SIGUSR1 every other rank:
                                          it prints "[rank r] the launcher reports: rank 0
                                          was killed by signal 9 ..." and goes on (0 for
                                          tests that time their ranks' own errors) */
} nsp_launch_t;

/** What one rank did, as the launcher saw it. */
typedef struct nsp_launch_rank {
    pid_t  pid;
    int    exited;    /**< 1: exited (exit_code valid) */
    int    exit_code;
    int    signal;    /**< the signal that ended it, 0 if none */
    int    stopped;   /**< 1: still running when the launcher stopped it */
    double elapsed_s; /**< fork to reap */
} nsp_launch_rank_t;

typedef struct nsp_launch_result {
    int               nranks;
    double            elapsed_s;
    int               first_failed; /**< the first rank seen failing on its own (not
                                         stopped by the launcher), -1 if none */
    int               timed_out;    /**< 1: stopped at timeout_s */
    int               segments;     /**< System V segments of the ranks removed afterwards */
    char              why[256];     /**< why the launcher stopped ranks, or "" */
    nsp_launch_rank_t rank[NSP_LAUNCH_MAX_RANKS];
} nsp_launch_result_t;

/**
 * Fork l->nranks ranks running l->fn(rank, nranks, l->arg), watch them as
 * described above, reap all, remove their segments; fill *res. Returns
 * NSP_OK when the launch happened (ranks may still have failed: see
 * nsp_launch_failed), NSP_ERR_INVALID_ARG (bad nranks, make without field),
 * NSP_ERR_NO_MEMORY (the shared gate), NSP_ERR_IO (fork failed: the ranks
 * forked are killed and reaped) or the make failure (NSP_ERR_BACKEND, the
 * reason in res->why). Call it from a single-threaded process: it waits up
 * to 2 s for a thread of an earlier run to end, then warns on stderr.
 */
nsp_status_t nsp_launch_run(const nsp_launch_t *l, nsp_launch_result_t *res);

/**
 * A nsp_launch_make_fn_t that makes a fresh bootstrap id (nsp_get_unique_id)
 * into `out` (bytes == sizeof(nsp_unique_id_t)): its rendezvous thread starts
 * in the launcher after the fork (tools/nsp_launch_uid.c; link libnspcomm).
 */
int nsp_launch_make_uid(void *out, size_t bytes, char *why, size_t whylen);

/** Ranks that did not exit with 0. */
int nsp_launch_failed(const nsp_launch_result_t *res);

/** Rank r's fate in words ("rank 1 was killed by signal 9 (Killed) after
 *  3.2 s") into buf[len]; returns buf. */
const char *nsp_launch_describe(const nsp_launch_result_t *res, int r, char *buf, size_t len);

/** The default grace after a failure: NSPCOMM_TIMEOUT (or the library's
 *  60 s) plus 2 s, so the others fail on their own timeout first. */
double nsp_launch_grace_s(void);

/** The System V segments created by any of pids[0..n-1] (creator pid),
 *  removed (IPC_RMID); returns how many. For the launcher and its tests. */
int nsp_launch_remove_segments(const pid_t *pids, int n);

#endif /* NSP_TOOLS_LAUNCH_H_ */
