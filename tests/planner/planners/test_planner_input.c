/*
 * nsp_plan_create() on bad input and with each parameter of
 * nsp_planner_params_t: the status and a message that names the problem;
 * parameters that are set are honoured.
 */
#include "check.h"
#include "tap.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nsp_model_t   model;
static nsp_cluster_t cluster;   /* h100, 64 ranks */

static nsp_planner_params_t params_of(nsp_planner_kind_t kind)
{
    nsp_planner_params_t p;

    memset(&p, 0, sizeof(p));
    p.kind = kind;
    return p;
}

/* Parameters of `kind` that set the fields in `mask` (the caller fills them). */
static nsp_planner_params_t params_with(nsp_planner_kind_t kind, uint64_t mask)
{
    nsp_planner_params_t p = params_of(kind);

    p.field_mask = mask;
    return p;
}

static int has(const char *text, const char *needle)
{
    return strstr(text, needle) != NULL;
}

static const char *kind_name(int k)
{
    return k == 0 ? "static" : k == 1 ? "disjoint" : "nested";
}

static void test_lengths(void)
{
    int64_t lens[5] = {1000, 2000, 3000, 0, 5000};

    for (int k = 0; k < 3; ++k) {
        nsp_planner_params_t p = params_of((nsp_planner_kind_t)k);
        nsp_plan_t          *plan = NULL;
        nsp_status_t         st;

        lens[3] = 0;
        st = nsp_plan_create(&model, &cluster, lens, 5, &p, &plan);
        tap_is_int(st, NSP_ERR_INVALID_ARG, "%s: a zero length is rejected", kind_name(k));
        tap_ok(has(nsp_last_error(), "sequence 3") && has(nsp_last_error(), "length 0"),
               "%s: the message names index and length: %s", kind_name(k), nsp_last_error());
        tap_ok(plan == NULL, "%s: no plan is written on error", kind_name(k));
        lens[3] = -7;
        st = nsp_plan_create(&model, &cluster, lens, 5, &p, &plan);
        tap_ok(st == NSP_ERR_INVALID_ARG && has(nsp_last_error(), "sequence 3") &&
               has(nsp_last_error(), "-7"), "%s: a negative length is rejected by index: %s",
               kind_name(k), nsp_last_error());
    }
}

static void test_too_long(void)
{
    /* 20M tokens: at degree 32 with recomputation 625K tokens per rank need
     * ~154 GiB of activations, more than an 80 GiB rank has */
    const int64_t lens[3] = {4096, 20000000, 100};

    for (int k = 0; k < 3; ++k) {
        nsp_planner_params_t p = params_of((nsp_planner_kind_t)k);
        nsp_plan_t          *plan = NULL;
        nsp_status_t         st = nsp_plan_create(&model, &cluster, lens, 3, &p, &plan);

        tap_is_int(st, NSP_ERR_INFEASIBLE, "%s: a sequence no group can hold is infeasible",
                   kind_name(k));
        tap_ok(has(nsp_last_error(), "sequence 1") && has(nsp_last_error(), "20000000") &&
               has(nsp_last_error(), "GiB") && has(nsp_last_error(), "degree 32"),
               "%s: the message names the sequence, its length and the memory it needs: %s",
               kind_name(k), nsp_last_error());
    }
}

static void test_cluster_and_presets(void)
{
    nsp_cluster_t        bad = cluster;
    nsp_model_t          m;
    nsp_cluster_t        c;
    nsp_planner_params_t p = params_of(NSP_PLANNER_NESTED);
    nsp_plan_t          *plan = NULL;
    const int64_t        lens[2] = {100, 200};

    bad.ranks = 12;   /* 8 ranks per node */
    tap_is_int(nsp_plan_create(&model, &bad, lens, 2, &p, &plan), NSP_ERR_INVALID_ARG,
               "ranks not a multiple of ranks per node is rejected");
    tap_ok(has(nsp_last_error(), "ranks=12") && has(nsp_last_error(), "ranks_per_node=8"),
           "and the message names both: %s", nsp_last_error());
    tap_is_int(nsp_cluster_preset("h100", 12, &c), NSP_ERR_INVALID_ARG,
               "the h100 preset refuses 12 ranks");
    tap_is_int(nsp_model_preset("gpt-5", &m), NSP_ERR_NOT_FOUND, "unknown model preset");
    tap_ok(has(nsp_last_error(), "gpt-5") && has(nsp_last_error(), "qwen3-30b-a3b"),
           "the message names it and lists the known ones: %s", nsp_last_error());
    tap_is_int(nsp_cluster_preset("a100", 64, &c), NSP_ERR_NOT_FOUND, "unknown cluster preset");
    tap_is_int(nsp_plan_create(NULL, &cluster, lens, 2, &p, &plan), NSP_ERR_INVALID_ARG,
               "NULL model");
    tap_is_int(nsp_plan_create(&model, &cluster, lens, 2, NULL, &plan), NSP_ERR_INVALID_ARG,
               "NULL params");
    tap_is_int(nsp_plan_create(&model, &cluster, NULL, 2, &p, &plan), NSP_ERR_INVALID_ARG,
               "NULL lengths");
    tap_is_int(nsp_plan_create(&model, &cluster, lens, -1, &p, &plan), NSP_ERR_INVALID_ARG,
               "negative count");
    p.kind = (nsp_planner_kind_t)7;
    tap_is_int(nsp_plan_create(&model, &cluster, lens, 2, &p, &plan), NSP_ERR_INVALID_ARG,
               "unknown planner kind");
}

static void expect_param_error(nsp_planner_params_t p, nsp_status_t want, const char *needle,
                               const char *what)
{
    const int64_t lens[3] = {1000, 2000, 3000};
    nsp_plan_t   *plan = NULL;
    nsp_status_t  st = nsp_plan_create(&model, &cluster, lens, 3, &p, &plan);

    tap_ok(st == want && has(nsp_last_error(), needle), "%s is rejected (%s): %s", what,
           nsp_status_string(want), nsp_last_error());
    nsp_plan_free(plan);
}

static void test_bad_params(void)
{
    nsp_planner_params_t p;
    static const int     not_nesting[3] = {1, 4, 2};
    static const int     invalid[2] = {1, 3};

    p = params_with(NSP_PLANNER_STATIC, NSP_PLANNER_FIELD_STATIC_DEGREE);
    p.static_degree = 3;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "static_degree=3", "static degree 3 (32 heads)");
    p.static_degree = 64;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "static_degree=64", "static degree above the heads");
    p = params_with(NSP_PLANNER_STATIC, NSP_PLANNER_FIELD_STATIC_RECOMPUTE);
    p.static_recompute = 2;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "static_recompute=2", "static recompute 2");
    p = params_with(NSP_PLANNER_DISJOINT, NSP_PLANNER_FIELD_TIME_LIMIT);
    p.time_limit_s = -1.0;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "time_limit_s", "a negative time limit");
    p = params_with(NSP_PLANNER_NESTED, NSP_PLANNER_FIELD_LEVEL_DEGREES);
    p.nlevels = 3;
    p.level_degrees = not_nesting;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "ascend", "levels that do not nest");
    p.nlevels = 2;
    p.level_degrees = invalid;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "level_degrees[1]=3", "a level of degree 3");
    p.nlevels = 0;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "nlevels=0", "zero levels");
    p = params_with(NSP_PLANNER_NESTED, NSP_PLANNER_FIELD_MAX_ROUNDS);
    p.max_rounds = 0;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "max_rounds=0", "zero rounds");
    p = params_with(NSP_PLANNER_NESTED, NSP_PLANNER_FIELD_ENABLE_RING);
    p.enable_ring = -1;
    expect_param_error(p, NSP_ERR_INVALID_ARG, "enable_ring=-1", "enable_ring -1");
}

/* A batch that needs ~3 rounds with kept activations on 64 ranks. */
static int64_t *heavy_batch(int *n)
{
    uint64_t state = 42;
    int64_t *lens = NULL;

    *n = pc_batch(&state, 64, 65536, 393216, &lens);
    return lens;
}

static void test_params_honoured(void)
{
    static const int levels[3] = {1, 8, 32};
    int              n;
    int64_t         *lens = heavy_batch(&n);
    nsp_plan_t      *plan = NULL;
    nsp_planner_params_t p;
    int              ok;

    p = params_with(NSP_PLANNER_STATIC,
                    NSP_PLANNER_FIELD_STATIC_DEGREE | NSP_PLANNER_FIELD_STATIC_RECOMPUTE);
    p.static_degree = 32;
    p.static_recompute = 1;
    tap_is_int(nsp_plan_create(&model, &cluster, lens, n, &p, &plan), NSP_OK,
               "static with degree 32 and recomputation plans");
    ok = plan != NULL;
    for (int r = 0; ok && r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            ok &= plan->rounds[r].groups[g].size == 32 && plan->rounds[r].groups[g].recompute == 1;
        }
    }
    tap_ok(ok, "every static group has degree 32 and recomputes");
    tap_is_str(plan != NULL ? plan->planner : "", "static", "the plan names its planner");
    nsp_plan_free(plan);
    plan = NULL;

    p = params_with(NSP_PLANNER_NESTED, NSP_PLANNER_FIELD_LEVEL_DEGREES);
    p.nlevels = 3;
    p.level_degrees = levels;
    tap_is_int(nsp_plan_create(&model, &cluster, lens, n, &p, &plan), NSP_OK,
               "nested with levels 1, 8, 32 plans");
    ok = plan != NULL;
    for (int r = 0; ok && r < plan->nrounds; ++r) {
        for (int g = 0; g < plan->rounds[r].ngroups; ++g) {
            const int d = plan->rounds[r].groups[g].size;
            ok &= d == 1 || d == 8 || d == 32;
        }
    }
    tap_ok(ok, "nested groups use only the given levels");
    nsp_plan_free(plan);
    plan = NULL;

    p = params_with(NSP_PLANNER_NESTED, NSP_PLANNER_FIELD_MAX_ROUNDS);
    p.max_rounds = 1;
    tap_is_int(nsp_plan_create(&model, &cluster, lens, n, &p, &plan), NSP_OK,
               "nested with at most one round plans (recomputing where memory needs it)");
    tap_ok(plan != NULL && plan->nrounds == 1, "and uses one round (%d)",
           plan != NULL ? plan->nrounds : -1);
    {
        char why[256] = "no plan";
        if (!tap_ok(plan != NULL && pc_check_plan(plan, 0, why, sizeof(why)),
                    "the one-round plan holds, within memory")) {
            tap_diag("%s", why);
        }
    }
    nsp_plan_free(plan);
    plan = NULL;

    p = params_with(NSP_PLANNER_STATIC, NSP_PLANNER_FIELD_STATIC_DEGREE |
                                            NSP_PLANNER_FIELD_STATIC_RECOMPUTE |
                                            NSP_PLANNER_FIELD_MAX_ROUNDS);
    p.static_degree = 32;
    p.static_recompute = 0;
    p.max_rounds = 1;
    tap_is_int(nsp_plan_create(&model, &cluster, lens, n, &p, &plan), NSP_ERR_INFEASIBLE,
               "static kept in one round cannot hold 64K tokens per rank");
    tap_ok(has(nsp_last_error(), "max_rounds"), "the message says what to raise: %s",
           nsp_last_error());
    free(lens);
}

static void test_empty_and_fallback(void)
{
    const int64_t one[1] = {4096};

    for (int k = 0; k < 3; ++k) {
        nsp_planner_params_t p = params_of((nsp_planner_kind_t)k);
        nsp_plan_t          *plan = NULL;
        tap_is_int(nsp_plan_create(&model, &cluster, one, 0, &p, &plan), NSP_OK,
                   "%s: an empty batch plans", kind_name(k));
        tap_ok(plan != NULL && plan->nrounds == 0 && plan->predicted.step_s == 0.0,
               "%s: with no rounds and no time", kind_name(k));
        nsp_plan_free(plan);
    }
    {
        nsp_planner_params_t p = params_of(NSP_PLANNER_DISJOINT);
        nsp_plan_t          *plan = NULL;
        setenv("NSPCOMM_MILP", "none", 1);
        tap_is_int(nsp_plan_create(&model, &cluster, one, 1, &p, &plan), NSP_OK,
                   "disjoint without a solver plans");
        tap_ok(plan != NULL && (plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK),
               "and marks the plan greedy-fallback");
        nsp_plan_free(plan);
        plan = NULL;
        unsetenv("NSPCOMM_MILP");
        tap_is_int(nsp_plan_create(&model, &cluster, one, 1, &p, &plan), NSP_OK,
                   "disjoint with the configured solver plans");
#if defined(NSP_HAVE_CBC) || defined(NSP_HAVE_GLPK)
        tap_ok(plan != NULL && !(plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK),
               "and is not marked greedy-fallback (a solver is built in)");
#else
        tap_ok(plan != NULL && (plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK),
               "and is marked greedy-fallback (no solver built in)");
#endif
        tap_ok(plan != NULL && plan->predicted.plan_ms > 0.0, "planning time is reported");
        nsp_plan_free(plan);
    }
}

int main(void)
{
    if (nsp_model_preset("qwen3-30b-a3b", &model) != NSP_OK ||
        nsp_cluster_preset("h100", 64, &cluster) != NSP_OK) {
        tap_skip_all("presets missing: %s", nsp_last_error());
    }
    test_lengths();
    test_too_long();
    test_cluster_and_presets();
    test_bad_params();
    test_params_honoured();
    test_empty_and_fallback();
    return tap_done();
}
