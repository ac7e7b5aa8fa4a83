/*
 * nsp_demo: nested sequence-parallel attention on N local ranks over UCX,
 * planned by static, disjoint and nested, checked against the single-process
 * reference, measured beside what the cost model predicts (docs/guide/demo.md).
 *
 *   tools/nsp_demo [--ranks 8] [--workload wlbllm-distca.txt] [--scale 32]
 *                     [--tokens-per-rank 4096] [--max-len 12288] [--batches 3] ...
 *
 * Steps: calibrate this machine (kernel rate in this process; exchange cost
 * on forked ranks) into a cluster description; draw batches from a real
 * workload scaled to CPU sizes; plan each with the three planners; fork the
 * ranks, which compute the reference, then run every plan (one attention
 * layer forward + backward per round) with levels pipelined and serial,
 * repeated; again over UCX tcp; print the table, write the JSON and the
 * picture. Exit status: 0 when every check passed, 1 when a check failed or
 * something went wrong, 2 on bad flags.
 */
#define _GNU_SOURCE
#include "demo.h"

#include "common/log.h"
#include "nsp_opt.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef NSP_DEMO_DATADIR
#define NSP_DEMO_DATADIR "data"
#endif

const char *const demo_planner_names[DEMO_NPLANNERS] = {"static", "disjoint", "nested",
                                                         "megatron"};

static void config_defaults(demo_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->workload        = "wlbllm-distca.txt";
    c->scale           = 32;
    c->ranks           = 8;
    c->tokens_per_rank = 4096;
    c->max_len         = 12288;
    c->mem_ratio       = 1.25;
    c->batches         = 3;
    c->seed            = 1;
    c->reps            = 3;
    c->q_heads         = 8;
    c->kv_heads        = 2;
    c->head_dim        = 64;
    c->overlap         = 0.0;
    c->time_limit_s    = 1.0;
    c->tol             = 2e-5;
    c->tcp             = 1;
    c->json_path       = "out/demo.json";
    c->svg_path        = "out/demo.svg";
    c->svg_batch       = 0;
    c->cluster_out     = "out/demo-cluster.json";
}

static void usage(FILE *f)
{
    demo_config_t d;

    config_defaults(&d);
    fprintf(f,
        "Usage: nsp_demo [options]\n"
        "Nested sequence-parallel attention on N local ranks over UCX: batches of a real\n"
        "workload planned by static, disjoint, nested and megatron, run, checked, measured\n"
        "and predicted (docs/guide/demo.md).\n\n"
        "  --ranks N              local ranks, forked by the demo (default %d)\n"
        "  --workload FILE|NAME   length file; a bare NAME is looked up in\n"
        "                         $NSPCOMM_DATA_DIR/workloads or %s/workloads\n"
        "                         (default %s)\n"
        "  --lengths L1,L2,...    one batch of exactly these sequence lengths (tokens, not\n"
        "                         scaled) instead of --batches drawn from the workload\n"
        "  --scale K              divide every length by K, rounding up (default %d)\n"
        "  --tokens-per-rank T    token budget per rank of one batch (default %lld)\n"
        "  --max-len S            longest sequence after scaling; longer are cut (default %lld)\n"
        "  --mem-ratio X          a rank's memory holds X x tokens-per-rank tokens (default %g)\n"
        "  --batches B            batches (default %d)\n"
        "  --seed K               sampler and input seed (default %llu)\n"
        "  --reps R               timed runs per planner and mode (default %d)\n"
        "  --heads NQ/NKV         query and KV heads (default %d/%d)\n"
        "  --head-dim D           head dimension (default %d)\n"
        "  --overlap E            eta of the cluster description (default %g: the CPU does\n"
        "                         the copies itself)\n"
        "  --time-limit S         disjoint planner's MILP limit per round (default %g)\n"
        "  --tol X                relative tolerance of the check (default %g)\n"
        "  --tcp | --no-tcp       also run every plan over UCX tcp on loopback (default %s)\n"
        "  --json FILE            everything measured and predicted (default %s; \"\" none)\n"
        "  --svg FILE             predicted and measured per-rank time (default %s; \"\" none)\n"
        "  --svg-batch I          the batch drawn (default %d)\n"
        "  --cluster-file FILE    use these rates instead of calibrating\n"
        "  --mem-from-ratio       with --cluster-file: a rank's memory from --mem-ratio, not\n"
        "                         the file's mem_bytes\n"
        "  --nested-plan FILE     run this plan (nspcomm-plan-v1, the batch's lengths) in the\n"
        "                         nested planner's place, priced with this run's cluster\n"
        "  --cluster-out FILE     where the calibrated cluster goes (default %s)\n"
        "  --device emu:FILE      emulated compute: the kernels take the time FILE's target\n"
        "                         GPU would, scaled to this wire (docs/design/\n"
        "                         emulated-device.md); the exchanges move for real over UCX;\n"
        "                         outputs are checked only when FILE says \"math\": true\n"
        "  --timeout S            kill the ranks after S seconds (default 3600)\n"
        "  --quiet                no progress on stderr\n"
        "  --inject-error         corrupt one output of rank 0 before its check: the\n"
        "                         demo must then report the failure and exit 1\n"
        "  --help                 this text\n",
        d.ranks, NSP_DEMO_DATADIR, d.workload, d.scale, (long long)d.tokens_per_rank,
        (long long)d.max_len, d.mem_ratio, d.batches, (unsigned long long)d.seed, d.reps,
        d.q_heads, d.kv_heads, d.head_dim, d.overlap, d.time_limit_s, d.tol,
        d.tcp ? "--tcp" : "--no-tcp", d.json_path, d.svg_path, d.svg_batch, d.cluster_out);
}

enum {
    O_RANKS = 256, O_WORKLOAD, O_SCALE, O_TPR, O_MAXLEN, O_MEM, O_BATCHES, O_SEED, O_REPS,
    O_HEADS, O_HEADDIM, O_OVERLAP, O_TLIMIT, O_TOL, O_TCP, O_NOTCP, O_JSON, O_SVG, O_SVGB,
    O_CFILE, O_COUT, O_TIMEOUT, O_QUIET, O_INJECT, O_HELP, O_LENGTHS, O_MEMRATIO, O_NESTPLAN,
    O_DEVICE
};

#define DEMO_PROG "nsp_demo"

/* A number in [lo, hi] (checked: tools/nsp_opt.h); 0 ok, -1 bad (message printed). */
static int parse_num(const char *flag, const char *text, double lo, double hi, double *out)
{
    return nsp_opt_double(DEMO_PROG, flag, text, lo, hi, 0, out) == NSP_OK ? 0 : -1;
}

/* An integer in [lo, hi]: 0 ok, -1 bad (message printed). */
static int parse_i64(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    return nsp_opt_i64(DEMO_PROG, flag, text, lo, hi, out) == NSP_OK ? 0 : -1;
}

static int parse_int(const char *flag, const char *text, int lo, int hi, int *out)
{
    return nsp_opt_int(DEMO_PROG, flag, text, lo, hi, out) == NSP_OK ? 0 : -1;
}

/* --heads NQ/NKV: two head counts, NKV dividing NQ; 0 ok, -1 bad. */
static int parse_heads(const char *text, demo_config_t *c)
{
    char        nq[32];
    const char *slash = strchr(text, '/');
    int         q, kv;

    if (slash == NULL || (size_t)(slash - text) >= sizeof(nq)) {
        fprintf(stderr, DEMO_PROG ": --heads %s: give NQ/NKV with NKV dividing NQ, e.g. 8/2\n",
                text);
        return -1;
    }
    snprintf(nq, sizeof(nq), "%.*s", (int)(slash - text), text);
    if (parse_int("--heads (NQ)", nq, 1, 4096, &q) != 0 ||
        parse_int("--heads (NKV)", slash + 1, 1, 4096, &kv) != 0) {
        return -1;
    }
    if (q % kv != 0) {
        fprintf(stderr, DEMO_PROG ": --heads %s: NKV = %d does not divide NQ = %d\n", text, kv,
                q);
        return -1;
    }
    c->q_heads  = q;
    c->kv_heads = kv;
    return 0;
}

/* A file the demo writes ("" = none): checked now, before the run. */
static int parse_out(const char *flag, const char *text, const char **out)
{
    *out = text[0] != '\0' ? text : NULL;
    return *out == NULL || nsp_opt_out_path(DEMO_PROG, flag, text) == NSP_OK ? 0 : -1;
}

/* --lengths L1,L2,...: every entry a length >= 1; 0 ok, -1 bad. */
static int parse_lengths(const char *text)
{
    for (const char *p = text;;) {
        char     *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, DEMO_PROG ": --lengths %s: give sequence lengths >= 1 separated by "
                    "commas, e.g. 5632,512,64\n", text);
            return -1;
        }
        if (*end == '\0') {
            return 0;
        }
        p = end + 1;
    }
}

/* 0: run; 1: --help; -1: bad flags. */
static int parse_args(int argc, char **argv, demo_config_t *c, double *timeout_s)
{
    static const struct option opts[] = {
        {"ranks", required_argument, NULL, O_RANKS},
        {"workload", required_argument, NULL, O_WORKLOAD},
        {"lengths", required_argument, NULL, O_LENGTHS},
        {"mem-from-ratio", no_argument, NULL, O_MEMRATIO},
        {"nested-plan", required_argument, NULL, O_NESTPLAN},
        {"device", required_argument, NULL, O_DEVICE},
        {"scale", required_argument, NULL, O_SCALE},
        {"tokens-per-rank", required_argument, NULL, O_TPR},
        {"max-len", required_argument, NULL, O_MAXLEN},
        {"mem-ratio", required_argument, NULL, O_MEM},
        {"batches", required_argument, NULL, O_BATCHES},
        {"seed", required_argument, NULL, O_SEED},
        {"reps", required_argument, NULL, O_REPS},
        {"heads", required_argument, NULL, O_HEADS},
        {"head-dim", required_argument, NULL, O_HEADDIM},
        {"overlap", required_argument, NULL, O_OVERLAP},
        {"time-limit", required_argument, NULL, O_TLIMIT},
        {"tol", required_argument, NULL, O_TOL},
        {"tcp", no_argument, NULL, O_TCP},
        {"no-tcp", no_argument, NULL, O_NOTCP},
        {"json", required_argument, NULL, O_JSON},
        {"svg", required_argument, NULL, O_SVG},
        {"svg-batch", required_argument, NULL, O_SVGB},
        {"cluster-file", required_argument, NULL, O_CFILE},
        {"cluster-out", required_argument, NULL, O_COUT},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"quiet", no_argument, NULL, O_QUIET},
        {"inject-error", no_argument, NULL, O_INJECT},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    int opt;

    config_defaults(c);
    *timeout_s = 3600;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int64_t seed = 0;
        int     bad = 0;
        switch (opt) {
        case O_RANKS: bad = parse_int("--ranks", optarg, 2, DEMO_MAX_RANKS, &c->ranks); break;
        case O_WORKLOAD: c->workload = optarg; break;
        case O_LENGTHS: c->lengths = optarg; bad = parse_lengths(optarg); break;
        case O_MEMRATIO: c->mem_from_ratio = 1; break;
        case O_NESTPLAN:
            c->nested_plan = optarg;
            bad = nsp_opt_in_path(DEMO_PROG, "--nested-plan", optarg) != NSP_OK;
            break;
        case O_SCALE: bad = parse_int("--scale", optarg, 1, 1000000, &c->scale); break;
        case O_TPR:
            bad = parse_i64("--tokens-per-rank", optarg, 1, 100000000, &c->tokens_per_rank);
            break;
        case O_MAXLEN: bad = parse_i64("--max-len", optarg, 1, 1000000000, &c->max_len); break;
        case O_MEM: bad = parse_num("--mem-ratio", optarg, 0.01, 1e6, &c->mem_ratio); break;
        case O_BATCHES:
            bad = parse_int("--batches", optarg, 1, DEMO_MAX_BATCHES, &c->batches);
            break;
        case O_SEED:
            bad = parse_i64("--seed", optarg, 0, INT64_MAX, &seed);
            c->seed = (uint64_t)seed;
            break;
        case O_REPS: bad = parse_int("--reps", optarg, 1, DEMO_MAX_REPS, &c->reps); break;
        case O_HEADS: bad = parse_heads(optarg, c); break;
        case O_HEADDIM: bad = parse_int("--head-dim", optarg, 1, 1024, &c->head_dim); break;
        case O_OVERLAP: bad = parse_num("--overlap", optarg, 0, 1, &c->overlap); break;
        case O_TLIMIT:
            bad = parse_num("--time-limit", optarg, 0.001, 3600, &c->time_limit_s);
            break;
        case O_TOL: bad = parse_num("--tol", optarg, 0, 1, &c->tol); break;
        case O_TCP: c->tcp = 1; break;
        case O_NOTCP: c->tcp = 0; break;
        case O_JSON: bad = parse_out("--json", optarg, &c->json_path); break;
        case O_SVG: bad = parse_out("--svg", optarg, &c->svg_path); break;
        case O_SVGB:
            bad = parse_int("--svg-batch", optarg, 0, DEMO_MAX_BATCHES - 1, &c->svg_batch);
            break;
        case O_CFILE:
            c->cluster_file = optarg;
            bad = nsp_opt_in_path(DEMO_PROG, "--cluster-file", optarg) != NSP_OK;
            break;
        case O_COUT: bad = parse_out("--cluster-out", optarg, &c->cluster_out); break;
        case O_TIMEOUT: bad = parse_num("--timeout", optarg, 1, 1e6, timeout_s); break;
        case O_QUIET: c->quiet = 1; break;
        case O_INJECT: c->inject_error = 1; break;
        case O_DEVICE:
            c->device = optarg;
            if (strncmp(optarg, "emu:", 4) != 0 || optarg[4] == '\0') {
                fprintf(stderr, "nsp_demo: --device %s: use emu:FILE (the emulated device)\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_HELP: usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (bad) {
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "nsp_demo: unexpected argument %s (see --help)\n", argv[optind]);
        return -1;
    }
    if (c->lengths != NULL) {
        c->batches = 1; /* whatever --batches said */
    }
    if (c->svg_batch >= c->batches) {
        fprintf(stderr, "nsp_demo: --svg-batch %d: there are %d batches\n", c->svg_batch,
                c->batches);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Inputs: workload, batches, model, cluster, plans                          */
/* ------------------------------------------------------------------------ */

/* A bare name is looked up in the data directories. out[len] caller-owned. */
static void resolve_workload(const char *name, char *out, size_t len)
{
    const char *env = getenv("NSPCOMM_DATA_DIR");

    snprintf(out, len, "%s", name);
    if (strchr(name, '/') != NULL || access(name, R_OK) == 0) {
        return;
    }
    if (env != NULL) {
        snprintf(out, len, "%s/workloads/%s", env, name);
        if (access(out, R_OK) == 0) {
            return;
        }
    }
    snprintf(out, len, "%s/workloads/%s", NSP_DEMO_DATADIR, name);
    if (access(out, R_OK) != 0) {
        snprintf(out, len, "%s", name); /* let the loader say it is missing */
    }
}

/* Load the workload with every length divided by `scale` (rounded up):
 * the original is loaded (and so checked) first, then a scaled copy is
 * written to a temporary file and loaded, so the sampler of docs/design.md §5.3
 * draws from the scaled lengths exactly. */
static nsp_status_t load_scaled(const char *path, int scale, nsp_workload_t **wl)
{
    char         tmp[] = "/tmp/nsp_demo_workload_XXXXXX", line[256];
    FILE        *in, *out;
    int          fd;
    nsp_status_t status;

    NSP_CHECK(nsp_workload_load(path, wl));
    if (scale == 1) {
        return NSP_OK;
    }
    nsp_workload_free(*wl);
    *wl = NULL;
    in = fopen(path, "r");
    fd = mkstemp(tmp);
    out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (in == NULL || out == NULL) {
        status = nsp_error(NSP_ERR_IO, "cannot scale %s into %s: %s", path, tmp,
                           strerror(errno));
        goto out;
    }
    while (fgets(line, sizeof(line), in) != NULL) {
        char     *p = line;
        long long v;
        while (*p == ' ' || *p == '\t') {
            ++p;
        }
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') {
            continue;
        }
        v = strtoll(p, NULL, 10); /* the loader above accepted every line */
        fprintf(out, "%lld\n", (v + scale - 1) / scale);
    }
    if (fclose(out) != 0) {
        out = NULL;
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    out = NULL;
    status = nsp_workload_load(tmp, wl);
out:
    if (in != NULL) {
        fclose(in);
    }
    if (out != NULL) {
        fclose(out);
    }
    if (fd >= 0) {
        unlink(tmp);
    }
    return status;
}

/* --lengths "L1,L2,..." (checked by parse_lengths): batch 0 is exactly these. */
static nsp_status_t given_batch(demo_t *demo)
{
    const char *p = demo->cfg.lengths;
    int         n = 1;

    for (const char *q = p; *q != '\0'; ++q) {
        n += *q == ',';
    }
    demo->lens[0] = calloc((size_t)n, sizeof(int64_t));
    if (demo->lens[0] == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; ++i) {
        char *end;
        demo->lens[0][i] = strtoll(p, &end, 10);
        p                = end + (*end == ',');
    }
    demo->nseqs[0] = n;
    return NSP_OK;
}

static nsp_status_t sample_batches(demo_t *demo)
{
    const demo_config_t *c = &demo->cfg;
    char                 path[4096];
    nsp_workload_t      *wl = NULL;
    nsp_status_t         status = NSP_OK;

    resolve_workload(c->workload, path, sizeof(path));
    demo->workload_path = strdup(path);
    demo->cfg.workload  = demo->workload_path != NULL ? demo->workload_path : c->workload;
    if (c->lengths == NULL) {
        NSP_CHECK(load_scaled(path, c->scale, &wl));
    }
    for (int b = 0; b < c->batches; ++b) {
        if (c->lengths != NULL) {
            NSP_CHECK_GOTO(given_batch(demo), status, out);
        } else {
            NSP_CHECK_GOTO(nsp_workload_sample(wl, c->seed, b, c->tokens_per_rank * c->ranks,
                                               c->max_len, &demo->lens[b], &demo->nseqs[b]),
                           status, out);
        }
        demo->offsets[b] = calloc((size_t)demo->nseqs[b] + 1, sizeof(int64_t));
        if (demo->offsets[b] == NULL) {
            status = nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
            goto out;
        }
        for (int i = 0; i < demo->nseqs[b]; ++i) {
            demo->offsets[b][i + 1] = demo->offsets[b][i] + demo->lens[b][i];
        }
        demo->nbatches = b + 1;
    }
out:
    nsp_workload_free(wl);
    return status;
}

/* A cluster file's world fitted to the demo's ranks: its nodes are kept
 * where they tile the ranks (a namespace-cluster file: 4 per node, so the
 * across-node degrees get bw_inter), else every rank is on one host. */
static void cluster_fit_ranks(nsp_cluster_t *cl, int ranks)
{
    int per_node = cl->ranks_per_node;

    if (per_node < 1 || per_node > ranks || ranks % per_node != 0) {
        per_node = ranks;
    }
    cl->ranks          = ranks;
    cl->ranks_per_node = per_node;
}

/* The cluster description of every session: from --cluster-file, or
 * calibrated (the kernel once, the exchange per transport). */
static nsp_status_t set_clusters(demo_t *demo)
{
    const demo_config_t *c = &demo->cfg;
    demo_calib_t         kernel;
    double               t0 = demo_now();

    if (c->cluster_file != NULL) {
        for (int s = 0; s < demo->nsessions; ++s) {
            NSP_CHECK(nsp_cluster_load(c->cluster_file, &demo->cluster[s]));
            cluster_fit_ranks(&demo->cluster[s], c->ranks);
            if (c->mem_from_ratio) { /* docs/guide/demo.md section 3.4 */
                demo->cluster[s].mem_bytes =
                    demo_mem_bytes(&demo->model, c->ranks, demo->cluster[s].workspace_bytes,
                                   c->mem_ratio * (double)c->tokens_per_rank);
            }
        }
        return NSP_OK;
    }
    if (!c->quiet) {
        fprintf(stderr, "[nsp_demo] calibrating this machine: the kernel, then the exchange on "
                "%d ranks over each transport\n", c->ranks);
    }
    memset(&kernel, 0, sizeof(kernel));
    NSP_CHECK(demo_calib_kernel(&demo->attn, &kernel));
    kernel.kernel_seconds = demo_now() - t0;
    for (int s = 0; s < demo->nsessions; ++s) {
        char path[4096];
        demo->calib[s] = kernel;
        NSP_CHECK(demo_calib_exchange(demo, s));
        demo->calib[s].done = 1;
        demo_cluster_from_calib(c, &demo->model, &demo->calib[s], &demo->cluster[s]);
        snprintf(demo->cluster[s].name, sizeof(demo->cluster[s].name), "demo-cpu-%s",
                 demo->session_name[s]);
        demo_cluster_path(demo, s, path, sizeof(path));
        if (path[0] != '\0') {
            NSP_CHECK(demo_cluster_write(path, &demo->cluster[s], &demo->calib[s]));
        }
    }
    return NSP_OK;
}

static void add_degree(demo_t *demo, int d)
{
    int i = 0;

    while (i < demo->ndegrees && demo->degrees[i] < d) {
        ++i;
    }
    if ((i < demo->ndegrees && demo->degrees[i] == d) || demo->ndegrees == DEMO_MAX_DEGREES) {
        return;
    }
    memmove(&demo->degrees[i + 1], &demo->degrees[i],
            sizeof(int) * (size_t)(demo->ndegrees - i));
    demo->degrees[i] = d;
    demo->ndegrees++;
}

/* The whole of file `path` as a NUL-terminated string (caller frees). */
static nsp_status_t read_text(const char *path, char **out)
{
    FILE  *f = fopen(path, "rb");
    long   size;
    char  *text;
    size_t got;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        if (f != NULL) {
            fclose(f);
        }
        return nsp_error(NSP_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    text = malloc((size_t)size + 1);
    got  = text != NULL ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (text == NULL || got != (size_t)size) {
        free(text);
        return nsp_error(text == NULL ? NSP_ERR_NO_MEMORY : NSP_ERR_IO, "cannot read %s", path);
    }
    text[size] = '\0';
    *out       = text;
    return NSP_OK;
}

/* --nested-plan FILE for batch b: its rounds and groups, with this run's
 * model and cluster, priced again; its lengths must be the batch's. */
static nsp_status_t given_plan(const demo_t *demo, int b, const nsp_cluster_t *cl,
                               nsp_plan_t **out)
{
    const char  *path = demo->cfg.nested_plan;
    char        *text = NULL;
    nsp_plan_t  *plan = NULL;
    nsp_status_t status;
    int          same;

    NSP_CHECK(read_text(path, &text));
    status = nsp_plan_read_json(text, &plan);
    free(text);
    NSP_CHECK(status);
    same = plan->nseqs == demo->nseqs[b];
    for (int i = 0; same && i < plan->nseqs; ++i) {
        same = plan->seq_lens[i] == demo->lens[b][i];
    }
    if (!same) {
        nsp_plan_free(plan);
        return nsp_error(NSP_ERR_INVALID_ARG, "--nested-plan %s: its sequence lengths are not "
                         "those of batch %d (%d sequences)", path, b, demo->nseqs[b]);
    }
    plan->model   = demo->model;
    plan->cluster = *cl;
    status        = nsp_plan_evaluate(plan);
    if (status != NSP_OK) {
        nsp_plan_free(plan);
        return status;
    }
    *out = plan;
    return NSP_OK;
}

/*
 * --device emu:FILE (or NSPCOMM_DEVICE=emu:FILE already set, so that a run
 * that used it always says so): FILE read now, for a clear error before any
 * rank starts and for the labels; the ranks inherit NSPCOMM_DEVICE and run
 * the "emu" memory type, with UCX's progress thread on (the rank's thread
 * mostly waits while kernels run on the stream threads).
 */
static nsp_status_t set_device(demo_t *demo)
{
    demo_config_t  *c = &demo->cfg;
    demo_compute_t *x = &demo->compute;
    const char     *env = getenv("NSPCOMM_DEVICE");

    if (c->device == NULL && env != NULL && env[0] != '\0') {
        c->device = env;
    }
    if (c->device == NULL) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_emu_config_from_env(c->device, &x->emulated, &x->cfg));
    NSP_CHECK(nsp_emu_config_timing(&x->cfg, c->q_heads, c->kv_heads, c->head_dim, &x->timing));
    setenv("NSPCOMM_DEVICE", c->device, 1);
    setenv("NSPCOMM_PROGRESS_THREAD", "on", 0);
    return NSP_OK;
}

/* Emulated compute: the planners and the predictions price a kernel at the
 * emulated rate, the target's R_attn over the scale, which is what the
 * emulated kernels take (the linear term stays as calibrated: host work). */
static void set_emulated_rates(demo_t *demo)
{
    const nsp_emu_timing_t *t = &demo->compute.timing;

    for (int s = 0; s < demo->nsessions && demo->compute.emulated; ++s) {
        demo->cluster[s].attn_flops = t->target.cluster.attn_flops / t->scale;
    }
}

int demo_checked(const demo_t *demo)
{
    return !demo->compute.emulated || demo->compute.cfg.math;
}

void demo_compute_label(const demo_t *demo, char *out, size_t len)
{
    const demo_compute_t *x = &demo->compute;

    if (!x->emulated) {
        snprintf(out, len, "real compute");
        return;
    }
    snprintf(out, len, "EMULATED COMPUTE (%s x %.4g, link %s, %s)",
             x->cfg.target_is_file ? x->timing.target.cluster.name : x->cfg.target,
             x->timing.scale, nsp_emu_link_name(x->cfg.link),
             x->cfg.math ? "math" : "timing only");
}

/* Every batch, every planner, for the cluster of session s. */
static nsp_status_t plan_batches(demo_t *demo, int s)
{
    const nsp_cluster_t *cl = &demo->cluster[s];
    double               t0 = demo_now();

    add_degree(demo, 1);
    for (int b = 0; b < demo->nbatches; ++b) {
        NSP_CHECK(nsp_lower_bound(&demo->model, cl, demo->lens[b], demo->nseqs[b],
                                  &demo->lower_bound[s][b]));
        for (int p = 0; p < DEMO_NPLANNERS; ++p) {
            nsp_planner_params_t pp;
            nsp_plan_t          *plan;
            memset(&pp, 0, sizeof(pp));
            pp.kind         = (nsp_planner_kind_t)p;
            pp.field_mask   = NSP_PLANNER_FIELD_TIME_LIMIT | NSP_PLANNER_FIELD_MAX_ROUNDS;
            pp.time_limit_s = demo->cfg.time_limit_s;
            pp.max_rounds   = DEMO_MAX_ROUNDS;
            if (p == NSP_PLANNER_NESTED && demo->cfg.nested_plan != NULL) {
                NSP_CHECK(given_plan(demo, b, cl, &plan));
            } else {
                NSP_CHECK(nsp_plan_create(&demo->model, cl, demo->lens[b], demo->nseqs[b], &pp,
                                          &plan));
            }
            demo->plans[s][b][p] = plan;
            NSP_CHECK(nsp_plan_validate(plan));
            for (int r = 0; r < plan->nrounds; ++r) {
                for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
                    add_degree(demo, plan->rounds[r].groups[g].size);
                }
            }
        }
        if (!demo->cfg.quiet) {
            fprintf(stderr, "[nsp_demo] UCX %s, batch %d: %d sequences planned; predicted "
                    "static %.1f ms, disjoint %.1f ms, nested %.1f ms, megatron %.1f ms\n",
                    demo->session_name[s], b, demo->nseqs[b],
                    1e3 * demo->plans[s][b][0]->predicted.step_s,
                    1e3 * demo->plans[s][b][1]->predicted.step_s,
                    1e3 * demo->plans[s][b][2]->predicted.step_s,
                    1e3 * demo->plans[s][b][3]->predicted.step_s);
        }
    }
    demo->plan_s[s] = demo_now() - t0;
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Sessions                                                                 */
/* ------------------------------------------------------------------------ */

static size_t runs_bytes(const demo_t *demo)
{
    return sizeof(demo_rank_run_t) * (size_t)demo->nbatches * DEMO_NPLANNERS * DEMO_NMODES *
           (size_t)demo->cfg.reps * (size_t)demo->cfg.ranks;
}

static size_t checks_bytes(const demo_t *demo)
{
    return sizeof(demo_rank_check_t) * (size_t)demo->nbatches * DEMO_NPLANNERS * DEMO_NMODES *
           (size_t)demo->cfg.ranks;
}

static void sessions_define(demo_t *demo)
{
    const char *tls = getenv("UCX_TLS");

    demo->nsessions      = 1;
    demo->session_tls[0] = NULL; /* as the environment says */
    snprintf(demo->session_name[0], sizeof(demo->session_name[0]), "%s",
             tls == NULL ? "shm" : tls);
    if (demo->cfg.tcp) {
        demo->session_tls[1] = "self,tcp";
        snprintf(demo->session_name[1], sizeof(demo->session_name[1]), "tcp");
        demo->nsessions = 2;
    }
}

static nsp_status_t run_session(demo_t *demo, int s, double timeout_s)
{
    demo_shared_t *sh = &demo->shared[s];
    double         t0 = demo_now();
    demo_watch_t   watch;
    char           what[64];

    sh->runs   = demo_shared_alloc(runs_bytes(demo));
    sh->checks = demo_shared_alloc(checks_bytes(demo));
    sh->note   = demo_shared_alloc(sizeof(*sh->note) * DEMO_MAX_RANKS);
    sh->ready  = demo_shared_alloc(sizeof(int) * DEMO_MAX_RANKS);
    if (sh->runs == NULL || sh->checks == NULL || sh->note == NULL || sh->ready == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "cannot map the results of session %s",
                         demo->session_name[s]);
    }
    if (!demo->cfg.quiet) {
        fprintf(stderr, "[nsp_demo] running every plan on %d ranks over UCX %s\n",
                demo->cfg.ranks, demo->session_name[s]);
    }
    demo->session   = s;
    watch.timeout_s = timeout_s;
    watch.startup_s = 30;
    watch.ready     = sh->ready;
    watch.notes     = sh->note;
    snprintf(what, sizeof(what), "the session over UCX %s", demo->session_name[s]);
    NSP_CHECK(demo_launch_retry(demo->cfg.ranks, demo_rank_main, demo, &demo->id, &watch,
                                what));
    demo->session_s[s] = demo_now() - t0;
    return NSP_OK;
}

static void sessions_free(demo_t *demo)
{
    for (int s = 0; s < demo->nsessions; ++s) {
        demo_shared_free(demo->shared[s].runs, runs_bytes(demo));
        demo_shared_free(demo->shared[s].checks, checks_bytes(demo));
        demo_shared_free(demo->shared[s].note, sizeof(*demo->shared[s].note) * DEMO_MAX_RANKS);
        demo_shared_free((void *)demo->shared[s].ready, sizeof(int) * DEMO_MAX_RANKS);
    }
}

/* mkdir -p of the directory part of `path` (out/ is not in the repository). */
static nsp_status_t make_parent_dir(const char *path)
{
    char  dir[4096];
    char *slash;

    if (path == NULL) {
        return NSP_OK;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) {
        return NSP_OK;
    }
    *slash = '\0';
    for (char *p = dir + 1; *p != '\0'; ++p) {
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0777);
            *p = '/';
        }
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        return nsp_error(NSP_ERR_IO, "cannot create directory %s for %s: %s", dir, path,
                         strerror(errno));
    }
    return NSP_OK;
}

static void demo_free(demo_t *demo)
{
    sessions_free(demo);
    demo_reference_free(demo);
    for (int b = 0; b < demo->nbatches; ++b) {
        for (int s = 0; s < DEMO_MAX_SESSIONS; ++s) {
            for (int p = 0; p < DEMO_NPLANNERS; ++p) {
                nsp_plan_free(demo->plans[s][b][p]);
            }
        }
        free(demo->lens[b]);
        free(demo->offsets[b]);
    }
    free(demo->workload_path);
}

static nsp_status_t run(demo_t *demo, double timeout_s, int *failed_checks)
{
    const demo_config_t *c = &demo->cfg;
    double               t0 = demo_now();

    NSP_CHECK(make_parent_dir(c->json_path));
    NSP_CHECK(make_parent_dir(c->svg_path));
    NSP_CHECK(make_parent_dir(c->cluster_file == NULL ? c->cluster_out : NULL));
    if (c->svg_batch >= c->batches) {
        return nsp_error(NSP_ERR_INVALID_ARG, "--svg-batch %d: there are %d batches",
                         c->svg_batch, c->batches);
    }
    demo_model(c, &demo->model);
    demo->attn = (nsp_attn_params_t)NSP_ATTN_PARAMS_INIT(c->q_heads, c->kv_heads, c->head_dim);
    sessions_define(demo);
    NSP_CHECK(set_device(demo));
    NSP_CHECK(sample_batches(demo));
    NSP_CHECK(set_clusters(demo));
    set_emulated_rates(demo);
    for (int s = 0; s < demo->nsessions; ++s) {
        NSP_CHECK(plan_batches(demo, s));
    }
    NSP_CHECK(demo_reference_alloc(demo));
    demo_print_header(demo);
    for (int s = 0; s < demo->nsessions; ++s) {
        NSP_CHECK(run_session(demo, s, timeout_s));
    }
    *failed_checks = demo_print_table(demo);
    if (c->svg_path != NULL) {
        NSP_CHECK(demo_write_svg(demo, c->svg_path, c->svg_batch));
    }
    if (c->json_path != NULL) {
        NSP_CHECK(demo_write_json(demo, c->json_path, demo_now() - t0));
    }
    printf("# wrote:%s", c->json_path == NULL && c->svg_path == NULL && !demo->calib[0].done
                             ? " nothing" : "");
    if (c->json_path != NULL) {
        printf(" %s", c->json_path);
    }
    if (c->svg_path != NULL) {
        printf(" %s", c->svg_path);
    }
    for (int s = 0; s < demo->nsessions && demo->calib[s].done; ++s) {
        char path[4096];
        demo_cluster_path(demo, s, path, sizeof(path));
        printf("%s%s", path[0] != '\0' ? " " : "", path);
    }
    printf("\n# time: %.1f s in all (calibration %.1f", demo_now() - t0,
           demo->calib[0].kernel_seconds);
    for (int s = 0; s < demo->nsessions; ++s) {
        printf(" + %.1f", demo->calib[s].xchg_seconds);
    }
    printf(", planning");
    for (int s = 0; s < demo->nsessions; ++s) {
        printf(" %.1f", demo->plan_s[s]);
    }
    printf(", runs");
    for (int s = 0; s < demo->nsessions; ++s) {
        printf(" %s %.1f", demo->session_name[s], demo->session_s[s]);
    }
    printf(")\n");
    return NSP_OK;
}

/*
 * UCX reads its global options (logging, memory hooks) when the library is
 * loaded, before main(): setting them here would be too late, so the demo
 * sets what the user left unset and runs itself once more.
 *  - UCX_LOG_FILE=stderr: UCX logs to stdout by default, into the table;
 *  - UCX_MEM_EVENTS=no: UCX 1.13 can hang in ucp_init installing its memory
 *    hooks (ucm_event_enter_exclusive; seen here once in 40 starts of 8
 *    ranks, and upstream in openucx/ucx#7270); the host transports the demo
 *    uses need no registration cache;
 *  - UCX_WARN_UNUSED_ENV_VARS=n: UCX_TLS set for the tcp session only.
 */
static void ucx_environment(char **argv)
{
    if (getenv("NSP_DEMO_UCX_ENV") != NULL) {
        return; /* already done */
    }
    setenv("UCX_LOG_FILE", "stderr", 0);
    setenv("UCX_MEM_EVENTS", "no", 0);
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 0);
    setenv("NSP_DEMO_UCX_ENV", "1", 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* not Linux, or no /proc: go on with UCX's defaults */
    fprintf(stderr, "nsp_demo: cannot run itself again with UCX's environment (%s); set "
            "UCX_MEM_EVENTS=no and UCX_LOG_FILE=stderr yourself if UCX hangs or logs to "
            "stdout\n", strerror(errno));
}

/*
 * The demo forks its own ranks: under a launcher of several processes
 * (mpirun -np 2, torchrun) every process would run a separate demo. Say so
 * and return nonzero.
 */
static int refuse_launcher(void)
{
    const char *name;
    int         rank, size;

    if (nsp_launcher_detect(&name, &rank, &size) != NSP_OK) {
        fprintf(stderr, "nsp_demo: %s\n", nsp_last_error());
        return 1;
    }
    if (name != NULL && size > 1) {
        fprintf(stderr, "nsp_demo: started by %s as rank %d of %d, but the demo forks its own "
                "ranks (--ranks): run it once, without a launcher\n", name, rank, size);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    demo_t      *demo = calloc(1, sizeof(*demo));
    double       timeout_s;
    int          rc, failed = 0;
    nsp_status_t status;

    if (demo == NULL) {
        fprintf(stderr, "nsp_demo: out of memory\n");
        return 1;
    }
    rc = parse_args(argc, argv, &demo->cfg, &timeout_s);
    if (rc != 0) {
        free(demo);
        return rc > 0 ? 0 : 2;
    }
    if (refuse_launcher() != 0) {
        free(demo);
        return 2;
    }
    ucx_environment(argv);
    status = run(demo, timeout_s, &failed);
    if (status != NSP_OK) {
        fprintf(stderr, "nsp_demo: %s\n", nsp_last_error());
    }
    demo_free(demo);
    free(demo);
    return status != NSP_OK || failed > 0 ? 1 : 0;
}
