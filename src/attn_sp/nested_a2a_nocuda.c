/*
 * The CUDA engine of the nested all-to-all in a build without CUDA: every
 * entry says so (nested_a2a_engine.h). A world that moves device memory
 * cannot exist in such a build, so only a misconfigured caller gets here.
 */
#include "config.h"

#include "attn_sp/nested_a2a_engine.h"
#include "common/log.h"

static nsp_status_t nocuda_error(const char *what)
{
    return nsp_error(NSP_ERR_UNSUPPORTED, "nested all-to-all %s: this build has no CUDA "
                     "(configure --with-cuda)", what);
}

static nsp_status_t nocuda_create(nsp_tree_t *tree, const nsp_layout_t *layout,
                                  const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a)
{
    return nocuda_error("create");
}

static nsp_status_t nocuda_start(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                                 nsp_request_t **reqs)
{
    return nocuda_error("start");
}

static nsp_status_t nocuda_open(nsp_a2a_t *a2a, int level)
{
    return nocuda_error("open");
}

static nsp_status_t nocuda_destroy(nsp_a2a_t *a2a)
{
    return nocuda_error("destroy");
}

const nsp_a2a_engine_t nsp_a2a_engine_cuda = {
    .name    = "cuda (not built)",
    .create  = nocuda_create,
    .start   = nocuda_start,
    .open    = nocuda_open,
    .destroy = nocuda_destroy,
};
