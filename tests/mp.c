/* A multi-process launcher for tests; see mp.h. */
#define _GNU_SOURCE
#include "mp.h"

#include "nsp_launch.h"

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

/* The memory shared with the children during one run: the rank slots. */
typedef struct mp_shm {
    mp_slot_t slot[MP_MAX_RANKS];
} mp_shm_t;

static int        mp_my_rank = -1;
static mp_shm_t  *mp_shm;
static mp_slot_t *mp_slots; /* mp_shm->slot while a run is on */

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

/* What a rank runs: the test's function, with mp_rank() and mp_note() set up. */
typedef struct mp_body {
    mp_fn_t fn;
    void   *arg;
} mp_body_t;

static int mp_child(int rank, int nranks, void *arg)
{
    const mp_body_t *body = arg;

    mp_my_rank = rank;
    return body->fn(rank, nranks, body->arg);
}

/* The launcher's account of rank r into the test's. */
static void mp_copy_rank(const nsp_launch_result_t *lr, int r, mp_rank_result_t *rr)
{
    rr->exited    = lr->rank[r].exited;
    rr->exit_code = lr->rank[r].exit_code;
    rr->signal    = lr->rank[r].signal;
    rr->timed_out = lr->rank[r].stopped;
    rr->elapsed_s = lr->rank[r].elapsed_s;
    if (lr->rank[r].exited && lr->rank[r].exit_code == NSP_LAUNCH_EXIT_NOT_STARTED &&
        mp_slots[r].note[0] == '\0') {
        snprintf(mp_slots[r].note, MP_NOTE_BYTES, "not started: no field from the parent");
    }
    memcpy(rr->note, mp_slots[r].note, MP_NOTE_BYTES);
    memcpy(rr->value, mp_slots[r].value, sizeof(rr->value));
}

/* Fork the ranks through the shared launcher (tools/nsp_launch.h); with
 * `make`, the field is made after the fork; wait. */
static int mp_launch(int nranks, double timeout_s, mp_fn_t fn, void *arg, void *field,
                     size_t bytes, mp_make_fn_t make, mp_result_t *res)
{
    static nsp_launch_result_t lr; /* large: not on the stack */
    nsp_launch_t               l;
    mp_body_t                  body = {fn, arg};
    int                        failed;

    memset(res, 0, sizeof(*res));
    res->nranks = nranks;
    if (nranks < 1 || nranks > MP_MAX_RANKS) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: %d ranks, need 1..%d", nranks,
                 MP_MAX_RANKS);
        return -1;
    }
    mp_shm = mp_shared_alloc(sizeof(mp_shm_t));
    if (mp_shm == NULL) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: mmap: %s", strerror(errno));
        return -1;
    }
    mp_slots = mp_shm->slot;
    memset(&l, 0, sizeof(l));
    l.nranks    = nranks;
    l.timeout_s = timeout_s;
    l.fn        = mp_child;
    l.arg       = &body;
    l.make      = make;
    l.field     = make != NULL ? field : NULL;
    l.bytes     = make != NULL ? bytes : 0;
    l.out       = NSP_LAUNCH_STDOUT_STDERR; /* the parent owns stdout (TAP) */
    failed      = nsp_launch_run(&l, &lr) == NSP_OK ? 0 : -1;
    res->elapsed_s = lr.elapsed_s;
    for (int r = 0; r < nranks; ++r) {
        mp_copy_rank(&lr, r, &res->rank[r]);
        failed += failed >= 0 && !(lr.rank[r].exited && lr.rank[r].exit_code == 0);
    }
    if (failed < 0) {
        snprintf(res->rank[0].note, MP_NOTE_BYTES, "mp_run: %s", lr.why[0] != '\0' ? lr.why
                 : nsp_last_error());
    }
    mp_shared_free(mp_shm, sizeof(mp_shm_t));
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
