/*
 * nsp_a2a_perf: what every method shares: the global tensor the exchanges
 * move, filling a source and checking a result against it, the bytes a
 * layout sends, and errors and memory (perf/a2a_perf.h).
 */
#include "config.h"

#include "a2a_perf.h"

#include "common/log.h"
#include "transport/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NSP_HAVE_MPI
#include <mpi.h>
#endif

void a2a_die(const perf_ctx_t *c, const char *what)
{
    fprintf(stderr, "nsp_a2a_perf: rank %d: %s: %s\n", c ? c->rank : -1, what,
            nsp_last_error());
#ifdef NSP_HAVE_MPI
    if (c != NULL && c->mpi) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
#endif
    /* Leave nothing behind: the tree and the world (its UCX endpoints and
     * shared memory) go before exit. */
    if (c != NULL && c->tree != NULL) {
        nsp_tree_destroy(c->tree);
    }
    if (c != NULL && c->comm != NULL) {
        nsp_comm_destroy(c->comm);
    }
    exit(1);
}

void *a2a_xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);

    if (p == NULL) {
        fprintf(stderr, "nsp_a2a_perf: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

void *a2a_xcalloc(size_t n)
{
    void *p = a2a_xmalloc(n);

    memset(p, 0, n > 0 ? n : 1);
    return p;
}

double a2a_lap(double *t0)
{
    double now = nsp_now_s(), dt = now - *t0;

    *t0 = now;
    return dt;
}

/* The element of the global tensor at (seq, token, head, dim), elem bytes. */
static void tensor_value(int seq, int64_t tok, int head, int dim, size_t elem, void *out)
{
    uint64_t x = ((uint64_t)seq << 40) ^ ((uint64_t)tok << 16) ^ ((uint64_t)head << 8) ^
                 (uint64_t)dim;
    uint32_t v;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    v = (uint32_t)x;
    memcpy(out, &v, elem < 4 ? elem : 4);
    if (elem > 4) {
        memset((char *)out + 4, 0, elem - 4);
    }
}

/* The s2h send counts of level l of `lay` (bytes to each peer of the
 * level, sb[p] for p < lv->degree), its level in *lv. Returns the
 * malloc'ed [4 * nranks] that nsp_pack_counts fills (caller frees). */
size_t *a2a_level_s2h_counts(const perf_ctx_t *c, const nsp_layout_t *lay, int l,
                                nsp_pack_self_t self, nsp_layout_level_t *lv)
{
    size_t           row = (size_t)c->opts.head_dim * c->opts.elem;
    size_t          *sb  = a2a_xmalloc(4 * sizeof(size_t) * (size_t)c->nranks);
    nsp_level_view_t v;

    nsp_layout_level(lay, l, lv);
    nsp_layout_level_view(lay, l, &v);
    PCHECK(c, nsp_pack_counts(&v, NSP_A2A_SEQ_TO_HEAD, c->opts.heads, row,
                              NSP_A2A_REPLICAS_FIRST, self, sb, sb + c->nranks,
                              sb + 2 * c->nranks, sb + 3 * c->nranks),
           "pack counts");
    return sb;
}

/* Bytes this rank sends to other ranks in s2h of `lay` (all levels). */
double a2a_offrank_bytes(const perf_ctx_t *c, const nsp_layout_t *lay)
{
    nsp_layout_info_t info;
    double            total = 0;

    nsp_layout_query(lay, &info);
    for (int l = 1; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        size_t            *sb = a2a_level_s2h_counts(c, lay, l, NSP_PACK_SKIP_SELF, &lv);
        for (int p = 0; p < lv.degree; ++p) {
            total += (double)sb[p];
        }
        free(sb);
    }
    return total;
}

/* Fill the sequence-sharded buffer from the global tensor. */
void a2a_fill_seq(const perf_ctx_t *c, const nsp_layout_t *lay, char *buf)
{
    nsp_layout_info_t info;
    size_t            e = c->opts.elem;
    int64_t           idx = 0;

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_level(lay, l, &lv);
        for (int j = 0; j < lv.nseqs; ++j) {
            for (int64_t t = lv.chunk_start[j]; t < lv.chunk_start[j] + lv.chunk_len[j]; ++t) {
                for (int h = 0; h < c->opts.heads; ++h) {
                    for (int d = 0; d < c->opts.head_dim; ++d) {
                        tensor_value(lv.seqs[j], t, h, d, e, buf + (size_t)(idx++) * e);
                    }
                }
            }
        }
    }
}

/* Elements of the head-sharded buffer that differ from the global tensor. */
double a2a_check_head(const perf_ctx_t *c, const nsp_layout_t *lay, const char *buf)
{
    nsp_layout_info_t info;
    size_t            e = c->opts.elem;
    int64_t           idx = 0;
    double            wrong = 0;
    char              want[8];

    nsp_layout_query(lay, &info);
    for (int l = 0; l < info.nlevels; ++l) {
        nsp_layout_level_t lv;
        nsp_layout_heads_t hs;
        nsp_layout_level(lay, l, &lv);
        nsp_layout_heads(lay, l, c->opts.heads, &hs);
        for (int j = 0; j < lv.nseqs; ++j) {
            for (int64_t t = 0; t < lv.seq_len[j]; ++t) {
                for (int h = hs.first_head; h < hs.first_head + hs.nheads; ++h) {
                    for (int d = 0; d < c->opts.head_dim; ++d) {
                        tensor_value(lv.seqs[j], t, h, d, e, want);
                        wrong += memcmp(want, buf + (size_t)(idx++) * e, e) != 0;
                    }
                }
            }
        }
    }
    return wrong;
}
