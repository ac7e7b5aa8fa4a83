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

#endif /* NSP_ATTN_SP_ATTN_REF_H_ */
