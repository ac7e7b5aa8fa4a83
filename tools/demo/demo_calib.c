/*
 * Calibration of this machine for the demo's cost model (docs/guide/demo.md §3).
 *
 * The cost model (docs/design.md §5.1) predicts a step as the slowest rank's time
 * when every rank has its own resources. The demo measures the same thing
 * as CPU time (one core per rank; see the "crit" column), so the rates are
 * CPU-time rates:
 *
 *  - R_attn, and a per-token term: the reference kernel, fwd + bwd of 4096
 *    tokens packed as causal sequences of 32, 128, 512 and 2048 tokens,
 *    best thread CPU time of three, fitted to t(s) = a*s + b*s^2 per
 *    sequence: perf/nsp_calibrate's kernel fit (perf/calib.h), the same
 *    code, at the demo's lengths. R_attn = 7 n_q D / b (the model's attn_flops is 7 n_q D s^2).
 *    The demo runs no linear layers; the model's linear term
 *    lin_flops(s)/R_gemm stands for the kernel's per-token cost a, so
 *    R_gemm = lin_flops_per_token / a (1e30 when a <= 0).
 *  - B and a: every rank runs the nested attention of a static plan of
 *    degree d_max twice, on sequences of 4 tokens (fixed cost) and of 128
 *    tokens (bytes), and measures its process CPU time minus its kernel
 *    thread CPU time = the CPU its exchanges cost. B_fp32 = extra bytes /
 *    extra CPU; a = fixed CPU / 4 (the model counts 4 collectives per level
 *    per layer). The demo moves float32 while the model counts bf16 bytes
 *    (b = 2), so the cluster gets bw = B_fp32 / 2: bytes_model / bw =
 *    bytes_fp32 / B_fp32.
 */
#include "demo.h"

#include "calib.h"  /* perf/: the kernel fit nsp_calibrate makes */
#include "common.h" /* perf/: perf_stats_of */

#include "common/json.h"
#include "common/log.h"
#include "planner/cost.h"
#include "planner/planner_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALIB_KERNEL_REPS 3
#define CALIB_XCHG_REPS   7
#define CALIB_SMALL_LEN   4     /* tokens per sequence: almost no bytes, no compute */
#define CALIB_LARGE_LEN   128   /* tokens per sequence: bytes dominate the compute */
#define CALIB_TOKENS_PER_RANK 1024

void demo_model(const demo_config_t *cfg, nsp_model_t *m)
{
    /* One attention layer (perf/calib.h). hidden, ffn and params only scale
     * the memory per token and the linear term; both are set from
     * measurements (demo_cluster_from_calib), so their values cancel out. */
    calib_attn_model(cfg->q_heads, cfg->kv_heads, cfg->head_dim, m);
    snprintf(m->name, sizeof(m->name), "demo-attn-%d-%d-%d", cfg->q_heads, cfg->kv_heads,
             cfg->head_dim);
}

double demo_mem_bytes(const nsp_model_t *model, int ranks, double workspace, double tokens)
{
    nsp_cluster_t c;
    nsp_cost_t    cost;

    calib_placeholder_cluster(ranks, &c);
    c.workspace_bytes = workspace;
    if (nsp_cost_init(&cost, model, &c) != NSP_OK) {
        return 0.0;
    }
    /* docs/design.md §5.1: 16 P / N + W + tokens * a_tok (activations kept) */
    return cost.fixed_mem_bytes + tokens * cost.act_bytes_keep;
}

nsp_status_t demo_calib_kernel(const nsp_attn_params_t *a, demo_calib_t *calib)
{
    /* Packed batches of 4096 tokens in sequences of 32 .. 2048 tokens,
     * fitted by nsp_calibrate's code to t(s) = a s + b s^2 per sequence. */
    static const int64_t len[DEMO_CALIB_LENGTHS] = {32, 128, 512, 2048};
    demo_config_t        cfg;
    nsp_model_t          m;
    calib_fit_t          fit;
    nsp_status_t         status;

    status = calib_kernel_fit(a, len, DEMO_CALIB_LENGTHS, 4096, CALIB_KERNEL_REPS, &fit);
    if (status != NSP_OK) { /* logged where decided; the demo's way out added */
        char why[512];
        snprintf(why, sizeof(why), "%s", nsp_last_error());
        return nsp_error_quiet(status, "kernel calibration: %s; give rates with --cluster-file",
                               why);
    }
    calib->kern_tokens = fit.tokens;
    for (int i = 0; i < DEMO_CALIB_LENGTHS; ++i) {
        calib->kern_len[i] = fit.len[i];
        calib->kern_s[i]   = fit.fwd_bwd_s[i];
    }
    calib->per_token_s = fit.a;
    calib->attn_flops  = 7.0 * a->q_heads * a->head_dim / fit.b;
    memset(&cfg, 0, sizeof(cfg));
    cfg.q_heads = a->q_heads, cfg.kv_heads = a->kv_heads, cfg.head_dim = a->head_dim;
    demo_model(&cfg, &m);
    return calib_gemm_from_kernel(&m, calib->per_token_s, &calib->gemm_flops);
}

/* ------------------------------------------------------------------------ */
/* Exchange calibration: ranks                                              */
/* ------------------------------------------------------------------------ */

typedef struct calib_sample {
    double xchg_cpu_s;   /* process CPU - kernel thread CPU of fwd + bwd */
    double bytes;        /* bytes sent, all levels, fwd + bwd */
    double start, end;
} calib_sample_t;

typedef struct calib_ctx {
    demo_t         *demo;
    int             session;
    nsp_plan_t     *plan[2];     /* small, large */
    calib_sample_t *samples;     /* shared: [2][reps][ranks] */
    char          (*notes)[256];
    volatile int   *ready;       /* shared: [ranks] */
} calib_ctx_t;

static nsp_status_t calib_one(calib_ctx_t *cx, nsp_comm_t *comm, nsp_nested_attn_t *attn,
                              float *const *buf, calib_sample_t *out)
{
    nsp_nested_attn_saved_t *saved = NULL;
    nsp_nested_attn_stats_t  sf, sb;
    double                   c0;
    nsp_status_t             status;

    (void)cx;
    NSP_CHECK(nsp_comm_barrier(comm));
    out->start = demo_now();
    c0 = demo_proc_cpu();
    NSP_CHECK(nsp_nested_attn_fwd(attn, buf[0], buf[1], buf[2], buf[4], (float *)buf[8],
                                  &saved, &sf));
    status = nsp_nested_attn_bwd(attn, saved, NULL, NULL, NULL, NULL, NULL, buf[3], buf[5],
                                 buf[6], buf[7], &sb);
    nsp_nested_attn_saved_free(saved);
    NSP_CHECK(status);
    out->end        = demo_now();
    out->xchg_cpu_s = demo_proc_cpu() - c0 - sf.compute_s - sb.compute_s;
    out->bytes      = (double)(sf.bytes_sent + sb.bytes_sent);
    return NSP_OK;
}

static int calib_rank_main(int rank, int nranks, void *arg)
{
    calib_ctx_t       *cx = arg;
    demo_t            *demo = cx->demo;
    nsp_comm_t        *comm = NULL;
    nsp_tree_t        *tree = NULL;
    nsp_layout_t      *lay[2] = {NULL, NULL};
    nsp_nested_attn_t *attn[2] = {NULL, NULL};
    float             *buf[2][9];
    nsp_config_t       cfg = NSP_CONFIG_INITIALIZER;
    nsp_status_t       status;

    memset(buf, 0, sizeof(buf));
    if (demo->session_tls[cx->session] != NULL) {
        setenv("UCX_TLS", demo->session_tls[cx->session], 1);
    }
    cfg.timeout_s = demo_comm_timeout(60); /* NSPCOMM_TIMEOUT when set */
    NSP_CHECK_GOTO(nsp_comm_init_rank(&comm, nranks, demo->id, rank, &cfg), status, out);
    NSP_CHECK_GOTO(nsp_tree_create(comm, NULL, 0, &tree), status, out);
    cx->ready[rank] = 1;
    for (int k = 0; k < 2; ++k) {
        nsp_layout_info_t        info;
        nsp_nested_attn_params_t p;
        size_t qf, kf;
        NSP_CHECK_GOTO(nsp_layout_create(cx->plan[k], 0, rank, &lay[k]), status, out);
        NSP_CHECK_GOTO(nsp_layout_query(lay[k], &info), status, out);
        /* +1: a rank holding no token still passes valid pointers */
        qf = (size_t)info.local_tokens * (size_t)demo->attn.q_heads *
                 (size_t)demo->attn.head_dim + 1;
        kf = (size_t)info.local_tokens * (size_t)demo->attn.kv_heads *
                 (size_t)demo->attn.head_dim + 1;
        /* q k v dout o dq dk dv lse */
        for (int x = 0; x < 9; ++x) {
            size_t n = (x == 1 || x == 2 || x == 6 || x == 7) ? kf : qf;
            buf[k][x] = calloc(n, sizeof(float));
            if (buf[k][x] == NULL) {
                status = nsp_error(NSP_ERR_NO_MEMORY, "calibration: out of memory");
                goto out;
            }
        }
        memset(&p, 0, sizeof(p));
        p.attn = demo->attn;
        NSP_CHECK_GOTO(nsp_nested_attn_create(tree, lay[k], &p, &attn[k]), status, out);
    }
    for (int rep = -1; rep < CALIB_XCHG_REPS; ++rep) {   /* rep -1: warm-up */
        for (int k = 0; k < 2; ++k) {
            calib_sample_t s, *slot;
            NSP_CHECK_GOTO(calib_one(cx, comm, attn[k], buf[k], &s), status, out);
            if (rep >= 0) {
                slot = &cx->samples[((size_t)k * CALIB_XCHG_REPS + (size_t)rep) *
                                    (size_t)nranks + (size_t)rank];
                *slot = s;
            }
        }
    }
    status = NSP_OK;
out:
    if (status != NSP_OK) {
        snprintf(cx->notes[rank], 256, "calibration: %s", nsp_last_error());
        fprintf(stderr, "[nsp_demo rank %d] %s\n", rank, cx->notes[rank]);
        return 1; /* the process ends: nothing to unwind after a failed exchange */
    }
    for (int k = 0; k < 2; ++k) {
        nsp_nested_attn_destroy(attn[k]);
        nsp_layout_free(lay[k]);
        for (int x = 0; x < 9; ++x) {
            free(buf[k][x]);
        }
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    nsp_a2a_release_cache();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Exchange calibration: parent                                             */
/* ------------------------------------------------------------------------ */

/* The largest Ulysses degree <= ranks: it divides n_q, and divides n_kv or
 * is a multiple of it (nsp_plan_validate's rule). */
static int top_degree(const demo_t *demo)
{
    const int nq = demo->cfg.q_heads, nkv = demo->cfg.kv_heads;
    int       d  = demo->cfg.ranks;

    while (d > 1 && (nq % d != 0 || (nkv % d != 0 && d % nkv != 0))) {
        --d;
    }
    return d;
}

static nsp_status_t calib_plan(const demo_t *demo, int64_t seq_len, int d, nsp_plan_t **plan)
{
    nsp_cluster_t        c;
    nsp_planner_params_t pp;
    int                  n = (int)(CALIB_TOKENS_PER_RANK * demo->cfg.ranks / seq_len);
    int64_t             *lens = malloc(sizeof(int64_t) * (size_t)n);
    nsp_status_t         status;

    if (lens == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "calibration: out of memory");
    }
    if (seq_len == CALIB_SMALL_LEN) {
        n = d; /* one tiny sequence per group member's worth of chunks */
    }
    for (int i = 0; i < n; ++i) {
        lens[i] = seq_len;
    }
    calib_placeholder_cluster(demo->cfg.ranks, &c);
    memset(&pp, 0, sizeof(pp));
    pp.kind          = NSP_PLANNER_STATIC;
    pp.field_mask    = NSP_PLANNER_FIELD_STATIC_DEGREE | NSP_PLANNER_FIELD_STATIC_RECOMPUTE;
    pp.static_degree = d;
    pp.static_recompute = 0;
    status = nsp_plan_create(&demo->model, &c, lens, n, &pp, plan);
    free(lens);
    return status;
}

/* Over repetitions, of the mean over ranks of a field: the minimum for CPU
 * times (the run least disturbed by other work on the machine), the median
 * for bytes and wall time. */
static double sample_median(const calib_ctx_t *cx, int k, int nranks, int field)
{
    double       v[CALIB_XCHG_REPS];
    perf_stats_t st;

    for (int rep = 0; rep < CALIB_XCHG_REPS; ++rep) {
        const calib_sample_t *s = &cx->samples[((size_t)k * CALIB_XCHG_REPS + (size_t)rep) *
                                               (size_t)nranks];
        double sum = 0, t0 = INFINITY, t1 = -INFINITY;
        for (int r = 0; r < nranks; ++r) {
            sum += field == 0 ? s[r].xchg_cpu_s : s[r].bytes;
            t0 = fmin(t0, s[r].start);
            t1 = fmax(t1, s[r].end);
        }
        v[rep] = field == 2 ? t1 - t0 : sum / nranks;
    }
    perf_stats_of(v, CALIB_XCHG_REPS, &st);
    return field == 0 ? st.min : st.median;
}

nsp_status_t demo_calib_exchange(demo_t *demo, int s)
{
    const int    N = demo->cfg.ranks, d = top_degree(demo);
    demo_calib_t *k = &demo->calib[s];
    calib_ctx_t  cx;
    char         what[64];
    demo_watch_t watch;
    size_t       bytes = sizeof(calib_sample_t) * 2 * CALIB_XCHG_REPS * (size_t)N;
    double       extra_cpu, t0 = demo_now();
    nsp_status_t status;

    memset(&cx, 0, sizeof(cx));
    cx.demo    = demo;
    cx.session = s;
    if (d < 2) {
        return nsp_error(NSP_ERR_INVALID_ARG, "--ranks %d with %d query heads: no degree above "
                         "1 to exchange over; give at least 2 ranks and a q_heads they divide",
                         N, demo->cfg.q_heads);
    }
    cx.samples = demo_shared_alloc(bytes);
    cx.notes   = demo_shared_alloc(sizeof(*cx.notes) * DEMO_MAX_RANKS);
    cx.ready   = demo_shared_alloc(sizeof(int) * DEMO_MAX_RANKS);
    if (cx.samples == NULL || cx.notes == NULL || cx.ready == NULL) {
        status = nsp_error(NSP_ERR_NO_MEMORY, "calibration: cannot map shared memory");
        goto out;
    }
    NSP_CHECK_GOTO(calib_plan(demo, CALIB_SMALL_LEN, d, &cx.plan[0]), status, out);
    NSP_CHECK_GOTO(calib_plan(demo, CALIB_LARGE_LEN, d, &cx.plan[1]), status, out);
    watch.timeout_s = 300;
    watch.startup_s = 30;
    watch.ready     = cx.ready;
    watch.notes     = cx.notes;
    snprintf(what, sizeof(what), "the exchange calibration over UCX %s",
             demo->session_name[s]);
    NSP_CHECK_GOTO(demo_launch_retry(N, calib_rank_main, &cx, &demo->id, &watch, what),
                   status, out);
    k->xchg_small_cpu_s  = sample_median(&cx, 0, N, 0);
    k->xchg_large_cpu_s  = sample_median(&cx, 1, N, 0);
    k->xchg_large_bytes  = sample_median(&cx, 1, N, 1) - sample_median(&cx, 0, N, 1);
    k->xchg_large_wall_s = sample_median(&cx, 1, N, 2);
    extra_cpu = k->xchg_large_cpu_s - k->xchg_small_cpu_s;
    if (!(extra_cpu > 0) || !(k->xchg_large_bytes > 0)) {
        status = nsp_error(NSP_ERR_INTERNAL, "exchange calibration over UCX %s: %.3g bytes cost "
                           "%.3g s more CPU than a tiny exchange; is the machine overloaded? "
                           "give rates with --cluster-file", demo->session_name[s],
                           k->xchg_large_bytes, extra_cpu);
        goto out;
    }
    k->bw_fp32      = k->xchg_large_bytes / extra_cpu;
    k->lat_s        = k->xchg_small_cpu_s / NSP_COST_A2A_PER_LAYER;
    k->xchg_seconds = demo_now() - t0;
    status = NSP_OK;
out:
    nsp_plan_free(cx.plan[0]);
    nsp_plan_free(cx.plan[1]);
    demo_shared_free(cx.samples, bytes);
    demo_shared_free(cx.notes, sizeof(*cx.notes) * DEMO_MAX_RANKS);
    demo_shared_free((void *)cx.ready, sizeof(int) * DEMO_MAX_RANKS);
    return status;
}

void demo_cluster_path(const demo_t *demo, int s, char *out, size_t len)
{
    const char *path = demo->cfg.cluster_out, *dot;

    if (s == 0 || path == NULL) {
        snprintf(out, len, "%s", path != NULL ? path : "");
        return;
    }
    dot = strrchr(path, '.');
    if (dot == NULL || strchr(dot, '/') != NULL) {
        snprintf(out, len, "%s-%s", path, demo->session_name[s]);
    } else {
        snprintf(out, len, "%.*s-%s%s", (int)(dot - path), path, demo->session_name[s], dot);
    }
}

void demo_cluster_from_calib(const demo_config_t *cfg, const nsp_model_t *model,
                             const demo_calib_t *calib, nsp_cluster_t *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "demo-cpu-calibrated");
    c->ranks           = cfg->ranks;
    c->ranks_per_node  = cfg->ranks;    /* one host: every degree is intra-node */
    c->workspace_bytes = 0.0;
    /* memory: a rank holds at most mem_ratio x its token budget (docs/guide/demo.md) */
    c->mem_bytes  = demo_mem_bytes(model, cfg->ranks, 0.0,
                                   cfg->mem_ratio * (double)cfg->tokens_per_rank);
    c->gemm_flops = calib->gemm_flops;
    c->attn_flops = calib->attn_flops;
    /* the model counts bf16 (2-byte) elements, the demo moves float32 */
    c->bw_intra  = calib->bw_fp32 * (NSP_COST_DTYPE_BYTES / 4.0);
    c->bw_inter  = c->bw_intra;
    c->lat_intra = calib->lat_s;
    c->lat_inter = calib->lat_s;
    c->overlap   = cfg->overlap;
}

nsp_status_t demo_cluster_write(const char *path, const nsp_cluster_t *c,
                                const demo_calib_t *calib)
{
    FILE             *f = fopen(path, "w");
    nsp_json_writer_t w;
    char              note[512];
    nsp_status_t      status;

    if (f == NULL) {
        return nsp_error(NSP_ERR_IO, "cannot write %s: %s (--cluster-out)", path,
                         strerror(errno));
    }
    nsp_json_writer_init(&w, f, 2);
    nsp_json_begin_object(&w, NULL, 0);
    nsp_json_string(&w, "_comment", "Written by nsp_demo (tools/demo/): this machine, calibrated at "
                    "start (docs/guide/demo.md section 3). Rates are per rank as CPU time: one "
                    "core per rank. bw is in bf16 bytes/s (the cost model's unit): half the float32 "
                    "bytes/s measured.");
    snprintf(note, sizeof(note), "kernel fwd+bwd of %lld tokens in sequences of %lld, %lld, %lld, "
             "%lld: %.4g, %.4g, %.4g, %.4g s; exchange: %.4g bytes for %.4g s CPU beyond a tiny "
             "exchange of %.4g s CPU", (long long)calib->kern_tokens,
             (long long)calib->kern_len[0], (long long)calib->kern_len[1],
             (long long)calib->kern_len[2], (long long)calib->kern_len[3], calib->kern_s[0],
             calib->kern_s[1], calib->kern_s[2], calib->kern_s[3], calib->xchg_large_bytes,
             calib->xchg_large_cpu_s - calib->xchg_small_cpu_s, calib->xchg_small_cpu_s);
    nsp_json_string(&w, "_measured", note);
    nsp_cluster_write_fields(&w, c);
    nsp_json_end(&w);
    status = nsp_json_writer_finish(&w);
    fputc('\n', f);
    if (fclose(f) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return status;
}
