/*
 * The public entry points of the nested all-to-all (include/nspcomm.h
 * section 7): the memory type of the world (memtype.h) chooses the engine,
 * the engine-neutral handle (nested_a2a_handle.c) drives it.
 * nsp_a2a_post() is create + start, the handle freed with its last request.
 */
#include "config.h"

#include "attn_sp/nested_a2a.h"

#include "attn_sp/a2a_bytes.h"
#include "attn_sp/memtype.h"
#include "attn_sp/nested_a2a_common.h"
#include "common/log.h"
#include "nested_groups/tree.h"

#include <stddef.h>

static nsp_status_t a2a_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                               const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a)
{
    const nsp_memtype_t *mem = NULL;
    nsp_comm_t          *world;

    if (tree == NULL || layout == NULL || params == NULL || a2a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_create: NULL tree, layout, params or "
                         "handle");
    }
    NSP_CHECK(nsp_a2a_check_bytes(layout, params, "nested all-to-all"));
    NSP_CHECK(nsp_tree_world(tree, &world));
    NSP_CHECK(nsp_memtype_of(world, &mem));
    return nsp_a2a_handle_create(tree, layout, params, mem, gated, a2a);
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
    return nsp_a2a_handle_start(a2a, src, dst, stream, reqs);
}

nsp_status_t nsp_a2a_open(nsp_a2a_t *a2a, int level)
{
    if (a2a == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_a2a_open: NULL handle");
    }
    return nsp_a2a_handle_open(a2a, level);
}

nsp_status_t nsp_a2a_destroy(nsp_a2a_t *a2a)
{
    if (a2a == NULL) {
        return NSP_OK;
    }
    return nsp_a2a_handle_destroy(a2a);
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
    status = nsp_a2a_handle_start(a2a, params->src, params->dst,
                                  (params->field_mask & NSP_A2A_FIELD_STREAM) ? params->stream
                                                                               : NULL,
                                  reqs);
    if (status < 0) {
        a2a->oneshot = 0;
        nsp_a2a_handle_destroy(a2a);
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

nsp_status_t nsp_layout_check(nsp_tree_t *tree, const nsp_layout_t *layout)
{
    nsp_layout_info_t info;
    nsp_comm_t       *world;

    if (tree == NULL || layout == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_layout_check: NULL tree or layout");
    }
    NSP_CHECK(nsp_layout_query(layout, &info));
    NSP_CHECK(nsp_a2a_world(tree, &info, "nested all-to-all", &world));
    return nsp_a2a_allgather_check(world, info.plan_hash, "layout check");
}

nsp_status_t nsp_a2a_release_cache(void)
{
    return NSP_OK; /* nothing is cached per process any more (see the header) */
}
