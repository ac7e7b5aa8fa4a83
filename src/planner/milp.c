/*
 * A small generic MILP in row form (milp.h): columns and rows added one by
 * one into arrays that grow, as every solver of milp_table.c reads them.
 */
#include "planner/milp.h"

#include <stdlib.h>
#include <string.h>

void nsp_milp_free(nsp_milp_t *p)
{
    free(p->lb);
    free(p->ub);
    free(p->obj);
    free(p->is_int);
    free(p->rstart);
    free(p->ridx);
    free(p->rval);
    free(p->rlo);
    free(p->rhi);
    memset(p, 0, sizeof(*p));
}

/* Grow *ptr ([*cap] of elem bytes) to hold `need`; 1, or 0 when out of memory. */
static int grow(void **ptr, int *cap, int need, size_t elem)
{
    if (need <= *cap) {
        return 1;
    }
    {
        int   ncap = *cap > 0 ? *cap : 64;
        void *np;
        while (ncap < need) {
            ncap *= 2;
        }
        np = realloc(*ptr, elem * (size_t)ncap);
        if (np == NULL) {
            return 0;
        }
        *ptr = np;
        *cap = ncap;
    }
    return 1;
}

int nsp_milp_col(nsp_milp_t *p, double lb, double ub, double obj, int is_int)
{
    int c = p->cap_cols;

    if (!grow((void **)&p->lb, &c, p->ncols + 1, sizeof(double))) {
        return -1;
    }
    c = p->cap_cols;
    if (!grow((void **)&p->ub, &c, p->ncols + 1, sizeof(double))) {
        return -1;
    }
    c = p->cap_cols;
    if (!grow((void **)&p->obj, &c, p->ncols + 1, sizeof(double))) {
        return -1;
    }
    c = p->cap_cols;
    if (!grow((void **)&p->is_int, &c, p->ncols + 1, sizeof(char))) {
        return -1;
    }
    p->cap_cols = c;
    p->lb[p->ncols]     = lb;
    p->ub[p->ncols]     = ub;
    p->obj[p->ncols]    = obj;
    p->is_int[p->ncols] = (char)is_int;
    return p->ncols++;
}

int nsp_milp_row(nsp_milp_t *p, int nz, const int *idx, const double *val, double lo,
                 double hi)
{
    int c;

    /* the three row arrays share one capacity: grow all to nrows + 2 */
    c = p->cap_rows;
    if (!grow((void **)&p->rlo, &c, p->nrows + 2, sizeof(double))) {
        return 0;
    }
    c = p->cap_rows;
    if (!grow((void **)&p->rhi, &c, p->nrows + 2, sizeof(double))) {
        return 0;
    }
    c = p->cap_rows;
    if (!grow((void **)&p->rstart, &c, p->nrows + 2, sizeof(int))) {
        return 0;
    }
    p->cap_rows = c;
    c = p->cap_nnz;
    if (!grow((void **)&p->ridx, &c, p->nnz + nz, sizeof(int))) {
        return 0;
    }
    c = p->cap_nnz;
    if (!grow((void **)&p->rval, &c, p->nnz + nz, sizeof(double))) {
        return 0;
    }
    p->cap_nnz = c;
    if (p->nrows == 0) {
        p->rstart[0] = 0;
    }
    memcpy(p->ridx + p->nnz, idx, sizeof(int) * (size_t)nz);
    memcpy(p->rval + p->nnz, val, sizeof(double) * (size_t)nz);
    p->nnz += nz;
    p->rlo[p->nrows] = lo;
    p->rhi[p->nrows] = hi;
    p->rstart[++p->nrows] = p->nnz;
    return 1;
}
