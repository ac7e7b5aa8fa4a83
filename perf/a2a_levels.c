/*
 * nsp_a2a_perf method levels: each level alone (a plan holding only the
 * groups of one degree, level 0's local copy included). Row `levels` calls
 * the levels one after another in every timed call, so its time is their
 * sum as a step would pay it; rows level-dN time each level back to back on
 * its own (its data stays warm in cache between calls, which flatters a
 * small level) (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct levels {
    a2a_nested_t *part[A2A_MAX_LEVELS]; /* owned by the level-dN rows */
    int           n;
} levels_t;

static void levels_call(perf_ctx_t *c, void *state, double *phase_s)
{
    levels_t *L = state;

    for (int k = 0; k < L->n; ++k) {
        a2a_nested_ops.call(c, L->part[k], phase_s);
    }
}

static double levels_check(perf_ctx_t *c, void *state)
{
    levels_t *L     = state;
    double    wrong = 0;

    for (int k = 0; k < L->n; ++k) {
        wrong += a2a_nested_ops.check(c, L->part[k]);
    }
    return wrong;
}

/* The parts are freed by their own rows (added after this one). */
static void levels_free(perf_ctx_t *c, void *state)
{
    (void)c;
    free(state);
}

static void levels_copies(perf_ctx_t *c, void *state, a2a_copies_t *out)
{
    levels_t *L = state;

    memset(out, 0, sizeof(*out));
    for (int k = 0; k < L->n; ++k) {
        a2a_copies_t one;
        a2a_nested_ops.copies(c, L->part[k], &one);
        out->level0 += one.level0;
        out->self += one.self;
        out->pack += one.pack;
        out->wire += one.wire;
        out->unpack += one.unpack;
    }
}

static const a2a_row_ops_t levels_ops = {
    .call = levels_call, .check = levels_check, .free = levels_free, .copies = levels_copies,
    .phases = {"start", "wait"}};

/* Nothing to do with one level: the levels row would be nested itself. */
static void setup_levels(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    levels_t *L = a2a_xcalloc(sizeof(*L));
    double    offrank = 0;

    if (plans->nlevels < 2) {
        free(L);
        return;
    }
    for (int l = 0; l < plans->nlevels; ++l) {
        L->part[L->n++] = a2a_nested_new(c, plans->level[l], 0, 0, 0);
        offrank += a2a_nested_offrank(L->part[l]);
    }
    a2a_row_add(c, rows, "levels", &levels_ops, L, offrank);
    for (int l = 0; l < L->n; ++l) {
        char name[24];
        snprintf(name, sizeof(name), "level-d%d", plans->degree[l]);
        a2a_row_add(c, rows, name, &a2a_nested_ops, L->part[l],
                    a2a_nested_offrank(L->part[l]));
    }
}

const a2a_method_t a2a_method_levels = {
    .name = "levels", .setup = setup_levels,
    .help = "every level alone, one after another per call; rows level-dN: each alone"};
