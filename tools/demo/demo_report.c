/*
 * The demo's summaries, table and JSON (see demo.h, docs/guide/demo.md §4).
 *
 * Per (session, batch, planner, mode), over the repetitions:
 *   wall  = median of (last rank's end - first rank's start) of the step;
 *   crit  = median of sum over calls (each round's forward and backward) of
 *           the largest process CPU time a rank spent in that call: the step
 *           as it would take with one core per rank, without the waits of a
 *           rank for its group inside a call (every call starts with an
 *           agreement allgather over all ranks, so calls do not overlap);
 *   per-rank kernel and process CPU times of the repetition whose crit is
 *   the median.
 * Over batches, times are means per step and ratios are ratios of sums.
 */
#include "demo.h"

#include "common/json.h"
#include "common/log.h"
#include "planner/cost.h"
#include "planner/plan_internal.h"
#include "planner/planner_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;

    return a < b ? -1 : a > b;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double safe_ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

/* wall and crit of one repetition */
static void rep_times(const demo_t *demo, const demo_rank_run_t *runs, int ncalls, double *wall,
                     double *crit)
{
    const int N = demo->cfg.ranks;
    double    t0 = INFINITY, t1 = -INFINITY, c = 0;

    for (int r = 0; r < N; ++r) {
        t0 = fmin(t0, runs[r].start);
        t1 = fmax(t1, runs[r].end);
    }
    for (int k = 0; k < ncalls; ++k) {
        double worst = 0;
        for (int r = 0; r < N; ++r) {
            worst = fmax(worst, runs[r].call_busy_s[k]);
        }
        c += worst;
    }
    *wall = t1 - t0;
    *crit = c;
}

void demo_stat(const demo_t *demo, int session, int b, int p, int m, demo_stat_t *st)
{
    const demo_shared_t *sh = &demo->shared[session];
    const int            N = demo->cfg.ranks, R = demo->cfg.reps;
    const int            ncalls = 2 * demo->plans[session][b][p]->nrounds;
    double               wall[DEMO_MAX_REPS], crit[DEMO_MAX_REPS], sorted[DEMO_MAX_REPS];
    double               cpu[DEMO_MAX_REPS];
    int                  mid = 0;
    const demo_rank_run_t *runs;

    memset(st, 0, sizeof(*st));
    for (int rep = 0; rep < R; ++rep) {
        const demo_rank_run_t *rr = &sh->runs[demo_run_index(demo, b, p, m, rep, 0)];
        rep_times(demo, rr, ncalls, &wall[rep], &crit[rep]);
        sorted[rep] = crit[rep];
        cpu[rep] = 0;
        for (int r = 0; r < N; ++r) {
            cpu[rep] += rr[r].busy_s;
        }
    }
    st->cpu_s = median(cpu, R);
    st->crit_s = median(sorted, R);
    for (int rep = 0; rep < R; ++rep) {
        if (fabs(crit[rep] - st->crit_s) < fabs(crit[mid] - st->crit_s)) {
            mid = rep;
        }
    }
    st->wall_s = median(wall, R);
    runs = &sh->runs[demo_run_index(demo, b, p, m, mid, 0)];
    st->comp_max_s = st->busy_max_s = 0;
    for (int r = 0; r < N; ++r) {
        st->rank_kernel[r] = runs[r].kernel_s;
        st->rank_busy[r]   = runs[r].busy_s;
        st->comp_max_s     = fmax(st->comp_max_s, runs[r].kernel_s);
        st->comp_mean_s   += runs[r].kernel_s / N;
        st->busy_max_s     = fmax(st->busy_max_s, runs[r].busy_s);
        st->busy_mean_s   += runs[r].busy_s / N;
        for (int k = 0; k < demo->ndegrees; ++k) {
            st->rank_deg_kernel[r][k] = runs[r].deg_kernel_s[k];
            st->bytes_deg[k] += runs[r].deg_bytes[k];
        }
    }
}

/* One rank's predicted seconds per level slot in one round (x layers). */
typedef struct round_levels {
    double comp[DEMO_MAX_DEGREES];
    double comm[DEMO_MAX_DEGREES];
} round_levels_t;

/* Add one round of rank g to its serial time and its pipelined lower bound
 * (demo_pred_t): the compute is one resource (the device's kernels
 * serialise), the wire another, and a level's kernel needs its inputs'
 * exchange and precedes its outputs', so no schedule beats the longest of
 * sum c, sum x and max (c + x). An upper bound on what pipelining the
 * levels can give, tighter than hiding every exchange behind the whole
 * compute. */
static void add_round_bounds(const round_levels_t *lv, demo_pred_t *pred, int g)
{
    double sc = 0, sx = 0, chain = 0;

    for (int k = 0; k < DEMO_MAX_DEGREES; ++k) {
        sc += lv->comp[k];
        sx += lv->comm[k];
        chain = fmax(chain, lv->comp[k] + lv->comm[k]);
    }
    pred->rank_serial_s[g] += sc + sx;
    pred->rank_pipe_lb_s[g] += fmax(chain, fmax(sc, sx));
}

nsp_status_t demo_predict(const demo_t *demo, int session, int b, int p, demo_pred_t *pred)
{
    const nsp_plan_t      *plan = demo->plans[session][b][p];
    const int              N = plan->cluster.ranks;
    const double           L = plan->model.layers;
    nsp_cost_t             cost;
    nsp_rank_round_cost_t *rc = malloc(sizeof(*rc) * (size_t)N);
    round_levels_t        *lvl = malloc(sizeof(*lvl) * (size_t)N);
    double                 round_s;
    nsp_status_t           status;

    memset(pred, 0, sizeof(*pred));
    if (rc == NULL || lvl == NULL) {
        free(rc);
        free(lvl);
        return nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
    }
    NSP_CHECK_GOTO(nsp_cost_init(&cost, &plan->model, &plan->cluster), status, out);
    for (int r = 0; r < plan->nrounds; ++r) {
        const nsp_plan_round_t *pr = &plan->rounds[r];
        NSP_CHECK_GOTO(nsp_plan_eval_round(&cost, plan, r, rc, &round_s, 0, NULL, NULL), status,
                       out);
        for (int g = 0; g < N; ++g) {
            pred->rank_comp[g] += L * rc[g].comp_s;
            pred->rank_comm[g] += L * (rc[g].k_pipe_s + rc[g].k_seq_s);
            pred->rank_xcpu[g] += L * rc[g].xcpu_s;
            pred->rank_s[g] += L * rc[g].time_s;
        }
        /* the same formulas per group, kept per degree for the picture */
        memset(lvl, 0, sizeof(*lvl) * (size_t)N);
        for (int gi = 0; gi < pr->ngroups; ++gi) {
            const nsp_plan_group_t *grp = &pr->groups[gi];
            const double rcf = grp->recompute ? NSP_COST_RECOMPUTE_COMP : 1.0;
            const double rcb = grp->recompute ? NSP_COST_RECOMPUTE_A2A : 1.0;
            double       comp = 0, bytes = 0, k;
            int          slot = demo_degree_slot(demo, grp->size);
            for (int i = 0; i < grp->nseqs; ++i) {
                double s = (double)plan->seq_lens[grp->seqs[i]];
                comp += rcf * nsp_cost_comp(&cost, s, grp->size);
                bytes += rcb * nsp_cost_a2a_bytes(&cost, s, grp->size);
            }
            k = grp->nseqs > 0 ? nsp_cost_a2a_time(&cost, bytes, grp->size) : 0.0;
            for (int g = grp->rank0; slot >= 0 && g < grp->rank0 + grp->size; ++g) {
                pred->rank_deg_comp[g][slot] += L * comp;
                pred->rank_deg_comm[g][slot] += L * k;
                lvl[g].comp[slot] += L * comp;
                lvl[g].comm[slot] += L * k;
            }
        }
        for (int g = 0; g < N; ++g) {
            add_round_bounds(&lvl[g], pred, g);
        }
    }
    pred->step_s = plan->predicted.step_s;
    for (int g = 0; g < N; ++g) {
        pred->comp_max_s = fmax(pred->comp_max_s, pred->rank_comp[g]);
        pred->comp_mean_s += pred->rank_comp[g] / N;
    }
    status = NSP_OK;
out:
    free(lvl);
    free(rc);
    return status;
}

int demo_check_result(const demo_t *demo, int session, int b, int p, int m,
                      double err[DEMO_NTENSORS])
{
    const demo_shared_t *sh = &demo->shared[session];
    double               diff[DEMO_NTENSORS] = {0}, ref[DEMO_NTENSORS] = {0};
    int                  ok = 1;

    for (int r = 0; r < demo->cfg.ranks; ++r) {
        const demo_rank_check_t *c = &sh->checks[demo_check_index(demo, b, p, m, r)];
        if (!c->done) {
            ok = 0;
        }
        for (int t = 0; t < DEMO_NTENSORS; ++t) {
            diff[t] = fmax(diff[t], c->max_diff[t]);
            ref[t]  = fmax(ref[t], c->max_ref[t]);
            if (!(c->max_diff[t] == c->max_diff[t])) {
                diff[t] = INFINITY;
            }
        }
    }
    for (int t = 0; t < DEMO_NTENSORS; ++t) {
        /* lse is a log: relative to max(1, |lse|) (docs/reference/attention.md §8) */
        double scale = t == DEMO_LSE ? fmax(1.0, ref[t]) : ref[t];
        err[t] = scale > 0 ? diff[t] / scale : diff[t];
        if (!(err[t] <= demo->cfg.tol)) {
            ok = 0;
        }
    }
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Aggregates over batches                                                  */
/* ------------------------------------------------------------------------ */

typedef struct agg {
    double wall[DEMO_NMODES], crit[DEMO_NMODES], cpu[DEMO_NMODES];
    double comp_max, comp_mean, busy_max, busy_mean;
    double bytes_deg[DEMO_MAX_DEGREES];
    double pred_step, pred_comp_max, pred_comp_mean;
    double rounds;
} agg_t;

/* Sums over batches of one planner in one session (pipelined mode for the
 * per-rank figures; wall and crit of both modes). */
static nsp_status_t aggregate(const demo_t *demo, int session, int p, agg_t *a)
{
    memset(a, 0, sizeof(*a));
    for (int b = 0; b < demo->nbatches; ++b) {
        demo_pred_t *pred = malloc(sizeof(*pred));
        demo_stat_t *st = malloc(sizeof(*st));
        if (pred == NULL || st == NULL) {
            free(pred);
            free(st);
            return nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
        }
        for (int m = 0; m < DEMO_NMODES; ++m) {
            demo_stat(demo, session, b, p, m, st);
            a->wall[m] += st->wall_s;
            a->crit[m] += st->crit_s;
            a->cpu[m] += st->cpu_s;
        }
        demo_stat(demo, session, b, p, DEMO_PIPELINED, st);
        a->comp_max += st->comp_max_s;
        a->comp_mean += st->comp_mean_s;
        a->busy_max += st->busy_max_s;
        a->busy_mean += st->busy_mean_s;
        for (int k = 0; k < demo->ndegrees; ++k) {
            a->bytes_deg[k] += st->bytes_deg[k];
        }
        if (demo_predict(demo, session, b, p, pred) != NSP_OK) {
            free(pred);
            free(st);
            return NSP_ERR_INTERNAL;
        }
        a->pred_step += pred->step_s;
        a->pred_comp_max += pred->comp_max_s;
        a->pred_comp_mean += pred->comp_mean_s;
        a->rounds += demo->plans[session][b][p]->nrounds;
        free(pred);
        free(st);
    }
    return NSP_OK;
}

void demo_print_header(const demo_t *demo)
{
    const demo_config_t *c = &demo->cfg;
    int64_t              tokens = 0;
    int                  seqs = 0;
    int64_t              longest = 0;

    for (int b = 0; b < demo->nbatches; ++b) {
        seqs += demo->nseqs[b];
        tokens += demo->offsets[b][demo->nseqs[b]];
        for (int i = 0; i < demo->nseqs[b]; ++i) {
            longest = demo->lens[b][i] > longest ? demo->lens[b][i] : longest;
        }
    }
    printf("# nspcomm demo: nested sequence-parallel attention, %d local ranks over UCX\n",
           c->ranks);
    printf("# flags    : --ranks %d --workload %s --scale %d --tokens-per-rank %lld --max-len "
           "%lld\n#            --mem-ratio %g --batches %d --seed %llu --reps %d --heads %d/%d "
           "--head-dim %d\n#            --overlap %g --time-limit %g --tol %g %s\n",
           c->ranks, c->workload, c->scale, (long long)c->tokens_per_rank,
           (long long)c->max_len, c->mem_ratio, c->batches, (unsigned long long)c->seed,
           c->reps, c->q_heads, c->kv_heads, c->head_dim, c->overlap, c->time_limit_s, c->tol,
           c->tcp ? "--tcp" : "--no-tcp");
    if (c->lengths != NULL) {
        printf("# lengths  : --lengths %s (one batch as given, no workload drawn)\n", c->lengths);
    }
    if (c->nested_plan != NULL) {
        printf("# nested   : --nested-plan %s (this plan in the nested planner's place)\n",
               c->nested_plan);
    }
    if (c->mem_from_ratio && c->cluster_file != NULL) {
        printf("# memory   : --mem-from-ratio: %g x %lld tokens per rank, not the file's\n",
               c->mem_ratio, (long long)c->tokens_per_rank);
    }
    printf("# batches  : %d batches, %d sequences, %lld tokens (mean %.0f per sequence, "
           "longest %lld)\n", demo->nbatches, seqs, (long long)tokens,
           seqs > 0 ? (double)tokens / seqs : 0.0, (long long)longest);
    printf("# model    : %s: one attention layer, %d query / %d KV heads x %d, float32, "
           "causal\n", demo->model.name, demo->model.q_heads, demo->model.kv_heads,
           demo->model.head_dim);
    {
        char label[160];
        demo_compute_label(demo, label, sizeof(label));
        printf("# compute  : %s", label);
        if (demo->compute.emulated) {
            printf(": kernels take %s's time x %.4g (its R_attn %.3g FLOP/s / the scale = "
                   "%.3g here; scale = bw %s %.3g / %.3g B/s of %s); --device %s",
                   demo->compute.timing.target.cluster.name, demo->compute.timing.scale,
                   demo->compute.timing.target.cluster.attn_flops,
                   demo->compute.timing.target.cluster.attn_flops / demo->compute.timing.scale,
                   nsp_emu_link_name(demo->compute.cfg.link), demo->compute.timing.bw_target,
                   demo->compute.timing.bw_here, demo->compute.cfg.here, c->device);
        }
        printf("\n");
    }
    if (demo->calib[0].done) {
        const demo_calib_t *k = &demo->calib[0];
        printf("# calibrated on this machine, as CPU time of one rank (one core per rank):\n");
        printf("#   kernel fwd+bwd of %lld tokens in sequences of %lld/%lld/%lld/%lld: "
               "%.0f/%.0f/%.0f/%.0f ms -> R_attn %.3g FLOP/s + %.2f us per token\n",
               (long long)k->kern_tokens, (long long)k->kern_len[0], (long long)k->kern_len[1],
               (long long)k->kern_len[2], (long long)k->kern_len[3], 1e3 * k->kern_s[0],
               1e3 * k->kern_s[1], 1e3 * k->kern_s[2], 1e3 * k->kern_s[3], k->attn_flops,
               1e6 * k->per_token_s);
        for (int s = 0; s < demo->nsessions; ++s) {
            printf("#   exchange over UCX %-4s: %.3g GB/s of float32 per CPU second of a rank, "
                   "%.3g ms CPU per level (fwd+bwd)\n", demo->session_name[s],
                   1e-9 * demo->calib[s].bw_fp32, 1e3 * 4 * demo->calib[s].lat_s);
        }
    } else {
        printf("# rates    : from --cluster-file %s (not calibrated)\n", c->cluster_file);
    }
    for (int s = 0; s < demo->nsessions; ++s) {
        const nsp_cluster_t *cl = &demo->cluster[s];
        /* tokens of activations the memory holds beside the fixed part */
        double m0 = demo_mem_bytes(&demo->model, cl->ranks, cl->workspace_bytes, 0.0);
        double m1 = demo_mem_bytes(&demo->model, cl->ranks, cl->workspace_bytes, 1.0);
        printf("# cluster  : %s: %d ranks, %.1f MiB per rank (holds %.0f tokens), R_attn %.3g, "
               "R_gemm %.3g, bw %.3g B/s (bf16), lat %.3g s, overlap %.2f\n", cl->name,
               cl->ranks, cl->mem_bytes / 1048576.0, safe_ratio(cl->mem_bytes - m0, m1 - m0),
               cl->attn_flops, cl->gemm_flops, cl->bw_intra, cl->lat_intra, cl->overlap);
    }
    printf("# planning :");
    for (int s = 0; s < demo->nsessions; ++s) {
        printf(" %.2f s (UCX %s)", demo->plan_s[s], demo->session_name[s]);
    }
    printf(" for %d batches x %d planners; disjoint: MILP limit %g s per round\n",
           demo->nbatches, DEMO_NPLANNERS, c->time_limit_s);
}

static void bytes_string(const demo_t *demo, const double *bytes, double per, char *out,
                         size_t len)
{
    size_t at = 0;

    out[0] = '\0';
    for (int k = 0; k < demo->ndegrees && at + 1 < len; ++k) {
        if (demo->degrees[k] == 1) {
            continue; /* level 0 moves nothing */
        }
        if (bytes[k] <= 0) {
            continue;
        }
        at += (size_t)snprintf(out + at, len - at, "%sd%d:%.1f", at > 0 ? " " : "",
                               demo->degrees[k], bytes[k] / per / 1048576.0);
    }
    if (at == 0) {
        snprintf(out, len, "-");
    }
}

enum { METRIC_WALL, METRIC_CRIT, METRIC_IMBAL };

/* One repetition's wall, crit or compute imbalance (max/mean kernel CPU). */
static double rep_metric(const demo_t *demo, int s, int b, int p, int m, int rep, int what)
{
    const demo_rank_run_t *rr = &demo->shared[s].runs[demo_run_index(demo, b, p, m, rep, 0)];
    const int              N = demo->cfg.ranks;
    double                 wall, crit, mx = 0, mean = 0;

    rep_times(demo, rr, 2 * demo->plans[s][b][p]->nrounds, &wall, &crit);
    for (int r = 0; r < N; ++r) {
        mx = fmax(mx, rr[r].kernel_s);
        mean += rr[r].kernel_s / N;
    }
    return what == METRIC_WALL ? wall : what == METRIC_CRIT ? crit : safe_ratio(mx, mean);
}

/*
 * A paired verdict: planners and modes of one repetition run back to back
 * (section 4 of docs/guide/demo.md), so compare a figure of (p1, m1) with (p2,
 * m2) repetition by repetition, batch by batch. "met" when (p2, m2) is
 * lower (better) in at least 80% of the pairs, "NOT met" when higher in at
 * least 80%, else "within noise"; with the count.
 */
static const char *paired(const demo_t *demo, int s, int p1, int m1, int p2, int m2, int what,
                          char *buf, size_t len, int *verdict_out)
{
    int n = 0, better = 0, verdict;

    for (int b = 0; b < demo->nbatches; ++b) {
        for (int rep = 0; rep < demo->cfg.reps; ++rep) {
            better += rep_metric(demo, s, b, p2, m2, rep, what) <
                      rep_metric(demo, s, b, p1, m1, rep, what);
            ++n;
        }
    }
    verdict = 5 * better >= 4 * n ? 1 : 5 * (n - better) >= 4 * n ? -1 : 0;
    snprintf(buf, len, "%s (better in %d of %d paired repetitions)",
             verdict > 0 ? "met" : verdict < 0 ? "NOT met" : "within noise", better, n);
    if (verdict_out != NULL) {
        *verdict_out = verdict;
    }
    return buf;
}

static void print_session(const demo_t *demo, int s, const agg_t *a)
{
    const double nb = demo->nbatches;

    char label[160];

    demo_compute_label(demo, label, sizeof(label));
    printf("#\n# measured over UCX %-4s, levels pipelined, %s | predicted (cost model)\n",
           demo->session_name[s], label);
    printf("# %-8s %6s %8s %9s %6s %8s %8s %8s %5s | %8s %6s | %s\n", "planner", "rounds",
           "comp_max", "comp_mean", "imbal", "crit_ms", "cpu_ms", "wall_ms", "cores", "step_ms",
           "imbal", "MiB sent per level (all ranks)");
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        const agg_t *x = &a[p];
        char         bytes[256];
        bytes_string(demo, x->bytes_deg, nb, bytes, sizeof(bytes));
        printf("  %-8s %6.2f %8.1f %9.1f %6.3f %8.1f %8.1f %8.1f %5.2f | %8.1f %6.3f | %s\n",
               demo_planner_names[p], x->rounds / nb, 1e3 * x->comp_max / nb,
               1e3 * x->comp_mean / nb, safe_ratio(x->comp_max, x->comp_mean),
               1e3 * x->crit[DEMO_PIPELINED] / nb, 1e3 * x->cpu[DEMO_PIPELINED] / nb,
               1e3 * x->wall[DEMO_PIPELINED] / nb,
               safe_ratio(x->cpu[DEMO_PIPELINED], x->wall[DEMO_PIPELINED]),
               1e3 * x->pred_step / nb, safe_ratio(x->pred_comp_max, x->pred_comp_mean), bytes);
    }
}

int demo_print_table(const demo_t *demo)
{
    agg_t  a[DEMO_MAX_SESSIONS][DEMO_NPLANNERS];
    int    failed = 0, runs = 0;
    double worst[DEMO_NTENSORS] = {0};

    for (int s = 0; s < demo->nsessions; ++s) {
        for (int p = 0; p < DEMO_NPLANNERS; ++p) {
            if (aggregate(demo, s, p, &a[s][p]) != NSP_OK) {
                fprintf(stderr, "nsp_demo: %s\n", nsp_last_error());
                return 1;
            }
        }
    }
    printf("#\n# One step = every round of the plan, one attention layer forward + backward; "
           "means per step over %d batch%s.\n", demo->nbatches, demo->nbatches == 1 ? "" : "es");
    printf("# comp: kernel thread CPU per rank (max, mean; imbal = max/mean). crit: sum over the "
           "step's calls of the busiest\n# rank's CPU time in the call = the step with one core "
           "per rank (docs/guide/demo.md). cpu: all ranks' CPU time.\n# wall: first start to last "
           "end on this host's %ld cores, shared; cores = cpu / wall, the cores the ranks got.\n",
           demo_ncores());
    for (int s = 0; s < demo->nsessions; ++s) {
        print_session(demo, s, a[s]);
    }
    printf("#\n# speedup of nested (levels pipelined)   predicted   crit (measured)   wall "
           "(measured)\n");
    for (int s = 0; s < demo->nsessions; ++s) {
        const agg_t *n = &a[s][2];
        for (int p = 0; p < DEMO_NPLANNERS; ++p) {
            const agg_t *o = &a[s][p];
            char         pred[16];
            if (p == 2) {
                continue; /* nested itself */
            }
            snprintf(pred, sizeof(pred), "%6.3fx", safe_ratio(o->pred_step, n->pred_step));
            printf("#   over %-8s (UCX %-4s)              %s      %6.3fx           %6.3fx\n",
                   demo_planner_names[p], demo->session_name[s], pred,
                   safe_ratio(o->crit[DEMO_PIPELINED], n->crit[DEMO_PIPELINED]),
                   safe_ratio(o->wall[DEMO_PIPELINED], n->wall[DEMO_PIPELINED]));
        }
    }
    printf("#\n# pipelining: step time with levels run one after another (serial) / pipelined\n");
    for (int s = 0; s < demo->nsessions; ++s) {
        for (int p = 0; p < DEMO_NPLANNERS; ++p) {
            const agg_t *x = &a[s][p];
            printf("#   UCX %-4s %-8s  wall %7.1f / %7.1f ms = %.3fx   crit %7.1f / %7.1f ms = "
                   "%.3fx\n", demo->session_name[s], demo_planner_names[p],
                   1e3 * x->wall[DEMO_SERIAL] / demo->nbatches,
                   1e3 * x->wall[DEMO_PIPELINED] / demo->nbatches,
                   safe_ratio(x->wall[DEMO_SERIAL], x->wall[DEMO_PIPELINED]),
                   1e3 * x->crit[DEMO_SERIAL] / demo->nbatches,
                   1e3 * x->crit[DEMO_PIPELINED] / demo->nbatches,
                   safe_ratio(x->crit[DEMO_SERIAL], x->crit[DEMO_PIPELINED]));
        }
    }
    printf("#\n# targets (issue 4), judged repetition by repetition (planners and modes of a "
           "repetition run back to back):\n# met = better in at least 80%% of the pairs, NOT met "
           "= worse in 80%%, else within noise\n");
    for (int s = 0; s < demo->nsessions; ++s) {
        const agg_t *st = &a[s][0], *n = &a[s][2];
        char         b1[96], b2[96], b3[96], b4[96];
        printf("#   UCX %-4s nested compute imbalance %.3f < static %.3f: %s\n",
               demo->session_name[s], safe_ratio(n->comp_max, n->comp_mean),
               safe_ratio(st->comp_max, st->comp_mean),
               paired(demo, s, 0, DEMO_PIPELINED, 2, DEMO_PIPELINED, METRIC_IMBAL, b1,
                      sizeof(b1), NULL));
        printf("#            nested step < static: crit %.3fx %s\n",
               safe_ratio(st->crit[DEMO_PIPELINED], n->crit[DEMO_PIPELINED]),
               paired(demo, s, 0, DEMO_PIPELINED, 2, DEMO_PIPELINED, METRIC_CRIT, b2,
                      sizeof(b2), NULL));
        printf("#                                  wall %.3fx %s\n",
               safe_ratio(st->wall[DEMO_PIPELINED], n->wall[DEMO_PIPELINED]),
               paired(demo, s, 0, DEMO_PIPELINED, 2, DEMO_PIPELINED, METRIC_WALL, b3,
                      sizeof(b3), NULL));
        printf("#            levels pipelined < serial (nested, wall): %.3fx %s\n",
               safe_ratio(n->wall[DEMO_SERIAL], n->wall[DEMO_PIPELINED]),
               paired(demo, s, 2, DEMO_SERIAL, 2, DEMO_PIPELINED, METRIC_WALL, b4, sizeof(b4),
                      NULL));
    }
    if (!demo_checked(demo)) {
        printf("#\n# check: not run: emulated compute in timing mode (the kernels do no math; "
               "a FILE with \"math\": true checks every run)\n");
        return 0;
    }
    for (int s = 0; s < demo->nsessions; ++s) {
        for (int b = 0; b < demo->nbatches; ++b) {
            for (int p = 0; p < DEMO_NPLANNERS; ++p) {
                for (int m = 0; m < DEMO_NMODES; ++m) {
                    double err[DEMO_NTENSORS];
                    int    ok = demo_check_result(demo, s, b, p, m, err);
                    ++runs;
                    failed += !ok;
                    for (int t = 0; t < DEMO_NTENSORS; ++t) {
                        worst[t] = fmax(worst[t], err[t]);
                    }
                    if (!ok) {
                        printf("# CHECK FAILED: UCX %s, batch %d, %s, %s: relative errors o %.3g "
                               "lse %.3g dq %.3g dk %.3g dv %.3g (tolerance %.3g)\n",
                               demo->session_name[s], b, demo_planner_names[p],
                               demo_mode_names[m], err[0], err[1], err[2], err[3], err[4],
                               demo->cfg.tol);
                    }
                }
            }
        }
    }
    printf("#\n# check: %d of %d runs match the single-process reference (o, lse, dq, dk, dv of "
           "every rank within %.1g relative;\n#        worst: o %.2g, lse %.2g, dq %.2g, dk %.2g, "
           "dv %.2g)%s\n", runs - failed, runs, demo->cfg.tol, worst[0], worst[1], worst[2],
           worst[3], worst[4], failed ? "  FAILED" : "");
    return failed;
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                     */
/* ------------------------------------------------------------------------ */

static void json_array(nsp_json_writer_t *w, const char *key, const double *v, int n)
{
    nsp_json_begin_array(w, key, 1);
    for (int i = 0; i < n; ++i) {
        nsp_json_double(w, NULL, v[i]);
    }
    nsp_json_end(w);
}

static void json_bytes_per_degree(nsp_json_writer_t *w, const demo_t *demo, const double *bytes,
                                  double per)
{
    nsp_json_begin_object(w, "bytes_per_degree", 1);
    for (int k = 0; k < demo->ndegrees; ++k) {
        char key[16];
        snprintf(key, sizeof(key), "%d", demo->degrees[k]);
        nsp_json_double(w, key, bytes[k] / per);
    }
    nsp_json_end(w);
}

static void json_config(nsp_json_writer_t *w, const demo_t *demo)
{
    const demo_config_t *c = &demo->cfg;

    nsp_json_begin_object(w, "config", 0);
    nsp_json_int(w, "ranks", c->ranks);
    nsp_json_string(w, "workload", c->workload);
    if (c->lengths != NULL) {
        nsp_json_string(w, "lengths", c->lengths);
    } else {
        nsp_json_null(w, "lengths");
    }
    nsp_json_int(w, "scale", c->scale);
    nsp_json_int(w, "tokens_per_rank", c->tokens_per_rank);
    nsp_json_int(w, "max_len", c->max_len);
    nsp_json_double(w, "mem_ratio", c->mem_ratio);
    nsp_json_bool(w, "mem_from_ratio", c->mem_from_ratio);
    if (c->nested_plan != NULL) {
        nsp_json_string(w, "nested_plan", c->nested_plan);
    } else {
        nsp_json_null(w, "nested_plan");
    }
    nsp_json_int(w, "batches", c->batches);
    nsp_json_int(w, "seed", (int64_t)c->seed);
    nsp_json_int(w, "reps", c->reps);
    nsp_json_int(w, "q_heads", c->q_heads);
    nsp_json_int(w, "kv_heads", c->kv_heads);
    nsp_json_int(w, "head_dim", c->head_dim);
    nsp_json_double(w, "overlap", c->overlap);
    nsp_json_double(w, "time_limit_s", c->time_limit_s);
    nsp_json_double(w, "tolerance", c->tol);
    nsp_json_bool(w, "tcp", c->tcp);
    nsp_json_int(w, "host_cores", demo_ncores());
    nsp_json_begin_array(w, "sessions", 1);
    for (int s = 0; s < demo->nsessions; ++s) {
        nsp_json_string(w, NULL, demo->session_name[s]);
    }
    nsp_json_end(w);
    nsp_json_end(w);
}

/* "compute": what computed the kernels (docs/guide/demo.md section 5). */
static void json_compute(nsp_json_writer_t *w, const demo_t *demo)
{
    const demo_compute_t *x = &demo->compute;
    char                  label[160];

    demo_compute_label(demo, label, sizeof(label));
    nsp_json_begin_object(w, "compute", 1);
    nsp_json_string(w, "kind", x->emulated ? "emulated" : "real");
    nsp_json_string(w, "label", label);
    if (x->emulated) {
        nsp_json_string(w, "target", x->cfg.target_is_file ? x->timing.target.cluster.name
                                                           : x->cfg.target);
        nsp_json_double(w, "scale", x->timing.scale);
        nsp_json_string(w, "link", nsp_emu_link_name(x->cfg.link));
        nsp_json_bool(w, "math", x->cfg.math);
        nsp_json_double(w, "target_attn_flops", x->timing.target.cluster.attn_flops);
        nsp_json_double(w, "bw_target", x->timing.bw_target);
        nsp_json_double(w, "bw_here", x->timing.bw_here);
        nsp_json_string(w, "file", x->cfg.file);
    }
    nsp_json_end(w);
}

static void json_calib(nsp_json_writer_t *w, const demo_calib_t *k)
{
    nsp_json_begin_object(w, "calibration", 0);
    nsp_json_bool(w, "calibrated", k->done);
    if (k->done) {
        nsp_json_begin_array(w, "kernel_lengths", 1);
        for (int i = 0; i < DEMO_CALIB_LENGTHS; ++i) {
            nsp_json_int(w, NULL, k->kern_len[i]);
        }
        nsp_json_end(w);
        nsp_json_int(w, "kernel_tokens", k->kern_tokens);
        json_array(w, "kernel_fwd_bwd_s", k->kern_s, DEMO_CALIB_LENGTHS);
        nsp_json_double(w, "attn_flops", k->attn_flops);
        nsp_json_double(w, "per_token_s", k->per_token_s);
        nsp_json_double(w, "gemm_flops", k->gemm_flops);
        nsp_json_double(w, "exchange_small_cpu_s", k->xchg_small_cpu_s);
        nsp_json_double(w, "exchange_large_cpu_s", k->xchg_large_cpu_s);
        nsp_json_double(w, "exchange_large_bytes", k->xchg_large_bytes);
        nsp_json_double(w, "exchange_large_wall_s", k->xchg_large_wall_s);
        nsp_json_double(w, "bw_fp32_bytes_s", k->bw_fp32);
        nsp_json_double(w, "lat_s", k->lat_s);
        nsp_json_double(w, "kernel_seconds", k->kernel_seconds);
        nsp_json_double(w, "exchange_seconds", k->xchg_seconds);
    }
    nsp_json_end(w);
}

static void json_measured(nsp_json_writer_t *w, const demo_t *demo, int s, int b, int p, int m)
{
    const int    N = demo->cfg.ranks, R = demo->cfg.reps;
    const int    ncalls = 2 * demo->plans[s][b][p]->nrounds;
    demo_stat_t *st = malloc(sizeof(*st));
    double       wall[DEMO_MAX_REPS], crit[DEMO_MAX_REPS], err[DEMO_NTENSORS];
    int          ok;

    if (st == NULL) {
        nsp_json_null(w, demo_mode_names[m]);
        return;
    }
    for (int rep = 0; rep < R; ++rep) {
        rep_times(demo, &demo->shared[s].runs[demo_run_index(demo, b, p, m, rep, 0)], ncalls,
                  &wall[rep], &crit[rep]);
    }
    demo_stat(demo, s, b, p, m, st);
    ok = demo_check_result(demo, s, b, p, m, err);
    nsp_json_begin_object(w, demo_mode_names[m], 0);
    nsp_json_double(w, "wall_s", st->wall_s);
    nsp_json_double(w, "crit_s", st->crit_s);
    nsp_json_double(w, "cpu_s", st->cpu_s);
    json_array(w, "wall_s_reps", wall, R);
    json_array(w, "crit_s_reps", crit, R);
    nsp_json_double(w, "comp_max_s", st->comp_max_s);
    nsp_json_double(w, "comp_mean_s", st->comp_mean_s);
    nsp_json_double(w, "imbalance", safe_ratio(st->comp_max_s, st->comp_mean_s));
    nsp_json_double(w, "busy_max_s", st->busy_max_s);
    nsp_json_double(w, "busy_mean_s", st->busy_mean_s);
    json_array(w, "rank_kernel_s", st->rank_kernel, N);
    json_array(w, "rank_busy_s", st->rank_busy, N);
    json_bytes_per_degree(w, demo, st->bytes_deg, 1.0);
    nsp_json_begin_object(w, "check", 1);
    nsp_json_bool(w, "passed", ok);
    for (int t = 0; t < DEMO_NTENSORS; ++t) {
        nsp_json_double(w, demo_tensor_names[t], isfinite(err[t]) ? err[t] : 1e300);
    }
    nsp_json_end(w);
    nsp_json_end(w);
    free(st);
}

static nsp_status_t json_session_batch(nsp_json_writer_t *w, const demo_t *demo, int s, int b)
{
    const int    N = demo->cfg.ranks;
    demo_pred_t *pred = malloc(sizeof(*pred));

    if (pred == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
    }
    nsp_json_begin_object(w, NULL, 0);
    nsp_json_int(w, "index", b);
    nsp_json_double(w, "lower_bound_s", demo->lower_bound[s][b]);
    nsp_json_begin_object(w, "plans", 0);
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        if (demo_predict(demo, s, b, p, pred) != NSP_OK) {
            free(pred);
            return NSP_ERR_INTERNAL;
        }
        nsp_json_begin_object(w, demo_planner_names[p], 0);
        nsp_plan_write_json_to(demo->plans[s][b][p], w, "plan");
        nsp_json_begin_object(w, "predicted", 0);
        nsp_json_double(w, "step_s", pred->step_s);
        nsp_json_double(w, "comp_max_s", pred->comp_max_s);
        nsp_json_double(w, "comp_mean_s", pred->comp_mean_s);
        nsp_json_double(w, "imbalance", safe_ratio(pred->comp_max_s, pred->comp_mean_s));
        json_array(w, "rank_comp_s", pred->rank_comp, N);
        json_array(w, "rank_comm_s", pred->rank_comm, N);
        json_array(w, "rank_xcpu_s", pred->rank_xcpu, N);
        json_array(w, "rank_s", pred->rank_s, N);
        json_array(w, "rank_serial_s", pred->rank_serial_s, N);
        json_array(w, "rank_pipelined_lb_s", pred->rank_pipe_lb_s, N);
        nsp_json_end(w);
        nsp_json_begin_object(w, "measured", 0);
        for (int m = 0; m < DEMO_NMODES; ++m) {
            json_measured(w, demo, s, b, p, m);
        }
        nsp_json_end(w);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_end(w);
    free(pred);
    return NSP_OK;
}

static void json_session_summary(nsp_json_writer_t *w, const demo_t *demo, int s,
                                 const agg_t *a)
{
    const double nb = demo->nbatches;
    const agg_t *n = &a[2];

    nsp_json_begin_object(w, "summary", 0);
    nsp_json_string(w, "_about", "means per step over the batches; ratios of sums");
    nsp_json_begin_object(w, "planners", 0);
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        const agg_t *x = &a[p];
        nsp_json_begin_object(w, demo_planner_names[p], 0);
        nsp_json_double(w, "rounds", x->rounds / nb);
        nsp_json_double(w, "comp_max_s", x->comp_max / nb);
        nsp_json_double(w, "comp_mean_s", x->comp_mean / nb);
        nsp_json_double(w, "imbalance", safe_ratio(x->comp_max, x->comp_mean));
        nsp_json_double(w, "busy_max_s", x->busy_max / nb);
        nsp_json_double(w, "busy_mean_s", x->busy_mean / nb);
        nsp_json_double(w, "crit_s", x->crit[DEMO_PIPELINED] / nb);
        nsp_json_double(w, "cpu_s", x->cpu[DEMO_PIPELINED] / nb);
        nsp_json_double(w, "wall_s", x->wall[DEMO_PIPELINED] / nb);
        nsp_json_double(w, "cores_used", safe_ratio(x->cpu[DEMO_PIPELINED],
                                                    x->wall[DEMO_PIPELINED]));
        nsp_json_double(w, "crit_serial_s", x->crit[DEMO_SERIAL] / nb);
        nsp_json_double(w, "wall_serial_s", x->wall[DEMO_SERIAL] / nb);
        nsp_json_double(w, "predicted_step_s", x->pred_step / nb);
        nsp_json_double(w, "predicted_imbalance",
                        safe_ratio(x->pred_comp_max, x->pred_comp_mean));
        json_bytes_per_degree(w, demo, x->bytes_deg, nb);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_begin_object(w, "speedup_of_nested", 0);
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        char key[32];
        if (p == 2) {
            continue; /* nested itself */
        }
        snprintf(key, sizeof(key), "over_%s", demo_planner_names[p]);
        nsp_json_begin_object(w, key, 1);
        nsp_json_double(w, "predicted", safe_ratio(a[p].pred_step, n->pred_step));
        nsp_json_double(w, "crit", safe_ratio(a[p].crit[DEMO_PIPELINED], n->crit[DEMO_PIPELINED]));
        nsp_json_double(w, "wall", safe_ratio(a[p].wall[DEMO_PIPELINED], n->wall[DEMO_PIPELINED]));
        nsp_json_double(w, "cpu", safe_ratio(a[p].cpu[DEMO_PIPELINED], n->cpu[DEMO_PIPELINED]));
        nsp_json_end(w);
    }
    nsp_json_end(w);
    nsp_json_begin_object(w, "pipelining", 0);
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        nsp_json_begin_object(w, demo_planner_names[p], 1);
        nsp_json_double(w, "wall_serial_over_pipelined",
                        safe_ratio(a[p].wall[DEMO_SERIAL], a[p].wall[DEMO_PIPELINED]));
        nsp_json_double(w, "crit_serial_over_pipelined",
                        safe_ratio(a[p].crit[DEMO_SERIAL], a[p].crit[DEMO_PIPELINED]));
        nsp_json_end(w);
    }
    nsp_json_end(w);
    {
        static const char *const names[4] = {"nested_imbalance_below_static",
                                             "nested_crit_below_static",
                                             "nested_wall_below_static",
                                             "nested_pipelined_wall_below_serial"};
        static const int what[4] = {METRIC_IMBAL, METRIC_CRIT, METRIC_WALL, METRIC_WALL};
        nsp_json_begin_object(w, "targets", 0);
        nsp_json_string(w, "_about", "verdict: 1 met (better in >= 80% of the paired "
                        "repetitions), -1 not met (worse in >= 80%), 0 within noise");
        for (int t = 0; t < 4; ++t) {
            char buf[96];
            int  v;
            if (t < 3) {
                paired(demo, s, 0, DEMO_PIPELINED, 2, DEMO_PIPELINED, what[t], buf, sizeof(buf),
                       &v);
            } else {
                paired(demo, s, 2, DEMO_SERIAL, 2, DEMO_PIPELINED, what[t], buf, sizeof(buf), &v);
            }
            nsp_json_begin_object(w, names[t], 1);
            nsp_json_int(w, "verdict", v);
            nsp_json_string(w, "text", buf);
            nsp_json_end(w);
        }
        nsp_json_end(w);
    }
    nsp_json_end(w);
}

static void json_checks(nsp_json_writer_t *w, const demo_t *demo)
{
    int    runs = 0, passed = 0;
    double worst[DEMO_NTENSORS] = {0};

    for (int s = 0; s < demo->nsessions; ++s) {
        for (int b = 0; b < demo->nbatches; ++b) {
            for (int p = 0; p < DEMO_NPLANNERS; ++p) {
                for (int m = 0; m < DEMO_NMODES; ++m) {
                    double err[DEMO_NTENSORS];
                    ++runs;
                    passed += demo_check_result(demo, s, b, p, m, err);
                    for (int t = 0; t < DEMO_NTENSORS; ++t) {
                        worst[t] = fmax(worst[t], err[t]);
                    }
                }
            }
        }
    }
    nsp_json_begin_object(w, "checks", 1);
    nsp_json_bool(w, "checked", demo_checked(demo));
    if (!demo_checked(demo)) {
        runs = passed = 0; /* timing-only emulation: nothing to compare */
    }
    nsp_json_int(w, "runs", runs);
    nsp_json_int(w, "passed", passed);
    nsp_json_bool(w, "all_passed", runs == passed);
    nsp_json_double(w, "tolerance", demo->cfg.tol);
    for (int t = 0; t < DEMO_NTENSORS; ++t) {
        nsp_json_double(w, demo_tensor_names[t], isfinite(worst[t]) ? worst[t] : 1e300);
    }
    nsp_json_end(w);
}

static nsp_status_t json_sessions(nsp_json_writer_t *w, const demo_t *demo,
                                  agg_t (*a)[DEMO_NPLANNERS])
{
    nsp_json_begin_object(w, "sessions", 0);
    for (int s = 0; s < demo->nsessions; ++s) {
        char path[4096];
        nsp_json_begin_object(w, demo->session_name[s], 0);
        if (demo->session_tls[s] != NULL) {
            nsp_json_string(w, "ucx_tls", demo->session_tls[s]);
        } else {
            nsp_json_null(w, "ucx_tls");
        }
        json_calib(w, &demo->calib[s]);
        nsp_cluster_write_json(w, "cluster", &demo->cluster[s]);
        demo_cluster_path(demo, s, path, sizeof(path));
        nsp_json_string(w, "cluster_file", demo->calib[s].done ? path : "");
        nsp_json_double(w, "planning_s", demo->plan_s[s]);
        nsp_json_double(w, "runs_s", demo->session_s[s]);
        nsp_json_begin_array(w, "batches", 0);
        for (int b = 0; b < demo->nbatches; ++b) {
            NSP_CHECK(json_session_batch(w, demo, s, b));
        }
        nsp_json_end(w);
        json_session_summary(w, demo, s, a[s]);
        nsp_json_end(w);
    }
    nsp_json_end(w);
    return NSP_OK;
}

nsp_status_t demo_write_json(const demo_t *demo, const char *path, double total_s)
{
    agg_t            (*a)[DEMO_NPLANNERS] = calloc(DEMO_MAX_SESSIONS, sizeof(*a));
    FILE             *f = NULL;
    nsp_json_writer_t w;
    nsp_status_t      status;

    if (a == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "out of memory");
    }
    for (int s = 0; s < demo->nsessions; ++s) {
        for (int p = 0; p < DEMO_NPLANNERS; ++p) {
            NSP_CHECK_GOTO(aggregate(demo, s, p, &a[s][p]), status, out);
        }
    }
    f = fopen(path, "w");
    if (f == NULL) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s (--json)", path, strerror(errno));
        goto out;
    }
    nsp_json_writer_init(&w, f, 1);
    nsp_json_begin_object(&w, NULL, 0);
    nsp_json_string(&w, "format", "nspcomm-demo-v1");
    json_compute(&w, demo);
    json_config(&w, demo);
    nsp_model_write_json(&w, "model", &demo->model);
    nsp_json_begin_array(&w, "batches", 0);
    for (int b = 0; b < demo->nbatches; ++b) {
        int64_t longest = 0;
        for (int i = 0; i < demo->nseqs[b]; ++i) {
            longest = demo->lens[b][i] > longest ? demo->lens[b][i] : longest;
        }
        nsp_json_begin_object(&w, NULL, 1);
        nsp_json_int(&w, "index", b);
        nsp_json_int(&w, "nseqs", demo->nseqs[b]);
        nsp_json_int(&w, "tokens", demo->offsets[b][demo->nseqs[b]]);
        nsp_json_int(&w, "longest", longest);
        nsp_json_end(&w);
    }
    nsp_json_end(&w);
    NSP_CHECK_GOTO(json_sessions(&w, demo, a), status, out);
    json_checks(&w, demo);
    nsp_json_begin_object(&w, "timings", 1);
    nsp_json_double(&w, "total_s", total_s);
    nsp_json_double(&w, "kernel_calibration_s", demo->calib[0].kernel_seconds);
    nsp_json_end(&w);
    nsp_json_end(&w);
    status = nsp_json_writer_finish(&w);
    fputc('\n', f);
out:
    if (f != NULL && fclose(f) != 0 && status == NSP_OK) {
        status = nsp_error(NSP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    free(a);
    return status;
}
