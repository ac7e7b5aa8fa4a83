/*
 * The shared fork launcher (tools/nsp_launch.h) with real processes:
 *  - a rank that SIGSTOPs itself while another fails: the launcher returns
 *    after the grace period, the stopped rank is ended by SIGTERM (sent with
 *    SIGCONT) and reaped;
 *  - a rank that ignores SIGTERM: SIGKILL after term_s;
 *  - the launcher's timeout: every rank still running is stopped, timed_out;
 *  - the caller's watch asking to stop: every rank is stopped;
 *  - a rank that leaves a System V segment (created, never removed): the
 *    launcher removes it after the reap;
 *  - make failing: NSP_ERR_BACKEND, the reason, no rank runs its function;
 *  - NSP_LAUNCH_CPUS: rank r on the (r mod n)-th CPU of the list (its
 *    affinity is that CPU alone); a list that does not parse or names a CPU
 *    not allowed: the rank does not start;
 *  - bad arguments.
 */
#define _GNU_SOURCE
#include "nsp_launch.h"
#include "../tap.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <time.h>
#include <unistd.h>

/* What each case's ranks do. */
typedef enum { STOP_OR_FAIL, IGNORE_TERM, SLEEP, LEAVE_SEGMENT, TOUCH, AFFINITY } body_t;

typedef struct ctx {
    body_t body;
    int   *shared; /* MAP_SHARED: the segment id, or 1 when fn ran */
    char   field[16];
} ctx_t;

static void nap_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int rank_fn(int rank, int nranks, void *arg)
{
    ctx_t *c = arg;

    (void)nranks;
    switch (c->body) {
    case STOP_OR_FAIL:
        if (rank == 1) {
            raise(SIGSTOP);
            nap_s(60);
            return 0;
        }
        return rank == 0 ? 3 : 0;
    case IGNORE_TERM:
        signal(SIGTERM, SIG_IGN);
        if (rank == 0) {
            return 4;
        }
        nap_s(60);
        return 0;
    case SLEEP: nap_s(60); return 0;
    case LEAVE_SEGMENT:
        c->shared[0] = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
        return c->shared[0] >= 0 ? 0 : 1;
    case TOUCH: c->shared[0] = 1; return 0;
    case AFFINITY: {
        cpu_set_t set;
        int       only = -1;
        if (sched_getaffinity(0, sizeof(set), &set) != 0) {
            return 1;
        }
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            only = CPU_ISSET(cpu, &set) ? (only == -1 ? cpu : -2) : only;
        }
        c->shared[1 + rank] = only; /* its one CPU; -2 when several */
        return 0;
    }
    }
    return 1;
}

static int make_fails(void *out, size_t bytes, char *why, size_t whylen)
{
    (void)out;
    (void)bytes;
    snprintf(why, whylen, "no id today");
    return 1;
}

/* nsp_launch_watch_fn_t: stop after half a second. */
static int watch_half_second(void *arg, double elapsed_s, char *why, size_t whylen)
{
    (void)arg;
    if (elapsed_s < 0.5) {
        return 0;
    }
    snprintf(why, whylen, "the watch said stop");
    return 1;
}

static nsp_launch_t launch(ctx_t *c, int nranks, double timeout_s)
{
    nsp_launch_t l;

    memset(&l, 0, sizeof(l));
    l.nranks    = nranks;
    l.timeout_s = timeout_s;
    l.grace_s   = 1.0;
    l.term_s    = 1.0;
    l.fn        = rank_fn;
    l.arg       = c;
    l.out       = NSP_LAUNCH_STDOUT_STDERR;
    return l;
}

static void test_stopped(ctx_t *c, nsp_launch_result_t *res)
{
    nsp_launch_t l = launch(c, 3, 30);
    char         line[256];

    c->body = STOP_OR_FAIL;
    tap_is_int(nsp_launch_run(&l, res), NSP_OK, "stopped rank: the launch runs");
    tap_ok(res->elapsed_s < 10 && res->first_failed == 0 && !res->timed_out,
           "rank 0 failed first; the launcher returned after %.1f s (grace 1 s)", res->elapsed_s);
    tap_ok(res->rank[1].stopped && res->rank[1].signal == SIGTERM,
           "the SIGSTOPped rank was stopped by SIGTERM (with SIGCONT): %s",
           nsp_launch_describe(res, 1, line, sizeof(line)));
    tap_ok(res->rank[0].exited && res->rank[0].exit_code == 3 && res->rank[2].exited &&
               res->rank[2].exit_code == 0 && nsp_launch_failed(res) == 2,
           "the others' exit codes are kept (%d failed)", nsp_launch_failed(res));
    tap_ok(kill(res->rank[1].pid, 0) != 0, "the stopped rank is reaped");
}

static void test_escalation(ctx_t *c, nsp_launch_result_t *res)
{
    nsp_launch_t l = launch(c, 2, 30);

    c->body = IGNORE_TERM;
    nsp_launch_run(&l, res);
    tap_ok(res->rank[1].signal == SIGKILL && res->elapsed_s < 10,
           "a rank ignoring SIGTERM is SIGKILLed after term_s (%.1f s)", res->elapsed_s);
    c->body = SLEEP;
    l       = launch(c, 2, 1.5);
    nsp_launch_run(&l, res);
    tap_ok(res->timed_out && res->rank[0].stopped && res->rank[1].stopped &&
               res->rank[0].signal == SIGTERM && res->elapsed_s < 10 && res->first_failed == -1,
           "at the timeout every rank is stopped, none counted as the first failure (%.1f s): "
           "%s", res->elapsed_s, res->why);
    l           = launch(c, 2, 30);
    l.watch     = watch_half_second;
    nsp_launch_run(&l, res);
    tap_ok(!res->timed_out && res->rank[0].stopped && res->rank[1].stopped &&
               res->first_failed == -1 && strcmp(res->why, "the watch said stop") == 0 &&
               res->elapsed_s < 10,
           "the caller's watch stops every rank (%.1f s): %s", res->elapsed_s, res->why);
}

static void test_segment(ctx_t *c, nsp_launch_result_t *res)
{
    nsp_launch_t    l = launch(c, 1, 30);
    struct shmid_ds ds;

    c->body      = LEAVE_SEGMENT;
    c->shared[0] = -1;
    tap_is_int(nsp_launch_run(&l, res), NSP_OK, "segment: the launch runs");
    tap_ok(c->shared[0] >= 0 && res->segments == 1,
           "the segment a rank left is removed after the reap (%d removed)", res->segments);
    tap_ok(c->shared[0] >= 0 && shmctl(c->shared[0], IPC_STAT, &ds) != 0,
           "it is gone (IPC_STAT fails)");
}

static void test_make_and_args(ctx_t *c, nsp_launch_result_t *res)
{
    nsp_launch_t l = launch(c, 2, 5);

    c->body      = TOUCH;
    c->shared[0] = 0;
    l.make       = make_fails;
    l.field      = c->field;
    l.bytes      = sizeof(c->field);
    tap_is_int(nsp_launch_run(&l, res), NSP_ERR_BACKEND, "make fails: NSP_ERR_BACKEND");
    tap_ok(strstr(res->why, "no id today") != NULL && c->shared[0] == 0,
           "with its reason (%s), and no rank ran its function", res->why);
    l.make = NULL;
    l.nranks = 0;
    tap_is_int(nsp_launch_run(&l, res), NSP_ERR_INVALID_ARG, "0 ranks: NSP_ERR_INVALID_ARG");
    l.nranks = NSP_LAUNCH_MAX_RANKS + 1;
    tap_is_int(nsp_launch_run(&l, res), NSP_ERR_INVALID_ARG, "too many ranks");
    l.nranks = 1;
    l.make   = make_fails;
    l.field  = NULL;
    tap_is_int(nsp_launch_run(&l, res), NSP_ERR_INVALID_ARG, "make without a field");
}

/* The first two CPUs this process may use (the second -1 if only one). */
static void allowed_cpus(int cpu[2])
{
    cpu_set_t set;
    int       n = 0;

    cpu[0] = cpu[1] = -1;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return;
    }
    for (int c = 0; c < CPU_SETSIZE && n < 2; ++c) {
        if (CPU_ISSET(c, &set)) {
            cpu[n++] = c;
        }
    }
}

static void test_pinning(ctx_t *c, nsp_launch_result_t *res)
{
    nsp_launch_t l = launch(c, 3, 30);
    int          cpu[2];
    char         list[64];

    allowed_cpus(cpu);
    if (cpu[0] < 0) {
        tap_skip(4, "sched_getaffinity failed");
        return;
    }
    if (cpu[1] < 0) {
        cpu[1] = cpu[0];
    }
    c->body = AFFINITY;
    snprintf(list, sizeof(list), "%d,%d", cpu[0], cpu[1]);
    setenv("NSP_LAUNCH_CPUS", list, 1);
    tap_is_int(nsp_launch_run(&l, res), NSP_OK, "NSP_LAUNCH_CPUS=%s: 3 ranks run", list);
    tap_ok(c->shared[1] == cpu[0] && c->shared[2] == cpu[1] && c->shared[3] == cpu[0],
           "rank r on the (r mod 2)-th CPU of the list, that CPU alone (%d %d %d)",
           c->shared[1], c->shared[2], c->shared[3]);
    setenv("NSP_LAUNCH_CPUS", "0-x", 1);
    nsp_launch_run(&l, res);
    tap_ok(res->rank[0].exited && res->rank[0].exit_code == NSP_LAUNCH_EXIT_NOT_STARTED,
           "a list that does not parse: the rank does not start");
    snprintf(list, sizeof(list), "%d", CPU_SETSIZE - 1);
    setenv("NSP_LAUNCH_CPUS", list, 1);
    nsp_launch_run(&l, res);
    tap_ok(res->rank[0].exited && res->rank[0].exit_code == NSP_LAUNCH_EXIT_NOT_STARTED,
           "a CPU the process may not use (%s): the rank does not start", list);
    unsetenv("NSP_LAUNCH_CPUS");
}

int main(void)
{
    static nsp_launch_result_t res;
    ctx_t                      c;

    memset(&c, 0, sizeof(c));
    c.shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c.shared == MAP_FAILED) {
        tap_skip_all("mmap failed");
    }
    test_stopped(&c, &res);
    test_escalation(&c, &res);
    test_segment(&c, &res);
    test_make_and_args(&c, &res);
    test_pinning(&c, &res);
    munmap(c.shared, 4096);
    return tap_done();
}
