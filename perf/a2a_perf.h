/*
 * nsp_a2a_perf's harness, shared by its method files (nccl-tests' shape:
 * the frame in one place, one file per measured method):
 *
 *   nsp_a2a_perf.c  options, launch, the sizes loop, timing, table and JSON
 *   a2a_data.c      the global tensor, filling and checking, byte counts,
 *                   errors, memory
 *   a2a_plans.c     the real plan and the plans each size derives from it
 *   a2a_nested.c    nested, serial, nested-mapped, flat, level-dN: the
 *                   nested all-to-all on one plan
 *   a2a_levels.c    levels: every level alone, one after another
 *   a2a_tp.c        tp-same: the transport's alltoallv on the nested bytes
 *   a2a_mpi.c       mpi, mpi+pack (under mpirun), and MPI's bootstrap
 *
 * Every method is a runner: one call() is one operation on this rank, and
 * check() counts the elements wrong on this rank.
 */
#ifndef NSP_PERF_A2A_PERF_H_
#define NSP_PERF_A2A_PERF_H_

#include "attn_sp/layout.h"
#include "attn_sp/pack.h"
#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define A2A_PROG "nsp_a2a_perf"

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
    uint32_t    methods;        /* --methods: bit k for the k-th selectable method */
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

/* ---- errors and memory (a2a_data.c) --------------------------------------- */

/** Print what failed with the last error, leave nothing behind (the tree,
 *  the world; MPI_Abort under mpirun), exit 1. */
void a2a_die(const perf_ctx_t *c, const char *what) __attribute__((noreturn));

#define PCHECK(c, expr, what)        \
    do {                             \
        if ((expr) != NSP_OK) {      \
            a2a_die((c), (what));    \
        }                            \
    } while (0)

/** malloc that exits on failure (n = 0 gives 1 byte). */
void *a2a_xmalloc(size_t n);

/* ---- data (a2a_data.c) ---------------------------------------------------- */

/** Fill the sequence-sharded buffer of `lay` from the global tensor
 *  ([T_local, H, D] of opts.elem bytes). */
void a2a_fill_seq(const perf_ctx_t *c, const nsp_layout_t *lay, char *buf);

/** Elements of the head-sharded buffer of `lay` that differ from the
 *  global tensor. */
double a2a_check_head(const perf_ctx_t *c, const nsp_layout_t *lay, const char *buf);

/** The s2h send counts of level l of `lay` (bytes to each peer of the
 *  level, sb[p] for p < lv->degree), its level in *lv. Returns the
 *  malloc'ed [4 * nranks] that nsp_pack_counts fills (caller frees). */
size_t *a2a_level_s2h_counts(const perf_ctx_t *c, const nsp_layout_t *lay, int l,
                             nsp_pack_self_t self, nsp_layout_level_t *lv);

/** Bytes this rank sends to other ranks in s2h of `lay` (all levels). */
double a2a_offrank_bytes(const perf_ctx_t *c, const nsp_layout_t *lay);

/* ---- plans (a2a_plans.c) -------------------------------------------------- */

#define A2A_MAX_LEVELS 32

typedef struct perf_plans {
    nsp_plan_t *nested;           /* round 0 of the real plan, scaled */
    nsp_plan_t *flat;             /* the same sequences in one group of N */
    int         nlevels;          /* distinct degrees in round 0 (1 included) */
    int         degree[A2A_MAX_LEVELS];
    nsp_plan_t *level[A2A_MAX_LEVELS]; /* round 0 restricted to one degree */
} perf_plans_t;

/** The nested plan of a batch drawn from the workload for the model and an
 *  N-rank cluster, the measured round (--round, or the one with the most
 *  exchanging levels) swapped into round 0 (c->chosen_round says which).
 *  Exits through a2a_die on failure. Caller frees. */
nsp_plan_t *a2a_real_plan(perf_ctx_t *c);

/** Scale round 0 of `real` to `bytes` per rank and derive the other plans. */
void a2a_plans_make(const perf_ctx_t *c, const nsp_plan_t *real, size_t bytes,
                    perf_plans_t *out);
void a2a_plans_free(perf_plans_t *p);

/* ---- methods -------------------------------------------------------------- */

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

/** nested (serial 0, mapped 0), serial (serial 1), nested-mapped (mapped 1:
 *  buffers from nsp_mem_alloc, same-host peers read in place), flat and
 *  level-dN (the nested runner on another plan); `name` is borrowed. */
void a2a_nested_init(perf_ctx_t *c, runner_t *r, const char *name, const nsp_plan_t *plan,
                     int serial, int mapped);

/** levels: the nparts level runners at `parts` (set up and owned by the
 *  caller), called in turn. */
void a2a_levels_init(runner_t *r, runner_t *parts, int nparts);

/** tp-same: the transport's world alltoallv carrying exactly the nested
 *  traffic of `plan` (same bytes per pair, no pack). */
void a2a_tp_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan);

/** The nested exchange's bytes between every pair as one world alltoallv,
 *  with a byte pattern to check (a2a_traffic_check). */
void   a2a_traffic_make(perf_ctx_t *c, const nsp_plan_t *plan, traffic_t *tr);
double a2a_traffic_check(perf_ctx_t *c, runner_t *r);

#ifdef NSP_HAVE_MPI
/** mpi: MPI_Alltoallv on exactly the nested traffic. */
void a2a_mpi_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan);
/** mpi+pack: the nested exchange with MPI as the transport. */
void a2a_mpack_init(perf_ctx_t *c, runner_t *r, const nsp_plan_t *plan);
/** The out-of-band allgather over MPI_COMM_WORLD (nsp_comm_init_oob). */
void a2a_mpi_oob(nsp_oob_coll_t *oob);
#endif

/** Free what any runner holds (collective for nested-mapped: every rank
 *  frees its runners in one order). */
void a2a_runner_free(perf_ctx_t *c, runner_t *r);

#endif /* NSP_PERF_A2A_PERF_H_ */
