/*
 * nsp_a2a_perf: the real plan (a batch of the workload planned by the
 * nested planner) and, per size, the plans each method runs: round 0
 * scaled, the same batch as one flat group, each degree alone
 * (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include "common/log.h"
#include "planner/plan_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A one-round plan from `groups` (borrowed, seqs copied) of `src` lengths. */
static nsp_plan_t *plan_from_groups(const nsp_plan_t *src, const int64_t *lens,
                                    const nsp_plan_group_t *groups, int ngroups)
{
    nsp_plan_t *plan;

    if (nsp_plan_alloc("perf", &src->model, &src->cluster, lens, src->nseqs, &plan) != NSP_OK) {
        return NULL;
    }
    plan->rounds  = calloc(1, sizeof(*plan->rounds));
    plan->nrounds = 1;
    plan->rounds[0].groups = calloc((size_t)(ngroups > 0 ? ngroups : 1), sizeof(nsp_plan_group_t));
    for (int g = 0; g < ngroups; ++g) {
        nsp_plan_group_t *pg = &plan->rounds[0].groups[plan->rounds[0].ngroups++];
        *pg      = groups[g];
        pg->seqs = a2a_xmalloc(sizeof(int) * (size_t)groups[g].nseqs);
        memcpy(pg->seqs, groups[g].seqs, sizeof(int) * (size_t)groups[g].nseqs);
    }
    return plan;
}

/* Tokens of round 0. */
static int64_t round0_tokens(const nsp_plan_t *plan)
{
    int64_t t = 0;

    for (int g = 0; g < plan->rounds[0].ngroups; ++g) {
        for (int j = 0; j < plan->rounds[0].groups[g].nseqs; ++j) {
            t += plan->seq_lens[plan->rounds[0].groups[g].seqs[j]];
        }
    }
    return t;
}

void a2a_plans_free(perf_plans_t *p)
{
    nsp_plan_free(p->nested);
    nsp_plan_free(p->flat);
    for (int l = 0; l < p->nlevels; ++l) {
        nsp_plan_free(p->level[l]);
    }
    memset(p, 0, sizeof(*p));
}

/* Scale round 0 of `real` to `bytes` per rank and derive the other plans. */
void a2a_plans_make(const perf_ctx_t *c, const nsp_plan_t *real, size_t bytes,
                       perf_plans_t *out)
{
    const nsp_plan_round_t *r0 = &real->rounds[0];
    double   tok_bytes = (double)c->opts.heads * c->opts.head_dim * (double)c->opts.elem;
    double   want = (double)bytes * c->nranks / tok_bytes;
    double   f = want / (double)round0_tokens(real);
    int64_t *lens = a2a_xmalloc(sizeof(int64_t) * (size_t)real->nseqs);
    int     *all = a2a_xmalloc(sizeof(int) * (size_t)real->nseqs);
    int      nall = 0;
    nsp_plan_group_t flat = {.rank0 = 0, .size = c->nranks, .ring = 1, .pipelined = 1};

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < real->nseqs; ++i) {
        lens[i] = (int64_t)llround((double)real->seq_lens[i] * f);
        lens[i] = lens[i] > 0 ? lens[i] : 1;
    }
    out->nested = plan_from_groups(real, lens, r0->groups, r0->ngroups);
    for (int g = 0; g < r0->ngroups; ++g) {
        const nsp_plan_group_t *pg = &r0->groups[g];
        int                     k;
        for (int j = 0; j < pg->nseqs; ++j) {
            all[nall++] = pg->seqs[j];
        }
        for (k = 0; k < out->nlevels && out->degree[k] != pg->size; ++k) {
        }
        if (k == out->nlevels && k < 32) {
            out->degree[out->nlevels++] = pg->size;
        }
    }
    for (int a = 0; a < out->nlevels; ++a) { /* ascending */
        for (int b = a + 1; b < out->nlevels; ++b) {
            if (out->degree[b] < out->degree[a]) {
                int t = out->degree[a];
                out->degree[a] = out->degree[b];
                out->degree[b] = t;
            }
        }
    }
    for (int l = 0; l < out->nlevels; ++l) {
        nsp_plan_group_t *gs = a2a_xmalloc(sizeof(*gs) * (size_t)r0->ngroups);
        int               n  = 0;
        for (int g = 0; g < r0->ngroups; ++g) {
            if (r0->groups[g].size == out->degree[l]) {
                gs[n++] = r0->groups[g];
            }
        }
        out->level[l] = plan_from_groups(real, lens, gs, n);
        free(gs);
    }
    flat.nseqs = nall;
    flat.seqs  = all;
    out->flat  = plan_from_groups(real, lens, &flat, 1);
    free(all);
    free(lens);
    if (out->nested == NULL || out->flat == NULL) {
        a2a_die(c, "cannot build the scaled plans");
    }
}

/* Round r's exchanging levels (degrees > 1 holding >= 5% of the round's
 * tokens) in *nbig, its tokens above degree 1 in *above. */
static void round_score(const nsp_plan_t *plan, int r, int *nbig, double *above)
{
    int    degs[64], nd = 0;
    double deg_tok[64] = {0}, tok = 0;

    *nbig  = 0;
    *above = 0;
    for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
        const nsp_plan_group_t *pg = &plan->rounds[r].groups[g];
        int k;
        for (k = 0; k < nd && degs[k] != pg->size; ++k) {
        }
        if (k == nd && nd < 64) {
            degs[nd++] = pg->size;
        }
        for (int j = 0; k < 64 && j < pg->nseqs; ++j) {
            deg_tok[k] += (double)plan->seq_lens[pg->seqs[j]];
            tok += (double)plan->seq_lens[pg->seqs[j]];
            *above += pg->size > 1 ? (double)plan->seq_lens[pg->seqs[j]] : 0.0;
        }
    }
    for (int k = 0; k < nd; ++k) { /* levels that carry real traffic */
        *nbig += degs[k] > 1 && deg_tok[k] >= 0.05 * tok;
    }
}

/* The round with the most exchanging levels, then the most tokens above
 * degree 1. */
static int best_round(const nsp_plan_t *plan)
{
    int    best = 0, best_levels = -1;
    double best_tokens = -1;

    for (int r = 0; r < plan->nrounds; ++r) {
        int    nbig;
        double above;
        round_score(plan, r, &nbig, &above);
        if (nbig > best_levels || (nbig == best_levels && above > best_tokens)) {
            best_levels = nbig;
            best_tokens = above;
            best        = r;
        }
    }
    return best;
}

nsp_plan_t *a2a_real_plan(perf_ctx_t *c)
{
    nsp_model_t          model;
    nsp_cluster_t        cluster;
    nsp_workload_t      *wl;
    int64_t             *lens;
    int                  n;
    nsp_planner_params_t pp;
    nsp_plan_t          *plan;
    nsp_status_t         st;

    PCHECK(c, nsp_model_preset(c->opts.model, &model), "model");
    PCHECK(c, nsp_cluster_preset(c->opts.cluster, 8, &cluster), "cluster");
    if (c->nranks % cluster.ranks_per_node != 0) {
        cluster.ranks_per_node = c->nranks; /* fewer ranks than a node: one node */
    }
    cluster.ranks = c->nranks;
    if (c->nranks < 64) {
        /* The SP tree measured here is one slice of a larger job: its model
         * states are sharded as in a 64-rank job (16*P/64 per rank), so the
         * planner sees the memory a rank of such a job has for activations. */
        model.params = model.params * c->nranks / 64.0;
    }
    PCHECK(c, nsp_workload_load(c->opts.workload, &wl), "workload");
    if (nsp_workload_sample(wl, c->opts.seed, 0, c->opts.tokens_per_rank * c->nranks,
                            c->opts.max_len, &lens, &n) != NSP_OK) {
        nsp_workload_free(wl);
        a2a_die(c, "sample");
    }
    nsp_workload_free(wl);
    memset(&pp, 0, sizeof(pp));
    pp.kind = NSP_PLANNER_NESTED;
    st = nsp_plan_create(&model, &cluster, lens, n, &pp, &plan);
    free(lens);
    PCHECK(c, st, "nested plan");
    /* Measure one round (--round, else the one round_score likes best). It
     * is swapped into round 0, which is what the methods read. */
    if (c->opts.round >= plan->nrounds) {
        nsp_error_quiet(NSP_ERR_INVALID_ARG, "the plan has %d rounds (0..%d)", plan->nrounds,
                        plan->nrounds - 1);
        nsp_plan_free(plan);
        a2a_die(c, "--round"); /* frees the tree and the world, exits */
    }
    c->chosen_round = c->opts.round >= 0 ? c->opts.round : best_round(plan);
    if (c->chosen_round != 0) {
        nsp_plan_round_t t = plan->rounds[0];
        plan->rounds[0] = plan->rounds[c->chosen_round];
        plan->rounds[c->chosen_round] = t;
    }
    return plan;
}
