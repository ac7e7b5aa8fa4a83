/*
 * nsp_a2a_perf method levels: each level alone (a plan holding only the
 * groups of one degree, level 0's local copy included), the levels called
 * one after another in every timed call, so the time is their sum as a
 * step would pay it (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include <string.h>

/* "levels": every level alone, one after another. */
static void levels_call(perf_ctx_t *c, runner_t *r)
{
    for (int k = 0; k < r->nparts; ++k) {
        r->parts[k].call(c, &r->parts[k]);
    }
}

static double levels_check(perf_ctx_t *c, runner_t *r)
{
    double wrong = 0;

    for (int k = 0; k < r->nparts; ++k) {
        wrong += r->parts[k].check(c, &r->parts[k]);
    }
    return wrong;
}

/* r runs the nparts level runners at parts (set up, owned by the caller). */
void a2a_levels_init(runner_t *r, runner_t *parts, int nparts)
{
    memset(r, 0, sizeof(*r));
    r->name   = "levels";
    r->call   = levels_call;
    r->check  = levels_check;
    r->parts  = parts;
    r->nparts = nparts;
    for (int k = 0; k < nparts; ++k) {
        r->offrank += parts[k].offrank;
    }
}
