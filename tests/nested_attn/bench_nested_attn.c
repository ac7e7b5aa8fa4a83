/*
 * Pipelined against serial nested attention on N forked ranks over UCX
 * (built by `make check`, not run by it):
 *
 *   tests/nested_attn/bench_nested_attn [ranks tokens_per_rank max_len n_q n_kv D iters
 *                                        planner]
 *   defaults:                            8     1024            4096    8   2    32 5
 *                                        nested
 *
 * One long-tailed batch (seeded) is planned by the named planner (static,
 * disjoint, nested) for a one-node CPU cluster; every rank runs forward +
 * backward (saved state) of every round of the plan (one step) `iters` times
 * in each mode, alternating pipelined and serial, after a barrier. Step time
 * of an iteration = the slowest rank's wall time; the table gives the median
 * and minimum over the iterations and the thread CPU time in the kernel per
 * rank (mean and max: it holds on fewer cores than ranks); then rank 0's
 * levels (compute, time blocked on exchanges, bytes sent) per round.
 */
#include "nattn_test.h"
#include "../mp.h"
#include "nsp_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODES 2
#define MAX_ROUNDS 16

typedef struct bench {
    nsp_unique_id_t   id;
    nsp_plan_t       *plan;
    nt_ref_t          ref;
    nsp_attn_params_t attn;
    int               iters;
    double           *wall;    /* shared: [ranks][MODES][iters] seconds */
    double           *comp;    /* shared: [ranks][MODES][iters] thread CPU seconds */
    nsp_nested_attn_stats_t *lvl; /* shared: [MODES][rounds][2] rank 0's last fwd, bwd */
} bench_t;

/* One round on one rank: its layout, tensors and an attn per mode. */
typedef struct round {
    nsp_layout_t      *lay;
    nsp_nested_attn_t *attn[MODES];
    float             *q, *k, *v, *dout, *o, *lse, *dq, *dk, *dv;
} round_t;

static void round_free(round_t *x)
{
    for (int m = 0; m < MODES; ++m) {
        nsp_nested_attn_destroy(x->attn[m]);
    }
    nsp_layout_free(x->lay);
    free(x->q), free(x->k), free(x->v), free(x->dout), free(x->o), free(x->lse);
    free(x->dq), free(x->dk), free(x->dv);
    memset(x, 0, sizeof(*x));
}

static int round_setup(const bench_t *b, nsp_tree_t *tree, int rank, int r, round_t *x)
{
    nsp_layout_info_t info;
    size_t            qf, kf;
    int               nq = b->attn.q_heads, nkv = b->attn.kv_heads, D = b->attn.head_dim;

    if (nsp_layout_create(b->plan, r, rank, &x->lay) != NSP_OK ||
        nsp_layout_query(x->lay, &info) != NSP_OK) {
        mp_note("layout: %s", nsp_last_error());
        return -1;
    }
    qf = (size_t)info.local_tokens * (size_t)nq * (size_t)D + 1;
    kf = (size_t)info.local_tokens * (size_t)nkv * (size_t)D + 1;
    x->q = malloc(qf * 4), x->dout = malloc(qf * 4), x->o = malloc(qf * 4);
    x->dq = malloc(qf * 4), x->k = malloc(kf * 4), x->v = malloc(kf * 4);
    x->dk = malloc(kf * 4), x->dv = malloc(kf * 4);
    x->lse = malloc(((size_t)info.local_tokens * (size_t)nq + 1) * 4);
    if (!x->q || !x->dout || !x->o || !x->dq || !x->k || !x->v || !x->dk || !x->dv || !x->lse) {
        mp_note("no memory");
        return -1;
    }
    nt_gather(&b->ref, x->lay, b->ref.q, nq, D, x->q);
    nt_gather(&b->ref, x->lay, b->ref.k, nkv, D, x->k);
    nt_gather(&b->ref, x->lay, b->ref.v, nkv, D, x->v);
    nt_gather(&b->ref, x->lay, b->ref.dout, nq, D, x->dout);
    for (int m = 0; m < MODES; ++m) {
        nsp_nested_attn_params_t p;
        memset(&p, 0, sizeof(p));
        p.attn       = b->attn;
        p.field_mask = NSP_NESTED_ATTN_FIELD_SERIAL;
        p.serial     = m;
        if (nsp_nested_attn_create(tree, x->lay, &p, &x->attn[m]) != NSP_OK) {
            mp_note("create: %s", nsp_last_error());
            return -1;
        }
    }
    return 0;
}

static int rank_bench(int rank, int nranks, void *arg)
{
    bench_t                 *b = arg;
    nsp_comm_t              *comm = NULL;
    nsp_tree_t              *tree = NULL;
    round_t                  rd[MAX_ROUNDS];
    int                      nr = b->plan->nrounds, rc = 1;

    memset(rd, 0, sizeof(rd));
    if (mp_comm_tree(&b->id, rank, nranks, 120.0, 0, &comm, &tree) != 0) {
        goto out;
    }
    for (int r = 0; r < nr; ++r) {
        if (round_setup(b, tree, rank, r, &rd[r]) != 0) {
            goto out;
        }
    }
    for (int it = 0; it < b->iters; ++it) {
        for (int m = 0; m < MODES; ++m) {
            size_t slot = ((size_t)rank * MODES + (size_t)m) * (size_t)b->iters + (size_t)it;
            double t0;
            if (nsp_comm_barrier(comm) != NSP_OK) {
                mp_note("barrier: %s", nsp_last_error());
                goto out;
            }
            t0 = mp_now();
            b->comp[slot] = 0;
            for (int r = 0; r < nr; ++r) {
                nsp_nested_attn_saved_t *saved = NULL;
                nsp_nested_attn_stats_t  sf, sb;
                round_t                 *x = &rd[r];
                if (nsp_nested_attn_fwd(x->attn[m], x->q, x->k, x->v, x->o, x->lse, &saved,
                                        &sf) != NSP_OK ||
                    nsp_nested_attn_bwd(x->attn[m], saved, NULL, NULL, NULL, NULL, NULL,
                                        x->dout, x->dq, x->dk, x->dv, &sb) != NSP_OK) {
                    mp_note("run: %s", nsp_last_error());
                    nsp_nested_attn_saved_free(saved);
                    goto out;
                }
                nsp_nested_attn_saved_free(saved);
                b->comp[slot] += sf.compute_s + sb.compute_s;
                if (rank == 0) {
                    b->lvl[((size_t)m * (size_t)nr + (size_t)r) * 2]     = sf;
                    b->lvl[((size_t)m * (size_t)nr + (size_t)r) * 2 + 1] = sb;
                }
            }
            b->wall[slot] = mp_now() - t0;
        }
    }
    rc = 0;
out:
    for (int r = 0; r < nr; ++r) {
        round_free(&rd[r]);
    }
    mp_comm_tree_free(comm, tree);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static nsp_plan_t *make_plan(int nranks, int64_t tokens, int64_t max_len, int nq, int nkv,
                             int D, const char *planner)
{
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_planner_params_t pp;
    nsp_plan_t          *plan = NULL;
    int64_t             *lens = malloc(sizeof(int64_t) * 4096);
    int                  n = 0;
    uint64_t             rng = 2026;

    nt_model(nq, nkv, D, &model);
    nt_cluster(nranks, &cluster);
    for (int64_t sum = 0; sum < tokens && n < 4096; ++n) {
        lens[n] = nt_long_tailed(&rng, max_len);
        lens[n] = sum + lens[n] > tokens ? tokens - sum : lens[n];
        sum += lens[n];
    }
    memset(&pp, 0, sizeof(pp));
    pp.kind = strcmp(planner, "static") == 0     ? NSP_PLANNER_STATIC
              : strcmp(planner, "disjoint") == 0 ? NSP_PLANNER_DISJOINT
                                                 : NSP_PLANNER_NESTED;
    pp.field_mask   = NSP_PLANNER_FIELD_TIME_LIMIT;
    pp.time_limit_s = 1.0;
    if (nsp_plan_create(&model, &cluster, lens, n, &pp, &plan) != NSP_OK) {
        fprintf(stderr, "plan: %s\n", nsp_last_error());
        plan = NULL;
    }
    free(lens);
    return plan;
}

static void print_levels(const nsp_nested_attn_stats_t *s, const char *what)
{
    printf("  rank 0, %s: wall %.1f ms, compute %.1f ms, blocked %.1f ms, sent %.1f KiB\n",
           what, 1e3 * s->wall_s, 1e3 * s->compute_s, 1e3 * s->wait_s,
           (double)s->bytes_sent / 1024.0);
    for (int l = 0; l < s->nlevels; ++l) {
        const nsp_nested_attn_level_stats_t *L = &s->level[l];
        printf("    level %d: degree %2d (ring %d) %3d seqs %6lld tokens  compute %7.2f ms  "
               "blocked %7.2f ms  a2a %8.1f KiB  ring %8.1f KiB\n", l, L->degree, L->ring,
               L->nseqs, (long long)L->tokens, 1e3 * L->compute_s, 1e3 * L->wait_s,
               (double)L->a2a_bytes / 1024.0, (double)L->ring_bytes / 1024.0);
    }
}

/* The positional arguments [ranks tokens_per_rank max_len n_q n_kv D iters],
 * checked (tools/nsp_opt.h); 0, or nonzero after a message. */
static int bench_args(int argc, char **argv, int *nranks, int64_t *tpr, int64_t *max_len,
                      int *nq, int *nkv, int *D, int *iters)
{
    const char *p = "bench_nested_attn";

    return (argc > 1 && nsp_opt_int(p, "ranks", argv[1], 1, MP_MAX_RANKS, nranks) != NSP_OK) ||
           (argc > 2 && nsp_opt_i64(p, "tokens_per_rank", argv[2], 1, 1 << 24, tpr) != NSP_OK) ||
           (argc > 3 && nsp_opt_i64(p, "max_len", argv[3], 1, 1 << 24, max_len) != NSP_OK) ||
           (argc > 4 && nsp_opt_int(p, "n_q", argv[4], 1, 1024, nq) != NSP_OK) ||
           (argc > 5 && nsp_opt_int(p, "n_kv", argv[5], 1, 1024, nkv) != NSP_OK) ||
           (argc > 6 && nsp_opt_int(p, "D", argv[6], 1, 1024, D) != NSP_OK) ||
           (argc > 7 && nsp_opt_int(p, "iters", argv[7], 1, 100000, iters) != NSP_OK);
}

int main(int argc, char **argv)
{
    int         nranks = 8, nq = 8, nkv = 2, D = 32, iters = 5;
    int64_t     tpr = 1024, max_len = 4096;
    const int   bad = bench_args(argc, argv, &nranks, &tpr, &max_len, &nq, &nkv, &D, &iters);
    const char *planner = argc > 8 ? argv[8] : "nested";
    static const char *mode_name[MODES] = {"pipelined", "serial"};
    bench_t     b;
    mp_result_t res;
    size_t      nslots;
    double      med[MODES], mn[MODES], cpu[MODES], cpu_max[MODES];

    if (bad) {
        return NSP_OPT_EXIT_USAGE;
    }
    memset(&b, 0, sizeof(b));
    b.iters = iters;
    b.attn  = (nsp_attn_params_t)NSP_ATTN_PARAMS_INIT(nq, nkv, D);
    b.plan  = make_plan(nranks, tpr * nranks, max_len, nq, nkv, D, planner);
    if (b.plan == NULL || b.plan->nrounds > MAX_ROUNDS ||
        nt_ref_make(b.plan, &b.attn, 1, &b.ref) != 0) {
        return 1;
    }
    nslots = (size_t)nranks * MODES * (size_t)iters;
    b.wall = mp_shared_alloc(nslots * sizeof(double));
    b.comp = mp_shared_alloc(nslots * sizeof(double));
    b.lvl  = mp_shared_alloc(2 * MODES * (size_t)b.plan->nrounds *
                             sizeof(nsp_nested_attn_stats_t));
    if (b.wall == NULL || b.comp == NULL || b.lvl == NULL) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    printf("# nested attention, %d ranks, %s plan (%d sequences, %d rounds), "
           "%lld tokens/rank, max len %lld, n_q %d, n_kv %d, D %d, %d iterations\n", nranks,
           planner, b.plan->nseqs, b.plan->nrounds, (long long)tpr, (long long)max_len, nq, nkv,
           D, iters);
    fflush(stdout);
    if (mp_run_uid(nranks, 600.0, rank_bench, &b, &b.id, &res) != 0) {
        mp_diag(&res);
        return 1;
    }
    for (int m = 0; m < MODES; ++m) {
        double *step = calloc((size_t)iters, sizeof(double));
        cpu[m] = cpu_max[m] = 0;
        for (int r = 0; r < nranks; ++r) {
            double c = 0;
            for (int it = 0; it < iters; ++it) {
                size_t slot = ((size_t)r * MODES + (size_t)m) * (size_t)iters + (size_t)it;
                step[it] = b.wall[slot] > step[it] ? b.wall[slot] : step[it];
                c += b.comp[slot] / iters;
            }
            cpu[m] += c / nranks;
            cpu_max[m] = c > cpu_max[m] ? c : cpu_max[m];
        }
        qsort(step, (size_t)iters, sizeof(double), cmp_double);
        med[m] = step[iters / 2];
        mn[m]  = step[0];
        free(step);
    }
    printf("%-10s %12s %12s %14s %14s\n", "mode", "step_med_ms", "step_min_ms",
           "kernel_cpu_ms", "kernel_max_ms");
    for (int m = 0; m < MODES; ++m) {
        printf("%-10s %12.2f %12.2f %14.2f %14.2f\n", mode_name[m], 1e3 * med[m], 1e3 * mn[m],
               1e3 * cpu[m], 1e3 * cpu_max[m]);
    }
    printf("# serial / pipelined step time: median %.3f, min %.3f\n", med[1] / med[0],
           mn[1] / mn[0]);
    for (int m = 0; m < MODES; ++m) {
        for (int r = 0; r < b.plan->nrounds; ++r) {
            char what[64];
            size_t at = ((size_t)m * (size_t)b.plan->nrounds + (size_t)r) * 2;
            snprintf(what, sizeof(what), "%s forward, round %d", mode_name[m], r);
            print_levels(&b.lvl[at], what);
            snprintf(what, sizeof(what), "%s backward, round %d", mode_name[m], r);
            print_levels(&b.lvl[at + 1], what);
        }
    }
    nt_ref_free(&b.ref);
    nsp_plan_free(b.plan);
    return 0;
}
