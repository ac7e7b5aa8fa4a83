/*
 * The level kernels of pack_ops.h on the host: the CUDA kernels' unit maps
 * (pack_map.h) run at once on the calling thread over host memory, with
 * the checks of the CUDA launches (pack_cuda.c). `tables` is a level's
 * nsp_pk_tables_t; the stream is not read (the work is done on return).
 */
#include "config.h"

#include "attn_sp/pack_ops.h"

#include "attn_sp/pack_map.h"
#include "common/log.h"

#include <stdlib.h>

static nsp_status_t host_level_create(const nsp_level_view_t *view, void **tables)
{
    nsp_pk_tables_t *t = calloc(1, sizeof(*t));
    nsp_status_t     status;

    if (t == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "host pack: no memory for a level's tables");
    }
    status = nsp_pk_tables_build(view, t);
    if (status != NSP_OK) {
        free(t);
        return status;
    }
    *tables = t;
    return NSP_OK;
}

static void host_level_release(void *tables, void *stream)
{
    (void)stream; /* nothing is pending: every op ran when it returned */
    if (tables != NULL) {
        nsp_pk_tables_free(tables);
        free(tables);
    }
}

static int all_zero(const size_t *counts, int n)
{
    for (int j = 0; j < n; ++j) {
        if (counts[j] != 0) {
            return 0;
        }
    }
    return 1;
}

/* Check and run `op` over its units (counts and displs [d], NULL for the
 * self ops), as pk_run() launches it. */
static nsp_status_t host_run(const nsp_pk_tables_t *t, nsp_pk_op_t op,
                             nsp_a2a_replicas_t replicas, int heads,
                             size_t row_bytes, const size_t *counts, const size_t *displs,
                             const void *src, void *dst)
{
    nsp_pk_args_t a;

    if (counts != NULL && all_zero(counts, t->lv.degree)) {
        return NSP_OK; /* nothing to move (e.g. a replica that sends nothing) */
    }
    NSP_CHECK(nsp_pk_args_make(t, &t->lv, op, replicas, heads, row_bytes,
                               (const uint64_t *)counts,
                               (const uint64_t *)displs, src, dst, &a));
    if (a.units == 0 || a.unit_bytes == 0) {
        return NSP_OK;
    }
    if (src == NULL || dst == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "host %s: NULL buffer for %llu units of %llu "
                         "bytes", nsp_pk_op_name(op), (unsigned long long)a.units,
                         (unsigned long long)a.unit_bytes);
    }
    nsp_pk_emulate(&a);
    return NSP_OK;
}

static nsp_status_t host_pack_s2h(void *tables, int heads, size_t row_bytes, const void *chunks,
                                  void *send, const size_t *send_bytes,
                                  const size_t *send_displs, void *stream)
{
    (void)stream;
    return host_run(tables, NSP_PK_S2H_PACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                    send_bytes, send_displs, chunks, send);
}

static nsp_status_t host_unpack_s2h(void *tables, int heads, size_t row_bytes, const void *recv,
                                    const size_t *recv_bytes, const size_t *recv_displs,
                                    void *block, void *stream)
{
    (void)stream;
    return host_run(tables, NSP_PK_S2H_UNPACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                    recv_bytes, recv_displs, recv, block);
}

static nsp_status_t host_pack_h2s(void *tables, int heads, size_t row_bytes, const void *block,
                                  void *send, const size_t *send_bytes,
                                  const size_t *send_displs, void *stream)
{
    (void)stream;
    return host_run(tables, NSP_PK_H2S_PACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                    send_bytes, send_displs, block, send);
}

static nsp_status_t host_unpack_h2s(void *tables, int heads, size_t row_bytes,
                                    nsp_a2a_replicas_t replicas, const void *recv,
                                    const size_t *recv_bytes, const size_t *recv_displs,
                                    void *chunks, void *stream)
{
    nsp_pk_op_t op;

    (void)stream;
    NSP_CHECK(nsp_pk_op_unpack_h2s(tables, heads, replicas, &op));
    return host_run(tables, op, replicas, heads, row_bytes, recv_bytes, recv_displs, recv, chunks);
}

static nsp_status_t host_copy_self(void *tables, nsp_a2a_dir_t dir, int heads,
                                   size_t row_bytes, nsp_a2a_replicas_t replicas,
                                   const void *src, void *dst, void *stream)
{
    nsp_pk_op_t op;

    (void)stream;
    NSP_CHECK(nsp_pk_op_copy_self(tables, dir, heads, replicas, &op));
    if (op == NSP_PK_NOPS) {
        return NSP_OK; /* another replica's copy wins */
    }
    return host_run(tables, op, replicas, heads, row_bytes, NULL, NULL, src, dst);
}

const nsp_pack_ops_t nsp_pack_ops_host = {
    .name          = "host",
    .level_create  = host_level_create,
    .level_release = host_level_release,
    .pack_s2h      = host_pack_s2h,
    .unpack_s2h    = host_unpack_s2h,
    .pack_h2s      = host_pack_h2s,
    .unpack_h2s    = host_unpack_h2s,
    .copy_self     = host_copy_self,
};
