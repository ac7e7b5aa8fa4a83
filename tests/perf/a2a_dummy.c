/*
 * nsp_a2a_perf method "dummy": the smallest method, for
 * tests/perf/test_a2a_method.sh, which builds nsp_a2a_perf with this file
 * and one line added to the table (perf/a2a_methods.c): that is all a
 * method takes (docs/design/extending.md, "A perf method").
 *
 * Each rank copies its sequence-sharded buffer of the nested plan into a
 * second buffer (no traffic); check() compares the copy with the global
 * tensor filled again. With NSP_DUMMY_CORRUPT set, every call spoils the
 * copy's first element, so the harness must report one wrong element per
 * rank and size.
 */
#include "config.h"

#include "a2a_perf.h"

#include <stdlib.h>
#include <string.h>

typedef struct dummy {
    nsp_layout_t *lay;
    char         *src, *dst, *want;
    size_t        bytes;   /* [T_local, H, D] elements of opts.elem bytes */
    int           corrupt;
} dummy_t;

static void dummy_call(perf_ctx_t *c, void *state, double *phase_s)
{
    dummy_t *d = state;

    (void)c;
    (void)phase_s;
    memcpy(d->dst, d->src, d->bytes);
    if (d->corrupt && d->bytes > 0) {
        d->dst[0] ^= 1;
    }
}

static double dummy_check(perf_ctx_t *c, void *state)
{
    dummy_t *d = state;
    double   wrong = 0;

    a2a_fill_seq(c, d->lay, d->want);
    for (size_t k = 0; k < d->bytes; k += c->opts.elem) {
        wrong += memcmp(d->dst + k, d->want + k, c->opts.elem) != 0;
    }
    return wrong;
}

static void dummy_free(perf_ctx_t *c, void *state)
{
    dummy_t *d = state;

    (void)c;
    free(d->src);
    free(d->dst);
    free(d->want);
    nsp_layout_free(d->lay);
    free(d);
}

static const a2a_row_ops_t dummy_ops = {.call = dummy_call, .check = dummy_check,
                                        .free = dummy_free};

static void dummy_setup(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    dummy_t          *d = a2a_xcalloc(sizeof(*d));
    nsp_layout_info_t info;

    PCHECK(c, nsp_layout_create(plans->nested, 0, c->rank, &d->lay), "layout");
    nsp_layout_query(d->lay, &info);
    d->bytes   = (size_t)info.local_tokens * c->opts.heads * c->opts.head_dim * c->opts.elem;
    d->src     = a2a_xmalloc(d->bytes);
    d->dst     = a2a_xcalloc(d->bytes);
    d->want    = a2a_xmalloc(d->bytes);
    d->corrupt = getenv("NSP_DUMMY_CORRUPT") != NULL;
    a2a_fill_seq(c, d->lay, d->src);
    a2a_row_add(c, rows, "dummy", &dummy_ops, d, 0.0); /* sends nothing to other ranks */
}

const a2a_method_t a2a_method_dummy = {
    .name = "dummy", .setup = dummy_setup,
    .help = "a local copy of the sequence-sharded buffer (tests/perf/a2a_dummy.c)"};
