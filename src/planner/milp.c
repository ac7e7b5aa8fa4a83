/*
 * The disjoint planner's MILP (FlexSP's formulation, one round at a time),
 * solved by CBC (Cbc_C_Interface.h) or GLPK, with the greedy as its start.
 *
 * Sets. Degrees k (the tree's: 1, 2, 4, ...), recompute variants v (kept
 * only, plus recomputed when the round's memory is tight); a group type is
 * tau = (k, v). Candidate groups (tau, j), j < N / d_tau. Buckets b: the
 * longest sequences of the round one by one (exact), the others grouped by
 * length (ratio <= 1.5 inside a bucket, at most DJ_MILP_SHORT_BUCKETS).
 *
 * Data. n_b sequences in bucket b; t[b,tau] the mean time one of them adds
 * to a group of type tau (rcf*comp(s,d) + ep(s/d) + rcb*a2a_bytes(s,d)/B(d),
 * per layer); m[b,tau] the largest activation bytes per rank one of them
 * needs; lat[tau] = 4a(d) per used group; cap the activation bytes a rank
 * may hold.
 *
 * Variables. y[tau,j] in {0,1}: group used (its size is the choice of
 * type: FlexSP's group-size choice variables); x[b,tau,j] in {0..n_b}:
 * sequences of bucket b in that group, integer for the long sequences and
 * small buckets, a continuous share for buckets of more than
 * DJ_MILP_INT_COUNT short sequences (mean memory per sequence there, the
 * largest one's elsewhere); z >= 0: the round's time.
 *
 *   min  z + eps * sum_{tau,j} d_tau * T[tau,j] / N          (eps = 1e-3)
 *   T[tau,j] = sum_b t[b,tau] x[b,tau,j] + lat[tau] y[tau,j]  <= z
 *   sum_{tau,j} x[b,tau,j] = n_b                                 (every sequence placed)
 *   sum_b m[b,tau] x[b,tau,j] <= cap * y[tau,j]                 (memory; links x to y)
 *   x[b,tau,j] <= y[tau,j]                                      (singleton buckets)
 *   sum_{tau,j} d_tau y[tau,j] <= N                              (disjoint groups fit)
 *   T[tau,j] <= zinc * y[tau,j]                   (no group slower than the greedy)
 *   sum_{tau,j} d_tau T[tau,j] <= N z             (area: ranks are disjoint)
 *   y[tau,j] >= y[tau,j+1],  T[tau,j] >= T[tau,j+1]              (symmetry breaking)
 *
 * The last two are valid for every solution better than the greedy's round
 * time zinc and make the LP bound strong (without them a fractional y carries
 * a whole group's time and the bound collapses).
 *
 * Pairs (b, tau) whose memory does not fit, or whose time alone exceeds the
 * greedy's round time, get no variable. Groups of one size pack aligned into
 * [0, N) largest first, so the count constraint is exact for aligned
 * disjoint groups. The solution's counts are mapped to concrete sequences
 * (longest first to the least loaded group that still wants one of its
 * bucket) and evaluated exactly; it replaces the greedy's round only if
 * faster. The small eps term prefers, among equally fast groupings, the one
 * that spends the least rank-time.
 *
 * Determinism: single-threaded solves are repeatable while the solver ends
 * before the time limit (optimal, or a bound reached); a plan whose round
 * hit the limit carries NSP_PLAN_FLAG_SOLVER_TIMEOUT and may differ between
 * runs. NSPCOMM_MILP=cbc|glpk|none picks the solver (default: CBC if built,
 * else GLPK); none forces the greedy.
 */
#include "planner/disjoint.h"
#include "common/log.h"

#include "config.h"

#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef NSP_HAVE_CBC
#include <Cbc_C_Interface.h>
#endif
#ifdef NSP_HAVE_GLPK
#include <glpk.h>
#endif

/* Sequences of a round that get a bucket of their own (longest first). */
#define DJ_MILP_SINGLETONS 24
/* A sequence is long (a bucket of its own) above this share of the round. */
#define DJ_MILP_LONG_SHARE 8.0
/* Buckets for the other sequences. */
#define DJ_MILP_SHORT_BUCKETS 12
/* Largest length ratio inside one short bucket. */
#define DJ_MILP_BUCKET_RATIO 1.5
/* Buckets of at most this many sequences get integer counts; larger buckets
 * of short sequences get continuous shares (they are nearly divisible), which
 * keeps the branch and bound on the long sequences and the group choice. */
#define DJ_MILP_INT_COUNT 4
/* Weight of the area term in the objective. */
#define DJ_MILP_EPS 1e-3

/* ---- a small generic MILP in row form -------------------------------------- */

typedef struct milp {
    int     ncols, nrows, nnz;
    int     cap_cols, cap_rows, cap_nnz;
    double *lb, *ub, *obj;  /* [ncols] */
    char   *is_int;         /* [ncols] */
    int    *rstart;         /* [nrows + 1] */
    int    *ridx;           /* [nnz] */
    double *rval;           /* [nnz] */
    double *rlo, *rhi;      /* [nrows] */
} milp_t;

#define MILP_INF 1e30

static void milp_free(milp_t *p)
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

/* Add a column; returns its index or -1 (no memory). */
static int milp_col(milp_t *p, double lb, double ub, double obj, int is_int)
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

/* Add a row lo <= sum val*x[idx] <= hi; 0 on no memory. */
static int milp_row(milp_t *p, int nz, const int *idx, const double *val, double lo, double hi)
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

/* ---- solver backends ----------------------------------------------------------- */

typedef enum { SOLVER_NONE = 0, SOLVER_CBC = 1, SOLVER_GLPK = 2 } solver_kind_t;

static solver_kind_t solver_choice(void)
{
    const char *env = getenv("NSPCOMM_MILP");

    if (env != NULL && strcmp(env, "none") == 0) {
        return SOLVER_NONE;
    }
#ifdef NSP_HAVE_GLPK
    if (env != NULL && strcmp(env, "glpk") == 0) {
        return SOLVER_GLPK;
    }
#endif
#ifdef NSP_HAVE_CBC
    return SOLVER_CBC;
#elif defined(NSP_HAVE_GLPK)
    return SOLVER_GLPK;
#else
    return SOLVER_NONE;
#endif
}

static const char *solver_name(solver_kind_t k)
{
    return k == SOLVER_CBC ? "CBC" : k == SOLVER_GLPK ? "GLPK" : "none";
}

/* Solve; x[ncols] gets the best solution. *found: a feasible solution came
 * back; *timeout: the limit was hit. start[ncols] may be NULL. */
typedef struct milp_result {
    int found, timeout, optimal;
} milp_result_t;

#ifdef NSP_HAVE_CBC
static nsp_status_t solve_cbc(const milp_t *p, const double *start, double limit_s, double *x,
                              milp_result_t *res)
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
#endif

#ifdef NSP_HAVE_GLPK
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

static nsp_status_t solve_glpk(const milp_t *p, const double *start, double limit_s, double *x,
                               milp_result_t *res)
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
        const int type = p->ub[c] >= MILP_INF ? GLP_LO :
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
        const int    type = (lo <= -MILP_INF && hi >= MILP_INF) ? GLP_FR :
                            lo <= -MILP_INF ? GLP_UP : hi >= MILP_INF ? GLP_LO :
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
#endif

static nsp_status_t milp_solve(solver_kind_t kind, const milp_t *p, const double *start,
                               double limit_s, double *x, milp_result_t *res)
{
    memset(res, 0, sizeof(*res));
#ifdef NSP_HAVE_CBC
    if (kind == SOLVER_CBC) {
        return solve_cbc(p, start, limit_s, x, res);
    }
#endif
#ifdef NSP_HAVE_GLPK
    if (kind == SOLVER_GLPK) {
        return solve_glpk(p, start, limit_s, x, res);
    }
#endif
    (void)p;
    (void)start;
    (void)limit_s;
    (void)x;
    return nsp_error(NSP_ERR_UNSUPPORTED, "MILP solver %s is not built in", solver_name(kind));
}

/* ---- the round model --------------------------------------------------------------- */

typedef struct dj_round {
    const nsp_planner_input_t *in;
    int     m;            /* sequences of the round */
    int    *seqs;         /* [m] longest first */
    int    *bucket;       /* [m] bucket of each */
    int     nb;           /* buckets */
    int    *bcount;       /* [nb] */
    int     ntypes;       /* degrees x variants */
    int     tdeg[2 * NSP_PLANNER_MAX_LEVELS];
    int     trc[2 * NSP_PLANNER_MAX_LEVELS];
    double *bt;           /* [nb * ntypes] mean time per sequence */
    double *bm;           /* [nb * ntypes] memory per rank per sequence in the rows */
    double *bmax;         /* [nb * ntypes] the largest one's (does it fit at all) */
    /* columns */
    int    *ycol;         /* [ngroups] */
    int    *gtype;        /* [ngroups] */
    int    *gfirst;       /* [ntypes] first group of each type */
    int    *gcount;       /* [ntypes] */
    int     ngroups;
    int    *xcol;         /* [nb * ngroups] column or -1 */
    int     zcol;
} dj_round_t;

static void round_free(dj_round_t *R)
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
static void make_buckets(dj_round_t *R, double zinc)
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
static int model_columns(dj_round_t *R, double zinc, double zcap, milp_t *p)
{
    const nsp_cost_t *cost = &R->in->cost;
    const int         N    = cost->cluster.ranks;

    R->zcol = milp_col(p, 0.0, MILP_INF, 1.0, 0);
    for (int t = 0; t < R->ntypes; ++t) {
        const double lat = nsp_dj_group_lat(cost, R->tdeg[t]) / zinc;
        const double area = DJ_MILP_EPS * R->tdeg[t] / N;
        for (int j = 0; j < R->gcount[t]; ++j) {
            const int g = R->gfirst[t] + j;
            R->gtype[g] = t;
            R->ycol[g]  = milp_col(p, 0.0, 1.0, area * lat, 1);
            if (R->ycol[g] < 0) {
                return -1;
            }
            for (int b = 0; b < R->nb; ++b) {
                const double tb = R->bt[b * R->ntypes + t];
                int          c  = -1;
                if (R->bmax[b * R->ntypes + t] <= 1.0 && tb + lat <= zcap) {
                    c = milp_col(p, 0.0, R->bcount[b], area * tb,
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
static int model_rows_placed(dj_round_t *R, milp_t *p, int *idx, double *val)
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
        if (!milp_row(p, nz, idx, val, R->bcount[b], R->bcount[b])) {
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
static int model_rows_time(dj_round_t *R, milp_t *p, int g, double lat, double zcap, int *idx,
                           double *val)
{
    int nz = group_terms(R, g, R->bt, 1.0, idx, val);

    idx[nz] = R->ycol[g];
    val[nz++] = lat;
    idx[nz] = R->zcol;
    val[nz++] = -1.0;
    if (!milp_row(p, nz, idx, val, -MILP_INF, 0.0)) {
        return -1;
    }
    val[nz - 2] = lat - zcap;   /* same terms: T[g] - zcap * y[g] <= 0 */
    return milp_row(p, nz - 1, idx, val, -MILP_INF, 0.0) ? 0 : -1;
}

/* Group g's memory row and its singletons (a lone sequence opens g); 0 or -1. */
static int model_rows_memory(dj_round_t *R, milp_t *p, int g, int *idx, double *val)
{
    int nzm = group_terms(R, g, R->bm, 1.0, idx, val);

    idx[nzm] = R->ycol[g];
    val[nzm++] = -1.0;
    if (!milp_row(p, nzm, idx, val, -MILP_INF, 0.0)) {
        return -1;
    }
    for (int b = 0; b < R->nb; ++b) {
        const int c = R->xcol[(size_t)b * R->ngroups + g];
        if (c >= 0 && R->bcount[b] == 1) {
            int    ii[2] = {c, R->ycol[g]};
            double vv[2] = {1.0, -1.0};
            if (!milp_row(p, 2, ii, vv, -MILP_INF, 0.0)) {
                return -1;
            }
        }
    }
    return 0;
}

/* Symmetry between group g and the next of its type: y[g] >= y[g+1] and
 * T[g] >= T[g+1]; 0 or -1. */
static int model_rows_symmetry(dj_round_t *R, milp_t *p, int g, double lat, int *idx,
                               double *val)
{
    const int t  = R->gtype[g];
    int       ii[2] = {R->ycol[g], R->ycol[g + 1]};
    double    vv[2] = {1.0, -1.0};
    int       nz = 0;

    if (!milp_row(p, 2, ii, vv, 0.0, MILP_INF)) {
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
    return milp_row(p, nz, idx, val, 0.0, MILP_INF) ? 0 : -1;
}

/* Rows per group: time <= z, memory, singletons, symmetry; 0 or -1. */
static int model_rows_groups(dj_round_t *R, milp_t *p, double zinc, double zcap, int *idx,
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
static int model_rows_ranks(dj_round_t *R, milp_t *p, double zinc, int *idx, double *val)
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
    if (!milp_row(p, R->ngroups, idx, val, -MILP_INF, N)) {
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
        ok = milp_row(p, nz, aidx, aval, -MILP_INF, 0.0);
    }
    free(aidx);
    free(aval);
    return ok ? 0 : -1;
}

/* Fill the model of one round; zinc is the greedy's round time (with a
 * little room: the model's bucket means differ from exact lengths).
 * NSP_ERR_INFEASIBLE (quiet: the caller keeps the greedy) when a bucket
 * fits no group. */
static nsp_status_t round_model(dj_round_t *R, int with_rc, double zinc, milp_t *p)
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

/* ---- greedy start and solution mapping ----------------------------------------- */

typedef struct gload {
    double load;
    int    g;
} gload_t;

static int cmp_gload_desc(const void *a, const void *b)
{
    const gload_t *x = a, *y = b;

    if (x->load != y->load) {
        return x->load > y->load ? -1 : 1;
    }
    return (x->g > y->g) - (x->g < y->g);
}

/* The greedy's groups of round r as a start vector; 0 if they do not map
 * (a degree outside the tree, too many groups of a type, a pruned pair). */
static int start_vector(const dj_round_t *R, const nsp_route_assign_t *a, const milp_t *p,
                        double zinc, double *x)
{
    const nsp_planner_input_t *in = R->in;
    const int                  N  = in->cost.cluster.ranks;
    gload_t                   *loads = malloc(sizeof(gload_t) * (size_t)N);
    int                       *type_of = malloc(sizeof(int) * (size_t)N);
    int                       *slot_of = malloc(sizeof(int) * (size_t)N);
    int                        ok = 1;

    if (loads == NULL || type_of == NULL || slot_of == NULL) {
        ok = 0;
        goto out;
    }
    memset(x, 0, sizeof(double) * (size_t)p->ncols);
    x[R->zcol] = zinc;
    /* greedy groups are keyed by rank0; collect their type and load */
    for (int g = 0; g < N; ++g) {
        type_of[g] = -1;
        loads[g].load = 0.0;
        loads[g].g = g;
    }
    for (int q = 0; q < R->m && ok; ++q) {
        const int i = R->seqs[q];
        int       t = -1;
        for (int tt = 0; tt < R->ntypes; ++tt) {
            if (R->tdeg[tt] == a->size[i] && R->trc[tt] == a->rc[i]) {
                t = tt;
            }
        }
        if (t < 0) {
            ok = 0;
            break;
        }
        type_of[a->rank0[i]] = t;
        loads[a->rank0[i]].load += R->bt[R->bucket[q] * R->ntypes + t];
    }
    if (!ok) {
        goto out;
    }
    /* order each type's groups by load, largest first (symmetry rows) */
    qsort(loads, (size_t)N, sizeof(*loads), cmp_gload_desc);
    {
        int used[2 * NSP_PLANNER_MAX_LEVELS] = {0};
        for (int k = 0; k < N; ++k) {
            const int r0 = loads[k].g, t = type_of[r0];
            if (t < 0) {
                continue;
            }
            if (used[t] >= R->gcount[t]) {
                NSP_TRACE("MILP start: more greedy groups of degree %d than candidates (%d)",
                          R->tdeg[t], R->gcount[t]);
                ok = 0;
                goto out;
            }
            slot_of[r0] = R->gfirst[t] + used[t]++;
            x[R->ycol[slot_of[r0]]] = 1.0;
        }
    }
    for (int q = 0; q < R->m; ++q) {
        const int i = R->seqs[q], g = slot_of[a->rank0[i]];
        const int c = R->xcol[(size_t)R->bucket[q] * R->ngroups + g];
        if (c < 0) {
            NSP_TRACE("MILP start: sequence %d (bucket %d) has no column in its greedy group", i,
                      R->bucket[q]);
            ok = 0;
            goto out;
        }
        x[c] += 1.0;
    }
    /* z: the slowest group in the model's terms; every group in memory */
    x[R->zcol] = 0.0;
    for (int g = 0; g < R->ngroups; ++g) {
        const int t = R->gtype[g];
        double    load = nsp_dj_group_lat(&in->cost, R->tdeg[t]) / zinc * x[R->ycol[g]], mem = 0.0;
        for (int b = 0; b < R->nb; ++b) {
            const int c = R->xcol[(size_t)b * R->ngroups + g];
            if (c >= 0) {
                load += R->bt[b * R->ntypes + t] * x[c];
                mem  += R->bm[b * R->ntypes + t] * x[c];
            }
        }
        x[R->zcol] = fmax(x[R->zcol], load);
        if (mem > x[R->ycol[g]] * (1.0 + 1e-12) || load > 1.10) {
            NSP_TRACE("MILP start: group %d over the model's limits (memory %.4f, time %.4f)",
                      g, mem, load);
            ok = 0;   /* bucket means over a limit of the model: no start */
        }
    }
out:
    free(loads);
    free(type_of);
    free(slot_of);
    return ok;
}

/* map_solution's work arrays, per group g of the model ([ngroups]) unless
 * said: want[nb][ngroups] sequences still wanted per bucket, load (seconds),
 * target (the solution's time), mem (bytes), used (open; later its index + 1
 * into rank0), size/rank0/slot (the open groups packed), gseq[m] (each
 * sequence's group). */
typedef struct map_work {
    double *want, *load, *target, *mem;
    int    *used, *size, *rank0, *slot, *gseq;
} map_work_t;

static void map_work_free(map_work_t *w)
{
    free(w->want);
    free(w->load);
    free(w->target);
    free(w->mem);
    free(w->used);
    free(w->size);
    free(w->rank0);
    free(w->slot);
    free(w->gseq);
}

/* 0, or -1 when out of memory (free with map_work_free either way). */
static int map_work_alloc(const dj_round_t *R, map_work_t *w)
{
    const size_t ng = (size_t)R->ngroups;

    w->want   = malloc(sizeof(double) * (size_t)R->nb * ng);
    w->load   = calloc(ng, sizeof(double));
    w->target = calloc(ng, sizeof(double));
    w->mem    = calloc(ng, sizeof(double));
    w->used   = malloc(sizeof(int) * ng);
    w->size   = malloc(sizeof(int) * ng);
    w->rank0  = malloc(sizeof(int) * ng);
    w->slot   = malloc(sizeof(int) * ng);
    w->gseq   = malloc(sizeof(int) * (size_t)(R->m > 0 ? R->m : 1));
    return w->want == NULL || w->load == NULL || w->target == NULL || w->mem == NULL ||
                   w->used == NULL || w->size == NULL || w->rank0 == NULL ||
                   w->slot == NULL || w->gseq == NULL
               ? -1
               : 0;
}

/* From the solution x: which groups are open, what each wants of each
 * bucket (integer buckets rounded), and each group's target time. */
static void map_targets(const dj_round_t *R, const double *x, double zinc, map_work_t *w)
{
    const nsp_cost_t *cost = &R->in->cost;

    for (int g = 0; g < R->ngroups; ++g) {
        w->used[g]   = x[R->ycol[g]] > 0.5;
        w->load[g]   = w->used[g] ? nsp_dj_group_lat(cost, R->tdeg[R->gtype[g]]) : 0.0;
        w->target[g] = w->load[g];
        for (int b = 0; b < R->nb; ++b) {
            const int c = R->xcol[(size_t)b * R->ngroups + g];
            double    v = (c >= 0 && w->used[g]) ? x[c] : 0.0;
            if (R->bcount[b] <= DJ_MILP_INT_COUNT) {
                v = floor(v + 0.5);
            }
            w->want[(size_t)b * R->ngroups + g] = v;
            w->target[g] += v * R->bt[b * R->ntypes + R->gtype[g]] * zinc;
        }
    }
}

/* Whether a sequence of s tokens fits group g's memory; its cost in *sc. */
static int map_fits(const dj_round_t *R, const map_work_t *w, int g, double s,
                    nsp_seq_cost_t *sc)
{
    const int t = R->gtype[g];

    nsp_seq_cost(&R->in->cost, s, R->tdeg[t], R->trc[t], sc);
    return w->mem[g] + sc->mem_bytes <= R->in->mem_cap;
}

/* The group for a sequence of s tokens of bucket b, or -1: of an integer
 * bucket the least loaded open group with a count left; of a continuous one
 * the open group with the most time left to its target that has memory,
 * else (shares used up by rounding) the least loaded open group with room. */
static int map_pick(const dj_round_t *R, const map_work_t *w, int b, double s)
{
    const int      integral = R->bcount[b] <= DJ_MILP_INT_COUNT;
    int            best     = -1;
    double         best_key = -DBL_MAX;
    nsp_seq_cost_t sc;

    for (int g = 0; g < R->ngroups; ++g) {
        const double want = w->want[(size_t)b * R->ngroups + g];
        double       key;
        if (!w->used[g] || (integral && want < 0.5)) {
            continue;
        }
        if (!integral) {
            if (want <= 1e-9 || !map_fits(R, w, g, s, &sc)) {
                continue;
            }
            key = w->target[g] - w->load[g];   /* the most time left to its target */
        } else {
            key = -w->load[g];                 /* the least loaded */
        }
        if (best < 0 || key > best_key) {
            best     = g;
            best_key = key;
        }
    }
    if (best < 0 && !integral) {
        for (int g = 0; g < R->ngroups; ++g) {
            if (!w->used[g] || R->xcol[(size_t)b * R->ngroups + g] < 0) {
                continue;
            }
            if (map_fits(R, w, g, s, &sc) && (best < 0 || w->load[g] < w->load[best])) {
                best = g;
            }
        }
    }
    return best;
}

/* Sequence q (s tokens, bucket b) into group g. */
static void map_place(const dj_round_t *R, map_work_t *w, int q, int b, double s, int g)
{
    const nsp_cost_t *cost = &R->in->cost;
    const int         t    = R->gtype[g];
    nsp_seq_cost_t    sc;

    nsp_seq_cost(cost, s, R->tdeg[t], R->trc[t], &sc);
    w->load[g] += sc.comp_s + sc.bytes / nsp_cost_bw(cost, R->tdeg[t]);
    w->mem[g]  += sc.mem_bytes;
    w->want[(size_t)b * R->ngroups + g] -= 1.0;
    w->gseq[q] = g;
}

/* Pack the open groups on N ranks (aligned); their count, or -1 when one
 * is over memory or they do not pack. */
static int map_pack(const dj_round_t *R, map_work_t *w, int N)
{
    int nused = 0;

    for (int g = 0; g < R->ngroups; ++g) {
        if (w->used[g] && w->mem[g] > R->in->mem_cap) {
            return -1;
        }
        if (w->used[g]) {
            w->slot[nused] = g;
            w->size[nused++] = R->tdeg[R->gtype[g]];
        }
    }
    if (nsp_pack_aligned(w->size, nused, N, w->rank0) < 0) {
        nsp_error_clear();
        return -1;
    }
    return nused;
}

/* Map a solution to concrete sequences of round r in *a (rank0 from aligned
 * packing); returns the exact round time, or DBL_MAX if it does not map.
 * Longest first, each sequence to map_pick's group. */
static double map_solution(const dj_round_t *R, const double *x, double zinc, int r,
                           nsp_route_assign_t *a)
{
    const int  N     = R->in->cost.cluster.ranks;
    map_work_t w     = {0};
    double     worst = DBL_MAX;
    int        nused;

    if (map_work_alloc(R, &w) != 0) {
        goto out;
    }
    map_targets(R, x, zinc, &w);
    for (int q = 0; q < R->m; ++q) {
        const int    b    = R->bucket[q];
        const double s    = (double)R->in->lens[R->seqs[q]];
        const int    best = map_pick(R, &w, b, s);
        if (best < 0) {
            goto out;
        }
        map_place(R, &w, q, b, s, best);
    }
    nused = map_pack(R, &w, N);
    if (nused < 0) {
        goto out;
    }
    worst = 0.0;
    for (int k = 0; k < nused; ++k) {
        worst = fmax(worst, w.load[w.slot[k]]);
        w.used[w.slot[k]] = k + 1;   /* index into rank0 */
    }
    for (int q = 0; q < R->m; ++q) {
        const int i = R->seqs[q], g = w.gseq[q];
        a->round[i] = r;
        a->rank0[i] = w.rank0[w.used[g] - 1];
        a->size[i]  = R->tdeg[R->gtype[g]];
        a->rc[i]    = R->trc[R->gtype[g]];
    }
out:
    map_work_free(&w);
    return worst;
}

/* ---- per round ------------------------------------------------------------------------ */

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

static nsp_status_t improve_round(const nsp_planner_input_t *in, solver_kind_t kind,
                                  nsp_route_assign_t *a, int r, double zinc, int *timeout)
{
    dj_round_t         R;
    milp_t             p;
    nsp_route_assign_t trial;
    double            *start = NULL, *x = NULL, kept = 0.0;
    milp_result_t      res;
    nsp_status_t       status;
    int                with_rc = 0;

    memset(&R, 0, sizeof(R));
    memset(&p, 0, sizeof(p));
    R.in = in;
    R.seqs   = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    R.bucket = malloc(sizeof(int) * (size_t)(in->nseqs > 0 ? in->nseqs : 1));
    if (R.seqs == NULL || R.bucket == NULL) {
        round_free(&R);
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
        round_free(&R);
        return NSP_OK;
    }
    /* recomputed variants only where memory is tight */
    with_rc |= kept > 0.8 * in->mem_cap * in->cost.cluster.ranks;
    make_buckets(&R, zinc);
    status = round_model(&R, with_rc, zinc, &p);
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
        const int    have_start = start_vector(&R, a, &p, zinc, start);
        const double t0 = nsp_wtime();
        status = milp_solve(kind, &p, have_start ? start : NULL, in->time_limit_s, x, &res);
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
            t = map_solution(&R, x, zinc, r, &trial);
            NSP_DEBUG("disjoint MILP (%s) round %d: %d seqs, %d buckets, %d groups, %d cols, "
                      "%d rows, start %s, %s%s in %.3f s: greedy %.6f, MILP %.6f s per layer",
                      solver_name(kind), r, R.m, R.nb, R.ngroups, p.ncols, p.nrows,
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
                      solver_name(kind), r, nsp_wtime() - t0, p.ncols);
        }
    }
out_trial:
    nsp_route_assign_free(&trial);
out:
    free(start);
    free(x);
    milp_free(&p);
    round_free(&R);
    return status;
}

nsp_status_t nsp_dj_milp_improve(const nsp_planner_input_t *in, nsp_route_assign_t *a,
                                 unsigned *flags)
{
    static int        warned;   /* say it once per process */
    const solver_kind_t kind = solver_choice();
    double           *rs;
    int               mem_ok, timeout = 0;
    nsp_status_t      status = NSP_OK;

    if (kind == SOLVER_NONE) {
        if (!warned) {
            warned = 1;
            NSP_WARN("disjoint planner: no MILP solver (%s): using its greedy instead; plans "
                     "are flagged greedy-fallback. Install coinor-libcbc-dev or libglpk-dev "
                     "and reconfigure for FlexSP's MILP",
#if defined(NSP_HAVE_CBC) || defined(NSP_HAVE_GLPK)
                     "NSPCOMM_MILP=none"
#else
                     "configure found neither CBC nor GLPK"
#endif
            );
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
        NSP_CHECK_GOTO(improve_round(in, kind, a, r, rs[r], &timeout), status, out);
    }
    if (timeout) {
        *flags |= NSP_PLAN_FLAG_SOLVER_TIMEOUT;
    }
out:
    free(rs);
    return status;
}
