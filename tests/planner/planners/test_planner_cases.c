/*
 * Targeted cases: a batch dominated by one 384K-token sequence, a batch of
 * short sequences only, memory-forced rounds, other models and clusters.
 * Checks the shape of the plans (degrees, rounds, recomputation, pipelining)
 * and their gap to the lower bound, against numbers derived by hand from the
 * cost model of docs/design.md §5.1.
 */
#include "check.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nsp_plan_t *plan_of(const char *model_name, const char *cluster_name, int ranks,
                           const int64_t *lens, int n, nsp_planner_kind_t kind)
{
    nsp_model_t          m;
    nsp_cluster_t        c;
    nsp_planner_params_t p;
    nsp_plan_t          *plan = NULL;

    memset(&p, 0, sizeof(p));
    p.kind = kind;
    p.field_mask = NSP_PLANNER_FIELD_TIME_LIMIT;
    p.time_limit_s = 0.2;
    if (nsp_model_preset(model_name, &m) != NSP_OK ||
        nsp_cluster_preset(cluster_name, ranks, &c) != NSP_OK ||
        nsp_plan_create(&m, &c, lens, n, &p, &plan) != NSP_OK) {
        tap_diag("plan failed: %s", nsp_last_error());
        return NULL;
    }
    return plan;
}

/* One 393216-token sequence and 4000 short ones on 64 ranks. Alone at degree
 * 32 the long one takes ~0.266 s per layer, more than everything else spread
 * over the other ranks: the bound is that sequence. */
static void test_dominant_sequence(void)
{
    uint64_t    state = 7;
    const int   n = 4001;
    int64_t    *lens = malloc(sizeof(int64_t) * n);
    nsp_plan_t *st, *nd, *dj;
    char        why[256];

    lens[0] = 393216;
    for (int i = 1; i < n; ++i) {
        lens[i] = 64 + (int64_t)(pc_next(&state) % 700);
    }
    st = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, NSP_PLANNER_STATIC);
    nd = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, NSP_PLANNER_NESTED);
    dj = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, NSP_PLANNER_DISJOINT);
    tap_ok(st != NULL && nd != NULL && dj != NULL, "dominant sequence: all three plan");
    if (st == NULL || nd == NULL || dj == NULL) {
        goto out;
    }
    if (!tap_ok(pc_check_plan(nd, 0, why, sizeof(why)), "nested plan holds")) {
        tap_diag("%s", why);
    }
    tap_ok(nd->predicted.step_s <= 1.05 * nd->predicted.lower_bound_s,
           "nested within 5%% of the bound (%.4f s vs %.4f s)", nd->predicted.step_s,
           nd->predicted.lower_bound_s);
    tap_ok(st->predicted.step_s >= 1.1 * nd->predicted.step_s,
           "static (one degree for all) is >= 1.1x slower (%.4f s vs %.4f s)",
           st->predicted.step_s, nd->predicted.step_s);
    tap_ok(dj->predicted.step_s >= nd->predicted.step_s,
           "disjoint is not faster than nested (%.4f s vs %.4f s)", dj->predicted.step_s,
           nd->predicted.step_s);
    {
        /* the long sequence sits at degree 32, and its group overlaps: each of
         * its ranks also holds a short sequence of another level */
        const nsp_plan_group_t *g32 = NULL;
        int                     round32 = -1;
        for (int r = 0; r < nd->nrounds; ++r) {
            for (int g = 0; g < nd->rounds[r].ngroups; ++g) {
                const nsp_plan_group_t *gg = &nd->rounds[r].groups[g];
                for (int k = 0; k < gg->nseqs; ++k) {
                    if (gg->seqs[k] == 0) {
                        g32 = gg;
                        round32 = r;
                    }
                }
            }
        }
        tap_ok(g32 != NULL && g32->size == 32 && g32->recompute == 0,
               "the 384K sequence is at degree 32, kept (size %d)", g32 ? g32->size : -1);
        tap_ok(g32 != NULL && g32->pipelined == 1, "its exchange is pipelined");
        if (g32 != NULL) {
            /* every rank of that group holds another group of the round */
            int all = 1;
            for (int q = g32->rank0; q < g32->rank0 + g32->size; ++q) {
                int cnt = 0;
                for (int g = 0; g < nd->rounds[round32].ngroups; ++g) {
                    const nsp_plan_group_t *gg = &nd->rounds[round32].groups[g];
                    cnt += q >= gg->rank0 && q < gg->rank0 + gg->size;
                }
                all &= cnt >= 2;
            }
            tap_ok(all, "each of its ranks holds another level (so pipelining is honest)");
        } else {
            tap_skip(1, "no degree-32 group");
        }
    }
out:
    nsp_plan_free(st);
    nsp_plan_free(nd);
    nsp_plan_free(dj);
    free(lens);
}

/* 64 ranks x 8192 tokens of 512-token sequences: everything fits one rank,
 * nothing needs an exchange; the plan is one round at degree 1, at the bound
 * up to the imbalance of whole sequences. */
static void test_short_only(void)
{
    const int   n = 64 * 16;
    int64_t    *lens = malloc(sizeof(int64_t) * n);
    nsp_plan_t *nd, *st;

    for (int i = 0; i < n; ++i) {
        lens[i] = 512;
    }
    nd = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, NSP_PLANNER_NESTED);
    st = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, NSP_PLANNER_STATIC);
    tap_ok(nd != NULL && st != NULL, "short only: plans");
    if (nd != NULL && st != NULL) {
        int deg1 = 1;
        for (int r = 0; r < nd->nrounds; ++r) {
            for (int g = 0; g < nd->rounds[r].ngroups; ++g) {
                deg1 &= nd->rounds[r].groups[g].size == 1;
            }
        }
        tap_ok(nd->nrounds == 1 && deg1, "nested: one round, every sequence on one rank");
        tap_is_double(nd->predicted.step_s, nd->predicted.lower_bound_s, 1e-9, 0.0,
                      "nested equals the bound (16 equal sequences per rank)");
        tap_is_double(st->predicted.step_s, nd->predicted.step_s, 1e-9, 0.0,
                      "static at degree 1 is as fast");
    }
    nsp_plan_free(nd);
    nsp_plan_free(st);
    free(lens);
}

/* 64K tokens per rank: kept activations (3.1 MB per token) need ~3 rounds on
 * 64 ranks; the planners must use several rounds or recomputation and stay
 * within memory. */
static void test_memory_rounds(void)
{
    uint64_t    state = 11;
    int64_t    *lens = NULL;
    const int   n = pc_batch(&state, 64, 65536, 393216, &lens);
    char        why[256];

    for (int k = 0; k < 3; ++k) {
        nsp_plan_t *p = plan_of("qwen3-30b-a3b", "h100", 64, lens, n, (nsp_planner_kind_t)k);
        int         rc = 0;
        if (p == NULL) {
            tap_ok(0, "memory-bound batch: planner %d plans", k);
            continue;
        }
        for (int r = 0; r < p->nrounds; ++r) {
            for (int g = 0; g < p->rounds[r].ngroups; ++g) {
                rc |= p->rounds[r].groups[g].recompute;
            }
        }
        tap_ok(p->nrounds >= 3 || rc, "%s: %d rounds%s for 64K tokens per rank", p->planner,
               p->nrounds, rc ? " with recomputation" : "");
        if (!tap_ok(pc_check_plan(p, k != 2, why, sizeof(why)), "%s: plan holds, within memory",
                    p->planner)) {
            tap_diag("%s", why);
        }
        nsp_plan_free(p);
    }
    free(lens);
}

/* Other presets: a dense model (no MoE term), a larger MoE, the h800. */
static void test_other_presets(void)
{
    static const char *models[3] = {"llama3-8b", "qwen3-235b-a22b", "qwen3-30b-a3b"};
    static const char *clusters[3] = {"h100", "h800", "h800"};
    static const int   ranks[3] = {32, 128, 16};

    for (int c = 0; c < 3; ++c) {
        uint64_t state = 100 + (uint64_t)c;
        int64_t *lens = NULL;
        const int n = pc_batch(&state, ranks[c], 16384, 131072, &lens);
        for (int k = 0; k < 3; ++k) {
            nsp_plan_t *p = plan_of(models[c], clusters[c], ranks[c], lens, n, (nsp_planner_kind_t)k);
            char        why[256] = "no plan";
            if (!tap_ok(p != NULL && pc_check_plan(p, k != 2, why, sizeof(why)) &&
                        p->predicted.step_s >= p->predicted.lower_bound_s * (1 - 1e-9),
                        "%s on %d x %s: %s plan holds and is not below the bound", models[c],
                        ranks[c], clusters[c], k == 0 ? "static" : k == 1 ? "disjoint" : "nested")) {
                tap_diag("%s", why);
            }
            nsp_plan_free(p);
        }
        free(lens);
    }
}

int main(void)
{
    setenv("NSPCOMM_MILP", "cbc", 1);   /* the default solver when built */
    test_dominant_sequence();
    test_short_only();
    test_memory_rounds();
    test_other_presets();
    return tap_done();
}
