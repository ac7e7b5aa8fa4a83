/*
 * Host side of the CUDA pack maps (pack_map.h): the per-level tables, the
 * launch arguments of each op, the vector width, and a host emulation of
 * the kernels that the tests compare with pack.c. Pure C: no CUDA needed.
 */
#include "attn_sp/pack_map.h"
#include "attn_sp/replica_sum.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(size_t) == sizeof(uint64_t),
               "counts and displacements are passed to the kernels as uint64_t");

nsp_status_t nsp_pk_tables_build(const nsp_level_view_t *v, nsp_pk_tables_t *t)
{
    int     d = v != NULL ? v->degree : 0, n = v != NULL ? v->nseqs : 0;
    size_t  words;
    int64_t *seq_len, *seq_off, *cum;

    if (v == NULL || t == NULL || d < 1 || n < 0 || v->index < 0 || v->index >= d ||
        (n > 0 && v->seq_len == NULL)) {
        return nsp_error(NSP_ERR_INVALID_ARG, "pack tables: invalid level view (degree %d, "
                         "index %d, %d sequences)", d, v != NULL ? v->index : -1, n);
    }
    words = (size_t)n + (size_t)(n + 1) + (size_t)d * (size_t)(n + 1);
    memset(t, 0, sizeof(*t));
    t->data = calloc(words, sizeof(int64_t));
    if (t->data == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "pack tables: no memory for %zu words (degree %d, "
                         "%d sequences)", words, d, n);
    }
    seq_len = t->data;
    seq_off = seq_len + n;
    cum     = seq_off + n + 1;
    for (int j = 0; j < n; ++j) {
        if (v->seq_len[j] < 0) {
            free(t->data);
            t->data = NULL;
            return nsp_error(NSP_ERR_INVALID_ARG, "pack tables: sequence %d has length %lld",
                             j, (long long)v->seq_len[j]);
        }
        seq_len[j]     = v->seq_len[j];
        seq_off[j + 1] = seq_off[j] + v->seq_len[j];
    }
    for (int q = 0; q < d; ++q) {
        int64_t *c = cum + (size_t)q * (size_t)(n + 1);
        for (int j = 0; j < n; ++j) {
            int64_t start, len;
            nsp_chunk_of(v->seq_len[j], d, q, &start, &len);
            c[j + 1] = c[j] + len;
        }
    }
    t->words      = words;
    t->lv.degree  = d;
    t->lv.index   = v->index;
    t->lv.nseqs   = n;
    t->lv.seq_len = seq_len;
    t->lv.seq_off = seq_off;
    t->lv.cum     = cum;
    t->total      = seq_off[n];
    t->mine       = cum[(size_t)v->index * (size_t)(n + 1) + (size_t)n];
    return NSP_OK;
}

void nsp_pk_tables_free(nsp_pk_tables_t *t)
{
    if (t != NULL) {
        free(t->data);
        t->data = NULL;
    }
}

const char *nsp_pk_op_name(nsp_pk_op_t op)
{
    static const char *const names[NSP_PK_NOPS] = {
        "s2h pack", "h2s unpack", "h2s unpack (replicated heads)", "h2s unpack (sum of replicas)",
        "s2h unpack", "h2s pack", "s2h self copy", "h2s self copy", "h2s self add",
    };

    return (unsigned)op < NSP_PK_NOPS ? names[op] : "?";
}

static int pk_op_sums(nsp_pk_op_t op)
{
    return op == NSP_PK_H2S_UNPACK_SUM || op == NSP_PK_H2S_SELF_ADD;
}

nsp_status_t nsp_pk_args_make(const nsp_pk_tables_t *t, const nsp_pk_level_t *lv,
                              nsp_pk_op_t op, nsp_a2a_replicas_t mode, int heads,
                              size_t row_bytes, const uint64_t *counts, const uint64_t *displs,
                              const void *src, void *dst, nsp_pk_args_t *a)
{
    int first, share, replicas;

    if (t == NULL || lv == NULL || a == NULL || (unsigned)op >= NSP_PK_NOPS || row_bytes == 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "pack args: invalid op %d or row of %zu bytes",
                         (int)op, row_bytes);
    }
    NSP_CHECK(nsp_head_share(heads, t->lv.degree, t->lv.index, &first, &share, &replicas));
    if (pk_op_sums(op)) {
        if (!nsp_rs_sums((int32_t)mode)) {
            return nsp_error(NSP_ERR_INVALID_ARG, "%s: replica mode %d does not sum",
                             nsp_pk_op_name(op), (int)mode);
        }
        NSP_CHECK(nsp_pack_check_sum_rows(mode, row_bytes));
    }
    memset(a, 0, sizeof(*a));
    a->lv        = *lv;
    a->op        = (int32_t)op;
    a->heads     = heads;
    a->replicas  = replicas;
    a->share     = share;
    a->row_bytes = row_bytes;
    a->counts    = counts;
    a->displs    = displs;
    a->src       = src;
    a->dst       = dst;
    a->sum_dtype = nsp_rs_dtype((int32_t)mode);
    switch (op) {
    case NSP_PK_S2H_PACK:
    case NSP_PK_H2S_UNPACK:
        a->units      = (uint64_t)t->mine * (uint64_t)t->lv.degree;
        a->unit_bytes = (uint64_t)share * row_bytes;
        break;
    case NSP_PK_H2S_UNPACK_REPL:
    case NSP_PK_H2S_UNPACK_SUM:
        a->units      = (uint64_t)t->mine * (uint64_t)heads;
        a->unit_bytes = row_bytes;
        break;
    case NSP_PK_S2H_UNPACK:
    case NSP_PK_H2S_PACK:
        a->units      = (uint64_t)t->total;
        a->unit_bytes = (uint64_t)share * row_bytes;
        break;
    default: /* the self ops */
        a->units      = (uint64_t)t->mine;
        a->unit_bytes = (uint64_t)share * row_bytes;
        break;
    }
    return NSP_OK;
}

size_t nsp_pk_vector_bytes(const nsp_pk_args_t *a, const uint64_t *host_displs, int n)
{
    uint64_t bits = a->row_bytes | (uint64_t)(uintptr_t)a->src | (uint64_t)(uintptr_t)a->dst;
    size_t   w;

    for (int j = 0; host_displs != NULL && j < n; ++j) {
        bits |= host_displs[j];
    }
    for (w = 16; w > 1 && (bits & (w - 1)) != 0; w /= 2) {
    }
    return w;
}

/* One row of H2S_UNPACK_SUM, as the kernel computes it: the first replica
 * copied, the others added in ascending order, each sum rounded to the sum
 * type (replica_sum.h; summed in place in dst, which never overlaps src). */
static void pk_emulate_sum_unit(const nsp_pk_args_t *a, uint64_t u)
{
    uint64_t so, dof = 0;

    for (uint32_t k = 0; k < (uint32_t)a->replicas; ++k) {
        if (!nsp_pk_sum_row(a, u, k, &so, &dof)) {
            continue;
        }
        if (k == 0) {
            memcpy(a->dst + dof, a->src + so, a->row_bytes);
        } else {
            nsp_rs_add_bytes(a->sum_dtype, a->dst + dof, a->src + so, a->row_bytes);
        }
    }
}

void nsp_pk_emulate(const nsp_pk_args_t *a)
{
    for (uint64_t u = 0; u < a->units; ++u) {
        uint64_t so, dof;
        if (a->op == NSP_PK_H2S_UNPACK_SUM) {
            pk_emulate_sum_unit(a, u);
        } else if (nsp_pk_unit(a, u, &so, &dof)) {
            if (a->op == NSP_PK_H2S_SELF_ADD) {
                nsp_rs_add_bytes(a->sum_dtype, a->dst + dof, a->src + so, a->unit_bytes);
            } else {
                memcpy(a->dst + dof, a->src + so, a->unit_bytes);
            }
        }
    }
}

nsp_status_t nsp_pk_op_unpack_h2s(const nsp_pk_tables_t *t, int heads,
                                  nsp_a2a_replicas_t replicas, nsp_pk_op_t *op)
{
    int first, share, r;

    NSP_CHECK(nsp_head_share(heads, t->lv.degree, t->lv.index, &first, &share, &r));
    if (r == 1) {
        *op = NSP_PK_H2S_UNPACK;
    } else {
        *op = nsp_rs_sums((int32_t)replicas) ? NSP_PK_H2S_UNPACK_SUM : NSP_PK_H2S_UNPACK_REPL;
    }
    return NSP_OK;
}

nsp_status_t nsp_pk_op_copy_self(const nsp_pk_tables_t *t, nsp_a2a_dir_t dir, int heads,
                                 nsp_a2a_replicas_t replicas, nsp_pk_op_t *op)
{
    int first, share, r;

    NSP_CHECK(nsp_head_share(heads, t->lv.degree, t->lv.index, &first, &share, &r));
    if (dir == NSP_A2A_SEQ_TO_HEAD) {
        *op = NSP_PK_S2H_SELF;
    } else if (t->lv.index % r == 0) {
        *op = NSP_PK_H2S_SELF;
    } else {
        *op = nsp_rs_sums((int32_t)replicas) ? NSP_PK_H2S_SELF_ADD : NSP_PK_NOPS;
    }
    return NSP_OK;
}
