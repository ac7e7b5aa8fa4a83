/*
 * nsp_a2a_perf's frame, between its files (methods do not need it):
 * a2a_run.c measures one size into a2a_size_out_t, a2a_output.c prints and
 * writes what was measured, nsp_a2a_perf.c drives both.
 */
#ifndef NSP_PERF_A2A_HARNESS_H_
#define NSP_PERF_A2A_HARNESS_H_

#include "a2a_perf.h"
#include "common.h"

#define A2A_MAX_ROWS (A2A_MAX_METHODS + A2A_MAX_LEVELS)
#define A2A_NAME_LEN 24

/* UCX operations of one call, mean over ranks (nspcomm's transport only:
 * the mpi rows make none). */
typedef struct a2a_ucx_per_call {
    double sends, eager, rndv, bytes, progress, idle_progress;
    double copies, copy_bytes; /* runs exchanges this rank copied itself (CMA), bytes */
} a2a_ucx_per_call_t;

/* One row of one size, reduced over ranks and repetitions. */
typedef struct a2a_result {
    char        method[A2A_NAME_LEN];
    size_t      bytes;      /* nominal bytes per rank */
    int         reps;       /* interleaved repetitions timed */
    int         calls;      /* timed calls in all */
    double      time_us;    /* median over reps of the slowest rank's mean per call */
    double      time_min_us, time_max_us; /* the same, fastest and slowest rep */
    double      cpu_us;     /* median over reps of the mean over ranks of CPU time per call */
    double      algbw;      /* size / time, GB/s */
    double      busbw;      /* off-rank bytes per call (mean over ranks) / time, GB/s */
    double      wrong;      /* elements wrong, summed over ranks; -1: not checked */
    int         nphases;
    const char *phase[A2A_MAX_PHASES];
    double      phase_us[A2A_MAX_PHASES]; /* per call: median over reps of the mean over ranks */
    a2a_ucx_per_call_t ucx;
    int                has_copies; /* the row's method accounts for its copies */
    a2a_copies_t       copies;     /* bytes per call, mean over ranks */
} a2a_result_t;

/* Every row of one size, in table order. */
typedef struct a2a_size_out {
    size_t       bytes;
    int          n;
    a2a_result_t res[A2A_MAX_ROWS];
} a2a_size_out_t;

/** Measure one size of the real plan: every selected method that can run
 *  here, interleaved repetitions, checked when --check. Collective. */
void a2a_run_size(perf_ctx_t *c, const nsp_plan_t *real, size_t bytes, a2a_size_out_t *out);

/** Is method k selected by --methods? */
int a2a_method_selected(const perf_ctx_t *c, int k);

/* ---- output (a2a_output.c), rank 0 only ------------------------------------ */

typedef struct a2a_output a2a_output_t;

/** The title, the definitions of the columns, the plan and the table's
 *  header; the JSON begun (c->opts.json, or nowhere). */
a2a_output_t *a2a_output_begin(const perf_ctx_t *c, const nsp_plan_t *real);

/** The rows of one size, its phases, UCX operations and ratios. */
void a2a_output_size(a2a_output_t *o, const a2a_size_out_t *z);

/** The footer and the JSON's summary; the file closed, `o` freed.
 *  Returns the elements wrong over all rows and sizes. */
double a2a_output_end(a2a_output_t *o);

#endif /* NSP_PERF_A2A_HARNESS_H_ */
