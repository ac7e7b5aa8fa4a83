/*
 * Dtype-generic reductions of nested attention (see attn_reduce.h): bf16
 * and fp16 <-> float32 conversions (round to nearest even), the (o, lse)
 * merge and the float32 sums.
 */
#include "attn_sp/attn_reduce.h"

#include "common/log.h"

#include <math.h>
#include <string.h>

/* ---- one element ----------------------------------------------------------- */

static float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16; /* bf16 is the top half of a float32 */
    float    f;

    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN (quiet) */
    }
    x += 0x7fffu + ((x >> 16) & 1u); /* to nearest, ties to even; overflow -> inf */
    return (uint16_t)(x >> 16);
}

/* fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t x;
    float    f;

    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float32 */
        f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    x = e == 0x1f ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* Round the top bits of `mant` away: mant >> shift to nearest, ties to even. */
static uint32_t shift_rne(uint32_t mant, uint32_t shift)
{
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);

    return q + (rem > half || (rem == half && (q & 1u)));
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x, sign, a;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    a    = x & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    }
    if (a >= 0x477ff000u) {
        return (uint16_t)(sign | 0x7c00u); /* >= 65520 (and inf): infinity */
    }
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half (units of 2^-24) or 0 */
        if (a < 0x33000000u) {
            return (uint16_t)sign; /* below 2^-25 */
        }
        /* value = mant * 2^(e - 150) = (mant >> (126 - e)) units of 2^-24 */
        return (uint16_t)(sign | shift_rne((a & 0x7fffffu) | 0x800000u, 126u - (a >> 23)));
    }
    /* normal: rebias the exponent (127 -> 15), keep 10 of 23 mantissa bits;
     * a carry out of the mantissa steps the exponent up, as it should */
    return (uint16_t)(sign | (shift_rne(a, 13) - (112u << 10)));
}

/* Element i of src of `dtype`, as float32. */
static float load(nsp_attn_dtype_t dtype, const void *src, size_t i)
{
    switch (dtype) {
    case NSP_ATTN_BF16:
        return bf16_to_f32(((const uint16_t *)src)[i]);
    case NSP_ATTN_FP16:
        return f16_to_f32(((const uint16_t *)src)[i]);
    default:
        return ((const float *)src)[i];
    }
}

static void store(nsp_attn_dtype_t dtype, void *dst, size_t i, float v)
{
    switch (dtype) {
    case NSP_ATTN_BF16:
        ((uint16_t *)dst)[i] = f32_to_bf16(v);
        break;
    case NSP_ATTN_FP16:
        ((uint16_t *)dst)[i] = f32_to_f16(v);
        break;
    default:
        ((float *)dst)[i] = v;
        break;
    }
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
    NSP_CHECK(check_args("nsp_reduce_merge", dtype, rows > 0 ? 1 : 0, o, lse));
    if (rows < 0 || head_dim < 1 || (rows > 0 && (o2 == NULL || lse2 == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_reduce_merge: rows %lld, head_dim %d: need "
                         "rows >= 0, head_dim >= 1 and non-NULL o, lse, o2, lse2",
                         (long long)rows, head_dim);
    }
    for (int64_t r = 0; r < rows; ++r) {
        float        a = lse[r], b = lse2[r], hi, lo, merged, wa, wb;
        float       *orow = o + r * head_dim;
        const size_t base = (size_t)r * (size_t)head_dim; /* row r of o2, elements */

        if (b == -INFINITY) {
            continue; /* nothing to add */
        }
        if (a == -INFINITY) {
            for (int d = 0; d < head_dim; ++d) {
                orow[d] = load(dtype, o2, base + (size_t)d);
            }
            lse[r] = b;
            continue;
        }
        /* Symmetric in (a, b) so that the merge commutes exactly. */
        hi     = a > b ? a : b;
        lo     = a > b ? b : a;
        merged = hi + log1pf(expf(lo - hi));
        wa     = expf(a - merged);
        wb     = expf(b - merged);
        for (int d = 0; d < head_dim; ++d) {
            orow[d] = wa * orow[d] + wb * load(dtype, o2, base + (size_t)d);
        }
        lse[r] = merged;
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
