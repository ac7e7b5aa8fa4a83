/*
 * Nested attention's reductions on the device (attn_reduce_cuda.h): the
 * shared argument checks, then the kernel launch; and the CUDA memory
 * type's reduce ops over them (attn_reduce.h).
 */
#include "config.h"

#include "attn_sp/attn_reduce_cuda.h"

#include "attn_sp/attn_reduce.h"
#include "attn_sp/attn_reduce_kernels.h"
#include "common/log.h"
#include "streams/cuda_util.h"

nsp_status_t nsp_cuda_sum_replicas(int dtype, int64_t rows, int64_t row_elems, void *dst,
                                   int64_t dst_stride, const void *src, int64_t src_stride,
                                   int nrep, int64_t rep_stride, void *stream)
{
    nsp_rd_sum_args_t a;

    NSP_CHECK(nsp_rd_sum_args(dtype, rows, row_elems, dst, dst_stride, src, src_stride, nrep,
                              rep_stride, &a));
    NSP_CUDA_CHECK(nsp_rd_launch_sum(&a, (cudaStream_t)stream), "replica sum (cuda)");
    return NSP_OK;
}

nsp_status_t nsp_cuda_attn_merge(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                                 const void *o2, const float *lse2, void *stream)
{
    nsp_rd_merge_args_t a;

    NSP_CHECK(nsp_rd_merge_args(dtype, rows, head_dim, o, lse, o2, lse2, &a));
    NSP_CUDA_CHECK(nsp_rd_launch_merge(&a, (cudaStream_t)stream), "partial merge (cuda)");
    return NSP_OK;
}

nsp_status_t nsp_cuda_convert(int src_dtype, int dst_dtype, int64_t n, const void *src,
                              void *dst, void *stream)
{
    nsp_rd_convert_args_t a;

    NSP_CHECK(nsp_rd_convert_args(src_dtype, dst_dtype, n, src, dst, &a));
    NSP_CUDA_CHECK(nsp_rd_launch_convert(&a, (cudaStream_t)stream), "conversion (cuda)");
    return NSP_OK;
}

nsp_status_t nsp_cuda_accumulate(int dtype, int64_t n, const void *src, float *acc,
                                 void *stream)
{
    nsp_rd_acc_args_t a;

    NSP_CHECK(nsp_rd_acc_args(dtype, n, src, acc, &a));
    NSP_CUDA_CHECK(nsp_rd_launch_acc(&a, (cudaStream_t)stream), "accumulation (cuda)");
    return NSP_OK;
}

/* ---- the reduce ops of the CUDA memory type (attn_reduce.h) --------------- */

static nsp_status_t ops_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                               void *stream)
{
    return nsp_cuda_convert((int)dtype, NSP_RD_FP32, (int64_t)n, src, dst, stream);
}

static nsp_status_t ops_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                                 void *stream)
{
    return nsp_cuda_convert(NSP_RD_FP32, (int)dtype, (int64_t)n, src, dst, stream);
}

static nsp_status_t ops_sum_replicas(nsp_attn_dtype_t dtype, int64_t rows, int64_t row_elems,
                                     void *dst, int64_t dst_stride, const void *src,
                                     int64_t src_stride, int nrep, int64_t rep_stride,
                                     void *stream)
{
    return nsp_cuda_sum_replicas((int)dtype, rows, row_elems, dst, dst_stride, src, src_stride,
                                 nrep, rep_stride, stream);
}

static nsp_status_t ops_merge(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                              float *lse, const void *o2, const float *lse2, void *stream)
{
    return nsp_cuda_attn_merge((int)dtype, rows, head_dim, o, lse, o2, lse2, stream);
}

static nsp_status_t ops_accumulate(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                   float *acc, void *stream)
{
    return nsp_cuda_accumulate((int)dtype, (int64_t)n, src, acc, stream);
}

const nsp_reduce_ops_t nsp_reduce_ops_cuda = {
    .name         = "cuda",
    .to_f32       = ops_to_f32,
    .from_f32     = ops_from_f32,
    .sum_replicas = ops_sum_replicas,
    .merge        = ops_merge,
    .accumulate   = ops_accumulate,
};
