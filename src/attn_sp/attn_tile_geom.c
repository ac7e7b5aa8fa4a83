/*
 * What the tiled attention kernels (attn_tile_impl.h, both variants) and
 * their callers share: the geometry of a block call and the limit of the
 * transposed-K/V cache. Calls nothing of attn_tile.c, which chooses the
 * variant, so no call goes back.
 */
#include "attn_sp/attn_tile.h"

#include "common/log.h"

#include <math.h>

nsp_attn_geom_t nsp_attn_geom_make(const nsp_attn_params_t *params,
                                   int64_t q_pos0, int64_t q_len,
                                   int64_t kv_pos0, int64_t kv_len)
{
    nsp_attn_geom_t g;

    g.q_heads = params->q_heads;
    g.kv_heads = params->kv_heads;
    g.head_dim = params->head_dim;
    g.scale = params->scale != 0.0f ? params->scale
                                    : (float)(1.0 / sqrt((double)params->head_dim));
    g.causal = params->causal;
    g.q_pos0 = q_pos0;
    g.q_len = q_len;
    g.kv_pos0 = kv_pos0;
    g.kv_len = kv_len;
    return g;
}

int nsp_attn_geom_empty(const nsp_attn_geom_t *geom)
{
    if (geom->q_len <= 0 || geom->kv_len <= 0) {
        return 1;
    }
    /* Causal: the first key comes after the last query. */
    return geom->causal && geom->kv_pos0 > geom->q_pos0 + geom->q_len - 1;
}

/* Default limit of the transposed-K/V cache: 16 MiB per call. */
#define TRANSPOSE_CACHE_DEFAULT ((int64_t)4 << 20)

/* One setting of the process (threads with a world each read it), hence
 * atomic. */
static int64_t transpose_cache_floats = TRANSPOSE_CACHE_DEFAULT;

int64_t nsp_attn_tile_transpose_cache(void)
{
    return __atomic_load_n(&transpose_cache_floats, __ATOMIC_RELAXED);
}

nsp_status_t nsp_attn_tile_set_transpose_cache(int64_t floats)
{
    if (floats < 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: transpose cache of %lld floats; "
                         "use 0 or more", (long long)floats);
    }
    __atomic_store_n(&transpose_cache_floats, floats, __ATOMIC_RELAXED);
    return NSP_OK;
}
