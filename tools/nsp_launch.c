/* The fork launcher of the tests, examples and perf tools; see nsp_launch.h. */
#define _GNU_SOURCE
#include "nsp_launch.h"
#include "nc_enter.h"

#include "common/log.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Whether the ranks may start (launch_gate_t.state). */
enum { GATE_WAIT = 0, GATE_OPEN = 1, GATE_FAILED = 2 };

/* Shared with the ranks: the gate, the notice a rank prints when the
 * launcher stops it, then the `bytes` bytes made after the fork. */
typedef struct launch_gate {
    int  state;       /* GATE_*, accessed with __atomic builtins */
    int  notice_len;  /* bytes of notice, written before any SIGTERM or SIGUSR1 */
    char notice[320]; /* "rank 0 was killed by signal 9 (Killed) after 4.5 s\n" */
} launch_gate_t;

/* The launcher's view of one run. */
typedef struct launch_run {
    const nsp_launch_t  *l;
    nsp_launch_result_t *res;
    launch_gate_t       *gate;
    size_t               gate_bytes;
    int                  alive[NSP_LAUNCH_MAX_RANKS];
    int                  running;
    double               t0;
} launch_run_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000 * 1000};

    nanosleep(&ts, NULL);
}

double nsp_launch_grace_s(void)
{
    const char *env = getenv("NSPCOMM_TIMEOUT");
    double      t   = env != NULL ? strtod(env, NULL) : 0.0;

    return (t > 0 && isfinite(t) && t < 1e6 ? t : 60.0) + 2.0;
}

/* ---- in a rank ------------------------------------------------------------ */

/* Wait for the launcher to open the gate, copy what it made into field.
 * 0, or the exit code. */
static int rank_wait_gate(const launch_run_t *run, pid_t parent, int rank)
{
    const double deadline = run->t0 + run->l->timeout_s;

    for (;;) {
        int state = __atomic_load_n(&run->gate->state, __ATOMIC_ACQUIRE);
        if (state == GATE_OPEN) {
            memcpy(run->l->field, run->gate + 1, run->l->bytes);
            return 0;
        }
        if (state == GATE_FAILED || getppid() != parent || now_s() > deadline) {
            fprintf(stderr, "[rank %d] not started: %s\n", rank,
                    state == GATE_FAILED ? "the launcher could not make what the ranks need"
                    : getppid() != parent ? "the launcher exited before it released the ranks"
                                          : "the launcher did not release the ranks in time");
            return NSP_LAUNCH_EXIT_NOT_STARTED;
        }
        nap_ms(1);
    }
}

static void rank_stdout(nsp_launch_stdout_t mode, int rank)
{
    if (mode == NSP_LAUNCH_STDOUT_STDERR) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
    } else if (mode == NSP_LAUNCH_STDOUT_RANK0 && rank != 0 &&
               freopen("/dev/null", "w", stdout) == NULL) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
    }
}

/* In a rank: the gate and the lines' starts, for the signal handlers (a
 * handler has no argument: these are the rank process's own). */
static const launch_gate_t *rank_gate;
static char                 rank_stopped[48], rank_reports[48];

/* The launcher's notice after `prefix` on stderr. Async-signal-safe. */
static void rank_say_notice(const char *prefix)
{
    const int len = __atomic_load_n(&rank_gate->notice_len, __ATOMIC_ACQUIRE);

    if (len > 0 && len <= (int)sizeof(rank_gate->notice)) {
        ssize_t w = write(STDERR_FILENO, prefix, strlen(prefix));
        w += write(STDERR_FILENO, rank_gate->notice, (size_t)len);
        (void)w;
    }
}

/* SIGTERM from the launcher: say why (it names the rank that failed first,
 * so every rank's last words name it, wherever the rank was blocked), then
 * die of SIGTERM. */
static void rank_on_sigterm(int sig)
{
    rank_say_notice(rank_stopped);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* SIGUSR1 from the launcher (nsp_launch_t.notify): a rank failed; say which
 * and go on (this rank fails on its own, or is stopped later). */
static void rank_on_sigusr1(int sig)
{
    (void)sig;
    rank_say_notice(rank_reports);
}

/* The handlers of a rank (before fn runs). */
static void rank_signals(const launch_run_t *run, int rank)
{
    struct sigaction sa;

    rank_gate = run->gate;
    snprintf(rank_stopped, sizeof(rank_stopped), "[rank %d] stopped by the launcher: ", rank);
    snprintf(rank_reports, sizeof(rank_reports), "[rank %d] the launcher reports: ", rank);
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = rank_on_sigterm;
    sigaction(SIGTERM, &sa, NULL);
    if (run->l->notify) {
        sa.sa_handler = rank_on_sigusr1;
        sa.sa_flags   = SA_RESTART; /* the rank goes on: restart what it can */
        sigaction(SIGUSR1, &sa, NULL);
    }
}

/* Under NSP_NETCLUSTER (scripts/netcluster.sh), move the rank into its
 * node's namespaces (still single-threaded here); 0 or NOT_STARTED. */
static int rank_enter_node(int rank, int nranks)
{
    char why[256];

    if (nc_enter_node(rank, nranks, NULL, why, sizeof(why)) != 0) {
        fprintf(stderr, "[rank %d] not started: %s\n", rank, why);
        return NSP_LAUNCH_EXIT_NOT_STARTED;
    }
    return 0;
}

/* Parse a CPU list ("0,1", "0-3,6") into cpus[max]: the count, or -1 when
 * it does not parse. */
static int cpu_list_parse(const char *text, int *cpus, int max)
{
    const char *p = text;
    int         n = 0;

    while (*p != '\0') {
        char *end;
        long  lo = strtol(p, &end, 10), hi = lo;
        if (end == p || lo < 0) {
            return -1;
        }
        if (*end == '-') {
            p  = end + 1;
            hi = strtol(p, &end, 10);
            if (end == p || hi < lo) {
                return -1;
            }
        }
        if (hi >= CPU_SETSIZE || (*end != ',' && *end != '\0') || (*end == ',' && end[1] == '\0')) {
            return -1;
        }
        for (long c = lo; c <= hi && n < max; ++c) {
            cpus[n++] = (int)c;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* NSP_LAUNCH_CPUS (see nsp_launch.h): pin the rank to its CPU; 0 or
 * NOT_STARTED (the reason on stderr). */
static int rank_pin_cpu(int rank)
{
    static int  cpus[CPU_SETSIZE];
    const char *list = getenv("NSP_LAUNCH_CPUS");
    cpu_set_t   set;
    int         n;

    if (list == NULL || list[0] == '\0') {
        return 0;
    }
    n = cpu_list_parse(list, cpus, CPU_SETSIZE);
    if (n <= 0) {
        fprintf(stderr, "[rank %d] not started: NSP_LAUNCH_CPUS=%s: give CPUs as 0,1 or 0-3\n",
                rank, list);
        return NSP_LAUNCH_EXIT_NOT_STARTED;
    }
    CPU_ZERO(&set);
    CPU_SET(cpus[rank % n], &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "[rank %d] not started: NSP_LAUNCH_CPUS=%s: CPU %d: %s\n", rank, list,
                cpus[rank % n], strerror(errno));
        return NSP_LAUNCH_EXIT_NOT_STARTED;
    }
    return 0;
}

static void rank_main(const launch_run_t *run, pid_t parent, int rank)
{
    const nsp_launch_t *l = run->l;
    int                 code;

    /* Die with the launcher, even if it is SIGKILLed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rank_signals(run, rank);
    code = getppid() != parent ? NSP_LAUNCH_EXIT_NOT_STARTED : 0;
    rank_stdout(l->out, rank);
    if (code == 0 && l->make != NULL) {
        code = rank_wait_gate(run, parent, rank);
    }
    if (code == 0) {
        code = rank_enter_node(rank, l->nranks); /* NSP_NETCLUSTER: this rank's node */
    }
    if (code == 0) {
        code = rank_pin_cpu(rank); /* NSP_LAUNCH_CPUS: this rank's core */
    }
    if (code == 0) {
        code = l->fn(rank, l->nranks, l->arg);
    }
    fflush(NULL);
    /* exit(), not _exit(), so sanitizers and valgrind check the rank too;
     * the launcher flushed its stdio before forking, so nothing repeats. */
    exit(code & 0xff);
}

/* ---- in the launcher --------------------------------------------------------- */

/* Threads of this process now (the Threads: line of /proc/self/status), 0 if unknown. */
static int thread_count(void)
{
    char  line[128];
    int   n = 0;
    FILE *f = fopen("/proc/self/status", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "Threads: %d", &n) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return n;
}

/* Fork only from a single-threaded process: give the rendezvous thread of
 * an earlier run a moment to end, and say so when another thread stays. */
static void wait_single_threaded(double max_s)
{
    double t0 = now_s();
    int    n;

    while ((n = thread_count()) > 1 && now_s() - t0 < max_s) {
        nap_ms(1);
    }
    if (n > 1) {
        fprintf(stderr, "# launcher: %d threads in this process after %.0f s; forking anyway (a "
                        "rank may inherit a lock one of them holds)\n", n, max_s);
    }
}

/* Record how rank r ended. */
static void note_end(launch_run_t *run, int r, int wstatus)
{
    nsp_launch_rank_t *rr = &run->res->rank[r];

    run->alive[r] = 0;
    --run->running;
    rr->elapsed_s = now_s() - run->t0;
    if (WIFEXITED(wstatus)) {
        rr->exited    = 1;
        rr->exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
        rr->signal = WTERMSIG(wstatus);
    }
    /* a rank the launcher stopped is not where a failure started */
    if (run->res->first_failed < 0 && !rr->stopped && !(rr->exited && rr->exit_code == 0)) {
        run->res->first_failed = r;
    }
}

/* Reap every rank that has ended (no wait). */
static void reap_ended(launch_run_t *run)
{
    for (int r = 0; r < run->l->nranks; ++r) {
        int wstatus;
        if (run->alive[r] && waitpid(run->res->rank[r].pid, &wstatus, WNOHANG) > 0) {
            note_end(run, r, wstatus);
        }
    }
}

static void signal_alive(const launch_run_t *run, int sig)
{
    for (int r = 0; r < run->l->nranks; ++r) {
        if (run->alive[r]) {
            kill(run->res->rank[r].pid, sig);
        }
    }
}

/* What the ranks print when stopped: why (the first failed rank's fate, or
 * the launcher's reason). Written before the first SIGTERM. */
static void set_notice(launch_run_t *run)
{
    launch_gate_t *g = run->gate;
    char           fate[256];
    int            n;

    if (run->res->first_failed >= 0) {
        nsp_launch_describe(run->res, run->res->first_failed, fate, sizeof(fate));
    } else {
        snprintf(fate, sizeof(fate), "%s", run->res->why[0] != '\0' ? run->res->why : "stopped");
    }
    n = snprintf(g->notice, sizeof(g->notice), "%s\n", fate);
    __atomic_store_n(&g->notice_len, n < (int)sizeof(g->notice) ? n : (int)sizeof(g->notice) - 1,
                     __ATOMIC_RELEASE);
}

/* Stop every rank still running: SIGTERM (with SIGCONT, for a stopped
 * rank), SIGKILL after term_s; reap all. */
static void stop_all(launch_run_t *run, double term_s)
{
    double until = now_s() + term_s;

    set_notice(run);

    for (int r = 0; r < run->l->nranks; ++r) {
        run->res->rank[r].stopped = run->alive[r];
    }
    signal_alive(run, SIGTERM);
    signal_alive(run, SIGCONT);
    while (run->running > 0 && now_s() < until) {
        nap_ms(5);
        reap_ended(run);
    }
    signal_alive(run, SIGKILL);
    for (int r = 0; r < run->l->nranks; ++r) {
        int wstatus;
        if (run->alive[r] && waitpid(run->res->rank[r].pid, &wstatus, 0) > 0) {
            note_end(run, r, wstatus);
        }
    }
}

/* Watch until every rank ended, or stop them: after a failure plus grace,
 * at the timeout, or when the caller's watch says so. */
static void watch_ranks(launch_run_t *run, double grace_s, double term_s)
{
    const nsp_launch_t *l         = run->l;
    double              failed_at = -1;

    for (;;) {
        double now;
        reap_ended(run);
        if (run->running == 0) {
            return;
        }
        now = now_s();
        if (failed_at < 0 && run->res->first_failed >= 0) {
            failed_at = now;
            if (l->notify) { /* every other rank says at once which rank failed */
                set_notice(run);
                signal_alive(run, SIGUSR1);
            }
        }
        if (failed_at >= 0 && now - failed_at > grace_s) {
            snprintf(run->res->why, sizeof(run->res->why), "rank %d failed; the others were "
                     "stopped %g s later", run->res->first_failed, grace_s);
            break;
        }
        if (now - run->t0 > l->timeout_s) {
            run->res->timed_out = 1;
            snprintf(run->res->why, sizeof(run->res->why), "ranks still running after %g s "
                     "were stopped", l->timeout_s);
            break;
        }
        if (l->watch != NULL &&
            l->watch(l->watch_arg, now - run->t0, run->res->why, sizeof(run->res->why)) != 0) {
            break;
        }
        nap_ms(5);
    }
    stop_all(run, term_s);
}

int nsp_launch_remove_segments(const pid_t *pids, int n)
{
    char  line[512];
    int   removed = 0;
    FILE *f       = fopen("/proc/sysvipc/shm", "r");

    /* columns: key shmid perms size cpid lpid nattch ... (first line: header) */
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        long long key, size;
        int       shmid, perms, cpid;
        if (sscanf(line, "%lld %d %o %lld %d", &key, &shmid, &perms, &size, &cpid) != 5) {
            continue;
        }
        for (int k = 0; k < n; ++k) {
            if (pids[k] > 0 && cpid == pids[k] && shmctl(shmid, IPC_RMID, NULL) == 0) {
                ++removed;
                break;
            }
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return removed;
}

/* Fork the ranks. On a fork failure, kill and reap those forked. */
static nsp_status_t fork_ranks(launch_run_t *run)
{
    const pid_t parent = getpid();

    for (int r = 0; r < run->l->nranks; ++r) {
        pid_t pid = fork();
        if (pid == 0) {
            rank_main(run, parent, r);
        }
        if (pid < 0) {
            nsp_status_t st = nsp_error(NSP_ERR_IO, "cannot fork rank %d: %s", r,
                                        strerror(errno));
            snprintf(run->res->why, sizeof(run->res->why), "%s", nsp_last_error());
            stop_all(run, 0);
            return st;
        }
        run->res->rank[r].pid = pid;
        run->alive[r]         = 1;
        ++run->running;
    }
    return NSP_OK;
}

/* Make the field and open the gate, or fail it and stop the ranks. */
static nsp_status_t open_gate(launch_run_t *run)
{
    const nsp_launch_t *l = run->l;
    char                why[200] = "";

    if (l->make(l->field, l->bytes, why, sizeof(why)) != 0) {
        __atomic_store_n(&run->gate->state, GATE_FAILED, __ATOMIC_RELEASE);
        stop_all(run, 0);
        snprintf(run->res->why, sizeof(run->res->why), "%s", why[0] != '\0' ? why : "make failed");
        return nsp_error(NSP_ERR_BACKEND, "launcher: %s", run->res->why);
    }
    memcpy(run->gate + 1, l->field, l->bytes);
    __atomic_store_n(&run->gate->state, GATE_OPEN, __ATOMIC_RELEASE);
    return NSP_OK;
}

static nsp_status_t check_launch(const nsp_launch_t *l)
{
    if (l == NULL || l->fn == NULL || l->nranks < 1 || l->nranks > NSP_LAUNCH_MAX_RANKS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "launcher: %d ranks, need 1..%d and a function",
                         l != NULL ? l->nranks : 0, NSP_LAUNCH_MAX_RANKS);
    }
    if (l->make != NULL && (l->field == NULL || l->bytes == 0)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "launcher: make without a field to make");
    }
    return NSP_OK;
}

nsp_status_t nsp_launch_run(const nsp_launch_t *l, nsp_launch_result_t *res)
{
    nsp_launch_t l2;
    launch_run_t run;
    nsp_status_t status;
    pid_t        pids[NSP_LAUNCH_MAX_RANKS];

    memset(res, 0, sizeof(*res));
    res->first_failed = -1;
    NSP_CHECK(check_launch(l));
    l2           = *l;
    l2.timeout_s = l->timeout_s > 0 ? l->timeout_s : 600.0;
    memset(&run, 0, sizeof(run));
    run.l          = &l2;
    run.res        = res;
    res->nranks    = l->nranks;
    run.gate_bytes = sizeof(launch_gate_t) + l->bytes;
    run.gate = mmap(NULL, run.gate_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (run.gate == MAP_FAILED) {
        return nsp_error(NSP_ERR_NO_MEMORY, "launcher: cannot map the ranks' gate: %s",
                         strerror(errno));
    }
    wait_single_threaded(2.0);
    fflush(NULL); /* or every rank repeats the launcher's buffered output */
    run.t0 = now_s();
    NSP_CHECK_GOTO(fork_ranks(&run), status, out_unmap);
    if (l->make != NULL) {
        NSP_CHECK_GOTO(open_gate(&run), status, out_unmap);
    }
    watch_ranks(&run, l->grace_s > 0 ? l->grace_s : nsp_launch_grace_s(),
                l->term_s > 0 ? l->term_s : 2.0);
    status = NSP_OK;
out_unmap:
    for (int r = 0; r < l->nranks; ++r) {
        pids[r] = res->rank[r].pid;
    }
    res->segments  = nsp_launch_remove_segments(pids, l->nranks);
    res->elapsed_s = now_s() - run.t0;
    munmap(run.gate, run.gate_bytes);
    return status;
}

int nsp_launch_failed(const nsp_launch_result_t *res)
{
    int n = 0;

    for (int r = 0; r < res->nranks; ++r) {
        n += !(res->rank[r].exited && res->rank[r].exit_code == 0);
    }
    return n;
}

const char *nsp_launch_describe(const nsp_launch_result_t *res, int r, char *buf, size_t len)
{
    const nsp_launch_rank_t *rr = &res->rank[r];
    const char *how = rr->stopped ? (res->timed_out ? " (still running at the timeout)"
                                                    : " (stopped by the launcher)")
                                  : "";

    if (rr->signal != 0) {
        snprintf(buf, len, "rank %d was killed by signal %d (%s) after %.1f s%s", r, rr->signal,
                 strsignal(rr->signal), rr->elapsed_s, how);
    } else if (rr->exited) {
        snprintf(buf, len, "rank %d exited with code %d after %.1f s%s", r, rr->exit_code,
                 rr->elapsed_s, how);
    } else {
        snprintf(buf, len, "rank %d was not started", r);
    }
    return buf;
}
