/*
 * nsp_a2a_perf methods nested, serial, nested-mapped, flat and level-dN:
 * the nested all-to-all of round 0 (pack, exchange and unpack included),
 * sequence-to-head, checked against the global tensor and back
 * (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include "transport/request.h"

#include <stdlib.h>
#include <string.h>

static void post_wait(perf_ctx_t *c, runner_t *r)
{
    PCHECK(c, nsp_a2a_post(c->tree, r->lay, &r->p, r->reqs), "nsp_a2a_post");
    for (int l = 0; l < r->info.nlevels; ++l) {
        PCHECK(c, nsp_request_wait(r->reqs[l]), "nested all-to-all wait");
        nsp_request_free(r->reqs[l]);
    }
}

static void nested_call(perf_ctx_t *c, runner_t *r)
{
    post_wait(c, r);
}

/* s2h result against the global tensor, then h2s back against the input. */
static double nested_check(perf_ctx_t *c, runner_t *r)
{
    size_t           e = c->opts.elem;
    int64_t          n = r->info.local_tokens * c->opts.heads * c->opts.head_dim;
    double           wrong = a2a_check_head(c, r->lay, r->dst);
    nsp_a2a_params_t p = r->p;

    r->p.direction = NSP_A2A_HEAD_TO_SEQ;
    r->p.src       = r->dst;
    r->p.dst       = r->back;
    post_wait(c, r);
    r->p = p;
    for (int64_t k = 0; k < n; ++k) {
        wrong += memcmp(r->src + (size_t)k * e, r->back + (size_t)k * e, e) != 0;
    }
    return wrong;
}

void a2a_nested_init(perf_ctx_t *c, runner_t *r, const char *name, const nsp_plan_t *plan,
                        int serial, int mapped)
{
    size_t  e = c->opts.elem, tok = (size_t)c->opts.heads * c->opts.head_dim * e;
    int64_t rows;

    memset(r, 0, sizeof(*r));
    r->name  = name;
    r->call  = nested_call;
    r->check = nested_check;
    PCHECK(c, nsp_layout_create(plan, 0, c->rank, &r->lay), "layout");
    nsp_layout_query(r->lay, &r->info);
    PCHECK(c, nsp_layout_head_rows(r->lay, c->opts.heads, &rows), "head rows");
    r->back = a2a_xmalloc((size_t)r->info.local_tokens * tok);
    r->mapped = mapped;
    if (mapped) { /* s2h reads src, h2s (the check) reads dst: both mapped */
        void *src, *dst;
        PCHECK(c, nsp_mem_alloc(c->comm, (size_t)r->info.local_tokens * tok + 1, &src),
               "nsp_mem_alloc (sequence-sharded)");
        PCHECK(c, nsp_mem_alloc(c->comm, (size_t)rows * (size_t)c->opts.head_dim * e + 1, &dst),
               "nsp_mem_alloc (head-sharded)");
        r->src = src;
        r->dst = dst;
    } else {
        r->src = a2a_xmalloc((size_t)r->info.local_tokens * tok);
        r->dst = a2a_xmalloc((size_t)rows * (size_t)c->opts.head_dim * e);
    }
    r->reqs = a2a_xmalloc(sizeof(*r->reqs) * (size_t)r->info.nlevels);
    a2a_fill_seq(c, r->lay, r->src);
    memset(r->dst, 0, (size_t)rows * (size_t)c->opts.head_dim * e);
    memset(r->back, 0, (size_t)r->info.local_tokens * tok);
    PCHECK(c, nsp_layout_check(c->tree, r->lay), "layout check");
    r->p.field_mask = NSP_A2A_FIELD_SERIAL | NSP_A2A_FIELD_CHECK | NSP_A2A_FIELD_MAPPED;
    r->p.serial     = serial;
    r->p.mapped     = mapped; /* only nested-mapped announces and reads in place */
    r->p.check      = 0; /* checked once above; timed without the allgather */
    r->p.direction  = NSP_A2A_SEQ_TO_HEAD;
    r->p.heads      = c->opts.heads;
    r->p.head_dim   = c->opts.head_dim;
    r->p.elem_size  = e;
    r->p.src        = r->src;
    r->p.dst        = r->dst;
    r->offrank      = a2a_offrank_bytes(c, r->lay);
}
