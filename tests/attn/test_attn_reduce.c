/*
 * The dtype-generic reductions of nested attention (src/attn_sp/attn_reduce.h)
 * in one process, against references computed here:
 *  - conversions: every one of the 65536 bf16 and fp16 bit patterns widens
 *    and rounds back to itself (NaN to a NaN); random and constructed
 *    float32 values (ties, subnormals, overflow) round to the nearest
 *    representable value, ties to even, judged against the two neighbours
 *    in float64; fp16 also against the compiler's _Float16 where it has one;
 *  - merge: (o, lse) partials with o2 in fp32 / bf16 / fp16 against the
 *    float64 log-sum-exp formula on the same (widened) inputs; fp32 merges
 *    commute bit for bit (nsp_attn_merge is its fp32 case);
 *  - accumulate and sum of replicas: against float64 sums of the widened
 *    inputs; the replica sum rounds once (within half an ulp of the dtype
 *    plus the float32 accumulation error), and rounding after every add, as
 *    a bf16 accumulator would, is measurably worse.
 */
#include "nspcomm.h"

#include "attn_naive.h"
#include "attn_sp/attn_reduce.h"
#include "../tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const nsp_attn_dtype_t HALF[2]   = {NSP_ATTN_BF16, NSP_ATTN_FP16};
static const char *const      HNAME[2]  = {"bf16", "fp16"};
static const int              MANT[2]   = {7, 10}; /* stored mantissa bits */

/* Uniform in [-1, 1) times 2^[-e, e]. */
static float rng_float(uint64_t *s, int e)
{
    double u = naive_rand(s) * 2.0 - 1.0;

    return (float)ldexp(u, naive_rand_int(s, -e, e));
}

static float widen(nsp_attn_dtype_t dt, uint16_t h)
{
    float f = 0.0f;

    nsp_reduce_to_f32(dt, 1, &h, &f);
    return f;
}

static uint16_t narrow(nsp_attn_dtype_t dt, float f)
{
    uint16_t h = 0;

    nsp_reduce_from_f32(dt, 1, &f, &h);
    return h;
}

static void test_roundtrip(void)
{
    for (int k = 0; k < 2; ++k) {
        int bad = 0, nans = 0;
        for (uint32_t b = 0; b < 65536; ++b) {
            float    f = widen(HALF[k], (uint16_t)b);
            uint16_t back = narrow(HALF[k], f);
            if (isnan(f)) {
                nans++;
                bad += !isnan(widen(HALF[k], back));
            } else {
                bad += back != b;
            }
        }
        tap_ok(bad == 0, "%s: all 65536 patterns widen and round back to themselves (%d NaN "
               "patterns stay NaN), %d wrong", HNAME[k], nans, bad);
    }
}

/* Is h the nearest value of dt to x (ties to an even mantissa)? Judged by
 * the neighbours h - 1 and h + 1 (same sign, finite) in float64. */
static int is_nearest(int k, float x, uint16_t h)
{
    double   v = widen(HALF[k], h), e = fabs((double)x - v);
    uint16_t mag = h & 0x7fffu, maxfin = k == 0 ? 0x7f7fu : 0x7bffu;

    if (isinf(v)) { /* overflow: x is past the largest finite value's halfway point */
        double top = widen(HALF[k], maxfin), ulp = top - widen(HALF[k], maxfin - 1);
        return fabs((double)x) >= top + ulp / 2;
    }
    for (int step = -1; step <= 1; step += 2) {
        int      nm = (int)mag + step;
        double   w, en;
        if (nm < 0 || nm > maxfin) {
            continue;
        }
        w  = widen(HALF[k], (uint16_t)((h & 0x8000u) | (uint16_t)nm));
        en = fabs((double)x - w);
        if (en < e || (en == e && (mag & 1u))) {
            return 0;
        }
    }
    return 1;
}

static void test_rounding(void)
{
    uint64_t s = 0x7ed0c0ffee;

    for (int k = 0; k < 2; ++k) {
        int bad = 0, ties = 0, n = 0;
        /* random values over a wide range (fp16: its subnormals to overflow) */
        for (int i = 0; i < 200000; ++i, ++n) {
            float x = rng_float(&s, k == 0 ? 60 : 26);
            bad += !is_nearest(k, x, narrow(HALF[k], x));
        }
        /* exact ties between two neighbours, both parities */
        for (uint32_t b = 0x0001; b < 0x7b00; b += 37, ++n) {
            double lo = widen(HALF[k], (uint16_t)b), hi = widen(HALF[k], (uint16_t)(b + 1));
            float  x  = (float)((lo + hi) / 2);
            if ((double)x != (lo + hi) / 2) {
                continue;
            }
            ties++;
            bad += narrow(HALF[k], x) != ((b & 1u) ? b + 1 : b);
        }
        tap_ok(bad == 0, "%s: %d float32 values round to the nearest (%d exact ties to even), "
               "%d wrong", HNAME[k], n, ties, bad);
    }
#if defined(__FLT16_MAX__)
    {
        int bad = 0;
        for (int i = 0; i < 200000; ++i) {
            float     x = rng_float(&s, 26);
            _Float16  c = (_Float16)x;
            uint16_t  cb;
            memcpy(&cb, &c, sizeof(cb));
            bad += cb != narrow(NSP_ATTN_FP16, x);
        }
        tap_ok(bad == 0, "fp16: 200000 values round as the compiler's _Float16 does, %d differ",
               bad);
    }
#else
    tap_skip(1, "the compiler has no _Float16 to compare fp16 with");
#endif
    tap_ok(narrow(NSP_ATTN_BF16, INFINITY) == 0x7f80u && narrow(NSP_ATTN_FP16, 1e6f) == 0x7c00u &&
               narrow(NSP_ATTN_FP16, -1e-9f) == 0x8000u && isnan(widen(NSP_ATTN_BF16,
                                                               narrow(NSP_ATTN_BF16, NAN))),
           "inf, overflow, underflow to -0 and NaN convert as IEEE says");
}

/* ---- merge --------------------------------------------------------------- */

#define MROWS 64
#define MD    24

static void test_merge(void)
{
    uint64_t s = 0x3e55e;
    float    o[MROWS * MD], lse[MROWS], o2f[MROWS * MD], lse2[MROWS], oref[MROWS * MD];
    float    lref[MROWS];
    uint16_t o2h[MROWS * MD];

    for (int k = -1; k < 2; ++k) {
        nsp_attn_dtype_t dt = k < 0 ? NSP_ATTN_FP32 : HALF[k];
        double           worst = 0.0;
        int              st;
        for (int r = 0; r < MROWS; ++r) {
            lse[r]  = r % 7 == 0 ? -INFINITY : 4.0f * rng_float(&s, 0);
            lse2[r] = r % 7 == 3 ? -INFINITY : 4.0f * rng_float(&s, 0); /* never both */
            for (int d = 0; d < MD; ++d) {
                o[r * MD + d]   = rng_float(&s, 0);
                o2f[r * MD + d] = rng_float(&s, 0);
                if (k >= 0) {
                    o2h[r * MD + d] = narrow(dt, o2f[r * MD + d]);
                    o2f[r * MD + d] = widen(dt, o2h[r * MD + d]); /* the value merged */
                }
            }
        }
        memcpy(oref, o, sizeof(o));
        memcpy(lref, lse, sizeof(lse));
        st = nsp_reduce_merge(dt, MROWS, MD, o, lse, k < 0 ? (const void *)o2f : o2h, lse2);
        for (int r = 0; r < MROWS; ++r) {
            double a = lref[r], b = lse2[r], m = a == -INFINITY ? b
                                                 : b == -INFINITY ? a
                                                                  : fmax(a, b) +
                                                                        log1p(exp(-fabs(a - b)));
            worst = fmax(worst, fabs(lse[r] - m) / fmax(1.0, fabs(m)));
            for (int d = 0; d < MD; ++d) {
                double want = b == -INFINITY ? oref[r * MD + d] /* nothing added */
                              : (a == -INFINITY ? 0.0 : exp(a - m) * oref[r * MD + d]) +
                                    exp(b - m) * o2f[r * MD + d];
                worst = fmax(worst, fabs(o[r * MD + d] - want));
            }
        }
        tap_ok(st == NSP_OK && worst < 1e-6, "merge, o2 in %s: %d rows (some lse -inf) within "
               "1e-6 of the float64 formula (worst %.1e)", k < 0 ? "fp32" : HNAME[k], MROWS,
               worst);
        if (k < 0) { /* merging B into A gives the bits of A into B */
            float ob[MROWS * MD], lb[MROWS];
            memcpy(ob, o2f, sizeof(ob));
            memcpy(lb, lse2, sizeof(lb));
            nsp_reduce_merge(dt, MROWS, MD, ob, lb, oref, lref);
            tap_ok(memcmp(ob, o, sizeof(ob)) == 0 && memcmp(lb, lse, sizeof(lb)) == 0,
                   "merge, fp32: commutes bit for bit");
        }
    }
    tap_is_int(nsp_reduce_merge(NSP_ATTN_BF16, 1, 0, o, lse, o2h, lse2), NSP_ERR_INVALID_ARG,
               "merge: head_dim 0 is NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_reduce_merge((nsp_attn_dtype_t)7, 1, 4, o, lse, o2h, lse2),
               NSP_ERR_INVALID_ARG, "merge: a dtype outside the enum is NSP_ERR_INVALID_ARG");
}

/* ---- sums ------------------------------------------------------------------ */

#define SN   4096
#define SREP 8

static void test_sums(void)
{
    uint64_t  s = 0x5u;
    uint16_t *src = malloc(sizeof(uint16_t) * SREP * SN), dst[SN], naive[SN];
    float    *acc = malloc(sizeof(float) * SN);

    for (int k = 0; k < 2 && src != NULL && acc != NULL; ++k) {
        nsp_attn_dtype_t dt = HALF[k];
        double           ulp = ldexp(1.0, -MANT[k]), worst = 0, worst_naive = 0, worst_acc = 0;
        int              bad = 0;
        for (int i = 0; i < SREP * SN; ++i) {
            src[i] = narrow(dt, rng_float(&s, 3));
        }
        memset(acc, 0, sizeof(float) * SN);
        for (int rep = 0; rep < SREP; ++rep) {
            nsp_reduce_accumulate(dt, SN, src + (size_t)rep * SN, acc);
        }
        nsp_reduce_sum_replicas(dt, SREP, SN, src, SN, dst);
        for (int i = 0; i < SN; ++i) {
            double exact = 0.0, mag = 0.0;
            float  run = 0.0f;
            for (int rep = 0; rep < SREP; ++rep) {
                double x = widen(dt, src[rep * SN + i]);
                exact += x, mag += fabs(x);
                run = widen(dt, narrow(dt, run + (float)x)); /* a dtype accumulator */
            }
            naive[i] = narrow(dt, run);
            worst_acc = fmax(worst_acc, fabs(acc[i] - exact) / mag);
            worst = fmax(worst, fabs(widen(dt, dst[i]) - exact) / mag);
            worst_naive = fmax(worst_naive, fabs(widen(dt, naive[i]) - exact) / mag);
            /* once rounded: within half an ulp of the float32 sum */
            bad += fabs(widen(dt, dst[i]) - acc[i]) > ulp / 2 * fabs(acc[i]) * 1.0000001;
        }
        tap_ok(worst_acc <= SREP * ldexp(1.0, -24), "%s: accumulate of %d replicas in float32 "
               "within %d float32 roundings of the float64 sum (worst %.1e of sum |x|)",
               HNAME[k], SREP, SREP, worst_acc);
        tap_ok(bad == 0 && worst <= ulp / 2 + SREP * ldexp(1.0, -24),
               "%s: sum of %d replicas of %d elements rounded once: within half an ulp "
               "(2^-%d) of the float32 sum (%d not), worst %.2e of sum |x| against float64",
               HNAME[k], SREP, SN, MANT[k] + 1, bad, worst);
        tap_ok(worst_naive > worst, "%s: rounding after every add is worse (%.2e against %.2e)",
               HNAME[k], worst_naive, worst);
    }
    tap_is_int(nsp_reduce_sum_replicas(NSP_ATTN_BF16, 2, 8, dst, 4, naive), NSP_ERR_INVALID_ARG,
               "sum of replicas: stride below n is NSP_ERR_INVALID_ARG");
    tap_is_int(nsp_reduce_accumulate(NSP_ATTN_BF16, 8, NULL, acc), NSP_ERR_INVALID_ARG,
               "accumulate: NULL source is NSP_ERR_INVALID_ARG");
    free(src);
    free(acc);
}

int main(void)
{
    test_roundtrip();
    test_rounding();
    test_merge();
    test_sums();
    return tap_done();
}
