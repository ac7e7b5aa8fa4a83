/*
 * nsp_a2a_perf: one size measured (perf/a2a_harness.h). The selected
 * methods add their rows; after the warm-up calls the timed calls are split
 * into --reps repetitions, and in each repetition every row runs its share
 * back to back (as nccl-tests times a loop) right after a barrier, the rows
 * in an order shuffled per repetition (the same shuffle on every rank), so
 * load drift on a shared machine hits every row alike and no row always
 * runs after the same one or in the same place.
 *
 *   time   = median over repetitions of (max over ranks of the mean wall
 *            time per call in that repetition)
 *   cpu    = median over repetitions of (mean over ranks of the process CPU
 *            time per call): work, against time that includes waiting
 *   algbw  = size / time
 *   busbw  = B_off / time, B_off = bytes a rank sends to OTHER ranks per
 *            call, mean over ranks (for a uniform all-to-all of size S per
 *            rank B_off = S (N-1)/N: nccl-tests' busbw)
 *   #wrong = elements that differ from an independent expectation after
 *            the timed calls, summed over ranks (--check)
 */
#include "config.h"

#include "a2a_harness.h"

#include "transport/comm.h"
#include "transport/request.h"
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct a2a_row a2a_row_t;

void a2a_timed_calls(perf_ctx_t *c, a2a_row_t *r, int calls, double *phase_s);

struct a2a_row {
    char                 name[A2A_NAME_LEN];
    const a2a_row_ops_t *ops;
    void                *state;
    double               offrank;   /* bytes to other ranks per call, this rank */
    size_t               bytes;     /* the size */
    double              *t, *cpu;   /* [reps] seconds per call in each repetition */
    double              *ph;        /* [reps][A2A_MAX_PHASES] the same of each phase */
    nsp_tp_ucx_stats_t   ucx;       /* over all timed calls */
    int                  calls;
};

struct a2a_rows {
    a2a_row_t row[A2A_MAX_ROWS];
    int       n;
};

void a2a_row_add(const perf_ctx_t *c, a2a_rows_t *rows, const char *name,
                 const a2a_row_ops_t *ops, void *state, double offrank)
{
    a2a_row_t *r;

    if (rows->n == A2A_MAX_ROWS) {
        a2a_die(c, "too many rows in one size");
    }
    r = &rows->row[rows->n++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->ops     = ops;
    r->state   = state;
    r->offrank = offrank;
    r->t       = a2a_xcalloc(sizeof(double) * (size_t)c->opts.reps);
    r->cpu     = a2a_xcalloc(sizeof(double) * (size_t)c->opts.reps);
    r->ph      = a2a_xcalloc(sizeof(double) * (size_t)c->opts.reps * A2A_MAX_PHASES);
}

int a2a_method_selected(const perf_ctx_t *c, int k)
{
    return (c->opts.methods >> k) & 1u;
}

static double cpu_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This rank's counters of the world's transport (zeros when it keeps none). */
static void ucx_now(const perf_ctx_t *c, nsp_tp_ucx_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    (void)nsp_tp_ucx_stats(nsp_comm_tp(c->comm), s);
}

static void ucx_add_delta(nsp_tp_ucx_stats_t *acc, const nsp_tp_ucx_stats_t *a,
                          const nsp_tp_ucx_stats_t *b)
{
    acc->sends += b->sends - a->sends;
    acc->sends_rndv += b->sends_rndv - a->sends_rndv;
    acc->send_bytes += b->send_bytes - a->send_bytes;
    acc->progress += b->progress - a->progress;
    acc->progress_idle += b->progress_idle - a->progress_idle;
    acc->iov_copies += b->iov_copies - a->iov_copies;
    acc->iov_copy_bytes += b->iov_copy_bytes - a->iov_copy_bytes;
}

/* The timed calls alone, in a function of their own (never inlined) so a
 * profiler can count just them: perf/a2a_profile.sh runs callgrind with
 * --toggle-collect=a2a_timed_calls. */
__attribute__((noinline)) void a2a_timed_calls(perf_ctx_t *c, a2a_row_t *r, int calls,
                                               double *phase_s)
{
    for (int i = 0; i < calls; ++i) {
        r->ops->call(c, r->state, phase_s);
    }
}

/* Repetition `rep`: `calls` calls of row r back to back after a barrier. */
static void time_block(perf_ctx_t *c, a2a_row_t *r, int rep, int calls)
{
    nsp_tp_ucx_stats_t u0, u1;
    double             t0, c0, *ph = r->ph + (size_t)rep * A2A_MAX_PHASES;

    PCHECK(c, nsp_comm_barrier(c->comm), "barrier");
    ucx_now(c, &u0);
    c0 = cpu_now_s();
    t0 = nsp_now_s();
    a2a_timed_calls(c, r, calls, ph);
    if (c->windows != NULL) { /* one short line: O_APPEND keeps the ranks' lines whole */
        fprintf(c->windows, "%d %s %zu %.9f %.9f\n", (int)getpid(), r->name, r->bytes, t0,
                nsp_now_s());
        fflush(c->windows);
    }
    r->t[rep]   = (nsp_now_s() - t0) / calls;
    r->cpu[rep] = (cpu_now_s() - c0) / calls;
    for (int k = 0; k < A2A_MAX_PHASES; ++k) {
        ph[k] /= calls;
    }
    ucx_now(c, &u1);
    ucx_add_delta(&r->ucx, &u0, &u1);
    r->calls += calls;
}

/* order[0..n): the rows of repetition b, a Fisher-Yates shuffle drawn
 * from b alone (so every rank runs the same order); repetition 0 keeps the
 * table's order. */
static void rep_order(int b, int n, int *order)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(b + 1);

    for (int i = 0; i < n; ++i) {
        order[i] = i;
    }
    for (int i = n - 1; b > 0 && i > 0; --i) {
        int j, t;
        x ^= x >> 12; /* xorshift64* */
        x ^= x << 25;
        x ^= x >> 27;
        j        = (int)((x * 0x2545f4914f6cdd1dull) >> 33) % (i + 1);
        t        = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Warm-up calls, then the repetitions, each in its own order of rows. */
static void time_rows(perf_ctx_t *c, a2a_rows_t *rows)
{
    int reps = c->opts.reps, n = rows->n, order[A2A_MAX_ROWS];

    for (int k = 0; k < n; ++k) {
        double scratch[A2A_MAX_PHASES] = {0};
        for (int i = 0; i < c->opts.warmup; ++i) {
            rows->row[k].ops->call(c, rows->row[k].state, scratch);
        }
    }
    for (int b = 0; b < reps; ++b) {
        /* calls of repetition b: an even share, the remainder in the first ones */
        int calls = c->opts.iters / reps + (b < c->opts.iters % reps);
        rep_order(b, n, order);
        for (int i = 0; i < n; ++i) {
            time_block(c, &rows->row[order[i]], b, calls);
        }
    }
}

/* What one rank reports of one row, gathered: per repetition (PER_REP
 * columns of reps values each) the time, the CPU time and each phase per
 * call; then UCX counters per call, wrong, off-rank bytes. */
enum { R_TIME, R_CPU, R_PHASE, PER_REP = R_PHASE + A2A_MAX_PHASES };
enum { G_UCX = 0, G_WRONG = G_UCX + 7, G_OFF, G_COPIES, G_FIXED = G_COPIES + 5 };

static void row_pack(perf_ctx_t *c, const a2a_row_t *r, double wrong, double *v)
{
    int    reps  = c->opts.reps;
    double calls = r->calls > 0 ? r->calls : 1;
    double *fix  = v + PER_REP * reps;

    memcpy(v + R_TIME * reps, r->t, sizeof(double) * (size_t)reps);
    memcpy(v + R_CPU * reps, r->cpu, sizeof(double) * (size_t)reps);
    for (int k = 0; k < A2A_MAX_PHASES; ++k) {
        for (int b = 0; b < reps; ++b) {
            v[(R_PHASE + k) * reps + b] = r->ph[(size_t)b * A2A_MAX_PHASES + k];
        }
    }
    fix[G_UCX + 0] = (double)r->ucx.sends / calls;
    fix[G_UCX + 1] = (double)r->ucx.sends_rndv / calls;
    fix[G_UCX + 2] = (double)r->ucx.send_bytes / calls;
    fix[G_UCX + 3] = (double)r->ucx.progress / calls;
    fix[G_UCX + 4] = (double)r->ucx.progress_idle / calls;
    fix[G_UCX + 5] = (double)r->ucx.iov_copies / calls;
    fix[G_UCX + 6] = (double)r->ucx.iov_copy_bytes / calls;
    fix[G_WRONG]   = wrong;
    fix[G_OFF]     = r->offrank;
    if (r->ops->copies != NULL) {
        a2a_copies_t cp;
        r->ops->copies(c, r->state, &cp);
        fix[G_COPIES + 0] = cp.level0;
        fix[G_COPIES + 1] = cp.self;
        fix[G_COPIES + 2] = cp.pack;
        fix[G_COPIES + 3] = cp.wire;
        fix[G_COPIES + 4] = cp.unpack;
    }
}

/* Median over reps of the max (of the mean) over ranks of column `col`. */
static void over_reps(const perf_ctx_t *c, const double *all, int stride, int col, int use_max,
                      perf_stats_t *st)
{
    double per_rep[4096];
    int    reps = c->opts.reps;

    for (int b = 0; b < reps; ++b) {
        double acc = 0;
        for (int q = 0; q < c->nranks; ++q) {
            double v = all[(size_t)q * stride + col + b];
            acc = use_max ? (q == 0 || v > acc ? v : acc) : acc + v / c->nranks;
        }
        per_rep[b] = acc;
    }
    perf_stats_of(per_rep, reps, st);
}

/* Mean over ranks of fixed entry k. */
static double mean_fixed(const perf_ctx_t *c, const double *all, int stride, int k)
{
    double sum = 0;

    for (int q = 0; q < c->nranks; ++q) {
        sum += all[(size_t)q * stride + PER_REP * c->opts.reps + k];
    }
    return sum / c->nranks;
}

static void row_result(perf_ctx_t *c, const a2a_row_t *r, size_t bytes, a2a_result_t *res)
{
    int          reps = c->opts.reps, stride = PER_REP * reps + G_FIXED;
    double      *v = a2a_xcalloc(sizeof(double) * (size_t)stride);
    double      *all = a2a_xmalloc(sizeof(double) * (size_t)stride * (size_t)c->nranks);
    double       wrong = c->opts.check ? r->ops->check(c, r->state) : 0;
    perf_stats_t t, cpu;

    row_pack(c, r, wrong, v);
    PCHECK(c, nsp_comm_allgather(c->comm, v, all, sizeof(double) * (size_t)stride), "allgather");
    over_reps(c, all, stride, R_TIME * reps, 1, &t);
    over_reps(c, all, stride, R_CPU * reps, 0, &cpu);
    memset(res, 0, sizeof(*res));
    snprintf(res->method, sizeof(res->method), "%s", r->name);
    res->bytes       = bytes;
    res->reps        = c->opts.reps;
    res->calls       = r->calls;
    res->time_us     = t.median * 1e6;
    res->time_min_us = t.min * 1e6;
    res->time_max_us = t.max * 1e6;
    res->cpu_us      = cpu.median * 1e6;
    res->algbw       = (double)bytes / t.median / 1e9;
    res->busbw       = mean_fixed(c, all, stride, G_OFF) / t.median / 1e9;
    res->wrong       = c->opts.check ? mean_fixed(c, all, stride, G_WRONG) * c->nranks : -1;
    for (int k = 0; k < A2A_MAX_PHASES && r->ops->phases[k] != NULL; ++k) {
        perf_stats_t ph;
        over_reps(c, all, stride, (R_PHASE + k) * reps, 0, &ph);
        res->phase[k]    = r->ops->phases[k];
        res->phase_us[k] = ph.median * 1e6;
        res->nphases     = k + 1;
    }
    res->ucx.sends         = mean_fixed(c, all, stride, G_UCX + 0);
    res->ucx.rndv          = mean_fixed(c, all, stride, G_UCX + 1);
    res->ucx.eager         = res->ucx.sends - res->ucx.rndv;
    res->ucx.bytes         = mean_fixed(c, all, stride, G_UCX + 2);
    res->ucx.progress      = mean_fixed(c, all, stride, G_UCX + 3);
    res->ucx.idle_progress = mean_fixed(c, all, stride, G_UCX + 4);
    res->ucx.copies        = mean_fixed(c, all, stride, G_UCX + 5);
    res->ucx.copy_bytes    = mean_fixed(c, all, stride, G_UCX + 6);
    res->has_copies        = r->ops->copies != NULL;
    res->copies.level0     = mean_fixed(c, all, stride, G_COPIES + 0);
    res->copies.self       = mean_fixed(c, all, stride, G_COPIES + 1);
    res->copies.pack       = mean_fixed(c, all, stride, G_COPIES + 2);
    res->copies.wire       = mean_fixed(c, all, stride, G_COPIES + 3);
    res->copies.unpack     = mean_fixed(c, all, stride, G_COPIES + 4);
    free(all);
    free(v);
}

/* Every selected method that can run here adds its rows. */
static void rows_setup(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    for (int k = 0; k < a2a_nmethods; ++k) {
        const a2a_method_t *m = a2a_methods[k];
        if (a2a_method_selected(c, k) && (m->unavailable == NULL || m->unavailable(c) == NULL)) {
            m->setup(c, plans, rows);
        }
    }
}

void a2a_run_size(perf_ctx_t *c, const nsp_plan_t *real, size_t bytes, a2a_size_out_t *out)
{
    perf_plans_t plans;
    a2a_rows_t  *rows = a2a_xcalloc(sizeof(*rows)); /* large: not on the stack */

    a2a_plans_make(c, real, bytes, &plans);
    rows_setup(c, &plans, rows);
    for (int k = 0; k < rows->n; ++k) {
        rows->row[k].bytes = bytes;
    }
    time_rows(c, rows);
    out->bytes = bytes;
    out->n     = rows->n;
    for (int k = 0; k < rows->n; ++k) {
        row_result(c, &rows->row[k], bytes, &out->res[k]);
    }
    for (int k = 0; k < rows->n; ++k) { /* in order on every rank: collective frees */
        a2a_row_t *r = &rows->row[k];
        if (r->ops->free != NULL) {
            r->ops->free(c, r->state);
        }
        free(r->t);
        free(r->cpu);
        free(r->ph);
    }
    a2a_plans_free(&plans);
    free(rows);
}
