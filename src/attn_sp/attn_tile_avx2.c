/* The tiled attention kernels with 8-float vectors and FMA, for x86-64 CPUs
 * with AVX2 (chosen at run time by attn_tile.c; empty elsewhere). */
#include "attn_sp/attn_tile.h"

#if NSP_ATTN_HAVE_AVX2
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif
#define NSP_TILE_VW  8
#define NSP_TILE_FWD nsp_attn_tile_fwd_avx2
#define NSP_TILE_BWD nsp_attn_tile_bwd_avx2
#include "attn_sp/attn_tile_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
