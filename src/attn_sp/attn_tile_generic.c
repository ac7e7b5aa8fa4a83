/* The tiled attention kernels with 4-float vectors (SSE2, NEON, or
 * whatever the compiler makes of them): every CPU. */
#define NSP_TILE_VW  4
#define NSP_TILE_FWD nsp_attn_tile_fwd_generic
#define NSP_TILE_BWD nsp_attn_tile_bwd_generic
#include "attn_sp/attn_tile_impl.h"
