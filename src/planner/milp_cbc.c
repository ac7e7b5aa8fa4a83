/*
 * The CBC solver (COIN-OR, Cbc_C_Interface.h) of the MILP table
 * (milp_table.c): compiled when configure finds CBC, in a convenience
 * library of its own so that only this file sees CBC's include path.
 * NSPCOMM_MILP_DUMP=FILE writes each model as MPS, NSPCOMM_MILP_LOG=N sets
 * CBC's log level (debugging aids).
 */
#include "planner/milp.h"
#include "common/log.h"

#include <Cbc_C_Interface.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nsp_status_t solve_cbc(const nsp_milp_t *p, const double *start, double limit_s, double *x,
                              nsp_milp_result_t *res)
{
    /* Cbc_loadProblem takes columns: transpose the rows. */
    int        *cstart = calloc((size_t)p->ncols + 1, sizeof(int));
    int        *cidx   = malloc(sizeof(int) * (size_t)(p->nnz > 0 ? p->nnz : 1));
    double     *cval   = malloc(sizeof(double) * (size_t)(p->nnz > 0 ? p->nnz : 1));
    int        *fill   = malloc(sizeof(int) * (size_t)p->ncols);
    Cbc_Model  *m;

    if (cstart == NULL || cidx == NULL || cval == NULL || fill == NULL) {
        free(cstart);
        free(cidx);
        free(cval);
        free(fill);
        return nsp_error(NSP_ERR_NO_MEMORY, "MILP: cannot allocate %d nonzeros", p->nnz);
    }
    for (int k = 0; k < p->nnz; ++k) {
        cstart[p->ridx[k] + 1]++;
    }
    for (int c = 0; c < p->ncols; ++c) {
        cstart[c + 1] += cstart[c];
        fill[c] = cstart[c];
    }
    for (int r = 0; r < p->nrows; ++r) {
        for (int k = p->rstart[r]; k < p->rstart[r + 1]; ++k) {
            const int c = p->ridx[k];
            cidx[fill[c]]   = r;
            cval[fill[c]++] = p->rval[k];
        }
    }
    m = Cbc_newModel();
    Cbc_loadProblem(m, p->ncols, p->nrows, cstart, cidx, cval, p->lb, p->ub, p->obj,
                    p->rlo, p->rhi);
    for (int c = 0; c < p->ncols; ++c) {
        if (p->is_int[c]) {
            Cbc_setInteger(m, c);
        }
    }
    if (getenv("NSPCOMM_MILP_DUMP") != NULL) {   /* debugging aid: the model as MPS */
        Cbc_writeMps(m, getenv("NSPCOMM_MILP_DUMP"));
    }
    Cbc_setLogLevel(m, getenv("NSPCOMM_MILP_LOG") != NULL ? atoi(getenv("NSPCOMM_MILP_LOG")) : 0);
    Cbc_setMaximumSeconds(m, limit_s);
    {
        /* Cbc_solve runs CbcMain1, whose own "seconds" parameter (default:
         * none) overrides the model's limit: set it there too. */
        char secs[32];
        snprintf(secs, sizeof(secs), "%.3f", limit_s);
        Cbc_setParameter(m, "sec", secs);
    }
    /* CBC 2.10's feasibility pump and diving heuristics can run far past the
     * time limit on these models (seen: minutes); keep the ones that stop. */
    Cbc_setParameter(m, "heur", "off");
    Cbc_setParameter(m, "rins", "on");
    Cbc_setParameter(m, "round", "on");
    Cbc_setParameter(m, "threads", "1");      /* repeatable search */
    Cbc_setParameter(m, "randomCbcSeed", "1");
    if (start != NULL) {
        /* The greedy as the incumbent bound: nodes that cannot beat it are
         * pruned. (CBC 2.10's MIP start can run far past the time limit on
         * these models, so the start itself is not handed over.) */
        double obj = 0.0;
        for (int c = 0; c < p->ncols; ++c) {
            obj += p->obj[c] * start[c];
        }
        Cbc_setCutoff(m, obj * (1.0 - 1e-7));
    }
    Cbc_solve(m);
    res->timeout = Cbc_isSecondsLimitReached(m);
    res->optimal = Cbc_isProvenOptimal(m);
    {
        const double *sol = Cbc_bestSolution(m);
        res->found = sol != NULL;
        if (sol != NULL) {
            memcpy(x, sol, sizeof(double) * (size_t)p->ncols);
        }
    }
    Cbc_deleteModel(m);
    free(cstart);
    free(cidx);
    free(cval);
    free(fill);
    return NSP_OK;
}

const nsp_milp_solver_t nsp_milp_cbc = {
    .name  = "cbc",
    .label = "CBC",
    .solve = solve_cbc,
};
