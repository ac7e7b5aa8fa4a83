/* The sizes of a nested all-to-all's buffers; see a2a_bytes.h. */
#include "attn_sp/a2a_bytes.h"

#include "common/log.h"

/* One buffer of `rows` rows of D elements against the bytes given. */
static nsp_status_t check_buffer(const char *what, const char *name, const char *shape,
                                 size_t given, int64_t rows, const nsp_a2a_params_t *p)
{
    /* rows * D * elem_size bytes, as a double: no overflow to hide it */
    const double need = (double)rows * p->head_dim * (double)p->elem_size;

    if ((double)given >= need) {
        return NSP_OK;
    }
    return nsp_error(NSP_ERR_INVALID_ARG, "%s: %s has %zu bytes, the %s buffer [%lld rows, "
                     "D = %d] of %zu-byte elements needs %.0f (params.%s_bytes)", what, name,
                     given, shape, (long long)rows, p->head_dim, p->elem_size, need, name);
}

nsp_status_t nsp_a2a_check_bytes(const nsp_layout_t *layout, const nsp_a2a_params_t *params,
                                 const char *what)
{
    nsp_layout_info_t info;
    int64_t           head_rows, seq_rows;
    int               s2h;

    if (!(params->field_mask & NSP_A2A_FIELD_BYTES)) {
        return NSP_OK;
    }
    NSP_CHECK(nsp_layout_query(layout, &info));
    NSP_CHECK(nsp_layout_head_rows(layout, params->heads, &head_rows));
    seq_rows = info.local_tokens * params->heads; /* [T_local, H] rows of D */
    s2h      = params->direction == NSP_A2A_SEQ_TO_HEAD;
    NSP_CHECK(check_buffer(what, "src", s2h ? "sequence-sharded" : "head-sharded",
                           params->src_bytes, s2h ? seq_rows : head_rows, params));
    return check_buffer(what, "dst", s2h ? "head-sharded" : "sequence-sharded",
                        params->dst_bytes, s2h ? head_rows : seq_rows, params);
}
