/*
 * The public host reference attention (nspcomm.h section 9): argument
 * checks, the per-sequence loops, the LSE merge and the reference kernel
 * callbacks. The compute itself is in attn_tile.c.
 */
#include "attn_sp/attn_ref.h"

#include "attn_sp/attn_reduce.h"

#include "attn_sp/attn_tile.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nsp_status_t nsp_attn_check_params(const nsp_attn_params_t *params)
{
    if (params == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: params is NULL");
    }
    if (params->q_heads < 1 || params->kv_heads < 1 ||
        params->q_heads % params->kv_heads != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: q_heads %d and kv_heads %d must "
                         "be >= 1 with q_heads a multiple of kv_heads",
                         params->q_heads, params->kv_heads);
    }
    if (params->head_dim < 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: head_dim %d must be >= 1",
                         params->head_dim);
    }
    if (!isfinite(params->scale)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: scale %g is not finite (0 selects "
                         "1/sqrt(head_dim))", (double)params->scale);
    }
    if (params->causal != 0 && params->causal != 1) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: causal is %d; use 0 or 1",
                         params->causal);
    }
    return NSP_OK;
}

nsp_status_t nsp_attn_check_offsets(int nseqs, const int64_t *offsets)
{
    if (nseqs < 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: nseqs %d is negative", nseqs);
    }
    if (offsets == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: offsets is NULL (need nseqs + 1 "
                         "= %d entries)", nseqs + 1);
    }
    if (offsets[0] < 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "attention: offsets[0] = %lld is negative",
                         (long long)offsets[0]);
    }
    for (int j = 0; j < nseqs; ++j) {
        if (offsets[j + 1] < offsets[j]) {
            return nsp_error(NSP_ERR_INVALID_ARG, "attention: offsets decrease at sequence "
                             "%d (%lld then %lld); offsets are cumulative token counts",
                             j, (long long)offsets[j], (long long)offsets[j + 1]);
        }
    }
    return NSP_OK;
}

/* Every named buffer must be non-NULL when there is at least one row. */
static nsp_status_t check_buffers(const char *what, int64_t rows, int nbuf,
                                  const void *const *bufs, const char *const *names)
{
    if (rows == 0) {
        return NSP_OK;
    }
    for (int i = 0; i < nbuf; ++i) {
        if (bufs[i] == NULL) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: buffer %s is NULL", what, names[i]);
        }
    }
    return NSP_OK;
}

static nsp_status_t check_span(const char *what, int64_t pos0, int64_t len)
{
    if (pos0 < 0 || len < 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: span at position %lld of %lld tokens; "
                         "positions and lengths must be >= 0",
                         what, (long long)pos0, (long long)len);
    }
    return NSP_OK;
}

nsp_status_t nsp_attn_fwd(const nsp_attn_params_t *params, int nseqs,
                          const int64_t *offsets, const float *q, const float *k,
                          const float *v, float *o, float *lse)
{
    const void *bufs[] = {q, k, v, o, lse};
    const char *names[] = {"q", "k", "v", "o", "lse"};

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(nsp_attn_check_offsets(nseqs, offsets));
    NSP_CHECK(check_buffers("nsp_attn_fwd", offsets[nseqs] - offsets[0], 5, bufs, names));
    NSP_CHECK(nsp_attn_check_bytes(params, "nsp_attn_fwd", offsets[nseqs], offsets[nseqs],
                                   NSP_ATTN_BUFS_FWD, sizeof(float)));

    for (int j = 0; j < nseqs; ++j) {
        int64_t t0 = offsets[j], len = offsets[j + 1] - offsets[j];
        nsp_attn_geom_t g = nsp_attn_geom_make(params, 0, len, 0, len);
        const int64_t qrow = t0 * params->q_heads, kvrow = t0 * params->kv_heads;

        if (len == 0) {
            continue;
        }
        NSP_CHECK(nsp_attn_tile_fwd(&g, q + qrow * params->head_dim,
                                    k + kvrow * params->head_dim,
                                    v + kvrow * params->head_dim,
                                    o + qrow * params->head_dim, lse + qrow));
    }
    return NSP_OK;
}

nsp_status_t nsp_attn_delta(int64_t rows, int head_dim, const float *o,
                            const float *dout, float *delta)
{
    if (rows < 0 || head_dim < 1 || (rows > 0 && (o == NULL || dout == NULL || delta == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_attn_delta: rows %lld, head_dim %d, "
                         "o %p, dout %p, delta %p: need rows >= 0, head_dim >= 1 and "
                         "non-NULL buffers", (long long)rows, head_dim, (const void *)o,
                         (const void *)dout, (void *)delta);
    }
    for (int64_t r = 0; r < rows; ++r) {
        const float *orow = o + r * head_dim, *drow = dout + r * head_dim;
        float s = 0.0f;

        for (int d = 0; d < head_dim; ++d) {
            s += orow[d] * drow[d];
        }
        delta[r] = s;
    }
    return NSP_OK;
}

nsp_status_t nsp_attn_bwd(const nsp_attn_params_t *params, int nseqs,
                          const int64_t *offsets, const float *q, const float *k,
                          const float *v, const float *o, const float *lse,
                          const float *dout, float *dq, float *dk, float *dv)
{
    const void *bufs[] = {q, k, v, o, lse, dout, dq, dk, dv};
    const char *names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    nsp_status_t status = NSP_OK;
    float *delta = NULL;
    int64_t max_rows = 0;

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(nsp_attn_check_offsets(nseqs, offsets));
    NSP_CHECK(check_buffers("nsp_attn_bwd", offsets[nseqs] - offsets[0], 9, bufs, names));
    NSP_CHECK(nsp_attn_check_bytes(params, "nsp_attn_bwd", offsets[nseqs], offsets[nseqs],
                                   NSP_ATTN_BUFS_BWD, sizeof(float)));

    for (int j = 0; j < nseqs; ++j) {
        int64_t rows = (offsets[j + 1] - offsets[j]) * params->q_heads;
        max_rows = rows > max_rows ? rows : max_rows;
    }
    if (max_rows > 0) {
        delta = malloc((size_t)max_rows * sizeof(*delta));
        if (delta == NULL) {
            return nsp_error(NSP_ERR_NO_MEMORY, "nsp_attn_bwd: cannot allocate %lld floats "
                             "of delta", (long long)max_rows);
        }
    }
    for (int j = 0; j < nseqs; ++j) {
        const int D = params->head_dim;
        int64_t t0 = offsets[j], len = offsets[j + 1] - offsets[j];
        nsp_attn_geom_t g = nsp_attn_geom_make(params, 0, len, 0, len);
        const int64_t qrow = t0 * params->q_heads, kvrow = t0 * params->kv_heads;
        const size_t qbytes = (size_t)(len * params->q_heads * D) * sizeof(float);
        const size_t kvbytes = (size_t)(len * params->kv_heads * D) * sizeof(float);

        if (len == 0) {
            continue;
        }
        memset(dq + qrow * D, 0, qbytes);
        memset(dk + kvrow * D, 0, kvbytes);
        memset(dv + kvrow * D, 0, kvbytes);
        NSP_CHECK_GOTO(nsp_attn_delta(len * params->q_heads, D, o + qrow * D, dout + qrow * D,
                                      delta), status, out_free_delta);
        NSP_CHECK_GOTO(nsp_attn_tile_bwd(&g, q + qrow * D, k + kvrow * D, v + kvrow * D,
                                         dout + qrow * D, lse + qrow, delta, dq + qrow * D,
                                         dk + kvrow * D, dv + kvrow * D),
                       status, out_free_delta);
    }
out_free_delta:
    free(delta);
    return status;
}

nsp_status_t nsp_attn_block_fwd(const nsp_attn_params_t *params,
                                int64_t q_pos0, int64_t q_len, const float *q,
                                int64_t kv_pos0, int64_t kv_len, const float *k,
                                const float *v, float *o, float *lse)
{
    const void *qbufs[] = {q, o, lse}, *kvbufs[] = {k, v};
    const char *qnames[] = {"q", "o", "lse"}, *kvnames[] = {"k", "v"};
    nsp_attn_geom_t g;

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(check_span("nsp_attn_block_fwd: query", q_pos0, q_len));
    NSP_CHECK(check_span("nsp_attn_block_fwd: key/value", kv_pos0, kv_len));
    NSP_CHECK(check_buffers("nsp_attn_block_fwd", q_len, 3, qbufs, qnames));
    NSP_CHECK(check_buffers("nsp_attn_block_fwd", q_len > 0 ? kv_len : 0, 2, kvbufs,
                            kvnames));
    NSP_CHECK(nsp_attn_check_bytes(params, "nsp_attn_block_fwd", q_len, q_len > 0 ? kv_len : 0,
                                   NSP_ATTN_BUFS_FWD, sizeof(float)));
    g = nsp_attn_geom_make(params, q_pos0, q_len, kv_pos0, kv_len);
    return nsp_attn_tile_fwd(&g, q, k, v, o, lse);
}

nsp_status_t nsp_attn_block_bwd(const nsp_attn_params_t *params,
                                int64_t q_pos0, int64_t q_len, const float *q,
                                const float *dout, const float *lse, const float *delta,
                                int64_t kv_pos0, int64_t kv_len, const float *k,
                                const float *v, float *dq, float *dk, float *dv)
{
    const void *qbufs[] = {q, dout, lse, delta, dq}, *kvbufs[] = {k, v, dk, dv};
    const char *qnames[] = {"q", "dout", "lse", "delta", "dq"};
    const char *kvnames[] = {"k", "v", "dk", "dv"};
    nsp_attn_geom_t g;

    NSP_CHECK(nsp_attn_check_params(params));
    NSP_CHECK(check_span("nsp_attn_block_bwd: query", q_pos0, q_len));
    NSP_CHECK(check_span("nsp_attn_block_bwd: key/value", kv_pos0, kv_len));
    NSP_CHECK(check_buffers("nsp_attn_block_bwd", kv_len > 0 ? q_len : 0, 5, qbufs, qnames));
    NSP_CHECK(check_buffers("nsp_attn_block_bwd", q_len > 0 ? kv_len : 0, 4, kvbufs,
                            kvnames));
    NSP_CHECK(nsp_attn_check_bytes(params, "nsp_attn_block_bwd", kv_len > 0 ? q_len : 0,
                                   q_len > 0 ? kv_len : 0,
                                   NSP_ATTN_BUF_Q | NSP_ATTN_BUF_DOUT | NSP_ATTN_BUF_LSE |
                                       NSP_ATTN_BUF_DELTA | NSP_ATTN_BUF_DQ | NSP_ATTN_BUF_K |
                                       NSP_ATTN_BUF_V | NSP_ATTN_BUF_DK | NSP_ATTN_BUF_DV,
                                   sizeof(float)));
    g = nsp_attn_geom_make(params, q_pos0, q_len, kv_pos0, kv_len);
    return nsp_attn_tile_bwd(&g, q, k, v, dout, lse, delta, dq, dk, dv);
}

nsp_status_t nsp_attn_merge(int64_t rows, int head_dim, float *o, float *lse,
                            const float *o2, const float *lse2)
{
    if (rows < 0 || head_dim < 1 ||
        (rows > 0 && (o == NULL || lse == NULL || o2 == NULL || lse2 == NULL))) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_attn_merge: rows %lld, head_dim %d: need "
                         "rows >= 0, head_dim >= 1 and non-NULL o, lse, o2, lse2",
                         (long long)rows, head_dim);
    }
    /* the float32 case of the dtype-generic merge (attn_reduce.h) */
    return nsp_reduce_merge(NSP_ATTN_FP32, rows, head_dim, o, lse, o2, lse2);
}

/* Chunk c of the 2r zigzag chunks of a sequence: the first seq_len % 2r
 * chunks carry one token more. */
static void zigzag_chunk(int64_t seq_len, int r, int c, int64_t *start, int64_t *len)
{
    const int64_t nchunks = 2 * (int64_t)r;
    const int64_t base = seq_len / nchunks, extra = seq_len % nchunks;

    *start = c * base + (c < extra ? c : extra);
    *len = base + (c < extra ? 1 : 0);
}

nsp_status_t nsp_zigzag_chunks(int64_t seq_len, int r, int index, int64_t start[2],
                               int64_t len[2])
{
    if (start == NULL || len == NULL || seq_len < 0 || r < 1 || index < 0 || index >= r) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_zigzag_chunks: seq_len %lld, r %d, "
                         "index %d: need seq_len >= 0, r >= 1, 0 <= index < r and "
                         "non-NULL outputs", (long long)seq_len, r, index);
    }
    for (int i = 0; i < 2; ++i) {
        int c = i == 0 ? index : 2 * r - 1 - index;
        zigzag_chunk(seq_len, r, c, &start[i], &len[i]);
    }
    return NSP_OK;
}

/* ------------------------------------------------------------------------ */
/* The reference kernel callbacks                                           */
/* ------------------------------------------------------------------------ */

static nsp_status_t check_kernel_batch(const char *what, const nsp_attn_batch_t *batch)
{
    if (batch == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "%s: batch is NULL", what);
    }
    if (batch->dtype != NSP_ATTN_FP32 || batch->stream != NULL) {
        return nsp_error(NSP_ERR_UNSUPPORTED, "%s: the host reference kernel takes float32 "
                         "host buffers only (dtype %d, stream %p); pass a framework kernel "
                         "for other types or device memory", what, (int)batch->dtype,
                         batch->stream);
    }
    NSP_CHECK(nsp_attn_check_params(&batch->params));
    NSP_CHECK(nsp_attn_check_offsets(batch->nseqs, batch->q_offsets));
    NSP_CHECK(nsp_attn_check_offsets(batch->nseqs, batch->kv_offsets));
    return NSP_OK;
}

static nsp_status_t ref_kernel_fwd(void *ctx, const nsp_attn_batch_t *batch,
                                   const void *q, const void *k, const void *v,
                                   void *o, float *lse)
{
    const nsp_attn_params_t *p;

    (void)ctx;
    NSP_CHECK(check_kernel_batch("reference attention kernel (forward)", batch));
    p = &batch->params;
    for (int j = 0; j < batch->nseqs; ++j) {
        int64_t qt = batch->q_offsets[j], kt = batch->kv_offsets[j];
        int64_t qlen = batch->q_offsets[j + 1] - qt, kvlen = batch->kv_offsets[j + 1] - kt;
        int64_t qrow = qt * p->q_heads, kvrow = kt * p->kv_heads;

        if (qlen == 0) {
            continue;
        }
        NSP_CHECK(nsp_attn_block_fwd(p, 0, qlen, (const float *)q + qrow * p->head_dim, 0, kvlen,
                                     kvlen > 0 ? (const float *)k + kvrow * p->head_dim : NULL,
                                     kvlen > 0 ? (const float *)v + kvrow * p->head_dim : NULL,
                                     (float *)o + qrow * p->head_dim, lse + qrow));
    }
    return NSP_OK;
}

static nsp_status_t ref_kernel_bwd(void *ctx, const nsp_attn_batch_t *batch,
                                   const void *q, const void *k, const void *v,
                                   const void *o, const float *lse, const void *dout,
                                   void *dq, void *dk, void *dv)
{
    const nsp_attn_params_t *p;
    nsp_status_t status = NSP_OK;
    float *delta = NULL;
    int64_t max_rows = 0;

    (void)ctx;
    NSP_CHECK(check_kernel_batch("reference attention kernel (backward)", batch));
    p = &batch->params;
    for (int j = 0; j < batch->nseqs; ++j) {
        int64_t rows = (batch->q_offsets[j + 1] - batch->q_offsets[j]) * p->q_heads;
        max_rows = rows > max_rows ? rows : max_rows;
    }
    delta = malloc((size_t)(max_rows > 0 ? max_rows : 1) * sizeof(*delta));
    if (delta == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "reference attention kernel: cannot allocate "
                         "%lld floats of delta", (long long)max_rows);
    }
    for (int j = 0; j < batch->nseqs; ++j) {
        const int D = p->head_dim;
        int64_t qt = batch->q_offsets[j], kt = batch->kv_offsets[j];
        int64_t qlen = batch->q_offsets[j + 1] - qt, kvlen = batch->kv_offsets[j + 1] - kt;
        int64_t qrow = qt * p->q_heads, kvrow = kt * p->kv_heads;
        float *dqs, *dks, *dvs;

        if (kvlen > 0) { /* no query: its keys still get a zero gradient */
            memset((float *)dk + kvrow * D, 0, (size_t)(kvlen * p->kv_heads * D) * sizeof(float));
            memset((float *)dv + kvrow * D, 0, (size_t)(kvlen * p->kv_heads * D) * sizeof(float));
        }
        if (qlen == 0) {
            continue;
        }
        dqs = (float *)dq + qrow * D;
        dks = kvlen > 0 ? (float *)dk + kvrow * D : NULL;
        dvs = kvlen > 0 ? (float *)dv + kvrow * D : NULL;
        memset(dqs, 0, (size_t)(qlen * p->q_heads * D) * sizeof(float));
        NSP_CHECK_GOTO(nsp_attn_delta(qlen * p->q_heads, D, (const float *)o + qrow * D,
                                      (const float *)dout + qrow * D, delta),
                       status, out_free_delta);
        NSP_CHECK_GOTO(nsp_attn_block_bwd(p, 0, qlen, (const float *)q + qrow * D,
                                          (const float *)dout + qrow * D, lse + qrow, delta,
                                          0, kvlen, kvlen > 0 ? (const float *)k + kvrow * D : NULL,
                                          kvlen > 0 ? (const float *)v + kvrow * D : NULL,
                                          dqs, dks, dvs),
                       status, out_free_delta);
    }
out_free_delta:
    free(delta);
    return status;
}

nsp_status_t nsp_attn_kernel_reference(nsp_attn_kernel_t *kernel)
{
    if (kernel == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_attn_kernel_reference: kernel is NULL");
    }
    kernel->fwd = ref_kernel_fwd;
    kernel->bwd = ref_kernel_bwd;
    kernel->ctx = NULL;
    return NSP_OK;
}
