/*
 * The element math of nested attention's reductions on the device (pure;
 * C and CUDA), compiled both for the GPU (attn_reduce_kernels.cu) and for
 * the host (attn_reduce_emul.c, and the host path's own reductions in
 * attn_reduce.c), so tests on a CPU check the very functions a kernel runs
 * (tests/gpu/test_reduce_map.c) and the GPU adds only the launch. Two
 * reductions and a conversion, in the shapes of the host ones:
 *
 *   replica sum   dst[r, e] = sum_{k < nrep} src[k * rep_stride + r * src_stride + e]
 *                 r < rows, e < row_elems (strides in elements); every term
 *                 is read as float32 and added in ascending k into a float32
 *                 accumulator; the total is rounded once to the dtype.
 *                 (dK/dV of a KV head replicated on nrep ranks, the
 *                 replicas' rows laid side by side.)
 *   partial merge o [rows, D] float32 and lse [rows] (a running result)
 *                 take in o2 [rows, D] of the dtype and lse2 [rows]:
 *                 lse = log(e^lse + e^lse2), o = o e^(lse_old - lse) +
 *                 o2 e^(lse2 - lse), with nsp_attn_merge()'s rules: lse2 =
 *                 -inf adds nothing, lse = -inf takes o2, the log-sum-exp
 *                 symmetric in (lse, lse2). (Ring attention's merge.)
 *   accumulation  acc[i] += src[i], i < n, src read as float32 from its
 *                 dtype, acc float32 (a ring step's dq, a travelling
 *                 dK/dV sum).
 *   conversion    dst[i] = src[i], i < n, read as float32 from src's dtype
 *                 and rounded once to dst's (widening to float32 is exact).
 *                 (A level's dK/dV widened to float32 scratch before their
 *                 summing exchange, and the float32 sums rounded back.)
 *
 * Element types are nsp_attn_dtype_t values: FP32, BF16 (the top 16 bits
 * of a float32), FP16 (IEEE binary16). Stores round to nearest even; NaN
 * stays NaN. Work units: the replica sum has rows * row_elems units (one
 * element each), the merge `rows` units (one row each), the conversion n units (one
 * element each).
 */
#ifndef NSP_ATTN_SP_ATTN_REDUCE_MAP_H_
#define NSP_ATTN_SP_ATTN_REDUCE_MAP_H_

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NSP_RD_FN static __host__ __device__ __forceinline__
#else
#define NSP_RD_FN static inline
#endif

enum { NSP_RD_FP32 = 0, NSP_RD_BF16 = 1, NSP_RD_FP16 = 2 }; /* = nsp_attn_dtype_t */

/** Arguments of one replica sum (host or device pointers). */
typedef struct nsp_rd_sum_args {
    int32_t     dtype;       /**< NSP_RD_* of src and dst */
    int32_t     nrep;        /**< replicas summed (>= 1) */
    int64_t     rows, row_elems;
    int64_t     src_stride;  /**< elements between rows of one replica */
    int64_t     rep_stride;  /**< elements between replicas */
    int64_t     dst_stride;  /**< elements between rows of dst */
    const void *src;
    void       *dst;
} nsp_rd_sum_args_t;

/** Arguments of one partial merge (host or device pointers). */
typedef struct nsp_rd_merge_args {
    int32_t      dtype;      /**< NSP_RD_* of o2 */
    int32_t      head_dim;   /**< D */
    int64_t      rows;
    float       *o;          /**< [rows, D] running result, float32 */
    float       *lse;        /**< [rows] */
    const void  *o2;         /**< [rows, D] partial, dtype */
    const float *lse2;       /**< [rows] */
} nsp_rd_merge_args_t;

/** Arguments of one conversion (host or device pointers). */
typedef struct nsp_rd_convert_args {
    int32_t     src_dtype;   /**< NSP_RD_* of src */
    int32_t     dst_dtype;   /**< NSP_RD_* of dst */
    int64_t     n;           /**< elements */
    const void *src;         /**< [n] of src_dtype */
    void       *dst;         /**< [n] of dst_dtype, not overlapping src */
} nsp_rd_convert_args_t;

/** Arguments of one accumulation (host or device pointers). */
typedef struct nsp_rd_acc_args {
    int32_t     dtype;       /**< NSP_RD_* of src */
    int32_t     unused_;
    int64_t     n;           /**< elements */
    const void *src;         /**< [n] of dtype */
    float      *acc;         /**< [n] float32, not overlapping src */
} nsp_rd_acc_args_t;

NSP_RD_FN float nsp_rd_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

NSP_RD_FN uint32_t nsp_rd_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/** IEEE binary16 bits -> float (exact). */
NSP_RD_FN float nsp_rd_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

    if (exp == 0x1fu) {
        return nsp_rd_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    }
    if (exp == 0) { /* zero, subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return nsp_rd_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

/** float -> IEEE binary16 bits, nearest even (overflow to inf). */
NSP_RD_FN uint16_t nsp_rd_float_to_half(float f)
{
    uint32_t u = nsp_rd_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;

    if (a >= 0x7f800000u) { /* inf, NaN (kept quiet) */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    }
    if (a >= 0x477ff000u) { /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a < 0x38800000u) { /* below 2^-14: subnormal half, exact rounding of a * 2^24 */
        float    v = nsp_rd_bits_f32(a) * 16777216.0f;
        uint32_t i = (uint32_t)v;
        float    rem = v - (float)i;
        i += rem > 0.5f || (rem == 0.5f && (i & 1u));
        return (uint16_t)(sign | i);
    }
    {
        uint32_t base = a - (112u << 23); /* rebias the exponent */
        uint32_t half = base >> 13, rest = base & 0x1fffu;
        half += rest > 0x1000u || (rest == 0x1000u && (half & 1u));
        return (uint16_t)(sign | half);
    }
}

/** bf16 bits -> float (exact). */
NSP_RD_FN float nsp_rd_bf16_to_float(uint16_t b)
{
    return nsp_rd_bits_f32((uint32_t)b << 16);
}

/** float -> bf16 bits, nearest even; NaN stays NaN. */
NSP_RD_FN uint16_t nsp_rd_float_to_bf16(float f)
{
    uint32_t u = nsp_rd_f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u);
    }
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/** Element i of a dtype array, as float. */
NSP_RD_FN float nsp_rd_load(int32_t dtype, const void *p, int64_t i)
{
    if (dtype == NSP_RD_FP32) {
        return ((const float *)p)[i];
    }
    if (dtype == NSP_RD_BF16) {
        return nsp_rd_bf16_to_float(((const uint16_t *)p)[i]);
    }
    return nsp_rd_half_to_float(((const uint16_t *)p)[i]);
}

/** Store v as element i of a dtype array (rounded once). */
NSP_RD_FN void nsp_rd_store(int32_t dtype, void *p, int64_t i, float v)
{
    if (dtype == NSP_RD_FP32) {
        ((float *)p)[i] = v;
    } else if (dtype == NSP_RD_BF16) {
        ((uint16_t *)p)[i] = nsp_rd_float_to_bf16(v);
    } else {
        ((uint16_t *)p)[i] = nsp_rd_float_to_half(v);
    }
}

/** Units of a replica sum: one per element of dst. */
NSP_RD_FN uint64_t nsp_rd_sum_units(const nsp_rd_sum_args_t *a)
{
    return a->rows > 0 && a->row_elems > 0 ? (uint64_t)a->rows * (uint64_t)a->row_elems : 0;
}

/** Replica-sum unit u: row u / row_elems, element u % row_elems. */
NSP_RD_FN void nsp_rd_sum_unit(const nsp_rd_sum_args_t *a, uint64_t u)
{
    int64_t r = (int64_t)(u / (uint64_t)a->row_elems), e = (int64_t)(u % (uint64_t)a->row_elems);
    int64_t at = r * a->src_stride + e;
    float   acc = 0.0f;

    for (int32_t k = 0; k < a->nrep; ++k) {
        acc += nsp_rd_load(a->dtype, a->src, at + (int64_t)k * a->rep_stride);
    }
    nsp_rd_store(a->dtype, a->dst, r * a->dst_stride + e, acc);
}

/** Merge unit `row` (nsp_attn_merge()'s formula and cases). */
NSP_RD_FN void nsp_rd_merge_row(const nsp_rd_merge_args_t *a, int64_t row)
{
    float        x = a->lse[row], y = a->lse2[row], hi, lo, merged, wa, wb;
    float       *o = a->o + row * a->head_dim;
    int64_t      base = row * a->head_dim;

    if (y == -INFINITY) {
        return;
    }
    if (x == -INFINITY) {
        for (int32_t d = 0; d < a->head_dim; ++d) {
            o[d] = nsp_rd_load(a->dtype, a->o2, base + d);
        }
        a->lse[row] = y;
        return;
    }
    hi     = x > y ? x : y;
    lo     = x > y ? y : x;
    merged = hi + log1pf(expf(lo - hi));
    wa     = expf(x - merged);
    wb     = expf(y - merged);
    for (int32_t d = 0; d < a->head_dim; ++d) {
        o[d] = wa * o[d] + wb * nsp_rd_load(a->dtype, a->o2, base + d);
    }
    a->lse[row] = merged;
}

/** Accumulation unit i: acc[i] += src[i] read as float32. */
NSP_RD_FN void nsp_rd_acc_unit(const nsp_rd_acc_args_t *a, int64_t i)
{
    a->acc[i] += nsp_rd_load(a->dtype, a->src, i);
}

/** Conversion unit i: element i, one load and one store. */
NSP_RD_FN void nsp_rd_convert_unit(const nsp_rd_convert_args_t *a, int64_t i)
{
    nsp_rd_store(a->dst_dtype, a->dst, i, nsp_rd_load(a->src_dtype, a->src, i));
}

#ifndef __CUDACC__
#include "nspcomm.h"

/**
 * The host twins of the device reductions (attn_reduce_emul.c): the same
 * units in ascending order, so a GPU result must equal them up to the
 * rounding of expf/log1pf (merge) and bit for bit (replica sum,
 * conversion). Plain
 * signatures: pointers, counts, strides in elements, the dtype.
 * Errors: NSP_ERR_INVALID_ARG (negative counts, nrep < 1, NULL with work,
 * a dtype other than FP32, BF16, FP16).
 */
nsp_status_t nsp_rd_sum_replicas_host(int dtype, int64_t rows, int64_t row_elems, void *dst,
                                      int64_t dst_stride, const void *src, int64_t src_stride,
                                      int nrep, int64_t rep_stride);
nsp_status_t nsp_rd_merge_host(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                               const void *o2, const float *lse2);
nsp_status_t nsp_rd_convert_host(int src_dtype, int dst_dtype, int64_t n, const void *src,
                                 void *dst);

/** Fill the argument structs (and check them) for either side. */
nsp_status_t nsp_rd_sum_args(int dtype, int64_t rows, int64_t row_elems, void *dst,
                             int64_t dst_stride, const void *src, int64_t src_stride, int nrep,
                             int64_t rep_stride, nsp_rd_sum_args_t *a);
nsp_status_t nsp_rd_merge_args(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                               const void *o2, const float *lse2, nsp_rd_merge_args_t *a);
nsp_status_t nsp_rd_convert_args(int src_dtype, int dst_dtype, int64_t n, const void *src,
                                 void *dst, nsp_rd_convert_args_t *a);
nsp_status_t nsp_rd_acc_args(int dtype, int64_t n, const void *src, float *acc,
                             nsp_rd_acc_args_t *a);
#endif

#endif /* NSP_ATTN_SP_ATTN_REDUCE_MAP_H_ */
