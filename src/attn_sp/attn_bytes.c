/*
 * Checking the sizes of attention buffers a caller gave (nspcomm.h:
 * NSP_ATTN_FIELD_BYTES): C cannot see how large a pointer's buffer is, so
 * a caller that knows says so, and a short buffer is a clear error before
 * anything is read or written.
 */
#include "attn_sp/attn_ref.h"

#include "common/log.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One buffer: its name, the bytes given, and its shape [tokens, heads, cols]
 * of `elem`-byte elements (cols = D; lse and delta: cols 1 of 4-byte float). */
typedef struct attn_buf {
    const char *name;
    size_t      given;
    int64_t     tokens;
    int         heads, cols;
    size_t      elem;
} attn_buf_t;

/* The buffers' names, in the order of nsp_attn_bytes_t and NSP_ATTN_BUF_*. */
static const char *const buf_names[] = {"q",    "k",  "v",  "o",  "lse",
                                        "dout", "dq", "dk", "dv", "delta"};

unsigned nsp_attn_buf_bit(const char *name)
{
    for (size_t i = 0; i < sizeof(buf_names) / sizeof(buf_names[0]); ++i) {
        if (strcmp(name, buf_names[i]) == 0) {
            return 1u << i;
        }
    }
    return 0;
}

static nsp_status_t check_one(const char *what, const attn_buf_t *b)
{
    /* tokens * heads * cols * elem bytes, as a double: no overflow to hide it */
    const double need = (double)b->tokens * b->heads * b->cols * (double)b->elem;

    if ((double)b->given >= need) {
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "%s: buffer %s has %zu bytes, its shape [%lld "
                     "tokens, %d heads, %d] of %zu-byte elements needs %.0f (params.bytes.%s)",
                     what, b->name, b->given, (long long)b->tokens, b->heads, b->cols, b->elem,
                     need, b->name);
}

nsp_status_t nsp_attn_check_bytes(const nsp_attn_params_t *p, const char *what,
                                  int64_t q_tokens, int64_t kv_tokens, unsigned which,
                                  size_t elem)
{
    const nsp_attn_bytes_t *g = &p->bytes;
    const int               D = p->head_dim, nq = p->q_heads, nkv = p->kv_heads;
    const size_t            f = sizeof(float);
    const attn_buf_t        bufs[] = {
        {"q", g->q, q_tokens, nq, D, elem},        {"k", g->k, kv_tokens, nkv, D, elem},
        {"v", g->v, kv_tokens, nkv, D, elem},      {"o", g->o, q_tokens, nq, D, elem},
        {"lse", g->lse, q_tokens, nq, 1, f},       {"dout", g->dout, q_tokens, nq, D, elem},
        {"dq", g->dq, q_tokens, nq, D, elem},      {"dk", g->dk, kv_tokens, nkv, D, elem},
        {"dv", g->dv, kv_tokens, nkv, D, elem},    {"delta", g->delta, q_tokens, nq, 1, f},
    };

    if (!(p->field_mask & NSP_ATTN_FIELD_BYTES)) {
        return NSP_OK;
    }
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); ++i) {
        if (which & (1u << i)) {
            NSP_CHECK(check_one(what, &bufs[i]));
        }
    }
    return NSP_OK;
}
