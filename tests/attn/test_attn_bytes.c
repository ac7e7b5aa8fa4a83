/*
 * Sizes where C can carry them (NSP_ATTN_FIELD_BYTES): with the buffers'
 * sizes given, every attention call refuses a buffer one token (or one
 * element) short with NSP_ERR_INVALID_ARG naming it, before it writes
 * anything; exact sizes pass and compute the same as without sizes; without
 * the field nothing is checked. The short buffers are allocated at their
 * short size, so a write past them is also an ASan error.
 */
#include "nspcomm.h"
#include "../tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NQ 4
#define NKV 2
#define D 8
#define T 12 /* tokens of the batch: two sequences of 5 and 7 */

/* n floats, filled with a fixed pattern (or `fill` when not NaN). */
static float *floats(size_t n, float fill)
{
    float *p = malloc(n * sizeof(float));

    for (size_t i = 0; p != NULL && i < n; ++i) {
        p[i] = isnan(fill) ? (float)((i * 7919u) % 97) / 97.0f - 0.5f : fill;
    }
    return p;
}

static int all_equal(const float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != v) {
            return 0;
        }
    }
    return 1;
}

/* The exact sizes of the batch's buffers. */
static nsp_attn_params_t sized(void)
{
    nsp_attn_params_t p = NSP_ATTN_PARAMS_INIT(NQ, NKV, D);
    const size_t      q = (size_t)T * NQ * D * 4, kv = (size_t)T * NKV * D * 4;

    p.field_mask    = NSP_ATTN_FIELD_BYTES;
    p.bytes.q       = q;
    p.bytes.k       = kv;
    p.bytes.v       = kv;
    p.bytes.o       = q;
    p.bytes.lse     = (size_t)T * NQ * 4;
    p.bytes.dout    = q;
    p.bytes.dq      = q;
    p.bytes.dk      = kv;
    p.bytes.dv      = kv;
    p.bytes.delta   = (size_t)T * NQ * 4;
    return p;
}

/* nsp_attn_fwd with o one token short: refused, o untouched, message names o. */
static void test_fwd_short_o(const int64_t *off, const float *q, const float *k, const float *v,
                             float *lse)
{
    const size_t      short_n = (size_t)(T - 1) * NQ * D;
    float            *o       = floats(short_n, 42.0f);
    nsp_attn_params_t p       = sized();

    p.bytes.o = short_n * sizeof(float);
    tap_is_int(nsp_attn_fwd(&p, 2, off, q, k, v, o, lse), NSP_ERR_INVALID_ARG,
               "nsp_attn_fwd, o one token short: NSP_ERR_INVALID_ARG");
    tap_ok(strstr(nsp_last_error(), "buffer o ") != NULL &&
               strstr(nsp_last_error(), "needs") != NULL,
           "the message names o and what it needs: %s", nsp_last_error());
    tap_ok(all_equal(o, short_n, 42.0f), "o untouched");
    free(o);
}

/* Each forward buffer one element short in turn: refused naming it. */
static void test_fwd_each_short(const int64_t *off, const float *q, const float *k,
                                const float *v, float *o, float *lse)
{
    static const char *const names[] = {"q", "k", "v", "o", "lse"};

    for (int b = 0; b < 5; ++b) {
        nsp_attn_params_t p = sized();
        size_t           *f[] = {&p.bytes.q, &p.bytes.k, &p.bytes.v, &p.bytes.o, &p.bytes.lse};
        char              want[32];
        *f[b] -= sizeof(float);
        snprintf(want, sizeof(want), "buffer %s ", names[b]);
        tap_ok(nsp_attn_fwd(&p, 2, off, q, k, v, o, lse) == NSP_ERR_INVALID_ARG &&
                   strstr(nsp_last_error(), want) != NULL,
               "nsp_attn_fwd, %s one element short: refused naming it", names[b]);
    }
}

static void test_bwd_and_blocks(const int64_t *off, const float *q, const float *k,
                                const float *v, const float *o, const float *lse)
{
    float            *dq = floats((size_t)T * NQ * D, 0), *dk = floats((size_t)T * NKV * D, 0);
    float            *dv = floats((size_t)T * NKV * D, 0), *dout = floats((size_t)T * NQ * D, NAN);
    float            *delta = floats((size_t)T * NQ, 0), *bo = floats((size_t)T * NQ * D, 0);
    float            *blse = floats((size_t)T * NQ, 0);
    nsp_attn_params_t p = sized();

    tap_is_int(nsp_attn_bwd(&p, 2, off, q, k, v, o, lse, dout, dq, dk, dv), NSP_OK,
               "nsp_attn_bwd with exact sizes");
    p.bytes.dk -= 1;
    tap_ok(nsp_attn_bwd(&p, 2, off, q, k, v, o, lse, dout, dq, dk, dv) == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), "buffer dk ") != NULL,
           "nsp_attn_bwd, dk one byte short: refused naming it");
    p = sized();
    tap_is_int(nsp_attn_block_fwd(&p, 0, T, q, 0, T, k, v, bo, blse), NSP_OK,
               "nsp_attn_block_fwd with exact sizes");
    p.bytes.lse = (size_t)(T - 1) * NQ * 4;
    tap_ok(nsp_attn_block_fwd(&p, 0, T, q, 0, T, k, v, bo, blse) == NSP_ERR_INVALID_ARG &&
               strstr(nsp_last_error(), "buffer lse ") != NULL,
           "nsp_attn_block_fwd, lse one token short: refused naming it");
    p = sized();
    tap_is_int(nsp_attn_block_bwd(&p, 0, T, q, dout, blse, delta, 0, T, k, v, dq, dk, dv),
               NSP_OK, "nsp_attn_block_bwd with exact sizes");
    p.bytes.delta -= 4;
    tap_ok(nsp_attn_block_bwd(&p, 0, T, q, dout, blse, delta, 0, T, k, v, dq, dk, dv) ==
                   NSP_ERR_INVALID_ARG && strstr(nsp_last_error(), "buffer delta ") != NULL,
           "nsp_attn_block_bwd, delta one row short: refused naming it");
    free(dq), free(dk), free(dv), free(dout), free(delta), free(bo), free(blse);
}

int main(void)
{
    const int64_t     off[3] = {0, 5, T};
    float            *q = floats((size_t)T * NQ * D, NAN), *k = floats((size_t)T * NKV * D, NAN);
    float            *v = floats((size_t)T * NKV * D, NAN), *o = floats((size_t)T * NQ * D, 0);
    float            *o2 = floats((size_t)T * NQ * D, 0), *lse = floats((size_t)T * NQ, 0);
    float            *lse2 = floats((size_t)T * NQ, 0);
    nsp_attn_params_t plain = NSP_ATTN_PARAMS_INIT(NQ, NKV, D), p = sized();

    tap_is_int(nsp_attn_fwd(&plain, 2, off, q, k, v, o, lse), NSP_OK, "nsp_attn_fwd, no sizes");
    tap_is_int(nsp_attn_fwd(&p, 2, off, q, k, v, o2, lse2), NSP_OK,
               "nsp_attn_fwd with exact sizes");
    tap_ok(memcmp(o, o2, (size_t)T * NQ * D * 4) == 0 && memcmp(lse, lse2, (size_t)T * NQ * 4) == 0,
           "exact sizes compute the same o and lse");
    plain.bytes.o = 1; /* set, but the field is not: not read */
    tap_is_int(nsp_attn_fwd(&plain, 2, off, q, k, v, o, lse), NSP_OK,
               "sizes without NSP_ATTN_FIELD_BYTES are not read");
    test_fwd_short_o(off, q, k, v, lse);
    test_fwd_each_short(off, q, k, v, o, lse);
    test_bwd_and_blocks(off, q, k, v, o, lse);
    free(q), free(k), free(v), free(o), free(o2), free(lse), free(lse2);
    return tap_done();
}
