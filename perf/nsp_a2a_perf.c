/*
 * nsp_a2a_perf: the nested all-to-all measured the way nccl-tests measures
 * collectives, beside the exchanges it replaces, in one run on the same bytes.
 *
 *   nsp_a2a_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]
 *                [--reps R] [--methods LIST] [--ranks N] [--workload FILE]
 *                [--model NAME] [--cluster NAME] [--tokens-per-rank T]
 *                [--max-len S] [--seed K] [--heads H] [--head-dim D]
 *                [--elem 2|4] [--round R] [-J FILE]
 *   mpirun -np N nsp_a2a_perf ...     (rank/size from the launcher; adds the MPI rows)
 *
 * A real batch is drawn from the workload and planned by the nested planner
 * for the model and an N-rank cluster; for each size (bytes per rank of the
 * sequence-sharded buffer [T_local, H, D]) its lengths are scaled so the batch
 * holds size * N bytes, keeping the plan's groups. The methods (one file
 * each, one line in perf/a2a_methods.c; --help lists them) each add rows;
 * perf/a2a_run.c times them in interleaved repetitions and defines the
 * columns, perf/a2a_output.c prints the table and writes the JSON.
 *
 * This file is the frame around them: options, launch, the sizes loop.
 */
#include "config.h"

#include "a2a_harness.h"

#include "common/log.h"
#include "nsp_launch.h"
#include "nsp_opt.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef NSP_HAVE_MPI
#include <mpi.h>
#endif

/* ---- the run on one rank --------------------------------------------------- */

/* Every size on every rank; rank 0 prints and writes. Exit status 2 when
 * some element was wrong (as nccl-tests fails on #wrong). */
static int run_rank(perf_ctx_t *c)
{
    nsp_plan_t     *real;
    a2a_output_t   *out = NULL;
    a2a_size_out_t *z = a2a_xmalloc(sizeof(*z)); /* large: not on the stack */
    double          wrong = 0;
    nsp_tree_t     *tree;

    PCHECK(c, nsp_tree_create(c->comm, NULL, 0, &c->tree), "tree");
    if (getenv("NSP_A2A_PERF_WINDOWS") != NULL) { /* perf/a2a_profile.sh */
        c->windows = fopen(getenv("NSP_A2A_PERF_WINDOWS"), "a");
    }
    real = a2a_real_plan(c);
    if (c->rank == 0) {
        out = a2a_output_begin(c, real);
    }
    for (size_t bytes = c->opts.min_bytes; bytes <= c->opts.max_bytes;
         bytes = (size_t)((double)bytes * c->opts.factor)) {
        a2a_run_size(c, real, bytes, z);
        for (int k = 0; k < z->n; ++k) { /* every rank: the same exit status */
            wrong += z->res[k].wrong > 0 ? z->res[k].wrong : 0;
        }
        if (out != NULL) {
            a2a_output_size(out, z);
        }
        if (c->opts.factor <= 1.0) {
            break;
        }
    }
    if (out != NULL) {
        a2a_output_end(out);
    }
    free(z);
    if (c->windows != NULL) {
        fclose(c->windows);
        c->windows = NULL;
    }
    nsp_plan_free(real);
    tree    = c->tree;
    c->tree = NULL; /* a2a_die must not destroy it again */
    PCHECK(c, nsp_tree_destroy(tree), "tree destroy");
    return wrong == 0 ? 0 : 2;
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

/* The methods: --help's list and the names --methods takes. */
static void usage_methods(void)
{
    printf("methods (--methods LIST, comma-separated; default all):\n");
    for (int k = 0; k < a2a_nmethods; ++k) {
        printf("  %-15s %s\n", a2a_methods[k]->name, a2a_methods[k]->help);
    }
}

static void usage(void)
{
    printf("usage: nsp_a2a_perf [options]      (or: mpirun -np N nsp_a2a_perf [options])\n"
           "  -b, --minbytes SIZE      smallest size, bytes per rank of [T_local, H, D] (1M)\n"
           "  -e, --maxbytes SIZE      largest size (16M); K, M, G suffixes\n"
           "  -f, --stepfactor F       size multiplier between rows (2)\n"
           "  -n, --iters N            timed calls per size and method (20)\n"
           "  -r, --reps R             interleaved repetitions the timed calls split into;\n"
           "                           time = their median (5; at most -n)\n"
           "  -w, --warmup_iters N     untimed calls first (5)\n"
           "  -c, --check 0|1          verify every element of every result against an\n"
           "                           independent expectation (1)\n"
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
           "      --methods LIST       the methods to run (below)\n"
           "      --timeout S          --ranks: stop the ranks after S seconds (3600); each\n"
           "                           exchange waits NSPCOMM_TIMEOUT (60 s) for a peer\n"
           "Every value is checked: a bad one is an error naming the option (exit 2).\n"
           "Exit status: 0, 1 (a failure), 2 (a usage error, or a wrong element).\n");
    usage_methods();
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
    c->opts.reps             = 5;
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
    c->opts.methods          = a2a_nmethods >= 32 ? UINT32_MAX : (1u << a2a_nmethods) - 1;
    c->opts.workload         = default_workload();
}

/* --methods LIST: names from the table. */
static nsp_status_t parse_methods(perf_opts_t *o, const char *arg)
{
    const char *names[A2A_MAX_METHODS];

    for (int k = 0; k < a2a_nmethods; ++k) {
        names[k] = a2a_methods[k]->name;
    }
    return nsp_opt_list(A2A_PROG, "--methods", arg, names, a2a_nmethods, &o->methods);
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
    case 'r': return nsp_opt_int(A2A_PROG, "-r", arg, 1, 4096, &o->reps);
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
    case 12: return parse_methods(o, arg);
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

    c->opts.reps = c->opts.reps < c->opts.iters ? c->opts.reps : c->opts.iters;
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
        {"reps", required_argument, NULL, 'r'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    perf_ctx_t c;
    int        opt, size;

    opts_defaults(&c);
    while ((opt = getopt_long(argc, argv, "b:e:f:n:r:w:c:J:h", longopts, NULL)) != -1) {
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
