/*
 * Dtype-generic reductions of nested attention: conversions between the
 * element type of the buffers (nsp_attn_dtype_t: float32, bfloat16,
 * float16) and float32, the log-sum-exp merge of (o, lse) partials and the
 * sums of replicated or travelling gradients. Every reduction reads its
 * inputs in the buffers' dtype and accumulates in a float32 buffer; the
 * caller rounds once at the end (nsp_reduce_from_f32), so a bf16 result
 * carries one rounding however many partials went into it.
 *
 * Pure functions of pointers, counts, strides and a dtype: no allocation,
 * no state, no transport. Counts are elements, not bytes. Rounding is to
 * nearest, ties to even (as CUDA's __float2bfloat16_rn / __float2half_rn);
 * NaN stays NaN, overflow goes to infinity. A device engine implements the
 * same signatures; tests/attn/test_attn_reduce.c holds them to a float32
 * and float64 reference.
 */
#ifndef NSP_ATTN_SP_ATTN_REDUCE_H_
#define NSP_ATTN_SP_ATTN_REDUCE_H_

#include "nspcomm.h"

#include <stddef.h>
#include <stdint.h>

/** Bytes per element of `dtype` (4, 2, 2), or 0 for a value outside the enum. */
size_t nsp_reduce_elem_size(nsp_attn_dtype_t dtype);

/** dst[i] = src[i] widened to float32, i < n (src: n elements of `dtype`;
 *  FP32 copies). Exact. Errors: NSP_ERR_INVALID_ARG (bad dtype, NULL with
 *  n > 0). */
nsp_status_t nsp_reduce_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst);

/** dst[i] = src[i] rounded to `dtype`, i < n (dst: n elements of `dtype`;
 *  FP32 copies). src and dst may be the same memory for FP32 only.
 *  Errors: as nsp_reduce_to_f32(). */
nsp_status_t nsp_reduce_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst);

/** acc[i] += src[i] widened to float32, i < n: one contribution (a ring
 *  block's dK/dV, a slice's dq) added to a float32 accumulator.
 *  Errors: as nsp_reduce_to_f32(). */
nsp_status_t nsp_reduce_accumulate(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                   float *acc);

/**
 * Merge the partial (o2 [rows, head_dim] of `dtype`, lse2 [rows] float32)
 * into the running result (o [rows, head_dim] float32, lse [rows] float32)
 * by log-sum-exp, row by row (a row is one (token, head)):
 *   lse' = log(e^lse + e^lse2),  o' = e^(lse - lse') o + e^(lse2 - lse') o2.
 * A partial row with lse2 = -inf adds nothing; onto lse = -inf it is copied.
 * Symmetric in the two operands, so merges commute exactly; for FP32 the
 * same arithmetic as nsp_attn_merge(). Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_reduce_merge(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                              float *lse, const void *o2, const float *lse2);

/**
 * Sum of replicas: dst[i] = round(sum over k < nrep of src[k * stride + i]),
 * i < n, accumulated in float32 in ascending k and rounded once to `dtype`
 * (src: nrep copies of n elements `stride` elements apart, stride >= n, all
 * of `dtype`; dst: n elements of `dtype`, not overlapping src). The shape
 * of an exchange that lands the copies of a replicated head's gradient side
 * by side (one per replica) before adding them. Errors: NSP_ERR_INVALID_ARG.
 */
nsp_status_t nsp_reduce_sum_replicas(nsp_attn_dtype_t dtype, int nrep, size_t n,
                                     const void *src, size_t stride, void *dst);

#endif /* NSP_ATTN_SP_ATTN_REDUCE_H_ */
