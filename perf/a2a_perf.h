/*
 * nsp_a2a_perf's harness and its methods (nccl-tests' shape: the frame in
 * one place, each measured method in a file of its own that the frame finds
 * through one table, as nccl-tests' `struct testColl`):
 *
 *   nsp_a2a_perf.c  options, --help, the launchers, main
 *   a2a_run.c       one size: the rows set up, interleaved repetitions
 *                   timed, statistics over ranks and repetitions
 *   a2a_output.c    the table, the ratios, the footer and the JSON
 *   a2a_methods.c   THE TABLE: one line per method (docs/design/extending.md)
 *   a2a_data.c      the global tensor, filling and checking, byte counts,
 *                   errors, memory
 *   a2a_plans.c     the real plan and the plans each size derives from it
 *   a2a_nested.c    nested, nested-oneshot, serial, flat, nested-mapped:
 *                   the nested all-to-all on one plan
 *   a2a_levels.c    levels (rows levels and level-dN): every level alone
 *   a2a_tp.c        tp-same: the transport's alltoallv on the nested bytes
 *   a2a_mpi.c       mpi, mpi-flat, mpi+pack (under mpirun), MPI's bootstrap
 *
 * A method adds rows to a size (setup); a row is a state the method owns
 * and three calls: call() is one operation on this rank (timed, optionally
 * split into named phases), check() counts the elements of this rank's
 * result that differ from an independently computed expectation, free()
 * releases the state.
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
    int         reps;           /* --reps: interleaved repetitions the iterations split into */
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
    uint32_t    methods;        /* --methods: bit k for a2a_methods[k] */
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
    FILE       *windows;        /* NSP_A2A_PERF_WINDOWS: where each rank notes when its
                                   timed calls ran (for a profiler), or NULL */
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

/** calloc of one zeroed object that exits on failure. */
void *a2a_xcalloc(size_t n);

/** Seconds since *t0, and *t0 set to now: phase_s[k] += a2a_lap(&t). */
double a2a_lap(double *t0);

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

/* ---- methods: the registry (a2a_methods.c) -------------------------------- */

#define A2A_MAX_PHASES 4   /* named parts of one call a row may time */
#define A2A_MAX_METHODS 32 /* --methods is a 32-bit mask */

/** Bytes one call copies on this rank, by kind: the method's own account
 *  of its copies (pure arithmetic on its layout), beside the measured time. */
typedef struct a2a_copies {
    double level0; /* level 0's local copy (degree 1: nothing moves) */
    double self;   /* the rank's own blocks (an alltoallv's self part) */
    double pack;   /* strided copies into send space */
    double wire;   /* bytes to other ranks: one copy each by rendezvous over CMA */
    double unpack; /* copies out of receive space */
} a2a_copies_t;

/** What a row does: the calls on the state its method made for it. */
typedef struct a2a_row_ops {
    /** One operation on this rank, timed; it may add the seconds of its
     *  parts to phase_s[k] (phases[k] names them; a2a_lap). */
    void (*call)(perf_ctx_t *c, void *state, double *phase_s);
    /** Elements of this rank's last result that differ from what was
     *  computed independently of the method (run after the timed calls). */
    double (*check)(perf_ctx_t *c, void *state);
    /** Release the state; NULL when another row owns it. Called on every
     *  rank in the order the rows were added (collective frees allowed). */
    void (*free)(perf_ctx_t *c, void *state);
    /** Optional (NULL: not known): the bytes one call copies on this rank. */
    void (*copies)(perf_ctx_t *c, void *state, a2a_copies_t *out);
    const char *phases[A2A_MAX_PHASES]; /* NULL-terminated; none: no phases */
} a2a_row_ops_t;

/** The rows of one size (a2a_run.c). */
typedef struct a2a_rows a2a_rows_t;

/**
 * One method: its own file, one line in perf/a2a_methods.c. `setup` adds
 * its rows for one size from that size's plans (usually one row named
 * after the method; levels adds a row per level too). `unavailable`, when
 * not NULL, says why the method cannot run in this process (e.g. "run under
 * mpirun"); the method is then left out of the table and listed under
 * "skipped" in the JSON with that reason.
 */
typedef struct a2a_method {
    const char *name;  /* --methods word and row name */
    const char *help;  /* one line of --help */
    const char *(*unavailable)(const perf_ctx_t *c);
    void (*setup)(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows);
} a2a_method_t;

/** The table, in output order; a2a_nmethods entries. */
extern const a2a_method_t *const a2a_methods[];
extern const int                 a2a_nmethods;

/** Add a row `name` (copied) whose state (owned per ops->free) sends
 *  `offrank` bytes to other ranks per call on this rank. Exits through
 *  a2a_die when the size holds too many rows. */
void a2a_row_add(const perf_ctx_t *c, a2a_rows_t *rows, const char *name,
                 const a2a_row_ops_t *ops, void *state, double offrank);

/* ---- building blocks several methods share -------------------------------- */

/** A nested all-to-all (s2h) of round 0 of `plan`, checked against the
 *  global tensor and back (a2a_nested.c). */
typedef struct a2a_nested a2a_nested_t;

/** serial: levels one after another; mapped: buffers from nsp_mem_alloc,
 *  same-host peers read in place; oneshot: nsp_a2a_post per call instead
 *  of one nsp_a2a_create and a start per call. */
a2a_nested_t *a2a_nested_new(perf_ctx_t *c, const nsp_plan_t *plan, int serial, int mapped,
                             int oneshot);
extern const a2a_row_ops_t a2a_nested_ops;
double a2a_nested_offrank(const a2a_nested_t *n);

/** The copies of a nested s2h of `lay` on this rank as the host path makes
 *  them (src/attn_sp/nested_a2a.c: every byte to a peer packed, a large
 *  sequence received in place, the small ones of a level batched and
 *  unpacked); with `mpi_pack`, as mpi+pack makes them (everything packed
 *  and unpacked). */
void a2a_nested_copies(const perf_ctx_t *c, const nsp_layout_t *lay, int mpi_pack,
                       a2a_copies_t *out);

/** The nested exchange's bytes between every pair (self: what a rank
 *  keeps) as one world alltoallv, with a byte pattern to check (a2a_tp.c). */
typedef struct traffic {
    size_t *sc, *sd, *rc, *rd;   /* [N] bytes per world peer, self included */
    char   *send, *recv;
    size_t  stot, rtot;
    double  offrank;             /* bytes this rank sends to other ranks */
} traffic_t;

void   a2a_traffic_make(perf_ctx_t *c, const nsp_plan_t *plan, traffic_t *tr);
double a2a_traffic_check(const perf_ctx_t *c, const traffic_t *tr);
void   a2a_traffic_free(traffic_t *tr);
/** An alltoallv of `tr`: its self part copied, the rest on the wire. */
void   a2a_traffic_copies(const perf_ctx_t *c, const traffic_t *tr, a2a_copies_t *out);

#ifdef NSP_HAVE_MPI
/** The out-of-band allgather over MPI_COMM_WORLD (nsp_comm_init_oob). */
void a2a_mpi_oob(nsp_oob_coll_t *oob);
#endif

#endif /* NSP_PERF_A2A_PERF_H_ */
