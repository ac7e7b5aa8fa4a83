/*
 * Host pack/unpack of one level of the nested all-to-all. Shapes and units
 * are described in pack.h; every copy moves whole head rows (row_bytes =
 * D * elem_size) with memcpy, except the direct copies (the own block,
 * nsp_pack_copy_self, and the mapped path's reads, nsp_pack_copy_peer),
 * which stream around the cache when a rank's output of the level is large
 * (copy_rows.h). The *_sel variants work on a
 * subset of the level's sequences; the plain ones are the subset "all".
 */
#include "attn_sp/pack.h"
#include "attn_sp/copy_rows.h"
#include "attn_sp/replica_sum.h"
#include "common/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int selected(const unsigned char *sel, int j)
{
    return sel == NULL || sel[j] != 0;
}

/* Tokens of index q's chunks of the selected sequences. */
static int64_t level_chunk_tokens(const nsp_level_view_t *v, const unsigned char *sel, int q)
{
    int64_t total = 0, start, len;

    for (int j = 0; j < v->nseqs; ++j) {
        if (selected(sel, j)) {
            nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
            total += len;
        }
    }
    return total;
}

/* Does index p send its heads back in h2s? Only the first replica does with
 * REPLICAS_FIRST; every index does with a summing mode or without
 * replication. */
static int h2s_sends(int p, int replicas, nsp_a2a_replicas_t mode)
{
    return nsp_rs_sums((int32_t)mode) || p % replicas == 0;
}

static void prefix_sums(const size_t *count, size_t *displ, int n)
{
    size_t acc = 0;

    for (int p = 0; p < n; ++p) {
        displ[p] = acc;
        acc += count[p];
    }
}

nsp_status_t nsp_pack_counts_sel(const nsp_level_view_t *v, const unsigned char *sel,
                                 nsp_a2a_dir_t dir, int heads, size_t row_bytes,
                                 nsp_a2a_replicas_t replicas, nsp_pack_self_t self,
                                 size_t *send_bytes, size_t *send_displs, size_t *recv_bytes,
                                 size_t *recv_displs)
{
    int     me = v->index, first, h_me, r_me;
    int64_t mine = level_chunk_tokens(v, sel, me);

    NSP_CHECK(nsp_pack_check_sum_rows(replicas, row_bytes));
    NSP_CHECK(nsp_head_share(heads, v->degree, me, &first, &h_me, &r_me));
    for (int p = 0; p < v->degree; ++p) {
        int     fp, h_p, r_p;
        int64_t theirs = level_chunk_tokens(v, sel, p);
        NSP_CHECK(nsp_head_share(heads, v->degree, p, &fp, &h_p, &r_p));
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            send_bytes[p] = (size_t)mine * (size_t)h_p * row_bytes;
            recv_bytes[p] = (size_t)theirs * (size_t)h_me * row_bytes;
        } else {
            send_bytes[p] = h2s_sends(me, r_me, replicas)
                                ? (size_t)theirs * (size_t)h_me * row_bytes : 0;
            recv_bytes[p] = h2s_sends(p, r_p, replicas)
                                ? (size_t)mine * (size_t)h_p * row_bytes : 0;
        }
    }
    if (self == NSP_PACK_SKIP_SELF) {
        send_bytes[me] = 0;
        recv_bytes[me] = 0;
    }
    prefix_sums(send_bytes, send_displs, v->degree);
    prefix_sums(recv_bytes, recv_displs, v->degree);
    return NSP_OK;
}

nsp_status_t nsp_pack_counts(const nsp_level_view_t *v, nsp_a2a_dir_t dir, int heads,
                             size_t row_bytes, nsp_a2a_replicas_t replicas,
                             nsp_pack_self_t self, size_t *send_bytes, size_t *send_displs,
                             size_t *recv_bytes, size_t *recv_displs)
{
    return nsp_pack_counts_sel(v, NULL, dir, heads, row_bytes, replicas, self, send_bytes,
                               send_displs, recv_bytes, recv_displs);
}

/* Copy `tokens` rows of h heads from a [.., H, D] buffer (starting at head
 * `first`) into a dense [tokens, h, D] buffer, or back (to_dense = 0);
 * `stream` as in nsp_copy_rows(). */
static void copy_strided(char *dense, char *strided, int64_t tokens, int heads, int first,
                         int h, size_t row_bytes, int to_dense, int stream)
{
    size_t dense_stride   = (size_t)h * row_bytes;
    size_t strided_stride = (size_t)heads * row_bytes;
    char  *s              = strided + (size_t)first * row_bytes;

    if (to_dense) {
        nsp_copy_rows(dense, dense_stride, s, strided_stride, dense_stride, (size_t)tokens,
                      stream);
    } else {
        nsp_copy_rows(s, strided_stride, dense, dense_stride, dense_stride, (size_t)tokens,
                      stream);
    }
}

/* What one rank's side of a level writes in all, in bytes: its block
 * [T, h_me, D] (seq->head) or its chunks [L_me, H, D] (head->seq). */
static nsp_status_t level_out_bytes(const nsp_level_view_t *v, nsp_a2a_dir_t dir, int heads,
                                    size_t row_bytes, size_t *bytes)
{
    int     first, h_me, r_me;
    int64_t total = 0;

    if (dir == NSP_A2A_HEAD_TO_SEQ) {
        *bytes = (size_t)level_chunk_tokens(v, NULL, v->index) * (size_t)heads * row_bytes;
        return NSP_OK;
    }
    NSP_CHECK(nsp_head_share(heads, v->degree, v->index, &first, &h_me, &r_me));
    for (int j = 0; j < v->nseqs; ++j) {
        total += v->seq_len[j];
    }
    *bytes = (size_t)total * (size_t)h_me * row_bytes;
    return NSP_OK;
}

nsp_status_t nsp_pack_check_sum_rows(nsp_a2a_replicas_t replicas, size_t row_bytes)
{
    size_t es = nsp_rs_elem_bytes((int32_t)replicas);

    if (es != 0 && row_bytes % es != 0) {
        return nsp_error(NSP_ERR_INVALID_ARG, "summing replicated heads needs rows of whole "
                         "%zu-byte elements; a row of %zu bytes is not", es, row_bytes);
    }
    return NSP_OK;
}

/* Add `tokens` dense rows of h heads into a [.., H, D] buffer of the
 * summing mode's element type. */
static void add_strided(nsp_a2a_replicas_t replicas, const char *dense, char *strided,
                        int64_t tokens, int heads, int first, int h, size_t row_bytes)
{
    size_t  dense_stride   = (size_t)h * row_bytes;
    size_t  strided_stride = (size_t)heads * row_bytes;
    char   *s              = strided + (size_t)first * row_bytes;
    int32_t dtype          = nsp_rs_dtype((int32_t)replicas);

    for (int64_t t = 0; t < tokens; ++t) {
        nsp_rs_add_bytes(dtype, s + (size_t)t * strided_stride, dense + (size_t)t * dense_stride,
                         dense_stride);
    }
}

/* The head share of every index of the group, in one allocation:
 * first[d], count[d], replicas[d]. Free with free(first). */
static nsp_status_t share_table(const nsp_level_view_t *v, int heads, int **first, int **count,
                                int **replicas)
{
    int *t = malloc(sizeof(int) * 3 * (size_t)v->degree);

    if (t == NULL) {
        return nsp_error(NSP_ERR_NO_MEMORY, "pack: cannot allocate a head table of degree %d",
                         v->degree);
    }
    for (int p = 0; p < v->degree; ++p) {
        nsp_status_t st = nsp_head_share(heads, v->degree, p, &t[p], &t[v->degree + p],
                                         &t[2 * v->degree + p]);
        if (st != NSP_OK) {
            free(t);
            return st;
        }
    }
    *first    = t;
    *count    = t + v->degree;
    *replicas = t + 2 * v->degree;
    return NSP_OK;
}

/*
 * The two sides of an exchange against the wire buffers (peer p's bytes at
 * displs[p], bytes[p] of them, none copied when 0). to_wire copies into the
 * wire (pack), else out of it (unpack); the side that is only read is
 * passed without const.
 */

/* The sequence-sharded side: the rank's chunk of every sequence, rows
 * [H, D] per token; on the wire, per selected token, peer p's head slice
 * [count[p], D]. Token by token, peers in ascending index: each chunk row
 * is visited once, and when unpacking the first replica of a head comes
 * before the others, so with a summing mode it copies and the later ones
 * add. */
static nsp_status_t copy_chunk_rows(const nsp_level_view_t *v, const unsigned char *sel,
                                    int heads, size_t row_bytes, int to_wire,
                                    nsp_a2a_replicas_t replicas, char *chunks, char *wire,
                                    const size_t *wire_bytes, const size_t *wire_displs)
{
    int    *first = NULL, *count = NULL, *rep = NULL; /* set by share_table */
    int64_t t = 0, w = 0, start, len; /* chunk token, selected (wire) token */

    NSP_CHECK(share_table(v, heads, &first, &count, &rep));
    for (int j = 0; j < v->nseqs; ++j) {
        nsp_chunk_of(v->seq_len[j], v->degree, v->index, &start, &len);
        if (!selected(sel, j)) {
            t += len;
            continue;
        }
        for (int64_t k = 0; k < len; ++k, ++t, ++w) {
            char *row = chunks + (size_t)t * (size_t)heads * row_bytes;
            for (int p = 0; p < v->degree; ++p) {
                size_t seg = (size_t)count[p] * row_bytes;
                char  *slice, *on_wire;
                if (wire_bytes[p] == 0) {
                    continue;
                }
                slice   = row + (size_t)first[p] * row_bytes;
                on_wire = wire + wire_displs[p] + (size_t)w * seg;
                if (to_wire) {
                    memcpy(on_wire, slice, seg);
                } else if (nsp_rs_sums((int32_t)replicas) && p % rep[p] != 0) {
                    nsp_rs_add_bytes(nsp_rs_dtype((int32_t)replicas), slice, on_wire, seg);
                } else {
                    memcpy(slice, on_wire, seg);
                }
            }
        }
    }
    free(first);
    return NSP_OK;
}

/* The head-sharded side: the block [T, h_me, D] of this rank's heads over
 * all T tokens of the level's sequences; on the wire, per peer q, q's chunk
 * of every selected sequence in order. */
static nsp_status_t copy_block_chunks(const nsp_level_view_t *v, const unsigned char *sel,
                                      int heads, size_t row_bytes, int to_wire, char *block,
                                      char *wire, const size_t *wire_bytes,
                                      const size_t *wire_displs)
{
    int    first, h_me, r_me;
    size_t tok_bytes;

    NSP_CHECK(nsp_head_share(heads, v->degree, v->index, &first, &h_me, &r_me));
    tok_bytes = (size_t)h_me * row_bytes; /* one token of the block [T, h_me, D] */
    for (int q = 0; q < v->degree; ++q) {
        char   *on_wire;
        int64_t seq_off = 0, start, len;
        if (wire_bytes[q] == 0) {
            continue;
        }
        on_wire = wire + wire_displs[q];
        for (int j = 0; j < v->nseqs; ++j) {
            if (selected(sel, j)) {
                char  *in_block;
                size_t n;
                nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
                in_block = block + (size_t)(seq_off + start) * tok_bytes;
                n        = (size_t)len * tok_bytes;
                if (to_wire) {
                    memcpy(on_wire, in_block, n);
                } else {
                    memcpy(in_block, on_wire, n);
                }
                on_wire += n;
            }
            seq_off += v->seq_len[j];
        }
    }
    return NSP_OK;
}

nsp_status_t nsp_pack_s2h_sel(const nsp_level_view_t *v, const unsigned char *sel, int heads,
                              size_t row_bytes, const void *chunks, void *send,
                              const size_t *send_bytes, const size_t *send_displs)
{
    /* to_wire only reads the chunks */
    return copy_chunk_rows(v, sel, heads, row_bytes, 1, NSP_A2A_REPLICAS_FIRST, (char *)chunks,
                           send, send_bytes, send_displs);
}

nsp_status_t nsp_pack_s2h(const nsp_level_view_t *v, int heads, size_t row_bytes,
                          const void *chunks, void *send, const size_t *send_bytes,
                          const size_t *send_displs)
{
    return nsp_pack_s2h_sel(v, NULL, heads, row_bytes, chunks, send, send_bytes, send_displs);
}

nsp_status_t nsp_unpack_s2h_sel(const nsp_level_view_t *v, const unsigned char *sel,
                                int heads, size_t row_bytes, const void *recv,
                                const size_t *recv_bytes, const size_t *recv_displs,
                                void *block)
{
    /* from the wire only reads the received bytes */
    return copy_block_chunks(v, sel, heads, row_bytes, 0, block, (char *)recv, recv_bytes,
                             recv_displs);
}

nsp_status_t nsp_unpack_s2h(const nsp_level_view_t *v, int heads, size_t row_bytes,
                            const void *recv, const size_t *recv_bytes,
                            const size_t *recv_displs, void *block)
{
    return nsp_unpack_s2h_sel(v, NULL, heads, row_bytes, recv, recv_bytes, recv_displs, block);
}

nsp_status_t nsp_pack_h2s_sel(const nsp_level_view_t *v, const unsigned char *sel, int heads,
                              size_t row_bytes, const void *block, void *send,
                              const size_t *send_bytes, const size_t *send_displs)
{
    /* to_wire only reads the block */
    return copy_block_chunks(v, sel, heads, row_bytes, 1, (char *)block, send, send_bytes,
                             send_displs);
}

nsp_status_t nsp_pack_h2s(const nsp_level_view_t *v, int heads, size_t row_bytes,
                          const void *block, void *send, const size_t *send_bytes,
                          const size_t *send_displs)
{
    return nsp_pack_h2s_sel(v, NULL, heads, row_bytes, block, send, send_bytes, send_displs);
}

nsp_status_t nsp_unpack_h2s_sel(const nsp_level_view_t *v, const unsigned char *sel,
                                int heads, size_t row_bytes, nsp_a2a_replicas_t replicas,
                                const void *recv, const size_t *recv_bytes,
                                const size_t *recv_displs, void *chunks)
{
    /* from the wire only reads the received bytes */
    return copy_chunk_rows(v, sel, heads, row_bytes, 0, replicas, chunks, (char *)recv,
                           recv_bytes, recv_displs);
}

nsp_status_t nsp_unpack_h2s(const nsp_level_view_t *v, int heads, size_t row_bytes,
                            nsp_a2a_replicas_t replicas, const void *recv,
                            const size_t *recv_bytes, const size_t *recv_displs, void *chunks)
{
    return nsp_unpack_h2s_sel(v, NULL, heads, row_bytes, replicas, recv, recv_bytes,
                              recv_displs, chunks);
}

nsp_status_t nsp_pack_self_is_first(const nsp_level_view_t *v, int heads, int *is_first)
{
    int first, h, r;

    NSP_CHECK(nsp_head_share(heads, v->degree, v->index, &first, &h, &r));
    *is_first = (v->index % r == 0);
    return NSP_OK;
}

nsp_status_t nsp_pack_copy_self(const nsp_level_view_t *v, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, nsp_a2a_replicas_t replicas,
                                const void *src, void *dst)
{
    int     me = v->index, first, h_me, r_me;
    int     add = 0;
    int     stream;
    int64_t chunk_off = 0, seq_off = 0, start, len;
    size_t  tok_bytes, out_bytes;

    NSP_CHECK(nsp_head_share(heads, v->degree, me, &first, &h_me, &r_me));
    if (dir == NSP_A2A_HEAD_TO_SEQ && me % r_me != 0) {
        if (!nsp_rs_sums((int32_t)replicas)) {
            return NSP_OK; /* the first replica's copy wins */
        }
        add = 1;
    }
    NSP_CHECK(level_out_bytes(v, dir, heads, row_bytes, &out_bytes));
    stream    = nsp_copy_should_stream(out_bytes);
    tok_bytes = (size_t)h_me * row_bytes;
    for (int j = 0; j < v->nseqs; ++j) {
        char *block_rows;
        char *chunk_rows;
        nsp_chunk_of(v->seq_len[j], v->degree, me, &start, &len);
        block_rows = (char *)(dir == NSP_A2A_SEQ_TO_HEAD ? dst : src) +
                     (size_t)(seq_off + start) * tok_bytes;
        chunk_rows = (char *)(dir == NSP_A2A_SEQ_TO_HEAD ? src : dst) +
                     (size_t)chunk_off * (size_t)heads * row_bytes;
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            copy_strided(block_rows, chunk_rows, len, heads, first, h_me, row_bytes, 1, stream);
        } else if (add) {
            add_strided(replicas, block_rows, chunk_rows, len, heads, first, h_me, row_bytes);
        } else {
            copy_strided(block_rows, chunk_rows, len, heads, first, h_me, row_bytes, 0, stream);
        }
        chunk_off += len;
        seq_off   += v->seq_len[j];
    }
    return NSP_OK;
}

nsp_status_t nsp_pack_seq_displs(const nsp_level_view_t *v, int j, int heads, size_t row_bytes,
                                 size_t *displs)
{
    int     first, h_me, r_me;
    int64_t seq_off = 0, start, len;

    NSP_CHECK(nsp_head_share(heads, v->degree, v->index, &first, &h_me, &r_me));
    for (int k = 0; k < j; ++k) {
        seq_off += v->seq_len[k];
    }
    for (int q = 0; q < v->degree; ++q) {
        nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
        displs[q] = (size_t)(seq_off + start) * (size_t)h_me * row_bytes;
    }
    return NSP_OK;
}

nsp_status_t nsp_pack_src_bytes(const nsp_level_view_t *v, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, int q, size_t *bytes)
{
    int     first, h_q, r_q;
    int64_t total = 0;

    NSP_CHECK(nsp_head_share(heads, v->degree, q, &first, &h_q, &r_q));
    if (dir == NSP_A2A_SEQ_TO_HEAD) {
        *bytes = (size_t)level_chunk_tokens(v, NULL, q) * (size_t)heads * row_bytes;
        return NSP_OK;
    }
    for (int j = 0; j < v->nseqs; ++j) {
        total += v->seq_len[j];
    }
    *bytes = (size_t)total * (size_t)h_q * row_bytes;
    return NSP_OK;
}

nsp_status_t nsp_pack_copy_peer(const nsp_level_view_t *v, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, int q, const void *peer_src, void *dst)
{
    int     me = v->index, first_me, h_me, r_me, first_q, h_q, r_q, stream;
    int64_t chunk_off = 0, seq_off = 0, start, len;
    size_t  out_bytes;

    NSP_CHECK(nsp_head_share(heads, v->degree, me, &first_me, &h_me, &r_me));
    NSP_CHECK(nsp_head_share(heads, v->degree, q, &first_q, &h_q, &r_q));
    if (dir == NSP_A2A_HEAD_TO_SEQ && q % r_q != 0) {
        return NSP_OK; /* the first replica of q's heads sends them */
    }
    /* the rule looks at the rank's whole output of the level, not this
     * peer's share of it: that is what competes for the cache */
    NSP_CHECK(level_out_bytes(v, dir, heads, row_bytes, &out_bytes));
    stream = nsp_copy_should_stream(out_bytes);
    for (int j = 0; j < v->nseqs; ++j) {
        if (dir == NSP_A2A_SEQ_TO_HEAD) {
            /* q's chunk of sequence j: rows [chunk_off, +len) of q's [L_q, H, D]
             * -> my block [T, h_me, D] at token seq_off + start */
            nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
            copy_strided((char *)dst + (size_t)(seq_off + start) * (size_t)h_me * row_bytes,
                         (char *)(uintptr_t)peer_src +
                             (size_t)chunk_off * (size_t)heads * row_bytes,
                         len, heads, first_me, h_me, row_bytes, 1, stream);
        } else {
            /* my chunk of sequence j: q's block [T, h_q, D] at token
             * seq_off + start -> rows [chunk_off, +len) of my [L_me, H, D] */
            nsp_chunk_of(v->seq_len[j], v->degree, me, &start, &len);
            copy_strided((char *)(uintptr_t)peer_src +
                             (size_t)(seq_off + start) * (size_t)h_q * row_bytes,
                         (char *)dst + (size_t)chunk_off * (size_t)heads * row_bytes, len,
                         heads, first_q, h_q, row_bytes, 0, stream);
        }
        chunk_off += len;
        seq_off   += v->seq_len[j];
    }
    return NSP_OK;
}

/* ---- runs (pack.h): the wire streams as runs of the buffers ---------------- */

size_t nsp_pack_runs_max(const nsp_level_view_t *v)
{
    return ((size_t)level_chunk_tokens(v, NULL, v->index) + (size_t)v->nseqs) *
           (size_t)v->degree;
}

/* Append [off, off + len) to runs[*n], merged with the last run if adjacent. */
static void run_add(nsp_pack_run_t *runs, size_t *n, size_t first, size_t off, size_t len)
{
    if (*n > first && runs[*n - 1].off + runs[*n - 1].len == off) {
        runs[*n - 1].len += len;
        return;
    }
    runs[*n].off = off;
    runs[*n].len = len;
    ++*n;
}

nsp_status_t nsp_pack_runs_chunks(const nsp_level_view_t *v, const unsigned char *sel,
                                  int heads, size_t row_bytes, const size_t *bytes,
                                  nsp_pack_run_t *runs, size_t *first)
{
    int   *hfirst = NULL, *count = NULL, *rep = NULL; /* set by share_table */
    size_t n      = 0;
    size_t tok    = (size_t)heads * row_bytes; /* one token of [L, H, D] */

    NSP_CHECK(share_table(v, heads, &hfirst, &count, &rep));
    for (int p = 0; p < v->degree; ++p) {
        int64_t t = 0, start, len;
        first[p] = n;
        for (int j = 0; j < v->nseqs && bytes[p] > 0; ++j) {
            nsp_chunk_of(v->seq_len[j], v->degree, v->index, &start, &len);
            for (int64_t k = 0; k < len && selected(sel, j); ++k) {
                run_add(runs, &n, first[p], (size_t)(t + k) * tok + (size_t)hfirst[p] * row_bytes,
                        (size_t)count[p] * row_bytes);
            }
            t += len;
        }
    }
    first[v->degree] = n;
    free(hfirst);
    return NSP_OK;
}

nsp_status_t nsp_pack_runs_block(const nsp_level_view_t *v, const unsigned char *sel,
                                 int heads, size_t row_bytes, const size_t *bytes,
                                 nsp_pack_run_t *runs, size_t *first)
{
    int    hfirst, h_me, r_me;
    size_t n = 0, tok;

    NSP_CHECK(nsp_head_share(heads, v->degree, v->index, &hfirst, &h_me, &r_me));
    tok = (size_t)h_me * row_bytes; /* one token of the block [T, h_me, D] */
    for (int q = 0; q < v->degree; ++q) {
        int64_t seq_off = 0, start, len;
        first[q] = n;
        for (int j = 0; j < v->nseqs && bytes[q] > 0; ++j) {
            nsp_chunk_of(v->seq_len[j], v->degree, q, &start, &len);
            if (selected(sel, j) && len > 0) {
                run_add(runs, &n, first[q], (size_t)(seq_off + start) * tok, (size_t)len * tok);
            }
            seq_off += v->seq_len[j];
        }
    }
    first[v->degree] = n;
    return NSP_OK;
}

size_t nsp_pack_run_min(const nsp_level_view_t *v, int heads, size_t row_bytes)
{
    int first, count, replicas;

    if (nsp_head_share(heads, v->degree, v->index, &first, &count, &replicas) != NSP_OK) {
        return 0;
    }
    return (size_t)count * row_bytes; /* every index holds as many heads */
}
