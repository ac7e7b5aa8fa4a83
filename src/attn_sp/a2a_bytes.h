/*
 * The sizes of a nested all-to-all's buffers, checked when the caller gave
 * them (nspcomm.h: NSP_A2A_FIELD_BYTES).
 */
#ifndef NSP_ATTN_SP_A2A_BYTES_H_
#define NSP_ATTN_SP_A2A_BYTES_H_

#include "nspcomm.h"

/**
 * With NSP_A2A_FIELD_BYTES in params->field_mask: src_bytes and dst_bytes
 * must hold the layout's buffers for this tensor: the sequence-sharded one
 * [T_local, H, D] and the head-sharded one [nsp_layout_head_rows(H), D], of
 * elem_size bytes each, in the order params->direction reads and writes
 * them. Without it: NSP_OK. Errors: NSP_ERR_INVALID_ARG naming `what`, the
 * buffer, both sizes and the shape; the errors of nsp_layout_head_rows().
 */
nsp_status_t nsp_a2a_check_bytes(const nsp_layout_t *layout, const nsp_a2a_params_t *params,
                                 const char *what);

#endif /* NSP_ATTN_SP_A2A_BYTES_H_ */
