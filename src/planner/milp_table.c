/*
 * The MILP solvers of this build (milp.h; docs/design/extending.md, "A MILP
 * solver"): one line each below, under the configure result that builds
 * its file, in order of preference; and the choice among them by name.
 */
#include "planner/milp.h"
#include "common/log.h"

#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The built solvers, the default first; NULL ends the list. */
static const nsp_milp_solver_t *const milp_solvers[] = {
#ifdef NSP_HAVE_CBC
    &nsp_milp_cbc,
#endif
#ifdef NSP_HAVE_GLPK
    &nsp_milp_glpk,
#endif
    NULL
};

/* NSPCOMM_MILP names a solver this build lacks: say so once per process
 * (the planner runs every step), and use the default. */
static void warn_unknown(const char *name)
{
    static atomic_int warned;   /* a flag, never reset: once per process */
    char              known[128] = "none";

    if (atomic_exchange(&warned, 1)) {
        return;
    }
    for (int i = 0; milp_solvers[i] != NULL; ++i) {
        const size_t len = strlen(known);
        snprintf(known + len, sizeof(known) - len, ", %s", milp_solvers[i]->name);
    }
    NSP_WARN("NSPCOMM_MILP=%s: no such MILP solver in this build (built: %s); using %s", name,
             known, milp_solvers[0] != NULL ? milp_solvers[0]->name : "none");
}

void nsp_milp_choose(const nsp_milp_solver_t **solver, const char **why)
{
    const char *env = getenv("NSPCOMM_MILP");

    *solver = milp_solvers[0];
    *why    = milp_solvers[0] != NULL ? "" : "configure found neither CBC nor GLPK";
    if (env == NULL || env[0] == '\0') {
        return;
    }
    if (strcmp(env, "none") == 0) {
        *solver = NULL;
        *why    = "NSPCOMM_MILP=none";
        return;
    }
    for (int i = 0; milp_solvers[i] != NULL; ++i) {
        if (strcmp(milp_solvers[i]->name, env) == 0) {
            *solver = milp_solvers[i];
            return;
        }
    }
    warn_unknown(env);
}
