/*
 * The launcher of the CUDA pack/unpack kernels (pack_cuda_kernels.cu), seen
 * from C. Arguments are checked by the caller (pack_cuda.c).
 */
#ifndef NSP_ATTN_SP_PACK_CUDA_KERNELS_H_
#define NSP_ATTN_SP_PACK_CUDA_KERNELS_H_

#include "attn_sp/pack_map.h"

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Enqueue the kernel of a->op on `stream` with `vector_bytes`-wide accesses
 * (16, 8, 4, 2 or 1 for copies; 16, 8 or 4 for the float32 sums; from
 * nsp_pk_vector_bytes()). Returns the launch's cudaError_t.
 */
cudaError_t nsp_pk_launch(const nsp_pk_args_t *a, unsigned vector_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* NSP_ATTN_SP_PACK_CUDA_KERNELS_H_ */
