/*
 * perf/nsp_sim: the cluster simulator. Draws batches from a real length file
 * (docs/design.md §5.3), plans each with every chosen planner, checks every plan
 * (nsp_plan_validate) and prints one row per planner: mean step time,
 * throughput, speedup over static, gap to the lower bound, planning time.
 * --json writes every plan (nspcomm-sim-v1), --svg draws one batch.
 *
 *   perf/nsp_sim --workload FILE --model NAME --cluster NAME --ranks N \
 *                --tokens-per-rank T --max-len S --batches B --seed K \
 *                --planners static,disjoint,nested,megatron [--ring] [--round-fixed S] [--json FILE] [--svg FILE]
 *
 * --ring plans with params.enable_ring (Ulysses x ring groups above the head
 * count, docs/reference/cost-model.md) for every planner; the lower bound is then the
 * bound with rings.
 *
 * With no arguments it runs the default of the README: the Wikipedia lengths
 * shipped in data/workloads, qwen3-30b-a3b on 64 H100, 32768 tokens per rank,
 * 10 batches, all three planners.
 */
#include "common.h"
#include "common/json.h"
#include "common/log.h"
#include "planner/plan_internal.h"
#include "planner/planner_io.h"
#include "nsp_opt.h"
#include "sim_svg.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef NSP_ABS_TOP_SRCDIR
#define NSP_ABS_TOP_SRCDIR "."
#endif

#define SIM_MAX_PLANNERS 4
#define SIM_DEFAULT_WORKLOAD "wikipedia-flexsp.txt"

static const char *const planner_names[SIM_MAX_PLANNERS] = {"static", "disjoint", "nested",
                                                             "megatron"};

typedef struct sim_config {
    char        workload[4096];   /* resolved path */
    const char *workload_arg;     /* as given */
    const char *model_name;
    const char *model_file;
    const char *cluster_name;
    const char *cluster_file;
    int         ranks;            /* 0: from the cluster file (or 64 for a preset) */
    int64_t     tokens_per_rank;
    int64_t     max_len;
    int         batches;
    uint64_t    seed;
    int         planners[SIM_MAX_PLANNERS];   /* nsp_planner_kind_t, in table order */
    int         nplanners;
    double      time_limit_s;     /* disjoint MILP limit per round; <= 0: default */
    const char *json_path;
    const char *svg_path;
    int         svg_batch;
    int         ring;             /* params.enable_ring for every planner */
    int         round_set;        /* --round-fixed given: cluster.round_fixed_s = round_fixed */
    double      round_fixed;
    int         quiet;
} sim_config_t;

/* Per planner, over the batches. */
typedef struct sim_row {
    double   step_sum, gap_sum, rounds_sum, plan_ms_sum, plan_ms_max;
    int      greedy, timeout, n;
} sim_row_t;

/* The shipped data directory: $NSPCOMM_DATA_DIR, else the source tree's data/. */
static const char *data_dir(void)
{
    const char *env = getenv("NSPCOMM_DATA_DIR");

    return (env != NULL && env[0] != '\0') ? env : NSP_ABS_TOP_SRCDIR "/data";
}

static int file_exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A workload given as a path, or as a shipped name ("prolong-distca[.txt]"). */
static void resolve_workload(const char *arg, char *out, size_t len)
{
    char real[PATH_MAX];

    snprintf(out, len, "%s", arg);
    if (!file_exists(out) && strchr(arg, '/') == NULL) {
        snprintf(out, len, "%s/workloads/%s", data_dir(), arg);
        if (!file_exists(out)) {
            snprintf(out, len, "%s/workloads/%s.txt", data_dir(), arg);
        }
        if (!file_exists(out)) {
            snprintf(out, len, "%s", arg);   /* let the loader report the name given */
        }
    }
    /* A clean absolute path for the table and the JSON. */
    if (file_exists(out) && realpath(out, real) != NULL) {
        snprintf(out, len, "%s", real);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: nsp_sim [options]\n"
        "Compare the routing planners on batches drawn from a real length file.\n\n"
        "  --workload FILE|NAME   lengths, one per line; a bare NAME is looked up in\n"
        "                         $NSPCOMM_DATA_DIR/workloads (default %s/workloads/%s)\n"
        "  --model NAME           model preset: qwen3-30b-a3b (default), qwen3-235b-a22b,\n"
        "                         llama3-8b\n"
        "  --model-file FILE      model description (JSON, docs/reference/files.md)\n"
        "  --cluster NAME         cluster preset: h100 (default), h800\n"
        "  --cluster-file FILE    cluster description (JSON); --ranks overrides its ranks\n"
        "  --ranks N              ranks (default 64)\n"
        "  --tokens-per-rank T    token budget per rank of one batch (default 32768)\n"
        "  --max-len S            longest sequence; longer documents are cut (default 393216)\n"
        "  --batches B            batches (default 10)\n"
        "  --seed K               sampler seed (default 1)\n"
        "  --planners LIST        comma-separated: static,disjoint,nested,megatron (default all)\n"
        "  --round-fixed S        seconds each round adds to a step (cluster round_fixed_s;\n"
        "                         default: derived, docs/reference/cost-model.md; -1 = derived)\n"
        "  --time-limit S         disjoint planner: MILP time limit per round (default 1 s)\n"
        "  --ring                 allow Ulysses x ring groups above the head count\n"
        "                         (params.enable_ring; docs/reference/cost-model.md)\n"
        "  --json FILE            write every plan (nspcomm-sim-v1)\n"
        "  --svg FILE             draw one batch: per-rank time stacked by level\n"
        "  --svg-batch I          the batch to draw (default 0)\n"
        "  --quiet                no progress on stderr\n"
        "  --help                 this text\n", data_dir(), SIM_DEFAULT_WORKLOAD);
}

#define SIM_PROG "nsp_sim"
/* --tokens-per-rank and --max-len: at most 2^40 tokens, so tokens x ranks
 * (at most NSP_MAX_RANKS = 2^20) stays far inside int64_t. */
#define SIM_MAX_TOKENS_PER_RANK ((int64_t)1 << 40)

enum { O_WORKLOAD = 256, O_MODEL, O_MODEL_FILE, O_CLUSTER, O_CLUSTER_FILE, O_RANKS, O_TOKENS,
       O_MAX_LEN, O_BATCHES, O_SEED, O_PLANNERS, O_TIME_LIMIT, O_JSON, O_SVG, O_SVG_BATCH, O_RING,
       O_QUIET, O_HELP, O_ROUND };

/* --planners: a comma list of planner_names (checked: tools/nsp_opt.h). */
static int parse_planners(const char *text, sim_config_t *cfg)
{
    uint32_t mask;

    if (nsp_opt_list(SIM_PROG, "--planners", text, planner_names, SIM_MAX_PLANNERS, &mask) !=
        NSP_OK) {
        return -1;
    }
    cfg->nplanners = 0;
    for (int k = 0; k < SIM_MAX_PLANNERS; ++k) {
        if (mask & (1u << k)) {
            cfg->planners[cfg->nplanners++] = k;
        }
    }
    return 0;
}

/* One option with a value into *cfg (checked: tools/nsp_opt.h); 0 or -1. */
static int parse_value(int opt, const char *arg, sim_config_t *cfg)
{
    nsp_status_t st = NSP_OK;

    switch (opt) {
    case O_WORKLOAD:
        cfg->workload_arg = arg;
        resolve_workload(arg, cfg->workload, sizeof(cfg->workload));
        break;
    case O_MODEL: cfg->model_name = arg; cfg->model_file = NULL; break;
    case O_MODEL_FILE:
        cfg->model_file = arg;
        st = nsp_opt_in_path(SIM_PROG, "--model-file", arg);
        break;
    case O_CLUSTER: cfg->cluster_name = arg; cfg->cluster_file = NULL; break;
    case O_CLUSTER_FILE:
        cfg->cluster_file = arg;
        st = nsp_opt_in_path(SIM_PROG, "--cluster-file", arg);
        break;
    case O_RANKS: st = nsp_opt_int(SIM_PROG, "--ranks", arg, 1, NSP_MAX_RANKS, &cfg->ranks); break;
    case O_TOKENS:
        st = nsp_opt_i64(SIM_PROG, "--tokens-per-rank", arg, 1, SIM_MAX_TOKENS_PER_RANK,
                         &cfg->tokens_per_rank);
        break;
    case O_MAX_LEN:
        st = nsp_opt_i64(SIM_PROG, "--max-len", arg, 1, SIM_MAX_TOKENS_PER_RANK, &cfg->max_len);
        break;
    case O_BATCHES: st = nsp_opt_int(SIM_PROG, "--batches", arg, 1, 1000000, &cfg->batches); break;
    case O_SEED: st = nsp_opt_u64(SIM_PROG, "--seed", arg, 0, UINT64_MAX, &cfg->seed); break;
    case O_PLANNERS: return parse_planners(arg, cfg);
    case O_TIME_LIMIT:
        st = nsp_opt_double(SIM_PROG, "--time-limit", arg, 0, 86400, NSP_OPT_LO_OPEN,
                            &cfg->time_limit_s);
        break;
    case O_ROUND: /* seconds per round; -1 (NSP_ROUND_FIXED_DERIVED): derived */
        st = nsp_opt_double(SIM_PROG, "--round-fixed", arg, -1.0, 3600, 0, &cfg->round_fixed);
        cfg->round_set = st == NSP_OK;
        break;
    case O_JSON: cfg->json_path = arg; st = nsp_opt_out_path(SIM_PROG, "--json", arg); break;
    case O_SVG: cfg->svg_path = arg; st = nsp_opt_out_path(SIM_PROG, "--svg", arg); break;
    case O_SVG_BATCH:
        st = nsp_opt_int(SIM_PROG, "--svg-batch", arg, 0, 1000000 - 1, &cfg->svg_batch);
        break;
    default: usage(stderr); return -1;
    }
    return st == NSP_OK ? 0 : -1;
}

/* Returns 0 to run, 1 to exit successfully (--help), -1 on a usage error. */
static int parse_args(int argc, char **argv, sim_config_t *cfg)
{
    static const struct option options[] = {
        {"workload", required_argument, NULL, O_WORKLOAD},
        {"model", required_argument, NULL, O_MODEL},
        {"model-file", required_argument, NULL, O_MODEL_FILE},
        {"cluster", required_argument, NULL, O_CLUSTER},
        {"cluster-file", required_argument, NULL, O_CLUSTER_FILE},
        {"ranks", required_argument, NULL, O_RANKS},
        {"tokens-per-rank", required_argument, NULL, O_TOKENS},
        {"max-len", required_argument, NULL, O_MAX_LEN},
        {"batches", required_argument, NULL, O_BATCHES},
        {"seed", required_argument, NULL, O_SEED},
        {"planners", required_argument, NULL, O_PLANNERS},
        {"time-limit", required_argument, NULL, O_TIME_LIMIT},
        {"json", required_argument, NULL, O_JSON},
        {"svg", required_argument, NULL, O_SVG},
        {"svg-batch", required_argument, NULL, O_SVG_BATCH},
        {"ring", no_argument, NULL, O_RING},
        {"round-fixed", required_argument, NULL, O_ROUND},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int opt;

    memset(cfg, 0, sizeof(*cfg));
    cfg->workload_arg = SIM_DEFAULT_WORKLOAD;
    resolve_workload(SIM_DEFAULT_WORKLOAD, cfg->workload, sizeof(cfg->workload));
    cfg->model_name = "qwen3-30b-a3b";
    cfg->cluster_name = "h100";
    cfg->tokens_per_rank = 32768;
    cfg->max_len = 393216;
    cfg->batches = 10;
    cfg->seed = 1;
    parse_planners("static,disjoint,nested,megatron", cfg);
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (opt) {
        case O_RING: cfg->ring = 1; break;
        case O_QUIET: cfg->quiet = 1; break;
        case 'h':
        case O_HELP: usage(stdout); return 1;
        default:
            if (parse_value(opt, optarg, cfg) != 0) {
                return -1;
            }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "nsp_sim: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (cfg->svg_path != NULL && cfg->svg_batch >= cfg->batches) {
        fprintf(stderr, "nsp_sim: --svg-batch %d: there are only %d batches\n", cfg->svg_batch,
                cfg->batches);
        return -1;
    }
    return 0;
}

static nsp_status_t load_inputs(const sim_config_t *cfg, nsp_model_t *model,
                                nsp_cluster_t *cluster, nsp_workload_t **wl)
{
    if (cfg->model_file != NULL) {
        NSP_CHECK(nsp_model_load(cfg->model_file, model));
    } else {
        NSP_CHECK(nsp_model_preset(cfg->model_name, model));
    }
    if (cfg->cluster_file != NULL) {
        NSP_CHECK(nsp_cluster_load(cfg->cluster_file, cluster));
        if (cfg->ranks > 0) {
            cluster->ranks = cfg->ranks;
        }
    } else {
        NSP_CHECK(nsp_cluster_preset(cfg->cluster_name, cfg->ranks > 0 ? cfg->ranks : 64,
                                     cluster));
    }
    if (cfg->round_set) {
        cluster->round_fixed_s = cfg->round_fixed;
    }
    if (!file_exists(cfg->workload) && strchr(cfg->workload_arg, '/') == NULL) {
        return nsp_error(NSP_ERR_IO, "workload '%s' not found: looked for ./%s and %s/workloads/"
                         "%s[.txt]; give a path with --workload or set NSPCOMM_DATA_DIR to "
                         "nspcomm's data directory", cfg->workload_arg, cfg->workload_arg,
                         data_dir(), cfg->workload_arg);
    }
    return nsp_workload_load(cfg->workload, wl);
}

/* The up-front estimate of the run, before any batch is drawn (tools/nsp_opt.h). */
static nsp_status_t check_request(const sim_config_t *cfg, const nsp_workload_t *wl, int ranks)
{
    char what[128];

    snprintf(what, sizeof(what), "--tokens-per-rank %lld x %d ranks",
             (long long)cfg->tokens_per_rank, ranks);
    return nsp_opt_batch_check(SIM_PROG, what, wl, cfg->seed, cfg->max_len,
                               (double)cfg->tokens_per_rank * ranks, 0, ranks, cfg->nplanners);
}

static void print_header(const sim_config_t *cfg, const nsp_model_t *m, const nsp_cluster_t *c,
                         size_t nlens)
{
    printf("# nspcomm cluster simulator (cost model v1, docs/design.md §5.1%s)\n",
           cfg->ring ? ", with Ulysses x ring groups: docs/reference/cost-model.md" : "");
    printf("# workload : %s (%zu lengths)\n", cfg->workload, nlens);
    printf("# model    : %s: L=%d h=%d heads %d/%d x %d, ffn %.0f, experts %d top-%d, "
           "%.3g params\n", m->name, m->layers, m->hidden, m->q_heads, m->kv_heads, m->head_dim,
           m->ffn, m->experts, m->topk, m->params);
    printf("# cluster  : %s: %d ranks, %d per node, %.0f GiB, gemm %.3g attn %.3g FLOP/s, "
           "a2a %.3g/%.3g B/s, lat %.3g/%.3g s, overlap %.2f, round %s\n", c->name, c->ranks,
           c->ranks_per_node, c->mem_bytes / 1073741824.0, c->gemm_flops, c->attn_flops,
           c->bw_intra, c->bw_inter, c->lat_intra, c->lat_inter, c->overlap,
           c->round_fixed_s < 0 ? "derived" : "fixed");
    printf("# batches  : %d x %lld tokens (%lld per rank), max length %lld, seed %llu\n",
           cfg->batches, (long long)(cfg->tokens_per_rank * c->ranks),
           (long long)cfg->tokens_per_rank, (long long)cfg->max_len,
           (unsigned long long)cfg->seed);
    printf("#\n");
    fflush(stdout);
}

/* The table's columns (perf/common.h). */
static const perf_col_t table_cols[] = {
    {"planner", "", 9, 0, 0},      {"step_s", "(mean)", 12, 4, 0}, {"tokens/s", "", 13, 0, 0},
    {"speedup", "(static)", 9, 0, 0}, {"gap(LB)", "(mean)", 9, 4, 0}, {"rounds", "(mean)", 7, 2, 0},
    {"plan_ms", "(mean)", 12, 3, 0}, {"plan_ms", "(max)", 12, 3, 0}, {" notes", "", 0, 0, 1}};
#define TABLE_NCOLS ((int)(sizeof(table_cols) / sizeof(table_cols[0])))

static void print_table(const sim_config_t *cfg, const sim_row_t *rows, double tokens,
                        double lb_sum)
{
    const sim_row_t *st = NULL;

    for (int i = 0; i < cfg->nplanners; ++i) {
        if (cfg->planners[i] == NSP_PLANNER_STATIC) {
            st = &rows[i];
        }
    }
    perf_table_header(stdout, table_cols, TABLE_NCOLS);
    for (int i = 0; i < cfg->nplanners; ++i) {
        const sim_row_t *r = &rows[i];
        char             speedup[32] = "-", notes[96] = " "; /* two spaces before notes */

        if (st != NULL) {
            snprintf(speedup, sizeof(speedup), "%.3f", st->step_sum / r->step_sum);
        }
        if (r->greedy > 0) {
            snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
                     "greedy fallback (no MILP solver) in %d/%d ", r->greedy, r->n);
        }
        if (r->timeout > 0) {
            snprintf(notes + strlen(notes), sizeof(notes) - strlen(notes),
                     "solver time limit hit in %d/%d", r->timeout, r->n);
        }
        perf_cell_t cells[TABLE_NCOLS] = {
            PERF_TEXT(planner_names[cfg->planners[i]]), PERF_NUM(r->step_sum / r->n),
            PERF_NUM(tokens / r->step_sum), PERF_TEXT(speedup), PERF_NUM(r->gap_sum / r->n),
            PERF_NUM(r->rounds_sum / r->n), PERF_NUM(r->plan_ms_sum / r->n),
            PERF_NUM(r->plan_ms_max), PERF_TEXT(notes)};
        perf_table_row(stdout, table_cols, TABLE_NCOLS, cells);
    }
    printf("#\n# lower bound (docs/design.md §5.2%s): mean %.4f s per step; gap = mean over batches of "
           "step / lower bound\n", cfg->ring ? ", rings allowed" : "", lb_sum / cfg->batches);
    printf("# speedup = mean step of static / mean step of the planner; tokens/s = all "
           "tokens / all step time\n");
    fflush(stdout);
}

static void json_config(nsp_json_writer_t *w, const sim_config_t *cfg, const nsp_model_t *m,
                        const nsp_cluster_t *c)
{
    nsp_json_begin_object(w, "config", 0);
    nsp_json_string(w, "workload", cfg->workload);
    nsp_model_write_json(w, "model", m);
    nsp_cluster_write_json(w, "cluster", c);
    nsp_json_int(w, "ranks", c->ranks);
    nsp_json_int(w, "tokens_per_rank", cfg->tokens_per_rank);
    nsp_json_int(w, "max_len", cfg->max_len);
    nsp_json_int(w, "batches", cfg->batches);
    nsp_json_int(w, "seed", (int64_t)cfg->seed);
    nsp_json_bool(w, "enable_ring", cfg->ring);
    nsp_json_begin_array(w, "planners", 1);
    for (int i = 0; i < cfg->nplanners; ++i) {
        nsp_json_string(w, NULL, planner_names[cfg->planners[i]]);
    }
    nsp_json_end(w);
    nsp_json_end(w);
}

static void json_summary(nsp_json_writer_t *w, const sim_config_t *cfg, const sim_row_t *rows,
                         double tokens, double lb_sum)
{
    double static_sum = 0.0;

    for (int i = 0; i < cfg->nplanners; ++i) {
        if (cfg->planners[i] == NSP_PLANNER_STATIC) {
            static_sum = rows[i].step_sum;
        }
    }
    nsp_json_begin_object(w, "summary", 0);
    perf_json_num(w, "mean_lower_bound_s", lb_sum / cfg->batches);
    nsp_json_begin_object(w, "planners", 0);
    for (int i = 0; i < cfg->nplanners; ++i) {
        const sim_row_t *r = &rows[i];
        nsp_json_begin_object(w, planner_names[cfg->planners[i]], 1);
        perf_json_num(w, "mean_step_s", r->step_sum / r->n);
        perf_json_num(w, "throughput_tokens_s", tokens / r->step_sum);
        if (static_sum > 0) {
            perf_json_num(w, "speedup_vs_static", static_sum / r->step_sum);
        }
        perf_json_num(w, "mean_gap", r->gap_sum / r->n);
        perf_json_num(w, "mean_rounds", r->rounds_sum / r->n);
        perf_json_num(w, "plan_ms_mean", r->plan_ms_sum / r->n);
        perf_json_num(w, "plan_ms_max", r->plan_ms_max);
        nsp_json_int(w, "greedy_fallback_plans", r->greedy);
        nsp_json_int(w, "solver_timeout_plans", r->timeout);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_end(w);
}

/* The planner parameters of the run (time limit, rings) for planner kind. */
static void sim_params(const sim_config_t *cfg, int kind, nsp_planner_params_t *params)
{
    memset(params, 0, sizeof(*params));
    params->kind = (nsp_planner_kind_t)kind;
    if (cfg->time_limit_s > 0) {
        params->field_mask |= NSP_PLANNER_FIELD_TIME_LIMIT;
        params->time_limit_s = cfg->time_limit_s;
    }
    if (cfg->ring) {
        params->field_mask |= NSP_PLANNER_FIELD_ENABLE_RING;
        params->enable_ring = 1;
    }
}

/* Plan one batch with every planner; plans[] are owned by the caller. */
static nsp_status_t plan_batch(const sim_config_t *cfg, const nsp_model_t *m,
                               const nsp_cluster_t *c, const int64_t *lens, int nseqs, int b,
                               nsp_plan_t **plans)
{
    for (int i = 0; i < cfg->nplanners; ++i) {
        nsp_planner_params_t params;
        nsp_status_t         st;

        sim_params(cfg, cfg->planners[i], &params);
        NSP_CHECK(nsp_plan_create(m, c, lens, nseqs, &params, &plans[i]));
        st = nsp_plan_validate(plans[i]);
        if (st != NSP_OK) {
            char why[512];
            /* A copy: the message is rewritten in the same last-error buffer. */
            snprintf(why, sizeof(why), "%s", nsp_last_error());
            return nsp_error_quiet(st, "the %s planner produced an invalid plan for batch %d: "
                                   "%s", planner_names[cfg->planners[i]], b, why);
        }
    }
    return NSP_OK;
}

/* Run the simulation; *refused = 1 when the request itself was refused
 * (inputs out of range, too large: a usage error, already printed). */
static nsp_status_t run(const sim_config_t *cfg, int *refused)
{
    nsp_model_t       model;
    nsp_cluster_t     cluster;
    nsp_workload_t   *wl = NULL;
    sim_row_t         rows[SIM_MAX_PLANNERS];
    nsp_plan_t       *plans[SIM_MAX_PLANNERS] = {NULL};
    nsp_json_writer_t w;
    FILE             *json = NULL;
    double            lb_sum = 0.0, tokens = 0.0, t_start = nsp_wtime();
    nsp_status_t      status;

    memset(rows, 0, sizeof(rows));
    NSP_CHECK_GOTO(load_inputs(cfg, &model, &cluster, &wl), status, out);
    *refused = (status = check_request(cfg, wl, cluster.ranks)) != NSP_OK; /* printed */
    NSP_CHECK_GOTO(status, status, out);
    print_header(cfg, &model, &cluster, nsp_workload_count(wl));
    if (cfg->json_path != NULL) {
        json = fopen(cfg->json_path, "w");
        if (json == NULL) {
            status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", cfg->json_path,
                               strerror(errno));
            goto out;
        }
        nsp_json_writer_init(&w, json, 2);
        nsp_json_begin_object(&w, NULL, 0);
        nsp_json_string(&w, "format", "nspcomm-sim-v1");
        json_config(&w, cfg, &model, &cluster);
        nsp_json_begin_array(&w, "batches", 0);
    }
    for (int b = 0; b < cfg->batches; ++b) {
        int64_t *lens = NULL;
        int      nseqs = 0;
        double   lb = 0.0;

        NSP_CHECK_GOTO(nsp_workload_sample(wl, cfg->seed, b, cfg->tokens_per_rank * cluster.ranks,
                                           cfg->max_len, &lens, &nseqs), status, out);
        {
            nsp_planner_params_t params;
            sim_params(cfg, NSP_PLANNER_NESTED, &params);
            status = nsp_planner_lower_bound(&model, &cluster, lens, nseqs, &params, &lb);
        }
        if (status == NSP_OK) {
            status = plan_batch(cfg, &model, &cluster, lens, nseqs, b, plans);
        }
        free(lens);
        if (status != NSP_OK) {
            goto out_free_plans;
        }
        lb_sum += lb;
        tokens += (double)cfg->tokens_per_rank * cluster.ranks;
        for (int i = 0; i < cfg->nplanners; ++i) {
            const nsp_plan_t *p = plans[i];
            sim_row_t        *r = &rows[i];
            r->step_sum += p->predicted.step_s;
            r->gap_sum += p->predicted.step_s / lb;
            r->rounds_sum += p->nrounds;
            r->plan_ms_sum += p->predicted.plan_ms;
            r->plan_ms_max = fmax(r->plan_ms_max, p->predicted.plan_ms);
            r->greedy += (p->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK) != 0;
            r->timeout += (p->flags & NSP_PLAN_FLAG_SOLVER_TIMEOUT) != 0;
            r->n++;
        }
        if (json != NULL) {
            nsp_json_begin_object(&w, NULL, 0);
            nsp_json_int(&w, "index", b);
            nsp_json_int(&w, "nseqs", nseqs);
            nsp_json_double(&w, "lower_bound_s", lb);
            nsp_json_begin_object(&w, "plans", 0);
            for (int i = 0; i < cfg->nplanners; ++i) {
                nsp_plan_write_json_to(plans[i], &w, planner_names[cfg->planners[i]]);
            }
            nsp_json_end(&w);
            nsp_json_end(&w);
        }
        if (cfg->svg_path != NULL && b == cfg->svg_batch) {
            char caption[4096 + 512];
            snprintf(caption, sizeof(caption), "batch %d of %s: %d sequences, %lld tokens; %s on "
                     "%d x %s (%d per node)", b, cfg->workload, nseqs,
                     (long long)(cfg->tokens_per_rank * cluster.ranks), model.name,
                     cluster.ranks, cluster.name, cluster.ranks_per_node);
            NSP_CHECK_GOTO(nsp_sim_svg_write(cfg->svg_path, plans, cfg->nplanners, lb, caption),
                           status, out_free_plans);
        }
        if (!cfg->quiet) {
            fprintf(stderr, "[nsp_sim] batch %d/%d: %d seqs, lower bound %.3f s", b + 1,
                    cfg->batches, nseqs, lb);
            for (int i = 0; i < cfg->nplanners; ++i) {
                fprintf(stderr, " | %s %.3f s", planner_names[cfg->planners[i]],
                        plans[i]->predicted.step_s);
            }
            fprintf(stderr, " (%.1f s elapsed)\n", nsp_wtime() - t_start);
        }
        for (int i = 0; i < cfg->nplanners; ++i) {
            nsp_plan_free(plans[i]);
            plans[i] = NULL;
        }
    }
    print_table(cfg, rows, tokens, lb_sum);
    if (json != NULL) {
        nsp_json_end(&w);   /* batches */
        json_summary(&w, cfg, rows, tokens, lb_sum);
        nsp_json_end(&w);
        NSP_CHECK_GOTO(nsp_json_writer_finish(&w), status, out_free_plans);
        fputc('\n', json);
    }
    status = NSP_OK;

out_free_plans:
    for (int i = 0; i < SIM_MAX_PLANNERS; ++i) {
        nsp_plan_free(plans[i]);
    }
out:
    if (json != NULL && fclose(json) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", cfg->json_path, strerror(errno));
    }
    nsp_workload_free(wl);
    return status;
}

int main(int argc, char **argv)
{
    sim_config_t cfg;
    int          rc = parse_args(argc, argv, &cfg);
    nsp_status_t status;
    int          refused = 0;

    if (rc != 0) {
        return rc > 0 ? 0 : NSP_OPT_EXIT_USAGE;
    }
    status = run(&cfg, &refused);
    if (refused) {
        return NSP_OPT_EXIT_USAGE;
    }
    if (status != NSP_OK) {
        fprintf(stderr, "nsp_sim: %s\n", nsp_last_error());
        return status == NSP_ERR_INVALID_ARG ? NSP_OPT_EXIT_USAGE : 1;
    }
    return 0;
}
