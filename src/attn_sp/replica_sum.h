/*
 * The element math of head-to-sequence replica sums (nspcomm.h,
 * nsp_a2a_replicas_t), pure, for C and CUDA: the host pack (pack.c), the
 * kernels' host emulation (pack_map.c) and the CUDA kernels
 * (pack_cuda_kernels.cu) add rows with these functions, so the three agree
 * bit for bit.
 *
 * A summing mode names the element type of the rows it adds: SUM_F32
 * float32, SUM_BF16 bfloat16, SUM_FP16 IEEE binary16. One addition is
 * dst = round(float(dst) + float(src)) in that type (float32: the float
 * addition itself), so r replicas added one after another in ascending
 * index round r - 1 times. The 16-bit conversions are nested attention's
 * (attn_reduce_map.h: nearest even, NaN stays NaN).
 */
#ifndef NSP_ATTN_SP_REPLICA_SUM_H_
#define NSP_ATTN_SP_REPLICA_SUM_H_

#include "attn_sp/attn_reduce_map.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NSP_RS_FN static __host__ __device__ __forceinline__
#else
#define NSP_RS_FN static inline
#endif

/* The values of nsp_a2a_replicas_t (nspcomm.h), for code that cannot
 * include it (CUDA); tests/a2a/test_pack.c checks they agree. */
enum {
    NSP_RS_FIRST = 0,
    NSP_RS_SUM_F32 = 1,
    NSP_RS_SUM_BF16 = 2,
    NSP_RS_SUM_FP16 = 3
};

/** Does replica mode `mode` sum the replicas (1) or take the first (0)? */
NSP_RS_FN int nsp_rs_sums(int32_t mode)
{
    return mode == NSP_RS_SUM_F32 || mode == NSP_RS_SUM_BF16 || mode == NSP_RS_SUM_FP16;
}

/** The element type (NSP_RD_*) a summing mode adds; FP32 for the others. */
NSP_RS_FN int32_t nsp_rs_dtype(int32_t mode)
{
    return mode == NSP_RS_SUM_BF16 ? NSP_RD_BF16 : mode == NSP_RS_SUM_FP16 ? NSP_RD_FP16
                                                                           : NSP_RD_FP32;
}

/** Bytes of one element a summing mode adds (4 or 2); 0 for FIRST (any). */
NSP_RS_FN size_t nsp_rs_elem_bytes(int32_t mode)
{
    return !nsp_rs_sums(mode) ? 0 : mode == NSP_RS_SUM_F32 ? 4 : 2;
}

/** One addition in element type `dtype` (NSP_RD_*): the rounded sum. */
NSP_RS_FN float nsp_rs_add1(int32_t dtype, float x, float y)
{
    float s = x + y;

    if (dtype == NSP_RD_BF16) {
        return nsp_rd_bf16_to_float(nsp_rd_float_to_bf16(s));
    }
    if (dtype == NSP_RD_FP16) {
        return nsp_rd_half_to_float(nsp_rd_float_to_half(s));
    }
    return s;
}

#ifndef __CUDACC__
/**
 * dst[k] += src[k] over `bytes` (a whole number of elements) of element
 * type `dtype` (NSP_RD_*), at any alignment; dst and src do not overlap.
 */
static inline void nsp_rs_add_bytes(int32_t dtype, void *dst, const void *src, size_t bytes)
{
    const size_t es = dtype == NSP_RD_FP32 ? 4 : 2;
    float        a[64], b[64]; /* staged, aligned: dst and src may be unaligned */

    for (size_t off = 0; off < bytes; off += sizeof(a)) {
        size_t n = bytes - off < sizeof(a) ? bytes - off : sizeof(a);
        memcpy(a, (char *)dst + off, n);
        memcpy(b, (const char *)src + off, n);
        for (size_t k = 0; k < n / es; ++k) {
            float x = nsp_rd_load(dtype, a, (int64_t)k), y = nsp_rd_load(dtype, b, (int64_t)k);
            nsp_rd_store(dtype, a, (int64_t)k, x + y);
        }
        memcpy((char *)dst + off, a, n);
    }
}
#endif /* !__CUDACC__ */

#endif /* NSP_ATTN_SP_REPLICA_SUM_H_ */
