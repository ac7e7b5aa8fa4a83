/* A multi-process launcher for tests; see mp.h. */
#define _GNU_SOURCE
#include "mp.h"

#include "../perf/nc_enter.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Per-rank slots shared with the children during one mp_run. */
typedef struct mp_slot {
    char   note[MP_NOTE_BYTES];
    double value[MP_VALUES];
} mp_slot_t;

/* Whether the ranks of an mp_run_made may start (mp_shm_t.gate). */
enum { MP_GATE_WAIT = 0, MP_GATE_OPEN = 1, MP_GATE_FAILED = 2 };

/* The memory shared with the children during one run: the gate, the rank
 * slots, then the `bytes` bytes the parent made after the fork. */
typedef struct mp_shm {
    int       gate; /* MP_GATE_*, accessed with __atomic builtins */
    mp_slot_t slot[MP_MAX_RANKS];
} mp_shm_t;

static int        mp_my_rank = -1;
static mp_shm_t  *mp_shm;
static mp_slot_t *mp_slots; /* mp_shm->slot while a run is on */

/* The made bytes, right after the header. */
static unsigned char *mp_shm_made(void)
{
    return (unsigned char *)(mp_shm + 1);
}

double mp_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *mp_shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void mp_shared_free(void *p, size_t bytes)
{
    if (p != NULL) {
        munmap(p, bytes);
    }
}

int mp_rank(void)
{
    return mp_my_rank;
}

void mp_note(const char *fmt, ...)
{
    va_list ap;

    if (mp_slots == NULL || mp_my_rank < 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(mp_slots[mp_my_rank].note, MP_NOTE_BYTES, fmt, ap);
    va_end(ap);
    /* Also on stderr, so a human watching the log sees it in time. */
    fprintf(stderr, "[rank %d] %s\n", mp_my_rank, mp_slots[mp_my_rank].note);
}

void mp_set_value(int i, double v)
{
    if (mp_slots != NULL && mp_my_rank >= 0 && i >= 0 && i < MP_VALUES) {
        mp_slots[mp_my_rank].value[i] = v;
    }
}

/* In a rank of mp_run_made: wait for the parent to open the gate, then copy
 * what it made into this process's copy of the field. 0, or the exit code. */
static int mp_wait_gate(void *field, size_t bytes, pid_t parent, double deadline)
{
    struct timespec nap = {0, 1000 * 1000};

    for (;;) {
        int gate = __atomic_load_n(&mp_shm->gate, __ATOMIC_ACQUIRE);
        if (gate == MP_GATE_OPEN) {
            memcpy(field, mp_shm_made(), bytes);
            return 0;
        }
        if (gate == MP_GATE_FAILED) {
            mp_note("not started: the parent could not make what the ranks need");
            return MP_EXIT_NOT_STARTED;
        }
        if (getppid() != parent) {
            mp_note("not started: the parent exited before it released the ranks");
            return MP_EXIT_NOT_STARTED;
        }
        if (mp_now() > deadline) {
            mp_note("not started: the parent did not release the ranks in time");
            return MP_EXIT_NOT_STARTED;
        }
        nanosleep(&nap, NULL);
    }
}

/* Under NSP_NETCLUSTER, move the rank into its node's namespaces (still
 * single-threaded here); 0, or MP_EXIT_NOT_STARTED with a note. */
static int mp_enter_node(int rank, int nranks)
{
    char why[MP_NOTE_BYTES] = "";

    if (nc_enter_node(rank, nranks, NULL, why, sizeof(why)) != 0) {
        mp_note("not started: %s", why);
        return MP_EXIT_NOT_STARTED;
    }
    return 0;
}

static void mp_child(int rank, int nranks, mp_fn_t fn, void *arg, void *field, size_t bytes,
                     pid_t parent, double deadline)
{
    int code;

    mp_my_rank = rank;
    /* The parent owns stdout (TAP); ranks write to stderr only. */
    fflush(stdout);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    code = field != NULL ? mp_wait_gate(field, bytes, parent, deadline) : 0;
    if (code == 0) {
        code = mp_enter_node(rank, nranks); /* NSP_NETCLUSTER: this rank's node */
    }
    if (code == 0) {
        code = fn(rank, nranks, arg);
    }
    fflush(NULL);
    /* exit(), not _exit(), so sanitizers and valgrind check the rank too;
     * the parent flushed its stdio before forking, so nothing repeats. */
    exit(code & 0xff);
}

/* Threads of this process now (the Threads: line of /proc/self/status), 0 if unknown. */
static int mp_threads(void)
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

/* Fork only from a single-threaded parent (see mp_run_made in mp.h): give
 * the rendezvous thread of an earlier run a moment to finish exiting, and
 * say so on stderr when another thread stays. */
static void mp_wait_single_threaded(double max_s)
{
    struct timespec nap = {0, 1000 * 1000};
    double          t0  = mp_now();
    int             n;

    while ((n = mp_threads()) > 1 && mp_now() - t0 < max_s) {
        nanosleep(&nap, NULL);
    }
    if (n > 1) {
        fprintf(stderr, "# mp_run: %d threads in the parent after %.0f s; forking anyway (a "
                        "rank may inherit a lock one of them holds)\n",
                n, max_s);
    }
}

/* Reap what has exited; returns how many are still running. */
static int mp_reap(int nranks, const pid_t *pids, int *alive, double t0, mp_result_t *res)
{
    int running = 0;

    for (int r = 0; r < nranks; ++r) {
        int   wstatus;
        pid_t got;
        if (!alive[r]) {
            continue;
        }
        got = waitpid(pids[r], &wstatus, WNOHANG);
        if (got == pids[r]) {
            alive[r]                  = 0;
            res->rank[r].elapsed_s    = mp_now() - t0;
            if (WIFEXITED(wstatus)) {
                res->rank[r].exited    = 1;
                res->rank[r].exit_code = WEXITSTATUS(wstatus);
            } else if (WIFSIGNALED(wstatus)) {
                res->rank[r].signal = WTERMSIG(wstatus);
            }
        } else {
            ++running;
        }
    }
    return running;
}

/* Kill and reap the first n ranks (a launch that failed). */
static void mp_kill_all(const pid_t *pids, int n, double t0, mp_result_t *res)
{
    for (int k = 0; k < n; ++k) {
        kill(pids[k], SIGKILL);
        waitpid(pids[k], NULL, 0);
        res->rank[k].signal    = SIGKILL;
        res->rank[k].elapsed_s = mp_now() - t0;
    }
}

/* Fork the ranks; with `make`, make the field and open the gate; wait. */
static int mp_launch(int nranks, double timeout_s, mp_fn_t fn, void *arg, void *field,
                     size_t bytes, mp_make_fn_t make, mp_result_t *res)
{
    pid_t           pids[MP_MAX_RANKS];
    int             alive[MP_MAX_RANKS] = {0};
    size_t          shm_bytes = sizeof(mp_shm_t) + bytes;
    pid_t           parent    = getpid();
    double          t0;
    int             failed = 0;
    struct timespec nap    = {0, 5 * 1000 * 1000};

    memset(res, 0, sizeof(*res));
    res->nranks = nranks;
    if (nranks < 1 || nranks > MP_MAX_RANKS) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: %d ranks, need 1..%d", nranks,
                 MP_MAX_RANKS);
        return -1;
    }
    if (make != NULL && (field == NULL || bytes == 0)) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run_made: no field to make");
        return -1;
    }
    mp_shm = mp_shared_alloc(shm_bytes);
    if (mp_shm == NULL) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: mmap: %s", strerror(errno));
        return -1;
    }
    mp_slots = mp_shm->slot;
    mp_wait_single_threaded(2.0);
    fflush(NULL); /* or every child repeats the parent's buffered output */
    t0 = mp_now();
    for (int r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            mp_child(r, nranks, fn, arg, make != NULL ? field : NULL, bytes, parent,
                     t0 + timeout_s);
        }
        if (pids[r] < 0) {
            snprintf(res->rank[r].note, MP_NOTE_BYTES, "fork: %s", strerror(errno));
            mp_kill_all(pids, r, t0, res);
            failed = -1;
            goto out_free_shm;
        }
        alive[r] = 1;
    }
    if (make != NULL) {
        char why[MP_NOTE_BYTES - 32] = "";
        if (make(field, bytes, why, sizeof(why)) != 0) {
            __atomic_store_n(&mp_shm->gate, MP_GATE_FAILED, __ATOMIC_RELEASE);
            mp_kill_all(pids, nranks, t0, res);
            snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run_made: %s",
                     why[0] != '\0' ? why : "make failed");
            failed = -1;
            goto out_free_shm;
        }
        memcpy(mp_shm_made(), field, bytes);
        __atomic_store_n(&mp_shm->gate, MP_GATE_OPEN, __ATOMIC_RELEASE);
    }
    while (mp_reap(nranks, pids, alive, t0, res) > 0) {
        if (mp_now() - t0 > timeout_s) {
            for (int r = 0; r < nranks; ++r) {
                if (alive[r]) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    alive[r]               = 0;
                    res->rank[r].timed_out = 1;
                    res->rank[r].signal    = SIGKILL;
                    res->rank[r].elapsed_s = mp_now() - t0;
                }
            }
            break;
        }
        nanosleep(&nap, NULL);
    }
    res->elapsed_s = mp_now() - t0;
    for (int r = 0; r < nranks; ++r) {
        memcpy(res->rank[r].note, mp_slots[r].note, MP_NOTE_BYTES);
        memcpy(res->rank[r].value, mp_slots[r].value, sizeof(res->rank[r].value));
        failed += !(res->rank[r].exited && res->rank[r].exit_code == 0);
    }
out_free_shm:
    mp_shared_free(mp_shm, shm_bytes);
    mp_shm   = NULL;
    mp_slots = NULL;
    return failed;
}

int mp_run(int nranks, double timeout_s, mp_fn_t fn, void *arg, mp_result_t *res)
{
    return mp_launch(nranks, timeout_s, fn, arg, NULL, 0, NULL, res);
}

int mp_run_made(int nranks, double timeout_s, mp_fn_t fn, void *arg, void *field, size_t bytes,
                mp_make_fn_t make, mp_result_t *res)
{
    if (make == NULL) {
        memset(res, 0, sizeof(*res));
        res->nranks = nranks;
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run_made: make is NULL");
        return -1;
    }
    return mp_launch(nranks, timeout_s, fn, arg, field, bytes, make, res);
}

void mp_diag(const mp_result_t *res)
{
    for (int r = 0; r < res->nranks; ++r) {
        const mp_rank_result_t *rr = &res->rank[r];
        if (rr->timed_out) {
            printf("# rank %d: still running at the timeout, killed (%.1f s)", r, rr->elapsed_s);
        } else if (rr->signal != 0) {
            printf("# rank %d: killed by signal %d (%s) after %.1f s", r, rr->signal,
                   strsignal(rr->signal), rr->elapsed_s);
        } else {
            printf("# rank %d: exit %d after %.1f s", r, rr->exit_code, rr->elapsed_s);
        }
        printf("%s%s\n", rr->note[0] != '\0' ? ": " : "", rr->note);
    }
    fflush(stdout);
}

int mp_all_ok(const mp_result_t *res)
{
    for (int r = 0; r < res->nranks; ++r) {
        if (!res->rank[r].exited || res->rank[r].exit_code != 0) {
            mp_diag(res);
            return 0;
        }
    }
    return 1;
}
