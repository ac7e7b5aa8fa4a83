/*
 * nsp_rdv_perf: time of the TCP rendezvous alone. Each repetition creates
 * an id (nsp_get_unique_id), forks RANKS processes that join, run 3
 * bootstrap allgathers of 64 bytes (what a UCX world's init does: host
 * identities, address lengths, addresses) and close; the time is from
 * creating the id to the last rank's exit, as the parent sees it, and the
 * slowest rank's own join-to-close time. Built against any nspcomm whose
 * internal bootstrap has this signature, so two versions can be compared
 * side by side in one run.
 *
 * Usage: nsp_rdv_perf [RANKS [REPS]]   (default 8 ranks, 30 repetitions)
 * Output: one table row and one JSON line.
 */
#include "common.h"
#include "nspcomm.h"
#include "transport/bootstrap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PART_BYTES 64
#define MAX_RANKS  64
#define MAX_REPS   1000

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A rank: join, 3 allgathers, close; its own time into *t. Exit code. */
static int rank_main(const nsp_unique_id_t *id, int rank, int nranks, double *t)
{
    unsigned char    part[PART_BYTES], all[MAX_RANKS * PART_BYTES];
    nsp_bootstrap_t *bs = NULL;
    double           t0 = now_s();
    nsp_status_t     st = nsp_bootstrap_tcp_join(id, rank, nranks, 20.0, &bs);

    memset(part, rank, sizeof(part));
    for (int k = 0; st == NSP_OK && k < 3; ++k) {
        st = nsp_bootstrap_allgather(bs, part, all, sizeof(part));
    }
    for (int r = 0; st == NSP_OK && r < nranks; ++r) {
        st = all[r * PART_BYTES] == (unsigned char)r ? NSP_OK : NSP_ERR_MISMATCH;
    }
    if (bs != NULL) {
        nsp_bootstrap_close(bs, st == NSP_OK);
    }
    *t = now_s() - t0;
    return st == NSP_OK ? 0 : 1;
}

/* One repetition: *wall (parent's view), *slowest (ranks' own). 0 or -1. */
static int one_rep(int nranks, double *shared, double *wall, double *slowest)
{
    nsp_unique_id_t id;
    double          t0 = now_s();
    int             bad = 0;

    if (nsp_get_unique_id(&id) != NSP_OK) {
        fprintf(stderr, "nsp_get_unique_id: %s\n", nsp_last_error());
        return -1;
    }
    fflush(stdout);
    for (int r = 0; r < nranks; ++r) {
        pid_t pid = fork();
        if (pid == 0) {
            _exit(rank_main(&id, r, nranks, &shared[r]));
        }
        bad += pid < 0;
    }
    for (int r = 0; r < nranks; ++r) {
        int status = 0;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ++bad;
        }
    }
    nsp_bootstrap_tcp_wait_server(&id, now_s() + 5.0);
    *wall    = now_s() - t0;
    *slowest = 0;
    for (int r = 0; r < nranks; ++r) {
        *slowest = shared[r] > *slowest ? shared[r] : *slowest;
    }
    return bad == 0 ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The table row and the JSON line (perf/common.h) of the sorted times. */
static void report(int nranks, int reps, double *walls, double *ranks_s)
{
    static const perf_col_t cols[] = {{"ranks", "", 5, -1, 0},      {"reps", "", 5, -1, 0},
                                      {"median_ms", "", 12, 3, 0},  {"p90_ms", "", 12, 3, 0},
                                      {"max_ms", "", 12, 3, 0},     {"rank_med_ms", "", 14, 3, 0}};
    nsp_json_writer_t       w;

    qsort(walls, (size_t)reps, sizeof(double), cmp_double);
    qsort(ranks_s, (size_t)reps, sizeof(double), cmp_double);
    perf_cell_t row[] = {PERF_NUM(nranks), PERF_NUM(reps), PERF_NUM(1e3 * walls[reps / 2]),
                         PERF_NUM(1e3 * walls[(reps * 9) / 10]), PERF_NUM(1e3 * walls[reps - 1]),
                         PERF_NUM(1e3 * ranks_s[reps / 2])};
    perf_table_header(stdout, cols, 6);
    perf_table_row(stdout, cols, 6, row);
    nsp_json_writer_init(&w, stdout, 0);
    nsp_json_begin_object(&w, NULL, 1);
    nsp_json_string(&w, "tool", "nsp_rdv_perf");
    nsp_json_int(&w, "ranks", nranks);
    nsp_json_int(&w, "reps", reps);
    perf_json_num(&w, "median_ms", 1e3 * walls[reps / 2]);
    perf_json_num(&w, "p90_ms", 1e3 * walls[(reps * 9) / 10]);
    perf_json_num(&w, "max_ms", 1e3 * walls[reps - 1]);
    perf_json_num(&w, "rank_median_ms", 1e3 * ranks_s[reps / 2]);
    nsp_json_end(&w);
    nsp_json_writer_finish(&w);
    putchar('\n');
}

/* A whole number in [lo, hi] from text, or -1. */
static long arg_long(const char *text, long lo, long hi)
{
    char *end;
    long  v;

    errno = 0;
    v     = strtol(text, &end, 10);
    return errno != 0 || end == text || *end != '\0' || v < lo || v > hi ? -1 : v;
}

int main(int argc, char **argv)
{
    static double walls[MAX_REPS], ranks_s[MAX_REPS];
    long          nranks = argc > 1 ? arg_long(argv[1], 1, MAX_RANKS) : 8;
    long          reps   = argc > 2 ? arg_long(argv[2], 1, MAX_REPS) : 30;
    double       *shared;

    if (nranks < 0 || reps < 0 || argc > 3) {
        fprintf(stderr, "usage: nsp_rdv_perf [RANKS (1..%d) [REPS (1..%d)]]\n", MAX_RANKS,
                MAX_REPS);
        return 2;
    }
    shared = mmap(NULL, MAX_RANKS * sizeof(double), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (long i = 0; i < reps; ++i) {
        if (one_rep((int)nranks, shared, &walls[i], &ranks_s[i]) != 0) {
            fprintf(stderr, "repetition %ld failed\n", i);
            return 1;
        }
    }
    report((int)nranks, (int)reps, walls, ranks_s);
    return 0;
}
