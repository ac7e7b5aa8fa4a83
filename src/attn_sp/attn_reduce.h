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
#include "common/table.h"

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

/*
 * The reductions of one memory type (src/attn_sp/memtype.h), with a stream:
 * what nested attention runs on the memory its world moves. Buffers are in
 * that memory; work is enqueued on `stream` (a stream of the memory type's
 * devops; host memory: done on return, stream NULL). dtype values are
 * nsp_attn_dtype_t (= attn_reduce_map.h NSP_RD_*). Same results as the host
 * functions above, bit for bit (tests/gpu/test_reduce_cuda.c).
 *
 *   host   the functions above and the host twins of attn_reduce_map.h
 *          (attn_reduce_emul.c)
 *   cuda   the kernels of attn_reduce_cuda.h (CUDA builds)
 */
typedef struct nsp_reduce_ops {
    const char *name;
    /** dst[i] = src[i] widened from `dtype` to float32 (exact), i < n; not
     *  overlapping. Errors: NSP_ERR_INVALID_ARG, NSP_ERR_BACKEND. */
    nsp_status_t (*to_f32)(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                           void *stream);
    /** dst[i] = src[i] rounded from float32 to `dtype` (nearest even, one
     *  rounding), i < n. Errors: as to_f32. */
    nsp_status_t (*from_f32)(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                             void *stream);
    /** dst[r, e] = sum_k src[k * rep_stride + r * src_stride + e], k < nrep
     *  (float32 accumulation, one rounding; strides in elements). */
    nsp_status_t (*sum_replicas)(nsp_attn_dtype_t dtype, int64_t rows, int64_t row_elems,
                                 void *dst, int64_t dst_stride, const void *src,
                                 int64_t src_stride, int nrep, int64_t rep_stride,
                                 void *stream);
    /** Merge the partial (o2 [rows, head_dim] of dtype, lse2) into the
     *  float32 (o, lse), as nsp_reduce_merge(). */
    nsp_status_t (*merge)(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                          float *lse, const void *o2, const float *lse2, void *stream);
    /** acc[i] += src[i] widened from `dtype`, i < n, as
     *  nsp_reduce_accumulate() (ring attention's dq and travelling dK/dV). */
    nsp_status_t (*accumulate)(nsp_attn_dtype_t dtype, size_t n, const void *src, float *acc,
                               void *stream);
} nsp_reduce_ops_t;

#define NSP_REDUCE_OPS_ENTRIES(X) X(to_f32) X(from_f32) X(sum_replicas) X(merge) X(accumulate)
NSP_TABLE_COMPLETE(nsp_reduce_ops_t, to_f32, NSP_REDUCE_OPS_ENTRIES);

/** Host memory (attn_reduce_emul.c). */
extern const nsp_reduce_ops_t nsp_reduce_ops_host;
/** CUDA memory (attn_reduce_cuda.c; CUDA builds only). */
extern const nsp_reduce_ops_t nsp_reduce_ops_cuda;

#endif /* NSP_ATTN_SP_ATTN_REDUCE_H_ */
