/*
 * CUDA pack/unpack, host side: a level's device tables, the cache of count
 * patterns, argument checks and the launches (pack_cuda.h). The kernels
 * are in pack_cuda_kernels.cu, their unit maps in pack_map.h. The same
 * launches as the CUDA memory type's pack ops (pack_ops.h), at the end.
 */
#include "attn_sp/pack_cuda.h"

#include "attn_sp/pack_cuda_kernels.h"
#include "attn_sp/pack_map.h"
#include "attn_sp/pack_ops.h"
#include "attn_sp/replica_sum.h"
#include "common/log.h"
#include "streams/cuda_util.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define PK_WHAT "cuda pack"

/* One count pattern of one side: counts[d] then displs[d], host and device. */
typedef struct pk_pattern {
    struct pk_pattern *next;
    uint64_t          *host;  /* [2][d], malloc */
    uint64_t          *dev;   /* [2][d], cudaMalloc */
} pk_pattern_t;

struct nsp_cuda_level {
    nsp_pk_tables_t tables;    /* host tables (totals, and the view's shape) */
    nsp_pk_level_t  dev_lv;    /* the same tables as the kernels see them */
    int64_t        *dev_data;  /* device copy of tables.data */
    cudaStream_t    upload;    /* private: uploads wait for nothing else */
    pk_pattern_t   *patterns;
    int             npatterns;
};

/* Copy host bytes to the device and wait for that copy only. */
static nsp_status_t pk_upload(nsp_cuda_level_t *L, void *dev, const void *host, size_t bytes)
{
    if (bytes == 0) {
        return NSP_OK;
    }
    NSP_CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, L->upload), PK_WHAT);
    NSP_CUDA_CHECK(cudaStreamSynchronize(L->upload), PK_WHAT);
    return NSP_OK;
}

nsp_status_t nsp_cuda_level_create(const nsp_level_view_t *view, nsp_cuda_level_t **out)
{
    nsp_cuda_level_t *L;
    nsp_status_t      status;
    size_t            bytes;

    if (view == NULL || out == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_level_create: NULL argument");
    }
    L = calloc(1, sizeof(*L));
    if (L == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "nsp_cuda_level_create: no memory");
    }
    NSP_CHECK_GOTO(nsp_pk_tables_build(view, &L->tables), status, err_free);
    bytes = L->tables.words * sizeof(int64_t);
    NSP_CUDA_GOTO(cudaStreamCreateWithFlags(&L->upload, cudaStreamNonBlocking), PK_WHAT, status,
                  err_free_tables);
    NSP_CUDA_GOTO(cudaMallocAsync((void **)&L->dev_data, bytes > 0 ? bytes : sizeof(int64_t),
                                  L->upload),
                  PK_WHAT, status, err_destroy_stream);
    NSP_CHECK_GOTO(pk_upload(L, L->dev_data, L->tables.data, bytes), status, err_free_dev);
    L->dev_lv         = L->tables.lv;
    L->dev_lv.seq_len = L->dev_data + (L->tables.lv.seq_len - L->tables.data);
    L->dev_lv.seq_off = L->dev_data + (L->tables.lv.seq_off - L->tables.data);
    L->dev_lv.cum     = L->dev_data + (L->tables.lv.cum - L->tables.data);
    NSP_DEBUG("cuda pack: level of degree %d, index %d, %d sequences: %zu table bytes on the "
              "device (L = %lld, T = %lld tokens)",
              view->degree, view->index, view->nseqs, bytes, (long long)L->tables.mine,
              (long long)L->tables.total);
    *out = L;
    return NSP_OK;
err_free_dev:
    cudaFreeAsync(L->dev_data, L->upload);
err_destroy_stream:
    cudaStreamDestroy(L->upload);
err_free_tables:
    nsp_pk_tables_free(&L->tables);
err_free:
    free(L);
    return status;
}

void nsp_cuda_level_release(nsp_cuda_level_t *L, void *stream)
{
    cudaStream_t s;

    if (L == NULL) {
        return;
    }
    s = stream != NULL ? (cudaStream_t)stream : L->upload;
    while (L->patterns != NULL) {
        pk_pattern_t *p = L->patterns;
        L->patterns     = p->next;
        cudaFreeAsync(p->dev, s);
        free(p->host);
        free(p);
    }
    cudaFreeAsync(L->dev_data, s);
    cudaStreamDestroy(L->upload); /* returns at once; queued work still runs */
    nsp_pk_tables_free(&L->tables);
    free(L);
}

void nsp_cuda_level_free(nsp_cuda_level_t *L)
{
    nsp_cuda_level_release(L, NULL);
}

nsp_status_t nsp_cuda_level_tokens(const nsp_cuda_level_t *L, int64_t *mine, int64_t *total)
{
    if (L == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_level_tokens: NULL level");
    }
    if (mine != NULL) {
        *mine = L->tables.mine;
    }
    if (total != NULL) {
        *total = L->tables.total;
    }
    return NSP_OK;
}

/* The device copy of (counts, displs): found in the cache, or uploaded now. */
static nsp_status_t pk_pattern(nsp_cuda_level_t *L, const size_t *counts, const size_t *displs,
                               const uint64_t **dev_counts, const uint64_t **dev_displs)
{
    size_t        d     = (size_t)L->tables.lv.degree;
    size_t        bytes = d * sizeof(uint64_t);
    pk_pattern_t *p;
    nsp_status_t  status;

    for (p = L->patterns; p != NULL; p = p->next) {
        if (memcmp(p->host, counts, bytes) == 0 && memcmp(p->host + d, displs, bytes) == 0) {
            goto found;
        }
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL || (p->host = malloc(2 * bytes)) == NULL) {
        free(p);
        return nsp_error(NSP_ERR_NO_MEMORY, "cuda pack: no memory for a count pattern of %zu "
                                            "peers",
                         d);
    }
    memcpy(p->host, counts, bytes);
    memcpy(p->host + d, displs, bytes);
    NSP_CUDA_GOTO(cudaMallocAsync((void **)&p->dev, 2 * bytes, L->upload), PK_WHAT, status,
                  err_free);
    NSP_CHECK_GOTO(pk_upload(L, p->dev, p->host, 2 * bytes), status, err_free_dev);
    p->next     = L->patterns;
    L->patterns = p;
    ++L->npatterns;
    NSP_DEBUG("cuda pack: level of degree %zu: count pattern %d uploaded", d, L->npatterns);
found:
    *dev_counts = p->dev;
    *dev_displs = p->dev + d;
    return NSP_OK;
err_free_dev:
    cudaFreeAsync(p->dev, L->upload);
err_free:
    free(p->host);
    free(p);
    return status;
}

static int pk_all_zero(const size_t *counts, int n)
{
    for (int j = 0; j < n; ++j) {
        if (counts[j] != 0) {
            return 0;
        }
    }
    return 1;
}

/* Check, build the arguments of `op` and enqueue its kernel. counts and
 * displs (host, [d]) are NULL for the self ops. */
static nsp_status_t pk_run(nsp_cuda_level_t *L, nsp_pk_op_t op, nsp_a2a_replicas_t replicas,
                           int heads, size_t row_bytes,
                           const size_t *counts, const size_t *displs, const void *src,
                           void *dst, void *stream)
{
    const uint64_t *dc = NULL, *dd = NULL;
    nsp_pk_args_t   a;
    size_t          vb;
    int             d = L != NULL ? L->tables.lv.degree : 0;

    if (L == NULL || (counts == NULL) != (displs == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cuda %s: NULL level, or counts without "
                                              "displacements",
                         nsp_pk_op_name(op));
    }
    if (counts != NULL && pk_all_zero(counts, d)) {
        return NSP_OK; /* nothing to move (e.g. a replica that sends nothing) */
    }
    NSP_CHECK(nsp_pk_args_make(&L->tables, &L->tables.lv, op, replicas, heads, row_bytes, NULL,
                               NULL, src,
                               dst, &a));
    if (a.units == 0 || a.unit_bytes == 0) {
        return NSP_OK;
    }
    if (src == NULL || dst == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cuda %s: NULL buffer for %llu units of %llu "
                                              "bytes",
                         nsp_pk_op_name(op), (unsigned long long)a.units,
                         (unsigned long long)a.unit_bytes);
    }
    if (counts != NULL) {
        NSP_CHECK(pk_pattern(L, counts, displs, &dc, &dd));
    }
    NSP_CHECK(nsp_pk_args_make(&L->tables, &L->dev_lv, op, replicas, heads, row_bytes, dc, dd,
                               src, dst,
                               &a));
    vb = nsp_pk_vector_bytes(&a, (const uint64_t *)displs, displs != NULL ? d : 0);
    if ((op == NSP_PK_H2S_UNPACK_SUM || op == NSP_PK_H2S_SELF_ADD) &&
        vb < nsp_rs_elem_bytes((int32_t)replicas)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "cuda %s: buffers of %zu-byte sums must be "
                                              "%zu-byte aligned (src %p, dst %p)",
                         nsp_pk_op_name(op), nsp_rs_elem_bytes((int32_t)replicas),
                         nsp_rs_elem_bytes((int32_t)replicas), src, dst);
    }
    NSP_CUDA_CHECK(nsp_pk_launch(&a, (unsigned)vb, (cudaStream_t)stream), nsp_pk_op_name(op));
    return NSP_OK;
}

nsp_status_t nsp_cuda_pack_s2h(nsp_cuda_level_t *L, int heads, size_t row_bytes,
                               const void *chunks, void *send, const size_t *send_bytes,
                               const size_t *send_displs, void *stream)
{
    if (send_bytes == NULL || send_displs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_pack_s2h: NULL counts");
    }
    return pk_run(L, NSP_PK_S2H_PACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                  send_bytes, send_displs, chunks, send, stream);
}

nsp_status_t nsp_cuda_unpack_s2h(nsp_cuda_level_t *L, int heads, size_t row_bytes,
                                 const void *recv, const size_t *recv_bytes,
                                 const size_t *recv_displs, void *block, void *stream)
{
    if (recv_bytes == NULL || recv_displs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_unpack_s2h: NULL counts");
    }
    return pk_run(L, NSP_PK_S2H_UNPACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                  recv_bytes, recv_displs, recv, block, stream);
}

nsp_status_t nsp_cuda_pack_h2s(nsp_cuda_level_t *L, int heads, size_t row_bytes,
                               const void *block, void *send, const size_t *send_bytes,
                               const size_t *send_displs, void *stream)
{
    if (send_bytes == NULL || send_displs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_pack_h2s: NULL counts");
    }
    return pk_run(L, NSP_PK_H2S_PACK, NSP_A2A_REPLICAS_FIRST, heads, row_bytes,
                  send_bytes, send_displs, block, send, stream);
}

nsp_status_t nsp_cuda_unpack_h2s(nsp_cuda_level_t *L, int heads, size_t row_bytes,
                                 nsp_a2a_replicas_t replicas, const void *recv,
                                 const size_t *recv_bytes, const size_t *recv_displs,
                                 void *chunks, void *stream)
{
    nsp_pk_op_t op;

    if (L == NULL || recv_bytes == NULL || recv_displs == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_unpack_h2s: NULL level or counts");
    }
    NSP_CHECK(nsp_pk_op_unpack_h2s(&L->tables, heads, replicas, &op));
    return pk_run(L, op, replicas, heads, row_bytes, recv_bytes, recv_displs, recv, chunks, stream);
}

nsp_status_t nsp_cuda_pack_copy_self(nsp_cuda_level_t *L, nsp_a2a_dir_t dir, int heads,
                                     size_t row_bytes, nsp_a2a_replicas_t replicas,
                                     const void *src, void *dst, void *stream)
{
    nsp_pk_op_t op;

    if (L == NULL) {
        return nsp_error(NSP_ERR_INVALID_ARG, "nsp_cuda_pack_copy_self: NULL level");
    }
    NSP_CHECK(nsp_pk_op_copy_self(&L->tables, dir, heads, replicas, &op));
    if (op == NSP_PK_NOPS) {
        return NSP_OK; /* another replica's copy wins */
    }
    return pk_run(L, op, replicas, heads, row_bytes, NULL, NULL, src, dst, stream);
}

/* ---- the pack ops of the CUDA memory type (pack_ops.h) ------------------- */

static nsp_status_t ops_level_create(const nsp_level_view_t *view, void **tables)
{
    nsp_cuda_level_t *L = NULL;

    NSP_CHECK(nsp_cuda_level_create(view, &L));
    *tables = L;
    return NSP_OK;
}

static void ops_level_release(void *tables, void *stream)
{
    nsp_cuda_level_release(tables, stream);
}

static nsp_status_t ops_pack_s2h(void *tables, int heads, size_t row_bytes, const void *chunks,
                                 void *send, const size_t *send_bytes,
                                 const size_t *send_displs, void *stream)
{
    return nsp_cuda_pack_s2h(tables, heads, row_bytes, chunks, send, send_bytes, send_displs,
                             stream);
}

static nsp_status_t ops_unpack_s2h(void *tables, int heads, size_t row_bytes, const void *recv,
                                   const size_t *recv_bytes, const size_t *recv_displs,
                                   void *block, void *stream)
{
    return nsp_cuda_unpack_s2h(tables, heads, row_bytes, recv, recv_bytes, recv_displs, block,
                               stream);
}

static nsp_status_t ops_pack_h2s(void *tables, int heads, size_t row_bytes, const void *block,
                                 void *send, const size_t *send_bytes,
                                 const size_t *send_displs, void *stream)
{
    return nsp_cuda_pack_h2s(tables, heads, row_bytes, block, send, send_bytes, send_displs,
                             stream);
}

static nsp_status_t ops_unpack_h2s(void *tables, int heads, size_t row_bytes,
                                   nsp_a2a_replicas_t replicas, const void *recv,
                                   const size_t *recv_bytes, const size_t *recv_displs,
                                   void *chunks, void *stream)
{
    return nsp_cuda_unpack_h2s(tables, heads, row_bytes, replicas, recv, recv_bytes,
                               recv_displs, chunks, stream);
}

static nsp_status_t ops_copy_self(void *tables, nsp_a2a_dir_t dir, int heads, size_t row_bytes,
                                  nsp_a2a_replicas_t replicas, const void *src, void *dst,
                                  void *stream)
{
    return nsp_cuda_pack_copy_self(tables, dir, heads, row_bytes, replicas, src, dst, stream);
}

const nsp_pack_ops_t nsp_pack_ops_cuda = {
    .name          = "cuda",
    .level_create  = ops_level_create,
    .level_release = ops_level_release,
    .pack_s2h      = ops_pack_s2h,
    .unpack_s2h    = ops_unpack_s2h,
    .pack_h2s      = ops_pack_h2s,
    .unpack_h2s    = ops_unpack_h2s,
    .copy_self     = ops_copy_self,
};
