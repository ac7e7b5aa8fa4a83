/*
 * The engine-neutral handle of the nested all-to-all (nested_a2a_common.h):
 * create derives everything once (the levels here, the engine's part in
 * its derive), start binds the buffers and lets the engine post, the
 * level requests complete through the level queues, and the last request
 * freed ends the start. Engines are reached through the memory type's
 * entry only (memtype.h).
 */
#include "config.h"

#include "attn_sp/nested_a2a_common.h"

#include "attn_sp/memtype.h"
#include "attn_sp/nested_a2a_engine.h"
#include "attn_sp/pack.h"
#include "common/log.h"
#include "nested_groups/tree.h"
#include "transport/request.h"

#include <stdio.h>
#include <stdlib.h>

static const nsp_request_ops_t a2a_level_req_ops;

/* ---- create: everything derived once --------------------------------------- */

/* Level l's views, head share, group and tags: read from the layout here
 * and nowhere else (a start reads none of it). */
static nsp_status_t level_derive(nsp_a2a_t *a, const nsp_layout_t *layout, int l)
{
    nsp_a2a_level_t *L = &a->levels[l];

    L->a2a   = a;
    L->level = l;
    NSP_CHECK(nsp_layout_level(layout, l, &L->lv));
    L->tag_degree = L->lv.degree;
    nsp_layout_level_as_exchange(&L->lv); /* a ring level: its Ulysses subgroup */
    NSP_CHECK(nsp_layout_level_view(layout, l, &L->view));
    NSP_CHECK(nsp_layout_heads(layout, l, a->heads, &L->hs));
    if (l == 0) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_tree_group_get(a->tree, L->lv.rank0, L->lv.degree, &L->group));
    NSP_CHECK(nsp_layout_degree_id(layout, l, &L->degree_id));
    return nsp_pack_self_is_first(&L->view, a->heads, &L->self_first);
}

static void handle_free(nsp_a2a_t *a)
{
    if (a->levels != NULL) {
        a->engine->release(a);
        for (int l = 0; l < a->nlevels; ++l) {
            nsp_a2a_level_t *L = &a->levels[l];
            nsp_a2a_tps_free(&L->tps);
            free(L->parts);
            free(L->counts);
            free(L->sels);
        }
    }
    nsp_levels_free(a->queues);
    free(a->levels);
    free(a);
}

/* The handle's parameters (nothing derived yet). */
static nsp_status_t handle_alloc(nsp_tree_t *tree, const nsp_a2a_params_t *params,
                                 const nsp_memtype_t *mem, int gated,
                                 const nsp_a2a_prep_t *prep, nsp_a2a_t **out)
{
    nsp_a2a_t *a = calloc(1, sizeof(*a));

    if (a == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate");
    }
    a->engine    = mem->engine;
    a->mem       = mem;
    a->tree      = tree;
    a->comm      = prep->world;
    a->world     = nsp_comm_tp(prep->world);
    a->prep      = *prep;
    a->dir       = params->direction;
    a->heads     = params->heads;
    a->row_bytes = (size_t)params->head_dim * params->elem_size;
    a->replicas  = prep->replicas;
    a->nlevels   = prep->info.nlevels;
    a->gated     = gated;
    *out         = a;
    return NSP_OK;
}

/* The levels, the engine's derive, the level queues. */
static nsp_status_t handle_derive(nsp_a2a_t *a, const nsp_layout_t *layout)
{
    a->levels = calloc((size_t)a->nlevels, sizeof(*a->levels));
    if (a->levels == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nested all-to-all: cannot allocate %d levels",
                         a->nlevels);
    }
    for (int l = 0; l < a->nlevels; ++l) {
        NSP_CHECK(level_derive(a, layout, l));
    }
    NSP_CHECK(a->engine->derive(a));
    a->stats.levels_derived += (uint64_t)a->nlevels;
    return nsp_levels_create(a->nlevels, a->max_steps,
                             a->prep.serial ? NSP_LEVELS_SERIAL : NSP_LEVELS_PIPELINED,
                             &a->queues);
}

nsp_status_t nsp_a2a_handle_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                   const nsp_a2a_params_t *params, const nsp_memtype_t *mem,
                                   int gated, nsp_a2a_t **out)
{
    nsp_a2a_prep_t prep;
    nsp_a2a_t     *a = NULL;
    nsp_status_t   status;

    NSP_CHECK(nsp_a2a_prepare(tree, layout, params, "nested all-to-all", &prep));
    NSP_CHECK(handle_alloc(tree, params, mem, gated, &prep, &a));
    /* the local checks before the collective agreement */
    NSP_CHECK_GOTO(a->engine->check(a, layout), status, err_free);
    NSP_CHECK_GOTO(nsp_a2a_agree(&prep, params, "nested all-to-all"), status, err_free);
    NSP_CHECK_GOTO(handle_derive(a, layout), status, err_free);
    *out = a;
    return NSP_OK;

err_free:
    handle_free(a);
    return status;
}

/* ---- start ------------------------------------------------------------------ */

/* Level requests, buffers and flags of a new start; nothing runs yet. */
static void handle_bind(nsp_a2a_t *a, const void *src, void *dst, void *stream)
{
    a->src      = src;
    a->dst      = dst;
    a->stream   = stream;
    a->post_seq = nsp_comm_seq(a->comm);
    a->progress = 0;
    nsp_levels_reset(a->queues);
    for (int l = 0; l < a->nlevels; ++l) {
        nsp_a2a_level_t *L = &a->levels[l];
        nsp_request_init(&L->req, &a2a_level_req_ops, a->world->timeout_s);
        L->freed = 0;
        L->open  = 0;
        nsp_a2a_level_bufs(a->dir, a->src, a->dst, a->heads, a->row_bytes, &L->lv, &L->hs,
                           &L->src, &L->dst);
    }
}

/* The start is over: abandon what is in flight (the transport's requests
 * first, then what the engine took for them), empty the queues. */
static void handle_disarm(nsp_a2a_t *a)
{
    for (int l = 0; l < a->nlevels; ++l) {
        nsp_a2a_tps_reset(&a->levels[l].tps);
    }
    a->engine->disarm(a);
    nsp_levels_reset(a->queues);
}

nsp_status_t nsp_a2a_handle_start(nsp_a2a_t *a, const void *src, void *dst, void *stream,
                                  nsp_request_t **reqs)
{
    nsp_status_t status;

    if (a->live > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_start: %d level request(s) of the last "
                         "start are still held; free them first", a->live);
    }
    NSP_CHECK(nsp_a2a_check_bufs(&a->prep, src, dst, "nested all-to-all"));
    handle_bind(a, src, dst, stream);
    status = a->engine->start(a);
    for (int l = 0; l < a->nlevels && status == NSP_OK; ++l) {
        nsp_status_t st = nsp_levels_status(a->queues, l);
        status          = st < 0 ? st : NSP_OK;
    }
    if (status != NSP_OK) {
        handle_disarm(a);
        return status;
    }
    nsp_comm_seq_next(a->comm);
    ++a->stats.starts;
    a->live = a->nlevels;
    for (int l = 0; l < a->nlevels; ++l) {
        reqs[l] = &a->levels[l].req;
    }
    return NSP_OK;
}

/* ---- open, destroy ------------------------------------------------------------ */

nsp_status_t nsp_a2a_handle_open(nsp_a2a_t *a, int level)
{
    nsp_a2a_level_t *L;

    if (!a->gated || a->live == 0 || level < 0 || level >= a->nlevels) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nested all-to-all: cannot open level %d (%d "
                         "levels, %s)", level, a->nlevels,
                         !a->gated ? "not a gated handle"
                                   : a->live == 0 ? "no start running" : "out of range");
    }
    L = &a->levels[level];
    if (L->open) {
        return NSP_OK;
    }
    NSP_CHECK(a->engine->open(a, level));
    L->open = 1;
    /* start it now (pack and post), so the data moves before the next test */
    return nsp_levels_progress(a->queues, NULL);
}

nsp_status_t nsp_a2a_handle_destroy(nsp_a2a_t *a)
{
    if (a->live > 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_destroy: %d level request(s) are still "
                         "held; free them first", a->live);
    }
    handle_free(a);
    return NSP_OK;
}

nsp_status_t nsp_a2a_stats(const nsp_a2a_t *a, nsp_a2a_stats_t *stats)
{
    if (a == NULL || stats == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_stats: NULL argument");
    }
    *stats = a->stats;
    return NSP_OK;
}

/* ---- the public request of a level ------------------------------------------- */

/* Testing any level's request progresses every level's queue (ascending);
 * the level's status is its queue's. */
static nsp_status_t level_req_test(nsp_request_t *req)
{
    nsp_a2a_level_t *L = (nsp_a2a_level_t *)req;
    nsp_a2a_t       *a = L->a2a;
    int              advanced = 0;

    a->idle = 1; /* the steps clear it when something in flight moved */
    NSP_CHECK(nsp_levels_progress(a->queues, &advanced));
    a->progress += (uint64_t)advanced;
    req->progress = a->progress; /* any level's progress counts for every level */
    req->idle     = a->idle && advanced == 0;
    return nsp_levels_status(a->queues, L->level);
}

static void level_req_describe(const nsp_request_t *req, char *buf, size_t len)
{
    const nsp_a2a_level_t *L = (const nsp_a2a_level_t *)req;

    snprintf(buf, len, "level %d (degree %d, group of ranks %d..%d, %s engine) at step '%s'",
             L->level, L->lv.degree, L->lv.rank0, L->lv.rank0 + L->lv.degree - 1,
             L->a2a->engine->name, nsp_levels_pending_step(L->a2a->queues, L->level));
}

static void level_req_free(nsp_request_t *req)
{
    nsp_a2a_level_t *L = (nsp_a2a_level_t *)req;
    nsp_a2a_t       *a = L->a2a;

    if (L->freed) {
        return;
    }
    L->freed = 1;
    if (--a->live > 0) {
        return;
    }
    handle_disarm(a); /* ready for the next start */
    if (a->oneshot) {
        handle_free(a);
    }
}

static const nsp_request_ops_t a2a_level_req_ops = {
    .name             = "nested all-to-all",
    .test             = level_req_test,
    .describe_pending = level_req_describe,
    .free             = level_req_free,
};

nsp_status_t nsp_a2a_level_open(nsp_request_t *req)
{
    nsp_a2a_level_t *L = (nsp_a2a_level_t *)req;

    if (req == NULL || req->ops != &a2a_level_req_ops) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_level_open: not a level request of a "
                         "nested all-to-all");
    }
    return nsp_a2a_handle_open(L->a2a, L->level);
}
