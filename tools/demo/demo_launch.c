/*
 * Forking the demo's ranks (see demo.h), through the launcher shared with
 * the tests and perf tools (tools/nsp_launch.h). The launcher forks the
 * ranks first, then creates the bootstrap id and hands it to them through
 * shared memory, and only waits; every rank initialises UCX itself (UCX must
 * not be initialised before fork). The id comes after the fork because
 * nsp_get_unique_id starts the rendezvous thread, and a process forked
 * while another thread holds a lock inherits it held forever: glibc's
 * malloc guards against that, the ASan allocator of GCC 12 does not (a rank
 * hung before joining).
 */
#define _GNU_SOURCE
#include "demo.h"

#include "common/log.h"
#include "nsp_launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double demo_now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

double demo_proc_cpu(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

double demo_thread_cpu(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

double demo_comm_timeout(double fallback_s)
{
    const char *env = getenv("NSPCOMM_TIMEOUT");

    return env != NULL && env[0] != '\0' ? 0.0 : fallback_s;
}

long demo_ncores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);

    return n > 0 ? n : 1;
}

void *demo_shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes > 0 ? bytes : 1, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void demo_shared_free(void *p, size_t bytes)
{
    if (p != NULL) {
        munmap(p, bytes > 0 ? bytes : 1);
    }
}

/* Ranks not ready yet, as "2, 5" into buf. */
static void not_ready(const demo_watch_t *w, int n, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int r = 0; r < n && at + 8 < len; ++r) {
        if (!w->ready[r]) {
            at += (size_t)snprintf(buf + at, len - at, "%s%d", at > 0 ? ", " : "", r);
        }
    }
}

/* What the launcher's watch needs: the demo's watch and the rank count. */
typedef struct demo_startup {
    const demo_watch_t *watch;
    int                 nranks, started;
} demo_startup_t;

/* nsp_launch_watch_fn_t: every rank must be ready within startup_s. */
static int watch_startup(void *arg, double elapsed_s, char *why, size_t whylen)
{
    demo_startup_t *st = arg;
    char            who[256];
    int             all = 1;

    if (st->started || st->watch->ready == NULL) {
        return 0;
    }
    for (int r = 0; r < st->nranks; ++r) {
        all &= st->watch->ready[r] != 0;
    }
    st->started = all;
    if (all || elapsed_s <= st->watch->startup_s) {
        return 0;
    }
    not_ready(st->watch, st->nranks, who, sizeof(who));
    snprintf(why, whylen, "rank(s) %s did not start their communicator within %.0f s: killed "
             "all ranks", who, st->watch->startup_s);
    return 1;
}

/* The first failed rank, in words: exit code or signal, and its note. */
static nsp_status_t rank_failed(const nsp_launch_result_t *res, char (*notes)[256])
{
    const int   r    = res->first_failed;
    const char *note = notes != NULL ? notes[r] : "";
    char        fate[256];

    nsp_launch_describe(res, r, fate, sizeof(fate));
    return nsp_error(NSP_ERR_PEER_FAILED, "%s%s%s", fate, note[0] != '\0' ? ": " : "",
                     note[0] != '\0' ? note : " (see its messages above)");
}

/* Fork the ranks through the shared launcher (tools/nsp_launch.h), then
 * make the id into *id and release them; watch them. Once a rank failed,
 * the others get 10 s to finish, then are stopped (SIGTERM, SIGKILL); all
 * are reaped. *no_id = 1 when the id could not be made. */
static nsp_status_t demo_launch(int nranks, demo_rank_fn_t fn, void *arg, nsp_unique_id_t *id,
                                const demo_watch_t *watch, int *no_id)
{
    static nsp_launch_result_t res; /* large: not on the stack */
    demo_startup_t             startup = {watch, nranks, 0};
    nsp_launch_t               l;
    nsp_status_t               status;

    *no_id = 0;
    if (nranks < 1 || nranks > DEMO_MAX_RANKS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "--ranks %d: give 1 to %d", nranks,
                         DEMO_MAX_RANKS);
    }
    memset(&l, 0, sizeof(l));
    l.nranks    = nranks;
    l.timeout_s = watch->timeout_s;
    l.grace_s   = 10.0; /* the others fail on their own within their timeout */
    l.fn        = fn;
    l.arg       = arg;
    l.make      = nsp_launch_make_uid;
    l.field     = id;
    l.bytes     = sizeof(*id);
    l.watch     = watch_startup;
    l.watch_arg = &startup;
    l.out       = NSP_LAUNCH_STDOUT_STDERR; /* the parent owns stdout (the table) */
    l.notify    = 1; /* every rank names the rank that failed first */
    status      = nsp_launch_run(&l, &res);
    if (status != NSP_OK) {
        *no_id = status == NSP_ERR_BACKEND;
        return status;
    }
    if (res.segments > 0) {
        fprintf(stderr, "[nsp_demo] removed %d shared-memory segment(s) the ranks left\n",
                res.segments);
    }
    if (res.timed_out) {
        return nsp_error(NSP_ERR_TIMEOUT, "ranks still running after %.0f s: killed (a slower "
                         "machine may need --timeout)", watch->timeout_s);
    }
    if (res.first_failed >= 0) {
        return rank_failed(&res, watch->notes);
    }
    if (res.why[0] != '\0') { /* the startup watch stopped them */
        return nsp_error(NSP_ERR_TIMEOUT, "%s", res.why);
    }
    return NSP_OK;
}

nsp_status_t demo_launch_retry(int nranks, demo_rank_fn_t fn, void *arg, nsp_unique_id_t *id,
                               const demo_watch_t *watch, const char *what)
{
    nsp_status_t status = NSP_OK;

    for (int attempt = 0; attempt < 2; ++attempt) {
        int no_id = 0;
        if (attempt > 0) {
            fprintf(stderr, "[nsp_demo] %s failed (%s); trying once more\n", what,
                    nsp_last_error());
        }
        if (watch->ready != NULL) {
            for (int r = 0; r < nranks; ++r) {
                watch->ready[r] = 0;
            }
        }
        if (watch->notes != NULL) {
            memset(watch->notes, 0, sizeof(*watch->notes) * (size_t)nranks);
        }
        status = demo_launch(nranks, fn, arg, id, watch, &no_id);
        if (status == NSP_OK || no_id) { /* no id: nothing a second try would change */
            break;
        }
    }
    return status;
}
