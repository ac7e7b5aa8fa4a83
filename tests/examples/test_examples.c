/*
 * The C example (examples/nested_alltoall.c) run as its users run it: N
 * processes started with a launcher's environment (NSPCOMM_RANK,
 * NSPCOMM_NRANKS, NSPCOMM_ROOT on loopback), here forked by tests/mp.h and
 * exec'ing the built example, on 2 and 4 ranks. Every rank must exit 0 and
 * print its line with 0 wrong elements, and some rank must have received a
 * level of degree > 1 (the exchange moved data, not only level 0).
 */
#include "../mp.h"
#include "../tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RUN_TIMEOUT_S 120.0

typedef struct run {
    char exe[4096];
    char root[64];
    char out[MP_MAX_RANKS][128]; /* each rank's stdout */
} run_t;

/* A port that was free a moment ago (the kernel picks it), 0 if none. */
static int free_port(void)
{
    struct sockaddr_in sa  = {0};
    socklen_t          len = sizeof(sa);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0);
    int                port = 0;

    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

/* A rank: the launcher's variables, stdout to its file, then the example. */
static int rank_exec(int rank, int nranks, void *arg)
{
    run_t *r = arg;
    char   value[16];
    int    fd = open(r->out[rank], O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) {
        return 3;
    }
    close(fd);
    snprintf(value, sizeof(value), "%d", rank);
    setenv("NSPCOMM_RANK", value, 1);
    snprintf(value, sizeof(value), "%d", nranks);
    setenv("NSPCOMM_NRANKS", value, 1);
    setenv("NSPCOMM_ROOT", r->root, 1);
    execl(r->exe, r->exe, (char *)NULL);
    perror(r->exe);
    return 4;
}

/* Rank r's line "rank R: L levels, N head rows received, W wrong": 1 if it
 * reads with W = 0; *levels gets L. */
static int read_line(const char *path, int r, int *levels)
{
    FILE     *f = fopen(path, "r");
    int       got_rank = -1, ok;
    long long rows = -1;
    long      wrong = -1;

    ok = f != NULL && fscanf(f, "rank %d: %d levels, %lld head rows received, %ld wrong",
                             &got_rank, levels, &rows, &wrong) == 4;
    if (f != NULL) {
        fclose(f);
    }
    return ok && got_rank == r && rows >= 0 && wrong == 0;
}

static void run_example(run_t *r, int nranks)
{
    mp_result_t res;
    int         lines = 0, top_levels = 0;

    snprintf(r->root, sizeof(r->root), "127.0.0.1:%d", free_port());
    for (int k = 0; k < nranks; ++k) {
        snprintf(r->out[k], sizeof(r->out[k]), "%s/nsp_example_%d_%d.out",
                 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp", (int)getpid(), k);
    }
    mp_run(nranks, RUN_TIMEOUT_S, rank_exec, r, &res);
    tap_ok(mp_all_ok(&res), "the example on %d ranks (NSPCOMM_ROOT=%s) exits 0 on every rank "
           "(%.2f s)", nranks, r->root, res.elapsed_s);
    for (int k = 0; k < nranks; ++k) {
        int levels = 0;
        lines += read_line(r->out[k], k, &levels);
        top_levels = levels > top_levels ? levels : top_levels;
        unlink(r->out[k]);
    }
    tap_is_int(lines, nranks, "every rank prints its line with 0 wrong elements");
    tap_ok(top_levels >= 2, "the plan has a level of degree > 1 (at most %d levels on a rank)",
           top_levels);
}

int main(void)
{
    const char *build = getenv("NSP_TOP_BUILDDIR");
    run_t       r;

    memset(&r, 0, sizeof(r));
    snprintf(r.exe, sizeof(r.exe), "%s/examples/nested_alltoall", build != NULL ? build : ".");
    if (access(r.exe, X_OK) != 0) {
        tap_skip_all("%s not built", r.exe);
    }
    run_example(&r, 2);
    run_example(&r, 4);
    return tap_done();
}
