/*
 * The GLPK solver (glp_intopt) of the MILP table (milp_table.c): compiled
 * when configure finds GLPK. The start solution is offered once as a
 * heuristic solution.
 */
#include "planner/milp.h"
#include "common/log.h"

#include <glpk.h>

#include <stdlib.h>
#include <string.h>

typedef struct glpk_start {
    const double *x;
    int           ncols, given;
} glpk_start_t;

/* Offer the greedy's solution once, as a heuristic solution. */
static void glpk_callback(glp_tree *tree, void *info)
{
    glpk_start_t *gs = info;

    if (glp_ios_reason(tree) == GLP_IHEUR && !gs->given && gs->x != NULL) {
        double *v = malloc(sizeof(double) * ((size_t)gs->ncols + 1));
        gs->given = 1;
        if (v != NULL) {
            memcpy(v + 1, gs->x, sizeof(double) * (size_t)gs->ncols);
            (void)glp_ios_heur_sol(tree, v);
            free(v);
        }
    }
}

static nsp_status_t solve_glpk(const nsp_milp_t *p, const double *start, double limit_s, double *x,
                               nsp_milp_result_t *res)
{
    glp_prob    *lp = glp_create_prob();
    glp_iocp     parm;
    glpk_start_t gs = {start, p->ncols, 0};
    int         *idx = malloc(sizeof(int) * ((size_t)p->ncols + 1));
    double      *val = malloc(sizeof(double) * ((size_t)p->ncols + 1));
    int          ret, st;

    if (idx == NULL || val == NULL) {
        free(idx);
        free(val);
        glp_delete_prob(lp);
        return nsp_error(NSP_ERR_NO_MEMORY, "MILP: cannot allocate %d columns", p->ncols);
    }
    glp_term_out(GLP_OFF);
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, p->ncols);
    for (int c = 0; c < p->ncols; ++c) {
        const int type = p->ub[c] >= NSP_MILP_INF ? GLP_LO :
                         p->lb[c] == p->ub[c] ? GLP_FX : GLP_DB;
        glp_set_col_bnds(lp, c + 1, type, p->lb[c], p->ub[c]);
        glp_set_obj_coef(lp, c + 1, p->obj[c]);
        if (p->is_int[c]) {
            glp_set_col_kind(lp, c + 1, GLP_IV);
        }
    }
    glp_add_rows(lp, p->nrows);
    for (int r = 0; r < p->nrows; ++r) {
        const double lo = p->rlo[r], hi = p->rhi[r];
        const int    nz = p->rstart[r + 1] - p->rstart[r];
        const int    type = (lo <= -NSP_MILP_INF && hi >= NSP_MILP_INF) ? GLP_FR :
                            lo <= -NSP_MILP_INF ? GLP_UP : hi >= NSP_MILP_INF ? GLP_LO :
                            lo == hi ? GLP_FX : GLP_DB;
        glp_set_row_bnds(lp, r + 1, type, lo, hi);
        for (int k = 0; k < nz; ++k) {
            idx[k + 1] = p->ridx[p->rstart[r] + k] + 1;
            val[k + 1] = p->rval[p->rstart[r] + k];
        }
        glp_set_mat_row(lp, r + 1, nz, idx, val);
    }
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev  = GLP_MSG_OFF;
    parm.tm_lim   = (int)(limit_s * 1000.0 + 0.5);
    parm.cb_func  = glpk_callback;
    parm.cb_info  = &gs;
    ret = glp_intopt(lp, &parm);
    st  = glp_mip_status(lp);
    res->timeout = ret == GLP_ETMLIM;
    res->optimal = st == GLP_OPT;
    res->found   = (ret == 0 || ret == GLP_ETMLIM) && (st == GLP_OPT || st == GLP_FEAS);
    if (res->found) {
        for (int c = 0; c < p->ncols; ++c) {
            x[c] = glp_mip_col_val(lp, c + 1);
        }
    }
    glp_delete_prob(lp);
    free(idx);
    free(val);
    return NSP_OK;
}

const nsp_milp_solver_t nsp_milp_glpk = {
    .name  = "glpk",
    .label = "GLPK",
    .solve = solve_glpk,
};
