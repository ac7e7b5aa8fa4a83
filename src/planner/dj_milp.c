/*
 * The disjoint planner's MILP improvement (nsp_dj_milp_improve,
 * disjoint.h): every round of the greedy's assignment re-solved as
 * FlexSP's MILP (dj_milp.h) by the solver milp_table.c chooses, starting
 * from the greedy; a round is replaced only if the solution, mapped to
 * sequences and polished, is faster.
 *
 * Determinism: single-threaded solves are repeatable while the solver ends
 * before the time limit (optimal, or a bound reached); a plan whose round
 * hit the limit carries NSP_PLAN_FLAG_SOLVER_TIMEOUT and may differ between
 * runs. NSPCOMM_MILP=cbc|glpk|none picks the solver (nsp_milp_choose; default:
 * CBC if built, else GLPK); none forces the greedy.
 */
#include "planner/dj_milp.h"
#include "common/log.h"

#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Exact time of round r of an assignment. */
static nsp_status_t round_time_of(const nsp_planner_input_t *in, const nsp_route_assign_t *a,
                                  int r, double *t)
{
    double *rs = malloc(sizeof(double) * (size_t)(a->nrounds > 0 ? a->nrounds : 1));
    int     ok;

    if (rs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint MILP: cannot allocate %d rounds",
                         a->nrounds);
    }
    NSP_CHECK(nsp_dj_round_times(in, a, rs, &ok));
    *t = ok ? rs[r] : DBL_MAX;
    free(rs);
    return NSP_OK;
}

static nsp_status_t improve_round(const nsp_planner_input_t *in, const nsp_milp_solver_t *solver,
                                  nsp_route_assign_t *a, int r, double zinc, int *timeout)
{
    dj_round_t         R;
    nsp_milp_t             p;
    nsp_route_assign_t trial;
    double            *start = NULL, *x = NULL, kept = 0.0;
    nsp_milp_result_t      res;
    nsp_status_t       status;
    int                with_rc = 0;

    memset(&R, 0, sizeof(R));
    memset(&p, 0, sizeof(p));
    R.in = in;
    R.seqs   = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    R.bucket = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    if (R.seqs == NULL || R.bucket == NULL) {
        nsp_dj_round_free(&R);
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint MILP: cannot allocate a round");
    }
    for (int k = 0; k < in->nseqs; ++k) {   /* longest first */
        const int i = in->order[k];
        if (a->round[i] == r) {
            R.seqs[R.m++] = i;
            kept += (double)in->lens[i] * in->cost.act_bytes_keep;
            with_rc |= a->rc[i];
        }
    }
    if (R.m == 0) {
        nsp_dj_round_free(&R);
        return NSP_OK;
    }
    /* recomputed variants only where memory is tight */
    with_rc |= kept > 0.8 * in->mem_cap * in->cost.cluster.ranks;
    nsp_dj_milp_buckets(&R, zinc);
    status = nsp_dj_milp_model(&R, with_rc, zinc, &p);
    if (status == NSP_ERR_INFEASIBLE) {
        status = NSP_OK;   /* some bucket has no usable pair: keep the greedy */
        goto out;
    }
    if (status < 0) {
        goto out;
    }
    start = malloc(sizeof(double) * (size_t)p.ncols);
    x     = malloc(sizeof(double) * (size_t)p.ncols);
    NSP_CHECK_GOTO(nsp_route_assign_alloc(&trial, in->nseqs), status, out);
    if (start == NULL || x == NULL) {
        nsp_route_assign_free(&trial);
        status = nsp_error(NSP_ERR_NO_MEMORY, "disjoint MILP: cannot allocate %d columns",
                           p.ncols);
        goto out;
    }
    {
        const int    have_start = nsp_dj_milp_start(&R, a, &p, zinc, start);
        const double t0 = nsp_wtime();
        memset(&res, 0, sizeof(res));
        status = solver->solve(&p, have_start ? start : NULL, in->time_limit_s, x, &res);
        if (status < 0) {
            nsp_route_assign_free(&trial);
            goto out;
        }
        *timeout |= res.timeout;
        if (res.found) {
            double t;
            memcpy(trial.round, a->round, sizeof(int) * (size_t)in->nseqs);
            memcpy(trial.rank0, a->rank0, sizeof(int) * (size_t)in->nseqs);
            memcpy(trial.size, a->size, sizeof(int) * (size_t)in->nseqs);
            memcpy(trial.rc, a->rc, sizeof(int) * (size_t)in->nseqs);
            trial.nrounds = a->nrounds;
            t = nsp_dj_milp_map(&R, x, zinc, r, &trial);
            NSP_DEBUG("disjoint MILP (%s) round %d: %d seqs, %d buckets, %d groups, %d cols, "
                      "%d rows, start %s, %s%s in %.3f s: greedy %.6f, MILP %.6f s per layer",
                      solver->label, r, R.m, R.nb, R.ngroups, p.ncols, p.nrows,
                      have_start ? "yes" : "no",
                      res.optimal ? "optimal" : "feasible", res.timeout ? " (time limit)" : "",
                      nsp_wtime() - t0, zinc, t);
            if (t < DBL_MAX) {
                /* the bucketed counts leave slack: polish before comparing */
                double rs_one = DBL_MAX;
                NSP_CHECK_GOTO(nsp_dj_polish(in, &trial), status, out_trial);
                NSP_CHECK_GOTO(round_time_of(in, &trial, r, &rs_one), status, out_trial);
                t = rs_one;
            }
            if (t < zinc * (1.0 - 1e-9)) {
                memcpy(a->rank0, trial.rank0, sizeof(int) * (size_t)in->nseqs);
                memcpy(a->size, trial.size, sizeof(int) * (size_t)in->nseqs);
                memcpy(a->rc, trial.rc, sizeof(int) * (size_t)in->nseqs);
            }
        } else {
            NSP_DEBUG("disjoint MILP (%s) round %d: no solution in %.3f s (%d cols), greedy kept",
                      solver->label, r, nsp_wtime() - t0, p.ncols);
        }
    }
out_trial:
    nsp_route_assign_free(&trial);
out:
    free(start);
    free(x);
    nsp_milp_free(&p);
    nsp_dj_round_free(&R);
    return status;
}

nsp_status_t nsp_dj_milp_improve(const nsp_planner_input_t *in, nsp_route_assign_t *a,
                                 unsigned *flags)
{
    static atomic_int        warned;   /* say it once per process */
    const nsp_milp_solver_t *solver;
    const char              *why;
    double                  *rs;
    int                      mem_ok, timeout = 0;
    nsp_status_t             status = NSP_OK;

    nsp_milp_choose(&solver, &why);
    if (solver == NULL) {
        if (!atomic_exchange(&warned, 1)) {
            NSP_WARN("disjoint planner: no MILP solver (%s): using its greedy instead; plans "
                     "are flagged greedy-fallback. Install coinor-libcbc-dev or libglpk-dev "
                     "and reconfigure for FlexSP's MILP", why);
        }
        *flags |= NSP_PLAN_FLAG_GREEDY_FALLBACK;
        return NSP_OK;
    }
    rs = malloc(sizeof(double) * (size_t)(a->nrounds > 0 ? a->nrounds : 1));
    if (rs == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "disjoint MILP: cannot allocate %d rounds",
                         a->nrounds);
    }
    NSP_CHECK_GOTO(nsp_dj_round_times(in, a, rs, &mem_ok), status, out);
    for (int r = 0; r < a->nrounds; ++r) {
        NSP_CHECK_GOTO(improve_round(in, solver, a, r, rs[r], &timeout), status, out);
    }
    if (timeout) {
        *flags |= NSP_PLAN_FLAG_SOLVER_TIMEOUT;
    }
out:
    free(rs);
    return status;
}
