/*
 * Host pack/unpack of one level of the nested all-to-all (docs/design.md §6).
 *
 * Units: a "row" is one head vector of D elements, row_bytes = D * elem_size
 * bytes; rows are copied whole, with memcpy, or by the two direct copies
 * (nsp_pack_copy_self, nsp_pack_copy_peer) streamed around the cache once
 * the rank's output of the level reaches nsp_copy_stream_min_bytes()
 * (copy_rows.h; the same bytes either way). Shapes, for one level of degree
 * d seen by index `me` (nsp_level_view_t), H heads, h_p = heads held by
 * index p (nsp_head_share):
 *
 *  chunks   [L, H, D]           this rank's chunks of the level, in sequence
 *                               order (part of the sequence-sharded buffer);
 *                               L = sum_j chunk_len(j, me)
 *  block    [T, h_me, D]        the level's head-sharded block: whole
 *                               sequences in order, T = sum_j seq_len(j)
 *  s2h send to p      [L, h_p, D]                     (my chunks, p's heads)
 *  s2h recv from q    concat_j [chunk_len(j, q), h_me, D]
 *  h2s send to q      concat_j [chunk_len(j, q), h_me, D]  (= s2h recv from q)
 *  h2s recv from p    [L, h_p, D]                     (= s2h send to p)
 *
 * Per-peer blocks sit in one buffer at byte displacements (exclusive prefix
 * sums of the counts, peers in index order). The counts functions are pure
 * functions of (view, heads), so one process can compute every index's.
 */
#ifndef NSP_ATTN_SP_PACK_H_
#define NSP_ATTN_SP_PACK_H_

#include "attn_sp/layout.h"

/** Which peers' blocks an exchange carries. */
typedef enum nsp_pack_self {
    NSP_PACK_WITH_SELF = 0,  /**< the block to/from oneself goes through the buffers */
    NSP_PACK_SKIP_SELF = 1   /**< self block counted 0: nsp_pack_copy_self() moves it */
} nsp_pack_self_t;

/**
 * Byte counts and displacements of a level exchange for index view->index:
 * send_bytes[p], send_displs[p], recv_bytes[p], recv_displs[p] for p in
 * [0, d) (caller-owned arrays of d entries). With NSP_A2A_REPLICAS_FIRST in
 * head-to-sequence, only the first replica of a head sends it (the others'
 * counts are 0). Pure. Errors: NSP_ERR_INVALID_ARG (heads and degree do
 * not divide one another; a summing mode with row_bytes not a whole number
 * of its elements: nsp_pack_check_sum_rows()).
 */
nsp_status_t nsp_pack_counts(const nsp_level_view_t *view, nsp_a2a_dir_t dir, int heads,
                             size_t row_bytes, nsp_a2a_replicas_t replicas,
                             nsp_pack_self_t self, size_t *send_bytes, size_t *send_displs,
                             size_t *recv_bytes, size_t *recv_displs);

/** NSP_OK when rows of `row_bytes` are whole elements of the replica
 *  mode's sum (SUM_F32: 4 bytes, SUM_BF16/SUM_FP16: 2; REPLICAS_FIRST: any).
 *  Pure. Errors: NSP_ERR_INVALID_ARG (with the sizes). */
nsp_status_t nsp_pack_check_sum_rows(nsp_a2a_replicas_t replicas, size_t row_bytes);

/** Sequence-to-head: pack `chunks` [L, H, D] into the send buffer (blocks of
 *  peers with a non-zero count). */
nsp_status_t nsp_pack_s2h(const nsp_level_view_t *view, int heads, size_t row_bytes,
                          const void *chunks, void *send, const size_t *send_bytes,
                          const size_t *send_displs);

/** Sequence-to-head: unpack the received blocks into `block` [T, h_me, D]. */
nsp_status_t nsp_unpack_s2h(const nsp_level_view_t *view, int heads, size_t row_bytes,
                            const void *recv, const size_t *recv_bytes,
                            const size_t *recv_displs, void *block);

/** Head-to-sequence: pack `block` [T, h_me, D] into the send buffer. */
nsp_status_t nsp_pack_h2s(const nsp_level_view_t *view, int heads, size_t row_bytes,
                          const void *block, void *send, const size_t *send_bytes,
                          const size_t *send_displs);

/** Head-to-sequence: unpack the received blocks into `chunks` [L, H, D]
 *  (a summing mode: the first replica's block is copied, the others added
 *  in ascending index, replica_sum.h). */
nsp_status_t nsp_unpack_h2s(const nsp_level_view_t *view, int heads, size_t row_bytes,
                            nsp_a2a_replicas_t replicas, const void *recv,
                            const size_t *recv_bytes, const size_t *recv_displs,
                            void *chunks);

/**
 * The self block with one copy and no buffer (use with NSP_PACK_SKIP_SELF):
 * s2h copies my heads of my chunks from `src` = chunks into `dst` = block;
 * h2s the inverse, from `src` = block into `dst` = chunks. For h2s of a
 * replicated head: with REPLICAS_FIRST only the first replica copies (the
 * others do nothing); with a summing mode the first replica copies and the others
 * add, so call it before nsp_unpack_h2s() on the first replica and after it
 * on the others (nsp_pack_self_is_first()).
 */
nsp_status_t nsp_pack_copy_self(const nsp_level_view_t *view, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, nsp_a2a_replicas_t replicas,
                                const void *src, void *dst);

/** Is this index the first replica of its heads (always true without
 *  replication)? Errors: as nsp_head_share(). */
nsp_status_t nsp_pack_self_is_first(const nsp_level_view_t *view, int heads, int *first);

/*
 * Mapped sources (nsp_mem_alloc): a rank reads each peer's level source
 * directly and copies its own share out of it, one copy per byte.
 */

/** Bytes of index q's source of the level: s2h its chunks [L_q, H, D], h2s
 *  its block [T, h_q, D]. Pure. Errors: as nsp_head_share(). */
nsp_status_t nsp_pack_src_bytes(const nsp_level_view_t *view, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, int q, size_t *bytes);

/**
 * Copy this index's share of index q's level source `peer_src` into `dst`:
 * s2h: from q's chunks [L_q, H, D] the rows of my heads (strided) into my
 * block [T, h_me, D] where q's chunks sit; h2s: from q's block [T, h_q, D]
 * the rows of my chunks into my chunks [L_me, H, D] at q's heads, only when
 * q is the first replica of its heads (REPLICAS_FIRST; others copy nothing).
 * q == view->index is nsp_pack_copy_self(). Pure. Errors: as
 * nsp_head_share().
 */
nsp_status_t nsp_pack_copy_peer(const nsp_level_view_t *view, nsp_a2a_dir_t dir, int heads,
                                size_t row_bytes, int q, const void *peer_src, void *dst);

/**
 * Can the level exchange skip a copy? With at most one sequence, the s2h
 * received blocks are exactly `block` (receive in place, no unpack) and the
 * h2s send blocks are exactly `block` (send in place, no pack).
 */
static inline int nsp_pack_block_is_contiguous(const nsp_level_view_t *view)
{
    return view->nseqs <= 1;
}

/*
 * Subsets. The *_sel variants act on the sequences j with sel[j] != 0 only
 * (sel: [nseqs] flags, borrowed; NULL = all, which is what the plain
 * functions above do): counts, blocks and displacements are those of an
 * exchange carrying only those sequences, and unpack writes only their
 * places. The nested all-to-all splits a level into parts this way.
 */
nsp_status_t nsp_pack_counts_sel(const nsp_level_view_t *view, const unsigned char *sel,
                                 nsp_a2a_dir_t dir, int heads, size_t row_bytes,
                                 nsp_a2a_replicas_t replicas, nsp_pack_self_t self,
                                 size_t *send_bytes, size_t *send_displs, size_t *recv_bytes,
                                 size_t *recv_displs);
nsp_status_t nsp_pack_s2h_sel(const nsp_level_view_t *view, const unsigned char *sel,
                              int heads, size_t row_bytes, const void *chunks, void *send,
                              const size_t *send_bytes, const size_t *send_displs);
nsp_status_t nsp_unpack_s2h_sel(const nsp_level_view_t *view, const unsigned char *sel,
                                int heads, size_t row_bytes, const void *recv,
                                const size_t *recv_bytes, const size_t *recv_displs,
                                void *block);
nsp_status_t nsp_pack_h2s_sel(const nsp_level_view_t *view, const unsigned char *sel,
                              int heads, size_t row_bytes, const void *block, void *send,
                              const size_t *send_bytes, const size_t *send_displs);
nsp_status_t nsp_unpack_h2s_sel(const nsp_level_view_t *view, const unsigned char *sel,
                                int heads, size_t row_bytes, nsp_a2a_replicas_t replicas,
                                const void *recv, const size_t *recv_bytes,
                                const size_t *recv_displs, void *chunks);

/**
 * In-place displacements of sequence j alone: displs[q] = byte offset in the
 * level's block [T, h_me, D] where index q's chunk of sequence j sits. An
 * exchange of sequence j alone (sel = {j}) receives (s2h) or sends (h2s)
 * there directly, with no unpack (s2h) or pack (h2s): its blocks are exactly
 * those places. Pure. Errors: as nsp_head_share().
 */
nsp_status_t nsp_pack_seq_displs(const nsp_level_view_t *view, int j, int heads,
                                 size_t row_bytes, size_t *displs);

/** Default chunk bytes per peer from which a sequence gets its own in-place
 *  part (NSPCOMM_A2A_DIRECT_MIN overrides it in the nested all-to-all). */
#define NSP_PACK_DIRECT_MIN_BYTES ((size_t)64 << 10)

/**
 * Does sequence j move in a part of its own, in place (1), or batched with
 * the level's other small sequences (0)? Decided from values every rank of
 * the group shares (its length, the degree, H, row_bytes, min_bytes), so all
 * agree: a sequence alone at its level always; otherwise when its average
 * chunk per peer, (s/d) * heads-per-index * row_bytes, is at least
 * min_bytes. Pure.
 */
static inline int nsp_pack_seq_direct(const nsp_level_view_t *view, int j, int heads,
                                      size_t row_bytes, size_t min_bytes)
{
    int64_t per_index = heads >= view->degree ? heads / view->degree : 1;

    return view->nseqs == 1 ||
           (size_t)(view->seq_len[j] / view->degree) * (size_t)per_index * row_bytes >=
               min_bytes;
}

/*
 * Runs: the wire streams above as runs of the buffers themselves, for a
 * transport that sends scattered data without a pack (alltoallv_iov_post).
 * For each peer p with bytes[p] > 0, in the order of its stream, the runs
 * as byte offsets into one side's buffer (adjacent runs merged); peer p's
 * runs are runs[first[p] .. first[p+1]), first has d + 1 entries.
 *   chunks side [L, H, D] (s2h send, h2s receive): per selected token,
 *     peer p's head slice, count[p] * row_bytes bytes at stride H * row_bytes;
 *   block side [T, h_me, D] (s2h receive, h2s send): per selected sequence,
 *     index q's chunk of it, contiguous.
 * With a summing replica mode the receiver adds, which runs cannot do.
 */
typedef struct nsp_pack_run {
    size_t off; /* bytes from the start of the side's buffer */
    size_t len;
} nsp_pack_run_t;

/** Most runs either side of a level can have: (tokens of this rank's
 *  chunks + sequences) * d. Pure. */
size_t nsp_pack_runs_max(const nsp_level_view_t *view);

/** The chunks side's runs (room for nsp_pack_runs_max). Pure. Errors: as
 *  nsp_head_share(). */
nsp_status_t nsp_pack_runs_chunks(const nsp_level_view_t *view, const unsigned char *sel,
                                  int heads, size_t row_bytes, const size_t *bytes,
                                  nsp_pack_run_t *runs, size_t *first);

/** The block side's runs (room for nsp_pack_runs_max). Pure. Errors: as
 *  nsp_head_share(). */
nsp_status_t nsp_pack_runs_block(const nsp_level_view_t *view, const unsigned char *sel,
                                 int heads, size_t row_bytes, const size_t *bytes,
                                 nsp_pack_run_t *runs, size_t *first);

/** The shortest run of the chunks side: (heads of an index) * row_bytes,
 *  the same on every rank of the group (what the iov-or-pack choice reads).
 *  0 when heads and degree do not divide one another. Pure. */
size_t nsp_pack_run_min(const nsp_level_view_t *view, int heads, size_t row_bytes);

#endif /* NSP_ATTN_SP_PACK_H_ */
