/*
 * The CUDA pack/unpack kernels against the host pack.c, bit for bit, on
 * random level views (degrees 1..64, uneven lengths, empty chunks,
 * replicated heads, SUM_F32, SUM_BF16, SUM_FP16, misaligned buffers), every operation of a
 * level. Needs a GPU: prints "1..0 # SKIP no CUDA device (...)" without.
 */
#include "attn_sp/pack_cuda.h"
#include "common/log.h"
#include "streams/cuda_util.h"

#include "../tap.h"
#include "gpu_views.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

typedef struct cuda_ctx {
    cudaStream_t stream;
} cuda_ctx_t;

/* Run one op with the CUDA kernels: copy in, launch on the stream, copy out. */
static nsp_status_t cuda_impl(void *arg, const gv_case_t *c, gv_op_t op, const size_t *counts,
                              const size_t *displs, const void *src, size_t src_bytes, void *dst,
                              size_t dst_bytes)
{
    cuda_ctx_t       *ctx = arg;
    nsp_cuda_level_t *L   = NULL;
    char             *dsrc = NULL, *ddst = NULL;
    size_t            off = c->misalign ? c->elem : 0, rb = (size_t)c->head_dim * c->elem;
    nsp_status_t      st;

    NSP_CHECK(nsp_cuda_level_create(&c->view, &L));
    NSP_CUDA_GOTO(cudaMalloc((void **)&dsrc, src_bytes + 32), "test", st, out);
    NSP_CUDA_GOTO(cudaMalloc((void **)&ddst, dst_bytes + 32), "test", st, out);
    NSP_CUDA_GOTO(cudaMemcpy(dsrc + off, src, src_bytes, cudaMemcpyHostToDevice), "test", st, out);
    NSP_CUDA_GOTO(cudaMemcpy(ddst + off, dst, dst_bytes, cudaMemcpyHostToDevice), "test", st, out);
    switch (op) {
    case GV_PACK_S2H:
        st = nsp_cuda_pack_s2h(L, c->heads, rb, dsrc + off, ddst + off, counts, displs,
                               ctx->stream);
        break;
    case GV_UNPACK_S2H:
        st = nsp_cuda_unpack_s2h(L, c->heads, rb, dsrc + off, counts, displs, ddst + off,
                                 ctx->stream);
        break;
    case GV_PACK_H2S:
        st = nsp_cuda_pack_h2s(L, c->heads, rb, dsrc + off, ddst + off, counts, displs,
                               ctx->stream);
        break;
    case GV_UNPACK_H2S:
        st = nsp_cuda_unpack_h2s(L, c->heads, rb, c->replicas, dsrc + off, counts, displs,
                                 ddst + off, ctx->stream);
        break;
    case GV_SELF_S2H:
        st = nsp_cuda_pack_copy_self(L, NSP_A2A_SEQ_TO_HEAD, c->heads, rb, c->replicas,
                                     dsrc + off, ddst + off, ctx->stream);
        break;
    default:
        st = nsp_cuda_pack_copy_self(L, NSP_A2A_HEAD_TO_SEQ, c->heads, rb, c->replicas,
                                     dsrc + off, ddst + off, ctx->stream);
        break;
    }
    if (st != NSP_OK) {
        goto out;
    }
    NSP_CUDA_GOTO(cudaStreamSynchronize(ctx->stream), "test (kernel)", st, out);
    NSP_CUDA_GOTO(cudaMemcpy(dst, ddst + off, dst_bytes, cudaMemcpyDeviceToHost), "test", st,
                  out);
out:
    cudaFree(dsrc);
    cudaFree(ddst);
    nsp_cuda_level_free(L);
    return st;
}

int main(void)
{
    static const int dims[] = {1, 3, 8, 64, 128};
    uint64_t         rng   = 0xbb67ae8584caa73bull;
    int              ndev  = 0, cases = 300, failures[GV_NOPS] = {0};
    char             why[256], desc[160], first_fail[GV_NOPS][448];
    cuda_ctx_t       ctx;

    if (nsp_cuda_device_probe(&ndev) != NSP_OK) {
        tap_skip_all("no CUDA device (%s)", nsp_last_error());
    }
    memset(first_fail, 0, sizeof(first_fail));
    if (cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) != cudaSuccess) {
        tap_ok(0, "cudaStreamCreate");
        return tap_done();
    }
    for (int n = 0; n < cases; ++n) {
        gv_case_t c;
        if (gv_case_random(&c, &rng, 64, 8, 3000, dims, 5) != 0) {
            tap_ok(0, "out of memory drawing case %d", n);
            break;
        }
        gv_case_describe(&c, desc, sizeof(desc));
        for (int op = 0; op < GV_NOPS; ++op) {
            if (!gv_check(&c, (gv_op_t)op, cuda_impl, &ctx, &rng, why, sizeof(why), NULL) &&
                failures[op]++ == 0) {
                snprintf(first_fail[op], sizeof(first_fail[op]), "case %d (%s): %s", n, desc, why);
            }
        }
        gv_case_free(&c);
    }
    for (int op = 0; op < GV_NOPS; ++op) {
        if (!tap_ok(failures[op] == 0, "%s: CUDA kernel equals pack.c bit for bit on %d random "
                                       "views",
                    gv_op_name((gv_op_t)op), cases)) {
            tap_diag("%d failures; first: %s", failures[op], first_fail[op]);
        }
    }
    cudaStreamDestroy(ctx.stream);
    return tap_done();
}
