/*
 * nsp_calibrate: measure a world and write the cluster file the planner loads
 * (nsp_cluster_load), every key with the measurement it came from
 * (docs/reference/calibration.md).
 *
 * On any world: --ranks N forks N local ranks (each enters its node when
 * NSP_NETCLUSTER names a namespace cluster, scripts/netcluster.sh); without
 * --ranks every process is one rank of a launcher (mpirun, srun, or
 * NSPCOMM_ROOT/RANK/NRANKS). It measures
 *  - per tree level (degree d; 1..G inside a node, 2G.. across): the time of
 *    an all-to-all of every group of the level at once, tiny (latency) and
 *    large (bandwidth: bytes a rank sends to its d-1 peers per second), the
 *    slowest rank of each repetition, median over repetitions; and each
 *    rank's process CPU in them (the bare exchange CPU, recorded);
 *  - per level, the exchange CPU per byte and per call (cpu_byte_*,
 *    cpu_call_*: mean over ranks, median over repetitions) through the
 *    executor: the nested attention fwd + bwd of one-level plans, process
 *    CPU less the kernel's thread CPU (packing, waits, progress thread);
 *  - the attention kernel in use (the reference kernel): fwd + bwd thread CPU
 *    time per sequence, every rank at once as in a step, the mean over ranks
 *    fitted to a*s + b*s^2 (R_attn = 7 n_q D / b); rank 0 alone and the
 *    slowest rank kept as measurements;
 *  - the GEMM rate (a blocked float32 GEMM, every rank at once), or with
 *    --gemm kernel the kernel's per-token term a standing for the linear
 *    layers (runs with no linear layers, like the demo);
 *  - the overlap efficiency eta: the top level's large all-to-all posted,
 *    the kernel run meanwhile, against each alone:
 *    eta = (T_comm + T_comp - T_both) / min(T_comm, T_comp), in [0, 1];
 *  - the per-round fixed cost round_fixed_s, what every micro-batch repeats
 *    (docs/reference/cost-model.md section 8): the weight collectives of ZeRO-3/FSDP
 *    (a world all-to-all of the all-gather's bytes per rank, (1 - eta) x 3
 *    of it) and the kernel launches (layers x launches x one launch).
 * The kernel measurements are perf/calib.h's (the demo makes the same),
 * the launcher, table and JSON helpers perf/common.h's.
 */
#include "calib.h"
#include "common.h"
#include "nc_enter.h"
#include "nsp_launch.h"
#include "nsp_opt.h"
#include "nspcomm.h"

#include "attn_sp/ring_attn.h"      /* nsp_thread_cpu_s */
#include "common/json.h"
#include "common/log.h"
#include "nested_groups/tree.h"     /* nsp_tree_group_tp */
#include "planner/cost.h"
#include "planner/planner_io.h"
#include "transport/request.h"      /* nsp_now_s */
#include "transport/comm.h"          /* nsp_comm_tp */
#include "transport/transport.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/random.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CAL_PROG       "nsp_calibrate"
#define CAL_MAX_LEVELS 16
#define CAL_MAX_REPS   32
#define CAL_SMALL      64 /* bytes per peer of the latency exchange */
#define CAL_NLENS      4  /* the kernel's sequence lengths, cal_lens */
#define CAL_KERNEL_REPS 3
#define CAL_GEMM_N     256 /* the GEMM's n */
#define CAL_X_SMALL    64   /* tokens per group of the executor's small exchange */
#define CAL_X_LARGE    2048 /* and of its large one (the demo's long sequences) */
#define CAL_X_MANY     32   /* the large one again as this many sequences of 64 (recorded) */

static const int64_t cal_lens[CAL_NLENS] = {64, 256, 1024, 2048};

typedef struct cal_opts {
    int         ranks;      /* 0: launched by mpirun/srun/NSPCOMM_* */
    const char *out;
    const char *name;
    int         q_heads, kv_heads, head_dim;
    int         elem_bytes; /* bytes per element of the runs the file is for */
    int         gemm_kernel;
    size_t      bytes;      /* per peer, the bandwidth exchange */
    int         reps;
    double      mem_bytes;
    int64_t     kernel_tokens; /* tokens per timed kernel call, a multiple of 2048 */
    const char *model;      /* --model: preset the round cost is for; NULL: the attention layer */
    int         launches;   /* kernels per layer per micro-batch; 0: the default */
    double      launch_s;   /* --launch-s: seconds per kernel launch as given; 0: measured */
    size_t      round_max_bytes; /* the weight collective measured at most this per rank */
} cal_opts_t;

/* What every rank measures; rank 0 gathers them. Times in seconds. */
typedef struct cal_rank {
    int    node, local_size, nnodes, nlevels;
    int    degree[CAL_MAX_LEVELS];
    double small[CAL_MAX_LEVELS][CAL_MAX_REPS], large[CAL_MAX_LEVELS][CAL_MAX_REPS];
    /* the rank's process CPU in those exchanges (copies, tcp system calls,
     * polls, the progress thread): the exchange CPU of the cost model */
    double cpu_small[CAL_MAX_LEVELS][CAL_MAX_REPS], cpu_large[CAL_MAX_LEVELS][CAL_MAX_REPS];
    /* the same through the executor (the demo's nested attention on a
     * one-level plan, fwd + bwd): process CPU beside the kernel's thread CPU,
     * for CAL_X_SMALL and CAL_X_LARGE tokens per group; the file's keys */
    double xcpu_small[CAL_MAX_LEVELS][CAL_MAX_REPS], xcpu_large[CAL_MAX_LEVELS][CAL_MAX_REPS];
    double xcpu_many[CAL_MAX_LEVELS][CAL_MAX_REPS]; /* CAL_X_LARGE tokens as CAL_X_MANY seqs */
    uint64_t xbytes_small[CAL_MAX_LEVELS], xbytes_large[CAL_MAX_LEVELS]; /* sent, fwd + bwd */
    int    xcpu_ok[CAL_MAX_LEVELS]; /* 1: the level's degree shards the heads (measured) */
    double kernel_s[CALIB_MAX_LENS]; /* kernel fwd+bwd per length, every rank at once */
    double gemm_flops;               /* the GEMM rate, every rank at once */
    double comm_s[CAL_MAX_REPS], comp_s[CAL_MAX_REPS], both_s[CAL_MAX_REPS]; /* overlap, wall */
    double both_xcpu_s[CAL_MAX_REPS]; /* process CPU of "both" beside the kernel's thread CPU */
    double weights_s[CAL_MAX_REPS]; /* the world collective of the round cost, wall */
    int    scratch[256];           /* room for one int per rank (an allgather) */
} cal_rank_t;

/* The kernel and GEMM: `fit` and `gemm_flops` (what the file uses) from
 * every rank timing at once, as a step computes, the mean over ranks; the
 * slowest rank's and rank 0's alone (the others waiting at a barrier) are
 * kept as measurements. */
typedef struct cal_kernel {
    calib_fit_t fit;              /* t(s) = a s + b s^2 per sequence, thread CPU */
    calib_fit_t alone;            /* the same fit of rank 0 alone */
    double      slowest_s[CALIB_MAX_LENS]; /* the slowest rank's fwd_bwd_s, all at once */
    double      gemm_flops, gemm_n;
    double      gemm_slowest, gemm_alone;
    double      launch_s;         /* seconds per kernel launch (measured or --launch-s) */
} cal_kernel_t;

/* A blocked float32 GEMM C += A B of n x n: FLOP/s of thread CPU, best of 3. */
static nsp_status_t gemm_rate(int n, double *flops)
{
    float *A = calloc((size_t)n * n, 4), *B = calloc((size_t)n * n, 4);
    float *C = calloc((size_t)n * n, 4);
    double best = INFINITY;

    if (A == NULL || B == NULL || C == NULL) {
        free(A), free(B), free(C);
        return nsp_error(NSP_ERR_NO_MEMORY, "calibrate: no memory for a GEMM of %d", n);
    }
    for (int i = 0; i < n * n; ++i) {
        A[i] = (float)(i % 7) * 0.1f, B[i] = (float)(i % 5) * 0.1f;
    }
    for (int rep = 0; rep < 3; ++rep) {
        double t0 = nsp_thread_cpu_s();
        for (int i = 0; i < n; ++i) {
            for (int p = 0; p < n; ++p) { /* i-p-j: the inner loop vectorizes */
                float a = A[(size_t)i * n + p];
                for (int j = 0; j < n; ++j) {
                    C[(size_t)i * n + j] += a * B[(size_t)p * n + j];
                }
            }
        }
        best = fmin(best, nsp_thread_cpu_s() - t0);
    }
    *flops = 2.0 * n * n * (double)n / best;
    free(A), free(B), free(C);
    return NSP_OK;
}

/* ---- the exchanges ----------------------------------------------------- */

typedef struct cal_a2a {
    size_t *counts, *displs;
    char   *send, *recv;
    int     d;
} cal_a2a_t;

static void a2a_free(cal_a2a_t *x)
{
    free(x->counts), free(x->displs), free(x->send), free(x->recv);
}

static nsp_status_t a2a_alloc(int d, size_t bytes, cal_a2a_t *x)
{
    x->d      = d;
    x->counts = calloc((size_t)d, sizeof(size_t));
    x->displs = calloc((size_t)d, sizeof(size_t));
    x->send   = malloc((size_t)d * bytes);
    x->recv   = malloc((size_t)d * bytes);
    if (!x->counts || !x->displs || !x->send || !x->recv) {
        a2a_free(x);
        return nsp_error(NSP_ERR_NO_MEMORY, "calibrate: no memory for %d x %zu bytes", d, bytes);
    }
    memset(x->send, 1, (size_t)d * bytes);
    return NSP_OK;
}

static void a2a_args(cal_a2a_t *x, size_t bytes, nsp_tp_alltoallv_t *args)
{
    for (int j = 0; j < x->d; ++j) {
        x->counts[j] = bytes;
        x->displs[j] = (size_t)j * bytes;
    }
    args->sendbuf = x->send, args->sendcounts = x->counts, args->sdispls = x->displs;
    args->recvbuf = x->recv, args->recvcounts = x->counts, args->rdispls = x->displs;
}

/* The level-l group of this rank as a transport communicator. */
static nsp_status_t level_tp(nsp_tree_t *tree, int l, nsp_tp_comm_t **tp, int *d)
{
    int rank0;

    NSP_CHECK(nsp_tree_degree(tree, l, d));
    NSP_CHECK(nsp_tree_group(tree, l, &rank0, NULL));
    return nsp_tree_group_tp(tree, *d, rank0, tp);
}

/* One timed all-to-all of `bytes` per peer on every group of level l: wall
 * time in *s, the process CPU it took in *cpu (NULL: not wanted). */
static nsp_status_t a2a_once(nsp_comm_t *world, nsp_tree_t *tree, int l, size_t bytes,
                             cal_a2a_t *x, uint32_t tag, double *s, double *cpu)
{
    nsp_tp_comm_t     *tp;
    nsp_tp_alltoallv_t args;
    int                d;
    double             t0, c0;

    NSP_CHECK(level_tp(tree, l, &tp, &d));
    a2a_args(x, bytes, &args);
    NSP_CHECK(nsp_comm_barrier(world));
    t0 = nsp_now_s();
    c0 = calib_proc_cpu_s();
    NSP_CHECK(nsp_tp_alltoallv(tp, &args, tag));
    if (cpu != NULL) {
        *cpu = calib_proc_cpu_s() - c0;
    }
    *s = nsp_now_s() - t0;
    return NSP_OK;
}

static nsp_status_t measure_levels(nsp_comm_t *world, nsp_tree_t *tree, const cal_opts_t *o,
                                   cal_rank_t *me)
{
    nsp_status_t status = NSP_OK;

    nsp_tree_nlevels(tree, &me->nlevels);
    me->nlevels = me->nlevels < CAL_MAX_LEVELS ? me->nlevels : CAL_MAX_LEVELS;
    for (int l = 0; l < me->nlevels && status == NSP_OK; ++l) {
        cal_a2a_t x;
        nsp_tree_degree(tree, l, &me->degree[l]);
        if (me->degree[l] < 2) {
            continue;
        }
        NSP_CHECK(a2a_alloc(me->degree[l], o->bytes, &x));
        for (int r = -1; r < o->reps && status == NSP_OK; ++r) { /* r = -1: warm-up */
            double s = 0, t = 0, cs = 0, ct = 0;
            status = a2a_once(world, tree, l, CAL_SMALL, &x, 0x700000u + (uint32_t)l, &s, &cs);
            if (status == NSP_OK) {
                status = a2a_once(world, tree, l, o->bytes, &x, 0x710000u + (uint32_t)l, &t,
                                  &ct);
            }
            if (r >= 0) {
                me->small[l][r] = s, me->large[l][r] = t;
                me->cpu_small[l][r] = cs, me->cpu_large[l][r] = ct;
            }
        }
        a2a_free(&x);
    }
    return status;
}

/* Kernel alone, top-level exchange alone, both at once (wall, this rank).
 * The kernel runs n sequences of 256 tokens, n chosen on rank 0 so that it
 * takes about as long as the exchange alone (where overlap matters most). */
static nsp_status_t measure_overlap(nsp_comm_t *world, nsp_tree_t *tree, const cal_opts_t *o,
                                    const nsp_attn_params_t *a, cal_rank_t *me)
{
    int                top = me->nlevels - 1, d, n = 1;
    nsp_tp_comm_t     *tp;
    nsp_tp_alltoallv_t args;
    nsp_request_t     *req = NULL;
    cal_a2a_t          x;
    calib_bufs_t       b;
    double             t0, c0, k0, one;
    nsp_status_t       status;

    if (top < 1) {
        return NSP_OK;
    }
    NSP_CHECK(level_tp(tree, top, &tp, &d));
    NSP_CHECK(a2a_alloc(d, o->bytes, &x));
    NSP_CHECK_GOTO(calib_bufs_alloc(a, 256, 64, &b), status, out_a2a);
    a2a_args(&x, o->bytes, &args);
    NSP_CHECK_GOTO(a2a_once(world, tree, top, o->bytes, &x, 0x720000u, &one, NULL), status, out);
    t0 = nsp_now_s();
    NSP_CHECK_GOTO(calib_kernel_run(a, 1, &b), status, out);
    n = (int)fmin(64.0, fmax(1.0, round(one / fmax(nsp_now_s() - t0, 1e-6))));
    NSP_CHECK_GOTO(nsp_comm_allgather(world, &n, me->scratch, sizeof(int)), status, out);
    n = me->scratch[0]; /* rank 0's choice, the same everywhere */
    for (int r = 0; r < o->reps; ++r) {
        NSP_CHECK_GOTO(nsp_comm_barrier(world), status, out);
        t0 = nsp_now_s();
        NSP_CHECK_GOTO(calib_kernel_run(a, n, &b), status, out);
        me->comp_s[r] = nsp_now_s() - t0;
        NSP_CHECK_GOTO(a2a_once(world, tree, top, o->bytes, &x, 0x720000u, &me->comm_s[r],
                                NULL), status, out);
        NSP_CHECK_GOTO(nsp_comm_barrier(world), status, out);
        t0 = nsp_now_s();
        c0 = calib_proc_cpu_s();
        NSP_CHECK_GOTO(tp->ops->alltoallv_post(tp, &args, 0x730000u, NULL, &req), status, out);
        k0 = nsp_thread_cpu_s();
        NSP_CHECK_GOTO(calib_kernel_run(a, n, &b), status, out);
        k0 = nsp_thread_cpu_s() - k0;
        status = nsp_request_wait(req);
        nsp_request_free(req);
        req            = NULL;
        me->both_s[r] = nsp_now_s() - t0;
        me->both_xcpu_s[r] = calib_proc_cpu_s() - c0 - k0; /* all but the kernel's thread CPU */
        NSP_CHECK_GOTO(status, status, out);
    }
out:
    nsp_request_free(req);
    calib_bufs_free(&b);
out_a2a:
    a2a_free(&x);
    return status;
}

/* ---- the exchange through the executor --------------------------------- */

/* One level's exchange as the demo runs it: a one-round plan with one
 * sequence of s tokens on every group of d ranks (group g = ranks [g d,
 * g d + d), sequence g), its layout for this rank, the nested attention
 * over it (pipelined, agreement checks on: the demo's parameters), and the
 * float32 buffers of layout section 7 ([T_local][heads][D], lse
 * [T_local][n_q]; zeros: the CPU of the exchange does not depend on them). */
typedef struct cal_xrun {
    nsp_layout_t      *lay;
    nsp_nested_attn_t *attn;
    float             *q, *k, *v, *o, *dout, *dq, *dk, *dv, *lse;
} cal_xrun_t;

static void xrun_free(cal_xrun_t *x)
{
    nsp_nested_attn_destroy(x->attn);
    nsp_layout_free(x->lay);
    free(x->q), free(x->k), free(x->v), free(x->o), free(x->dout);
    free(x->dq), free(x->dk), free(x->dv), free(x->lse);
    memset(x, 0, sizeof(*x));
}

/* The plan of one level of degree d, `per` sequences of s tokens per
 * group; g [nranks / d], idx and lens [nranks / d * per] caller-owned (the
 * plan is only read by nsp_layout_create). */
static void xplan_fill(const cal_opts_t *o, int nranks, int d, int64_t s, int per, nsp_plan_t *p,
                       nsp_plan_round_t *rd, nsp_plan_group_t *g, int *idx, int64_t *lens)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->planner, sizeof(p->planner), "nested");
    calib_attn_model(o->q_heads, o->kv_heads, o->head_dim, &p->model);
    calib_placeholder_cluster(nranks, &p->cluster);
    p->nseqs = nranks / d * per, p->seq_lens = lens, p->nrounds = 1, p->rounds = rd;
    rd->ngroups = nranks / d, rd->groups = g;
    for (int i = 0; i < nranks / d * per; ++i) {
        idx[i] = i, lens[i] = s;
    }
    for (int i = 0; i < nranks / d; ++i) {
        g[i] = (nsp_plan_group_t){.rank0 = i * d, .size = d, .nseqs = per, .seqs = &idx[i * per],
                                  .recompute = 0, .pipelined = 1, .ring = 1};
    }
}

static nsp_status_t xrun_setup(nsp_tree_t *tree, const cal_opts_t *o, const nsp_attn_params_t *a,
                               int rank, int nranks, int d, int64_t s, int per, cal_xrun_t *x)
{
    nsp_plan_t               plan;
    nsp_plan_round_t         rd;
    nsp_plan_group_t         g[256];
    int                      idx[256 * CAL_X_MANY];
    int64_t                  lens[256 * CAL_X_MANY];
    nsp_layout_info_t        info;
    nsp_nested_attn_params_t p;
    size_t                   qf, kf;

    memset(x, 0, sizeof(*x));
    xplan_fill(o, nranks, d, s, per, &plan, &rd, g, idx, lens);
    NSP_CHECK(nsp_layout_create(&plan, 0, rank, &x->lay));
    NSP_CHECK(nsp_layout_query(x->lay, &info));
    qf = (size_t)info.local_tokens * (size_t)a->q_heads * (size_t)a->head_dim + 1;
    kf = (size_t)info.local_tokens * (size_t)a->kv_heads * (size_t)a->head_dim + 1;
    x->q = calloc(qf, 4), x->o = calloc(qf, 4), x->dout = calloc(qf, 4), x->dq = calloc(qf, 4);
    x->k = calloc(kf, 4), x->v = calloc(kf, 4), x->dk = calloc(kf, 4), x->dv = calloc(kf, 4);
    x->lse = calloc((size_t)info.local_tokens * (size_t)a->q_heads + 1, 4);
    if (!x->q || !x->o || !x->dout || !x->dq || !x->k || !x->v || !x->dk || !x->dv || !x->lse) {
        return nsp_error(NSP_ERR_NO_MEMORY, "calibrate: no memory for %lld tokens",
                         (long long)info.local_tokens);
    }
    memset(&p, 0, sizeof(p));
    p.attn = *a;
    return nsp_nested_attn_create(tree, x->lay, &p, &x->attn);
}

/* One forward + backward (saved activations, as the demo's step): the
 * rank's process CPU (its copies and packing, polls, waits, tcp system
 * calls, the progress thread) less the kernel's thread CPU, in *cpu; the
 * bytes this rank sent in the level's all-to-alls in *bytes. */
static nsp_status_t xrun_once(nsp_comm_t *world, cal_xrun_t *x, double *cpu, uint64_t *bytes)
{
    nsp_nested_attn_saved_t *saved = NULL;
    nsp_nested_attn_stats_t  sf, sb;
    double                   c0;
    nsp_status_t             status;

    NSP_CHECK(nsp_comm_barrier(world));
    c0 = calib_proc_cpu_s();
    NSP_CHECK(nsp_nested_attn_fwd(x->attn, x->q, x->k, x->v, x->o, x->lse, &saved, &sf));
    status = nsp_nested_attn_bwd(x->attn, saved, NULL, NULL, NULL, NULL, NULL, x->dout, x->dq,
                                 x->dk, x->dv, &sb);
    *cpu = calib_proc_cpu_s() - c0 - sf.compute_s - sb.compute_s;
    nsp_nested_attn_saved_free(saved);
    *bytes = 0;
    for (int l = 0; l < sf.nlevels; ++l) {
        *bytes += sf.level[l].a2a_bytes + sb.level[l].a2a_bytes;
    }
    return status;
}

/* 1 when degree d shards the heads as the nested attention requires (n_q a
 * multiple of d; n_kv a multiple of d or d of n_kv). */
static int xcpu_shardable(const cal_opts_t *o, int d)
{
    return o->q_heads % d == 0 && (o->kv_heads % d == 0 || d % o->kv_heads == 0);
}

/* Level l through the executor: a warm-up and o->reps repetitions of the
 * small and the large exchange, interleaved, and of the large one's bytes
 * as CAL_X_MANY short sequences (recorded: the same bytes with 1/32 of the
 * kernel, so whether the CPU beside it follows the bytes or the kernel). */
static nsp_status_t xcpu_level(nsp_comm_t *world, nsp_tree_t *tree, const cal_opts_t *o,
                               const nsp_attn_params_t *a, int l, cal_rank_t *me)
{
    cal_xrun_t   xs, xl, xm;
    int          rank, nranks, d = me->degree[l];
    uint64_t     bm;
    nsp_status_t status;

    nsp_comm_rank(world, &rank), nsp_comm_size(world, &nranks);
    memset(&xl, 0, sizeof(xl)), memset(&xm, 0, sizeof(xm));
    NSP_CHECK_GOTO(xrun_setup(tree, o, a, rank, nranks, d, CAL_X_SMALL, 1, &xs), status, out);
    NSP_CHECK_GOTO(xrun_setup(tree, o, a, rank, nranks, d, CAL_X_LARGE, 1, &xl), status, out);
    NSP_CHECK_GOTO(xrun_setup(tree, o, a, rank, nranks, d, CAL_X_LARGE / CAL_X_MANY, CAL_X_MANY,
                              &xm), status, out);
    for (int r = -1; r < o->reps; ++r) { /* r = -1: warm-up (first touch, connections) */
        double cs, cl, cm;
        NSP_CHECK_GOTO(xrun_once(world, &xs, &cs, &me->xbytes_small[l]), status, out);
        NSP_CHECK_GOTO(xrun_once(world, &xl, &cl, &me->xbytes_large[l]), status, out);
        NSP_CHECK_GOTO(xrun_once(world, &xm, &cm, &bm), status, out);
        if (r >= 0) {
            me->xcpu_small[l][r] = cs, me->xcpu_large[l][r] = cl, me->xcpu_many[l][r] = cm;
        }
    }
    me->xcpu_ok[l] = 1;
out:
    xrun_free(&xs);
    xrun_free(&xl);
    xrun_free(&xm);
    return status;
}

static nsp_status_t measure_xcpu(nsp_comm_t *world, nsp_tree_t *tree, const cal_opts_t *o,
                                 const nsp_attn_params_t *a, cal_rank_t *me)
{
    int nranks;

    nsp_comm_size(world, &nranks);
    for (int l = 0; l < me->nlevels; ++l) {
        int d = me->degree[l];
        if (d >= 2 && xcpu_shardable(o, d) && nranks % d == 0 && nranks / d <= 256) {
            NSP_CHECK(xcpu_level(world, tree, o, a, l, me));
        }
    }
    return NSP_OK;
}

/* ---- results ----------------------------------------------------------- */

/* One level's figures: the slowest rank of each repetition, median. */
typedef struct cal_level {
    int    degree, across; /* across: the level spans nodes */
    double lat_s, large_s, bw;
    /* the exchange CPU: a rank's process CPU in the tiny and the large
     * exchange (mean over ranks, median over repetitions), and what the cost
     * model takes from them: cpu_call = cpu_small_s per collective, cpu_byte
     * = (cpu_large_s - cpu_small_s) / (2 (d-1) (B - 64)) per byte sent +
     * received, in the model's unit (x E/2) */
    double cpu_small_s, cpu_large_s, bare_byte, bare_call;
    /* through the executor (xcpu_level): the rank's CPU beside the kernel
     * in a fwd + bwd of CAL_X_SMALL and CAL_X_LARGE tokens per group (mean
     * over ranks, median over repetitions), the bytes it sent (measured) and
     * the model's bytes of the same sequences (bf16, per rank: a2a_bytes);
     * the line through the two points is cpu_byte x 2 A + 4 cpu_call */
    int    xok;
    double xcpu_small_s, xcpu_large_s, xsent_small, xsent_large, xmodel_small, xmodel_large;
    double xcpu_byte, xcpu_call;
    double xcpu_many_s; /* CAL_X_LARGE tokens as CAL_X_MANY sequences: recorded, not used */
    double cpu_byte, cpu_call; /* what the file uses: the executor's, else the bare ones */
} cal_level_t;

/* The per-round fixed cost (docs/reference/cost-model.md section 8), seconds:
 * fixed_s = weights_hidden x 3 x coll_s + layers x launches x launch_s. */
typedef struct cal_round {
    double bytes;          /* (N-1)/N b P_dense: one weight collective per rank */
    double measured_bytes; /* what the measured collective moved per rank */
    double measured_s;     /* its time: slowest rank, median */
    double coll_s;         /* one collective of `bytes` (scaled from the measured one) */
    double weights_s;      /* what of the 3 collectives does not hide: (1 - eta) x 3 coll_s */
    int    layers, launches;
    double launch_s, fixed_s;
    int    no_weights;     /* --gemm kernel: the runs have no weights to move */
} cal_round_t;

typedef struct cal_result {
    cal_level_t  level[CAL_MAX_LEVELS];
    int          nlevels, ranks, per_node, nnodes, intra, inter; /* intra/inter: level index or -1 */
    double       comm_s, comp_s, both_s, eta;
    double       both_xcpu_s; /* the exchange's CPU beside the kernel: mean over ranks, median */
    cal_round_t  round;
    cal_kernel_t k;
    nsp_cluster_t c;
} cal_result_t;

/* Median over repetitions of the slowest rank's value of the [reps] array at
 * byte offset `field` of cal_rank_t. */
static double slowest_median(const cal_opts_t *o, const cal_rank_t *all, int nranks,
                             size_t field)
{
    double v[CAL_MAX_REPS];

    for (int rep = 0; rep < o->reps; ++rep) {
        v[rep] = 0;
        for (int k = 0; k < nranks; ++k) {
            const double *x = (const double *)(const void *)((const char *)&all[k] + field);
            v[rep]          = fmax(v[rep], x[rep]);
        }
    }
    return perf_median(v, o->reps);
}

/* The large exchange's time beyond the latency. When noise leaves less
 * than a tenth of T_large beyond T_small (a loaded machine: the medians of
 * the two exchanges need not even be in order), all of T_large counts as
 * transfer: a lower bound on the bandwidth, never an absurd one. */
static double level_beyond_s(const cal_level_t *L)
{
    double beyond = L->large_s - L->lat_s;

    return beyond > 0.1 * L->large_s ? beyond : fmax(L->large_s, 1e-9);
}

/* Median over repetitions of the mean over ranks of cpu[l][rep] (at byte
 * offset `field` of cal_rank_t; l = 0 for a [reps] array): the CPU an
 * exchange costs a rank. The mean,
 * not the slowest: the model adds it to every rank of the group, and the
 * step's max over ranks is the model's own. */
static double mean_median(const cal_opts_t *o, const cal_rank_t *all, int nranks, size_t field,
                          int l)
{
    double v[CAL_MAX_REPS];

    for (int rep = 0; rep < o->reps; ++rep) {
        v[rep] = 0;
        for (int k = 0; k < nranks; ++k) {
            const double(*x)[CAL_MAX_REPS] =
                (const double(*)[CAL_MAX_REPS])(const void *)((const char *)&all[k] + field);
            v[rep] += x[l][rep] / nranks;
        }
    }
    return perf_median(v, o->reps);
}

static void level_cpu(const cal_opts_t *o, const cal_rank_t *all, int nranks, int l,
                      cal_level_t *L)
{
    double sent_recv = 2.0 * (L->degree - 1.0) * (double)(o->bytes - CAL_SMALL);

    L->cpu_small_s = mean_median(o, all, nranks, offsetof(cal_rank_t, cpu_small), l);
    L->cpu_large_s = mean_median(o, all, nranks, offsetof(cal_rank_t, cpu_large), l);
    L->bare_call   = L->cpu_small_s;
    /* per byte of the model (bf16 elements): E/2 bytes moved per model byte */
    L->bare_byte = fmax(0.0, L->cpu_large_s - L->cpu_small_s) / sent_recv *
                   ((double)o->elem_bytes / NSP_COST_DTYPE_BYTES);
    L->cpu_byte = L->bare_byte, L->cpu_call = L->bare_call;
}

/* The executor's exchange CPU of level l: the model charges a rank of a
 * group X = cpu_byte x 2 A(s) + 4 cpu_call per layer (docs/reference/cost-model.md
 * section 9; A = the model's bf16 bytes sent). Two sequence lengths give
 * the line: slope k = dX / dA per model byte of the float32 run, intercept
 * X0; cpu_byte = k / 2 x E/4 (the runs move E-byte elements, the executor
 * here float32), cpu_call = X0 / 4, both clipped at 0. */
static nsp_status_t level_xcpu(const cal_opts_t *o, const cal_rank_t *all, int nranks, int l,
                               cal_level_t *L)
{
    nsp_model_t   m;
    nsp_cluster_t c;
    nsp_cost_t    cost;
    double        k, x0;

    L->xok = all[0].xcpu_ok[l];
    if (!L->xok) {
        return NSP_OK;
    }
    calib_attn_model(o->q_heads, o->kv_heads, o->head_dim, &m);
    calib_placeholder_cluster(nranks, &c);
    NSP_CHECK(nsp_cost_init(&cost, &m, &c));
    L->xcpu_small_s = mean_median(o, all, nranks, offsetof(cal_rank_t, xcpu_small), l);
    L->xcpu_large_s = mean_median(o, all, nranks, offsetof(cal_rank_t, xcpu_large), l);
    L->xcpu_many_s  = mean_median(o, all, nranks, offsetof(cal_rank_t, xcpu_many), l);
    L->xsent_small  = (double)all[0].xbytes_small[l];
    L->xsent_large  = (double)all[0].xbytes_large[l];
    L->xmodel_small = nsp_cost_group_a2a_bytes(&cost, CAL_X_SMALL, L->degree, 1);
    L->xmodel_large = nsp_cost_group_a2a_bytes(&cost, CAL_X_LARGE, L->degree, 1);
    k  = (L->xcpu_large_s - L->xcpu_small_s) / (L->xmodel_large - L->xmodel_small);
    x0 = L->xcpu_small_s - k * L->xmodel_small;
    L->xcpu_byte = fmax(0.0, k) / 2.0 * ((double)o->elem_bytes / 4.0);
    L->xcpu_call = fmax(0.0, x0) / NSP_COST_A2A_PER_LAYER;
    L->cpu_byte = L->xcpu_byte, L->cpu_call = L->xcpu_call;
    return NSP_OK;
}

static void reduce_levels(const cal_opts_t *o, const cal_rank_t *all, int nranks, cal_result_t *r)
{
    r->nlevels = all[0].nlevels, r->per_node = all[0].local_size, r->nnodes = all[0].nnodes;
    r->intra = r->inter = -1;
    for (int l = 0; l < r->nlevels; ++l) {
        cal_level_t *L = &r->level[l];
        double       s[CAL_MAX_REPS], t[CAL_MAX_REPS];
        L->degree = all[0].degree[l];
        L->across = L->degree > r->per_node;
        if (L->degree < 2) {
            continue;
        }
        for (int rep = 0; rep < o->reps; ++rep) {
            s[rep] = t[rep] = 0;
            for (int k = 0; k < nranks; ++k) {
                s[rep] = fmax(s[rep], all[k].small[l][rep]);
                t[rep] = fmax(t[rep], all[k].large[l][rep]);
            }
        }
        L->lat_s   = perf_median(s, o->reps);
        L->large_s = perf_median(t, o->reps);
        /* bytes a rank sends to its d-1 peers, per second beyond the latency,
         * in the cost model's unit (bf16 elements: 2 bytes) */
        L->bw = (L->degree - 1.0) * (double)(o->bytes - CAL_SMALL) / level_beyond_s(L) *
                (NSP_COST_DTYPE_BYTES / (double)o->elem_bytes);
        level_cpu(o, all, nranks, l, L);
        if (level_xcpu(o, all, nranks, l, L) != NSP_OK) {
            L->xok = 0; /* cannot happen: the calibration's own model is valid */
        }
        if (!L->across) {
            r->intra = l;
        } else {
            r->inter = l; /* the top level: every rank's peers on every node */
        }
    }
    r->comm_s = slowest_median(o, all, nranks, offsetof(cal_rank_t, comm_s));
    r->comp_s = slowest_median(o, all, nranks, offsetof(cal_rank_t, comp_s));
    r->both_s = slowest_median(o, all, nranks, offsetof(cal_rank_t, both_s));
    r->eta = (r->comm_s + r->comp_s - r->both_s) / fmax(fmin(r->comm_s, r->comp_s), 1e-9);
    r->eta = fmin(1.0, fmax(0.0, r->eta));
    /* a [reps] array is row 0 of a [levels][reps] one */
    r->both_xcpu_s = mean_median(o, all, nranks, offsetof(cal_rank_t, both_xcpu_s), 0);
}

/* The model the round cost is for: --model, else the attention layer the
 * kernel is timed at (the demo's model: perf/calib.h). */
static nsp_status_t round_model(const cal_opts_t *o, nsp_model_t *m)
{
    if (o->model != NULL) {
        return nsp_model_preset(o->model, m);
    }
    calib_attn_model(o->q_heads, o->kv_heads, o->head_dim, m);
    return NSP_OK;
}

/* Kernels per layer per micro-batch: --launches, else 100 for a model of
 * a framework (the cost model's default) and 2 (forward, backward) for the
 * attention layer alone. */
static int round_launches(const cal_opts_t *o)
{
    return o->launches > 0 ? o->launches : o->model != NULL ? 100 : 2;
}

/* The bytes per rank of one weight collective: (N-1)/N of b P_dense in all,
 * measured as a world all-to-all of `per_peer` bytes to each rank (the same
 * bytes per rank as an all-gather), capped at --round-max-bytes per rank. */
static nsp_status_t round_bytes(const cal_opts_t *o, int nranks, double *full, size_t *per_peer)
{
    nsp_model_t m;
    double      w;

    NSP_CHECK(round_model(o, &m));
    NSP_CHECK(calib_dense_weight_bytes(&m, &w));
    *full     = w * (nranks - 1.0) / nranks;
    *per_peer = (size_t)ceil(fmin(w, (double)o->round_max_bytes) / nranks);
    *per_peer = *per_peer > 0 ? *per_peer : 1;
    return NSP_OK;
}

/* The world collective a micro-batch repeats: every rank at once, wall. */
static nsp_status_t measure_round(nsp_comm_t *world, const cal_opts_t *o, cal_rank_t *me)
{
    nsp_tp_comm_t     *tp = nsp_comm_tp(world);
    nsp_tp_alltoallv_t args;
    cal_a2a_t          x;
    double             full, t0;
    size_t             per_peer;
    int                n;
    nsp_status_t       status = NSP_OK;

    nsp_comm_size(world, &n);
    if (n < 2) {
        return NSP_OK;
    }
    NSP_CHECK(round_bytes(o, n, &full, &per_peer));
    NSP_CHECK(a2a_alloc(n, per_peer, &x));
    a2a_args(&x, per_peer, &args);
    for (int r = -1; r < o->reps && status == NSP_OK; ++r) { /* r = -1: warm-up */
        status = nsp_comm_barrier(world);
        t0     = nsp_now_s();
        if (status == NSP_OK) {
            status = nsp_tp_alltoallv(tp, &args, 0x740000u);
        }
        if (r >= 0) {
            me->weights_s[r] = nsp_now_s() - t0;
        }
    }
    a2a_free(&x);
    return status;
}

/* The round cost from the measured collective (every rank measured it;
 * rank 0 measured the launch): a collective of `bytes` costs the latency of
 * the top level plus the measured time beyond it scaled by the bytes. */
static nsp_status_t reduce_round(const cal_opts_t *o, const cal_rank_t *all, int nranks,
                                 cal_result_t *r)
{
    cal_round_t *R = &r->round;
    nsp_model_t  m;
    size_t       per_peer;
    double       lat = r->nlevels > 0 && r->level[r->nlevels - 1].degree >= 2
                           ? r->level[r->nlevels - 1].lat_s : 0.0;

    NSP_CHECK(round_model(o, &m));
    R->layers     = m.layers;
    R->launches   = round_launches(o);
    R->launch_s   = r->k.launch_s;
    R->no_weights = o->gemm_kernel;
    if (nranks >= 2) {
        NSP_CHECK(round_bytes(o, nranks, &R->bytes, &per_peer));
        R->measured_bytes = (double)per_peer * (nranks - 1.0);
        R->measured_s     = slowest_median(o, all, nranks, offsetof(cal_rank_t, weights_s));
        R->coll_s = R->measured_bytes >= R->bytes ? R->measured_s
                  : lat + fmax(0.0, R->measured_s - lat) * R->bytes / R->measured_bytes;
        R->weights_s = (1.0 - r->eta) * NSP_COST_ROUND_WEIGHT_PASSES * R->coll_s;
    }
    R->fixed_s = (R->no_weights ? 0.0 : R->weights_s) + R->layers * R->launches * R->launch_s;
    return NSP_OK;
}

static nsp_status_t fill_cluster(const cal_opts_t *o, cal_result_t *r)
{
    nsp_cluster_t *c = &r->c;
    int            li = r->intra >= 0 ? r->intra : r->inter;
    int            lx = r->inter >= 0 ? r->inter : r->intra;

    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", o->name);
    c->ranks = r->ranks, c->ranks_per_node = r->per_node;
    c->mem_bytes  = o->mem_bytes > 0 ? o->mem_bytes
                  : (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / r->per_node;
    c->attn_flops = 7.0 * o->q_heads * o->head_dim / r->k.fit.b;
    c->gemm_flops = r->k.gemm_flops;
    if (o->gemm_kernel) {
        nsp_model_t m;
        calib_attn_model(o->q_heads, o->kv_heads, o->head_dim, &m);
        NSP_CHECK(calib_gemm_from_kernel(&m, r->k.fit.a, &c->gemm_flops));
    }
    if (li < 0) { /* one rank: no exchange at all */
        c->bw_intra = c->bw_inter = 1e30;
    } else {
        c->bw_intra = r->level[li].bw, c->lat_intra = r->level[li].lat_s;
        c->bw_inter = r->level[lx].bw, c->lat_inter = r->level[lx].lat_s;
        c->cpu_byte_intra = r->level[li].cpu_byte, c->cpu_call_intra = r->level[li].cpu_call;
        c->cpu_byte_inter = r->level[lx].cpu_byte, c->cpu_call_inter = r->level[lx].cpu_call;
    }
    c->overlap       = r->eta;
    c->round_fixed_s = r->round.fixed_s;
    return NSP_OK;
}

/* Where round_fixed_s came from. */
static void json_from_round(nsp_json_writer_t *w, const cal_opts_t *o, const cal_result_t *r)
{
    const cal_round_t *R = &r->round;
    char               text[640], weights[320];

    snprintf(weights, sizeof(weights), "(1 - eta %.2f) x %.0f x %.4g s: one weight collective "
             "of %.4g bytes per rank ((N-1)/N of bf16 P_dense of %s), from a world all-to-all "
             "of %.4g bytes per rank in %.4g s (slowest rank, median of %d)%s", r->eta,
             NSP_COST_ROUND_WEIGHT_PASSES, R->coll_s, R->bytes,
             o->model != NULL ? o->model : "the attention layer", R->measured_bytes,
             R->measured_s, o->reps, R->no_weights ? "; not counted: --gemm kernel runs have "
             "no weights to move" : "");
    snprintf(text, sizeof(text), "%.4g s per round = %s + %d layers x %d launches x %.4g s (%s)",
             R->fixed_s, r->ranks >= 2 ? weights : "one rank: no weight collective",
             R->layers, R->launches, R->launch_s, o->launch_s > 0 ? "--launch-s as given"
             : "median wall of a one-token kernel call, half for fwd and bwd");
    nsp_json_string(w, "round_fixed_s", text);
}

/* Where cpu_byte_* and cpu_call_* came from (x: inter), with the bare
 * all-to-all's figures beside them (recorded, not used, when the executor
 * measured the level). */
static void json_from_xcpu(nsp_json_writer_t *w, const cal_opts_t *o, const cal_level_t *L,
                           int x)
{
    char text[768], bare[320];

    snprintf(bare, sizeof(bare), "the bare blocking all-to-all of degree %d: %.4g s of process "
             "CPU for %zu bytes per peer beyond %.4g s for %d (mean over ranks, median of %d): "
             "%.4g s per byte, %.4g s per call", L->degree, L->cpu_large_s, o->bytes,
             L->cpu_small_s, CAL_SMALL, o->reps, L->bare_byte, L->bare_call);
    if (L->xok) {
        snprintf(text, sizeof(text), "executor: the nested attention fwd + bwd of one sequence "
                 "per group of degree %d (the demo's path: packing, waits, progress thread), a "
                 "rank's process CPU less the kernel's thread CPU: %.4g s for %d tokens (model "
                 "bytes A = %.4g, sent %.4g) and %.4g s for %d (A = %.4g, sent %.4g), mean over "
                 "ranks, median of %d; the line X = cpu_byte 2 A + 4 cpu_call, x %d/4 bytes; "
                 "bare: %s", L->degree, L->xcpu_small_s, CAL_X_SMALL, L->xmodel_small,
                 L->xsent_small, L->xcpu_large_s, CAL_X_LARGE, L->xmodel_large, L->xsent_large,
                 o->reps, o->elem_bytes, bare);
    } else {
        snprintf(text, sizeof(text), "bare (degree %d does not shard %d/%d heads: no executor "
                 "measurement): %s", L->degree, o->q_heads, o->kv_heads, bare);
    }
    nsp_json_string(w, x ? "cpu_byte_inter" : "cpu_byte_intra", text);
    nsp_json_string(w, x ? "cpu_call_inter" : "cpu_call_intra", text);
}

static void json_from(nsp_json_writer_t *w, const cal_opts_t *o, const cal_result_t *r)
{
    char text[512];
    int  li = r->intra >= 0 ? r->intra : r->inter, lx = r->inter >= 0 ? r->inter : r->intra;

    nsp_json_begin_object(w, "_from", 0);
    snprintf(text, sizeof(text), "%d ranks, %d per node (host identity), %d nodes", r->ranks,
             r->per_node, r->nnodes);
    nsp_json_string(w, "ranks_per_node", text);
    snprintf(text, sizeof(text), "7 n_q D / b of the kernel fit t(s) = a s + b s^2 of all %d "
             "ranks timing at once (mean over ranks of each rank's best thread CPU of fwd+bwd, "
             "b = %.4g s); rank 0 alone: b = %.4g s (_kernel.alone)", r->ranks, r->k.fit.b,
             r->k.alone.b);
    nsp_json_string(w, "attn_flops", text);
    if (o->gemm_kernel) {
        snprintf(text, sizeof(text), "the kernel's per-token term a = %.4g s of all ranks at "
                 "once standing for the linear layers (alone: a = %.4g s)", r->k.fit.a,
                 r->k.alone.a);
    } else {
        snprintf(text, sizeof(text), "blocked float32 GEMM of %.0f (thread CPU) on all %d ranks "
                 "at once, at their mean time; rank 0 alone %.4g FLOP/s", r->k.gemm_n, r->ranks,
                 r->k.gemm_alone);
    }
    nsp_json_string(w, "gemm_flops", text);
    for (int x = 0; x < 2 && li >= 0; ++x) {
        const cal_level_t *L = &r->level[x ? lx : li];
        snprintf(text, sizeof(text), "all-to-all of degree %d (%s), %zu bytes per peer: median "
                 "%.4g s (slowest rank) beyond %.4g s for %d bytes, %d reps, x %d/%d bytes",
                 L->degree, L->across ? "across nodes" : "inside a node", o->bytes, L->large_s,
                 L->lat_s, CAL_SMALL, o->reps, (int)NSP_COST_DTYPE_BYTES, o->elem_bytes);
        nsp_json_string(w, x ? "bw_inter" : "bw_intra", text);
        snprintf(text, sizeof(text), "all-to-all of degree %d, %d bytes per peer: median %.4g s",
                 L->degree, CAL_SMALL, L->lat_s);
        nsp_json_string(w, x ? "lat_inter" : "lat_intra", text);
        json_from_xcpu(w, o, L, x);
    }
    json_from_round(w, o, r);
    snprintf(text, sizeof(text), "top level's all-to-all %.4g s and the kernel %.4g s alone, "
             "%.4g s together: (comm + comp - both) / min", r->comm_s, r->comp_s, r->both_s);
    nsp_json_string(w, "overlap", text);
    nsp_json_end(w);
}

static void json_seconds(nsp_json_writer_t *w, const char *key, const double *v, int n)
{
    nsp_json_begin_array(w, key, 1);
    for (int i = 0; i < n; ++i) {
        nsp_json_double(w, NULL, v[i]);
    }
    nsp_json_end(w);
}

/* The kernel's raw figures: all ranks at once (the fit the file uses: the
 * mean; the slowest rank's), rank 0 alone; the GEMM rates. */
static void json_kernel(nsp_json_writer_t *w, const cal_result_t *r)
{
    const calib_fit_t *f = &r->k.fit;

    nsp_json_begin_object(w, "_kernel", 0);
    nsp_json_int(w, "tokens", f->tokens);
    nsp_json_begin_array(w, "lengths", 1);
    for (int i = 0; i < f->nlens; ++i) {
        nsp_json_int(w, NULL, f->len[i]);
    }
    nsp_json_end(w);
    nsp_json_int(w, "ranks_at_once", r->ranks);
    json_seconds(w, "fwd_bwd_s", f->fwd_bwd_s, f->nlens);
    json_seconds(w, "slowest_fwd_bwd_s", r->k.slowest_s, f->nlens);
    nsp_json_double(w, "a_s_per_token", f->a);
    nsp_json_double(w, "b_s_per_token2", f->b);
    nsp_json_begin_object(w, "alone", 0);
    json_seconds(w, "fwd_bwd_s", r->k.alone.fwd_bwd_s, r->k.alone.nlens);
    nsp_json_double(w, "a_s_per_token", r->k.alone.a);
    nsp_json_double(w, "b_s_per_token2", r->k.alone.b);
    nsp_json_end(w);
    nsp_json_begin_object(w, "gemm_flops", 1);
    perf_json_num(w, "at_once_mean", r->k.gemm_flops);
    perf_json_num(w, "at_once_slowest", r->k.gemm_slowest);
    perf_json_num(w, "alone", r->k.gemm_alone);
    nsp_json_end(w);
    nsp_json_end(w);
}

/* The overlap measurement's raw figures, with the exchange's CPU beside
 * the kernel (all of the rank's process CPU in "both" but the kernel's
 * thread CPU: copies, polls, the progress thread) against the same
 * exchange's CPU alone (the top level's blocking all-to-all): a recorded
 * measurement, not a key. */
static void json_overlap(nsp_json_writer_t *w, const cal_result_t *r)
{
    const int top = r->nlevels - 1;

    nsp_json_begin_object(w, "_overlap", 1);
    perf_json_num(w, "comm_s", r->comm_s);
    perf_json_num(w, "comp_s", r->comp_s);
    perf_json_num(w, "both_s", r->both_s);
    perf_json_num(w, "exchange_cpu_beside_kernel_s", r->both_xcpu_s);
    perf_json_num(w, "exchange_cpu_alone_s", top >= 1 ? r->level[top].cpu_large_s : 0.0);
    nsp_json_end(w);
}

static void json_levels(nsp_json_writer_t *w, const cal_result_t *r)
{
    nsp_json_begin_array(w, "_levels", 0);
    for (int l = 0; l < r->nlevels; ++l) {
        const cal_level_t *L = &r->level[l];
        if (L->degree < 2) {
            continue;
        }
        nsp_json_begin_object(w, NULL, 1);
        nsp_json_int(w, "degree", L->degree);
        nsp_json_string(w, "where", L->across ? "across nodes" : "inside a node");
        nsp_json_double(w, "lat_s", L->lat_s);
        nsp_json_double(w, "large_s", L->large_s);
        nsp_json_double(w, "bw", L->bw);
        nsp_json_double(w, "cpu_small_s", L->cpu_small_s);
        nsp_json_double(w, "cpu_large_s", L->cpu_large_s);
        nsp_json_double(w, "cpu_byte", L->bare_byte);
        nsp_json_double(w, "cpu_call", L->bare_call);
        nsp_json_bool(w, "executor_measured", L->xok);
        if (L->xok) {
            nsp_json_double(w, "xcpu_small_s", L->xcpu_small_s);
            nsp_json_double(w, "xcpu_large_s", L->xcpu_large_s);
            nsp_json_double(w, "xsent_small_bytes", L->xsent_small);
            nsp_json_double(w, "xsent_large_bytes", L->xsent_large);
            nsp_json_double(w, "xmodel_small_bytes", L->xmodel_small);
            nsp_json_double(w, "xmodel_large_bytes", L->xmodel_large);
            nsp_json_double(w, "xcpu_byte", L->xcpu_byte);
            nsp_json_double(w, "xcpu_call", L->xcpu_call);
            nsp_json_double(w, "xcpu_many_s", L->xcpu_many_s);
        }
        nsp_json_end(w);
    }
    nsp_json_end(w);
    json_kernel(w, r);
    json_overlap(w, r);
    nsp_json_begin_object(w, "_round", 0);
    perf_json_num(w, "weight_bytes_per_rank", r->round.bytes);
    perf_json_num(w, "measured_bytes_per_rank", r->round.measured_bytes);
    perf_json_num(w, "measured_s", r->round.measured_s);
    perf_json_num(w, "collective_s", r->round.coll_s);
    perf_json_num(w, "weights_s", r->round.weights_s);
    nsp_json_bool(w, "weights_counted", !r->round.no_weights);
    nsp_json_int(w, "layers", r->round.layers);
    nsp_json_int(w, "launches_per_layer", r->round.launches);
    perf_json_num(w, "launch_s", r->round.launch_s);
    perf_json_num(w, "round_fixed_s", r->round.fixed_s);
    nsp_json_end(w);
}

static nsp_status_t write_cluster(const cal_opts_t *o, const cal_result_t *r)
{
    const nsp_cluster_t *c = &r->c;
    FILE                *f = fopen(o->out, "w");
    nsp_json_writer_t    w;
    nsp_status_t         status;

    if (f == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot write %s: %s (--out)", o->out, strerror(errno));
    }
    nsp_json_writer_init(&w, f, 2);
    nsp_json_begin_object(&w, NULL, 0);
    nsp_json_string(&w, "_comment", "Written by perf/nsp_calibrate (docs/reference/calibration.md); "
                    "bw in the cost model's unit (bf16 elements); _from says where each key came "
                    "from");
    nsp_cluster_write_fields(&w, c);
    json_from(&w, o, r);
    json_levels(&w, r);
    nsp_json_end(&w);
    status = nsp_json_writer_finish(&w);
    fputc('\n', f);
    if (fclose(f) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", o->out, strerror(errno));
    }
    return status;
}

static void print_result(const cal_opts_t *o, const cal_result_t *r)
{
    static const perf_col_t cols[] = {{"degree", "", 6, -1, 0},    {"where", "", 13, 0, 1},
                                      {"lat_us", "", 10, 1, 0},    {"large_ms", "", 10, 3, 0},
                                      {"bw_GB/s", "", 12, 4, 0},   {"cpu_ns/B", "", 10, 3, 0},
                                      {"cpu_us/call", "", 12, 1, 0}};
    const cal_round_t      *R = &r->round;

    printf("# nsp_calibrate: %d ranks, %d per node, %d nodes; %zu bytes per peer, %d reps\n",
           r->ranks, r->per_node, r->nnodes, o->bytes, o->reps);
    perf_table_header(stdout, cols, 7);
    for (int l = 0; l < r->nlevels; ++l) {
        const cal_level_t *L = &r->level[l];
        if (L->degree >= 2) {
            perf_cell_t row[] = {PERF_NUM(L->degree),
                                 PERF_TEXT(L->across ? "across nodes" : "inside a node"),
                                 PERF_NUM(L->lat_s * 1e6), PERF_NUM(L->large_s * 1e3),
                                 PERF_NUM(L->bw / 1e9), PERF_NUM(L->bare_byte * 1e9),
                                 PERF_NUM(L->bare_call * 1e6)};
            perf_table_row(stdout, cols, 7, row);
        }
    }
    printf("# kernel fwd+bwd, all %d ranks at once: t(s) = %.4g s + %.4g s^2 per sequence -> "
           "attn_flops %.4g; gemm_flops %.4g (rank 0 alone: %.4g s + %.4g s^2, b / alone "
           "%.3f)\n", r->ranks, r->k.fit.a, r->k.fit.b, r->c.attn_flops, r->c.gemm_flops,
           r->k.alone.a, r->k.alone.b, r->k.fit.b / r->k.alone.b);
    printf("# exchange CPU per rank (through the executor where measured; cpu_ns/B and "
           "cpu_us/call above: the bare all-to-all): intra %.4g s/byte + %.4g s/call, inter "
           "%.4g s/byte + %.4g s/call\n", r->c.cpu_byte_intra, r->c.cpu_call_intra,
           r->c.cpu_byte_inter, r->c.cpu_call_inter);
    printf("# overlap: comm %.2f ms, comp %.2f ms, both %.2f ms -> eta %.2f; the exchange's "
           "CPU beside the kernel %.2f ms (alone %.2f ms)\n", r->comm_s * 1e3, r->comp_s * 1e3,
           r->both_s * 1e3, r->eta, r->both_xcpu_s * 1e3,
           r->nlevels > 1 ? r->level[r->nlevels - 1].cpu_large_s * 1e3 : 0.0);
    printf("# round: weight collective %.4g bytes/rank in %.3f ms (measured %.4g bytes in "
           "%.3f ms)%s; %d layer(s) x %d launches x %.2f us -> round_fixed_s %.4g\n", R->bytes,
           R->coll_s * 1e3, R->measured_bytes, R->measured_s * 1e3,
           R->no_weights ? ", not counted (--gemm kernel)" : "", R->layers, R->launches,
           R->launch_s * 1e6, R->fixed_s);
}

/* The kernel fit and GEMM rate of every rank at once: per length the mean
 * over ranks of each rank's best time (the model prices each rank's compute
 * from its own sequences and takes the max over ranks itself), the slowest
 * rank's kept; the GEMM at the mean time per GEMM. */
static nsp_status_t reduce_kernel(const cal_opts_t *o, const cal_rank_t *all, int nranks,
                                  cal_result_t *r)
{
    calib_fit_t *f = &r->k.fit;
    double       inv = 0;

    NSP_CHECK(calib_fit_init(cal_lens, CAL_NLENS, o->kernel_tokens, CAL_KERNEL_REPS, f));
    r->k.gemm_slowest = INFINITY;
    for (int k = 0; k < nranks; ++k) {
        for (int i = 0; i < CAL_NLENS; ++i) {
            f->fwd_bwd_s[i] += all[k].kernel_s[i] / nranks;
            r->k.slowest_s[i] = fmax(r->k.slowest_s[i], all[k].kernel_s[i]);
        }
        inv += 1.0 / all[k].gemm_flops / nranks;
        r->k.gemm_slowest = fmin(r->k.gemm_slowest, all[k].gemm_flops);
    }
    r->k.gemm_flops = 1.0 / inv;
    return calib_fit_solve(f);
}

/* Rank 0: gather, fit, write, and load the file back as the planner would. */
static nsp_status_t finish(const cal_opts_t *o, const cal_rank_t *all, int nranks,
                           cal_result_t *r)
{
    nsp_cluster_t back;

    r->ranks = nranks;
    reduce_levels(o, all, nranks, r);
    NSP_CHECK(reduce_kernel(o, all, nranks, r));
    NSP_CHECK(reduce_round(o, all, nranks, r));
    NSP_CHECK(fill_cluster(o, r));
    NSP_CHECK(write_cluster(o, r));
    print_result(o, r);
    NSP_CHECK(nsp_cluster_load(o->out, &back));
    printf("# wrote %s; nsp_cluster_load reads it back: %s, %d ranks, %d per node, bw intra "
           "%.4g inter %.4g, overlap %.2f\n", o->out, back.name, back.ranks, back.ranks_per_node,
           back.bw_intra, back.bw_inter, back.overlap);
    return NSP_OK;
}

/* ---- a rank ------------------------------------------------------------ */

/* The kernel per length and the GEMM on every rank at once, as a step
 * computes (on an oversubscribed host several ranks share a core and its
 * caches): each rank's best thread CPU of CAL_KERNEL_REPS. */
static nsp_status_t measure_kernel_all(nsp_comm_t *comm, const cal_opts_t *o,
                                       const nsp_attn_params_t *a, cal_rank_t *me)
{
    for (int i = 0; i < CAL_NLENS; ++i) {
        NSP_CHECK(nsp_comm_barrier(comm));
        NSP_CHECK(calib_kernel_time(a, cal_lens[i], o->kernel_tokens, CAL_KERNEL_REPS,
                                    &me->kernel_s[i]));
    }
    NSP_CHECK(nsp_comm_barrier(comm));
    return gemm_rate(CAL_GEMM_N, &me->gemm_flops);
}

static nsp_status_t rank_measure(nsp_comm_t *comm, nsp_tree_t *tree, const cal_opts_t *o,
                                 cal_rank_t *me, cal_result_t *r)
{
    nsp_attn_params_t a;
    int               rank;

    memset(&a, 0, sizeof(a));
    a.q_heads = o->q_heads, a.kv_heads = o->kv_heads, a.head_dim = o->head_dim, a.causal = 1;
    nsp_comm_rank(comm, &rank);
    nsp_comm_nnodes(comm, &me->nnodes);
    NSP_CHECK(nsp_comm_place(comm, rank, &me->node, NULL, &me->local_size));
    NSP_CHECK(measure_levels(comm, tree, o, me));
    NSP_CHECK(measure_overlap(comm, tree, o, &a, me));
    NSP_CHECK(measure_xcpu(comm, tree, o, &a, me));
    NSP_CHECK(measure_round(comm, o, me));
    if (rank == 0) { /* alone on a core as far as the others wait at the barrier */
        NSP_CHECK(calib_kernel_fit(&a, cal_lens, CAL_NLENS, o->kernel_tokens, CAL_KERNEL_REPS,
                                   &r->k.alone));
        r->k.gemm_n = CAL_GEMM_N;
        NSP_CHECK(gemm_rate(CAL_GEMM_N, &r->k.gemm_alone));
        r->k.launch_s = o->launch_s;
        if (!(o->launch_s > 0)) {
            NSP_CHECK(calib_kernel_launch(&a, 200, &r->k.launch_s));
        }
    }
    NSP_CHECK(measure_kernel_all(comm, o, &a, me));
    return nsp_comm_barrier(comm);
}

static int rank_main(const cal_opts_t *o)
{
    nsp_config_t  cfg  = NSP_CONFIG_INITIALIZER;
    nsp_comm_t   *comm = NULL;
    nsp_tree_t   *tree = NULL;
    cal_rank_t   *me   = calloc(1, sizeof(*me)), *all = NULL;
    cal_result_t *r    = calloc(1, sizeof(*r));
    int           rank = 0, size = 0;
    nsp_status_t  st;

    /* the others wait at a barrier while rank 0 times the kernel */
    cfg.timeout_s = getenv("NSPCOMM_TIMEOUT") == NULL ? 600.0 : 0.0;
    st = me != NULL && r != NULL ? nsp_comm_init_env(&comm, &cfg) : NSP_ERR_NO_MEMORY;
    if (st == NSP_OK) {
        st = nsp_tree_create(comm, NULL, 0, &tree);
    }
    if (st == NSP_OK) {
        nsp_comm_rank(comm, &rank), nsp_comm_size(comm, &size);
        all = size <= 256 ? calloc((size_t)size, sizeof(*all)) : NULL; /* scratch[256] */
        st  = all != NULL ? rank_measure(comm, tree, o, me, r) : NSP_ERR_NO_MEMORY;
    }
    if (st == NSP_OK) {
        st = nsp_comm_allgather(comm, me, all, sizeof(*me));
    }
    if (st == NSP_OK && rank == 0) {
        st = finish(o, all, size, r);
    }
    if (st != NSP_OK) {
        fprintf(stderr, "nsp_calibrate: rank %d: %s\n", rank, nsp_last_error());
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    free(me), free(all), free(r);
    return st == NSP_OK ? 0 : 1;
}

/* ---- launch ------------------------------------------------------------ */

/* nsp_launch_fn_t: one forked rank (it entered its node in the launcher). */
static int cal_rank(int rank, int nranks, void *arg)
{
    char num[16];

    (void)nranks;
    snprintf(num, sizeof(num), "%d", rank);
    setenv("NSPCOMM_RANK", num, 1);
    return rank_main(arg);
}

/* The forked world's rendezvous secret: NSPCOMM_TOKEN as given, else a
 * fresh random one (64 hex digits) the ranks inherit, so the rendezvous may
 * listen on a namespace cluster's address and only our ranks can join. */
static int cal_token(void)
{
    unsigned char key[32];
    char          hex[2 * sizeof(key) + 1];

    if (getenv("NSPCOMM_TOKEN") != NULL || getenv("NSPCOMM_TOKEN_FILE") != NULL) {
        return 0;
    }
    if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
        fprintf(stderr, "nsp_calibrate: no random bytes for the rendezvous secret\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof(key); ++i) {
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    }
    setenv("NSPCOMM_TOKEN", hex, 1);
    return 0;
}

/* Fork o->ranks ranks on the shared launcher (tools/nsp_launch.h), meeting
 * at NSPCOMM_ROOT (node 0 of a namespace cluster, else loopback). */
static int fork_ranks(const cal_opts_t *o)
{
    char root[64], num[16];

    if (cal_token() != 0) {
        return 1;
    }
    snprintf(root, sizeof(root), "%s:%d", nc_nodes() > 0 ? "198.18.0.1" : "127.0.0.1",
             20000 + (int)(getpid() % 20000));
    setenv("NSPCOMM_ROOT", root, 1);
    snprintf(num, sizeof(num), "%d", o->ranks);
    setenv("NSPCOMM_NRANKS", num, 1);
    return perf_fork_ranks(&(perf_fork_t){.prog = CAL_PROG, .nranks = o->ranks,
                                          .fn = cal_rank, .arg = (void *)o});
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: nsp_calibrate [options]   (docs/reference/calibration.md)\n"
            "Measure this world and write the cluster file nsp_cluster_load reads.\n\n"
            "  --ranks N            fork N local ranks (under NSP_NETCLUSTER each enters its\n"
            "                       node); without it, every process is one rank of mpirun,\n"
            "                       srun or NSPCOMM_ROOT/NSPCOMM_RANK/NSPCOMM_NRANKS\n"
            "  --out FILE           the cluster file (default nsp-cluster.json)\n"
            "  --name NAME          its name (default calibrated)\n"
            "  --heads NQ/NKV       heads of the kernel measured (default 8/2)\n"
            "  --head-dim D         (default 64)\n"
            "  --elem-bytes E       bytes per element of the runs the file is for (default 2:\n"
            "                       bf16, the cost model's unit; 4 for float32 runs)\n"
            "  --gemm measure|kernel  GEMM rate from a GEMM (default), or the kernel's\n"
            "                       per-token term for runs with no linear layers\n"
            "  --bytes B            bytes per peer of the bandwidth exchange (default 1048576)\n"
            "  --reps R             repetitions per exchange (default 5, at most %d)\n"
            "  --mem-bytes M        memory per rank (default: this host's RAM / ranks per node)\n"
            "  --kernel-tokens T    tokens per timed kernel call, a multiple of 2048 (4096)\n"
            "  --model NAME         model preset the per-round cost is for (its dense weights'\n"
            "                       collectives, its layers); default: the attention layer timed\n"
            "  --launches K         kernels per layer per micro-batch (default 100 with --model,\n"
            "                       2 without: the attention forward and backward)\n"
            "  --launch-s S         seconds per kernel launch, as given (default: measured on\n"
            "                       the reference kernel; give the GPU's on GPUs)\n"
            "  --round-max-bytes B  the weight collective is measured at most this per rank and\n"
            "                       scaled by its bytes beyond (default 67108864)\n",
            CAL_MAX_REPS);
}

/* --heads Q/KV: two counts, Q a multiple of KV (checked). */
static nsp_status_t parse_heads(const char *v, cal_opts_t *o)
{
    char q[32], kv[32];

    if (sscanf(v, "%31[^/]/%31s", q, kv) != 2) {
        fprintf(stderr, CAL_PROG ": --heads %s: expected Q/KV, e.g. 8/2\n", v);
        return NSP_ERR_INVALID_ARG;
    }
    NSP_CHECK(nsp_opt_int(CAL_PROG, "--heads (query)", q, 1, 4096, &o->q_heads));
    NSP_CHECK(nsp_opt_int(CAL_PROG, "--heads (kv)", kv, 1, 4096, &o->kv_heads));
    if (o->q_heads % o->kv_heads != 0) {
        fprintf(stderr, CAL_PROG ": --heads %s: query heads must be a multiple of KV heads\n",
                v);
        return NSP_ERR_INVALID_ARG;
    }
    return NSP_OK;
}

/* One option `a` with value `v` into *o (tools/nsp_opt.h); NSP_ERR_NOT_FOUND
 * when `a` is not an option of ours. */
static nsp_status_t parse_one(const char *a, const char *v, cal_opts_t *o)
{
    static const char *const gemm[] = {"measure", "kernel"};
    int                      k;

    if (strcmp(a, "--ranks") == 0) {
        return nsp_opt_int(CAL_PROG, a, v, 0, 256, &o->ranks);
    } else if (strcmp(a, "--out") == 0) {
        o->out = v;
        return nsp_opt_out_path(CAL_PROG, a, v);
    } else if (strcmp(a, "--name") == 0) {
        o->name = v;
        return NSP_OK;
    } else if (strcmp(a, "--heads") == 0) {
        return parse_heads(v, o);
    } else if (strcmp(a, "--head-dim") == 0) {
        return nsp_opt_int(CAL_PROG, a, v, 1, 4096, &o->head_dim);
    } else if (strcmp(a, "--elem-bytes") == 0) {
        return nsp_opt_int(CAL_PROG, a, v, 1, 8, &o->elem_bytes);
    } else if (strcmp(a, "--gemm") == 0) {
        NSP_CHECK(nsp_opt_choice(CAL_PROG, a, v, gemm, 2, &k));
        o->gemm_kernel = k == 1;
        return NSP_OK;
    } else if (strcmp(a, "--bytes") == 0) {
        return nsp_opt_size(CAL_PROG, a, v, CAL_SMALL + 1, (size_t)1 << 30, &o->bytes);
    } else if (strcmp(a, "--reps") == 0) {
        return nsp_opt_int(CAL_PROG, a, v, 1, CAL_MAX_REPS, &o->reps);
    } else if (strcmp(a, "--kernel-tokens") == 0) { /* a multiple of 2048 */
        NSP_CHECK(nsp_opt_i64(CAL_PROG, a, v, 2048, (int64_t)1 << 24, &o->kernel_tokens));
        if (o->kernel_tokens % 2048 != 0) {
            fprintf(stderr, CAL_PROG ": --kernel-tokens %s: expected a multiple of 2048\n", v);
            return NSP_ERR_INVALID_ARG;
        }
        return NSP_OK;
    } else if (strcmp(a, "--model") == 0) {
        nsp_model_t m;
        o->model = v;
        if (nsp_model_preset(v, &m) != NSP_OK) {
            fprintf(stderr, CAL_PROG ": --model %s: %s\n", v, nsp_last_error());
            return NSP_ERR_INVALID_ARG;
        }
        return NSP_OK;
    } else if (strcmp(a, "--launches") == 0) {
        return nsp_opt_int(CAL_PROG, a, v, 1, 100000, &o->launches);
    } else if (strcmp(a, "--launch-s") == 0) {
        return nsp_opt_double(CAL_PROG, a, v, 0, 1, NSP_OPT_LO_OPEN, &o->launch_s);
    } else if (strcmp(a, "--round-max-bytes") == 0) {
        return nsp_opt_size(CAL_PROG, a, v, 1, (size_t)1 << 32, &o->round_max_bytes);
    } else if (strcmp(a, "--mem-bytes") == 0) {
        return nsp_opt_double(CAL_PROG, a, v, 0, 1e18, NSP_OPT_LO_OPEN, &o->mem_bytes);
    }
    return NSP_ERR_NOT_FOUND;
}

/* Parse argv into *o; 0, 1 (--help), or -1 (bad option, message printed). */
static int parse(int argc, char **argv, cal_opts_t *o)
{
    *o = (cal_opts_t){.out = "nsp-cluster.json", .name = "calibrated", .q_heads = 8,
                      .kv_heads = 2, .head_dim = 64, .elem_bytes = 2, .bytes = 1u << 20,
                      .reps = 5, .kernel_tokens = 4096,
                      .round_max_bytes = (size_t)64 << 20};
    for (int i = 1; i < argc; i += 2) {
        const char  *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        nsp_status_t st;
        if (strcmp(a, "--help") == 0) {
            return 1;
        }
        st = v != NULL ? parse_one(a, v, o) : NSP_ERR_NOT_FOUND;
        if (st == NSP_ERR_NOT_FOUND) {
            fprintf(stderr, CAL_PROG ": %s%s: unknown option or missing value (see --help)\n",
                    a, v != NULL ? "" : " (no value)");
        }
        if (st != NSP_OK) {
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    cal_opts_t o;
    int        p = parse(argc, argv, &o);

    if (p != 0) {
        usage(p > 0 ? stdout : stderr);
        return p > 0 ? 0 : 2;
    }
    return o.ranks > 0 ? fork_ranks(&o) : rank_main(&o);
}
