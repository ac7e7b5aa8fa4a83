/*
 * The index maps of the CUDA pack/unpack kernels, on the CPU (no GPU
 * needed): the host emulation of every kernel (pack_map.h, the same unit
 * maps the GPU runs) against the host pack.c, byte for byte, over many
 * random level views; the two token maps invert each other; the vector
 * width is the largest that keeps every access aligned.
 */
#include "attn_sp/pack_map.h"
#include "common/log.h"

#include "../tap.h"
#include "gpu_views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nsp_pk_op_t pk_op_of(const nsp_pk_tables_t *t, const gv_case_t *c, gv_op_t op)
{
    nsp_pk_op_t pk = NSP_PK_NOPS;

    switch (op) {
    case GV_PACK_S2H:
        return NSP_PK_S2H_PACK;
    case GV_UNPACK_S2H:
        return NSP_PK_S2H_UNPACK;
    case GV_PACK_H2S:
        return NSP_PK_H2S_PACK;
    case GV_UNPACK_H2S:
        nsp_pk_op_unpack_h2s(t, c->heads, c->replicas, &pk);
        return pk;
    case GV_SELF_S2H:
        nsp_pk_op_copy_self(t, NSP_A2A_SEQ_TO_HEAD, c->heads, c->replicas, &pk);
        return pk;
    default:
        nsp_pk_op_copy_self(t, NSP_A2A_HEAD_TO_SEQ, c->heads, c->replicas, &pk);
        return pk;
    }
}

/* The candidate: the kernels' unit maps run on the host. */
static nsp_status_t emulate_impl(void *ctx, const gv_case_t *c, gv_op_t op,
                                 const size_t *counts, const size_t *displs, const void *src,
                                 size_t src_bytes, void *dst, size_t dst_bytes)
{
    nsp_pk_tables_t t;
    nsp_pk_args_t   a;
    nsp_pk_op_t     pk;
    nsp_status_t    st;

    (void)ctx;
    (void)src_bytes;
    (void)dst_bytes;
    NSP_CHECK(nsp_pk_tables_build(&c->view, &t));
    pk = pk_op_of(&t, c, op);
    st = NSP_OK;
    if (pk != NSP_PK_NOPS) {
        st = nsp_pk_args_make(&t, &t.lv, pk, c->replicas, c->heads, (size_t)c->head_dim * c->elem,
                              (const uint64_t *)counts, (const uint64_t *)displs, src, dst, &a);
        if (st == NSP_OK) {
            nsp_pk_emulate(&a);
        }
    }
    nsp_pk_tables_free(&t);
    return st;
}

/* block_token(chunk_token(q, t)) == (q, t) for every index and token. */
static int check_inverse(const gv_case_t *c, char *why, size_t len)
{
    nsp_pk_tables_t t;
    int             ok = 1;

    if (nsp_pk_tables_build(&c->view, &t) != NSP_OK) {
        snprintf(why, len, "tables: %s", nsp_last_error());
        return 0;
    }
    for (int q = 0; q < t.lv.degree && ok; ++q) {
        int64_t mine = t.lv.cum[(int64_t)q * (t.lv.nseqs + 1) + t.lv.nseqs];
        for (int64_t k = 0; k < mine && ok; ++k) {
            int32_t qq;
            int64_t kk, tau = nsp_pk_chunk_token(&t.lv, q, k);
            nsp_pk_block_token(&t.lv, tau, &qq, &kk);
            if (qq != q || kk != k || tau < 0 || tau >= t.total) {
                snprintf(why, len, "index %d token %lld -> block token %lld -> (%d, %lld)", q,
                         (long long)k, (long long)tau, qq, (long long)kk);
                ok = 0;
            }
        }
    }
    nsp_pk_tables_free(&t);
    return ok;
}

static void test_vector_bytes(void)
{
    nsp_pk_args_t a;
    uint64_t      displs[3] = {0, 256, 512};

    memset(&a, 0, sizeof(a));
    a.row_bytes = 256;
    a.src       = (const char *)(uintptr_t)0x10000;
    a.dst       = (char *)(uintptr_t)0x20000;
    tap_is_int((int64_t)nsp_pk_vector_bytes(&a, displs, 3), 16, "aligned rows: 16-byte vectors");
    a.row_bytes = 6; /* D = 3 of bf16 */
    tap_is_int((int64_t)nsp_pk_vector_bytes(&a, NULL, 0), 2, "6-byte rows: 2-byte accesses");
    a.row_bytes = 256;
    a.dst       = (char *)(uintptr_t)0x20004;
    tap_is_int((int64_t)nsp_pk_vector_bytes(&a, NULL, 0), 4, "a 4-byte aligned dst: 4 bytes");
    a.dst     = (char *)(uintptr_t)0x20000;
    displs[1] = 8;
    tap_is_int((int64_t)nsp_pk_vector_bytes(&a, displs, 3), 8,
               "a displacement of 8 limits vectors to 8 bytes");
}

int main(void)
{
    uint64_t rng = 0x6a09e667f3bcc908ull;
    int      cases = 400, failures[GV_NOPS] = {0}, inverse_bad = 0;
    char     why[256], desc[160], first_fail[GV_NOPS][448];

    memset(first_fail, 0, sizeof(first_fail));
    test_vector_bytes();
    for (int n = 0; n < cases; ++n) {
        gv_case_t c;
        if (gv_case_random(&c, &rng, 64, 6, 300, NULL, 0) != 0) {
            tap_ok(0, "out of memory drawing case %d", n);
            break;
        }
        gv_case_describe(&c, desc, sizeof(desc));
        for (int op = 0; op < GV_NOPS; ++op) {
            if (!gv_check(&c, (gv_op_t)op, emulate_impl, NULL, &rng, why, sizeof(why), NULL)) {
                if (failures[op]++ == 0) {
                    snprintf(first_fail[op], sizeof(first_fail[op]), "case %d (%s): %s", n, desc,
                             why);
                }
            }
        }
        if (!check_inverse(&c, why, sizeof(why)) && inverse_bad++ == 0) {
            tap_diag("token maps: case %d (%s): %s", n, desc, why);
        }
        gv_case_free(&c);
    }
    for (int op = 0; op < GV_NOPS; ++op) {
        if (!tap_ok(failures[op] == 0, "%s: kernel maps equal pack.c on %d random views",
                    gv_op_name((gv_op_t)op), cases)) {
            tap_diag("%d failures; first: %s", failures[op], first_fail[op]);
        }
    }
    tap_ok(inverse_bad == 0, "chunk token and block token maps invert each other (%d views)",
           cases);
    return tap_done();
}
