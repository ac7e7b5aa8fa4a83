/*
 * The disjoint planner's MILP (FlexSP's formulation, one round at a time),
 * shared by its three files: the model (dj_milp_model.c), the greedy's
 * start and the mapping of a solution to sequences (dj_milp_map.c), and
 * the rounds re-solved one by one (dj_milp.c) with a solver of
 * milp_table.c.
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
 */
#ifndef NSP_PLANNER_DJ_MILP_H_
#define NSP_PLANNER_DJ_MILP_H_

#include "planner/disjoint.h"
#include "planner/milp.h"

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

/** One round's model: its sequences and buckets, the group types, the
 *  columns. Zero-initialise; nsp_dj_round_free() releases it. */
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

/** Free what *R holds and zero it. */
void nsp_dj_round_free(dj_round_t *R);

/** Bucket R's sequences (R->seqs[R->m], longest first; R->bucket[m]
 *  caller-allocated): singletons for the long ones, then runs of lengths
 *  within DJ_MILP_BUCKET_RATIO. zinc: the greedy's round time per layer. */
void nsp_dj_milp_buckets(dj_round_t *R, double zinc);

/** Fill the model of the bucketed round R into p (zero-initialised) with
 *  recomputed variants when with_rc; zinc as above. Errors:
 *  NSP_ERR_INFEASIBLE (quiet: some bucket fits no group; keep the greedy),
 *  NSP_ERR_NO_MEMORY. */
nsp_status_t nsp_dj_milp_model(dj_round_t *R, int with_rc, double zinc, nsp_milp_t *p);

/** The greedy's groups of round r of `a` as a start vector x[p->ncols]; 0
 *  if they do not map onto the model (then x is not a start). */
int nsp_dj_milp_start(const dj_round_t *R, const nsp_route_assign_t *a, const nsp_milp_t *p,
                      double zinc, double *x);

/** Map the solution x of round r to concrete sequences in *a (groups
 *  packed aligned); returns the exact round time per layer, or DBL_MAX
 *  when it does not map. */
double nsp_dj_milp_map(const dj_round_t *R, const double *x, double zinc, int r,
                       nsp_route_assign_t *a);

#endif /* NSP_PLANNER_DJ_MILP_H_ */
