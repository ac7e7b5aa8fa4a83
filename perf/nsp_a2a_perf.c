/*
 * nsp_a2a_perf: the nested all-to-all measured the way nccl-tests measures
 * collectives, beside the exchanges it replaces, in one run on the same bytes.
 *
 *   nsp_a2a_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
 *                [--ranks N] [--workload FILE] [--model NAME] [--cluster NAME]
 *                [--tokens-per-rank T] [--max-len S] [--seed K] [--heads H]
 *                [--head-dim D] [--elem 2|4] [-J FILE]
 *   mpirun -np N nsp_a2a_perf ...     (rank/size from the launcher; adds MPI_Alltoallv)
 *
 * A real batch is drawn from the workload and planned by the nested planner
 * for the model and an N-rank cluster; for each size (bytes per rank of the
 * sequence-sharded buffer [T_local, H, D]) its lengths are scaled so the batch
 * holds size * N bytes, keeping the plan's groups. Methods, one row each:
 *   nested     the nested all-to-all of round 0, levels pipelined (pack,
 *              exchange and unpack included), sequence-to-head
 *   nested-mapped  the same with its buffers from nsp_mem_alloc and
 *              params.mapped = 1: same-host peers read each other's sources
 *              directly (one copy per byte); `nested` passes mapped = 0
 *   serial     the same, levels one after another
 *   levels     each level alone (a plan holding only the groups of one degree,
 *              level 0's local copy included), the levels called one after
 *              another in every timed call, so the time is their sum as a
 *              step would pay it; rows level-dN give each level timed back to
 *              back on its own (its data stays warm in cache between calls,
 *              which flatters a small level)
 *   flat       the same batch as one group of all N ranks (static SP of
 *              degree N): a flat all-to-all over all ranks
 *   tp-same    this library's transport alltoallv over the world carrying
 *              exactly the nested traffic (same bytes per pair, no pack)
 *   mpi        MPI_Alltoallv on exactly the nested traffic (under mpirun)
 * Each method runs -n calls back to back (as nccl-tests), split into 4
 * blocks interleaved with the other methods' blocks, so load drift on a
 * shared machine hits every method alike. time = max over ranks of the mean
 * time per call; algbw = size / time;
 * busbw = mean over ranks of the bytes each sends to OTHER ranks / time
 * (for a uniform all-to-all this is nccl-tests' algbw * (N-1)/N).
 */
#include "config.h"

#include "attn_sp/layout.h"
#include "attn_sp/pack.h"
#include "common/log.h"
#include "planner/plan_internal.h"
#include "transport/comm.h"
#include "transport/request.h"
#include "nsp_launch.h"
#include "nsp_opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef NSP_HAVE_MPI
#include <mpi.h>
#endif

#define PERF_MAX_METHODS 8

typedef struct perf_opts {
    size_t      min_bytes, max_bytes;
    double      factor;
    int         iters, warmup, check;
    int         ranks;          /* --ranks: fork this many local ranks */
    const char *workload;
    const char *model, *cluster;
    int64_t     tokens_per_rank, max_len;
    uint64_t    seed;
    int         heads, head_dim;
    size_t      elem;
    const char *json;
    double      timeout_s;      /* --timeout: the whole forked run */
    int         round;          /* --round: plan round measured; -1: the one with most levels */
    uint32_t    methods;        /* --methods: bit k for method_names[k]; all by default */
} perf_opts_t;

typedef struct perf_ctx {
    perf_opts_t opts;
    nsp_comm_t *comm;
    nsp_tree_t *tree;
    int         rank, nranks;
    int         mpi;            /* MPI is initialised (running under mpirun) */
    const char *mpi_pml;        /* OMPI_MCA_pml as set, or "default" */
    int         chosen_round;   /* the plan round measured */
    nsp_unique_id_t id;         /* --ranks: the forked ranks' bootstrap id */
} perf_ctx_t;

typedef struct perf_row {
    const char *method;
    size_t      bytes;          /* nominal bytes per rank */
    double      time_us;
    double      algbw, busbw;   /* GB/s */
    double      wrong;          /* elements wrong, summed over ranks; -1: not checked */
    int         valid;
} perf_row_t;

/* ---- small helpers ------------------------------------------------------- */

static void die_status(const perf_ctx_t *c, const char *what)
{
    fprintf(stderr, "nsp_a2a_perf: rank %d: %s: %s\n", c ? c->rank : -1, what,
            nsp_last_error());
#ifdef NSP_HAVE_MPI
    if (c != NULL && c->mpi) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
#endif
    /* Leave nothing behind: the tree and the world (its UCX endpoints and
     * shared memory) go before exit. */
    if (c != NULL && c->tree != NULL) {
        nsp_tree_destroy(c->tree);
    }
    if (c != NULL && c->comm != NULL) {
        nsp_comm_destroy(c->comm);
    }
    exit(1);
}

#define PCHECK(c, expr, what)          \
    do {                               \
        if ((expr) != NSP_OK) {        \
            die_status((c), (what));   \
        }                              \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);

    if (p == NULL) {
        fprintf(stderr, "nsp_a2a_perf: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Max and sum over ranks of a double. */
static void allreduce(perf_ctx_t *c, double v, double *max, double *sum)
{
    double *all = xmalloc(sizeof(double) * (size_t)c->nranks);

    PCHECK(c, nsp_comm_allgather(c->comm, &v, all, sizeof(v)), "allgather");
    *max = all[0];
    *sum = 0;
    for (int r = 0; r < c->nranks; ++r) {
        *max = all[r] > *max ? all[r] : *max;
        *sum += all[r];
    }
    free(all);
}

/* The element of the global tensor at (seq, token, head, dim), elem bytes. */
static void tensor_value(int seq, int64_t tok, int head, int dim, size_t elem, void *out)
{
    uint64_t x = ((uint64_t)seq << 40) ^ ((uint64_t)tok << 16) ^ ((uint64_t)head << 8) ^
                 (uint64_t)dim;
    uint32_t v;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    v = (uint32_t)x;
    memcpy(out, &v, elem < 4 ? elem : 4);
    if (elem > 4) {
        memset((char *)out + 4, 0, elem - 4);
    }
}

/* ---- plans --------------------------------------------------------------- */

/* A one-round plan from `groups` (borrowed, seqs copied) of `src` lengths. */
static nsp_plan_t *plan_from_groups(const nsp_plan_t *src, const int64_t *lens,
                                    const nsp_plan_group_t *groups, int ngroups)
{
    nsp_plan_t *plan;

    if (nsp_plan_alloc("perf", &src->model, &src->cluster, lens, src->nseqs, &plan) != NSP_OK) {
        return NULL;
    }
    plan->rounds  = calloc(1, sizeof(*plan->rounds));
    plan->nrounds = 1;
    plan->rounds[0].groups = calloc((size_t)(ngroups > 0 ? ngroups : 1), sizeof(nsp_plan_group_t));
    for (int g = 0; g < ngroups; ++g) {
        nsp_plan_group_t *pg = &plan->rounds[0].groups[plan->rounds[0].ngroups++];
        *pg      = groups[g];
        pg->seqs = xmalloc(sizeof(int) * (size_t)groups[g].nseqs);
        memcpy(pg->seqs, groups[g].seqs, sizeof(int) * (size_t)groups[g].nseqs);
    }
    return plan;
}

/* Tokens of round 0. */
static int64_t round0_tokens(const nsp_plan_t *plan)
{
    int64_t t = 0;

    for (int g = 0; g < plan->rounds[0].ngroups; ++g) {
        for (int j = 0; j < plan->rounds[0].groups[g].nseqs; ++j) {
            t += plan->seq_lens[plan->rounds[0].groups[g].seqs[j]];
        }
    }
    return t;
}

typedef struct perf_plans {
    nsp_plan_t *nested;           /* round 0 of the real plan, scaled */
    nsp_plan_t *flat;             /* the same sequences in one group of N */
    int         nlevels;          /* distinct degrees in round 0 (1 included) */
    int         degree[32];
    nsp_plan_t *level[32];        /* round 0 restricted to one degree */
} perf_plans_t;

static void plans_free(perf_plans_t *p)
{
    nsp_plan_free(p->nested);
    nsp_plan_free(p->flat);
    for (int l = 0; l < p->nlevels; ++l) {
        nsp_plan_free(p->level[l]);
    }
    memset(p, 0, sizeof(*p));
}

/* Scale round 0 of `real` to `bytes` per rank and derive the other plans. */
static void plans_make(const perf_ctx_t *c, const nsp_plan_t *real, size_t bytes,
                       perf_plans_t *out)
{
    const nsp_plan_round_t *r0 = &real->rounds[0];
    double   tok_bytes = (double)c->opts.heads * c->opts.head_dim * (double)c->opts.elem;
    double   want = (double)bytes * c->nranks / tok_bytes;
    double   f = want / (double)round0_tokens(real);
    int64_t *lens = xmalloc(sizeof(int64_t) * (size_t)real->nseqs);
    int     *all = xmalloc(sizeof(int) * (size_t)real->nseqs);
    int      nall = 0;
    nsp_plan_group_t flat = {.rank0 = 0, .size = c->nranks, .ring = 1, .pipelined = 1};

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < real->nseqs; ++i) {
        lens[i] = (int64_t)llround((double)real->seq_lens[i] * f);
        lens[i] = lens[i] > 0 ? lens[i] : 1;
    }
    out->nested = plan_from_groups(real, lens, r0->groups, r0->ngroups);
    for (int g = 0; g < r0->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r0->groups[g];
        int                     k;
        for (int j = 0; j < pg->nseqs; ++j) {
            all[nall++] = pg->seqs[j];
        }
        for (k = 0; k < out->nlevels && out->degree[k] != pg->size; ++k) {
        }
        if (k == out->nlevels && k < 32) {
            out->degree[out->nlevels++] = pg->size;
        }
    }
    for (int a = 0; a < out->nlevels; ++a) { /* ascending */
        for (int b = a + 1; b < out->nlevels; ++b) {
            if (out->degree[b] < out->degree[a]) {
                int t = out->degree[a];
                out->degree[a] = out->degree[b];
                out->degree[b] = t;
            }
        }
    }
    for (int l = 0; l < out->nlevels; ++l) {
        nsp_plan_group_t *gs = xmalloc(sizeof(*gs) * (size_t)r0->ngroups);
        int               n  = 0;
        for (int g = 0; g < r0->ngroups; ++g) {
            if (r0->groups[g].size == out->degree[l]) {
                gs[n++] = r0->groups[g];
            }
        }
        out->level[l] = plan_from_groups(real, lens, gs, n);
        free(gs);
    }
    flat.nseqs = nall;
    flat.seqs  = all;
    out->flat  = plan_from_groups(real, lens, &flat, 1);
    free(all);
    free(lens);
    if (out->nested == NULL || out->flat == NULL) {
        die_status(c, "cannot build the scaled plans");
    }
}

/* ---- methods ---------------------------------------------------------------
 *
 * Every method is a runner: one call() is one operation on this rank.
 * time_runners() times blocks of back-to-back calls, interleaving the
 * methods; time = mean per call on a rank, max over ranks.
 */
typedef struct traffic {
    size_t *sc, *sd, *rc, *rd;   /* [N] bytes per world peer, self included */
    char   *send, *recv;
    size_t  stot, rtot;
    double  offrank;             /* bytes this rank sends to other ranks */
} traffic_t;

typedef struct mpack_level {
    nsp_layout_level_t lv;
    nsp_level_view_t   v;
    nsp_layout_heads_t hs;
    size_t            *sb, *sd, *rb, *rd; /* [d]; displacements into the world buffers */
} mpack_level_t;

typedef struct runner runner_t;
struct runner {
    const char *name;
    void      (*call)(perf_ctx_t *c, runner_t *r);
    double    (*check)(perf_ctx_t *c, runner_t *r); /* elements wrong on this rank */
    double      offrank;   /* bytes this rank sends to other ranks per call */
    double      t_sum;     /* seconds over the timed calls on this rank */
    /* nested all-to-all (and the layout of mpi+pack) */
    int               mapped;  /* src and dst from nsp_mem_alloc */
    nsp_layout_t     *lay;
    nsp_layout_info_t info;
    char             *src, *dst, *back;
    nsp_a2a_params_t  p;
    nsp_request_t   **reqs;
    /* same traffic */
    traffic_t         tr;
    uint32_t          seq;
    /* mpi+pack */
    mpack_level_t    *ml;
    size_t           *wc;      /* [4N] world counts/displacements */
    char             *wsend, *wrecv;
    int              *ic;      /* [4N] the same as int for MPI */
    /* levels: the level runners, called in turn (not owned) */
    runner_t         *parts;
    int               nparts;
};

/* The s2h send counts of level l of `lay` (bytes to each peer of the
 * level, sb[p] for p < lv->degree), its level in *lv. Returns the
 * malloc'ed [4 * nranks] that nsp_pack_counts fills (caller frees). */
static size_t *level_s2h_counts(const perf_ctx_t *c, const nsp_layout_t *lay, int l,
                                nsp_pack_self_t self, nsp_layout_level_t *lv)
{
    size_t           row = (size_t)c->opts.head_dim * c->opts.elem;
    size_t          *sb  = xmalloc(4 * sizeof(size_t) * (size_t)c->nranks);
    nsp_level_view_t v;

    nsp_layout_level(lay, l, lv);
    nsp_layout_level_view(lay, l, &v);
    PCHECK(c, nsp_pack_counts(&v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, row,
                              NSP_A2A_REPLICAS_FIRST, self, sb, sb + c->nranks,
                              sb + 2 * c->nranks, sb + 3 * c->nranks),
           "pack counts");
    return sb;
}

/* Bytes this rank sends to other ranks in s2h of `lay` (all levels). */
static double offrank_bytes(const perf_ctx_t *c, const nsp_layout_t *lay)
{
    nsp_layout_info_t info;
    double            total = 0;

    nsp_layout_query(lay, &info);
    for (int l = 1; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        size_t            *sb = level_s2h_counts(c, lay, l, NSP_PACK_SKIP_SELF, &lv);
        for (int p = 0; p < lv.degree; ++p) {
            total += (double)sb[p];
        }
        free(sb);
    }
    return total;
}

/* Fill the sequence-sharded buffer from the global tensor. */
static void fill_seq(const perf_ctx_t *c, const nsp_layout_t *lay, char *buf)
{
    nsp_layout_info_t info;
    size_t            e = c->opts.elem;
    int64_t           idx = 0;

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(lay, l, &lv);
        for (int j = 0; j < lv.nseqs; ++j) {
            for (int64_t t = lv.chunk_start[j]; t < lv.chunk_start[j] + lv.chunk_len[j]; ++t) {
                for (int h = 0; h < c->opts.heads; ++h) {
                    for (int d = 0; d < c->opts.head_dim; ++d) {
                        tensor_value(lv.seqs[j], t, h, d, e, buf + (size_t)(idx++) * e);
                    }
                }
            }
        }
    }
}

/* Elements of the head-sharded buffer that differ from the global tensor. */
static double check_head(const perf_ctx_t *c, const nsp_layout_t *lay, const char *buf)
{
    nsp_layout_info_t info;
    size_t            e = c->opts.elem;
    int64_t           idx = 0;
    double            wrong = 0;
    char              want[8];

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_heads_t hs;
        nsp_layout_level(lay, l, &lv);
        nsp_layout_heads(lay, l, c->opts.heads, &hs);
        for (int j = 0; j < lv.nseqs; ++j) {
            for (int64_t t = 0; t < lv.seq_len[j]; ++t) {
                for (int h = hs.first_head; h < hs.first_head + hs.nheads; ++h) {
                    for (int d = 0; d < c->opts.head_dim; ++d) {
                        tensor_value(lv.seqs[j], t, h, d, e, want);
                        wrong += memcmp(want, buf + (size_t)(idx++) * e, e) != 0;
                    }
                }
            }
        }
    }
    return wrong;
}

static void post_wait(perf_ctx_t *c, runner_t *r)
{
    PCHECK(c, nsp_a2a_post(c->tree, r->lay, &r->p, r->reqs), "nsp_a2a_post");
    for (int l = 0; l < r->info.nlevels; ++l) {
        PCHECK(c, nsp_request_wait(r->reqs[l]), "nested all-to-all wait");
        nsp_request_free(r->reqs[l]);
    }
}

static void nested_call(perf_ctx_t *c, runner_t *r)
{
    post_wait(c, r);
}

/* s2h result against the global tensor, then h2s back against the input. */
static double nested_check(perf_ctx_t *c, runner_t *r)
{
    size_t           e = c->opts.elem;
    int64_t          n = r->info.local_tokens * c->opts.heads * c->opts.head_dim;
    double           wrong = check_head(c, r->lay, r->dst);
    nsp_a2a_params_t p = r->p;

    r->p.direction = NSP_A2A_HEAD_TO_SEQ;
    r->p.src       = r->dst;
    r->p.dst       = r->back;
    post_wait(c, r);
    r->p = p;
    for (int64_t k = 0; k < n; ++k) {
        wrong += memcmp(r->src + (size_t)k * e, r->back + (size_t)k * e, e) != 0;
    }
    return wrong;
}

/* "levels": every level alone, one after another. */
static void levels_call(perf_ctx_t *c, runner_t *r)
{
    for (int k = 0; k < r->nparts; ++k) {
        r->parts[k].call(c, &r->parts[k]);
    }
}

static double levels_check(perf_ctx_t *c, runner_t *r)
{
    double wrong = 0;

    for (int k = 0; k < r->nparts; ++k) {
        wrong += r->parts[k].check(c, &r->parts[k]);
    }
    return wrong;
}

/* r runs the nparts level runners at parts (set up, owned by the caller). */
static void levels_init(runner_t *r, runner_t *parts, int nparts)
{
    memset(r, 0, sizeof(*r));
    r->name   = "levels";
    r->call   = levels_call;
    r->check  = levels_check;
    r->parts  = parts;
    r->nparts = nparts;
    for (int k = 0; k < nparts; ++k) {
        r->offrank += parts[k].offrank;
    }
}

static void nested_init(perf_ctx_t *c, runner_t *r, const char *name, const nsp_plan_t *plan,
                        int serial, int mapped)
{
    size_t  e = c->opts.elem, tok = (size_t)c->opts.heads * c->opts.head_dim * e;
    int64_t rows;

    memset(r, 0, sizeof(*r));
    r->name  = name;
    r->call  = nested_call;
    r->check = nested_check;
    PCHECK(c, nsp_layout_create(plan, 0, c->rank, &r->lay), "layout");
    nsp_layout_query(r->lay, &r->info);
    PCHECK(c, nsp_layout_head_rows(r->lay, c->opts.heads, &rows), "head rows");
    r->back = xmalloc((size_t)r->info.local_tokens * tok);
    r->mapped = mapped;
    if (mapped) { /* s2h reads src, h2s (the check) reads dst: both mapped */
        void *src, *dst;
        PCHECK(c, nsp_mem_alloc(c->comm, (size_t)r->info.local_tokens * tok + 1, &src),
               "nsp_mem_alloc (sequence-sharded)");
        PCHECK(c, nsp_mem_alloc(c->comm, (size_t)rows * (size_t)c->opts.head_dim * e + 1, &dst),
               "nsp_mem_alloc (head-sharded)");
        r->src = src;
        r->dst = dst;
    } else {
        r->src = xmalloc((size_t)r->info.local_tokens * tok);
        r->dst = xmalloc((size_t)rows * (size_t)c->opts.head_dim * e);
    }
    r->reqs = xmalloc(sizeof(*r->reqs) * (size_t)r->info.nlevels);
    fill_seq(c, r->lay, r->src);
    memset(r->dst, 0, (size_t)rows * (size_t)c->opts.head_dim * e);
    memset(r->back, 0, (size_t)r->info.local_tokens * tok);
    PCHECK(c, nsp_layout_check(c->tree, r->lay), "layout check");
    r->p.field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_CHECK | NSP_A2A_FIELD_MAPPED;
    r->p.serial     = serial;
    r->p.mapped     = mapped; /* only nested-mapped announces and reads in place */
    r->p.check      = 0; /* checked once above; timed without the allgather */
    r->p.direction  = NSP_A2A_SEQ_TO_HEAD;
    r->p.heads      = c->opts.heads;
    r->p.head_dim   = c->opts.head_dim;
    r->p.elem_size  = e;
    r->p.src        = r->src;
    r->p.dst        = r->dst;
    r->offrank      = offrank_bytes(c, r->lay);
}

/* What this rank sends to each world rank in the nested s2h of `lay`:
 * row[p] bytes (caller-zeroed), row[rank] = what it keeps (level 0 and its
 * own block of every level). */
static void exchange_row(const perf_ctx_t *c, const nsp_layout_t *lay, double *row)
{
    nsp_layout_info_t  info;
    nsp_layout_level_t l0;
    size_t             rowb = (size_t)c->opts.head_dim * c->opts.elem;

    nsp_layout_query(lay, &info);
    nsp_layout_level(lay, 0, &l0);
    row[info.rank] += (double)l0.local_tokens * c->opts.heads * (double)rowb;
    for (int l = 1; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        size_t            *sb = level_s2h_counts(c, lay, l, NSP_PACK_WITH_SELF, &lv);
        for (int p = 0; p < lv.degree; ++p) {
            row[lv.rank0 + p] += (double)sb[p];
        }
        free(sb);
    }
}

/* The nested exchange's bytes between every pair (self: what a rank keeps),
 * as one world alltoallv, with a byte pattern to check. */
static void traffic_make(perf_ctx_t *c, const nsp_plan_t *plan, traffic_t *tr)
{
    int     N = c->nranks;
    double *matrix = calloc((size_t)N * N, sizeof(double));

    memset(tr, 0, sizeof(*tr));
    for (int r = 0; r < N; ++r) { /* every rank computes every row: pure math */
        nsp_layout_t *lay;
        PCHECK(c, nsp_layout_create(plan, 0, r, &lay), "layout");
        exchange_row(c, lay, matrix + (size_t)r * N);
        nsp_layout_free(lay);
    }
    tr->sc = xmalloc(4 * sizeof(size_t) * (size_t)N);
    tr->sd = tr->sc + N;
    tr->rc = tr->sd + N;
    tr->rd = tr->rc + N;
    for (int p = 0; p < N; ++p) {
        tr->sc[p] = (size_t)matrix[(size_t)c->rank * N + p];
        tr->rc[p] = (size_t)matrix[(size_t)p * N + c->rank];
        tr->sd[p] = tr->stot;
        tr->rd[p] = tr->rtot;
        tr->stot += tr->sc[p];
        tr->rtot += tr->rc[p];
        tr->offrank += p != c->rank ? (double)tr->sc[p] : 0.0;
    }
    tr->send = xmalloc(tr->stot);
    tr->recv = xmalloc(tr->rtot);
    memset(tr->recv, 0, tr->rtot);
    for (int p = 0; p < N; ++p) {
        for (size_t k = 0; k < tr->sc[p]; ++k) {
            tr->send[tr->sd[p] + k] = (char)(c->rank * 31 + p * 7 + (int)(k % 251));
        }
    }
    free(matrix);
}

static double traffic_check(perf_ctx_t *c, runner_t *r)
{
    const traffic_t *tr = &r->tr;
    double           wrong = 0;

    for (int p = 0; p < c->nranks; ++p) {
        for (size_t k = 0; k < tr->rc[p]; ++k) {
            wrong += tr->recv[tr->rd[p] + k] != (char)(p * 31 + c->rank * 7 + (int)(k % 251));
        }
    }
    return wrong / (double)c->opts.elem;
}

static void tp_call(perf_ctx_t *c, runner_t *r)
{
    nsp_tp_comm_t     *w = nsp_comm_tp(c->comm);
    nsp_tp_alltoallv_t a = {.sendbuf = r->tr.send, .sendcounts = r->tr.sc, .sdispls = r->tr.sd,
                            .recvbuf = r->tr.recv, .recvcounts = r->tr.rc, .rdispls = r->tr.rd};
    nsp_request_t     *req;

    PCHECK(c, w->ops->alltoallv_post(w, &a, NSP_TP_TAG(NSP_TP_TAG_CLASS_USER, r->seq++), NULL,
                                     &req), "alltoallv post");
    PCHECK(c, nsp_request_wait(req), "alltoallv wait");
    nsp_request_free(req);
}

static void tp_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan)
{
    memset(r, 0, sizeof(*r));
    r->name  = "tp-same";
    r->call  = tp_call;
    r->check = traffic_check;
    traffic_make(c, plan, &r->tr);
    r->offrank = r->tr.offrank;
}

#ifdef NSP_HAVE_MPI
/* int counts for MPI (sizes here stay far below 2 GiB per peer). */
static int *mpi_counts(const perf_ctx_t *c, const size_t *sc, const size_t *sd,
                       const size_t *rc, const size_t *rd)
{
    int *ic = xmalloc(4 * sizeof(int) * (size_t)c->nranks);

    for (int p = 0; p < c->nranks; ++p) {
        ic[p]                 = (int)sc[p];
        ic[c->nranks + p]     = (int)sd[p];
        ic[2 * c->nranks + p] = (int)rc[p];
        ic[3 * c->nranks + p] = (int)rd[p];
    }
    return ic;
}

static void mpi_call(perf_ctx_t *c, runner_t *r)
{
    int N = c->nranks;

    MPI_Alltoallv(r->tr.send, r->ic, r->ic + N, MPI_BYTE, r->tr.recv, r->ic + 2 * N,
                  r->ic + 3 * N, MPI_BYTE, MPI_COMM_WORLD);
}

static void mpi_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan)
{
    tp_init(c, r, plan);
    r->name = "mpi";
    r->call = mpi_call;
    r->ic   = mpi_counts(c, r->tr.sc, r->tr.sd, r->tr.rc, r->tr.rd);
}

/*
 * The nested exchange done with MPI as the transport, as a user without
 * nspcomm would: the same host pack of every level into one world buffer
 * (peer blocks, levels ascending inside), one MPI_Alltoallv, the same unpack,
 * level 0 and the own blocks copied directly. Same bytes, same copies.
 */
static void mpack_call(perf_ctx_t *c, runner_t *r)
{
    int                N = c->nranks;
    size_t             rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t             tok = (size_t)c->opts.heads * rowb;
    nsp_layout_level_t l0;

    for (int l = 1; l < r->info.nlevels; ++l) {
        mpack_level_t *L = &r->ml[l];
        nsp_pack_s2h(&L->v, c->opts.heads, rowb, r->src + (size_t)L->lv.local_offset * tok,
                     r->wsend, L->sb, L->sd);
    }
    MPI_Alltoallv(r->wsend, r->ic, r->ic + N, MPI_BYTE, r->wrecv, r->ic + 2 * N, r->ic + 3 * N,
                  MPI_BYTE, MPI_COMM_WORLD);
    nsp_layout_level(r->lay, 0, &l0);
    memcpy(r->dst, r->src, (size_t)l0.local_tokens * tok);
    for (int l = 1; l < r->info.nlevels; ++l) {
        mpack_level_t *L = &r->ml[l];
        char          *block = r->dst + (size_t)L->hs.row_offset * rowb;
        nsp_unpack_s2h(&L->v, c->opts.heads, rowb, r->wrecv, L->rb, L->rd, block);
        nsp_pack_copy_self(&L->v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                           NSP_A2A_REPLICAS_FIRST, r->src + (size_t)L->lv.local_offset * tok,
                           block);
    }
}

static double mpack_check(perf_ctx_t *c, runner_t *r)
{
    return check_head(c, r->lay, r->dst);
}

static void mpack_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan)
{
    int     N = c->nranks;
    size_t  rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t  tok = (size_t)c->opts.heads * rowb, stot = 0, rtot = 0;
    size_t *wsc, *wsd, *wrc, *wrd, *sfill, *rfill;
    int64_t rows;

    memset(r, 0, sizeof(*r));
    r->name  = "mpi+pack";
    r->call  = mpack_call;
    r->check = mpack_check;
    PCHECK(c, nsp_layout_create(plan, 0, c->rank, &r->lay), "layout");
    nsp_layout_query(r->lay, &r->info);
    PCHECK(c, nsp_layout_head_rows(r->lay, c->opts.heads, &rows), "head rows");
    r->ml = calloc((size_t)r->info.nlevels, sizeof(*r->ml));
    r->wc = calloc(6 * (size_t)N, sizeof(size_t));
    wsc = r->wc, wsd = wsc + N, wrc = wsd + N, wrd = wrc + N, sfill = wrd + N, rfill = sfill + N;
    for (int l = 1; l < r->info.nlevels; ++l) { /* world counts: sum over levels */
        mpack_level_t *L = &r->ml[l];
        nsp_layout_level(r->lay, l, &L->lv);
        nsp_layout_level_view(r->lay, l, &L->v);
        nsp_layout_heads(r->lay, l, c->opts.heads, &L->hs);
        L->sb = xmalloc(4 * sizeof(size_t) * (size_t)L->lv.degree);
        L->sd = L->sb + L->lv.degree;
        L->rb = L->sd + L->lv.degree;
        L->rd = L->rb + L->lv.degree;
        PCHECK(c, nsp_pack_counts(&L->v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                                  NSP_A2A_REPLICAS_FIRST, NSP_PACK_SKIP_SELF, L->sb, L->sd,
                                  L->rb, L->rd), "pack counts");
        for (int p = 0; p < L->lv.degree; ++p) {
            wsc[L->lv.rank0 + p] += L->sb[p];
            wrc[L->lv.rank0 + p] += L->rb[p];
        }
    }
    for (int p = 0; p < N; ++p) {
        wsd[p] = stot;
        wrd[p] = rtot;
        stot += wsc[p];
        rtot += wrc[p];
    }
    for (int l = 1; l < r->info.nlevels; ++l) { /* each level's place in the world blocks */
        mpack_level_t *L = &r->ml[l];
        for (int p = 0; p < L->lv.degree; ++p) {
            int w = L->lv.rank0 + p;
            L->sd[p] = wsd[w] + sfill[w];
            L->rd[p] = wrd[w] + rfill[w];
            sfill[w] += L->sb[p];
            rfill[w] += L->rb[p];
        }
    }
    r->ic    = mpi_counts(c, wsc, wsd, wrc, wrd);
    r->src   = xmalloc((size_t)r->info.local_tokens * tok);
    r->dst   = xmalloc((size_t)rows * rowb);
    r->wsend = xmalloc(stot);
    r->wrecv = xmalloc(rtot);
    fill_seq(c, r->lay, r->src);
    memset(r->dst, 0, (size_t)rows * rowb);
    memset(r->wsend, 0, stot);
    memset(r->wrecv, 0, rtot);
    r->offrank = offrank_bytes(c, r->lay);
}
#endif

static void runner_free(perf_ctx_t *c, runner_t *r)
{
    if (r->mapped) { /* collective: every rank frees its runners in one order */
        PCHECK(c, nsp_mem_free(c->comm, r->src), "nsp_mem_free");
        PCHECK(c, nsp_mem_free(c->comm, r->dst), "nsp_mem_free");
        r->src = r->dst = NULL;
    }
    for (int l = 1; r->ml != NULL && l < r->info.nlevels; ++l) {
        free(r->ml[l].sb);
    }
    free(r->ml);
    free(r->wc);
    free(r->ic);
    free(r->wsend);
    free(r->wrecv);
    free(r->tr.sc);
    free(r->tr.send);
    free(r->tr.recv);
    free(r->src);
    free(r->dst);
    free(r->back);
    free(r->reqs);
    nsp_layout_free(r->lay);
    memset(r, 0, sizeof(*r));
}

/* The methods --methods may name (nested always runs). */
static const char *const method_names[] = {"serial", "levels",   "flat",         "tp-same",
                                           "mpi",    "mpi+pack", "nested-mapped"};
#define PERF_NMETHOD_NAMES ((int)(sizeof(method_names) / sizeof(method_names[0])))

/* Is method `name` selected by --methods? */
static int method_on(const perf_ctx_t *c, const char *name)
{
    for (int k = 0; k < PERF_NMETHOD_NAMES; ++k) {
        if (strcmp(method_names[k], name) == 0) {
            return (c->opts.methods & (1u << k)) != 0;
        }
    }
    return 1;
}

/* Time the runners in blocks of back-to-back calls (as nccl-tests times a
 * loop), the blocks of the different methods interleaved, each block right
 * after a barrier; fill one row per runner. */
#define PERF_BLOCKS 4

static void time_runners(perf_ctx_t *c, runner_t *run, int n, size_t bytes, perf_row_t *rows)
{
    int blocks = c->opts.iters >= PERF_BLOCKS ? PERF_BLOCKS : 1;

    for (int k = 0; k < n; ++k) {
        for (int i = 0; i < c->opts.warmup; ++i) {
            run[k].call(c, &run[k]);
        }
    }
    for (int b = 0; b < blocks; ++b) {
        /* iterations of block b: an even share, the remainder in the first ones */
        int iters = c->opts.iters / blocks + (b < c->opts.iters % blocks);
        for (int k = 0; k < n; ++k) {
            double t0;
            PCHECK(c, nsp_comm_barrier(c->comm), "barrier");
            t0 = nsp_now_s();
            for (int i = 0; i < iters; ++i) {
                run[k].call(c, &run[k]);
            }
            run[k].t_sum += nsp_now_s() - t0;
        }
    }
    for (int k = 0; k < n; ++k) {
        double tmax, tsum, omax, osum, wmax, wsum, wrong = 0;
        if (c->opts.check) {
            wrong = run[k].check(c, &run[k]);
        }
        allreduce(c, run[k].t_sum / c->opts.iters, &tmax, &tsum);
        allreduce(c, run[k].offrank, &omax, &osum);
        allreduce(c, wrong, &wmax, &wsum);
        rows[k].method  = run[k].name;
        rows[k].bytes   = bytes;
        rows[k].time_us = tmax * 1e6;
        rows[k].algbw   = (double)bytes / tmax / 1e9;
        rows[k].busbw   = osum / c->nranks / tmax / 1e9;
        rows[k].wrong   = c->opts.check ? wsum : -1;
        rows[k].valid   = 1;
    }
}

/* ---- output -------------------------------------------------------------- */

static const char *type_name(size_t elem)
{
    return elem == 2 ? "bf16" : elem == 4 ? "float" : elem == 8 ? "double" : "int8";
}

static void print_header(const perf_ctx_t *c)
{
    printf("#\n# %-13s %12s %12s %6s %10s %8s %8s %8s\n", "method", "size(B)", "count",
           "type", "time(us)", "algbw", "busbw", "#wrong");
    printf("# %-13s %12s %12s %6s %10s %8s %8s %8s\n", "", "", "(elements)", "", "",
           "(GB/s)", "(GB/s)", "");
    (void)c;
}

static void print_row(const perf_ctx_t *c, const perf_row_t *r)
{
    char wrong[32];

    if (!r->valid) {
        return;
    }
    if (r->wrong < 0) {
        snprintf(wrong, sizeof(wrong), "N/A");
    } else {
        snprintf(wrong, sizeof(wrong), "%.0f", r->wrong);
    }
    printf("  %-13s %12zu %12zu %6s %10.1f %8.3f %8.3f %8s\n", r->method, r->bytes,
           r->bytes / c->opts.elem, type_name(c->opts.elem), r->time_us, r->algbw, r->busbw,
           wrong);
}

static void json_row(FILE *j, const perf_ctx_t *c, const perf_row_t *r, int *first)
{
    if (j == NULL || !r->valid) {
        return;
    }
    fprintf(j, "%s\n    {\"method\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
               "\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %.0f}",
            *first ? "" : ",", r->method, r->bytes, r->bytes / c->opts.elem,
            type_name(c->opts.elem), r->time_us, r->algbw, r->busbw, r->wrong);
    *first = 0;
}

/* ---- the run on one rank --------------------------------------------------- */

static nsp_plan_t *make_real_plan(perf_ctx_t *c)
{
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_workload_t      *wl;
    int64_t             *lens;
    int                  n;
    nsp_planner_params_t pp;
    nsp_plan_t          *plan;
    nsp_status_t         st;

    PCHECK(c, nsp_model_preset(c->opts.model, &model), "model");
    PCHECK(c, nsp_cluster_preset(c->opts.cluster, 8, &cluster), "cluster");
    if (c->nranks % cluster.ranks_per_node != 0) {
        cluster.ranks_per_node = c->nranks; /* fewer ranks than a node: one node */
    }
    cluster.ranks = c->nranks;
    if (c->nranks < 64) {
        /* The SP tree measured here is one slice of a larger job: its model
         * states are sharded as in a 64-rank job (16*P/64 per rank), so the
         * planner sees the memory a rank of such a job has for activations. */
        model.params = model.params * c->nranks / 64.0;
    }
    PCHECK(c, nsp_workload_load(c->opts.workload, &wl), "workload");
    if (nsp_workload_sample(wl, c->opts.seed, 0, c->opts.tokens_per_rank * c->nranks,
                            c->opts.max_len, &lens, &n) != NSP_OK) {
        nsp_workload_free(wl);
        die_status(c, "sample");
    }
    nsp_workload_free(wl);
    memset(&pp, 0, sizeof(pp));
    pp.kind = NSP_PLANNER_NESTED;
    st = nsp_plan_create(&model, &cluster, lens, n, &pp, &plan);
    free(lens);
    PCHECK(c, st, "nested plan");
    /* Measure one round; by default the one with the most exchanging levels
     * (degrees > 1 holding >= 5% of the round's tokens), then the most tokens
     * above degree 1. It is
     * swapped into round 0, which is what the methods below read. */
    {
        int best = c->opts.round, best_levels = -1;
        double best_tokens = -1;
        if (best >= plan->nrounds) {
            nsp_error_quiet(NSP_ERR_INVALID_ARG, "the plan has %d rounds (0..%d)", plan->nrounds,
                            plan->nrounds - 1);
            nsp_plan_free(plan);
            die_status(c, "--round"); /* frees the tree and the world, exits */
        }
        for (int r = 0; best < 0 && r < plan->nrounds; ++r) {
            int    degs[64], nd = 0, nbig = 0;
            double deg_tok[64] = {0}, tok = 0, above = 0;
            for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
                const nsp_plan_group_t *pg = &plan->rounds[r].groups[g];
                int k;
                for (k = 0; k < nd && degs[k] != pg->size; ++k) {
                }
                if (k == nd && nd < 64) {
                    degs[nd++] = pg->size;
                }
                for (int j = 0; k < 64 && j < pg->nseqs; ++j) {
                    deg_tok[k] += (double)plan->seq_lens[pg->seqs[j]];
                    tok += (double)plan->seq_lens[pg->seqs[j]];
                    above += pg->size > 1 ? (double)plan->seq_lens[pg->seqs[j]] : 0.0;
                }
            }
            for (int k = 0; k < nd; ++k) { /* levels that carry real traffic */
                nbig += degs[k] > 1 && deg_tok[k] >= 0.05 * tok;
            }
            if (nbig > best_levels || (nbig == best_levels && above > best_tokens)) {
                best_levels = nbig;
                best_tokens = above;
                c->chosen_round = r;
            }
        }
        if (best >= 0) {
            c->chosen_round = best;
        }
        if (c->chosen_round != 0) {
            nsp_plan_round_t t = plan->rounds[0];
            plan->rounds[0] = plan->rounds[c->chosen_round];
            plan->rounds[c->chosen_round] = t;
        }
    }
    return plan;
}

static void describe_plan(const perf_ctx_t *c, const nsp_plan_t *plan, FILE *j)
{
    int64_t per_degree[64] = {0};
    int     nseq_degree[64] = {0};

    for (int g = 0; g < plan->rounds[0].ngroups; ++g) {
        const nsp_plan_group_t *pg = &plan->rounds[0].groups[g];
        int                     k  = 0;
        while ((1 << k) < pg->size && k < 63) {
            ++k;
        }
        for (int s = 0; s < pg->nseqs; ++s) {
            per_degree[k] += plan->seq_lens[pg->seqs[s]];
            nseq_degree[k]++;
        }
    }
    printf("# plan: nested planner, %s on %d ranks (model states sharded as in a 64-rank "
           "job), %d seqs, %d round(s); round %d measured\n", c->opts.model, c->nranks,
           plan->nseqs, plan->nrounds, c->chosen_round);
    if (j != NULL) {
        fprintf(j, "  \"plan\": {\"planner\": \"%s\", \"seqs\": %d, \"rounds\": %d, "
                   "\"round\": %d, \"levels\": [", plan->planner, plan->nseqs, plan->nrounds,
                c->chosen_round);
    }
    for (int k = 0, first = 1; k < 64; ++k) {
        if (nseq_degree[k] == 0) {
            continue;
        }
        printf("#   degree %3d: %4d seqs, %9lld tokens (real batch)\n", 1 << k,
               nseq_degree[k], (long long)per_degree[k]);
        if (j != NULL) {
            fprintf(j, "%s{\"degree\": %d, \"seqs\": %d, \"tokens\": %lld}", first ? "" : ", ",
                    1 << k, nseq_degree[k], (long long)per_degree[k]);
        }
        first = 0;
    }
    if (j != NULL) {
        fprintf(j, "]},\n");
    }
}

static double ratio(const perf_row_t *a, const perf_row_t *b)
{
    return (a->valid && b->valid && b->busbw > 0) ? a->busbw / b->busbw : NAN;
}

static int run_rank(perf_ctx_t *c)
{
    nsp_plan_t *real;
    FILE       *j = NULL;
    int         first_row = 1, nsizes = 0;
    double      sum_bus[PERF_MAX_METHODS] = {0}, wrong_total = 0;
    const char *names[PERF_MAX_METHODS] = {"nested", "serial", "levels", "flat", "tp-same",
                                           "mpi", "mpi+pack", "nested-mapped"};
    double      pipe_vs_levels_min = INFINITY, pipe_vs_serial_min = INFINITY;
    double      min_ratio_mpi = INFINITY, min_ratio_mapped = INFINITY;

    PCHECK(c, nsp_tree_create(c->comm, NULL, 0, &c->tree), "tree");
    real = make_real_plan(c);
    if (c->rank == 0) {
        if (c->opts.json != NULL && (j = fopen(c->opts.json, "w")) == NULL) {
            fprintf(stderr, "nsp_a2a_perf: cannot write %s: %s\n", c->opts.json,
                    strerror(errno));
        }
        printf("# nsp_a2a_perf: %d ranks (%s), H=%d heads x D=%d, %s; iters %d, warmup %d, "
               "check %d\n", c->nranks, c->mpi ? "mpirun" : "forked locally", c->opts.heads,
               c->opts.head_dim, type_name(c->opts.elem), c->opts.iters, c->opts.warmup,
               c->opts.check);
        if (j != NULL) {
            fprintf(j, "{\n  \"format\": \"nspcomm-a2a-perf-v1\",\n  \"config\": {\"ranks\": %d, "
                       "\"launcher\": \"%s\", \"mpi_pml\": \"%s\", \"heads\": %d, "
                       "\"head_dim\": %d, \"type\": \"%s\", \"iters\": %d, \"warmup\": %d, "
                       "\"workload\": \"%s\", \"model\": \"%s\", \"tokens_per_rank\": %lld, "
                       "\"seed\": %llu},\n", c->nranks, c->mpi ? "mpirun" : "fork",
                    c->mpi_pml, c->opts.heads, c->opts.head_dim, type_name(c->opts.elem),
                    c->opts.iters, c->opts.warmup, c->opts.workload, c->opts.model,
                    (long long)c->opts.tokens_per_rank, (unsigned long long)c->opts.seed);
        }
        describe_plan(c, real, j);
        if (j != NULL) {
            fprintf(j, "  \"results\": [");
        }
        print_header(c);
    }
    for (size_t bytes = c->opts.min_bytes; bytes <= c->opts.max_bytes;
         bytes = (size_t)((double)bytes * c->opts.factor)) {
        perf_plans_t plans;
        perf_row_t   rows[PERF_MAX_METHODS], all[48], lvrows[32];
        runner_t     run[48];
        char         lvnames[32][16];
        int          nrun = 0, first_level, levels_at, flat_at, tp_at, mpi_at = -1;
        int          mpack_at = -1, mapped_at = -1;

        memset(rows, 0, sizeof(rows));
        memset(all, 0, sizeof(all));
        for (int m = 0; m < PERF_MAX_METHODS; ++m) {
            rows[m].method = names[m];
            rows[m].bytes  = bytes;
        }
        plans_make(c, real, bytes, &plans);
        nested_init(c, &run[nrun++], "nested", plans.nested, 0, 0); /* always: the reference */
        if (method_on(c, "serial")) {
            nested_init(c, &run[nrun++], "serial", plans.nested, 1, 0);
        }
        first_level = nrun;
        for (int l = 0; method_on(c, "levels") && plans.nlevels > 1 && l < plans.nlevels &&
                        l < 32; ++l) {
            snprintf(lvnames[l], sizeof(lvnames[l]), "level-d%d", plans.degree[l]);
            nested_init(c, &run[nrun++], lvnames[l], plans.level[l], 0, 0);
        }
        levels_at = nrun;
        if (levels_at > first_level) {
            levels_init(&run[nrun++], &run[first_level], levels_at - first_level);
        }
        flat_at = nrun;
        if (method_on(c, "flat")) {
            nested_init(c, &run[nrun++], "flat", plans.flat, 0, 0);
        }
        tp_at = nrun;
        if (method_on(c, "tp-same")) {
            tp_init(c, &run[nrun++], plans.nested);
        }
#ifdef NSP_HAVE_MPI
        if (c->mpi && method_on(c, "mpi")) {
            mpi_at = nrun;
            mpi_init(c, &run[nrun++], plans.nested);
        }
        if (c->mpi && method_on(c, "mpi+pack")) {
            mpack_at = nrun;
            mpack_init(c, &run[nrun++], plans.nested);
        }
#endif
        if (method_on(c, "nested-mapped")) {
            mapped_at = nrun;
            nested_init(c, &run[nrun++], "nested-mapped", plans.nested, 0, 1);
        }
        time_runners(c, run, nrun, bytes, all);
        rows[0] = all[0];
        if (first_level > 1) {
            rows[1] = all[1];
        }
        if (levels_at > first_level) { /* levels in turn, and each level alone */
            rows[2] = all[levels_at];
            for (int k = first_level; k < levels_at; ++k) {
                lvrows[k - first_level] = all[k];
            }
        }
        if (tp_at > flat_at) {
            rows[3] = all[flat_at];
        }
        if (nrun > tp_at && strcmp(all[tp_at].method, "tp-same") == 0) {
            rows[4] = all[tp_at];
        }
        if (mpi_at >= 0) {
            rows[5] = all[mpi_at];
        }
        if (mpack_at >= 0) {
            rows[6] = all[mpack_at];
        }
        if (mapped_at >= 0) {
            rows[7] = all[mapped_at];
        }
        for (int m = 0; m < PERF_MAX_METHODS; ++m) {
            rows[m].method = names[m];
        }
        for (int k = 0; k < nrun; ++k) {
            runner_free(c, &run[k]);
        }
        plans_free(&plans);
        for (int m = 0; m < PERF_MAX_METHODS; ++m) {
            if (rows[m].valid) {
                rows[m].algbw = (double)bytes / (rows[m].time_us * 1e-6) / 1e9;
                sum_bus[m] += rows[m].busbw;
                wrong_total += rows[m].wrong > 0 ? rows[m].wrong : 0;
            }
        }
        if (rows[2].valid) {
            pipe_vs_levels_min = fmin(pipe_vs_levels_min, rows[2].time_us / rows[0].time_us);
        }
        if (rows[1].valid) {
            pipe_vs_serial_min = fmin(pipe_vs_serial_min, rows[1].time_us / rows[0].time_us);
        }
        if (rows[5].valid) {
            min_ratio_mpi = fmin(min_ratio_mpi, ratio(&rows[0], &rows[5]));
        }
        if (rows[5].valid && rows[7].valid) {
            min_ratio_mapped = fmin(min_ratio_mapped, ratio(&rows[7], &rows[5]));
        }
        ++nsizes;
        if (c->rank == 0) {
            for (int m = 0; m < PERF_MAX_METHODS; ++m) {
                print_row(c, &rows[m]);
                json_row(j, c, &rows[m], &first_row);
                for (int k = 0; m == 2 && rows[2].valid && k < levels_at - first_level; ++k) {
                    print_row(c, &lvrows[k]); /* each level alone, under "levels" */
                    json_row(j, c, &lvrows[k], &first_row);
                }
            }
            printf("  %-9s nested/tp-same busbw %.2fx, nested/mpi %.2fx, nested/mpi+pack %.2fx; "
                   "flat time / nested %.2fx; serial time / pipelined %.2fx, sum of levels / "
                   "pipelined %.2fx\n", "ratios", ratio(&rows[0], &rows[4]),
                   ratio(&rows[0], &rows[5]), ratio(&rows[0], &rows[6]),
                   rows[3].valid ? rows[3].time_us / rows[0].time_us : NAN,
                   rows[1].valid ? rows[1].time_us / rows[0].time_us : NAN,
                   rows[2].valid ? rows[2].time_us / rows[0].time_us : NAN);
            printf("  %-9s nested-mapped/mpi busbw %.2fx, nested-mapped/nested %.2fx\n",
                   "ratios", ratio(&rows[7], &rows[5]), ratio(&rows[7], &rows[0]));
            fflush(stdout);
        }
        if (c->opts.factor <= 1.0) {
            break;
        }
    }
    if (c->rank == 0) {
        printf("# Out of bounds values : %.0f %s\n", wrong_total, wrong_total == 0 ? "OK" : "WRONG");
        printf("# Avg bus bandwidth    :");
        for (int m = 0; m < PERF_MAX_METHODS; ++m) {
            if (sum_bus[m] > 0) {
                printf(" %s %.3f", names[m], sum_bus[m] / nsizes);
            }
        }
        printf(" (GB/s)\n");
        printf("# nested vs mpi (avg busbw): %s", c->mpi ? "" : "n/a (run under mpirun)\n");
        if (c->mpi && sum_bus[5] > 0) {
            printf("%.3fx (worst size %.3fx); nested vs mpi+pack %.3fx; pml %s\n",
                   sum_bus[0] / sum_bus[5], min_ratio_mpi,
                   sum_bus[6] > 0 ? sum_bus[0] / sum_bus[6] : NAN, c->mpi_pml);
        }
        printf("# nested-mapped vs mpi (avg busbw): ");
        if (c->mpi && sum_bus[5] > 0 && sum_bus[7] > 0) {
            printf("%.3fx (worst size %.3fx); ", sum_bus[7] / sum_bus[5], min_ratio_mapped);
        } else {
            printf("n/a (run under mpirun); ");
        }
        printf("nested-mapped vs nested %.3fx\n", sum_bus[7] > 0 ? sum_bus[7] / sum_bus[0] : NAN);
        printf("# pipelined levels: serial/pipelined time >= %.2fx, sum-of-levels/pipelined "
               ">= %.2fx over sizes\n", pipe_vs_serial_min, pipe_vs_levels_min);
        printf("#\n");
        if (j != NULL) {
            fprintf(j, "\n  ],\n  \"summary\": {\"wrong\": %.0f, \"avg_busbw\": {", wrong_total);
            for (int m = 0, f = 1; m < PERF_MAX_METHODS; ++m) {
                if (sum_bus[m] > 0) {
                    fprintf(j, "%s\"%s\": %.4f", f ? "" : ", ", names[m], sum_bus[m] / nsizes);
                    f = 0;
                }
            }
            fprintf(j, "}, \"nested_over_mpi_pack\": %.4f, ",
                    sum_bus[6] > 0 ? sum_bus[0] / sum_bus[6] : -1.0);
            fprintf(j, "\"nested_mapped_over_mpi\": %.4f, \"nested_mapped_over_mpi_worst\": "
                       "%.4f, \"nested_mapped_over_nested\": %.4f, ",
                    sum_bus[5] > 0 && sum_bus[7] > 0 ? sum_bus[7] / sum_bus[5] : -1.0,
                    isfinite(min_ratio_mapped) ? min_ratio_mapped : -1.0,
                    sum_bus[7] > 0 ? sum_bus[7] / sum_bus[0] : -1.0);
            fprintf(j, "\"nested_over_mpi\": %.4f, \"nested_over_mpi_worst\": %.4f, "
                       "\"serial_over_pipelined_min\": %.4f, "
                       "\"levels_over_pipelined_min\": %.4f}\n}\n",
                    sum_bus[5] > 0 ? sum_bus[0] / sum_bus[5] : -1.0,
                    isfinite(min_ratio_mpi) ? min_ratio_mpi : -1.0,
                    isfinite(pipe_vs_serial_min) ? pipe_vs_serial_min : -1.0, /* no inf in JSON */
                    isfinite(pipe_vs_levels_min) ? pipe_vs_levels_min : -1.0);
            fclose(j);
        }
    }
    nsp_plan_free(real);
    nsp_a2a_release_cache();
    {
        nsp_tree_t *tree = c->tree;
        c->tree          = NULL; /* die_status must not destroy it again */
        PCHECK(c, nsp_tree_destroy(tree), "tree destroy");
    }
    return wrong_total == 0 ? 0 : 2;
}

/* ---- launchers ------------------------------------------------------------ */

#ifdef NSP_HAVE_MPI
/* nspcomm bootstraps through MPI when run under mpirun without NSPCOMM_ROOT:
 * the UCC-style out-of-band allgather, here on MPI_Iallgather. */
static nsp_status_t mpi_oob_allgather(void *sbuf, void *rbuf, size_t msglen, void *info,
                                      void **request)
{
    MPI_Request *req = malloc(sizeof(*req));

    (void)info;
    if (req == NULL) {
        return NSP_ERR_NO_MEMORY;
    }
    if (MPI_Iallgather(sbuf, (int)msglen, MPI_BYTE, rbuf, (int)msglen, MPI_BYTE,
                       MPI_COMM_WORLD, req) != MPI_SUCCESS) {
        free(req);
        return NSP_ERR_BACKEND;
    }
    *request = req;
    return NSP_OK;
}

static nsp_status_t mpi_oob_test(void *request)
{
    int flag = 0;

    if (MPI_Test((MPI_Request *)request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return NSP_ERR_BACKEND;
    }
    return flag ? NSP_OK : NSP_INPROGRESS;
}

static nsp_status_t mpi_oob_free(void *request)
{
    free(request);
    return NSP_OK;
}
#endif

/*
 * The world size of the launcher that started us (torchrun, mpirun, srun:
 * nsp_launcher_detect), or -1. With --ranks under a launcher of more than
 * one rank every process would fork a world of its own: refuse (exit 2).
 */
static int launcher_size(int forked_ranks)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "NSPCOMM_NRANKS",
                          "WORLD_SIZE"};
    const char *name;
    int         rank, size;

    /* A size variable set alone must still be a rank count (checked, exit 2). */
    for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]); ++k) {
        const char *v = getenv(vars[k]);
        if (v != NULL && v[0] != '\0' &&
            nsp_opt_int("nsp_a2a_perf", vars[k], v, 1, 1 << 20, &size) != NSP_OK) {
            exit(NSP_OPT_EXIT_USAGE);
        }
    }
    if (nsp_launcher_detect(&name, &rank, &size) != NSP_OK) {
        fprintf(stderr, "nsp_a2a_perf: %s\n", nsp_last_error());
        exit(NSP_OPT_EXIT_USAGE);
    }
    if (name != NULL && size > 1 && forked_ranks > 0) {
        fprintf(stderr, "nsp_a2a_perf: started by %s as rank %d of %d, and --ranks %d would "
                "fork a separate world in every process: drop --ranks under a launcher, or "
                "run one process with --ranks\n", name, rank, size, forked_ranks);
        exit(NSP_OPT_EXIT_USAGE);
    }
    return name != NULL ? size : -1;
}

static int run_launched(perf_ctx_t *c, int argc, char **argv)
{
    int rc;

#ifdef NSP_HAVE_MPI
    if (getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL) {
        MPI_Init(&argc, &argv);
        c->mpi     = 1;
        c->mpi_pml = getenv("OMPI_MCA_pml") ? getenv("OMPI_MCA_pml") : "default (ob1/vader)";
    }
#endif
    (void)argc;
    (void)argv;
    if (getenv("NSPCOMM_ROOT") != NULL || !c->mpi) {
        PCHECK(c, nsp_comm_init_env(&c->comm, NULL), "nsp_comm_init_env (set NSPCOMM_ROOT="
               "host:port, or build with MPI)");
    } else {
#ifdef NSP_HAVE_MPI
        nsp_oob_coll_t oob;
        int            r, n;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        memset(&oob, 0, sizeof(oob));
        oob.allgather = mpi_oob_allgather;
        oob.req_test  = mpi_oob_test;
        oob.req_free  = mpi_oob_free;
        oob.n_oob_eps = (uint32_t)n;
        oob.oob_ep    = (uint32_t)r;
        PCHECK(c, nsp_comm_init_oob(&c->comm, &oob, NULL), "nsp_comm_init_oob over MPI");
#endif
    }
    PCHECK(c, nsp_comm_rank(c->comm, &c->rank), "rank");
    PCHECK(c, nsp_comm_size(c->comm, &c->nranks), "size");
    rc = run_rank(c);
    nsp_comm_destroy(c->comm);
#ifdef NSP_HAVE_MPI
    if (c->mpi) {
        MPI_Finalize();
    }
#endif
    return rc;
}

/* A forked rank (nsp_launch_fn_t): join the world through the id, run. */
static int forked_rank(int rank, int nranks, void *arg)
{
    perf_ctx_t *c = arg;
    int         rc;

    c->rank   = rank;
    c->nranks = nranks;
    PCHECK(c, nsp_comm_init_rank(&c->comm, nranks, c->id, rank, NULL), "nsp_comm_init_rank");
    rc = run_rank(c);
    nsp_comm_destroy(c->comm);
    c->comm = NULL;
    return rc;
}

/* --ranks N: fork N local ranks that meet through a unique id, through the
 * shared launcher (tools/nsp_launch.h): a rank that fails gives the others
 * their timeout to fail on their own, then they are stopped (SIGTERM, then
 * SIGKILL); every rank is reaped and their shared-memory segments removed. */
static int run_forked(perf_ctx_t *base)
{
    static nsp_launch_result_t res; /* large: not on the stack */
    nsp_launch_t               l;
    char                       line[256];
    int                        rc = 0;

    memset(&l, 0, sizeof(l));
    l.nranks    = base->opts.ranks;
    l.timeout_s = base->opts.timeout_s;
    l.fn        = forked_rank;
    l.arg       = base;
    l.make      = nsp_launch_make_uid; /* after the fork: its thread must not be forked */
    l.field     = &base->id;
    l.bytes     = sizeof(base->id);
    l.out       = NSP_LAUNCH_STDOUT_RANK0; /* only rank 0 prints the table */
    l.notify    = 1; /* every rank names the rank that failed first */
    if (nsp_launch_run(&l, &res) != NSP_OK) {
        fprintf(stderr, "nsp_a2a_perf: %s\n", nsp_last_error());
        return 1;
    }
    for (int r = 0; r < res.nranks; ++r) {
        const nsp_launch_rank_t *rr = &res.rank[r];
        if (!(rr->exited && rr->exit_code == 0)) {
            fprintf(stderr, "nsp_a2a_perf: %s\n", nsp_launch_describe(&res, r, line,
                                                                       sizeof(line)));
        }
    }
    if (res.why[0] != '\0') {
        fprintf(stderr, "nsp_a2a_perf: %s\n", res.why);
    }
    if (res.segments > 0) {
        fprintf(stderr, "nsp_a2a_perf: removed %d shared-memory segment(s) the ranks left\n",
                res.segments);
    }
    if (res.first_failed >= 0) {
        const nsp_launch_rank_t *rr = &res.rank[res.first_failed];
        rc = rr->exited && rr->exit_code != 0 ? rr->exit_code : 1;
    } else if (nsp_launch_failed(&res) > 0) { /* stopped at --timeout */
        rc = 1;
    }
    return rc;
}

static void usage(void)
{
    printf("usage: nsp_a2a_perf [options]      (or: mpirun -np N nsp_a2a_perf [options])\n"
           "  -b, --minbytes SIZE      smallest size, bytes per rank of [T_local, H, D] (1M)\n"
           "  -e, --maxbytes SIZE      largest size (16M); K, M, G suffixes\n"
           "  -f, --stepfactor F       size multiplier between rows (2)\n"
           "  -n, --iters N            timed iterations per size and method (20)\n"
           "  -w, --warmup_iters N     untimed iterations first (5)\n"
           "  -c, --check 0|1          verify every result (1)\n"
           "  -J, --json FILE          also write the results as JSON\n"
           "      --ranks N            fork N local ranks (default 4 without a launcher)\n"
           "      --workload FILE      sequence lengths, one per line (shipped WLB-LLM sample)\n"
           "      --model NAME         model preset for the planner and H, D (qwen3-30b-a3b)\n"
           "      --cluster NAME       cluster preset (h100)\n"
           "      --tokens-per-rank T  tokens per rank of the real batch (65536)\n"
           "      --max-len S          longest sequence of the batch (131072)\n"
           "      --seed K             batch seed (1)\n"
           "      --heads H            heads of the exchanged tensor (model q_heads)\n"
           "      --head-dim D         head dimension (model head_dim)\n"
           "      --elem 2|4           bytes per element (2: bf16)\n"
           "      --round R            plan round to measure (default: most levels)\n"
           "      --methods LIST       comma list of serial,levels,flat,tp-same,mpi,mpi+pack,\n"
           "                           nested-mapped\n"
           "                           (default all; nested always runs)\n"
           "      --timeout S          --ranks: stop the ranks after S seconds (3600); each\n"
           "                           exchange waits NSPCOMM_TIMEOUT (60 s) for a peer\n"
           "Every value is checked: a bad one is an error naming the option (exit 2).\n");
}

static const char *default_workload(void)
{
    static char path[4096];
    const char *top = getenv("NSP_TOP_SRCDIR");

    if (top != NULL) {
        snprintf(path, sizeof(path), "%s/data/workloads/wlbllm-distca.txt", top);
        if (access(path, R_OK) == 0) {
            return path;
        }
    }
#ifdef NSP_DATADIR
    snprintf(path, sizeof(path), "%s/workloads/wlbllm-distca.txt", NSP_DATADIR);
    if (access(path, R_OK) == 0) {
        return path;
    }
#endif
    return "data/workloads/wlbllm-distca.txt";
}

#define PERF_PROG "nsp_a2a_perf"

static void opts_defaults(perf_ctx_t *c)
{
    memset(c, 0, sizeof(*c));
    c->mpi_pml               = "n/a";
    c->opts.min_bytes        = 1 << 20;
    c->opts.max_bytes        = 16 << 20;
    c->opts.factor           = 2.0;
    c->opts.iters            = 20;
    c->opts.warmup           = 5;
    c->opts.check            = 1;
    c->opts.model            = "qwen3-30b-a3b";
    c->opts.cluster          = "h100";
    c->opts.tokens_per_rank  = 65536;
    c->opts.max_len          = 131072;
    c->opts.seed             = 1;
    c->opts.elem             = 2;
    c->opts.round            = -1;
    c->opts.timeout_s        = 3600;
    c->opts.methods          = (1u << PERF_NMETHOD_NAMES) - 1;
    c->opts.workload         = default_workload();
}

/* One option's value into c->opts (checked: tools/nsp_opt.h). */
static nsp_status_t parse_opt(perf_opts_t *o, int opt, const char *arg)
{
    static const char *const elems[] = {"2", "4"};
    int                      k;

    switch (opt) {
    case 'b': return nsp_opt_size(PERF_PROG, "-b", arg, 1, (size_t)1 << 36, &o->min_bytes);
    case 'e': return nsp_opt_size(PERF_PROG, "-e", arg, 1, (size_t)1 << 36, &o->max_bytes);
    case 'f': return nsp_opt_double(PERF_PROG, "-f", arg, 1, 1024, 0, &o->factor);
    case 'n': return nsp_opt_int(PERF_PROG, "-n", arg, 1, 1000000, &o->iters);
    case 'w': return nsp_opt_int(PERF_PROG, "-w", arg, 0, 1000000, &o->warmup);
    case 'c': return nsp_opt_int(PERF_PROG, "-c", arg, 0, 1, &o->check);
    case 'J': o->json = arg; return nsp_opt_out_path(PERF_PROG, "-J", arg);
    case 1: return nsp_opt_int(PERF_PROG, "--ranks", arg, 1, NSP_LAUNCH_MAX_RANKS, &o->ranks);
    case 2: o->workload = arg; return nsp_opt_in_path(PERF_PROG, "--workload", arg);
    case 3: o->model = arg; return NSP_OK;
    case 4: o->cluster = arg; return NSP_OK;
    case 5: return nsp_opt_i64(PERF_PROG, "--tokens-per-rank", arg, 1, 1 << 30,
                               &o->tokens_per_rank);
    case 6: return nsp_opt_i64(PERF_PROG, "--max-len", arg, 1, (int64_t)1 << 40, &o->max_len);
    case 7: return nsp_opt_u64(PERF_PROG, "--seed", arg, 0, UINT64_MAX, &o->seed);
    case 8: return nsp_opt_int(PERF_PROG, "--heads", arg, 1, 4096, &o->heads);
    case 9: return nsp_opt_int(PERF_PROG, "--head-dim", arg, 1, 65536, &o->head_dim);
    case 10:
        NSP_CHECK(nsp_opt_choice(PERF_PROG, "--elem", arg, elems, 2, &k));
        o->elem = k == 0 ? 2 : 4;
        return NSP_OK;
    case 11: return nsp_opt_int(PERF_PROG, "--round", arg, 0, 1 << 20, &o->round);
    case 12:
        return nsp_opt_list(PERF_PROG, "--methods", arg, method_names, PERF_NMETHOD_NAMES,
                            &o->methods);
    case 13: return nsp_opt_double(PERF_PROG, "--timeout", arg, 0, 1e6, NSP_OPT_LO_OPEN,
                                   &o->timeout_s);
    default: usage(); return NSP_ERR_INVALID_ARG;
    }
}

/* What the options mean together: sizes in order, presets that exist, and
 * memory for what was asked (before anything is allocated). */
static nsp_status_t check_opts(perf_ctx_t *c, int nranks)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    char          what[160];

    if (c->opts.max_bytes < c->opts.min_bytes) {
        fprintf(stderr, PERF_PROG ": -e %zu is below -b %zu\n", c->opts.max_bytes,
                c->opts.min_bytes);
        return NSP_ERR_INVALID_ARG;
    }
    if (nsp_model_preset(c->opts.model, &model) != NSP_OK ||
        nsp_cluster_preset(c->opts.cluster, 8, &cluster) != NSP_OK) {
        fprintf(stderr, PERF_PROG ": %s\n", nsp_last_error());
        return NSP_ERR_INVALID_ARG;
    }
    c->opts.heads    = c->opts.heads > 0 ? c->opts.heads : model.q_heads;
    c->opts.head_dim = c->opts.head_dim > 0 ? c->opts.head_dim : model.head_dim;
    /* per rank: about 8 buffers of -e bytes (sources, results, references,
     * the methods' scratch); the batch's lengths: 8 bytes per token at most */
    snprintf(what, sizeof(what), "-e %zu x %d ranks (and --tokens-per-rank %lld)",
             c->opts.max_bytes, nranks, (long long)c->opts.tokens_per_rank);
    return nsp_opt_mem_check(PERF_PROG, what, 8.0 * (double)c->opts.max_bytes * nranks +
                             8.0 * (double)c->opts.tokens_per_rank * nranks);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},    {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},  {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'}, {"check", required_argument, NULL, 'c'},
        {"json", required_argument, NULL, 'J'},        {"ranks", required_argument, NULL, 1},
        {"workload", required_argument, NULL, 2},      {"model", required_argument, NULL, 3},
        {"cluster", required_argument, NULL, 4},       {"tokens-per-rank", required_argument, NULL, 5},
        {"max-len", required_argument, NULL, 6},       {"seed", required_argument, NULL, 7},
        {"heads", required_argument, NULL, 8},         {"head-dim", required_argument, NULL, 9},
        {"elem", required_argument, NULL, 10},         {"round", required_argument, NULL, 11},
        {"methods", required_argument, NULL, 12},      {"timeout", required_argument, NULL, 13},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    perf_ctx_t c;
    int        opt, size;

    opts_defaults(&c);
    while ((opt = getopt_long(argc, argv, "b:e:f:n:w:c:J:h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            usage();
            return 0;
        }
        if (parse_opt(&c.opts, opt, optarg) != NSP_OK) {
            return NSP_OPT_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PERF_PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return NSP_OPT_EXIT_USAGE;
    }
    size = launcher_size(c.opts.ranks);
    if (c.opts.ranks > 0 || size < 0) {
        c.opts.ranks = c.opts.ranks > 0 ? c.opts.ranks : 4;
        size         = c.opts.ranks;
    }
    if (check_opts(&c, size) != NSP_OK) {
        return NSP_OPT_EXIT_USAGE;
    }
    if (c.opts.ranks > 0) {
        return run_forked(&c);
    }
    return run_launched(&c, argc, argv);
}
