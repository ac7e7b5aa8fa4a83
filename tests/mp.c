/* A multi-process launcher for tests; see mp.h. */
#define _GNU_SOURCE
#include "mp.h"

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

static int        mp_my_rank = -1;
static mp_slot_t *mp_slots;

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

static void mp_child(int rank, int nranks, mp_fn_t fn, void *arg)
{
    int code;

    mp_my_rank = rank;
    /* The parent owns stdout (TAP); ranks write to stderr only. */
    fflush(stdout);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    code = fn(rank, nranks, arg);
    fflush(NULL);
    /* exit(), not _exit(), so sanitizers and valgrind check the rank too;
     * the parent flushed its stdio before forking, so nothing repeats. */
    exit(code & 0xff);
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

int mp_run(int nranks, double timeout_s, mp_fn_t fn, void *arg, mp_result_t *res)
{
    pid_t           pids[MP_MAX_RANKS];
    int             alive[MP_MAX_RANKS] = {0};
    size_t          slots_bytes = sizeof(mp_slot_t) * MP_MAX_RANKS;
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
    mp_slots = mp_shared_alloc(slots_bytes);
    if (mp_slots == NULL) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: mmap: %s", strerror(errno));
        return -1;
    }
    fflush(NULL); /* or every child repeats the parent's buffered output */
    t0 = mp_now();
    for (int r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            mp_child(r, nranks, fn, arg);
        }
        if (pids[r] < 0) {
            snprintf(res->rank[r].note, MP_NOTE_BYTES, "fork: %s", strerror(errno));
            for (int k = 0; k < r; ++k) {
                kill(pids[k], SIGKILL);
                waitpid(pids[k], NULL, 0);
            }
            mp_shared_free(mp_slots, slots_bytes);
            mp_slots = NULL;
            return -1;
        }
        alive[r] = 1;
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
    mp_shared_free(mp_slots, slots_bytes);
    mp_slots = NULL;
    return failed;
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
