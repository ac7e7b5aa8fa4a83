/*
 * Internal helpers of the attention layer shared by attn_ref.c and the ring
 * schedule (attn_ring_math.c). The public API is nspcomm.h section 9.
 */
#ifndef NSP_ATTN_SP_ATTN_REF_H_
#define NSP_ATTN_SP_ATTN_REF_H_

#include "nspcomm.h"

/** Check an nsp_attn_params_t (heads, head_dim, scale, causal).
 *  Errors: NSP_ERR_INVALID_ARG naming the field. */
nsp_status_t nsp_attn_check_params(const nsp_attn_params_t *params);

/** Check cu_seqlens-style offsets [nseqs + 1]: non-NULL, offsets[0] >= 0,
 *  nondecreasing. Errors: NSP_ERR_INVALID_ARG naming the index. */
nsp_status_t nsp_attn_check_offsets(int nseqs, const int64_t *offsets);

/** Buffers of an attention call, for nsp_attn_check_bytes(): bit k is
 *  entry k of nsp_attn_bytes_t in declaration order. */
enum {
    NSP_ATTN_BUF_Q = 1u << 0, NSP_ATTN_BUF_K = 1u << 1, NSP_ATTN_BUF_V = 1u << 2,
    NSP_ATTN_BUF_O = 1u << 3, NSP_ATTN_BUF_LSE = 1u << 4, NSP_ATTN_BUF_DOUT = 1u << 5,
    NSP_ATTN_BUF_DQ = 1u << 6, NSP_ATTN_BUF_DK = 1u << 7, NSP_ATTN_BUF_DV = 1u << 8,
    NSP_ATTN_BUF_DELTA = 1u << 9,
    NSP_ATTN_BUFS_FWD = 0x1f,  /**< q, k, v, o, lse */
    NSP_ATTN_BUFS_BWD = 0x1ff  /**< the forward's and dout, dq, dk, dv */
};

/** With NSP_ATTN_FIELD_BYTES in params->field_mask: every buffer in `which`
 *  (NSP_ATTN_BUF_*) must hold its shape, the query-side ones q_tokens tokens
 *  and the key/value ones kv_tokens, of `elem`-byte elements (lse and delta:
 *  float) (attn_bytes.c). Without it: NSP_OK.
 *  Errors: NSP_ERR_INVALID_ARG naming `what`, the buffer and both sizes. */
nsp_status_t nsp_attn_check_bytes(const nsp_attn_params_t *params, const char *what,
                                  int64_t q_tokens, int64_t kv_tokens, unsigned which,
                                  size_t elem);

/** The NSP_ATTN_BUF_* bit of a buffer named as in nsp_attn_bytes_t ("dq"), 0 if none. */
unsigned nsp_attn_buf_bit(const char *name);

#endif /* NSP_ATTN_SP_ATTN_REF_H_ */
