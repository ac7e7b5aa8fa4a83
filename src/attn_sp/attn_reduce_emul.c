/*
 * Host twins of the device reductions (attn_reduce_map.h): the argument
 * checks both sides share, and the units run in order on the CPU; and the
 * reduce ops of host memory (attn_reduce.h) over them.
 */
#include "config.h"

#include "attn_sp/attn_reduce.h"
#include "attn_sp/attn_reduce_map.h"
#include "common/log.h"

static nsp_status_t rd_check_dtype(int dtype, const char *what)
{
    if (dtype != NSP_RD_FP32 && dtype != NSP_RD_BF16 && dtype != NSP_RD_FP16) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: dtype %d is not NSP_ATTN_FP32, BF16 or "
                         "FP16", what, dtype);
    }
    return NSP_OK;
}

nsp_status_t nsp_rd_sum_args(int dtype, int64_t rows, int64_t row_elems, void *dst,
                             int64_t dst_stride, const void *src, int64_t src_stride, int nrep,
                             int64_t rep_stride, nsp_rd_sum_args_t *a)
{
    NSP_CHECK(rd_check_dtype(dtype, "replica sum"));
    if (rows < 0 || row_elems < 0 || nrep < 1 ||
        (rows > 0 && row_elems > 0 && (dst == NULL || src == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "replica sum: rows %lld, row_elems %lld, nrep "
                         "%d: need counts >= 0, nrep >= 1 and non-NULL dst, src",
                         (long long)rows, (long long)row_elems, nrep);
    }
    a->dtype      = dtype;
    a->nrep       = nrep;
    a->rows       = rows;
    a->row_elems  = row_elems;
    a->src_stride = src_stride;
    a->rep_stride = rep_stride;
    a->dst_stride = dst_stride;
    a->src        = src;
    a->dst        = dst;
    return NSP_OK;
}

nsp_status_t nsp_rd_merge_args(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                               const void *o2, const float *lse2, nsp_rd_merge_args_t *a)
{
    NSP_CHECK(rd_check_dtype(dtype, "partial merge"));
    if (rows < 0 || head_dim < 1 ||
        (rows > 0 && (o == NULL || lse == NULL || o2 == NULL || lse2 == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "partial merge: rows %lld, head_dim %d: need "
                         "rows >= 0, head_dim >= 1 and non-NULL o, lse, o2, lse2",
                         (long long)rows, head_dim);
    }
    a->dtype    = dtype;
    a->head_dim = head_dim;
    a->rows     = rows;
    a->o        = o;
    a->lse      = lse;
    a->o2       = o2;
    a->lse2     = lse2;
    return NSP_OK;
}

nsp_status_t nsp_rd_convert_args(int src_dtype, int dst_dtype, int64_t n, const void *src,
                                 void *dst, nsp_rd_convert_args_t *a)
{
    NSP_CHECK(rd_check_dtype(src_dtype, "conversion"));
    NSP_CHECK(rd_check_dtype(dst_dtype, "conversion"));
    if (n < 0 || (n > 0 && (src == NULL || dst == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "conversion: n %lld: need n >= 0 and non-NULL "
                         "src, dst", (long long)n);
    }
    a->src_dtype = src_dtype;
    a->dst_dtype = dst_dtype;
    a->n         = n;
    a->src       = src;
    a->dst       = dst;
    return NSP_OK;
}

nsp_status_t nsp_rd_acc_args(int dtype, int64_t n, const void *src, float *acc,
                             nsp_rd_acc_args_t *a)
{
    NSP_CHECK(rd_check_dtype(dtype, "accumulation"));
    if (n < 0 || (n > 0 && (src == NULL || acc == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "accumulation: n %lld: need n >= 0 and non-NULL "
                         "src, acc", (long long)n);
    }
    a->dtype   = dtype;
    a->unused_ = 0;
    a->n       = n;
    a->src     = src;
    a->acc     = acc;
    return NSP_OK;
}

nsp_status_t nsp_rd_sum_replicas_host(int dtype, int64_t rows, int64_t row_elems, void *dst,
                                      int64_t dst_stride, const void *src, int64_t src_stride,
                                      int nrep, int64_t rep_stride)
{
    nsp_rd_sum_args_t a;
    uint64_t          n;

    NSP_CHECK(nsp_rd_sum_args(dtype, rows, row_elems, dst, dst_stride, src, src_stride, nrep,
                              rep_stride, &a));
    n = nsp_rd_sum_units(&a);
    for (uint64_t u = 0; u < n; ++u) {
        nsp_rd_sum_unit(&a, u);
    }
    return NSP_OK;
}

nsp_status_t nsp_rd_merge_host(int dtype, int64_t rows, int head_dim, float *o, float *lse,
                               const void *o2, const float *lse2)
{
    nsp_rd_merge_args_t a;

    NSP_CHECK(nsp_rd_merge_args(dtype, rows, head_dim, o, lse, o2, lse2, &a));
    for (int64_t r = 0; r < rows; ++r) {
        nsp_rd_merge_row(&a, r);
    }
    return NSP_OK;
}

nsp_status_t nsp_rd_convert_host(int src_dtype, int dst_dtype, int64_t n, const void *src,
                                 void *dst)
{
    nsp_rd_convert_args_t a;

    NSP_CHECK(nsp_rd_convert_args(src_dtype, dst_dtype, n, src, dst, &a));
    for (int64_t i = 0; i < n; ++i) {
        nsp_rd_convert_unit(&a, i);
    }
    return NSP_OK;
}

/* ---- the reduce ops of host memory (attn_reduce.h) ------------------------ */

/* A stream on host memory is a caller's mistake the memory type's
 * check_stream refuses first; say so again rather than ignore it. */
static nsp_status_t host_no_stream(void *stream, const char *what)
{
    if (stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s on host memory: a stream was given; pass "
                         "NULL", what);
    }
    return NSP_OK;
}

static nsp_status_t host_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst,
                                void *stream)
{
    NSP_CHECK(host_no_stream(stream, "conversion"));
    return nsp_reduce_to_f32(dtype, n, src, dst);
}

static nsp_status_t host_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst,
                                  void *stream)
{
    NSP_CHECK(host_no_stream(stream, "conversion"));
    return nsp_reduce_from_f32(dtype, n, src, dst);
}

static nsp_status_t host_sum_replicas(nsp_attn_dtype_t dtype, int64_t rows, int64_t row_elems,
                                      void *dst, int64_t dst_stride, const void *src,
                                      int64_t src_stride, int nrep, int64_t rep_stride,
                                      void *stream)
{
    NSP_CHECK(host_no_stream(stream, "replica sum"));
    return nsp_rd_sum_replicas_host((int)dtype, rows, row_elems, dst, dst_stride, src,
                                    src_stride, nrep, rep_stride);
}

static nsp_status_t host_merge(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                               float *lse, const void *o2, const float *lse2, void *stream)
{
    NSP_CHECK(host_no_stream(stream, "partial merge"));
    return nsp_reduce_merge(dtype, rows, head_dim, o, lse, o2, lse2);
}

static nsp_status_t host_accumulate(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                    float *acc, void *stream)
{
    NSP_CHECK(host_no_stream(stream, "accumulation"));
    return nsp_reduce_accumulate(dtype, n, src, acc);
}

const nsp_reduce_ops_t nsp_reduce_ops_host = {
    .name         = "host",
    .to_f32       = host_to_f32,
    .from_f32     = host_from_f32,
    .sum_replicas = host_sum_replicas,
    .merge        = host_merge,
    .accumulate   = host_accumulate,
};
