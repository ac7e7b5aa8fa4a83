/*
 * Engines of the nested all-to-all: one per memory type, in a table the
 * public entry points (nested_a2a_api.c) choose from.
 *
 *   host         host memory over a host transport (UCX): pack, exchange,
 *                unpack on the CPU (nested_a2a.c)
 *   host-mapped  the same, where params.mapped = 1: levels whose group
 *                shares a host read the peers' nsp_mem_alloc() sources in
 *                place (nested_a2a.c)
 *   cuda         device memory over a device transport (NCCL): kernels and
 *                level streams (nested_a2a_cuda.c; an UNSUPPORTED entry in
 *                builds without CUDA, nested_a2a_nocuda.c)
 *
 * Every entry of every engine is set: what an engine cannot do returns
 * NSP_ERR_UNSUPPORTED with a message, as the transport table does. Engines
 * call the shared helpers of nested_a2a_common.h, never the public entry
 * points, so no call goes back up (scripts/check-structure.py).
 */
#ifndef NSP_ATTN_SP_NESTED_A2A_ENGINE_H_
#define NSP_ATTN_SP_NESTED_A2A_ENGINE_H_

#include "nspcomm.h"

typedef struct nsp_a2a_engine nsp_a2a_engine_t;

/* The common head of every engine's handle (its first member). */
struct nsp_a2a {
    const nsp_a2a_engine_t *engine;
    int                     nlevels;
    int                     oneshot; /* nsp_a2a_post: freed with its last request */
};

struct nsp_a2a_engine {
    const char *name;
    /** Build the exchange of `layout` with `params` (buffers not read):
     *  levels, parts, scratch, device tables; the agreement check when
     *  params ask for it (collective). `gated`: levels wait for open. */
    nsp_status_t (*create)(nsp_tree_t *tree, const nsp_layout_t *layout,
                           const nsp_a2a_params_t *params, int gated, nsp_a2a_t **a2a);
    /** Start one exchange from src to dst (borrowed until the requests
     *  complete); reqs[nlevels] as nsp_a2a_post(). Takes the world's next
     *  operation number. */
    nsp_status_t (*start)(nsp_a2a_t *a2a, const void *src, void *dst, void *stream,
                          nsp_request_t **reqs);
    /** Let level `level` of a gated exchange start. */
    nsp_status_t (*open)(nsp_a2a_t *a2a, int level);
    /** Free the handle. NSP_ERR_INVALID_ARG while its requests are held. */
    nsp_status_t (*destroy)(nsp_a2a_t *a2a);
};

extern const nsp_a2a_engine_t nsp_a2a_engine_host;
extern const nsp_a2a_engine_t nsp_a2a_engine_host_mapped;
extern const nsp_a2a_engine_t nsp_a2a_engine_cuda;

#endif /* NSP_ATTN_SP_NESTED_A2A_ENGINE_H_ */
