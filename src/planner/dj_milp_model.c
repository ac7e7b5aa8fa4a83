/*
 * The disjoint planner's round model (dj_milp.h has the formulation):
 * buckets of the round's sequences, the group types, and the columns and
 * rows of the MILP, in units of the greedy's round time and of a rank's
 * activation budget.
 */
#include "planner/dj_milp.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>



void nsp_dj_round_free(dj_round_t *R)
{
    free(R->seqs);
    free(R->bucket);
    free(R->bcount);
    free(R->bt);
    free(R->bm);
    free(R->bmax);
    free(R->ycol);
    free(R->gtype);
    free(R->gfirst);
    free(R->gcount);
    free(R->xcol);
    memset(R, 0, sizeof(*R));
}

/* Buckets: singletons for the long sequences (alone on one rank they would
 * take more than 1/DJ_MILP_LONG_SHARE of the greedy's round time; at most
 * DJ_MILP_SINGLETONS), then runs of lengths within a ratio. */
void nsp_dj_milp_buckets(dj_round_t *R, double zinc)
{
    const nsp_cost_t *cost = &R->in->cost;
    int               nb = 0, q = 0;

    for (; q < R->m && q < DJ_MILP_SINGLETONS; ++q) {
        const double s = (double)R->in->lens[R->seqs[q]];
        if (nsp_cost_comp(cost, s, 1) + nsp_cost_ep_time(cost, s) < zinc / DJ_MILP_LONG_SHARE) {
            break;
        }
        R->bucket[q] = nb++;
    }
    if (q < R->m) {
        /* split the rest into at most DJ_MILP_SHORT_BUCKETS runs: a new bucket
         * when the length drops below the bucket's first / ratio, or when the
         * run holds its share of the remaining sequences */
        const int    rest  = R->m - q;
        const int    share = (rest + DJ_MILP_SHORT_BUCKETS - 1) / DJ_MILP_SHORT_BUCKETS;
        double       first = (double)R->in->lens[R->seqs[q]];
        int          in_bucket = 0, nshort = 1;
        R->bucket[q] = nb;
        for (++q, ++in_bucket; q < R->m; ++q) {
            const double s = (double)R->in->lens[R->seqs[q]];
            if (nshort < DJ_MILP_SHORT_BUCKETS &&
                (s * DJ_MILP_BUCKET_RATIO < first || in_bucket >= share)) {
                ++nb;
                ++nshort;
                first     = s;
                in_bucket = 0;
            }
            R->bucket[q] = nb;
            ++in_bucket;
        }
        ++nb;
    }
    R->nb = nb;
}

/* The model's group types: every level degree, without and (with_rc) with
 * recomputation. */
static void model_types(dj_round_t *R, int with_rc)
{
    const nsp_planner_input_t *in = R->in;

    R->ntypes = 0;
    for (int v = 0; v <= with_rc; ++v) {
        for (int k = 0; k < in->nlevels; ++k) {
            R->tdeg[R->ntypes] = in->level_degrees[k];
            R->trc[R->ntypes]  = v;
            R->ntypes++;
        }
    }
}

/* Per bucket b and type t ([nb][ntypes]): mean time bt (in zinc units),
 * memory bm (a rank's budget: the largest member for small integer buckets,
 * else the mean) and bmax; then how many groups of each type the model may
 * open (gfirst, gcount). 0, or -1 when out of memory. */
static int model_buckets(dj_round_t *R, double zinc)
{
    const nsp_planner_input_t *in   = R->in;
    const nsp_cost_t          *cost = &in->cost;
    const int                  N    = cost->cluster.ranks;

    R->bcount = calloc((size_t)R->nb, sizeof(int));
    R->bt     = calloc((size_t)R->nb * (size_t)R->ntypes, sizeof(double));
    R->bm     = calloc((size_t)R->nb * (size_t)R->ntypes, sizeof(double));
    R->bmax   = calloc((size_t)R->nb * (size_t)R->ntypes, sizeof(double));
    R->gfirst = malloc(sizeof(int) * (size_t)R->ntypes);
    R->gcount = malloc(sizeof(int) * (size_t)R->ntypes);
    if (R->bcount == NULL || R->bt == NULL || R->bm == NULL || R->bmax == NULL ||
        R->gfirst == NULL ||
        R->gcount == NULL) {
        return -1;
    }
    for (int q = 0; q < R->m; ++q) {
        const int    b = R->bucket[q];
        const double s = (double)in->lens[R->seqs[q]];
        R->bcount[b]++;
        for (int t = 0; t < R->ntypes; ++t) {
            nsp_seq_cost_t sc;
            nsp_seq_cost(cost, s, R->tdeg[t], R->trc[t], &sc);
            R->bt[b * R->ntypes + t] += (sc.comp_s + sc.bytes / nsp_cost_bw(cost, R->tdeg[t])) / zinc;
            R->bm[b * R->ntypes + t] += sc.mem_bytes / in->mem_cap;
            R->bmax[b * R->ntypes + t] = fmax(R->bmax[b * R->ntypes + t], sc.mem_bytes / in->mem_cap);
        }
    }
    R->ngroups = 0;
    for (int t = 0; t < R->ntypes; ++t) {
        int usable = 0;
        for (int b = 0; b < R->nb; ++b) {
            const int bt = b * R->ntypes + t;
            R->bt[bt] /= R->bcount[b];
            R->bm[bt] = R->bcount[b] <= DJ_MILP_INT_COUNT ? R->bmax[bt] : R->bm[bt] / R->bcount[b];
            if (R->bmax[bt] <= 1.0) {
                usable += R->bcount[b];
            }
        }
        R->gfirst[t] = R->ngroups;
        R->gcount[t] = N / R->tdeg[t] < usable ? N / R->tdeg[t] : usable;
        R->ngroups  += R->gcount[t];
    }
    return 0;
}

/* The column maps (ycol, gtype, xcol) and a row buffer idx/val wide enough
 * for the widest row; 0, or -1 when out of memory (*idx, *val set anyway). */
static int model_scratch(dj_round_t *R, int **idx, double **val)
{
    int cap_nz = 2 * R->nb + 4;
    int most   = 0; /* the widest row: a bucket over all groups */

    R->ycol  = malloc(sizeof(int) * (size_t)(R->ngroups > 0 ? R->ngroups : 1));
    R->gtype = malloc(sizeof(int) * (size_t)(R->ngroups > 0 ? R->ngroups : 1));
    R->xcol  = malloc(sizeof(int) * (size_t)R->nb * (size_t)(R->ngroups > 0 ? R->ngroups : 1));
    if (cap_nz < R->ngroups + 4) {
        cap_nz = R->ngroups + 4;
    }
    for (int t = 0; t < R->ntypes; ++t) {
        most += R->gcount[t];
    }
    if (cap_nz < most + 4) {
        cap_nz = most + 4;
    }
    *idx = malloc(sizeof(int) * (size_t)cap_nz);
    *val = malloc(sizeof(double) * (size_t)cap_nz);
    return R->ycol == NULL || R->gtype == NULL || R->xcol == NULL || *idx == NULL ||
                   *val == NULL
               ? -1
               : 0;
}

/* Columns: z, then per group y and its x (one per bucket that fits). 0 or -1. */
static int model_columns(dj_round_t *R, double zinc, double zcap, nsp_milp_t *p)
{
    const nsp_cost_t *cost = &R->in->cost;
    const int         N    = cost->cluster.ranks;

    R->zcol = nsp_milp_col(p, 0.0, NSP_MILP_INF, 1.0, 0);
    for (int t = 0; t < R->ntypes; ++t) {
        const double lat = nsp_dj_group_lat(cost, R->tdeg[t]) / zinc;
        const double area = DJ_MILP_EPS * R->tdeg[t] / N;
        for (int j = 0; j < R->gcount[t]; ++j) {
            const int g = R->gfirst[t] + j;
            R->gtype[g] = t;
            R->ycol[g]  = nsp_milp_col(p, 0.0, 1.0, area * lat, 1);
            if (R->ycol[g] < 0) {
                return -1;
            }
            for (int b = 0; b < R->nb; ++b) {
                const double tb = R->bt[b * R->ntypes + t];
                int          c  = -1;
                if (R->bmax[b * R->ntypes + t] <= 1.0 && tb + lat <= zcap) {
                    c = nsp_milp_col(p, 0.0, R->bcount[b], area * tb,
                                 R->bcount[b] <= DJ_MILP_INT_COUNT);
                    if (c < 0) {
                        return -1;
                    }
                }
                R->xcol[(size_t)b * R->ngroups + g] = c;
            }
        }
    }
    return 0;
}

/* Rows: every sequence placed. 0, -1 (no memory), or 1 when a bucket has no
 * group it fits (the model is infeasible). */
static int model_rows_placed(dj_round_t *R, nsp_milp_t *p, int *idx, double *val)
{
    for (int b = 0; b < R->nb; ++b) {
        int nz = 0;
        for (int g = 0; g < R->ngroups; ++g) {
            const int c = R->xcol[(size_t)b * R->ngroups + g];
            if (c >= 0) {
                idx[nz] = c;
                val[nz++] = 1.0;
            }
        }
        if (nz == 0) {
            return 1;
        }
        if (!nsp_milp_row(p, nz, idx, val, R->bcount[b], R->bcount[b])) {
            return -1;
        }
    }
    return 0;
}

/* Group g's x columns into idx/val, each with scale x coef[b][type of g]
 * (coef: bt or bm, [nb][ntypes]); returns how many. */
static int group_terms(const dj_round_t *R, int g, const double *coef, double scale, int *idx,
                       double *val)
{
    const int t  = R->gtype[g];
    int       nz = 0;

    for (int b = 0; b < R->nb; ++b) {
        const int c = R->xcol[(size_t)b * R->ngroups + g];
        if (c >= 0) {
            idx[nz] = c;
            val[nz++] = scale * coef[b * R->ntypes + t];
        }
    }
    return nz;
}

/* Group g's rows of time <= z and <= zcap (when open); 0 or -1. */
static int model_rows_time(dj_round_t *R, nsp_milp_t *p, int g, double lat, double zcap, int *idx,
                           double *val)
{
    int nz = group_terms(R, g, R->bt, 1.0, idx, val);

    idx[nz] = R->ycol[g];
    val[nz++] = lat;
    idx[nz] = R->zcol;
    val[nz++] = -1.0;
    if (!nsp_milp_row(p, nz, idx, val, -NSP_MILP_INF, 0.0)) {
        return -1;
    }
    val[nz - 2] = lat - zcap;   /* same terms: T[g] - zcap * y[g] <= 0 */
    return nsp_milp_row(p, nz - 1, idx, val, -NSP_MILP_INF, 0.0) ? 0 : -1;
}

/* Group g's memory row and its singletons (a lone sequence opens g); 0 or -1. */
static int model_rows_memory(dj_round_t *R, nsp_milp_t *p, int g, int *idx, double *val)
{
    int nzm = group_terms(R, g, R->bm, 1.0, idx, val);

    idx[nzm] = R->ycol[g];
    val[nzm++] = -1.0;
    if (!nsp_milp_row(p, nzm, idx, val, -NSP_MILP_INF, 0.0)) {
        return -1;
    }
    for (int b = 0; b < R->nb; ++b) {
        const int c = R->xcol[(size_t)b * R->ngroups + g];
        if (c >= 0 && R->bcount[b] == 1) {
            int    ii[2] = {c, R->ycol[g]};
            double vv[2] = {1.0, -1.0};
            if (!nsp_milp_row(p, 2, ii, vv, -NSP_MILP_INF, 0.0)) {
                return -1;
            }
        }
    }
    return 0;
}

/* Symmetry between group g and the next of its type: y[g] >= y[g+1] and
 * T[g] >= T[g+1]; 0 or -1. */
static int model_rows_symmetry(dj_round_t *R, nsp_milp_t *p, int g, double lat, int *idx,
                               double *val)
{
    const int t  = R->gtype[g];
    int       ii[2] = {R->ycol[g], R->ycol[g + 1]};
    double    vv[2] = {1.0, -1.0};
    int       nz = 0;

    if (!nsp_milp_row(p, 2, ii, vv, 0.0, NSP_MILP_INF)) {
        return -1;
    }
    for (int b = 0; b < R->nb; ++b) {
        const int c0 = R->xcol[(size_t)b * R->ngroups + g];
        const int c1 = R->xcol[(size_t)b * R->ngroups + g + 1];
        if (c0 >= 0) {
            idx[nz] = c0;
            val[nz++] = R->bt[b * R->ntypes + t];
        }
        if (c1 >= 0) {
            idx[nz] = c1;
            val[nz++] = -R->bt[b * R->ntypes + t];
        }
    }
    idx[nz] = R->ycol[g];
    val[nz++] = lat;
    idx[nz] = R->ycol[g + 1];
    val[nz++] = -lat;
    return nsp_milp_row(p, nz, idx, val, 0.0, NSP_MILP_INF) ? 0 : -1;
}

/* Rows per group: time <= z, memory, singletons, symmetry; 0 or -1. */
static int model_rows_groups(dj_round_t *R, nsp_milp_t *p, double zinc, double zcap, int *idx,
                             double *val)
{
    const nsp_cost_t *cost = &R->in->cost;

    for (int g = 0; g < R->ngroups; ++g) {
        const int    t   = R->gtype[g];
        const double lat = nsp_dj_group_lat(cost, R->tdeg[t]) / zinc;
        if (model_rows_time(R, p, g, lat, zcap, idx, val) != 0 ||
            model_rows_memory(R, p, g, idx, val) != 0) {
            return -1;
        }
        if (g + 1 < R->gfirst[t] + R->gcount[t] &&
            model_rows_symmetry(R, p, g, lat, idx, val) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Rows: the groups fit in N ranks, and their area in N ranks x z; 0 or -1. */
static int model_rows_ranks(dj_round_t *R, nsp_milp_t *p, double zinc, int *idx, double *val)
{
    const nsp_cost_t *cost = &R->in->cost;
    const int         N    = cost->cluster.ranks;
    int              *aidx;
    double           *aval;
    int               nz = 0, ok;

    for (int g = 0; g < R->ngroups; ++g) {
        idx[g] = R->ycol[g];
        val[g] = R->tdeg[R->gtype[g]];
    }
    if (!nsp_milp_row(p, R->ngroups, idx, val, -NSP_MILP_INF, N)) {
        return -1;
    }
    aidx = malloc(sizeof(int) * ((size_t)p->ncols + 1));
    aval = malloc(sizeof(double) * ((size_t)p->ncols + 1));
    ok   = aidx != NULL && aval != NULL;
    for (int g = 0; ok && g < R->ngroups; ++g) {
        const int d = R->tdeg[R->gtype[g]];
        nz += group_terms(R, g, R->bt, (double)d, aidx + nz, aval + nz);
        aidx[nz] = R->ycol[g];
        aval[nz++] = d * nsp_dj_group_lat(cost, d) / zinc;
    }
    if (ok) {
        aidx[nz] = R->zcol;
        aval[nz++] = -(double)N;
        ok = nsp_milp_row(p, nz, aidx, aval, -NSP_MILP_INF, 0.0);
    }
    free(aidx);
    free(aval);
    return ok ? 0 : -1;
}

/* Fill the model of one round; zinc is the greedy's round time (with a
 * little room: the model's bucket means differ from exact lengths).
 * NSP_ERR_INFEASIBLE (quiet: the caller keeps the greedy) when a bucket
 * fits no group. */
nsp_status_t nsp_dj_milp_model(dj_round_t *R, int with_rc, double zinc, nsp_milp_t *p)
{
    /* Units inside the model: time in greedy round times (zinc), memory in a
     * rank's activation budget: coefficients near 1 keep the LP well scaled
     * (bytes next to seconds made Clp cycle). */
    const double zcap = 1.10;
    int         *idx  = NULL;
    double      *val  = NULL;
    int          rc;

    model_types(R, with_rc);
    if (model_buckets(R, zinc) != 0 || model_scratch(R, &idx, &val) != 0 ||
        model_columns(R, zinc, zcap, p) != 0) {
        goto err_no_memory;
    }
    rc = model_rows_placed(R, p, idx, val);
    if (rc > 0) {
        free(idx);
        free(val);
        return NSP_ERR_INFEASIBLE;
    }
    if (rc < 0 || model_rows_groups(R, p, zinc, zcap, idx, val) != 0 ||
        model_rows_ranks(R, p, zinc, idx, val) != 0) {
        goto err_no_memory;
    }
    free(idx);
    free(val);
    return NSP_OK;

err_no_memory:
    free(idx);
    free(val);
    return nsp_error(NSP_ERR_NO_MEMORY, "disjoint MILP: cannot allocate a model of %d groups "
                     "x %d buckets", R->ngroups, R->nb);
}
