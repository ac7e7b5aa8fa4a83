/*
 * Forking the demo's ranks (see demo.h). The parent forks the ranks first,
 * then creates the bootstrap id and hands it to them through shared memory,
 * and only waits; every rank initialises UCX itself (UCX must not be
 * initialised before fork). The id comes after the fork because
 * nsp_get_unique_id starts the rendezvous thread, and a process forked
 * while another thread holds a lock inherits it held forever: glibc's
 * malloc guards against that, the ASan allocator of GCC 12 does not (a rank
 * hung before joining).
 */
#define _GNU_SOURCE
#include "demo.h"
#include "nc_enter.h"

#include "common/log.h"

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

static void kill_all(const pid_t *pids, const int *alive, int n)
{
    for (int r = 0; r < n; ++r) {
        if (alive[r]) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    }
}

/* A failed rank, in words: exit code or signal, and its note. */
static nsp_status_t rank_failed(int rank, int wstatus, char (*notes)[256])
{
    const char *note = notes != NULL ? notes[rank] : "";

    if (WIFSIGNALED(wstatus)) {
        return nsp_error(NSP_ERR_PEER_FAILED, "rank %d was killed by signal %d (%s)%s%s", rank,
                         WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)),
                         note[0] != '\0' ? ": " : "", note);
    }
    return nsp_error(NSP_ERR_PEER_FAILED, "rank %d exited with code %d%s%s", rank,
                     WEXITSTATUS(wstatus), note[0] != '\0' ? ": " : "",
                     note[0] != '\0' ? note : " (see its messages above)");
}

static void kill_rest(const pid_t *pids, int *alive, int n, int *running)
{
    kill_all(pids, alive, n);
    for (int r = 0; r < n; ++r) {
        alive[r] = 0;
    }
    *running = 0;
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

/* The bootstrap id the parent hands to its ranks after forking them (shared). */
enum { GATE_WAIT = 0, GATE_OPEN = 1, GATE_FAILED = 2 };
typedef struct demo_gate {
    int             state; /* GATE_*, accessed with __atomic builtins */
    nsp_unique_id_t id;
} demo_gate_t;

/* In a rank: wait for the parent's id, copy it to *id; 0, or an exit code
 * with a note when it never comes (the parent failed or exited). */
static int await_id(const demo_gate_t *gate, pid_t parent, double deadline, nsp_unique_id_t *id,
                    char *note, size_t note_len)
{
    struct timespec nap = {0, 1000 * 1000};

    for (;;) {
        int state = __atomic_load_n(&gate->state, __ATOMIC_ACQUIRE);
        if (state == GATE_OPEN) {
            *id = gate->id;
            return 0;
        }
        if (state == GATE_FAILED || getppid() != parent || demo_now() > deadline) {
            if (note != NULL) {
                snprintf(note, note_len, "not started: no bootstrap id from the parent");
            }
            fprintf(stderr, "[nsp_demo] a rank got no bootstrap id from the parent: not "
                            "started\n");
            return 1;
        }
        nanosleep(&nap, NULL);
    }
}

/* Under NSP_NETCLUSTER (scripts/netcluster.sh), enter rank r's node. */
static int demo_enter_node(int r, int nranks)
{
    char why[256];

    if (nc_enter_node(r, nranks, NULL, why, sizeof(why)) != 0) {
        fprintf(stderr, "[nsp_demo] rank %d not started: %s\n", r, why);
        return 1;
    }
    return 0;
}

/* Fork the ranks, then make the id into *id and release them; watch them.
 * *no_id = 1 when the id could not be made (the ranks are killed). */
static nsp_status_t demo_launch(int nranks, demo_rank_fn_t fn, void *arg, nsp_unique_id_t *id,
                                const demo_watch_t *watch, int *no_id)
{
    pid_t           pids[DEMO_MAX_RANKS];
    pid_t           parent = getpid();
    int             alive[DEMO_MAX_RANKS] = {0}, running, started = 0;
    double          t0 = demo_now(), failed_at = -1;
    double          id_deadline = t0 + (watch->startup_s > 0 ? watch->startup_s : 60.0);
    struct timespec nap = {0, 5 * 1000 * 1000};
    nsp_status_t    status = NSP_OK;
    demo_gate_t    *gate;

    *no_id = 0;
    if (nranks < 1 || nranks > DEMO_MAX_RANKS) {
        return nsp_error(NSP_ERR_INVALID_ARG, "--ranks %d: give 1 to %d", nranks,
                         DEMO_MAX_RANKS);
    }
    gate = demo_shared_alloc(sizeof(*gate));
    if (gate == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot map shared memory for the ranks' start");
    }
    fflush(NULL); /* or every child repeats the parent's buffered output */
    for (int r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int code;
            /* The parent owns stdout (the table); ranks talk on stderr. */
            dup2(STDERR_FILENO, STDOUT_FILENO);
            code = await_id(gate, parent, id_deadline, id,
                            watch->notes != NULL ? watch->notes[r] : NULL,
                            sizeof(*watch->notes));
            if (code == 0) {
                code = demo_enter_node(r, nranks); /* NSP_NETCLUSTER: the rank's node */
            }
            if (code == 0) {
                code = fn(r, nranks, arg);
            }
            fflush(NULL);
            exit(code & 0xff); /* exit(), not _exit(): sanitizers check the rank too */
        }
        if (pids[r] < 0) {
            status = nsp_error(NSP_ERR_IO, "cannot fork rank %d: %s", r, strerror(errno));
            kill_all(pids, alive, r);
            goto out_free_gate;
        }
        alive[r] = 1;
    }
    status = nsp_get_unique_id(&gate->id);
    if (status != NSP_OK) {
        __atomic_store_n(&gate->state, GATE_FAILED, __ATOMIC_RELEASE);
        kill_all(pids, alive, nranks);
        *no_id = 1;
        goto out_free_gate;
    }
    *id = gate->id;
    __atomic_store_n(&gate->state, GATE_OPEN, __ATOMIC_RELEASE);
    running = nranks;
    while (running > 0) {
        double now = demo_now();
        for (int r = 0; r < nranks; ++r) {
            int wstatus;
            if (!alive[r] || waitpid(pids[r], &wstatus, WNOHANG) != pids[r]) {
                continue;
            }
            alive[r] = 0;
            --running;
            if (status == NSP_OK && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)) {
                status    = rank_failed(r, wstatus, watch->notes);
                failed_at = now;
            }
        }
        if (running == 0) {
            break;
        }
        if (!started && watch->ready != NULL) {
            int all = 1;
            for (int r = 0; r < nranks; ++r) {
                all &= watch->ready[r] != 0;
            }
            started = all;
            if (!all && now - t0 > watch->startup_s && status == NSP_OK) {
                char who[256];
                not_ready(watch, nranks, who, sizeof(who));
                kill_rest(pids, alive, nranks, &running);
                status = nsp_error(NSP_ERR_TIMEOUT, "rank(s) %s did not start their "
                                   "communicator within %.0f s: killed all ranks", who,
                                   watch->startup_s);
                goto out_free_gate;
            }
        }
        if (failed_at >= 0 && now - failed_at > 10.0) {
            /* one rank failed: the others fail on their own within their
             * timeout; do not wait for it */
            kill_rest(pids, alive, nranks, &running);
            break;
        }
        if (now - t0 > watch->timeout_s) {
            kill_rest(pids, alive, nranks, &running);
            status = nsp_error(NSP_ERR_TIMEOUT, "ranks still running after %.0f s: killed "
                               "(a slower machine may need --timeout)", watch->timeout_s);
            goto out_free_gate;
        }
        nanosleep(&nap, NULL);
    }
out_free_gate:
    demo_shared_free(gate, sizeof(*gate));
    return status;
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
