/*
 * The MILP solver table (src/planner/milp_table.c): every solver this build
 * has solves a small integer program to its known optimum (through
 * milp.h, with and without a start), is chosen by name (NSPCOMM_MILP), and
 * gives the disjoint planner a plan without the greedy-fallback flag;
 * NSPCOMM_MILP=none and an unknown name behave as documented.
 */
#include "planner/milp.h"
#include "nspcomm.h"
#include "tap.h"

#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The solvers configure found, by NSPCOMM_MILP name, the default first. */
static const char *const built[] = {
#ifdef NSP_HAVE_CBC
    "cbc",
#endif
#ifdef NSP_HAVE_GLPK
    "glpk",
#endif
    NULL
};

/*
 * max 8x + 5y  s.t.  x + y <= 6,  9x + 5y <= 45,  0 <= x, y <= 10 integer,
 * as min -8x - 5y. The LP optimum is x = 3.75, y = 2.25 (41.25); the integer
 * one x = 5, y = 0 (40).
 */
static int small_program(nsp_milp_t *p)
{
    static const int    idx[2] = {0, 1};
    static const double row1[2] = {1.0, 1.0}, row2[2] = {9.0, 5.0};

    memset(p, 0, sizeof(*p));
    return nsp_milp_col(p, 0.0, 10.0, -8.0, 1) == 0 && nsp_milp_col(p, 0.0, 10.0, -5.0, 1) == 1 &&
           nsp_milp_row(p, 2, idx, row1, -NSP_MILP_INF, 6.0) &&
           nsp_milp_row(p, 2, idx, row2, -NSP_MILP_INF, 45.0);
}

static void test_solver(const char *name)
{
    const nsp_milp_solver_t *s = NULL;
    const char              *why = NULL;
    const double             start[2] = {0.0, 0.0};
    nsp_milp_t               p;
    nsp_milp_result_t        res;
    double                   x[2] = {-1.0, -1.0};

    setenv("NSPCOMM_MILP", name, 1);
    nsp_milp_choose(&s, &why);
    tap_ok(s != NULL && strcmp(s->name, name) == 0, "NSPCOMM_MILP=%s chooses %s", name,
           s != NULL ? s->label : "none");
    if (s == NULL) {
        return;
    }
    tap_ok(small_program(&p), "%s: the program is built (2 columns, 2 rows)", s->label);
    for (int with_start = 0; with_start <= 1; ++with_start) {
        memset(&res, 0, sizeof(res));
        tap_is_int(s->solve(&p, with_start ? start : NULL, 10.0, x, &res), NSP_OK,
                   "%s: solve %s a start", s->label, with_start ? "with" : "without");
        tap_ok(res.found && res.optimal && !res.timeout, "%s: optimal within the limit",
               s->label);
        tap_ok(fabs(x[0] - 5.0) < 1e-6 && fabs(x[1]) < 1e-6,
               "%s: the integer optimum x = 5, y = 0 (got %g, %g)", s->label, x[0], x[1]);
    }
    nsp_milp_free(&p);
}

/* The disjoint planner on a small batch with solver `name` ("none": none). */
static void test_disjoint(const char *name)
{
    static const int64_t lens[8] = {65536, 32768, 16384, 8192, 4096, 2048, 1024, 512};
    nsp_model_t          m;
    nsp_cluster_t        c;
    nsp_planner_params_t params;
    nsp_plan_t          *plan = NULL;
    const int            none = strcmp(name, "none") == 0;

    memset(&params, 0, sizeof(params));
    params.kind         = NSP_PLANNER_DISJOINT;
    params.field_mask   = NSP_PLANNER_FIELD_TIME_LIMIT;
    params.time_limit_s = 5.0;
    setenv("NSPCOMM_MILP", name, 1);
    tap_ok(nsp_model_preset("qwen3-30b-a3b", &m) == NSP_OK &&
               nsp_cluster_preset("h100", 16, &c) == NSP_OK &&
               nsp_plan_create(&m, &c, lens, 8, &params, &plan) == NSP_OK,
           "disjoint planner with NSPCOMM_MILP=%s plans", name);
    if (plan == NULL) {
        tap_diag("%s", nsp_last_error());
        return;
    }
    tap_ok(((plan->flags & NSP_PLAN_FLAG_GREEDY_FALLBACK) != 0) == none,
           "NSPCOMM_MILP=%s: greedy-fallback flag %s", name, none ? "set" : "not set");
    tap_is_int(nsp_plan_validate(plan), NSP_OK, "NSPCOMM_MILP=%s: the plan validates", name);
    nsp_plan_free(plan);
}

static void test_choice(void)
{
    const nsp_milp_solver_t *s = NULL;
    const char              *why = NULL;

    unsetenv("NSPCOMM_MILP");
    nsp_milp_choose(&s, &why);
    tap_ok(built[0] != NULL ? s != NULL && strcmp(s->name, built[0]) == 0 : s == NULL,
           "unset: the table's first solver (%s)", built[0] != NULL ? built[0] : "none built");
    setenv("NSPCOMM_MILP", "none", 1);
    nsp_milp_choose(&s, &why);
    tap_ok(s == NULL && strcmp(why, "NSPCOMM_MILP=none") == 0,
           "NSPCOMM_MILP=none: no solver, and why says so (%s)", why);
    setenv("NSPCOMM_MILP", "bogus", 1);
    nsp_milp_choose(&s, &why);
    tap_ok(built[0] != NULL ? s != NULL && strcmp(s->name, built[0]) == 0 : s == NULL,
           "NSPCOMM_MILP=bogus: the default, with a warning");
}

int main(void)
{
    setenv("NSPCOMM_LOG_LEVEL", "ERROR", 0);
    test_choice();
    if (built[0] == NULL) {
        tap_skip(1, "configure found neither CBC nor GLPK: no solver to test");
    }
    for (int i = 0; built[i] != NULL; ++i) {
        test_solver(built[i]);
        test_disjoint(built[i]);
    }
    test_disjoint("none");
    return tap_done();
}
