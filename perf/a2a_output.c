/*
 * nsp_a2a_perf's output, on rank 0 (perf/a2a_harness.h): the nccl-tests
 * table (size, count, type, time, algbw, busbw, #wrong, and the CPU time
 * per call), the definitions of its columns, per size the phases, the UCX
 * operations and the ratios between rows, the footer; and the same as JSON
 * ("nspcomm-a2a-perf-v2", docs/reference/alltoall.md §5). A number that is not finite is
 * N/A in the table and null in the JSON; a ratio whose two rows did not
 * both run is absent; so the JSON always parses with a strict parser.
 */
#include "config.h"

#include "a2a_harness.h"

#include "common/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ratios between rows ------------------------------------------------ */

typedef enum { OF_BUSBW, OF_TIME } ratio_of_t;

/* num over den, by busbw (above 1: num moves the bytes faster) or by time
 * (above 1: num takes longer than den). */
typedef struct ratio_def {
    const char *num, *den;
    ratio_of_t  of;
} ratio_def_t;

static const ratio_def_t ratio_defs[] = {
    {"nested", "mpi", OF_BUSBW},           {"nested", "mpi+pack", OF_BUSBW},
    {"flat", "mpi-flat", OF_BUSBW},        {"nested", "tp-same", OF_BUSBW},
    {"flat", "tp-flat", OF_BUSBW},
    {"tp-same", "mpi", OF_BUSBW},          {"nested-mapped", "mpi", OF_BUSBW},
    {"nested-mapped", "nested", OF_BUSBW}, {"nested", "nested-oneshot", OF_BUSBW},
    {"serial", "nested", OF_TIME},         {"levels", "nested", OF_TIME},
    {"flat", "nested", OF_TIME},           {"flat-mapped", "mpi-flat", OF_BUSBW},
    {"flat-mapped", "tp-flat", OF_BUSBW}};
#define NRATIOS ((int)(sizeof(ratio_defs) / sizeof(ratio_defs[0])))

static const char *const ratio_of_name[] = {"busbw", "time"};

/* Ratios over sizes: mean and worst (the smallest). */
typedef struct ratio_sum {
    int    n;
    double sum, worst;
    size_t worst_size;
} ratio_sum_t;

/* A ratio of one size, kept for the JSON's "ratios" (after "results"). */
typedef struct ratio_val {
    size_t size;
    int    def;
    double value;
} ratio_val_t;

/* Average busbw per row name over the sizes it ran. */
typedef struct bus_sum {
    char   method[A2A_NAME_LEN];
    double sum;
    int    n;
} bus_sum_t;

struct a2a_output {
    const perf_ctx_t *c;
    perf_json_t       j;
    double            wrong_total;
    int               checked_any; /* some row reported #wrong */
    ratio_sum_t       rsum[NRATIOS];
    ratio_val_t      *vals;
    int               nvals, capvals;
    bus_sum_t         bus[A2A_MAX_ROWS];
    int               nbus;
};

static const a2a_result_t *find(const a2a_size_out_t *z, const char *method)
{
    for (int k = 0; k < z->n; ++k) {
        if (strcmp(z->res[k].method, method) == 0) {
            return &z->res[k];
        }
    }
    return NULL;
}

/* Ratio d of size z into *v: 0 when a row is missing or the value is not finite. */
static int ratio_of(const a2a_size_out_t *z, int d, double *v)
{
    const a2a_result_t *a = find(z, ratio_defs[d].num), *b = find(z, ratio_defs[d].den);

    if (a == NULL || b == NULL) {
        return 0;
    }
    *v = ratio_defs[d].of == OF_BUSBW ? a->busbw / b->busbw : a->time_us / b->time_us;
    return isfinite(*v);
}

static void ratio_keep(a2a_output_t *o, size_t size, int d, double v)
{
    ratio_sum_t *s = &o->rsum[d];

    if (o->nvals == o->capvals) {
        o->capvals = o->capvals > 0 ? 2 * o->capvals : 64;
        o->vals    = realloc(o->vals, sizeof(*o->vals) * (size_t)o->capvals);
        if (o->vals == NULL) {
            a2a_die(o->c, "no memory for the ratios");
        }
    }
    o->vals[o->nvals++] = (ratio_val_t){.size = size, .def = d, .value = v};
    if (s->n == 0 || v < s->worst) {
        s->worst      = v;
        s->worst_size = size;
    }
    s->sum += v;
    ++s->n;
}

/* ---- the table ------------------------------------------------------------ */

static const perf_col_t table_cols[] = {
    {"method", "", 14, 0, 1},     {"size(B)", "", 12, -1, 0},  {"count", "(elements)", 12, -1, 0},
    {"type", "", 6, 0, 0},        {"time(us)", "", 10, 1, 0},  {"algbw", "(GB/s)", 8, 3, 0},
    {"busbw", "(GB/s)", 8, 3, 0}, {"#wrong", "", 8, -1, 0},    {"cpu(us)", "", 10, 1, 0}};
#define NCOLS ((int)(sizeof(table_cols) / sizeof(table_cols[0])))

static const char *type_name(size_t elem)
{
    return elem == 2 ? "bf16" : elem == 4 ? "float" : elem == 8 ? "double" : "int8";
}

static void print_row(const perf_ctx_t *c, const a2a_result_t *r)
{
    perf_cell_t cells[NCOLS] = {
        PERF_TEXT(r->method), PERF_NUM(r->bytes), PERF_NUM(r->bytes / c->opts.elem),
        PERF_TEXT(type_name(c->opts.elem)), PERF_NUM(r->time_us), PERF_NUM(r->algbw),
        PERF_NUM(r->busbw), PERF_NUM(r->wrong < 0 ? NAN : r->wrong), PERF_NUM(r->cpu_us)};

    perf_table_row(stdout, table_cols, NCOLS, cells);
}

/* "#  phases ...": the rows that time parts of a call. */
static void print_phases(const a2a_size_out_t *z)
{
    int any = 0;

    for (int k = 0; k < z->n; ++k) {
        const a2a_result_t *r = &z->res[k];
        if (r->nphases == 0) {
            continue;
        }
        printf("%s %s", any++ ? " |" : "#  phases (us per call; median over reps of the mean over "
                                     "ranks):", r->method);
        for (int p = 0; p < r->nphases; ++p) {
            printf(" %s %.1f", r->phase[p], r->phase_us[p]);
        }
    }
    if (any) {
        printf("\n");
    }
}

/* "#  ucx ...": the rows that sent through nspcomm's UCX transport. */
static void print_ucx(const a2a_size_out_t *z)
{
    int any = 0;

    for (int k = 0; k < z->n; ++k) {
        const a2a_ucx_per_call_t *u = &z->res[k].ucx;
        if (u->sends <= 0) {
            continue;
        }
        printf("%s %s %.1f sends (%.1f eager, %.1f rndv) %.0f B, %.1f run copies %.0f B, %.0f "
               "progress (%.0f idle)",
               any++ ? " |" : "#  ucx (per call, mean over ranks):", z->res[k].method, u->sends,
               u->eager, u->rndv, u->bytes, u->copies, u->copy_bytes, u->progress,
               u->idle_progress);
    }
    if (any) {
        printf("\n");
    }
}

static double copies_total(const a2a_copies_t *k)
{
    return k->level0 + k->self + k->pack + k->wire + k->unpack;
}

/* "#  copies ...": each row's account of the bytes it copies, in sizes. */
static void print_copies(const a2a_size_out_t *z)
{
    int any = 0;

    for (int k = 0; k < z->n; ++k) {
        const a2a_result_t *r = &z->res[k];
        const a2a_copies_t *p = &r->copies;
        double              s = (double)r->bytes;
        if (!r->has_copies) {
            continue;
        }
        printf("%s %s %.2f = level0 %.2f + self %.2f + pack %.2f + wire %.2f + unpack %.2f",
               any++ ? " |" : "#  copies (bytes per call and rank / size):", r->method,
               copies_total(p) / s, p->level0 / s, p->self / s, p->pack / s, p->wire / s,
               p->unpack / s);
    }
    if (any) {
        printf("\n");
    }
}

static void print_ratios(a2a_output_t *o, const a2a_size_out_t *z)
{
    int any = 0;

    for (int of = OF_BUSBW; of <= OF_TIME; ++of) {
        int first = 1;
        for (int d = 0; d < NRATIOS; ++d) {
            double v;
            if (ratio_defs[d].of != (ratio_of_t)of || !ratio_of(z, d, &v)) {
                continue;
            }
            printf("%s%s%s/%s %.2fx", any ? (first ? "; " : ", ") : "#  ratios ",
                   first ? (of == OF_BUSBW ? "busbw: " : "time: ") : "", ratio_defs[d].num,
                   ratio_defs[d].den, v);
            ratio_keep(o, z->bytes, d, v);
            any   = 1;
            first = 0;
        }
    }
    if (any) {
        printf("\n");
    }
}

/* ---- JSON ------------------------------------------------------------------ */

/* An object `key` of n numbers named keys[k]. */
static void json_numbers(nsp_json_writer_t *w, const char *key, const char *const *keys,
                         const double *v, int n)
{
    nsp_json_begin_object(w, key, 1);
    for (int k = 0; k < n; ++k) {
        perf_json_num(w, keys[k], v[k]);
    }
    nsp_json_end(w);
}

/* A row's "ucx" counters and "copies_bytes" (null when it gives none). */
static void json_ucx_copies(nsp_json_writer_t *w, const a2a_result_t *r)
{
    static const char *const ukeys[] = {"sends",    "eager",         "rndv",
                                        "bytes",    "progress",      "progress_idle",
                                        "copies",   "copy_bytes"};
    static const char *const ckeys[] = {"level0", "self", "pack", "wire", "unpack", "total"};
    const double u[] = {r->ucx.sends,  r->ucx.eager,    r->ucx.rndv,
                        r->ucx.bytes,  r->ucx.progress, r->ucx.idle_progress,
                        r->ucx.copies, r->ucx.copy_bytes};
    const double k[] = {r->copies.level0, r->copies.self,   r->copies.pack,
                        r->copies.wire,   r->copies.unpack, copies_total(&r->copies)};

    json_numbers(w, "ucx", ukeys, u, 8);
    if (r->has_copies) {
        json_numbers(w, "copies_bytes", ckeys, k, 6);
    } else {
        nsp_json_null(w, "copies_bytes");
    }
}

static void json_row(a2a_output_t *o, const a2a_result_t *r)
{
    nsp_json_writer_t *w = &o->j.w;

    nsp_json_begin_object(w, NULL, 1);
    nsp_json_string(w, "method", r->method);
    nsp_json_int(w, "size", (int64_t)r->bytes);
    nsp_json_int(w, "count", (int64_t)(r->bytes / o->c->opts.elem));
    nsp_json_string(w, "type", type_name(o->c->opts.elem));
    perf_json_num(w, "time_us", r->time_us);
    perf_json_num(w, "time_us_min", r->time_min_us);
    perf_json_num(w, "time_us_max", r->time_max_us);
    nsp_json_int(w, "reps", r->reps);
    nsp_json_int(w, "calls", r->calls);
    perf_json_num(w, "algbw", r->algbw);
    perf_json_num(w, "busbw", r->busbw);
    perf_json_num(w, "wrong", r->wrong < 0 ? NAN : r->wrong); /* null: not checked */
    perf_json_num(w, "cpu_us", r->cpu_us);
    json_numbers(w, "phases_us", r->phase, r->phase_us, r->nphases);
    json_ucx_copies(w, r);
    nsp_json_end(w);
}

/* ---- the header ------------------------------------------------------------ */

#define DEF_TIME "median over the interleaved repetitions (--reps) of the slowest rank's mean " \
                 "time per call"
#define DEF_ALGBW "size / time (size: bytes per rank of the sequence-sharded buffer)"
#define DEF_BUSBW "B_off / time; B_off = bytes a rank sends to other ranks per call, mean over " \
                  "ranks (uniform all-to-all of size S: S (N-1)/N, so busbw = algbw (N-1)/N as " \
                  "in nccl-tests)"
#define DEF_CPU "median over the repetitions of the mean over ranks of the process CPU time " \
                "per call"
#define DEF_WRONG "elements that differ from an independently computed expectation after " \
                  "the timed calls, summed over ranks (null: --check 0)"

static void json_config(a2a_output_t *o)
{
    const perf_ctx_t  *c = o->c;
    nsp_json_writer_t *w = &o->j.w;

    nsp_json_string(w, "format", "nspcomm-a2a-perf-v2");
    nsp_json_begin_object(w, "config", 1);
    nsp_json_int(w, "ranks", c->nranks);
    nsp_json_string(w, "launcher", c->mpi ? "mpirun" : "fork");
    nsp_json_string(w, "mpi_pml", c->mpi_pml);
    nsp_json_int(w, "heads", c->opts.heads);
    nsp_json_int(w, "head_dim", c->opts.head_dim);
    nsp_json_string(w, "type", type_name(c->opts.elem));
    nsp_json_int(w, "iters", c->opts.iters);
    nsp_json_int(w, "reps", c->opts.reps);
    nsp_json_int(w, "warmup", c->opts.warmup);
    nsp_json_bool(w, "check", c->opts.check);
    nsp_json_string(w, "workload", c->opts.workload);
    nsp_json_string(w, "model", c->opts.model);
    nsp_json_int(w, "tokens_per_rank", c->opts.tokens_per_rank);
    nsp_json_int(w, "seed", (int64_t)c->opts.seed);
    nsp_json_end(w);
    nsp_json_begin_object(w, "definitions", 0);
    nsp_json_string(w, "time_us", DEF_TIME);
    nsp_json_string(w, "algbw", DEF_ALGBW " (GB/s)");
    nsp_json_string(w, "busbw", DEF_BUSBW " (GB/s)");
    nsp_json_string(w, "cpu_us", DEF_CPU);
    nsp_json_string(w, "wrong", DEF_WRONG);
    nsp_json_end(w);
}

/* The plan's round 0 by degree, on stdout and under "plan". */
static void describe_plan(a2a_output_t *o, const nsp_plan_t *plan)
{
    int64_t            per_degree[64] = {0};
    int                nseq_degree[64] = {0};
    nsp_json_writer_t *w = &o->j.w;

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
           "job), %d seqs, %d round(s); round %d measured\n", o->c->opts.model, o->c->nranks,
           plan->nseqs, plan->nrounds, o->c->chosen_round);
    nsp_json_begin_object(w, "plan", 0);
    nsp_json_string(w, "planner", plan->planner);
    nsp_json_int(w, "seqs", plan->nseqs);
    nsp_json_int(w, "rounds", plan->nrounds);
    nsp_json_int(w, "round", o->c->chosen_round);
    nsp_json_begin_array(w, "levels", 1);
    for (int k = 0; k < 64; ++k) {
        if (nseq_degree[k] == 0) {
            continue;
        }
        printf("#   degree %3d: %4d seqs, %9lld tokens (real batch)\n", 1 << k, nseq_degree[k],
               (long long)per_degree[k]);
        nsp_json_begin_object(w, NULL, 1);
        nsp_json_int(w, "degree", 1 << k);
        nsp_json_int(w, "seqs", nseq_degree[k]);
        nsp_json_int(w, "tokens", per_degree[k]);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_end(w);
}

/* Selected methods that cannot run here: "# skipped" and "skipped". */
static void describe_skipped(a2a_output_t *o)
{
    nsp_json_writer_t *w = &o->j.w;

    nsp_json_begin_array(w, "skipped", 0);
    for (int k = 0; k < a2a_nmethods; ++k) {
        const a2a_method_t *m = a2a_methods[k];
        const char         *why = m->unavailable != NULL ? m->unavailable(o->c) : NULL;
        if (!a2a_method_selected(o->c, k) || why == NULL) {
            continue;
        }
        printf("# skipped: %s (%s)\n", m->name, why);
        nsp_json_begin_object(w, NULL, 1);
        nsp_json_string(w, "method", m->name);
        nsp_json_string(w, "reason", why);
        nsp_json_end(w);
    }
    nsp_json_end(w);
}

a2a_output_t *a2a_output_begin(const perf_ctx_t *c, const nsp_plan_t *real)
{
    a2a_output_t *o = a2a_xcalloc(sizeof(*o));

    o->c = c;
    if (c->opts.json != NULL && perf_json_open(&o->j, c->opts.json) != NSP_OK) {
        fprintf(stderr, A2A_PROG ": %s\n", nsp_last_error()); /* said, and skipped */
    }
    if (o->j.f == NULL && perf_json_open(&o->j, "/dev/null") != NSP_OK) { /* the same calls, */
        a2a_die(c, "/dev/null");                                          /* to nowhere */
    }
    printf("# nsp_a2a_perf: %d ranks (%s), H=%d heads x D=%d, %s; iters %d in %d interleaved "
           "reps, warmup %d, check %d\n", c->nranks, c->mpi ? "mpirun" : "forked locally",
           c->opts.heads, c->opts.head_dim, type_name(c->opts.elem), c->opts.iters,
           c->opts.reps, c->opts.warmup, c->opts.check);
    printf("# time: " DEF_TIME "\n# algbw = " DEF_ALGBW "\n# busbw = " DEF_BUSBW "\n# cpu: "
           DEF_CPU "\n# #wrong: " DEF_WRONG "\n");
    json_config(o);
    describe_plan(o, real);
    describe_skipped(o);
    nsp_json_begin_array(&o->j.w, "results", 0);
    printf("#\n");
    perf_table_header(stdout, table_cols, NCOLS);
    return o;
}

static void bus_add(a2a_output_t *o, const a2a_result_t *r)
{
    int k;

    for (k = 0; k < o->nbus && strcmp(o->bus[k].method, r->method) != 0; ++k) {
    }
    if (k == o->nbus) {
        if (o->nbus == A2A_MAX_ROWS) {
            return;
        }
        snprintf(o->bus[o->nbus++].method, A2A_NAME_LEN, "%s", r->method);
    }
    o->bus[k].sum += isfinite(r->busbw) ? r->busbw : 0;
    o->bus[k].n++;
}

void a2a_output_size(a2a_output_t *o, const a2a_size_out_t *z)
{
    for (int k = 0; k < z->n; ++k) {
        const a2a_result_t *r = &z->res[k];
        print_row(o->c, r);
        json_row(o, r);
        bus_add(o, r);
        if (r->wrong >= 0) {
            o->wrong_total += r->wrong;
            o->checked_any = 1;
        }
    }
    print_phases(z);
    print_ucx(z);
    print_copies(z);
    print_ratios(o, z);
    fflush(stdout);
}

/* ---- the footer ------------------------------------------------------------ */

static void json_ratios(a2a_output_t *o)
{
    nsp_json_writer_t *w = &o->j.w;

    nsp_json_begin_array(w, "ratios", 0);
    for (int k = 0; k < o->nvals; ++k) {
        const ratio_def_t *d = &ratio_defs[o->vals[k].def];
        char               name[2 * A2A_NAME_LEN + 2];
        snprintf(name, sizeof(name), "%s/%s", d->num, d->den);
        nsp_json_begin_object(w, NULL, 1);
        nsp_json_int(w, "size", (int64_t)o->vals[k].size);
        nsp_json_string(w, "name", name);
        nsp_json_string(w, "of", ratio_of_name[d->of]);
        perf_json_num(w, "value", o->vals[k].value);
        nsp_json_end(w);
    }
    nsp_json_end(w);
}

static void summary(a2a_output_t *o)
{
    nsp_json_writer_t *w = &o->j.w;

    printf("# Out of bounds values : %.0f %s\n", o->wrong_total,
           !o->checked_any ? "(not checked)" : o->wrong_total == 0 ? "OK" : "WRONG");
    printf("# Avg bus bandwidth    :");
    nsp_json_begin_object(w, "summary", 0);
    perf_json_num(w, "wrong", o->checked_any ? o->wrong_total : NAN);
    nsp_json_begin_object(w, "avg_busbw", 1);
    for (int k = 0; k < o->nbus; ++k) {
        printf(" %s %.3f", o->bus[k].method, o->bus[k].sum / o->bus[k].n);
        perf_json_num(w, o->bus[k].method, o->bus[k].sum / o->bus[k].n);
    }
    nsp_json_end(w);
    printf(" (GB/s)\n");
    nsp_json_begin_object(w, "ratios", 0);
    for (int d = 0; d < NRATIOS; ++d) {
        const ratio_sum_t *s = &o->rsum[d];
        char               name[2 * A2A_NAME_LEN + 2];
        if (s->n == 0) {
            continue; /* a row did not run: absent */
        }
        snprintf(name, sizeof(name), "%s/%s", ratio_defs[d].num, ratio_defs[d].den);
        printf("# %-22s %s: mean %.3fx, worst %.3fx (at %zu B)\n", name,
               ratio_of_name[ratio_defs[d].of], s->sum / s->n, s->worst, s->worst_size);
        nsp_json_begin_object(w, name, 1);
        nsp_json_string(w, "of", ratio_of_name[ratio_defs[d].of]);
        perf_json_num(w, "mean", s->sum / s->n);
        perf_json_num(w, "worst", s->worst);
        nsp_json_int(w, "worst_size", (int64_t)s->worst_size);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_end(w);
    printf("#\n");
}

double a2a_output_end(a2a_output_t *o)
{
    double wrong;

    nsp_json_end(&o->j.w); /* results */
    json_ratios(o);
    summary(o);
    if (perf_json_close(&o->j) != NSP_OK) {
        fprintf(stderr, A2A_PROG ": %s\n", nsp_last_error());
    }
    wrong = o->wrong_total;
    free(o->vals);
    free(o);
    return wrong;
}
