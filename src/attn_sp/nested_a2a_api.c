/*
 * The public entry points of the nested all-to-all (include/nspcomm.h
 * section 7): choose the engine of the world's memory type
 * (nested_a2a_engine.h) and drive its create / start / open / destroy.
 * nsp_a2a_post() is create + start, the handle freed with its last request.
 */
#include "config.h"

#include "attn_sp/nested_a2a.h"
#include "attn_sp/a2a_bytes.h"
#include "attn_sp/nested_a2a_common.h"
#include "attn_sp/nested_a2a_engine.h"
#include "common/log.h"
#include "transport/comm.h"

#include <stddef.h>

/* The engines, by the memory type of the world's transport. */
static const nsp_a2a_engine_t *const a2a_engines[] = {
    [NSP_MEM_HOST] = &nsp_a2a_engine_host,
    [NSP_MEM_CUDA] = &nsp_a2a_engine_cuda,
};

static nsp_status_t a2a_engine(nsp_tree_t *tree, const nsp_a2a_params_t *params,
                               const nsp_a2a_engine_t **engine)
{
    nsp_comm_t    *world;
    nsp_mem_type_t mem;
    int            mapped = (params->field_mask & NSP_A2A_FIELD_MAPPED) && params->mapped;

    NSP_CHECK(nsp_tree_world(tree, &world));
    mem = nsp_comm_tp(world)->ops->mem_type;
    if ((size_t)mem >= sizeof(a2a_engines) / sizeof(a2a_engines[0]) || a2a_engines[mem] == NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all: no engine for the memory "
                         "type %d of the '%s' backend", (int)mem, nsp_comm_tp(world)->ops->name);
    }
    *engine = mem == NSP_MEM_HOST && mapped ? &nsp_a2a_engine_host_mapped : a2a_engines[mem];
    return NSP_OK;
}

static nsp_status_t a2a_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                               const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a)
{
    const nsp_a2a_engine_t *engine = NULL;

    if (tree == NULL || layout == NULL || params == NULL || a2a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_create: NULL tree, layout, params or "
                         "handle");
    }
    NSP_CHECK(nsp_a2a_check_bytes(layout, params, "nested all-to-all"));
    NSP_CHECK(a2a_engine(tree, params, &engine));
    return engine->create(tree, layout, params, gated, a2a);
}

nsp_status_t nsp_a2a_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                            const nsp_a2a_params_t *params, nsp_a2a_t **a2a)
{
    return a2a_create(tree, layout, params, 0, a2a);
}

nsp_status_t nsp_a2a_create_gated(nsp_tree_t *tree, const nsp_layout_t *layout,
                                  const nsp_a2a_params_t *params, nsp_a2a_t **a2a)
{
    return a2a_create(tree, layout, params, 1, a2a);
}

nsp_status_t nsp_a2a_start(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                           nsp_request_t **reqs)
{
    if (a2a == NULL || reqs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_start: NULL handle or requests");
    }
    return a2a->engine->start(a2a, src, dst, stream, reqs);
}

nsp_status_t nsp_a2a_open(nsp_a2a_t *a2a, int level)
{
    if (a2a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_open: NULL handle");
    }
    return a2a->engine->open(a2a, level);
}

nsp_status_t nsp_a2a_destroy(nsp_a2a_t *a2a)
{
    if (a2a == NULL) {
        return NSP_OK;
    }
    return a2a->engine->destroy(a2a);
}

/* Create and start once; the handle goes with its last request. */
static nsp_status_t a2a_post(nsp_tree_t *tree, const nsp_layout_t *layout,
                             const nsp_a2a_params_t *params, int gated, nsp_request_t **reqs)
{
    nsp_a2a_prep_t prep;
    nsp_a2a_t     *a2a;
    nsp_status_t   status;

    if (tree == NULL || layout == NULL || params == NULL || reqs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_post: NULL tree, layout, params or "
                         "requests");
    }
    /* the local checks first, before create's collective agreement */
    NSP_CHECK(nsp_a2a_prepare(tree, layout, params, "nested all-to-all", &prep));
    NSP_CHECK(nsp_a2a_check_bufs(&prep, params->src, params->dst, "nested all-to-all"));
    NSP_CHECK(a2a_create(tree, layout, params, gated, &a2a));
    a2a->oneshot = 1;
    status = a2a->engine->start(a2a, params->src, params->dst,
                                (params->field_mask & NSP_A2A_FIELD_STREAM) ? params->stream
                                                                             : NULL,
                                reqs);
    if (status < 0) {
        a2a->oneshot = 0;
        a2a->engine->destroy(a2a);
    }
    return status;
}

nsp_status_t nsp_a2a_post(nsp_tree_t *tree, const nsp_layout_t *layout,
                          const nsp_a2a_params_t *params, nsp_request_t **reqs)
{
    return a2a_post(tree, layout, params, 0, reqs);
}

nsp_status_t nsp_a2a_post_gated(nsp_tree_t *tree, const nsp_layout_t *layout,
                                const nsp_a2a_params_t *params, nsp_request_t **reqs)
{
    return a2a_post(tree, layout, params, 1, reqs);
}

nsp_status_t nsp_a2a_release_cache(void)
{
    return NSP_OK; /* nothing is cached per process any more (see the header) */
}
