/* Random level views and the host-vs-candidate pack checker (gpu_views.h). */
#include "gpu_views.h"

#include "attn_sp/attn_reduce_map.h"
#include "attn_sp/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t gv_rand(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static int gv_pick(uint64_t *rng, int n)
{
    return (int)(gv_rand(rng) % (uint64_t)n);
}

const char *gv_op_name(gv_op_t op)
{
    static const char *const names[GV_NOPS] = {"pack s2h", "unpack s2h", "pack h2s",
                                               "unpack h2s", "copy self s2h", "copy self h2s"};

    return (unsigned)op < GV_NOPS ? names[op] : "?";
}

int gv_case_random(gv_case_t *c, uint64_t *rng, int max_degree, int max_seqs, int64_t max_len,
                   const int *dims, int ndims)
{
    static const int degrees[] = {1, 2, 3, 4, 6, 8, 16, 32, 64};
    static const int small_dims[] = {1, 3, 8, 16, 64};
    int              d, nd = 0;

    memset(c, 0, sizeof(*c));
    while (nd < (int)(sizeof(degrees) / sizeof(degrees[0])) && degrees[nd] <= max_degree) {
        ++nd;
    }
    d = degrees[gv_pick(rng, nd > 0 ? nd : 1)];
    /* Heads: a multiple of d (H/d each), or a divisor of d (replicated). */
    if (gv_pick(rng, 3) != 0) {
        c->heads = d * (1 << gv_pick(rng, 3));
    } else {
        int divs[64], n = 0;
        for (int h = 1; h <= d; ++h) {
            if (d % h == 0) {
                divs[n++] = h;
            }
        }
        c->heads = divs[gv_pick(rng, n)];
    }
    c->view.degree = d;
    c->view.index  = gv_pick(rng, d);
    c->view.nseqs  = gv_pick(rng, max_seqs + 1);
    c->lens        = calloc((size_t)c->view.nseqs + 1, sizeof(int64_t));
    if (c->lens == NULL) {
        return -1;
    }
    for (int j = 0; j < c->view.nseqs; ++j) {
        int64_t len;
        switch (gv_pick(rng, 4)) {
        case 0: /* shorter than the degree: some chunks empty */
            len = 1 + gv_pick(rng, d);
            break;
        case 1: /* long tail */
            len = 1 + (int64_t)(gv_rand(rng) % (uint64_t)max_len);
            break;
        default:
            len = 1 + (int64_t)(gv_rand(rng) % (uint64_t)(4 * d + 8));
            break;
        }
        c->lens[j] = len;
    }
    c->view.seq_len = c->lens;
    c->head_dim     = dims != NULL && ndims > 0 ? dims[gv_pick(rng, ndims)]
                                                : small_dims[gv_pick(rng, 5)];
    c->elem         = gv_pick(rng, 2) ? 4 : 2;
    c->replicas     = NSP_A2A_REPLICAS_FIRST;
    if (gv_pick(rng, 2)) { /* a summing mode of the element's size */
        c->replicas = c->elem == 4 ? NSP_A2A_REPLICAS_SUM_F32
                      : gv_pick(rng, 2) ? NSP_A2A_REPLICAS_SUM_BF16 : NSP_A2A_REPLICAS_SUM_FP16;
    }
    c->self         = gv_pick(rng, 2) ? NSP_PACK_SKIP_SELF : NSP_PACK_WITH_SELF;
    c->misalign     = gv_pick(rng, 4) == 0;
    return 0;
}

void gv_case_free(gv_case_t *c)
{
    free(c->lens);
    c->lens = NULL;
}

void gv_case_describe(const gv_case_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "d=%d i=%d seqs=%d H=%d D=%d elem=%zu %s %s%s", c->view.degree,
             c->view.index, c->view.nseqs, c->heads, c->head_dim, c->elem,
             c->replicas == NSP_A2A_REPLICAS_SUM_F32    ? "SUM_F32"
             : c->replicas == NSP_A2A_REPLICAS_SUM_BF16 ? "SUM_BF16"
             : c->replicas == NSP_A2A_REPLICAS_SUM_FP16 ? "SUM_FP16"
                                                        : "FIRST",
             c->self == NSP_PACK_SKIP_SELF ? "skip-self" : "with-self",
             c->misalign ? " misaligned" : "");
}

/* Tokens of index q's chunks. */
static int64_t gv_tokens_of(const nsp_level_view_t *v, int q)
{
    int64_t total = 0, start, len;

    for (int j = 0; j < v->nseqs; ++j) {
        nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
        total += len;
    }
    return total;
}

/* Random bytes, or with a summing mode numbers in [-1, 1) of its element
 * type (so that sums are of numbers, and round). */
static void gv_fill(uint64_t *rng, char *buf, size_t bytes, nsp_a2a_replicas_t sums)
{
    if (sums != NSP_A2A_REPLICAS_FIRST) {
        size_t es = sums == NSP_A2A_REPLICAS_SUM_F32 ? 4 : 2;
        for (size_t k = 0; k + es <= bytes; k += es) {
            float    f = (float)((double)(gv_rand(rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            uint16_t h = sums == NSP_A2A_REPLICAS_SUM_BF16 ? nsp_rd_float_to_bf16(f)
                                                           : nsp_rd_float_to_half(f);
            memcpy(buf + k, es == 4 ? (const void *)&f : (const void *)&h, es);
        }
        return;
    }
    for (size_t k = 0; k < bytes; ++k) {
        buf[k] = (char)(gv_rand(rng) >> 56);
    }
}

/* The host reference of `op`. */
static nsp_status_t gv_reference(const gv_case_t *c, gv_op_t op, const size_t *counts,
                                 const size_t *displs, const void *src, void *dst)
{
    size_t rb = (size_t)c->head_dim * c->elem;

    switch (op) {
    case GV_PACK_S2H:
        return nsp_pack_s2h(&c->view, c->heads, rb, src, dst, counts, displs);
    case GV_UNPACK_S2H:
        return nsp_unpack_s2h(&c->view, c->heads, rb, src, counts, displs, dst);
    case GV_PACK_H2S:
        return nsp_pack_h2s(&c->view, c->heads, rb, src, dst, counts, displs);
    case GV_UNPACK_H2S:
        return nsp_unpack_h2s(&c->view, c->heads, rb, c->replicas, src, counts, displs, dst);
    case GV_SELF_S2H:
        return nsp_pack_copy_self(&c->view, NSP_A2A_SEQ_TO_HEAD, c->heads, rb, c->replicas, src,
                                  dst);
    case GV_SELF_H2S:
        return nsp_pack_copy_self(&c->view, NSP_A2A_HEAD_TO_SEQ, c->heads, rb, c->replicas, src,
                                  dst);
    default:
        return NSP_ERR_INVALID_ARG;
    }
}

int gv_check(const gv_case_t *c, gv_op_t op, gv_impl_fn impl, void *ctx, uint64_t *rng,
             char *why, size_t why_len, size_t *bytes_moved)
{
    const nsp_level_view_t *v  = &c->view;
    size_t                  rb = (size_t)c->head_dim * c->elem;
    int                     first, h_me, r_me, ok = 0;
    size_t                  d = (size_t)v->degree, src_bytes, dst_bytes, sum_send = 0,
           sum_recv = 0;
    int64_t                 L = gv_tokens_of(v, v->index), T = 0;
    size_t                 *sb, *sd, *rbv, *rd;
    const size_t           *counts = NULL, *displs = NULL;
    char                   *src_mem = NULL, *ref_mem = NULL, *cand_mem = NULL;
    char                   *src, *ref, *cand;
    size_t                  off = c->misalign ? c->elem : 0;
    nsp_a2a_dir_t           dir = (op == GV_PACK_S2H || op == GV_UNPACK_S2H || op == GV_SELF_S2H)
                                      ? NSP_A2A_SEQ_TO_HEAD : NSP_A2A_HEAD_TO_SEQ;
    nsp_status_t            st;

    why[0] = '\0';
    for (int j = 0; j < v->nseqs; ++j) {
        T += v->seq_len[j];
    }
    sb = calloc(4 * d, sizeof(size_t));
    if (sb == NULL) {
        snprintf(why, why_len, "out of memory");
        return 0;
    }
    sd  = sb + d;
    rbv = sd + d;
    rd  = rbv + d;
    if (nsp_head_share(c->heads, v->degree, v->index, &first, &h_me, &r_me) != NSP_OK ||
        nsp_pack_counts(v, dir, c->heads, rb, c->replicas, c->self, sb, sd, rbv, rd) != NSP_OK) {
        snprintf(why, why_len, "the case is invalid for the host pack: %s", nsp_last_error());
        goto out;
    }
    for (size_t p = 0; p < d; ++p) {
        sum_send += sb[p];
        sum_recv += rbv[p];
    }
    switch (op) {
    case GV_PACK_S2H:
    case GV_PACK_H2S:
        counts = sb, displs = sd;
        break;
    case GV_UNPACK_S2H:
    case GV_UNPACK_H2S:
        counts = rbv, displs = rd;
        break;
    default:
        break;
    }
    {
        size_t chunks = (size_t)L * (size_t)c->heads * rb;
        size_t block  = (size_t)T * (size_t)h_me * rb;
        size_t sizes[GV_NOPS][2] = {
            {chunks, sum_send}, {sum_recv, block}, {block, sum_send},
            {sum_recv, chunks}, {chunks, block},   {block, chunks},
        };
        src_bytes = sizes[op][0];
        dst_bytes = sizes[op][1];
    }
    src_mem  = malloc(src_bytes + 32);
    ref_mem  = malloc(dst_bytes + 32);
    cand_mem = malloc(dst_bytes + 32);
    if (src_mem == NULL || ref_mem == NULL || cand_mem == NULL) {
        snprintf(why, why_len, "out of memory for %zu + %zu bytes", src_bytes, dst_bytes);
        goto out;
    }
    /* malloc gives 16-byte alignment; off moves the start past it. */
    src  = src_mem + off;
    ref  = ref_mem + off;
    cand = cand_mem + off;
    gv_fill(rng, src, src_bytes, c->replicas);
    gv_fill(rng, ref, dst_bytes, c->replicas);
    memcpy(cand, ref, dst_bytes);
    st = gv_reference(c, op, counts, displs, src, ref);
    if (st != NSP_OK) {
        snprintf(why, why_len, "host reference failed: %s", nsp_last_error());
        goto out;
    }
    st = impl(ctx, c, op, counts, displs, src, src_bytes, cand, dst_bytes);
    if (st != NSP_OK) {
        snprintf(why, why_len, "candidate failed: %s: %s", nsp_status_string(st),
                 nsp_last_error());
        goto out;
    }
    for (size_t k = 0; k < dst_bytes; ++k) {
        if (ref[k] != cand[k]) {
            snprintf(why, why_len, "byte %zu of %zu differs (host 0x%02x, candidate 0x%02x)", k,
                     dst_bytes, (unsigned char)ref[k], (unsigned char)cand[k]);
            goto out;
        }
    }
    if (bytes_moved != NULL) {
        *bytes_moved = dst_bytes;
    }
    ok = 1;
out:
    free(src_mem);
    free(ref_mem);
    free(cand_mem);
    free(sb);
    return ok;
}
