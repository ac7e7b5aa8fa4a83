/*
 * perf/launch: the launcher question of the multi-rank perf/ tools, on the
 * one fork launcher of tests, examples and perf (tools/nsp_launch.h); see
 * perf/common.h.
 */
#include "common.h"

#include "common/log.h"
#include "nsp_launch.h"
#include "nsp_opt.h"

#include <stdlib.h>
#include <string.h>

/* ---- launching ----------------------------------------------------------- */

nsp_status_t perf_launcher_size(const char *prog, int forked_ranks, int *size)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS",
                                       "NSPCOMM_NRANKS", "WORLD_SIZE"};
    const char *name;
    int         rank, n;

    /* A size variable set alone must still be a rank count. */
    for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]); ++k) {
        const char *v = getenv(vars[k]);
        if (v != NULL && v[0] != '\0') {
            NSP_CHECK(nsp_opt_int(prog, vars[k], v, 1, 1 << 20, &n));
        }
    }
    if (nsp_launcher_detect(&name, &rank, &n) != NSP_OK) {
        fprintf(stderr, "%s: %s\n", prog, nsp_last_error());
        return NSP_ERR_INVALID_ARG;
    }
    if (name != NULL && n > 1 && forked_ranks > 0) {
        fprintf(stderr, "%s: started by %s as rank %d of %d, and --ranks %d would fork a "
                "separate world in every process: drop --ranks under a launcher, or run one "
                "process with --ranks\n", prog, name, rank, n, forked_ranks);
        return NSP_ERR_INVALID_ARG;
    }
    *size = name != NULL ? n : -1;
    return NSP_OK;
}

/* What the launcher saw, rank by rank, on stderr; the exit code. */
static int fork_report(const char *prog, const nsp_launch_result_t *res)
{
    char line[256];

    for (int r = 0; r < res->nranks; ++r) {
        const nsp_launch_rank_t *rr = &res->rank[r];
        if (!(rr->exited && rr->exit_code == 0)) {
            fprintf(stderr, "%s: %s\n", prog, nsp_launch_describe(res, r, line, sizeof(line)));
        }
    }
    if (res->why[0] != '\0') {
        fprintf(stderr, "%s: %s\n", prog, res->why);
    }
    if (res->segments > 0) {
        fprintf(stderr, "%s: removed %d shared-memory segment(s) the ranks left\n", prog,
                res->segments);
    }
    if (res->first_failed >= 0) {
        const nsp_launch_rank_t *rr = &res->rank[res->first_failed];
        return rr->exited && rr->exit_code != 0 ? rr->exit_code : 1;
    }
    return nsp_launch_failed(res) > 0 ? 1 : 0; /* > 0: stopped at the timeout */
}

int perf_fork_ranks(const perf_fork_t *f)
{
    nsp_launch_result_t *res = malloc(sizeof(*res)); /* large: not on the stack */
    nsp_launch_t         l;
    int                  rc;

    if (res == NULL) {
        fprintf(stderr, "%s: out of memory for the launcher's report\n", f->prog);
        return 1;
    }
    memset(&l, 0, sizeof(l));
    l.nranks    = f->nranks;
    l.timeout_s = f->timeout_s;
    l.fn        = f->fn;
    l.arg       = f->arg;
    if (f->uid != NULL) {
        l.make  = nsp_launch_make_uid; /* after the fork: its thread must not be forked */
        l.field = f->uid;
        l.bytes = f->uid_bytes;
    }
    l.out    = f->rank0_only ? NSP_LAUNCH_STDOUT_RANK0 : NSP_LAUNCH_STDOUT_KEEP;
    l.notify = 1; /* every rank names the rank that failed first */
    if (nsp_launch_run(&l, res) != NSP_OK) {
        fprintf(stderr, "%s: %s\n", f->prog, nsp_last_error());
        free(res);
        return 1;
    }
    rc = fork_report(f->prog, res);
    free(res);
    return rc;
}

