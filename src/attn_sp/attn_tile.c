/*
 * The choice of kernel variant for the tiled host attention (the geometry
 * helpers the variants call are in attn_tile_geom.c). The kernels are one template (attn_tile_impl.h) compiled twice:
 * attn_tile_generic.c with 4-float vectors (SSE2 on x86-64, NEON on arm64)
 * and, on x86-64 with GCC or Clang, attn_tile_avx2.c with 8-float vectors
 * and FMA, used when the CPU has AVX2 and FMA.
 */
#include "attn_sp/attn_tile.h"

#include "common/log.h"


/* NSP_ATTN_ISA_AUTO, or the variant a test forced: one setting of the
 * process (threads with a world each read it), hence atomic. */
static int forced_isa = NSP_ATTN_ISA_AUTO;

static int cpu_has_avx2(void)
{
#if NSP_ATTN_HAVE_AVX2
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

nsp_status_t nsp_attn_tile_force_isa(nsp_attn_isa_t isa)
{
    if (isa == NSP_ATTN_ISA_AVX2 && !cpu_has_avx2()) {
        return nsp_error_quiet(NSP_ERR_UNSUPPORTED, "attention: the AVX2 kernels are not "
                               "built or this CPU lacks AVX2/FMA");
    }
    if (isa != NSP_ATTN_ISA_AUTO && isa != NSP_ATTN_ISA_GENERIC && isa != NSP_ATTN_ISA_AVX2) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: unknown kernel variant %d", (int)isa);
    }
    __atomic_store_n(&forced_isa, (int)isa, __ATOMIC_RELAXED);
    return NSP_OK;
}

nsp_attn_isa_t nsp_attn_tile_isa(void)
{
    nsp_attn_isa_t isa = (nsp_attn_isa_t)__atomic_load_n(&forced_isa, __ATOMIC_RELAXED);

    if (isa != NSP_ATTN_ISA_AUTO) {
        return isa;
    }
    return cpu_has_avx2() ? NSP_ATTN_ISA_AVX2 : NSP_ATTN_ISA_GENERIC;
}

nsp_status_t nsp_attn_tile_fwd(const nsp_attn_geom_t *geom, const float *q,
                               const float *k, const float *v, float *o,
                               float *lse)
{
#if NSP_ATTN_HAVE_AVX2
    if (nsp_attn_tile_isa() == NSP_ATTN_ISA_AVX2) {
        return nsp_attn_tile_fwd_avx2(geom, q, k, v, o, lse);
    }
#endif
    return nsp_attn_tile_fwd_generic(geom, q, k, v, o, lse);
}

nsp_status_t nsp_attn_tile_bwd(const nsp_attn_geom_t *geom, const float *q,
                               const float *k, const float *v,
                               const float *dout, const float *lse,
                               const float *delta, float *dq, float *dk,
                               float *dv)
{
#if NSP_ATTN_HAVE_AVX2
    if (nsp_attn_tile_isa() == NSP_ATTN_ISA_AVX2) {
        return nsp_attn_tile_bwd_avx2(geom, q, k, v, dout, lse, delta, dq, dk, dv);
    }
#endif
    return nsp_attn_tile_bwd_generic(geom, q, k, v, dout, lse, delta, dq, dk, dv);
}
