/*
 * Dtype-generic reductions of nested attention (see attn_reduce.h): bf16
 * and fp16 <-> float32 conversions (round to nearest even), the (o, lse)
 * merge and the float32 sums.
 */
#include "attn_sp/attn_reduce.h"

#include "attn_sp/attn_reduce_map.h"

#include "common/log.h"

#include <math.h>
#include <string.h>

/* ---- one element ----------------------------------------------------------- */

/* The conversions are attn_reduce_map.h's, the very functions the device
 * reductions run (one rounding rule for host and GPU). */
static float load(nsp_attn_dtype_t dtype, const void *src, size_t i)
{
    return nsp_rd_load((int32_t)dtype, src, (int64_t)i);
}

static void store(nsp_attn_dtype_t dtype, void *dst, size_t i, float v)
{
    nsp_rd_store((int32_t)dtype, dst, (int64_t)i, v);
}

/* ---- arrays ---------------------------------------------------------------- */

size_t nsp_reduce_elem_size(nsp_attn_dtype_t dtype)
{
    switch (dtype) {
    case NSP_ATTN_FP32:
        return 4;
    case NSP_ATTN_BF16:
    case NSP_ATTN_FP16:
        return 2;
    }
    return 0;
}

static nsp_status_t check_args(const char *what, nsp_attn_dtype_t dtype, size_t n,
                               const void *a, const void *b)
{
    if (nsp_reduce_elem_size(dtype) == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: dtype %d is not NSP_ATTN_FP32, BF16 or "
                         "FP16", what, (int)dtype);
    }
    if (n > 0 && (a == NULL || b == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", what, n);
    }
    return NSP_OK;
}

nsp_status_t nsp_reduce_to_f32(nsp_attn_dtype_t dtype, size_t n, const void *src, float *dst)
{
    NSP_CHECK(check_args("nsp_reduce_to_f32", dtype, n, src, dst));
    if (dtype == NSP_ATTN_FP32) {
        if (n > 0 && (const void *)dst != src) {
            memcpy(dst, src, n * sizeof(float));
        }
        return NSP_OK;
    }
    for (size_t i = 0; i < n; ++i) {
        dst[i] = load(dtype, src, i);
    }
    return NSP_OK;
}

nsp_status_t nsp_reduce_from_f32(nsp_attn_dtype_t dtype, size_t n, const float *src, void *dst)
{
    NSP_CHECK(check_args("nsp_reduce_from_f32", dtype, n, src, dst));
    if (dtype == NSP_ATTN_FP32) {
        if (n > 0 && dst != (const void *)src) {
            memcpy(dst, src, n * sizeof(float));
        }
        return NSP_OK;
    }
    for (size_t i = 0; i < n; ++i) {
        store(dtype, dst, i, src[i]);
    }
    return NSP_OK;
}

nsp_status_t nsp_reduce_accumulate(nsp_attn_dtype_t dtype, size_t n, const void *src,
                                   float *acc)
{
    NSP_CHECK(check_args("nsp_reduce_accumulate", dtype, n, src, acc));
    for (size_t i = 0; i < n; ++i) {
        acc[i] += load(dtype, src, i);
    }
    return NSP_OK;
}

nsp_status_t nsp_reduce_merge(nsp_attn_dtype_t dtype, int64_t rows, int head_dim, float *o,
                              float *lse, const void *o2, const float *lse2)
{
    nsp_rd_merge_args_t m = {.dtype = (int32_t)dtype, .head_dim = head_dim, .rows = rows,
                             .o = o, .lse = lse, .o2 = o2, .lse2 = lse2};

    NSP_CHECK(check_args("nsp_reduce_merge", dtype, rows > 0 ? 1 : 0, o, lse));
    if (rows < 0 || head_dim < 1 || (rows > 0 && (o2 == NULL || lse2 == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_reduce_merge: rows %lld, head_dim %d: need "
                         "rows >= 0, head_dim >= 1 and non-NULL o, lse, o2, lse2",
                         (long long)rows, head_dim);
    }
    for (int64_t r = 0; r < rows; ++r) {
        nsp_rd_merge_row(&m, r); /* symmetric in the two lse: the merge commutes exactly */
    }
    return NSP_OK;
}

nsp_status_t nsp_reduce_sum_replicas(nsp_attn_dtype_t dtype, int nrep, size_t n,
                                     const void *src, size_t stride, void *dst)
{
    NSP_CHECK(check_args("nsp_reduce_sum_replicas", dtype, n, src, dst));
    if (nrep < 1 || stride < n) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_reduce_sum_replicas: %d replicas of %zu "
                         "elements %zu apart: need nrep >= 1 and stride >= n", nrep, n, stride);
    }
    for (size_t i = 0; i < n; ++i) {
        float acc = 0.0f;
        for (int k = 0; k < nrep; ++k) {
            acc += load(dtype, src, (size_t)k * stride + i);
        }
        store(dtype, dst, i, acc);
    }
    return NSP_OK;
}
