/*
 * Nested attention's reductions on the device (CUDA builds): the twins of
 * the host functions of attn_reduce_map.h (nsp_rd_sum_replicas_host,
 * nsp_rd_merge_host), with the same arguments plus a stream; buffers are
 * device memory of the current device. Enqueued on `stream` (a
 * cudaStream_t; NULL = the legacy default stream); nothing waits.
 *
 * What uses them: the CUDA memory type's reduce ops (at the end of
 * attn_reduce_cuda.c): nested attention's conversions (dK/dV widened to
 * float32 and rounded back with dkv_f32), and ring levels on device memory
 * (ring_attn.c: the merge of partials, the accumulation of dq and of the
 * travelling dK/dV, the conversions). The replica sum is not called by the
 * driver: replicated dK/dV are summed inside the CUDA all-to-all's unpack
 * (pack_cuda.h). tests/gpu/test_reduce_cuda checks them against the host
 * twins on a GPU.
 */
#ifndef NSP_ATTN_SP_ATTN_REDUCE_CUDA_H_
#define NSP_ATTN_SP_ATTN_REDUCE_CUDA_H_

#include "nspcomm.h"

#include <stdint.h>

/** dst[r, e] = sum_k src[k * rep_stride + r * src_stride + e], float32
 *  accumulation, one rounding. Errors: NSP_ERR_INVALID_ARG, NSP_ERR_BACKEND
 *  (the launch failed: CUDA's message). */
nsp_status_t nsp_cuda_sum_replicas(int dtype, int64_t rows, int64_t row_elems, void *dst,
                                   int64_t dst_stride, const void *src, int64_t src_stride,
                                   int nrep, int64_t rep_stride, void *stream);

/** Merge the partial (o2 of dtype, lse2) into (o, lse), float32, as
 *  nsp_attn_merge(). Errors: as nsp_cuda_sum_replicas(). */
nsp_status_t nsp_cuda_attn_merge(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                                 const void *o2, const float *lse2, void *stream);

/** acc[i] += src[i] read as float32 from dtype, i < n (float32 acc, not
 *  overlapping src). Errors: as nsp_cuda_sum_replicas(). */
nsp_status_t nsp_cuda_accumulate(int dtype, int64_t n, const void *src, float *acc,
                                 void *stream);

/** dst[i] = src[i] converted from src_dtype to dst_dtype (one rounding),
 *  i < n; src and dst must not overlap. Errors: as nsp_cuda_sum_replicas(). */
nsp_status_t nsp_cuda_convert(int src_dtype, int dst_dtype, int64_t n, const void *src,
                              void *dst, void *stream);

#endif /* NSP_ATTN_SP_ATTN_REDUCE_CUDA_H_ */
