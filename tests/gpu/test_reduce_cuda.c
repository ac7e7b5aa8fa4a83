/*
 * The device reductions (attn_reduce_cuda.h) against their host twins
 * (attn_reduce_map.h) on a GPU; prints "1..0 # SKIP no CUDA device (...)"
 * where there is none. fp32, bf16 and fp16:
 *   - replica sums of 1..8 strided replicas: bit for bit (the same float32
 *     additions in the same order, one rounding)
 *   - partial merges, with rows of -inf on either side: within 4 float32
 *     ulps of the host (the device's expf and log1pf round differently)
 *   - accumulations into float32: bit for bit
 */
#include "attn_sp/attn_reduce.h"
#include "attn_sp/attn_reduce_cuda.h"
#include "attn_sp/attn_reduce_map.h"
#include "common/log.h"
#include "streams/cuda_util.h"

#include "../tap.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x853c49e6748fea9bull;

static float urand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static void *to_dev(const void *h, size_t n)
{
    void *d = NULL;

    if (cudaMalloc(&d, n + 1) != cudaSuccess) {
        return NULL;
    }
    if (cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static int from_dev(void *h, const void *d, size_t n)
{
    return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess;
}

static void test_sum(int dtype, const char *name, int nrep, int64_t rows, int64_t row_elems)
{
    int64_t stride = row_elems + 3, dst_stride = row_elems + 5, rep_stride = rows * stride;
    size_t  es = dtype == NSP_RD_FP32 ? 4 : 2;
    size_t  sn = (size_t)(nrep * rep_stride) * es, dn = (size_t)(rows * dst_stride) * es;
    char   *src = malloc(sn), *want = calloc(1, dn), *got = calloc(1, dn);
    void   *dsrc, *ddst;
    int     ok = 0;

    for (int64_t i = 0; i < nrep * rep_stride; ++i) {
        nsp_rd_store(dtype, src, i, urand() * 3.0f);
    }
    dsrc = to_dev(src, sn), ddst = to_dev(want, dn); /* dst starts as zeros */
    if (dsrc && ddst &&
        nsp_rd_sum_replicas_host(dtype, rows, row_elems, want, dst_stride, src, stride, nrep,
                                 rep_stride) == NSP_OK &&
        nsp_cuda_sum_replicas(dtype, rows, row_elems, ddst, dst_stride, dsrc, stride, nrep,
                              rep_stride, NULL) == NSP_OK &&
        cudaDeviceSynchronize() == cudaSuccess && from_dev(got, ddst, dn)) {
        ok = memcmp(got, want, dn) == 0;
    }
    tap_ok(ok, "%s replica sum of %d x [%lld, %lld] (strided): device = host bit for bit%s",
           name, nrep, (long long)rows, (long long)row_elems, ok ? "" : nsp_last_error());
    cudaFree(dsrc), cudaFree(ddst);
    free(src), free(want), free(got);
}

/* acc[i] += src[i] (ring attention's dq and travelling dK/dV): device =
 * nsp_reduce_accumulate, bit for bit (widening is exact, one float add). */
static void test_acc(int dtype, const char *name, int64_t n)
{
    size_t es = dtype == NSP_RD_FP32 ? 4 : 2;
    char  *src = malloc((size_t)n * es);
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    void  *dsrc = NULL, *dacc = NULL;
    int    ok = 0;

    for (int64_t i = 0; src != NULL && want != NULL && i < n; ++i) {
        nsp_rd_store(dtype, src, i, urand() * 3.0f);
        want[i] = urand();
    }
    if (src != NULL && want != NULL && got != NULL) {
        dsrc = to_dev(src, (size_t)n * es), dacc = to_dev(want, sizeof(float) * (size_t)n);
    }
    if (dsrc && dacc && nsp_cuda_accumulate(dtype, n, dsrc, dacc, NULL) == NSP_OK &&
        nsp_reduce_accumulate((nsp_attn_dtype_t)dtype, (size_t)n, src, want) == NSP_OK &&
        cudaDeviceSynchronize() == cudaSuccess && from_dev(got, dacc, sizeof(float) * (size_t)n)) {
        ok = memcmp(got, want, sizeof(float) * (size_t)n) == 0;
    }
    tap_ok(ok, "%s accumulation of %lld elements: device = host bit for bit%s", name,
           (long long)n, ok ? "" : nsp_last_error());
    cudaFree(dsrc), cudaFree(dacc);
    free(src), free(want), free(got);
}

static double ulps(float a, float b)
{
    if (a == b) {
        return 0.0;
    }
    return fabs((double)a - b) / (ldexp(1.0, ilogb(fmax(fabs(a), fabs(b)))) * ldexp(1.0, -23));
}

static void test_merge(int dtype, const char *name, int64_t rows, int D)
{
    size_t es = dtype == NSP_RD_FP32 ? 4 : 2, on = sizeof(float) * (size_t)(rows * D);
    size_t ln = sizeof(float) * (size_t)rows;
    float *o = malloc(on), *lse = malloc(ln), *lse2 = malloc(ln), *go = malloc(on);
    float *gl = malloc(ln);
    char  *o2 = malloc(es * (size_t)(rows * D));
    void  *d_o, *d_l, *d_o2, *d_l2;
    double w = INFINITY;

    for (int64_t r = 0; r < rows; ++r) {
        lse[r]  = r % 17 == 0 ? -INFINITY : urand() * 6.0f;
        lse2[r] = r % 13 == 0 ? -INFINITY : urand() * 6.0f;
        for (int d = 0; d < D; ++d) {
            o[r * D + d] = urand();
            nsp_rd_store(dtype, o2, r * D + d, urand());
        }
    }
    d_o = to_dev(o, on), d_l = to_dev(lse, ln), d_o2 = to_dev(o2, es * (size_t)(rows * D));
    d_l2 = to_dev(lse2, ln);
    if (d_o && d_l && d_o2 && d_l2 &&
        nsp_cuda_attn_merge(dtype, rows, D, d_o, d_l, d_o2, d_l2, NULL) == NSP_OK &&
        nsp_rd_merge_host(dtype, rows, D, o, lse, o2, lse2) == NSP_OK &&
        cudaDeviceSynchronize() == cudaSuccess && from_dev(go, d_o, on) &&
        from_dev(gl, d_l, ln)) {
        w = 0.0;
        for (int64_t i = 0; i < rows * D; ++i) {
            w = fmax(w, ulps(go[i], o[i]));
        }
        for (int64_t r = 0; r < rows; ++r) {
            w = fmax(w, ulps(gl[r], lse[r]));
        }
    }
    tap_ok(w <= 4.0, "%s merge of %lld rows x %d: device within 4 ulps of the host (worst %.1f)",
           name, (long long)rows, D, w);
    cudaFree(d_o), cudaFree(d_l), cudaFree(d_o2), cudaFree(d_l2);
    free(o), free(lse), free(lse2), free(go), free(gl), free(o2);
}

int main(void)
{
    const int   dtypes[3] = {NSP_RD_FP32, NSP_RD_BF16, NSP_RD_FP16};
    const char *names[3]  = {"fp32", "bf16", "fp16"};
    int         ndev      = 0;

    if (nsp_cuda_device_probe(&ndev) != NSP_OK) {
        tap_skip_all("no CUDA device (%s)", nsp_last_error());
    }
    for (int t = 0; t < 3; ++t) {
        test_sum(dtypes[t], names[t], 1, 33, 128);
        test_sum(dtypes[t], names[t], 2, 1000, 64);
        test_sum(dtypes[t], names[t], 8, 4096, 128);
        test_merge(dtypes[t], names[t], 5000, 128);
        test_acc(dtypes[t], names[t], 100003);
    }
    tap_is_int(nsp_cuda_sum_replicas(NSP_RD_FP32, 4, 4, NULL, 4, NULL, 4, 1, 16, NULL),
               NSP_ERR_INVALID_ARG, "NULL device buffers with work are refused");
    return tap_done();
}
