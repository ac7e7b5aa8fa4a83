/*
 * What one rank of the demo does in a session (see demo.h): join the world,
 * build the default tree, compute its share of the reference (first session),
 * then for every batch set up every plan's rounds (layout, inputs, one
 * nested attention per mode) and time one step -- every round forward and
 * backward -- per (planner, mode), `reps` times, planners and modes in a
 * rotating order so that a drift in the machine's load hits all alike. The
 * outputs of the last repetition of each (planner, mode) are checked against
 * the reference.
 */
#include "demo.h"

#include "common/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const demo_mode_names[DEMO_NMODES] = {"pipelined", "serial"};

/* One round of one plan on this rank. Buffers are the layout's
 * sequence-sharded [T_local, heads, D] (lse [T_local, n_q]). */
typedef struct rank_round {
    nsp_layout_t      *lay;
    nsp_nested_attn_t *attn[DEMO_NMODES];
    float             *q, *k, *v, *dout, *o, *lse, *dq, *dk, *dv;
} rank_round_t;

typedef struct rank_plan {
    int          nrounds;
    rank_round_t round[DEMO_MAX_ROUNDS];
} rank_plan_t;

static void rank_note(demo_t *demo, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rank_note(demo_t *demo, int rank, const char *fmt, ...)
{
    char   *note = demo->shared[demo->session].note[rank];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(note, 256, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[nsp_demo rank %d] %s\n", rank, note);
}

size_t demo_run_index(const demo_t *demo, int b, int p, int m, int rep, int rank)
{
    size_t x = (size_t)b;

    x = x * DEMO_NPLANNERS + (size_t)p;
    x = x * DEMO_NMODES + (size_t)m;
    x = x * (size_t)demo->cfg.reps + (size_t)rep;
    return x * (size_t)demo->cfg.ranks + (size_t)rank;
}

size_t demo_check_index(const demo_t *demo, int b, int p, int m, int rank)
{
    size_t x = (size_t)b;

    x = x * DEMO_NPLANNERS + (size_t)p;
    x = x * DEMO_NMODES + (size_t)m;
    return x * (size_t)demo->cfg.ranks + (size_t)rank;
}

int demo_degree_slot(const demo_t *demo, int degree)
{
    for (int i = 0; i < demo->ndegrees; ++i) {
        if (demo->degrees[i] == degree) {
            return i;
        }
    }
    return -1;
}

static void round_free(rank_round_t *x)
{
    for (int m = 0; m < DEMO_NMODES; ++m) {
        nsp_nested_attn_destroy(x->attn[m]);
    }
    nsp_layout_free(x->lay);
    free(x->q), free(x->k), free(x->v), free(x->dout), free(x->o), free(x->lse);
    free(x->dq), free(x->dk), free(x->dv);
    memset(x, 0, sizeof(*x));
}

/* This rank's chunks of tensor `tensor` of every sequence of the layout. */
static void fill_local(const demo_t *demo, const nsp_layout_t *lay, int tensor, int heads,
                       float *buf)
{
    nsp_layout_info_t info;
    const int         D = demo->attn.head_dim;

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(lay, l, &lv);
        for (int j = 0; j < lv.nseqs; ++j) {
            demo_fill(demo->cfg.seed, tensor, lv.seqs[j], lv.chunk_start[j], lv.chunk_len[j],
                      heads, D, buf + (size_t)lv.chunk_offset[j] * (size_t)heads * (size_t)D);
        }
    }
}

static nsp_status_t round_setup(demo_t *demo, nsp_tree_t *tree, const nsp_plan_t *plan,
                                int r, int rank, rank_round_t *x)
{
    const nsp_attn_params_t *a = &demo->attn;
    nsp_layout_info_t        info;
    size_t                   qf, kf, lf;
    nsp_status_t             status;

    NSP_CHECK(nsp_layout_create(plan, r, rank, &x->lay));
    NSP_CHECK(nsp_layout_query(x->lay, &info));
    /* +1: a rank holding no token still passes valid pointers */
    qf = (size_t)info.local_tokens * (size_t)a->q_heads * (size_t)a->head_dim + 1;
    kf = (size_t)info.local_tokens * (size_t)a->kv_heads * (size_t)a->head_dim + 1;
    lf = (size_t)info.local_tokens * (size_t)a->q_heads + 1;
    x->q = malloc(qf * 4), x->dout = malloc(qf * 4), x->o = malloc(qf * 4);
    x->dq = malloc(qf * 4), x->k = malloc(kf * 4), x->v = malloc(kf * 4);
    x->dk = malloc(kf * 4), x->dv = malloc(kf * 4), x->lse = malloc(lf * 4);
    if (!x->q || !x->dout || !x->o || !x->dq || !x->k || !x->v || !x->dk || !x->dv || !x->lse) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rank %d: cannot allocate round %d of %lld tokens",
                         rank, r, (long long)info.local_tokens);
    }
    fill_local(demo, x->lay, 0, a->q_heads, x->q);
    fill_local(demo, x->lay, 1, a->kv_heads, x->k);
    fill_local(demo, x->lay, 2, a->kv_heads, x->v);
    fill_local(demo, x->lay, 3, a->q_heads, x->dout);
    for (int m = 0; m < DEMO_NMODES; ++m) {
        nsp_nested_attn_params_t p;
        memset(&p, 0, sizeof(p));
        p.attn       = *a;
        p.field_mask = NSP_NESTED_ATTN_FIELD_SERIAL;
        p.serial     = m == DEMO_SERIAL;
        NSP_CHECK_GOTO(nsp_nested_attn_create(tree, x->lay, &p, &x->attn[m]), status, out);
    }
    status = NSP_OK;
out:
    return status;
}

static void plan_free(rank_plan_t *rp)
{
    for (int r = 0; r < rp->nrounds; ++r) {
        round_free(&rp->round[r]);
    }
    rp->nrounds = 0;
}

static nsp_status_t plan_setup(demo_t *demo, nsp_tree_t *tree, const nsp_plan_t *plan,
                               int rank, rank_plan_t *rp)
{
    memset(rp, 0, sizeof(*rp));
    if (plan->nrounds > DEMO_MAX_ROUNDS) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "a %s plan of %d rounds: the demo runs at most "
                         "%d (raise --mem-ratio)", plan->planner, plan->nrounds,
                         DEMO_MAX_ROUNDS);
    }
    for (int r = 0; r < plan->nrounds; ++r) {
        rp->nrounds = r + 1;
        NSP_CHECK(round_setup(demo, tree, plan, r, rank, &rp->round[r]));
    }
    return NSP_OK;
}

static void add_stats(const demo_t *demo, const nsp_nested_attn_stats_t *s, int fwd,
                      demo_rank_run_t *run)
{
    run->kernel_s += s->compute_s;
    run->wait_s += s->wait_s;
    for (int l = 0; l < s->nlevels; ++l) {
        const nsp_nested_attn_level_stats_t *L = &s->level[l];
        int                                  slot = demo_degree_slot(demo, L->degree);
        if (slot < 0) {
            continue; /* cannot happen: the degrees come from the plans */
        }
        run->deg_kernel_s[slot] += L->compute_s;
        run->deg_bytes[slot] += (double)(L->a2a_bytes + L->ring_bytes);
        if (fwd) {
            run->deg_tokens[slot] += (uint32_t)L->tokens;
        }
    }
}

/* One step of a plan: every round forward then backward (saved state). */
static nsp_status_t run_step(demo_t *demo, nsp_comm_t *comm, rank_plan_t *rp, int m,
                             demo_rank_run_t *run)
{
    double c0;

    memset(run, 0, sizeof(*run));
    NSP_CHECK(nsp_comm_barrier(comm));
    run->start = demo_now();
    c0 = demo_proc_cpu();
    for (int r = 0; r < rp->nrounds; ++r) {
        rank_round_t            *x = &rp->round[r];
        nsp_nested_attn_saved_t *saved = NULL;
        nsp_nested_attn_stats_t  sf, sb;
        double                   t = demo_proc_cpu(), t2;
        nsp_status_t             status;

        NSP_CHECK(nsp_nested_attn_fwd(x->attn[m], x->q, x->k, x->v, x->o, x->lse, &saved, &sf));
        t2 = demo_proc_cpu();
        run->call_busy_s[2 * r] = t2 - t;
        status = nsp_nested_attn_bwd(x->attn[m], saved, NULL, NULL, NULL, NULL, NULL, x->dout,
                                     x->dq, x->dk, x->dv, &sb);
        run->call_busy_s[2 * r + 1] = demo_proc_cpu() - t2;
        nsp_nested_attn_saved_free(saved);
        NSP_CHECK(status);
        add_stats(demo, &sf, 1, run);
        add_stats(demo, &sb, 0, run);
    }
    run->end    = demo_now();
    run->busy_s = demo_proc_cpu() - c0;
    return NSP_OK;
}

static void check_plan(const demo_t *demo, int b, const rank_plan_t *rp, demo_rank_check_t *chk)
{
    memset(chk, 0, sizeof(*chk));
    for (int r = 0; r < rp->nrounds; ++r) {
        const rank_round_t *x = &rp->round[r];
        demo_check(demo, b, x->lay, x->o, x->lse, x->dq, x->dk, x->dv, chk);
    }
}

/* Every plan of batch b: set up, time, check, free. */
static nsp_status_t run_batch(demo_t *demo, nsp_comm_t *comm, nsp_tree_t *tree, int b,
                              int rank)
{
    demo_shared_t *sh = &demo->shared[demo->session];
    rank_plan_t   *rp = calloc(DEMO_NPLANNERS, sizeof(*rp));
    nsp_status_t   status = NSP_OK;

    if (rp == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "rank %d: out of memory", rank);
    }
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        NSP_CHECK_GOTO(plan_setup(demo, tree, demo->plans[demo->session][b][p], rank, &rp[p]),
                       status, out);
    }
    /* One untimed step per plan and mode first: the first touches of the
     * driver's and the exchange's buffers (page faults) are not the step. */
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        for (int m = 0; m < DEMO_NMODES; ++m) {
            demo_rank_run_t warm;
            NSP_CHECK_GOTO(run_step(demo, comm, &rp[p], m, &warm), status, out);
        }
    }
    for (int rep = 0; rep < demo->cfg.reps; ++rep) {
        for (int k = 0; k < DEMO_NPLANNERS; ++k) {
            int p = (k + rep) % DEMO_NPLANNERS;
            for (int mm = 0; mm < DEMO_NMODES; ++mm) {
                int              m = (mm + rep + b) % DEMO_NMODES;
                demo_rank_run_t *run = &sh->runs[demo_run_index(demo, b, p, m, rep, rank)];
                NSP_CHECK_GOTO(run_step(demo, comm, &rp[p], m, run), status, out);
                if (rep == demo->cfg.reps - 1 && demo_checked(demo)) {
                    if (demo->cfg.inject_error && rank == 0 && rp[p].nrounds > 0) {
                        rp[p].round[0].o[0] += 1.0f; /* --inject-error */
                    }
                    check_plan(demo, b, &rp[p],
                               &sh->checks[demo_check_index(demo, b, p, m, rank)]);
                }
            }
        }
        if (rank == 0 && !demo->cfg.quiet) {
            fprintf(stderr, "[nsp_demo] %s: batch %d/%d, repetition %d/%d done\n",
                    demo->session_name[demo->session], b + 1, demo->nbatches, rep + 1,
                    demo->cfg.reps);
        }
    }
out:
    if (status != NSP_OK) {
        /* After a failed exchange the transport may still write into the
         * driver's buffers until the communicator is gone: the process ends
         * without freeing them (docs/reference/attention.md section 7). */
        return status;
    }
    for (int p = 0; p < DEMO_NPLANNERS; ++p) {
        plan_free(&rp[p]);
    }
    free(rp);
    return status;
}

int demo_rank_main(int rank, int nranks, void *arg)
{
    demo_t      *demo = arg;
    nsp_comm_t  *comm = NULL;
    nsp_tree_t  *tree = NULL;
    nsp_config_t cfg = NSP_CONFIG_INITIALIZER;
    nsp_status_t status;
    const char  *what = "setup";

    if (demo->session_tls[demo->session] != NULL) {
        setenv("UCX_TLS", demo->session_tls[demo->session], 1);
    }
    /* A rank may compute a long reference while the others wait at the
     * barrier after it (a few seconds at the default sizes). */
    cfg.timeout_s = demo_comm_timeout(300); /* NSPCOMM_TIMEOUT when set */
    NSP_CHECK_GOTO(nsp_comm_init_rank(&comm, nranks, demo->id, rank, &cfg), status, out);
    NSP_CHECK_GOTO(nsp_tree_create(comm, NULL, 0, &tree), status, out);
    demo->shared[demo->session].ready[rank] = 1;
    if (demo->session == 0 && demo_checked(demo)) {
        what = "reference";
        for (int b = 0; b < demo->nbatches; ++b) {
            NSP_CHECK_GOTO(demo_reference(demo, b, rank, nranks), status, out);
        }
        NSP_CHECK_GOTO(nsp_comm_barrier(comm), status, out);
        if (rank == 0 && !demo->cfg.quiet) {
            fprintf(stderr, "[nsp_demo] reference of %d batch%s computed\n", demo->nbatches,
                    demo->nbatches == 1 ? "" : "es");
        }
    }
    what = "run";
    for (int b = 0; b < demo->nbatches; ++b) {
        NSP_CHECK_GOTO(run_batch(demo, comm, tree, b, rank), status, out);
    }
    status = NSP_OK;
out:
    if (status != NSP_OK) {
        rank_note(demo, rank, "%s: %s", what, nsp_last_error());
    }
    nsp_tree_destroy(tree);
    nsp_comm_destroy(comm);
    nsp_a2a_release_cache();
    return status == NSP_OK ? 0 : 1;
}
