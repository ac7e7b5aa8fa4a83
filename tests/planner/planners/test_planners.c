/*
 * The three planners over many random long-tailed batches (ranks 8..256):
 * every plan passes the independent check (each sequence once, groups valid,
 * nested groups nest and align, static/disjoint groups disjoint, no rank over
 * memory, prediction = evaluation) and nsp_plan_validate; static plans use
 * one degree and one recompute setting; the same input gives the same plan;
 * nested is never slower than static and never below the lower bound.
 *
 * The disjoint planner runs its MILP (when built with a solver) on the first
 * MILP_SEEDS small batches with a short limit, and its greedy elsewhere
 * (NSPCOMM_MILP=none): the MILP is repeatable only when it ends before its
 * time limit, so its determinism is checked on those plans that did (the
 * count is printed and must not be zero when a solver is built).
 *
 * Usage: test_planners [seeds]   (default 200; $NSP_TEST_SEEDS)
 */
#include "check.h"
#include "tap.h"

#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 200 batches; fewer under AddressSanitizer (several times slower), and
 * NSP_TEST_SEEDS or the first argument overrides. */
#if defined(__SANITIZE_ADDRESS__)
#define DEFAULT_SEEDS 60
#else
#define DEFAULT_SEEDS 200
#endif
#define MILP_SEEDS 12
#define MAX_LEN 393216

static const int ranks_choices[] = {8, 16, 32, 64, 128, 256};

typedef struct tally {
    int plans, checked, valid, compared, deterministic, milp_repeatable, milp_timeouts;
    int nested_le_static, nested_ge_bound, static_one_degree;
    int fails;
} tally_t;

static int plan_one(const nsp_model_t *m, const nsp_cluster_t *c, const int64_t *lens, int n,
                    nsp_planner_kind_t kind, double time_limit, nsp_plan_t **plan)
{
    nsp_planner_params_t p;

    memset(&p, 0, sizeof(p));
    p.kind = kind;
    if (time_limit > 0) {
        p.field_mask |= NSP_PLANNER_FIELD_TIME_LIMIT;
        p.time_limit_s = time_limit;
    }
    return nsp_plan_create(m, c, lens, n, &p, plan) == NSP_OK;
}

/* All checks of one batch; failures are reported once with the seed. */
static void run_seed(int seed, tally_t *t)
{
    static const char *names[3] = {"static", "disjoint", "nested"};
    uint64_t       state = 0x5eed0000ull + (uint64_t)seed;
    const int      ranks = ranks_choices[pc_next(&state) % 6];
    const int64_t  tpr = 2048 + (int64_t)(pc_next(&state) % 4) * 4096;
    const int      use_milp = seed < MILP_SEEDS;
    nsp_model_t    model;
    nsp_cluster_t  cluster;
    int64_t       *lens = NULL;
    nsp_plan_t    *plan[3] = {NULL, NULL, NULL};
    int            n;
    char           why[512];

    /* small batches on few ranks for the MILP seeds: its solves end early */
    const int r_used = use_milp ? (ranks < 32 ? ranks : 16) : ranks;
    nsp_model_preset("qwen3-30b-a3b", &model);
    nsp_cluster_preset("h100", r_used, &cluster);
    n = pc_batch(&state, r_used, use_milp ? 1024 : tpr, MAX_LEN, &lens);
    if (n <= 0) {
        tap_ok(0, "seed %d: batch", seed);
        return;
    }
    setenv("NSPCOMM_MILP", use_milp ? "cbc" : "none", 1);
    for (int k = 0; k < 3; ++k) {
        nsp_plan_t *again = NULL;
        const double limit = (k == 1 && use_milp) ? 0.5 : 0.0;
        if (!plan_one(&model, &cluster, lens, n, (nsp_planner_kind_t)k, limit, &plan[k])) {
            tap_ok(0, "seed %d (%d ranks, %d seqs): %s planner fails: %s", seed, r_used, n,
                   names[k], nsp_last_error());
            t->fails++;
            continue;
        }
        t->plans++;
        if (pc_check_plan(plan[k], k != 2, why, sizeof(why))) {
            t->checked++;
        } else {
            tap_ok(0, "seed %d (%d ranks, %d seqs): %s plan: %s", seed, r_used, n, names[k], why);
            t->fails++;
        }
        if (nsp_plan_validate(plan[k]) == NSP_OK) {
            t->valid++;
        } else {
            tap_ok(0, "seed %d: %s plan fails nsp_plan_validate: %s", seed, names[k],
                   nsp_last_error());
            t->fails++;
        }
        if (k == 0) {
            int one = 1;
            const nsp_plan_group_t *g0 = &plan[0]->rounds[0].groups[0];
            for (int r = 0; r < plan[0]->nrounds; ++r) {
                for (int g = 0; g < plan[0]->rounds[r].ngroups; ++g) {
                    const nsp_plan_group_t *gg = &plan[0]->rounds[r].groups[g];
                    one &= gg->size == g0->size && gg->recompute == g0->recompute &&
                           gg->rank0 % gg->size == 0;
                }
            }
            if (one) {
                t->static_one_degree++;
            } else {
                tap_ok(0, "seed %d: static plan mixes degrees or recompute settings", seed);
                t->fails++;
            }
        }
        /* determinism: the same call again */
        if (plan_one(&model, &cluster, lens, n, (nsp_planner_kind_t)k, limit, &again)) {
            const int timed_out = ((plan[k]->flags | again->flags) & NSP_PLAN_FLAG_SOLVER_TIMEOUT) != 0;
            if (k == 1 && use_milp) {
                t->milp_timeouts += timed_out;
            }
            if (timed_out) {
                /* a solve cut by its time limit may differ: not compared */
            } else if (++t->compared, pc_same_plan(plan[k], again)) {
                t->deterministic++;
                t->milp_repeatable += (k == 1 && use_milp);
            } else {
                tap_ok(0, "seed %d: %s planner gave two different plans for the same input",
                       seed, names[k]);
                t->fails++;
            }
            nsp_plan_free(again);
        }
    }
    if (plan[0] != NULL && plan[2] != NULL) {
        if (plan[2]->predicted.step_s <= plan[0]->predicted.step_s * (1.0 + 1e-9)) {
            t->nested_le_static++;
        } else {
            tap_ok(0, "seed %d (%d ranks, %d seqs): nested %.6f s slower than static %.6f s",
                   seed, r_used, n, plan[2]->predicted.step_s, plan[0]->predicted.step_s);
            t->fails++;
        }
        if (plan[2]->predicted.step_s >= plan[2]->predicted.lower_bound_s * (1.0 - 1e-9)) {
            t->nested_ge_bound++;
        } else {
            tap_ok(0, "seed %d: nested %.6f s below the lower bound %.6f s", seed,
                   plan[2]->predicted.step_s, plan[2]->predicted.lower_bound_s);
            t->fails++;
        }
    }
    for (int k = 0; k < 3; ++k) {
        nsp_plan_free(plan[k]);
    }
    free(lens);
}

int main(int argc, char **argv)
{
    const int seeds = pc_seed_count(argc, argv, DEFAULT_SEEDS);
    tally_t   t;

    memset(&t, 0, sizeof(t));
    for (int seed = 0; seed < seeds; ++seed) {
        run_seed(seed, &t);
    }
    tap_is_int(t.fails, 0, "no failure over %d seeds", seeds);
    tap_is_int(t.plans, 3 * seeds, "every planner planned every batch");
    tap_is_int(t.checked, t.plans, "every plan passes the independent check");
    tap_is_int(t.valid, t.plans, "every plan passes nsp_plan_validate");
    tap_is_int(t.static_one_degree, seeds, "static plans use one degree and one recompute setting");
    tap_is_int(t.nested_le_static, seeds, "nested is never slower than static");
    tap_is_int(t.nested_ge_bound, seeds, "nested never beats the lower bound");
    tap_ok(t.compared >= t.plans - t.milp_timeouts && t.deterministic == t.compared,
           "the same input gives the same plan (%d of %d plans compared, %d equal)", t.compared,
           t.plans, t.deterministic);
#if defined(NSP_HAVE_CBC)
    tap_ok(t.milp_repeatable > 0, "MILP plans that ended before the limit repeat (%d repeated, "
           "%d cut by the limit and not compared)", t.milp_repeatable, t.milp_timeouts);
#else
    tap_skip(1, "built without CBC: no MILP determinism to check");
#endif
    return tap_done();
}
