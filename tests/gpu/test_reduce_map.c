/*
 * On the CPU (no GPU needed): the element math the device reductions run
 * (attn_reduce_map.h) and the memory ops of nested attention (attn_mem.h).
 *   - bf16 and fp16 conversions: every 16-bit value round-trips; float ->
 *     16 bits is the nearest value, ties to even (checked against the
 *     neighbours, independently of the conversion's own bit tricks)
 *   - the replica sum against a sum computed here in double
 *   - the partial merge against the host nsp_attn_merge(), bit for bit
 *   - the conversion (dtype <-> float32) against the host path's
 *     nsp_reduce_to_f32 / nsp_reduce_from_f32 and the host memory type's
 *     reduce ops to_f32 / from_f32, bit for bit: every 16-bit pattern
 *     widened, 200000 floats (overflow, NaN, subnormals included) rounded
 *   - the memory tables of the memory types (memtype.h): device entries
 *     run ring levels and refuse what the device path cannot do (the host
 *     reference kernel; a build without CUDA has no cuda entry and says
 *     how to get one), the host entry refuses a stream, host buffers grow,
 *     host copy and zero; the accumulation unit and the host reduce table's
 *     accumulate against acc[i] + (double)src[i]
 */
#include "attn_sp/memtype.h"
#include "attn_sp/attn_reduce.h"
#include "attn_sp/attn_reduce_map.h"
#include "common/log.h"

#include "../tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) /* [0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static float to16(int dtype, float v)
{
    return dtype == NSP_RD_BF16 ? nsp_rd_bf16_to_float(nsp_rd_float_to_bf16(v))
                                : nsp_rd_half_to_float(nsp_rd_float_to_half(v));
}

static void test_round_trips(void)
{
    int bad_bf = 0, bad_h = 0;

    for (uint32_t b = 0; b < 65536; ++b) {
        float f = nsp_rd_bf16_to_float((uint16_t)b);
        float h = nsp_rd_half_to_float((uint16_t)b);
        if (!isnan(f) && nsp_rd_float_to_bf16(f) != b) {
            ++bad_bf;
        }
        if (!isnan(h) && nsp_rd_float_to_half(h) != b) {
            ++bad_h;
        }
        if (isnan(f) != isnan(nsp_rd_bf16_to_float(nsp_rd_float_to_bf16(f)))) {
            ++bad_bf;
        }
    }
    tap_is_int(bad_bf, 0, "bf16: all 65536 values round-trip through float");
    tap_is_int(bad_h, 0, "fp16: all 65536 values round-trip through float");
    tap_ok(nsp_rd_half_to_float(0x3c00) == 1.0f && nsp_rd_half_to_float(0x7bff) == 65504.0f &&
               nsp_rd_half_to_float(0x0001) == ldexpf(1.0f, -24),
           "fp16: 1, the largest finite and the smallest subnormal decode exactly");
}

/* Is 16-bit code c the nearest to f, ties to even? Decided from c's
 * neighbours in double. */
static int nearest_even(int dtype, float f, uint16_t c)
{
    float  (*dec)(uint16_t) = dtype == NSP_RD_BF16 ? nsp_rd_bf16_to_float : nsp_rd_half_to_float;
    double x = f, got = dec(c), err = fabs(got - x);

    for (int s = -1; s <= 1; s += 2) {
        uint16_t n = (uint16_t)(c + s);
        double   alt;
        if ((n & 0x7fff) == (dtype == NSP_RD_BF16 ? 0x7f80 : 0x7c00) + (s > 0 ? 1 : 0) ||
            ((c & 0x7fff) == 0 && s < 0)) {
            continue; /* past inf, or below zero: not a neighbour of the same sign */
        }
        alt = dec(n);
        if (isinf(alt) || isnan(alt)) {
            continue;
        }
        if (fabs(alt - x) < err || (fabs(alt - x) == err && (c & 1))) {
            return 0;
        }
    }
    return 1;
}

static void test_rounding(void)
{
    int bad[2] = {0, 0};

    for (int i = 0; i < 200000; ++i) {
        /* magnitudes 2^-26 .. 2^15, both signs: subnormal to near-max fp16 */
        float f = (float)(ldexp(1.0 + urand(), (int)(urand() * 41) - 26) * (urand() < 0.5 ? -1 : 1));
        bad[0] += !nearest_even(NSP_RD_BF16, f, nsp_rd_float_to_bf16(f));
        bad[1] += !nearest_even(NSP_RD_FP16, f, nsp_rd_float_to_half(f));
    }
    tap_is_int(bad[0], 0, "bf16: 200000 random floats round to the nearest, ties to even");
    tap_is_int(bad[1], 0, "fp16: 200000 random floats (subnormal to 2^16) round to the nearest, "
                          "ties to even");
    tap_ok(nsp_rd_float_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3f80 &&
               nsp_rd_float_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3f82,
           "bf16: the two ties next to 1 go to the even neighbour");
    tap_ok(nsp_rd_float_to_half(65520.0f) == 0x7c00 && nsp_rd_float_to_half(65519.0f) == 0x7bff,
           "fp16: 65520 rounds to inf, 65519 to 65504");
}

/* Replicas [nrep][rows][stride] with row_elems used; dst [rows][dst_stride]. */
static void test_sum(int dtype, const char *name)
{
    const int64_t rows = 37, row_elems = 24, stride = 29, dst_stride = 31;
    const int     nrep = 4;
    size_t        es = dtype == NSP_RD_FP32 ? 4 : 2;
    char         *src = malloc((size_t)(nrep * rows * stride) * es);
    char         *dst = calloc((size_t)(rows * dst_stride), es);
    double        worst = 0.0;
    int           outside = 0;

    for (int64_t i = 0; i < nrep * rows * stride; ++i) {
        nsp_rd_store(dtype, src, i, (float)(urand() * 4.0 - 2.0));
    }
    tap_is_int(nsp_rd_sum_replicas_host(dtype, rows, row_elems, dst, dst_stride, src, stride,
                                        nrep, rows * stride),
               NSP_OK, "%s replica sum: runs", name);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t e = 0; e < row_elems; ++e) {
            double want = 0.0, got = nsp_rd_load(dtype, dst, r * dst_stride + e);
            for (int k = 0; k < nrep; ++k) {
                want += nsp_rd_load(dtype, src, k * rows * stride + r * stride + e);
            }
            /* one rounding of a float32 sum: half an ulp of the dtype, plus
             * the float32 additions */
            double tol = fabs(want) * (dtype == NSP_RD_FP32 ? 1e-6 : dtype == NSP_RD_BF16
                                                                     ? 4.0e-3 : 5.0e-4) + 1e-6;
            worst = fmax(worst, fabs(got - want));
            outside += fabs(got - want) > tol;
            if (dtype != NSP_RD_FP32) {
                outside += to16(dtype, (float)got) != (float)got;
            }
        }
    }
    tap_is_int(outside, 0, "%s replica sum: 37 x 24 sums of 4 strided replicas within one "
                           "rounding of the double sum (worst %.2g)", name, worst);
    tap_is_int(nsp_rd_sum_replicas_host(dtype, rows, row_elems, dst, dst_stride, src, stride, 0,
                                        0),
               NSP_ERR_INVALID_ARG, "%s replica sum: nrep 0 is rejected", name);
    free(src);
    free(dst);
}

static void test_merge(int dtype, const char *name)
{
    const int64_t rows = 50;
    const int     D    = 16;
    size_t        es   = dtype == NSP_RD_FP32 ? 4 : 2;
    float        *o = malloc(sizeof(float) * rows * D), *lse = malloc(sizeof(float) * rows);
    float        *ro = malloc(sizeof(float) * rows * D), *rlse = malloc(sizeof(float) * rows);
    float        *o2f = malloc(sizeof(float) * rows * D), *lse2 = malloc(sizeof(float) * rows);
    char         *o2 = malloc(es * rows * D);
    int           same;

    for (int64_t r = 0; r < rows; ++r) {
        /* rows 0 and 1: the -inf cases of each side */
        lse[r]  = r == 0 ? -INFINITY : (float)(urand() * 8 - 4);
        lse2[r] = r == 1 ? -INFINITY : (float)(urand() * 8 - 4);
        rlse[r] = lse[r];
        for (int d = 0; d < D; ++d) {
            o[r * D + d] = ro[r * D + d] = (float)(urand() - 0.5);
            nsp_rd_store(dtype, o2, r * D + d, (float)(urand() - 0.5));
            o2f[r * D + d] = nsp_rd_load(dtype, o2, r * D + d);
        }
    }
    tap_is_int(nsp_rd_merge_host(dtype, rows, D, o, lse, o2, lse2), NSP_OK,
               "%s merge: runs", name);
    nsp_attn_merge(rows, D, ro, rlse, o2f, lse2);
    same = memcmp(o, ro, sizeof(float) * rows * D) == 0 &&
           memcmp(lse, rlse, sizeof(float) * rows) == 0;
    tap_ok(same, "%s merge: 50 rows (with both -inf cases) equal nsp_attn_merge() on the "
                 "widened partial, bit for bit", name);
    tap_is_int(nsp_rd_merge_host(7, rows, D, o, lse, o2, lse2), NSP_ERR_INVALID_ARG,
               "%s merge: an unknown dtype is rejected", name);
    free(o), free(lse), free(ro), free(rlse), free(o2f), free(lse2), free(o2);
}

/* n floats of every kind: random magnitudes 2^-30..2^20, +-0, +-inf, NaN. */
static void some_floats(float *f, int n)
{
    for (int i = 0; i < n; ++i) {
        f[i] = (float)((urand() * 2.0 - 1.0) * ldexp(1.0, (int)(urand() * 50.0) - 30));
    }
    f[0] = 0.0f, f[1] = -0.0f, f[2] = INFINITY, f[3] = -INFINITY, f[4] = NAN;
    f[5] = 65520.0f, f[6] = 1.0f + ldexpf(1.0f, -8);
}

static void test_convert(int dtype, const char *name)
{
    enum { NW = 65536, NR = 200000 };
    size_t    es = dtype == NSP_RD_FP32 ? 4 : 2;
    uint16_t *pat = malloc(sizeof(uint16_t) * NW);
    float    *f = malloc(sizeof(float) * NR), *w[3];
    char     *r[3];
    int       widen_same, round_same;

    for (int i = 0; i < 3; ++i) {
        w[i] = malloc(sizeof(float) * NR), r[i] = malloc(es * NR);
    }
    for (int i = 0; i < NW; ++i) {
        pat[i] = (uint16_t)i;
    }
    some_floats(f, NR);
    /* widen: 16-bit patterns (fp32: the random floats as the source) */
    {
        const void *src = dtype == NSP_RD_FP32 ? (const void *)f : (const void *)pat;
        int         n   = dtype == NSP_RD_FP32 ? NR : NW;
        widen_same = nsp_rd_convert_host(dtype, NSP_RD_FP32, n, src, w[0]) == NSP_OK &&
                     nsp_reduce_to_f32(dtype, (size_t)n, src, w[1]) == NSP_OK &&
                     nsp_memtype_host.reduce->to_f32(dtype, (size_t)n, src, w[2], NULL) ==
                         NSP_OK &&
                     memcmp(w[0], w[1], sizeof(float) * n) == 0 &&
                     memcmp(w[0], w[2], sizeof(float) * n) == 0;
    }
    round_same = nsp_rd_convert_host(NSP_RD_FP32, dtype, NR, f, r[0]) == NSP_OK &&
                 nsp_reduce_from_f32(dtype, NR, f, r[1]) == NSP_OK &&
                 nsp_memtype_host.reduce->from_f32(dtype, NR, f, r[2], NULL) == NSP_OK &&
                 memcmp(r[0], r[1], es * NR) == 0 && memcmp(r[0], r[2], es * NR) == 0;
    tap_ok(widen_same, "%s conversion to float32 = nsp_reduce_to_f32 = host table, bit for "
                       "bit (%d values)", name, dtype == NSP_RD_FP32 ? NR : NW);
    tap_ok(round_same, "%s conversion from float32 = nsp_reduce_from_f32 = host table, bit for "
                       "bit (%d floats, inf, NaN, overflow included)", name, NR);
    for (int i = 0; i < 3; ++i) {
        free(w[i]), free(r[i]);
    }
    free(pat), free(f);
}

static void test_convert_args(void)
{
    float x = 1.0f, y;

    tap_is_int(nsp_rd_convert_host(7, NSP_RD_FP32, 1, &x, &y), NSP_ERR_INVALID_ARG,
               "conversion: an unknown dtype is rejected: %s", nsp_last_error());
    tap_is_int(nsp_rd_convert_host(NSP_RD_FP32, NSP_RD_BF16, -1, &x, &y), NSP_ERR_INVALID_ARG,
               "conversion: n < 0 is rejected");
    tap_is_int(nsp_rd_convert_host(NSP_RD_FP32, NSP_RD_BF16, 1, NULL, &y), NSP_ERR_INVALID_ARG,
               "conversion: NULL src with work is rejected");
    tap_is_int(nsp_rd_convert_host(NSP_RD_FP32, NSP_RD_BF16, 0, NULL, NULL), NSP_OK,
               "conversion: n = 0 with NULL buffers is a no-op");
    tap_is_int(nsp_memtype_host.attn->sync(NULL), NSP_OK, "host table: sync is a no-op");
}

static void test_mem_tables(void)
{
    nsp_layout_level_t    ring, ulysses;
    void                 *p = NULL;
    size_t                cap = 0;
    const nsp_memtype_t  *cuda = NULL;
    const nsp_attn_mem_t *host = nsp_memtype_host.attn;
    nsp_status_t          found = nsp_memtype_find("cuda", &cuda);

    memset(&ring, 0, sizeof(ring));
    ring.degree = 4, ring.ring = 2, ring.ulysses = 2;
    ulysses = ring;
    ulysses.ring = 1, ulysses.ulysses = 4;
    tap_is_int(host->check_level(1, &ring), NSP_OK, "host memory runs ring levels");
    if (cuda != NULL) {
        tap_is_int(cuda->attn->check_level(1, &ring), NSP_OK, "%s memory runs ring levels",
                   cuda->name);
        tap_is_int(cuda->attn->check_kernel(1), NSP_ERR_UNSUPPORTED,
                   "%s memory refuses the host reference kernel: %s", cuda->name,
                   nsp_last_error());
    } else {
        tap_is_int(found, NSP_ERR_UNSUPPORTED, "a build without CUDA has no cuda memory type: "
                   "%s", nsp_last_error());
        tap_ok(strstr(nsp_last_error(), "--with-cuda") != NULL, "and says how to build it");
    }
    tap_is_int(host->check_stream((void *)0x1), NSP_ERR_UNSUPPORTED,
               "host memory refuses a stream: %s", nsp_last_error());
    tap_is_int(host->check_level(1, &ulysses) | host->check_kernel(1) |
                   host->check_stream(NULL),
               NSP_OK, "host memory: Ulysses level, reference kernel, no stream");
    tap_ok(host->buffer(&p, &cap, 0) == NSP_OK && p != NULL && cap == 1 &&
               host->buffer(&p, &cap, 4096) == NSP_OK && cap == 4096,
           "host buffers: at least one byte, then grown to 4096");
    host->release(p);
    if (cuda != NULL) {
        cuda->attn->release(NULL);
    }
    {
        char a[8] = "abcdefg", b[8] = "xxxxxxx";
        tap_ok(host->copy(b, a, 4, NULL) == NSP_OK && memcmp(b, "abcdxxx", 8) == 0 &&
                   host->zero(b + 1, 2, NULL) == NSP_OK && memcmp(b, "a\0\0dxxx", 8) == 0 &&
                   host->copy(b, a, 0, NULL) == NSP_OK,
               "host copy and zero move exactly the bytes asked (0 bytes: nothing)");
    }
}

/* acc[i] += src[i]: the unit the kernel runs and the host table's entry,
 * against a sum in double (exact for these operands: float + bf16/fp16
 * widened, both with few significant bits). */
static void test_accumulate(int dtype, const char *name)
{
    enum { N = 4099 };
    uint16_t          h[N];
    float             src32[N], acc[N], acc2[N], want[N];
    const void       *src = dtype == NSP_RD_FP32 ? (const void *)src32 : (const void *)h;
    nsp_rd_acc_args_t a;
    int               ok = 1;

    for (int i = 0; i < N; ++i) {
        float v = (float)((i * 37) % 512 - 256) / 8.0f; /* exact in all three types */
        src32[i] = v;
        h[i] = dtype == NSP_RD_BF16 ? nsp_rd_float_to_bf16(v) : nsp_rd_float_to_half(v);
        acc[i] = acc2[i] = (float)(i % 97) / 4.0f;
        want[i] = (float)((double)acc[i] + (double)v);
    }
    ok = nsp_rd_acc_args(dtype, N, src, acc, &a) == NSP_OK;
    for (int64_t i = 0; ok && i < N; ++i) {
        nsp_rd_acc_unit(&a, i);
    }
    ok = ok && nsp_memtype_host.reduce->accumulate((nsp_attn_dtype_t)dtype, N, src, acc2, NULL) ==
                   NSP_OK;
    tap_ok(ok && memcmp(acc, want, sizeof(want)) == 0 && memcmp(acc2, want, sizeof(want)) == 0,
           "%s accumulation: the kernel's unit and the host table add exactly", name);
    tap_is_int(nsp_memtype_host.reduce->accumulate((nsp_attn_dtype_t)dtype, 1, src, acc,
                                                   (void *)0x1),
               NSP_ERR_UNSUPPORTED, "%s accumulation on host memory refuses a stream", name);
}

int main(void)
{
    test_round_trips();
    test_rounding();
    test_sum(NSP_RD_FP32, "fp32");
    test_sum(NSP_RD_BF16, "bf16");
    test_sum(NSP_RD_FP16, "fp16");
    test_merge(NSP_RD_FP32, "fp32");
    test_merge(NSP_RD_BF16, "bf16");
    test_merge(NSP_RD_FP16, "fp16");
    test_convert(NSP_RD_FP32, "fp32");
    test_convert(NSP_RD_BF16, "bf16");
    test_convert(NSP_RD_FP16, "fp16");
    test_convert_args();
    test_mem_tables();
    test_accumulate(NSP_RD_FP32, "fp32");
    test_accumulate(NSP_RD_BF16, "bf16");
    test_accumulate(NSP_RD_FP16, "fp16");
    return tap_done();
}
