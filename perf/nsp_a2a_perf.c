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
 *
 * This file is the frame (options, launch, sizes, timing, table, JSON);
 * each method is a file of its own (perf/a2a_perf.h lists them), the
 * table and JSON code is perf/common.h's.
 */
#include "config.h"

#include "a2a_perf.h"
#include "common.h"

#include "common/log.h"
#include "planner/plan_internal.h"
#include "transport/request.h"
#include "nsp_launch.h"
#include "nsp_opt.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef NSP_HAVE_MPI
#include <mpi.h>
#endif

/* ---- the methods of a size ------------------------------------------------ */

/* The methods --methods may name (nested always runs). */
static const char *const method_names[] = {"serial", "levels",   "flat",         "tp-same",
                                           "mpi",    "mpi+pack", "nested-mapped"};
#define PERF_NMETHOD_NAMES ((int)(sizeof(method_names) / sizeof(method_names[0])))

/* The rows of the table, in order: index into rows[] of a size. */
enum { ROW_NESTED, ROW_SERIAL, ROW_LEVELS, ROW_FLAT, ROW_TP, ROW_MPI, ROW_MPACK, ROW_MAPPED,
       PERF_MAX_METHODS };
static const char *const row_names[PERF_MAX_METHODS] = {
    "nested", "serial", "levels", "flat", "tp-same", "mpi", "mpi+pack", "nested-mapped"};

#define PERF_MAX_RUNNERS (PERF_MAX_METHODS + A2A_MAX_LEVELS)

/* One row of the table. */
typedef struct perf_row {
    char        method[24];     /* a copy: the runners' names go with the runners */
    size_t      bytes;          /* nominal bytes per rank */
    double      time_us;
    double      algbw, busbw;   /* GB/s */
    double      wrong;          /* elements wrong, summed over ranks; -1: not checked */
    int         valid;
} perf_row_t;

/* The runners of one size: run[at[m]] is row m's runner (-1: not run);
 * the level runners are run[first_level .. first_level + nlevels). */
typedef struct perf_size {
    runner_t run[PERF_MAX_RUNNERS];
    int      nrun, at[PERF_MAX_METHODS], first_level, nlevels;
    char     lvnames[A2A_MAX_LEVELS][16];
} perf_size_t;

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

/* Runner m of the size (row m of the table), set up by `init`. */
static runner_t *size_add(perf_size_t *z, int m)
{
    z->at[m] = z->nrun;
    return &z->run[z->nrun++];
}

/* Set up every selected method of one size on its plans. */
static void size_setup(perf_ctx_t *c, const perf_plans_t *plans, perf_size_t *z)
{
    memset(z, 0, sizeof(*z));
    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        z->at[m] = -1;
    }
    a2a_nested_init(c, size_add(z, ROW_NESTED), "nested", plans->nested, 0, 0); /* the reference */
    if (method_on(c, "serial")) {
        a2a_nested_init(c, size_add(z, ROW_SERIAL), "serial", plans->nested, 1, 0);
    }
    z->first_level = z->nrun;
    for (int l = 0; method_on(c, "levels") && plans->nlevels > 1 && l < plans->nlevels; ++l) {
        snprintf(z->lvnames[l], sizeof(z->lvnames[l]), "level-d%d", plans->degree[l]);
        a2a_nested_init(c, &z->run[z->nrun++], z->lvnames[l], plans->level[l], 0, 0);
    }
    z->nlevels = z->nrun - z->first_level;
    if (z->nlevels > 0) {
        a2a_levels_init(size_add(z, ROW_LEVELS), &z->run[z->first_level], z->nlevels);
    }
    if (method_on(c, "flat")) {
        a2a_nested_init(c, size_add(z, ROW_FLAT), "flat", plans->flat, 0, 0);
    }
    if (method_on(c, "tp-same")) {
        a2a_tp_init(c, size_add(z, ROW_TP), plans->nested);
    }
#ifdef NSP_HAVE_MPI
    if (c->mpi && method_on(c, "mpi")) {
        a2a_mpi_init(c, size_add(z, ROW_MPI), plans->nested);
    }
    if (c->mpi && method_on(c, "mpi+pack")) {
        a2a_mpack_init(c, size_add(z, ROW_MPACK), plans->nested);
    }
#endif
    if (method_on(c, "nested-mapped")) {
        a2a_nested_init(c, size_add(z, ROW_MAPPED), "nested-mapped", plans->nested, 0, 1);
    }
}

/* Max and sum over ranks of a double. */
static void allreduce(perf_ctx_t *c, double v, double *max, double *sum)
{
    double *all = a2a_xmalloc(sizeof(double) * (size_t)c->nranks);

    PCHECK(c, nsp_comm_allgather(c->comm, &v, all, sizeof(v)), "allgather");
    *max = all[0];
    *sum = 0;
    for (int r = 0; r < c->nranks; ++r) {
        *max = all[r] > *max ? all[r] : *max;
        *sum += all[r];
    }
    free(all);
}

/* Time the runners in blocks of back-to-back calls (as nccl-tests times a
 * loop), the blocks of the different methods interleaved, each block right
 * after a barrier, so load drift on a shared machine hits every method
 * alike; warm-up calls first. t_sum: seconds on this rank. */
#define PERF_BLOCKS 4

static void time_blocks(perf_ctx_t *c, runner_t *run, int n)
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
}

/* Row of runner r: time = max over ranks of the mean per call; algbw =
 * size / time; busbw = mean over ranks of the off-rank bytes / time. */
static void runner_row(perf_ctx_t *c, runner_t *r, size_t bytes, perf_row_t *row)
{
    double tmax, tsum, omax, osum, wmax, wsum, wrong = 0;

    if (c->opts.check) {
        wrong = r->check(c, r);
    }
    allreduce(c, r->t_sum / c->opts.iters, &tmax, &tsum);
    allreduce(c, r->offrank, &omax, &osum);
    allreduce(c, wrong, &wmax, &wsum);
    snprintf(row->method, sizeof(row->method), "%s", r->name);
    row->bytes   = bytes;
    row->time_us = tmax * 1e6;
    row->algbw   = (double)bytes / tmax / 1e9;
    row->busbw   = osum / c->nranks / tmax / 1e9;
    row->wrong   = c->opts.check ? wsum : -1;
    row->valid   = 1;
}

/* Run one size: rows[m] per table row (valid 0: not run), lvrows[k] per level. */
static void run_size(perf_ctx_t *c, const nsp_plan_t *real, size_t bytes, perf_row_t *rows,
                     perf_row_t *lvrows, int *nlevels)
{
    perf_plans_t plans;
    perf_size_t *z = a2a_xmalloc(sizeof(*z)); /* large: not on the stack */

    memset(rows, 0, sizeof(*rows) * PERF_MAX_METHODS);
    a2a_plans_make(c, real, bytes, &plans);
    size_setup(c, &plans, z);
    time_blocks(c, z->run, z->nrun);
    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        if (z->at[m] >= 0) {
            runner_row(c, &z->run[z->at[m]], bytes, &rows[m]);
        }
        snprintf(rows[m].method, sizeof(rows[m].method), "%s", row_names[m]);
        rows[m].bytes  = bytes;
    }
    for (int k = 0; k < z->nlevels; ++k) {
        runner_row(c, &z->run[z->first_level + k], bytes, &lvrows[k]);
    }
    *nlevels = z->nlevels;
    for (int k = 0; k < z->nrun; ++k) {
        a2a_runner_free(c, &z->run[k]);
    }
    a2a_plans_free(&plans);
    free(z);
}

/* ---- output: the table (perf/common.h) ------------------------------------ */

static const perf_col_t table_cols[] = {
    {"method", "", 13, 0, 1},  {"size(B)", "", 12, -1, 0},     {"count", "(elements)", 12, -1, 0},
    {"type", "", 6, 0, 0},     {"time(us)", "", 10, 1, 0},     {"algbw", "(GB/s)", 8, 3, 0},
    {"busbw", "(GB/s)", 8, 3, 0}, {"#wrong", "", 8, -1, 0}};
#define PERF_NCOLS ((int)(sizeof(table_cols) / sizeof(table_cols[0])))

static const char *type_name(size_t elem)
{
    return elem == 2 ? "bf16" : elem == 4 ? "float" : elem == 8 ? "double" : "int8";
}

static void print_row(const perf_ctx_t *c, const perf_row_t *r)
{
    perf_cell_t cells[PERF_NCOLS] = {
        PERF_TEXT(r->method), PERF_NUM(r->bytes), PERF_NUM(r->bytes / c->opts.elem),
        PERF_TEXT(type_name(c->opts.elem)), PERF_NUM(r->time_us), PERF_NUM(r->algbw),
        PERF_NUM(r->busbw), PERF_NUM(r->wrong < 0 ? NAN : r->wrong)};

    if (r->valid) {
        perf_table_row(stdout, table_cols, PERF_NCOLS, cells);
    }
}

/* One row of "results" (perf/common.h: numbers that always parse). */
static void json_row(perf_json_t *j, const perf_ctx_t *c, const perf_row_t *r)
{
    if (j->f == NULL || !r->valid) {
        return;
    }
    nsp_json_begin_object(&j->w, NULL, 1);
    nsp_json_string(&j->w, "method", r->method);
    nsp_json_int(&j->w, "size", (int64_t)r->bytes);
    nsp_json_int(&j->w, "count", (int64_t)(r->bytes / c->opts.elem));
    nsp_json_string(&j->w, "type", type_name(c->opts.elem));
    perf_json_num(&j->w, "time_us", r->time_us);
    perf_json_num(&j->w, "algbw", r->algbw);
    perf_json_num(&j->w, "busbw", r->busbw);
    perf_json_num(&j->w, "wrong", r->wrong);
    nsp_json_end(&j->w);
}

/* The plan's round 0 by degree, on stdout and under "plan". */
static void describe_plan(const perf_ctx_t *c, const nsp_plan_t *plan, perf_json_t *j)
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
    nsp_json_begin_object(&j->w, "plan", 0);
    nsp_json_string(&j->w, "planner", plan->planner);
    nsp_json_int(&j->w, "seqs", plan->nseqs);
    nsp_json_int(&j->w, "rounds", plan->nrounds);
    nsp_json_int(&j->w, "round", c->chosen_round);
    nsp_json_begin_array(&j->w, "levels", 1);
    for (int k = 0; k < 64; ++k) {
        if (nseq_degree[k] == 0) {
            continue;
        }
        printf("#   degree %3d: %4d seqs, %9lld tokens (real batch)\n", 1 << k,
               nseq_degree[k], (long long)per_degree[k]);
        nsp_json_begin_object(&j->w, NULL, 1);
        nsp_json_int(&j->w, "degree", 1 << k);
        nsp_json_int(&j->w, "seqs", nseq_degree[k]);
        nsp_json_int(&j->w, "tokens", per_degree[k]);
        nsp_json_end(&j->w);
    }
    nsp_json_end(&j->w);
    nsp_json_end(&j->w);
}

/* Rank 0: the title, "format", "config", "plan", and the table's header;
 * "results" opened. A JSON file that cannot be written is said and skipped. */
static void output_begin(const perf_ctx_t *c, const nsp_plan_t *real, perf_json_t *j)
{
    memset(j, 0, sizeof(*j));
    if (c->opts.json != NULL && perf_json_open(j, c->opts.json) != NSP_OK) {
        fprintf(stderr, A2A_PROG ": %s\n", nsp_last_error());
    }
    if (j->f == NULL && perf_json_open(j, "/dev/null") != NSP_OK) { /* no file: the same */
        a2a_die(c, "/dev/null");                                     /* calls, to nowhere */
    }
    printf("# nsp_a2a_perf: %d ranks (%s), H=%d heads x D=%d, %s; iters %d, warmup %d, "
           "check %d\n", c->nranks, c->mpi ? "mpirun" : "forked locally", c->opts.heads,
           c->opts.head_dim, type_name(c->opts.elem), c->opts.iters, c->opts.warmup,
           c->opts.check);
    nsp_json_string(&j->w, "format", "nspcomm-a2a-perf-v1");
    nsp_json_begin_object(&j->w, "config", 1);
    nsp_json_int(&j->w, "ranks", c->nranks);
    nsp_json_string(&j->w, "launcher", c->mpi ? "mpirun" : "fork");
    nsp_json_string(&j->w, "mpi_pml", c->mpi_pml);
    nsp_json_int(&j->w, "heads", c->opts.heads);
    nsp_json_int(&j->w, "head_dim", c->opts.head_dim);
    nsp_json_string(&j->w, "type", type_name(c->opts.elem));
    nsp_json_int(&j->w, "iters", c->opts.iters);
    nsp_json_int(&j->w, "warmup", c->opts.warmup);
    nsp_json_string(&j->w, "workload", c->opts.workload);
    nsp_json_string(&j->w, "model", c->opts.model);
    nsp_json_int(&j->w, "tokens_per_rank", c->opts.tokens_per_rank);
    nsp_json_int(&j->w, "seed", (int64_t)c->opts.seed);
    nsp_json_end(&j->w);
    describe_plan(c, real, j);
    nsp_json_begin_array(&j->w, "results", 0);
    printf("#\n");
    perf_table_header(stdout, table_cols, PERF_NCOLS);
}

/* ---- output: sums over sizes, ratios, the footer --------------------------- */

typedef struct perf_sums {
    int    nsizes;
    double sum_bus[PERF_MAX_METHODS], wrong_total;
    double pipe_vs_levels_min, pipe_vs_serial_min, min_ratio_mpi, min_ratio_mapped;
} perf_sums_t;

static double ratio(const perf_row_t *a, const perf_row_t *b)
{
    return (a->valid && b->valid && b->busbw > 0) ? a->busbw / b->busbw : NAN;
}

static void sums_add(perf_sums_t *s, const perf_row_t *rows)
{
    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        if (rows[m].valid) {
            s->sum_bus[m] += rows[m].busbw;
            s->wrong_total += rows[m].wrong > 0 ? rows[m].wrong : 0;
        }
    }
    if (rows[ROW_LEVELS].valid) {
        s->pipe_vs_levels_min = fmin(s->pipe_vs_levels_min,
                                     rows[ROW_LEVELS].time_us / rows[ROW_NESTED].time_us);
    }
    if (rows[ROW_SERIAL].valid) {
        s->pipe_vs_serial_min = fmin(s->pipe_vs_serial_min,
                                     rows[ROW_SERIAL].time_us / rows[ROW_NESTED].time_us);
    }
    if (rows[ROW_MPI].valid) {
        s->min_ratio_mpi = fmin(s->min_ratio_mpi, ratio(&rows[ROW_NESTED], &rows[ROW_MPI]));
    }
    if (rows[ROW_MPI].valid && rows[ROW_MAPPED].valid) {
        s->min_ratio_mapped = fmin(s->min_ratio_mapped,
                                   ratio(&rows[ROW_MAPPED], &rows[ROW_MPI]));
    }
    ++s->nsizes;
}

/* Rank 0: the rows of one size (each level alone under "levels") and its ratios. */
static void print_size(const perf_ctx_t *c, perf_json_t *j, const perf_row_t *rows,
                       const perf_row_t *lvrows, int nlevels)
{
    const perf_row_t *r = rows;

    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        print_row(c, &rows[m]);
        json_row(j, c, &rows[m]);
        for (int k = 0; m == ROW_LEVELS && rows[m].valid && k < nlevels; ++k) {
            print_row(c, &lvrows[k]);
            json_row(j, c, &lvrows[k]);
        }
    }
    printf("  %-9s nested/tp-same busbw %.2fx, nested/mpi %.2fx, nested/mpi+pack %.2fx; "
           "flat time / nested %.2fx; serial time / pipelined %.2fx, sum of levels / "
           "pipelined %.2fx\n", "ratios", ratio(&r[ROW_NESTED], &r[ROW_TP]),
           ratio(&r[ROW_NESTED], &r[ROW_MPI]), ratio(&r[ROW_NESTED], &r[ROW_MPACK]),
           r[ROW_FLAT].valid ? r[ROW_FLAT].time_us / r[ROW_NESTED].time_us : NAN,
           r[ROW_SERIAL].valid ? r[ROW_SERIAL].time_us / r[ROW_NESTED].time_us : NAN,
           r[ROW_LEVELS].valid ? r[ROW_LEVELS].time_us / r[ROW_NESTED].time_us : NAN);
    printf("  %-9s nested-mapped/mpi busbw %.2fx, nested-mapped/nested %.2fx\n", "ratios",
           ratio(&r[ROW_MAPPED], &r[ROW_MPI]), ratio(&r[ROW_MAPPED], &r[ROW_NESTED]));
    fflush(stdout);
}

/* avg busbw of row a over row b, or NAN when either did not run. */
static double avg_ratio(const perf_sums_t *s, int a, int b)
{
    return s->sum_bus[a] > 0 && s->sum_bus[b] > 0 ? s->sum_bus[a] / s->sum_bus[b] : NAN;
}

static void print_footer(const perf_ctx_t *c, const perf_sums_t *s)
{
    printf("# Out of bounds values : %.0f %s\n", s->wrong_total,
           s->wrong_total == 0 ? "OK" : "WRONG");
    printf("# Avg bus bandwidth    :");
    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        if (s->sum_bus[m] > 0) {
            printf(" %s %.3f", row_names[m], s->sum_bus[m] / s->nsizes);
        }
    }
    printf(" (GB/s)\n");
    printf("# nested vs mpi (avg busbw): %s", c->mpi ? "" : "n/a (run under mpirun)\n");
    if (c->mpi && s->sum_bus[ROW_MPI] > 0) {
        printf("%.3fx (worst size %.3fx); nested vs mpi+pack %.3fx; pml %s\n",
               avg_ratio(s, ROW_NESTED, ROW_MPI), s->min_ratio_mpi,
               avg_ratio(s, ROW_NESTED, ROW_MPACK), c->mpi_pml);
    }
    printf("# nested-mapped vs mpi (avg busbw): ");
    if (c->mpi && s->sum_bus[ROW_MPI] > 0 && s->sum_bus[ROW_MAPPED] > 0) {
        printf("%.3fx (worst size %.3fx); ", avg_ratio(s, ROW_MAPPED, ROW_MPI),
               s->min_ratio_mapped);
    } else {
        printf("n/a (run under mpirun); ");
    }
    printf("nested-mapped vs nested %.3fx\n", avg_ratio(s, ROW_MAPPED, ROW_NESTED));
    printf("# pipelined levels: serial/pipelined time >= %.2fx, sum-of-levels/pipelined "
           ">= %.2fx over sizes\n", s->pipe_vs_serial_min, s->pipe_vs_levels_min);
    printf("#\n");
}

/* "results" closed, "summary" (-1 for a ratio that does not exist), the file closed. */
static void json_footer(perf_json_t *j, const perf_sums_t *s)
{
    nsp_json_writer_t *w = &j->w;

    nsp_json_end(w);
    nsp_json_begin_object(w, "summary", 1);
    perf_json_num(w, "wrong", s->wrong_total);
    nsp_json_begin_object(w, "avg_busbw", 1);
    for (int m = 0; m < PERF_MAX_METHODS; ++m) {
        if (s->sum_bus[m] > 0) {
            perf_json_num(w, row_names[m], s->sum_bus[m] / s->nsizes);
        }
    }
    nsp_json_end(w);
    perf_json_num_or(w, "nested_over_mpi_pack", avg_ratio(s, ROW_NESTED, ROW_MPACK), -1.0);
    perf_json_num_or(w, "nested_mapped_over_mpi", avg_ratio(s, ROW_MAPPED, ROW_MPI), -1.0);
    perf_json_num_or(w, "nested_mapped_over_mpi_worst", s->min_ratio_mapped, -1.0);
    perf_json_num_or(w, "nested_mapped_over_nested", avg_ratio(s, ROW_MAPPED, ROW_NESTED), -1.0);
    perf_json_num_or(w, "nested_over_mpi", avg_ratio(s, ROW_NESTED, ROW_MPI), -1.0);
    perf_json_num_or(w, "nested_over_mpi_worst", s->min_ratio_mpi, -1.0);
    perf_json_num_or(w, "serial_over_pipelined_min", s->pipe_vs_serial_min, -1.0);
    perf_json_num_or(w, "levels_over_pipelined_min", s->pipe_vs_levels_min, -1.0);
    nsp_json_end(w);
    if (perf_json_close(j) != NSP_OK) {
        fprintf(stderr, A2A_PROG ": %s\n", nsp_last_error());
    }
}

/* ---- the run on one rank --------------------------------------------------- */

static int run_rank(perf_ctx_t *c)
{
    nsp_plan_t *real;
    perf_json_t j;
    perf_sums_t s = {.pipe_vs_levels_min = INFINITY, .pipe_vs_serial_min = INFINITY,
                     .min_ratio_mpi = INFINITY, .min_ratio_mapped = INFINITY};
    nsp_tree_t *tree;

    memset(&j, 0, sizeof(j));
    PCHECK(c, nsp_tree_create(c->comm, NULL, 0, &c->tree), "tree");
    real = a2a_real_plan(c);
    if (c->rank == 0) {
        output_begin(c, real, &j);
    }
    for (size_t bytes = c->opts.min_bytes; bytes <= c->opts.max_bytes;
         bytes = (size_t)((double)bytes * c->opts.factor)) {
        perf_row_t rows[PERF_MAX_METHODS], lvrows[A2A_MAX_LEVELS];
        int        nlevels;
        run_size(c, real, bytes, rows, lvrows, &nlevels);
        sums_add(&s, rows);
        if (c->rank == 0) {
            print_size(c, &j, rows, lvrows, nlevels);
        }
        if (c->opts.factor <= 1.0) {
            break;
        }
    }
    if (c->rank == 0) {
        print_footer(c, &s);
        json_footer(&j, &s);
    }
    nsp_plan_free(real);
    nsp_a2a_release_cache();
    tree    = c->tree;
    c->tree = NULL; /* a2a_die must not destroy it again */
    PCHECK(c, nsp_tree_destroy(tree), "tree destroy");
    return s.wrong_total == 0 ? 0 : 2;
}

/* ---- launchers ------------------------------------------------------------ */

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
        /* nspcomm bootstraps through MPI when run under mpirun without
         * NSPCOMM_ROOT: the UCC-style out-of-band allgather */
        nsp_oob_coll_t oob;
        a2a_mpi_oob(&oob);
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

/* --ranks N: fork N local ranks that meet through a unique id, on the
 * shared launcher (perf/common.h, tools/nsp_launch.h): a rank that fails
 * gives the others their timeout to fail on their own, then they are
 * stopped (SIGTERM, then SIGKILL); every rank is reaped and their
 * shared-memory segments removed. Only rank 0 prints the table. */
static int run_forked(perf_ctx_t *base)
{
    perf_fork_t f = {.prog = A2A_PROG, .nranks = base->opts.ranks,
                     .timeout_s = base->opts.timeout_s, .fn = forked_rank, .arg = base,
                     .uid = &base->id, .uid_bytes = sizeof(base->id), .rank0_only = 1};

    return perf_fork_ranks(&f);
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
    case 'b': return nsp_opt_size(A2A_PROG, "-b", arg, 1, (size_t)1 << 36, &o->min_bytes);
    case 'e': return nsp_opt_size(A2A_PROG, "-e", arg, 1, (size_t)1 << 36, &o->max_bytes);
    case 'f': return nsp_opt_double(A2A_PROG, "-f", arg, 1, 1024, 0, &o->factor);
    case 'n': return nsp_opt_int(A2A_PROG, "-n", arg, 1, 1000000, &o->iters);
    case 'w': return nsp_opt_int(A2A_PROG, "-w", arg, 0, 1000000, &o->warmup);
    case 'c': return nsp_opt_int(A2A_PROG, "-c", arg, 0, 1, &o->check);
    case 'J': o->json = arg; return nsp_opt_out_path(A2A_PROG, "-J", arg);
    case 1: return nsp_opt_int(A2A_PROG, "--ranks", arg, 1, NSP_LAUNCH_MAX_RANKS, &o->ranks);
    case 2: o->workload = arg; return nsp_opt_in_path(A2A_PROG, "--workload", arg);
    case 3: o->model = arg; return NSP_OK;
    case 4: o->cluster = arg; return NSP_OK;
    case 5: return nsp_opt_i64(A2A_PROG, "--tokens-per-rank", arg, 1, 1 << 30,
                               &o->tokens_per_rank);
    case 6: return nsp_opt_i64(A2A_PROG, "--max-len", arg, 1, (int64_t)1 << 40, &o->max_len);
    case 7: return nsp_opt_u64(A2A_PROG, "--seed", arg, 0, UINT64_MAX, &o->seed);
    case 8: return nsp_opt_int(A2A_PROG, "--heads", arg, 1, 4096, &o->heads);
    case 9: return nsp_opt_int(A2A_PROG, "--head-dim", arg, 1, 65536, &o->head_dim);
    case 10:
        NSP_CHECK(nsp_opt_choice(A2A_PROG, "--elem", arg, elems, 2, &k));
        o->elem = k == 0 ? 2 : 4;
        return NSP_OK;
    case 11: return nsp_opt_int(A2A_PROG, "--round", arg, 0, 1 << 20, &o->round);
    case 12:
        return nsp_opt_list(A2A_PROG, "--methods", arg, method_names, PERF_NMETHOD_NAMES,
                            &o->methods);
    case 13: return nsp_opt_double(A2A_PROG, "--timeout", arg, 0, 1e6, NSP_OPT_LO_OPEN,
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
        fprintf(stderr, A2A_PROG ": -e %zu is below -b %zu\n", c->opts.max_bytes,
                c->opts.min_bytes);
        return NSP_ERR_INVALID_ARG;
    }
    if (nsp_model_preset(c->opts.model, &model) != NSP_OK ||
        nsp_cluster_preset(c->opts.cluster, 8, &cluster) != NSP_OK) {
        fprintf(stderr, A2A_PROG ": %s\n", nsp_last_error());
        return NSP_ERR_INVALID_ARG;
    }
    c->opts.heads    = c->opts.heads > 0 ? c->opts.heads : model.q_heads;
    c->opts.head_dim = c->opts.head_dim > 0 ? c->opts.head_dim : model.head_dim;
    /* per rank: about 8 buffers of -e bytes (sources, results, references,
     * the methods' scratch); the batch's lengths: 8 bytes per token at most */
    snprintf(what, sizeof(what), "-e %zu x %d ranks (and --tokens-per-rank %lld)",
             c->opts.max_bytes, nranks, (long long)c->opts.tokens_per_rank);
    return nsp_opt_mem_check(A2A_PROG, what, 8.0 * (double)c->opts.max_bytes * nranks +
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
        fprintf(stderr, A2A_PROG ": unexpected argument '%s' (see --help)\n", argv[optind]);
        return NSP_OPT_EXIT_USAGE;
    }
    if (perf_launcher_size(A2A_PROG, c.opts.ranks, &size) != NSP_OK) {
        return NSP_OPT_EXIT_USAGE;
    }
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
