/*
 * What adding a planner takes (docs/design/extending.md, "A planner"): one file
 * (dummy_planner.c) and one line of src/planner/planner_table.c (X(dummy),
 * compiled in through dummy_table.c). Nothing else of the library knows
 * it, yet it is listed (nsp_planner_count/at, nsp_planner_kind_from_name),
 * planned with (nsp_plan_create), validated with the rule its entry
 * declares (disjoint rounds), evaluated, and written and read as JSON.
 */
#define _GNU_SOURCE /* open_memstream */
#include "nspcomm.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSEQS  10
#define RANKS  16
#define DEGREE 4 /* the top of the tree this test asks for: groups of 4 */

static const int64_t lens[NSEQS] = {8192, 7000, 6100, 5000, 4096, 3000, 2048, 1500, 900, 300};

static nsp_planner_kind_t dummy_kind;

/* The dummy is listed after the built-in planners; names and kinds are unique. */
static void test_listed(void)
{
    static const char *const builtin[] = {"static", "disjoint", "nested", "megatron"};
    int                      n = 0, unique = 1;
    const char              *name = NULL;
    nsp_planner_kind_t       k;
    nsp_status_t             st;

    tap_is_int(nsp_planner_count(&n), NSP_OK, "nsp_planner_count succeeds");
    tap_is_int(n, 5, "the four built-in planners and the dummy are listed");
    for (int i = 0; i < 4 && i < n; ++i) {
        tap_ok(nsp_planner_at(i, &k, &name) == NSP_OK && strcmp(name, builtin[i]) == 0,
               "planner %d is still %s", i, builtin[i]);
    }
    st = nsp_planner_at(4, &dummy_kind, &name);
    tap_ok(st == NSP_OK && strcmp(name, "dummy") == 0, "planner 4 is the dummy (kind %d)",
           (int)dummy_kind);
    tap_ok(nsp_planner_kind_from_name("dummy", &k) == NSP_OK && k == dummy_kind,
           "nsp_planner_kind_from_name finds it by name");
    for (int i = 0; i < n; ++i) {
        for (int j = i + 1; j < n; ++j) {
            nsp_planner_kind_t ki, kj;
            const char        *ni, *nj;
            nsp_planner_at(i, &ki, &ni);
            nsp_planner_at(j, &kj, &nj);
            unique &= ki != kj && strcmp(ni, nj) != 0;
        }
    }
    tap_ok(unique, "no two planners share a kind or a name");
    tap_is_int(nsp_planner_kind_from_name("bogus", &k), NSP_ERR_NOT_FOUND,
               "an unknown name is still NSP_ERR_NOT_FOUND");
    tap_ok(strstr(nsp_last_error(), "dummy") != NULL, "and the known names include the dummy");
}

/* The plan the dummy makes, re-derived: sequence i in group i mod 4. */
static int is_round_robin(const nsp_plan_t *p)
{
    const nsp_plan_round_t *r = &p->rounds[0];
    int                     ok = p->nrounds == 1 && r->ngroups == RANKS / DEGREE;

    for (int g = 0; ok && g < r->ngroups; ++g) {
        const nsp_plan_group_t *grp = &r->groups[g];
        ok = grp->rank0 == g * DEGREE && grp->size == DEGREE && grp->ring == 1;
        for (int j = 0; ok && j < grp->nseqs; ++j) {
            ok = grp->seqs[j] % (RANKS / DEGREE) == g;
        }
    }
    return ok;
}

static nsp_plan_t *test_planned(const nsp_model_t *m, const nsp_cluster_t *c)
{
    static const int     degrees[] = {1, 2, DEGREE};
    nsp_planner_params_t params;
    nsp_plan_t          *plan = NULL;
    nsp_status_t         st;

    memset(&params, 0, sizeof(params));
    params.kind          = dummy_kind;
    params.field_mask    = NSP_PLANNER_FIELD_LEVEL_DEGREES;
    params.nlevels       = 3;
    params.level_degrees = degrees;
    st = nsp_plan_create(m, c, lens, NSEQS, &params, &plan);
    tap_is_int(st, NSP_OK, "nsp_plan_create with params.kind = the dummy's kind");
    if (st != NSP_OK) {
        tap_diag("%s", nsp_last_error());
        return NULL;
    }
    tap_is_str(plan->planner, "dummy", "the plan is named after the dummy's entry");
    tap_ok(is_round_robin(plan), "its groups are the dummy's: sequence i in group i mod %d",
           RANKS / DEGREE);
    tap_ok(plan->predicted.step_s > 0.0 && plan->predicted.lower_bound_s > 0.0 &&
               plan->predicted.step_s >= plan->predicted.lower_bound_s,
           "it carries a prediction (%.4f s) above its lower bound (%.4f s)",
           plan->predicted.step_s, plan->predicted.lower_bound_s);
    return plan;
}

static void test_validated(nsp_plan_t *plan)
{
    const double step = plan->predicted.step_s;

    tap_is_int(nsp_plan_validate(plan), NSP_OK, "nsp_plan_validate accepts it");
    tap_is_int(nsp_plan_evaluate(plan), NSP_OK, "nsp_plan_evaluate re-evaluates it");
    tap_ok(plan->predicted.step_s == step, "to the same step time");
}

/* Write, read back, compare; then break the copy: the dummy's entry says
 * its rounds are disjoint, so an overlap is refused as such, while the
 * same plan under a name no planner has is held to nesting instead. */
static void test_json(const nsp_plan_t *plan)
{
    char       *text = NULL;
    size_t      len = 0;
    FILE       *f = open_memstream(&text, &len);
    nsp_plan_t *back = NULL;

    tap_ok(f != NULL && nsp_plan_write_json(plan, f) == NSP_OK && fclose(f) == 0,
           "nsp_plan_write_json writes it");
    tap_ok(text != NULL && strstr(text, "\"dummy\"") != NULL, "the JSON names the planner");
    tap_is_int(nsp_plan_read_json(text, &back), NSP_OK, "nsp_plan_read_json reads it back");
    if (back == NULL) {
        free(text);
        return;
    }
    tap_ok(strcmp(back->planner, "dummy") == 0 && is_round_robin(back) &&
               back->predicted.step_s == plan->predicted.step_s,
           "with the same planner, groups and prediction");
    tap_is_int(nsp_plan_validate(back), NSP_OK, "and it validates");
    back->rounds[0].groups[1].rank0 = DEGREE / 2; /* [2, 6) overlaps [0, 4) */
    tap_is_int(nsp_plan_validate(back), NSP_ERR_INVALID_ARG, "an overlap is invalid");
    tap_ok(strstr(nsp_last_error(), "a dummy plan's groups in one round must be disjoint") != NULL,
           "refused by the disjoint-rounds rule the entry declares: %s", nsp_last_error());
    snprintf(back->planner, sizeof(back->planner), "%s", "someone");
    tap_is_int(nsp_plan_validate(back), NSP_ERR_INVALID_ARG, "a user's plan is invalid too");
    tap_ok(strstr(nsp_last_error(), "not aligned") != NULL,
           "but by the nesting rule (no entry has its name): %s", nsp_last_error());
    nsp_plan_free(back);
    free(text);
}

static void test_unknown_kind(const nsp_model_t *m, const nsp_cluster_t *c)
{
    nsp_planner_params_t params;
    nsp_plan_t          *plan = NULL;
    char                 want[32];

    memset(&params, 0, sizeof(params));
    params.kind = (nsp_planner_kind_t)7;
    tap_is_int(nsp_plan_create(m, c, lens, NSEQS, &params, &plan), NSP_ERR_INVALID_ARG,
               "a kind no planner has is NSP_ERR_INVALID_ARG");
    snprintf(want, sizeof(want), "dummy=%d", (int)dummy_kind);
    tap_ok(strstr(nsp_last_error(), want) != NULL && plan == NULL,
           "the message lists the dummy's kind: %s", nsp_last_error());
}

int main(void)
{
    nsp_model_t   model;
    nsp_cluster_t cluster;
    nsp_plan_t   *plan;

    setenv("NSPCOMM_LOG_LEVEL", "NONE", 0);
    if (nsp_model_preset("qwen3-30b-a3b", &model) != NSP_OK ||
        nsp_cluster_preset("h100", RANKS, &cluster) != NSP_OK) {
        tap_ok(0, "presets: %s", nsp_last_error());
        return tap_done();
    }
    test_listed();
    plan = test_planned(&model, &cluster);
    if (plan != NULL) {
        test_validated(plan);
        test_json(plan);
        nsp_plan_free(plan);
    }
    test_unknown_kind(&model, &cluster);
    return tap_done();
}
