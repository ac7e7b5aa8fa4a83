/*
 * nsp_a2a_perf methods nested, nested-oneshot, serial, flat and
 * nested-mapped: the nested all-to-all of round 0 (pack, exchange and unpack
 * included), sequence-to-head, checked against the global tensor and back
 * (perf/a2a_perf.h). The building block a2a_nested_new serves levels too.
 *
 * A persistent exchange is what a training step runs (nsp_a2a_create once
 * per round, nsp_a2a_start per layer), so the rows time starts of one
 * handle; nested-oneshot times nsp_a2a_post (create + start per call), the
 * form that derives everything again on every call.
 */
#include "config.h"

#include "a2a_perf.h"

#include "attn_sp/nested_a2a.h"
#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

struct a2a_nested {
    nsp_layout_t     *lay;
    nsp_layout_info_t info;
    int               mapped;  /* src and dst from nsp_mem_alloc */
    char             *src, *dst, *back;
    nsp_a2a_params_t  p;
    nsp_a2a_t        *a2a;     /* persistent handle; NULL: one-shot posts */
    nsp_request_t   **reqs;
    double            offrank;
};

/* Phases of one call: the start (every level packs and posts, level 0 and
 * the own blocks are copied) and the wait (the exchange, the unpack). */
enum { PH_START, PH_WAIT };

static void nested_run(perf_ctx_t *c, a2a_nested_t *n, const nsp_a2a_params_t *p,
                       double *phase_s)
{
    double t = nsp_now_s();

    if (n->a2a != NULL && p == &n->p) {
        PCHECK(c, nsp_a2a_start(n->a2a, p->src, p->dst, NULL, n->reqs), "nsp_a2a_start");
    } else {
        PCHECK(c, nsp_a2a_post(c->tree, n->lay, p, n->reqs), "nsp_a2a_post");
    }
    phase_s[PH_START] += a2a_lap(&t);
    for (int l = 0; l < n->info.nlevels; ++l) {
        PCHECK(c, nsp_request_wait(n->reqs[l]), "nested all-to-all wait");
        nsp_request_free(n->reqs[l]);
    }
    phase_s[PH_WAIT] += a2a_lap(&t);
}

static void nested_call(perf_ctx_t *c, void *state, double *phase_s)
{
    a2a_nested_t *n = state;

    nested_run(c, n, &n->p, phase_s);
}

/* s2h result against the global tensor, then h2s back against the input. */
static double nested_check(perf_ctx_t *c, void *state)
{
    a2a_nested_t    *n = state;
    size_t           e = c->opts.elem;
    int64_t          count = n->info.local_tokens * c->opts.heads * c->opts.head_dim;
    double           wrong = a2a_check_head(c, n->lay, n->dst), ph[A2A_MAX_PHASES];
    nsp_a2a_params_t h2s = n->p;

    h2s.direction = NSP_A2A_HEAD_TO_SEQ;
    h2s.src       = n->dst;
    h2s.dst       = n->back;
    nested_run(c, n, &h2s, ph); /* one-shot: the handle is s2h */
    for (int64_t k = 0; k < count; ++k) {
        wrong += memcmp(n->src + (size_t)k * e, n->back + (size_t)k * e, e) != 0;
    }
    return wrong;
}

static void nested_free(perf_ctx_t *c, void *state)
{
    a2a_nested_t *n = state;

    PCHECK(c, nsp_a2a_destroy(n->a2a), "nsp_a2a_destroy");
    if (n->mapped) { /* collective: every rank frees its rows in one order */
        PCHECK(c, nsp_mem_free(c->comm, n->src), "nsp_mem_free");
        PCHECK(c, nsp_mem_free(c->comm, n->dst), "nsp_mem_free");
    } else {
        free(n->src);
        free(n->dst);
    }
    free(n->back);
    free(n->reqs);
    nsp_layout_free(n->lay);
    free(n);
}

/* ---- the copies a call makes ---------------------------------------------- */

/* Bytes of the parts of level view v that move in place (direct) and of
 * the small ones, batched (src/attn_sp/nested_a2a_host.c level_make_parts:
 * at most 128 direct parts, decided by nsp_pack_seq_direct), or of a level
 * that moves as runs. */
static void level_copies(const perf_ctx_t *c, const nsp_level_view_t *v, int mpi_pack,
                         a2a_copies_t *out)
{
    size_t         rowb = (size_t)c->opts.head_dim * c->opts.elem;
    size_t        *sb = a2a_xmalloc(4 * sizeof(size_t) * (size_t)v->degree);
    unsigned char *small = a2a_xcalloc((size_t)v->nseqs + 1);
    int            ndirect = 0;
    /* runs (nested_a2a_host.c level_uses_runs; perf's trees hold every
     * degree): no pack and no unpack, only the wire */
    int            runs = !mpi_pack && nsp_pack_run_min(v, c->opts.heads, rowb) > 0 &&
                          nsp_pack_run_min(v, c->opts.heads, rowb) >= nsp_a2a_iov_min();

    for (int j = 0; j < v->nseqs; ++j) {
        int direct = ndirect < 128 &&
                     nsp_pack_seq_direct(v, j, c->opts.heads, rowb, nsp_a2a_direct_min());
        ndirect += direct;
        small[j] = mpi_pack || !direct;
    }
    PCHECK(c, nsp_pack_counts_sel(v, NULL, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                                  NSP_A2A_REPLICAS_FIRST, NSP_PACK_WITH_SELF, sb,
                                  sb + v->degree, sb + 2 * v->degree, sb + 3 * v->degree),
           "pack counts");
    for (int p = 0; p < v->degree; ++p) {
        *(p == v->index ? &out->self : &out->wire) += (double)sb[p];
        out->pack += p == v->index || runs ? 0.0 : (double)sb[p]; /* s2h packs every part */
    }
    if (runs) {
        free(small);
        free(sb);
        return;
    }
    PCHECK(c, nsp_pack_counts_sel(v, small, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, rowb,
                                  NSP_A2A_REPLICAS_FIRST, NSP_PACK_SKIP_SELF, sb,
                                  sb + v->degree, sb + 2 * v->degree, sb + 3 * v->degree),
           "pack counts");
    for (int p = 0; p < v->degree; ++p) {
        out->unpack += (double)sb[2 * v->degree + p];
    }
    free(small);
    free(sb);
}

void a2a_nested_copies(const perf_ctx_t *c, const nsp_layout_t *lay, int mpi_pack,
                       a2a_copies_t *out)
{
    nsp_layout_info_t  info;
    nsp_layout_level_t l0;

    memset(out, 0, sizeof(*out));
    nsp_layout_query(lay, &info);
    nsp_layout_level(lay, 0, &l0);
    out->level0 = (double)l0.local_tokens * c->opts.heads * c->opts.head_dim * c->opts.elem;
    for (int l = 1; l < info.nlevels; ++l) {
        nsp_level_view_t v;
        nsp_layout_level_view(lay, l, &v);
        if (v.degree > 1) {
            level_copies(c, &v, mpi_pack, out);
        }
    }
}

/* The mapped path copies straight from the peers once every announce
 * agrees, which a model cannot tell: not given for nested-mapped. */
static void nested_copies(perf_ctx_t *c, void *state, a2a_copies_t *out)
{
    a2a_nested_t *n = state;

    a2a_nested_copies(c, n->lay, 0, out);
}

const a2a_row_ops_t a2a_nested_ops = {
    .call = nested_call, .check = nested_check, .free = nested_free, .copies = nested_copies,
    .phases = {"start", "wait"}};

static const a2a_row_ops_t mapped_ops = {
    .call = nested_call, .check = nested_check, .free = nested_free,
    .phases = {"start", "wait"}};

double a2a_nested_offrank(const a2a_nested_t *n)
{
    return n->offrank;
}

/* src [T_local, H, D] and dst [head rows, D]: malloc'ed, or mapped (s2h
 * reads src, h2s (the check) reads dst: both mapped). */
static void nested_buffers(perf_ctx_t *c, a2a_nested_t *n, size_t src_bytes, size_t dst_bytes)
{
    if (n->mapped) {
        void *src, *dst;
        PCHECK(c, nsp_mem_alloc(c->comm, src_bytes + 1, &src), "nsp_mem_alloc (sequence-sharded)");
        PCHECK(c, nsp_mem_alloc(c->comm, dst_bytes + 1, &dst), "nsp_mem_alloc (head-sharded)");
        n->src = src;
        n->dst = dst;
    } else {
        n->src = a2a_xmalloc(src_bytes);
        n->dst = a2a_xmalloc(dst_bytes);
    }
    n->back = a2a_xmalloc(src_bytes);
    a2a_fill_seq(c, n->lay, n->src);
    memset(n->dst, 0, dst_bytes);
    memset(n->back, 0, src_bytes);
}

a2a_nested_t *a2a_nested_new(perf_ctx_t *c, const nsp_plan_t *plan, int serial, int mapped,
                             int oneshot)
{
    a2a_nested_t *n = a2a_xcalloc(sizeof(*n));
    size_t        e = c->opts.elem, tok = (size_t)c->opts.heads * c->opts.head_dim * e;
    int64_t       rows;

    PCHECK(c, nsp_layout_create(plan, 0, c->rank, &n->lay), "layout");
    nsp_layout_query(n->lay, &n->info);
    PCHECK(c, nsp_layout_head_rows(n->lay, c->opts.heads, &rows), "head rows");
    n->mapped = mapped;
    nested_buffers(c, n, (size_t)n->info.local_tokens * tok,
                   (size_t)rows * (size_t)c->opts.head_dim * e);
    n->reqs = a2a_xmalloc(sizeof(*n->reqs) * (size_t)n->info.nlevels);
    PCHECK(c, nsp_layout_check(c->tree, n->lay), "layout check");
    n->p.field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_CHECK | NSP_A2A_FIELD_MAPPED;
    n->p.serial     = serial;
    n->p.mapped     = mapped; /* only nested-mapped announces and reads in place */
    n->p.check      = 0; /* checked once above; timed without the allgather */
    n->p.direction  = NSP_A2A_SEQ_TO_HEAD;
    n->p.heads      = c->opts.heads;
    n->p.head_dim   = c->opts.head_dim;
    n->p.elem_size  = e;
    n->p.src        = n->src;
    n->p.dst        = n->dst;
    if (!oneshot) {
        PCHECK(c, nsp_a2a_create(c->tree, n->lay, &n->p, &n->a2a), "nsp_a2a_create");
    }
    n->offrank = a2a_offrank_bytes(c, n->lay);
    return n;
}

/* ---- the methods ---------------------------------------------------------- */

static void add_nested(perf_ctx_t *c, a2a_rows_t *rows, const char *name, const nsp_plan_t *plan,
                       int serial, int mapped, int oneshot)
{
    a2a_nested_t *n = a2a_nested_new(c, plan, serial, mapped, oneshot);

    a2a_row_add(c, rows, name, mapped ? &mapped_ops : &a2a_nested_ops, n, n->offrank);
}

static void setup_nested(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "nested", plans->nested, 0, 0, 0);
}

static void setup_oneshot(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "nested-oneshot", plans->nested, 0, 0, 1);
}

static void setup_serial(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "serial", plans->nested, 1, 0, 0);
}

static void setup_flat(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "flat", plans->flat, 0, 0, 0);
}

static void setup_mapped(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "nested-mapped", plans->nested, 0, 1, 0);
}

static void setup_flat_mapped(perf_ctx_t *c, const perf_plans_t *plans, a2a_rows_t *rows)
{
    add_nested(c, rows, "flat-mapped", plans->flat, 0, 1, 0);
}

const a2a_method_t a2a_method_nested = {
    .name = "nested", .setup = setup_nested,
    .help = "the nested all-to-all (s2h), levels pipelined: pack, exchange, unpack, copies"};
const a2a_method_t a2a_method_nested_oneshot = {
    .name = "nested-oneshot", .setup = setup_oneshot,
    .help = "nested with nsp_a2a_post per call (create + start) instead of one handle"};
const a2a_method_t a2a_method_serial = {
    .name = "serial", .setup = setup_serial,
    .help = "nested with its levels one after another"};
const a2a_method_t a2a_method_flat = {
    .name = "flat", .setup = setup_flat,
    .help = "the same batch as one group of all N ranks (static SP of degree N)"};
const a2a_method_t a2a_method_nested_mapped = {
    .name = "nested-mapped", .setup = setup_mapped,
    .help = "nested on nsp_mem_alloc buffers, mapped = 1 (same-host peers read in place)"};
const a2a_method_t a2a_method_flat_mapped = {
    .name = "flat-mapped", .setup = setup_flat_mapped,
    .help = "flat on nsp_mem_alloc buffers, mapped = 1 (same-host peers read in place)"};
