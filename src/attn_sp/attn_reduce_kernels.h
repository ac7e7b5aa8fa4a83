/*
 * The launchers of the reduction kernels (attn_reduce_kernels.cu), seen
 * from C. Arguments are filled and checked by the caller
 * (attn_reduce_cuda.c, through nsp_rd_sum_args / nsp_rd_merge_args).
 */
#ifndef NSP_ATTN_SP_ATTN_REDUCE_KERNELS_H_
#define NSP_ATTN_SP_ATTN_REDUCE_KERNELS_H_

#include "attn_sp/attn_reduce_map.h"

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Enqueue the replica sum of *a on `stream`; the launch's cudaError_t. */
cudaError_t nsp_rd_launch_sum(const nsp_rd_sum_args_t *a, cudaStream_t stream);

/** Enqueue the partial merge of *a on `stream`; the launch's cudaError_t. */
cudaError_t nsp_rd_launch_merge(const nsp_rd_merge_args_t *a, cudaStream_t stream);

/** Enqueue the conversion of *a on `stream`; the launch's cudaError_t. */
cudaError_t nsp_rd_launch_convert(const nsp_rd_convert_args_t *a, cudaStream_t stream);

/** Enqueue the accumulation of *a on `stream`; the launch's cudaError_t. */
cudaError_t nsp_rd_launch_acc(const nsp_rd_acc_args_t *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* NSP_ATTN_SP_ATTN_REDUCE_KERNELS_H_ */
