/*
 * perf/nsp_plan_perf: time planning alone. One batch is drawn from a length
 * file (docs/design.md §5.3) and planned `repeats` times by each chosen planner; the
 * table gives min / median / max wall milliseconds per plan (one core, the
 * calling thread) and the same for the thread's CPU time (what the planner
 * itself used: on a loaded machine wall time also counts waiting for a
 * core), with the plan's predicted step and gap to the lower bound.
 *
 *   perf/nsp_plan_perf [--ranks N] [--seqs M | --tokens T] [--workload FILE]
 *                      [--model NAME] [--cluster NAME] [--max-len S] [--seed K]
 *                      [--repeats R] [--planners static,disjoint,nested,megatron]
 *                      [--time-limit S] [--ring] [--round-fixed S] [--json FILE]
 *
 * Defaults: 64 ranks, 32768 tokens per rank, the shipped Wikipedia lengths,
 * qwen3-30b-a3b on h100, max length 393216, 10 repeats, all three planners.
 * --seqs M takes the first M sequences of a large enough draw instead of a
 * token budget.
 */
#include "common.h"
#include "nspcomm.h"
#include "nsp_opt.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifndef NSP_ABS_TOP_SRCDIR
#define NSP_ABS_TOP_SRCDIR "."
#endif

#define PERF_MAX_PLANNERS 4

typedef struct perf_config {
    int         ranks;
    int64_t     tokens;      /* 0: 32768 per rank */
    int         seqs;        /* > 0: exactly this many sequences */
    char        workload[4096];
    const char *model;
    const char *cluster;
    int64_t     max_len;
    uint64_t    seed;
    int         repeats;
    int         planners[PERF_MAX_PLANNERS];
    int         nplanners;
    double      time_limit_s;
    int         ring;        /* params.enable_ring */
    double      round_fixed; /* cluster.round_fixed_s (default: derived) */
    const char *json;
} perf_config_t;

typedef struct perf_result {
    int      kind;
    double   min_ms, median_ms, max_ms;
    double   cpu_min_ms, cpu_median_ms, cpu_max_ms;   /* thread CPU time */
    double   step_s, lower_bound_s;
    int      rounds;
    unsigned flags;
} perf_result_t;

static const char *const kind_names[PERF_MAX_PLANNERS] = {"static", "disjoint", "nested",
                                                           "megatron"};

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: nsp_plan_perf [--ranks N] [--seqs M | --tokens T] [--workload FILE]\n"
            "                     [--model NAME] [--cluster NAME] [--max-len S] [--seed K]\n"
            "                     [--repeats R] [--planners static,disjoint,nested,megatron]\n"
            "                     [--time-limit S] [--ring] [--round-fixed S] [--json FILE]\n"
            "Times planning alone (min/median/max over repeats) for each planner.\n");
}

#define PLAN_PROG "nsp_plan_perf"

/* --planners: a comma list of kind_names, checked (tools/nsp_opt.h), kept
 * in the order given. */
static int parse_planners(const char *arg, perf_config_t *cfg)
{
    uint32_t    mask;
    const char *p = arg;

    if (nsp_opt_list(PLAN_PROG, "--planners", arg, kind_names, PERF_MAX_PLANNERS, &mask) !=
        NSP_OK) {
        return -1;
    }
    cfg->nplanners = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        for (int k = 0; k < PERF_MAX_PLANNERS; ++k) {
            if (strlen(kind_names[k]) == len && strncmp(p, kind_names[k], len) == 0) {
                cfg->planners[cfg->nplanners++] = k;
            }
        }
        if (p[len] == '\0') {
            return 0;
        }
        p += len + 1;
    }
}

/* One option's value into *cfg (checked: tools/nsp_opt.h); 0 or -1. */
static int parse_value(int c, const char *arg, perf_config_t *cfg)
{
    nsp_status_t st = NSP_OK;

    switch (c) {
    case 'n': st = nsp_opt_int(PLAN_PROG, "--ranks", arg, 1, NSP_MAX_RANKS, &cfg->ranks); break;
    case 'm': st = nsp_opt_int(PLAN_PROG, "--seqs", arg, 1, NSP_MAX_BATCH_SEQS, &cfg->seqs); break;
    case 't': st = nsp_opt_i64(PLAN_PROG, "--tokens", arg, 1, (int64_t)1 << 60, &cfg->tokens); break;
    case 'w': snprintf(cfg->workload, sizeof(cfg->workload), "%s", arg); break;
    case 'M': cfg->model = arg; break;
    case 'C': cfg->cluster = arg; break;
    case 'L': st = nsp_opt_i64(PLAN_PROG, "--max-len", arg, 1, (int64_t)1 << 40, &cfg->max_len); break;
    case 's': st = nsp_opt_u64(PLAN_PROG, "--seed", arg, 0, UINT64_MAX, &cfg->seed); break;
    case 'r': st = nsp_opt_int(PLAN_PROG, "--repeats", arg, 1, 1000000, &cfg->repeats); break;
    case 'p': return parse_planners(arg, cfg);
    case 'T':
        st = nsp_opt_double(PLAN_PROG, "--time-limit", arg, 0, 86400, NSP_OPT_LO_OPEN,
                            &cfg->time_limit_s);
        break;
    case 'J': cfg->json = arg; st = nsp_opt_out_path(PLAN_PROG, "--json", arg); break;
    case 'R': cfg->ring = 1; break;
    case 'F': /* seconds per round; -1 (NSP_ROUND_FIXED_DERIVED): derived */
        st = nsp_opt_double(PLAN_PROG, "--round-fixed", arg, -1.0, 3600, 0, &cfg->round_fixed);
        break;
    default: usage(stderr); return -1;
    }
    return st == NSP_OK ? 0 : -1;
}

static int parse_args(int argc, char **argv, perf_config_t *cfg)
{
    static const struct option opts[] = {
        {"ranks", required_argument, NULL, 'n'},   {"seqs", required_argument, NULL, 'm'},
        {"tokens", required_argument, NULL, 't'},  {"workload", required_argument, NULL, 'w'},
        {"model", required_argument, NULL, 'M'},   {"cluster", required_argument, NULL, 'C'},
        {"max-len", required_argument, NULL, 'L'}, {"seed", required_argument, NULL, 's'},
        {"repeats", required_argument, NULL, 'r'}, {"planners", required_argument, NULL, 'p'},
        {"time-limit", required_argument, NULL, 'T'}, {"json", required_argument, NULL, 'J'},
        {"ring", no_argument, NULL, 'R'},          {"round-fixed", required_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    const char *data = getenv("NSPCOMM_DATA_DIR");
    int         c;

    memset(cfg, 0, sizeof(*cfg));
    cfg->ranks   = 64;
    cfg->model   = "qwen3-30b-a3b";
    cfg->cluster = "h100";
    cfg->max_len = 393216;
    cfg->seed    = 1;
    cfg->repeats = 10;
    cfg->round_fixed = NSP_ROUND_FIXED_DERIVED;
    snprintf(cfg->workload, sizeof(cfg->workload), "%s/workloads/wikipedia-flexsp.txt",
             (data != NULL && data[0] != '\0') ? data : NSP_ABS_TOP_SRCDIR "/data");
    parse_planners("static,disjoint,nested", cfg);
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (parse_value(c, optarg, cfg) != 0) {
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PLAN_PROG ": unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (cfg->tokens == 0) {
        cfg->tokens = 32768LL * cfg->ranks;
    }
    return 0;
}

/* The batch: a token budget, or the first `seqs` sequences of a draw. */
static nsp_status_t draw_batch(const perf_config_t *cfg, const nsp_workload_t *wl,
                               int64_t **lens, int *nseqs)
{
    int64_t budget = cfg->tokens;

    if (cfg->seqs <= 0) {
        return nsp_workload_sample(wl, cfg->seed, 0, budget, cfg->max_len, lens, nseqs);
    }
    budget = (int64_t)cfg->seqs * 4096;
    for (;;) {
        nsp_status_t st = nsp_workload_sample(wl, cfg->seed, 0, budget, cfg->max_len, lens, nseqs);
        if (st < 0) {
            return st;
        }
        if (*nseqs >= cfg->seqs) {
            *nseqs = cfg->seqs;
            return NSP_OK;
        }
        free(*lens);
        budget *= 2;
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static int time_planner(const perf_config_t *cfg, const nsp_model_t *model,
                        const nsp_cluster_t *cluster, const int64_t *lens, int nseqs, int kind,
                        perf_result_t *res)
{
    double              *ms = malloc(sizeof(double) * 2 * (size_t)cfg->repeats);
    double              *cpu = ms + cfg->repeats;
    nsp_planner_params_t params;

    if (ms == NULL) {
        return -1;
    }
    memset(&params, 0, sizeof(params));
    params.kind = (nsp_planner_kind_t)kind;
    if (cfg->time_limit_s > 0) {
        params.field_mask |= NSP_PLANNER_FIELD_TIME_LIMIT;
        params.time_limit_s = cfg->time_limit_s;
    }
    if (cfg->ring) {
        params.field_mask |= NSP_PLANNER_FIELD_ENABLE_RING;
        params.enable_ring = 1;
    }
    res->kind = kind;
    for (int r = 0; r < cfg->repeats; ++r) {
        nsp_plan_t  *plan = NULL;
        const double t0 = wall_s(), c0 = cpu_s();
        nsp_status_t st = nsp_plan_create(model, cluster, lens, nseqs, &params, &plan);
        cpu[r] = (cpu_s() - c0) * 1e3;
        ms[r] = (wall_s() - t0) * 1e3;
        if (st < 0) {
            fprintf(stderr, "nsp_plan_perf: %s planner failed: %s\n", kind_names[kind],
                    nsp_last_error());
            free(ms);
            return -1;
        }
        res->step_s        = plan->predicted.step_s;
        res->lower_bound_s = plan->predicted.lower_bound_s;
        res->rounds        = plan->nrounds;
        res->flags         = plan->flags;
        nsp_plan_free(plan);
    }
    qsort(ms, (size_t)cfg->repeats, sizeof(double), cmp_double);
    qsort(cpu, (size_t)cfg->repeats, sizeof(double), cmp_double);
    res->min_ms        = ms[0];
    res->max_ms        = ms[cfg->repeats - 1];
    res->median_ms     = (cfg->repeats % 2) ? ms[cfg->repeats / 2] :
                         0.5 * (ms[cfg->repeats / 2 - 1] + ms[cfg->repeats / 2]);
    res->cpu_min_ms    = cpu[0];
    res->cpu_max_ms    = cpu[cfg->repeats - 1];
    res->cpu_median_ms = (cfg->repeats % 2) ? cpu[cfg->repeats / 2] :
                         0.5 * (cpu[cfg->repeats / 2 - 1] + cpu[cfg->repeats / 2]);
    free(ms);
    return 0;
}

/* The table's columns (perf/common.h). */
static const perf_col_t table_cols[] = {
    {"planner", "", 9, 0, 1},     {"ranks", "", 7, -1, 0},     {"seqs", "", 8, -1, 0},
    {"tokens", "", 10, -1, 0},    {"min_ms", "", 10, 3, 0},    {"median_ms", "", 10, 3, 0},
    {"max_ms", "", 10, 3, 0},     {"cpu_min", "", 8, 3, 0},    {"cpu_med", "", 8, 3, 0},
    {"cpu_max", "", 8, 3, 0},     {"step_s", "", 10, 4, 0},    {"step/LB", "", 8, 3, 0},
    {"rounds", "", 7, -1, 0},     {"flags", "", 0, 0, 1}};
#define TABLE_NCOLS ((int)(sizeof(table_cols) / sizeof(table_cols[0])))

static void print_table(const perf_config_t *cfg, int nseqs, int64_t tokens,
                        const perf_result_t *res, int nres)
{
    printf("# nsp_plan_perf: %s on %d x %s, %lld tokens in %d sequences (%s), max length "
           "%lld, seed %llu, %d repeats%s\n#\n", cfg->model, cfg->ranks, cfg->cluster,
           (long long)tokens, nseqs, cfg->workload, (long long)cfg->max_len,
           (unsigned long long)cfg->seed, cfg->repeats, cfg->ring ? ", rings allowed" : "");
    perf_table_header(stdout, table_cols, TABLE_NCOLS);
    for (int k = 0; k < nres; ++k) {
        const perf_result_t *r = &res[k];
        char                 flags[64];
        snprintf(flags, sizeof(flags), "%s%s",
                 (r->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK) ? "greedy-fallback " : "",
                 (r->flags & NSP_PLAN_FLAG_SOLVER_TIMEOUT) ? "solver-timeout" : "");
        perf_cell_t cells[TABLE_NCOLS] = {
            PERF_TEXT(kind_names[r->kind]), PERF_NUM(cfg->ranks), PERF_NUM(nseqs),
            PERF_NUM(tokens), PERF_NUM(r->min_ms), PERF_NUM(r->median_ms), PERF_NUM(r->max_ms),
            PERF_NUM(r->cpu_min_ms), PERF_NUM(r->cpu_median_ms), PERF_NUM(r->cpu_max_ms),
            PERF_NUM(r->step_s), PERF_NUM(r->lower_bound_s > 0 ? r->step_s / r->lower_bound_s
                                                               : 0.0),
            PERF_NUM(r->rounds), PERF_TEXT(flags)};
        perf_table_row(stdout, table_cols, TABLE_NCOLS, cells);
    }
    printf("# planning time: wall clock (min/median/max_ms) and thread CPU time (cpu_*, ms) of "
           "nsp_plan_create on one thread, over %d repeats\n", cfg->repeats);
}

/* The JSON (perf/common.h: numbers that always parse, strings escaped). */
static int write_json(const perf_config_t *cfg, int nseqs, int64_t tokens,
                      const perf_result_t *res, int nres)
{
    perf_json_t        j;
    nsp_json_writer_t *w = &j.w;

    if (perf_json_open(&j, cfg->json) != NSP_OK) {
        fprintf(stderr, "nsp_plan_perf: %s\n", nsp_last_error());
        return -1;
    }
    nsp_json_string(w, "format", "nspcomm-plan-perf-v1");
    nsp_json_begin_object(w, "config", 1);
    nsp_json_string(w, "model", cfg->model);
    nsp_json_string(w, "cluster", cfg->cluster);
    nsp_json_int(w, "ranks", cfg->ranks);
    nsp_json_int(w, "seqs", nseqs);
    nsp_json_int(w, "tokens", tokens);
    nsp_json_int(w, "max_len", cfg->max_len);
    nsp_json_int(w, "seed", (int64_t)cfg->seed);
    nsp_json_int(w, "repeats", cfg->repeats);
    nsp_json_bool(w, "enable_ring", cfg->ring);
    nsp_json_end(w);
    nsp_json_begin_array(w, "results", 0);
    for (int k = 0; k < nres; ++k) {
        const perf_result_t *r = &res[k];
        nsp_json_begin_object(w, NULL, 1);
        nsp_json_string(w, "planner", kind_names[r->kind]);
        perf_json_num(w, "min_ms", r->min_ms);
        perf_json_num(w, "median_ms", r->median_ms);
        perf_json_num(w, "max_ms", r->max_ms);
        perf_json_num(w, "cpu_min_ms", r->cpu_min_ms);
        perf_json_num(w, "cpu_median_ms", r->cpu_median_ms);
        perf_json_num(w, "cpu_max_ms", r->cpu_max_ms);
        perf_json_num(w, "step_s", r->step_s);
        perf_json_num(w, "lower_bound_s", r->lower_bound_s);
        nsp_json_int(w, "rounds", r->rounds);
        nsp_json_int(w, "flags", r->flags);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    if (perf_json_close(&j) != NSP_OK) {
        fprintf(stderr, "nsp_plan_perf: %s\n", nsp_last_error());
        return -1;
    }
    return 0;
}

/* The up-front estimate of the request, before the batch is drawn (tools/nsp_opt.h). */
static nsp_status_t check_request(const perf_config_t *cfg, const nsp_workload_t *wl)
{
    char what[128];

    if (cfg->seqs > 0) {
        snprintf(what, sizeof(what), "--seqs %d on %d ranks", cfg->seqs, cfg->ranks);
    } else {
        snprintf(what, sizeof(what), "--tokens %lld on %d ranks", (long long)cfg->tokens,
                 cfg->ranks);
    }
    return nsp_opt_batch_check(PLAN_PROG, what, wl, cfg->seed, cfg->max_len,
                               (double)cfg->tokens, cfg->seqs, cfg->ranks, cfg->nplanners);
}

int main(int argc, char **argv)
{
    perf_config_t   cfg;
    nsp_model_t     model;
    nsp_cluster_t   cluster;
    nsp_workload_t *wl = NULL;
    int64_t        *lens = NULL, tokens = 0;
    int             nseqs = 0, rc = 1;
    perf_result_t   res[PERF_MAX_PLANNERS];

    if (parse_args(argc, argv, &cfg) < 0) {
        return 2;
    }
    if (nsp_model_preset(cfg.model, &model) < 0 ||
        nsp_cluster_preset(cfg.cluster, cfg.ranks, &cluster) < 0 ||
        nsp_workload_load(cfg.workload, &wl) < 0) {
        fprintf(stderr, "nsp_plan_perf: %s\n", nsp_last_error());
        goto out;
    }
    if (check_request(&cfg, wl) != NSP_OK) {
        rc = 2; /* refused before anything was drawn; already said why */
        goto out;
    }
    if (draw_batch(&cfg, wl, &lens, &nseqs) < 0) {
        fprintf(stderr, "nsp_plan_perf: %s\n", nsp_last_error());
        goto out;
    }
    cluster.round_fixed_s = cfg.round_fixed;
    for (int i = 0; i < nseqs; ++i) {
        tokens += lens[i];
    }
    for (int k = 0; k < cfg.nplanners; ++k) {
        if (time_planner(&cfg, &model, &cluster, lens, nseqs, cfg.planners[k], &res[k]) < 0) {
            goto out;
        }
    }
    print_table(&cfg, nseqs, tokens, res, cfg.nplanners);
    if (cfg.json != NULL && write_json(&cfg, nseqs, tokens, res, cfg.nplanners) < 0) {
        goto out;
    }
    rc = 0;
out:
    free(lens);
    nsp_workload_free(wl);
    return rc;
}
