/*
 * A small generic mixed-integer linear program in row form (milp.c) and
 * the solvers that take it (docs/design/extending.md, "A MILP solver"): one file
 * each (milp_cbc.c, milp_glpk.c), compiled when configure finds the
 * library, listed by one line of milp_table.c and chosen by name
 * (NSPCOMM_MILP). The disjoint planner's round model is built on it
 * (dj_milp*.c); nothing here knows that model.
 */
#ifndef NSP_PLANNER_MILP_H_
#define NSP_PLANNER_MILP_H_

#include "nspcomm.h"

/** A bound at or beyond this is infinite (no bound). */
#define NSP_MILP_INF 1e30

/**
 * min obj . x subject to rlo <= A x <= rhi, lb <= x <= ub, x[c] integer
 * where is_int[c]. A is stored by rows: row r's nonzeros are
 * ridx/rval[rstart[r] .. rstart[r + 1]). Zero-initialise, then add columns
 * and rows; nsp_milp_free() releases it.
 */
typedef struct nsp_milp {
    int     ncols, nrows, nnz;
    int     cap_cols, cap_rows, cap_nnz;
    double *lb, *ub, *obj;  /**< [ncols] */
    char   *is_int;         /**< [ncols] */
    int    *rstart;         /**< [nrows + 1] */
    int    *ridx;           /**< [nnz] column of each nonzero */
    double *rval;           /**< [nnz] */
    double *rlo, *rhi;      /**< [nrows] */
} nsp_milp_t;

/** Add a column; returns its index, or -1 when out of memory. */
int nsp_milp_col(nsp_milp_t *p, double lb, double ub, double obj, int is_int);

/** Add the row lo <= sum val[k] * x[idx[k]] <= hi (idx, val [nz], borrowed);
 *  1, or 0 when out of memory. */
int nsp_milp_row(nsp_milp_t *p, int nz, const int *idx, const double *val, double lo,
                 double hi);

/** Free the arrays and zero *p. */
void nsp_milp_free(nsp_milp_t *p);

/** What a solve found. */
typedef struct nsp_milp_result {
    int found;    /**< a feasible solution is in x */
    int timeout;  /**< the time limit was hit */
    int optimal;  /**< proven optimal */
} nsp_milp_result_t;

/** One solver. Defined (const) in its own file; no member is NULL. */
typedef struct nsp_milp_solver {
    const char *name;   /**< NSPCOMM_MILP's value choosing it ("cbc") */
    const char *label;  /**< for messages ("CBC") */
    /**
     * Solve p (borrowed) within limit_s seconds, single-threaded and
     * repeatable while the limit is not hit. start[ncols] (borrowed, may be
     * NULL) is a feasible solution to start from or bound by; x[ncols]
     * (caller-owned) gets the best solution when res->found. Errors:
     * NSP_ERR_NO_MEMORY (no solution is not an error: res->found = 0).
     */
    nsp_status_t (*solve)(const nsp_milp_t *p, const double *start, double limit_s, double *x,
                          nsp_milp_result_t *res);
} nsp_milp_solver_t;

/* The solvers' entries (milp_cbc.c, milp_glpk.c), listed in milp_table.c
 * where configure found them. */
extern const nsp_milp_solver_t nsp_milp_cbc;
extern const nsp_milp_solver_t nsp_milp_glpk;

/**
 * The solver to use: NSPCOMM_MILP=NAME picks a built one by name, "none"
 * none; unset (or a name this build lacks, with a warning once) the first
 * of the table (CBC if built, else GLPK). *solver is NULL when there is
 * none; then *why (a static string) says why ("NSPCOMM_MILP=none", or that
 * configure found no solver).
 */
void nsp_milp_choose(const nsp_milp_solver_t **solver, const char **why);

#endif /* NSP_PLANNER_MILP_H_ */
